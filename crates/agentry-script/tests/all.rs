//! Script tools end to end: tool folders on disk, loaded and run by an agent against the fake
//! model server. Run one suite with `cargo test -p agentry-script --test all seed::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod approval;
mod isolation;
mod loading;
mod seed;
