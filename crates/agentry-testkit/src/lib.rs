//! Test support for agentry (being written).
