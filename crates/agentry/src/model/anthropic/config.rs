//! Configuration of the Anthropic Messages provider.

use super::super::ModelError;
use crate::model::http::{HttpSettings, check_base_url, provider_http_setters};

/// The default endpoint when neither the config nor `ANTHROPIC_BASE_URL` names one.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Settings of an [`AnthropicChatModel`](super::AnthropicChatModel).
///
/// ```
/// use agentry::model::AnthropicConfig;
/// let config = AnthropicConfig::new("claude-sonnet-4-5")
///     .base_url("http://127.0.0.1:18000")
///     .api_key("sk-ant-test")
///     .thinking(2048);
/// assert_eq!(config.messages_url(), "http://127.0.0.1:18000/v1/messages");
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Where and how requests go: the base URL without the version segment (e.g.
    /// `https://api.anthropic.com`), the API key (sent as `x-api-key`), time limits, retries
    /// (429, 529 "overloaded", other 5xx, and an `error` event sent before anything else),
    /// extra headers (e.g. `anthropic-beta`) and body fields (`temperature`, `top_k`, ...).
    pub http: HttpSettings,
    /// Model name sent with every request.
    pub model: String,
    /// The most tokens a response may generate (the API requires it; default 8,192).
    pub max_tokens: u32,
    /// Stream responses over SSE (default on).
    pub stream: bool,
    /// Extended thinking with this budget of tokens (`None`: off). It must be at least 1,024
    /// and below `max_tokens`. A request that forces a tool (`ToolChoice::Required` or
    /// `Named`) is sent without thinking, which the API does not allow together with it.
    pub thinking_budget: Option<u32>,
    /// Marks the system prompt and the tools as cacheable (`cache_control: ephemeral`), so
    /// that the next steps of a reply read them from the prompt cache (default on).
    pub prompt_caching: bool,
}

impl AnthropicConfig {
    /// A config for `model` at the default endpoint, streaming, with default limits.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicConfig {
            http: HttpSettings::new(DEFAULT_ANTHROPIC_BASE_URL),
            model: model.into(),
            max_tokens: 8192,
            stream: true,
            thinking_budget: None,
            prompt_caching: true,
        }
    }

    /// A config from the environment: `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, and the model
    /// from `AGENTRY_MODEL` or `ANTHROPIC_MODEL`. Unset variables keep the defaults.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = AnthropicConfig::new(
            var("AGENTRY_MODEL")
                .or_else(|| var("ANTHROPIC_MODEL"))
                .unwrap_or_default(),
        );
        if let Some(url) = var("ANTHROPIC_BASE_URL") {
            config.http.base_url = url;
        }
        config.http.api_key = var("ANTHROPIC_API_KEY");
        config
    }

    provider_http_setters!();

    /// Sets the model name.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the most tokens a response may generate.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Turns streaming on or off.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Turns extended thinking on with this budget of tokens.
    pub fn thinking(mut self, budget_tokens: u32) -> Self {
        self.thinking_budget = Some(budget_tokens);
        self
    }

    /// Turns prompt caching of the system prompt and tools on or off.
    pub fn prompt_caching(mut self, on: bool) -> Self {
        self.prompt_caching = on;
        self
    }

    /// The Messages endpoint.
    pub fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.http.base_url.trim_end_matches('/'))
    }

    /// Checks that the config can work: a model name, an http(s) URL, an API key for
    /// Anthropic's own endpoint, and a thinking budget the API accepts.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.model.trim().is_empty() {
            return Err(ModelError::Config(
                "no model name: pass --model, or set AGENTRY_MODEL or ANTHROPIC_MODEL".into(),
            ));
        }
        let url = check_base_url(&self.http.base_url)?;
        if url.host_str() == Some("api.anthropic.com") && self.http.api_key.is_none() {
            return Err(ModelError::Config(
                "api.anthropic.com needs an API key: set ANTHROPIC_API_KEY, or point ANTHROPIC_BASE_URL at another server"
                    .into(),
            ));
        }
        if self.max_tokens == 0 {
            return Err(ModelError::Config("max_tokens must be at least 1".into()));
        }
        if let Some(budget) = self.thinking_budget
            && (budget < 1024 || budget >= self.max_tokens)
        {
            return Err(ModelError::Config(format!(
                "the thinking budget ({budget} tokens) must be at least 1024 and below max_tokens ({})",
                self.max_tokens
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_reports_what_is_missing() {
        let err = AnthropicConfig::new("").validate().unwrap_err().to_string();
        assert!(err.contains("no model name"), "{err}");
        let err = AnthropicConfig::new("m").validate().unwrap_err().to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        let local = AnthropicConfig::new("m").base_url("http://127.0.0.1:1");
        local.clone().validate().unwrap();
        let err = local.clone().thinking(100).validate().unwrap_err().to_string();
        assert!(err.contains("at least 1024"), "{err}");
        let err = local
            .max_tokens(2000)
            .thinking(4000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("below max_tokens"), "{err}");
    }

    #[test]
    fn url_joins_without_double_slash() {
        let c = AnthropicConfig::new("m").base_url("http://h/");
        assert_eq!(c.messages_url(), "http://h/v1/messages");
    }
}
