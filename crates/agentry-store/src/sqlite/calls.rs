//! The store's operations on call records and approvals, one transaction each (see
//! [`ops`](super::ops) for the transaction rules).

use agentry::CallId;
use agentry::tool::{ApprovalDecision, DecisionSource};
use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};

use super::Ctx;
use super::approvals;
use super::rows::{CALL_COLUMNS, EncodedCall, call_record, call_row, from_json, parse_ts, ts};
use super::tx::{commit, session_rows, snapshot, touch, write_tx};
use crate::{CallRecord, CallStatus, PendingApproval, SessionId, StoreError};

// ---- calls ----

/// Writes a call record; a terminal one never changes (S1). `Ok(false)` when nothing changed.
pub(super) fn write_call(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call: &EncodedCall,
) -> Result<bool, StoreError> {
    let changed = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, call_id, reply_id, message_id, tool_name, arguments, state, \
                 terminal, outcome, phase, partial, stop_reason, partial_result, decision, decision_source, \
                 idempotent, progress, created_at, started_at, finished_at, updated_at, explanation, resume)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)
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
             WHERE tool_calls.terminal = 0",
        )
        .and_then(|mut s| {
            s.execute(params![
                id.as_str(),
                call.call_id,
                call.reply_id,
                call.message_id,
                call.tool_name,
                call.arguments,
                call.state,
                call.terminal,
                call.outcome,
                call.phase,
                call.partial,
                call.stop_reason,
                call.partial_result,
                call.decision,
                call.decision_source,
                call.idempotent,
                call.progress,
                call.created_at,
                call.started_at,
                call.finished_at,
                ts(Utc::now()),
                call.explanation,
                call.resume,
            ])
        })
        .map_err(|e| ctx.err(e))?;
    if call.terminal {
        forget_approval(tx, ctx, id, &call.call_id)?;
    }
    Ok(changed > 0)
}

/// A closed call waits for nobody: its approval question, if any, goes.
pub(super) fn forget_approval(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM pending_approvals WHERE session_id = ?1 AND call_id = ?2")
        .and_then(|mut s| s.execute(params![id.as_str(), call_id]))
        .map_err(|e| ctx.err(e))?;
    approvals::expire(tx, ctx, id, call_id)
}

pub(super) fn record_call(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call: &EncodedCall,
) -> Result<bool, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let changed = write_call(&tx, ctx, id, call)?;
    if changed {
        touch(&tx, ctx, id)?;
    }
    commit(tx, ctx)?;
    Ok(changed)
}

/// Marks a live call running (registering it if unknown); a terminal one is left alone.
pub(super) fn call_started(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call: &EncodedCall,
) -> Result<bool, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let changed = write_start(&tx, ctx, id, call)?;
    commit(tx, ctx)?;
    Ok(changed)
}

/// [`call_started`] inside a transaction of its caller, which commits it with its own writes.
pub(super) fn write_start(
    tx: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call: &EncodedCall,
) -> Result<bool, StoreError> {
    approvals::consume_on_start(tx, ctx, id, &call.call_id, &call.digest()?)?;
    let changed = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, call_id, reply_id, tool_name, arguments, state, terminal, \
                 idempotent, created_at, started_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', 0, ?6, ?7, ?8, ?9)
             ON CONFLICT (session_id, call_id) DO UPDATE SET
                 reply_id = coalesce(excluded.reply_id, tool_calls.reply_id),
                 tool_name = excluded.tool_name, arguments = excluded.arguments, state = 'running',
                 started_at = excluded.started_at, updated_at = excluded.updated_at
             WHERE tool_calls.terminal = 0",
        )
        .and_then(|mut s| {
            s.execute(params![
                id.as_str(),
                call.call_id,
                call.reply_id,
                call.tool_name,
                call.arguments,
                call.idempotent,
                call.created_at,
                call.started_at,
                ts(Utc::now())
            ])
        })
        .map_err(|e| ctx.err(e))?;
    Ok(changed > 0)
}

fn call_where(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &str,
) -> Result<Option<CallRecord>, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {CALL_COLUMNS} FROM tool_calls WHERE session_id = ?1 AND call_id = ?2"
        ))
        .and_then(|mut s| s.query_row(params![id.as_str(), call_id], call_row).optional())
        .map_err(|e| ctx.err(e))?;
    row.map(call_record).transpose()
}

pub(super) fn stored_calls(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<CallRecord>, StoreError> {
    session_rows(
        conn,
        ctx,
        id,
        &format!("SELECT {CALL_COLUMNS} FROM tool_calls WHERE session_id = ?1 ORDER BY rowid"),
        call_row,
        call_record,
    )
}

pub(super) fn calls(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<Vec<CallRecord>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    stored_calls(&tx, ctx, id)
}

// ---- approvals ----

/// Marks a call as waiting for approval with `request`; with `asked`, as it will run (its tool
/// and arguments, recorded with the question).
pub(super) fn request_approval(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &CallId,
    request: &str,
    explanation: &str,
    asked: Option<CallRecord>,
) -> Result<(), StoreError> {
    let tx = write_tx(conn, ctx)?;
    let Some(mut call) = call_where(&tx, ctx, id, call_id)? else {
        return Err(StoreError::CallNotFound(call_id.to_string()));
    };
    if call.status.is_terminal() {
        return Err(StoreError::NotPending(call_id.to_string()));
    }
    if let Some(asked) = asked {
        call.tool_name = asked.tool_name;
        call.arguments = asked.arguments;
        call.reply_id = asked.reply_id.or(call.reply_id);
    }
    call.status = CallStatus::PendingApproval;
    call.explanation = Some(explanation.to_owned());
    write_call(&tx, ctx, id, &EncodedCall::new(&call)?)?;
    approvals::ask(
        &tx,
        ctx,
        id,
        call_id.as_str(),
        &crate::arguments_digest(&call.tool_name, &call.arguments),
    )?;
    tx.execute(
        "INSERT INTO pending_approvals (session_id, call_id, request, requested_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session_id, call_id) DO UPDATE SET request = excluded.request",
        params![id.as_str(), call_id.as_str(), request, ts(Utc::now())],
    )
    .map_err(|e| ctx.err(e))?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)
}

/// Records the decision for a pending call. An approved call is queued, or, given its `start`,
/// running from then (its body starts now, so the mark costs no commit of its own).
pub(super) fn resolve_approval(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    call_id: &CallId,
    decision: ApprovalDecision,
    source: DecisionSource,
    start: Option<CallRecord>,
) -> Result<CallRecord, StoreError> {
    let tx = write_tx(conn, ctx)?;
    // The first decision removes the request; any later one finds nothing (A16).
    let was_pending = tx
        .execute(
            "DELETE FROM pending_approvals WHERE session_id = ?1 AND call_id = ?2",
            params![id.as_str(), call_id.as_str()],
        )
        .map_err(|e| ctx.err(e))?;
    let call = call_where(&tx, ctx, id, call_id)?;
    let Some(mut call) = call.filter(|c| was_pending > 0 && c.status == CallStatus::PendingApproval) else {
        return Err(StoreError::NotPending(call_id.to_string()));
    };
    let started_with = start
        .as_ref()
        .map(|s| crate::arguments_digest(&s.tool_name, &s.arguments));
    let state = crate::approvals::decide(&mut call, &decision, source, start.as_ref(), Utc::now());
    approvals::decide(&tx, ctx, id, call_id.as_str(), state, started_with.as_deref())?;
    write_call(&tx, ctx, id, &EncodedCall::new(&call)?)?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    Ok(call)
}

pub(super) fn pending_approvals(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
) -> Result<Vec<PendingApproval>, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    session_rows(
        &tx,
        ctx,
        id,
        "SELECT p.call_id, c.tool_name, c.arguments, p.request, p.requested_at
         FROM pending_approvals p JOIN tool_calls c USING (session_id, call_id)
         WHERE p.session_id = ?1 ORDER BY c.rowid",
        |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
            ))
        },
        |(call_id, tool_name, arguments, request, at)| {
            Ok(PendingApproval {
                call_id: call_id.into(),
                tool_name,
                arguments: from_json("call arguments", &arguments)?,
                request: from_json("approval request", &request)?,
                requested_at: parse_ts("approval time", &at)?,
            })
        },
    )
}
