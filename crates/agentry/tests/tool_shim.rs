//! The tool shim end to end: a model behind the fake OpenAI-compatible server writes its tool
//! calls as text (as Qwen2.5-Coder does behind llama-server), and the agent runs them as calls.
//! The fake server checks on every request that each call has exactly one result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentry::agent::{AgentEvent, ReActAgent, StopReason};
use agentry::message::Msg;
use agentry::tool::{FunctionTool, Toolkit};
use agentry_testkit::{FakeLlm, Reply};
use common::*;
use serde_json::{Value, json};

/// An `add` that counts its runs; `a` and `b` must be integers.
fn counting_add() -> (Toolkit, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "add",
            "Adds two integers.",
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}),
            move |args, _| {
                counter.fetch_add(1, Ordering::SeqCst);
                let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
                agentry::tool::once(async move { sum })
            },
        ))
        .unwrap();
    (toolkit, runs)
}

/// One reply against `fake`: the reply, the events, the memory (checked), and the add runs.
async fn reply(
    fake: &FakeLlm,
    stream: bool,
    shim: bool,
    prompt: &str,
) -> (Msg, Vec<AgentEvent>, Vec<Msg>, usize) {
    let (toolkit, runs) = counting_add();
    let agent: ReActAgent = builder(fake, stream, toolkit).tool_shim(shim).build().unwrap();
    let mut events = agent.subscribe();
    let reply = within("the reply", agent.reply(Msg::user(prompt))).await.unwrap();
    let events = drain(&mut events);
    let memory = check_all(&agent, &events).await;
    fake.assert_no_violations();
    (reply, events, memory, runs.load(Ordering::SeqCst))
}

fn recovered(events: &[AgentEvent]) -> Vec<Vec<agentry::CallId>> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextCallsRecovered { call_ids, .. } => Some(call_ids.clone()),
            _ => None,
        })
        .collect()
}

/// The texts of the streamed (not last) states of the message `id`.
fn streamed_texts(events: &[AgentEvent], id: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Message { msg, last: false } if msg.id == id => Some(msg.text().unwrap_or_default()),
            _ => None,
        })
        .collect()
}

/// The assistant message of request `n` that carries tool calls, and the tool messages after it.
fn wire_calls_and_results(fake: &FakeLlm, n: usize) -> (Value, Vec<Value>) {
    let messages = wire_messages(fake, n);
    let at = messages
        .iter()
        .position(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .unwrap_or_else(|| panic!("request {n} sends no tool_calls: {messages:#?}"));
    let results = messages[at + 1..]
        .iter()
        .take_while(|m| m["role"] == "tool")
        .cloned()
        .collect();
    (messages[at].clone(), results)
}

#[tokio::test]
async fn a_fenced_json_call_in_the_content_runs_once_and_its_result_goes_back_as_a_tool_message() {
    for stream in [true, false] {
        let fake = FakeLlm::start().await;
        fake.push(
            Reply::text(
                "Let me add them.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n```",
            )
            .chunks(40),
        );
        fake.push(Reply::text("2 + 3 = 5."));
        let (reply, events, memory, runs) = reply(&fake, stream, true, "What is 2 + 3?").await;
        assert_eq!(runs, 1, "stream {stream}");
        assert_eq!(reply.text().as_deref(), Some("2 + 3 = 5."));

        // Memory: the assistant message holds the remaining text and the call.
        let call = memory[1].tool_uses().next().unwrap().clone();
        assert_eq!(memory[1].text().as_deref(), Some("Let me add them."));
        assert_eq!(
            (call.name.as_str(), &call.input),
            ("add", &json!({"a": 2, "b": 3}))
        );
        let (result, is_error, _) = stored(&memory, call.id.as_str());
        assert_eq!((result.as_str(), is_error), ("5", false));

        // The next request: tool_calls on the assistant message, one tool message answering it.
        let (assistant, results) = wire_calls_and_results(&fake, 1);
        assert_eq!(assistant["content"], "Let me add them.");
        let calls = assistant["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["id"], call.id.as_str());
        assert_eq!(calls[0]["function"]["name"], "add");
        let arguments: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"a": 2, "b": 3}));
        assert_eq!(results.len(), 1);
        assert_eq!(results[0]["tool_call_id"], call.id.as_str());
        assert_eq!(tool_message(&fake, 1, call.id.as_str()), "5");

        // Events: the message with the call (last), then the notice, then the call's start.
        assert_eq!(recovered(&events), vec![vec![call.id.clone()]]);
        let position = |pred: &dyn Fn(&AgentEvent) -> bool| events.iter().position(pred).unwrap();
        let stored_msg =
            position(&|e| matches!(e, AgentEvent::Message { msg, last: true } if msg.id == memory[1].id));
        let notice = position(&|e| matches!(e, AgentEvent::TextCallsRecovered { .. }));
        let started = position(&|e| matches!(e, AgentEvent::ToolStarted { .. }));
        assert!(stored_msg < notice && notice < started, "{events:#?}");
        // The call never showed as answer text while it streamed.
        let streamed = streamed_texts(&events, &memory[1].id);
        if stream {
            assert!(streamed.iter().any(|t| t == "Let me add them."), "{streamed:?}");
        }
        for text in streamed {
            assert!(
                !text.contains('{') && !text.contains("```"),
                "shown while streaming: {text:?}"
            );
        }
    }
}

#[tokio::test]
async fn tool_call_tags_and_a_bare_object_are_calls_too() {
    for (text, calls) in [
        (
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}\n</tool_call>",
            1,
        ),
        ("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}", 1),
        // Qwen2.5-Coder 1.5B behind llama-server wraps a call in a second pair of braces.
        ("{{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}}", 1),
        (
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 2, \\\"b\\\": 2}\"}\n</tool_call>",
            2,
        ),
    ] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text(text).chunks(7));
        fake.push(Reply::text("Done."));
        let (reply, events, memory, runs) = reply(&fake, true, true, "Add.").await;
        assert_eq!(runs, calls, "{text}");
        assert_eq!(reply.text().as_deref(), Some("Done."));
        assert_eq!(memory[1].text(), None, "nothing but the calls: {:?}", memory[1]);
        let ids: Vec<_> = memory[1].tool_uses().map(|c| c.id.clone()).collect();
        assert_eq!(ids.len(), calls);
        assert_eq!(recovered(&events), vec![ids.clone()]);
        let (assistant, results) = wire_calls_and_results(&fake, 1);
        assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), calls);
        let answered: Vec<&str> = results
            .iter()
            .map(|r| r["tool_call_id"].as_str().unwrap())
            .collect();
        let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
        assert_eq!(answered, ids, "one result per call, in call order");
        assert!(
            streamed_texts(&events, &memory[1].id)
                .iter()
                .all(String::is_empty),
            "{text}: {:?}",
            streamed_texts(&events, &memory[1].id)
        );
    }
}

#[tokio::test]
async fn a_recovered_call_is_checked_against_the_schema_like_any_call() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text(
        "{\"name\": \"add\", \"arguments\": {\"a\": \"two\", \"b\": 3}}",
    ));
    fake.push(Reply::text("Sorry."));
    let (_, _, memory, runs) = reply(&fake, false, true, "Add.").await;
    assert_eq!(runs, 0, "the tool never ran with a string for an integer");
    let call = memory[1].tool_uses().next().unwrap();
    let (result, is_error, _) = stored(&memory, call.id.as_str());
    assert!(is_error, "{result}");
    assert!(
        tool_message(&fake, 1, call.id.as_str()).contains("not of type \"integer\""),
        "{result}"
    );
}

#[tokio::test]
async fn unknown_tools_and_garbage_json_stay_plain_text() {
    for text in [
        "{\"name\": \"rm_rf\", \"arguments\": {}}",
        "```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1,, }}\n```",
        "<tool_call>{not json</tool_call>",
        "The weather is {\"temperature\": 21}.",
    ] {
        for stream in [true, false] {
            let fake = FakeLlm::start().await;
            fake.push(Reply::text(text).chunks(5));
            let (reply, events, memory, runs) = reply(&fake, stream, true, "Hi.").await;
            assert_eq!(runs, 0, "{text}");
            assert_eq!(reply.text().as_deref(), Some(text));
            assert_eq!(memory.len(), 2, "{text}: {memory:#?}");
            assert!(recovered(&events).is_empty(), "{text}");
            assert_eq!(fake.request_count(), 1);
            // What streamed is a beginning of the answer.
            for shown in streamed_texts(&events, &memory[1].id) {
                assert!(text.starts_with(&shown), "{shown:?} is not a start of {text:?}");
            }
        }
    }
}

#[tokio::test]
async fn with_the_shim_off_the_json_text_is_the_answer() {
    let text = "```json\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n```";
    let fake = FakeLlm::start().await;
    fake.push(Reply::text(text).chunks(4));
    let (reply, events, memory, runs) = reply(&fake, true, false, "What is 2 + 3?").await;
    assert_eq!(runs, 0);
    assert_eq!(reply.text().as_deref(), Some(text));
    assert_eq!(memory.len(), 2);
    assert!(recovered(&events).is_empty());
    assert!(
        streamed_texts(&events, &memory[1].id)
            .iter()
            .any(|t| t.contains('{')),
        "without the shim, the text streams as it comes"
    );
    let finished = events.iter().find_map(|e| match e {
        AgentEvent::ReplyFinished { stop_reason, .. } => Some(stop_reason.clone()),
        _ => None,
    });
    assert_eq!(finished, Some(StopReason::Answered));
}
