//! The connection to one MCP server, through the official Rust SDK (rmcp): start or connect,
//! keep stderr, route progress, reconnect when the server went away.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, Tool as RmcpTool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, watch};

use super::McpError;
use super::config::{McpServerConfig, McpTransport};
use super::http::SessionAwareClient;

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 40;

/// A progress notification for one running call.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    pub(crate) progress: f64,
    pub(crate) total: Option<f64>,
    pub(crate) message: Option<String>,
}

/// What the rmcp handler shares with the client.
#[derive(Default)]
pub(crate) struct Shared {
    /// Progress token → the call waiting for its progress.
    routes: Mutex<HashMap<String, mpsc::UnboundedSender<Progress>>>,
    /// The last lines the server wrote to stderr.
    stderr: Mutex<VecDeque<String>>,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Progress>>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stderr(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

/// The rmcp client handler: progress goes to the waiting call, `tools/list_changed` to the
/// registrations.
#[derive(Clone)]
struct Handler {
    shared: Arc<Shared>,
    tools_changed: Arc<watch::Sender<u64>>,
}

impl ClientHandler for Handler {
    /// We use the `initialize` handshake, so we offer the newest version that has one: rmcp's
    /// default (`ProtocolVersion::LATEST`, 2026-07-28) replaced the handshake with per-request
    /// metadata and is not a version an `initialize` request can name (the MCP conformance
    /// suite's `initialize` scenario rejects it).
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agentry", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let key = token_key(&params.progress_token);
        let route = self.shared.routes().get(&key).cloned();
        if let Some(route) = route {
            let _ = route.send(Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.send_modify(|n| *n += 1);
    }
}

/// What a client knows about its server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpStatus {
    /// Connected; the server's name and version as it reported them.
    Connected {
        /// Server name.
        server: String,
        /// Server version.
        version: String,
    },
    /// Not connected; why.
    Down(String),
}

/// A tool as the server describes it.
#[derive(Debug, Clone)]
pub struct McpToolInfo {
    /// Name on the server.
    pub name: String,
    /// Description, when the server gives one.
    pub description: String,
    /// JSON schema of the arguments.
    pub input_schema: serde_json::Value,
}

impl From<&RmcpTool> for McpToolInfo {
    fn from(tool: &RmcpTool) -> Self {
        McpToolInfo {
            name: tool.name.to_string(),
            description: tool
                .description
                .as_deref()
                .map(str::to_owned)
                .or_else(|| tool.title.clone())
                .unwrap_or_default(),
            input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        }
    }
}

struct Connection {
    service: RunningService<RoleClient, Handler>,
}

struct Inner {
    config: McpServerConfig,
    connection: tokio::sync::Mutex<Option<Connection>>,
    status: Mutex<McpStatus>,
    shared: Arc<Shared>,
    tools_changed: Arc<watch::Sender<u64>>,
}

/// A client of one MCP server. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> Result<(), agentry::mcp::McpError> {
/// use agentry::mcp::{McpClient, McpServerConfig, McpToolOptions};
/// use agentry::tool::Toolkit;
///
/// let client = McpClient::connect(McpServerConfig::stdio(
///     "everything", "npx", ["-y", "@modelcontextprotocol/server-everything"],
/// )).await?;
/// let toolkit = Toolkit::new();
/// toolkit.register_mcp_client(&client, McpToolOptions::new()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("name", &self.inner.config.name)
            .field("status", &self.status())
            .finish()
    }
}

impl McpClient {
    /// Starts (stdio) or connects to (HTTP) the server and initializes the session.
    pub async fn connect(config: McpServerConfig) -> Result<McpClient, McpError> {
        let (tools_changed, _) = watch::channel(0);
        let client = McpClient {
            inner: Arc::new(Inner {
                status: Mutex::new(McpStatus::Down("not connected yet".into())),
                config,
                connection: tokio::sync::Mutex::new(None),
                shared: Arc::new(Shared::default()),
                tools_changed: Arc::new(tools_changed),
            }),
        };
        let mut connection = client.inner.connection.lock().await;
        *connection = Some(client.open().await?);
        drop(connection);
        Ok(client)
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The server's configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.inner.config
    }

    /// Whether the client is connected, as far as it knows.
    pub fn status(&self) -> McpStatus {
        self.inner
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_status(&self, status: McpStatus) {
        *self.inner.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// The last lines the server wrote to stderr (stdio servers).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.inner.shared.stderr().iter().cloned().collect()
    }

    /// Changes each time the server says its tool list changed.
    pub(crate) fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.tools_changed.subscribe()
    }

    pub(crate) fn route(&self, token: &ProgressToken) -> mpsc::UnboundedReceiver<Progress> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.shared.routes().insert(token_key(token), tx);
        rx
    }

    pub(crate) fn unroute(&self, token: &ProgressToken) {
        self.inner.shared.routes().remove(&token_key(token));
    }

    /// Opens a new connection (start the process or open the HTTP session, then initialize).
    async fn open(&self) -> Result<Connection, McpError> {
        let config = &self.inner.config;
        let handler = Handler {
            shared: Arc::clone(&self.inner.shared),
            tools_changed: Arc::clone(&self.inner.tools_changed),
        };
        let mut stderr_done = None;
        let started = match &config.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| self.start_error(format!("cannot run {:?}: {e}", config.describe())))?;
                stderr_done = stderr.map(|stderr| self.drain_stderr(stderr));
                tokio::time::timeout(config.startup_timeout, handler.serve(transport)).await
            }
            McpTransport::Http { url, headers } => {
                crate::model::openai::install_crypto_provider();
                let http = SessionAwareClient::new()
                    .map_err(|e| self.start_error(format!("cannot build the HTTP client: {e}")))?;
                let transport = StreamableHttpClientTransport::with_client(
                    http,
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(header_map(headers)?),
                );
                tokio::time::timeout(config.startup_timeout, handler.serve(transport)).await
            }
        };
        let service = match started {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                // Let the dying process finish saying why on stderr (its end of the pipe closes).
                if let Some(done) = stderr_done {
                    let _ = tokio::time::timeout(Duration::from_millis(500), done).await;
                }
                return Err(
                    self.start_error(format!("initialization failed: {}", super::tidy(&e.to_string())))
                );
            }
            Err(_) => {
                return Err(self.start_error(format!(
                    "the server did not finish initializing within {:?}",
                    config.startup_timeout
                )));
            }
        };
        let status = connected_status(service.peer());
        tracing::info!(mcp = %config.name, status = ?status, "MCP server connected");
        self.set_status(status);
        Ok(Connection { service })
    }

    fn start_error(&self, reason: String) -> McpError {
        let error = McpError::Start {
            server: self.name().to_owned(),
            reason,
            stderr_tail: self.stderr_tail(),
        };
        self.set_status(McpStatus::Down(error.to_string()));
        error
    }

    /// Reads the server's stderr into the tail until it closes (the task ends then).
    fn drain_stderr(&self, stderr: tokio::process::ChildStderr) -> tokio::task::JoinHandle<()> {
        let shared = Arc::clone(&self.inner.shared);
        let name = self.name().to_owned();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(mcp = %name, "stderr: {line}");
                let mut tail = shared.stderr();
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        })
    }

    /// A live peer: the current one, or a new connection when the server went away (bounded
    /// attempts with backoff). Fails with `McpError::Down` saying why.
    pub(crate) async fn peer(&self) -> Result<Peer<RoleClient>, McpError> {
        let mut connection = self.inner.connection.lock().await;
        if let Some(live) = connection
            .as_ref()
            .filter(|c| !c.service.is_closed() && !c.service.peer().is_transport_closed())
        {
            return Ok(live.service.peer().clone());
        }
        if let Some(mut dead) = connection.take() {
            let _ = dead.service.close_with_timeout(Duration::from_millis(200)).await;
        }
        let attempts = self.inner.config.reconnect_attempts.max(1);
        let mut last = None;
        for attempt in 1..=attempts {
            tracing::warn!(mcp = %self.name(), attempt, "the MCP server is not connected; reconnecting");
            match self.open().await {
                Ok(fresh) => {
                    let peer = fresh.service.peer().clone();
                    *connection = Some(fresh);
                    return Ok(peer);
                }
                Err(e) => last = Some(e),
            }
            if attempt < attempts {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
        }
        // The last attempt's own reason: "down: did not start: …" would say it twice.
        let reason = match last {
            Some(McpError::Start {
                reason, stderr_tail, ..
            }) => format!(
                "it could not be restarted ({attempts} attempt(s)): {reason}{}",
                super::stderr_note(&stderr_tail)
            ),
            Some(other) => format!("{other} (after {attempts} attempt(s))"),
            None => format!("no connection after {attempts} attempt(s)"),
        };
        Err(McpError::Down {
            server: self.name().to_owned(),
            reason,
        })
    }

    /// Drops the current connection so that the next call opens a new one.
    pub(crate) async fn reset(&self) {
        if let Some(mut old) = self.inner.connection.lock().await.take() {
            let _ = old.service.close_with_timeout(Duration::from_millis(200)).await;
        }
    }

    /// Marks the connection broken (a call saw the transport close), so the next call reconnects.
    pub(crate) fn mark_down(&self, reason: &str) {
        self.set_status(McpStatus::Down(reason.to_owned()));
    }

    /// Marks the client connected again after a call got an answer (rmcp may have recovered the
    /// session by itself, without a new connection of ours).
    pub(crate) fn mark_up(&self, peer: &Peer<RoleClient>) {
        let mut status = self.inner.status.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*status, McpStatus::Down(_)) {
            *status = connected_status(peer);
        }
    }

    /// The tools the server offers now.
    pub async fn list_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        let peer = self.peer().await?;
        let tools = peer.list_all_tools().await.map_err(|e| McpError::Protocol {
            server: self.name().to_owned(),
            reason: format!("tools/list failed: {e}"),
        })?;
        Ok(tools.iter().map(McpToolInfo::from).collect())
    }

    /// Checks the session answers.
    pub async fn ping(&self) -> Result<(), McpError> {
        let peer = self.peer().await?;
        peer.send_request(rmcp::model::ClientRequest::PingRequest(
            rmcp::model::PingRequest::default(),
        ))
        .await
        .map(|_| ())
        .map_err(|e| McpError::Protocol {
            server: self.name().to_owned(),
            reason: format!("ping failed: {e}"),
        })
    }

    /// Closes the session (and stops a stdio server).
    pub async fn close(&self) {
        if let Some(mut connection) = self.inner.connection.lock().await.take() {
            let _ = connection
                .service
                .close_with_timeout(Duration::from_secs(2))
                .await;
        }
        self.set_status(McpStatus::Down("closed".into()));
    }
}

/// `Connected` with the server's name and version as it reported them.
fn connected_status(peer: &Peer<RoleClient>) -> McpStatus {
    let (server, version) = peer
        .peer_info()
        .and_then(|info| {
            info.server_info
                .as_ref()
                .map(|s| (s.name.clone(), s.version.clone()))
        })
        .unwrap_or_else(|| ("unknown".into(), "?".into()));
    McpStatus::Connected { server, version }
}

fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, McpError> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| McpError::Config(format!("invalid header name {name:?}: {e}")))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|e| McpError::Config(format!("invalid value for header {name}: {e}")))?;
            Ok((name, value))
        })
        .collect()
}
