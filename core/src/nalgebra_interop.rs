//! Conversions between [`MatRef`]/[`MatMut`] and nalgebra (used for decompositions).
//!
//! nalgebra stores matrices column-major; our views are row-major. A row-major `m` is,
//! byte for byte, the column-major matrix `mᵀ`, so the zero-copy conversions go through
//! the transpose:
//!
//! * [`MatRef::as_nalgebra_transposed`] / [`MatMut::as_nalgebra_transposed_mut`]: `mᵀ` as a
//!   nalgebra view with contiguous columns (`DMatrixView`).
//! * [`MatRef::from_nalgebra_transposed`]: a contiguous nalgebra matrix `a` as the
//!   row-major view of `aᵀ`.
//! * Copies in the natural orientation: [`MatRef::to_dmatrix`] (feature `alloc`) and
//!   [`MatMut::copy_from_nalgebra`] (any nalgebra matrix, including strided views).
//!
//! Why no zero-copy `m` (non-unit row stride) view: nalgebra 0.35's fallback matrix product
//! (used without its `std` feature, i.e. always in this crate) iterates over the *slice
//! length* of a strided column instead of its element count (`axcpy_uninit` in
//! `blas_uninit.rs` passes `x.len()`), which writes out of bounds when the left operand's
//! row stride is not 1. Views with contiguous columns, the only kind produced here, are
//! not affected. A general strided nalgebra view cannot be turned into a slice soundly
//! either (the memory between its elements may be borrowed elsewhere), so those are copied.

use nalgebra::{
    DMatrixView, DMatrixViewMut, Dim, Dyn, IsContiguous, Matrix, RawStorage, Scalar, U1,
};

use crate::error::Result;
use crate::matrix_view::{MatMut, MatRef, check_same_shape};

/// Column stride of the transposed view; nalgebra's bound check needs one it accepts for
/// empty shapes.
fn transposed_col_stride(rows: usize, cols: usize, row_stride: usize) -> usize {
    if rows == 0 {
        cols
    } else if cols == 0 {
        0
    } else {
        row_stride
    }
}

impl<'a, T: Scalar + Copy> MatRef<'a, T> {
    /// `mᵀ` (a `cols × rows` matrix) as a nalgebra view of the same memory, with contiguous
    /// columns: column `i` of the result is row `i` of `m`.
    ///
    /// ```
    /// use dpattn_core::MatRef;
    /// let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
    /// let m = MatRef::from_row_major(&a, 2, 3)?;
    /// let t = m.as_nalgebra_transposed(); // 3 x 2
    /// assert_eq!((t.nrows(), t.ncols(), t[(0, 1)]), (3, 2, 4.0));
    /// // m·mᵀ = tᵀ·t
    /// assert_eq!((t.transpose() * t)[(0, 1)], 32.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn as_nalgebra_transposed(&self) -> DMatrixView<'a, T> {
        let cs = transposed_col_stride(self.rows(), self.cols(), self.row_stride());
        DMatrixView::from_slice_with_strides_generic(
            self.as_slice(),
            Dyn(self.cols()),
            Dyn(self.rows()),
            U1,
            Dyn(cs),
        )
    }

    /// Views a contiguous nalgebra matrix `a` (column-major, `r × c`) as the row-major
    /// `c × r` matrix `aᵀ`, without copying.
    ///
    /// ```
    /// use dpattn_core::MatRef;
    /// let a = nalgebra::DMatrix::from_row_slice(2, 3, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// let t = MatRef::from_nalgebra_transposed(&a);
    /// assert_eq!((t.rows(), t.cols()), (3, 2));
    /// assert_eq!(t.row(2), &[3.0, 6.0]);
    /// ```
    pub fn from_nalgebra_transposed<R: Dim, C: Dim, S>(a: &'a Matrix<T, R, C, S>) -> Self
    where
        S: RawStorage<T, R, C> + IsContiguous,
    {
        let (r, c) = a.shape();
        MatRef::new(a.as_slice(), c, r, r).expect("a contiguous matrix covers its own extent")
    }

    /// Copies the view into an owned nalgebra matrix (same orientation).
    ///
    /// ```
    /// use dpattn_core::MatRef;
    /// let a = [1.0f64, 2.0, 3.0, 4.0];
    /// let m = MatRef::from_row_major(&a, 2, 2)?.to_dmatrix();
    /// assert_eq!(m, nalgebra::DMatrix::from_row_slice(2, 2, &a));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn to_dmatrix(&self) -> nalgebra::DMatrix<T> {
        nalgebra::DMatrix::from_fn(self.rows(), self.cols(), |i, j| self.row(i)[j])
    }
}

impl<T: Scalar + Copy> MatMut<'_, T> {
    /// `mᵀ` as a mutable nalgebra view of the same memory (see
    /// [`MatRef::as_nalgebra_transposed`]).
    ///
    /// ```
    /// use dpattn_core::MatMut;
    /// let mut buf = [0.0f64; 6];
    /// let mut m = MatMut::from_row_major(&mut buf, 2, 3)?;
    /// m.as_nalgebra_transposed_mut()[(2, 1)] = 5.0; // element (1, 2) of m
    /// assert_eq!(buf, [0.0, 0.0, 0.0, 0.0, 0.0, 5.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn as_nalgebra_transposed_mut(&mut self) -> DMatrixViewMut<'_, T> {
        let (rows, cols, row_stride) = (self.rows(), self.cols(), self.row_stride());
        let cs = transposed_col_stride(rows, cols, row_stride);
        let data = self.as_mut_slice();
        DMatrixViewMut::from_slice_with_strides_generic(data, Dyn(cols), Dyn(rows), U1, Dyn(cs))
    }

    /// Copies any nalgebra matrix of the same shape (same orientation) into the view.
    ///
    /// Errors: [`Error::ShapeMismatch`](crate::Error::ShapeMismatch).
    ///
    /// ```
    /// use dpattn_core::MatMut;
    /// let a = nalgebra::Matrix2::new(1.0f32, 2.0, 3.0, 4.0);
    /// let mut buf = [0.0f32; 4];
    /// MatMut::from_row_major(&mut buf, 2, 2)?.copy_from_nalgebra(&a)?;
    /// assert_eq!(buf, [1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn copy_from_nalgebra<R: Dim, C: Dim, S: RawStorage<T, R, C>>(
        &mut self,
        a: &Matrix<T, R, C, S>,
    ) -> Result<()> {
        check_same_shape("a", a.nrows(), a.ncols(), self.rows(), self.cols())?;
        for i in 0..self.rows() {
            for (j, x) in self.row_mut(i).iter_mut().enumerate() {
                *x = a[(i, j)];
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_views_agree_elementwise_including_strides() {
        let data: [f64; 20] = core::array::from_fn(|i| i as f64);
        let m = MatRef::new(&data, 3, 4, 6).unwrap();
        let t = m.as_nalgebra_transposed();
        assert_eq!(t.shape(), (4, 3));
        for i in 0..3 {
            for j in 0..4 {
                assert_eq!(t[(j, i)], m.row(i)[j]);
            }
        }
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn products_on_strided_views_are_correct() {
        // m (2x3, row stride 4) times mᵀ, computed through nalgebra's fallback GEMM.
        let data = [1.0f64, 2.0, 3.0, 99.0, 4.0, 5.0, 6.0];
        let t = MatRef::new(&data, 2, 3, 4).unwrap().as_nalgebra_transposed();
        let g = t.transpose() * t; // m·mᵀ
        assert_eq!(g, nalgebra::Matrix2::new(14.0, 32.0, 32.0, 77.0));
        let h = t * t.transpose(); // mᵀ·m, 3x3
        assert_eq!(h[(0, 0)], 17.0);
        assert_eq!(h[(2, 1)], 2.0 * 3.0 + 5.0 * 6.0);
    }

    #[test]
    fn empty_and_broadcast_views_convert() {
        let data: [f32; 0] = [];
        for (r, c, s) in [(0, 3, 3), (3, 0, 5), (0, 0, 0), (0, 3, 0)] {
            let t = MatRef::new(&data, r, c, s).unwrap().as_nalgebra_transposed();
            assert_eq!(t.shape(), (c, r));
        }
        let one = [2.0f32, 3.0];
        let t = MatRef::new(&one, 3, 2, 0).unwrap().as_nalgebra_transposed();
        assert_eq!(t[(1, 2)], 3.0);
        let mut empty: [f32; 0] = [];
        let mut m = MatMut::new(&mut empty, 4, 0, 0).unwrap();
        assert_eq!(m.as_nalgebra_transposed_mut().shape(), (0, 4));
    }

    #[test]
    fn transposed_mut_writes_through_strides() {
        let mut buf = [0.0f32; 7];
        let mut m = MatMut::new(&mut buf, 2, 3, 4).unwrap();
        m.as_nalgebra_transposed_mut()[(2, 1)] = 1.0;
        assert_eq!(buf[6], 1.0);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn transpose_round_trip() {
        let a = nalgebra::DMatrix::<f64>::from_fn(3, 5, |i, j| (10 * i + j) as f64);
        let t = MatRef::from_nalgebra_transposed(&a);
        assert_eq!(t.as_nalgebra_transposed(), a);
        let mut buf = [0.0f64; 15];
        let mut m = MatMut::from_row_major(&mut buf, 3, 5).unwrap();
        m.copy_from_nalgebra(&a).unwrap();
        assert_eq!(m.rb().to_dmatrix(), a);
        assert!(m.copy_from_nalgebra(&a.transpose()).is_err());
    }
}
