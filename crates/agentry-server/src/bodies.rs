//! The JSON bodies of the API's requests and answers. The routes read and answer with these
//! types, and the OpenAPI document (`openapi.rs`) is generated from them, so that the document
//! and the answers cannot drift apart.

use agentry::message::Msg;
use agentry_store::{CallRecord, PendingApproval, SessionInfo};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/sessions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    /// A name, unique among the caller's sessions: a line of text, not only spaces, without control
    /// characters.
    #[schema(
        min_length = 1,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
}

/// `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMessage {
    /// What the user says: not only white space. (The patterns spell the white space out rather
    /// than use `\s`, whose meaning differs between regex dialects.)
    #[schema(
        min_length = 1,
        pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    pub text: String,
    /// When a reply runs, add the message to it instead of waiting for its end: it joins the
    /// conversation before the reply's next model request, and running tools go on. When none
    /// runs, the message starts a reply as usual.
    #[serde(default)]
    pub steer: bool,
}

/// A session as listed.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionSummary {
    pub id: String,
    pub name: String,
    /// RFC 3339.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// RFC 3339.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
    pub message_count: u64,
    /// Whether a reply runs now.
    pub replying: bool,
}

impl SessionSummary {
    /// The summary of the session `info`.
    pub fn new(info: &SessionInfo, replying: bool) -> Self {
        SessionSummary {
            id: info.id.to_string(),
            name: info.name.clone(),
            created_at: info.created_at,
            updated_at: info.updated_at,
            message_count: info.message_count,
            replying,
        }
    }
}

/// `GET /v1/sessions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
}

/// `GET /v1/sessions/{id}`: the summary's fields and the session's content.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionDetail {
    #[serde(flatten)]
    pub summary: SessionSummary,
    /// The messages, in order (the protocol's `Msg`).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Msg>,
    /// A record per tool call (state, decision, times).
    #[schema(value_type = Vec<Object>)]
    pub calls: Vec<CallRecord>,
    /// Calls waiting for a decision, with the question.
    #[schema(value_type = Vec<Object>)]
    pub pending_approvals: Vec<PendingApproval>,
    /// The id of the session's last event (0 before any): stream events after it.
    pub last_event_id: u64,
    /// The session's current plan (with `--plan`), as `plan_changed` events carry it; absent
    /// when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub plan: Option<serde_json::Value>,
}

/// `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplyStarted {
    /// The reply's events come after this event id.
    pub events_after: u64,
    /// The message was added to the running reply (`steer`) rather than starting one.
    pub steered: bool,
}

/// The answer to a cancel or a decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct Outcome {
    pub outcome: OutcomeKind,
}

/// What a cancel or a decision did.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// The call or reply is being cancelled.
    Cancelled,
    /// It was cancelled before: nothing changed.
    AlreadyCancelled,
    /// The call's time ran out before the cancel: it ends as timed out.
    TimingOut,
    /// The approval was answered.
    Decided,
    /// The message was added to the running reply.
    Steered,
    /// The input request was answered.
    Answered,
    /// Sent to the node that runs the reply, which has not answered yet (it may be being taken
    /// over): it is applied as soon as the reply's node (or the one taking it over) takes it.
    Queued,
}

/// A tool as the model sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    /// Its arguments' JSON schema.
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
    pub requires_approval: bool,
}

/// `GET /v1/tools`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: &'static str,
}

/// What every error answer holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable: `session_not_found`, `reply_running`, `not_pending`, `bad_body`, ...
    pub code: String,
    /// For people.
    pub message: String,
}

/// An error answer (4xx, 5xx); nothing was changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// An approval decision: `{"decision": "approve"}`, `{"decision": "decline", "reason": "..."}`.
/// It describes the body; the core's `ApprovalDecision` reads it.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct DecisionBody {
    /// `approve`, `approve_for_session`, `decline`, `decline_for_session` or `decline_and_stop`.
    #[schema(pattern = "^(approve|approve_for_session|decline|decline_for_session|decline_and_stop)$")]
    pub decision: String,
    /// For a decline: what the model reads.
    pub reason: Option<String>,
}

/// The answer to an input request (`input_requested`: a form a call's MCP server asks for). It
/// describes the body; the core's `InputAnswer` reads it.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct InputBody {
    /// `accept` (with `content`), `decline` or `cancel`.
    #[schema(pattern = "^(accept|decline|cancel)$")]
    pub action: String,
    /// With `accept`: the form's values, an object matching the request's `schema`.
    pub content: Option<serde_json::Value>,
}
