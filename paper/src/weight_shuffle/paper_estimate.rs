//! The paper's accountant for shuffled DP-SGD, reproduced: **a heuristic estimate, not a
//! differential-privacy guarantee.**
//!
//! This is the Theorem 6 pipeline of Yang, Ji and Xiang (`docs/PAPERS.md` §2.5): a
//! Fenton–Wilkinson (F-W) lognormal approximation of the shuffled Gaussian's privacy profile
//! ([`fenton_wilkinson`], [`thm6_terms`], [`thm6_h`]), amplification by subsampling
//! (Thm 2, [`paper_amplify`]) and advanced composition (Thm 1 in Steinke's CDP form,
//! [`paper_advanced_composition`]). It exists to reproduce the paper's numbers (σ ≈ 0.27 for
//! ViT at ε = 1). It does not bound δ (`docs/PAPERS.md` §2.7):
//!
//! * P2-1: the condition is in the wrong direction. Thm 6 approximates a *lower* bound on
//!   the true δ, so requiring it to be ≤ δ proves nothing. At the certified σ the true per-step
//!   δ exceeds the claimed one by factors of 10⁴–10⁶ (T2-I).
//! * P2-2: F-W is applied to dependent summands at log-variance ≈ 13; the approximation
//!   even goes negative ([`PaperFlags::negative_approximation`]).
//! * P2-5: `d` = number of parameters is wrong. The invariance group only permutes inside
//!   blocks, so the smallest orbit is 64 or 1.
//! * P2-6: the permutation can be recovered from consecutive weights, which leaves a plain
//!   Gaussian mechanism at σ ≈ 0.27.
//!
//! The results have types [`PaperEstimate`] and [`PaperSigmaEstimate`]. They have no conversion
//! into a [`PrivacyBudget`](dpattn_core::PrivacyBudget), an [`Epsilon`](dpattn_core::Epsilon) or a
//! ledger [`Charge`](dpattn_core::accounting::ledger::Charge). The library charges shuffled DP-SGD
//! as plain DP-SGD with the subsampled-Gaussian RDP accountant
//! [`SampledGaussianRdp`](dpattn_core::accounting::rdp::SampledGaussianRdp). Shuffling is
//! post-processing, so it gets no privacy credit (P2-11, P2-6).
//!
//! Paper typos fixed here: \[FIX\] Eq. 16's density exponent is `d/2`, not `|P_s|/2`;
//! \[FIX\] Eq. 65's inequality is `ζ₂ ≥ ζ₁ − ‖g‖²/σ²` (Eq. 75), not "≤". σ is always a
//! noise multiplier (absolute std = σ·c), and `r = c'/c` is explicit (P2-7).

use crate::math::ln_expm1;
use dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_delta;
use dpattn_core::calibration::normal::{log_normal_cdf, normal_cdf};
use dpattn_core::error::{nonneg_finite, open_unit, positive_finite, rate};
use dpattn_core::{Error, Result};
use libm::{exp, expm1, log, log1p, sqrt};

/// Largest ε searched by [`paper_epsilon_estimate`] (`docs/PAPERS.md` §2.5, "Numerics"); above
/// it ε is reported infinite.
const EPS_MAX: f64 = 200.0;
/// Start, factor and ceiling of the geometric σ scan of [`paper_step_sigma`] (`docs/PAPERS.md`
/// §2.5, "Numerics").
const SIGMA_SCAN_START: f64 = 1e-3;
const SIGMA_SCAN_FACTOR: f64 = 1.25;
const SIGMA_SCAN_MAX: f64 = 1e100;

fn out_of_range(name: &'static str, value: f64, allowed: &'static str) -> Error {
    Error::OutOfRange { name, value, allowed }
}
fn check_d(d: f64) -> Result<f64> {
    if d.is_finite() && d >= 1.0 { Ok(d) } else { Err(out_of_range("d", d, "[1, inf)")) }
}
fn check_steps(steps: u64) -> Result<f64> {
    if steps >= 1 { Ok(steps as f64) } else { Err(out_of_range("steps", 0.0, "[1, 2^64)")) }
}
/// σ > 0 finite with 1/σ² finite (σ ≥ ~7.5e-155), as the scale-free formulas need.
fn check_sigma(sigma: f64) -> Result<f64> {
    let sigma = positive_finite("sigma", sigma)?;
    if (1.0 / (sigma * sigma)).is_finite() {
        Ok(sigma)
    } else {
        Err(out_of_range("sigma", sigma, "(0, inf) with 1/sigma^2 finite"))
    }
}

/// Softplus `sp(x) = ln(1 + eˣ)`, stable for all x (sp(−∞) = 0).
fn softplus(x: f64) -> f64 {
    if x > 0.0 { x + log1p(exp(-x)) } else { log1p(exp(x)) }
}

/// The lognormal `e^Y`, `Y ~ N(mu, sigma2)`, that Lemma 1 matches to a sum of lognormals.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::fenton_wilkinson;
/// let fw = fenton_wilkinson(&[0.0], 1.0)?; // one summand: the identity
/// assert!(fw.mu.abs() < 1e-15 && (fw.sigma2 - 1.0).abs() < 1e-15);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FentonWilkinson {
    /// μ_Y, the mean of the matched log.
    pub mu: f64,
    /// σ_Y², the variance of the matched log.
    pub sigma2: f64,
}

/// F-W from `l1 = LSE(μ)`, `log_ratio = LSE(2μ) − 2·LSE(μ)` and `s²` (the stable form of
/// `docs/PAPERS.md` §2.5).
fn fw_from_logs(l1: f64, log_ratio: f64, s2: f64) -> FentonWilkinson {
    let sigma2 = softplus(ln_expm1(s2) + log_ratio);
    FentonWilkinson { mu: l1 + 0.5 * s2 - 0.5 * sigma2, sigma2 }
}

/// Lemma 1 (Eqs. 8–10): approximate `Σᵢ e^{Yᵢ}`, `Yᵢ ~ N(mu[i], s2)` independent, by one
/// lognormal `e^Y` with matched mean and variance, in log space (`docs/PAPERS.md` §2.5):
/// `σ_Y² = sp(ln expm1(s²) + LSE(2μ) − 2·LSE(μ))` and `μ_Y = LSE(μ) + s²/2 − σ_Y²/2`.
///
/// The paper applies this to *dependent* summands (`docs/PAPERS.md` P2-2); the moments are then
/// not matched.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::fenton_wilkinson;
/// let fw = fenton_wilkinson(&[0.0, 1.0, 2.0], 0.5)?; // docs/PAPERS.md T2-A
/// assert!((fw.mu / 2.5145655158 - 1.0).abs() < 1e-10);
/// assert!((fw.sigma2 / 0.2860808972 - 1.0).abs() < 1e-10);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] if `mu` is empty or has a non-finite entry, or `s2` is NaN,
/// infinite or negative (`s2 = 0` gives `sigma2 = 0`).
pub fn fenton_wilkinson(mu: &[f64], s2: f64) -> Result<FentonWilkinson> {
    let s2 = nonneg_finite("s2", s2)?;
    if mu.is_empty() {
        return Err(out_of_range("mu.len()", 0.0, "[1, inf)"));
    }
    let mut m = f64::NEG_INFINITY;
    for &x in mu {
        if !x.is_finite() {
            return Err(out_of_range("mu[i]", x, "(-inf, inf)"));
        }
        m = m.max(x);
    }
    let (mut s1, mut s2sum) = (0.0, 0.0);
    for &x in mu {
        let e = exp(x - m);
        s1 += e;
        s2sum += e * e;
    }
    let (ln1, ln2) = (log(s1), log(s2sum));
    Ok(fw_from_logs(m + ln1, ln2 - 2.0 * ln1, s2))
}

/// The four quantities of Theorem 6 (Eqs. 26, 83) in scale-free form.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::thm6_terms;
/// let t = thm6_terms(1.0, 2.0, 1.0)?; // docs/PAPERS.md T2-B, row σ = 1, d = 2
/// assert!((t.zeta1 + 0.126928011).abs() < 1e-9 && (t.sigma_z2 - 0.988644017).abs() < 1e-9);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thm6Terms {
    /// ζ₁.
    pub zeta1: f64,
    /// ζ₂.
    pub zeta2: f64,
    /// σ_Z₁ (a standard deviation, not a variance).
    pub sigma_z1: f64,
    /// σ_Z₂.
    pub sigma_z2: f64,
}

/// Theorem 6's ζ₁, ζ₂, σ_Z₁, σ_Z₂ at noise multiplier `sigma`, dimension `d` and
/// `r = c'/c` (the scale-free form of `docs/PAPERS.md` §2.5): with `L = ln(d−1)`,
/// `a₁ = d·r/((d−1)σ²)`, `a₂ = d(1+r)/((d−1)σ²)`, `ζ₁ = −sp(L−a₁)`, `ζ₂ = −sp(L−a₂) − 1/σ²`,
/// `ln R_k = sp(L−2a_k) − 2·sp(L−a_k)`, `σ_Z_k² = sp(ln R_k + ln expm1(1/σ²))`. `d = 1` is the
/// limit `ζ₁ = 0`, `ζ₂ = −1/σ²`, `σ_Z₁ = σ_Z₂ = 1/σ`. `d` is real so that e.g. `8.58e7` can be
/// passed.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::thm6_terms;
/// let t = thm6_terms(0.5, 1000.0, 1.0)?; // docs/PAPERS.md T2-B
/// assert!((t.zeta2 + 4.287022491).abs() < 1e-9 && (t.sigma_z1 - 0.420327665).abs() < 1e-9);
/// assert_eq!(thm6_terms(2.0, 1.0, 1.0)?.zeta2, -0.25);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `sigma` is finite, `> 0` with `1/σ²` finite; `d` is finite
/// and `≥ 1`; `r` is finite and `> 0`.
pub fn thm6_terms(sigma: f64, d: f64, r: f64) -> Result<Thm6Terms> {
    let sigma = check_sigma(sigma)?;
    let d = check_d(d)?;
    let r = positive_finite("batch_clip_ratio", r)?;
    Ok(terms(sigma, d, r))
}

fn terms(sigma: f64, d: f64, r: f64) -> Thm6Terms {
    let s2 = 1.0 / (sigma * sigma);
    if d == 1.0 {
        let s = sqrt(s2);
        return Thm6Terms { zeta1: 0.0, zeta2: -s2, sigma_z1: s, sigma_z2: s };
    }
    let l = log(d - 1.0);
    let a1 = d * r / (d - 1.0) * s2;
    let a2 = d * (1.0 + r) / (d - 1.0) * s2;
    let le = ln_expm1(s2);
    let sz = |a: f64| sqrt(softplus(softplus(l - 2.0 * a) - 2.0 * softplus(l - a) + le));
    Thm6Terms {
        zeta1: -softplus(l - a1),
        zeta2: -softplus(l - a2) - s2,
        sigma_z1: sz(a1),
        sigma_z2: sz(a2),
    }
}

/// Theorem 6's left-hand side (Eq. 25; `docs/PAPERS.md` §2.5), the paper's "δ(ε)" for one
/// un-amplified step: `h = Φ(σ_Z₁/2 + (ζ₁−ε)/σ_Z₁) − exp(ε + ln Φ(σ_Z₂/2 + (ζ₂−ε)/σ_Z₂))`.
///
/// It approximates a lower bound and can be **negative** (`docs/PAPERS.md` P2-2). For `d = 1` it is
/// the analytic Gaussian δ of Balle & Wang with sensitivity 1 ([`analytic_gaussian_delta`]), which
/// is what is returned.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::thm6_h;
/// assert!((thm6_h(1.0, 1.0, 1.0, 1.0)? - 0.1269367375).abs() < 1e-10); // docs/PAPERS.md T2-B
/// assert!((thm6_h(0.0, 0.5, 1000.0, 1.0)? + 0.0831841).abs() < 5e-8); // negative
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`thm6_terms`], and [`Error::OutOfRange`] unless `epsilon` is finite and `≥ 0`.
pub fn thm6_h(epsilon: f64, sigma: f64, d: f64, r: f64) -> Result<f64> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    let t = thm6_terms(sigma, d, r)?;
    h_of(eps, sigma, d, &t)
}

fn h_of(eps: f64, sigma: f64, d: f64, t: &Thm6Terms) -> Result<f64> {
    if d == 1.0 {
        return analytic_gaussian_delta(eps, sigma, 1.0);
    }
    let x1 = 0.5 * t.sigma_z1 + (t.zeta1 - eps) / t.sigma_z1;
    let x2 = 0.5 * t.sigma_z2 + (t.zeta2 - eps) / t.sigma_z2;
    Ok(normal_cdf(x1) - exp(eps + log_normal_cdf(x2)))
}

/// h with inputs already validated.
fn h_raw(eps: f64, sigma: f64, d: f64, r: f64) -> Result<f64> {
    h_of(eps, sigma, d, &terms(sigma, d, r))
}

/// Theorem 2 (amplification by subsampling, Steinke Thm 29): an `(ε, δ)`-DP step run on a
/// rate-`q` subsample is `(ln(1 + q(e^ε − 1)), qδ)`-DP, computed as `log1p(q·expm1(ε))`.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::paper_amplify;
/// let (e, d) = paper_amplify(1.0, 1e-5, 0.01)?; // docs/PAPERS.md T2-C
/// assert!((e - 0.0170368632).abs() < 1e-10 && (d / 1e-7 - 1.0).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε ≥ 0` finite, `δ ∈ [0, 1]`, `q ∈ (0, 1]`.
pub fn paper_amplify(epsilon: f64, delta: f64, q: f64) -> Result<(f64, f64)> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    let q = rate("sampling_rate", q)?;
    if !(0.0..=1.0).contains(&delta) {
        return Err(out_of_range("delta", delta, "[0, 1]"));
    }
    let e1 = log1p(q * expm1(eps));
    let e1 = if e1.is_finite() { e1 } else { eps + log(q + (1.0 - q) * exp(-eps)) };
    Ok((e1, q * delta))
}

/// The inverse of [`paper_amplify`] (the inverse pipeline of `docs/PAPERS.md` §2.5):
/// `(ln(1 + (e^ε₁ − 1)/q), δ₁/q)`.
/// `δ₁/q` may exceed 1; the caller decides whether that is usable.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{
///     paper_advanced_composition_inverse, paper_deamplify,
/// };
/// let e1 = paper_advanced_composition_inverse(1.0, 500, 2.5e-6)?;
/// let (e0, d0) = paper_deamplify(e1, 5e-9, 0.02)?; // docs/PAPERS.md T2-D step 3
/// assert!((e0 - 0.3603937045).abs() < 1e-9 && (d0 / 2.5e-7 - 1.0).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε₁ ≥ 0` finite, `δ₁ ∈ [0, 1]`, `q ∈ (0, 1]`.
pub fn paper_deamplify(eps1: f64, delta1: f64, q: f64) -> Result<(f64, f64)> {
    let e1 = nonneg_finite("eps1", eps1)?;
    let q = rate("sampling_rate", q)?;
    if !(0.0..=1.0).contains(&delta1) {
        return Err(out_of_range("delta1", delta1, "[0, 1]"));
    }
    let e0 = log1p(expm1(e1) / q);
    let e0 = if e0.is_finite() { e0 } else { e1 + log(-expm1(-e1) / q + exp(-e1)) };
    Ok((e0, delta1 / q))
}

/// Theorem 1 (advanced composition, Steinke Thm 22, CDP form) for `steps` identical
/// ε₁-DP steps: `min{T·ε₁, T/2·ε₁² + ε₁·√(2T·ln(1/δ'))}`. The total δ is `T·δ_step + δ'`.
/// This is the paper's form, not Dwork–Rothblum–Vadhan's.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::paper_advanced_composition;
/// let e = paper_advanced_composition(0.01, 1000, 1e-6)?; // docs/PAPERS.md T2-C
/// assert!((e - 1.7122581).abs() < 5e-8);
/// assert_eq!(paper_advanced_composition(0.5, 10, 1e-5)?, 5.0); // basic branch
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε₁ ≥ 0` finite, `steps ≥ 1`, `δ' ∈ (0, 1)`.
pub fn paper_advanced_composition(eps1: f64, steps: u64, delta_slack: f64) -> Result<f64> {
    let e1 = nonneg_finite("eps1", eps1)?;
    let t = check_steps(steps)?;
    let ds = open_unit("delta_slack", delta_slack)?;
    Ok((t * e1).min(0.5 * t * e1 * e1 + e1 * sqrt(2.0 * t * log(1.0 / ds))))
}

/// The per-step ε₁ that [`paper_advanced_composition`] maps to `eps` (the inverse pipeline of
/// `docs/PAPERS.md` §2.5):
/// `max(ε/T, (−b + √(b² + 2Tε))/T)` with `b = √(2T·ln(1/δ'))`, the second term evaluated
/// as `2ε/(b + √(b² + 2Tε))` to avoid cancellation.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::paper_advanced_composition_inverse;
/// let e1 = paper_advanced_composition_inverse(1.0, 500, 2.5e-6)?; // docs/PAPERS.md T2-D step 2
/// assert!((e1 - 0.0086404403).abs() < 1e-10);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε ≥ 0` finite, `steps ≥ 1`, `δ' ∈ (0, 1)`.
pub fn paper_advanced_composition_inverse(eps: f64, steps: u64, delta_slack: f64) -> Result<f64> {
    let e = nonneg_finite("epsilon", eps)?;
    let t = check_steps(steps)?;
    let ds = open_unit("delta_slack", delta_slack)?;
    let b = sqrt(2.0 * t * log(1.0 / ds));
    Ok((e / t).max(2.0 * e / (b + sqrt(b * b + 2.0 * t * e))))
}

/// Whether the per-step budget is de-amplified before Theorem 6 is applied (`docs/PAPERS.md`
/// P2-9).
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::Amplification;
/// assert_eq!(Amplification::default(), Amplification::Paper);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Amplification {
    /// Thm 6 → amplify (Thm 2) → compose (Thm 1), the default reading (`docs/PAPERS.md` §2.5).
    #[default]
    Paper,
    /// Thm 6 is applied to the composed-away per-step budget directly: `ε₀ = ε₁`,
    /// `δ₀ = δ_step` (the variant of `docs/PAPERS.md` P2-9).
    NoAmplification,
}

/// The inputs of the paper's accountant (`docs/PAPERS.md` §2.5).
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{Amplification, PaperQuery};
/// let mut q = PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?; // ViT/CIFAR-100, docs/PAPERS.md T2-D
/// q.amplification = Amplification::NoAmplification;
/// assert_eq!((q.batch_clip_ratio, q.delta_split), (1.0, 0.5));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperQuery {
    /// Poisson sampling rate q = B/N, in (0, 1].
    pub sampling_rate: f64,
    /// Number of steps T ≥ 1.
    pub steps: u64,
    /// The "dimension" d of Theorem 6, real and ≥ 1 (the paper uses #parameters, which
    /// `docs/PAPERS.md` P2-5 shows is wrong; `d = 1` is the unshuffled Gaussian).
    pub d: f64,
    /// Total δ, in (0, 1).
    pub delta: f64,
    /// r = c'/c, the batch-clip bound over the per-example clip bound (> 0, default 1).
    pub batch_clip_ratio: f64,
    /// ρ in (0, 1): δ' = ρδ goes to composition, (1−ρ)δ/T to each step (default 0.5).
    pub delta_split: f64,
    /// Order of operations (default [`Amplification::Paper`]).
    pub amplification: Amplification,
}

impl PaperQuery {
    /// A query with `r = 1`, `ρ = 0.5` and [`Amplification::Paper`].
    ///
    /// ```
    /// use dpattn_paper::weight_shuffle::paper_estimate::PaperQuery;
    /// assert!(PaperQuery::new(0.01, 1000, 1e6, 1e-5).is_ok());
    /// assert!(PaperQuery::new(0.0, 1000, 1e6, 1e-5).is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `q ∈ (0, 1]`, `steps ≥ 1`, `d ≥ 1` finite, `δ ∈ (0, 1)`.
    pub fn new(sampling_rate: f64, steps: u64, d: f64, delta: f64) -> Result<Self> {
        let q = PaperQuery {
            sampling_rate,
            steps,
            d,
            delta,
            batch_clip_ratio: 1.0,
            delta_split: 0.5,
            amplification: Amplification::Paper,
        };
        q.validate()?;
        Ok(q)
    }

    fn validate(&self) -> Result<()> {
        rate("sampling_rate", self.sampling_rate)?;
        check_steps(self.steps)?;
        check_d(self.d)?;
        open_unit("delta", self.delta)?;
        positive_finite("batch_clip_ratio", self.batch_clip_ratio)?;
        open_unit("delta_split", self.delta_split)?;
        Ok(())
    }

    /// (δ', δ_step, δ₀) of the forward pipeline (`docs/PAPERS.md` §2.5), or `Infeasible` if
    /// δ₀ ≥ 1.
    fn split(&self) -> Result<(f64, f64, f64)> {
        self.validate()?;
        let ds = self.delta_split * self.delta;
        let dstep = (1.0 - self.delta_split) * self.delta / self.steps as f64;
        let d0 = match self.amplification {
            Amplification::Paper => dstep / self.sampling_rate,
            Amplification::NoAmplification => dstep,
        };
        if d0 >= 1.0 {
            return Err(Error::Infeasible {
                condition: "per-step delta0 = (1 - rho) * delta / (steps * q) < 1",
                lhs: d0,
                rhs: 1.0,
            });
        }
        Ok((ds, dstep, d0))
    }
}

/// Warnings attached to a paper estimate (`docs/PAPERS.md` §2.5). None of them makes it a
/// guarantee.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::PaperFlags;
/// assert!(!PaperFlags::default().degenerate_zero);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PaperFlags {
    /// `h(0; σ) ≤ δ₀` at the reported σ: the pipeline reports ε = 0 (forward) or certifies
    /// ε = 0 per step (inverse), although the true distance between the outputs is positive.
    pub degenerate_zero: bool,
    /// `h(ε₀; σ) < 0` or `h(0; σ) < 0` at the reported point. h approximates a quantity that
    /// is exactly ≥ 0, so this proves the F-W step is inaccurate there (`docs/PAPERS.md` P2-2).
    pub negative_approximation: bool,
    /// Inverse only: the shuffled σ is ≥ the unshuffled σ₀ (Alg. 1 line 11 would then use
    /// σ₀ and not shuffle).
    pub fell_back: bool,
}

/// The paper's total ε for a given σ ([`paper_epsilon_estimate`]). **Not a DP guarantee**
/// (see the module docs); there is no conversion into a budget or a ledger charge.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_epsilon_estimate, PaperQuery};
/// let est = paper_epsilon_estimate(0.3, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// assert!(est.epsilon == 0.0 && est.flags.degenerate_zero); // docs/PAPERS.md T2-E: the cliff
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// It cannot be charged to a ledger (`docs/PAPERS.md` P2-AC10):
///
/// ```compile_fail,E0308
/// use dpattn_core::accounting::ledger::Charge;
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_epsilon_estimate, PaperQuery};
/// let est = paper_epsilon_estimate(0.3, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// let _charge: Charge = Charge::Approx(est);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// ```compile_fail,E0277
/// use dpattn_core::PrivacyBudget;
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_epsilon_estimate, PaperQuery};
/// let est = paper_epsilon_estimate(0.3, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// let _budget: PrivacyBudget = est.into();
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperEstimate {
    /// Total ε after composition (`f64::INFINITY` if `h(200; σ) > δ₀`).
    pub epsilon: f64,
    /// Per-step ε₁ after amplification (= ε₀ with [`Amplification::NoAmplification`]).
    pub eps1: f64,
    /// Per-step ε₀ = inf{ε ≥ 0 : h(ε; σ, d, r) ≤ δ₀}.
    pub eps0: f64,
    /// Per-step δ₀ that Theorem 6 was held to.
    pub delta0: f64,
    /// The raw h(0; σ, d, r) (may be negative).
    pub h_at_zero: f64,
    /// Warnings.
    pub flags: PaperFlags,
}

/// The paper's forward pipeline (`docs/PAPERS.md` §2.5): per-step ε₀ from Theorem 6, amplified
/// (Thm 2) and composed (Thm 1). ε₀ = 0 with `degenerate_zero` when `h(0) ≤ δ₀`; all three ε are
/// `f64::INFINITY` when `h(200) > δ₀`; otherwise ε₀ is bisected on `[0, 200]` to relative 1e-15, on
/// the side where `h ≤ δ₀`.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_epsilon_estimate, PaperQuery};
/// let est = paper_epsilon_estimate(0.273, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// assert!((est.epsilon - 1.15681).abs() < 1e-5); // docs/PAPERS.md T2-E
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for an invalid `sigma` (see [`thm6_terms`]) or query field;
/// [`Error::Infeasible`] if δ₀ ≥ 1.
pub fn paper_epsilon_estimate(sigma: f64, query: &PaperQuery) -> Result<PaperEstimate> {
    let sigma = check_sigma(sigma)?;
    let (ds, _, d0) = query.split()?;
    let (d, r) = (query.d, query.batch_clip_ratio);
    let h0 = h_raw(0.0, sigma, d, r)?;
    let mut flags = PaperFlags { negative_approximation: h0 < 0.0, ..PaperFlags::default() };
    let eps0 = if h0 <= d0 {
        flags.degenerate_zero = true;
        0.0
    } else if h_raw(EPS_MAX, sigma, d, r)? > d0 {
        let inf = f64::INFINITY;
        return Ok(PaperEstimate {
            epsilon: inf,
            eps1: inf,
            eps0: inf,
            delta0: d0,
            h_at_zero: h0,
            flags,
        });
    } else {
        let e0 = bisect(0.0, EPS_MAX, |e| Ok(h_raw(e, sigma, d, r)? <= d0))?;
        flags.negative_approximation |= h_raw(e0, sigma, d, r)? < 0.0;
        e0
    };
    let eps1 = match query.amplification {
        Amplification::Paper => paper_amplify(eps0, 0.0, query.sampling_rate)?.0,
        Amplification::NoAmplification => eps0,
    };
    let epsilon = paper_advanced_composition(eps1, query.steps, ds)?;
    Ok(PaperEstimate { epsilon, eps1, eps0, delta0: d0, h_at_zero: h0, flags })
}

/// The paper's σ for a target ε ([`paper_sigma_estimate`]). **Not a DP guarantee**; there
/// is no conversion into a budget or a ledger charge.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_sigma_estimate, PaperQuery};
/// let est = paper_sigma_estimate(1.0, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// assert!(est.sigma < est.sigma0 && !est.flags.fell_back);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperSigmaEstimate {
    /// Shuffled noise multiplier: min σ with h(ε₀; σ, d, r) ≤ δ₀. Reported even when
    /// [`PaperFlags::fell_back`] is set (Alg. 1 would then use `sigma0`).
    pub sigma: f64,
    /// The same pipeline with d = 1 (analytic Gaussian), the paper's unshuffled σ₀.
    pub sigma0: f64,
    /// Per-step ε₁ from inverting advanced composition.
    pub eps1: f64,
    /// Per-step ε₀ Theorem 6 was solved at (= ε₁ with [`Amplification::NoAmplification`]).
    pub eps0: f64,
    /// Per-step δ₀ Theorem 6 was solved at.
    pub delta0: f64,
    /// Warnings (see [`PaperFlags`]).
    pub flags: PaperFlags,
}

/// The paper's inverse pipeline (`docs/PAPERS.md` §2.5, Alg. 1 lines 2–3): invert composition, undo
/// amplification, then solve Theorem 6 for σ with [`paper_step_sigma`] at `d` (σ) and at `d = 1`
/// (σ₀). `fell_back` is set when σ ≥ σ₀; `sigma` still holds the shuffled solution.
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::{paper_sigma_estimate, PaperQuery};
/// let est = paper_sigma_estimate(1.0, &PaperQuery::new(0.02, 500, 8.58e7, 5e-6)?)?;
/// assert!((est.sigma / 0.2731574252 - 1.0).abs() < 1e-8); // docs/PAPERS.md T2-D
/// assert!((est.sigma0 / 11.7516934 - 1.0).abs() < 1e-7);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `epsilon ≥ 0` finite and the query is valid;
/// [`Error::Infeasible`] if δ₀ ≥ 1 or no σ ≤ 1e100 satisfies Theorem 6.
pub fn paper_sigma_estimate(epsilon: f64, query: &PaperQuery) -> Result<PaperSigmaEstimate> {
    let eps = nonneg_finite("epsilon", epsilon)?;
    let (ds, dstep, _) = query.split()?;
    let eps1 = paper_advanced_composition_inverse(eps, query.steps, ds)?;
    let (eps0, delta0) = match query.amplification {
        Amplification::Paper => paper_deamplify(eps1, dstep, query.sampling_rate)?,
        Amplification::NoAmplification => (eps1, dstep),
    };
    let (d, r) = (query.d, query.batch_clip_ratio);
    let sigma = paper_step_sigma(eps0, delta0, d, r)?;
    let sigma0 = paper_step_sigma(eps0, delta0, 1.0, r)?;
    let (h_eps0, h0) = (h_raw(eps0, sigma, d, r)?, h_raw(0.0, sigma, d, r)?);
    let flags = PaperFlags {
        degenerate_zero: h0 <= delta0,
        negative_approximation: h_eps0 < 0.0 || h0 < 0.0,
        fell_back: sigma >= sigma0,
    };
    Ok(PaperSigmaEstimate { sigma, sigma0, eps1, eps0, delta0, flags })
}

/// The last step of the inverse pipeline (`docs/PAPERS.md` §2.5): the smallest noise multiplier σ
/// with `h(ε₀; σ, d, r) ≤ δ₀` (root finder of §2.5, "Numerics"). A geometric scan from σ = 1e-3
/// (×1.25) stops at the first σ with `h ≤ δ₀` (1e-3 itself is returned if it already qualifies);
/// bisection then narrows the last step to relative 1e-15 and returns the end where `h ≤ δ₀`. The
/// scan cannot skip the first crossing: h decreases in σ while positive and does not become
/// positive again after it turns negative (`docs/PAPERS.md` §2.5).
///
/// ```
/// use dpattn_paper::weight_shuffle::paper_estimate::paper_step_sigma;
/// let s = paper_step_sigma(1.0, 1e-5, 100.0, 1.0)?; // docs/PAPERS.md T2-F
/// assert!((s - 0.51335).abs() < 1e-5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `ε₀ ≥ 0` finite, `δ₀ ∈ (0, 1)`, `d ≥ 1` finite, `r > 0`
/// finite; [`Error::Infeasible`] if no σ ≤ 1e100 satisfies the condition.
pub fn paper_step_sigma(eps0: f64, delta0: f64, d: f64, r: f64) -> Result<f64> {
    let e0 = nonneg_finite("eps0", eps0)?;
    let d0 = open_unit("delta0", delta0)?;
    let d = check_d(d)?;
    let r = positive_finite("batch_clip_ratio", r)?;
    let ok = |s: f64| Ok(h_raw(e0, s, d, r)? <= d0);
    let mut hi = SIGMA_SCAN_START;
    if ok(hi)? {
        return Ok(hi); // the scan's floor (unreachable in practice: h(ε₀; 1e-3) ≈ 1)
    }
    loop {
        hi *= SIGMA_SCAN_FACTOR;
        if ok(hi)? {
            break;
        }
        if hi > SIGMA_SCAN_MAX {
            return Err(Error::Infeasible {
                condition: "Theorem 6: h(eps0; sigma, d, r) <= delta0 for some sigma <= 1e100",
                lhs: h_raw(e0, hi, d, r)?,
                rhs: d0,
            });
        }
    }
    bisect(hi / SIGMA_SCAN_FACTOR, hi, ok)
}

/// Bisection for a predicate false at `lo` and true at `hi`; returns the `true` end once
/// `hi − lo ≤ 1e-15·hi` or the two are adjacent floats.
fn bisect(mut lo: f64, mut hi: f64, mut ok: impl FnMut(f64) -> Result<bool>) -> Result<f64> {
    for _ in 0..2200 {
        let mid = lo + 0.5 * (hi - lo);
        if mid <= lo || mid >= hi || hi - lo <= 1e-15 * hi {
            break;
        }
        if ok(mid)? { hi = mid } else { lo = mid }
    }
    Ok(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(got: f64, want: f64, tol: f64, what: &str) {
        assert!((got - want).abs() <= tol, "{what}: got {got:.12e}, table {want:e} (tol {tol:e})");
    }
    fn near_rel(got: f64, want: f64, tol: f64, what: &str) {
        near(got, want, tol * want.abs(), what);
    }
    fn vit() -> PaperQuery {
        PaperQuery::new(0.02, 500, 8.58e7, 5e-6).unwrap()
    }

    #[test]
    fn fenton_wilkinson_table_t2_a() {
        let fw = fenton_wilkinson(&[0.0, 1.0, 2.0], 0.5).unwrap();
        near_rel(fw.mu, 2.5145655158, 1e-10, "mu_Y");
        near_rel(fw.sigma2, 0.2860808972, 1e-10, "sigma_Y^2");
        let fw = fenton_wilkinson(&[0.0], 1.0).unwrap();
        near(fw.mu, 0.0, 1e-15, "identity mu");
        near(fw.sigma2, 1.0, 1e-15, "identity sigma2");
        // Row μ = 0 (10⁸ copies), s² = 0.0625: a slice of 10⁸ entries is not allocated here.
        // For n equal zeros LSE(μ) = LSE(2μ) = ln n, so the core formula is checked with
        // l1 = ln n and log_ratio = LSE(2μ) − 2·LSE(μ) = −ln n.
        let ln_n = log(1e8);
        let fw = fw_from_logs(ln_n, -ln_n, 0.0625);
        near_rel(fw.mu, 18.4519307436, 1e-11, "1e8 zeros mu_Y");
        near_rel(fw.sigma2, 6.4494459e-10, 1e-7, "1e8 zeros sigma_Y^2");
        // s2 = 0 gives a degenerate (point-mass) log.
        assert_eq!(fenton_wilkinson(&[0.0, 1.0], 0.0).unwrap().sigma2, 0.0);
    }

    #[test]
    fn thm6_terms_and_h_table_t2_b() {
        // σ, d, r, ζ1, ζ2, σ_Z1, σ_Z2, h(0), h(0.5), h(1)
        #[rustfmt::skip]
        let rows: [[f64; 10]; 6] = [
            [1.0, 2.0, 1.0, -0.126928011, -1.018149928, 0.926059802, 0.988644017, 0.3316313, 0.1698362, 0.0598354],
            [1.0, 10.0, 1.0, -1.376934920, -1.680726466, 0.442361571, 0.629846529, -0.0073807, -0.0013291, -0.0001100],
            [0.5, 1000.0, 1.0, -2.956170275, -4.287022491, 0.420327665, 1.854768115, -0.0831841, -0.0809689, -0.0740257],
            [0.3, 1e6, 1.0, -2.769155179, -11.111334444, 2.361525137, 3.333266334, 0.4554775, 0.3622612, 0.2720871],
            [0.2731574252, 8.58e7, 1.0, -4.873073899, -13.402330831, 1.918771611, 3.660839044, 0.0234377, -0.0077100, -0.0303149],
            [0.27, 1e8, 2.0, -0.000121667, -13.717421125, 3.703670854, 3.703703704, 0.9359494, 0.9182978, 0.8971452],
        ];
        for row in rows {
            let [s, d, r, z1, z2, sz1, sz2, h0, h05, h1] = row;
            let t = thm6_terms(s, d, r).unwrap();
            near(t.zeta1, z1, 1e-9, "zeta1");
            near(t.zeta2, z2, 1e-9, "zeta2");
            near(t.sigma_z1, sz1, 1e-9, "sigma_z1");
            near(t.sigma_z2, sz2, 1e-9, "sigma_z2");
            near(thm6_h(0.0, s, d, r).unwrap(), h0, 5e-8, "h(0)");
            near(thm6_h(0.5, s, d, r).unwrap(), h05, 5e-8, "h(0.5)");
            near(thm6_h(1.0, s, d, r).unwrap(), h1, 5e-8, "h(1)");
        }
    }

    #[test]
    fn thm6_d1_is_analytic_gaussian() {
        near(thm6_h(1.0, 1.0, 1.0, 1.0).unwrap(), 0.1269367375, 5e-11, "δ(1, 1)");
        near(thm6_h(0.5, 2.0, 1.0, 1.0).unwrap(), 0.0524403233, 5e-11, "δ(0.5, 2)");
        near(thm6_h(0.36039, 11.7517, 1.0, 1.0).unwrap(), 2.5005e-7, 5e-12, "δ(0.36039, 11.7517)");
        near(thm6_h(1.0, 3.73063, 1.0, 1.0).unwrap(), 1.00001e-5, 5e-11, "δ(1, 3.73063)");
        for (e, s, r) in [(0.0, 0.3, 1.0), (1.0, 1.0, 7.0), (3.0, 0.7, 0.1), (0.2, 40.0, 1.0)] {
            let a = analytic_gaussian_delta(e, s, 1.0).unwrap();
            near(thm6_h(e, s, 1.0, r).unwrap(), a, 1e-15, "P2-AC3");
            // The general formula tends to the same limit as d → 1 (docs/PAPERS.md §2.5).
            near(thm6_h(e, s, 1.0 + 1e-12, r).unwrap(), a, 1e-12, "d → 1 limit");
        }
    }

    #[test]
    fn composition_and_amplification_table_t2_c() {
        let (e, d) = paper_amplify(1.0, 1e-5, 0.01).unwrap();
        near(e, 0.0170368632, 5e-11, "amplify ε");
        near_rel(d, 1e-7, 1e-12, "amplify δ");
        near(paper_advanced_composition(0.01, 1000, 1e-6).unwrap(), 1.7122581, 5e-8, "adv_comp");
        assert_eq!(paper_advanced_composition(0.5, 10, 1e-5).unwrap(), 5.0);
        // Round trips (inverse of each other by construction).
        let (e0, d0) = paper_deamplify(e, d, 0.01).unwrap();
        near(e0, 1.0, 1e-13, "deamplify ε");
        near_rel(d0, 1e-5, 1e-13, "deamplify δ");
        let e1 = paper_advanced_composition_inverse(1.7122581, 1000, 1e-6).unwrap();
        near(e1, 0.01, 1e-9, "adv_comp inverse");
        // Large ε does not overflow.
        assert!(paper_amplify(800.0, 0.0, 0.5).unwrap().0.is_finite());
        assert!(paper_deamplify(800.0, 0.0, 1e-3).unwrap().0.is_finite());
    }

    #[test]
    fn inverse_vit_table_t2_d() {
        let est = paper_sigma_estimate(1.0, &vit()).unwrap();
        near(est.eps1, 0.0086404403, 5e-11, "ε1");
        near(est.eps0, 0.3603937045, 5e-11, "ε0");
        near_rel(est.delta0, 2.5e-7, 1e-12, "δ0");
        near_rel(est.sigma, 0.2731574252, 1e-8, "σ");
        near_rel(est.sigma0, 11.7516934, 1e-7, "σ0");
        assert_eq!(est.flags, PaperFlags::default());
    }

    #[test]
    fn forward_vit_table_t2_e() {
        // σ, ε0, ε1, total ε (paper), unshuffled total ε (d = 1); printed to 6 digits.
        #[rustfmt::skip]
        let rows: [[f64; 5]; 6] = [
            [0.250, 7.6484, 3.75947, 1879.74, 11773.8],
            [0.260, 4.20228, 0.840173, 271.895, 11089.4],
            [0.270, 1.26950, 0.0499149, 6.29194, 10466.5],
            [0.272, 0.694935, 0.0198728, 2.35578, 10348.6],
            [0.273, 0.406018, 0.00996676, 1.15681, 10290.4],
            [0.274, 0.115432, 0.00244418, 0.279091, 10232.7],
        ];
        let q1 = PaperQuery { d: 1.0, ..vit() };
        for [s, e0, e1, e, e_ac] in rows {
            let est = paper_epsilon_estimate(s, &vit()).unwrap();
            near_rel(est.eps0, e0, 1e-5, "ε0");
            near_rel(est.eps1, e1, 1e-5, "ε1");
            near_rel(est.epsilon, e, 1e-5, "total ε");
            assert_eq!(est.flags, PaperFlags::default());
            near_rel(paper_epsilon_estimate(s, &q1).unwrap().epsilon, e_ac, 1e-5, "AC ε");
        }
        for (s, e_ac) in [(0.275, 10175.6), (0.3, 8895.17), (1.0, 736.054)] {
            let est = paper_epsilon_estimate(s, &vit()).unwrap();
            assert_eq!((est.epsilon, est.eps1, est.eps0), (0.0, 0.0, 0.0), "σ = {s}");
            assert!(est.flags.degenerate_zero && est.h_at_zero <= est.delta0);
            assert_eq!(est.flags.negative_approximation, est.h_at_zero < 0.0);
            near_rel(paper_epsilon_estimate(s, &q1).unwrap().epsilon, e_ac, 1e-5, "AC ε");
        }
    }

    #[test]
    fn forward_other_points_table_t2_e() {
        // q = 0.01, T = 1000, δ = 1e-5: σ, d, ε0, ε1, total ε.
        let rows: [[f64; 5]; 7] = [
            [1.0, 1.0, 5.0302, 0.924115, 571.381],
            [2.0, 1.0, 2.3275, 0.0884891, 17.741],
            [0.31, 1e6, 1.04725, 0.018329, 3.03178],
            [0.30, 1e6, 3.00411, 0.175366, 42.7766],
            [0.29, 1e6, 5.22276, 1.04537, 709.736],
            [0.27, 1e8, 0.953036, 0.0158101, 2.59521],
            [0.26, 1e8, 3.89951, 0.394594, 139.505],
        ];
        for [s, d, e0, e1, e] in rows {
            let est =
                paper_epsilon_estimate(s, &PaperQuery::new(0.01, 1000, d, 1e-5).unwrap()).unwrap();
            near_rel(est.eps0, e0, 1e-5, "ε0");
            near_rel(est.eps1, e1, 1e-5, "ε1");
            near_rel(est.epsilon, e, 1e-5, "total ε");
        }
        let est = paper_epsilon_estimate(0.55, &PaperQuery::new(0.01, 1000, 100.0, 1e-5).unwrap())
            .unwrap();
        assert!(est.epsilon == 0.0 && est.flags.degenerate_zero);
        // Tiny σ: h(200) > δ0, reported as an infinite estimate, not an error.
        let est =
            paper_epsilon_estimate(0.01, &PaperQuery::new(0.01, 1000, 1.0, 1e-5).unwrap()).unwrap();
        assert!(est.epsilon.is_infinite() && est.eps0.is_infinite());
    }

    #[test]
    fn per_step_table_t2_f() {
        let ds = [1.0, 2.0, 10.0, 100.0, 1e4, 1e6, 8.58e7, 1e8, 1.1e8, 1.24e8, 1.25e8, 8.38e8, 1e9];
        #[rustfmt::skip]
        let rows: [(f64, f64, [f64; 13]); 6] = [
            (0.1, 1e-5, [30.74957, 2.70675, 0.81460, 0.54427, 0.38528, 0.31502, 0.27405, 0.27291, 0.27221, 0.27134, 0.27128, 0.25843, 0.25733]),
            (0.5, 1e-5, [7.03183, 1.45294, 0.74973, 0.52941, 0.38112, 0.31289, 0.27267, 0.27155, 0.27086, 0.27000, 0.26994, 0.25728, 0.25619]),
            (1.0, 1e-5, [3.73063, 1.16121, 0.69555, 0.51335, 0.37611, 0.31025, 0.27094, 0.26984, 0.26916, 0.26831, 0.26826, 0.25582, 0.25475]),
            (1.0, 1e-6, [4.22468, 1.16125, 0.69556, 0.51335, 0.37611, 0.31025, 0.27094, 0.26984, 0.26916, 0.26831, 0.26826, 0.25582, 0.25475]),
            (0.36, 2.5e-7, [11.76381, 1.63266, 0.76948, 0.53438, 0.38257, 0.31364, 0.27316, 0.27203, 0.27134, 0.27047, 0.27041, 0.25768, 0.25659]),
            (2.0, 1e-7, [2.44906, 0.95492, 0.62814, 0.48727, 0.36667, 0.30504, 0.26745, 0.26639, 0.26574, 0.26493, 0.26487, 0.25287, 0.25184]),
        ];
        for (e0, d0, cells) in rows {
            for (d, want) in ds.iter().zip(cells) {
                let s = paper_step_sigma(e0, d0, *d, 1.0).unwrap();
                near(s, want, 1e-5, "per-step σ*");
                assert!(thm6_h(e0, s, *d, 1.0).unwrap() <= d0);
            }
        }
    }

    #[test]
    fn heatmap_table_t2_f() {
        // Total ε → σ, q = 0.02, T = 500, δ = 5e-6; printed to 4 decimals.
        let ds = [1.0, 10.0, 100.0, 1e4, 1e6, 1e8, 1e9];
        let rows: [(f64, [f64; 7]); 2] = [
            (0.25, [37.9402, 0.8138, 0.5441, 0.3852, 0.3150, 0.2729, 0.2573]),
            (4.0, [4.5799, 0.6972, 0.5139, 0.3763, 0.3103, 0.2699, 0.2548]),
        ];
        for (eps, cells) in rows {
            for (d, want) in ds.iter().zip(cells) {
                let q = PaperQuery::new(0.02, 500, *d, 5e-6).unwrap();
                near(paper_sigma_estimate(eps, &q).unwrap().sigma, want, 5e-5, "heatmap σ");
            }
        }
    }

    #[test]
    fn fig3_analogue_table_t2_g() {
        // ViT row: ε, shuffled σ (4 digits), AC0 σ (4 significant digits, tolerance 5e-3/5e-4).
        let rows = [
            (0.1, 0.2742, 87.10, 5e-3),
            (0.25, 0.2740, 37.94, 5e-3),
            (0.5, 0.2737, 20.72, 5e-3),
            (1.0, 0.2732, 11.75, 5e-3),
            (2.0, 0.2723, 7.067, 5e-4),
            (4.0, 0.2710, 4.580, 5e-4),
        ];
        for (eps, sh, ac0, tol) in rows {
            let est = paper_sigma_estimate(eps, &vit()).unwrap();
            near(est.sigma, sh, 5e-5, "ViT sh");
            near(est.sigma0, ac0, tol, "ViT AC0");
        }
        // r sweep at ε = 1.
        let sweep = [
            (0.01, 0.1738, 5e-5),
            (0.1, 0.1811, 5e-5),
            (0.5, 0.2180, 5e-5),
            (1.0, 0.2732, 5e-5),
            (2.0, 0.3588, 5e-5),
            (10.0, 0.7464, 5e-5),
            (100.0, 2.329, 5e-4),
            (1000.0, 7.106, 5e-4),
        ];
        for (r, want, tol) in sweep {
            let q = PaperQuery { batch_clip_ratio: r, ..vit() };
            near(paper_sigma_estimate(1.0, &q).unwrap().sigma, want, tol, "r sweep");
        }
        let q = PaperQuery { batch_clip_ratio: 1000.0, ..vit() };
        near(paper_sigma_estimate(4.0, &q).unwrap().sigma, 4.5799, 5e-5, "ε = 4, r = 1000");
        // δ-split ρ ∈ {0.1, 0.5, 0.9}.
        for (rho, want) in [(0.1, 0.27322), (0.5, 0.27316), (0.9, 0.27313)] {
            let q = PaperQuery { delta_split: rho, ..vit() };
            near(paper_sigma_estimate(1.0, &q).unwrap().sigma, want, 5e-6, "ρ sweep");
        }
    }

    #[test]
    fn no_amplification_p2_9() {
        let q = PaperQuery { amplification: Amplification::NoAmplification, ..vit() };
        let est = paper_sigma_estimate(1.0, &q).unwrap();
        near(est.sigma, 0.27437, 5e-6, "shuffled σ");
        near(est.sigma0, 490.31, 5e-3, "unshuffled σ0");
        assert_eq!(est.eps0, est.eps1);
        near_rel(est.delta0, 5e-9, 1e-12, "δ0 = δ_step");
    }

    #[test]
    fn bad_inputs_are_out_of_range() {
        let oor = |r: Result<f64>| assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
        let nan = f64::NAN;
        #[rustfmt::skip]
        let cases = [(nan, 1.0, 2.0, 1.0), (-0.1, 1.0, 2.0, 1.0), (1.0, 0.0, 2.0, 1.0),
            (1.0, -1.0, 2.0, 1.0), (1.0, nan, 2.0, 1.0), (1.0, 1.0, 0.5, 1.0), (1.0, 1.0, nan, 1.0),
            (1.0, 1.0, f64::INFINITY, 1.0), (1.0, 1.0, 2.0, 0.0), (1.0, 1e-200, 2.0, 1.0)];
        for (e, s, d, r) in cases {
            oor(thm6_h(e, s, d, r));
        }
        oor(fenton_wilkinson(&[], 1.0).map(|f| f.mu));
        oor(fenton_wilkinson(&[nan], 1.0).map(|f| f.mu));
        oor(fenton_wilkinson(&[0.0], -1.0).map(|f| f.mu));
        #[rustfmt::skip]
        let cases = [(0.0, 10, 2.0, 1e-5), (1.5, 10, 2.0, 1e-5), (nan, 10, 2.0, 1e-5),
            (0.5, 0, 2.0, 1e-5), (0.5, 10, 0.9, 1e-5), (0.5, 10, 2.0, 1.0), (0.5, 10, 2.0, 0.0)];
        for (q, t, d, delta) in cases {
            oor(PaperQuery::new(q, t, d, delta).map(|q| q.d));
        }
        let bad_rho = PaperQuery { delta_split: 1.0, ..vit() };
        oor(paper_sigma_estimate(1.0, &bad_rho).map(|e| e.sigma));
        oor(paper_sigma_estimate(-1.0, &vit()).map(|e| e.sigma));
        oor(paper_epsilon_estimate(0.0, &vit()).map(|e| e.epsilon));
        oor(paper_step_sigma(1.0, 1.0, 2.0, 1.0));
        oor(paper_advanced_composition(1.0, 0, 1e-5));
        oor(paper_advanced_composition_inverse(nan, 10, 1e-5));
        oor(paper_amplify(1.0, 1e-5, 0.0).map(|p| p.0));
        oor(paper_deamplify(1.0, 1e-5, 1.5).map(|p| p.0));
        // δ0 ≥ 1 is infeasible, not out of range.
        let q = PaperQuery::new(1e-9, 1, 2.0, 0.5).unwrap();
        assert!(matches!(paper_epsilon_estimate(1.0, &q), Err(Error::Infeasible { .. })));
        let r = paper_step_sigma(0.0, 1e-300, 1.0, 1.0); // σ would be ~4e299 > 1e100
        assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    }
}
