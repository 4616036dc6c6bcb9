//! The transaction rules of every write: one transaction, which first locks the session's lease
//! row, shared, with the writer's fencing token. A taken-over lease (another node's token)
//! refuses the write. A node taking the session over waits for the writes in flight, so no write
//! under the old token lands after the takeover. The lock is shared so that the writes of a
//! session and the node's batched event writes never wait for each other; renewing is left to
//! the holder's renewal task (a row updated with every write made each write wait for the
//! others that held it).

use deadpool_postgres::{Object, Transaction};

use super::sql;
use super::{Ctx, Inner};
use crate::{SessionId, StoreError};

/// Begins a write of session `id` with the lease token `token`.
pub(super) async fn write_tx<'c>(
    client: &'c mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
) -> Result<Transaction<'c>, StoreError> {
    let ctx = &inner.ctx;
    let tx = client.transaction().await.map_err(|e| ctx.err(e))?;
    let hold = tx
        .prepare_cached("SELECT 1 FROM session_leases WHERE session_id = $1 AND token = $2 FOR SHARE")
        .await
        .map_err(|e| ctx.err(e))?;
    let held = tx
        .query_opt(&hold, &[&id.as_str(), &token])
        .await
        .map_err(|e| ctx.err(e))?;
    if held.is_none() {
        // Rolled back on drop.
        return Err(lost_or_gone(&tx, ctx, id).await);
    }
    Ok(tx)
}

/// Why a lease could not be renewed: the session was deleted, or another writer took it.
async fn lost_or_gone(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> StoreError {
    match sql::query_opt(tx, ctx, "SELECT 1 FROM sessions WHERE id = $1", &[&id.as_str()]).await {
        Ok(Some(_)) => StoreError::LeaseLost { session: id.clone() },
        Ok(None) => StoreError::SessionNotFound(id.to_string()),
        Err(e) => e,
    }
}

/// The lease's lifetime in milliseconds, as the SQL takes it.
pub(super) fn ttl_ms(inner: &Inner) -> f64 {
    inner.lease_ttl.as_secs_f64() * 1000.0
}

/// Marks the session as written now, to the second (as the SQLite store does).
pub(super) async fn touch(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached(
            "UPDATE sessions SET updated_at = now() WHERE id = $1 AND updated_at < now() - interval '1 second'",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(&statement, &[&id.as_str()])
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) async fn commit(tx: Transaction<'_>, ctx: &Ctx) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| ctx.err(e))
}

/// Fails with [`StoreError::SessionNotFound`] unless `found`.
pub(super) fn found(found: bool, id: &SessionId) -> Result<(), StoreError> {
    if found {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound(id.to_string()))
    }
}
