//! The 2025-11-25 tasks requests (SEP-1686) on an rmcp peer: rmcp 3.11 types a later draft, so
//! they go out as custom requests and their answers are read as plain JSON.

use std::time::Duration;

use rmcp::model::{CallToolResult, ClientRequest, CustomRequest, ServerResult};
use rmcp::{Peer, RoleClient};
use serde::Deserialize;
use serde_json::{Value, json};

/// The bounds on the server's suggested poll interval.
const POLL_MIN: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(5);
/// The most `tasks/list` pages read.
const MAX_TASK_PAGES: usize = 100;

/// An MCP task as the server reports it (`tools/call`, `tasks/get`, `tasks/list`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpTask {
    /// The server's id for it.
    pub task_id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// What it is doing, in the server's words.
    #[serde(default)]
    pub status_message: Option<String>,
    /// How often the server suggests to poll it, in milliseconds.
    #[serde(default)]
    pub poll_interval: Option<u64>,
}

impl McpTask {
    /// Whether it ended (completed, failed or cancelled).
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }

    pub(super) fn poll_every(&self) -> Duration {
        Duration::from_millis(self.poll_interval.unwrap_or(1000)).clamp(POLL_MIN, POLL_MAX)
    }
}

pub(super) fn custom(method: &str, params: Value) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)))
}

fn raw(result: ServerResult) -> Value {
    match result {
        ServerResult::CustomResult(custom) => custom.0,
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

/// `tasks/get`: the task's state now.
pub(crate) async fn get_task(peer: &Peer<RoleClient>, task_id: &str) -> Result<McpTask, String> {
    let answer = peer
        .send_request(custom("tasks/get", json!({ "taskId": task_id })))
        .await
        .map_err(|e| super::tidy(&e.to_string()))?;
    serde_json::from_value(raw(answer)).map_err(|e| format!("a task state that cannot be read: {e}"))
}

/// `tasks/list`: the tasks the server keeps for this session, every page.
pub(crate) async fn list_tasks(peer: &Peer<RoleClient>) -> Result<Vec<McpTask>, String> {
    let mut tasks = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TASK_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let mut page = raw(peer
            .send_request(custom("tasks/list", params))
            .await
            .map_err(|e| super::tidy(&e.to_string()))?);
        let listed: Vec<McpTask> =
            serde_json::from_value(page.get_mut("tasks").map(Value::take).unwrap_or_default())
                .map_err(|e| format!("a task list that cannot be read: {e}"))?;
        tasks.extend(listed);
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(tasks),
        }
    }
    Err("the server's task list did not end".into())
}

/// The task in a `tools/call` answer (`{"task": {...}}`).
pub(super) fn created_task(answer: ServerResult) -> Option<McpTask> {
    let mut raw = raw(answer);
    serde_json::from_value(raw.get_mut("task")?.take()).ok()
}

/// A tool result, however rmcp typed it.
pub(super) fn plain_result(answer: ServerResult) -> Option<CallToolResult> {
    match answer {
        ServerResult::CallToolResult(result) => Some(result),
        other => {
            let raw = raw(other);
            (raw.get("content").is_some() || raw.get("structuredContent").is_some())
                .then(|| serde_json::from_value(raw).ok())
                .flatten()
        }
    }
}
