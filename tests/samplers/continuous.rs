//! Statistical tests of the continuous noise samplers (`Uniform`, `Exponential`,
//! `Gaussian`, `Laplace`, `TruncatedLaplace`) in `f32` and `f64`, and of their stream
//! layout.
//!
//! Every hypothesis test runs at significance `ALPHA` = 1e-6 with a fixed seed. Each
//! (sampler, precision, parameters) gets a KS test, a χ² test on probability-integral-
//! transform bins that are fine in both tails (masses 1e-4, 9e-4, 9e-3, …), and mean and
//! variance z-tests. Reference
//! CDFs and moments are computed here, in `f64`, from closed forms (the Gaussian CDF from
//! the toolkit's own `erfc`); the samplers' `cdf()`/`variance()` are only cross-checked.
//! Each sampler also gets a power test: the same KS test must reject the sampler with its
//! scale off by 2 %.

use crate::support;

use dpattn::sampling::{
    Exponential, FixedWordSampler, Gaussian, KeyedStream, Laplace, NoiseFloat, NoiseKey,
    TruncatedLaplace, Uniform,
};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use support::stats::*;

// ----------------------------------------------------------------------------- helpers

/// `n` values of `s` in precision `T`, from `ChaCha20Rng::from_seed([seed; 32])`, widened.
fn draw<T: NoiseFloat>(s: &impl FixedWordSampler, seed: u8, n: usize) -> Vec<f64> {
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    let mut out = vec![T::from_f64(0.0); n];
    s.fill(&mut rng, &mut out);
    out.into_iter().map(T::to_f64).collect()
}

/// `n` values of `s` from the keyed stream `(key = [seed; 32], stream)`, via `fill_keyed`.
fn draw_keyed<T: NoiseFloat>(
    s: &impl FixedWordSampler,
    seed: u8,
    stream: u64,
    n: usize,
) -> Vec<f64> {
    let ks = KeyedStream::new(&NoiseKey::for_replay([seed; 32]), stream);
    let mut out = vec![T::from_f64(0.0); n];
    s.fill_keyed(&ks, 0, &mut out).unwrap();
    out.into_iter().map(T::to_f64).collect()
}

/// A distribution's closed forms: CDF, mean, variance and central 4th moment.
struct Reference {
    name: String,
    cdf: Box<dyn Fn(f64) -> f64>,
    mean: f64,
    var: f64,
    m4: f64,
}

/// U(0, 1]: μ = 1/2, σ² = 1/12, μ4 = 1/80.
fn uniform_ref() -> Reference {
    Reference {
        name: "U(0,1]".into(),
        cdf: Box::new(|x: f64| x.clamp(0.0, 1.0)),
        mean: 0.5,
        var: 1.0 / 12.0,
        m4: 1.0 / 80.0,
    }
}

/// Exp(λ): F = 1 − e^{−λx}; μ = 1/λ, σ² = 1/λ², μ4 = 9/λ⁴.
fn exponential_ref(rate: f64) -> Reference {
    Reference {
        name: format!("Exp({rate})"),
        cdf: Box::new(move |x: f64| if x <= 0.0 { 0.0 } else { -(-rate * x).exp_m1() }),
        mean: 1.0 / rate,
        var: 1.0 / (rate * rate),
        m4: 9.0 / rate.powi(4),
    }
}

/// N(0, σ²): F = Φ(x/σ); μ4 = 3σ⁴.
fn gaussian_ref(sigma: f64) -> Reference {
    Reference {
        name: format!("N(0,{sigma}²)"),
        cdf: Box::new(move |x: f64| normal_cdf(x / sigma)),
        mean: 0.0,
        var: sigma * sigma,
        m4: 3.0 * sigma.powi(4),
    }
}

/// Lap(b): F = e^{x/b}/2 below 0, 1 − e^{−x/b}/2 above; σ² = 2b², μ4 = 24b⁴.
fn laplace_ref(b: f64) -> Reference {
    Reference {
        name: format!("Lap({b})"),
        cdf: Box::new(
            move |x: f64| {
                if x < 0.0 { 0.5 * (x / b).exp() } else { 1.0 - 0.5 * (-x / b).exp() }
            },
        ),
        mean: 0.0,
        var: 2.0 * b * b,
        m4: 24.0 * b.powi(4),
    }
}

/// TLap(Δ, ε, δ) from its definition (docs/PAPERS.md §1.3), independently of the sampler:
/// b = Δ/ε, t = ln(1 + (e^ε − 1)/(2δ)), B = b·t; |Z| is Exp(1/b) truncated to [0, B]
/// (normaliser m = 1 − e^{−t}) and the sign is fair.
#[derive(Clone, Copy, Debug)]
struct TLapRef {
    b: f64,
    t: f64,
    m: f64,
    bound: f64,
}

impl TLapRef {
    fn new(sensitivity: f64, epsilon: f64, delta: f64) -> Self {
        let b = sensitivity / epsilon;
        let t = (epsilon.exp_m1() / (2.0 * delta)).ln_1p();
        Self { b, t, m: -(-t).exp_m1(), bound: b * t }
    }

    /// P(Z ≤ z) = 1/2 ± (1 − e^{−|z|/b})/(2m) on [−B, B].
    fn cdf(&self, z: f64) -> f64 {
        if z <= -self.bound {
            return 0.0;
        }
        if z >= self.bound {
            return 1.0;
        }
        let g = (-(-z.abs() / self.b).exp_m1() / self.m).min(1.0);
        if z < 0.0 { 0.5 - 0.5 * g } else { 0.5 + 0.5 * g }
    }

    /// E|Z|^k = b^k · k! · P(k + 1, t)/P(1, t), P the regularized lower incomplete gamma:
    /// direct integration of a^k e^{−a/b} over [0, B].
    fn abs_moment(&self, k: i32) -> f64 {
        let fact: f64 = (1..=k).map(f64::from).product();
        self.b.powi(k) * fact * poisson_tail(k + 1, self.t) / poisson_tail(1, self.t)
    }

    fn reference(&self, name: &str) -> Reference {
        let me = *self;
        Reference {
            name: name.into(),
            cdf: Box::new(move |z| me.cdf(z)),
            mean: 0.0,
            var: self.abs_moment(2),
            m4: self.abs_moment(4),
        }
    }
}

/// P(k, t) = P(Poisson(t) ≥ k) = e^{−t} Σ_{j≥k} t^j/j! (all terms positive: no
/// cancellation for small t).
fn poisson_tail(k: i32, t: f64) -> f64 {
    let mut term: f64 = (-t).exp() * (1..=k).fold(1.0, |acc, j| acc * t / f64::from(j));
    let mut sum = 0.0;
    let mut j = k;
    while term > sum * 1e-18 || j < k + 2 {
        sum += term;
        j += 1;
        term *= t / f64::from(j);
    }
    sum
}

/// The parameter sets (Δ, ε, δ, B, Var) of docs/PAPERS.md T1-A.
const TLAP_TABLE: [(f64, f64, f64, f64, f64); 3] = [
    (1.0, 1.0, 0.01, 4.464920, 1.664021),
    (2.0, 0.5, 1e-6, 50.758457, 31.990805),
    (1.0, 1e-3, 1e-3, 405.631816, 49374.03),
];

/// Probability-integral-transform bin edges of [`tail_chi_square`]: fine in both tails,
/// where the KS statistic is insensitive.
const TAIL_EDGES: [f64; 19] = [
    0.0, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999,
    0.9999, 1.0,
];

/// χ² test of the counts of `cdf(x)` in the bins of [`TAIL_EDGES`] (tail bins of mass
/// 1e-4 and 9e-4 on either side).
fn tail_chi_square(xs: &[f64], cdf: impl Fn(f64) -> f64) -> Outcome {
    let edges = &TAIL_EDGES;
    let mut counts = vec![0u64; edges.len() - 1];
    for &x in xs {
        let u = cdf(x);
        let bin = edges[1..].iter().position(|&e| u < e).unwrap_or(edges.len() - 2);
        counts[bin] += 1;
    }
    let probs: Vec<f64> = edges.windows(2).map(|w| w[1] - w[0]).collect();
    chi_square_gof(&counts, &probs)
}

/// KS test, tail-binned χ² test, and mean and variance z-tests of `xs` against `r`;
/// panics with the numbers.
fn check_fit(xs: &[f64], r: &Reference, what: &str) {
    assert!(xs.iter().all(|x| x.is_finite()), "{what}: non-finite sample");
    let ks = ks_test(xs, &r.cdf);
    assert!(ks.accepts(), "{what} vs {}: KS rejects: {ks:?}", r.name);
    let chi = tail_chi_square(xs, &r.cdf);
    assert!(chi.accepts(), "{what} vs {}: tail χ² rejects: {chi:?}", r.name);
    assert_eq!(chi.df, 17);
    let m = moments(xs);
    let zm = mean_z(&m, r.mean, r.var);
    let zv = var_z(&m, r.var, r.m4);
    assert!(z_accepts(zm), "{what} vs {}: mean z = {zm} ({m:?})", r.name);
    assert!(z_accepts(zv), "{what} vs {}: variance z = {zv} ({m:?})", r.name);
}

/// The KS test of `xs` against `cdf` rejects, and does so because D exceeds the critical
/// distance (printed on failure).
fn check_rejects(xs: &[f64], cdf: impl Fn(f64) -> f64, what: &str) {
    let ks = ks_test(xs, cdf);
    assert!(
        ks.rejects(),
        "{what}: the 2 % scale error went undetected: {ks:?}, critical D = {}",
        ks_critical(xs.len())
    );
}

/// Largest |F(x) − G(x)| over a fine grid on [lo, hi].
fn max_cdf_gap(f: impl Fn(f64) -> f64, g: impl Fn(f64) -> f64, lo: f64, hi: f64) -> f64 {
    (0..=100_000)
        .map(|i| lo + (hi - lo) * f64::from(i) / 100_000.0)
        .map(|x| (f(x) - g(x)).abs())
        .fold(0.0, f64::max)
}

/// 10 × 10 χ² independence test of the pairs (u[2i + offset], u[2i + 1 + offset]) of
/// probability-integral-transformed values (each U(0, 1) under the null): every cell has
/// probability 1/100 if the two coordinates are independent.
fn pair_grid_test(us: &[f64], offset: usize, what: &str) {
    let mut counts = [0u64; 100];
    for p in us[offset..].chunks_exact(2) {
        let cell = |u: f64| ((u * 10.0) as usize).min(9);
        counts[cell(p[0]) * 10 + cell(p[1])] += 1;
    }
    let o = chi_square_gof(&counts, &[0.01; 100]);
    assert!(o.accepts(), "{what}: 10×10 pair grid rejects independence: {o:?}");
    assert_eq!(o.df, 99);
}

/// Lag-1 correlation z-tests of a sequence, of its squares, and the pair-grid test of its
/// transforms `cdf(x)` at both pair offsets.
fn check_serial_independence(xs: &[f64], cdf: impl Fn(f64) -> f64, what: &str) {
    let z = lag_correlation_z(xs, 1);
    assert!(z_accepts(z), "{what}: lag-1 correlation z = {z}");
    let sq: Vec<f64> = xs.iter().map(|x| x * x).collect();
    let z = lag_correlation_z(&sq, 1);
    assert!(z_accepts(z), "{what}: lag-1 correlation of squares z = {z}");
    let us: Vec<f64> = xs.iter().map(|&x| cdf(x)).collect();
    pair_grid_test(&us, 0, what);
    pair_grid_test(&us, 1, what);
}

// ------------------------------------------------------------- goodness of fit, moments

/// Samples per goodness-of-fit test (KS + mean + variance).
const N_FIT: usize = 400_000;

#[test]
fn uniform_fits_f64() {
    check_fit(&draw::<f64>(&Uniform, 1, N_FIT), &uniform_ref(), "Uniform f64");
    let xs = draw::<f64>(&Uniform, 1, 1000);
    assert!(xs.iter().all(|&u| u > 0.0 && u <= 1.0));
}

#[test]
fn uniform_fits_f32() {
    let xs = draw_keyed::<f32>(&Uniform, 2, 7, N_FIT);
    assert!(xs.iter().all(|&u| u > 0.0 && u <= 1.0), "uniform f32 outside (0, 1]");
    check_fit(&xs, &uniform_ref(), "Uniform f32");
}

#[test]
fn exponential_fits_f64() {
    for (seed, rate) in [(3, 2.5), (4, 1e-3)] {
        let e = Exponential::new(rate).unwrap();
        let xs = draw::<f64>(&e, seed, N_FIT);
        assert!(xs.iter().all(|&x| x >= 0.0));
        check_fit(&xs, &exponential_ref(rate), "Exponential f64");
    }
}

#[test]
fn exponential_fits_f32() {
    for (seed, rate) in [(5, 2.5), (6, 40.0)] {
        let e = Exponential::new(rate).unwrap();
        let xs = draw::<f32>(&e, seed, N_FIT);
        assert!(xs.iter().all(|&x| x >= 0.0));
        check_fit(&xs, &exponential_ref(rate), "Exponential f32");
    }
}

#[test]
fn gaussian_fits_f64() {
    for (seed, sigma) in [(7, 1.0), (8, 3.7)] {
        let xs = draw::<f64>(&Gaussian::new(sigma).unwrap(), seed, N_FIT);
        check_fit(&xs, &gaussian_ref(sigma), "Gaussian f64");
    }
}

#[test]
fn gaussian_fits_f32() {
    let xs = draw::<f32>(&Gaussian::new(0.25).unwrap(), 9, N_FIT);
    check_fit(&xs, &gaussian_ref(0.25), "Gaussian f32");
    let xs = draw_keyed::<f32>(&Gaussian::STANDARD, 10, 3, N_FIT);
    check_fit(&xs, &gaussian_ref(1.0), "Gaussian f32 keyed");
}

#[test]
fn laplace_fits_f64() {
    for (seed, b) in [(11, 1.0), (12, 0.3)] {
        let xs = draw::<f64>(&Laplace::new(b).unwrap(), seed, N_FIT);
        check_fit(&xs, &laplace_ref(b), "Laplace f64");
    }
}

#[test]
fn laplace_fits_f32() {
    let xs = draw::<f32>(&Laplace::new(2.0).unwrap(), 13, N_FIT);
    check_fit(&xs, &laplace_ref(2.0), "Laplace f32");
}

#[test]
fn truncated_laplace_fits_f64() {
    for (i, &(d, e, dl, _, _)) in TLAP_TABLE.iter().enumerate() {
        let s = TruncatedLaplace::new(d, e, dl).unwrap();
        let r = TLapRef::new(d, e, dl);
        let xs = draw::<f64>(&s, 14 + i as u8, N_FIT);
        assert!(xs.iter().all(|x| x.abs() <= r.bound), "TLap({d},{e},{dl}) outside [−B, B]");
        check_fit(&xs, &r.reference(&format!("TLap({d},{e},{dl})")), "TLap f64");
    }
}

#[test]
fn truncated_laplace_fits_f32() {
    for (i, &(d, e, dl, _, _)) in TLAP_TABLE.iter().enumerate() {
        let s = TruncatedLaplace::new(d, e, dl).unwrap();
        let r = TLapRef::new(d, e, dl);
        let xs = draw_keyed::<f32>(&s, 17 + i as u8, 99, N_FIT);
        // f32 outputs are B rounded to f32 at most.
        let b32 = f64::from(r.bound as f32);
        assert!(xs.iter().all(|x| x.abs() <= b32), "TLap({d},{e},{dl}) f32 outside [−B, B]");
        check_fit(&xs, &r.reference(&format!("TLap({d},{e},{dl})")), "TLap f32");
    }
}

/// The independent reference against docs/PAPERS.md: the T1-A table (relative 1e-6), Fact 3.5's
/// variance formula against direct integration, and the sampler's own `bound()`,
/// `variance()` and `cdf()` against the reference.
#[test]
fn truncated_laplace_closed_forms_agree() {
    for &(d, e, dl, b_table, var_table) in &TLAP_TABLE {
        let r = TLapRef::new(d, e, dl);
        let s = TruncatedLaplace::new(d, e, dl).unwrap();
        let rel = |a: f64, b: f64| ((a - b) / b).abs();
        assert!(rel(r.bound, b_table) < 1e-6, "B({d},{e},{dl}) = {}", r.bound);
        let var = r.abs_moment(2);
        assert!(rel(var, var_table) < 1e-6, "Var({d},{e},{dl}) = {var}");
        // Fact 3.5: (2Δ²/ε²)(1 − δ(t² + 2t)/(e^ε − 1)).
        let fact = 2.0 * r.b * r.b * (1.0 - dl * (r.t * r.t + 2.0 * r.t) / e.exp_m1());
        assert!(rel(var, fact) < 1e-10, "Fact 3.5 {fact} vs integral {var}");
        assert!(rel(s.bound(), r.bound) < 1e-13, "bound() = {}", s.bound());
        assert!(rel(s.variance(), var) < 1e-10, "variance() = {}", s.variance());
        for i in -1000..=1000 {
            let z = 1.05 * r.bound * f64::from(i) / 1000.0;
            let (got, want) = (s.cdf(z), r.cdf(z));
            assert!((got - want).abs() < 1e-13, "cdf({z}) = {got}, reference {want}");
        }
    }
}

/// docs/PAPERS.md P1-AC1: 1e6 samples all lie in [−B, B], |mean| < 5σ/1000 and the sample
/// variance is within 1 % of Fact 3.5 (σ/1000 is the standard error of the mean at 1e6,
/// and the variance's relative standard error is √((μ4/σ⁴ − 1)/n) ≤ 0.24 %).
#[test]
fn truncated_laplace_acceptance_ac1() {
    const N: usize = 1_000_000;
    for (i, &(d, e, dl, _, var_table)) in TLAP_TABLE[..2].iter().enumerate() {
        let s = TruncatedLaplace::new(d, e, dl).unwrap();
        let b = s.bound();
        for (prec, xs) in [
            ("f64", draw::<f64>(&s, 20 + i as u8, N)),
            ("f32", draw_keyed::<f32>(&s, 22 + i as u8, 5, N)),
        ] {
            let b = if prec == "f32" { f64::from(b as f32) } else { b };
            assert!(xs.iter().all(|x| x.abs() <= b), "TLap({d},{e},{dl}) {prec}: outside [−B, B]");
            let m = moments(&xs);
            let sigma = var_table.sqrt();
            assert!(m.mean.abs() < 5.0 * sigma / 1000.0, "{prec}: mean {}", m.mean);
            assert!((m.var / var_table - 1.0).abs() < 0.01, "{prec}: variance {}", m.var);
        }
    }
}

// ------------------------------------------------------------------------- power tests
//
// The KS test at ALPHA = 1e-6 rejects when D > D_crit = Q_K⁻¹(1e-6)/(√n + 0.12 + 0.11/√n)
// ≈ 2.6934/√n. Samples drawn from the sampler with scale 1.02·s, tested against the CDF of
// scale s, have D ≥ g − |F_n(x*) − F_alt(x*)|, where g = max_x |F_s(x) − F_1.02s(x)| is
// attained at x* and the second term is a binomial fluctuation of standard deviation
// √(p(1 − p)/n) with p = F_alt(x*). Requiring g·√n ≥ 2.6934 + 3.29·√(p(1 − p)) (3.29 =
// the one-sided 0.9995 normal quantile) gives power ≥ 0.9995; each test asserts its g.

/// Uniform: U(0,1] has no scale parameter; the alternative is 1.02·U, whose CDF
/// x/1.02 trails x by g = 1 − 1/1.02 = 0.01961 at x* = 1 (p = 0.980, √(p(1−p)) = 0.139):
/// n ≥ ((2.6934 + 3.29·0.139)/0.01961)² = 2.6e4. We use n = 1e5 (g√n = 6.20).
#[test]
fn power_uniform_scale_2_percent() {
    let n = 100_000;
    let g = max_cdf_gap(|x: f64| x.clamp(0.0, 1.0), |x: f64| (x / 1.02).clamp(0.0, 1.0), 0.0, 1.1);
    assert!((g - 0.019_61).abs() < 1e-4, "gap {g}");
    for (prec, xs) in [("f64", draw::<f64>(&Uniform, 30, n)), ("f32", draw::<f32>(&Uniform, 31, n))]
    {
        let scaled: Vec<f64> = xs.iter().map(|u| 1.02 * u).collect();
        check_rejects(&scaled, |x: f64| x.clamp(0.0, 1.0), &format!("Uniform {prec}"));
    }
}

/// Exponential: g = max_y e^{−y/1.02} − e^{−y} = 0.007285 at y* = ln 1.02/(1 − 1/1.02) =
/// 1.0099 (p = 0.628, √(p(1−p)) = 0.483): n ≥ ((2.6934 + 3.29·0.483)/0.007285)² = 3.46e5.
/// We use n = 6e5 (g√n = 5.64).
#[test]
fn power_exponential_rate_2_percent() {
    let n = 600_000;
    let rate = 2.5;
    let r = exponential_ref(rate);
    let g = max_cdf_gap(&r.cdf, exponential_ref(rate / 1.02).cdf, 0.0, 5.0);
    assert!((g - 0.007_285).abs() < 1e-5, "gap {g}");
    let alt = Exponential::new(rate / 1.02).unwrap();
    check_rejects(&draw::<f64>(&alt, 32, n), &r.cdf, "Exponential f64");
    check_rejects(&draw::<f32>(&alt, 33, n), &r.cdf, "Exponential f32");
}

/// Gaussian: g = max_z Φ(z) − Φ(z/1.02) = 0.004791 at z* = √(2 ln 1.02/(1 − 1/1.02²)) =
/// 1.0099 (p = Φ(z*/1.02) = 0.839, √(p(1−p)) = 0.368):
/// n ≥ ((2.6934 + 3.29·0.368)/0.004791)² = 6.6e5. We use n = 1e6 (g√n = 4.79).
#[test]
fn power_gaussian_sigma_2_percent() {
    let n = 1_000_000;
    let sigma = 1.3;
    let r = gaussian_ref(sigma);
    let g = max_cdf_gap(&r.cdf, gaussian_ref(1.02 * sigma).cdf, -8.0, 8.0);
    assert!((g - 0.004_791).abs() < 1e-5, "gap {g}");
    let alt = Gaussian::new(1.02 * sigma).unwrap();
    check_rejects(&draw::<f64>(&alt, 34, n), &r.cdf, "Gaussian f64");
    check_rejects(&draw::<f32>(&alt, 35, n), &r.cdf, "Gaussian f32");
}

/// Laplace: half the exponential gap, g = 0.003642 at |x*| = 1.0099·b (p = 0.814,
/// √(p(1−p)) = 0.389): n ≥ ((2.6934 + 3.29·0.389)/0.003642)² = 1.19e6.
/// We use n = 1.6e6 (g√n = 4.61).
#[test]
fn power_laplace_scale_2_percent() {
    let n = 1_600_000;
    let b = 0.7;
    let r = laplace_ref(b);
    let g = max_cdf_gap(&r.cdf, laplace_ref(1.02 * b).cdf, -6.0, 6.0);
    assert!((g - 0.003_642).abs() < 1e-5, "gap {g}");
    let alt = Laplace::new(1.02 * b).unwrap();
    check_rejects(&draw::<f64>(&alt, 36, n), &r.cdf, "Laplace f64");
    check_rejects(&draw::<f32>(&alt, 37, n), &r.cdf, "Laplace f32");
}

/// Truncated Laplace (1, 1, 0.01): TLap(1.02Δ, ε, δ) is 1.02·TLap(Δ, ε, δ) (b and B both
/// scale by 1.02, t does not), so g = 0.003642/m with m = 1 − e^{−4.4649} = 0.98849:
/// g = 0.003685 (p = 0.818, √(p(1−p)) = 0.386): n ≥ ((2.6934 + 3.29·0.386)/0.003685)²
/// = 1.16e6. We use n = 1.6e6 (g√n = 4.66).
#[test]
fn power_truncated_laplace_scale_2_percent() {
    let n = 1_600_000;
    let r = TLapRef::new(1.0, 1.0, 0.01);
    let ra = TLapRef::new(1.02, 1.0, 0.01);
    let g = max_cdf_gap(|z| r.cdf(z), |z| ra.cdf(z), -5.0, 5.0);
    assert!((g - 0.003_685).abs() < 1e-5, "gap {g}");
    let alt = TruncatedLaplace::new(1.02, 1.0, 0.01).unwrap();
    check_rejects(&draw::<f64>(&alt, 38, n), |z| r.cdf(z), "TLap f64");
    check_rejects(&draw::<f32>(&alt, 39, n), |z| r.cdf(z), "TLap f32");
}

// ------------------------------------------------------------------------ independence

/// Samples per independence test.
const N_INDEP: usize = 400_000;

/// The two outputs of one Box–Muller group (elements 2i and 2i + 1) are independent:
/// correlation of the values, of their squares and of their absolute values (all
/// asymptotically N(0, 1) under independence), and a 10×10 χ² grid of (Φ(x), Φ(y)).
#[test]
fn box_muller_pair_outputs_are_independent() {
    for (prec, xs) in [
        ("f64", draw::<f64>(&Gaussian::STANDARD, 40, N_INDEP)),
        ("f32", draw::<f32>(&Gaussian::STANDARD, 41, N_INDEP)),
    ] {
        let even: Vec<f64> = xs.iter().step_by(2).copied().collect();
        let odd: Vec<f64> = xs.iter().skip(1).step_by(2).copied().collect();
        let z = correlation_z(&even, &odd);
        assert!(z_accepts(z), "{prec}: pair correlation z = {z}");
        let sq = |v: &[f64]| v.iter().map(|x| x * x).collect::<Vec<_>>();
        let z = correlation_z(&sq(&even), &sq(&odd));
        assert!(z_accepts(z), "{prec}: pair correlation of squares z = {z}");
        let ab = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
        let z = correlation_z(&ab(&even), &ab(&odd));
        assert!(z_accepts(z), "{prec}: pair correlation of |x| z = {z}");
        let us: Vec<f64> = xs.iter().map(|&x| normal_cdf(x)).collect();
        pair_grid_test(&us, 0, &format!("Box–Muller pairs {prec}"));
    }
}

/// Consecutive elements are independent for every sampler (lag-1 correlation of values
/// and squares; pair grids at offsets 0 and 1, i.e. also across Gaussian groups).
#[test]
fn consecutive_elements_are_independent() {
    let tlap = TLapRef::new(1.0, 1.0, 0.01);
    let tl = TruncatedLaplace::new(1.0, 1.0, 0.01).unwrap();
    let e = Exponential::new(1.0).unwrap();
    let lap = Laplace::new(1.0).unwrap();
    let cases: Vec<(&str, Vec<f64>, Reference)> = vec![
        ("Uniform f64", draw::<f64>(&Uniform, 42, N_INDEP), uniform_ref()),
        ("Uniform f32", draw::<f32>(&Uniform, 43, N_INDEP), uniform_ref()),
        ("Exponential f64", draw::<f64>(&e, 44, N_INDEP), exponential_ref(1.0)),
        ("Exponential f32", draw::<f32>(&e, 45, N_INDEP), exponential_ref(1.0)),
        ("Gaussian f64", draw::<f64>(&Gaussian::STANDARD, 46, N_INDEP), gaussian_ref(1.0)),
        ("Gaussian f32", draw::<f32>(&Gaussian::STANDARD, 47, N_INDEP), gaussian_ref(1.0)),
        ("Laplace f64", draw::<f64>(&lap, 48, N_INDEP), laplace_ref(1.0)),
        ("Laplace f32", draw::<f32>(&lap, 49, N_INDEP), laplace_ref(1.0)),
        ("TLap f64", draw::<f64>(&tl, 50, N_INDEP), tlap.reference("TLap")),
        ("TLap f32", draw::<f32>(&tl, 51, N_INDEP), tlap.reference("TLap")),
    ];
    for (what, xs, r) in &cases {
        check_serial_independence(xs, &r.cdf, what);
    }
}

/// Laplace and truncated Laplace take the sign from a bit the magnitude does not use:
/// sign and magnitude are uncorrelated, and the sign is fair.
#[test]
fn sign_is_fair_and_independent_of_magnitude() {
    let lap = Laplace::new(1.0).unwrap();
    let tl = TruncatedLaplace::new(2.0, 0.5, 1e-6).unwrap();
    for (what, xs) in [
        ("Laplace f64", draw::<f64>(&lap, 52, N_INDEP)),
        ("Laplace f32", draw::<f32>(&lap, 53, N_INDEP)),
        ("TLap f64", draw::<f64>(&tl, 54, N_INDEP)),
        ("TLap f32", draw::<f32>(&tl, 55, N_INDEP)),
    ] {
        let sign: Vec<f64> = xs.iter().map(|&x| if x < 0.0 { 1.0 } else { 0.0 }).collect();
        let mag: Vec<f64> = xs.iter().map(|x| x.abs()).collect();
        let neg = sign.iter().filter(|&&s| s == 1.0).count() as u64;
        let z = binomial_z(neg, xs.len() as u64, 0.5);
        assert!(z_accepts(z), "{what}: {neg} negative of {}, z = {z}", xs.len());
        let z = correlation_z(&sign, &mag);
        assert!(z_accepts(z), "{what}: sign–magnitude correlation z = {z}");
    }
}

// ----------------------------------------------------------------------- stream layout

fn bits<T: NoiseFloat>(x: T) -> u64 {
    x.to_f64().to_bits()
}

/// The four entry points agree: `sample_at(i)` = element i of `fill_keyed(first = 0)`;
/// `fill_keyed` from any `first` (odd ones split Gaussian pairs) is the matching slice;
/// `fill` on `ChaCha20Rng::from_seed(key)` + `set_stream(id)` equals `fill_keyed(0)`;
/// repeated `sample` yields the first element of consecutive groups.
fn check_layout<T: NoiseFloat>(s: &impl FixedWordSampler, what: &str) {
    const N: usize = 1_000;
    let key = [0xa5; 32];
    let stream_id = 0x0123_4567_89ab_cdef;
    let ks = KeyedStream::new(&NoiseKey::for_replay(key), stream_id);
    let mut all = vec![T::from_f64(0.0); N];
    s.fill_keyed(&ks, 0, &mut all).unwrap();
    let distinct = {
        let mut b: Vec<u64> = all.iter().map(|&x| bits(x)).collect();
        b.sort_unstable();
        b.dedup();
        b.len()
    };
    assert!(distinct > N * 9 / 10, "{what}: only {distinct} distinct values of {N}");

    for (i, &x) in all.iter().enumerate() {
        let y = s.sample_at::<T>(&ks, i as u64).unwrap();
        assert_eq!(bits(x), bits(y), "{what}: sample_at({i}) differs from fill_keyed");
    }
    for (first, len) in
        [(0, 1), (1, 1), (1, 2), (1, 100), (3, 64), (7, 301), (63, 129), (127, 513), (998, 2)]
    {
        let mut part = vec![T::from_f64(0.0); len];
        s.fill_keyed(&ks, first as u64, &mut part).unwrap();
        for (j, (&a, &b)) in part.iter().zip(&all[first..first + len]).enumerate() {
            assert_eq!(bits(a), bits(b), "{what}: fill_keyed(first = {first}) element {j}");
        }
    }
    let mut rng = ChaCha20Rng::from_seed(key);
    rng.set_stream(stream_id);
    let mut seq = vec![T::from_f64(0.0); N];
    s.fill(&mut rng, &mut seq);
    for (i, (&a, &b)) in seq.iter().zip(&all).enumerate() {
        assert_eq!(bits(a), bits(b), "{what}: fill on ChaCha20Rng element {i}");
    }
    let per_group = s.layout::<T>().elements as usize;
    let mut rng = ChaCha20Rng::from_seed(key);
    rng.set_stream(stream_id);
    for g in 0..N / per_group {
        let x: T = s.sample(&mut rng);
        assert_eq!(bits(x), bits(all[g * per_group]), "{what}: sample() call {g}");
    }
    // Far into the stream (past 2^32 blocks): sample_at agrees with a fill from an odd start.
    let far = (1u64 << 40) + 1;
    let mut part = vec![T::from_f64(0.0); 5];
    s.fill_keyed(&ks, far, &mut part).unwrap();
    for (j, &a) in part.iter().enumerate() {
        let b = s.sample_at::<T>(&ks, far + j as u64).unwrap();
        assert_eq!(bits(a), bits(b), "{what}: far element {}", far + j as u64);
    }
}

#[test]
fn stream_layout_holds_for_every_sampler() {
    let e = Exponential::new(0.5).unwrap();
    let g = Gaussian::new(2.0).unwrap();
    let l = Laplace::new(1.5).unwrap();
    let t = TruncatedLaplace::new(1.0, 1.0, 0.01).unwrap();
    check_layout::<f64>(&Uniform, "Uniform f64");
    check_layout::<f32>(&Uniform, "Uniform f32");
    check_layout::<f64>(&e, "Exponential f64");
    check_layout::<f32>(&e, "Exponential f32");
    check_layout::<f64>(&g, "Gaussian f64");
    check_layout::<f32>(&g, "Gaussian f32");
    check_layout::<f64>(&l, "Laplace f64");
    check_layout::<f32>(&l, "Laplace f32");
    check_layout::<f64>(&t, "TLap f64");
    check_layout::<f32>(&t, "TLap f32");
}

/// Different streams of one key, and different keys, give unrelated draws (a layout bug
/// that ignored the stream id or key would make these equal or correlated).
#[test]
fn streams_and_keys_are_distinct() {
    let n = 100_000;
    let a = draw_keyed::<f64>(&Gaussian::STANDARD, 60, 0, n);
    let b = draw_keyed::<f64>(&Gaussian::STANDARD, 60, 1, n);
    let c = draw_keyed::<f64>(&Gaussian::STANDARD, 61, 0, n);
    for (x, y, what) in [(&a, &b, "streams 0 and 1"), (&a, &c, "keys 60 and 61")] {
        assert!(x.iter().zip(y.iter()).filter(|(p, q)| p == q).count() < 10, "{what} equal");
        let z = correlation_z(x, y);
        assert!(z_accepts(z), "{what}: correlation z = {z}");
    }
}

/// A strided `[batch, heads, seq, dim]` fill puts logical element `((b·H + h)·S + s)·D + d`
/// of the draw at `(b, h, s, d)`, whatever the memory layout (docs/RANDOMNESS.md §2).
#[test]
fn batched_fill_follows_logical_indices_not_memory_offsets() {
    use dpattn::{BatchedMut, Layout4};
    let shape = [2, 3, 5, 7];
    // bshd with padding: a row of 7 is stored in 8 slots, heads interleaved inside a position.
    let strides = [5 * 3 * 8, 8, 3 * 8, 1];
    let layout = Layout4::new(shape, strides).unwrap();
    let stream = KeyedStream::new(&NoiseKey::for_replay([77; 32]), 5);
    let mut buf = vec![f64::NAN; layout.required_len()];
    let g = Gaussian::new(1.5).unwrap();
    g.fill_keyed_batched(&stream, BatchedMut::new(&mut buf, layout).unwrap()).unwrap();
    let mut logical = 0u64;
    for b in 0..2 {
        for h in 0..3 {
            for s in 0..5 {
                for d in 0..7 {
                    let want: f64 = g.sample_at(&stream, logical).unwrap();
                    assert_eq!(buf[layout.offset(b, h, s, d)].to_bits(), want.to_bits());
                    assert_eq!(layout.logical_index(b, h, s, d), logical);
                    logical += 1;
                }
            }
        }
    }
    // Padding slots are untouched.
    assert_eq!(buf.iter().filter(|x| x.is_nan()).count(), buf.len() - 210);
}

// ------------------------------------------------------------------ rounding of the bound

/// Issue 28: the bound `B = Δ·t/ε`, `t = ln(1 + (e^ε − 1)/(2δ))`, was computed to nearest,
/// so it could be an ulp or two below the exact value (a δ slightly above the target). It
/// is rounded up now: never below the exact value, at most 4.5e-15 above (module docs).
/// The table is the exact bound rounded up to the next `f64`, by 60-digit mpmath:
///
/// ```text
/// from mpmath import mp, mpf, expm1, log1p; import math; mp.dps = 60
/// def up(x):
///     y = float(x)
///     return y if mpf(y) >= x else math.nextafter(y, math.inf)
/// # 24 (Δ, ε, δ) log-uniform in [1e-3, 1e3] × [1e-9, 1e3] × [1e-300, 0.5], and edge cases
/// for s, e, d in P: print((s, e, d, up(mpf(s)/mpf(e) * log1p(expm1(mpf(e))/(2*mpf(d))))))
/// ```
#[test]
fn truncated_laplace_bound_is_never_below_the_exact_value() {
    for (sens, eps, delta, b_up) in TLAP_BOUND_EXACT_UP {
        let b = TruncatedLaplace::new(sens, eps, delta).unwrap().bound();
        let at = format!("TLap({sens}, {eps}, {delta})");
        assert!(b >= b_up, "{at}: B = {b:e} is below the exact {b_up:e}");
        assert!(b <= b_up * (1.0 + 4.5e-15), "{at}: B = {b:e} vs {b_up:e}");
    }
}

const TLAP_BOUND_EXACT_UP: [(f64, f64, f64, f64); 34] = [
    (922.2497379212446, 2.264085895879818e-08, 2.254969301246728e-44, 3348484804791.8926),
    (3.991789414650276, 0.43026101555977414, 9.06042647615254e-160, 3385.359163692369),
    (2.891179127523044, 1.5133527772717179e-05, 1.763916634187607e-185, 79019680.34081809),
    (778.1656074651819, 320.2191075045392, 1.0480551430888732e-78, 1212.817714283098),
    (0.28577785008096507, 5.216200056024245, 3.1722482521783085e-269, 34.11882220351772),
    (0.13813392713174294, 238.71759578715012, 3.586179631433127e-169, 0.3621678911954284),
    (3.6821829080428343, 0.00010822770125645741, 2.0367184831855785e-207, 15857892.700796409),
    (66.26714596737862, 0.010856853257998962, 4.136195932359444e-118, 1617939.9549420355),
    (62.011382670958895, 0.013215726755721295, 1.801346641082068e-164, 1745619.637554523),
    (0.005577201698140887, 7.228189666810154e-05, 1.2377369854763727e-19, 2569.9966246697045),
    (0.6672011992809748, 4.35873179806865e-09, 1.9100262963782067e-45, 12708826556.573153),
    (851.3918395431667, 2.118483661798398, 6.960475199943117e-201, 185742.94740577345),
    (0.10566290649213197, 2.322243752029615e-08, 5.013780862141753e-249, 2518263369.6535225),
    (11.912983101877856, 7.103382879586701e-07, 4.1493042313827096e-08, 37861212.56917891),
    (0.0052895307731774255, 0.37986422928298336, 1.0345583891635863e-25, 0.7807005028874169),
    (0.01023231414844422, 3.4569839346415316e-08, 1.0166671850610104e-142, 91483624.6911005),
    (6.987425603042679, 2.4801299560733424e-07, 9.559140796985671e-39, 2018369591.0958595),
    (0.0016534884601708464, 336.01007716760205, 1.0399912808957723e-182, 0.003712109058579691),
    (0.16441308436218222, 4.30680098682764e-05, 9.224270323380902e-162, 1374503.0388799252),
    (0.13038233604917526, 62.43173732849152, 8.347848600768341e-252, 1.3362993254590252),
    (419.63032141824095, 0.007474041465426492, 3.6835095404710973e-298, 38138242.45692279),
    (22.91570099157958, 1.0256524900012386e-06, 9.042702218293774e-265, 13260303317.370396),
    (0.009486786605398874, 1.9657332672623327, 6.462691071560458e-86, 0.9520793428505416),
    (0.01259319754138315, 1.6089039711540614e-07, 2.3242750709096118e-281, 49299347.7572412),
    (1.0, 1.0, 0.01, 4.4649201758912085),
    (2.0, 0.5, 1e-06, 50.758457323282215),
    (1.0, 0.001, 0.001, 405.6318164476709),
    (1.0, 1.0, 0.5, 1.0),
    (3.0, 1e-07, 1e-09, 117954770.45231803),
    (1.0, 1e-09, 0.5, 1.0),
    (1.0, 1.0000000000000002, 1e-05, 11.361114778489599),
    (0.7, 800.0, 1e-05, 0.709467305998859),
    (5.0, 30.0, 0.25, 5.1155245300933165),
    (1.0, 0.7, 0.2, 1.8036262791699926),
];
