//! Controls sent to the node that runs a session's reply (see
//! [`SessionStore::send_control`](crate::SessionStore::send_control)), and leases as others
//! see them.
//!
//! Each kind of control request is batched (see [`batches`](super::batches)): the controls
//! queued, taken, answered and read back at one moment each share one statement.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use deadpool_postgres::Object as Client;

use super::batches::{Batch, BatchAnswers, BatchEnd, batch};
use super::notices::{ANSWERS, CONTROLS};
use super::{Ctx, Inner, sql};
use crate::{SessionId, StoreError};

/// The batches of control requests of a store.
pub(super) struct ControlBatches {
    /// Queues a control (session, body): its id, `None` when there is no such session.
    send: Batch<(SessionId, String), Option<u64>>,
    /// Takes a session's queued controls for the holder of a lease (session, token).
    take: Batch<(SessionId, i64), Vec<(u64, String)>>,
    /// Stores a control's answer (control, answer).
    answer: Batch<(u64, String), ()>,
    /// Reads a control's answer.
    answered: Batch<u64, Option<String>>,
}

/// The ends of [`ControlBatches`], to start once the store is made.
pub(super) struct ControlBatchEnds {
    send: BatchEnd<(SessionId, String), Option<u64>>,
    take: BatchEnd<(SessionId, i64), Vec<(u64, String)>>,
    answer: BatchEnd<(u64, String), ()>,
    answered: BatchEnd<u64, Option<String>>,
}

/// New batches of control requests, and their ends.
pub(super) fn control_batches() -> (ControlBatches, ControlBatchEnds) {
    let (send, send_end) = batch(queue_controls);
    let (take, take_end) = batch(take_queued);
    let (answer, answer_end) = batch(store_answers);
    let (answered, answered_end) = batch(read_answers);
    (
        ControlBatches {
            send,
            take,
            answer,
            answered,
        },
        ControlBatchEnds {
            send: send_end,
            take: take_end,
            answer: answer_end,
            answered: answered_end,
        },
    )
}

impl ControlBatchEnds {
    /// Starts answering the requests, until the store is gone.
    pub(super) fn start(self, inner: &Arc<Inner>) {
        self.send.start(inner);
        self.take.start(inner);
        self.answer.start(inner);
        self.answered.start(inner);
    }
}

pub(super) async fn send_control(inner: &Arc<Inner>, id: &SessionId, body: &str) -> Result<u64, StoreError> {
    inner
        .controls
        .send
        .call(inner, (id.clone(), body.to_owned()))
        .await?
        .ok_or_else(|| StoreError::SessionNotFound(id.to_string()))
}

/// Takes the session's queued controls for the holder of lease `token`, oldest first.
pub(super) async fn take_controls(
    inner: &Arc<Inner>,
    id: &SessionId,
    token: i64,
) -> Result<Vec<(u64, String)>, StoreError> {
    inner.controls.take.call(inner, (id.clone(), token)).await
}

pub(super) async fn answer_control(inner: &Arc<Inner>, control: u64, answer: &str) -> Result<(), StoreError> {
    inner
        .controls
        .answer
        .call(inner, (control, answer.to_owned()))
        .await
}

pub(super) async fn control_answer(inner: &Arc<Inner>, control: u64) -> Result<Option<String>, StoreError> {
    inner.controls.answered.call(inner, control).await
}

fn db_id(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

fn control_id(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

fn queue_controls(inner: Arc<Inner>, requests: Vec<(SessionId, String)>) -> BatchAnswers<Option<u64>> {
    Box::pin(async move {
        let (sessions, bodies): (Vec<&str>, Vec<&str>) = requests
            .iter()
            .map(|(id, body)| (id.as_str(), body.as_str()))
            .unzip();
        let client = inner.checkout(&inner.live).await?;
        // Queued in the order given (ids follow it); one notice per control.
        let rows = sql::query(
            &client,
            &inner.ctx,
            "WITH queued AS (
                 INSERT INTO session_controls (session_id, body)
                 SELECT c.session, c.body
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS c(session, body, n)
                 JOIN sessions s ON s.id = c.session
                 ORDER BY c.n
                 RETURNING id, session_id, body
             )
             SELECT id, session_id, body, pg_notify($3, session_id)::text FROM queued",
            &[&sessions, &bodies, &CONTROLS],
        )
        .await?;
        // Two equal controls to one session are interchangeable: each request takes the
        // lowest id left of its session and body.
        let mut ids: HashMap<(String, String), VecDeque<u64>> = HashMap::new();
        let mut queued: Vec<(i64, String, String)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        queued.sort_by_key(|(id, _, _)| *id);
        for (id, session, body) in queued {
            ids.entry((session, body)).or_default().push_back(control_id(id));
        }
        Ok(requests
            .into_iter()
            .map(|(id, body)| ids.get_mut(&(id.to_string(), body)).and_then(VecDeque::pop_front))
            .collect())
    })
}

fn take_queued(inner: Arc<Inner>, requests: Vec<(SessionId, i64)>) -> BatchAnswers<Vec<(u64, String)>> {
    Box::pin(async move {
        let (sessions, tokens): (Vec<&str>, Vec<i64>) =
            requests.iter().map(|(id, token)| (id.as_str(), *token)).unzip();
        let client = inner.checkout(&inner.live).await?;
        let rows = sql::query(
            &client,
            &inner.ctx,
            "UPDATE session_controls c SET taken_at = now()
             FROM unnest($1::text[], $2::bigint[]) AS h(session, token)
             JOIN session_leases l ON l.session_id = h.session AND l.token = h.token
             WHERE c.session_id = h.session AND c.taken_at IS NULL
             RETURNING c.session_id, c.id, c.body",
            &[&sessions, &tokens],
        )
        .await?;
        let mut taken: HashMap<String, Vec<(u64, String)>> = HashMap::new();
        for row in &rows {
            taken
                .entry(row.get(0))
                .or_default()
                .push((control_id(row.get(1)), row.get(2)));
        }
        // A session asked twice at once: the first request takes all, as if one ran first.
        Ok(requests
            .iter()
            .map(|(id, _)| {
                let mut controls = taken.remove(id.as_str()).unwrap_or_default();
                controls.sort_by_key(|(id, _)| *id);
                controls
            })
            .collect())
    })
}

fn store_answers(inner: Arc<Inner>, requests: Vec<(u64, String)>) -> BatchAnswers<()> {
    Box::pin(async move {
        let (controls, answers): (Vec<i64>, Vec<&str>) = requests
            .iter()
            .map(|(control, answer)| (db_id(*control), answer.as_str()))
            .unzip();
        let client = inner.checkout(&inner.live).await?;
        sql::execute(
            &client,
            &inner.ctx,
            "WITH answered AS (
                 UPDATE session_controls c SET answer = a.answer
                 FROM unnest($1::bigint[], $2::text[]) AS a(id, answer)
                 WHERE c.id = a.id
                 RETURNING c.id
             )
             SELECT pg_notify($3, id::text) FROM answered",
            &[&controls, &answers, &ANSWERS],
        )
        .await?;
        Ok(vec![(); requests.len()])
    })
}

fn read_answers(inner: Arc<Inner>, requests: Vec<u64>) -> BatchAnswers<Option<String>> {
    Box::pin(async move {
        let controls: Vec<i64> = requests.iter().map(|control| db_id(*control)).collect();
        let client = inner.checkout(&inner.live).await?;
        let rows = sql::query(
            &client,
            &inner.ctx,
            "SELECT id, answer FROM session_controls WHERE id = ANY($1) AND answer IS NOT NULL",
            &[&controls],
        )
        .await?;
        let answers: HashMap<i64, String> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        Ok(controls.iter().map(|id| answers.get(id).cloned()).collect())
    })
}

pub(super) async fn lease_holder(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<String>, StoreError> {
    let row = sql::query_opt(
        client,
        ctx,
        "SELECT holder FROM session_leases WHERE session_id = $1",
        &[&id.as_str()],
    )
    .await?;
    Ok(row.map(|row| row.get(0)))
}
