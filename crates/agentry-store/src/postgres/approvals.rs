//! Approval records (see [`crate::ApprovalState`]): asked, decided, and consumed by the start
//! of their call, each in the transaction of the change that causes it.

use deadpool_postgres::{Object as Client, Transaction};

use super::Ctx;
use super::sql;
use super::text::from_db;
use super::tx::found;
use crate::{ApprovalRecord, ApprovalState, SessionId, StoreError};

/// The call waits for a decision about `digest` (again, when asked anew; never once used).
/// `call_id` as stored ([`to_db`]).
pub(super) async fn ask(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    digest: &str,
) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO approvals (session_id, call_id, digest, state, requested_at) VALUES ($1, $2, $3, 'pending', now())
             ON CONFLICT (session_id, call_id) DO UPDATE SET
                 digest = excluded.digest, state = 'pending', requested_at = excluded.requested_at,
                 decided_at = NULL, consumed_at = NULL
             WHERE approvals.state <> 'consumed'",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let changed = tx
        .execute(&statement, &[&id.as_str(), &call_id, &digest])
        .await
        .map_err(|e| ctx.err(e))?;
    if changed == 0 {
        return Err(StoreError::NotApproved {
            call: from_db(call_id.to_owned()),
            state: ApprovalState::Consumed.name().into(),
        });
    }
    Ok(())
}

/// The state and digest of the approval of the live call `call_id`, if it was asked (a call
/// id a model used again for a new call is not bound by the ended call's approval).
async fn current(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<Option<(String, String)>, StoreError> {
    let statement = tx
        .prepare_cached(
            "SELECT a.state, a.digest FROM approvals a JOIN tool_calls c USING (session_id, call_id)
             WHERE a.session_id = $1 AND a.call_id = $2 AND NOT c.terminal FOR UPDATE OF a",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let row = tx
        .query_opt(&statement, &[&id.as_str(), &call_id])
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

/// Records the decision: `approved`, `declined`, or, given the digest of the start it is used
/// by, `consumed` at once; a start with other arguments is refused.
pub(super) async fn decide(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    state: ApprovalState,
    started_with: Option<&str>,
) -> Result<(), StoreError> {
    if let (Some(started_with), Some((_, digest))) = (started_with, current(tx, ctx, id, call_id).await?)
        && digest != started_with
    {
        return Err(StoreError::ApprovalMismatch(from_db(call_id.to_owned())));
    }
    let consumed = state == ApprovalState::Consumed;
    sql::execute(
        tx,
        ctx,
        "UPDATE approvals SET state = $3, decided_at = now(), consumed_at = CASE WHEN $4 THEN now() END
         WHERE session_id = $1 AND call_id = $2 AND state = 'pending'",
        &[&id.as_str(), &call_id, &state.name(), &consumed],
    )
    .await?;
    Ok(())
}

/// The call starts with arguments of `digest`: an approved call's approval is consumed; a call
/// whose approval is pending, declined, expired or used already may not start.
pub(super) async fn consume_on_start(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
    digest: &str,
) -> Result<(), StoreError> {
    let Some((state, approved)) = current(tx, ctx, id, call_id).await? else {
        return Ok(()); // no question was asked (no approval needed, or a grant decided)
    };
    if state != ApprovalState::Approved.name() {
        return Err(StoreError::NotApproved {
            call: from_db(call_id.to_owned()),
            state,
        });
    }
    if approved != digest {
        return Err(StoreError::ApprovalMismatch(from_db(call_id.to_owned())));
    }
    sql::execute(
        tx,
        ctx,
        "UPDATE approvals SET state = 'consumed', consumed_at = now() WHERE session_id = $1 AND call_id = $2",
        &[&id.as_str(), &call_id],
    )
    .await?;
    Ok(())
}

/// The call ended: an approval still pending or approved (never used) expires.
pub(super) async fn expire(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached(
            "UPDATE approvals SET state = 'expired'
             WHERE session_id = $1 AND call_id = $2 AND state IN ('pending', 'approved')",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(&statement, &[&id.as_str(), &call_id])
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) async fn approvals(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<ApprovalRecord>, StoreError> {
    let rows = sql::query(
        client,
        ctx,
        "SELECT a.call_id, a.digest, a.state, a.requested_at, a.decided_at, a.consumed_at
             FROM sessions s
             LEFT JOIN approvals a ON a.session_id = s.id
             LEFT JOIN tool_calls c ON c.session_id = a.session_id AND c.call_id = a.call_id
             WHERE s.id = $1 ORDER BY c.ord",
        &[&id.as_str()],
    )
    .await?;
    found(!rows.is_empty(), id)?;
    let mut records = Vec::new();
    for row in &rows {
        let Some(call_id) = row.get::<_, Option<String>>(0) else {
            continue;
        };
        let state: String = row.get(2);
        records.push(ApprovalRecord {
            call_id: from_db(call_id).into(),
            digest: row.get(1),
            state: ApprovalState::from_name(&state)
                .ok_or_else(|| StoreError::decode("approval state", format!("unknown state {state:?}")))?,
            requested_at: row.get(3),
            decided_at: row.get(4),
            consumed_at: row.get(5),
        });
    }
    Ok(records)
}
