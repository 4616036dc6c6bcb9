//! A session's events as the server hands them out: each serialized once, numbered, kept in a
//! bounded backlog for clients that reconnect (`Last-Event-ID`), and sent live to every client.
//!
//! A client that falls more than the live buffer behind never slows the agent or the other
//! clients: it is told to reconnect from its last id (event `resume`), and its stream ends.
//!
//! A log opened with [`EventLog::durable`] also keeps its events in the session's store (see
//! [`durable`]), so that a client resumes from an id older than the backlog, or from before the
//! server restarted.

mod durable;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use agentry::agent::AgentEvent;
use agentry_store::{SessionMemory, StoreError, StoredEvent};
use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::broadcast;

pub use durable::EventWriter;
pub(crate) use durable::last_handed_out;
use durable::{DurableLog, StoredEvents};

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
    /// When the server recorded it: microseconds since the Unix epoch.
    pub at_us: u64,
}

/// A session's event log.
pub struct EventLog {
    inner: Mutex<Backlog>,
    live: broadcast::Sender<Numbered>,
    durable: Option<DurableLog>,
    /// One push at a time, so that ids are reserved in the store in the order they are given.
    pushing: tokio::sync::Mutex<()>,
    /// Only the events the store keeps are numbered (a message's streamed states are not): for
    /// a server whose clients stream from the store (several nodes).
    final_only: bool,
}

#[derive(Debug, Default)]
struct Backlog {
    next_id: u64,
    kept: VecDeque<Numbered>,
    /// No more events come (the server stops): streams end after what was pushed.
    closed: bool,
}

impl Default for EventLog {
    /// A log kept in memory only: ids start at 1.
    fn default() -> Self {
        EventLog::starting_at(1, None)
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
    fn starting_at(next_id: u64, durable: Option<DurableLog>) -> Self {
        EventLog {
            inner: Mutex::new(Backlog {
                next_id,
                kept: VecDeque::new(),
                closed: false,
            }),
            live: broadcast::channel(LIVE_BUFFER).0,
            durable,
            pushing: tokio::sync::Mutex::new(()),
            final_only: false,
        }
    }

    /// The log of `memory`'s session, also kept in its store: ids continue above every id
    /// handed out before, by this process or an earlier one.
    pub async fn durable(memory: &Arc<SessionMemory>, writer: EventWriter) -> Result<Self, StoreError> {
        let (durable, next_id) = DurableLog::open(memory, writer).await?;
        Ok(EventLog::starting_at(next_id, Some(durable)))
    }

    /// This log with only the events the store keeps numbered (see [`EventLog::durable`]): the
    /// ids a client of the store's log sees then follow each other.
    pub fn final_only(mut self) -> Self {
        self.final_only = true;
        self
    }

    /// Numbers `event`, keeps it and sends it to the live clients.
    pub async fn push(&self, event: &AgentEvent) {
        if self.final_only && matches!(event, AgentEvent::Message { last: false, .. }) {
            return;
        }
        let json: Arc<str> = match serde_json::to_string(event) {
            Ok(json) => json.into(),
            Err(e) => {
                tracing::warn!(error = %e, "an event could not be serialized");
                return;
            }
        };
        let _pushing = self.pushing.lock().await;
        if let Some(durable) = &self.durable
            && let Err(e) = durable.reserve(self.last_id() + 1).await
        {
            // The event still goes out: a client loses more by missing it than by being
            // unable to resume across a restart.
            tracing::warn!(error = %e, "event ids could not be reserved in the store");
        }
        let mut backlog = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let numbered = Numbered {
            id: backlog.next_id,
            json,
            at_us: now_us(),
        };
        backlog.next_id += 1;
        if backlog.kept.len() == BACKLOG {
            backlog.kept.pop_front();
        }
        backlog.kept.push_back(numbered.clone());
        if let Some(durable) = &self.durable
            && !matches!(event, AgentEvent::Message { last: false, .. })
        {
            durable.keep(StoredEvent {
                id: numbered.id,
                body: numbered.json.to_string(),
                recorded_at: chrono::DateTime::from_timestamp_micros(numbered.at_us as i64),
            });
        }
        // Under the lock, so that a client subscribing sees each event once: in the backlog
        // or live, never in both and never in neither.
        let _ = self.live.send(numbered);
    }

    /// Writes what the store has yet to keep, then ends every stream once it has sent what
    /// was pushed so far; later streams send what is kept and end.
    pub async fn close(&self) {
        if let Some(durable) = &self.durable {
            durable.flush().await;
            // Every id handed out is kept now (when only kept events are numbered): the next
            // writer of the session may continue right after the last.
            if self.final_only
                && let Err(e) = durable.settle(self.last_id()).await
            {
                tracing::debug!(error = %e, "the reserved event ids stay reserved");
            }
        }
        let mut backlog = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        backlog.closed = true;
        // Id 0 is never an event's: it marks the end.
        let _ = self.live.send(Numbered {
            id: 0,
            json: Arc::from(""),
            at_us: 0,
        });
    }

    /// The id of the last event (0 before any).
    pub fn last_id(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).next_id - 1
    }

    /// The events after `after`, then the live ones as they come. Events older than the
    /// backlog come from the store, when the log is durable.
    pub fn stream_after(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ResumeError> {
        let (stored, kept, live, closed) = {
            let backlog = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let last = backlog.next_id - 1;
            let oldest = backlog.kept.front().map_or(backlog.next_id, |e| e.id);
            if after > last {
                return Err(ResumeError::Unknown { last });
            }
            let stored = match &self.durable {
                _ if after + 1 >= oldest => None,
                Some(durable) => Some(durable.reader(after, oldest)),
                None => return Err(ResumeError::TooOld { oldest }),
            };
            let kept: Vec<Numbered> = backlog.kept.iter().filter(|e| e.id > after).cloned().collect();
            (stored, kept, self.live.subscribe(), backlog.closed)
        };
        let state = Delivery {
            stored,
            page: Vec::new().into_iter(),
            kept: kept.into_iter(),
            live,
            sent: after,
            ended: false,
            closed,
        };
        Ok(futures::stream::unfold(state, |mut state| async move {
            if state.ended {
                return None;
            }
            let next = loop {
                if let Some(event) = state.page.next() {
                    break Ok(Numbered {
                        id: event.id,
                        json: event.body.into(),
                        at_us: 0,
                    });
                }
                let Some(stored) = &mut state.stored else {
                    break match state.kept.next() {
                        Some(event) => Ok(event),
                        None if state.closed => return None,
                        None => state.live.recv().await,
                    };
                };
                match stored.next_page().await {
                    Ok(page) if page.is_empty() => state.stored = None,
                    Ok(page) => state.page = page.into_iter(),
                    Err(e) => {
                        tracing::warn!(error = %e, "kept events could not be read");
                        state.ended = true;
                        return Some((Ok(resume("store_error", state.sent)), state));
                    }
                }
            };
            match next {
                Ok(event) if event.id == 0 => None,
                Ok(event) => {
                    state.sent = event.id;
                    let mut sse = Event::default();
                    if event.at_us != 0 {
                        // The comment (ignored by clients) says when the server recorded the
                        // event, so that a client can measure how long its delivery took.
                        sse = sse.comment(format!("at_us={}", event.at_us));
                    }
                    let sse = sse.id(event.id.to_string()).event("agent").data(&*event.json);
                    Some((Ok(sse), state))
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    state.ended = true;
                    Some((Ok(resume("too_slow", state.sent)), state))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        }))
    }
}

/// The event that tells a client to reconnect from its last id, and why.
fn resume(reason: &str, last_event_id: u64) -> Event {
    let data = format!(r#"{{"reason":"{reason}","last_event_id":{last_event_id}}}"#);
    Event::default().event("resume").data(data)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Where one client's stream is.
struct Delivery {
    /// Events older than the backlog, still to read from the store.
    stored: Option<StoredEvents>,
    /// The page of them being sent.
    page: std::vec::IntoIter<StoredEvent>,
    kept: std::vec::IntoIter<Numbered>,
    live: broadcast::Receiver<Numbered>,
    /// The id of the last event sent.
    sent: u64,
    ended: bool,
    /// The log was closed when the stream started: it ends after the kept events.
    closed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn event(n: u64) -> AgentEvent {
        AgentEvent::ApprovalWithdrawn {
            reply_id: "r".into(),
            call_id: format!("c{n}").into(),
        }
    }

    /// The ids and kinds a stream gives, rendered as the SSE wire text.
    async fn wire(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> String {
        use axum::response::IntoResponse;
        let body = axum::response::sse::Sse::new(stream).into_response().into_body();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_stream_resumes_after_an_id_and_ends_when_the_log_closes() {
        let log = EventLog::default();
        for n in 1..=3 {
            log.push(&event(n)).await;
        }
        let stream = log.stream_after(1).unwrap();
        log.push(&event(4)).await;
        log.close().await;
        let text = wire(stream).await;
        let ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
        assert_eq!(ids, ["2", "3", "4"]);
        assert_eq!(log.stream_after(9).err(), Some(ResumeError::Unknown { last: 4 }));
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_told_to_resume_and_never_holds_the_log_up() {
        let log = EventLog::default();
        let mut slow = Box::pin(log.stream_after(0).unwrap());
        for n in 0..(LIVE_BUFFER as u64 + 10) {
            log.push(&event(n)).await;
        }
        let first = slow.next().await;
        let text = wire(futures::stream::iter(first)).await;
        assert!(
            text.starts_with("event: resume\ndata: {\"reason\":\"too_slow\",\"last_event_id\":0}"),
            "{text}"
        );
        assert!(slow.next().await.is_none(), "its stream ends");
        assert_eq!(log.last_id(), LIVE_BUFFER as u64 + 10, "nothing was held up");
    }

    // On one thread, the writer runs only when the test waits: what it wrote by the end, it
    // wrote because the log flushed it.
    #[tokio::test]
    async fn a_durable_log_keeps_final_events_and_never_hands_out_an_id_twice() {
        use agentry::message::Msg;
        use agentry_store::{SessionStore, SqliteStore};
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
        let info = store.create_session("s", &serde_json::json!({})).await.unwrap();
        let open = || async { Arc::new(SessionMemory::open(Arc::clone(&store), &info.id).await.unwrap()) };

        let writer = EventWriter::start(Arc::clone(&store));
        let memory = open().await;
        let log = EventLog::durable(&memory, writer.clone()).await.unwrap();
        for n in 1..=3 {
            log.push(&event(n)).await;
        }
        let streamed = AgentEvent::Message {
            msg: Msg::assistant("a", "par"),
            last: false,
        };
        log.push(&streamed).await;
        log.push(&event(5)).await;
        log.close().await;
        let kept = store.events_after(&info.id, 0, 100).await.unwrap();
        assert_eq!(kept.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3, 5]);

        // The process dies before it writes its last events: the next one numbers above them.
        let log = EventLog::durable(&memory, writer.clone()).await.unwrap();
        log.push(&event(6)).await;
        drop((log, memory));
        let memory = open().await;
        let log = EventLog::durable(&memory, writer.clone()).await.unwrap();
        assert!(log.last_id() >= 6, "{}", log.last_id());
        // A client that saw event 6 resumes; one that saw 2 gets the kept events after it.
        let text = {
            let stream = log.stream_after(2).unwrap();
            log.close().await;
            wire(stream).await
        };
        let ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
        assert_eq!(ids, ["3", "5"]);
        assert!(log.stream_after(6).is_ok());
    }
}
