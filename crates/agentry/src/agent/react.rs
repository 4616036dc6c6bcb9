//! The reasoning/acting loop of one reply.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;
use tracing::Instrument;

use super::events::{AgentEvent, StopReason};
use super::handle::ActiveReply;
use super::hooks::{HookContext, ReplyEnd};
use super::repeats::RepeatedCalls;
use super::shim::TextCallShim;
use super::structured::{STRUCTURED_REQUIRED_HINT, StructuredSpec, TEXT_AFTER_STRUCTURED_HINT};
use super::trace;
use super::{AgentError, AgentInner, HookList, REPLY_INTERRUPTED_NOTE};
use crate::memory::{check_tool_pairs, repair_tool_pairs, unanswered_last_calls};
use crate::message::{BlockKind, ContentBlock, Msg, Role, ToolUseBlock, new_id};
use crate::{CallId, ReplyId};

pub(crate) fn new_reply(sink: Option<tokio::sync::mpsc::UnboundedSender<AgentEvent>>) -> Arc<ActiveReply> {
    ActiveReply::new(ReplyId::new(new_id()), sink)
}
use crate::model::{ChatRequest, ModelError, ToolChoice, ToolSchema};
use crate::tool::CancelReason;
use crate::usage::BudgetExceeded;

/// The hint that asks for a summary after `max_iters` rounds.
pub(super) const SUMMARY_HINT: &str = "You have failed to generate response within the maximum iterations. \
     Now respond directly by summarizing the current situation.";

/// The hint that asks for the answer when the model kept repeating calls it had the results of.
pub(super) const ANSWER_NOW_HINT: &str = "You already have the results of the tools you called; calling them again \
     gives nothing new. Answer the user's last question now, in plain text, using those results.";

/// A model call's message, and whether the reply was cancelled before it was complete.
struct ModelOutput {
    msg: Msg,
    interrupted: bool,
    /// Whether cumulative states of `msg` were printed (so its last state must be too).
    printed: bool,
    /// Whether the tool shim read the message's calls from its text.
    recovered: bool,
}

/// The state of one reply.
pub(crate) struct ReplyCx<'a> {
    pub(super) inner: &'a AgentInner,
    pub(super) active: Arc<ActiveReply>,
    pub(super) hooks: HookList,
    pub(super) hook_cx: HookContext,
    /// Hints for the next model call only (never stored in memory).
    pending_hints: Vec<Msg>,
    /// The assistant messages of this reply, newest last.
    last_assistant: Option<Msg>,
    /// The ids of every call of this reply: an id is never reused within a reply, so
    /// `cancel_call` always finds the call that is running (C4).
    call_ids: HashSet<CallId>,
    /// Completed calls of this reply, to answer a repeat without running it again.
    pub(super) repeated: RepeatedCalls,
    /// The reply's `invoke_agent` span, the parent of its `chat` and `execute_tool` spans.
    pub(super) agent_span: trace::ReplySpan,
    /// The plan notebook's revision last announced.
    plan_revision: u64,
    /// The calls this reply resumes from an earlier process, with the token each left.
    pub(super) resume_points: std::collections::HashMap<CallId, Value>,
}

/// What starts a reply.
pub(crate) enum Incoming {
    /// A new message, or none to continue the conversation.
    Message(Option<Msg>),
    /// Act on the calls of the last model message that have no result, then continue.
    Resume,
}

impl Incoming {
    /// The new message, if there is one.
    fn message(&self) -> Option<&Msg> {
        match self {
            Incoming::Message(msg) => msg.as_ref(),
            Incoming::Resume => None,
        }
    }
}

impl<'a> ReplyCx<'a> {
    /// Runs one reply from start to `ReplyFinished`.
    pub(crate) async fn run(
        inner: &'a AgentInner,
        incoming: Incoming,
        structured: Option<StructuredSpec>,
        active: Arc<ActiveReply>,
    ) -> Result<Msg, AgentError> {
        let _one_at_a_time = inner.session.reply_lock.lock().await;
        let hooks = inner
            .hooks
            .read()
            .map(|h| Arc::clone(&h))
            .unwrap_or_else(|e| Arc::clone(&e.into_inner()));
        let reply_id = active.reply_id.clone();
        *inner.session.active.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&active));
        active.meter.configure(
            inner.config.budget,
            inner
                .config
                .prices
                .price(inner.config.model.model_name())
                .copied(),
        );
        let agent_span = trace::invoke_agent(inner, &reply_id, incoming.message());
        let mut cx = ReplyCx {
            inner,
            active,
            hooks,
            hook_cx: HookContext {
                agent_name: inner.config.name.clone(),
                reply_id: reply_id.clone(),
                iteration: 0,
            },
            pending_hints: Vec::new(),
            last_assistant: None,
            call_ids: HashSet::new(),
            repeated: RepeatedCalls::default(),
            agent_span,
            plan_revision: inner.config.plan.as_ref().map_or(0, |plan| plan.revision()),
            resume_points: std::collections::HashMap::new(),
        };
        let span = tracing::info_span!("reply", agent = %inner.config.name, reply_id = %reply_id);
        let mut outcome = cx.reply(incoming, structured.as_ref()).instrument(span).await;
        // Messages that came too late for the reply are kept all the same, after it.
        let late = cx.active.close_steering();
        if let Err(e) = cx.store_steering(late).await
            && outcome.is_ok()
        {
            outcome = Err(e);
        }
        let stop_reason = match &outcome {
            Ok((_, reason)) => reason.clone(),
            Err(e) => StopReason::Failed(e.to_string()),
        };
        inner.set_memory_checked(matches!(
            stop_reason,
            StopReason::Answered | StopReason::MaxIters | StopReason::RepeatedCalls
        ));
        let calls = cx.active.finish();
        inner
            .session
            .finished_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(calls);
        *inner.session.active.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let usage = cx.active.meter.usage();
        trace::reply_finished(inner, &cx.agent_span, &outcome, &usage);
        let end = ReplyEnd {
            stop_reason,
            usage,
            cost: cx.active.meter.cost(),
        };
        for (_, hook) in cx.hooks.iter() {
            hook.reply_finished(&cx.hook_cx, &end).await;
        }
        cx.emit_with(|| AgentEvent::ReplyFinished {
            reply_id: reply_id.clone(),
            stop_reason: end.stop_reason,
            usage: end.usage,
            cost: end.cost,
        });
        outcome.map(|(msg, _)| msg)
    }

    async fn reply(
        &mut self,
        incoming: Incoming,
        structured: Option<&StructuredSpec>,
    ) -> Result<(Msg, StopReason), AgentError> {
        let mut msg = match incoming {
            Incoming::Message(msg) => msg,
            Incoming::Resume => {
                // Before the pairing check, which would close these calls as interrupted.
                let waiting = self.unanswered_calls().await?;
                for call in &waiting {
                    if let Some(token) = self.inner.config.memory.resume_point(&call.id).await {
                        self.resume_points.insert(call.id.clone(), token);
                    }
                }
                if !waiting.is_empty() {
                    self.acting(waiting, structured).await?;
                }
                None
            }
        };
        self.ensure_memory_pairs().await?;
        for (_, hook) in self.hooks.iter() {
            hook.pre_reply(&self.hook_cx, &mut msg).await;
        }
        let question = msg.as_ref().and_then(Msg::text).unwrap_or_default();
        if let Some(msg) = msg {
            self.inner.config.memory.add(vec![msg]).await?;
        }
        self.recall(&question).await?;
        let mut tool_choice = structured.map(|_| ToolChoice::Required);
        let mut requirement_pending = structured.is_some();
        let mut structured_output = None;
        let mut reply = None;
        for iteration in 0..self.inner.config.max_iters {
            if self.active.is_cancelled() {
                break;
            }
            self.hook_cx.iteration = iteration;
            self.steer_in().await?;
            let reasoning = self.reasoning(tool_choice.clone(), structured).await?;
            let calls: Vec<_> = reasoning.tool_uses().cloned().collect();
            let called_tools = !calls.is_empty();
            let acted = self.acting(calls, structured).await;
            self.announce_plan_change().await;
            if let Some(output) = acted? {
                structured_output = Some(output);
            }
            if self.active.is_cancelled() {
                break;
            }
            if self.repeated.should_stop() {
                // The model keeps asking for what it has: summarize instead of looping on.
                break;
            }
            if requirement_pending {
                // spec: agentscope.md 1.D, item 21.
                if structured_output.is_some() {
                    let texts: Vec<ContentBlock> = reasoning.blocks(BlockKind::Text).cloned().collect();
                    if !texts.is_empty() {
                        reply = Some(Msg::new(&self.inner.config.name, Role::Assistant, texts));
                        break;
                    }
                    self.pending_hints.push(Msg::user(TEXT_AFTER_STRUCTURED_HINT));
                    tool_choice = Some(ToolChoice::None);
                    requirement_pending = false;
                } else if !called_tools {
                    self.pending_hints.push(Msg::user(STRUCTURED_REQUIRED_HINT));
                    tool_choice = Some(ToolChoice::Required);
                }
            } else if !called_tools {
                if self.active.has_steering() {
                    // The user added to the conversation while the model answered: it reads it.
                    continue;
                }
                reply = Some(reasoning);
                break;
            }
        }
        if self.active.is_cancelled() {
            return self.interrupted().await;
        }
        let (mut reply, stop_reason) = match reply {
            Some(reply) => (reply, StopReason::Answered),
            None if self.repeated.should_stop() => match self.summarizing(ANSWER_NOW_HINT).await? {
                Some(summary) => (summary, StopReason::RepeatedCalls),
                None => return self.interrupted().await,
            },
            None => match self.summarizing(SUMMARY_HINT).await? {
                Some(summary) => (summary, StopReason::MaxIters),
                None => return self.interrupted().await,
            },
        };
        if let Some(output) = structured_output {
            reply.metadata = output;
        }
        for (_, hook) in self.hooks.iter() {
            hook.post_reply(&self.hook_cx, &mut reply).await;
        }
        if stop_reason == StopReason::Answered {
            self.remember(&question, &reply).await;
        }
        Ok((reply, stop_reason))
    }

    /// Adds the user's steering messages to the conversation, as they came.
    async fn steer_in(&mut self) -> Result<(), AgentError> {
        let messages = self.active.take_steering();
        self.store_steering(messages).await
    }

    /// Stores steering messages and shows them.
    pub(super) async fn store_steering(&mut self, messages: Vec<Msg>) -> Result<(), AgentError> {
        if messages.is_empty() {
            return Ok(());
        }
        self.inner.config.memory.add(messages.clone()).await?;
        for msg in messages {
            self.emit_with(|| AgentEvent::Message { msg, last: true });
        }
        Ok(())
    }

    /// Ends a cancelled reply: the note for the next request (R5), and the last assistant
    /// message of the reply, marked interrupted, as its value (R4). A reply stopped by its
    /// budget says so in the note and in its stop reason.
    async fn interrupted(&mut self) -> Result<(Msg, StopReason), AgentError> {
        let budget = self.active.meter.exceeded();
        if self.inner.config.settings.interrupted_note {
            let note = match &budget {
                Some(exceeded) => budget_note(exceeded),
                None => REPLY_INTERRUPTED_NOTE.to_owned(),
            };
            self.inner
                .config
                .memory
                .add(vec![Msg::new(
                    "system",
                    Role::User,
                    vec![ContentBlock::text(note)],
                )])
                .await?;
        }
        let mut reply = self
            .last_assistant
            .take()
            .unwrap_or_else(|| Msg::new(&self.inner.config.name, Role::Assistant, Vec::new()));
        reply.metadata.insert("interrupted".into(), Value::Bool(true));
        let stop_reason = match budget {
            Some(exceeded) => StopReason::BudgetReached(exceeded.to_string()),
            None => StopReason::Cancelled,
        };
        Ok((reply, stop_reason))
    }

    /// The calls of the last model message that have no result yet.
    async fn unanswered_calls(&self) -> Result<Vec<ToolUseBlock>, AgentError> {
        let msgs = self.inner.config.memory.messages().await?;
        Ok(unanswered_last_calls(&msgs)
            .map(|(_, calls)| calls.into_iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Repairs memory before the first model request if an earlier reply (or whoever filled the
    /// memory) left a call without its result (Y1, Y4).
    async fn ensure_memory_pairs(&self) -> Result<(), AgentError> {
        if self.inner.memory_is_checked() {
            return Ok(());
        }
        let msgs = self.inner.config.memory.messages().await?;
        if let Err(problem) = check_tool_pairs(&msgs) {
            tracing::warn!(%problem, "memory pairs a tool call wrongly; repairing it");
            let repaired = repair_tool_pairs(msgs);
            self.inner.config.memory.clear().await?;
            self.inner.config.memory.add(repaired).await?;
        }
        self.inner.set_memory_checked(true);
        Ok(())
    }

    /// One model call with the tools; the message is stored and returned. When the reply is
    /// cancelled mid-stream, the partial message is stored without the calls whose arguments
    /// were not complete (R3).
    async fn reasoning(
        &mut self,
        mut tool_choice: Option<ToolChoice>,
        structured: Option<&StructuredSpec>,
    ) -> Result<Msg, AgentError> {
        for (_, hook) in self.hooks.iter() {
            hook.pre_reasoning(&self.hook_cx, &mut tool_choice).await;
        }
        let tools = match structured {
            None => self.inner.config.toolkit.json_schemas(),
            Some(spec) => {
                let mut tools: Vec<ToolSchema> = self.inner.config.toolkit.json_schemas().to_vec();
                tools.push(spec.schema.clone());
                tools.into()
            }
        };
        if let Some(plan) = &self.inner.config.plan {
            // First among this request's hints; like them, it is sent and never stored.
            let hint = format!("<system-hint>{}</system-hint>", plan.hint().await);
            self.pending_hints
                .insert(0, Msg::new("system", Role::User, vec![ContentBlock::text(hint)]));
        }
        let mut request = ChatRequest {
            messages: self.prompt(None).await?,
            tools,
            tool_choice,
            max_tokens: None,
        };
        if self.compact_if_needed(&request).await? {
            request.messages = self.prompt(None).await?;
        }
        self.pending_hints.clear();
        let ModelOutput {
            mut msg,
            interrupted,
            printed,
            recovered,
        } = self.call_model(request).await?;
        if interrupted {
            keep_complete_calls(&mut msg);
        }
        self.make_call_ids_unique(&mut msg);
        if !interrupted {
            for (_, hook) in self.hooks.iter() {
                hook.post_reasoning(&self.hook_cx, &mut msg).await;
            }
        }
        if !msg.content.is_empty() || !interrupted {
            self.inner.config.memory.add(vec![msg.clone()]).await?;
            self.last_assistant = Some(msg.clone());
        }
        if printed || !interrupted {
            self.print(&msg, true).await;
        }
        if recovered {
            // The message had no calls of its own, so its calls are the recovered ones, with
            // the ids and as the hooks left them.
            let call_ids: Vec<CallId> = msg.tool_uses().map(|call| call.id.clone()).collect();
            if !call_ids.is_empty() {
                let reply_id = self.active.reply_id.clone();
                self.emit_with(|| AgentEvent::TextCallsRecovered { reply_id, call_ids });
            }
        }
        Ok(msg)
    }

    /// The summary after `max_iters` rounds, or the answer after repeated calls (`hint` asks
    /// for which): a call without tools, stored. `None` when the reply was cancelled meanwhile.
    async fn summarizing(&mut self, hint: &str) -> Result<Option<Msg>, AgentError> {
        let mut request = ChatRequest::new(self.prompt(Some(Msg::user(hint))).await?);
        if self.compact_if_needed(&request).await? {
            request.messages = self.prompt(Some(Msg::user(hint))).await?;
        }
        self.pending_hints.clear();
        let ModelOutput {
            msg,
            interrupted,
            printed,
            ..
        } = self.call_model(request).await?;
        if interrupted {
            if !msg.content.is_empty() {
                self.inner.config.memory.add(vec![msg.clone()]).await?;
                self.last_assistant = Some(msg.clone());
            }
            if printed {
                self.print(&msg, true).await;
            }
            return Ok(None);
        }
        // Stored before it is shown as final, like every message.
        self.inner.config.memory.add(vec![msg.clone()]).await?;
        self.print(&msg, true).await;
        Ok(Some(msg))
    }

    /// System prompt, memory from its last compaction summary on, pending hints (the caller
    /// clears them once its request is final), then `extra`.
    async fn prompt(&mut self, extra: Option<Msg>) -> Result<Vec<Msg>, AgentError> {
        let mut history = self.inner.config.memory.messages().await?;
        let start = super::compaction::prompt_start(&history);
        if start > 0 {
            history.drain(..start);
        }
        let mut messages = Vec::with_capacity(history.len() + 2 + self.pending_hints.len());
        messages.extend(self.inner.config.sys_prompt.clone());
        messages.extend(history);
        messages.extend(self.pending_hints.iter().cloned());
        messages.extend(extra);
        Ok(messages)
    }

    /// Streams one model call into one assistant message, printing its cumulative states, until
    /// it completes or the reply is cancelled (then the stream is dropped, R3). With the tool
    /// shim, calls written as text become calls of the complete message, and the printed states
    /// hold back what may be such a call.
    async fn call_model(&mut self, request: ChatRequest) -> Result<ModelOutput, AgentError> {
        let streaming = self.inner.config.model.is_streaming();
        let mut shim = TextCallShim::for_request(self.inner.config.tool_shim, &request);
        tracing::debug!(
            model = self.inner.config.model.model_name(),
            messages = request.messages.len(),
            tools = request.tools.len(),
            "model call"
        );
        let mut stream = trace::chat(self.inner, &self.agent_span, request);
        let mut msg = Msg::new(&self.inner.config.name, Role::Assistant, Vec::new());
        let mut received = false;
        let mut printed = false;
        loop {
            let item = tokio::select! {
                biased;
                () = self.active.token.cancelled() => {
                    return Ok(ModelOutput { msg, interrupted: true, printed, recovered: false });
                }
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let response = item?;
            received = true;
            msg.content = response.content;
            if let Some(usage) = &response.usage {
                self.active.add_usage(&self.inner.events, usage);
            } else if self.active.meter.is_limited()
                && self
                    .active
                    .meter
                    .check_streaming(streamed_tokens(&msg.content))
                    .is_some()
            {
                // The next turn of the loop sees the cancel and keeps what is complete (R3).
                self.active.cancel_for(&self.inner.events, CancelReason::Budget);
            }
            if streaming {
                match &mut shim {
                    Some(shim) if self.wants_events() => {
                        let mut shown = msg.clone();
                        shown.content = shim.shown(&msg.content);
                        self.print(&shown, false).await;
                    }
                    _ => self.print(&msg, false).await,
                }
                printed = true;
            }
        }
        if !received {
            return Err(ModelError::Stream("the model returned no response".into()).into());
        }
        let recovered = shim.is_some_and(|shim| !shim.recover(&mut msg.content).is_empty());
        Ok(ModelOutput {
            msg,
            interrupted: false,
            printed,
            recovered,
        })
    }

    /// Emits `PlanChanged` when the plan changed since it was last announced.
    async fn announce_plan_change(&mut self) {
        let Some(plan) = &self.inner.config.plan else {
            return;
        };
        let revision = plan.revision();
        if revision == self.plan_revision {
            return;
        }
        self.plan_revision = revision;
        let current = plan.current().await;
        let reply_id = self.active.reply_id.clone();
        self.emit_with(|| AgentEvent::PlanChanged {
            reply_id,
            plan: current,
        });
    }

    pub(super) fn wants_events(&self) -> bool {
        self.active.has_listeners(&self.inner.events) || !self.hooks.is_empty()
    }

    /// Emits the event `make` builds, building it only when someone listens.
    pub(super) fn emit_with(&self, make: impl FnOnce() -> AgentEvent) {
        if self.active.sink.is_none() && !self.inner.events.has_subscribers() {
            return;
        }
        self.active.emit(&self.inner.events, make());
    }

    /// Emits a message event through the print hooks.
    pub(super) async fn print(&self, msg: &Msg, last: bool) {
        if !self.wants_events() {
            return;
        }
        let mut shown = msg.clone();
        for (_, hook) in self.hooks.iter() {
            hook.pre_print(&self.hook_cx, &mut shown, last).await;
        }
        if self.hooks.is_empty() {
            self.emit_with(|| AgentEvent::Message { msg: shown, last });
            return;
        }
        self.emit_with(|| AgentEvent::Message {
            msg: shown.clone(),
            last,
        });
        for (_, hook) in self.hooks.iter() {
            hook.post_print(&self.hook_cx, &shown, last).await;
        }
    }
}

/// What the model reads after a reply its budget stopped.
fn budget_note(exceeded: &BudgetExceeded) -> String {
    format!(
        "<interrupted>The previous reply was stopped: {exceeded}. Tool calls that were running were \
         cancelled; their results say what they did.</interrupted>"
    )
}

/// The tokens of a streaming answer not reported yet, estimated at four bytes a token.
fn streamed_tokens(content: &[ContentBlock]) -> u64 {
    let bytes: usize = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => text.len(),
            ContentBlock::Thinking { thinking, .. } => thinking.len(),
            ContentBlock::ToolUse(call) => call.name.len() + call.raw_input.as_ref().map_or(0, String::len),
            _ => 0,
        })
        .sum();
    (bytes as u64).div_ceil(4)
}

/// Keeps only the tool calls whose arguments were fully received: a name and arguments that
/// parse as one JSON object (R3). Their `input` becomes that object.
fn keep_complete_calls(msg: &mut Msg) {
    msg.content.retain_mut(|block| match block {
        ContentBlock::ToolUse(call) => {
            let complete = match call.raw_input.as_deref() {
                Some(raw) => serde_json::from_str::<Value>(raw).ok().filter(Value::is_object),
                None => Some(call.input.clone()).filter(Value::is_object),
            };
            match complete {
                Some(input) if !call.name.is_empty() => {
                    call.input = input;
                    true
                }
                _ => false,
            }
        }
        _ => true,
    });
}

impl ReplyCx<'_> {
    /// Gives every tool call of a model message a non-empty id that no other call of this reply
    /// (nor a remembered call of an earlier one) has, before the message is stored: memory, the
    /// results, the events and the next request all use the new id.
    fn make_call_ids_unique(&mut self, msg: &mut Msg) {
        for block in msg.content.iter_mut() {
            if let ContentBlock::ToolUse(call) = block {
                if call.id.is_empty()
                    || self.call_ids.contains(&call.id)
                    || self.inner.is_finished_call(&call.id)
                {
                    call.id = CallId::new(format!("call_{}", new_id()));
                }
                self.call_ids.insert(call.id.clone());
                if call.input.is_null() && call.raw_input.is_none() {
                    call.input = Value::Object(Default::default());
                }
            }
        }
    }
}
