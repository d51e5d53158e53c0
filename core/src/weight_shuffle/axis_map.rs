//! Index maps along one axis of a tensor, and the gathers that apply them (crate-private).
//!
//! An axis of length `L` is cut into at most three segments (a fused QKV axis has three:
//! query heads, key heads, value heads). A segment is a run of blocks of `block`
//! positions (one head, or the whole hidden layer); block `b` of a segment uses the
//! permutation `perms[(b / group) · block ..][.. block]`, so `group` blocks share one
//! permutation (`usize::MAX`: all blocks share the first). Position `j` of block `b`
//! receives the element at `b · block + π(j)` — a gather, `dst[j] = src[π(j)]`
//! (the index maps of `docs/PAPERS.md` §2.3). Positions outside every segment stay in place.

use crate::element::Element;

/// A run of equally sized blocks along an axis.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment<'p> {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) block: usize,
    pub(super) group: usize,
    pub(super) perms: &'p [u32],
}

/// The source position of every position along an axis.
#[derive(Debug, Clone, Copy)]
pub(super) struct AxisMap<'p> {
    segs: [Option<Segment<'p>>; 3],
}

impl<'p> AxisMap<'p> {
    /// A map with one segment covering `[0, len)`.
    pub(super) fn single(len: usize, block: usize, group: usize, perms: &'p [u32]) -> Self {
        Self { segs: [Some(Segment { start: 0, len, block, group, perms }), None, None] }
    }

    /// A map made of the given segments (unused slots `None`).
    pub(super) fn segments(segs: [Option<Segment<'p>>; 3]) -> Self {
        Self { segs }
    }

    /// The position whose element lands at `j`: the definition [`for_each`](Self::for_each)
    /// is tested against.
    #[cfg(test)]
    fn src(&self, j: usize) -> usize {
        for s in self.segs.iter().flatten() {
            if j >= s.start && j - s.start < s.len {
                let r = j - s.start;
                let (b, a) = (r / s.block, r % s.block);
                let p = if s.group == usize::MAX { 0 } else { b / s.group };
                return s.start + b * s.block + s.perms[p * s.block + a] as usize;
            }
        }
        j
    }
}

impl AxisMap<'_> {
    /// Calls `f(j, src(j))` for `j = 0, 1, …, len − 1` in order, without per-position
    /// division (the gathers' inner loop).
    #[inline]
    pub(super) fn for_each(&self, len: usize, mut f: impl FnMut(usize, usize)) {
        let mut j = 0;
        for s in self.segs.iter().flatten() {
            while j < s.start.min(len) {
                f(j, j);
                j += 1;
            }
            for b in 0..s.len / s.block {
                let p = if s.group == usize::MAX { 0 } else { b / s.group };
                let perm = &s.perms[p * s.block..][..s.block];
                let base = s.start + b * s.block;
                for (a, &x) in perm.iter().enumerate() {
                    f(base + a, base + x as usize);
                }
            }
            j = s.start + s.len;
        }
        while j < len {
            f(j, j);
            j += 1;
        }
    }
}

/// Which axis of a row-major `rows × cols` matrix moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Axis {
    Rows,
    Cols,
}

/// Gathers `m[j, :] = old[map(j), :]` (rows) or `m[:, j] = old[:, map(j)]` (cols) in place,
/// for the `rows × cols` matrix `buf[..rows·cols]`, through `scratch[..rows·cols]`. Values
/// pass through `f64`, which holds every supported element exactly (signalling NaNs come
/// back quiet).
pub(super) fn gather_matrix<T: Element>(
    buf: &mut [T],
    rows: usize,
    cols: usize,
    axis: Axis,
    map: &AxisMap<'_>,
    scratch: &mut [f64],
) {
    let n = rows * cols;
    let (m, old) = (&mut buf[..n], &mut scratch[..n]);
    for (o, x) in old.iter_mut().zip(m.iter()) {
        *o = x.to_f64();
    }
    match axis {
        Axis::Rows => map.for_each(rows, |j, s| {
            let row = &mut m[j * cols..][..cols];
            for (x, &o) in row.iter_mut().zip(&old[s * cols..][..cols]) {
                *x = T::from_f64(o);
            }
        }),
        Axis::Cols => {
            for (row, old) in m.chunks_exact_mut(cols).zip(old.chunks_exact(cols)) {
                map.for_each(cols, |j, s| row[j] = T::from_f64(old[s]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_groups_and_identity_outside() {
        // Two blocks of 3 sharing one permutation (group 2), then positions 6.. untouched.
        let perms = [2u32, 0, 1];
        let map = AxisMap::single(6, 3, 2, &perms);
        let src: [usize; 8] = core::array::from_fn(|j| map.src(j));
        assert_eq!(src, [2, 0, 1, 5, 3, 4, 6, 7]);
        let mut seen = [0usize; 8];
        map.for_each(8, |j, s| seen[j] = s);
        assert_eq!(seen, src);
        // group 1: block b uses permutation b.
        let perms = [1u32, 0, 0, 1];
        let map = AxisMap::single(4, 2, 1, &perms);
        let src: [usize; 4] = core::array::from_fn(|j| map.src(j));
        assert_eq!(src, [1, 0, 2, 3]);
        // usize::MAX: every block uses the first permutation.
        let map = AxisMap::single(4, 2, usize::MAX, &perms);
        let src: [usize; 4] = core::array::from_fn(|j| map.src(j));
        assert_eq!(src, [1, 0, 3, 2]);
    }

    #[test]
    fn for_each_follows_src_across_segments_and_gaps() {
        let (p, q) = ([1u32, 0, 0, 1], [2u32, 1, 0]);
        let seg =
            |start, len, block, group, perms| Some(Segment { start, len, block, group, perms });
        // Gap [0, 2), blocks of 2 at [2, 6), gap [6, 8), one shared block of 3 at [8, 11), tail.
        let map =
            AxisMap::segments([seg(2, 4, 2, 1, &p[..]), None, seg(8, 3, 3, usize::MAX, &q[..])]);
        let mut seen = [usize::MAX; 12];
        map.for_each(12, |j, s| seen[j] = s);
        let src: [usize; 12] = core::array::from_fn(|j| map.src(j));
        assert_eq!(seen, src);
        assert_eq!(src, [0, 1, 3, 2, 4, 5, 6, 7, 10, 9, 8, 11]);
    }

    #[test]
    fn gathers_rows_cols_and_vectors() {
        let perms = [2u32, 0, 1];
        let map = AxisMap::single(3, 3, 1, &perms);
        let mut scratch = [0.0; 6];
        // 3 × 2, rows permuted.
        let mut m = [0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0];
        gather_matrix(&mut m, 3, 2, Axis::Rows, &map, &mut scratch);
        assert_eq!(m, [20.0, 21.0, 0.0, 1.0, 10.0, 11.0]);
        // 2 × 3, columns permuted.
        let mut m = [0.0f64, 1.0, 2.0, 10.0, 11.0, 12.0];
        gather_matrix(&mut m, 2, 3, Axis::Cols, &map, &mut scratch);
        assert_eq!(m, [2.0, 0.0, 1.0, 12.0, 10.0, 11.0]);
        let mut v =
            [half::bf16::from_f32(1.0), half::bf16::from_f32(2.0), half::bf16::from_f32(3.0)];
        gather_matrix(&mut v, 3, 1, Axis::Rows, &map, &mut scratch);
        assert_eq!(v.map(|x| x.to_f32()), [3.0, 1.0, 2.0]);
    }
}
