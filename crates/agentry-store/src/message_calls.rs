//! The call records a stored message implies: an assistant message registers its calls, a tool
//! result closes its call with the state the agent wrote in the result's `tool_call` metadata.
//! Every store writes them in the same transaction as the message, so a crash can never leave a
//! stored result beside a call record that says the call is still running, nor the reverse.

use agentry::memory::result_state;
use agentry::message::{ContentBlock, Msg};
use agentry::tool::{DecisionSource, ToolCallState};
use chrono::{DateTime, Utc};

use crate::{CallRecord, CallStatus};

/// What one stored message says about a call.
#[derive(Debug)]
pub(crate) enum CallChange<C> {
    /// A call the model made: registered unless already known, as running: the store cannot
    /// tell whether its body started, so recovery takes the cautious reading ("may have partly
    /// run") unless the loop says more (a [`CallRecorder`](crate::CallRecorder), an approval).
    Made(C),
    /// A call's result: its terminal state, unless it already has one (S1). A call declined or
    /// cancelled before it started keeps no start time, whatever was recorded when it entered
    /// the runtime (before its approval).
    Closed(C),
}

impl<C> CallChange<C> {
    /// The same change with its record in another form (a store's columns).
    pub(crate) fn try_map<D, E>(self, f: impl FnOnce(C) -> Result<D, E>) -> Result<CallChange<D>, E> {
        Ok(match self {
            CallChange::Made(c) => CallChange::Made(f(c)?),
            CallChange::Closed(c) => CallChange::Closed(f(c)?),
        })
    }
}

/// The call changes `msg` carries, in order.
pub(crate) fn call_changes(msg: &Msg) -> Vec<CallChange<CallRecord>> {
    let mut changes = Vec::new();
    for block in &msg.content {
        match block {
            ContentBlock::ToolUse(call) => {
                let mut record = CallRecord::new(call.id.clone(), call.name.clone(), call.input.clone());
                record.message_id = Some(msg.id.clone());
                record.created_at = msg.timestamp;
                record.status = CallStatus::Running;
                changes.push(CallChange::Made(record));
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
                changes.push(CallChange::Closed(record));
            }
            _ => {}
        }
    }
    changes
}
