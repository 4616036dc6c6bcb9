//! How calls stop and what is kept of it: C4, C7, R7, T1, T3, T4, Y2, Y3, and the seed's own case
//! (cancelling running calls approved by the user and automatically, both with `on_cancel`).

use std::time::Duration;

use agentry::agent::{AgentEvent, CancelTarget, ReActAgent};
use agentry::mcp::{MCP_DEFAULT_TIMEOUT, MCP_MAX_TIMEOUT, McpClient, McpToolOptions};
use agentry::message::Msg;
use agentry::tool::{
    ApprovalDecision, CancelOutcome, CancelReason, FunctionTool, ToolCallState, ToolOptions, Toolkit,
    UserAction, timed_out_text,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::json;

use super::common::probe::{Driver, Probe, asked, finished};
use super::common::scripted::ScriptedModel;
use super::common::*;
use super::terminal::{TERMINAL_CALLS, every_terminal_state, push_terminal_calls, terminal_expected};
use super::{MidStream, cancelled_running, probe_call, setup, two_calls_mid_stream};

/// C4: while the model still streams its answer, its calls are not registered: cancelling a
/// call whose arguments are complete, or still streaming, answers `NotFound` and changes
/// nothing; both run normally once the answer is complete.
#[tokio::test]
async fn c4_cancelling_a_call_the_model_still_streams_is_not_found() {
    let MidStream {
        fake,
        agent,
        probe,
        gate,
        handle,
        driver,
    } = two_calls_mid_stream("a ran", "b ran", Some(Reply::text("after the tools"))).await;
    assert_eq!(
        handle.cancel_call("a"),
        CancelOutcome::NotFound,
        "complete arguments"
    );
    assert_eq!(
        handle.cancel_call("b"),
        CancelOutcome::NotFound,
        "arguments still streaming"
    );
    gate.open();
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("after the tools"));
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "a").0, "a ran");
    assert_eq!(stored(&memory, "b").0, "b ran");
    assert_eq!(probe.runs(), 2);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::CancelRequested { .. })),
        "no side effect"
    );
    fake.assert_no_violations();
}

/// C7 for a reply cancel: `CancelRequested{Reply}` first, then each unfinished call's own
/// `CancelRequested` (reason `Reply`), each before that call's `ToolFinished`; one of each.
/// Sequentially (one running, one queued) and in parallel (two running).
#[tokio::test]
async fn c7_a_reply_cancel_is_announced_before_each_call_finishes() {
    for parallel in [false, true] {
        let (fake, agent, probe) = setup(
            vec![
                probe_call("a", json!({"wait": true, "partial": "a partial"})),
                probe_call("b", json!({"wait": true})),
            ],
            parallel,
        )
        .await;
        let (handle, driver) = Driver::go(&agent);
        probe.started(if parallel { 2 } else { 1 }).await;
        assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
        let (_, events) = driver.finish().await;
        check_all(&agent, &events).await;
        let positions = |wanted: &dyn Fn(&AgentEvent) -> bool| -> Vec<usize> {
            events
                .iter()
                .enumerate()
                .filter(|(_, e)| wanted(e))
                .map(|(i, _)| i)
                .collect()
        };
        let reply = positions(&|e| {
            matches!(
                e,
                AgentEvent::CancelRequested {
                    target: CancelTarget::Reply,
                    reason: CancelReason::Reply,
                    ..
                }
            )
        });
        assert_eq!(reply.len(), 1, "parallel={parallel}: one reply CancelRequested");
        for id in ["a", "b"] {
            let requested = positions(
                &|e| matches!(e, AgentEvent::CancelRequested { target: CancelTarget::Call(c), reason: CancelReason::Reply, .. } if c == id),
            );
            let finished_at = positions(&|e| finished(id)(e));
            assert_eq!(requested.len(), 1, "parallel={parallel}, {id}: {events:#?}");
            assert_eq!(finished_at.len(), 1, "parallel={parallel}, {id}");
            assert!(
                reply[0] < requested[0] && requested[0] < finished_at[0],
                "parallel={parallel}, {id}: reply {reply:?}, call {requested:?}, finished {finished_at:?}"
            );
        }
        fake.assert_no_violations();
    }
}

/// The in-process model scripted with [`TERMINAL_CALLS`], then a final answer.
fn terminal_script() -> ScriptedModel {
    let model = ScriptedModel::new();
    model.push_calls(&TERMINAL_CALLS.map(|(id, tool, args)| (id, tool, serde_json::from_str(args).unwrap())));
    model.push_text("after the tools");
    model
}

/// R7: the post-acting hooks run once for every call, whatever its terminal state: completed,
/// failed, declined, timed out, cancelled while running (with and without a partial result)
/// and cancelled before it started; each with its state.
#[tokio::test]
async fn r7_post_acting_hooks_run_for_every_terminal_state() {
    let model = terminal_script();
    let run = every_terminal_state(|toolkit| model.builder(toolkit)).await;
    let expected: Vec<(String, ToolCallState)> = terminal_expected()
        .into_iter()
        .map(|(id, state, ..)| (id.to_owned(), state))
        .collect();
    assert_eq!(run.hooks, expected);
    check_all(&run.agent, &run.events).await;
    model.assert_no_violations();
}

/// Y2: what the model receives for each terminal state (the in-process model gets the results
/// as the provider would send them, with `is_error`): content and error flag per the table,
/// including cancelled before start and cancelled with a partial result.
#[tokio::test]
async fn y2_each_terminal_state_reaches_the_model_with_its_text_and_error_flag() {
    let model = terminal_script();
    let run = every_terminal_state(|toolkit| model.builder(toolkit)).await;
    check_all(&run.agent, &run.events).await;
    for (id, state, text, is_error) in terminal_expected() {
        let sent = model.result(1, id);
        assert_eq!(sent.text(), text, "{id}");
        assert_eq!(sent.is_error, is_error, "{id}: {state:?}");
        assert_eq!(state.is_error(), is_error, "{id}");
        assert_eq!(state_of(&run.events, id), state, "{id}");
    }
    model.assert_no_violations();
}

/// Y3: the stored record of each call keeps its state, phase, partial flag, reason, decision
/// source and timestamps; the decision source is `user`, `auto` or `session_grant`.
#[tokio::test]
async fn y3_stored_records_keep_state_details_and_the_decision_source() {
    let fake = FakeLlm::start().await;
    push_terminal_calls(&fake);
    let run = every_terminal_state(|toolkit| builder(&fake, true, toolkit)).await;
    let memory = check_all(&run.agent, &run.events).await;
    for (id, state, ..) in terminal_expected() {
        let record = stored(&memory, id).2["tool_call"].clone();
        assert_eq!(record["state"], state.name(), "{id}");
        assert!(
            record["started_at"].is_string() && record["finished_at"].is_string(),
            "{id}: {record}"
        );
        let (phase, partial, reason) = match &state {
            ToolCallState::Cancelled {
                phase,
                partial,
                reason,
            } => (json!(phase), json!(partial), json!(reason)),
            ToolCallState::TimedOut { partial } => (json!(null), json!(partial), json!(null)),
            ToolCallState::Declined { reason } => (json!(null), json!(null), json!(reason)),
            _ => (json!(null), json!(null), json!(null)),
        };
        assert_eq!(record.get("phase").cloned().unwrap_or(json!(null)), phase, "{id}");
        assert_eq!(
            record.get("partial").cloned().unwrap_or(json!(null)),
            partial,
            "{id}"
        );
        assert_eq!(
            record.get("reason").cloned().unwrap_or(json!(null)),
            reason,
            "{id}"
        );
        let decision = if id == "declined" {
            json!("user")
        } else {
            json!(null)
        };
        assert_eq!(
            record.get("decision").cloned().unwrap_or(json!(null)),
            decision,
            "{id}"
        );
    }
    assert_eq!(stored(&memory, "partial").2["tool_call"]["phase"], "running");
    assert_eq!(stored(&memory, "queued").2["tool_call"]["phase"], "before_start");
    fake.assert_no_violations();

    // Automatic approval, then a session grant given by the user and used by a later call.
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("auto", "auto", "{}"),
        Call::new("first", "guarded", r#"{"path": "a"}"#),
    ]));
    fake.push(Reply::tool_calls([Call::new(
        "second",
        "guarded",
        r#"{"path": "a"}"#,
    )]));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("auto"),
            ToolOptions::new().require_approval(true).auto_approve(true),
        )
        .unwrap();
    toolkit
        .register_with(probe.tool("guarded"), ToolOptions::new().require_approval(true))
        .unwrap();
    // The same call in a later round, run again: the grant is what is tested here.
    let agent = builder(&fake, true, toolkit)
        .auto_approve_tools(true)
        .answer_repeated_calls(false)
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("first asked", asked("first")).await;
    handle
        .decide("first", ApprovalDecision::ApproveForSession)
        .unwrap();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    for (id, source) in [("auto", "auto"), ("first", "user"), ("second", "session_grant")] {
        let record = &stored(&memory, id).2["tool_call"];
        assert_eq!(record["decision"], source, "{id}");
        assert_eq!(record["state"], "completed", "{id}");
    }
    assert_eq!(probe.runs(), 3);
    fake.assert_no_violations();
}

/// T1, local tools: no execution timeout by default. On a paused clock, a body that takes an
/// hour completes.
#[tokio::test(start_paused = true)]
async fn t1_a_local_tool_has_no_timeout_by_default() {
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "patient",
            "Takes an hour.",
            json!({"type": "object"}),
            move |_, _| {
                let _ = started_tx.send(());
                agentry::tool::once(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    "an hour later"
                })
            },
        ))
        .unwrap();
    let policy = toolkit.policy("patient");
    assert_eq!((policy.timeout, policy.progress_extends_timeout), (None, None));
    let model = ScriptedModel::new();
    model.push_calls(&[("c", "patient", json!({}))]);
    model.push_text("after the tools");
    let agent = model.agent(toolkit);
    let driver = Driver::new(agent.start_reply(Msg::user("go")));
    within("the body starts", started.recv()).await.unwrap();
    // The hour passes at once; a default timeout of any length would fire on the way.
    tokio::time::advance(Duration::from_secs(3601)).await;
    let (_, events) = driver.finish().await;
    assert_eq!(state_of(&events, "c"), ToolCallState::Completed);
    assert_eq!(model.result(1, "c").text(), "an hour later");
    model.assert_no_violations();
}

/// T1, MCP tools: registered with the default options, a server's tools get a 60 s timeout,
/// renewed by progress up to 10 minutes (T4).
#[tokio::test]
async fn t1_an_mcp_tool_has_a_60_s_timeout_by_default() {
    let client = McpClient::connect(super::common::peers::test_server(&[]))
        .await
        .unwrap();
    let toolkit = Toolkit::new();
    let names = toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    assert_eq!(MCP_DEFAULT_TIMEOUT, Duration::from_secs(60));
    assert_eq!(MCP_MAX_TIMEOUT, Duration::from_secs(600));
    for name in &names {
        let policy = toolkit.policy(name);
        assert_eq!(policy.timeout, Some(MCP_DEFAULT_TIMEOUT), "{name}");
        assert_eq!(policy.progress_extends_timeout, Some(MCP_MAX_TIMEOUT), "{name}");
    }
}

/// The events of a reply to "go" on the paused clock, which must end within two virtual hours
/// (they pass at once when nothing else is due).
async fn within_two_virtual_hours(agent: &ReActAgent) -> Vec<AgentEvent> {
    let mut run = agent.start_reply(Msg::user("go"));
    let mut events = Vec::new();
    tokio::time::timeout(Duration::from_secs(7200), async {
        while let Some(event) = run.next_event().await {
            events.push(event);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the reply did not end within 2 virtual hours: {events:#?}"));
    events
}

/// How long call `call` ran, by its `ToolFinished`.
fn ran_for(events: &[AgentEvent], call: &str) -> Duration {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolFinished {
                call_id, duration, ..
            } if call_id == call => Some(*duration),
            _ => None,
        })
        .unwrap()
}

/// T4 on the paused clock, with the MCP defaults (60 s, renewed by progress up to 10 minutes in
/// all): a body that reports every 30 s is stopped by the cap at 600 s, long after the 60 s
/// it would get without progress; one that never reports is stopped at 60 s.
#[tokio::test(start_paused = true)]
async fn t4_progress_renews_the_timeout_up_to_the_default_cap() {
    let toolkit = Toolkit::new();
    let mcp_defaults = || {
        ToolOptions::new()
            .timeout(MCP_DEFAULT_TIMEOUT)
            .progress_extends_timeout(MCP_MAX_TIMEOUT)
    };
    let chatty = FunctionTool::new(
        "chatty",
        "Reports every 30 s.",
        json!({"type": "object"}),
        |_, ctx| {
            agentry::tool::once(async move {
                for _ in 0..1000 {
                    ctx.report("still working", None);
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                "done after 30 000 s"
            })
        },
    );
    let quiet = FunctionTool::new("quiet", "Never reports.", json!({"type": "object"}), |_, _| {
        agentry::tool::once(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "an hour later"
        })
    });
    toolkit.register_with(chatty, mcp_defaults()).unwrap();
    toolkit.register_with(quiet, mcp_defaults()).unwrap();
    let model = ScriptedModel::new();
    model.push_calls(&[("c", "chatty", json!({}))]);
    model.push_calls(&[("q", "quiet", json!({}))]);
    model.push_text("after the tools");
    let agent = model.agent(toolkit);
    let events = within_two_virtual_hours(&agent).await;
    let ran_for = |call: &str| ran_for(&events, call);
    assert_eq!(state_of(&events, "c"), ToolCallState::TimedOut { partial: false });
    assert_eq!(state_of(&events, "q"), ToolCallState::TimedOut { partial: false });
    let (chatty_ran, quiet_ran) = (ran_for("c"), ran_for("q"));
    assert!(
        chatty_ran >= MCP_MAX_TIMEOUT && chatty_ran < MCP_MAX_TIMEOUT + Duration::from_secs(30),
        "the cap stopped the reporting call: {chatty_ran:?}"
    );
    assert!(
        quiet_ran >= MCP_DEFAULT_TIMEOUT && quiet_ran < MCP_DEFAULT_TIMEOUT + Duration::from_secs(1),
        "the idle timeout stopped the silent call: {quiet_ran:?}"
    );
    assert!(
        model.result(1, "c").text().contains("timed out"),
        "{}",
        model.result(1, "c").text()
    );
    model.assert_no_violations();
}

/// T4: the hard cap is a limit of its own. A cap shorter than the timeout stops the call at the
/// cap; a cap with renewal and no timeout at all still stops it (on the paused clock).
#[tokio::test(start_paused = true)]
async fn t4_the_hard_cap_applies_below_the_timeout_and_without_one() {
    let forever = |name: &'static str| {
        FunctionTool::new(
            name,
            "Reports every second, for an hour.",
            json!({"type": "object"}),
            |_, ctx| {
                agentry::tool::once(async move {
                    for _ in 0..3600 {
                        ctx.report("still working", None);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    "an hour later"
                })
            },
        )
    };
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            forever("capped_below"),
            ToolOptions::new()
                .timeout(Duration::from_secs(60))
                .progress_extends_timeout(Duration::from_secs(10)),
        )
        .unwrap();
    toolkit
        .register_with(
            forever("cap_only"),
            ToolOptions::new().progress_extends_timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let model = ScriptedModel::new();
    model.push_calls(&[("below", "capped_below", json!({}))]);
    model.push_calls(&[("only", "cap_only", json!({}))]);
    model.push_text("after the tools");
    let agent = model.agent(toolkit);
    let events = within_two_virtual_hours(&agent).await;
    let ran_for = |call: &str| ran_for(&events, call);
    for (call, cap) in [("below", 10), ("only", 20)] {
        assert_eq!(
            state_of(&events, call),
            ToolCallState::TimedOut { partial: false }
        );
        let ran = ran_for(call);
        assert!(
            ran >= Duration::from_secs(cap) && ran < Duration::from_secs(cap + 1),
            "{call}: stopped by its {cap} s cap, ran {ran:?}"
        );
    }
    assert!(
        model.result(1, "below").text().contains("after 10"),
        "the reported time is the cap's: {}",
        model.result(1, "below").text()
    );
    model.assert_no_violations();
}

/// An agent on an in-process model calling `slow` (timeout 40 ms) once with `args`.
fn slow_agent(args: serde_json::Value, probe: &Probe) -> (ReActAgent, ScriptedModel) {
    let model = ScriptedModel::new();
    model.push_calls(&[("t", "slow", args)]);
    model.push_text("after the tools");
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("slow"),
            ToolOptions::new().timeout(Duration::from_millis(40)),
        )
        .unwrap();
    let agent = model
        .builder(toolkit)
        .on_cancel_budget(Duration::from_secs(60))
        .build()
        .unwrap();
    (agent, model)
}

/// T3, cancel first: on a paused clock the cancel is committed at 0 ms; the call's 40 ms
/// timeout then passes while its `on_cancel` still runs. The call stays cancelled by the user.
#[tokio::test(start_paused = true)]
async fn t3_a_cancel_committed_before_the_timeout_stays_a_cancel() {
    let probe = Probe::new();
    let (agent, model) = slow_agent(json!({"wait": true, "block_on_cancel": true}), &probe);
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    assert_eq!(handle.cancel_call("t"), CancelOutcome::Cancelled);
    probe.on_cancel_entered(1).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    probe.unblock_on_cancel();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        state_of(&events, "t"),
        cancelled_running(true, CancelReason::User)
    );
    assert_eq!(model.result(1, "t").text(), "late");
    assert_eq!(probe.on_cancel_runs(), 1);
    model.assert_no_violations();
}

/// T3, timeout first, cancel while the timed-out call is still stopping (its `on_cancel` runs):
/// the cancel is refused as `AlreadyTimingOut` (defect 5: it used to claim
/// `TimedOut { partial: false }` before `on_cancel` had answered), the call ends `TimedOut` with
/// the partial result `on_cancel` gives, and nothing about the call changes.
#[tokio::test(start_paused = true)]
async fn t3_a_cancel_after_the_timeout_gets_the_timed_out_state() {
    let probe = Probe::new();
    let (agent, model) = slow_agent(json!({"wait": true, "block_on_cancel": true}), &probe);
    let (handle, driver) = Driver::go(&agent);
    probe.started(1).await;
    // Nothing else to do: the paused clock reaches the 40 ms timeout, which runs on_cancel.
    probe.on_cancel_entered(1).await;
    let outcome = handle.cancel_call("t");
    probe.unblock_on_cancel();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    let timed_out = ToolCallState::TimedOut { partial: true };
    assert_eq!(state_of(&events, "t"), timed_out);
    assert_eq!(outcome, CancelOutcome::AlreadyTimingOut);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::CancelRequested { .. }))
    );
    assert_eq!(
        model.result(1, "t").text(),
        timed_out_text(Duration::from_millis(40), Some("late"))
    );
    assert_eq!(probe.on_cancel_runs(), 1);
    model.assert_no_violations();
}

/// T3, timeout first and settled, then a cancel in the same reply (a later call still runs):
/// `AlreadyFinished(TimedOut{partial})` and memory unchanged.
#[tokio::test(start_paused = true)]
async fn t3_a_cancel_after_a_settled_timeout_changes_nothing() {
    let probe = Probe::new();
    let model = ScriptedModel::new();
    model.push_calls(&[
        ("t", "slow", json!({"wait": true, "partial": "half"})),
        ("w", "slow_free", json!({"wait": true})),
    ]);
    model.push_text("after the tools");
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("slow"),
            ToolOptions::new().timeout(Duration::from_millis(40)),
        )
        .unwrap();
    toolkit.register(probe.tool("slow_free")).unwrap();
    let agent = model.agent(toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("t timed out", finished("t")).await;
    probe.started(2).await;
    let before = agent.memory().messages().await.unwrap();
    assert_eq!(
        handle.cancel_call("t"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::TimedOut { partial: true }))
    );
    assert_eq!(agent.memory().messages().await.unwrap(), before);
    // One permit for "w", one for "t"'s body, which still waits during its grace.
    probe.release();
    probe.release();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        model.result(1, "t").text(),
        timed_out_text(Duration::from_millis(40), Some("half"))
    );
    assert_eq!(state_of(&events, "w"), ToolCallState::Completed);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::CancelRequested { .. }))
    );
    model.assert_no_violations();
}

/// The seed's own case: a running call the user approved and a running call approved
/// automatically, each cancelled with an `on_cancel` registered; the model reads each
/// callback's text as the result, and each body was told how it was approved.
#[tokio::test]
async fn seed_cancelling_user_and_auto_approved_running_calls_gives_the_model_their_on_cancel_text() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new(
            "asked",
            "asked",
            r#"{"wait": true, "partial": "Cancelled. Found so far: a.txt"}"#,
        ),
        Call::new(
            "auto",
            "auto",
            r#"{"wait": true, "partial": "Cancelled. Copied 3 of 10 files."}"#,
        ),
    ]));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(probe.tool("asked"), ToolOptions::new().require_approval(true))
        .unwrap();
    toolkit
        .register_with(
            probe.tool("auto"),
            ToolOptions::new().require_approval(true).auto_approve(true),
        )
        .unwrap();
    let agent = builder(&fake, true, toolkit)
        .auto_approve_tools(true)
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("asked")).await;
    handle.decide("asked", ApprovalDecision::Approve).unwrap();
    probe.started(1).await;
    assert_eq!(handle.cancel_call("asked"), CancelOutcome::Cancelled);
    probe.started(2).await;
    assert_eq!(handle.cancel_call("auto"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    for (id, text, decision) in [
        ("asked", "Cancelled. Found so far: a.txt", "user"),
        ("auto", "Cancelled. Copied 3 of 10 files.", "auto"),
    ] {
        assert_eq!(tool_message(&fake, 1, id), text, "{id}: the model reads it");
        assert_eq!(stored(&memory, id).0, text);
        assert_eq!(stored(&memory, id).2["tool_call"]["decision"], decision);
        assert_eq!(
            state_of(&events, id),
            cancelled_running(true, CancelReason::User),
            "{id}"
        );
    }
    assert_eq!(probe.on_cancel_calls(), ["asked", "auto"]);
    assert_eq!(
        *probe.state.user_actions.lock().unwrap(),
        [
            Some(UserAction {
                primary_confirmed: true,
                secondary_confirmed: false,
                automatic: false
            }),
            Some(UserAction {
                primary_confirmed: true,
                secondary_confirmed: false,
                automatic: true
            })
        ]
    );
    fake.assert_no_violations();
}
