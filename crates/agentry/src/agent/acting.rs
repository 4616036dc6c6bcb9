//! Acting: running the tool calls of one model message.

use std::time::Instant;

use futures::StreamExt;
use futures::future::join_all;
use serde_json::{Map, Value};

use super::AgentError;
use super::events::{AgentEvent, ToolCallState};
use super::react::ReplyCx;
use super::structured::StructuredSpec;
use crate::message::{ContentBlock, Msg, ToolResultBlock, ToolUseBlock};
use crate::tool::{ToolContext, ToolResponse};

/// What one call left behind.
struct CallOutcome {
    /// The result message, for memory.
    msg: Msg,
    /// The structured output, when this was a valid finish-function call.
    structured: Option<Map<String, Value>>,
}

impl ReplyCx<'_> {
    /// Runs the calls (concurrently or in order) and stores one result per call, in call order.
    /// Returns the last structured output produced.
    pub(super) async fn acting(
        &self,
        calls: Vec<ToolUseBlock>,
        structured: Option<&StructuredSpec>,
    ) -> Result<Option<Map<String, Value>>, AgentError> {
        let mut output = None;
        if self.inner.parallel_tool_calls && calls.len() > 1 {
            let outcomes = join_all(calls.into_iter().map(|call| self.run_call(call, structured))).await;
            let mut msgs = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                if outcome.structured.is_some() {
                    output = outcome.structured;
                }
                msgs.push(outcome.msg);
            }
            self.inner.memory.add(msgs).await?;
        } else {
            for call in calls {
                let outcome = self.run_call(call, structured).await;
                if outcome.structured.is_some() {
                    output = outcome.structured;
                }
                self.inner.memory.add(vec![outcome.msg]).await?;
            }
        }
        Ok(output)
    }

    /// Runs one call to its result. Never fails: every failure is an error result.
    async fn run_call(&self, mut call: ToolUseBlock, structured: Option<&StructuredSpec>) -> CallOutcome {
        let call_id = call.id.clone();
        let called_name = call.name.clone();
        for (_, hook) in self.hooks.iter() {
            hook.pre_acting(&self.hook_cx, &mut call).await;
        }
        self.emit_with(|| AgentEvent::ToolStarted {
            reply_id: self.hook_cx.reply_id.clone(),
            call_id: call_id.clone(),
            name: called_name.clone(),
            input: call.input.clone(),
        });
        let started = Instant::now();
        let mut msg = Msg::tool_result(ToolResultBlock {
            id: call_id.clone(),
            name: called_name.clone(),
            output: Vec::new(),
            is_error: false,
        });

        let mut structured_output = None;
        let response = match structured {
            Some(spec) if call.name == spec.schema.name => {
                let (response, output) = spec.handle(&call);
                structured_output = output;
                response
            }
            _ => {
                let ctx = ToolContext::new(call_id.clone(), call.name.clone(), self.token.child_token());
                let mut chunks = self.inner.toolkit.call(&call, ctx);
                let mut last = None;
                while let Some(chunk) = chunks.next().await {
                    if chunk.is_last {
                        last = Some(chunk);
                        break;
                    }
                    self.print_partial(&mut msg, &chunk).await;
                }
                last.unwrap_or_else(|| ToolResponse::error("Error: the tool ended without a result."))
            }
        };

        tracing::debug!(
            call_id = %call_id,
            tool = %called_name,
            is_error = response.is_error,
            elapsed_us = started.elapsed().as_micros() as u64,
            "tool call finished"
        );
        let state = if response.is_error {
            ToolCallState::Failed
        } else {
            ToolCallState::Completed
        };
        let mut result = ToolResultBlock {
            id: call_id.clone(),
            name: called_name.clone(),
            output: response.content,
            is_error: response.is_error,
        };
        for (_, hook) in self.hooks.iter() {
            hook.post_acting(&self.hook_cx, &call, &mut result).await;
        }
        // The hooks may edit the output, not which call it answers.
        result.id = call_id.clone();
        msg.content = vec![ContentBlock::ToolResult(result)];
        msg.metadata = response.metadata;
        self.print(&msg, true).await;
        self.emit_with(|| AgentEvent::ToolFinished {
            reply_id: self.hook_cx.reply_id.clone(),
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
