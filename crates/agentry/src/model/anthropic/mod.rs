//! Anthropic's Messages API (`/v1/messages`): tool use, extended thinking (blocks kept with
//! their signatures and sent back as the API requires), prompt caching of the system prompt and
//! tools, and the cache tokens in [`ChatUsage`](super::ChatUsage).
//!
//! Streams like every provider: cumulative responses, a tool call's arguments previewed as
//! they arrive. Retries on 429, 529 (overloaded) and other 5xx honour `retry-after`.
//!
//! ```no_run
//! use agentry::model::{AnthropicChatModel, AnthropicConfig, ChatModel, ChatRequest};
//! use agentry::message::Msg;
//! use futures::StreamExt;
//!
//! # async fn demo() -> Result<(), agentry::model::ModelError> {
//! let model = AnthropicChatModel::new(AnthropicConfig::from_env().model("claude-sonnet-4-5"))?;
//! let mut stream = model.chat(ChatRequest::new(vec![Msg::user("Hello!")]));
//! while let Some(response) = stream.next().await {
//!     println!("{:?}", response?.content); // cumulative: the whole text so far
//! }
//! # Ok(()) }
//! ```

mod config;
mod response;
mod wire;

pub use config::{ANTHROPIC_VERSION, AnthropicConfig, DEFAULT_ANTHROPIC_BASE_URL};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::encoded_tools::EncodedTools;
use super::http::{self, Endpoint, HttpProvider, WireFormat, secret_header};
use super::{ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError};
use response::{Accumulator, decode_message, error_body_text};
use wire::{WireRequest, encode_tools};

/// The Messages wire, as far as reading answers goes.
struct Messages;

impl WireFormat for Messages {
    type Stream = Accumulator;

    fn stream(&self) -> Accumulator {
        Accumulator::default()
    }

    fn decode_whole(&self, body: &[u8], time: Duration) -> Result<ChatResponse, ModelError> {
        decode_message(body, time)
    }

    fn error_text(&self, body: &str) -> String {
        error_body_text(body)
    }
}

/// A chat model behind Anthropic's Messages API.
#[derive(Clone)]
pub struct AnthropicChatModel {
    inner: Arc<Inner>,
}

struct Inner {
    config: AnthropicConfig,
    endpoint: Endpoint<Messages>,
    tools: EncodedTools,
}

impl std::fmt::Debug for AnthropicChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicChatModel")
            .field("url", &self.inner.endpoint.url)
            .field("model", &self.inner.config.model)
            .field("stream", &self.inner.config.stream)
            .finish()
    }
}

impl AnthropicChatModel {
    /// Builds the model after checking the config ([`AnthropicConfig::validate`]).
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        config.validate()?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.http.api_key {
            headers.insert(
                HeaderName::from_static("x-api-key"),
                secret_header(key, "API key")?,
            );
        }
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let limits = config.http.limits(config.stream);
        let endpoint = Endpoint::new(
            Messages,
            config.messages_url(),
            headers,
            &config.http.headers,
            limits,
        )?;
        Ok(AnthropicChatModel {
            inner: Arc::new(Inner {
                config,
                endpoint,
                tools: EncodedTools::default(),
            }),
        })
    }

    /// The config this model was built with.
    pub fn config(&self) -> &AnthropicConfig {
        &self.inner.config
    }
}

impl ChatModel for AnthropicChatModel {
    fn model_name(&self) -> &str {
        &self.inner.config.model
    }

    fn provider_name(&self) -> &str {
        "anthropic"
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
    type Format = Messages;

    fn endpoint(&self) -> &Endpoint<Messages> {
        &self.endpoint
    }

    fn encode(&self, request: &ChatRequest) -> Result<Bytes, ModelError> {
        let encoding = |e: serde_json::Error| ModelError::Config(format!("cannot encode the request: {e}"));
        let caching = self.config.prompt_caching;
        let tools = match request.tools.is_empty() {
            true => None,
            false => Some(
                self.tools
                    .get(&request.tools, |tools| encode_tools(tools, caching))
                    .map_err(encoding)?,
            ),
        };
        let wire = WireRequest {
            model: &self.config.model,
            max_tokens: request
                .max_tokens
                .map_or(self.config.max_tokens, |cap| cap.min(self.config.max_tokens)),
            messages: &request.messages,
            tools: tools.as_deref(),
            tool_choice: request.tool_choice.as_ref(),
            stream: self.config.stream,
            thinking_budget: self.config.thinking_budget,
            prompt_caching: self.config.prompt_caching,
            extra: &self.config.http.extra_body,
        };
        serde_json::to_vec(&wire).map(Bytes::from).map_err(encoding)
    }
}
