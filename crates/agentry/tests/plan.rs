//! The plan notebook end to end: the model drives a plan through its tools, and every request
//! carries the plan's hint as one user message after the memory, which is never stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry::agent::AgentEvent;
use agentry::message::Msg;
use agentry::plan::{PLAN_GROUP, PLAN_TOOL_NAMES, PlanNotebook, SubTaskState};
use agentry::tool::Toolkit;
use agentry_testkit::{Call, FakeLlm, Reply};
use common::*;
use serde_json::json;

/// The text of the last wire message of request `n`, and its role.
fn last_message(fake: &FakeLlm, n: usize) -> (String, String) {
    let messages = wire_messages(fake, n);
    let last = messages.last().unwrap();
    (
        last["role"].as_str().unwrap().to_owned(),
        last["content"].as_str().unwrap_or_default().to_owned(),
    )
}

fn create_call() -> Call {
    let args = json!({
        "name": "report",
        "description": "write the report",
        "expected_outcome": "a report",
        "subtasks": [
            {"name": "gather", "description": "gather facts", "expected_outcome": "facts"},
            {"name": "write", "description": "write it", "expected_outcome": "text"}
        ]
    });
    Call::new("c1", "create_plan", args.to_string())
}

#[tokio::test]
async fn each_request_ends_with_the_plan_hint_which_memory_never_holds() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([create_call()]));
    fake.push(Reply::tool_calls([Call::new(
        "c2",
        "update_subtask_state",
        r#"{"subtask_idx": 0, "state": "in_progress"}"#,
    )]));
    fake.push(Reply::tool_calls([Call::new(
        "c3",
        "finish_subtask",
        r#"{"subtask_idx": 0, "subtask_outcome": "three facts"}"#,
    )]));
    fake.push(Reply::text("Gathered; writing next."));
    let notebook = PlanNotebook::new();
    let agent = builder(&fake, true, Toolkit::new())
        .plan_notebook(notebook.clone())
        .build()
        .unwrap();
    let mut events = agent.subscribe();
    agent.reply(Msg::user("Write me a report.")).await.unwrap();
    fake.assert_no_violations();

    let tools: Vec<String> = fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tools, PLAN_TOOL_NAMES);
    let hints: Vec<(String, String)> = (0..4).map(|n| last_message(&fake, n)).collect();
    for (role, text) in &hints {
        assert_eq!(role, "user");
        assert!(
            text.starts_with("<system-hint>") && text.ends_with("</system-hint>"),
            "{text}"
        );
    }
    assert!(hints[0].1.contains("create_plan"), "{}", hints[0].1);
    assert!(hints[1].1.contains("No subtask has started"), "{}", hints[1].1);
    assert!(hints[2].1.contains("working on subtask 0"), "{}", hints[2].1);
    assert!(hints[3].1.contains("working on subtask 1"), "{}", hints[3].1);
    // One hint per request: the earlier ones are gone from the next request.
    for n in 0..4 {
        let count = wire_messages(&fake, n)
            .iter()
            .filter(|m| m["content"].as_str().is_some_and(|t| t.contains("<system-hint>")))
            .count();
        assert_eq!(count, 1, "request {n}");
    }
    let memory = consistent_memory(&agent).await;
    assert!(
        memory
            .iter()
            .all(|m| !m.text().unwrap_or_default().contains("<system-hint>")),
        "a hint was stored: {memory:#?}"
    );

    let plan = notebook.current().await.unwrap();
    assert_eq!(plan.subtasks[0].state, SubTaskState::Done);
    assert_eq!(plan.subtasks[0].outcome.as_deref(), Some("three facts"));
    assert_eq!(plan.subtasks[1].state, SubTaskState::InProgress);

    let changes: Vec<Option<Vec<SubTaskState>>> = drain(&mut events)
        .into_iter()
        .filter_map(|event| match event {
            AgentEvent::PlanChanged { plan, .. } => {
                Some(plan.map(|p| p.subtasks.iter().map(|s| s.state).collect()))
            }
            _ => None,
        })
        .collect();
    use SubTaskState::*;
    assert_eq!(
        changes,
        [
            Some(vec![Todo, Todo]),
            Some(vec![InProgress, Todo]),
            Some(vec![Done, InProgress])
        ]
    );
}

#[tokio::test]
async fn a_broken_rule_is_a_result_the_model_reads_and_changes_nothing() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([create_call()]));
    fake.push(Reply::tool_calls([Call::new(
        "c2",
        "finish_subtask",
        r#"{"subtask_idx": 1, "subtask_outcome": "skipped ahead"}"#,
    )]));
    fake.push(Reply::text("I will do the first one first."));
    let notebook = PlanNotebook::new();
    let agent = builder(&fake, false, Toolkit::new())
        .plan_notebook(notebook.clone())
        .build()
        .unwrap();
    agent.reply(Msg::user("Write me a report.")).await.unwrap();
    let result = tool_message(&fake, 2, "c2");
    assert!(
        result.contains(
            "Subtask 0 ('gather') is todo: every subtask before 1 must be done or abandoned first."
        ),
        "{result}"
    );
    let plan = notebook.current().await.unwrap();
    assert_eq!(plan.subtasks[1].state, SubTaskState::Todo);
}

#[tokio::test]
async fn with_the_meta_tool_the_plan_tools_are_the_group_plan_related() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("ok"));
    let toolkit = Toolkit::new();
    let agent = builder(&fake, false, toolkit.clone())
        .enable_meta_tool(true)
        .plan_notebook(PlanNotebook::new())
        .build()
        .unwrap();
    agent.reply(Msg::user("hi")).await.unwrap();
    let group = toolkit
        .groups()
        .into_iter()
        .find(|g| g.name == PLAN_GROUP)
        .expect("the plan group");
    assert!(group.active);
    let tools = fake.requests()[0].body["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"reset_equipped_tools") && names.contains(&"create_plan"),
        "{names:?}"
    );
}
