//! Chat models: the [`ChatModel`] trait and its providers.
//!
//! A model call returns a stream of **cumulative** [`ChatResponse`]s: each item holds the whole
//! response so far, so consumers replace rather than append. A non-streaming call yields exactly
//! one item. The last item of the stream is the complete response (with usage, when the server
//! reports it). Delta-to-cumulative conversion happens once, in the provider.

mod accumulate;
#[cfg(feature = "anthropic")]
pub mod anthropic;
pub mod cassette;
mod context_window;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod encoded_tools;
#[doc(hidden)]
#[cfg(feature = "openai")]
pub mod fuzz;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) mod http;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use http::HttpSettings;
#[cfg(feature = "openai")]
pub mod openai;
mod partial_json;

pub use accumulate::{CallDelta, DeltaAccumulator};
pub use context_window::{estimate_tokens, known_context_window};
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod retry;
mod tool_text;

#[cfg(feature = "anthropic")]
pub use anthropic::{AnthropicChatModel, AnthropicConfig};
pub use cassette::{CassetteError, RecordingModel, ReplayModel, ReplayTiming};
#[cfg(feature = "openai")]
pub use openai::{OpenAiChatModel, OpenAiConfig};
pub use partial_json::parse_partial_object;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use retry::RetryPolicy;
pub(crate) use tool_text::streamable_text_from;
pub use tool_text::{ParsedText, TextCall, may_start_text_call, parse_text_calls, streamable_text};

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ContentBlock, Msg, ToolUseBlock};

/// What the model may do with tools in one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (provider default).
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this tool.
    Named(String),
}

/// The description of one tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One model call.
///
/// Its JSON form (`{"messages": [...], "tools": [...], "tool_choice": null}`) is what a
/// [cassette] records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The prompt: system prompt, history, hints.
    pub messages: Vec<Msg>,
    /// The tools the model may call.
    #[serde(with = "arc_slice")]
    pub tools: Arc<[ToolSchema]>,
    /// Constraint on tool use; `None` leaves the provider's default.
    pub tool_choice: Option<ToolChoice>,
    /// The most tokens the answer may have, below the model's own setting (a compaction
    /// summary asks for a short one); `None` leaves the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// `Arc<[T]>` as a JSON array (serde's own impl needs its `rc` feature).
mod arc_slice {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        items: &Arc<[T]>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        items[..].serialize(serializer)
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<[T]>, D::Error> {
        Ok(Vec::<T>::deserialize(deserializer)?.into())
    }
}

impl ChatRequest {
    /// A request without tools.
    pub fn new(messages: Vec<Msg>) -> Self {
        ChatRequest {
            messages,
            tools: Arc::from(Vec::new()),
            tool_choice: None,
            max_tokens: None,
        }
    }
}

pub use crate::protocol::ChatUsage;

/// The (cumulative) response of one model call.
///
/// Its JSON form, as a [cassette] records it: `{"id": "...", "content": [blocks],
/// "usage": null | {...}, "finish_reason": null | "..."}` (missing fields take their defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatResponse {
    /// Response id from the server, when it sends one.
    pub id: String,
    /// Everything generated so far: thinking, text, then tool calls.
    pub content: Vec<ContentBlock>,
    /// Set on the final item when the server reports usage.
    pub usage: Option<ChatUsage>,
    /// The server's finish reason, on the final item.
    pub finish_reason: Option<String>,
}

impl ChatResponse {
    /// The tool calls of this response.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUseBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(u) => Some(u),
            _ => None,
        })
    }
}

/// The stream a model call returns.
pub type ChatStream = BoxStream<'static, Result<ChatResponse, ModelError>>;

/// A chat model: anything that turns a prompt into a stream of cumulative responses.
///
/// Implementations must be cheap to call concurrently; the agent holds them behind an `Arc`.
pub trait ChatModel: Send + Sync + 'static {
    /// The model's name, for logs and traces.
    fn model_name(&self) -> &str;
    /// The provider as OpenTelemetry's GenAI conventions name it in `gen_ai.provider.name`
    /// (`openai`, `anthropic`, ...), for the trace spans. Default: `unknown`.
    fn provider_name(&self) -> &str {
        "unknown"
    }
    /// Whether calls stream (several cumulative items) or not (one item).
    fn is_streaming(&self) -> bool;
    /// Whether the model tends to call the same tool with the same arguments round after round
    /// instead of answering (small local models do). An agent then answers such repeats of
    /// pure tools with the earlier result, unless told otherwise. Default: false.
    fn repeats_tool_calls(&self) -> bool {
        false
    }
    /// Starts one call. Nothing is sent until the stream is polled.
    fn chat(&self, request: ChatRequest) -> ChatStream;
    /// The most tokens one request may hold, when known (the embedded models know theirs; the
    /// remote providers look the model up in [`known_context_window`]). Default: unknown.
    fn context_window(&self) -> Option<u64> {
        None
    }
    /// The exact tokens of `request` as this model reads it (messages and tool definitions),
    /// when the model can count them; `None` makes the agent estimate
    /// ([`estimate_tokens`]). Default: `None`.
    fn count_tokens(&self, _request: &ChatRequest) -> Option<u64> {
        None
    }
}

/// A shared model is a model: `builder.model(Arc::clone(&model))` lets several agents use one.
impl<T: ChatModel + ?Sized> ChatModel for Arc<T> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }

    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }

    fn is_streaming(&self) -> bool {
        (**self).is_streaming()
    }

    fn repeats_tool_calls(&self) -> bool {
        (**self).repeats_tool_calls()
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        (**self).chat(request)
    }

    fn context_window(&self) -> Option<u64> {
        (**self).context_window()
    }

    fn count_tokens(&self, request: &ChatRequest) -> Option<u64> {
        (**self).count_tokens(request)
    }
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The model is misconfigured (bad URL, missing model name, ...).
    #[error("model configuration error: {0}")]
    Config(String),
    /// The server could not be reached.
    #[error("cannot reach the model server at {url} after {attempts} attempt(s): {reason}")]
    Connect {
        /// Endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The underlying error.
        reason: String,
    },
    /// The server did not answer in time.
    #[error("the model server at {url} timed out: {} (after {attempts} attempt(s))", limit.describe(*timeout))]
    Timeout {
        /// Endpoint.
        url: String,
        /// Which limit fired.
        limit: TimeoutLimit,
        /// Its configured value.
        timeout: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// The server answered with an HTTP error status.
    #[error("the model server at {url} answered HTTP {status} after {attempts} attempt(s): {body}")]
    Status {
        /// Endpoint.
        url: String,
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The server reported an error inside a successful response.
    #[error("the model server reported an error: {0}")]
    Api(String),
    /// The response could not be understood.
    #[error("the model server sent a malformed response ({reason}): {excerpt}")]
    Decode {
        /// What was wrong.
        reason: String,
        /// The start of the offending data.
        excerpt: String,
    },
    /// The connection broke or the stream ended before the response was complete.
    #[error("the model response stream broke off: {0}")]
    Stream(String),
    /// A [`ReplayModel`] cannot answer: the request differs from the recorded one, the cassette
    /// has no more calls, or a recorded error cannot be rebuilt. The text says which call and why.
    #[error("replay: {0}")]
    Replay(String),
}

/// The time limits of a model call (see [`OpenAiConfig`] for their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutLimit {
    /// Connecting to the server (`connect_timeout`).
    Connect,
    /// Silence from the server: before the head of a streamed answer, or between two pieces of
    /// any body (`read_timeout`).
    Read,
    /// The whole request, body included; also the wait for an answer that is not streamed,
    /// since such a server sends nothing until it is ready (`request_timeout`).
    Request,
}

impl TimeoutLimit {
    fn describe(self, timeout: Duration) -> String {
        match self {
            TimeoutLimit::Connect => format!("no connection within the connect timeout of {timeout:?}"),
            TimeoutLimit::Read => format!("nothing received for the read timeout of {timeout:?}"),
            TimeoutLimit::Request => {
                format!("the answer took longer than the request timeout of {timeout:?}")
            }
        }
    }
}

/// The first `max` characters of `s`, with a marker when cut.
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &s[..cut], s.len()),
        None => s.to_owned(),
    }
}
