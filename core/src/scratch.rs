//! The scratch convention shared by every allocation-free routine.
//!
//! A routine `foo` that needs temporary memory comes with `foo_scratch_len(..) -> usize`
//! (in elements of the scratch type) and takes `scratch: &mut [T]` of at least that many
//! elements. It never allocates; a short scratch is [`Error::ScratchTooSmall`], not a
//! panic. The contents of scratch on entry are ignored and on exit are unspecified. Under
//! the `alloc` feature a convenience wrapper allocates the scratch itself.
//!
//! Composite routines add the lengths of the parts that are live at the same time (with
//! [`scratch_len_sum`], which reports overflow) and take the maximum of parts used one
//! after another.

use crate::error::{Error, Result};

/// Splits `needed` elements off the front of `scratch`: `(taken, rest)`.
///
/// ```
/// use dpattn_core::scratch::take_scratch;
/// let mut buf = [0.0f32; 10];
/// let (a, rest) = take_scratch(&mut buf, 4)?;
/// let (b, _) = take_scratch(rest, 6)?;
/// assert_eq!((a.len(), b.len()), (4, 6));
/// assert!(take_scratch(&mut buf, 11).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn take_scratch<T>(scratch: &mut [T], needed: usize) -> Result<(&mut [T], &mut [T])> {
    check_scratch(scratch.len(), needed)?;
    Ok(scratch.split_at_mut(needed))
}

/// [`Error::ScratchTooSmall`] unless `got >= needed`.
///
/// ```
/// use dpattn_core::{Error, scratch::check_scratch};
/// assert_eq!(check_scratch(3, 5), Err(Error::ScratchTooSmall { needed: 5, got: 3 }));
/// assert_eq!(check_scratch(5, 5), Ok(()));
/// ```
pub fn check_scratch(got: usize, needed: usize) -> Result<()> {
    if got < needed {
        return Err(Error::ScratchTooSmall { needed, got });
    }
    Ok(())
}

/// Sum of scratch lengths of parts that are live at once, or [`Error::SizeOverflow`].
///
/// ```
/// use dpattn_core::scratch::scratch_len_sum;
/// assert_eq!(scratch_len_sum(&[3, 4, 5]), Ok(12));
/// assert!(scratch_len_sum(&[usize::MAX, 1]).is_err());
/// ```
pub fn scratch_len_sum(parts: &[usize]) -> Result<usize> {
    parts.iter().try_fold(0usize, |acc, &p| {
        acc.checked_add(p).ok_or(Error::SizeOverflow { what: "scratch length" })
    })
}

/// A `Vec` of `n` copies of `x`, or [`Error::AllocationFailed`] naming `what` instead of
/// aborting: how every `alloc` convenience wrapper allocates outputs and scratch.
#[cfg(feature = "alloc")]
pub(crate) fn try_filled<E: Copy>(
    n: usize,
    x: E,
    what: &'static str,
) -> Result<alloc::vec::Vec<E>> {
    let mut v = alloc::vec::Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::AllocationFailed { what, elements: n })?;
    v.resize(n, x);
    Ok(v)
}
