//! Statistical tests of the exact samplers: Bernoulli (rational, dyadic `f64`,
//! `exp(−γ)`), discrete Laplace, discrete Gaussian, grid noise and Poisson subsampling.
//!
//! Every hypothesis test runs at significance `ALPHA` = 1e-6 with a fixed seed. The
//! reference distributions are computed here, in `f64`, from closed forms that share no
//! code with the samplers:
//!
//! * discrete Laplace with scale `t/s` (`λ = s/t`): `P(x) = tanh(λ/2) e^{−λ|x|}`, variance
//!   `2e^{−λ}/(1 − e^{−λ})²`;
//! * discrete Gaussian: `P(x) = e^{−x²/2σ²} / Σ_y e^{−y²/2σ²}`, summed over a support wide
//!   enough that the rest is below `e^{−70}`.
//!
//! Each pmf is tested by a χ² goodness of fit on single-integer bins (sparse tails pooled by
//! the toolkit) plus mean and variance z-tests, on both the RNG (`fill`) and the keyed
//! (`fill_keyed`) paths. Power tests check that the same χ² test rejects samples whose scale
//! is off by 2 %.

use crate::support;

use dpattn::sampling::{
    Bernoulli, BernoulliDyadic, BernoulliExp, DiscreteGaussian, DiscreteLaplace, ExactSampler,
    GridGaussian, GridLaplace, KeyedStream, NoiseKey, PoissonSubsampling,
};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use support::stats::*;

// ----------------------------------------------------------------------------- helpers

/// `n` samples from `ChaCha20Rng::from_seed([seed; 32])` via `fill`.
fn draw<S: ExactSampler<Output = i64>>(s: &S, seed: u8, n: usize) -> Vec<i64> {
    let mut out = vec![0i64; n];
    s.fill(&mut ChaCha20Rng::from_seed([seed; 32]), &mut out).unwrap();
    out
}

/// `n` samples from the keyed stream `(key [seed; 32], stream 1)` via `fill_keyed`.
pub(crate) fn draw_keyed<S: ExactSampler<Output = i64>>(s: &S, seed: u8, n: usize) -> Vec<i64> {
    let ks = KeyedStream::new(&NoiseKey::for_replay([seed; 32]), 1);
    let mut out = vec![0i64; n];
    s.fill_keyed(&ks, 0, &mut out).unwrap();
    out
}

/// A pmf on `−m ..= m` whose end cells hold the whole tails, with its variance and
/// fourth moment (the mean is 0).
pub(crate) struct Pmf {
    m: i64,
    probs: Vec<f64>,
    var: f64,
    m4: f64,
}

impl Pmf {
    /// From unnormalised symmetric weights `w(|x|)`, summed up to `|x| ≤ far` (where they
    /// are negligible), with cells `−m ..= m`.
    fn from_weights(w: impl Fn(f64) -> f64, m: i64, far: i64) -> Pmf {
        let mut total = w(0.0);
        let (mut s2, mut s4) = (0.0, 0.0);
        for x in 1..=far {
            let p = 2.0 * w(x as f64);
            let x = x as f64;
            total += p;
            s2 += x * x * p;
            s4 += x * x * x * x * p;
        }
        let mut probs: Vec<f64> = (-m..=m).map(|x| w(x.unsigned_abs() as f64) / total).collect();
        let tail: f64 = (m + 1..=far).map(|x| w(x as f64) / total).sum();
        probs[0] += tail;
        *probs.last_mut().unwrap() += tail;
        Pmf { m, probs, var: s2 / total, m4: s4 / total }
    }

    /// Discrete Laplace with scale `t/s`.
    fn laplace(t: f64, s: f64) -> Pmf {
        let lambda = s / t;
        let m = (40.0 / lambda).ceil() as i64 + 1;
        Pmf::from_weights(|x| (-lambda * x).exp(), m, 2 * m)
    }

    /// Discrete Gaussian with parameter `sigma`.
    pub(crate) fn gaussian(sigma: f64) -> Pmf {
        let m = (12.0 * sigma).ceil() as i64 + 12;
        Pmf::from_weights(|x| (-x * x / (2.0 * sigma * sigma)).exp(), m, 2 * m)
    }

    /// χ² goodness of fit of `xs` (values beyond ±m counted in the end cells).
    pub(crate) fn chi_square(&self, xs: &[i64]) -> Outcome {
        let mut counts = vec![0u64; self.probs.len()];
        for &x in xs {
            counts[(x.clamp(-self.m, self.m) + self.m) as usize] += 1;
        }
        chi_square_gof(&counts, &self.probs)
    }

    /// χ², mean and variance tests, with a message naming `what` on failure.
    pub(crate) fn check(&self, xs: &[i64], what: &str) {
        let chi = self.chi_square(xs);
        assert!(
            chi.accepts(),
            "{what}: χ² = {} (df {}), p = {}",
            chi.statistic,
            chi.df,
            chi.p_value
        );
        let f: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let mo = moments(&f);
        let zm = mean_z(&mo, 0.0, self.var);
        let zv = var_z(&mo, self.var, self.m4);
        assert!(z_accepts(zm), "{what}: mean {} (z = {zm})", mo.mean);
        assert!(z_accepts(zv), "{what}: variance {} vs {} (z = {zv})", mo.var, self.var);
    }
}

/// Binomial z-test of `hits` successes out of `n` against `p`.
fn assert_binomial(hits: u64, n: u64, p: f64, what: &str) {
    let z = binomial_z(hits, n, p);
    assert!(z_accepts(z), "{what}: {hits}/{n} = {} vs p = {p} (z = {z})", hits as f64 / n as f64);
}

fn count_true(xs: &[bool]) -> u64 {
    xs.iter().filter(|&&b| b).count() as u64
}

// ----------------------------------------------------------------------------- Bernoulli

#[test]
fn bernoulli_exp_frequencies_match_exp_minus_gamma() {
    let n = 200_000;
    for (i, (num, den)) in
        [(0u128, 1u128), (3, 10), (1, 1), (5, 2), (7, 3), (1u128 << 80, 3u128 << 80)]
            .into_iter()
            .enumerate()
    {
        let b = BernoulliExp::new(num, den).unwrap();
        let mut out = vec![false; n];
        if i % 2 == 0 {
            b.fill(&mut ChaCha20Rng::from_seed([10 + i as u8; 32]), &mut out).unwrap();
        } else {
            let ks = KeyedStream::new(&NoiseKey::for_replay([10 + i as u8; 32]), 0);
            b.fill_keyed(&ks, 0, &mut out).unwrap();
        }
        let p = (-(num as f64) / den as f64).exp();
        if num == 0 {
            assert!(out.iter().all(|&x| x), "exp(0) = 1");
        } else {
            assert_binomial(
                count_true(&out),
                n as u64,
                p,
                &format!("Bernoulli(exp(-{num}/{den}))"),
            );
        }
    }
}

#[test]
fn bernoulli_rational_and_dyadic_frequencies() {
    let n = 200_000;
    let ratios = [
        (1u64, 3u64),
        (2, 7),
        (999, 1000),
        (1, 1000),
        (5, 8),
        // Denominators above 2^32 take the u128-division path.
        ((1 << 62) + 12345, u64::MAX),
        (1 << 40, 3 * (1 << 40) + 1),
    ];
    for (i, (num, den)) in ratios.into_iter().enumerate() {
        let b = Bernoulli::new(num, den).unwrap();
        let mut out = vec![false; n];
        b.fill(&mut ChaCha20Rng::from_seed([20 + i as u8; 32]), &mut out).unwrap();
        assert_binomial(
            count_true(&out),
            n as u64,
            num as f64 / den as f64,
            &format!("{num}/{den}"),
        );
    }
    for (i, q) in
        [0.1, 0.5, 0.01, 1e-3, 0.9999, std::f64::consts::FRAC_1_SQRT_2].into_iter().enumerate()
    {
        let b = BernoulliDyadic::new(q).unwrap();
        let ks = KeyedStream::new(&NoiseKey::for_replay([30 + i as u8; 32]), 0);
        let mut out = vec![false; n];
        b.fill_keyed(&ks, 0, &mut out).unwrap();
        assert_binomial(count_true(&out), n as u64, q, &format!("dyadic {q}"));
    }
}

// ----------------------------------------------------------------------- discrete Laplace

#[test]
fn discrete_laplace_matches_its_exact_pmf() {
    let n = 200_000;
    for (i, (t, s)) in [(1u64, 1u64), (5, 2), (10, 1), (1, 3), (7, 4)].into_iter().enumerate() {
        let lap = DiscreteLaplace::new(t, s).unwrap();
        let pmf = Pmf::laplace(t as f64, s as f64);
        assert!((lap.variance() / pmf.var - 1.0).abs() < 1e-9, "variance() of {t}/{s}");
        let seed = 40 + i as u8;
        pmf.check(&draw(&lap, seed, n), &format!("DLap({t}/{s}) fill"));
        pmf.check(&draw_keyed(&lap, seed, n), &format!("DLap({t}/{s}) fill_keyed"));
    }
    // A scale from an f64 with a 53-bit mantissa (t/s = 0.7 as a dyadic rational).
    let lap = DiscreteLaplace::from_f64(0.7).unwrap();
    let (t, s) = lap.scale();
    Pmf::laplace(t as f64, s as f64).check(&draw(&lap, 49, n), "DLap(0.7)");
}

// ---------------------------------------------------------------------- discrete Gaussian

#[test]
fn discrete_gaussian_matches_its_exact_pmf() {
    let n = 200_000;
    let cases = [
        DiscreteGaussian::from_f64(0.8).unwrap(), // s/q with q = 2^30: large B
        DiscreteGaussian::new(3, 1).unwrap(),
        DiscreteGaussian::from_f64(10.5).unwrap(), // 21/2
        DiscreteGaussian::new(7, 3).unwrap(),      // a rational one
        DiscreteGaussian::from_f64(3.7).unwrap(),
    ];
    for (i, g) in cases.into_iter().enumerate() {
        let (s, q) = g.sigma_ratio();
        let sigma = s as f64 / q as f64;
        let pmf = Pmf::gaussian(sigma);
        assert!((g.variance() / pmf.var - 1.0).abs() < 1e-9, "variance() of σ = {sigma}");
        let seed = 50 + i as u8;
        pmf.check(&draw(&g, seed, n), &format!("DGauss({s}/{q}) fill"));
        pmf.check(&draw_keyed(&g, seed, n), &format!("DGauss({s}/{q}) fill_keyed"));
    }
}

#[test]
fn discrete_gaussian_cell_algorithm_matches_its_exact_pmf() {
    // σ ≥ 2^10 selects the cell algorithm (Karney at 64, cells of width σ/64): integer,
    // half-integer and finely rational σ, single-integer bins.
    let n = 200_000;
    let cases = [
        DiscreteGaussian::new(1024, 1).unwrap(),
        DiscreteGaussian::new(2049, 2).unwrap(),
        DiscreteGaussian::from_f64(1234.567).unwrap(),
    ];
    for (i, g) in cases.into_iter().enumerate() {
        let (s, q) = g.sigma_ratio();
        let sigma = s as f64 / q as f64;
        let pmf = Pmf::gaussian(sigma);
        let seed = 150 + i as u8;
        pmf.check(&draw(&g, seed, n), &format!("DGauss({s}/{q}) cells fill"));
        pmf.check(&draw_keyed(&g, seed, n), &format!("DGauss({s}/{q}) cells fill_keyed"));
    }
}

/// χ² of `xs` against `N(0, σ²)` on bins of width `σ/4` over `±8σ` (the tails pooled in
/// the end bins). For `σ ≥ 2^10` the discrete Gaussian's bin masses equal the normal's
/// (with the integer edges at half-integers) to far below the test's resolution (Poisson
/// summation: the relative difference is below `e^{−2π²σ²}`).
fn large_sigma_chi_square(xs: &[i64], sigma: f64) -> Outcome {
    let edges: Vec<f64> = (-32..=32).map(|k| f64::from(k) * sigma / 4.0).collect();
    let cdf = |x: f64| normal_cdf(x / sigma);
    let mut probs = vec![cdf(edges[0])];
    probs.extend(edges.windows(2).map(|w| cdf(w[1]) - cdf(w[0])));
    probs.push(1.0 - cdf(edges[edges.len() - 1]));
    let mut counts = vec![0u64; probs.len()];
    for &x in xs {
        counts[edges.partition_point(|&e| e <= x as f64 + 0.5)] += 1;
    }
    chi_square_gof(&counts, &probs)
}

/// The binned χ² of [`large_sigma_chi_square`] and mean and variance z-tests of `xs`
/// against `N(0, (s/q)²)`.
pub(crate) fn check_large_sigma(xs: &[i64], s: u64, q: u64) {
    let exact = s as f64 / q as f64;
    let chi = large_sigma_chi_square(xs, exact);
    assert!(chi.accepts(), "σ = {s}/{q}: χ² = {} (df {})", chi.statistic, chi.df);
    let f: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    let mo = moments(&f);
    let var = exact * exact;
    assert!(z_accepts(mean_z(&mo, 0.0, var)), "σ = {s}/{q}: mean {}", mo.mean);
    assert!(z_accepts(var_z(&mo, var, 3.0 * var * var)), "σ = {s}/{q}: var {}", mo.var);
}

#[test]
fn discrete_gaussian_at_grid_scales_is_normal_with_the_right_variance() {
    // The scales of the grid releases: GridGaussian's σ/r ∈ (2^29, 2^30], the mechanisms'
    // grids (σ/Λ in the thousands to millions), rational σ with q up to 2^20.
    let n = 400_000;
    for (i, sigma) in [1e9, 6.0e8 + 0.3, 82_000.25, 5_000.123].into_iter().enumerate() {
        let g = DiscreteGaussian::from_f64(sigma).unwrap();
        let (s, q) = g.sigma_ratio();
        let exact = s as f64 / q as f64;
        assert!(exact >= sigma && exact < sigma * (1.0 + 1e-9));
        check_large_sigma(&draw_keyed(&g, 160 + i as u8, n), s, q);
    }
    // Power: σ off by 2 % is rejected by the same binned test (λ ≈ n·2·0.02² = 320 on
    // df ≈ 60: about 7 standard deviations above the critical value).
    let g = DiscreteGaussian::new(64 * 15_937_500, 1).unwrap(); // 1.02e9
    let chi = large_sigma_chi_square(&draw_keyed(&g, 162, n), 1e9);
    eprintln!("power, DGauss(1.02e9) vs N(0, 1e9²): {chi:?}");
    assert!(chi.rejects(), "χ² = {} (df {})", chi.statistic, chi.df);
}

#[test]
fn chi_square_rejects_a_two_percent_scale_error() {
    // Power. For a scale off by a factor 1 + δ the χ² statistic is about df + λ, with
    // non-centrality λ ≈ n·I·δ² and standard deviation √(2(df + 2λ)), where I is the
    // Fisher information of the scale in relative units: 2 for a Gaussian, 1 for a Laplace
    // of large scale. With δ = 0.02:
    // * DGauss(3), n = 400 000: λ ≈ 320, pooled df ≈ 26 (critical value at 1e-6: 75.5);
    //   expected statistic ≈ 346 ± 37, 7 standard deviations above it.
    // * DLap(10), n = 1 000 000: λ ≈ 400, pooled df ≈ 198 (critical value ≈ 310); expected
    //   statistic ≈ 598 ± 45, 6.4 standard deviations above it. (At n = 400 000 the margin
    //   would be only 2 standard deviations: the Laplace spreads its information over many
    //   more cells.)
    // The statistics actually observed are printed (run with --nocapture).
    let n = 400_000;
    let g = DiscreteGaussian::new(306, 100).unwrap(); // 3.06 = 1.02 · 3
    let chi = Pmf::gaussian(3.0).chi_square(&draw(&g, 60, n));
    eprintln!("power, DGauss(3.06) vs pmf(3): {chi:?}");
    assert!(
        chi.rejects(),
        "DGauss(3.06) vs pmf(3): χ² = {} (df {}), p = {}",
        chi.statistic,
        chi.df,
        chi.p_value
    );
    // The sampler with the right scale passes the same test with the same n.
    let g = DiscreteGaussian::new(3, 1).unwrap();
    assert!(Pmf::gaussian(3.0).chi_square(&draw(&g, 60, n)).accepts());

    let n = 1_000_000;
    let lap = DiscreteLaplace::new(51, 5).unwrap(); // 10.2 = 1.02 · 10
    let chi = Pmf::laplace(10.0, 1.0).chi_square(&draw_keyed(&lap, 61, n));
    eprintln!("power, DLap(10.2) vs pmf(10): {chi:?}");
    assert!(
        chi.rejects(),
        "DLap(10.2) vs pmf(10): χ² = {} (df {}), p = {}",
        chi.statistic,
        chi.df,
        chi.p_value
    );
    let lap = DiscreteLaplace::new(10, 1).unwrap();
    assert!(Pmf::laplace(10.0, 1.0).chi_square(&draw_keyed(&lap, 61, n)).accepts());
}

// ----------------------------------------------------------------------------- grid noise

/// Inputs spread over many grid cells, with values off the grid.
fn grid_inputs(n: usize, seed: u8) -> Vec<f64> {
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    (0..n).map(|_| (rng.next_u64() >> 11) as f64 * 2f64.powi(-53) * 200.0 - 100.0).collect()
}

/// The integer noise `(y − round(x/r)·r)/r`, checking that it is an exact integer.
fn integer_noise(x: &[f64], y: &[f64], r: f64) -> Vec<i64> {
    x.iter()
        .zip(y)
        .map(|(&x, &y)| {
            let z = (y / r) - (x / r).round();
            assert_eq!(z, z.round(), "output {y} of input {x} is off the grid {r}");
            z as i64
        })
        .collect()
}

#[test]
fn grid_gaussian_output_is_on_the_grid_with_exact_integer_noise() {
    let n = 200_000;
    // σ = 0.75 on the grid 2^−2: integer noise N_Z(0, 3²).
    let g = GridGaussian::with_resolution(1.0, 0.75, n, -2).unwrap();
    assert_eq!((g.resolution(), g.sigma()), (0.25, 0.75));
    let x = grid_inputs(n, 70);
    let mut y = x.clone();
    g.add_noise(&mut ChaCha20Rng::from_seed([71; 32]), &mut y).unwrap();
    Pmf::gaussian(3.0).check(&integer_noise(&x, &y, 0.25), "grid Gaussian (rng)");
    let ks = KeyedStream::new(&NoiseKey::for_replay([72; 32]), 0);
    let mut y = x.clone();
    g.add_noise_keyed(&ks, 0, &mut y).unwrap();
    Pmf::gaussian(3.0).check(&integer_noise(&x, &y, 0.25), "grid Gaussian (keyed)");

    // The default resolution: σ/r ∈ (2^29, 2^30]; the noise in data units has variance σ².
    let g = GridGaussian::new(1.0, 2.5, n).unwrap();
    let r = g.resolution();
    assert!(2.5 / r > 2f64.powi(29) && 2.5 / r <= 2f64.powi(30));
    assert!(g.sigma() >= 2.5 && g.sigma() <= 2.5 * (1.0 + 2f64.powi(-30)));
    let mut y = x.clone();
    g.add_noise_keyed(&ks, 0, &mut y).unwrap();
    let noise: Vec<f64> = integer_noise(&x, &y, r).iter().map(|&z| z as f64 * r).collect();
    let mo = moments(&noise);
    let var = g.sigma() * g.sigma();
    assert!(z_accepts(mean_z(&mo, 0.0, var)) && z_accepts(var_z(&mo, var, 3.0 * var * var)));
}

#[test]
fn grid_laplace_output_is_on_the_grid_with_exact_integer_noise() {
    let n = 200_000;
    // Δ₁ = 1, ε = 0.5, d = 2 on the grid 2^−3: integer scale (1 + 2/8)·8/0.5 = 20.
    let lap = GridLaplace::with_resolution(1.0, 0.5, 2, -3).unwrap();
    assert_eq!(lap.integer_noise().scale(), (20, 1));
    assert_eq!(lap.scale(), 2.5); // (Δ₁ + d·r)/ε in data units
    let x = grid_inputs(2, 73);
    // Noise the same two coordinates many times (each call is one release).
    let mut z = Vec::with_capacity(n);
    let mut rng = ChaCha20Rng::from_seed([74; 32]);
    for _ in 0..n / 2 {
        let mut y = x.clone();
        lap.add_noise(&mut rng, &mut y).unwrap();
        z.extend(integer_noise(&x, &y, 0.125));
    }
    Pmf::laplace(20.0, 1.0).check(&z, "grid Laplace (rng)");

    // The default (Google) resolution: smallest 2^k ≥ (Δ₁/ε)/2^40; the reported scale is
    // (Δ₁ + d·r)/ε up to rounding, and the noise has the matching variance.
    let lap = GridLaplace::new(3.0, 0.75, n).unwrap();
    let r = lap.resolution();
    assert!(r >= 4.0 / 2f64.powi(40) && r / 2.0 < 4.0 / 2f64.powi(40));
    let want = (3.0 + n as f64 * r) / 0.75;
    assert!(lap.scale() >= want && lap.scale() <= want * (1.0 + 1e-12));
    let x = grid_inputs(n, 75);
    let mut y = x.clone();
    let ks = KeyedStream::new(&NoiseKey::for_replay([76; 32]), 0);
    lap.add_noise_keyed(&ks, 0, &mut y).unwrap();
    let noise: Vec<f64> = integer_noise(&x, &y, r).iter().map(|&z| z as f64 * r).collect();
    let mo = moments(&noise);
    let b = lap.scale();
    // Laplace(b): variance 2b², fourth moment 24b⁴ (the discretisation is 2^−40 relative).
    assert!(z_accepts(mean_z(&mo, 0.0, 2.0 * b * b)), "mean {}", mo.mean);
    assert!(
        z_accepts(var_z(&mo, 2.0 * b * b, 24.0 * b.powi(4))),
        "var {} vs {}",
        mo.var,
        2.0 * b * b
    );
}

// ------------------------------------------------------------------ Poisson subsampling

#[test]
fn poisson_subsampling_includes_records_independently_at_rate_q() {
    let n = 400_000;
    for (i, q) in [0.3, 0.01].into_iter().enumerate() {
        let p = PoissonSubsampling::new(q).unwrap();
        let mut keyed = vec![false; n];
        let ks = KeyedStream::new(&NoiseKey::for_replay([80 + i as u8; 32]), 3);
        p.select_keyed(&ks, 0, &mut keyed).unwrap();
        let mut seq = vec![false; n];
        p.select(&mut ChaCha20Rng::from_seed([82 + i as u8; 32]), &mut seq).unwrap();
        for (mask, path) in [(&keyed, "keyed"), (&seq, "rng")] {
            let what = format!("q = {q} ({path})");
            assert_binomial(count_true(mask), n as u64, q, &what);
            // Disjoint pairs (2i, 2i + 1): both included with probability q².
            let both = mask.chunks_exact(2).filter(|c| c[0] && c[1]).count() as u64;
            assert_binomial(both, n as u64 / 2, q * q, &format!("{what}, pairs"));
            // No serial correlation at lags 1 and 16 (a ChaCha block holds 16 words).
            let f: Vec<f64> = mask.iter().map(|&m| f64::from(u8::from(m))).collect();
            for lag in [1, 16] {
                let z = lag_correlation_z(&f, lag);
                assert!(z_accepts(z), "{what}: lag-{lag} correlation z = {z}");
            }
        }
    }
}
