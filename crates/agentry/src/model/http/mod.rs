//! What every HTTP provider shares: the client, retries, the three time limits, and reading a
//! streamed (SSE) answer into cumulative responses. A provider brings its [`WireFormat`]: how a
//! whole answer decodes, and how each server event adds to the response.

mod settings;
mod sse;
mod transport;

pub use settings::HttpSettings;
pub(crate) use settings::provider_http_setters;

#[cfg(feature = "openai")]
pub(crate) use sse::SseDecoder;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{ChatRequest, ChatResponse, ChatStream, ModelError, RetryPolicy};

/// A provider over HTTP: its endpoint, and how it encodes a request.
pub(crate) trait HttpProvider: Send + Sync + 'static {
    /// How its answers decode.
    type Format: WireFormat;
    /// Where its requests go.
    fn endpoint(&self) -> &Endpoint<Self::Format>;
    /// The body of one request.
    fn encode(&self, request: &ChatRequest) -> Result<Bytes, ModelError>;
}

/// One model call: nothing is sent until the stream is polled; then the answer, cumulative.
pub(crate) fn chat<P: HttpProvider>(provider: Arc<P>, request: ChatRequest) -> ChatStream {
    stream::once(async move {
        let started = Instant::now();
        let body = provider.encode(&request)?;
        provider.endpoint().open(body, started).await
    })
    .flat_map(|opened| -> ChatStream {
        match opened {
            Err(e) => stream::once(async { Err(e) }).boxed(),
            Ok(opened) => opened.into_stream(),
        }
    })
    .boxed()
}

/// How one server event changed the response being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absorbed {
    /// Nothing a reader would see (a ping, a usage report, a preview not refreshed yet).
    Unchanged,
    /// The visible content changed: a snapshot is due.
    Changed,
    /// The server said the response is complete.
    Complete,
}

/// A provider's streamed answer, event by event.
pub(crate) trait StreamAccumulator: Send + 'static {
    /// Takes one SSE event: its name (empty when the server sent none) and its data.
    fn absorb(&mut self, event: &str, data: &str) -> Result<Absorbed, ModelError>;
    /// The response so far, with tool-call argument previews.
    fn snapshot(&mut self) -> ChatResponse;
    /// The complete response, after [`Absorbed::Complete`]; `time` is the call's wall time.
    fn finish(&mut self, time: Duration) -> Result<ChatResponse, ModelError>;
    /// The complete response when the server closed the stream without its last event (some
    /// do once they said why they stopped), or the error of an answer cut short.
    fn end_of_stream(&mut self, time: Duration) -> Result<ChatResponse, ModelError>;
    /// An error the server sent as its first event: nothing was used yet, so the call may be
    /// retried (an overloaded server answering 200 and then an error).
    fn early_error(&self, _event: &str, _data: &str) -> Option<ModelError> {
        None
    }
    /// Bytes of tool-call arguments parsed by previews and copied into snapshots so far (for
    /// the fuzz checks).
    #[cfg_attr(not(feature = "openai"), allow(dead_code))]
    fn argument_work(&self) -> usize;
}

/// A provider's wire format, as far as reading answers goes.
pub(crate) trait WireFormat: Send + Sync + 'static {
    /// The state of one streamed answer.
    type Stream: StreamAccumulator;
    /// A fresh state for a streamed answer.
    fn stream(&self) -> Self::Stream;
    /// A whole (not streamed) answer.
    fn decode_whole(&self, body: &[u8], time: Duration) -> Result<ChatResponse, ModelError>;
    /// What the body of an HTTP error says, for the error message.
    fn error_text(&self, body: &str) -> String {
        super::excerpt(body.trim(), 500)
    }
}

/// The limits and retries of a provider's calls.
#[derive(Debug, Clone)]
pub(crate) struct CallLimits {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub read_timeout: Duration,
    pub retry: RetryPolicy,
    /// Whether answers stream: then the head of the answer comes at once, and the read limit
    /// bounds the wait for it.
    pub stream: bool,
}

/// One provider endpoint: where requests go, how, and how answers decode.
pub(crate) struct Endpoint<F> {
    pub format: F,
    pub client: reqwest::Client,
    /// Parsed once: parsing (with IDNA) on every request shows up in profiles.
    pub endpoint: reqwest::Url,
    pub url: String,
    pub limits: CallLimits,
}

impl<F: WireFormat> Endpoint<F> {
    /// An endpoint at `url`, sending `headers` (plus the JSON content type) with every request.
    pub(crate) fn new(
        format: F,
        url: String,
        headers: HeaderMap,
        extra_headers: &[(String, String)],
        limits: CallLimits,
    ) -> Result<Self, ModelError> {
        crate::install_crypto_provider();
        let mut headers = headers;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in extra_headers {
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
            .connect_timeout(limits.connect_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let endpoint = reqwest::Url::parse(&url)
            .map_err(|e| ModelError::Config(format!("invalid endpoint {url:?}: {e}")))?;
        Ok(Endpoint {
            format,
            client,
            endpoint,
            url,
            limits,
        })
    }
}

/// A header value from a secret, or a configuration error that does not echo the secret.
pub(crate) fn secret_header(value: &str, what: &str) -> Result<HeaderValue, ModelError> {
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| ModelError::Config(format!("the {what} contains characters not allowed in a header")))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Checks that a base URL is http(s).
pub(crate) fn check_base_url(base_url: &str) -> Result<reqwest::Url, ModelError> {
    let url = reqwest::Url::parse(base_url)
        .map_err(|e| ModelError::Config(format!("invalid base URL {base_url:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ModelError::Config(format!(
            "base URL {base_url:?} must start with http:// or https://"
        )));
    }
    Ok(url)
}
