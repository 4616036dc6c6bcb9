//! Call records read off the messages as they are stored, in the same transaction: an
//! assistant message registers its calls, a tool result closes its call with the state the
//! agent wrote in the result's `tool_call` metadata. A crash can then never leave a stored
//! result beside a call record that says the call is still running, nor the reverse.

use agentry::message::{ContentBlock, Msg};
use agentry::tool::{DecisionSource, ToolCallState};
use chrono::{DateTime, Utc};
use rusqlite::{Transaction, params};

use super::Ctx;
use super::rows::{EncodedCall, json, ts};
use crate::{CallRecord, CallStatus, SessionId, StoreError};
use agentry::memory::result_state;

/// What one stored message says about calls.
#[derive(Debug)]
pub(super) enum CallChange {
    /// A call the model made: registered unless already known, as running: the store cannot
    /// tell whether its body started, so recovery takes the cautious reading ("may have partly
    /// run") unless the loop says more (a [`CallRecorder`](crate::CallRecorder), an approval).
    Made(EncodedCall),
    /// A call's result: its terminal state, unless it already has one (S1).
    Closed(EncodedCall),
}

/// The call changes `msg` carries.
pub(super) fn call_changes(msg: &Msg) -> Result<Vec<CallChange>, StoreError> {
    let mut changes = Vec::new();
    for block in &msg.content {
        match block {
            ContentBlock::ToolUse(call) => {
                let mut record = CallRecord::new(call.id.clone(), call.name.clone(), call.input.clone());
                record.message_id = Some(msg.id.clone());
                record.created_at = msg.timestamp;
                record.status = CallStatus::Running;
                changes.push(CallChange::Made(EncodedCall::new(&record)?));
            }
            ContentBlock::ToolResult(result) => {
                let state = result_state(msg, result);
                let record_json = msg.metadata.get("tool_call");
                let time = |key: &str| {
                    record_json
                        .and_then(|r| r.get(key))
                        .and_then(|v| v.as_str())
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.with_timezone(&Utc))
                };
                let mut record =
                    CallRecord::new(result.id.clone(), result.name.clone(), serde_json::Value::Null);
                let partial = matches!(state, ToolCallState::Cancelled { partial: true, .. });
                record.partial_result = partial.then(|| {
                    result
                        .output
                        .iter()
                        .filter_map(ContentBlock::as_text)
                        .collect::<String>()
                });
                record.decision_source = record_json
                    .and_then(|r| r.get("decision"))
                    .and_then(|d| serde_json::from_value::<DecisionSource>(d.clone()).ok());
                record.explanation = record_json
                    .and_then(|r| r.get("explanation"))
                    .and_then(|e| e.as_str())
                    .map(str::to_owned);
                record.started_at = time("started_at");
                record.finished_at = time("finished_at").or(Some(msg.timestamp));
                record.status = CallStatus::Finished(state);
                changes.push(CallChange::Closed(EncodedCall::new(&record)?));
            }
            _ => {}
        }
    }
    Ok(changes)
}

/// Applies `changes` in `tx`. A call that was declined or cancelled before it started has no
/// start time, whatever was recorded when it entered the runtime (before its approval).
pub(super) fn apply(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    changes: &[CallChange],
) -> Result<(), StoreError> {
    let now = ts(Utc::now());
    let no_arguments = json("call arguments", &serde_json::Value::Null)?;
    for change in changes {
        match change {
            CallChange::Made(call) => {
                tx.prepare_cached(
                    "INSERT INTO tool_calls (session_id, call_id, message_id, tool_name, arguments, state, terminal, \
                         idempotent, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 0, ?7, ?8)
                     ON CONFLICT (session_id, call_id) DO NOTHING",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        id.as_str(),
                        call.call_id,
                        call.message_id,
                        call.tool_name,
                        call.arguments,
                        call.state,
                        call.created_at,
                        now
                    ])
                })
                .map_err(|e| ctx.err(e))?;
            }
            CallChange::Closed(call) => {
                tx.prepare_cached(
                    "INSERT INTO tool_calls (session_id, call_id, tool_name, arguments, state, terminal, outcome, \
                         phase, partial, stop_reason, partial_result, decision_source, idempotent, created_at, \
                         started_at, finished_at, updated_at, explanation)
                     VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, ?15, ?16)
                     ON CONFLICT (session_id, call_id) DO UPDATE SET
                         state = excluded.state, terminal = 1, outcome = excluded.outcome,
                         phase = excluded.phase, partial = excluded.partial,
                         stop_reason = excluded.stop_reason, partial_result = excluded.partial_result,
                         decision_source = coalesce(excluded.decision_source, tool_calls.decision_source),
                         explanation = coalesce(excluded.explanation, tool_calls.explanation),
                         started_at = CASE WHEN excluded.state = 'declined' OR excluded.phase = 'before_start'
                             THEN NULL ELSE coalesce(tool_calls.started_at, excluded.started_at) END,
                         finished_at = excluded.finished_at, updated_at = excluded.updated_at
                     WHERE tool_calls.terminal = 0",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        id.as_str(),
                        call.call_id,
                        call.tool_name,
                        no_arguments,
                        call.state,
                        call.outcome,
                        call.phase,
                        call.partial,
                        call.stop_reason,
                        call.partial_result,
                        call.decision_source,
                        call.created_at,
                        call.started_at,
                        call.finished_at,
                        now,
                        call.explanation
                    ])
                })
                .map_err(|e| ctx.err(e))?;
                super::calls::forget_approval(tx, ctx, id, &call.call_id)?;
            }
        }
    }
    Ok(())
}
