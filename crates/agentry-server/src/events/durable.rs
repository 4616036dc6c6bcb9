//! The part of a session's event log kept in the store, so that a client resumes with its
//! `Last-Event-ID` after the server restarts.
//!
//! Events are written by a background task in batches, off the reply's path. Ids are reserved
//! in the store in blocks before they are handed out: a server that starts again continues
//! above every id a client may have seen, even when the last events were never written (the
//! process was killed). Streamed states of a message (`last == false`) are not kept: the
//! message's final state supersedes them.

use std::sync::{Arc, Weak};

use agentry_store::{SessionId, SessionMemory, SessionStore, StoreError, StoredEvent};
use tokio::sync::{mpsc, oneshot};

/// Ids reserved in one store write.
const RESERVE_BLOCK: u64 = 1_024;
/// Events written in one transaction, at most.
const BATCH: usize = 512;

/// What the writer task is asked to do.
enum Write {
    Event(StoredEvent),
    /// Answer once everything sent before is written.
    Flush(oneshot::Sender<()>),
}

/// The store side of one session's event log.
pub(super) struct DurableLog {
    /// Weak, so that the log never keeps the session's writer lease alive on its own.
    memory: Weak<SessionMemory>,
    store: Arc<dyn SessionStore>,
    session: SessionId,
    writer: mpsc::UnboundedSender<Write>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The highest id the store lets this process hand out.
    reserved: tokio::sync::Mutex<u64>,
}

impl DurableLog {
    /// Opens the log of `memory`'s session; also gives the id the next event gets.
    pub(super) async fn open(memory: &Arc<SessionMemory>) -> Result<(Self, u64), StoreError> {
        let store = Arc::clone(memory.store());
        let session = memory.session().id.clone();
        let (last_stored, reserved) = store.event_ids(&session).await?;
        let (writer, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_events(Arc::downgrade(memory), requests));
        let log = DurableLog {
            memory: Arc::downgrade(memory),
            store,
            session,
            writer,
            task: std::sync::Mutex::new(Some(task)),
            reserved: tokio::sync::Mutex::new(reserved),
        };
        Ok((log, last_stored.max(reserved) + 1))
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

    /// Queues `event` for the store.
    pub(super) fn keep(&self, event: StoredEvent) {
        // The writer ends only when the log is finished: nothing is kept after that.
        let _ = self.writer.send(Write::Event(event));
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

    /// Writes what is queued and stops the writer.
    pub(super) async fn finish(&self) {
        flush(&self.writer).await;
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Resolves once the writer has written what was queued before (at once if it has ended).
async fn flush(writer: &mpsc::UnboundedSender<Write>) {
    let (done, written) = oneshot::channel();
    if writer.send(Write::Flush(done)).is_ok() {
        let _ = written.await;
    }
}

/// The writer task: batches what is queued into one transaction each.
async fn write_events(memory: Weak<SessionMemory>, mut requests: mpsc::UnboundedReceiver<Write>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut flushed = Vec::new();
    while let Some(first) = requests.recv().await {
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Write::Event(event) => batch.push(event),
                Write::Flush(done) => flushed.push(done),
            }
            if batch.len() < BATCH {
                next = requests.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            match memory.upgrade() {
                Some(memory) => {
                    if let Err(e) = memory.store().append_events(memory.lease(), &batch).await {
                        tracing::warn!(session = %memory.session().name, error = %e,
                            "events were not kept for clients that resume after a restart");
                    }
                }
                None => tracing::debug!("the session was unloaded: its last events are not kept"),
            }
            batch.clear();
        }
        for done in flushed.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Kept events with ids in `(after, before)`, read a page at a time, for a client that resumes
/// from an id older than the events in memory.
pub(super) struct StoredEvents {
    store: Arc<dyn SessionStore>,
    session: SessionId,
    writer: mpsc::UnboundedSender<Write>,
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
            flush(&self.writer).await;
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
