//! Replays the fuzz corpus kept in the repository through the fuzz harnesses, on stable
//! Rust and without libFuzzer: every file in `fuzz/regressions/<target>/` (inputs that once
//! found a bug, plus hand-written seeds for each error path) must satisfy the harness's
//! invariants (`fuzz/harness.rs`). New findings of `scripts/fuzz.sh` are copied there.

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let result = std::panic::catch_unwind(|| run(&data));
        assert!(result.is_ok(), "{} violates the harness invariants", f.display());
    }
    // Plus a deterministic sweep of pseudo-random inputs (a splitmix64 stream), so the
    // harness itself is exercised even where the corpus is small.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ target.len() as u64;
    for len in (0..256).step_by(3) {
        let data: Vec<u8> = (0..len)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
            .collect();
        run(&data);
    }
    files.len()
}

#[test]
fn attention_shapes_corpus() {
    assert!(replay("attention_shapes", harness::attention_shapes) > 0, "no corpus files");
}

#[test]
fn noise_buffers_corpus() {
    assert!(replay("noise_buffers", harness::noise_buffers) > 0, "no corpus files");
}

#[test]
fn privacy_params_corpus() {
    assert!(replay("privacy_params", harness::privacy_params) > 0, "no corpus files");
}

#[test]
fn sessions_corpus() {
    assert!(replay("sessions", harness::sessions) > 0, "no corpus files");
}
