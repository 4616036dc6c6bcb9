//! Steering a running reply (`AgentHandle::steer`): the user's message joins the conversation
//! before the next model request, running tools go on undisturbed, and it is stored and shown.

use agentry::agent::{AgentEvent, SteerError};
use agentry::message::{Msg, Role};
use agentry::tool::Toolkit;
use agentry_testkit::{Call, FakeLlm, Gate, Reply};

use crate::common::probe::{Driver, Probe};
use crate::common::{agent, consistent_memory, wire_messages, within};

#[tokio::test]
async fn a_message_added_while_a_tool_runs_reaches_the_next_request_and_the_tool_goes_on() {
    let fake = FakeLlm::start().await;
    let probe = Probe::new();
    let toolkit = Toolkit::new();
    toolkit.register(probe.tool("read_notes")).unwrap();
    fake.push(Reply::tool_calls([Call::new(
        "r",
        "read_notes",
        r#"{"wait": true, "result": "the notes"}"#,
    )]));
    fake.push(Reply::text("Read them, and the other file too."));
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(1).await;

    handle.steer(Msg::user("also check the other file")).unwrap();
    probe.release();
    let shown = driver
        .wait_for(
            "the steering message shown",
            |e| matches!(e, AgentEvent::Message { msg, last: true } if msg.role == Role::User),
        )
        .await;
    let AgentEvent::Message { msg, .. } = shown else {
        unreachable!()
    };
    assert_eq!(msg.text().unwrap(), "also check the other file");
    let (answer, events) = driver.finish().await;
    assert_eq!(
        answer.unwrap().text().unwrap(),
        "Read them, and the other file too."
    );
    assert_eq!(probe.on_cancel_runs(), 0, "the running tool was not disturbed");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::CancelRequested { .. }))
    );

    // The second request: the tool's result, then the user's added message.
    let messages = wire_messages(&fake, 1);
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(messages[n - 1]["role"], "user");
    assert_eq!(messages[n - 1]["content"], "also check the other file");
    // Stored in order, every call with its one result.
    let memory = consistent_memory(&agent).await;
    assert!(
        memory
            .iter()
            .any(|m| m.text().as_deref() == Some("also check the other file"))
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_message_added_while_the_model_answers_makes_the_reply_go_on_so_the_model_reads_it() {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    fake.push(
        Reply::text("Here is the summary of everything.")
            .chunks(4)
            .pause_after(2, gate.clone()),
    );
    fake.push(Reply::text("Shorter: all good."));
    let agent = agent(&fake, true, Toolkit::new());
    let (handle, driver) = Driver::go(&agent);
    gate.reached().await;
    handle.steer(Msg::user("make it shorter")).unwrap();
    gate.open();
    let (answer, _) = driver.finish().await;
    assert_eq!(answer.unwrap().text().unwrap(), "Shorter: all good.");
    assert_eq!(fake.request_count(), 2);
    let messages = wire_messages(&fake, 1);
    let n = messages.len();
    assert_eq!(
        messages[n - 2]["role"],
        "assistant",
        "the first answer stays in the conversation"
    );
    assert_eq!(messages[n - 1]["content"], "make it shorter");
    fake.assert_no_violations();
}

#[tokio::test]
async fn steering_without_a_running_reply_hands_the_message_back() {
    let fake = FakeLlm::start().await;
    let agent = agent(&fake, true, Toolkit::new());
    match agent.handle().steer(Msg::user("hello?")) {
        Err(SteerError::NotReplying(msg)) => assert_eq!(msg.text().unwrap(), "hello?"),
        other => panic!("{other:?}"),
    }
    fake.push(Reply::text("Hi."));
    within("a reply", agent.reply(Msg::user("hi"))).await.unwrap();
    assert!(matches!(
        agent.handle().steer(Msg::user("late")),
        Err(SteerError::NotReplying(_))
    ));
}
