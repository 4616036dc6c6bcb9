//! A session's approval grants (spec A12-A14).

use rusqlite::{Connection, params};

use super::Ctx;
use super::rows::{from_json, json, parse_ts, ts};
use super::tx::{commit, session_rows, snapshot, touch, write_tx};
use crate::{Grant, GrantKind, SessionId, StoreError};

pub(super) fn put_grant(
    conn: &Connection,
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
    conn: &Connection,
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
