//! `agentry run` end to end: the built binary against the fake OpenAI-compatible server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::{agentry, run_args, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_the_answer_and_one_line_per_tool_call() {
    for extra in [&[][..], &["--no-stream", "--parallel"][..]] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "buy milk\n").unwrap();
        let fake = FakeLlm::start().await;
        fake.push(
            Reply::tool_calls([
                Call::new("c1", "calculate", r#"{"expression": "6*7"}"#),
                Call::new("c2", "read_file", r#"{"path": "notes.txt"}"#),
                Call::new("c3", "read_file", r#"{"path": "../secret"}"#),
            ])
            .with_text("Checking."),
        );
        fake.push(Reply::text("6*7 is 42 and the note says: buy milk."));
        let out = agentry(
            run_args(&fake.base_url(), dir.path(), extra, "What is 6*7? Read my notes."),
            dir.path(),
        )
        .await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{extra:?}: exit {:?}\n{stderr}", out.status);
        assert_eq!(
            stdout, "Checking.\n6*7 is 42 and the note says: buy milk.\n",
            "{extra:?}"
        );
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('⚙')).collect();
        assert_eq!(lines.len(), 3, "{stderr}");
        // With --parallel the lines come in the order the calls finish.
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("⚙ calculate({\"expression\":\"6*7\"}) → 42 [")),
            "{stderr}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("read_file") && l.contains("→ buy milk")),
            "{stderr}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("✗") && l.contains("outside the working directory")),
            "{stderr}"
        );
        let request = &fake.requests()[1].body;
        let tool_names: Vec<&str> = request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tool_names,
            [
                "current_time",
                "calculate",
                "list_files",
                "read_file",
                "search_files",
                "write_file"
            ]
        );
        assert_eq!(request["stream"], extra.is_empty());
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_the_anthropic_provider_calls_tools_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::tool_calls([Call::new("toolu_1", "calculate", r#"{"expression": "6*7"}"#)])
            .with_reasoning("Multiply.")
            .with_text("Computing."),
    );
    fake.push(Reply::text("6*7 is 42."));
    let mut args = run_args(
        &fake.anthropic_base_url(),
        dir.path(),
        &["--provider", "anthropic", "--thinking-budget", "1024"],
        "What is 6*7?",
    );
    args.retain(|a| a != "--max-retries" && a != "0");
    let mut command = common::command(&args, dir.path());
    command.env("ANTHROPIC_API_KEY", "sk-ant-cli");
    let out = common::output(command).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert_eq!(stdout, "Computing.\n6*7 is 42.\n");
    assert!(
        stderr.contains("⚙ calculate({\"expression\":\"6*7\"}) → 42"),
        "{stderr}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].headers["x-api-key"], "sk-ant-cli");
    assert_eq!(requests[0].body["thinking"]["budget_tokens"], 1024);
    assert_eq!(requests[0].body["model"], "test-model");
    fake.assert_no_violations();

    // With only Anthropic's variables set, it is the provider chosen.
    fake.push(Reply::text("Chosen."));
    let mut command = common::command(
        &["run".into(), "--model".into(), "m".into(), "hi".into()],
        dir.path(),
    );
    command
        .env("ANTHROPIC_BASE_URL", fake.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", "k");
    let out = common::output(command).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Chosen.\n");
    assert_eq!(fake.requests()[2].path, "/v1/messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_shows_the_reply_ledger_and_a_cost_budget_stops_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"prices": {"test-*": {"input": 1.0, "output": 2.0, "cache_read": 0.1}}}"#,
    )
    .unwrap();
    let config = config.display().to_string();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Priced.").usage(1_000, 200));
    let out = agentry(
        run_args(
            &fake.base_url(),
            dir.path(),
            &["--config", &config, "--verbose"],
            "hi",
        ),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("usage: 1000 tokens in, 200 out; cost $0.0014"),
        "{stderr}"
    );

    fake.push(
        Reply::tool_calls([Call::new("c1", "calculate", r#"{"expression": "1+1"}"#)]).usage(1_000, 200),
    );
    let out = agentry(
        run_args(
            &fake.base_url(),
            dir.path(),
            &["--config", &config, "--max-cost-per-reply", "0.001"],
            "hi",
        ),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("reply stopped: the reply's budget of $0.0010 was reached ($0.0014 spent)"),
        "{stderr}"
    );
    assert!(!stderr.contains("→ 2"), "the call was not run: {stderr}");
    assert_eq!(fake.request_count(), 2, "no request after the stop");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_exits_1_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let out = agentry(run_args(&url, dir.path(), &[], "hello"), dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach the model server at"), "{stderr}");
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_exit_1_with_the_status_and_body() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(404).body(r#"{"error": {"message": "model 'test-model' not found"}}"#));
    let out = agentry(run_args(&fake.base_url(), dir.path(), &[], "hello"), dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("HTTP 404") && stderr.contains("model 'test-model' not found"),
        "{stderr}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfiguration_exits_2_and_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = agentry(
        vec!["run".into(), "--provider".into(), "openai".into(), "hello".into()],
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no model name"), "{stderr}");

    let args = vec![
        "run".into(),
        "--model".into(),
        "m".into(),
        "--base-url".into(),
        "127.0.0.1:9".into(),
        "x".into(),
    ];
    let out = agentry(args, dir.path()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("http"), "{}", text(&out.stderr));

    let config = dir.path().join("bad.json");
    std::fs::write(&config, r#"{"modle": "x"}"#).unwrap();
    let args = vec![
        "run".into(),
        "--config".into(),
        config.display().to_string(),
        "x".into(),
    ];
    let out = agentry(args, dir.path()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid config file"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_provider_needs_a_usable_gguf_file() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["run".into(), "--provider".into(), "local".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push("hello".into());
        args
    };
    // No file named: the default model, fetched first (the test hub and registry refuse).
    let out = agentry(run(&[]), dir.path()).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the local model qwen2.5-coder-1.5b is not available"),
        "{}",
        text(&out.stderr)
    );

    let fake_model = dir.path().join("model.gguf");
    std::fs::write(&fake_model, "<html>404</html>").unwrap();
    let out = agentry(
        run(&["--model-path", &fake_model.display().to_string()]),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not usable") && stderr.contains("model.gguf"),
        "{stderr}"
    );

    let out = agentry(run(&["--model-path", "/nonexistent/m.gguf"]), dir.path()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot open the model file"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_supplies_the_model_settings() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("configured"));
    let config_dir = dir.path().join(".config/agentry");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = serde_json::json!({"base_url": fake.base_url(), "model": "from-file", "stream": false,
                                    "extra_body": {"temperature": 0}});
    std::fs::write(config_dir.join("config.json"), config.to_string()).unwrap();
    let args = vec![
        "run".into(),
        "--workdir".into(),
        dir.path().display().to_string(),
        "hi".into(),
    ];
    let out = agentry(args, dir.path()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "configured\n");
    let body = &fake.requests()[0].body;
    assert_eq!(
        (body["model"].as_str(), body["stream"].as_bool()),
        (Some("from-file"), Some(false))
    );
    assert_eq!(body["temperature"], 0);
    fake.assert_no_violations();
}

/// Defect 14: `--read-timeout` is honoured and the error names the limit that fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_exits_1_naming_the_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // Connections complete in the kernel's backlog and are never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", silent.local_addr().unwrap());
    let out = agentry(
        run_args(&url, dir.path(), &["--read-timeout", "300ms"], "hello"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("read timeout of 300ms"), "{stderr}");
    assert!(
        stderr.contains("--read-timeout"),
        "the hint names the flag: {stderr}"
    );
}

/// Defect 15: a stream without any choice fails as the same answer without streaming does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_streamed_answer_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::raw_sse([
        "data: {\"id\": \"x\", \"choices\": []}\n\n",
        "data: [DONE]\n\n",
    ]));
    let out = agentry(run_args(&fake.base_url(), dir.path(), &[], "hello"), dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the response has no choices"), "{stderr}");
    fake.assert_no_violations();
}

/// Control characters a terminal acts on: C0 (but newline and tab), DEL, C1, and the bidi
/// overrides that reorder what is shown.
fn terminal_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_text_cannot_drive_the_terminal_and_long_names_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    let long_name = format!("\u{1b}[2K\r{}", "x".repeat(5000));
    fake.push(
        Reply::tool_calls([
            Call::new(
                "w",
                "write_file",
                r#"{"path": "\u001b[2K\rnotes.txt", "content": "line one\u001b[1A\u001b[2K\r\u202eevil\u009b31m"}"#,
            ),
            Call::new("c", "calculate", "{\"expression\": \"1+1\u{1b}[2K\r\"}"),
            Call::new("l", long_name.as_str(), "{}"),
        ])
        .with_text("Sure\u{1b}]0;pwned\u{7}."),
    );
    fake.push(Reply::text("Done\u{1b}[2J\u{1b}[H, really\u{7f}.\n"));
    let out = agentry(run_args(&fake.base_url(), dir.path(), &[], "go"), dir.path()).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        terminal_controls(&stdout),
        Vec::<char>::new(),
        "stdout: {stdout:?}"
    );
    assert_eq!(
        terminal_controls(&stderr),
        Vec::<char>::new(),
        "stderr: {stderr:?}"
    );
    assert!(
        stdout.contains("Sure\\e]0;pwned\\a.") && stdout.contains("Done\\e[2J\\e[H, really\\x7f."),
        "escaped, still readable: {stdout:?}"
    );
    assert!(stderr.contains("Write \\e[2K\\rnotes.txt?"), "{stderr}");
    assert!(
        stderr.len() < 4000,
        "a 5000-character name is cut: {} bytes\n{stderr}",
        stderr.len()
    );
    assert!(stderr.contains("… (5005 chars)"), "{stderr}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_line_shows_arguments_as_the_model_sent_them() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("a", "calculate", r#""6*7""#),
        Call::new("b", "calculate", "[1, 2]"),
    ]));
    fake.push(Reply::text("ok"));
    let out = agentry(run_args(&fake.base_url(), dir.path(), &[], "go"), dir.path()).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("⚙ calculate(\"6*7\") ✗"), "{stderr}");
    assert!(stderr.contains("⚙ calculate([1, 2]) ✗"), "{stderr}");
    assert!(!stderr.contains("calculate(null)"), "{stderr}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    // The server's text in the warning carries escapes of its own.
    fake.push(
        Reply::status(503)
            .header("retry-after", "0")
            .body("busy \u{1b}[31mred\u{1b}]0;title\u{7}"),
    );
    fake.push(Reply::text("second time lucky"));
    let mut args = run_args(&fake.base_url(), dir.path(), &[], "hi");
    let retries = args.iter().position(|a| a == "--max-retries").unwrap();
    args[retries + 1] = "1".into();
    let mut command = common::command(&args, dir.path());
    command.env_remove("NO_COLOR");
    let out = common::output(command).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("WARN"), "a retry warning is shown: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(!stderr.contains('\u{7}'), "{stderr:?}");
    fake.assert_no_violations();
}
