//! The ReAct loop end to end, against a fake OpenAI-compatible server that speaks real HTTP and
//! SSE and checks on every request that each tool call has exactly one result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::agent::{AgentError, AgentEvent, AgentHook, HookContext, StopReason, ToolCallState};
use agentry::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use agentry::model::ModelError;
use agentry::tool::{FunctionTool, ToolOptions, ToolResponse, Toolkit, tool};
use agentry_testkit::{Call, FakeLlm, Reply};
use async_trait::async_trait;
use common::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Add two integers.
#[tool]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Multiply two integers.
#[tool]
fn mul(a: i64, b: i64) -> i64 {
    a * b
}

fn toolkit() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    toolkit.register(MulTool).unwrap();
    toolkit
}

/// A toolkit with an `add` that counts its runs.
fn counting_add() -> (Toolkit, Arc<AtomicUsize>) {
    counting_add_with(ToolOptions::new())
}

/// `add`, registered with `options`, counting its runs.
fn counting_add_with(options: ToolOptions) -> (Toolkit, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            FunctionTool::new(
                "add",
                "Adds and counts its runs.",
                json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
                move |args, _| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
                    agentry::tool::once(async move { sum })
                },
            ),
            options,
        )
        .unwrap();
    (toolkit, runs)
}

#[tokio::test]
async fn text_reply_streaming_and_not() {
    for stream in [false, true] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text("Hello there, friend."));
        let agent = agent(&fake, stream, toolkit());
        let mut events = agent.subscribe();
        let reply = agent.reply(Msg::user("hi")).await.unwrap();
        assert_eq!(reply.text().as_deref(), Some("Hello there, friend."));
        assert_eq!(reply.role, Role::Assistant);
        assert_eq!(reply.name, "Friday");
        let memory = consistent_memory(&agent).await;
        assert_eq!(memory.len(), 2);
        assert_eq!(memory[1].id, reply.id, "the reply is the stored message");

        let body = &fake.requests()[0].body;
        assert_eq!(body["stream"], stream);
        assert_eq!(body["model"], "fake-model");
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "You are a test agent."})
        );
        assert_eq!(body["messages"][1], json!({"role": "user", "content": "hi"}));
        assert_eq!(body["tools"].as_array().unwrap().len(), 2);
        if stream {
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
        }

        let events = drain(&mut events);
        assert_one_last_per_message(&events);
        let printed: Vec<(String, bool)> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Message { msg, last } => Some((msg.text().unwrap_or_default(), *last)),
                _ => None,
            })
            .collect();
        if stream {
            assert!(
                printed.len() > 2,
                "streamed in several cumulative chunks: {printed:?}"
            );
            assert!(
                printed.windows(2).all(|w| w[1].0.starts_with(&w[0].0)),
                "cumulative: {printed:?}"
            );
        } else {
            assert_eq!(printed, [("Hello there, friend.".to_owned(), true)]);
        }
        match events.last() {
            Some(AgentEvent::ReplyFinished {
                stop_reason, usage, ..
            }) => {
                assert_eq!(*stop_reason, StopReason::Answered);
                assert!(usage.output_tokens > 0, "usage is reported: {usage:?}");
            }
            other => panic!("the last event is ReplyFinished, got {other:?}"),
        }
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn one_tool_call_then_answer() {
    for stream in [false, true] {
        let fake = FakeLlm::start().await;
        fake.push(
            Reply::tool_calls([Call::new("c1", "add", r#"{"a": 2, "b": 3}"#)]).with_text("Let me add."),
        );
        fake.push(Reply::text("It is 5."));
        let agent = agent(&fake, stream, toolkit());
        let mut events = agent.subscribe();
        let reply = agent.reply(Msg::user("2+3?")).await.unwrap();
        assert_eq!(reply.text().as_deref(), Some("It is 5."));

        let memory = consistent_memory(&agent).await;
        let roles: Vec<Role> = memory.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::System, Role::Assistant]
        );
        let call = memory[1].tool_uses().next().unwrap();
        assert_eq!((call.id.as_str(), call.name.as_str()), ("c1", "add"));
        assert_eq!(call.input, json!({"a": 2, "b": 3}));
        assert_eq!(memory[1].text().as_deref(), Some("Let me add."));
        let result = memory[2].tool_results().next().unwrap();
        assert_eq!(
            (result.id.as_str(), result.text().as_str(), result.is_error),
            ("c1", "5", false)
        );

        assert_eq!(tool_message(&fake, 1, "c1"), "5");
        let assistant = &wire_messages(&fake, 1)[2];
        assert_eq!(assistant["content"], "Let me add.");
        assert_eq!(assistant["tool_calls"][0]["function"]["name"], "add");

        let events = drain(&mut events);
        assert_one_last_per_message(&events);
        let started = events
            .iter()
            .position(|e| matches!(e, AgentEvent::ToolStarted { call_id, .. } if call_id == "c1"));
        let finished = events.iter().position(|e| {
            matches!(e, AgentEvent::ToolFinished { call_id, state: ToolCallState::Completed, .. } if call_id == "c1")
        });
        assert!(started.unwrap() < finished.unwrap());
        fake.assert_no_violations();
    }
}

/// Three calls in one message, in both execution modes and both wire modes: one result each,
/// stored in call order.
#[tokio::test]
async fn several_calls_sequential_and_parallel() {
    for parallel in [false, true] {
        for stream in [false, true] {
            let fake = FakeLlm::start().await;
            fake.push(Reply::tool_calls([
                Call::new("c1", "add", r#"{"a": 1, "b": 1}"#),
                Call::new("c2", "mul", r#"{"a": 3, "b": 4}"#),
                Call::new("c3", "add", r#"{"a": 10, "b": 5}"#),
            ]));
            fake.push(Reply::text("Done."));
            let agent = builder(&fake, stream, toolkit())
                .parallel_tool_calls(parallel)
                .build()
                .unwrap();
            agent.reply(Msg::user("compute")).await.unwrap();
            let memory = consistent_memory(&agent).await;
            let results: Vec<(String, String)> = memory
                .iter()
                .flat_map(|m| m.tool_results())
                .map(|r| (r.id.to_string(), r.text()))
                .collect();
            let expected =
                [("c1", "2"), ("c2", "12"), ("c3", "15")].map(|(a, b)| (a.to_owned(), b.to_owned()));
            assert_eq!(results, expected, "parallel={parallel} stream={stream}");
            for (id, text) in expected {
                assert_eq!(tool_message(&fake, 1, &id), text);
            }
            fake.assert_no_violations();
        }
    }
}

/// `first` can only finish after `second` ran, so the batch completes only if the calls run
/// concurrently; the results are still stored in call order.
#[tokio::test]
async fn parallel_calls_run_concurrently_and_results_keep_call_order() {
    let signal = Arc::new(tokio::sync::Notify::new());
    let toolkit = Toolkit::new();
    let wait = Arc::clone(&signal);
    toolkit
        .register(FunctionTool::new(
            "first",
            "Waits for second.",
            json!({"type": "object"}),
            move |_, _| {
                let wait = Arc::clone(&wait);
                agentry::tool::once(async move {
                    wait.notified().await;
                    "first done"
                })
            },
        ))
        .unwrap();
    let notify = Arc::clone(&signal);
    toolkit
        .register(FunctionTool::new(
            "second",
            "Releases first.",
            json!({"type": "object"}),
            move |_, _| {
                let notify = Arc::clone(&notify);
                agentry::tool::once(async move {
                    notify.notify_one();
                    "second done"
                })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("a", "first", "{}"),
        Call::new("b", "second", "{}"),
    ]));
    fake.push(Reply::text("ok"));
    let agent = builder(&fake, true, toolkit)
        .parallel_tool_calls(true)
        .build()
        .unwrap();
    let mut events = agent.subscribe();
    tokio::time::timeout(Duration::from_secs(10), agent.reply(Msg::user("go")))
        .await
        .expect("parallel calls must not wait for each other")
        .unwrap();
    let memory = consistent_memory(&agent).await;
    let ids: Vec<agentry::CallId> = memory
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    let mut finished: Vec<agentry::CallId> = drain(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFinished { call_id, .. } => Some(call_id),
            _ => None,
        })
        .collect();
    finished.sort();
    assert_eq!(finished, ["a", "b"]);
    fake.assert_no_violations();
}

#[tokio::test]
async fn sequential_calls_run_one_after_the_other_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let toolkit = Toolkit::new();
    let inner = Arc::clone(&log);
    toolkit
        .register(FunctionTool::new(
            "step",
            "Logs its start and end.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            move |args, _| {
                let log = Arc::clone(&inner);
                agentry::tool::once(async move {
                    let n = args["n"].as_i64().unwrap();
                    log.lock().unwrap().push(format!("start {n}"));
                    tokio::task::yield_now().await;
                    log.lock().unwrap().push(format!("end {n}"));
                    n
                })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("s1", "step", r#"{"n": 1}"#),
        Call::new("s2", "step", r#"{"n": 2}"#),
    ]));
    fake.push(Reply::text("ok"));
    let agent = agent(&fake, false, toolkit);
    agent.reply(Msg::user("go")).await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["start 1", "end 1", "start 2", "end 2"]);
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn max_iters_reached_then_summary_without_tools() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c1", "add", r#"{"a": 1, "b": 1}"#)]));
    fake.push(Reply::tool_calls([Call::new("c2", "add", r#"{"a": 2, "b": 2}"#)]));
    fake.push(Reply::text("I added 1+1 and 2+2 so far."));
    let agent = builder(&fake, true, toolkit()).max_iters(2).build().unwrap();
    let mut events = agent.subscribe();
    let reply = agent.reply(Msg::user("keep adding")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("I added 1+1 and 2+2 so far."));
    let summary_request = &fake.requests()[2].body;
    assert!(
        summary_request.get("tools").is_none(),
        "the summary call has no tools"
    );
    let last = summary_request["messages"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert_eq!(last["role"], "user");
    assert!(last["content"].as_str().unwrap().contains("maximum iterations"));
    let memory = consistent_memory(&agent).await;
    assert_eq!(
        memory.len(),
        6,
        "user, 2 x (call + result), summary; the hint is not stored"
    );
    assert_eq!(memory[5].id, reply.id);
    let stop = drain(&mut events).into_iter().find_map(|e| match e {
        AgentEvent::ReplyFinished { stop_reason, .. } => Some(stop_reason),
        _ => None,
    });
    assert_eq!(stop, Some(StopReason::MaxIters));
    fake.assert_no_violations();
}

/// The script of the repeat tests: `add(1, 2)`, then `add(5, 5)` and `add(1, 2)` again (keys
/// reordered), then `add(1, 2)` once more, then the answer.
fn push_repeats(fake: &FakeLlm) {
    fake.push(Reply::tool_calls([Call::new("c1", "add", r#"{"a": 1, "b": 2}"#)]));
    fake.push(Reply::tool_calls([
        Call::new("c2", "add", r#"{"a": 5, "b": 5}"#),
        Call::new("c3", "add", r#"{"b": 2, "a": 1}"#),
    ]));
    fake.push(Reply::tool_calls([Call::new("c4", "add", r#"{"a": 1, "b": 2}"#)]));
    fake.push(Reply::text("1 + 2 = 3 and 5 + 5 = 10."));
}

/// Issue 25: the guard is off by default for a model that does not loop (a remote one), and
/// for a tool that is not pure: every repeat runs.
#[tokio::test]
async fn repeats_run_again_by_default_and_for_tools_that_are_not_pure() {
    for (pure, answer_repeats) in [(true, None), (false, Some(true))] {
        let (toolkit, runs) = counting_add_with(ToolOptions::new().pure(pure));
        let fake = FakeLlm::start().await;
        push_repeats(&fake);
        let mut builder = builder(&fake, true, toolkit);
        if let Some(on) = answer_repeats {
            builder = builder.answer_repeated_calls(on);
        }
        let agent = builder.build().unwrap();
        let reply = agent.reply(Msg::user("add")).await.unwrap();
        assert_eq!(reply.text().as_deref(), Some("1 + 2 = 3 and 5 + 5 = 10."));
        assert_eq!(runs.load(Ordering::SeqCst), 4, "pure {pure}: every call ran");
        let c3 = tool_message(&fake, 2, "c3");
        match answer_repeats {
            // Off: a plain result.
            None => assert_eq!(c3, "3"),
            // On, for a tool that is not pure: the fresh result, and a note to answer now.
            Some(_) => assert!(c3.starts_with("3\n") && c3.contains("it ran again"), "{c3}"),
        }
        fake.assert_no_violations();
    }
}

/// Issue 25: a call of a tool that is not pure between two identical pure calls may have
/// changed what they compute from: the second runs again.
#[tokio::test]
async fn a_repeat_after_a_call_that_may_change_things_runs_again() {
    let (toolkit, runs) = counting_add_with(ToolOptions::new().pure(true));
    let writes = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&writes);
    toolkit
        .register(FunctionTool::new(
            "write",
            "Changes things.",
            json!({"type": "object"}),
            move |_, _| {
                counter.fetch_add(1, Ordering::SeqCst);
                agentry::tool::once(async { "written" })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c1", "add", r#"{"a": 1, "b": 2}"#)]));
    fake.push(Reply::tool_calls([Call::new("w", "write", "{}")]));
    fake.push(Reply::tool_calls([Call::new("c2", "add", r#"{"a": 1, "b": 2}"#)]));
    fake.push(Reply::tool_calls([Call::new("c3", "add", r#"{"a": 1, "b": 2}"#)]));
    fake.push(Reply::text("3"));
    let agent = builder(&fake, true, toolkit)
        .answer_repeated_calls(true)
        .build()
        .unwrap();
    agent.reply(Msg::user("add, write, add")).await.unwrap();
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "c1, and c2 after the write; c3 repeats c2"
    );
    assert_eq!(tool_message(&fake, 3, "c2"), "3");
    assert!(tool_message(&fake, 4, "c3").contains("(call c2)"));
    fake.assert_no_violations();
}

/// A call of a pure tool identical to one already answered in the reply is answered with the
/// earlier result and a note, without running the tool; after two repeats the reply ends with a
/// summary (the guard on, as for a local model).
#[tokio::test]
async fn repeated_calls_are_answered_from_the_first_result_then_summarized() {
    let (toolkit, runs) = counting_add_with(ToolOptions::new().pure(true));
    let fake = FakeLlm::start().await;
    // Other arguments are a new call; the same ones (in another key order) are a repeat.
    push_repeats(&fake);
    let agent = builder(&fake, true, toolkit)
        .answer_repeated_calls(true)
        .build()
        .unwrap();
    let mut events = agent.subscribe();
    let reply = agent.reply(Msg::user("add")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("1 + 2 = 3 and 5 + 5 = 10."));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "c1 and c2 ran; the repeats did not"
    );
    let repeat = tool_message(&fake, 2, "c3");
    assert!(repeat.starts_with("3\n"), "{repeat}");
    assert!(
        repeat.contains("(call c1)") && repeat.contains("answer the user now"),
        "{repeat}"
    );
    assert_eq!(tool_message(&fake, 2, "c2"), "10");
    let events = drain(&mut events);
    assert_eq!(state_of(&events, "c3"), ToolCallState::Completed);
    assert_eq!(state_of(&events, "c4"), ToolCallState::Completed);
    let stop = events.iter().find_map(|e| match e {
        AgentEvent::ReplyFinished { stop_reason, .. } => Some(stop_reason.clone()),
        _ => None,
    });
    assert_eq!(stop, Some(StopReason::RepeatedCalls));
    let answer_request = &fake.requests()[3].body;
    assert!(
        answer_request.get("tools").is_none(),
        "the answer call has no tools"
    );
    let hint = answer_request["messages"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert!(
        hint["content"]
            .as_str()
            .unwrap()
            .contains("Answer the user's last question now"),
        "{hint}"
    );
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Answer {
    /// The number.
    value: i64,
    /// Why.
    reason: String,
}

#[tokio::test]
async fn structured_output_success() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "f1",
        "generate_response",
        r#"{"value": 42, "reason": "it is the answer"}"#,
    )]));
    fake.push(Reply::text("The answer is 42."));
    let agent = agent(&fake, true, toolkit());
    let out = agent
        .reply_structured::<Answer>(Msg::user("answer?"))
        .await
        .unwrap();
    assert_eq!(
        out.output,
        Answer {
            value: 42,
            reason: "it is the answer".into()
        }
    );
    assert_eq!(out.msg.text().as_deref(), Some("The answer is 42."));
    assert_eq!(out.msg.metadata["value"], 42);
    let requests = fake.requests();
    assert_eq!(requests[0].body["tool_choice"], "required");
    let finish = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "generate_response")
        .cloned();
    assert_eq!(
        finish.unwrap()["function"]["parameters"]["properties"]["value"]["type"],
        "integer"
    );
    assert_eq!(requests[1].body["tool_choice"], "none");
    assert_eq!(tool_message(&fake, 1, "f1"), "Successfully generated response.");
    let hint = wire_messages(&fake, 1).last().cloned().unwrap();
    assert!(
        hint["content"]
            .as_str()
            .unwrap()
            .contains("Now generate a text response")
    );
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn structured_output_validation_error_then_success() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Let me think."));
    fake.push(Reply::tool_calls([Call::new(
        "f1",
        "generate_response",
        r#"{"value": "many"}"#,
    )]));
    fake.push(
        Reply::tool_calls([Call::new(
            "f2",
            "generate_response",
            r#"{"value": 7, "reason": "counted"}"#,
        )])
        .with_text("Here you go."),
    );
    let agent = agent(&fake, false, toolkit());
    let out = agent
        .reply_structured::<Answer>(Msg::user("how many?"))
        .await
        .unwrap();
    assert_eq!(out.output.value, 7);
    assert_eq!(
        out.msg.text().as_deref(),
        Some("Here you go."),
        "text beside the call is the reply"
    );
    let hint = wire_messages(&fake, 1).last().cloned().unwrap();
    assert!(
        hint["content"]
            .as_str()
            .unwrap()
            .contains("Structured output is required")
    );
    let error = tool_message(&fake, 2, "f1");
    assert!(error.starts_with("Arguments Validation Error:"), "{error}");
    assert!(error.contains("reason") && error.contains("integer"), "{error}");
    let choices: Vec<_> = fake
        .requests()
        .iter()
        .map(|r| r.body["tool_choice"].clone())
        .collect();
    assert_eq!(choices, [json!("required"), json!("required"), json!("required")]);
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn structured_output_missing_is_an_error_with_the_reply() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("no"));
    fake.push(Reply::text("still no"));
    let agent = builder(&fake, false, toolkit()).max_iters(1).build().unwrap();
    match agent.reply_structured::<Answer>(Msg::user("x")).await {
        Err(AgentError::NoStructuredOutput { reply }) => {
            assert_eq!(reply.text().as_deref(), Some("still no"))
        }
        other => panic!("expected NoStructuredOutput, got {other:?}"),
    }
    consistent_memory(&agent).await;
}

/// Runs one model step that calls `call`, then a text answer; returns the result the model saw.
async fn result_seen_by_model(toolkit: Toolkit, call: Call) -> (String, Vec<Msg>) {
    let fake = FakeLlm::start().await;
    let id = call.id().to_owned();
    fake.push(Reply::tool_calls([call]));
    fake.push(Reply::text("ok"));
    let agent = agent(&fake, true, toolkit);
    let reply = agent.reply(Msg::user("go")).await.unwrap();
    assert_eq!(
        reply.text().as_deref(),
        Some("ok"),
        "the reply goes on after the failure"
    );
    let memory = consistent_memory(&agent).await;
    fake.assert_no_violations();
    (tool_message(&fake, 1, &id), memory)
}

fn stored_result(memory: &[Msg]) -> ToolResultBlock {
    memory
        .iter()
        .flat_map(|m| m.tool_results())
        .next()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn invalid_json_arguments_are_an_error_result_not_empty_arguments() {
    let (toolkit, runs) = counting_add();
    let (seen, memory) = result_seen_by_model(toolkit, Call::new("bad", "add", r#"{"a": 1,, "b": 2}"#)).await;
    assert!(seen.contains("not valid JSON"), "{seen}");
    assert!(stored_result(&memory).is_error);
    let call = memory[1].tool_uses().next().unwrap();
    assert_eq!(
        call.raw_input.as_deref(),
        Some(r#"{"a": 1,, "b": 2}"#),
        "what the model sent is kept"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool did not run with {{}}");
}

#[tokio::test]
async fn unknown_tool_is_an_error_result() {
    let (seen, memory) = result_seen_by_model(toolkit(), Call::new("u", "divide", r#"{"a": 1}"#)).await;
    assert!(
        seen.contains("no tool named \"divide\"") && seen.contains("add, mul"),
        "{seen}"
    );
    assert!(stored_result(&memory).is_error);
}

#[tokio::test]
async fn inactive_group_is_an_error_result() {
    let toolkit = toolkit();
    toolkit.create_group("extra", "More math.", false, None).unwrap();
    toolkit
        .register_with(
            FunctionTool::typed(
                "square",
                "Square.",
                |a: Answer, _| async move { a.value * a.value },
            ),
            ToolOptions::new().group("extra"),
        )
        .unwrap();
    let (seen, _) =
        result_seen_by_model(toolkit, Call::new("g", "square", r#"{"value": 3, "reason": ""}"#)).await;
    assert!(seen.contains("inactive group \"extra\""), "{seen}");
}

/// Searches with a preset key.
#[tool]
async fn keyed_search(query: String, api_key: String) -> String {
    format!("{query}:{}", api_key.len())
}

#[tokio::test]
async fn preset_argument_override_is_refused() {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            KeyedSearchTool,
            ToolOptions::new().preset("api_key", json!("secret")),
        )
        .unwrap();
    let (seen, _) = result_seen_by_model(
        toolkit,
        Call::new("p", "keyed_search", r#"{"query": "q", "api_key": "x"}"#),
    )
    .await;
    assert!(
        seen.contains("\"api_key\"") && seen.contains("cannot be set"),
        "{seen}"
    );
    assert!(!seen.contains("secret"));
}

/// Panics.
#[tool]
async fn broken() -> String {
    panic!("the tool is broken")
}

#[tokio::test]
async fn tool_panic_is_an_error_result_and_the_reply_goes_on() {
    let toolkit = Toolkit::new();
    toolkit.register(BrokenTool).unwrap();
    let (seen, memory) = result_seen_by_model(toolkit, Call::new("x", "broken", "{}")).await;
    assert!(seen.contains("panicked: the tool is broken"), "{seen}");
    assert!(stored_result(&memory).is_error);
}

/// Streams progress, then fails.
#[tool(stream)]
fn crawl() -> impl futures::Stream<Item = Result<ToolResponse, String>> + Send {
    futures::stream::iter(vec![
        Ok(ToolResponse::partial("page 1")),
        Ok(ToolResponse::partial("page 1, page 2")),
        Err("connection reset".to_owned()),
    ])
}

#[tokio::test]
async fn error_in_the_middle_of_a_tool_stream_is_an_error_result() {
    let toolkit = Toolkit::new();
    toolkit.register(CrawlTool).unwrap();
    let (seen, memory) = result_seen_by_model(toolkit, Call::new("s", "crawl", "{}")).await;
    assert_eq!(seen, "page 1, page 2\nError: connection reset");
    let result = stored_result(&memory);
    assert!(result.is_error);
    assert_eq!(result.output.len(), 2, "partial output then the error");
}

#[tokio::test]
async fn rate_limited_then_success() {
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::status(429)
            .header("retry-after", "0")
            .body(r#"{"error": {"message": "slow down"}}"#),
    );
    fake.push(Reply::text("finally"));
    let agent = agent(&fake, true, toolkit());
    let reply = agent.reply(Msg::user("hi")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("finally"));
    assert_eq!(fake.request_count(), 2);
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn server_error_five_times_is_a_clear_error_and_memory_stays_consistent() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c1", "add", r#"{"a": 1, "b": 2}"#)]));
    for _ in 0..5 {
        fake.push(Reply::status(500).body("upstream exploded"));
    }
    let agent = agent(&fake, true, toolkit());
    let mut events = agent.subscribe();
    let err = agent.reply(Msg::user("add")).await.unwrap_err();
    match &err {
        AgentError::Model(ModelError::Status {
            status,
            attempts,
            body,
            ..
        }) => {
            assert_eq!((*status, *attempts), (500, 5));
            assert!(body.contains("upstream exploded"));
        }
        other => panic!("expected a status error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("HTTP 500") && text.contains("5 attempt"), "{text}");
    assert_eq!(fake.request_count(), 6);
    let memory = consistent_memory(&agent).await;
    assert_eq!(memory.len(), 3, "user, call, result: the completed step is kept");
    let stop = drain(&mut events).into_iter().find_map(|e| match e {
        AgentEvent::ReplyFinished { stop_reason, .. } => Some(stop_reason),
        _ => None,
    });
    assert!(matches!(stop, Some(StopReason::Failed(_))));

    // The agent keeps working.
    fake.push(Reply::text("back"));
    assert_eq!(agent.reply(None).await.unwrap().text().as_deref(), Some("back"));
    consistent_memory(&agent).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn garbage_sse_line_is_a_clear_error() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::raw_sse([
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n",
        "data: this is not json\n\n",
    ]));
    let agent = agent(&fake, true, toolkit());
    let err = agent.reply(Msg::user("hi")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::Decode { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("this is not json"), "{err}");
    let memory = consistent_memory(&agent).await;
    assert_eq!(memory.len(), 1, "no half-received assistant message is stored");
    fake.assert_no_violations();
}

#[tokio::test]
async fn truncated_stream_is_a_clear_error() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::raw_sse([
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n",
    ]));
    let agent = agent(&fake, true, toolkit());
    let err = agent.reply(Msg::user("hi")).await.unwrap_err();
    assert!(
        err.to_string().contains("before the response was complete"),
        "{err}"
    );
    fake.assert_no_violations();
}

/// Doubles `a` before acting, appends a note after, and records what it saw.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
}

struct Hooks(Arc<Recorder>);

#[async_trait]
impl AgentHook for Hooks {
    async fn pre_reply(&self, _: &HookContext, msg: &mut Option<Msg>) {
        self.0.seen.lock().unwrap().push("pre_reply".into());
        if let Some(msg) = msg {
            msg.content.push(ContentBlock::text("(edited by a hook)"));
        }
    }
    async fn pre_reasoning(&self, ctx: &HookContext, _: &mut Option<agentry::model::ToolChoice>) {
        self.0
            .seen
            .lock()
            .unwrap()
            .push(format!("pre_reasoning {}", ctx.iteration));
    }
    async fn pre_acting(&self, _: &HookContext, call: &mut ToolUseBlock) {
        call.input["a"] = json!(call.input["a"].as_i64().unwrap() * 2);
    }
    async fn post_acting(
        &self,
        _: &HookContext,
        _: &ToolUseBlock,
        _: &ToolCallState,
        result: &mut ToolResultBlock,
    ) {
        result.output.push(ContentBlock::text("(checked)"));
    }
    async fn post_reply(&self, _: &HookContext, reply: &mut Msg) {
        reply.metadata.insert("hooked".into(), json!(true));
    }
}

#[tokio::test]
async fn instance_hooks_change_arguments_and_outputs() {
    let recorder = Arc::new(Recorder::default());
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("h", "add", r#"{"a": 5, "b": 1}"#)]));
    fake.push(Reply::text("done"));
    let agent = builder(&fake, true, toolkit())
        .hook("rec", Hooks(Arc::clone(&recorder)))
        .build()
        .unwrap();
    let reply = agent.reply(Msg::user("go")).await.unwrap();
    assert_eq!(reply.metadata["hooked"], true);
    assert_eq!(
        tool_message(&fake, 1, "h"),
        "11\n(checked)",
        "a was doubled, the output annotated"
    );
    assert_eq!(wire_messages(&fake, 0)[1]["content"], "go\n(edited by a hook)");
    assert_eq!(
        *recorder.seen.lock().unwrap(),
        ["pre_reply", "pre_reasoning 0", "pre_reasoning 1"]
    );

    // Another agent of the same type has no hooks: hooks belong to one instance.
    fake.push(Reply::text("plain"));
    let other = agent_without_hooks(&fake).await;
    assert!(other.metadata.is_empty());
    assert!(agent.remove_hook("rec"));
    assert!(!agent.remove_hook("rec"));
    fake.assert_no_violations();
}

async fn agent_without_hooks(fake: &FakeLlm) -> Msg {
    agent(fake, true, toolkit()).reply(Msg::user("x")).await.unwrap()
}

#[tokio::test]
async fn start_reply_streams_events_then_returns_the_reply() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "mul", r#"{"a": 6, "b": 7}"#)]));
    fake.push(Reply::text("42"));
    let agent = agent(&fake, true, toolkit());
    let mut run = agent.start_reply(Msg::user("6*7"));
    let mut events = Vec::new();
    while let Some(event) = run.next_event().await {
        events.push(event);
    }
    assert!(matches!(events.last(), Some(AgentEvent::ReplyFinished { .. })));
    assert_one_last_per_message(&events);
    let tool_result_printed = events.iter().any(|e| {
        matches!(e, AgentEvent::Message { msg, last: true } if msg.tool_results().any(|r| r.text() == "42"))
    });
    assert!(tool_result_printed);
    assert_eq!(run.finish().await.unwrap().text().as_deref(), Some("42"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn memory_helpers_list_and_count_tool_calls() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("1", "add", r#"{"a": 1, "b": 1}"#),
        Call::new("2", "add", r#"{"a": 1, "b": 2}"#),
    ]));
    fake.push(Reply::tool_calls([Call::new("3", "mul", r#"{"a": 1, "b": 1}"#)]));
    fake.push(Reply::text("ok"));
    let agent = agent(&fake, false, toolkit());
    agent.reply(Msg::user("go")).await.unwrap();
    let calls = agent.memory().tool_calls().await.unwrap();
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    let counts = agent.memory().tool_call_counts().await.unwrap();
    assert_eq!((counts["add"], counts["mul"]), (2, 1));
    fake.assert_no_violations();
}

/// Shouts what is shown; counts what was shown.
#[derive(Default)]
struct Shout {
    printed: AtomicUsize,
}

struct ShoutHook(Arc<Shout>);

#[async_trait]
impl AgentHook for ShoutHook {
    async fn pre_print(&self, _: &HookContext, msg: &mut Msg, _last: bool) {
        for block in msg.content.iter_mut() {
            if let ContentBlock::Text { text } = block {
                *text = text.to_uppercase();
            }
        }
    }
    async fn post_print(&self, _: &HookContext, _: &Msg, last: bool) {
        if last {
            self.0.printed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn print_hooks_change_what_is_shown_not_what_is_stored() {
    let shout = Arc::new(Shout::default());
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("quiet words"));
    let agent = builder(&fake, true, toolkit())
        .hook("shout", ShoutHook(Arc::clone(&shout)))
        .build()
        .unwrap();
    let mut events = agent.subscribe();
    let reply = agent.reply(Msg::user("hi")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("quiet words"));
    let shown: Vec<String> = drain(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::Message { msg, last: true } => msg.text(),
            _ => None,
        })
        .collect();
    assert_eq!(shown, ["QUIET WORDS"]);
    assert_eq!(shout.printed.load(Ordering::SeqCst), 1);
    assert_eq!(
        consistent_memory(&agent).await[1].text().as_deref(),
        Some("quiet words")
    );
    fake.assert_no_violations();
}
