//! Approvals: what a decision does to a call's record, and the approval record that binds a
//! decision to the call's arguments and is used once, in every store.

use agentry::CallId;
use agentry::tool::{ApprovalDecision, DecisionSource, ToolCallState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{CallRecord, CallStatus};

/// Where an approval is. An approval is asked for one call with given arguments, decided once,
/// and used once: it is consumed in the transaction that marks its call started, so no retry,
/// replay or failover runs an approved call twice, and arguments changed since the question
/// need a new approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalState {
    /// Asked; no decision yet.
    Pending,
    /// Approved; the call has not started.
    Approved,
    /// Declined.
    Declined,
    /// The call ended (cancelled, interrupted by a restart) before the approval was used.
    Expired,
    /// Approved and used: the call started.
    Consumed,
}

impl ApprovalState {
    /// The state as stored.
    pub fn name(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Declined => "declined",
            ApprovalState::Expired => "expired",
            ApprovalState::Consumed => "consumed",
        }
    }

    /// The state of a stored name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => ApprovalState::Pending,
            "approved" => ApprovalState::Approved,
            "declined" => ApprovalState::Declined,
            "expired" => ApprovalState::Expired,
            "consumed" => ApprovalState::Consumed,
            _ => return None,
        })
    }
}

/// The approval record of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The call.
    pub call_id: CallId,
    /// [`arguments_digest`] of the tool and arguments the approval was asked for.
    pub digest: String,
    /// Where it is.
    pub state: ApprovalState,
    /// When it was asked.
    pub requested_at: DateTime<Utc>,
    /// When it was decided.
    pub decided_at: Option<DateTime<Utc>>,
    /// When it was used.
    pub consumed_at: Option<DateTime<Utc>>,
}

/// The SHA-256 (hex) of a tool's name and its arguments as canonical JSON (keys sorted): what
/// an approval is bound to.
pub fn arguments_digest(tool_name: &str, arguments: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tool_name.as_bytes());
    hasher.update([0]);
    hasher.update(arguments.to_string().as_bytes());
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies `decision` (taken by `source` at `now`) to a call waiting for it: an approved call
/// becomes queued, or, given its `start`, running from then; a declined one ends `Declined`
/// without a start time (it entered the runtime, and a recorder may have noted that, but it
/// never started). A decision added to the core later fails closed, as no decision does (A15).
/// Returns the state its approval record takes: consumed by the start, approved, or declined.
pub(crate) fn decide(
    call: &mut CallRecord,
    decision: &ApprovalDecision,
    source: DecisionSource,
    start: Option<&CallRecord>,
    now: DateTime<Utc>,
) -> ApprovalState {
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
    match call.status {
        CallStatus::Running => ApprovalState::Consumed,
        CallStatus::Queued => ApprovalState::Approved,
        _ => ApprovalState::Declined,
    }
}
