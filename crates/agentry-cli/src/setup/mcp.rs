//! The MCP servers of a command's agent: the `mcpServers` file (`--mcp-config`, or the default
//! one), started at once, their tools registered beside the built-in ones, and closed when the
//! command ends.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agentry::mcp::{
    McpClient, McpError, McpServerConfig, McpToolInfo, McpToolOptions, mcp_tool_name, parse_mcp_servers,
};
use agentry::tool::{NamesakeStrategy, Toolkit};
use anyhow::Context;

use super::tools::ToolSelection;

/// Stderr lines of a failed server shown with its warning: enough to see the error, not a
/// whole stack trace.
pub(crate) const STDERR_LINES_SHOWN: usize = 5;
/// `$XDG_CONFIG_HOME/agentry/mcp.json` or `~/.config/agentry/mcp.json` (like `config.json`).
pub(crate) fn default_mcp_config_path() -> Option<PathBuf> {
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
pub(crate) struct Started {
    pub(crate) client: McpClient,
    pub(crate) tools: Vec<McpToolInfo>,
}

/// Starts one server and lists its tools within its start-up limit; a server that cannot list
/// them is stopped again, since it is of no use.
async fn start(config: McpServerConfig) -> Result<Started, McpError> {
    let (client, tools) = McpClient::start(config).await?;
    Ok(Started { client, tools })
}

/// Starts every server at once: a slow one does not delay the others.
pub(crate) async fn start_all(servers: &[McpServerConfig]) -> Vec<Result<Started, McpError>> {
    futures::future::join_all(servers.iter().cloned().map(start)).await
}

/// What went wrong, without the server's name (the caller says it), and the server's last
/// stderr lines.
pub(crate) fn failure(error: &McpError) -> (String, Vec<String>) {
    match error {
        McpError::Start {
            reason, stderr_tail, ..
        } => (reason.clone(), stderr_tail.clone()),
        McpError::Down { reason, .. } | McpError::Protocol { reason, .. } => (reason.clone(), Vec::new()),
        other => (other.to_string(), Vec::new()),
    }
}

pub(crate) fn last_lines(lines: &[String], n: usize) -> &[String] {
    &lines[lines.len().saturating_sub(n)..]
}

/// The MCP servers an agent uses. Close them when the command ends, so that stdio servers exit.
#[derive(Default)]
pub struct McpServers {
    pub(crate) toolkit: Toolkit,
    pub(crate) clients: Vec<McpClient>,
    /// Which tools are offered (`--tools`).
    pub(crate) selection: ToolSelection,
}

impl McpServers {
    /// Has `model` answer the servers' sampling requests.
    pub fn set_sampling_model(&self, model: &std::sync::Arc<dyn agentry::model::ChatModel>) {
        for client in &self.clients {
            client.set_sampling_model(std::sync::Arc::clone(model));
        }
    }

    /// Starts the servers and registers their tools in `toolkit`. A server that fails costs a
    /// warning on stderr, not the agent.
    pub async fn start(
        configs: &[McpServerConfig],
        toolkit: &Toolkit,
        selection: &ToolSelection,
    ) -> McpServers {
        let mut started = McpServers {
            toolkit: toolkit.clone(),
            selection: selection.clone(),
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
    pub(crate) async fn register(&mut self, server: Started) -> Result<Vec<String>, McpError> {
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
        let mut options = McpToolOptions::for_server(client.config())
            .prefix(prefix.clone())
            .namesake(NamesakeStrategy::Rename);
        if self.selection.by_name() {
            // Only the chosen ones, also when the server's list changes later.
            let chosen = tools
                .iter()
                .filter(|t| self.selection.offers(&mcp_tool_name(&prefix, &t.name)))
                .map(|t| t.name.clone());
            options = options.enable(chosen);
        }
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
