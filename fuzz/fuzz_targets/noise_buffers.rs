//! libFuzzer target: see `fuzz/harness.rs` (`noise_buffers`) for what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::noise_buffers(data));
