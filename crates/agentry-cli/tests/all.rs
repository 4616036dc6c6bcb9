//! Every end-to-end suite of the `agentry` binary, in one test binary. Run one suite with
//! `cargo test -p agentry-cli --test all run::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod a2a;
mod cassette;
mod cluster;
mod crash;
mod eval;
mod interactive;
mod knowledge;
mod local_model;
mod mcp;
mod mcp_serve;
mod memory;
mod permissions;
mod plan;
mod run;
mod scripts;
mod serve;
mod sessions;
mod sub_agents;
mod terminal;
mod tool_shim;
mod traces;
