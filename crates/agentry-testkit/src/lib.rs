//! Test support for agentry: [`FakeLlm`], a fake LLM server that speaks both the OpenAI-compatible
//! Chat Completions format (`POST /v1/chat/completions`, [`FakeLlm::base_url`]) and Anthropic's
//! Messages API (`POST /v1/messages`, [`FakeLlm::anthropic_base_url`]).
//!
//! It speaks real HTTP and real SSE (each event its own HTTP chunk) on `127.0.0.1`, answers both
//! routes from one per-test script of [`Reply`]s, records every request, and **checks on every
//! request** that it is well formed: on chat completions ([`check_conversation`]) each assistant
//! tool call is followed by exactly one tool result, in call order, and no result lacks its call;
//! on messages ([`check_anthropic_conversation`]) the rules the real Anthropic API enforces
//! (alternating roles, each `tool_use` answered first thing in the next user message, thinking
//! blocks returned unchanged with their signature, ...). A violation is answered with HTTP 400,
//! as a strict provider would, and recorded; dropping a `FakeLlm` with recorded violations
//! panics, so a test cannot pass over one unnoticed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use agentry_testkit::{Call, FakeLlm, Reply};
//! let fake = FakeLlm::start().await;
//! fake.push(Reply::tool_calls([Call::new("call_1", "add", r#"{"a": 1, "b": 2}"#)]));
//! fake.push(Reply::text("3"));
//! // point a client at fake.base_url() ...
//! # assert_eq!(fake.remaining(), 2);
//! # }
//! ```

// Test infrastructure: a broken fake server must fail the test that uses it, loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod anthropic;
mod gate;
mod invariants;
pub mod peers;
mod reply;
mod sse;

pub use anthropic::invariants::check_anthropic_conversation;
pub use anthropic::thinking_signature;
pub use gate::Gate;
pub use invariants::check_conversation;
pub use reply::{Call, Reply};

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One request the fake server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Headers, names lower-cased (values that are not UTF-8 are dropped).
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    violations: Vec<String>,
    disconnects: usize,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    arrived: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn record_disconnect(&self) {
        self.lock().disconnects += 1;
    }
}

/// A fake LLM server (OpenAI-compatible and Anthropic Messages), scripted per test.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> FakeLlm {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .route("/v1/messages", post(anthropic::messages))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeLlm { addr, shared, server }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT`, the base URL of the Anthropic Messages API (a client appends
    /// `/v1/messages`).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a reply to the script; each chat-completions or messages request consumes one.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Waits until at least `n` requests have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        loop {
            let notified = self.shared.arrived.notified();
            if self.request_count() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Scripted replies not consumed yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Streams the client dropped before they were complete.
    pub fn disconnects(&self) -> usize {
        self.shared.lock().disconnects
    }

    /// The invariant violations recorded so far.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// Returns the violations recorded so far and forgets them (for tests that provoke them).
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().violations)
    }

    /// Panics listing the violations, if any.
    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "the fake LLM saw invalid requests:\n{}",
            violations.join("\n")
        );
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.server.abort();
        let violations = std::mem::take(&mut self.shared.lock().violations);
        if !violations.is_empty() && !std::thread::panicking() {
            panic!("the fake LLM saw invalid requests:\n{}", violations.join("\n"));
        }
    }
}

async fn models() -> impl IntoResponse {
    axum::Json(
        json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "agentry-testkit"}]}),
    )
}

fn error_response(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind}});
    (status, axum::Json(body)).into_response()
}

/// A request the scripted server accepted: the reply it consumed and its JSON body.
pub(crate) struct Admitted {
    pub(crate) reply: Reply,
    pub(crate) body: Value,
    /// The request's number, from 1.
    pub(crate) number: usize,
}

/// Why a request got no scripted reply (the text is recorded as a violation).
pub(crate) enum Refused {
    /// The request broke the format's rules: answered 400.
    Invalid(String),
    /// The script is used up: answered 500.
    NoReply(String),
}

/// Records a request, checks it with `check` (headers, body) and takes the next scripted reply.
pub(crate) fn admit(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    check: impl FnOnce(&BTreeMap<String, String>, &Value) -> Vec<String>,
) -> Result<Admitted, Refused> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let recorded = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body: parsed.clone().unwrap_or(Value::Null),
    };
    let problems = match &parsed {
        Some(body) => check(&recorded.headers, body),
        None => vec!["the body is not JSON".to_owned()],
    };
    let result = {
        let mut inner = shared.lock();
        inner.requests.push(recorded);
        let number = inner.requests.len();
        if problems.is_empty() {
            match inner.queue.pop_front() {
                Some(reply) => Ok(Admitted {
                    reply,
                    body: parsed.unwrap_or(Value::Null),
                    number,
                }),
                None => {
                    let text = format!("request #{number}: no scripted reply left");
                    inner.violations.push(text.clone());
                    Err(Refused::NoReply(text))
                }
            }
        } else {
            let text = format!("request #{number}: {}", problems.join("; "));
            inner.violations.push(text.clone());
            Err(Refused::Invalid(text))
        }
    };
    shared.arrived.notify_waiters();
    result
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = admit(&shared, &method, &uri, &headers, &body, |_, body| {
        check_conversation(body)
    });
    let Admitted { reply, body, .. } = match admitted {
        Ok(admitted) => admitted,
        Err(Refused::Invalid(text)) => {
            return error_response(StatusCode::BAD_REQUEST, &text, "invalid_request_error");
        }
        Err(Refused::NoReply(text)) => {
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, &text, "fake_server_error");
        }
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_owned();
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    reply::respond(reply, &shared, stream, include_usage, &model)
}

pub(crate) fn sse_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
