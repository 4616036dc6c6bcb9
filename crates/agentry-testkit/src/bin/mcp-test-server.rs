//! An MCP server (built with rmcp) for what third-party servers cannot do in tests: crash in the
//! middle of a call, start slowly or not at all, change its tool list, and say on stderr which
//! cancel notifications it received.
//!
//! ```text
//! mcp-test-server [--slow-start MS] [--fail-start]
//! ```
//! Tools: `echo {text}`, `slow {seconds}` (progress every 100 ms until done or cancelled),
//! `crash` (the process exits in the middle of the call), `grow` (adds the tool `extra` and
//! announces `tools/list_changed`), `noisy {lines}` (floods stderr, then answers), and `extra`
//! once grown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ContentBlock,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

#[derive(Clone, Default)]
struct TestServer {
    grown: Arc<AtomicBool>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes the text.",
                schema(
                    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                ),
            ),
            Tool::new(
                "slow",
                "Sleeps, reporting progress every 100 ms.",
                schema(
                    json!({"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
                ),
            ),
            Tool::new(
                "crash",
                "Exits the server in the middle of the call.",
                schema(json!({"type": "object"})),
            ),
            Tool::new("grow", "Adds the tool extra.", schema(json!({"type": "object"}))),
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
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
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
        eprintln!(
            "notifications/cancelled at_ns={at_ns} request={} reason={}",
            notification
                .request_id
                .map(|id| format!("{id:?}"))
                .unwrap_or_default(),
            notification.reason.unwrap_or_default()
        );
    }
}

#[tokio::main]
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
    let service = TestServer::default()
        .serve(rmcp::transport::stdio())
        .await
        .expect("serve on stdio");
    let _ = service.waiting().await;
}
