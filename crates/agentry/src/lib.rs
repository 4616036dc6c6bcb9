//! # Agentry
//!
//! A runtime for tool-using LLM agents: a ReAct loop ([`agent::ReActAgent`]) over any chat model
//! ([`model::ChatModel`], with an OpenAI-compatible provider), a [`tool::Toolkit`] that treats
//! every tool the same way, and a [`memory::Memory`] of every message.
//!
//! The crate is organised by concept: [`message`], [`model`], [`tool`], [`memory`], [`agent`].
//! A user who reads only [`agent`] should understand the loop; one who reads only [`tool`]
//! should be able to write a tool.
//!
//! Model traffic can be recorded to a file and served back from it offline, each request
//! checked against the recorded one: [`model::cassette`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

// Lets `#[tool]` expansions name `::agentry` inside this crate's own tests too.
extern crate self as agentry;

#[cfg(feature = "a2a")]
pub mod a2a;
pub mod agent;
pub mod embedding;
mod ids;
pub mod knowledge;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod memory;
pub mod message;
pub mod model;
pub mod plan;
pub mod protocol;
pub mod tool;
mod trace_context;
pub mod usage;

pub use agent::{AgentError, AgentEvent, ReActAgent};
pub use ids::{CallId, ReplyId};
pub use message::{ContentBlock, Msg, Role};

#[doc(hidden)]
pub mod fuzz_checks;

/// Items used by macro expansions; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
    pub use serde_json;
    pub use tokio;

    use crate::tool::{ToolError, ToolStream};
    use futures::StreamExt;

    /// A tool stream that fails at once.
    pub fn error_stream(error: ToolError) -> ToolStream {
        futures::stream::once(async move { Err(error) }).boxed()
    }
}

/// Installs the process-wide TLS crypto provider once (reqwest is built without one, so that
/// the tree carries a single, fast-to-build provider).
#[cfg(any(feature = "openai", feature = "anthropic", feature = "mcp", feature = "a2a"))]
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another crate installed a provider first, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The error and its sources, "a: b: c" (a source already in the text is not repeated), so a
/// connection refusal says what was refused.
#[cfg(any(feature = "openai", feature = "anthropic", feature = "mcp", feature = "a2a"))]
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
