//! Refuters and audit helpers for the shuffled Gaussian mechanism (`docs/PAPERS.md` §2.6,
//! T2-C, T2-I, P2-16).
//!
//! The shuffled Gaussian mechanism releases `M(y) = P(y) + z`, with `P` uniform over the
//! symmetric group `S_d` acting on the coordinates of `y ∈ ℝ^d` and `z ~ N(0, σ²I)`. Every
//! routine here computes a **lower bound** on its true `δ(ε)` for a concrete neighbouring
//! pair (or the exact value, for `d = 2`). An accountant that claims a smaller `δ(ε)` for
//! that pair is contradicted; no routine here can certify privacy.
//!
//! * [`max_stat_lower_bound`]: closed form for any `d` through the permutation-invariant
//!   event `{max_i y_i > t}`; pairs from [`MeanPair::paper_worst_case`] (the paper's
//!   Lemma 2 pair, P2-3) and [`MeanPair::feasible_point_mass`].
//! * [`shuffled_gaussian_delta_d2`]: the exact `δ` of the paper's pair at `d = 2`, a 1-D
//!   mixture pair integrated in closed form with `Φ`.
//! * [`monte_carlo_delta`]: the Monte-Carlo privacy-loss estimator of §2.6 with the exact
//!   log-likelihood ratio, drawing from a keyed noise stream.
//! * [`audit_epsilon`] (Eq. 45) and [`audit_epsilon_lower_bound`]: ε from the error rates
//!   of a membership attack, with Clopper–Pearson bounds ([`clopper_pearson_upper`]).
//!   Audits give **lower** bounds on ε; they can never validate an upper-bound accountant
//!   (P2-16).
//!
//! All σ here are **absolute** noise standard deviations (noise multiplier × clipping norm).

use dpattn_core::calibration::normal::{log_normal_cdf, normal_cdf, normal_sf};
use dpattn_core::error::{nonneg_finite, positive_finite, rate};
use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream};
use dpattn_core::{Error, Result};

fn check_delta(delta: f64) -> Result<f64> {
    if (0.0..1.0).contains(&delta) {
        Ok(delta)
    } else {
        Err(Error::OutOfRange { name: "delta", value: delta, allowed: "[0, 1)" })
    }
}

fn check_confidence(confidence: f64) -> Result<f64> {
    if confidence > 0.0 && confidence < 1.0 {
        Ok(confidence)
    } else {
        Err(Error::OutOfRange { name: "confidence", value: confidence, allowed: "(0, 1)" })
    }
}

fn check_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() { Ok(x) } else { Err(Error::OutOfRange { name, value: x, allowed: "finite" }) }
}

/// Eq. 45 without argument checks; `α = 0` or `β = 0` give `+∞` when the matching
/// numerator is positive (no finite ε satisfies `1 − β − δ ≤ e^ε · 0`).
fn eq45(alpha: f64, beta: f64, delta: f64) -> f64 {
    let term = |num: f64, den: f64| {
        if num <= 0.0 {
            0.0
        } else if den <= 0.0 {
            f64::INFINITY
        } else {
            libm::log(num) - libm::log(den)
        }
    };
    term(1.0 - alpha - delta, beta).max(term(1.0 - beta - delta, alpha)).max(0.0)
}

/// The audit ε of the paper's Eq. 45 from an attack's type-I rate `α` and type-II rate
/// `β`: `max{ln((1−α−δ)/β), ln((1−β−δ)/α), 0}` (a term with a non-positive numerator
/// counts as 0).
///
/// An `(ε, δ)`-DP mechanism forces `α + e^ε β ≥ 1 − δ` and `β + e^ε α ≥ 1 − δ` on every
/// test, so this is a lower bound on ε **if** `α`, `β` are the attack's true error rates.
/// With estimated rates use [`audit_epsilon_lower_bound`].
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::audit_epsilon;
/// // docs/PAPERS.md T2-C: (α, β, δ) = (0.1, 0.3, 1e-5) gives 1.9458959.
/// assert!((audit_epsilon(0.1, 0.3, 1e-5)? - 1.9458959).abs() < 1e-7);
/// assert_eq!(audit_epsilon(0.5, 0.5, 0.0)?, 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `α, β ∈ (0, 1]` and `δ ∈ [0, 1)`.
pub fn audit_epsilon(alpha: f64, beta: f64, delta: f64) -> Result<f64> {
    let alpha = rate("alpha", alpha)?;
    let beta = rate("beta", beta)?;
    Ok(eq45(alpha, beta, check_delta(delta)?))
}

/// Modified Lentz evaluation of the continued fraction of `I_x(a, b)` (converges fast for
/// `x < (a + 1) / (a + b + 2)`).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const MAX_ITER: u32 = 1 << 20;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=MAX_ITER {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / guard(1.0 + aa * d);
        c = guard(1.0 + aa / c);
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() <= 2.0 * f64::EPSILON {
            break;
        }
    }
    h
}

/// `ln(1/B(a, b)) = ln Γ(a+b) − ln Γ(a) − ln Γ(b)` for positive integers `a`, `b`. With
/// `m = min(a, b) ≤ 10⁴` it is summed as `ln M + Σ_{j<m} ln(1 + M/j)` (all terms
/// positive, so relative accuracy ≈1e-16 however large `M = max(a, b)` is, where the
/// `lgamma` difference would lose `1e-16 · ln Γ(a+b)` absolutely); beyond, `lgamma`.
fn ln_inv_beta_int(a: f64, b: f64) -> f64 {
    let (m, big) = if a <= b { (a, b) } else { (b, a) };
    if m > 1e4 {
        return libm::lgamma(a + b) - libm::lgamma(a) - libm::lgamma(b);
    }
    let mut acc = libm::log(big);
    let mut j = 1.0;
    while j < m {
        acc += libm::log1p(big / j);
        j += 1.0;
    }
    acc
}

/// The regularized incomplete beta function and its complement, `(I_x(a, b), 1 − I_x(a, b))`,
/// each computed directly where it is the smaller one (relative accuracy in both tails).
fn beta_reg(a: f64, b: f64, x: f64) -> (f64, f64) {
    if x <= 0.0 {
        return (0.0, 1.0);
    }
    if x >= 1.0 {
        return (1.0, 0.0);
    }
    let ln_front = ln_inv_beta_int(a, b) + a * libm::log(x) + b * libm::log1p(-x);
    if x < (a + 1.0) / (a + b + 2.0) {
        let i = libm::exp(ln_front) * beta_cf(a, b, x) / a;
        (i, 1.0 - i)
    } else {
        let j = libm::exp(ln_front) * beta_cf(b, a, 1.0 - x) / b;
        (1.0 - j, j)
    }
}

/// One-sided exact (Clopper–Pearson) upper confidence bound for a binomial proportion: the
/// `p` with `P[Bin(n, p) ≤ k] = 1 − confidence` (`k = successes`, `n = trials`), and 1 when
/// `k = n`. With probability at least `confidence` the true proportion is `≤` the result.
///
/// `P[Bin(n, p) ≤ k] = 1 − I_p(k + 1, n − k)` is evaluated with the regularized incomplete
/// beta function (Lentz continued fraction, `lgamma` from `libm`) and inverted by bisection
/// on `p` down to adjacent floats; the upper end is returned (conservative). Relative
/// accuracy is ≈1e-13 or better while `min(k + 1, n − k) ≤ 10⁴`; beyond, the `lgamma`
/// difference costs about `1e-16 · ln Γ(n)` (≈1e-9 at `n = 10⁶`).
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::clopper_pearson_upper;
/// // No successes in 10 trials: the bound is 1 − 0.05^(1/10) at 95 %.
/// let p = clopper_pearson_upper(0, 10, 0.95)?;
/// assert!((p - (1.0 - 0.05f64.powf(0.1))).abs() < 1e-13);
/// assert_eq!(clopper_pearson_upper(7, 7, 0.95)?, 1.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] if `trials = 0`, `successes > trials` or `confidence ∉ (0, 1)`.
pub fn clopper_pearson_upper(successes: u64, trials: u64, confidence: f64) -> Result<f64> {
    if trials == 0 {
        return Err(Error::OutOfRange { name: "trials", value: 0.0, allowed: "[1, inf)" });
    }
    if successes > trials {
        return Err(Error::OutOfRange {
            name: "successes",
            value: successes as f64,
            allowed: "[0, trials]",
        });
    }
    let confidence = check_confidence(confidence)?;
    if successes == trials {
        return Ok(1.0);
    }
    let (a, b) = ((successes + 1) as f64, (trials - successes) as f64);
    let target_low = 1.0 - confidence; // wanted P[Bin ≤ k]; exact when confidence ≥ ½
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..2000 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        // (P[Bin ≥ k + 1], P[Bin ≤ k]) at p = mid; P[Bin ≤ k] decreases in p.
        let (upper_tail, lower_tail) = beta_reg(a, b, mid);
        let below_root =
            if confidence >= 0.5 { lower_tail > target_low } else { upper_tail < confidence };
        if below_root {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

/// Outcome counts of a membership-inference audit: on `negatives` trials the canary was
/// absent and the attack said "present" `false_positives` times; on `positives` trials it
/// was present and the attack said "absent" `false_negatives` times. Trials are assumed
/// independent (one fresh training run or step per trial).
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::AuditCounts;
/// let c = AuditCounts { false_positives: 10, negatives: 100, false_negatives: 30, positives: 100 };
/// assert_eq!(c.false_positives as f64 / c.negatives as f64, 0.1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts {
    /// Trials without the canary on which the attack answered "member" (type-I errors).
    pub false_positives: u64,
    /// Trials without the canary.
    pub negatives: u64,
    /// Trials with the canary on which the attack answered "non-member" (type-II errors).
    pub false_negatives: u64,
    /// Trials with the canary.
    pub positives: u64,
}

/// Result of [`audit_epsilon_lower_bound`].
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::{audit_epsilon_lower_bound, AuditCounts};
/// let c = AuditCounts { false_positives: 10, negatives: 100, false_negatives: 30, positives: 100 };
/// let b = audit_epsilon_lower_bound(&c, 1e-5, 0.95)?;
/// assert!(b.epsilon_lower < b.epsilon_point && b.alpha_upper > 0.1 && b.beta_upper > 0.3);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditBound {
    /// Eq. 45 on the Clopper–Pearson upper bounds: a lower bound on ε at the stated
    /// confidence.
    pub epsilon_lower: f64,
    /// Eq. 45 on the point estimates `α̂ = FP/negatives`, `β̂ = FN/positives` (no
    /// confidence attached; `+∞` when `α̂` or `β̂` is 0 and the matching numerator is
    /// positive).
    pub epsilon_point: f64,
    /// Clopper–Pearson upper bound on the type-I rate α.
    pub alpha_upper: f64,
    /// Clopper–Pearson upper bound on the type-II rate β.
    pub beta_upper: f64,
}

/// A statistically valid lower bound on ε from audit counts (the fix of `docs/PAPERS.md` P2-16).
///
/// The upper Clopper–Pearson bounds `α_U`, `β_U` are taken each at confidence
/// `1 − (1 − confidence)/2`, so by the union bound `α ≤ α_U` and `β ≤ β_U` hold together
/// with probability `≥ confidence`. Eq. 45 is non-increasing in α and β, hence
/// `epsilon_lower = Eq. 45(α_U, β_U, δ) ≤ ε` at that confidence, for any mechanism that is
/// `(ε, δ)`-DP. Zero error counts need no special treatment: the paper dropped small α/β
/// ad hoc, here `epsilon_point` becomes `+∞` while the bound stays finite.
///
/// A lower bound only refutes: it can never validate an upper-bound accountant.
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::{audit_epsilon_lower_bound, AuditCounts};
/// let c = AuditCounts { false_positives: 0, negatives: 1000, false_negatives: 500, positives: 1000 };
/// let b = audit_epsilon_lower_bound(&c, 0.0, 0.95)?;
/// assert_eq!(b.epsilon_point, f64::INFINITY);
/// assert!(b.epsilon_lower.is_finite() && b.epsilon_lower > 4.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] if `negatives` or `positives` is 0, an error count exceeds its
/// total, `δ ∉ [0, 1)` or `confidence ∉ (0, 1)`.
pub fn audit_epsilon_lower_bound(
    counts: &AuditCounts,
    delta: f64,
    confidence: f64,
) -> Result<AuditBound> {
    let delta = check_delta(delta)?;
    let confidence = check_confidence(confidence)?;
    let check = |name: &'static str, errors: u64, total_name: &'static str, total: u64| {
        if total == 0 {
            Err(Error::OutOfRange { name: total_name, value: 0.0, allowed: "[1, inf)" })
        } else if errors > total {
            Err(Error::OutOfRange { name, value: errors as f64, allowed: "[0, total count]" })
        } else {
            Ok(errors as f64 / total as f64)
        }
    };
    let alpha = check("false_positives", counts.false_positives, "negatives", counts.negatives)?;
    let beta = check("false_negatives", counts.false_negatives, "positives", counts.positives)?;
    let each = 0.5 + 0.5 * confidence;
    let alpha_upper = clopper_pearson_upper(counts.false_positives, counts.negatives, each)?;
    let beta_upper = clopper_pearson_upper(counts.false_negatives, counts.positives, each)?;
    Ok(AuditBound {
        epsilon_lower: eq45(alpha_upper, beta_upper, delta),
        epsilon_point: eq45(alpha, beta, delta),
        alpha_upper,
        beta_upper,
    })
}

/// Two Dirac-type mean vectors `a` and `b` in `ℝ^d`: one special coordinate and `d − 1`
/// equal "rest" coordinates each (the shuffled mechanism only sees them up to permutation).
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::MeanPair;
/// let p = MeanPair { special_a: 0.0, rest_a: 0.0, special_b: 1.0, rest_b: 0.0 };
/// assert_eq!(p, MeanPair::feasible_point_mass(1.0)?);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanPair {
    /// Special coordinate of `a`.
    pub special_a: f64,
    /// Each of the other `d − 1` coordinates of `a`.
    pub rest_a: f64,
    /// Special coordinate of `b`.
    pub special_b: f64,
    /// Each of the other `d − 1` coordinates of `b`.
    pub rest_b: f64,
}

impl MeanPair {
    /// The paper's Lemma 2 worst case (`docs/PAPERS.md` P2-3): `a = f = c′u`, `b = f′ = (c + c′)u`,
    /// `u = [(d−1), −1, …, −1]/√(d(d−1))`, i.e. special `= m·√((d−1)/d)` and rest
    /// `= −m/√(d(d−1))` for `m = c′` and `m = c + c′`. (Not feasible under Alg. 1's batch
    /// clipping of `f′`, `docs/PAPERS.md` P2-4.)
    ///
    /// ```
    /// use dpattn_paper::weight_shuffle::refute::MeanPair;
    /// let p = MeanPair::paper_worst_case(1.0, 1.0, 2.0)?;
    /// let h = core::f64::consts::FRAC_1_SQRT_2;
    /// assert!((p.special_a - h).abs() < 1e-15 && (p.rest_b + 2.0 * h).abs() < 1e-15);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `c ∈ (0, ∞)`, `c′ ∈ [0, ∞)` and `d ∈ (1, ∞)`.
    pub fn paper_worst_case(c: f64, c_prime: f64, d: f64) -> Result<MeanPair> {
        positive_finite("c", c)?;
        nonneg_finite("c_prime", c_prime)?;
        if !(d.is_finite() && d > 1.0) {
            return Err(Error::OutOfRange { name: "d", value: d, allowed: "(1, inf)" });
        }
        let special = libm::sqrt((d - 1.0) / d);
        let rest = -1.0 / (libm::sqrt(d) * libm::sqrt(d - 1.0));
        let b = c + c_prime;
        Ok(MeanPair {
            special_a: c_prime * special,
            rest_a: c_prime * rest,
            special_b: b * special,
            rest_b: b * rest,
        })
    }

    /// The batch-clip-feasible pair of `docs/PAPERS.md` T2-I (c): `a = f = 0`, `b = f′ = c·e₁` (an
    /// equal-entry vector the paper excludes, P2-3).
    ///
    /// ```
    /// use dpattn_paper::weight_shuffle::refute::MeanPair;
    /// assert_eq!(MeanPair::feasible_point_mass(2.0)?.special_b, 2.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `c ∈ (0, ∞)`.
    pub fn feasible_point_mass(c: f64) -> Result<MeanPair> {
        positive_finite("c", c)?;
        Ok(MeanPair { special_a: 0.0, rest_a: 0.0, special_b: c, rest_b: 0.0 })
    }
}

/// Closed-form lower bound on the true `δ(ε)` of the shuffled Gaussian mechanism
/// (absolute noise std `σ`, `d` coordinates) for the neighbouring means of `pair`
/// (`docs/PAPERS.md` §2.6).
///
/// The event `E_t = {max_i y_i > t}` is permutation invariant, so under either mixture
/// `P(E_t) = 1 − Φ((t − m_s)/σ)·Φ((t − m_r)/σ)^{d−1}` (computed as
/// `−expm1(ln Φ + (d−1) ln Φ)`). Any set gives a hockey-stick lower bound, and DP needs both
/// directions, so the result is
/// `max(0, sup_t [P_b(E_t) − e^ε P_a(E_t)], sup_t [P_a(E_t) − e^ε P_b(E_t)])`.
/// The supremum is found on a grid (≥ 4000 points, spacing ≤ σ/(8(1 + √(2 ln d))) up to
/// 2²⁰ points) covering `[min mean − 12σ, max mean + σ(√(2 ln d) + 12)]`, refined by
/// golden-section search; every evaluated `t` gives a valid bound, so inexact
/// maximisation can only make the bound smaller, never invalid. `d` may be any real
/// `≥ 1` (integers are the meaningful case).
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::{max_stat_lower_bound, MeanPair};
/// // docs/PAPERS.md T2-I (c), d = 85.8e6 at Thm 6's σ* = 0.27316: true δ(0.36) ≥ 0.830.
/// let pair = MeanPair::paper_worst_case(1.0, 1.0, 85.8e6)?;
/// let lb = max_stat_lower_bound(0.36, 0.27316, 85.8e6, &pair)?;
/// assert!((lb - 0.830).abs() < 1e-3);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε ∈ [0, ∞)`, `σ ∈ (0, ∞)`, `d ∈ [1, ∞)` and all means
/// are finite.
pub fn max_stat_lower_bound(epsilon: f64, sigma: f64, d: f64, pair: &MeanPair) -> Result<f64> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    positive_finite("sigma", sigma)?;
    if !(d.is_finite() && d >= 1.0) {
        return Err(Error::OutOfRange { name: "d", value: d, allowed: "[1, inf)" });
    }
    let means = [
        check_finite("pair.special_a", pair.special_a)?,
        check_finite("pair.rest_a", pair.rest_a)?,
        check_finite("pair.special_b", pair.special_b)?,
        check_finite("pair.rest_b", pair.rest_b)?,
    ];
    let ee = libm::exp(eps);
    // P(max > t) for (special, rest) means.
    let p_exceed = |t: f64, ms: f64, mr: f64| {
        let ln_all_below =
            log_normal_cdf((t - ms) / sigma) + (d - 1.0) * log_normal_cdf((t - mr) / sigma);
        -libm::expm1(ln_all_below)
    };
    let hockey = |p: f64, q: f64| p - if q > 0.0 { ee * q } else { 0.0 };
    let forward = |t: f64| hockey(p_exceed(t, means[2], means[3]), p_exceed(t, means[0], means[1]));
    let backward =
        |t: f64| hockey(p_exceed(t, means[0], means[1]), p_exceed(t, means[2], means[3]));
    let (mut lo, mut hi) = (means[0], means[0]);
    for m in means {
        lo = lo.min(m);
        hi = hi.max(m);
    }
    let spread = libm::sqrt(2.0 * libm::log(d));
    lo -= 12.0 * sigma;
    hi += sigma * (spread + 12.0);
    let step_max = sigma / (8.0 * (1.0 + spread));
    let n = libm::ceil((hi - lo) / step_max).clamp(4000.0, f64::from(1u32 << 20)) as usize;
    let h = (hi - lo) / n as f64;
    let mut best = [(f64::NEG_INFINITY, lo); 2];
    for i in 0..=n {
        let t = lo + h * i as f64;
        for (slot, v) in best.iter_mut().zip([forward(t), backward(t)]) {
            if v > slot.0 {
                *slot = (v, t);
            }
        }
    }
    let refined_f = golden_max(&forward, best[0].1 - h, best[0].1 + h);
    let refined_b = golden_max(&backward, best[1].1 - h, best[1].1 + h);
    Ok(best[0].0.max(best[1].0).max(refined_f).max(refined_b).max(0.0))
}

/// Golden-section search for the maximum of a (locally unimodal) `f` on `[a, b]`; returns
/// the largest value seen.
fn golden_max(f: &impl Fn(f64) -> f64, mut a: f64, mut b: f64) -> f64 {
    let r = 0.5 * (libm::sqrt(5.0) - 1.0);
    let (mut x1, mut x2) = (b - r * (b - a), a + r * (b - a));
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..100 {
        if f1 < f2 {
            a = x1;
            (x1, f1) = (x2, f2);
            x2 = a + r * (b - a);
            f2 = f(x2);
        } else {
            b = x2;
            (x2, f2) = (x1, f1);
            x1 = b - r * (b - a);
            f1 = f(x1);
        }
    }
    f1.max(f2)
}

/// Exact `δ(ε)` in both directions; see [`shuffled_gaussian_delta_d2`].
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::shuffled_gaussian_delta_d2;
/// let e = shuffled_gaussian_delta_d2(1.0, 1.5, 1.0, 1.0)?;
/// assert_eq!(e.forward, 0.0);
/// assert!(e.backward > 0.029);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExactDelta {
    /// `δ(p‖p′) = ∫ (p − e^ε p′)₊`.
    pub forward: f64,
    /// `δ(p′‖p) = ∫ (p′ − e^ε p)₊`.
    pub backward: f64,
}

/// `ln cosh z`, overflow-free.
fn ln_cosh(z: f64) -> f64 {
    let z = z.abs();
    z + libm::log1p(libm::exp(-2.0 * z)) - core::f64::consts::LN_2
}

/// Exact `δ(ε)` of the shuffled Gaussian mechanism at `d = 2` for the paper's pair
/// `f = c′u`, `f′ = (c + c′)u`, `u = (1, −1)/√2`, absolute noise std `σ` (`docs/PAPERS.md` §2.6,
/// T2-I (a)).
///
/// Both means lie on the line spanned by `u`; the orthogonal coordinate is identical pure
/// noise on both sides. The problem is therefore the 1-D pair
/// `p = ½N(c′, σ²) + ½N(−c′, σ²)` vs `p′ = ½N(b, σ²) + ½N(−b, σ²)`, `b = c + c′`. The log
/// ratio `ℓ(x) = ln p′/p = (c′² − b²)/(2σ²) + ln cosh(bx/σ²) − ln cosh(c′x/σ²)` is even and
/// strictly increasing in `|x|` (its derivative `(b tanh(bx/σ²) − c′ tanh(c′x/σ²))/σ²` is
/// positive for `x > 0`, since `b > c′ ≥ 0`). Hence `{p′ > e^ε p} = {|x| > x₁}` with
/// `ℓ(x₁) = ε` and `{p > e^ε p′} = {|x| < x₂}` with `ℓ(x₂) = −ε` (empty if `ℓ(0) ≥ −ε`).
/// The roots are bisected to adjacent floats and each region's mass is a difference of
/// normal CDFs, so there is no quadrature error.
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::shuffled_gaussian_delta_d2;
/// // docs/PAPERS.md T2-I (a): Thm 6 certifies (1, 1e-5) at σ = 1.16125, yet δ(p′‖p) = 0.07985.
/// let e = shuffled_gaussian_delta_d2(1.0, 1.16125, 1.0, 1.0)?;
/// assert!((e.backward - 0.07985).abs() < 5e-6);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε ∈ [0, ∞)`, `σ ∈ (0, ∞)`, `c ∈ (0, ∞)`, `c′ ∈ [0, ∞)`.
pub fn shuffled_gaussian_delta_d2(
    epsilon: f64,
    sigma: f64,
    c: f64,
    c_prime: f64,
) -> Result<ExactDelta> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    positive_finite("sigma", sigma)?;
    positive_finite("c", c)?;
    nonneg_finite("c_prime", c_prime)?;
    let b = c + c_prime;
    let s2 = sigma * sigma;
    let ell = |x: f64| {
        (c_prime - b) * (c_prime + b) / (2.0 * s2) + ln_cosh(b * x / s2) - ln_cosh(c_prime * x / s2)
    };
    // Smallest x ≥ 0 with ℓ(x) ≥ target (ℓ increasing, unbounded).
    let root = |target: f64| {
        let mut hi = sigma;
        while ell(hi) < target {
            hi *= 2.0;
        }
        let mut lo = 0.0;
        loop {
            let mid = 0.5 * (lo + hi);
            if mid <= lo || mid >= hi {
                return hi;
            }
            if ell(mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    };
    // P(|X| > x) and P(|X| < x) for X ~ ½N(m, σ²) + ½N(−m, σ²).
    let outside = |x: f64, m: f64| normal_sf((x - m) / sigma) + normal_sf((x + m) / sigma);
    let inside = |x: f64, m: f64| normal_cdf((x - m) / sigma) - normal_cdf((-x - m) / sigma);
    let ee = libm::exp(eps);
    let x1 = root(eps);
    let backward = (outside(x1, b) - ee * outside(x1, c_prime)).max(0.0);
    let forward = if ell(0.0) >= -eps {
        0.0
    } else {
        let x2 = root(-eps);
        (inside(x2, c_prime) - ee * inside(x2, b)).max(0.0)
    };
    Ok(ExactDelta { forward, backward })
}

/// Monte-Carlo estimate of `δ(ε)` in both directions, with standard errors; see
/// [`monte_carlo_delta`].
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::MonteCarloDelta;
/// let m = MonteCarloDelta { forward: 0.0, backward: 0.08, forward_stderr: 0.0, backward_stderr: 0.002 };
/// assert!(m.backward > m.forward);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MonteCarloDelta {
    /// Estimate of `δ(p‖p′) = E_p[(1 − e^{ε − L})₊]`.
    pub forward: f64,
    /// Estimate of `δ(p′‖p) = E_{p′}[(1 − e^{ε + L})₊]`.
    pub backward: f64,
    /// Standard error of `forward`.
    pub forward_stderr: f64,
    /// Standard error of `backward`.
    pub backward_stderr: f64,
}

/// Scratch elements [`monte_carlo_delta`] needs for dimension `d`: `d`.
///
/// ```
/// use dpattn_paper::weight_shuffle::refute::monte_carlo_delta_scratch_len;
/// assert_eq!(monte_carlo_delta_scratch_len(10), 10);
/// ```
pub fn monte_carlo_delta_scratch_len(d: usize) -> usize {
    d
}

/// The Monte-Carlo privacy-loss estimator of `docs/PAPERS.md` §2.6 for the paper's pair `f = c′u`,
/// `f′ = (c + c′)u` in `ℝ^d` (`u` as in [`MeanPair::paper_worst_case`]), absolute noise
/// std `σ`.
///
/// With `S = Σ y_i`, `a′ = c′/(√(d(d−1)) σ²)`, `a″ = (c + c′)/(√(d(d−1)) σ²)`, the exact
/// log-likelihood ratio is
/// `L(y) = ln p/p′ = LSE_i(a′(d y_i − S)) − LSE_i(a″(d y_i − S)) − (c′² − (c + c′)²)/(2σ²)`,
/// and `δ(p‖p′) = E_p[(1 − e^{ε − L})₊]`, `δ(p′‖p) = E_{p′}[(1 − e^{ε + L})₊]`, each
/// averaged over `samples` draws. `L` is permutation invariant and each mixture is a
/// uniform mixture over permutations of one mean, so `L(Y)` has the same law under the
/// mixture as under its identity-permutation component: draws use `y = m·u + σz` with no
/// permutation.
///
/// Randomness: standard normals from `stream` via [`Gaussian::STANDARD`]; draw `s` under
/// `p` uses elements `s·d .. s·d + d`, draw `s` under `p′` uses elements
/// `(samples + s)·d .. (samples + s)·d + d`. The result is a deterministic function of the
/// stream.
///
/// ```
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// use dpattn_paper::weight_shuffle::refute::{monte_carlo_delta, shuffled_gaussian_delta_d2};
/// let stream = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut scratch = [0.0; 2];
/// let mc = monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 2, 2000, &stream, &mut scratch)?;
/// let exact = shuffled_gaussian_delta_d2(1.0, 1.16125, 1.0, 1.0)?;
/// assert!((mc.backward - exact.backward).abs() < 5.0 * mc.backward_stderr);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε ∈ [0, ∞)`, `σ ∈ (0, ∞)`, `c ∈ (0, ∞)`, `c′ ∈ [0, ∞)`,
/// `d ≥ 2` and `samples ≥ 2`; [`Error::ScratchTooSmall`] if `scratch.len() < d`;
/// [`Error::SizeOverflow`] if `2 · samples · d` overflows `u64`.
#[allow(clippy::too_many_arguments)]
pub fn monte_carlo_delta(
    epsilon: f64,
    sigma: f64,
    c: f64,
    c_prime: f64,
    d: usize,
    samples: u64,
    stream: &KeyedStream,
    scratch: &mut [f64],
) -> Result<MonteCarloDelta> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    positive_finite("sigma", sigma)?;
    positive_finite("c", c)?;
    nonneg_finite("c_prime", c_prime)?;
    if d < 2 {
        return Err(Error::OutOfRange { name: "d", value: d as f64, allowed: "[2, inf)" });
    }
    if samples < 2 {
        return Err(Error::OutOfRange {
            name: "samples",
            value: samples as f64,
            allowed: "[2, inf)",
        });
    }
    let needed = monte_carlo_delta_scratch_len(d);
    if scratch.len() < needed {
        return Err(Error::ScratchTooSmall { needed, got: scratch.len() });
    }
    let y = &mut scratch[..d];
    let overflow = Error::SizeOverflow { what: "2 · samples · d stream elements" };
    let side_len = samples.checked_mul(d as u64).ok_or(overflow)?;
    side_len.checked_mul(2).ok_or(overflow)?;

    let df = d as f64;
    let b = c + c_prime;
    let s2 = sigma * sigma;
    let norm = libm::sqrt(df) * libm::sqrt(df - 1.0);
    let (u_special, u_rest) = ((df - 1.0) / norm, -1.0 / norm);
    let (a1, a2) = (c_prime / (norm * s2), b / (norm * s2));
    let shift = (b - c_prime) * (b + c_prime) / (2.0 * s2);

    let mut run = |m: f64, first: u64, backward_side: bool| -> Result<(f64, f64)> {
        let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
        for s in 0..samples {
            Gaussian::STANDARD.fill_keyed::<f64>(stream, first + s * d as u64, y)?;
            let mut total = 0.0;
            for (i, v) in y.iter_mut().enumerate() {
                *v = m * if i == 0 { u_special } else { u_rest } + sigma * *v;
                total += *v;
            }
            // w_i = d y_i − S; LSE_i(a w_i) with a ≥ 0 peaks at the largest w_i.
            let w_max = y.iter().fold(f64::NEG_INFINITY, |acc, &v| acc.max(v)) * df - total;
            let (mut e1, mut e2) = (0.0, 0.0);
            for &v in y.iter() {
                let gap = df * v - total - w_max;
                e1 += libm::exp(a1 * gap);
                e2 += libm::exp(a2 * gap);
            }
            let l = (a1 - a2) * w_max + libm::log(e1) - libm::log(e2) + shift;
            let x = if backward_side {
                if l < -eps { -libm::expm1(eps + l) } else { 0.0 }
            } else if l > eps {
                -libm::expm1(eps - l)
            } else {
                0.0
            };
            sum += x;
            sum_sq += x * x;
        }
        let n = samples as f64;
        let mean = sum / n;
        let var = ((sum_sq - n * mean * mean) / (n - 1.0)).max(0.0);
        Ok((mean, libm::sqrt(var / n)))
    };
    let (forward, forward_stderr) = run(c_prime, 0, false)?;
    let (backward, backward_stderr) = run(b, side_len, true)?;
    Ok(MonteCarloDelta { forward, backward, forward_stderr, backward_stderr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_delta;
    use dpattn_core::sampling::NoiseKey;

    fn oor<T>(r: Result<T>) -> bool {
        matches!(r, Err(Error::OutOfRange { .. }))
    }

    fn close(got: f64, want: f64, tol: f64) {
        assert!((got - want).abs() <= tol, "got {got}, want {want} ± {tol}");
    }

    #[test]
    fn audit_epsilon_matches_table_t2_c() {
        // docs/PAPERS.md T2-C, printed to 7 decimals.
        close(audit_epsilon(0.1, 0.3, 1e-5).unwrap(), 1.9458959, 5e-8);
        close(audit_epsilon(0.3, 0.3, 1e-5).unwrap(), 0.8472836, 5e-8);
        close(audit_epsilon(0.45, 0.45, 1e-5).unwrap(), 0.2006525, 5e-8);
        close(audit_epsilon(4e-4, 0.5, 5e-6).unwrap(), 7.1308888, 5e-8);
        assert_eq!(audit_epsilon(1.0, 1.0, 0.0).unwrap(), 0.0);
    }

    #[test]
    fn clopper_pearson_closed_forms() {
        for &(n, conf) in &[(1u64, 0.95), (10, 0.95), (1000, 0.99), (100_000, 0.5), (50, 0.1)] {
            // k = 0: (1 − p)^n = 1 − conf.
            let want0 = -libm::expm1(libm::log1p(-conf) / n as f64);
            let got0 = clopper_pearson_upper(0, n, conf).unwrap();
            assert!((got0 / want0 - 1.0).abs() < 1e-11, "k=0 n={n}: {got0} vs {want0}");
            // k = n − 1: 1 − p^n = 1 − conf.
            let want1 = libm::exp(libm::log(conf) / n as f64);
            let got1 = clopper_pearson_upper(n - 1, n, conf).unwrap();
            assert!((got1 - want1).abs() < 1e-11, "k=n-1 n={n}: {got1} vs {want1}");
        }
    }

    /// P[Bin(n, p) ≤ k] by direct summation (independent of the beta-function code).
    fn binom_cdf(k: u64, n: u64, p: f64) -> f64 {
        let mut term = libm::pow(1.0 - p, n as f64); // P[X = 0]
        let mut acc = term;
        for j in 0..k {
            term *= (n - j) as f64 / (j + 1) as f64 * p / (1.0 - p);
            acc += term;
        }
        acc
    }

    #[test]
    fn clopper_pearson_defining_equation() {
        // Published: n = 10, k = 1, 95 % one-sided upper bound 0.39416.
        let p = clopper_pearson_upper(1, 10, 0.95).unwrap();
        close(p, 0.39416, 5e-6);
        close(binom_cdf(1, 10, p), 0.05, 1e-13);
        for &(k, n, conf) in
            &[(3u64, 20u64, 0.9), (17, 200, 0.975), (40, 60, 0.3), (5, 1000, 0.999)]
        {
            let p = clopper_pearson_upper(k, n, conf).unwrap();
            close(binom_cdf(k, n, p), 1.0 - conf, 1e-12);
            assert!(conf < 0.5 || p > k as f64 / n as f64);
        }
    }

    #[test]
    fn clopper_pearson_rejects_bad_input() {
        assert!(oor(clopper_pearson_upper(1, 0, 0.9)));
        assert!(oor(clopper_pearson_upper(5, 4, 0.9)));
        for conf in [0.0, 1.0, f64::NAN, -0.5] {
            assert!(oor(clopper_pearson_upper(1, 4, conf)));
        }
    }

    #[test]
    fn audit_lower_bound_uses_union_bound() {
        let c = AuditCounts {
            false_positives: 12,
            negatives: 300,
            false_negatives: 90,
            positives: 300,
        };
        let b = audit_epsilon_lower_bound(&c, 1e-5, 0.9).unwrap();
        close(b.epsilon_point, audit_epsilon(0.04, 0.3, 1e-5).unwrap(), 1e-12);
        close(b.alpha_upper, clopper_pearson_upper(12, 300, 0.95).unwrap(), 0.0);
        close(b.beta_upper, clopper_pearson_upper(90, 300, 0.95).unwrap(), 0.0);
        close(b.epsilon_lower, audit_epsilon(b.alpha_upper, b.beta_upper, 1e-5).unwrap(), 0.0);
        assert!(0.0 < b.epsilon_lower && b.epsilon_lower < b.epsilon_point);
        // β̂ = 0 with 1 − α̂ − δ > 0: point ε is +∞, the bound is finite.
        let z =
            AuditCounts { false_positives: 5, negatives: 10, false_negatives: 0, positives: 10 };
        let b = audit_epsilon_lower_bound(&z, 0.0, 0.95).unwrap();
        assert_eq!(b.epsilon_point, f64::INFINITY);
        assert!(b.epsilon_lower.is_finite());
    }

    #[test]
    fn audit_rejects_bad_input() {
        let ok =
            AuditCounts { false_positives: 1, negatives: 10, false_negatives: 1, positives: 10 };
        let bad = [
            AuditCounts { negatives: 0, false_positives: 0, ..ok },
            AuditCounts { positives: 0, false_negatives: 0, ..ok },
            AuditCounts { false_positives: 11, ..ok },
            AuditCounts { false_negatives: 11, ..ok },
        ];
        for c in bad {
            assert!(oor(audit_epsilon_lower_bound(&c, 1e-5, 0.95)));
        }
        for (d, conf) in [(1.0, 0.9), (-1e-9, 0.9), (f64::NAN, 0.9), (0.0, 1.0), (0.0, 0.0)] {
            assert!(audit_epsilon_lower_bound(&ok, d, conf).is_err());
        }
        for (a, b) in [(0.0, 0.5), (0.5, 1.5), (f64::NAN, 0.5), (0.5, -0.1)] {
            assert!(oor(audit_epsilon(a, b, 1e-5)));
        }
        assert!(audit_epsilon(0.5, 0.5, 1.0).is_err());
    }

    #[test]
    fn max_stat_matches_table_t2_i_c() {
        // (d, σ*, LB paper pair, LB feasible pair) from docs/PAPERS.md T2-I (c), ε = 0.36,
        // c = c′ = 1.
        let rows = [
            (100.0, 0.53438, 0.512, 0.0588),
            (1000.0, 0.43960, 0.616, 0.0294),
            (1e4, 0.38257, 0.686, 0.0143),
            (1e6, 0.31364, 0.776, 3.41e-3),
            (85.8e6, 0.27316, 0.830, 8.8e-4),
            (838e6, 0.25768, 0.851, 4.43e-4),
        ];
        for (d, sigma, paper, feasible) in rows {
            let pp = MeanPair::paper_worst_case(1.0, 1.0, d).unwrap();
            close(max_stat_lower_bound(0.36, sigma, d, &pp).unwrap(), paper, 1e-3);
            let fp = MeanPair::feasible_point_mass(1.0).unwrap();
            let lb = max_stat_lower_bound(0.36, sigma, d, &fp).unwrap();
            close(lb, feasible, 1e-3);
            assert!((lb / feasible - 1.0).abs() < 0.02, "d={d}: {lb} vs {feasible}");
        }
    }

    #[test]
    fn max_stat_is_below_exact_and_plain_gaussian() {
        let pp = MeanPair::paper_worst_case(1.0, 1.0, 2.0).unwrap();
        for (eps, sigma) in [(0.5, 1.16125), (1.0, 1.16125), (1.0, 1.5)] {
            let lb = max_stat_lower_bound(eps, sigma, 2.0, &pp).unwrap();
            let ex = shuffled_gaussian_delta_d2(eps, sigma, 1.0, 1.0).unwrap();
            assert!(lb > 0.0 && lb <= ex.backward.max(ex.forward) + 1e-12);
        }
        // d = 1: the max statistic is the output itself; the bound is the plain Gaussian δ.
        let one = MeanPair { special_a: 0.0, rest_a: 0.0, special_b: 1.0, rest_b: 0.0 };
        let lb = max_stat_lower_bound(1.0, 1.0, 1.0, &one).unwrap();
        close(lb, analytic_gaussian_delta(1.0, 1.0, 1.0).unwrap(), 1e-10);
        let rev = MeanPair { special_a: 1.0, rest_a: 0.0, special_b: 0.0, rest_b: 0.0 };
        close(max_stat_lower_bound(1.0, 1.0, 1.0, &rev).unwrap(), lb, 1e-10);
    }

    #[test]
    fn max_stat_rejects_bad_input() {
        let p = MeanPair::feasible_point_mass(1.0).unwrap();
        for (e, s, d) in
            [(-0.1, 1.0, 10.0), (f64::NAN, 1.0, 10.0), (1.0, 0.0, 10.0), (1.0, -1.0, 10.0)]
        {
            assert!(oor(max_stat_lower_bound(e, s, d, &p)));
        }
        for d in [0.5, f64::NAN, f64::INFINITY] {
            assert!(oor(max_stat_lower_bound(1.0, 1.0, d, &p)));
        }
        let nan = MeanPair { rest_b: f64::NAN, ..p };
        assert!(max_stat_lower_bound(1.0, 1.0, 3.0, &nan).is_err());
        assert!(MeanPair::paper_worst_case(1.0, 1.0, 1.0).is_err());
        assert!(MeanPair::paper_worst_case(0.0, 1.0, 5.0).is_err());
        assert!(MeanPair::paper_worst_case(1.0, -1.0, 5.0).is_err());
        assert!(MeanPair::feasible_point_mass(f64::NAN).is_err());
    }

    #[test]
    fn exact_d2_matches_table_t2_i_a() {
        // (σ, ε, δ(p′‖p), δ(p‖p′), plain Gaussian δ) from docs/PAPERS.md T2-I (a); tolerance = half
        // a unit in the last printed digit.
        let rows = [
            (1.16125, 0.5, 0.1785, 5e-5, 0.1449, 5e-5, 0.1832, 5e-5),
            (1.16125, 1.0, 0.07985, 5e-6, 0.01274, 5e-6, 0.08105, 5e-6),
            (1.5, 1.0, 0.02907, 5e-6, 0.0, 0.0, 0.03095, 5e-6),
            (3.73, 1.0, 3.22e-6, 5e-9, 0.0, 0.0, 1.003e-5, 5e-9),
        ];
        for (sigma, eps, back, tb, fwd, tf, plain, tp) in rows {
            let e = shuffled_gaussian_delta_d2(eps, sigma, 1.0, 1.0).unwrap();
            close(e.backward, back, tb);
            close(e.forward, fwd, tf);
            let g = analytic_gaussian_delta(eps, sigma, 1.0).unwrap();
            close(g, plain, tp);
            // Thm 5 (shuffling is post-processing): never above the plain Gaussian δ.
            assert!(e.backward <= g && e.forward <= g);
        }
    }

    #[test]
    fn exact_d2_agrees_with_brute_force_quadrature() {
        let (eps, sigma, c, cp) = (0.7, 0.9, 1.0, 0.6);
        let e = shuffled_gaussian_delta_d2(eps, sigma, c, cp).unwrap();
        let pdf = |x: f64, m: f64| {
            let g = |z: f64| libm::exp(-0.5 * z * z);
            0.5 * (g((x - m) / sigma) + g((x + m) / sigma))
                / (sigma * libm::sqrt(2.0 * core::f64::consts::PI))
        };
        let (lo, n) = (-12.0, 400_000);
        let h = 24.0 / n as f64;
        let ee = libm::exp(eps);
        let (mut fwd, mut back) = (0.0, 0.0);
        for i in 0..n {
            let x = lo + (i as f64 + 0.5) * h;
            let (p, q) = (pdf(x, cp), pdf(x, c + cp));
            fwd += (p - ee * q).max(0.0) * h;
            back += (q - ee * p).max(0.0) * h;
        }
        close(e.forward, fwd, 1e-7);
        close(e.backward, back, 1e-7);
        assert!(e.forward > 0.0 && e.backward > 0.0);
    }

    #[test]
    fn exact_d2_rejects_bad_input() {
        for (e, s, c, cp) in [
            (-1.0, 1.0, 1.0, 1.0),
            (1.0, 0.0, 1.0, 1.0),
            (1.0, 1.0, 0.0, 1.0),
            (1.0, 1.0, 1.0, -1.0),
            (1.0, f64::NAN, 1.0, 1.0),
        ] {
            assert!(oor(shuffled_gaussian_delta_d2(e, s, c, cp)));
        }
    }

    fn stream() -> KeyedStream {
        KeyedStream::new(&NoiseKey::for_replay([42; 32]), 3)
    }

    #[test]
    fn monte_carlo_d2_agrees_with_exact() {
        let mut scratch = [0.0; 2];
        let (eps, sigma) = (0.5, 1.16125);
        let mc =
            monte_carlo_delta(eps, sigma, 1.0, 1.0, 2, 20_000, &stream(), &mut scratch).unwrap();
        let ex = shuffled_gaussian_delta_d2(eps, sigma, 1.0, 1.0).unwrap();
        assert!((mc.forward - ex.forward).abs() < 4.0 * mc.forward_stderr, "{mc:?} {ex:?}");
        assert!((mc.backward - ex.backward).abs() < 4.0 * mc.backward_stderr, "{mc:?} {ex:?}");
        assert!(mc.forward_stderr > 0.0 && mc.forward_stderr < 0.005);
    }

    #[test]
    fn monte_carlo_matches_table_t2_i_b_d10() {
        // docs/PAPERS.md T2-I (b): d = 10, σ = 1, true δ(0.5) = 0.158, δ(1) = 0.0816 (itself Monte
        // Carlo with 20 000 samples; the larger direction is δ(p′‖p)).
        let mut scratch = [0.0; 10];
        let pp = MeanPair::paper_worst_case(1.0, 1.0, 10.0).unwrap();
        for (eps, want) in [(0.5, 0.158), (1.0, 0.0816)] {
            let mc =
                monte_carlo_delta(eps, 1.0, 1.0, 1.0, 10, 20_000, &stream(), &mut scratch).unwrap();
            let (est, se) = (mc.backward, mc.backward_stderr);
            assert!(est >= mc.forward && (est - want).abs() < 5.0 * se + 0.003, "{mc:?}");
            // The closed-form bound at the same point must not exceed it (beyond MC error).
            assert!(max_stat_lower_bound(eps, 1.0, 10.0, &pp).unwrap() < est + 5.0 * se);
        }
    }

    #[test]
    fn monte_carlo_rejects_bad_input() {
        let s = stream();
        let mut sc = [0.0; 4];
        let r = monte_carlo_delta(1.0, 1.0, 1.0, 1.0, 5, 10, &s, &mut sc);
        assert_eq!(r, Err(Error::ScratchTooSmall { needed: 5, got: 4 }));
        assert!(oor(monte_carlo_delta(1.0, 1.0, 1.0, 1.0, 1, 10, &s, &mut sc)));
        assert!(oor(monte_carlo_delta(1.0, 1.0, 1.0, 1.0, 2, 1, &s, &mut sc)));
        assert!(oor(monte_carlo_delta(-1.0, 1.0, 1.0, 1.0, 2, 10, &s, &mut sc)));
        assert!(oor(monte_carlo_delta(1.0, 0.0, 1.0, 1.0, 2, 10, &s, &mut sc)));
        assert!(oor(monte_carlo_delta(1.0, 1.0, f64::NAN, 1.0, 2, 10, &s, &mut sc)));
        let r = monte_carlo_delta(1.0, 1.0, 1.0, 1.0, 4, u64::MAX / 4, &s, &mut sc);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })));
    }
}
