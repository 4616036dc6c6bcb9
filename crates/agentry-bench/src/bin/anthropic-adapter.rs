//! An Anthropic Messages front for `shared/bench/mockllm`, so that the Anthropic provider runs
//! the peer bench's conversation: `POST /v1/messages` becomes a chat-completions request to the
//! mock, and the mock's answer comes back in Anthropic's format.
//!
//! ```text
//! anthropic-adapter --upstream http://127.0.0.1:PORT/v1 [--host ADDR] [--port N] [--port-file F]
//! ```
//!
//! - Request: `system` → a system message; a user message's `tool_result` blocks → `role: tool`
//!   messages (in order), its text → a user message; an assistant's text → `content` and its
//!   `tool_use` blocks → `tool_calls`; tools → functions; `stream` kept (with
//!   `stream_options.include_usage`). `x-mock-*` headers are passed on.
//! - Streamed answer: converted as it arrives (what has arrived is sent on at once, nothing
//!   waits for more; the chunked terminator goes with the last event) into `message_start`
//!   (with usage), `content_block_start` / `content_block_delta` (`text_delta`,
//!   `input_json_delta`) / `content_block_stop` per text and per tool call, `message_delta`
//!   (stop reason, output tokens) and `message_stop`.
//! - Whole answer: one Anthropic message.
//! - `GET /stats` and `/health` are the mock's, so that a driver's completion count still works
//!   through the adapter.
//!
//! One current-thread runtime and one pooled upstream client: it runs beside the client under
//! test and must not add latency noise. It prints `PORT=<n>` once listening.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, ready};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures::StreamExt;
use http_body::Frame;
use serde_json::{Map, Value, json};

struct Upstream {
    client: reqwest::Client,
    /// `{upstream}/chat/completions`.
    completions: String,
    /// The mock's root (the upstream without `/v1`), for `/stats` and `/health`.
    root: String,
}

fn main() -> anyhow::Result<()> {
    let mut upstream = String::new();
    let mut host = "127.0.0.1".to_owned();
    let mut port: u16 = 0;
    let mut port_file: Option<String> = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--upstream" => upstream = value()?,
            "--host" => host = value()?,
            "--port" => port = value()?.parse()?,
            "--port-file" => port_file = Some(value()?),
            "-h" | "--help" => {
                println!(
                    "anthropic-adapter --upstream http://127.0.0.1:PORT/v1 [--host ADDR] [--port N] [--port-file F]"
                );
                return Ok(());
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if upstream.is_empty() {
        bail!("--upstream URL (the mock's /v1) is required");
    }
    let upstream = upstream.trim_end_matches('/').to_owned();
    let root = upstream.strip_suffix("/v1").unwrap_or(&upstream).to_owned();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = Arc::new(Upstream {
        client: reqwest::Client::builder().tcp_nodelay(true).build()?,
        completions: format!("{upstream}/chat/completions"),
        root,
    });
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .route("/stats", get(passthrough))
        .route("/health", get(passthrough))
        .with_state(state);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
        let port = listener.local_addr()?.port();
        if let Some(file) = port_file {
            std::fs::write(file, format!("{port}\n"))?;
        }
        println!("PORT={port}");
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await?;
        anyhow::Ok(())
    })
}

/// `GET /stats`, `/health`: the mock's answer, whole (with a length, not chunked).
async fn passthrough(State(up): State<Arc<Upstream>>, uri: axum::http::Uri) -> Response {
    let url = format!("{}{}", up.root, uri.path());
    match up.client.get(url).send().await {
        Ok(answer) => {
            let status = answer.status();
            match answer.bytes().await {
                Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
                Err(e) => error(StatusCode::BAD_GATEWAY, &e.to_string()),
            }
        }
        Err(e) => error(StatusCode::BAD_GATEWAY, &e.to_string()),
    }
}

/// An Anthropic error body.
fn error(status: StatusCode, message: &str) -> Response {
    let kind = if status.is_client_error() {
        "invalid_request_error"
    } else {
        "api_error"
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn messages(State(up): State<Arc<Upstream>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();
    let chat = to_chat(&request, stream);
    let mut call = up
        .client
        .post(&up.completions)
        .header(header::CONTENT_TYPE, "application/json")
        .body(chat.to_string());
    for (name, value) in &headers {
        if name.as_str().starts_with("x-mock-") {
            call = call.header(name, value);
        }
    }
    let answer = match call.send().await {
        Ok(a) => a,
        Err(e) => return error(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
    };
    let status = answer.status();
    if !status.is_success() {
        let text = answer.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_owned))
            .unwrap_or(text);
        return error(status, &message);
    }
    if !stream {
        return match answer.bytes().await {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(completion) => (
                    [(header::CONTENT_TYPE, "application/json")],
                    to_message(&completion, &model),
                )
                    .into_response(),
                Err(e) => error(StatusCode::BAD_GATEWAY, &format!("upstream JSON: {e}")),
            },
            Err(e) => error(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        };
    }

    // Streamed: what has arrived from upstream is converted and sent on at once.
    let mut response = Body::new(Events {
        upstream: answer.bytes_stream().ready_chunks(64).boxed(),
        conv: Converter::new(model, (body.len() as u64).div_ceil(4)),
        done: false,
    })
    .into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A streamed answer's body: the Anthropic events of what has arrived from upstream, sent on
/// without waiting for more. The pieces already there go out together (`ready_chunks`), as the
/// mock's own writes reach a direct client; and the body reports its end with the last event,
/// so that the chunked encoding's terminator goes out in the same write. A client that stops
/// reading at `message_stop` then leaves a connection that can be reused, as with the mock.
struct Events {
    upstream: futures::stream::BoxStream<'static, Vec<reqwest::Result<Bytes>>>,
    conv: Converter,
    done: bool,
}

impl HttpBody for Events {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        while !this.done {
            let out = match ready!(this.upstream.poll_next_unpin(cx)) {
                Some(pieces) => {
                    let mut out = Vec::new();
                    for piece in pieces {
                        match piece {
                            Ok(piece) => out.extend(this.conv.feed(&piece)),
                            Err(e) => {
                                this.done = true;
                                return Poll::Ready(Some(Err(std::io::Error::other(e))));
                            }
                        }
                    }
                    this.done = this.conv.stopped;
                    out
                }
                None => {
                    // Ended without `[DONE]`: close what is open.
                    this.done = true;
                    this.conv.finish()
                }
            };
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The text of Anthropic content: a string, or the text blocks of an array.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// An Anthropic Messages request as a chat-completions request.
fn to_chat(request: &Value, stream: bool) -> Value {
    let mut messages = Vec::new();
    let system = text_of(request.get("system"));
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let blocks = match message.get("content") {
            Some(Value::String(text)) => {
                messages.push(json!({"role": role, "content": text}));
                continue;
            }
            Some(Value::Array(blocks)) => blocks.as_slice(),
            _ => &[],
        };
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(text) = block.get("text").and_then(Value::as_str) {
                        texts.push(text);
                    }
                }
                Some("tool_use") => calls.push(json!({
                    "id": block.get("id").cloned().unwrap_or(Value::Null),
                    "type": "function",
                    "function": {
                        "name": block.get("name").cloned().unwrap_or(Value::Null),
                        "arguments": block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string),
                    },
                })),
                Some("tool_result") => messages.push(json!({
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id").cloned().unwrap_or(Value::Null),
                    "content": text_of(block.get("content")),
                })),
                _ => {}
            }
        }
        let text = texts.join("\n");
        if role == "assistant" {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            out.insert(
                "content".into(),
                if text.is_empty() { Value::Null } else { json!(text) },
            );
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            messages.push(Value::Object(out));
        } else if !text.is_empty() {
            messages.push(json!({"role": "user", "content": text}));
        }
    }
    let mut chat = Map::new();
    chat.insert(
        "model".into(),
        request.get("model").cloned().unwrap_or(json!("mock-model")),
    );
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(max) = request.get("max_tokens") {
        chat.insert("max_tokens".into(), max.clone());
    }
    if let Some(tools) = request.get("tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.get("name").cloned().unwrap_or(Value::Null),
                    "description": t.get("description").cloned().unwrap_or(json!("")),
                    "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                }})
            })
            .collect();
        chat.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = request.get("tool_choice") {
        let choice = match choice.get("type").and_then(Value::as_str) {
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice.get("name")}}),
            _ => json!("auto"),
        };
        chat.insert("tool_choice".into(), choice);
    }
    chat.insert("stream".into(), json!(stream));
    if stream {
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(chat)
}

fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("tool_calls" | "function_call") => "tool_use",
        Some("length") => "max_tokens",
        _ => "end_turn",
    }
}

/// A JSON string literal.
fn q(s: &str) -> String {
    Value::from(s).to_string()
}

/// A string field of a chunk as a JSON literal, or `default`'s.
fn q_or(v: Option<&Value>, default: &str) -> String {
    q(v.and_then(Value::as_str).unwrap_or(default))
}

// The answers are written by hand, in the key order of Anthropic's own (`type` first): the
// provider reads the blocks and events as tagged enums, for which that order is the fast path.

/// A whole chat completion as an Anthropic message.
fn to_message(completion: &Value, model: &str) -> String {
    let choice = completion.pointer("/choices/0");
    let message = choice.and_then(|c| c.get("message"));
    let mut content = Vec::new();
    if let Some(text) = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        content.push(format!(r#"{{"type":"text","text":{}}}"#, q(text)));
    }
    for call in message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let arguments = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("{}");
        let input = serde_json::from_str::<Value>(arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        content.push(format!(
            r#"{{"type":"tool_use","id":{},"name":{},"input":{input}}}"#,
            q_or(call.get("id"), ""),
            q_or(call.pointer("/function/name"), ""),
        ));
    }
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let usage = completion.get("usage");
    let tokens = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    format!(
        r#"{{"id":{},"type":"message","role":"assistant","model":{},"content":[{}],"stop_reason":"{}","stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{}}}}}"#,
        q_or(completion.get("id"), "msg_mock"),
        q(model),
        content.join(","),
        stop_reason(finish),
        tokens("prompt_tokens"),
        tokens("completion_tokens"),
    )
}

/// The open content block of a streamed message.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    None,
    Text,
    /// A tool call, by its chat-completions index.
    Call(u64),
}

/// Chat-completion chunks in, Anthropic events out, one upstream piece at a time.
struct Converter {
    model: String,
    input_tokens: u64,
    /// Bytes of an SSE event not complete yet.
    pending: Vec<u8>,
    started: bool,
    open: Open,
    /// Index of the open (or last) Anthropic block.
    index: u64,
    blocks: u64,
    finish: Option<String>,
    output_tokens: u64,
    stopped: bool,
}

impl Converter {
    fn new(model: String, input_tokens: u64) -> Self {
        Converter {
            model,
            input_tokens,
            pending: Vec::new(),
            started: false,
            open: Open::None,
            index: 0,
            blocks: 0,
            finish: None,
            output_tokens: 0,
            stopped: false,
        }
    }

    /// The events for one upstream piece (possibly none).
    fn feed(&mut self, piece: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(piece);
        let mut start = 0;
        while let Some(end) = find(&pending[start..], b"\n\n") {
            for line in pending[start..start + end].split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if let Some(data) = line.strip_prefix(b"data:") {
                    self.data(data.trim_ascii(), &mut out);
                }
            }
            start += end + 2;
        }
        pending.drain(..start);
        self.pending = pending;
        out
    }

    fn data(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if data == b"[DONE]" {
            out.extend(self.finish());
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if !self.started {
            self.started = true;
            emit(
                out,
                "message_start",
                &format!(
                    r#"{{"type":"message_start","message":{{"id":{},"type":"message","role":"assistant","model":{},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}}}}"#,
                    q_or(chunk.get("id"), "msg_mock"),
                    q(&self.model),
                    self.input_tokens,
                ),
            );
        }
        if let Some(tokens) = chunk.pointer("/usage/completion_tokens").and_then(Value::as_u64) {
            self.output_tokens = tokens;
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(text) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                if self.open != Open::Text {
                    self.open_block(out, Open::Text, r#"{"type":"text","text":""}"#);
                }
                self.delta(out, &format!(r#"{{"type":"text_delta","text":{}}}"#, q(text)));
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
            {
                let at = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    let block = format!(
                        r#"{{"type":"tool_use","id":{},"name":{},"input":{{}}}}"#,
                        q(id),
                        q_or(call.pointer("/function/name"), ""),
                    );
                    self.open_block(out, Open::Call(at), &block);
                }
                if let Some(arguments) = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .filter(|a| !a.is_empty())
                {
                    self.delta(
                        out,
                        &format!(r#"{{"type":"input_json_delta","partial_json":{}}}"#, q(arguments)),
                    );
                }
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish.to_owned());
            self.close_block(out);
        }
    }

    fn open_block(&mut self, out: &mut Vec<u8>, kind: Open, block: &str) {
        self.close_block(out);
        self.index = self.blocks;
        self.blocks += 1;
        self.open = kind;
        emit(
            out,
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":{},"content_block":{block}}}"#,
                self.index
            ),
        );
    }

    fn delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        emit(
            out,
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":{},"delta":{delta}}}"#,
                self.index
            ),
        );
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if self.open != Open::None {
            self.open = Open::None;
            emit(
                out,
                "content_block_stop",
                &format!(r#"{{"type":"content_block_stop","index":{}}}"#, self.index),
            );
        }
    }

    /// `message_delta` and `message_stop`, once.
    fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.stopped || !self.started {
            return out;
        }
        self.stopped = true;
        self.close_block(&mut out);
        emit(
            &mut out,
            "message_delta",
            &format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                stop_reason(self.finish.as_deref()),
                self.output_tokens
            ),
        );
        emit(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
        out
    }
}

/// One SSE event.
fn emit(out: &mut Vec<u8>, event: &str, data: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
