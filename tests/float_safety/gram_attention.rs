//! The exact Gram-matrix attention (`docs/PRIVACY.md` §3.6): the low-bit audit. It has no
//! float mode (it is the exact route for paper 000's privacy unit), so only the exact
//! release is audited: neighbours differ in one feature column (`0` vs `β·e₁`), which moves
//! the Gram entry `(0, 0)` from exactly `0.25` to exactly `0.25 + β²` and leaves the rest.

use dpattn::gram_attention::{
    GramAttentionParams, gram_attention_keyed, gram_attention_scratch_len,
};
use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::{BatchedMut, BatchedRef, PrivacyBudget};

use crate::low_bits::{LowBits, assert_no_separation};

const RELEASES: u64 = 100_000;

fn audit(neighbour: bool) -> LowBits {
    let (n, d) = (2, 2);
    // Column 0 = (0.5, 0): A = [[0.25, 0], [0, 0]] plus column 1's contribution.
    let mut x = [0.5, 0.0, 0.0, 0.0];
    if neighbour {
        x[1] = 0.5; // column 1 moves from 0 to (0.5, 0): β = 0.5
    }
    let params = GramAttentionParams::new(PrivacyBudget::new(1.0, 1e-6).unwrap(), 1.0, 0.5);
    let key = NoiseKey::for_replay([0x47; 32]);
    let (mut b, mut p) = ([0.0; 4], [0.0; 4]);
    let mut scratch = vec![0.0; gram_attention_scratch_len(d)];
    let mut bits = LowBits::new();
    for stream in 0..RELEASES {
        let rep = gram_attention_keyed(
            BatchedMut::contiguous(&mut b, [1, 1, n, n]).unwrap(),
            BatchedMut::contiguous(&mut p, [1, 1, n, n]).unwrap(),
            BatchedRef::contiguous(&x, [1, 1, n, d]).unwrap(),
            &params,
            Draw { key: &key, stream },
            None,
            &mut scratch,
        )
        .unwrap();
        for v in [b[0], b[1], b[3]] {
            bits.record_f64(v, Some(rep.grid.resolution()));
        }
    }
    bits
}

#[test]
fn exact_gram_release_does_not_leak_through_low_bits() {
    assert_no_separation("gram attention", &audit(false), &audit(true));
}
