//! Laplace mechanism calibration: the scale `b` for `(ε, 0)`-DP and back.
//!
//! **Guarantee.** If `f` has L1 sensitivity `Δ` under the caller's neighbour relation,
//! `f(X) + Lap(b)^d` is `ε`-DP for `b ≥ Δ/ε` (Dwork & Roth, Thm 3.6). [`laplace_scale`]
//! returns the smallest `f64` `b` with `b · ε ≥ Δ` exactly (the quotient rounded *up*), and
//! [`laplace_epsilon`] the smallest `f64` `ε` with `ε · b ≥ Δ`, so neither can understate
//! the noise or the privacy loss. The truncated Laplace `TLap(Δ, ε, δ)` of
//! `docs/PAPERS.md` §1.3 needs no calibration beyond its parameters: its bound and
//! variance are [`TruncatedLaplace::bound`](crate::sampling::TruncatedLaplace::bound) and
//! [`TruncatedLaplace::variance`](crate::sampling::TruncatedLaplace::variance).
//! Releasing a float `x + Laplace` leaks through low bits; the exact release is
//! [`GridLaplace`](crate::sampling::GridLaplace).

use crate::directed_rounding::div_up;
use crate::error::{Result, positive_finite};

/// The Laplace scale `b = Δ/ε`, rounded up.
///
/// ```
/// use dpattn_core::calibration::laplace_mechanism::laplace_scale;
/// assert_eq!(laplace_scale(1.0, 0.5)?, 2.0);
/// // 1/3 is not representable: the result is the double just above it, never below.
/// assert!(laplace_scale(1.0, 3.0)? * 3.0 >= 1.0);
/// assert!(laplace_scale(1.0, 0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`](crate::Error::OutOfRange) if `Δ` or `ε` is not in `(0, ∞)` or `Δ/ε`
/// overflows.
pub fn laplace_scale(sensitivity: f64, epsilon: f64) -> Result<f64> {
    positive_finite("sensitivity", sensitivity)?;
    positive_finite("epsilon", epsilon)?;
    let b = div_up(sensitivity, epsilon);
    positive_finite("sensitivity / epsilon", b)?;
    Ok(b)
}

/// The privacy loss `ε = Δ/b` of Laplace noise with scale `b`, rounded up.
///
/// ```
/// use dpattn_core::calibration::laplace_mechanism::{laplace_epsilon, laplace_scale};
/// assert_eq!(laplace_epsilon(2.0, 1.0)?, 0.5);
/// let b = laplace_scale(1.0, 0.7)?;
/// assert!(laplace_epsilon(b, 1.0)? <= 0.7);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`](crate::Error::OutOfRange) if `b` or `Δ` is not in `(0, ∞)` or the quotient
/// overflows.
pub fn laplace_epsilon(scale: f64, sensitivity: f64) -> Result<f64> {
    positive_finite("scale", scale)?;
    positive_finite("sensitivity", sensitivity)?;
    let e = div_up(sensitivity, scale);
    positive_finite("sensitivity / scale", e)?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn quotients_round_up_exactly() {
        // Exhaustive over small integer ratios: b·ε ≥ Δ always, and b.next_down()·ε < Δ
        // whenever b is not the exact quotient.
        for n in 1..60u32 {
            for d in 1..60u32 {
                let (n, d) = (f64::from(n), f64::from(d));
                let b = laplace_scale(n, d).unwrap();
                assert!(libm::fma(b, d, -n) >= 0.0);
                assert!(libm::fma(b.next_down(), d, -n) < 0.0, "{n}/{d}");
                let e = laplace_epsilon(b, n).unwrap();
                assert!(e <= d * (1.0 + 1e-15) && libm::fma(e, b, -n) >= 0.0);
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        for (s, e) in [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (f64::NAN, 1.0), (1.0, f64::INFINITY)] {
            assert!(matches!(laplace_scale(s, e), Err(Error::OutOfRange { .. })), "{s} {e}");
            assert!(matches!(laplace_epsilon(s, e), Err(Error::OutOfRange { .. })), "{s} {e}");
        }
        // Overflowing quotients are errors; underflowing ones round up to the smallest double.
        assert!(matches!(laplace_scale(1e300, 1e-300), Err(Error::OutOfRange { .. })));
        assert_eq!(laplace_epsilon(1e300, 1e-300), Ok(f64::from_bits(1)));
    }
}
