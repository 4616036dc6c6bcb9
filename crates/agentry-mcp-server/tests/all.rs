//! Every end-to-end suite of the MCP server, in one test binary. Run one suite with
//! `cargo test -p agentry-mcp-server --test all reply_tool::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod exposed_tools;
mod reply_tasks;
mod reply_tool;
