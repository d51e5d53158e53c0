//! Output-perturbation DP cross-attention `[EXT]` from C (`dpattn_core::output_perturbation`):
//! clamp the private keys and values to public norms, compute exact attention, add
//! calibrated noise (docs/PRIVACY.md §2). C prefix `dpattn_output_perturbation_`.

use dpattn_core::output_perturbation::{self as op, OutputPerturbationParams};
use dpattn_core::{NoiseMode, PrivacyBudget};

use crate::args::{Buffers, Out, read, slice_mut};
use crate::attention::{
    DPATTN_KERNEL_AUTO, DPATTN_SCALE_INV_SQRT_DIM, DPATTN_SCORE_EXP, kernel_of, key_padding,
    read_tensors, scale_of, score_fn,
};
use crate::boundary::{FfiError, ffi_status};
use crate::session::{dpattn_session, with_session};
use crate::status::dpattn_status;
use crate::tensor::{dpattn_tensor4, dpattn_tensor4_mut, with_dtype};

/// Public parameters of an output-perturbation DP cross-attention release. All public: they
/// must be chosen from public knowledge, never from the private context.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_output_perturbation_params {
    /// `R_k`: private key rows are clamped to this L2 norm (per head); in `[2^-60, 2^60]`.
    /// The default is NaN: the caller must set it.
    pub key_norm: f64,
    /// `R_v`: private value rows are clamped to this L2 norm; in `[2^-60, 2^60]`. Default NaN.
    pub value_norm: f64,
    /// `ε` of one release, finite and `> 0`. Default NaN: the caller must set it.
    pub epsilon: f64,
    /// `δ` of one release, in `(0, 1)` (Gaussian mechanism). Default NaN.
    pub delta: f64,
    /// `DPATTN_SCORE_EXP` (default) or `DPATTN_SCORE_COSH`.
    pub score: u32,
    /// `DPATTN_SCALE_INV_SQRT_DIM` (default), `_INV_DIM` or `_CUSTOM`.
    pub scale_kind: u32,
    /// The scale for `DPATTN_SCALE_CUSTOM` (finite, `> 0`); default 1.0, else unused.
    pub scale: f64,
    /// `DPATTN_KERNEL_AUTO` (default), `_PORTABLE` or `_AVX2_FMA`.
    pub kernel: u32,
    /// Public key-padding mask `[batch, s_k]`, bytes 0 (padding) / 1 (key exists); NULL
    /// (default) = every key exists.
    pub key_padding: *const u8,
    /// Bytes at `key_padding` (`batch * s_k` when not NULL).
    pub key_padding_len: usize,
    /// `DPATTN_NOISE_MODE_EXACT` (default: exact integer noise on the public grid) or
    /// `DPATTN_NOISE_MODE_CONSTANT_TIME` (for enclaves: the same grid, noise drawn in
    /// constant time within total variation 2^-100 of the exact noise, which the release
    /// reserves from `δ`; approximate-DP ledgers only: a zCDP or RDP ledger refuses its
    /// `(ε, δ)` charge with `DPATTN_STATUS_OUT_OF_RANGE`). `DPATTN_NOISE_MODE_UNSAFE_FLOAT` is not offered through
    /// the C ABI (`DPATTN_STATUS_UNSUPPORTED`).
    pub noise_mode: u32,
}

impl Default for dpattn_output_perturbation_params {
    fn default() -> Self {
        Self {
            key_norm: f64::NAN,
            value_norm: f64::NAN,
            epsilon: f64::NAN,
            delta: f64::NAN,
            score: DPATTN_SCORE_EXP,
            scale_kind: DPATTN_SCALE_INV_SQRT_DIM,
            scale: 1.0,
            kernel: DPATTN_KERNEL_AUTO,
            key_padding: core::ptr::null(),
            key_padding_len: 0,
            noise_mode: crate::noise_mode::DPATTN_NOISE_MODE_EXACT,
        }
    }
}

/// # Safety
/// `ptr` must be NULL or readable for one struct whose `key_padding` is readable for
/// `key_padding_len` bytes for `'a`.
unsafe fn decode_op<'a>(
    ptr: *const dpattn_output_perturbation_params,
    bufs: &mut Buffers,
) -> Result<OutputPerturbationParams<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { read(ptr, "params") }?;
    let score = score_fn(p.score, "params.score")?;
    let scale = scale_of(p.scale_kind, p.scale, "params.scale_kind")?;
    let kernel = kernel_of(p.kernel, "params.kernel")?;
    // SAFETY: forwarded caller contract.
    let key_padding = unsafe { key_padding(p.key_padding, p.key_padding_len, bufs) }?;
    let budget = PrivacyBudget::new(p.epsilon, p.delta)?;
    let noise_mode = match crate::noise_mode::decode(p.noise_mode, "params.noise_mode")? {
        NoiseMode::UnsafeFloat => {
            return Err(dpattn_core::Error::Unsupported {
                what: "DPATTN_NOISE_MODE_UNSAFE_FLOAT through the C ABI (it offers only the \
                       floating-point-safe releases)",
            }
            .into());
        }
        mode => mode,
    };
    Ok(OutputPerturbationParams {
        key_norm: p.key_norm,
        value_norm: p.value_norm,
        budget,
        scale,
        score,
        key_padding,
        kernel,
        noise_mode,
    })
}

/// Writes the scratch length (`float` elements) of `dpattn_output_perturbation_attention`
/// for key dimension `d` and value dimension `d_v`: room for its `double` kernel,
/// `2 * dpattn_attention_scratch_len(d, d_v) + 1`. `DPATTN_STATUS_NULL_ARGUMENT` for a NULL
/// `out_len`, `DPATTN_STATUS_SIZE_OVERFLOW` when it does not fit. Thread-safe.
///
/// # Safety
/// `out_len` must be NULL or valid for one write of `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_output_perturbation_scratch_len(
    d: usize,
    d_v: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = op::output_perturbation_scratch_len(d, d_v)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Fills `*out` with the defaults: softmax, scale `1/√d`, the fastest kernel, no key
/// padding, and **NaN** for `key_norm`, `value_norm`, `epsilon`, `delta`, which the caller
/// must choose (a call with any of them unset fails with `DPATTN_STATUS_OUT_OF_RANGE`).
/// Returns `DPATTN_STATUS_NULL_ARGUMENT` for a NULL `out`. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable for one struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_output_perturbation_params_default(
    out: *mut dpattn_output_perturbation_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { crate::args::write_default(out) }
}

/// `Δ` of one query row: the largest L2 change of its attention output when one of its
/// `visible_keys` key/value rows is replaced, given `|logit| <= logit_bound` (`a`) and value
/// norms `<= value_norm` (`R_v`): `2 R_v / (1 + (n − 1) e^{−2a})` for softmax,
/// `2 R_v cosh a / (cosh a + n − 1)` for `cosh` (docs/PRIVACY.md §2.2; the bound is attained).
/// Rounded up; 0 when `visible_keys == 0`. Writes `*out_sensitivity` only on success.
/// Status: `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_OUT_OF_RANGE` for a negative or
/// non-finite `logit_bound`, a `value_norm` not in `(0, ∞)`, or an unknown `score`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_sensitivity` must be NULL or writable for one `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_output_perturbation_row_sensitivity(
    visible_keys: usize,
    logit_bound: f64,
    value_norm: f64,
    score: u32,
    out_sensitivity: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sensitivity, "out_sensitivity")?;
        let score = score_fn(score, "score")?;
        let d = op::row_sensitivity(visible_keys, logit_bound, value_norm, score)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(d) };
        Ok(())
    })
}

/// The Frobenius sensitivity for planning before the queries are known: `rows` query rows
/// (all heads of one batch element), every query of norm `<= query_norm`, `visible_keys`
/// keys, numeric logit `scale`:
/// `√rows · row_sensitivity(visible_keys, scale · query_norm · key_norm, value_norm)`, rounded
/// up. Status: `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_OUT_OF_RANGE` for norms or a
/// scale not in `(0, ∞)` or an unknown `score`. Thread-safe; no shared state.
///
/// # Safety
/// `out_sensitivity` must be NULL or writable for one `double`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_output_perturbation_worst_case_sensitivity(
    rows: usize,
    visible_keys: usize,
    query_norm: f64,
    key_norm: f64,
    value_norm: f64,
    scale: f64,
    score: u32,
    out_sensitivity: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sensitivity, "out_sensitivity")?;
        let score = score_fn(score, "score")?;
        let d = op::worst_case_sensitivity(
            rows,
            visible_keys,
            query_norm,
            key_norm,
            value_norm,
            scale,
            score,
        )?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(d) };
        Ok(())
    })
}

/// `Δ_b = √(Σ_{h,i} Δ(q_{b,h,i})²)` for every batch element `b` of the actual public queries
/// `q` (`[batch, heads, s_q, d]`, any dtype) against `s_k` keys (fewer where `key_padding`
/// hides some), into `sensitivity[0 .. batch]` (`sensitivity_len >= batch`). The buffer is
/// written only on success. Uses `key_norm`, `value_norm`, `score`, `scale`, `key_padding`
/// of `params` (`epsilon`/`delta` must still be a valid budget). Status:
/// `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_OUT_OF_RANGE` (bounds outside
/// `[2^-60, 2^60]`, a zero size, a bad scale or budget, unknown enum values, key-padding byte
/// not 0/1); `DPATTN_STATUS_NON_FINITE` (NaN/∞ in `q`); `DPATTN_STATUS_SHAPE_MISMATCH`
/// (`sensitivity_len < batch`, key padding of the wrong length); `DPATTN_STATUS_ALIASING`;
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`; `DPATTN_STATUS_MISALIGNED`. Thread-safe; no shared state.
///
/// # Safety
/// `sensitivity` must be NULL or writable for `sensitivity_len` doubles; `q` and `params`
/// NULL or readable for one struct, with the buffers they point to valid as documented.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_output_perturbation_sensitivity(
    sensitivity: *mut f64,
    sensitivity_len: usize,
    q: *const dpattn_tensor4,
    s_k: usize,
    params: *const dpattn_output_perturbation_params,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract (all unsafe calls of this body).
        let qt = unsafe { read(q, "q") }?;
        let mut bufs = Buffers::default();
        // SAFETY: as above.
        let p = unsafe { decode_op(params, &mut bufs) }?;
        with_dtype!(qt.dtype, "q.dtype", |T| {
            qt.record::<T>("q", &mut bufs);
            bufs.output("sensitivity", sensitivity, sensitivity_len);
            bufs.disjoint()?;
            // SAFETY: as above; `sensitivity` overlaps nothing.
            let (qv, out) = unsafe {
                (qt.view::<T>("q")?, slice_mut(sensitivity, sensitivity_len, "sensitivity")?)
            };
            op::output_perturbation_sensitivity(qv, &p, s_k, out)?;
            Ok(())
        })
    })
}

/// Releases `out = attention(Q, clamp(K), clamp(V)) + N(0, σ_b²)` for every batch element
/// `b` — **`(ε, δ)`-differentially private** for one position of the private context:
///
/// * **Public:** `Q`, `s_k`, the key-padding mask, scale, score function, `R_k`, `R_v`.
///   **Private:** `K`, `V`. Key rows longer than `R_k` are scaled to norm `R_k`, value rows to
///   `R_v` (per head); a row holding NaN/∞ becomes the zero row. Clamping, not rejection:
///   nothing about `K` or `V` can make the call fail (validation looks only at public
///   things: shapes, layouts, queries, bounds, budget). `K`, `V` must not use broadcast or
///   overlapping strides (refused).
/// * **Neighbours:** contexts differing in the key and value rows of one position of one
///   batch element (all heads; replace-one, `s_k` and the mask fixed).
/// * **Guarantee:** each query row moves by at most `Δ_i = 2 R_v T_i`
///   (`dpattn_output_perturbation_row_sensitivity`), batch element `b`'s whole output by
///   `Δ_b = √(Σ Δ_i²)`. The release is DP in the floats it returns (docs/PRIVACY.md §2.5):
///   the attention is computed in `double`, each output is rounded to a public power-of-two
///   grid `Λ_b` and noised with exact discrete Gaussian noise calibrated by the analytic
///   Gaussian mechanism (Balle & Wang 2018) at `Δ_b` plus the rounding and a bound on the
///   computation error, so `out` holds exact multiples of `Λ_b` (`float`/`double` outputs;
///   16-bit outputs are their rounding). Timing is not constant.
/// * **Noise:** the release takes one fresh stream id of `session` (its position before the
///   call, `dpattn_session_position`); element `(b, h, i, c)` draws from the exact-sampler
///   window of element `((b * heads + h) * s_q + i) * d_v + c` of that stream. The id is
///   used up even when the call fails, so no two releases share noise.
/// * **Accounting:** each call is one `(ε, δ)` release for the privacy unit one token
///   (`DPATTN_UNIT_TOKENS`, 1; repeated queries of one context compose). The session's
///   ledger is charged once, after every check and σ computation and before `out` is
///   written: an approximate-DP ledger `(ε, δ)` of `params`; a zCDP or RDP ledger the exact
///   zCDP cost of the discrete Gaussian release, `ρ = max_b (Δ'_b/Λ_b)²/(2s_b²)` (rounded
///   up; nothing when no batch element sees any key, the output then being constant). A
///   refused charge returns the ledger's status (`DPATTN_STATUS_INFEASIBLE` over budget,
///   `DPATTN_STATUS_UNIT_MISMATCH` for a ledger of another unit) with `out` and the ledger
///   unchanged. The session and its ledger are locked for the whole call (concurrent calls
///   wait). To replay a release for an audit, run it on a session from
///   `dpattn_session_new_for_replay` (the master key, the logged epoch and stream id, a NULL
///   ledger): the output is reproduced bit for bit and nothing is charged.
///
/// `sigma` (`sigma_len >= batch * heads`) receives the noise scale of each `(b, h)` (the
/// discrete Gaussian's `s_b · Λ_b`): keep it with the session's position for audit. Shapes and
/// dtypes as `dpattn_attention`; `scratch` holds at least
/// `dpattn_output_perturbation_scratch_len(d, d_v)` floats; nothing is allocated.
///
/// ```c
/// dpattn_output_perturbation_params p;
/// dpattn_output_perturbation_params_default(&p);
/// p.key_norm = 1.0; p.value_norm = 1.0; p.epsilon = 1.0; p.delta = 1e-6;
/// dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
/// dpattn_ledger *ledger = NULL;
/// dpattn_session *session = NULL;
/// dpattn_ledger_new_approx(token, 4.0, 1e-5, &ledger);
/// dpattn_session_new(ledger, &session); // a master key from the operating system
/// double sigma[B * H];
/// dpattn_status st = dpattn_output_perturbation_attention(&out, &q, &k, &v, &p, session,
///     sigma, B * H, scratch, scratch_len);
/// dpattn_session_free(session);
/// dpattn_ledger_free(ledger);
/// ```
///
/// Status codes: those of `dpattn_attention` (for `q`, shapes, scratch, aliasing) and of
/// `dpattn_output_perturbation_sensitivity`; `DPATTN_STATUS_OUT_OF_RANGE` for `δ = 0`, `ε <= 0`,
/// `δ >= 1`, or non-overlap-free `K`/`V` layouts; `DPATTN_STATUS_SHAPE_MISMATCH` for
/// `sigma_len < batch * heads`; `DPATTN_STATUS_NULL_ARGUMENT` for a NULL `session` or `sigma`;
/// `DPATTN_STATUS_INFEASIBLE` for a charge over budget; `DPATTN_STATUS_UNIT_MISMATCH` for a ledger
/// of another unit; `DPATTN_STATUS_SIZE_OVERFLOW` when the session's stream ids are used up;
/// `DPATTN_STATUS_INVALID_HANDLE` for a freed `session`. On failure `out` is untouched; `sigma` may
/// then hold computed values (its contents are unspecified). Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_attention`; `sigma` NULL or writable for `sigma_len` doubles; `session` NULL
/// or a value returned by `dpattn_session_new*`/`_restore` (a freed one is detected).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_output_perturbation_attention(
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    params: *const dpattn_output_perturbation_params,
    session: *mut dpattn_session,
    sigma: *mut f64,
    sigma_len: usize,
    scratch: *mut f32,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract (all unsafe calls of this body).
        let t = unsafe { read_tensors(out, q, k, v) }?;
        let mut bufs = Buffers::default();
        // SAFETY: as above.
        let p = unsafe { decode_op(params, &mut bufs) }?;
        bufs.output("sigma", sigma, sigma_len);
        with_dtype!(t.q.dtype, "q.dtype", |T| with_dtype!(t.out.dtype, "out.dtype", |O| {
            // SAFETY: as above; `views` proves every output (sigma included) disjoint.
            let w = unsafe { t.views::<T, O, f32>(scratch, scratch_len, &mut bufs) }?;
            // SAFETY: as above; `sigma` was proven disjoint by `views`.
            let sigma = unsafe { slice_mut(sigma, sigma_len, "sigma") }?;
            with_session(session, op::STREAMS, |draw, l| {
                op::output_perturbation_attention_keyed(
                    w.out, w.q, w.k, w.v, &p, draw, l, sigma, w.scratch,
                )?;
                Ok(())
            })
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::tests::{data, t, tm};
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use crate::ledger::dpattn_ledger;
    use crate::session::session_testing as st;
    use crate::tensor::DPATTN_DTYPE_F32;
    use crate::tensor::dpattn_key;
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::Draw;
    use dpattn_core::{BatchedMut, BatchedRef, Kernel, Scale, ScoreFn};

    const SQ: [usize; 4] = [2, 3, 5, 4];
    const SK: [usize; 4] = [2, 3, 7, 4];

    fn params(pad: &[u8]) -> dpattn_output_perturbation_params {
        dpattn_output_perturbation_params {
            key_norm: 1.5,
            value_norm: 2.0,
            epsilon: 1.0,
            delta: 1e-6,
            key_padding: if pad.is_empty() { std::ptr::null() } else { pad.as_ptr() },
            key_padding_len: pad.len(),
            ..Default::default()
        }
    }

    /// The epoch of the replay sessions of these tests (master key `[4; 32]`, stream 5).
    const EPOCH: u64 = 0x5EED;

    /// The core's draw for what a replay session of master key `[4; 32]` at [`EPOCH`],
    /// next stream id 5, hands out.
    fn draw_key() -> NoiseKey {
        st::drawing_key(4, EPOCH)
    }

    /// A release through a fresh replay session (master key `[4; 32]`, [`EPOCH`], stream 5)
    /// charging `ledger` (NULL: none).
    fn ffi_release_with(
        p: &dpattn_output_perturbation_params,
        sigma_len: usize,
        ledger: *mut dpattn_ledger,
    ) -> (dpattn_status, Vec<f32>, Vec<f64>) {
        let s = st::replay(4, EPOCH, 5, ledger);
        let r = ffi_release(p, s, sigma_len);
        assert_eq!(st::position(s), (EPOCH, 5 + op::STREAMS), "one stream id per release");
        st::free(s);
        r
    }

    fn ffi_release(
        p: &dpattn_output_perturbation_params,
        session: *mut dpattn_session,
        sigma_len: usize,
    ) -> (dpattn_status, Vec<f32>, Vec<f64>) {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let mut out = vec![7f32; 120];
        let mut sigma = vec![-1f64; sigma_len];
        let mut s = vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()];
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_output_perturbation_attention(
                &tm(&mut out, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                p,
                session,
                sigma.as_mut_ptr(),
                sigma.len(),
                s.as_mut_ptr(),
                s.len(),
            )
        };
        (st, out, sigma)
    }

    #[test]
    fn release_and_sensitivities_equal_the_core() {
        let pad: Vec<u8> = (0..14).map(|i| u8::from(i % 4 != 0)).collect();
        let padb: Vec<bool> = pad.iter().map(|&b| b == 1).collect();
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let cp = OutputPerturbationParams {
            key_norm: 1.5,
            value_norm: 2.0,
            budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
            scale: Scale::InvSqrtDim,
            score: ScoreFn::Exp,
            key_padding: Some(&padb),
            kernel: Kernel::Auto,
            noise_mode: NoiseMode::Exact,
        };
        let (mut want, mut wsig) = (vec![0f32; 120], vec![0f64; 6]);
        op::output_perturbation_attention_keyed(
            BatchedMut::contiguous(&mut want, SQ).unwrap(),
            BatchedRef::contiguous(&q, SQ).unwrap(),
            BatchedRef::contiguous(&k, SK).unwrap(),
            BatchedRef::contiguous(&v, SK).unwrap(),
            &cp,
            Draw { key: &draw_key(), stream: 5 },
            None,
            &mut wsig,
            &mut vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()],
        )
        .unwrap();
        let (st, got, sig) = ffi_release_with(&params(&pad), 6, std::ptr::null_mut());
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let bits = |x: &[f32]| x.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        assert_eq!(sig, wsig);

        let mut ws = [0f64; 2];
        op::output_perturbation_sensitivity(
            BatchedRef::contiguous(&q, SQ).unwrap(),
            &cp,
            7,
            &mut ws,
        )
        .unwrap();
        let mut gs = [0f64; 3];
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_output_perturbation_sensitivity(
                gs.as_mut_ptr(),
                3,
                &t(&q, SQ, DPATTN_DTYPE_F32),
                7,
                &params(&pad),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(&gs[..2], &ws[..]);
        let mut d = 0.0;
        // SAFETY: live local.
        let st = unsafe { dpattn_output_perturbation_row_sensitivity(4, 0.5, 1.0, 1, &mut d) };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(d, op::row_sensitivity(4, 0.5, 1.0, ScoreFn::Cosh).unwrap());
        // SAFETY: live local.
        let st = unsafe {
            dpattn_output_perturbation_worst_case_sensitivity(8, 100, 2.0, 1.0, 1.0, 0.5, 0, &mut d)
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(
            d,
            op::worst_case_sensitivity(8, 100, 2.0, 1.0, 1.0, 0.5, ScoreFn::Exp).unwrap()
        );
    }

    #[test]
    fn release_with_a_ledger_charges_exactly_what_the_core_charges() {
        let (q, k, v) = (data(120, 1), data(168, 2), data(168, 3));
        let cp = OutputPerturbationParams {
            key_norm: 1.5,
            value_norm: 2.0,
            budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
            scale: Scale::InvSqrtDim,
            score: ScoreFn::Exp,
            key_padding: None,
            kernel: Kernel::Auto,
            noise_mode: NoiseMode::Exact,
        };
        for kind in [Kind::Approx(2.0, 1e-5), Kind::Zcdp(50.0), Kind::Rdp(50.0, 1e-5)] {
            let (h, mut cl) = lt::pair(PrivacyUnit::TOKEN, kind);
            let (st, got, sig) = ffi_release_with(&params(&[]), 6, h);
            assert_eq!(st, dpattn_status::Ok, "{kind:?}: {}", last_error_string());
            let (mut want, mut wsig) = (vec![7f32; 120], vec![-1f64; 6]);
            op::output_perturbation_attention_keyed(
                BatchedMut::contiguous(&mut want, SQ).unwrap(),
                BatchedRef::contiguous(&q, SQ).unwrap(),
                BatchedRef::contiguous(&k, SK).unwrap(),
                BatchedRef::contiguous(&v, SK).unwrap(),
                &cp,
                Draw { key: &draw_key(), stream: 5 },
                Some(&mut cl),
                &mut wsig,
                &mut vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()],
            )
            .unwrap();
            assert!(lt::nonzero(cl.spent()));
            let bits = |x: &[f32]| x.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want));
            assert_eq!(sig, wsig);
            lt::assert_same(h, &cl);
            lt::free(h);
        }
        // Refused (over budget in every kind): nothing written, ledger unchanged.
        for kind in [Kind::Approx(0.5, 1e-5), Kind::Zcdp(1e-6), Kind::Rdp(0.01, 1e-5)] {
            let (h, _) = lt::pair(PrivacyUnit::TOKEN, kind);
            let (st, got, _) = ffi_release_with(&params(&[]), 6, h);
            assert_eq!(st, dpattn_status::Infeasible, "{kind:?}");
            assert!(got.iter().all(|&x| x == 7.0));
            lt::assert_untouched(h);
            lt::free(h);
        }
        // A ledger kept for another unit: refused, nothing written or charged.
        for unit in [PrivacyUnit::Prompt, PrivacyUnit::tokens(2).unwrap()] {
            let (h, _) = lt::pair(unit, Kind::Approx(100.0, 1e-2));
            let (st, got, _) = ffi_release_with(&params(&[]), 6, h);
            assert_eq!(st, dpattn_status::UnitMismatch, "{unit:?}");
            assert!(got.iter().all(|&x| x == 7.0));
            lt::assert_untouched(h);
            lt::free(h);
        }
        // A freed ledger cannot make a session; a freed session cannot release.
        let key = dpattn_key { bytes: [4; 32] };
        let mut s = std::ptr::null_mut();
        // SAFETY: live locals; a freed handle is detected.
        let st = unsafe {
            crate::session::dpattn_session_new_for_replay(&key, EPOCH, 5, lt::freed(), &mut s)
        };
        assert_eq!(st, dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("ledger"));
        assert!(s.is_null());
        let s = st::replay(4, EPOCH, 5, std::ptr::null_mut());
        st::free(s);
        let (st, got, _) = ffi_release(&params(&[]), s, 6);
        assert_eq!(st, dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("session"));
        assert!(got.iter().all(|&x| x == 7.0));
    }
    #[test]
    fn release_errors() {
        let session = st::replay(4, EPOCH, 5, std::ptr::null_mut());
        let check = |p: dpattn_output_perturbation_params,
                     session: *mut dpattn_session,
                     sl: usize,
                     st: dpattn_status,
                     needle: &str| {
            let (r, out, _) = ffi_release(&p, session, sl);
            assert_eq!(r, st, "{}", last_error_string());
            assert!(last_error_string().contains(needle), "{}", last_error_string());
            assert!(out.iter().all(|&x| x == 7.0));
        };
        let base = params(&[]);
        check(base, session, 5, dpattn_status::ShapeMismatch, "sigma");
        check(base, std::ptr::null_mut(), 6, dpattn_status::NullArgument, "session");
        check(
            dpattn_output_perturbation_params { delta: 0.0, ..base },
            session,
            6,
            dpattn_status::OutOfRange,
            "delta",
        );
        check(
            dpattn_output_perturbation_params { delta: 1.0, ..base },
            session,
            6,
            dpattn_status::OutOfRange,
            "delta",
        );
        check(
            dpattn_output_perturbation_params { epsilon: 0.0, ..base },
            session,
            6,
            dpattn_status::OutOfRange,
            "epsilon",
        );
        check(
            dpattn_output_perturbation_params::default(),
            session,
            6,
            dpattn_status::OutOfRange,
            "epsilon",
        );
        check(
            dpattn_output_perturbation_params { key_norm: f64::NAN, ..base },
            session,
            6,
            dpattn_status::OutOfRange,
            "key_norm",
        );
        check(
            dpattn_output_perturbation_params { score: 7, ..base },
            session,
            6,
            dpattn_status::OutOfRange,
            "params.score",
        );
        let pad = [3u8; 14];
        check(params(&pad), session, 6, dpattn_status::OutOfRange, "key_padding");
        // Private K with NaN is clamped, not refused.
        let (q, mut k, v) = (data(120, 1), data(168, 2), data(168, 3));
        k[3] = f32::NAN;
        let mut out = vec![7f32; 120];
        let mut sig = [0f64; 6];
        let mut s = vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()];
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_output_perturbation_attention(
                &tm(&mut out, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                &base,
                session,
                sig.as_mut_ptr(),
                sig.len(),
                s.as_mut_ptr(),
                s.len(),
            )
        };
        assert_eq!(st, dpattn_status::Ok);
        assert!(out.iter().all(|x| x.is_finite()));
        // sigma overlapping out.
        let sp = out.as_mut_ptr().cast::<f64>();
        // SAFETY: `sigma` aliases `out` on purpose: rejected before any write.
        let st = unsafe {
            dpattn_output_perturbation_attention(
                &tm(&mut out, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                &base,
                session,
                sp,
                6,
                s.as_mut_ptr(),
                s.len(),
            )
        };
        assert_eq!(st, dpattn_status::Aliasing);
        st::free(session);
        // Sensitivity: short buffer, NaN q, NULL out.
        let mut q_nan = q.clone();
        q_nan[0] = f32::NAN;
        let mut gs = [9f64; 2];
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_output_perturbation_sensitivity(gs.as_mut_ptr(), 1, &t(&q, SQ, 0), 7, &base)
        };
        assert_eq!(st, dpattn_status::ShapeMismatch);
        assert!(last_error_string().contains("sensitivity"));
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_output_perturbation_sensitivity(gs.as_mut_ptr(), 2, &t(&q_nan, SQ, 0), 7, &base)
        };
        assert_eq!(st, dpattn_status::NonFinite);
        assert_eq!(gs, [9.0; 2]);
        let mut d = 3.0;
        // SAFETY: live local / NULL reported.
        unsafe {
            let st = dpattn_output_perturbation_row_sensitivity(4, -1.0, 1.0, 0, &mut d);
            assert_eq!((st, d), (dpattn_status::OutOfRange, 3.0));
            assert!(last_error_string().contains("logit_bound"));
            let st = dpattn_output_perturbation_row_sensitivity(4, 1.0, 1.0, 5, &mut d);
            assert_eq!((st, d), (dpattn_status::OutOfRange, 3.0));
            let st =
                dpattn_output_perturbation_row_sensitivity(4, 1.0, 1.0, 0, std::ptr::null_mut());
            assert_eq!(st, dpattn_status::NullArgument);
            let st = dpattn_output_perturbation_worst_case_sensitivity(
                1, 1, 0.0, 1.0, 1.0, 1.0, 0, &mut d,
            );
            assert_eq!((st, d), (dpattn_status::OutOfRange, 3.0));
            assert!(last_error_string().contains("query_norm"));
            let mut p = dpattn_output_perturbation_params { epsilon: 3.0, ..base };
            assert_eq!(dpattn_output_perturbation_params_default(&mut p), dpattn_status::Ok);
            assert!(p.epsilon.is_nan() && p.key_padding.is_null());
        }
    }
}
