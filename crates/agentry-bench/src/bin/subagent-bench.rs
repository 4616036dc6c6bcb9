//! What an agent called as a tool of another costs (issue 28's goal: a nested call adds
//! ≤ 0.2 ms of CPU over calling the child directly), on the mock of `shared/bench`.
//!
//! The child is the bench agent (the `add` tool, the mock's K steps over HTTP). First R replies
//! of the child called directly; then R replies of a parent whose model (scripted, in process,
//! no HTTP) calls the child's tool `worker` once and then answers. Printed: this process's CPU
//! per reply of each (all its threads, from `/proc/self/task/*/schedstat`; the mock's CPU is
//! not in it), and the difference.
//!
//! ```text
//! cargo build --release -p agentry-bench
//! target/release/subagent-bench --base-url $MOCK_URL [-k 5] [-r 2000]
//! ```

use agentry::agent::ReActAgent;
use agentry::message::{ContentBlock, Msg, Role, ToolUseBlock};
use agentry::model::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, OpenAiChatModel, OpenAiConfig, RetryPolicy,
};
use agentry::tool::{Toolkit, tool};
use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::json;

#[path = "../shared/flags.rs"]
mod flags;
use flags::flag;

/// Add two integers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// The parent's model: calls `worker` after the user's message, answers after its result.
struct Scripted;

impl ChatModel for Scripted {
    fn model_name(&self) -> &str {
        "scripted"
    }
    fn is_streaming(&self) -> bool {
        false
    }
    fn chat(&self, request: ChatRequest) -> ChatStream {
        let after_user = request.messages.last().is_some_and(|m| m.role == Role::User);
        let content = match after_user {
            true => vec![ContentBlock::ToolUse(ToolUseBlock {
                id: "w1".into(),
                name: "worker".into(),
                input: json!({"prompt": "add the numbers"}),
                raw_input: None,
            })],
            false => vec![ContentBlock::text("The worker is done.")],
        };
        let response = ChatResponse {
            content,
            finish_reason: Some("stop".into()),
            ..ChatResponse::default()
        };
        futures::stream::once(async move { Ok(response) }).boxed()
    }
}

fn child(base_url: &str, k: u64) -> anyhow::Result<ReActAgent> {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool)?;
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("mock-model")
            .base_url(base_url)
            .stream(false)
            .retry(RetryPolicy::none()),
    )?;
    Ok(ReActAgent::builder()
        .name("worker")
        .sys_prompt("You are a helpful assistant. Use the add tool when asked to add numbers.")
        .model(model)
        .toolkit(toolkit)
        .max_iters(k as usize + 5)
        .build()?)
}

/// CPU seconds of every thread of this process.
fn cpu_s() -> f64 {
    let mut total: u64 = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            total += text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total as f64 / 1e9
}

/// CPU per reply of `agent`; every agent of `clear` starts each reply with an empty memory.
async fn per_reply_cpu_ms(
    agent: &ReActAgent,
    clear: &[&ReActAgent],
    r: u64,
    expect: &str,
) -> anyhow::Result<f64> {
    for _ in 0..10 {
        agent.reply(Msg::user("add the numbers")).await?;
    }
    let before = cpu_s();
    for _ in 0..r {
        let answer = agent.reply(Msg::user("add the numbers")).await?;
        if !answer.text().unwrap_or_default().contains(expect) {
            bail!("unexpected answer: {:?}", answer.text());
        }
        for agent in clear {
            agent.memory().clear().await?;
        }
    }
    Ok((cpu_s() - before) * 1000.0 / r as f64)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let base_url = flag(&args, "--base-url").context("--base-url is required")?;
    let k: u64 = flag(&args, "-k").map_or(Ok(5), |v| v.parse())?;
    let r: u64 = flag(&args, "-r").map_or(Ok(2000), |v| v.parse())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async move {
        let direct_child = child(&base_url, k)?;
        let direct = per_reply_cpu_ms(&direct_child, &[&direct_child], r, "done").await?;
        let worker = child(&base_url, k)?;
        let toolkit = Toolkit::new();
        toolkit.register(worker.as_tool("worker", "Adds numbers"))?;
        let parent = ReActAgent::builder()
            .name("parent")
            .sys_prompt("You delegate.")
            .model(Scripted)
            .toolkit(toolkit)
            .build()?;
        let nested = per_reply_cpu_ms(&parent, &[&parent, &worker], r, "worker is done").await?;
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        anyhow::Ok(json!({
            "k": k, "replies": r,
            "direct_cpu_ms_per_reply": round(direct),
            "nested_cpu_ms_per_reply": round(nested),
            "nesting_cpu_ms": round(nested - direct),
        }))
    })?;
    println!("RESULT {result}");
    Ok(())
}
