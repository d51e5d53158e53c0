//! The softmax trees of paper 001: the low-bit audit of `DpTree` (every tree of the module
//! releases its nodes the same way, `softmax_tree::NodeNoise`), and the exact release's
//! noise against the float one at the quickstart's sizes.
//!
//! **Neighbours.** One value (one leaf) of `N = 16`: all zeros under `x`; leaf 0 holds
//! exactly `1` (the bound `b`) under `x′`. The four nodes on leaf 0's path (heap 16, 8, 4, 2)
//! are then exactly `0` and exactly `1`; those are recorded. `ε = 1`, `δ = 1e-3` over
//! `L = 4` levels: the float TLap has scale `2/0.25 = 8` (σ ≈ 11), so `1 + z` often lands one
//! binade above `z` and round-half-to-even biases its last bit; the exact release has
//! `Λ = 2^−7` and a discrete Laplace of scale ≈ 1032 grid steps, wide enough that the grid
//! indices' low 8 bits are uniform under both inputs (their shift by `1/Λ = 128` is not
//! what the audit measures).

use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::softmax_tree::{Copies, DpTree, SoftmaxTreeParams};
use dpattn::softmax_tree_cross_attention::{SoftmaxTreeCrossAttentionParams, estimate_error};
use dpattn::{NoiseMode, PrivacyBudget};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation};

const LEAVES: usize = 16;
/// Releases per input: `RELEASES · 4 ≥ 1e5` recorded values.
const RELEASES: u64 = 25_000;

fn audit(mode: NoiseMode, leaf0: f64) -> LowBits {
    let mut values = [0.0; LEAVES];
    values[0] = leaf0;
    let budget = PrivacyBudget::new(1.0, 1e-3).unwrap();
    let mut bits = LowBits::new();
    // Independent noise for the two inputs: different keys.
    let key = NoiseKey::for_replay([0x7E + leaf0 as u8; 32]);
    for id in 0..RELEASES {
        let t = DpTree::new_keyed(&values, 1.0, budget, Draw { key: &key, stream: id }, None, mode)
            .unwrap();
        let grid = t.node_noise().unwrap().resolution();
        for v in [16, 8, 4, 2] {
            bits.record_f64(t.node(v).unwrap(), grid);
        }
    }
    bits
}

#[test]
fn dp_tree_low_bits() {
    let (a, b) = (audit(NoiseMode::Exact, 0.0), audit(NoiseMode::Exact, 1.0));
    assert_no_separation("DpTree", &a, &b);
    let (a, b) = (audit(NoiseMode::UnsafeFloat, 0.0), audit(NoiseMode::UnsafeFloat, 1.0));
    assert_separation("DpTree", &a, &b);
}

/// The quickstart's trees (`examples/quickstart.rs`: `n = 16384`, `d = 2`, `ε = 1`,
/// `δ = δ′ = 1e-6`, `R = R_w = 1`, per-vector split, `l = 1`): their error there is pure
/// noise (the theorem-level additive error is thousands of times the output range, and
/// the clamps of `docs/PAPERS.md` P1-X8 decide the outputs), so the noise is compared, exactly: the
/// uniform noise σ of both structures, the P1-X5 worst-case bound and the additive estimate of the
/// exact release are within 1% above the float release's.
#[test]
fn exact_trees_are_as_noisy_as_the_float_ones_at_the_quickstart_sizes() {
    let budget = PrivacyBudget::new(1.0, 1e-6).unwrap();
    let mut p =
        SoftmaxTreeCrossAttentionParams::new(SoftmaxTreeParams::paper(1.0, 1.0, budget, 1e-6));
    p.adaptive.copies = Copies::Fixed(1);
    let exact = estimate_error(16_384, 2, &p).unwrap();
    p.adaptive.tree.noise_mode = NoiseMode::UnsafeFloat;
    let float = estimate_error(16_384, 2, &p).unwrap();
    assert_eq!((exact.noise_mode, float.noise_mode), (NoiseMode::Exact, NoiseMode::UnsafeFloat));
    assert!(float.additive > 1e3, "the trees' error is noise: {}", float.additive);
    for (what, x, f) in [
        ("σ_AV", exact.sigma_weighted, float.sigma_weighted),
        ("σ_D", exact.sigma_normaliser, float.sigma_normaliser),
        ("P1-X5", exact.worst_case_weighted, float.worst_case_weighted),
        ("additive", exact.additive, float.additive),
    ] {
        assert!((1.0..1.01).contains(&(x / f)), "{what}: exact {x} vs float {f}");
    }
}
