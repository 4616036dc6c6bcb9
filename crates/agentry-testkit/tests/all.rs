//! The test kit's end-to-end suites, one test binary: the fake server from a plain HTTP client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod anthropic;
mod fake_server;
