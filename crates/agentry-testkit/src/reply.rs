//! Scripted replies.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::Shared;
use crate::gate::Gate;
use crate::sse::{Event, Pacing, end_with_error, event_stream};

/// One tool call the fake model makes.
#[derive(Debug, Clone)]
pub struct Call {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

impl Call {
    /// A call with raw `arguments` text (sent as is, so invalid JSON can be tested).
    ///
    /// On `/v1/messages` the text is streamed as `input_json_delta` pieces; a non-streamed
    /// `tool_use` gets it parsed as `input` (`{}` when empty, the raw text as a JSON string when
    /// it is not JSON).
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Call {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The call id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Completion,
    Status {
        code: u16,
        headers: Vec<(String, String)>,
        body: Option<String>,
    },
    RawSse(Vec<String>),
}

/// One scripted answer of the fake model.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) kind: Kind,
    pub(crate) text: Option<String>,
    pub(crate) reasoning: Option<String>,
    pub(crate) calls: Vec<Call>,
    pub(crate) usage: Option<(u64, u64)>,
    /// Cache (read, creation) input tokens.
    pub(crate) cache: Option<(u64, u64)>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) chunks: usize,
    repeat_ids: bool,
    pub(crate) delay: Option<Duration>,
    pub(crate) pause: Option<(usize, Gate)>,
    pub(crate) hang_after: Option<usize>,
    pub(crate) torn: bool,
    /// After this many events, an error event (kind, message) ends the stream.
    pub(crate) error_event: Option<(usize, String, String)>,
}

impl Reply {
    fn completion() -> Self {
        Reply {
            kind: Kind::Completion,
            text: None,
            reasoning: None,
            calls: Vec::new(),
            usage: None,
            cache: None,
            finish_reason: None,
            chunks: 3,
            repeat_ids: false,
            delay: None,
            pause: None,
            hang_after: None,
            torn: false,
            error_event: None,
        }
    }

    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Reply::completion().with_text(text)
    }

    /// An answer with tool calls.
    pub fn tool_calls(calls: impl IntoIterator<Item = Call>) -> Self {
        Reply {
            calls: calls.into_iter().collect(),
            ..Reply::completion()
        }
    }

    /// An HTTP error with this status (add headers and body with the builder methods).
    ///
    /// Without [`Reply::body`], the body is an error object in the format of the route asked:
    /// `{"error": {"message", "type": "fake"}}` on chat completions; on Anthropic's
    /// `/v1/messages`, `{"type": "error", "error": {"type", "message"}}` with type
    /// `overloaded_error` for 529, `rate_limit_error` for 429 and `api_error` otherwise.
    pub fn status(code: u16) -> Self {
        Reply {
            kind: Kind::Status {
                code,
                headers: Vec::new(),
                body: None,
            },
            ..Reply::completion()
        }
    }

    /// SSE events written verbatim, each its own HTTP chunk (for malformed streams).
    pub fn raw_sse<I, S>(events: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reply {
            kind: Kind::RawSse(events.into_iter().map(Into::into).collect()),
            ..Reply::completion()
        }
    }

    /// Sets the text (beside tool calls, or alone).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Sets reasoning text: `reasoning_content` on chat completions; on Anthropic's
    /// `/v1/messages`, a `thinking` block (first in the content) signed with
    /// [`thinking_signature`](crate::thinking_signature).
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Sets the usage reported (default: 10 input tokens, output bytes / 4): prompt and
    /// completion tokens on chat completions, input and output tokens on `/v1/messages`.
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Sets the prompt-cache usage reported (default 0 and 0): on `/v1/messages`,
    /// `cache_read_input_tokens` = `read` and `cache_creation_input_tokens` = `write`; on chat
    /// completions, `usage.prompt_tokens_details.cached_tokens` = `read` (`write` has no
    /// OpenAI counterpart and is not reported there).
    pub fn cache_usage(mut self, read: u64, write: u64) -> Self {
        self.cache = Some((read, write));
        self
    }

    /// Sends each SSE event as two HTTP chunks cut at its middle byte (possibly inside a UTF-8
    /// character), to test a client's reassembly of events (both routes, streamed replies).
    /// Pauses and hangs still count whole events.
    pub fn torn_events(mut self) -> Self {
        self.torn = true;
        self
    }

    /// Streams `events` SSE events, then an error event, and ends the stream (streamed replies).
    ///
    /// On `/v1/messages`: `event: error` / `data: {"type":"error","error":{"type":KIND,
    /// "message":MESSAGE}}` (e.g. kind `overloaded_error`). On chat completions:
    /// `data: {"error":{"message":MESSAGE,"type":KIND}}`. No `[DONE]` or `message_stop` follows.
    pub fn error_event_after(mut self, events: usize, kind: &str, message: &str) -> Self {
        self.error_event = Some((events, kind.to_owned(), message.to_owned()));
        self
    }

    /// Overrides the finish reason (`finish_reason` on chat completions, `stop_reason` on
    /// `/v1/messages`, e.g. `"max_tokens"`).
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Splits text and each call's arguments into `n` SSE deltas (default 3).
    pub fn chunks(mut self, n: usize) -> Self {
        self.chunks = n.max(1);
        self
    }

    /// Repeats `id`, `type` and `function.name` in every tool-call delta (llama-cpp-python).
    pub fn repeat_ids(mut self) -> Self {
        self.repeat_ids = true;
        self
    }

    /// Waits before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Streams `events` SSE events, then waits at `gate` until it is opened.
    pub fn pause_after(mut self, events: usize, gate: Gate) -> Self {
        self.pause = Some((events, gate));
        self
    }

    /// Streams `events` SSE events, then never sends more (until the client goes away).
    pub fn hang_after(mut self, events: usize) -> Self {
        self.hang_after = Some(events);
        self
    }

    /// Adds a response header (status replies).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Kind::Status { headers, .. } = &mut self.kind {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sets the response body (status replies).
    pub fn body(mut self, text: impl Into<String>) -> Self {
        if let Kind::Status { body, .. } = &mut self.kind {
            *body = Some(text.into());
        }
        self
    }

    fn finish(&self) -> String {
        self.finish_reason.clone().unwrap_or_else(|| {
            if self.calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_owned()
        })
    }

    /// (input, output) tokens.
    pub(crate) fn tokens(&self) -> (u64, u64) {
        self.usage.unwrap_or_else(|| {
            let bytes = self.text.as_deref().map_or(0, str::len)
                + self
                    .calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len())
                    .sum::<usize>();
            (10, (bytes as u64).div_ceil(4).max(1))
        })
    }

    /// The pacing of this reply's stream.
    pub(crate) fn pacing(&self) -> Pacing {
        Pacing {
            pause: self.pause.clone(),
            hang_after: self.hang_after,
            torn: self.torn,
        }
    }

    fn usage_json(&self) -> Value {
        let (prompt, completion) = self.tokens();
        let mut usage = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
        if let Some((read, _)) = self.cache {
            usage["prompt_tokens_details"] = json!({"cached_tokens": read});
        }
        usage
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `s` split on char boundaries into at most `n` non-empty pieces covering it.
pub(crate) fn split(s: &str, n: usize) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let chars: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let per = chars.len().div_ceil(n).max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let end = (start + per).min(chars.len());
        let from = chars[start];
        let to = chars.get(end).copied().unwrap_or(s.len());
        pieces.push(&s[from..to]);
        start = end;
    }
    pieces
}

pub(crate) fn respond(
    reply: Reply,
    shared: &Arc<Shared>,
    stream: bool,
    include_usage: bool,
    model: &str,
) -> Response {
    match &reply.kind {
        Kind::Status { code, headers, body } => {
            let body = body.clone().unwrap_or_else(|| {
                json!({"error": {"message": format!("fake error {code}"), "type": "fake"}}).to_string()
            });
            status_response(*code, headers, body)
        }
        Kind::RawSse(events) => {
            let events = events.iter().map(|e| Event::Raw(e.clone())).collect();
            openai_stream(&reply, events, shared)
        }
        Kind::Completion if stream => {
            let events = sse_events(&reply, include_usage, model);
            openai_stream(&reply, events, shared)
        }
        Kind::Completion => axum::Json(completion_json(&reply, model)).into_response(),
    }
}

/// A JSON error response with the scripted status and headers.
pub(crate) fn status_response(code: u16, headers: &[(String, String)], body: String) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn openai_stream(reply: &Reply, mut events: Vec<Event>, shared: &Arc<Shared>) -> Response {
    if let Some((after, kind, message)) = &reply.error_event {
        let error = Event::Json(json!({"error": {"message": message, "type": kind}}));
        end_with_error(&mut events, *after, error);
    }
    let body = event_stream(events, reply.pacing(), Arc::clone(shared));
    crate::sse_response(Body::from_stream(body))
}

fn completion_json(reply: &Reply, model: &str) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": reply.text.clone().map_or(Value::Null, Value::String),
    });
    if let Some(reasoning) = &reply.reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !reply.calls.is_empty() {
        message["tool_calls"] = reply
            .calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish()}],
        "usage": reply.usage_json(),
    })
}

fn sse_events(reply: &Reply, include_usage: bool, model: &str) -> Vec<Event> {
    let created = now();
    let chunk = |choices: Value| {
        Event::Json(json!({
            "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices,
        }))
    };
    let delta =
        |delta: Value, finish: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]));
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}), Value::Null)];
    if let Some(reasoning) = &reply.reasoning {
        for piece in split(reasoning, reply.chunks) {
            events.push(delta(json!({"reasoning_content": piece}), Value::Null));
        }
    }
    if let Some(text) = &reply.text {
        for piece in split(text, reply.chunks) {
            events.push(delta(json!({"content": piece}), Value::Null));
        }
    }
    for (i, call) in reply.calls.iter().enumerate() {
        let header = json!({"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}});
        events.push(delta(json!({"tool_calls": [header]}), Value::Null));
        for piece in split(&call.arguments, reply.chunks) {
            let mut part = json!({"index": i, "function": {"arguments": piece}});
            if reply.repeat_ids {
                part = json!({"index": i, "id": call.id, "type": "function",
                              "function": {"name": call.name, "arguments": piece}});
            }
            events.push(delta(json!({"tool_calls": [part]}), Value::Null));
        }
    }
    events.push(delta(json!({}), json!(reply.finish())));
    if include_usage {
        let mut usage = chunk(json!([]));
        if let Event::Json(v) = &mut usage {
            v["usage"] = reply.usage_json();
        }
        events.push(usage);
    }
    events.push(Event::Done);
    events
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_covers_the_string_on_char_boundaries() {
        assert_eq!(split("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(split("ab", 5), ["a", "b"]);
        assert_eq!(split("héllo", 2).concat(), "héllo");
        assert!(split("", 3).is_empty());
    }
}
