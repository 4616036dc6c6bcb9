//! Running the built `agentry` binary in the end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod program;
pub mod tty;

use std::path::Path;
use std::process::{Command, Output};

/// The binary with a clean environment: `home` is HOME and holds XDG_CONFIG_HOME, so the user's
/// own config files and API settings are never read. Colours off (`NO_COLOR`).
pub fn command(args: &[String], home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command.args(args);
    clean_env(&mut command, home);
    command
}

/// The clean environment of [`command`], for another program that starts the binary itself
/// (an MCP host, say).
pub fn clean_env(command: &mut Command, home: &Path) {
    command
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_MODEL")
        .env_remove("AGENTRY_MODEL")
        .env_remove("AGENTRY_LOG")
        .env_remove("AGENTRY_PROVIDER")
        .env_remove("AGENTRY_MODEL_PATH")
        .env_remove("AGENTRY_DB")
        // No trace export unless a test asks for one.
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("AGENTRY_TRACE_CONTENT")
        // Sessions go to HOME's data directory unless a test gives --db.
        .env("XDG_DATA_HOME", home.join(".local/share"))
        // No test fetches a model from the internet by accident.
        .env("AGENTRY_MODELS_DIR", home.join("models"))
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env("AGENTRY_PYPI_URL", "http://127.0.0.1:9")
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("HOME", home)
        .env("NO_COLOR", "1");
}

/// Runs the binary (see [`command`]) to its end, stdin closed.
pub async fn agentry(args: Vec<String>, home: &Path) -> Output {
    output(command(&args, home)).await
}

/// Runs a prepared command to its end, stdin closed, within a deadline.
pub async fn output(command: Command) -> Output {
    output_within(command, std::time::Duration::from_secs(60)).await
}

/// [`output`] with another deadline (a real model on a CPU takes minutes).
pub async fn output_within(mut command: Command, deadline: std::time::Duration) -> Output {
    let run =
        tokio::task::spawn_blocking(move || command.stdin(std::process::Stdio::null()).output().unwrap());
    tokio::time::timeout(deadline, run)
        .await
        .unwrap_or_else(|_| panic!("agentry did not finish within {deadline:?}"))
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `agentry run` against the fake model at `fake_url`, no retries, then `extra` and the prompt.
pub fn run_args(fake_url: &str, workdir: &Path, extra: &[&str], prompt: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--base-url".into(),
        fake_url.into(),
        "--model".into(),
        "test-model".into(),
        "--workdir".into(),
        workdir.display().to_string(),
        "--max-retries".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push(prompt.into());
    args
}

/// `agentry chat` against the fake model at `fake_url`, no retries, no MCP config.
pub fn chat_args(fake_url: &str, workdir: &Path) -> Vec<String> {
    let mut args = run_args(fake_url, workdir, &["--no-mcp"], "");
    args[0] = "chat".into();
    args.pop();
    args
}

/// The model's call `w` of `write_file`, writing "hello" to notes.txt (asks for approval).
pub fn write_call() -> agentry_testkit::Reply {
    agentry_testkit::Reply::tool_calls([agentry_testkit::Call::new(
        "w",
        "write_file",
        r#"{"path": "notes.txt", "content": "hello"}"#,
    )])
}

/// The result the model read for call `call_id` in request `n` of `fake`.
pub fn tool_message(fake: &agentry_testkit::FakeLlm, n: usize, call_id: &str) -> String {
    fake.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap()
}

/// `dir/tree`: hard links to one 4 MiB text file, cheap to make, each searched on its own, slow
/// enough together that `search_files` on it still runs (and reports progress) when a test
/// cancels it.
pub fn slow_tree(dir: &Path) {
    let tree = dir.join("tree");
    std::fs::create_dir(&tree).unwrap();
    let line = "the quick brown fox jumps over the lazy dog, again and again and again\n";
    let text = line.repeat(4 * 1024 * 1024 / line.len());
    std::fs::write(tree.join("f0000.txt"), text).unwrap();
    for i in 1..400 {
        std::fs::hard_link(tree.join("f0000.txt"), tree.join(format!("f{i:04}.txt"))).unwrap();
    }
}

/// `agentry serve` against the fake model, on a database in `home`, then `extra`.
pub fn serve_args(fake: &agentry_testkit::FakeLlm, home: &Path, extra: &[&str]) -> Vec<String> {
    let db = home.join("s.db").display().to_string();
    let mut args = run_args(&fake.base_url(), home, &["--no-mcp", "--db", &db], "");
    args.pop();
    args[0] = "serve".into();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// The base URL a started `agentry serve` says it listens on.
pub async fn server_base(server: &program::Program) -> String {
    server.stderr_has("listening on http://").await;
    server.stderr_has(" (Ctrl-C").await;
    server
        .stderr_so_far()
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned()
}

/// An HTTP client (reqwest is built without a default TLS crypto provider).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// An HTTP client whose requests carry `Authorization: Bearer TOKEN`.
pub fn http_client_with_token(token: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// `POST url` with a JSON body: the status and the JSON answer.
pub async fn post_json(
    client: &reqwest::Client,
    url: String,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap(),
    )
}

/// On the `agentry serve` at `base`: creates session `name`, sends `text`, and reads the
/// session's event stream to the end of the reply. The session's id and the stream's text.
pub async fn served_reply(client: &reqwest::Client, base: &str, name: &str, text: &str) -> (String, String) {
    use futures::StreamExt;
    let (status, created) = post_json(
        client,
        format!("{base}/v1/sessions"),
        serde_json::json!({"name": name}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let events = client
        .get(format!("{base}/v1/sessions/{id}/events"))
        .send()
        .await
        .unwrap();
    let (status, _) = post_json(
        client,
        format!("{base}/v1/sessions/{id}/messages"),
        serde_json::json!({"text": text}),
    )
    .await;
    assert_eq!(status, 202);
    let mut body = events.bytes_stream();
    let mut seen = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while !seen.contains("\"type\":\"reply_finished\"") {
            let chunk = body.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap();
    (id, seen)
}
