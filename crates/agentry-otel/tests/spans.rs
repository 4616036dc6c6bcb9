//! The GenAI spans of real replies, exported over OTLP/HTTP to an in-test receiver and checked
//! against the conventions' names and attributes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use agentry::agent::{AgentEvent, ReActAgent, ReActAgentBuilder};
use agentry::message::Msg;
use agentry::model::{OpenAiChatModel, OpenAiConfig};
use agentry::tool::{ApprovalDecision, FunctionTool, ToolOptions, Toolkit, once};
use agentry_otel::OtelGuard;
use agentry_otel::receiver::{AttrValue, OtlpReceiver, ReceivedSpan};
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::json;
use tokio::sync::Notify;

/// How long any wait of a test may take before the test fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(10);

/// OTLP span kinds.
const INTERNAL: i32 = 1;
const CLIENT: i32 = 3;
/// OTLP status code of an error.
const STATUS_ERROR: i32 = 2;

/// The attributes that hold message contents (opt-in only).
const CONTENT_ATTRIBUTES: [&str; 4] = [
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
];

/// A receiver, and a pipeline exporting to it whose tracer the test's agent is given.
struct Traced {
    receiver: OtlpReceiver,
    guard: Arc<OtelGuard>,
}

impl Traced {
    async fn start() -> Self {
        let receiver = OtlpReceiver::start().await.unwrap();
        let guard = agentry_otel::init_with_endpoint(&receiver.traces_url()).unwrap();
        Traced {
            receiver,
            guard: Arc::new(guard),
        }
    }

    /// Exports every ended span (the export runs on the processor's thread and needs this
    /// runtime for the receiver, hence the blocking task).
    async fn flush(&self) {
        let guard = Arc::clone(&self.guard);
        tokio::task::spawn_blocking(move || guard.flush())
            .await
            .unwrap()
            .unwrap();
    }

    /// Flushes until the received spans satisfy `done` (a span ends when its last handle goes,
    /// which may be a tool task finishing after the reply), failing after [`DEADLINE`].
    async fn spans(&self, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let until = tokio::time::Instant::now() + DEADLINE;
        loop {
            self.flush().await;
            let wait = Duration::from_millis(200).min(until - tokio::time::Instant::now());
            match self.receiver.wait_for(wait, &done).await {
                Ok(spans) => return spans,
                Err(e) if tokio::time::Instant::now() >= until => panic!("{e}"),
                Err(_) => {}
            }
        }
    }

    /// Stops the pipeline off this thread (a last export must not wait for this runtime).
    async fn finish(self) {
        let Traced { receiver, guard } = self;
        tokio::task::spawn_blocking(move || Arc::try_unwrap(guard).map(OtelGuard::shutdown))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        drop(receiver);
    }
}

fn add_tool() -> FunctionTool {
    FunctionTool::new(
        "add",
        "Add two integers.",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        |args, _ctx| {
            let sum = args.get("a").and_then(|v| v.as_i64()).unwrap_or(0)
                + args.get("b").and_then(|v| v.as_i64()).unwrap_or(0);
            once(async move { sum.to_string() })
        },
    )
}

fn builder(traced: &Traced, fake: &FakeLlm, toolkit: Toolkit) -> ReActAgentBuilder {
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("fake-model")
            .base_url(fake.base_url())
            .stream(true),
    )
    .unwrap();
    ReActAgent::builder()
        .name("Friday")
        .sys_prompt("You are a test agent.")
        .model(model)
        .toolkit(toolkit)
        .tracer(traced.guard.tracer().unwrap())
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    match named(spans, name).as_slice() {
        [span] => span,
        other => panic!("expected one span {name:?}, got {}: {spans:#?}", other.len()),
    }
}

/// A reply with one tool call, then the answer: the spans, their tree, no contents.
async fn tool_call_reply(content: bool) -> Vec<ReceivedSpan> {
    let traced = Traced::start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("call_1", "add", r#"{"a": 2, "b": 40}"#)]).usage(21, 7));
    fake.push(Reply::text("42").usage(34, 2));
    let toolkit = Toolkit::new();
    toolkit.register(add_tool()).unwrap();
    let agent = builder(&traced, &fake, toolkit)
        .trace_content(content)
        .conversation_id("conv-1")
        .build()
        .unwrap();
    let reply = tokio::time::timeout(DEADLINE, agent.reply(Msg::user("What is 2 + 40?")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.text().as_deref(), Some("42"));
    let spans = traced
        .spans(|s| {
            named(s, "invoke_agent Friday").len() == 1
                && named(s, "chat fake-model").len() == 2
                && named(s, "execute_tool add").len() == 1
        })
        .await;
    traced.finish().await;
    spans
}

#[tokio::test]
async fn a_reply_with_a_tool_call_gives_invoke_agent_chat_and_execute_tool_spans() {
    let spans = tool_call_reply(false).await;
    assert_eq!(spans.len(), 4, "{spans:#?}");

    let agent = one(&spans, "invoke_agent Friday");
    assert_eq!(agent.kind, INTERNAL);
    assert!(agent.parent_span_id.is_empty(), "invoke_agent is the root");
    assert_eq!(agent.str("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(agent.str("gen_ai.agent.name"), Some("Friday"));
    assert_eq!(agent.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(agent.str("gen_ai.request.model"), Some("fake-model"));
    assert_eq!(agent.str("gen_ai.conversation.id"), Some("conv-1"));
    assert_eq!(agent.str("agentry.stop_reason"), Some("answered"));
    assert_eq!(
        agent.int("gen_ai.usage.input_tokens"),
        Some(21 + 34),
        "{agent:#?}"
    );
    assert_eq!(agent.int("gen_ai.usage.output_tokens"), Some(7 + 2));
    assert!(agent.str("agentry.reply.id").is_some_and(|id| !id.is_empty()));
    assert_ne!(agent.status_code, STATUS_ERROR);
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        assert_eq!(agent.service_name.as_deref(), Some("agentry"));
    }

    let chats = named(&spans, "chat fake-model");
    let mut reasons = Vec::new();
    for chat in &chats {
        assert_eq!(chat.kind, CLIENT);
        assert_eq!(chat.trace_id, agent.trace_id);
        assert_eq!(
            chat.parent_span_id, agent.span_id,
            "chat is a child of invoke_agent"
        );
        assert_eq!(chat.str("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.str("gen_ai.provider.name"), Some("openai"));
        assert_eq!(chat.str("gen_ai.request.model"), Some("fake-model"));
        assert_eq!(chat.str("gen_ai.response.id"), Some("chatcmpl-fake"));
        assert!(chat.int("gen_ai.usage.input_tokens").is_some_and(|n| n > 0));
        assert!(chat.int("gen_ai.usage.output_tokens").is_some_and(|n| n > 0));
        match chat.attr("gen_ai.response.finish_reasons") {
            Some(AttrValue::Array(items)) => {
                reasons.extend(items.iter().filter_map(|i| i.as_str().map(str::to_owned)))
            }
            other => panic!("finish reasons are a string array, not {other:?}"),
        }
    }
    reasons.sort();
    assert_eq!(reasons, ["stop", "tool_calls"]);
    let usage: Vec<_> = chats
        .iter()
        .filter_map(|c| c.int("gen_ai.usage.input_tokens"))
        .collect();
    assert!(usage.contains(&21) && usage.contains(&34), "{usage:?}");

    let tool = one(&spans, "execute_tool add");
    assert_eq!(tool.kind, INTERNAL);
    assert_eq!(tool.trace_id, agent.trace_id);
    assert_eq!(
        tool.parent_span_id, agent.span_id,
        "execute_tool is a child of invoke_agent"
    );
    assert_eq!(tool.str("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.str("gen_ai.tool.name"), Some("add"));
    assert_eq!(tool.str("gen_ai.tool.call.id"), Some("call_1"));
    assert_eq!(tool.str("gen_ai.tool.type"), Some("function"));
    assert_eq!(tool.str("agentry.tool.state"), Some("completed"));
    assert!(tool.events.is_empty(), "{:?}", tool.events);
    assert_ne!(tool.status_code, STATUS_ERROR);

    for span in &spans {
        for key in CONTENT_ATTRIBUTES {
            assert!(
                span.attr(key).is_none(),
                "{} has {key} without the opt-in",
                span.name
            );
        }
    }
}

#[tokio::test]
async fn message_contents_are_recorded_only_when_opted_in() {
    let spans = tool_call_reply(true).await;
    let agent = one(&spans, "invoke_agent Friday");
    let input: serde_json::Value = serde_json::from_str(agent.str("gen_ai.input.messages").unwrap()).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "What is 2 + 40?"}]}])
    );
    let output: serde_json::Value =
        serde_json::from_str(agent.str("gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "42");

    let chats = named(&spans, "chat fake-model");
    let first = chats
        .iter()
        .find(|c| {
            c.attr("gen_ai.response.finish_reasons")
                == Some(&AttrValue::Array(vec![AttrValue::Str("tool_calls".into())]))
        })
        .unwrap();
    let input: serde_json::Value = serde_json::from_str(first.str("gen_ai.input.messages").unwrap()).unwrap();
    assert_eq!(input[0]["role"], "system");
    assert_eq!(input[1]["parts"][0]["content"], "What is 2 + 40?");
    let output: serde_json::Value =
        serde_json::from_str(first.str("gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["finish_reason"], "tool_calls");
    let call = output[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool_call")
        .unwrap();
    assert_eq!(call["id"], "call_1");
    assert_eq!(call["name"], "add");
    assert_eq!(call["arguments"], json!({"a": 2, "b": 40}));

    let tool = one(&spans, "execute_tool add");
    let args: serde_json::Value =
        serde_json::from_str(tool.str("gen_ai.tool.call.arguments").unwrap()).unwrap();
    assert_eq!(args, json!({"a": 2, "b": 40}));
    assert_eq!(tool.str("gen_ai.tool.call.result"), Some("42"));
}

#[tokio::test]
async fn a_cancelled_and_a_declined_call_carry_events_with_their_reasons() {
    let traced = Traced::start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("c_wait", "wait", "{}"),
        Call::new("c_guard", "guarded", "{}"),
    ]));
    fake.push(Reply::text("as you wish"));
    let started = Arc::new(Notify::new());
    let toolkit = Toolkit::new();
    let body_started = Arc::clone(&started);
    toolkit
        .register(FunctionTool::new(
            "wait",
            "Waits until cancelled.",
            json!({"type": "object"}),
            move |_args, ctx| {
                let started = Arc::clone(&body_started);
                once(async move {
                    started.notify_one();
                    ctx.cancelled().await;
                    "stopped".to_owned()
                })
            },
        ))
        .unwrap();
    toolkit
        .register_with(
            add_tool_named("guarded"),
            ToolOptions::new().require_approval(true),
        )
        .unwrap();
    let agent = builder(&traced, &fake, toolkit).build().unwrap();
    let handle = agent.handle();

    let mut run = agent.start_reply(Msg::user("Wait, then do the guarded thing."));
    tokio::time::timeout(DEADLINE, started.notified()).await.unwrap();
    handle.cancel_call("c_wait");
    // The guarded call asks once the cancelled one has ended (calls run in order).
    let asked = tokio::time::timeout(DEADLINE, async {
        while let Some(event) = run.next_event().await {
            if let AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } = event
                && call_id == "c_guard"
            {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(asked, "the guarded call was never asked for");
    handle
        .decide(
            "c_guard",
            ApprovalDecision::Decline {
                reason: Some("not today".into()),
            },
        )
        .unwrap();
    let reply = tokio::time::timeout(DEADLINE, run.finish())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.text().as_deref(), Some("as you wish"));

    let spans = traced
        .spans(|s| {
            named(s, "invoke_agent Friday").len() == 1
                && named(s, "execute_tool wait").len() == 1
                && named(s, "execute_tool guarded").len() == 1
        })
        .await;
    traced.finish().await;
    let agent_span = one(&spans, "invoke_agent Friday");

    let cancelled = one(&spans, "execute_tool wait");
    assert_eq!(cancelled.parent_span_id, agent_span.span_id);
    assert_eq!(cancelled.str("gen_ai.tool.call.id"), Some("c_wait"));
    assert_eq!(cancelled.str("agentry.tool.state"), Some("cancelled"));
    let event = cancelled
        .event("agentry.tool.cancelled")
        .unwrap_or_else(|| panic!("{cancelled:#?}"));
    assert_eq!(
        event.attributes.get("reason"),
        Some(&AttrValue::Str("user".into()))
    );
    assert_eq!(
        event.attributes.get("phase"),
        Some(&AttrValue::Str("running".into()))
    );
    assert_eq!(event.attributes.get("partial"), Some(&AttrValue::Bool(false)));
    assert_ne!(cancelled.status_code, STATUS_ERROR, "a cancel is not an error");

    let declined = one(&spans, "execute_tool guarded");
    assert_eq!(declined.parent_span_id, agent_span.span_id);
    assert_eq!(declined.str("gen_ai.tool.call.id"), Some("c_guard"));
    assert_eq!(declined.str("agentry.tool.state"), Some("declined"));
    assert_eq!(declined.str("agentry.decision.source"), Some("user"));
    let event = declined
        .event("agentry.tool.declined")
        .unwrap_or_else(|| panic!("{declined:#?}"));
    assert_eq!(
        event.attributes.get("reason"),
        Some(&AttrValue::Str("not today".into()))
    );
    assert_eq!(
        event.attributes.get("source"),
        Some(&AttrValue::Str("user".into()))
    );
    assert_ne!(declined.status_code, STATUS_ERROR, "a decline is not an error");
    assert!(declined.event("agentry.tool.cancelled").is_none());
}

#[tokio::test]
async fn a_cancelled_reply_marks_its_span_and_its_interrupted_model_call() {
    let traced = Traced::start().await;
    let fake = FakeLlm::start().await;
    // The answer streams one event, then hangs until the reply is cancelled.
    fake.push(
        Reply::text("a long answer that never ends")
            .chunks(4)
            .hang_after(2),
    );
    let agent = builder(&traced, &fake, Toolkit::new()).build().unwrap();
    let handle = agent.handle();
    let mut run = agent.start_reply(Msg::user("Talk."));
    // Cancel once the answer has started streaming.
    tokio::time::timeout(DEADLINE, async {
        while let Some(event) = run.next_event().await {
            if let AgentEvent::Message { last: false, .. } = event {
                return;
            }
        }
    })
    .await
    .unwrap();
    handle.cancel_reply();
    tokio::time::timeout(DEADLINE, run.finish())
        .await
        .unwrap()
        .unwrap();

    let spans = traced
        .spans(|s| named(s, "invoke_agent Friday").len() == 1 && named(s, "chat fake-model").len() == 1)
        .await;
    traced.finish().await;
    let agent_span = one(&spans, "invoke_agent Friday");
    assert_eq!(agent_span.str("agentry.stop_reason"), Some("cancelled"));
    assert!(
        agent_span.event("agentry.reply.cancelled").is_some(),
        "{agent_span:#?}"
    );
    let chat = one(&spans, "chat fake-model");
    let event = chat
        .event("agentry.chat.cancelled")
        .unwrap_or_else(|| panic!("{chat:#?}"));
    assert_eq!(
        event.attributes.get("reason"),
        Some(&AttrValue::Str("reply_cancelled".into()))
    );
}

fn add_tool_named(name: &str) -> FunctionTool {
    FunctionTool::new(
        name,
        "A tool that needs approval.",
        json!({"type": "object"}),
        |_args, _ctx| once(async { "ran".to_owned() }),
    )
}

#[tokio::test]
async fn a_timed_out_call_is_an_error_with_its_event() {
    let traced = Traced::start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c_slow", "slow", "{}")]));
    fake.push(Reply::text("too slow"));
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            FunctionTool::new(
                "slow",
                "Never ends by itself.",
                json!({"type": "object"}),
                |_args, ctx| {
                    once(async move {
                        ctx.cancelled().await;
                        "stopped".to_owned()
                    })
                },
            ),
            ToolOptions::new().timeout(Duration::from_millis(50)),
        )
        .unwrap();
    let agent = builder(&traced, &fake, toolkit).build().unwrap();
    tokio::time::timeout(DEADLINE, agent.reply(Msg::user("Be slow.")))
        .await
        .unwrap()
        .unwrap();
    let spans = traced.spans(|s| named(s, "execute_tool slow").len() == 1).await;
    traced.finish().await;
    let tool = one(&spans, "execute_tool slow");
    assert_eq!(tool.str("agentry.tool.state"), Some("timed_out"));
    assert_eq!(tool.str("error.type"), Some("timeout"));
    assert_eq!(tool.status_code, STATUS_ERROR);
    let event = tool
        .event("agentry.tool.timed_out")
        .unwrap_or_else(|| panic!("{tool:#?}"));
    assert_eq!(
        event.attributes.get("reason"),
        Some(&AttrValue::Str("timeout".into()))
    );
    assert_eq!(event.attributes.get("timeout_ms"), Some(&AttrValue::Int(50)));
}

/// A tool runs in its `execute_tool` span's context, and a reply in its caller's: the spans a
/// tool makes with the OpenTelemetry API are children of its call, and the reply's
/// `invoke_agent` is a child of the span the caller is in.
#[tokio::test]
async fn a_tools_own_span_nests_under_its_call_and_the_reply_under_its_caller() {
    use opentelemetry::trace::{FutureExt as _, TraceContextExt as _, Tracer as _};

    let traced = Traced::start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("call_1", "lookup", "{}")]));
    fake.push(Reply::text("found"));
    let tool_tracer = traced.guard.tracer().unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "lookup",
            "Look something up.",
            json!({"type": "object"}),
            move |_args, _ctx| {
                // Made where the tool body starts: the current context is the call's.
                let span = tool_tracer.start("lookup.query");
                once(async move {
                    drop(span);
                    "ok".to_owned()
                })
            },
        ))
        .unwrap();
    let agent = builder(&traced, &fake, toolkit).build().unwrap();
    let caller_tracer = traced.guard.tracer().unwrap();
    let caller = caller_tracer.start("request handler");
    let caller_cx = opentelemetry::Context::current_with_span(caller);
    let reply = tokio::time::timeout(
        DEADLINE,
        agent
            .reply(Msg::user("look it up"))
            .with_context(caller_cx.clone()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reply.text().as_deref(), Some("found"));
    caller_cx.span().end();
    let spans = traced
        .spans(|s| {
            named(s, "request handler").len() == 1
                && named(s, "invoke_agent Friday").len() == 1
                && named(s, "execute_tool lookup").len() == 1
                && named(s, "lookup.query").len() == 1
        })
        .await;
    let handler = one(&spans, "request handler");
    let agent_span = one(&spans, "invoke_agent Friday");
    let call = one(&spans, "execute_tool lookup");
    let query = one(&spans, "lookup.query");
    assert_eq!(
        agent_span.parent_span_id, handler.span_id,
        "invoke_agent is the caller's child"
    );
    assert_eq!(call.parent_span_id, agent_span.span_id);
    assert_eq!(
        query.parent_span_id, call.span_id,
        "the tool's span is its call's child"
    );
    assert_eq!(query.trace_id, handler.trace_id);
    traced.finish().await;
}
