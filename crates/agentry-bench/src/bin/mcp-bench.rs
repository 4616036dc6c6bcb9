//! What serving an agent over MCP costs (issue 28's goals), on the mock of `shared/bench`:
//!
//! - **reply overhead**: the same agent (the `add` tool, the mock's K steps) answers R prompts
//!   in process and R calls of its reply tool (interleaved) through `agentry-mcp-server` over stdio, from
//!   rmcp's client in this process to a child process (this binary, `serve`). Printed: the
//!   wall time per reply of each, and the difference (goal ≤ 1 ms);
//! - **cancel latency**: N calls whose reply runs a tool that waits to be cancelled (a scripted
//!   fake model asks for it); the client sends `notifications/cancelled` and the tool's
//!   `on_cancel`, in the child, stamps the moment it ran. Printed: p50 / p99 / max from the send
//!   to that moment (goal p99 ≤ 20 ms). Both processes read the same system clock.
//!
//! ```text
//! cargo build --release -p agentry-bench
//! target/release/mcp-bench --base-url $MOCK_URL [-k 5] [-r 300] [--cancels 300]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentry::agent::ReActAgent;
use agentry::message::Msg;
use agentry::model::{OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry::tool::{Tool, ToolContext, ToolResponse, ToolStream, Toolkit, tool};
use agentry_mcp_server::AgentMcpServer;
use agentry_testkit::{Call, FakeLlm, Reply};
use anyhow::{Context, bail};
use futures::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

#[path = "../shared/flags.rs"]
mod flags;
use flags::flag;

/// Add two integers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Waits until cancelled; its `on_cancel` says when it ran (ns since the epoch).
struct Wait;

const SEEN_AT: &str = "cancel_seen_at_ns=";

impl Tool for Wait {
    fn name(&self) -> &str {
        "wait"
    }
    fn description(&self) -> &str {
        "Waits until cancelled"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn call(self: Arc<Self>, _args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        ctx.set_on_cancel(|| Some(format!("{SEEN_AT}{}", now_ns())));
        ctx.report("waiting", None);
        futures::stream::once(async move {
            ctx.cancelled().await;
            Ok(ToolResponse::text("cancelled"))
        })
        .boxed()
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The model every agent of a process shares, as `agentry mcp serve` shares its one model.
fn model(base_url: &str) -> Result<Arc<OpenAiChatModel>, agentry::agent::AgentError> {
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("mock-model")
            .base_url(base_url)
            .stream(false)
            .retry(RetryPolicy::none()),
    )
    .map_err(agentry::agent::AgentError::Model)?;
    Ok(Arc::new(model))
}

fn agent(model: &Arc<OpenAiChatModel>, k: u64) -> Result<ReActAgent, agentry::agent::AgentError> {
    let toolkit = Toolkit::new();
    toolkit
        .register(AddTool)
        .map_err(|e| agentry::agent::AgentError::Config(e.to_string()))?;
    toolkit
        .register(Wait)
        .map_err(|e| agentry::agent::AgentError::Config(e.to_string()))?;
    ReActAgent::builder()
        .name("bench")
        .sys_prompt("You are a helpful assistant. Use the add tool when asked to add numbers.")
        .model(Arc::clone(model))
        .toolkit(toolkit)
        .max_iters(k as usize + 5)
        .build()
}

/// Progress messages to the client's owner.
struct Client {
    progress: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-bench", "1"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params.message.unwrap_or_default());
    }
}

struct Connected {
    client: RunningService<RoleClient, Client>,
    progress: mpsc::UnboundedReceiver<String>,
}

/// This binary's `serve` in a child process, and rmcp's client on its stdio.
async fn spawn_server(base_url: &str, k: u64) -> anyhow::Result<Connected> {
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command.args(["serve", "--base-url", base_url, "-k", &k.to_string()]);
    let (tx, progress) = mpsc::unbounded_channel();
    let client = Client { progress: tx }
        .serve(TokioChildProcess::new(command)?)
        .await
        .context("the MCP handshake with the child")?;
    Ok(Connected { client, progress })
}

fn ask(prompt: &str) -> CallToolRequestParams {
    let mut args = Map::new();
    args.insert("prompt".into(), Value::String(prompt.into()));
    CallToolRequestParams::new("bench").with_arguments(args)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    json!({
        "mean_ms": (mean * 1000.0).round() / 1000.0,
        "p50_ms": (quantile(&ms, 0.5) * 1000.0).round() / 1000.0,
        "p99_ms": (quantile(&ms, 0.99) * 1000.0).round() / 1000.0,
        "max_ms": (quantile(&ms, 1.0) * 1000.0).round() / 1000.0,
    })
}

async fn reply_overhead(base_url: &str, k: u64, r: u64) -> anyhow::Result<Value> {
    let warmup = 5;
    let (mut direct, mut served) = (Vec::new(), Vec::new());
    let shared = model(base_url)?;
    let connected = spawn_server(base_url, k).await?;
    // Interleaved, so that neither side gets the warmer machine.
    for i in 0..warmup + r {
        let agent = agent(&shared, k)?;
        let started = Instant::now();
        let answer = agent.reply(Msg::user("add the numbers")).await?;
        let in_process = started.elapsed().as_secs_f64() * 1000.0;
        if !answer.text().unwrap_or_default().contains("done") {
            bail!("unexpected answer in process: {:?}", answer.text());
        }
        let started = Instant::now();
        let result = connected.client.call_tool(ask("add the numbers")).await?;
        let over_mcp = started.elapsed().as_secs_f64() * 1000.0;
        let text = serde_json::to_string(&result.content)?;
        if !text.contains("done") {
            bail!("unexpected answer over MCP: {text}");
        }
        if i >= warmup {
            direct.push(in_process);
            served.push(over_mcp);
        }
    }
    let mut pings = Vec::new();
    for _ in 0..r {
        let started = Instant::now();
        connected
            .client
            .peer()
            .send_request(ClientRequest::PingRequest(Default::default()))
            .await?;
        pings.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    connected.client.cancel().await?;
    let (d, s) = (summary(direct), summary(served));
    let overhead = s["mean_ms"].as_f64().unwrap_or_default() - d["mean_ms"].as_f64().unwrap_or_default();
    Ok(
        json!({"in_process": d, "over_mcp_stdio": s, "overhead_mean_ms": (overhead * 1000.0).round() / 1000.0, "ping": summary(pings)}),
    )
}

async fn cancel_latency(n: u64) -> anyhow::Result<Value> {
    let fake = FakeLlm::start().await;
    let mut connected = spawn_server(&fake.base_url(), 1).await?;
    let mut latencies = Vec::new();
    for i in 0..n + 5 {
        fake.push(Reply::tool_calls([Call::new(format!("w{i}"), "wait", "{}")]));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(ask("wait")));
        let handle = connected
            .client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await?;
        wait_for(&mut connected.progress, "waiting").await?;
        let sent = now_ns();
        handle.cancel(Some("bench".into())).await?;
        let partial = wait_for(&mut connected.progress, SEEN_AT).await?;
        let seen: u128 = partial
            .split(SEEN_AT)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok())
            .context("no timestamp in the partial result")?;
        if i >= 5 {
            latencies.push(seen.saturating_sub(sent) as f64 / 1e6);
        }
    }
    connected.client.cancel().await?;
    Ok(summary(latencies))
}

async fn wait_for(progress: &mut mpsc::UnboundedReceiver<String>, text: &str) -> anyhow::Result<String> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), progress.recv())
            .await
            .context("no progress within 10 s")?
            .context("the server went away")?;
        if message.contains(text) {
            return Ok(message);
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let base_url = flag(&args, "--base-url").context("--base-url is required")?;
    let k: u64 = flag(&args, "-k").map_or(Ok(5), |v| v.parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if args.first().is_some_and(|a| a == "serve") {
        return runtime.block_on(async move {
            let shared = model(&base_url)?;
            let server = AgentMcpServer::new("bench", "The bench agent", move || agent(&shared, k))?;
            Ok(server.serve_stdio().await?)
        });
    }
    let r: u64 = flag(&args, "-r").map_or(Ok(300), |v| v.parse())?;
    let cancels: u64 = flag(&args, "--cancels").map_or(Ok(300), |v| v.parse())?;
    let result = runtime.block_on(async move {
        let replies = reply_overhead(&base_url, k, r).await?;
        let cancel = cancel_latency(cancels).await?;
        anyhow::Ok(
            json!({"k": k, "replies": r, "reply": replies, "cancels": cancels, "cancel_to_tool": cancel}),
        )
    })?;
    println!("RESULT {result}");
    Ok(())
}
