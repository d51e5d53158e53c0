//! DPTreeSoftmax (paper 001 Algorithm 3, `docs/PAPERS.md` §1.7): a noisy structure answering the
//! weighted softmax sum `Z(y) = Σ_i w_i exp(τ⟨x_i, y⟩)` for public queries `y`.
//!
//! **Guarantee** (Theorem G.7 with the corrections P1-11 and P1-15 of `docs/PAPERS.md`): the
//! released arrays are `(ε, δ + δ′)`-DP for neighbouring datasets that differ in **one row**
//! `(x_k, w_k)`, for `X ∈ [0, R]^{n×d}`, `w ∈ [−R_w, R_w]^n` (private rows are clamped into that
//! domain, NaN → 0; clamping is a per-row map so neighbours stay neighbours). `n` is public. The
//! accountant ([`DpTreeSoftmax::achieved_privacy`]) reports what is actually spent — about
//! `2ε/3` under the paper's split (P1-15). Queries are post-processing: any number, adaptive
//! or not.
//!
//! **Privacy unit:** one token (one row `(x_k, w_k)`: a key row and its weight; replace-one,
//! `n` public). **Release:** the construction ([`DpTreeSoftmax::new`]: one stream id of a
//! [`Session`](crate::session::Session), its ledger charged
//! [`achieved_privacy`](DpTreeSoftmax::achieved_privacy); [`DpTreeSoftmax::new_keyed`] for
//! replay and audit).
//!
//! **Accuracy**: `|answer − wᵀexp(τXy)| ≤ ε_s Σ_i |w_i| e^{τ⟨x_i,y⟩}` (the corrected P1-11
//! form, not the paper's `ε_s |wᵀexp|`) `+` own-bin bias `+` noise whose exact variance is
//! [`DpTreeSoftmax::noise_variance`] (`docs/PAPERS.md` §1.7).
//!
//! **Floating point.** In [`NoiseMode::Exact`] (the default) every node is released on its
//! grid with exact truncated discrete Laplace noise ([`NodeNoise`](super::NodeNoise) has the
//! proof: the node sensitivities `2 R_w Γ^q` become bounds on the computed contributions,
//! the summation error of a node enters twice, and a row changing bins costs each half-shifted
//! node at most half its budget, as in the continuous argument), so the guarantee holds for
//! the released floats and the accounting is unchanged. [`NoiseMode::UnsafeFloat`] is the
//! paper's float TLap (not DP as shipped).

use alloc::vec::Vec;

use crate::accounting::cost::Accountant;
use crate::error::{Error, Result, open_unit};
use crate::grid_release::NoiseMode;
use crate::matrix_view::MatRef;
use crate::privacy_params::PrivacyBudget;
use crate::sampling::KeyedStream;
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

use super::budget::{Accounting, SoftmaxBudget, net_resolution, snap_to_net, softmax_budget};
use super::build::{SoftmaxCopy, StructureSpec, build_structures, estimate_bytes};
use super::feature_map::{TaylorFeatureMap, min_degree, taylor_exp};
use super::tree_arena::{bin, leaf_count};
use super::{STREAMS, charge};

/// The kernel temperature `τ` of `exp(τ⟨x, y⟩)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Temperature {
    /// `τ = 1/d`, the paper's Definition 1.1 (`docs/PAPERS.md` P1-1: standard attention uses
    /// `1/√d`).
    #[default]
    OneOverDim,
    /// `[EXT]` `docs/PAPERS.md` P1-X6: any `τ > 0` (e.g. `1/√d`); `s` and `Γ` follow
    /// `z_max = τ d R²`.
    Custom(f64),
}

/// What a query does with a public coordinate outside `[0, R]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryPolicy {
    /// Refuse with an error (queries are public, so refusing costs no privacy).
    #[default]
    Reject,
    /// Clamp into `[0, R]` (NaN is still rejected). The answer is then for the clamped query.
    Clamp,
}

/// Parameters shared by the softmax-tree structures. All public.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxTreeParams {
    /// `R`: keys and queries lie in `[0, R]^d` (`R ≥ 1` when strict).
    pub radius: f64,
    /// `R_w`: weights lie in `[−R_w, R_w]` (`R_w ≥ 1` when strict).
    pub weight_bound: f64,
    /// `(ε, δ)` of the structure.
    pub budget: PrivacyBudget,
    /// `δ′`, the advanced-composition slack: the structure is `(ε, δ + δ′)`-DP.
    pub delta_prime: f64,
    /// The composition constant `c` (`(0, 0.1)` strict; up to 0.7 relaxed; unused by
    /// [`Accounting::Tight`]).
    pub c: f64,
    /// `ε_s`, the relative accuracy of the polynomial kernel (`(0, 0.1)` strict); it fixes
    /// the degree `s` by the exact Poisson criterion of `docs/PAPERS.md` §1.6.
    pub eps_s: f64,
    /// The kernel temperature.
    pub temperature: Temperature,
    /// How each copy's budget is divided.
    pub accounting: Accounting,
    /// Enforce the paper's parameter ranges (`ε ∈ (0, 1]`, `δ, δ′ ∈ (0, 1)`, `c, ε_s ∈ (0, 0.1)`,
    /// `R, R_w ≥ 1`). When false: `ε > 0`, `c ∈ (0, 0.7]`, `ε_s ∈ (0, 1)`, `R, R_w > 0`.
    pub strict: bool,
    /// Out-of-domain public queries.
    pub query_policy: QueryPolicy,
    /// Refuse to build when the memory estimate exceeds this many bytes.
    pub memory_limit_bytes: u64,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

impl SoftmaxTreeParams {
    /// The paper's setting: `c = 0.09`, `ε_s = 0.01`, `τ = 1/d`, the paper's accounting,
    /// strict ranges, queries rejected outside the domain, a 1 GiB memory limit; nodes
    /// released in [`NoiseMode::Exact`].
    pub fn paper(radius: f64, weight_bound: f64, budget: PrivacyBudget, delta_prime: f64) -> Self {
        Self {
            radius,
            weight_bound,
            budget,
            delta_prime,
            c: 0.09,
            eps_s: 0.01,
            temperature: Temperature::OneOverDim,
            accounting: Accounting::Paper,
            strict: true,
            query_policy: QueryPolicy::Reject,
            memory_limit_bytes: 1 << 30,
            noise_mode: NoiseMode::Exact,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        let strict = self.strict;
        let eps = self.budget.epsilon().get();
        if strict && eps > 1.0 {
            return Err(Error::OutOfRange { name: "epsilon", value: eps, allowed: "(0, 1]" });
        }
        open_unit("delta", self.budget.delta().get())?;
        open_unit("delta_prime", self.delta_prime)?;
        let c_ok =
            if strict { self.c > 0.0 && self.c < 0.1 } else { self.c > 0.0 && self.c <= 0.7 };
        if self.accounting == Accounting::Paper && !c_ok {
            let allowed = if strict { "(0, 0.1)" } else { "(0, 0.7]" };
            return Err(Error::OutOfRange { name: "c", value: self.c, allowed });
        }
        let s_hi = if strict { 0.1 } else { 1.0 };
        if !(self.eps_s > 0.0 && self.eps_s < s_hi) {
            let allowed = if strict { "(0, 0.1)" } else { "(0, 1)" };
            return Err(Error::OutOfRange { name: "eps_s", value: self.eps_s, allowed });
        }
        for (name, v) in [("radius", self.radius), ("weight_bound", self.weight_bound)] {
            let ok = v.is_finite() && if strict { v >= 1.0 } else { v > 0.0 };
            if !ok {
                let allowed = if strict { "[1, inf)" } else { "(0, inf)" };
                return Err(Error::OutOfRange { name, value: v, allowed });
            }
        }
        Ok(())
    }

    /// `τ` for `d` inputs.
    pub fn tau(&self, dim: usize) -> Result<f64> {
        match self.temperature {
            Temperature::OneOverDim => Ok(1.0 / dim as f64),
            Temperature::Custom(t) if t.is_finite() && t > 0.0 => Ok(t),
            Temperature::Custom(t) => {
                Err(Error::OutOfRange { name: "temperature", value: t, allowed: "(0, inf)" })
            }
        }
    }

    /// The feature map for `d`-dimensional keys: `s = min_degree(τ d R², ε_s)`.
    ///
    /// # Errors
    /// Invalid parameters; [`Error::Infeasible`] when no degree reaches `ε_s`.
    pub fn feature_map(&self, dim: usize) -> Result<TaylorFeatureMap> {
        self.check()?;
        if dim == 0 {
            return Err(Error::OutOfRange { name: "dim", value: 0.0, allowed: ">= 1" });
        }
        let tau = self.tau(dim)?;
        let z_max = tau * dim as f64 * self.radius * self.radius;
        TaylorFeatureMap::new(dim, min_degree(z_max, self.eps_s)?, tau)
    }

    /// Validates (or clamps, per [`QueryPolicy`]) a public query into `out`.
    pub(crate) fn query_point(&self, y: &[f64], out: &mut [f64]) -> Result<()> {
        if y.len() != out.len() {
            return Err(Error::ShapeMismatch {
                arg: "y",
                axis: "len",
                expected: out.len(),
                got: y.len(),
            });
        }
        for (i, (o, &v)) in out.iter_mut().zip(y).enumerate() {
            if v.is_nan() {
                return Err(Error::NonFinite { arg: "y", index: i });
            }
            *o = match self.query_policy {
                QueryPolicy::Clamp => v.clamp(0.0, self.radius),
                QueryPolicy::Reject if (0.0..=self.radius).contains(&v) => v,
                QueryPolicy::Reject if v.is_infinite() => {
                    return Err(Error::NonFinite { arg: "y", index: i });
                }
                QueryPolicy::Reject => {
                    return Err(Error::OutOfRange {
                        name: "y (public query)",
                        value: v,
                        allowed: "[0, R]",
                    });
                }
            };
        }
        Ok(())
    }
}

/// Checks a build against the memory limit before anything is allocated.
pub(crate) fn check_memory(
    what: &'static str,
    structures: usize,
    copies: usize,
    features: usize,
    n: usize,
    limit: u64,
) -> Result<()> {
    let n_leaves = leaf_count(n)?;
    let bytes =
        estimate_bytes(structures as u128, copies as u128, features as u128, n_leaves as u128);
    if bytes > u128::from(limit) {
        return Err(Error::MemoryLimit {
            what,
            needed_bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            limit_bytes: limit,
        });
    }
    Ok(())
}

/// DPTreeSoftmax (Algorithm 3).
///
/// ```
/// use dpattn_core::{MatRef, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// use dpattn_core::softmax_tree::{DpTreeSoftmax, SoftmaxTreeParams};
/// let keys = [0.2, 0.9, 0.5, 0.1, 1.0, 0.4];
/// let params = SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(0.5, 1e-6)?, 1e-6);
/// let keys = MatRef::from_row_major(&keys, 3, 2)?;
/// let exact = DpTreeSoftmax::non_private_exact(keys, &[1.0, -1.0, 0.5], &params)?;
/// let want: f64 = [(0.2, 0.9, 1.0), (0.5, 0.1, -1.0), (1.0, 0.4, 0.5)].iter()
///     .map(|(a, b, w)| w * f64::exp((a * 0.3 + b * 0.7) / 2.0)).sum();
/// assert!((exact.query(&[0.3, 0.7])? - want).abs() < 0.01 * 3.0 * 1.5);
/// let mut session = Session::new(Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-5)?))?;
/// let noisy = DpTreeSoftmax::new(keys, &[1.0, -1.0, 0.5], &params, &mut session)?;
/// assert!(noisy.noise_variance(&[0.3, 0.7])? > 1e6); // useless at n = 3 (see docs)
/// assert_eq!(session.ledger().charges(), 1); // charged achieved_privacy() ≤ (ε, δ + δ′)
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpTreeSoftmax {
    params: SoftmaxTreeParams,
    map: TaylorFeatureMap,
    gamma: f64,
    budget: SoftmaxBudget,
    copy: SoftmaxCopy,
}

impl DpTreeSoftmax {
    /// Builds the structure over the rows of `keys` (`n × d`) with weights `w`, noised with
    /// fresh randomness from `session` (from element 0 of its stream), and charges the
    /// session's ledger [`achieved_privacy`](Self::achieved_privacy) (after the build, before
    /// the structure is returned).
    ///
    /// # Errors
    /// Bad parameters or shapes; [`Error::MemoryLimit`] when the estimate exceeds the limit;
    /// the session's and the ledger's errors.
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        weights: &[f64],
        params: &SoftmaxTreeParams,
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
        params: &SoftmaxTreeParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        let s = Self::build(keys, weights, params, Some(&draw.keyed(0)))?;
        charge(ledger, s.achieved_privacy()?, s.noise_mode())?;
        Ok(s)
    }

    /// **Not differentially private.** The noise-free structure over unclamped finite data:
    /// what [`DpTreeSoftmax::new`] perturbs (tests, audits, bias measurement only).
    ///
    /// # Errors
    /// As [`DpTreeSoftmax::new`], plus [`Error::PrivateNonFinite`].
    pub fn non_private_exact(
        keys: MatRef<'_, f64>,
        weights: &[f64],
        params: &SoftmaxTreeParams,
    ) -> Result<Self> {
        keys.check_finite("keys")?;
        if let Some(i) = weights.iter().position(|v| !v.is_finite()) {
            return Err(Error::private_non_finite("weights", i));
        }
        Self::build(keys, weights, params, None)
    }

    fn build(
        keys: MatRef<'_, f64>,
        weights: &[f64],
        params: &SoftmaxTreeParams,
        stream: Option<&KeyedStream>,
    ) -> Result<Self> {
        let map = params.feature_map(keys.cols())?;
        if weights.len() != keys.rows() {
            return Err(Error::ShapeMismatch {
                arg: "weights",
                axis: "len",
                expected: keys.rows(),
                got: weights.len(),
            });
        }
        let r = map.features();
        check_memory("DPTreeSoftmax", 1, 1, r, keys.rows(), params.memory_limit_bytes)?;
        let depth = leaf_count(keys.rows())?.trailing_zeros();
        let mut budget = softmax_budget(
            params.budget,
            params.delta_prime,
            params.c,
            r,
            depth,
            params.accounting,
        )?;
        budget.noise_mode = params.noise_mode;
        budget.achieved()?; // a vacuous composed guarantee is refused before the data is read
        let gamma = map.range(params.radius);
        let spec = StructureSpec { weight_bound: params.weight_bound, budget };
        let mut built = build_structures(
            keys,
            params.radius,
            &|k, _| weights[k],
            &[spec],
            &map,
            gamma,
            1,
            stream,
        )?;
        let copy = built
            .pop()
            .and_then(|mut v| v.pop())
            .ok_or(Error::Unsupported { what: "empty build" })?;
        Ok(Self { params: *params, map, gamma, budget, copy })
    }

    /// The feature map (`d`, `s`, `τ`, `r`).
    pub fn feature_map(&self) -> &TaylorFeatureMap {
        &self.map
    }

    /// `Γ`, the feature range.
    pub fn gamma(&self) -> f64 {
        self.gamma
    }

    /// `L = log2 N`.
    pub fn depth(&self) -> u32 {
        self.copy.depth()
    }

    /// The budget hierarchy of this structure (its node noise:
    /// [`SoftmaxBudget::feature_noise`], [`SoftmaxBudget::ones_noise`]).
    pub fn budget(&self) -> &SoftmaxBudget {
        &self.budget
    }

    /// How the nodes were released.
    pub fn noise_mode(&self) -> NoiseMode {
        self.budget.noise_mode
    }

    /// What the structure actually achieves (see [`SoftmaxBudget::achieved`]); `δ′` is
    /// included in the reported δ.
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved_privacy(&self) -> Result<PrivacyBudget> {
        self.budget.achieved()
    }

    /// Scratch (`f64` elements) for [`query_into`](Self::query_into): `r + d`.
    pub fn query_scratch_len(&self) -> usize {
        self.map.features() + self.map.dim()
    }

    /// The noisy `Σ_k w_k P(x_k)·P(y)` (Algorithm 3 DistanceQuery) for a public `y`.
    ///
    /// # Errors
    /// [`Error::ScratchTooSmall`]; bad queries per [`QueryPolicy`].
    pub fn query_into(&self, y: &[f64], scratch: &mut [f64]) -> Result<f64> {
        let (u, _) = query_features(&self.params, &self.map, false, y, scratch, 0)?;
        Ok(self.copy.answer(u, self.gamma))
    }

    /// [`query_into`](Self::query_into) with allocated scratch.
    ///
    /// # Errors
    /// As [`query_into`](Self::query_into), plus [`Error::AllocationFailed`].
    pub fn query(&self, y: &[f64]) -> Result<f64> {
        let mut scratch =
            crate::scratch::try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        self.query_into(y, &mut scratch)
    }

    /// The exact noise variance of the answer at `y` (`docs/PAPERS.md` §1.7, with the node
    /// variances of the release's mode).
    ///
    /// # Errors
    /// Bad queries per [`QueryPolicy`].
    pub fn noise_variance(&self, y: &[f64]) -> Result<f64> {
        let mut scratch =
            crate::scratch::try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        let (u, _) = query_features(&self.params, &self.map, false, y, &mut scratch, 0)?;
        copy_noise_variance(
            &self.budget,
            u,
            self.gamma,
            self.copy.n_leaves(),
            self.params.weight_bound,
        )
    }

    /// The released scalars `(P_wx, s_w)`.
    pub fn scalars(&self) -> (f64, f64) {
        self.copy.scalars()
    }
}

/// `docs/PAPERS.md` §1.7: `¼[Σ_i (2·bl(j_i)·V₂ + 4u_i² L V₁ + u_i⁴ L V₀) + ‖u‖⁴ L V_ones]`.
pub(crate) fn copy_noise_variance(
    budget: &SoftmaxBudget,
    u: &[f64],
    gamma: f64,
    n_leaves: usize,
    weight_bound: f64,
) -> Result<f64> {
    let l = f64::from(n_leaves.trailing_zeros());
    let v = |q| budget.feature_noise(q, gamma, weight_bound).map(|t| t.variance());
    let (v0, v1, v2) = (v(0)?, v(1)?, v(2)?);
    let vo = budget.ones_noise(weight_bound)?.variance();
    let mut sum = 0.0;
    let mut u2 = 0.0;
    for &ui in u {
        let j = bin(ui, gamma, n_leaves);
        let bl = f64::from(usize::BITS - j.leading_zeros());
        let ui2 = ui * ui;
        u2 += ui2;
        sum += 2.0 * bl * v2 + 4.0 * ui2 * l * v1 + ui2 * ui2 * l * v0;
    }
    Ok(0.25 * (sum + u2 * u2 * l * vo))
}

/// `T_s(z_max)`, the largest `‖P(y)‖²`.
pub(crate) fn taylor_max(map: &TaylorFeatureMap, radius: f64) -> f64 {
    taylor_exp(map.z_max(radius), map.degree())
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<DpTreeSoftmax>();
    is::<Vec<SoftmaxCopy>>();
}

/// Splits `scratch` into `P(y)` (`r`), the validated public query (`d`) and `extra` more
/// elements, after validating (or clamping, per [`QueryPolicy`](super::QueryPolicy)) `y`,
/// snapping it to the net when `snap` is set, and evaluating `P(y)`: the preamble of every
/// query of this module, of DPCrossAttention and of the moment sketch.
pub(crate) fn query_features<'s>(
    params: &SoftmaxTreeParams,
    map: &TaylorFeatureMap,
    snap: bool,
    y: &[f64],
    scratch: &'s mut [f64],
    extra: usize,
) -> Result<(&'s [f64], &'s mut [f64])> {
    let (r, d) = (map.features(), map.dim());
    check_scratch(scratch.len(), r + d + extra)?;
    let (u, rest) = scratch.split_at_mut(r);
    let (yy, tail) = rest.split_at_mut(d);
    params.query_point(y, yy)?;
    if snap {
        let step = 2.0 * net_resolution(d, params.radius, params.eps_s);
        for v in yy.iter_mut() {
            *v = snap_to_net(*v, step, params.radius);
        }
    }
    map.eval_into(yy, u)?;
    Ok((u, &mut tail[..extra]))
}
