//! Approval requests, decisions and who took them (spec `cancellation.md` 3.2).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the user is asked (spec A5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// A short title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What will happen and why approval is needed.
    pub message: String,
    /// Something to look at before deciding (e.g. the text a file would get).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Label of the approve button (default "Allow").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_label: Option<String>,
    /// Label of the decline button (default "Decline").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_label: Option<String>,
}

impl ApprovalRequest {
    /// A request with just a message.
    pub fn new(message: impl Into<String>) -> Self {
        ApprovalRequest {
            message: message.into(),
            ..ApprovalRequest::default()
        }
    }

    /// The generic request used when a tool has no request function or it failed (A6).
    pub fn generic(tool: &str, args: &Map<String, Value>) -> Self {
        ApprovalRequest {
            title: Some(format!("Run {tool}?")),
            message: format!(
                "The assistant wants to run the tool \"{tool}\" with these arguments:\n{}",
                serde_json::to_string_pretty(args)
                    .unwrap_or_else(|_| Value::Object(args.clone()).to_string())
            ),
            ..ApprovalRequest::default()
        }
    }
}

/// The user's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run this call.
    Approve,
    /// Run this call and, in this session, matching calls without asking (A12).
    ApproveForSession,
    /// Do not run this call.
    Decline {
        /// Why, for the model.
        reason: Option<String>,
    },
    /// Do not run this call nor, in this session, matching calls (A13).
    DeclineForSession {
        /// Why, for the model.
        reason: Option<String>,
    },
    /// Do not run this call, and stop the whole reply (A11).
    DeclineAndStop {
        /// Why, for the model.
        reason: Option<String>,
    },
}

/// Where a decision came from (spec Y3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionSource {
    /// The user decided.
    User,
    /// Auto-approval (agent setting and tool flag).
    Auto,
    /// A grant stored earlier in the session.
    SessionGrant,
    /// Nobody could decide (no listener, closed channel, timeout): declined, fail-closed.
    NoDecision,
    /// A permission rule of the user's configuration (A20).
    Rule,
}

impl DecisionSource {
    /// Whether nobody was asked: anything but the user's own answer.
    pub fn is_automatic(self) -> bool {
        self != DecisionSource::User
    }
}
