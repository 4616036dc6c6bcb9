//! The built `agentry` binary in a conversation: approval prompts answered on stdin, Ctrl-C
//! (a real SIGINT) during a streamed answer and during a prompt, SIGTERM during a tool. Each step
//! waits, with a deadline, for what the program printed, never for a fixed time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry::tool::{CANCELLED_BEFORE_START, declined_text};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::program::Program;
use common::{run_args, slow_tree, tool_message, write_call};

/// `agentry run PROMPT` against the fake model, `workdir` also its HOME.
fn run(fake: &FakeLlm, workdir: &std::path::Path, prompt: &str) -> Program {
    Program::start(
        &run_args(&fake.base_url(), workdir, &["--no-mcp"], prompt),
        workdir,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a10_a_declined_write_is_not_done_and_the_model_reads_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("Understood, I left it."));
    let mut program = run(&fake, dir.path(), "write hello to notes.txt");
    program.stderr_has("? Write notes.txt?").await;
    program.stderr_has("│ hello").await;
    program.type_line("n");
    program.stderr_has("reason for the model").await;
    program.type_line("not today");
    let (status, out, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "Understood, I left it.\n");
    assert!(!dir.path().join("notes.txt").exists());
    assert_eq!(tool_message(&fake, 1, "w"), declined_text(Some("not today")));
    assert!(
        err.contains("⚙ write_file(") && err.contains("✗ The user declined"),
        "{err}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_write_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("Done."));
    let mut program = run(&fake, dir.path(), "write hello to notes.txt");
    program.stderr_has("? Write notes.txt?").await;
    program.type_line("y");
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "hello"
    );
    assert!(err.contains("→ Wrote 5 bytes to notes.txt."), "{err}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_closed_input_declines_as_no_decision() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("OK."));
    let mut program = run(&fake, dir.path(), "write");
    program.stderr_has("? Write notes.txt?").await;
    program.close_stdin();
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert!(!dir.path().join("notes.txt").exists());
    assert_eq!(
        tool_message(&fake, 1, "w"),
        declined_text(Some("no decision")),
        "A15: the reason is \"no decision\""
    );
    // Printed only for an `ApprovalResolved` whose source is `NoDecision`.
    assert!(
        err.contains("no decision: nobody can answer (the input is closed); declined"),
        "the decision source is no_decision: {err}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_closed_input_shows_the_full_question_once_then_one_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new(
            "w1",
            "write_file",
            r#"{"path": "a.txt", "content": "first preview"}"#,
        ),
        Call::new(
            "w2",
            "write_file",
            r#"{"path": "b.txt", "content": "second preview"}"#,
        ),
        Call::new(
            "w3",
            "write_file",
            r#"{"path": "c.txt", "content": "third preview"}"#,
        ),
    ]));
    fake.push(Reply::text("OK."));
    let mut program = run(&fake, dir.path(), "write three files");
    program.close_stdin();
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(err.matches("│ first preview").count(), 1, "{err}");
    assert!(
        !err.contains("│ second preview") && !err.contains("│ third preview"),
        "later previews are not reprinted: {err}"
    );
    for path in ["b.txt", "c.txt"] {
        assert_eq!(
            err.lines()
                .filter(|l| l.contains(&format!("Write {path}?")))
                .count(),
            1,
            "one line for {path}: {err}"
        );
    }
    for call in ["w1", "w2", "w3"] {
        assert_eq!(tool_message(&fake, 1, call), declined_text(Some("no decision")));
    }
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_typed_before_the_question_does_not_answer_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "c",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    // The write call is held back until the early line has been read.
    let gate = agentry_testkit::Gate::new();
    fake.push(write_call().pause_after(1, gate.clone()));
    fake.push(Reply::text("Fine."));
    let mut program = Program::start(&common::chat_args(&fake.base_url(), dir.path()), dir.path());
    program.stderr_has("you> ").await;
    program.type_line("work");
    program.stderr_has("⚙ calculate(").await;
    // Typed while the reply runs, before any question: must not count as an answer.
    program.type_line("y");
    program.stderr_has("typed while the reply runs").await;
    gate.open();
    program.stderr_has("? Write notes.txt?").await;
    program
        .stderr_has("ignored 1 line typed before this question")
        .await;
    program.type_line("n");
    program.stderr_has("reason for the model").await;
    program.type_line("");
    program.stderr_has_n("you> ", 2).await;
    program.close_stdin();
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert!(
        !dir.path().join("notes.txt").exists(),
        "the early \"y\" approved the write: {err}"
    );
    assert_eq!(tool_message(&fake, 2, "w"), declined_text(None));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_tool_runs_cancels_it_like_quitting_and_exits_143() {
    let dir = tempfile::tempdir().unwrap();
    slow_tree(dir.path());
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "s",
        "search_files",
        r#"{"pattern": "needle", "path": "tree"}"#,
    )]));
    fake.push(Reply::text("never asked for"));
    let program = run(&fake, dir.path(), "find the needle");
    program.stderr_has("⋯ search_files: searched").await;
    program.terminate();
    let (status, _, err) = program.finish().await;
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("Terminated: cancelling the reply"), "{err}");
    assert!(
        err.contains("✗ The user cancelled the search after"),
        "the tool's on_cancel text is shown: {err}"
    );
    assert_eq!(fake.request_count(), 1, "no model request after SIGTERM");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_ctrl_c_while_the_answer_streams_cancels_and_keeps_what_was_said() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    // role chunk, then "Hello " and "there" arrive; the rest never comes.
    fake.push(
        Reply::text("Hello there, and more to come")
            .chunks(5)
            .hang_after(3),
    );
    let program = run(&fake, dir.path(), "say hello");
    program.stdout_has("Hello there").await;
    program.interrupt();
    let (status, out, err) = program.finish().await;
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(out.starts_with("Hello there"), "{out}");
    assert!(!out.contains("more to come"));
    assert!(err.contains("Cancelling the reply"), "{err}");
    assert!(err.contains("reply cancelled"), "{err}");
    assert_eq!(fake.request_count(), 1);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_ctrl_c_at_an_approval_prompt_withdraws_it_and_says_what_the_model_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("never asked for"));
    let program = run(&fake, dir.path(), "write");
    program.stderr_has("? Write notes.txt?").await;
    program.interrupt();
    let (status, _, err) = program.finish().await;
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(!dir.path().join("notes.txt").exists());
    let told = &CANCELLED_BEFORE_START[..60];
    assert!(
        err.contains(told),
        "the tool line shows what the model is told: {err}"
    );
    assert_eq!(fake.request_count(), 1, "no model request after the cancel");
    fake.assert_no_violations();
}
