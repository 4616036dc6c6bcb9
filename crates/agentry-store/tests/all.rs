//! The store's end-to-end tests: one test binary, one module per subject.
//!
//! Every test of what a `SessionStore` does (and `SessionMemory`, `CallRecorder`, grants, plans,
//! tool groups, recovery, export and import on top of it) is a conformance test: it runs on
//! SQLite and on PostgreSQL (see [`backends`]). `bad_files`, `knowledge` and `long_term` test
//! what only the SQLite store has: its file, and the long-term memory and knowledge bases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod agent;
mod backends;
mod bad_files;
mod call_records;
mod common;
mod counting;
mod grants;
mod knowledge;
mod leases;
mod long_term;
mod operations;
mod plans;
mod recovery;
mod round_trip;
mod tool_groups;
mod writers;
