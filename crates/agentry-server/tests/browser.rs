//! The web page in headless Chromium (driven by playwright-core, see tests/browser/page.mjs)
//! against the server and the fake model: a streamed reply whose markup stays text, one call
//! approved and one declined with a reason, a message added to a running reply (steering), a slow
//! call cancelled with its partial results shown, the same history after a reload, and a form a
//! tool asks for filled in a dialog. Screenshots go to target/browser-shots.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::Harness;
use agentry_testkit::peers::{npm_package, peers_dir};
use agentry_testkit::{Call, Reply};

/// The Chromium binary (Debian's `chromium` package; `CHROMIUM` overrides).
fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/chromium/chromium"));
    assert!(
        path.exists(),
        "Chromium is not installed at {}: run scripts/install-test-peers (apt-get install chromium)",
        path.display()
    );
    path
}

fn tool_result(fake: &agentry_testkit::FakeLlm, n: usize, call_id: &str) -> String {
    fake.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no result of {call_id} in request {n}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_streams_approves_declines_cancels_and_reloads_the_same_history() {
    let chromium = chromium();
    let playwright = npm_package("playwright-core");
    let _ = peers_dir();
    let server = Harness::start().await;
    let fake = &server.fake;
    fake.push(
        Reply::text(
            "Hello <script>window.__agentryInjected()</script> and <img src=x onerror=\"window.__agentryInjected()\">",
        )
        .chunks(5),
    );
    fake.push(Reply::tool_calls([
        Call::new("w1", "write_note", r#"{"text": "first"}"#),
        Call::new("w2", "write_note", r#"{"text": "second"}"#),
    ]));
    fake.push(Reply::text("One written, one declined."));
    fake.push(Reply::tool_calls([Call::new(
        "p1",
        "pages",
        r#"{"text": "book"}"#,
    )]));
    fake.push(Reply::text("Stopped reading."));
    fake.push(Reply::tool_calls([Call::new("f1", "sign_up", "{}")]));
    fake.push(Reply::text("Signed up."));
    // The parent calls the helper, whose own model turn calls its tool, then answers.
    fake.push(Reply::tool_calls([Call::new(
        "h1",
        "helper",
        r#"{"prompt": "find it"}"#,
    )]));
    fake.push(Reply::tool_calls([Call::new("l1", "lookup", "{}")]));
    fake.push(Reply::text("It is found."));
    fake.push(Reply::text("The helper found it."));

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/browser-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/page.mjs");
    let mut node = tokio::process::Command::new("node");
    node.arg(&script)
        .env("AGENTRY_URL", &server.base)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", &chromium)
        .env("SHOTS", &shots);
    let said = crate::common::run_peer(node, Duration::from_secs(120)).await;
    assert!(said.contains("ok"), "{said}");

    assert_eq!(tool_result(fake, 2, "w1"), "noted");
    assert!(
        tool_result(fake, 2, "w2").contains("not this one"),
        "the model read the reason: {}",
        tool_result(fake, 2, "w2")
    );
    assert_eq!(tool_result(fake, 4, "p1"), "read 1 page before the cancel");
    // The steering message joined the conversation after the cancelled call's result.
    let last = fake.requests()[4].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "only the first chapter", "{last}");
    assert!(shots.join("mid-cancel.png").exists());
    assert_eq!(tool_result(fake, 9, "l1"), "found <b>it</b>");
    assert_eq!(tool_result(fake, 10, "h1"), "It is found.");
    let signed = tool_result(fake, 6, "f1");
    assert!(
        signed.contains(r#""name":"Ada""#)
            && signed.contains(r#""level":"high""#)
            && signed.contains(r#""news":true"#),
        "{signed}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_plan_as_it_changes_and_after_a_reload() {
    let chromium = chromium();
    let playwright = npm_package("playwright-core");
    let server = Harness::start_planned().await;
    let fake = &server.fake;
    let create = serde_json::json!({
        "name": "move", "description": "move house", "expected_outcome": "moved",
        "subtasks": [
            {"name": "pack", "description": "pack boxes", "expected_outcome": "boxes"},
            {"name": "drive <img src=x onerror=\"window.__agentryInjected()\">", "description": "drive the van", "expected_outcome": "arrived"}
        ]
    });
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "create_plan",
        create.to_string(),
    )]));
    fake.push(Reply::tool_calls([Call::new(
        "c2",
        "update_subtask_state",
        r#"{"subtask_idx": 0, "state": "in_progress"}"#,
    )]));
    fake.push(Reply::text("Packing."));
    fake.push(Reply::tool_calls([Call::new(
        "c3",
        "finish_subtask",
        r#"{"subtask_idx": 0, "subtask_outcome": "twelve boxes"}"#,
    )]));
    fake.push(Reply::text("Driving next."));

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/browser-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/plan.mjs");
    let mut node = tokio::process::Command::new("node");
    node.arg(&script)
        .env("AGENTRY_URL", &server.base)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", &chromium)
        .env("SHOTS", &shots);
    let said = crate::common::run_peer(node, Duration::from_secs(120)).await;
    assert!(said.contains("ok"), "{said}");
    fake.assert_no_violations();
}
