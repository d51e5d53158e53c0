//! libFuzzer target: see `fuzz/harness.rs` (`sessions`) for what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::sessions(data));
