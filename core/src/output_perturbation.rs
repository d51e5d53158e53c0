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
//! show that it is attained. The guarantee is for the mechanism in exact arithmetic; the
//! floating-point caveats (finite-precision Gaussian noise, `f32` attention) are listed
//! there too. Computed sensitivities are rounded upward.
//!
//! The noise is the output draw of [`crate::noisy_attention`] (same stream layout, so the
//! GPU kernel reproduces the release for the same key). The sensitivity shrinks like `1/n`
//! for long contexts, which is what makes output perturbation useful here.

use crate::accounting::composition::Rho;
use crate::accounting::ledger::{Amount, Charge, Ledger};
use crate::attention::dispatch::{self, Operands};
use crate::attention::tiled::{NoiseDraw, RowClamp};
use crate::attention::{AttentionParams, Extras, prepare_f32};
use crate::attention_options::{Kernel, Mask, Scale, ScoreFn};
use crate::batched::{BatchedMut, BatchedRef};
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::directed_rounding::{add_down, add_up, div_down, div_up, mul_down, mul_up, sqrt_up};
use crate::element::Element;
use crate::error::{Error, Result, positive_finite};
use crate::privacy_params::PrivacyBudget;
use crate::sampling::{KeyedStream, NoiseKey};

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
    /// The CPU kernel.
    pub kernel: Kernel,
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
/// use dpattn_core::{BatchedRef, PrivacyBudget, Scale, ScoreFn, Kernel};
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_sensitivity, row_sensitivity};
/// let q = [3.0f32, 4.0]; // one row of norm 5
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::Custom(0.1), score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto };
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
    q.check_finite("q")?;
    Ok(scale)
}

/// Calls `f(b, Δ_b)` for every batch element (inputs already validated).
fn for_each_batch_sensitivity<T: Element>(
    q: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    s_k: usize,
    scale: f64,
    mut f: impl FnMut(usize, f64),
) -> Result<()> {
    let [batch, heads, s_q, _] = q.layout().shape();
    for b in 0..batch {
        let n = params
            .key_padding
            .map_or(s_k, |p| p[b * s_k..(b + 1) * s_k].iter().filter(|&&x| x).count());
        let mut sum_sq = 0.0f64;
        for h in 0..heads {
            let qh = q.head(b, h);
            for i in 0..s_q {
                let norm_sq = qh
                    .row(i)
                    .iter()
                    .fold(0.0, |acc, x| add_up(acc, mul_up(x.to_f64(), x.to_f64())));
                let a = mul_up(mul_up(scale, sqrt_up(norm_sq)), params.key_norm);
                let di = row_sensitivity(n, a, params.value_norm, params.score)?;
                sum_sq = add_up(sum_sq, mul_up(di, di));
            }
        }
        f(b, sqrt_up(sum_sq));
    }
    Ok(())
}

/// Releases `out = attention(Q, clamp(K), clamp(V)) + N(0, σ_b²)` for every batch element
/// `b`, `(ε, δ)`-DP for one position of the private context (see the module docs).
///
/// `sigma` (`batch · heads` entries) receives the noise standard deviation used for each
/// `(b, h)` — keep it with the key and `stream` for audit. If `ledger` is given, the release
/// is charged after every input has been validated and before anything is computed (as
/// `(ε, δ)` on an approximate-DP ledger, as the exact `ρ = Δ²/2σ²` of the Gaussian
/// mechanism on zCDP and RDP ledgers); a refused charge or any invalid input leaves `out`
/// and the ledger untouched (`sigma` may then hold the computed values). When no batch
/// element sees any key the release is a constant: zCDP and RDP ledgers are not charged.
///
/// Noise element `(b, h, i, c)` is element `((b · heads + h) · s_q + i) · d_v + c` of the
/// draw `(key, stream)`, exactly as [`crate::noisy_attention`] adds it.
///
/// ```
/// use dpattn_core::attention::attention_scratch_len;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_attention};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::{BatchedMut, BatchedRef, Kernel, PrivacyBudget, Scale, ScoreFn};
/// let (s_q, s_k, d) = (2, 512, 4);
/// let q = vec![0.5f32; s_q * d];
/// let kv: Vec<f32> = (0..s_k * d).map(|i| ((i % 13) as f32 - 6.0) / 12.0).collect();
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto };
/// let mut ledger = Ledger::new_approx(PrivacyBudget::new(2.0, 1e-5)?);
/// let (mut out, mut sigma) = (vec![0f32; s_q * d], [0.0]);
/// output_perturbation_attention(
///     BatchedMut::contiguous(&mut out, [1, 1, s_q, d])?,
///     BatchedRef::contiguous(&q, [1, 1, s_q, d])?,
///     BatchedRef::contiguous(&kv, [1, 1, s_k, d])?,
///     BatchedRef::contiguous(&kv, [1, 1, s_k, d])?,
///     &params, &NoiseKey::from_bytes([3; 32]), 0, Some(&mut ledger), &mut sigma,
///     &mut vec![0f32; attention_scratch_len(d, d)?],
/// )?;
/// // ‖q‖ = 1, a = 1/2: Δ = √2 · 2 / (1 + 511/e) ≈ 0.015, and σ ≈ 4.2 Δ at (1, 1e-6).
/// assert!(sigma[0] > 0.05 && sigma[0] < 0.08);
/// assert_eq!(ledger.charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`](crate::attention::attention()) and
/// [`output_perturbation_sensitivity`]; [`Error::OutOfRange`] for `δ = 0`;
/// [`Error::ShapeMismatch`] for a `sigma` slice shorter than `batch · heads`; the
/// ledger's error when the charge does not fit.
#[allow(clippy::too_many_arguments)]
pub fn output_perturbation_attention<T: Element, O: Element, const N: usize>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &OutputPerturbationParams<'_>,
    key: &NoiseKey,
    stream: u64,
    ledger: Option<&mut Ledger<N>>,
    sigma: &mut [f64],
    scratch: &mut [f32],
) -> Result<()> {
    let total = crate::error::mul_size(q.layout().batch(), q.layout().heads(), "batch * heads")?;
    let calibrated = output_perturbation_calibrate(q, params, k.layout().seq(), sigma)?;
    let attn = AttentionParams {
        mask: Mask { causal: false, key_padding: params.key_padding },
        scale: params.scale,
        score: params.score,
        kernel: params.kernel,
    };
    let noise_stream = KeyedStream::new(key, stream);
    let extras = Extras {
        logit_noise: None,
        out_noise: Some(NoiseDraw { stream: &noise_stream, sigma: &sigma[..total] }),
        clamp: Some(RowClamp { key: params.key_norm, value: params.value_norm }),
    };
    let ops = Operands { out, first: None, q, k, v };
    let (kernel, plan) = prepare_f32(&ops, &attn, extras, scratch.len())?;
    if let Some(ledger) = ledger {
        calibrated.charge(ledger)?;
    }
    dispatch::run_f32(kernel, ops, &plan, scratch)
}

/// What one calibrated release costs: its `(ε, δ)` and the exact zCDP `ρ = max_b Δ_b²/2σ_b²`
/// of its Gaussian noise (0 when no batch element sees any key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibrated {
    budget: PrivacyBudget,
    rho: f64,
}

impl Calibrated {
    /// `ρ` of the release (rounded up).
    pub fn rho(&self) -> f64 {
        self.rho
    }

    /// Charges the release to `ledger` as [`output_perturbation_attention`] does: `(ε, δ)` on
    /// an approximate-DP ledger, `ρ` on zCDP and RDP ledgers (nothing when `ρ = 0`: the
    /// release is then a constant).
    ///
    /// # Errors
    /// The ledger's error when the charge does not fit (the ledger is then unchanged).
    pub fn charge<const N: usize>(&self, ledger: &mut Ledger<N>) -> Result<()> {
        match ledger.total() {
            Amount::Approx { .. } => ledger.try_charge(Charge::Approx(self.budget)),
            _ if self.rho == 0.0 => Ok(()),
            _ => ledger.try_charge(Charge::Zcdp(Rho::new(self.rho)?)),
        }
    }
}

/// The calibration of [`output_perturbation_attention`] alone, for a kernel that runs
/// elsewhere (the GPU): validates the public inputs, writes `σ_b` to `sigma[b·heads ..
/// (b+1)·heads]` for every batch element `b` (from the analytic Gaussian mechanism at the
/// row sensitivities of the public `q` against `s_k` keys), and returns what the release
/// costs. Adding `N(0, σ_b²)` to every output element of `attention(Q, clamp(K), clamp(V))`
/// is then the release the module documents.
///
/// ```
/// use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_calibrate};
/// use dpattn_core::{BatchedRef, Kernel, PrivacyBudget, Scale, ScoreFn};
/// let q = vec![0.5f32; 2 * 4];
/// let params = OutputPerturbationParams { key_norm: 1.0, value_norm: 1.0,
///     budget: PrivacyBudget::new(1.0, 1e-6)?, scale: Scale::InvSqrtDim, score: ScoreFn::Exp,
///     key_padding: None, kernel: Kernel::Auto };
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
    if delta <= 0.0 {
        return Err(Error::OutOfRange {
            name: "delta",
            value: delta,
            allowed: "(0, 1) for the Gaussian mechanism",
        });
    }
    let total = crate::error::mul_size(batch, heads, "batch * heads")?;
    if sigma.len() < total {
        return Err(Error::ShapeMismatch {
            arg: "sigma",
            axis: "length (batch * heads)",
            expected: total,
            got: sigma.len(),
        });
    }
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
    Ok(Calibrated { budget: params.budget, rho })
}
