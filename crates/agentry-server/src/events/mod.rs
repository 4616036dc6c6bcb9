//! A session's events as the server hands them out: each serialized once, numbered, kept in a
//! bounded backlog, which every client's stream reads from its own place: clients that
//! reconnect (`Last-Event-ID`) and live ones alike, woken when an event comes. (A ring of
//! the events for each session's live clients, as a broadcast channel keeps, cost 57 KB per
//! session before any event.)
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
use tokio::sync::watch;

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

/// What a session's log shares with its streams. A session unloaded while idle keeps it as
/// long as a client streams from it, and the log made when the session is loaded again
/// continues it (see [`EventLog::durable_continuing`]), so that its streams go on.
pub struct LogCore {
    backlog: Mutex<Backlog>,
    /// Wakes the streams when an event comes or the log closes.
    wake: watch::Sender<()>,
}

impl LogCore {
    fn new(next_id: u64) -> Self {
        LogCore {
            backlog: Mutex::new(Backlog {
                next_id,
                kept: VecDeque::new(),
                closed: false,
            }),
            wake: watch::Sender::new(()),
        }
    }

    /// Ends every stream once it has sent what was pushed so far; later streams send what is
    /// kept and end.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.send_replace(());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A session's event log.
pub struct EventLog {
    core: Arc<LogCore>,
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
        EventLog::on(Arc::new(LogCore::new(next_id)), durable)
    }

    fn on(core: Arc<LogCore>, durable: Option<DurableLog>) -> Self {
        EventLog {
            core,
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

    /// As [`EventLog::durable`], continuing `core`, the log of the session's previous load:
    /// the streams still open on it get this log's events.
    pub async fn durable_continuing(
        memory: &Arc<SessionMemory>,
        writer: EventWriter,
        core: Arc<LogCore>,
    ) -> Result<Self, StoreError> {
        let (durable, next_id) = DurableLog::open(memory, writer).await?;
        {
            let mut backlog = core.lock();
            // Never below an id handed out: the store may know of later ones.
            backlog.next_id = backlog.next_id.max(next_id);
        }
        Ok(EventLog::on(core, Some(durable)))
    }

    /// This log with only the events the store keeps numbered (see [`EventLog::durable`]): the
    /// ids a client of the store's log sees then follow each other.
    pub fn final_only(mut self) -> Self {
        self.final_only = true;
        self
    }

    /// Numbers `event`, keeps it and wakes the live clients.
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
        let mut backlog = self.lock();
        let numbered = Numbered {
            id: backlog.next_id,
            json,
            at_us: now_us(),
        };
        backlog.next_id += 1;
        if backlog.kept.len() == BACKLOG {
            backlog.kept.pop_front();
        }
        if let Some(durable) = &self.durable
            && !matches!(event, AgentEvent::Message { last: false, .. })
        {
            durable.keep(StoredEvent {
                id: numbered.id,
                body: numbered.json.to_string(),
                recorded_at: chrono::DateTime::from_timestamp_micros(numbered.at_us as i64),
            });
        }
        backlog.kept.push_back(numbered);
        drop(backlog);
        self.core.wake.send_replace(());
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
        self.core.close();
    }

    /// Writes what the store has yet to keep and gives back the ids reserved above the last,
    /// then forgets the events in memory (the store has them): for a session unloaded while
    /// idle, whose streams stay open on its [`LogCore`]. A client behind resumes from the
    /// store.
    pub async fn release(&self) {
        let Some(durable) = &self.durable else {
            return;
        };
        durable.flush().await;
        if let Err(e) = durable.settle(self.last_id()).await {
            tracing::debug!(error = %e, "the reserved event ids stay reserved");
        }
        let mut backlog = self.lock();
        backlog.kept = VecDeque::new();
    }

    /// What this log shares with its streams.
    pub fn core(&self) -> &Arc<LogCore> {
        &self.core
    }

    /// The id of the last event (0 before any).
    pub fn last_id(&self) -> u64 {
        self.lock().next_id - 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.core.lock()
    }

    /// The events after `after`, then the live ones as they come. Events older than the
    /// backlog come from the store, when the log is durable.
    pub fn stream_after(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ResumeError> {
        let (stored, live_from) = {
            let backlog = self.lock();
            let last = backlog.next_id - 1;
            let oldest = backlog.kept.front().map_or(backlog.next_id, |e| e.id);
            if after > last {
                return Err(ResumeError::Unknown { last });
            }
            let stored = match &self.durable {
                _ if after + 1 >= oldest => None,
                Some(durable) => Some((durable.reader(after, oldest), oldest - 1)),
                None => return Err(ResumeError::TooOld { oldest }),
            };
            (stored, last)
        };
        let state = Delivery {
            stored,
            page: Vec::new().into_iter(),
            core: Arc::clone(&self.core),
            wake: self.core.wake.subscribe(),
            ready: VecDeque::new(),
            sent: after,
            live_from,
            ended: false,
        };
        Ok(futures::stream::unfold(state, |mut state| async move {
            if state.ended {
                return None;
            }
            let event = loop {
                if let Some(event) = state.page.next() {
                    break Numbered {
                        id: event.id,
                        json: event.body.into(),
                        at_us: 0,
                    };
                }
                if let Some(event) = state.ready.pop_front() {
                    break event;
                }
                if let Some((stored, until)) = &mut state.stored {
                    match stored.next_page().await {
                        Ok(page) if page.is_empty() => {
                            // Ids the store does not keep (streamed states) are not missed.
                            state.sent = state.sent.max(*until);
                            state.stored = None;
                        }
                        Ok(page) => state.page = page.into_iter(),
                        Err(e) => {
                            tracing::warn!(error = %e, "kept events could not be read");
                            state.ended = true;
                            return Some((Ok(resume("store_error", state.sent)), state));
                        }
                    }
                    continue;
                }
                // Seen before looking, so that an event pushed after the look wakes the wait.
                state.wake.borrow_and_update();
                match state.fetch() {
                    Fetched::Events => {}
                    Fetched::Closed => return None,
                    Fetched::TooSlow => {
                        state.ended = true;
                        return Some((Ok(resume("too_slow", state.sent)), state));
                    }
                    Fetched::Nothing => {
                        if state.wake.changed().await.is_err() {
                            // The log is gone without closing: nothing more comes.
                            return None;
                        }
                    }
                }
            };
            state.sent = event.id;
            let mut sse = Event::default();
            if event.at_us != 0 {
                // The comment (ignored by clients) says when the server recorded the event, so
                // that a client can measure how long its delivery took.
                sse = sse.comment(format!("at_us={}", event.at_us));
            }
            let sse = sse.id(event.id.to_string()).event("agent").data(&*event.json);
            Some((Ok(sse), state))
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

/// Events a stream takes from the backlog at a time.
const FETCH: usize = 64;

/// Where one client's stream is.
struct Delivery {
    /// Events older than the backlog, still to read from the store, and the last id that read
    /// covers.
    stored: Option<(StoredEvents, u64)>,
    /// The page of them being sent.
    page: std::vec::IntoIter<StoredEvent>,
    core: Arc<LogCore>,
    wake: watch::Receiver<()>,
    /// Events taken from the backlog, to send.
    ready: VecDeque<Numbered>,
    /// The id of the last event sent.
    sent: u64,
    /// The last id when the stream started: the client may fall [`LIVE_BUFFER`] events behind
    /// the ones pushed after it.
    live_from: u64,
    ended: bool,
}

/// What a stream found in the backlog.
enum Fetched {
    /// Events to send, now in its `ready`.
    Events,
    /// Nothing yet.
    Nothing,
    /// Nothing, and nothing more comes.
    Closed,
    /// The client fell too far behind.
    TooSlow,
}

impl Delivery {
    /// Takes the next events after the last sent from the backlog.
    fn fetch(&mut self) -> Fetched {
        let backlog = self.core.lock();
        let last = backlog.next_id - 1;
        if last <= self.sent {
            return match backlog.closed {
                true => Fetched::Closed,
                false => Fetched::Nothing,
            };
        }
        let oldest = backlog.kept.front().map_or(backlog.next_id, |e| e.id);
        if last - self.sent.max(self.live_from) > LIVE_BUFFER as u64 || self.sent + 1 < oldest {
            return Fetched::TooSlow;
        }
        // Ids in the backlog follow each other.
        let skip = usize::try_from(self.sent + 1 - oldest).unwrap_or(usize::MAX);
        self.ready
            .extend(backlog.kept.iter().skip(skip).take(FETCH).cloned());
        Fetched::Events
    }
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

    #[tokio::test]
    async fn every_waiting_stream_is_woken_by_each_event_in_order() {
        let log = EventLog::default();
        let mut streams: Vec<_> = (0..2).map(|_| Box::pin(log.stream_after(0).unwrap())).collect();
        for n in 1..=3u64 {
            for stream in &mut streams {
                assert!(futures::poll!(stream.next()).is_pending(), "nothing to send yet");
            }
            log.push(&event(n)).await;
            for stream in &mut streams {
                let sent = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
                    .await
                    .expect("the event woke the stream")
                    .unwrap();
                let text = wire(futures::stream::iter([sent])).await;
                assert!(text.contains(&format!("id: {n}\n")), "{text}");
            }
        }
        log.close().await;
        for stream in &mut streams {
            assert!(stream.next().await.is_none(), "the stream ends with the log");
        }
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
