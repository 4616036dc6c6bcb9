//! `agentry mcp list`: every configured MCP server started, with its status and the tools the
//! agent sees.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry::mcp::{McpError, McpServerConfig, McpStatus, McpTransport};
use agentry::tool::Toolkit;

use crate::setup::mcp::{
    McpServers, STDERR_LINES_SHOWN, default_mcp_config_path, failure, last_lines, load_mcp_servers, start_all,
};
use crate::terminal::output::outln;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// Exit code of `mcp list` when a server is down.
const EXIT_DOWN: u8 = 1;
/// Exit code for a configuration problem.
const EXIT_CONFIG: u8 = 2;
/// Longest tool description shown by `mcp list` (its first line, cut here).
const DESCRIPTION_CHARS: usize = 80;

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
    /// Serve the agent as an MCP server, over stdio (or streamable HTTP at /mcp with --addr):
    /// a tool that runs a reply for a prompt, cancellable, with progress, and approvals asked
    /// of the client through elicitation (declined when it cannot be asked)
    Serve(Box<super::mcp_serve::McpServeArgs>),
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
        McpCommand::Serve(args) => super::mcp_serve::mcp_serve(*args).await,
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
            (Some(path), _) => outln!("No MCP servers in {}.", path.display()),
            (None, Some(path)) if path.is_file() => outln!("No MCP servers in {}.", path.display()),
            (None, Some(path)) => outln!(
                "No MCP servers configured: {} does not exist; write one there or pass --mcp-config FILE.",
                path.display()
            ),
            (None, None) => outln!("No MCP servers configured: pass --mcp-config FILE."),
        }
        return ExitCode::SUCCESS;
    }
    // Registered as `run` and `chat` do, next to the built-in tools, so that the names shown
    // are the ones the agent sees (prefixed on a clash).
    let toolkit = Toolkit::new();
    let workdir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    if let Err(e) = agentry_tools::register_builtin_tools(&toolkit, &workdir) {
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
        outln!(
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
            outln!("{name}: {connected}");
            outln!("{transport}");
            outln!(
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
                outln!("{}", line.trim_end());
            }
        }
        Err(e) => {
            let (reason, stderr) = failure(e);
            outln!("{name}: down");
            outln!("{transport}");
            outln!("  error: {reason}");
            for line in last_lines(&stderr, STDERR_LINES_SHOWN) {
                outln!("  stderr: {line}");
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
