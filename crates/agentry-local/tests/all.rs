//! Every end-to-end suite of the local provider, in one test binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod model;
mod pull;
