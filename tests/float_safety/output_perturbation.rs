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
use dpattn::sampling::{ConstantTimeGaussian, ExactSampler, KeyedStream, NoiseKey};
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

// ------------------------------------------------------------ NoiseMode::ConstantTime

/// One release of the zero-query, zero-value input (every output exactly 0 before noise)
/// into `out`, charged to `ledger`.
fn release_zero(
    p: &OutputPerturbationParams<'_>,
    stream: u64,
    ledger: Option<&mut dyn dpattn::accounting::cost::Accountant>,
    out: &mut [f32; DV],
) -> dpattn::Result<dpattn::output_perturbation::Calibrated> {
    let (q, k, v) = ([0f32; 2], [0.5f32; KEYS * 2], [0f32; KEYS * DV]);
    let key = NoiseKey::for_replay([0x3c; 32]);
    let mut scratch = vec![0f32; output_perturbation_scratch_len(2, DV).unwrap()];
    output_perturbation_attention_keyed(
        BatchedMut::contiguous(out, [1, 1, 1, DV]).unwrap(),
        BatchedRef::contiguous(&q, [1, 1, 1, 2]).unwrap(),
        BatchedRef::contiguous(&k, [1, 1, KEYS, 2]).unwrap(),
        BatchedRef::contiguous(&v, [1, 1, KEYS, DV]).unwrap(),
        p,
        Draw { key: &key, stream },
        ledger,
        &mut [0.0],
        &mut scratch,
    )
}

fn grid_of(p: &OutputPerturbationParams<'_>) -> dpattn::grid_release::GaussianGrid {
    let q = [0f32; 2];
    let q = BatchedRef::contiguous(&q, [1, 1, 1, 2]).unwrap();
    let model = AttentionErrorModel::CPU_F64;
    output_perturbation_grid(q, p, KEYS, DV, &model, GridFormat::F32, 0).unwrap().unwrap()
}

#[test]
fn constant_time_release_is_the_constant_time_noise_on_the_grid() {
    // The noise-free outputs are exactly 0, so output c is z_c·Λ with z_c drawn by the
    // constant-time sampler of the grid's integer noise from element c's window.
    let p = params(NoiseMode::ConstantTime);
    let grid = grid_of(&p);
    let ct = ConstantTimeGaussian::new(grid.integer_noise()).unwrap();
    let key = NoiseKey::for_replay([0x3c; 32]);
    for stream in 0..20 {
        let mut out = [0f32; DV];
        release_zero(&p, stream, None, &mut out).unwrap();
        let s = KeyedStream::new(&key, stream);
        for (c, &x) in out.iter().enumerate() {
            let z = ct.sample_at(&s, c as u64).unwrap();
            assert_eq!(f64::from(x), z as f64 * grid.resolution(), "stream {stream}, {c}");
        }
    }
    // Its exact part is calibrated at δ − δ_ct: a (barely) larger σ than the exact mode's.
    let exact = grid_of(&params(NoiseMode::Exact));
    assert!(grid.sigma() >= exact.sigma() && grid.sigma() < exact.sigma() * (1.0 + 1e-9));
}

#[test]
fn constant_time_release_charges_epsilon_delta_only() {
    use dpattn::accounting::composition::Rho;
    use dpattn::accounting::ledger::{Amount, Ledger};
    use dpattn::output_perturbation::PRIVACY_UNIT;
    let p = params(NoiseMode::ConstantTime);
    let mut approx = Ledger::new_approx(PRIVACY_UNIT, PrivacyBudget::new(4.0, 1e-4).unwrap());
    let mut out = [0f32; DV];
    let c = release_zero(&p, 0, Some(&mut approx), &mut out).unwrap();
    assert_eq!(c.noise_mode(), NoiseMode::ConstantTime);
    assert_eq!(approx.spent(), Amount::Approx { epsilon: 1.0, delta: 1e-5 });
    // A zCDP ledger refuses: nothing written, nothing charged.
    let mut zcdp = Ledger::new_zcdp(PRIVACY_UNIT, Rho::new(10.0).unwrap());
    let mut out = [7f32; DV];
    assert!(release_zero(&p, 1, Some(&mut zcdp), &mut out).is_err());
    assert_eq!((out, zcdp.charges()), ([7f32; DV], 0));
}

#[test]
fn constant_time_release_refuses_a_delta_below_its_share() {
    // δ_ct = (1 + e)·4·2^−100 ≈ 1.2e-29 for 4 values at ε = 1.
    let mut p = params(NoiseMode::ConstantTime);
    p.budget = PrivacyBudget::new(1.0, 1e-29).unwrap();
    let mut out = [7f32; DV];
    let err = release_zero(&p, 0, None, &mut out).unwrap_err();
    assert!(err.to_string().contains("constant-time"), "{err}");
    assert_eq!(out, [7f32; DV]);
    p.budget = PrivacyBudget::new(1.0, 2e-29).unwrap();
    assert!(release_zero(&p, 0, None, &mut out).is_ok());
}
