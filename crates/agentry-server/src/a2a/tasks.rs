//! The A2A tasks of this server: each one reply of a session's agent (its context), followed
//! from the reply's events, with the updates its streams get.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agentry::CallId;
use agentry::agent::{AgentEvent, EventStream, ReplySoFar, StopReason, status_lines};
use agentry::message::truncate_chars;
use agentry_store::SessionId;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::wire::{Message, TaskState, new_id, now};

/// How many finished tasks are kept for `GetTask`; the oldest go first.
const FINISHED_KEPT: usize = 1_000;
/// Longest tool result text in a status message.
const RESULT_CHARS: usize = 500;

/// The tasks of this server, by id.
#[derive(Default)]
pub(crate) struct Tasks {
    tasks: Mutex<HashMap<String, Arc<TaskEntry>>>,
    /// Finished task ids, oldest first.
    finished: Mutex<std::collections::VecDeque<String>>,
}

impl Tasks {
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskEntry>> {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    pub(crate) fn insert(&self, task: Arc<TaskEntry>) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(task.id.clone(), task);
    }

    /// The tasks whose context satisfies `visible`, newest first.
    pub(crate) fn list(&self, visible: impl Fn(&TaskEntry) -> bool) -> Vec<Arc<TaskEntry>> {
        let mut tasks: Vec<Arc<TaskEntry>> = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|t| visible(t))
            .cloned()
            .collect();
        tasks.sort_by_key(|t| std::cmp::Reverse(t.created));
        tasks
    }

    /// Task `id` is over: kept for a while, then forgotten.
    fn finished(&self, id: &str) {
        let forget = {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            finished.push_back(id.to_owned());
            (finished.len() > FINISHED_KEPT)
                .then(|| finished.pop_front())
                .flatten()
        };
        if let Some(old) = forget {
            self.tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&old);
        }
    }
}

/// One task.
pub(crate) struct TaskEntry {
    pub id: String,
    /// Its context: the session whose agent runs it.
    pub context: SessionId,
    /// The user it belongs to (`None`: the server's own).
    pub owner: Option<String>,
    created: std::time::Instant,
    data: Mutex<TaskData>,
    /// The task's state, for those waiting for it to settle.
    state: watch::Sender<TaskState>,
    /// Each change as a stream event (`statusUpdate`, `artifactUpdate`).
    updates: broadcast::Sender<Value>,
}

struct TaskData {
    state: TaskState,
    status_message: Option<Message>,
    timestamp: Option<String>,
    history: Vec<Message>,
    artifacts: Vec<Value>,
    /// The question waiting for the client's answer (input required).
    pending: Option<Pending>,
}

/// A question a task waits on.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The approval's call, or the input request.
    pub call_id: CallId,
    /// Whether it is a form (an input request) rather than an approval.
    pub form: bool,
    /// The status message that asked it, to ask it again.
    text: String,
    data: Value,
}

impl TaskEntry {
    /// A submitted task of `context` for the user message `message`.
    pub(crate) fn new(context: SessionId, mut message: Message, owner: Option<String>) -> Arc<Self> {
        let id = new_id();
        message.task_id = Some(id.clone());
        message.context_id = Some(context.as_str().to_owned());
        Arc::new(TaskEntry {
            id,
            context,
            owner,
            created: std::time::Instant::now(),
            data: Mutex::new(TaskData {
                state: TaskState::Submitted,
                status_message: None,
                timestamp: None,
                history: vec![message],
                artifacts: Vec::new(),
                pending: None,
            }),
            state: watch::channel(TaskState::Submitted).0,
            updates: broadcast::channel(256).0,
        })
    }

    fn data(&self) -> std::sync::MutexGuard<'_, TaskData> {
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn state(&self) -> TaskState {
        self.data().state
    }

    /// The question waiting for the client's answer, if the task needs input.
    pub(crate) fn pending(&self) -> Option<Pending> {
        self.data().pending.clone()
    }

    /// The client's answer did not do: the task asks its question again.
    pub(crate) fn ask_again(&self, pending: &Pending) {
        self.set_status(
            TaskState::InputRequired,
            Some(&pending.text),
            Some(pending.data.clone()),
        );
    }

    /// The task as the protocol shows it, with at most `history` messages of its history.
    pub(crate) fn to_json(&self, history: Option<usize>) -> Value {
        let data = self.data();
        let mut status = json!({ "state": data.state.wire() });
        if let Some(message) = &data.status_message {
            status["message"] = json!(message);
        }
        if let Some(timestamp) = &data.timestamp {
            status["timestamp"] = json!(timestamp);
        }
        let mut task = json!({ "id": self.id, "contextId": self.context.as_str(), "status": status });
        if !data.artifacts.is_empty() {
            task["artifacts"] = json!(data.artifacts);
        }
        let keep = history.unwrap_or(usize::MAX).min(data.history.len());
        if keep > 0 {
            task["history"] = json!(data.history[data.history.len() - keep..]);
        }
        task
    }

    /// Watches the task's state.
    pub(crate) fn watch(&self) -> watch::Receiver<TaskState> {
        self.state.subscribe()
    }

    /// The task's updates from now on.
    pub(crate) fn updates(&self) -> broadcast::Receiver<Value> {
        self.updates.subscribe()
    }

    /// A follow-up message of the client answered the pending question: the task works again.
    pub(crate) fn answered(&self, mut message: Message) {
        message.task_id = Some(self.id.clone());
        message.context_id = Some(self.context.as_str().to_owned());
        self.data().history.push(message);
        self.set_status(TaskState::Working, None, None);
    }

    /// A message of the client joined the running task (it steers the reply).
    pub(crate) fn added(&self, mut message: Message) {
        message.task_id = Some(self.id.clone());
        message.context_id = Some(self.context.as_str().to_owned());
        self.data().history.push(message);
    }

    /// Moves the task to `state` with `message` from the agent, and tells its streams.
    fn set_status(&self, state: TaskState, text: Option<&str>, data: Option<Value>) {
        let update = {
            let mut task = self.data();
            let message = text.map(|text| Message::agent(text, data, &self.id, self.context.as_str()));
            // The status message replaced goes into the history, as the SDKs keep it.
            if let Some(previous) = task.status_message.take() {
                task.history.push(previous);
            }
            task.state = state;
            task.status_message = message.clone();
            let timestamp = now();
            task.timestamp = Some(timestamp.clone());
            let mut status = json!({ "state": state.wire(), "timestamp": timestamp });
            if let Some(message) = message {
                status["message"] = json!(message);
            }
            json!({ "statusUpdate": { "taskId": self.id, "contextId": self.context.as_str(), "status": status } })
        };
        let _ = self.updates.send(update);
        self.state.send_replace(state);
    }

    fn add_artifact(&self, text: &str) {
        let artifact = json!({ "artifactId": new_id(), "name": "answer", "parts": [{ "text": text }] });
        self.data().artifacts.push(artifact.clone());
        let update = json!({ "artifactUpdate": {
            "taskId": self.id, "contextId": self.context.as_str(), "artifact": artifact, "lastChunk": true
        }});
        let _ = self.updates.send(update);
    }
}

/// Follows the reply of `task` from its agent's `events` until it ends, updating the task.
pub(crate) async fn follow(tasks: Arc<Tasks>, task: Arc<TaskEntry>, mut events: EventStream, agent: String) {
    task.set_status(TaskState::Working, None, None);
    let mut so_far = ReplySoFar::default();
    while let Some(event) = events.recv().await {
        so_far.observe(&event);
        for line in status_lines(&event, RESULT_CHARS) {
            task.set_status(TaskState::Working, Some(&line), None);
        }
        // What a running tool says of itself, as the MCP server's progress says it.
        if let AgentEvent::ToolProgress { message, .. } = &event {
            task.set_status(
                TaskState::Working,
                Some(&truncate_chars(message, RESULT_CHARS)),
                None,
            );
        }
        match event {
            AgentEvent::ApprovalRequested {
                call_id,
                name,
                input,
                request,
                automatic: false,
                ..
            } => {
                let text = format!(
                    "{} The agent `{agent}` asks to run `{name}` with {}. Answer \"yes\" to allow it or \"no\" \
                     to decline (a reason may follow).",
                    request.message,
                    truncate_chars(&input.to_string(), 1_000)
                );
                let data =
                    json!({ "approval": { "callId": call_id.as_str(), "tool": name, "arguments": input } });
                task.data().pending = Some(Pending {
                    call_id,
                    form: false,
                    text: text.clone(),
                    data: data.clone(),
                });
                task.set_status(TaskState::InputRequired, Some(&text), Some(data));
            }
            AgentEvent::InputRequested {
                call_id,
                name,
                message,
                schema,
                ..
            } => {
                let text = format!(
                    "{name} asks: {message} Answer with a data part holding the form's values (its schema is in \
                     this message's data), or \"decline\" or \"cancel\"."
                );
                let data = json!({ "input": { "callId": call_id.as_str(), "schema": schema } });
                task.data().pending = Some(Pending {
                    call_id,
                    form: true,
                    text: text.clone(),
                    data: data.clone(),
                });
                task.set_status(TaskState::InputRequired, Some(&text), Some(data));
            }
            AgentEvent::InputAnswered { call_id, .. } => {
                let mut data = task.data();
                if data.pending.as_ref().is_some_and(|p| p.call_id == call_id) {
                    data.pending = None;
                }
            }
            AgentEvent::ApprovalResolved { call_id, .. } | AgentEvent::ApprovalWithdrawn { call_id, .. } => {
                let mut data = task.data();
                if data.pending.as_ref().is_some_and(|p| p.call_id == call_id) {
                    data.pending = None;
                }
            }
            AgentEvent::ReplyFinished { stop_reason, .. } => {
                finish(&task, &stop_reason, &so_far, &agent);
                break;
            }
            _ => {}
        }
    }
    if !task.state().is_terminal() {
        // The agent went away without a last event (its session was unloaded mid-reply).
        task.set_status(TaskState::Failed, Some("the reply ended without an answer"), None);
    }
    tasks.finished(&task.id);
}

fn finish(task: &TaskEntry, stop_reason: &StopReason, so_far: &ReplySoFar, agent: &str) {
    match stop_reason {
        StopReason::Cancelled | StopReason::BudgetReached(_) => {
            task.set_status(TaskState::Canceled, Some(&so_far.cancelled_text(agent)), None);
        }
        StopReason::Failed(reason) => {
            task.set_status(TaskState::Failed, Some(reason), None);
        }
        _ => {
            let answer = so_far.answer().to_owned();
            task.add_artifact(&answer);
            task.set_status(TaskState::Completed, Some(&answer), None);
        }
    }
}
