//! The part of a session's event log kept in the store, so that a client resumes with its
//! `Last-Event-ID` after the server restarts.
//!
//! Events are written by one background task for the whole server ([`EventWriter`]), in
//! batches, off the replies' path. Ids are reserved
//! in the store in blocks before they are handed out: a server that starts again continues
//! above every id a client may have seen, even when the last events were never written (the
//! process was killed). Streamed states of a message (`last == false`) are not kept: the
//! message's final state supersedes them.

use std::sync::{Arc, Weak};

use agentry_store::{SessionId, SessionMemory, SessionStore, StoreError, StoredEvent};
use tokio::sync::{mpsc, oneshot};

/// Ids reserved in one store write.
const RESERVE_BLOCK: u64 = 1_024;
/// Events read in one page, and written in one transaction, at most.
const BATCH: usize = 2_048;

/// What the writer task is asked to do.
enum Write {
    Event(Weak<SessionMemory>, StoredEvent),
    /// Answer once everything sent before is written.
    Flush(oneshot::Sender<()>),
}

/// The server's writer of kept events: one task writes the events of every session, those
/// that came while it wrote the last ones all in one transaction, so that a busy server commits
/// (and syncs to disk) a few times per batch, not once per event.
#[derive(Clone)]
pub struct EventWriter {
    requests: mpsc::UnboundedSender<Write>,
}

impl EventWriter {
    /// Starts the writer on `store` (within a Tokio runtime). It ends once every copy of it,
    /// and every log using it, is dropped.
    pub fn start(store: Arc<dyn SessionStore>) -> Self {
        let (requests, received) = mpsc::unbounded_channel();
        tokio::spawn(write_events(store, received));
        EventWriter { requests }
    }

    /// Resolves once what was queued before is written.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.requests.send(Write::Flush(done)).is_ok() {
            let _ = written.await;
        }
    }
}

/// The writer task.
async fn write_events(store: Arc<dyn SessionStore>, mut requests: mpsc::UnboundedReceiver<Write>) {
    let mut flushed = Vec::new();
    while let Some(first) = requests.recv().await {
        let mut sessions: Vec<(Arc<SessionMemory>, Vec<StoredEvent>)> = Vec::new();
        let mut count = 0;
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Write::Event(memory, event) => {
                    // A session unloaded since: it is gone from the server, and its events
                    // from the store.
                    let Some(memory) = memory.upgrade() else {
                        continue;
                    };
                    count += 1;
                    match sessions.iter_mut().find(|(m, _)| Arc::ptr_eq(m, &memory)) {
                        Some((_, events)) => events.push(event),
                        None => sessions.push((memory, vec![event])),
                    }
                }
                Write::Flush(done) => flushed.push(done),
            }
            if count < BATCH {
                next = requests.try_recv().ok();
            }
        }
        if !sessions.is_empty() {
            let batches = sessions
                .iter_mut()
                .map(|(memory, events)| (memory.lease(), std::mem::take(events)))
                .collect();
            if let Err(e) = store.append_events(batches).await {
                tracing::warn!(error = %e, "events were not kept for clients that resume after a restart");
            }
        }
        for done in flushed.drain(..) {
            let _ = done.send(());
        }
    }
}

/// The store side of one session's event log.
pub(super) struct DurableLog {
    /// Weak, so that the log never keeps the session's writer lease alive on its own.
    memory: Weak<SessionMemory>,
    store: Arc<dyn SessionStore>,
    session: SessionId,
    writer: EventWriter,
    /// The highest id the store lets this process hand out.
    reserved: tokio::sync::Mutex<u64>,
}

/// The highest event id a session may have handed out, by this process or an earlier one, from
/// its [`SessionStore::event_ids`]: reserved ids count, as they may have been seen and never
/// written. The next event's id follows it.
pub(crate) fn last_handed_out((last_stored, reserved): (u64, u64)) -> u64 {
    last_stored.max(reserved)
}

impl DurableLog {
    /// Opens the log of `memory`'s session; also gives the id the next event gets.
    pub(super) async fn open(
        memory: &Arc<SessionMemory>,
        writer: EventWriter,
    ) -> Result<(Self, u64), StoreError> {
        let store = Arc::clone(memory.store());
        let session = memory.session().id.clone();
        let ids = store.event_ids(&session).await?;
        let reserved = ids.1;
        let log = DurableLog {
            memory: Arc::downgrade(memory),
            store,
            session,
            writer,
            reserved: tokio::sync::Mutex::new(reserved),
        };
        Ok((log, last_handed_out(ids) + 1))
    }

    /// Makes sure the store has reserved id `id` before it is handed out.
    pub(super) async fn reserve(&self, id: u64) -> Result<(), StoreError> {
        let mut reserved = self.reserved.lock().await;
        if id <= *reserved {
            return Ok(());
        }
        let Some(memory) = self.memory.upgrade() else {
            // The session was unloaded: no event of it is kept any more.
            return Ok(());
        };
        let up_to = id.saturating_add(RESERVE_BLOCK - 1);
        memory.store().reserve_event_ids(memory.lease(), up_to).await?;
        *reserved = up_to;
        Ok(())
    }

    /// Gives back the reserved ids above `last`, every id up to it being written.
    pub(super) async fn settle(&self, last: u64) -> Result<(), StoreError> {
        let mut reserved = self.reserved.lock().await;
        let Some(memory) = self.memory.upgrade() else {
            return Ok(());
        };
        memory.store().settle_event_ids(memory.lease(), last).await?;
        *reserved = last;
        Ok(())
    }

    /// Queues `event` for the store.
    pub(super) fn keep(&self, event: StoredEvent) {
        // The writer ends only when nothing can send to it any more.
        let _ = self
            .writer
            .requests
            .send(Write::Event(self.memory.clone(), event));
    }

    /// Reads kept events; see [`StoredEvents`].
    pub(super) fn reader(&self, after: u64, before: u64) -> StoredEvents {
        StoredEvents {
            store: Arc::clone(&self.store),
            session: self.session.clone(),
            writer: self.writer.clone(),
            after,
            before,
            flushed: false,
        }
    }

    /// Resolves once the log's events are written.
    pub(super) async fn flush(&self) {
        self.writer.flush().await;
    }
}

/// Kept events with ids in `(after, before)`, read a page at a time, for a client that resumes
/// from an id older than the events in memory.
pub(super) struct StoredEvents {
    store: Arc<dyn SessionStore>,
    session: SessionId,
    writer: EventWriter,
    after: u64,
    before: u64,
    flushed: bool,
}

impl StoredEvents {
    /// The next page (empty once all are read).
    pub(super) async fn next_page(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        if self.after + 1 >= self.before {
            return Ok(Vec::new());
        }
        if !self.flushed {
            // Events this process numbered below `before` may still be queued.
            self.writer.flush().await;
            self.flushed = true;
        }
        let mut page = self.store.events_after(&self.session, self.after, BATCH).await?;
        page.retain(|event| event.id < self.before);
        match page.last() {
            Some(last) => self.after = last.id,
            None => self.after = self.before,
        }
        Ok(page)
    }
}
