//! Cancellation per `docs/spec/cancellation.md`: each test is named after the statements it
//! proves (see `docs/spec-coverage.md`). Every scenario runs against the fake OpenAI-compatible
//! server, which checks on each request that every tool call has exactly one result (Y1), and
//! ends with the same memory and event checks (`check_all`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

// The statements with longer proofs, one module per part of the spec.
#[path = "cancellation/execution.rs"]
mod execution;
#[path = "cancellation/state.rs"]
mod state;
#[path = "cancellation/stops.rs"]
mod stops;
#[path = "cancellation/terminal.rs"]
mod terminal;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentry::agent::{AgentEvent, AgentHandle, CancelTarget, REPLY_INTERRUPTED_NOTE, ReActAgent, StopReason};
use agentry::memory::{InMemoryMemory, Memory};
use agentry::message::{ContentBlock, Msg, Role, ToolUseBlock};
use agentry::tool::{
    CANCELLED_BEFORE_START, CANCELLED_RUNNING, CancelOutcome, CancelPhase, CancelReason, DECLINED,
    INTERRUPTED_RESTART, ToolCallState, ToolOptions, Toolkit, declined_text, timed_out_text,
};
use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::probe::{Driver, Probe, finished};
use common::*;
use serde_json::{Value, json};

fn probe_call(id: &str, args: Value) -> Call {
    Call::new(id, "probe", args.to_string())
}

/// A fake server scripted with one tool step and a final answer, and an agent with the probe.
async fn setup(calls: Vec<Call>, parallel: bool) -> (FakeLlm, ReActAgent, Probe) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls(calls));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register(probe.tool("probe")).unwrap();
    let agent = builder(&fake, true, toolkit)
        .parallel_tool_calls(parallel)
        .build()
        .unwrap();
    (fake, agent, probe)
}

/// A reply paused while the model streams two probe calls: `a` with its arguments complete,
/// `b` half sent (`b_result` cut in the middle). The fake answers `then` to the next request.
struct MidStream {
    fake: FakeLlm,
    agent: ReActAgent,
    probe: Probe,
    gate: Gate,
    handle: AgentHandle,
    driver: Driver,
}

async fn two_calls_mid_stream(a_result: &str, b_result: &str, then: Option<Reply>) -> MidStream {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    // Events: role, 2 text pieces, a's header, 2 argument pieces, b's header, 2 argument pieces,
    // finish, usage, [DONE]. Pausing after 8 sends b's first half only.
    fake.push(
        Reply::tool_calls([
            probe_call("a", json!({"result": a_result})),
            Call::new("b", "probe", json!({"result": b_result}).to_string()),
        ])
        .with_text("Let me check.")
        .chunks(2)
        .pause_after(8, gate.clone()),
    );
    if let Some(then) = then {
        fake.push(then);
    }
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register(probe.tool("probe")).unwrap();
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    within("the stream pauses", gate.reached()).await;
    driver
        .wait_for(
            "both calls streaming",
            |e| matches!(e, AgentEvent::Message { msg, last: false } if msg.tool_uses().count() == 2),
        )
        .await;
    MidStream {
        fake,
        agent,
        probe,
        gate,
        handle,
        driver,
    }
}

fn cancelled_running(partial: bool, reason: CancelReason) -> ToolCallState {
    ToolCallState::Cancelled {
        phase: CancelPhase::Running,
        partial,
        reason,
    }
}

fn cancelled_before_start(reason: CancelReason) -> ToolCallState {
    ToolCallState::Cancelled {
        phase: CancelPhase::BeforeStart,
        partial: false,
        reason,
    }
}

#[tokio::test]
async fn x9_p3_p6_without_on_cancel_the_model_is_told_it_may_have_partly_run() {
    let (fake, agent, probe) = setup(vec![probe_call("c", json!({"wait": true}))], false).await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    assert_eq!(
        reply.unwrap().text().as_deref(),
        Some("after the tools"),
        "the reply goes on (P6)"
    );
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING);
    assert!(stored(&memory, "c").1, "a cancelled result is an error (Y2)");
    assert_eq!(
        state_of(&events, "c"),
        cancelled_running(false, CancelReason::User)
    );
    assert_eq!(
        tool_message(&fake, 1, "c"),
        CANCELLED_RUNNING,
        "the next reasoning step sees it (P6)"
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn x7_x6_p4_on_cancel_text_is_the_result_verbatim() {
    let partial = "Cancelled by the user. Partial results:\n- a.txt: 3 matches";
    let (fake, agent, probe) = setup(
        vec![probe_call("c", json!({"wait": true, "partial": partial}))],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, partial);
    assert_eq!(
        state_of(&events, "c"),
        cancelled_running(true, CancelReason::User)
    );
    assert_eq!(probe.on_cancel_runs(), 1);
    assert!(
        probe.state.on_cancel_saw_cancelled.load(Ordering::SeqCst),
        "is_cancelled is set before on_cancel runs (X6)"
    );
    assert_eq!(tool_message(&fake, 1, "c"), partial);
    fake.assert_no_violations();
}

#[tokio::test]
async fn x8_p5_on_cancel_none_or_blank_gives_the_standard_result() {
    for args in [
        json!({"wait": true, "none_on_cancel": true}),
        json!({"wait": true, "partial": "  \n"}),
    ] {
        let (fake, agent, probe) = setup(vec![probe_call("c", args)], false).await;
        let (handle, driver) = Driver::go(&agent);
        probe.started(1).await;
        handle.cancel_call("c");
        let (_, events) = driver.finish().await;
        let memory = check_all(&agent, &events).await;
        assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING);
        assert_eq!(
            state_of(&events, "c"),
            cancelled_running(false, CancelReason::User)
        );
        assert_eq!(probe.on_cancel_runs(), 1);
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn x3_registering_again_replaces_and_clearing_removes() {
    let (fake, agent, probe) = setup(
        vec![probe_call(
            "c",
            json!({"wait": true, "register_twice": true, "partial": "second"}),
        )],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    handle.cancel_call("c");
    let (_, events) = driver.finish().await;
    assert_eq!(stored(&check_all(&agent, &events).await, "c").0, "second");
    assert_eq!(probe.on_cancel_runs(), 1, "the replaced callback never runs");
    fake.assert_no_violations();

    let (fake, agent, probe) = setup(
        vec![probe_call(
            "c",
            json!({"wait": true, "partial": "gone", "clear": true}),
        )],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    handle.cancel_call("c");
    let (_, events) = driver.finish().await;
    assert_eq!(
        stored(&check_all(&agent, &events).await, "c").0,
        CANCELLED_RUNNING
    );
    assert_eq!(probe.on_cancel_runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn x4_r1_two_parallel_calls_of_one_tool_have_their_own_slots() {
    let (fake, agent, probe) = setup(
        vec![
            probe_call("one", json!({"wait": true, "partial": "one partial"})),
            probe_call("two", json!({"wait": true, "partial": "two partial"})),
        ],
        true,
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(2).await;
    assert_eq!(handle.cancel_call("two"), CancelOutcome::Cancelled);
    driver.wait_for("two finished", finished("two")).await;
    // One permit for each waiting body: "one" completes, "two"'s late result is discarded.
    probe.release();
    probe.release();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        stored(&memory, "one").0,
        "FINAL",
        "the sibling runs to its own end (R1)"
    );
    assert_eq!(state_of(&events, "one"), ToolCallState::Completed);
    assert_eq!(stored(&memory, "two").0, "two partial");
    assert_eq!(
        probe.on_cancel_runs(),
        1,
        "the first call's callback is never invoked (X4)"
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn x5_on_cancel_never_runs_on_completion_failure_or_before_start() {
    let (fake, agent, probe) = setup(
        vec![
            probe_call("done", json!({"partial": "x"})),
            probe_call("failed", json!({"partial": "x", "fail": "boom"})),
            probe_call("running", json!({"wait": true})),
            probe_call("queued", json!({"partial": "x"})),
        ],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(3).await;
    assert_eq!(handle.cancel_call("queued"), CancelOutcome::Cancelled);
    probe.release();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(state_of(&events, "done"), ToolCallState::Completed);
    assert_eq!(state_of(&events, "failed"), ToolCallState::Failed);
    assert_eq!(stored(&memory, "failed").0, "Error: boom");
    assert_eq!(state_of(&events, "running"), ToolCallState::Completed);
    assert_eq!(
        state_of(&events, "queued"),
        cancelled_before_start(CancelReason::User)
    );
    assert_eq!(probe.on_cancel_runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn x11_x12_y5_results_after_cancel_are_ignored() {
    let (fake, agent, probe) = setup(
        vec![probe_call(
            "c",
            json!({"wait": true, "result": "LATE RESULT", "chunks": ["early chunk"]}),
        )],
        false,
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(1).await;
    driver
        .wait_for("the early chunk", |e| {
            matches!(e, AgentEvent::Message { msg, last: false } if msg.tool_results().any(|r| r.text() == "early chunk"))
        })
        .await;
    handle.cancel_call("c");
    probe.release();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING);
    // The late result is nowhere a result can be: printed results, stored results, requests.
    let printed_results: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Message { msg, .. } => Some(msg.tool_results().map(|r| r.text()).collect::<String>()),
            _ => None,
        })
        .collect();
    assert!(
        printed_results.iter().all(|r| !r.contains("LATE RESULT")),
        "{printed_results:?}"
    );
    assert!(
        memory
            .iter()
            .flat_map(Msg::tool_results)
            .all(|r| !r.text().contains("LATE RESULT"))
    );
    assert!(!tool_message(&fake, 1, "c").contains("LATE RESULT"));
    // X12: the chunk streamed before the cancel stays in the printed stream, not in the result.
    assert!(printed_results.iter().any(|r| r == "early chunk"));
    assert_ne!(stored(&memory, "c").0, "early chunk");
    assert!(!tool_message(&fake, 1, "c").contains("early chunk"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn x13_reports_are_progress_events_never_results() {
    let (fake, agent, _probe) = setup(vec![probe_call("c", json!({"reports": 2}))], false).await;
    let driver = Driver::new(agent.start_reply(Msg::user("go")));
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    let reports: Vec<(Option<String>, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id, id, message, ..
            } if call_id == "c" => Some((id.clone(), message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reports,
        [
            (Some("p".to_owned()), "working".to_owned()),
            (Some("p".to_owned()), "working".to_owned()),
            (None, "almost done".to_owned())
        ]
    );
    assert_eq!(stored(&memory, "c").0, "FINAL");
    assert!(!tool_message(&fake, 1, "c").contains("working"));
    fake.assert_no_violations();
}

/// What `tracing` logs on this thread while the guard lives (a current-thread test runtime runs
/// the agent's loop here).
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logged = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logged.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn x10_on_cancel_over_budget_or_panicking_gives_the_standard_result() {
    // A panic can take a while to unwind (a backtrace is captured under RUST_BACKTRACE): it
    // gets a budget it cannot run over.
    for (args, budget, warning) in [
        (
            json!({"wait": true, "block_on_cancel": true}),
            Duration::from_millis(50),
            "on_cancel ran over its budget; the standard cancelled result is used",
        ),
        (
            json!({"wait": true, "panic_on_cancel": true}),
            Duration::from_secs(10),
            "on_cancel panicked; the standard cancelled result is used",
        ),
    ] {
        let logged = Logged::default();
        let _capture = logged.capture();
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([probe_call("c", args.clone())]));
        fake.push(Reply::text("after the tools"));
        let probe = Probe::new();
        let toolkit = Toolkit::new();
        toolkit.register(probe.tool("probe")).unwrap();
        let agent = builder(&fake, true, toolkit)
            .on_cancel_budget(budget)
            .build()
            .unwrap();
        let (handle, driver) = Driver::go(&agent);
        probe.started(1).await;
        handle.cancel_call("c");
        let (_, events) = driver.finish().await;
        // The blocked callback can only return after this point: its "late" text is discarded.
        probe.unblock_on_cancel();
        let memory = check_all(&agent, &events).await;
        assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING, "{args}");
        assert_eq!(
            state_of(&events, "c"),
            cancelled_running(false, CancelReason::User)
        );
        assert_eq!(probe.on_cancel_runs(), 1);
        let log = logged.text();
        assert!(log.contains(warning), "the warning is logged: {log}");
        assert!(log.contains("WARN"), "{log}");
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn c1_cancel_returns_without_awaiting_on_cancel() {
    for reply in [false, true] {
        let (fake, agent, probe) = setup(
            vec![probe_call("c", json!({"wait": true, "block_on_cancel": true}))],
            false,
        )
        .await;
        let (handle, driver) = Driver::go(&agent);
        probe.started(1).await;
        // on_cancel blocks until unblocked below: neither cancel may wait for it.
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || match reply {
                false => handle.cancel_call("c"),
                true => handle.cancel_reply(),
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("the cancel (reply: {reply}) waited for on_cancel"))
        .unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled);
        let (_, events) = driver.finish().await;
        probe.unblock_on_cancel();
        check_all(&agent, &events).await;
        fake.assert_no_violations();
    }
}

/// R5's switch: with the note turned off, the next reply's request has no interrupted note.
#[tokio::test]
async fn r5_the_interrupted_note_can_be_turned_off() {
    for note in [true, false] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([probe_call("c", json!({"wait": true}))]));
        let probe = Probe::new();
        let toolkit = Toolkit::new();
        toolkit.register(probe.tool("probe")).unwrap();
        let agent = builder(&fake, true, toolkit)
            .interrupted_note(note)
            .build()
            .unwrap();
        let (handle, driver) = Driver::go(&agent);
        probe.started(1).await;
        assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
        let _ = driver.finish().await;
        fake.push(Reply::text("fresh"));
        within("the next reply", agent.reply(Msg::user("again")))
            .await
            .unwrap();
        let has_note = wire_messages(&fake, 1)
            .iter()
            .any(|m| m["content"] == REPLY_INTERRUPTED_NOTE);
        assert_eq!(has_note, note, "interrupted_note({note})");
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn c2_c7_cancelling_twice_has_no_second_effect_and_is_announced_first() {
    let (fake, agent, probe) = setup(
        vec![probe_call("c", json!({"wait": true, "partial": "p"}))],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    assert_eq!(handle.cancel_call("c"), CancelOutcome::AlreadyCancelled);
    let (_, events) = driver.finish().await;
    assert_eq!(
        handle.cancel_call("c"),
        CancelOutcome::AlreadyCancelled,
        "also after the reply"
    );
    check_all(&agent, &events).await;
    assert_eq!(probe.on_cancel_runs(), 1);
    let requested: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, AgentEvent::CancelRequested { target: CancelTarget::Call(id), .. } if id == "c"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(requested.len(), 1, "one CancelRequested");
    let finished_at = events.iter().position(finished("c")).unwrap();
    assert!(
        requested[0] < finished_at,
        "CancelRequested comes before ToolFinished (C7)"
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn c3_c4_c5_cancelling_finished_or_unknown_calls_changes_nothing() {
    let (fake, agent, _probe) = setup(
        vec![
            probe_call("ok", json!({})),
            probe_call("bad", json!({"fail": "no"})),
        ],
        false,
    )
    .await;
    let handle = agent.handle();
    assert_eq!(
        handle.cancel_reply(),
        CancelOutcome::AlreadyFinished(None),
        "no reply runs (C5)"
    );
    let mut events = agent.subscribe();
    within("the reply", agent.reply(Msg::user("go"))).await.unwrap();
    let events = drain(&mut events);
    let before = check_all(&agent, &events).await;
    assert_eq!(
        handle.cancel_call("ok"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed))
    );
    assert_eq!(
        handle.cancel_call("bad"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::Failed))
    );
    assert_eq!(handle.cancel_call("nope"), CancelOutcome::NotFound, "C4");
    assert_eq!(handle.cancel_reply(), CancelOutcome::AlreadyFinished(None));
    assert_eq!(consistent_memory(&agent).await, before, "memory unchanged (C3)");
    fake.assert_no_violations();
}

#[tokio::test]
async fn c6_a_call_cancel_spares_the_reply_and_a_reply_cancel_reaches_every_call() {
    // A per-call cancel: the second call and the reply go on.
    let (fake, agent, probe) = setup(
        vec![
            probe_call("first", json!({"wait": true})),
            probe_call("second", json!({})),
        ],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    handle.cancel_call("first");
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("after the tools"));
    assert_eq!(
        state_of(&events, "second"),
        ToolCallState::Completed,
        "R6: later calls run as usual"
    );
    check_all(&agent, &events).await;
    fake.assert_no_violations();

    // A reply cancel: every running call is cancelled with reason Reply.
    let (fake, agent, probe) = setup(
        vec![
            probe_call("a", json!({"wait": true})),
            probe_call("b", json!({"wait": true})),
        ],
        true,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(2).await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    assert_eq!(handle.cancel_reply(), CancelOutcome::AlreadyCancelled);
    let (_, events) = driver.finish().await;
    for id in ["a", "b"] {
        assert_eq!(
            state_of(&events, id),
            cancelled_running(false, CancelReason::Reply)
        );
    }
    check_all(&agent, &events).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn p1_r6_cancel_while_queued_never_runs_the_body() {
    let (fake, agent, probe) = setup(
        vec![
            probe_call("first", json!({"wait": true})),
            probe_call("second", json!({"partial": "x"})),
        ],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    // The queued call is closed at once; its result follows the running one's, in call order.
    assert_eq!(handle.cancel_call("second"), CancelOutcome::Cancelled);
    probe.release();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(probe.runs(), 1, "the queued body never ran");
    assert_eq!(stored(&memory, "second").0, CANCELLED_BEFORE_START);
    assert_eq!(
        state_of(&events, "second"),
        cancelled_before_start(CancelReason::User)
    );
    assert_eq!(
        state_of(&events, "first"),
        ToolCallState::Completed,
        "R6: earlier calls are not touched"
    );
    assert_eq!(probe.on_cancel_runs(), 0);
    fake.assert_no_violations();
}

#[test]
fn p7_texts_are_pairwise_different_and_only_running_ones_may_have_partly_run() {
    let texts = [
        declined_text(None),
        declined_text(Some("no")),
        CANCELLED_BEFORE_START.to_owned(),
        CANCELLED_RUNNING.to_owned(),
        timed_out_text(Duration::from_secs(5), None),
        INTERRUPTED_RESTART.to_owned(),
    ];
    for (i, a) in texts.iter().enumerate() {
        for b in &texts[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert!(texts[0].starts_with(DECLINED));
    for never_ran in &texts[..3] {
        assert!(!never_ran.contains("may have partly run"), "{never_ran}");
    }
    for ran in &texts[3..] {
        assert!(ran.contains("may have partly run"), "{ran}");
    }
}

#[tokio::test]
async fn r2_r4_r5_cancel_reply_stops_every_call_in_its_phase_and_no_model_request_follows() {
    let (fake, agent, probe) = setup(
        vec![
            probe_call("quick", json!({"result": "quick result"})),
            probe_call("slow", json!({"wait": true, "partial": "slow partial"})),
            probe_call("plain", json!({"wait": true})),
        ],
        true,
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(3).await;
    driver.wait_for("quick finished", finished("quick")).await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    let reply = reply.unwrap();
    assert_eq!(reply.metadata["interrupted"], true);
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        stored(&memory, "quick").0,
        "quick result",
        "terminal siblings keep their results"
    );
    assert_eq!(stored(&memory, "slow").0, "slow partial");
    assert_eq!(stored(&memory, "plain").0, CANCELLED_RUNNING);
    assert_eq!(
        state_of(&events, "slow"),
        cancelled_running(true, CancelReason::Reply)
    );
    assert!(matches!(
        events.last(),
        Some(AgentEvent::ReplyFinished {
            stop_reason: StopReason::Cancelled,
            ..
        })
    ));
    assert_eq!(fake.request_count(), 1, "no model request after the cancel (R4)");
    assert_eq!(
        memory.last().unwrap().text().as_deref(),
        Some(REPLY_INTERRUPTED_NOTE)
    );
    assert_eq!(memory.last().unwrap().role, Role::User);

    // R5: the next reply's first request carries the note right after the interrupted reply.
    fake.assert_no_violations();
    fake.push(Reply::text("fresh answer"));
    let next = within("the reply", agent.reply(Msg::user("again"))).await;
    // The scripted "after the tools" was never consumed, so it answers this request.
    assert_eq!(next.unwrap().text().as_deref(), Some("after the tools"));
    let messages = wire_messages(&fake, 1);
    let note = messages
        .iter()
        .position(|m| m["content"] == REPLY_INTERRUPTED_NOTE)
        .unwrap();
    assert_eq!(messages[note]["role"], "user");
    assert_eq!(
        messages[note - 1]["role"],
        "tool",
        "right after the interrupted reply's messages"
    );
    assert_eq!(messages[note + 1]["content"], "again");
    fake.assert_no_violations();
}

#[tokio::test]
async fn r3_cancel_while_the_model_streams_keeps_the_text_and_the_complete_calls() {
    let MidStream {
        fake,
        agent,
        probe,
        gate,
        handle,
        driver,
    } = two_calls_mid_stream("never", "never either", None).await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    let assistant = memory.iter().find(|m| m.role == Role::Assistant).unwrap();
    assert_eq!(
        assistant.text().as_deref(),
        Some("Let me check."),
        "partial text is kept"
    );
    let calls: Vec<&ToolUseBlock> = assistant.tool_uses().collect();
    assert_eq!(calls.len(), 1, "the call with incomplete arguments is removed");
    assert_eq!(calls[0].id, "a");
    assert_eq!(calls[0].input, json!({"result": "never"}));
    assert_eq!(stored(&memory, "a").0, CANCELLED_BEFORE_START);
    assert_eq!(
        state_of(&events, "a"),
        cancelled_before_start(CancelReason::Reply)
    );
    assert_eq!(probe.runs(), 0);
    assert_eq!(
        reply.unwrap().id,
        assistant.id,
        "the reply is the interrupted message"
    );
    assert_eq!(fake.request_count(), 1);
    gate.open();
    until("the stream was dropped", Duration::from_millis(5), || {
        fake.disconnects() > 0
    })
    .await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn t1_t2_a_timed_out_call_is_stopped_and_the_reply_goes_on() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("t", "slow", r#"{"wait": true}"#)]));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("slow"),
            ToolOptions::new().timeout(Duration::from_millis(30)),
        )
        .unwrap();
    let agent = agent(&fake, true, toolkit);
    let (handle, driver) = Driver::go(&agent);
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("after the tools"));
    let memory = check_all(&agent, &events).await;
    assert_eq!(state_of(&events, "t"), ToolCallState::TimedOut { partial: false });
    assert_eq!(
        stored(&memory, "t").0,
        timed_out_text(Duration::from_millis(30), None)
    );
    assert_eq!(
        handle.cancel_call("t"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::TimedOut { partial: false })),
        "C3 for a timed-out call"
    );
    fake.assert_no_violations();
}

/// S2: completion and cancel released together, 1 000 times: exactly one of them wins, once.
#[tokio::test]
async fn y4_a_dangling_call_in_memory_is_closed_before_the_first_request() {
    let memory = InMemoryMemory::new();
    memory
        .add(vec![
            Msg::user("earlier"),
            Msg::new(
                "Friday",
                Role::Assistant,
                vec![ContentBlock::ToolUse(ToolUseBlock {
                    id: "lost".into(),
                    name: "probe".into(),
                    input: json!({}),
                    raw_input: None,
                })],
            ),
        ])
        .await
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("recovered"));
    let agent = builder(&fake, true, Toolkit::new())
        .memory(memory)
        .build()
        .unwrap();
    within("the reply", agent.reply(Msg::user("hello again")))
        .await
        .unwrap();
    assert_eq!(tool_message(&fake, 0, "lost"), INTERRUPTED_RESTART);
    let msgs = consistent_memory(&agent).await;
    assert_eq!(stored(&msgs, "lost").2["tool_call"]["reason"], "restart");
    fake.assert_no_violations();
}
