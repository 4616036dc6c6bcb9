//! `agentry serve` over A2A v1.0, driven by the official A2A Python SDK's client: the agent
//! card, a task answered, a streamed task, a task cancelled mid-tool with the partial result,
//! and an approval asked as `input-required` and answered in the same task.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentry_testkit::peers::peers_dir;
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::{Value, json};

use crate::common::program::Program;
use crate::common::{
    clean_env, output_within, serve_args, server_base, slow_tree, text, tool_message, write_call,
};

/// The SDK client in `mode` against the server at `base`; what it printed.
async fn a2a_client(home: &Path, base: &str, mode: &str, prompt: &str, answer: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_client.py");
    let mut command = Command::new(peers_dir().join("venv/bin/python"));
    command.arg(script).args([mode, base, prompt, answer]);
    clean_env(&mut command, home);
    let output = output_within(command, std::time::Duration::from_secs(90)).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "the A2A client failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

async fn server(fake: &FakeLlm, home: &Path, extra: &[&str]) -> (Program, String) {
    let mut flags = vec!["--addr", "127.0.0.1:0"];
    flags.extend_from_slice(extra);
    let server = Program::start(&serve_args(fake, home, &flags), home);
    let base = server_base(&server).await;
    (server, base)
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

fn status_text(task: &Value) -> String {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_client_reads_the_card_and_gets_a_task_answered() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    std::fs::write(
        home.path().join("config.json"),
        json!({"name": "notes-agent", "description": "Answers from the notes"}).to_string(),
    )
    .unwrap();
    fake.push(Reply::tool_calls([Call::new(
        "t",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    fake.push(Reply::text("6 times 7 is 42."));
    let config = home.path().join("config.json").display().to_string();
    let (server, base) = server(&fake, home.path(), &["--config", &config]).await;
    let seen = a2a_client(home.path(), &base, "send", "What is 6*7?", "").await;

    let card = &seen["card"];
    assert_eq!(card["name"], "notes-agent");
    assert_eq!(card["description"], "Answers from the notes");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{base}/a2a"));
    assert_eq!(card["capabilities"]["streaming"], true);
    let task = &seen["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(status_text(task), "6 times 7 is 42.");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "6 times 7 is 42.");
    assert_eq!(task["history"][0]["role"], "ROLE_USER");
    assert_eq!(seen["got"]["id"], task["id"], "GetTask finds it");
    assert_eq!(
        seen["got"]["history"].as_array().map(Vec::len),
        Some(1),
        "historyLength 1"
    );
    assert!(fake.requests()[0].body.to_string().contains("What is 6*7?"));
    // The context is a session of the server, with the conversation in it.
    let context = task["contextId"].as_str().unwrap();
    let session = crate::common::http_client()
        .get(format!("{base}/v1/sessions/{context}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(session.contains("6 times 7 is 42."), "{session}");
    server.terminate();
    server.finish().await;
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_task_shows_its_tool_calls_and_ends_with_the_answer() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    fake.push(Reply::tool_calls([Call::new(
        "t",
        "calculate",
        r#"{"expression": "2+2"}"#,
    )]));
    fake.push(Reply::text("Four."));
    let (server, base) = server(&fake, home.path(), &[]).await;
    let seen = a2a_client(home.path(), &base, "stream", "2+2?", "").await;
    let events = seen["events"].as_array().unwrap();
    assert_eq!(state(&events[0]["task"]), "TASK_STATE_SUBMITTED", "{seen}");
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| e.get("statusUpdate"))
        .map(status_text)
        .collect();
    assert!(texts.contains(&"calling calculate".to_owned()), "{texts:?}");
    assert!(texts.contains(&"calculate: 4".to_owned()), "{texts:?}");
    assert!(
        events
            .iter()
            .any(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"] == "Four.")
    );
    let last = events.last().unwrap();
    assert_eq!(
        state(&last["statusUpdate"]),
        "TASK_STATE_COMPLETED",
        "the stream ends with the task"
    );
    server.terminate();
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_task_mid_tool_stops_the_tool_and_the_task_keeps_the_partial_result() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    slow_tree(home.path());
    fake.push(
        Reply::tool_calls([Call::new(
            "s",
            "search_files",
            r#"{"pattern": "fox", "path": "tree"}"#,
        )])
        .with_text("Searching."),
    );
    let (server, base) = server(&fake, home.path(), &[]).await;
    let seen = a2a_client(home.path(), &base, "cancel", "find the fox", "").await;

    let cancelled = &seen["cancelled"];
    assert_eq!(state(cancelled), "TASK_STATE_CANCELED", "{seen}");
    let partial = status_text(cancelled);
    assert!(
        partial.contains("[cancelled] The agent `agentry` was stopped"),
        "{partial}"
    );
    assert!(
        partial.contains("search_files: The user cancelled the search after"),
        "{partial}"
    );
    assert_eq!(seen["cancel_again"], "TaskNotCancelableError");
    let last = seen["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        state(&last["statusUpdate"]),
        "TASK_STATE_CANCELED",
        "the stream saw the cancel"
    );
    assert_eq!(fake.request_count(), 1, "no model call after the cancel");
    server.terminate();
    server.finish().await;
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_input_required_and_the_clients_answer_in_the_task_decides_it() {
    for (answer, written) in [("yes", true), ("no, not that file", false)] {
        let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
        fake.push(write_call());
        fake.push(Reply::text("Done."));
        let (server, base) = server(&fake, home.path(), &[]).await;
        let seen = a2a_client(home.path(), &base, "answer", "write hello to notes.txt", answer).await;

        let asked = &seen["asked"];
        assert_eq!(state(asked), "TASK_STATE_INPUT_REQUIRED", "{seen}");
        let question = status_text(asked);
        assert!(
            question.contains("`write_file`") && question.contains("Answer \"yes\""),
            "{question}"
        );
        assert_eq!(
            asked["status"]["message"]["parts"][1]["data"]["approval"]["tool"],
            "write_file"
        );
        let task = &seen["task"];
        assert_eq!(task["id"], asked["id"], "the same task goes on");
        assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
        assert_eq!(home.path().join("notes.txt").exists(), written, "{answer}");
        if !written {
            assert!(tool_message(&fake, 1, "w").contains("not that file"));
        }
        server.terminate();
        server.finish().await;
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_json_rpc_errors_unknown_methods_tasks_and_versions() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let (server, base) = server(&fake, home.path(), &[]).await;
    let client = crate::common::http_client();
    let call = |method: &str, params: Value, version: Option<&str>| {
        let mut request = client
            .post(format!("{base}/a2a"))
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        request.send()
    };
    for (method, params, version, code) in [
        ("tasks/get", json!({"id": "x"}), Some("1.0"), -32601),
        ("GetTask", json!({"id": "no-such-task"}), Some("1.0"), -32001),
        ("CancelTask", json!({"id": "no-such-task"}), None, -32001),
        ("GetTask", json!({"id": "x"}), Some("0.3"), -32009),
        (
            "SendMessage",
            json!({"message": {"role": "ROLE_USER", "parts": []}}),
            Some("1.0"),
            -32602,
        ),
    ] {
        let response = call(method, params, version).await.unwrap();
        assert_eq!(response.status(), 200, "{method}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{method}: {body}");
        assert_eq!(body["id"], 7);
    }
    assert_eq!(fake.request_count(), 0);
    server.terminate();
    server.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_never_sees_another_users_tasks_or_contexts() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    fake.push(Reply::text("Alice's answer."));
    let tokens = home.path().join("tokens");
    std::fs::write(&tokens, "alice:alice-token\nbob:bob-token\n").unwrap();
    let tokens = tokens.display().to_string();
    let (server, base) = server(&fake, home.path(), &["--token-file", &tokens]).await;
    let send = |token: &'static str, method: &'static str, params: Value| {
        let client = crate::common::http_client_with_token(token);
        let url = format!("{base}/a2a");
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
            let response = client.post(url).json(&body).send().await.unwrap();
            response.json::<Value>().await.unwrap()
        }
    };
    let message = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let alice = send("alice-token", "SendMessage", message).await;
    let task = &alice["result"]["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{alice}");
    let (task_id, context) = (task["id"].clone(), task["contextId"].clone());

    let got = send("bob-token", "GetTask", json!({"id": task_id})).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    let cancel = send("bob-token", "CancelTask", json!({"id": task_id})).await;
    assert_eq!(cancel["error"]["code"], -32001, "{cancel}");
    let listed = send("bob-token", "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let into = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": context}});
    let joined = send("bob-token", "SendMessage", into).await;
    assert_eq!(joined["error"]["code"], -32602, "{joined}");
    let own = send("alice-token", "GetTask", json!({"id": task_id})).await;
    assert_eq!(own["result"]["id"], task_id);
    assert_eq!(fake.request_count(), 1, "bob's messages reached no model");
    server.terminate();
    server.finish().await;
}

/// The A2A SDK's agent of the library's tests (`crates/agentry/tests/peers/a2a_server.py`),
/// killed when dropped; and its URL.
struct SdkAgent(std::process::Child, String);

impl Drop for SdkAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sdk_agent() -> SdkAgent {
    use std::io::BufRead;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agentry/tests/peers/a2a_server.py");
    let mut child = Command::new(peers_dir().join("venv/bin/python"))
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("PORT=")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    SdkAgent(child, format!("http://127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_a2a_agent_in_the_config_is_a_tool_of_run_and_a_dead_one_only_a_warning() {
    let remote = tokio::task::spawn_blocking(sdk_agent).await.unwrap();
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let config = home.path().join("config.json");
    let remotes = json!({"a2a": {"archive": remote.1, "gone": {"url": "http://127.0.0.1:9", "headers": {"x-team": "a"}}}});
    std::fs::write(&config, remotes.to_string()).unwrap();
    fake.push(Reply::tool_calls([Call::new(
        "a",
        "archive",
        r#"{"prompt": "hello"}"#,
    )]));
    fake.push(Reply::text("The archive says hi."));
    let config = config.display().to_string();
    let out = crate::common::agentry(
        crate::common::run_args(
            &fake.base_url(),
            home.path(),
            &["--no-mcp", "--config", &config],
            "ask the archive",
        ),
        home.path(),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "The archive says hi.\n");
    assert!(
        stderr.contains("warning: the A2A agent \"gone\" is not used"),
        "{stderr}"
    );
    assert_eq!(tool_message(&fake, 1, "a"), "hi from the SDK agent");
    let offered = fake.requests()[0].body["tools"].to_string();
    assert!(
        offered.contains("Reads the archive and answers from it"),
        "{offered}"
    );
    assert!(!offered.contains("\"gone\""), "{offered}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentry_calls_agentry_over_a2a_and_the_remote_approval_is_asked_at_the_terminal() {
    let (remote_llm, local_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    let (remote_home, local_home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    remote_llm.push(write_call());
    remote_llm.push(Reply::text("I wrote the note."));
    let (remote, base) = server(&remote_llm, remote_home.path(), &[]).await;

    let config = local_home.path().join("config.json");
    std::fs::write(&config, json!({"a2a": {"scribe": base}}).to_string()).unwrap();
    local_llm.push(Reply::tool_calls([Call::new(
        "s",
        "scribe",
        r#"{"prompt": "write hello to notes.txt"}"#,
    )]));
    local_llm.push(Reply::text("The scribe wrote it."));
    let config = config.display().to_string();
    let mut local = Program::start(
        &crate::common::run_args(
            &local_llm.base_url(),
            local_home.path(),
            &["--no-mcp", "--config", &config],
            "take a note",
        ),
        local_home.path(),
    );
    local.stderr_has("The remote agent `agentry` asks").await;
    local.stderr_has("write_file").await;
    local.type_line("y");
    let (status, stdout, stderr) = local.finish().await;
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout, "The scribe wrote it.\n");
    assert_eq!(
        std::fs::read_to_string(remote_home.path().join("notes.txt")).unwrap(),
        "hello",
        "the remote agent wrote once approved here"
    );
    assert_eq!(tool_message(&local_llm, 1, "s"), "I wrote the note.");
    remote.terminate();
    remote.finish().await;
    remote_llm.assert_no_violations();
    local_llm.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_working_task_steers_its_reply() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let gate = agentry_testkit::Gate::new();
    fake.push(
        Reply::text("A long answer about every detail.")
            .chunks(4)
            .pause_after(2, gate.clone()),
    );
    fake.push(Reply::text("Short answer."));
    let (server, base) = server(&fake, home.path(), &[]).await;
    let client = crate::common::http_client();
    let rpc = |method: &'static str, params: Value| {
        let request = client
            .post(format!("{base}/a2a"))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        async move { request.send().await.unwrap() }
    };
    let message = |text: &str, task: Option<&Value>| {
        let mut m = json!({"messageId": uuid(), "role": "ROLE_USER", "parts": [{"text": text}]});
        if let Some(task) = task {
            m["taskId"] = task.clone();
        }
        json!({"message": m, "configuration": {"returnImmediately": true}})
    };
    let started: Value = rpc("SendMessage", message("explain it", None))
        .await
        .json()
        .await
        .unwrap();
    let task_id = started["result"]["task"]["id"].clone();
    gate.reached().await;
    let steered: Value = rpc("SendMessage", message("keep it short", Some(&task_id)))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(steered["result"]["task"]["id"], task_id, "{steered}");
    // Watched from the session's own event stream, opened before the model goes on.
    let context = started["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut session_events = client
        .get(format!("{base}/v1/sessions/{context}/events"))
        .send()
        .await
        .unwrap();
    gate.open();
    let mut seen = String::new();
    while !seen.contains("reply_finished") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), session_events.chunk())
            .await
            .expect("the reply's end within 20 s")
            .unwrap()
            .expect("the stream went on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Until the task is over (a stream that ends at once when it is).
    let _ = rpc("SubscribeToTask", json!({"id": task_id})).await.text().await;
    let got: Value = rpc("GetTask", json!({"id": task_id})).await.json().await.unwrap();
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(got["result"]["artifacts"][0]["parts"][0]["text"], "Short answer.");
    let last = fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "keep it short");
    let history = got["result"]["history"].to_string();
    assert!(history.contains("keep it short"), "{history}");
    server.terminate();
    server.finish().await;
    fake.assert_no_violations();
}

fn uuid() -> String {
    format!("m-{}", std::process::id()) + &format!("-{:?}", std::time::Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_an_mcp_server_asks_for_is_input_required_and_answered_with_a_data_part() {
    let (fake, home) = (FakeLlm::start().await, tempfile::tempdir().unwrap());
    let servers = home.path().join("servers.json");
    let everything = json!({"command": "node", "args": [
        agentry_testkit::peers::npm_package("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"]});
    std::fs::write(
        &servers,
        json!({"mcpServers": {"everything": everything}}).to_string(),
    )
    .unwrap();
    fake.push(Reply::tool_calls([Call::new(
        "e",
        "trigger-elicitation-request",
        "{}",
    )]));
    fake.push(Reply::text("Thanks."));
    let mut args = serve_args(
        &fake,
        home.path(),
        &["--addr", "127.0.0.1:0", "--allow", "trigger-elicitation-request"],
    );
    let no_mcp = args.iter().position(|a| a == "--no-mcp").unwrap();
    args[no_mcp] = "--mcp-config".into();
    args.insert(no_mcp + 1, servers.display().to_string());
    let server = Program::start(&args, home.path());
    let base = server_base(&server).await;
    let client = crate::common::http_client();
    let rpc = |params: Value| {
        let request = client
            .post(format!("{base}/a2a"))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let first = rpc(
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "fill the form"}]}}),
    )
    .await;
    let task = &first["result"]["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{first}");
    let form = &task["status"]["message"]["parts"][1]["data"]["input"];
    assert_eq!(form["schema"]["required"], json!(["name"]), "{form}");
    let answer = |data: Value| json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": task["id"], "parts": [{"data": data}]}});
    let refused = rpc(answer(json!({"integer": 7}))).await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "a form without its required name: {refused}"
    );
    let done = rpc(answer(json!({"name": "Ada Lovelace"}))).await;
    assert_eq!(state(&done["result"]["task"]), "TASK_STATE_COMPLETED", "{done}");
    assert!(tool_message(&fake, 1, "e").contains("- Name: Ada Lovelace"));
    server.terminate();
    server.finish().await;
    fake.assert_no_violations();
}
