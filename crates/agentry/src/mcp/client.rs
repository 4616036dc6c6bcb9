//! The connection to one MCP server, through the official Rust SDK (rmcp): start or connect,
//! keep stderr, route progress, reconnect when the server went away.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, Tool as RmcpTool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, watch};

use super::McpError;
use super::config::{McpServerConfig, McpTransport, SamplingPolicy};
use super::http::SessionAwareClient;
use super::process::ServerProcess;
use super::server_requests::{self, InFlight};
use super::task_support::{StdoutTap, TaskSupport, TaskSupports};
use super::task_wire::McpTask;
use crate::model::ChatModel;

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 40;
/// The most `tools/list` pages read from one server: a server that keeps sending a new
/// `nextCursor` is refused instead of paged forever.
pub const MAX_TOOL_PAGES: usize = 100;
/// The most tools taken from one server.
pub const MAX_TOOLS: usize = 10_000;

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
    /// `notifications/cancelled` handed to the transport.
    cancels: std::sync::atomic::AtomicU64,
    /// The calls running now, through which the server's requests are asked.
    pub(crate) in_flight: Arc<InFlight>,
    /// The model that answers the server's sampling requests.
    sampler: Mutex<Option<Arc<dyn ChatModel>>>,
    /// Which tools run as tasks, as the server listed them.
    pub(crate) task_supports: Arc<TaskSupports>,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Progress>>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stderr(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sampler(&self) -> MutexGuard<'_, Option<Arc<dyn ChatModel>>> {
        self.sampler.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs a request of the server's until it answers or the server cancels it (M8): the question
/// it put to the user is then withdrawn (dropping it does that), and the answer is an error
/// nobody reads.
async fn until_cancelled<T>(
    context: &rmcp::service::RequestContext<RoleClient>,
    work: impl std::future::Future<Output = T>,
) -> Result<T, rmcp::ErrorData> {
    tokio::select! {
        done = work => Ok(done),
        () = context.ct.cancelled() => Err(rmcp::ErrorData::internal_error("the server cancelled the request", None)),
    }
}

pub(crate) fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

/// The rmcp client handler: progress goes to the waiting call, `tools/list_changed` to the
/// registrations, sampling requests to the agent's model, `roots/list` to the roots.
#[derive(Clone)]
struct Handler {
    shared: Arc<Shared>,
    tools_changed: Arc<watch::Sender<u64>>,
    server: String,
    sampling: SamplingPolicy,
    roots: Vec<std::path::PathBuf>,
}

impl ClientHandler for Handler {
    /// We use the `initialize` handshake, so we offer the newest version that has one: rmcp's
    /// default (`ProtocolVersion::LATEST`, 2026-07-28) replaced the handshake with per-request
    /// metadata and is not a version an `initialize` request can name (the MCP conformance
    /// suite's `initialize` scenario rejects it).
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = serde_json::Map::new();
        if !self.roots.is_empty() {
            capabilities.insert("roots".into(), serde_json::json!({ "listChanged": false }));
        }
        if self.sampling != SamplingPolicy::Deny {
            capabilities.insert("sampling".into(), serde_json::json!({}));
        }
        // Forms, asked of the agent's user through the call the server serves.
        capabilities.insert("elicitation".into(), serde_json::json!({ "form": {} }));
        let capabilities: ClientCapabilities =
            serde_json::from_value(serde_json::Value::Object(capabilities)).unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("agentry", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let params = serde_json::to_value(&params).unwrap_or_default();
        let model = self.shared.sampler().clone();
        let caller = self.shared.in_flight.latest();
        let sampled = server_requests::sample(&self.server, self.sampling, model, caller, params);
        let result = until_cancelled(&context, sampled).await??;
        serde_json::from_value(result).map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_default();
        let caller = self.shared.in_flight.latest();
        let result = until_cancelled(&context, server_requests::elicit(&self.server, caller, params)).await?;
        serde_json::from_value(result).map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        serde_json::from_value(server_requests::roots(&self.roots))
            .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
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
    /// Whether the server annotates the tool `readOnlyHint: true` (a hint from the server: such
    /// tools run without approval unless configured otherwise).
    pub read_only: bool,
    /// Whether the server runs the tool as an MCP task (`execution.taskSupport`): agentry calls
    /// a tool that supports tasks as one, polls it and cancels it with `tasks/cancel`.
    pub task_support: TaskSupport,
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
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            task_support: TaskSupport::default(),
        }
    }
}

struct Connection {
    service: RunningService<RoleClient, Handler>,
    /// The server's process (stdio servers).
    process: Option<ServerProcess>,
}

/// How long closing waits for rmcp to end the session (stdin closed, pending work dropped).
const SESSION_CLOSE_WAIT: Duration = Duration::from_millis(500);

impl Connection {
    /// Ends the session, then stops the server's process group (stdio servers).
    async fn shutdown(mut self) {
        let _ = self.service.close_with_timeout(SESSION_CLOSE_WAIT).await;
        // Dropping the service drops the transport: the server's stdin is closed now at the latest.
        drop(self.service);
        if let Some(process) = self.process {
            process.stop().await;
        }
    }
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
        let client = McpClient::new(config);
        let deadline = tokio::time::Instant::now() + client.inner.config.startup_timeout;
        let mut connection = client.inner.connection.lock().await;
        *connection = Some(client.open(deadline).await?);
        drop(connection);
        Ok(client)
    }

    /// Starts (stdio) or connects to (HTTP) the server and lists its tools, all within the
    /// configured start-up limit ([`McpServerConfig::startup_timeout`], 30 s by default): a
    /// server that initializes but never answers `tools/list`, or pages forever, fails here
    /// instead of hanging its caller. A server that fails is stopped again.
    pub async fn start(config: McpServerConfig) -> Result<(McpClient, Vec<McpToolInfo>), McpError> {
        let limit = config.startup_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let client = McpClient::new(config);
        let connection = client.open(deadline).await?;
        let peer = connection.service.peer().clone();
        *client.inner.connection.lock().await = Some(connection);
        match tokio::time::timeout_at(deadline, client.list_pages(&peer)).await {
            Ok(Ok(tools)) => Ok((client, tools)),
            Ok(Err(e)) => {
                client.close().await;
                Err(client.start_error(e))
            }
            Err(_) => {
                client.close().await;
                Err(client.start_error(format!(
                    "the server did not list its tools within the start-up limit of {limit:?}"
                )))
            }
        }
    }

    fn new(config: McpServerConfig) -> McpClient {
        let (tools_changed, _) = watch::channel(0);
        McpClient {
            inner: Arc::new(Inner {
                status: Mutex::new(McpStatus::Down("not connected yet".into())),
                config,
                connection: tokio::sync::Mutex::new(None),
                shared: Arc::new(Shared::default()),
                tools_changed: Arc::new(tools_changed),
            }),
        }
    }

    /// The model that answers the server's sampling requests (under its
    /// [`McpServerConfig::sampling`] policy); without one they are refused.
    pub fn set_sampling_model(&self, model: Arc<dyn ChatModel>) {
        *self.inner.shared.sampler() = Some(model);
    }

    /// Counts the call of `ctx` as running until the guard drops: the server's requests
    /// meanwhile are asked through it.
    pub(crate) fn in_flight(&self, ctx: crate::tool::ToolContext) -> server_requests::InFlightGuard {
        self.inner.shared.in_flight.enter(ctx)
    }

    /// Which tools run as tasks, and the sessions tasks live in.
    pub(crate) fn task_supports(&self) -> &TaskSupports {
        &self.inner.shared.task_supports
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

    /// How many `notifications/cancelled` this client has put in its transport's outgoing
    /// queue (for tests and diagnostics: the count grows before the agent records the
    /// cancelled result, spec L4).
    pub fn cancel_notifications(&self) -> u64 {
        self.inner
            .shared
            .cancels
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn count_cancel_notification(&self) {
        self.inner
            .shared
            .cancels
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
    async fn open(&self, deadline: tokio::time::Instant) -> Result<Connection, McpError> {
        let config = &self.inner.config;
        let handler = Handler {
            shared: Arc::clone(&self.inner.shared),
            tools_changed: Arc::clone(&self.inner.tools_changed),
            server: config.name.clone(),
            sampling: config.sampling,
            roots: config.roots.clone(),
        };
        let mut stderr_done = None;
        let mut process = None;
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
                let started = ServerProcess::spawn(cmd)
                    .map_err(|e| self.start_error(format!("cannot run {:?}: {e}", config.describe())))?;
                stderr_done = started.stderr.map(|stderr| self.drain_stderr(stderr));
                process = Some(started.process);
                let stdout = StdoutTap::new(started.stdout, Arc::clone(&self.inner.shared.task_supports));
                tokio::time::timeout_at(deadline, handler.serve((stdout, started.stdin))).await
            }
            McpTransport::Http { url, headers } => {
                crate::install_crypto_provider();
                let http = SessionAwareClient::new(Arc::clone(&self.inner.shared.task_supports))
                    .map_err(|e| self.start_error(format!("cannot build the HTTP client: {e}")))?;
                let transport = StreamableHttpClientTransport::with_client(
                    http,
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(header_map(headers)?),
                );
                tokio::time::timeout_at(deadline, handler.serve(transport)).await
            }
        };
        let service = match started {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                if let Some(process) = process {
                    process.stop().await;
                }
                // Let the dying process finish saying why on stderr (its end of the pipe closes).
                if let Some(done) = stderr_done {
                    let _ = tokio::time::timeout(Duration::from_millis(500), done).await;
                }
                return Err(
                    self.start_error(format!("initialization failed: {}", super::tidy(&e.to_string())))
                );
            }
            Err(_) => {
                if let Some(process) = process {
                    process.stop().await;
                }
                return Err(self.start_error(format!(
                    "the server did not finish initializing within {:?}",
                    config.startup_timeout
                )));
            }
        };
        let status = connected_status(service.peer());
        tracing::info!(mcp = %config.name, status = ?status, "MCP server connected");
        self.set_status(status);
        Ok(Connection { service, process })
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
        if let Some(dead) = connection.take() {
            dead.shutdown().await;
        }
        let attempts = self.inner.config.reconnect_attempts.max(1);
        let mut last = None;
        for attempt in 1..=attempts {
            tracing::warn!(mcp = %self.name(), attempt, "the MCP server is not connected; reconnecting");
            let deadline = tokio::time::Instant::now() + self.inner.config.startup_timeout;
            match self.open(deadline).await {
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
        let old = self.inner.connection.lock().await.take();
        if let Some(old) = old {
            old.shutdown().await;
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

    /// The tools the server offers now: every page, within the start-up limit
    /// ([`McpServerConfig::startup_timeout`]) and at most [`MAX_TOOL_PAGES`] pages or
    /// [`MAX_TOOLS`] tools.
    pub async fn list_tools(&self) -> Result<Vec<McpToolInfo>, McpError> {
        let peer = self.peer().await?;
        let limit = self.inner.config.startup_timeout;
        let protocol = |reason: String| McpError::Protocol {
            server: self.name().to_owned(),
            reason,
        };
        match tokio::time::timeout(limit, self.list_pages(&peer)).await {
            Ok(listed) => listed.map_err(protocol),
            Err(_) => Err(protocol(format!("tools/list did not finish within {limit:?}"))),
        }
    }

    /// `tools/list`, page after page, up to the caps.
    async fn list_pages(&self, peer: &Peer<RoleClient>) -> Result<Vec<McpToolInfo>, String> {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = peer
                .list_tools(params)
                .await
                .map_err(|e| format!("tools/list failed: {}", super::tidy(&e.to_string())))?;
            let supports = &self.inner.shared.task_supports;
            tools.extend(page.tools.iter().map(|tool| {
                let mut info = McpToolInfo::from(tool);
                info.task_support = supports.get(&info.name);
                info
            }));
            if tools.len() > MAX_TOOLS {
                return Err(format!(
                    "the server lists more than {MAX_TOOLS} tools; agentry does not use that many"
                ));
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(format!(
            "the server's tool list did not end after {MAX_TOOL_PAGES} pages (it keeps sending a nextCursor)"
        ))
    }

    /// The tasks the server keeps for this client's session (`tasks/list`), with their status:
    /// what the calls agentry ran as tasks became.
    pub async fn tasks(&self) -> Result<Vec<McpTask>, McpError> {
        let peer = self.peer().await?;
        super::task_wire::list_tasks(&peer)
            .await
            .map_err(|reason| McpError::Protocol {
                server: self.name().to_owned(),
                reason: format!("tasks/list failed: {reason}"),
            })
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

    /// Closes the session. A stdio server is stopped with its whole process group: it gets
    /// 0.5 s to exit once its stdin is closed, then SIGTERM, then SIGKILL 1 s later, so that
    /// neither it nor its children outlive the client.
    pub async fn close(&self) {
        let connection = self.inner.connection.lock().await.take();
        if let Some(connection) = connection {
            connection.shutdown().await;
        }
        self.set_status(McpStatus::Down("closed".into()));
    }

    /// The pid of the running stdio server (also its process group id); `None` for HTTP
    /// servers and when not connected.
    pub async fn server_pid(&self) -> Option<u32> {
        self.inner
            .connection
            .lock()
            .await
            .as_ref()
            .and_then(|c| c.process.as_ref())
            .and_then(ServerProcess::pid)
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
