//! The `agentry` binary with the embedded model: the default provider when no server is
//! configured, a real tool-needing question answered by the Qwen2.5-Coder 0.5B that
//! `scripts/test` fetches (named by `AGENTRY_TEST_MODEL`), and the README's example answered in
//! full by the default model (`AGENTRY_TEST_DEFAULT_MODEL`). Without them those tests say so and
//! pass.

use std::path::PathBuf;

use crate::common::{agentry, command, output, text};

fn test_model() -> Option<PathBuf> {
    model_named_by("AGENTRY_TEST_MODEL")
}

fn model_named_by(variable: &str) -> Option<PathBuf> {
    match std::env::var_os(variable) {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => {
            eprintln!("{variable} is not set: the real-model test is skipped");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_server_configured_run_uses_the_local_model_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // The test environment's hub and registry refuse connections: the pull fails at once.
    let out = agentry(vec!["run".into(), "--no-mcp".into(), "hello".into()], dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no model server is configured")
            && stderr.contains("--provider openai with --base-url/OPENAI_BASE_URL"),
        "the user is told why and how to use a server: {stderr}"
    );
    assert!(
        stderr.contains("fetching qwen2.5-coder-1.5b into"),
        "the default model is fetched: {stderr}"
    );
    assert!(
        stderr.contains("could not fetch qwen2.5-coder-1.5b from any source"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_name_the_local_provider_does_not_know_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = agentry(
        vec!["run".into(), "--model".into(), "gpt-4o".into(), "hi".into()],
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"gpt-4o\" is not a model the local provider knows"),
        "{stderr}"
    );
    assert!(stderr.contains("OPENAI_BASE_URL"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_list_and_path_read_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::write(models.join("qwen2.5-coder-0.5b.gguf"), b"GGUF").unwrap();
    let run = |args: &[&str]| {
        let mut cmd = command(
            &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            dir.path(),
        );
        cmd.env("AGENTRY_MODELS_DIR", &models);
        output(cmd)
    };

    let out = run(&["model", "list", "--json"]).await;
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = list["models"].as_array().unwrap();
    let by_name = |name: &str| entries.iter().find(|m| m["name"] == name).unwrap().clone();
    assert_eq!(by_name("qwen2.5-coder-0.5b")["fetched"], true);
    assert_eq!(by_name("qwen2.5-coder-1.5b")["fetched"], false);
    assert_eq!(by_name("qwen2.5-coder-1.5b")["default"], true);

    let out = run(&["model", "path", "qwen2.5-coder-0.5b"]).await;
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        models.join("qwen2.5-coder-0.5b.gguf").display().to_string()
    );
    let out = run(&["model", "path"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("agentry model pull qwen2.5-coder-1.5b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_model_answers_a_question_with_the_arithmetic_tool() {
    let Some(model) = test_model() else { return };
    let (out, stdout, stderr) = run_on(&model, "What is 1234 multiplied by 5678?").await;
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("calc") || stderr.contains("multiply"),
        "the arithmetic tool was called: {stderr}"
    );
    assert!(
        stdout.replace([',', ' '], "").contains("7006652"),
        "the answer has the product: {stdout}\n{stderr}"
    );
}

/// The system block read by one run is read from disk by the next, and the saved prefixes
/// stay within `--cache-size`; `--verbose` tells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_run_reads_the_prompt_prefix_from_disk_within_the_cache_size() {
    let Some(model) = test_model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        run_in(
            dir.path(),
            &model,
            &["--verbose", "--cache-size", "10MB"],
            "What is 2 + 2?",
        )
    };
    let prefixes = dir.path().join("models").join("prefixes");

    let (first, _, stderr) = run().await;
    assert!(first.status.success(), "{stderr}");
    assert_eq!(from_disk(&stderr), Some(0), "nothing saved yet: {stderr}");
    let saved: u64 = std::fs::read_dir(&prefixes)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(saved > 0 && saved <= 10_000_000, "saved {saved} bytes");

    let (second, _, stderr) = run().await;
    assert!(second.status.success(), "{stderr}");
    let read = from_disk(&stderr).unwrap_or_default();
    assert!(read >= 128, "the saved prefix is read back: {stderr}");
}

/// The prompt tokens `--verbose` says were read from disk.
fn from_disk(stderr: &str) -> Option<usize> {
    let before = stderr.split(" of them from disk").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// The README's first command, word for word, on the default model: both parts answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_example_is_answered_in_full_by_the_default_model() {
    let Some(model) = model_named_by("AGENTRY_TEST_DEFAULT_MODEL") else {
        return;
    };
    let readme = include_str!("../../../README.md");
    let prompt = "What is 1234 * 5678, and what time is it?";
    assert!(
        readme.contains(&format!("-p agentry-cli -- run \"{prompt}\"")),
        "the README's example is this test's"
    );
    let (out, stdout, stderr) = run_on(&model, prompt).await;
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.replace([',', ' '], "").contains("7006652"),
        "the product: {stdout}\n{stderr}"
    );
    // The time the tool gave, as the model may write it: 01:20, 1:20 (AM), 13:20 or 1:20 (PM).
    let (hour, minute) = tool_time(&stderr).unwrap_or_else(|| panic!("current_time was called: {stderr}"));
    let twelve = if hour % 12 == 0 { 12 } else { hour % 12 };
    let written = [
        format!("{hour:02}:{minute:02}"),
        format!("{hour}:{minute:02}"),
        format!("{twelve}:{minute:02}"),
    ];
    assert!(
        written.iter().any(|time| stdout.contains(time.as_str())),
        "the time, one of {written:?}: {stdout}\n{stderr}"
    );
}

/// `agentry run --no-mcp PROMPT` on the model file, in a fresh working directory: the output,
/// stdout and stderr.
async fn run_on(model: &std::path::Path, prompt: &str) -> (std::process::Output, String, String) {
    let dir = tempfile::tempdir().unwrap();
    run_in(dir.path(), model, &[], prompt).await
}

/// `agentry run --no-mcp FLAGS PROMPT` on the model file, with `dir` as the working directory
/// and home (its model cache under `dir/models`).
async fn run_in(
    dir: &std::path::Path,
    model: &std::path::Path,
    flags: &[&str],
    prompt: &str,
) -> (std::process::Output, String, String) {
    let mut args: Vec<String> = vec!["run".into(), "--no-mcp".into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.extend([
        "--model-path".into(),
        model.display().to_string(),
        "--workdir".into(),
        dir.display().to_string(),
        prompt.into(),
    ]);
    let cmd = command(&args, dir);
    let out = crate::common::output_within(cmd, std::time::Duration::from_secs(900)).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    (out, stdout, stderr)
}

/// The hour and minute of the first `current_time` result shown on stderr.
fn tool_time(stderr: &str) -> Option<(u32, u32)> {
    let line = stderr.lines().find(|line| line.contains("current_time("))?;
    let result = line.split('→').nth(1)?;
    let clock = result.split('T').nth(1)?;
    let hour = clock.get(0..2)?.parse().ok()?;
    let minute = clock.get(3..5)?.parse().ok()?;
    Some((hour, minute))
}

/// A session whose conversation outgrows the context window on the embedded model: the next
/// reply compacts it (the real model writes the summary) and still answers; the session keeps
/// every message and marks the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_past_the_context_window_is_compacted_on_the_real_model_and_goes_on() {
    let Some(model) = test_model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db").display().to_string();
    let facts: String = (1..=25)
        .map(|n| {
            format!(
                "Fact {n}: the code word for day {n} is {}.\n",
                ["amber", "birch", "cedar", "delta"][n % 4]
            )
        })
        .collect();
    let flags = [
        "--session",
        "s",
        "--db",
        &db,
        "--tools",
        "calculate",
        "--context-window",
        "1536",
        "--compact-at",
        "0.5",
    ];
    let (out, first, stderr) = run_in(
        dir.path(),
        &model,
        &flags,
        &format!("Here are my notes:\n{facts}\nReply with just: noted."),
    )
    .await;
    assert!(out.status.success(), "{stderr}");
    assert!(!first.trim().is_empty(), "{stderr}");
    let (out, second, stderr) = run_in(dir.path(), &model, &flags, "What is 6 times 7?").await;
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("(the conversation was compacted:"),
        "the second reply compacts: {stderr}"
    );
    assert!(second.contains("42"), "{second}\n{stderr}");
    let args: Vec<String> = ["sessions", "show", "s", "--json", "--db", &db]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let shown = crate::common::agentry(args, dir.path()).await;
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let messages = shown["messages"].as_array().unwrap();
    let summaries: Vec<&serde_json::Value> = messages
        .iter()
        .filter(|m| m["metadata"]["compaction"].is_object())
        .collect();
    assert!(!summaries.is_empty(), "{shown}");
    let summary = summaries[0]["content"][0]["text"].as_str().unwrap();
    assert!(summary.len() < 4000, "a summary stays short: {summary}");
    assert!(summary.starts_with("<system-info>"), "{summary}");
    // Nothing was deleted: the notes are still in the session.
    assert!(messages.iter().any(|m| {
        m["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Fact 25"))
    }));
}
