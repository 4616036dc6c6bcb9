//! The subcommands of `agentry`, one module each; what those that run an agent share is in
//! [`crate::setup`], what the terminal shows in [`crate::terminal`].

pub mod chat;
pub mod eval;
pub mod kb;
pub mod mcp;
pub mod mcp_serve;
pub mod memory;
#[cfg(feature = "local")]
pub mod model;
pub mod run;
pub mod serve;
pub mod sessions;
pub mod tools;
