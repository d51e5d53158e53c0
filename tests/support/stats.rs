//! Statistical test toolkit of the integration tests (f64 throughout, no dependencies).
//!
//! Every test in this crate runs at the single significance level [`ALPHA`] = 1e-6, so a
//! correct sampler fails a given test with probability 1e-6 (and with fixed seeds, never).
//!
//! # API
//!
//! * [`Outcome`] `{ statistic, p_value, df }`, with [`Outcome::accepts`] (`p ≥ ALPHA`) and
//!   [`Outcome::rejects`].
//! * [`ks_test`]`(samples, cdf)`: one-sample two-sided Kolmogorov–Smirnov test against a
//!   continuous CDF. `statistic` = D = sup |F_n − F|, `df` = 0, p-value from the asymptotic
//!   Kolmogorov distribution with Stephens' correction, p = Q((√n + 0.12 + 0.11/√n)·D).
//!   Ties in the samples (e.g. `f32` outputs) are handled exactly.
//! * [`kolmogorov_sf`]`(x)` = P(K > x) (alternating series; Jacobi theta form below 1.18),
//!   [`kolmogorov_isf`]`(p)` its inverse, [`ks_critical`]`(n)`: the D at which
//!   [`ks_test`] on `n` samples has p = ALPHA (≈ 2.6934/√n).
//! * [`chi_square_gof`]`(observed, expected_probs)`: Pearson goodness of fit. The bins
//!   must cover the whole support: Σ `expected_probs` = 1 within 1e-9, else it panics;
//!   n = Σ `observed`. Adjacent bins are pooled left to right until each pooled bin has
//!   expected count ≥ 5 (a short final group joins the one before it), so sparse tails
//!   at either end are pooled inward; `df` = pooled bins − 1. An observation in a bin of
//!   probability exactly 0 is an outright rejection (statistic ∞, p = 0).
//!   [`chi_square_gof_open`]`(observed, probs, n)` is the same for bins that do not cover
//!   the support (Σ probs ≤ 1): it adds the remainder bin, observed n − Σ observed.
//! * [`chi_square_sf`]`(stat, df)` = Q(df/2, stat/2) (regularized upper incomplete
//!   gamma; series / Lentz continued fraction), also [`gamma_q`], [`gamma_p`], [`ln_gamma`].
//! * [`Moments`] `{ n, mean, var, m4 }` from [`moments`] (`var` unbiased, `m4` the central
//!   4th moment with divisor n); [`mean_z`]`(m, μ, σ²)` = (mean − μ)/√(σ²/n);
//!   [`var_z`]`(m, σ², μ4)` = (s² − σ²)/√((μ4 − σ⁴)/n).
//! * [`z_critical`]`()`: two-sided normal critical value at ALPHA (≈ 4.8916);
//!   [`z_accepts`]`(z)` is |z| < z_critical; [`normal_two_sided_p`]`(z)`.
//! * [`binomial_z`]`(k, n, p)` = (k − np)/√(np(1 − p)).
//! * [`correlation`] (Pearson r), [`correlation_z`]`(xs, ys)` = r·√n, asymptotically N(0, 1)
//!   when the two sequences are independent with finite variances;
//!   [`lag_correlation_z`]`(xs, lag)` for consecutive elements of one sequence.
//! * [`erfc`], [`normal_cdf`], [`normal_sf`]: independent of every sampler in the crate
//!   (positive-term series below 2.5, continued fraction above), relative error ~1e-13.

use core::f64::consts::{PI, SQRT_2};

/// Significance level of every statistical test.
pub const ALPHA: f64 = 1e-6;

/// Result of a hypothesis test.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The test statistic (KS: D; χ²: Pearson's X²).
    pub statistic: f64,
    /// P-value of the statistic under the null hypothesis.
    pub p_value: f64,
    /// Degrees of freedom (0 for the KS test).
    pub df: usize,
}

impl Outcome {
    /// The null hypothesis survives at [`ALPHA`]: `p_value >= ALPHA`.
    pub fn accepts(&self) -> bool {
        self.p_value >= ALPHA
    }

    /// The null hypothesis is rejected at [`ALPHA`]: `p_value < ALPHA` (or NaN).
    pub fn rejects(&self) -> bool {
        !self.accepts()
    }
}

// ---------------------------------------------------------------------------------------
// Kolmogorov–Smirnov

/// One-sample two-sided Kolmogorov–Smirnov test of `samples` against the continuous
/// `cdf`. `statistic` is D = sup_x |F_n(x) − F(x)|; `df` is 0.
///
/// Panics on an empty sample, a NaN sample, or a CDF value outside [0, 1].
pub fn ks_test(samples: &[f64], cdf: impl Fn(f64) -> f64) -> Outcome {
    let n = samples.len();
    assert!(n > 0, "ks_test: no samples");
    assert!(samples.iter().all(|x| !x.is_nan()), "ks_test: NaN sample");
    let mut xs = samples.to_vec();
    xs.sort_unstable_by(f64::total_cmp);
    let nf = n as f64;
    let mut d: f64 = 0.0;
    for (i, &x) in xs.iter().enumerate() {
        let f = cdf(x);
        assert!((0.0..=1.0).contains(&f), "ks_test: cdf({x}) = {f} is not in [0, 1]");
        // With ties, the first of a run gives F − F_n(x−) and the last F_n(x) − F.
        d = d.max(f - i as f64 / nf).max((i + 1) as f64 / nf - f);
    }
    let sn = nf.sqrt();
    let p_value = kolmogorov_sf((sn + 0.12 + 0.11 / sn) * d);
    Outcome { statistic: d, p_value, df: 0 }
}

/// P(K > x) for the Kolmogorov distribution: 2 Σ_{k≥1} (−1)^{k−1} exp(−2k²x²).
/// Below x = 1.18, where that series converges slowly, the equivalent Jacobi theta form
/// 1 − (√(2π)/x) Σ_{k≥1} exp(−(2k−1)²π²/(8x²)) is summed instead.
pub fn kolmogorov_sf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x <= 0.0 {
        return 1.0;
    }
    if x < 1.18 {
        let w = -PI * PI / (8.0 * x * x);
        let mut s = 0.0;
        for k in 1..=20u32 {
            let j = f64::from(2 * k - 1);
            s += (j * j * w).exp();
        }
        (1.0 - (2.0 * PI).sqrt() / x * s).clamp(0.0, 1.0)
    } else {
        let mut s = 0.0;
        let mut sign = 1.0;
        for k in 1..=100u32 {
            let kf = f64::from(k);
            let term = (-2.0 * kf * kf * x * x).exp();
            s += sign * term;
            if term < 1e-300 || term < s.abs() * 1e-17 {
                break;
            }
            sign = -sign;
        }
        (2.0 * s).clamp(0.0, 1.0)
    }
}

/// The x with [`kolmogorov_sf`]`(x) = p`, for 0 < p < 1 (bisection).
pub fn kolmogorov_isf(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "kolmogorov_isf: p = {p} is not in (0, 1)");
    bisect_decreasing(kolmogorov_sf, p, 0.0, 20.0)
}

/// The KS distance D at which [`ks_test`] on `n` samples has p-value exactly [`ALPHA`]:
/// Q⁻¹(ALPHA)/(√n + 0.12 + 0.11/√n) ≈ 2.6934/√n. Larger D rejects.
pub fn ks_critical(n: usize) -> f64 {
    let sn = (n as f64).sqrt();
    kolmogorov_isf(ALPHA) / (sn + 0.12 + 0.11 / sn)
}

// ---------------------------------------------------------------------------------------
// Chi-square

/// Pearson χ² goodness of fit of the counts `observed` against the cell probabilities
/// `expected_probs` (same length, Σ = 1 within 1e-9). Bins are pooled left to right
/// until each pooled bin expects ≥ 5 observations (a short final group joins the
/// previous one); `df` = pooled bins − 1. An observation in a bin of probability 0
/// rejects outright. Panics on malformed input or fewer than two pooled bins.
pub fn chi_square_gof(observed: &[u64], expected_probs: &[f64]) -> Outcome {
    assert_eq!(
        observed.len(),
        expected_probs.len(),
        "chi_square_gof: {} observed bins but {} probabilities",
        observed.len(),
        expected_probs.len()
    );
    assert!(
        expected_probs.iter().all(|&p| (0.0..=1.0).contains(&p)),
        "chi_square_gof: a probability is not in [0, 1]"
    );
    let total: f64 = expected_probs.iter().sum();
    assert!(
        (total - 1.0).abs() <= 1e-9,
        "chi_square_gof: probabilities sum to {total}, not 1 (use chi_square_gof_open for \
         bins that do not cover the support)"
    );
    let n: u64 = observed.iter().sum();
    assert!(n > 0, "chi_square_gof: no observations");
    let nf = n as f64;

    if observed.iter().zip(expected_probs).any(|(&o, &p)| p == 0.0 && o > 0) {
        let df = pooled_bins(observed, expected_probs, nf).len().saturating_sub(1);
        return Outcome { statistic: f64::INFINITY, p_value: 0.0, df };
    }
    let pooled = pooled_bins(observed, expected_probs, nf);
    assert!(
        pooled.len() >= 2,
        "chi_square_gof: fewer than two bins with expected count >= 5 (n = {n})"
    );
    let statistic: f64 = pooled
        .iter()
        .map(|&(o, e)| {
            let d = o - e;
            d * d / e
        })
        .sum();
    let df = pooled.len() - 1;
    Outcome { statistic, p_value: chi_square_sf(statistic, df as f64), df }
}

/// [`chi_square_gof`] for bins that need not cover the support: Σ `probs` ≤ 1 (within
/// 1e-9), `n` the total number of draws (≥ Σ `observed`). The remainder bin, with
/// probability 1 − Σ `probs` and count n − Σ `observed`, is appended at the end.
pub fn chi_square_gof_open(observed: &[u64], probs: &[f64], n: u64) -> Outcome {
    let s: u64 = observed.iter().sum();
    assert!(s <= n, "chi_square_gof_open: {s} observations in the bins but n = {n}");
    let total: f64 = probs.iter().sum();
    assert!(total <= 1.0 + 1e-9, "chi_square_gof_open: probabilities sum to {total} > 1");
    let mut obs = observed.to_vec();
    let mut ps = probs.to_vec();
    obs.push(n - s);
    // Tiny negative remainders from rounding are clamped; the sum check then holds.
    ps.push((1.0 - total).max(0.0));
    let sum: f64 = ps.iter().sum();
    if (sum - 1.0).abs() > 1e-9 {
        // Only possible when total slightly exceeded 1: rescale the rounding error away.
        ps.iter_mut().for_each(|p| *p /= sum);
    }
    chi_square_gof(&obs, &ps)
}

/// Pools (observed, expected count) left to right to expected counts ≥ 5.
fn pooled_bins(observed: &[u64], probs: &[f64], n: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let (mut o, mut e) = (0.0, 0.0);
    for (&ob, &p) in observed.iter().zip(probs) {
        o += ob as f64;
        e += p * n;
        if e >= 5.0 {
            out.push((o, e));
            (o, e) = (0.0, 0.0);
        }
    }
    if o > 0.0 || e > 0.0 {
        match out.last_mut() {
            Some(last) => {
                last.0 += o;
                last.1 += e;
            }
            None => out.push((o, e)),
        }
    }
    out
}

/// Survival function of the χ² distribution with `df` degrees of freedom:
/// Q(df/2, stat/2), the regularized upper incomplete gamma function.
pub fn chi_square_sf(stat: f64, df: f64) -> f64 {
    assert!(df > 0.0, "chi_square_sf: df = {df} must be positive");
    if stat.is_nan() {
        return f64::NAN;
    }
    if stat <= 0.0 {
        return 1.0;
    }
    gamma_q(0.5 * df, 0.5 * stat)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    assert!(x > 0.0, "ln_gamma: x = {x} must be positive");
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1 − x) = π / sin(πx).
        return (PI / (PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized lower incomplete gamma P(a, x) = γ(a, x)/Γ(a).
pub fn gamma_p(a: f64, x: f64) -> f64 {
    assert!(a > 0.0 && x >= 0.0, "gamma_p: need a > 0, x >= 0 (a = {a}, x = {x})");
    if x == 0.0 {
        0.0
    } else if x < a + 1.0 {
        gamma_series(a, x)
    } else {
        1.0 - gamma_cont_frac(a, x)
    }
}

/// Regularized upper incomplete gamma Q(a, x) = Γ(a, x)/Γ(a) = 1 − P(a, x).
pub fn gamma_q(a: f64, x: f64) -> f64 {
    assert!(a > 0.0 && x >= 0.0, "gamma_q: need a > 0, x >= 0 (a = {a}, x = {x})");
    if x == 0.0 {
        1.0
    } else if x.is_infinite() {
        0.0
    } else if x < a + 1.0 {
        1.0 - gamma_series(a, x)
    } else {
        gamma_cont_frac(a, x)
    }
}

/// P(a, x) by its power series (x < a + 1).
fn gamma_series(a: f64, x: f64) -> f64 {
    let mut ap = a;
    let mut del = 1.0 / a;
    let mut sum = del;
    for _ in 0..10_000 {
        ap += 1.0;
        del *= x / ap;
        sum += del;
        if del.abs() < sum.abs() * 1e-17 {
            break;
        }
    }
    (sum.ln() - x + a * x.ln() - ln_gamma(a)).exp()
}

/// Q(a, x) by its continued fraction, modified Lentz (x ≥ a + 1).
fn gamma_cont_frac(a: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -f64::from(i) * (f64::from(i) - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (h.ln() - x + a * x.ln() - ln_gamma(a)).exp()
}

// ---------------------------------------------------------------------------------------
// Moments and z-tests

/// Sample moments.
#[derive(Debug, Clone, Copy)]
pub struct Moments {
    /// Number of samples.
    pub n: usize,
    /// Sample mean.
    pub mean: f64,
    /// Unbiased sample variance s² (divisor n − 1).
    pub var: f64,
    /// Central 4th moment (divisor n).
    pub m4: f64,
}

/// Mean, unbiased variance and central 4th moment of `xs` (two passes; n ≥ 2).
pub fn moments(xs: &[f64]) -> Moments {
    let n = xs.len();
    assert!(n >= 2, "moments: need at least two samples");
    let nf = n as f64;
    let mean = xs.iter().sum::<f64>() / nf;
    let (mut s2, mut s4) = (0.0, 0.0);
    for &x in xs {
        let d = x - mean;
        let d2 = d * d;
        s2 += d2;
        s4 += d2 * d2;
    }
    Moments { n, mean, var: s2 / (nf - 1.0), m4: s4 / nf }
}

/// z-score of the sample mean: (mean − μ)/√(σ²/n).
pub fn mean_z(m: &Moments, true_mean: f64, true_var: f64) -> f64 {
    (m.mean - true_mean) / (true_var / m.n as f64).sqrt()
}

/// z-score of the sample variance: (s² − σ²)/√((μ4 − σ⁴)/n).
pub fn var_z(m: &Moments, true_var: f64, true_m4: f64) -> f64 {
    let v = true_m4 - true_var * true_var;
    assert!(v > 0.0, "var_z: μ4 − σ⁴ = {v} must be positive");
    (m.var - true_var) / (v / m.n as f64).sqrt()
}

/// Two-sided standard normal critical value at [`ALPHA`]: the z with
/// P(|Z| > z) = ALPHA (≈ 4.8916).
pub fn z_critical() -> f64 {
    bisect_decreasing(normal_two_sided_p, ALPHA, 0.0, 40.0)
}

/// |z| is below [`z_critical`] (the two-sided z-test accepts).
pub fn z_accepts(z: f64) -> bool {
    z.abs() < z_critical()
}

/// P(|Z| > |z|) for a standard normal Z.
pub fn normal_two_sided_p(z: f64) -> f64 {
    erfc(z.abs() / SQRT_2)
}

/// z-score of a binomial count: (k − np)/√(np(1 − p)).
pub fn binomial_z(successes: u64, n: u64, p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "binomial_z: p = {p} is not in (0, 1)");
    let nf = n as f64;
    (successes as f64 - nf * p) / (nf * p * (1.0 - p)).sqrt()
}

/// Pearson correlation coefficient of two equally long sequences.
pub fn correlation(xs: &[f64], ys: &[f64]) -> f64 {
    assert_eq!(xs.len(), ys.len(), "correlation: lengths differ");
    assert!(xs.len() >= 2, "correlation: need at least two pairs");
    let nf = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / nf;
    let my = ys.iter().sum::<f64>() / nf;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&x, &y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mx, y - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    sxy / (sxx * syy).sqrt()
}

/// r·√n for the Pearson correlation r of `xs` and `ys`: asymptotically N(0, 1) when the
/// sequences are independent (finite variances suffice).
pub fn correlation_z(xs: &[f64], ys: &[f64]) -> f64 {
    correlation(xs, ys) * (xs.len() as f64).sqrt()
}

/// [`correlation_z`] of `xs[..n − lag]` against `xs[lag..]`.
pub fn lag_correlation_z(xs: &[f64], lag: usize) -> f64 {
    assert!(lag > 0 && lag + 2 <= xs.len(), "lag_correlation_z: bad lag {lag}");
    correlation_z(&xs[..xs.len() - lag], &xs[lag..])
}

// ---------------------------------------------------------------------------------------
// Normal distribution

/// Complementary error function. Below 2.5: 1 − erf with erf summed by the all-positive
/// series erf(x) = (2/√π) e^{−x²} Σ 2ⁿx^{2n+1}/(1·3···(2n+1)); above: the continued
/// fraction erfc(x) = e^{−x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.5 {
        let x2 = x * x;
        let mut term = x;
        let mut sum = x;
        let mut k = 0.0;
        loop {
            k += 1.0;
            term *= 2.0 * x2 / (2.0 * k + 1.0);
            sum += term;
            if term <= sum * 1e-17 {
                break;
            }
        }
        1.0 - 2.0 / PI.sqrt() * (-x2).exp() * sum
    } else if x > 27.5 {
        0.0
    } else {
        let mut f = x;
        for k in (1..=300).rev() {
            f = x + (f64::from(k) * 0.5) / f;
        }
        (-x * x).exp() / (PI.sqrt() * f)
    }
}

/// Standard normal CDF Φ(x).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / SQRT_2)
}

/// Standard normal survival function 1 − Φ(x), accurate in the upper tail.
pub fn normal_sf(x: f64) -> f64 {
    0.5 * erfc(x / SQRT_2)
}

/// Solves f(x) = y for a decreasing f on [lo, hi] by bisection to full precision.
fn bisect_decreasing(f: impl Fn(f64) -> f64, y: f64, mut lo: f64, mut hi: f64) -> f64 {
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if f(mid) > y {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}
