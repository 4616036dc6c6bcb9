//! `agentry run "<prompt>"`: one reply, streamed to the terminal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agentry::agent::{AgentError, ReActAgent};
use agentry::message::Msg;
use agentry::model::{
    AnthropicChatModel, ChatModel, ModelError, OpenAiChatModel, RecordingModel, ReplayModel, TimeoutLimit,
};
use agentry::tool::{PermissionRules, RuleEffect, Toolkit};
use anyhow::Context;
use clap::Args;

use crate::builtin::register_builtin_tools;
use crate::config::{ConfigFile, ModelArgs, ProviderConfig, load_config_file, provider_config, tool_shim};
use crate::mcp::{McpServers, load_mcp_servers};
use crate::sanitize;
use crate::session::{Outcome, Terminal};
use crate::sessions::{StoreArgs, open_session, resume_waiting_calls};
use agentry_store::{PendingApprovals, SessionMemory};

/// Exit code for a configuration problem (the same as clap's usage errors).
pub const EXIT_CONFIG: u8 = 2;
/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code after SIGTERM (128 + SIGTERM).
pub const EXIT_TERMINATED: u8 = 143;

/// Where script tools come from, and what they may do.
#[derive(Debug, Args, Default)]
pub struct ScriptArgs {
    /// A folder of script tools: each subfolder with an assistant_tool.json and its code
    /// (assistant_tool.tsx, .ts or .js) is one tool (repeatable; also `tools_dirs` in the config)
    #[arg(long = "tools-dir", value_name = "DIR")]
    pub tools_dirs: Vec<PathBuf>,
    /// Let script tools whose manifest sets "network": true use fetch
    #[arg(long)]
    pub allow_script_network: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to ask the agent
    pub prompt: String,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Options of the commands that run an agent.
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Reasoning/acting rounds before the agent must summarise
    #[arg(long, value_name = "N")]
    pub max_iters: Option<usize>,
    /// Run the tool calls of one model answer concurrently
    #[arg(long)]
    pub parallel: bool,
    /// Directory the file tools may read (nothing outside it)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workdir: PathBuf,
    /// Replace the default system prompt
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// MCP servers whose tools the agent may use (JSON, `{"mcpServers": {...}}` as for Claude
    /// Desktop) [default: $XDG_CONFIG_HOME/agentry/mcp.json or ~/.config/agentry/mcp.json]
    #[arg(long, value_name = "FILE", conflicts_with = "no_mcp")]
    pub mcp_config: Option<PathBuf>,
    /// Do not read the default MCP config file
    #[arg(long)]
    pub no_mcp: bool,
    #[command(flatten)]
    pub scripts: ScriptArgs,
    /// After the reply, print its tokens (cached and reasoning ones apart) and cost, and what
    /// the local model did: load time, tokens per second
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Stop a reply once it has used this many tokens, as a cancel (config:
    /// max_tokens_per_reply)
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens_per_reply: Option<u64>,
    /// Stop a reply once it has cost this many US dollars, as a cancel; needs the model's price
    /// in the config's "prices" (config: max_cost_per_reply)
    #[arg(long, value_name = "USD")]
    pub max_cost_per_reply: Option<f64>,
    /// Run calls of TOOL without asking, when PATTERN (a glob over the tool's path, or
    /// ARG=GLOB) matches; repeatable; also "permissions": {"allow": [...]} in the config
    #[arg(long = "allow", value_name = "TOOL[:PATTERN]")]
    pub allow: Vec<String>,
    /// Decline calls of TOOL without asking, when PATTERN matches; deny wins over every allow;
    /// repeatable; also "permissions": {"deny": [...]} in the config
    #[arg(long = "deny", value_name = "TOOL[:PATTERN]")]
    pub deny: Vec<String>,
    /// Continue the conversation kept under this name, or start it: every message and tool
    /// call is stored (see `agentry sessions`) and survives a crash
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// With --session: close tool calls that were waiting for approval when the last run
    /// stopped, as interrupted, instead of asking about them again
    #[arg(long, requires = "session")]
    pub close_pending: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

fn default_system_prompt(workdir: &std::path::Path, mcp: &McpServers) -> String {
    let mut prompt = format!(
        "You are Agentry, a helpful assistant in a terminal. You can tell the time, do exact arithmetic, and \
         list, read, search and (with the user's approval) write files in the working directory {}. Use a \
         tool whenever it gives a more reliable answer than guessing. Answer concisely.",
        workdir.display()
    );
    if !mcp.is_empty() {
        prompt.push_str(&format!(
            " You also have tools from MCP servers ({}); use them when they fit the task.",
            mcp.names().join(", ")
        ));
    }
    prompt
}

/// An agent and the MCP servers it uses (close them when done).
pub struct Setup {
    /// The agent, its toolkit holding the built-in and MCP tools.
    pub agent: ReActAgent,
    /// The servers behind its MCP tools.
    pub mcp: McpServers,
    /// The local model, if the agent runs one (for `--verbose`).
    pub local: LocalFigures,
    /// The durable session the agent's memory lives in (`--session`), for its token ledger.
    pub session: Option<Arc<SessionMemory>>,
}

/// The model the configuration names; a local one is fetched if needed and loaded here
/// (seconds for a 1 GB file).
pub(crate) async fn build_model(config: ProviderConfig) -> anyhow::Result<Arc<dyn ChatModel>> {
    Ok(build_model_with_figures(config).await?.0)
}

/// A local model, kept to read its figures (`--verbose`).
#[cfg(feature = "local")]
pub(crate) type LocalFigures = Option<agentry_local::LocalModel>;
/// Nothing to read without the local provider.
#[cfg(not(feature = "local"))]
pub(crate) type LocalFigures = Option<std::convert::Infallible>;

/// [`build_model`], and the local model itself when it is one.
pub(crate) async fn build_model_with_figures(
    config: ProviderConfig,
) -> anyhow::Result<(Arc<dyn ChatModel>, LocalFigures)> {
    match config {
        ProviderConfig::Replay(path) => Ok((Arc::new(ReplayModel::open(path)?), None)),
        ProviderConfig::Record { path, inner } => {
            let (model, local) = Box::pin(build_model_with_figures(*inner)).await?;
            let recording = RecordingModel::create(model, &path)
                .with_context(|| format!("cannot create the cassette {}", path.display()))?;
            Ok((Arc::new(recording), local))
        }
        ProviderConfig::OpenAi(config) => Ok((Arc::new(OpenAiChatModel::new(config)?), None)),
        ProviderConfig::Anthropic(config) => Ok((Arc::new(AnthropicChatModel::new(config)?), None)),
        #[cfg(feature = "local")]
        ProviderConfig::Local {
            model,
            implicit,
            constrain_calls,
        } => {
            let local = load_local_model(model, implicit, constrain_calls).await?;
            Ok((Arc::new(local.clone()), Some(local)))
        }
        #[cfg(not(feature = "local"))]
        ProviderConfig::Local { .. } => anyhow::bail!(
            "this agentry was built without the local provider (cargo feature `local`): \
             give an OpenAI-compatible server with --base-url or OPENAI_BASE_URL"
        ),
    }
}

#[cfg(feature = "local")]
async fn load_local_model(
    model: crate::config::LocalModelChoice,
    implicit: bool,
    constrain_calls: bool,
) -> anyhow::Result<agentry_local::LocalModel> {
    use crate::config::LocalModelChoice;
    let model_label = match &model {
        LocalModelChoice::File(path) => path.display().to_string(),
        LocalModelChoice::Named(name) => name.clone(),
    };
    if implicit {
        eprintln!(
            "agentry: no model server is configured, so the answer comes from the local model {} \
             (on this CPU). For a remote model: --provider openai with --base-url/OPENAI_BASE_URL \
             and OPENAI_API_KEY; see `agentry model list` for local ones.",
            model_label
        );
    }
    let cache = agentry_local::ModelCache::from_env()?;
    let (path, name) = match model {
        LocalModelChoice::File(path) => (path, None),
        LocalModelChoice::Named(name) => {
            let path = crate::models::pull(&cache, &name)
                .await
                .with_context(|| format!("the local model {name} is not available"))?;
            (path, Some(name))
        }
    };
    let mut config = agentry_local::LocalModelConfig::default()
        .constrain_calls(constrain_calls)
        .prefix_cache_dir(cache.root().join("prefixes"));
    if let Some(name) = name {
        config = config.name(name);
    }
    let loaded = tokio::task::spawn_blocking(move || agentry_local::LocalModel::load(&path, config))
        .await
        .context("loading the local model stopped")??;
    Ok(loaded)
}

/// One reply's tokens and cost, as `--verbose` and `/usage` print them.
pub(crate) fn ledger_line(usage: &agentry::model::ChatUsage, cost: Option<f64>) -> String {
    let mut line = format!("usage: {} tokens in", usage.input_tokens);
    if usage.cache_read_tokens + usage.cache_write_tokens > 0 {
        line.push_str(&format!(
            " ({} read from the cache, {} written to it)",
            usage.cache_read_tokens, usage.cache_write_tokens
        ));
    }
    line.push_str(&format!(", {} out", usage.output_tokens));
    if usage.reasoning_tokens > 0 {
        line.push_str(&format!(" ({} reasoning)", usage.reasoning_tokens));
    }
    match cost {
        Some(cost) => line.push_str(&format!("; cost ${cost:.4}")),
        None => line.push_str("; cost unknown (no price for this model in the config's \"prices\")"),
    }
    line
}

/// `--verbose`: what the local model did, on stderr.
#[cfg(feature = "local")]
pub(crate) fn print_local_figures(local: &LocalFigures) {
    let Some(model) = local else { return };
    let stats = model.stats();
    let t = &stats.totals;
    eprintln!(
        "local model: loaded in {:.1} s; {} generations; prompt {} tokens ({} from the cache) at {:.1} tok/s; \
         generated {} tokens at {:.1} tok/s ({} chosen by the call constraint)",
        stats.load_time.as_secs_f64(),
        t.calls,
        t.prompt_tokens,
        t.reused_tokens,
        t.prompt_tokens_per_second(),
        t.generated_tokens,
        t.generation_tokens_per_second(),
        t.corrected_tokens
    );
}

/// Nothing to print without the local provider.
#[cfg(not(feature = "local"))]
pub(crate) fn print_local_figures(_: &LocalFigures) {}

/// Builds the agent: the model, the built-in tools, and the tools of the MCP servers that start.
pub async fn build_agent(args: &AgentArgs) -> anyhow::Result<Setup> {
    let file = load_config_file(args.model.config.as_deref())?;
    // Before the model loads: a session another agentry is using stops the command at once.
    let session = match &args.session {
        Some(name) => {
            let pending = if args.close_pending {
                PendingApprovals::Close
            } else {
                PendingApprovals::Keep
            };
            Some(
                open_session(
                    &args.store,
                    name,
                    &serde_json::json!({"agent": "agentry"}),
                    pending,
                )
                .await?,
            )
        }
        None => None,
    };
    let Recipe {
        builder,
        mcp,
        local,
        toolkit: _,
    } = recipe(args, file).await?;
    let built = match &session {
        Some(memory) => memory
            .attach(builder())
            .await
            .map_err(anyhow::Error::from)
            .and_then(|builder| Ok(builder.build()?)),
        None => builder().build().map_err(anyhow::Error::from),
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

/// What makes an agent of the command's options: its builder (as often as needed: the server
/// makes one agent per session), and what it shares.
pub struct Recipe {
    /// A builder with the model, tools, prompt and limits set; memory and hooks are the caller's.
    pub builder: Box<dyn Fn() -> agentry::agent::ReActAgentBuilder + Send + Sync>,
    /// The tools every agent of the recipe has.
    pub toolkit: Toolkit,
    /// The servers behind its MCP tools (close them when done).
    pub mcp: McpServers,
    /// The local model, if it runs one.
    pub local: LocalFigures,
}

/// Loads the model, starts the MCP servers and registers the tools `args` name.
pub async fn recipe(args: &AgentArgs, file: ConfigFile) -> anyhow::Result<Recipe> {
    // Before anything loads or starts: a bad rule stops the command without side effects.
    let permissions = permission_rules(args, &file)?;
    let (model, local) = build_model_with_figures(provider_config(&args.model, &file)?).await?;
    let workdir = args
        .workdir
        .canonicalize()
        .with_context(|| format!("the working directory {} is not usable", args.workdir.display()))?;
    anyhow::ensure!(
        workdir.is_dir(),
        "the working directory {} is not a directory",
        workdir.display()
    );
    // Read before anything starts, so that a bad file stops the command without side effects.
    let servers = load_mcp_servers(args.mcp_config.as_deref(), args.no_mcp)?;
    let toolkit = Toolkit::new();
    register_builtin_tools(&toolkit, &workdir)?;
    let mut scripts = crate::tools::load_script_tools(&args.scripts, &file);
    scripts.register(&toolkit);
    for error in &scripts.errors {
        eprintln!(
            "warning: a script tool was not loaded: {}",
            sanitize::multiline(&error.to_string())
        );
    }
    let mcp = McpServers::start(&servers, &toolkit).await;
    let shim = tool_shim(&args.model, &file);
    let system = args
        .system
        .clone()
        .or(file.system_prompt)
        .unwrap_or_else(|| default_system_prompt(&workdir, &mcp));
    let max_iters = args.max_iters.or(file.max_iters).unwrap_or(10);
    let budget = agentry::usage::ReplyBudget {
        max_tokens: args.max_tokens_per_reply.or(file.max_tokens_per_reply),
        max_cost: args.max_cost_per_reply.or(file.max_cost_per_reply),
    };
    if budget.max_cost.is_some() && file.prices.price(model.model_name()).is_none() {
        eprintln!(
            "warning: --max-cost-per-reply needs the price of {:?} in the config's \"prices\"; without it only tokens are limited",
            sanitize::line(model.model_name())
        );
    }
    if let Err(e) = check_permission_rules(&permissions, &toolkit) {
        mcp.close().await;
        return Err(e);
    }
    let prices = file.prices.clone();
    let parallel = args.parallel;
    let tools = toolkit.clone();
    let builder = move || {
        ReActAgent::builder()
            .name("agentry")
            .sys_prompt(system.clone())
            .model(Arc::clone(&model))
            .toolkit(tools.clone())
            .prices(prices.clone())
            .budget(budget)
            .max_iters(max_iters)
            .parallel_tool_calls(parallel)
            .tool_shim(shim)
            .permissions(permissions.clone())
    };
    Ok(Recipe {
        builder: Box::new(builder),
        toolkit,
        mcp,
        local,
    })
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

/// Checks `rules` against the tools: a deny rule whose pattern can never match a tool it names
/// (the tool names no argument for patterns) is refused, as it would look like protection and
/// be none; rules that name no tool, or allow nothing, are warned about.
fn check_permission_rules(rules: &PermissionRules, toolkit: &Toolkit) -> anyhow::Result<()> {
    let tools = toolkit.tool_names();
    for rule in rules.rules() {
        let named: Vec<&String> = tools.iter().filter(|t| rule.names_tool(t)).collect();
        if named.is_empty() {
            eprintln!(
                "warning: the permission rule {} names no tool agentry has",
                sanitize::line(&rule.to_string())
            );
        }
        let blind: Vec<&str> = named
            .iter()
            .filter(|t| rule.needs_subject() && toolkit.policy(t).rule_subject.is_none())
            .map(|t| t.as_str())
            .collect();
        if blind.is_empty() {
            continue;
        }
        let why = format!(
            "the permission rule {} has a pattern, but {} names no argument for it: write TOOL:ARG=GLOB",
            sanitize::line(&rule.to_string()),
            sanitize::line(&blind.join(", "))
        );
        match rule.effect() {
            RuleEffect::Deny => anyhow::bail!(why),
            RuleEffect::Allow => eprintln!("warning: {why}"),
        }
    }
    Ok(())
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

/// Prints a failed reply's error (with the setup hint when the server is unreachable).
pub fn report_error(e: &AgentError) {
    // The error may quote the model server's answer.
    eprintln!("error: {}", sanitize::multiline(&e.to_string()));
    match e {
        AgentError::Model(
            ModelError::Connect { .. }
            | ModelError::Timeout {
                limit: TimeoutLimit::Connect,
                ..
            },
        ) => eprintln!("{SETUP_HINT}"),
        AgentError::Model(ModelError::Timeout { .. }) => eprintln!("{TIMEOUT_HINT}"),
        AgentError::Model(ModelError::Replay(_)) => eprintln!("{REPLAY_HINT}"),
        _ => {}
    }
}

pub async fn run(args: RunArgs) -> ExitCode {
    // First, so that SIGTERM is handled from now on.
    let mut terminal = Terminal::new(false);
    let Setup {
        agent,
        mcp,
        local,
        session,
    } = match agent_or_exit(&args.agent).await {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let resumed = resume_waiting_calls(session.as_deref(), &agent, &mut terminal).await;
    let outcome = match resumed {
        Some(outcome @ (Outcome::Quit | Outcome::Terminated | Outcome::Finished { result: Err(_), .. })) => {
            outcome
        }
        _ => terminal.drive(agent.start_reply(Msg::user(args.prompt))).await,
    };
    mcp.close().await;
    if args.agent.verbose {
        if let Some((_, usage)) = &terminal.last_usage {
            eprintln!("{}", ledger_line(usage, terminal.last_cost));
        }
        print_local_figures(&local);
    }
    match outcome {
        Outcome::Quit => ExitCode::from(EXIT_INTERRUPTED),
        Outcome::Terminated => ExitCode::from(EXIT_TERMINATED),
        Outcome::Finished {
            result: Ok(_),
            cancelled,
        } => {
            if cancelled {
                ExitCode::from(EXIT_INTERRUPTED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Outcome::Finished { result: Err(e), .. } => {
            report_error(&e);
            ExitCode::FAILURE
        }
    }
}

const REPLAY_HINT: &str = "hint: --replay serves only the requests of the recorded run: the same prompt, \
     options, tools and working directory. Record the new run with --record FILE.";

const TIMEOUT_HINT: &str = "hint: the server took too long. A server still working may need more time: \
     --read-timeout (silence while streaming), --request-timeout (the whole answer, and the wait for one \
     with --no-stream), or the same keys in the config file. A timeout is not retried.";

const SETUP_HINT: &str = "hint: agentry talks to any OpenAI-compatible chat-completions API. Point it at one with \
     --base-url/OPENAI_BASE_URL (e.g. http://127.0.0.1:8080/v1 for llama.cpp's llama-server, \
     http://127.0.0.1:11434/v1 for Ollama), name the model with --model/AGENTRY_MODEL, and set OPENAI_API_KEY if \
     the server needs one.";
