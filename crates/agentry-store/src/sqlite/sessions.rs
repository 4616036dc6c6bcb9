//! Sessions: created, found by id or name, listed, deleted, and their configuration.

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};

use super::Ctx;
use super::rows::{SESSION_COLUMNS, session_info, session_row, ts};
use super::tx::{commit, write_tx};
use crate::{SessionId, SessionInfo, StoreError};

pub(super) fn create_session(
    conn: &mut Connection,
    ctx: &Ctx,
    name: &str,
    config: &str,
    owner: Option<&str>,
) -> Result<SessionInfo, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let taken = tx
        .prepare_cached("SELECT 1 FROM sessions WHERE name = ?1 AND owner IS ?2")
        .and_then(|mut s| s.exists(params![name, owner]))
        .map_err(|e| ctx.err(e))?;
    if taken {
        return Err(StoreError::NameTaken(name.to_owned()));
    }
    let id = SessionId::random();
    let now = ts(Utc::now());
    tx.execute(
        "INSERT INTO sessions (id, name, created_at, updated_at, config, owner)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5)",
        params![id.as_str(), name, now, config, owner],
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

/// Whether session `id` exists, and its owner.
pub(super) fn session_owner(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<Option<String>>, StoreError> {
    conn.prepare_cached("SELECT owner FROM sessions WHERE id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |row| row.get(0)).optional())
        .map_err(|e| ctx.err(e))
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
    conn: &Connection,
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
