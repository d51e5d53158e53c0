//! Regression tests for defects of issue 28 found by outside checks that have no better
//! home: positive, finite but huge noise scales (σ near `f64::MAX`, or above `f32::MAX`
//! for `f32` output) produced `±∞` noise with an `Ok` status, in the samplers and in the
//! unsafe float paths that multiply standard normals by a computed scale. (Output
//! perturbation and noisy attention were already refused by the attention's range check.)
//!
//! **Expected values.** The largest draw of each sampler follows from its construction
//! (`docs/RANDOMNESS.md`): the uniform variate is never below `2^-p` (`p = 53` for `f64`,
//! 24 for `f32`), so `−ln U ≤ p·ln 2` (36.7368 and 16.6355) and the Box–Muller radius
//! `√(−2 ln U) ≤ √(2p·ln 2)` (8.5717 and 5.7683). A scale is accepted exactly when that
//! largest draw is finite in the output type (up to a `2^-40` margin for rounding), so the
//! boundaries are `MAX/8.5717`, `MAX/36.737`, … — the tests probe 0.1 % on either side.

use dpattn::accounting::ledger::Ledger;
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::accounting::zcdp::Rho;
use dpattn::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, dp_forward_keyed,
};
use dpattn::noisy_head::NoisyHeadParams;
use dpattn::sampling::{
    Exponential, FixedWordSampler, Gaussian, KeyedStream, Laplace, NoiseKey, TruncatedLaplace,
};
use dpattn::session::Draw;
use dpattn::weight_shuffle::{
    Block, LinearLayout, MlpBlock, ShufflePlan, ShuffledDpSgdParams, WeightLayout,
    shuffled_dp_sgd_step_keyed, shuffled_dp_sgd_step_scratch_len,
};
use dpattn::{Delta, Epsilon, Error, MatMut, NoiseMode, PrivacyBudget};
use dpattn_paper::noisy_head::presets;

const F32_MAX: f64 = f32::MAX as f64;
/// `√(2·53·ln 2)`, `√(2·24·ln 2)`, `53·ln 2`, `24·ln 2`.
const BM_F64: f64 = 8.571_674_348_652_9;
const BM_F32: f64 = 5.768_386_577_705_6;
const LN_F64: f64 = 36.736_800_569_677_1;
const LN_F32: f64 = 16.635_532_333_438_7;

fn stream() -> KeyedStream {
    KeyedStream::new(&NoiseKey::for_replay([28; 32]), 0)
}

fn out_of_range<T: core::fmt::Debug>(r: dpattn::Result<T>, what: &str) {
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{what}: {r:?}");
}

#[test]
fn constructors_refuse_scales_whose_largest_f64_draw_overflows() {
    let below = 1.0 - 1e-3;
    let above = 1.0 + 1e-3;
    assert!(Gaussian::new(f64::MAX / BM_F64 * below).is_ok());
    out_of_range(Gaussian::new(f64::MAX / BM_F64 * above), "Gaussian σ");
    out_of_range(Gaussian::new(f64::MAX), "Gaussian σ = MAX");
    assert!(Laplace::new(f64::MAX / LN_F64 * below).is_ok());
    out_of_range(Laplace::new(f64::MAX / LN_F64 * above), "Laplace b");
    assert!(Exponential::new(LN_F64 / f64::MAX * above).is_ok());
    out_of_range(Exponential::new(LN_F64 / f64::MAX * below), "Exponential 1/λ");
    // δ = 0 is Laplace(Δ/ε); δ > 0 is bounded by B (finite, checked before).
    assert!(TruncatedLaplace::new(f64::MAX / LN_F64 * below, 1.0, 0.0).is_ok());
    out_of_range(TruncatedLaplace::new(f64::MAX / LN_F64 * above, 1.0, 0.0), "TLap δ = 0");
}

/// `below` fills 1e5 finite `f32` values; `above` is refused and writes nothing.
fn probe_f32<S: FixedWordSampler>(name: &str, below: S, above: S) {
    let s = stream();
    let mut out = vec![7.0f32; 100_000];
    below.fill_keyed(&s, 0, &mut out).unwrap();
    assert!(out.iter().all(|x| x.is_finite()), "{name}: a draw below the limit overflowed");
    let mut out = vec![7.0f32; 100_000];
    out_of_range(above.fill_keyed(&s, 0, &mut out), name);
    assert!(out.iter().all(|&x| x == 7.0), "{name}: a refused fill wrote");
}

#[test]
fn f32_output_is_refused_where_the_largest_draw_passes_f32_max() {
    let (lo, hi) = (1.0 - 1e-3, 1.0 + 1e-3);
    let g = |x: f64| Gaussian::new(x).unwrap();
    probe_f32("Gaussian", g(F32_MAX / BM_F32 * lo), g(F32_MAX / BM_F32 * hi));
    let l = |x: f64| Laplace::new(x).unwrap();
    probe_f32("Laplace", l(F32_MAX / LN_F32 * lo), l(F32_MAX / LN_F32 * hi));
    let e = |x: f64| Exponential::new(1.0 / x).unwrap();
    probe_f32("Exponential", e(F32_MAX / LN_F32 * lo), e(F32_MAX / LN_F32 * hi));
    let s = stream();
    // Far above the limit, a tenth of the f32 draws used to be infinite with an Ok status.
    let g = Gaussian::new(1e38).unwrap();
    assert!(g.check_output::<f64>().is_ok());
    out_of_range(g.check_output::<f32>(), "Gaussian σ = 1e38 in f32");
    out_of_range(g.sample_at::<f32>(&s, 3), "sample_at");
    // A truncated Laplace whose bound B exceeds f32::MAX (it used to be clamped there).
    let t = TruncatedLaplace::new(1e38, 1.0, 0.01).unwrap(); // B ≈ 4.46e38
    let mut out = [0.0f32; 4];
    out_of_range(t.fill_keyed(&s, 0, &mut out), "TLap with B > f32::MAX");
    let mut out = [0.0f64; 4];
    t.fill_keyed(&s, 0, &mut out).unwrap();
}

#[test]
fn shuffled_dp_sgd_float_step_refuses_noise_whose_largest_draw_overflows() {
    // σ·c = 1e308 is finite (the old check) but its largest draw, 8.57e308, is not.
    let (up, end) = (LinearLayout::new(0, 4, 3, WeightLayout::OutIn), 12);
    let down = LinearLayout::new(end, 2, 4, WeightLayout::OutIn);
    let blocks = [Block::Mlp(MlpBlock { up, gate: None, down })];
    let plan = ShufflePlan::new(&blocks, end + 8).unwrap();
    for (sigma, ok) in [(1e205, true), (1e208, false)] {
        let p = ShuffledDpSgdParams {
            noise_mode: NoiseMode::UnsafeFloat,
            ..ShuffledDpSgdParams::new(0.5, 1e100, sigma, 0.0, 1)
        };
        let mut w = vec![0.25f64; plan.param_len()];
        let mut perms = vec![0u32; plan.permutation_len()];
        let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(&plan).unwrap()];
        let mut ledger = Ledger::new_rdp(
            PrivacyUnit::Record,
            Epsilon::new(1e9).unwrap(),
            Delta::new(0.5).unwrap(),
        )
        .unwrap();
        let r = shuffled_dp_sgd_step_keyed(
            &mut w,
            &mut [],
            &plan,
            &p,
            16,
            |_, _, g: &mut [f64]| {
                g.fill(1.0);
                Ok(())
            },
            Draw { key: &NoiseKey::for_replay([5; 32]), stream: 0 },
            Some(&mut ledger),
            &mut perms,
            &mut scratch,
        );
        if ok {
            r.unwrap();
            assert_eq!(ledger.charges(), 1);
        } else {
            out_of_range(r, "shuffled DP-SGD σ·c = 1e308");
            assert_eq!(ledger.charges(), 0);
            assert!(w.iter().all(|&x| x == 0.25));
        }
    }
}

#[test]
fn dp_forward_float_release_refuses_noise_that_overflows_f32() {
    // C = 1e30 with a strict (ε, δ): the noise floor is far above f32::MAX / 8.57.
    let p = DpForwardParams {
        budget: PrivacyBudget::new(0.01, 1e-12).unwrap(),
        releases: 1,
        clip_norm: 1e36,
        region: ClipRegion::Frobenius,
        mode: ClipMode::Clip,
        neighbours: Neighbours::Sequence,
        position: NoisePosition::Embedding,
        tokens: 2,
        dim: 3,
        rule: SensitivityRule::Derived,
        noise_mode: NoiseMode::UnsafeFloat,
    };
    assert!(p.noise_floor().unwrap() * BM_F64 > F32_MAX);
    let key = NoiseKey::for_replay([6; 32]);
    let mut ledger = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(1e9).unwrap());
    let mut x = [1.0f32; 6];
    let r = dp_forward_keyed(
        MatMut::from_row_major(&mut x, 2, 3).unwrap(),
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    );
    out_of_range(r, "DP-Forward f32");
    assert_eq!((x, ledger.charges()), ([1.0f32; 6], 0));
    // The same release in f64 is finite.
    let mut x = [1.0f64; 6];
    let m = MatMut::from_row_major(&mut x, 2, 3).unwrap();
    dp_forward_keyed(
        m,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    )
    .unwrap();
    assert!(x.iter().all(|v| v.is_finite()) && ledger.charges() == 1);
}

#[test]
fn noisy_head_float_release_refuses_a_noise_std_whose_draw_overflows() {
    // s is linear in σ (and about linear in T): pick σ so that s = 5e307 (finite, but
    // 8.57·s > f64::MAX/2); 40 000 iterations keep that σ below f64::MAX.
    let base = NoisyHeadParams {
        noise_mode: NoiseMode::UnsafeFloat,
        iters: 40_000,
        ..presets::low_dim(1000, 1.0).unwrap()
    };
    let sigma = base.sigma * (5e307 / base.noise_std().unwrap());
    let p = NoisyHeadParams { sigma, ..base };
    let s = p.noise_std().unwrap();
    assert!(s.is_finite() && s * BM_F64 > f64::MAX / 2.0, "s = {s:e}");
    out_of_range(p.validate(), "NoisyHead s");
    // A hundredth of that σ: accepted.
    NoisyHeadParams { sigma: sigma / 100.0, ..p }.validate().unwrap();
}
