//! Speed of the embedded model on one chat request, the figures llama-server reports in its
//! `timings`: `cargo run --release -p agentry-local --example speed -- MODEL.gguf [TOKENS] [PROMPT_FILE]`.
//! PROMPT_FILE replaces the question (to measure prompt processing on a long prompt).
//! Then a tool round trip through the agent: the seconds from a tool's result to the answer.
//! Prints one JSON line: load seconds, prompt tokens and tok/s, generated tokens and tok/s,
//! the seconds of a second request that reuses the cached prefix, and peak RSS.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use std::sync::Arc;

use agentry::message::Msg;
use agentry::model::{ChatModel, ChatRequest};
use agentry::tool::{FunctionTool, Toolkit};
use agentry::{AgentEvent, ReActAgent};
use agentry_local::{LocalModel, LocalModelConfig};
use futures::StreamExt;

/// The request (the same one `benchmarks/local-models/README.md` sends to llama-server).
pub const SYSTEM: &str = "You are a helpful assistant.";
/// The question.
pub const USER: &str =
    "Write a story of about 150 words about a lighthouse keeper who finds a message in a bottle.";

async fn complete(model: &LocalModel, messages: Vec<Msg>) -> Result<String, Box<dyn std::error::Error>> {
    let mut stream = model.chat(ChatRequest::new(messages));
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item?);
    }
    Ok(last
        .and_then(|r| agentry::message::join_text(&r.content))
        .unwrap_or_default())
}

/// Asks the agent a question that needs its `multiply` tool; the seconds from the tool's result
/// to the end of the answer, and of the whole reply.
async fn tool_round_trip(model: Arc<LocalModel>) -> Result<(f64, f64, String), Box<dyn std::error::Error>> {
    let toolkit = Toolkit::new();
    toolkit.register(FunctionTool::new(
        "multiply",
        "Multiplies two integers exactly.",
        serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
        |args, _| {
            let product = args["a"].as_i64().unwrap_or(0) * args["b"].as_i64().unwrap_or(0);
            agentry::tool::once(async move { product.to_string() })
        },
    ))?;
    let agent = ReActAgent::builder()
        .name("agentry")
        .sys_prompt("You are a helpful assistant. Use the tools for arithmetic.")
        .model(model)
        .toolkit(toolkit)
        .max_iters(4)
        .build()?;
    let started = Instant::now();
    let mut run = agent.start_reply(Msg::user("What is 1234 times 5678?"));
    let mut result_at = None;
    let trace = std::env::var_os("SPEED_TRACE").is_some();
    while let Some(event) = run.next_event().await {
        if trace {
            eprintln!("{:7.2}s {event:?}", started.elapsed().as_secs_f64());
        }
        if matches!(event, AgentEvent::ToolFinished { .. }) {
            result_at = Some(Instant::now());
        }
    }
    let reply = run.finish().await?;
    let round_trip = result_at.map(|at| at.elapsed().as_secs_f64()).unwrap_or(f64::NAN);
    Ok((
        round_trip,
        started.elapsed().as_secs_f64(),
        reply.text().unwrap_or_default(),
    ))
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: speed MODEL.gguf [MAX_TOKENS]")?;
    let max_tokens: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(128);
    let question = match args.next() {
        Some(file) => std::fs::read_to_string(file)?,
        None => USER.to_owned(),
    };
    let started = Instant::now();
    let model = Arc::new(LocalModel::load(
        &path,
        LocalModelConfig::default().max_tokens(max_tokens),
    )?);
    let load = started.elapsed().as_secs_f64();
    let messages = vec![Msg::system(SYSTEM), Msg::user(question)];
    let answer = complete(&model, messages.clone()).await?;
    let first = model.stats();
    // A second step of the same conversation: only the new tokens run.
    let mut next = messages;
    next.push(Msg::assistant("agentry", answer));
    next.push(Msg::user("Now give it a title."));
    let step = Instant::now();
    complete(&model, next.clone()).await?;
    let step_seconds = step.elapsed().as_secs_f64();
    let second = model.stats();
    // The same step with nothing cached: what every step would cost without prefix reuse.
    model.forget_cache()?;
    let cold = Instant::now();
    complete(&model, next).await?;
    let cold_step_seconds = cold.elapsed().as_secs_f64();
    // Twice: the first reply also runs the system block with the tool's description.
    tool_round_trip(Arc::clone(&model)).await?;
    let (round_trip, reply_seconds, answer) = tool_round_trip(Arc::clone(&model)).await?;
    let rate = |tokens: usize, seconds: f64| {
        if seconds > 0.0 {
            tokens as f64 / seconds
        } else {
            0.0
        }
    };
    println!(
        "{}",
        serde_json::json!({
            "model": path,
            "load_s": load,
            "prompt_tokens": first.prompt_tokens,
            "prompt_tok_s": rate(first.prompt_tokens, first.prompt_time.as_secs_f64()),
            "generated_tokens": first.generated_tokens,
            "generation_tok_s": rate(first.generated_tokens, first.generation_time.as_secs_f64()),
            "second_step_s": step_seconds,
            "second_step_prompt_tokens": second.prompt_tokens,
            "second_step_reused_tokens": second.reused_tokens,
            "second_step_without_reuse_s": cold_step_seconds,
            "tool_round_trip_s": round_trip,
            "tool_reply_s": reply_seconds,
            "tool_answer": answer,
            "peak_rss_mb": peak_rss_mb(),
        })
    );
    Ok(())
}
