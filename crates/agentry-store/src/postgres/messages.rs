//! A session's messages: stored in order, inserted before another (parallel results in call
//! order), deleted; each write carries the call records its messages imply
//! ([`crate::message_calls`]), in the same transaction.

use std::collections::HashSet;

use agentry::message::Msg;
use chrono::{DateTime, Utc};
use deadpool_postgres::Object as Client;
use deadpool_postgres::{Object, Transaction};

use super::calls::{forget_approval, write_start};
use super::rows::CallColumns;
use super::sql;
use super::text::to_db;
use super::tx::{commit, found, touch, write_tx};
use super::{Ctx, Inner};
use crate::codec::{from_json, json};
use crate::message_calls::{CallChange, call_changes};
use crate::{SessionId, StoreError};

/// A message ready to store.
#[derive(Debug)]
pub(super) struct Encoded {
    id: String,
    role: String,
    created_at: DateTime<Utc>,
    body: String,
    calls: Vec<CallChange<CallColumns>>,
}

impl Encoded {
    pub(super) fn new(msg: &Msg) -> Result<Self, StoreError> {
        Ok(Encoded {
            id: to_db(&msg.id).into_owned(),
            role: match serde_json::to_value(msg.role) {
                Ok(serde_json::Value::String(role)) => role,
                _ => String::new(),
            },
            created_at: msg.timestamp,
            body: json("message", msg)?,
            calls: call_changes(msg)
                .into_iter()
                .map(|change| change.try_map(|record| CallColumns::new(&record)))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// The messages with their positions, in one statement (`None` when the session is unknown).
pub(super) async fn stored_messages(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<Vec<(i64, Msg)>>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT m.seq, m.body FROM sessions s LEFT JOIN messages m ON m.session_id = s.id
             WHERE s.id = $1 ORDER BY m.seq",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let rows = client
        .query(&statement, &[&id.as_str()])
        .await
        .map_err(|e| ctx.err(e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut msgs = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: Option<i64> = row.get(0);
        let body: Option<String> = row.get(1);
        if let (Some(seq), Some(body)) = (seq, body) {
            msgs.push((seq, from_json::<Msg>("message", &body)?));
        }
    }
    Ok(Some(msgs))
}

pub(super) async fn messages(client: &Client, ctx: &Ctx, id: &SessionId) -> Result<Vec<Msg>, StoreError> {
    let stored = stored_messages(client, ctx, id).await?;
    found(stored.is_some(), id)?;
    Ok(stored.unwrap_or_default().into_iter().map(|(_, m)| m).collect())
}

pub(super) async fn next_seq(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> Result<i64, StoreError> {
    let statement = tx
        .prepare_cached("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = $1")
        .await
        .map_err(|e| ctx.err(e))?;
    let row = tx
        .query_one(&statement, &[&id.as_str()])
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(row.get(0))
}

/// Inserts `msgs` at consecutive positions from `seq`; they must be new and the positions free.
pub(super) async fn insert_at(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    seq: i64,
    msgs: &[&Encoded],
) -> Result<(), StoreError> {
    let insert = tx
        .prepare_cached(
            "INSERT INTO messages (session_id, seq, id, role, created_at, body) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    for (n, msg) in (0_i64..).zip(msgs) {
        tx.execute(
            &insert,
            &[
                &id.as_str(),
                &(seq + n),
                &msg.id,
                &msg.role,
                &msg.created_at,
                &msg.body,
            ],
        )
        .await
        .map_err(|e| ctx.err(e))?;
        apply_calls(tx, ctx, id, &msg.calls).await?;
    }
    Ok(())
}

/// Appends `msgs` (or inserts them before the message `before`), skipping stored ids, after
/// writing the `started` calls' starts: a result in `msgs` then closes its call with the start
/// already in place. Within a write transaction (see [`group_commit`](super::group_commit)).
pub(super) async fn insert_messages(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    before: Option<&str>,
    started: &[CallColumns],
    msgs: &[Encoded],
) -> Result<usize, StoreError> {
    for call in started {
        write_start(tx, ctx, id, call).await?;
    }
    let ids: Vec<&str> = msgs.iter().map(|m| m.id.as_str()).collect();
    let known = tx
        .prepare_cached("SELECT id FROM messages WHERE session_id = $1 AND id = ANY($2)")
        .await
        .map_err(|e| ctx.err(e))?;
    let known: HashSet<String> = tx
        .query(&known, &[&id.as_str(), &ids])
        .await
        .map_err(|e| ctx.err(e))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut seen = HashSet::new();
    let new: Vec<&Encoded> = msgs
        .iter()
        .filter(|m| !known.contains(&m.id) && seen.insert(m.id.as_str()))
        .collect();
    if new.is_empty() {
        return Ok(0);
    }
    let at: Option<i64> = match before {
        Some(before) => sql::query_opt(
            tx,
            ctx,
            "SELECT seq FROM messages WHERE session_id = $1 AND id = $2",
            &[&id.as_str(), &to_db(before)],
        )
        .await?
        .map(|row| row.get(0)),
        None => None,
    };
    let seq = match at {
        Some(at) => {
            // Make room: move the tail out of the way (negative positions, so the primary key
            // never collides mid-update), then to its new place.
            let n = i64::try_from(new.len()).unwrap_or(i64::MAX);
            sql::execute(
                tx,
                ctx,
                "UPDATE messages SET seq = -(seq + $3) - 1 WHERE session_id = $1 AND seq >= $2",
                &[&id.as_str(), &at, &n],
            )
            .await?;
            sql::execute(
                tx,
                ctx,
                "UPDATE messages SET seq = -seq - 1 WHERE session_id = $1 AND seq < 0",
                &[&id.as_str()],
            )
            .await?;
            at
        }
        None => next_seq(tx, ctx, id).await?,
    };
    insert_at(tx, ctx, id, seq, &new).await?;
    Ok(new.len())
}

/// Deletes the messages with these ids, or all of them.
pub(super) async fn delete_messages(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    ids: Option<&[String]>,
) -> Result<usize, StoreError> {
    let ctx = &inner.ctx;
    let tx = write_tx(client, inner, id, token).await?;
    let deleted = match ids {
        None => {
            sql::execute(
                &tx,
                ctx,
                "DELETE FROM messages WHERE session_id = $1",
                &[&id.as_str()],
            )
            .await?
        }
        Some(ids) => {
            sql::execute(
                &tx,
                ctx,
                "DELETE FROM messages WHERE session_id = $1 AND id = ANY($2)",
                &[
                    &id.as_str(),
                    &ids.iter().map(|i| to_db(i).into_owned()).collect::<Vec<_>>(),
                ],
            )
            .await?
        }
    };
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// Applies the call changes of one stored message.
async fn apply_calls(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    changes: &[CallChange<CallColumns>],
) -> Result<(), StoreError> {
    for change in changes {
        match change {
            CallChange::Made(call) => {
                let statement = tx
                    .prepare_cached(
                        "INSERT INTO tool_calls (session_id, call_id, message_id, tool_name, arguments, state, \
                             terminal, idempotent, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, false, false, $7, now())
                         ON CONFLICT (session_id, call_id) DO NOTHING",
                    )
                    .await
                    .map_err(|e| ctx.err(e))?;
                tx.execute(
                    &statement,
                    &[
                        &id.as_str(),
                        &call.call_id,
                        &call.message_id,
                        &call.tool_name,
                        &call.arguments,
                        &call.state,
                        &call.created_at,
                    ],
                )
                .await
                .map_err(|e| ctx.err(e))?;
            }
            CallChange::Closed(call) => {
                let statement = tx
                    .prepare_cached(
                        "INSERT INTO tool_calls (session_id, call_id, tool_name, arguments, state, terminal, outcome, \
                             phase, partial, stop_reason, partial_result, decision_source, idempotent, created_at, \
                             started_at, finished_at, updated_at, explanation)
                         VALUES ($1, $2, $3, 'null', $4, true, $5, $6, $7, $8, $9, $10, false, $11, $12, $13, now(), $14)
                         ON CONFLICT (session_id, call_id) DO UPDATE SET
                             state = excluded.state, terminal = true, outcome = excluded.outcome,
                             phase = excluded.phase, partial = excluded.partial,
                             stop_reason = excluded.stop_reason, partial_result = excluded.partial_result,
                             decision_source = coalesce(excluded.decision_source, tool_calls.decision_source),
                             explanation = coalesce(excluded.explanation, tool_calls.explanation),
                             started_at = CASE WHEN excluded.state = 'declined' OR excluded.phase = 'before_start'
                                 THEN NULL ELSE coalesce(tool_calls.started_at, excluded.started_at) END,
                             finished_at = excluded.finished_at, updated_at = excluded.updated_at
                         WHERE NOT tool_calls.terminal",
                    )
                    .await
                    .map_err(|e| ctx.err(e))?;
                tx.execute(
                    &statement,
                    &[
                        &id.as_str(),
                        &call.call_id,
                        &call.tool_name,
                        &call.state,
                        &call.outcome,
                        &call.phase,
                        &call.partial,
                        &call.stop_reason,
                        &call.partial_result,
                        &call.decision_source,
                        &call.created_at,
                        &call.started_at,
                        &call.finished_at,
                        &call.explanation,
                    ],
                )
                .await
                .map_err(|e| ctx.err(e))?;
                forget_approval(tx, ctx, id, &call.call_id).await?;
            }
        }
    }
    Ok(())
}
