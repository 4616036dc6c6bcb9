//! The life of a call around the spec's edges: approval decided on the call as it will run,
//! call ids unique for a whole reply, results recorded before they are announced, a cancel
//! racing a timeout, and the bounds of what an agent keeps (spec S3, A1, C4, X6, T3, X10).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::agent::{AgentEvent, AgentHook, HookContext, ReActAgent};
use agentry::message::{Msg, ToolUseBlock};
use agentry::tool::{
    ApprovalDecision, CANCELLED_RUNNING, CancelOutcome, ToolCallState, ToolOptions, Toolkit, declined_text,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use async_trait::async_trait;
use common::probe::{Driver, Probe, asked, finished};
use common::*;
use serde_json::{Value, json};

fn call(id: &str, tool: &str, args: Value) -> Call {
    Call::new(id, tool, args.to_string())
}

/// Rewrites every call of `from` into a call of `to` with `args`, as a repairing or
/// malicious hook could.
struct Redirect {
    from: &'static str,
    to: &'static str,
    args: Value,
}

#[async_trait]
impl AgentHook for Redirect {
    async fn pre_acting(&self, _cx: &HookContext, call: &mut ToolUseBlock) {
        if call.name == self.from {
            call.name = self.to.to_owned();
            call.input = self.args.clone();
        }
    }
}

fn guarded_and_free(probe: &Probe) -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(probe.tool("guarded"), ToolOptions::new().require_approval(true))
        .unwrap();
    toolkit.register(probe.tool("free")).unwrap();
    toolkit
}

/// Defect 1: approval was decided on the call as the model wrote it, before the `pre_acting`
/// hooks, so a hook turning a free call into a guarded one ran it unasked.
#[tokio::test]
async fn s3_a1_approval_is_decided_after_the_pre_acting_hooks() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call("c1", "free", json!({"x": 1}))]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let agent = builder(&fake, true, guarded_and_free(&probe))
        .hook(
            "redirect",
            Redirect {
                from: "free",
                to: "guarded",
                args: json!({"result": "repaired"}),
            },
        )
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    let request = driver.wait_for("the approval request", asked("c1")).await;
    match request {
        AgentEvent::ApprovalRequested { name, input, .. } => {
            assert_eq!(name, "guarded", "asked about the tool that will run");
            assert_eq!(
                input,
                json!({"result": "repaired"}),
                "asked about the arguments that will run"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    handle
        .decide("c1", ApprovalDecision::Decline { reason: None })
        .unwrap();
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    assert_eq!(probe.runs(), 0, "a declined call never runs");
    assert_eq!(state_of(&events, "c1"), ToolCallState::Declined { reason: None });
    let msgs = check_all(&agent, &events).await;
    assert_eq!(stored(&msgs, "c1").0, declined_text(None));
    fake.assert_no_violations();
}

/// Defect 18: a call its tool refuses (here: a path outside the allowed directory) fails
/// before anyone is asked to approve it.
#[tokio::test]
async fn a_call_the_tool_refuses_is_not_put_to_the_user() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call(
        "c1",
        "guarded",
        json!({"path": "/etc/passwd"}),
    )]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("guarded"),
            ToolOptions::new().require_approval(true).check(|args| {
                match args.get("path").and_then(Value::as_str) {
                    Some(path) if path.starts_with('/') => {
                        Err(format!("{path:?} is outside the working directory"))
                    }
                    _ => Ok(()),
                }
            }),
        )
        .unwrap();
    let agent = agent(&fake, true, toolkit);
    let driver = Driver::new(agent.start_reply(Msg::user("go")));
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ApprovalRequested { .. })),
        "nobody is asked about a call that cannot run: {events:#?}"
    );
    assert_eq!(state_of(&events, "c1"), ToolCallState::Failed);
    assert_eq!(probe.runs(), 0);
    let msgs = check_all(&agent, &events).await;
    let (text, is_error, _) = stored(&msgs, "c1");
    assert!(is_error);
    assert!(text.contains("outside the working directory"), "{text}");
    fake.assert_no_violations();
}

/// Defect 2: ids were unique per message only; a model reusing an id in a later round made
/// `cancel_call` find the first, finished call, and the running one was never cancelled.
#[tokio::test]
async fn c4_a_reused_call_id_is_rewritten_and_cancel_reaches_the_running_call() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call("c1", "free", json!({}))]));
    fake.push(Reply::tool_calls([call("c1", "free", json!({"wait": true}))]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let agent = agent(&fake, true, guarded_and_free(&probe));
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("the first call's end", finished("c1")).await;
    let second = driver
        .wait_for("the second call", |e| matches!(e, AgentEvent::ToolStarted { .. }))
        .await;
    let AgentEvent::ToolStarted { call_id, .. } = second else {
        unreachable!()
    };
    probe.started(2).await;
    assert_eq!(handle.cancel_call(&call_id), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    assert!(matches!(
        state_of(&events, &call_id),
        ToolCallState::Cancelled { .. }
    ));
    let msgs = check_all(&agent, &events).await;
    assert_eq!(stored(&msgs, &call_id).0, CANCELLED_RUNNING);
    // The rewritten id is used consistently: the assistant message, its result and the wire.
    let calls: Vec<agentry::CallId> = msgs
        .iter()
        .flat_map(|m| m.tool_uses().map(|c| c.id.clone()))
        .collect();
    assert_eq!(calls, ["c1".into(), call_id.clone()]);
    let wire_ids: Vec<Value> = wire_messages(&fake, 2)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].clone())
        .collect();
    assert_eq!(wire_ids, [json!("c1"), json!(call_id)]);
    fake.assert_no_violations();
}

/// Records, at each printed final tool result, whether memory already holds it.
#[derive(Default)]
struct MemoryAtPrint {
    memory: Mutex<Option<Arc<dyn agentry::memory::Memory>>>,
    seen: Mutex<Vec<(String, bool)>>,
}

struct MemoryAtPrintHook(Arc<MemoryAtPrint>);

#[async_trait]
impl AgentHook for MemoryAtPrintHook {
    async fn post_print(&self, _cx: &HookContext, msg: &Msg, last: bool) {
        let Some(result) = msg.tool_results().next() else {
            return;
        };
        if !last {
            return;
        }
        let memory = self.0.memory.lock().unwrap().clone();
        let Some(memory) = memory else { return };
        let stored = memory
            .messages()
            .await
            .unwrap()
            .iter()
            .any(|m| m.tool_results().any(|r| r.id == result.id));
        self.0.seen.lock().unwrap().push((result.id.to_string(), stored));
    }
}

async fn record_then_announce(parallel: bool) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("slow", "free", json!({"wait": true})),
        call("fast", "free", json!({})),
    ]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let observed = Arc::new(MemoryAtPrint::default());
    let agent: ReActAgent = builder(&fake, true, guarded_and_free(&probe))
        .parallel_tool_calls(parallel)
        .hook("memory-at-print", MemoryAtPrintHook(Arc::clone(&observed)))
        .build()
        .unwrap();
    *observed.memory.lock().unwrap() = Some(Arc::clone(agent.memory()));
    let mut driver = Driver::new(agent.start_reply(Msg::user("go")));
    if parallel {
        // "slow" is still running: its sibling's result must be in memory already.
        driver.wait_for("fast's end", finished("fast")).await;
        let msgs = agent.memory().messages().await.unwrap();
        assert!(
            msgs.iter().any(|m| m.tool_results().any(|r| r.id == "fast")),
            "ToolFinished(fast) came before its result was in memory"
        );
        probe.release();
    } else {
        probe.started(1).await;
        probe.release();
    }
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    check_all(&agent, &events).await;
    let seen = observed.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (call_id, stored) in seen {
        assert!(
            stored,
            "the last chunk of {call_id} was printed before it was in memory"
        );
    }
    fake.assert_no_violations();
}

/// Defect 3: `ToolFinished` came before the result was in memory (and in a parallel batch,
/// memory was written only once every sibling had finished).
#[tokio::test]
async fn x6_a_parallel_result_is_in_memory_when_it_is_announced_and_memory_keeps_call_order() {
    record_then_announce(true).await;
}

#[tokio::test]
async fn x6_a_sequential_result_is_in_memory_when_it_is_announced() {
    record_then_announce(false).await;
}

/// Defect 7: the finished calls an agent remembers for `cancel_call` grew without bound. A call
/// beyond the bound is still found in memory, with its result (C3).
#[tokio::test]
async fn c3_finished_calls_are_remembered_up_to_a_bound_and_older_ones_are_read_from_memory() {
    let fake = FakeLlm::start().await;
    for id in ["c1", "c2", "c3"] {
        fake.push(Reply::tool_calls([call(id, "free", json!({}))]));
        fake.push(Reply::text("done"));
    }
    let probe = Probe::new();
    let agent = builder(&fake, true, guarded_and_free(&probe))
        .finished_calls_limit(2)
        .build()
        .unwrap();
    for _ in 0..3 {
        agent.reply(Msg::user("go")).await.unwrap();
    }
    let handle = agent.handle();
    assert_eq!(
        handle.cancel_call("c1"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed)),
        "beyond the bound: read from memory"
    );
    assert_eq!(
        handle.cancel_call("c9"),
        CancelOutcome::NotFound,
        "never made (C4)"
    );
    assert_eq!(
        handle.cancel_call("c3"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed))
    );
    fake.assert_no_violations();
}

/// Defect 7: an `on_cancel` that never returns held a blocking thread forever, and every
/// further one could do the same; the number of callbacks running at once is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x10_callbacks_that_never_return_hold_a_bounded_number_of_threads() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("c1", "free", json!({"wait": true, "block_on_cancel": true})),
        call("c2", "free", json!({"wait": true, "block_on_cancel": true})),
    ]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let agent = builder(&fake, true, guarded_and_free(&probe))
        .on_cancel_limit(1)
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(1).await;
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    driver.wait_for("c1's end", finished("c1")).await;
    probe.started(2).await;
    assert_eq!(handle.cancel_call("c2"), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    // Lets c1's callback return, so the runtime can shut down whatever the assertions say.
    probe.unblock_on_cancel();
    reply.unwrap();
    assert_eq!(
        probe.on_cancel_runs(),
        1,
        "with the only slot held by c1's callback, c2's is not run"
    );
    let msgs = check_all(&agent, &events).await;
    assert_eq!(stored(&msgs, "c1").0, CANCELLED_RUNNING, "over its budget");
    assert_eq!(stored(&msgs, "c2").0, CANCELLED_RUNNING, "not run");
    fake.assert_no_violations();
}

/// Defect 18: a declined call's duration counted the time the user took to decide.
#[tokio::test]
async fn a_call_that_never_ran_reports_no_running_time() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call("c1", "guarded", json!({}))]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let agent = agent(&fake, true, guarded_and_free(&probe));
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("the approval request", asked("c1")).await;
    handle
        .decide("c1", ApprovalDecision::Decline { reason: None })
        .unwrap();
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    let duration = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolFinished { duration, .. } => Some(*duration),
            _ => None,
        })
        .unwrap();
    assert_eq!(duration, Duration::ZERO);
    check_all(&agent, &events).await;
    fake.assert_no_violations();
}
