//! DPTreeSoftmaxAdaptive (paper 001 Algorithm 7, `docs/PAPERS.md` §1.8): the median of `l`
//! independent DPTreeSoftmax copies, each at `(ε/l, δ/l, δ′/l)`.
//!
//! **Guarantee.** `(ε, δ + δ′)`-DP for neighbouring datasets that differ in one row
//! `(x_k, w_k)` (basic composition over the `l` copies; [`DpTreeSoftmaxAdaptive::achieved_privacy`]
//! reports the actual spend). "Robust to adaptive queries" is an **accuracy** property (a
//! bound that holds for every query at once with probability `1 − p_f`), not a privacy one:
//! privacy holds for any queries because all noise is drawn at build time.
//!
//! **Privacy unit:** one token (one row `(x_k, w_k)`; replace-one, `n` public).
//! **Release:** the construction ([`DpTreeSoftmaxAdaptive::new`]: one stream id of a
//! [`Session`](crate::session::Session) for all `l` copies, its ledger charged
//! [`achieved_privacy`](DpTreeSoftmaxAdaptive::achieved_privacy);
//! [`DpTreeSoftmaxAdaptive::new_keyed`] for replay and audit).
//!
//! Corrections (`docs/PAPERS.md` §1.10): `l` uses the net exponent `d`, not `r`
//! ([`Copies::NetHoeffding`], P1-14), and the proof covers the output only if queries are
//! snapped to the net (`snap_to_net`, P1-13; post-processing of a public value, off in
//! faithful mode). The median is returned, never the mean (Algorithm 7 line 17); `l` is
//! always odd (P1-16).

use alloc::vec::Vec;

use crate::accounting::cost::Accountant;
use crate::error::{Error, Result};
use crate::matrix_view::MatRef;
use crate::privacy_params::PrivacyBudget;
use crate::session::{Draw, Session};

use super::budget::{Copies, SoftmaxBudget, copy_count, softmax_budget};
use super::build::{SoftmaxCopy, StructureSpec, build_structures};
use super::feature_map::TaylorFeatureMap;
use super::softmax::{SoftmaxTreeParams, check_memory, copy_noise_variance, query_features};
use super::tree_arena::leaf_count;
use super::{STREAMS, charge};

/// Parameters of the adaptive structures (and of DPCrossAttention).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveParams {
    /// The per-structure parameters; `budget` and `delta_prime` are the structure's total.
    pub tree: SoftmaxTreeParams,
    /// How many copies.
    pub copies: Copies,
    /// The failure probability `p_f` of the uniform accuracy statement (`(0, 0.01]` strict).
    pub p_fail: f64,
    /// `[FIX]` `docs/PAPERS.md` P1-13: snap each query coordinate to the `2ε₀` net before
    /// answering.
    pub snap_to_net: bool,
}

impl AdaptiveParams {
    /// Defaults on top of `tree`: `Copies::NetHoeffding { k: 10 }`, `p_f = 0.01` (as in the
    /// tables `docs/PAPERS.md` T1-I and T1-K), no snapping.
    pub fn new(tree: SoftmaxTreeParams) -> Self {
        Self { tree, copies: Copies::NetHoeffding { k: 10.0 }, p_fail: 0.01, snap_to_net: false }
    }

    pub(crate) fn check(&self) -> Result<()> {
        self.tree.check()?;
        let ok = if self.tree.strict { self.p_fail <= 0.01 } else { self.p_fail < 1.0 };
        if !(self.p_fail > 0.0 && ok) {
            let allowed = if self.tree.strict { "(0, 0.01]" } else { "(0, 1)" };
            return Err(Error::OutOfRange { name: "p_fail", value: self.p_fail, allowed });
        }
        Ok(())
    }

    /// `l` for keys of dimension `d` (odd).
    ///
    /// # Errors
    /// Invalid parameters.
    pub fn copy_count(&self, dim: usize) -> Result<usize> {
        let map = self.tree.feature_map(dim)?;
        let l = copy_count(
            self.copies,
            dim,
            map.features(),
            self.tree.radius,
            self.tree.eps_s,
            self.p_fail,
        )?;
        usize::try_from(l).map_err(|_| Error::SizeOverflow { what: "copy count l" })
    }

    /// The budget of one copy: the structure's `(ε, δ, δ′)` divided by `l` (rounded down).
    pub(crate) fn copy_budget(
        &self,
        share: f64,
        copies: usize,
        r: usize,
        depth: u32,
    ) -> Result<SoftmaxBudget> {
        use crate::directed_rounding::div_down;
        let t = &self.tree;
        let k = share * copies as f64;
        let copy = PrivacyBudget::new(
            div_down(t.budget.epsilon().get(), k),
            div_down(t.budget.delta().get(), k),
        )?;
        let mut b = softmax_budget(copy, div_down(t.delta_prime, k), t.c, r, depth, t.accounting)?;
        b.noise_mode = t.noise_mode;
        Ok(b)
    }
}

/// The answer of `l` copies at `y`: the median, with `answers` as scratch.
pub(crate) fn median_answer(
    copies: &[SoftmaxCopy],
    u: &[f64],
    gamma: f64,
    answers: &mut [f64],
) -> f64 {
    for (a, c) in answers.iter_mut().zip(copies) {
        *a = c.answer(u, gamma);
    }
    let l = copies.len();
    let (_, m, _) = answers[..l].select_nth_unstable_by(l / 2, f64::total_cmp);
    *m
}

/// DPTreeSoftmaxAdaptive (Algorithm 7).
///
/// ```
/// use dpattn_core::{MatRef, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// use dpattn_core::softmax_tree::{AdaptiveParams, Copies, DpTreeSoftmaxAdaptive, SoftmaxTreeParams};
/// let keys = MatRef::from_row_major(&[0.2, 0.9, 0.5, 0.1], 2, 2)?;
/// let mut params = AdaptiveParams::new(SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(0.5, 1e-6)?, 1e-6));
/// params.copies = Copies::Fixed(5);
/// let mut session = Session::new(Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-5)?))?;
/// let s = DpTreeSoftmaxAdaptive::new(keys, &[1.0, 1.0], &params, &mut session)?;
/// assert_eq!(s.copies(), 5);
/// assert_eq!(session.ledger().charges(), 1);
/// assert!(s.query(&[0.5, 0.5])?.is_finite());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpTreeSoftmaxAdaptive {
    params: AdaptiveParams,
    map: TaylorFeatureMap,
    gamma: f64,
    budget: SoftmaxBudget,
    copies: Vec<SoftmaxCopy>,
}

impl DpTreeSoftmaxAdaptive {
    /// Builds `l` copies over the rows of `keys` with weights `w`, noised with fresh
    /// randomness from `session` (copy `j` of structure 0 in the addressing of
    /// `docs/RANDOMNESS.md` §5.2, from element 0 of its stream), and charges the session's
    /// ledger [`achieved_privacy`](Self::achieved_privacy) (after the build, before the
    /// structure is returned).
    ///
    /// # Errors
    /// Bad parameters or shapes; [`Error::MemoryLimit`]; the session's and the ledger's
    /// errors.
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        weights: &[f64],
        params: &AdaptiveParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(keys, weights, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        keys: MatRef<'_, f64>,
        weights: &[f64],
        params: &AdaptiveParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        params.check()?;
        let map = params.tree.feature_map(keys.cols())?;
        if weights.len() != keys.rows() {
            return Err(Error::ShapeMismatch {
                arg: "weights",
                axis: "len",
                expected: keys.rows(),
                got: weights.len(),
            });
        }
        let l = params.copy_count(keys.cols())?;
        let r = map.features();
        check_memory(
            "DPTreeSoftmaxAdaptive",
            1,
            l,
            r,
            keys.rows(),
            params.tree.memory_limit_bytes,
        )?;
        let depth = leaf_count(keys.rows())?.trailing_zeros();
        let budget = params.copy_budget(1.0, l, r, depth)?;
        // A vacuous composed guarantee is refused before the data is read.
        crate::accounting::composition::basic_composition_k(budget.achieved()?, l as u64)?;
        let gamma = map.range(params.tree.radius);
        let spec = StructureSpec { weight_bound: params.tree.weight_bound, budget };
        let mut built = build_structures(
            keys,
            params.tree.radius,
            &|k, _| weights[k],
            &[spec],
            &map,
            gamma,
            l,
            Some(&draw.keyed(0)),
        )?;
        let copies = built.pop().ok_or(Error::Unsupported { what: "empty build" })?;
        let s = Self { params: *params, map, gamma, budget, copies };
        charge(ledger, s.achieved_privacy()?, s.noise_mode())?;
        Ok(s)
    }

    /// `l`.
    pub fn copies(&self) -> usize {
        self.copies.len()
    }

    /// The feature map.
    pub fn feature_map(&self) -> &TaylorFeatureMap {
        &self.map
    }

    /// `Γ`, the feature range.
    pub fn gamma(&self) -> f64 {
        self.gamma
    }

    /// The budget hierarchy of one copy.
    pub fn copy_budget(&self) -> &SoftmaxBudget {
        &self.budget
    }

    /// How the nodes were released.
    pub fn noise_mode(&self) -> crate::grid_release::NoiseMode {
        self.budget.noise_mode
    }

    /// What the structure actually achieves: `l` copies under basic composition.
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved_privacy(&self) -> Result<PrivacyBudget> {
        crate::accounting::composition::basic_composition_k(
            self.budget.achieved()?,
            self.copies.len() as u64,
        )
    }

    /// Scratch for [`query_into`](Self::query_into): `r + d + l`.
    pub fn query_scratch_len(&self) -> usize {
        self.map.features() + self.map.dim() + self.copies.len()
    }

    /// The median answer at a public `y` (snapped to the net if configured).
    ///
    /// # Errors
    /// [`Error::ScratchTooSmall`]; bad queries.
    pub fn query_into(&self, y: &[f64], scratch: &mut [f64]) -> Result<f64> {
        let (u, answers) = self.features(y, scratch)?;
        Ok(median_answer(&self.copies, u, self.gamma, answers))
    }

    /// [`query_into`](Self::query_into) with allocated scratch.
    ///
    /// # Errors
    /// As [`query_into`](Self::query_into).
    pub fn query(&self, y: &[f64]) -> Result<f64> {
        let mut scratch =
            crate::scratch::try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        self.query_into(y, &mut scratch)
    }

    /// The exact noise variance of one copy's answer at `y` (`docs/PAPERS.md` §1.7, with the node
    /// variances of the release's mode).
    ///
    /// # Errors
    /// Bad queries.
    pub fn copy_noise_variance(&self, y: &[f64]) -> Result<f64> {
        let mut scratch =
            crate::scratch::try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        let (u, _) = self.features(y, &mut scratch)?;
        copy_noise_variance(
            &self.budget,
            u,
            self.gamma,
            self.copies[0].n_leaves(),
            self.params.tree.weight_bound,
        )
    }

    fn features<'s>(
        &self,
        y: &[f64],
        scratch: &'s mut [f64],
    ) -> Result<(&'s [f64], &'s mut [f64])> {
        let p = &self.params;
        query_features(&p.tree, &self.map, p.snap_to_net, y, scratch, self.copies.len())
    }
}
