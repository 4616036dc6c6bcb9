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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, HeaderMap};

use super::encoded_tools::EncodedTools;
use super::http::{self, Endpoint, HttpProvider, SseDecoder, WireFormat, secret_header};
use super::{ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError};
use response::{Accumulator, decode_completion};
use wire::{WireRequest, encode_tools};

/// Decodes a streamed body delivered in `pieces`, without I/O (for the fuzz targets).
pub(crate) fn decode_sse_pieces(pieces: Vec<Bytes>) -> (Vec<Result<ChatResponse, ModelError>>, usize) {
    SseDecoder::decode_pieces(pieces, Accumulator::default())
}

/// The Chat Completions wire, as far as reading answers goes.
struct ChatCompletions;

impl WireFormat for ChatCompletions {
    type Stream = Accumulator;

    fn stream(&self) -> Accumulator {
        Accumulator::default()
    }

    fn decode_whole(&self, body: &[u8], time: Duration) -> Result<ChatResponse, ModelError> {
        decode_completion(body, time)
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint.
#[derive(Clone)]
pub struct OpenAiChatModel {
    inner: Arc<Inner>,
}

struct Inner {
    config: OpenAiConfig,
    endpoint: Endpoint<ChatCompletions>,
    tools: EncodedTools,
}

impl std::fmt::Debug for OpenAiChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChatModel")
            .field("url", &self.inner.endpoint.url)
            .field("model", &self.inner.config.model)
            .field("stream", &self.inner.config.stream)
            .finish()
    }
}

impl OpenAiChatModel {
    /// Builds the model after checking the config ([`OpenAiConfig::validate`]).
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        config.validate()?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.http.api_key {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"), "API key")?);
        }
        let limits = config.http.limits(config.stream);
        let endpoint = Endpoint::new(
            ChatCompletions,
            config.chat_completions_url(),
            headers,
            &config.http.headers,
            limits,
        )?;
        Ok(OpenAiChatModel {
            inner: Arc::new(Inner {
                config,
                endpoint,
                tools: EncodedTools::default(),
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

    fn provider_name(&self) -> &str {
        "openai"
    }

    fn is_streaming(&self) -> bool {
        self.inner.config.stream
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        http::chat(Arc::clone(&self.inner), request)
    }

    fn context_window(&self) -> Option<u64> {
        super::known_context_window(self.model_name())
    }
}

impl HttpProvider for Inner {
    type Format = ChatCompletions;

    fn endpoint(&self) -> &Endpoint<ChatCompletions> {
        &self.endpoint
    }

    fn encode(&self, request: &ChatRequest) -> Result<Bytes, ModelError> {
        let encoding = |e: serde_json::Error| ModelError::Config(format!("cannot encode the request: {e}"));
        let tools = match request.tools.is_empty() {
            true => None,
            false => Some(self.tools.get(&request.tools, encode_tools).map_err(encoding)?),
        };
        let wire = WireRequest {
            model: &self.config.model,
            messages: &request.messages,
            tools: tools.as_deref(),
            tool_choice: request.tool_choice.as_ref(),
            stream: self.config.stream,
            include_usage: self.config.include_usage,
            max_tokens: request.max_tokens,
            extra: &self.config.http.extra_body,
        };
        serde_json::to_vec(&wire).map(Bytes::from).map_err(encoding)
    }
}
