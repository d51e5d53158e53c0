//! Upward-rounded `f64` arithmetic for the RDP accountant.
//!
//! **Guarantee.** Each helper returns a double that is `≥` the exact real result of its
//! operation on its (double) operands, so a chain of them yields an upper bound.
//! [`add_up`], [`mul_up`] and [`div_up`] decide the rounding exactly (TwoSum, or the sign
//! of an FMA residual) and step one ulp up only when the rounded result is below the
//! exact one; a subnormal (or underflowed) product or quotient of non-zero operands is
//! stepped up unconditionally.
//! [`approx_up`] pads a value whose error bound is known; [`u64_up`] converts counts.
//!
//! These are private to [`rdp`](super). `add_up` is the accounting module's own; `mul_up`
//! here differs from the composition helpers in how it steps up subnormal products.

/// Unit roundoff of `f64`, 2⁻⁵³.
pub(super) const U: f64 = f64::EPSILON * 0.5;

pub(super) use crate::accounting::directed_rounding::add_up;

/// `a · b` rounded up, for `a, b ≥ 0` (fma gives the exact residual's sign).
pub(super) fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() {
        return p;
    }
    if p < f64::MIN_POSITIVE {
        // Subnormal or zero: the residual may round to 0; step up unconditionally.
        return if a == 0.0 || b == 0.0 { 0.0 } else { p.next_up() };
    }
    if libm::fma(a, b, -p) > 0.0 { p.next_up() } else { p }
}

/// `a / b` rounded up, for `a ≥ 0`, `b > 0`.
pub(super) fn div_up(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() {
        return q;
    }
    if q < f64::MIN_POSITIVE {
        return if a == 0.0 { 0.0 } else { q.next_up() };
    }
    if libm::fma(q, b, -a) < 0.0 { q.next_up() } else { q }
}

/// `x` increased by the relative amount `rel` and one more ulp (for values whose error is
/// bounded by `rel·|x|` plus half an ulp).
pub(super) fn approx_up(x: f64, rel: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    (x + x.abs() * rel).next_up()
}

/// The smallest `f64` ≥ `n` (`u64 → f64` rounds to nearest).
pub(super) fn u64_up(n: u64) -> f64 {
    let f = n as f64;
    // `f ≤ 2^64` is an integer, so `as u128` is exact.
    if (f as u128) < u128::from(n) { f.next_up() } else { f }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directed_rounding_is_never_below() {
        let (a, b) = (0.1, 0.2);
        assert!(add_up(a, b) >= 0.30000000000000004);
        assert_eq!(add_up(1.0, 2.0), 3.0);
        assert_eq!(mul_up(3.0, 0.5), 1.5);
        let p = mul_up(0.1, 0.1);
        assert!(libm::fma(0.1, 0.1, -p) <= 0.0);
        let q = div_up(1.0, 3.0);
        assert!(libm::fma(q, 3.0, -1.0) >= 0.0);
        assert_eq!(u64_up(u64::MAX), 18446744073709551616.0);
        assert!(u64_up((1 << 53) + 1) >= ((1u64 << 53) + 1) as f64);
        assert_eq!(div_up(0.0, 3.0), 0.0);
        assert!(mul_up(1e-200, 1e-200) > 0.0);
    }
}
