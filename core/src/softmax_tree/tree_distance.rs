//! Weighted `ℓ_p^p` distance queries: DPTreeDistance (paper 001 Algorithms 4–5) and
//! DPTreeHighDim (Algorithm 6), both in `docs/PAPERS.md` §1.5.
//!
//! **Guarantee.** DPTreeDistance: `(ε, δ)`-DP for neighbouring datasets that differ in **one
//! point** `(x_k, w_k)` (value and weight may both change), for `x ∈ [0, ρ]`,
//! `w ∈ [−R_w, R_w]`. Points are binned into `N` leaves; tree `q = 0..p` sums `w x^q` per bin
//! with sensitivity `Δ_q = 2 R_w ρ^q` at `(ε/(p+1), δ/(p+1))` (Theorem D.1). A point that
//! moves to another bin shifts nodes on two paths; with the exact `TLap` strip mass the
//! claimed `(ε, δ)` still holds (`docs/PAPERS.md` P1-8, argued in `docs/PRIVACY.md` §4.2 step 3).
//! Private `x` and `w` are clamped into their domains (NaN → 0), which preserves neighbourhood.
//!
//! DPTreeHighDim: `d` DPTreeDistance structures, one per coordinate, at
//! `ε_k = c·ε/√(d ln(1/δ′))`, `δ_k = δ/d`; advanced composition gives `(ε', δ + δ′)` with
//! `ε' = d ε_k (e^{ε_k} − 1) + ε_k √(2 d ln(1/δ′)) ≈ √2·c·ε` (Lemma E.1; the exact `ε'` is
//! returned by [`DpTreeHighDim::achieved_privacy`]).
//!
//! **Privacy unit:** one token (one point `(x_k, w_k)`, resp. one row of `x` with its
//! weight; replace-one, `n` public). **Release:** the construction (`new`: one stream id of a
//! [`Session`](crate::session::Session), its ledger charged the structure's `(ε, δ)`, resp.
//! `(ε', δ + δ′)`; `new_keyed` for replay and audit).
//!
//! **Accuracy.** Points in the query's own bin are dropped (`docs/PAPERS.md` P1-10): a bias of at
//! most `R_w (ρ/N)^p` per such point. The noise variance is exactly
//! `Σ_q (C(p,q) y^{p−q})² · L · V_q` (§1.5), `V_q` the node noise variance of moment `q`.
//!
//! **Floating point.** By default ([`NoiseMode::Exact`]) every node of moment `q` is released
//! on its grid `Λ_q` with exact truncated discrete Laplace noise calibrated for the contributions'
//! bound `C_q` ≥ `R_w ρ^q`, the summation error and the half shifts of a point changing
//! bins ([`NodeNoise`] has the proof), so both guarantees hold for the released floats; `V_q`
//! is that noise's variance. [`NoiseMode::UnsafeFloat`] adds the float
//! `TLap(Δ_q, ε/((p+1)L), δ/((p+1)L))` (the paper; not DP as shipped).

use crate::accounting::composition::tighter_composition;
use crate::accounting::cost::Accountant;
use crate::directed_rounding::{div_down, ln_inv_up, mul_down, mul_up, sqrt_up};
use crate::error::{Error, Result, open_unit, positive_finite};
use crate::grid_release::NoiseMode;
use crate::matrix_view::MatRef;
use crate::privacy_params::{Delta, PrivacyBudget};
use crate::session::{Draw, Session};

use super::node_noise::NodeNoise;
use super::tree_arena::{
    MAX_MOMENTS, TreeArena, bin, check_capacity, leaf_count, moment_noise, powi,
};
use super::{STREAMS, charge, check_query_value, clamp_private, split_budget};

/// Parameters of a [`DpTreeDistance`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DistanceParams {
    /// The exponent `p ∈ 1..=8` of `Σ w |y − x|^p`.
    pub p: u32,
    /// The value range `ρ`: data and queries lie in `[0, ρ]`.
    pub range: f64,
    /// The weight bound `R_w`: weights lie in `[−R_w, R_w]`.
    pub weight_bound: f64,
    /// `(ε, δ)` of the whole structure; `δ ≤ (p+1)·L/2` is needed for the node budgets.
    pub budget: PrivacyBudget,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

impl DistanceParams {
    fn check(&self) -> Result<()> {
        if !(1..MAX_MOMENTS as u32).contains(&self.p) {
            return Err(Error::OutOfRange {
                name: "p",
                value: f64::from(self.p),
                allowed: "[1, 8]",
            });
        }
        positive_finite("range", self.range)?;
        positive_finite("weight_bound", self.weight_bound).map(|_| ())
    }
}

/// DPTreeDistance: `p + 1` noisy moment trees answering `Σ_k w_k |y − x_k|^p`.
///
/// ```
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// use dpattn_core::softmax_tree::{DistanceParams, DpTreeDistance};
/// // The paper's Figure 1 (docs/PAPERS.md T1-C), noise-free: Σ w |0 − x| = 4.4.
/// let x = [0.1, 0.3, 0.3, 0.3, 0.4, 0.6, 0.7, 0.9, 0.9];
/// let w = [2.2, 3.1, -2.0, -3.0, 2.0, 6.0, 0.5, -1.0, 1.0];
/// let params = DistanceParams { p: 1, range: 1.0, weight_bound: 6.0,
///     budget: PrivacyBudget::new(1.0, 1e-3)?, noise_mode: NoiseMode::Exact };
/// let exact = DpTreeDistance::non_private_exact(&x, &w, 16, &params)?;
/// assert!((exact.query(0.0)? - 4.4).abs() < 1e-12);
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-2)?);
/// let mut session = Session::new(ledger)?;
/// let noisy = DpTreeDistance::new(&x, &w, &params, &mut session)?;
/// assert!(noisy.query(0.0)?.is_finite());
/// assert_eq!(session.ledger().charges(), 1);
/// // Exact mode: every node is a multiple of its moment's grid Λ_q = 2^⌊log₂(2 R_w ρ^q/256)⌋,
/// // and at y = 0 the answer is c_right₁ − c_left₁, built from moment-1 nodes alone.
/// let lambda = noisy.node_noise(1).unwrap().resolution().unwrap();
/// assert_eq!(lambda, 2f64.powi(-5)); // 12/256 = 0.047 → 1/32
/// assert_eq!((noisy.query(0.0)? / lambda).fract(), 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpTreeDistance {
    arena: TreeArena,
    params: DistanceParams,
    noise: Option<[NodeNoise; MAX_MOMENTS]>,
}

impl DpTreeDistance {
    /// Builds the structure over points `x` with weights `w` (`N = max(2, next_pow2(n))`
    /// leaves), released in `params.noise_mode` with fresh randomness from `session` (node
    /// offset `o` of the arena is element `o` of its stream), and charges the session's
    /// ledger `params.budget` (after the build, before the structure is returned).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for `x`, `w` of different lengths; [`Error::OutOfRange`] for
    /// an empty input, bad parameters, or (exact mode) more than `2^40` nodes; the
    /// session's and the ledger's errors.
    pub fn new<const N: usize>(
        x: &[f64],
        w: &[f64],
        params: &DistanceParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(x, w, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        x: &[f64],
        w: &[f64],
        params: &DistanceParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        params.check()?;
        let n_leaves = leaf_count(x.len())?;
        // Public checks first, so that no error can follow the private scatter.
        let m = params.p as usize + 1;
        let depth = n_leaves.trailing_zeros();
        let (eps, delta) = split_budget(params.budget, (m as f64) * f64::from(depth));
        let (wb, range) = (params.weight_bound, params.range);
        let noise = moment_noise(params.noise_mode, m, wb, range, depth, eps, delta)?;
        check_capacity(params.noise_mode, 0, TreeArena::len_for(1, m, n_leaves)?)?;
        let mut s = Self::build(x, w, n_leaves, params, Some(&noise[..m]))?;
        s.arena.add_noise(&noise[..m], &draw.keyed(0), 0)?;
        s.noise = Some(noise);
        charge(ledger, params.budget, params.noise_mode)?;
        Ok(s)
    }

    /// **Not differentially private.** The noise-free structure with `n_leaves` leaves (a
    /// power of two ≥ 2) over unclamped finite data: what [`DpTreeDistance::new`] perturbs.
    /// For tests, audits and bias measurement only.
    ///
    /// # Errors
    /// As [`DpTreeDistance::new`], plus [`Error::PrivateNonFinite`] and a bad `n_leaves`.
    pub fn non_private_exact(
        x: &[f64],
        w: &[f64],
        n_leaves: usize,
        params: &DistanceParams,
    ) -> Result<Self> {
        params.check()?;
        leaf_count(x.len())?; // rejects an empty input, as `new` does
        if !(n_leaves >= 2 && n_leaves.is_power_of_two()) {
            return Err(Error::OutOfRange {
                name: "n_leaves",
                value: n_leaves as f64,
                allowed: "a power of two >= 2",
            });
        }
        for (arg, v) in [("x", x), ("w", w)] {
            if let Some(i) = v.iter().position(|a| !a.is_finite()) {
                return Err(Error::private_non_finite(arg, i));
            }
        }
        Self::build(x, w, n_leaves, params, None)
    }

    /// The exact sums; `noise` (the private build) clamps the data and rounds contributions
    /// to its quanta.
    fn build(
        x: &[f64],
        w: &[f64],
        n_leaves: usize,
        params: &DistanceParams,
        noise: Option<&[NodeNoise]>,
    ) -> Result<Self> {
        let clamp = noise.is_some();
        if x.len() != w.len() {
            return Err(Error::ShapeMismatch {
                arg: "w",
                axis: "len",
                expected: x.len(),
                got: w.len(),
            });
        }
        let m = params.p as usize + 1;
        let mut arena = TreeArena::zeroed(1, m, n_leaves)?;
        arena.quantize_for(noise.unwrap_or_default());
        for (&xk, &wk) in x.iter().zip(w) {
            let (xk, wk) = if clamp {
                (
                    clamp_private(xk, 0.0, params.range),
                    clamp_private(wk, -params.weight_bound, params.weight_bound),
                )
            } else {
                (xk, wk)
            };
            arena.add_point(0, bin(xk, params.range, n_leaves), wk, xk);
        }
        arena.build_sums();
        Ok(Self { arena, params: *params, noise: None })
    }

    /// `N`.
    pub fn n_leaves(&self) -> usize {
        self.arena.n_leaves()
    }

    /// `L = log2 N`.
    pub fn depth(&self) -> u32 {
        self.arena.depth()
    }

    /// The parameters.
    pub fn params(&self) -> &DistanceParams {
        &self.params
    }

    /// The node noise of moment `q ∈ 0..=p` (mode, grid `Λ_q`, bound, variance); `None`
    /// for the non-private structure or `q > p`.
    pub fn node_noise(&self, q: usize) -> Option<&NodeNoise> {
        self.noise.as_ref().filter(|_| q <= self.params.p as usize).map(|n| &n[q])
    }

    /// The noisy `Σ_k w_k |y − x_k|^p` (Algorithm 5). The query is public: `y` must be in
    /// `[0, ρ]`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] / [`Error::NonFinite`] for `y` outside `[0, ρ]`.
    pub fn query(&self, y: f64) -> Result<f64> {
        check_query_value("y", y, self.params.range)?;
        Ok(self.arena.distance(0, y, self.params.range))
    }

    /// The exact variance of the noise in [`query`](Self::query)`(y)` (`docs/PAPERS.md` §1.5).
    ///
    /// # Errors
    /// As [`query`](Self::query).
    pub fn noise_variance(&self, y: f64) -> Result<f64> {
        check_query_value("y", y, self.params.range)?;
        Ok(distance_variance(self.params.p, y, self.depth(), &node_variances(self.noise.as_ref())))
    }
}

/// The node variances per moment (zeros for a non-private structure).
fn node_variances(noise: Option<&[NodeNoise; MAX_MOMENTS]>) -> [f64; MAX_MOMENTS] {
    noise.map_or([0.0; MAX_MOMENTS], |n| n.map(|t| t.variance()))
}

/// `Σ_q (C(p,q) y^{p−q})² · L · V_q`.
pub(crate) fn distance_variance(p: u32, y: f64, depth: u32, node_variance: &[f64]) -> f64 {
    let mut binom = 1.0;
    let mut v = 0.0;
    for q in 0..=p {
        let c = binom * powi(y, p - q);
        v += c * c * f64::from(depth) * node_variance[q as usize];
        binom = binom * f64::from(p - q) / f64::from(q + 1);
    }
    v
}

/// Parameters of a [`DpTreeHighDim`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HighDimParams {
    /// The exponent `p ∈ 1..=8`.
    pub p: u32,
    /// The coordinate range `R`: points and queries lie in `[0, R]^d`.
    pub range: f64,
    /// The weight bound `R_w`.
    pub weight_bound: f64,
    /// The target `(ε, δ)`; the structure is `(ε', δ + δ′)`-DP with `ε' ≈ √2·c·ε`.
    pub budget: PrivacyBudget,
    /// The advanced-composition slack `δ′ ∈ (0, 1)`.
    pub delta_prime: f64,
    /// The composition constant `c ∈ (0, 1)` (the paper takes `c < 0.1`).
    pub c: f64,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

/// DPTreeHighDim (Algorithm 6): `Σ_i w_i ‖y − x_i‖_p^p` as a sum of `d` one-dimensional
/// structures.
///
/// ```
/// use dpattn_core::{MatRef, NoiseMode, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::session::Session;
/// use dpattn_core::softmax_tree::{DpTreeHighDim, HighDimParams};
/// let x = [0.1, 0.9, 0.5, 0.5];
/// let params = HighDimParams { p: 1, range: 1.0, weight_bound: 1.0,
///     budget: PrivacyBudget::new(0.5, 1e-6)?, delta_prime: 1e-6, c: 0.09,
///     noise_mode: NoiseMode::Exact };
/// let mut session = Session::new(Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-5)?))?;
/// let s = DpTreeHighDim::new(MatRef::from_row_major(&x, 2, 2)?, &[1.0, 1.0], &params, &mut session)?;
/// assert!(s.query(&[0.0, 0.0])?.is_finite());
/// assert!(s.achieved_privacy()?.epsilon().get() < 0.5);
/// // The ledger is charged what the structure achieves, (ε', δ + δ′).
/// let spent = session.ledger().spent();
/// assert_eq!(spent, dpattn_core::accounting::ledger::Amount::Approx {
///     epsilon: s.achieved_privacy()?.epsilon().get(), delta: s.achieved_privacy()?.delta().get() });
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DpTreeHighDim {
    arena: TreeArena,
    params: HighDimParams,
    dim: usize,
    per_coordinate: PrivacyBudget,
    noise: [NodeNoise; MAX_MOMENTS],
}

impl DpTreeHighDim {
    /// Builds `d` structures over the rows of `x` (`n × d`) with weights `w`, released in
    /// `params.noise_mode` with fresh randomness from `session`, and charges the session's
    /// ledger [`achieved_privacy`](Self::achieved_privacy) (after the build, before the
    /// structure is returned).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`], [`Error::OutOfRange`] for bad parameters or (exact mode)
    /// more than `2^40` nodes; the session's and the ledger's errors.
    pub fn new<const N: usize>(
        x: MatRef<'_, f64>,
        w: &[f64],
        params: &HighDimParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(x, w, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        x: MatRef<'_, f64>,
        w: &[f64],
        params: &HighDimParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        DistanceParams {
            p: params.p,
            range: params.range,
            weight_bound: params.weight_bound,
            budget: params.budget,
            noise_mode: params.noise_mode,
        }
        .check()?;
        open_unit("delta_prime", params.delta_prime)?;
        open_unit("c", params.c)?;
        let (n, d) = (x.rows(), x.cols());
        if w.len() != n {
            return Err(Error::ShapeMismatch { arg: "w", axis: "len", expected: n, got: w.len() });
        }
        if d == 0 {
            return Err(Error::OutOfRange { name: "d", value: 0.0, allowed: ">= 1" });
        }
        let n_leaves = leaf_count(n)?;
        let m = params.p as usize + 1;
        let df = d as f64;
        let eps_k = div_down(
            mul_down(params.c, params.budget.epsilon().get()),
            sqrt_up(mul_up(df, ln_inv_up(params.delta_prime))),
        );
        let delta_k = div_down(params.budget.delta().get(), df);
        let per_coordinate = PrivacyBudget::new(eps_k, delta_k)?;
        let depth = n_leaves.trailing_zeros();
        let (eps, delta) = split_budget(per_coordinate, (m as f64) * f64::from(depth));
        let (wb, range, mode) = (params.weight_bound, params.range, params.noise_mode);
        let noise = moment_noise(mode, m, wb, range, depth, eps, delta)?;
        check_capacity(mode, 0, TreeArena::len_for(d, m, n_leaves)?)?;
        let mut arena = TreeArena::zeroed(d, m, n_leaves)?;
        arena.quantize_for(&noise[..m]);
        for (k, &wk) in w.iter().enumerate() {
            let wk = clamp_private(wk, -params.weight_bound, params.weight_bound);
            for (c, &xv) in x.row(k).iter().enumerate() {
                let xv = clamp_private(xv, 0.0, params.range);
                arena.add_point(c, bin(xv, params.range, n_leaves), wk, xv);
            }
        }
        arena.build_sums();
        arena.add_noise(&noise[..m], &draw.keyed(0), 0)?;
        let s = Self { arena, params: *params, dim: d, per_coordinate, noise };
        charge(ledger, s.achieved_privacy()?, mode)?;
        Ok(s)
    }

    /// The node noise of moment `q ∈ 0..=p` (the same in every coordinate's trees); `None`
    /// for `q > p`.
    pub fn node_noise(&self, q: usize) -> Option<&NodeNoise> {
        self.noise.get(q).filter(|_| q <= self.params.p as usize)
    }

    /// The per-coordinate budget `(ε_k, δ_k)`.
    pub fn per_coordinate(&self) -> PrivacyBudget {
        self.per_coordinate
    }

    /// The `(ε', dδ_k + δ′)` the structure actually achieves (advanced composition over the
    /// `d` coordinates, rounded up; never worse than basic composition).
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved_privacy(&self) -> Result<PrivacyBudget> {
        tighter_composition(
            self.per_coordinate,
            self.dim as u64,
            Delta::new(self.params.delta_prime)?,
        )
    }

    /// The noisy `Σ_i w_i ‖y − x_i‖_p^p`; `y ∈ [0, R]^d` (public, validated).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a wrong length; [`Error::OutOfRange`] /
    /// [`Error::NonFinite`] for a coordinate outside `[0, R]`.
    pub fn query(&self, y: &[f64]) -> Result<f64> {
        self.check_y(y)?;
        Ok(y.iter().enumerate().map(|(c, &v)| self.arena.distance(c, v, self.params.range)).sum())
    }

    /// The exact noise variance of [`query`](Self::query)`(y)` (the sum of `docs/PAPERS.md` §1.5
    /// over coordinates).
    ///
    /// # Errors
    /// As [`query`](Self::query).
    pub fn noise_variance(&self, y: &[f64]) -> Result<f64> {
        self.check_y(y)?;
        let var = node_variances(Some(&self.noise));
        Ok(y.iter().map(|&v| distance_variance(self.params.p, v, self.arena.depth(), &var)).sum())
    }

    fn check_y(&self, y: &[f64]) -> Result<()> {
        let d = self.dim;
        if y.len() != d {
            return Err(Error::ShapeMismatch { arg: "y", axis: "len", expected: d, got: y.len() });
        }
        for &v in y {
            check_query_value("y", v, self.params.range)?;
        }
        Ok(())
    }
}
