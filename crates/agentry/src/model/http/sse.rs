//! Decoding of a streamed (SSE) answer into cumulative responses, over any byte stream.

use std::time::{Duration, Instant};

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::FutureExt;
use futures::stream::{self, BoxStream, Stream, StreamExt};

use super::{Absorbed, StreamAccumulator};
use crate::model::{ChatResponse, ChatStream, ModelError};

/// Why reading the response body stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection broke.
    Transport(String),
    /// A limit fired while waiting for bytes.
    Timeout(ModelError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Transport(reason) => f.write_str(reason),
            ReadError::Timeout(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {}

type Events = BoxStream<'static, Result<Event, EventStreamError<ReadError>>>;

/// How long the rest of a body is read after its terminal event, in the background, so that
/// its connection can go back to the pool.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How many events after the terminal one are read and dropped at once before the rest is left
/// to the background.
const EVENTS_AFTER_END: usize = 16;

/// A streamed answer being decoded.
pub(crate) struct SseDecoder<A> {
    events: Events,
    acc: A,
    started: Instant,
    /// The first data event (name, data), read ahead to know the stream really started (then
    /// a retry would throw away something already used).
    pending: Option<(String, String)>,
    done: bool,
}

/// What reading up to the first data event found.
pub(crate) enum Start<A> {
    /// A data event arrived: the answer has begun.
    Started(SseDecoder<A>),
    /// The stream ended or broke before any data: nothing was used, so the call may be retried.
    Broken(ModelError),
    /// A limit fired or the stream is not valid SSE: retrying would not help.
    Failed(ModelError),
}

impl<A: StreamAccumulator> SseDecoder<A> {
    /// A decoder over the body's bytes; `started` is when the request was sent (for usage).
    pub(crate) fn new<S>(bytes: S, acc: A, started: Instant) -> Self
    where
        S: Stream<Item = Result<Bytes, ReadError>> + Send + 'static,
    {
        SseDecoder {
            events: bytes.eventsource().boxed(),
            acc,
            started,
            pending: None,
            done: false,
        }
    }

    /// Reads until the first non-empty data event, which is kept for [`SseDecoder::into_stream`].
    pub(crate) async fn start(mut self) -> Start<A> {
        loop {
            match self.events.next().await {
                None => {
                    return Start::Broken(ModelError::Stream(
                        "the server closed the stream before sending any data".into(),
                    ));
                }
                Some(Err(EventStreamError::Transport(ReadError::Transport(reason)))) => {
                    return Start::Broken(ModelError::Stream(format!(
                        "the stream broke before any data: {reason}"
                    )));
                }
                Some(Err(e)) => return Start::Failed(event_error(e)),
                Some(Ok(event)) => {
                    if !event.data.trim().is_empty() {
                        if let Some(error) = self.acc.early_error(&event.event, &event.data) {
                            return Start::Broken(error);
                        }
                        self.pending = Some((event.event, event.data));
                        return Start::Started(self);
                    }
                }
            }
        }
    }

    /// The cumulative responses: one per visible change, then the complete one.
    pub(crate) fn into_stream(self) -> ChatStream {
        stream::unfold(self, |mut state| async move {
            if state.done {
                return None;
            }
            let item = state.next_response().await;
            if !matches!(item, Ok((_, false))) {
                state.done = true;
                if item.is_ok() {
                    state.release_body();
                }
            }
            Some((item.map(|(r, _)| r), state))
        })
        .boxed()
    }

    /// Reads the body to its end after the terminal event (`message_stop`, `[DONE]`): hyper
    /// gives a connection back to its pool only once its body has ended, and a server may send
    /// the chunked terminator in a write of its own, after the last event. Dropping the body
    /// before then closes the connection, and the next call pays a new TCP and TLS handshake.
    /// What has arrived is read now; the rest, if any, in a task bounded by [`DRAIN_LIMIT`], so
    /// that the answer never waits for it.
    fn release_body(&mut self) {
        let mut events = std::mem::replace(&mut self.events, stream::empty().boxed());
        for _ in 0..EVENTS_AFTER_END {
            match events.next().now_or_never() {
                Some(Some(_)) => {}
                Some(None) => return,
                None => break,
            }
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let drained = async { while events.next().await.is_some() {} };
                let _ = tokio::time::timeout(DRAIN_LIMIT, drained).await;
            });
        }
    }

    /// Decodes a whole body delivered in `pieces`, without any I/O: every item the stream
    /// would yield, and the bytes of tool-call arguments parsed by previews and copied into
    /// those items (for the fuzz targets).
    #[cfg(feature = "openai")]
    pub(crate) fn decode_pieces(
        pieces: Vec<Bytes>,
        acc: A,
    ) -> (Vec<Result<ChatResponse, ModelError>>, usize) {
        let decoder = SseDecoder::new(stream::iter(pieces.into_iter().map(Ok)), acc, Instant::now());
        futures::executor::block_on(async move {
            let mut decoder = match decoder.start().await {
                Start::Started(decoder) => decoder,
                Start::Broken(e) | Start::Failed(e) => return (vec![Err(e)], 0),
            };
            let mut items = Vec::new();
            loop {
                let item = decoder.next_response().await;
                let last = !matches!(item, Ok((_, false)));
                items.push(item.map(|(r, _)| r));
                if last {
                    return (items, decoder.acc.argument_work());
                }
            }
        })
    }

    /// Reads events until the visible content changes (`(snapshot, false)`) or the response is
    /// complete (`(final, true)`).
    async fn next_response(&mut self) -> Result<(ChatResponse, bool), ModelError> {
        loop {
            let (event, data) = match self.pending.take() {
                Some(pending) => pending,
                None => match self.events.next().await {
                    Some(event) => {
                        let event = event.map_err(event_error)?;
                        (event.event, event.data)
                    }
                    None => break,
                },
            };
            if data.trim().is_empty() {
                continue;
            }
            match self.acc.absorb(&event, &data)? {
                Absorbed::Unchanged => {}
                Absorbed::Changed => return Ok((self.acc.snapshot(), false)),
                Absorbed::Complete => return Ok((self.acc.finish(self.started.elapsed())?, true)),
            }
        }
        Ok((self.acc.end_of_stream(self.started.elapsed())?, true))
    }
}

fn event_error(e: EventStreamError<ReadError>) -> ModelError {
    match e {
        EventStreamError::Transport(ReadError::Timeout(error)) => error,
        EventStreamError::Transport(ReadError::Transport(reason)) => ModelError::Stream(reason),
        other => ModelError::Decode {
            reason: "invalid server-sent event".into(),
            excerpt: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::channel::mpsc;
    use tokio::sync::Notify;

    use super::*;

    /// Text events until `[DONE]`.
    #[derive(Default)]
    struct Texts(String);

    impl StreamAccumulator for Texts {
        fn absorb(&mut self, _event: &str, data: &str) -> Result<Absorbed, ModelError> {
            if data == "[DONE]" {
                return Ok(Absorbed::Complete);
            }
            self.0.push_str(data);
            Ok(Absorbed::Changed)
        }

        fn snapshot(&mut self) -> ChatResponse {
            ChatResponse {
                content: vec![crate::message::ContentBlock::text(self.0.clone())],
                ..ChatResponse::default()
            }
        }

        fn finish(&mut self, _time: Duration) -> Result<ChatResponse, ModelError> {
            let mut response = self.snapshot();
            response.finish_reason = Some("stop".into());
            Ok(response)
        }

        fn end_of_stream(&mut self, time: Duration) -> Result<ChatResponse, ModelError> {
            self.finish(time)
        }

        fn argument_work(&self) -> usize {
            0
        }
    }

    /// The answer is complete at `[DONE]` without waiting for the body's end (the chunked
    /// terminator, sent later), and the body is then read to its end, so that its connection
    /// can go back to the pool.
    #[tokio::test]
    async fn the_body_is_read_to_its_end_after_the_terminal_event() {
        let (tx, rx) = mpsc::unbounded::<Bytes>();
        let ended = Arc::new(AtomicBool::new(false));
        let bell = Arc::new(Notify::new());
        let (flag, ring) = (Arc::clone(&ended), Arc::clone(&bell));
        // The pieces the test sends, then a marker of the end that records it was reached.
        let bytes = rx.map(Ok).chain(stream::poll_fn(move |_| {
            flag.store(true, Ordering::SeqCst);
            ring.notify_one();
            std::task::Poll::Ready(None)
        }));
        for piece in ["data: hi\n\n", "data: [DONE]\n\n"] {
            assert!(tx.unbounded_send(Bytes::from_static(piece.as_bytes())).is_ok());
        }
        let decoder = SseDecoder::new(bytes, Texts::default(), Instant::now());
        let Start::Started(decoder) = decoder.start().await else {
            panic!("the stream did not start");
        };
        let items: Vec<_> = tokio::time::timeout(Duration::from_secs(10), decoder.into_stream().collect())
            .await
            .unwrap_or_default();
        let last = items.last().and_then(|item| item.as_ref().ok());
        assert_eq!(last.and_then(|r| r.finish_reason.as_deref()), Some("stop"));
        assert!(
            !ended.load(Ordering::SeqCst),
            "the answer waited for the body's end"
        );
        // The server ends the body now: the background read reaches it.
        let reached = bell.notified();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), reached)
            .await
            .unwrap_or_else(|_| panic!("the body was not read to its end"));
        assert!(ended.load(Ordering::SeqCst));
    }
}
