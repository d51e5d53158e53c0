//! The storage behind every noisy segment tree of this module (`docs/PAPERS.md` §1.4 and P1-20):
//! `trees` summation trees over the same `N` leaves, each holding `moments` interleaved sums per
//! node, in one contiguous `f64` arena.
//!
//! * Heap layout without the root: node `v ∈ 2..2N` (children `2v`, `2v+1`, leaf of bin `j`
//!   is `N + j`) lives at offset `((tree · (2N − 2)) + (v − 2)) · moments + q`.
//! * The root is never stored, never noised and never read (P1-7): each leaf-to-root path
//!   has exactly `L = log2 N` released nodes.
//! * Build: fill the leaves with exact sums (in exact mode each contribution is first
//!   rounded to its moment's quantum `η_q`, which makes every sum exact: [`NodeNoise`]),
//!   [`TreeArena::build_sums`] sets every internal
//!   node to the exact sum of its two children, then [`TreeArena::add_noise`] releases every
//!   node with independent noise (Algorithm 2: `c[v] = b[v] + noise`, never the sum of noisy
//!   children): in exact mode `Λ·(round(b[v]/Λ) + Z)` with `Z` the exact truncated discrete
//!   Laplace ([`NodeNoise`]), in unsafe-float mode `b[v] + TLap`. The noise of node offset
//!   `o` is element `first + o` of the keyed stream (`docs/RANDOMNESS.md` §5.2; per-element
//!   windows in exact mode, 2 words per element in unsafe-float mode), so the arena is a
//!   function of (data, key, stream, first) alone, whatever the thread count.

use alloc::vec::Vec;

use crate::error::{Error, Result, mul_size};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, NoiseMode, TruncatedLaplaceGrid};
use crate::sampling::bit_source::fill_windows;
use crate::sampling::{ExactSampler, FixedWordSampler, KeyedStream, TruncatedLaplace};
use crate::scratch::try_filled;
use rand_core::Rng;

use super::node_noise::{Layout, NodeNoise, quantize, term_bound};

/// The largest supported number of moments (`p + 1` for `ℓ_p^p` distances).
pub(crate) const MAX_MOMENTS: usize = 9;

/// `N = max(2, next_pow2(n))` leaves (`docs/PAPERS.md` P1-6: `n = 1` would give depth 0).
///
/// ```
/// use dpattn_core::softmax_tree::leaf_count;
/// assert_eq!((leaf_count(1)?, leaf_count(9)?, leaf_count(1000)?), (2, 16, 1024));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `n = 0`; [`Error::SizeOverflow`] when `N` does not fit.
pub fn leaf_count(n: usize) -> Result<usize> {
    if n == 0 {
        return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: ">= 1" });
    }
    n.max(2).checked_next_power_of_two().ok_or(Error::SizeOverflow { what: "leaf count" })
}

/// The bin of a value: `min(⌊x·N/ρ⌋, N − 1)` computed in `f64` (`docs/PAPERS.md` §1.4, "Binning"),
/// the same function for data and queries. Values below 0 (and NaN) go to bin 0.
///
/// ```
/// use dpattn_core::softmax_tree::bin;
/// assert_eq!((bin(0.0, 1.0, 16), bin(0.25, 1.0, 16), bin(1.0, 1.0, 16)), (0, 4, 15));
/// ```
pub fn bin(x: f64, range: f64, n_leaves: usize) -> usize {
    let b = libm::floor(x * n_leaves as f64 / range);
    if b.is_nan() || b <= 0.0 {
        0
    } else if b >= (n_leaves - 1) as f64 {
        n_leaves - 1
    } else {
        b as usize
    }
}

/// `trees × (2N − 2) × moments` node sums.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TreeArena {
    n_leaves: usize,
    depth: u32,
    moments: usize,
    trees: usize,
    /// `Some(k)`: contributions to moment `q` are rounded to multiples of `2^k` (exact mode).
    quanta: [Option<i32>; MAX_MOMENTS],
    nodes: Vec<f64>,
}

impl TreeArena {
    /// Elements of an arena, checked for overflow.
    pub(crate) fn len_for(trees: usize, moments: usize, n_leaves: usize) -> Result<usize> {
        let per_tree = mul_size(2, n_leaves, "tree nodes")? - 2;
        mul_size(mul_size(trees, per_tree, "tree nodes")?, moments, "tree nodes")
    }

    /// A zeroed arena (fallible allocation).
    pub(crate) fn zeroed(trees: usize, moments: usize, n_leaves: usize) -> Result<Self> {
        debug_assert!(n_leaves.is_power_of_two() && n_leaves >= 2);
        debug_assert!((1..=MAX_MOMENTS).contains(&moments));
        let len = Self::len_for(trees, moments, n_leaves)?;
        let nodes = try_filled(len, 0.0, "tree nodes")?;
        Ok(Self {
            n_leaves,
            depth: n_leaves.trailing_zeros(),
            moments,
            trees,
            quanta: [None; MAX_MOMENTS],
            nodes,
        })
    }

    /// Rounds every later contribution to moment `q` to the quantum of `noise[q]` (exact
    /// mode; nothing for unsafe-float noise). Call before the scatter.
    pub(crate) fn quantize_for(&mut self, noise: &[NodeNoise]) {
        for (k, n) in self.quanta.iter_mut().zip(noise) {
            *k = n.quantum_exponent();
        }
    }

    pub(crate) fn n_leaves(&self) -> usize {
        self.n_leaves
    }

    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    #[inline]
    fn offset(&self, tree: usize, v: usize) -> usize {
        (tree * (2 * self.n_leaves - 2) + (v - 2)) * self.moments
    }

    /// The `moments` sums of heap node `v ∈ 2..2N` of `tree`.
    #[inline]
    pub(crate) fn node(&self, tree: usize, v: usize) -> &[f64] {
        let o = self.offset(tree, v);
        &self.nodes[o..o + self.moments]
    }

    /// Adds a point of value `x` and weight `w` to the leaf of bin `j` of `tree`: moment `q`
    /// gains `w·x^q`, rounded to the moment's quantum if it has one (the exact-sum scatter
    /// before [`Self::build_sums`]).
    #[inline]
    pub(crate) fn add_point(&mut self, tree: usize, j: usize, w: f64, x: f64) {
        let o = self.offset(tree, self.n_leaves + j);
        let quanta = self.quanta;
        let mut pw = w;
        for (s, k) in self.nodes[o..o + self.moments].iter_mut().zip(quanta) {
            *s += match k {
                Some(k) => quantize(pw, k),
                None => pw,
            };
            pw *= x;
        }
    }

    /// Every internal node (depths 1..L−1) := the exact sum of its children.
    pub(crate) fn build_sums(&mut self) {
        let m = self.moments;
        for tree in 0..self.trees {
            for v in (2..self.n_leaves).rev() {
                let (l, r, o) =
                    (self.offset(tree, 2 * v), self.offset(tree, 2 * v + 1), self.offset(tree, v));
                for q in 0..m {
                    self.nodes[o + q] = self.nodes[l + q] + self.nodes[r + q];
                }
            }
        }
    }

    /// Releases moment `q` of every node with `noise[q]`; node offset `o` draws element
    /// `first + o` of `stream` (module docs). On an error the arena is left partly noised;
    /// callers drop it (it wipes itself).
    ///
    /// # Errors
    /// The capacity check ([`check_capacity`]), a mix of modes, or (exact mode) an
    /// exhausted window.
    pub(crate) fn add_noise(
        &mut self,
        noise: &[NodeNoise],
        stream: &KeyedStream,
        first: u128,
    ) -> Result<()> {
        debug_assert_eq!(noise.len(), self.moments);
        if let Some(grids) = gather(noise, NodeNoise::as_exact) {
            check_capacity(NoiseMode::Exact, first, self.nodes.len())?;
            return self.release_exact(&grids[..noise.len()], stream, first as u64);
        }
        let samplers = gather(noise, NodeNoise::as_unsafe_float)
            .ok_or(Error::Unsupported { what: "tree node noise of mixed modes" })?;
        check_capacity(NoiseMode::UnsafeFloat, first, self.nodes.len())?;
        let mut reader = stream.reader_at(first * 2)?;
        for (o, x) in self.nodes.iter_mut().enumerate() {
            let words = [reader.next_u32(), reader.next_u32()];
            let z: f64 = samplers[o % self.moments].group::<f64>(&words)[0];
            *x += z;
        }
        Ok(())
    }

    /// Node offset `o` becomes `grids[o % m].grid().release(x, z)`, `z` drawn from the
    /// window of element `first + o`.
    fn release_exact(
        &mut self,
        grids: &[TruncatedLaplaceGrid],
        stream: &KeyedStream,
        first: u64,
    ) -> Result<()> {
        const CHUNK: usize = 64;
        let m = grids.len();
        let mut z = [0i64; CHUNK];
        for (c, chunk) in self.nodes.chunks_mut(CHUNK).enumerate() {
            let start = c * CHUNK;
            let z = &mut z[..chunk.len()];
            let mut o = start;
            fill_windows(stream, first + start as u64, z, |bits| {
                let t = grids[o % m].integer_noise();
                o += 1;
                t.sample_bits(bits)
            })?;
            for (k, (x, &z)) in chunk.iter_mut().zip(z.iter()).enumerate() {
                *x = grids[(start + k) % m].grid().release(*x, z);
            }
        }
        Ok(())
    }

    /// `(c_left, c_right)` of `tree` at leaf `j`, for every moment: the sums of the siblings
    /// left and right of the path (Algorithm 2 Query, the bottom-up form). Leaf `j` itself is
    /// in neither (`docs/PAPERS.md` P1-10).
    pub(crate) fn query(&self, tree: usize, j: usize, left: &mut [f64], right: &mut [f64]) {
        left.fill(0.0);
        right.fill(0.0);
        let mut h = self.n_leaves + j;
        while h > 1 {
            let side = if h & 1 == 1 { &mut *left } else { &mut *right };
            for (s, x) in side.iter_mut().zip(self.node(tree, h ^ 1)) {
                *s += x;
            }
            h >>= 1;
        }
    }

    /// The DPTreeDistance answer (Algorithm 5) of `tree` at `y` with range `ρ`:
    /// `Σ_q C(p,q) y^{p−q} ((−1)^{p−q} c_right_q + (−1)^q c_left_q)`, `p = moments − 1`.
    pub(crate) fn distance(&self, tree: usize, y: f64, range: f64) -> f64 {
        let mut left = [0.0; MAX_MOMENTS];
        let mut right = [0.0; MAX_MOMENTS];
        let m = self.moments;
        self.query(tree, bin(y, range, self.n_leaves), &mut left[..m], &mut right[..m]);
        let p = m - 1;
        let mut z = 0.0;
        let mut binom = 1.0; // C(p, q)
        for q in 0..=p {
            let ypow = powi(y, (p - q) as u32);
            let sr = if (p - q).is_multiple_of(2) { right[q] } else { -right[q] };
            let sl = if q.is_multiple_of(2) { left[q] } else { -left[q] };
            z += binom * ypow * (sr + sl);
            binom = binom * (p - q) as f64 / (q + 1) as f64;
        }
        z
    }

    /// Overwrites the arena with zeros.
    pub(crate) fn wipe(&mut self) {
        self.nodes.fill(0.0);
        core::hint::black_box(&mut self.nodes);
    }

    /// A copy made with fallible allocation (arenas can be gigabytes).
    pub(crate) fn try_clone(&self) -> Result<Self> {
        let mut nodes = try_filled(self.nodes.len(), 0.0, "tree nodes")?;
        nodes.copy_from_slice(&self.nodes);
        Ok(Self {
            n_leaves: self.n_leaves,
            depth: self.depth,
            moments: self.moments,
            trees: self.trees,
            quanta: self.quanta,
            nodes,
        })
    }
}

impl Drop for TreeArena {
    /// Arenas hold exact private sums until they are noised; every arena is wiped when
    /// dropped, so an error path never leaves them in freed memory (best effort: the write is
    /// kept alive with `black_box`).
    fn drop(&mut self) {
        self.wipe();
    }
}

/// `x^k` with `0^0 = 1`, by repeated multiplication (no `powi` in `no_std`).
#[inline]
pub(crate) fn powi(x: f64, k: u32) -> f64 {
    let mut r = 1.0;
    for _ in 0..k {
        r *= x;
    }
    r
}

/// `noise[q]` viewed through `f` for every `q`, if all of them are of that kind.
fn gather<T: Copy>(
    noise: &[NodeNoise],
    f: impl Fn(&NodeNoise) -> Option<&T>,
) -> Option<[T; MAX_MOMENTS]> {
    let first = *f(noise.first()?)?;
    let mut out = [first; MAX_MOMENTS];
    for (o, n) in out.iter_mut().zip(noise) {
        *o = *f(n)?;
    }
    Some(out)
}

/// Elements `first .. first + count` must lie in one stream: `2^67` elements of 2 words in
/// unsafe-float mode, element indices below `2^40` (the exact samplers' windows,
/// `docs/RANDOMNESS.md` §4) in exact mode.
///
/// # Errors
/// [`Error::OutOfRange`] naming the limit.
pub(crate) fn check_capacity(mode: NoiseMode, first: u128, count: usize) -> Result<()> {
    let end = first.checked_add(count as u128);
    let (limit, allowed) = match mode {
        NoiseMode::Exact => (
            1u128 << 40,
            "first + node count <= 2^40 (exact mode: the samplers' per-element windows)",
        ),
        NoiseMode::UnsafeFloat => (1u128 << 67, "first + node count <= 2^67 (one keyed stream)"),
        NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
    };
    match end {
        Some(e) if e <= limit => Ok(()),
        _ => Err(Error::OutOfRange {
            name: "noise elements of the tree",
            value: end.map_or(f64::INFINITY, |e| e as f64),
            allowed,
        }),
    }
}

/// The node noise of the `p + 1` moment trees of a distance structure of depth `L`:
/// unsafe-float `TLap(2 R_w ρ^q, ε, δ)`, or the exact release of contributions bounded by
/// [`term_bound`]`(R_w, ρ, q)` binned into leaves ([`NodeNoise`]).
pub(crate) fn moment_noise(
    mode: NoiseMode,
    moments: usize,
    weight_bound: f64,
    range: f64,
    depth: u32,
    eps_node: f64,
    delta_node: f64,
) -> Result<[NodeNoise; MAX_MOMENTS]> {
    let node = |q: u32| match mode {
        NoiseMode::UnsafeFloat => Ok(NodeNoise::unsafe_float(TruncatedLaplace::new(
            2.0 * weight_bound * powi(range, q),
            eps_node,
            delta_node,
        )?)),
        NoiseMode::Exact => NodeNoise::exact(
            term_bound(weight_bound, range, q),
            depth,
            Layout::Binned,
            eps_node,
            delta_node,
        ),
        NoiseMode::ConstantTime => Err(CONSTANT_TIME_UNSUPPORTED),
    };
    let mut out = [node(0)?; MAX_MOMENTS];
    for (q, s) in out.iter_mut().enumerate().take(moments).skip(1) {
        *s = node(q as u32)?;
    }
    Ok(out)
}

/// Bytes of an arena of `trees × (2N − 2) × moments` `f64`s, in `u128` so that estimates of
/// configurations far too large to build still compare correctly with a limit.
pub(crate) fn arena_bytes(trees: u128, moments: u128, n_leaves: u128) -> u128 {
    trees.saturating_mul(moments).saturating_mul(2 * n_leaves - 2).saturating_mul(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_the_modes_element_limit() {
        let (x, f) = (NoiseMode::Exact, NoiseMode::UnsafeFloat);
        assert!(check_capacity(x, (1 << 40) - 10, 10).is_ok());
        assert!(check_capacity(x, (1 << 40) - 10, 11).is_err());
        assert!(check_capacity(f, (1 << 40) - 10, 11).is_ok());
        assert!(check_capacity(f, (1 << 67) - 1, 2).is_err());
        assert!(check_capacity(f, u128::MAX, 1).is_err());
    }
}
