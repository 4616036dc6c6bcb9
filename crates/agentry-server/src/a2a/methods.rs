//! The JSON-RPC methods of A2A, on the server's sessions.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentry::ReActAgent;
use agentry::agent::InputAnswer;
use agentry::message::Msg;
use agentry::tool::ApprovalDecision;
use agentry_store::SessionId;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::reply;
use super::tasks::{TaskEntry, follow};
use super::wire::{self, Message, ROLE_USER, RpcError, TaskState};
use crate::control::{Control, control};
use crate::state::AppState;
use crate::users::Caller;

/// How long a cancel waits for the reply to end before it answers with the task as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// One request: who asks, and its parameters.
pub(crate) struct Call {
    pub state: Arc<AppState>,
    pub caller: Caller,
    pub id: Value,
    pub params: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendParams {
    message: Message,
    #[serde(default)]
    configuration: SendConfiguration,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SendConfiguration {
    #[serde(default)]
    history_length: Option<i64>,
    #[serde(default)]
    return_immediately: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskParams {
    id: String,
    #[serde(default)]
    history_length: Option<i64>,
}

fn params<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, RpcError> {
    serde_json::from_value(value.clone())
        .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))
}

fn history(length: Option<i64>) -> Result<Option<usize>, RpcError> {
    match length {
        Some(n) if n < 0 => Err(RpcError::invalid_params("history length must be non-negative")),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        None => Ok(None),
    }
}

/// Task `id`, if the caller may see it (another user's task does not exist for them).
fn task_of(call: &Call, id: &str) -> Result<Arc<TaskEntry>, RpcError> {
    call.state
        .a2a
        .get(id)
        .filter(|task| call.caller.owns_as(task.owner.as_deref()))
        .ok_or_else(|| RpcError::task_not_found(id))
}

/// A message sent: a new task, or the answer to a task's question. Returns the task, whether
/// it is new, and its updates from before anything changed.
async fn start_or_answer(
    call: &Call,
    message: Message,
) -> Result<(Arc<TaskEntry>, bool, broadcast::Receiver<Value>), RpcError> {
    if message.role != ROLE_USER {
        return Err(RpcError::invalid_params("message.role must be ROLE_USER"));
    }
    let text = message.text();
    if text.trim().is_empty() {
        return Err(RpcError::invalid_params("the message has no text"));
    }
    if call.state.stopping.is_cancelled() {
        return Err(RpcError::internal("the server is stopping"));
    }
    match message.task_id.clone() {
        Some(task_id) => answer(call, &task_id, message).await,
        None => start(call, message, text).await,
    }
}

/// The client's answer to task `task_id`'s question.
async fn answer(
    call: &Call,
    task_id: &str,
    message: Message,
) -> Result<(Arc<TaskEntry>, bool, broadcast::Receiver<Value>), RpcError> {
    let task = task_of(call, task_id)?;
    if let Some(context) = &message.context_id
        && context != task.context.as_str()
    {
        return Err(RpcError::invalid_params(format!(
            "Context {context} does not match context {} of task {task_id}",
            task.context.as_str()
        )));
    }
    let state = task.state();
    if state.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "Task {task_id} is in terminal state: {}",
            state.wire()
        )));
    }
    let Some(pending) = task.pending() else {
        // A message to a working task steers its reply: the agent reads it before its next step.
        let updates = task.updates();
        let steer = Control::Steer { text: message.text() };
        control(&call.state, &task.context, steer).await.map_err(|e| {
            RpcError::unsupported(format!("Task {task_id} takes no message now: {}", e.message()))
        })?;
        task.added(message);
        return Ok((task, false, updates));
    };
    let call_id = pending.call_id.as_str().to_owned();
    let control_of_answer = match pending.form {
        true => Control::Answer {
            call_id,
            answer: input_answer(&message)?,
        },
        false => Control::Decide {
            call_id,
            decision: decision(&message)?,
        },
    };
    let updates = task.updates();
    task.answered(message);
    if let Err(e) = control(&call.state, &task.context, control_of_answer).await {
        // Not taken (a form that does not fit): the task asks again.
        task.ask_again(&pending);
        return Err(RpcError::invalid_params(format!(
            "the answer was not taken: {}",
            e.message()
        )));
    }
    Ok((task, false, updates))
}

/// A user's answer to a form: a data part with the values, or "decline" / "cancel".
fn input_answer(message: &Message) -> Result<InputAnswer, RpcError> {
    if let Some(values) = message
        .parts
        .iter()
        .find_map(|p| p.get("data").filter(|d| d.is_object()))
    {
        return Ok(InputAnswer::Accept(values.clone()));
    }
    let text = message.text();
    match text
        .trim()
        .to_lowercase()
        .trim_matches(|c: char| !c.is_alphanumeric())
    {
        "decline" | "no" => Ok(InputAnswer::Decline),
        "cancel" => Ok(InputAnswer::Cancel),
        _ => serde_json::from_str::<Value>(text.trim())
            .ok()
            .filter(Value::is_object)
            .map(InputAnswer::Accept)
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "the task asks for a form: send its values as a data part, or \"decline\"",
                )
            }),
    }
}

/// A user's answer to an approval question: "yes" (or a data part `{"approve": true}`), or
/// "no" and maybe a reason.
fn decision(message: &Message) -> Result<ApprovalDecision, RpcError> {
    for part in &message.parts {
        if let Some(approve) = part
            .get("data")
            .and_then(|d| d.get("approve"))
            .and_then(Value::as_bool)
        {
            return Ok(match approve {
                true => ApprovalDecision::Approve,
                false => ApprovalDecision::Decline { reason: None },
            });
        }
    }
    let text = message.text();
    let text = text.trim();
    let first: String = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == '.' || c == '!')
        .next()
        .unwrap_or_default()
        .to_lowercase();
    let rest = text[first.len().min(text.len())..]
        .trim_start_matches([',', '.', '!', ':', ' '])
        .trim();
    match first.as_str() {
        "yes" | "y" | "allow" | "approve" | "approved" | "ok" | "okay" | "sure" => {
            Ok(ApprovalDecision::Approve)
        }
        "no" | "n" | "decline" | "deny" | "denied" | "stop" => Ok(ApprovalDecision::Decline {
            reason: (!rest.is_empty()).then(|| rest.to_owned()),
        }),
        _ => Err(RpcError::invalid_params(
            "the task asks for approval: answer \"yes\" or \"no\" (a reason may follow)",
        )),
    }
}

/// A new task: a reply of the context's agent (a new session when no context is given).
async fn start(
    call: &Call,
    message: Message,
    text: String,
) -> Result<(Arc<TaskEntry>, bool, broadcast::Receiver<Value>), RpcError> {
    let state = &call.state;
    let context = match &message.context_id {
        Some(context) => {
            let id = SessionId::new(context.clone());
            state
                .check_owner(&call.caller, &id)
                .await
                .map_err(|_| RpcError::invalid_params(format!("no context {context}")))?;
            id
        }
        None => {
            let name: String = text.chars().take(60).collect();
            let info = state
                .store
                .create_owned_session(
                    &format!("a2a: {}", name.trim()),
                    &json!({"agent": "agentry-server", "via": "a2a"}),
                    call.caller.owner(),
                )
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            info.id
        }
    };
    let live = match state.is_clustered() {
        true => crate::cluster::live_for_reply(state, &context).await,
        false => state.live(&context).await,
    }
    .map_err(|e| RpcError::internal(e.message()))?;
    let task = TaskEntry::new(context, message, call.caller.owner().map(str::to_owned));
    let updates = task.updates();
    let events = live.agent.subscribe();
    if !live.start(move |agent: &ReActAgent| agent.start_reply(Msg::user(text))) {
        return Err(RpcError::unsupported(
            "a reply runs in this context: wait for its end or cancel its task",
        ));
    }
    state.a2a.insert(Arc::clone(&task));
    let agent = live.agent.name().to_owned();
    tokio::spawn(follow(Arc::clone(&state.a2a), Arc::clone(&task), events, agent));
    Ok((task, true, updates))
}

/// `SendMessage`: answers once the task needs input or is over (at once with
/// `returnImmediately`).
pub(crate) async fn send_message(call: Call) -> Result<Value, RpcError> {
    let SendParams {
        message,
        configuration,
    } = params(&call.params)?;
    let history = history(configuration.history_length)?;
    let (task, _, _) = start_or_answer(&call, message).await?;
    if !configuration.return_immediately.unwrap_or(false) {
        let mut state = task.watch();
        let stopping = call.state.stopping.clone();
        tokio::select! {
            _ = state.wait_for(|s| s.is_settled()) => {}
            () = stopping.cancelled() => {}
        }
    }
    Ok(json!({ "task": task.to_json(history) }))
}

/// `SendStreamingMessage`: the task (when new), then its updates, until it needs input or is
/// over. An error before the first event is a plain JSON-RPC answer.
pub(crate) async fn send_streaming_message(call: Call) -> Response {
    let started = match params::<SendParams>(&call.params) {
        Ok(SendParams { message, .. }) => start_or_answer(&call, message).await,
        Err(e) => Err(e),
    };
    match started {
        Ok((task, new, updates)) => {
            let first = new.then(|| json!({ "task": task.to_json(None) }));
            stream(call.id, first, task, updates)
        }
        Err(e) => reply(&call.id, Err(e)),
    }
}

/// `SubscribeToTask`: the task as it is, then its updates.
pub(crate) async fn subscribe_to_task(call: Call) -> Response {
    let outcome = params::<TaskParams>(&call.params).and_then(|p| task_of(&call, &p.id));
    match outcome {
        Ok(task) if task.state().is_terminal() => reply(
            &call.id,
            Err(RpcError::unsupported(format!(
                "Task {} is in terminal state: {}",
                task.id,
                task.state().wire()
            ))),
        ),
        Ok(task) => {
            let updates = task.updates();
            let first = Some(json!({ "task": task.to_json(None) }));
            stream(call.id, first, task, updates)
        }
        Err(e) => reply(&call.id, Err(e)),
    }
}

/// The server-sent events of a task: `first`, then each update until the task settles.
fn stream(
    id: Value,
    first: Option<Value>,
    task: Arc<TaskEntry>,
    updates: broadcast::Receiver<Value>,
) -> Response {
    let events = futures::stream::unfold(
        (id, first, task, updates, false),
        |(id, first, task, mut updates, done)| async move {
            if done {
                return None;
            }
            if let Some(first) = first {
                let settled = task.state().is_settled()
                    && first["task"]["status"]["state"] != TaskState::Submitted.wire();
                return Some((sse(&id, first), (id, None, task, updates, settled)));
            }
            loop {
                match updates.recv().await {
                    Ok(update) => {
                        let settled = update["statusUpdate"]["status"]["state"]
                            .as_str()
                            .is_some_and(settled_state);
                        return Some((sse(&id, update), (id, None, task, updates, settled)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

fn settled_state(wire: &str) -> bool {
    [
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
    ]
    .iter()
    .any(|s| s.wire() == wire)
}

fn sse(id: &Value, result: Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(wire::result(id, result).to_string()))
}

/// `GetTask`: the task, with at most `historyLength` messages of its history.
pub(crate) async fn get_task(call: Call) -> Result<Value, RpcError> {
    let p: TaskParams = params(&call.params)?;
    let history = history(p.history_length)?;
    Ok(task_of(&call, &p.id)?.to_json(history))
}

/// `ListTasks`: the caller's tasks, newest first (of one context with `contextId`).
pub(crate) async fn list_tasks(call: Call) -> Result<Value, RpcError> {
    let context = call
        .params
        .get("contextId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let page_size = call
        .params
        .get("pageSize")
        .and_then(Value::as_u64)
        .map_or(50, |n| n.clamp(1, 100)) as usize;
    let history = history(call.params.get("historyLength").and_then(Value::as_i64))?;
    let tasks = call.state.a2a.list(|task| {
        call.caller.owns_as(task.owner.as_deref())
            && context.as_deref().is_none_or(|c| c == task.context.as_str())
    });
    let total = tasks.len();
    let page: Vec<Value> = tasks.iter().take(page_size).map(|t| t.to_json(history)).collect();
    Ok(json!({ "tasks": page, "nextPageToken": "", "pageSize": page_size, "totalSize": total }))
}

/// `CancelTask`: cancels the task's reply and answers with the task once it ended.
pub(crate) async fn cancel_task(call: Call) -> Result<Value, RpcError> {
    let p: TaskParams = params(&call.params)?;
    let task = task_of(&call, &p.id)?;
    if task.state().is_terminal() {
        return Err(RpcError::not_cancelable());
    }
    // Refused when the reply ended meanwhile: the task then ends on its own.
    let _ = control(&call.state, &task.context, Control::CancelReply).await;
    let mut state = task.watch();
    let _ = tokio::time::timeout(CANCEL_WAIT, state.wait_for(|s| s.is_terminal())).await;
    if task.state() != TaskState::Canceled && task.state().is_terminal() {
        // It finished before the cancel reached it.
        return Err(RpcError::not_cancelable());
    }
    Ok(task.to_json(history(p.history_length)?))
}
