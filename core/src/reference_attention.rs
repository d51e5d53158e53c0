//! Plain float64 reference attention, `softmax(Q·Kᵀ·scale + mask)·V`: the test oracle.
//!
//! Guarantee: exact attention computed in `f64` with a max-shifted softmax; every input
//! element (f32, f64, f16, bf16) is widened to `f64` exactly, so the only error is `f64`
//! rounding: each logit is within about `d · 2⁻⁵³ · scale · Σ_c |q_c k_c|` of its exact
//! value (the standard dot-product bound, which is not a relative bound when terms
//! cancel), and the output row is a convex combination of value rows computed with
//! normalised weights, so it never leaves their range by more than rounding. Logits that
//! overflow `f64` (finite inputs near 1e154 or a huge custom scale) are reported as
//! [`Error::PrivateNonFinite`] for the argument `"logits"`, not turned into NaN. It is deliberately
//! simple —
//! one query row at a time, no tiling, no SIMD — so that it can be read and trusted; the
//! fast kernels of later modules and the GPU crate are tested against it. It is not a fast
//! path. No privacy: this is exact attention.
//!
//! Shapes: `q` is `[batch, heads, s_q, d]`, `k` is `[batch, heads, s_k, d]`, `v` is
//! `[batch, heads, s_k, d_v]`, `out` is `[batch, heads, s_q, d_v]`; self-attention is
//! `s_q == s_k`. Masks follow [`Mask`]: a row that sees no key is zero.

use crate::attention_options::{Mask, Scale};
use crate::batched::{BatchedMut, BatchedRef};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::scratch::check_scratch;

/// Scratch (in `f64`s) that [`reference_attention`] needs for `s_k` keys: one row of
/// scores.
///
/// ```
/// assert_eq!(dpattn_core::reference_attention::reference_attention_scratch_len(128), 128);
/// ```
pub fn reference_attention_scratch_len(s_k: usize) -> usize {
    s_k
}

/// Computes exact attention into `out`, in `f64`.
///
/// Errors: [`Error::ShapeMismatch`] for inconsistent shapes, [`Error::OutOfRange`] for a
/// zero extent or a bad scale, [`Error::PrivateNonFinite`] for NaN/∞ in `q`, `k` or `v`,
/// [`Error::ScratchTooSmall`] when `scratch.len() <
/// reference_attention_scratch_len(s_k)`. On error `out` is not written.
///
/// ```
/// use dpattn_core::{BatchedMut, BatchedRef, Mask, Scale};
/// use dpattn_core::reference_attention::{reference_attention, reference_attention_scratch_len};
/// // One head, one query, two keys with logits 0 and ln 3: weights 1/4 and 3/4.
/// let q = [1.0f64];
/// let k = [0.0f64, 3f64.ln()];
/// let v = [10.0f64, 20.0];
/// let mut out = [0.0f64];
/// let mut scratch = vec![0.0; reference_attention_scratch_len(2)];
/// reference_attention(
///     BatchedMut::contiguous(&mut out, [1, 1, 1, 1])?,
///     BatchedRef::contiguous(&q, [1, 1, 1, 1])?,
///     BatchedRef::contiguous(&k, [1, 1, 2, 1])?,
///     BatchedRef::contiguous(&v, [1, 1, 2, 1])?,
///     Mask::NONE,
///     Scale::Custom(1.0),
///     &mut scratch,
/// )?;
/// assert!((out[0] - 17.5).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn reference_attention<T: Element>(
    mut out: BatchedMut<'_, f64>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    mask: Mask<'_>,
    scale: Scale,
    scratch: &mut [f64],
) -> Result<()> {
    let [batch, heads, s_q, d] = q.layout().shape();
    let (s_k, d_v) = (k.layout().seq(), v.layout().dim());
    for (name, value) in
        [("batch", batch), ("heads", heads), ("s_q", s_q), ("d", d), ("s_k", s_k), ("d_v", d_v)]
    {
        if value == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    for (arg, l) in [("k", k.layout()), ("v", v.layout()), ("out", out.layout())] {
        l.expect_axis(arg, 0, batch)?;
        l.expect_axis(arg, 1, heads)?;
    }
    k.layout().expect_axis("k", 3, d)?;
    v.layout().expect_axis("v", 2, s_k)?;
    out.layout().expect_axis("out", 2, s_q)?;
    out.layout().expect_axis("out", 3, d_v)?;
    mask.validate(batch, s_k)?;
    let scale = scale.value(d)?;
    q.check_finite("q")?;
    k.check_finite("k")?;
    v.check_finite("v")?;
    check_scratch(scratch.len(), reference_attention_scratch_len(s_k))?;
    let scores = &mut scratch[..s_k];

    // Validation pass: every visible logit must be finite, so that the output is either
    // fully written or untouched.
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..s_q {
                row_logits(q, k, b, h, i, mask, scale, scores);
                let overflowed =
                    |(j, x): (usize, &f64)| mask.visible(b, i, j, s_q, s_k) && !x.is_finite();
                if let Some(j) = scores.iter().enumerate().position(overflowed) {
                    let index = ((b * heads + h) * s_q + i) * s_k + j;
                    return Err(Error::private_non_finite("logits", index));
                }
            }
        }
    }

    for b in 0..batch {
        for h in 0..heads {
            let vh = v.head(b, h);
            let mut oh = out.head_mut(b, h);
            for i in 0..s_q {
                let visible = row_logits(q, k, b, h, i, mask, scale, scores);
                let oi = oh.row_mut(i);
                oi.fill(0.0);
                if !visible {
                    continue; // no visible key: zero row
                }
                // Finite logits (checked above); masked keys are -inf and get weight 0.
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut denom = 0.0;
                for s in scores.iter_mut() {
                    *s = libm::exp(*s - max);
                    denom += *s;
                }
                // Normalised weights keep every partial sum within max|v| (no overflow).
                for (j, &w) in scores.iter().enumerate() {
                    if w == 0.0 {
                        continue;
                    }
                    let p = w / denom;
                    for (o, &x) in oi.iter_mut().zip(vh.row(j)) {
                        *o += p * x.to_f64();
                    }
                }
            }
        }
    }
    Ok(())
}

/// Writes the scaled logits of query row `i` of head `(b, h)` into `scores` (`-inf` for
/// masked keys) and returns whether any key is visible.
#[allow(clippy::too_many_arguments)]
fn row_logits<T: Element>(
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    b: usize,
    h: usize,
    i: usize,
    mask: Mask<'_>,
    scale: f64,
    scores: &mut [f64],
) -> bool {
    let (qi, kh) = (q.head(b, h).row(i), k.head(b, h));
    let (s_q, s_k) = (q.layout().seq(), kh.rows());
    let mut any = false;
    for (j, s) in scores.iter_mut().enumerate() {
        *s = if mask.visible(b, i, j, s_q, s_k) {
            any = true;
            let dot: f64 = qi.iter().zip(kh.row(j)).map(|(&a, &c)| a.to_f64() * c.to_f64()).sum();
            dot * scale
        } else {
            f64::NEG_INFINITY
        };
    }
    any
}

/// [`reference_attention`] on densely packed inputs, returning a new `[batch, heads, s_q,
/// d_v]` buffer. `shape_q = [batch, heads, s_q, d]`; `k` and `v` are `[batch, heads, s_k,
/// d]` and `[batch, heads, s_k, d_v]`, given by `s_k` and `d_v`.
///
/// ```
/// use dpattn_core::{Mask, Scale, reference_attention::reference_attention_vec};
/// // q = 0 gives uniform weights: the output is the mean of the value rows.
/// let q = [0.0f32; 2];
/// let k = [1.0f32, -2.0, 3.0, 0.5, -1.0, 4.0];
/// let v = [1.0f32, 2.0, 3.0];
/// let o = reference_attention_vec(&q, &k, &v, [1, 1, 1, 2], 3, 1, Mask::NONE, Scale::InvSqrtDim)?;
/// assert!((o[0] - 2.0).abs() < 1e-15);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[cfg(feature = "alloc")]
#[allow(clippy::too_many_arguments)]
pub fn reference_attention_vec<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape_q: [usize; 4],
    s_k: usize,
    d_v: usize,
    mask: Mask<'_>,
    scale: Scale,
) -> Result<alloc::vec::Vec<f64>> {
    let [batch, heads, s_q, d] = shape_q;
    let qv = BatchedRef::contiguous(q, shape_q)?;
    let kv = BatchedRef::contiguous(k, [batch, heads, s_k, d])?;
    let vv = BatchedRef::contiguous(v, [batch, heads, s_k, d_v])?;
    let out_shape = [batch, heads, s_q, d_v];
    let n = crate::batched::Layout4::contiguous(out_shape)?.numel();
    let mut out = crate::scratch::try_filled(n, 0.0f64, "reference attention output")?;
    let mut scratch = crate::scratch::try_filled(
        reference_attention_scratch_len(s_k),
        0.0f64,
        "reference attention scratch",
    )?;
    reference_attention(
        BatchedMut::contiguous(&mut out, out_shape)?,
        qv,
        kv,
        vv,
        mask,
        scale,
        &mut scratch,
    )?;
    Ok(out)
}
