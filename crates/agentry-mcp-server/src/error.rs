//! What can go wrong when building or running the MCP server.

/// An error building or serving an [`AgentMcpServer`](crate::AgentMcpServer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The server's configuration cannot work (e.g. two tools of the same name).
    #[error("{0}")]
    Config(String),
    /// The client never completed the MCP handshake, or the transport failed before it.
    #[error("the MCP session did not start: {0}")]
    Start(String),
    /// The session's task ended abnormally.
    #[error("the MCP session failed: {0}")]
    Session(String),
}
