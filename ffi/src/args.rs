//! Turning C arguments into Rust references, checked (rustls-ffi's `try_slice!`,
//! `try_ref_from_ptr!` as functions).
//!
//! Every pointer is checked for NULL and alignment before it becomes a reference, every
//! `len` for a byte size that fits in `isize`, and every output buffer for overlap with the
//! other buffers of the call (overlapping `&mut` and `&` references would be undefined
//! behaviour, and an in-place call would silently read half-written values).

use core::mem::{align_of, size_of};
use core::ops::Range;

use crate::boundary::FfiError;

fn check_ptr<T>(ptr: *const T, len: usize, name: &'static str) -> Result<(), FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(name));
    }
    if !(ptr as usize).is_multiple_of(align_of::<T>()) {
        return Err(FfiError::Misaligned(name));
    }
    match len.checked_mul(size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(FfiError::TooLong(name)),
    }
}

/// `ptr[..len]` as a slice. NULL with `len == 0` is the empty slice (C callers often pass
/// `NULL, 0`); NULL with `len > 0` is [`FfiError::Null`].
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `len` elements for `'a`, and nothing may
/// write them during `'a`.
pub(crate) unsafe fn slice<'a, T>(
    ptr: *const T,
    len: usize,
    name: &'static str,
) -> Result<&'a [T], FfiError> {
    if ptr.is_null() && len == 0 {
        return Ok(&[]);
    }
    check_ptr(ptr, len, name)?;
    // SAFETY: non-NULL, aligned, byte length <= isize::MAX (checked above); validity for
    // `len` reads during `'a` is the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// `ptr[..len]` as a mutable slice; NULL as in [`slice`].
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads and writes of `len` elements for `'a`, and no
/// other reference may access them during `'a` (check with [`Buffers::disjoint`]).
pub(crate) unsafe fn slice_mut<'a, T>(
    ptr: *mut T,
    len: usize,
    name: &'static str,
) -> Result<&'a mut [T], FfiError> {
    if ptr.is_null() && len == 0 {
        return Ok(&mut []);
    }
    check_ptr(ptr, len, name)?;
    // SAFETY: as in `slice`, plus exclusivity, which is the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, len) })
}

/// Reads `*ptr` (a small struct or array argument), checking NULL; unaligned reads are
/// allowed since the value is copied.
///
/// # Safety
/// A non-NULL `ptr` must be valid for one read of `T`.
pub(crate) unsafe fn read<T: Copy>(ptr: *const T, name: &'static str) -> Result<T, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(name));
    }
    // SAFETY: non-NULL and readable per the caller's contract; `read_unaligned` needs no
    // alignment.
    Ok(unsafe { ptr.read_unaligned() })
}

/// A NUL-terminated UTF-8 C string argument (an id, a path, a connection string).
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string that stays valid and unchanged
/// for `'a`.
pub(crate) unsafe fn c_str<'a>(
    ptr: *const core::ffi::c_char,
    name: &'static str,
) -> Result<&'a str, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(name));
    }
    // SAFETY: non-NULL, NUL-terminated and valid for `'a` per the caller's contract.
    let s = unsafe { core::ffi::CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| {
        FfiError::Core(dpattn_core::Error::OutOfRange {
            name,
            value: f64::NAN,
            allowed: "a NUL-terminated UTF-8 string",
        })
    })
}

/// Decodes a `uint32_t` 0/1 flag (a C `bool` could carry any byte, which would be
/// undefined behaviour as a Rust `bool`).
pub(crate) fn flag(arg: &'static str, value: u32) -> Result<bool, FfiError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(crate::boundary::unknown(arg, value, "0 or 1")),
    }
}

/// An out-parameter checked for NULL up front, written only on success.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Checks `ptr` for NULL; call before doing any work.
    pub(crate) fn new(ptr: *mut T, name: &'static str) -> Result<Self, FfiError> {
        if ptr.is_null() { Err(FfiError::Null(name)) } else { Ok(Self(ptr)) }
    }

    /// Writes the result. Call last, after everything that can fail.
    ///
    /// # Safety
    /// The pointer given to [`Out::new`] must be valid for one write of `T`.
    pub(crate) unsafe fn write(self, value: T) {
        // SAFETY: non-NULL (checked in `new`), writable per the caller's contract;
        // unaligned writes are allowed.
        unsafe { self.0.write_unaligned(value) }
    }
}

/// Most buffers one call records (inputs and outputs each); a call with more is a bug in
/// the entry point, reported as a panic at the boundary.
const MAX_BUFFERS: usize = 16;

type Named = (&'static str, Range<usize>);

/// The body of every `dpattn_<x>_default(T *out)` filler: writes `T::default()` to `out`,
/// `DPATTN_STATUS_NULL_ARGUMENT` for NULL.
///
/// # Safety
/// `out` must be NULL or valid for one write of `T`.
pub(crate) unsafe fn write_default<T: Default>(out: *mut T) -> crate::status::dpattn_status {
    crate::boundary::ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(T::default()) };
        Ok(())
    })
}

/// The byte ranges of the buffers of one call, to prove that outputs overlap nothing.
/// Fixed capacity: recording never allocates, so entry points stay allocation-free.
#[derive(Default)]
pub(crate) struct Buffers {
    inputs: [Named; MAX_BUFFERS],
    n_inputs: usize,
    outputs: [Named; MAX_BUFFERS],
    n_outputs: usize,
}

/// The bytes `ptr[..len]` spans, or `None` when that byte length exceeds `isize::MAX` (no
/// real buffer is that long: reported as a size overflow, whatever the memory layout).
fn byte_range<T>(ptr: *const T, len: usize) -> Range<usize> {
    let start = ptr as usize;
    match len.checked_mul(size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => start..start.saturating_add(bytes),
        _ => TOO_LONG,
    }
}

/// Marks a recorded buffer whose byte length does not fit in `isize`: an empty range that
/// no real buffer produces (a real one starts at its address, below `usize::MAX`).
#[allow(clippy::reversed_empty_ranges)]
const TOO_LONG: Range<usize> = usize::MAX..0;

impl Buffers {
    /// Records an input (read-only) buffer.
    pub(crate) fn input<T>(&mut self, name: &'static str, ptr: *const T, len: usize) -> &mut Self {
        self.inputs[self.n_inputs] = (name, byte_range(ptr, len));
        self.n_inputs += 1;
        self
    }

    /// Records an output (written) buffer.
    pub(crate) fn output<T>(&mut self, name: &'static str, ptr: *mut T, len: usize) -> &mut Self {
        self.outputs[self.n_outputs] = (name, byte_range(ptr.cast_const(), len));
        self.n_outputs += 1;
        self
    }

    /// Fails with [`FfiError::TooLong`] when a buffer's byte length exceeds `isize::MAX`
    /// (checked first, so the status does not depend on where the buffers lie), else with
    /// [`FfiError::Aliasing`] when an output overlaps any other buffer (inputs may overlap
    /// each other: `q`, `k` and `v` may be the same tensor).
    pub(crate) fn disjoint(&self) -> Result<(), FfiError> {
        let overlap = |a: &Range<usize>, b: &Range<usize>| {
            !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
        };
        let (inputs, outputs) = (&self.inputs[..self.n_inputs], &self.outputs[..self.n_outputs]);
        if let Some((name, _)) = inputs.iter().chain(outputs).find(|(_, r)| *r == TOO_LONG) {
            return Err(FfiError::TooLong(name));
        }
        for (i, (on, o)) in outputs.iter().enumerate() {
            for (n, r) in inputs.iter().chain(&outputs[i + 1..]) {
                if overlap(o, r) {
                    return Err(FfiError::Aliasing(on, n));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_misaligned_and_too_long_are_errors() {
        // SAFETY: NULL with len 0 is the documented empty slice; nothing is read.
        assert!(unsafe { slice::<f32>(core::ptr::null(), 0, "x") }.unwrap().is_empty());
        // SAFETY: NULL is rejected before any read.
        let e = unsafe { slice::<f32>(core::ptr::null(), 3, "x") }.unwrap_err();
        assert!(matches!(e, FfiError::Null("x")));
        let buf = [0u32; 4];
        let odd = buf.as_ptr().cast::<u8>().wrapping_add(1).cast::<f32>();
        // SAFETY: rejected for alignment before any read.
        let e = unsafe { slice::<f32>(odd, 1, "x") }.unwrap_err();
        assert!(matches!(e, FfiError::Misaligned("x")));
        // SAFETY: rejected for length before any read.
        let e = unsafe { slice::<f32>(buf.as_ptr().cast(), usize::MAX / 2, "x") }.unwrap_err();
        assert!(matches!(e, FfiError::TooLong("x")));
        // SAFETY: `buf` has 4 readable elements.
        assert_eq!(unsafe { slice(buf.as_ptr(), 4, "x") }.unwrap().len(), 4);
    }

    #[test]
    fn outputs_may_not_overlap_anything() {
        let mut a = [0f32; 8];
        let p = a.as_mut_ptr();
        let mut b = Buffers::default();
        b.input("q", p.cast_const(), 4).input("k", p.cast_const(), 4);
        b.output("out", p.wrapping_add(4), 4);
        assert!(b.disjoint().is_ok(), "inputs may overlap each other");
        b.output("lse", p.wrapping_add(7), 1);
        assert!(matches!(b.disjoint(), Err(FfiError::Aliasing("out", "lse"))));
        let mut c = Buffers::default();
        c.input("v", p.cast_const(), 5).output("out", p.wrapping_add(4), 4);
        assert!(matches!(c.disjoint(), Err(FfiError::Aliasing("out", "v"))));
        let mut d = Buffers::default();
        d.input("v", p.cast_const(), 0).output("out", p, 4);
        assert!(d.disjoint().is_ok(), "empty buffers overlap nothing");
        // A length no buffer can have is a size overflow, even where it would also
        // "overlap" another buffer.
        let mut e = Buffers::default();
        e.input("q", p.cast_const(), 4).output("scratch", p.wrapping_add(4), usize::MAX / 2);
        assert!(matches!(e.disjoint(), Err(FfiError::TooLong("scratch"))));
        let mut f = Buffers::default();
        f.input("q", p.wrapping_add(7).cast_const(), 1).output("scratch", p, usize::MAX / 4);
        assert!(matches!(f.disjoint(), Err(FfiError::TooLong("scratch"))));
    }
}
