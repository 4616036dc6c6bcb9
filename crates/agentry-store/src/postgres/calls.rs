//! Call records and approvals.

use agentry::CallId;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use chrono::Utc;
use deadpool_postgres::Object as Client;
use deadpool_postgres::{Object, Transaction};

use super::approvals;
use super::rows::{CALL_COLUMNS, CallColumns, call_record};
use super::sql;
use super::text::{from_db, to_db};
use super::tx::{commit, found, touch, write_tx};
use super::{Ctx, Inner};
use crate::codec::{from_json, json};
use crate::{CallRecord, CallStatus, PendingApproval, SessionId, StoreError};

// ---- calls ----

/// Writes a call record; a terminal one never changes (S1). `Ok(false)` when nothing changed.
pub(super) async fn write_call(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call: &CallColumns,
) -> Result<bool, StoreError> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, call_id, reply_id, message_id, tool_name, arguments, state, \
                 terminal, outcome, phase, partial, stop_reason, partial_result, decision, decision_source, \
                 idempotent, progress, created_at, started_at, finished_at, updated_at, explanation, resume)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, now(), $21, $22)
             ON CONFLICT (session_id, call_id) DO UPDATE SET
                 reply_id = excluded.reply_id, message_id = excluded.message_id,
                 tool_name = excluded.tool_name, arguments = excluded.arguments, state = excluded.state,
                 terminal = excluded.terminal, outcome = excluded.outcome, phase = excluded.phase,
                 partial = excluded.partial, stop_reason = excluded.stop_reason,
                 partial_result = excluded.partial_result, decision = excluded.decision,
                 decision_source = excluded.decision_source, idempotent = excluded.idempotent,
                 progress = excluded.progress, started_at = excluded.started_at,
                 finished_at = excluded.finished_at, updated_at = excluded.updated_at,
                 explanation = coalesce(excluded.explanation, tool_calls.explanation),
                 resume = coalesce(excluded.resume, tool_calls.resume)
             WHERE NOT tool_calls.terminal",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let changed = tx
        .execute(
            &statement,
            &[
                &id.as_str(),
                &call.call_id,
                &call.reply_id,
                &call.message_id,
                &call.tool_name,
                &call.arguments,
                &call.state,
                &call.terminal,
                &call.outcome,
                &call.phase,
                &call.partial,
                &call.stop_reason,
                &call.partial_result,
                &call.decision,
                &call.decision_source,
                &call.idempotent,
                &call.progress,
                &call.created_at,
                &call.started_at,
                &call.finished_at,
                &call.explanation,
                &call.resume,
            ],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    if call.terminal {
        forget_approval(tx, ctx, id, &call.call_id).await?;
    }
    Ok(changed > 0)
}

/// A closed call waits for nobody: its approval question, if any, goes.
pub(super) async fn forget_approval(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached("DELETE FROM pending_approvals WHERE session_id = $1 AND call_id = $2")
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(&statement, &[&id.as_str(), &call_id])
        .await
        .map_err(|e| ctx.err(e))?;
    approvals::expire(tx, ctx, id, call_id).await
}

/// Marks a live call running (registering it if unknown); a terminal one is left alone.
/// Within a write transaction, which may hold other writes too.
pub(super) async fn write_start(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call: &CallColumns,
) -> Result<bool, StoreError> {
    approvals::consume_on_start(tx, ctx, id, &call.call_id, &call.digest()?).await?;
    let statement = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, call_id, reply_id, tool_name, arguments, state, terminal, \
                 idempotent, created_at, started_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'running', false, $6, $7, $8, now())
             ON CONFLICT (session_id, call_id) DO UPDATE SET
                 reply_id = coalesce(excluded.reply_id, tool_calls.reply_id),
                 tool_name = excluded.tool_name, arguments = excluded.arguments, state = 'running',
                 started_at = excluded.started_at, updated_at = excluded.updated_at
             WHERE NOT tool_calls.terminal",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let changed = tx
        .execute(
            &statement,
            &[
                &id.as_str(),
                &call.call_id,
                &call.reply_id,
                &call.tool_name,
                &call.arguments,
                &call.idempotent,
                &call.created_at,
                &call.started_at,
            ],
        )
        .await
        .map_err(|e| ctx.err(e))?;
    Ok(changed > 0)
}

async fn call_where(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<Option<CallRecord>, StoreError> {
    let statement = tx
        .prepare_cached(&format!(
            "SELECT {CALL_COLUMNS} FROM tool_calls WHERE session_id = $1 AND call_id = $2"
        ))
        .await
        .map_err(|e| ctx.err(e))?;
    let row = tx
        .query_opt(&statement, &[&id.as_str(), &call_id])
        .await
        .map_err(|e| ctx.err(e))?;
    row.as_ref().map(call_record).transpose()
}

/// The session's calls in registration order, in one statement (`None`: unknown session).
pub(super) async fn stored_calls(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Option<Vec<CallRecord>>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {} FROM sessions s LEFT JOIN tool_calls c ON c.session_id = s.id
             WHERE s.id = $1 ORDER BY c.ord",
            qualified("c", CALL_COLUMNS)
        ))
        .await
        .map_err(|e| ctx.err(e))?;
    let rows = client
        .query(&statement, &[&id.as_str()])
        .await
        .map_err(|e| ctx.err(e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut calls = Vec::with_capacity(rows.len());
    for row in &rows {
        // The one row of a session without calls has no call id.
        if row.get::<_, Option<String>>(0).is_some() {
            calls.push(call_record(row)?);
        }
    }
    Ok(Some(calls))
}

pub(super) async fn calls(client: &Client, ctx: &Ctx, id: &SessionId) -> Result<Vec<CallRecord>, StoreError> {
    let calls = stored_calls(client, ctx, id).await?;
    found(calls.is_some(), id)?;
    Ok(calls.unwrap_or_default())
}

/// `columns` (a comma-separated list) each prefixed with `alias.`.
fn qualified(alias: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---- approvals ----

#[allow(clippy::too_many_arguments)]
pub(super) async fn request_approval(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    call_id: &CallId,
    request: &ApprovalRequest,
    asked: Option<&CallRecord>,
) -> Result<(), StoreError> {
    let ctx = &inner.ctx;
    let body = json("approval request", request)?;
    let tx = write_tx(client, inner, id, token).await?;
    let Some(mut call) = call_where(&tx, ctx, id, &to_db(call_id.as_str())).await? else {
        return Err(StoreError::CallNotFound(call_id.to_string()));
    };
    if call.status.is_terminal() {
        return Err(StoreError::NotPending(call_id.to_string()));
    }
    if let Some(asked) = asked {
        call.tool_name = asked.tool_name.clone();
        call.arguments = asked.arguments.clone();
        call.reply_id = asked.reply_id.clone().or(call.reply_id);
    }
    call.status = CallStatus::PendingApproval;
    call.explanation = Some(request.message.clone());
    write_call(&tx, ctx, id, &CallColumns::new(&call)?).await?;
    approvals::ask(
        &tx,
        ctx,
        id,
        &to_db(call_id.as_str()),
        &crate::arguments_digest(&call.tool_name, &call.arguments),
    )
    .await?;
    sql::execute(&tx, ctx, "INSERT INTO pending_approvals (session_id, call_id, request, requested_at) VALUES ($1, $2, $3, now())
         ON CONFLICT (session_id, call_id) DO UPDATE SET request = excluded.request", &[&id.as_str(), &to_db(call_id.as_str()), &body]).await?;
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await
}

/// Records the decision for a pending call. An approved call is queued, or, given its `start`,
/// running from then (its body starts now, so the mark costs no commit of its own).
#[allow(clippy::too_many_arguments)]
pub(super) async fn resolve_approval(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    call_id: &CallId,
    decision: &ApprovalDecision,
    source: DecisionSource,
    start: Option<&CallRecord>,
) -> Result<CallRecord, StoreError> {
    let ctx = &inner.ctx;
    let tx = write_tx(client, inner, id, token).await?;
    // The first decision removes the request; any later one finds nothing (A16).
    let was_pending = sql::execute(
        &tx,
        ctx,
        "DELETE FROM pending_approvals WHERE session_id = $1 AND call_id = $2",
        &[&id.as_str(), &to_db(call_id.as_str())],
    )
    .await?;
    let call = call_where(&tx, ctx, id, &to_db(call_id.as_str())).await?;
    let Some(mut call) = call.filter(|c| was_pending > 0 && c.status == CallStatus::PendingApproval) else {
        return Err(StoreError::NotPending(call_id.to_string()));
    };
    let started_with = start.map(|s| crate::arguments_digest(&s.tool_name, &s.arguments));
    let state = crate::approvals::decide(&mut call, decision, source, start, Utc::now());
    approvals::decide(
        &tx,
        ctx,
        id,
        &to_db(call_id.as_str()),
        state,
        started_with.as_deref(),
    )
    .await?;
    write_call(&tx, ctx, id, &CallColumns::new(&call)?).await?;
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await?;
    Ok(call)
}

pub(super) async fn pending_approvals(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<PendingApproval>, StoreError> {
    let rows = sql::query(
        client,
        ctx,
        "SELECT p.call_id, c.tool_name, c.arguments, p.request, p.requested_at
             FROM sessions s
             LEFT JOIN pending_approvals p ON p.session_id = s.id
             LEFT JOIN tool_calls c ON c.session_id = p.session_id AND c.call_id = p.call_id
             WHERE s.id = $1 ORDER BY c.ord",
        &[&id.as_str()],
    )
    .await?;
    found(!rows.is_empty(), id)?;
    let mut pending = Vec::new();
    for row in &rows {
        let Some(call_id) = row.get::<_, Option<String>>(0) else {
            continue;
        };
        let arguments: String = row.get(2);
        let request: String = row.get(3);
        pending.push(PendingApproval {
            call_id: from_db(call_id).into(),
            tool_name: from_db(row.get(1)),
            arguments: from_json("call arguments", &arguments)?,
            request: from_json("approval request", &request)?,
            requested_at: row.get(4),
        });
    }
    Ok(pending)
}
