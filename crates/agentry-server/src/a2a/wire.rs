//! A2A v1.0 on the wire: JSON-RPC 2.0 envelopes, and the protocol's objects in the protobuf
//! JSON mapping its SDKs use (camelCase names, enum names as strings such as
//! `TASK_STATE_COMPLETED`, parts without a `kind`, empty fields left out).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The protocol version served.
pub(crate) const PROTOCOL_VERSION: &str = "1.0";

/// A role of a message's author.
pub(crate) const ROLE_USER: &str = "ROLE_USER";
pub(crate) const ROLE_AGENT: &str = "ROLE_AGENT";

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
}

impl TaskState {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Failed => "TASK_STATE_FAILED",
        }
    }

    /// Nothing more happens to the task.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed
        )
    }

    /// The task waits for its client, or is over: a blocking send answers, a stream ends.
    pub(crate) fn is_settled(self) -> bool {
        self.is_terminal() || self == TaskState::InputRequired
    }
}

/// A message as sent and shown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Message {
    #[serde(default)]
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub parts: Vec<Value>,
}

impl Message {
    /// An agent message with one text part (and a data part, when given).
    pub(crate) fn agent(text: &str, data: Option<Value>, task_id: &str, context_id: &str) -> Self {
        let mut parts = vec![json!({ "text": text })];
        if let Some(data) = data {
            parts.push(json!({ "data": data }));
        }
        Message {
            message_id: new_id(),
            context_id: Some(context_id.to_owned()),
            task_id: Some(task_id.to_owned()),
            role: ROLE_AGENT.to_owned(),
            parts,
        }
    }

    /// The text of the message: its text parts, and its data parts as JSON, one per line.
    pub(crate) fn text(&self) -> String {
        let mut lines = Vec::new();
        for part in &self.parts {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                lines.push(text.to_owned());
            } else if let Some(data) = part.get("data") {
                lines.push(data.to_string());
            } else if let Some(url) = part.get("url").and_then(Value::as_str) {
                lines.push(url.to_owned());
            }
        }
        lines.join("\n")
    }
}

/// A new id (a UUID, as the SDKs make them).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Now, as the protocol's timestamps are written (RFC 3339, UTC, `Z`).
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A JSON-RPC request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    #[serde(default)]
    pub jsonrpc: Value,
    #[serde(default)]
    pub id: Value,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Value,
}

/// A JSON-RPC error of the protocol.
#[derive(Debug, Clone)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
    pub(crate) fn parse(message: impl Into<String>) -> Self {
        Self::new(-32700, message)
    }
    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, message)
    }
    pub(crate) fn method_not_found() -> Self {
        Self::new(-32601, "Method not found")
    }
    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, message)
    }
    pub(crate) fn task_not_found(id: &str) -> Self {
        Self::new(-32001, format!("Task {id} not found"))
    }
    pub(crate) fn not_cancelable() -> Self {
        Self::new(-32002, "Task cannot be canceled")
    }
    pub(crate) fn push_not_supported() -> Self {
        Self::new(-32003, "Push notifications are not supported by the agent")
    }
    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(-32004, message)
    }
    pub(crate) fn version(version: &str) -> Self {
        Self::new(
            -32009,
            format!("A2A version '{version}' is not supported: this agent speaks {PROTOCOL_VERSION}"),
        )
    }
}

/// A JSON-RPC response carrying `result`.
pub(crate) fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// A JSON-RPC response carrying `error`.
pub(crate) fn error(id: &Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": error.code, "message": error.message } })
}
