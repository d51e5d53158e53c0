//! Output-perturbation DP cross-attention — **our extension** (`[EXT]`), not a mechanism of
//! the five source papers (paper 001's tree-based DP cross-attention is a different
//! mechanism).
//!
//! **Setting.** Public queries `Q`; a private context of keys and values `K, V` (for each
//! batch element, `s_k` positions, each a key row and a value row per head). The caller
//! declares public bounds `R_k` and `R_v`; private rows are **clamped** into them (a key
//! row longer than `R_k` is scaled down to norm `R_k`, likewise values to `R_v`, per head)
//! — rejecting an out-of-bound private row would itself leak, so it is clamped, not
//! refused. Public queries are used as they are.
//!
//! **Neighbour relation.** Two contexts are neighbours if they differ in the key and value
//! rows of **one position** of one batch element (all heads of that position; replace-one,
//! so `s_k` and the public key-padding mask are fixed).
//!
//! **Guarantee.** With `a_i = scale · ‖q_i‖ · R_k` and `n` the number of visible keys, one
//! query row's output moves by at most `Δ_i = 2 R_v · T_i`, `T_i = f(a_i) / (f(a_i) + (n − 1)
//! f_min(a_i))`, i.e. `2 R_v / (1 + (n − 1) e^{−2 a_i})` for softmax and
//! `2 R_v · cosh a_i / (cosh a_i + n − 1)` for `cosh` ([`row_sensitivity`]). The whole
//! output of a batch element (all heads, all query rows) has L2 (Frobenius) sensitivity
//! `Δ_b = √(Σ_{h,i} Δ_{h,i}²)`, and adding `N(0, σ_b²)` to every element with `σ_b` from
//! the analytic Gaussian mechanism (Balle & Wang 2018) makes the release `(ε, δ)`-DP.
//! The proof is in `docs/PRIVACY.md` §2; the tests check the bound by brute force and
//! show that it is attained. Computed sensitivities are rounded upward.
//!
//! **As shipped (the default [`NoiseMode::Exact`]).** The attention is computed in `f64`
//! and every output element of batch element `b` is released on a public power-of-two grid
//! `Λ_b` with exact discrete Gaussian noise ([`crate::grid_release`]): the noise is
//! calibrated at `Δ′_b = Δ_b + 2E_b + √(H·s_q·d_v)·Λ_b`, which covers the rounding to the
//! grid and a proven bound `E_b` on the kernel's floating-point error
//! ([`attention_error_bound`]), so the returned floats are DP, not only the idealised
//! real-valued mechanism (`docs/PRIVACY.md` §2.5). [`NoiseMode::UnsafeFloat`] keeps the
//! textbook `f32` path (floating-point Gaussian noise added in the kernel), whose low-order
//! bits leak; it exists for comparisons and is never a default.
//!
//! In the unsafe float mode the noise is the output draw of [`crate::noisy_attention`]
//! (same stream layout as the GPU kernel's float path). The sensitivity shrinks like `1/n`
//! for long contexts, which is what makes output perturbation useful here.

use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::attention::dispatch::{self, Operands};
use crate::attention::tiled::{GridDraw, NoiseDraw, RowClamp};
use crate::attention::{AttentionParams, Extras, attention_scratch_len, prepare_f32, prepare_f64};
use crate::attention_options::{Kernel, Mask, Scale, ScoreFn};
use crate::batched::{BatchedMut, BatchedRef};
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::directed_rounding::{add_down, add_up, div_down, div_up, mul_down, mul_up, sqrt_up};
use crate::element::Element;
use crate::error::{Error, Result, positive_finite};
use crate::grid_release::{
    GaussianGrid, GaussianGridSpec, GridFormat, NoiseMode, constant_time_exact_delta,
};
use crate::privacy_params::PrivacyBudget;
use crate::sampling::KeyedStream;
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

/// The privacy unit: one token (position) of the private context, its key and value rows in
/// every head.
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::TOKEN;

/// Stream ids one release uses (`draw.stream` only).
pub const STREAMS: u64 = 1;

/// Allowed range of the norm bounds `R_k`, `R_v`: wide enough for any model, narrow enough
/// that clamped rows keep their bound through `f32` rounding (no subnormal clamp factors).
const NORM_RANGE: (f64, f64) = (1.0 / (1u64 << 60) as f64, (1u64 << 60) as f64);

/// Public parameters of a DP cross-attention release.
#[derive(Debug, Clone, Copy)]
pub struct OutputPerturbationParams<'a> {
    /// `R_k`: private key rows are clamped to this L2 norm; in `[2^-60, 2^60]`.
    pub key_norm: f64,
    /// `R_v`: private value rows are clamped to this L2 norm; in `[2^-60, 2^60]`.
    pub value_norm: f64,
    /// `(ε, δ)` of one release; `δ > 0` (Gaussian mechanism).
    pub budget: PrivacyBudget,
    /// The logit scale.
    pub scale: Scale,
    /// `exp` (softmax) or `cosh`.
    pub score: ScoreFn,
    /// Public key-padding mask `[batch, s_k]` (`true` = the key exists), if any.
    pub key_padding: Option<&'a [bool]>,
    /// The CPU kernel of the [`NoiseMode::UnsafeFloat`] path (the exact mode computes in
    /// `f64`, see [`AttentionErrorModel::CPU_F64`]).
    pub kernel: Kernel,
    /// [`NoiseMode::Exact`] (the default: the output is on a public grid with exact
    /// integer noise, DP as shipped) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

/// `Δ` of one query row: the largest L2 change of its attention output when one of its
/// `visible_keys` key/value rows is replaced, given `|logit| ≤ logit_bound` and value norms
/// `≤ value_norm`. Rounded up. `0` when no key is visible (the output is then the constant
/// zero row).
///
/// ```
/// use dpattn_core::ScoreFn;
/// use dpattn_core::output_perturbation::row_sensitivity;
/// // a = 0: uniform weights, replacing one of n rows moves the mean by at most 2R/n.
/// assert!((row_sensitivity(4, 0.0, 1.0, ScoreFn::Exp)? - 0.5).abs() < 1e-15);
/// // a = ln 2, e^{-2a} = 1/4: 2 / (1 + 3/4).
/// let d = row_sensitivity(4, 2f64.ln(), 1.0, ScoreFn::Exp)?;
/// assert!((d - 2.0 / 1.75).abs() < 1e-14);
/// assert_eq!(row_sensitivity(1, 5.0, 3.0, ScoreFn::Cosh)?, 6.0); // one key: the whole ball
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for a negative or non-finite `logit_bound`, or a `value_norm` not
/// in `(0, ∞)`.
pub fn row_sensitivity(
    visible_keys: usize,
    logit_bound: f64,
    value_norm: f64,
    score: ScoreFn,
) -> Result<f64> {
    let a = crate::error::nonneg_finite("logit_bound", logit_bound)?;
    positive_finite("value_norm", value_norm)?;
    if visible_keys == 0 {
        return Ok(0.0);
    }
    let others = (visible_keys - 1) as f64; // exact below 2^53
    // T = 1 / (1 + (n − 1) · r) with r = f_min / f_max; r is bounded below (T above).
    let pad = 1.0 - 4.0 * f64::EPSILON; // libm's exp/cosh are within 1 ulp
    let r = match score {
        ScoreFn::Exp => libm::exp(-2.0 * a) * pad,
        ScoreFn::Cosh => div_down(1.0, libm::cosh(a) * (1.0 + 4.0 * f64::EPSILON)),
    };
    let t = div_up(1.0, add_down(1.0, mul_down(others, r.max(0.0))));
    Ok(mul_up(2.0 * value_norm, t.min(1.0)))
}

/// The Frobenius sensitivity for planning before the queries are known: `rows` query rows
/// (over all heads of one batch element), every query of norm `≤ query_norm`, `n` visible
/// keys, `scale` the numeric logit scale: `√rows · row_sensitivity(n, scale · R_q · R_k, R_v)`.
///
/// ```
/// use dpattn_core::ScoreFn;
/// use dpattn_core::output_perturbation::{row_sensitivity, worst_case_sensitivity};
/// let one = row_sensitivity(1024, 0.125 * 2.0 * 2.0, 1.0, ScoreFn::Exp)?;
/// let all = worst_case_sensitivity(4 * 16, 1024, 2.0, 2.0, 1.0, 0.125, ScoreFn::Exp)?;
/// assert!((all / one - 8.0).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for norms or a scale not in `(0, ∞)`.
pub fn worst_case_sensitivity(
    rows: usize,
    visible_keys: usize,
    query_norm: f64,
    key_norm: f64,
    value_norm: f64,
    scale: f64,
    score: ScoreFn,
) -> Result<f64> {
    positive_finite("query_norm", query_norm)?;
    positive_finite("key_norm", key_norm)?;
    positive_finite("scale", scale)?;
    let a = mul_up(mul_up(scale, query_norm), key_norm);
    let row = row_sensitivity(visible_keys, a, value_norm, score)?;
    Ok(mul_up(sqrt_up(rows as f64), row))
}

/// `Δ_b` for every batch element of the actual public queries `q` (`[batch, heads, s_q, d]`)
/// against `s_k` keys, into `sensitivity[..batch]`. Written only on success.
///
/// ```
/// use dpattn_core::{BatchedRef, NoiseMode, PrivacyBudget, Scale, ScoreFn, Kernel};
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_sensitivity, row_sensitivity};
/// let q = [3.0f32, 4.0]; // one row of norm 5
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::Custom(0.1), score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto, noise_mode: NoiseMode::Exact };
/// let mut s = [0.0];
/// output_perturbation_sensitivity(BatchedRef::contiguous(&q, [1, 1, 1, 2])?, &params, 10, &mut s)?;
/// assert!((s[0] - row_sensitivity(10, 0.5, 1.0, ScoreFn::Exp)?).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for bad bounds, a zero size or bad scale; [`Error::NonFinite`] in
/// `q`; [`Error::ShapeMismatch`] for a short `sensitivity` or key padding of the wrong
/// length.
pub fn output_perturbation_sensitivity<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    sensitivity: &mut [f64],
) -> Result<()> {
    let batch = q.layout().batch();
    let scale = check_inputs(q, params, s_k)?;
    if sensitivity.len() < batch {
        return Err(Error::ShapeMismatch {
            arg: "sensitivity",
            axis: "length (batch)",
            expected: batch,
            got: sensitivity.len(),
        });
    }
    for_each_batch_sensitivity(q, params, s_k, scale, |b, d| sensitivity[b] = d)
}

/// Validates the public inputs of the sensitivity computation; returns the numeric scale.
fn check_inputs<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
) -> Result<f64> {
    let [batch, heads, s_q, d] = q.layout().shape();
    for (name, r) in [("key_norm", params.key_norm), ("value_norm", params.value_norm)] {
        if !(NORM_RANGE.0..=NORM_RANGE.1).contains(&r) {
            return Err(Error::OutOfRange { name, value: r, allowed: "[2^-60, 2^60]" });
        }
    }
    for (name, value) in [("batch", batch), ("heads", heads), ("s_q", s_q), ("d", d), ("s_k", s_k)]
    {
        if value == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    Mask { causal: false, key_padding: params.key_padding }.validate(batch, s_k)?;
    let scale = params.scale.value(d)?;
    q.check_finite_public("q")?; // public queries
    Ok(scale)
}

/// `(Δ_b, a_max)` of batch element `b`: the Frobenius sensitivity of its output and the
/// largest logit bound `scale·‖q‖·R_k` of its query rows (inputs already validated).
fn batch_bounds<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    scale: f64,
    b: usize,
) -> Result<(f64, f64)> {
    let [_, heads, s_q, _] = q.layout().shape();
    let n = params
        .key_padding
        .map_or(s_k, |p| p[b * s_k..(b + 1) * s_k].iter().filter(|&&x| x).count());
    let (mut sum_sq, mut a_max) = (0.0f64, 0.0f64);
    for h in 0..heads {
        let qh = q.head(b, h);
        for i in 0..s_q {
            let norm_sq =
                qh.row(i).iter().fold(0.0, |acc, x| add_up(acc, mul_up(x.to_f64(), x.to_f64())));
            let a = mul_up(mul_up(scale, sqrt_up(norm_sq)), params.key_norm);
            let di = row_sensitivity(n, a, params.value_norm, params.score)?;
            sum_sq = add_up(sum_sq, mul_up(di, di));
            a_max = a_max.max(a);
        }
    }
    Ok((sqrt_up(sum_sq), a_max))
}

/// Calls `f(b, Δ_b)` for every batch element (inputs already validated).
fn for_each_batch_sensitivity<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    scale: f64,
    mut f: impl FnMut(usize, f64),
) -> Result<()> {
    for b in 0..q.layout().batch() {
        f(b, batch_bounds(q, params, s_k, scale, b)?.0);
    }
    Ok(())
}

/// How the attention behind a release is computed: what the bound on its floating-point
/// error ([`attention_error_bound`]) needs to know.
///
/// ```
/// use dpattn_core::output_perturbation::AttentionErrorModel;
/// assert_eq!(AttentionErrorModel::CPU_F64.unit_roundoff, 2f64.powi(-53));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionErrorModel {
    /// Unit roundoff `u` of the arithmetic (logits, weights and accumulation): `2^-53` for
    /// `f64`, `2^-24` for `f32`.
    pub unit_roundoff: f64,
    /// A bound on the relative error of the `exp` evaluations.
    pub exp_error: f64,
    /// Keys per block of the online softmax (at most one rescale per block).
    pub key_block: usize,
}

impl AttentionErrorModel {
    /// The CPU kernel of the exact mode: `f64` throughout, `libm`'s `exp` (below one ulp,
    /// so relative error below `2^-52`), 64-key blocks, products and sums rounded
    /// separately.
    pub const CPU_F64: Self = Self {
        unit_roundoff: 1.0 / 9_007_199_254_740_992.0,
        exp_error: 2.0 / 9_007_199_254_740_992.0,
        key_block: 64,
    };
}

/// `γ_k = k·u/(1 − k·u)`, rounded up; `None` when `k·u ≥ 1/2`.
fn gamma(k: usize, u: f64) -> Option<f64> {
    let ku = mul_up(crate::directed_rounding::count_up(k as u64), u);
    (ku < 0.5).then(|| div_up(ku, add_down(1.0, -ku)))
}

/// A bound `E` on the L2 distance between the computed and the exact attention output of
/// `rows` query rows (each with logit bound `≤ logit_bound`, `n` keys, key dimension `d`,
/// value rows of norm `≤ value_norm`), for the tiled online-softmax kernel described by
/// `model`: the computation error of `docs/PRIVACY.md` §2.5. Rows that see no key are
/// exact (zero).
///
/// The derivation (standard model, every operation `(1 + θ)`, `|θ| ≤ u`): logits differ
/// from `scale·q·k` by at most `γ_{d+1}·a`; a computed weight is the exact one times a
/// factor `e^{±L}`, `L = γ_{d+1}a + (⌈n/B⌉ + 1)(2a(1 + γ_{d+1})u + ln(1 + e_exp)) + u`
/// (logit error, the rounded subtraction of the running maximum and `exp`, and at most
/// `⌈n/B⌉` rescales, which scale numerator and normaliser alike), which moves the row's
/// convex combination by at most `(e^{2L} − 1)·R_v`; the accumulator and the normaliser
/// are sums through at most `N_acc = n + ⌈n/B⌉ + 1` and `N_l = 2⌈n/B⌉ + ⌈B/8⌉ + 4`
/// roundings, which with the final division move the row by at most
/// `R_v·((u + γ_{N_l}) + γ_{N_acc}(1 + u))/(1 − γ_{N_l})` in L2 (the accumulator's error
/// is bounded by `γ·Σ_j p_j‖v_j‖`, a vector bound). `E` is `√rows` times twice the sum of
/// the two (a factor 2 of margin), rounded up.
///
/// ```
/// use dpattn_core::output_perturbation::{AttentionErrorModel, attention_error_bound};
/// let e = attention_error_bound(&AttentionErrorModel::CPU_F64, 64, 64, 1024, 0.5, 1.0)?;
/// assert!(e > 0.0 && e < 1e-11); // negligible next to any useful sensitivity
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for a model whose precision is too coarse for the sizes
/// (`n·u ≥ 1/2`) or non-finite bounds.
pub fn attention_error_bound(
    model: &AttentionErrorModel,
    rows: usize,
    d: usize,
    n: usize,
    logit_bound: f64,
    value_norm: f64,
) -> Result<f64> {
    let u = positive_finite("unit_roundoff", model.unit_roundoff)?;
    let e_exp = crate::error::nonneg_finite("exp_error", model.exp_error)?;
    let a = crate::error::nonneg_finite("logit_bound", logit_bound)?;
    let rv = positive_finite("value_norm", value_norm)?;
    if model.key_block == 0 {
        return Err(Error::OutOfRange { name: "key_block", value: 0.0, allowed: ">= 1" });
    }
    let coarse = || Error::OutOfRange {
        name: "attention error model (n * unit_roundoff)",
        value: n as f64 * u,
        allowed: "below 1/2",
    };
    let blocks = n.div_ceil(model.key_block);
    let g_d = gamma(d + 1, u).ok_or_else(coarse)?;
    let per_step = add_up(
        mul_up(mul_up(2.0, a), mul_up(add_up(1.0, g_d), u)),
        crate::directed_rounding::ln_1p_up(e_exp),
    );
    let l = add_up(add_up(mul_up(g_d, a), mul_up((blocks + 1) as f64, per_step)), u);
    let weights = crate::directed_rounding::exp_m1_up(mul_up(2.0, l));
    let g_acc = gamma(n + blocks + 1, u).ok_or_else(coarse)?;
    let g_l = gamma(2 * blocks + model.key_block.div_ceil(8) + 4, u).ok_or_else(coarse)?;
    let acc = div_up(add_up(add_up(u, g_l), mul_up(g_acc, add_up(1.0, u))), add_down(1.0, -g_l));
    let row = mul_up(2.0, mul_up(rv, add_up(weights, acc)));
    let e = mul_up(sqrt_up(crate::directed_rounding::count_up(rows as u64)), row);
    positive_finite("attention error bound", e).map_err(|_| coarse())
}

/// The exact-mode grid of batch element `b` (`None` when it sees no key: its output is the
/// constant zero): `Δ_b` and `E_b` ([`attention_error_bound`] with the largest logit bound of
/// its rows) over its `heads·s_q·d_v` outputs, values bounded by `R_v`, noise multiplier
/// `m = σ(ε, δ, 1)` of the analytic Gaussian mechanism.
#[allow(clippy::too_many_arguments)]
fn grid_of_batch<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    d_v: usize,
    model: &AttentionErrorModel,
    format: GridFormat,
    (scale, multiplier): (f64, f64),
    b: usize,
) -> Result<Option<GaussianGrid>> {
    let (delta, a_max) = batch_bounds(q, params, s_k, scale, b)?;
    if delta == 0.0 {
        return Ok(None);
    }
    let [_, heads, s_q, d] = q.layout().shape();
    let rows = crate::error::mul_size(heads, s_q, "heads * s_q")?;
    let outputs = crate::error::mul_size(rows, d_v, "heads * s_q * d_v")?;
    let spec = GaussianGridSpec {
        l2_sensitivity: delta,
        dimension: outputs as u64,
        computation_error: attention_error_bound(model, rows, d, s_k, a_max, params.value_norm)?,
        value_bound: params.value_norm,
        format,
    };
    GaussianGrid::calibrate(&spec, multiplier).map(Some)
}

/// Releases `out = attention(Q, clamp(K), clamp(V))` plus Gaussian noise for every batch
/// element `b`, `(ε, δ)`-DP for one position of the private context (see the module docs),
/// drawing fresh randomness from `session` and charging its ledger (which must be kept for
/// [`PRIVACY_UNIT`]; [`Error::UnitMismatch`] otherwise).
///
/// **Exact mode** (the default, [`NoiseMode::Exact`]): the attention is computed in `f64`
/// ([`AttentionErrorModel::CPU_F64`]) and each output element is released on batch element
/// `b`'s grid ([`output_perturbation_grid`]) with exact discrete Gaussian noise, so `out`
/// holds exact multiples of the grid's `Λ` (for `f16`/`bf16` outputs, their rounding).
/// **Unsafe float mode**: the `f32` kernel adds floating-point `N(0, σ_b²)` (not DP as
/// shipped, `docs/PRIVACY.md` §2.5).
///
/// `sigma` (`batch · heads` entries) receives the noise scale of each `(b, h)`: `σ_b`, or in
/// exact mode the discrete Gaussian's parameter `s·Λ` (`0` where no noise is needed) — keep
/// it, with the session's epoch and the stream id (`session.next_stream()` before the call),
/// for audit. `scratch` has [`output_perturbation_scratch_len`] `f32` elements. The ledger
/// is charged after every input has been validated and before anything is computed (as
/// `(ε, δ)` on an approximate-DP ledger, as `ρ` on zCDP and RDP ledgers; in its mode); a
/// refused charge or any invalid input leaves `out` and the ledger untouched (`sigma` may
/// then hold the computed values; the stream id is consumed either way). When no batch
/// element sees any key the release is a constant: zCDP and RDP ledgers are not charged.
///
/// Noise element `(b, h, i, c)` is element `((b · heads + h) · s_q + i) · d_v + c` of the
/// release's stream: its exact-sampler window in exact mode, the `f64` Gaussian layout of
/// [`crate::noisy_attention`] in float mode.
///
/// ```
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_attention,
///     output_perturbation_scratch_len};
/// use dpattn_core::session::Session;
/// use dpattn_core::{BatchedMut, BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};
/// let (s_q, s_k, d) = (2, 512, 4);
/// let q = vec![0.5f32; s_q * d];
/// let kv: Vec<f32> = (0..s_k * d).map(|i| ((i % 13) as f32 - 6.0) / 12.0).collect();
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto, noise_mode: NoiseMode::Exact };
/// // A session: a key from the operating system, fresh stream ids, a ledger for tokens.
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let (mut out, mut sigma) = (vec![0f32; s_q * d], [0.0]);
/// output_perturbation_attention(
///     BatchedMut::contiguous(&mut out, [1, 1, s_q, d])?,
///     BatchedRef::contiguous(&q, [1, 1, s_q, d])?,
///     BatchedRef::contiguous(&kv, [1, 1, s_k, d])?,
///     BatchedRef::contiguous(&kv, [1, 1, s_k, d])?,
///     &params, &mut session, &mut sigma,
///     &mut vec![0f32; output_perturbation_scratch_len(d, d)?],
/// )?;
/// // ‖q‖ = 1, a = 1/2: Δ = √2 · 2 / (1 + 511/e) ≈ 0.015, and σ ≈ 4.2 Δ at (1, 1e-6).
/// assert!(sigma[0] > 0.05 && sigma[0] < 0.08);
/// assert_eq!(session.ledger().charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`](crate::attention::attention()) and
/// [`output_perturbation_sensitivity`]; [`Error::OutOfRange`] for `δ = 0` or (exact mode) a
/// release whose element indices reach `2^40`; [`Error::ShapeMismatch`] for a `sigma` slice
/// shorter than `batch · heads`; [`Error::ScratchTooSmall`]; the ledger's error when the
/// charge does not fit.
#[allow(clippy::too_many_arguments)]
pub fn output_perturbation_attention<T: Element, O: Element, const N: usize>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    session: &mut Session<N>,
    sigma: &mut [f64],
    scratch: &mut [f32],
) -> Result<Calibrated> {
    let r = session.begin(STREAMS)?;
    output_perturbation_attention_keyed(
        out,
        q,
        k,
        v,
        params,
        r.draw,
        Some(r.ledger),
        sigma,
        scratch,
    )
}

/// [`output_perturbation_attention`] with an explicit key and stream id (its one stream is
/// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage their
/// own stream ids** — a `(key, stream)` pair must never serve two releases.
///
/// ```
/// use dpattn_core::output_perturbation::{OutputPerturbationParams,
///     output_perturbation_attention_keyed, output_perturbation_scratch_len};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::session::Draw;
/// use dpattn_core::{BatchedMut, BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};
/// let (q, kv) = (vec![0.5f32; 4], vec![0.25f32; 64]);
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto, noise_mode: NoiseMode::Exact };
/// let key = NoiseKey::generate()?; // kept in a key store to replay the release later
/// let mut replay = |out: &mut [f32]| output_perturbation_attention_keyed(
///     BatchedMut::contiguous(out, [1, 1, 1, 4])?, BatchedRef::contiguous(&q, [1, 1, 1, 4])?,
///     BatchedRef::contiguous(&kv, [1, 1, 16, 4])?, BatchedRef::contiguous(&kv, [1, 1, 16, 4])?,
///     &params, Draw { key: &key, stream: 12 }, None, &mut [0.0],
///     &mut vec![0f32; output_perturbation_scratch_len(4, 4)?]);
/// let (mut a, mut b) = ([0f32; 4], [0f32; 4]);
/// replay(&mut a)?;
/// replay(&mut b)?;
/// assert_eq!(a, b); // the same key and stream reproduce the release exactly
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`output_perturbation_attention`].
#[allow(clippy::too_many_arguments)]
pub fn output_perturbation_attention_keyed<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    sigma: &mut [f64],
    scratch: &mut [f32],
) -> Result<Calibrated> {
    let (key, stream) = (draw.key, draw.stream);
    let total = crate::error::mul_size(q.layout().batch(), q.layout().heads(), "batch * heads")?;
    let (s_k, d_v) = (k.layout().seq(), v.layout().dim());
    let attn = AttentionParams {
        mask: Mask { causal: false, key_padding: params.key_padding },
        scale: params.scale,
        score: params.score,
        kernel: params.kernel,
    };
    let noise_stream = KeyedStream::new(key, stream);
    let clamp = Some(RowClamp { key: params.key_norm, value: params.value_norm });
    let ops = Operands { out, first: None, q, k, v };
    if params.noise_mode == NoiseMode::UnsafeFloat {
        let calibrated = output_perturbation_calibrate(q, params, s_k, sigma)?;
        let out_noise = Some(NoiseDraw { stream: &noise_stream, sigma: &sigma[..total] });
        let extras = Extras { logit_noise: None, out_noise, out_grid: None, clamp };
        let (kernel, plan) = prepare_f32(&ops, &attn, extras, scratch.len())?;
        if let Some(ledger) = ledger {
            calibrated.charge(ledger)?;
        }
        dispatch::run_f32(kernel, ops, &plan, scratch)?;
        return Ok(calibrated);
    }
    let model = AttentionErrorModel::CPU_F64;
    let format = GridFormat::of::<O>();
    let exact = exact_params(q, params, d_v)?;
    let (calibrated, consts) = calibrate_exact(q, &exact, s_k, d_v, &model, format, sigma)?;
    let calibrated = calibrated.in_mode(params);
    check_scratch(scratch.len(), output_perturbation_scratch_len(q.layout().dim(), d_v)?)?;
    let grid_of = |b| grid_of_batch(q, &exact, s_k, d_v, &model, format, consts, b);
    let constant_time = params.noise_mode == NoiseMode::ConstantTime;
    let out_grid = Some(GridDraw { stream: &noise_stream, grid_of: &grid_of, constant_time });
    let extras = Extras { logit_noise: None, out_noise: None, out_grid, clamp };
    let f64_scratch = dispatch::f64_scratch(scratch);
    let plan = prepare_f64(&ops, &attn, extras, f64_scratch.len())?;
    if let Some(ledger) = ledger {
        calibrated.charge(ledger)?;
    }
    dispatch::run_f64(ops, &plan, f64_scratch)?;
    Ok(calibrated)
}

/// `f32` scratch elements of [`output_perturbation_attention`] in either mode: room for the
/// `f64` kernel of the exact mode, `2·attention_scratch_len(d, d_v) + 1` (the `+ 1` aligns
/// the `f64` view).
///
/// ```
/// use dpattn_core::attention::attention_scratch_len;
/// use dpattn_core::output_perturbation::output_perturbation_scratch_len;
/// assert_eq!(output_perturbation_scratch_len(64, 64)?, 2 * attention_scratch_len(64, 64)? + 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SizeOverflow`].
pub fn output_perturbation_scratch_len(d: usize, d_v: usize) -> Result<usize> {
    let n = attention_scratch_len(d, d_v)?;
    crate::error::add_size(crate::error::mul_size(2, n, "scratch")?, 1, "scratch")
}

/// What one calibrated release costs: its `(ε, δ)`, an upper bound on its zCDP `ρ`
/// (`max_b Δ_b²/2σ_b²`, or the discrete Gaussian's `max_b (Δ′_b/Λ_b)²/2s_b²` in exact mode;
/// 0 when no batch element sees any key), and the mode it runs in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibrated {
    budget: PrivacyBudget,
    rho: f64,
    noise_mode: NoiseMode,
}

impl Calibrated {
    /// `ρ` of the release (rounded up). For a [`NoiseMode::ConstantTime`] release, the `ρ`
    /// of its exact part: the release itself has no zCDP guarantee and is not charged it.
    pub fn rho(&self) -> f64 {
        self.rho
    }

    /// The noise mode of the release.
    pub fn noise_mode(&self) -> NoiseMode {
        self.noise_mode
    }

    /// Charges the release to `ledger` as [`output_perturbation_attention`] does: `(ε, δ)` on
    /// an approximate-DP ledger, `ρ` on zCDP and RDP ledgers (nothing when `ρ = 0`: the
    /// release is then a constant), in the release's noise mode. A
    /// [`NoiseMode::ConstantTime`] release has no zCDP form: it charges `(ε, δ)` only, which
    /// zCDP and RDP ledgers refuse.
    ///
    /// # Errors
    /// The ledger's error when the charge does not fit (the ledger is then unchanged).
    pub fn charge(&self, ledger: &mut dyn Accountant) -> Result<()> {
        let cost = match self.noise_mode {
            NoiseMode::ConstantTime => Cost::Approx(self.budget),
            _ => Cost::Gaussian { approx: Some(self.budget), rho: self.rho },
        };
        ledger.charge(PRIVACY_UNIT, &cost, self.noise_mode)
    }

    /// The calibration of the exact release, relabelled for `params`' mode: a constant-time
    /// release is charged the caller's whole `(ε, δ)` (its exact part was calibrated at
    /// [`exact_params`]' smaller `δ`).
    fn in_mode(self, params: &OutputPerturbationParams<'_>) -> Self {
        match params.noise_mode {
            NoiseMode::ConstantTime => {
                Self { budget: params.budget, noise_mode: NoiseMode::ConstantTime, ..self }
            }
            _ => self,
        }
    }
}

/// The parameters whose exact release the call makes: `params` itself, or for
/// [`NoiseMode::ConstantTime`] the exact mode at `δ − δ_ct`, where
/// `δ_ct = (1 + e^ε)·N·2^−100` ([`constant_time_delta`]) covers the constant-time sampler's
/// distance from the exact noise over the `N = batch·heads·s_q·d_v` released values.
fn exact_params<'a, T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'a>,
    d_v: usize,
) -> Result<OutputPerturbationParams<'a>> {
    if params.noise_mode != NoiseMode::ConstantTime {
        return Ok(*params);
    }
    let [batch, heads, s_q, _] = q.layout().shape();
    let n = (batch as u128 * heads as u128 * s_q as u128 * d_v as u128).min(u128::from(u64::MAX));
    let (eps, delta) = (params.budget.epsilon().get(), params.budget.delta().get());
    let rest = constant_time_exact_delta(eps, delta, n as u64)?;
    let budget = PrivacyBudget::new(eps, rest)?;
    Ok(OutputPerturbationParams { budget, noise_mode: NoiseMode::Exact, ..*params })
}

/// `δ > 0` of a Gaussian release, and `σ_b` slices of `batch · heads` entries.
fn check_gaussian(params: &OutputPerturbationParams<'_>, total: usize, sigma: usize) -> Result<()> {
    let delta = params.budget.delta().get();
    if delta <= 0.0 {
        return Err(Error::OutOfRange {
            name: "delta",
            value: delta,
            allowed: "(0, 1) for the Gaussian mechanism",
        });
    }
    if sigma < total {
        return Err(Error::ShapeMismatch {
            arg: "sigma",
            axis: "length (batch * heads)",
            expected: total,
            got: sigma,
        });
    }
    Ok(())
}

/// The analytic Gaussian mechanism's noise multiplier `σ(ε, δ, 1)` (rounded up; `σ` is
/// linear in the sensitivity).
fn multiplier(params: &OutputPerturbationParams<'_>) -> Result<f64> {
    analytic_gaussian_sigma(params.budget.epsilon().get(), params.budget.delta().get(), 1.0)
}

/// The calibration of the **unsafe float mode** of [`output_perturbation_attention`] alone,
/// for a kernel that runs elsewhere: validates the public inputs, writes `σ_b` to
/// `sigma[b·heads .. (b+1)·heads]` for every batch element `b` (from the analytic Gaussian
/// mechanism at the row sensitivities of the public `q` against `s_k` keys), and returns
/// what the release costs. Adding `N(0, σ_b²)` to every output element of
/// `attention(Q, clamp(K), clamp(V))` is then the idealised release of the module docs —
/// not DP as shipped in floating point; the exact counterpart is
/// [`output_perturbation_calibrate_exact`].
///
/// ```
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_calibrate};
/// use dpattn_core::{BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};
/// let q = vec![0.5f32; 2 * 4];
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto, noise_mode: NoiseMode::UnsafeFloat };
/// let mut sigma = [0.0];
/// let c = output_perturbation_calibrate(BatchedRef::contiguous(&q, [1, 1, 2, 4])?, &params, 512, &mut sigma)?;
/// assert!(sigma[0] > 0.05 && sigma[0] < 0.08 && c.rho() > 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`output_perturbation_sensitivity`]; [`Error::OutOfRange`] for `δ = 0`;
/// [`Error::ShapeMismatch`] for a `sigma` slice shorter than `batch · heads`.
pub fn output_perturbation_calibrate<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    sigma: &mut [f64],
) -> Result<Calibrated> {
    let [batch, heads, _, _] = q.layout().shape();
    let (eps, delta) = (params.budget.epsilon().get(), params.budget.delta().get());
    let total = crate::error::mul_size(batch, heads, "batch * heads")?;
    check_gaussian(params, total, sigma.len())?;
    // Validate the sensitivity inputs, then write σ_b for every head of batch b.
    let scale = check_inputs(q, params, s_k)?;
    let mut rho = 0.0f64;
    let mut failure = None;
    for_each_batch_sensitivity(q, params, s_k, scale, |b, d| {
        let s = if d > 0.0 {
            analytic_gaussian_sigma(eps, delta, d).unwrap_or_else(|e| {
                failure = Some(e);
                0.0
            })
        } else {
            0.0 // no visible key anywhere in this batch element: the output is constant
        };
        if s > 0.0 {
            rho = rho.max(div_up(mul_up(d, d), mul_down(2.0 * s, s)));
        }
        sigma[b * heads..(b + 1) * heads].fill(s);
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Calibrated { budget: params.budget, rho, noise_mode: NoiseMode::UnsafeFloat })
}

/// The calibration of the **exact mode** for an attention computed as `model` describes
/// (the CPU's [`AttentionErrorModel::CPU_F64`], or a GPU kernel's) and written in `format`:
/// validates the public inputs and every batch element's grid, writes each grid's noise
/// parameter `s·Λ` (0 for an element that sees no key) to `sigma[b·heads .. (b+1)·heads]`,
/// and returns what the release costs. Releasing every output element `x` at logical index
/// `((b·heads + h)·s_q + i)·d_v + c` as
/// [`output_perturbation_grid`]`(b)`'s `Grid::release(x, z)`, `z` from that element's
/// exact-sampler window of the draw, is then the exact release.
///
/// ```
/// use dpattn_core::grid_release::GridFormat;
/// use dpattn_core::output_perturbation::{AttentionErrorModel, OutputPerturbationParams,
///     output_perturbation_calibrate_exact, output_perturbation_grid};
/// use dpattn_core::{BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};
/// let q = vec![0.5f32; 2 * 4];
/// let q = BatchedRef::contiguous(&q, [1, 1, 2, 4])?;
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto, noise_mode: NoiseMode::Exact };
/// let (model, format) = (AttentionErrorModel::CPU_F64, GridFormat::F32);
/// let mut sigma = [0.0];
/// let c = output_perturbation_calibrate_exact(q, &params, 512, 4, &model, format, &mut sigma)?;
/// let grid = output_perturbation_grid(q, &params, 512, 4, &model, format, 0)?.unwrap();
/// assert_eq!(sigma[0], grid.sigma());
/// assert!(grid.inflation() < 0.01 && c.rho() > 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`output_perturbation_calibrate`], and those of [`attention_error_bound`] and
/// [`GaussianGrid::calibrate`]; [`Error::OutOfRange`] when the output's element indices
/// reach `2^40` (the exact samplers' window limit).
pub fn output_perturbation_calibrate_exact<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    d_v: usize,
    model: &AttentionErrorModel,
    format: GridFormat,
    sigma: &mut [f64],
) -> Result<Calibrated> {
    let exact = exact_params(q, params, d_v)?;
    calibrate_exact(q, &exact, s_k, d_v, model, format, sigma).map(|(c, _)| c.in_mode(params))
}

/// [`output_perturbation_calibrate_exact`], also returning `(scale, multiplier)`.
fn calibrate_exact<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    d_v: usize,
    model: &AttentionErrorModel,
    format: GridFormat,
    sigma: &mut [f64],
) -> Result<(Calibrated, (f64, f64))> {
    let [batch, heads, s_q, _] = q.layout().shape();
    let total = crate::error::mul_size(batch, heads, "batch * heads")?;
    check_gaussian(params, total, sigma.len())?;
    let scale = check_inputs(q, params, s_k)?;
    if d_v == 0 {
        return Err(Error::OutOfRange { name: "d_v", value: 0.0, allowed: ">= 1" });
    }
    let elements = (total as u128) * (s_q as u128) * (d_v as u128);
    if elements > crate::sampling::MAX_WINDOW_ELEMENTS as u128 {
        return Err(Error::OutOfRange {
            name: "output elements (batch * heads * s_q * d_v)",
            value: elements as f64,
            allowed: "at most 2^40 (the exact samplers' windows)",
        });
    }
    let consts = (scale, multiplier(params)?);
    let mut rho = 0.0f64;
    for b in 0..batch {
        let grid = grid_of_batch(q, params, s_k, d_v, model, format, consts, b)?;
        let s = grid.map_or(0.0, |g| g.sigma());
        if let Some(g) = grid {
            rho = rho.max(g.rho());
        }
        sigma[b * heads..(b + 1) * heads].fill(s);
    }
    Ok((Calibrated { budget: params.budget, rho, noise_mode: NoiseMode::Exact }, consts))
}

/// Batch element `b`'s grid in the exact mode (`None` when it sees no key: its output is the
/// constant zero and needs no noise). See [`output_perturbation_calibrate_exact`].
///
/// # Errors
/// As [`output_perturbation_calibrate_exact`]; [`Error::OutOfRange`] for `b ≥ batch`.
#[allow(clippy::too_many_arguments)]
pub fn output_perturbation_grid<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    d_v: usize,
    model: &AttentionErrorModel,
    format: GridFormat,
    b: usize,
) -> Result<Option<GaussianGrid>> {
    let scale = check_inputs(q, params, s_k)?;
    if b >= q.layout().batch() {
        return Err(Error::OutOfRange {
            name: "batch element",
            value: b as f64,
            allowed: "below batch",
        });
    }
    if params.budget.delta().get() <= 0.0 {
        check_gaussian(params, 0, 0)?;
    }
    let exact = exact_params(q, params, d_v)?;
    grid_of_batch(q, &exact, s_k, d_v, model, format, (scale, multiplier(&exact)?), b)
}
