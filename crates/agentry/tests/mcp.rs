//! MCP tools from real servers we did not write (`@modelcontextprotocol/server-everything`,
//! `server-filesystem`) and from our rmcp test server, called through the Toolkit exactly like
//! local tools: content mapping, errors as results, crashes, restarts, tool-list changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use agentry::mcp::{McpClient, McpError, McpServerConfig, McpStatus, McpToolOptions};
use agentry::message::{ContentBlock, MediaSource, ToolUseBlock};
use agentry::tool::{CancellationToken, ToolContext, ToolResponse, Toolkit};
use common::peers;
use futures::StreamExt;
use serde_json::{Value, json};

async fn call(toolkit: &Toolkit, name: &str, input: Value) -> ToolResponse {
    let call = ToolUseBlock {
        id: format!("c_{name}").into(),
        name: name.into(),
        input,
        raw_input: None,
    };
    let chunks: Vec<ToolResponse> = toolkit
        .call(
            &call,
            ToolContext::new(call.id.clone(), name, CancellationToken::new()),
        )
        .collect()
        .await;
    chunks.last().cloned().unwrap()
}

async fn registered(config: McpServerConfig, options: McpToolOptions) -> (McpClient, Toolkit, Vec<String>) {
    let client = McpClient::connect(config).await.unwrap();
    let toolkit = Toolkit::new();
    let names = toolkit.register_mcp_client(&client, options).await.unwrap();
    (client, toolkit, names)
}

#[tokio::test]
async fn everything_over_stdio_text_tools() {
    let (client, toolkit, names) = registered(peers::everything(), McpToolOptions::new()).await;
    assert!(
        matches!(&client.status(), McpStatus::Connected { server, .. } if server.contains("everything")),
        "{:?}",
        client.status()
    );
    for expected in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} missing from {names:?}"
        );
    }
    let echo = call(&toolkit, "echo", json!({"message": "hello"})).await;
    assert_eq!(echo.text_content(), "Echo: hello");
    assert!(!echo.is_error);
    let sum = call(&toolkit, "get-sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(sum.text_content(), "The sum of 2 and 40 is 42.");
    // The server's schema is enforced before the call leaves the process.
    let bad = call(&toolkit, "get-sum", json!({"a": "two", "b": 40})).await;
    assert!(bad.is_error, "{bad:?}");
    assert!(bad.text_content().contains("a"), "{}", bad.text_content());
    client.close().await;
}

#[tokio::test]
async fn everything_structured_content_goes_to_metadata() {
    let (_client, toolkit, _) = registered(peers::everything(), McpToolOptions::new()).await;
    let weather = call(&toolkit, "get-structured-content", json!({"location": "Chicago"})).await;
    assert!(!weather.is_error);
    let structured = &weather.metadata["structured_content"];
    assert_eq!(structured["temperature"], 36);
    assert_eq!(structured["conditions"], "Light rain / drizzle");
    // The text block the server sends for older clients is what the model reads.
    let text: Value = serde_json::from_str(&weather.text_content()).unwrap();
    assert_eq!(&text, structured);
}

#[tokio::test]
async fn everything_images_and_resources_become_blocks_and_notes() {
    let (_client, toolkit, _) = registered(peers::everything(), McpToolOptions::new()).await;
    let image = call(&toolkit, "get-tiny-image", json!({})).await;
    let png = image.content.iter().find_map(|b| match b {
        ContentBlock::Image {
            source: MediaSource::Base64 { media_type, data },
        } => Some((media_type.clone(), data.len())),
        _ => None,
    });
    let (media_type, len) = png.unwrap_or_else(|| panic!("no image in {image:?}"));
    assert_eq!(media_type, "image/png");
    assert!(len > 100);

    let links = call(&toolkit, "get-resource-links", json!({"count": 2})).await;
    let text = links.text_content();
    assert_eq!(text.matches("[resource link: ").count(), 2, "{text}");
    assert!(text.contains("demo://resource/"), "{text}");

    let reference = call(
        &toolkit,
        "get-resource-reference",
        json!({"resourceType": "Text", "resourceId": 3}),
    )
    .await;
    let text = reference.text_content();
    assert!(text.contains("[resource demo://resource/"), "{text}");
    assert!(!reference.is_error);
}

#[tokio::test]
async fn filesystem_outside_the_root_is_an_error_result() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("notes.txt"), "remember the milk").unwrap();
    let (_client, toolkit, names) = registered(
        peers::filesystem(root.path()),
        McpToolOptions::new()
            .prefix("fs__")
            .disable(["write_file", "edit_file", "move_file"]),
    )
    .await;
    assert!(names.iter().all(|n| n.starts_with("fs__")), "{names:?}");
    assert!(!names.contains(&"fs__write_file".to_owned()));
    let path = root.path().join("notes.txt").display().to_string();
    let read = call(&toolkit, "fs__read_text_file", json!({"path": path})).await;
    assert_eq!(read.text_content(), "remember the milk");
    let denied = call(&toolkit, "fs__read_text_file", json!({"path": "/etc/hostname"})).await;
    assert!(denied.is_error, "{denied:?}");
    assert!(
        denied.text_content().to_lowercase().contains("access denied"),
        "{}",
        denied.text_content()
    );
    let unknown = call(&toolkit, "fs__write_file", json!({"path": path, "content": "x"})).await;
    assert!(unknown.is_error, "a disabled tool is not callable");
    assert_eq!(
        std::fs::read_to_string(root.path().join("notes.txt")).unwrap(),
        "remember the milk"
    );
}

#[tokio::test]
async fn everything_over_streamable_http_survives_a_server_restart() {
    let port = peers::free_port();
    let server = peers::EverythingHttp::start(port).await;
    let (client, toolkit, _) =
        registered(McpServerConfig::http("web", server.url()), McpToolOptions::new()).await;
    assert_eq!(
        call(&toolkit, "echo", json!({"message": "one"}))
            .await
            .text_content(),
        "Echo: one"
    );
    // The server forgets our session when it restarts: the next call starts a new one.
    drop(server);
    let _server = peers::EverythingHttp::start(port).await;
    let again = call(&toolkit, "echo", json!({"message": "two"})).await;
    assert_eq!(again.text_content(), "Echo: two", "{again:?}");
    client.ping().await.unwrap();
}

#[tokio::test]
async fn a_crash_mid_call_is_an_error_result_and_the_next_call_restarts_the_server() {
    let (client, toolkit, _) = registered(peers::test_server(&[]), McpToolOptions::new()).await;
    let crashed = call(&toolkit, "crash", json!({})).await;
    assert!(crashed.is_error);
    let text = crashed.text_content();
    assert!(text.contains("closed the connection during the call"), "{text}");
    assert!(
        text.contains("about to crash in the middle of a call"),
        "the stderr tail is shown: {text}"
    );
    assert!(
        matches!(client.status(), McpStatus::Down(_)),
        "{:?}",
        client.status()
    );
    let echo = call(&toolkit, "echo", json!({"text": "back"})).await;
    assert_eq!(echo.text_content(), "back", "{echo:?}");
    assert!(matches!(client.status(), McpStatus::Connected { .. }));
}

#[tokio::test]
async fn a_server_that_fails_or_is_too_slow_to_start_is_a_clear_error() {
    let err = McpClient::connect(peers::test_server(&["--fail-start"]))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Start { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("the test server was told to fail at startup"),
        "{text}"
    );

    let slow = peers::test_server(&["--slow-start", "5000"]).startup_timeout(Duration::from_millis(300));
    let err = McpClient::connect(slow).await.unwrap_err().to_string();
    assert!(err.contains("starting slowly"), "{err}");

    let missing = McpServerConfig::stdio("ghost", "/nonexistent/mcp-server", Vec::<String>::new());
    let err = McpClient::connect(missing).await.unwrap_err().to_string();
    assert!(
        err.contains("ghost") && err.contains("/nonexistent/mcp-server"),
        "{err}"
    );
}

#[tokio::test]
async fn a_changed_tool_list_is_picked_up_and_removal_takes_the_tools_away() {
    let (_client, toolkit, names) = registered(peers::test_server(&[]), McpToolOptions::new()).await;
    assert!(!names.contains(&"extra".to_owned()));
    assert_eq!(call(&toolkit, "grow", json!({})).await.text_content(), "grown");
    for _ in 0..200 {
        if toolkit.tool_names().contains(&"extra".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        call(&toolkit, "extra", json!({})).await.text_content(),
        "extra here"
    );
    assert_eq!(toolkit.remove_mcp_client("test"), 8);
    assert!(toolkit.tool_names().is_empty(), "{:?}", toolkit.tool_names());
    let gone = call(&toolkit, "echo", json!({"text": "x"})).await;
    assert!(gone.is_error && gone.text_content().contains("echo"), "{gone:?}");
}

#[tokio::test]
async fn registration_options_group_presets_approval_and_typos() {
    let client = McpClient::connect(peers::everything()).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .create_group("demo", "The demo server's tools.", false, None)
        .unwrap();
    let names = toolkit
        .register_mcp_client(
            &client,
            McpToolOptions::new()
                .group("demo")
                .enable(["get-sum", "echo"])
                .preset("get-sum", "b", json!(40))
                .require_approval("echo", true),
        )
        .await
        .unwrap();
    assert_eq!(names, ["echo", "get-sum"]);
    // An inactive group's tools are not offered to the model.
    assert!(toolkit.json_schemas().is_empty(), "{:?}", toolkit.json_schemas());
    toolkit.set_groups_active(&["demo"], true).unwrap();
    let schemas = toolkit.json_schemas();
    let sum = schemas.iter().find(|s| s.name == "get-sum").unwrap();
    assert!(sum.parameters["properties"]["a"].is_object());
    assert!(
        sum.parameters["properties"].get("b").is_none(),
        "a preset is hidden: {}",
        sum.parameters
    );
    assert_eq!(
        call(&toolkit, "get-sum", json!({"a": 2})).await.text_content(),
        "The sum of 2 and 40 is 42."
    );
    let overridden = call(&toolkit, "get-sum", json!({"a": 2, "b": 1})).await;
    assert!(
        overridden.is_error,
        "the model cannot override a preset: {overridden:?}"
    );
    assert!(toolkit.policy("echo").require_approval);
    assert!(!toolkit.policy("get-sum").require_approval);

    // Options naming a tool the server does not have are refused, with the real names.
    let other = Toolkit::new();
    let err = other
        .register_mcp_client(&client, McpToolOptions::new().disable(["get_sum"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("get_sum") && err.contains("get-sum"), "{err}");
    assert!(other.tool_names().is_empty());
}

#[tokio::test]
async fn a_server_that_stays_down_is_reported_and_picked_up_again_when_back() {
    let port = peers::free_port();
    let server = peers::EverythingHttp::start(port).await;
    let config = McpServerConfig::http("web", server.url()).reconnect_attempts(2);
    let (client, toolkit, _) = registered(config, McpToolOptions::new()).await;
    assert_eq!(
        call(&toolkit, "echo", json!({"message": "one"}))
            .await
            .text_content(),
        "Echo: one"
    );
    drop(server);
    for _ in 0..2 {
        let down = call(&toolkit, "echo", json!({"message": "two"})).await;
        assert!(down.is_error, "{down:?}");
        let text = down.text_content();
        // Depending on when rmcp notices the server is gone: not reachable, or down after the
        // reconnect attempts. Either way the model reads that the call did not run.
        assert!(
            text.contains("\"web\" is not reachable") || text.contains("\"web\" is down"),
            "the server is named: {text}"
        );
        assert!(
            text.to_lowercase().contains("the call was not sent"),
            "the server is named: {text}"
        );
        assert!(!text.contains("WorkerTransport"), "{text}");
        assert!(
            matches!(client.status(), McpStatus::Down(_)),
            "{:?}",
            client.status()
        );
    }
    let _server = peers::EverythingHttp::start(port).await;
    let back = call(&toolkit, "echo", json!({"message": "three"})).await;
    assert_eq!(back.text_content(), "Echo: three", "{back:?}");
    assert!(matches!(client.status(), McpStatus::Connected { .. }));
}

#[tokio::test]
async fn stderr_is_drained_so_a_chatty_server_never_blocks() {
    let (client, toolkit, _) = registered(peers::test_server(&[]), McpToolOptions::new()).await;
    // About 1.5 MB on stderr, far beyond a pipe's 64 KiB buffer.
    let answer = call(&toolkit, "noisy", json!({"lines": 20000})).await;
    assert_eq!(answer.text_content(), "quiet now", "{answer:?}");
    let mut tail = client.stderr_tail();
    for _ in 0..200 {
        if tail.last().is_some_and(|l| l.starts_with("noise line 20000 ")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        tail = client.stderr_tail();
    }
    assert!(
        tail.last().unwrap().starts_with("noise line 20000 of 20000"),
        "{tail:?}"
    );
    assert!(tail.len() <= 40, "only a bounded tail is kept: {}", tail.len());
}

#[tokio::test]
async fn a_server_that_cannot_be_restarted_is_down_with_its_stderr() {
    // The first start runs the test server; later starts fail, saying why on stderr.
    let dir = tempfile::tempdir().unwrap();
    let server = match peers::test_server(&[]).transport {
        agentry::mcp::McpTransport::Stdio { command, .. } => command,
        other => panic!("{other:?}"),
    };
    let mark = dir.path().join("started-once");
    let script = format!(
        "if [ -e '{mark}' ]; then echo 'no second life for this server' >&2; exit 1; fi; touch '{mark}'; exec '{server}'",
        mark = mark.display()
    );
    let config = McpServerConfig::stdio("once", "sh", ["-c".to_owned(), script]).reconnect_attempts(2);
    let (client, toolkit, _) = registered(config, McpToolOptions::new()).await;
    assert!(call(&toolkit, "crash", json!({})).await.is_error);
    let down = call(&toolkit, "echo", json!({"text": "hello?"})).await;
    assert!(down.is_error, "{down:?}");
    let text = down.text_content();
    assert!(
        text.contains("The call was not sent: the MCP server \"once\" is down"),
        "{text}"
    );
    assert!(text.contains("could not be restarted (2 attempt(s))"), "{text}");
    assert!(
        text.contains("no second life for this server"),
        "its stderr is shown: {text}"
    );
    assert!(!text.contains("WorkerTransport"), "{text}");
    assert!(
        matches!(client.status(), McpStatus::Down(_)),
        "{:?}",
        client.status()
    );
}

/// Lines of the test server's `--log` file.
fn log_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The value of the first `key=` line in the log, once it is there (10 s at most).
async fn logged_pid(path: &std::path::Path, key: &str) -> i32 {
    let prefix = format!("{key}=");
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(pid) = log_lines(path)
                .iter()
                .find_map(|l| l.strip_prefix(&prefix).and_then(|p| p.parse().ok()))
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {key}= in {:?}", log_lines(path)))
}

/// Whether the process runs (a zombie waiting for its parent does not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits until none of `pids` runs; whether that happened within `limit`.
async fn all_gone(pids: &[i32], limit: Duration) -> bool {
    tokio::time::timeout(limit, async {
        while pids.iter().any(|p| running(*p)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn close_kills_a_server_that_ignores_stdin_close_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let log_arg = log.display().to_string();
    let client = McpClient::connect(peers::test_server(&[
        "--ignore-stdin-close",
        "--spawn-child",
        "--log",
        &log_arg,
    ]))
    .await
    .unwrap();
    let (server, child) = (logged_pid(&log, "pid").await, logged_pid(&log, "child").await);
    assert!(running(server) && running(child));
    client.close().await;
    assert!(
        all_gone(&[server, child], Duration::from_secs(5)).await,
        "still running after close: server {} child {}; log {:?}",
        running(server),
        running(child),
        log_lines(&log)
    );
    // It outlived its stdin: the group was killed, not merely left to exit.
    assert!(
        log_lines(&log).iter().any(|l| l == "stdin closed; staying"),
        "{:?}",
        log_lines(&log)
    );
}

#[tokio::test]
async fn close_kills_a_server_that_ignores_sigterm_too() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let log_arg = log.display().to_string();
    let client = McpClient::connect(peers::test_server(&[
        "--ignore-stdin-close",
        "--ignore-sigterm",
        "--log",
        &log_arg,
    ]))
    .await
    .unwrap();
    let server = logged_pid(&log, "pid").await;
    client.close().await;
    assert!(
        all_gone(&[server], Duration::from_secs(5)).await,
        "{:?}",
        log_lines(&log)
    );
    assert!(
        log_lines(&log).iter().any(|l| l == "signal TERM"),
        "SIGTERM came first: {:?}",
        log_lines(&log)
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_stdio_server_runs_in_its_own_process_group() {
    // The terminal sends Ctrl-C's SIGINT to its foreground process group (ours): a server in
    // its own group does not get it.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let log_arg = log.display().to_string();
    let client = McpClient::connect(peers::test_server(&["--log", &log_arg]))
        .await
        .unwrap();
    let server = logged_pid(&log, "pid").await;
    let pid = rustix::process::Pid::from_raw(server).unwrap();
    let group = rustix::process::getpgid(Some(pid)).unwrap();
    assert_eq!(group, pid, "the server leads its own group");
    assert_ne!(group, rustix::process::getpgrp(), "not in our group");
    client.close().await;
}

#[tokio::test]
async fn a_server_that_never_lists_its_tools_fails_within_the_startup_limit() {
    let config = peers::test_server(&["--hang-list"]).startup_timeout(Duration::from_millis(500));
    let listed = tokio::time::timeout(Duration::from_secs(20), async {
        let client = McpClient::connect(config).await?;
        let toolkit = Toolkit::new();
        toolkit.register_mcp_client(&client, McpToolOptions::new()).await
    })
    .await
    .expect("listing the tools hung past the start-up limit");
    let err = listed.unwrap_err().to_string();
    assert!(err.contains("tools/list") && err.contains("500ms"), "{err}");
}

#[tokio::test]
async fn one_startup_limit_covers_the_handshake_and_the_listing() {
    let config = peers::test_server(&["--hang-list"]).startup_timeout(Duration::from_millis(500));
    let started = tokio::time::timeout(Duration::from_secs(20), McpClient::start(config))
        .await
        .expect("start hung past its limit");
    let err = started.unwrap_err();
    assert!(matches!(err, McpError::Start { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("did not list its tools within the start-up limit of 500ms"),
        "{text}"
    );
    assert!(
        text.contains("tools/list will never be answered"),
        "the stderr tail is shown: {text}"
    );
}

#[tokio::test]
async fn a_server_that_pages_forever_is_refused_after_the_page_cap() {
    let config = peers::test_server(&["--endless-pages"]);
    let listed = tokio::time::timeout(Duration::from_secs(20), async {
        let client = McpClient::connect(config).await?;
        client.list_tools().await
    })
    .await
    .expect("paged forever");
    let err = listed.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "did not end after {} pages",
            agentry::mcp::MAX_TOOL_PAGES
        )),
        "{err}"
    );
}

#[tokio::test]
async fn mcp_tools_need_approval_unless_read_only_or_trusted() {
    // server-everything annotates `echo` read-only and `toggle-simulated-logging` not.
    let (client, toolkit, _) = registered(peers::everything(), McpToolOptions::new()).await;
    assert!(
        toolkit.policy("toggle-simulated-logging").require_approval,
        "a tool that may write asks by default"
    );
    assert!(
        !toolkit.policy("echo").require_approval,
        "readOnlyHint: true skips approval"
    );

    let listed = Toolkit::new();
    listed
        .register_mcp_client(
            &client,
            McpToolOptions::new().trust_tools(["toggle-simulated-logging"]),
        )
        .await
        .unwrap();
    assert!(
        !listed.policy("toggle-simulated-logging").require_approval,
        "autoApprove skips it"
    );
    assert!(
        listed.policy("gzip-file-as-resource").require_approval,
        "only the listed tool"
    );

    let trusted = Toolkit::new();
    trusted
        .register_mcp_client(&client, McpToolOptions::new().trust(true))
        .await
        .unwrap();
    assert!(
        !trusted.policy("gzip-file-as-resource").require_approval,
        "a trusted server"
    );
    client.close().await;
}
