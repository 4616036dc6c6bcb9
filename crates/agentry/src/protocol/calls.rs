//! A tool call's terminal states, cancels and their outcomes (spec `cancellation.md` 3.0).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a cancel happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelPhase {
    /// Before the body was invoked (pending approval or queued).
    BeforeStart,
    /// While the body ran.
    Running,
}

/// Who or what cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelReason {
    /// The user cancelled this call.
    User,
    /// The whole reply was cancelled.
    Reply,
    /// The agent stopped (a restart found the call unfinished).
    Restart,
    /// The reply reached its budget of tokens or cost.
    Budget,
}

/// How a tool call ended (its terminal state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolCallState {
    /// The tool produced its result.
    Completed,
    /// The call failed: unknown tool, invalid arguments, the tool's error or panic.
    Failed,
    /// The user declined the call; it never ran.
    Declined {
        /// The user's reason, if given.
        reason: Option<String>,
    },
    /// The call was cancelled.
    Cancelled {
        /// Before or during execution.
        phase: CancelPhase,
        /// Whether `on_cancel` handed back a partial result.
        partial: bool,
        /// Who cancelled.
        reason: CancelReason,
    },
    /// The call ran past its timeout and was stopped.
    TimedOut {
        /// Whether `on_cancel` handed back a partial result.
        partial: bool,
    },
}

impl ToolCallState {
    /// Whether the model sees this result as an error (spec Y2).
    pub fn is_error(&self) -> bool {
        !matches!(self, ToolCallState::Completed)
    }

    /// A short name: `completed`, `failed`, `declined`, `cancelled`, `timed_out`.
    pub fn name(&self) -> &'static str {
        match self {
            ToolCallState::Completed => "completed",
            ToolCallState::Failed => "failed",
            ToolCallState::Declined { .. } => "declined",
            ToolCallState::Cancelled { .. } => "cancelled",
            ToolCallState::TimedOut { .. } => "timed_out",
        }
    }
}

/// Why a running call's token was cancelled, as its body can ask ([`ToolContext::cancel_cause`](crate::tool::ToolContext::cancel_cause)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelCause {
    /// The user cancelled this call.
    User,
    /// The whole reply was cancelled.
    Reply,
    /// The agent stopped.
    Restart,
    /// The reply reached its budget.
    Budget,
    /// The call ran past its timeout.
    TimedOut {
        /// The timeout that fired.
        #[serde(rename = "after_ms", with = "crate::protocol::duration_ms")]
        after: Duration,
    },
}

impl CancelCause {
    /// The cancel reason, or `None` for a timeout.
    pub fn reason(self) -> Option<CancelReason> {
        match self {
            CancelCause::User => Some(CancelReason::User),
            CancelCause::Reply => Some(CancelReason::Reply),
            CancelCause::Restart => Some(CancelReason::Restart),
            CancelCause::Budget => Some(CancelReason::Budget),
            CancelCause::TimedOut { .. } => None,
        }
    }
}

impl From<CancelReason> for CancelCause {
    fn from(reason: CancelReason) -> Self {
        match reason {
            CancelReason::User => CancelCause::User,
            CancelReason::Reply => CancelCause::Reply,
            CancelReason::Restart => CancelCause::Restart,
            CancelReason::Budget => CancelCause::Budget,
        }
    }
}

/// What a cancel request achieved (spec C1-C5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The cancel was accepted now.
    Cancelled,
    /// It had been cancelled already; nothing more happens.
    AlreadyCancelled,
    /// It had already ended in this state (for a reply: it was not running); nothing changes.
    AlreadyFinished(Option<ToolCallState>),
    /// No call with this id is known in this session.
    NotFound,
    /// The call's timeout fired first (T3): it is being stopped as `TimedOut`, and this cancel
    /// changes nothing. Whether `on_cancel` handed back a partial result is not known yet; the
    /// final state comes with its `ToolFinished`.
    AlreadyTimingOut,
}
