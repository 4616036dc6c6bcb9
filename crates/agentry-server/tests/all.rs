//! The server's end-to-end suites, one test binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod api;
mod browser;
mod common;
mod loopback_guard;
mod schemathesis;
mod users;
