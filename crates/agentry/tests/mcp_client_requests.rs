//! What an MCP server asks of agentry during a call, against `server-everything` (spec M5,
//! M8): the roots (the working directory), and sampling with the agent's model under the
//! server's policy: allowed, asked of the user as an approval, or denied.

use std::sync::Arc;

use agentry::agent::AgentEvent;
use agentry::mcp::SamplingPolicy;
use agentry::message::Msg;
use agentry::tool::ApprovalDecision;
use agentry_testkit::{Call, FakeLlm, Reply};

use crate::common::probe::Driver;
use crate::common::{agent, connected, model, peers, tool_message, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_told_the_working_directory_as_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let (client, toolkit) = connected(peers::everything().root(dir.path())).await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("r", "get-roots-list", "{}")]));
    fake.push(Reply::text("Listed."));
    let agent = agent(&fake, true, toolkit);
    within("the reply", agent.reply(Msg::user("roots?")))
        .await
        .unwrap();
    let roots = tool_message(&fake, 1, "r");
    assert!(
        roots.contains(&format!("file://{}", dir.path().display())),
        "{roots}"
    );
    client.close().await;
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_sampling_request_is_answered_by_the_agents_model() {
    let (parent, sampled) = (FakeLlm::start().await, FakeLlm::start().await);
    let (client, toolkit) = connected(peers::everything().sampling(SamplingPolicy::Allow)).await;
    client.set_sampling_model(Arc::new(model(&sampled, false)));
    sampled.push(Reply::text("Sampled words.").usage(30, 4));
    parent.push(
        Reply::tool_calls([Call::new(
            "s",
            "trigger-sampling-request",
            r#"{"prompt": "say something"}"#,
        )])
        .usage(100, 10),
    );
    parent.push(Reply::text("Done.").usage(100, 2));
    let agent = agent(&parent, true, toolkit);
    let mut run = agent.start_reply(Msg::user("sample"));
    let mut usage = None;
    while let Some(event) = within("the events", run.next_event()).await {
        if let AgentEvent::ReplyFinished { usage: u, .. } = event {
            usage = Some(u);
        }
    }
    run.finish().await.unwrap();
    let result = tool_message(&parent, 1, "s");
    assert!(result.contains("Sampled words."), "{result}");
    let asked = sampled.requests()[0].body.to_string();
    assert!(asked.contains("You are a helpful test server."), "{asked}");
    assert!(asked.contains("say something"), "{asked}");
    assert_eq!(
        usage.unwrap().input_tokens,
        230,
        "the sampled tokens count in the reply"
    );
    client.close().await;
    parent.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_is_asked_of_the_user_by_default_and_a_decline_refuses_it() {
    for approve in [true, false] {
        let (parent, sampled) = (FakeLlm::start().await, FakeLlm::start().await);
        let (client, toolkit) = connected(peers::everything()).await;
        client.set_sampling_model(Arc::new(model(&sampled, false)));
        sampled.push(Reply::text("Sampled words."));
        parent.push(Reply::tool_calls([Call::new(
            "s",
            "trigger-sampling-request",
            r#"{"prompt": "say something"}"#,
        )]));
        parent.push(Reply::text("Done."));
        let agent = agent(&parent, true, toolkit);
        let (handle, mut driver) = Driver::go(&agent);
        let asked = driver
            .wait_for(
                "the sampling question",
                |e| matches!(e, AgentEvent::ApprovalRequested { name, .. } if name == "everything: sampling"),
            )
            .await;
        let AgentEvent::ApprovalRequested { call_id, request, .. } = asked else {
            unreachable!()
        };
        assert!(request.preview.unwrap_or_default().contains("say something"));
        let decision = match approve {
            true => ApprovalDecision::Approve,
            false => ApprovalDecision::Decline { reason: None },
        };
        handle.decide(call_id, decision).unwrap();
        driver.finish().await.0.unwrap();
        let result = tool_message(&parent, 1, "s");
        assert_eq!(result.contains("Sampled words."), approve, "{result}");
        assert_eq!(
            sampled.request_count(),
            usize::from(approve),
            "a declined request reaches no model"
        );
        client.close().await;
        parent.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_denied_sampling_is_not_told_the_client_can_sample() {
    let (client, toolkit) = connected(peers::everything().sampling(SamplingPolicy::Deny)).await;
    assert!(
        !toolkit
            .tool_names()
            .iter()
            .any(|n| n == "trigger-sampling-request")
    );
    client.close().await;
    let (client, toolkit) = connected(peers::everything()).await;
    assert!(
        toolkit
            .tool_names()
            .iter()
            .any(|n| n == "trigger-sampling-request")
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_form_is_asked_of_the_user_checked_against_its_schema_and_answered() {
    use agentry::agent::{InputAnswer, InputError};
    for (answer, says) in [
        (
            InputAnswer::Accept(serde_json::json!({"name": "Ada Lovelace", "check": true, "integer": 7})),
            "- Name: Ada Lovelace",
        ),
        (InputAnswer::Decline, "User declined"),
        (InputAnswer::Cancel, "User cancelled"),
    ] {
        let (client, toolkit) = connected(peers::everything()).await;
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([Call::new(
            "e",
            "trigger-elicitation-request",
            "{}",
        )]));
        fake.push(Reply::text("Thanks."));
        let agent = agent(&fake, true, toolkit);
        let (handle, mut driver) = Driver::go(&agent);
        let asked = driver
            .wait_for("the form", |e| matches!(e, AgentEvent::InputRequested { .. }))
            .await;
        let AgentEvent::InputRequested {
            call_id,
            name,
            message,
            schema,
            ..
        } = asked
        else {
            unreachable!()
        };
        assert!(call_id.as_str().starts_with("e."), "{call_id:?}");
        assert_eq!(name, "everything: input");
        assert!(message.contains("Please provide inputs"), "{message}");
        assert_eq!(schema["required"], serde_json::json!(["name"]));
        // An approval decision does not answer a form, and leaves it open.
        assert!(handle.decide(call_id.clone(), ApprovalDecision::Approve).is_err());
        // An answer that does not fit the form is refused, and the form stays open.
        let wrong = handle.answer_input(
            call_id.clone(),
            InputAnswer::Accept(serde_json::json!({"integer": 7})),
        );
        assert!(matches!(wrong, Err(InputError::Invalid(_))), "{wrong:?}");
        handle.answer_input(call_id.clone(), answer.clone()).unwrap();
        assert!(matches!(
            handle.answer_input(call_id, InputAnswer::Decline),
            Err(InputError::NotPending(_))
        ));
        let (reply, events) = driver.finish().await;
        reply.unwrap();
        assert!(
            events
                .iter()
                .any(|e| matches!(e, AgentEvent::InputAnswered { .. }))
        );
        let result = tool_message(&fake, 1, "e");
        assert!(result.contains(says), "{answer:?}: {result}");
        client.close().await;
        fake.assert_no_violations();
    }
}

/// M8: a server that cancels a request it sent us (here a form) has the question withdrawn
/// from the user (`ApprovalWithdrawn` for its id); an answer to it afterwards is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m8_a_question_the_server_cancels_is_withdrawn_from_the_user() {
    use agentry::agent::{InputAnswer, InputError};
    let (client, toolkit) = connected(peers::test_server(&[])).await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("q", "ask_withdrawn", "{}")]));
    fake.push(Reply::text("Fine."));
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    let asked = driver
        .wait_for("the form", |e| matches!(e, AgentEvent::InputRequested { .. }))
        .await;
    let AgentEvent::InputRequested { call_id, .. } = asked else {
        unreachable!()
    };
    // The test server cancels its request when pinged.
    within("the ping", client.ping()).await.unwrap();
    let asked_id = call_id.clone();
    driver
        .wait_for(
            "the withdrawal",
            move |e| matches!(e, AgentEvent::ApprovalWithdrawn { call_id, .. } if *call_id == asked_id),
        )
        .await;
    assert!(matches!(
        handle.answer_input(call_id, InputAnswer::Decline),
        Err(InputError::NotPending(_))
    ));
    driver.finish().await.0.unwrap();
    assert_eq!(tool_message(&fake, 1, "q"), "the question was withdrawn");
    client.close().await;
    fake.assert_no_violations();
}
