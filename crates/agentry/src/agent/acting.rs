//! Acting: running the tool calls of one model message, each through approval, a queue slot
//! and execution to exactly one terminal state and one result (spec 3.0, S1-S4).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use futures::future::join_all;
use serde_json::{Map, Value, json};

use super::AgentError;
use super::approval::Approval;
use super::events::AgentEvent;
use super::react::ReplyCx;
use super::structured::StructuredSpec;
use crate::message::{ContentBlock, Msg, ToolResultBlock, ToolUseBlock};
use crate::tool::{
    CANCELLED_BEFORE_START, CANCELLED_RUNNING, CallPolicy, CallRecord, CancelPhase, CancelReason,
    DecisionSource, INTERRUPTED_RESTART, OnCancel, ProgressFn, ToolCallState, ToolContext, ToolResponse,
    UserAction, declined_text, timed_out_text,
};

/// What one call left behind.
struct CallOutcome {
    /// The result message, for memory.
    msg: Msg,
    /// The structured output, when this was a valid finish-function call.
    structured: Option<Map<String, Value>>,
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
    /// Runs the calls (concurrently or in order) and stores one result per call, in call order.
    /// Returns the last structured output produced.
    pub(super) async fn acting(
        &self,
        calls: Vec<ToolUseBlock>,
        structured: Option<&StructuredSpec>,
    ) -> Result<Option<Map<String, Value>>, AgentError> {
        // Every call is registered, and so cancellable, before any of them runs (C4).
        let records: Vec<Arc<CallRecord>> = calls
            .iter()
            .map(|call| {
                let policy = self.policy_for(call, structured);
                let pending = policy.require_approval && call.input.is_object();
                let record = CallRecord::new(
                    call.id.clone(),
                    call.name.clone(),
                    self.active.token.child_token(),
                    pending,
                );
                self.active.register(&self.inner.events, &record);
                record
            })
            .collect();
        let mut output = None;
        if self.inner.parallel_tool_calls && calls.len() > 1 {
            let runs = calls
                .into_iter()
                .zip(records)
                .map(|(call, record)| self.run_call(call, record, structured));
            let outcomes = join_all(runs).await;
            let mut msgs = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                if outcome.structured.is_some() {
                    output = outcome.structured;
                }
                msgs.push(outcome.msg);
            }
            self.inner.memory.add(msgs).await?;
        } else {
            for (call, record) in calls.into_iter().zip(records) {
                let outcome = self.run_call(call, record, structured).await;
                if outcome.structured.is_some() {
                    output = outcome.structured;
                }
                self.inner.memory.add(vec![outcome.msg]).await?;
            }
        }
        Ok(output)
    }

    fn policy_for(&self, call: &ToolUseBlock, structured: Option<&StructuredSpec>) -> CallPolicy {
        match structured {
            Some(spec) if call.name == spec.schema.name => CallPolicy::default(),
            _ => self.inner.toolkit.policy(&call.name),
        }
    }

    /// Takes one registered call to its terminal state and result. Never fails.
    async fn run_call(
        &self,
        mut call: ToolUseBlock,
        record: Arc<CallRecord>,
        structured: Option<&StructuredSpec>,
    ) -> CallOutcome {
        let call_id = call.id.clone();
        let called_name = call.name.clone();
        let started_at = Utc::now();
        let started = Instant::now();
        for (_, hook) in self.hooks.iter() {
            hook.pre_acting(&self.hook_cx, &mut call).await;
        }
        self.emit_with(|| AgentEvent::ToolStarted {
            reply_id: self.active.reply_id.clone(),
            call_id: call_id.clone(),
            name: called_name.clone(),
            input: call.input.clone(),
        });
        let mut msg = Msg::tool_result(ToolResultBlock {
            id: call_id.clone(),
            name: called_name.clone(),
            output: Vec::new(),
            is_error: false,
        });
        let policy = self.policy_for(&call, structured);

        let mut decision = None;
        let mut user_action = None;
        if record.is_pending_approval() {
            match self.approve(&record, &call, &policy).await {
                Approval::Approved(action, source) => {
                    user_action = Some(action);
                    decision = Some(source);
                }
                Approval::Closed(source) => decision = source,
            }
        }

        let mut structured_output = None;
        let mut metadata = Map::new();
        let (content, state) = if !record.start() {
            // Closed before it could run: declined, or cancelled while pending or queued (P1, P2).
            let state = record.terminal().unwrap_or(ToolCallState::Cancelled {
                phase: CancelPhase::BeforeStart,
                partial: false,
                reason: CancelReason::Reply,
            });
            (closed_before_start(&state, &call, &policy), state)
        } else if let Some(spec) = structured.filter(|spec| call.name == spec.schema.name) {
            let (response, output) = spec.handle(&call);
            structured_output = output;
            let state = if response.is_error {
                ToolCallState::Failed
            } else {
                ToolCallState::Completed
            };
            if record.finish(state.clone()) {
                (response.content, state)
            } else {
                let state = record.settle(false).unwrap_or(state);
                (stopped_content(&state, None, None), state)
            }
        } else {
            match self.execute(&record, &call, &policy, user_action, &mut msg).await {
                Execution::Done(response, state) => {
                    metadata = response.metadata;
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
        };

        let mut result = ToolResultBlock {
            id: call_id.clone(),
            name: called_name.clone(),
            output: content,
            is_error: state.is_error(),
        };
        for (_, hook) in self.hooks.iter() {
            hook.post_acting(&self.hook_cx, &call, &state, &mut result).await;
        }
        // The hooks may edit the output, not which call it answers.
        result.id = call_id.clone();
        metadata.insert("tool_call".into(), call_record_json(&state, decision, started_at));
        msg.content = vec![ContentBlock::ToolResult(result)];
        msg.metadata = metadata;
        self.print(&msg, true).await;
        self.emit_with(|| AgentEvent::ToolFinished {
            reply_id: self.active.reply_id.clone(),
            call_id,
            name: called_name,
            state,
            duration: started.elapsed(),
        });
        CallOutcome {
            msg,
            structured: structured_output,
        }
    }

    /// Runs the body until its last chunk, a cancel, or the timeout.
    async fn execute(
        &self,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        policy: &CallPolicy,
        user_action: Option<UserAction>,
        msg: &mut Msg,
    ) -> Execution {
        let ctx = ToolContext::for_record(
            Arc::clone(record),
            self.progress_fn(),
            user_action,
            self.inner.settings.cancel_grace,
        );
        let mut chunks = self.inner.toolkit.call(call, ctx);
        let started = tokio::time::Instant::now();
        let hard_limit = policy.progress_extends_timeout.map(|max| started + max);
        let mut deadline = policy.timeout.map(|t| started + t);
        let mut renewed = false;
        let mut timed_out = None;
        loop {
            tokio::select! {
                biased;
                () = record.token.cancelled() => break,
                () = sleep_until(deadline) => {
                    let now = tokio::time::Instant::now();
                    // Progress renews a renewable timeout, never past the hard limit (T4).
                    if let (Some(timeout), Some(limit), Some(at)) = (policy.timeout, hard_limit, record.progressed_at()) {
                        let renewed_until = (at + timeout).min(limit);
                        if renewed_until > now {
                            deadline = Some(renewed_until);
                            renewed = true;
                            continue;
                        }
                    }
                    let after = match (renewed, policy.timeout) {
                        (false, Some(timeout)) => timeout,
                        _ => Duration::from_millis((now - started).as_millis() as u64),
                    };
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
        if timed_out.is_none() {
            timed_out = record.stop_reason().and_then(Result::err);
        }
        let partial = run_on_cancel(
            record.take_on_cancel(),
            self.inner.settings.on_cancel_budget,
            &record.call_id,
        )
        .await;
        Execution::Stopped {
            partial,
            timeout: timed_out,
        }
    }

    /// Emits `ToolProgress` for `ToolContext::report`.
    fn progress_fn(&self) -> Option<ProgressFn> {
        if !self.wants_events() {
            return None;
        }
        // Weak: a tool that keeps its context must not keep the reply's event stream open.
        let active = Arc::downgrade(&self.active);
        let events = Arc::clone(&self.inner.events);
        Some(Arc::new(move |call_id: &str, id: Option<&str>, message: &str| {
            let Some(active) = active.upgrade() else { return };
            active.emit(
                &events,
                AgentEvent::ToolProgress {
                    reply_id: active.reply_id.clone(),
                    call_id: call_id.to_owned(),
                    id: id.map(str::to_owned),
                    message: message.to_owned(),
                },
            );
        }))
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

/// Sleeps until `deadline`, or forever without one (an optional timer for `select!`).
pub(super) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs `on_cancel` off the tool's task within `budget` (X10); its non-blank text, if any.
async fn run_on_cancel(callback: Option<OnCancel>, budget: Duration, call_id: &str) -> Option<String> {
    let callback = callback?;
    let task = tokio::task::spawn_blocking(callback);
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
fn closed_before_start(state: &ToolCallState, call: &ToolUseBlock, policy: &CallPolicy) -> Vec<ContentBlock> {
    let text = match state {
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
    vec![ContentBlock::text(text)]
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

/// What memory keeps of the call besides its output (Y3).
fn call_record_json(
    state: &ToolCallState,
    decision: Option<DecisionSource>,
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
        map.insert("started_at".into(), json!(started_at.to_rfc3339()));
        map.insert("finished_at".into(), json!(Utc::now().to_rfc3339()));
    }
    record
}
