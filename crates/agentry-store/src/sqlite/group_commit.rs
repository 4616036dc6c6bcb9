//! Group commit: the writes of a store's sessions that wait for the connection at the same
//! moment share one transaction.
//!
//! Why: a commit has a fixed price besides its rows: taking the write lock (the WAL index's
//! locks), `BEGIN` and `COMMIT`, writing the pages every write touches (the ends of the
//! messages' and calls' tables and indexes) as WAL frames again, and under `synchronous=FULL`
//! an fsync. A thousand replies writing at once paid it a thousand times.
//!
//! How: a write queues itself for the store's writer thread, which takes the connection, then
//! runs every write queued by then. One write alone runs in its own transaction, as without
//! grouping. Several run in one: each is a savepoint of it (see
//! [`write_tx`](super::tx::write_tx)), so a write that fails is undone alone and answers its own
//! error, while the others go on. Every write is answered only after the commit that holds it,
//! so nothing is acknowledged before it is on disk.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::tx::{commit, write_tx};
use super::{Ctx, Inner};
use crate::StoreError;

/// A write waiting for its transaction.
trait Job: Send {
    /// Runs the write (its answer is kept until the commit).
    fn run(&mut self, conn: &Connection, ctx: &Ctx);
    /// The transaction that held this write's success was not committed: it answers `lost`.
    fn lose(&mut self, lost: &StoreError);
    /// Answers the writer.
    fn answer(self: Box<Self>);
}

/// A write and where its answer goes.
struct Write<F, T> {
    write: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    done: oneshot::Sender<Result<T, StoreError>>,
}

impl<F, T> Job for Write<F, T>
where
    F: FnOnce(&Connection, &Ctx) -> Result<T, StoreError> + Send,
    T: Send,
{
    fn run(&mut self, conn: &Connection, ctx: &Ctx) {
        if let Some(write) = self.write.take() {
            // A write that panics answers an error and is undone (its transaction guard rolls
            // back on unwind); the writer thread and the other writes go on.
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| write(conn, ctx)))
                .unwrap_or_else(|_| Err(StoreError::Task("a write to the session store panicked".into())));
            self.outcome = Some(outcome);
        }
    }

    fn lose(&mut self, lost: &StoreError) {
        if matches!(self.outcome, Some(Ok(_))) {
            self.outcome = Some(Err(again(lost)));
        }
    }

    fn answer(self: Box<Self>) {
        let outcome = self
            .outcome
            .unwrap_or_else(|| Err(StoreError::Task("a write was answered before it ran".into())));
        // A writer that stopped waiting (its task cancelled) needs no answer.
        let _ = self.done.send(outcome);
    }
}

/// Where a store's writes wait for its writer.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Mutex<Waiting>,
    wake: Condvar,
}

#[derive(Default)]
struct Waiting {
    jobs: Vec<Box<dyn Job>>,
    /// The store is gone: the writer ends.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, job: Box<dyn Job>) {
        self.lock().jobs.push(job);
        self.wake.notify_one();
    }

    /// Waits until a write is queued; `false` once the store is gone.
    fn wait(&self) -> bool {
        let mut waiting = self.lock();
        while waiting.jobs.is_empty() && !waiting.closed {
            waiting = self.wake.wait(waiting).unwrap_or_else(PoisonError::into_inner);
        }
        !waiting.jobs.is_empty()
    }

    fn take(&self) -> Vec<Box<dyn Job>> {
        std::mem::take(&mut self.lock().jobs)
    }

    /// Ends the writer once the writes queued are done.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }
}

/// Starts the thread that runs `inner`'s writes. It holds the store weakly and ends when the
/// store is dropped (see [`Queue::close`]).
pub(super) fn start_writer(inner: &Arc<Inner>) -> Result<(), StoreError> {
    let store = Arc::downgrade(inner);
    let queue = Arc::clone(&inner.writes);
    std::thread::Builder::new()
        .name("agentry-sqlite-writer".into())
        .spawn(move || {
            while queue.wait() {
                let Some(inner) = store.upgrade() else { return };
                let done = run_waiting(&inner);
                // Answered once the store is let go: a writer told its write is done may
                // drop the store, and it then closes at once, on the writer's thread.
                drop(inner);
                for job in done {
                    job.answer();
                }
            }
        })
        .map(drop)
        .map_err(|e| StoreError::Task(format!("could not start the session store's writer: {e}")))
}

/// Runs `write` in a transaction on the store's writer thread, shared with the other writes
/// waiting at the same moment. `write` opens its transaction with [`write_tx`] and ends it with
/// [`commit`], as alone. Needs no runtime: any executor can wait for the answer.
pub(super) async fn write<T, F>(inner: &Inner, write: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce(&Connection, &Ctx) -> Result<T, StoreError> + Send + 'static,
{
    let (done, answer) = oneshot::channel();
    inner.writes.push(Box::new(Write {
        write: Some(write),
        outcome: None,
        done,
    }));
    answer
        .await
        .map_err(|_| StoreError::Task("a write was dropped before its answer".into()))?
}

/// Takes the connection, then runs every write waiting for it (those queued while it was taken
/// by a read included).
fn run_waiting(inner: &Inner) -> Vec<Box<dyn Job>> {
    // A panic while holding the lock leaves no transaction open (the guards roll back on
    // unwind), so a poisoned connection is still usable.
    let conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
    let mut jobs = std::collections::VecDeque::from(inner.writes.take());
    let mut done = Vec::with_capacity(jobs.len());
    if jobs.len() <= 1 {
        run_alone(&conn, &inner.ctx, jobs, &mut done);
        return done;
    }
    let Ok(group) = write_tx(&conn, &inner.ctx) else {
        // No transaction: each write runs alone, and meets the lock (or succeeds) itself.
        run_alone(&conn, &inner.ctx, jobs, &mut done);
        return done;
    };
    while let Some(mut job) = jobs.pop_front() {
        job.run(&group, &inner.ctx);
        done.push(job);
        if group.is_autocommit() {
            // Some errors (a full disk, I/O) make SQLite roll the whole transaction back:
            // what the group wrote is gone, and the writes left run alone.
            drop(group);
            let lost = StoreError::Database(format!(
                "{}: the transaction this write shared was rolled back by another write's error",
                inner.ctx.path.display()
            ));
            for job in &mut done {
                job.lose(&lost);
            }
            run_alone(&conn, &inner.ctx, jobs, &mut done);
            return done;
        }
    }
    if let Err(lost) = commit(group, &inner.ctx) {
        for job in &mut done {
            job.lose(&lost);
        }
    }
    done
}

/// Runs each write in a transaction of its own.
fn run_alone(
    conn: &Connection,
    ctx: &Ctx,
    jobs: impl IntoIterator<Item = Box<dyn Job>>,
    done: &mut Vec<Box<dyn Job>>,
) {
    for mut job in jobs {
        job.run(conn, ctx);
        done.push(job);
    }
}

/// The same error again, for each write of a group that one error ended.
fn again(error: &StoreError) -> StoreError {
    match error {
        StoreError::Locked { path, waited } => StoreError::Locked {
            path: path.clone(),
            waited: *waited,
        },
        StoreError::DiskFull { path } => StoreError::DiskFull { path: path.clone() },
        other => StoreError::Database(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use agentry::message::Msg;
    use futures::task::noop_waker;
    use serde_json::json;

    use super::*;
    use crate::SessionStore;
    use crate::sqlite::SqliteStore;

    type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

    /// Starts `writes` while the connection is taken, so that they all wait for the same
    /// transaction, then gives it back; their answers, in order.
    async fn at_once<T>(store: &SqliteStore, mut writes: Vec<Answer<'_, T>>) -> Vec<Result<T, StoreError>> {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        {
            let _taken = store.inner.conn.lock().unwrap();
            for write in &mut writes {
                // Its first poll queues the write, then waits for the connection.
                assert!(matches!(write.as_mut().poll(&mut cx), Poll::Pending));
            }
        }
        futures::future::join_all(writes).await
    }

    /// A write of a session row named `name`: answers whether it ran inside a transaction it
    /// shared, and fails after writing when `fail`.
    fn session_row(store: &SqliteStore, name: &'static str, fail: bool) -> Answer<'static, bool> {
        let store = store.clone();
        Box::pin(async move {
            store
                .write(move |conn, ctx| {
                    let shared = !conn.is_autocommit();
                    let tx = write_tx(conn, ctx)?;
                    tx.execute(
                        "INSERT INTO sessions (id, name, created_at, updated_at, config) \
                         VALUES (?1, ?1, '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{}')",
                        [name],
                    )
                    .map_err(|e| ctx.err(e))?;
                    if fail {
                        return Err(StoreError::Database(format!("{name} refused")));
                    }
                    commit(tx, ctx)?;
                    Ok(shared)
                })
                .await
        })
    }

    fn stored(store: &SqliteStore, name: &str) -> bool {
        store.with_conn(|conn| {
            conn.prepare("SELECT 1 FROM sessions WHERE id = ?1")
                .and_then(|mut s| s.exists([name]))
                .unwrap()
        })
    }

    #[tokio::test]
    async fn writes_waiting_at_the_same_moment_share_one_transaction() {
        let store = SqliteStore::in_memory().unwrap();
        let names = ["a", "b", "c"];
        let writes = names.iter().map(|n| session_row(&store, n, false)).collect();
        let answers = at_once(&store, writes).await;
        for (name, answer) in names.iter().zip(answers) {
            assert!(answer.unwrap(), "{name} ran in a transaction of its own");
            assert!(stored(&store, name), "{name} was not committed");
        }
        // Alone, a write has its own transaction.
        assert!(!session_row(&store, "d", false).await.unwrap());
        assert!(stored(&store, "d"));
    }

    #[tokio::test]
    async fn the_messages_of_sessions_written_together_are_each_stored() {
        let store = SqliteStore::in_memory().unwrap();
        let mut leases = Vec::new();
        for name in ["one", "two", "three"] {
            let session = store.create_session(name, &json!({})).await.unwrap();
            leases.push((session.id.clone(), store.acquire(&session.id).await.unwrap()));
        }
        let msgs: Vec<Vec<Msg>> = (0..3).map(|i| vec![Msg::user(format!("hello {i}"))]).collect();
        let writes = leases
            .iter()
            .zip(&msgs)
            .map(|((_, lease), msgs)| store.append_messages(lease, msgs))
            .collect();
        for answer in at_once(&store, writes).await {
            assert_eq!(answer.unwrap(), 1);
        }
        for (i, (id, _)) in leases.iter().enumerate() {
            let texts: Vec<String> = store
                .messages(id)
                .await
                .unwrap()
                .iter()
                .map(|m| m.text().unwrap_or_default())
                .collect();
            assert_eq!(texts, [format!("hello {i}")]);
        }
    }

    #[tokio::test]
    async fn a_write_that_fails_in_a_group_is_undone_alone_and_answers_its_error() {
        let store = SqliteStore::in_memory().unwrap();
        let writes = vec![
            session_row(&store, "kept1", false),
            session_row(&store, "failed", true),
            session_row(&store, "kept2", false),
        ];
        let answers = at_once(&store, writes).await;
        assert!(answers[0].as_ref().unwrap());
        let failed = answers[1].as_ref().unwrap_err().to_string();
        assert!(failed.contains("failed refused"), "{failed}");
        assert!(answers[2].as_ref().unwrap());
        assert!(stored(&store, "kept1") && stored(&store, "kept2"));
        assert!(
            !stored(&store, "failed"),
            "a failed write's row was committed with the group"
        );
    }

    #[tokio::test]
    async fn a_write_that_panics_answers_an_error_and_the_writer_goes_on() {
        let store = SqliteStore::in_memory().unwrap();
        let panicking = |store: &SqliteStore| -> Answer<'static, bool> {
            let store = store.clone();
            Box::pin(async move {
                store
                    .write(|conn, ctx| -> Result<bool, StoreError> {
                        let tx = write_tx(conn, ctx)?;
                        tx.execute(
                            "INSERT INTO sessions (id, name, created_at, updated_at, config) \
                             VALUES ('panicked', 'p', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{}')",
                            [],
                        )
                        .map_err(|e| ctx.err(e))?;
                        panic!("a bug in a write");
                    })
                    .await
            })
        };
        let writes = vec![
            session_row(&store, "kept1", false),
            panicking(&store),
            session_row(&store, "kept2", false),
        ];
        let answers = at_once(&store, writes).await;
        assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
        let panicked = answers[1].as_ref().unwrap_err().to_string();
        assert!(panicked.contains("panicked"), "{panicked}");
        assert!(stored(&store, "kept1") && stored(&store, "kept2"));
        assert!(!stored(&store, "panicked"), "the panicking write was undone");
        // Alone too, and the writer still answers the next write.
        assert!(panicking(&store).await.is_err());
        assert!(!session_row(&store, "after", false).await.unwrap());
        assert!(stored(&store, "after") && !stored(&store, "panicked"));
    }

    #[tokio::test]
    async fn a_full_disk_in_a_group_answers_each_write_as_it_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        let session = store.create_session("s", &json!({})).await.unwrap();
        let lease = store.acquire(&session.id).await.unwrap();
        store.with_conn(|conn| {
            let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0)).unwrap();
            conn.pragma_update(None, "max_page_count", pages + 2).unwrap();
        });
        let big = vec![Msg::user("x".repeat(256 * 1024))];
        let writes: Vec<Answer<'_, bool>> = vec![
            session_row(&store, "before", false),
            Box::pin(async { store.append_messages(&lease, &big).await.map(|_| true) }),
            session_row(&store, "after", false),
        ];
        let answers = at_once(&store, writes).await;
        assert!(
            matches!(answers[1], Err(StoreError::DiskFull { .. })),
            "{:?}",
            answers[1]
        );
        assert!(store.messages(&session.id).await.unwrap().is_empty());
        // Whatever the full disk did to the shared transaction, each answer says what is stored.
        for (name, answer) in [("before", &answers[0]), ("after", &answers[2])] {
            assert_eq!(answer.is_ok(), stored(&store, name), "{name}: {answer:?}");
        }
    }
}
