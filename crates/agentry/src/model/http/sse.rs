//! Decoding of a streamed (SSE) answer into cumulative responses, over any byte stream.

use std::time::Instant;

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
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
            }
            Some((item.map(|(r, _)| r), state))
        })
        .boxed()
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
