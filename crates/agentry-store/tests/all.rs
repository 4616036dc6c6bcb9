//! The store's end-to-end tests: one test binary, one module per subject.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod agent;
mod bad_files;
mod call_records;
mod common;
mod counting;
mod grants;
mod knowledge;
mod long_term;
mod plans;
mod recovery;
mod round_trip;
mod tool_groups;
mod writers;
