//! An agentry agent as an MCP server.
//!
//! [`AgentMcpServer`] offers one tool that runs a reply of the agent for a prompt, and, if asked
//! ([`AgentMcpServer::expose_tools`]), the agent's own tools. It serves over stdio
//! ([`AgentMcpServer::serve_stdio`]) or streamable HTTP ([`AgentMcpServer::http_router`]), with
//! the seed's cancellation semantics carried across the hop:
//!
//! - while the reply runs, its tool calls and their results are sent as progress notifications
//!   (to a client that gave a progress token);
//! - `notifications/cancelled` cancels the reply: its running tools get their `on_cancel`, and
//!   what it had by then (the tools' results, its answer so far) is sent as a last progress
//!   notification, since the MCP spec gives a cancelled request no response;
//! - a call that needs the user's approval is asked of the client through elicitation when the
//!   client declared it, and is otherwise declined at once (fail closed): never run unasked,
//!   never left waiting.
//!
//! ```no_run
//! # async fn demo(agent: agentry::agent::ReActAgent) -> Result<(), agentry_mcp_server::McpServeError> {
//! use agentry_mcp_server::AgentMcpServer;
//!
//! let server = AgentMcpServer::new("ask_agent", "Ask the agent; it answers using its tools", move || {
//!     Ok(agent.clone())
//! })?;
//! server.serve_stdio().await
//! # }
//! ```

mod approval;
mod error;
mod exposed;
mod http;
mod progress;
mod reply;
mod server;

pub use error::McpServeError;
pub use http::{HttpOptions, MCP_PATH};
pub use server::{AgentMcpServer, AgentSource};
