//! The transaction rules of every operation: one transaction each; writes use `BEGIN
//! IMMEDIATE`, so the write lock is taken first and the busy timeout applies to it (a deferred
//! transaction that upgrades to writing can fail with BUSY at once in WAL mode); reads see one
//! snapshot. A write that runs inside another's transaction (the writes of a group commit, see
//! [`group_commit`](super::group_commit)) is a savepoint of it, undone alone if it fails.

use chrono::Utc;
use rusqlite::{Connection, Transaction, params};

use super::Ctx;
use super::rows::ts;
use crate::{SessionId, StoreError};

/// A write transaction, or a write nested in one: rolled back (to its savepoint) unless
/// [`commit`]ted. Its statements are prepared once per connection, like every other.
pub(super) struct WriteTx<'c> {
    conn: &'c Connection,
    nested: bool,
    done: bool,
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Errors are left: a failed rollback leaves SQLite's own (it rolls back what it must).
        let undo = if self.nested {
            "ROLLBACK TO write; RELEASE write"
        } else {
            "ROLLBACK"
        };
        let _ = self.conn.execute_batch(undo);
    }
}

fn run_cached(conn: &Connection, ctx: &Ctx, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(drop)
        .map_err(|e| ctx.err(e))
}

/// Begins a write: a transaction that takes the write lock at once, or a savepoint when `conn`
/// is already in one.
pub(super) fn write_tx<'c>(conn: &'c Connection, ctx: &Ctx) -> Result<WriteTx<'c>, StoreError> {
    let nested = !conn.is_autocommit();
    run_cached(
        conn,
        ctx,
        if nested {
            "SAVEPOINT write"
        } else {
            "BEGIN IMMEDIATE"
        },
    )?;
    Ok(WriteTx {
        conn,
        nested,
        done: false,
    })
}

/// Marks the session as written now, to the second: a session written again within the same
/// second keeps its time, so a step's writes do not each rewrite the session's page.
pub(super) fn touch(tx: &Connection, ctx: &Ctx, id: &SessionId) -> Result<(), StoreError> {
    let now = Utc::now();
    let stale = now - chrono::Duration::seconds(1);
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1 AND updated_at < ?3")
        .and_then(|mut s| s.execute(params![id.as_str(), ts(now), ts(stale)]))
        .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) fn commit(mut tx: WriteTx<'_>, ctx: &Ctx) -> Result<(), StoreError> {
    if tx.nested {
        run_cached(tx.conn, ctx, "RELEASE write")?;
    } else {
        #[cfg(feature = "crash-points")]
        super::crash::point(super::crash::Moment::BeforeCommit);
        run_cached(tx.conn, ctx, "COMMIT")?;
        #[cfg(feature = "crash-points")]
        super::crash::point(super::crash::Moment::AfterCommit);
    }
    tx.done = true;
    Ok(())
}

pub(super) fn exists(conn: &Connection, ctx: &Ctx, id: &SessionId) -> Result<(), StoreError> {
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
