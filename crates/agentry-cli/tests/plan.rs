//! `--plan` end to end: the checklist on stderr as the model works through its plan, the hint
//! in each request, and the plan kept with the session across a `kill -9`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common;

use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::program::Program;
use common::{agentry, run_args, text};
use serde_json::{Value, json};

fn plan_args(fake: &FakeLlm, home: &Path, prompt: &str) -> Vec<String> {
    let db = home.join("s.db").display().to_string();
    run_args(
        &fake.base_url(),
        home,
        &["--no-mcp", "--plan", "--session", "s", "--db", &db],
        prompt,
    )
}

fn last_text(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_plan_is_shown_as_it_changes_and_resumes_after_a_kill() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    let create = json!({
        "name": "release",
        "description": "ship version 2",
        "expected_outcome": "version 2 is out",
        "subtasks": [
            {"name": "changelog", "description": "write the changelog", "expected_outcome": "a changelog"},
            {"name": "tag", "description": "tag the release", "expected_outcome": "a tag"},
            {"name": "announce", "description": "announce it", "expected_outcome": "a post"}
        ]
    });
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "create_plan",
        create.to_string(),
    )]));
    fake.push(Reply::tool_calls([Call::new(
        "c2",
        "update_subtask_state",
        r#"{"subtask_idx": 0, "state": "in_progress"}"#,
    )]));
    fake.push(Reply::tool_calls([Call::new(
        "c3",
        "finish_subtask",
        r#"{"subtask_idx": 0, "subtask_outcome": "changelog written"}"#,
    )]));
    let gate = Gate::new();
    fake.push(
        Reply::text("Now tagging the release.")
            .chunks(4)
            .pause_after(2, gate.clone()),
    );
    let program = Program::start(&plan_args(&fake, home, "Ship version 2."), home);
    program.stderr_has("[x] 0. changelog: changelog written").await;
    program.stderr_has("[>] 1. tag").await;
    tokio::time::timeout(std::time::Duration::from_secs(30), gate.reached())
        .await
        .expect("the answer never started");
    program.kill();
    let (status, _, err) = program.finish().await;
    assert_eq!(status.code(), None, "killed: {err}");
    assert!(err.contains("plan: release (0 of 3 done)"), "{err}");
    let requests = fake.requests();
    assert!(last_text(&requests[0].body).contains("create_plan"));
    assert!(last_text(&requests[3].body).contains("working on subtask 1"));

    // The next process continues the plan at subtask 1.
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Tagged."));
    let next = agentry(plan_args(&fake, home, "go on"), home).await;
    assert!(next.status.success(), "{}", text(&next.stderr));
    let request = &fake.requests()[0].body;
    let hint = last_text(request);
    assert!(
        hint.starts_with("<system-hint>") && hint.contains("You are working on subtask 1"),
        "{hint}"
    );
    assert!(hint.contains("- [x] 0. changelog"), "{hint}");
    // The user's message comes right before the hint; no hint of the dead process was stored.
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(messages[messages.len() - 2]["content"], "go on");
    let hints = messages
        .iter()
        .filter(|m| m["content"].as_str().is_some_and(|t| t.contains("<system-hint>")))
        .count();
    assert_eq!(hints, 1);
    fake.assert_no_violations();
}
