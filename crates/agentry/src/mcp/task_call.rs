//! A tool call run as an MCP task (spec 2025-11-25, "Tasks"): `tools/call` with a `task`
//! parameter answers at once with the task; `tasks/result` waits for the tool's result (and
//! carries what the server asks meanwhile, an elicitation say); `tasks/get` is polled at the
//! server's `pollInterval` for the status message, shown as progress; a cancel sends
//! `tasks/cancel`.
//! The requests themselves are in `task_wire.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::ServerResult;
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::client::McpClient;
use super::result::{Chunks, map_result};
use super::task_wire::{McpTask, created_task, custom, get_task, plain_result};
use crate::tool::{ToolError, ToolResponse};

/// The key of an MCP task in a call's resume point.
pub(crate) const RESUME_KEY: &str = "mcp_task";

/// How long a task's result is kept by the server after it ends, asked for at creation: long
/// enough to find it again after a restart.
pub(crate) const TASK_TTL_MS: u64 = 60 * 60 * 1000;
/// How long a cancelled call still waits for the task it asked for, to cancel it.
const CREATE_WAIT_AFTER_CANCEL: Duration = Duration::from_secs(10);

/// Sends `tasks/cancel` once, as soon as the task's id is known: from `on_cancel` (off the
/// tool's task, so it spawns on the runtime it was made on) or from the call itself.
pub(crate) struct TaskCancel {
    runtime: tokio::runtime::Handle,
    peer: Peer<RoleClient>,
    state: Mutex<CancelState>,
}

#[derive(Default)]
struct CancelState {
    task_id: Option<String>,
    wanted: bool,
    sent: bool,
}

impl TaskCancel {
    pub(crate) fn new(peer: Peer<RoleClient>) -> Arc<TaskCancel> {
        Arc::new(TaskCancel {
            runtime: tokio::runtime::Handle::current(),
            peer,
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task exists: cancelled at once if the call was cancelled before.
    pub(crate) fn created(&self, task_id: &str) {
        let mut state = self.lock();
        state.task_id = Some(task_id.to_owned());
        self.send_if_due(&mut state);
    }

    /// The call is cancelled: the task is, now or once it exists.
    pub(crate) fn cancel(&self) {
        let mut state = self.lock();
        state.wanted = true;
        self.send_if_due(&mut state);
    }

    fn send_if_due(&self, state: &mut CancelState) {
        let Some(task_id) = state.task_id.clone().filter(|_| state.wanted && !state.sent) else {
            return;
        };
        state.sent = true;
        let peer = self.peer.clone();
        self.runtime.spawn(async move {
            if let Err(e) = peer
                .send_request(custom("tasks/cancel", json!({ "taskId": task_id })))
                .await
            {
                tracing::warn!(task = %task_id, error = %e, "tasks/cancel failed");
            }
        });
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One call of an MCP tool that runs as a task.
pub(super) struct TaskCall<'a> {
    pub(super) client: &'a McpClient,
    /// The tool's name on the server.
    pub(super) tool: &'a str,
}

impl TaskCall<'_> {
    fn server(&self) -> &str {
        self.client.name()
    }

    /// Runs the call as a task, start to result.
    pub(super) async fn run(&self, args: &Map<String, Value>, ctx: &crate::tool::ToolContext, tx: &Chunks) {
        let peer = match self.client.peer().await {
            Ok(peer) => peer,
            Err(e) => {
                let _ = tx.send(Err(ToolError::msg(format!("The call was not sent: {e}"))));
                return;
            }
        };
        if ctx.is_cancelled() {
            return;
        }
        let cancel = TaskCancel::new(peer.clone());
        {
            let cancel = Arc::clone(&cancel);
            ctx.set_bounded_on_cancel(move || {
                cancel.cancel();
                None
            });
        }
        // What the server asks while the task runs is asked through this call.
        let _in_flight = self.client.in_flight(ctx.clone());
        let Some(task) = self.create(&peer, args, ctx, tx, &cancel).await else {
            return;
        };
        cancel.created(&task.task_id);
        // Over HTTP the task outlives this process: kept with the call, it is found again when
        // the session resumes. A stdio server stops with us, and its tasks with it.
        if let Some(session) = self.client.task_supports().session() {
            ctx.set_resume_point(json!({
                RESUME_KEY: { "server": self.server(), "task_id": task.task_id, "session": &*session }
            }))
            .await;
        }
        self.follow(&peer, task, ctx, tx, &cancel).await;
    }

    /// Finds the task an earlier process started for this call again (its resume point), and
    /// follows it to its result.
    pub(super) async fn resume(&self, token: &Value, ctx: &crate::tool::ToolContext, tx: &Chunks) {
        let point = &token[RESUME_KEY];
        let (Some(task_id), Some(session)) = (point["task_id"].as_str(), point["session"].as_str()) else {
            let _ = tx.send(Err(ToolError::msg(format!(
                "the call's resume point is not an MCP task of \"{}\"; it cannot be found again",
                self.server()
            ))));
            return;
        };
        self.client.task_supports().adopt(task_id, session);
        let peer = match self.client.peer().await {
            Ok(peer) => peer,
            Err(e) => {
                let _ = tx.send(Err(ToolError::msg(format!(
                    "task {task_id} could not be found again: {e}; it may still run on the server"
                ))));
                return;
            }
        };
        let cancel = TaskCancel::new(peer.clone());
        cancel.created(task_id);
        {
            let cancel = Arc::clone(&cancel);
            ctx.set_bounded_on_cancel(move || {
                cancel.cancel();
                None
            });
        }
        let _in_flight = self.client.in_flight(ctx.clone());
        let task = match get_task(&peer, task_id).await {
            Ok(task) => task,
            Err(e) => {
                let _ = tx.send(Err(ToolError::msg(format!(
                    "task {task_id} on the MCP server \"{}\" could not be found again after the restart: {e}",
                    self.server()
                ))));
                return;
            }
        };
        // The call's record keeps its resume point until the result closes it.
        self.follow(&peer, task, ctx, tx, &cancel).await;
        if !ctx.is_cancelled() {
            // A cancel's tasks/cancel may still be on its way in the old session.
            self.client.task_supports().forget(task_id);
        }
    }

    /// `tools/call` with the `task` parameter: the task, or `None` when the call ended here.
    async fn create(
        &self,
        peer: &Peer<RoleClient>,
        args: &Map<String, Value>,
        ctx: &crate::tool::ToolContext,
        tx: &Chunks,
        cancel: &TaskCancel,
    ) -> Option<McpTask> {
        let params = json!({
            "name": self.tool,
            "arguments": args,
            "task": { "ttl": TASK_TTL_MS },
        });
        let request = peer.send_request(custom("tools/call", params));
        tokio::pin!(request);
        let answer = tokio::select! {
            answer = &mut request => answer,
            () = ctx.cancelled() => {
                cancel.cancel();
                // Wait a little for the task, only to cancel it.
                match tokio::time::timeout(CREATE_WAIT_AFTER_CANCEL, request).await {
                    Ok(Ok(answer)) => {
                        if let Some(task) = created_task(answer) {
                            cancel.created(&task.task_id);
                        }
                    }
                    _ => tracing::warn!(tool = %self.tool, "a task cancelled while it was created may go on"),
                }
                return None;
            }
        };
        let failure = match answer {
            Ok(answer) => match created_task(answer.clone()) {
                Some(task) => return Some(task),
                // A server may answer a task request with the result itself.
                None => match plain_result(answer) {
                    Some(result) => {
                        let _ = tx.send(Ok(map_result(result)));
                        return None;
                    }
                    None => format!(
                        "the MCP server \"{}\" answered a task request with neither a task nor a result",
                        self.server()
                    ),
                },
            },
            Err(ServiceError::McpError(error)) => format!(
                "the MCP server \"{}\" refused the call: {} (JSON-RPC error {})",
                self.server(),
                error.message,
                error.code.0
            ),
            Err(e) => format!(
                "the MCP server \"{}\" did not take the call: {}",
                self.server(),
                super::tidy(&e.to_string())
            ),
        };
        let _ = tx.send(Err(ToolError::msg(failure)));
        None
    }

    /// Polls the task for its status while `tasks/result` waits for its result.
    async fn follow(
        &self,
        peer: &Peer<RoleClient>,
        task: McpTask,
        ctx: &crate::tool::ToolContext,
        tx: &Chunks,
        cancel: &TaskCancel,
    ) {
        let (status_tx, mut statuses) = mpsc::unbounded_channel();
        let _poller = AbortOnDrop(tokio::spawn(poll(peer.clone(), task.clone(), status_tx)));
        let mut shown = ShownStatus::default();
        shown.show(ctx, tx, &task);
        let result = peer.send_request(custom("tasks/result", json!({ "taskId": task.task_id })));
        tokio::pin!(result);
        let mut last = task;
        loop {
            tokio::select! {
                biased;
                () = ctx.cancelled() => {
                    cancel.cancel();
                    return;
                }
                Some(state) = statuses.recv() => {
                    shown.show(ctx, tx, &state);
                    last = state;
                }
                answer = &mut result => {
                    let _ = tx.send(self.task_result(answer, &last));
                    return;
                }
            }
        }
    }

    fn task_result(
        &self,
        answer: Result<ServerResult, ServiceError>,
        last: &McpTask,
    ) -> Result<ToolResponse, ToolError> {
        let about = last
            .status_message
            .as_deref()
            .map(|m| format!(" (its last status: {m})"))
            .unwrap_or_default();
        match answer {
            Ok(answer) => match plain_result(answer) {
                Some(result) => Ok(map_result(result)),
                None => Err(ToolError::msg(format!(
                    "the MCP server \"{}\" ended task {} without a tool result{about}",
                    self.server(),
                    last.task_id
                ))),
            },
            Err(ServiceError::McpError(error)) => Err(ToolError::msg(format!(
                "task {} on the MCP server \"{}\" failed: {}{about}",
                last.task_id,
                self.server(),
                error.message
            ))),
            Err(e) => Err(ToolError::msg(format!(
                "the MCP server \"{}\" was lost while task {} ran: {}; the task may have partly run{about}",
                self.server(),
                last.task_id,
                super::tidy(&e.to_string())
            ))),
        }
    }
}

/// The status messages shown so far, as one cumulative chunk.
#[derive(Default)]
struct ShownStatus {
    lines: Vec<String>,
}

impl ShownStatus {
    fn show(&mut self, ctx: &crate::tool::ToolContext, tx: &Chunks, state: &McpTask) {
        let text = match &state.status_message {
            Some(message) => format!("{message} ({})", state.status.replace('_', " ")),
            None => format!("task {}", state.status.replace('_', " ")),
        };
        // Every poll renews a timeout progress may extend: a task that answers is alive.
        ctx.report(&text, Some("progress"));
        if let Some(message) = &state.status_message
            && self.lines.last() != Some(message)
        {
            self.lines.push(message.clone());
            let _ = tx.send(Ok(ToolResponse::partial(self.lines.join("\n"))));
        }
    }
}

/// `tasks/get` every poll interval until the task ends; each state goes to `states`.
async fn poll(peer: Peer<RoleClient>, task: McpTask, states: mpsc::UnboundedSender<McpTask>) {
    let mut every = task.poll_every();
    loop {
        tokio::time::sleep(every).await;
        match get_task(&peer, &task.task_id).await {
            Ok(state) => {
                every = state.poll_every();
                let ended = state.is_terminal();
                if states.send(state).is_err() || ended {
                    return;
                }
            }
            Err(e) => tracing::debug!(task = %task.task_id, error = %e, "tasks/get failed"),
        }
    }
}
