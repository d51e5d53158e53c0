//! One shuffled DP-SGD step (paper 002) at `q = 1` with a power-of-two batch `B = N = 2`,
//! auditing both what it returns: the weights `w = w₀ − η·g̃` and the privatised gradient
//! `g̃ = (ŝ + z)/B` left in the scratch.
//!
//! Neighbours: slot 1 holds no record (`x`) or a record whose gradient is `(1, 1, 1, 1)`
//! (`x′`, norm 2 below `c = 2.5`, not clipped); slot 0 is empty in both. The model is a
//! 1 → 1 → 1 MLP with biases (`D = 4`; its permutations are trivial), `σ = 0.4` so the noise
//! std is `σ·c = 1`, `η = 1`, `w₀ = 0`. The noiseless sum is exactly `0` or `1.0` per
//! coordinate; dividing by `B = 2` and the update are exact, so the float path's low bits
//! carry it to both outputs.

use dpattn::NoiseMode;
use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::weight_shuffle::{
    Block, LinearLayout, MlpBlock, STREAMS, ShufflePlan, ShuffledDpSgdParams, WeightLayout,
    shuffled_dp_sgd_step_keyed, shuffled_dp_sgd_step_scratch_len,
};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation, separation_p};

const D: usize = 4;
/// Steps per input: 4 values of each output per step, 1.0e5 values.
const STEPS: u64 = 25_000;

/// `(weights, g̃)` statistics of the two inputs.
fn audit(mode: NoiseMode) -> [(LowBits, LowBits); 2] {
    let blocks = [Block::Mlp(MlpBlock {
        up: LinearLayout::new(0, 1, 1, WeightLayout::OutIn).with_bias(1),
        gate: None,
        down: LinearLayout::new(2, 1, 1, WeightLayout::OutIn).with_bias(3),
    })];
    let plan = ShufflePlan::new(&blocks, D).unwrap();
    let params = ShuffledDpSgdParams {
        noise_mode: mode,
        ..ShuffledDpSgdParams::new(1.0, 2.5, 0.4, 1.0, STEPS)
    };
    // Exact values are multiples of Λ/B (B = 2).
    let grid = match mode {
        NoiseMode::Exact => Some(params.exact_grid(&plan, 2).unwrap().resolution() / 2.0),
        NoiseMode::UnsafeFloat => None,
        NoiseMode::ConstantTime => unreachable!("shuffled DP-SGD has no constant-time path"),
    };
    let key = NoiseKey::for_replay([62; 32]);
    let mut perms = vec![0u32; plan.permutation_len()];
    let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(&plan).unwrap()];
    let mut out = [(LowBits::new(), LowBits::new()), (LowBits::new(), LowBits::new())];
    // A fresh set of stream ids per step, and independent noise for the two inputs.
    for ((weights, grads), (present, base)) in out.iter_mut().zip([(false, 0), (true, STEPS)]) {
        for step in base..base + STEPS {
            let mut w = [0.0f64; D];
            let gradient = |slot: u64, _: &[f64], g: &mut [f64]| {
                g.fill(if present && slot == 1 { 1.0 } else { 0.0 });
                Ok(())
            };
            shuffled_dp_sgd_step_keyed(
                &mut w,
                &mut [],
                &plan,
                &params,
                2,
                gradient,
                Draw { key: &key, stream: STREAMS * step },
                None,
                &mut perms,
                &mut scratch,
            )
            .unwrap();
            w.iter().for_each(|&v| weights.record_f64(v, grid));
            scratch[..D].iter().for_each(|&v| grads.record_f64(v, grid));
        }
    }
    let [(wa, ga), (wb, gb)] = out;
    [(wa, wb), (ga, gb)]
}

#[test]
fn dp_sgd_exact_step_has_no_low_bit_leak() {
    for ((a, b), what) in audit(NoiseMode::Exact).iter().zip(["weights", "g̃"]) {
        println!("DP-SGD {what}, exact: {:?}", separation_p(a, b));
        assert_no_separation(&format!("shuffled DP-SGD {what}"), a, b);
    }
}

#[test]
fn dp_sgd_unsafe_float_step_leaks_the_noiseless_sum() {
    for ((a, b), what) in audit(NoiseMode::UnsafeFloat).iter().zip(["weights", "g̃"]) {
        println!("DP-SGD {what}, unsafe float: {:?}", separation_p(a, b));
        assert_separation(&format!("shuffled DP-SGD {what}"), a, b);
    }
}
