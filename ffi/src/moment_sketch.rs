//! `[EXT]` The moment sketch (`docs/PAPERS.md` P1-X1; core module `dpattn_core::moment_sketch`)
//! from C: DP cross-attention by releasing `M = P(K)ᵀ[1_n, V] ∈ R^{r×(d+1)}` once with one
//! noise draw, then answering any number of public queries
//! `Õ_k = ⟨P(q), M̃_{:,k+1}⟩ / ⟨P(q), M̃_{:,0}⟩`. The release is the only private step
//! (`dpattn_moment_sketch_new`); everything else is post-processing. There is no update
//! operation: the core sketch is released once over the whole `(K, V)`.

use dpattn_core::moment_sketch::{self as ms, MomentSketch, MomentSketchParams, SketchNoise};
use dpattn_core::{MatRef, PrivacyBudget};

use crate::args::{Buffers, Out, flag, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, ffi_value};
use crate::handle::Handle;
use crate::session::{dpattn_session, with_session};
use crate::softmax_tree::{
    DPATTN_SOFTMAX_TREE_QUERY_REJECT, DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM, impl_handle,
    query_policy_of, temperature_of,
};
use crate::status::dpattn_status;

/// Gaussian noise, `(ε, δ)`-DP by the analytic Gaussian mechanism (`δ ∈ (0, 1)`).
pub const DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN: u32 = 0;
/// Laplace noise, pure `ε`-DP (`δ` must be 0).
pub const DPATTN_MOMENT_SKETCH_NOISE_LAPLACE: u32 = 1;

/// A released moment sketch `M̃` (row-major `r × (d+1)`).
pub struct dpattn_moment_sketch {
    _private: [u8; 0],
}
impl_handle!(dpattn_moment_sketch, MomentSketch);

/// Parameters of a moment sketch (all public).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_moment_sketch_params {
    /// `R > 0`: keys and queries in `[0, R]^d`.
    pub radius: f64,
    /// `R_w > 0`: values in `[−R_w, R_w]`.
    pub weight_bound: f64,
    /// `ε > 0`.
    pub epsilon: f64,
    /// `δ ∈ (0, 1)` for Gaussian noise, exactly 0 for Laplace.
    pub delta: f64,
    /// The kernel's relative accuracy `ε_s ∈ (0, 1)`; fixes the Taylor degree `s`.
    pub eps_s: f64,
    /// `DPATTN_SOFTMAX_TREE_TEMPERATURE_*` (`τ = 1/d` or custom).
    pub temperature: u32,
    /// `τ > 0` when `temperature` is `_CUSTOM` (e.g. `1/√d`).
    pub tau: f64,
    /// `DPATTN_MOMENT_SKETCH_NOISE_*`.
    pub noise: u32,
    /// `DPATTN_SOFTMAX_TREE_QUERY_*` for public queries outside `[0, R]`.
    pub query_policy: u32,
    /// 1: `[EXT]` clamps of `docs/PAPERS.md` P1-X8 (denominator into `[n, n·T_s(z_max)]`, outputs
    /// into `[−R_w, R_w]`); 0: raw ratios.
    pub clamp_outputs: u32,
}

impl dpattn_moment_sketch_params {
    fn to_core(self) -> Result<MomentSketchParams, FfiError> {
        let mut p = MomentSketchParams::new(
            self.radius,
            self.weight_bound,
            PrivacyBudget::new(self.epsilon, self.delta)?,
        );
        p.eps_s = self.eps_s;
        p.temperature = temperature_of("temperature", self.temperature, self.tau)?;
        p.noise = match self.noise {
            DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN => SketchNoise::Gaussian,
            DPATTN_MOMENT_SKETCH_NOISE_LAPLACE => SketchNoise::Laplace,
            v => {
                return Err(FfiError::UnknownValue {
                    arg: "noise",
                    value: v,
                    allowed: "DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN (0), _LAPLACE (1)",
                });
            }
        };
        p.query_policy = query_policy_of("query_policy", self.query_policy)?;
        p.clamp_outputs = flag("clamp_outputs", self.clamp_outputs)?;
        Ok(p)
    }
}

/// Fills `*out`: `R = R_w = 1`, Gaussian noise, `ε_s = 0.01`, `τ = 1/d`, queries rejected
/// outside the domain, clamps on; `epsilon` and `delta` are 0 and **must** be set (a
/// release refuses them otherwise). Errors: `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_params_default(
    out: *mut dpattn_moment_sketch_params,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            out.write(dpattn_moment_sketch_params {
                radius: 1.0,
                weight_bound: 1.0,
                epsilon: 0.0,
                delta: 0.0,
                eps_s: 0.01,
                temperature: DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM,
                tau: 0.0,
                noise: DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN,
                query_policy: DPATTN_SOFTMAX_TREE_QUERY_REJECT,
                clamp_outputs: 1,
            })
        };
        Ok(())
    })
}

/// The calibration for `dim`-dimensional keys, from public parameters only: the
/// sensitivity (Gaussian: ℓ2 `2·√(T_s(z_max))·√(1 + d R_w²)`; Laplace: ℓ1
/// `2·(Σ_a β_a)·(1 + d R_w)`, both times `1 + 1e-9` for rounding) and the noise scale (σ or
/// `b`), plus the feature count `r` (the sketch has `r·(d+1)` entries). Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (bad parameters, `δ = 0` with Gaussian, `δ ≠ 0` with
/// Laplace, `dim = 0`), `_INFEASIBLE`, `_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `params` readable, out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_calibrate(
    params: *const dpattn_moment_sketch_params,
    dim: usize,
    out_sensitivity: *mut f64,
    out_scale: *mut f64,
    out_features: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let a = Out::new(out_sensitivity, "out_sensitivity")?;
        let b = Out::new(out_scale, "out_scale")?;
        let c = Out::new(out_features, "out_features")?;
        // SAFETY: readable per the caller's contract.
        let p = unsafe { read(params, "params") }?.to_core()?;
        let r = p.feature_map(dim)?.features();
        let (s, sc) = p.calibrate(dim)?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(s);
            b.write(sc);
            c.write(r);
        }
        Ok(())
    })
}

/// Releases the sketch of private `keys` and `values` (both `rows × cols`, own row strides)
/// with fresh randomness from `session` (one stream id; entry `(i, c)` is element
/// `i·(d+1) + c` of that stream).
///
/// **Guarantee**: neighbours differ in **one token** (row `j` of `K` and of `V`; `n`
/// public; privacy unit `DPATTN_UNIT_TOKENS` with 1 token). For `K ∈ [0, R]^{n×d}`,
/// `V ∈ [−R_w, R_w]^{n×d}` (private rows are clamped there, NaN → 0), Gaussian noise gives
/// `(ε, δ)`-DP (analytic Gaussian mechanism), Laplace noise `ε`-DP. The release is DP in the
/// floats it returns: every entry is a multiple of a public grid with exact integer noise.
/// Every later query is post-processing.
///
/// **Accounting.** The session's ledger (kept for one token) is charged once, after the
/// noisy sketch is built and before the handle is returned: Gaussian noise, `(epsilon,
/// delta)` of `params` on an approximate-DP ledger and the release's zCDP `ρ` (the discrete
/// Gaussian's, rounded up) on a zCDP or RDP ledger; Laplace noise, the pure `epsilon`
/// (accepted by every kind: `(ε, 0)`, `ρ = ε²/2`, or the pure-DP RDP curve). A refused
/// charge returns the ledger's status (`DPATTN_STATUS_INFEASIBLE` over budget,
/// `DPATTN_STATUS_UNIT_MISMATCH` for a ledger of another unit), drops the sketch, and
/// leaves `*out_sketch` and the ledger unchanged (the stream id is consumed). The session
/// and its ledger are locked for the whole call (concurrent calls on them wait). To replay
/// a release for an audit, pass a session from `dpattn_session_new_for_replay` (with a NULL
/// ledger nothing is charged).
///
/// Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_SHAPE_MISMATCH`, `_BUFFER_TOO_SHORT`,
/// `_OUT_OF_RANGE` (`n = 0`, bad parameters), `_INFEASIBLE`, `_ALLOCATION_FAILED`,
/// `_MISALIGNED`, `_SIZE_OVERFLOW`; the ledger's status for a refused charge,
/// `_INVALID_HANDLE` for a freed `session` (or ledger). Allocates. Thread-safe.
///
/// ```c
/// dpattn_moment_sketch_params p;
/// dpattn_moment_sketch_params_default(&p);
/// p.epsilon = 1.0; p.delta = 1e-6;
/// dpattn_moment_sketch *s = NULL;
/// dpattn_moment_sketch_new(keys, n * d, vals, n * d, n, d, d, d, &p, session, &s);
/// size_t len; dpattn_moment_sketch_query_scratch_len(s, &len);
/// double out[2], den;
/// dpattn_moment_sketch_query(s, out, d, q, d, scratch, len, &den);
/// dpattn_moment_sketch_free(s);
/// ```
///
/// # Safety
/// Buffers valid for their lengths, struct pointers readable, `out_sketch` writable;
/// `session` a value returned by `dpattn_session_new*` (a freed one is detected).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_moment_sketch_new(
    keys: *const f64,
    keys_len: usize,
    values: *const f64,
    values_len: usize,
    rows: usize,
    cols: usize,
    keys_row_stride: usize,
    values_row_stride: usize,
    params: *const dpattn_moment_sketch_params,
    session: *mut dpattn_session,
    out_sketch: *mut *mut dpattn_moment_sketch,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sketch, "out_sketch")?;
        // SAFETY: forwarded caller contract.
        let (k, v, p) = unsafe {
            (
                MatRef::new(slice(keys, keys_len, "keys")?, rows, cols, keys_row_stride)?,
                MatRef::new(slice(values, values_len, "values")?, rows, cols, values_row_stride)?,
                read(params, "params")?,
            )
        };
        let p = p.to_core()?;
        let s = with_session(session, ms::STREAMS, |draw, l| {
            Ok(MomentSketch::new_keyed(k, v, &p, draw, l)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_moment_sketch::into_handle(s)) };
        Ok(())
    })
}

/// **Not differentially private.** The exact sketch of unclamped finite data (tests and
/// audits only; never release it). Errors as `dpattn_moment_sketch_new` plus
/// `_NON_FINITE`. Allocates. Thread-safe.
///
/// The handle is marked exact: queries that report a privacy guarantee or a noise level on it
/// (`_achieved_privacy`, `_get_budget`, a nominal `_noise_variance` or `_projection_noise_std`)
/// return `DPATTN_STATUS_UNSUPPORTED`, so it cannot be passed off as a DP release.
///
/// # Safety
/// As `dpattn_moment_sketch_new`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_moment_sketch_new_exact(
    keys: *const f64,
    keys_len: usize,
    values: *const f64,
    values_len: usize,
    rows: usize,
    cols: usize,
    keys_row_stride: usize,
    values_row_stride: usize,
    params: *const dpattn_moment_sketch_params,
    out_sketch: *mut *mut dpattn_moment_sketch,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sketch, "out_sketch")?;
        // SAFETY: forwarded caller contract.
        let (k, v, p) = unsafe {
            (
                MatRef::new(slice(keys, keys_len, "keys")?, rows, cols, keys_row_stride)?,
                MatRef::new(slice(values, values_len, "values")?, rows, cols, values_row_stride)?,
                read(params, "params")?,
            )
        };
        let s = MomentSketch::non_private_exact(k, v, &p.to_core()?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_moment_sketch::into_exact_handle(s)) };
        Ok(())
    })
}

/// Releases a sketch; NULL and already-freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_moment_sketch_free(sketch: *mut dpattn_moment_sketch) {
    ffi_value((), || {
        dpattn_moment_sketch::free(sketch);
    })
}

/// Shape and calibration of a released sketch: `d`, `r` (the sketch is `r × (d+1)`),
/// Taylor degree `s`, sensitivity and noise scale. Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_info(
    sketch: *const dpattn_moment_sketch,
    out_dim: *mut usize,
    out_features: *mut usize,
    out_degree: *mut u32,
    out_sensitivity: *mut f64,
    out_scale: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let a = Out::new(out_dim, "out_dim")?;
        let b = Out::new(out_features, "out_features")?;
        let c = Out::new(out_degree, "out_degree")?;
        let d = Out::new(out_sensitivity, "out_sensitivity")?;
        let e = Out::new(out_scale, "out_scale")?;
        let (m, (s, sc)) = dpattn_moment_sketch::lookup(sketch, "sketch")?
            .with(|s| (*s.feature_map(), s.calibration()));
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(m.dim());
            b.write(m.features());
            c.write(m.degree());
            d.write(s);
            e.write(sc);
        }
        Ok(())
    })
}

/// Copies the released `M̃` (row-major `r × (d+1)`, column 0 is `P(K)ᵀ1`) into `out`
/// (`out_len ≥ r·(d+1)`; the first `r·(d+1)` elements are written). Errors:
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`, `_NULL_ARGUMENT`, `_MISALIGNED`, `_INVALID_HANDLE`.
/// Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable for `out_len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_get(
    sketch: *const dpattn_moment_sketch,
    out: *mut f64,
    out_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let o = unsafe { slice_mut(out, out_len, "out") }?;
        dpattn_moment_sketch::lookup(sketch, "sketch")?.with(|s| {
            let m = s.sketch();
            if o.len() < m.len() {
                return Err(dpattn_core::Error::BufferTooShort {
                    arg: "out",
                    needed: m.len(),
                    got: o.len(),
                }
                .into());
            }
            o[..m.len()].copy_from_slice(m);
            Ok(())
        })
    })
}

/// The standard deviation of the noise in `⟨P(q), M̃_{:,c}⟩` at a query with
/// `‖P(q)‖² = u2`: `σ√u2` (Gaussian) or `b√(2·u2)` (Laplace). Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (`u2` negative or NaN), `_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_projection_noise_std(
    sketch: *const dpattn_moment_sketch,
    u2: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        if u2.is_nan() || u2 < 0.0 {
            return Err(dpattn_core::Error::OutOfRange {
                name: "u2",
                value: u2,
                allowed: "[0, inf)",
            }
            .into());
        }
        let v = dpattn_moment_sketch::lookup(sketch, "sketch")?
            .require_private()?
            .with(|s| s.projection_noise_std(u2));
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Scratch (`double` elements) for `dpattn_moment_sketch_query`: `r + d`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_moment_sketch_query_scratch_len(
    sketch: *const dpattn_moment_sketch,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = dpattn_moment_sketch::lookup(sketch, "sketch")?.with(|s| s.query_scratch_len());
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Answers one public query `q ∈ [0, R]^d` (`q_len = d`) into `out` (`out_len = d`):
/// `out_k = ⟨P(q), M̃_{:,k+1}⟩ / den`, `den = ⟨P(q), M̃_{:,0}⟩` (clamped per
/// `clamp_outputs`), written to `*out_den`. Post-processing of the release. Errors
/// (outputs untouched): `DPATTN_STATUS_SHAPE_MISMATCH`, `_SCRATCH_TOO_SMALL`,
/// `_OUT_OF_RANGE` / `_NON_FINITE` (bad query per the policy), `_ALIASING`,
/// `_NULL_ARGUMENT`, `_MISALIGNED`, `_INVALID_HANDLE`. Allocation-free. Thread-safe
/// (per-handle lock).
///
/// # Safety
/// `out` writable for `out_len`, `q` readable for `q_len`, `scratch` writable for
/// `scratch_len`, `out_den` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_moment_sketch_query(
    sketch: *const dpattn_moment_sketch,
    out: *mut f64,
    out_len: usize,
    q: *const f64,
    q_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
    out_den: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let den = Out::new(out_den, "out_den")?;
        let mut bufs = Buffers::default();
        bufs.input("q", q, q_len).output("out", out, out_len).output(
            "scratch",
            scratch,
            scratch_len,
        );
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; outputs disjoint from each other and from `q`.
        let (q, o, sc) = unsafe {
            (
                slice(q, q_len, "q")?,
                slice_mut(out, out_len, "out")?,
                slice_mut(scratch, scratch_len, "scratch")?,
            )
        };
        // `query_into` checks shapes, scratch and the query before its first write to `out`
        // and cannot fail afterwards, so `out` is untouched on every error.
        let v = dpattn_moment_sketch::lookup(sketch, "sketch")?.with(|s| s.query_into(q, o, sc))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { den.write(v) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use crate::ledger::dpattn_ledger;
    use crate::softmax_tree::session_testing as ss;
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::session::Draw;
    use std::ptr::null_mut;

    #[test]
    fn sketch_equals_core_and_errors_are_exact() {
        let (n, d) = (50usize, 2usize);
        let keys: Vec<f64> = (0..n * d).map(|i| ((i * 37) % 100) as f64 / 100.0).collect();
        let vals: Vec<f64> = (0..n * d).map(|i| ((i * 53) % 200) as f64 / 100.0 - 1.0).collect();
        let mut p = std::mem::MaybeUninit::uninit();
        // SAFETY: valid pointer.
        unsafe { dpattn_moment_sketch_params_default(p.as_mut_ptr()) };
        // SAFETY: initialised.
        let mut p = unsafe { p.assume_init() };
        p.epsilon = 1.0;
        p.delta = 1e-6;
        let session = ss::replay(6, 4, null_mut());
        let mut h = null_mut();
        // SAFETY: valid pointers.
        let s = unsafe {
            dpattn_moment_sketch_new(
                keys.as_ptr(),
                n * d,
                vals.as_ptr(),
                n * d,
                n,
                d,
                d,
                d,
                &p,
                session,
                &mut h,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        let core = MomentSketch::new_keyed(
            MatRef::from_row_major(&keys, n, d).unwrap(),
            MatRef::from_row_major(&vals, n, d).unwrap(),
            &p.to_core().unwrap(),
            Draw { key: &ss::key(6), stream: 4 },
            None,
        )
        .unwrap();
        let mut m = vec![0.0; core.sketch().len()];
        // SAFETY: valid buffer.
        let st = unsafe { dpattn_moment_sketch_get(h, m.as_mut_ptr(), m.len()) };
        assert_eq!(st, dpattn_status::Ok);
        assert!(m.iter().zip(core.sketch()).all(|(a, b)| a.to_bits() == b.to_bits()));
        let mut len = 0;
        // SAFETY: valid pointers.
        unsafe { dpattn_moment_sketch_query_scratch_len(h, &mut len) };
        let (q, mut out, mut sc, mut den) = ([0.5, 0.5], [9.0; 2], vec![0.0; len], 0.0);
        // SAFETY: valid pointers.
        let s = unsafe {
            dpattn_moment_sketch_query(
                h,
                out.as_mut_ptr(),
                2,
                q.as_ptr(),
                2,
                sc.as_mut_ptr(),
                len,
                &mut den,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        let mut want = [0.0; 2];
        let wd = core.query(&q, &mut want).unwrap();
        assert_eq!((out.map(f64::to_bits), den.to_bits()), (want.map(f64::to_bits), wd.to_bits()));
        // Error paths: outputs untouched.
        let before = out;
        // SAFETY: all pointers valid; errors are detected before writes.
        unsafe {
            let bad = [2.0, 0.5];
            assert_eq!(
                dpattn_moment_sketch_query(
                    h,
                    out.as_mut_ptr(),
                    2,
                    bad.as_ptr(),
                    2,
                    sc.as_mut_ptr(),
                    len,
                    &mut den
                ),
                dpattn_status::OutOfRange
            );
            assert_eq!(
                dpattn_moment_sketch_query(
                    h,
                    out.as_mut_ptr(),
                    1,
                    q.as_ptr(),
                    2,
                    sc.as_mut_ptr(),
                    len,
                    &mut den
                ),
                dpattn_status::ShapeMismatch
            );
            assert_eq!(
                dpattn_moment_sketch_query(
                    h,
                    out.as_mut_ptr(),
                    2,
                    q.as_ptr(),
                    2,
                    out.as_mut_ptr(),
                    2,
                    &mut den
                ),
                dpattn_status::Aliasing
            );
            assert_eq!(
                dpattn_moment_sketch_get(h, m.as_mut_ptr(), 3),
                dpattn_status::BufferTooShort
            );
        }
        assert_eq!(out, before);
        dpattn_moment_sketch_free(h);
        dpattn_moment_sketch_free(h);
        // SAFETY: freed handle detected.
        let s = unsafe { dpattn_moment_sketch_query_scratch_len(h, &mut len) };
        assert_eq!(s, dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("sketch"));
        p.noise = 5;
        // SAFETY: valid pointers; unknown enum.
        let s = unsafe {
            dpattn_moment_sketch_new(
                keys.as_ptr(),
                n * d,
                vals.as_ptr(),
                n * d,
                n,
                d,
                d,
                d,
                &p,
                session,
                &mut h,
            )
        };
        assert_eq!(s, dpattn_status::OutOfRange);
        assert!(last_error_string().contains("noise"));
        // A bad parameter is refused before the session hands out a stream id; a NULL or
        // freed session is refused.
        assert_eq!(ss::next_stream(session), 5);
        p.noise = DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN;
        for (bad, want) in
            [(null_mut(), dpattn_status::NullArgument), (ss::freed(), dpattn_status::InvalidHandle)]
        {
            // SAFETY: valid pointers; a NULL or freed session.
            let s = unsafe {
                dpattn_moment_sketch_new(
                    keys.as_ptr(),
                    n * d,
                    vals.as_ptr(),
                    n * d,
                    n,
                    d,
                    d,
                    d,
                    &p,
                    bad,
                    &mut h,
                )
            };
            assert_eq!(s, want);
            assert!(last_error_string().contains("session"));
        }
        ss::free(session);
        p.noise = DPATTN_MOMENT_SKETCH_NOISE_LAPLACE; // δ must then be 0
        let (mut a, mut b, mut r) = (0.0, 0.0, 0usize);
        // SAFETY: valid pointers.
        let s = unsafe { dpattn_moment_sketch_calibrate(&p, d, &mut a, &mut b, &mut r) };
        assert_eq!(s, dpattn_status::OutOfRange);
        assert!(last_error_string().contains("delta"));
    }

    /// A release on a replay session of key `[6; 32]` whose next stream id is 4, charging
    /// `ledger` (NULL: nothing).
    fn sketch_with(
        p: &dpattn_moment_sketch_params,
        ledger: *mut dpattn_ledger,
        h: &mut *mut dpattn_moment_sketch,
    ) -> dpattn_status {
        let (n, d) = (50usize, 2usize);
        let keys: Vec<f64> = (0..n * d).map(|i| ((i * 37) % 100) as f64 / 100.0).collect();
        let vals: Vec<f64> = (0..n * d).map(|i| ((i * 53) % 200) as f64 / 100.0 - 1.0).collect();
        let session = ss::replay(6, 4, ledger);
        // SAFETY: valid pointers; a live session.
        let st = unsafe {
            dpattn_moment_sketch_new(
                keys.as_ptr(),
                n * d,
                vals.as_ptr(),
                n * d,
                n,
                d,
                d,
                d,
                p,
                session,
                h,
            )
        };
        ss::free(session);
        st
    }

    #[test]
    fn sketch_with_a_ledger_charges_exactly_what_the_core_charges() {
        let (n, d) = (50usize, 2usize);
        let keys: Vec<f64> = (0..n * d).map(|i| ((i * 37) % 100) as f64 / 100.0).collect();
        let vals: Vec<f64> = (0..n * d).map(|i| ((i * 53) % 200) as f64 / 100.0 - 1.0).collect();
        let mut p = std::mem::MaybeUninit::uninit();
        // SAFETY: valid pointer, initialised on success.
        let mut p = unsafe {
            assert_eq!(dpattn_moment_sketch_params_default(p.as_mut_ptr()), dpattn_status::Ok);
            p.assume_init()
        };
        p.epsilon = 1.0;
        for (noise, delta) in
            [(DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN, 1e-6), (DPATTN_MOMENT_SKETCH_NOISE_LAPLACE, 0.0)]
        {
            p.noise = noise;
            p.delta = delta;
            for kind in [Kind::Approx(2.0, 1e-5), Kind::Zcdp(2.0), Kind::Rdp(10.0, 1e-5)] {
                let (l, mut cl) = lt::pair(PrivacyUnit::TOKEN, kind);
                let mut h = null_mut();
                let st = sketch_with(&p, l, &mut h);
                let core = MomentSketch::new_keyed(
                    MatRef::from_row_major(&keys, n, d).unwrap(),
                    MatRef::from_row_major(&vals, n, d).unwrap(),
                    &p.to_core().unwrap(),
                    Draw { key: &ss::key(6), stream: 4 },
                    Some(&mut cl),
                );
                // Every kind of ledger takes the release: Gaussian noise as (ε, δ) or its
                // zCDP ρ, Laplace noise as the pure ε.
                assert_eq!(st, dpattn_status::Ok, "{kind:?}: {}", last_error_string());
                let core = core.unwrap();
                let mut m = vec![0.0; core.sketch().len()];
                // SAFETY: valid buffer, live handle.
                let s = unsafe { dpattn_moment_sketch_get(h, m.as_mut_ptr(), m.len()) };
                assert_eq!(s, dpattn_status::Ok);
                assert!(m.iter().zip(core.sketch()).all(|(a, b)| a.to_bits() == b.to_bits()));
                assert!(lt::nonzero(cl.spent()));
                let (spent, charges) = lt::state(l);
                assert_eq!(charges, 1);
                match kind {
                    Kind::Approx(..) => {
                        assert_eq!((spent.epsilon, spent.delta), (1.0, delta));
                    }
                    Kind::Zcdp(..) if noise == DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN => {
                        // ρ = Δ′²/(2σ²) of the released discrete Gaussian: Δ′ the rounded
                        // sensitivity, σ = s·Λ its noise scale (public calibration).
                        let g = p.to_core().unwrap().exact_grid(d, n).unwrap();
                        let want = (g.rounded_sensitivity() / g.scale()).powi(2) / 2.0;
                        assert!((spent.rho / want - 1.0).abs() < 1e-12, "{} vs {want}", spent.rho);
                    }
                    Kind::Zcdp(..) => assert_eq!(spent.rho, 0.5), // ε²/2 of the pure ε = 1
                    Kind::Rdp(..) => {}
                }
                dpattn_moment_sketch_free(h);
                lt::assert_same(l, &cl);
                lt::free(l);
            }
        }
        // Refused (over budget; a ledger kept for another unit): no handle, ledger
        // unchanged.
        for (unit, want) in [
            (PrivacyUnit::TOKEN, dpattn_status::Infeasible),
            (PrivacyUnit::Prompt, dpattn_status::UnitMismatch),
        ] {
            let total = if unit == PrivacyUnit::TOKEN { 0.5 } else { 10.0 };
            let (l, _) = lt::pair(unit, Kind::Approx(total, 1e-5));
            let mut h = 0x10 as *mut dpattn_moment_sketch;
            assert_eq!(sketch_with(&p, l, &mut h), want);
            assert_eq!(h, 0x10 as *mut dpattn_moment_sketch);
            lt::assert_untouched(l);
            lt::free(l);
        }
    }
}
