//! Sessions: created, found by id or name, listed, deleted, and their configuration.

use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;

use super::rows::{SESSION_COLUMNS, session_info};
use super::sql;
use super::tx::{commit, write_tx};
use super::{Ctx, Inner};
use crate::{SessionId, SessionInfo, StoreError};

pub(super) async fn create_session(
    client: &Object,
    ctx: &Ctx,
    name: &str,
    config: &str,
    owner: Option<&str>,
) -> Result<SessionInfo, StoreError> {
    let id = SessionId::random();
    let statement = client
        .prepare_cached(&format!(
            "WITH s AS (
                 INSERT INTO sessions (id, name, created_at, updated_at, config, owner)
                 VALUES ($1, $2, now(), now(), $3, $4) RETURNING *
             )
             SELECT {} FROM s",
            SESSION_COLUMNS.replace(
                "(SELECT count(*) FROM messages m WHERE m.session_id = s.id)",
                "0::bigint"
            )
        ))
        .await
        .map_err(|e| ctx.err(e))?;
    match client
        .query_one(&statement, &[&id.as_str(), &name, &config, &owner])
        .await
    {
        Ok(row) => session_info(&row),
        // The unique index of (owner, name): the same owner's session of this name.
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::NameTaken(name.to_owned()))
        }
        Err(e) => Err(ctx.err(e)),
    }
}

/// The session matching `filter` (one `$1` parameter).
pub(super) async fn session_where(
    client: &Object,
    ctx: &Ctx,
    filter: &str,
    value: &str,
) -> Result<Option<SessionInfo>, StoreError> {
    let row = sql::query_opt(
        client,
        ctx,
        &format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE {filter}"),
        &[&value],
    )
    .await?;
    row.as_ref().map(session_info).transpose()
}

/// Whether session `id` exists, and its owner.
pub(super) async fn session_owner(
    client: &Object,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<Option<String>>, StoreError> {
    let row = sql::query_opt(
        client,
        ctx,
        "SELECT owner FROM sessions WHERE id = $1",
        &[&id.as_str()],
    )
    .await?;
    Ok(row.map(|row| row.get(0)))
}

pub(super) async fn sessions(client: &Object, ctx: &Ctx) -> Result<Vec<SessionInfo>, StoreError> {
    let rows = sql::query(
        client,
        ctx,
        &format!("SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.updated_at DESC, s.name"),
        &[],
    )
    .await?;
    rows.iter().map(session_info).collect()
}

/// Deletes the session whose lease (`token`) the caller holds, with everything of it.
pub(super) async fn delete_session(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
) -> Result<bool, StoreError> {
    let ctx = &inner.ctx;
    let tx = match write_tx(client, inner, id, token).await {
        Ok(tx) => tx,
        Err(StoreError::SessionNotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    // Everything of the session goes with it (foreign keys cascade), its lease and grants too.
    let deleted = sql::execute(&tx, ctx, "DELETE FROM sessions WHERE id = $1", &[&id.as_str()]).await?;
    commit(tx, ctx).await?;
    Ok(deleted > 0)
}

pub(super) async fn set_config(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    config: &str,
) -> Result<(), StoreError> {
    let ctx = &inner.ctx;
    let tx = write_tx(client, inner, id, token).await?;
    sql::execute(
        &tx,
        ctx,
        "UPDATE sessions SET config = $2, updated_at = now() WHERE id = $1",
        &[&id.as_str(), &config],
    )
    .await?;
    commit(tx, ctx).await
}
