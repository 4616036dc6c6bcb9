//! Group commit: the writes of all the sessions of a store that wait at the same moment share
//! one transaction.
//!
//! Why: one transaction per write costs four round trips besides the write's own statements
//! (begin, the lease check, the session's time, commit), each waking a PostgreSQL backend; with
//! a thousand replies writing at once the servers and the database spent more CPU on those than
//! on the writes. Here the writes waiting when a transaction starts go in it together: one lease
//! check for all (shared row locks, see [`tx`](super::tx)), their statements sent together on
//! one connection (pipelined: each write's statements follow each other, the writes of
//! different sessions run side by side), one update of the sessions' times, one commit.
//!
//! A write whose lease is not held, or any failure in the shared transaction (an error of the
//! database or of a write's own rules, such as a call that is not pending), rolls nothing of it
//! into the others: the transaction is rolled back and each of its writes runs again alone, in
//! a transaction of its own, and answers exactly as it would have without grouping.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::Transaction;
use futures::future::{BoxFuture, join_all};
use tokio::sync::{mpsc, oneshot};

use super::batches::in_groups;
use super::tx::{commit, touch, write_tx};
use super::{Ctx, Inner};
use crate::{SessionId, StoreError};

/// Transactions of grouped writes in flight at once: while one commits, the next gathers.
const IN_FLIGHT: usize = 2;
/// Writes in one transaction, at most.
const MOST: usize = 512;

/// What a write answers, boxed (each kind of write answers its own type).
type Output = Box<dyn Any + Send>;
/// A write's statements under way, answering `T`.
pub(super) type WorkFuture<'t, T> = BoxFuture<'t, Result<T, StoreError>>;

/// A write's statements, run in a transaction that holds its session's lease. It may run
/// twice (grouped, then alone after the group failed): all it needs it borrows.
trait Work: Send + Sync {
    fn run<'t>(&'t self, tx: &'t Transaction<'t>, ctx: &'t Ctx, id: &'t SessionId) -> WorkFuture<'t, Output>;
}

/// A write's data and the function that writes it, answering `T`.
struct WithData<D, F, T> {
    data: D,
    write: F,
    answers: std::marker::PhantomData<fn() -> T>,
}

impl<D, F, T> Work for WithData<D, F, T>
where
    D: Send + Sync,
    T: Any + Send,
    F: for<'t> Fn(&'t Transaction<'t>, &'t Ctx, &'t SessionId, &'t D) -> WorkFuture<'t, T> + Send + Sync,
{
    fn run<'t>(&'t self, tx: &'t Transaction<'t>, ctx: &'t Ctx, id: &'t SessionId) -> WorkFuture<'t, Output> {
        let written = (self.write)(tx, ctx, id, &self.data);
        Box::pin(async move { written.await.map(|value| Box::new(value) as Output) })
    }
}

/// One write waiting for its transaction.
pub(super) struct Job {
    id: SessionId,
    token: i64,
    work: Box<dyn Work>,
    done: oneshot::Sender<Result<Output, StoreError>>,
}

/// Where a store's writes wait for their transaction.
pub(super) type Queue = mpsc::UnboundedSender<Job>;

/// A new queue, and its end for [`start`].
pub(super) fn queue() -> (Queue, Waiting) {
    let (queue, waiting) = mpsc::unbounded_channel();
    (queue, Waiting(waiting))
}

/// The receiving end of a [`Queue`].
pub(super) struct Waiting(mpsc::UnboundedReceiver<Job>);

/// Starts committing the writes of `waiting` (within a Tokio runtime) until the store is gone.
pub(super) fn start(inner: &Arc<Inner>, waiting: Waiting) {
    tokio::spawn(in_groups(
        Arc::downgrade(inner),
        waiting.0,
        MOST,
        IN_FLIGHT,
        |inner, group| async move { run_group(&inner, group).await },
    ));
}

/// Writes session `id` under the lease token `token`: `write` gets `data` and a transaction
/// holding the lease, shared with the other writes waiting at the moment.
pub(super) async fn write<T, D, F>(
    inner: &Inner,
    id: SessionId,
    token: i64,
    data: D,
    write: F,
) -> Result<T, StoreError>
where
    T: Any + Send,
    D: Send + Sync + 'static,
    F: for<'t> Fn(&'t Transaction<'t>, &'t Ctx, &'t SessionId, &'t D) -> WorkFuture<'t, T>
        + Send
        + Sync
        + 'static,
{
    let (done, answer) = oneshot::channel();
    let job = Job {
        id,
        token,
        work: Box::new(WithData {
            data,
            write,
            answers: std::marker::PhantomData,
        }),
        done,
    };
    if let Err(mpsc::error::SendError(job)) = inner.writes.send(job) {
        // The committing task is gone (no runtime): this write goes alone.
        run_alone(inner, job).await;
    }
    let output = answer.await.map_err(|_| {
        StoreError::Database(format!("{}: a write was dropped unanswered", inner.ctx.target))
    })??;
    output
        .downcast::<T>()
        .map(|value| *value)
        .map_err(|_| StoreError::Database("a write answered with another type".into()))
}

/// Runs a group of writes in one transaction, or each alone when that fails.
async fn run_group(inner: &Inner, group: Vec<Job>) {
    if group.len() == 1 {
        for job in group {
            run_alone(inner, job).await;
        }
        return;
    }
    match together(inner, &group).await {
        Ok(mut outputs) => {
            for (job, output) in group.into_iter().zip(outputs.iter_mut()) {
                match output.take() {
                    Some(output) => {
                        let _ = job.done.send(Ok(output));
                    }
                    None => run_alone(inner, job).await,
                }
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, writes = group.len(), "a group of writes failed; each runs alone");
            for job in group {
                run_alone(inner, job).await;
            }
        }
    }
}

/// The group's writes in one transaction: each write's answer, `None` for those whose lease is
/// not held (they run alone, to answer why).
async fn together(inner: &Inner, group: &[Job]) -> Result<Vec<Option<Output>>, StoreError> {
    let ctx = &inner.ctx;
    let mut client = inner.checkout(&inner.pool).await?;
    let tx = client.transaction().await.map_err(|e| ctx.err(e))?;
    let (sessions, tokens): (Vec<&str>, Vec<i64>) =
        group.iter().map(|job| (job.id.as_str(), job.token)).unzip();
    // Locked in the order of their ids, as every lock of many lease rows is.
    let hold = tx
        .prepare_cached(
            "SELECT session_id, token FROM session_leases
             WHERE (session_id, token) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
             ORDER BY session_id FOR SHARE",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let held: HashSet<(String, i64)> = tx
        .query(&hold, &[&sessions, &tokens])
        .await
        .map_err(|e| ctx.err(e))?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    // Each session's writes in their order; the sessions side by side.
    let mut by_session: HashMap<&str, Vec<usize>> = HashMap::new();
    for (n, job) in group.iter().enumerate() {
        if held.contains(&(job.id.to_string(), job.token)) {
            by_session.entry(job.id.as_str()).or_default().push(n);
        }
    }
    let tx_ref = &tx;
    let runs = by_session.values().map(|writes| async move {
        let mut outputs = Vec::with_capacity(writes.len());
        for &n in writes {
            let job = &group[n];
            outputs.push((n, job.work.run(tx_ref, ctx, &job.id).await?));
        }
        Ok::<_, StoreError>(outputs)
    });
    let mut outputs: Vec<Option<Output>> = group.iter().map(|_| None).collect();
    for run in join_all(runs).await {
        for (n, output) in run? {
            outputs[n] = Some(output);
        }
    }
    let written: Vec<&str> = by_session.keys().copied().collect();
    touch_all(&tx, ctx, &written).await?;
    commit(tx, ctx).await?;
    let shared = outputs.iter().filter(|output| output.is_some()).count();
    if shared > 1 {
        inner
            .grouped
            .fetch_add(shared as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(outputs)
}

/// Marks the sessions as written now, to the second, their rows locked in the order of their
/// ids (two groups touching the same sessions never wait for each other in a circle).
async fn touch_all(tx: &Transaction<'_>, ctx: &Ctx, ids: &[&str]) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached(
            "UPDATE sessions s SET updated_at = now() FROM (
                 SELECT id FROM sessions WHERE id = ANY($1) AND updated_at < now() - interval '1 second'
                 ORDER BY id FOR NO KEY UPDATE
             ) AS t
             WHERE s.id = t.id",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(&statement, &[&ids]).await.map_err(|e| ctx.err(e))?;
    Ok(())
}

/// One write in a transaction of its own.
async fn run_alone(inner: &Inner, job: Job) {
    let answer = async {
        let ctx = &inner.ctx;
        let mut client = inner.checkout(&inner.pool).await?;
        let tx = write_tx(&mut client, inner, &job.id, job.token).await?;
        let output = job.work.run(&tx, ctx, &job.id).await?;
        touch(&tx, ctx, &job.id).await?;
        commit(tx, ctx).await?;
        Ok(output)
    }
    .await;
    let _ = job.done.send(answer);
}
