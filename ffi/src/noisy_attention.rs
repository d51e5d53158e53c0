//! Attention with keyed Gaussian noise on the outputs and/or logits
//! (`dpattn_core::noisy_attention`) from C.
//!
//! **No privacy claim on its own**: `σ` is the caller's choice and no sensitivity is bounded
//! here (the calibrated mechanism is `dpattn_output_perturbation_attention`). What it
//! guarantees is addressable, replayable noise keyed by logical indices.

use dpattn_core::noisy_attention::{self as core_noisy, NoiseSpec, NoiseStream};
use dpattn_core::sampling::NoiseKey;

use crate::args::{Buffers, flag, read, slice};
use crate::attention::{decode_options, dpattn_attention_options, read_tensors};
use crate::boundary::{FfiError, ffi_status};
use crate::status::dpattn_status;
use crate::tensor::{dpattn_key, dpattn_tensor4, dpattn_tensor4_mut, with_dtype};

/// One noise draw: its stream id under the spec's key and `σ` per head (`heads` entries) or
/// per `(batch, head)` (`batch * heads` entries, row-major). Each `σ` is finite and `>= 0`;
/// `σ = 0` adds nothing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_noise_stream {
    /// Stream id of the draw (`docs/RANDOMNESS.md`): one `(key, stream)` pair must serve
    /// one draw only.
    pub stream: u64,
    /// Standard deviations.
    pub sigma: *const f64,
    /// Entries at `sigma`: `heads` or `batch * heads`.
    pub sigma_len: usize,
}

/// Where the noise of a noisy attention call comes from.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_noise_spec {
    /// The 256-bit ChaCha20 key (secret: whoever has it can subtract the noise).
    pub key: dpattn_key,
    /// 1: add `output` noise to the attention outputs; 0: none. Other values are
    /// `DPATTN_STATUS_OUT_OF_RANGE`.
    pub output_enabled: u32,
    /// The output noise draw (read only when `output_enabled` is 1).
    pub output: dpattn_noise_stream,
    /// 1: add `logits` noise to the scaled logits before mask and score function; 0: none.
    pub logits_enabled: u32,
    /// The logit noise draw (read only when `logits_enabled` is 1); its stream id must
    /// differ from the output one.
    pub logits: dpattn_noise_stream,
}

/// Decodes one optional stream, recording its `σ` buffer.
///
/// # Safety
/// When enabled, a non-NULL `s.sigma` must be readable for `s.sigma_len` doubles for `'a`.
unsafe fn stream<'a>(
    enabled: u32,
    s: &dpattn_noise_stream,
    flag_name: &'static str,
    sigma_name: &'static str,
    bufs: &mut Buffers,
) -> Result<Option<NoiseStream<'a>>, FfiError> {
    if !flag(flag_name, enabled)? {
        return Ok(None);
    }
    // SAFETY: forwarded caller contract.
    let sigma = unsafe { slice(s.sigma, s.sigma_len, sigma_name) }?;
    bufs.input(sigma_name, s.sigma, s.sigma_len);
    Ok(Some(NoiseStream { stream: s.stream, sigma }))
}

/// The key and the two optional draws of a spec.
type Decoded<'a> = (NoiseKey, Option<NoiseStream<'a>>, Option<NoiseStream<'a>>);

/// # Safety
/// `ptr` must be NULL or readable for one spec whose enabled `sigma` pointers are valid.
pub(crate) unsafe fn decode_spec<'a>(
    ptr: *const dpattn_noise_spec,
    bufs: &mut Buffers,
) -> Result<Decoded<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let n = unsafe { read(ptr, "noise") }?;
    // SAFETY: forwarded caller contract.
    let output = unsafe {
        stream(n.output_enabled, &n.output, "noise.output_enabled", "noise.output.sigma", bufs)
    }?;
    // SAFETY: forwarded caller contract.
    let logits = unsafe {
        stream(n.logits_enabled, &n.logits, "noise.logits_enabled", "noise.logits.sigma", bufs)
    }?;
    Ok((n.key.to_core(), output, logits))
}

/// Attention with keyed Gaussian noise, in `float`:
///
/// * output noise: element `(b, h, i, c)` of `out` receives element
///   `((b * heads + h) * s_q + i) * d_v + c` of the `f64` Gaussian draw
///   `(key, output.stream)` (`Gaussian(σ_{b,h})` of `docs/RANDOMNESS.md` §3), rounded once
///   to `float` and added after normalisation; every output element gets its noise,
///   including rows that see no key;
/// * logit noise: logit `(b, h, i, j)` (already multiplied by the scale) receives element
///   `((b * heads + h) * s_q + i) * s_k + j` of the draw `(key, logits.stream)`, before the
///   mask and the score function; masked logits stay masked.
///
/// The indices are logical (never memory offsets or thread ids), so any implementation
/// with the key reproduces the noise exactly; the same key, streams and inputs give the
/// same bits. With both draws disabled (or all `σ = 0`) the result equals
/// `dpattn_attention` bit for bit. **No privacy claim on its own**: `σ` is the caller's
/// choice and this function bounds no sensitivity (the calibrated mechanism is
/// `dpattn_output_perturbation_attention`). Neighbour relation: none (a building block).
///
/// Shapes, dtypes, options and scratch as `dpattn_attention`; nothing is allocated.
///
/// ```c
/// double sigma_out[H] = {0.1, ...};   // one σ per head
/// dpattn_noise_spec noise = {0};
/// memcpy(noise.key.bytes, secret_key, 32);
/// noise.output_enabled = 1;
/// noise.output = (dpattn_noise_stream){.stream = release_id, .sigma = sigma_out, .sigma_len = H};
/// dpattn_status st = dpattn_noisy_attention(&out, &q, &k, &v, NULL, &noise, scratch, n);
/// ```
///
/// Status codes: those of `dpattn_attention`, and `DPATTN_STATUS_NULL_ARGUMENT` (NULL
/// `noise`, or an enabled `sigma` NULL with a nonzero length), `DPATTN_STATUS_OUT_OF_RANGE`
/// (an `_enabled` flag not 0/1, a negative or non-finite `σ`, equal output and logit stream
/// ids, or noise so large the computation could overflow), `DPATTN_STATUS_SHAPE_MISMATCH`
/// (a `σ` array with neither `heads` nor `batch * heads` entries). On failure `out` is
/// untouched. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_attention`; `noise` must be NULL or readable for one `dpattn_noise_spec`
/// whose enabled `sigma` pointers are readable for `sigma_len` doubles.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_noisy_attention(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    noise: *const dpattn_noise_spec,
    scratch: *mut f32,
    scratch_len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { run_f32(out, q, k, v, options, noise, None, scratch, scratch_len) })
}

/// `dpattn_noisy_attention` for the flattened heads `first_head .. first_head + n` only,
/// written to `out` of shape `[1, n, s_q, d_v]` (as `dpattn_attention_heads`). The noise is
/// addressed by the global `(b, h)`, so the result equals the corresponding heads of one
/// full call bit for bit. Status codes as `dpattn_noisy_attention` and
/// `dpattn_attention_heads`. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_noisy_attention`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_noisy_attention_heads(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    noise: *const dpattn_noise_spec,
    first_head: usize,
    scratch: *mut f32,
    scratch_len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe {
        run_f32(out, q, k, v, options, noise, Some(first_head), scratch, scratch_len)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn run_f32(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    noise: *const dpattn_noise_spec,
    first: Option<usize>,
    scratch: *mut f32,
    scratch_len: usize,
) -> Result<(), FfiError> {
    // SAFETY: forwarded caller contract (all four functions below).
    let t = unsafe { read_tensors(out, q, k, v) }?;
    let mut bufs = Buffers::default();
    // SAFETY: as above.
    let params = unsafe { decode_options(options, &mut bufs) }?;
    // SAFETY: as above.
    let (key, output, logits) = unsafe { decode_spec(noise, &mut bufs) }?;
    let spec = NoiseSpec { key: &key, output, logits };
    with_dtype!(t.q.dtype, "q.dtype", |T| with_dtype!(t.out.dtype, "out.dtype", |O| {
        // SAFETY: as above.
        let w = unsafe { t.views::<T, O, f32>(scratch, scratch_len, &mut bufs) }?;
        match first {
            None => core_noisy::noisy_attention(w.out, w.q, w.k, w.v, &params, &spec, w.scratch)?,
            Some(f) => core_noisy::noisy_attention_heads(
                w.out, w.q, w.k, w.v, &params, &spec, f, w.scratch,
            )?,
        }
        Ok(())
    }))
}

/// `dpattn_noisy_attention` computed in `double` (portable kernel, `double` scratch of
/// `dpattn_attention_scratch_len(d, d_v)` elements) with the same noise elements, unrounded:
/// the oracle for the `float` and GPU kernels. `out` must have dtype `DPATTN_DTYPE_F64`.
/// Status codes as `dpattn_noisy_attention`. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_noisy_attention`, with `scratch` writable for `scratch_len` doubles.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_noisy_attention_f64(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    noise: *const dpattn_noise_spec,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract (all four calls).
        let t = unsafe { read_tensors(out, q, k, v) }?;
        let mut bufs = Buffers::default();
        // SAFETY: as above.
        let params = unsafe { decode_options(options, &mut bufs) }?;
        // SAFETY: as above.
        let (key, output, logits) = unsafe { decode_spec(noise, &mut bufs) }?;
        let spec = NoiseSpec { key: &key, output, logits };
        with_dtype!(t.q.dtype, "q.dtype", |T| {
            // SAFETY: as above.
            let w = unsafe { t.views::<T, f64, f64>(scratch, scratch_len, &mut bufs) }?;
            core_noisy::noisy_attention_f64(w.out, w.q, w.k, w.v, &params, &spec, w.scratch)?;
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::tests::{data, t, tm};
    use crate::last_error::last_error_string;
    use crate::tensor::{DPATTN_DTYPE_F32, DPATTN_DTYPE_F64};
    use dpattn_core::attention::{AttentionParams, attention_scratch_len};
    use dpattn_core::{BatchedMut, BatchedRef};

    const SQ: [usize; 4] = [2, 3, 5, 4];
    const SK: [usize; 4] = [2, 3, 7, 4];

    fn spec(so: &[f64], sl: &[f64], key: u8) -> dpattn_noise_spec {
        dpattn_noise_spec {
            key: dpattn_key { bytes: [key; 32] },
            output_enabled: u32::from(!so.is_empty()),
            output: dpattn_noise_stream { stream: 3, sigma: so.as_ptr(), sigma_len: so.len() },
            logits_enabled: u32::from(!sl.is_empty()),
            logits: dpattn_noise_stream { stream: 4, sigma: sl.as_ptr(), sigma_len: sl.len() },
        }
    }

    fn ffi(n: &dpattn_noise_spec, first: Option<usize>, heads: usize) -> (dpattn_status, Vec<f32>) {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let mut out = vec![7f32; heads * 20];
        let mut s = vec![0f32; attention_scratch_len(4, 4).unwrap()];
        let oshape = if first.is_some() { [1, heads, 5, 4] } else { SQ };
        let args = (
            tm(&mut out, oshape, DPATTN_DTYPE_F32),
            t(&q, SQ, DPATTN_DTYPE_F32),
            t(&k, SK, DPATTN_DTYPE_F32),
            t(&v, SK, DPATTN_DTYPE_F32),
        );
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            match first {
                None => dpattn_noisy_attention(
                    &args.0,
                    &args.1,
                    &args.2,
                    &args.3,
                    std::ptr::null(),
                    n,
                    s.as_mut_ptr(),
                    s.len(),
                ),
                Some(f) => dpattn_noisy_attention_heads(
                    &args.0,
                    &args.1,
                    &args.2,
                    &args.3,
                    std::ptr::null(),
                    n,
                    f,
                    s.as_mut_ptr(),
                    s.len(),
                ),
            }
        };
        (st, out)
    }

    #[test]
    fn equals_the_core_bit_for_bit_and_slices_agree() {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let (so, sl) = ([0.1, 0.2, 0.3], [0.5; 6]);
        let key = NoiseKey::for_replay([9; 32]);
        let cs = NoiseSpec {
            key: &key,
            output: Some(NoiseStream { stream: 3, sigma: &so }),
            logits: Some(NoiseStream { stream: 4, sigma: &sl }),
        };
        let mut want = vec![0f32; 120];
        core_noisy::noisy_attention(
            BatchedMut::contiguous(&mut want, SQ).unwrap(),
            BatchedRef::contiguous(&q, SQ).unwrap(),
            BatchedRef::contiguous(&k, SK).unwrap(),
            BatchedRef::contiguous(&v, SK).unwrap(),
            &AttentionParams::default(),
            &cs,
            &mut vec![0f32; attention_scratch_len(4, 4).unwrap()],
        )
        .unwrap();
        let (st, got) = ffi(&spec(&so, &sl, 9), None, 6);
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let bits = |x: &[f32]| x.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        let (st, part) = ffi(&spec(&so, &sl, 9), Some(1), 4);
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(bits(&part), bits(&want[20..100]));
        let (_, other) = ffi(&spec(&so, &sl, 8), None, 6);
        assert_ne!(bits(&other), bits(&want));

        // f64 oracle.
        let mut want64 = vec![0f64; 120];
        let mut s64 = vec![0f64; attention_scratch_len(4, 4).unwrap()];
        core_noisy::noisy_attention_f64(
            BatchedMut::contiguous(&mut want64, SQ).unwrap(),
            BatchedRef::contiguous(&q, SQ).unwrap(),
            BatchedRef::contiguous(&k, SK).unwrap(),
            BatchedRef::contiguous(&v, SK).unwrap(),
            &AttentionParams::default(),
            &cs,
            &mut s64,
        )
        .unwrap();
        let mut got64 = vec![0f64; 120];
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_noisy_attention_f64(
                &tm(&mut got64, SQ, DPATTN_DTYPE_F64),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                std::ptr::null(),
                &spec(&so, &sl, 9),
                s64.as_mut_ptr(),
                s64.len(),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(got64, want64);
    }

    #[test]
    fn errors_have_their_status_and_leave_out_alone() {
        let check = |n: dpattn_noise_spec, st: dpattn_status, needle: &str| {
            let (r, out) = ffi(&n, None, 6);
            assert_eq!(r, st, "{}", last_error_string());
            assert!(last_error_string().contains(needle), "{}", last_error_string());
            assert!(out.iter().all(|&x| x == 7.0));
        };
        let good = [0.1; 3];
        let mut n = spec(&good, &[], 1);
        n.output_enabled = 2;
        check(n, dpattn_status::OutOfRange, "noise.output_enabled");
        let mut n = spec(&good, &good, 1);
        n.logits.stream = 3;
        check(n, dpattn_status::OutOfRange, "stream");
        check(spec(&[0.1, -1.0, 0.0], &[], 1), dpattn_status::OutOfRange, "sigma");
        check(spec(&[0.1, f64::NAN, 0.0], &[], 1), dpattn_status::OutOfRange, "sigma");
        check(spec(&[0.1; 4], &[], 1), dpattn_status::ShapeMismatch, "sigma");
        let mut n = spec(&good, &[], 1);
        n.output.sigma = std::ptr::null();
        check(n, dpattn_status::NullArgument, "noise.output.sigma");
        check(spec(&[1e38; 3], &[], 1), dpattn_status::OutOfRange, "noise");
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let mut s = vec![0f32; attention_scratch_len(4, 4).unwrap()];
        let mut out = vec![7f32; 120];
        // SAFETY: NULL noise is reported before use.
        let r = unsafe {
            dpattn_noisy_attention(
                &tm(&mut out, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                std::ptr::null(),
                std::ptr::null(),
                s.as_mut_ptr(),
                s.len(),
            )
        };
        assert_eq!(r, dpattn_status::NullArgument);
        assert!(last_error_string().contains("noise"));
        // Output overlapping a sigma array.
        let mut out_sig = vec![0f32; 120];
        let sig_in_out = out_sig.as_ptr().cast::<f64>();
        let mut n = spec(&good, &[], 1);
        n.output.sigma = sig_in_out;
        // SAFETY: `sigma` aliases `out` on purpose: rejected before reading or writing.
        let r = unsafe {
            dpattn_noisy_attention(
                &tm(&mut out_sig, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                std::ptr::null(),
                &n,
                s.as_mut_ptr(),
                s.len(),
            )
        };
        assert_eq!(r, dpattn_status::Aliasing);
        assert!(last_error_string().contains("noise.output.sigma"));
    }
}
