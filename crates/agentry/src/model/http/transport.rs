//! Sending a request: retries, the three time limits, and reading the body under them.

use std::error::Error as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderMap};

use super::sse::{ReadError, SseDecoder, Start};
use super::{Endpoint, StreamAccumulator, WireFormat};
use crate::error_chain;
use crate::model::{ChatResponse, ChatStream, ModelError, TimeoutLimit};

/// How many times in one call a connection the server had already closed is replaced at once,
/// without counting as an attempt: the pool may hold several such connections.
const STALE_RETRIES: u32 = 3;

/// A request whose answer has begun: a complete body, or a stream past its first data event.
pub(crate) enum Opened<A> {
    Whole(ChatResponse),
    Stream(SseDecoder<A>),
}

impl<A: StreamAccumulator> Opened<A> {
    pub(crate) fn into_stream(self) -> ChatStream {
        match self {
            Opened::Whole(response) => stream::once(async { Ok(response) }).boxed(),
            Opened::Stream(decoder) => decoder.into_stream(),
        }
    }
}

/// Whether and how a failed attempt may be retried.
enum Retry {
    /// Nothing reached the server's model or nothing was used: retry per the policy.
    Counted(Option<HeaderMap>),
    /// A pooled connection the server had already closed: retry at once, uncounted.
    Stale,
    /// Retrying would not help, or would only start the generation again.
    Never,
}

struct Failure {
    error: ModelError,
    retry: Retry,
}

impl Failure {
    fn never(error: ModelError) -> Self {
        Failure {
            error,
            retry: Retry::Never,
        }
    }

    fn counted(error: ModelError) -> Self {
        Failure {
            error,
            retry: Retry::Counted(None),
        }
    }
}

/// The time limits of one attempt, and what a timeout error says.
#[derive(Clone)]
struct Limits {
    read: Duration,
    request: Duration,
    deadline: tokio::time::Instant,
    url: String,
    attempts: u32,
}

impl Limits {
    /// How long the next read may wait, and the limit that fires if it waits that long.
    fn next_read(&self) -> (Duration, TimeoutLimit) {
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if left <= self.read {
            (left, TimeoutLimit::Request)
        } else {
            (self.read, TimeoutLimit::Read)
        }
    }

    fn error(&self, limit: TimeoutLimit) -> ModelError {
        ModelError::Timeout {
            url: self.url.clone(),
            limit,
            timeout: match limit {
                TimeoutLimit::Read => self.read,
                _ => self.request,
            },
            attempts: self.attempts,
        }
    }

    /// The next piece of the body, waiting at most as long as the limits allow.
    async fn read(
        &self,
        body: &mut BoxStream<'static, reqwest::Result<Bytes>>,
    ) -> Result<Option<Bytes>, ReadError> {
        let (wait, limit) = self.next_read();
        match tokio::time::timeout(wait, body.next()).await {
            Err(_) => Err(ReadError::Timeout(self.error(limit))),
            Ok(None) => Ok(None),
            Ok(Some(Ok(bytes))) => Ok(Some(bytes)),
            Ok(Some(Err(e))) => Err(ReadError::Transport(error_chain(&e))),
        }
    }
}

/// The whole body, read under the limits.
async fn read_all(response: reqwest::Response, limits: &Limits) -> Result<Vec<u8>, ReadError> {
    let mut body = response.bytes_stream().boxed();
    let mut out = Vec::new();
    while let Some(bytes) = limits.read(&mut body).await? {
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// The body as a stream of pieces, each read under the limits; it ends after an error.
fn body_stream(
    response: reqwest::Response,
    limits: Limits,
) -> impl futures::Stream<Item = Result<Bytes, ReadError>> + Send + 'static {
    let body = response.bytes_stream().boxed();
    stream::unfold(Some((body, limits)), |state| async move {
        let (mut body, limits) = state?;
        match limits.read(&mut body).await {
            Ok(Some(bytes)) => Some((Ok(bytes), Some((body, limits)))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    })
}

impl<F: WireFormat> Endpoint<F> {
    /// Sends the request, retrying per the policy, until an answer has begun.
    pub(crate) async fn open(&self, body: Bytes, started: Instant) -> Result<Opened<F::Stream>, ModelError> {
        let policy = &self.limits.retry;
        let mut attempt = 0u32;
        let mut stale = 0u32;
        loop {
            attempt += 1;
            let failure = match self.attempt(body.clone(), attempt, started).await {
                Ok(opened) => return Ok(opened),
                Err(failure) => failure,
            };
            let headers = match failure.retry {
                Retry::Never => return Err(failure.error),
                Retry::Stale if stale < STALE_RETRIES => {
                    stale += 1;
                    attempt -= 1;
                    tracing::debug!(error = %failure.error, "the server had closed a pooled connection; retrying at once");
                    continue;
                }
                Retry::Stale => None,
                Retry::Counted(headers) => headers,
            };
            if attempt > policy.max_retries {
                return Err(failure.error);
            }
            let delay = policy.delay(attempt, headers.as_ref());
            tracing::warn!(attempt, ?delay, error = %failure.error, "model call failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(
        &self,
        body: Bytes,
        attempt: u32,
        started: Instant,
    ) -> Result<Opened<F::Stream>, Failure> {
        let limits = Limits {
            read: self.limits.read_timeout,
            request: self.limits.request_timeout,
            deadline: tokio::time::Instant::now() + self.limits.request_timeout,
            url: self.url.clone(),
            attempts: attempt,
        };
        // A server answering without streaming sends nothing until the whole answer is ready,
        // so only the request limit bounds that wait; a streaming server sends its head at once.
        let (wait, limit) = if self.limits.stream {
            limits.next_read()
        } else {
            (limits.request, TimeoutLimit::Request)
        };
        let sent = self.client.post(self.endpoint.clone()).body(body).send();
        let response = match tokio::time::timeout(wait, sent).await {
            Err(_) => return Err(Failure::never(limits.error(limit))),
            Ok(Err(e)) => return Err(self.send_error(&e, attempt)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let text = read_all(response, &limits)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let error = ModelError::Status {
                url: self.url.clone(),
                status: status.as_u16(),
                body: self.format.error_text(&text),
                attempts: attempt,
            };
            return Err(if is_retryable_status(status.as_u16()) {
                Failure {
                    error,
                    retry: Retry::Counted(Some(headers)),
                }
            } else {
                Failure::never(error)
            });
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            let decoder = SseDecoder::new(body_stream(response, limits), self.format.stream(), started);
            return match decoder.start().await {
                Start::Started(decoder) => Ok(Opened::Stream(decoder)),
                Start::Broken(error) => Err(Failure::counted(error)),
                Start::Failed(error) => Err(Failure::never(error)),
            };
        }
        // Also taken when a server ignores `stream: true` and answers with one JSON body.
        match read_all(response, &limits).await {
            Ok(body) => self
                .format
                .decode_whole(&body, started.elapsed())
                .map(Opened::Whole)
                .map_err(Failure::never),
            Err(ReadError::Timeout(error)) => Err(Failure::never(error)),
            Err(ReadError::Transport(reason)) => Err(Failure::counted(ModelError::Stream(format!(
                "the connection broke while the answer was read: {reason}"
            )))),
        }
    }

    fn send_error(&self, e: &reqwest::Error, attempts: u32) -> Failure {
        if e.is_timeout() {
            // The only limit left to reqwest is the connect timeout.
            return Failure::counted(ModelError::Timeout {
                url: self.url.clone(),
                limit: TimeoutLimit::Connect,
                timeout: self.limits.connect_timeout,
                attempts,
            });
        }
        let error = ModelError::Connect {
            url: self.url.clone(),
            attempts,
            reason: error_chain(e),
        };
        Failure {
            error,
            retry: if is_stale_connection(e) {
                Retry::Stale
            } else {
                Retry::Counted(None)
            },
        }
    }
}

/// Whether the server closed the connection after the request was written and before any
/// answer: what a keep-alive connection closed by the server while idle in the pool looks like.
fn is_stale_connection(e: &reqwest::Error) -> bool {
    if e.is_connect() {
        return false;
    }
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && hyper.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = cause.source();
    }
    false
}

fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}
