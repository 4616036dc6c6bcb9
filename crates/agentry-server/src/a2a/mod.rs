//! A2A v1.0 (the Agent2Agent protocol) on `agentry serve`: the agent card at
//! `/.well-known/agent-card.json`, and JSON-RPC at `/a2a` (`SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`).
//!
//! A context is a session of the server, of the caller's (a message without a `contextId`
//! starts one); a task is one reply of its agent. A call that needs approval makes the task
//! `TASK_STATE_INPUT_REQUIRED`, its status message asking the question; the client's next
//! message in the task ("yes", or "no" and a reason) decides it; a message to a task that works
//! steers its reply (the agent reads it before its next step). Cancelling a task cancels the
//! reply: its running tools stop with their `on_cancel`, and what the agent had by then is the
//! cancelled status's message.

mod methods;
mod tasks;
mod wire;

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(crate) use tasks::Tasks;
use wire::{PROTOCOL_VERSION, Request, RpcError};

use crate::state::AppState;
use crate::users::Caller;

/// The path of the JSON-RPC endpoint.
pub(crate) const A2A_PATH: &str = "/a2a";

/// What the agent card says of the agent.
#[derive(Debug, Clone)]
pub struct AgentIdentity {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
}

impl Default for AgentIdentity {
    fn default() -> Self {
        AgentIdentity {
            name: "agentry".into(),
            description: "An agent that answers using its tools.".into(),
        }
    }
}

/// `GET /.well-known/agent-card.json`: who the agent is and where it answers. The endpoint's
/// URL is made of the address the client used (`Host`, and `X-Forwarded-Proto` behind a proxy).
pub(crate) async fn agent_card(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Json<Value> {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    let identity = &state.identity;
    let tools: Vec<String> = state.toolkit.tool_names();
    Json(json!({
        "name": identity.name,
        "description": identity.description,
        "supportedInterfaces": [{
            "url": format!("{scheme}://{host}{A2A_PATH}"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": { "streaming": true, "pushNotifications": false },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "answer",
            "name": "Answer",
            "description": identity.description,
            "tags": tools,
        }],
    }))
}

/// `POST /a2a`: one JSON-RPC request. Every answer is HTTP 200, errors included, as the
/// protocol's clients expect; a stream answers with server-sent events.
pub(crate) async fn endpoint(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return reply(&Value::Null, Err(RpcError::parse(e.to_string()))),
    };
    let id = request.id.clone();
    if request.jsonrpc != "2.0" {
        return reply(
            &id,
            Err(RpcError::invalid_request("'jsonrpc' must be exactly '2.0'")),
        );
    }
    let Some(method) = request.method.as_deref() else {
        return reply(&id, Err(RpcError::invalid_request("the request has no method")));
    };
    if let Err(e) = check_version(&headers) {
        return reply(&id, Err(e));
    }
    let call = methods::Call {
        state,
        caller,
        id: id.clone(),
        params: request.params,
    };
    match method {
        "SendMessage" => reply(&id, methods::send_message(call).await),
        "SendStreamingMessage" => methods::send_streaming_message(call).await,
        "GetTask" => reply(&id, methods::get_task(call).await),
        "ListTasks" => reply(&id, methods::list_tasks(call).await),
        "CancelTask" => reply(&id, methods::cancel_task(call).await),
        "SubscribeToTask" => methods::subscribe_to_task(call).await,
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => reply(&id, Err(RpcError::push_not_supported())),
        "GetExtendedAgentCard" => reply(
            &id,
            Err(RpcError::unsupported(
                "The agent does not support authenticated extended cards",
            )),
        ),
        _ => reply(&id, Err(RpcError::method_not_found())),
    }
}

/// The `A2A-Version` header: absent (taken as this version) or 1.x.
fn check_version(headers: &HeaderMap) -> Result<(), RpcError> {
    let Some(value) = headers.get("a2a-version") else {
        return Ok(());
    };
    let version = value.to_str().unwrap_or_default().trim();
    let major = version.split('.').next().unwrap_or_default();
    match major == "1" {
        true => Ok(()),
        false => Err(RpcError::version(version)),
    }
}

/// A JSON-RPC response, HTTP 200.
pub(crate) fn reply(id: &Value, outcome: Result<Value, RpcError>) -> Response {
    let body = match outcome {
        Ok(result) => wire::result(id, result),
        Err(error) => wire::error(id, &error),
    };
    Json(body).into_response()
}
