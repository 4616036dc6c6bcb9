//! A session's events as the server hands them out: each serialized once, numbered, kept in a
//! bounded backlog for clients that reconnect (`Last-Event-ID`), and sent live to every client.
//!
//! A client that falls more than the live buffer behind never slows the agent or the other
//! clients: it is told to reconnect from its last id (event `resume`), and its stream ends.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use agentry::agent::AgentEvent;
use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::broadcast;

/// Events kept for reconnecting clients, per session.
const BACKLOG: usize = 10_000;
/// Events a live client may be behind before it is told to resume.
const LIVE_BUFFER: usize = 1_024;

/// One numbered event, serialized.
#[derive(Debug, Clone)]
pub struct Numbered {
    /// Its id, from 1, increasing within the session.
    pub id: u64,
    /// The `AgentEvent` as JSON.
    pub json: Arc<str>,
}

/// A session's event log.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<Backlog>,
    live: broadcast::Sender<Numbered>,
}

#[derive(Debug, Default)]
struct Backlog {
    next_id: u64,
    kept: VecDeque<Numbered>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            inner: Mutex::new(Backlog {
                next_id: 1,
                kept: VecDeque::new(),
            }),
            live: broadcast::channel(LIVE_BUFFER).0,
        }
    }
}

/// Why a stream of events cannot start where the client asked.
#[derive(Debug, PartialEq, Eq)]
pub enum ResumeError {
    /// Events right after the given id are no longer kept; the oldest kept is `oldest`.
    TooOld { oldest: u64 },
    /// No event has that id yet (the server restarted since); the last is `last`.
    Unknown { last: u64 },
}

impl EventLog {
    /// Numbers `event`, keeps it and sends it to the live clients.
    pub fn push(&self, event: &AgentEvent) {
        let json: Arc<str> = match serde_json::to_string(event) {
            Ok(json) => json.into(),
            Err(e) => {
                tracing::warn!(error = %e, "an event could not be serialized");
                return;
            }
        };
        let mut backlog = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let numbered = Numbered {
            id: backlog.next_id,
            json,
        };
        backlog.next_id += 1;
        if backlog.kept.len() == BACKLOG {
            backlog.kept.pop_front();
        }
        backlog.kept.push_back(numbered.clone());
        // Under the lock, so that a client subscribing sees each event once: in the backlog
        // or live, never in both and never in neither.
        let _ = self.live.send(numbered);
    }

    /// The id of the last event (0 before any).
    pub fn last_id(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).next_id - 1
    }

    /// The events after `after`, then the live ones as they come.
    pub fn stream_after(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ResumeError> {
        let (kept, live) = {
            let backlog = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let last = backlog.next_id - 1;
            let oldest = backlog.kept.front().map_or(backlog.next_id, |e| e.id);
            if after > last {
                return Err(ResumeError::Unknown { last });
            }
            if after + 1 < oldest {
                return Err(ResumeError::TooOld { oldest });
            }
            let kept: Vec<Numbered> = backlog.kept.iter().filter(|e| e.id > after).cloned().collect();
            (kept, self.live.subscribe())
        };
        let state = Delivery {
            kept: kept.into_iter(),
            live,
            sent: after,
            ended: false,
        };
        Ok(futures::stream::unfold(state, |mut state| async move {
            if state.ended {
                return None;
            }
            let next = match state.kept.next() {
                Some(event) => Ok(event),
                None => state.live.recv().await,
            };
            match next {
                Ok(event) => {
                    state.sent = event.id;
                    let sse = Event::default()
                        .id(event.id.to_string())
                        .event("agent")
                        .data(&*event.json);
                    Some((Ok(sse), state))
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    state.ended = true;
                    let data = format!(r#"{{"reason":"too_slow","last_event_id":{}}}"#, state.sent);
                    Some((Ok(Event::default().event("resume").data(data)), state))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        }))
    }
}

/// Where one client's stream is.
struct Delivery {
    kept: std::vec::IntoIter<Numbered>,
    live: broadcast::Receiver<Numbered>,
    /// The id of the last event sent.
    sent: u64,
    ended: bool,
}
