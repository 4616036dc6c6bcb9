//! The streamed answer of `/v1/messages`: Anthropic's SSE events.

use serde_json::{Value, json};

use super::{stop_reason, thinking_signature, usage};
use crate::reply::{Reply, split};
use crate::sse::Event;

/// One content block being streamed: its start, its deltas, its stop.
fn block(events: &mut Vec<Event>, index: usize, start: Value, deltas: impl IntoIterator<Item = Value>) {
    events.push(Event::Named(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    for delta in deltas {
        events.push(Event::Named(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    events.push(Event::Named(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
}

/// `message_start`, `ping`, the blocks (thinking, text, one `tool_use` per call) each as
/// `content_block_start` / `content_block_delta`s / `content_block_stop`, `message_delta`,
/// `message_stop`.
pub(super) fn stream_events(reply: &Reply, model: &str, id: &str) -> Vec<Event> {
    let message = json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage(reply, 1),
    });
    let mut events = vec![
        Event::Named(
            "message_start",
            json!({"type": "message_start", "message": message}),
        ),
        Event::Named("ping", json!({"type": "ping"})),
    ];
    let mut index = 0;
    if let Some(thinking) = &reply.reasoning {
        let mut deltas: Vec<Value> = split(thinking, reply.chunks)
            .into_iter()
            .map(|piece| json!({"type": "thinking_delta", "thinking": piece}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": thinking_signature(thinking)}));
        block(
            &mut events,
            index,
            json!({"type": "thinking", "thinking": ""}),
            deltas,
        );
        index += 1;
    }
    if let Some(text) = reply.text.as_ref().filter(|t| !t.is_empty()) {
        let deltas = split(text, reply.chunks)
            .into_iter()
            .map(|piece| json!({"type": "text_delta", "text": piece}));
        block(&mut events, index, json!({"type": "text", "text": ""}), deltas);
        index += 1;
    }
    for call in &reply.calls {
        let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        let deltas = split(&call.arguments, reply.chunks)
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}));
        block(&mut events, index, start, deltas);
        index += 1;
    }
    events.push(Event::Named(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
            "usage": {"output_tokens": reply.tokens().1},
        }),
    ));
    events.push(Event::Named("message_stop", json!({"type": "message_stop"})));
    events
}
