//! Approval records (see [`crate::ApprovalState`]): asked, decided, and consumed by the start
//! of their call, each in the transaction of the change that causes it.

use rusqlite::{Connection, OptionalExtension, params};

use super::Ctx;
use super::rows::{parse_ts, ts};
use super::tx::{session_rows, snapshot};
use crate::{ApprovalRecord, ApprovalState, SessionId, StoreError};

/// The call waits for a decision about `digest` (again, when asked anew; never once used).
pub(super) fn ask(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    digest: &str,
) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached(
            "INSERT INTO approvals (session_id, call_id, digest, state, requested_at) VALUES (?1, ?2, ?3, 'pending', ?4)
             ON CONFLICT (session_id, call_id) DO UPDATE SET
                 digest = excluded.digest, state = 'pending', requested_at = excluded.requested_at,
                 decided_at = NULL, consumed_at = NULL
             WHERE approvals.state <> 'consumed'",
        )
        .and_then(|mut s| s.execute(params![id.as_str(), call_id, digest, ts(chrono::Utc::now())]))
        .map_err(|e| ctx.err(e))?;
    if changed == 0 {
        return Err(StoreError::NotApproved {
            call: call_id.to_owned(),
            state: ApprovalState::Consumed.name().into(),
        });
    }
    Ok(())
}

/// The state and digest of the approval of the live call `call_id`, if it was asked (a call
/// id a model used again for a new call is not bound by the ended call's approval).
fn current(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<Option<(String, String)>, StoreError> {
    tx.prepare_cached(
        "SELECT a.state, a.digest FROM approvals a JOIN tool_calls c USING (session_id, call_id)
         WHERE a.session_id = ?1 AND a.call_id = ?2 AND c.terminal = 0",
    )
    .and_then(|mut s| {
        s.query_row(params![id.as_str(), call_id], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()
    })
    .map_err(|e| ctx.err(e))
}

/// Records the decision: `approved`, `declined`, or, given the digest of the start it is used
/// by, `consumed` at once; a start with other arguments is refused.
pub(super) fn decide(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    state: ApprovalState,
    started_with: Option<&str>,
) -> Result<(), StoreError> {
    if let (Some(started_with), Some((_, digest))) = (started_with, current(tx, ctx, id, call_id)?)
        && digest != started_with
    {
        return Err(StoreError::ApprovalMismatch(call_id.to_owned()));
    }
    let now = ts(chrono::Utc::now());
    let consumed = (state == ApprovalState::Consumed).then_some(now.as_str());
    tx.prepare_cached(
        "UPDATE approvals SET state = ?3, decided_at = ?4, consumed_at = ?5
         WHERE session_id = ?1 AND call_id = ?2 AND state = 'pending'",
    )
    .and_then(|mut s| s.execute(params![id.as_str(), call_id, state.name(), now, consumed]))
    .map_err(|e| ctx.err(e))?;
    Ok(())
}

/// The call starts with arguments of `digest`: an approved call's approval is consumed; a call
/// whose approval is pending, declined, expired or used already may not start.
pub(super) fn consume_on_start(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    digest: &str,
) -> Result<(), StoreError> {
    let Some((state, approved)) = current(tx, ctx, id, call_id)? else {
        return Ok(()); // no question was asked (no approval needed, or a grant decided)
    };
    if state != ApprovalState::Approved.name() {
        return Err(StoreError::NotApproved {
            call: call_id.to_owned(),
            state,
        });
    }
    if approved != digest {
        return Err(StoreError::ApprovalMismatch(call_id.to_owned()));
    }
    tx.prepare_cached(
        "UPDATE approvals SET state = 'consumed', consumed_at = ?3 WHERE session_id = ?1 AND call_id = ?2",
    )
    .and_then(|mut s| s.execute(params![id.as_str(), call_id, ts(chrono::Utc::now())]))
    .map_err(|e| ctx.err(e))?;
    Ok(())
}

/// The call ended: an approval still pending or approved (never used) expires.
pub(super) fn expire(tx: &Connection, ctx: &Ctx, id: &SessionId, call_id: &str) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE approvals SET state = 'expired'
         WHERE session_id = ?1 AND call_id = ?2 AND state IN ('pending', 'approved')",
    )
    .and_then(|mut s| s.execute(params![id.as_str(), call_id]))
    .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) fn approvals(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<ApprovalRecord>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    session_rows(
        &tx,
        ctx,
        id,
        "SELECT a.call_id, a.digest, a.state, a.requested_at, a.decided_at, a.consumed_at
         FROM approvals a JOIN tool_calls c USING (session_id, call_id)
         WHERE a.session_id = ?1 ORDER BY c.rowid",
        |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, Option<String>>(5)?,
            ))
        },
        |(call_id, digest, state, requested, decided, consumed)| {
            Ok(ApprovalRecord {
                call_id: call_id.into(),
                digest,
                state: ApprovalState::from_name(&state).ok_or_else(|| {
                    StoreError::decode("approval state", format!("unknown state {state:?}"))
                })?,
                requested_at: parse_ts("approval time", &requested)?,
                decided_at: decided.map(|t| parse_ts("approval time", &t)).transpose()?,
                consumed_at: consumed.map(|t| parse_ts("approval time", &t)).transpose()?,
            })
        },
    )
}
