//! MCP servers in the `agentry` binary, end to end: `--mcp-config`, the default file, and
//! `agentry mcp list`, against the pinned `server-everything` and `server-filesystem`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::{agentry, run_args, text};
use serde_json::{Value, json};

use agentry_testkit::peers::npm_package;

/// `server-everything` over stdio, as an `mcpServers` entry.
fn everything() -> Value {
    json!({"command": "node", "args": [
        npm_package("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"]})
}

/// `server-filesystem` rooted at `root`: its `read_file`, `write_file` and `search_files` clash
/// with the built-in tools.
fn filesystem(root: &Path) -> Value {
    json!({"command": "node", "args": [
        npm_package("@modelcontextprotocol/server-filesystem/dist/index.js"), root.display().to_string()]})
}

fn broken() -> Value {
    json!({"command": "/nonexistent/x"})
}

/// Writes `{"mcpServers": servers}` into `dir` and returns its path as an argument.
fn write_config(dir: &Path, servers: Value) -> String {
    let path = dir.join("servers.json");
    std::fs::write(&path, json!({ "mcpServers": servers }).to_string()).unwrap();
    path.display().to_string()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// The tool names offered in one request to the fake model.
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The lines of one server's block in `mcp list` output: its header and the indented lines after.
fn section<'a>(stdout: &'a str, server: &str) -> Vec<&'a str> {
    let header = format!("{server}: ");
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(&header));
    let Some(first) = lines.next() else {
        panic!("no {server:?} in:\n{stdout}");
    };
    std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with(' ')))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_list_shows_tools_of_live_servers_and_why_others_are_down() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        json!({"everything": everything(), "broken": broken()}),
    );

    let out = agentry(strings(&["mcp", "list", "--mcp-config", &config]), dir.path()).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let live = section(&stdout, "everything");
    assert!(live[0].starts_with("everything: connected ("), "{stdout}");
    assert!(live.iter().any(|l| l.contains("stdio: node ")), "{stdout}");
    for tool in ["echo", "get-sum"] {
        assert!(
            live.iter().any(|l| l.split_whitespace().next() == Some(tool)),
            "{tool} missing in:\n{stdout}"
        );
    }
    let down = section(&stdout, "broken");
    assert_eq!(down[0], "broken: down", "{stdout}");
    assert!(
        down.iter()
            .any(|l| l.trim_start().starts_with("error: ") && l.contains("/nonexistent/x")),
        "{stdout}"
    );

    let out = agentry(
        strings(&["mcp", "list", "--json", "--mcp-config", &config]),
        dir.path(),
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_name = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap()
    };
    let live = by_name("everything");
    assert_eq!(live["status"], "connected");
    assert_eq!(live["transport"]["type"], "stdio");
    let tools: Vec<&str> = live["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"echo") && tools.contains(&"get-sum"), "{tools:?}");
    let down = by_name("broken");
    assert_eq!(down["status"], "down");
    assert!(
        down["error"].as_str().unwrap().contains("/nonexistent/x"),
        "{down}"
    );

    let only_live = write_config(dir.path(), json!({"everything": everything()}));
    let out = agentry(strings(&["mcp", "list", "--mcp-config", &only_live]), dir.path()).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_calls_an_mcp_tool_and_the_model_reads_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"everything": everything()}));
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "get-sum",
        r#"{"a": 2, "b": 40}"#,
    )]));
    fake.push(Reply::text("2 + 40 is 42."));
    let out = agentry(
        run_args(
            &fake.base_url(),
            dir.path(),
            &["--mcp-config", &config],
            "What is 2 + 40?",
        ),
        dir.path(),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert_eq!(stdout, "2 + 40 is 42.\n");
    assert!(!stderr.contains("warning"), "{stderr}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tools = offered_tools(&requests[0].body);
    for name in ["calculate", "read_file", "echo", "get-sum"] {
        assert!(tools.iter().any(|t| t == name), "{name} not offered: {tools:?}");
    }
    let system = requests[0].body["messages"][0]["content"].to_string();
    assert!(system.contains("MCP servers (everything)"), "{system}");
    let tool_results: Vec<String> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(tool_results.len(), 1, "{tool_results:?}");
    assert!(
        tool_results[0].contains("The sum of 2 and 40 is 42."),
        "{tool_results:?}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_goes_on_without_a_server_that_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"broken": broken()}));
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Still here."));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "hi"),
        dir.path(),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert_eq!(stdout, "Still here.\n");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: MCP server \"broken\" is not available: "))
        .unwrap_or_else(|| panic!("no warning in:\n{stderr}"));
    assert!(warning.contains("/nonexistent/x"), "{warning}");
    let tools = offered_tools(&fake.requests()[0].body);
    assert_eq!(tools.len(), 6, "only the built-in tools: {tools:?}");
    let system = fake.requests()[0].body["messages"][0]["content"].to_string();
    assert!(!system.contains("MCP"), "{system}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clashing_tool_names_get_the_server_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"fs": filesystem(dir.path())}));
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("ok"));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "hi"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert!(
        stderr.contains("warning: MCP server \"fs\" has tools named like existing ones")
            && stderr.contains("fs__<tool>"),
        "{stderr}"
    );
    let tools = offered_tools(&fake.requests()[0].body);
    for name in ["read_file", "fs__read_file", "fs__list_directory"] {
        assert!(tools.iter().any(|t| t == name), "{name} not offered: {tools:?}");
    }
    fake.assert_no_violations();
    // The server's command line names the temp dir: once `run` is over, no process may.
    let root = dir.path().display().to_string();
    assert_eq!(processes_mentioning(&root), Vec::<String>::new());
}

/// Command lines of the running processes that contain `needle` (Linux /proc).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(cmdline);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_config_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad-mcp.json");
    std::fs::write(&bad, r#"{"mcpServers": {"x": "#).unwrap();
    let bad = bad.display().to_string();

    let out = agentry(
        run_args("http://127.0.0.1:9/v1", dir.path(), &["--mcp-config", &bad], "hi"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid MCP config file") && stderr.contains("bad-mcp.json"),
        "{stderr}"
    );

    let out = agentry(strings(&["mcp", "list", "--mcp-config", &bad]), dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad-mcp.json"), "{stderr}");

    let missing = dir.path().join("missing.json").display().to_string();
    let out = agentry(strings(&["mcp", "list", "--mcp-config", &missing]), dir.path()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_file_is_read_unless_no_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let config_dir = dir.path().join(".config/agentry");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(config_dir.join("mcp.json"), "not json").unwrap();

    let out = agentry(
        run_args("http://127.0.0.1:9/v1", dir.path(), &[], "hi"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agentry/mcp.json"), "{stderr}");

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("no MCP"));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--no-mcp"], "hi"),
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no MCP\n");

    std::fs::write(
        config_dir.join("mcp.json"),
        json!({"mcpServers": {"everything": everything()}}).to_string(),
    )
    .unwrap();
    let out = agentry(strings(&["mcp", "list", "--json"]), dir.path()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["name"], "everything");
    assert_eq!(listed[0]["status"], "connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_uses_mcp_tools_across_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"everything": everything()}));
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "get-sum",
        r#"{"a": 2, "b": 40}"#,
    )]));
    fake.push(Reply::text("It is 42."));
    fake.push(Reply::tool_calls([Call::new(
        "c2",
        "echo",
        r#"{"message": "again"}"#,
    )]));
    fake.push(Reply::text("Echoed."));
    let args = strings(&[
        "chat",
        "--base-url",
        &fake.base_url(),
        "--model",
        "test-model",
        "--workdir",
        &dir.path().display().to_string(),
        "--mcp-config",
        &config,
    ]);
    let home = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(args)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Both prompts at once, then end of input: chat answers each, then quits.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"What is 2 + 40?\nSay again.\n").unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert!(
        stdout.contains("It is 42.") && stdout.contains("Echoed."),
        "{stdout}\n{stderr}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let results: Vec<String> = requests[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(results, ["The sum of 2 and 40 is 42.", "Echo: again"]);
    fake.assert_no_violations();
}

/// The rmcp-built test server of `agentry-testkit`, next to the `agentry` binary (built here if
/// this test run did not build it).
fn test_server(args: &[&str]) -> Value {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let bin = BUILT.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "agentry-testkit", "--bin", "mcp-test-server"])
            .status()
            .unwrap();
        assert!(status.success(), "cannot build mcp-test-server");
        let dir = Path::new(env!("CARGO_BIN_EXE_agentry")).parent().unwrap();
        dir.join("mcp-test-server").display().to_string()
    });
    json!({"command": bin, "args": args})
}

fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (10 s at most) for a log line starting with `prefix`; the rest of that line.
async fn logged(path: &Path, prefix: &str) -> String {
    let found = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            if let Some(rest) = log_lines(path).iter().find_map(|l| l.strip_prefix(prefix)) {
                return rest.to_owned();
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {prefix:?} line in {:?}", log_lines(path)))
}

/// Whether the process runs (a zombie does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

async fn all_gone(pids: &[i32]) -> bool {
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while pids.iter().any(|p| running(*p)) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_ignores_stdin_close_is_gone_when_run_exits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let log_arg = log.display().to_string();
    let config = write_config(
        dir.path(),
        json!({"stubborn": test_server(&["--ignore-stdin-close", "--spawn-child", "--log", &log_arg])}),
    );
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("done"));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "hi"),
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let server: i32 = logged(&log, "pid=").await.parse().unwrap();
    let child: i32 = logged(&log, "child=").await.parse().unwrap();
    assert!(
        all_gone(&[server, child]).await,
        "left running after agentry exited: server {} child {}; {:?}",
        running(server),
        running(child),
        log_lines(&log)
    );
    assert!(log_lines(&log).contains(&"stdin closed; staying".to_owned()));
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_in_the_terminal_does_not_reach_stdio_servers() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let log_arg = log.display().to_string();
    let config = write_config(
        dir.path(),
        json!({"test": test_server(&["--ignore-stdin-close", "--log", &log_arg])}),
    );
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "slow",
        r#"{"seconds": 600}"#,
    )]));
    fake.push(Reply::text("Stopped."));
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command
        .args(run_args(
            &fake.base_url(),
            dir.path(),
            &["--mcp-config", &config],
            "go",
        ))
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .env("HOME", dir.path())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Its own group, standing for the terminal's foreground group.
        .process_group(0);
    let child = command.spawn().unwrap();
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    // The server runs the call: the reply is under way.
    logged(&log, "call slow").await;
    let server: i32 = logged(&log, "pid=").await.parse().unwrap();
    // What the terminal does on Ctrl-C.
    rustix::process::kill_process_group(group, rustix::process::Signal::INT).unwrap();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("agentry did not exit after Ctrl-C")
    .unwrap();
    // Ctrl-C cancelled the running call; the model read that and answered.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Cancelling slow"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "Stopped.\n");
    let lines = log_lines(&log);
    assert!(
        !lines.contains(&"signal INT".to_owned()),
        "the server got Ctrl-C: {lines:?}"
    );
    // It was still alive when agentry closed it (its group got SIGTERM), and it is gone now.
    assert!(lines.contains(&"signal TERM".to_owned()), "{lines:?}");
    assert!(all_gone(&[server]).await, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_that_may_write_asks_and_without_a_terminal_is_declined() {
    // gzip-file-as-resource (readOnlyHint: false) fetches its `data` URL: a fetch from our
    // listener shows it ran.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/file.txt",
        listener.local_addr().unwrap().port()
    );
    let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&fetches);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
                .await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let gzip = |id: &str| {
        Reply::tool_calls([Call::new(
            id,
            "gzip-file-as-resource",
            json!({"name": "f.gz", "data": url}).to_string(),
        )])
    };

    let config = write_config(dir.path(), json!({"everything": everything()}));
    let fake = FakeLlm::start().await;
    fake.push(gzip("c1"));
    fake.push(Reply::text("ok"));
    // `agentry()` runs the binary with stdin closed: nobody can answer.
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "zip it"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gzip-file-as-resource"),
        "the question names the tool: {stderr}"
    );
    let result = tool_result(&fake.requests()[1].body, "c1");
    assert!(result.starts_with(agentry::tool::DECLINED), "{result}");
    assert_eq!(
        fetches.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the declined call ran"
    );
    fake.assert_no_violations();

    // The control: trusted in the configuration, the same call runs (and fetches).
    let mut trusted = everything();
    trusted["autoApprove"] = json!(["gzip-file-as-resource"]);
    let config = write_config(dir.path(), json!({"everything": trusted}));
    let fake = FakeLlm::start().await;
    fake.push(gzip("c2"));
    fake.push(Reply::text("ok"));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "zip it"),
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = tool_result(&fake.requests()[1].body, "c2");
    assert!(!result.starts_with(agentry::tool::DECLINED), "{result}");
    assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1, "{result}");
    fake.assert_no_violations();
}

/// The content of the tool result for `call_id` in a request body.
fn tool_result(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| panic!("no result for {call_id} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_list_shows_the_names_the_agent_sees() {
    // server-filesystem's read_file clashes with the built-in one: the agent sees fs__read_file.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"fs": filesystem(dir.path())}));
    let out = agentry(strings(&["mcp", "list", "--mcp-config", &config]), dir.path()).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let names: Vec<&str> = section(&stdout, "fs")
        .iter()
        .skip(3)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"fs__read_file"), "{stdout}");
    assert!(!names.contains(&"read_file"), "{stdout}");

    let out = agentry(
        strings(&["mcp", "list", "--json", "--mcp-config", &config]),
        dir.path(),
    )
    .await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = listed[0]["tools"].as_array().unwrap();
    let read = tools.iter().find(|t| t["server_name"] == "read_file").unwrap();
    assert_eq!(read["name"], "fs__read_file");
    assert_eq!(read["requires_approval"], false, "annotated read-only");
    let write = tools.iter().find(|t| t["server_name"] == "write_file").unwrap();
    assert_eq!(write["requires_approval"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_mistakes_and_unreachable_servers_get_plain_messages() {
    let dir = tempfile::tempdir().unwrap();
    let array = dir.path().join("array.json");
    std::fs::write(&array, "[]").unwrap();
    let out = agentry(
        strings(&["mcp", "list", "--mcp-config", &array.display().to_string()]),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("expected a JSON object with an \"mcpServers\" key"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("struct") && !stderr.contains("ConfigFile"),
        "{stderr}"
    );

    // Nothing listens on port 1: one clean warning, no dump of the HTTP client's internals.
    let config = write_config(dir.path(), json!({"web": {"url": "http://127.0.0.1:1/mcp"}}));
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("fine"));
    let out = agentry(
        run_args(&fake.base_url(), dir.path(), &["--mcp-config", &config], "hi"),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("warning: MCP server \"web\" is not available: "),
        "{stderr}"
    );
    assert!(
        !stderr.contains("reqwest::Error") && !stderr.contains("ERROR"),
        "{stderr}"
    );
}

/// Issue 25: the tools can be chosen. `--no-builtin-tools` leaves MCP tools alone (and the
/// system prompt claims no built-in ability); `--tools` (or the config's "tools") offers only
/// the names given, MCP and built-in alike; a name no tool has is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_offered_can_be_chosen_mcp_tools_alone_included() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({"everything": everything()}));
    let settings = dir.path().join("config.json");
    std::fs::write(&settings, json!({"tools": ["echo"]}).to_string()).unwrap();
    let settings = settings.display().to_string();
    let cases: [(&[&str], &[&str], &[&str]); 3] = [
        (
            &["--no-builtin-tools"],
            &["echo", "get-sum"],
            &["calculate", "read_file", "current_time"],
        ),
        (
            &["--tools", "get-sum,calculate,nosuch"],
            &["get-sum", "calculate"],
            &["echo", "read_file"],
        ),
        (&["--config", &settings], &["echo"], &["get-sum", "calculate"]),
    ];
    for (flags, offered, not_offered) in cases {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text("ok"));
        let mut extra = vec!["--mcp-config", config.as_str()];
        extra.extend(flags);
        let out = agentry(run_args(&fake.base_url(), dir.path(), &extra, "hi"), dir.path()).await;
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{flags:?}: {stderr}");
        let body = &fake.requests()[0].body;
        let tools = offered_tools(body);
        for name in offered {
            assert!(
                tools.iter().any(|t| t == name),
                "{flags:?}: {name} not offered: {tools:?}"
            );
        }
        for name in not_offered {
            assert!(
                !tools.iter().any(|t| t == name),
                "{flags:?}: {name} offered: {tools:?}"
            );
        }
        let system = body["messages"][0]["content"].to_string();
        if flags == ["--no-builtin-tools"] {
            assert!(
                !system.contains("tell the time") && !system.contains("files"),
                "{system}"
            );
            assert!(system.contains("MCP servers (everything)"), "{system}");
        }
        assert_eq!(
            stderr.contains("--tools names nosuch"),
            flags.contains(&"get-sum,calculate,nosuch"),
            "{flags:?}: {stderr}"
        );
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_form_is_asked_field_by_field_at_the_terminal_and_declined_with_a_command() {
    for decline in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeLlm::start().await;
        let config = write_config(dir.path(), json!({ "everything": everything() }));
        fake.push(Reply::tool_calls([Call::new(
            "e",
            "trigger-elicitation-request",
            "{}",
        )]));
        fake.push(Reply::text("Thanks."));
        let mut program = crate::common::program::Program::start(
            &run_args(
                &fake.base_url(),
                dir.path(),
                &["--mcp-config", &config, "--allow", "trigger-elicitation-request"],
                "fill it",
            ),
            dir.path(),
        );
        program.stderr_has("? everything: input asks:").await;
        program.stderr_has("Please provide inputs").await;
        let mut asked = 0;
        loop {
            asked += 1;
            program.stderr_has_n(") > ", asked).await;
            if decline {
                program.type_line("/decline");
                break;
            }
            // The prompt shown last: after the previous one's " > " (typed lines are not echoed).
            let shown = program.stderr_so_far();
            let end = shown.rfind(") > ").unwrap();
            let start = shown[..end].rfind(" > ").map_or(0, |i| i + 3);
            let prompt = shown[start..end].to_owned();
            program.type_line(if prompt.contains("legal name") {
                "Ada Lovelace"
            } else {
                ""
            });
            if asked == 13 {
                break;
            }
        }
        let (status, out, err) = program.finish().await;
        assert!(status.success(), "{err}");
        assert_eq!(out, "Thanks.\n");
        let result = crate::common::tool_message(&fake, 1, "e");
        match decline {
            true => assert!(result.contains("User declined"), "{result}"),
            false => {
                assert!(result.contains("- Name: Ada Lovelace"), "{result}");
                assert!(
                    result.contains("\"integer\": 42"),
                    "the default was kept: {result}"
                );
            }
        }
        fake.assert_no_violations();
    }
}
