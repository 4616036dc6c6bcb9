//! MCP cancel latency, spec `cancellation.md` L4: the `notifications/cancelled` goes out on the
//! transport without waiting for the server, before the cancelled result is recorded.
//!
//! `cargo bench -p agentry --bench mcp_cancel_latency` (add `-- --quick` for fewer rounds). The
//! MCP server is the rmcp test server of `agentry-testkit` over stdio (built here if needed); it
//! notes the wall-clock time at which each notification reached its handler, so the first figure
//! is an upper bound of "cancel → bytes written" (it adds the pipe and the server's parsing).
//!
//! - L4a: `cancel_call` → the server's handler has the notification (target p99 ≤ 5 ms).
//! - L4b: `cancel_call` → the call's `ToolFinished` (the result does not wait for the server).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentry::agent::{AgentEvent, ReActAgent};
use agentry::mcp::{McpClient, McpServerConfig, McpToolOptions};
use agentry::message::Msg;
use agentry::tool::Toolkit;
use common::{Scripted, report, wait_for};
use serde_json::json;

fn test_server() -> PathBuf {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut args = vec!["build", "-q", "-p", "agentry-testkit", "--bin", "mcp-test-server"];
    if profile == "release" {
        args.push("--release");
    }
    let status = std::process::Command::new(env!("CARGO"))
        .args(&args)
        .status()
        .unwrap();
    assert!(status.success(), "cannot build mcp-test-server");
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(profile)
        .join("mcp-test-server")
}

fn unix_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// The arrival time the server noted for the newest cancel notification after `after_ns`.
async fn arrival_after(client: &McpClient, after_ns: u128) -> u128 {
    for _ in 0..5000 {
        let arrived = client.stderr_tail().iter().rev().find_map(|line| {
            let rest = line.strip_prefix("notifications/cancelled at_ns=")?;
            let at: u128 = rest.split(' ').next()?.parse().ok()?;
            (at > after_ns).then_some(at)
        });
        if let Some(at) = arrived {
            return at;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the server never got the cancel notification");
}

async fn l4(rounds: usize) {
    let server = test_server();
    let client = McpClient::connect(McpServerConfig::stdio(
        "test",
        server.display().to_string(),
        Vec::<String>::new(),
    ))
    .await
    .unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, McpToolOptions::new().enable(["slow"]))
        .await
        .unwrap();
    let agent = ReActAgent::builder()
        .model(Scripted::new(1, "slow", json!({"seconds": 600})))
        .toolkit(toolkit)
        .build()
        .unwrap();
    let handle = agent.handle();
    let (mut arrived, mut finished) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut run = agent.start_reply(Msg::user("go"));
        // The call is running on the server once it reports progress.
        wait_for(&mut run, |e| matches!(e, AgentEvent::ToolProgress { .. })).await;
        let id = format!("r{round}_c0");
        let (t0_ns, t0) = (unix_ns(), Instant::now());
        handle.cancel_call(&id);
        wait_for(&mut run, |e| matches!(e, AgentEvent::ToolFinished { .. })).await;
        finished.push(t0.elapsed());
        let at = arrival_after(&client, t0_ns).await;
        arrived.push(Duration::from_nanos(
            u64::try_from(at - t0_ns).unwrap_or(u64::MAX),
        ));
        run.finish().await.unwrap();
        agent.memory().clear().await.unwrap();
    }
    report("L4a cancel_call -> server has the notice", "p99 ≤ 5 ms", arrived);
    report(
        "L4b cancel_call -> ToolFinished (MCP)",
        "no wait for the server",
        finished,
    );
    client.close().await;
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(l4(if quick { 30 } else { 300 }));
}
