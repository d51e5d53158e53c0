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
//!
//! The zCDP items ([`Rho`] and the `zcdp_*` functions) are defined in
//! [`zcdp`](super::zcdp) and re-exported here.

use crate::directed_rounding::{
    add_up, count_up, div_down, exp_m1_up, largest_feasible, ln_inv_up, mul_up, sqrt_up,
};
use crate::error::{Error, Result};
use crate::privacy_params::{Delta, Epsilon, PrivacyBudget};

pub use super::zcdp::{
    Rho, zcdp_compose, zcdp_from_pure, zcdp_gaussian, zcdp_rho_for, zcdp_rho_for_bs16,
    zcdp_to_epsilon, zcdp_to_epsilon_bs16,
};

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

/// The tighter of [`basic_composition_k`] and [`advanced_composition`] for `k` `(ε, δ)`-DP
/// steps: basic composition when its ε is no larger (its δ, `kδ`, is then smaller too),
/// else advanced composition with slack `δ'`. Both are valid; this reports the better one.
///
/// ```
/// use dpattn_core::{Delta, PrivacyBudget};
/// use dpattn_core::accounting::composition::tighter_composition;
/// let slack = Delta::new(1e-6)?;
/// // Two steps: basic (0.2) beats advanced (√(4 ln 10⁶)·0.1 + …).
/// assert_eq!(tighter_composition(PrivacyBudget::new(0.1, 0.0)?, 2, slack)?.epsilon().get(), 0.2);
/// // 100 steps: advanced (6.308) beats basic (10).
/// assert!(tighter_composition(PrivacyBudget::new(0.1, 0.0)?, 100, slack)?.epsilon().get() < 6.31);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`advanced_composition`] and [`basic_composition_k`].
pub fn tighter_composition(step: PrivacyBudget, k: u64, slack: Delta) -> Result<PrivacyBudget> {
    let adv = advanced_composition(step, k, slack)?;
    let basic = basic_composition_k(step, k)?;
    Ok(if basic.epsilon().get() <= adv.epsilon().get() { basic } else { adv })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directed_rounding::mul_down;

    fn pb(e: f64, d: f64) -> PrivacyBudget {
        PrivacyBudget::new(e, d).unwrap()
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
}
