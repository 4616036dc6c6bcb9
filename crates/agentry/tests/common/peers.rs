//! Where the third-party test peers are (installed by `scripts/install-test-peers`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use agentry::mcp::McpServerConfig;

/// The peers' directory (see `agentry_testkit::peers`).
pub fn peers() -> PathBuf {
    agentry_testkit::peers::peers_dir()
}

pub use agentry_testkit::peers::npm_package;

/// `@modelcontextprotocol/server-everything` over stdio.
pub fn everything() -> McpServerConfig {
    McpServerConfig::stdio(
        "everything",
        "node",
        [
            npm_package("@modelcontextprotocol/server-everything/dist/index.js"),
            "stdio".into(),
        ],
    )
}

/// `@modelcontextprotocol/server-filesystem` rooted at `root`.
pub fn filesystem(root: &std::path::Path) -> McpServerConfig {
    McpServerConfig::stdio(
        "fs",
        "node",
        [
            npm_package("@modelcontextprotocol/server-filesystem/dist/index.js"),
            root.display().to_string(),
        ],
    )
}

/// PyPI `mcp-server-fetch`, allowed to fetch from loopback.
pub fn fetch() -> McpServerConfig {
    McpServerConfig::stdio(
        "fetch",
        peers().join("venv/bin/mcp-server-fetch").display().to_string(),
        ["--ignore-robots-txt", "--allow-private-ips"],
    )
}

/// The rmcp-built test server of `agentry-testkit` (built once here if this test run did not).
pub fn test_server(args: &[&str]) -> McpServerConfig {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(|deps| deps.parent()).unwrap().to_path_buf();
        let bin = dir.join("mcp-test-server");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "agentry-testkit", "--bin", "mcp-test-server"])
            .status()
            .unwrap();
        assert!(status.success(), "cannot build mcp-test-server");
        bin
    });
    McpServerConfig::stdio("test", bin.display().to_string(), args.iter().copied())
}

pub use agentry_testkit::peers::{EverythingHttp, free_port};
