//! Spans following the OpenTelemetry GenAI semantic conventions (see [`TRACE_TARGET`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Span;
use tracing::field::Empty;

use super::AgentInner;
use super::events::StopReason;
use super::react::Incoming;
use crate::ReplyId;
use crate::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use crate::model::{ChatRequest, ChatResponse, ChatStream, ChatUsage, ModelError};
use crate::tool::{DecisionSource, ToolCallState};

/// The `tracing` target (`agentry::gen_ai`) of the spans that follow the OpenTelemetry GenAI
/// semantic conventions, and of their events.
///
/// The agent loop opens `tracing` spans at this target, named and attributed as the
/// conventions say, so that any `tracing` layer turning spans into
/// OpenTelemetry spans (`tracing-opentelemetry`; the `agentry-otel` crate sets one up from the
/// `OTEL_EXPORTER_OTLP_*` variables) exports them as they are. This crate depends on `tracing`
/// only. With no subscriber interested in the target, each span costs a callsite check.
///
/// | span (`otel.name`) | when | attributes |
/// | --- | --- | --- |
/// | `invoke_agent {agent}` | one per reply | `gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.conversation.id` (if set), `gen_ai.usage.*` (the reply's total), `agentry.reply.id`, `agentry.stop_reason`, `error.type` |
/// | `chat {model}` | each model call, child of `invoke_agent` | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.id`, `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`, `error.type` |
/// | `execute_tool {tool}` | each tool call, child of `invoke_agent` | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` (`function`), `agentry.tool.state`, `agentry.decision.source`, `error.type` |
///
/// Events (span events in OpenTelemetry; the names are this crate's, outside the `gen_ai.`
/// namespace that the conventions reserve):
///
/// | event | on | attributes |
/// | --- | --- | --- |
/// | `agentry.tool.cancelled` | `execute_tool` | `reason` (`user`, `reply`, `restart`, ...), `phase` (`before_start`, `running`), `partial` |
/// | `agentry.tool.declined` | `execute_tool` | `reason` (the decliner's text, or empty), `source` (`user`, `session_grant`, `no_decision`, ...) |
/// | `agentry.tool.timed_out` | `execute_tool` | `reason` (`timeout`), `timeout_ms` (the call's timeout), `partial` |
/// | `agentry.chat.cancelled` | `chat` | `reason` (`reply_cancelled`): the stream was dropped before its end |
/// | `agentry.reply.cancelled` | `invoke_agent` | `reason` (`cancelled`, or `budget` with `detail`: the limit reached) |
///
/// A failed call, a timed-out call and a failed reply or model call set `error.type` and the
/// span status to error (`otel.status_code`). Cancelled and declined calls are not errors.
///
/// Message contents (`gen_ai.input.messages`, `gen_ai.output.messages` on `chat` and
/// `invoke_agent`, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` on
/// `execute_tool`, as JSON strings in the conventions' message format) are recorded only when
/// the user opts in: [`ReActAgentBuilder::trace_content`](super::ReActAgentBuilder::trace_content),
/// or [`TRACE_CONTENT_ENV`] (`AGENTRY_TRACE_CONTENT=1`) when the agent is built.
/// `gen_ai.response.finish_reasons` is a JSON array in a string (`tracing` has no arrays);
/// `agentry-otel` exports it as a string array.
pub const TRACE_TARGET: &str = "agentry::gen_ai";

/// The environment variable that opts in to message contents in spans when set to `1`, `true`,
/// `yes` or `on` (read when an agent is built).
pub const TRACE_CONTENT_ENV: &str = "AGENTRY_TRACE_CONTENT";

/// What an agent's spans carry besides the defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct TraceSettings {
    /// Record message contents (opt-in).
    pub(crate) content: bool,
    /// `gen_ai.conversation.id`.
    pub(crate) conversation_id: Option<String>,
}

/// Whether [`TRACE_CONTENT_ENV`] opts in.
pub(crate) fn content_from_env() -> bool {
    std::env::var(TRACE_CONTENT_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The `invoke_agent` span of one reply.
pub(super) fn invoke_agent(inner: &AgentInner, reply_id: &ReplyId, incoming: &Incoming) -> Span {
    let config = &inner.config;
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", config.name),
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = config.name.as_str(),
        gen_ai.provider.name = config.model.provider_name(),
        gen_ai.request.model = config.model.model_name(),
        gen_ai.conversation.id = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
        agentry.reply.id = reply_id.as_str(),
        agentry.stop_reason = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(id) = &config.trace.conversation_id {
        span.record("gen_ai.conversation.id", id.as_str());
    }
    if config.trace.content
        && let Incoming::Message(Some(msg)) = incoming
    {
        span.record(
            "gen_ai.input.messages",
            messages_json(std::slice::from_ref(msg)).as_str(),
        );
    }
    span
}

/// Ends the `invoke_agent` span's attributes: usage, stop reason, error, and the answer when
/// contents are recorded.
pub(super) fn reply_finished<E: std::fmt::Display>(
    inner: &AgentInner,
    span: &Span,
    outcome: &Result<(Msg, StopReason), E>,
    usage: &ChatUsage,
) {
    if span.is_disabled() {
        return;
    }
    record_usage(span, usage);
    let reason = match outcome {
        Ok((_, stop_reason)) => tagged_name(stop_reason, "reason"),
        Err(_) => "failed".to_owned(),
    };
    span.record("agentry.stop_reason", reason.as_str());
    match outcome {
        Ok((msg, stop_reason)) => {
            match stop_reason {
                StopReason::Cancelled => {
                    tracing::info!(target: TRACE_TARGET, parent: span, reason = "cancelled", "agentry.reply.cancelled");
                }
                StopReason::BudgetReached(why) => {
                    tracing::info!(target: TRACE_TARGET, parent: span, reason = "budget", detail = why.as_str(), "agentry.reply.cancelled");
                }
                _ => {}
            }
            if inner.config.trace.content {
                span.record(
                    "gen_ai.output.messages",
                    messages_json(std::slice::from_ref(msg)).as_str(),
                );
            }
        }
        Err(e) => {
            span.record("error.type", "agent_error");
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_description", e.to_string().as_str());
        }
    }
}

/// Starts one model call with its `chat` span, a child of `parent` (the reply's
/// `invoke_agent`). Without a subscriber for the span, the model's stream is returned as it is.
pub(super) fn chat(inner: &AgentInner, parent: &Span, request: ChatRequest) -> ChatStream {
    let model = &inner.config.model;
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "chat",
        otel.name = %format_args!("chat {}", model.model_name()),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = model.provider_name(),
        gen_ai.request.model = model.model_name(),
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
    );
    if span.is_disabled() {
        return model.chat(request);
    }
    let content = inner.config.trace.content;
    if content {
        span.record("gen_ai.input.messages", messages_json(&request.messages).as_str());
    }
    Box::pin(TracedChat {
        stream: model.chat(request),
        span,
        content,
        output: None,
        usage: None,
        finish_reason: None,
        id_recorded: false,
        ended: false,
    })
}

/// A model call's stream with its `chat` span. The response's id is recorded when it first
/// arrives; usage, finish reason and output when the stream ends, fails or is dropped, so a
/// chunk costs a few comparisons. The stream is not polled inside the span: entering a span
/// costs an exporting layer two lookups, and a streamed call is polled once per chunk.
struct TracedChat {
    stream: ChatStream,
    span: Span,
    content: bool,
    /// The last content, when contents are recorded.
    output: Option<Vec<ContentBlock>>,
    usage: Option<ChatUsage>,
    finish_reason: Option<String>,
    id_recorded: bool,
    /// The span's attributes are final (a drop before the stream's end is a cancel).
    ended: bool,
}

impl TracedChat {
    fn observe(&mut self, response: &ChatResponse) {
        if !self.id_recorded && !response.id.is_empty() {
            self.span.record("gen_ai.response.id", response.id.as_str());
            self.id_recorded = true;
        }
        if response.usage.is_some() && self.usage != response.usage {
            self.usage.clone_from(&response.usage);
        }
        if response.finish_reason.is_some() && self.finish_reason != response.finish_reason {
            self.finish_reason.clone_from(&response.finish_reason);
        }
        if self.content {
            self.output = Some(response.content.clone());
        }
    }

    /// Records what the stream gave, once.
    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if let Some(usage) = &self.usage {
            record_usage(&self.span, usage);
        }
        if let Some(reason) = &self.finish_reason {
            let reasons = serde_json::to_string(&[reason]).unwrap_or_default();
            self.span
                .record("gen_ai.response.finish_reasons", reasons.as_str());
        }
    }

    fn failed(&mut self, error: &ModelError) {
        self.end();
        self.span.record("error.type", model_error_type(error).as_str());
        self.span.record("otel.status_code", "ERROR");
        self.span
            .record("otel.status_description", error.to_string().as_str());
    }

    fn completed(&mut self) {
        self.end();
        if let Some(content) = self.output.take() {
            let mut message = message_json(Role::Assistant, &content);
            if let (Value::Object(map), Some(reason)) = (&mut message, &self.finish_reason) {
                map.insert("finish_reason".into(), Value::String(reason.clone()));
            }
            let output = Value::Array(vec![message]).to_string();
            self.span.record("gen_ai.output.messages", output.as_str());
        }
    }
}

impl Stream for TracedChat {
    type Item = Result<ChatResponse, ModelError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = this.stream.poll_next_unpin(cx);
        match &item {
            Poll::Ready(Some(Ok(response))) => this.observe(response),
            Poll::Ready(Some(Err(error))) => this.failed(error),
            Poll::Ready(None) => this.completed(),
            Poll::Pending => {}
        }
        item
    }
}

impl Drop for TracedChat {
    fn drop(&mut self) {
        if !self.ended {
            self.end();
            tracing::info!(target: TRACE_TARGET, parent: &self.span, reason = "reply_cancelled", "agentry.chat.cancelled");
        }
    }
}

/// The `execute_tool` span of one call, a child of `parent` (the reply's `invoke_agent`).
pub(super) fn execute_tool(inner: &AgentInner, parent: &Span, call: &ToolUseBlock) -> Span {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        parent: parent,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
        agentry.tool.state = Empty,
        agentry.decision.source = Empty,
    );
    if !span.is_disabled() && inner.config.trace.content {
        span.record("gen_ai.tool.call.arguments", call.input.to_string().as_str());
    }
    span
}

/// Records how a call ended on its `execute_tool` span: its state, an event for a cancel, a
/// decline or a timeout, the error of a failure, and its result when contents are recorded.
pub(super) fn tool_finished(
    inner: &AgentInner,
    span: &Span,
    state: &ToolCallState,
    decision: Option<DecisionSource>,
    timeout: Option<Duration>,
    result: &ToolResultBlock,
) {
    if span.is_disabled() {
        return;
    }
    span.record("agentry.tool.state", state.name());
    let source = decision.map(|d| plain_name(&d));
    if let Some(source) = &source {
        span.record("agentry.decision.source", source.as_str());
    }
    match state {
        ToolCallState::Completed => {}
        ToolCallState::Failed => {
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
        }
        ToolCallState::Declined { reason } => {
            tracing::info!(
                target: TRACE_TARGET,
                parent: span,
                reason = reason.as_deref().unwrap_or(""),
                source = source.as_deref().unwrap_or(""),
                "agentry.tool.declined"
            );
        }
        ToolCallState::Cancelled {
            phase,
            partial,
            reason,
        } => {
            tracing::info!(
                target: TRACE_TARGET,
                parent: span,
                reason = plain_name(reason).as_str(),
                phase = plain_name(phase).as_str(),
                partial = *partial,
                "agentry.tool.cancelled"
            );
        }
        ToolCallState::TimedOut { partial } => {
            let timeout_ms = timeout.map_or(0, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            tracing::info!(
                target: TRACE_TARGET,
                parent: span,
                reason = "timeout",
                timeout_ms,
                partial = *partial,
                "agentry.tool.timed_out"
            );
            span.record("error.type", "timeout");
            span.record("otel.status_code", "ERROR");
        }
    }
    if inner.config.trace.content {
        span.record("gen_ai.tool.call.result", result.text().as_str());
    }
}

fn record_usage(span: &Span, usage: &ChatUsage) {
    span.record("gen_ai.usage.input_tokens", int(usage.input_tokens));
    span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
    if usage.cache_read_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            int(usage.cache_read_tokens),
        );
    }
    if usage.cache_write_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            int(usage.cache_write_tokens),
        );
    }
}

/// A count as OpenTelemetry's integer (`tracing-opentelemetry` turns a `u64` into a string).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `error.type` of a model error: the HTTP status, or the kind of failure.
fn model_error_type(error: &ModelError) -> String {
    match error {
        ModelError::Status { status, .. } => status.to_string(),
        ModelError::Timeout { .. } => "timeout".into(),
        ModelError::Connect { .. } => "connect".into(),
        ModelError::Config(_) => "config".into(),
        ModelError::Api(_) => "api".into(),
        ModelError::Decode { .. } => "decode".into(),
        ModelError::Stream(_) => "stream".into(),
        _ => "model_error".into(),
    }
}

/// The serde name of a unit-like enum value (`"user"`, `"before_start"`, ...).
fn plain_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => "unknown".into(),
    }
}

/// The serde tag of an internally tagged enum value (`{"reason": "answered"}` → `answered`).
fn tagged_name(value: &impl Serialize, tag: &str) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        Ok(Value::Object(map)) => match map.get(tag) {
            Some(Value::String(name)) => name.clone(),
            _ => "unknown".into(),
        },
        _ => "unknown".into(),
    }
}

/// Messages in the conventions' format (`gen_ai.input.messages`), as a JSON string.
fn messages_json(messages: &[Msg]) -> String {
    Value::Array(
        messages
            .iter()
            .map(|m| message_json(m.role, &m.content))
            .collect(),
    )
    .to_string()
}

/// One message: `{"role", "parts": [...]}`. A message of tool results has the role `tool`.
fn message_json(role: Role, content: &[ContentBlock]) -> Value {
    let results = content.iter().any(|b| matches!(b, ContentBlock::ToolResult(_)));
    let role = match role {
        _ if results => "tool",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
    };
    let parts: Vec<Value> = content.iter().filter_map(part_json).collect();
    json!({ "role": role, "parts": parts })
}

fn part_json(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => json!({"type": "text", "content": text}),
        ContentBlock::Thinking { thinking, .. } => json!({"type": "reasoning", "content": thinking}),
        ContentBlock::ToolUse(call) => {
            json!({"type": "tool_call", "id": call.id.as_str(), "name": call.name, "arguments": call.input})
        }
        ContentBlock::ToolResult(result) => {
            json!({"type": "tool_call_response", "id": result.id.as_str(), "response": result.text()})
        }
        ContentBlock::Image { .. } => json!({"type": "blob", "modality": "image"}),
        ContentBlock::Audio { .. } => json!({"type": "blob", "modality": "audio"}),
        ContentBlock::RedactedThinking { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_the_conventions_format() {
        let msgs = vec![
            Msg::user("2 + 40?"),
            Msg::tool_result(ToolResultBlock {
                id: "c1".into(),
                name: "add".into(),
                output: vec![ContentBlock::text("42")],
                is_error: false,
            }),
        ];
        let value: Value = serde_json::from_str(&messages_json(&msgs)).unwrap_or_default();
        assert_eq!(
            value,
            json!([
                {"role": "user", "parts": [{"type": "text", "content": "2 + 40?"}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]},
            ])
        );
    }

    #[test]
    fn enum_names_come_from_serde() {
        assert_eq!(tagged_name(&StopReason::Answered, "reason"), "answered");
        assert_eq!(tagged_name(&StopReason::Failed("x".into()), "reason"), "failed");
        assert_eq!(plain_name(&crate::tool::CancelReason::User), "user");
        assert_eq!(plain_name(&crate::tool::CancelPhase::BeforeStart), "before_start");
    }
}
