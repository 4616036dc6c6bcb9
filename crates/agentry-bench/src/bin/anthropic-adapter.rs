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
//! - `POST /v1/chat/completions` is relayed as it is, through the same path (a control: the
//!   OpenAI provider through the adapter shows what the extra hop costs the client).
//! - `GET /stats` and `/health` are the mock's, so that a driver's completion count still works
//!   through the adapter.
//!
//! With `--mock [-k K] [-p P] [--chunks N]` there is no upstream: the binary answers as
//! mockllm would, through the same conversion, as a mock speaking the Anthropic format (its
//! `/stats` counts the completions); the client then has no extra hop to wait for.
//!
//! One current-thread runtime and one pooled upstream client: it runs beside the client under
//! test and must not add latency noise. It prints `PORT=<n>` once listening.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

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
    /// `--mock`: answer in place of the upstream.
    mock: Option<Mock>,
}

/// mockllm's conversation, answered here (`--mock`): K steps of P calls to `add`, then the text.
struct Mock {
    steps: u64,
    parallel: u64,
    chunks: usize,
    completions: AtomicU64,
}

fn main() -> anyhow::Result<()> {
    let mut upstream = String::new();
    let mut host = "127.0.0.1".to_owned();
    let mut port: u16 = 0;
    let mut port_file: Option<String> = None;
    let mut mock = None;
    let (mut steps, mut parallel, mut chunks) = (5, 1, 4);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--upstream" => upstream = value()?,
            "--host" => host = value()?,
            "--port" => port = value()?.parse()?,
            "--port-file" => port_file = Some(value()?),
            "--mock" => mock = Some(()),
            "-k" | "--steps" => steps = value()?.parse()?,
            "-p" | "--parallel" => parallel = value()?.parse()?,
            "--chunks" => chunks = value()?.parse()?,
            "-h" | "--help" => {
                println!(
                    "anthropic-adapter --upstream http://127.0.0.1:PORT/v1 | --mock [-k K] [-p P] [--chunks N]\n                  [--host ADDR] [--port N] [--port-file F]"
                );
                return Ok(());
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if upstream.is_empty() && mock.is_none() {
        bail!("--upstream URL (the mock's /v1) or --mock is required");
    }
    let upstream = upstream.trim_end_matches('/').to_owned();
    let root = upstream.strip_suffix("/v1").unwrap_or(&upstream).to_owned();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = Arc::new(Upstream {
        client: reqwest::Client::builder().tcp_nodelay(true).build()?,
        completions: format!("{upstream}/chat/completions"),
        root,
        mock: mock.map(|()| Mock {
            steps,
            parallel: parallel.max(1),
            chunks: chunks.max(1),
            completions: AtomicU64::new(0),
        }),
    });
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(relay))
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
    if let Some(mock) = &up.mock {
        let completions = mock.completions.load(Ordering::Relaxed);
        let body = json!({"status": "ok", "completions": completions}).to_string();
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
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

/// `POST /v1/chat/completions`: the request and answer as they are, through the same path as
/// a converted one (for a control run: the OpenAI provider through the adapter).
async fn relay(State(up): State<Arc<Upstream>>, headers: HeaderMap, body: Bytes) -> Response {
    let stream = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("stream")?.as_bool())
        .unwrap_or(false);
    let answer = match forward(&up, &headers, body).await {
        Ok(answer) => answer,
        Err(response) => return response,
    };
    if !stream {
        return match answer.bytes().await {
            Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
            Err(e) => error(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        };
    }
    let mut conv = Converter::new(String::new(), 0);
    conv.relay = true;
    stream_events(answer, conv).await
}

/// Sends a chat-completions body to the mock (with the `x-mock-*` headers); an error
/// response unless the answer is a success.
async fn forward(
    up: &Upstream,
    headers: &HeaderMap,
    chat: impl Into<reqwest::Body>,
) -> Result<reqwest::Response, Response> {
    let mut call = up
        .client
        .post(&up.completions)
        .header(header::CONTENT_TYPE, "application/json")
        .body(chat);
    for (name, value) in headers {
        if name.as_str().starts_with("x-mock-") {
            call = call.header(name, value);
        }
    }
    let answer = match call.send().await {
        Ok(a) => a,
        Err(e) => return Err(error(StatusCode::BAD_GATEWAY, &format!("upstream: {e}"))),
    };
    let status = answer.status();
    if !status.is_success() {
        let text = answer.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(error(status, &message));
    }
    Ok(answer)
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
    if let Some(mock) = &up.mock {
        return mock.answer(&request, &model, stream, body.len());
    }
    let answer = match forward(&up, &headers, to_chat(&request, stream).to_string()).await {
        Ok(answer) => answer,
        Err(response) => return response,
    };
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
    stream_events(answer, Converter::new(model, (body.len() as u64).div_ceil(4))).await
}

/// A streamed answer: what has arrived from upstream is converted and sent on at once. The
/// first events are awaited before the head is sent, so that they go out in its write, as
/// the mock's head and body do.
async fn stream_events(answer: reqwest::Response, conv: Converter) -> Response {
    let mut events = Events {
        upstream: answer.bytes_stream().boxed(),
        conv,
        buf: Vec::new(),
        yielded: 0,
        done: false,
    };
    match std::future::poll_fn(|cx| Pin::new(&mut events).poll_frame(cx)).await {
        Some(Ok(frame)) => {
            if let Ok(data) = frame.into_data() {
                events.buf = data.into();
            }
        }
        Some(Err(e)) => return error(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        None => {}
    }
    let mut response = Body::new(events).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A streamed answer's body: the Anthropic events of what has arrived from upstream, sent on
/// without waiting for the network.
///
/// Three things keep the delivery in the mock's own shape, so that the client under test does
/// the same reads and wake-ups through the adapter as without it (the first is in the
/// handler: the head waits for the first events, to go out in one write with them):
/// - The mock writes a whole answer at once, which a direct client reads at once; here the
///   upstream client hands its pieces over one at a time from its connection task, so when it
///   has nothing ready the body yields to the runtime (up to [`YIELDS`] times in a row), to
///   collect what that task has already received, before it sends what it has. Nothing waits
///   on the network: a piece not yet received goes out as soon as it is.
/// - The body reports its end with the last event, so that the chunked encoding's terminator
///   goes out in the same write: a client that stops reading at `message_stop` then leaves a
///   connection that can be reused, as with the mock (otherwise every step reconnects).
struct Events {
    upstream: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    conv: Converter,
    /// Events converted and not sent yet.
    buf: Vec<u8>,
    /// Polls in a row that found nothing and yielded to the runtime.
    yielded: u8,
    /// No more events will come.
    done: bool,
}

/// How many times in a row the body yields to the runtime, while it holds events, before it
/// sends them.
const YIELDS: u8 = 4;

impl HttpBody for Events {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(
                    (!this.buf.is_empty())
                        .then(|| Ok(Frame::data(Bytes::from(std::mem::take(&mut this.buf))))),
                );
            }
            match this.upstream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(piece))) => {
                    this.buf.extend(this.conv.feed(&piece));
                    this.yielded = 0;
                    this.done = this.conv.stopped;
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    this.buf.clear();
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Poll::Ready(None) => {
                    // Ended without `[DONE]`: close what is open.
                    this.buf.extend(this.conv.finish());
                    this.done = true;
                }
                Poll::Pending if this.buf.is_empty() => return Poll::Pending,
                Poll::Pending if this.yielded < YIELDS => {
                    this.yielded += 1;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => {
                    this.yielded = 0;
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(std::mem::take(&mut this.buf))))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.buf.is_empty()
    }
}

impl Mock {
    /// mockllm's answer to the request, converted as a forwarded one would be: count the
    /// `tool_result` blocks after the last user text; below K × P, P calls to `add` with
    /// `{"a": count + i, "b": 1}`, else "done after K steps". A streamed answer is written at
    /// once (one chunk per event group), as mockllm writes its own.
    fn answer(&self, request: &Value, model: &str, stream: bool, body_len: usize) -> Response {
        let seq = self.completions.fetch_add(1, Ordering::Relaxed);
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let user_text = |m: &Value| {
            m.get("role").and_then(Value::as_str) == Some("user") && !text_of(m.get("content")).is_empty()
        };
        let start = messages.iter().rposition(user_text).map_or(0, |i| i + 1);
        let count = messages[start..]
            .iter()
            .filter_map(|m| m.get("content")?.as_array())
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .count() as u64;
        let id = format!("chatcmpl-mock-{seq}");
        let calls: Vec<(String, String)> = if count < self.steps * self.parallel {
            (0..self.parallel)
                .map(|i| {
                    (
                        format!("call_mock_{seq}_{i}"),
                        format!("{{\"a\": {}, \"b\": 1}}", count + i),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        let text = format!("done after {} steps", count / self.parallel);
        let out_len: usize = if calls.is_empty() {
            text.len()
        } else {
            calls.iter().map(|(_, a)| a.len() + 3).sum()
        };
        let usage = json!({"prompt_tokens": (body_len as u64).div_ceil(4),
                           "completion_tokens": (out_len as u64).div_ceil(4) + 1});
        let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
        if !stream {
            let message = if calls.is_empty() {
                json!({"role": "assistant", "content": text})
            } else {
                json!({"role": "assistant", "content": null, "tool_calls": calls.iter().map(|(cid, args)| json!({
                    "id": cid, "type": "function", "function": {"name": "add", "arguments": args}
                })).collect::<Vec<_>>()})
            };
            let completion = json!({"id": id, "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage});
            return (
                [(header::CONTENT_TYPE, "application/json")],
                to_message(&completion, model),
            )
                .into_response();
        }
        // The chunks mockllm would stream, through the converter.
        let mut conv = Converter::new(model.to_owned(), (body_len as u64).div_ceil(4));
        let mut frames = VecDeque::new();
        let mut chunk = |delta: Value, finish: Value, usage: Option<&Value>| {
            let mut c = json!({"id": id, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            if let Some(usage) = usage {
                c = json!({"id": id, "choices": [], "usage": usage});
            }
            let out = conv.feed(format!("data: {c}\n\n").as_bytes());
            if !out.is_empty() {
                frames.push_back(Bytes::from(out));
            }
        };
        if calls.is_empty() {
            chunk(json!({"role": "assistant", "content": ""}), Value::Null, None);
            for piece in split_pieces(&text, self.chunks) {
                chunk(json!({"content": piece}), Value::Null, None);
            }
        } else {
            for (i, (cid, args)) in calls.iter().enumerate() {
                chunk(
                    json!({"tool_calls": [{"index": i, "id": cid, "type": "function", "function": {"name": "add", "arguments": ""}}]}),
                    Value::Null,
                    None,
                );
                for piece in split_pieces(args, self.chunks) {
                    chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                        Value::Null,
                        None,
                    );
                }
            }
        }
        chunk(json!({}), json!(finish), None);
        chunk(Value::Null, Value::Null, Some(&usage));
        let out = conv.feed(b"data: [DONE]\n\n");
        frames.push_back(Bytes::from(out));
        let mut response = Body::new(Frames(frames)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    }
}

/// `s` in at most `n` pieces of near-equal length (mockllm's split).
fn split_pieces(s: &str, n: usize) -> Vec<&str> {
    let chars: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    let n = n.min(chars.len()).max(1);
    (0..n)
        .map(|i| {
            let from = chars.get(i * chars.len() / n).copied().unwrap_or(s.len());
            let to = chars.get((i + 1) * chars.len() / n).copied().unwrap_or(s.len());
            &s[from..to]
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// A body of frames all ready, whose end is known with the last one (like mockllm's).
struct Frames(VecDeque<Bytes>);

impl HttpBody for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
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
    /// Chat-completion chunks out as they came in (`/v1/chat/completions`).
    relay: bool,
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
            relay: false,
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
        if self.relay {
            return piece.to_vec();
        }
        out
    }

    fn data(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if data == b"[DONE]" {
            out.extend(self.finish());
            return;
        }
        if self.relay {
            self.started = true;
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
        if self.stopped || !self.started || self.relay {
            self.stopped = true;
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
