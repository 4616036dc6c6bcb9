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
mod sse;
mod transport;
mod wire;

pub use config::{DEFAULT_BASE_URL, OpenAiConfig};

pub(crate) fn decode_sse_pieces(pieces: Vec<Bytes>) -> (Vec<Result<super::ChatResponse, ModelError>>, usize) {
    sse::SseDecoder::decode_pieces(pieces)
}

use std::sync::{Arc, Once};
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{ChatModel, ChatRequest, ChatStream, ModelError};
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
        // Only the connect limit is left to reqwest: the read and request limits are applied
        // around each wait (transport.rs), so that an error can say which one fired.
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
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
            inner.open(body, started).await
        })
        .flat_map(|opened| -> ChatStream {
            match opened {
                Err(e) => stream::once(async { Err(e) }).boxed(),
                Ok(opened) => opened.into_stream(),
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
}
