//! Client CPU per MB of streamed tool-call arguments (issue 9, defect 13).
//!
//! `cargo bench -p agentry --bench streamed_args` (add `-- --quick` for the small sizes only).
//! A tool call whose arguments are one large JSON string is streamed by the testkit's fake
//! server in small deltas (one SSE event each, as llama-server and OpenAI send them); the
//! [`OpenAiChatModel`] client reads the stream to the end. The server runs on its own thread
//! and runtime, and only the client thread's CPU is counted (`/proc/thread-self/schedstat`),
//! so the figure is the provider's: HTTP, SSE decoding, delta accumulation and previews.
//! Linear cost shows as a constant CPU per MB whatever the size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::message::Msg;
use agentry::model::{ChatModel, ChatRequest, OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry_testkit::{Call, FakeLlm, Reply};
use futures::StreamExt;
use serde_json::json;

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// Starts the fake server on its own thread; it lives until the process ends.
fn start_server() -> Arc<FakeLlm> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            tx.send(Arc::new(FakeLlm::start().await)).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

struct Figure {
    items: usize,
    cpu: Duration,
    wall: Duration,
}

async fn stream_once(fake: &FakeLlm, model: &OpenAiChatModel, size: usize, piece: usize) -> Figure {
    let arguments = json!({"path": "big.txt", "content": "x".repeat(size)}).to_string();
    let pieces = arguments.len().div_ceil(piece);
    fake.push(Reply::tool_calls([Call::new("call_1", "write_file", arguments.clone())]).chunks(pieces));
    let wall = Instant::now();
    let cpu = thread_cpu();
    let mut stream = model.chat(ChatRequest::new(vec![Msg::user("write it")]));
    let mut items = 0;
    let mut last = None;
    while let Some(item) = stream.next().await {
        items += 1;
        last = Some(item.unwrap());
    }
    let cpu = thread_cpu().saturating_sub(cpu);
    let wall = wall.elapsed();
    let last = last.unwrap();
    let call = last.tool_uses().next().unwrap();
    assert_eq!(call.raw_input.as_deref(), Some(arguments.as_str()));
    assert_eq!(call.input["content"].as_str().map(str::len), Some(size));
    Figure { items, cpu, wall }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let fake = start_server();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("bench")
            .base_url(fake.base_url())
            .retry(RetryPolicy::none()),
    )
    .unwrap();
    let sizes: &[(usize, usize)] = if quick {
        &[(64 << 10, 8), (256 << 10, 8)]
    } else {
        &[(256 << 10, 8), (1 << 20, 8), (4 << 20, 8), (4 << 20, 64)]
    };
    println!("streamed tool-call arguments, client thread only (release build):");
    println!("| arguments | delta | events | items | client CPU ms | CPU ms per MB | wall ms |");
    println!("|---|---|---|---|---|---|---|");
    runtime.block_on(async {
        // Warm-up: connection and allocator.
        stream_once(&fake, &model, 16 << 10, 8).await;
        for &(size, piece) in sizes {
            let f = stream_once(&fake, &model, size, piece).await;
            let mb = size as f64 / f64::from(1 << 20);
            println!(
                "| {} KiB | {piece} B | {} | {} | {:.1} | {:.1} | {:.1} |",
                size >> 10,
                size.div_ceil(piece),
                f.items,
                f.cpu.as_secs_f64() * 1e3,
                f.cpu.as_secs_f64() * 1e3 / mb,
                f.wall.as_secs_f64() * 1e3,
            );
        }
    });
}
