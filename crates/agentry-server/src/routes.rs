//! The routes of the HTTP API (JSON in and out; events as server-sent events).

use std::sync::Arc;

use agentry::ReActAgent;
use agentry::agent::InputAnswer;
use agentry::message::Msg;
use agentry::tool::ApprovalDecision;
use agentry_store::SessionId;
use axum::Extension;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::bodies::{
    DecisionBody, ErrorBody, Health, InputBody, NewMessage, NewSession, Outcome, OutcomeKind, ReplyStarted,
    SessionDetail, SessionList, SessionSummary, ToolInfo, ToolList,
};
use crate::control::{Control, control};
use crate::error::ApiError;
use crate::events::{ResumeError, last_handed_out};
use crate::state::AppState;
use crate::users::Caller;

type Shared = State<Arc<AppState>>;

/// The API's routes, without authentication (see [`crate::router`]).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(health))
        .route("/v1/tools", get(tools))
        .route("/v1/sessions", get(list_sessions).post(create_session))
        .route("/v1/sessions/{id}", get(show_session).delete(delete_session))
        .route("/v1/sessions/{id}/messages", post(send_message))
        .route("/v1/sessions/{id}/events", get(events))
        .route("/v1/sessions/{id}/cancel", post(cancel_reply))
        .route("/v1/sessions/{id}/calls/{call_id}/cancel", post(cancel_call))
        .route("/v1/sessions/{id}/calls/{call_id}/decision", post(decide))
        .route("/v1/sessions/{id}/inputs/{call_id}", post(answer_input))
        .route(crate::a2a::A2A_PATH, post(crate::a2a::endpoint))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health), (status = 401, body = ErrorBody)))]
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Whether `text` has a character that is not white space (Unicode's `White_Space`, the set the
/// OpenAPI document's patterns spell out, so that what the document allows and what the server
/// accepts are the same).
fn has_text(text: &str) -> bool {
    text.chars().any(|c| !c.is_whitespace())
}

/// A JSON body, or a 400 saying what is wrong with it.
fn body<T>(payload: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    payload
        .map(|Json(t)| t)
        .map_err(|e| ApiError::bad_request("bad_body", e.body_text()))
}

fn outcome(outcome: OutcomeKind) -> Json<Outcome> {
    Json(Outcome { outcome })
}

/// The tools an agent of this server has.
#[utoipa::path(get, path = "/v1/tools", responses((status = 200, body = ToolList), (status = 401, body = ErrorBody)))]
pub async fn tools(State(state): Shared) -> Json<ToolList> {
    let toolkit = &state.toolkit;
    let tools = toolkit
        .json_schemas()
        .iter()
        .map(|schema| ToolInfo {
            name: schema.name.clone(),
            description: schema.description.clone(),
            parameters: schema.parameters.clone(),
            requires_approval: toolkit.policy(&schema.name).require_approval,
        })
        .collect();
    Json(ToolList { tools })
}

/// The sessions, most recently used first.
#[utoipa::path(get, path = "/v1/sessions", responses((status = 200, body = SessionList), (status = 401, body = ErrorBody)))]
pub async fn list_sessions(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
) -> Result<Json<SessionList>, ApiError> {
    let mut sessions = Vec::new();
    for info in state
        .store
        .sessions()
        .await?
        .into_iter()
        .filter(|info| caller.owns(info))
    {
        let replying = state.loaded(&info.id).await.is_some_and(|s| s.is_replying());
        sessions.push(SessionSummary::new(&info, replying));
    }
    Ok(Json(SessionList { sessions }))
}

/// Creates a session.
#[utoipa::path(post, path = "/v1/sessions", request_body = NewSession,
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn create_session(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    payload: Result<Json<NewSession>, JsonRejection>,
) -> Result<Response, ApiError> {
    let new = body(payload)?;
    // Control characters anywhere (a trailing tab or vertical tab too), not only inside.
    let name = new.name.trim();
    if !has_text(&new.name) || new.name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "bad_name",
            "a session name is a non-empty line of text",
        ));
    }
    let info = state
        .store
        .create_owned_session(name, &json!({"agent": "agentry-server"}), caller.owner())
        .await?;
    Ok((StatusCode::CREATED, Json(SessionSummary::new(&info, false))).into_response())
}

/// A session with its messages, calls and pending approvals.
#[utoipa::path(get, path = "/v1/sessions/{id}", params(("id" = String, Path)),
    responses((status = 200, body = SessionDetail), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn show_session(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<SessionDetail>, ApiError> {
    let id = SessionId::new(id);
    let Some(info) = state.store.session(&id).await?.filter(|info| caller.owns(info)) else {
        return Err(ApiError::no_session(id.as_str()));
    };
    let (messages, last_event_id, replying) = match state.loaded(&id).await {
        Some(live) => (
            agentry::memory::Memory::messages(&*live.memory)
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?,
            live.events.last_id(),
            live.is_replying(),
        ),
        None => {
            let last = last_handed_out(state.store.event_ids(&id).await?);
            (state.store.messages(&id).await?, last, false)
        }
    };
    Ok(Json(SessionDetail {
        summary: SessionSummary::new(&info, replying),
        messages,
        calls: state.store.calls(&id).await?,
        pending_approvals: state.store.pending_approvals(&id).await?,
        last_event_id,
        plan: info
            .config
            .get(agentry_store::PLANS_KEY)
            .and_then(|plans| plans.get("current"))
            .filter(|plan| plan.is_object())
            .cloned(),
    }))
}

/// Deletes a session (not while a reply runs).
#[utoipa::path(delete, path = "/v1/sessions/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn delete_session(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    if let Some(live) = state.loaded(&id).await {
        if live.is_replying() {
            return Err(ApiError::conflict(
                "reply_running",
                "a reply runs in this session: cancel it first",
            ));
        }
        // Give the lease back so that the store lets the session go.
        state.unload(&id).await;
        live.events.close().await;
        drop(live);
    }
    match state.store.delete_session(&id).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::no_session(id.as_str())),
    }
}

/// Starts a reply to a user message; its events come on the event stream. With `steer` and a
/// reply running, adds the message to that reply instead.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", params(("id" = String, Path)), request_body = NewMessage,
    responses((status = 202, body = ReplyStarted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn send_message(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    payload: Result<Json<NewMessage>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    let message = body(payload)?;
    if !has_text(&message.text) {
        return Err(ApiError::bad_request("empty_message", "the message has no text"));
    }
    if state.stopping.is_cancelled() {
        return Err(stopping());
    }
    if message.steer {
        let steer = Control::Steer {
            text: message.text.clone(),
        };
        match control(&state, &id, steer).await {
            Ok(_) => {
                let after = match state.loaded(&id).await {
                    Some(live) => live.events.last_id(),
                    None => 0,
                };
                let body = ReplyStarted {
                    events_after: after,
                    steered: true,
                };
                return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
            }
            // No reply to add it to: it starts one.
            Err(e) if e.code() == "not_replying" => {}
            Err(e) => return Err(e),
        }
    }
    let live = match state.is_clustered() {
        true => crate::cluster::live_for_reply(&state, &id).await?,
        false => state.live(&id).await?,
    };
    let after = live.events.last_id();
    let text = message.text;
    if !live.start(move |agent: &ReActAgent| agent.start_reply(Msg::user(text))) {
        return Err(ApiError::conflict(
            "reply_running",
            "a reply runs in this session: wait for its end or cancel it",
        ));
    }
    let body = ReplyStarted {
        events_after: after,
        steered: false,
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// The session's events (server-sent events): every `AgentEvent` as JSON in an event `agent`
/// with its id; `Last-Event-ID` resumes after that id, also after a server restart. A client that falls behind gets an event
/// `resume` with its last id, and the stream ends.
#[utoipa::path(get, path = "/v1/sessions/{id}/events",
    params(("id" = String, Path), ("Last-Event-ID" = Option<u64>, Header, description = "resume after this event")),
    responses((status = 200, content_type = "text/event-stream", body = String), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn events(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::bad_request("bad_last_event_id", "Last-Event-ID is an event id (a number)")
            })?,
    };
    if state.stopping.is_cancelled() {
        return Err(stopping());
    }
    if state.is_clustered() {
        let stream = crate::cluster::stream_from_store(&state, id, after).await?;
        return Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response());
    }
    let live = state.live(&id).await?;
    let stream = live.events.stream_after(after).map_err(|e| match e {
        ResumeError::TooOld { oldest } => ApiError::conflict(
            "events_gone",
            format!("events after {after} are no longer kept (the oldest is {oldest}): reload the session"),
        ),
        ResumeError::Unknown { last } => ApiError::conflict(
            "unknown_event_id",
            format!(
                "no event {after} yet (the last is {last}; the server may have restarted): reload the session"
            ),
        ),
    })?;
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// Cancels the running reply.
#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", params(("id" = String, Path)),
    responses((status = 200, body = Outcome), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn cancel_reply(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Outcome>, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    control(&state, &id, Control::CancelReply).await.map(outcome)
}

/// Cancels a running tool call: its `on_cancel` result goes to the model and the reply goes on.
#[utoipa::path(post, path = "/v1/sessions/{id}/calls/{call_id}/cancel", params(("id" = String, Path), ("call_id" = String, Path)),
    responses((status = 200, body = Outcome), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn cancel_call(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((id, call_id)): Path<(String, String)>,
) -> Result<Json<Outcome>, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    control(&state, &id, Control::CancelCall { call_id })
        .await
        .map(outcome)
}

/// Answers a call's approval question.
#[utoipa::path(post, path = "/v1/sessions/{id}/calls/{call_id}/decision", params(("id" = String, Path), ("call_id" = String, Path)), request_body = DecisionBody,
    responses((status = 200, body = Outcome), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn decide(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((id, call_id)): Path<(String, String)>,
    payload: Result<Json<ApprovalDecision>, JsonRejection>,
) -> Result<Json<Outcome>, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    let decision = body(payload)?;
    control(&state, &id, Control::Decide { call_id, decision })
        .await
        .map(outcome)
}

/// Answers an input request (a form a call's MCP server asks for): `accept` with the values,
/// checked against the request's schema, or `decline` or `cancel`.
#[utoipa::path(post, path = "/v1/sessions/{id}/inputs/{call_id}", params(("id" = String, Path), ("call_id" = String, Path)), request_body = InputBody,
    responses((status = 200, body = Outcome), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn answer_input(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((id, call_id)): Path<(String, String)>,
    payload: Result<Json<InputBodyIn>, JsonRejection>,
) -> Result<Json<Outcome>, ApiError> {
    let id = SessionId::new(id);
    state.check_owner(&caller, &id).await?;
    let given = body(payload)?;
    let answer = match given.action.as_str() {
        // Accepted without values: an empty form, which the request's schema then judges.
        "accept" => InputAnswer::Accept(given.content.unwrap_or_else(|| json!({}))),
        "decline" => InputAnswer::Decline,
        "cancel" => InputAnswer::Cancel,
        _ => {
            return Err(ApiError::bad_request(
                "bad_action",
                "the action is accept, decline or cancel",
            ));
        }
    };
    control(&state, &id, Control::Answer { call_id, answer })
        .await
        .map(outcome)
}

/// The body of an input answer as read (see `InputBody` for the documented one).
#[derive(serde::Deserialize)]
pub struct InputBodyIn {
    action: String,
    #[serde(default)]
    content: Option<serde_json::Value>,
}

fn stopping() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "stopping",
        "the server is stopping",
    )
}
