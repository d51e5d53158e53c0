//! The NoisyHead simulations' size checks (the core's general argument checks are
//! `dpattn_core::error::{mul_size, positive_finite, …}`).

use dpattn_core::error::mul_size;
use dpattn_core::{Error, Result};

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
    fn size_checks_accept_their_ranges_and_name_the_argument() {
        assert_eq!(check_sizes(2, 3, 4), Ok((6, 24)));
        assert!(matches!(check_sizes(2, 0, 4), Err(Error::OutOfRange { name: "l", .. })));
        assert!(matches!(check_sizes(usize::MAX, 2, 1), Err(Error::SizeOverflow { .. })));
        assert!(matches!(check_len("b", 3, 4), Err(Error::ShapeMismatch { arg: "b", .. })));
        assert_eq!(check_len("b", 4, 4), Ok(()));
    }
}
