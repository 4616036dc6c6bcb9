//! Durable sessions from the command line: `--session` continues a conversation across
//! processes, also after `kill -9`; `agentry sessions` lists, shows, exports, imports and
//! deletes them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry::tool::INTERRUPTED_RESTART;
use agentry_store::REPLY_INTERRUPTED_BY_RESTART;
use agentry_testkit::{Call, FakeLlm, Reply};
use common::program::Program;
use common::{agentry, run_args, text, write_call};
use serde_json::Value;

pub fn sessions(home: &std::path::Path, args: &[&str]) -> Vec<String> {
    std::iter::once("sessions")
        .chain(args.iter().copied())
        .map(str::to_owned)
        .chain(["--db".to_owned(), home.join("s.db").display().to_string()])
        .collect()
}

fn with_session(fake: &FakeLlm, home: &std::path::Path, prompt: &str) -> Vec<String> {
    let db = home.join("s.db").display().to_string();
    run_args(
        &fake.base_url(),
        home,
        &["--no-mcp", "--session", "work", "--db", &db],
        prompt,
    )
}

/// `agentry sessions show NAME --json` of the database in `home`.
pub async fn shown(home: &std::path::Path, name: &str) -> Value {
    let out = agentry(sessions(home, &["show", name, "--json"]), home).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The roles and contents of request `n`'s messages, the system prompt left out.
fn conversation(fake: &FakeLlm, n: usize) -> Vec<(String, String)> {
    fake.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            // An assistant message that only calls a tool is shown as the tool's name.
            let content = match (&m["content"], m["tool_calls"][0]["function"]["name"].as_str()) {
                (Value::String(s), Some(name)) if s.is_empty() => name.to_owned(),
                (Value::Null, Some(name)) => name.to_owned(),
                (Value::String(s), _) => s.clone(),
                (other, _) => other.to_string(),
            };
            (m["role"].as_str().unwrap().to_owned(), content)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_continues_in_the_next_process_and_is_listed_shown_exported_imported_deleted() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    fake.push(Reply::text("It is 42."));
    fake.push(Reply::text("Doubled, 84."));
    let first = agentry(with_session(&fake, home, "What is 6*7?"), home).await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = agentry(with_session(&fake, home, "And doubled?"), home).await;
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "Doubled, 84.\n");
    let seen = conversation(&fake, 2);
    let expected: Vec<(String, String)> = [
        ("user", "What is 6*7?"),
        ("assistant", "calculate"),
        ("tool", "42"),
        ("assistant", "It is 42."),
        ("user", "And doubled?"),
    ]
    .iter()
    .map(|(r, c)| ((*r).to_owned(), (*c).to_owned()))
    .collect();
    assert_eq!(
        seen, expected,
        "the second process's request holds the first conversation"
    );
    fake.assert_no_violations();

    let listed = agentry(sessions(home, &["list", "--json"]), home).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["name"], "work");
    assert_eq!(listed[0]["message_count"], 6);

    let page = agentry(sessions(home, &["show", "work"]), home).await;
    let page = text(&page.stdout);
    assert!(page.contains("you: What is 6*7?"), "{page}");
    assert!(page.contains("agent -> calculate("), "{page}");
    assert!(page.contains("<- calculate [completed]: 42"), "{page}");

    let file = home.join("work.json");
    let exported = agentry(
        sessions(home, &["export", "work", "-o", file.to_str().unwrap()]),
        home,
    )
    .await;
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let again = agentry(
        sessions(home, &["export", "work", "-o", file.to_str().unwrap()]),
        home,
    )
    .await;
    assert!(!again.status.success(), "an export never overwrites a file");
    let imported = agentry(
        sessions(
            home,
            &["import", file.to_str().unwrap(), "--name", "copy", "--json"],
        ),
        home,
    )
    .await;
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let original: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let copy = shown(home, "copy").await;
    assert_eq!(copy["messages"], original["messages"]);
    assert_eq!(copy["calls"], original["calls"]);
    assert_eq!(
        copy["calls"][0]["status"]["outcome"]["state"], "completed",
        "{}",
        copy["calls"]
    );
    assert!(
        copy["calls"][0]["started_at"].is_string(),
        "the start was recorded"
    );

    let deleted = agentry(sessions(home, &["delete", "work", "--json"]), home).await;
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let missing = agentry(sessions(home, &["show", "work"]), home).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("no session named work"),
        "{}",
        text(&missing.stderr)
    );
    let listed = agentry(sessions(home, &["list", "--json"]), home).await;
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["name"], "copy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn y4_killed_while_an_approval_waits_the_next_process_closes_it_by_choice_and_tells_the_model() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    let program = Program::start(&with_session(&fake, home, "write hello to notes.txt"), home);
    program.stderr_has("? Write notes.txt?").await;
    let pid = rustix::process::Pid::from_raw(program.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let (status, _, _) = program.finish().await;
    assert_eq!(status.code(), None, "killed");

    // A second writer is refused while... nobody holds it now: the next process continues.
    fake.push(Reply::text("The write did not happen; shall I try again?"));
    let db = home.join("s.db").display().to_string();
    let next = agentry(
        run_args(
            &fake.base_url(),
            home,
            &["--no-mcp", "--session", "work", "--db", &db, "--close-pending"],
            "what happened?",
        ),
        home,
    )
    .await;
    let err = text(&next.stderr);
    assert!(next.status.success(), "{err}");
    assert!(err.contains("left in the middle of a reply"), "{err}");
    let seen = conversation(&fake, 1);
    assert_eq!(
        seen[0],
        ("user".to_owned(), "write hello to notes.txt".to_owned())
    );
    assert_eq!(seen[1].0, "assistant");
    assert_eq!(seen[2], ("tool".to_owned(), INTERRUPTED_RESTART.to_owned()));
    assert_eq!(
        seen[3],
        ("user".to_owned(), REPLY_INTERRUPTED_BY_RESTART.to_owned())
    );
    assert_eq!(seen[4], ("user".to_owned(), "what happened?".to_owned()));
    assert!(
        !home.join("notes.txt").exists(),
        "the write was never run, then or after"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_on_a_session_is_refused_with_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    let mut first = Program::start(&with_session(&fake, home, "write hello"), home);
    first.stderr_has("? Write notes.txt?").await;
    let second = agentry(with_session(&fake, home, "meanwhile"), home).await;
    let err = text(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains("another agentry is using the session"), "{err}");
    let shown = agentry(sessions(home, &["show", "work"]), home).await;
    assert!(
        shown.status.success(),
        "a reader is not refused: {}",
        text(&shown.stderr)
    );
    first.type_line("n");
    first.stderr_has("reason for the model").await;
    fake.push(Reply::text("Left it."));
    first.type_line("");
    let (status, _, err) = first.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(
        fake.requests().len(),
        2,
        "the refused process never asked the model"
    );
}

/// One process writes a session step after step while another reads it again and again with
/// `sessions show`: every read succeeds at once with a consistent session (each call with its
/// result, or still running), and the writer is never held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_and_a_writer_on_one_database_neither_blocks_nor_corrupts() {
    const STEPS: usize = 40;
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    for i in 0..STEPS {
        fake.push(Reply::tool_calls([Call::new(
            format!("c{i}"),
            "calculate",
            format!(r#"{{"expression": "{i} + 1"}}"#),
        )]));
    }
    fake.push(Reply::text("Counted."));
    let mut args = with_session(&fake, home, "count");
    let prompt = args.pop().unwrap();
    args.extend(["--max-iters".into(), (STEPS + 1).to_string(), prompt]);
    let writer = Program::start(&args, home);
    fake.wait_for_requests(2).await;
    let mut reads = 0;
    while fake.request_count() <= STEPS {
        let started = std::time::Instant::now();
        let shown = shown(home, "work").await;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "a read waited for the writer"
        );
        let calls = shown["calls"].as_array().unwrap();
        let finished = calls
            .iter()
            .filter(|c| c["status"]["outcome"]["state"] == "completed")
            .count();
        assert!(
            calls.len() - finished <= 1,
            "at most the call in progress is open: {calls:#?}"
        );
        reads += 1;
    }
    let (status, out, err) = writer.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "Counted.\n");
    assert!(reads >= 1);
    let shown = shown(home, "work").await;
    assert_eq!(shown["messages"].as_array().unwrap().len(), 2 + 2 * STEPS);
    assert_eq!(shown["calls"].as_array().unwrap().len(), STEPS);
    fake.assert_no_violations();
}

/// `chat --session` killed with `kill -9` while an MCP tool runs; the next `chat --session`
/// continues, and the model reads that the call was interrupted by the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn y4_chat_killed_in_the_middle_of_a_tool_continues_with_the_model_told() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let servers = home.join("servers.json");
    std::fs::write(
        &servers,
        serde_json::json!({"mcpServers": {"everything": {"command": "node", "args": [
            agentry_testkit::peers::npm_package("@modelcontextprotocol/server-everything/dist/index.js"),
            "stdio"]}}})
        .to_string(),
    )
    .unwrap();
    let chat = |fake: &FakeLlm| {
        let db = home.join("s.db").display().to_string();
        let mut args = run_args(
            &fake.base_url(),
            home,
            &[
                "--mcp-config",
                servers.to_str().unwrap(),
                "--session",
                "talk",
                "--db",
                &db,
            ],
            "",
        );
        args[0] = "chat".into();
        args.pop();
        args
    };

    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "long",
        "trigger-long-running-operation",
        r#"{"duration": 60, "steps": 60}"#,
    )]));
    let mut first = Program::start(&chat(&fake), home);
    first.type_line("run the long operation");
    // Its progress shows once the tool runs on the server.
    first.stderr_has("trigger-long-running-operation").await;
    first.kill();
    let (status, _, _) = first.finish().await;
    assert_eq!(status.code(), None, "killed");

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("The operation was cut off by the restart."));
    let mut second = Program::start(&chat(&fake), home);
    second.stderr_has("left in the middle of a reply").await;
    second.type_line("what happened?");
    second.stdout_has("cut off by the restart").await;
    second.type_line("/exit");
    let (status, _, err) = second.finish().await;
    assert!(status.success(), "{err}");
    let seen = conversation(&fake, 0);
    assert_eq!(seen[0], ("user".to_owned(), "run the long operation".to_owned()));
    assert_eq!(
        seen[1],
        (
            "assistant".to_owned(),
            "trigger-long-running-operation".to_owned()
        )
    );
    assert_eq!(seen[2], ("tool".to_owned(), INTERRUPTED_RESTART.to_owned()));
    assert_eq!(
        seen[3],
        ("user".to_owned(), REPLY_INTERRUPTED_BY_RESTART.to_owned())
    );
    assert_eq!(seen[4], ("user".to_owned(), "what happened?".to_owned()));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a14_an_always_answer_holds_in_the_next_process_until_revoked() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("Written."));
    let mut first = Program::start(&with_session(&fake, home, "write hello"), home);
    first.stderr_has("? Write notes.txt?").await;
    first.type_line("a");
    let (status, _, err) = first.finish().await;
    assert!(status.success(), "{err}");
    assert!(home.join("notes.txt").exists());
    std::fs::remove_file(home.join("notes.txt")).unwrap();

    // stdin closed: a question would be declined for want of an answer.
    fake.push(write_call());
    fake.push(Reply::text("Written again."));
    let second = agentry(with_session(&fake, home, "write hello again"), home).await;
    let err = text(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(
        !err.contains("? Write"),
        "the grant answered, nobody was asked: {err}"
    );
    assert!(
        home.join("notes.txt").exists(),
        "written under the session's grant"
    );
    std::fs::remove_file(home.join("notes.txt")).unwrap();
    let shown = shown(home, "work").await;
    assert_eq!(shown["grants"][0]["tool_name"], "write_file");
    assert_eq!(shown["grants"][0]["kind"]["kind"], "allow");

    let revoked = agentry(sessions(home, &["revoke", "work", "write_file"]), home).await;
    assert_eq!(
        text(&revoked.stdout),
        "revoked 1 grant(s)\n",
        "{}",
        text(&revoked.stderr)
    );
    fake.push(write_call());
    fake.push(Reply::text("Not written."));
    let third = agentry(with_session(&fake, home, "and once more"), home).await;
    let err = text(&third.stderr);
    assert!(
        err.contains("? Write notes.txt?"),
        "asked again after the revoke: {err}"
    );
    assert!(!home.join("notes.txt").exists(), "declined: nobody could answer");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a14_an_always_answer_is_kept_when_the_process_dies_before_the_reply_ends() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    // The model never answers the result: the process is killed while it waits.
    fake.push(Reply::text("never sent").hang_after(0));
    let mut first = Program::start(&with_session(&fake, home, "write hello"), home);
    first.stderr_has("? Write notes.txt?").await;
    first.type_line("a");
    fake.wait_for_requests(2).await;
    first.kill();
    let (status, _, _) = first.finish().await;
    assert_eq!(status.code(), None, "killed");
    let shown = shown(home, "work").await;
    assert_eq!(shown["grants"][0]["tool_name"], "write_file", "{shown}");
    assert_eq!(shown["grants"][0]["kind"]["kind"], "allow");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_approval_when_the_process_died_is_asked_again_and_runs_once() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    let first = Program::start(&with_session(&fake, home, "write hello to notes.txt"), home);
    first.stderr_has("? Write notes.txt?").await;
    let pending = shown(home, "work").await["pending_approvals"].clone();
    assert_eq!(
        pending[0]["call_id"], "w",
        "kept before the question was shown: {pending}"
    );
    first.kill();
    let _ = first.finish().await;

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Written, as you approved."));
    fake.push(Reply::text("Nothing else to do."));
    let mut second = Program::start(&with_session(&fake, home, "anything else?"), home);
    second.stderr_has("still wait for your decision").await;
    second.stderr_has("? Write notes.txt?").await;
    assert!(!home.join("notes.txt").exists(), "not run before the approval");
    second.type_line("y");
    let (status, out, err) = second.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "Written, as you approved.\nNothing else to do.\n");
    assert_eq!(std::fs::read_to_string(home.join("notes.txt")).unwrap(), "hello");
    let seen = conversation(&fake, 0);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[2].0, "tool");
    assert!(
        !seen[2].1.contains("interrupted"),
        "the real result: {}",
        seen[2].1
    );
    assert_eq!(conversation(&fake, 1).last().unwrap().1, "anything else?");
    fake.assert_no_violations();

    let stored = shown(home, "work").await;
    assert_eq!(stored["pending_approvals"], serde_json::json!([]));
    let call = &stored["calls"][0];
    assert_eq!(call["status"]["outcome"]["state"], "completed", "{call}");
    assert_eq!(call["decision_source"], "user", "{call}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_commands_answer_without_the_model_and_cancel_cancels_the_reply() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Four.").usage(10, 2));
    let gate = agentry_testkit::Gate::new();
    fake.push(
        Reply::text("A long answer that never ends")
            .chunks(4)
            .pause_after(2, gate.clone()),
    );
    let db = home.join("s.db").display().to_string();
    let mut args = run_args(
        &fake.base_url(),
        home,
        &["--no-mcp", "--session", "talk", "--db", &db],
        "",
    );
    args[0] = "chat".into();
    args.pop();
    let mut chat = Program::start(&args, home);
    chat.stderr_has("you> ").await;
    chat.type_line("2+2?");
    chat.stdout_has("Four.").await;
    chat.type_line("/tools");
    chat.stderr_has("  write_file  [asks]").await;
    chat.type_line("/usage");
    chat.stderr_has("this chat: 10 tokens in, 2 out").await;
    chat.stderr_has("session talk: 1 replies, 10 tokens in, 2 out")
        .await;
    chat.type_line("/sessions");
    chat.stderr_has("talk  2 messages  (this one)").await;
    chat.type_line("/nonsense");
    chat.stderr_has("unknown command /nonsense").await;
    chat.type_line("tell me more");
    gate.reached().await;
    chat.stdout_has("A long").await;
    chat.type_line("/cancel");
    chat.stderr_has("reply cancelled").await;
    chat.stderr_has_n("you> ", 7).await;
    chat.type_line("/quit");
    let (status, _, err) = chat.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(fake.requests().len(), 2, "commands never reach the model");
    fake.assert_no_violations();
}

/// Issue 25: `agentry sessions export NAME | head` panicked with a backtrace on the closed pipe.
/// Here stdout is a pipe whose reader is closed before the program starts: its first write
/// fails, and it must end quietly with 0, as under a `head` that had read enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_an_export_or_a_listing_quietly() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("stored"));
    let ran = agentry(with_session(&fake, home, "keep this"), home).await;
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    for args in [
        sessions(home, &["export", "work"]),
        sessions(home, &["list"]),
        sessions(home, &["show", "work"]),
    ] {
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        drop(reader);
        let mut command = common::command(&args, home);
        command.stdout(std::process::Stdio::from(writer));
        let out = common::output(command).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked") && err.is_empty(), "{args:?}: {err}");
    }
    fake.assert_no_violations();
}

/// An MCP task (server-everything over HTTP, `simulate-research-query`, which runs only as a
/// task) outlives the process that started it: killed mid-task, the next process finds the
/// task again in the session, waits for its result and stores it as the call's one result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_task_running_when_the_process_died_is_found_again_and_its_result_kept() {
    use agentry_testkit::peers::{EverythingHttp, free_port};
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let server = EverythingHttp::start(free_port()).await;
    let servers = home.join("servers.json");
    std::fs::write(
        &servers,
        serde_json::json!({"mcpServers": {"everything": {"url": server.url()}}}).to_string(),
    )
    .unwrap();
    let args = |fake: &FakeLlm, prompt: &str| {
        let db = home.join("s.db").display().to_string();
        run_args(
            &fake.base_url(),
            home,
            &[
                "--mcp-config",
                servers.to_str().unwrap(),
                "--session",
                "work",
                "--db",
                &db,
            ],
            prompt,
        )
    };

    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "t",
        "simulate-research-query",
        r#"{"topic": "tide pools"}"#,
    )]));
    let mut first = Program::start(&args(&fake, "research tide pools"), home);
    first.stderr_has("? Run simulate-research-query?").await;
    first.type_line("y");
    // Killed once the task's id is kept with the call.
    let kept = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let shown = shown(home, "work").await;
            if let Some(point) = shown["calls"][0].get("resume").filter(|p| !p.is_null()) {
                return point.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no resume point kept; stderr: {}", first.stderr_so_far()));
    assert!(kept["mcp_task"]["task_id"].is_string(), "{kept}");
    first.kill();
    let (status, _, _) = first.finish().await;
    assert_eq!(status.code(), None, "killed");

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("The report is in."));
    fake.push(Reply::text("Nothing else."));
    let second = agentry(args(&fake, "anything else?"), home).await;
    let (stdout, stderr) = (text(&second.stdout), text(&second.stderr));
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("still run on their server"), "{stderr}");
    assert!(stdout.contains("Nothing else."), "{stdout}");
    let result = common::tool_message(&fake, 0, "t");
    assert!(
        result.contains("# Research Report: tide pools"),
        "{result}\n{stderr}"
    );
    fake.assert_no_violations();
    // One result for the call, and the call closed.
    let shown = shown(home, "work").await;
    assert_eq!(shown["calls"][0]["status"]["status"], "finished", "{shown}");
}
