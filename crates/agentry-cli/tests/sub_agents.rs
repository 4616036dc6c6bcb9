//! Sub-agents from the config (`"agents"`): the agent sees a tool per sub-agent, which runs a
//! reply of its own on its own model, with only the tools it was given.

use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::json;

use crate::common::program::Program;
use crate::common::{agentry, run_args, text, tool_message, write_call};

#[tokio::test]
async fn a_sub_agent_answers_on_its_own_model_with_only_its_tools_and_its_answer_is_the_calls_result() {
    let (parent, child) = (FakeLlm::start().await, FakeLlm::start().await);
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.json");
    let agents = json!({"agents": {"researcher": {
        "description": "Finds facts and checks them",
        "base_url": child.base_url(),
        "model": "small-model",
        "tools": ["calculate"],
        "system_prompt": "You research."
    }}});
    std::fs::write(&config, agents.to_string()).unwrap();
    parent.push(Reply::tool_calls([Call::new(
        "r",
        "researcher",
        r#"{"prompt": "What is 6*7?"}"#,
    )]));
    parent.push(Reply::text("The researcher found 42."));
    child.push(Reply::tool_calls([Call::new(
        "c",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    child.push(Reply::text("6*7 is 42."));

    let config = config.display().to_string();
    let out = agentry(
        run_args(
            &parent.base_url(),
            home.path(),
            &["--no-mcp", "--config", &config],
            "ask the researcher",
        ),
        home.path(),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("The researcher found 42."));
    // The sub-agent's call shows nested under the parent's: the call, then its result.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(r#"    ↳ researcher: calculate({"expression":"6*7"})"#),
        "{stderr}"
    );
    assert!(stderr.contains("    ↳ researcher: calculate → 42"), "{stderr}");

    // The parent sees the sub-agent as a tool, described as configured.
    let offered = parent.requests()[0].body["tools"].to_string();
    assert!(
        offered.contains("\"researcher\"") && offered.contains("Finds facts and checks them"),
        "{offered}"
    );
    // The child ran on its own model, with its prompt, the parent's question and only its tool.
    let asked = &child.requests()[0].body;
    assert_eq!(asked["model"], "small-model");
    assert_eq!(asked["messages"][0]["content"], "You research.");
    assert!(asked["messages"].to_string().contains("What is 6*7?"));
    let tools: Vec<String> = asked["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tools, ["calculate"]);
    assert_eq!(tool_message(&parent, 1, "r"), "6*7 is 42.");
    parent.assert_no_violations();
    child.assert_no_violations();
}

#[tokio::test]
async fn a_sub_agent_without_a_description_or_with_an_unknown_tool_stops_the_command_at_once() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    for (agents, says) in [
        (json!({"helper": {"description": " "}}), "needs a \"description\""),
        (
            json!({"helper": {"description": "Helps", "tools": ["no_such_tool"]}}),
            "no_such_tool",
        ),
    ] {
        let config = home.path().join("config.json");
        std::fs::write(&config, json!({ "agents": agents }).to_string()).unwrap();
        let config = config.display().to_string();
        let out = agentry(
            run_args(
                &fake.base_url(),
                home.path(),
                &["--no-mcp", "--config", &config],
                "hi",
            ),
            home.path(),
        )
        .await;
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_write_is_asked_of_the_user_naming_the_sub_agent_and_done_once_approved() {
    let (parent, child) = (FakeLlm::start().await, FakeLlm::start().await);
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.json");
    let agents = json!({"agents": {"scribe": {
        "description": "Writes notes", "base_url": child.base_url(), "tools": ["write_file"]
    }}});
    std::fs::write(&config, agents.to_string()).unwrap();
    parent.push(Reply::tool_calls([Call::new(
        "s",
        "scribe",
        r#"{"prompt": "write hello"}"#,
    )]));
    parent.push(Reply::text("The scribe wrote it."));
    child.push(write_call());
    child.push(Reply::text("Written."));

    let config = config.display().to_string();
    let mut program = Program::start(
        &run_args(
            &parent.base_url(),
            home.path(),
            &["--no-mcp", "--config", &config],
            "take a note",
        ),
        home.path(),
    );
    program.stderr_has("? Write notes.txt?").await;
    program.stderr_has("The agent `scribe` asks").await;
    program.type_line("y");
    let (status, out, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "The scribe wrote it.\n");
    assert_eq!(
        std::fs::read_to_string(home.path().join("notes.txt")).unwrap(),
        "hello"
    );
    assert!(tool_message(&child, 1, "w").contains("Wrote 5 bytes"));
    parent.assert_no_violations();
    child.assert_no_violations();
}

/// In a session, each call's conversation of a sub-agent is a child session (`SESSION/AGENT/CALL`),
/// stored as it goes. Killed while the sub-agent's tool runs, the next process closes the
/// parent's call and the sub-agent's own call alike: one result for every call, at every level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_conversation_is_kept_with_the_session_and_closed_whole_after_a_crash() {
    use crate::common::slow_tree;
    use crate::sessions::{sessions, shown};
    let (parent, child) = (FakeLlm::start().await, FakeLlm::start().await);
    let home = tempfile::tempdir().unwrap();
    slow_tree(home.path());
    let config = home.path().join("config.json");
    let agents = json!({"agents": {"researcher": {
        "description": "Finds things in files",
        "base_url": child.base_url(),
        "tools": ["search_files"]
    }}});
    std::fs::write(&config, agents.to_string()).unwrap();
    let (config, db) = (
        config.display().to_string(),
        home.path().join("s.db").display().to_string(),
    );
    let args = |fake: &FakeLlm, prompt: &str| {
        run_args(
            &fake.base_url(),
            home.path(),
            &["--no-mcp", "--config", &config, "--session", "work", "--db", &db],
            prompt,
        )
    };
    parent.push(Reply::tool_calls([Call::new(
        "r",
        "researcher",
        r#"{"prompt": "Where is the fox?"}"#,
    )]));
    child.push(Reply::tool_calls([Call::new(
        "s",
        "search_files",
        r#"{"pattern": "fox", "path": "tree"}"#,
    )]));
    let first = Program::start(&args(&parent, "ask the researcher"), home.path());
    // The sub-agent's search runs (its progress shows as the parent call's).
    first.stderr_has("researcher: search_files").await;
    first.kill();
    let (status, _, _) = first.finish().await;
    assert_eq!(status.code(), None, "killed");

    let child_session = "work/researcher/r";
    let kept = shown(home.path(), child_session).await;
    let texts = kept["messages"].to_string();
    assert!(texts.contains("Where is the fox?"), "{kept}");
    assert_eq!(kept["calls"][0]["call_id"], "s", "{kept}");

    let next = FakeLlm::start().await;
    next.push(Reply::text("Carrying on."));
    let out = agentry(args(&next, "carry on"), home.path()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    next.assert_no_violations();
    assert!(
        tool_message(&next, 0, "r").contains("interrupted"),
        "the parent's call is closed"
    );
    // The child's conversation is whole again: its running call closed with one result.
    let kept = shown(home.path(), child_session).await;
    for call in kept["calls"].as_array().unwrap() {
        assert_eq!(call["status"]["status"], "finished", "{call}");
    }
    let blocks: Vec<serde_json::Value> = kept["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    let results = blocks
        .iter()
        .filter(|b| b["type"] == "tool_result" && b["id"] == "s")
        .count();
    assert_eq!(results, 1, "{kept}");
    let listed = agentry(sessions(home.path(), &["list", "--json"]), home.path()).await;
    let listed = text(&listed.stdout);
    assert!(listed.contains(child_session), "{listed}");
    parent.assert_no_violations();
    child.assert_no_violations();
}
