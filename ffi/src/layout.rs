//! Tensor layout queries from C.

use dpattn_core::Layout4;

use crate::boundary::{FfiError, ffi_status};
use crate::status::dpattn_status;

/// Computes how many elements a buffer needs for a `[batch, heads, seq, dim]` tensor with
/// the given strides (in elements): the largest addressed offset + 1, or 0 when any extent
/// is 0. This is the length every dpattn entry point checks its buffers against.
///
/// `shape` and `strides` point to 4 `size_t` each; `strides[3]` must be 1 (the feature
/// axis is contiguous) unless `shape[3] <= 1`. On success writes `*out_len`; on failure
/// leaves it untouched and returns `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (bad dim stride) or `DPATTN_STATUS_SIZE_OVERFLOW`.
/// Thread-safe.
///
/// # Safety
/// `shape` and `strides` must be NULL or point to 4 readable `size_t`; `out_len` must be
/// NULL or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_layout4_required_len(
    shape: *const usize,
    strides: *const usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        if shape.is_null() {
            return Err(FfiError::Null("shape"));
        }
        if strides.is_null() {
            return Err(FfiError::Null("strides"));
        }
        if out_len.is_null() {
            return Err(FfiError::Null("out_len"));
        }
        // SAFETY: non-NULL, and the caller guarantees 4 readable elements; read unaligned
        // so a misaligned pointer from C cannot cause UB.
        let (shape, strides) = unsafe {
            (
                shape.cast::<[usize; 4]>().read_unaligned(),
                strides.cast::<[usize; 4]>().read_unaligned(),
            )
        };
        let layout = Layout4::new(shape, strides)?;
        // SAFETY: non-NULL and writable per the caller's contract.
        unsafe { out_len.write_unaligned(layout.required_len()) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(shape: [usize; 4], strides: [usize; 4]) -> (dpattn_status, usize) {
        let mut out = 7usize;
        // SAFETY: all pointers are valid locals.
        let s = unsafe { dpattn_layout4_required_len(shape.as_ptr(), strides.as_ptr(), &mut out) };
        (s, out)
    }

    #[test]
    fn computes_extents_and_leaves_output_alone_on_error() {
        assert_eq!(call([2, 3, 4, 5], [60, 20, 5, 1]), (dpattn_status::Ok, 120));
        // [batch=2, seq=5, heads=4, dim=8] storage viewed as [batch, heads, seq, dim].
        assert_eq!(call([2, 4, 5, 8], [160, 8, 32, 1]), (dpattn_status::Ok, 320));
        assert_eq!(call([0, 3, 4, 5], [60, 20, 5, 1]), (dpattn_status::Ok, 0));
        assert_eq!(call([1, 1, 2, 4], [8, 8, 4, 2]), (dpattn_status::OutOfRange, 7));
        assert_eq!(
            call([usize::MAX, 2, 2, 2], [usize::MAX, 4, 2, 1]),
            (dpattn_status::SizeOverflow, 7)
        );
    }

    #[test]
    fn null_pointers_are_reported() {
        let a = [1usize; 4];
        let mut out = 0usize;
        // SAFETY: NULL is allowed and must be reported, not dereferenced.
        let s = unsafe { dpattn_layout4_required_len(std::ptr::null(), a.as_ptr(), &mut out) };
        assert_eq!(s, dpattn_status::NullArgument);
        // SAFETY: as above.
        let s =
            unsafe { dpattn_layout4_required_len(a.as_ptr(), a.as_ptr(), std::ptr::null_mut()) };
        assert_eq!(s, dpattn_status::NullArgument);
    }
}
