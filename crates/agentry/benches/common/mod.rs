//! Shared by the cancellation benches: an in-process scripted model and the report format.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentry::agent::{AgentEvent, ReplyRun};
use agentry::message::{ContentBlock, Role, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use futures::StreamExt;
use serde_json::Value;

/// After a user message, calls `tool` with `input` `calls` times (ids `r{round}_c{i}`); after
/// tool results, answers "done". No HTTP, so the figures are the runtime's own.
pub struct Scripted {
    pub calls: usize,
    pub tool: &'static str,
    pub input: Value,
    pub round: AtomicUsize,
}

impl Scripted {
    pub fn new(calls: usize, tool: &'static str, input: Value) -> Self {
        Scripted {
            calls,
            tool,
            input,
            round: AtomicUsize::new(0),
        }
    }
}

impl ChatModel for Scripted {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let after_user = request.messages.last().is_some_and(|m| m.role == Role::User);
        let content = if after_user {
            let round = self.round.fetch_add(1, Ordering::Relaxed);
            (0..self.calls)
                .map(|i| {
                    ContentBlock::ToolUse(ToolUseBlock {
                        id: format!("r{round}_c{i}").into(),
                        name: self.tool.into(),
                        input: self.input.clone(),
                        raw_input: None,
                    })
                })
                .collect()
        } else {
            vec![ContentBlock::text("done")]
        };
        futures::stream::once(async move {
            Ok(ChatResponse {
                content,
                ..ChatResponse::default()
            })
        })
        .boxed()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One line: n, p50, p99, max and the target.
pub fn report(name: &str, target: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<40} n={:<5} p50={:>9.1?} p99={:>9.1?} max={:>9.1?}   target: {target}",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

/// Reads the reply's events until one matches.
pub async fn wait_for(run: &mut ReplyRun, matches: impl Fn(&AgentEvent) -> bool) {
    while let Some(event) = run.next_event().await {
        if matches(&event) {
            return;
        }
    }
    panic!("the event never came");
}
