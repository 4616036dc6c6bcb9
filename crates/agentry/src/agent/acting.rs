//! Acting: running the tool calls of one model message, each through approval, a queue slot
//! and execution to exactly one terminal state and one result (spec 3.0, S1-S4).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use futures::future::join_all;
use serde_json::{Map, Value, json};

use super::AgentError;
use super::approval::ApprovalPhase;
use super::deadline::sleep_until;
use super::events::AgentEvent;
use super::react::ReplyCx;
use super::structured::StructuredSpec;
use super::trace;
use crate::CallId;
use crate::memory::{Memory, MemoryError};
use crate::message::{ContentBlock, Msg, ToolResultBlock, ToolUseBlock};
use crate::model::ChatUsage;
use crate::tool::{
    ApprovalRequest, AskFn, CANCELLED_BEFORE_START, CANCELLED_RUNNING, CallPolicy, CallRecord, CancelCause,
    CancelPhase, CancelReason, DecisionSource, INTERRUPTED_RESTART, OnCancel, PreparedCall, ProgressFn,
    ToolCallState, ToolContext, ToolResponse, UsageFn, UserAction, declined_text, timed_out_text,
};

/// Where a batch's results go in memory: right after the assistant message, in call order,
/// each stored as soon as it is final, whatever order the calls finish in (Y1, X6).
struct ResultSlots {
    /// The id of each call's stored result message.
    stored: tokio::sync::Mutex<Vec<Option<String>>>,
}

impl ResultSlots {
    fn new(calls: usize) -> Self {
        ResultSlots {
            stored: tokio::sync::Mutex::new(vec![None; calls]),
        }
    }

    /// Stores the result of call `index` before the results of later calls already stored.
    async fn store(&self, memory: &dyn Memory, index: usize, msg: Msg) -> Result<(), MemoryError> {
        let mut stored = self.stored.lock().await;
        let later = stored.iter().skip(index + 1).flatten().next().cloned();
        let id = msg.id.clone();
        match later {
            Some(before) => memory.insert_before(&before, vec![msg]).await?,
            None => memory.add(vec![msg]).await?,
        }
        if let Some(slot) = stored.get_mut(index) {
            *slot = Some(id);
        }
        Ok(())
    }
}

/// What a call will do once it may start: run its tool, produce the structured output, or
/// fail with the refusal `Toolkit::prepare` gave.
enum Plan<'s> {
    Run(PreparedCall),
    /// The same tool with the same arguments completed earlier in this reply: its result
    /// again, with a note, and the tool is not run.
    Repeat(Vec<ContentBlock>),
    Finish(&'s StructuredSpec),
    Refused(ToolResponse),
}

/// How a call ended, before its result is built.
struct Ended {
    content: Vec<ContentBlock>,
    state: ToolCallState,
    /// The tool's result metadata (kept with the result message).
    metadata: Map<String, Value>,
    /// How long the body ran (zero when it never did).
    ran_for: Duration,
    /// The finish function's valid output.
    structured_output: Option<Map<String, Value>>,
}

impl Default for Ended {
    fn default() -> Self {
        Ended {
            content: Vec::new(),
            state: ToolCallState::Failed,
            metadata: Map::new(),
            ran_for: Duration::ZERO,
            structured_output: None,
        }
    }
}

/// How execution ended, before the result is built.
enum Execution {
    /// The body's final chunk, with the committed state.
    Done(ToolResponse, ToolCallState),
    /// Cancelled or timed out while running; `on_cancel` gave this (non-blank) text or nothing.
    Stopped {
        partial: Option<String>,
        timeout: Option<Duration>,
    },
}

impl ReplyCx<'_> {
    /// Runs the calls (concurrently or in order) and stores one result per call, in call order,
    /// each as soon as it is final. Returns the last structured output produced.
    pub(super) async fn acting(
        &self,
        calls: Vec<ToolUseBlock>,
        structured: Option<&StructuredSpec>,
    ) -> Result<Option<Map<String, Value>>, AgentError> {
        // Every call is registered, and so cancellable, before any of them runs (C4). Whether it
        // needs approval is decided later, on the call as it will run (S3).
        let records: Vec<Arc<CallRecord>> = calls
            .iter()
            .map(|call| {
                let record = CallRecord::new(
                    call.id.clone(),
                    call.name.clone(),
                    self.active.token.child_token(),
                    false,
                );
                self.active.register(&self.inner.events, &record);
                record
            })
            .collect();
        let slots = ResultSlots::new(calls.len());
        let mut output = None;
        if self.inner.config.parallel_tool_calls && calls.len() > 1 {
            let runs = calls
                .into_iter()
                .zip(records)
                .enumerate()
                .map(|(index, (call, record))| self.run_call(call, record, structured, &slots, index));
            let mut first_error = None;
            for outcome in join_all(runs).await {
                match outcome {
                    Ok(Some(structured)) => output = Some(structured),
                    Ok(None) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        } else {
            for (index, (call, record)) in calls.into_iter().zip(records).enumerate() {
                if let Some(structured) = self.run_call(call, record, structured, &slots, index).await? {
                    output = Some(structured);
                }
            }
        }
        Ok(output)
    }

    /// [`Self::run_call_in`] inside the call's `execute_tool` span (`trace.rs`).
    async fn run_call(
        &self,
        call: ToolUseBlock,
        record: Arc<CallRecord>,
        structured: Option<&StructuredSpec>,
        slots: &ResultSlots,
        index: usize,
    ) -> Result<Option<Map<String, Value>>, AgentError> {
        let span = trace::execute_tool(self.inner, &self.agent_span, &call);
        span.instrument(self.run_call_in(call, record, structured, slots, index, &span))
            .await
    }

    /// Takes one registered call to its terminal state, stores its result, then announces it
    /// (X6: a consumer that sees `ToolFinished` finds the result in memory). Returns the
    /// structured output when this was a valid finish-function call; fails only when memory does.
    async fn run_call_in(
        &self,
        mut call: ToolUseBlock,
        record: Arc<CallRecord>,
        structured: Option<&StructuredSpec>,
        slots: &ResultSlots,
        index: usize,
        span: &trace::ToolSpan,
    ) -> Result<Option<Map<String, Value>>, AgentError> {
        let called_name = call.name.clone();
        let started_at = Utc::now();
        self.start_call(&mut call, &record).await;
        let mut msg = Msg::tool_result(ToolResultBlock {
            id: record.call_id.clone(),
            name: called_name.clone(),
            output: Vec::new(),
            is_error: false,
        });
        // Checked and approved as it will run: after the hooks, so a hook that renames a call
        // or rewrites its arguments cannot skip approval (S3, A1); a call that could never run
        // is refused before anyone is asked.
        let plan = self.plan(&call, structured);
        let policy = match &plan {
            Plan::Run(prepared) => prepared.policy().clone(),
            Plan::Finish(_) | Plan::Refused(_) | Plan::Repeat(_) => CallPolicy::default(),
        };
        let approval = match &plan {
            // It ran in an earlier process, approved then; it is found again, not run anew.
            Plan::Run(_) if self.resume_points.contains_key(&call.id) => ApprovalPhase::none(),
            Plan::Run(_) => self.approval_phase(&record, &call, &policy).await,
            Plan::Finish(_) | Plan::Refused(_) | Plan::Repeat(_) => ApprovalPhase::none(),
        };
        let ended = self
            .conclude(plan, &record, &call, &policy, approval.user_action, &mut msg)
            .await;
        let mut result = ToolResultBlock {
            id: record.call_id.clone(),
            name: called_name,
            output: ended.content,
            is_error: ended.state.is_error(),
        };
        for (_, hook) in self.hooks.iter() {
            hook.post_acting(&self.hook_cx, &call, &ended.state, &mut result)
                .await;
        }
        // The hooks may edit the output, not which call it answers.
        result.id = record.call_id.clone();
        trace::tool_finished(
            self.inner,
            span,
            &ended.state,
            approval.source,
            policy.timeout,
            &result,
        );
        let mut metadata = ended.metadata;
        metadata.insert(
            "tool_call".into(),
            call_record_json(
                &ended.state,
                approval.source,
                approval.request.as_ref(),
                started_at,
            ),
        );
        msg.content = vec![ContentBlock::ToolResult(result)];
        msg.metadata = metadata;
        self.record_then_announce(msg, &call, ended.state, ended.ran_for, slots, index)
            .await?;
        Ok(ended.structured_output)
    }

    /// The `pre_acting` hooks, then `ToolStarted` for the call as they left it.
    async fn start_call(&self, call: &mut ToolUseBlock, record: &CallRecord) {
        for (_, hook) in self.hooks.iter() {
            hook.pre_acting(&self.hook_cx, call).await;
        }
        // Hooks may repair the name and the arguments, not which call this is.
        call.id = record.call_id.clone();
        self.emit_with(|| AgentEvent::ToolStarted {
            reply_id: self.active.reply_id.clone(),
            call_id: record.call_id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
    }

    /// What the call will do once it may start.
    fn plan<'s>(&self, call: &ToolUseBlock, structured: Option<&'s StructuredSpec>) -> Plan<'s> {
        match structured.filter(|spec| call.name == spec.schema.name) {
            Some(spec) => Plan::Finish(spec),
            None if self.inner.config.answer_repeated_calls
                && self.inner.config.toolkit.policy(&call.name).pure
                && let Some(output) = self.repeated.answer(self.hook_cx.iteration, call) =>
            {
                Plan::Repeat(output)
            }
            None => match self.inner.config.toolkit.prepare(call) {
                Ok(prepared) => Plan::Run(prepared),
                Err(refused) => Plan::Refused(refused),
            },
        }
    }

    /// Takes the call to its terminal state: refused, answered from an earlier round, closed
    /// before it started (declined, cancelled), run, or the finish function's output.
    async fn conclude(
        &self,
        plan: Plan<'_>,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        policy: &CallPolicy,
        user_action: Option<UserAction>,
        msg: &mut Msg,
    ) -> Ended {
        let mut ended = Ended::default();
        let (content, state) = match plan {
            Plan::Refused(refused) => match record.finish(ToolCallState::Failed) {
                true => (refused.content, ToolCallState::Failed),
                false => closed_before_start(record, call, policy),
            },
            Plan::Repeat(output) => match record.finish(ToolCallState::Completed) {
                true => (output, ToolCallState::Completed),
                false => closed_before_start(record, call, policy),
            },
            _ if !record.start() => closed_before_start(record, call, policy),
            Plan::Run(prepared) => {
                if !policy.pure {
                    // It may change what pure calls read: no earlier result is answered again.
                    self.repeated.forget();
                }
                // The clock of the timeouts, so that a reported duration and the limit that fired agree.
                let running = tokio::time::Instant::now();
                let executed = self
                    .execute(record, call, prepared, policy, user_action, msg)
                    .await;
                ended.ran_for = running.elapsed();
                match executed {
                    Execution::Done(mut response, state) => {
                        if state == ToolCallState::Completed {
                            self.note_repeat(call, &record.call_id, policy, &mut response.content);
                        }
                        ended.metadata = response.metadata;
                        (response.content, state)
                    }
                    Execution::Stopped { partial, timeout } => {
                        let state = record
                            .settle(partial.is_some())
                            .unwrap_or(ToolCallState::Cancelled {
                                phase: CancelPhase::Running,
                                partial: false,
                                reason: CancelReason::Reply,
                            });
                        (stopped_content(&state, partial, timeout), state)
                    }
                }
            }
            Plan::Finish(spec) => {
                let (response, output) = spec.handle(call);
                ended.structured_output = output;
                let state = match response.is_error {
                    true => ToolCallState::Failed,
                    false => ToolCallState::Completed,
                };
                if record.finish(state.clone()) {
                    (response.content, state)
                } else {
                    let state = record.settle(false).unwrap_or(state);
                    (stopped_content(&state, None, None), state)
                }
            }
        };
        ended.content = content;
        ended.state = state;
        ended
    }

    /// Remembers a completed call for the repeat guard; a repeat of a tool that is not pure (it
    /// ran again, its result fresh) gets a note to answer now (`repeats.rs`).
    fn note_repeat(
        &self,
        call: &ToolUseBlock,
        call_id: &CallId,
        policy: &CallPolicy,
        content: &mut Vec<ContentBlock>,
    ) {
        if !self.inner.config.answer_repeated_calls {
            return;
        }
        let round = self.hook_cx.iteration;
        if !policy.pure
            && let Some(note) = self.repeated.rerun_note(round, call)
        {
            content.push(ContentBlock::text(note));
        }
        self.repeated
            .completed(round, call, call_id, content, policy.pure);
    }

    /// Records first, then announces (X6, L3): whoever sees the last chunk or `ToolFinished`
    /// finds the result in memory.
    async fn record_then_announce(
        &self,
        msg: Msg,
        call: &ToolUseBlock,
        state: ToolCallState,
        ran_for: Duration,
        slots: &ResultSlots,
        index: usize,
    ) -> Result<(), MemoryError> {
        let shown = self.wants_events().then(|| msg.clone());
        let stored = slots.store(self.inner.config.memory.as_ref(), index, msg).await;
        if let Some(shown) = shown {
            self.print(&shown, true).await;
        }
        self.emit_with(|| AgentEvent::ToolFinished {
            reply_id: self.active.reply_id.clone(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            state,
            duration: ran_for,
        });
        stored
    }

    /// Runs the body until its last chunk, a cancel, or the timeout.
    async fn execute(
        &self,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        prepared: PreparedCall,
        policy: &CallPolicy,
        user_action: Option<UserAction>,
        msg: &mut Msg,
    ) -> Execution {
        let ctx = ToolContext::for_record(
            Arc::clone(record),
            self.progress_fn(),
            Some(self.usage_fn()),
            user_action,
            self.inner.config.settings.cancel_grace,
            self.inner.config.settings.on_cancel_budget,
            self.inner.config.extensions.clone(),
        )
        .with_asker(self.ask_fn(&call.id))
        .with_resumed_from(self.resume_points.get(&call.id).cloned());
        let mut chunks = self.inner.config.toolkit.run(prepared, call, ctx);
        let started = tokio::time::Instant::now();
        let mut limits = Limits::new(started, policy);
        let mut timed_out = None;
        loop {
            tokio::select! {
                biased;
                () = record.token.cancelled() => break,
                () = sleep_until(limits.deadline) => {
                    let Some(after) = limits.expired(record.progressed_at()) else { continue };
                    if record.time_out(after) {
                        timed_out = Some(after);
                        break;
                    }
                }
                chunk = chunks.next() => match chunk {
                    Some(chunk) if chunk.is_last => {
                        let state = if chunk.is_error { ToolCallState::Failed } else { ToolCallState::Completed };
                        if record.finish(state.clone()) {
                            return Execution::Done(chunk, state);
                        }
                        // A cancel or timeout committed first: this result is discarded (S2, X11).
                        break;
                    }
                    Some(chunk) => {
                        // Progress before a cancel is shown, never after it (X11, X12).
                        if record.is_running() {
                            self.print_partial(msg, &chunk).await;
                        }
                    }
                    None => {
                        let failed = ToolResponse::error("Error: the tool ended without a result.");
                        if record.finish(ToolCallState::Failed) {
                            return Execution::Done(failed, ToolCallState::Failed);
                        }
                        break;
                    }
                },
            }
        }
        if timed_out.is_none()
            && let Some(CancelCause::TimedOut { after }) = record.cancel_cause()
        {
            timed_out = Some(after);
        }
        let partial = run_on_cancel(
            record.take_on_cancel_bounded(),
            self.inner.config.settings.on_cancel_budget,
            &self.inner.session.on_cancel_slots,
            &record.call_id,
        )
        .await;
        Execution::Stopped {
            partial,
            timeout: timed_out,
        }
    }

    /// Counts `ToolContext::report_usage` in the reply's usage and budget.
    fn usage_fn(&self) -> UsageFn {
        // Weak: a tool that keeps its context must not keep the reply alive.
        let active = Arc::downgrade(&self.active);
        let events = Arc::clone(&self.inner.events);
        Arc::new(move |usage: &ChatUsage| {
            if let Some(active) = active.upgrade() {
                active.add_usage(&events, usage);
            }
        })
    }

    /// Emits `ToolProgress` for `ToolContext::report`.
    fn progress_fn(&self) -> Option<ProgressFn> {
        if !self.wants_events() {
            return None;
        }
        // Weak: a tool that keeps its context must not keep the reply's event stream open.
        let active = Arc::downgrade(&self.active);
        let events = Arc::clone(&self.inner.events);
        Some(Arc::new(
            move |call_id: &str, id: Option<&str>, message: &str, nested: bool| {
                let Some(active) = active.upgrade() else { return };
                active.emit(
                    &events,
                    AgentEvent::ToolProgress {
                        reply_id: active.reply_id.clone(),
                        call_id: call_id.into(),
                        id: id.map(str::to_owned),
                        message: message.to_owned(),
                        nested,
                    },
                );
            },
        ))
    }

    /// How call `call_id` asks the user what it needs: through this reply.
    fn ask_fn(&self, call_id: &CallId) -> AskFn {
        Arc::new(super::asker::ReplyAsker {
            // Weak, as for progress: a context kept by a tool must not keep the reply alive.
            active: Arc::downgrade(&self.active),
            events: Arc::clone(&self.inner.events),
            call_id: call_id.clone(),
            hooks: Arc::downgrade(&self.hooks),
            hook_cx: self.hook_cx.clone(),
        })
    }

    /// Shows a non-final chunk as the result message's current state.
    async fn print_partial(&self, msg: &mut Msg, chunk: &ToolResponse) {
        if !self.wants_events() {
            return;
        }
        if let Some(ContentBlock::ToolResult(result)) = msg.content.first_mut() {
            result.output = chunk.content.clone();
        }
        self.print(msg, false).await;
    }
}

/// The time limits of a running call (T1, T4): its timeout, which progress may renew when the
/// tool allows it, and the hard limit that nothing renews. Either alone limits the call.
struct Limits {
    started: tokio::time::Instant,
    timeout: Option<Duration>,
    /// When progress can no longer renew anything.
    hard_limit: Option<tokio::time::Instant>,
    /// When the call times out unless renewed.
    deadline: Option<tokio::time::Instant>,
    renewed: bool,
}

impl Limits {
    fn new(started: tokio::time::Instant, policy: &CallPolicy) -> Self {
        let timeout = policy.timeout;
        let hard_limit = policy.progress_extends_timeout.map(|max| started + max);
        let idle = timeout.map(|t| started + t);
        let deadline = match (idle, hard_limit) {
            (Some(idle), Some(limit)) => Some(idle.min(limit)),
            (idle, limit) => idle.or(limit),
        };
        Limits {
            started,
            timeout,
            hard_limit,
            deadline,
            renewed: false,
        }
    }

    /// The deadline passed: `None` when progress since renews it (never past the hard limit),
    /// else the time to report as the timeout.
    fn expired(&mut self, progressed_at: Option<tokio::time::Instant>) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        if let (Some(timeout), Some(limit), Some(at)) = (self.timeout, self.hard_limit, progressed_at) {
            let renewed_until = (at + timeout).min(limit);
            if renewed_until > now {
                self.deadline = Some(renewed_until);
                self.renewed = true;
                return None;
            }
        }
        let at_limit = self.hard_limit.is_some_and(|limit| now >= limit);
        Some(match self.timeout {
            Some(timeout) if !self.renewed && !at_limit => timeout,
            _ => Duration::from_millis((now - self.started).as_millis() as u64),
        })
    }
}

/// Runs `on_cancel` off the tool's task within `budget` (X10); its non-blank text, if any.
///
/// A callback cannot be stopped once it runs, so one that never returns keeps its thread and its
/// slot for good; with every slot held, callbacks are skipped (the standard text is used) rather
/// than piling up threads without bound.
///
/// A bounded callback (the runtime's own, returning within the budget by construction) needs
/// no slot: it is never skipped (L4).
async fn run_on_cancel(
    callback: Option<(OnCancel, bool)>,
    budget: Duration,
    slots: &Arc<tokio::sync::Semaphore>,
    call_id: &str,
) -> Option<String> {
    let (callback, bounded) = callback?;
    let slot = match Arc::clone(slots).try_acquire_owned() {
        Ok(slot) => Some(slot),
        Err(_) if bounded => None,
        Err(_) => {
            tracing::warn!(
                call_id,
                "every on_cancel slot is held by a callback that has not returned; the standard cancelled result is used"
            );
            return None;
        }
    };
    let task = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        callback()
    });
    match tokio::time::timeout(budget, task).await {
        Ok(Ok(text)) => text.filter(|t| !t.trim().is_empty()),
        Ok(Err(_)) => {
            tracing::warn!(
                call_id,
                "on_cancel panicked; the standard cancelled result is used"
            );
            None
        }
        Err(_) => {
            tracing::warn!(
                call_id,
                ?budget,
                "on_cancel ran over its budget; the standard cancelled result is used"
            );
            None
        }
    }
}

/// The model-visible result of a call closed before its body ran (A10, P1, Y2).
fn closed_before_start(
    record: &CallRecord,
    call: &ToolUseBlock,
    policy: &CallPolicy,
) -> (Vec<ContentBlock>, ToolCallState) {
    // Declined, or cancelled while pending or queued (P1, P2).
    let state = record.terminal().unwrap_or(ToolCallState::Cancelled {
        phase: CancelPhase::BeforeStart,
        partial: false,
        reason: CancelReason::Reply,
    });
    let text = match &state {
        ToolCallState::Declined { reason } => match (&policy.declined_message, call.input.as_object()) {
            (Some(message), Some(args)) => message(args, reason.as_deref()),
            _ => declined_text(reason.as_deref()),
        },
        ToolCallState::Cancelled {
            reason: CancelReason::Restart,
            ..
        } => INTERRUPTED_RESTART.to_owned(),
        _ => CANCELLED_BEFORE_START.to_owned(),
    };
    (vec![ContentBlock::text(text)], state)
}

/// The model-visible result of a call stopped while running (X7-X9, T2, Y2).
fn stopped_content(
    state: &ToolCallState,
    partial: Option<String>,
    timeout: Option<Duration>,
) -> Vec<ContentBlock> {
    let text = match (state, timeout) {
        (ToolCallState::TimedOut { .. }, Some(after)) => timed_out_text(after, partial.as_deref()),
        (
            ToolCallState::Cancelled {
                reason: CancelReason::Restart,
                ..
            },
            _,
        ) => INTERRUPTED_RESTART.to_owned(),
        _ => partial.unwrap_or_else(|| CANCELLED_RUNNING.to_owned()),
    };
    vec![ContentBlock::text(text)]
}

/// What memory keeps of the call besides its output (Y3): its state, who decided and the
/// approval request's message as the explanation (A5), and its times.
fn call_record_json(
    state: &ToolCallState,
    decision: Option<DecisionSource>,
    request: Option<&ApprovalRequest>,
    started_at: chrono::DateTime<Utc>,
) -> Value {
    let mut record = serde_json::to_value(state).unwrap_or_else(|_| json!({"state": state.name()}));
    if let Value::Object(map) = &mut record {
        if let Some(source) = decision {
            map.insert(
                "decision".into(),
                serde_json::to_value(source).unwrap_or(Value::Null),
            );
        }
        if let Some(request) = request {
            map.insert("explanation".into(), json!(request.message));
        }
        map.insert("started_at".into(), json!(started_at.to_rfc3339()));
        map.insert("finished_at".into(), json!(Utc::now().to_rfc3339()));
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    /// L4, X10: with every slot held by callbacks that never returned, a tool's callback is
    /// skipped (threads stay bounded), but a bounded one of the runtime's (the MCP
    /// notification) still runs.
    #[tokio::test]
    async fn l4_x10_a_bounded_callback_runs_without_a_free_slot_and_a_tools_does_not() {
        let held = Arc::new(tokio::sync::Semaphore::new(0));
        let budget = Duration::from_secs(5);
        let tools: OnCancel = Box::new(|| Some("tool".into()));
        assert_eq!(
            run_on_cancel(Some((tools, false)), budget, &held, "c1").await,
            None
        );
        let runtimes: OnCancel = Box::new(|| Some("notified".into()));
        assert_eq!(
            run_on_cancel(Some((runtimes, true)), budget, &held, "c2")
                .await
                .as_deref(),
            Some("notified")
        );
    }
}
