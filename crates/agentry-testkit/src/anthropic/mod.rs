//! Anthropic's Messages API on `POST /v1/messages`: the same script, checks and recording as
//! chat completions, answered in Anthropic's wire format.

mod conversation;
mod events;
pub(crate) mod invariants;
#[cfg(test)]
mod invariants_tests;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::reply::{Call, Kind, Reply, status_response};
use crate::sse::{Event, end_with_error, event_stream};
use crate::{Admitted, Refused, Shared, admit};

use invariants::check_anthropic_conversation;

/// The signature the fake gives a thinking block with this text: `fake-sig-` and the 64-bit
/// FNV-1a hash of the text in 16 hex digits.
///
/// [`check_anthropic_conversation`] requires every `thinking` block sent back to carry exactly
/// this signature, so a client that alters the text or the signature is caught. Use it to
/// build conversations with thinking blocks by hand.
pub fn thinking_signature(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fake-sig-{hash:016x}")
}

/// Anthropic's error object.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    (status, axum::Json(error_body(kind, message))).into_response()
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = admit(&shared, &method, &uri, &headers, &body, |headers, body| {
        check_anthropic_conversation(Some(headers), body)
    });
    let Admitted { reply, body, number } = match admitted {
        Ok(admitted) => admitted,
        Err(Refused::Invalid(text)) => {
            return error_response(StatusCode::BAD_REQUEST, "invalid_request_error", &text);
        }
        Err(Refused::NoReply(text)) => {
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, "api_error", &text);
        }
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_owned();
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let id = format!("msg_fake{number:04}");
    respond(&reply, &shared, stream, &model, &id)
}

fn respond(reply: &Reply, shared: &Arc<Shared>, stream: bool, model: &str, id: &str) -> Response {
    match &reply.kind {
        Kind::Status { code, headers, body } => {
            let body = body.clone().unwrap_or_else(|| {
                let (kind, message) = match code {
                    529 => ("overloaded_error", "Overloaded".to_owned()),
                    429 => ("rate_limit_error", "Rate limited (fake)".to_owned()),
                    _ => ("api_error", format!("fake error {code}")),
                };
                error_body(kind, &message).to_string()
            });
            status_response(*code, headers, body)
        }
        Kind::RawSse(events) => {
            let events = events.iter().map(|e| Event::Raw(e.clone())).collect();
            sse(reply, events, shared)
        }
        Kind::Completion if stream => sse(reply, events::stream_events(reply, model, id), shared),
        Kind::Completion => axum::Json(message_json(reply, model, id)).into_response(),
    }
}

fn sse(reply: &Reply, mut events: Vec<Event>, shared: &Arc<Shared>) -> Response {
    if let Some((after, kind, message)) = &reply.error_event {
        end_with_error(
            &mut events,
            *after,
            Event::Named("error", error_body(kind, message)),
        );
    }
    let body = event_stream(events, reply.pacing(), Arc::clone(shared));
    crate::sse_response(Body::from_stream(body))
}

/// The stop reason: the scripted one, else `tool_use` with calls and `end_turn` without.
pub(crate) fn stop_reason(reply: &Reply) -> String {
    reply.finish_reason.clone().unwrap_or_else(|| {
        if reply.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
        .to_owned()
    })
}

/// The usage object with `output_tokens` as given.
pub(crate) fn usage(reply: &Reply, output_tokens: u64) -> Value {
    let (input, _) = reply.tokens();
    let (read, write) = reply.cache.unwrap_or((0, 0));
    json!({
        "input_tokens": input,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
    })
}

/// A call's `input`: its arguments parsed, `{}` when empty, the raw text as a string when they
/// are not JSON (so a client's handling of a broken input can be tested).
fn tool_input(call: &Call) -> Value {
    if call.arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

/// The non-streamed answer.
fn message_json(reply: &Reply, model: &str, id: &str) -> Value {
    let mut content = Vec::new();
    if let Some(thinking) = &reply.reasoning {
        let signature = thinking_signature(thinking);
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
    }
    if let Some(text) = reply.text.as_ref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &reply.calls {
        content
            .push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)}));
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(reply),
        "stop_sequence": null,
        "usage": usage(reply, reply.tokens().1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_fnv1a_of_the_text() {
        assert_eq!(thinking_signature(""), "fake-sig-cbf29ce484222325");
        assert_eq!(thinking_signature("a"), "fake-sig-af63dc4c8601ec8c");
        assert_ne!(thinking_signature("plan"), thinking_signature("plan "));
    }

    #[test]
    fn non_streamed_message_has_blocks_in_order() {
        let reply = Reply::tool_calls([
            Call::new("toolu_1", "add", r#"{"a":1}"#),
            Call::new("t2", "x", "{oops"),
        ])
        .with_text("ok")
        .with_reasoning("think")
        .cache_usage(3, 4);
        let v = message_json(&reply, "m", "msg_fake0001");
        let types: Vec<&str> = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["thinking", "text", "tool_use", "tool_use"]);
        assert_eq!(v["content"][0]["signature"], thinking_signature("think"));
        assert_eq!(v["content"][2]["input"], json!({"a": 1}));
        assert_eq!(v["content"][3]["input"], "{oops");
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["usage"]["cache_read_input_tokens"], 3);
        assert_eq!(v["usage"]["cache_creation_input_tokens"], 4);
    }
}
