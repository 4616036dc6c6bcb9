//! Cancels and approval decisions: applied to the reply where it runs. On a store shared by
//! several nodes, a node that does not run the session's reply queues the control in the store
//! for the node that does (or for the one taking the session over), and answers what that node
//! answered, or `queued` when it has not answered within a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentry::agent::{ApprovalError, InputAnswer, InputError};
use agentry::tool::{ApprovalDecision, CancelOutcome};
use agentry_store::{EventNotice, SessionId};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::oneshot;

use crate::bodies::OutcomeKind;
use crate::error::ApiError;
use crate::state::{AppState, LiveSession};

/// How long a node waits for the reply's node to answer a control it sent.
const ANSWER_WAIT: Duration = Duration::from_secs(3);

/// What a client asks of a running reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Control {
    /// Cancel the reply.
    CancelReply,
    /// Cancel one running call.
    CancelCall { call_id: String },
    /// Answer a call's approval question.
    Decide {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// Add a user message to the running reply.
    Steer { text: String },
    /// Answer an input request.
    Answer { call_id: String, answer: InputAnswer },
}

/// Applies `control` to the session loaded here.
pub(crate) fn apply(live: &LiveSession, control: Control) -> Result<OutcomeKind, ApiError> {
    let handle = live.agent.handle();
    match control {
        Control::CancelReply => match handle.cancel_reply() {
            CancelOutcome::Cancelled => Ok(OutcomeKind::Cancelled),
            CancelOutcome::AlreadyCancelled => Ok(OutcomeKind::AlreadyCancelled),
            _ => Err(ApiError::conflict(
                "not_replying",
                "no reply runs in this session",
            )),
        },
        Control::CancelCall { call_id } => match handle.cancel_call(call_id.as_str()) {
            CancelOutcome::Cancelled => Ok(OutcomeKind::Cancelled),
            // A second cancel while the call winds down changes nothing, and says so (C2).
            CancelOutcome::AlreadyCancelled if live.is_replying() => Ok(OutcomeKind::AlreadyCancelled),
            CancelOutcome::AlreadyCancelled => Err(ApiError::conflict(
                "call_finished",
                format!("the call {call_id:?} has ended (cancelled)"),
            )),
            CancelOutcome::AlreadyTimingOut => Ok(OutcomeKind::TimingOut),
            CancelOutcome::AlreadyFinished(state) => Err(ApiError::conflict(
                "call_finished",
                format!(
                    "the call {call_id:?} has ended ({})",
                    state.map_or("finished", |s| s.name())
                ),
            )),
            _ => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "call_not_found",
                format!("no call {call_id:?} in this session's reply"),
            )),
        },
        Control::Decide { call_id, decision } => {
            handle.decide(call_id.as_str(), decision).map_err(|e| match e {
                ApprovalError::Cancelled(_) => ApiError::conflict("call_cancelled", e.to_string()),
                _ => ApiError::conflict("not_pending", e.to_string()),
            })?;
            Ok(OutcomeKind::Decided)
        }
        Control::Answer { call_id, answer } => match handle.answer_input(call_id.as_str(), answer) {
            Ok(()) => Ok(OutcomeKind::Answered),
            Err(InputError::Invalid(why)) => Err(ApiError::bad_request("invalid_answer", why)),
            Err(e) => Err(ApiError::conflict("not_pending", e.to_string())),
        },
        Control::Steer { text } => match handle.steer(agentry::message::Msg::user(text)) {
            Ok(()) => Ok(OutcomeKind::Steered),
            Err(_) => Err(ApiError::conflict(
                "not_replying",
                "no reply runs in this session",
            )),
        },
    }
}

/// Applies `control` to session `id`: here when it is loaded here, else (on a shared store)
/// where its reply runs.
pub(crate) async fn control(
    state: &Arc<AppState>,
    id: &SessionId,
    control: Control,
) -> Result<OutcomeKind, ApiError> {
    if let Some(live) = state.loaded(id).await {
        return apply(&live, control);
    }
    if !state.is_clustered() {
        return Err(ApiError::conflict(
            "not_replying",
            "no reply runs in this session",
        ));
    }
    forward(state, id, control).await
}

/// Sends `control` to the node that runs the session's reply, and waits a moment for its answer.
async fn forward(state: &Arc<AppState>, id: &SessionId, control: Control) -> Result<OutcomeKind, ApiError> {
    // Refused here what the store tells is wrong, as the reply's node would refuse it.
    match &control {
        Control::Decide { call_id, .. } => {
            let pending = state.store.pending_approvals(id).await?;
            if !pending.iter().any(|p| p.call_id.as_str() == call_id) {
                return Err(ApiError::conflict(
                    "not_pending",
                    format!("call {call_id} is not waiting for approval"),
                ));
            }
        }
        Control::CancelReply
        | Control::CancelCall { .. }
        | Control::Steer { .. }
        | Control::Answer { .. } => {
            if state.store.lease_holder(id).await?.is_none() {
                return Err(ApiError::conflict(
                    "not_replying",
                    "no reply runs in this session",
                ));
            }
        }
    }
    let body = serde_json::to_string(&control).map_err(|e| ApiError::internal(e.to_string()))?;
    let sent = state.store.send_control(id, &body).await?;
    // Waiting from now on; an answer stored before that is found by the first look.
    let mut woken = state.answers.wait(sent);
    let answer = tokio::time::timeout(ANSWER_WAIT, async {
        loop {
            if let Some(answer) = state.store.control_answer(sent).await? {
                return Ok::<String, ApiError>(answer);
            }
            match (&mut woken).await {
                Ok(()) => woken = state.answers.wait(sent),
                Err(_) => return Err(ApiError::internal("the store's notices ended")),
            }
        }
    })
    .await;
    state.answers.forget(sent);
    match answer {
        Ok(answer) => decode_answer(&answer?),
        Err(_) => Ok(OutcomeKind::Queued),
    }
}

/// The requests of this node waiting for another node's answer to their control, by
/// control: woken by the store's notices (one task reads them for all, see [`start_serving`]).
#[derive(Default)]
pub(crate) struct Answers {
    waiting: std::sync::Mutex<HashMap<u64, oneshot::Sender<()>>>,
}

impl Answers {
    /// Resolves when control `control` may have been answered.
    fn wait(&self, control: u64) -> oneshot::Receiver<()> {
        let (wake, woken) = oneshot::channel();
        self.lock().insert(control, wake);
        woken
    }

    fn forget(&self, control: u64) {
        self.lock().remove(&control);
    }

    fn answered(&self, control: u64) {
        if let Some(wake) = self.lock().remove(&control) {
            let _ = wake.send(());
        }
    }

    /// Notices were lost: every request looks for its answer.
    fn wake_all(&self) {
        for (_, wake) in self.lock().drain() {
            let _ = wake.send(());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<()>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a node answers to a control, as stored for its sender.
fn encode_answer(result: &Result<OutcomeKind, ApiError>) -> String {
    match result {
        Ok(outcome) => json!({ "outcome": outcome }).to_string(),
        Err(e) => json!({"error": {"status": e.status().as_u16(), "code": e.code(), "message": e.message()}})
            .to_string(),
    }
}

fn decode_answer(answer: &str) -> Result<OutcomeKind, ApiError> {
    #[derive(Deserialize)]
    struct Relayed {
        status: u16,
        code: String,
        message: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Answer {
        Outcome(OutcomeKind),
        Error(Relayed),
    }
    match serde_json::from_str::<Answer>(answer) {
        Ok(Answer::Outcome(outcome)) => Ok(outcome),
        Ok(Answer::Error(e)) => Err(ApiError::relayed(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.code,
            e.message,
        )),
        Err(e) => Err(ApiError::internal(format!(
            "another node's answer could not be read: {e}"
        ))),
    }
}

/// Applies the controls queued for session `id`, when it is loaded here (its reply runs here).
pub(crate) async fn serve_controls(state: &AppState, id: &SessionId) {
    let Some(live) = state.loaded(id).await else {
        return;
    };
    let controls = match state.store.take_controls(live.memory.lease()).await {
        Ok(controls) => controls,
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "could not read the controls sent to a session");
            return;
        }
    };
    for (control, body) in controls {
        let result = match serde_json::from_str::<Control>(&body) {
            Ok(parsed) => apply(&live, parsed),
            Err(e) => Err(ApiError::bad_request("bad_control", e.to_string())),
        };
        if let Err(e) = state.store.answer_control(control, &encode_answer(&result)).await {
            tracing::warn!(session = %id, error = %e, "could not answer a control");
        }
    }
}

/// Serves the controls other nodes send to this node's sessions, and hands the answers
/// other nodes give to this node's waiting requests, until the server stops. One task reads the
/// notices; each session's controls are served in a task of their own, so a busy store never
/// makes one control wait for another's.
pub(crate) fn start_serving(state: &Arc<AppState>) {
    let Some(mut notices) = state.notice_receiver() else {
        return;
    };
    let weak = Arc::downgrade(state);
    let stopping = state.stopping.clone();
    tokio::spawn(async move {
        loop {
            let notice = tokio::select! {
                _ = stopping.cancelled() => return,
                notice = notices.recv() => notice,
            };
            let Some(state) = weak.upgrade() else { return };
            match notice {
                Ok(EventNotice::Controls(id)) => {
                    tokio::spawn(async move { serve_controls(&state, &id).await });
                }
                Ok(EventNotice::Answered(control)) => state.answers.answered(control),
                Ok(EventNotice::Resync) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    state.answers.wake_all();
                    for id in state.loaded_ids().await {
                        let state = Arc::clone(&state);
                        tokio::spawn(async move { serve_controls(&state, &id).await });
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}
