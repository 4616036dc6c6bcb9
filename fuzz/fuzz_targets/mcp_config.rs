//! Fuzz target: `agentry::fuzz_checks::check_mcp_config` (see there for the invariants).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentry::fuzz_checks::check_mcp_config(data));
