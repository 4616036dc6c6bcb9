//! The records a session store keeps besides messages: sessions, tool calls, pending approvals,
//! session grants, usage, and what recovery did.

use std::fmt;

use agentry::tool::{
    ApprovalDecision, ApprovalRequest, CancelPhase, CancelReason, DecisionSource, ToolCallState,
};
use agentry::{CallId, ReplyId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The id of a stored session: 32 hex digits, never reused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh random id.
    pub fn random() -> Self {
        SessionId(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Wraps an id read from elsewhere (a store, a command line).
    pub fn new(id: impl Into<String>) -> Self {
        SessionId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One stored session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Its id.
    pub id: SessionId,
    /// Its name, unique among its owner's sessions (what `--session NAME` refers to).
    pub name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When anything of it was last written.
    pub updated_at: DateTime<Utc>,
    /// The agent configuration that matters to resume it (model, system prompt, tools, limits),
    /// as the application chose to write it: a JSON object.
    pub config: Value,
    /// How many messages it holds.
    pub message_count: u64,
    /// The user it belongs to, when a server made it for one of its users (`user:token` in
    /// its token file); `None` for the sessions of the store's own user (the terminal's, and
    /// a server's with a single token or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Where a tool call is: one of the three live states of spec 3.0, or its terminal state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallStatus {
    /// Waiting for the user's decision.
    PendingApproval,
    /// Approved (or needing no approval), waiting for a slot.
    Queued,
    /// The tool's body is running.
    Running,
    /// Terminal: it never changes again (spec S1).
    Finished(ToolCallState),
}

impl CallStatus {
    /// `pending_approval`, `queued`, `running`, or the terminal state's name (`completed`,
    /// `failed`, `declined`, `cancelled`, `timed_out`): the `state` column.
    pub fn name(&self) -> &'static str {
        match self {
            CallStatus::PendingApproval => "pending_approval",
            CallStatus::Queued => "queued",
            CallStatus::Running => "running",
            CallStatus::Finished(state) => state.name(),
        }
    }

    /// Whether the call ended.
    pub fn is_terminal(&self) -> bool {
        matches!(self, CallStatus::Finished(_))
    }

    /// The terminal state, if any.
    pub fn terminal(&self) -> Option<&ToolCallState> {
        match self {
            CallStatus::Finished(state) => Some(state),
            _ => None,
        }
    }

    /// For a cancelled call, whether it was cancelled before start or while running (Y3).
    pub fn phase(&self) -> Option<CancelPhase> {
        match self {
            CallStatus::Finished(ToolCallState::Cancelled { phase, .. }) => Some(*phase),
            _ => None,
        }
    }

    /// For a cancelled or timed-out call, whether `on_cancel` handed back a partial result (Y3).
    pub fn partial(&self) -> Option<bool> {
        match self {
            CallStatus::Finished(
                ToolCallState::Cancelled { partial, .. } | ToolCallState::TimedOut { partial },
            ) => Some(*partial),
            _ => None,
        }
    }

    /// What stopped a call that did not end on its own: `user`, `reply`, `restart`, `budget` (a
    /// cancel's reason) or `timeout` (Y3).
    pub fn stop_reason(&self) -> Option<&'static str> {
        match self {
            CallStatus::Finished(ToolCallState::Cancelled { reason, .. }) => Some(match reason {
                CancelReason::User => "user",
                CancelReason::Reply => "reply",
                CancelReason::Restart => "restart",
                CancelReason::Budget => "budget",
                // A reason added to the core later: still stopped, by something.
                _ => "other",
            }),
            CallStatus::Finished(ToolCallState::TimedOut { .. }) => Some("timeout"),
            _ => None,
        }
    }
}

/// The stored record of one tool call (spec Y3): enough for a UI to render it after a restart,
/// and for recovery to close it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call id (as in the assistant message and the result).
    pub call_id: CallId,
    /// The reply it belongs to.
    pub reply_id: Option<ReplyId>,
    /// The id of the assistant message holding the call.
    pub message_id: Option<String>,
    /// The tool called.
    pub tool_name: String,
    /// The arguments, as the call runs them.
    pub arguments: Value,
    /// Where the call is.
    pub status: CallStatus,
    /// Whether running the tool twice is harmless. Recovery never re-runs a call, whatever this
    /// says; the flag is kept so that a UI can offer to retry an idempotent call, and so that a
    /// non-idempotent one is never retried automatically.
    pub idempotent: bool,
    /// The partial result `on_cancel` handed back, if any.
    pub partial_result: Option<String>,
    /// The approval decision, when the call needed one.
    pub decision: Option<ApprovalDecision>,
    /// Who took it: the user, auto-approval, a session grant, a permission rule, or nobody (Y3).
    pub decision_source: Option<DecisionSource>,
    /// What the user was (or, for an automatic decision, would have been) asked: the approval
    /// request's message, kept as the decision's explanation (A5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The last progress report of the running tool (UI only).
    pub progress: Option<String>,
    /// How the running tool can be found again if the process stops (an MCP task's id, say):
    /// what it gave [`ToolContext::set_resume_point`](agentry::tool::ToolContext::set_resume_point).
    /// A call that has one is kept open by recovery ([`PendingApprovals::Keep`]) and followed
    /// again by the next `start_resumed_reply`, instead of being closed as interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Value>,
    /// When the call was registered.
    pub created_at: DateTime<Utc>,
    /// When its body started, if it did.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached its terminal state.
    pub finished_at: Option<DateTime<Utc>>,
}

impl CallRecord {
    /// A call just registered: queued, not idempotent, created now.
    pub fn new(call_id: impl Into<CallId>, tool_name: impl Into<String>, arguments: Value) -> Self {
        CallRecord {
            call_id: call_id.into(),
            reply_id: None,
            message_id: None,
            tool_name: tool_name.into(),
            arguments,
            status: CallStatus::Queued,
            idempotent: false,
            partial_result: None,
            decision: None,
            decision_source: None,
            explanation: None,
            progress: None,
            resume: None,
            created_at: Utc::now(),
            started_at: None,
            finished_at: None,
        }
    }
}

/// A call waiting for the user's decision, with what the user is asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The call.
    pub call_id: CallId,
    /// The tool.
    pub tool_name: String,
    /// The arguments.
    pub arguments: Value,
    /// The request shown to the user (spec A5).
    pub request: ApprovalRequest,
    /// When it was asked.
    pub requested_at: DateTime<Utc>,
}

/// What a session grant decides (spec A12, A13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GrantKind {
    /// Matching calls run without asking.
    Allow,
    /// Matching calls are declined without asking.
    Deny {
        /// The reason the model reads.
        reason: Option<String>,
    },
}

/// A session approval grant (spec A12-A14): it lives in its session, is never shared with
/// another, and is dropped with the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The grant key as the agent computes it (tool name, plus the canonical arguments unless
    /// the tool's scope is any arguments).
    pub key: String,
    /// The tool it is about (for listing).
    pub tool_name: String,
    /// Allow or deny.
    pub kind: GrantKind,
    /// When it was granted.
    pub created_at: DateTime<Utc>,
}

/// Token use of a session: the sum over its recorded model calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// How many model calls were recorded.
    pub calls: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Wall time of the model calls, in milliseconds.
    pub time_ms: f64,
    /// Prompt tokens read from the provider's cache (part of `input_tokens`).
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache (part of `input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Generated tokens spent on reasoning (part of `output_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// What the recorded replies cost in US dollars, summing those whose price was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// What recovery did when a session was opened for writing (spec Y4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    /// Calls that had no result and were closed as `Cancelled{reason: Restart}` with
    /// `INTERRUPTED_RESTART`, in order.
    pub interrupted: Vec<CallId>,
    /// Live calls whose result was already stored (the process stopped between storing the
    /// result and marking the call finished): their record now says how they ended.
    pub settled: Vec<CallId>,
    /// Of the interrupted calls, those that were waiting for approval.
    pub approvals_closed: Vec<CallId>,
    /// Tool results removed because no call was waiting for them (or a call had two).
    pub orphan_results_removed: usize,
    /// The last reply had not finished (calls were closed, or a result waited for the model's
    /// next step): [`REPLY_INTERRUPTED_BY_RESTART`](crate::REPLY_INTERRUPTED_BY_RESTART) was
    /// added for the model.
    #[serde(default)]
    pub reply_noted: bool,
    /// Calls left waiting for approval that are still waiting (opened with
    /// [`PendingApprovals::Keep`]): the next `start_resumed_reply` asks about them again.
    #[serde(default)]
    pub pending_kept: Vec<CallId>,
    /// Calls that were running work that can be found again (they left a resume point) and
    /// are kept open (opened with [`PendingApprovals::Keep`]): the next `start_resumed_reply`
    /// finds their work again and waits for its result, without asking for approval again.
    #[serde(default)]
    pub resumable_kept: Vec<CallId>,
}

/// What opening a session does with calls that were waiting for approval when the process
/// that ran them stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PendingApprovals {
    /// Closed as interrupted by the restart, like every unfinished call (spec Y4).
    #[default]
    Close,
    /// Still waiting, when they are the whole unfinished part of the conversation (the last
    /// model message's calls that have no result, all waiting for approval): the agent asks
    /// about them again with `ReActAgent::start_resumed_reply` and runs the approved ones, once.
    /// Calls that were running work that can be found again (a resume point) are kept too, and
    /// followed again by the same `start_resumed_reply`. Otherwise they are closed as with
    /// `Close`.
    Keep,
}

/// A session as recovery left it: what recovery did, and the messages now stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovered {
    /// What recovery did.
    pub report: Recovery,
    /// The session's messages after recovery, in order (every call paired with one result).
    pub messages: Vec<agentry::message::Msg>,
}

impl Recovery {
    /// Whether recovery changed nothing.
    pub fn is_empty(&self) -> bool {
        self.interrupted.is_empty()
            && self.settled.is_empty()
            && self.approvals_closed.is_empty()
            && self.orphan_results_removed == 0
            && !self.reply_noted
            && self.pending_kept.is_empty()
            && self.resumable_kept.is_empty()
    }
}

/// An event of a session's log, as a server handed it out (see
/// [`SessionStore::append_events`](crate::SessionStore::append_events)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its id: increasing within the session.
    pub id: u64,
    /// The event as JSON (the protocol's `AgentEvent`).
    pub body: String,
    /// When the server recorded it (`None`: unknown, for events kept before this was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<DateTime<Utc>>,
}
