//! The constant-time discrete Gaussian (`ConstantTimeGaussian`, for enclaves): its law, and
//! a dudect-style timing test.
//!
//! * Law: the same χ² goodness-of-fit, mean and variance tests as the exact sampler
//!   (`exact.rs`, α = 1e-6), against the discrete Gaussian pmf computed from its closed
//!   form; the sampler's proven distance from that pmf (2^−100 in total variation) is far
//!   below what any test can see. Power: a 2 % scale error is rejected.
//! * Timing (dudect: Reparaz, Balasch and Verbauwhede, "Dude, is my code constant time?",
//!   DATE 2017): each draw is timed alone and put in a class by the value it drew
//!   (`|z| < σ` or `|z| ≥ σ`, about 68 % / 32 %). The classes are decided by the fair
//!   randomness of the draw itself, so anything else that varies the timing (other threads,
//!   frequency changes, interrupts) falls on both classes alike; only a dependence of the
//!   run time on the value separates their means. Welch's t over 1e6 draws must stay
//!   below 4.5 in absolute value (dudect's threshold) for the constant-time sampler, and the
//!   same statistic must exceed it for the default exact sampler, whose run time grows with
//!   `|z|` (the test has power). Measurements above the 95th percentile of all draws are
//!   dropped, as dudect crops, so that a few preempted draws do not swamp the variance.

use std::time::Instant;

use dpattn::sampling::{
    ConstantTimeGaussian, DiscreteGaussian, ExactSampler, KeyedStream, NoiseKey,
};

use crate::exact::{Pmf, check_large_sigma, draw_keyed};
use crate::support::stats::moments;

fn ct(s: u64, q: u64) -> ConstantTimeGaussian {
    ConstantTimeGaussian::new(&DiscreteGaussian::new(s, q).unwrap()).unwrap()
}

#[test]
fn constant_time_gaussian_matches_the_exact_pmf() {
    // Smallest σ (one-integer cells), a half-integer, an odd rational and a mid σ, on
    // single-integer bins.
    let n = 200_000;
    for (i, (s, q)) in [(4u64, 1u64), (21, 2), (1000, 7), (300, 1)].into_iter().enumerate() {
        let pmf = Pmf::gaussian(s as f64 / q as f64);
        pmf.check(&draw_keyed(&ct(s, q), 90 + i as u8, n), &format!("CT DGauss({s}/{q})"));
    }
}

#[test]
fn constant_time_gaussian_at_grid_scales_is_normal_with_the_right_variance() {
    let n = 200_000;
    for (i, sigma) in [1e9, 6.0e8 + 0.3, 5_000.123].into_iter().enumerate() {
        let g = DiscreteGaussian::from_f64(sigma).unwrap();
        let (s, q) = g.sigma_ratio();
        check_large_sigma(
            &draw_keyed(&ConstantTimeGaussian::new(&g).unwrap(), 95 + i as u8, n),
            s,
            q,
        );
    }
}

#[test]
fn constant_time_gaussian_test_has_power() {
    // σ = 3.06 against the pmf of σ = 3: rejected (see exact.rs for the non-centrality).
    // DGauss needs σ ≥ 4 here, so the pair is 4.08 vs 4: λ ≈ 320 again.
    let n = 400_000;
    let chi = Pmf::gaussian(4.0).chi_square(&draw_keyed(&ct(408, 100), 99, n));
    eprintln!("power, CT DGauss(4.08) vs pmf(4): {chi:?}");
    assert!(chi.rejects(), "χ² = {} (df {})", chi.statistic, chi.df);
    assert!(Pmf::gaussian(4.0).chi_square(&draw_keyed(&ct(4, 1), 99, n)).accepts());
}

/// Welch's t between the run times of draws with `|z| < σ` and draws with `|z| ≥ σ`, over
/// `n` keyed draws timed one by one, after dropping times above the 95th percentile.
fn welch_t_by_magnitude<S: ExactSampler<Output = i64>>(g: &S, sigma: f64, n: u64) -> f64 {
    let s = KeyedStream::new(&NoiseKey::generate().unwrap(), 0);
    let mut times = Vec::with_capacity(n as usize);
    let mut sink = 0i64;
    for e in 0..n {
        let t0 = Instant::now();
        let z = g.sample_at(&s, e).unwrap();
        let dt = t0.elapsed().as_nanos() as f64;
        sink = sink.wrapping_add(z);
        times.push((dt, (z.unsigned_abs() as f64) >= sigma));
    }
    std::hint::black_box(sink);
    let mut sorted: Vec<f64> = times.iter().map(|t| t.0).collect();
    sorted.sort_by(f64::total_cmp);
    let crop = sorted[sorted.len() * 95 / 100];
    let class = |large: bool| -> Vec<f64> {
        times.iter().filter(|t| t.1 == large && t.0 <= crop).map(|t| t.0).collect()
    };
    let (a, b) = (moments(&class(false)), moments(&class(true)));
    (a.mean - b.mean) / (a.var / a.n as f64 + b.var / b.n as f64).sqrt()
}

#[test]
fn constant_time_gaussian_passes_a_dudect_test_the_default_sampler_fails() {
    // The grid releases' scale, σ = 2^30.
    let sigma = (1u64 << 30) as f64;
    let exact = DiscreteGaussian::new(1 << 30, 1).unwrap();
    let t_ct = welch_t_by_magnitude(&ConstantTimeGaussian::new(&exact).unwrap(), sigma, 1_000_000);
    let t_default = welch_t_by_magnitude(&exact, sigma, 1_000_000);
    eprintln!("dudect: |t| = {:.2} constant time, {:.2} default", t_ct.abs(), t_default.abs());
    assert!(t_ct.abs() < 4.5, "constant-time sampler: Welch t = {t_ct}");
    assert!(t_default.abs() > 4.5, "the default sampler should leak (power): t = {t_default}");
}
