//! Response decoding: whole messages, and the streamed events (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, `ping`, `error`).

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::message::ContentBlock;
use crate::model::accumulate::{CallDelta, DeltaAccumulator, finished_call};
use crate::model::http::{Absorbed, StreamAccumulator};
use crate::model::{ChatResponse, ChatUsage, ModelError, excerpt};

const EXCERPT: usize = 300;

/// Token counts as Anthropic reports them: `input_tokens` leaves out the cached ones.
#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Later reports (`message_delta`) update the counts they carry.
    fn update(&mut self, later: WireUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
    }

    fn into_usage(self, time: Duration) -> ChatUsage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        ChatUsage {
            input_tokens: self.input_tokens.unwrap_or(0) + read + write,
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_tokens: read,
            cache_write_tokens: write,
            reasoning_tokens: 0,
            time,
        }
    }
}

/// Anthropic's error object, in an `error` event or a body.
#[derive(Deserialize)]
struct WireError {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    message: String,
}

impl WireError {
    fn into_error(self) -> ModelError {
        ModelError::Api(describe_error(&self.kind, &self.message))
    }
}

/// What an Anthropic error says, with a hint for the kinds a user can act on.
pub(super) fn describe_error(kind: &str, message: &str) -> String {
    let hint = match kind {
        "overloaded_error" => " (Anthropic's servers are overloaded: try again later)",
        "rate_limit_error" => " (rate limited: slow down or raise the limit)",
        "authentication_error" => " (check ANTHROPIC_API_KEY)",
        _ => "",
    };
    format!("{kind}: {message}{hint}")
}

/// The text of an error body (`{"type":"error","error":{...}}`), or its excerpt.
pub(super) fn error_body_text(body: &str) -> String {
    #[derive(Deserialize)]
    struct Body {
        error: WireError,
    }
    match serde_json::from_str::<Body>(body) {
        Ok(b) => describe_error(&b.error.kind, &b.error.message),
        Err(_) => excerpt(body.trim(), 500),
    }
}

/// A content block. Decoded through [`FlatBlock`]: serde reads an internally tagged enum into
/// a tree of its own first, to find the tag, which costs more than the block itself.
#[derive(Deserialize)]
#[serde(from = "FlatBlock")]
enum WireBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Option<Value>,
    },
    Other,
}

/// Every field a block of any type may have.
#[derive(Deserialize)]
struct FlatBlock {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    thinking: String,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    input: Option<Value>,
}

impl From<FlatBlock> for WireBlock {
    fn from(block: FlatBlock) -> Self {
        match block.kind.as_str() {
            "text" => WireBlock::Text { text: block.text },
            "thinking" => WireBlock::Thinking {
                thinking: block.thinking,
                signature: block.signature,
            },
            "redacted_thinking" => WireBlock::RedactedThinking { data: block.data },
            "tool_use" => WireBlock::ToolUse {
                id: block.id,
                name: block.name,
                input: block.input,
            },
            _ => WireBlock::Other,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Whole messages

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    id: String,
    #[serde(default)]
    content: Vec<WireBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

/// Decodes a whole (not streamed) message.
pub(super) fn decode_message(body: &[u8], time: Duration) -> Result<ChatResponse, ModelError> {
    let message: Message = serde_json::from_slice(body).map_err(|e| ModelError::Decode {
        reason: e.to_string(),
        excerpt: excerpt(&String::from_utf8_lossy(body), EXCERPT),
    })?;
    if let Some(error) = message.error {
        return Err(error.into_error());
    }
    let mut content = Vec::with_capacity(message.content.len());
    for block in message.content {
        match block {
            WireBlock::Text { text } if !text.is_empty() => content.push(ContentBlock::Text { text }),
            WireBlock::Thinking { thinking, signature } => {
                content.push(ContentBlock::Thinking { thinking, signature })
            }
            WireBlock::RedactedThinking { data } => content.push(ContentBlock::RedactedThinking { data }),
            WireBlock::ToolUse { id, name, input } => {
                let raw = input.map_or_else(String::new, |v| v.to_string());
                content.push(ContentBlock::ToolUse(finished_call(id, name, raw)));
            }
            WireBlock::Text { .. } | WireBlock::Other => {}
        }
    }
    Ok(ChatResponse {
        id: message.id,
        content,
        usage: message.usage.map(|u| u.into_usage(time)),
        finish_reason: message.stop_reason,
    })
}

// ---------------------------------------------------------------------------------------------
// Streamed messages

/// A stream event: every field an event of any type may have, read as a plain struct (serde
/// would read an internally tagged enum into a tree first, for the reason given at
/// [`WireBlock`]), with the deltas' text borrowed from the event when it has no escapes.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    message: Option<StartedMessage>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    content_block: Option<WireBlock>,
    #[serde(default, borrow)]
    delta: Option<EventDelta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

/// The `delta` of a `content_block_delta` (typed) or of a `message_delta` (a stop reason).
#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    id: String,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Turns the events of one streamed message into cumulative responses, through the
/// provider-neutral [`DeltaAccumulator`].
#[derive(Default)]
pub(super) struct Accumulator {
    acc: DeltaAccumulator,
    usage: WireUsage,
    started: bool,
    stop_reason_seen: bool,
}

impl Accumulator {
    fn parse(data: &str) -> Result<Event<'_>, ModelError> {
        serde_json::from_str(data).map_err(|e| ModelError::Decode {
            reason: format!("invalid JSON in a stream event: {e}"),
            excerpt: excerpt(data, EXCERPT),
        })
    }

    /// Takes one event (`data` is its text, for errors).
    fn absorb_event(&mut self, event: Event<'_>, data: &str) -> Result<Absorbed, ModelError> {
        let kind = event.kind.as_ref();
        let missing = |field: &str| ModelError::Decode {
            reason: format!("invalid stream event: a {kind} event without `{field}`"),
            excerpt: excerpt(data, EXCERPT),
        };
        let changed = match kind {
            "message_start" => {
                let message = event.message.ok_or_else(|| missing("message"))?;
                self.started = true;
                self.acc.set_id(message.id);
                if let Some(usage) = message.usage {
                    self.usage.update(usage);
                }
                false
            }
            "content_block_start" => {
                let index = event.index.ok_or_else(|| missing("index"))?;
                match event.content_block.ok_or_else(|| missing("content_block"))? {
                    WireBlock::Text { text } => self.acc.push_text(&text),
                    WireBlock::Thinking { thinking, signature } => {
                        self.acc.start_thinking();
                        if let Some(signature) = signature {
                            self.acc.push_thinking_signature(&signature);
                        }
                        self.acc.push_thinking(&thinking)
                    }
                    WireBlock::RedactedThinking { data } => {
                        self.acc.push_redacted_thinking(data);
                        true
                    }
                    WireBlock::ToolUse { id, name, input } => {
                        // The start carries `input: {}`; the arguments follow as JSON pieces.
                        let arguments = input
                            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                            .map(|v| v.to_string());
                        self.acc.push_call(CallDelta {
                            index: Some(index),
                            id: Some(id),
                            name: Some(name),
                            arguments,
                        })
                    }
                    WireBlock::Other => false,
                }
            }
            "content_block_delta" => {
                let index = event.index.ok_or_else(|| missing("index"))?;
                let delta = event.delta.ok_or_else(|| missing("delta"))?;
                match delta.kind.as_ref() {
                    "text_delta" => {
                        let text = delta.text.ok_or_else(|| missing("delta.text"))?;
                        self.acc.push_text(&text)
                    }
                    "thinking_delta" => {
                        let thinking = delta.thinking.ok_or_else(|| missing("delta.thinking"))?;
                        self.acc.push_thinking(&thinking)
                    }
                    "signature_delta" => {
                        let signature = delta.signature.ok_or_else(|| missing("delta.signature"))?;
                        self.acc.push_thinking_signature(&signature);
                        false
                    }
                    "input_json_delta" => {
                        let json = delta.partial_json.ok_or_else(|| missing("delta.partial_json"))?;
                        self.acc.push_call(CallDelta {
                            index: Some(index),
                            arguments: Some(json.into_owned()),
                            ..CallDelta::default()
                        })
                    }
                    _ => false,
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason_seen = true;
                    self.acc.set_finish_reason(reason);
                }
                if let Some(usage) = event.usage {
                    self.usage.update(usage);
                }
                false
            }
            "message_stop" => return Ok(Absorbed::Complete),
            "error" => return Err(event.error.ok_or_else(|| missing("error"))?.into_error()),
            // `content_block_stop`, `ping`, and types this version does not know.
            _ => false,
        };
        Ok(if changed {
            Absorbed::Changed
        } else {
            Absorbed::Unchanged
        })
    }
}

impl StreamAccumulator for Accumulator {
    fn absorb(&mut self, _event: &str, data: &str) -> Result<Absorbed, ModelError> {
        // The data names its own type; the SSE event name repeats it.
        let event = Accumulator::parse(data)?;
        self.absorb_event(event, data)
    }

    fn snapshot(&mut self) -> ChatResponse {
        self.acc.snapshot()
    }

    fn finish(&mut self, time: Duration) -> Result<ChatResponse, ModelError> {
        if !self.started {
            return Err(ModelError::Decode {
                reason: "the stream ended without a message_start event".into(),
                excerpt: String::new(),
            });
        }
        self.acc.set_usage(self.usage.into_usage(time));
        Ok(self.acc.finish_at(time))
    }

    fn end_of_stream(&mut self, time: Duration) -> Result<ChatResponse, ModelError> {
        if self.stop_reason_seen {
            return self.finish(time);
        }
        Err(ModelError::Stream(
            "the server closed the stream before the message was complete (no stop_reason, no message_stop)"
                .into(),
        ))
    }

    fn early_error(&self, event: &str, data: &str) -> Option<ModelError> {
        if event != "error" && !data.contains("\"error\"") {
            return None;
        }
        match Accumulator::parse(data) {
            Ok(Event {
                kind,
                error: Some(error),
                ..
            }) if kind == "error" => Some(error.into_error()),
            _ => None,
        }
    }

    fn argument_work(&self) -> usize {
        self.acc.argument_work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_without_its_fields_is_a_decode_error_and_an_unknown_one_is_ignored() {
        for (name, data) in [
            (
                "",
                r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}"#,
            ),
            (
                "",
                r#"{"type": "content_block_start", "content_block": {"type": "text", "text": ""}}"#,
            ),
            ("", r#"{"type": "message_start"}"#),
            ("", r#"{"type": "error"}"#),
        ] {
            let mut acc = Accumulator::default();
            assert!(
                matches!(acc.absorb(name, data), Err(ModelError::Decode { .. })),
                "{data}"
            );
        }
        let mut acc = Accumulator::default();
        for data in [
            r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}}"#,
            r#"{"type": "some_future_event", "x": 1}"#,
        ] {
            assert!(matches!(acc.absorb("", data), Ok(Absorbed::Unchanged)), "{data}");
        }
    }

    fn feed(acc: &mut Accumulator, event: Value) -> Absorbed {
        acc.absorb("", &event.to_string()).unwrap()
    }

    #[test]
    fn a_streamed_message_with_thinking_text_and_a_call_accumulates() {
        let mut acc = Accumulator::default();
        feed(
            &mut acc,
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 1}}}),
        );
        feed(
            &mut acc,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        );
        feed(
            &mut acc,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me add."}}),
        );
        feed(
            &mut acc,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
        );
        feed(
            &mut acc,
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        );
        assert_eq!(
            feed(
                &mut acc,
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Adding."}})
            ),
            Absorbed::Changed
        );
        feed(
            &mut acc,
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}}),
        );
        feed(
            &mut acc,
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": 1, \"note\": \"hal"}}),
        );
        let partial = acc.snapshot();
        assert_eq!(
            partial.tool_uses().next().unwrap().input,
            json!({"a": 1, "note": "hal"})
        );
        feed(
            &mut acc,
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "f\"}"}}),
        );
        feed(&mut acc, json!({"type": "content_block_stop", "index": 2}));
        feed(
            &mut acc,
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        );
        assert_eq!(
            feed(&mut acc, json!({"type": "message_stop"})),
            Absorbed::Complete
        );
        let done = acc.finish(Duration::from_millis(7)).unwrap();
        assert_eq!(done.id, "msg_1");
        assert_eq!(
            done.content[0],
            ContentBlock::Thinking {
                thinking: "Let me add.".into(),
                signature: Some("sig==".into())
            }
        );
        assert_eq!(done.content[1], ContentBlock::text("Adding."));
        let call = done.tool_uses().next().unwrap();
        assert_eq!((call.id.as_str(), call.name.as_str()), ("toolu_1", "add"));
        assert_eq!(call.input, json!({"a": 1, "note": "half"}));
        let usage = done.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.output_tokens
            ),
            (125, 100, 20, 30)
        );
        assert_eq!(done.finish_reason.as_deref(), Some("tool_use"));
    }

    #[test]
    fn an_error_event_is_an_api_error_and_retryable_only_first() {
        let mut acc = Accumulator::default();
        let data = r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        let early = acc.early_error("error", data).unwrap().to_string();
        assert!(early.contains("overloaded_error: Overloaded"), "{early}");
        assert!(early.contains("try again later"), "{early}");
        feed(&mut acc, json!({"type": "message_start", "message": {"id": "m"}}));
        let err = acc.absorb("error", data).unwrap_err();
        assert!(matches!(err, ModelError::Api(m) if m.contains("overloaded")));
        assert!(acc.early_error("message_start", r#"{"type": "ping"}"#).is_none());
    }

    #[test]
    fn a_stream_cut_before_its_stop_reason_is_an_error() {
        let mut acc = Accumulator::default();
        feed(&mut acc, json!({"type": "message_start", "message": {"id": "m"}}));
        let err = acc.end_of_stream(Duration::ZERO).unwrap_err().to_string();
        assert!(err.contains("no stop_reason"), "{err}");
    }

    #[test]
    fn whole_message_decodes() {
        let body = json!({"id": "msg", "type": "message", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu", "name": "add", "input": {"a": 2}},
            {"type": "server_tool_use", "id": "x"}
        ], "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4}});
        let r = decode_message(body.to_string().as_bytes(), Duration::ZERO).unwrap();
        assert_eq!(r.content.len(), 4);
        assert_eq!(
            r.content[1],
            ContentBlock::RedactedThinking { data: "xyz".into() }
        );
        assert_eq!(r.tool_uses().next().unwrap().input, json!({"a": 2}));
        assert_eq!(r.usage.unwrap().output_tokens, 4);
        let err = decode_message(b"<html>", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("<html>"), "{err}");
        let err =
            error_body_text(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert!(err.starts_with("overloaded_error: Overloaded"), "{err}");
    }
}
