//! Exact batched multi-head attention on the CPU: tiled online softmax, caller scratch,
//! AVX2 + FMA or portable kernels.
//!
//! **Guarantee.** [`attention`] computes `out = D(A)⁻¹ f(A) · V` per head with
//! `A = scale · Q·Kᵀ` (masked entries excluded) and `f` = `exp` or `cosh` ([`ScoreFn`]),
//! the normalised attention of Definition 1.4 of paper 000 (`shared/seeds/000_*.txt`),
//! in `f32` arithmetic on inputs widened from `f32`, `f16` or `bf16` (an `f64` input is
//! rounded to `f32` once). It is exact attention: **no privacy** on its own; the noisy
//! and DP variants (modules `noisy_attention` and `output_perturbation`) run the same loop with noise and clamping. Accuracy: every output is within a few `f32`
//! ulps times the row's `Σ|p·v|` of the float64 [`reference_attention`](crate::reference_attention())
//! (the tests check relative error ≤ 1e-5 on random data, and [`attention_f64`] — the same
//! tiling in `f64` — against it at 1e-12).
//!
//! **Algorithm.** FlashAttention's forward pass: blocks of 96 query rows against blocks of
//! 64 keys, the running maximum and normaliser per row, accumulator rescaling per key
//! block, and one `6 × 16` register-blocked microkernel for both `Q·Kᵀ` and `P·V`. Extra
//! memory is [`attention_scratch_len`] elements (105 KiB of `f32` at `d = d_v = 64`), independent of
//! the sequence lengths; no `S × S` matrix is ever formed. For small problems that need
//! the normalised matrix itself, see [`attention_matrix`].
//!
//! **Validation.** Shapes, zero sizes, NaN/∞ in any input, the mask length, the scale and
//! the scratch length are checked before anything is written. So is the *range*: if
//! `scale · max‖q‖ · max‖k‖` or `2 · s_k · max|v|` is within a factor 4 of the largest
//! `f32`, the call is refused ([`Error::OutOfRange`]) instead of overflowing into NaN
//! midway; the output is therefore either completely written or untouched.
//!
//! **Parallelism.** Callers split the work over flattened heads `b · heads + h` with
//! [`attention_heads`] (one scratch per thread); results are identical to one
//! [`attention`] call.

mod decode;
pub(crate) mod dispatch;
mod matrix;
pub(crate) mod microkernel;
pub(crate) mod simd;
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd_avx2;
pub(crate) mod tiled;

pub use matrix::{attention_matrix, normalise_scores};

use crate::attention_options::{Kernel, Mask, Scale, ScoreFn};
use crate::batched::{BatchedMut, BatchedRef};
use crate::element::Element;
use crate::error::{Error, PrivateDetail, Result};
use crate::scratch::check_scratch;
use dispatch::Operands;
#[cfg(feature = "alloc")]
pub(crate) use tiled::clamp_factor;
use tiled::{GridDraw, NoiseDraw, Plan, RowClamp};

/// Options of an attention call. `Default` is no mask, scale `1/√d`, softmax, the fastest
/// kernel.
///
/// ```
/// use dpattn_core::{Mask, ScoreFn, attention::AttentionParams};
/// let p = AttentionParams { mask: Mask { causal: true, key_padding: None }, ..Default::default() };
/// assert_eq!(p.score, ScoreFn::Exp);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttentionParams<'a> {
    /// Causal and key-padding masks ([`Mask`]).
    pub mask: Mask<'a>,
    /// The logit scale ([`Scale`]).
    pub scale: Scale,
    /// `exp` (softmax) or `cosh` ([`ScoreFn`]).
    pub score: ScoreFn,
    /// Which CPU kernel runs ([`Kernel`]).
    pub kernel: Kernel,
}

/// Scratch elements (`f32` for [`attention`], `f64` for [`attention_f64`]) for key
/// dimension `d` and value dimension `d_v`, whatever the sequence lengths.
///
/// ```
/// use dpattn_core::attention::attention_scratch_len;
/// assert_eq!(attention_scratch_len(64, 64)?, 26_816);
/// assert!(attention_scratch_len(usize::MAX, 1).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SizeOverflow`] when the length does not fit in `usize`.
pub fn attention_scratch_len(d: usize, d_v: usize) -> Result<usize> {
    tiled::scratch_len(d, d_v)
}

/// Exact attention `out = softmax(scale · Q·Kᵀ + mask) · V` (or the `cosh` variant) for a
/// whole batch, in `f32`.
///
/// Shapes: `q` `[batch, heads, s_q, d]`, `k` `[batch, kv_heads, s_k, d]`, `v`
/// `[batch, kv_heads, s_k, d_v]`, `out` `[batch, heads, s_q, d_v]`, any strides. A query row
/// that sees no key is zero. `kv_heads` divides `heads` (grouped-query attention; `1` is
/// multi-query attention): query head `h` reads key/value head `h / (heads / kv_heads)`,
/// so consecutive query heads share one (PyTorch's `repeat_interleave` of K and V), and the
/// result is bit for bit that of the call on K and V expanded that way.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention, attention_scratch_len};
/// use dpattn_core::{BatchedMut, BatchedRef, Scale};
/// // One query, two keys with logits 0 and ln 3: weights 1/4 and 3/4.
/// let (q, k, v) = ([1.0f32], [0.0f32, 3f32.ln()], [10.0f32, 20.0]);
/// let mut out = [0.0f32];
/// let mut scratch = vec![0.0f32; attention_scratch_len(1, 1)?];
/// let params = AttentionParams { scale: Scale::Custom(1.0), ..Default::default() };
/// attention(
///     BatchedMut::contiguous(&mut out, [1, 1, 1, 1])?,
///     BatchedRef::contiguous(&q, [1, 1, 1, 1])?,
///     BatchedRef::contiguous(&k, [1, 1, 2, 1])?,
///     BatchedRef::contiguous(&v, [1, 1, 2, 1])?,
///     &params,
///     &mut scratch,
/// )?;
/// assert!((out[0] - 17.5).abs() < 1e-5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::OutOfRange`] (zero extent, bad scale),
/// [`Error::DomainViolation`] (inputs too large for the compute precision or the output
/// type; the measured bound only through [`Error::private_detail`]),
/// [`Error::PrivateNonFinite`], [`Error::ScratchTooSmall`],
/// [`Error::BufferTooShort`] (mask), [`Error::Unsupported`] (forced kernel). On error
/// `out` is untouched.
pub fn attention<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    execute_f32(Operands { out, first: None, q, k, v }, params, Extras::NONE, scratch)
}

/// [`attention`] on `threads` threads (`std` only): each head's query rows are split into
/// one block per thread (whole 96-row tiles), so a single long head is parallel too. The
/// output is **bit for bit** that of [`attention`] for any `threads` (each row is computed
/// by the same code on the same tiles). `scratch` holds `threads ·`
/// [`attention_scratch_len`]`(d, d_v)` elements, one part per thread. Threads are started
/// per head with `std::thread::scope`, which costs tens of microseconds: use it for heads of
/// a few hundred query rows or more.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention, attention_scratch_len, attention_threaded};
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let (s, d) = (300, 16);
/// let x: Vec<f32> = (0..s * d).map(|i| ((i * 37) % 17) as f32 / 17.0).collect();
/// let qkv = BatchedRef::contiguous(&x, [1, 1, s, d])?;
/// let len = attention_scratch_len(d, d)?;
/// let (mut one, mut two) = (vec![0f32; s * d], vec![0f32; s * d]);
/// let p = AttentionParams::default();
/// attention(BatchedMut::contiguous(&mut one, [1, 1, s, d])?, qkv, qkv, qkv, &p, &mut vec![0f32; len])?;
/// attention_threaded(BatchedMut::contiguous(&mut two, [1, 1, s, d])?, qkv, qkv, qkv, &p, 2,
///     &mut vec![0f32; 2 * len])?;
/// assert_eq!(one, two);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`]; [`Error::OutOfRange`] for `threads == 0`;
/// [`Error::ScratchTooSmall`] when `scratch` is shorter than `threads` parts (both before
/// anything is written); [`Error::Unsupported`] when the operating system refuses a thread
/// (the blocks already started are then written, the rest of `out` is not).
#[cfg(feature = "std")]
pub fn attention_threaded<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    threads: usize,
    scratch: &mut [f32],
) -> Result<()> {
    if threads == 0 {
        return Err(Error::OutOfRange { name: "threads", value: 0.0, allowed: ">= 1" });
    }
    let per_thread = attention_scratch_len(q.layout().dim(), v.layout().dim())?;
    let needed = crate::error::mul_size(per_thread, threads, "threads * scratch")?;
    if scratch.len() < needed {
        return Err(Error::ScratchTooSmall { needed, got: scratch.len() });
    }
    let ops = Operands { out, first: None, q, k, v };
    let (kernel, plan) = prepare_f32(&ops, params, Extras::NONE, per_thread)?;
    dispatch::run_f32_threaded(kernel, ops, &plan, scratch, threads, per_thread)
}

/// [`attention`] for the flattened heads `first_head .. first_head + n` only (flattened
/// index `b · heads + h`), written to `out` of shape `[1, n, s_q, d_v]`. This is how callers
/// parallelise: split the heads into ranges, give each thread its own output chunk and
/// scratch. The result equals the corresponding heads of one [`attention`] call.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_heads, attention_scratch_len};
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let (b, h, s, d) = (2, 3, 5, 4);
/// let x: Vec<f32> = (0..b * h * s * d).map(|i| ((i * 37) % 17) as f32 / 17.0).collect();
/// let qkv = BatchedRef::contiguous(&x, [b, h, s, d])?;
/// let mut out = vec![0f32; x.len()];
/// let len = attention_scratch_len(d, d)?;
/// std::thread::scope(|sc| {
///     // Two threads, three heads each.
///     for (t, chunk) in out.chunks_mut(3 * s * d).enumerate() {
///         sc.spawn(move || {
///             let mut scratch = vec![0f32; len];
///             let o = BatchedMut::contiguous(chunk, [1, 3, s, d]).unwrap();
///             attention_heads(o, qkv, qkv, qkv, &AttentionParams::default(), 3 * t, &mut scratch)
///                 .unwrap();
///         });
///     }
/// });
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`], and [`Error::ShapeMismatch`] when `out` is not
/// `[1, n, s_q, d_v]` or the range passes the last head.
pub fn attention_heads<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    first_head: usize,
    scratch: &mut [f32],
) -> Result<()> {
    execute_f32(Operands { out, first: Some(first_head), q, k, v }, params, Extras::NONE, scratch)
}

/// The same tiled algorithm as [`attention`] computed in `f64` with the portable kernel
/// (the `kernel` field is ignored): the path that tests the tiling itself against the
/// float64 reference at `1e-12`. Scratch is `f64`, [`attention_scratch_len`] elements.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_f64, attention_scratch_len};
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let x = [0.5f64, -1.0, 2.0, 0.25];
/// let mut out = [0.0f64; 4];
/// let mut scratch = vec![0.0; attention_scratch_len(2, 2)?];
/// let view = BatchedRef::contiguous(&x, [1, 1, 2, 2])?;
/// attention_f64(BatchedMut::contiguous(&mut out, [1, 1, 2, 2])?, view, view, view,
///     &AttentionParams::default(), &mut scratch)?;
/// assert!(out.iter().all(|o| o.is_finite()));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`attention`].
pub fn attention_f64<T: Element>(
    out: BatchedMut<'_, f64>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    execute_f64(Operands { out, first: None, q, k, v }, params, Extras::NONE, scratch)
}

/// What the noisy and DP variants add to the loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extras<'a> {
    pub(crate) logit_noise: Option<NoiseDraw<'a>>,
    pub(crate) out_noise: Option<NoiseDraw<'a>>,
    pub(crate) out_grid: Option<GridDraw<'a>>,
    pub(crate) clamp: Option<RowClamp>,
}

impl Extras<'_> {
    pub(crate) const NONE: Extras<'static> =
        Extras { logit_noise: None, out_noise: None, out_grid: None, clamp: None };
}

pub(crate) fn execute_f32<T: Element, O: Element>(
    ops: Operands<'_, '_, T, O>,
    params: &AttentionParams<'_>,
    extras: Extras<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    let (kernel, plan) = prepare_f32(&ops, params, extras, scratch.len())?;
    dispatch::run_f32(kernel, ops, &plan, scratch)
}

/// Everything [`execute_f32`] checks, without running: the DP mechanism charges its ledger
/// between this and [`dispatch::run_f32`], so a refused call costs no budget.
pub(crate) fn prepare_f32<'a, T: Element, O: Element>(
    ops: &Operands<'_, '_, T, O>,
    params: &AttentionParams<'a>,
    extras: Extras<'a>,
    scratch_len: usize,
) -> Result<(Kernel, Plan<'a>)> {
    let kernel = params.kernel.resolve()?;
    Ok((kernel, validate(ops, params, extras, f64::from(f32::MAX), scratch_len)?))
}

/// [`prepare_f32`] for the `f64` kernel ([`dispatch::run_f64`]).
pub(crate) fn prepare_f64<'a, T: Element, O: Element>(
    ops: &Operands<'_, '_, T, O>,
    params: &AttentionParams<'a>,
    extras: Extras<'a>,
    scratch_len: usize,
) -> Result<Plan<'a>> {
    validate(ops, params, extras, f64::MAX, scratch_len)
}

pub(crate) fn execute_f64<T: Element, O: Element>(
    ops: Operands<'_, '_, T, O>,
    params: &AttentionParams<'_>,
    extras: Extras<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    let plan = validate(&ops, params, extras, f64::MAX, scratch.len())?;
    dispatch::run_f64(ops, &plan, scratch)
}

/// Checks everything, in the order of the error list of [`attention`], and builds the plan.
fn validate<'a, T: Element, O: Element>(
    ops: &Operands<'_, '_, T, O>,
    params: &AttentionParams<'a>,
    extras: Extras<'a>,
    max_finite: f64,
    scratch_len: usize,
) -> Result<Plan<'a>> {
    let [batch, heads, s_q, d] = ops.q.layout().shape();
    let (s_k, dv) = (ops.k.layout().seq(), ops.v.layout().dim());
    for (name, value) in
        [("batch", batch), ("heads", heads), ("s_q", s_q), ("d", d), ("s_k", s_k), ("d_v", dv)]
    {
        if value == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    // Grouped-query attention: `kv_heads` key/value heads, each shared by `heads / kv_heads`
    // consecutive query heads (multi-query attention: one).
    let kv_heads = ops.k.layout().heads();
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::ShapeMismatch {
            arg: "k",
            axis: "heads (must divide the query heads)",
            expected: heads,
            got: kv_heads,
        });
    }
    for (arg, l) in [("k", ops.k.layout()), ("v", ops.v.layout())] {
        l.expect_axis(arg, 0, batch)?;
        l.expect_axis(arg, 1, kv_heads)?;
    }
    ops.k.layout().expect_axis("k", 3, d)?;
    ops.v.layout().expect_axis("v", 2, s_k)?;
    let ol = ops.out.layout();
    let total = crate::error::mul_size(batch, heads, "batch * heads")?;
    match ops.first {
        None => {
            ol.expect_axis("out", 0, batch)?;
            ol.expect_axis("out", 1, heads)?;
        }
        Some(first) => {
            ol.expect_axis("out", 0, 1)?;
            if first.checked_add(ol.heads()).is_none_or(|e| e > total) {
                return Err(Error::ShapeMismatch {
                    arg: "out",
                    axis: "heads (first_head + n must not pass batch * heads)",
                    expected: total.saturating_sub(first),
                    got: ol.heads(),
                });
            }
        }
    }
    ol.expect_axis("out", 2, s_q)?;
    ol.expect_axis("out", 3, dv)?;
    params.mask.validate(batch, s_k)?;
    let scale = params.scale.value(d)?;
    let q_stats = RowStats::of(&ops.q, "q")?;
    if let Some(c) = extras.clamp {
        // Private K and V (the DP mechanism): nothing about them may decide whether the call
        // is refused. Non-finite rows are clamped to zero in the kernel; only the layout
        // (public) is checked: one stored row must be one logical position.
        crate::error::positive_finite("key_norm", c.key)?;
        crate::error::positive_finite("value_norm", c.value)?;
        for (arg, l) in [("k", ops.k.layout()), ("v", ops.v.layout())] {
            if !l.is_non_overlapping() {
                return Err(Error::OutOfRange {
                    name: if arg == "k" {
                        "k layout (overlapping or broadcast strides)"
                    } else {
                        "v layout (overlapping or broadcast strides)"
                    },
                    value: 0.0,
                    allowed: "a layout in which every private element has its own memory",
                });
            }
        }
    }
    // What stands for K and V in the range check: their statistics, or, when they are
    // private (clamping), only the public bounds — a refusal must not depend on them.
    let (k_stats, v_stats) = match extras.clamp {
        Some(c) => (
            RowStats { norm_max: c.key, abs_max: c.key },
            RowStats { norm_max: c.value, abs_max: c.value },
        ),
        None => (RowStats::of(&ops.k, "k")?, RowStats::of(&ops.v, "v")?),
    };
    let mut sigma_max = [0.0f64; 2];
    for (i, n) in [extras.logit_noise, extras.out_noise].iter().enumerate() {
        if let Some(n) = n {
            if n.sigma.len() != heads && n.sigma.len() != total {
                return Err(Error::ShapeMismatch {
                    arg: if i == 0 { "logit sigma" } else { "output sigma" },
                    axis: "length (heads, or batch * heads)",
                    expected: heads,
                    got: n.sigma.len(),
                });
            }
            for &x in n.sigma {
                sigma_max[i] = sigma_max[i].max(crate::error::nonneg_finite("sigma", x)?);
            }
        }
    }
    // Noise positions: the logit draw has batch·heads·s_q·s_k elements, all below 2^64.
    let draw = (total as u128) * (s_q as u128) * (s_k.max(dv) as u128);
    if draw >= 1u128 << 64 {
        return Err(Error::SizeOverflow { what: "noise draw element index (u64)" });
    }
    // Without clamping the statistics are measured on the data: a refusal keeps them private.
    let measured_on_data = extras.clamp.is_none();
    let stats = [q_stats, k_stats, v_stats];
    check_range::<O>(s_k, scale, stats, sigma_max, max_finite, measured_on_data)?;
    check_scratch(scratch_len, tiled::scratch_len(d, dv)?)?;
    Ok(Plan {
        s_q,
        s_k,
        d,
        dv,
        heads,
        group: heads / kv_heads,
        scale,
        score: params.score,
        mask: params.mask,
        logit_noise: extras.logit_noise,
        out_noise: extras.out_noise,
        out_grid: extras.out_grid,
        clamp: extras.clamp,
    })
}

/// What the range check needs of an input, gathered in one pass with the finiteness check.
#[derive(Debug, Clone, Copy)]
struct RowStats {
    /// The largest row L2 norm (`+inf` if a square overflows `f64`).
    norm_max: f64,
    /// The largest `|x|`.
    abs_max: f64,
}

impl RowStats {
    /// One pass over `x`; [`Error::PrivateNonFinite`] naming `arg` at the first NaN/∞.
    fn of<T: Element>(x: &BatchedRef<'_, T>, arg: &'static str) -> Result<Self> {
        let [b, h, s, _] = x.layout().shape();
        let (mut norm_sq, mut abs_max, mut finite) = (0.0f64, 0.0f64, true);
        #[cfg(target_arch = "x86_64")]
        let avx2 = simd_avx2::Avx2Fma::detect();
        for (bi, hi) in (0..b).flat_map(|bi| (0..h).map(move |hi| (bi, hi))) {
            let head = x.head(bi, hi);
            let fast = T::as_f32_slice(head.as_slice()).and_then(|data| {
                let m = crate::matrix_view::MatRef::new(data, s, head.cols(), head.row_stride());
                dispatch::matrix_stats_f32(
                    #[cfg(target_arch = "x86_64")]
                    avx2,
                    m.ok()?,
                )
            });
            if let Some((sq, abs)) = fast {
                norm_sq = norm_sq.max(sq);
                abs_max = abs_max.max(abs);
                continue;
            }
            for r in 0..s {
                let (row_sq, row_abs, row_finite) = Self::row(head.row(r));
                norm_sq = norm_sq.max(row_sq);
                abs_max = abs_max.max(row_abs);
                finite &= row_finite;
            }
        }
        if !finite {
            x.check_finite(arg)?; // the error with the first bad index
        }
        Ok(Self { norm_max: libm::sqrt(norm_sq), abs_max })
    }

    /// `(Σ x², max |x|, all finite)` of one row, on `LANES` independent accumulators so the
    /// loop runs at the machine's throughput instead of one add's latency per element (the
    /// sum's order differs from left to right by rounding only, far inside the range
    /// check's factor-4 margins).
    #[inline]
    fn row<T: Element>(row: &[T]) -> (f64, f64, bool) {
        const LANES: usize = 8;
        let (mut sq, mut abs, mut finite) = ([0.0f64; LANES], [0.0f64; LANES], [true; LANES]);
        let chunks = row.chunks_exact(LANES);
        let rest = chunks.remainder();
        for c in chunks {
            for j in 0..LANES {
                let v = c[j].to_f64();
                sq[j] += v * v;
                abs[j] = abs[j].max(v.abs());
                finite[j] &= v.is_finite();
            }
        }
        for (j, x) in rest.iter().enumerate() {
            let v = x.to_f64();
            sq[j] += v * v;
            abs[j] = abs[j].max(v.abs());
            finite[j] &= v.is_finite();
        }
        let sum = ((sq[0] + sq[4]) + (sq[1] + sq[5])) + ((sq[2] + sq[6]) + (sq[3] + sq[7]));
        (sum, abs.iter().fold(0.0, |m, &a| m.max(a)), finite.iter().all(|&f| f))
    }
}

/// Refuses inputs whose scaled queries, logits, accumulators or noisy outputs could overflow
/// the compute precision (a quarter of its range is kept as margin for rounding) or the
/// output type, from the public `σ` and the statistics of `[q, k, v]`. Noise alone too large
/// is an [`Error::OutOfRange`] (`σ` is public). With `measured_on_data` the statistics come
/// from (possibly private) data, and a refusal they cause is an [`Error::DomainViolation`]
/// whose measured bound is withheld; otherwise (public queries and public bounds) it is an
/// [`Error::OutOfRange`] showing it.
fn check_range<O: Element>(
    s_k: usize,
    scale: f64,
    [q, k, v]: [RowStats; 3],
    sigma_max: [f64; 2],
    max_finite: f64,
    measured_on_data: bool,
) -> Result<()> {
    macro_rules! quarter {
        () => {
            "below 1/4 of the compute precision's largest finite value"
        };
    }
    macro_rules! eighth {
        () => {
            "below 1/8 of the compute precision's largest finite value"
        };
    }
    macro_rules! output_max {
        () => {
            "below the output type's largest finite value"
        };
    }
    let over = |value: f64, limit: f64| value.is_nan() || value >= limit;
    let (quarter, eighth) = (max_finite / 4.0, max_finite / 8.0);
    // |f64 Gaussian| ≤ σ · √(2 · 53 · ln 2) < 9σ (docs/RANDOMNESS.md).
    let [logit_noise, out_noise] = sigma_max.map(|s| 9.0 * s);
    let noise = [
        ("logit noise bound 9 * sigma", eighth!(), logit_noise, eighth),
        ("output noise bound 9 * sigma", quarter!(), out_noise, quarter),
        ("output noise bound 9 * sigma", output_max!(), out_noise, O::MAX),
    ];
    for (name, allowed, value, limit) in noise {
        if over(value, limit) {
            return Err(Error::OutOfRange { name, value, allowed });
        }
    }
    let (qmax, kmax, vmax) = (q.norm_max, k.norm_max, v.norm_max);
    // (what is bounded, its allowed range, the two as one condition, the bound, the limit);
    // outputs are convex combinations of value rows (plus noise): |o| ≤ max|v| + 9σ.
    let bounds = [
        (
            "scale * max|q| (row norm)",
            quarter!(),
            concat!("scale * max|q| (row norm) ", quarter!()),
            (scale * qmax).max(qmax),
            quarter,
        ),
        ("max|k| (row norm)", quarter!(), concat!("max|k| (row norm) ", quarter!()), kmax, quarter),
        (
            "logit bound scale * max|q| * max|k| + 9 * sigma",
            eighth!(),
            concat!("logit bound scale * max|q| * max|k| + 9 * sigma ", eighth!()),
            scale * qmax * kmax + logit_noise,
            eighth,
        ),
        (
            "accumulator bound 2 * s_k * max|v| + 9 * sigma",
            quarter!(),
            concat!("accumulator bound 2 * s_k * max|v| + 9 * sigma ", quarter!()),
            2.0 * s_k as f64 * vmax + out_noise,
            quarter,
        ),
        (
            "output bound max|v| + 9 * sigma",
            output_max!(),
            concat!("output bound max|v| + 9 * sigma ", output_max!()),
            v.abs_max + out_noise,
            O::MAX,
        ),
    ];
    for (name, allowed, condition, value, limit) in bounds {
        if over(value, limit) {
            return Err(if measured_on_data {
                Error::DomainViolation { condition, detail: PrivateDetail::from_measured(value) }
            } else {
                Error::OutOfRange { name, value, allowed }
            });
        }
    }
    Ok(())
}

/// [`attention`] with scratch allocated for the call (feature `alloc`).
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_alloc};
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let x = [1.0f32, 0.0, 0.0, 1.0];
/// let mut out = [0.0f32; 4];
/// let v = BatchedRef::contiguous(&x, [1, 1, 2, 2])?;
/// attention_alloc(BatchedMut::contiguous(&mut out, [1, 1, 2, 2])?, v, v, v, &AttentionParams::default())?;
/// assert!(out[0] > out[1]); // the first query prefers the first value row
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`], and [`Error::AllocationFailed`].
#[cfg(feature = "alloc")]
pub fn attention_alloc<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
) -> Result<()> {
    let n = attention_scratch_len(q.layout().dim(), v.layout().dim())?;
    let mut scratch = crate::scratch::try_filled(n, 0f32, "attention scratch")?;
    attention(out, q, k, v, params, &mut scratch)
}

#[cfg(test)]
mod tests {
    use super::RowStats;

    #[test]
    fn row_stats_match_the_left_to_right_pass_on_every_length() {
        for n in 0..40usize {
            let row: std::vec::Vec<f32> =
                (0..n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37).collect();
            let (sq, abs, finite) = RowStats::row(&row);
            let want_sq: f64 = row.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            let want_abs = row.iter().fold(0.0f64, |m, &x| m.max(f64::from(x).abs()));
            assert!((sq - want_sq).abs() <= 1e-14 * want_sq, "n = {n}: {sq} vs {want_sq}");
            assert_eq!(abs, want_abs, "n = {n}");
            assert!(finite);
            // A NaN or an infinity anywhere, in a full chunk or in the remainder, is seen.
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                for at in 0..n {
                    let mut r = row.clone();
                    r[at] = bad;
                    assert!(!RowStats::row(&r).2, "n = {n}, {bad} at {at}");
                }
            }
        }
        // Finite values whose squares overflow: the sum is infinite, the row still finite.
        let (sq, abs, finite) = RowStats::row(&[f64::MAX, 1.0]);
        assert!(sq.is_infinite() && abs == f64::MAX && finite);
    }

    #[test]
    fn f32_matrix_stats_match_the_exact_pass_or_decline() {
        use crate::matrix_view::MatRef;
        #[cfg(target_arch = "x86_64")]
        let tokens = [None, super::simd_avx2::Avx2Fma::detect()];
        #[cfg(not(target_arch = "x86_64"))]
        let tokens = [()];
        for t in tokens {
            let stats = |x: MatRef<'_, f32>| {
                super::dispatch::matrix_stats_f32(
                    #[cfg(target_arch = "x86_64")]
                    t,
                    x,
                )
            };
            for cols in [1usize, 7, 8, 15, 16, 17, 33, 64] {
                let rows = 3;
                let data: std::vec::Vec<f32> =
                    (0..rows * cols).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37).collect();
                let m = MatRef::from_row_major(&data, rows, cols).unwrap();
                let (sq, abs) = stats(m).expect("finite rows");
                let want = (0..rows)
                    .map(|r| RowStats::row(m.row(r)))
                    .fold((0.0f64, 0.0f64), |a, b| (a.0.max(b.0), a.1.max(b.1)));
                assert!((sq - want.0).abs() <= 1e-6 * want.0, "{cols}: {sq} vs {}", want.0);
                assert_eq!(abs, want.1, "{cols}");
                // Any NaN or infinity, in the vector part or the tail of any row: declined.
                for at in 0..rows * cols {
                    for bad in [f32::NAN, f32::INFINITY] {
                        let mut d = data.clone();
                        d[at] = bad;
                        let m = MatRef::from_row_major(&d, rows, cols).unwrap();
                        assert!(stats(m).is_none(), "{cols}: {bad} at {at}");
                    }
                }
                // Squares beyond f32 (a finite row of norm 1e20): declined, the exact pass
                // decides.
                let big = [1e20f32; 16];
                assert!(stats(MatRef::from_row_major(&big, 1, 16).unwrap()).is_none());
            }
        }
    }
}
