//! The reasoning/acting loop of one reply.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::events::{AgentEvent, StopReason};
use super::hooks::HookContext;
use super::structured::{STRUCTURED_REQUIRED_HINT, StructuredSpec, TEXT_AFTER_STRUCTURED_HINT};
use super::{AgentError, AgentInner, HookList};
use crate::message::{ContentBlock, Msg, Role, new_id};
use crate::model::{ChatRequest, ChatUsage, ModelError, ToolChoice, ToolSchema};

/// The hint that asks for a summary after `max_iters` rounds.
pub(super) const SUMMARY_HINT: &str = "You have failed to generate response within the maximum iterations. \
     Now respond directly by summarizing the current situation.";

/// The state of one reply.
pub(crate) struct ReplyCx<'a> {
    pub(super) inner: &'a AgentInner,
    pub(super) hooks: HookList,
    pub(super) hook_cx: HookContext,
    sink: Option<mpsc::UnboundedSender<AgentEvent>>,
    /// Hints for the next model call only (never stored in memory).
    pending_hints: Vec<Msg>,
    pub(super) token: CancellationToken,
    usage: ChatUsage,
}

impl<'a> ReplyCx<'a> {
    /// Runs one reply from start to `ReplyFinished`.
    pub(crate) async fn run(
        inner: &'a AgentInner,
        msg: Option<Msg>,
        structured: Option<StructuredSpec>,
        sink: Option<mpsc::UnboundedSender<AgentEvent>>,
    ) -> Result<Msg, AgentError> {
        let _one_at_a_time = inner.reply_lock.lock().await;
        let hooks = inner
            .hooks
            .read()
            .map(|h| Arc::clone(&h))
            .unwrap_or_else(|e| Arc::clone(&e.into_inner()));
        let mut cx = ReplyCx {
            inner,
            hooks,
            hook_cx: HookContext {
                agent_name: inner.name.clone(),
                reply_id: new_id(),
                iteration: 0,
            },
            sink,
            pending_hints: Vec::new(),
            token: CancellationToken::new(),
            usage: ChatUsage::default(),
        };
        let span = tracing::info_span!("reply", agent = %inner.name, reply_id = %cx.hook_cx.reply_id);
        let outcome = cx.reply(msg, structured.as_ref()).instrument(span).await;
        let stop_reason = match &outcome {
            Ok((_, reason)) => reason.clone(),
            Err(e) => StopReason::Failed(e.to_string()),
        };
        cx.emit_with(|| AgentEvent::ReplyFinished {
            reply_id: cx.hook_cx.reply_id.clone(),
            stop_reason,
            usage: cx.usage.clone(),
        });
        outcome.map(|(msg, _)| msg)
    }

    async fn reply(
        &mut self,
        mut msg: Option<Msg>,
        structured: Option<&StructuredSpec>,
    ) -> Result<(Msg, StopReason), AgentError> {
        for (_, hook) in self.hooks.iter() {
            hook.pre_reply(&self.hook_cx, &mut msg).await;
        }
        if let Some(msg) = msg {
            self.inner.memory.add(vec![msg]).await?;
        }
        let mut tool_choice = structured.map(|_| ToolChoice::Required);
        let mut requirement_pending = structured.is_some();
        let mut structured_output = None;
        let mut reply = None;
        for iteration in 0..self.inner.max_iters {
            self.hook_cx.iteration = iteration;
            let reasoning = self.reasoning(tool_choice.clone(), structured).await?;
            let calls: Vec<_> = reasoning.tool_uses().cloned().collect();
            let called_tools = !calls.is_empty();
            if let Some(output) = self.acting(calls, structured).await? {
                structured_output = Some(output);
            }
            if requirement_pending {
                // spec: agentscope.md 1.D, item 21.
                if structured_output.is_some() {
                    let texts: Vec<ContentBlock> = reasoning
                        .blocks(crate::message::BlockKind::Text)
                        .cloned()
                        .collect();
                    if !texts.is_empty() {
                        reply = Some(Msg::new(&self.inner.name, Role::Assistant, texts));
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
                reply = Some(reasoning);
                break;
            }
        }
        let (mut reply, stop_reason) = match reply {
            Some(reply) => (reply, StopReason::Answered),
            None => {
                let summary = self.summarizing().await?;
                self.inner.memory.add(vec![summary.clone()]).await?;
                (summary, StopReason::MaxIters)
            }
        };
        if let Some(output) = structured_output {
            reply.metadata = output;
        }
        for (_, hook) in self.hooks.iter() {
            hook.post_reply(&self.hook_cx, &mut reply).await;
        }
        Ok((reply, stop_reason))
    }

    /// One model call with the tools; the message is stored and returned.
    async fn reasoning(
        &mut self,
        mut tool_choice: Option<ToolChoice>,
        structured: Option<&StructuredSpec>,
    ) -> Result<Msg, AgentError> {
        for (_, hook) in self.hooks.iter() {
            hook.pre_reasoning(&self.hook_cx, &mut tool_choice).await;
        }
        let tools = match structured {
            None => self.inner.toolkit.json_schemas(),
            Some(spec) => {
                let mut tools: Vec<ToolSchema> = self.inner.toolkit.json_schemas().to_vec();
                tools.push(spec.schema.clone());
                tools.into()
            }
        };
        let request = ChatRequest {
            messages: self.prompt(None).await?,
            tools,
            tool_choice,
        };
        let mut msg = self.call_model(request).await?;
        make_call_ids_unique(&mut msg);
        for (_, hook) in self.hooks.iter() {
            hook.post_reasoning(&self.hook_cx, &mut msg).await;
        }
        self.inner.memory.add(vec![msg.clone()]).await?;
        self.print(&msg, true).await;
        Ok(msg)
    }

    /// The summary after `max_iters` rounds: a call without tools; the caller stores it.
    async fn summarizing(&mut self) -> Result<Msg, AgentError> {
        let request = ChatRequest::new(self.prompt(Some(Msg::user(SUMMARY_HINT))).await?);
        let msg = self.call_model(request).await?;
        self.print(&msg, true).await;
        Ok(msg)
    }

    /// System prompt, memory, pending hints (consumed), then `extra`.
    async fn prompt(&mut self, extra: Option<Msg>) -> Result<Vec<Msg>, AgentError> {
        let history = self.inner.memory.messages().await?;
        let mut messages = Vec::with_capacity(history.len() + 2 + self.pending_hints.len());
        messages.extend(self.inner.sys_prompt.clone());
        messages.extend(history);
        messages.append(&mut self.pending_hints);
        messages.extend(extra);
        Ok(messages)
    }

    /// Streams one model call into one assistant message, printing its cumulative states.
    async fn call_model(&mut self, request: ChatRequest) -> Result<Msg, AgentError> {
        let streaming = self.inner.model.is_streaming();
        tracing::debug!(
            model = self.inner.model.model_name(),
            messages = request.messages.len(),
            tools = request.tools.len(),
            "model call"
        );
        let mut stream = self.inner.model.chat(request);
        let mut msg = Msg::new(&self.inner.name, Role::Assistant, Vec::new());
        let mut received = false;
        while let Some(item) = stream.next().await {
            let response = item?;
            received = true;
            msg.content = response.content;
            if let Some(usage) = response.usage {
                self.usage.input_tokens += usage.input_tokens;
                self.usage.output_tokens += usage.output_tokens;
                self.usage.time += usage.time;
            }
            if streaming {
                self.print(&msg, false).await;
            }
        }
        if !received {
            return Err(ModelError::Stream("the model returned no response".into()).into());
        }
        Ok(msg)
    }

    pub(super) fn wants_events(&self) -> bool {
        self.sink.is_some() || self.inner.events.has_subscribers() || !self.hooks.is_empty()
    }

    /// Emits the event `make` builds, building it only when someone listens.
    pub(super) fn emit_with(&self, make: impl FnOnce() -> AgentEvent) {
        if self.sink.is_none() && !self.inner.events.has_subscribers() {
            return;
        }
        self.emit(make());
    }

    fn emit(&self, event: AgentEvent) {
        self.inner.events.emit(&event);
        if let Some(sink) = &self.sink {
            let _ = sink.send(event);
        }
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
            self.emit(AgentEvent::Message { msg: shown, last });
            return;
        }
        self.emit(AgentEvent::Message {
            msg: shown.clone(),
            last,
        });
        for (_, hook) in self.hooks.iter() {
            hook.post_print(&self.hook_cx, &shown, last).await;
        }
    }
}

/// Gives every tool call of a model message a non-empty id unique in that message, so each
/// result can be matched to its call.
fn make_call_ids_unique(msg: &mut Msg) {
    let mut seen = HashSet::new();
    for block in msg.content.iter_mut() {
        if let ContentBlock::ToolUse(call) = block {
            if call.id.is_empty() || !seen.insert(call.id.clone()) {
                call.id = format!("call_{}", new_id());
                seen.insert(call.id.clone());
            }
            if call.input.is_null() && call.raw_input.is_none() {
                call.input = Value::Object(Default::default());
            }
        }
    }
}
