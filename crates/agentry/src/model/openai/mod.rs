//! The OpenAI-compatible Chat Completions provider.
//!
//! Works with OpenAI and with every server that speaks the same wire: llama.cpp's
//! `llama-server`, llama-cpp-python, Ollama, vLLM, LM Studio, OpenRouter, ...
//!
//! ```no_run
//! use agentry::model::{ChatModel, ChatRequest, OpenAiChatModel, OpenAiConfig};
//! use agentry::message::Msg;
//! use futures::StreamExt;
//!
//! # async fn demo() -> Result<(), agentry::model::ModelError> {
//! let model = OpenAiChatModel::new(OpenAiConfig::new("qwen2.5").base_url("http://127.0.0.1:8080/v1"))?;
//! let mut stream = model.chat(ChatRequest::new(vec![Msg::user("Hello!")]));
//! while let Some(response) = stream.next().await {
//!     println!("{:?}", response?.content); // cumulative: the whole text so far
//! }
//! # Ok(()) }
//! ```

mod config;
mod response;
mod wire;

pub use config::{DEFAULT_BASE_URL, OpenAiConfig};

use std::sync::{Arc, Once};
use std::time::Instant;

use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::stream::{self, BoxStream, StreamExt};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, excerpt};
use crate::error_chain;
use response::{Accumulator, decode_completion};
use wire::WireRequest;

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint.
#[derive(Clone)]
pub struct OpenAiChatModel {
    inner: Arc<Inner>,
}

struct Inner {
    config: OpenAiConfig,
    /// Parsed once: parsing (with IDNA) on every request shows up in profiles.
    endpoint: reqwest::Url,
    url: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for OpenAiChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChatModel")
            .field("url", &self.inner.url)
            .field("model", &self.inner.config.model)
            .field("stream", &self.inner.config.stream)
            .finish()
    }
}

/// Installs the process-wide TLS crypto provider once (reqwest is built without one, so that
/// the tree carries a single, fast-to-build provider).
pub(crate) fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error means another crate installed a provider first, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl OpenAiChatModel {
    /// Builds the model after checking the config ([`OpenAiConfig::validate`]).
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        config.validate()?;
        install_crypto_provider();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ModelError::Config("the API key contains characters not allowed in a header".into())
            })?;
            headers.insert(AUTHORIZATION, value);
        }
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| ModelError::Config(format!("invalid header name {name:?}: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| ModelError::Config(format!("invalid value for header {name}: {e}")))?;
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .read_timeout(config.read_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let url = config.chat_completions_url();
        let endpoint = reqwest::Url::parse(&url)
            .map_err(|e| ModelError::Config(format!("invalid endpoint {url:?}: {e}")))?;
        Ok(OpenAiChatModel {
            inner: Arc::new(Inner {
                endpoint,
                url,
                config,
                client,
            }),
        })
    }

    /// The config this model was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.inner.config
    }
}

impl ChatModel for OpenAiChatModel {
    fn model_name(&self) -> &str {
        &self.inner.config.model
    }

    fn is_streaming(&self) -> bool {
        self.inner.config.stream
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let inner = Arc::clone(&self.inner);
        stream::once(async move {
            let started = Instant::now();
            let body = inner.encode(&request)?;
            let response = inner.send(body).await?;
            Ok::<_, ModelError>((response, started))
        })
        .flat_map(|sent| -> ChatStream {
            match sent {
                Err(e) => stream::once(async { Err(e) }).boxed(),
                Ok((response, started)) => decode_response(response, started),
            }
        })
        .boxed()
    }
}

impl Inner {
    fn encode(&self, request: &ChatRequest) -> Result<Bytes, ModelError> {
        let wire = WireRequest {
            model: &self.config.model,
            messages: &request.messages,
            tools: &request.tools,
            tool_choice: request.tool_choice.as_ref(),
            stream: self.config.stream,
            include_usage: self.config.include_usage,
            extra: &self.config.extra_body,
        };
        serde_json::to_vec(&wire)
            .map(Bytes::from)
            .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))
    }

    /// Sends the request, retrying per the policy until a 2xx response arrives.
    async fn send(&self, body: Bytes) -> Result<reqwest::Response, ModelError> {
        let policy = &self.config.retry;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let result = self
                .client
                .post(self.endpoint.clone())
                .body(body.clone())
                .send()
                .await;
            let can_retry = attempt <= policy.max_retries;
            let (error, server_headers) = match result {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    let text = response.text().await.unwrap_or_default();
                    let error = ModelError::Status {
                        url: self.url.clone(),
                        status: status.as_u16(),
                        body: excerpt(text.trim(), 500),
                        attempts: attempt,
                    };
                    if !is_retryable_status(status.as_u16()) {
                        return Err(error);
                    }
                    (error, Some(headers))
                }
                Err(e) => (self.transport_error(&e, attempt), None),
            };
            if !can_retry {
                return Err(error);
            }
            let delay = policy.delay(attempt, server_headers.as_ref());
            tracing::warn!(attempt, ?delay, error = %error, "model call failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    fn transport_error(&self, e: &reqwest::Error, attempts: u32) -> ModelError {
        if e.is_timeout() {
            return ModelError::Timeout {
                url: self.url.clone(),
                timeout: self.config.request_timeout,
                attempts,
            };
        }
        ModelError::Connect {
            url: self.url.clone(),
            attempts,
            reason: error_chain(e),
        }
    }
}

fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

fn decode_response(response: reqwest::Response, started: Instant) -> ChatStream {
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if is_sse {
        sse_responses(response, started)
    } else {
        // Also taken when a server ignores `stream: true` and answers with one JSON body.
        stream::once(async move {
            let body = response
                .bytes()
                .await
                .map_err(|e| ModelError::Stream(error_chain(&e)))?;
            decode_completion(&body, started.elapsed())
        })
        .boxed()
    }
}

struct SseState {
    events: BoxStream<'static, Result<eventsource_stream::Event, EventStreamError<reqwest::Error>>>,
    acc: Accumulator,
    started: Instant,
    done: bool,
}

fn sse_responses(response: reqwest::Response, started: Instant) -> ChatStream {
    let state = SseState {
        events: response.bytes_stream().eventsource().boxed(),
        acc: Accumulator::default(),
        started,
        done: false,
    };
    stream::unfold(state, |mut state| async move {
        if state.done {
            return None;
        }
        let item = next_response(&mut state).await;
        if !matches!(item, Ok((_, false))) {
            state.done = true;
        }
        Some((item.map(|(r, _)| r), state))
    })
    .boxed()
}

/// Reads events until the visible content changes (`(snapshot, false)`) or the response is
/// complete (`(final, true)`).
async fn next_response(state: &mut SseState) -> Result<(ChatResponse, bool), ModelError> {
    while let Some(event) = state.events.next().await {
        let event = event.map_err(|e| match e {
            EventStreamError::Transport(e) => ModelError::Stream(error_chain(&e)),
            other => ModelError::Decode {
                reason: "invalid server-sent event".into(),
                excerpt: other.to_string(),
            },
        })?;
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok((state.acc.snapshot(true, state.started.elapsed()), true));
        }
        if data.is_empty() {
            continue;
        }
        let chunk = Accumulator::parse(data)?;
        if state.acc.absorb(chunk)? {
            return Ok((state.acc.snapshot(false, state.started.elapsed()), false));
        }
    }
    if state.acc.finished() {
        // Some servers close the stream after the finish chunk without `[DONE]`.
        return Ok((state.acc.snapshot(true, state.started.elapsed()), true));
    }
    Err(ModelError::Stream(
        "the server closed the stream before the response was complete (no finish_reason, no [DONE])".into(),
    ))
}
