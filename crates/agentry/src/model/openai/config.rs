//! Configuration of the OpenAI-compatible provider.

use super::super::ModelError;
use crate::model::http::{HttpSettings, check_base_url, provider_http_setters};

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
    /// Where and how requests go: the base URL up to and including the version segment (e.g.
    /// `https://api.openai.com/v1`), the bearer token, time limits, retries, extra headers and
    /// body fields.
    pub http: HttpSettings,
    /// Model name sent with every request.
    pub model: String,
    /// Stream responses over SSE.
    pub stream: bool,
    /// Ask for a usage chunk at the end of streams (`stream_options.include_usage`).
    pub include_usage: bool,
}

impl OpenAiConfig {
    /// A config for `model` at the default endpoint, streaming, with default limits.
    pub fn new(model: impl Into<String>) -> Self {
        OpenAiConfig {
            http: HttpSettings::new(DEFAULT_BASE_URL),
            model: model.into(),
            stream: true,
            include_usage: true,
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
            config.http.base_url = url;
        }
        config.http.api_key = var("OPENAI_API_KEY");
        config
    }

    provider_http_setters!();

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

    /// The chat-completions endpoint.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.http.base_url.trim_end_matches('/'))
    }

    /// Checks that the config can work: a model name, an http(s) URL, and an API key when the
    /// endpoint is OpenAI's own.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.model.trim().is_empty() {
            return Err(ModelError::Config(
                "no model name: pass --model, or set AGENTRY_MODEL or OPENAI_MODEL".into(),
            ));
        }
        let url = check_base_url(&self.http.base_url)?;
        if url.host_str() == Some("api.openai.com") && self.http.api_key.is_none() {
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
