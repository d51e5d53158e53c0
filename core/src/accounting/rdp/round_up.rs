//! Upward-rounded `f64` arithmetic for the RDP accountant.
//!
//! **Guarantee.** Each helper returns a double that is `≥` the exact real result of its
//! operation on its (double) operands, so a chain of them yields an upper bound.
//! `add_up`, `mul_up`, `div_up` and `count_up` are the crate's directed-rounding helpers
//! (`crate::directed_rounding`), re-exported for the accountant's files;
//! [`approx_up`] pads a value whose error bound is known.

/// Unit roundoff of `f64`, 2⁻⁵³.
pub(super) const U: f64 = f64::EPSILON * 0.5;

pub(super) use crate::directed_rounding::{add_up, count_up, div_up, mul_up};

/// `x` increased by the relative amount `rel` and one more ulp (for values whose error is
/// bounded by `rel·|x|` plus half an ulp).
pub(super) fn approx_up(x: f64, rel: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    (x + x.abs() * rel).next_up()
}
