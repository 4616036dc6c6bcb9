//! The transaction rules of every write: one transaction, which first renews the session's
//! lease with the writer's fencing token. A taken-over lease (another node's token) refuses the
//! write; the renewal also locks the lease row, so a node taking the session over waits for a
//! write in flight and then finds the lease renewed.

use deadpool_postgres::{Object, Transaction};

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
    let renew = tx
        .prepare_cached(
            "UPDATE session_leases SET expires_at = now() + $3 * interval '1 millisecond'
             WHERE session_id = $1 AND token = $2",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let renewed = tx
        .execute(&renew, &[&id.as_str(), &token, &ttl_ms(inner)])
        .await
        .map_err(|e| ctx.err(e))?;
    if renewed == 0 {
        // Rolled back on drop.
        return Err(lost_or_gone(&tx, ctx, id).await);
    }
    Ok(tx)
}

/// Why a lease could not be renewed: the session was deleted, or another writer took it.
async fn lost_or_gone(tx: &Transaction<'_>, ctx: &Ctx, id: &SessionId) -> StoreError {
    match tx
        .query_opt("SELECT 1 FROM sessions WHERE id = $1", &[&id.as_str()])
        .await
    {
        Ok(Some(_)) => StoreError::LeaseLost { session: id.clone() },
        Ok(None) => StoreError::SessionNotFound(id.to_string()),
        Err(e) => ctx.err(e),
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
