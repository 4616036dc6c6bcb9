//! The flags of the commands that run an agent (`run`, `chat`, `serve`), as clap reads them.
//! [`AgentPlan::resolve`](super::plan::AgentPlan::resolve) turns them, with the environment and
//! the config file, into what the commands use.

use std::path::PathBuf;

use clap::Args;

use super::session::StoreArgs;
use crate::config::ModelArgs;

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
    /// Offer only these tools to the model: built-in, MCP (by the name the agent sees them by)
    /// and script tools, comma-separated or repeated; also "tools": [...] in the config
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Offer none of the built-in tools (current_time, calculate, the file tools): only MCP and
    /// script tools
    #[arg(long)]
    pub no_builtin_tools: bool,
    /// Run calls of TOOL without asking, when PATTERN (a glob over the tool's path, or
    /// ARG=GLOB) matches; repeatable; also "permissions": {"allow": [...]} in the config
    #[arg(long = "allow", value_name = "TOOL[:PATTERN]")]
    pub allow: Vec<String>,
    /// Decline calls of TOOL without asking, when PATTERN matches; deny wins over every allow;
    /// repeatable; also "permissions": {"deny": [...]} in the config
    #[arg(long = "deny", value_name = "TOOL[:PATTERN]")]
    pub deny: Vec<String>,
    /// The model's context window in tokens, for compaction [default: the model's own; the
    /// embedded model's is 8192] (config: context_window)
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
    /// Compact the conversation (summarise older messages) when a request passes this share of
    /// the context window [default: 0.8] (config: compact_at)
    #[arg(long, value_name = "RATIO", value_parser = compact_ratio)]
    pub compact_at: Option<f64>,
    #[command(flatten)]
    pub memory: super::memory::MemoryArgs,
    /// Retrieve from this knowledge base (made with `agentry kb add`) before each reply, and
    /// give the model the tool retrieve_knowledge; repeatable (config: knowledge)
    #[arg(long = "knowledge", value_name = "NAME")]
    pub knowledge: Vec<String>,
    /// Search the knowledge bases with the user's message as it is, without having the model
    /// rewrite it into a search query first (config: rewrite_query)
    #[arg(long)]
    pub no_rewrite_query: bool,
    /// Give the agent a plan notebook: tools to break a complex task into subtasks and work
    /// through them, a reminder of the plan before each step, and (with --session) the plan kept
    /// with the session (config: "plan": true)
    #[arg(long)]
    pub plan: bool,
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

/// A ratio in (0, 1].
fn compact_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
        _ => Err(format!("{text:?} is not a ratio between 0 and 1 (such as 0.8)")),
    }
}
