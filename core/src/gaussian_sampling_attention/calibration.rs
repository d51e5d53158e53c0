//! Calibration of the Gaussian-sampling mechanism from public parameters only: the
//! sensitivity `s`, the allowed level `Δ(k)`, the admissible range of the sample count `k`,
//! the accuracy radius `ρ(k)`, the smallest private `ε`, the largest neighbour radius `β`, and
//! the error bounds (`docs/PAPERS.md` §0.3, and P0-D4, P0-D7 of §0.5).
//!
//! **Guarantee.** Every privacy-side quantity is rounded in the safe direction (`s` up, `Δ`
//! down, `k_max` the largest `k` whose rounded test `s < Δ(k)` passes), so a `k` this module
//! admits satisfies the real-number condition (PRIV) of Theorem 4.1 (or of Def. 5.5). The
//! accuracy side (`ρ`, `k_min`) is not privacy-critical and is evaluated in plain `f64`.
//! Nothing here reads private data: `α`, `η`, `β` are the caller's *declared* domain.
//! Deriving them from the private `X` would make `k` (and so the output law) depend on the
//! data, which the privacy analysis does not cover (`docs/PAPERS.md` P0-15).

use core::ops::RangeInclusive;

use crate::directed_rounding::{count_up, div_down, div_up, ln_inv_up, mul_down, mul_up, sqrt_up};
use crate::error::{Error, Result};
use crate::privacy_params::PrivacyBudget;

/// The largest sample count any routine accepts, `2^53`: above it `k − j` is not exact in
/// `f64` (the chi-square degrees of freedom of the Bartlett sampler).
pub const K_LIMIT: u64 = 1 << 53;

/// Which constants define `Δ(k)` (`docs/PAPERS.md` P0-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeltaConstants {
    /// Theorem 4.1 / 1.7: `Δ = 0.1 · min(ε/√(k ln(1/δ)), ε/ln(1/δ))`. The stricter set and
    /// the default.
    #[default]
    Theorem41,
    /// Definition 5.5, exactly what the proof (Lemma C.6) needs:
    /// `Δ = min(ε/√(8k ln(1/δ)), ε/(8 ln(1/δ)))`, 12.5× more samples at the same privacy.
    Definition55,
}

/// Which upper bound on the sensitivity `M` (Def. 5.4) is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SensitivityBound {
    /// The paper's Lemma 5.11: `s = 2αβ√n/η`. The default.
    #[default]
    PaperSqrtN,
    /// Our derived bound `docs/PAPERS.md` P0-D6 (not in the paper; proved in `docs/PRIVACY.md` §3):
    /// `s = 2αβ/η`, which lets `k_max` grow by a factor `n`.
    Tight,
}

/// The model of the accuracy radius `ρ(k)` with `(1 − ρ)A ⪯ B ⪯ (1 + ρ)A` w.p. `1 − γ`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RhoModel {
    /// The paper's formula `C·(u + u²)`, `u = √((n² + ln(1/γ))/k)`, whose constant the
    /// paper never gives. **Not rigorous**: with `C = 1` the Frobenius bound fails about
    /// 40% of the time at `γ = 0.01` (`docs/PAPERS.md` T0-D, check P0-AC7). For reproducing the
    /// paper.
    PaperNominal {
        /// The unknown constant `C ≥ 1` (the paper's nominal value is 1).
        c: f64,
    },
    /// The Davidson–Szarek spectral bound (`docs/PAPERS.md` P0-D7, rigorous): `ρ₂ = 2a + a²` with
    /// `a = (√n + √(2 ln(2/γ)))/√k`; infinite when `a ≥ 1`.
    GaussianSpectral,
}

/// How the accuracy target is tied to the privacy `ε` (`docs/PAPERS.md` P0-3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AccuracyCoupling {
    /// The paper's `ρ < 0.1ε`: stronger privacy then *demands* more samples, which privacy
    /// forbids (an artefact of the paper's proof).
    Paper,
    /// Theorem 5.3 with its own spectral factor `ε_acc ∈ (0, 0.1)`: `ρ ≤ ε_acc/(1 + ε_acc)`.
    Decoupled {
        /// The spectral approximation factor `ε_acc`.
        eps_acc: f64,
    },
}

/// The declared, public data domain (Defs. 1.5 and 1.6): every column of `X` has norm at
/// most `alpha`, `XXᵀ ⪰ eta·I`, and neighbouring datasets differ in one column by at most
/// `beta` in ℓ2 (`beta = 2·alpha` is replacement of a whole column).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Domain {
    /// Column-norm bound `α > 0`.
    pub alpha: f64,
    /// Eigenvalue floor `η > 0` of `XXᵀ`.
    pub eta: f64,
    /// Neighbour radius `β ≥ 0`.
    pub beta: f64,
}

impl Domain {
    /// A validated domain.
    ///
    /// ```
    /// use dpattn_core::gaussian_sampling_attention::Domain;
    /// assert!(Domain::new(1.0, 0.5, 1e-3).is_ok());
    /// assert!(Domain::new(1.0, 0.0, 1e-3).is_err()); // η must be positive
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `α ≤ 0`, `η ≤ 0`, `β < 0` or a non-finite value.
    pub fn new(alpha: f64, eta: f64, beta: f64) -> Result<Self> {
        let d = Self { alpha, eta, beta };
        d.validate()?;
        Ok(d)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        crate::error::positive_finite("alpha", self.alpha)?;
        crate::error::positive_finite("eta", self.eta)?;
        crate::error::nonneg_finite("beta", self.beta)?;
        Ok(())
    }

    /// `n·η ≤ d·α²`: otherwise no `n × d` matrix is `(α, η)`-good (`docs/PAPERS.md` P0-D1), and a
    /// caller declaring this domain has made a mistake.
    ///
    /// # Errors
    /// [`Error::Infeasible`] naming the condition.
    pub fn check_nonempty(&self, n: usize, d: usize) -> Result<()> {
        let lhs = mul_up(n as f64, self.eta);
        let rhs = mul_down(d as f64, mul_down(self.alpha, self.alpha));
        if lhs <= rhs {
            Ok(())
        } else {
            Err(Error::Infeasible {
                condition: "n·η ≤ d·α² (else no (α, η)-good X exists: empty domain)",
                lhs,
                rhs,
            })
        }
    }
}

/// All choices that shape a calibration. [`Calibration::PAPER_LITERAL`] reproduces the
/// paper; [`Calibration::rigorous`] replaces its non-rigorous accuracy model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The `Δ(k)` constants.
    pub constants: DeltaConstants,
    /// The sensitivity bound.
    pub sensitivity: SensitivityBound,
    /// The `ρ(k)` model.
    pub rho: RhoModel,
    /// The accuracy coupling.
    pub coupling: AccuracyCoupling,
}

impl Calibration {
    /// Theorem 4.1 constants, `2αβ√n/η`, `ρ` with `C = 1`, `ρ < 0.1ε`: the paper as written.
    pub const PAPER_LITERAL: Self = Self {
        constants: DeltaConstants::Theorem41,
        sensitivity: SensitivityBound::PaperSqrtN,
        rho: RhoModel::PaperNominal { c: 1.0 },
        coupling: AccuracyCoupling::Paper,
    };

    /// The paper's privacy constants with the rigorous spectral `ρ₂` and a decoupled
    /// accuracy factor `eps_acc`.
    pub const fn rigorous(eps_acc: f64) -> Self {
        Self {
            constants: DeltaConstants::Theorem41,
            sensitivity: SensitivityBound::PaperSqrtN,
            rho: RhoModel::GaussianSpectral,
            coupling: AccuracyCoupling::Decoupled { eps_acc },
        }
    }

    /// Whether the accuracy statement is a theorem (`GaussianSpectral`) rather than the
    /// paper's nominal formula.
    pub fn accuracy_rigorous(&self) -> bool {
        matches!(self.rho, RhoModel::GaussianSpectral)
    }
}

fn check_n(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: ">= 1" });
    }
    Ok(())
}

/// `k ∈ [1, K_LIMIT]`.
pub(crate) fn check_k_range(k: u64) -> Result<()> {
    if k == 0 || k > K_LIMIT {
        return Err(Error::OutOfRange { name: "k", value: k as f64, allowed: "[1, 2^53]" });
    }
    Ok(())
}

/// The sensitivity bound `s` (rounded up): `2αβ√n/η` or, with
/// [`SensitivityBound::Tight`], `2αβ/η`.
///
/// ```
/// use dpattn_core::gaussian_sampling_attention::{Domain, SensitivityBound, sensitivity};
/// let s = sensitivity(4, &Domain::new(1.0, 0.5, 1e-3)?, SensitivityBound::PaperSqrtN)?;
/// assert!((s - 2.0 * 1e-3 * 2.0 / 0.5).abs() < 1e-15);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `n = 0` or an invalid domain.
pub fn sensitivity(n: usize, domain: &Domain, bound: SensitivityBound) -> Result<f64> {
    check_n(n)?;
    domain.validate()?;
    if domain.beta == 0.0 {
        return Ok(0.0);
    }
    let two_ab = mul_up(2.0 * domain.alpha, domain.beta);
    let num = match bound {
        SensitivityBound::PaperSqrtN => mul_up(two_ab, sqrt_up(n as f64)),
        SensitivityBound::Tight => two_ab,
    };
    Ok(div_up(num, domain.eta))
}

/// `(ε, δ)` checked for Algorithm 2's privacy proof: `ε ∈ (0, 1)` (Thm 5.9 Req. 1) and
/// `δ ∈ (0, 0.1)`, which makes Lemma C.5's unstated `kΔ² ≤ ε` hold (`docs/PAPERS.md` P0-18).
fn privacy_terms(budget: PrivacyBudget) -> Result<(f64, f64)> {
    let eps = budget.epsilon().get();
    if !(eps > 0.0 && eps < 1.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: eps, allowed: "(0, 1)" });
    }
    Ok((eps, ln_inv_delta(budget.delta().get())?))
}

/// `ln(1/δ)` rounded up, for `δ ∈ (0, 0.1)`.
fn ln_inv_delta(delta: f64) -> Result<f64> {
    if !(delta > 0.0 && delta < 0.1) {
        return Err(Error::OutOfRange { name: "delta", value: delta, allowed: "(0, 0.1)" });
    }
    Ok(ln_inv_up(delta))
}

/// `Δ(k)` split into its `k`-dependent and constant terms (both rounded down).
fn delta_terms(k: u64, eps: f64, l: f64, constants: DeltaConstants) -> (f64, f64) {
    let kl = mul_up(count_up(k), l);
    match constants {
        DeltaConstants::Theorem41 => {
            (div_down(eps, mul_up(10.0, sqrt_up(kl))), div_down(eps, mul_up(10.0, l)))
        }
        DeltaConstants::Definition55 => {
            (div_down(eps, sqrt_up(mul_up(8.0, kl))), div_down(eps, mul_up(8.0, l)))
        }
    }
}

/// The allowed sensitivity level `Δ(k)` (rounded down).
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::gaussian_sampling_attention::{DeltaConstants, delta_threshold};
/// let b = PrivacyBudget::new(0.09, 1e-6)?;
/// let d = delta_threshold(500_000, b, DeltaConstants::Theorem41)?;
/// assert!((d / 3.42432e-6 - 1.0).abs() < 1e-5); // docs/PAPERS.md T0-A
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `k ∉ [1, 2^53]`, `ε ∉ (0, 1)` or `δ ∉ (0, 0.1)`.
pub fn delta_threshold(k: u64, budget: PrivacyBudget, constants: DeltaConstants) -> Result<f64> {
    check_k_range(k)?;
    let (eps, l) = privacy_terms(budget)?;
    let (a, b) = delta_terms(k, eps, l, constants);
    Ok(a.min(b))
}

/// The privacy condition (PRIV) for a given `k`: `s < Δ(k)`.
///
/// # Errors
/// [`Error::Infeasible`] naming the failing condition with `lhs = s`, `rhs = Δ(k)` (or
/// its `k`-independent term); [`Error::OutOfRange`] for invalid parameters.
pub fn check_privacy(
    n: usize,
    k: u64,
    domain: &Domain,
    budget: PrivacyBudget,
    calibration: &Calibration,
) -> Result<()> {
    check_k_range(k)?;
    let s = sensitivity(n, domain, calibration.sensitivity)?;
    let (eps, l) = privacy_terms(budget)?;
    let (dk, dc) = delta_terms(k, eps, l, calibration.constants);
    // A NaN can never pass.
    if s.is_nan() || s >= dc {
        return Err(Error::Infeasible {
            condition: "s < Δ: the k-independent term (PRIV-a: 2αβ√n/η < 0.1ε/ln(1/δ) for Theorem 4.1)",
            lhs: s,
            rhs: dc,
        });
    }
    if s >= dk {
        return Err(Error::Infeasible {
            condition: "s < Δ(k) (PRIV-b: too many samples k for this privacy level)",
            lhs: s,
            rhs: dk,
        });
    }
    Ok(())
}

/// The largest admissible `k` (`k_max`), or `None` when every `k` is private (`β = 0`).
/// Capped at [`K_LIMIT`].
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::gaussian_sampling_attention::{Calibration, Domain, k_max};
/// // The worked example of docs/PAPERS.md T0-A.
/// let domain = Domain::new((0.2f64 / 4096.0).sqrt(), 0.05, 5e-6)?;
/// let b = PrivacyBudget::new(0.09, 1e-6)?;
/// assert_eq!(k_max(4, &domain, b, &Calibration::PAPER_LITERAL)?, Some(750_460));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Infeasible`] when not even `k = 1` is private (see [`check_privacy`]);
/// [`Error::OutOfRange`] for invalid parameters.
pub fn k_max(
    n: usize,
    domain: &Domain,
    budget: PrivacyBudget,
    calibration: &Calibration,
) -> Result<Option<u64>> {
    check_privacy(n, 1, domain, budget, calibration)?;
    if domain.beta == 0.0 {
        return Ok(None);
    }
    let ok = |k| check_privacy(n, k, domain, budget, calibration).is_ok();
    Ok(Some(largest_true(1, K_LIMIT, ok)))
}

/// Largest `k ∈ [lo, hi]` with `pred(k)` for a monotone (true then false) predicate with
/// `pred(lo)` true.
fn largest_true(mut lo: u64, mut hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    if pred(hi) {
        return hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid } else { hi = mid }
    }
    lo
}

/// The accuracy radius `ρ(k)` of `model` for `n × n` attention and failure probability
/// `gamma` (`+∞` where the spectral bound is vacuous).
///
/// ```
/// use dpattn_core::gaussian_sampling_attention::{RhoModel, rho};
/// let r = rho(500_000, 4, 0.01, RhoModel::PaperNominal { c: 1.0 })?;
/// assert!((r - 0.00646074).abs() < 1e-8); // docs/PAPERS.md T0-A
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `k = 0`, `n = 0`, `γ ∉ (0, 1)` or `C < 1`.
pub fn rho(k: u64, n: usize, gamma: f64, model: RhoModel) -> Result<f64> {
    check_k_range(k)?;
    check_n(n)?;
    if !(gamma > 0.0 && gamma < 1.0) {
        return Err(Error::OutOfRange { name: "gamma", value: gamma, allowed: "(0, 1)" });
    }
    let kf = k as f64;
    Ok(match model {
        RhoModel::PaperNominal { c } => {
            if !(c >= 1.0 && c.is_finite()) {
                return Err(Error::OutOfRange { name: "C", value: c, allowed: "[1, inf)" });
            }
            let m = (n as f64) * (n as f64) + libm::log(1.0 / gamma);
            let u = libm::sqrt(m / kf);
            c * (u + u * u)
        }
        RhoModel::GaussianSpectral => {
            let a =
                (libm::sqrt(n as f64) + libm::sqrt(2.0 * libm::log(2.0 / gamma))) / libm::sqrt(kf);
            if a >= 1.0 { f64::INFINITY } else { 2.0 * a + a * a }
        }
    })
}

/// The accuracy target: `(target, strict)` for `ρ(k) < target` or `ρ(k) ≤ target`.
fn accuracy_target(epsilon: f64, coupling: AccuracyCoupling) -> Result<(f64, bool)> {
    match coupling {
        AccuracyCoupling::Paper => {
            if !(epsilon > 0.0 && epsilon < 0.1) {
                return Err(Error::OutOfRange {
                    name: "epsilon (Theorem 4.1 accuracy)",
                    value: epsilon,
                    allowed: "(0, 0.1)",
                });
            }
            Ok((0.1 * epsilon, true))
        }
        AccuracyCoupling::Decoupled { eps_acc } => {
            if !(eps_acc > 0.0 && eps_acc < 0.1) {
                return Err(Error::OutOfRange {
                    name: "eps_acc",
                    value: eps_acc,
                    allowed: "(0, 0.1)",
                });
            }
            Ok((eps_acc / (1.0 + eps_acc), false))
        }
    }
}

/// The smallest `k` meeting the accuracy condition (ACC) of `calibration` (`ρ(k) < 0.1ε`,
/// or `ρ(k) ≤ ε_acc/(1 + ε_acc)` when decoupled).
///
/// ```
/// use dpattn_core::gaussian_sampling_attention::{Calibration, k_min};
/// assert_eq!(k_min(4, 0.09, 0.01, &Calibration::PAPER_LITERAL)?, 258_944);
/// assert_eq!(k_min(4, 0.09, 0.01, &Calibration::rigorous(0.09))?, 16_867);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Infeasible`] if no `k ≤ 2^53` suffices; [`Error::OutOfRange`] for invalid
/// parameters (for the paper coupling `ε` must lie in `(0, 0.1)`).
pub fn k_min(n: usize, epsilon: f64, gamma: f64, calibration: &Calibration) -> Result<u64> {
    let (target, strict) = accuracy_target(epsilon, calibration.coupling)?;
    let meets = |k| {
        let r = rho(k, n, gamma, calibration.rho).unwrap_or(f64::INFINITY);
        if strict { r < target } else { r <= target }
    };
    rho(1, n, gamma, calibration.rho)?; // parameter validation
    if !meets(K_LIMIT) {
        return Err(Error::Infeasible {
            condition: "ρ(k) below the accuracy target for some k ≤ 2^53",
            lhs: rho(K_LIMIT, n, gamma, calibration.rho)?,
            rhs: target,
        });
    }
    if meets(1) {
        return Ok(1);
    }
    Ok(largest_true(1, K_LIMIT, |k| !meets(k)) + 1)
}

/// The range `[k_min, k_max]` where the mechanism is both private (PRIV) and accurate
/// (ACC). With `β = 0` the upper end is [`K_LIMIT`].
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::gaussian_sampling_attention::{Calibration, Domain, feasible_k};
/// let domain = Domain::new((0.2f64 / 4096.0).sqrt(), 0.05, 5e-6)?;
/// let b = PrivacyBudget::new(0.09, 1e-6)?;
/// let r = feasible_k(4, &domain, b, 0.01, &Calibration::PAPER_LITERAL)?;
/// assert_eq!(r, 258_944..=750_460); // docs/PAPERS.md T0-A
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Infeasible`] naming `k_min ≤ k_max` (with both values) when the range is
/// empty, or the condition [`k_max`] / [`k_min`] report.
pub fn feasible_k(
    n: usize,
    domain: &Domain,
    budget: PrivacyBudget,
    gamma: f64,
    calibration: &Calibration,
) -> Result<RangeInclusive<u64>> {
    let hi = k_max(n, domain, budget, calibration)?.unwrap_or(K_LIMIT);
    let lo = k_min(n, budget.epsilon().get(), gamma, calibration)?;
    if lo > hi {
        return Err(Error::Infeasible {
            condition: "k_min ≤ k_max (accuracy needs more samples than privacy allows)",
            lhs: lo as f64,
            rhs: hi as f64,
        });
    }
    Ok(lo..=hi)
}

/// The infimum of the private `ε` at a given `k` (rounded up): in real arithmetic `(PRIV)`
/// holds for every `ε` strictly above it (the rounded [`check_privacy`] may still refuse
/// an `ε` within a few ulps of it) (Theorem 4.1: `10·s·max(√(k ln(1/δ)), ln(1/δ))`; Def. 5.5:
/// `s·max(√(8k ln(1/δ)), 8 ln(1/δ))`).
///
/// # Errors
/// [`Error::OutOfRange`] for invalid parameters (`δ ∈ (0, 0.1)`).
pub fn min_epsilon_for_k(
    n: usize,
    k: u64,
    domain: &Domain,
    delta: f64,
    calibration: &Calibration,
) -> Result<f64> {
    check_k_range(k)?;
    let s = sensitivity(n, domain, calibration.sensitivity)?;
    let l = ln_inv_delta(delta)?;
    let kl = mul_up(count_up(k), l);
    Ok(match calibration.constants {
        DeltaConstants::Theorem41 => mul_up(10.0, mul_up(s, sqrt_up(kl).max(l))),
        DeltaConstants::Definition55 => mul_up(s, sqrt_up(mul_up(8.0, kl)).max(mul_up(8.0, l))),
    })
}

/// The smallest `ε` (to about 1e-15 relative) for which a feasible `k` exists
/// ([`feasible_k`] succeeds), by bisection on `ε ∈ (0, 1)` (or `(0, 0.1)` under the paper
/// coupling); for the paper's calibration this is the root of the cubic of `docs/PAPERS.md` §0.3
/// ("Smallest feasible ε") up to the integer rounding of `k`.
///
/// # Errors
/// [`Error::Infeasible`] if no `ε` in that interval is feasible; [`Error::OutOfRange`] for
/// invalid parameters (`n = 0`, `δ ∉ (0, 0.1)`, `γ ∉ (0, 1)`, …).
pub fn min_feasible_epsilon(
    n: usize,
    domain: &Domain,
    delta: f64,
    gamma: f64,
    calibration: &Calibration,
) -> Result<f64> {
    let upper: f64 = match calibration.coupling {
        AccuracyCoupling::Paper => 0.1,
        AccuracyCoupling::Decoupled { .. } => 1.0,
    };
    // Only an infeasible range means "not feasible"; any other error (a bad n, δ, γ, …)
    // is the caller's and is returned as is.
    let feasible = |eps: f64| match PrivacyBudget::new(eps, delta)
        .and_then(|b| feasible_k(n, domain, b, gamma, calibration))
    {
        Ok(_) => Ok(true),
        Err(Error::Infeasible { .. }) => Ok(false),
        Err(e) => Err(e),
    };
    let top = upper.next_down();
    if !feasible(top)? {
        return Err(Error::Infeasible {
            condition: "a feasible k exists for some ε below the allowed maximum",
            lhs: top,
            rhs: upper,
        });
    }
    // Smallest feasible double: bisection over the bit patterns of (0, top].
    let (mut lo, mut hi) = (0u64, top.to_bits());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if feasible(f64::from_bits(mid))? { hi = mid } else { lo = mid }
    }
    Ok(f64::from_bits(hi))
}

/// The supremum of the neighbour radius `β` that is private at `k` (rounded down): in real
/// arithmetic every `β` strictly below it satisfies `s(β) < Δ(k)` (the rounded
/// [`check_privacy`] may still refuse a `β` within a few ulps of it). `domain.beta` is
/// ignored.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::gaussian_sampling_attention::{Calibration, Domain, max_beta};
/// let domain = Domain::new((0.2f64 / 4096.0).sqrt(), 0.05, 0.0)?;
/// let b = PrivacyBudget::new(0.09, 1e-6)?;
/// let beta = max_beta(4, 258_944, &domain, b, &Calibration::PAPER_LITERAL)?;
/// assert!((beta / 8.51199e-6 - 1.0).abs() < 1e-5); // docs/PAPERS.md T0-A, at k = k_min
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for invalid parameters.
pub fn max_beta(
    n: usize,
    k: u64,
    domain: &Domain,
    budget: PrivacyBudget,
    calibration: &Calibration,
) -> Result<f64> {
    let delta = delta_threshold(k, budget, calibration.constants)?;
    let unit = sensitivity(n, &Domain { beta: 1.0, ..*domain }, calibration.sensitivity)?;
    Ok(div_down(delta, unit))
}

/// The paper's accuracy bound `4(1 + ε + 2r)·r` on `‖P_A − P_B‖` (Theorem 4.1 Part 1, with
/// `ε` the spectral factor). It is met by the constant uniform output when `r < 0.1`
/// ([`uniform_baseline_bound`]), so it says nothing about utility (`docs/PAPERS.md` P0-D5).
pub fn error_bound_paper(eps: f64, r: f64) -> f64 {
    4.0 * (1.0 + eps + 2.0 * r) * r
}

/// Our `k`-dependent bound (`docs/PAPERS.md` P0-D4): `‖P_A − P_B‖_{∞→∞} ≤ 2(e^{ρ₂·r} − 1)` whenever
/// `‖A^{-1/2} B A^{-1/2} − I‖₂ ≤ ρ₂` and `max|A_ij| ≤ r`; with `ρ₂` from
/// [`RhoModel::GaussianSpectral`] it holds with probability `1 − γ`.
pub fn error_bound_tight(rho2: f64, r: f64) -> f64 {
    2.0 * libm::expm1(rho2 * r)
}

/// The error of the constant output `B = 0` (uniform attention) for any `A` with
/// `max|A_ij| ≤ r`: `2(e^r − 1)` (`docs/PAPERS.md` P0-D5). A useful release must beat it.
pub fn uniform_baseline_bound(r: f64) -> f64 {
    2.0 * libm::expm1(r)
}
