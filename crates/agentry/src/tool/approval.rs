//! Approval of tool calls before they run (spec `cancellation.md` 3.2).
//!
//! A tool that requires approval is shown to the user before its body may run. A decline is
//! not a cancel: the model is told the user declined, and the reply goes on.

use serde::{Deserialize, Serialize};

pub use crate::protocol::{ApprovalDecision, ApprovalRequest, DecisionSource};

/// What an approved tool's body is told (spec A8). The body never runs unless
/// `primary_confirmed` is true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserAction {
    /// The user (or auto-approval) approved.
    pub primary_confirmed: bool,
    /// The user declined (never true for a running body).
    pub secondary_confirmed: bool,
    /// The approval was automatic (auto-approval or a session grant).
    pub automatic: bool,
}

/// How a session grant matches later calls (spec A12).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionApprovalScope {
    /// Same tool and the same arguments (canonical JSON).
    #[default]
    SameArguments,
    /// Same tool, any arguments.
    AnyArguments,
}
