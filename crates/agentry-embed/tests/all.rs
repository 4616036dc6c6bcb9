//! Every end-to-end suite of the embedding model, in one test binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod model;
