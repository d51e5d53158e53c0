//! The shared build of DPTreeSoftmax copies (`docs/PAPERS.md` §1.7 and P1-X9, shared work): one
//! pass over the private rows computes `P(K_k)` and its bins once and scatters
//! `w_{k,s}·[1, u_i, u_i²]` into the leaves of every structure `s`; the exact sums are built once
//! per structure and copied to its `l` copies, and each copy gets its own noise.
//!
//! Noise addressing (`docs/RANDOMNESS.md` §5.2): structure `s`, copy `j`, feature tree
//! `i ∈ 0..r` (`i = r` is `D_0`), node offset `o` within that tree's `3(2N − 2)` sums is
//! element `((s·l + j)·(r + 1) + i)·3(2N − 2) + o` of one keyed stream, released as its
//! budget's [`NodeNoise`] says (exact by default).

use alloc::vec::Vec;

use crate::error::{Error, Result, mul_size};
use crate::grid_release::NoiseMode;
use crate::matrix_view::MatRef;
use crate::sampling::KeyedStream;
use crate::scratch::try_filled;

use super::budget::SoftmaxBudget;
use super::clamp_private;
use super::feature_map::TaylorFeatureMap;
use super::node_noise::NodeNoise;
use super::tree_arena::{TreeArena, bin, check_capacity};

/// One DPTreeSoftmax copy: `r` feature DPTreeDistance structures (`p = 2`, range `Γ`), the
/// weight-sum structure `D_0` (range 1), and the two released scalars.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SoftmaxCopy {
    features: TreeArena,
    ones: TreeArena,
    /// `P_wx = Σ_i D_i.DistanceQuery(0) ≈ Σ_k w_k ‖P(x_k)‖²`.
    p_wx: f64,
    /// `s_w = D_0.DistanceQuery(0) ≈ Σ_k w_k`.
    s_w: f64,
}

impl SoftmaxCopy {
    /// `½(P_wx + s_w ‖u‖² − Σ_i D_i.DistanceQuery(u_i))` for `u = P(y)` (Algorithm 3).
    pub(crate) fn answer(&self, u: &[f64], gamma: f64) -> f64 {
        let u2: f64 = u.iter().map(|v| v * v).sum();
        let value: f64 =
            u.iter().enumerate().map(|(i, &ui)| self.features.distance(i, ui, gamma)).sum();
        0.5 * (self.p_wx + self.s_w * u2 - value)
    }

    pub(crate) fn n_leaves(&self) -> usize {
        self.features.n_leaves()
    }

    pub(crate) fn depth(&self) -> u32 {
        self.features.depth()
    }

    /// The released scalars `(P_wx, s_w)`.
    pub(crate) fn scalars(&self) -> (f64, f64) {
        (self.p_wx, self.s_w)
    }
}

/// One structure to build: its weight bound and per-copy budget (whose
/// [`noise_mode`](SoftmaxBudget::noise_mode) says how its nodes are released).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StructureSpec {
    pub(crate) weight_bound: f64,
    pub(crate) budget: SoftmaxBudget,
}

/// Bytes of `structures × copies` copies with `r` features over `N` leaves (the node arrays;
/// everything else is `O(r + d)`).
pub(crate) fn estimate_bytes(
    structures: u128,
    copies: u128,
    features: u128,
    n_leaves: u128,
) -> u128 {
    let trees = structures.saturating_mul(copies).saturating_mul(features + 1);
    super::tree_arena::arena_bytes(trees, 3, n_leaves)
}

/// Builds `specs.len()` structures of `copies` copies each over the rows of `keys`
/// (clamped into `[0, R]`), with weights `weight(k, s)` (clamped into `[−R_w, R_w]`).
/// `stream = None` builds the exact, non-private sums (tests and audits only).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_structures(
    keys: MatRef<'_, f64>,
    radius: f64,
    weight: &dyn Fn(usize, usize) -> f64,
    specs: &[StructureSpec],
    map: &TaylorFeatureMap,
    gamma: f64,
    copies: usize,
    stream: Option<&KeyedStream>,
) -> Result<Vec<Vec<SoftmaxCopy>>> {
    if copies == 0 {
        return Err(Error::OutOfRange { name: "copies", value: 0.0, allowed: ">= 1" });
    }
    let n = keys.rows();
    let r = map.features();
    let n_leaves = super::tree_arena::leaf_count(n)?;
    let tree_len = TreeArena::len_for(1, 3, n_leaves)?;
    let total = mul_size(
        mul_size(mul_size(specs.len(), copies, "noise elements")?, r + 1, "noise elements")?,
        tree_len,
        "noise elements",
    )?;
    let clamp_keys = stream.is_some();
    // Every public check (the samplers' parameters, the stream's capacity) before the
    // private scatter.
    let mut noise: Vec<([NodeNoise; 3], [NodeNoise; 3])> = Vec::new();
    let mut mode = NoiseMode::UnsafeFloat; // the non-private build checks the wider limit
    if stream.is_some() {
        noise.try_reserve_exact(specs.len()).map_err(|_| Error::AllocationFailed {
            what: "softmax-tree samplers",
            elements: specs.len(),
        })?;
        for (s, spec) in specs.iter().enumerate() {
            // Structures with the same weight bound and budget share their node noise (the
            // value structures of DPCrossAttention): calibrate once.
            let same = s > 0
                && specs[s - 1].weight_bound == spec.weight_bound
                && specs[s - 1].budget == spec.budget;
            let node = match noise.last() {
                Some(&prev) if same => prev,
                _ => {
                    let ones = spec.budget.ones_noise(spec.weight_bound)?;
                    (
                        samplers(|q| spec.budget.feature_noise(q, gamma, spec.weight_bound))?,
                        [ones; 3],
                    )
                }
            };
            noise.push(node);
            if spec.budget.noise_mode == NoiseMode::Exact {
                mode = NoiseMode::Exact;
            }
        }
    }
    check_capacity(mode, 0, total)?;

    // Exact sums, one set per structure.
    let mut exact: Vec<(TreeArena, TreeArena)> = Vec::new();
    exact.try_reserve_exact(specs.len()).map_err(|_| Error::AllocationFailed {
        what: "softmax-tree structures",
        elements: specs.len(),
    })?;
    for s in 0..specs.len() {
        let (mut feat, mut ones) =
            (TreeArena::zeroed(r, 3, n_leaves)?, TreeArena::zeroed(1, 3, n_leaves)?);
        if let Some((fs, os)) = noise.get(s) {
            feat.quantize_for(fs);
            ones.quantize_for(os);
        }
        exact.push((feat, ones));
    }
    let mut x = try_filled(keys.cols(), 0.0, "key row")?;
    let mut u = try_filled(r, 0.0, "feature vector")?;
    let mut bins = try_filled(r, 0usize, "feature bins")?;
    let ones_bin = bin(1.0, 1.0, n_leaves);
    for k in 0..n {
        for (xc, &v) in x.iter_mut().zip(keys.row(k)) {
            *xc = if clamp_keys { clamp_private(v, 0.0, radius) } else { v };
        }
        map.eval_into(&x, &mut u)?;
        if clamp_keys {
            // Rounding can put a computed feature an ulp above the computed Γ; clamping keeps
            // every feature inside the range the sensitivities 2 R_w Γ^q are computed for.
            for ui in u.iter_mut() {
                *ui = ui.clamp(0.0, gamma);
            }
        }
        for (b, &ui) in bins.iter_mut().zip(&u) {
            *b = bin(ui, gamma, n_leaves);
        }
        for (s, spec) in specs.iter().enumerate() {
            let raw = weight(k, s);
            let w = if clamp_keys {
                clamp_private(raw, -spec.weight_bound, spec.weight_bound)
            } else {
                raw
            };
            let (feat, ones) = &mut exact[s];
            for (i, (&j, &ui)) in bins.iter().zip(&u).enumerate() {
                feat.add_point(i, j, w, ui);
            }
            ones.add_point(0, ones_bin, w, 1.0);
        }
    }
    x.fill(0.0);
    u.fill(0.0);
    bins.fill(0);

    let mut out = Vec::new();
    out.try_reserve_exact(specs.len()).map_err(|_| Error::AllocationFailed {
        what: "softmax-tree structures",
        elements: specs.len(),
    })?;
    // Arenas wipe themselves when dropped, so an error below leaves no exact sums behind.
    for (s, (mut feat, mut ones)) in exact.into_iter().enumerate() {
        feat.build_sums();
        ones.build_sums();
        let mut row = Vec::new();
        row.try_reserve_exact(copies).map_err(|_| Error::AllocationFailed {
            what: "softmax-tree copies",
            elements: copies,
        })?;
        let finish = |mut f: TreeArena, mut o: TreeArena, j: usize| -> Result<SoftmaxCopy> {
            if let Some(stream) = stream {
                let base = ((s * copies + j) * (r + 1)) as u128 * tree_len as u128;
                let (fs, os) = &noise[s];
                f.add_noise(fs, stream, base)?;
                o.add_noise(os, stream, base + (r as u128) * tree_len as u128)?;
            }
            let p_wx = (0..r).map(|i| f.distance(i, 0.0, gamma)).sum();
            let s_w = o.distance(0, 0.0, 1.0);
            Ok(SoftmaxCopy { features: f, ones: o, p_wx, s_w })
        };
        for j in 0..copies.saturating_sub(1) {
            row.push(finish(feat.try_clone()?, ones.try_clone()?, j)?);
        }
        // The last copy noises the exact arenas themselves: no un-noised sums survive.
        row.push(finish(feat, ones, copies - 1)?);
        out.push(row);
    }
    Ok(out)
}

fn samplers(f: impl Fn(u32) -> Result<NodeNoise>) -> Result<[NodeNoise; 3]> {
    Ok([f(0)?, f(1)?, f(2)?])
}
