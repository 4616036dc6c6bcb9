//! Reply budgets and the usage ledger: a reply that reaches its token or cost limit stops as a
//! cancel with the budget as its reason (running tools answer with their `on_cancel`, the
//! model's text so far is kept, memory stays consistent), and `ReplyFinished` carries the
//! reply's usage and cost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use agentry::agent::{AgentEvent, ReActAgent, StopReason, ToolCallState};
use agentry::message::{Msg, Role};
use agentry::model::ChatUsage;
use agentry::tool::{CancelPhase, CancelReason, FunctionTool, ToolResponse, Toolkit};
use agentry::usage::{Price, PriceTable, ReplyBudget};
use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::probe::Driver;
use common::{builder, check_all, state_of, stored, within};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Notify;

/// A tool that reports what its own model calls used once `ready` is notified, then waits for
/// its cancel.
fn spender(tokens: u64, ready: Arc<Notify>) -> FunctionTool {
    FunctionTool::new(
        "spend",
        "Runs a sub-agent.",
        json!({"type": "object"}),
        move |_, ctx| {
            let ready = Arc::clone(&ready);
            futures::stream::once(async move {
                ready.notified().await;
                ctx.report_usage(&ChatUsage {
                    input_tokens: tokens,
                    ..ChatUsage::default()
                });
                ctx.cancelled().await;
                Ok(ToolResponse::text("spent"))
            })
            .boxed()
        },
    )
}

/// A tool that runs until cancelled, and then says how far it got; notifies `ready` once its
/// `on_cancel` is set.
fn counter(ready: Arc<Notify>) -> FunctionTool {
    FunctionTool::new(
        "count",
        "Counts slowly.",
        json!({"type": "object"}),
        move |_, ctx| {
            let ready = Arc::clone(&ready);
            futures::stream::once(async move {
                ctx.set_on_cancel(|| Some("Counted to 3 of 10 before the stop.".into()));
                ready.notify_one();
                ctx.cancelled().await;
                Ok(ToolResponse::text("counted to 10"))
            })
            .boxed()
        },
    )
}

fn budget_agent(fake: &FakeLlm, toolkit: Toolkit, budget: ReplyBudget, prices: PriceTable) -> ReActAgent {
    builder(fake, true, toolkit)
        .parallel_tool_calls(true)
        .budget(budget)
        .prices(prices)
        .build()
        .unwrap()
}

fn finished(events: &[AgentEvent]) -> (StopReason, ChatUsage, Option<f64>) {
    match events.last() {
        Some(AgentEvent::ReplyFinished {
            stop_reason,
            usage,
            cost,
            ..
        }) => (stop_reason.clone(), usage.clone(), *cost),
        other => panic!("the last event is ReplyFinished, got {other:?}"),
    }
}

#[tokio::test]
async fn a_budget_reached_mid_tool_cancels_the_running_calls_with_their_on_cancel() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("c", "count", "{}"),
        Call::new("s", "spend", "{}"),
    ]));
    fake.push(Reply::text("Next reply."));
    let ready = Arc::new(Notify::new());
    let toolkit = Toolkit::new();
    toolkit.register(counter(Arc::clone(&ready))).unwrap();
    toolkit.register(spender(5_000, ready)).unwrap();
    let budget = ReplyBudget {
        max_tokens: Some(1_000),
        max_cost: None,
    };
    let agent = budget_agent(&fake, toolkit, budget, PriceTable::new());
    let (_, driver) = Driver::go(&agent);
    let (reply, events) = driver.finish().await;

    let (stop_reason, usage, cost) = finished(&events);
    match &stop_reason {
        StopReason::BudgetReached(text) => assert!(text.contains("budget of 1000 tokens"), "{text}"),
        other => panic!("stopped by {other:?}"),
    }
    assert!(usage.input_tokens >= 5_000, "the tool's usage counts: {usage:?}");
    assert_eq!(cost, None, "no price, no cost");
    assert_eq!(
        state_of(&events, "c"),
        ToolCallState::Cancelled {
            phase: CancelPhase::Running,
            partial: true,
            reason: CancelReason::Budget
        }
    );
    assert!(matches!(
        state_of(&events, "s"),
        ToolCallState::Cancelled {
            reason: CancelReason::Budget,
            ..
        }
    ));
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c").0, "Counted to 3 of 10 before the stop.");
    let note = memory.last().unwrap();
    assert_eq!(note.role, Role::User);
    assert!(note.text().unwrap().contains("budget of 1000 tokens"), "{note:?}");
    assert!(reply.unwrap().metadata.contains_key("interrupted"));
    assert_eq!(fake.request_count(), 1, "no model request after the stop");

    // The next reply starts from a consistent memory, with the note, and a fresh budget.
    let next = within("the next reply", agent.reply(Msg::user("go on")))
        .await
        .unwrap();
    assert_eq!(next.text().as_deref(), Some("Next reply."));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_token_budget_reached_mid_stream_cuts_the_stream_and_keeps_the_text() {
    let fake = FakeLlm::start().await;
    let words = "word ".repeat(200);
    let gate = Gate::new();
    // 1,000 bytes in 20 pieces: the estimate passes 100 tokens after 8 pieces; the stream
    // then waits at the gate, which only a client still reading would pass.
    fake.push(
        Reply::text(words.clone())
            .chunks(20)
            .pause_after(15, gate.clone()),
    );
    let budget = ReplyBudget {
        max_tokens: Some(100),
        max_cost: None,
    };
    let agent = budget_agent(&fake, Toolkit::new(), budget, PriceTable::new());
    let (_, driver) = Driver::go(&agent);
    let (reply, events) = driver.finish().await;
    let (stop_reason, _, _) = finished(&events);
    assert!(
        matches!(stop_reason, StopReason::BudgetReached(_)),
        "{stop_reason:?}"
    );
    let memory = check_all(&agent, &events).await;
    let kept = memory
        .iter()
        .find(|m| m.role == Role::Assistant)
        .and_then(Msg::text)
        .unwrap();
    assert!(
        kept.len() >= 400 && kept.len() < words.len() && words.starts_with(&kept),
        "the text streamed before the stop is kept: {} bytes",
        kept.len()
    );
    assert_eq!(reply.unwrap().text().as_deref(), Some(kept.as_str()));
    gate.open();
    common::until(
        "the stream was dropped",
        std::time::Duration::from_millis(5),
        || fake.disconnects() > 0,
    )
    .await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_cost_budget_stops_before_the_calls_and_the_reply_reports_its_cost() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "count", "{}")]).usage(1_000, 1_000));
    let mut prices = PriceTable::new();
    prices.insert("fake-*", Price::new(4.0, 6.0));
    let toolkit = Toolkit::new();
    toolkit.register(counter(Arc::new(Notify::new()))).unwrap();
    let budget = ReplyBudget {
        max_tokens: None,
        max_cost: Some(0.005),
    };
    let agent = budget_agent(&fake, toolkit, budget, prices);
    let (_, driver) = Driver::go(&agent);
    let (_, events) = driver.finish().await;
    let (stop_reason, usage, cost) = finished(&events);
    match &stop_reason {
        StopReason::BudgetReached(text) => assert!(text.contains("$0.0050"), "{text}"),
        other => panic!("stopped by {other:?}"),
    }
    assert_eq!((usage.input_tokens, usage.output_tokens), (1_000, 1_000));
    let cost = cost.unwrap();
    assert!(
        (cost - 0.010).abs() < 1e-9,
        "1k tokens in at $4/M and 1k out at $6/M: {cost}"
    );
    assert_eq!(
        state_of(&events, "c"),
        ToolCallState::Cancelled {
            phase: CancelPhase::BeforeStart,
            partial: false,
            reason: CancelReason::Budget
        },
        "the call the costly answer asked for never runs"
    );
    check_all(&agent, &events).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn without_a_budget_a_reply_reports_usage_and_cost_and_answers() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Fine.").usage(200, 50));
    let mut prices = PriceTable::new();
    prices.insert("fake-model", Price::new(1.0, 2.0));
    let agent = Arc::new(budget_agent(
        &fake,
        Toolkit::new(),
        ReplyBudget::unlimited(),
        prices,
    ));
    let (_, driver) = Driver::go(&agent);
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("Fine."));
    let (stop_reason, usage, cost) = finished(&events);
    assert_eq!(stop_reason, StopReason::Answered);
    assert_eq!((usage.input_tokens, usage.output_tokens), (200, 50));
    assert!((cost.unwrap() - 0.0003).abs() < 1e-12);
}
