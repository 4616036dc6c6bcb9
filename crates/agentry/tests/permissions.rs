//! Permission rules (spec A20): calls allowed or denied by configuration are decided without
//! asking, deny wins, and what no rule covers is asked as before.

use crate::common;

use agentry::agent::SessionGrant;
use agentry::message::Msg;
use agentry::tool::{ApprovalDecision, DECLINED, PermissionRules, ToolCallState, ToolOptions, Toolkit};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::probe::{Driver, Probe, asked};
use common::*;
use serde_json::{Value, json};

/// A call decided by a rule, as `approval_events` shows it.
const RULE: [&str; 2] = ["requested automatic=true", "resolved Approve automatic=true Rule"];
/// A call the user approved.
const USER: [&str; 2] = [
    "requested automatic=false",
    "resolved Approve automatic=false User",
];

fn call(id: &str, tool: &str, args: Value) -> Call {
    Call::new(id, tool, args.to_string())
}

/// The probe as `guarded` (needs approval, rules match its `path`) and as `free`.
fn toolkit(probe: &Probe) -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            probe.tool("guarded"),
            ToolOptions::new().require_approval(true).rule_subject("path"),
        )
        .unwrap();
    toolkit.register(probe.tool("free")).unwrap();
    toolkit
}

#[tokio::test]
async fn a20_an_allow_rule_runs_a_guarded_call_without_anyone_to_ask_and_the_rest_is_declined() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("in", "guarded", json!({"path": "notes/a.md"})),
        call("out", "guarded", json!({"path": "src/main.rs"})),
        call("climb", "guarded", json!({"path": "notes/../src/main.rs"})),
    ]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let rules = PermissionRules::new().allow("guarded:notes/**").unwrap();
    let agent = builder(&fake, true, toolkit(&probe))
        .permissions(rules)
        .build()
        .unwrap();
    // A script: nobody listens, so whatever must be asked is declined (A15).
    agent.reply(Msg::user("go")).await.unwrap();
    let memory = consistent_memory(&agent).await;
    assert_eq!(probe.runs(), 1, "only the call the rule allows ran");
    let (_, _, metadata) = stored(&memory, "in");
    assert_eq!(metadata["tool_call"]["state"], "completed");
    assert_eq!(
        metadata["tool_call"]["decision"], "rule",
        "recorded with its source"
    );
    for id in ["out", "climb"] {
        let (_, _, metadata) = stored(&memory, id);
        assert_eq!(metadata["tool_call"]["state"], "declined", "{id}");
        assert_eq!(metadata["tool_call"]["decision"], "no_decision", "{id}");
    }
    fake.assert_no_violations();
}

#[tokio::test]
async fn a20_deny_wins_over_allow_rules_grants_and_auto_approval_and_stops_free_tools_too() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("secret", "guarded", json!({"path": "notes/private/key"})),
        call("granted", "guarded", json!({"path": "notes/private/key2"})),
        call("free", "free", json!({"path": "x"})),
        call("ok", "guarded", json!({"path": "notes/a.md"})),
    ]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let rules = PermissionRules::new()
        .allow("guarded:notes/**")
        .unwrap()
        .deny("guarded:notes/private/**")
        .unwrap()
        .deny("free")
        .unwrap();
    let toolkit = toolkit(&probe);
    toolkit
        .register_with(
            probe.tool("guarded"),
            ToolOptions::new()
                .require_approval(true)
                .auto_approve(true)
                .rule_subject("path")
                .namesake(agentry::tool::NamesakeStrategy::Override),
        )
        .unwrap();
    let agent = builder(&fake, true, toolkit)
        .permissions(rules)
        .auto_approve_tools(true)
        .build()
        .unwrap();
    agent.restore_session_grants([(
        format!("guarded\u{0}{}", json!({"path": "notes/private/key2"})),
        SessionGrant::Allow,
    )]);
    let (_, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(probe.runs(), 1, "only `ok` ran");
    for id in ["secret", "granted", "free"] {
        assert!(
            matches!(state_of(&events, id), ToolCallState::Declined { .. }),
            "{id}"
        );
        let decided = approval_events(&events, id);
        assert_eq!(decided[0], "requested automatic=true", "{id}");
        assert!(
            decided[1].starts_with("resolved Decline") && decided[1].ends_with("automatic=true Rule"),
            "{id}: {decided:?}"
        );
        let (text, is_error, _) = stored(&memory, id);
        assert!(is_error, "{id}");
        assert!(text.starts_with(DECLINED), "{id}: {text}");
        assert!(
            text.contains("a permission rule forbids it (deny "),
            "{id}: {text}"
        );
    }
    assert_eq!(approval_events(&events, "ok"), RULE);
    // The model read why.
    assert!(tool_message(&fake, 1, "secret").contains("deny guarded:notes/private/**"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a20_a_call_no_rule_covers_is_asked_as_before() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call(
        "g",
        "guarded",
        json!({"path": "elsewhere"}),
    )]));
    fake.push(Reply::text("done"));
    let probe = Probe::new();
    let rules = PermissionRules::new().allow("guarded:notes/**").unwrap();
    let agent = builder(&fake, true, toolkit(&probe))
        .permissions(rules)
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("asked", asked("g")).await;
    handle.decide("g", ApprovalDecision::Approve).unwrap();
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(approval_events(&events, "g"), USER);
    assert_eq!(probe.runs(), 1);
    fake.assert_no_violations();
}
