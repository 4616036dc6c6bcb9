//! A reply whose calls end in every terminal state, shared by the S4, Y1, R7, Y2 and Y3 tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::agent::{AgentEvent, AgentHook, HookContext, ReActAgent, ReActAgentBuilder};
use agentry::message::{ToolResultBlock, ToolUseBlock};
use agentry::tool::{
    ApprovalDecision, CANCELLED_BEFORE_START, CANCELLED_RUNNING, CancelOutcome, CancelReason, ToolCallState,
    ToolOptions, Toolkit, declined_text, timed_out_text,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use async_trait::async_trait;

use super::common::probe::{Driver, Probe, asked};
use super::{cancelled_before_start, cancelled_running};

/// The calls of the scenario that ends in every terminal state, as (id, tool, arguments), run in
/// order: `probe` is the probe, `guarded` needs approval, `slow` times out after 50 ms.
pub(crate) const TERMINAL_CALLS: [(&str, &str, &str); 7] = [
    ("done", "probe", r#"{"chunks": ["half way"]}"#),
    ("failed", "probe", r#"{"fail": "boom"}"#),
    ("declined", "guarded", "{}"),
    ("timed", "slow", r#"{"wait": true, "partial": "half"}"#),
    ("partial", "probe", r#"{"wait": true, "partial": "partial text"}"#),
    ("cancelled", "probe", r#"{"wait": true}"#),
    ("queued", "probe", "{}"),
];

pub(crate) const TERMINAL_TIMEOUT: Duration = Duration::from_millis(50);

/// What each call of [`TERMINAL_CALLS`] ends as: state, model-visible text, `is_error` (Y2).
pub(crate) fn terminal_expected() -> Vec<(&'static str, ToolCallState, String, bool)> {
    vec![
        ("done", ToolCallState::Completed, "FINAL".to_owned(), false),
        ("failed", ToolCallState::Failed, "Error: boom".to_owned(), true),
        (
            "declined",
            ToolCallState::Declined {
                reason: Some("not now".into()),
            },
            declined_text(Some("not now")),
            true,
        ),
        (
            "timed",
            ToolCallState::TimedOut { partial: true },
            timed_out_text(TERMINAL_TIMEOUT, Some("half")),
            true,
        ),
        (
            "partial",
            cancelled_running(true, CancelReason::User),
            "partial text".to_owned(),
            true,
        ),
        (
            "cancelled",
            cancelled_running(false, CancelReason::User),
            CANCELLED_RUNNING.to_owned(),
            true,
        ),
        (
            "queued",
            cancelled_before_start(CancelReason::User),
            CANCELLED_BEFORE_START.to_owned(),
            true,
        ),
    ]
}

/// Records the state every post-acting hook sees.
struct StateRecorder(Arc<Mutex<Vec<(String, ToolCallState)>>>);

#[async_trait]
impl AgentHook for StateRecorder {
    async fn post_acting(
        &self,
        _: &HookContext,
        call: &ToolUseBlock,
        state: &ToolCallState,
        _: &mut ToolResultBlock,
    ) {
        self.0.lock().unwrap().push((call.id.to_string(), state.clone()));
    }
}

/// One reply through [`TERMINAL_CALLS`] (the caller scripted its model with them, then a text
/// answer): the agent, the reply's events, and what the post-acting hooks saw.
pub(crate) struct Terminal {
    pub(crate) agent: ReActAgent,
    pub(crate) events: Vec<AgentEvent>,
    pub(crate) hooks: Vec<(String, ToolCallState)>,
}

pub(crate) async fn every_terminal_state(make: impl FnOnce(Toolkit) -> ReActAgentBuilder) -> Terminal {
    let (probe, slow) = (Probe::new(), Probe::new());
    let toolkit = Toolkit::new();
    toolkit.register(probe.tool("probe")).unwrap();
    toolkit
        .register_with(
            Probe::new().tool("guarded"),
            ToolOptions::new().require_approval(true),
        )
        .unwrap();
    toolkit
        .register_with(slow.tool("slow"), ToolOptions::new().timeout(TERMINAL_TIMEOUT))
        .unwrap();
    let hooks = Arc::new(Mutex::new(Vec::new()));
    let agent = make(toolkit)
        .parallel_tool_calls(false)
        .hook("states", StateRecorder(Arc::clone(&hooks)))
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("approval asked", asked("declined")).await;
    handle
        .decide(
            "declined",
            ApprovalDecision::Decline {
                reason: Some("not now".into()),
            },
        )
        .unwrap();
    probe.started(3).await;
    assert_eq!(handle.cancel_call("queued"), CancelOutcome::Cancelled);
    assert_eq!(handle.cancel_call("partial"), CancelOutcome::Cancelled);
    probe.started(4).await;
    assert_eq!(handle.cancel_call("cancelled"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    let hooks = hooks.lock().unwrap().clone();
    Terminal { agent, events, hooks }
}

/// Pushes the [`TERMINAL_CALLS`] turn and a text answer to the fake server.
pub(crate) fn push_terminal_calls(fake: &FakeLlm) {
    fake.push(Reply::tool_calls(
        TERMINAL_CALLS.map(|(id, tool, args)| Call::new(id, tool, args)),
    ));
    fake.push(Reply::text("after the tools"));
}
