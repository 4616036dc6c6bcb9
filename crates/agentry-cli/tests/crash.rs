//! Crash safety of `--session`: a process running a reply dies (`kill -9`, or an abort around
//! one of its commits) at 30 and more points across the reply. Every time, the session loads,
//! every result the process announced is stored, and the next process continues it with a
//! request in which every tool call has exactly one result (the fake server's per-request
//! check).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common;

use crate::sessions::{sessions, shown};
use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::program::Program;
use common::{agentry, command, output, run_args, text, write_call};
use serde_json::Value;

fn session_args(fake: &FakeLlm, home: &Path, extra: &[&str], prompt: &str) -> Vec<String> {
    let db = home.join("s.db").display().to_string();
    let mut args = vec!["--no-mcp", "--session", "s", "--db", &db];
    args.extend_from_slice(extra);
    run_args(&fake.base_url(), home, &args, prompt)
}

/// The reply every first process runs: two calls (no approval needed), then a streamed answer.
fn push_reply(fake: &FakeLlm, calls_pause: Option<(usize, Gate)>, answer_pause: Option<(usize, Gate)>) {
    let mut calls = Reply::tool_calls([
        Call::new("c1", "calculate", r#"{"expression": "6*7"}"#),
        Call::new("c2", "read_file", r#"{"path": "notes.txt"}"#),
    ])
    .with_text("Looking.");
    if let Some((events, gate)) = calls_pause {
        calls = calls.pause_after(events, gate);
    }
    let mut answer = Reply::text("6*7 is 42 and the note says: buy milk.").chunks(6);
    if let Some((events, gate)) = answer_pause {
        answer = answer.pause_after(events, gate);
    }
    fake.push(calls);
    fake.push(answer);
}

/// After a death: the session loads, the results the dead process announced are stored, and
/// the next process continues with a well-formed request.
async fn check_after_death(point: &str, home: &Path, dead_stderr: &str) {
    let listed = agentry(sessions(home, &["list", "--json"]), home).await;
    assert!(
        listed.status.success(),
        "{point}: the database loads: {}",
        text(&listed.stderr)
    );
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    if listed.as_array().is_some_and(|a| !a.is_empty()) {
        let shown = shown(home, "s").await;
        let stored_results: Vec<String> = shown["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        for tool in ["calculate", "read_file"] {
            let announced = dead_stderr
                .lines()
                .any(|l| l.starts_with(&format!("⚙ {tool}(")) && l.contains('→'));
            if announced {
                assert!(
                    stored_results.iter().any(|n| n == tool),
                    "{point}: the {tool} result was announced but not stored\n{dead_stderr}\n{shown}"
                );
            }
        }
    }
    // A server of its own: the dead process may have left replies unasked for.
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Carrying on."));
    // Calls left waiting for approval are closed here (their own test asks about them again).
    let next = agentry(session_args(&fake, home, &["--close-pending"], "carry on"), home).await;
    assert!(
        next.status.success(),
        "{point}: the next process continues: {}",
        text(&next.stderr)
    );
    assert_eq!(text(&next.stdout), "Carrying on.\n", "{point}");
    assert_eq!(fake.requests().len(), 1, "{point}");
    let violations = fake.take_violations();
    assert!(violations.is_empty(), "{point}: {violations:?}");
    let messages = fake.requests()[0].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        messages.last().map(|m| m["content"].clone()),
        Some(Value::from("carry on")),
        "{point}"
    );

    // What is stored is whole again: every call closed, with exactly one result.
    let shown = shown(home, "s").await;
    for call in shown["calls"].as_array().unwrap() {
        assert_eq!(call["status"]["status"], "finished", "{point}: {call}");
    }
    let blocks: Vec<Value> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    for call in blocks.iter().filter(|b| b["type"] == "tool_use") {
        let results = blocks
            .iter()
            .filter(|b| b["type"] == "tool_result" && b["id"] == call["id"])
            .count();
        assert_eq!(results, 1, "{point}: call {} has {results} results", call["id"]);
    }
}

/// One death at a commit of the store: `before:N` or `after:N`. `None` when the reply ended
/// before that commit (the point is past the end).
async fn die_at_commit(spec: &str, extra: &[&str]) -> Option<()> {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    std::fs::write(home.join("notes.txt"), "buy milk\n").unwrap();
    let fake = FakeLlm::start().await;
    push_reply(&fake, None, None);
    let mut first = command(&session_args(&fake, home, extra, "go"), home);
    first.env("AGENTRY_CRASH_AT", spec);
    let died = output(first).await;
    let err = text(&died.stderr);
    if died.status.success() {
        assert!(!err.contains("crash point"), "{err}");
        return None;
    }
    assert!(
        err.contains("crash point"),
        "{spec}: died for another reason: {err}"
    );
    assert!(
        fake.take_violations().is_empty(),
        "{spec}: the dead process's own requests"
    );
    check_after_death(&format!("{spec} {extra:?}"), home, &err).await;
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn y4_a_process_killed_anywhere_in_a_reply_leaves_a_session_the_next_one_continues() {
    let mut points = 0;
    // Around every commit of the reply, with the calls one after the other and in parallel.
    for extra in [&[][..], &["--parallel"][..]] {
        for moment in ["before", "after"] {
            let mut n = 1;
            while die_at_commit(&format!("{moment}:{n}"), extra).await.is_some() {
                points += 1;
                n += 1;
            }
            assert!(n > 5, "{moment} {extra:?}: only {} commits in a reply?", n - 1);
        }
    }

    // kill -9 from outside: while the calls stream in, while the answer streams (three places),
    // and between the results and the next request.
    let outside: [(&str, Option<usize>, Option<usize>); 5] = [
        ("while the calls stream", Some(2), None),
        ("before the answer's first chunk", None, Some(0)),
        ("after the answer's first chunk", None, Some(2)),
        ("in the middle of the answer", None, Some(4)),
        ("at the answer's last chunk", None, Some(6)),
    ];
    for (point, calls_at, answer_at) in outside {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        std::fs::write(home.join("notes.txt"), "buy milk\n").unwrap();
        let fake = FakeLlm::start().await;
        let gate = Gate::new();
        push_reply(
            &fake,
            calls_at.map(|n| (n, gate.clone())),
            answer_at.map(|n| (n, gate.clone())),
        );
        let program = Program::start(&session_args(&fake, home, &[], "go"), home);
        tokio::time::timeout(std::time::Duration::from_secs(30), gate.reached())
            .await
            .unwrap_or_else(|_| panic!("{point}: the stream never reached the gate"));
        program.kill();
        let (status, _, err) = program.finish().await;
        assert_eq!(status.code(), None, "{point}: killed");
        check_after_death(point, home, &err).await;
        points += 1;
    }

    // kill -9 while an approval waits.
    {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let fake = FakeLlm::start().await;
        fake.push(write_call());
        let program = Program::start(&session_args(&fake, home, &[], "write"), home);
        program.stderr_has("? Write notes.txt?").await;
        program.kill();
        let (_, _, err) = program.finish().await;
        check_after_death("while an approval waits", home, &err).await;
        assert!(!home.join("notes.txt").exists(), "never written");
        points += 1;
    }
    assert!(points >= 30, "only {points} kill points");
    eprintln!("{points} kill points");
}
