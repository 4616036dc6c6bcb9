//! Which MCP servers to talk to, and how: the `mcpServers` format of Claude Desktop and Cursor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::McpError;

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Working directory (default: the current one).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// The default limit for starting a server and listing its tools.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One MCP server.
///
/// ```
/// use agentry::mcp::McpServerConfig;
/// let fs = McpServerConfig::stdio("fs", "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]);
/// let web = McpServerConfig::http("web", "http://127.0.0.1:3001/mcp").header("Authorization", "Bearer x");
/// assert_eq!(fs.name, "fs");
/// # let _ = web;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name (used in messages, tool prefixes and `agentry mcp list`).
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// One limit for starting, initializing and listing the tools (default 30 s;
    /// `"startupTimeoutMs"` in `mcp.json`).
    pub startup_timeout: Duration,
    /// Reconnect attempts when a call finds the server down (default 3).
    pub reconnect_attempts: u32,
    /// Whether every tool of the server runs without approval (`"trust": true`; default: only
    /// tools annotated read-only do).
    pub trust: bool,
    /// Tools (server names) that run without approval (`"autoApprove": [...]`, as in Cline).
    pub auto_approve: BTreeSet<String>,
    /// Whether the server may have the agent's model answer for it (`sampling/createMessage`;
    /// `"sampling": "ask" | "allow" | "deny"`, default ask).
    pub sampling: SamplingPolicy,
    /// The directories the server is told it may work in (MCP roots): the agent's working
    /// directory, as the command line gives it ([`McpServerConfig::root`]).
    pub roots: Vec<PathBuf>,
}

/// Whether a server's sampling requests are answered by the agent's model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SamplingPolicy {
    /// Each request is asked of the user as an approval (declined when nobody can answer).
    #[default]
    Ask,
    /// Answered without asking.
    Allow,
    /// Refused, and the capability is not declared: the server knows it cannot sample.
    Deny,
}

impl McpServerConfig {
    /// A server run as a child process.
    pub fn stdio<I, S>(name: impl Into<String>, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        McpServerConfig::new(
            name,
            McpTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A server at a streamable-HTTP URL.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig::new(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    fn new(name: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            name: name.into(),
            transport,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            reconnect_attempts: 3,
            trust: false,
            auto_approve: BTreeSet::new(),
            sampling: SamplingPolicy::default(),
            roots: Vec::new(),
        }
    }

    /// Offers `dir` to the server as a root (a directory it may work in).
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.roots.push(dir.into());
        self
    }

    /// How its sampling requests are answered.
    pub fn sampling(mut self, policy: SamplingPolicy) -> Self {
        self.sampling = policy;
        self
    }

    /// Adds an environment variable (stdio servers).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the working directory (stdio servers).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header (HTTP servers).
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Http { headers, .. } = &mut self.transport {
            headers.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the startup limit.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Sets the reconnect attempts.
    pub fn reconnect_attempts(mut self, attempts: u32) -> Self {
        self.reconnect_attempts = attempts;
        self
    }

    /// A short description: the command line or the URL.
    pub fn describe(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            McpTransport::Http { url, .. } => url.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerEntry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// "stdio", "http", "streamable-http", "streamableHttp" or "sse".
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Cursor and others use it to switch a server off.
    #[serde(default)]
    disabled: bool,
    /// Trust every tool of the server (no approval).
    #[serde(default)]
    trust: bool,
    /// Tools that run without approval.
    #[serde(default)]
    auto_approve: BTreeSet<String>,
    /// The start-up limit in milliseconds.
    startup_timeout_ms: Option<u64>,
    /// Whether its sampling requests are answered by the agent's model.
    #[serde(default)]
    sampling: SamplingPolicy,
}

/// Reads an `mcpServers` configuration (Claude Desktop, Cursor):
///
/// ```json
/// {"mcpServers": {
///   "fs":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {}},
///   "web": {"url": "http://127.0.0.1:3001/mcp", "headers": {"Authorization": "Bearer x"}}
/// }}
/// ```
///
/// Servers marked `"disabled": true` are left out. The legacy SSE transport is refused with an
/// explanation (the official Rust SDK dropped it). Per server, `"trust": true` lets every tool
/// run without approval, `"autoApprove": ["tool", ...]` the tools named, and
/// `"startupTimeoutMs"` sets the start-up limit (default 30 000).
pub fn parse_mcp_servers(json: &str) -> Result<Vec<McpServerConfig>, McpError> {
    let config = |reason: String| McpError::Config(format!("invalid mcpServers configuration: {reason}"));
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| config(e.to_string()))?;
    let Some(file) = value.as_object() else {
        return Err(config(format!(
            "expected a JSON object with an \"mcpServers\" key, found {}",
            json_kind(&value)
        )));
    };
    let Some(entries) = file.get("mcpServers") else {
        return Err(config("expected an object with an \"mcpServers\" key".into()));
    };
    let Some(entries) = entries.as_object() else {
        return Err(config(format!(
            "\"mcpServers\" must be an object of servers by name, found {}",
            json_kind(entries)
        )));
    };
    let mut servers = Vec::new();
    for (name, entry) in entries {
        // Found by the `mcp_config` fuzz target: an empty name made tool prefixes and messages
        // that name nothing.
        if name.trim().is_empty() {
            return Err(config("a server's name is empty; give each server a name".into()));
        }
        if !entry.is_object() {
            return Err(config(format!(
                "server {name:?} must be an object, found {}",
                json_kind(entry)
            )));
        }
        let entry = ServerEntry::deserialize(entry).map_err(|e| config(format!("server {name:?}: {e}")))?;
        if entry.disabled {
            continue;
        }
        let kind = entry.kind.as_deref().unwrap_or("");
        if kind.eq_ignore_ascii_case("sse") {
            return Err(McpError::Config(format!(
                "server {name:?} uses the legacy SSE transport, which is not supported; use its streamable-HTTP endpoint"
            )));
        }
        let server = match (entry.command, entry.url) {
            (Some(command), None) => {
                let mut server = McpServerConfig::stdio(name.as_str(), command, entry.args);
                if let McpTransport::Stdio { env, cwd, .. } = &mut server.transport {
                    *env = entry.env;
                    *cwd = entry.cwd;
                }
                server
            }
            (None, Some(url)) => {
                let mut server = McpServerConfig::http(name.as_str(), url);
                if let McpTransport::Http { headers, .. } = &mut server.transport {
                    *headers = entry.headers;
                }
                server
            }
            (Some(_), Some(_)) => {
                return Err(McpError::Config(format!(
                    "server {name:?} has both a command and a url"
                )));
            }
            (None, None) => {
                return Err(McpError::Config(format!(
                    "server {name:?} needs a command or a url"
                )));
            }
        };
        let mut server = server;
        server.trust = entry.trust;
        server.auto_approve = entry.auto_approve;
        server.sampling = entry.sampling;
        if let Some(ms) = entry.startup_timeout_ms {
            server.startup_timeout = Duration::from_millis(ms);
        }
        servers.push(server);
    }
    Ok(servers)
}

/// What a JSON value is, for messages.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_claude_desktop_and_cursor_entries() {
        let servers = parse_mcp_servers(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"A": "1"}},
                "web": {"type": "streamable-http", "url": "http://h/mcp", "headers": {"X": "y"}},
                "off": {"command": "x", "disabled": true}
            }}"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "fs");
        assert_eq!(servers[0].describe(), "npx -y server-filesystem /tmp");
        assert!(matches!(&servers[0].transport, McpTransport::Stdio { env, .. } if env["A"] == "1"));
        assert!(matches!(&servers[1].transport, McpTransport::Http { headers, .. } if headers["X"] == "y"));
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let err = parse_mcp_servers(r#"{"mcpServers": {"x": {}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs a command or a url"), "{err}");
        let err = parse_mcp_servers(r#"{"mcpServers": {"x": {"type": "sse", "url": "u"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("legacy SSE"), "{err}");
        let err = parse_mcp_servers("{}").unwrap_err().to_string();
        assert!(err.contains("mcpServers"), "{err}");
    }

    #[test]
    fn a_file_of_the_wrong_shape_gets_a_plain_message() {
        for (json, expected) in [
            (
                "[]",
                "expected a JSON object with an \"mcpServers\" key, found an array",
            ),
            ("null", "found null"),
            (
                r#"{"mcpServers": []}"#,
                "\"mcpServers\" must be an object of servers by name, found an array",
            ),
            (
                r#"{"mcpServers": {"x": "npx"}}"#,
                "server \"x\" must be an object, found a string",
            ),
        ] {
            let err = parse_mcp_servers(json).unwrap_err().to_string();
            assert!(err.contains(expected), "{json}: {err}");
            // No Rust type names (`struct ConfigFile`, `ServerEntry`, `BTreeMap`).
            assert!(
                !err.contains("struct") && !err.contains("Entry") && !err.contains("map"),
                "{err}"
            );
        }
    }

    #[test]
    fn trust_auto_approve_and_the_startup_limit_are_read() {
        let servers = parse_mcp_servers(
            r#"{"mcpServers": {
                "a": {"command": "x", "trust": true, "startupTimeoutMs": 1500},
                "b": {"url": "http://h/mcp", "autoApprove": ["write_file", "edit_file"]}
            }}"#,
        )
        .unwrap();
        assert!(servers[0].trust && servers[0].auto_approve.is_empty());
        assert_eq!(servers[0].startup_timeout, Duration::from_millis(1500));
        assert!(!servers[1].trust);
        assert_eq!(
            servers[1].auto_approve.iter().collect::<Vec<_>>(),
            ["edit_file", "write_file"]
        );
        assert_eq!(servers[1].startup_timeout, DEFAULT_STARTUP_TIMEOUT);
    }

    #[test]
    fn a_server_without_a_name_is_refused() {
        for json in [
            r#"{"mcpServers": {"": {"command": "x"}}}"#,
            r#"{"mcpServers": {"  ": {"url": "http://127.0.0.1:1/mcp"}}}"#,
        ] {
            let err = parse_mcp_servers(json)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("name is empty"), "{json}: {err}");
        }
    }
}
