//! Approval per `docs/spec/cancellation.md` 3.2: each test is named after the statements it
//! proves (see `docs/spec-coverage.md`), against the invariant-checking fake server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentry::agent::{AgentEvent, AgentHandle, ApprovalError, ReActAgent, ReActAgentBuilder, SessionGrant};
use agentry::message::Msg;
use agentry::tool::{
    ApprovalDecision, ApprovalRequest, CANCELLED_BEFORE_START, CancelOutcome, CancelPhase, CancelReason,
    NamesakeStrategy, SessionApprovalScope, ToolCallState, ToolOptions, Toolkit, UserAction, declined_text,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::probe::{Driver, Probe, asked, finished};
use common::*;
use serde_json::{Value, json};

fn call(id: &str, tool: &str, args: Value) -> Call {
    Call::new(id, tool, args.to_string())
}

fn guarded() -> ToolOptions {
    ToolOptions::new().require_approval(true)
}

/// A fake server with one tool step and a final answer; a toolkit with the probe as "guarded"
/// (registered with `options`) and as "free" (no approval).
async fn setup(calls: Vec<Call>, options: ToolOptions) -> (FakeLlm, Toolkit, Probe) {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls(calls));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register_with(probe.tool("guarded"), options).unwrap();
    toolkit.register(probe.tool("free")).unwrap();
    (fake, toolkit, probe)
}

fn agent_with(
    fake: &FakeLlm,
    toolkit: Toolkit,
    configure: impl FnOnce(ReActAgentBuilder) -> ReActAgentBuilder,
) -> ReActAgent {
    configure(builder(fake, true, toolkit)).build().unwrap()
}

/// A request function that counts its invocations.
fn counting_request(
    count: &Arc<AtomicUsize>,
) -> impl Fn(&serde_json::Map<String, Value>) -> Result<ApprovalRequest, String> + Send + Sync + 'static {
    let count = Arc::clone(count);
    move |args| {
        count.fetch_add(1, Ordering::SeqCst);
        Ok(ApprovalRequest {
            title: Some("Really?".into()),
            message: format!("The probe will run with {}", Value::Object(args.clone())),
            ..ApprovalRequest::default()
        })
    }
}

#[tokio::test]
async fn a1_a2_a5_only_tools_requiring_approval_are_asked_and_their_request_built_once() {
    let guarded_requests = Arc::new(AtomicUsize::new(0));
    let free_requests = Arc::new(AtomicUsize::new(0));
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("f", "free", json!({})),
        call("g", "guarded", json!({})),
    ]));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("guarded"),
            guarded().approval_request(counting_request(&guarded_requests)),
        )
        .unwrap();
    // auto_approve without require_approval is ignored (A2), and no request is built (A5).
    toolkit
        .register_with(
            probe.tool("free"),
            ToolOptions::new()
                .auto_approve(true)
                .approval_request(counting_request(&free_requests)),
        )
        .unwrap();
    let (agent, handle, mut driver) = start(&fake, toolkit);
    let request = driver.wait_for("asked", asked("g")).await;
    match request {
        AgentEvent::ApprovalRequested {
            request, name, input, ..
        } => {
            assert_eq!(request.title.as_deref(), Some("Really?"));
            assert_eq!((name.as_str(), input), ("guarded", json!({})));
        }
        other => panic!("{other:?}"),
    }
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert!(approval_events(&events, "f").is_empty());
    assert_eq!(
        approval_events(&events, "g"),
        [
            "requested automatic=false",
            "resolved Approve automatic=false User"
        ]
    );
    assert_eq!(
        (
            guarded_requests.load(Ordering::SeqCst),
            free_requests.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    assert_eq!(probe.runs(), 2);
    fake.assert_no_violations();
}

fn new_agent(fake: &FakeLlm, toolkit: Toolkit) -> ReActAgent {
    agent_with(fake, toolkit, |b| b)
}

/// The default agent with a reply to "go" running, and its handle.
fn start(fake: &FakeLlm, toolkit: Toolkit) -> (ReActAgent, AgentHandle, Driver) {
    let agent = new_agent(fake, toolkit);
    let (handle, driver) = Driver::go(&agent);
    (agent, handle, driver)
}

#[tokio::test]
async fn a3_a4_a7_auto_approval_needs_both_flags_and_is_announced_without_waiting() {
    for (agent_auto, tool_auto) in [(false, false), (true, false), (false, true), (true, true)] {
        let (fake, toolkit, probe) = setup(
            vec![call("g", "guarded", json!({}))],
            guarded().auto_approve(tool_auto),
        )
        .await;
        let agent = agent_with(&fake, toolkit, |b| b.auto_approve_tools(agent_auto));
        let (handle, mut driver) = Driver::go(&agent);
        if !(agent_auto && tool_auto) {
            driver.wait_for("asked", asked("g")).await;
            handle.decide("g", ApprovalDecision::Approve).unwrap();
        }
        let (_, events) = driver.finish().await;
        check_all(&agent, &events).await;
        let expected = if agent_auto && tool_auto {
            ["requested automatic=true", "resolved Approve automatic=true Auto"]
        } else {
            [
                "requested automatic=false",
                "resolved Approve automatic=false User",
            ]
        };
        assert_eq!(
            approval_events(&events, "g"),
            expected,
            "agent {agent_auto}, tool {tool_auto}"
        );
        assert_eq!(probe.runs(), 1);
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn a3_a13_a_session_deny_grant_comes_before_auto_approval() {
    let (fake, toolkit, probe) = setup(vec![call("g1", "guarded", json!({"result": "a"}))], guarded()).await;
    let agent = agent_with(&fake, toolkit.clone(), |b| b.auto_approve_tools(true));
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g1")).await;
    handle
        .decide(
            "g1",
            ApprovalDecision::DeclineForSession {
                reason: Some("never".into()),
            },
        )
        .unwrap();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;

    // Now the tool may be auto-approved, but the session's deny grant is checked first.
    toolkit
        .register_with(
            probe.tool("guarded"),
            guarded().auto_approve(true).namesake(NamesakeStrategy::Override),
        )
        .unwrap();
    fake.push(Reply::tool_calls([
        call("g2", "guarded", json!({"result": "a"})),
        call("g3", "guarded", json!({"result": "b"})),
    ]));
    fake.push(Reply::text("done"));
    let driver = Driver::new(agent.start_reply(Msg::user("again")));
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        approval_events(&events, "g2"),
        [
            "requested automatic=true",
            "resolved DeclineForSession { reason: Some(\"never\") } automatic=true SessionGrant"
        ]
    );
    assert_eq!(stored(&memory, "g2").0, declined_text(Some("never")));
    assert_eq!(
        state_of(&events, "g3"),
        ToolCallState::Completed,
        "other arguments: auto-approved"
    );
    assert_eq!(probe.runs(), 1, "only g3 ran");
    fake.assert_no_violations();
}

#[tokio::test]
async fn a12_approve_for_session_skips_the_prompt_for_the_same_arguments_only() {
    let (fake, toolkit, probe) = setup(vec![call("g1", "guarded", json!({"result": "a"}))], guarded()).await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g1")).await;
    handle.decide("g1", ApprovalDecision::ApproveForSession).unwrap();
    let _ = driver.finish().await;

    fake.push(Reply::tool_calls([
        call("g2", "guarded", json!({"result": "a"})),
        call("g3", "guarded", json!({"result": "b"})),
    ]));
    fake.push(Reply::text("done"));
    let mut driver = Driver::new(agent.start_reply(Msg::user("again")));
    driver.wait_for("asked for other arguments", asked("g3")).await;
    handle.decide("g3", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        approval_events(&events, "g2"),
        [
            "requested automatic=true",
            "resolved Approve automatic=true SessionGrant"
        ]
    );
    assert_eq!(probe.runs(), 3);
    fake.assert_no_violations();

    // With the AnyArguments scope, the grant covers every call of the tool.
    let (fake, toolkit, probe) = setup(
        vec![call("h1", "guarded", json!({"result": "a"}))],
        guarded().session_scope(SessionApprovalScope::AnyArguments),
    )
    .await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("h1")).await;
    handle.decide("h1", ApprovalDecision::ApproveForSession).unwrap();
    let _ = driver.finish().await;
    fake.push(Reply::tool_calls([call(
        "h2",
        "guarded",
        json!({"result": "other"}),
    )]));
    fake.push(Reply::text("done"));
    let (_, events) = Driver::new(agent.start_reply(Msg::user("again"))).finish().await;
    check_all(&agent, &events).await;
    assert_eq!(state_of(&events, "h2"), ToolCallState::Completed);
    assert_eq!(probe.runs(), 2);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a14_grants_belong_to_one_agent_session() {
    let (fake, toolkit, _probe) = setup(vec![call("g1", "guarded", json!({}))], guarded()).await;
    let first = new_agent(&fake, toolkit.clone());
    let handle = first.handle();
    let mut driver = Driver::new(first.start_reply(Msg::user("go")));
    driver.wait_for("asked", asked("g1")).await;
    handle.decide("g1", ApprovalDecision::ApproveForSession).unwrap();
    let _ = driver.finish().await;

    // Another agent (another session) sharing the toolkit is asked again.
    fake.push(Reply::tool_calls([call("g2", "guarded", json!({}))]));
    fake.push(Reply::text("done"));
    let second = new_agent(&fake, toolkit);
    let other = second.handle();
    let mut driver = Driver::new(second.start_reply(Msg::user("go")));
    driver.wait_for("asked in the other session", asked("g2")).await;
    other.decide("g2", ApprovalDecision::Approve).unwrap();
    let _ = driver.finish().await;

    // Dropping the grants asks again.
    first.clear_session_grants();
    fake.push(Reply::tool_calls([call("g3", "guarded", json!({}))]));
    fake.push(Reply::text("done"));
    let mut driver = Driver::new(first.start_reply(Msg::user("again")));
    driver.wait_for("asked after clearing", asked("g3")).await;
    handle.decide("g3", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&first, &events).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn a14_grants_read_from_one_agent_hold_in_the_agent_that_continues_its_session() {
    let (fake, toolkit, probe) = setup(vec![call("g1", "guarded", json!({"result": "a"}))], guarded()).await;
    let first = new_agent(&fake, toolkit.clone());
    let handle = first.handle();
    let mut driver = Driver::new(first.start_reply(Msg::user("go")));
    driver.wait_for("asked", asked("g1")).await;
    handle
        .decide(
            "g1",
            ApprovalDecision::DeclineForSession {
                reason: Some("not here".into()),
            },
        )
        .unwrap();
    let _ = driver.finish().await;
    let kept = first.session_grants();
    assert_eq!(kept.len(), 1);
    assert!(
        kept[0].0.starts_with("guarded\u{0}"),
        "tool name, then the arguments: {:?}",
        kept[0].0
    );
    assert_eq!(
        kept[0].1,
        SessionGrant::Deny {
            reason: Some("not here".into())
        }
    );

    // The same session continued by a new agent (a new process): declined without asking.
    let second = new_agent(&fake, toolkit);
    second.restore_session_grants(kept.clone());
    fake.push(Reply::tool_calls([call("g2", "guarded", json!({"result": "a"}))]));
    fake.push(Reply::text("done"));
    let (_, events) = Driver::new(second.start_reply(Msg::user("again"))).finish().await;
    check_all(&second, &events).await;
    assert!(matches!(state_of(&events, "g2"), ToolCallState::Declined { .. }));
    assert_eq!(probe.runs(), 0, "declined both times, never run");

    // Revoked: asked again.
    assert!(second.revoke_session_grant(&kept[0].0));
    assert!(!second.revoke_session_grant(&kept[0].0), "gone");
    assert!(second.session_grants().is_empty());
    fake.push(Reply::tool_calls([call("g3", "guarded", json!({"result": "a"}))]));
    fake.push(Reply::text("done"));
    let other = second.handle();
    let mut driver = Driver::new(second.start_reply(Msg::user("once more")));
    driver.wait_for("asked after the revoke", asked("g3")).await;
    other.decide("g3", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&second, &events).await;
    assert_eq!(probe.runs(), 1);
    fake.assert_no_violations();
}

/// The stored conversation of a process that stopped while its call waited for approval.
async fn stopped_while_asking(agent: &ReActAgent) {
    agent
        .memory()
        .add(vec![
            Msg::user("go"),
            Msg::new(
                "agent",
                agentry::message::Role::Assistant,
                vec![agentry::message::ContentBlock::ToolUse(
                    agentry::message::ToolUseBlock {
                        id: "g1".into(),
                        name: "guarded".into(),
                        input: json!({"result": "done once"}),
                        raw_input: None,
                    },
                )],
            ),
        ])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_resumed_reply_asks_about_a_call_left_waiting_and_runs_it_once_approved() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("after the tool"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register_with(probe.tool("guarded"), guarded()).unwrap();
    let agent = new_agent(&fake, toolkit);
    stopped_while_asking(&agent).await;
    let handle = agent.handle();
    let mut driver = Driver::new(agent.start_resumed_reply());
    driver.wait_for("asked about the waiting call", asked("g1")).await;
    handle.decide("g1", ApprovalDecision::Approve).unwrap();
    let (reply, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("after the tool"));
    assert_eq!(state_of(&events, "g1"), ToolCallState::Completed);
    assert_eq!(probe.runs(), 1, "run once, after the approval");
    let request = &fake.requests()[0].body["messages"];
    let result = request
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(result["content"], "done once", "the model reads the result");
    fake.assert_no_violations();

    // A plain continuation does not run such a call: it is closed as interrupted.
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("noted"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register_with(probe.tool("guarded"), guarded()).unwrap();
    let agent = new_agent(&fake, toolkit);
    stopped_while_asking(&agent).await;
    let (_, events) = Driver::new(agent.start_reply(None)).finish().await;
    check_all(&agent, &events).await;
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a6_a_failing_request_function_asks_generically_and_never_approves() {
    let failing: Vec<ToolOptions> = vec![
        guarded().approval_request(|_| Err("cannot describe".into())),
        guarded().approval_request(|_| panic!("request exploded")),
    ];
    for options in failing {
        let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({"result": "x"}))], options).await;
        let agent = new_agent(&fake, toolkit);
        let (handle, mut driver) = Driver::go(&agent);
        let request = driver.wait_for("asked", asked("g")).await;
        let AgentEvent::ApprovalRequested {
            request, automatic, ..
        } = request
        else {
            panic!()
        };
        assert!(!automatic);
        assert_eq!(request.title.as_deref(), Some("Run guarded?"));
        assert!(
            request.message.contains("\"result\": \"x\""),
            "{}",
            request.message
        );
        assert_eq!(probe.runs(), 0, "nothing runs before the decision");
        handle
            .decide("g", ApprovalDecision::Decline { reason: None })
            .unwrap();
        let (_, events) = driver.finish().await;
        check_all(&agent, &events).await;
        assert_eq!(probe.runs(), 0);
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn a8_approved_bodies_get_a_confirmed_user_action() {
    let (fake, toolkit, probe) = setup(
        vec![call("g", "guarded", json!({})), call("f", "free", json!({}))],
        guarded(),
    )
    .await;
    let agent = new_agent(&fake, toolkit.clone());
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g")).await;
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let _ = driver.finish().await;
    let user = UserAction {
        primary_confirmed: true,
        secondary_confirmed: false,
        automatic: false,
    };
    assert_eq!(*probe.state.user_actions.lock().unwrap(), [Some(user), None]);

    toolkit
        .register_with(
            probe.tool("guarded"),
            guarded().auto_approve(true).namesake(NamesakeStrategy::Override),
        )
        .unwrap();
    let auto = agent_with(&fake, toolkit, |b| b.auto_approve_tools(true));
    fake.push(Reply::tool_calls([call("a", "guarded", json!({}))]));
    fake.push(Reply::text("done"));
    let _ = Driver::new(auto.start_reply(Msg::user("go"))).finish().await;
    let automatic = UserAction {
        automatic: true,
        ..user
    };
    assert_eq!(
        probe.state.user_actions.lock().unwrap().last(),
        Some(&Some(automatic))
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn a9_p2_a16_y5_decline_is_not_cancel_and_late_decisions_change_nothing() {
    let (fake, toolkit, probe) = setup(
        vec![
            call("declined", "guarded", json!({})),
            call("cancelled", "guarded", json!({})),
        ],
        guarded(),
    )
    .await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("declined")).await;
    handle
        .decide("declined", ApprovalDecision::Decline { reason: None })
        .unwrap();
    assert_eq!(
        handle.decide("declined", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending("declined".into())),
        "the first decision wins (A16)"
    );
    driver.wait_for("asked", asked("cancelled")).await;
    assert_eq!(handle.cancel_call("cancelled"), CancelOutcome::Cancelled);
    assert_eq!(
        handle.decide("cancelled", ApprovalDecision::Approve),
        Err(ApprovalError::Cancelled("cancelled".into())),
        "the error says the cancel came first"
    );
    assert_eq!(
        handle.decide("unknown", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending("unknown".into()))
    );
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        state_of(&events, "declined"),
        ToolCallState::Declined { reason: None }
    );
    assert_eq!(
        state_of(&events, "cancelled"),
        ToolCallState::Cancelled {
            phase: CancelPhase::BeforeStart,
            partial: false,
            reason: CancelReason::User
        }
    );
    assert_eq!(
        approval_events(&events, "cancelled"),
        ["requested automatic=false", "withdrawn"],
        "P2"
    );
    assert_eq!(stored(&memory, "declined").0, declined_text(None));
    assert_eq!(stored(&memory, "cancelled").0, CANCELLED_BEFORE_START);
    assert_eq!(
        handle.cancel_call("declined"),
        CancelOutcome::AlreadyFinished(Some(ToolCallState::Declined { reason: None })),
        "C3 for a declined call"
    );
    assert_eq!(
        handle.decide("declined", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending("declined".into()))
    );
    assert_eq!(
        consistent_memory(&agent).await,
        memory,
        "Y5: memory unchanged by late decisions"
    );
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a10_s3_a_declined_body_never_runs_and_the_model_reads_why() {
    let (fake, toolkit, probe) =
        setup(vec![call("g", "guarded", json!({"result": "secret"}))], guarded()).await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    handle
        .decide(
            "g",
            ApprovalDecision::Decline {
                reason: Some("not on a Friday".into()),
            },
        )
        .unwrap();
    let (reply, events) = driver.finish().await;
    assert_eq!(
        reply.unwrap().text().as_deref(),
        Some("after the tools"),
        "the loop continues"
    );
    check_all(&agent, &events).await;
    assert_eq!(probe.runs(), 0, "S3: the body never ran");
    assert_eq!(
        tool_message(&fake, 1, "g"),
        declined_text(Some("not on a Friday"))
    );
    fake.assert_no_violations();

    // A tool may word its own decline.
    let (fake, toolkit, probe) = setup(
        vec![call("g", "guarded", json!({"result": "report.pdf"}))],
        guarded().declined_message(|args, reason| {
            format!(
                "Not deleting {}: {}",
                args["result"].as_str().unwrap_or("?"),
                reason.unwrap_or("declined")
            )
        }),
    )
    .await;
    let (_agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    handle
        .decide(
            "g",
            ApprovalDecision::Decline {
                reason: Some("keep it".into()),
            },
        )
        .unwrap();
    let _ = driver.finish().await;
    assert_eq!(tool_message(&fake, 1, "g"), "Not deleting report.pdf: keep it");
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a11_decline_and_stop_declines_this_call_and_cancels_the_reply() {
    let (fake, toolkit, probe) = setup(
        vec![call("g", "guarded", json!({})), call("f", "free", json!({}))],
        guarded(),
    )
    .await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    handle
        .decide(
            "g",
            ApprovalDecision::DeclineAndStop {
                reason: Some("stop".into()),
            },
        )
        .unwrap();
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().metadata["interrupted"], true);
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        state_of(&events, "g"),
        ToolCallState::Declined {
            reason: Some("stop".into())
        }
    );
    assert_eq!(
        state_of(&events, "f"),
        ToolCallState::Cancelled {
            phase: CancelPhase::BeforeStart,
            partial: false,
            reason: CancelReason::Reply
        }
    );
    assert_eq!(stored(&memory, "f").0, CANCELLED_BEFORE_START);
    assert_eq!(fake.request_count(), 1, "no model request after the stop");
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a15_nobody_to_decide_or_no_decision_in_time_declines() {
    // No listener at all: declined at once, fail-closed.
    let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({}))], guarded()).await;
    let agent = new_agent(&fake, toolkit);
    within("the reply", agent.reply(Msg::user("go"))).await.unwrap();
    assert_eq!(
        stored(&consistent_memory(&agent).await, "g").0,
        declined_text(Some("no decision"))
    );
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();

    // A listener that never answers, with an approval timeout.
    let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({}))], guarded()).await;
    let agent = agent_with(&fake, toolkit, |b| b.approval_timeout(Duration::from_millis(30)));
    let (_, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        approval_events(&events, "g"),
        [
            "requested automatic=false",
            "resolved Decline { reason: Some(\"no decision\") } automatic=true NoDecision"
        ]
    );
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();

    // The UI goes away while the request is pending.
    let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({}))], guarded()).await;
    let agent = new_agent(&fake, toolkit);
    let mut driver = Driver::new(agent.start_reply(Msg::user("go")));
    driver.wait_for("asked", asked("g")).await;
    drop(driver);
    // The next reply waits for the dropped one to end; it uses the unconsumed scripted answer.
    within("the reply", agent.reply(Msg::user("still there?")))
        .await
        .unwrap();
    let memory = consistent_memory(&agent).await;
    assert_eq!(stored(&memory, "g").0, declined_text(Some("no decision")));
    assert_eq!(stored(&memory, "g").2["tool_call"]["decision"], "no_decision");
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a15_a16_a_front_end_without_a_decider_declines_as_no_decision() {
    let (fake, toolkit, probe) = setup(
        vec![call("g", "guarded", json!({})), call("h", "guarded", json!({}))],
        guarded(),
    )
    .await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    handle.decide_no_decision("g").unwrap();
    assert_eq!(
        handle.decide("g", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending("g".into())),
        "the first decision wins (A16)"
    );
    assert_eq!(
        handle.decide_no_decision("g"),
        Err(ApprovalError::NotPending("g".into()))
    );
    driver.wait_for("asked", asked("h")).await;
    handle.decide("h", ApprovalDecision::Approve).unwrap();
    assert_eq!(
        handle.decide_no_decision("h"),
        Err(ApprovalError::NotPending("h".into())),
        "A16 the other way round"
    );
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(
        approval_events(&events, "g"),
        [
            "requested automatic=false",
            "resolved Decline { reason: Some(\"no decision\") } automatic=true NoDecision"
        ]
    );
    assert_eq!(stored(&memory, "g").0, declined_text(Some("no decision")));
    assert_eq!(stored(&memory, "g").2["tool_call"]["decision"], "no_decision");
    assert_eq!(stored(&memory, "h").2["tool_call"]["decision"], "user");
    assert_eq!(probe.runs(), 1, "only the approved call ran");
    fake.assert_no_violations();
}

#[tokio::test]
async fn a17_calls_without_approval_do_not_wait_in_parallel_and_queue_in_order_otherwise() {
    // Parallel: the free call finishes while the guarded one still waits.
    let (fake, toolkit, _probe) = setup(
        vec![call("g", "guarded", json!({})), call("f", "free", json!({}))],
        guarded(),
    )
    .await;
    let agent = agent_with(&fake, toolkit, |b| b.parallel_tool_calls(true));
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g")).await;
    driver.wait_for("free finished", finished("f")).await;
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    let order: Vec<agentry::CallId> = memory
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(order, ["g", "f"], "stored in call order");
    fake.assert_no_violations();

    // Sequential: the second call does not start before the first is terminal.
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("g", "guarded", json!({})),
        call("f", "free", json!({})),
    ]));
    fake.push(Reply::text("after the tools"));
    let (guarded_probe, free_probe) = (Probe::new(), Probe::new());
    let toolkit = Toolkit::new();
    toolkit
        .register_with(guarded_probe.tool("guarded"), guarded())
        .unwrap();
    toolkit.register(free_probe.tool("free")).unwrap();
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    assert_eq!(free_probe.runs(), 0);
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!((guarded_probe.runs(), free_probe.runs()), (1, 1));
    // Decisive on any runtime: run in parallel, `f` would have entered the loop (its
    // `ToolStarted`) while `g` waited for the decision, not after `g` ended.
    let at = |matches: &dyn Fn(&AgentEvent) -> bool| events.iter().position(matches).unwrap();
    let f_started = at(&|e| matches!(e, AgentEvent::ToolStarted { call_id, .. } if call_id == "f"));
    let g_finished = at(&finished("g"));
    assert!(f_started > g_finished, "f left the queue before g was terminal");
    fake.assert_no_violations();
}

/// A18 on a paused clock (the model is in-process): the call waits a whole virtual minute for
/// its approval, far past its 40 ms timeout, then runs 30 ms and completes. Counting the wait
/// would have timed it out at once.
#[tokio::test(start_paused = true)]
async fn a18_time_waiting_for_approval_does_not_count_toward_the_timeout() {
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("guarded"),
            guarded().timeout(Duration::from_millis(40)),
        )
        .unwrap();
    let model = common::scripted::ScriptedModel::new();
    model.push_calls(&[("g", "guarded", json!({"wait": true}))]);
    model.push_text("after the tools");
    let agent = model.agent(toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g")).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    probe.started(1).await;
    tokio::time::advance(Duration::from_millis(30)).await;
    probe.release();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(state_of(&events, "g"), ToolCallState::Completed);
    assert_eq!(model.result(1, "g").text(), "FINAL");
    assert_eq!(probe.runs(), 1);
    model.assert_no_violations();
}

/// A5: the request function runs once for calls decided automatically too (auto-approval, a
/// session grant), and its message is kept with the result as the decision's explanation.
#[tokio::test]
async fn a5_automatic_decisions_build_the_request_once_and_keep_its_message() {
    let requests = Arc::new(AtomicUsize::new(0));
    let (fake, toolkit, probe) = setup(
        vec![call("a", "guarded", json!({"result": "x"}))],
        guarded()
            .auto_approve(true)
            .approval_request(counting_request(&requests)),
    )
    .await;
    let agent = agent_with(&fake, toolkit, |b| b.auto_approve_tools(true));
    let (_, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(requests.load(Ordering::SeqCst), 1, "auto-approved: built once");
    let (_, _, metadata) = stored(&memory, "a");
    assert_eq!(metadata["tool_call"]["decision"], "auto");
    assert_eq!(
        metadata["tool_call"]["explanation"],
        r#"The probe will run with {"result":"x"}"#
    );

    // A session grant decides the same arguments later: the request is built once more.
    agent.restore_session_grants([(
        format!("guarded\u{0}{}", json!({"result": "y"})),
        SessionGrant::Allow,
    )]);
    fake.push(Reply::tool_calls([call("b", "guarded", json!({"result": "y"}))]));
    fake.push(Reply::text("again"));
    let agent_no_auto = agent;
    let (_, events) = Driver::new(agent_no_auto.start_reply(Msg::user("again")))
        .finish()
        .await;
    let memory = check_all(&agent_no_auto, &events).await;
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    let (_, _, metadata) = stored(&memory, "b");
    assert_eq!(metadata["tool_call"]["decision"], "session_grant");
    assert_eq!(
        metadata["tool_call"]["explanation"],
        r#"The probe will run with {"result":"y"}"#
    );
    assert_eq!(probe.runs(), 2);
    fake.assert_no_violations();
}

/// A16, S2: a decision that comes after a cancel committed is refused as such, not accepted
/// without effect. On one thread the loop cannot run between the cancel and the decision: the
/// decision finds the question still open in the handle, and must still be refused.
#[tokio::test]
async fn a16_a_decision_after_a_cancel_says_the_call_was_cancelled() {
    let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({}))], guarded()).await;
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g")).await;
    assert_eq!(handle.cancel_call("g"), CancelOutcome::Cancelled);
    assert_eq!(
        handle.decide("g", ApprovalDecision::Approve),
        Err(ApprovalError::Cancelled("g".into()))
    );
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        handle.decide("g", ApprovalDecision::Approve),
        Err(ApprovalError::NotPending("g".into())),
        "after the reply, the call waits for nothing"
    );
    assert_eq!(probe.runs(), 0);
    fake.assert_no_violations();
}

/// A12: the grant key is the canonical JSON of the arguments: the same arguments written in
/// another key order match the grant, and are not asked about again.
#[tokio::test]
async fn a12_the_same_arguments_in_another_key_order_match_the_grant() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "g1",
        "guarded",
        r#"{"result": "a", "note": {"x": 1, "y": 2}}"#,
    )]));
    fake.push(Reply::text("after the tools"));
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register_with(probe.tool("guarded"), guarded()).unwrap();
    let (agent, handle, mut driver) = start(&fake, toolkit);
    driver.wait_for("asked", asked("g1")).await;
    handle.decide("g1", ApprovalDecision::ApproveForSession).unwrap();
    let _ = driver.finish().await;

    fake.push(Reply::tool_calls([Call::new(
        "g2",
        "guarded",
        r#"{"note": {"y": 2, "x": 1}, "result": "a"}"#,
    )]));
    fake.push(Reply::text("done"));
    let (_, events) = Driver::new(agent.start_reply(Msg::user("again"))).finish().await;
    check_all(&agent, &events).await;
    assert_eq!(
        approval_events(&events, "g2"),
        [
            "requested automatic=true",
            "resolved Approve automatic=true SessionGrant"
        ]
    );
    assert_eq!(probe.runs(), 2);
    fake.assert_no_violations();
}

/// A hook that refuses every approval, as a store does when it cannot record one as used.
struct RefusesApprovals;

#[async_trait::async_trait]
impl agentry::agent::AgentHook for RefusesApprovals {
    async fn admit_approved(
        &self,
        _ctx: &agentry::agent::HookContext,
        _call: &agentry::message::ToolUseBlock,
    ) -> Result<(), String> {
        Err("the session was taken over".into())
    }
}

#[tokio::test]
async fn an_approval_a_hook_refuses_is_a_decline_and_the_body_never_runs() {
    let (fake, toolkit, probe) = setup(vec![call("g", "guarded", json!({}))], guarded()).await;
    let agent = agent_with(&fake, toolkit, |b| b.hook("store", RefusesApprovals));
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g")).await;
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("after the tools"));
    check_all(&agent, &events).await;
    assert_eq!(probe.runs(), 0, "the refused approval ran nothing");
    assert_eq!(
        tool_message(&fake, 1, "g"),
        declined_text(Some("the session was taken over"))
    );
    assert!(agent.session_grants().is_empty(), "no grant either");
    fake.assert_no_violations();
}
