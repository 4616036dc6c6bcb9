//! A session's messages: stored in order, inserted before another (parallel results in call
//! order), deleted; each write carries the call records its messages imply (`derived`).

use std::collections::HashSet;

use agentry::message::Msg;
use rusqlite::{Connection, OptionalExtension, params};

use super::Ctx;
use super::calls::write_start;
use super::derived;
use super::rows::{EncodedCall, from_json, json, ts};
use super::tx::{commit, session_rows, snapshot, touch, write_tx};
use crate::{SessionId, StoreError};

/// A message ready to store.
#[derive(Debug)]
pub(super) struct Encoded {
    id: String,
    role: String,
    created_at: String,
    body: String,
    calls: Vec<derived::CallChange>,
}

impl Encoded {
    pub(super) fn new(msg: &Msg) -> Result<Self, StoreError> {
        Ok(Encoded {
            id: msg.id.clone(),
            role: match serde_json::to_value(msg.role) {
                Ok(serde_json::Value::String(role)) => role,
                _ => String::new(),
            },
            created_at: ts(msg.timestamp),
            body: json("message", msg)?,
            calls: derived::call_changes(msg)?,
        })
    }
}

/// The messages with their positions.
pub(super) fn stored_messages(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<(i64, Msg)>, StoreError> {
    session_rows(
        conn,
        ctx,
        id,
        "SELECT seq, body FROM messages WHERE session_id = ?1 ORDER BY seq",
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
        |(seq, body)| Ok((seq, from_json::<Msg>("message", &body)?)),
    )
}

pub(super) fn messages(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<Vec<Msg>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    let msgs = stored_messages(&tx, ctx, id)?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    Ok(msgs)
}

pub(super) fn next_seq(tx: &Connection, ctx: &Ctx, id: &SessionId) -> Result<i64, StoreError> {
    tx.prepare_cached("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |row| row.get(0)))
        .map_err(|e| ctx.err(e))
}

/// Inserts `msgs` at consecutive positions from `seq`; they must be new and the positions free.
pub(super) fn insert_at(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    seq: i64,
    msgs: &[Encoded],
) -> Result<(), StoreError> {
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO messages (session_id, seq, id, role, created_at, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(|e| ctx.err(e))?;
    for (n, msg) in (0_i64..).zip(msgs) {
        insert
            .execute(params![
                id.as_str(),
                seq + n,
                msg.id,
                msg.role,
                msg.created_at,
                msg.body
            ])
            .map_err(|e| ctx.err(e))?;
        derived::apply(tx, ctx, id, &msg.calls)?;
    }
    Ok(())
}

/// Appends `msgs` (or inserts them before the message `before`), skipping stored ids, after
/// writing the `started` calls' starts: a result in `msgs` then closes its call with the start
/// already in place.
pub(super) fn insert_messages(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    before: Option<&str>,
    started: &[EncodedCall],
    msgs: Vec<Encoded>,
) -> Result<usize, StoreError> {
    let tx = write_tx(conn, ctx)?;
    for call in started {
        write_start(&tx, ctx, id, call)?;
    }
    let mut seen = HashSet::new();
    let mut new = Vec::with_capacity(msgs.len());
    {
        let mut stored = tx
            .prepare_cached("SELECT 1 FROM messages WHERE session_id = ?1 AND id = ?2")
            .map_err(|e| ctx.err(e))?;
        for msg in msgs {
            let known = stored
                .exists(params![id.as_str(), msg.id])
                .map_err(|e| ctx.err(e))?;
            if !known && seen.insert(msg.id.clone()) {
                new.push(msg);
            }
        }
    }
    if new.is_empty() {
        if !started.is_empty() {
            commit(tx, ctx)?;
        }
        return Ok(0);
    }
    let at: Option<i64> = match before {
        Some(before) => tx
            .prepare_cached("SELECT seq FROM messages WHERE session_id = ?1 AND id = ?2")
            .and_then(|mut s| {
                s.query_row(params![id.as_str(), before], |row| row.get(0))
                    .optional()
            })
            .map_err(|e| ctx.err(e))?,
        None => None,
    };
    let seq = match at {
        Some(at) => {
            // Make room: move the tail out of the way (negative positions, so the primary key
            // never collides mid-update), then to its new place.
            let n = i64::try_from(new.len()).unwrap_or(i64::MAX);
            tx.execute(
                "UPDATE messages SET seq = -(seq + ?3) - 1 WHERE session_id = ?1 AND seq >= ?2",
                params![id.as_str(), at, n],
            )
            .and_then(|_| {
                tx.execute(
                    "UPDATE messages SET seq = -seq - 1 WHERE session_id = ?1 AND seq < 0",
                    [id.as_str()],
                )
            })
            .map_err(|e| ctx.err(e))?;
            at
        }
        None => next_seq(&tx, ctx, id)?,
    };
    insert_at(&tx, ctx, id, seq, &new)?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    Ok(new.len())
}

/// Deletes the messages with these ids, or all of them.
pub(super) fn delete_messages(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    ids: Option<&[String]>,
) -> Result<usize, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let deleted = match ids {
        None => tx
            .execute("DELETE FROM messages WHERE session_id = ?1", [id.as_str()])
            .map_err(|e| ctx.err(e))?,
        Some(ids) => {
            let mut delete = tx
                .prepare_cached("DELETE FROM messages WHERE session_id = ?1 AND id = ?2")
                .map_err(|e| ctx.err(e))?;
            let mut deleted = 0;
            for msg in ids {
                deleted += delete
                    .execute(params![id.as_str(), msg])
                    .map_err(|e| ctx.err(e))?;
            }
            deleted
        }
    };
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    Ok(deleted)
}
