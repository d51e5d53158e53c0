//! Argument checks shared by the paper tools: private copies of the core's crate-private
//! helpers (same conditions, same [`Error`] variants and messages), so that the core's
//! public API does not grow for them.

use dpattn_core::{Error, Result};

/// `a · b` for sizes, or [`Error::SizeOverflow`] naming `what`.
#[inline]
pub(crate) fn mul_size(a: usize, b: usize, what: &'static str) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow { what })
}

/// `x ∈ (0, ∞)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn positive_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, inf)" })
    }
}

/// `x ∈ (0, 1)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn open_unit(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x < 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1)" })
    }
}

/// `x ∈ (0, 1]` (a sampling rate, a probability that may be 1), or [`Error::OutOfRange`]
/// naming `name`.
#[inline]
pub(crate) fn rate(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1]" })
    }
}

/// `x ∈ [0, ∞)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn nonneg_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "[0, inf), finite" })
    }
}

/// A buffer length equal to `needed`, or [`Error::ShapeMismatch`] naming `arg`.
pub(crate) fn check_len(arg: &'static str, got: usize, needed: usize) -> Result<()> {
    if got != needed {
        return Err(Error::ShapeMismatch { arg, axis: "len", expected: needed, got });
    }
    Ok(())
}

/// Prompt sizes `N, L, D ≥ 1`; returns `(N·L, N·L·D)`, or [`Error::OutOfRange`] /
/// [`Error::SizeOverflow`].
pub(crate) fn check_sizes(n: usize, l: usize, d: usize) -> Result<(usize, usize)> {
    for (name, v) in [("n", n), ("l", l), ("d", d)] {
        if v == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: "[1, inf)" });
        }
    }
    let nl = mul_size(n, l, "N·L")?;
    Ok((nl, mul_size(nl, d, "N·L·D")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_accept_their_ranges_and_name_the_argument() {
        assert_eq!(positive_finite("x", 2.0), Ok(2.0));
        assert_eq!(open_unit("x", 0.5), Ok(0.5));
        assert_eq!(rate("x", 1.0), Ok(1.0));
        assert_eq!(nonneg_finite("x", 0.0), Ok(0.0));
        for (r, allowed) in [
            (positive_finite("x", 0.0), "(0, inf)"),
            (open_unit("x", 1.0), "(0, 1)"),
            (rate("x", 0.0), "(0, 1]"),
            (nonneg_finite("x", f64::INFINITY), "[0, inf), finite"),
        ] {
            assert!(
                matches!(r, Err(Error::OutOfRange { name: "x", allowed: a, .. }) if a == allowed)
            );
        }
        assert_eq!(check_sizes(2, 3, 4), Ok((6, 24)));
        assert!(matches!(check_sizes(2, 0, 4), Err(Error::OutOfRange { name: "l", .. })));
        assert!(matches!(check_sizes(usize::MAX, 2, 1), Err(Error::SizeOverflow { .. })));
        assert!(matches!(check_len("b", 3, 4), Err(Error::ShapeMismatch { arg: "b", .. })));
    }
}
