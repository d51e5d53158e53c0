//! The shuffled DP-SGD step (Algorithm 1 of the paper, `docs/PAPERS.md` §2.4), on flat
//! buffers, with sound accounting.
//!
//! **What one step does.** Each of `N` record slots joins the batch independently with
//! probability `q` (exact Poisson sampling, keyed by slot index). For every sampled record
//! the caller's closure writes its gradient at the current weights; the whole-model gradient
//! is clipped to L2 norm `c` and summed. Optionally the sum is projected onto the ball of
//! radius `c′`, per plan block or over all moved coordinates (line 12, [`BatchClip`]).
//! Gaussian noise `N(0, σ²c²)` is added to coordinates the plan moves and `N(0, σ₀²c²)` to
//! the rest, the result divided by the expected batch `B = qN`, and `w ← w − η·g̃`. Finally
//! one uniform permutation of the plan is applied to the weights and to every optimizer-state
//! buffer (line 14: `P[W − η·g̃]`, `docs/PAPERS.md` P2-14), and the privatised gradient `g̃`,
//! permuted the same way, is left in `scratch[..D]` for optimizers with state.
//!
//! **`N` must be public.** Under add/remove-one neighbours the dataset size is private, and
//! dividing by a private `qN` would leak it through the scale of the noise in the output
//! (review finding: over many steps of a large model the two sizes are told apart with
//! near certainty). `N` is therefore a public *capacity*: a fixed number of record slots,
//! decided without looking at the data; slots without a record get a zero gradient from the
//! closure. Removing a record then empties its slot, which is what the guarantee covers.
//!
//! **Optimizers with state** (momentum, Adam): run the step with `η = 0` (it then only
//! privatises, permutes the weights and state, and leaves `g̃` in the new frame in
//! `scratch[..D]`), and update the moments and the weights from that `g̃` — post-processing,
//! because elementwise optimizers commute with the permutation. Moments built from anything
//! else (raw gradients) are not covered by the guarantee.
//!
//! **Guarantee.** With add/remove-one neighbours (`docs/PAPERS.md` P2-21; [`PRIVACY_UNIT`] is
//! [`PrivacyUnit::Record`]), the released weights of one step are the Poisson-subsampled
//! Gaussian mechanism with noise multiplier `σ_eff = min(σ, σ₀)` (P2-10: the worst case puts
//! the whole difference `c` in the least-noised coordinates; the batch projection is
//! 1-Lipschitz, so it keeps the sensitivity `c`). The update and the permutation are
//! post-processing. The step is charged exactly that —
//! [`Cost::SubsampledGaussian`]` { rate: q, noise_multiplier: σ_eff, steps: 1 }`, the curve of
//! [`SampledGaussianRdp`](crate::accounting::rdp::SampledGaussianRdp)`(q, σ_eff)` on an RDP
//! [`Ledger`](crate::accounting::ledger::Ledger) — and **shuffling earns no privacy
//! credit**: the permutation is recoverable from the previous weights (P2-6), so the
//! paper's Theorem 6 accounting does not apply (it is reproduced, as an estimate, in the
//! `dpattn-paper` crate: `dpattn_paper::weight_shuffle::paper_estimate`).
//!
//! **A run of steps.** Each step is one charge. The RDP ledger's total is valid when the
//! sequence of charges is fixed in advance — the usual DP-SGD run: `q`, `σ`, `σ₀` and the
//! number of steps chosen before training — not when later steps' parameters are chosen
//! from earlier outputs (see the [ledger's adaptivity notes](crate::accounting::ledger);
//! use a zCDP ledger for fully adaptive parameters, which this step cannot charge).
//!
//! **Exact release** (the default, [`NoiseMode::Exact`]; `docs/PRIVACY.md` §7.4). Per-example
//! clipping is DP-Forward's exact clip (`dp_forward::clip_hidden` on one block of `D`
//! entries: it aims inside `c·(1 − (D + 16)·2⁻⁵²)`), so every stored gradient has exact
//! norm `≤ c` and is a function of its own record. Each is then rounded to the public
//! accumulation grid `Λ_g = 2^k`, the smallest power of two with `N·c ≤ 2⁵²·Λ_g`
//! (round to nearest: norm `≤ c + √D·Λ_g/2`, again a per-record map), so every partial sum
//! is an integer multiple of `Λ_g` below `2⁵³·Λ_g` and **the sum is computed exactly**, in
//! any order. The batch projection is 1-Lipschitz; each computed projection lies within
//! `c′·γ_{D+9} + √D·2⁻¹⁰⁷⁵` of the exact projection of its input (`γ_n = nu/(1 − nu)`,
//! `u = 2⁻⁵³`: the computed norm is within `γ_{D+5}` of the true one, the factor and the
//! rescaling add three roundings, and when the decision is wrong the true norm is within the
//! same error of `c′`). The noisy sum is released on the grid of
//! [`ShuffledDpSgdParams::exact_grid`]: `Λ·(round(ŝ/Λ) + Z)`, `Z` exact discrete Gaussian
//! integers (moved coordinates `scaled_noise(σ/σ_eff)`, fixed ones `scaled_noise(σ₀/σ_eff)`),
//! calibrated to `Δ = c + √D·Λ_g/2` (add/remove one record), `d = D`, multiplier `σ_eff`, the
//! projection error as `E`, and the value bound `N·(c + Λ_g/2) + E`. The `grid_release`
//! lemma gives the released integers the guarantee of the continuous subsampled Gaussian at
//! `σ_eff` and sensitivity `Δ + 2E + √D·Λ`, for which `σ_eff` times that sensitivity is
//! calibrated, so the RDP charge is unchanged. Everything the step hands back is
//! post-processing of those integers and public values: `g̃ = Λ·k/B` and `w − η·g̃`
//! (`B = qN`, `η`, `w` public), the permutations (independent of the data), and the
//! optimizer state permuted. Noise coordinate `j` is element `j` of the noise stream in the
//! window layout (`D < 2⁴⁰`).
//!
//! **Unsafe float** ([`NoiseMode::UnsafeFloat`]): the sum plus `f64` Box–Muller noise (the
//! layout of `docs/RANDOMNESS.md` §3, support `|z| ≤ 8.57`); the low-order bits are not
//! covered by the proof (`docs/PRIVACY.md` §2.5). The sampler's bounded support is one such
//! effect; with a ledger, steps where it would be visible beyond 1% of the ledger's δ over
//! the planned `T` steps are refused ([`ShuffledDpSgdParams::support_delta`]). Without a
//! ledger the caller accounts and should run the same check.
//!
//! **Data-dependent failures.** A per-example gradient with NaN/∞ is replaced by zero (a
//! point of the `c`-ball, so the sensitivity is unchanged) and counted in
//! [`StepReport::non_finite`], rather than aborting the step: an abort that happens exactly
//! when a given record is sampled would be an unaccounted release. The closure should not
//! fail on data; if it returns an error the step stops uncharged, with the private partial
//! sums erased from `scratch`.
//!
//! **Randomness** (`docs/RANDOMNESS.md` §5.5): three draws per step under one key, on
//! [`STREAMS`] `= 3` consecutive stream ids — the selection on `draw.keyed(0)` (record
//! `i`'s window), the noise on `draw.keyed(1)` (coordinate `j` is element `j`: its window in
//! exact mode, the `f64` Gaussian layout in unsafe-float mode) and the permutations on
//! `draw.keyed(2)` (read sequentially from word 0). [`shuffled_dp_sgd_step`] takes them from
//! a [`Session`]; a host numbering its own runs uses [`shuffled_dp_sgd_step_keyed`] with
//! `Draw { key, stream: base + 3·step }` (a run of `T` steps then uses `[base, base + 3T)`).

use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::ledger::Amount;
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::directed_rounding::{add_up, count_up, gamma_up, mul_up, sqrt_up};
use crate::dp_forward::GAUSSIAN_SUPPORT;
use crate::dp_forward::{ClipMode, ClipRegion, clip_checked};
use crate::element::Element;
use crate::error::{Error, Result, check_radius, positive_finite, rate};
use crate::grid_release::{
    CONSTANT_TIME_UNSUPPORTED, GaussianGrid, GaussianGridSpec, GridFormat, NoiseMode,
};
use crate::matrix_view::MatMut;
use crate::sampling::{
    DiscreteGaussian, ExactSampler, FixedWordSampler, Gaussian, KeyedStream, PoissonSubsampling,
    check_largest, max_box_muller,
};
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

use super::plan::ShufflePlan;

/// The privacy unit: one training record, added or removed (its slot emptied).
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::Record;

/// Stream ids one step uses: selection `draw.keyed(0)`, noise `draw.keyed(1)`,
/// permutations `draw.keyed(2)`.
pub const STREAMS: u64 = 3;

/// Which coordinates one batch projection covers (`docs/PAPERS.md` §2.4; the paper leaves it open).
///
/// ```
/// use dpattn_core::weight_shuffle::BatchClipScope;
/// assert_ne!(BatchClipScope::PerBlock, BatchClipScope::AllMoved);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchClipScope {
    /// Each plan block's moved tensors separately (Alg. 1 line 11 read per layer).
    PerBlock,
    /// All coordinates the plan moves, together.
    AllMoved,
}

/// Batch clipping (Alg. 1 line 12): the summed gradient of the moved coordinates is
/// projected onto the ball of radius `norm` (`c′`).
///
/// ```
/// use dpattn_core::weight_shuffle::{BatchClip, BatchClipScope};
/// let b = BatchClip { norm: 1.0, scope: BatchClipScope::AllMoved };
/// assert_eq!(b.norm, 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchClip {
    /// `c′ > 0`.
    pub norm: f64,
    /// The coordinates one projection covers.
    pub scope: BatchClipScope,
}

/// Parameters of [`shuffled_dp_sgd_step`].
///
/// ```
/// use dpattn_core::weight_shuffle::ShuffledDpSgdParams;
/// let p = ShuffledDpSgdParams::new(0.01, 1.0, 1.1, 0.1, 1000);
/// assert_eq!((p.fixed_noise_multiplier, p.batch_clip), (None, None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShuffledDpSgdParams {
    /// Poisson sampling rate `q ∈ (0, 1]`.
    pub sampling_rate: f64,
    /// Per-example clipping norm `c > 0` (whole-model L2 norm, Eq. 2).
    pub clip_norm: f64,
    /// Batch clipping of the moved coordinates, if any.
    pub batch_clip: Option<BatchClip>,
    /// Noise multiplier `σ` of the coordinates the plan moves (noise std `σ·c`).
    pub noise_multiplier: f64,
    /// Noise multiplier `σ₀` of the coordinates the plan leaves in place; `None` uses `σ`.
    pub fixed_noise_multiplier: Option<f64>,
    /// Learning rate `η` (finite; `0` only noises nothing in effect but still charges).
    pub learning_rate: f64,
    /// The number of steps `T` the run plans; the bounded-support check of the unsafe float
    /// path uses it.
    pub planned_steps: u64,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

impl ShuffledDpSgdParams {
    /// Parameters without batch clipping, with one noise multiplier for every coordinate,
    /// and the exact release ([`NoiseMode::Exact`]).
    ///
    /// ```
    /// use dpattn_core::NoiseMode;
    /// use dpattn_core::weight_shuffle::ShuffledDpSgdParams;
    /// let p = ShuffledDpSgdParams::new(0.5, 2.0, 1.0, 0.1, 10);
    /// assert_eq!((p.clip_norm, p.noise_mode), (2.0, NoiseMode::Exact));
    /// ```
    pub fn new(
        sampling_rate: f64,
        clip_norm: f64,
        noise_multiplier: f64,
        learning_rate: f64,
        planned_steps: u64,
    ) -> Self {
        Self {
            sampling_rate,
            clip_norm,
            batch_clip: None,
            noise_multiplier,
            fixed_noise_multiplier: None,
            learning_rate,
            planned_steps,
            noise_mode: NoiseMode::Exact,
        }
    }

    /// `σ_eff = min(σ, σ₀)`: the noise multiplier the step is charged at (`docs/PAPERS.md` P2-10).
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::ShuffledDpSgdParams;
    /// let mut p = ShuffledDpSgdParams::new(0.5, 1.0, 0.27, 0.1, 10);
    /// p.fixed_noise_multiplier = Some(11.75);
    /// assert_eq!(p.effective_noise_multiplier(), 0.27);
    /// ```
    pub fn effective_noise_multiplier(&self) -> f64 {
        self.noise_multiplier.min(self.fixed_noise_multiplier.unwrap_or(self.noise_multiplier))
    }

    fn validate(&self) -> Result<()> {
        rate("sampling_rate q", self.sampling_rate)?;
        // [1e-100, 1e100]: the clip's range; the sum of up to 2^40 clipped gradients stays
        // finite.
        check_radius("clip_norm c", self.clip_norm)?;
        positive_finite("noise_multiplier", self.noise_multiplier)?;
        positive_finite("noise_multiplier * clip_norm", self.noise_multiplier * self.clip_norm)?;
        if let Some(s0) = self.fixed_noise_multiplier {
            positive_finite("fixed_noise_multiplier", s0)?;
            positive_finite("fixed_noise_multiplier * clip_norm", s0 * self.clip_norm)?;
        }
        if let Some(b) = self.batch_clip {
            positive_finite("batch_clip norm c'", b.norm)?;
        }
        if !self.learning_rate.is_finite() {
            let lr = self.learning_rate;
            return Err(Error::OutOfRange { name: "learning_rate", value: lr, allowed: "finite" });
        }
        if self.planned_steps == 0 {
            return Err(Error::OutOfRange { name: "planned_steps", value: 0.0, allowed: ">= 1" });
        }
        Ok(())
    }

    /// An estimate of the δ the sampler's bounded support adds over the planned run, for a model of
    /// `dims` coordinates: `T·q·τ`. Box–Muller draws coordinates in pairs on the disk
    /// `‖z‖ ≤ R = 8.57`; a pair whose mean moves by `s` (in units of the std) lands outside the
    /// moved disk only if `‖z‖ > R − s`, probability `g(s) = e^{−(R−s)²/2} − e^{−R²/2}` for the
    /// ideal Gaussian. `τ` is the worst case over the difference `μ = 1/σ_eff` spread evenly over
    /// `k` pairs, `sup_k k·g(μ/√k)`, bounded by twice its maximum over `k = 1, 2, 4, …` (doubling
    /// `k` at most doubles `k·g`). Uneven spreads are not covered by a proof: this is a safeguard
    /// against a floating-point effect of [`NoiseMode::UnsafeFloat`] (the exact release has no
    /// bounded support and is not checked), like the rest of `docs/PRIVACY.md` §2.5, not part of
    /// the guarantee.
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::ShuffledDpSgdParams;
    /// let p = ShuffledDpSgdParams::new(0.01, 1.0, 1.0, 0.1, 1000);
    /// // σ = 1 on a 1e8-parameter model: spreading over all 5e7 pairs is the worst case,
    /// // 10 · 2 · √k · g(1/√k) ≈ 1.1e-10.
    /// let t = p.support_delta(100_000_000);
    /// assert!(t > 1e-10 && t < 1.2e-10);
    /// ```
    pub fn support_delta(&self, dims: usize) -> f64 {
        const R: f64 = GAUSSIAN_SUPPORT;
        let mu = 1.0 / self.effective_noise_multiplier();
        let g = |s: f64| {
            if s >= R { 1.0 } else { libm::exp(-0.5 * (R - s) * (R - s)) - libm::exp(-0.5 * R * R) }
        };
        let pairs = dims.div_ceil(2).max(1) as f64;
        let (mut k, mut worst) = (1.0f64, 0.0f64);
        while k <= pairs {
            worst = worst.max(k * g(mu / libm::sqrt(k)));
            k *= 2.0;
        }
        let tau = if pairs > 1.0 { (2.0 * worst).min(1.0) } else { worst };
        self.planned_steps as f64 * self.sampling_rate * tau
    }
}

impl ShuffledDpSgdParams {
    /// `k` of the accumulation grid `Λ_g = 2^k` of the exact release: the smallest power of
    /// two with `N·c ≤ 2⁵²·Λ_g`, so that every partial sum of `≤ N` gradients rounded to
    /// `Λ_g` (each coordinate `≤ c + Λ_g/2`) is an integer multiple of `Λ_g` below `2⁵³·Λ_g`:
    /// the sum is computed exactly (module docs, "Exact release").
    fn accumulation_exponent(&self, capacity: u64) -> i32 {
        let span = mul_up(count_up(capacity), self.clip_norm); // ≤ 2^40·1e100: finite
        let k = crate::grid_release::floor_log2(span) - 52;
        if libm::scalbn(1.0, k + 52) < span { k + 1 } else { k }
    }

    /// The public bound `E` on the distance between the computed batch projection of the
    /// (exact) sum and the exact projection, for a model of `D = param_len` coordinates in
    /// `P` projected blocks: `P·(c′·γ_{D+9} + √D·2⁻¹⁰⁷⁵)` (`0` without batch clipping).
    fn projection_error(&self, param_len: usize, blocks: usize) -> f64 {
        let Some(bc) = self.batch_clip else { return 0.0 };
        let d = count_up(param_len as u64);
        let projections = match bc.scope {
            BatchClipScope::PerBlock => count_up(blocks as u64),
            BatchClipScope::AllMoved => 1.0,
        };
        // 2⁻¹⁰⁷⁵·√D: the underflows of the rescaling, one per coordinate.
        let underflow = mul_up(sqrt_up(d), f64::from_bits(1) / 2.0);
        mul_up(projections, add_up(mul_up(bc.norm, gamma_up(add_up(d, 9.0))), underflow))
    }

    /// The grid and integer noise of the exact release of a step on `plan` with `capacity`
    /// slots ([`NoiseMode::Exact`], module docs): sensitivity `Δ = c + √D·Λ_g/2` (one
    /// record's gradient rounded to the accumulation grid `Λ_g ≈ N·c·2⁻⁵²`), `d = D`, noise
    /// multiplier `σ_eff`, computation error `E` = the batch projection's
    /// `P·(c′·γ_{D+9} + √D·2⁻¹⁰⁷⁵)` (the sum itself is exact), value bound
    /// `M = N·(c + Λ_g/2) + E`, `f64` values. Its [`resolution`](GaussianGrid::resolution)
    /// is the `Λ` the released sum is a multiple of; moved (fixed) coordinates draw
    /// [`GaussianGrid::scaled_noise`]`(σ/σ_eff)` (`σ₀/σ_eff`).
    ///
    /// ```
    /// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan,
    ///     ShuffledDpSgdParams, WeightLayout};
    /// let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
    ///     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
    /// let plan = ShufflePlan::new(&blocks, 12)?;
    /// let grid = ShuffledDpSgdParams::new(0.1, 1.0, 1.1, 0.05, 100).exact_grid(&plan, 1000)?;
    /// // √12·Λ ≤ c/256: Λ = 2⁻¹⁰, and σ_eff·c is inflated by less than 0.4 %.
    /// assert_eq!(grid.resolution(), 2f64.powi(-10));
    /// assert!(grid.continuous_sigma() >= 1.1 && grid.continuous_sigma() < 1.1 * 1.004);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for parameters outside their domains (as the step), a capacity
    /// outside `[1, 2⁴⁰)`, `param_len ≥ 2⁴⁰` (noise elements), or a release no `f64` grid
    /// holds (e.g. `σ·√D > 2³¹`: the integer noise would leave the sampler's range).
    pub fn exact_grid(&self, plan: &ShufflePlan<'_>, capacity: u64) -> Result<GaussianGrid> {
        self.validate()?;
        check_capacity(capacity)?;
        let d = plan.param_len();
        if d as u64 >= 1 << 40 {
            let value = d as f64;
            return Err(Error::OutOfRange {
                name: "param_len (exact noise elements)",
                value,
                allowed: "[1, 2^40)",
            });
        }
        let half_step = libm::scalbn(1.0, self.accumulation_exponent(capacity) - 1);
        let err = self.projection_error(d, plan.blocks().len());
        let per_coordinate = add_up(self.clip_norm, half_step);
        let spec = GaussianGridSpec {
            l2_sensitivity: add_up(self.clip_norm, mul_up(sqrt_up(count_up(d as u64)), half_step)),
            dimension: d as u64,
            computation_error: err,
            value_bound: add_up(mul_up(count_up(capacity), per_coordinate), err),
            format: GridFormat::F64,
        };
        GaussianGrid::calibrate(&spec, self.effective_noise_multiplier())
    }

    /// The integer noise of moved and of fixed coordinates for `grid`.
    fn exact_noises(&self, grid: &GaussianGrid) -> Result<(DiscreteGaussian, DiscreteGaussian)> {
        let eff = self.effective_noise_multiplier();
        let fixed = self.fixed_noise_multiplier.unwrap_or(self.noise_multiplier);
        Ok((grid.scaled_noise(self.noise_multiplier / eff)?, grid.scaled_noise(fixed / eff)?))
    }
}

/// What a step did. `batch_size` and the clipping counts depend on the private data: keep
/// them inside the trusted trainer, never release them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// Records sampled into the batch.
    pub batch_size: u64,
    /// Sampled records whose gradient was clipped.
    pub clipped: u64,
    /// Batch projections that shrank the sum.
    pub batch_clipped: usize,
    /// Sampled records whose gradient had NaN/∞ and was replaced by zero.
    pub non_finite: u64,
    /// `σ_eff`, the noise multiplier charged.
    pub effective_noise_multiplier: f64,
    /// The noise the step drew.
    pub noise_mode: NoiseMode,
    /// `Λ` of the exact release: the noisy sum was a multiple of it before the division by
    /// `B` ([`ShuffledDpSgdParams::exact_grid`]); `None` for [`NoiseMode::UnsafeFloat`].
    pub resolution: Option<f64>,
}

/// Scratch (`f64`) for [`shuffled_dp_sgd_step`]: two buffers of `param_len`.
///
/// ```
/// # use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout,
/// #     shuffled_dp_sgd_step_scratch_len};
/// # let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
/// #     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
/// assert_eq!(shuffled_dp_sgd_step_scratch_len(&ShufflePlan::new(&blocks, 12)?)?, 24);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SizeOverflow`] if `2·param_len` overflows.
pub fn shuffled_dp_sgd_step_scratch_len(plan: &ShufflePlan<'_>) -> Result<usize> {
    crate::error::mul_size(plan.param_len(), 2, "shuffled DP-SGD scratch")
}

/// Calls its argument once per `(offset, len)` range of a buffer.
type Ranges<'a> = &'a dyn Fn(&mut dyn FnMut(usize, usize));
/// Calls its argument once per slice of a set of coordinates.
type Slices<'a> = &'a mut dyn FnMut(&mut dyn FnMut(&[f64]));

/// L2 norm of the slices `each` visits, as `scale · root` (the product can overflow when
/// every entry is finite: 1e308 twice). One pass `Σ x²` when it neither overflows nor
/// approaches the subnormal range (`scale = 1`; each square carries one rounding, the sum
/// `γ_D`); otherwise a second pass scaled by the largest magnitude `m` (`scale = m`).
fn scaled_norm(each: Slices<'_>) -> (f64, f64) {
    let (mut m, mut s) = (0.0f64, 0.0f64);
    each(&mut |v| {
        for &x in v {
            m = m.max(x.abs());
            s += x * x;
        }
    });
    // s ≥ 2^-900: at most 2^53 squares that underflow err by ≤ 2^-1075 each, in all
    // ≤ 2^-1022 ≤ 2^-122·s, far inside the clipping margin.
    if s.is_finite() && s >= 1.2e-271 {
        return (1.0, libm::sqrt(s));
    }
    if m == 0.0 {
        return (1.0, 0.0);
    }
    let mut t = 0.0;
    each(&mut |v| t += v.iter().map(|&x| (x / m) * (x / m)).sum::<f64>());
    (m, libm::sqrt(t))
}

/// Projects the coordinates of `ranges` (offset, len) onto the ball of radius `c`.
fn project(v: &mut [f64], c: f64, ranges: Ranges<'_>) -> bool {
    let (scale, root) = scaled_norm(&mut |f| ranges(&mut |o, n| f(&v[o..o + n])));
    if root <= c / scale {
        return false;
    }
    let s = (c / scale) / root;
    ranges(&mut |o, n| v[o..o + n].iter_mut().for_each(|x| *x *= s));
    true
}

fn check_capacity(records: u64) -> Result<()> {
    if records == 0 || records >= 1 << 40 {
        let value = records as f64;
        return Err(Error::OutOfRange { name: "capacity N", value, allowed: "[1, 2^40)" });
    }
    Ok(())
}

/// Checks everything that does not depend on the data.
#[allow(clippy::too_many_arguments)]
fn check_inputs<T: Element>(
    weights: &[T],
    state: &[&mut [T]],
    plan: &ShufflePlan<'_>,
    params: &ShuffledDpSgdParams,
    records: u64,
    draw: Draw<'_>,
    perms_len: usize,
    scratch_len: usize,
) -> Result<()> {
    params.validate()?;
    let d = plan.param_len();
    let shape = |arg, got| -> Result<()> {
        if got == d {
            Ok(())
        } else {
            Err(Error::ShapeMismatch { arg, axis: "len (param_len)", expected: d, got })
        }
    };
    shape("weights", weights.len())?;
    for s in state {
        shape("optimizer state", s.len())?;
    }
    if perms_len != plan.permutation_len() {
        let expected = plan.permutation_len();
        return Err(Error::ShapeMismatch { arg: "perms", axis: "len", expected, got: perms_len });
    }
    check_scratch(scratch_len, shuffled_dp_sgd_step_scratch_len(plan)?)?;
    check_capacity(records)?;
    if draw.stream.checked_add(STREAMS - 1).is_none() {
        return Err(Error::SizeOverflow { what: "the step's stream ids (draw.stream + 2)" });
    }
    if let Some(i) = weights.iter().position(|w| !w.is_finite()) {
        return Err(Error::NonFinite { arg: "weights", index: i });
    }
    Ok(())
}

/// The checks on `ledger` that need no data, run before any work: its unit, its kind (an
/// RDP ledger), and in unsafe-float mode the bounded-support check against its δ.
fn check_ledger(ledger: &dyn Accountant, params: &ShuffledDpSgdParams, dims: usize) -> Result<()> {
    PRIVACY_UNIT.check_charge(ledger.unit())?;
    let Amount::Rdp { delta, .. } = ledger.total() else {
        return Err(Error::Unsupported {
            what: "shuffled DP-SGD is charged on an RDP ledger (Ledger::new_rdp)",
        });
    };
    // The bounded support is an effect of the f64 Gaussian: the exact release has none.
    if params.noise_mode == NoiseMode::UnsafeFloat {
        let (tail, allowed) = (params.support_delta(dims), delta / 100.0);
        if tail.is_nan() || tail > allowed {
            return Err(Error::Infeasible {
                condition: "support_delta ≤ δ/100: the f64 Gaussian's support |z| ≤ 8.57 must stay invisible (σ too small)",
                lhs: tail,
                rhs: allowed,
            });
        }
    }
    Ok(())
}

/// What one step costs: [`Cost::SubsampledGaussian`] at `(q, σ_eff)`, one step.
fn step_cost(params: &ShuffledDpSgdParams) -> Cost {
    Cost::SubsampledGaussian {
        rate: params.sampling_rate,
        noise_multiplier: params.effective_noise_multiplier(),
        steps: 1,
    }
}

/// One step of shuffled DP-SGD (Algorithm 1) on flat buffers (module docs), drawing
/// [`STREAMS`] fresh stream ids from `session` and charging its ledger, which must be an RDP
/// ledger kept for [`PRIVACY_UNIT`].
///
/// `capacity` is the public number of record slots `N` (module docs: never the private
/// dataset size). `gradient(slot, weights, out)` writes the gradient of the record in
/// `slot` at `weights` into `out` (`param_len` values, same layout; zeros for an empty
/// slot). `state` holds optimizer buffers that are permuted with the weights; they may
/// only be functions of released `g̃`s (module docs). `perms` receives the step's
/// permutations (for audit). `scratch` needs [`shuffled_dp_sgd_step_scratch_len`] values;
/// on success `scratch[..param_len]` holds `g̃ = (ĝ + z)/B`, permuted like the weights (in
/// exact mode `ĝ + z` is the grid release of the sum, module docs).
///
/// Every check runs before the ledger charge; on any error neither the weights, the state
/// nor the ledger change (the session's stream ids are consumed either way). A failing
/// `gradient` call aborts the step the same way and erases `scratch`. The ledger's unit and
/// kind (and, in unsafe-float mode, the bounded-support check) are checked before any
/// `gradient` call; the budget when the step is charged, after the noisy sum is formed and
/// before anything is written.
///
/// # Errors
/// * [`Error::OutOfRange`] for parameters outside their domains (`q ∉ (0, 1]`, `c ≤ 0`,
///   `σ ≤ 0`, NaN/∞, `T = 0`, `c ∉ [1e-100, 1e100]`, `σ·c` not finite), `N = 0` or
///   `N ≥ 2^40`, or (exact mode) a model or sum no grid holds
///   ([`ShuffledDpSgdParams::exact_grid`]); [`Error::SizeOverflow`] when the session's
///   stream ids are used up.
/// * [`Error::ShapeMismatch`] for buffers whose length is not `param_len` (or
///   `permutation_len` for `perms`); [`Error::ScratchTooSmall`].
/// * [`Error::NonFinite`] for NaN/∞ in the weights (a per-example gradient with NaN/∞ is
///   replaced by zero and counted, see the module docs).
/// * [`Error::UnitMismatch`] for a ledger of another unit; [`Error::Unsupported`] for a
///   ledger that is not an RDP ledger; [`Error::Infeasible`] when the budget is exhausted
///   or, in unsafe-float mode, the bounded support would be visible.
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::{Delta, Epsilon};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::session::Session;
/// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan,
///     ShuffledDpSgdParams, WeightLayout, shuffled_dp_sgd_step,
///     shuffled_dp_sgd_step_scratch_len};
/// let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
///     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
/// let plan = ShufflePlan::new(&blocks, 12)?;
/// let mut w = [0.1f32; 12];
/// let mut momentum = [0.0f32; 12];
/// // A session: a key from the operating system, fresh stream ids, an RDP ledger for records.
/// let ledger = Ledger::new_rdp(PrivacyUnit::Record, Epsilon::new(8.0)?, Delta::new(1e-5)?)?;
/// let mut session = Session::new(ledger)?;
/// let params = ShuffledDpSgdParams::new(0.1, 1.0, 1.1, 0.05, 100);
/// let mut perms = [0u32; 3];
/// let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(&plan)?];
/// let report = shuffled_dp_sgd_step(
///     &mut w, &mut [&mut momentum[..]], &plan, &params, 1000,
///     |record, _w, g: &mut [f64]| { g.fill(record as f64 % 3.0); Ok(()) },
///     &mut session, &mut perms, &mut scratch,
/// )?;
/// assert!(report.batch_size > 50 && report.batch_size < 150);
/// assert_eq!(session.ledger().charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn shuffled_dp_sgd_step<T, G, const N: usize>(
    weights: &mut [T],
    state: &mut [&mut [T]],
    plan: &ShufflePlan<'_>,
    params: &ShuffledDpSgdParams,
    capacity: u64,
    gradient: G,
    session: &mut Session<N>,
    perms: &mut [u32],
    scratch: &mut [f64],
) -> Result<StepReport>
where
    T: Element,
    G: FnMut(u64, &[T], &mut [f64]) -> Result<()>,
{
    let r = session.begin(STREAMS)?;
    shuffled_dp_sgd_step_keyed(
        weights,
        state,
        plan,
        params,
        capacity,
        gradient,
        r.draw,
        Some(r.ledger),
        perms,
        scratch,
    )
}

/// [`shuffled_dp_sgd_step`] with an explicit key and first stream id (the step uses
/// `draw.keyed(0..3)`, module docs) and an optional ledger: **for replay, audit, and hosts
/// that manage their own stream ids** — a `(key, stream)` pair must never serve two
/// releases (step `t` of a run numbered from `base` takes `stream: base + 3·t`). Without
/// a ledger the caller accounts for the step ([`Cost::SubsampledGaussian`] at `(q, σ_eff)`)
/// and should run the bounded-support check of unsafe-float mode itself.
///
/// ```
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::session::Draw;
/// use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan,
///     ShuffledDpSgdParams, WeightLayout, shuffled_dp_sgd_step_keyed,
///     shuffled_dp_sgd_step_scratch_len};
/// let blocks = [Block::Mlp(MlpBlock { up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
///     gate: None, down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn) })];
/// let plan = ShufflePlan::new(&blocks, 12)?;
/// let params = ShuffledDpSgdParams::new(0.1, 1.0, 1.1, 0.05, 100);
/// let key = NoiseKey::generate()?; // kept in a key store to replay the run later
/// let mut replay = |step: u64| -> dpattn_core::Result<[f32; 12]> {
///     let mut w = [0.1f32; 12];
///     let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(&plan)?];
///     shuffled_dp_sgd_step_keyed(&mut w, &mut [], &plan, &params, 1000,
///         |record, _w, g: &mut [f64]| { g.fill(record as f64 % 3.0); Ok(()) },
///         Draw { key: &key, stream: 3 * step }, None, &mut [0u32; 3], &mut scratch)?;
///     Ok(w)
/// };
/// assert_eq!(replay(5)?, replay(5)?); // the same key and streams reproduce the step
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`shuffled_dp_sgd_step`]; [`Error::SizeOverflow`] when `draw.stream + 2` overflows.
#[allow(clippy::too_many_arguments)]
pub fn shuffled_dp_sgd_step_keyed<T, G>(
    weights: &mut [T],
    state: &mut [&mut [T]],
    plan: &ShufflePlan<'_>,
    params: &ShuffledDpSgdParams,
    capacity: u64,
    mut gradient: G,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    perms: &mut [u32],
    scratch: &mut [f64],
) -> Result<StepReport>
where
    T: Element,
    G: FnMut(u64, &[T], &mut [f64]) -> Result<()>,
{
    let d = plan.param_len();
    check_inputs(weights, state, plan, params, capacity, draw, perms.len(), scratch.len())?;
    let exact = match params.noise_mode {
        NoiseMode::Exact => {
            let grid = params.exact_grid(plan, capacity)?;
            Some((grid, params.exact_noises(&grid)?))
        }
        NoiseMode::UnsafeFloat => {
            // The noisy sum, at most capacity·c plus the largest f64 normal (8.57) times
            // the largest std, must be finite (and leave room for the update).
            let sd = params.noise_multiplier.max(params.fixed_noise_multiplier.unwrap_or(0.0))
                * params.clip_norm;
            check_largest(
                "noise std σ·c (its largest Gaussian draw, 8.57·σ·c, must stay below f64::MAX/2)",
                sd,
                capacity as f64 * params.clip_norm + sd * max_box_muller::<f64>(),
                f64::MAX / 2.0,
                "a noise multiplier whose largest draw is finite",
            )?;
            None
        }
        NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
    };
    if let Some(l) = ledger.as_deref() {
        check_ledger(l, params, d)?;
    }
    let accumulation = exact.as_ref().map(|_| params.accumulation_exponent(capacity));
    let (sum, rest) = scratch.split_at_mut(d);
    let example = &mut rest[..d];
    // Data-dependent part, into scratch only: selection, gradients, clipping, batch clip.
    sum.fill(0.0);
    let sampler = PoissonSubsampling::new(params.sampling_rate)?;
    let selection = draw.keyed(0);
    let (mut batch_size, mut clipped, mut non_finite) = (0u64, 0u64, 0u64);
    for slot in 0..capacity {
        if !sampler.included_at(&selection, slot)? {
            continue;
        }
        batch_size += 1;
        if let Err(e) = gradient(slot, weights, example) {
            sum.fill(0.0);
            example.fill(0.0);
            return Err(e);
        }
        if example.iter().any(|g| !g.is_finite()) {
            non_finite += 1;
            continue;
        }
        // DP-Forward's clip (one block of D entries): the exact norm of the stored result is
        // ≤ c despite rounding, also when the norm itself overflows.
        let block = MatMut::from_row_major(&mut *example, 1, d)?;
        let report =
            clip_checked(block, 1, ClipRegion::Frobenius, ClipMode::Clip, params.clip_norm);
        clipped += report.scaled as u64;
        match accumulation {
            // Exact mode: the clipped gradient rounded to the grid Λ_g = 2^k, so that every
            // partial sum is a multiple of Λ_g below 2^53·Λ_g and each addition is exact.
            Some(k) => sum.iter_mut().zip(example.iter()).for_each(|(s, g)| {
                *s += libm::scalbn(libm::round(libm::scalbn(*g, -k)), k);
            }),
            None => sum.iter_mut().zip(example.iter()).for_each(|(s, g)| *s += g),
        }
    }
    let blocks = plan.blocks().len();
    let mut batch_clipped = 0;
    if let Some(bc) = params.batch_clip {
        match bc.scope {
            BatchClipScope::PerBlock => {
                for i in 0..blocks {
                    let ranges = |f: &mut dyn FnMut(usize, usize)| plan.for_each_block_range(i, f);
                    batch_clipped += usize::from(project(sum, bc.norm, &ranges));
                }
            }
            BatchClipScope::AllMoved => {
                let ranges = |f: &mut dyn FnMut(usize, usize)| {
                    (0..blocks).for_each(|i| plan.for_each_block_range(i, &mut *f));
                };
                batch_clipped += usize::from(project(sum, bc.norm, &ranges));
            }
        }
    }
    // Noise (std σ₀·c, σ·c on moved tensors) into the sum, and the permutations: every
    // fallible draw happens before the charge.
    let c = params.clip_norm;
    let moved_std = params.noise_multiplier * c;
    let std = example;
    std.fill(params.fixed_noise_multiplier.unwrap_or(params.noise_multiplier) * c);
    for i in 0..blocks {
        plan.for_each_block_range(i, |o, n| std[o..o + n].fill(moved_std));
    }
    let noise = draw.keyed(1);
    match &exact {
        Some((grid, (moved, fixed))) => {
            let drawn = release_exact(grid, moved, fixed, moved_std, &noise, sum, std);
            if let Err(e) = drawn {
                sum.fill(0.0);
                return Err(e);
            }
        }
        None => {
            let mut z = [0.0f64; 64];
            for start in (0..d).step_by(z.len()) {
                let z = &mut z[..(d - start).min(64)];
                Gaussian::STANDARD.fill_keyed::<f64>(&noise, start as u64, z)?;
                for ((s, &sd), &zj) in sum[start..].iter_mut().zip(&std[start..]).zip(z.iter()) {
                    *s += sd * zj;
                }
            }
        }
    }
    let perms = plan.sample_keyed(&draw.keyed(2), perms)?;
    if let Some(ledger) = ledger {
        ledger.charge(PRIVACY_UNIT, &step_cost(params), params.noise_mode)?;
    }
    // Release: w ← P[w − η·(ĝ + z)/B] for the weights, P[·] for the optimizer state, and
    // g̃ = P[(ĝ + z)/B] left in `sum` for optimizers with state.
    let b = params.sampling_rate * capacity as f64;
    let scale = params.learning_rate / b;
    for (w, g) in weights.iter_mut().zip(sum.iter_mut()) {
        *w = T::from_f64(w.to_f64() - scale * *g);
        *g /= b;
    }
    plan.apply(&perms, weights, std)?;
    for s in state.iter_mut() {
        plan.apply(&perms, s, std)?;
    }
    plan.apply(&perms, sum, std)?;
    Ok(StepReport {
        batch_size,
        clipped,
        batch_clipped,
        non_finite,
        effective_noise_multiplier: params.effective_noise_multiplier(),
        noise_mode: params.noise_mode,
        resolution: exact.map(|(grid, _)| grid.resolution()),
    })
}

/// The exact release of the noisy sum in place: coordinate `j` becomes
/// `grid.release(sum_j, z_j)`, `z_j` element `j` of `stream` (window layout) drawn from
/// `moved` where `std_j = moved_std`, from `fixed` elsewhere.
fn release_exact(
    grid: &GaussianGrid,
    moved: &DiscreteGaussian,
    fixed: &DiscreteGaussian,
    moved_std: f64,
    stream: &KeyedStream,
    sum: &mut [f64],
    std: &[f64],
) -> Result<()> {
    let (g, mut z) = (grid.grid(), [0i64; 64]);
    let mut start = 0;
    while start < sum.len() {
        let v = std[start];
        let len = std[start..].iter().position(|&x| x != v).unwrap_or(sum.len() - start);
        let noise = if v == moved_std { moved } else { fixed };
        for (k, chunk) in sum[start..start + len].chunks_mut(z.len()).enumerate() {
            let z = &mut z[..chunk.len()];
            noise.fill_keyed(stream, (start + k * 64) as u64, z)?;
            chunk.iter_mut().zip(z.iter()).for_each(|(x, &zj)| *x = g.release(*x, zj));
        }
        start += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accumulation_grid_makes_every_partial_sum_exact() {
        for (n, c) in [(1u64, 1.0), (2000, 1.0), (1 << 39, 0.3), (7, 1e100), (1 << 20, 1e-100)] {
            let p = ShuffledDpSgdParams::new(0.5, c, 1.0, 0.1, 10);
            let k = p.accumulation_exponent(n);
            let g = libm::scalbn(1.0, k);
            // The smallest power of two with N·c ≤ 2^52·Λ_g.
            assert!(n as f64 * c <= libm::scalbn(g, 52) && n as f64 * c > libm::scalbn(g, 51));
        }
        // 3000 values of magnitude ≤ c rounded to Λ_g (N = 3000): the f64 running sum equals
        // the integer sum of the grid indices, at every step.
        let (n, c) = (3000u64, 0.7);
        let k = ShuffledDpSgdParams::new(0.5, c, 1.0, 0.1, 10).accumulation_exponent(n);
        let (mut sum, mut exact, mut x) = (0.0f64, 0i128, 0x2545_f491_4f6c_dd1du64);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = c * ((x >> 11) as f64 / 2f64.powi(53) * 2.0 - 1.0);
            let m = libm::round(libm::scalbn(v, -k));
            sum += libm::scalbn(m, k);
            exact += m as i128;
            assert_eq!(libm::scalbn(sum, -k), exact as f64);
        }
    }
}
