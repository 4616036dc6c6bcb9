//! An MCP server (built with rmcp) for what third-party servers cannot do in tests: crash in the
//! middle of a call, start slowly or not at all, change its tool list, and say on stderr which
//! cancel notifications it received.
//!
//! ```text
//! mcp-test-server [--slow-start MS] [--fail-start] [--hang-list] [--endless-pages]
//!                 [--ignore-stdin-close] [--ignore-sigterm] [--spawn-child] [--log FILE]
//! ```
//! Tools: `echo {text}` and `slow {seconds}` (progress every 100 ms until done or cancelled),
//! `stubborn {seconds}` (the same, but it ignores cancels and answers anyway, saying so on
//! stderr), all three annotated read-only; `crash` (the process exits in the middle of the call), `grow` (adds
//! the tool `extra` and announces `tools/list_changed`), `noisy {lines}` (floods stderr, then
//! answers), `ask_withdrawn` (asks the client a form, then cancels that request once the client
//! pings, and says whether it had an answer), and `extra` once grown.
//!
//! Modes for careless servers: `--hang-list` never answers `tools/list`; `--endless-pages`
//! answers every `tools/list` with one tool and a new `nextCursor`; `--ignore-stdin-close` keeps
//! running after its stdin closed; `--ignore-sigterm` survives SIGTERM; `--spawn-child` starts a
//! `sleep` child in its process group. `--log FILE` appends `pid=…`, `child=…`, `call …`,
//! `cancelled …` and `signal …` lines to FILE, so that tests see what the server lived through
//! even when its stderr belongs to someone else. On stderr it says `tools/list`, `call …` and
//! `notifications/cancelled …` for every such message, in the order they arrived.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ContentBlock,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

#[derive(Clone, Default)]
struct TestServer {
    grown: Arc<AtomicBool>,
    /// Woken by every `ping`.
    pinged: Arc<tokio::sync::Notify>,
    hang_list: bool,
    endless_pages: bool,
    pages: Arc<AtomicU64>,
    log: Option<Arc<std::path::PathBuf>>,
}

/// Appends a line to the `--log` file (created on first use).
fn log_line(path: Option<&std::path::Path>, line: &str) {
    if let Some(path) = path
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let read_only = ToolAnnotations::new().read_only(true);
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes the text.",
                schema(
                    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                ),
            )
            .annotate(read_only.clone()),
            Tool::new(
                "slow",
                "Sleeps, reporting progress every 100 ms.",
                schema(
                    json!({"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
                ),
            )
            .annotate(read_only),
            Tool::new(
                "stubborn",
                "Ignores cancels: reports progress every 100 ms for the seconds asked, then answers.",
                schema(
                    json!({"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
                ),
            )
            .annotate(ToolAnnotations::new().read_only(true)),
            Tool::new(
                "crash",
                "Exits the server in the middle of the call.",
                schema(json!({"type": "object"})),
            ),
            Tool::new("grow", "Adds the tool extra.", schema(json!({"type": "object"}))),
            Tool::new(
                "ask_withdrawn",
                "Asks a form, then cancels the question once pinged.",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "noisy",
                "Writes many lines to stderr, then answers.",
                schema(json!({"type": "object", "properties": {"lines": {"type": "integer"}}})),
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appeared later.",
                schema(json!({"type": "object"})),
            ));
        }
        tools
    }
}

fn text(s: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(s)]).into())
}

impl ServerHandler for TestServer {
    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        self.pinged.notify_waiters();
        Ok(())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        eprintln!("tools/list");
        if self.hang_list {
            eprintln!("tools/list will never be answered");
            std::future::pending::<()>().await;
        }
        if self.endless_pages {
            let page = self.pages.fetch_add(1, Ordering::SeqCst);
            let mut result = ListToolsResult::with_all_items(vec![Tool::new(
                format!("tool_{page}"),
                "One more page.",
                schema(json!({"type": "object"})),
            )]);
            result.next_cursor = Some(format!("page-{}", page + 1));
            return Ok(result);
        }
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let line = format!("call {} request={:?}", request.name, context.id);
        log_line(self.log.as_deref().map(|p| p.as_path()), &line);
        eprintln!("{line}");
        match request.name.as_ref() {
            "echo" => text(args.get("text").and_then(Value::as_str).unwrap_or_default()),
            "slow" => {
                let ticks = (args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0) * 10.0) as u64;
                let token = context.meta.get_progress_token();
                for tick in 1..=ticks {
                    tokio::select! {
                        () = context.ct.cancelled() => {
                            eprintln!("handler saw the cancel of request {:?}", context.id);
                            return text("stopped");
                        }
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                    if let Some(token) = &token {
                        let progress = ProgressNotificationParam::new(token.clone(), tick as f64)
                            .with_total(ticks as f64)
                            .with_message(format!("tick {tick}"));
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
                text("slept")
            }
            "stubborn" => {
                let ticks = (args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0) * 10.0) as u64;
                let token = context.meta.get_progress_token();
                for tick in 1..=ticks {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Some(token) = &token {
                        let progress = ProgressNotificationParam::new(token.clone(), tick as f64)
                            .with_total(ticks as f64)
                            .with_message(format!("still going {tick}"));
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
                // The answer goes out after this line, before anything the server handles later.
                eprintln!(
                    "stubborn answers request {:?} (cancelled: {})",
                    context.id,
                    context.ct.is_cancelled()
                );
                text("the stubborn result")
            }
            "crash" => {
                eprintln!("about to crash in the middle of a call");
                std::process::exit(3);
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("grown")
            }
            "extra" => text("extra here"),
            "ask_withdrawn" => {
                let request = serde_json::from_value(json!({
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "Your name?", "requestedSchema":
                        {"type": "object", "properties": {"name": {"type": "string"}}}}
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                // Listening before the question goes out: the client's ping answers it.
                let pinged = self.pinged.notified();
                tokio::pin!(pinged);
                pinged.as_mut().enable();
                let handle = context
                    .peer
                    .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                pinged.await;
                eprintln!("cancelling the question");
                let _ = handle.cancel(Some("no longer needed".into())).await;
                text("the question was withdrawn")
            }
            "noisy" => {
                // Far more than a pipe buffer: a client that does not read stderr blocks us here.
                let lines = args.get("lines").and_then(Value::as_u64).unwrap_or(20_000);
                for n in 1..=lines {
                    eprintln!("noise line {n} of {lines}, padded to make the pipe fill up faster");
                }
                text("quiet now")
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        // The arrival time (Unix ns) lets the L4 benchmark measure cancel → notification.
        let at_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let line = format!(
            "notifications/cancelled at_ns={at_ns} request={} reason={}",
            notification
                .request_id
                .map(|id| format!("{id:?}"))
                .unwrap_or_default(),
            notification.reason.unwrap_or_default()
        );
        log_line(self.log.as_deref().map(|p| p.as_path()), &line);
        eprintln!("{line}");
    }
}

fn flag(args: &[String], name: &str) -> bool {
    args.iter().any(|a| a == name)
}

fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].as_str())
}

/// Logs SIGTERM and SIGINT; exits on them unless told to ignore SIGTERM.
fn watch_signals(log: Option<Arc<std::path::PathBuf>>, ignore_sigterm: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {
                    log_line(log.as_deref().map(|p| p.as_path()), "signal TERM");
                    if !ignore_sigterm {
                        std::process::exit(143);
                    }
                }
                _ = int.recv() => {
                    log_line(log.as_deref().map(|p| p.as_path()), "signal INT");
                    std::process::exit(130);
                }
            }
        }
    });
}

// One thread: rmcp spawns a task per message, and on one thread they run in the order the
// messages arrived, so a test that sees a later request logged knows every earlier
// notification was handled (and logged) before it.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--fail-start") {
        eprintln!("fatal: the test server was told to fail at startup");
        std::process::exit(1);
    }
    if let Some(ms) = args
        .windows(2)
        .find(|w| w[0] == "--slow-start")
        .and_then(|w| w[1].parse::<u64>().ok())
    {
        eprintln!("starting slowly ({ms} ms)");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let log = value(&args, "--log").map(|p| Arc::new(std::path::PathBuf::from(p)));
    log_line(
        log.as_deref().map(|p| p.as_path()),
        &format!("pid={}", std::process::id()),
    );
    if log.is_some() {
        watch_signals(log.clone(), flag(&args, "--ignore-sigterm"));
    }
    // Kept alive until the end of main: the child stays in our process group.
    let _child = if flag(&args, "--spawn-child") {
        let child = std::process::Command::new("sleep")
            .arg("100000")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("spawn sleep");
        log_line(
            log.as_deref().map(|p| p.as_path()),
            &format!("child={}", child.id()),
        );
        Some(child)
    } else {
        None
    };
    let server = TestServer {
        hang_list: flag(&args, "--hang-list"),
        endless_pages: flag(&args, "--endless-pages"),
        log: log.clone(),
        ..TestServer::default()
    };
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .expect("serve on stdio");
    let _ = service.waiting().await;
    if flag(&args, "--ignore-stdin-close") {
        log_line(log.as_deref().map(|p| p.as_path()), "stdin closed; staying");
        std::future::pending::<()>().await;
    }
}
