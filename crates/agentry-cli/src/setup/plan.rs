//! The options of a command that runs an agent, resolved once: flags, then the environment, then
//! the config file, read and checked before anything loads or starts, so that a mistake stops
//! the command without side effects.

use std::path::PathBuf;

use agentry::agent::Compaction;
use agentry::mcp::McpServerConfig;
use agentry::tool::PermissionRules;
use agentry::usage::{PriceTable, ReplyBudget};
use agentry_store::PendingApprovals;
use anyhow::Context;

use super::args::{AgentArgs, ScriptArgs};
use super::mcp::load_mcp_servers;
use super::memory::{EmbeddingPlan, MemoryPlan, embedding_plan, memory_plan};
use super::session::StoreArgs;
use super::tools::ToolSelection;
use crate::config::{ConfigFile, ProviderConfig, load_config_file, provider_config, tool_shim};

/// What a command's agent is made of, every option resolved.
pub struct AgentPlan {
    /// The model to load.
    pub provider: ProviderConfig,
    /// The only directory the file tools touch (resolved).
    pub workdir: PathBuf,
    /// The MCP servers to start.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Where script tools come from.
    pub scripts: ScriptArgs,
    /// Which tools are offered.
    pub tools: ToolSelection,
    /// The system prompt; `None` for the default one (which names the MCP servers that start).
    pub system: Option<String>,
    /// Rounds before the agent must summarise.
    pub max_iters: usize,
    /// Calls of one answer run concurrently.
    pub parallel: bool,
    /// Calls written as text are run.
    pub tool_shim: bool,
    /// Token and cost limits per reply.
    pub budget: ReplyBudget,
    /// Prices per model, for costs and the cost budget.
    pub prices: PriceTable,
    /// The permission rules (`--allow`, `--deny`, `"permissions"`).
    pub permissions: PermissionRules,
    /// The agent has a plan notebook (`--plan`).
    pub plan_notebook: bool,
    /// When the conversation is compacted (`--context-window`, `--compact-at`).
    pub compaction: Compaction,
    /// Long-term memory (`--long-term-memory`), if any.
    pub memory: Option<MemoryPlan>,
    /// The knowledge bases (`--knowledge`), with the database they are in.
    pub knowledge: Vec<String>,
    /// The model rewrites the question for them.
    pub rewrite_query: bool,
    /// Where memory and knowledge vectors come from.
    pub embedding: EmbeddingPlan,
    /// The database of memory and knowledge.
    pub store: StoreArgs,
    /// The session continued (`--session`), if any.
    pub session: Option<SessionPlan>,
    /// The sub-agents the agent calls as tools (`"agents"` in the config).
    pub agents: Vec<SubAgentPlan>,
    /// The config file, for what the command reads besides (script tools' settings).
    pub file: ConfigFile,
}

/// A sub-agent to build: a tool of the agent that runs a reply of its own.
pub struct SubAgentPlan {
    /// Its name, the name of its tool.
    pub name: String,
    /// What its tool's description says.
    pub description: String,
    /// Its system prompt; `None` for the default one.
    pub system: Option<String>,
    /// Its own model; `None`: the agent's.
    pub provider: Option<ProviderConfig>,
    /// The only tools it may use; `None`: all of the agent's (not the sub-agents).
    pub tools: Option<Vec<String>>,
}

/// The durable session a command continues.
pub struct SessionPlan {
    /// Its name.
    pub name: String,
    /// Where it is kept.
    pub store: StoreArgs,
    /// What becomes of calls left waiting for approval.
    pub pending: PendingApprovals,
}

impl AgentPlan {
    /// Reads the config file and resolves every option of `args`; fails on anything wrong with
    /// them (a bad file, rule, directory or provider setting), before anything starts.
    pub fn resolve(args: &AgentArgs) -> anyhow::Result<Self> {
        let file = load_config_file(args.model.config.as_deref())?;
        let store = args.store.clone().with_config(file.db.as_deref());
        let provider = provider_config(&args.model, &file)?;
        let workdir = args
            .workdir
            .canonicalize()
            .with_context(|| format!("the working directory {} is not usable", args.workdir.display()))?;
        anyhow::ensure!(
            workdir.is_dir(),
            "the working directory {} is not a directory",
            workdir.display()
        );
        let mcp_servers = load_mcp_servers(args.mcp_config.as_deref(), args.no_mcp)?;
        Ok(AgentPlan {
            provider,
            workdir,
            mcp_servers,
            tools: ToolSelection::new(
                args.tools.as_deref(),
                file.tools.as_deref(),
                args.no_builtin_tools,
            ),
            scripts: ScriptArgs {
                tools_dirs: args.scripts.tools_dirs.clone(),
                allow_script_network: args.scripts.allow_script_network,
            },
            system: args.system.clone().or_else(|| file.system_prompt.clone()),
            max_iters: args.max_iters.or(file.max_iters).unwrap_or(10),
            parallel: args.parallel,
            tool_shim: tool_shim(&args.model, &file),
            budget: ReplyBudget {
                max_tokens: args.max_tokens_per_reply.or(file.max_tokens_per_reply),
                max_cost: args.max_cost_per_reply.or(file.max_cost_per_reply),
            },
            prices: file.prices.clone(),
            permissions: permission_rules(args, &file)?,
            plan_notebook: args.plan || file.plan.unwrap_or(false),
            compaction: compaction(args, &file)?,
            memory: memory_plan(&args.memory, &store, &file),
            knowledge: if args.knowledge.is_empty() {
                file.knowledge.clone()
            } else {
                args.knowledge.clone()
            },
            rewrite_query: !args.no_rewrite_query && file.rewrite_query.unwrap_or(true),
            embedding: embedding_plan(&args.memory.embedding, &file),
            session: args.session.as_ref().map(|name| SessionPlan {
                name: name.clone(),
                store: store.clone(),
                pending: match args.close_pending {
                    true => PendingApprovals::Close,
                    false => PendingApprovals::Keep,
                },
            }),
            agents: sub_agents(args, &file)?,
            store,
            file,
        })
    }
}

/// The config's sub-agents, each model setting it gives over the agent's.
fn sub_agents(args: &AgentArgs, file: &ConfigFile) -> anyhow::Result<Vec<SubAgentPlan>> {
    file.agents
        .iter()
        .map(|(name, sub)| {
            anyhow::ensure!(
                !sub.description.trim().is_empty(),
                "the sub-agent {name:?} needs a \"description\": what the agent's model reads to choose it"
            );
            let own_model = sub.model.is_some() || sub.base_url.is_some() || sub.provider.is_some();
            let provider = match own_model {
                true => {
                    let mut model = args.model.clone();
                    model.model = sub.model.clone().or(model.model);
                    model.base_url = sub.base_url.clone().or(model.base_url);
                    model.provider = sub.provider.or(model.provider);
                    // A cassette records or replays the agent's own model.
                    (model.record, model.replay) = (None, None);
                    Some(provider_config(&model, file).with_context(|| format!("the sub-agent {name:?}"))?)
                }
                false => None,
            };
            Ok(SubAgentPlan {
                name: name.clone(),
                description: sub.description.clone(),
                system: sub.system_prompt.clone(),
                provider,
                tools: sub.tools.clone(),
            })
        })
        .collect()
}

/// Compaction as the flags and the config file set it.
fn compaction(args: &AgentArgs, file: &ConfigFile) -> anyhow::Result<Compaction> {
    let mut compaction = Compaction::new();
    if let Some(window) = args.context_window.or(file.context_window) {
        anyhow::ensure!(
            window >= 256,
            "the context window must be at least 256 tokens, not {window}"
        );
        compaction = compaction.context_window(window);
    }
    if let Some(ratio) = args.compact_at.or(file.compact_at) {
        anyhow::ensure!(
            ratio > 0.0 && ratio <= 1.0,
            "compact_at must be a ratio between 0 and 1 (such as 0.8), not {ratio}"
        );
        compaction = compaction.compact_at(ratio);
    }
    Ok(compaction)
}

/// The permission rules of the flags and the config file.
fn permission_rules(args: &AgentArgs, file: &ConfigFile) -> anyhow::Result<PermissionRules> {
    let mut rules = PermissionRules::new();
    for rule in args.allow.iter().chain(&file.permissions.allow) {
        rules = rules.allow(rule)?;
    }
    for rule in args.deny.iter().chain(&file.permissions.deny) {
        rules = rules.deny(rule)?;
    }
    Ok(rules)
}
