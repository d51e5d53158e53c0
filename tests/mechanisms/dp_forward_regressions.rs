//! Regression tests for the DP-Forward review findings (each test names its finding).
//!
//! * The `f64` Gaussian's bounded support (`|z| ≤ √(106 ln 2)`) is visible when `S₂/σ` is
//!   large; calibrations where it would add more than δ/100 are refused (float noise only).
//! * Randomized response must never share stream words with hidden-state noise drawn from
//!   the same `(key, stream)`.
//! * The certified `σ_min` must survive factors whose Gram entries underflow.

use dpattn::Error;
use dpattn::dp_forward::{
    CertifiedMatrixGaussian, ClipMode, ClipRegion, DpForwardParams, GAUSSIAN_SUPPORT, Neighbours,
    NoiseFactors, NoisePosition, RandomizedResponse, SensitivityRule, check_factors,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, MatrixGaussian, NoiseKey};
use dpattn::{Epsilon, MatRef, NoiseMode, PrivacyBudget};

fn params(epsilon: f64, releases: u32, rule: SensitivityRule) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(epsilon, 1e-5).unwrap(),
        releases,
        clip_norm: 1.0,
        region: ClipRegion::Frobenius,
        mode: ClipMode::Normalize,
        neighbours: Neighbours::Sequence,
        position: NoisePosition::Pooled,
        tokens: 1,
        dim: 8,
        rule,
        noise_mode: NoiseMode::Exact,
    }
}

#[test]
fn support_constant_is_the_box_muller_bound() {
    // √(−2 ln 2⁻⁵³), rounded up.
    let exact = (106.0f64 * std::f64::consts::LN_2).sqrt();
    assert!(GAUSSIAN_SUPPORT >= exact && GAUSSIAN_SUPPORT - exact < 1e-9);
}

#[test]
fn large_epsilon_is_refused_because_the_support_is_visible() {
    // The float sampler's support is bounded: checked in UnsafeFloat mode only.
    let float = |epsilon, releases, rule| DpForwardParams {
        noise_mode: NoiseMode::UnsafeFloat,
        ..params(epsilon, releases, rule)
    };
    // ε = 32 at δ = 1e-5: μ = 2/0.40987 = 4.88, Q(8.57 − 4.88) = 1.1e-4 > δ/100.
    let p = float(32.0, 1, SensitivityRule::Derived);
    match check_factors(&p, &NoiseFactors::Iid) {
        Err(Error::Infeasible { lhs, rhs, .. }) => {
            assert!(lhs > 1e-4 && lhs < 1.3e-4, "slack {lhs}");
            assert!((rhs / 1e-7 - 1.0).abs() < 1e-15, "{rhs}");
        }
        other => panic!("expected Infeasible, got {other:?}"),
    }
    // ε = 16: μ = 2.905, Q(5.67) = 7e-9 ≤ 1e-7: accepted.
    assert!(check_factors(&float(16.0, 1, SensitivityRule::Derived), &NoiseFactors::Iid).is_ok());
    // The same ε = 32 spread over k = 16 releases has μ = A/4 per release: accepted.
    assert!(check_factors(&float(32.0, 16, SensitivityRule::Derived), &NoiseFactors::Iid).is_ok());
    // The released code's nominal ε = 16 (effective 40.9) is refused; nominal 8 passes.
    assert!(
        check_factors(&float(16.0, 1, SensitivityRule::ReleasedCode), &NoiseFactors::Iid).is_err()
    );
    assert!(
        check_factors(&float(8.0, 1, SensitivityRule::ReleasedCode), &NoiseFactors::Iid).is_ok()
    );
    // The exact discrete Gaussian has unbounded support: ε = 32 is accepted at its floor.
    let exact = params(32.0, 1, SensitivityRule::Derived);
    assert_eq!(check_factors(&exact, &NoiseFactors::Iid).unwrap(), exact.noise_floor().unwrap());
}

#[test]
fn label_coins_are_independent_of_noise_on_the_same_stream() {
    // Before the fix, label i's coin was the first uniform of noise elements 32i, 32i + 1, so
    // "flipped" ⇔ z₀² + z₁² ≥ −2 ln q exactly. Both events have probability q = 0.1; if
    // independent they agree with probability q² + (1 − q)² = 0.82 (sd 0.003 over 20 000).
    let key = NoiseKey::for_replay([42; 32]);
    let stream = KeyedStream::new(&key, 3);
    let rr = RandomizedResponse::new(Epsilon::new(9f64.ln()).unwrap(), 2).unwrap();
    let n = 20_000usize;
    let mut labels = vec![0u32; n];
    rr.randomize(&mut labels, &stream, 0).unwrap();
    let mut z = vec![0.0f64; 32 * n];
    Gaussian::STANDARD.fill_keyed::<f64>(&stream, 0, &mut z).unwrap();
    let t = -2.0 * 0.1f64.ln();
    let agree = (0..n)
        .filter(|&i| (labels[i] == 1) == (z[32 * i].powi(2) + z[32 * i + 1].powi(2) >= t))
        .count() as f64
        / n as f64;
    assert!((agree - 0.82).abs() < 0.02, "agreement {agree}");
}

#[test]
fn certified_sigma_min_survives_tiny_factors() {
    // diag(1e-160, 2e-160): the Gram entries (1e-320) are subnormal; σ_min = 1e-160.
    let a = [1e-160, 0.0, 0.0, 2e-160];
    let eye = [1.0, 0.0, 0.0, 1.0];
    let mg = MatrixGaussian::from_factors(
        MatRef::from_row_major(&a, 2, 2).unwrap(),
        MatRef::from_row_major(&eye, 2, 2).unwrap(),
    )
    .unwrap();
    let (su, sv) = CertifiedMatrixGaussian::new(mg).unwrap().sigma_min_bounds();
    assert!(su <= 1e-160 && su > 0.999e-160, "{su}");
    assert!(sv <= 1.0 && sv > 0.999, "{sv}");
}
