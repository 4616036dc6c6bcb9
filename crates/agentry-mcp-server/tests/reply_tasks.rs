//! The reply tool as an MCP task, for a client of the tasks extension (rmcp's client): the task
//! is polled to its result, an approval is one of its input requests, and `tasks/cancel` stops
//! the reply, its partial result becoming the task's result.

use std::time::Duration;

use agentry::tool::Toolkit;
use agentry_testkit::{Call, FakeLlm, Reply};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, DetailedTask, GetTaskParams, TaskPayload,
    UpdateTaskParams,
};
use serde_json::{Value, json};

use crate::common::{Connected, Elicit, Slow, connect_with, server, slow_toolkit, within};

fn ask(prompt: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("ask")
        .with_arguments(json!({ "prompt": prompt }).as_object().cloned().unwrap())
}

async fn start_task(connected: &Connected, prompt: &str) -> String {
    match within("the task", connected.client.call_tool_once(ask(prompt)))
        .await
        .unwrap()
    {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("not a task: {other:?}"),
    }
}

/// Polls the task (every 20 ms, as a client would at a short interval) until `done` holds.
async fn poll_until(
    connected: &Connected,
    task_id: &str,
    done: impl Fn(&DetailedTask) -> bool,
) -> DetailedTask {
    within("the task's state", async {
        loop {
            let state = connected
                .client
                .get_task(GetTaskParams::new(task_id))
                .await
                .unwrap()
                .task;
            if done(&state) {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn result_text(state: &DetailedTask) -> String {
    match &state.payload {
        TaskPayload::Completed { result } => result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        other => panic!("not completed: {other:?}"),
    }
}

/// Once the slow tool runs, cancels the task.
async fn cancel_once_running(connected: &Connected, slow: &Slow, task_id: &str) {
    within("the tool to start", slow.started.notified()).await;
    connected
        .client
        .cancel_task(CancelTaskParams::new(task_id))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_client_of_the_tasks_extension_gets_the_reply_as_a_task_and_its_answer_as_the_result() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Paris is the capital of France."));
    let connected = connect_with(server(&fake, Toolkit::new()), None, true).await;
    let task_id = start_task(&connected, "capital of France?").await;
    let done = poll_until(&connected, &task_id, |t| {
        !matches!(t.payload, TaskPayload::Working)
    })
    .await;
    assert_eq!(result_text(&done), "Paris is the capital of France.");
    fake.assert_no_violations();
}

#[tokio::test]
async fn cancelling_the_task_stops_the_reply_and_its_partial_result_is_the_tasks_result() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c1", "slow_search", "{}")]).with_text("Searching the archives."));
    let slow = Slow::default();
    let connected = connect_with(server(&fake, slow_toolkit(&slow, false)), None, true).await;
    let task_id = start_task(&connected, "find sources").await;
    cancel_once_running(&connected, &slow, &task_id).await;
    let done = poll_until(&connected, &task_id, |t| {
        !matches!(t.payload, TaskPayload::Working)
    })
    .await;
    let partial = result_text(&done);
    assert_eq!(slow.on_cancel_runs(), 1, "the tool's on_cancel ran once");
    assert!(partial.starts_with("[cancelled]"), "{partial}");
    assert!(
        partial.contains("found 2 of 5 sources before the stop"),
        "{partial}"
    );
    assert!(partial.contains("Searching the archives."), "{partial}");
    assert_eq!(fake.request_count(), 1, "the reply ended with the cancel");
    fake.assert_no_violations();
}

#[tokio::test]
async fn an_approval_is_an_input_request_of_the_task_and_the_answer_decides_the_call() {
    for (approve, runs) in [(true, 1), (false, 0)] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::tool_calls([Call::new("c1", "slow_search", "{}")]));
        fake.push(Reply::text("Done."));
        let slow = Slow::default();
        let connected = connect_with(
            server(&fake, slow_toolkit(&slow, true)),
            Some(Elicit::Refuse),
            true,
        )
        .await;
        let task_id = start_task(&connected, "search").await;
        let waiting = poll_until(&connected, &task_id, |t| {
            matches!(t.payload, TaskPayload::InputRequired { .. })
        })
        .await;
        let TaskPayload::InputRequired { input_requests } = waiting.payload else {
            unreachable!()
        };
        let wire = serde_json::to_value(&input_requests).unwrap();
        let (key, request) = wire.as_object().unwrap().iter().next().unwrap();
        assert_eq!(request["method"], "elicitation/create", "{request}");
        let message = request["params"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("slow_search"), "{message}");
        let answer = json!({"action": "accept", "content": {"approve": approve}});
        let responses = serde_json::from_value(json!({ key.clone(): answer })).unwrap();
        connected
            .client
            .update_task(UpdateTaskParams::new(&task_id, responses))
            .await
            .unwrap();
        if approve {
            // The approved tool runs (until cancelled: it never ends by itself).
            cancel_once_running(&connected, &slow, &task_id).await;
        }
        let done = poll_until(&connected, &task_id, |t| {
            !matches!(
                t.payload,
                TaskPayload::Working | TaskPayload::InputRequired { .. }
            )
        })
        .await;
        let text = result_text(&done);
        assert_eq!(slow.calls(), runs, "approved: {approve}");
        if approve {
            assert!(text.contains("found 2 of 5 sources before the stop"), "{text}");
        } else {
            assert_eq!(text, "Done.");
            let second: Value = fake.requests()[1].body.clone();
            assert!(second.to_string().contains("declined"), "{second}");
        }
        fake.assert_no_violations();
    }
}
