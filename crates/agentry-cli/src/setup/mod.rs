//! What every command that runs an agent (`run`, `chat`, `serve`) shares: its flags
//! ([`args`]), resolved once with the environment and the config file into a plan ([`plan`]),
//! then built: the model ([`model`]), the MCP servers ([`mcp`]), the tools and permission rules
//! ([`tools`]), and the durable session ([`session`]), attached the same way as the server
//! attaches its sessions.

pub mod agents;
pub mod args;
pub mod mcp;
pub mod memory;
pub mod model;
pub mod plan;
pub mod session;
pub mod tools;

use std::process::ExitCode;
use std::sync::Arc;

use agentry::agent::ReActAgent;
use agentry::model::ModelError;
use agentry::plan::{PlanNotebook, register_plan_tools};
use agentry::tool::Toolkit;
use agentry_server::AgentFactory;
use agentry_store::SessionMemory;
use agentry_tools::register_builtin_tools;

use crate::exit::{EXIT_CONFIG, SETUP_HINT};
use crate::terminal::sanitize;
use args::AgentArgs;
use mcp::McpServers;
use memory::UserMemories;
use model::{LocalFigures, build_model_with_figures};
use plan::AgentPlan;
use session::open_session;
use tools::{check_permission_rules, load_script_tools};

/// The agent's name when the config gives none.
pub const DEFAULT_AGENT_NAME: &str = "agentry";

/// An agent and the MCP servers it uses (close them when done).
pub struct Setup {
    /// The agent, its toolkit holding the built-in and MCP tools.
    pub agent: ReActAgent,
    /// The servers behind its MCP tools.
    pub mcp: McpServers,
    /// The local model, if the agent runs one (for `--verbose`).
    pub local: LocalFigures,
    /// The durable session the agent's memory lives in (`--session`).
    pub session: Option<Arc<SessionMemory>>,
}

/// What makes an agent of the command's options: its builder (as often as needed: the server
/// makes one agent per session), and what it shares.
pub struct Recipe {
    /// A builder with the model, tools, prompt, limits and rules set, given the user whose
    /// long-term memory it has (`None`: the plan's, `--user`; a server passes a session's
    /// owner); the session is the caller's (`SessionMemory::attach`).
    pub builder: AgentFactory,
    /// The tools every agent of the recipe has.
    pub toolkit: Toolkit,
    /// The servers behind its MCP tools (close them when done).
    pub mcp: McpServers,
    /// The local model, if it runs one.
    pub local: LocalFigures,
}

/// Builds the agent of `args`: the plan, then (before the model loads, so that a session
/// another agentry is using stops the command at once) the session, then the recipe, attached.
pub async fn build_agent(args: &AgentArgs) -> anyhow::Result<Setup> {
    let plan = AgentPlan::resolve(args)?;
    let session = match &plan.session {
        Some(wanted) => Some(
            open_session(
                &wanted.store,
                &wanted.name,
                &serde_json::json!({"agent": "agentry"}),
                wanted.pending,
            )
            .await?,
        ),
        None => None,
    };
    let Recipe {
        builder,
        mcp,
        local,
        toolkit: _,
    } = recipe(plan).await?;
    let built = match &session {
        Some(memory) => memory
            .attach(builder(None))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|builder| Ok(builder.build()?)),
        None => builder(None).build().map_err(anyhow::Error::from),
    };
    match built {
        Ok(agent) => Ok(Setup {
            agent,
            mcp,
            local,
            session,
        }),
        Err(e) => {
            mcp.close().await;
            Err(e)
        }
    }
}

/// Loads the model, starts the MCP servers and registers the tools the plan names.
pub async fn recipe(plan: AgentPlan) -> anyhow::Result<Recipe> {
    let (model, local) = build_model_with_figures(plan.provider).await?;
    let toolkit = Toolkit::new();
    if plan.tools.builtin {
        register_builtin_tools(&toolkit, &plan.workdir)?;
    }
    let mut scripts = load_script_tools(&plan.scripts, &plan.file);
    scripts.register(&toolkit);
    // Before the MCP servers: their names are chosen against the tools offered.
    plan.tools.apply(&toolkit);
    for error in &scripts.errors {
        eprintln!(
            "warning: a script tool was not loaded: {}",
            sanitize::multiline(&error.to_string())
        );
    }
    // The servers may work in the working directory (MCP roots), and ask the agent's model
    // (sampling, under each server's "sampling" policy).
    let servers: Vec<agentry::mcp::McpServerConfig> = plan
        .mcp_servers
        .iter()
        .map(|server| server.clone().root(plan.workdir.clone()))
        .collect();
    let mcp = McpServers::start(&servers, &toolkit, &plan.tools).await;
    mcp.set_sampling_model(&model);
    agents::register_remote_agents(&plan.file.a2a, &toolkit).await;
    let inherited = agents::Inherited {
        model: Arc::clone(&model),
        permissions: plan.permissions.clone(),
        max_iters: plan.max_iters,
        parallel: plan.parallel,
        tool_shim: plan.tool_shim,
    };
    if let Err(e) = agents::register_sub_agents(&plan.agents, &toolkit, &inherited).await {
        mcp.close().await;
        return Err(e);
    }
    // After the sub-agents, whose names the selection and the rules may give.
    plan.tools.warn_missing(&toolkit);
    if let Err(e) = check_permission_rules(&plan.permissions, &toolkit) {
        mcp.close().await;
        return Err(e);
    }
    let system = plan
        .system
        .unwrap_or_else(|| default_system_prompt(&toolkit, &mcp));
    if plan.budget.max_cost.is_some() && plan.prices.price(model.model_name()).is_none() {
        eprintln!(
            "warning: --max-cost-per-reply needs the price of {:?} in the config's \"prices\"; without it only tokens are limited",
            sanitize::line(model.model_name())
        );
    }
    let (prices, budget, permissions) = (plan.prices, plan.budget, plan.permissions);
    let (max_iters, parallel, shim) = (plan.max_iters, plan.parallel, plan.tool_shim);
    let plan_notebook = plan.plan_notebook;
    let name = plan
        .file
        .name
        .clone()
        .unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
    let compaction = plan.compaction.clone();
    // One embedder for memory and knowledge, loaded only when one of them is used.
    let embedder = match plan.memory.is_some() || !plan.knowledge.is_empty() {
        true => memory::embedder(&plan.embedding).await,
        false => None,
    };
    let long_term = match &plan.memory {
        Some(memory) => match memory::long_term_memory(memory, embedder.clone()) {
            Ok(stored) => Some((Arc::new(stored), memory.mode)),
            Err(e) => {
                mcp.close().await;
                return Err(e);
            }
        },
        None => None,
    };
    let bases: Vec<Arc<agentry_store::StoredKnowledgeBase>> =
        match memory::knowledge_bases(&plan.knowledge, &plan.store, embedder).await {
            Ok(bases) => bases.into_iter().map(Arc::new).collect(),
            Err(e) => {
                mcp.close().await;
                return Err(e);
            }
        };
    let rewrite_query = plan.rewrite_query;
    if plan_notebook {
        // Once, in the shared toolkit: each agent's calls reach its own notebook.
        register_plan_tools(&toolkit, false)?;
    }
    let tools = toolkit.clone();
    let memories = long_term.map(|(memory, mode)| (UserMemories::new(memory), mode));
    let builder = move |user: Option<&str>| {
        let builder = ReActAgent::builder();
        let builder = match plan_notebook {
            true => builder.plan_notebook(PlanNotebook::new()),
            false => builder,
        };
        let builder = match &memories {
            Some((memories, mode)) => builder.long_term_memory(memories.of(user), *mode),
            None => builder,
        };
        let builder = bases
            .iter()
            .fold(builder, |builder, base| builder.knowledge(Arc::clone(base)))
            .rewrite_query(rewrite_query);
        builder
            .name(name.clone())
            .sys_prompt(system.clone())
            .model(Arc::clone(&model))
            .toolkit(tools.clone())
            .prices(prices.clone())
            .budget(budget)
            .max_iters(max_iters)
            .parallel_tool_calls(parallel)
            .tool_shim(shim)
            .permissions(permissions.clone())
            .compaction(compaction.clone())
    };
    Ok(Recipe {
        builder: Arc::new(builder),
        toolkit,
        mcp,
        local,
    })
}

/// Builds the agent, or says what is wrong (exit code 2).
pub async fn agent_or_exit(args: &AgentArgs) -> Result<Setup, ExitCode> {
    build_agent(args).await.map_err(|e| {
        eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
        if e.downcast_ref::<ModelError>().is_some() {
            eprintln!("{SETUP_HINT}");
        }
        ExitCode::from(EXIT_CONFIG)
    })
}

/// The system prompt when none is given: what the offered built-in tools do, and which MCP
/// servers run. It names no path and puts what varies (the tools, the servers) last, so that
/// a local model's saved prompt prefix serves every working directory, and its first part
/// every tool set.
fn default_system_prompt(toolkit: &Toolkit, mcp: &McpServers) -> String {
    let names = toolkit.tool_names();
    let has = |name: &str| names.iter().any(|n| n == name);
    let all_builtin = agentry_tools::BUILTIN_TOOL_NAMES.iter().all(|name| has(name));
    let mut prompt =
        "You are Agentry, a helpful assistant in a terminal. Use a tool whenever it gives a more \
                      reliable answer than guessing. Answer concisely."
            .to_owned();
    if all_builtin {
        prompt.push_str(
            " You can tell the time, do exact arithmetic, and list, read, search and (with the user's \
             approval) write files in the working directory.",
        );
    } else {
        let mut can = Vec::new();
        if has("current_time") {
            can.push("tell the time");
        }
        if has("calculate") {
            can.push("do exact arithmetic");
        }
        if ["list_files", "read_file", "search_files", "write_file"]
            .iter()
            .any(|n| has(n))
        {
            can.push("work with files in the working directory");
        }
        if !can.is_empty() {
            prompt.push_str(&format!(" You can {}.", can.join(", ")));
        }
    }
    if !mcp.is_empty() {
        prompt.push_str(&format!(
            " You also have tools from MCP servers ({}); use them when they fit the task.",
            mcp.names().join(", ")
        ));
    }
    prompt
}
