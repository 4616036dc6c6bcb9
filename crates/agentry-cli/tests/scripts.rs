//! Script tools from the command line: `--tools-dir` for `run`, and `agentry tools list`.

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::program::Program;
use common::{agentry, chat_args, run_args, serve_args, server_base, text, tool_message};
use serde_json::{Value, json};

fn write_tool(root: &std::path::Path, id: &str, manifest: &str, file: &str, code: &str) {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("assistant_tool.json"), manifest).unwrap();
    std::fs::write(dir.join(file), code).unwrap();
}

fn greet_tool(root: &std::path::Path) {
    write_tool(
        root,
        "greet",
        r#"{"id": "greet", "displayName": "Greet", "description": "Greets someone.",
            "parameters": [{"name": "name", "type": "string", "description": "who"}],
            "requireApproval": false, "icon": "hand.wave"}"#,
        "assistant_tool.ts",
        r#"AssistantTool.registerExecuteTool(async (params: { name: string }) => {
             AssistantTool.report(`greeting ${params.name}`)
             return { success: true, message: `Hello, ${params.name}!` }
           })"#,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_tools_dir_gives_the_model_the_script_tool_and_its_result() {
    let work = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    greet_tool(tools.path());
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("g", "greet", r#"{"name": "Ada"}"#)]));
    fake.push(Reply::text("I greeted Ada."));
    let tools_dir = tools.path().display().to_string();
    let out = agentry(
        run_args(
            &fake.base_url(),
            work.path(),
            &["--tools-dir", &tools_dir],
            "Greet Ada.",
        ),
        work.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "I greeted Ada.\n");
    assert_eq!(tool_message(&fake, 1, "g"), "Hello, Ada!");
    let requests = fake.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["description"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"Greets someone."), "{offered:?}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_shows_the_tools_and_why_the_others_do_not_load() {
    let home = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    greet_tool(tools.path());
    write_tool(
        tools.path(),
        "broken",
        r#"{"id": "broken", "description": "Breaks.", "parameters": [{"name": "x", "type": "float"}]}"#,
        "assistant_tool.js",
        "AssistantTool.registerExecuteTool(async () => 'ok')",
    );
    let tools_dir = tools.path().display().to_string();
    let args = |json: bool| {
        let mut args: Vec<String> = ["tools", "list", "--tools-dir", &tools_dir]
            .map(String::from)
            .into();
        if json {
            args.push("--json".into());
        }
        args
    };
    let out = agentry(args(true), home.path()).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["tools"][0]["id"], "greet");
    assert_eq!(listed["tools"][0]["display_name"], "Greet");
    assert_eq!(listed["tools"][0]["parameters"]["required"][0], "name");
    let error = listed["errors"][0]["message"].as_str().unwrap();
    assert!(error.contains("broken") && error.contains("\"float\""), "{error}");

    let out = agentry(args(false), home.path()).await;
    let shown = text(&out.stdout);
    assert!(shown.starts_with("greet (Greet): Greets someone."), "{shown}");
    assert!(shown.contains("✗ ") && shown.contains("\"float\""), "{shown}");
}

/// A script tool that asks before it runs: its question comes from the script.
fn note_tool(root: &std::path::Path) {
    write_tool(
        root,
        "save_note",
        r#"{"id": "save_note", "description": "Saves a note.",
            "parameters": [{"name": "text", "type": "string"}], "requireApproval": true}"#,
        "assistant_tool.ts",
        r#"AssistantTool.registerApprovalRequest(async (p: { text: string }) => ({ message: `Save the note "${p.text}"?` }))
           AssistantTool.registerExecuteToolWithApproval(async (p: { text: string }, action) =>
             action.primaryConfirmed ? { success: true, message: `saved ${p.text}` } : { success: false, message: "not saved" })"#,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_asks_the_scripts_approval_question_and_runs_it_once_approved() {
    let work = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    note_tool(tools.path());
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "n",
        "save_note",
        r#"{"text": "hi"}"#,
    )]));
    fake.push(Reply::text("Saved."));
    let mut args = chat_args(&fake.base_url(), work.path());
    args.extend(["--tools-dir".to_owned(), tools.path().display().to_string()]);
    let mut program = Program::start(&args, work.path());
    program.type_line("save a note saying hi");
    program.stderr_has("Save the note \"hi\"?").await;
    program.type_line("y");
    program.stdout_has("Saved.").await;
    program.close_stdin();
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(tool_message(&fake, 1, "n"), "saved hi");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_offers_the_script_tools_and_runs_them() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let tools = tempfile::tempdir().unwrap();
    greet_tool(tools.path());
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("g", "greet", r#"{"name": "Bo"}"#)]));
    fake.push(Reply::text("Greeted."));
    let tools_dir = tools.path().display().to_string();
    let args = serve_args(&fake, home, &["--tools-dir", &tools_dir, "--addr", "127.0.0.1:0"]);
    let server = Program::start(&args, home);
    let base = server_base(&server).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let listed: Value = serde_json::from_str(
        &client
            .get(format!("{base}/v1/tools"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "greet"),
        "{listed}"
    );
    let created = client
        .post(format!("{base}/v1/sessions"))
        .header("content-type", "application/json")
        .body(json!({"name": "s"}).to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let created: Value = serde_json::from_str(&created).unwrap();
    let id = created["id"].as_str().unwrap();
    let sent = client
        .post(format!("{base}/v1/sessions/{id}/messages"))
        .header("content-type", "application/json")
        .body(json!({"text": "greet Bo"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 202);
    fake.wait_for_requests(2).await;
    assert_eq!(tool_message(&fake, 1, "g"), "Hello, Bo!");
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
    fake.assert_no_violations();
}
