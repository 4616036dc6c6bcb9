//! `agentry chat` on a pseudo-terminal, as a person uses it: prompts edited with the keys of a
//! terminal and recalled from the session's history, "waiting for the model" until it answers,
//! a tool call's arguments shown as the model writes them, a live line for a running tool, an
//! approval asked inline, and Ctrl-C (the byte the keyboard sends) cancelling the running call,
//! not the program.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::tty::{Tty, keys};
use common::{chat_args, slow_tree, tool_message, write_call};

/// The text of the last user message in request `n`.
fn last_prompt(fake: &FakeLlm, n: usize) -> String {
    fake.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap()
}

fn session_chat(fake: &FakeLlm, dir: &std::path::Path) -> Tty {
    let mut args = chat_args(&fake.base_url(), dir);
    args.extend([
        "--session".into(),
        "demo".into(),
        "--db".into(),
        dir.join("sessions.db").display().to_string(),
    ]);
    Tty::start(&args, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_on_a_terminal_edits_shows_live_lines_and_ctrl_c_cancels_the_running_call() {
    let dir = tempfile::tempdir().unwrap();
    slow_tree(dir.path());
    let fake = FakeLlm::start().await;
    let first_token = Gate::new();
    fake.push(Reply::text("Hi there!").pause_after(0, first_token.clone()));
    // The call's arguments stop half-written until the test has seen them.
    let half_written = Gate::new();
    fake.push(
        Reply::tool_calls([Call::new(
            "s",
            "search_files",
            r#"{"pattern": "needle", "path": "tree"}"#,
        )])
        .chunks(4)
        .pause_after(3, half_written.clone()),
    );
    fake.push(Reply::text("Stopped where you said."));
    fake.push(write_call());
    fake.push(Reply::text("Written."));

    let mut tty = session_chat(&fake, dir.path());
    tty.shows("you> ");
    tty.enter("hello");
    tty.shows("waiting for the model");
    first_token.reached().await;
    first_token.open();
    tty.shows("Hi there!");

    // Edited with the terminal's keys: a typo removed with backspace, a word inserted after
    // moving left. Through a pipe these keys would reach the model as they are.
    tty.shows("you> ");
    tty.press("find the needlX");
    tty.press(keys::BACKSPACE);
    tty.press("e");
    for _ in 0.."needle".len() {
        tty.press(keys::LEFT);
    }
    tty.press("big ");
    tty.press(keys::ENTER);
    half_written.reached().await;
    tty.shows("✎ search_files({\"pattern");
    half_written.open();
    tty.shows("⋯ searched");
    tty.press(keys::CTRL_C);
    tty.shows("Cancelling search_files");
    tty.shows("Stopped where you said.");
    assert_eq!(last_prompt(&fake, 1), "find the big needle");
    assert!(
        tool_message(&fake, 2, "s").contains("The user cancelled the search after"),
        "the model reads the tool's partial result"
    );

    // An approval asked inline, answered with a key.
    tty.shows("you> ");
    tty.enter("write it down");
    tty.shows("? Write notes.txt?");
    tty.shows("[s] decline and stop > ");
    tty.enter("y");
    tty.shows("Written.");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "hello"
    );

    tty.shows("you> ");
    tty.enter("/quit");
    assert_eq!(tty.exit_code(), 0);
    fake.assert_no_violations();

    // The session's prompts come back with the up arrow after a restart.
    fake.push(Reply::text("Same again."));
    let mut tty = session_chat(&fake, dir.path());
    tty.shows("you> ");
    tty.press(keys::UP);
    tty.shows("write it down");
    tty.press(keys::UP);
    tty.shows("find the big needle");
    tty.press(keys::ENTER);
    tty.shows("Same again.");
    assert_eq!(last_prompt(&fake, 5), "find the big needle");
    tty.shows("you> ");
    tty.press(keys::CTRL_C);
    tty.shows("Ctrl-C again to quit");
    // Ctrl-D once the prompt is back: a key sent while the line editor was not reading could be
    // dropped as it takes the terminal again.
    tty.shows("you> ");
    tty.press(keys::CTRL_D);
    assert_eq!(tty.exit_code(), 0);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_typed_while_the_reply_runs_steers_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    let answering = Gate::new();
    fake.push(
        Reply::text("A very long answer about every detail.")
            .chunks(4)
            .pause_after(2, answering.clone()),
    );
    fake.push(Reply::text("Short: fine."));
    let mut tty = Tty::start(&chat_args(&fake.base_url(), dir.path()), dir.path());
    tty.shows("you> ");
    tty.enter("explain it");
    answering.reached().await;
    tty.enter("keep it short");
    tty.shows("added to it; the agent reads it before its next step");
    answering.open();
    tty.shows("Short: fine.");
    assert_eq!(fake.request_count(), 2);
    assert_eq!(last_prompt(&fake, 1), "keep it short");
    tty.shows("you> ");
    tty.enter("/quit");
    assert_eq!(tty.exit_code(), 0);
    fake.assert_no_violations();
}

/// A sub-agent's running tool shows as a nested live line under the parent's call, and Ctrl-C
/// cancels the parent's call, the sub-agent's tool with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_running_tool_is_a_nested_live_line() {
    let dir = tempfile::tempdir().unwrap();
    slow_tree(dir.path());
    let (parent, child) = (FakeLlm::start().await, FakeLlm::start().await);
    let config = dir.path().join("config.json");
    let agents = serde_json::json!({"agents": {"researcher": {
        "description": "Finds things in files",
        "base_url": child.base_url(),
        "tools": ["search_files"]
    }}});
    std::fs::write(&config, agents.to_string()).unwrap();
    parent.push(Reply::tool_calls([Call::new(
        "r",
        "researcher",
        r#"{"prompt": "Where is the needle?"}"#,
    )]));
    parent.push(Reply::text("Stopped."));
    child.push(Reply::tool_calls([Call::new(
        "s",
        "search_files",
        r#"{"pattern": "needle", "path": "tree"}"#,
    )]));
    let mut args = chat_args(&parent.base_url(), dir.path());
    args.extend(["--config".into(), config.display().to_string()]);
    let mut tty = Tty::start(&args, dir.path());
    tty.shows("you> ");
    tty.enter("ask the researcher");
    // (Its first report, the call with its arguments, is replaced at once by its progress.)
    tty.shows("↳ researcher: search_files ⋯ searched");
    tty.press(keys::CTRL_C);
    tty.shows("Stopped.");
    assert!(
        tool_message(&parent, 1, "r").contains("The user cancelled the search after"),
        "the parent's model reads the sub-agent's partial result"
    );
    tty.shows("you> ");
    tty.enter("/quit");
    assert_eq!(tty.exit_code(), 0);
    parent.assert_no_violations();
    child.assert_no_violations();
}
