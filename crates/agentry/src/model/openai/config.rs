//! Configuration of the OpenAI-compatible provider.

use std::time::Duration;

use serde_json::{Map, Value};

use super::super::{ModelError, RetryPolicy};
use crate::model::http::check_base_url;

/// The default endpoint when neither the config nor `OPENAI_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Settings of an [`OpenAiChatModel`](super::OpenAiChatModel).
///
/// ```
/// use agentry::model::OpenAiConfig;
/// let config = OpenAiConfig::new("qwen2.5-coder-0.5b")
///     .base_url("http://127.0.0.1:18000/v1")
///     .stream(true);
/// assert_eq!(config.chat_completions_url(), "http://127.0.0.1:18000/v1/chat/completions");
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including the version segment, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; local servers usually need none.
    pub api_key: Option<String>,
    /// Model name sent with every request.
    pub model: String,
    /// Stream responses over SSE.
    pub stream: bool,
    /// Ask for a usage chunk at the end of streams (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Limit for connecting (default 10 s). A connect timeout is retried per [`Self::retry`].
    pub connect_timeout: Duration,
    /// Limit for a whole request, body included (default 600 s). It is also the only limit on
    /// the wait for an answer that is not streamed: such a server sends nothing until the
    /// whole answer is ready.
    pub request_timeout: Duration,
    /// Limit for silence from a streaming server: before the head of its answer, and between
    /// two pieces of any body (default 120 s).
    ///
    /// A read or request timeout is not retried: the server has the request, and asking again
    /// would only start the generation over (or wait on a stuck server once more).
    pub read_timeout: Duration,
    /// Retries on 429, 5xx, connection errors and streams that end before their first event
    /// (default: 4 retries, backoff from 0.5 s doubling up to 30 s, with jitter). A kept-alive
    /// connection the server had already closed is replaced at once, without using a retry.
    pub retry: RetryPolicy,
    /// Extra HTTP headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Extra top-level request fields (`temperature`, `max_tokens`, ...), merged into every body.
    pub extra_body: Map<String, Value>,
}

impl OpenAiConfig {
    /// A config for `model` at the default endpoint, streaming, with default limits.
    pub fn new(model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: model.into(),
            stream: true,
            include_usage: true,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            read_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            headers: Vec::new(),
            extra_body: Map::new(),
        }
    }

    /// A config from the environment: `OPENAI_BASE_URL`, `OPENAI_API_KEY`, and the model from
    /// `AGENTRY_MODEL` or `OPENAI_MODEL`. Unset variables keep the defaults; the model is
    /// empty when neither variable is set (see [`OpenAiConfig::validate`]).
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = OpenAiConfig::new(
            var("AGENTRY_MODEL")
                .or_else(|| var("OPENAI_MODEL"))
                .unwrap_or_default(),
        );
        if let Some(url) = var("OPENAI_BASE_URL") {
            config.base_url = url;
        }
        config.api_key = var("OPENAI_API_KEY");
        config
    }

    /// Sets the base URL.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the model name.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Turns streaming on or off.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the read timeout (longest silence while streaming).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// Sets the whole-request timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Adds an HTTP header sent with every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds a top-level request field sent with every request.
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra_body.insert(key.into(), value);
        self
    }

    /// The chat-completions endpoint.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    /// Checks that the config can work: a model name, an http(s) URL, and an API key when the
    /// endpoint is OpenAI's own.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.model.trim().is_empty() {
            return Err(ModelError::Config(
                "no model name: pass --model, or set AGENTRY_MODEL or OPENAI_MODEL".into(),
            ));
        }
        let url = check_base_url(&self.base_url)?;
        if url.host_str() == Some("api.openai.com") && self.api_key.is_none() {
            return Err(ModelError::Config(
                "api.openai.com needs an API key: set OPENAI_API_KEY, or point OPENAI_BASE_URL at another server"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_reports_what_is_missing() {
        let err = OpenAiConfig::new("").validate().unwrap_err().to_string();
        assert!(err.contains("no model name"), "{err}");
        let err = OpenAiConfig::new("m").validate().unwrap_err().to_string();
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
        let err = OpenAiConfig::new("m")
            .base_url("ftp://x")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("http"), "{err}");
        let err = OpenAiConfig::new("m")
            .base_url("not a url")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid base URL"), "{err}");
        OpenAiConfig::new("m")
            .base_url("http://127.0.0.1:1/v1")
            .validate()
            .unwrap();
    }

    #[test]
    fn url_joins_without_double_slash() {
        let c = OpenAiConfig::new("m").base_url("http://h/v1/");
        assert_eq!(c.chat_completions_url(), "http://h/v1/chat/completions");
    }
}
