//! Call records read off the messages as they are stored (see [`crate::message_calls`]), written
//! in the same transaction.

use agentry::message::Msg;
use chrono::Utc;
use rusqlite::{Connection, params};

use super::Ctx;
use super::rows::{EncodedCall, json, ts};
use crate::{SessionId, StoreError};

pub(super) type CallChange = crate::message_calls::CallChange<EncodedCall>;

/// The call changes `msg` carries, as columns.
pub(super) fn call_changes(msg: &Msg) -> Result<Vec<CallChange>, StoreError> {
    crate::message_calls::call_changes(msg)
        .into_iter()
        .map(|change| change.try_map(|record| EncodedCall::new(&record)))
        .collect()
}

/// Applies `changes` in `tx`. A call that was declined or cancelled before it started has no
/// start time, whatever was recorded when it entered the runtime (before its approval).
pub(super) fn apply(
    tx: &Connection,
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
