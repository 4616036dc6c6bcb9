//! `--record` and `--replay`: a run recorded against the fake model, then replayed without it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::{agentry, run_args, text};
use serde_json::Value;

/// The tool lines of stderr, without their timing (` [1.5 ms]`).
fn tool_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with('⚙'))
        .map(|l| l.rsplit_once(" [").map_or(l, |(line, _)| line).to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassette_round_trip_records_against_the_fake_and_replays_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.jsonl").display().to_string();
    let prompt = "What are 6*7 and 2^10?";
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::tool_calls([
            Call::new("c1", "calculate", r#"{"expression": "6*7"}"#),
            Call::new("c2", "calculate", r#"{"expression": "2^10"}"#),
        ])
        .with_text("Computing."),
    );
    fake.push(Reply::text("6*7 is 42 and 2^10 is 1024."));
    let recorded = agentry(
        run_args(&fake.base_url(), dir.path(), &["--record", &cassette], prompt),
        dir.path(),
    )
    .await;
    let stderr = text(&recorded.stderr);
    assert!(recorded.status.success(), "exit {:?}\n{stderr}", recorded.status);
    assert_eq!(
        text(&recorded.stdout),
        "Computing.\n6*7 is 42 and 2^10 is 1024.\n"
    );
    let tools = tool_lines(&stderr);
    assert_eq!(
        tools,
        [
            "⚙ calculate({\"expression\":\"6*7\"}) → 42",
            "⚙ calculate({\"expression\":\"2^10\"}) → 1024"
        ],
        "{stderr}"
    );
    assert_eq!(fake.request_count(), 2);
    fake.assert_no_violations();
    drop(fake);

    let lines: Vec<Value> = std::fs::read_to_string(&cassette)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["model"], "test-model");
    assert_eq!(lines[0]["streaming"], true);
    assert!(lines[0]["items"].as_array().unwrap().len() > 1, "streamed");
    assert_eq!(lines[1]["request"]["messages"][1]["content"][0]["text"], prompt);

    // Without the server, without a model name or provider setting.
    let workdir = dir.path().display().to_string();
    let replay = |prompt: &str| -> Vec<String> {
        ["run", "--replay", &cassette, "--workdir", &workdir, prompt]
            .map(str::to_owned)
            .to_vec()
    };
    let replayed = agentry(replay(prompt), dir.path()).await;
    let replayed_stderr = text(&replayed.stderr);
    assert!(
        replayed.status.success(),
        "exit {:?}\n{replayed_stderr}",
        replayed.status
    );
    assert_eq!(text(&replayed.stdout), text(&recorded.stdout));
    assert_eq!(tool_lines(&replayed_stderr), tools, "{replayed_stderr}");

    let other = agentry(replay("What is 6*8?"), dir.path()).await;
    let other_stderr = text(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{other_stderr}");
    assert!(
        other_stderr.contains(
            r#"error: replay: call 1: request differs at messages[1].content[0].text: recorded "What are 6*7 and 2^10?", got "What is 6*8?""#
        ),
        "{other_stderr}"
    );
    assert!(other.stdout.is_empty());

    let mut both = replay(prompt);
    both.splice(
        1..1,
        [
            "--record".to_owned(),
            dir.path().join("x.jsonl").display().to_string(),
        ],
    );
    let both = agentry(both, dir.path()).await;
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
    assert!(
        text(&both.stderr).contains("cannot be used with"),
        "{}",
        text(&both.stderr)
    );

    let missing = agentry(
        ["run", "--replay", "/nonexistent.jsonl", "hi"]
            .map(str::to_owned)
            .to_vec(),
        dir.path(),
    )
    .await;
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing.stderr));
    assert!(
        text(&missing.stderr).contains("cannot read the cassette /nonexistent.jsonl"),
        "{}",
        text(&missing.stderr)
    );
}
