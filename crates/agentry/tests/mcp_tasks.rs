//! Task-augmented tool calls against `server-everything`'s `simulate-research-query`, a tool
//! that runs only as an MCP task (spec 2025-11-25, "Tasks"): created, polled with its status
//! shown as progress, its elicitation asked of the user, its result read with `tasks/result`,
//! and a user cancel sent as `tasks/cancel`.

use std::time::Duration;

use agentry::agent::{AgentEvent, InputAnswer};
use agentry::mcp::{McpServerConfig, TaskSupport};
use agentry_testkit::{Call, FakeLlm, Reply};

use crate::common::probe::Driver;
use crate::common::{agent, connected, peers, tool_message, within};

const RESEARCH: &str = "simulate-research-query";

fn research(fake: &FakeLlm, args: &str) {
    fake.push(Reply::tool_calls([Call::new("t", RESEARCH, args)]));
    fake.push(Reply::text("Researched."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_tool_is_called_as_a_task_and_its_stages_show_as_progress() {
    // Over stdio (the tap on stdout reads the task support) and HTTP (read on the side).
    let http = peers::EverythingHttp::start(peers::free_port()).await;
    for config in [
        peers::everything(),
        McpServerConfig::http("everything", http.url()),
    ] {
        let (client, toolkit) = connected(config).await;
        let listed = client.list_tools().await.unwrap();
        let support = |name: &str| listed.iter().find(|t| t.name == name).map(|t| t.task_support);
        assert_eq!(support(RESEARCH), Some(TaskSupport::Required));
        assert_eq!(support("echo"), Some(TaskSupport::Forbidden));

        let fake = FakeLlm::start().await;
        research(&fake, r#"{"topic": "tide pools"}"#);
        let agent = agent(&fake, true, toolkit);
        let (_, driver) = Driver::go(&agent);
        let (reply, events) = driver.finish().await;
        reply.unwrap();
        let result = tool_message(&fake, 1, "t");
        assert!(result.contains("# Research Report: tide pools"), "{result}");
        let progress: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolProgress { message, .. } => Some(message.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            progress.iter().any(|m| m.starts_with("Gathering sources")),
            "{progress:?}"
        );
        let tasks = client.tasks().await.unwrap();
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        assert_eq!(tasks[0].status, "completed");
        client.close().await;
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_question_is_asked_of_the_user_and_the_answer_shapes_the_result() {
    let (client, toolkit) = connected(peers::everything()).await;
    let fake = FakeLlm::start().await;
    research(&fake, r#"{"topic": "python", "ambiguous": true}"#);
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    let asked = driver
        .wait_for("the clarification", |e| {
            matches!(e, AgentEvent::InputRequested { .. })
        })
        .await;
    let AgentEvent::InputRequested { call_id, message, .. } = asked else {
        unreachable!()
    };
    assert!(message.contains("multiple interpretations"), "{message}");
    handle
        .answer_input(
            call_id,
            InputAnswer::Accept(serde_json::json!({"interpretation": "snake"})),
        )
        .unwrap();
    driver.finish().await.0.unwrap();
    let result = tool_message(&fake, 1, "t");
    assert!(result.contains("python (snake)"), "{result}");
    client.close().await;
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_cancels_the_task_on_the_server() {
    let (client, toolkit) = connected(peers::everything()).await;
    let fake = FakeLlm::start().await;
    research(&fake, r#"{"topic": "glaciers"}"#);
    let agent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&agent);
    driver
        .wait_for("the first stage", |e| {
            matches!(e, AgentEvent::ToolProgress { message, .. } if message.starts_with("Gathering sources"))
        })
        .await;
    handle.cancel_call("t");
    driver.finish().await.0.unwrap();
    let result = tool_message(&fake, 1, "t");
    assert!(result.to_lowercase().contains("cancel"), "{result}");
    // The server hears it: the task ends cancelled, not completed (its four stages take 4 s).
    let status = within("the task's end", async {
        loop {
            let tasks = client.tasks().await.unwrap();
            if let Some(task) = tasks.first().filter(|t| t.is_terminal()) {
                return task.status.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(status, "cancelled");
    client.close().await;
    fake.assert_no_violations();
}
