//! DPTree (paper 001 Algorithm 2, `docs/PAPERS.md` §1.4): a summation segment tree over `N` leaves
//! with truncated-Laplace noise on every released node.
//!
//! **Guarantee** (Lemma B.6 with the root dropped, `docs/PAPERS.md` P1-7): the noisy node array is
//! `(ε, δ)`-DP for neighbouring inputs that differ in **one value** (one leaf), given
//! `values ∈ [−b, b]^n` so that the sensitivity is `Δ = 2b` (Lemma B.3). Each value is
//! clamped into `[−b, b]` (NaN → 0) before summation: a per-value map, so neighbours stay
//! neighbours and clamping private data costs no privacy (rejecting it would). One leaf
//! touches `L = log2 N` released nodes, each drawn from `TLap(Δ, ε/L, δ/L)`; basic
//! composition gives `(ε, δ)`. Queries read only the noisy nodes: any number of them, adaptive
//! or not, is post-processing.
//!
//! **Privacy unit:** one token (one value of the private input; replace-one, `n` public).
//! **Release:** the construction ([`DpTree::new`], one stream id of a
//! [`Session`](crate::session::Session), its ledger charged `(ε, δ)`; [`DpTree::new_keyed`] for
//! replay and audit).
//!
//! **Floating point.** [`DpTree::new`] releases every node in [`NoiseMode::Exact`]: a
//! multiple of the node grid `Λ = 2^⌊log₂(2b/256)⌋` with exact truncated discrete Laplace
//! noise calibrated for the sensitivity `2b` plus twice the summation error of the node
//! ([`NodeNoise`] has the proof), so the guarantee holds for the released floats.
//! [`DpTree::new_in`] with [`NoiseMode::UnsafeFloat`] adds the float `TLap` instead (not DP
//! as shipped).

use crate::accounting::cost::Accountant;
use crate::error::{Error, Result};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, NoiseMode};
use crate::privacy_params::PrivacyBudget;
use crate::sampling::TruncatedLaplace;
use crate::session::{Draw, Session};

use super::node_noise::{Layout, NodeNoise};
use super::tree_arena::{TreeArena, check_capacity, leaf_count};
use super::{STREAMS, charge, clamp_private, split_budget};

/// Which side of the query path a read node lies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A left sibling: added to `c_left`.
    Left,
    /// A right sibling: added to `c_right`.
    Right,
}

/// A noisy summation segment tree (Algorithm 2).
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// use dpattn_core::softmax_tree::DpTree;
/// let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
/// // A session: a key from the operating system, fresh stream ids, a ledger for tokens.
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let tree = DpTree::new(&values, 8.0, PrivacyBudget::new(1.0, 1e-6)?, &mut session)?;
/// let (left, right) = tree.query_leaf(5)?; // noisy 1+…+5 and 7+8
/// assert!((left - 15.0).abs() <= 3.0 * tree.bound() && (right - 15.0).abs() <= 3.0 * tree.bound());
/// assert_eq!(session.ledger().charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpTree {
    arena: TreeArena,
    noise: Option<NodeNoise>,
}

impl DpTree {
    /// Builds the tree over `values` (padded with zeros to `N = max(2, next_pow2(n))` leaves)
    /// with values clamped into `[−bound, bound]`, released in [`NoiseMode::Exact`] with
    /// fresh randomness from `session` (node `v` is element `v − 2` of its stream), and
    /// charges the session's ledger `(ε, δ)` = `budget` (module docs: after the build,
    /// before the tree is returned; the ledger must be kept for
    /// [`PRIVACY_UNIT`](super::PRIVACY_UNIT)).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an empty input, a bad `bound`, a node budget `δ/L` outside
    /// `(0, 1/2]`, or more than `2^40` nodes; the session's and the ledger's errors.
    pub fn new<const N: usize>(
        values: &[f64],
        bound: f64,
        budget: PrivacyBudget,
        session: &mut Session<N>,
    ) -> Result<Self> {
        Self::new_in(values, bound, budget, session, NoiseMode::Exact)
    }

    /// [`new`](Self::new) in `mode`: [`NoiseMode::UnsafeFloat`] adds the float
    /// `TLap(2b, ε/L, δ/L)` to each float node sum (the paper's mechanism; **not DP as
    /// shipped**, for reproducing the paper; the ledger counts it as such).
    ///
    /// # Errors
    /// As [`new`](Self::new) (the `2^40`-node limit is the exact mode's).
    pub fn new_in<const N: usize>(
        values: &[f64],
        bound: f64,
        budget: PrivacyBudget,
        session: &mut Session<N>,
        mode: NoiseMode,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(values, bound, budget, r.draw, Some(r.ledger), mode)
    }

    /// [`new_in`](Self::new_in) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// ```
    /// use dpattn_core::{NoiseMode, PrivacyBudget};
    /// use dpattn_core::sampling::NoiseKey;
    /// use dpattn_core::session::Draw;
    /// use dpattn_core::softmax_tree::DpTree;
    /// let key = NoiseKey::generate()?; // kept in a key store to replay the release later
    /// let b = PrivacyBudget::new(1.0, 1e-6)?;
    /// let build = |mode| DpTree::new_keyed(&[1.0, 2.0], 2.0, b, Draw { key: &key, stream: 3 }, None, mode);
    /// assert_eq!(build(NoiseMode::Exact)?, build(NoiseMode::Exact)?); // replayed exactly
    /// let t = build(NoiseMode::UnsafeFloat)?;
    /// assert_eq!(t.node_noise().unwrap().noise_mode(), NoiseMode::UnsafeFloat);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        values: &[f64],
        bound: f64,
        budget: PrivacyBudget,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
        mode: NoiseMode,
    ) -> Result<Self> {
        crate::error::positive_finite("bound", bound)?;
        // Public checks first, so that no error can follow the private scatter.
        let n_leaves = leaf_count(values.len())?;
        let depth = n_leaves.trailing_zeros();
        let (eps, delta) = split_budget(budget, f64::from(depth));
        let noise = match mode {
            NoiseMode::UnsafeFloat => {
                NodeNoise::unsafe_float(TruncatedLaplace::new(2.0 * bound, eps, delta)?)
            }
            NoiseMode::Exact => NodeNoise::exact(bound, depth, Layout::OnePerLeaf, eps, delta)?,
            NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
        };
        check_capacity(mode, 0, TreeArena::len_for(1, 1, n_leaves)?)?;
        let mut tree = Self::build(values, bound, Some(&noise))?;
        tree.arena.add_noise(&[noise], &draw.keyed(0), 0)?;
        tree.noise = Some(noise);
        charge(ledger, budget, mode)?;
        Ok(tree)
    }

    /// **Not differentially private.** The noise-free tree over the unclamped `values` (which
    /// must be finite): the exact sums that [`DpTree::new`] perturbs. For tests, audits and
    /// measuring error; never release it.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an empty input; [`Error::PrivateNonFinite`].
    pub fn non_private_exact(values: &[f64]) -> Result<Self> {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::private_non_finite("values", i));
        }
        Self::build(values, f64::INFINITY, None)
    }

    fn build(values: &[f64], bound: f64, noise: Option<&NodeNoise>) -> Result<Self> {
        let n_leaves = leaf_count(values.len())?;
        let mut arena = TreeArena::zeroed(1, 1, n_leaves)?;
        arena.quantize_for(noise.map(core::slice::from_ref).unwrap_or_default());
        for (j, &v) in values.iter().enumerate() {
            arena.add_point(0, j, clamp_private(v, -bound, bound), 1.0);
        }
        arena.build_sums();
        Ok(Self { arena, noise: None })
    }

    /// `N`.
    pub fn n_leaves(&self) -> usize {
        self.arena.n_leaves()
    }

    /// `L = log2 N`, the number of nodes a query reads.
    pub fn depth(&self) -> u32 {
        self.arena.depth()
    }

    /// The per-node noise bound (0 for the non-private tree): `B·Λ` in exact mode, the TLap
    /// bound `B` in unsafe-float mode ([`NodeNoise::bound`]).
    pub fn bound(&self) -> f64 {
        self.noise.map_or(0.0, |t| t.bound())
    }

    /// The per-node noise variance (0 for the non-private tree): `Λ²·Var(Z)` of the exact
    /// noise, or Fact 3.5 in unsafe-float mode.
    pub fn node_variance(&self) -> f64 {
        self.noise.map_or(0.0, |t| t.variance())
    }

    /// The node noise (its mode, grid `Λ`, bound and variance); `None` for the non-private
    /// tree.
    pub fn node_noise(&self) -> Option<&NodeNoise> {
        self.noise.as_ref()
    }

    /// The released value of heap node `v ∈ 2..2N` (the root, 1, is not released).
    pub fn node(&self, v: usize) -> Option<f64> {
        (2..2 * self.n_leaves()).contains(&v).then(|| self.arena.node(0, v)[0])
    }

    /// `(c_left, c_right)` at leaf `j`: noisy sums of the leaves strictly left and strictly
    /// right of `j` (leaf `j` is in neither; `docs/PAPERS.md` P1-10).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `j ≥ N`.
    pub fn query_leaf(&self, j: usize) -> Result<(f64, f64)> {
        self.check_leaf(j)?;
        let (mut l, mut r) = ([0.0], [0.0]);
        self.arena.query(0, j, &mut l, &mut r);
        Ok((l[0], r[0]))
    }

    /// The heap indices a query at leaf `j` reads, bottom-up, with their sides; writes
    /// [`depth`](Self::depth) entries into `out` and returns that count.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `j ≥ N`; [`Error::BufferTooShort`] for a short `out`.
    pub fn touched_nodes(&self, j: usize, out: &mut [(usize, Side)]) -> Result<usize> {
        self.check_leaf(j)?;
        let l = self.depth() as usize;
        if out.len() < l {
            return Err(Error::BufferTooShort { arg: "out", needed: l, got: out.len() });
        }
        let mut h = self.n_leaves() + j;
        for slot in out.iter_mut().take(l) {
            *slot = (h ^ 1, if h & 1 == 1 { Side::Left } else { Side::Right });
            h >>= 1;
        }
        Ok(l)
    }

    fn check_leaf(&self, j: usize) -> Result<()> {
        if j < self.n_leaves() {
            Ok(())
        } else {
            Err(Error::OutOfRange { name: "leaf", value: j as f64, allowed: "[0, N)" })
        }
    }
}
