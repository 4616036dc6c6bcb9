//! Spec 3.3, the execution context: X1, X2, X4, X6, X11, X14. Tool bodies only observe and send
//! what they saw out through channels; every assertion is made here, by the test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::agent::{AgentEvent, EventStream};
use agentry::memory::{InMemoryMemory, Memory, MemoryError};
use agentry::message::Msg;
use agentry::tool::{
    CANCELLED_RUNNING, CancelOutcome, CancelReason, FunctionTool, ToolCallState, ToolContext, Toolkit,
    spawn_process,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::common::probe::{Driver, Probe, finished};
use super::common::scripted::ScriptedModel;
use super::common::*;
use super::{cancelled_running, probe_call, setup};

/// A tool that hands its context to the test when its body starts, then waits for the cancel.
fn holding_tool(
    name: &str,
    tx: mpsc::UnboundedSender<ToolContext>,
    partial: Option<&'static str>,
) -> FunctionTool {
    FunctionTool::new(
        name,
        "Hands out its context and waits for the cancel.",
        json!({"type": "object"}),
        move |_, ctx| {
            if let Some(text) = partial {
                ctx.set_on_cancel(move || Some(text.to_owned()));
            }
            let _ = tx.send(ctx.clone());
            agentry::tool::once(async move {
                ctx.cancelled().await;
                "stopped"
            })
        },
    )
}

#[tokio::test]
async fn x1_l2_is_cancelled_turns_true_at_the_cancel_and_is_seen_on_other_threads() {
    for reply in [false, true] {
        flag_seen_on_another_thread(reply).await;
    }
}

/// X1, L2 through `cancel_call` or `cancel_reply`.
async fn flag_seen_on_another_thread(reply: bool) {
    let (tx, mut contexts) = mpsc::unbounded_channel();
    let toolkit = Toolkit::new();
    toolkit.register(holding_tool("hold", tx, None)).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "hold", "{}")]));
    fake.push(Reply::text("after the tools"));
    let agent = agent(&fake, true, toolkit);
    let (handle, driver) = Driver::go(&agent);
    let ctx = within("the body starts", contexts.recv()).await.unwrap();
    assert!(!ctx.is_cancelled(), "false when the body starts (X1)");
    assert!(!ctx.cancellation_token().is_cancelled());
    let observed = ctx.clone();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let observer = std::thread::spawn(move || {
        wait.recv().unwrap();
        (
            observed.is_cancelled(),
            observed.cancellation_token().is_cancelled(),
        )
    });
    let outcome = match reply {
        false => handle.cancel_call("c"),
        true => handle.cancel_reply(),
    };
    assert_eq!(outcome, CancelOutcome::Cancelled);
    go.send(()).unwrap();
    assert_eq!(
        observer.join().unwrap(),
        (true, true),
        "visible on another thread once the cancel (reply: {reply}) returned, flag and token together (L2)"
    );
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert!(
        ctx.is_cancelled() && ctx.cancellation_token().is_cancelled(),
        "it never returns to false"
    );
    fake.assert_no_violations();
}

/// X2: a callback registered once the cancel is committed is not the one that runs, and one
/// registered after the end never runs. The test runs on one thread, so nothing of the agent
/// runs between `cancel_call` and the late registration: if the runtime still accepted it, its
/// text would be the result.
#[tokio::test]
async fn x2_on_cancel_registered_after_the_cancel_or_the_end_has_no_effect() {
    let (tx, mut contexts) = mpsc::unbounded_channel();
    let toolkit = Toolkit::new();
    toolkit
        .register(holding_tool("hold", tx, Some("registered by the body")))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "hold", "{}")]));
    fake.push(Reply::text("after the tools"));
    let agent = agent(&fake, true, toolkit);
    let (handle, driver) = Driver::go(&agent);
    let ctx = within("the body starts", contexts.recv()).await.unwrap();
    let late_calls = Arc::new(Mutex::new(Vec::new()));
    let register_late = |ctx: &ToolContext, text: &'static str| {
        let calls = Arc::clone(&late_calls);
        ctx.set_on_cancel(move || {
            calls.lock().unwrap().push(text);
            Some(text.to_owned())
        });
    };
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    register_late(&ctx, "registered after the cancel");
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, "registered by the body");
    assert_eq!(tool_message(&fake, 1, "c"), "registered by the body");

    register_late(&ctx, "registered after the end");
    assert_eq!(handle.cancel_call("c"), CancelOutcome::AlreadyCancelled);
    assert_eq!(consistent_memory(&agent).await, memory, "nothing changed");
    assert!(late_calls.lock().unwrap().is_empty(), "{late_calls:?}");
    fake.assert_no_violations();
}

/// X4: the same tool twice in sequence; the second is cancelled. The first call's callback was
/// released when it completed (the record itself is still held by the running reply), and only
/// the second call's callback runs.
#[tokio::test]
async fn x4_a_second_call_of_the_same_tool_never_runs_the_first_ones_callback() {
    let (fake, agent, probe) = setup(
        vec![
            probe_call("one", json!({"partial": "one partial"})),
            probe_call("two", json!({"wait": true, "partial": "two partial"})),
        ],
        false,
    )
    .await;
    let (handle, driver) = Driver::go(&agent);
    probe.started(2).await;
    assert_eq!(
        probe.callbacks_released(),
        ["one"],
        "the first call's slot was cleared at its end"
    );
    assert_eq!(handle.cancel_call("two"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(probe.on_cancel_calls(), ["two"]);
    assert_eq!(stored(&memory, "one").0, "FINAL");
    assert_eq!(stored(&memory, "two").0, "two partial");
    assert_eq!(
        state_of(&events, "two"),
        cancelled_running(true, CancelReason::User)
    );
    fake.assert_no_violations();
}

/// A memory that notes, at each `add`, which `ToolFinished` events had already been emitted.
struct Watching {
    inner: InMemoryMemory,
    events: Mutex<Option<EventStream>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Watching {
    fn note_events(&self) {
        if let Some(events) = self.events.lock().unwrap().as_mut() {
            for event in std::iter::from_fn(|| events.try_recv()) {
                if let AgentEvent::ToolFinished { call_id, .. } = event {
                    self.log.lock().unwrap().push(format!("finished {call_id}"));
                }
            }
        }
    }
}

#[async_trait]
impl Memory for Watching {
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        self.note_events();
        for msg in &msgs {
            for result in msg.tool_results() {
                self.log.lock().unwrap().push(format!("stored {}", result.id));
            }
        }
        self.inner.add(msgs).await
    }
    async fn messages(&self) -> Result<Vec<Msg>, MemoryError> {
        self.inner.messages().await
    }
    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        self.inner.delete(ids).await
    }
    async fn size(&self) -> Result<usize, MemoryError> {
        self.inner.size().await
    }
    async fn clear(&self) -> Result<(), MemoryError> {
        self.inner.clear().await
    }
}

/// X6 (and L3): a result is in memory before its `ToolFinished` is emitted, so a client that
/// reloads history on the event finds it: sequentially, in a parallel batch (where a quick call
/// ends while its sibling still runs), and for a cancelled call.
#[tokio::test]
async fn x6_the_result_is_in_memory_before_tool_finished() {
    for parallel in [false, true] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([
            probe_call("quick", json!({})),
            probe_call("cancelled", json!({"wait": true, "partial": "p"})),
        ]));
        fake.push(Reply::text("after the tools"));
        let probe = Probe::new();
        let toolkit = Toolkit::new();
        toolkit.register(probe.tool("probe")).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let memory = Arc::new(Watching {
            inner: InMemoryMemory::new(),
            events: Mutex::new(None),
            log: Arc::clone(&log),
        });
        let agent = builder(&fake, true, toolkit)
            .parallel_tool_calls(parallel)
            .memory(memory.clone())
            .build()
            .unwrap();
        *memory.events.lock().unwrap() = Some(agent.subscribe());
        let (handle, mut driver) = Driver::go(&agent);
        probe.started(2).await;
        driver.wait_for("quick finished", finished("quick")).await;
        assert_eq!(handle.cancel_call("cancelled"), CancelOutcome::Cancelled);
        let (_, events) = driver.finish().await;
        check_all(&agent, &events).await;
        memory.note_events();
        let log = log.lock().unwrap().clone();
        for id in ["quick", "cancelled"] {
            let stored_at = log.iter().position(|l| *l == format!("stored {id}"));
            let finished_at = log.iter().position(|l| *l == format!("finished {id}"));
            assert!(
                matches!((stored_at, finished_at), (Some(s), Some(f)) if s < f),
                "parallel={parallel}: {id} must be stored before its ToolFinished: {log:?}"
            );
        }
        fake.assert_no_violations();
    }
}

/// X6: the value `on_cancel` returns is captured once, when it runs: the body changing its
/// buffer afterwards (during its grace) changes nothing the model or memory sees.
#[tokio::test]
async fn x6_the_on_cancel_value_is_captured_once() {
    let (ran_tx, ran_rx) = watch::channel(0usize);
    let ran_seen = ran_rx.clone();
    let (changed_tx, mut changed_rx) = watch::channel(false);
    let ran_tx = Arc::new(ran_tx);
    let changed_tx = Arc::new(changed_tx);
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "buffered",
            "Collects matches into a buffer.",
            json!({"type": "object"}),
            move |_, ctx| {
                let buffer = Arc::new(Mutex::new("3 matches".to_owned()));
                let snapshot = Arc::clone(&buffer);
                let ran = Arc::clone(&ran_tx);
                ctx.set_on_cancel(move || {
                    let text = snapshot.lock().unwrap().clone();
                    ran.send_modify(|n| *n += 1);
                    Some(text)
                });
                let mut ran = ran_rx.clone();
                let changed = Arc::clone(&changed_tx);
                agentry::tool::once(async move {
                    ctx.cancelled().await;
                    let _ = ran.wait_for(|r| *r > 0).await;
                    buffer.lock().unwrap().push_str(" and 4 more");
                    changed.send_replace(true);
                    "FINAL"
                })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "buffered", "{}")]));
    fake.push(Reply::text("after the tools"));
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    driver
        .wait_for("started", |e| matches!(e, AgentEvent::ToolStarted { .. }))
        .await;
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    within("the buffer changed after on_cancel", changed_rx.wait_for(|c| *c))
        .await
        .unwrap();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, "3 matches");
    assert_eq!(tool_message(&fake, 1, "c"), "3 matches");
    assert_eq!(*ran_seen.borrow(), 1, "on_cancel ran once");
    assert_eq!(
        state_of(&events, "c"),
        cancelled_running(true, CancelReason::User)
    );
    fake.assert_no_violations();
}

/// X11: after a cancel the body reports, streams a chunk, and then returns a result, fails or
/// panics; with and without `on_cancel`. None of it reaches an event (during the reply or
/// after), memory, or the model.
#[tokio::test]
async fn x11_nothing_the_body_produces_after_the_cancel_is_kept() {
    for late in ["chunk", "report", "err", "panic"] {
        for partial in [None, Some("kept partial")] {
            let case = format!("late {late}, on_cancel {partial:?}");
            let mut args = json!({"late": late});
            if let Some(text) = partial {
                args["partial"] = json!(text);
            }
            let (fake, agent, probe) = setup(vec![probe_call("c", args)], false).await;
            let mut later = agent.subscribe();
            let (handle, driver) = Driver::go(&agent);
            probe.started(1).await;
            assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled, "{case}");
            probe.late_done(1).await;
            let (_, events) = driver.finish().await;
            let memory = check_all(&agent, &events).await;
            let everything = format!(
                "{events:?}\n{:?}\n{memory:?}\n{:?}",
                drain(&mut later),
                fake.requests()
                    .iter()
                    .map(|r| r.body.to_string())
                    .collect::<Vec<_>>()
            );
            assert!(!everything.contains("LATE"), "{case}: {everything}");
            assert_eq!(
                stored(&memory, "c").0,
                partial.unwrap_or(CANCELLED_RUNNING),
                "{case}"
            );
            assert_eq!(
                state_of(&events, "c"),
                cancelled_running(partial.is_some(), CancelReason::User),
                "{case}"
            );
            fake.assert_no_violations();
        }
    }
}

/// The times a body that ignores its token ticked, and when it was dropped.
#[derive(Default)]
struct Ticks {
    at: Mutex<Vec<tokio::time::Instant>>,
    dropped: Mutex<Option<tokio::time::Instant>>,
}

struct DropTime(Arc<Ticks>, watch::Sender<bool>);

impl Drop for DropTime {
    fn drop(&mut self) {
        *self.0.dropped.lock().unwrap() = Some(tokio::time::Instant::now());
        self.1.send_replace(true);
    }
}

/// X14 and L3, on a paused clock (the model is in-process): a body ignoring its token keeps
/// being polled during the grace after a cancel (it ticks every 100 ms), is dropped when the
/// grace ends and never polled again; the cancelled result is recorded at the cancel, without
/// waiting for the body.
#[tokio::test(start_paused = true)]
async fn x14_l3_the_body_is_polled_during_the_grace_and_dropped_after() {
    const GRACE: Duration = Duration::from_secs(1);
    const TICK: Duration = Duration::from_millis(100);
    let ticks = Arc::new(Ticks::default());
    let (dropped_tx, mut dropped_rx) = watch::channel(false);
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let body_ticks = Arc::clone(&ticks);
    let dropped_tx = Arc::new(Mutex::new(Some(dropped_tx)));
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "stubborn",
            "Ignores its token.",
            json!({"type": "object"}),
            move |_, _ctx| {
                let ticks = Arc::clone(&body_ticks);
                let guard = dropped_tx
                    .lock()
                    .unwrap()
                    .take()
                    .map(|tx| DropTime(Arc::clone(&ticks), tx));
                let _ = started_tx.send(());
                agentry::tool::once(async move {
                    let _guard = guard;
                    loop {
                        tokio::time::sleep(TICK).await;
                        ticks.at.lock().unwrap().push(tokio::time::Instant::now());
                    }
                    #[allow(unreachable_code)]
                    "never"
                })
            },
        ))
        .unwrap();
    let model = ScriptedModel::new();
    model.push_calls(&[("c", "stubborn", json!({}))]);
    model.push_text("after the tools");
    let agent = model.builder(toolkit).cancel_grace(GRACE).build().unwrap();
    let (handle, driver) = Driver::go(&agent);
    within("the body starts", started_rx.recv()).await.unwrap();
    let cancelled_at = tokio::time::Instant::now();
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    assert!(
        tokio::time::Instant::now() < cancelled_at + TICK,
        "L3: the result did not wait for the body"
    );
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING);
    within("the body is dropped", dropped_rx.wait_for(|d| *d))
        .await
        .unwrap();
    let dropped = ticks.dropped.lock().unwrap().unwrap();
    let during_grace = ticks
        .at
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > cancelled_at)
        .count();
    assert!(
        during_grace >= 9,
        "polled during the grace: {during_grace} ticks after the cancel"
    );
    assert!(
        dropped >= cancelled_at + GRACE && dropped < cancelled_at + GRACE + TICK,
        "dropped when the grace ended: {:?} after the cancel",
        dropped - cancelled_at
    );
    // A dropped body is never polled again: its last tick came before the drop.
    let ticks_at_drop = ticks.at.lock().unwrap().len();
    tokio::time::sleep(GRACE).await;
    assert_eq!(ticks.at.lock().unwrap().len(), ticks_at_drop);
    model.assert_no_violations();
}

/// X14: a tool that starts a command through `spawn_process` leaves nothing running after a
/// cancel. The grace is long, so only the kill at the cancel (not the drop after the grace)
/// can make the processes go away in time.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn x14_a_cancel_kills_the_tools_process_group() {
    let (pids_tx, mut pids) = mpsc::unbounded_channel();
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "shell",
            "Runs a shell that starts a long sleep.",
            json!({"type": "object"}),
            move |_, ctx| {
                let pids_tx = pids_tx.clone();
                agentry::tool::once(async move {
                    let mut cmd = tokio::process::Command::new("sh");
                    cmd.args(["-c", "sleep 1000 & echo $!; wait"])
                        .stdout(std::process::Stdio::piped());
                    let mut process = spawn_process(&ctx, cmd).map_err(agentry::tool::ToolError::msg)?;
                    let child = process.id();
                    let stdout = process.child_mut().stdout.take();
                    let mut line = String::new();
                    if let Some(stdout) = stdout {
                        use tokio::io::AsyncBufReadExt;
                        let _ = tokio::io::BufReader::new(stdout).read_line(&mut line).await;
                    }
                    let _ = pids_tx.send((child, line.trim().parse::<u32>().ok()));
                    let status = process.wait().await.map_err(agentry::tool::ToolError::msg)?;
                    Ok::<_, agentry::tool::ToolError>(format!("exited: {status}"))
                })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "shell", "{}")]));
    fake.push(Reply::text("after the tools"));
    let agent = builder(&fake, true, toolkit)
        .cancel_grace(Duration::from_secs(600))
        .build()
        .unwrap();
    let (handle, driver) = Driver::go(&agent);
    let (child, grandchild) = within("the shell started", pids.recv()).await.unwrap();
    let (Some(child), Some(grandchild)) = (child, grandchild) else {
        panic!("no pids: {child:?} {grandchild:?}");
    };
    assert!(!process_gone(child) && !process_gone(grandchild));
    assert_eq!(handle.cancel_call("c"), CancelOutcome::Cancelled);
    until("the sleep is killed", Duration::from_millis(10), || {
        process_gone(grandchild)
    })
    .await;
    until("the shell is killed", Duration::from_millis(10), || {
        process_gone(child)
    })
    .await;
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, CANCELLED_RUNNING);
    assert!(matches!(state_of(&events, "c"), ToolCallState::Cancelled { .. }));
    fake.assert_no_violations();
}
