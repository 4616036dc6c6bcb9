//! The Anthropic Messages provider on the wire, against the fake server speaking Anthropic's
//! format (which checks on every request that each `tool_use` is answered by exactly one
//! `tool_result` in the next user message, and that thinking blocks come back signed and
//! unchanged): events torn across HTTP chunks, an `error` event mid-stream, 529 then success,
//! a thinking block, parallel tool use, arguments split inside a string, prompt caching, and a
//! reply cancelled while the model streams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use agentry::agent::{AgentEvent, CancelOutcome, ReActAgent};
use agentry::message::{ContentBlock, Msg, Role};
use agentry::model::{
    AnthropicChatModel, AnthropicConfig, ChatModel, ChatRequest, ChatResponse, ModelError, ToolSchema,
};
use agentry::tool::{FunctionTool, Toolkit};
use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::probe::Driver;
use common::{check_all, fast_retry, within};
use futures::StreamExt;
use serde_json::{Value, json};

fn config(fake: &FakeLlm) -> AnthropicConfig {
    AnthropicConfig::new("claude-test")
        .base_url(fake.anthropic_base_url())
        .api_key("sk-ant-test")
        .retry(fast_retry())
}

fn model(fake: &FakeLlm) -> AnthropicChatModel {
    AnthropicChatModel::new(config(fake)).unwrap()
}

async fn collect(model: &AnthropicChatModel, request: ChatRequest) -> Result<Vec<ChatResponse>, ModelError> {
    let mut out = Vec::new();
    let mut stream = model.chat(request);
    while let Some(item) = stream.next().await {
        out.push(item?);
    }
    Ok(out)
}

fn add_tool() -> FunctionTool {
    FunctionTool::new(
        "add",
        "Adds two numbers.",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        |args, _| {
            let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            agentry::tool::once(async move { sum })
        },
    )
}

fn agent(config: AnthropicConfig) -> ReActAgent {
    let toolkit = Toolkit::new();
    toolkit.register(add_tool()).unwrap();
    ReActAgent::builder()
        .name("Friday")
        .sys_prompt("You are a test agent.")
        .model(AnthropicChatModel::new(config).unwrap())
        .toolkit(toolkit)
        .build()
        .unwrap()
}

/// The `messages` of request `n`.
fn turns(fake: &FakeLlm, n: usize) -> Vec<Value> {
    fake.requests()[n].body["messages"].as_array().cloned().unwrap()
}

#[tokio::test]
async fn a_reply_with_thinking_and_parallel_calls_over_torn_events_passes_the_servers_checks() {
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::tool_calls([
            Call::new("toolu_a", "add", r#"{"a": 1, "b": 2}"#),
            Call::new("toolu_b", "add", r#"{"a": 30, "b": 40}"#),
        ])
        .with_reasoning("Two sums, at once.")
        .with_text("Adding both.")
        .chunks(3)
        .torn_events(),
    );
    fake.push(Reply::text("3 and 70.").torn_events());
    let agent = agent(config(&fake).thinking(2048));
    let reply = within("the reply", agent.reply(Msg::user("add them")))
        .await
        .unwrap();
    assert_eq!(reply.text().as_deref(), Some("3 and 70."));
    fake.assert_no_violations();

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(
        first.headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-test")
    );
    assert_eq!(
        first.headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(first.body["thinking"]["budget_tokens"], 2048);
    assert_eq!(first.body["stream"], true);
    // Prompt caching: breakpoints on the system prompt and on the tools.
    assert_eq!(first.body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(first.body["tools"][0]["cache_control"]["type"], "ephemeral");

    // The second request carries the thinking block back, signed, before the calls; both
    // results come first in the one user message that follows.
    let second = turns(&fake, 1);
    let assistant = &second[1];
    assert_eq!(assistant["role"], "assistant");
    let kinds: Vec<&str> = assistant["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(assistant["content"][0]["thinking"], "Two sums, at once.");
    assert!(
        assistant["content"][0]["signature"]
            .as_str()
            .unwrap()
            .starts_with("fake-sig-")
    );
    assert_eq!(assistant["content"][2]["input"], json!({"a": 1, "b": 2}));
    let results = &second[2];
    assert_eq!(results["role"], "user");
    assert_eq!(
        results["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "3"}]},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": [{"type": "text", "text": "70"}]},
        ])
    );

    // The thinking block is in memory with its signature, so a later turn can send it again.
    let memory = agent.memory().messages().await.unwrap();
    let thinking = memory
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            ContentBlock::Thinking { signature, .. } => signature.clone(),
            _ => None,
        });
    assert!(thinking.is_some_and(|s| s.starts_with("fake-sig-")));
}

#[tokio::test]
async fn arguments_split_inside_a_string_are_previewed_and_complete_at_the_end() {
    let fake = FakeLlm::start().await;
    let text = "a long note with a \\\"quote\\\" and ünïcödé";
    fake.push(
        Reply::tool_calls([Call::new(
            "toolu_n",
            "note",
            format!(r#"{{"title": "groceries", "body": "{text}"}}"#),
        )])
        .chunks(7),
    );
    let responses = collect(&model(&fake), ChatRequest::new(vec![Msg::user("note")]))
        .await
        .unwrap();
    let previews: Vec<Value> = responses
        .iter()
        .filter_map(|r| r.tool_uses().next().map(|c| c.input.clone()))
        .collect();
    assert!(
        previews
            .iter()
            .any(|p| p["body"].as_str().is_some_and(|b| !b.is_empty() && b.len() < 20)),
        "a preview shows a string cut in the middle: {previews:#?}"
    );
    let done = responses.last().unwrap();
    let call = done.tool_uses().next().unwrap();
    assert_eq!(call.id, "toolu_n");
    assert_eq!(call.input["body"], "a long note with a \"quote\" and ünïcödé");
    assert_eq!(done.finish_reason.as_deref(), Some("tool_use"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn cache_tokens_are_counted_in_the_usage() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("cached").usage(12, 5).cache_usage(900, 100));
    let responses = collect(
        &model(&fake),
        ChatRequest::new(vec![Msg::system("sys"), Msg::user("hi")]),
    )
    .await
    .unwrap();
    let usage = responses.last().unwrap().usage.clone().unwrap();
    assert_eq!(
        usage.input_tokens,
        12 + 900 + 100,
        "all prompt tokens, cached ones included"
    );
    assert_eq!((usage.cache_read_tokens, usage.cache_write_tokens), (900, 100));
    assert_eq!(usage.output_tokens, 5);
}

#[tokio::test]
async fn overloaded_529_is_retried_after_the_servers_delay_then_succeeds() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(529).header("retry-after", "0"));
    fake.push(Reply::text("finally"));
    let responses = collect(&model(&fake), ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        responses.last().unwrap().content,
        vec![ContentBlock::text("finally")]
    );
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn overloaded_to_the_end_says_so() {
    let fake = FakeLlm::start().await;
    for _ in 0..5 {
        fake.push(Reply::status(529));
    }
    let err = collect(&model(&fake), ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            ModelError::Status {
                status: 529,
                attempts: 5,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(text.contains("overloaded_error: Overloaded"), "{text}");
    assert!(text.contains("try again later"), "{text}");
    assert_eq!(fake.request_count(), 5);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_an_api_error_and_not_retried() {
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::text("This answer will break off")
            .chunks(4)
            .error_event_after(5, "overloaded_error", "Overloaded"),
    );
    let mut stream = model(&fake).chat(ChatRequest::new(vec![Msg::user("hi")]));
    let mut seen_text = false;
    let err = loop {
        match within("the next item", stream.next()).await {
            Some(Ok(r)) => seen_text |= !r.content.is_empty(),
            Some(Err(e)) => break e,
            None => panic!("the stream ended without the error"),
        }
    };
    assert!(seen_text, "the text before the error was streamed");
    assert!(
        matches!(&err, ModelError::Api(m) if m.contains("overloaded_error")),
        "{err:?}"
    );
    assert_eq!(fake.request_count(), 1, "a stream already used is not retried");
}

#[tokio::test]
async fn an_error_event_before_anything_else_is_retried() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("unused").error_event_after(0, "overloaded_error", "Overloaded"));
    fake.push(Reply::text("second time lucky"));
    let responses = collect(&model(&fake), ChatRequest::new(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        responses.last().unwrap().content,
        vec![ContentBlock::text("second time lucky")]
    );
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn a_whole_message_decodes_when_not_streamed() {
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::tool_calls([Call::new("toolu_w", "add", r#"{"a": 5}"#)])
            .with_reasoning("whole")
            .with_text("One call."),
    );
    let model = AnthropicChatModel::new(config(&fake).stream(false)).unwrap();
    let request = ChatRequest {
        tools: Arc::from(vec![ToolSchema {
            name: "add".into(),
            description: "Add.".into(),
            parameters: json!({"type": "object"}),
        }]),
        ..ChatRequest::new(vec![Msg::user("x")])
    };
    let responses = collect(&model, request).await.unwrap();
    assert_eq!(responses.len(), 1);
    let r = &responses[0];
    assert!(
        matches!(&r.content[0], ContentBlock::Thinking { thinking, signature: Some(_) } if thinking == "whole")
    );
    assert_eq!(r.content[1], ContentBlock::text("One call."));
    assert_eq!(r.tool_uses().next().unwrap().input, json!({"a": 5}));
    assert_eq!(fake.requests()[0].body["stream"], false);
}

#[tokio::test]
async fn r3_a_reply_cancelled_while_the_model_streams_keeps_the_text_and_the_complete_call() {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    // Events: message_start, ping, text start, 2 text deltas, text stop, a's start, 2 argument
    // deltas, a's stop, b's start, b's first argument delta: pausing after 12 leaves b half sent.
    fake.push(
        Reply::tool_calls([
            Call::new("toolu_a", "add", r#"{"a": 1, "b": 2}"#),
            Call::new("toolu_b", "add", r#"{"a": 3, "b": 4}"#),
        ])
        .with_text("Let me add.")
        .chunks(2)
        .pause_after(12, gate.clone()),
    );
    fake.push(Reply::text("Stopped."));
    let agent = agent(config(&fake));
    let (handle, mut driver) = Driver::go(&agent);
    within("the stream pauses", gate.reached()).await;
    driver
        .wait_for(
            "both calls streaming",
            |e| matches!(e, AgentEvent::Message { msg, last: false } if msg.tool_uses().count() == 2),
        )
        .await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    let assistant = memory.iter().find(|m| m.role == Role::Assistant).unwrap();
    assert_eq!(
        assistant.text().as_deref(),
        Some("Let me add."),
        "the text is kept"
    );
    let calls: Vec<_> = assistant.tool_uses().collect();
    assert_eq!(calls.len(), 1, "the call with incomplete arguments is removed");
    assert_eq!(calls[0].id, "toolu_a");
    assert_eq!(reply.unwrap().id, assistant.id);
    gate.open();

    // The next request, built from that memory, passes the server's checks.
    within("the next reply", agent.reply(Msg::user("again")))
        .await
        .unwrap();
    fake.assert_no_violations();
    assert_eq!(fake.request_count(), 2);
}
