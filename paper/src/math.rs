//! Numerical helpers shared by the paper tools: private copies of the core's crate-private
//! ones, bit for bit the same computations.

/// ln(eˣ − 1) for `x > 0` (`x` finite), without overflow or cancellation.
pub(crate) fn ln_expm1(x: f64) -> f64 {
    if x > 36.0 { x + libm::log1p(-libm::exp(-x)) } else { libm::log(libm::expm1(x)) }
}

/// Euclidean norm with scaling, as `max|xᵢ| · √(Σ (xᵢ/max)²)`: finite whenever every entry
/// is finite and the norm is representable (no overflow for 1e300-sized entries, no
/// underflow to 0 for tiny ones); NaN if any entry is NaN, +∞ if any is infinite, 0 for the
/// zero vector.
pub(crate) fn scaled_norm(x: &[f64]) -> f64 {
    let mut m = 0.0f64;
    for v in x {
        let a = v.abs();
        if a.is_nan() {
            return f64::NAN;
        }
        if a > m {
            m = a;
        }
    }
    if m == 0.0 || m.is_infinite() {
        return m;
    }
    let s: f64 = x.iter().map(|v| (v / m) * (v / m)).sum();
    m * libm::sqrt(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_expm1_is_smooth_across_the_switch() {
        let a = ln_expm1(36.0);
        let b = ln_expm1(36.0f64.next_up());
        assert!((a - b).abs() < 1e-13);
        assert!((ln_expm1(1e-200) - libm::log(1e-200)).abs() < 1e-12);
    }

    #[test]
    fn scaled_norm_neither_overflows_nor_underflows() {
        assert_eq!(scaled_norm(&[3.0, -4.0]), 5.0);
        assert_eq!(scaled_norm(&[0.0, 0.0]), 0.0);
        assert!((scaled_norm(&[3e300, 4e300]) / 5e300 - 1.0).abs() < 1e-15);
        assert!((scaled_norm(&[3e-300, 4e-300]) / 5e-300 - 1.0).abs() < 1e-15);
        assert!(scaled_norm(&[1.0, f64::NAN, f64::INFINITY]).is_nan());
        assert_eq!(scaled_norm(&[1.0, f64::NEG_INFINITY]), f64::INFINITY);
    }
}
