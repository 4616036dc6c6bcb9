//! Fuzz target: `agentry::model::fuzz::check_arguments_linear` (see there for the invariants).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentry::model::fuzz::check_arguments_linear(data));
