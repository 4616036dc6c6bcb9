//! Spec 3.1 and Y1: one terminal state per call (S1), atomic transitions (S2), one
//! `ToolFinished` and one last chunk (S4), and what every model request holds (Y1).

use std::collections::HashMap;
use std::sync::Arc;

use agentry::agent::{AgentEvent, CancelTarget};
use agentry::message::{ContentBlock, Msg, Role, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest};
use agentry::tool::{
    ApprovalDecision, CANCELLED_RUNNING, CancelOutcome, CancelPhase, CancelReason, FunctionTool,
    ToolCallState, ToolOptions, Toolkit,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use futures::StreamExt;
use serde_json::json;

use super::common::probe::{Driver, Probe};
use super::common::scripted::ScriptedModel;
use super::common::*;
use super::terminal::{TERMINAL_CALLS, every_terminal_state, push_terminal_calls};

/// xorshift64*: the test's own seeded generator, so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Whether a call in this state ran its body.
fn ran(state: &ToolCallState) -> bool {
    match state {
        ToolCallState::Completed | ToolCallState::Failed | ToolCallState::TimedOut { .. } => true,
        ToolCallState::Cancelled { phase, .. } => *phase == CancelPhase::Running,
        _ => false,
    }
}

/// One seed: up to three calls of a free, a guarded and a timing-out tool, with random
/// behaviours, then random cancels, decisions, releases, reply cancels and clock advances
/// between random numbers of scheduler turns; then every pending question is approved and every
/// waiting body released until the reply ends.
async fn one_interleaving(seed: u64) -> Vec<ToolCallState> {
    let mut rng = Rng::new(seed);
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register(probe.tool("free")).unwrap();
    toolkit
        .register_with(probe.tool("guarded"), ToolOptions::new().require_approval(true))
        .unwrap();
    toolkit
        .register_with(
            probe.tool("slow"),
            ToolOptions::new().timeout(std::time::Duration::from_millis(30)),
        )
        .unwrap();
    let behaviours = [
        json!({}),
        json!({"wait": true}),
        json!({"fail": "boom"}),
        json!({"wait": true, "partial": "p"}),
        json!({"wait": true, "none_on_cancel": true}),
    ];
    let n = 1 + rng.below(3) as usize;
    let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, serde_json::Value)> = ids
        .iter()
        .map(|id| {
            let tool = *rng.pick(&["free", "guarded", "slow"]);
            (id.as_str(), tool, rng.pick(&behaviours).clone())
        })
        .collect();
    let model = ScriptedModel::new();
    model.push_calls(&calls);
    model.push_text("done");
    let agent = model
        .builder(toolkit)
        .parallel_tool_calls(rng.below(2) == 0)
        .build()
        .unwrap();
    let handle = agent.handle();
    let mut run = agent.start_reply(Msg::user("go"));

    let mut outcomes: Vec<(String, CancelOutcome)> = Vec::new();
    for _ in 0..rng.below(7) {
        for _ in 0..rng.below(4) {
            tokio::task::yield_now().await;
        }
        let id = rng.pick(&ids).clone();
        match rng.below(11) {
            0..=2 => outcomes.push((id.clone(), handle.cancel_call(&id))),
            3 | 4 => drop(handle.decide(&id, ApprovalDecision::Approve)),
            5 => drop(handle.decide(&id, ApprovalDecision::Decline { reason: None })),
            6 | 7 => probe.release(),
            8 => tokio::time::advance(std::time::Duration::from_millis(rng.below(40))).await,
            9 if rng.below(3) == 0 => {
                handle.cancel_reply();
            }
            _ => {}
        }
    }
    for _ in 0..8 {
        probe.release();
    }
    let mut events = Vec::new();
    while let Some(event) = within(&format!("seed {seed}: the reply ends"), run.next_event()).await {
        if let AgentEvent::ApprovalRequested {
            call_id,
            automatic: false,
            ..
        } = &event
        {
            let _ = handle.decide(call_id, ApprovalDecision::Approve);
        }
        events.push(event);
    }
    within(&format!("seed {seed}: finish"), run.finish())
        .await
        .unwrap();

    let memory = check_all(&agent, &events).await;
    let mut states = Vec::new();
    let bodies: Vec<String> = probe
        .state
        .cancelled_at_start
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    for id in &ids {
        let case = format!("seed {seed}, call {id}, calls {calls:?}, outcomes {outcomes:?}");
        let finished = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::ToolFinished { call_id, .. } if call_id == id))
            .count();
        assert_eq!(finished, 1, "one ToolFinished: {case}");
        let results = memory
            .iter()
            .flat_map(Msg::tool_results)
            .filter(|r| r.id == *id)
            .count();
        assert_eq!(results, 1, "one stored result: {case}");
        let state = state_of(&events, id);
        states.push(state.clone());
        let (_, is_error, metadata) = stored(&memory, id);
        assert_eq!(metadata["tool_call"]["state"], state.name(), "{case}");
        assert_eq!(is_error, state.is_error(), "{case}");
        assert_eq!(
            bodies.iter().filter(|b| *b == id).count(),
            usize::from(ran(&state)),
            "the body ran exactly when the state says so (S3, P1): {state:?}, {case}"
        );
        let accepted = outcomes
            .iter()
            .filter(|(o, outcome)| o == id && *outcome == CancelOutcome::Cancelled)
            .count();
        assert!(accepted <= 1, "{case}");
        let user_cancelled = matches!(
            state,
            ToolCallState::Cancelled {
                reason: CancelReason::User,
                ..
            }
        );
        assert_eq!(accepted == 1, user_cancelled, "{state:?}: {case}");
        for (_, outcome) in outcomes.iter().filter(|(o, _)| o == id) {
            match outcome {
                CancelOutcome::AlreadyCancelled => {
                    assert!(matches!(state, ToolCallState::Cancelled { .. }), "{case}");
                }
                CancelOutcome::AlreadyFinished(Some(s)) => assert_eq!(s.name(), state.name(), "{case}"),
                _ => {}
            }
        }
        // Once terminal, never changed: later cancels see the same state (S1, C2, C3).
        let later = handle.cancel_call(id);
        let expected = match &state {
            ToolCallState::Cancelled { .. } => CancelOutcome::AlreadyCancelled,
            other => CancelOutcome::AlreadyFinished(Some(other.clone())),
        };
        assert_eq!(later, expected, "{case}");
    }
    assert_eq!(consistent_memory(&agent).await, memory, "seed {seed}");
    model.assert_no_violations();
    states
}

/// S1 through the agent (and S3, C2, C3 along the way): 300 seeded random interleavings of
/// completion, failure, decline, approval, per-call and reply cancels and timeouts, on a paused
/// clock with an in-process model. Each call ends exactly once, as events, memory, body runs
/// and later cancels all agree.
#[tokio::test(start_paused = true)]
async fn s1_random_interleavings_end_each_call_exactly_once() {
    let mut seen = std::collections::BTreeMap::new();
    for seed in 1..=300 {
        for state in one_interleaving(seed).await {
            let kind = match state {
                ToolCallState::Cancelled { phase, reason, .. } => format!("cancelled {phase:?} {reason:?}"),
                other => other.name().to_owned(),
            };
            *seen.entry(kind).or_insert(0) += 1;
        }
    }
    // The seeds reach every terminal state, or the property says less than it seems.
    for kind in [
        "completed",
        "failed",
        "declined",
        "timed_out",
        "cancelled BeforeStart User",
        "cancelled Running User",
        "cancelled BeforeStart Reply",
        "cancelled Running Reply",
    ] {
        assert!(seen.contains_key(kind), "no {kind} in {seen:?}");
    }
}

/// S2: completion and cancel released together, 1 000 times. Both outcomes occur; the loser
/// has no observable effect: a cancel that lost emits no `CancelRequested`, and either way
/// there is exactly one `ToolFinished` and one stored result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_s1_complete_vs_cancel_race_has_one_winner_1000_times() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let tool_barrier = Arc::clone(&barrier);
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "race",
            "Returns when released.",
            json!({"type": "object"}),
            move |_, _| {
                let barrier = Arc::clone(&tool_barrier);
                agentry::tool::once(async move {
                    barrier.wait().await;
                    "FINAL"
                })
            },
        ))
        .unwrap();
    let fake = FakeLlm::start().await;
    let agent = agent(&fake, false, toolkit);
    let handle = agent.handle();
    let (mut completed, mut cancelled) = (0, 0);
    for i in 0..1000 {
        let id = format!("r{i}");
        fake.push(Reply::tool_calls([Call::new(&id, "race", "{}")]));
        fake.push(Reply::text("done"));
        let driver = Driver::new(agent.start_reply(Msg::user("go")));
        within("the tool reaches the barrier", barrier.wait()).await;
        let outcome = handle.cancel_call(&id);
        let (_, events) = driver.finish().await;
        let memory = check_all(&agent, &events).await;
        let requested = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::CancelRequested { target: CancelTarget::Call(c), .. } if *c == id))
            .count();
        let finishes = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::ToolFinished { call_id, .. } if *call_id == id))
            .count();
        let results: Vec<String> = memory
            .iter()
            .flat_map(Msg::tool_results)
            .filter(|r| r.id == id)
            .map(|r| r.text())
            .collect();
        assert_eq!(finishes, 1, "iteration {i}: one ToolFinished");
        match (state_of(&events, &id), outcome) {
            (ToolCallState::Completed, CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed))) => {
                assert_eq!(results, ["FINAL"], "iteration {i}");
                assert_eq!(requested, 0, "iteration {i}: a losing cancel announced itself");
                completed += 1;
            }
            (ToolCallState::Cancelled { .. }, CancelOutcome::Cancelled) => {
                assert_eq!(results, [CANCELLED_RUNNING], "iteration {i}");
                assert_eq!(requested, 1, "iteration {i}");
                cancelled += 1;
            }
            (state, outcome) => panic!("iteration {i}: state {state:?} with outcome {outcome:?}"),
        }
        agent.memory().clear().await.unwrap();
    }
    assert!(
        completed > 0 && cancelled > 0,
        "both outcomes must occur: completed {completed}, cancelled {cancelled}"
    );
    fake.assert_no_violations();
}

/// S4 over a reply that ends calls in every terminal state, streamed from the fake server:
/// every call the model made has exactly one `ToolStarted` and one `ToolFinished`, and every
/// message stored (the assistant's and each result) was printed with exactly one `last = true`,
/// as its final chunk.
#[tokio::test]
async fn s4_one_tool_finished_per_call_and_one_last_chunk_per_message() {
    let fake = FakeLlm::start().await;
    push_terminal_calls(&fake);
    let run = every_terminal_state(|toolkit| builder(&fake, true, toolkit)).await;
    let memory = consistent_memory(&run.agent).await;
    let mut finished: HashMap<&str, usize> = HashMap::new();
    let mut started: HashMap<&str, usize> = HashMap::new();
    let mut lasts: HashMap<&str, usize> = HashMap::new();
    let mut after_last: Vec<&str> = Vec::new();
    for event in &run.events {
        match event {
            AgentEvent::ToolStarted { call_id, .. } => *started.entry(call_id).or_default() += 1,
            AgentEvent::ToolFinished { call_id, .. } => *finished.entry(call_id).or_default() += 1,
            AgentEvent::Message { msg, last } => {
                if lasts.contains_key(msg.id.as_str()) {
                    after_last.push(&msg.id);
                }
                if *last {
                    *lasts.entry(&msg.id).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    let expected: HashMap<&str, usize> = TERMINAL_CALLS.iter().map(|(id, ..)| (*id, 1)).collect();
    assert_eq!(finished, expected, "one ToolFinished per call");
    assert_eq!(started, expected, "one ToolStarted per call");
    assert!(
        after_last.is_empty(),
        "printed after their last chunk: {after_last:?}"
    );
    let printed: Vec<&Msg> = memory.iter().filter(|m| m.role != Role::User).collect();
    assert_eq!(printed.len(), 2 + TERMINAL_CALLS.len(), "{memory:#?}");
    for msg in printed {
        assert_eq!(lasts.get(msg.id.as_str()), Some(&1), "message {}", msg.id);
    }
    assert_eq!(
        lasts.len(),
        2 + TERMINAL_CALLS.len(),
        "no last chunk for anything unstored"
    );
    fake.assert_no_violations();
}

/// Y1: the fake server's per-request check is what is asserted here. First a control: a request
/// with a call lacking its result is refused and recorded, so the check can fail. Then replies
/// ending calls in every terminal state, a reply cancelled in the middle of its calls and the
/// reply after it: every request the agent made passed the check, and memory pairs every call
/// with one result in call order.
#[tokio::test]
async fn y1_every_request_pairs_each_call_with_one_result() {
    let fake = FakeLlm::start().await;
    let dangling = vec![
        Msg::user("go"),
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
    ];
    fake.push(Reply::text("unused"));
    let answer: Vec<_> = model(&fake, false)
        .chat(ChatRequest::new(dangling))
        .collect()
        .await;
    assert!(
        answer.iter().any(Result::is_err),
        "the fake accepted a dangling call"
    );
    assert!(!fake.take_violations().is_empty(), "the control was not recorded");

    let fake = FakeLlm::start().await;
    push_terminal_calls(&fake);
    let run = every_terminal_state(|toolkit| builder(&fake, true, toolkit)).await;
    assert_eq!(fake.violations(), Vec::<String>::new(), "every terminal state");
    // The same agent goes on: a reply cancelled with one call running and one queued, then one
    // more reply, whose first request carries everything above.
    fake.push(Reply::tool_calls([
        Call::new("r2a", "probe", r#"{"wait": true}"#),
        Call::new("r2b", "probe", "{}"),
    ]));
    let handle = run.agent.handle();
    let mut driver = Driver::new(run.agent.start_reply(Msg::user("again")));
    driver
        .wait_for(
            "r2a started",
            |e| matches!(e, AgentEvent::ToolStarted { call_id, .. } if call_id == "r2a"),
        )
        .await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    check_all(&run.agent, &events).await;
    fake.push(Reply::text("all good"));
    within("the reply", run.agent.reply(Msg::user("and now?")))
        .await
        .unwrap();
    assert_eq!(
        fake.request_count(),
        4,
        "tools, answer, cancelled reply, last reply"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
    let last = wire_messages(&fake, 3);
    let results = last.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(
        results,
        TERMINAL_CALLS.len() + 2,
        "every call answered on the wire"
    );
    consistent_memory(&run.agent).await;
}
