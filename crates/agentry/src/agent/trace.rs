//! Spans following the OpenTelemetry GenAI semantic conventions, made with the OpenTelemetry
//! API (`opentelemetry`) when the agent has a tracer.
//!
//! An agent traces when it has a tracer: [`ReActAgentBuilder::tracer`](super::ReActAgentBuilder::tracer),
//! or the process-wide one of [`set_default_tracer`] when the agent is built (the
//! `agentry-otel` crate sets one up from the `OTEL_EXPORTER_OTLP_*` variables). Without one, a
//! span costs a branch: nothing is built. The spans are made with the OpenTelemetry API rather
//! than through `tracing` and `tracing-opentelemetry`: the bridge costs about twice as much CPU
//! per span (BENCHMARKS.md).
//!
//! | span | when | attributes |
//! | --- | --- | --- |
//! | `invoke_agent {agent}` | one per reply, child of the caller's OpenTelemetry context | `gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.conversation.id` (if set), `gen_ai.usage.*` (the reply's total), `agentry.reply.id`, `agentry.stop_reason`, `error.type` |
//! | `chat {model}` (kind client) | each model call, child of `invoke_agent` | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.id`, `gen_ai.response.finish_reasons` (a string array), `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`, `error.type` |
//! | `execute_tool {tool}` | each tool call, child of `invoke_agent`; the tool runs in its context | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` (`function`), `agentry.tool.state`, `agentry.decision.source`, `error.type` |
//!
//! Events (the names are this crate's, outside the `gen_ai.` namespace that the conventions
//! reserve):
//!
//! | event | on | attributes |
//! | --- | --- | --- |
//! | `agentry.tool.cancelled` | `execute_tool` | `reason` (`user`, `reply`, `restart`, ...), `phase` (`before_start`, `running`), `partial` |
//! | `agentry.tool.declined` | `execute_tool` | `reason` (the decliner's text, or empty), `source` (`user`, `session_grant`, `no_decision`, ...) |
//! | `agentry.tool.timed_out` | `execute_tool` | `reason` (`timeout`), `timeout_ms` (the call's timeout), `partial` |
//! | `agentry.chat.cancelled` | `chat` | `reason` (`reply_cancelled`): the stream was dropped before its end |
//! | `agentry.reply.cancelled` | `invoke_agent` | `reason` (`cancelled`, or `budget` with `detail`: the limit reached) |
//!
//! A failed call, a timed-out call and a failed reply or model call set `error.type` and the
//! span status to error. Cancelled and declined calls are not errors.
//!
//! Message contents (`gen_ai.input.messages`, `gen_ai.output.messages` on `chat` and
//! `invoke_agent`, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` on
//! `execute_tool`, as JSON strings in the conventions' message format) are recorded only when
//! the user opts in: [`ReActAgentBuilder::trace_content`](super::ReActAgentBuilder::trace_content),
//! or [`TRACE_CONTENT_ENV`] (`AGENTRY_TRACE_CONTENT=1`) when the agent is built.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::Either;
use futures::{Stream, StreamExt};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{FutureExt as _, Span as _, SpanKind, Status, TraceContextExt as _, Tracer};
use opentelemetry::{Array, Context, KeyValue, StringValue};
use serde::Serialize;
use serde_json::{Value, json};

use super::AgentInner;
use super::events::StopReason;
use crate::ReplyId;
use crate::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use crate::model::{ChatModel, ChatRequest, ChatResponse, ChatStream, ChatUsage, ModelError};
use crate::tool::{DecisionSource, ToolCallState};

/// The environment variable that opts in to message contents in spans when set to `1`, `true`,
/// `yes` or `on` (read when an agent is built).
pub const TRACE_CONTENT_ENV: &str = "AGENTRY_TRACE_CONTENT";

/// The tracer agents built from now on use when their builder was given none.
static DEFAULT_TRACER: RwLock<Option<Arc<BoxedTracer>>> = RwLock::new(None);

/// Makes `tracer` the one every agent built from now on traces with, unless its builder was
/// given its own ([`ReActAgentBuilder::tracer`](super::ReActAgentBuilder::tracer)). Agents
/// already built keep theirs.
///
/// ```no_run
/// // Any `opentelemetry` tracer: an SDK provider's `tracer("agentry")`, or the global one.
/// agentry::agent::set_default_tracer(opentelemetry::global::tracer("agentry"));
/// ```
pub fn set_default_tracer<T>(tracer: T)
where
    T: Tracer + Send + Sync + 'static,
    T::Span: Send + Sync + 'static,
{
    let tracer = Arc::new(boxed(tracer));
    *DEFAULT_TRACER.write().unwrap_or_else(|e| e.into_inner()) = Some(tracer);
}

/// Agents built from now on trace only with a tracer of their own.
pub fn clear_default_tracer() {
    *DEFAULT_TRACER.write().unwrap_or_else(|e| e.into_inner()) = None;
}

pub(crate) fn default_tracer() -> Option<Arc<BoxedTracer>> {
    DEFAULT_TRACER.read().unwrap_or_else(|e| e.into_inner()).clone()
}

pub(crate) fn boxed<T>(tracer: T) -> BoxedTracer
where
    T: Tracer + Send + Sync + 'static,
    T::Span: Send + Sync + 'static,
{
    BoxedTracer::new(Box::new(tracer))
}

/// What an agent's spans carry besides the defaults.
#[derive(Clone, Default)]
pub(crate) struct TraceSettings {
    /// Record message contents (opt-in).
    pub(crate) content: bool,
    /// `gen_ai.conversation.id`.
    pub(crate) conversation_id: Option<String>,
    /// The tracer and the names every span repeats, when the agent traces.
    pub(crate) tracer: Option<Arc<AgentTracer>>,
}

impl std::fmt::Debug for TraceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSettings")
            .field("content", &self.content)
            .field("conversation_id", &self.conversation_id)
            .field("traced", &self.tracer.is_some())
            .finish()
    }
}

/// An agent's tracer, with the names and values its spans repeat, made once (shared, not
/// copied, by every span).
pub(crate) struct AgentTracer {
    tracer: Arc<BoxedTracer>,
    invoke_agent_name: Cow<'static, str>,
    chat_name: Cow<'static, str>,
    agent_name: StringValue,
    provider: StringValue,
    model: StringValue,
}

impl AgentTracer {
    pub(crate) fn new(tracer: Arc<BoxedTracer>, agent_name: &str, model: &dyn ChatModel) -> Self {
        let shared = |s: &str| StringValue::from(Arc::<str>::from(s));
        AgentTracer {
            tracer,
            invoke_agent_name: format!("invoke_agent {agent_name}").into(),
            chat_name: format!("chat {}", model.model_name()).into(),
            agent_name: shared(agent_name),
            provider: shared(model.provider_name()),
            model: shared(model.model_name()),
        }
    }
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

/// The `invoke_agent` span of one reply (nothing when the agent does not trace).
pub(super) struct ReplySpan(Option<Traced>);

/// A reply's tracer and the context holding its span.
struct Traced {
    tracer: Arc<AgentTracer>,
    cx: Context,
}

/// The `invoke_agent` span of one reply.
pub(super) fn invoke_agent(inner: &AgentInner, reply_id: &ReplyId, incoming: Option<&Msg>) -> ReplySpan {
    let settings = &inner.config.trace;
    let Some(tracer) = &settings.tracer else {
        return ReplySpan(None);
    };
    let mut attributes = Vec::with_capacity(7);
    attributes.push(KeyValue::new("gen_ai.operation.name", "invoke_agent"));
    attributes.push(KeyValue::new("gen_ai.agent.name", tracer.agent_name.clone()));
    attributes.push(KeyValue::new("gen_ai.provider.name", tracer.provider.clone()));
    attributes.push(KeyValue::new("gen_ai.request.model", tracer.model.clone()));
    attributes.push(KeyValue::new("agentry.reply.id", reply_id.as_str().to_owned()));
    if let Some(id) = &settings.conversation_id {
        attributes.push(KeyValue::new("gen_ai.conversation.id", id.clone()));
    }
    if settings.content
        && let Some(msg) = incoming
    {
        attributes.push(KeyValue::new(
            "gen_ai.input.messages",
            messages_json(std::slice::from_ref(msg)),
        ));
    }
    let parent = Context::current();
    let span = tracer
        .tracer
        .span_builder(tracer.invoke_agent_name.clone())
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes)
        .start_with_context(&*tracer.tracer, &parent);
    ReplySpan(Some(Traced {
        tracer: Arc::clone(tracer),
        cx: parent.with_span(span),
    }))
}

/// Ends the `invoke_agent` span: usage, stop reason, error, and the answer when contents are
/// recorded.
pub(super) fn reply_finished<E: std::fmt::Display>(
    inner: &AgentInner,
    reply: &ReplySpan,
    outcome: &Result<(Msg, StopReason), E>,
    usage: &ChatUsage,
) {
    let Some(traced) = &reply.0 else {
        return;
    };
    let span = traced.cx.span();
    span.set_attributes(usage_attributes(usage));
    let reason = match outcome {
        Ok((_, stop_reason)) => tagged_name(stop_reason, "reason"),
        Err(_) => "failed".to_owned(),
    };
    span.set_attribute(KeyValue::new("agentry.stop_reason", reason));
    match outcome {
        Ok((msg, stop_reason)) => {
            match stop_reason {
                StopReason::Cancelled => {
                    span.add_event(
                        "agentry.reply.cancelled",
                        vec![KeyValue::new("reason", "cancelled")],
                    );
                }
                StopReason::BudgetReached(why) => {
                    span.add_event(
                        "agentry.reply.cancelled",
                        vec![
                            KeyValue::new("reason", "budget"),
                            KeyValue::new("detail", why.clone()),
                        ],
                    );
                }
                _ => {}
            }
            if inner.config.trace.content {
                span.set_attribute(KeyValue::new(
                    "gen_ai.output.messages",
                    messages_json(std::slice::from_ref(msg)),
                ));
            }
        }
        Err(e) => {
            span.set_attribute(KeyValue::new("error.type", "agent_error"));
            span.set_status(Status::error(e.to_string()));
        }
    }
    span.end();
}

/// Starts one model call with its `chat` span, a child of the reply's `invoke_agent`. Without
/// a tracer, the model's stream is returned as it is.
pub(super) fn chat(inner: &AgentInner, reply: &ReplySpan, request: ChatRequest) -> ChatStream {
    let model = &inner.config.model;
    let Some(traced) = &reply.0 else {
        return model.chat(request);
    };
    let tracer = &traced.tracer;
    let content = inner.config.trace.content;
    let mut attributes = Vec::with_capacity(4);
    attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
    attributes.push(KeyValue::new("gen_ai.provider.name", tracer.provider.clone()));
    attributes.push(KeyValue::new("gen_ai.request.model", tracer.model.clone()));
    if content {
        attributes.push(KeyValue::new(
            "gen_ai.input.messages",
            messages_json(&request.messages),
        ));
    }
    let span = tracer
        .tracer
        .span_builder(tracer.chat_name.clone())
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(&*tracer.tracer, &traced.cx);
    Box::pin(TracedChat {
        stream: model.chat(request),
        span,
        content,
        output: None,
        id: None,
        usage: None,
        finish_reason: None,
        ended: false,
    })
}

/// A model call's stream with its `chat` span. What the span records of the response (id,
/// usage, finish reason, output) is kept as it arrives and set when the stream ends, fails or
/// is dropped, so a chunk costs a few comparisons.
struct TracedChat {
    stream: ChatStream,
    span: BoxedSpan,
    content: bool,
    /// The last content, when contents are recorded.
    output: Option<Vec<ContentBlock>>,
    id: Option<String>,
    usage: Option<ChatUsage>,
    finish_reason: Option<String>,
    /// The span has ended (a drop before is a cancel).
    ended: bool,
}

impl TracedChat {
    fn observe(&mut self, response: &ChatResponse) {
        if self.id.is_none() && !response.id.is_empty() {
            self.id = Some(response.id.clone());
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

    /// Sets what the stream gave.
    fn record(&mut self) {
        let mut attributes = Vec::with_capacity(6);
        if let Some(id) = self.id.take() {
            attributes.push(KeyValue::new("gen_ai.response.id", id));
        }
        if let Some(usage) = &self.usage {
            attributes.extend(usage_attributes(usage));
        }
        if let Some(reason) = &self.finish_reason {
            attributes.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(Array::String(vec![StringValue::from(reason.clone())])),
            ));
        }
        self.span.set_attributes(attributes);
    }

    fn failed(&mut self, error: &ModelError) {
        self.record();
        self.span
            .set_attribute(KeyValue::new("error.type", model_error_type(error)));
        self.span.set_status(Status::error(error.to_string()));
        self.end();
    }

    fn completed(&mut self) {
        self.record();
        if let Some(content) = self.output.take() {
            let mut message = message_json(Role::Assistant, &content);
            if let (Value::Object(map), Some(reason)) = (&mut message, &self.finish_reason) {
                map.insert("finish_reason".into(), Value::String(reason.clone()));
            }
            let output = Value::Array(vec![message]).to_string();
            self.span
                .set_attribute(KeyValue::new("gen_ai.output.messages", output));
        }
        self.end();
    }

    fn end(&mut self) {
        self.ended = true;
        self.span.end();
    }
}

impl Stream for TracedChat {
    type Item = Result<ChatResponse, ModelError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = this.stream.poll_next_unpin(cx);
        if !this.ended {
            match &item {
                Poll::Ready(Some(Ok(response))) => this.observe(response),
                Poll::Ready(Some(Err(error))) => this.failed(error),
                Poll::Ready(None) => this.completed(),
                Poll::Pending => {}
            }
        }
        item
    }
}

impl Drop for TracedChat {
    fn drop(&mut self) {
        if !self.ended {
            self.record();
            self.span.add_event(
                "agentry.chat.cancelled",
                vec![KeyValue::new("reason", "reply_cancelled")],
            );
            self.end();
        }
    }
}

/// The `execute_tool` span of one call, in the context the tool runs in (nothing when the
/// agent does not trace).
pub(super) struct ToolSpan(Option<Context>);

impl ToolSpan {
    /// `call` run in the span's context: spans the tool makes with the OpenTelemetry API are
    /// its children.
    pub(super) fn instrument<F: std::future::Future>(
        &self,
        call: F,
    ) -> Either<opentelemetry::context::WithContext<F>, F> {
        match &self.0 {
            Some(cx) => Either::Left(call.with_context(cx.clone())),
            None => Either::Right(call),
        }
    }
}

/// The `execute_tool` span of one call, a child of the reply's `invoke_agent`.
pub(super) fn execute_tool(inner: &AgentInner, reply: &ReplySpan, call: &ToolUseBlock) -> ToolSpan {
    let Some(traced) = &reply.0 else {
        return ToolSpan(None);
    };
    let mut attributes = Vec::with_capacity(5);
    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    attributes.push(KeyValue::new("gen_ai.tool.name", call.name.clone()));
    attributes.push(KeyValue::new("gen_ai.tool.call.id", call.id.as_str().to_owned()));
    attributes.push(KeyValue::new("gen_ai.tool.type", "function"));
    if inner.config.trace.content {
        attributes.push(KeyValue::new(
            "gen_ai.tool.call.arguments",
            call.input.to_string(),
        ));
    }
    let tracer = &traced.tracer.tracer;
    let span = tracer
        .span_builder(format!("execute_tool {}", call.name))
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes)
        .start_with_context(&**tracer, &traced.cx);
    ToolSpan(Some(traced.cx.with_span(span)))
}

/// Ends a call's `execute_tool` span: its state, an event for a cancel, a decline or a
/// timeout, the error of a failure, and its result when contents are recorded.
pub(super) fn tool_finished(
    inner: &AgentInner,
    tool: &ToolSpan,
    state: &ToolCallState,
    decision: Option<DecisionSource>,
    timeout: Option<Duration>,
    result: &ToolResultBlock,
) {
    let Some(cx) = &tool.0 else {
        return;
    };
    let span = cx.span();
    span.set_attribute(KeyValue::new("agentry.tool.state", state.name()));
    let source = decision.map(|d| plain_name(&d));
    if let Some(source) = &source {
        span.set_attribute(KeyValue::new("agentry.decision.source", source.clone()));
    }
    match state {
        ToolCallState::Completed => {}
        ToolCallState::Failed => {
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
            span.set_status(Status::error(""));
        }
        ToolCallState::Declined { reason } => {
            span.add_event(
                "agentry.tool.declined",
                vec![
                    KeyValue::new("reason", reason.clone().unwrap_or_default()),
                    KeyValue::new("source", source.unwrap_or_default()),
                ],
            );
        }
        ToolCallState::Cancelled {
            phase,
            partial,
            reason,
        } => {
            span.add_event(
                "agentry.tool.cancelled",
                vec![
                    KeyValue::new("reason", plain_name(reason)),
                    KeyValue::new("phase", plain_name(phase)),
                    KeyValue::new("partial", *partial),
                ],
            );
        }
        ToolCallState::TimedOut { partial } => {
            let timeout_ms = timeout.map_or(0, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            span.add_event(
                "agentry.tool.timed_out",
                vec![
                    KeyValue::new("reason", "timeout"),
                    KeyValue::new("timeout_ms", timeout_ms),
                    KeyValue::new("partial", *partial),
                ],
            );
            span.set_attribute(KeyValue::new("error.type", "timeout"));
            span.set_status(Status::error(""));
        }
    }
    if inner.config.trace.content {
        span.set_attribute(KeyValue::new("gen_ai.tool.call.result", result.text()));
    }
    span.end();
}

/// `gen_ai.usage.*`: input and output always, cached counts when there are some.
fn usage_attributes(usage: &ChatUsage) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("gen_ai.usage.input_tokens", int(usage.input_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", int(usage.output_tokens)),
    ];
    if usage.cache_read_tokens > 0 {
        attributes.push(KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            int(usage.cache_read_tokens),
        ));
    }
    if usage.cache_write_tokens > 0 {
        attributes.push(KeyValue::new(
            "gen_ai.usage.cache_creation.input_tokens",
            int(usage.cache_write_tokens),
        ));
    }
    attributes
}

/// A count as OpenTelemetry's integer.
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
