//! The SSE body: one event per HTTP chunk (or two, torn in the middle), with optional pauses,
//! and disconnect detection.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use futures::Stream;
use serde_json::Value;

use crate::Shared;
use crate::gate::Gate;

pub(crate) enum Event {
    /// `data: JSON` (OpenAI).
    Json(Value),
    /// `event: NAME` then `data: JSON` (Anthropic).
    Named(&'static str, Value),
    Raw(String),
    Done,
}

impl Event {
    fn bytes(&self) -> Bytes {
        match self {
            Event::Json(v) => Bytes::from(format!("data: {v}\n\n")),
            Event::Named(name, v) => Bytes::from(format!("event: {name}\ndata: {v}\n\n")),
            Event::Raw(s) => Bytes::from(s.clone()),
            Event::Done => Bytes::from_static(b"data: [DONE]\n\n"),
        }
    }
}

/// How a stream is paced: where it waits, where it stops for good, whether events are torn.
#[derive(Default)]
pub(crate) struct Pacing {
    /// Before this event, wait at the gate.
    pub(crate) pause: Option<(usize, Gate)>,
    /// Before this event, wait forever.
    pub(crate) hang_after: Option<usize>,
    /// Send each event as two HTTP chunks, cut at the middle byte.
    pub(crate) torn: bool,
}

/// Keeps the first `after` events and ends the stream with `error` (an error event).
pub(crate) fn end_with_error(events: &mut Vec<Event>, after: usize, error: Event) {
    events.truncate(after);
    events.push(error);
}

/// Counts a disconnect when the body is dropped before its last event was sent.
struct DisconnectGuard {
    shared: Arc<Shared>,
    complete: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.complete {
            self.shared.record_disconnect();
        }
    }
}

struct State {
    events: std::iter::Enumerate<std::vec::IntoIter<Event>>,
    /// The second half of a torn event, sent before the next event.
    rest: Option<Bytes>,
    guard: DisconnectGuard,
}

pub(crate) fn event_stream(
    events: Vec<Event>,
    pacing: Pacing,
    shared: Arc<Shared>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let state = State {
        events: events.into_iter().enumerate(),
        rest: None,
        guard: DisconnectGuard {
            shared,
            complete: false,
        },
    };
    let Pacing {
        pause,
        hang_after,
        torn,
    } = pacing;
    futures::stream::unfold(state, move |mut state| {
        let pause = pause.clone();
        async move {
            // Give the connection a chance to write each chunk on its own.
            tokio::task::yield_now().await;
            if let Some(rest) = state.rest.take() {
                if state.events.len() == 0 {
                    state.guard.complete = true;
                }
                return Some((Ok(rest), state));
            }
            let (index, event) = state.events.next()?;
            if let Some((at, gate)) = &pause
                && index == *at
            {
                gate.wait().await;
            }
            if hang_after == Some(index) {
                std::future::pending::<()>().await;
            }
            let mut bytes = event.bytes();
            if torn && bytes.len() >= 2 {
                // A byte offset, not a char boundary: the cut may fall inside a UTF-8 character.
                let rest = bytes.split_off(bytes.len() / 2);
                state.rest = Some(rest);
            } else if state.events.len() == 0 {
                state.guard.complete = true;
            }
            Some((Ok(bytes), state))
        }
    })
}
