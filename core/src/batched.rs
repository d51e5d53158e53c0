//! The batched multi-head layout `[batch, heads, seq, dim]` with explicit strides.
//!
//! [`Layout4`] describes where element `(b, h, s, d)` lives: at offset
//! `b*strides[0] + h*strides[1] + s*strides[2] + d*strides[3]`, with `strides[3] == 1`
//! (the feature axis is contiguous, so each head is a [`MatRef`] of `seq × dim`). Any other
//! strides are allowed, so `[batch, seq, heads, dim]` buffers (the usual projection
//! output) are viewed without a copy, and a stride of 0 broadcasts one K/V head to several
//! query heads (multi-query / grouped-query attention) in a read view. Output views
//! ([`BatchedMut`]) must be non-overlapping.

use crate::error::{Error, Result, add_size, mul_size};
use crate::matrix_view::{MatMut, MatRef};

/// Names of the four axes, in order.
pub const AXES: [&str; 4] = ["batch", "heads", "seq", "dim"];

/// Shape and strides (in elements) of a `[batch, heads, seq, dim]` tensor.
///
/// ```
/// use dpattn_core::Layout4;
/// // A [batch=2, seq=5, heads=4, dim=8] buffer viewed as [batch, heads, seq, dim]:
/// let l = Layout4::new([2, 4, 5, 8], [5 * 4 * 8, 8, 4 * 8, 1])?;
/// assert_eq!(l.offset(1, 2, 3, 4), 160 + 16 + 96 + 4);
/// assert_eq!(l.required_len(), 320);
/// assert!(l.is_non_overlapping());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout4 {
    shape: [usize; 4],
    strides: [usize; 4],
    numel: usize,
    required_len: usize,
}

impl Layout4 {
    /// A layout with the given shape and strides.
    ///
    /// Errors: [`Error::OutOfRange`] when `strides[3] != 1` (and `dim > 1`),
    /// [`Error::SizeOverflow`] when the logical element count or the largest offset does not
    /// fit in `usize` (a broadcast read layout can address few elements but still have a
    /// logical shape too large to index).
    pub fn new(shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        if shape[3] > 1 && strides[3] != 1 {
            return Err(Error::OutOfRange {
                name: "strides[3] (dim stride)",
                value: strides[3] as f64,
                allowed: "1 (the feature axis must be contiguous)",
            });
        }
        let mut numel = 1usize;
        for &e in &shape {
            numel = mul_size(numel, e, "tensor element count")?;
        }
        let required_len = if shape.contains(&0) {
            0
        } else {
            let mut last = 0usize;
            for ax in 0..4 {
                let step = mul_size(shape[ax] - 1, strides[ax], "tensor extent")?;
                last = add_size(last, step, "tensor extent")?;
            }
            add_size(last, 1, "tensor extent")?
        };
        Ok(Self { shape, strides, numel, required_len })
    }

    /// The densely packed row-major layout of `shape`.
    pub fn contiguous(shape: [usize; 4]) -> Result<Self> {
        let s3 = 1usize;
        let s2 = mul_size(shape[3], s3, "contiguous strides")?;
        let s1 = mul_size(shape[2], s2, "contiguous strides")?;
        let s0 = mul_size(shape[1], s1, "contiguous strides")?;
        Self::new(shape, [s0, s1, s2, s3])
    }

    /// `[batch, heads, seq, dim]`.
    #[inline]
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Strides in elements, one per axis.
    #[inline]
    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }

    /// Batch size.
    #[inline]
    pub fn batch(&self) -> usize {
        self.shape[0]
    }

    /// Number of heads.
    #[inline]
    pub fn heads(&self) -> usize {
        self.shape[1]
    }

    /// Sequence length.
    #[inline]
    pub fn seq(&self) -> usize {
        self.shape[2]
    }

    /// Feature dimension per head.
    #[inline]
    pub fn dim(&self) -> usize {
        self.shape[3]
    }

    /// Number of logical elements, `batch * heads * seq * dim` (fits in `usize`: checked in
    /// [`new`](Self::new)).
    #[inline]
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Elements a buffer must have: the largest addressed offset + 1 (0 when empty).
    #[inline]
    pub fn required_len(&self) -> usize {
        self.required_len
    }

    /// Offset of element `(b, h, s, d)`. The caller keeps the indices in range.
    #[inline]
    pub fn offset(&self, b: usize, h: usize, s: usize, d: usize) -> usize {
        b * self.strides[0] + h * self.strides[1] + s * self.strides[2] + d * self.strides[3]
    }

    /// Logical index of element `(b, h, s, d)`: its position in row-major order over the
    /// logical shape, whatever the strides. This is the index the noise stream uses
    /// (`docs/RANDOMNESS.md` §2). The caller keeps the indices in range.
    ///
    /// ```
    /// use dpattn_core::Layout4;
    /// let l = Layout4::new([2, 3, 4, 5], [1000, 100, 10, 1])?;
    /// assert_eq!(l.logical_index(1, 2, 3, 4), 119);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[inline]
    pub fn logical_index(&self, b: usize, h: usize, s: usize, d: usize) -> u64 {
        let [_, nh, ns, nd] = self.shape;
        (((b * nh + h) * ns + s) * nd + d) as u64
    }

    /// `true` only if no two logical elements share an offset.
    ///
    /// A sufficient test, exact for permuted-contiguous and padded layouts: sorted by
    /// stride, each axis's stride must be at least the span of all axes with smaller strides.
    /// Some exotic interleavings that do not overlap (e.g. extents `[3, 2]` with strides
    /// `[2, 3]`) are conservatively reported as overlapping.
    pub fn is_non_overlapping(&self) -> bool {
        self.first_overlapping_axis().is_none()
    }

    /// The axis whose stride breaks [`is_non_overlapping`](Self::is_non_overlapping).
    fn first_overlapping_axis(&self) -> Option<usize> {
        if self.shape.contains(&0) {
            return None;
        }
        let mut axes: [usize; 4] = [0, 1, 2, 3];
        axes.sort_unstable_by_key(|&a| (self.strides[a], a));
        let mut span: usize = 1;
        for &a in &axes {
            if self.shape[a] == 1 {
                continue;
            }
            if self.strides[a] < span {
                return Some(a);
            }
            // Cannot overflow: bounded by required_len, computed with checks in `new`.
            span += (self.shape[a] - 1) * self.strides[a];
        }
        None
    }

    /// [`Error::ShapeMismatch`] unless axis `axis` of `self` (named `arg`) equals `expected`.
    pub fn expect_axis(&self, arg: &'static str, axis: usize, expected: usize) -> Result<()> {
        if self.shape[axis] != expected {
            return Err(Error::ShapeMismatch {
                arg,
                axis: AXES[axis],
                expected,
                got: self.shape[axis],
            });
        }
        Ok(())
    }

    fn head_offset(&self, b: usize, h: usize) -> usize {
        assert!(
            b < self.shape[0] && h < self.shape[1],
            "head ({b}, {h}) out of range for batch {} x heads {}",
            self.shape[0],
            self.shape[1]
        );
        b * self.strides[0] + h * self.strides[1]
    }
}

fn check_buffer(arg: &'static str, len: usize, layout: &Layout4) -> Result<()> {
    if len < layout.required_len() {
        return Err(Error::BufferTooShort { arg, needed: layout.required_len(), got: len });
    }
    Ok(())
}

/// A shared `[batch, heads, seq, dim]` view.
///
/// ```
/// use dpattn_core::{BatchedRef, Layout4};
/// let data: Vec<f32> = (0..2 * 3 * 4 * 5).map(|i| i as f32).collect();
/// let x = BatchedRef::new(&data, Layout4::contiguous([2, 3, 4, 5])?)?;
/// let head = x.head(1, 2); // seq x dim = 4 x 5
/// assert_eq!(head.row(0)[0], (1 * 60 + 2 * 20) as f32);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct BatchedRef<'a, T> {
    data: &'a [T],
    layout: Layout4,
}

impl<'a, T: Copy> BatchedRef<'a, T> {
    /// A view of `data` with `layout`. Errors: [`Error::BufferTooShort`].
    pub fn new(data: &'a [T], layout: Layout4) -> Result<Self> {
        check_buffer("data", data.len(), &layout)?;
        Ok(Self { data, layout })
    }

    /// A view of a densely packed `[batch, heads, seq, dim]` buffer; the length must match
    /// exactly.
    pub fn contiguous(data: &'a [T], shape: [usize; 4]) -> Result<Self> {
        let layout = Layout4::contiguous(shape)?;
        exact_len("data", data.len(), &layout)?;
        Self::new(data, layout)
    }

    /// The layout.
    #[inline]
    pub fn layout(&self) -> &Layout4 {
        &self.layout
    }

    /// Head `(b, h)` as a `seq × dim` matrix view.
    ///
    /// # Panics
    /// If `b >= batch` or `h >= heads` (an indexing bug in the caller).
    pub fn head(&self, b: usize, h: usize) -> MatRef<'a, T> {
        let off = self.layout.head_offset(b, h);
        let (s, d, rs) = (self.layout.seq(), self.layout.dim(), self.layout.strides[2]);
        let data =
            if self.layout.required_len() == 0 { &self.data[..0] } else { &self.data[off..] };
        MatRef::new(data, s, d, rs).expect("layout was validated against the buffer")
    }
}

impl<T: crate::Element> BatchedRef<'_, T> {
    /// [`Error::PrivateNonFinite`] naming `arg` if the tensor holds a NaN or infinity: the
    /// tensor is treated as private data (the safe default), so the logical index of the
    /// first such value (row-major over `[batch, heads, seq, dim]`) is only in
    /// [`Error::private_detail`].
    pub fn check_finite(&self, arg: &'static str) -> Result<()> {
        match self.first_non_finite() {
            Some(index) => Err(Error::private_non_finite(arg, index)),
            None => Ok(()),
        }
    }

    /// [`Error::NonFinite`] with the index in the message: only for a **public** tensor
    /// (e.g. output perturbation's public queries).
    pub(crate) fn check_finite_public(&self, arg: &'static str) -> Result<()> {
        match self.first_non_finite() {
            Some(index) => Err(Error::NonFinite { arg, index }),
            None => Ok(()),
        }
    }

    fn first_non_finite(&self) -> Option<usize> {
        let (heads, per_head) = (self.layout.heads(), self.layout.seq() * self.layout.dim());
        (0..self.layout.batch()).flat_map(|b| (0..heads).map(move |h| (b, h))).find_map(|(b, h)| {
            let at = self.head(b, h).first_non_finite()?;
            Some((b * heads + h) * per_head + at)
        })
    }
}

fn exact_len(arg: &'static str, len: usize, layout: &Layout4) -> Result<()> {
    let n = layout.numel();
    if len != n {
        return Err(Error::ShapeMismatch {
            arg,
            axis: "length (batch * heads * seq * dim)",
            expected: n,
            got: len,
        });
    }
    Ok(())
}

/// An exclusive `[batch, heads, seq, dim]` view whose elements never share memory.
///
/// ```
/// use dpattn_core::{BatchedMut, Layout4};
/// let mut out = vec![0.0f64; 2 * 2 * 3 * 4];
/// let mut y = BatchedMut::contiguous(&mut out, [2, 2, 3, 4])?;
/// y.head_mut(1, 0).row_mut(2)[3] = 5.0;
/// assert_eq!(out[24 + 11], 5.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug)]
pub struct BatchedMut<'a, T> {
    data: &'a mut [T],
    layout: Layout4,
}

impl<'a, T: Copy> BatchedMut<'a, T> {
    /// An exclusive view of `data` with `layout`.
    ///
    /// Errors: [`Error::BufferTooShort`], or [`Error::OutOfRange`] when the layout maps two
    /// logical elements to one offset.
    pub fn new(data: &'a mut [T], layout: Layout4) -> Result<Self> {
        if let Some(axis) = layout.first_overlapping_axis() {
            return Err(Error::OutOfRange {
                name: [
                    "strides[0] (batch)",
                    "strides[1] (heads)",
                    "strides[2] (seq)",
                    "strides[3] (dim)",
                ][axis],
                value: layout.strides[axis] as f64,
                allowed: "a stride at least the span of all smaller-stride axes (output elements must not share memory)",
            });
        }
        check_buffer("data", data.len(), &layout)?;
        Ok(Self { data, layout })
    }

    /// An exclusive view of a densely packed buffer; the length must match exactly.
    pub fn contiguous(data: &'a mut [T], shape: [usize; 4]) -> Result<Self> {
        let layout = Layout4::contiguous(shape)?;
        exact_len("data", data.len(), &layout)?;
        Self::new(data, layout)
    }

    /// The layout.
    #[inline]
    pub fn layout(&self) -> &Layout4 {
        &self.layout
    }

    /// A shared view of the same elements.
    pub fn rb(&self) -> BatchedRef<'_, T> {
        BatchedRef { data: self.data, layout: self.layout }
    }

    /// Head `(b, h)` as an exclusive `seq × dim` matrix view.
    ///
    /// # Panics
    /// If `b >= batch` or `h >= heads` (an indexing bug in the caller).
    pub fn head_mut(&mut self, b: usize, h: usize) -> MatMut<'_, T> {
        let off = self.layout.head_offset(b, h);
        let (s, d, rs) = (self.layout.seq(), self.layout.dim(), self.layout.strides[2]);
        let data = if self.layout.required_len() == 0 {
            &mut self.data[..0]
        } else {
            &mut self.data[off..]
        };
        MatMut::new(data, s, d, rs).expect("layout was validated against the buffer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_offsets_match_row_major_order() {
        let l = Layout4::contiguous([2, 3, 4, 5]).unwrap();
        assert_eq!(l.strides(), [60, 20, 5, 1]);
        let mut k = 0;
        for b in 0..2 {
            for h in 0..3 {
                for s in 0..4 {
                    for d in 0..5 {
                        assert_eq!(l.offset(b, h, s, d), k);
                        k += 1;
                    }
                }
            }
        }
        assert_eq!(l.required_len(), 120);
        assert_eq!(l.numel(), 120);
    }

    #[test]
    fn bshd_buffer_viewed_as_bhsd() {
        // [batch=2, seq=3, heads=2, dim=2] stored contiguously.
        let data: [i32; 24] = core::array::from_fn(|i| i as i32);
        let l = Layout4::new([2, 2, 3, 2], [12, 2, 4, 1]).unwrap();
        let x = BatchedRef::new(&data, l).unwrap();
        // (b=1, h=1, s=2) is bshd element (1, 2, 1) = 12 + 8 + 2.
        assert_eq!(x.head(1, 1).row(2), &[22, 23]);
        assert!(l.is_non_overlapping());
    }

    #[test]
    fn broadcast_heads_for_reads_but_not_writes() {
        let data = [1.0f32; 8];
        let l = Layout4::new([1, 4, 2, 4], [8, 0, 4, 1]).unwrap();
        assert!(!l.is_non_overlapping());
        let x = BatchedRef::new(&data, l).unwrap();
        assert_eq!(x.head(0, 3).row(1), &[1.0; 4]);
        let mut out = [0.0f32; 8];
        assert!(matches!(
            BatchedMut::new(&mut out, l),
            Err(Error::OutOfRange { name: "strides[1] (heads)", value: 0.0, .. })
        ));
    }

    #[test]
    fn bad_layouts_are_errors() {
        assert!(matches!(Layout4::new([1, 1, 2, 4], [8, 8, 4, 2]), Err(Error::OutOfRange { .. })));
        assert!(matches!(
            Layout4::new([usize::MAX, 2, 2, 2], [usize::MAX / 2, 4, 2, 1]),
            Err(Error::SizeOverflow { .. })
        ));
        assert!(matches!(
            Layout4::contiguous([1 << 20, 1 << 20, 1 << 20, 1 << 20]),
            Err(Error::SizeOverflow { .. })
        ));
        let data = [0.0f32; 10];
        assert_eq!(
            BatchedRef::new(&data, Layout4::contiguous([1, 1, 3, 4]).unwrap()).unwrap_err(),
            Error::BufferTooShort { arg: "data", needed: 12, got: 10 }
        );
        assert!(matches!(
            BatchedRef::contiguous(&data, [1, 1, 2, 4]),
            Err(Error::ShapeMismatch { expected: 8, got: 10, .. })
        ));
        // Interleaved rows of two heads overlap.
        assert!(!Layout4::new([1, 2, 3, 4], [24, 2, 4, 1]).unwrap().is_non_overlapping());
    }

    #[test]
    fn huge_broadcast_shapes_are_rejected_not_overflowed() {
        // Two elements broadcast to a logical shape whose element count overflows usize.
        assert_eq!(
            Layout4::new([1, 1, usize::MAX, 2], [0, 0, 0, 1]),
            Err(Error::SizeOverflow { what: "tensor element count" })
        );
        // A large but indexable broadcast is fine and its NaN index is logical.
        let data = [1.0f32, f32::NAN];
        let l = Layout4::new([1, 1, 1 << 20, 2], [0, 0, 0, 1]).unwrap();
        let x = BatchedRef::new(&data, l).unwrap();
        assert_eq!(x.check_finite("x"), Err(Error::private_non_finite("x", 1)));
    }

    #[test]
    fn empty_tensors() {
        let data: [f32; 0] = [];
        let x = BatchedRef::contiguous(&data, [2, 2, 0, 4]).unwrap();
        assert!(x.head(1, 1).is_empty());
        assert!(x.check_finite("x").is_ok());
    }

    #[test]
    fn nonfinite_index_is_logical() {
        let mut data = [0.0f32; 2 * 2 * 3 * 2];
        let l = Layout4::new([2, 2, 3, 2], [12, 2, 4, 1]).unwrap(); // bshd storage
        data[l.offset(1, 0, 2, 1)] = f32::NAN;
        let x = BatchedRef::new(&data, l).unwrap();
        // logical index over [b, h, s, d] = ((1*2 + 0)*3 + 2)*2 + 1 = 17
        assert_eq!(x.check_finite("k"), Err(Error::private_non_finite("k", 17)));
        assert_eq!(x.check_finite_public("k"), Err(Error::NonFinite { arg: "k", index: 17 }));
    }

    #[test]
    fn head_mut_writes_through_strides() {
        let mut data = [0i32; 24];
        let l = Layout4::new([2, 2, 3, 2], [12, 2, 4, 1]).unwrap();
        let mut y = BatchedMut::new(&mut data, l).unwrap();
        y.head_mut(1, 1).row_mut(2).copy_from_slice(&[7, 8]);
        assert_eq!(y.rb().head(1, 1).row(2), &[7, 8]);
        assert_eq!(&data[22..24], &[7, 8]);
    }
}
