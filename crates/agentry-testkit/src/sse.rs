//! The SSE body: one event per HTTP chunk, with optional pauses, and disconnect detection.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use futures::Stream;
use serde_json::Value;

use crate::Shared;
use crate::gate::Gate;

pub(crate) enum Event {
    Json(Value),
    Raw(String),
    Done,
}

impl Event {
    fn bytes(&self) -> Bytes {
        match self {
            Event::Json(v) => Bytes::from(format!("data: {v}\n\n")),
            Event::Raw(s) => Bytes::from(s.clone()),
            Event::Done => Bytes::from_static(b"data: [DONE]\n\n"),
        }
    }
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

pub(crate) fn event_stream(
    events: Vec<Event>,
    pause: Option<(usize, Gate)>,
    hang_after: Option<usize>,
    shared: Arc<Shared>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let guard = DisconnectGuard {
        shared,
        complete: false,
    };
    futures::stream::unfold(
        (events.into_iter().enumerate(), guard),
        move |(mut events, mut guard)| {
            let pause = pause.clone();
            async move {
                let (index, event) = match events.next() {
                    Some(next) => next,
                    None => return None,
                };
                if let Some((at, gate)) = &pause
                    && index == *at
                {
                    gate.wait().await;
                }
                if hang_after == Some(index) {
                    std::future::pending::<()>().await;
                }
                // Give the connection a chance to write each event on its own.
                tokio::task::yield_now().await;
                if events.len() == 0 {
                    guard.complete = true;
                }
                Some((Ok(event.bytes()), (events, guard)))
            }
        },
    )
}
