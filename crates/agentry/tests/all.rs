//! Every end-to-end suite of the library, in one test binary (one link instead of one per suite,
//! which matters on two cores). Run one suite with `cargo test -p agentry --test all cancellation::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod a2a_client;
mod agent;
mod agent_as_tool;
mod anthropic;
mod approval;
mod budget;
mod call_lifecycle;
mod cancellation;
mod cassette;
mod compaction;
mod conformance;
mod mcp;
mod mcp_cancel;
mod mcp_client_requests;
mod mcp_tasks;
mod openai;
mod permissions;
mod plan;
mod steering;
mod tool_shim;
mod toolkit;
