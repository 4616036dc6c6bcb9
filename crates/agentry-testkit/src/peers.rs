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

/// A free loopback port (bound and released; the caller binds it again right away).
///
/// # Panics
/// When no loopback port can be bound.
#[allow(clippy::unwrap_used)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `server-everything` over Streamable HTTP on `port`, killed on drop.
pub struct EverythingHttp {
    child: std::process::Child,
    /// The port it listens on.
    pub port: u16,
}

impl EverythingHttp {
    /// Starts it and waits until it listens.
    ///
    /// # Panics
    /// When node cannot start, or the server does not listen within 10 s.
    #[allow(clippy::unwrap_used, clippy::panic)]
    pub async fn start(port: u16) -> EverythingHttp {
        let child = std::process::Command::new("node")
            .arg(npm_package(
                "@modelcontextprotocol/server-everything/dist/index.js",
            ))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = EverythingHttp { child, port };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return server;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        drop(server);
        panic!("server-everything did not listen on {port}");
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
