//! Where the third-party test peers are: the pinned MCP servers, node 22 and the conformance
//! suite that `scripts/install-test-peers` puts in `target/test-peers` (or `$AGENTRY_TEST_PEERS`).

use std::path::PathBuf;

/// The peers' directory. Tests that need it fail (they do not skip) when it is missing.
///
/// # Panics
/// When the peers are not installed, with the command that installs them.
#[allow(clippy::panic)]
pub fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("AGENTRY_TEST_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-peers"));
    if !dir.join(".installed-v3").exists() {
        panic!(
            "the MCP test peers are not installed in {}: run scripts/install-test-peers",
            dir.display()
        );
    }
    dir
}

/// A file of an installed npm package, e.g. `@modelcontextprotocol/server-everything/dist/index.js`.
pub fn npm_package(path: &str) -> String {
    peers_dir()
        .join("npm/node_modules")
        .join(path)
        .display()
        .to_string()
}
