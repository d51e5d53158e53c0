//! Composition theorems and conversions between approximate DP and zCDP.
//!
//! **Guarantee.** Every function returns a bound that is valid for the real-number formula
//! it implements: quantities that bound privacy loss (composed ε and δ, converted ε, ρ of a
//! mechanism) are rounded *up*, and quantities a caller spends per step (the per-step ε of
//! [`advanced_composition_step_epsilon`], the ρ of [`zcdp_rho_for`]) are rounded *down*.
//! Sums and products are rounded with an exact error check (TwoSum, FMA), so an exactly
//! representable result (`0.25 + 0.5`) is returned exactly; `sqrt` is correctly rounded and
//! checked the same way; `ln`, `ln(1 + x)` and `eᵡ − 1` come from `libm`, whose error is
//! below one ulp, and are padded by two ulps in the safe direction. Infeasible inputs (a
//! composed δ that reaches 1, an ε that overflows `f64`) are reported as
//! [`Error::Infeasible`], never as NaN or infinity.
//!
//! **Neighbour relation.** None of its own: the theorems hold for whatever relation the
//! composed mechanisms share (add/remove-one or replace-one). All mechanisms in one
//! composition must be private with respect to the *same* relation.
//!
//! **Sources.**
//!
//! | function | statement |
//! | --- | --- |
//! | [`basic_composition`], [`basic_composition_k`] | `(Σεᵢ, Σδᵢ)`: Dwork & Roth 2014, Thm 3.16 (adaptive composition: Dwork, Rothblum, Vadhan 2010) |
//! | [`advanced_composition`] | `ε' = √(2k ln(1/δ'))·ε + k·ε·(e^ε − 1)`, `δ_total = kδ + δ'`: Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014, Thm 3.20 |
//! | [`advanced_composition_step_epsilon`] | inverse of the above by bisection, never worse than `ε_total / k` |
//! | [`Rho`], [`zcdp_compose`] | ρ-zCDP composes by adding ρ: Bun & Steinke 2016, Lemma 1.7 (adaptive) |
//! | [`zcdp_from_pure`] | ε-DP ⇒ (ε²/2)-zCDP: Bun & Steinke 2016, Prop 1.4 |
//! | [`zcdp_gaussian`] | Gaussian mechanism `N(0, σ²)` with L2 sensitivity Δ is `Δ²/(2σ²)`-zCDP: Bun & Steinke 2016, Prop 1.6 |
//! | [`zcdp_to_epsilon_bs16`] | ρ-zCDP ⇒ `(ρ + 2√(ρ ln(1/δ)), δ)`-DP: Bun & Steinke 2016, Prop 1.3 |
//! | [`zcdp_to_epsilon`] | ρ-zCDP ⇒ `(ε, δ)`-DP with `ε = inf_{α>1} αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)`: Canonne, Kamath, Steinke 2020, Cor 13 (from their Prop 12; the same bound is Asoodeh et al. 2021, and it is what `dp_accounting` uses for RDP) |
//! | [`zcdp_rho_for`], [`zcdp_rho_for_bs16`] | the largest ρ whose conversion is within a target `(ε, δ)` |
//!
//! **Adaptivity.** Basic composition and zCDP composition also hold when the privacy
//! parameters themselves are chosen adaptively, as privacy *filters* (Rogers, Roth, Ullman,
//! Vadhan 2016 for basic composition; Feldman & Zrnic 2021 and Whitehouse, Ramdas, Rogers,
//! Wu 2023 for Rényi/zCDP filters); that is what the [`Ledger`](super::ledger::Ledger)
//! relies on. Advanced composition as stated here needs `k`, `ε` and `δ` fixed in advance.

use crate::error::{Error, Result};
use crate::privacy_params::{Delta, Epsilon, PrivacyBudget, Sensitivity};

// ---------------------------------------------------------------------------------------
// Directed rounding.
// ---------------------------------------------------------------------------------------

/// Operands and results in `[SAFE_LO, SAFE_HI]` keep every intermediate of the exact error
/// checks (FMA remainders, products) in the normal range, where those checks are exact.
/// Outside it the helpers step one ulp in the safe direction unconditionally.
const SAFE_LO: f64 = 1e-150;
const SAFE_HI: f64 = 1e150;

#[inline]
fn in_safe_range(x: f64) -> bool {
    let a = x.abs();
    (SAFE_LO..=SAFE_HI).contains(&a)
}

/// `a + b` rounded towards `+∞` (TwoSum: the rounding error of `a + b` is exact).
pub(crate) fn add_up(a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return s;
    }
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    if err > 0.0 { s.next_up() } else { s }
}

/// `a + b` rounded towards `−∞`.
pub(crate) fn add_down(a: f64, b: f64) -> f64 {
    -add_up(-a, -b)
}

/// `a · b` rounded towards `+∞`.
pub(crate) fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() || a == 0.0 || b == 0.0 {
        return p;
    }
    if in_safe_range(a) && in_safe_range(b) {
        // The product of two values in the safe range is normal, so the FMA residue is
        // exactly a·b − p.
        if libm::fma(a, b, -p) > 0.0 { p.next_up() } else { p }
    } else {
        p.next_up()
    }
}

/// `a · b` rounded towards `−∞`; never negative for non-negative operands.
pub(crate) fn mul_down(a: f64, b: f64) -> f64 {
    let p = -mul_up(-a, b);
    if a >= 0.0 && b >= 0.0 { p.max(0.0) } else { p }
}

/// `a / b` rounded towards `+∞` (`b ≠ 0`).
pub(crate) fn div_up(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() || a == 0.0 {
        return q;
    }
    if in_safe_range(a) && in_safe_range(b) {
        // The remainder a − q·b of a correctly rounded quotient is exact in the normal range.
        let r = libm::fma(-q, b, a);
        if (r > 0.0 && b > 0.0) || (r < 0.0 && b < 0.0) { q.next_up() } else { q }
    } else {
        q.next_up()
    }
}

/// `a / b` rounded towards `−∞`; never negative for non-negative operands.
pub(crate) fn div_down(a: f64, b: f64) -> f64 {
    let q = -div_up(-a, b);
    if a >= 0.0 && b > 0.0 { q.max(0.0) } else { q }
}

/// `√x` rounded towards `+∞` (`x ≥ 0`).
pub(crate) fn sqrt_up(x: f64) -> f64 {
    let s = libm::sqrt(x);
    if !s.is_finite() || x == 0.0 {
        return s;
    }
    if in_safe_range(x) {
        if libm::fma(-s, s, x) > 0.0 { s.next_up() } else { s }
    } else {
        s.next_up()
    }
}

/// Two ulps up: covers the (< 1 ulp) error of a `libm` transcendental.
#[inline]
fn pad_up(x: f64) -> f64 {
    x.next_up().next_up()
}

/// Two ulps down.
#[inline]
fn pad_down(x: f64) -> f64 {
    x.next_down().next_down()
}

/// A lower bound on `ln x` (`x > 0`).
fn ln_down(x: f64) -> f64 {
    pad_down(libm::log(x))
}

/// An upper bound on `ln(1/δ)` for `δ ∈ (0, 1)`; positive and finite.
pub(crate) fn ln_inv_up(delta: f64) -> f64 {
    -ln_down(delta)
}

/// An upper bound on `ln(1 + x)` (`x > −1`).
fn ln_1p_up(x: f64) -> f64 {
    pad_up(libm::log1p(x))
}

/// An upper bound on `eˣ − 1`.
fn exp_m1_up(x: f64) -> f64 {
    pad_up(libm::expm1(x))
}

/// `k` as an `f64`, rounded up (exact below 2⁵³).
fn count_up(k: u64) -> f64 {
    let f = k as f64;
    // `f` is an integer no larger than 2⁶⁴, so the cast back to u128 is exact.
    if (f as u128) < u128::from(k) { f.next_up() } else { f }
}

/// Largest `x ≥ 0` (as a double) with `feasible(x)`, by bisection on the bit patterns of
/// non-negative doubles, whose order is the order of the values. `0` is assumed feasible and
/// `+∞` infeasible; neither is evaluated. The result is feasible (or `0`) whatever `feasible`
/// is; it is the largest such double when `feasible` is monotone.
pub(crate) fn largest_feasible(mut feasible: impl FnMut(f64) -> bool) -> f64 {
    let mut lo = 0u64;
    let mut hi = f64::INFINITY.to_bits();
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if feasible(f64::from_bits(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f64::from_bits(lo)
}

// ---------------------------------------------------------------------------------------
// Validation shared by the functions below.
// ---------------------------------------------------------------------------------------

fn check_k(k: u64) -> Result<f64> {
    if k == 0 {
        return Err(Error::OutOfRange {
            name: "number of mechanisms k",
            value: 0.0,
            allowed: "[1, 2^64)",
        });
    }
    Ok(count_up(k))
}

fn check_slack(slack: Delta) -> Result<f64> {
    let s = slack.get();
    if s > 0.0 {
        Ok(s)
    } else {
        Err(Error::OutOfRange { name: "slack delta'", value: s, allowed: "(0, 1)" })
    }
}

fn check_positive_delta(delta: Delta) -> Result<f64> {
    let d = delta.get();
    if d > 0.0 {
        Ok(d)
    } else {
        Err(Error::OutOfRange { name: "delta", value: d, allowed: "(0, 1)" })
    }
}

/// `Ok(eps)` if `eps` is a finite positive composed ε, else an `Infeasible` error naming
/// `condition` (which says the result must be finite).
fn finite_epsilon(eps: f64, condition: &'static str) -> Result<Epsilon> {
    if eps.is_finite() && eps > 0.0 {
        Epsilon::new(eps)
    } else {
        Err(Error::Infeasible { condition, lhs: eps, rhs: f64::MAX })
    }
}

/// `Ok(delta)` if the composed δ is below 1.
fn composed_delta(delta: f64, condition: &'static str) -> Result<Delta> {
    if delta < 1.0 {
        Delta::new(delta)
    } else {
        Err(Error::Infeasible { condition, lhs: delta, rhs: 1.0 })
    }
}

// ---------------------------------------------------------------------------------------
// Basic composition.
// ---------------------------------------------------------------------------------------

/// Basic composition of `steps.len()` mechanisms, the `i`-th `(εᵢ, δᵢ)`-DP: the
/// (adaptive) composition is `(Σεᵢ, Σδᵢ)`-DP (Dwork & Roth 2014, Thm 3.16). Both sums are
/// rounded up.
///
/// # Errors
/// * [`Error::OutOfRange`] if `steps` is empty (composing nothing spends nothing, and
///   [`PrivacyBudget`] needs `ε > 0`).
/// * [`Error::Infeasible`] if `Σεᵢ` overflows `f64` (`"sum of epsilons finite"`) or
///   `Σδᵢ ≥ 1` (`"sum of deltas < 1"`).
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::composition::basic_composition;
/// let total = basic_composition(&[PrivacyBudget::new(0.5, 1e-6)?, PrivacyBudget::new(0.25, 0.0)?])?;
/// assert_eq!((total.epsilon().get(), total.delta().get()), (0.75, 1e-6));
/// assert!(basic_composition(&[]).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn basic_composition(steps: &[PrivacyBudget]) -> Result<PrivacyBudget> {
    if steps.is_empty() {
        return Err(Error::OutOfRange {
            name: "number of mechanisms k",
            value: 0.0,
            allowed: "[1, 2^64)",
        });
    }
    let (mut eps, mut delta) = (0.0f64, 0.0f64);
    for s in steps {
        eps = add_up(eps, s.epsilon().get());
        delta = add_up(delta, s.delta().get());
    }
    let eps = finite_epsilon(eps, "sum of epsilons finite")?;
    let delta = composed_delta(delta, "sum of deltas < 1")?;
    Ok(PrivacyBudget::from_parts(eps, delta))
}

/// Basic composition of `k` mechanisms that are each `(ε, δ)`-DP: `(kε, kδ)`, rounded up.
///
/// # Errors
/// As [`basic_composition`]: `k = 0` is out of range; `kε` overflowing or `kδ ≥ 1` is
/// infeasible.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::composition::basic_composition_k;
/// let total = basic_composition_k(PrivacyBudget::new(0.125, 1e-7)?, 8)?;
/// assert_eq!(total.epsilon().get(), 1.0);
/// assert!(basic_composition_k(PrivacyBudget::new(1.0, 0.5)?, 2).is_err()); // kδ = 1
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn basic_composition_k(step: PrivacyBudget, k: u64) -> Result<PrivacyBudget> {
    let kf = check_k(k)?;
    let eps = finite_epsilon(mul_up(kf, step.epsilon().get()), "k * epsilon finite")?;
    let delta = composed_delta(mul_up(kf, step.delta().get()), "k * delta < 1")?;
    Ok(PrivacyBudget::from_parts(eps, delta))
}

// ---------------------------------------------------------------------------------------
// Advanced composition.
// ---------------------------------------------------------------------------------------

/// `√(2k·L)·ε + k·ε·(e^ε − 1)` rounded up, with `L ≥ ln(1/δ')`.
fn advanced_epsilon_up(eps: f64, kf: f64, l_up: f64) -> f64 {
    let root = sqrt_up(mul_up(mul_up(2.0, kf), l_up));
    add_up(mul_up(root, eps), mul_up(mul_up(kf, eps), exp_m1_up(eps)))
}

/// Advanced composition (Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014, Thm 3.20): the
/// adaptive composition of `k` mechanisms, each `(ε, δ)`-DP, is `(ε', kδ + δ')`-DP for
/// every slack `δ' > 0`, with
///
/// `ε' = √(2k ln(1/δ'))·ε + k·ε·(e^ε − 1)`.
///
/// Both outputs are rounded up. For small `k` or large `ε` basic composition
/// ([`basic_composition_k`]) can be smaller; this function does not switch.
///
/// # Errors
/// * [`Error::OutOfRange`] if `k = 0` or `δ' = 0` (a [`Delta`] is already below 1).
/// * [`Error::Infeasible`] if `ε'` overflows (`"advanced-composition epsilon finite"`, e.g.
///   `ε = 800`) or `kδ + δ' ≥ 1` (`"k * delta + delta' < 1"`).
///
/// ```
/// use dpattn_core::{Delta, PrivacyBudget};
/// use dpattn_core::accounting::composition::advanced_composition;
/// // Dwork & Roth Thm 3.20 with ε = 0.1, k = 100, δ' = 1e-6:
/// // √(200 ln 10⁶)·0.1 + 100·0.1·(e^0.1 − 1) = 5.2565218 + 1.0517092 = 6.3082310
/// let total = advanced_composition(PrivacyBudget::new(0.1, 0.0)?, 100, Delta::new(1e-6)?)?;
/// assert!((total.epsilon().get() - 6.308231).abs() < 1e-6);
/// assert_eq!(total.delta().get(), 1e-6);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn advanced_composition(step: PrivacyBudget, k: u64, slack: Delta) -> Result<PrivacyBudget> {
    let kf = check_k(k)?;
    let s = check_slack(slack)?;
    let eps = advanced_epsilon_up(step.epsilon().get(), kf, ln_inv_up(s));
    let eps = finite_epsilon(eps, "advanced-composition epsilon finite")?;
    let delta = add_up(mul_up(kf, step.delta().get()), s);
    let delta = composed_delta(delta, "k * delta + delta' < 1")?;
    Ok(PrivacyBudget::from_parts(eps, delta))
}

/// The largest per-step ε such that `k` mechanisms, each `(ε, δ)`-DP, compose to
/// `ε_total` — the inverse of [`advanced_composition`], rounded down.
///
/// The advanced-composition answer is found by bisection over the doubles (the composed ε is
/// increasing in the per-step ε), keeping the largest ε whose upward-rounded
/// [`advanced_composition`] is `≤ ε_total`. The result is the larger of that and the
/// basic-composition answer `ε_total / k` (rounded down), so it is never worse than basic
/// composition. Either way, `k` `(ε, δ)`-DP steps compose to `(ε_total, kδ + δ')`-DP (basic
/// composition even gives `kδ`). For `k = 1` and `δ' > e^(-1/2)` the result can exceed
/// `ε_total`; that is what the theorem says.
///
/// # Errors
/// * [`Error::OutOfRange`] if `k = 0` (every ε would do) or `δ' = 0`.
/// * [`Error::Infeasible`] (`"per-step epsilon > 0"`) if no positive double works (an
///   `ε_total` that is tiny compared with `k`).
///
/// ```
/// use dpattn_core::{Delta, Epsilon, PrivacyBudget};
/// use dpattn_core::accounting::composition::{advanced_composition, advanced_composition_step_epsilon};
/// let slack = Delta::new(1e-6)?;
/// let step = advanced_composition_step_epsilon(Epsilon::new(1.0)?, 1000, slack)?;
/// // Solves √(2000 ln 10⁶)·ε + 1000·ε·(e^ε − 1) = 1: ε = 0.0058121…, almost six times
/// // basic composition's 1/1000; it composes back within the target.
/// assert!((step.get() - 0.0058121005).abs() < 1e-9);
/// let total = advanced_composition(PrivacyBudget::from_parts(step, Delta::ZERO), 1000, slack)?;
/// assert!(total.epsilon().get() <= 1.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn advanced_composition_step_epsilon(total: Epsilon, k: u64, slack: Delta) -> Result<Epsilon> {
    let kf = check_k(k)?;
    let s = check_slack(slack)?;
    let l_up = ln_inv_up(s);
    let target = total.get();
    let advanced = largest_feasible(|e| advanced_epsilon_up(e, kf, l_up) <= target);
    let basic = div_down(target, kf);
    let best = advanced.max(basic);
    if best > 0.0 {
        Epsilon::new(best)
    } else {
        Err(Error::Infeasible { condition: "per-step epsilon > 0", lhs: best, rhs: 0.0 })
    }
}

// ---------------------------------------------------------------------------------------
// zCDP.
// ---------------------------------------------------------------------------------------

/// A zero-concentrated DP parameter ρ (Bun & Steinke 2016): finite and `> 0`.
///
/// A mechanism `M` is ρ-zCDP if `D_α(M(x) ‖ M(x')) ≤ αρ` for every order `α > 1` and all
/// neighbouring `x, x'`.
///
/// ```
/// use dpattn_core::accounting::composition::Rho;
/// assert_eq!(Rho::new(0.5)?.get(), 0.5);
/// assert!(Rho::new(0.0).is_err() && Rho::new(f64::INFINITY).is_err() && Rho::new(f64::NAN).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rho(f64);

impl Rho {
    /// Validates `rho`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `rho` is finite and `> 0`.
    ///
    /// ```
    /// # use dpattn_core::accounting::composition::Rho;
    /// assert!(Rho::new(-1.0).is_err());
    /// ```
    pub fn new(rho: f64) -> Result<Self> {
        if rho.is_finite() && rho > 0.0 {
            Ok(Self(rho))
        } else {
            Err(Error::OutOfRange { name: "rho", value: rho, allowed: "(0, inf), finite" })
        }
    }

    /// The value.
    ///
    /// ```
    /// # use dpattn_core::accounting::composition::Rho;
    /// assert_eq!(Rho::new(2.0)?.get(), 2.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[inline]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// `Ok(Rho)` if the computed ρ is finite and positive, else `Infeasible { condition }`.
fn finite_rho(rho: f64, condition: &'static str) -> Result<Rho> {
    if rho.is_finite() && rho > 0.0 {
        Rho::new(rho)
    } else {
        Err(Error::Infeasible { condition, lhs: rho, rhs: f64::MAX })
    }
}

/// zCDP composition (Bun & Steinke 2016, Lemma 1.7): the adaptive composition of
/// `ρᵢ`-zCDP mechanisms is `(Σρᵢ)`-zCDP. Rounded up.
///
/// # Errors
/// [`Error::OutOfRange`] for an empty slice; [`Error::Infeasible`] if the sum overflows.
///
/// ```
/// use dpattn_core::accounting::composition::{Rho, zcdp_compose};
/// let rho = zcdp_compose(&[Rho::new(0.5)?, Rho::new(0.25)?])?;
/// assert_eq!(rho.get(), 0.75);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_compose(rhos: &[Rho]) -> Result<Rho> {
    if rhos.is_empty() {
        return Err(Error::OutOfRange {
            name: "number of mechanisms k",
            value: 0.0,
            allowed: "[1, 2^64)",
        });
    }
    let sum = rhos.iter().fold(0.0, |acc, r| add_up(acc, r.get()));
    finite_rho(sum, "sum of rhos finite")
}

/// ε-DP implies `(ε²/2)`-zCDP (Bun & Steinke 2016, Prop 1.4). Rounded up.
///
/// # Errors
/// [`Error::Infeasible`] if `ε²/2` overflows (`ε > 1.8·10¹⁵⁴`).
///
/// ```
/// use dpattn_core::Epsilon;
/// use dpattn_core::accounting::composition::zcdp_from_pure;
/// assert_eq!(zcdp_from_pure(Epsilon::new(0.5)?)?.get(), 0.125);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_from_pure(epsilon: Epsilon) -> Result<Rho> {
    let e = epsilon.get();
    finite_rho(mul_up(0.5, mul_up(e, e)), "epsilon^2 / 2 finite")
}

/// The Gaussian mechanism — add `N(0, σ²)` to a query of L2 sensitivity Δ — is
/// `Δ²/(2σ²)`-zCDP (Bun & Steinke 2016, Prop 1.6). Rounded up.
///
/// # Errors
/// [`Error::OutOfRange`] unless `σ` is finite and `> 0`; [`Error::Infeasible`] if `ρ`
/// overflows (`σ` tiny against Δ).
///
/// ```
/// use dpattn_core::Sensitivity;
/// use dpattn_core::accounting::composition::zcdp_gaussian;
/// assert_eq!(zcdp_gaussian(Sensitivity::new(1.0)?, 2.0)?.get(), 0.125);
/// assert!(zcdp_gaussian(Sensitivity::new(1.0)?, 0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_gaussian(sensitivity: Sensitivity, sigma: f64) -> Result<Rho> {
    if !(sigma.is_finite() && sigma > 0.0) {
        return Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, inf), finite" });
    }
    let d = sensitivity.get();
    let num = mul_up(d, d);
    let den = mul_down(2.0, mul_down(sigma, sigma));
    finite_rho(div_up(num, den), "sensitivity^2 / (2 sigma^2) finite")
}

/// Bun–Steinke Prop 1.3 bound `ρ + 2√(ρL)`, rounded up, for `L ≥ ln(1/δ)`.
fn bs16_epsilon_up(rho: f64, l_up: f64) -> f64 {
    add_up(rho, mul_up(2.0, sqrt_up(mul_up(rho, l_up))))
}

/// The CKS20 Prop 12 conversion at one order, rounded up and clamped at 0: if a mechanism
/// is `(α, τ)`-RDP (`α > 1`), it is `(ε, δ)`-DP for
/// `ε = τ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)`. `tau_up ≥ τ`, `l_up ≥ ln(1/δ)`.
/// `+∞` for an infinite τ.
pub(crate) fn rdp_epsilon_at_order_up(alpha: f64, tau_up: f64, l_up: f64) -> f64 {
    let t_down = add_down(alpha, -1.0);
    let t_up = add_up(alpha, -1.0);
    if t_down.is_nan() || t_down <= 0.0 || !tau_up.is_finite() {
        return f64::INFINITY;
    }
    // An upper bound on ln(1/δ) − ln α, then on its quotient by α − 1 (divide a positive
    // numerator by the smaller denominator, a negative one by the larger).
    let num = add_up(l_up, -ln_down(alpha));
    let frac = if num >= 0.0 { div_up(num, t_down) } else { div_up(num, t_up) };
    // ln(1 − 1/α) = ln(1 + x) with x = −1/α, increasing in x: use an upper bound on −1/α.
    let tail = ln_1p_up(-div_down(1.0, alpha));
    let eps = add_up(add_up(tau_up, frac), tail);
    if eps.is_nan() { f64::INFINITY } else { eps.max(0.0) }
}

/// The CKS20 Cor 13 conversion of ρ-zCDP (`ρ ≥ 0`), rounded up: the bound at a numerically
/// optimised order, and never above the Bun–Steinke bound. `+∞` if it overflows.
fn cks20_epsilon_up(rho: f64, delta: f64, l_up: f64) -> f64 {
    let bs = bs16_epsilon_up(rho, l_up);
    // The objective αρ + (L − ln α)/(α − 1) + ln(1 − 1/α) has derivative
    // ρ − (L − ln α)/(α − 1)², so with t = α − 1 its unique minimiser solves
    // ρt² = L − ln(1 + t); the left side increases and the right decreases in t, and the
    // root lies below both √(L/ρ) (the Bun–Steinke order) and 1/δ. Any order gives a valid
    // bound, so this search only affects tightness, never soundness.
    let l = -libm::log(delta);
    let t_max = libm::sqrt(l / rho).min(1.0 / delta).min(f64::MAX);
    let below_root = |t: f64| rho * t * t <= l - libm::log1p(t);
    let t = largest_feasible(|t| t <= t_max && below_root(t));
    let mut best = bs;
    for t in [t, t.next_up()] {
        let alpha = 1.0 + t;
        let alpha = if alpha > 1.0 { alpha } else { 1.0f64.next_up() };
        let eps = rdp_epsilon_at_order_up(alpha, mul_up(alpha, rho), l_up);
        if eps < best {
            best = eps;
        }
    }
    best
}

/// Bun & Steinke 2016, Prop 1.3: a ρ-zCDP mechanism is `(ρ + 2√(ρ ln(1/δ)), δ)`-DP for every
/// `δ > 0`. Rounded up. [`zcdp_to_epsilon`] is never larger.
///
/// # Errors
/// [`Error::OutOfRange`] if `δ = 0`; [`Error::Infeasible`] if the bound overflows.
///
/// ```
/// use dpattn_core::Delta;
/// use dpattn_core::accounting::composition::{Rho, zcdp_to_epsilon_bs16};
/// // ρ = 0.5, δ = e⁻⁸: 0.5 + 2√(0.5 · 8) = 4.5
/// let eps = zcdp_to_epsilon_bs16(Rho::new(0.5)?, Delta::new((-8f64).exp())?)?;
/// assert!((eps - 4.5).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_to_epsilon_bs16(rho: Rho, delta: Delta) -> Result<f64> {
    let d = check_positive_delta(delta)?;
    let eps = bs16_epsilon_up(rho.get(), ln_inv_up(d));
    if eps.is_finite() {
        Ok(eps)
    } else {
        Err(Error::Infeasible { condition: "converted epsilon finite", lhs: eps, rhs: f64::MAX })
    }
}

/// The tighter conversion of Canonne, Kamath & Steinke 2020, Cor 13: a ρ-zCDP mechanism is
/// `(ε, δ)`-DP with
///
/// `ε = inf_{α>1} [ αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α) ]`, clamped at 0.
///
/// The bracket is valid at *every* order `α > 1` (CKS20 Prop 12 applied to the
/// `(α, αρ)`-RDP guarantee of ρ-zCDP; Asoodeh et al. 2021 give the same bound). The order
/// is optimised numerically — the bracket's derivative `ρ − (ln(1/δ) − ln α)/(α − 1)²`
/// has one root, found by bisection — and the bracket is then evaluated at that order with
/// upward rounding. The value returned is therefore a rigorous bound (the bracket at one
/// order, rounded up); it exceeds the exact infimum only by rounding, since the optimiser
/// lands within an ulp of the optimal order. It is also capped by
/// [`zcdp_to_epsilon_bs16`]. A result of `0` means the mechanism is `(0, δ)`-DP.
///
/// # Errors
/// [`Error::OutOfRange`] if `δ = 0`; [`Error::Infeasible`] if the bound overflows.
///
/// ```
/// use dpattn_core::Delta;
/// use dpattn_core::accounting::composition::{Rho, zcdp_to_epsilon, zcdp_to_epsilon_bs16};
/// let (rho, delta) = (Rho::new(0.5)?, Delta::new(1e-5)?);
/// let tight = zcdp_to_epsilon(rho, delta)?;
/// assert!(tight < zcdp_to_epsilon_bs16(rho, delta)?);
/// assert!((tight - 4.72839).abs() < 1e-5); // Bun–Steinke: 5.29827
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_to_epsilon(rho: Rho, delta: Delta) -> Result<f64> {
    let d = check_positive_delta(delta)?;
    let eps = cks20_epsilon_up(rho.get(), d, ln_inv_up(d));
    if eps.is_finite() {
        Ok(eps)
    } else {
        Err(Error::Infeasible { condition: "converted epsilon finite", lhs: eps, rhs: f64::MAX })
    }
}

/// The largest ρ such that ρ-zCDP implies the target `(ε, δ)`-DP by
/// [`zcdp_to_epsilon`] (CKS20 Cor 13): found by bisection over the doubles, rounded down,
/// and guaranteed to satisfy `zcdp_to_epsilon(ρ, δ) ≤ ε`. Never smaller than
/// [`zcdp_rho_for_bs16`] up to rounding.
///
/// # Errors
/// [`Error::OutOfRange`] if `δ = 0`; [`Error::Infeasible`] (`"rho > 0"`) if no positive
/// double works.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::composition::{zcdp_rho_for, zcdp_rho_for_bs16, zcdp_to_epsilon};
/// let target = PrivacyBudget::new(1.0, 1e-5)?;
/// let rho = zcdp_rho_for(target)?;
/// assert!(zcdp_to_epsilon(rho, target.delta())? <= 1.0);
/// assert!(rho.get() > zcdp_rho_for_bs16(target)?.get());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_rho_for(target: PrivacyBudget) -> Result<Rho> {
    let d = check_positive_delta(target.delta())?;
    let l_up = ln_inv_up(d);
    let eps = target.epsilon().get();
    let rho = largest_feasible(|r| cks20_epsilon_up(r, d, l_up) <= eps);
    if rho > 0.0 {
        Rho::new(rho)
    } else {
        Err(Error::Infeasible { condition: "rho > 0", lhs: rho, rhs: 0.0 })
    }
}

/// The closed-form inverse of [`zcdp_to_epsilon_bs16`] (Bun & Steinke 2016, Prop 1.3):
/// the largest ρ with `ρ + 2√(ρ ln(1/δ)) ≤ ε`, namely
/// `ρ = (√(ln(1/δ) + ε) − √ln(1/δ))² = ε² / (√(ln(1/δ) + ε) + √ln(1/δ))²`, rounded down.
///
/// # Errors
/// [`Error::OutOfRange`] if `δ = 0`; [`Error::Infeasible`] if ρ underflows to 0.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::composition::zcdp_rho_for_bs16;
/// // ε = 4.5, δ = e⁻⁸: (√12.5 − √8)² = 0.5
/// let rho = zcdp_rho_for_bs16(PrivacyBudget::new(4.5, (-8f64).exp())?)?;
/// assert!((rho.get() - 0.5).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn zcdp_rho_for_bs16(target: PrivacyBudget) -> Result<Rho> {
    let d = check_positive_delta(target.delta())?;
    let l_up = ln_inv_up(d);
    let eps = target.epsilon().get();
    let den = add_up(sqrt_up(add_up(l_up, eps)), sqrt_up(l_up));
    let rho = div_down(mul_down(eps, eps), mul_up(den, den));
    if rho > 0.0 {
        Rho::new(rho)
    } else {
        Err(Error::Infeasible { condition: "rho > 0", lhs: rho, rhs: 0.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb(e: f64, d: f64) -> PrivacyBudget {
        PrivacyBudget::new(e, d).unwrap()
    }

    #[test]
    fn directed_rounding_brackets_the_exact_result() {
        // 0.1 + 0.2 is inexact: the two directions differ by one ulp around it.
        let (u, d) = (add_up(0.1, 0.2), add_down(0.1, 0.2));
        assert_eq!(u, d.next_up());
        assert!(d <= 0.1 + 0.2 && 0.1 + 0.2 <= u);
        assert_eq!(add_up(0.25, 0.5), 0.75);
        assert_eq!(mul_up(3.0, 0.25), 0.75);
        let (u, d) = (mul_up(0.1, 3.0), mul_down(0.1, 3.0));
        assert_eq!(u, d.next_up());
        let (u, d) = (div_up(1.0, 3.0), div_down(1.0, 3.0));
        assert_eq!(u, d.next_up());
        assert_eq!(div_up(1.0, 4.0), 0.25);
        assert_eq!(div_down(1.0, 4.0), 0.25);
        assert_eq!(sqrt_up(4.0), 2.0);
        assert_eq!(sqrt_up(2.0), libm::sqrt(2.0)); // the rounded sqrt(2.0) is above √2
        assert_eq!(sqrt_up(3.0), libm::sqrt(3.0).next_up()); // and sqrt(3.0) below √3
        // Outside the safe range the helpers still bracket, including underflow to 0.
        assert!(mul_up(1e-200, 1e-200) > 0.0);
        assert_eq!(mul_down(1e-200, 1e-200), 0.0);
        assert!(div_up(1e-300, 1e100) > 0.0);
        assert_eq!(div_down(1e-300, 1e100), 0.0);
        assert_eq!(mul_up(f64::MAX, 2.0), f64::INFINITY);
    }

    #[test]
    fn count_up_rounds_large_counts_up() {
        assert_eq!(count_up(1), 1.0);
        assert_eq!(count_up(1 << 53), 2f64.powi(53));
        let k = (1u64 << 53) + 1;
        assert!(count_up(k) as u128 >= u128::from(k));
        assert!(count_up(u64::MAX) >= 2f64.powi(64));
    }

    #[test]
    fn bisection_finds_the_largest_feasible_double() {
        assert_eq!(largest_feasible(|x| x <= 0.3), 0.3);
        assert_eq!(largest_feasible(|x| mul_up(x, x) <= 2.0), libm::sqrt(2.0).next_down());
        assert_eq!(largest_feasible(|_| false), 0.0);
        assert_eq!(largest_feasible(|_| true), f64::MAX);
    }

    #[test]
    fn basic_composition_sums_and_validates() {
        let t = basic_composition(&[pb(1.0, 1e-6), pb(2.0, 2e-6)]).unwrap();
        assert_eq!(t.epsilon().get(), 3.0);
        assert!(t.delta().get() >= 3e-6 && t.delta().get() <= 3.0000000000000005e-6);
        assert!(matches!(
            basic_composition(&[pb(f64::MAX, 0.0), pb(f64::MAX, 0.0)]),
            Err(Error::Infeasible { .. })
        ));
        assert!(matches!(
            basic_composition(&[pb(1.0, 0.5), pb(1.0, 0.5)]),
            Err(Error::Infeasible { condition: "sum of deltas < 1", .. })
        ));
        assert!(matches!(basic_composition_k(pb(1.0, 0.0), 0), Err(Error::OutOfRange { .. })));
        assert_eq!(basic_composition_k(pb(0.1, 0.0), 1).unwrap().epsilon().get(), 0.1);
        // 3 · 0.1 is inexact, and must come out above the real 3 · 0.1000…0555.
        let e = basic_composition_k(pb(0.1, 0.0), 3).unwrap().epsilon().get();
        assert_eq!(e, mul_down(0.1, 3.0).next_up());
    }

    #[test]
    fn advanced_composition_rejects_bad_slack_and_k() {
        let s = pb(0.1, 0.0);
        assert!(matches!(
            advanced_composition(s, 10, Delta::ZERO),
            Err(Error::OutOfRange { name: "slack delta'", .. })
        ));
        assert!(matches!(
            advanced_composition(s, 0, Delta::new(1e-6).unwrap()),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            advanced_composition(pb(800.0, 0.0), 1, Delta::new(0.5).unwrap()),
            Err(Error::Infeasible { .. })
        ));
    }

    #[test]
    fn step_inverse_is_maximal_when_advanced_wins() {
        let slack = Delta::new(1e-6).unwrap();
        let step = advanced_composition_step_epsilon(Epsilon::new(2.0).unwrap(), 500, slack)
            .unwrap()
            .get();
        let compose = |e: f64| advanced_composition(pb(e, 0.0), 500, slack).unwrap();
        assert!(compose(step).epsilon().get() <= 2.0);
        assert!(compose(step.next_up()).epsilon().get() > 2.0);
    }

    #[test]
    fn cks20_is_valid_at_every_order_and_beats_bs16() {
        // The optimised bound is not above the bracket at a spread of orders.
        let (rho, delta) = (0.1, 1e-6);
        let l = ln_inv_up(delta);
        let tight = cks20_epsilon_up(rho, delta, l);
        for alpha in [1.5, 2.0, 5.0, 10.0, 15.0, 20.0, 50.0, 100.0] {
            assert!(tight <= rdp_epsilon_at_order_up(alpha, alpha * rho, l) + 1e-12);
        }
        assert!(tight < bs16_epsilon_up(rho, l));
        // A tiny ρ gives (0, δ)-DP.
        assert_eq!(cks20_epsilon_up(1e-14, 1e-5, ln_inv_up(1e-5)), 0.0);
    }
}
