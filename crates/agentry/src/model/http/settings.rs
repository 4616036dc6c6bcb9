//! The HTTP settings every provider shares: where to send requests, with which key, headers
//! and extra body fields, within which time limits, retried how. One struct, one set of setters
//! ([`provider_http_setters!`]), so that the providers cannot drift apart.

use std::time::Duration;

use serde_json::{Map, Value};

use super::CallLimits;
use crate::model::RetryPolicy;

/// How a provider talks HTTP: the part of [`OpenAiConfig`](crate::model::OpenAiConfig) and
/// [`AnthropicConfig`](crate::model::AnthropicConfig) they share, with the same defaults and
/// the same setters on both configs.
///
/// ```
/// use std::time::Duration;
/// use agentry::model::OpenAiConfig;
/// let config = OpenAiConfig::new("m")
///     .base_url("http://127.0.0.1:8080/v1")
///     .connect_timeout(Duration::from_secs(2))
///     .header("x-org", "me");
/// assert_eq!(config.http.connect_timeout, Duration::from_secs(2));
/// assert_eq!(config.http.read_timeout, Duration::from_secs(120), "the default");
/// ```
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Where requests go (the provider says what part of the URL it expects).
    pub base_url: String,
    /// The API key, sent as the provider expects it; local servers usually need none.
    pub api_key: Option<String>,
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
    /// Retries on 429, 5xx (and 529), connection errors and streams that end before their first
    /// event (default: 4 retries, backoff from 0.5 s doubling up to 30 s, with jitter; a
    /// server's `Retry-After` wins). A kept-alive connection the server had already closed is
    /// replaced at once, without using a retry.
    pub retry: RetryPolicy,
    /// Extra HTTP headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Extra top-level request fields (`temperature`, ...), merged into every body.
    pub extra_body: Map<String, Value>,
}

impl HttpSettings {
    /// The defaults, at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        HttpSettings {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            read_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            headers: Vec::new(),
            extra_body: Map::new(),
        }
    }

    /// The limits of one call, streamed or not.
    pub(crate) fn limits(&self, stream: bool) -> CallLimits {
        CallLimits {
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            read_timeout: self.read_timeout,
            retry: self.retry.clone(),
            stream,
        }
    }
}

/// The setters of [`HttpSettings`] on a provider's config (a struct with an `http` field):
/// written once, so both providers have the same ones.
macro_rules! provider_http_setters {
    () => {
        /// Sets the base URL.
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.http.base_url = url.into();
            self
        }

        /// Sets the API key.
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.http.api_key = Some(key.into());
            self
        }

        /// Sets the retry policy.
        pub fn retry(mut self, retry: $crate::model::RetryPolicy) -> Self {
            self.http.retry = retry;
            self
        }

        /// Sets the connect timeout.
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.connect_timeout = timeout;
            self
        }

        /// Sets the read timeout (longest silence while streaming).
        pub fn read_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.read_timeout = timeout;
            self
        }

        /// Sets the whole-request timeout.
        pub fn request_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.request_timeout = timeout;
            self
        }

        /// Adds an HTTP header sent with every request.
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.http.headers.push((name.into(), value.into()));
            self
        }

        /// Adds a top-level request field sent with every request.
        pub fn extra(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
            self.http.extra_body.insert(key.into(), value);
            self
        }

        /// Replaces every HTTP setting at once (e.g. settings read from a config file).
        pub fn http(mut self, http: $crate::model::HttpSettings) -> Self {
            self.http = http;
            self
        }
    };
}
pub(crate) use provider_http_setters;
