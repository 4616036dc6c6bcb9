//! Cancellation latency, spec `cancellation.md` 3.9 (L1, L3, L5).
//!
//! `cargo bench -p agentry --bench cancel_latency` (add `-- --quick` for fewer rounds). The model
//! is scripted in-process so that the figures are the runtime's own: the HTTP provider has its
//! own benchmark (BENCHMARKS.md).
//!
//! - L1: time for `cancel_call` / `cancel_reply` to return (target p99 < 50 µs).
//! - L3: from `cancel_call` to the call's `ToolFinished` (result built, about to be stored), for a
//!   body that ignores its token and never ends, no `on_cancel` (target p99 ≤ 5 ms).
//! - L5: `cancel_reply` with 8 running calls whose `on_cancel` each takes 20 ms: time to
//!   `ReplyFinished` (target ≈ max(on_cancel) + scheduling, not their sum of 160 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::agent::{AgentEvent, ReActAgent};
use agentry::message::Msg;
use agentry::tool::{FunctionTool, Toolkit};
use common::{Scripted, report, wait_for};
use serde_json::json;
use tokio::sync::Semaphore;

/// A tool that signals its start and then never ends, ignoring its token; with
/// `on_cancel_ms`, it registers an `on_cancel` that takes that long.
fn waiting_tool(started: Arc<Semaphore>, on_cancel_ms: Option<u64>) -> FunctionTool {
    FunctionTool::new(
        "wait",
        "Waits forever.",
        json!({"type": "object"}),
        move |_, ctx| {
            if let Some(ms) = on_cancel_ms {
                ctx.set_on_cancel(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    Some("partial".into())
                });
            }
            started.add_permits(1);
            agentry::tool::once(std::future::pending::<&str>())
        },
    )
}

fn agent(calls: usize, started: Arc<Semaphore>, on_cancel_ms: Option<u64>) -> ReActAgent {
    let toolkit = Toolkit::new();
    toolkit.register(waiting_tool(started, on_cancel_ms)).unwrap();
    ReActAgent::builder()
        .model(Scripted::new(calls, "wait", json!({})))
        .toolkit(toolkit)
        .parallel_tool_calls(true)
        .cancel_grace(Duration::from_millis(1))
        .build()
        .unwrap()
}

async fn l1_l3(rounds: usize) {
    let started = Arc::new(Semaphore::new(0));
    let agent = agent(1, Arc::clone(&started), None);
    let handle = agent.handle();
    let (mut cancel, mut finished, mut reply_cancel) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut run = agent.start_reply(Msg::user("go"));
        started.acquire().await.unwrap().forget();
        let id = format!("r{round}_c0");
        let t0 = Instant::now();
        handle.cancel_call(&id);
        cancel.push(t0.elapsed());
        wait_for(&mut run, |e| matches!(e, AgentEvent::ToolFinished { .. })).await;
        finished.push(t0.elapsed());
        run.finish().await.unwrap();
        agent.memory().clear().await.unwrap();
    }
    for _ in 0..rounds {
        let run = agent.start_reply(Msg::user("go"));
        started.acquire().await.unwrap().forget();
        let t0 = Instant::now();
        handle.cancel_reply();
        reply_cancel.push(t0.elapsed());
        run.finish().await.unwrap();
        agent.memory().clear().await.unwrap();
    }
    report("L1 cancel_call returns", "p99 < 50 µs", cancel);
    report("L1 cancel_reply returns", "p99 < 50 µs", reply_cancel);
    report("L3 cancel_call -> ToolFinished", "p99 ≤ 5 ms", finished);
}

async fn l5(rounds: usize) {
    const CALLS: usize = 8;
    const ON_CANCEL_MS: u64 = 20;
    let started = Arc::new(Semaphore::new(0));
    let agent = agent(CALLS, Arc::clone(&started), Some(ON_CANCEL_MS));
    let handle = agent.handle();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let mut run = agent.start_reply(Msg::user("go"));
        for _ in 0..CALLS {
            started.acquire().await.unwrap().forget();
        }
        let t0 = Instant::now();
        handle.cancel_reply();
        wait_for(&mut run, |e| matches!(e, AgentEvent::ReplyFinished { .. })).await;
        samples.push(t0.elapsed());
        run.finish().await.unwrap();
        agent.memory().clear().await.unwrap();
    }
    report(
        "L5 cancel_reply, 8 x 20 ms on_cancel",
        "≈ 20 ms + scheduling, not 160 ms",
        samples,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        l1_l3(if quick { 200 } else { 2000 }).await;
        l5(if quick { 10 } else { 50 }).await;
    });
}
