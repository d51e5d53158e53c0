//! Exact batched multi-head attention (`dpattn_core::attention`) and the float64 reference
//! (`dpattn_core::reference_attention`) from C.
//!
//! These entry points compute exact attention: **no privacy** on their own. The noisy and
//! DP variants are in `noisy_attention.rs` and `output_perturbation.rs` and share the
//! option decoding and argument checking of this module.

use dpattn_core::attention::{self as core_attn, AttentionParams};
use dpattn_core::reference_attention as core_ref;
use dpattn_core::{BatchedMut, BatchedRef, Kernel, Mask, Scale, ScoreFn};

use crate::args::{Buffers, Out, flag, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status};
use crate::status::dpattn_status;
use crate::tensor::{HasDtype, dpattn_tensor4, dpattn_tensor4_mut, with_dtype};

/// Score function `f = exp`: the softmax (default).
pub const DPATTN_SCORE_EXP: u32 = 0;
/// Score function `f = cosh`, the symmetric variant of paper 000 (Definition 1.4).
pub const DPATTN_SCORE_COSH: u32 = 1;
/// Logit scale `1/√d` (default).
pub const DPATTN_SCALE_INV_SQRT_DIM: u32 = 0;
/// Logit scale `1/d` (the DP cross-attention paper, seed 001).
pub const DPATTN_SCALE_INV_DIM: u32 = 1;
/// Logit scale given by the `scale` field (finite and `> 0`).
pub const DPATTN_SCALE_CUSTOM: u32 = 2;
/// The fastest kernel this CPU supports (default).
pub const DPATTN_KERNEL_AUTO: u32 = 0;
/// The portable kernel (every target; multiply-adds round twice).
pub const DPATTN_KERNEL_PORTABLE: u32 = 1;
/// The x86-64 AVX2 + FMA kernel; `DPATTN_STATUS_UNSUPPORTED` where the CPU lacks it.
pub const DPATTN_KERNEL_AVX2_FMA: u32 = 2;

/// Options of an attention call. Fill with `dpattn_attention_options_default` and change
/// what you need; a NULL options pointer means the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_attention_options {
    /// 1: causal mask, bottom-right aligned (query `i` sees keys `j <= i + s_k - s_q`, as in
    /// FlashAttention >= 2.1; for `s_q == s_k` the usual lower triangle). 0: none (default).
    /// Other values: `DPATTN_STATUS_OUT_OF_RANGE`.
    pub causal: u32,
    /// `DPATTN_SCORE_EXP` (default) or `DPATTN_SCORE_COSH`.
    pub score: u32,
    /// `DPATTN_SCALE_INV_SQRT_DIM` (default), `_INV_DIM` or `_CUSTOM`.
    pub scale_kind: u32,
    /// The logit scale when `scale_kind == DPATTN_SCALE_CUSTOM` (finite, `> 0`); ignored
    /// otherwise. Default 1.0.
    pub scale: f64,
    /// `DPATTN_KERNEL_AUTO` (default), `_PORTABLE` or `_AVX2_FMA`.
    pub kernel: u32,
    /// Key-padding mask `[batch, s_k]` row-major, one byte per key: 1 = the key exists
    /// (visible), 0 = padding (never attended to); any other byte is
    /// `DPATTN_STATUS_OUT_OF_RANGE`. NULL (with length 0) = no padding (default).
    pub key_padding: *const u8,
    /// Bytes at `key_padding`: must be `batch * s_k` when `key_padding` is not NULL.
    pub key_padding_len: usize,
    /// Threads of a `dpattn_attention` call: 0 or 1 (default) = the calling thread only;
    /// `t` above 1 splits each head's query rows into `t` blocks of whole 96-row tiles on
    /// `t` threads (started per head; worth it from a few hundred query rows), bit for bit
    /// the single-threaded result, with `scratch` holding `t * dpattn_attention_scratch_len`
    /// floats. Other calls taking these options accept only 0 or 1
    /// (`DPATTN_STATUS_OUT_OF_RANGE` otherwise).
    pub threads: u32,
}

impl Default for dpattn_attention_options {
    fn default() -> Self {
        Self {
            causal: 0,
            score: DPATTN_SCORE_EXP,
            scale_kind: DPATTN_SCALE_INV_SQRT_DIM,
            scale: 1.0,
            kernel: DPATTN_KERNEL_AUTO,
            key_padding: core::ptr::null(),
            key_padding_len: 0,
            threads: 1,
        }
    }
}

pub(crate) fn score_fn(value: u32, arg: &'static str) -> Result<ScoreFn, FfiError> {
    match value {
        DPATTN_SCORE_EXP => Ok(ScoreFn::Exp),
        DPATTN_SCORE_COSH => Ok(ScoreFn::Cosh),
        value => Err(FfiError::UnknownValue {
            arg,
            value,
            allowed: "DPATTN_SCORE_EXP (0), DPATTN_SCORE_COSH (1)",
        }),
    }
}

pub(crate) fn scale_of(kind: u32, value: f64, arg: &'static str) -> Result<Scale, FfiError> {
    match kind {
        DPATTN_SCALE_INV_SQRT_DIM => Ok(Scale::InvSqrtDim),
        DPATTN_SCALE_INV_DIM => Ok(Scale::InvDim),
        DPATTN_SCALE_CUSTOM => Ok(Scale::Custom(value)),
        value => Err(FfiError::UnknownValue {
            arg,
            value,
            allowed: "DPATTN_SCALE_INV_SQRT_DIM (0), _INV_DIM (1), _CUSTOM (2)",
        }),
    }
}

pub(crate) fn kernel_of(value: u32, arg: &'static str) -> Result<Kernel, FfiError> {
    match value {
        DPATTN_KERNEL_AUTO => Ok(Kernel::Auto),
        DPATTN_KERNEL_PORTABLE => Ok(Kernel::Portable),
        DPATTN_KERNEL_AVX2_FMA => Ok(Kernel::Avx2Fma),
        value => Err(FfiError::UnknownValue {
            arg,
            value,
            allowed: "DPATTN_KERNEL_AUTO (0), _PORTABLE (1), _AVX2_FMA (2)",
        }),
    }
}

/// Reads a key-padding byte mask as `&[bool]`, recording it as an input of the call.
/// Every byte must be 0 or 1 (checked here, so the reinterpretation is sound).
///
/// # Safety
/// A non-NULL `ptr` must be readable for `len` bytes for `'a`, unwritten during `'a`.
pub(crate) unsafe fn key_padding<'a>(
    ptr: *const u8,
    len: usize,
    bufs: &mut Buffers,
) -> Result<Option<&'a [bool]>, FfiError> {
    if ptr.is_null() && len == 0 {
        return Ok(None);
    }
    // SAFETY: forwarded caller contract.
    let bytes = unsafe { slice(ptr, len, "key_padding") }?;
    if let Some(&b) = bytes.iter().find(|&&b| b > 1) {
        return Err(FfiError::UnknownValue {
            arg: "key_padding",
            value: u32::from(b),
            allowed: "bytes 0 (padding) or 1 (visible key)",
        });
    }
    bufs.input("key_padding", ptr, len);
    // SAFETY: every byte is 0 or 1, the two valid bit patterns of `bool`, which has the
    // size and alignment of `u8`; the lifetime and length are those of `bytes`.
    Ok(Some(unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<bool>(), bytes.len()) }))
}

/// Decodes attention options (NULL = defaults), recording the key-padding buffer.
///
/// # Safety
/// `ptr` must be NULL or readable for one `dpattn_attention_options`, whose `key_padding`
/// follows the contract of [`key_padding`].
pub(crate) unsafe fn decode_options<'a>(
    ptr: *const dpattn_attention_options,
    bufs: &mut Buffers,
) -> Result<AttentionParams<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let (params, threads) = unsafe { decode_options_threaded(ptr, bufs) }?;
    if threads > 1 {
        return Err(FfiError::UnknownValue {
            arg: "options.threads",
            value: threads as u32,
            allowed: "0 or 1 (only dpattn_attention starts threads)",
        });
    }
    Ok(params)
}

/// [`decode_options`] that also returns the thread count (at least 1), for
/// `dpattn_attention`.
///
/// # Safety
/// As [`decode_options`].
unsafe fn decode_options_threaded<'a>(
    ptr: *const dpattn_attention_options,
    bufs: &mut Buffers,
) -> Result<(AttentionParams<'a>, usize), FfiError> {
    let o = if ptr.is_null() {
        dpattn_attention_options::default()
    } else {
        // SAFETY: non-NULL and readable per the caller's contract.
        unsafe { read(ptr, "options") }?
    };
    let causal = flag("options.causal", o.causal)?;
    let score = score_fn(o.score, "options.score")?;
    let scale = scale_of(o.scale_kind, o.scale, "options.scale_kind")?;
    let kernel = kernel_of(o.kernel, "options.kernel")?;
    // SAFETY: forwarded caller contract.
    let key_padding = unsafe { key_padding(o.key_padding, o.key_padding_len, bufs) }?;
    let params = AttentionParams { mask: Mask { causal, key_padding }, scale, score, kernel };
    Ok((params, o.threads.max(1) as usize))
}

/// The checked Rust views of one attention call.
pub(crate) struct Views<'a, T, O, S> {
    pub(crate) out: BatchedMut<'a, O>,
    pub(crate) q: BatchedRef<'a, T>,
    pub(crate) k: BatchedRef<'a, T>,
    pub(crate) v: BatchedRef<'a, T>,
    pub(crate) scratch: &'a mut [S],
}

/// The tensor arguments of a call, read from C.
pub(crate) struct Tensors {
    pub(crate) out: dpattn_tensor4_mut,
    pub(crate) q: dpattn_tensor4,
    pub(crate) k: dpattn_tensor4,
    pub(crate) v: dpattn_tensor4,
}

/// Reads the four tensor structs (NULL checks, in argument order).
///
/// # Safety
/// Each pointer must be NULL or readable for one struct.
pub(crate) unsafe fn read_tensors(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
) -> Result<Tensors, FfiError> {
    // SAFETY: forwarded caller contract.
    unsafe {
        Ok(Tensors { out: read(out, "out")?, q: read(q, "q")?, k: read(k, "k")?, v: read(v, "v")? })
    }
}

impl Tensors {
    /// Records `q`, `k`, `v` as inputs and `out`, `scratch` as outputs in `bufs` (which may
    /// already hold other buffers of the call), proves the outputs disjoint, then builds the
    /// views.
    ///
    /// # Safety
    /// The tensors' `data` must be valid for their `len` elements of `T` (`O` for `out`),
    /// readable (writable for `out`) for `'a`; a non-NULL `scratch` must be writable for
    /// `scratch_len` elements of `S` for `'a`; nothing else may access the outputs during
    /// `'a`.
    pub(crate) unsafe fn views<'a, T: HasDtype, O: HasDtype, S>(
        &self,
        scratch: *mut S,
        scratch_len: usize,
        bufs: &mut Buffers,
    ) -> Result<Views<'a, T, O, S>, FfiError> {
        self.q.record::<T>("q", bufs);
        self.k.record::<T>("k", bufs);
        self.v.record::<T>("v", bufs);
        self.out.record::<O>("out", bufs);
        bufs.output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; the outputs overlap nothing (checked above).
        unsafe {
            Ok(Views {
                q: self.q.view::<T>("q")?,
                k: self.k.view::<T>("k")?,
                v: self.v.view::<T>("v")?,
                out: self.out.view_mut::<O>("out")?,
                scratch: slice_mut(scratch, scratch_len, "scratch")?,
            })
        }
    }
}

/// Fills `*out` with the default options: no mask, scale `1/√d` (`scale` field 1.0, unused),
/// softmax, the fastest kernel, no key padding, one thread. Returns `DPATTN_STATUS_NULL_ARGUMENT` for a
/// NULL `out`, else `DPATTN_STATUS_OK`. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or valid for one write of `dpattn_attention_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_attention_options_default(
    out: *mut dpattn_attention_options,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { crate::args::write_default(out) }
}

/// Writes to `*out_len` the scratch length (in elements: `float` for `dpattn_attention`,
/// `dpattn_attention_heads`, `dpattn_noisy_attention*`, `dpattn_output_perturbation_attention`;
/// `double` for the `_f64` variants) for key dimension `d` and value dimension `d_v`,
/// whatever the batch, heads and sequence lengths (26 816 at `d = d_v = 64`).
/// Returns `DPATTN_STATUS_NULL_ARGUMENT` (NULL `out_len`) or `DPATTN_STATUS_SIZE_OVERFLOW`
/// (the length does not fit in `size_t`); `*out_len` is written only on success.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_len` must be NULL or valid for one write of `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_attention_scratch_len(
    d: usize,
    d_v: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = core_attn::attention_scratch_len(d, d_v)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Exact attention `out = D⁻¹ f(A) · V`, `A = scale · Q·Kᵀ` with masked entries excluded and
/// `f = exp` (softmax) or `cosh`, per `(batch, head)`, computed in `float` with the tiled
/// online-softmax (FlashAttention-style) kernel; no `s_q × s_k` matrix is formed and
/// nothing is allocated. **No privacy**: this is exact attention.
///
/// Shapes (`[batch, heads, seq, dim]`, any strides with a contiguous last axis, e.g. a
/// `[batch, seq, heads, dim]` buffer viewed through strides): `q` `[B, H, s_q, d]`, `k`
/// `[B, H_kv, s_k, d]`, `v` `[B, H_kv, s_k, d_v]`, `out` `[B, H, s_q, d_v]`, where `H_kv`
/// divides `H` (grouped-query attention: query head `h` reads key/value head
/// `h / (H / H_kv)`; `H_kv = 1` is multi-query attention; the GPU entry points need
/// `H_kv = H`). `q`, `k`, `v` share one
/// dtype (`DPATTN_DTYPE_F32`, `_F64` (rounded to `float` once), `_F16`, `_BF16`); `out` may
/// have any dtype. A query row that sees no key (masks) is zero. Accuracy: within a few
/// `float` ulps times the row's `Σ|p·v|` of the float64 reference (tested at 1e-5
/// relative). `scratch` holds at least `dpattn_attention_scratch_len(d, d_v)` floats.
///
/// ```c
/// size_t n;
/// dpattn_attention_scratch_len(64, 64, &n);
/// float *scratch = malloc(n * sizeof(float));
/// dpattn_tensor4 q = {qbuf, B * S * H * 64, DPATTN_DTYPE_F32, {B, H, S, 64},
///                     {S * H * 64, 64, H * 64, 1}};   // [B, S, H, D] storage
/// dpattn_tensor4 k = q, v = q;  k.data = kbuf; v.data = vbuf;
/// dpattn_tensor4_mut out = {obuf, B * S * H * 64, DPATTN_DTYPE_F32, {B, H, S, 64},
///                           {S * H * 64, 64, H * 64, 1}};
/// dpattn_attention_options opt;
/// dpattn_attention_options_default(&opt);
/// opt.causal = 1;
/// if (dpattn_attention(&out, &q, &k, &v, &opt, scratch, n) != DPATTN_STATUS_OK) { ... }
/// ```
///
/// Status codes (on any failure `out` is untouched):
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `out`, `q`, `k`, `v` or `scratch` (with a nonzero
///   length) is NULL, or a tensor's `data` is NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: unknown dtype/enum value, a dtype of `k`/`v` differing
///   from `q`'s, `causal` not 0/1, a key-padding byte other than 0/1, a zero extent, a bad
///   custom scale, a bad stride, or inputs so large the `float` computation could overflow;
/// * `DPATTN_STATUS_SHAPE_MISMATCH`: inconsistent shapes, or `key_padding_len != batch * s_k`;
/// * `DPATTN_STATUS_BUFFER_TOO_SHORT`: a tensor's `len` is below its layout's extent;
/// * `DPATTN_STATUS_NON_FINITE`: NaN or infinity in `q`, `k` or `v`;
/// * `DPATTN_STATUS_SCRATCH_TOO_SMALL`; `DPATTN_STATUS_MISALIGNED`;
/// * `DPATTN_STATUS_ALIASING`: `out` or `scratch` overlaps another buffer of the call;
/// * `DPATTN_STATUS_UNSUPPORTED`: `DPATTN_KERNEL_AVX2_FMA` on a CPU without it;
/// * `DPATTN_STATUS_SIZE_OVERFLOW`.
///
/// Thread-safe; no shared state (give each thread its own `out` and `scratch`).
///
/// # Safety
/// Each struct pointer must be NULL or readable for one struct; every tensor's `data` must
/// be valid for `len` elements of its dtype (writable for `out`), the key-padding pointer
/// for `key_padding_len` bytes, a non-NULL `scratch` writable for `scratch_len` floats;
/// no other thread may write the inputs or touch the outputs during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_attention(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    scratch: *mut f32,
    scratch_len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { run_f32(out, q, k, v, options, None, scratch, scratch_len) })
}

/// `dpattn_attention` for the flattened heads `first_head .. first_head + n` only
/// (flattened index `b * heads + h`), written to `out` of shape `[1, n, s_q, d_v]`: how
/// callers parallelise (split the heads into ranges, one `out` chunk and one scratch per
/// thread). The result equals the corresponding heads of one `dpattn_attention` call, bit
/// for bit. Status codes as `dpattn_attention`, plus `DPATTN_STATUS_SHAPE_MISMATCH` when
/// `out` is not `[1, n, s_q, d_v]` or the range passes the last head. Thread-safe; no
/// shared state.
///
/// # Safety
/// As `dpattn_attention`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_attention_heads(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    first_head: usize,
    scratch: *mut f32,
    scratch_len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { run_f32(out, q, k, v, options, Some(first_head), scratch, scratch_len) })
}

#[allow(clippy::too_many_arguments)]
unsafe fn run_f32(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    first: Option<usize>,
    scratch: *mut f32,
    scratch_len: usize,
) -> Result<(), FfiError> {
    // SAFETY: forwarded caller contract.
    let t = unsafe { read_tensors(out, q, k, v) }?;
    let mut bufs = Buffers::default();
    let (params, threads) = match first {
        // SAFETY: forwarded caller contract.
        None => unsafe { decode_options_threaded(options, &mut bufs) }?,
        // SAFETY: forwarded caller contract.
        Some(_) => (unsafe { decode_options(options, &mut bufs) }?, 1),
    };
    with_dtype!(t.q.dtype, "q.dtype", |T| with_dtype!(t.out.dtype, "out.dtype", |O| {
        // SAFETY: forwarded caller contract.
        let w = unsafe { t.views::<T, O, f32>(scratch, scratch_len, &mut bufs) }?;
        match first {
            None if threads > 1 => {
                core_attn::attention_threaded(w.out, w.q, w.k, w.v, &params, threads, w.scratch)?
            }
            None => core_attn::attention(w.out, w.q, w.k, w.v, &params, w.scratch)?,
            Some(f) => core_attn::attention_heads(w.out, w.q, w.k, w.v, &params, f, w.scratch)?,
        }
        Ok(())
    }))
}

/// The same tiled algorithm as `dpattn_attention` computed in `double` with the portable
/// kernel (`options->kernel` is ignored): `out` must have dtype `DPATTN_DTYPE_F64`; `q`,
/// `k`, `v` share any dtype. `scratch` holds `dpattn_attention_scratch_len(d, d_v)`
/// doubles. Agrees with the float64 reference to about 1e-12. Status codes as
/// `dpattn_attention` (a non-`F64` `out` is `DPATTN_STATUS_OUT_OF_RANGE`). Thread-safe; no
/// shared state.
///
/// # Safety
/// As `dpattn_attention`, with `scratch` writable for `scratch_len` doubles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_attention_f64(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let t = unsafe { read_tensors(out, q, k, v) }?;
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let params = unsafe { decode_options(options, &mut bufs) }?;
        with_dtype!(t.q.dtype, "q.dtype", |T| {
            // SAFETY: forwarded caller contract.
            let w = unsafe { t.views::<T, f64, f64>(scratch, scratch_len, &mut bufs) }?;
            core_attn::attention_f64(w.out, w.q, w.k, w.v, &params, w.scratch)?;
            Ok(())
        })
    })
}

/// Writes to `*out_len` the scratch (`double` elements) of `dpattn_reference_attention` for
/// `s_k` keys: `s_k`. Returns `DPATTN_STATUS_NULL_ARGUMENT` for a NULL `out_len`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_len` must be NULL or valid for one write of `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_reference_attention_scratch_len(
    s_k: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(core_ref::reference_attention_scratch_len(s_k)) };
        Ok(())
    })
}

/// The plain float64 reference `out = softmax(scale · Q·Kᵀ + mask) · V`, one query row at a
/// time (max-shifted softmax, no tiling, no SIMD): the test oracle, not a fast path. **No
/// privacy.** `out` must have dtype `DPATTN_DTYPE_F64`; `q`, `k`, `v` share any dtype (widened
/// to `double` exactly). Only the softmax is supported: `options->score` must be
/// `DPATTN_SCORE_EXP` (`DPATTN_SCORE_COSH` is `DPATTN_STATUS_OUT_OF_RANGE`); `kernel` is
/// ignored. Shapes and the other status codes as `dpattn_attention`; logits that overflow
/// `double` are `DPATTN_STATUS_NON_FINITE`. `scratch` holds `s_k` doubles
/// (`dpattn_reference_attention_scratch_len`). On failure `out` is untouched. Thread-safe;
/// no shared state.
///
/// # Safety
/// As `dpattn_attention_f64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_reference_attention(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let t = unsafe { read_tensors(out, q, k, v) }?;
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let params = unsafe { decode_options(options, &mut bufs) }?;
        if params.score != ScoreFn::Exp {
            return Err(FfiError::UnknownValue {
                arg: "options.score",
                value: DPATTN_SCORE_COSH,
                allowed: "DPATTN_SCORE_EXP (0) for the reference",
            });
        }
        with_dtype!(t.q.dtype, "q.dtype", |T| {
            // SAFETY: forwarded caller contract.
            let w = unsafe { t.views::<T, f64, f64>(scratch, scratch_len, &mut bufs) }?;
            core_ref::reference_attention(
                w.out,
                w.q,
                w.k,
                w.v,
                params.mask,
                params.scale,
                w.scratch,
            )?;
            Ok(())
        })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use crate::tensor::{DPATTN_DTYPE_BF16, DPATTN_DTYPE_F16, DPATTN_DTYPE_F32, DPATTN_DTYPE_F64};
    use dpattn_core::Layout4;
    use half::{bf16, f16};

    pub(crate) fn t<T>(data: &[T], shape: [usize; 4], dtype: u32) -> dpattn_tensor4 {
        let strides = Layout4::contiguous(shape).unwrap().strides();
        dpattn_tensor4 { data: data.as_ptr().cast(), len: data.len(), dtype, shape, strides }
    }

    pub(crate) fn tm<T>(data: &mut [T], shape: [usize; 4], dtype: u32) -> dpattn_tensor4_mut {
        let strides = Layout4::contiguous(shape).unwrap().strides();
        dpattn_tensor4_mut {
            data: data.as_mut_ptr().cast(),
            len: data.len(),
            dtype,
            shape,
            strides,
        }
    }

    pub(crate) fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 37 + seed * 11) % 23) as f32 - 11.0) / 9.0).collect()
    }

    const SHAPE_Q: [usize; 4] = [2, 3, 5, 4];
    const SHAPE_K: [usize; 4] = [2, 3, 7, 4];

    fn scratch() -> Vec<f32> {
        vec![0.0; core_attn::attention_scratch_len(4, 4).unwrap()]
    }

    fn core_ref_out(q: &[f32], k: &[f32], v: &[f32], p: &AttentionParams<'_>) -> Vec<f32> {
        let mut out = vec![0f32; 2 * 3 * 5 * 4];
        core_attn::attention(
            BatchedMut::contiguous(&mut out, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(q, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(k, SHAPE_K).unwrap(),
            BatchedRef::contiguous(v, SHAPE_K).unwrap(),
            p,
            &mut scratch(),
        )
        .unwrap();
        out
    }

    #[test]
    fn equals_the_core_bit_for_bit_with_masks_and_cosh() {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let pad: Vec<u8> = (0..14).map(|i| u8::from(i % 3 != 1)).collect();
        let padb: Vec<bool> = pad.iter().map(|&b| b == 1).collect();
        for (causal, score, kernel) in [(0, 0, 0), (1, 1, 1), (1, 0, 1), (0, 1, 0)] {
            let opt = dpattn_attention_options {
                causal,
                score,
                kernel,
                key_padding: pad.as_ptr(),
                key_padding_len: pad.len(),
                ..Default::default()
            };
            let p = AttentionParams {
                mask: Mask { causal: causal == 1, key_padding: Some(&padb) },
                score: if score == 1 { ScoreFn::Cosh } else { ScoreFn::Exp },
                kernel: if kernel == 1 { Kernel::Portable } else { Kernel::Auto },
                scale: Scale::InvSqrtDim,
            };
            let want = core_ref_out(&q, &k, &v, &p);
            let mut got = vec![0f32; 120];
            let mut s = scratch();
            // SAFETY: all buffers are live locals of the stated lengths.
            let st = unsafe {
                dpattn_attention(
                    &tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F32),
                    &t(&q, SHAPE_Q, DPATTN_DTYPE_F32),
                    &t(&k, SHAPE_K, DPATTN_DTYPE_F32),
                    &t(&v, SHAPE_K, DPATTN_DTYPE_F32),
                    &opt,
                    s.as_mut_ptr(),
                    s.len(),
                )
            };
            assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            // Heads 2..5 equal the slice of the full call.
            let mut part = vec![0f32; 3 * 5 * 4];
            // SAFETY: as above.
            let st = unsafe {
                dpattn_attention_heads(
                    &tm(&mut part, [1, 3, 5, 4], DPATTN_DTYPE_F32),
                    &t(&q, SHAPE_Q, DPATTN_DTYPE_F32),
                    &t(&k, SHAPE_K, DPATTN_DTYPE_F32),
                    &t(&v, SHAPE_K, DPATTN_DTYPE_F32),
                    &opt,
                    2,
                    s.as_mut_ptr(),
                    s.len(),
                )
            };
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(&part[..], &want[2 * 20..5 * 20]);
        }
    }

    #[test]
    fn half_inputs_f64_variant_and_reference_equal_the_core() {
        let (q, k, v) = (data(120, 4), data(168, 5), data(168, 6));
        let h = |x: &[f32]| x.iter().map(|&a| f16::from_f32(a)).collect::<Vec<_>>();
        let b = |x: &[f32]| x.iter().map(|&a| bf16::from_f32(a)).collect::<Vec<_>>();
        let p = AttentionParams::default();
        let mut s = scratch();
        let (qh, kh, vh) = (h(&q), h(&k), h(&v));
        let mut want = vec![f16::ZERO; 120];
        core_attn::attention(
            BatchedMut::contiguous(&mut want, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&qh, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&kh, SHAPE_K).unwrap(),
            BatchedRef::contiguous(&vh, SHAPE_K).unwrap(),
            &p,
            &mut s,
        )
        .unwrap();
        let mut got = vec![f16::ZERO; 120];
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_attention(
                &tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F16),
                &t(&qh, SHAPE_Q, DPATTN_DTYPE_F16),
                &t(&kh, SHAPE_K, DPATTN_DTYPE_F16),
                &t(&vh, SHAPE_K, DPATTN_DTYPE_F16),
                std::ptr::null(),
                s.as_mut_ptr(),
                s.len(),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(got, want);

        let (qb, kb, vb) = (b(&q), b(&k), b(&v));
        let mut s64 = vec![0f64; s.len()];
        let mut want = vec![0f64; 120];
        core_attn::attention_f64(
            BatchedMut::contiguous(&mut want, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&qb, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&kb, SHAPE_K).unwrap(),
            BatchedRef::contiguous(&vb, SHAPE_K).unwrap(),
            &p,
            &mut s64,
        )
        .unwrap();
        let mut got = vec![0f64; 120];
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_attention_f64(
                &tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F64),
                &t(&qb, SHAPE_Q, DPATTN_DTYPE_BF16),
                &t(&kb, SHAPE_K, DPATTN_DTYPE_BF16),
                &t(&vb, SHAPE_K, DPATTN_DTYPE_BF16),
                std::ptr::null(),
                s64.as_mut_ptr(),
                s64.len(),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(got, want);

        let mut want = vec![0f64; 120];
        let mut rs = vec![0f64; 7];
        core_ref::reference_attention(
            BatchedMut::contiguous(&mut want, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&q, SHAPE_Q).unwrap(),
            BatchedRef::contiguous(&k, SHAPE_K).unwrap(),
            BatchedRef::contiguous(&v, SHAPE_K).unwrap(),
            Mask::NONE,
            Scale::InvSqrtDim,
            &mut rs,
        )
        .unwrap();
        let mut got = vec![0f64; 120];
        let mut n = 0usize;
        // SAFETY: live locals.
        assert_eq!(unsafe { dpattn_reference_attention_scratch_len(7, &mut n) }, dpattn_status::Ok);
        assert_eq!(n, 7);
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_reference_attention(
                &tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F64),
                &t(&q, SHAPE_Q, DPATTN_DTYPE_F32),
                &t(&k, SHAPE_K, DPATTN_DTYPE_F32),
                &t(&v, SHAPE_K, DPATTN_DTYPE_F32),
                std::ptr::null(),
                rs.as_mut_ptr(),
                rs.len(),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(got, want);
    }

    /// Runs `dpattn_attention` on perturbed arguments; asserts the status, that `out` kept
    /// its sentinel, and that the message contains `needle`.
    /// The arguments of one call, for tests to perturb.
    struct Args<'a> {
        o: dpattn_tensor4_mut,
        q: dpattn_tensor4,
        k: dpattn_tensor4,
        v: dpattn_tensor4,
        opt: dpattn_attention_options,
        s: &'a mut Vec<f32>,
    }

    /// Runs `dpattn_attention` on perturbed arguments; asserts the status, that `out` kept
    /// its sentinel, and that the message contains `needle`.
    fn expect_err(st: dpattn_status, f: impl FnOnce(&mut Args<'_>), needle: &str) {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let mut got = vec![7f32; 120];
        let mut s = scratch();
        let mut a = Args {
            o: tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F32),
            q: t(&q, SHAPE_Q, DPATTN_DTYPE_F32),
            k: t(&k, SHAPE_K, DPATTN_DTYPE_F32),
            v: t(&v, SHAPE_K, DPATTN_DTYPE_F32),
            opt: dpattn_attention_options::default(),
            s: &mut s,
        };
        f(&mut a);
        // SAFETY: pointers are live locals; lengths stay within their buffers except where
        // a test makes them inconsistent on purpose, which the callee must reject first.
        let r = unsafe {
            dpattn_attention(&a.o, &a.q, &a.k, &a.v, &a.opt, a.s.as_mut_ptr(), a.s.len())
        };
        assert_eq!(r, st, "{}", last_error_string());
        assert!(last_error_string().contains(needle), "{} lacks {needle}", last_error_string());
        assert!(got.iter().all(|&x| x == 7.0), "out was written");
    }

    #[test]
    fn every_error_path_has_its_status_and_leaves_out_alone() {
        use dpattn_status as S;
        let pad2 = [1u8, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
        let pad_ok = [1u8; 14];
        expect_err(S::NullArgument, |a| a.q.data = std::ptr::null(), "q");
        expect_err(S::ShapeMismatch, |a| a.k.shape[3] = 3, "k");
        expect_err(S::ShapeMismatch, |a| a.o.shape[2] = 4, "out");
        expect_err(S::OutOfRange, |a| a.k.dtype = DPATTN_DTYPE_F16, "k");
        expect_err(S::OutOfRange, |a| a.q.dtype = 9, "q.dtype");
        expect_err(S::OutOfRange, |a| a.o.dtype = 9, "out.dtype");
        expect_err(S::OutOfRange, |a| a.opt.causal = 2, "options.causal");
        expect_err(S::OutOfRange, |a| a.opt.score = 2, "options.score");
        expect_err(S::OutOfRange, |a| a.opt.kernel = 3, "options.kernel");
        expect_err(S::OutOfRange, |a| a.opt.scale_kind = 3, "options.scale_kind");
        expect_err(
            S::OutOfRange,
            |a| {
                a.opt.scale_kind = DPATTN_SCALE_CUSTOM;
                a.opt.scale = f64::NAN;
            },
            "scale",
        );
        expect_err(
            S::OutOfRange,
            |a| {
                a.opt.key_padding = pad2.as_ptr();
                a.opt.key_padding_len = pad2.len();
            },
            "key_padding",
        );
        expect_err(
            S::ShapeMismatch,
            |a| {
                a.opt.key_padding = pad_ok.as_ptr();
                a.opt.key_padding_len = 13;
            },
            "key_padding",
        );
        expect_err(
            S::NullArgument,
            |a| {
                a.opt.key_padding = std::ptr::null();
                a.opt.key_padding_len = 14;
            },
            "key_padding",
        );
        expect_err(S::ScratchTooSmall, |a| a.s.truncate(10), "scratch");
        expect_err(S::BufferTooShort, |a| a.v.len = 100, "v");
        expect_err(
            S::OutOfRange,
            |a| {
                for s in [&mut a.q.shape, &mut a.k.shape, &mut a.v.shape, &mut a.o.shape] {
                    s[0] = 0;
                }
            },
            "batch",
        );
        // Out overlapping q: point out at q's own buffer.
        expect_err(S::Aliasing, |a| a.o.data = a.q.data.cast_mut(), "out");
        let mut q_nan = data(120, 1);
        q_nan[17] = f32::NAN;
        let qp = q_nan.as_ptr();
        expect_err(S::NonFinite, |a| a.q.data = qp.cast(), "q");
        if !Kernel::Avx2Fma.is_available() {
            expect_err(S::Unsupported, |a| a.opt.kernel = DPATTN_KERNEL_AVX2_FMA, "AVX2");
        }
        // Scratch overlapping an input.
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let mut got = vec![7f32; 120];
        // SAFETY: the scratch pointer aliases `k` on purpose; it is rejected before any write.
        let r = unsafe {
            dpattn_attention(
                &tm(&mut got, SHAPE_Q, DPATTN_DTYPE_F32),
                &t(&q, SHAPE_Q, DPATTN_DTYPE_F32),
                &t(&k, SHAPE_K, DPATTN_DTYPE_F32),
                &t(&v, SHAPE_K, DPATTN_DTYPE_F32),
                std::ptr::null(),
                k.as_ptr().cast_mut(),
                core_attn::attention_scratch_len(4, 4).unwrap(),
            )
        };
        assert_eq!(r, S::Aliasing);
        assert!(last_error_string().contains("scratch"));
        // NULL struct pointers.
        // SAFETY: NULL is reported, never dereferenced.
        let r = unsafe {
            dpattn_attention(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(r, S::NullArgument);
        assert!(last_error_string().contains("`out`"));
    }

    #[test]
    fn small_entry_points() {
        let mut n = 5usize;
        // SAFETY: live local.
        assert_eq!(unsafe { dpattn_attention_scratch_len(64, 64, &mut n) }, dpattn_status::Ok);
        assert_eq!(n, core_attn::attention_scratch_len(64, 64).unwrap());
        let mut n = 5usize;
        // SAFETY: live local.
        let s = unsafe { dpattn_attention_scratch_len(usize::MAX, 1, &mut n) };
        assert_eq!((s, n), (dpattn_status::SizeOverflow, 5));
        // SAFETY: NULL is reported.
        let s = unsafe { dpattn_attention_scratch_len(1, 1, std::ptr::null_mut()) };
        assert_eq!(s, dpattn_status::NullArgument);
        assert!(last_error_string().contains("out_len"));
        let mut o = dpattn_attention_options { causal: 9, ..Default::default() };
        // SAFETY: live local.
        assert_eq!(unsafe { dpattn_attention_options_default(&mut o) }, dpattn_status::Ok);
        assert_eq!((o.causal, o.scale, o.key_padding_len), (0, 1.0, 0));
        // SAFETY: NULL is reported.
        let s = unsafe { dpattn_attention_options_default(std::ptr::null_mut()) };
        assert_eq!(s, dpattn_status::NullArgument);
        // SAFETY: NULL is reported.
        let s = unsafe { dpattn_reference_attention_scratch_len(1, std::ptr::null_mut()) };
        assert_eq!(s, dpattn_status::NullArgument);
    }
}
