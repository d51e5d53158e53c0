//! Tensors, element types and noise keys as they cross the C ABI.
//!
//! A tensor is a plain struct: data pointer, length in elements, element type, and a
//! `[batch, heads, seq, dim]` shape with strides in elements (the layout of
//! `dpattn_layout4_required_len`). Element types are `uint32_t` constants, never a Rust
//! enum, so an unknown value from C is an error rather than undefined behaviour.

use std::ffi::c_void;

use dpattn_core::sampling::NoiseKey;
use dpattn_core::{BatchedMut, BatchedRef, Element, Layout4};
use half::{bf16, f16};

use crate::args::{Buffers, slice, slice_mut};
use crate::boundary::FfiError;

/// An element type code (`DPATTN_DTYPE_*`).
pub type dpattn_dtype = u32;
/// IEEE binary32 (`float`).
pub const DPATTN_DTYPE_F32: dpattn_dtype = 0;
/// IEEE binary64 (`double`).
pub const DPATTN_DTYPE_F64: dpattn_dtype = 1;
/// IEEE binary16, passed as its 16 bits (`uint16_t`).
pub const DPATTN_DTYPE_F16: dpattn_dtype = 2;
/// bfloat16, passed as its 16 bits (`uint16_t`).
pub const DPATTN_DTYPE_BF16: dpattn_dtype = 3;

/// A read-only `[batch, heads, seq, dim]` tensor in caller memory. `len` is the number of
/// elements `data` holds (at least `dpattn_layout4_required_len(shape, strides)`);
/// `strides` are in elements and `strides[3]` must be 1 unless `shape[3] <= 1`. `data` must
/// be aligned for `dtype` and may be NULL only when `len` is 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_tensor4 {
    /// First element.
    pub data: *const c_void,
    /// Elements available at `data`.
    pub len: usize,
    /// Element type, one of `DPATTN_DTYPE_*`.
    pub dtype: dpattn_dtype,
    /// Extents `[batch, heads, seq, dim]`.
    pub shape: [usize; 4],
    /// Strides in elements for each axis.
    pub strides: [usize; 4],
}

/// A writable `[batch, heads, seq, dim]` tensor in caller memory; fields as in
/// `dpattn_tensor4`. Its elements must not overlap any other buffer of the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_tensor4_mut {
    /// First element.
    pub data: *mut c_void,
    /// Elements available at `data`.
    pub len: usize,
    /// Element type, one of `DPATTN_DTYPE_*`.
    pub dtype: dpattn_dtype,
    /// Extents `[batch, heads, seq, dim]`.
    pub shape: [usize; 4],
    /// Strides in elements for each axis.
    pub strides: [usize; 4],
}

/// A 256-bit ChaCha20 noise key (`docs/RANDOMNESS.md`): the 32 bytes are read as eight
/// little-endian words. Treat it as a secret: anyone who has it can subtract the noise.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_key {
    /// The key bytes.
    pub bytes: [u8; 32],
}

impl dpattn_key {
    pub(crate) fn to_core(self) -> NoiseKey {
        NoiseKey::for_replay(self.bytes)
    }
}

/// The element types, decoded from a `dpattn_dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    F32,
    F64,
    F16,
    Bf16,
}

pub(crate) const DTYPES: &str = "DPATTN_DTYPE_F32 (0), _F64 (1), _F16 (2), _BF16 (3)";

impl Dtype {
    pub(crate) fn decode(code: dpattn_dtype, arg: &'static str) -> Result<Self, FfiError> {
        match code {
            DPATTN_DTYPE_F32 => Ok(Dtype::F32),
            DPATTN_DTYPE_F64 => Ok(Dtype::F64),
            DPATTN_DTYPE_F16 => Ok(Dtype::F16),
            DPATTN_DTYPE_BF16 => Ok(Dtype::Bf16),
            value => Err(FfiError::UnknownValue { arg, value, allowed: DTYPES }),
        }
    }
}

/// The Rust element type of each dtype code.
pub(crate) trait HasDtype: Element {
    const DTYPE: Dtype;
}
impl HasDtype for f32 {
    const DTYPE: Dtype = Dtype::F32;
}
impl HasDtype for f64 {
    const DTYPE: Dtype = Dtype::F64;
}
impl HasDtype for f16 {
    const DTYPE: Dtype = Dtype::F16;
}
impl HasDtype for bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
}

/// Runs `$body` with the type alias `$t` bound to the element type of `$dtype` (a
/// `dpattn_dtype`), returning early with an error for unknown codes.
macro_rules! with_dtype {
    ($dtype:expr, $arg:expr, |$t:ident| $body:expr) => {
        match $crate::tensor::Dtype::decode($dtype, $arg)? {
            $crate::tensor::Dtype::F32 => {
                type $t = f32;
                $body
            }
            $crate::tensor::Dtype::F64 => {
                type $t = f64;
                $body
            }
            $crate::tensor::Dtype::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::tensor::Dtype::Bf16 => {
                type $t = half::bf16;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// The elements a tensor actually addresses: `min(len, required_len)`. Views and overlap
/// checks use only these, so tensors carved from one arena (with `len` = the rest of the
/// arena) do not count as overlapping.
fn extent(shape: [usize; 4], strides: [usize; 4], len: usize) -> usize {
    Layout4::new(shape, strides).map_or(len, |l| l.required_len().min(len))
}

/// The core names a view's buffer `data`; the caller knows it as `name` (`q`, `out`, ...).
fn renamed(e: dpattn_core::Error, name: &'static str) -> FfiError {
    match e {
        dpattn_core::Error::BufferTooShort { needed, got, .. } => {
            FfiError::Core(dpattn_core::Error::BufferTooShort { arg: name, needed, got })
        }
        e => FfiError::Core(e),
    }
}

fn check_dtype<T: HasDtype>(code: dpattn_dtype, name: &'static str) -> Result<(), FfiError> {
    if Dtype::decode(code, name)? == T::DTYPE {
        Ok(())
    } else {
        Err(FfiError::UnknownValue {
            arg: name,
            value: code,
            allowed: "the element type the call dispatched on (all inputs share one dtype)",
        })
    }
}

impl dpattn_tensor4 {
    /// Records this tensor's addressed bytes as an input of the call.
    pub(crate) fn record<T: HasDtype>(&self, name: &'static str, bufs: &mut Buffers) {
        bufs.input(name, self.data.cast::<T>(), extent(self.shape, self.strides, self.len));
    }

    /// The tensor as a view of `T`, which must match `dtype`.
    ///
    /// # Safety
    /// `data` must be valid for reads of `len` elements of `T` for `'a`, unwritten
    /// during `'a`.
    pub(crate) unsafe fn view<'a, T: HasDtype>(
        &self,
        name: &'static str,
    ) -> Result<BatchedRef<'a, T>, FfiError> {
        check_dtype::<T>(self.dtype, name)?;
        let layout = Layout4::new(self.shape, self.strides)?;
        // SAFETY: forwarded caller contract (reads at most `len` elements).
        let data =
            unsafe { slice(self.data.cast::<T>(), self.len.min(layout.required_len()), name) }?;
        BatchedRef::new(data, layout).map_err(|e| renamed(e, name))
    }
}

impl dpattn_tensor4_mut {
    /// Records this tensor's addressed bytes as an output of the call.
    pub(crate) fn record<T: HasDtype>(&self, name: &'static str, bufs: &mut Buffers) {
        bufs.output(name, self.data.cast::<T>(), extent(self.shape, self.strides, self.len));
    }

    /// The tensor as a mutable view of `T`, which must match `dtype`. Layouts whose
    /// elements overlap (a zero stride) are rejected for outputs.
    ///
    /// # Safety
    /// `data` must be valid for reads and writes of `len` elements of `T` for `'a`, with
    /// no other access during `'a` (prove it with [`Buffers::disjoint`] first).
    pub(crate) unsafe fn view_mut<'a, T: HasDtype>(
        &self,
        name: &'static str,
    ) -> Result<BatchedMut<'a, T>, FfiError> {
        check_dtype::<T>(self.dtype, name)?;
        let layout = Layout4::new(self.shape, self.strides)?;
        let n = self.len.min(layout.required_len());
        // SAFETY: forwarded caller contract (`n <= len`).
        let data = unsafe { slice_mut(self.data.cast::<T>(), n, name) }?;
        BatchedMut::new(data, layout).map_err(|e| renamed(e, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(data: &[f32], shape: [usize; 4], dtype: dpattn_dtype) -> dpattn_tensor4 {
        let strides = Layout4::contiguous(shape).unwrap().strides();
        dpattn_tensor4 { data: data.as_ptr().cast(), len: data.len(), dtype, shape, strides }
    }

    #[test]
    fn views_check_dtype_length_and_layout() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        // SAFETY: `x` is readable for 4 f32 for the whole test.
        unsafe {
            let v = t(&x, [1, 1, 2, 2], DPATTN_DTYPE_F32).view::<f32>("x").unwrap();
            assert_eq!(v.head(0, 0).row(1), &[3.0, 4.0]);
            let e = t(&x, [1, 1, 2, 2], DPATTN_DTYPE_F16).view::<f32>("x").unwrap_err();
            assert!(matches!(e, FfiError::UnknownValue { arg: "x", value: 2, .. }));
            let e = t(&x, [1, 1, 2, 2], 7).view::<f32>("x").unwrap_err();
            assert!(e.to_string().contains("DPATTN_DTYPE_F32"), "{e}");
            let e = t(&x, [1, 1, 3, 2], DPATTN_DTYPE_F32).view::<f32>("x").unwrap_err();
            assert!(matches!(
                e,
                FfiError::Core(dpattn_core::Error::BufferTooShort { arg: "x", .. })
            ));
        }
    }

    #[test]
    fn dispatch_binds_the_element_type() {
        fn size(code: dpattn_dtype) -> Result<usize, FfiError> {
            Ok(with_dtype!(code, "dtype", |T| core::mem::size_of::<T>()))
        }
        assert_eq!(size(DPATTN_DTYPE_F32).unwrap(), 4);
        assert_eq!(size(DPATTN_DTYPE_F64).unwrap(), 8);
        assert_eq!(size(DPATTN_DTYPE_F16).unwrap(), 2);
        assert_eq!(size(DPATTN_DTYPE_BF16).unwrap(), 2);
        assert!(size(4).is_err());
    }
}
