//! Permutation plans: validated layout descriptors plus the index maps of Theorems 3 and 4
//! (`docs/PAPERS.md` §2.3 and §2.2).
//!
//! **Guarantee.** For every [`Permutations`] drawn or checked by a plan, applying it to a
//! model's weights leaves the function the model computes unchanged (exactly, since only
//! element positions move), provided the descriptors describe the model (a block's tensors
//! are the layers of one MLP or attention block, with the stated head layout). The same
//! permutation applied to gradients and optimizer state keeps training equivariant: the
//! permuted run is the unpermuted run with relabelled hidden units (`docs/PAPERS.md` §2.3, P2-14).
//! Sampling is uniform over the plan's group (Fisher–Yates with Lemire's unbiased bounded
//! integers, independent factors in a fixed order), from a keyed ChaCha20 stream or any
//! `CryptoRng`.
//!
//! **Permutation order.** [`ShufflePlan::permutation_len`] `u32`s hold, block by block: for
//! an MLP one permutation of its hidden units; for attention, under
//! [`PositionEncoding::Additive`], one `qk_head_dim` permutation per key/value head, then
//! the value permutations (one of `v_head_dim`, or one per key/value head). A keyed draw
//! reads the stream sequentially from word 0 in that order.

use rand_core::CryptoRng;

use super::axis_map::{Axis, AxisMap, Segment, gather_matrix};
use super::layout::{
    AttentionBlock, Block, LinearLayout, MlpBlock, PositionEncoding, Qkv, ValueSharing,
    WeightLayout,
};
use crate::element::Element;
use crate::error::{Error, Result, add_size, mul_size};
use crate::sampling::{KeyedStream, invert_permutation, sample_permutation_keyed};
use crate::scratch::check_scratch;

/// Largest permuted axis (hidden units, head features): indices are `u32` with one bit
/// used to validate them in place.
const MAX_AXIS: usize = 1 << 31;

/// A validated set of blocks over a flat buffer of `param_len` elements.
///
/// ```
/// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// // y = W2·relu(W1·x + b1) + b2 with W1: 3×2 at 0, b1 at 6, W2: 2×3 at 9, b2 at 15.
/// let blocks = [Block::Mlp(MlpBlock {
///     up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn).with_bias(6),
///     gate: None,
///     down: LinearLayout::new(9, 2, 3, WeightLayout::OutIn).with_bias(15),
/// })];
/// let plan = ShufflePlan::new(&blocks, 17)?;
/// let mut idx = [0u32; 3];
/// let perms = plan.sample_keyed(&KeyedStream::new(&NoiseKey::generate()?, 0), &mut idx)?;
/// let mut w: [f64; 17] = core::array::from_fn(|i| i as f64);
/// let mut scratch = vec![0.0; plan.apply_scratch_len()];
/// plan.apply(&perms, &mut w, &mut scratch)?;
/// let p = perms.as_slice();
/// // Hidden unit j now holds old unit p[j]: row j of W1, b1[j] and column j of W2.
/// assert_eq!(w[6 + 1], 6.0 + p[1] as f64);
/// assert_eq!(w[9 + 3 + 2], (9 + 3 + p[2]) as f64);
/// assert_eq!(w[15..], [15.0, 16.0]); // b2 is a fixed point
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ShufflePlan<'a> {
    blocks: &'a [Block],
    param_len: usize,
    perm_len: usize,
    max_tensor: usize,
    signature: u64,
}

/// Permutations for one plan: drawn by [`ShufflePlan::sample_keyed`] or
/// [`ShufflePlan::sample`], or checked by [`ShufflePlan::check`]. Only a plan with the same
/// permutation shapes accepts them.
///
/// ```
/// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
/// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
/// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
/// let plan = ShufflePlan::new(&blocks, 12)?;
/// let mut idx = [2u32, 0, 1];
/// assert_eq!(plan.check(&mut idx)?.as_slice(), &[2, 0, 1]);
/// assert!(plan.check(&mut [0u32, 0, 1]).is_err()); // not a bijection
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutations<'p> {
    indices: &'p [u32],
    signature: u64,
}

impl Permutations<'_> {
    /// The concatenated permutations, in the plan's order (see the module docs).
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// assert_eq!(plan.identity(&mut [9u32; 3])?.as_slice(), &[0, 1, 2]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn as_slice(&self) -> &[u32] {
        self.indices
    }
}

/// How much of the buffer a plan moves (`docs/PAPERS.md` §2.3, "Fixed points", and P2-17).
///
/// ```
/// use dpattn_core::weight_shuffle::Coverage;
/// let c = Coverage { moved: 3, total: 4 };
/// assert_eq!(c.fraction(), 0.75);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// Elements in tensors whose moved axis has blocks of at least two positions.
    pub moved: usize,
    /// `param_len`.
    pub total: usize,
}

impl Coverage {
    /// `moved / total`.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::Coverage;
    /// assert_eq!(Coverage { moved: 0, total: 8 }.fraction(), 0.0);
    /// ```
    pub fn fraction(&self) -> f64 {
        self.moved as f64 / self.total as f64
    }
}

/// One tensor moved along one axis.
struct Move<'p> {
    offset: usize,
    rows: usize,
    cols: usize,
    axis: Axis,
    /// Smallest permuted block along the axis (the orbit of a moved coordinate).
    orbit: usize,
    /// Elements that can move (in segments with blocks of at least two positions).
    moved: usize,
    map: AxisMap<'p>,
}

/// The `(length, count)` of a block's permutations, in draw order.
fn perm_specs(b: &Block) -> [(usize, usize); 2] {
    match b {
        Block::Mlp(m) => [(m.up.out_features, 1), (0, 0)],
        Block::Attention(a) => {
            let qk = match a.positions {
                PositionEncoding::Additive => (a.qk_head_dim, a.kv_heads),
                PositionEncoding::Rotary => (0, 0),
            };
            let v = match a.values {
                ValueSharing::AllHeads => (a.v_head_dim, 1),
                ValueSharing::PerKvHead => (a.v_head_dim, a.kv_heads),
            };
            [qk, v]
        }
    }
}

/// How a map moves an axis: the smallest block of its segments and how many positions lie
/// in segments with blocks of at least two.
#[derive(Clone, Copy)]
struct Reach {
    orbit: usize,
    positions: usize,
}

impl Reach {
    fn of(segs: &[(usize, usize)]) -> Self {
        let mut r = Reach { orbit: usize::MAX, positions: 0 };
        for &(len, block) in segs {
            r.orbit = r.orbit.min(block);
            if block >= 2 {
                r.positions += len;
            }
        }
        r
    }
}

/// Moves along a linear layer's output axis (weight and bias) or input axis (weight only).
fn linear_moves<'p>(
    l: &LinearLayout,
    out_axis: bool,
    reach: Reach,
    map: AxisMap<'p>,
    f: &mut impl FnMut(Move<'p>),
) {
    let (rows, cols, axis) = match (l.layout, out_axis) {
        (WeightLayout::OutIn, true) => (l.out_features, l.in_features, Axis::Rows),
        (WeightLayout::InOut, true) => (l.in_features, l.out_features, Axis::Cols),
        (WeightLayout::OutIn, false) => (l.out_features, l.in_features, Axis::Cols),
        (WeightLayout::InOut, false) => (l.in_features, l.out_features, Axis::Rows),
    };
    let other = if out_axis { l.in_features } else { l.out_features };
    let orbit = reach.orbit;
    f(Move { offset: l.weight, rows, cols, axis, orbit, moved: reach.positions * other, map });
    if let (true, Some(b)) = (out_axis, l.bias) {
        let (rows, moved) = (l.out_features, reach.positions);
        f(Move { offset: b, rows, cols: 1, axis: Axis::Rows, orbit, moved, map });
    }
}

fn mlp_moves<'p>(m: &MlpBlock, perms: &'p [u32], f: &mut impl FnMut(Move<'p>)) {
    let h = m.up.out_features;
    let map = AxisMap::single(h, h, 1, perms);
    let reach = Reach::of(&[(h, h)]);
    linear_moves(&m.up, true, reach, map, f);
    if let Some(g) = &m.gate {
        linear_moves(g, true, reach, map, f);
    }
    linear_moves(&m.down, false, reach, map, f);
}

fn attention_moves<'p>(a: &AttentionBlock, perms: &'p [u32], f: &mut impl FnMut(Move<'p>)) {
    let [(qk_len, qk_count), _] = perm_specs(&Block::Attention(*a));
    // `perms` is empty when only offsets and shapes are wanted.
    let (qk, v) = perms.split_at((qk_len * qk_count).min(perms.len()));
    let (dk, dv, kv) = (a.qk_head_dim, a.v_head_dim, a.kv_heads);
    let group = a.heads / kv;
    let moves_qk = a.positions == PositionEncoding::Additive;
    let seg = |start, len, block, group, perms| Some(Segment { start, len, block, group, perms });
    let q_seg = seg(0, a.heads * dk, dk, group, qk);
    let k_seg = |start| seg(start, kv * dk, dk, 1, qk);
    let (v_group, o_group) = match a.values {
        ValueSharing::AllHeads => (usize::MAX, usize::MAX),
        ValueSharing::PerKvHead => (1, group),
    };
    let v_seg = |start| seg(start, kv * dv, dv, v_group, v);
    let (q_reach, k_reach) = (Reach::of(&[(a.heads * dk, dk)]), Reach::of(&[(kv * dk, dk)]));
    let v_reach = Reach::of(&[(kv * dv, dv)]);
    match &a.qkv {
        Qkv::Separate { q, k, v: vl } => {
            if moves_qk {
                linear_moves(q, true, q_reach, AxisMap::segments([q_seg, None, None]), f);
                linear_moves(k, true, k_reach, AxisMap::segments([k_seg(0), None, None]), f);
            }
            linear_moves(vl, true, v_reach, AxisMap::segments([v_seg(0), None, None]), f);
        }
        Qkv::Fused(l) => {
            let v_part = v_seg((a.heads + kv) * dk);
            let (map, reach) = if moves_qk {
                let reach = Reach::of(&[(a.heads * dk, dk), (kv * dk, dk), (kv * dv, dv)]);
                (AxisMap::segments([q_seg, k_seg(a.heads * dk), v_part]), reach)
            } else {
                // Query/key columns are fixed points: orbit 1 for the tensor.
                let reach = Reach::of(&[((a.heads + kv) * dk, 1), (kv * dv, dv)]);
                (AxisMap::segments([None, None, v_part]), reach)
            };
            linear_moves(l, true, reach, map, f);
        }
    }
    let o_map = AxisMap::single(a.heads * dv, dv, o_group, v);
    linear_moves(&a.output, false, Reach::of(&[(a.heads * dv, dv)]), o_map, f);
}

/// Calls `f` for every tensor a block moves, with maps reading `perms` (the block's slice;
/// pass `&[]` when only offsets and shapes are needed — the maps must then not be used).
fn block_moves<'p>(b: &Block, perms: &'p [u32], f: &mut impl FnMut(Move<'p>)) {
    match b {
        Block::Mlp(m) => mlp_moves(m, perms, f),
        Block::Attention(a) => attention_moves(a, perms, f),
    }
}

fn out_of_range(name: &'static str, value: usize, allowed: &'static str) -> Error {
    Error::OutOfRange { name, value: value as f64, allowed }
}

/// Checks one linear layer's extents and that it lies inside the buffer.
fn check_linear(l: &LinearLayout, param_len: usize) -> Result<()> {
    for n in [l.out_features, l.in_features] {
        if n == 0 || n >= MAX_AXIS {
            return Err(out_of_range("layer features", n, "[1, 2^31)"));
        }
    }
    let len = mul_size(l.out_features, l.in_features, "weight elements")?;
    let end = add_size(l.weight, len, "weight end offset")?;
    let bias_end = match l.bias {
        Some(b) => add_size(b, l.out_features, "bias end offset")?,
        None => 0,
    };
    let needed = end.max(bias_end);
    if needed > param_len {
        return Err(Error::BufferTooShort {
            arg: "param_len (layer extent)",
            needed,
            got: param_len,
        });
    }
    Ok(())
}

fn mismatch(arg: &'static str, axis: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got { Ok(()) } else { Err(Error::ShapeMismatch { arg, axis, expected, got }) }
}

fn check_block(b: &Block, param_len: usize) -> Result<()> {
    match b {
        Block::Mlp(m) => {
            for l in [Some(&m.up), m.gate.as_ref(), Some(&m.down)].into_iter().flatten() {
                check_linear(l, param_len)?;
            }
            let h = m.up.out_features;
            mismatch("mlp.down", "in_features (hidden units)", h, m.down.in_features)?;
            if let Some(g) = &m.gate {
                mismatch("mlp.gate", "out_features (hidden units)", h, g.out_features)?;
                mismatch("mlp.gate", "in_features", m.up.in_features, g.in_features)?;
            }
        }
        Block::Attention(a) => {
            for (name, n) in [
                ("heads", a.heads),
                ("kv_heads", a.kv_heads),
                ("qk_head_dim", a.qk_head_dim),
                ("v_head_dim", a.v_head_dim),
            ] {
                if n == 0 || n >= MAX_AXIS {
                    return Err(out_of_range(name, n, "[1, 2^31)"));
                }
            }
            if !a.heads.is_multiple_of(a.kv_heads) {
                return Err(out_of_range("kv_heads", a.kv_heads, "a divisor of heads"));
            }
            let q_out = mul_size(a.heads, a.qk_head_dim, "heads * qk_head_dim")?;
            let k_out = mul_size(a.kv_heads, a.qk_head_dim, "kv_heads * qk_head_dim")?;
            let v_out = mul_size(a.kv_heads, a.v_head_dim, "kv_heads * v_head_dim")?;
            match &a.qkv {
                Qkv::Separate { q, k, v } => {
                    for l in [q, k, v] {
                        check_linear(l, param_len)?;
                    }
                    mismatch("attention.q", "out_features", q_out, q.out_features)?;
                    mismatch("attention.k", "out_features", k_out, k.out_features)?;
                    mismatch("attention.v", "out_features", v_out, v.out_features)?;
                    mismatch("attention.k", "in_features", q.in_features, k.in_features)?;
                    mismatch("attention.v", "in_features", q.in_features, v.in_features)?;
                }
                Qkv::Fused(l) => {
                    check_linear(l, param_len)?;
                    let total = add_size(add_size(q_out, k_out, "fused qkv")?, v_out, "fused qkv")?;
                    mismatch(
                        "attention.qkv",
                        "out_features (q + k + v heads)",
                        total,
                        l.out_features,
                    )?;
                }
            }
            check_linear(&a.output, param_len)?;
            let o_in = mul_size(a.heads, a.v_head_dim, "heads * v_head_dim")?;
            mismatch(
                "attention.output",
                "in_features (heads * v_head_dim)",
                o_in,
                a.output.in_features,
            )?;
        }
    }
    Ok(())
}

/// FNV-1a over the permutation shapes: ties [`Permutations`] to plans of the same shape.
fn signature(blocks: &[Block]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in blocks {
        for (len, count) in perm_specs(b) {
            for x in [len as u64, count as u64] {
                for byte in x.to_le_bytes() {
                    h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
    }
    h
}

impl<'a> ShufflePlan<'a> {
    /// Validates `blocks` over a flat buffer of `param_len` elements.
    ///
    /// # Errors
    /// * [`Error::OutOfRange`] for a zero extent, an axis of `2^31` or more, `kv_heads` not
    ///   dividing `heads`, an empty plan or `param_len = 0`, or two described tensors that
    ///   overlap (they would be permuted twice, or a fixed tensor with a moved one).
    /// * [`Error::ShapeMismatch`] for layers whose shapes do not fit together (`up` vs
    ///   `down` hidden units, head counts × head dims vs projection features).
    /// * [`Error::BufferTooShort`] for a tensor that ends past `param_len`;
    ///   [`Error::SizeOverflow`] for extents whose products overflow.
    ///
    /// ```
    /// use dpattn_core::Error;
    /// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// let mlp = |down_in| [Block::Mlp(MlpBlock {
    ///     up: LinearLayout::new(0, 4, 2, WeightLayout::OutIn), gate: None,
    ///     down: LinearLayout::new(8, 2, down_in, WeightLayout::OutIn) })];
    /// assert!(ShufflePlan::new(&mlp(4), 16).is_ok());
    /// assert!(matches!(ShufflePlan::new(&mlp(3), 16), Err(Error::ShapeMismatch { .. })));
    /// assert!(matches!(ShufflePlan::new(&mlp(4), 15), Err(Error::BufferTooShort { .. })));
    /// ```
    pub fn new(blocks: &'a [Block], param_len: usize) -> Result<Self> {
        if blocks.is_empty() || param_len == 0 {
            return Err(out_of_range("plan blocks / param_len", 0, ">= 1"));
        }
        let (mut perm_len, mut max_tensor) = (0usize, 0usize);
        for b in blocks {
            check_block(b, param_len)?;
            for (len, count) in perm_specs(b) {
                perm_len = add_size(
                    perm_len,
                    mul_size(len, count, "permutation length")?,
                    "permutation length",
                )?;
            }
            block_moves(b, &[], &mut |m| max_tensor = max_tensor.max(m.rows * m.cols));
        }
        let plan = Self { blocks, param_len, perm_len, max_tensor, signature: signature(blocks) };
        plan.check_disjoint()?;
        Ok(plan)
    }

    /// Every pair of described tensors (moved or not: an output bias overlapping a moved
    /// weight would be permuted with it) must be disjoint (`O(t²)` in the number of tensors).
    fn check_disjoint(&self) -> Result<()> {
        let mut result = Ok(());
        let mut i = 0usize;
        self.for_each_described(&mut |a0, a1| {
            let mut j = 0usize;
            self.for_each_described(&mut |b0, b1| {
                if j > i && a0 < b1 && b0 < a1 && result.is_ok() {
                    result = Err(out_of_range(
                        "tensor offset",
                        b0,
                        "described tensors must not overlap (tied weights cannot be planned)",
                    ));
                }
                j += 1;
            });
            i += 1;
        });
        result
    }

    /// Calls `f(start, end)` for the weight and the bias of every described layer.
    fn for_each_described(&self, f: &mut impl FnMut(usize, usize)) {
        let mut layer = |l: &LinearLayout| {
            f(l.weight, l.weight + l.out_features * l.in_features);
            if let Some(b) = l.bias {
                f(b, b + l.out_features);
            }
        };
        for b in self.blocks {
            match b {
                Block::Mlp(m) => [Some(&m.up), m.gate.as_ref(), Some(&m.down)]
                    .into_iter()
                    .flatten()
                    .for_each(&mut layer),
                Block::Attention(a) => {
                    match &a.qkv {
                        Qkv::Separate { q, k, v } => [q, k, v].into_iter().for_each(&mut layer),
                        Qkv::Fused(l) => layer(l),
                    }
                    layer(&a.output);
                }
            }
        }
    }

    /// Calls `f` for every move of every block, each block reading its slice of `perms`
    /// (all empty when `perms` is empty).
    fn for_each_move<'p>(&self, perms: &'p [u32], f: &mut impl FnMut(Move<'p>)) {
        let mut at = 0;
        for b in self.blocks {
            let n: usize = perm_specs(b).iter().map(|&(l, c)| l * c).sum();
            let slice = if perms.is_empty() { perms } else { &perms[at..at + n] };
            block_moves(b, slice, f);
            at += n;
        }
    }

    /// The blocks.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 12)?.blocks().len(), 1);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn blocks(&self) -> &'a [Block] {
        self.blocks
    }

    /// The length of the buffers the plan applies to.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 12)?.param_len(), 12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn param_len(&self) -> usize {
        self.param_len
    }

    /// The number of `u32`s that hold the plan's permutations.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 12)?.permutation_len(), 3);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn permutation_len(&self) -> usize {
        self.perm_len
    }

    /// The `f64` scratch [`apply`](Self::apply) needs: the largest moved tensor.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 12)?.apply_scratch_len(), 6);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn apply_scratch_len(&self) -> usize {
        self.max_tensor
    }

    fn wrap<'p>(&self, indices: &'p [u32]) -> Permutations<'p> {
        Permutations { indices, signature: self.signature }
    }

    fn check_len(&self, got: usize) -> Result<()> {
        mismatch("permutations", "len (permutation_len)", self.perm_len, got)
    }

    /// Calls `f` on each sub-permutation slice of `out`, in draw order.
    fn for_each_slot(
        &self,
        out: &mut [u32],
        mut f: impl FnMut(&mut [u32]) -> Result<()>,
    ) -> Result<()> {
        self.check_len(out.len())?;
        let mut rest = out;
        for b in self.blocks {
            for (len, count) in perm_specs(b) {
                for _ in 0..count {
                    let (head, tail) = core::mem::take(&mut rest).split_at_mut(len);
                    f(head)?;
                    rest = tail;
                }
            }
        }
        Ok(())
    }

    /// Draws uniform permutations from `stream`, reading words sequentially from word 0.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `out.len() == permutation_len()`.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// use dpattn_core::sampling::{KeyedStream, NoiseKey};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 11);
    /// let (mut a, mut b) = ([0u32; 3], [0u32; 3]);
    /// assert_eq!(plan.sample_keyed(&s, &mut a)?, plan.sample_keyed(&s, &mut b)?); // replayable
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sample_keyed<'p>(
        &self,
        stream: &KeyedStream,
        out: &'p mut [u32],
    ) -> Result<Permutations<'p>> {
        let mut pos = 0u128;
        self.for_each_slot(out, |slot| {
            pos = sample_permutation_keyed(stream, pos, slot)?;
            Ok(())
        })?;
        Ok(self.wrap(out))
    }

    /// Draws uniform permutations from `rng` (the same values as
    /// [`sample_keyed`](Self::sample_keyed) when `rng` is a `ChaCha20Rng` at word 0 of that
    /// stream).
    ///
    /// # Errors
    /// As [`sample_keyed`](Self::sample_keyed).
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// let mut idx = [0u32; 3];
    /// let p = plan.sample(&mut ChaCha20Rng::from_seed([1; 32]), &mut idx)?;
    /// let mut sorted = p.as_slice().to_vec(); sorted.sort();
    /// assert_eq!(sorted, [0, 1, 2]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sample<'p, R: CryptoRng + ?Sized>(
        &self,
        rng: &mut R,
        out: &'p mut [u32],
    ) -> Result<Permutations<'p>> {
        self.for_each_slot(out, |slot| {
            crate::sampling::sample_permutation(rng, slot)?;
            Ok(())
        })?;
        Ok(self.wrap(out))
    }

    /// Checks caller-provided permutations (each slot a bijection of its length) in place.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a wrong total length; [`Error::OutOfRange`] for an index
    /// out of range or repeated. On error `perms` is unchanged.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// assert!(plan.check(&mut [0u32, 3, 1]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn check<'p>(&self, perms: &'p mut [u32]) -> Result<Permutations<'p>> {
        const SEEN: u32 = 1 << 31;
        self.for_each_slot(perms, |slot| {
            let n = slot.len();
            // A range pass first, so marking below only ever sets (and clears) bit 31 of
            // entries below `n ≤ 2^31`: a rejected slot comes back unchanged.
            if let Some(&v) = slot.iter().find(|&&v| v as usize >= n) {
                return Err(out_of_range(
                    "permutation index",
                    v as usize,
                    "[0, n) for a slot of n",
                ));
            }
            let mut bad = None;
            for j in 0..n {
                let v = (slot[j] & !SEEN) as usize;
                if v >= n || slot[v] & SEEN != 0 {
                    bad = Some(v);
                    break;
                }
                slot[v] |= SEEN;
            }
            slot.iter_mut().for_each(|x| *x &= !SEEN);
            match bad {
                None => Ok(()),
                Some(v) => {
                    Err(out_of_range("permutation index", v, "each index of [0, n) exactly once"))
                }
            }
        })?;
        Ok(self.wrap(perms))
    }

    /// The identity permutations (applying them changes nothing).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `out.len() == permutation_len()`.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// assert!(plan.identity(&mut [0u32; 2]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn identity<'p>(&self, out: &'p mut [u32]) -> Result<Permutations<'p>> {
        self.for_each_slot(out, |slot| {
            slot.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
            Ok(())
        })?;
        Ok(self.wrap(out))
    }

    /// The inverse permutations: applying `perms` and then the result restores a buffer.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a wrong length or permutations of another plan shape.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// let mut idx = [1u32, 2, 0];
    /// let p = plan.check(&mut idx)?;
    /// let mut inv = [0u32; 3];
    /// assert_eq!(plan.invert(&p, &mut inv)?.as_slice(), &[2, 0, 1]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn invert<'p>(
        &self,
        perms: &Permutations<'_>,
        out: &'p mut [u32],
    ) -> Result<Permutations<'p>> {
        self.check_owned(perms)?;
        let mut at = 0;
        self.for_each_slot(out, |slot| {
            let n = slot.len();
            invert_permutation(&perms.indices[at..at + n], slot)?;
            at += n;
            Ok(())
        })?;
        Ok(self.wrap(out))
    }

    fn check_owned(&self, perms: &Permutations<'_>) -> Result<()> {
        self.check_len(perms.indices.len())?;
        if perms.signature != self.signature {
            return Err(Error::ShapeMismatch {
                arg: "permutations",
                axis: "plan shape (drawn for another plan)",
                expected: self.perm_len,
                got: perms.indices.len(),
            });
        }
        Ok(())
    }

    /// Permutes one buffer (weights, gradients, or an optimizer-state buffer with the same
    /// layout) in place. `scratch` needs [`apply_scratch_len`](Self::apply_scratch_len)
    /// elements; values pass through `f64`, which holds every `f32`, `f16` and `bf16` value
    /// exactly, except that a signalling NaN comes back quiet (same payload otherwise).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `buf.len() != param_len()` or `perms` belongs to a plan
    /// of another shape; [`Error::ScratchTooSmall`]. On error `buf` is unchanged.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// let mut idx = [1u32, 2, 0];
    /// let p = plan.check(&mut idx)?;
    /// let mut w: Vec<f32> = (0..12).map(|i| i as f32).collect();
    /// plan.apply(&p, &mut w, &mut [0.0; 6])?;
    /// assert_eq!(&w[..6], &[2.0, 3.0, 4.0, 5.0, 0.0, 1.0]); // rows of W1
    /// assert_eq!(&w[6..9], &[7.0, 8.0, 6.0]); // columns of W2 (row 0)
    /// assert!(plan.apply(&p, &mut w[..11], &mut [0.0; 6]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn apply<T: Element>(
        &self,
        perms: &Permutations<'_>,
        buf: &mut [T],
        scratch: &mut [f64],
    ) -> Result<()> {
        self.check_owned(perms)?;
        mismatch("buffer", "len (param_len)", self.param_len, buf.len())?;
        check_scratch(scratch.len(), self.max_tensor)?;
        self.for_each_move(perms.indices, &mut |m| {
            gather_matrix(&mut buf[m.offset..], m.rows, m.cols, m.axis, &m.map, scratch);
        });
        Ok(())
    }

    /// The fraction of the buffer the plan moves (`docs/PAPERS.md` §2.3, P2-17): `0.99` of a ViT-B
    /// layer, less once embeddings, LayerNorms and heads are counted in `param_len`.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 16)?.coverage().moved, 12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn coverage(&self) -> Coverage {
        let mut moved = 0;
        self.for_each_move(&[], &mut |m| moved += m.moved);
        Coverage { moved, total: self.param_len }
    }

    /// The smallest orbit of a buffer coordinate under the plan's group (`docs/PAPERS.md` P2-5):
    /// `1` if any coordinate is a fixed point, else the smallest permuted block (hidden units or
    /// head features). The paper's `d` (all parameters) is never the right number.
    ///
    /// ```
    /// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
    /// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    /// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// assert_eq!(ShufflePlan::new(&blocks, 12)?.min_orbit(), 3);
    /// assert_eq!(ShufflePlan::new(&blocks, 13)?.min_orbit(), 1); // element 12 never moves
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn min_orbit(&self) -> usize {
        if self.coverage().moved < self.param_len {
            return 1;
        }
        let mut orbit = usize::MAX;
        self.for_each_move(&[], &mut |m| orbit = orbit.min(m.orbit));
        orbit
    }

    /// Calls `f(offset, len)` for every tensor moved by block `index` (for batch clipping
    /// per block).
    pub(crate) fn for_each_block_range(&self, index: usize, mut f: impl FnMut(usize, usize)) {
        block_moves(&self.blocks[index], &[], &mut |m| f(m.offset, m.rows * m.cols));
    }
}
