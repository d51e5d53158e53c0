//! DPCrossAttention (paper 001 Algorithm 1, Theorem 4.1; `docs/PAPERS.md` §1.9): private keys `K`
//! and values `V` (a system prompt, a RAG memory) are released once as `d + 1` noisy
//! DPTreeSoftmaxAdaptive structures; any number of public query tokens are then answered
//! `Õ_k = Ã_k(q) / D̃(q)` by post-processing.
//!
//! **Guarantee.** Neighbouring inputs differ in **one token**: row `j` of `K` and row `j` of
//! `V` may both change (`n` is public). With [`BudgetSplit::PerVector`] (Remark 4.2, the
//! default) the whole release — hence every answer to every query — is `(ε, δ + δ′)`-DP
//! (basic composition over the `d + 1` structures). [`BudgetSplit::PerEntry`] is Algorithm 1
//! as printed (`ε/2` per structure): it protects **each output coordinate** at
//! `(ε, δ + δ′)`, while the whole output vector costs `((d+1)ε/2, (d+1)(δ+δ′)/2)`; that is
//! at most; [`SoftmaxTreeCrossAttention::achieved_privacy`] reports what is actually spent (about
//! two thirds of that under the paper's accounting, `docs/PAPERS.md` P1-15), and the ledger is
//! charged that. Private `K ∈ [0, R]^{n×d}`, `V ∈ [−R_w, R_w]^{n×d}` are clamped (NaN → 0) by
//! default; [`DomainPolicy::Reject`] is an opt-in for trusted pipelines whose refusal is **not**
//! DP. The guarantee holds for the released floats in [`NoiseMode::Exact`] (the default of
//! `tree.noise_mode`: every node on its grid with exact noise, see
//! [`NodeNoise`](crate::softmax_tree::NodeNoise)); [`NoiseMode::UnsafeFloat`] is the paper's
//! float TLap and is counted as such by the ledger.
//!
//! **Privacy unit:** [`PRIVACY_UNIT`], one token (row `j` of `K` with row `j` of `V`;
//! replace-one, `n` public).
//!
//! **The construction is the release.** [`SoftmaxTreeCrossAttention::new`] draws one ([`STREAMS`])
//! fresh stream id from a [`Session`] (every node of every copy of every structure is an element of
//! that stream, `docs/RANDOMNESS.md` §5.2) and charges the session's ledger
//! [`achieved_privacy`](SoftmaxTreeCrossAttention::achieved_privacy) as an `(ε, δ)`
//! ([`Cost::Approx`]: approximate-DP ledgers only) after the structures are built and before they
//! are returned; queries are post-processing. [`SoftmaxTreeCrossAttention::new_keyed`] takes an
//! explicit [`Draw`] and an optional ledger, for replay, audit, and hosts that manage their own
//! stream ids.
//!
//! **Accuracy** (corrected, P1-11): `|Õ − Attn| ≤ (2ε_s/(1−ε_s))·(D⁻¹A|V|) + additive`, where
//! the additive part ([`estimate_error`]) is large unless `n` is huge (P1-AC12 and T1-K: useful
//! only for `n ≳ 1e9` at `d ≤ 4`). For practical use prefer [`crate::moment_sketch`].
//! `[EXT]` P1-X8 (on by default, off in [`SoftmaxTreeCrossAttentionParams::faithful`]): `D̃` is
//! clamped into its public range `[n, n e^{z_max}]` and outputs into `[−R_w, R_w]`
//! (post-processing).

use alloc::vec::Vec;

use crate::accounting::composition::basic_composition_k;
use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::error::{Error, PrivateDetail, Result};
use crate::grid_release::NoiseMode;
use crate::matrix_view::{MatMut, MatRef};
use crate::privacy_params::PrivacyBudget;
use crate::sampling::KeyedStream;
use crate::session::{Draw, Session};
use crate::softmax_tree::{
    AdaptiveParams, Copies, SoftmaxBudget, SoftmaxCopy, SoftmaxTreeParams, StructureSpec,
    TaylorFeatureMap, build_structures, check_memory, estimate_bytes, leaf_count, median_answer,
    query_features, taylor_max, uniform_noise_std, worst_case_noise_bound,
};

/// The privacy unit: one token of the private context (a key row and its value row).
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::TOKEN;

/// Stream ids one release uses (`draw.stream` only).
pub const STREAMS: u64 = 1;

/// How the total budget is divided between the `d + 1` structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BudgetSplit {
    /// Algorithm 1 as printed: `(ε/2, δ/2, δ′/2)` per structure; per-entry guarantee only.
    PerEntry,
    /// Remark 4.2: `(ε/(d+1), δ/(d+1), δ′/(d+1))` per structure; the whole output is covered.
    #[default]
    PerVector,
}

/// What to do with private rows outside the declared domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DomainPolicy {
    /// Clamp each coordinate (NaN → 0): DP-preserving, the default.
    #[default]
    Clamp,
    /// Refuse with [`Error::DomainViolation`]. **Not DP** (a data-dependent refusal): only for
    /// trusted pipelines, and the error must reach the data holder only. The number of
    /// offending entries is withheld from the error's text; [`Error::private_detail`] returns
    /// it ([`check_domain`] splits it by kind).
    Reject,
}

/// Parameters of [`SoftmaxTreeCrossAttention`]. All public.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxTreeCrossAttentionParams {
    /// Per-structure parameters; `tree.budget` and `tree.delta_prime` are the **total**
    /// `(ε, δ)` and `δ′`, divided per [`BudgetSplit`]. `tree.weight_bound` is `R_w`.
    pub adaptive: AdaptiveParams,
    /// The budget split.
    pub split: BudgetSplit,
    /// `[EXT]` `docs/PAPERS.md` P1-X8: clamp `D̃` and the outputs into their public ranges.
    pub clamp_outputs: bool,
    /// Private out-of-domain rows.
    pub domain_policy: DomainPolicy,
}

impl SoftmaxTreeCrossAttentionParams {
    /// Recommended: [`BudgetSplit::PerVector`], `Copies::NetHoeffding { k: 10 }`, the clamps of
    /// `docs/PAPERS.md` P1-X8.
    pub fn new(tree: SoftmaxTreeParams) -> Self {
        Self {
            adaptive: AdaptiveParams::new(tree),
            split: BudgetSplit::PerVector,
            clamp_outputs: true,
            domain_policy: DomainPolicy::Clamp,
        }
    }

    /// Algorithm 1 as printed: per-entry split, the caller's `l` rule, no clamps.
    pub fn faithful(tree: SoftmaxTreeParams, copies: Copies) -> Self {
        let mut p = Self::new(tree);
        p.adaptive.copies = copies;
        p.split = BudgetSplit::PerEntry;
        p.clamp_outputs = false;
        p
    }

    fn share(&self, dim: usize) -> f64 {
        match self.split {
            BudgetSplit::PerEntry => 2.0,
            BudgetSplit::PerVector => (dim + 1) as f64,
        }
    }
}

/// What a query reports besides the output row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryInfo {
    /// The denominator used (after the P1-X8 clamp when enabled).
    pub denominator: f64,
    /// The raw noisy `D̃` was not positive: without the clamp of `docs/PAPERS.md` P1-X8 the outputs
    /// are then meaningless (possibly infinite); with it, `D̃` was clamped to `n`.
    pub nonpositive_denominator: bool,
}

/// The `d + 1` released structures.
///
/// ```
/// use dpattn_core::{MatRef, PrivacyBudget};
/// use dpattn_core::softmax_tree::{Copies, SoftmaxTreeParams};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::softmax_tree_cross_attention::{SoftmaxTreeCrossAttentionParams, SoftmaxTreeCrossAttention};
/// use dpattn_core::session::Session;
/// let k = [0.1, 0.8, 0.6, 0.3, 0.9, 0.2];
/// let v = [0.5, -0.5, 1.0, 0.0, -1.0, 0.25];
/// let mut params = SoftmaxTreeCrossAttentionParams::new(
///     SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(0.9, 1e-6)?, 1e-6));
/// params.adaptive.copies = Copies::Fixed(3);
/// // A session: a key from the operating system, fresh stream ids, a ledger for tokens.
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let att = SoftmaxTreeCrossAttention::new(MatRef::from_row_major(&k, 3, 2)?, MatRef::from_row_major(&v, 3, 2)?,
///     &params, &mut session)?;
/// let mut out = [0.0; 2];
/// att.query(&[0.5, 0.5], &mut out)?;
/// assert!(out.iter().all(|o| o.abs() <= 1.0)); // P1-X8 clamps; n = 3 is too small to be accurate
/// assert_eq!(session.ledger().charges(), 1); // charged achieved_privacy()
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxTreeCrossAttention {
    params: SoftmaxTreeCrossAttentionParams,
    map: TaylorFeatureMap,
    gamma: f64,
    n: usize,
    /// The budget of one copy of one structure (the same for all; `A_0`'s sensitivities use
    /// weight bound 1, the others `R_w`).
    budget: SoftmaxBudget,
    /// `d + 1` structures of `l` copies; structure 0 computes `D`.
    structures: Vec<Vec<SoftmaxCopy>>,
}

impl SoftmaxTreeCrossAttention {
    /// Releases the structures for private `keys` and `values` (both `n × d`), noised with
    /// fresh randomness from `session`, charging the session's ledger (which must be kept
    /// for [`PRIVACY_UNIT`]) [`achieved_privacy`](Self::achieved_privacy) before returning.
    /// Nothing is returned if the charge fails (the stream id is consumed either way).
    ///
    /// # Errors
    /// Bad parameters or shapes; [`Error::MemoryLimit`]; [`Error::DomainViolation`] only
    /// under [`DomainPolicy::Reject`]; the session's and the ledger's errors
    /// ([`Error::UnitMismatch`] for a ledger of another unit).
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &SoftmaxTreeCrossAttentionParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(keys, values, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// ```
    /// use dpattn_core::{MatRef, PrivacyBudget};
    /// use dpattn_core::sampling::NoiseKey;
    /// use dpattn_core::session::Draw;
    /// use dpattn_core::softmax_tree::{Copies, SoftmaxTreeParams};
    /// use dpattn_core::softmax_tree_cross_attention::{SoftmaxTreeCrossAttentionParams, SoftmaxTreeCrossAttention};
    /// let (k, v) = ([0.1, 0.8, 0.6, 0.3], [0.5, -0.5, 1.0, 0.0]);
    /// let mut params = SoftmaxTreeCrossAttentionParams::new(
    ///     SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(0.9, 1e-6)?, 1e-6));
    /// params.adaptive.copies = Copies::Fixed(1);
    /// let key = NoiseKey::generate()?; // kept in a key store to replay the release later
    /// let replay = || SoftmaxTreeCrossAttention::new_keyed(MatRef::from_row_major(&k, 2, 2)?,
    ///     MatRef::from_row_major(&v, 2, 2)?, &params, Draw { key: &key, stream: 9 }, None);
    /// assert_eq!(replay()?, replay()?); // the same key and stream reproduce the release
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &SoftmaxTreeCrossAttentionParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        let s = Self::build(keys, values, params, Some(&draw.keyed(0)))?;
        if let Some(ledger) = ledger {
            let cost = Cost::Approx(s.achieved_privacy()?);
            ledger.charge(PRIVACY_UNIT, &cost, s.noise_mode())?;
        }
        Ok(s)
    }

    /// **Not differentially private.** The noise-free structures over unclamped finite data
    /// (one copy each): the polynomial-kernel attention with own-bin drops, for tests and
    /// audits only.
    ///
    /// # Errors
    /// As [`SoftmaxTreeCrossAttention::new`], plus [`Error::PrivateNonFinite`].
    pub fn non_private_exact(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &SoftmaxTreeCrossAttentionParams,
    ) -> Result<Self> {
        keys.check_finite("keys")?;
        values.check_finite("values")?;
        let mut p = *params;
        p.adaptive.copies = Copies::Fixed(1);
        Self::build(keys, values, &p, None)
    }

    fn build(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &SoftmaxTreeCrossAttentionParams,
        stream: Option<&KeyedStream>,
    ) -> Result<Self> {
        let a = &params.adaptive;
        a.check()?;
        let (n, d) = (keys.rows(), keys.cols());
        let map = a.tree.feature_map(d)?;
        if values.rows() != n {
            return Err(Error::ShapeMismatch {
                arg: "values",
                axis: "rows",
                expected: n,
                got: values.rows(),
            });
        }
        if values.cols() != d {
            return Err(Error::ShapeMismatch {
                arg: "values",
                axis: "cols",
                expected: d,
                got: values.cols(),
            });
        }
        let (r_bound, w_bound) = (a.tree.radius, a.tree.weight_bound);
        if params.domain_policy == DomainPolicy::Reject {
            let rep = check_domain(keys, values, r_bound, w_bound);
            let outside = rep.keys_outside + rep.values_outside + rep.non_finite;
            if outside > 0 {
                // The count is private: only the detail carries it (check_domain splits it).
                return Err(Error::DomainViolation {
                    condition: "K in [0, R]^{n x d}, V in [-R_w, R_w]^{n x d}, all finite",
                    detail: PrivateDetail::from_count(outside as u64),
                });
            }
        }
        let l = if stream.is_some() { a.copy_count(d)? } else { 1 };
        let r = map.features();
        check_memory("DPCrossAttention", d + 1, l, r, n, a.tree.memory_limit_bytes)?;
        let depth = leaf_count(n)?.trailing_zeros();
        let budget = a.copy_budget(params.share(d), l, r, depth)?;
        if stream.is_some() {
            // The whole-release guarantee depends only on public parameters: refuse a
            // configuration whose composed (ε, δ) is vacuous before touching the data.
            basic_composition_k(budget.achieved()?, ((d + 1) * l) as u64)?;
        }
        let gamma = map.range(r_bound);
        let mut specs = Vec::new();
        specs
            .try_reserve_exact(d + 1)
            .map_err(|_| Error::AllocationFailed { what: "structure specs", elements: d + 1 })?;
        specs.push(StructureSpec { weight_bound: 1.0, budget });
        for _ in 0..d {
            specs.push(StructureSpec { weight_bound: w_bound, budget });
        }
        let weight = |k: usize, s: usize| if s == 0 { 1.0 } else { values.row(k)[s - 1] };
        let structures = build_structures(keys, r_bound, &weight, &specs, &map, gamma, l, stream)?;
        Ok(Self { params: *params, map, gamma, n, budget, structures })
    }

    /// `d`.
    pub fn dim(&self) -> usize {
        self.map.dim()
    }

    /// `l`.
    pub fn copies(&self) -> usize {
        self.structures[0].len()
    }

    /// The feature map.
    pub fn feature_map(&self) -> &TaylorFeatureMap {
        &self.map
    }

    /// The budget hierarchy of one copy of one structure (its node noise:
    /// [`SoftmaxBudget::feature_noise`], [`SoftmaxBudget::ones_noise`]).
    pub fn copy_budget(&self) -> &SoftmaxBudget {
        &self.budget
    }

    /// How the nodes were released.
    pub fn noise_mode(&self) -> NoiseMode {
        self.budget.noise_mode
    }

    /// What the whole release achieves: `(d + 1)` structures × `l` copies, basic composition
    /// of each copy's [`SoftmaxBudget::achieved`].
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved_privacy(&self) -> Result<PrivacyBudget> {
        let copies = (self.structures.len() * self.copies()) as u64;
        basic_composition_k(self.budget.achieved()?, copies)
    }

    /// What one output coordinate achieves (structures `A_0` and `A_k`).
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn per_entry_privacy(&self) -> Result<PrivacyBudget> {
        basic_composition_k(self.budget.achieved()?, 2 * self.copies() as u64)
    }

    /// Scratch for [`query_into`](Self::query_into): `r + d + l`.
    pub fn query_scratch_len(&self) -> usize {
        self.map.features() + self.map.dim() + self.copies()
    }

    /// Answers one public query token `q ∈ [0, R]^d` into `out` (length `d`).
    ///
    /// # Errors
    /// Shapes, scratch, bad queries.
    pub fn query_into(&self, q: &[f64], out: &mut [f64], scratch: &mut [f64]) -> Result<QueryInfo> {
        let d = self.map.dim();
        if out.len() != d {
            return Err(Error::ShapeMismatch {
                arg: "out",
                axis: "len",
                expected: d,
                got: out.len(),
            });
        }
        let a = &self.params.adaptive;
        let (u, answers) =
            query_features(&a.tree, &self.map, a.snap_to_net, q, scratch, self.copies())?;
        let raw = median_answer(&self.structures[0], u, self.gamma, answers);
        let nonpositive = raw.is_nan() || raw <= 0.0;
        let den = if self.params.clamp_outputs {
            let n = self.n as f64;
            let hi = n * libm::exp(self.map.z_max(self.params.adaptive.tree.radius));
            if nonpositive { n } else { raw.clamp(n, hi) }
        } else {
            raw
        };
        let rw = self.params.adaptive.tree.weight_bound;
        for (k, o) in out.iter_mut().enumerate() {
            let v = median_answer(&self.structures[k + 1], u, self.gamma, answers) / den;
            *o = if self.params.clamp_outputs { v.clamp(-rw, rw) } else { v };
        }
        Ok(QueryInfo { denominator: den, nonpositive_denominator: nonpositive })
    }

    /// [`query_into`](Self::query_into) with allocated scratch.
    ///
    /// # Errors
    /// As [`query_into`](Self::query_into).
    pub fn query(&self, q: &[f64], out: &mut [f64]) -> Result<QueryInfo> {
        let mut scratch =
            crate::scratch::try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        self.query_into(q, out, &mut scratch)
    }

    /// Answers every row of `queries` (`m × d`) into `out` (`m × d`).
    ///
    /// # Errors
    /// As [`query_into`](Self::query_into), for the first failing row.
    pub fn query_rows(
        &self,
        queries: MatRef<'_, f64>,
        mut out: MatMut<'_, f64>,
        scratch: &mut [f64],
    ) -> Result<()> {
        if out.rows() != queries.rows() {
            return Err(Error::ShapeMismatch {
                arg: "out",
                axis: "rows",
                expected: queries.rows(),
                got: out.rows(),
            });
        }
        for i in 0..queries.rows() {
            self.query_into(queries.row(i), out.row_mut(i), scratch)?;
        }
        Ok(())
    }
}

/// A non-private domain report for the data holder (never publish it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DomainReport {
    /// Finite key entries outside `[0, R]`.
    pub keys_outside: usize,
    /// Finite value entries outside `[−R_w, R_w]`.
    pub values_outside: usize,
    /// NaN or infinite entries in either.
    pub non_finite: usize,
}

/// Counts the entries the DP constructors would clamp. **Not DP**: for the data holder only.
pub fn check_domain(
    keys: MatRef<'_, f64>,
    values: MatRef<'_, f64>,
    radius: f64,
    weight_bound: f64,
) -> DomainReport {
    let mut rep = DomainReport::default();
    for i in 0..keys.rows() {
        for &v in keys.row(i) {
            if !v.is_finite() {
                rep.non_finite += 1;
            } else if !(0.0..=radius).contains(&v) {
                rep.keys_outside += 1;
            }
        }
    }
    for i in 0..values.rows() {
        for &v in values.row(i) {
            if !v.is_finite() {
                rep.non_finite += 1;
            } else if !(-weight_bound..=weight_bound).contains(&v) {
                rep.values_outside += 1;
            }
        }
    }
    rep
}

/// The memory a [`SoftmaxTreeCrossAttention`] over `n` keys of dimension `d` would need (bytes,
/// saturating), computed before building.
///
/// # Errors
/// Invalid parameters.
pub fn estimate_cross_attention_bytes(
    n: usize,
    dim: usize,
    params: &SoftmaxTreeCrossAttentionParams,
) -> Result<u64> {
    params.adaptive.check()?;
    let map = params.adaptive.tree.feature_map(dim)?;
    let l = params.adaptive.copy_count(dim)?;
    let b = estimate_bytes(
        (dim + 1) as u128,
        l as u128,
        map.features() as u128,
        leaf_count(n)? as u128,
    );
    Ok(u64::try_from(b).unwrap_or(u64::MAX))
}

/// The theorem-level error estimate of `docs/PAPERS.md` P1-AC12 (values: T1-K).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorEstimate {
    /// `l`.
    pub copies: usize,
    /// The uniform per-copy noise std of an `A_k` structure (weight bound `R_w`).
    pub sigma_weighted: f64,
    /// The uniform per-copy noise std of `A_0` (weight bound 1).
    pub sigma_normaliser: f64,
    /// `10(σ_AV + R_w σ_D)/n`: the additive attention error at Chebyshev's `k = 10`.
    pub additive: f64,
    /// `2ε_s/(1 − ε_s)`, relative to the softmax average of `|V|` (`docs/PAPERS.md` P1-11).
    pub relative: f64,
    /// `[EXT]` `docs/PAPERS.md` P1-X5: the deterministic per-copy bound on the `A_k` answer noise,
    /// valid for every query at once.
    pub worst_case_weighted: f64,
    /// The mode whose node noise the estimate is for (`tree.noise_mode`).
    pub noise_mode: NoiseMode,
}

/// The additive error estimate for `n` keys of dimension `d` (the `σ_max` of `docs/PAPERS.md` §1.7
/// with the node noise variances of `tree.noise_mode`). Print it, and warn when `additive` exceeds
/// `R_w`.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::softmax_tree::{Copies, SoftmaxTreeParams};
/// use dpattn_core::softmax_tree_cross_attention::{SoftmaxTreeCrossAttentionParams, estimate_error};
/// let mut p = SoftmaxTreeCrossAttentionParams::new(SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?, 1e-6));
/// p.adaptive.copies = Copies::Fixed(1);
/// let e = estimate_error(1_000_000, 4, &p)?;
/// assert!((e.additive / 940.0 - 1.0).abs() < 0.01); // docs/PAPERS.md T1-K: useless at n = 1e6
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Invalid parameters.
pub fn estimate_error(
    n: usize,
    dim: usize,
    params: &SoftmaxTreeCrossAttentionParams,
) -> Result<ErrorEstimate> {
    let a = &params.adaptive;
    a.check()?;
    let map = a.tree.feature_map(dim)?;
    let l = a.copy_count(dim)?;
    let depth = leaf_count(n)?.trailing_zeros();
    let budget = a.copy_budget(params.share(dim), l, map.features(), depth)?;
    let gamma = map.range(a.tree.radius);
    let ts = taylor_max(&map, a.tree.radius);
    let rw = a.tree.weight_bound;
    let sigma_weighted = uniform_noise_std(&budget, depth, gamma, ts, rw)?;
    let sigma_normaliser = uniform_noise_std(&budget, depth, gamma, ts, 1.0)?;
    let eps_s = a.tree.eps_s;
    Ok(ErrorEstimate {
        copies: l,
        sigma_weighted,
        sigma_normaliser,
        additive: 10.0 * (sigma_weighted + rw * sigma_normaliser) / n as f64,
        relative: 2.0 * eps_s / (1.0 - eps_s),
        worst_case_weighted: worst_case_noise_bound(&budget, depth, gamma, ts, rw)?,
        noise_mode: budget.noise_mode,
    })
}
