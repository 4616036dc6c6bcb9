//! The reply tool over MCP, with rmcp's client: the answer, progress while tools run, the
//! client's cancel reaching the running tool with the partial result handed back, and
//! approvals asked through elicitation, or declined at once when the client cannot be asked.

use agentry::tool::Toolkit;
use agentry_testkit::{Call, FakeLlm, Reply};
use rmcp::model::{CallToolRequestParams, ServerResult};
use serde_json::json;

use crate::common::{Elicit, Slow, connect, server, slow_toolkit, within};

fn search_call() -> Reply {
    Reply::tool_calls([Call::new("c1", "slow_search", "{}")])
}

#[tokio::test]
async fn the_reply_tool_is_listed_with_one_required_prompt_and_answers_it() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Paris is the capital of France."));
    let connected = connect(server(&fake, Toolkit::new()), None).await;

    let tools = connected.client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0].name, "ask");
    assert_eq!(tools[0].input_schema["required"], json!(["prompt"]));
    assert_eq!(tools[0].input_schema["properties"]["prompt"]["type"], "string");

    let params = CallToolRequestParams::new("ask").with_arguments(
        json!({"prompt": "capital of France?"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let result = within("the call", connected.client.call_tool(params))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    let text = serde_json::to_value(&result.content).unwrap();
    assert_eq!(text[0]["text"], "Paris is the capital of France.");
    assert!(fake.requests()[0].body.to_string().contains("capital of France?"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_call_without_a_prompt_is_refused_with_invalid_params() {
    let fake = FakeLlm::start().await;
    let connected = connect(server(&fake, Toolkit::new()), None).await;
    let params = CallToolRequestParams::new("ask")
        .with_arguments(json!({"question": "?"}).as_object().cloned().unwrap());
    let error = within("the call", connected.client.call_tool(params))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("prompt"), "{error}");
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn the_clients_cancel_reaches_the_running_tool_and_the_partial_result_comes_as_progress() {
    let fake = FakeLlm::start().await;
    // The model says something, then calls the slow tool.
    fake.push(search_call().with_text("Searching the archives."));
    let slow = Slow::default();
    let mut connected = connect(server(&fake, slow_toolkit(&slow, false)), None).await;

    let handle = connected
        .start_call("ask", json!({"prompt": "find sources"}))
        .await;
    within("the tool to start", slow.started.notified()).await;
    assert_eq!(connected.progress_until("calling").await, "calling slow_search");
    handle.cancel(Some("the user stopped it".into())).await.unwrap();

    let partial = connected.progress_until("[cancelled]").await;
    assert_eq!(slow.on_cancel_runs(), 1, "the tool's on_cancel ran once");
    assert!(partial.contains("The agent `helper` was stopped"), "{partial}");
    assert!(
        partial.contains("found 2 of 5 sources before the stop"),
        "{partial}"
    );
    assert!(partial.contains("Searching the archives."), "{partial}");
    // No second model request: the reply ended with the cancel.
    assert_eq!(fake.request_count(), 1);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_client_without_elicitation_gets_the_call_declined_at_once_and_the_tool_never_runs() {
    let fake = FakeLlm::start().await;
    fake.push(search_call());
    fake.push(Reply::text("I was not allowed to search."));
    let slow = Slow::default();
    let connected = connect(server(&fake, slow_toolkit(&slow, true)), None).await;

    let params = CallToolRequestParams::new("ask")
        .with_arguments(json!({"prompt": "search"}).as_object().cloned().unwrap());
    let result = within("the call", connected.client.call_tool(params))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    assert_eq!(slow.calls(), 0, "a call nobody approved never runs");
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains("no decision"), "the model reads why: {second}");
    fake.assert_no_violations();
}

#[tokio::test]
async fn approval_is_asked_through_elicitation_naming_the_agent_and_the_tool() {
    for (answer, runs) in [(Elicit::Approve, 1), (Elicit::Refuse, 0)] {
        let fake = FakeLlm::start().await;
        fake.push(search_call());
        fake.push(Reply::text("Done."));
        let slow = Slow::default();
        let mut connected = connect(server(&fake, slow_toolkit(&slow, true)), Some(answer.clone())).await;

        let handle = connected.start_call("ask", json!({"prompt": "search"})).await;
        let question = within("the approval question", connected.questions.recv())
            .await
            .unwrap();
        assert!(
            question.contains("`helper`") && question.contains("`slow_search`"),
            "{question}"
        );
        if runs == 1 {
            within("the approved tool to start", slow.started.notified()).await;
            handle.cancel(None).await.unwrap();
            connected.progress_until("[cancelled]").await;
        } else {
            let response = within("the response", handle.rx).await.unwrap().unwrap();
            assert!(
                matches!(response, ServerResult::CallToolResult(_)),
                "{response:?}"
            );
            assert!(fake.requests()[1].body.to_string().contains("declined"));
        }
        assert_eq!(slow.calls(), runs, "{answer:?}");
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn a_form_a_tool_asks_for_is_passed_on_to_the_client_or_cancelled_when_it_cannot_be_asked() {
    for (elicit, said) in [
        (Some(Elicit::Approve), r#"signed up \"Ada\""#),
        (None, "not signed up: Cancel"),
    ] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([Call::new("s", "sign_up", "{}")]));
        fake.push(Reply::text("Done."));
        let toolkit = Toolkit::new();
        toolkit.register(crate::common::sign_up()).unwrap();
        let connected = connect(server(&fake, toolkit), elicit).await;
        let params = CallToolRequestParams::new("ask")
            .with_arguments(json!({"prompt": "sign up"}).as_object().cloned().unwrap());
        within("the call", connected.client.call_tool(params))
            .await
            .unwrap();
        let result = fake.requests()[1].body["messages"].to_string();
        assert!(result.contains(said), "{said}: {result}");
        fake.assert_no_violations();
    }
}
