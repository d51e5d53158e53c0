//! `f32` or `f64` device buffers: the element types of the kernels that compute in `f64`
//! and read or write either precision (clip rows, Gaussian-sampling attention).

use crate::memory::DeviceElement;

/// Element type of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
}

impl FloatDtype {
    /// The kernels' type define (`DP_T` in `clip_rows_gaussian.cu`, `DP_GS_T` in
    /// `gaussian_sampling.cu`): 0 for `f32`, 1 for `f64`.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }

    /// Bytes per element.
    ///
    /// ```
    /// assert_eq!(dpattn_cuda::FloatDtype::F64.size(), 8);
    /// ```
    pub fn size(self) -> usize {
        match self {
            FloatDtype::F32 => 4,
            FloatDtype::F64 => 8,
        }
    }
}

/// `f32` or `f64`, with its [`FloatDtype`].
pub trait FloatElement: DeviceElement + sealed::Sealed {
    /// The matching [`FloatDtype`].
    const DTYPE: FloatDtype;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

impl FloatElement for f32 {
    const DTYPE: FloatDtype = FloatDtype::F32;
}
impl FloatElement for f64 {
    const DTYPE: FloatDtype = FloatDtype::F64;
}
