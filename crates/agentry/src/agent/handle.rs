//! Driving a running reply from anywhere: cancel a call, cancel the reply, decide an approval.
//!
//! Every operation commits its state transition and returns; none awaits a tool body, an
//! `on_cancel` callback or the network (spec C1).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::AgentInner;
use super::events::{AgentEvent, CancelTarget, EventHub};
use super::meter::Meter;
use crate::message::Msg;
use crate::model::ChatUsage;
use crate::protocol::InputAnswer;
use crate::tool::{
    ApprovalDecision, CallRecord, CancelCommit, CancelOutcome, CancelReason, DecisionSource, InputQuestion,
    NestedApproval, ToolCallState,
};
use crate::{CallId, ReplyId};

/// The reason of a call declined because nobody could decide (A15).
pub(super) const NO_DECISION: &str = "no decision";

/// Why a steering message was refused; it carries the message back.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// No reply runs (or it is ending): start a new reply with the message instead.
    #[error("no reply runs: send the message as a new one")]
    NotReplying(Msg),
    /// Only a user's message can steer a reply.
    #[error("a steering message must be the user's")]
    NotUserMessage(Msg),
}

/// Why an input answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// No input request of this id is open: unknown, answered, withdrawn.
    #[error("no input request {:?} waits for an answer", .0.as_str())]
    NotPending(CallId),
    /// The accepted content does not match the form; the request stays open.
    #[error("the answer does not fit the form: {0}")]
    Invalid(String),
}

/// Checks an accepted answer against its form.
fn check_input(schema: &Value, content: &Value) -> Result<(), InputError> {
    if !content.is_object() {
        return Err(InputError::Invalid("the answer must be an object".into()));
    }
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| InputError::Invalid(format!("the form's schema is not valid: {e}")))?;
    let errors: Vec<String> = validator
        .iter_errors(content)
        .map(|e| match e.instance_path().to_string() {
            path if path.is_empty() => e.to_string(),
            path => format!("{path}: {e}"),
        })
        .collect();
    match errors.is_empty() {
        true => Ok(()),
        false => Err(InputError::Invalid(errors.join("; "))),
    }
}

/// Why a decision was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The call is not waiting for approval: unknown, already decided, cancelled or finished
    /// (spec A16). Nothing changed.
    #[error("the call {:?} is not waiting for approval", .0.as_str())]
    NotPending(CallId),
    /// The call was cancelled before the decision came: it did not run and the decision
    /// changed nothing (A16, S2).
    #[error("the call {:?} was cancelled before the decision: it did not run, and nothing was decided", .0.as_str())]
    Cancelled(CallId),
}

/// Where the answer to an open question goes.
enum Pending {
    Approval(oneshot::Sender<ApprovalDecision>),
    Input {
        answer: oneshot::Sender<InputAnswer>,
        /// What an accepted answer must match.
        schema: Value,
    },
}

#[derive(Default)]
struct ReplyState {
    cancelled: bool,
    /// Why the reply was cancelled, for the calls registered after the cancel.
    cancel_reason: Option<CancelReason>,
    finished: bool,
    calls: Vec<Arc<CallRecord>>,
    approvals: HashMap<CallId, oneshot::Sender<ApprovalDecision>>,
    /// Nested calls' questions asked through a running call (`ToolContext::ask_approval`), by
    /// question id: the asking call's id, and where the answer goes.
    questions: HashMap<CallId, (CallId, Pending)>,
    /// Messages the user added while the reply runs, for its next model request.
    steering: Vec<Msg>,
    /// No more steering: the reply is ending.
    steering_closed: bool,
}

/// The reply that is running now, as the handle and the loop share it.
pub(crate) struct ActiveReply {
    pub(crate) reply_id: ReplyId,
    pub(crate) token: CancellationToken,
    pub(crate) sink: Option<mpsc::UnboundedSender<AgentEvent>>,
    /// Tokens and cost so far, against the budget.
    pub(crate) meter: Meter,
    state: Mutex<ReplyState>,
}

impl std::fmt::Debug for ActiveReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveReply")
            .field("reply_id", &self.reply_id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl ActiveReply {
    pub(crate) fn new(reply_id: ReplyId, sink: Option<mpsc::UnboundedSender<AgentEvent>>) -> Arc<Self> {
        Arc::new(ActiveReply {
            reply_id,
            token: CancellationToken::new(),
            sink,
            meter: Meter::default(),
            state: Mutex::new(ReplyState::default()),
        })
    }

    // Mutations complete before anything can panic, so a poisoned lock holds consistent data.
    fn state(&self) -> MutexGuard<'_, ReplyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    pub(crate) fn emit(&self, hub: &EventHub, event: AgentEvent) {
        hub.emit(&event);
        if let Some(sink) = &self.sink {
            let _ = sink.send(event);
        }
    }

    pub(crate) fn has_listeners(&self, hub: &EventHub) -> bool {
        self.sink.as_ref().is_some_and(|s| !s.is_closed()) || hub.has_subscribers()
    }

    /// Makes a call cancellable (C4). Once the reply is cancelled, new calls are closed as
    /// cancelled before start.
    pub(crate) fn register(&self, hub: &EventHub, record: &Arc<CallRecord>) {
        let mut state = self.state();
        state.calls.push(Arc::clone(record));
        if state.cancelled {
            let reason = state.cancel_reason.unwrap_or(CancelReason::Reply);
            drop(state);
            self.cancel_record(hub, record, reason);
        }
    }

    pub(crate) fn call(&self, call_id: &str) -> Option<Arc<CallRecord>> {
        self.state().calls.iter().find(|r| r.call_id == call_id).cloned()
    }

    /// Commits a cancel of one call; its `CancelRequested` is emitted before anything else of
    /// this call can finish (C7).
    pub(crate) fn cancel_record(
        &self,
        hub: &EventHub,
        record: &CallRecord,
        reason: CancelReason,
    ) -> CancelOutcome {
        let commit = record.cancel(reason, || {
            self.emit(
                hub,
                AgentEvent::CancelRequested {
                    reply_id: self.reply_id.clone(),
                    target: CancelTarget::Call(record.call_id.clone()),
                    reason,
                },
            );
        });
        if !matches!(commit, CancelCommit::Refused(_)) {
            self.withdraw_questions(hub, &record.call_id);
        }
        match commit {
            CancelCommit::BeforeStart { was_pending_approval } => {
                if was_pending_approval {
                    // The pending decision can no longer be given (A16).
                    self.state().approvals.remove(&record.call_id);
                }
                CancelOutcome::Cancelled
            }
            CancelCommit::Running => CancelOutcome::Cancelled,
            CancelCommit::Refused(outcome) => outcome,
        }
    }

    /// Adds a model call's or a tool's usage; a reply that reaches its budget is cancelled with
    /// the budget as the reason.
    pub(crate) fn add_usage(&self, hub: &EventHub, usage: &ChatUsage) {
        if let Some(exceeded) = self.meter.add(usage) {
            tracing::info!(%exceeded, "stopping the reply");
            self.cancel_for(hub, CancelReason::Budget);
        }
    }

    /// Cancels the reply and every call of it that has not ended (R2).
    pub(crate) fn cancel(&self, hub: &EventHub) -> CancelOutcome {
        self.cancel_for(hub, CancelReason::Reply)
    }

    /// [`Self::cancel`] for a reason: the user's (`Reply`) or the budget's.
    pub(crate) fn cancel_for(&self, hub: &EventHub, reason: CancelReason) -> CancelOutcome {
        let calls = {
            let mut state = self.state();
            if state.finished {
                return CancelOutcome::AlreadyFinished(None);
            }
            if state.cancelled {
                return CancelOutcome::AlreadyCancelled;
            }
            state.cancelled = true;
            state.cancel_reason = Some(reason);
            self.emit(
                hub,
                AgentEvent::CancelRequested {
                    reply_id: self.reply_id.clone(),
                    target: CancelTarget::Reply,
                    reason,
                },
            );
            state.calls.clone()
        };
        for record in &calls {
            self.cancel_record(hub, record, reason);
        }
        self.token.cancel();
        CancelOutcome::Cancelled
    }

    /// Asks the user a question of call `asker` (see `ToolContext::ask_approval`): announced as
    /// an approval request of id `"{asker}.{question.id}"`. The sender is dropped at once (no
    /// decision) when the call is no longer running.
    pub(crate) fn ask_question(
        &self,
        hub: &EventHub,
        asker: &CallId,
        question: NestedApproval,
    ) -> oneshot::Receiver<ApprovalDecision> {
        let (answer, answered) = oneshot::channel();
        let Some(id) = self.question_id(asker, &question.id) else {
            return answered;
        };
        self.state()
            .questions
            .insert(id.clone(), (asker.clone(), Pending::Approval(answer)));
        self.emit(
            hub,
            AgentEvent::ApprovalRequested {
                reply_id: self.reply_id.clone(),
                call_id: id,
                name: question.name,
                input: question.input,
                request: question.request,
                automatic: false,
            },
        );
        answered
    }

    /// The id of question `question` of call `asker`, while that call runs (`None` once it
    /// ended or was cancelled: nobody asks then).
    fn question_id(&self, asker: &CallId, question: &str) -> Option<CallId> {
        let running = self
            .call(asker)
            .is_some_and(|record| record.terminal().is_none() && !record.token.is_cancelled());
        running.then(|| CallId::new(format!("{asker}.{question}")))
    }

    /// Answers approval question `id`, if it is one; the first answer wins (A16). An input
    /// question is answered with `Cancel` when nobody can answer (`source` `NoDecision`), and
    /// refused as not pending otherwise.
    fn answer_question(
        &self,
        hub: &EventHub,
        id: &str,
        decision: ApprovalDecision,
        source: DecisionSource,
    ) -> Option<Result<(), ApprovalError>> {
        let pending = {
            let mut state = self.state();
            // An input question takes no decision; it stays open (checked under the same lock,
            // so that an answer racing this one never finds it gone).
            let is_input = matches!(state.questions.get(id)?, (_, Pending::Input { .. }));
            if is_input && source != DecisionSource::NoDecision {
                return Some(Err(ApprovalError::NotPending(id.into())));
            }
            state.questions.remove(id)?.1
        };
        let answer = match pending {
            Pending::Approval(answer) => answer,
            Pending::Input { answer, .. } => {
                return Some(self.answer_input_now(hub, id, answer, InputAnswer::Cancel));
            }
        };
        if answer.send(decision.clone()).is_err() {
            // The asking call stopped listening: nothing was decided.
            return Some(Err(ApprovalError::NotPending(id.into())));
        }
        self.emit(
            hub,
            AgentEvent::ApprovalResolved {
                reply_id: self.reply_id.clone(),
                call_id: id.into(),
                decision,
                source,
            },
        );
        Some(Ok(()))
    }

    /// Asks the user for input for call `asker` (see `ToolContext::ask_input`): announced as
    /// an input request of id `"{asker}.{question.id}"`.
    pub(crate) fn ask_input(
        &self,
        hub: &EventHub,
        asker: &CallId,
        question: InputQuestion,
    ) -> oneshot::Receiver<InputAnswer> {
        let (answer, answered) = oneshot::channel();
        let Some(id) = self.question_id(asker, &question.id) else {
            return answered;
        };
        let pending = Pending::Input {
            answer,
            schema: question.schema.clone(),
        };
        self.state()
            .questions
            .insert(id.clone(), (asker.clone(), pending));
        self.emit(
            hub,
            AgentEvent::InputRequested {
                reply_id: self.reply_id.clone(),
                call_id: id,
                name: question.name,
                message: question.message,
                schema: question.schema,
            },
        );
        answered
    }

    /// Answers input question `id`: an accepted answer must match its schema (else it stays
    /// open and the error says why).
    fn answer_input(&self, hub: &EventHub, id: &str, answer: InputAnswer) -> Result<(), InputError> {
        let mut state = self.state();
        let Some((_, Pending::Input { schema, .. })) = state.questions.get(id) else {
            return Err(InputError::NotPending(id.into()));
        };
        if let InputAnswer::Accept(content) = &answer {
            check_input(schema, content)?;
        }
        let Some((_, Pending::Input { answer: sender, .. })) = state.questions.remove(id) else {
            return Err(InputError::NotPending(id.into()));
        };
        drop(state);
        self.answer_input_now(hub, id, sender, answer)
            .map_err(|_| InputError::NotPending(id.into()))
    }

    fn answer_input_now(
        &self,
        hub: &EventHub,
        id: &str,
        sender: oneshot::Sender<InputAnswer>,
        answer: InputAnswer,
    ) -> Result<(), ApprovalError> {
        if sender.send(answer.clone()).is_err() {
            return Err(ApprovalError::NotPending(id.into()));
        }
        self.emit(
            hub,
            AgentEvent::InputAnswered {
                reply_id: self.reply_id.clone(),
                call_id: id.into(),
                answer,
            },
        );
        Ok(())
    }

    /// Withdraws question `question` of call `asker` if it is still open: whoever asked it
    /// stopped waiting (an MCP server cancelled its request, M8).
    pub(crate) fn withdraw_question(&self, hub: &EventHub, asker: &CallId, question: &str) {
        let id = format!("{asker}.{question}");
        if self.state().questions.remove(id.as_str()).is_some() {
            self.emit(
                hub,
                AgentEvent::ApprovalWithdrawn {
                    reply_id: self.reply_id.clone(),
                    call_id: id.into(),
                },
            );
        }
    }

    /// Withdraws the open questions of call `asker` (it was cancelled, P2).
    fn withdraw_questions(&self, hub: &EventHub, asker: &CallId) {
        let withdrawn: Vec<CallId> = {
            let mut state = self.state();
            let ids: Vec<CallId> = state
                .questions
                .iter()
                .filter(|(_, (call, _))| call == asker)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                state.questions.remove(id);
            }
            ids
        };
        for call_id in withdrawn {
            self.emit(
                hub,
                AgentEvent::ApprovalWithdrawn {
                    reply_id: self.reply_id.clone(),
                    call_id,
                },
            );
        }
    }

    /// Declines every pending approval as "no decision": nobody is left to decide (A15). The
    /// waiting calls wake up when their senders are dropped here.
    pub(crate) fn decline_pending(&self, hub: &EventHub) {
        let questions: Vec<CallId> = self.state().questions.keys().cloned().collect();
        for id in questions {
            let declined = ApprovalDecision::Decline {
                reason: Some(NO_DECISION.to_owned()),
            };
            self.answer_question(hub, &id, declined, DecisionSource::NoDecision);
        }
        let pending: Vec<CallId> = self.state().approvals.keys().cloned().collect();
        for call_id in pending {
            if let Some(record) = self.call(&call_id) {
                self.decline_as_no_decision(hub, &record);
            }
            self.state().approvals.remove(&call_id);
        }
    }

    /// Declines a pending call as "no decision" (A15) and announces it; false when another
    /// transition (a decision, a cancel) won.
    fn decline_as_no_decision(&self, hub: &EventHub, record: &CallRecord) -> bool {
        let reason = Some(NO_DECISION.to_owned());
        if !record.finish(ToolCallState::Declined {
            reason: reason.clone(),
        }) {
            return false;
        }
        self.emit(
            hub,
            AgentEvent::ApprovalResolved {
                reply_id: self.reply_id.clone(),
                call_id: record.call_id.clone(),
                decision: ApprovalDecision::Decline { reason },
                source: DecisionSource::NoDecision,
            },
        );
        true
    }

    /// Waits for a decision on `call_id`; `None` if the record stopped pending meanwhile.
    pub(crate) fn expect_decision(&self, record: &CallRecord) -> Option<oneshot::Receiver<ApprovalDecision>> {
        let mut state = self.state();
        if !record.is_pending_approval() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        state.approvals.insert(record.call_id.clone(), tx);
        Some(rx)
    }

    pub(crate) fn forget_decision(&self, call_id: &str) {
        self.state().approvals.remove(call_id);
    }

    fn decide(&self, hub: &EventHub, call_id: &str, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        if let Some(answered) = self.answer_question(hub, call_id, decision.clone(), DecisionSource::User) {
            return answered;
        }
        let sender = self.state().approvals.remove(call_id);
        let record = self.call(call_id);
        let (Some(sender), Some(record)) = (sender, record.as_ref()) else {
            return Err(self.refusal(call_id, record.as_deref()));
        };
        // Handed over while the call still waits, under its lock: a cancel that committed
        // first wins and the decision is refused as such, never accepted without effect.
        match record.while_pending_approval(|| sender.send(decision).is_ok()) {
            Some(true) => Ok(()),
            _ => Err(self.refusal(call_id, Some(record.as_ref()))),
        }
    }

    /// Why a decision for `call_id` is refused: the call was cancelled, or it is not waiting.
    fn refusal(&self, call_id: &str, record: Option<&CallRecord>) -> ApprovalError {
        match record.and_then(CallRecord::terminal) {
            Some(ToolCallState::Cancelled { .. }) => ApprovalError::Cancelled(call_id.into()),
            _ => ApprovalError::NotPending(call_id.into()),
        }
    }

    /// Declines one pending call as "no decision" (A15), in the way [`Self::decline_pending`]
    /// does for all: the waiting call wakes up when its sender is dropped here.
    fn decide_no_decision(&self, hub: &EventHub, call_id: &str) -> Result<(), ApprovalError> {
        let declined = ApprovalDecision::Decline {
            reason: Some(NO_DECISION.to_owned()),
        };
        if let Some(answered) = self.answer_question(hub, call_id, declined, DecisionSource::NoDecision) {
            return answered;
        }
        let not_pending = || ApprovalError::NotPending(call_id.into());
        // Taking the sender is the decision: whoever takes it first wins (A16).
        let sender = self.state().approvals.remove(call_id).ok_or_else(not_pending)?;
        let record = self.call(call_id).ok_or_else(not_pending)?;
        if !self.decline_as_no_decision(hub, &record) {
            // Cancelled meanwhile: the cancel won.
            return Err(not_pending());
        }
        drop(sender);
        Ok(())
    }

    /// Adds a user message to the running reply (see [`AgentHandle::steer`]).
    pub(crate) fn steer(&self, msg: Msg) -> Result<(), SteerError> {
        let mut state = self.state();
        if state.steering_closed || state.finished {
            return Err(SteerError::NotReplying(msg));
        }
        state.steering.push(msg);
        Ok(())
    }

    /// Whether steering messages wait for the next model request.
    pub(crate) fn has_steering(&self) -> bool {
        !self.state().steering.is_empty()
    }

    /// The steering messages that came since the last call.
    pub(crate) fn take_steering(&self) -> Vec<Msg> {
        std::mem::take(&mut self.state().steering)
    }

    /// Refuses steering from now on; the messages that came too late for the reply.
    pub(crate) fn close_steering(&self) -> Vec<Msg> {
        let mut state = self.state();
        state.steering_closed = true;
        std::mem::take(&mut state.steering)
    }

    /// Marks the reply over; returns the terminal states of its calls.
    pub(crate) fn finish(&self) -> Vec<(CallId, ToolCallState)> {
        let mut state = self.state();
        state.finished = true;
        state.approvals.clear();
        state
            .calls
            .iter()
            .filter_map(|r| r.terminal().map(|t| (r.call_id.clone(), t)))
            .collect()
    }
}

/// Drives the agent's running reply from another task or thread: the terminal's Ctrl-C, a web
/// page, a test. Cheap to clone.
///
/// ```no_run
/// # async fn demo(agent: agentry::agent::ReActAgent) {
/// use agentry::message::Msg;
/// let handle = agent.handle();
/// let run = agent.start_reply(Msg::user("search the whole disk"));
/// // ... later, from anywhere:
/// handle.cancel_reply();
/// let reply = run.finish().await;
/// # }
/// ```
#[derive(Clone)]
pub struct AgentHandle {
    pub(crate) inner: Arc<AgentInner>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("agent", &self.inner.config.name)
            .finish()
    }
}

impl AgentHandle {
    /// Cancels one tool call of the running reply, in whatever phase it is (spec 3.5); the reply
    /// goes on (P6). Calls of earlier replies answer `AlreadyFinished` (C3), unknown ids
    /// `NotFound` (C4).
    pub fn cancel_call(&self, call_id: impl Into<CallId>) -> CancelOutcome {
        let call_id = call_id.into();
        if let Some(reply) = self.inner.active_reply()
            && let Some(record) = reply.call(&call_id)
        {
            return reply.cancel_record(&self.inner.events, &record, CancelReason::User);
        }
        // Calls this agent no longer remembers (beyond the bound, or of a session another
        // process ran) are in memory, with their result (C3).
        let finished = self
            .inner
            .finished_call(&call_id)
            .or_else(|| self.inner.config.memory.finished_call(&call_id));
        match finished {
            Some(ToolCallState::Cancelled { .. }) => CancelOutcome::AlreadyCancelled,
            Some(state) => CancelOutcome::AlreadyFinished(Some(state)),
            None => CancelOutcome::NotFound,
        }
    }

    /// Cancels the running reply: every unfinished call is cancelled in its phase, a streaming
    /// model answer is cut, and no further model request is made (R2-R4). `AlreadyFinished(None)`
    /// when no reply runs (C5).
    pub fn cancel_reply(&self) -> CancelOutcome {
        match self.inner.active_reply() {
            Some(reply) => reply.cancel(&self.inner.events),
            None => CancelOutcome::AlreadyFinished(None),
        }
    }

    /// Answers an approval request (spec 3.2). The first decision wins; a decision for a call
    /// that is not waiting for one is refused and changes nothing (A16).
    pub fn decide(
        &self,
        call_id: impl Into<CallId>,
        decision: ApprovalDecision,
    ) -> Result<(), ApprovalError> {
        let call_id = call_id.into();
        match self.inner.active_reply() {
            Some(reply) => reply.decide(&self.inner.events, &call_id, decision),
            None => Err(ApprovalError::NotPending(call_id)),
        }
    }

    /// Declines a pending call because nobody can decide it, e.g. a front end whose input is
    /// closed: the call becomes `Declined { reason: "no decision" }` with the decision source
    /// `NoDecision`, as when the approval channel closes (A15). Like [`Self::decide`], the first
    /// decision wins and a call that is not pending is refused (A16).
    pub fn decide_no_decision(&self, call_id: impl Into<CallId>) -> Result<(), ApprovalError> {
        let call_id = call_id.into();
        match self.inner.active_reply() {
            Some(reply) => reply.decide_no_decision(&self.inner.events, &call_id),
            None => Err(ApprovalError::NotPending(call_id)),
        }
    }

    /// Adds a user message to the running reply, without cancelling it: the message joins the
    /// conversation before the reply's next model request, running tools are not disturbed,
    /// and it is stored and shown (an [`AgentEvent::Message`]) like the reply's own messages.
    /// A reply whose model was about to answer goes on, so that the model reads it.
    ///
    /// # Errors
    /// [`SteerError::NotReplying`] when no reply runs (send the message as a new one), and
    /// [`SteerError::NotUserMessage`] for a message of another role; both hand it back.
    pub fn steer(&self, msg: Msg) -> Result<(), SteerError> {
        if msg.role != crate::message::Role::User {
            return Err(SteerError::NotUserMessage(msg));
        }
        match self.inner.active_reply() {
            Some(reply) => reply.steer(msg),
            None => Err(SteerError::NotReplying(msg)),
        }
    }

    /// Answers an input request ([`AgentEvent::InputRequested`]): the first answer wins; an
    /// accepted answer must match the request's schema.
    ///
    /// # Errors
    /// [`InputError::NotPending`] when the request is not open, [`InputError::Invalid`] (the
    /// request stays open) when the content does not fit the form.
    pub fn answer_input(&self, call_id: impl Into<CallId>, answer: InputAnswer) -> Result<(), InputError> {
        let call_id = call_id.into();
        match self.inner.active_reply() {
            Some(reply) => reply.answer_input(&self.inner.events, &call_id, answer),
            None => Err(InputError::NotPending(call_id)),
        }
    }

    /// Whether a reply is running now.
    pub fn is_replying(&self) -> bool {
        self.inner.active_reply().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::CancellationToken;

    /// A16, S2 at the exact interleaving: a cancel has committed on the call (its record is
    /// cancelled) but has not yet withdrawn the question from the reply. A decision now would
    /// have no effect, so it is refused, saying why.
    #[test]
    fn a16_a_decision_between_a_cancels_commit_and_its_withdrawal_is_refused_as_cancelled() {
        let hub = EventHub::default();
        let reply = super::super::react::new_reply(None);
        let record = CallRecord::new("c".into(), "tool".into(), CancellationToken::new(), false);
        reply.register(&hub, &record);
        assert!(record.request_approval());
        let mut answer = reply.expect_decision(&record).unwrap();
        let _ = record.cancel(CancelReason::User, || {});
        assert_eq!(
            reply.decide(&EventHub::default(), "c", ApprovalDecision::Approve),
            Err(ApprovalError::Cancelled("c".into()))
        );
        assert!(
            answer.try_recv().is_err(),
            "nothing was handed to the waiting call"
        );
    }
}
