//! What a script tool costs beside a native tool, and how fast a cancel reaches a script that
//! keeps the engine busy.
//!
//! ```text
//! cargo build --release -p agentry-bench
//! target/release/script-bench [--calls 2000] [--cancels 200]
//! ```
//!
//! 1. Per call: the same tool (it returns its argument) as a native `FunctionTool` and as a
//!    script tool, each called `--calls` times one after the other through a `Toolkit` (the way
//!    the agent calls tools); wall and process CPU time per call, and the difference.
//! 2. Cancel: an agent (against an in-process fake model server) runs a script stuck in
//!    `while (true) {}` with an `onCancel`; the time from `cancel_call` to the call's
//!    `ToolFinished` (its result recorded), `--cancels` times: p50, p99, max.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::ReActAgent;
use agentry::agent::AgentEvent;
use agentry::message::{Msg, ToolUseBlock};
use agentry::model::{OpenAiChatModel, OpenAiConfig};
use agentry::tool::{CancellationToken, FunctionTool, ToolContext, Toolkit, once};
use agentry_script::{ScriptSettings, ScriptTools};
use agentry_testkit::{Call, FakeLlm, Reply};
use futures::StreamExt;
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's user + system CPU time, from /proc.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn write_tool(root: &std::path::Path, id: &str, code: &str) -> anyhow::Result<()> {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("assistant_tool.json"),
        json!({"id": id, "description": "Echoes.", "parameters": [{"name": "text", "type": "string"}]})
            .to_string(),
    )?;
    std::fs::write(dir.join("assistant_tool.ts"), code)?;
    Ok(())
}

async fn call_many(toolkit: &Toolkit, name: &str, calls: usize) -> anyhow::Result<(Duration, Duration)> {
    let (wall, cpu_start) = (Instant::now(), process_cpu());
    for i in 0..calls {
        let call = ToolUseBlock {
            id: format!("c{i}").into(),
            name: name.to_owned(),
            input: json!({"text": "hello"}),
            raw_input: None,
        };
        let ctx = ToolContext::new(call.id.clone(), name, CancellationToken::new());
        let mut stream = toolkit.call(&call, ctx);
        let mut last = None;
        while let Some(chunk) = stream.next().await {
            last = Some(chunk);
        }
        let text = last.map(|c| c.text_content()).unwrap_or_default();
        anyhow::ensure!(text == "hello", "{name} answered {text:?}");
    }
    let calls = u32::try_from(calls.max(1))?;
    Ok((
        wall.elapsed() / calls,
        process_cpu().saturating_sub(cpu_start) / calls,
    ))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len().saturating_sub(1) as f64) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let calls = arg("--calls", 2000);
    let cancels = arg("--cancels", 200);
    let root = tempfile::tempdir()?;
    write_tool(
        root.path(),
        "echo_script",
        "AssistantTool.registerExecuteTool(async (params: { text: string }) => ({ success: true, message: params.text }))",
    )?;
    write_tool(
        root.path(),
        "spin",
        r#"AssistantTool.registerExecuteTool(async () => {
             AssistantTool.onCancel = () => "stopped"
             AssistantTool.report("spinning")
             while (true) {}
           })"#,
    )?;
    let toolkit = Toolkit::new();
    toolkit.register(FunctionTool::new(
        "echo_native",
        "Echoes.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args, _| {
            let text = args
                .get("text")
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_owned();
            once(async move { text })
        },
    ))?;
    let mut scripts = ScriptTools::load(&[root.path().to_owned()], &ScriptSettings::default());
    scripts.register(&toolkit);
    anyhow::ensure!(scripts.errors.is_empty(), "{:?}", scripts.errors);

    // Warm up both, then measure.
    call_many(&toolkit, "echo_native", 50).await?;
    call_many(&toolkit, "echo_script", 50).await?;
    let (native_wall, native_cpu) = call_many(&toolkit, "echo_native", calls).await?;
    let (script_wall, script_cpu) = call_many(&toolkit, "echo_script", calls).await?;
    println!(
        "per call ({calls} calls): native {native_wall:?} wall, {native_cpu:?} CPU; script {script_wall:?} wall, {script_cpu:?} CPU; \
         script overhead {:?} wall, {:?} CPU",
        script_wall.saturating_sub(native_wall),
        script_cpu.saturating_sub(native_cpu)
    );

    let fake = FakeLlm::start().await;
    let model = OpenAiChatModel::new(OpenAiConfig::new("fake").base_url(fake.base_url()).stream(true))?;
    let agent = ReActAgent::builder()
        .name("bench")
        .model(Arc::new(model) as Arc<dyn agentry::model::ChatModel>)
        .toolkit(toolkit.clone())
        .build()?;
    let handle = agent.handle();
    let mut latencies = Vec::with_capacity(cancels);
    for i in 0..cancels {
        let id = format!("s{i}");
        fake.push(Reply::tool_calls([Call::new(&id, "spin", r#"{"text": "x"}"#)]));
        fake.push(Reply::text("ok"));
        let mut run = agent.start_reply(Msg::user("spin"));
        let mut cancelled_at = None;
        while let Some(event) = run.next_event().await {
            match &event {
                AgentEvent::ToolProgress { call_id, .. } if cancelled_at.is_none() => {
                    cancelled_at = Some(Instant::now());
                    let _ = handle.cancel_call(call_id.as_str());
                }
                AgentEvent::ToolFinished { .. } => {
                    if let Some(at) = cancelled_at {
                        latencies.push(at.elapsed());
                    }
                }
                _ => {}
            }
        }
        run.finish().await?;
    }
    latencies.sort();
    println!(
        "cancel of a busy script -> result recorded ({} cancels): p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );
    Ok(())
}
