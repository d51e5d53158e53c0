//! The gamma and chi-square samplers (`dpattn::sampling::{Gamma, ChiSquare}`) against their
//! exact distributions.
//!
//! Expected values come from math: the regularized incomplete gamma function of the test
//! toolkit (`support::stats::gamma_p`, independent of the sampler) for the KS tests, and the
//! moments `E = a`, `Var = a`, `μ₄ = 3a² + 6a` of `Gamma(a, 1)`. For shapes too large for
//! the series (`a ≥ 10⁶`), the standardised variate `(X − a)/√a` is compared with `N(0, 1)`:
//! the KS distance between the two is at most about `0.1·skewness = 0.2/√a ≤ 2e-4`, far
//! below the critical distance `2.69/√n` at the sample sizes used. Every test runs at the
//! toolkit's significance `ALPHA = 1e-6` with a fixed key, so a correct sampler never fails.
//! The sample sizes catch a wrong shape or scale: a 1% error in the variance moves the
//! variance z-score by `0.01·√(n/(2 + 6/a))` ≥ 4.9 for `n = 500,000`.

use crate::support;

use dpattn::sampling::{ChiSquare, Gamma, KeyedStream, NoiseKey};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use support::stats::{gamma_p, ks_test, mean_z, moments, normal_cdf, var_z, z_accepts};

fn keyed(shape: f64, stream: u64, n: usize) -> Vec<f64> {
    let s = KeyedStream::new(&NoiseKey::for_replay([21; 32]), stream);
    let g = Gamma::new(shape).unwrap();
    (0..n as u64).map(|i| g.sample_at(&s, i).unwrap()).collect()
}

#[test]
fn gamma_matches_its_cdf_for_small_and_moderate_shapes() {
    // Below 1 (the boost), at 1 (exponential), and above (Marsaglia–Tsang directly).
    for (i, shape) in [0.3, 0.5, 1.0, 2.5, 30.0, 1e4].into_iter().enumerate() {
        let xs = keyed(shape, i as u64, 40_000);
        let out = ks_test(&xs, |x| gamma_p(shape, x.max(0.0)));
        assert!(out.accepts(), "shape {shape}: KS D = {}, p = {}", out.statistic, out.p_value);
    }
}

#[test]
fn gamma_moments_match_mean_variance_and_fourth_moment() {
    for (i, shape) in [0.5, 3.0, 200.0].into_iter().enumerate() {
        let xs = keyed(shape, 10 + i as u64, 500_000);
        let m = moments(&xs);
        let (mz, vz) =
            (mean_z(&m, shape, shape), var_z(&m, shape, 3.0 * shape * shape + 6.0 * shape));
        assert!(z_accepts(mz) && z_accepts(vz), "shape {shape}: mean z {mz}, var z {vz}");
    }
}

#[test]
fn chi_square_with_huge_degrees_of_freedom_is_exact_not_approximated() {
    // k up to 10⁹ is the regime of paper 000's Bartlett sampler; the cost does not grow.
    for (i, df) in [1e6, 5e8, 1e9].into_iter().enumerate() {
        let s = KeyedStream::new(&NoiseKey::for_replay([22; 32]), i as u64);
        let c = ChiSquare::new(df).unwrap();
        let z: Vec<f64> = (0..40_000u64)
            .map(|e| (c.sample_at(&s, e).unwrap() - df) / (2.0 * df).sqrt())
            .collect();
        let out = ks_test(&z, normal_cdf);
        assert!(out.accepts(), "df {df}: KS D = {}, p = {}", out.statistic, out.p_value);
        let m = moments(&z);
        assert!(z_accepts(mean_z(&m, 0.0, 1.0)), "df {df}: mean {}", m.mean);
    }
}

#[test]
fn chi_square_is_twice_a_gamma_and_draws_from_any_crypto_rng() {
    let s = KeyedStream::new(&NoiseKey::for_replay([23; 32]), 0);
    let (c, g) = (ChiSquare::new(7.0).unwrap(), Gamma::new(3.5).unwrap());
    for e in 0..100 {
        assert_eq!(c.sample_at(&s, e).unwrap(), 2.0 * g.sample_at(&s, e).unwrap());
    }
    let mut rng = ChaCha20Rng::from_seed([5; 32]);
    let xs: Vec<f64> = (0..40_000).map(|_| c.sample(&mut rng).unwrap()).collect();
    let out = ks_test(&xs, |x| gamma_p(3.5, x.max(0.0) / 2.0));
    assert!(out.accepts(), "rng draws: p = {}", out.p_value);
}

#[test]
fn bad_parameters_are_errors() {
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(Gamma::new(bad).is_err() && ChiSquare::new(bad).is_err(), "{bad}");
    }
    let s = KeyedStream::new(&NoiseKey::for_replay([1; 32]), 0);
    assert!(Gamma::new(1.0).unwrap().sample_at(&s, 1 << 40).is_err());
}
