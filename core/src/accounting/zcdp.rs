//! Zero-concentrated differential privacy (zCDP, Bun & Steinke 2016): the parameter
//! [`Rho`], composition, the zCDP of pure-DP and Gaussian mechanisms, and conversion
//! between ρ-zCDP and `(ε, δ)`-DP.
//!
//! **Guarantee.** As for [`composition`](super::composition): every ρ of a mechanism and
//! every converted ε is rounded *up*, and the ρ that [`zcdp_rho_for`] and
//! [`zcdp_rho_for_bs16`] allow a caller to spend is rounded *down* (the directed-rounding
//! helpers decide each rounding exactly or pad `libm` results by two ulps). Infeasible
//! inputs are reported as [`Error::Infeasible`], never as NaN or infinity. The
//! neighbour relation is whatever the composed mechanisms share.
//!
//! **Sources.**
//!
//! | function | statement |
//! | --- | --- |
//! | [`Rho`], [`zcdp_compose`] | ρ-zCDP composes by adding ρ: Bun & Steinke 2016, Lemma 1.7 (adaptive) |
//! | [`zcdp_from_pure`] | ε-DP ⇒ (ε²/2)-zCDP: Bun & Steinke 2016, Prop 1.4 |
//! | [`zcdp_gaussian`] | Gaussian mechanism `N(0, σ²)` with L2 sensitivity Δ is `Δ²/(2σ²)`-zCDP: Bun & Steinke 2016, Prop 1.6 |
//! | [`zcdp_to_epsilon_bs16`] | ρ-zCDP ⇒ `(ρ + 2√(ρ ln(1/δ)), δ)`-DP: Bun & Steinke 2016, Prop 1.3 |
//! | [`zcdp_to_epsilon`] | ρ-zCDP ⇒ `(ε, δ)`-DP with `ε = inf_{α>1} αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)`: Canonne, Kamath, Steinke 2020, Cor 13 (from their Prop 12; the same bound is Asoodeh et al. 2021, and it is what `dp_accounting` uses for RDP) |
//! | [`zcdp_rho_for`], [`zcdp_rho_for_bs16`] | the largest ρ whose conversion is within a target `(ε, δ)` |
//!
//! Every item is also re-exported from [`composition`](super::composition), its original
//! home.

use crate::directed_rounding::{
    add_down, add_up, div_down, div_up, largest_feasible, ln_1p_up, ln_down, ln_inv_up, mul_down,
    mul_up, sqrt_up,
};
use crate::error::{Error, Result};
use crate::privacy_params::{Delta, Epsilon, PrivacyBudget, Sensitivity};

/// `δ` as an `f64`, rejecting `δ = 0` (every conversion needs `ln(1/δ)` finite).
fn check_positive_delta(delta: Delta) -> Result<f64> {
    let d = delta.get();
    if d > 0.0 {
        Ok(d)
    } else {
        Err(Error::OutOfRange { name: "delta", value: d, allowed: "(0, 1)" })
    }
}

/// A zero-concentrated DP parameter ρ (Bun & Steinke 2016): finite and `> 0`.
///
/// A mechanism `M` is ρ-zCDP if `D_α(M(x) ‖ M(x')) ≤ αρ` for every order `α > 1` and all
/// neighbouring `x, x'`.
///
/// ```
/// use dpattn_core::accounting::zcdp::Rho;
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
    /// # use dpattn_core::accounting::zcdp::Rho;
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
    /// # use dpattn_core::accounting::zcdp::Rho;
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
/// use dpattn_core::accounting::zcdp::{Rho, zcdp_compose};
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
/// use dpattn_core::accounting::zcdp::zcdp_from_pure;
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
/// use dpattn_core::accounting::zcdp::zcdp_gaussian;
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
fn rdp_epsilon_at_order_up(alpha: f64, tau_up: f64, l_up: f64) -> f64 {
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
/// use dpattn_core::accounting::zcdp::{Rho, zcdp_to_epsilon_bs16};
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
/// use dpattn_core::accounting::zcdp::{Rho, zcdp_to_epsilon, zcdp_to_epsilon_bs16};
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
/// use dpattn_core::accounting::zcdp::{zcdp_rho_for, zcdp_rho_for_bs16, zcdp_to_epsilon};
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
/// use dpattn_core::accounting::zcdp::zcdp_rho_for_bs16;
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
