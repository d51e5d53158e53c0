//! Typed, strided, row-major matrix views: [`MatRef`] (shared) and [`MatMut`] (exclusive).
//!
//! A view is `rows × cols` elements of a slice, element `(i, j)` at offset
//! `i * row_stride + j` (columns are contiguous). Constructors check that the slice covers
//! every addressed element, with overflow-checked arithmetic, and return an
//! [`Error`] otherwise; after construction, element access cannot go out of
//! bounds.
//!
//! Read views may alias rows (`row_stride < cols`, e.g. `0` to broadcast one row); a
//! [`MatMut`] must not (`row_stride >= cols` whenever it has more than one row), so no two
//! output elements share memory.

use crate::element::Element;
use crate::error::{Error, Result, add_size, mul_size};

/// Elements a `rows × cols` view with `row_stride` addresses: the largest offset + 1, or 0
/// when the view is empty.
///
/// ```
/// use dpattn_core::matrix_view::required_len;
/// assert_eq!(required_len(3, 4, 10), Ok(24)); // rows at 0, 10, 20; last row ends at 24
/// assert_eq!(required_len(0, 4, 10), Ok(0));
/// assert!(required_len(usize::MAX, 2, 2).is_err());
/// ```
pub fn required_len(rows: usize, cols: usize, row_stride: usize) -> Result<usize> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    let last_row = mul_size(rows - 1, row_stride, "matrix view extent")?;
    add_size(last_row, cols, "matrix view extent")
}

/// A shared, strided, row-major view of a `rows × cols` matrix.
///
/// ```
/// use dpattn_core::MatRef;
/// let data = [1.0f32, 2.0, 3.0, 9.0, 4.0, 5.0, 6.0, 9.0];
/// let m = MatRef::new(&data, 2, 3, 4)?; // row stride 4 skips the 9s
/// assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
/// assert_eq!(m.get(0, 2), Some(3.0));
/// assert_eq!(m.get(2, 0), None);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a, T: Copy> MatRef<'a, T> {
    /// A view of `data` with the given shape and row stride (in elements).
    ///
    /// Errors: [`Error::BufferTooShort`] when `data` does not cover every addressed element,
    /// [`Error::SizeOverflow`] when the extent or the logical element count `rows * cols`
    /// does not fit in `usize`.
    pub fn new(data: &'a [T], rows: usize, cols: usize, row_stride: usize) -> Result<Self> {
        mul_size(rows, cols, "matrix element count")?;
        let needed = required_len(rows, cols, row_stride)?;
        if data.len() < needed {
            return Err(Error::BufferTooShort { arg: "data", needed, got: data.len() });
        }
        Ok(Self { data: &data[..needed], rows, cols, row_stride })
    }

    /// A view of a densely packed row-major matrix; `data.len()` must equal `rows * cols`.
    pub fn from_row_major(data: &'a [T], rows: usize, cols: usize) -> Result<Self> {
        check_row_major_len(data.len(), rows, cols)?;
        Self::new(data, rows, cols, cols)
    }

    /// Number of rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Distance in elements between the starts of consecutive rows.
    #[inline]
    pub fn row_stride(&self) -> usize {
        self.row_stride
    }

    /// `true` when the view has no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// The underlying slice, from element `(0, 0)` to the last addressed element.
    #[inline]
    pub fn as_slice(&self) -> &'a [T] {
        self.data
    }

    /// Row `i` as a contiguous slice of `cols` elements.
    ///
    /// # Panics
    /// If `i >= rows` (an indexing bug in the caller, like slice indexing).
    #[inline]
    pub fn row(&self, i: usize) -> &'a [T] {
        assert!(i < self.rows, "row {i} out of range for {} rows", self.rows);
        if self.cols == 0 {
            return &self.data[..0];
        }
        let start = i * self.row_stride;
        &self.data[start..start + self.cols]
    }

    /// Element `(i, j)`, or `None` when out of range.
    #[inline]
    pub fn get(&self, i: usize, j: usize) -> Option<T> {
        if i < self.rows && j < self.cols { Some(self.data[i * self.row_stride + j]) } else { None }
    }

    /// The `nrows × ncols` block starting at `(row, col)`.
    ///
    /// Errors: [`Error::OutOfRange`] when the block does not fit inside the view.
    pub fn submatrix(&self, row: usize, col: usize, nrows: usize, ncols: usize) -> Result<Self> {
        let row_end = add_size(row, nrows, "submatrix rows")?;
        let col_end = add_size(col, ncols, "submatrix cols")?;
        if row_end > self.rows {
            return Err(Error::OutOfRange {
                name: "row + nrows",
                value: row_end as f64,
                allowed: "<= rows of the parent view",
            });
        }
        if col_end > self.cols {
            return Err(Error::OutOfRange {
                name: "col + ncols",
                value: col_end as f64,
                allowed: "<= cols of the parent view",
            });
        }
        if nrows == 0 || ncols == 0 {
            return Self::new(&self.data[..0], nrows, ncols, self.row_stride);
        }
        let start = row * self.row_stride + col;
        Self::new(&self.data[start..], nrows, ncols, self.row_stride)
    }
}

impl<T: Element> MatRef<'_, T> {
    /// Element `(i, j)` widened to `f32`, or `None` when out of range.
    #[inline]
    pub fn get_f32(&self, i: usize, j: usize) -> Option<f32> {
        self.get(i, j).map(Element::to_f32)
    }

    /// Element `(i, j)` widened to `f64`, or `None` when out of range.
    #[inline]
    pub fn get_f64(&self, i: usize, j: usize) -> Option<f64> {
        self.get(i, j).map(Element::to_f64)
    }

    /// [`Error::PrivateNonFinite`] naming `arg` if the matrix holds a NaN or infinity: the
    /// matrix is treated as private data (the safe default), so the row-major logical index
    /// of the first such value is only in [`Error::private_detail`].
    ///
    /// ```
    /// use dpattn_core::{Error, MatRef};
    /// let x = [1.0, 2.0, f64::NAN, 4.0];
    /// let e = MatRef::from_row_major(&x, 2, 2)?.check_finite("x").unwrap_err();
    /// assert!(matches!(e, Error::PrivateNonFinite { arg: "x", .. }));
    /// assert_eq!(e.private_detail().and_then(|d| d.index()), Some(2));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn check_finite(&self, arg: &'static str) -> Result<()> {
        match self.first_non_finite() {
            Some(index) => Err(Error::private_non_finite(arg, index)),
            None => Ok(()),
        }
    }

    /// [`Error::NonFinite`] with the index in the message: only for a **public** matrix (a
    /// covariance, a model weight).
    pub(crate) fn check_finite_public(&self, arg: &'static str) -> Result<()> {
        match self.first_non_finite() {
            Some(index) => Err(Error::NonFinite { arg, index }),
            None => Ok(()),
        }
    }

    /// The row-major logical index of the first NaN or infinity.
    pub(crate) fn first_non_finite(&self) -> Option<usize> {
        (0..self.rows).find_map(|i| {
            self.row(i).iter().position(|x| !x.is_finite()).map(|j| i * self.cols + j)
        })
    }
}

/// An exclusive, strided, row-major view of a `rows × cols` matrix. Rows never overlap.
///
/// ```
/// use dpattn_core::{MatMut, MatRef};
/// let mut buf = [0.0f64; 6];
/// let mut m = MatMut::new(&mut buf, 2, 2, 3)?; // 2x2 inside a 2x3 buffer
/// m.row_mut(1)[0] = 7.0;
/// m.fill(1.0);
/// m.row_mut(0)[1] = 2.0;
/// assert_eq!(m.rb().row(0), &[1.0, 2.0]);
/// assert_eq!(buf, [1.0, 2.0, 0.0, 1.0, 1.0, 0.0]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug)]
pub struct MatMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a, T: Copy> MatMut<'a, T> {
    /// An exclusive view of `data` with the given shape and row stride (in elements).
    ///
    /// Errors: as [`MatRef::new`], plus [`Error::OutOfRange`] when `row_stride < cols` with
    /// more than one row (rows would overlap).
    pub fn new(data: &'a mut [T], rows: usize, cols: usize, row_stride: usize) -> Result<Self> {
        if rows > 1 && cols > 0 && row_stride < cols {
            return Err(Error::OutOfRange {
                name: "row_stride",
                value: row_stride as f64,
                allowed: ">= cols (rows of an output view must not overlap)",
            });
        }
        let needed = required_len(rows, cols, row_stride)?;
        let got = data.len();
        if got < needed {
            return Err(Error::BufferTooShort { arg: "data", needed, got });
        }
        Ok(Self { data: &mut data[..needed], rows, cols, row_stride })
    }

    /// An exclusive view of a densely packed row-major matrix; `data.len()` must equal
    /// `rows * cols`.
    pub fn from_row_major(data: &'a mut [T], rows: usize, cols: usize) -> Result<Self> {
        check_row_major_len(data.len(), rows, cols)?;
        Self::new(data, rows, cols, cols)
    }

    /// Number of rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Distance in elements between the starts of consecutive rows.
    #[inline]
    pub fn row_stride(&self) -> usize {
        self.row_stride
    }

    /// A shared view of the same elements (reborrow).
    #[inline]
    pub fn rb(&self) -> MatRef<'_, T> {
        MatRef { data: self.data, rows: self.rows, cols: self.cols, row_stride: self.row_stride }
    }

    /// A shorter-lived exclusive view of the same elements (reborrow).
    #[inline]
    pub fn rb_mut(&mut self) -> MatMut<'_, T> {
        MatMut { data: self.data, rows: self.rows, cols: self.cols, row_stride: self.row_stride }
    }

    /// Row `i` as a contiguous mutable slice of `cols` elements.
    ///
    /// # Panics
    /// If `i >= rows` (an indexing bug in the caller, like slice indexing).
    #[inline]
    pub fn row_mut(&mut self, i: usize) -> &mut [T] {
        assert!(i < self.rows, "row {i} out of range for {} rows", self.rows);
        if self.cols == 0 {
            return &mut self.data[..0];
        }
        let start = i * self.row_stride;
        &mut self.data[start..start + self.cols]
    }

    /// The underlying slice, from element `(0, 0)` to the last addressed element
    /// (including any padding between rows).
    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        self.data
    }

    /// Sets every element of the view (and nothing between rows) to `value`.
    pub fn fill(&mut self, value: T) {
        for i in 0..self.rows {
            self.row_mut(i).fill(value);
        }
    }

    /// Copies `src` into the view.
    ///
    /// Errors: [`Error::ShapeMismatch`] when the shapes differ.
    pub fn copy_from(&mut self, src: MatRef<'_, T>) -> Result<()> {
        check_same_shape("src", src.rows, src.cols, self.rows, self.cols)?;
        for i in 0..self.rows {
            self.row_mut(i).copy_from_slice(src.row(i));
        }
        Ok(())
    }

    /// Splits into rows `[0, r)` and `[r, rows)`, two views that can be written
    /// independently (e.g. from two threads).
    ///
    /// Errors: [`Error::OutOfRange`] when `r > rows`.
    pub fn split_at_row(self, r: usize) -> Result<(MatMut<'a, T>, MatMut<'a, T>)> {
        if r > self.rows {
            return Err(Error::OutOfRange { name: "r", value: r as f64, allowed: "<= rows" });
        }
        let (rows, cols, rs) = (self.rows, self.cols, self.row_stride);
        // Rows `< r` end before offset `r * rs` because `rs >= cols` (checked in `new`).
        let at = if rows == r || cols == 0 { self.data.len() } else { r * rs };
        let (top, bottom) = self.data.split_at_mut(at);
        Ok((
            MatMut { data: top, rows: r, cols, row_stride: rs },
            MatMut { data: bottom, rows: rows - r, cols, row_stride: rs },
        ))
    }
}

/// [`Error::ShapeMismatch`] unless a densely packed `rows × cols` matrix has `len` elements.
fn check_row_major_len(len: usize, rows: usize, cols: usize) -> Result<()> {
    let n = mul_size(rows, cols, "matrix element count")?;
    if len != n {
        return Err(Error::ShapeMismatch {
            arg: "data",
            axis: "length (rows * cols)",
            expected: n,
            got: len,
        });
    }
    Ok(())
}

pub(crate) fn check_same_shape(
    arg: &'static str,
    rows: usize,
    cols: usize,
    want_rows: usize,
    want_cols: usize,
) -> Result<()> {
    if rows != want_rows {
        return Err(Error::ShapeMismatch { arg, axis: "rows", expected: want_rows, got: rows });
    }
    if cols != want_cols {
        return Err(Error::ShapeMismatch { arg, axis: "cols", expected: want_cols, got: cols });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_reads_address_the_right_elements() {
        let data: [i32; 12] = core::array::from_fn(|i| i as i32);
        let m = MatRef::new(&data, 3, 2, 5).unwrap();
        assert_eq!(m.row(0), &[0, 1]);
        assert_eq!(m.row(1), &[5, 6]);
        assert_eq!(m.row(2), &[10, 11]);
        assert_eq!(m.as_slice().len(), 12);
        let s = m.submatrix(1, 1, 2, 1).unwrap();
        assert_eq!((s.get(0, 0), s.get(1, 0)), (Some(6), Some(11)));
        assert_eq!(s.get(0, 1), None);
    }

    #[test]
    fn broadcast_rows_are_allowed_for_reads_only() {
        let data = [1.0f32, 2.0];
        let m = MatRef::new(&data, 4, 2, 0).unwrap();
        assert_eq!(m.row(3), &[1.0, 2.0]);
        let mut out = [0.0f32; 8];
        assert!(matches!(
            MatMut::new(&mut out, 4, 2, 1),
            Err(Error::OutOfRange { name: "row_stride", .. })
        ));
    }

    #[test]
    fn short_buffers_and_overflow_are_errors() {
        let data = [0.0f64; 23];
        assert_eq!(
            MatRef::new(&data, 3, 4, 10).unwrap_err(),
            Error::BufferTooShort { arg: "data", needed: 24, got: 23 }
        );
        assert!(matches!(MatRef::new(&data, usize::MAX, 2, 2), Err(Error::SizeOverflow { .. })));
        // Broadcast rows: tiny extent, but rows * cols overflows.
        assert_eq!(
            MatRef::new(&data, usize::MAX, 2, 0).unwrap_err(),
            Error::SizeOverflow { what: "matrix element count" }
        );
        assert!(matches!(
            MatRef::from_row_major(&data, usize::MAX, 3),
            Err(Error::SizeOverflow { .. })
        ));
        assert!(matches!(
            MatRef::from_row_major(&data, 4, 6),
            Err(Error::ShapeMismatch { expected: 24, got: 23, .. })
        ));
    }

    #[test]
    fn empty_views_are_valid() {
        let data: [f32; 0] = [];
        let m = MatRef::new(&data, 0, 5, 7).unwrap();
        assert!(m.is_empty());
        let m = MatRef::new(&data, 5, 0, 7).unwrap();
        assert!(m.is_empty());
        assert!(m.check_finite("x").is_ok());
    }

    #[test]
    fn check_finite_reports_logical_index() {
        let mut data = [0.0f32; 10];
        data[7] = f32::NAN; // row 1 (stride 5), column 2 -> logical index 1*3 + 2
        let m = MatRef::new(&data, 2, 3, 5).unwrap();
        assert_eq!(m.check_finite("q"), Err(Error::private_non_finite("q", 5)));
        assert_eq!(m.check_finite_public("q"), Err(Error::NonFinite { arg: "q", index: 5 }));
        // Elements between rows are not part of the view.
        data[7] = 0.0;
        data[4] = f32::INFINITY;
        assert!(MatRef::new(&data, 2, 3, 5).unwrap().check_finite("q").is_ok());
    }

    #[test]
    fn writes_stay_inside_the_view() {
        let mut buf = [9i32; 11];
        {
            let mut m = MatMut::new(&mut buf, 3, 2, 4).unwrap();
            m.fill(0);
            let src = [1, 2, 3, 4, 5, 6];
            m.copy_from(MatRef::from_row_major(&src, 3, 2).unwrap()).unwrap();
            assert!(m.copy_from(MatRef::from_row_major(&src, 2, 3).unwrap()).is_err());
        }
        assert_eq!(buf, [1, 2, 9, 9, 3, 4, 9, 9, 5, 6, 9]);
    }

    #[test]
    fn split_at_row_gives_disjoint_views() {
        let mut buf = [0i32; 12];
        let m = MatMut::new(&mut buf, 3, 3, 4).unwrap();
        let (mut top, mut bottom) = m.split_at_row(1).unwrap();
        assert_eq!((top.rows(), bottom.rows()), (1, 2));
        top.fill(1);
        bottom.fill(2);
        assert_eq!(buf, [1, 1, 1, 0, 2, 2, 2, 0, 2, 2, 2, 0]);
        let m = MatMut::new(&mut buf, 3, 3, 4).unwrap();
        assert!(m.split_at_row(4).is_err());
        let m = MatMut::new(&mut buf, 3, 3, 4).unwrap();
        let (top, bottom) = m.split_at_row(3).unwrap();
        assert_eq!((top.rows(), bottom.rows()), (3, 0));
    }
}
