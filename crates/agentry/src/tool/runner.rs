//! Driving one tool call on its own task.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::registry::RegisteredTool;
use super::response::failure;
use super::{ToolContext, ToolError, ToolResponse, ToolStream};
use crate::message::{ContentBlock, ToolUseBlock};

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_owned())
}

/// Spawns the tool and returns its chunks. The stream ends with exactly one `is_last` chunk.
pub(super) fn run_tool(
    entry: Arc<RegisteredTool>,
    call: &ToolUseBlock,
    args: Map<String, Value>,
    ctx: ToolContext,
) -> BoxStream<'static, ToolResponse> {
    let (tx, rx) = mpsc::channel::<ToolResponse>(8);
    // Only a postprocess function needs the call after this point.
    let call = entry.postprocess.as_ref().map(|_| call.clone());
    let name = entry.name.clone();
    // In the caller's span and OpenTelemetry context (the call's `execute_tool`): what the body
    // traces is its child.
    tokio::spawn(crate::trace_context::in_current_context(
        drive(entry, call, args, ctx, tx).in_current_span(),
    ));
    stream::unfold((rx, false), move |(mut rx, finished)| {
        let name = name.clone();
        async move {
            if finished {
                return None;
            }
            match rx.recv().await {
                Some(chunk) => {
                    let last = chunk.is_last;
                    Some((chunk, (rx, last)))
                }
                // The driver always sends a last chunk; this is reached only if its task died.
                None => Some((
                    failure(format!("the tool \"{name}\" stopped without a result.")),
                    (rx, true),
                )),
            }
        }
    })
    .boxed()
}

async fn drive(
    entry: Arc<RegisteredTool>,
    call: Option<ToolUseBlock>,
    args: Map<String, Value>,
    ctx: ToolContext,
    tx: mpsc::Sender<ToolResponse>,
) {
    let tool = Arc::clone(&entry.tool);
    let body_ctx = ctx.clone();
    let started = std::panic::catch_unwind(AssertUnwindSafe(move || tool.call(args, body_ctx)));
    let mut stream: ToolStream = match started {
        Ok(stream) => stream,
        Err(payload) => {
            let text = format!("the tool \"{}\" panicked: {}", entry.name, panic_text(&*payload));
            let _ = tx.send(failure(text)).await;
            return;
        }
    };
    // The last non-final chunk, kept so an error or an early end can build on its content.
    let mut previous: Option<ToolResponse> = None;
    loop {
        let next = tokio::select! {
            biased;
            () = ctx.cancelled() => {
                unwind(stream, ctx.cancel_grace()).await;
                return;
            }
            next = AssertUnwindSafe(stream.next()).catch_unwind() => next,
        };
        let chunk = match next {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(Some(Err(error))) => {
                let _ = tx.send(ended_with_error(previous, &error)).await;
                return;
            }
            Ok(None) => {
                // `previous` was postprocessed when it was first sent.
                let last = match previous {
                    Some(chunk) => chunk.last(true),
                    None => postprocess(&entry, call.as_ref(), ToolResponse::new(Vec::new())),
                };
                let _ = tx.send(last).await;
                return;
            }
            Err(payload) => {
                let error = ToolError::Failed(format!(
                    "the tool \"{}\" panicked: {}",
                    entry.name,
                    panic_text(&*payload)
                ));
                let _ = tx.send(ended_with_error(previous, &error)).await;
                return;
            }
        };
        let chunk = postprocess(&entry, call.as_ref(), chunk);
        let is_last = chunk.is_last;
        if !is_last {
            previous = Some(chunk.clone());
        }
        if is_last {
            let _ = tx.send(chunk).await;
            return;
        }
        if tx.send(chunk).await.is_err() {
            // Nobody reads the result any more (the reply went away): stop like a cancel.
            unwind(stream, ctx.cancel_grace()).await;
            return;
        }
    }
}

/// After a cancel: keeps polling the body for at most `grace` so cooperative code can unwind,
/// discarding whatever it produces (X11), then drops it (X14).
async fn unwind(mut stream: ToolStream, grace: std::time::Duration) {
    let drain =
        async { while let Ok(Some(_discarded)) = AssertUnwindSafe(stream.next()).catch_unwind().await {} };
    let _ = tokio::time::timeout(grace, drain).await;
}

/// The final chunk after an error: what was streamed so far, then the error text.
fn ended_with_error(previous: Option<ToolResponse>, error: &ToolError) -> ToolResponse {
    let mut chunk = previous.unwrap_or_else(|| ToolResponse::new(Vec::new()));
    chunk.content.push(ContentBlock::text(format!("Error: {error}")));
    chunk.is_last = true;
    chunk.is_error = true;
    chunk
}

fn postprocess(entry: &RegisteredTool, call: Option<&ToolUseBlock>, chunk: ToolResponse) -> ToolResponse {
    let (Some(post), Some(call)) = (&entry.postprocess, call) else {
        return chunk;
    };
    let is_last = chunk.is_last;
    match std::panic::catch_unwind(AssertUnwindSafe(|| post(call, chunk))) {
        // The postprocess function may edit content, not the stream's structure.
        Ok(processed) => processed.last(is_last),
        Err(payload) => failure(format!(
            "the postprocess function of \"{}\" panicked: {}",
            entry.name,
            panic_text(&*payload)
        ))
        .last(is_last),
    }
}
