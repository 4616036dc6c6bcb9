//! MCP servers in the `agentry` command: the `mcpServers` file (`--mcp-config`), their tools
//! beside the built-in ones, and `agentry mcp list`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentry::mcp::{
    McpClient, McpError, McpServerConfig, McpStatus, McpToolInfo, McpToolOptions, McpTransport,
    mcp_tool_name, parse_mcp_servers,
};
use agentry::tool::{NamesakeStrategy, Toolkit};
use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// Exit code of `mcp list` when a server is down.
const EXIT_DOWN: u8 = 1;
/// Exit code for a configuration problem.
const EXIT_CONFIG: u8 = 2;
/// Stderr lines of a failed server shown with its warning: enough to see the error, not a
/// whole stack trace.
const STDERR_LINES_SHOWN: usize = 5;
/// Longest tool description shown by `mcp list` (its first line, cut here).
const DESCRIPTION_CHARS: usize = 80;

/// `$XDG_CONFIG_HOME/agentry/mcp.json` or `~/.config/agentry/mcp.json` (like `config.json`).
fn default_mcp_config_path() -> Option<PathBuf> {
    Some(crate::config::config_dir()?.join("mcp.json"))
}

/// The servers of the file named by `--mcp-config`, or of the default file when it exists
/// (unless `no_default`). No file means no servers; a named file that is missing or invalid is
/// an error naming it.
pub fn load_mcp_servers(explicit: Option<&Path>, no_default: bool) -> anyhow::Result<Vec<McpServerConfig>> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None if no_default => return Ok(Vec::new()),
        None => match default_mcp_config_path() {
            Some(p) if p.is_file() => p,
            _ => return Ok(Vec::new()),
        },
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read MCP config file {}", path.display()))?;
    parse_mcp_servers(&text).with_context(|| format!("invalid MCP config file {}", path.display()))
}

/// A started server and the tools it offers.
struct Started {
    client: McpClient,
    tools: Vec<McpToolInfo>,
}

/// Starts one server and lists its tools within its start-up limit; a server that cannot list
/// them is stopped again, since it is of no use.
async fn start(config: McpServerConfig) -> Result<Started, McpError> {
    let (client, tools) = McpClient::start(config).await?;
    Ok(Started { client, tools })
}

/// Starts every server at once: a slow one does not delay the others.
async fn start_all(servers: &[McpServerConfig]) -> Vec<Result<Started, McpError>> {
    futures::future::join_all(servers.iter().cloned().map(start)).await
}

/// What went wrong, without the server's name (the caller says it), and the server's last
/// stderr lines.
fn failure(error: &McpError) -> (String, Vec<String>) {
    match error {
        McpError::Start {
            reason, stderr_tail, ..
        } => (reason.clone(), stderr_tail.clone()),
        McpError::Down { reason, .. } | McpError::Protocol { reason, .. } => (reason.clone(), Vec::new()),
        other => (other.to_string(), Vec::new()),
    }
}

fn last_lines(lines: &[String], n: usize) -> &[String] {
    &lines[lines.len().saturating_sub(n)..]
}

/// The MCP servers an agent uses. Close them when the command ends, so that stdio servers exit.
#[derive(Default)]
pub struct McpServers {
    toolkit: Toolkit,
    clients: Vec<McpClient>,
}

impl McpServers {
    /// Starts the servers and registers their tools in `toolkit`. A server that fails costs a
    /// warning on stderr, not the agent.
    pub async fn start(configs: &[McpServerConfig], toolkit: &Toolkit) -> McpServers {
        let mut started = McpServers {
            toolkit: toolkit.clone(),
            ..McpServers::default()
        };
        // Registered in the file's order once all are up, so that names do not depend on which
        // server answered first.
        for (config, result) in configs.iter().zip(start_all(configs).await) {
            let registered = match result {
                Ok(server) => started.register(server).await.map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = registered {
                warn_unavailable(&config.name, &e);
            }
        }
        started
    }

    /// Registers a started server's tools; the names the agent sees them by, in the server's
    /// order. A server that cannot be registered is closed.
    async fn register(&mut self, server: Started) -> Result<Vec<String>, McpError> {
        let Started { client, tools } = server;
        let taken: BTreeSet<String> = self.toolkit.tool_names().into_iter().collect();
        let clashes: Vec<String> = tools
            .iter()
            .map(|t| mcp_tool_name("", &t.name))
            .filter(|n| taken.contains(n))
            .collect();
        // A clash renames the whole server's tools with one predictable prefix: the model then
        // tells `read_file` from `fs__read_file`, which random suffixes would not make clear.
        let prefix = if clashes.is_empty() {
            String::new()
        } else {
            let prefix = mcp_tool_name(client.name(), "__");
            eprintln!(
                "warning: MCP server \"{}\" has tools named like existing ones ({}); its tools are named {prefix}<tool>",
                client.name(),
                clashes.join(", ")
            );
            prefix
        };
        let expected: BTreeSet<String> = tools.iter().map(|t| mcp_tool_name(&prefix, &t.name)).collect();
        let options = McpToolOptions::for_server(client.config())
            .prefix(prefix)
            .namesake(NamesakeStrategy::Rename);
        match self.toolkit.register_mcp_tools(&client, &tools, options).await {
            Ok(names) => {
                let renamed: Vec<&str> = names
                    .iter()
                    .filter(|n| !expected.contains(*n))
                    .map(String::as_str)
                    .collect();
                if !renamed.is_empty() {
                    eprintln!(
                        "warning: MCP server \"{}\": names taken, tools registered as {}",
                        client.name(),
                        renamed.join(", ")
                    );
                }
                self.clients.push(client);
                Ok(names)
            }
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }

    /// Whether any server's tools were registered.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Names of the servers whose tools were registered, in the file's order.
    pub fn names(&self) -> Vec<&str> {
        self.clients.iter().map(McpClient::name).collect()
    }

    /// Stops following the servers' tool lists and closes them (stdio servers exit).
    pub async fn close(self) {
        for client in &self.clients {
            self.toolkit.remove_mcp_client(client.name());
        }
        futures::future::join_all(self.clients.iter().map(McpClient::close)).await;
    }
}

fn warn_unavailable(name: &str, error: &McpError) {
    let (reason, stderr) = failure(error);
    eprintln!("warning: MCP server \"{name}\" is not available: {reason}");
    for line in last_lines(&stderr, STDERR_LINES_SHOWN) {
        eprintln!("  stderr: {line}");
    }
}

/// `agentry mcp ...`
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Start every configured MCP server and show its status and tools
    ///
    /// Exit code 0 when all are connected, 1 when one is down, 2 for a configuration error.
    List(ListArgs),
}

#[derive(Debug, Args)]
struct ListArgs {
    /// MCP servers (JSON, `{"mcpServers": {...}}` as for Claude Desktop) [default:
    /// $XDG_CONFIG_HOME/agentry/mcp.json or ~/.config/agentry/mcp.json]
    #[arg(long, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// Print a JSON array of {name, transport, status, tools} instead of text
    #[arg(long)]
    json: bool,
}

/// Runs `agentry mcp <command>`.
pub async fn mcp(args: McpArgs) -> ExitCode {
    match args.command {
        McpCommand::List(args) => list(args).await,
    }
}

/// One server as `mcp list` shows it.
struct Listed {
    config: McpServerConfig,
    result: Result<(McpStatus, Vec<ListedTool>), McpError>,
}

/// A tool as the agent sees it.
struct ListedTool {
    /// The name the agent (and the model) calls it by.
    name: String,
    /// Its name on the server.
    server_name: String,
    description: String,
    requires_approval: bool,
}

async fn list(args: ListArgs) -> ExitCode {
    let configs = match load_mcp_servers(args.mcp_config.as_deref(), false) {
        Ok(configs) => configs,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if configs.is_empty() && !args.json {
        match (&args.mcp_config, default_mcp_config_path()) {
            (Some(path), _) => println!("No MCP servers in {}.", path.display()),
            (None, Some(path)) if path.is_file() => println!("No MCP servers in {}.", path.display()),
            (None, Some(path)) => println!(
                "No MCP servers configured: {} does not exist; write one there or pass --mcp-config FILE.",
                path.display()
            ),
            (None, None) => println!("No MCP servers configured: pass --mcp-config FILE."),
        }
        return ExitCode::SUCCESS;
    }
    // Registered as `run` and `chat` do, next to the built-in tools, so that the names shown
    // are the ones the agent sees (prefixed on a clash).
    let toolkit = Toolkit::new();
    let workdir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    if let Err(e) = crate::builtin::register_builtin_tools(&toolkit, &workdir) {
        tracing::debug!("built-in tools not registered for the listing: {e:#}");
    }
    let mut servers = McpServers {
        toolkit: toolkit.clone(),
        ..McpServers::default()
    };
    let mut listed = Vec::with_capacity(configs.len());
    for (config, result) in configs.iter().zip(start_all(&configs).await) {
        let result = match result {
            Ok(started) => {
                let status = started.client.status();
                let tools = started.tools.clone();
                servers.register(started).await.map(|names| {
                    let tools = tools
                        .into_iter()
                        .zip(names)
                        .map(|(tool, name)| ListedTool {
                            requires_approval: toolkit.policy(&name).require_approval,
                            name,
                            server_name: tool.name,
                            description: tool.description,
                        })
                        .collect();
                    (status, tools)
                })
            }
            Err(e) => Err(e),
        };
        listed.push(Listed {
            config: config.clone(),
            result,
        });
    }
    servers.close().await;
    if args.json {
        let array: Vec<Value> = listed.iter().map(listed_json).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&array).unwrap_or_else(|_| "[]".to_owned())
        );
    } else {
        for server in &listed {
            print_listed(server);
        }
    }
    if listed.iter().all(|s| s.result.is_ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DOWN)
    }
}

fn transport_kind(config: &McpServerConfig) -> &'static str {
    match config.transport {
        McpTransport::Stdio { .. } => "stdio",
        McpTransport::Http { .. } => "http",
    }
}

/// The first line of a description, cut to a readable length.
fn summary(description: &str) -> String {
    let line = description.lines().next().unwrap_or("").trim();
    if line.chars().count() > DESCRIPTION_CHARS {
        let cut: String = line.chars().take(DESCRIPTION_CHARS - 1).collect();
        format!("{}…", cut.trim_end())
    } else {
        line.to_owned()
    }
}

/// Server-chosen text for the terminal: control characters (escape sequences that could
/// redraw the screen) are shown escaped, and at most 200 characters are kept.
fn printable(text: &str) -> String {
    const LIMIT: usize = 200;
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == LIMIT {
            out.push('…');
            break;
        }
        if c.is_control() && c != '\n' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn print_listed(server: &Listed) {
    let name = &server.config.name;
    let transport = format!(
        "  {}: {}",
        transport_kind(&server.config),
        server.config.describe()
    );
    match &server.result {
        Ok((status, tools)) => {
            let connected = match status {
                McpStatus::Connected { server, version } => format!("connected ({server} {version})"),
                McpStatus::Down(reason) => format!("down: {reason}"),
            };
            println!("{name}: {connected}");
            println!("{transport}");
            println!(
                "  {} tool{}:",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" }
            );
            let names: Vec<String> = tools.iter().map(|t| printable(&t.name)).collect();
            let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).min(32);
            for (tool, name) in tools.iter().zip(&names) {
                let mut description = summary(&printable(&tool.description));
                if tool.requires_approval {
                    description = format!("[asks] {description}");
                }
                let line = format!("    {name:width$}  {description}");
                println!("{}", line.trim_end());
            }
        }
        Err(e) => {
            let (reason, stderr) = failure(e);
            println!("{name}: down");
            println!("{transport}");
            println!("  error: {reason}");
            for line in last_lines(&stderr, STDERR_LINES_SHOWN) {
                println!("  stderr: {line}");
            }
        }
    }
}

fn listed_json(server: &Listed) -> Value {
    let config = &server.config;
    let transport = match &config.transport {
        McpTransport::Stdio { .. } => json!({"type": "stdio", "command": config.describe()}),
        // Headers are left out: they often hold credentials.
        McpTransport::Http { url, .. } => json!({"type": "http", "url": url}),
    };
    let mut entry = json!({"name": config.name, "transport": transport});
    match &server.result {
        Ok((status, tools)) => {
            entry["status"] = json!("connected");
            if let McpStatus::Connected { server, version } = status {
                entry["server"] = json!({"name": server, "version": version});
            }
            entry["tools"] = tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "server_name": t.server_name,
                        "description": t.description,
                        "requires_approval": t.requires_approval,
                    })
                })
                .collect();
        }
        Err(e) => {
            let (reason, stderr) = failure(e);
            entry["status"] = json!("down");
            entry["error"] = json!(reason);
            entry["stderr"] = json!(last_lines(&stderr, STDERR_LINES_SHOWN));
            entry["tools"] = json!([]);
        }
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_text_is_printed_without_control_characters() {
        assert_eq!(printable("evil\u{1b}[2Jname"), "evil\\u{1b}[2Jname");
        assert_eq!(printable(&"x".repeat(5000)).chars().count(), 201);
        assert_eq!(printable("two\nlines"), "two\nlines", "summary() keeps the first");
    }

    #[test]
    fn summaries_keep_the_first_line_and_cut_long_ones() {
        assert_eq!(summary("Echoes back.\nMore text."), "Echoes back.");
        assert_eq!(summary(""), "");
        let long = summary(&"x".repeat(300));
        assert_eq!(long.chars().count(), DESCRIPTION_CHARS);
        assert!(long.ends_with('…'));
    }
}
