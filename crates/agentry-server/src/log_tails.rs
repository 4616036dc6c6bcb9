//! The tails of the sessions' logs this node streams, read once for all its streams.
//!
//! On a shared store, a client's stream reads the store's log (see [`crate::cluster`]). Read
//! stream by stream, a node streaming a thousand sessions would send a thousand queries for
//! one batch of events. Instead, one task per node takes the store's notices, gathers the
//! sessions they name (every notice waiting at that moment), and reads all of their new
//! events in one query
//! ([`SessionStore::events_after_each`](agentry_store::SessionStore::events_after_each)). Each
//! session's tail keeps its last events for its streams, which take them from there.
//!
//! A tail only knows where the log ends once a stream has read to its end: until then, and
//! whenever it cannot tell (a notice lost, a read failed, a stream far behind), the streams read
//! the store themselves, as they would with no tail.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use agentry_store::{EventNotice, SessionId, SessionStore, StoredEvent};
use tokio::sync::{broadcast, watch};

/// Events read for one session in one query, at most; a session with more is read by its
/// streams.
const READ: usize = 256;
/// Events a tail keeps for its streams.
const KEPT: usize = 256;

/// What a session's tail has for a stream that sent up to some id.
#[derive(Debug)]
pub(crate) enum FromTail {
    /// The events after the stream's last one, in order (never empty).
    Events(Vec<StoredEvent>),
    /// Nothing yet: wait for a wake.
    UpToDate,
    /// The tail cannot tell: read the store.
    Unknown,
}

/// One session's tail.
struct Tail {
    /// Changed (counted up) whenever the log may have new events.
    wake: watch::Sender<u64>,
    /// Every event the log will hold up to this id has been read, and the newest are in
    /// `recent`. `None` while unknown.
    read_to: Option<u64>,
    recent: VecDeque<StoredEvent>,
}

impl Tail {
    fn forget(&mut self) {
        self.read_to = None;
        self.recent.clear();
    }

    fn wake(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The tails of the sessions this node streams.
pub(crate) struct LogTails {
    store: Arc<dyn SessionStore>,
    tails: Mutex<HashMap<SessionId, Tail>>,
}

impl LogTails {
    /// Starts reading the logs that `notices` name (within a Tokio runtime; without one,
    /// streams read the store themselves once and wait for nothing).
    pub(crate) fn start(
        store: Arc<dyn SessionStore>,
        notices: broadcast::Receiver<EventNotice>,
    ) -> Arc<LogTails> {
        let tails = Arc::new(LogTails {
            store,
            tails: Mutex::default(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(follow_notices(notices, Arc::downgrade(&tails)));
        }
        tails
    }

    /// A receiver that changes whenever session `id`'s log may have new events; the session
    /// is followed while one lives.
    pub(crate) fn watch(&self, id: &SessionId) -> watch::Receiver<u64> {
        let mut tails = self.lock();
        tails
            .entry(id.clone())
            .or_insert_with(|| Tail {
                wake: watch::channel(0).0,
                read_to: None,
                recent: VecDeque::new(),
            })
            .wake
            .subscribe()
    }

    /// What follows event `sent` of session `id`, as far as the tail knows.
    pub(crate) fn after(&self, id: &SessionId, sent: u64) -> FromTail {
        let tails = self.lock();
        let Some(tail) = tails.get(id) else {
            return FromTail::Unknown;
        };
        match tail.read_to {
            None => FromTail::Unknown,
            Some(read_to) if sent >= read_to => FromTail::UpToDate,
            Some(_) => match tail.recent.front() {
                Some(first) if first.id <= sent + 1 => FromTail::Events(
                    tail.recent
                        .iter()
                        .filter(|event| event.id > sent)
                        .cloned()
                        .collect(),
                ),
                _ => FromTail::Unknown,
            },
        }
    }

    /// A stream read the store to its end, event `end`, having seen wake `seen`: unless the
    /// log was woken since (its events may have come after that read), the tail starts there.
    pub(crate) fn reached_end(&self, id: &SessionId, end: u64, seen: u64) {
        let mut tails = self.lock();
        if let Some(tail) = tails.get_mut(id)
            && tail.read_to.is_none()
            && *tail.wake.borrow() == seen
        {
            tail.read_to = Some(end);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Tail>> {
        self.tails.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the new events of `ids` in one query and wakes their streams.
    async fn read(&self, ids: HashSet<SessionId>) {
        let mut from = Vec::new();
        {
            let mut tails = self.lock();
            for id in ids {
                let Some(tail) = tails.get(&id) else { continue };
                if tail.wake.receiver_count() == 0 {
                    tails.remove(&id);
                } else if let Some(read_to) = tail.read_to {
                    from.push((id, read_to));
                } else {
                    tail.wake();
                }
            }
        }
        if from.is_empty() {
            return;
        }
        let read = self.store.events_after_each(&from, READ).await;
        let mut tails = self.lock();
        let mut each: HashMap<SessionId, Vec<StoredEvent>> = match read {
            Ok(each) => each.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the event logs; streams read them one by one");
                HashMap::new()
            }
        };
        for (id, read_from) in from {
            let Some(tail) = tails.get_mut(&id) else { continue };
            // Changed meanwhile (forgotten on a resync): what was read may not follow it.
            if tail.read_to != Some(read_from) {
                continue;
            }
            match each.remove(&id) {
                // More than one read: the streams catch up from the store.
                Some(events) if events.len() >= READ => tail.forget(),
                Some(events) => {
                    if let Some(last) = events.last() {
                        tail.read_to = Some(last.id);
                    }
                    tail.recent.extend(events);
                    while tail.recent.len() > KEPT {
                        tail.recent.pop_front();
                    }
                }
                // Deleted, or the read failed: the streams find out.
                None => tail.forget(),
            }
            tail.wake();
        }
    }

    /// Every tail is unknown again (notices were lost): the streams read the store.
    fn forget_all(&self) {
        let mut tails = self.lock();
        tails.retain(|_, tail| tail.wake.receiver_count() > 0);
        for tail in tails.values_mut() {
            tail.forget();
            tail.wake();
        }
    }
}

/// Reads the logs the notices name, those waiting at once in one query, until the tails are
/// gone.
async fn follow_notices(mut notices: broadcast::Receiver<EventNotice>, tails: Weak<LogTails>) {
    loop {
        let first = notices.recv().await;
        let Some(tails) = tails.upgrade() else {
            return;
        };
        let mut appended = HashSet::new();
        let mut lost = false;
        let mut next = Some(first);
        while let Some(notice) = next.take() {
            match notice {
                Ok(EventNotice::Appended(id)) => {
                    appended.insert(id);
                }
                Ok(EventNotice::Controls(_) | EventNotice::Answered(_)) => {}
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => lost = true,
                Err(broadcast::error::RecvError::Closed) => return,
            }
            next = match notices.try_recv() {
                Ok(notice) => Some(Ok(notice)),
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    Some(Err(broadcast::error::RecvError::Lagged(n)))
                }
                Err(_) => None,
            };
        }
        if lost {
            tails.forget_all();
        } else {
            tails.read(appended).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_store::SqliteStore;

    fn event(id: u64) -> StoredEvent {
        StoredEvent {
            id,
            body: format!("{{\"n\":{id}}}"),
            recorded_at: None,
        }
    }

    fn ids(from: FromTail) -> Option<Vec<u64>> {
        match from {
            FromTail::Events(events) => Some(events.iter().map(|e| e.id).collect()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_tail_serves_what_it_read_once_a_stream_reached_the_end() {
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let session = store.create_session("s", &serde_json::json!({})).await.unwrap();
        let lease = store.acquire(&session.id).await.unwrap();
        let (_notices, receiver) = broadcast::channel(16);
        let tails = LogTails::start(Arc::clone(&store), receiver);
        let id = session.id.clone();
        let wakes = tails.watch(&id);
        assert!(matches!(tails.after(&id, 0), FromTail::Unknown));
        store
            .append_events(vec![(&lease, vec![event(1), event(2)])])
            .await
            .unwrap();
        // A wake after the stream's read: the end it found may be stale, so it is not taken.
        let seen = *wakes.borrow();
        tails.lock().get(&id).unwrap().wake();
        tails.reached_end(&id, 0, seen);
        assert!(matches!(tails.after(&id, 0), FromTail::Unknown));
        tails.reached_end(&id, 2, *wakes.borrow());
        assert!(matches!(tails.after(&id, 2), FromTail::UpToDate));
        store
            .append_events(vec![(&lease, vec![event(3), event(4)])])
            .await
            .unwrap();
        tails.read(HashSet::from([id.clone()])).await;
        assert_eq!(ids(tails.after(&id, 2)), Some(vec![3, 4]));
        assert_eq!(ids(tails.after(&id, 3)), Some(vec![4]));
        assert!(matches!(tails.after(&id, 4), FromTail::UpToDate));
        // A stream further behind than what the tail kept reads the store.
        assert!(matches!(tails.after(&id, 1), FromTail::Unknown));
        tails.forget_all();
        assert!(matches!(tails.after(&id, 4), FromTail::Unknown));
    }
}
