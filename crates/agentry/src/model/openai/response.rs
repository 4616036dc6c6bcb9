//! Response decoding: whole `chat.completion` bodies and accumulation of streamed chunks.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::message::{ContentBlock, new_id};
use crate::model::accumulate::{CallDelta, DeltaAccumulator, finished_call};
use crate::model::http::{Absorbed, StreamAccumulator};
use crate::model::{ChatResponse, ChatUsage, ModelError, excerpt};

const EXCERPT: usize = 300;

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self, time: Duration) -> ChatUsage {
        ChatUsage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            cache_read_tokens: self
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            time,
            ..ChatUsage::default()
        }
    }
}

/// An `error` member some servers put inside a 200 response or an SSE event.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireError {
    Object { message: String },
    Text(String),
    Other(Value),
}

impl WireError {
    fn message(self) -> String {
        match self {
            WireError::Object { message } | WireError::Text(message) => message,
            WireError::Other(v) => v.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Whole responses

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ResponseMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<TextOrParts>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TextOrParts {
    Text(String),
    Parts(Vec<Value>),
}

impl TextOrParts {
    fn into_text(self) -> String {
        match self {
            TextOrParts::Text(t) => t,
            TextOrParts::Parts(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<ResponseFunction>,
}

#[derive(Deserialize)]
struct ResponseFunction {
    #[serde(default)]
    name: Option<String>,
    /// A JSON string on OpenAI's wire; some servers send the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

/// Decodes a whole `chat.completion` body.
pub(super) fn decode_completion(body: &[u8], time: Duration) -> Result<ChatResponse, ModelError> {
    let completion: Completion = serde_json::from_slice(body).map_err(|e| ModelError::Decode {
        reason: e.to_string(),
        excerpt: excerpt(&String::from_utf8_lossy(body), EXCERPT),
    })?;
    if let Some(error) = completion.error {
        return Err(ModelError::Api(error.message()));
    }
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(no_choices(excerpt(&String::from_utf8_lossy(body), EXCERPT)));
    };
    let mut content = Vec::new();
    if let Some(message) = choice.message {
        if let Some(thinking) = message
            .reasoning_content
            .or(message.reasoning)
            .filter(|t| !t.is_empty())
        {
            content.push(ContentBlock::thinking(thinking));
        }
        if let Some(text) = message
            .content
            .map(TextOrParts::into_text)
            .filter(|t| !t.is_empty())
        {
            content.push(ContentBlock::Text { text });
        }
        for call in message.tool_calls.unwrap_or_default() {
            let function = call.function.unwrap_or(ResponseFunction {
                name: None,
                arguments: None,
            });
            let raw = match function.arguments {
                Some(Value::String(s)) => s,
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            content.push(ContentBlock::ToolUse(finished_call(
                call.id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(generated_call_id),
                function.name.unwrap_or_default(),
                raw,
            )));
        }
    }
    Ok(ChatResponse {
        id: completion.id.unwrap_or_default(),
        content,
        usage: completion.usage.map(|u| u.into_usage(time)),
        finish_reason: choice.finish_reason,
    })
}

/// An answer without any choice, streamed or not: there is nothing to show, which must not pass
/// for an empty answer.
fn no_choices(excerpt: String) -> ModelError {
    ModelError::Decode {
        reason: "the response has no choices".into(),
        excerpt,
    }
}

fn generated_call_id() -> String {
    format!("call_{}", new_id())
}

// ---------------------------------------------------------------------------------------------
// Streamed responses

#[derive(Deserialize)]
pub(super) struct Chunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Turns a sequence of chunks into cumulative responses, through the provider-neutral
/// [`DeltaAccumulator`].
#[derive(Default)]
pub(super) struct Accumulator {
    acc: DeltaAccumulator,
    /// Chunks absorbed, and whether any had a choice.
    chunks: usize,
    choices_seen: bool,
}

impl StreamAccumulator for Accumulator {
    fn absorb(&mut self, _event: &str, data: &str) -> Result<Absorbed, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Absorbed::Complete);
        }
        Ok(if self.absorb_chunk(Accumulator::parse(data)?)? {
            Absorbed::Changed
        } else {
            Absorbed::Unchanged
        })
    }

    fn snapshot(&mut self) -> ChatResponse {
        self.acc.snapshot()
    }

    fn finish(&mut self, time: Duration) -> Result<ChatResponse, ModelError> {
        if !self.choices_seen {
            return Err(no_choices(format!(
                "a stream of {} chunk(s) without a choice, then its end",
                self.chunks
            )));
        }
        Ok(self.acc.finish_at(time))
    }

    fn end_of_stream(&mut self, time: Duration) -> Result<ChatResponse, ModelError> {
        if self.acc.is_finished() {
            // Some servers close the stream after the finish chunk without `[DONE]`.
            return self.finish(time);
        }
        Err(ModelError::Stream(
            "the server closed the stream before the response was complete (no finish_reason, no [DONE])"
                .into(),
        ))
    }

    fn argument_work(&self) -> usize {
        self.acc.argument_work()
    }
}

impl Accumulator {
    /// Parses one SSE `data` payload.
    pub(super) fn parse(data: &str) -> Result<Chunk, ModelError> {
        serde_json::from_str(data).map_err(|e| ModelError::Decode {
            reason: format!("invalid JSON in a stream event: {e}"),
            excerpt: excerpt(data, EXCERPT),
        })
    }

    /// Absorbs one chunk; returns whether the visible content changed.
    fn absorb_chunk(&mut self, chunk: Chunk) -> Result<bool, ModelError> {
        if let Some(error) = chunk.error {
            return Err(ModelError::Api(error.message()));
        }
        if let Some(id) = chunk.id {
            self.acc.set_id(id);
        }
        if let Some(usage) = chunk.usage {
            self.acc.set_usage(usage.into_usage(Duration::ZERO));
        }
        self.chunks += 1;
        self.choices_seen |= !chunk.choices.is_empty();
        let mut changed = false;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.acc.set_finish_reason(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(t) = delta.reasoning_content.or(delta.reasoning) {
                changed |= self.acc.push_thinking(&t);
            }
            if let Some(t) = delta.content {
                changed |= self.acc.push_text(&t);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                let (name, arguments) = match call.function {
                    Some(f) => (f.name, f.arguments),
                    None => (None, None),
                };
                changed |= self.acc.push_call(CallDelta {
                    index: call.index,
                    id: call.id,
                    name,
                    arguments,
                });
            }
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn feed(acc: &mut Accumulator, chunk: Value) -> bool {
        acc.absorb_chunk(Accumulator::parse(&chunk.to_string()).unwrap())
            .unwrap()
    }

    #[test]
    fn tool_call_deltas_accumulate_by_index() {
        let mut acc = Accumulator::default();
        feed(
            &mut acc,
            json!({"id": "r1", "choices": [{"delta": {"role": "assistant", "content": ""}}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "id": "c0", "type": "function", "function": {"name": "add", "arguments": ""}}]}}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [
            {"index": 1, "id": "c1", "type": "function", "function": {"name": "mul", "arguments": "{\"x\""}}]}}]}),
        );
        assert!(feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"a\": 1, \"b\": \"tw"}}]}}]})
        ));
        let partial = acc.snapshot();
        let calls: Vec<_> = partial.tool_uses().collect();
        assert_eq!(calls[0].input, json!({"a": 1, "b": "tw"}));
        assert_eq!(calls[1].input, json!({}));
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "o\"}"}}]}}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [
            {"index": 1, "function": {"arguments": ": 2}"}}]}}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        );
        assert!(acc.acc.is_finished());
        let done = acc.finish(Duration::ZERO).unwrap();
        assert_eq!(done.id, "r1");
        let calls: Vec<_> = done.tool_uses().collect();
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("c0", "add"));
        assert_eq!(calls[0].input, json!({"a": 1, "b": "two"}));
        assert_eq!((calls[1].id.as_str(), calls[1].name.as_str()), ("c1", "mul"));
        assert_eq!(calls[1].input, json!({"x": 2}));
        assert_eq!(
            done.usage.as_ref().map(|u| (u.input_tokens, u.output_tokens)),
            Some((7, 3))
        );
        assert_eq!(done.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn repeated_ids_and_names_are_not_concatenated() {
        let mut acc = Accumulator::default();
        for piece in ["{\"", "city", "\": \"", "Paris", "\"}"] {
            feed(
                &mut acc,
                json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_x",
                "type": "function", "function": {"name": "get_weather", "arguments": piece}}]}}]}),
            );
        }
        feed(
            &mut acc,
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        );
        let done = acc.finish(Duration::ZERO).unwrap();
        let calls: Vec<_> = done.tool_uses().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].id, "call_x");
        assert_eq!(calls[0].input, json!({"city": "Paris"}));
    }

    #[test]
    fn invalid_final_arguments_give_null_input_and_keep_raw() {
        let mut acc = Accumulator::default();
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0,
            "function": {"name": "add", "arguments": "{a: 1}"}}]}, "finish_reason": "tool_calls"}]}),
        );
        let done = acc.finish(Duration::ZERO).unwrap();
        let call = done.tool_uses().next().unwrap();
        assert_eq!(call.input, Value::Null);
        assert_eq!(call.raw_input.as_deref(), Some("{a: 1}"));
        assert!(
            call.id.starts_with("call_"),
            "a missing id is generated: {}",
            call.id
        );
    }

    #[test]
    fn text_and_reasoning_accumulate() {
        let mut acc = Accumulator::default();
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"reasoning_content": "think "}}]}),
        );
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"reasoning_content": "more"}}]}),
        );
        feed(&mut acc, json!({"choices": [{"delta": {"content": "Hel"}}]}));
        feed(
            &mut acc,
            json!({"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]}),
        );
        let done = acc.finish(Duration::ZERO).unwrap();
        assert_eq!(
            done.content,
            vec![ContentBlock::thinking("think more"), ContentBlock::text("Hello")]
        );
    }

    #[test]
    fn error_event_and_garbage_are_errors() {
        let mut acc = Accumulator::default();
        let err = acc
            .absorb_chunk(Accumulator::parse(r#"{"error": {"message": "overloaded"}}"#).unwrap())
            .unwrap_err();
        assert!(matches!(err, ModelError::Api(m) if m == "overloaded"));
        let err = Accumulator::parse("this is not json").err().unwrap();
        assert!(err.to_string().contains("this is not json"), "{err}");
    }

    #[test]
    fn whole_completion_decodes() {
        let body = json!({"id": "x", "choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}},
                           {"id": "d", "type": "function", "function": {"name": "obj", "arguments": {"k": true}}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let r = decode_completion(body.to_string().as_bytes(), Duration::ZERO).unwrap();
        let calls: Vec<_> = r.tool_uses().collect();
        assert_eq!(calls[0].input, json!({"a": 1}));
        assert_eq!(calls[1].input, json!({"k": true}));
        assert_eq!(r.usage.unwrap().output_tokens, 4);
        let err = decode_completion(b"<html>", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("<html>"), "{err}");
        let err = decode_completion(br#"{"error": {"message": "bad key"}}"#, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("bad key"), "{err}");
    }
}
