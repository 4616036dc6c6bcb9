//! What an approval decision does to a call's record, in every store.

use agentry::tool::{ApprovalDecision, DecisionSource, ToolCallState};
use chrono::{DateTime, Utc};

use crate::{CallRecord, CallStatus};

/// Applies `decision` (taken by `source` at `now`) to a call waiting for it: an approved call
/// becomes queued, or, given its `start`, running from then; a declined one ends `Declined`
/// without a start time (it entered the runtime, and a recorder may have noted that, but it
/// never started). A decision added to the core later fails closed, as no decision does (A15).
pub(crate) fn decide(
    call: &mut CallRecord,
    decision: &ApprovalDecision,
    source: DecisionSource,
    start: Option<&CallRecord>,
    now: DateTime<Utc>,
) {
    call.status = match decision {
        ApprovalDecision::Approve | ApprovalDecision::ApproveForSession => match start {
            Some(start) => {
                call.reply_id = start.reply_id.clone().or(call.reply_id.take());
                call.tool_name = start.tool_name.clone();
                call.arguments = start.arguments.clone();
                call.started_at = start.started_at.or(Some(now));
                CallStatus::Running
            }
            None => CallStatus::Queued,
        },
        ApprovalDecision::Decline { reason }
        | ApprovalDecision::DeclineForSession { reason }
        | ApprovalDecision::DeclineAndStop { reason } => {
            call.finished_at = Some(now);
            call.started_at = None;
            CallStatus::Finished(ToolCallState::Declined {
                reason: reason.clone(),
            })
        }
        _ => {
            call.finished_at = Some(now);
            call.started_at = None;
            CallStatus::Finished(ToolCallState::Declined { reason: None })
        }
    };
    call.decision = Some(decision.clone());
    call.decision_source = Some(source);
}
