//! Controls sent to the node that runs a session's reply (see
//! [`SessionStore::send_control`](crate::SessionStore::send_control)), and leases as others
//! see them.

use deadpool_postgres::ClientWrapper as Client;

use super::Ctx;
use super::notices::{ANSWERS, CONTROLS};
use crate::{SessionId, StoreError};

pub(super) async fn send_control(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
    body: &str,
) -> Result<u64, StoreError> {
    let row = client
        .query_opt(
            "WITH queued AS (
                 INSERT INTO session_controls (session_id, body) SELECT id, $2 FROM sessions WHERE id = $1
                 RETURNING id
             )
             SELECT id, pg_notify($3, $1) FROM queued",
            &[&id.as_str(), &body, &CONTROLS],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let Some(row) = row else {
        return Err(StoreError::SessionNotFound(id.to_string()));
    };
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// Takes the session's queued controls for the holder of lease `token`.
pub(super) async fn take_controls(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
    token: i64,
) -> Result<Vec<(u64, String)>, StoreError> {
    let rows = client
        .query(
            "UPDATE session_controls SET taken_at = now()
             WHERE session_id = $1 AND taken_at IS NULL
               AND EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND token = $2)
             RETURNING id, body",
            &[&id.as_str(), &token],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let mut controls: Vec<(u64, String)> = rows
        .iter()
        .map(|row| (u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), row.get(1)))
        .collect();
    controls.sort_by_key(|(id, _)| *id);
    Ok(controls)
}

pub(super) async fn answer_control(
    client: &Client,
    ctx: &Ctx,
    control: u64,
    answer: &str,
) -> Result<(), StoreError> {
    let control = i64::try_from(control).unwrap_or(i64::MAX);
    client
        .execute(
            "WITH answered AS (
                 UPDATE session_controls SET answer = $2 WHERE id = $1 RETURNING id
             )
             SELECT pg_notify($3, id::text) FROM answered",
            &[&control, &answer, &ANSWERS],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) async fn control_answer(
    client: &Client,
    ctx: &Ctx,
    control: u64,
) -> Result<Option<String>, StoreError> {
    let control = i64::try_from(control).unwrap_or(i64::MAX);
    let row = client
        .query_opt("SELECT answer FROM session_controls WHERE id = $1", &[&control])
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(row.and_then(|row| row.get(0)))
}

pub(super) async fn lease_holder(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<String>, StoreError> {
    let row = client
        .query_opt(
            "SELECT holder FROM session_leases WHERE session_id = $1",
            &[&id.as_str()],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(row.map(|row| row.get(0)))
}
