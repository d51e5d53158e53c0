//! Output-perturbation DP cross-attention (`docs/PRIVACY.md` §2): the low-bit audit.
//!
//! Worst case for the float path: the query is zero (every logit 0, so every weight is
//! exactly 1 and the normaliser exactly `n = 16`), every key row is the same, and every value
//! row is zero under `x`; under `x′` one position's value row becomes `(R_v/2)·(1, 1, 1, 1)`
//! (norm `R_v = 1`). The noise-free outputs are exactly `0` and exactly `2^-5` per
//! coordinate, and the float path's `fl(2^-5 + z)` rounds half to even wherever `z` has a
//! finer last bit than the sum, biasing the parity of the last mantissa bit in those binades
//! relative to `fl(0 + z) = z`.

use dpattn::grid_release::GridFormat;
use dpattn::output_perturbation::{
    AttentionErrorModel, OutputPerturbationParams, output_perturbation_attention_keyed,
    output_perturbation_grid, output_perturbation_scratch_len,
};
use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::{BatchedMut, BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation};

const KEYS: usize = 16;
const DV: usize = 4;
const RELEASES: u64 = 100_000;

fn params(mode: NoiseMode) -> OutputPerturbationParams<'static> {
    OutputPerturbationParams {
        key_norm: 1.0,
        value_norm: 1.0,
        budget: PrivacyBudget::new(1.0, 1e-5).unwrap(),
        scale: Scale::Custom(1.0),
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        noise_mode: mode,
    }
}

/// `RELEASES` releases of one input (`neighbour`: the changed value row), fresh stream each.
fn audit(mode: NoiseMode, neighbour: bool) -> LowBits {
    let q = [0f32; 2];
    let k = [0.5f32; KEYS * 2];
    let mut v = [0f32; KEYS * DV];
    if neighbour {
        v[3 * DV..4 * DV].fill(0.5);
    }
    let (q, k, v) = (
        BatchedRef::contiguous(&q, [1, 1, 1, 2]).unwrap(),
        BatchedRef::contiguous(&k, [1, 1, KEYS, 2]).unwrap(),
        BatchedRef::contiguous(&v, [1, 1, KEYS, DV]).unwrap(),
    );
    let p = params(mode);
    let lambda = (mode == NoiseMode::Exact).then(|| {
        let model = AttentionErrorModel::CPU_F64;
        let g = output_perturbation_grid(q, &p, KEYS, DV, &model, GridFormat::F32, 0).unwrap();
        g.unwrap().resolution()
    });
    let key = NoiseKey::for_replay([0x0f; 32]);
    let mut scratch = vec![0f32; output_perturbation_scratch_len(2, DV).unwrap()];
    let (mut out, mut sigma) = ([0f32; DV], [0.0]);
    let mut bits = LowBits::new();
    for stream in 0..RELEASES {
        let o = BatchedMut::contiguous(&mut out, [1, 1, 1, DV]).unwrap();
        output_perturbation_attention_keyed(
            o,
            q,
            k,
            v,
            &p,
            Draw { key: &key, stream },
            None,
            &mut sigma,
            &mut scratch,
        )
        .unwrap();
        for &x in &out {
            bits.record_f32(x, lambda);
        }
    }
    bits
}

#[test]
fn exact_release_does_not_leak_through_low_bits() {
    let (a, b) = (audit(NoiseMode::Exact, false), audit(NoiseMode::Exact, true));
    assert_no_separation("output perturbation", &a, &b);
}

#[test]
fn unsafe_float_release_leaks_and_the_audit_sees_it() {
    let (a, b) = (audit(NoiseMode::UnsafeFloat, false), audit(NoiseMode::UnsafeFloat, true));
    assert_separation("output perturbation", &a, &b);
}
