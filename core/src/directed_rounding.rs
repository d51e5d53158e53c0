//! Directed rounding: the one set of `f64` helpers every bound in the crate is rounded with
//! (composition, zCDP, the ledger, the RDP accountant, grid-noise and Laplace calibration).
//!
//! **Guarantee.** Each `*_up` helper returns a double `≥` the exact real result of its
//! operation on its (double) operands, each `*_down` helper one `≤` it, so chains of them
//! bracket the real-number formula. Sums use TwoSum and products, quotients and square
//! roots an FMA remainder to decide the rounding exactly, so an exactly representable
//! result (`0.25 + 0.5`) is returned exactly; with an operand outside `[1e-150, 1e150]`,
//! where that remainder could underflow, they step one ulp in the safe direction
//! unconditionally. `ln`, `ln(1 + x)` and `eˣ − 1` come from `libm` (error below one ulp)
//! and are padded by two ulps. [`largest_feasible`] bisects over the bit patterns of
//! non-negative doubles.

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

/// `(s, e)` with `s = fl(x + y)` and `s + e = x + y` exactly (Knuth's TwoSum); `e = 0` when
/// `s` is not finite.
pub(crate) fn two_sum(x: f64, y: f64) -> (f64, f64) {
    let s = x + y;
    let yy = s - x;
    let e = (x - (s - yy)) + (y - yy);
    (s, if e.is_finite() { e } else { 0.0 })
}

/// `a + b` rounded towards `+∞` (TwoSum: the rounding error of `a + b` is exact).
pub(crate) fn add_up(a: f64, b: f64) -> f64 {
    let (s, err) = two_sum(a, b);
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
pub(crate) fn ln_down(x: f64) -> f64 {
    pad_down(libm::log(x))
}

/// An upper bound on `ln(1/δ)` for `δ ∈ (0, 1)`; positive and finite.
pub(crate) fn ln_inv_up(delta: f64) -> f64 {
    -ln_down(delta)
}

/// An upper bound on `ln(1 + x)` (`x > −1`).
pub(crate) fn ln_1p_up(x: f64) -> f64 {
    pad_up(libm::log1p(x))
}

/// An upper bound on `eˣ − 1`.
pub(crate) fn exp_m1_up(x: f64) -> f64 {
    pad_up(libm::expm1(x))
}

/// `k` as an `f64`, rounded up (exact below 2⁵³).
pub(crate) fn count_up(k: u64) -> f64 {
    let f = k as f64;
    // `f` is an integer no larger than 2⁶⁴, so the cast back to u128 is exact.
    if (f as u128) < u128::from(k) { f.next_up() } else { f }
}

/// `γ_n = n·u/(1 − n·u)` with `u = 2⁻⁵³`, rounded up: the standard bound on the relative
/// error of `n` chained `f64` roundings (Higham, *Accuracy and Stability*, Lemma 3.1);
/// `+∞` when `n·u ≥ 1/2`, where the bound is not used.
pub(crate) fn gamma_up(n: f64) -> f64 {
    let nu = mul_up(n, f64::EPSILON / 2.0);
    if nu.is_nan() || nu >= 0.5 {
        return f64::INFINITY;
    }
    div_up(nu, add_down(1.0, -nu))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directed_rounding_helpers_are_the_tightest_bounds() {
        // Each result is on the right side of the exact value (the FMA residual is exact)
        // and its neighbour towards the exact value is on the wrong side.
        let xs = [0.1, 0.2, 0.3, 1.0 / 3.0, 2.0, 3.0, 7.0, 1e10, 0.7, 123.456];
        for &a in &xs {
            let r = sqrt_up(a);
            assert!(
                libm::fma(r, r, -a) >= 0.0 && libm::fma(r.next_down(), r.next_down(), -a) < 0.0
            );
            for &b in &xs {
                let p = mul_up(a, b);
                assert!(libm::fma(a, b, -p) <= 0.0 && libm::fma(a, b, -p.next_down()) > 0.0);
                let q = div_up(a, b);
                assert!(libm::fma(-q, b, a) <= 0.0 && libm::fma(-q.next_down(), b, a) > 0.0);
            }
        }
        // add_up: 1 + 2^−60 rounds to 1 in nearest; the bound is the next double. Exact sums
        // are kept.
        assert_eq!(add_up(1.0, 2f64.powi(-60)), 1.0f64.next_up());
        assert_eq!(add_up(1.0, -2f64.powi(-60)), 1.0);
        assert_eq!(add_up(1.0, 0.5), 1.5);
        assert_eq!(add_up(0.1, 0.2), 0.1 + 0.2); // nearest is above the exact sum
        assert!(mul_up(1e-200, 1e-200) > 0.0);
    }

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
        assert_eq!(count_up(u64::MAX), 18446744073709551616.0);
        assert!(count_up((1 << 53) + 1) >= ((1u64 << 53) + 1) as f64);
        assert_eq!(div_up(0.0, 3.0), 0.0);
        assert!(mul_up(1e-200, 1e-200) > 0.0);
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
    fn gamma_bounds_chained_roundings() {
        let u = 2f64.powi(-53);
        // γ_1 = u/(1 − u) lies strictly between u and u + 2u².
        let g1 = gamma_up(1.0);
        assert!(g1 > u && g1 <= u + 2.0 * u * u);
        assert!(gamma_up(1e6) >= 1e6 * u / (1.0 - 1e6 * u));
        assert_eq!(gamma_up(2f64.powi(52)), f64::INFINITY);
        assert!(gamma_up(2f64.powi(51)).is_finite());
    }

    #[test]
    fn bisection_finds_the_largest_feasible_double() {
        assert_eq!(largest_feasible(|x| x <= 0.3), 0.3);
        assert_eq!(largest_feasible(|x| mul_up(x, x) <= 2.0), libm::sqrt(2.0).next_down());
        assert_eq!(largest_feasible(|_| false), 0.0);
        assert_eq!(largest_feasible(|_| true), f64::MAX);
    }
}
