//! Noise calibration for DP-SGD: the smallest noise multiplier for which `T` steps of
//! the sampled Gaussian mechanism meet an (ε, δ) target under the RDP accountant.
//!
//! **Guarantee.** The returned `z` is one whose computed ε (itself an upper bound) is
//! `≤` the target; the search only affects tightness (to `1e-10` relative), never
//! soundness.

use super::{SampledGaussianRdp, check_orders, epsilon_after_steps};
use crate::Delta;
use crate::error::{Error, Result};

/// The calibration search range for the noise multiplier.
const Z_SEARCH_MIN: f64 = 1.0 / (1u64 << 40) as f64;
const Z_SEARCH_MAX: f64 = (1u64 << 40) as f64;
/// Relative width at which the calibration bisection stops.
const CALIBRATION_REL_TOL: f64 = 1e-10;

/// The smallest noise multiplier `z` (to `1e-10` relative, rounded up) such that `steps`
/// steps of the sampled Gaussian mechanism with rate `q` are `(ε, δ)`-DP by the RDP
/// accountant over `orders` (e.g. `&DEFAULT_ORDERS`).
///
/// Bracketing by doubling/halving from `z = 1`, then bisection; the returned `z` is always
/// one whose computed ε (itself an upper bound) is `≤ epsilon`. The search covers
/// `[2⁻⁴⁰, 2⁴⁰]`.
///
/// ```
/// use dpattn_core::accounting::rdp::{
///     calibrate_sampled_gaussian, epsilon_after_steps, SampledGaussianRdp, DEFAULT_ORDERS,
/// };
/// let z = calibrate_sampled_gaussian(0.01, 10_000, 3.0, 1e-5, &DEFAULT_ORDERS)?;
/// let eps = |z| epsilon_after_steps(&SampledGaussianRdp::new(0.01, z)?, 10_000, &DEFAULT_ORDERS, 1e-5);
/// assert!(eps(z)?.epsilon <= 3.0);
/// assert!(eps(z * (1.0 - 1e-9))?.epsilon > 3.0 - 1e-6);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `q ∉ (0, 1]`, `steps = 0`, `ε` not finite and `> 0`,
/// `δ ∉ (0, 1)` or invalid orders; [`Error::Infeasible`] if even `z = 2⁴⁰` does not reach
/// `ε` (the orders cannot certify so small an ε — add larger orders);
/// [`Error::Infeasible`] from [`SampledGaussianRdp::rdp`] if a series fails to converge.
pub fn calibrate_sampled_gaussian(
    sampling_rate: f64,
    steps: u64,
    epsilon: f64,
    delta: f64,
    orders: &[f64],
) -> Result<f64> {
    if !(sampling_rate > 0.0 && sampling_rate <= 1.0) {
        return Err(Error::OutOfRange {
            name: "sampling_rate",
            value: sampling_rate,
            allowed: "(0, 1]",
        });
    }
    if steps == 0 {
        return Err(Error::OutOfRange { name: "steps", value: 0.0, allowed: "[1, inf)" });
    }
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, inf)" });
    }
    Delta::new_positive(delta)?;
    check_orders(orders)?;
    let eps_at = |z: f64| -> Result<f64> {
        let m = SampledGaussianRdp::new(sampling_rate, z)?;
        match epsilon_after_steps(&m, steps, orders, delta) {
            Ok(b) => Ok(b.epsilon),
            Err(Error::Infeasible { lhs, .. }) if lhs == f64::INFINITY => Ok(f64::INFINITY),
            Err(e) => Err(e),
        }
    };
    let (mut lo, mut hi);
    if eps_at(1.0)? <= epsilon {
        hi = 1.0;
        lo = 0.5;
        while eps_at(lo)? <= epsilon {
            hi = lo;
            lo *= 0.5;
            if lo < Z_SEARCH_MIN {
                return Ok(hi);
            }
        }
    } else {
        lo = 1.0;
        hi = 2.0;
        loop {
            let e = eps_at(hi)?;
            if e <= epsilon {
                break;
            }
            if hi >= Z_SEARCH_MAX {
                return Err(Error::Infeasible {
                    condition: "epsilon(z = 2^40) <= target epsilon",
                    lhs: e,
                    rhs: epsilon,
                });
            }
            lo = hi;
            hi *= 2.0;
        }
    }
    while hi - lo > CALIBRATION_REL_TOL * hi {
        let mid = lo + 0.5 * (hi - lo);
        if eps_at(mid)? <= epsilon {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}
