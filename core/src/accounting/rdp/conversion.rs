//! RDP → (ε, δ)-DP: the conversion of Balle, Barthe, Gaboardi, Hsu, Sato 2020
//! (arXiv:1905.09982, Thm 21; Canonne, Kamath, Steinke 2020, Prop. 12) and its inverse,
//! minimised over the orders, with the Bretagnolle–Huber bound for tiny ε(α).
//!
//! **Guarantee.** ε and δ are rounded up (each order's value carries an explicit bound on
//! its rounding error); ε is clamped at 0 and δ at 1. See the [`rdp`](super) module docs.

use super::round_up::{U, approx_up, count_up, mul_up};
use super::{RdpMechanism, check_orders, check_rdp_value};
use crate::Delta;
use crate::error::{Error, Result, nonneg_finite};

/// An (ε, δ) guarantee's ε from an RDP curve, and the order that gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpsilonBound {
    /// The smallest ε over the orders (≥ 0, finite, rounded up).
    pub epsilon: f64,
    /// The order α attaining it (the first one on ties).
    pub order: f64,
}

/// An (ε, δ) guarantee's δ from an RDP curve, and the order that gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaBound {
    /// The smallest δ over the orders (in `[0, 1]`, rounded up).
    pub delta: f64,
    /// The order α attaining it (the first one on ties).
    pub order: f64,
}

/// Upper bound on the ε(δ) given by one order (Balle et al. 2020 Thm 21, and the
/// Bretagnolle–Huber bound for tiny `r`); `+∞` if `r = +∞`.
fn epsilon_at(order: f64, r: f64, ln_delta: f64) -> f64 {
    if r == f64::INFINITY {
        return f64::INFINITY;
    }
    // D_α = 0: the output distributions are identical.
    if r == 0.0 {
        return 0.0;
    }
    // TV ≤ √(1 − e^{−KL}) ≤ √(1 − e^{−r}) ≤ δ  ⇒  ε = 0 (compared in log space, the left
    // side rounded up and ln δ down, so that tiny δ cannot underflow).
    if ln_tv_up(r) <= ln_delta - 2.0 * U * ln_delta.abs() {
        return 0.0;
    }
    let ln_order = libm::log(order);
    let l1 = libm::log1p(-1.0 / order);
    let l2 = (ln_delta + ln_order) / (order - 1.0);
    let eps = r + l1 - l2;
    let err = 8.0 * U * (r + l1.abs() + l2.abs() + (ln_delta.abs() + ln_order) / (order - 1.0));
    approx_up(eps + err, 0.0).max(0.0)
}

/// Upper bound on ln δ(ε) given by one order; 0 (δ = 1) if `r = +∞`.
fn ln_delta_at(order: f64, r: f64, epsilon: f64) -> f64 {
    if r == f64::INFINITY {
        return 0.0;
    }
    if r == 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_order = libm::log(order);
    let l1 = libm::log1p(-1.0 / order);
    let am1 = order - 1.0;
    let ln_d = am1 * (r - epsilon + l1) - ln_order;
    let err = 8.0 * U * (am1 * (r + epsilon + l1.abs()) + ln_order + ln_d.abs() + 1.0);
    let rdp_bound = ln_d + err;
    // Bretagnolle–Huber: δ(ε) ≤ δ(0) = TV ≤ √(1 − e^{−r}).
    rdp_bound.min(ln_tv_up(r)).min(0.0)
}

/// Upper bound on ln √(1 − e^{−r}) for `r > 0` finite (the Bretagnolle–Huber bound on the
/// total variation distance when the KL divergence is at most `r`).
fn ln_tv_up(r: f64) -> f64 {
    let tv2 = approx_up(-libm::expm1(-r), 4.0 * U);
    approx_up(0.5 * libm::log(tv2), 4.0 * U)
}

/// The (ε, δ)-DP ε implied by RDP values `rdp[i]` at `orders[i]` (Balle et al. 2020,
/// Thm 21, minimised over the orders; see the module docs).
///
/// ```
/// use dpattn_core::accounting::rdp::epsilon_from_rdp;
/// // A Gaussian with σ = Δ: ε(α) = α/2.
/// let orders = [2.0, 4.0, 8.0];
/// let rdp = [1.0, 2.0, 4.0];
/// let b = epsilon_from_rdp(&orders, &rdp, 1e-5)?;
/// assert_eq!(b.order, 4.0);
/// let direct = 2.0 + (3.0f64 / 4.0).ln() - ((1e-5f64).ln() + 4.0f64.ln()) / 3.0;
/// assert!(b.epsilon >= direct && b.epsilon - direct < 1e-14);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] if the lengths differ; [`Error::OutOfRange`] for an empty or
/// invalid order list, a NaN or negative RDP value, or `δ ∉ (0, 1)`;
/// [`Error::Infeasible`] if every RDP value is `+∞` (no finite ε exists).
pub fn epsilon_from_rdp(orders: &[f64], rdp: &[f64], delta: f64) -> Result<EpsilonBound> {
    check_curve(orders, rdp)?;
    Delta::new_positive(delta)?;
    let ln_delta = libm::log(delta);
    let mut best = EpsilonBound { epsilon: f64::INFINITY, order: orders[0] };
    for (&a, &r) in orders.iter().zip(rdp) {
        let e = epsilon_at(a, r, ln_delta);
        if e < best.epsilon {
            best = EpsilonBound { epsilon: e, order: a };
        }
    }
    finite_epsilon(best)
}

fn finite_epsilon(best: EpsilonBound) -> Result<EpsilonBound> {
    if best.epsilon.is_finite() {
        Ok(best)
    } else {
        Err(Error::Infeasible {
            condition: "min over orders of epsilon(alpha) < inf (some RDP value is finite)",
            lhs: f64::INFINITY,
            rhs: f64::INFINITY,
        })
    }
}

/// The (ε, δ)-DP δ implied by RDP values `rdp[i]` at `orders[i]` for a given ε: the
/// inverse of [`epsilon_from_rdp`], minimised over the orders, clamped at 1.
///
/// ```
/// use dpattn_core::accounting::rdp::{delta_from_rdp, epsilon_from_rdp};
/// let orders = [2.0, 4.0, 8.0];
/// let rdp = [1.0, 2.0, 4.0];
/// let e = epsilon_from_rdp(&orders, &rdp, 1e-5)?;
/// let d = delta_from_rdp(&orders, &rdp, e.epsilon)?;
/// // Both directions round up: the round trip is exact up to rounding.
/// assert!((d.delta / 1e-5 - 1.0).abs() < 1e-12 && d.order == e.order);
/// // δ(0) = e^{(α−1)(ε(α) + ln(1 − 1/α)) − ln α} at α = 2.
/// let d0 = delta_from_rdp(&orders, &rdp, 0.0)?;
/// assert!((d0.delta - (1.0 + 0.5f64.ln() - 2.0f64.ln()).exp()).abs() < 1e-13);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] if the lengths differ; [`Error::OutOfRange`] for an empty or
/// invalid order list, a NaN or negative RDP value, or ε negative or not finite.
pub fn delta_from_rdp(orders: &[f64], rdp: &[f64], epsilon: f64) -> Result<DeltaBound> {
    check_curve(orders, rdp)?;
    nonneg_finite("epsilon", epsilon)?;
    let mut best_ln = f64::INFINITY;
    let mut order = orders[0];
    for (&a, &r) in orders.iter().zip(rdp) {
        let l = ln_delta_at(a, r, epsilon);
        if l < best_ln {
            best_ln = l;
            order = a;
        }
    }
    Ok(DeltaBound { delta: delta_from_ln(best_ln), order })
}

/// exp(`ln_delta`) rounded up, in `[0, 1]`; positive unless `ln_delta = −∞`.
fn delta_from_ln(ln_delta: f64) -> f64 {
    if ln_delta == f64::NEG_INFINITY {
        return 0.0;
    }
    approx_up(libm::exp(ln_delta), 4.0 * U).clamp(2.0 * f64::MIN_POSITIVE, 1.0)
}

/// ε after `steps` uses of `mechanism`, over `orders`, without storing the curve (no
/// allocation; any number of orders).
///
/// ```
/// use dpattn_core::accounting::rdp::{epsilon_after_steps, SampledGaussianRdp, DEFAULT_ORDERS};
/// // Opacus' accountant test: q = 0.04, σ = 1.5, 2250 steps, δ = 1e-5, its orders
/// // (1.1..=10.9 step 0.1, then 12..=63): ε = 7.32911117143.
/// let mut opacus = [0.0; 151];
/// for (x, a) in opacus.iter_mut().enumerate() {
///     *a = if x < 99 { 1.0 + (x + 1) as f64 / 10.0 } else { (x - 99 + 12) as f64 };
/// }
/// let m = SampledGaussianRdp::new(0.04, 1.5)?;
/// let b = epsilon_after_steps(&m, 2250, &opacus, 1e-5)?;
/// assert!((b.epsilon - 7.32911117143).abs() < 1e-9);
/// assert!(epsilon_after_steps(&m, 2250, &DEFAULT_ORDERS, 1e-5)?.epsilon <= b.epsilon);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`epsilon_from_rdp`], plus whatever `mechanism.rdp` returns.
pub fn epsilon_after_steps<M: RdpMechanism + ?Sized>(
    mechanism: &M,
    steps: u64,
    orders: &[f64],
    delta: f64,
) -> Result<EpsilonBound> {
    check_orders(orders)?;
    Delta::new_positive(delta)?;
    let ln_delta = libm::log(delta);
    let mut best = EpsilonBound { epsilon: f64::INFINITY, order: orders[0] };
    for &a in orders {
        let r = scaled_rdp(mechanism, a, steps)?;
        let e = epsilon_at(a, r, ln_delta);
        if e < best.epsilon {
            best = EpsilonBound { epsilon: e, order: a };
        }
    }
    finite_epsilon(best)
}

/// `steps · mechanism.rdp(order)`, validated and rounded up (0 steps cost nothing).
pub(super) fn scaled_rdp<M: RdpMechanism + ?Sized>(
    mechanism: &M,
    order: f64,
    steps: u64,
) -> Result<f64> {
    let r = mechanism.rdp(order)?;
    check_rdp_value(r)?;
    Ok(if steps == 0 || r == 0.0 { 0.0 } else { mul_up(r, count_up(steps)) })
}

/// The checks both conversions share: equal lengths, valid orders, RDP values `≥ 0`.
fn check_curve(orders: &[f64], rdp: &[f64]) -> Result<()> {
    if orders.len() != rdp.len() {
        return Err(Error::ShapeMismatch {
            arg: "rdp",
            axis: "len",
            expected: orders.len(),
            got: rdp.len(),
        });
    }
    check_orders(orders)?;
    rdp.iter().try_for_each(|&r| check_rdp_value(r))
}
