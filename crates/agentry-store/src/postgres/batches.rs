//! Requests of one kind that wait at the same moment, answered by one statement.
//!
//! Why: a cancel or a decision sent to a node crosses the database four times (queued by the
//! node that got it, taken and answered by the node running the reply, the answer read back).
//! When a thousand clients cancel at once, a statement each made them queue for the store's
//! few connections, one round trip after the other, for seconds. Here the requests waiting
//! when a statement starts go in it together, and each gets its own answer.
//!
//! A failed statement fails none of them for the others: each request is then run alone, and
//! answers as it would have without batching.

use std::future::Future;
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::Inner;
use crate::StoreError;

/// Statements of one kind in flight at once: while one runs, the next gathers.
const IN_FLIGHT: usize = 2;
/// Requests in one statement, at most.
const MOST: usize = 1024;

/// Each request's answer, in the order of the requests, under way.
pub(super) type BatchAnswers<Resp> = BoxFuture<'static, Result<Vec<Resp>, StoreError>>;

/// The statement of a kind of request: given the requests, each one's answer.
pub(super) type RunBatch<Req, Resp> = fn(Arc<Inner>, Vec<Req>) -> BatchAnswers<Resp>;

type Waiting<Req, Resp> = (Req, oneshot::Sender<Result<Resp, StoreError>>);

/// Where requests of one kind wait for their statement.
pub(super) struct Batch<Req, Resp> {
    queue: mpsc::UnboundedSender<Waiting<Req, Resp>>,
    run: RunBatch<Req, Resp>,
}

/// The receiving end of a [`Batch`], for [`BatchEnd::start`].
pub(super) struct BatchEnd<Req, Resp> {
    waiting: mpsc::UnboundedReceiver<Waiting<Req, Resp>>,
    run: RunBatch<Req, Resp>,
}

/// A new batch of requests answered by `run`, and its end.
pub(super) fn batch<Req, Resp>(run: RunBatch<Req, Resp>) -> (Batch<Req, Resp>, BatchEnd<Req, Resp>) {
    let (queue, waiting) = mpsc::unbounded_channel();
    (Batch { queue, run }, BatchEnd { waiting, run })
}

impl<Req, Resp> Batch<Req, Resp>
where
    Req: Clone + Send + 'static,
    Resp: Send + 'static,
{
    /// Runs `request` with the others waiting at the moment; its answer.
    pub(super) async fn call(&self, inner: &Arc<Inner>, request: Req) -> Result<Resp, StoreError> {
        let (done, answer) = oneshot::channel();
        match self.queue.send((request, done)) {
            Ok(()) => answer.await.map_err(|_| {
                StoreError::Database(format!("{}: a request was dropped unanswered", inner.ctx.target))
            })?,
            // The task running the statements is gone (its runtime ended): this one goes alone.
            Err(mpsc::error::SendError((request, _))) => alone(self.run, Arc::clone(inner), request).await,
        }
    }
}

impl<Req, Resp> BatchEnd<Req, Resp>
where
    Req: Clone + Send + 'static,
    Resp: Send + 'static,
{
    /// Starts answering the requests (within a Tokio runtime) until the store is gone.
    pub(super) fn start(self, inner: &Arc<Inner>) {
        let run = self.run;
        tokio::spawn(in_groups(
            Arc::downgrade(inner),
            self.waiting,
            MOST,
            IN_FLIGHT,
            move |inner, group| answer(run, inner, group),
        ));
    }
}

/// Hands what waits on `waiting` to `handle` in groups: each group takes what waits when the
/// previous one started (at most `most`), and `in_flight` groups run at once. Ends with the
/// queue or the store. (Group commit gathers its writes the same way.)
pub(super) async fn in_groups<J, F, Fut>(
    inner: Weak<Inner>,
    mut waiting: mpsc::UnboundedReceiver<J>,
    most: usize,
    in_flight: usize,
    handle: F,
) where
    J: Send + 'static,
    F: Fn(Arc<Inner>, Vec<J>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let in_flight = Arc::new(Semaphore::new(in_flight));
    loop {
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        let mut group = vec![first];
        while group.len() < most {
            match waiting.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let handled = handle(inner, group);
        tokio::spawn(async move {
            handled.await;
            drop(permit);
        });
    }
}

/// Answers `group` with one statement, or each request alone when that fails.
async fn answer<Req, Resp>(run: RunBatch<Req, Resp>, inner: Arc<Inner>, group: Vec<Waiting<Req, Resp>>)
where
    Req: Clone + Send + 'static,
    Resp: Send + 'static,
{
    let requests: Vec<Req> = group.iter().map(|(request, _)| request.clone()).collect();
    let count = requests.len();
    match run(Arc::clone(&inner), requests).await {
        Ok(answers) if answers.len() == count => {
            for ((_, done), answer) in group.into_iter().zip(answers) {
                let _ = done.send(Ok(answer));
            }
        }
        outcome => {
            if let Err(e) = outcome {
                tracing::debug!(error = %e, requests = count, "a batch of requests failed; each runs alone");
            }
            for (request, done) in group {
                let _ = done.send(alone(run, Arc::clone(&inner), request).await);
            }
        }
    }
}

async fn alone<Req, Resp>(
    run: RunBatch<Req, Resp>,
    inner: Arc<Inner>,
    request: Req,
) -> Result<Resp, StoreError> {
    let mut answers = run(inner, vec![request]).await?;
    answers
        .pop()
        .ok_or_else(|| StoreError::Database("a request was answered with nothing".into()))
}
