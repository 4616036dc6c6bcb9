//! MCP tools through the official Rust SDK (rmcp), over stdio and streamable HTTP.
//!
//! An MCP server's tools are registered in the same [`Toolkit`](crate::tool::Toolkit) as local
//! tools and called through the same path: validated, approved, streamed as cumulative chunks,
//! cancelled through the same `ToolContext` (a cancel sends `notifications/cancelled` with the
//! reason), timed out the same way (60 s by default, renewed by progress, 10 min at most).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentry::mcp::{McpClient, McpToolOptions, parse_mcp_servers};
//! use agentry::tool::Toolkit;
//!
//! let toolkit = Toolkit::new();
//! for server in parse_mcp_servers(&std::fs::read_to_string("servers.json")?)? {
//!     let client = McpClient::connect(server).await?;
//!     toolkit.register_mcp_client(&client, McpToolOptions::new()).await?;
//! }
//! # Ok(()) }
//! ```

mod cancel_slot;
mod client;
mod config;
mod http;
mod process;
mod register;
mod result;
mod server_requests;
mod task_call;
mod task_support;
mod task_wire;
mod tool;

pub use client::{MAX_TOOL_PAGES, MAX_TOOLS, McpClient, McpStatus, McpToolInfo};
pub use config::{DEFAULT_STARTUP_TIMEOUT, McpServerConfig, McpTransport, SamplingPolicy, parse_mcp_servers};
pub use process::kill_all_servers;
pub use register::{MCP_DEFAULT_TIMEOUT, MCP_MAX_TIMEOUT, McpToolOptions, mcp_tool_name};
pub use task_support::TaskSupport;
pub use task_wire::McpTask;

/// Why an MCP operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration is wrong.
    #[error("MCP configuration error: {0}")]
    Config(String),
    /// The server could not be started or initialized.
    #[error(
        "the MCP server {server:?} did not start: {reason}{}",
        stderr_note(stderr_tail)
    )]
    Start {
        /// Server name.
        server: String,
        /// What went wrong.
        reason: String,
        /// The last lines it wrote to stderr.
        stderr_tail: Vec<String>,
    },
    /// The server is down and could not be reconnected.
    #[error("the MCP server {server:?} is down: {reason}")]
    Down {
        /// Server name.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server answered something unusable.
    #[error("the MCP server {server:?} failed: {reason}")]
    Protocol {
        /// Server name.
        server: String,
        /// What failed.
        reason: String,
    },
}

fn stderr_note(tail: &[String]) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        let last: Vec<&str> = tail.iter().rev().take(10).rev().map(String::as_str).collect();
        format!("\nits stderr ended with:\n{}", last.join("\n"))
    }
}

/// rmcp's transport errors name the Rust types of the transport stack; users need the cause.
pub(crate) fn tidy(reason: &str) -> String {
    let mut out = reason.to_owned();
    while let Some(start) = out.find("Transport [") {
        let Some(end) = out[start..].find("] error: ") else {
            break;
        };
        out.replace_range(start..start + end + "] error: ".len(), "");
    }
    out
}
