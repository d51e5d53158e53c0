//! libFuzzer target: see `fuzz/harness.rs` (`privacy_params`) for what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::privacy_params(data));
