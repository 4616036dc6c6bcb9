//! A session's event log: events as a server handed them out, for clients that resume after a
//! restart.

use rusqlite::{Connection, params};

use super::Ctx;
use super::tx::{commit, snapshot, write_tx};
use crate::{SessionId, StoreError, StoredEvent};

/// Appends each session's events, all in one transaction.
pub(super) fn append_events(
    conn: &Connection,
    ctx: &Ctx,
    batches: &[(SessionId, Vec<StoredEvent>)],
) -> Result<(), StoreError> {
    let now = super::rows::ts(chrono::Utc::now());
    let tx = write_tx(conn, ctx)?;
    {
        let mut exists = tx
            .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
            .map_err(|e| ctx.err(e))?;
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO session_events (session_id, event_id, body, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session_id, event_id) DO NOTHING",
            )
            .map_err(|e| ctx.err(e))?;
        for (id, events) in batches {
            // A session deleted since its events were handed out: they go with it, and the
            // other sessions' events are still written.
            if !exists.exists([id.as_str()]).map_err(|e| ctx.err(e))? {
                continue;
            }
            for event in events {
                let event_id = i64::try_from(event.id).map_err(|_| StoreError::Encode {
                    what: "event id",
                    detail: format!("{} is too large", event.id),
                })?;
                let at = event.recorded_at.map(super::rows::ts);
                insert
                    .execute(params![
                        id.as_str(),
                        event_id,
                        event.body,
                        at.as_deref().unwrap_or(&now)
                    ])
                    .map_err(|e| ctx.err(e))?;
            }
        }
    }
    commit(tx, ctx)
}

/// The stored events after `after`, oldest first, at most `limit`.
pub(super) fn events_after(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let events = {
        let mut select = tx
            .prepare_cached(
                "SELECT event_id, body, created_at FROM session_events WHERE session_id = ?1 AND event_id > ?2
                 ORDER BY event_id LIMIT ?3",
            )
            .map_err(|e| ctx.err(e))?;
        let rows = select
            .query_map(params![id.as_str(), after, limit], |row| {
                Ok(StoredEvent {
                    id: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                    body: row.get(1)?,
                    recorded_at: row
                        .get::<_, Option<String>>(2)?
                        .and_then(|t| super::rows::parse_ts("event time", &t).ok()),
                })
            })
            .map_err(|e| ctx.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| ctx.err(e))?
    };
    Ok(events)
}

/// The id of the last stored event and the highest reserved id (0 and 0 for none).
pub(super) fn event_ids(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<(u64, u64), StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    let (last, reserved): (i64, i64) = tx
        .query_row(
            "SELECT (SELECT coalesce(max(event_id), 0) FROM session_events WHERE session_id = ?1),
                    event_ids_reserved FROM sessions WHERE id = ?1",
            [id.as_str()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(|e| ctx.err(e))?;
    Ok((
        u64::try_from(last).unwrap_or(0),
        u64::try_from(reserved).unwrap_or(0),
    ))
}

/// Records that event ids up to `up_to` may be handed out (never lowers the mark).
pub(super) fn reserve_event_ids(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    up_to: u64,
) -> Result<(), StoreError> {
    let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
    let tx = write_tx(conn, ctx)?;
    tx.execute(
        "UPDATE sessions SET event_ids_reserved = max(event_ids_reserved, ?2) WHERE id = ?1",
        params![id.as_str(), up_to],
    )
    .map_err(|e| ctx.err(e))?;
    commit(tx, ctx)
}

/// Deletes the events logged before `before` (those from before schema 12, by their session's
/// last write); returns how many.
pub(super) fn purge_events(tx: &Connection, ctx: &Ctx, before: &str) -> Result<u64, StoreError> {
    let deleted = tx
        .execute(
            "DELETE FROM session_events WHERE created_at < ?1
                OR (created_at IS NULL AND session_id IN (SELECT id FROM sessions WHERE updated_at < ?1))",
            [before],
        )
        .map_err(|e| ctx.err(e))?;
    Ok(deleted as u64)
}

/// Lowers the reserved mark to `last` (not below the last stored event).
pub(super) fn settle_event_ids(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    last: u64,
) -> Result<(), StoreError> {
    let last = i64::try_from(last).unwrap_or(i64::MAX);
    let tx = write_tx(conn, ctx)?;
    tx.execute(
        "UPDATE sessions SET event_ids_reserved = max(?2,
             (SELECT coalesce(max(event_id), 0) FROM session_events WHERE session_id = ?1))
         WHERE id = ?1",
        params![id.as_str(), last],
    )
    .map_err(|e| ctx.err(e))?;
    commit(tx, ctx)
}
