//! Script tools from the command line: `--tools-dir` for `run`, and `agentry tools list`.

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::{agentry, run_args, text, tool_message};
use serde_json::Value;

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
