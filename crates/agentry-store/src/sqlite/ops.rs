//! The store's operations as plain functions on a connection, one transaction each.
//!
//! Writes use `BEGIN IMMEDIATE`: the write lock is taken first, so the busy timeout applies to
//! it (a deferred transaction that upgrades to writing can fail with BUSY at once in WAL mode).

use std::collections::HashSet;

use agentry::ReplyId;
use agentry::message::Msg;
use agentry::model::ChatUsage;
use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::Ctx;
use super::calls::{stored_calls, write_call, write_start};
use super::derived;
use super::rows::{EncodedCall, SESSION_COLUMNS, from_json, json, parse_ts, session_info, session_row, ts};
use crate::recovery;
use crate::{Grant, GrantKind, PendingApprovals, Recovered, SessionId, SessionInfo, StoreError, UsageTotals};

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

pub(super) fn write_tx<'c>(conn: &'c mut Connection, ctx: &Ctx) -> Result<Transaction<'c>, StoreError> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| ctx.err(e))
}

/// Marks the session as written now, to the second: a session written again within the same
/// second keeps its time, so a step's writes do not each rewrite the session's page.
pub(super) fn touch(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> Result<(), StoreError> {
    let now = Utc::now();
    let stale = now - chrono::Duration::seconds(1);
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1 AND updated_at < ?3")
        .and_then(|mut s| s.execute(params![id.as_str(), ts(now), ts(stale)]))
        .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) fn commit(tx: Transaction<'_>, ctx: &Ctx) -> Result<(), StoreError> {
    #[cfg(feature = "crash-points")]
    super::crash::point(super::crash::Moment::BeforeCommit);
    tx.commit().map_err(|e| ctx.err(e))?;
    #[cfg(feature = "crash-points")]
    super::crash::point(super::crash::Moment::AfterCommit);
    Ok(())
}

fn exists(conn: &Connection, ctx: &Ctx, id: &SessionId) -> Result<(), StoreError> {
    let found = conn
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
        .and_then(|mut s| s.exists([id.as_str()]))
        .map_err(|e| ctx.err(e))?;
    if found {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound(id.to_string()))
    }
}

/// A read transaction on session `id`, which must exist: the check and the reads that follow
/// see the same snapshot.
pub(super) fn snapshot<'c>(
    conn: &'c mut Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Transaction<'c>, StoreError> {
    let tx = conn.transaction().map_err(|e| ctx.err(e))?;
    exists(&tx, ctx, id)?;
    Ok(tx)
}

/// The rows `sql` selects for session `id` (its one parameter, `?1`): each read by `read`, then
/// decoded by `decode` once the statement is done.
pub(super) fn session_rows<R, T>(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    sql: &str,
    read: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<R>,
    decode: impl FnMut(R) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let rows = conn
        .prepare_cached(sql)
        .and_then(|mut s| s.query_map([id.as_str()], read)?.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ctx.err(e))?;
    rows.into_iter().map(decode).collect()
}

// ---- sessions ----

pub(super) fn create_session(
    conn: &mut Connection,
    ctx: &Ctx,
    name: &str,
    config: &str,
) -> Result<SessionInfo, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let taken = tx
        .prepare_cached("SELECT 1 FROM sessions WHERE name = ?1")
        .and_then(|mut s| s.exists([name]))
        .map_err(|e| ctx.err(e))?;
    if taken {
        return Err(StoreError::NameTaken(name.to_owned()));
    }
    let id = SessionId::random();
    let now = ts(Utc::now());
    tx.execute(
        "INSERT INTO sessions (id, name, created_at, updated_at, config) VALUES (?1, ?2, ?3, ?3, ?4)",
        params![id.as_str(), name, now, config],
    )
    .map_err(|e| ctx.err(e))?;
    let info = session_where(&tx, ctx, "s.id = ?1", id.as_str())?;
    commit(tx, ctx)?;
    info.ok_or_else(|| StoreError::SessionNotFound(id.to_string()))
}

/// The session matching `filter` (one `?1` parameter).
pub(super) fn session_where(
    conn: &Connection,
    ctx: &Ctx,
    filter: &str,
    value: &str,
) -> Result<Option<SessionInfo>, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE {filter}"
        ))
        .and_then(|mut s| s.query_row([value], session_row).optional())
        .map_err(|e| ctx.err(e))?;
    row.map(session_info).transpose()
}

pub(super) fn sessions(conn: &mut Connection, ctx: &Ctx) -> Result<Vec<SessionInfo>, StoreError> {
    let rows = conn
        .prepare_cached(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.updated_at DESC, s.name"
        ))
        .and_then(|mut s| s.query_map([], session_row)?.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ctx.err(e))?;
    rows.into_iter().map(session_info).collect()
}

pub(super) fn delete_session(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<bool, StoreError> {
    let tx = write_tx(conn, ctx)?;
    // Everything of the session goes with it (foreign keys cascade), grants included (A14).
    let deleted = tx
        .execute("DELETE FROM sessions WHERE id = ?1", [id.as_str()])
        .map_err(|e| ctx.err(e))?;
    commit(tx, ctx)?;
    Ok(deleted > 0)
}

pub(super) fn set_config(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    config: &str,
) -> Result<(), StoreError> {
    let tx = write_tx(conn, ctx)?;
    let changed = tx
        .execute(
            "UPDATE sessions SET config = ?2, updated_at = ?3 WHERE id = ?1",
            params![id.as_str(), config, ts(Utc::now())],
        )
        .map_err(|e| ctx.err(e))?;
    if changed == 0 {
        return Err(StoreError::SessionNotFound(id.to_string()));
    }
    commit(tx, ctx)
}

// ---- messages ----

/// The messages with their positions.
fn stored_messages(conn: &Connection, ctx: &Ctx, id: &SessionId) -> Result<Vec<(i64, Msg)>, StoreError> {
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

fn next_seq(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> Result<i64, StoreError> {
    tx.prepare_cached("SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |row| row.get(0)))
        .map_err(|e| ctx.err(e))
}

/// Inserts `msgs` at consecutive positions from `seq`; they must be new and the positions free.
fn insert_at(
    tx: &Transaction<'_>,
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
    conn: &mut Connection,
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
    conn: &mut Connection,
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

// ---- grants ----

pub(super) fn put_grant(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    grant: &Grant,
) -> Result<(), StoreError> {
    let kind = json("grant", &grant.kind)?;
    let tx = write_tx(conn, ctx)?;
    tx.execute(
        "INSERT INTO session_grants (session_id, key, tool_name, kind, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_id, key) DO UPDATE SET
             tool_name = excluded.tool_name, kind = excluded.kind, created_at = excluded.created_at",
        params![id.as_str(), grant.key, grant.tool_name, kind, ts(grant.created_at)],
    )
    .map_err(|e| ctx.err(e))?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)
}

pub(super) fn revoke_grant(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    key: &str,
) -> Result<bool, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let deleted = tx
        .execute(
            "DELETE FROM session_grants WHERE session_id = ?1 AND key = ?2",
            params![id.as_str(), key],
        )
        .map_err(|e| ctx.err(e))?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    Ok(deleted > 0)
}

pub(super) fn grants(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<Vec<Grant>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    session_rows(
        &tx,
        ctx,
        id,
        "SELECT key, tool_name, kind, created_at FROM session_grants WHERE session_id = ?1
         ORDER BY created_at, rowid",
        |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
            ))
        },
        |(key, tool_name, kind, at)| {
            Ok(Grant {
                key,
                tool_name,
                kind: from_json::<GrantKind>("grant", &kind)?,
                created_at: parse_ts("grant time", &at)?,
            })
        },
    )
}

// ---- usage ----

pub(super) fn record_usage(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    reply_id: Option<&ReplyId>,
    usage: &ChatUsage,
    cost: Option<f64>,
) -> Result<(), StoreError> {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tx = write_tx(conn, ctx)?;
    tx.prepare_cached(
        "INSERT INTO usage (session_id, reply_id, input_tokens, output_tokens, time_ms, recorded_at,
                            cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut s| {
        s.execute(params![
            id.as_str(),
            reply_id.map(ReplyId::as_str),
            tokens(usage.input_tokens),
            tokens(usage.output_tokens),
            usage.time.as_secs_f64() * 1000.0,
            ts(Utc::now()),
            tokens(usage.cache_read_tokens),
            tokens(usage.cache_write_tokens),
            tokens(usage.reasoning_tokens),
            cost.filter(|c| c.is_finite()),
        ])
    })
    .map_err(|e| ctx.err(e))?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)
}

pub(super) fn usage(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<UsageTotals, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    type Sums = (i64, i64, i64, f64, i64, i64, i64, Option<f64>);
    let (calls, input, output, time_ms, cache_read, cache_write, reasoning, cost): Sums = tx
        .query_row(
            "SELECT count(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
                    COALESCE(SUM(time_ms), 0.0), COALESCE(SUM(cache_read_tokens), 0),
                    COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0),
                    SUM(cost_usd)
             FROM usage WHERE session_id = ?1",
            [id.as_str()],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            },
        )
        .map_err(|e| ctx.err(e))?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(UsageTotals {
        calls: count(calls),
        input_tokens: count(input),
        output_tokens: count(output),
        time_ms,
        cache_read_tokens: count(cache_read),
        cache_write_tokens: count(cache_write),
        reasoning_tokens: count(reasoning),
        cost_usd: cost,
    })
}

// ---- recovery ----

/// Recovery on load (Y4). The caller holds the lease, so nobody else writes this session: the
/// plan is made from a read, and only a session that needs repair takes the write lock.
pub(super) fn recover(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    pending: PendingApprovals,
) -> Result<Recovered, StoreError> {
    let (stored, calls) = {
        let tx = snapshot(conn, ctx, id)?;
        (stored_messages(&tx, ctx, id)?, stored_calls(&tx, ctx, id)?)
    };
    let (seqs, mut msgs): (Vec<i64>, Vec<Msg>) = stored.into_iter().unzip();
    let plan = recovery::plan(&msgs, &calls, Utc::now(), pending);
    if plan.tail.is_none() && plan.calls.is_empty() {
        return Ok(Recovered {
            report: plan.report,
            messages: msgs,
        });
    }
    let tx = write_tx(conn, ctx)?;
    if let Some((at, tail)) = plan.tail {
        let from = match seqs.get(at) {
            Some(&seq) => seq,
            None => next_seq(&tx, ctx, id)?,
        };
        tx.execute(
            "DELETE FROM messages WHERE session_id = ?1 AND seq >= ?2",
            params![id.as_str(), from],
        )
        .map_err(|e| ctx.err(e))?;
        let encoded = tail.iter().map(Encoded::new).collect::<Result<Vec<_>, _>>()?;
        insert_at(&tx, ctx, id, from, &encoded)?;
        msgs.truncate(at);
        msgs.extend(tail);
    }
    for call in &plan.calls {
        write_call(&tx, ctx, id, &EncodedCall::new(call)?)?;
    }
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    if !plan.report.is_empty() {
        tracing::info!(
            session = %id,
            interrupted = plan.report.interrupted.len(),
            settled = plan.report.settled.len(),
            orphans = plan.report.orphan_results_removed,
            "recovered a session left unfinished"
        );
    }
    Ok(Recovered {
        report: plan.report,
        messages: msgs,
    })
}
