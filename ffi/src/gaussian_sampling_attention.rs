//! Differentially private attention by Gaussian sampling (paper 000; core module
//! `dpattn_core::gaussian_sampling_attention`; `docs/PAPERS.md` §0) from C.
//!
//! The mechanism releases `B = (1/k)·Σᵢ gᵢgᵢᵀ`, `gᵢ ~ N(0, XXᵀ)` and `P = D(B)⁻¹ f(B)`.
//! **Privacy unit: one feature column of `X`** (neighbours differ in one column by at most
//! `β` in ℓ2), not a token. The calibration functions are arithmetic on public parameters.

use std::ffi::c_void;

use dpattn_core::accounting::composition::basic_composition_k;
use dpattn_core::gaussian_sampling_attention as gsa;
use dpattn_core::gaussian_sampling_attention::{
    AccuracyCoupling, Calibration, DeltaConstants, Domain, GaussianSamplingParams, OutOfDomain,
    RhoModel, Sampler, SensitivityBound,
};
use dpattn_core::sampling::KeyedStream;
use dpattn_core::{MatMut, MatRef, PrivacyBudget, ScoreFn};

use crate::args::{Buffers, Out, flag, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, ffi_value, unknown};
use crate::session::{dpattn_session, with_session};
use crate::status::dpattn_status;
use crate::tensor::{
    HasDtype, dpattn_dtype, dpattn_key, dpattn_tensor4, dpattn_tensor4_mut, with_dtype,
};

/// `f = exp` in `P = D(B)⁻¹ f(B)` (the softmax).
pub const DPATTN_GAUSSIAN_SAMPLING_SCORE_EXP: u32 = 0;
/// `f = cosh` in `P = D(B)⁻¹ f(B)`.
pub const DPATTN_GAUSSIAN_SAMPLING_SCORE_COSH: u32 = 1;
/// Bartlett decomposition (`docs/PAPERS.md` P0-S3, default): cost independent of `k`; needs
/// `k ≥ n`.
pub const DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT: u32 = 0;
/// The paper's literal `gᵢ = chol(Σ)·zᵢ` (`docs/PAPERS.md` P0-S1): cost linear in `k`.
pub const DPATTN_GAUSSIAN_SAMPLING_SAMPLER_LITERAL: u32 = 1;
/// `gᵢ = X·zᵢ` (`docs/PAPERS.md` P0-S2): no factorisation; cost `O(ndk)`; data input only.
pub const DPATTN_GAUSSIAN_SAMPLING_SAMPLER_FACTOR_FREE: u32 = 2;
/// Theorem 4.1 constants `Δ = 0.1·min(ε/√(k ln(1/δ)), ε/ln(1/δ))` (default; `docs/PAPERS.md`
/// P0-1).
pub const DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41: u32 = 0;
/// Definition 5.5 constants `Δ = min(ε/√(8k ln(1/δ)), ε/(8 ln(1/δ)))`.
pub const DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_DEFINITION55: u32 = 1;
/// The paper's sensitivity bound `s = 2αβ√n/η` (Lemma 5.11, default).
pub const DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_PAPER_SQRT_N: u32 = 0;
/// Our tight bound `s = 2αβ/η` (`docs/PAPERS.md` P0-D6, not in the paper).
pub const DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_TIGHT: u32 = 1;
/// Refuse private data outside the declared domain (`DPATTN_STATUS_DOMAIN_VIOLATION`).
pub const DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_REJECT: u32 = 0;
/// `[EXT]` clip every column to norm `α` and append `√η·I_n` (never refuses private data).
pub const DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_CLIP_AND_RIDGE: u32 = 1;
/// The paper's accuracy radius `C·(u + u²)`, `u = √((n² + ln(1/γ))/k)` (**not rigorous**).
pub const DPATTN_GAUSSIAN_SAMPLING_RHO_PAPER_NOMINAL: u32 = 0;
/// The rigorous Davidson–Szarek bound `ρ₂ = 2a + a²`, `a = (√n + √(2 ln(2/γ)))/√k`
/// (`docs/PAPERS.md` P0-D7).
pub const DPATTN_GAUSSIAN_SAMPLING_RHO_GAUSSIAN_SPECTRAL: u32 = 1;
/// The paper's accuracy target `ρ < 0.1ε` (`docs/PAPERS.md` P0-3).
pub const DPATTN_GAUSSIAN_SAMPLING_COUPLING_PAPER: u32 = 0;
/// Theorem 5.3 with its own factor `ε_acc ∈ (0, 0.1)`: `ρ ≤ ε_acc/(1 + ε_acc)`.
pub const DPATTN_GAUSSIAN_SAMPLING_COUPLING_DECOUPLED: u32 = 1;
/// `k_max` written when every `k` is private (`β = 0`): no upper bound.
pub const DPATTN_GAUSSIAN_SAMPLING_K_UNBOUNDED: u64 = 0;
/// The largest sample count any routine accepts, `2^53`.
pub const DPATTN_GAUSSIAN_SAMPLING_K_LIMIT: u64 = 9_007_199_254_740_992;
const _: () = assert!(DPATTN_GAUSSIAN_SAMPLING_K_LIMIT == gsa::K_LIMIT);

/// The declared, public data domain (Defs. 1.5, 1.6): every column of `X` has norm at most
/// `alpha`, `XXᵀ ⪰ eta·I`, neighbours differ in one column by at most `beta` in ℓ2
/// (`beta = 2·alpha` is replacement of a column). Choose it **without looking at `X`**.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_gaussian_sampling_domain {
    /// Column-norm bound `α > 0`.
    pub alpha: f64,
    /// Eigenvalue floor `η > 0` of `XXᵀ`.
    pub eta: f64,
    /// Neighbour radius `β ≥ 0`.
    pub beta: f64,
}

/// The choices that shape a calibration (`dpattn_gaussian_sampling_calibration_default`
/// fills the paper-literal preset).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_gaussian_sampling_calibration {
    /// `DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_*`.
    pub constants: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_*`.
    pub sensitivity: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_RHO_*`.
    pub rho_model: u32,
    /// The constant `C ≥ 1` of the paper's nominal `ρ` (ignored by the spectral model).
    pub rho_c: f64,
    /// `DPATTN_GAUSSIAN_SAMPLING_COUPLING_*`.
    pub coupling: u32,
    /// `ε_acc ∈ (0, 0.1)` of the decoupled accuracy target (ignored by the paper coupling).
    pub eps_acc: f64,
}

/// Parameters of `dpattn_gaussian_sampling_attention`. All public; fix them without
/// looking at the private `X`. `dpattn_gaussian_sampling_params_default` sets the enum
/// fields to the paper-literal defaults and the budget, domain and `k` to 0, which every
/// call refuses until the caller sets them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_gaussian_sampling_params {
    /// `ε ∈ (0, 1)` of one problem.
    pub epsilon: f64,
    /// `δ ∈ (0, 0.1)` of one problem.
    pub delta: f64,
    /// The declared data domain `(α, η, β)`.
    pub domain: dpattn_gaussian_sampling_domain,
    /// The number of Gaussian samples `k ∈ [1, 2^53]` (more: more accuracy, less privacy).
    pub k: u64,
    /// `DPATTN_GAUSSIAN_SAMPLING_SCORE_*`.
    pub score: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_SAMPLER_*` (all three have the same output law).
    pub sampler: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_*` used by the privacy check.
    pub constants: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_*` used by the privacy check.
    pub sensitivity: u32,
    /// `DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_*`.
    pub out_of_domain: u32,
    /// 1: neighbouring inputs differ only inside one batch element, so the call is charged
    /// `heads` releases (parallel composition) instead of `batch·heads`; 0 otherwise.
    pub batch_elements_disjoint: u32,
    /// `DPATTN_NOISE_MODE_UNSAFE_FLOAT` (1) to run the mechanism: it has no
    /// floating-point-safe form (docs/PRIVACY.md §3.5), so the default
    /// `DPATTN_NOISE_MODE_EXACT` (0) refuses every release with `DPATTN_STATUS_UNSUPPORTED`.
    pub noise_mode: u32,
}

/// Private diagnostics of a release, **for the data holder only; never publish them**
/// (functions of the private `X`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_gaussian_sampling_report {
    /// Largest column norm of any problem, before clipping (infinity when clip-and-ridge
    /// zeroed a column holding a NaN or an infinity).
    pub alpha_hat: f64,
    /// Largest `(XXᵀ)_ii` of any problem (after clipping, before the ridge).
    pub r_hat: f64,
    /// Columns clipped to `α` or zeroed for a NaN or an infinity (0 in reject mode).
    pub clipped_columns: usize,
}

fn score_of(v: u32) -> Result<ScoreFn, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_SCORE_EXP => Ok(ScoreFn::Exp),
        DPATTN_GAUSSIAN_SAMPLING_SCORE_COSH => Ok(ScoreFn::Cosh),
        _ => Err(unknown("score", v, "DPATTN_GAUSSIAN_SAMPLING_SCORE_EXP (0), _COSH (1)")),
    }
}

fn sampler_of(v: u32) -> Result<Sampler, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT => Ok(Sampler::Bartlett),
        DPATTN_GAUSSIAN_SAMPLING_SAMPLER_LITERAL => Ok(Sampler::Literal),
        DPATTN_GAUSSIAN_SAMPLING_SAMPLER_FACTOR_FREE => Ok(Sampler::FactorFree),
        _ => Err(unknown(
            "sampler",
            v,
            "DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT (0), _LITERAL (1), _FACTOR_FREE (2)",
        )),
    }
}

fn constants_of(v: u32) -> Result<DeltaConstants, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41 => Ok(DeltaConstants::Theorem41),
        DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_DEFINITION55 => Ok(DeltaConstants::Definition55),
        _ => Err(unknown(
            "constants",
            v,
            "DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41 (0), _DEFINITION55 (1)",
        )),
    }
}

fn sensitivity_of(v: u32) -> Result<SensitivityBound, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_PAPER_SQRT_N => Ok(SensitivityBound::PaperSqrtN),
        DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_TIGHT => Ok(SensitivityBound::Tight),
        _ => Err(unknown(
            "sensitivity",
            v,
            "DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_PAPER_SQRT_N (0), _TIGHT (1)",
        )),
    }
}

fn out_of_domain_of(v: u32) -> Result<OutOfDomain, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_REJECT => Ok(OutOfDomain::Reject),
        DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_CLIP_AND_RIDGE => Ok(OutOfDomain::ClipAndRidge),
        _ => Err(unknown(
            "out_of_domain",
            v,
            "DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_REJECT (0), _CLIP_AND_RIDGE (1)",
        )),
    }
}

fn rho_model_of(v: u32, c: f64) -> Result<RhoModel, FfiError> {
    match v {
        DPATTN_GAUSSIAN_SAMPLING_RHO_PAPER_NOMINAL => Ok(RhoModel::PaperNominal { c }),
        DPATTN_GAUSSIAN_SAMPLING_RHO_GAUSSIAN_SPECTRAL => Ok(RhoModel::GaussianSpectral),
        _ => Err(unknown(
            "rho_model",
            v,
            "DPATTN_GAUSSIAN_SAMPLING_RHO_PAPER_NOMINAL (0), _GAUSSIAN_SPECTRAL (1)",
        )),
    }
}

impl dpattn_gaussian_sampling_domain {
    fn to_core(self) -> Result<Domain, FfiError> {
        Ok(Domain::new(self.alpha, self.eta, self.beta)?)
    }
}

impl dpattn_gaussian_sampling_calibration {
    fn to_core(self) -> Result<Calibration, FfiError> {
        let coupling = match self.coupling {
            DPATTN_GAUSSIAN_SAMPLING_COUPLING_PAPER => AccuracyCoupling::Paper,
            DPATTN_GAUSSIAN_SAMPLING_COUPLING_DECOUPLED => {
                AccuracyCoupling::Decoupled { eps_acc: self.eps_acc }
            }
            v => {
                return Err(unknown(
                    "coupling",
                    v,
                    "DPATTN_GAUSSIAN_SAMPLING_COUPLING_PAPER (0), _DECOUPLED (1)",
                ));
            }
        };
        Ok(Calibration {
            constants: constants_of(self.constants)?,
            sensitivity: sensitivity_of(self.sensitivity)?,
            rho: rho_model_of(self.rho_model, self.rho_c)?,
            coupling,
        })
    }
}

impl dpattn_gaussian_sampling_params {
    pub(crate) fn to_core(self) -> Result<GaussianSamplingParams, FfiError> {
        let budget = PrivacyBudget::new(self.epsilon, self.delta)?;
        let mut p = GaussianSamplingParams::new(budget, self.domain.to_core()?, self.k);
        p.score = score_of(self.score)?;
        p.sampler = sampler_of(self.sampler)?;
        p.constants = constants_of(self.constants)?;
        p.sensitivity = sensitivity_of(self.sensitivity)?;
        p.out_of_domain = out_of_domain_of(self.out_of_domain)?;
        p.batch_elements_disjoint = flag("batch_elements_disjoint", self.batch_elements_disjoint)?;
        p.noise_mode = crate::noise_mode::decode(self.noise_mode, "params.noise_mode")?;
        Ok(p)
    }
}

/// A strided row-major matrix argument `(ptr, len, rows, cols, row_stride)`.
///
/// # Safety
/// `ptr` must be NULL or valid for reads of `len` elements of `T` for `'a`.
unsafe fn mat_ref<'a, T: Copy>(
    ptr: *const T,
    len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    name: &'static str,
) -> Result<MatRef<'a, T>, FfiError> {
    // SAFETY: forwarded caller contract.
    let data = unsafe { slice(ptr, len, name) }?;
    Ok(MatRef::new(data, rows, cols, row_stride)?)
}

/// The elements a matrix addresses, for the overlap check: `min(len, required)`.
fn mat_extent(len: usize, rows: usize, cols: usize, row_stride: usize) -> usize {
    dpattn_core::matrix_view::required_len(rows, cols, row_stride).map_or(len, |r| r.min(len))
}

/// Fills `*out` with the paper-literal calibration: Theorem 4.1 constants, `s = 2αβ√n/η`,
/// the nominal `ρ` with `C = 1` and the paper's coupling `ρ < 0.1ε` (`eps_acc = 0.09`,
/// unused unless `coupling` is set to `_DECOUPLED`, which with `rho_model = _GAUSSIAN_SPECTRAL`
/// is the rigorous preset). Returns `DPATTN_STATUS_NULL_ARGUMENT` for NULL. Thread-safe; no
/// shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_calibration_default(
    out: *mut dpattn_gaussian_sampling_calibration,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            out.write(dpattn_gaussian_sampling_calibration {
                constants: DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41,
                sensitivity: DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_PAPER_SQRT_N,
                rho_model: DPATTN_GAUSSIAN_SAMPLING_RHO_PAPER_NOMINAL,
                rho_c: 1.0,
                coupling: DPATTN_GAUSSIAN_SAMPLING_COUPLING_PAPER,
                eps_acc: 0.09,
            })
        };
        Ok(())
    })
}

/// Fills `*out` with the paper-literal mechanism defaults: `exp`, Bartlett sampler,
/// Theorem 4.1 constants, `s = 2αβ√n/η`, reject out-of-domain data, every problem charged;
/// `epsilon`, `delta`, `domain` and `k` are set to 0 and **must** be set by the caller
/// (calls refuse them with `DPATTN_STATUS_OUT_OF_RANGE` otherwise). Returns
/// `DPATTN_STATUS_NULL_ARGUMENT` for NULL. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_params_default(
    out: *mut dpattn_gaussian_sampling_params,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            out.write(dpattn_gaussian_sampling_params {
                epsilon: 0.0,
                delta: 0.0,
                domain: dpattn_gaussian_sampling_domain { alpha: 0.0, eta: 0.0, beta: 0.0 },
                k: 0,
                score: DPATTN_GAUSSIAN_SAMPLING_SCORE_EXP,
                sampler: DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT,
                constants: DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41,
                sensitivity: DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_PAPER_SQRT_N,
                out_of_domain: DPATTN_GAUSSIAN_SAMPLING_OUT_OF_DOMAIN_REJECT,
                batch_elements_disjoint: 0,
                noise_mode: crate::noise_mode::DPATTN_NOISE_MODE_EXACT,
            })
        };
        Ok(())
    })
}

/// Scratch (`double` elements) for `dpattn_gaussian_sampling_attention` with problems of
/// `n × d` (e.g. `d + 2n² + n` for Bartlett in reject mode). Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_OUT_OF_RANGE` (a zero size or an unknown
/// enum value), `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// # Safety
/// `out_len` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_attention_scratch_len(
    n: usize,
    d: usize,
    sampler: u32,
    out_of_domain: u32,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let len = gsa::gaussian_sampling_attention_scratch_len(
            n,
            d,
            sampler_of(sampler)?,
            out_of_domain_of(out_of_domain)?,
        )?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(len) };
        Ok(())
    })
}

/// DPAttention (Algorithm 1 of paper 000), batched: for every problem `x[b, h]` (`n × d`),
/// `A = XXᵀ`, `B = DPCovariance(A, k)` into `out_b[b, h]` and `P = D(B)⁻¹ f(B)` into
/// `out_p[b, h]` (both `[batch, heads, n, n]`, dtype `DPATTN_DTYPE_F64`; `x` may be any
/// dtype). Writes the private diagnostics to `*out_report` (**data holder only**).
///
/// **Guarantee** (Theorem 4.1 Part 2 via Theorem 5.9, with the errata of `docs/PAPERS.md` §0.6):
/// each problem's `(B, P)` is `(ε, δ)`-DP with respect to **one feature column** of its `X` moving
/// by at most `β` in ℓ2 (not one token: token-level privacy is not covered), for `ε ∈ (0, 1)`,
/// `δ ∈ (0, 0.1)`, provided (PRIV) `s < Δ(k)` holds and every possible input lies in the declared
/// `(α, η)`-good domain. The whole call composes over problems: its total is
/// `dpattn_gaussian_sampling_attention_charge` (basic composition, or parallel over batch elements
/// when declared disjoint). The domain and `k` must be public (never derived from `X`). The
/// samplers are floating point; the guarantee is for the exact output law. `[FIX]`es: the stricter
/// Theorem 4.1 constants by default (P0-1), the loose `√n` sensitivity (P0-6, opt-in tight),
/// `δ < 0.1` (P0-18).
///
/// **Accounting.** The session's ledger must be kept for one feature column
/// (`DPATTN_UNIT_FEATURE_COLUMN`; another unit is refused with
/// `DPATTN_STATUS_UNIT_MISMATCH`). It is charged the total of
/// `dpattn_gaussian_sampling_attention_charge` as one approximate-DP `(ε, δ)` charge
/// (`δ > 0`: only approximate-DP ledgers accept it; zCDP and RDP ledgers refuse it with
/// `DPATTN_STATUS_OUT_OF_RANGE`), after every check including the private domain check of
/// every problem and before any output is written. A refused charge returns the ledger's
/// status (`DPATTN_STATUS_INFEASIBLE` over budget) with `out_b`, `out_p`, `*out_report` and
/// the ledger unchanged (scratch zeroed as always). A call refused by the domain check
/// charges nothing. The session and its ledger are locked for the whole call (concurrent
/// calls wait).
///
/// Randomness: one fresh stream id of `session` (its position before the call, used up
/// even if the call fails); problem `b·heads + h` reads the elements its sampler documents.
/// To replay a release for an audit, run it on a `dpattn_session_new_for_replay` session
/// (the master key, the logged epoch and stream id, a NULL ledger): the same input then
/// gives identical bits, and nothing is charged.
///
/// Errors (outputs untouched): `DPATTN_STATUS_NULL_ARGUMENT`, `_MISALIGNED`,
/// `_SIZE_OVERFLOW`, `_ALIASING` (outputs or scratch overlap another buffer),
/// `_SHAPE_MISMATCH` (any axis; `d < n` in reject mode), `_BUFFER_TOO_SHORT`,
/// `_OUT_OF_RANGE` (bad ε, δ, domain, `k ∉ [1, 2^53]`, Bartlett with `k < n`, zero sizes, an
/// unknown enum or dtype, outputs not f64), `_INFEASIBLE` (the privacy condition, or an empty
/// declared domain), `_SCRATCH_TOO_SMALL`, and in reject mode only `_NON_FINITE` and
/// `_DOMAIN_VIOLATION` (private data outside the declared domain): **data-dependent
/// refusals**, which the guarantee does not cover; show them only to the data holder
/// (clip-and-ridge refuses neither: it zeroes a column holding a NaN or an infinity);
/// `_INFEASIBLE` / `_OUT_OF_RANGE` / `_UNIT_MISMATCH` for a refused ledger charge,
/// `_INVALID_HANDLE` for a freed `session`, `_SIZE_OVERFLOW` when the session's stream ids
/// are used up. The used
/// part of `scratch` is zeroed before returning (it held `XXᵀ`), whatever the outcome.
/// Thread-safe; no shared state. Allocation-free.
///
/// ```c
/// dpattn_gaussian_sampling_params p;
/// dpattn_gaussian_sampling_params_default(&p);
/// p.epsilon = 0.09; p.delta = 1e-6; p.k = 100000;
/// p.noise_mode = DPATTN_NOISE_MODE_UNSAFE_FLOAT; // no exact form (docs/PRIVACY.md §3.5)
/// p.domain.alpha = 0.04; p.domain.eta = 0.05; p.domain.beta = 1e-6;
/// size_t len;
/// dpattn_gaussian_sampling_attention_scratch_len(n, d, p.sampler, p.out_of_domain, &len);
/// // b, pm: dpattn_tensor4_mut of [1,1,n,n] f64; x: dpattn_tensor4 of [1,1,n,d]
/// dpattn_privacy_unit column = {DPATTN_UNIT_FEATURE_COLUMN, 0};
/// dpattn_ledger *ledger = NULL;
/// dpattn_session *session = NULL;
/// dpattn_ledger_new_approx(column, 1.0, 1e-5, &ledger);
/// dpattn_session_new(ledger, &session); // a master key from the operating system
/// dpattn_gaussian_sampling_report rep;
/// dpattn_status s = dpattn_gaussian_sampling_attention(&b, &pm, &x, &p, session,
///                                                      scratch, len, &rep);
/// dpattn_session_free(session);
/// dpattn_ledger_free(ledger);
/// ```
///
/// # Safety
/// Every pointer must be NULL or valid: the tensors' data for their `len` elements (outputs
/// writable), `scratch` for `scratch_len` writable doubles, the structs readable,
/// `out_report` writable; `session` NULL or a value returned by `dpattn_session_new*` /
/// `_restore` (a freed one is detected).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_attention(
    out_b: *const dpattn_tensor4_mut,
    out_p: *const dpattn_tensor4_mut,
    x: *const dpattn_tensor4,
    params: *const dpattn_gaussian_sampling_params,
    session: *mut dpattn_session,
    scratch: *mut f64,
    scratch_len: usize,
    out_report: *mut dpattn_gaussian_sampling_report,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_report, "out_report")?;
        // SAFETY: each pointer is readable per the caller's contract (NULL is rejected).
        let (ob, op, xt, params) = unsafe {
            (read(out_b, "out_b")?, read(out_p, "out_p")?, read(x, "x")?, read(params, "params")?)
        };
        let params = params.to_core()?;
        let report = with_dtype!(xt.dtype, "x", |T| {
            let mut bufs = Buffers::default();
            xt.record::<T>("x", &mut bufs);
            ob.record::<f64>("out_b", &mut bufs);
            op.record::<f64>("out_p", &mut bufs);
            bufs.output("scratch", scratch, scratch_len);
            bufs.disjoint()?;
            // SAFETY: caller contract for the tensors and scratch; every output proved
            // disjoint from every other buffer above.
            let (xv, bv, pv, sc) = unsafe {
                (
                    xt.view::<T>("x")?,
                    ob.view_mut::<f64>("out_b")?,
                    op.view_mut::<f64>("out_p")?,
                    slice_mut(scratch, scratch_len, "scratch")?,
                )
            };
            with_session(session, gsa::STREAMS, |draw, l| {
                Ok(gsa::gaussian_sampling_attention_keyed(bv, pv, xv, &params, draw, l, sc)?)
            })?
        });
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            out.write(dpattn_gaussian_sampling_report {
                alpha_hat: report.alpha_hat,
                r_hat: report.r_hat,
                clipped_columns: report.clipped_columns,
            })
        };
        Ok(())
    })
}

/// The total `(ε, δ)` one call of `dpattn_gaussian_sampling_attention` with `batch × heads`
/// problems spends: basic composition of the per-problem `(ε, δ)` over `batch·heads`
/// problems, or over `heads` when `batch_elements_disjoint` is 1. Charge it to your ledger.
/// Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_OUT_OF_RANGE` (bad budget, zero sizes, unknown
/// enum), `_SIZE_OVERFLOW`, `_INFEASIBLE` (the composed δ reaches 1). Thread-safe; no
/// shared state.
///
/// # Safety
/// `params` readable, `out_epsilon`/`out_delta` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_attention_charge(
    params: *const dpattn_gaussian_sampling_params,
    batch: usize,
    heads: usize,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (oe, od) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        // SAFETY: readable per the caller's contract.
        let p = unsafe { read(params, "params") }?.to_core()?;
        for (name, v) in [("batch", batch), ("heads", heads)] {
            if v == 0 {
                return Err(
                    dpattn_core::Error::OutOfRange { name, value: 0.0, allowed: ">= 1" }.into()
                );
            }
        }
        let problems = if p.batch_elements_disjoint {
            heads
        } else {
            batch
                .checked_mul(heads)
                .ok_or(dpattn_core::Error::SizeOverflow { what: "batch·heads" })?
        };
        let total = basic_composition_k(p.budget, problems as u64)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            oe.write(total.epsilon().get());
            od.write(total.delta().get());
        }
        Ok(())
    })
}

/// The sensitivity bound `s` (rounded up): `2αβ√n/η` (`_PAPER_SQRT_N`) or `2αβ/η`
/// (`_TIGHT`). Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_OUT_OF_RANGE` (`n = 0`, invalid
/// domain, unknown `bound`). Thread-safe; no shared state.
///
/// # Safety
/// `domain` readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_sensitivity(
    n: usize,
    domain: *const dpattn_gaussian_sampling_domain,
    bound: u32,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: readable per the caller's contract.
        let domain = unsafe { read(domain, "domain") }?.to_core()?;
        let s = gsa::sensitivity(n, &domain, sensitivity_of(bound)?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// The allowed sensitivity level `Δ(k)` (rounded down) of `constants`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_OUT_OF_RANGE` (`k ∉ [1, 2^53]`, `ε ∉ (0, 1)`,
/// `δ ∉ (0, 0.1)`, unknown `constants`). Thread-safe; no shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_delta_threshold(
    k: u64,
    epsilon: f64,
    delta: f64,
    constants: u32,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let b = PrivacyBudget::new(epsilon, delta)?;
        let v = gsa::delta_threshold(k, b, constants_of(constants)?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Reads the common `(domain, calibration)` pair.
///
/// # Safety
/// Both pointers readable or NULL.
unsafe fn dc(
    domain: *const dpattn_gaussian_sampling_domain,
    calibration: *const dpattn_gaussian_sampling_calibration,
) -> Result<(Domain, Calibration), FfiError> {
    // SAFETY: forwarded caller contract.
    let (d, c) = unsafe { (read(domain, "domain")?, read(calibration, "calibration")?) };
    Ok((d.to_core()?, c.to_core()?))
}

/// The privacy condition (PRIV) `s < Δ(k)` for `n` tokens and `k` samples: returns
/// `DPATTN_STATUS_OK` when it holds, `DPATTN_STATUS_INFEASIBLE` (the message names the
/// failing condition PRIV-a or PRIV-b with both sides) when it does not, or
/// `_NULL_ARGUMENT` / `_OUT_OF_RANGE` for invalid parameters. Thread-safe; no shared state.
///
/// # Safety
/// `domain`, `calibration` readable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_check_privacy(
    n: usize,
    k: u64,
    domain: *const dpattn_gaussian_sampling_domain,
    epsilon: f64,
    delta: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        gsa::check_privacy(n, k, &d, PrivacyBudget::new(epsilon, delta)?, &c)?;
        Ok(())
    })
}

/// The largest private `k` (`k_max`, capped at `2^53`), or
/// `DPATTN_GAUSSIAN_SAMPLING_K_UNBOUNDED` (0) when every `k` is private (`β = 0`). Errors:
/// `DPATTN_STATUS_INFEASIBLE` when not even `k = 1` is private; `_NULL_ARGUMENT`,
/// `_OUT_OF_RANGE`. Thread-safe; no shared state.
///
/// # Safety
/// Struct pointers readable, `out_k` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_k_max(
    n: usize,
    domain: *const dpattn_gaussian_sampling_domain,
    epsilon: f64,
    delta: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out_k: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_k, "out_k")?;
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        let k = gsa::k_max(n, &d, PrivacyBudget::new(epsilon, delta)?, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(k.unwrap_or(DPATTN_GAUSSIAN_SAMPLING_K_UNBOUNDED)) };
        Ok(())
    })
}

/// The smallest `k` meeting the accuracy condition of `calibration` (`ρ(k) < 0.1ε`, or
/// `ρ(k) ≤ ε_acc/(1 + ε_acc)` decoupled) at failure probability `gamma`. Errors:
/// `DPATTN_STATUS_INFEASIBLE` if no `k ≤ 2^53` suffices; `_OUT_OF_RANGE` (for the paper
/// coupling `ε ∈ (0, 0.1)`); `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `calibration` readable, `out_k` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_k_min(
    n: usize,
    epsilon: f64,
    gamma: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out_k: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_k, "out_k")?;
        // SAFETY: readable per the caller's contract.
        let c = unsafe { read(calibration, "calibration") }?.to_core()?;
        let k = gsa::k_min(n, epsilon, gamma, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(k) };
        Ok(())
    })
}

/// The range `[k_min, k_max]` where the mechanism is both private and accurate (upper end
/// `2^53` when `β = 0`), into `*out_lo`, `*out_hi`. Errors: `DPATTN_STATUS_INFEASIBLE`
/// (empty range, named with both ends in the message), `_OUT_OF_RANGE`, `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// Struct pointers readable, out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_feasible_k(
    n: usize,
    domain: *const dpattn_gaussian_sampling_domain,
    epsilon: f64,
    delta: f64,
    gamma: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out_lo: *mut u64,
    out_hi: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let (lo, hi) = (Out::new(out_lo, "out_lo")?, Out::new(out_hi, "out_hi")?);
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        let r = gsa::feasible_k(n, &d, PrivacyBudget::new(epsilon, delta)?, gamma, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            lo.write(*r.start());
            hi.write(*r.end());
        }
        Ok(())
    })
}

/// The infimum of the private `ε` at `k` (rounded up): Theorem 4.1
/// `10·s·max(√(k ln(1/δ)), ln(1/δ))`, Def. 5.5 `s·max(√(8k ln(1/δ)), 8 ln(1/δ))`. Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (`δ ∉ (0, 0.1)`, `k`, domain), `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// Struct pointers readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_min_epsilon_for_k(
    n: usize,
    k: u64,
    domain: *const dpattn_gaussian_sampling_domain,
    delta: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        let v = gsa::min_epsilon_for_k(n, k, &d, delta, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The smallest `ε` (to about 1e-15 relative) for which a feasible `k` exists (bisection on
/// `ε`); for the paper calibration the root of the cubic of `docs/PAPERS.md` §0.3 up to the
/// rounding of `k` (0.0689072 for the example T0-A). Errors: `DPATTN_STATUS_INFEASIBLE` (none below
/// the allowed maximum), `_OUT_OF_RANGE`, `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// Struct pointers readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_min_feasible_epsilon(
    n: usize,
    domain: *const dpattn_gaussian_sampling_domain,
    delta: f64,
    gamma: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        let v = gsa::min_feasible_epsilon(n, &d, delta, gamma, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The supremum of the neighbour radius `β` private at `k` (rounded down; `domain.beta` is
/// ignored). Errors: `DPATTN_STATUS_OUT_OF_RANGE`, `_NULL_ARGUMENT`. Thread-safe; no shared
/// state.
///
/// # Safety
/// Struct pointers readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_max_beta(
    n: usize,
    k: u64,
    domain: *const dpattn_gaussian_sampling_domain,
    epsilon: f64,
    delta: f64,
    calibration: *const dpattn_gaussian_sampling_calibration,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (d, c) = unsafe { dc(domain, calibration) }?;
        let v = gsa::max_beta(n, k, &d, PrivacyBudget::new(epsilon, delta)?, &c)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The accuracy radius `ρ(k)` for `n × n` attention and failure probability `gamma`:
/// `_PAPER_NOMINAL`: `C·(u + u²)`, `u = √((n² + ln(1/γ))/k)` (not rigorous);
/// `_GAUSSIAN_SPECTRAL`: `2a + a²`, `a = (√n + √(2 ln(2/γ)))/√k` (`+∞` when `a ≥ 1`).
/// `rho_c` is `C` (ignored by the spectral model). Errors: `DPATTN_STATUS_OUT_OF_RANGE`
/// (`k`, `n = 0`, `γ ∉ (0, 1)`, `C < 1`, unknown model), `_NULL_ARGUMENT`. Thread-safe; no
/// shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_rho(
    k: u64,
    n: usize,
    gamma: f64,
    rho_model: u32,
    rho_c: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = gsa::rho(k, n, gamma, rho_model_of(rho_model, rho_c)?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The paper's accuracy bound `4(1 + ε + 2r)·r` on `‖P_A − P_B‖` (Theorem 4.1 Part 1). The
/// constant uniform output already meets it when `r < 0.1` (`docs/PAPERS.md` P0-D5): it says
/// nothing about utility. Pure arithmetic (NaN in, NaN out; NaN if it panics). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_gaussian_sampling_error_bound_paper(eps: f64, r: f64) -> f64 {
    ffi_value(f64::NAN, || gsa::error_bound_paper(eps, r))
}

/// Our `k`-dependent bound (`docs/PAPERS.md` P0-D4) `2(e^{ρ₂·r} − 1)` on `‖P_A − P_B‖_{∞→∞}`, valid
/// whenever `‖A^{-1/2}BA^{-1/2} − I‖₂ ≤ ρ₂` and `max|A_ij| ≤ r`. Pure arithmetic (NaN on a
/// caught panic). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_gaussian_sampling_error_bound_tight(rho2: f64, r: f64) -> f64 {
    ffi_value(f64::NAN, || gsa::error_bound_tight(rho2, r))
}

/// The error of the constant uniform output, `2(e^r − 1)` (`docs/PAPERS.md` P0-D5): a useful
/// release must beat it. Pure arithmetic (NaN on a caught panic). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_gaussian_sampling_uniform_baseline_bound(r: f64) -> f64 {
    ffi_value(f64::NAN, || gsa::uniform_baseline_bound(r))
}

/// Scratch (`double` elements) for `dpattn_gaussian_sampling_dp_covariance` with an `n × n`
/// input (`2n² + n` Bartlett, `2n² + 64n` literal). Errors: `DPATTN_STATUS_OUT_OF_RANGE`
/// (`n = 0`, factor-free sampler, unknown sampler), `_SIZE_OVERFLOW`, `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_dp_covariance_scratch_len(
    n: usize,
    sampler: u32,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let v = gsa::dp_covariance_scratch_len(n, sampler_of(sampler)?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// DPCovariance (Algorithm 2) on a positive definite `Σ` (`n × n`, row stride
/// `sigma_row_stride`; only its lower triangle is factorised): `B = (1/k)·Σᵢ gᵢgᵢᵀ`,
/// `gᵢ ~ N(0, Σ)` into `out` (`n × n`, exactly symmetric), from keyed stream
/// `(key, stream)`, problem index `problem`. **Not a DP release by itself**: Theorem 5.9
/// makes it `(ε, δ)`-DP only when `Σ = XXᵀ` of data in a domain whose sensitivity is at
/// most `Δ(k)` (use `dpattn_gaussian_sampling_attention`, which checks that). Errors
/// (`out` untouched): `DPATTN_STATUS_NULL_ARGUMENT`, `_MISALIGNED`, `_SIZE_OVERFLOW`,
/// `_ALIASING`, `_BUFFER_TOO_SHORT`, `_SHAPE_MISMATCH` (non-square `Σ`, wrong `out`),
/// `_NON_FINITE`, `_DOMAIN_VIOLATION` (`Σ` not positive definite; never regularised),
/// `_OUT_OF_RANGE` (`k ∉ [1, 2^53]`, Bartlett with `k < n`, factor-free or unknown sampler),
/// `_SCRATCH_TOO_SMALL`. Thread-safe; no shared state. Allocation-free.
///
/// # Safety
/// Every pointer NULL or valid for its length (`out`, `scratch` writable).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_dp_covariance(
    out: *mut f64,
    out_len: usize,
    out_rows: usize,
    out_cols: usize,
    out_row_stride: usize,
    sigma: *const f64,
    sigma_len: usize,
    sigma_rows: usize,
    sigma_cols: usize,
    sigma_row_stride: usize,
    k: u64,
    sampler: u32,
    key: *const dpattn_key,
    stream: u64,
    problem: u64,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: readable per the caller's contract.
        let key = unsafe { read(key, "key") }?.to_core();
        let sampler = sampler_of(sampler)?;
        // SAFETY: forwarded caller contract.
        let s = unsafe {
            mat_ref(sigma, sigma_len, sigma_rows, sigma_cols, sigma_row_stride, "sigma")
        }?;
        let mut bufs = Buffers::default();
        bufs.input("sigma", sigma, s.as_slice().len());
        bufs.output("out", out, mat_extent(out_len, out_rows, out_cols, out_row_stride));
        bufs.output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        // SAFETY: writable per the caller's contract; only the extent proven disjoint from
        // every other buffer is borrowed.
        let (o, sc) = unsafe {
            (
                slice_mut(out, mat_extent(out_len, out_rows, out_cols, out_row_stride), "out")?,
                slice_mut(scratch, scratch_len, "scratch")?,
            )
        };
        let o = MatMut::new(o, out_rows, out_cols, out_row_stride)?;
        let st = KeyedStream::new(&key, stream);
        gsa::dp_covariance(o, s, k, sampler, &st, problem, sc)?;
        Ok(())
    })
}

/// Scratch (`double` elements) for `dpattn_gaussian_sampling_dp_covariance_from_data` with
/// an `n × d` input. Errors: `DPATTN_STATUS_OUT_OF_RANGE` (zero size), `_SIZE_OVERFLOW`,
/// `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_dp_covariance_from_data_scratch_len(
    n: usize,
    d: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let v = gsa::dp_covariance_from_data_scratch_len(n, d)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// DPCovariance on `Σ = XXᵀ` by the factor-free route `gᵢ = X·zᵢ` (`docs/PAPERS.md` P0-S2; `X` is
/// `x_rows × x_cols` of dtype `x_dtype`), the same law as `dp_covariance` on `XXᵀ`, into
/// `out` (`n × n`). **No privacy check** (see `dpattn_gaussian_sampling_dp_covariance`).
/// Errors (`out` untouched): `DPATTN_STATUS_NULL_ARGUMENT`, `_MISALIGNED`, `_ALIASING`,
/// `_BUFFER_TOO_SHORT`, `_SHAPE_MISMATCH`, `_NON_FINITE`, `_OUT_OF_RANGE` (`k`, zero sizes,
/// unknown dtype), `_SCRATCH_TOO_SMALL`, `_SIZE_OVERFLOW`. Thread-safe; no shared state.
/// Allocation-free.
///
/// # Safety
/// Every pointer NULL or valid for its length (`x` holds `x_len` elements of `x_dtype`).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_dp_covariance_from_data(
    out: *mut f64,
    out_len: usize,
    out_rows: usize,
    out_cols: usize,
    out_row_stride: usize,
    x: *const c_void,
    x_len: usize,
    x_dtype: dpattn_dtype,
    x_rows: usize,
    x_cols: usize,
    x_row_stride: usize,
    k: u64,
    key: *const dpattn_key,
    stream: u64,
    problem: u64,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: readable per the caller's contract.
        let key = unsafe { read(key, "key") }?.to_core();
        with_dtype!(x_dtype, "x_dtype", |T| {
            let xp = x.cast::<T>();
            // SAFETY: forwarded caller contract.
            let xm = unsafe { mat_ref(xp, x_len, x_rows, x_cols, x_row_stride, "x") }?;
            let mut bufs = Buffers::default();
            bufs.input("x", xp, xm.as_slice().len());
            bufs.output("out", out, mat_extent(out_len, out_rows, out_cols, out_row_stride));
            bufs.output("scratch", scratch, scratch_len);
            bufs.disjoint()?;
            // SAFETY: writable per the caller's contract; disjoint from every other buffer.
            let (o, sc) = unsafe {
                (
                    slice_mut(out, mat_extent(out_len, out_rows, out_cols, out_row_stride), "out")?,
                    slice_mut(scratch, scratch_len, "scratch")?,
                )
            };
            let o = MatMut::new(o, out_rows, out_cols, out_row_stride)?;
            let st = KeyedStream::new(&key, stream);
            gsa::dp_covariance_from_data(o, xm, k, &st, problem, sc)?;
        });
        Ok(())
    })
}

/// Scratch (`double` elements) for `dpattn_gaussian_sampling_measure_domain`: `d + n²`.
/// Errors: `DPATTN_STATUS_OUT_OF_RANGE` (zero size), `_SIZE_OVERFLOW`, `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_measure_domain_scratch_len(
    n: usize,
    d: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        if n == 0 || d == 0 {
            return Err(dpattn_core::Error::OutOfRange {
                name: "n, d",
                value: 0.0,
                allowed: ">= 1",
            }
            .into());
        }
        let v = n
            .checked_mul(n)
            .and_then(|nn| nn.checked_add(d))
            .ok_or(dpattn_core::Error::SizeOverflow { what: "d + n²" })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Measures the domain of one private `X` (`n × d`, dtype `x_dtype`) **for the data holder**:
/// `α̂ = max‖x_c‖`, `η̂ = λ_min(XXᵀ)` (cyclic Jacobi), `r̂ = max (XXᵀ)_ii`. For auditing data
/// against a declared domain; **never** to choose the domain of a release (the calibration
/// would then depend on private data, breaking DP). Errors (out-params untouched):
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_MISALIGNED`, `_ALIASING`, `_BUFFER_TOO_SHORT`,
/// `_OUT_OF_RANGE` (zero size, unknown dtype), `_NON_FINITE`, `_SCRATCH_TOO_SMALL`.
/// Thread-safe; no shared state. Allocation-free.
///
/// # Safety
/// Every pointer NULL or valid for its length; out-params writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_gaussian_sampling_measure_domain(
    x: *const c_void,
    x_len: usize,
    x_dtype: dpattn_dtype,
    n: usize,
    d: usize,
    x_row_stride: usize,
    scratch: *mut f64,
    scratch_len: usize,
    out_alpha: *mut f64,
    out_eta: *mut f64,
    out_r: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let oa = Out::new(out_alpha, "out_alpha")?;
        let oe = Out::new(out_eta, "out_eta")?;
        let or = Out::new(out_r, "out_r")?;
        let (a, e, r) = with_dtype!(x_dtype, "x_dtype", |T| {
            let xp = x.cast::<T>();
            // SAFETY: forwarded caller contract.
            let xm = unsafe { mat_ref(xp, x_len, n, d, x_row_stride, "x") }?;
            let mut bufs = Buffers::default();
            bufs.input("x", xp, xm.as_slice().len()).output("scratch", scratch, scratch_len);
            bufs.disjoint()?;
            // SAFETY: writable per the caller's contract; disjoint from `x`.
            let sc = unsafe { slice_mut(scratch, scratch_len, "scratch") }?;
            measure::<T>(xm, sc)?
        });
        // SAFETY: checked non-NULL; writable.
        unsafe {
            oa.write(a);
            oe.write(e);
            or.write(r);
        }
        Ok(())
    })
}

fn measure<T: HasDtype>(x: MatRef<'_, T>, sc: &mut [f64]) -> Result<(f64, f64, f64), FfiError> {
    Ok(gsa::measure_domain(x, sc)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use crate::ledger::dpattn_ledger;
    use crate::session::{dpattn_session, session_testing as ss};
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::Draw;
    use dpattn_core::{BatchedMut, BatchedRef, Layout4};

    fn dom() -> dpattn_gaussian_sampling_domain {
        dpattn_gaussian_sampling_domain { alpha: (0.2f64 / 4096.0).sqrt(), eta: 0.05, beta: 5e-6 }
    }
    fn cal() -> dpattn_gaussian_sampling_calibration {
        let mut c = std::mem::MaybeUninit::uninit();
        // SAFETY: valid out pointer.
        let st = unsafe { dpattn_gaussian_sampling_calibration_default(c.as_mut_ptr()) };
        assert_eq!(st, dpattn_status::Ok);
        // SAFETY: initialised on success.
        unsafe { c.assume_init() }
    }

    #[test]
    fn calibration_matches_core_and_table_t0_a() {
        let (mut lo, mut hi) = (0u64, 0u64);
        // SAFETY: valid pointers.
        let s = unsafe {
            dpattn_gaussian_sampling_feasible_k(
                4,
                &dom(),
                0.09,
                1e-6,
                0.01,
                &cal(),
                &mut lo,
                &mut hi,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        assert_eq!((lo, hi), (258_944, 750_460));
        let mut v = 0.0;
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(
                dpattn_gaussian_sampling_sensitivity(4, &dom(), 0, &mut v),
                dpattn_status::Ok
            );
        }
        let core = gsa::sensitivity(4, &dom().to_core().unwrap(), SensitivityBound::PaperSqrtN);
        assert_eq!(v.to_bits(), core.unwrap().to_bits());
        let mut r = 0.0;
        // SAFETY: valid pointers.
        unsafe { dpattn_gaussian_sampling_rho(500_000, 4, 0.01, 0, 1.0, &mut r) };
        assert!((r - 0.00646074).abs() < 1e-8);
        // β = 0: unbounded.
        let mut k = 5u64;
        let d0 = dpattn_gaussian_sampling_domain { beta: 0.0, ..dom() };
        // SAFETY: valid pointers.
        let s = unsafe { dpattn_gaussian_sampling_k_max(4, &d0, 0.09, 1e-6, &cal(), &mut k) };
        assert_eq!((s, k), (dpattn_status::Ok, DPATTN_GAUSSIAN_SAMPLING_K_UNBOUNDED));
    }

    #[test]
    fn calibration_errors_leave_outputs_untouched() {
        let mut v = 7.0;
        // SAFETY: pointers valid or NULL (rejected).
        unsafe {
            assert_eq!(
                dpattn_gaussian_sampling_delta_threshold(10, 0.5, 0.2, 0, &mut v),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("delta"));
            assert_eq!(
                dpattn_gaussian_sampling_delta_threshold(10, 0.0, 1e-6, 0, &mut v),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("epsilon"));
            assert_eq!(
                dpattn_gaussian_sampling_delta_threshold(10, 0.5, 1e-6, 9, &mut v),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("constants"));
            assert_eq!(
                dpattn_gaussian_sampling_sensitivity(4, std::ptr::null(), 0, &mut v),
                dpattn_status::NullArgument
            );
            assert!(last_error_string().contains("domain"));
            assert_eq!(
                dpattn_gaussian_sampling_rho(10, 4, f64::NAN, 0, 1.0, &mut v),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("gamma"));
            let mut c = cal();
            c.coupling = 5;
            assert_eq!(
                dpattn_gaussian_sampling_check_privacy(4, 10, &dom(), 0.09, 1e-6, &c),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("coupling"));
            assert_eq!(
                dpattn_gaussian_sampling_check_privacy(4, 10_000_000, &dom(), 0.09, 1e-6, &cal()),
                dpattn_status::Infeasible
            );
        }
        assert_eq!(v, 7.0);
    }

    fn x_hadamard_like(n: usize, d: usize) -> Vec<f64> {
        // Rows of a Sylvester–Hadamard matrix scaled so XXᵀ = 0.05·I.
        let s = (0.05 / d as f64).sqrt();
        (0..n * d)
            .map(|i| if ((i / d) & (i % d)).count_ones().is_multiple_of(2) { s } else { -s })
            .collect()
    }

    #[test]
    fn mechanism_is_bit_identical_to_core() {
        let (n, d) = (4usize, 64usize);
        let x = x_hadamard_like(n, d);
        let dom = dpattn_gaussian_sampling_domain { alpha: 0.06, eta: 0.05, beta: 1e-6 };
        let mut p = std::mem::MaybeUninit::uninit();
        // SAFETY: valid pointer.
        unsafe { dpattn_gaussian_sampling_params_default(p.as_mut_ptr()) };
        // SAFETY: initialised.
        let mut p = unsafe { p.assume_init() };
        p.epsilon = 0.09;
        p.delta = 1e-6;
        p.domain = dom;
        p.k = 100_000;
        p.noise_mode = crate::noise_mode::DPATTN_NOISE_MODE_UNSAFE_FLOAT;
        let mut len = 0;
        // SAFETY: valid pointer.
        unsafe { dpattn_gaussian_sampling_attention_scratch_len(n, d, 0, 0, &mut len) };
        let shape = [1, 1, n, n];
        let st = Layout4::contiguous(shape).unwrap().strides();
        let (mut b, mut pm, mut sc) = (vec![0.0f64; n * n], vec![0.0f64; n * n], vec![0.0; len]);
        let xs = [1, 1, n, d];
        let xt = dpattn_tensor4 {
            data: x.as_ptr().cast(),
            len: x.len(),
            dtype: crate::DPATTN_DTYPE_F64,
            shape: xs,
            strides: Layout4::contiguous(xs).unwrap().strides(),
        };
        let bt = dpattn_tensor4_mut {
            data: b.as_mut_ptr().cast(),
            len: n * n,
            dtype: 1,
            shape,
            strides: st,
        };
        let pt = dpattn_tensor4_mut {
            data: pm.as_mut_ptr().cast(),
            len: n * n,
            dtype: 1,
            shape,
            strides: st,
        };
        // Replay sessions of master key [7; 32] at this epoch, next stream id 3; the core
        // release is given the key such a session draws with.
        const EPOCH: u64 = 0xE0C4;
        let draw_key = ss::drawing_key(7, EPOCH);
        let session = ss::replay(7, EPOCH, 3, std::ptr::null_mut());
        let mut rep =
            dpattn_gaussian_sampling_report { alpha_hat: -1.0, r_hat: -1.0, clipped_columns: 9 };
        // SAFETY: all buffers valid and disjoint.
        let s = unsafe {
            dpattn_gaussian_sampling_attention(
                &bt,
                &pt,
                &xt,
                &p,
                session,
                sc.as_mut_ptr(),
                len,
                &mut rep,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        assert_eq!(ss::position(session), (EPOCH, 3 + gsa::STREAMS));
        let (mut b2, mut p2) = (vec![0.0; n * n], vec![0.0; n * n]);
        let r2 = gsa::gaussian_sampling_attention_keyed(
            BatchedMut::contiguous(&mut b2, shape).unwrap(),
            BatchedMut::contiguous(&mut p2, shape).unwrap(),
            BatchedRef::contiguous(&x, xs).unwrap(),
            &p.to_core().unwrap(),
            Draw { key: &draw_key, stream: 3 },
            None,
            &mut sc,
        )
        .unwrap();
        assert!(b.iter().zip(&b2).all(|(a, c)| a.to_bits() == c.to_bits()));
        assert!(pm.iter().zip(&p2).all(|(a, c)| a.to_bits() == c.to_bits()));
        assert_eq!(rep.alpha_hat.to_bits(), r2.alpha_hat.to_bits());

        // Error paths: outputs untouched.
        let before = b.clone();
        let mut rep2 = rep;
        rep2.clipped_columns = 77;
        let call = |p: &dpattn_gaussian_sampling_params,
                    sc: &mut [f64],
                    bt: &dpattn_tensor4_mut,
                    rep: &mut dpattn_gaussian_sampling_report| {
            // SAFETY: all buffers valid.
            unsafe {
                dpattn_gaussian_sampling_attention(
                    bt,
                    &pt,
                    &xt,
                    p,
                    session,
                    sc.as_mut_ptr(),
                    sc.len(),
                    rep,
                )
            }
        };
        let mut q = p;
        q.epsilon = f64::NAN;
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("epsilon"));
        q = p;
        q.delta = 1.0;
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("delta"));
        q = p;
        q.sampler = 3;
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("sampler"));
        q = p;
        q.batch_elements_disjoint = 2;
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::OutOfRange);
        q = p;
        q.noise_mode = 3;
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("noise_mode"));
        q = p;
        q.noise_mode = crate::noise_mode::DPATTN_NOISE_MODE_CONSTANT_TIME; // no such path
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::Unsupported);
        assert!(last_error_string().contains("ConstantTime"));
        q = p;
        q.noise_mode = crate::noise_mode::DPATTN_NOISE_MODE_EXACT; // no exact form: refused
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::Unsupported);
        assert!(last_error_string().contains("floating-point-safe"));
        q = p;
        q.domain.eta = 0.055; // private λ_min = 0.05 < η
        assert_eq!(call(&q, &mut sc, &bt, &mut rep2), dpattn_status::DomainViolation);
        assert_eq!(call(&p, &mut sc[..len - 1], &bt, &mut rep2), dpattn_status::ScratchTooSmall);
        let mut wrong = bt;
        wrong.dtype = crate::DPATTN_DTYPE_F32;
        assert_eq!(call(&p, &mut sc, &wrong, &mut rep2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("out_b"));
        let mut alias = bt;
        alias.data = pm.as_mut_ptr().cast();
        assert_eq!(call(&p, &mut sc, &alias, &mut rep2), dpattn_status::Aliasing);
        // SAFETY: NULL out_report rejected before any access.
        let s = unsafe {
            dpattn_gaussian_sampling_attention(
                &bt,
                &pt,
                &xt,
                &p,
                session,
                sc.as_mut_ptr(),
                len,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(s, dpattn_status::NullArgument);
        assert!(last_error_string().contains("out_report"));
        assert_eq!(b, before);
        assert_eq!(rep2.clipped_columns, 77);

        let mut rep_ok = rep2;
        assert_eq!(call(&p, &mut sc, &bt, &mut rep_ok), dpattn_status::Ok); // still usable
        ss::free(session);
        b.fill(5.0);
        assert_eq!(call(&p, &mut sc, &bt, &mut rep2), dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("session"));
        assert!(b.iter().all(|&v| v == 5.0));
        let call_s = |p: &dpattn_gaussian_sampling_params,
                      sc: &mut [f64],
                      session: *mut dpattn_session,
                      rep: &mut dpattn_gaussian_sampling_report| {
            // SAFETY: all buffers valid; `session` a (possibly freed) handle.
            unsafe {
                dpattn_gaussian_sampling_attention(
                    &bt,
                    &pt,
                    &xt,
                    p,
                    session,
                    sc.as_mut_ptr(),
                    sc.len(),
                    rep,
                )
            }
        };
        // With a ledger: the same bits and the same charge as the core with one (a replay
        // session at stream 3 charging `ledger`).
        let call_l = |p: &dpattn_gaussian_sampling_params,
                      sc: &mut [f64],
                      ledger: *mut dpattn_ledger,
                      rep: &mut dpattn_gaussian_sampling_report| {
            let s = ss::replay(7, EPOCH, 3, ledger);
            let st = call_s(p, sc, s, rep);
            ss::free(s);
            st
        };
        for kind in [Kind::Approx(1.0, 1e-5), Kind::Zcdp(10.0), Kind::Rdp(10.0, 1e-5)] {
            let (h, mut cl) = lt::pair(PrivacyUnit::FeatureColumn, kind);
            b.fill(5.0);
            let mut rep3 = rep2;
            let st = call_l(&p, &mut sc, h, &mut rep3);
            let (mut b2, mut p2) = (vec![5.0; n * n], vec![0.0; n * n]);
            let r = gsa::gaussian_sampling_attention_keyed(
                BatchedMut::contiguous(&mut b2, shape).unwrap(),
                BatchedMut::contiguous(&mut p2, shape).unwrap(),
                BatchedRef::contiguous(&x, xs).unwrap(),
                &p.to_core().unwrap(),
                Draw { key: &draw_key, stream: 3 },
                Some(&mut cl),
                &mut vec![0.0; len],
            );
            if matches!(kind, Kind::Approx(..)) {
                assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
                assert_eq!(rep3.alpha_hat.to_bits(), r.unwrap().alpha_hat.to_bits());
                assert!(lt::nonzero(cl.spent()));
                let (mut e, mut dl) = (0.0, 0.0);
                // SAFETY: valid locals.
                let s =
                    unsafe { dpattn_gaussian_sampling_attention_charge(&p, 1, 1, &mut e, &mut dl) };
                assert_eq!(s, dpattn_status::Ok);
                let (spent, _) = lt::state(h);
                assert_eq!((spent.epsilon, spent.delta), (e, dl));
            } else {
                // A δ > 0 charge: only approximate-DP ledgers take it.
                assert_eq!(st, dpattn_status::OutOfRange, "{kind:?}");
                assert_eq!(st, dpattn_status::of(&r.unwrap_err()));
                assert_eq!(rep3.clipped_columns, 77);
                lt::assert_untouched(h);
            }
            assert!(b.iter().zip(&b2).all(|(a, c)| a.to_bits() == c.to_bits()));
            lt::assert_same(h, &cl);
            lt::free(h);
        }
        // Refused over budget, a domain violation (charges nothing), a ledger for another
        // unit, a session of a freed ledger: outputs untouched.
        b.fill(5.0);
        let (h, _) = lt::pair(PrivacyUnit::FeatureColumn, Kind::Approx(0.05, 1e-5));
        assert_eq!(call_l(&p, &mut sc, h, &mut rep2), dpattn_status::Infeasible);
        let mut q = p;
        q.domain.eta = 0.055;
        assert_eq!(call_l(&q, &mut sc, h, &mut rep2), dpattn_status::DomainViolation);
        lt::assert_untouched(h);
        lt::free(h);
        for unit in [PrivacyUnit::TOKEN, PrivacyUnit::Sequence] {
            let (h, _) = lt::pair(unit, Kind::Approx(100.0, 1e-2));
            assert_eq!(call_l(&p, &mut sc, h, &mut rep2), dpattn_status::UnitMismatch);
            lt::assert_untouched(h);
            lt::free(h);
        }
        let mut s = std::ptr::null_mut();
        let key = dpattn_key { bytes: [7; 32] };
        // SAFETY: live locals; a freed ledger handle is detected.
        let st = unsafe {
            crate::session::dpattn_session_new_for_replay(&key, EPOCH, 3, lt::freed(), &mut s)
        };
        assert_eq!(st, dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("ledger"));
        assert!(s.is_null());
        assert!(b.iter().all(|&v| v == 5.0));
        assert_eq!(rep2.clipped_columns, 77);
    }

    #[test]
    fn covariance_and_measure_match_core() {
        let sigma = [2.0, 0.5, 0.5, 1.0];
        let mut len = 0;
        // SAFETY: valid pointer.
        unsafe { dpattn_gaussian_sampling_dp_covariance_scratch_len(2, 0, &mut len) };
        let (mut out, mut sc) = ([0.0; 4], vec![0.0; len]);
        let key = dpattn_key { bytes: [1; 32] };
        // SAFETY: valid buffers.
        let s = unsafe {
            dpattn_gaussian_sampling_dp_covariance(
                out.as_mut_ptr(),
                4,
                2,
                2,
                2,
                sigma.as_ptr(),
                4,
                2,
                2,
                2,
                1000,
                0,
                &key,
                0,
                5,
                sc.as_mut_ptr(),
                len,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        let mut want = [0.0; 4];
        gsa::dp_covariance(
            MatMut::from_row_major(&mut want, 2, 2).unwrap(),
            MatRef::from_row_major(&sigma, 2, 2).unwrap(),
            1000,
            Sampler::Bartlett,
            &KeyedStream::new(&NoiseKey::for_replay([1; 32]), 0),
            5,
            &mut sc,
        )
        .unwrap();
        assert_eq!(out.map(f64::to_bits), want.map(f64::to_bits));
        // Not positive definite: domain violation; out untouched.
        let bad = [1.0, 2.0, 2.0, 1.0];
        // SAFETY: valid buffers.
        let s = unsafe {
            dpattn_gaussian_sampling_dp_covariance(
                out.as_mut_ptr(),
                4,
                2,
                2,
                2,
                bad.as_ptr(),
                4,
                2,
                2,
                2,
                1000,
                0,
                &key,
                0,
                5,
                sc.as_mut_ptr(),
                len,
            )
        };
        assert_eq!(s, dpattn_status::DomainViolation);
        assert_eq!(out.map(f64::to_bits), want.map(f64::to_bits));
        // In place (out = sigma) is aliasing.
        let mut inplace = sigma;
        let p = inplace.as_mut_ptr();
        // SAFETY: aliasing is detected before any view is made.
        let s = unsafe {
            dpattn_gaussian_sampling_dp_covariance(
                p,
                4,
                2,
                2,
                2,
                p,
                4,
                2,
                2,
                2,
                1000,
                0,
                &key,
                0,
                5,
                sc.as_mut_ptr(),
                len,
            )
        };
        assert_eq!(s, dpattn_status::Aliasing);

        let x = [3.0f32, 0.0, 0.0, 2.0];
        let (mut a, mut e, mut r) = (0.0, 0.0, 0.0);
        let mut sc = [0.0; 6];
        // SAFETY: valid buffers.
        let s = unsafe {
            dpattn_gaussian_sampling_measure_domain(
                x.as_ptr().cast(),
                4,
                0,
                2,
                2,
                2,
                sc.as_mut_ptr(),
                6,
                &mut a,
                &mut e,
                &mut r,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        assert_eq!((a, e, r), (3.0, 4.0, 9.0));
        // SAFETY: valid buffers; scratch too small.
        let s = unsafe {
            dpattn_gaussian_sampling_measure_domain(
                x.as_ptr().cast(),
                4,
                0,
                2,
                2,
                2,
                sc.as_mut_ptr(),
                5,
                &mut a,
                &mut e,
                &mut r,
            )
        };
        assert_eq!(s, dpattn_status::ScratchTooSmall);
        // SAFETY: unknown dtype rejected before reading.
        let s = unsafe {
            dpattn_gaussian_sampling_measure_domain(
                x.as_ptr().cast(),
                4,
                9,
                2,
                2,
                2,
                sc.as_mut_ptr(),
                6,
                &mut a,
                &mut e,
                &mut r,
            )
        };
        assert_eq!(s, dpattn_status::OutOfRange);
        assert!(last_error_string().contains("x_dtype"));
    }
}
