//! NoisyHead from C (paper 004, `dpattn_core::noisy_head`; `docs/PAPERS.md` §4).
//!
//! Every buffer is `double`, row-major, and passed as `(pointer, length)`; a length must be
//! exactly what the shapes imply (the core checks with `DPATTN_STATUS_SHAPE_MISMATCH`).
//! Prompts and features are described by small structs of pointers
//! (`dpattn_noisy_head_prompts`, `dpattn_noisy_head_features`) that are read-only.
//!
//! Not wrapped: `corrupt_prompt` (an in-place experiment helper; trivial to write in C).
//! `dpattn_noisy_head` draws its noise from a `dpattn_session` and charges the session's
//! ledger (privacy unit `DPATTN_UNIT_PROMPT`).

use std::ffi::c_void;

use dpattn_core::noisy_head::{
    self as nh, Accounting, Features, Form, GForm, NoisyHeadParams, Prompts, Radii, RidgeSolver,
    schedule,
};
use dpattn_core::{Error, MatMut, MatRef, NoiseMode, PrivacyBudget};
// The presets and the simulation helpers are reproduction tools (crate `dpattn-paper`).
use dpattn_paper::noisy_head::{self as paper, presets};

use crate::args::{Buffers, Out, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, unknown};
use crate::session::{dpattn_session, with_session};
use crate::status::dpattn_status;
use crate::tensor::dpattn_key;

/// `accounting`: Algorithm 1 as printed: `T` classical Gaussian steps at `(ε/T, δ/T)`,
/// basic composition (Theorem 3.2); requires `ε/T < 1`. Every paper number uses this.
pub const DPATTN_NOISY_HEAD_ACCOUNTING_PAPER: u32 = 0;
/// `accounting`: our extension, not the paper's (`docs/PAPERS.md` P4-26): the `T` steps composed in
/// zCDP with the largest `ρ` that converts to `(ε, δ)`; same guarantee, ≈9× less noise.
pub const DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP: u32 = 1;
/// `form`: the data gradient every step, `4ND²` flops per step.
pub const DPATTN_NOISY_HEAD_FORM_STREAMING: u32 = 0;
/// `form`: precompute the `D⁴` Gram matrix once, `2D⁴` flops per step.
pub const DPATTN_NOISY_HEAD_FORM_GRAM: u32 = 1;
/// `gform`: eq. (4.1), `G = (C/√L)(1 + √(ln(N/κ))/D)`.
pub const DPATTN_NOISY_HEAD_GFORM_THEOREM41: u32 = 0;
/// `gform`: proof (A.11), `G = (C/√L)(1 + (ln(N/κ)/D²)^{1/4})` (the experiments' choice).
pub const DPATTN_NOISY_HEAD_GFORM_PROOF: u32 = 1;
/// `solver`: Cholesky of the normal equations (honest data).
pub const DPATTN_NOISY_HEAD_RIDGE_CHOLESKY: u32 = 0;
/// `solver`: Householder QR of `[Z; √(λN)·I]` (adversarial data, `docs/PAPERS.md` P4-21).
pub const DPATTN_NOISY_HEAD_RIDGE_QR: u32 = 1;

/// All public inputs of Algorithm 1 (`NoisyHeadParams`, `docs/PAPERS.md` §4.4). Fill with a
/// preset (`dpattn_noisy_head_params_low_dim`, `_high_dim`, `_early_stopping`,
/// `_robustness`) or by hand, then `dpattn_noisy_head_validate`. Nothing here may depend
/// on the private prompts.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_noisy_head_params {
    /// Token dimension `D` (`Γ` is `D × D`).
    pub d: usize,
    /// Prompt length `L` (labelled context tokens per prompt).
    pub l: usize,
    /// Number of training prompts `N` (public; neighbours replace one prompt).
    pub n: usize,
    /// Ridge parameter `λ ≥ 0`.
    pub lambda: f64,
    /// Step size `η0 > 0`, `η0 < 2/(2λ + G²)`.
    pub eta0: f64,
    /// Iterations `T ≥ 1`, fixed before the run.
    pub iters: u32,
    /// Label clipping bound `C > 0`.
    pub clip_c: f64,
    /// Projection radius `G > 0` of each `Z_k`.
    pub proj_g: f64,
    /// Projection radius `R > 0` of the iterate `Γ`.
    pub proj_r: f64,
    /// Noise scale `σ ≥ σ_min = 2G(C + RG)`.
    pub sigma: f64,
    /// ε of the whole release, `> 0`.
    pub epsilon: f64,
    /// δ of the whole release, in `(0, 1)`.
    pub delta: f64,
    /// `DPATTN_NOISY_HEAD_ACCOUNTING_*`.
    pub accounting: u32,
}

/// The radii of Theorem 4.1 (eq. (4.1)).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_noisy_head_radii {
    /// Label clip `C = √(2ν ln(NL/κ))`, `ν = 1 + τ²`.
    pub c: f64,
    /// Projection radius of each `Z_k` (per `gform`).
    pub g: f64,
    /// Test-prompt radius `G0`.
    pub g0: f64,
    /// Iterate radius `R`.
    pub r: f64,
}

/// Data-independent soft diagnostics of a parameter set (`docs/PAPERS.md` §4.8); never an error.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_noisy_head_diagnostics {
    /// 1 if `η0` lies in Theorem 4.1's interval `(λ/(100(2λ+G²)²), λ/(2λ+G²)²)`, else 0.
    pub eta0_in_theorem_interval: u32,
    /// Theorem 4.1's upper end `λ/(2λ+G²)²`.
    pub eta0_theorem_upper: f64,
    /// The contraction factor `1 − 2λη0` of the noiseless map.
    pub contraction: f64,
}

/// `N` prompts in flat row-major buffers: contexts `ctx_x` (`N·L·D`), context labels
/// `ctx_y` (`N·L`), queries `query_x` (`N·D`), query targets `query_y` (`N`). Read-only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_noisy_head_prompts {
    /// `N`.
    pub n: usize,
    /// `L`.
    pub l: usize,
    /// `D`.
    pub d: usize,
    /// Context tokens.
    pub ctx_x: *const f64,
    /// Length of `ctx_x`.
    pub ctx_x_len: usize,
    /// Context labels.
    pub ctx_y: *const f64,
    /// Length of `ctx_y`.
    pub ctx_y_len: usize,
    /// Query tokens.
    pub query_x: *const f64,
    /// Length of `query_x`.
    pub query_x_len: usize,
    /// Query targets.
    pub query_y: *const f64,
    /// Length of `query_y`.
    pub query_y_len: usize,
}

/// Rank-one summaries `Z_k = u_k v_kᵀ` and targets `t_k` of `N` prompts (`u`, `v`: `N·D`
/// row-major; `t`: `N`). Read-only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_noisy_head_features {
    /// `N`.
    pub n: usize,
    /// `D`.
    pub d: usize,
    /// Query factors.
    pub u: *const f64,
    /// Length of `u`.
    pub u_len: usize,
    /// Context summaries.
    pub v: *const f64,
    /// Length of `v`.
    pub v_len: usize,
    /// Targets.
    pub t: *const f64,
    /// Length of `t`.
    pub t_len: usize,
}

/// A per-iteration callback of `dpattn_noisy_head_train_nonprivate`: `t` (1-based) and the
/// `len = D²` entries of `Γ^t` (valid only during the call). It must not unwind (no C++
/// exceptions, no longjmp) and must not touch the call's buffers.
pub type dpattn_noisy_head_iter_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, t: u32, gamma: *const f64, len: usize)>;

fn form(v: u32) -> Result<Form, FfiError> {
    match v {
        DPATTN_NOISY_HEAD_FORM_STREAMING => Ok(Form::Streaming),
        DPATTN_NOISY_HEAD_FORM_GRAM => Ok(Form::Gram),
        _ => Err(unknown("form", v, "DPATTN_NOISY_HEAD_FORM_STREAMING (0), _GRAM (1)")),
    }
}

impl dpattn_noisy_head_params {
    fn to_core(self) -> Result<NoisyHeadParams, FfiError> {
        let accounting = match self.accounting {
            DPATTN_NOISY_HEAD_ACCOUNTING_PAPER => Accounting::Paper,
            DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP => Accounting::Zcdp,
            v => {
                return Err(unknown(
                    "accounting",
                    v,
                    "DPATTN_NOISY_HEAD_ACCOUNTING_PAPER (0), _ZCDP (1)",
                ));
            }
        };
        Ok(NoisyHeadParams {
            d: self.d,
            l: self.l,
            n: self.n,
            lambda: self.lambda,
            eta0: self.eta0,
            iters: self.iters,
            clip_c: self.clip_c,
            proj_g: self.proj_g,
            proj_r: self.proj_r,
            sigma: self.sigma,
            budget: PrivacyBudget::new(self.epsilon, self.delta)?,
            accounting,
            noise_mode: NoiseMode::Exact,
        })
    }

    fn from_core(p: &NoisyHeadParams) -> Self {
        Self {
            d: p.d,
            l: p.l,
            n: p.n,
            lambda: p.lambda,
            eta0: p.eta0,
            iters: p.iters,
            clip_c: p.clip_c,
            proj_g: p.proj_g,
            proj_r: p.proj_r,
            sigma: p.sigma,
            epsilon: p.budget.epsilon().get(),
            delta: p.budget.delta().get(),
            accounting: match p.accounting {
                Accounting::Paper => DPATTN_NOISY_HEAD_ACCOUNTING_PAPER,
                Accounting::Zcdp => DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP,
            },
        }
    }
}

/// # Safety
/// `p` NULL or readable.
unsafe fn params_arg(p: *const dpattn_noisy_head_params) -> Result<NoisyHeadParams, FfiError> {
    // SAFETY: forwarded caller contract.
    unsafe { read(p, "params") }?.to_core()
}

/// Reads a prompts descriptor and records its buffers as inputs.
///
/// # Safety
/// `p` NULL or readable; its pointers valid for their lengths for `'a`, unwritten.
unsafe fn prompts_arg<'a>(
    p: *const dpattn_noisy_head_prompts,
    bufs: &mut Buffers,
) -> Result<Prompts<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { read(p, "prompts") }?;
    // SAFETY: forwarded caller contract (each pointer valid for its length).
    let (x, y, q, t) = unsafe {
        (
            slice(p.ctx_x, p.ctx_x_len, "prompts.ctx_x")?,
            slice(p.ctx_y, p.ctx_y_len, "prompts.ctx_y")?,
            slice(p.query_x, p.query_x_len, "prompts.query_x")?,
            slice(p.query_y, p.query_y_len, "prompts.query_y")?,
        )
    };
    bufs.input("prompts.ctx_x", p.ctx_x, x.len())
        .input("prompts.ctx_y", p.ctx_y, y.len())
        .input("prompts.query_x", p.query_x, q.len())
        .input("prompts.query_y", p.query_y, t.len());
    Ok(Prompts::new(p.n, p.l, p.d, x, y, q, t)?)
}

/// Reads a features descriptor and records its buffers as inputs.
///
/// # Safety
/// As [`prompts_arg`].
unsafe fn features_arg<'a>(
    f: *const dpattn_noisy_head_features,
    name: &'static str,
    bufs: &mut Buffers,
) -> Result<Features<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let f = unsafe { read(f, name) }?;
    // SAFETY: forwarded caller contract.
    let (u, v, t) = unsafe {
        (
            slice(f.u, f.u_len, "features.u")?,
            slice(f.v, f.v_len, "features.v")?,
            slice(f.t, f.t_len, "features.t")?,
        )
    };
    bufs.input("features.u", f.u, u.len()).input("features.v", f.v, v.len()).input(
        "features.t",
        f.t,
        t.len(),
    );
    Ok(Features::new(f.n, f.d, u, v, t)?)
}

/// Writes a preset result.
///
/// # Safety
/// `out` NULL or writable.
unsafe fn write_preset(
    out: *mut dpattn_noisy_head_params,
    make: impl FnOnce() -> dpattn_core::Result<NoisyHeadParams>,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let p = make()?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(dpattn_noisy_head_params::from_core(&p)) };
        Ok(())
    })
}

/// The low-dimensional experiment (`docs/PAPERS.md` §4.6): `D = 5`, `L = ⌊√N⌋`, `λ = 5`,
/// `δ = 1e-5`, `η0 = 0.95·(2/3)·λ/(λ + G²)²`, `T = ⌊2.5 ln N / ln(1/(1 − η0λ))⌋` (the code's rule,
/// P4-7), `κ = 1`, `τ² = 0`, the proof's `G`, `σ = σ_min`, paper accounting. T4-A:
/// `N = 1000`, ε = 1 gives `L = 31`, `T = 44`. Returns `DPATTN_STATUS_OUT_OF_RANGE` for
/// `n ∉ [2, 2⁵²]` or ε not finite and positive, `DPATTN_STATUS_INFEASIBLE` when the
/// parameters fail validation (e.g. `ε/T ≥ 1`), `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe;
/// no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_params_low_dim(
    n: usize,
    epsilon: f64,
    out: *mut dpattn_noisy_head_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { write_preset(out, || presets::low_dim(n, epsilon)) }
}

/// The high-dimensional experiment (`docs/PAPERS.md` §4.6): `D = L = ⌊√N⌋`, `λ = N/D`, `k = 0.1`,
/// `T = 5`; the paper says δ = 1e-5, its code used 1e-2 (P4-18): pass either. Errors as
/// `dpattn_noisy_head_params_low_dim`. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_params_high_dim(
    n: usize,
    epsilon: f64,
    delta: f64,
    out: *mut dpattn_noisy_head_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { write_preset(out, || presets::high_dim(n, epsilon, delta)) }
}

/// The early-stopping experiment (`docs/PAPERS.md` §4.6): `D = L = ⌊√N⌋`, `λ = N/D`, `k = 0.01`,
/// δ = 1e-5, `T = iters`. T4-A: `N = 400` gives `D = L = 20`,
/// `η0 = 2.8478920952431833e-4`. Errors as `dpattn_noisy_head_params_low_dim`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_params_early_stopping(
    n: usize,
    iters: u32,
    epsilon: f64,
    out: *mut dpattn_noisy_head_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { write_preset(out, || presets::early_stopping(n, iters, epsilon)) }
}

/// The robustness experiment (`docs/PAPERS.md` §4.6) for any `N ≥ 3`, `L`: `D = 5`, `λ = 0.01`, δ =
/// 1e-2, `k = 1`, `T = ⌊ln N⌋`, and the authors' `R = 0.1·C²√(N/L)` (P4-10). The paper's
/// run is `(5000, 500, 0.5)`. Errors as `dpattn_noisy_head_params_low_dim` (`n ∉ [3, 2⁵²]`).
/// Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_params_robustness(
    n: usize,
    l: usize,
    epsilon: f64,
    out: *mut dpattn_noisy_head_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { write_preset(out, || presets::robustness(n, l, epsilon)) }
}

/// The radii of Theorem 4.1, eq. (4.1), with `R`'s constant `r_scale` (1 in the theorem).
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for zero sizes, `λ ≤ 0`, `τ² < 0`, `κ ∉ (0, 1]`,
/// `r_scale ≤ 0`, `NL/κ ≤ 1` or an unknown `gform`; `DPATTN_STATUS_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_radii_theorem41(
    n: usize,
    l: usize,
    d: usize,
    lambda: f64,
    tau2: f64,
    kappa: f64,
    gform: u32,
    r_scale: f64,
    out: *mut dpattn_noisy_head_radii,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let g = match gform {
            DPATTN_NOISY_HEAD_GFORM_THEOREM41 => GForm::Theorem41,
            DPATTN_NOISY_HEAD_GFORM_PROOF => GForm::Proof,
            v => {
                return Err(unknown(
                    "gform",
                    v,
                    "DPATTN_NOISY_HEAD_GFORM_THEOREM41 (0), _PROOF (1)",
                ));
            }
        };
        let r = Radii::theorem41(n, l, d, lambda, tau2, kappa, g, r_scale)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(dpattn_noisy_head_radii { c: r.c, g: r.g, g0: r.g0, r: r.r }) };
        Ok(())
    })
}

/// Checks every hard rule of `docs/PAPERS.md` §4.8 (public inputs only). Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` (zero sizes; ε, σ, η0 not positive and finite; `C, G, R ∉
/// [1e-100, 1e100]`; δ ∉ (0, 1); λ negative; unknown accounting),
/// `DPATTN_STATUS_INFEASIBLE` (`σ < 2G(C + RG)`, Theorem 3.2; `ε/T ≥ 1` under paper
/// accounting, where the classical Gaussian mechanism is unproven; `η0 ≥ 2/(2λ + G²)`),
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared
/// state.
///
/// # Safety
/// `params` must be NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_validate(
    params: *const dpattn_noisy_head_params,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        unsafe { params_arg(params) }?.validate()?;
        Ok(())
    })
}

/// Calibration numbers of a parameter set: `σ_min = 2G(C + RG)` (rounded up), the step
/// sensitivity `η0·σ_min/N` (eq. A.1), and the per-entry noise std `s` (paper:
/// `η0·T·σ·√(2 ln(1.25T/δ))/(εN)`; zCDP: `(η0σ/N)·√(T/(2ρ))`). Returns the errors of the
/// privacy inputs (`DPATTN_STATUS_OUT_OF_RANGE`, `DPATTN_STATUS_INFEASIBLE` for
/// `ε/T ≥ 1`), `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; out-pointers NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_calibration(
    params: *const dpattn_noisy_head_params,
    out_sigma_min: *mut f64,
    out_sensitivity: *mut f64,
    out_noise_std: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b, c) = (
            Out::new(out_sigma_min, "out_sigma_min")?,
            Out::new(out_sensitivity, "out_sensitivity")?,
            Out::new(out_noise_std, "out_noise_std")?,
        );
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let s = p.noise_std()?;
        // SAFETY: all checked non-NULL; writable per the caller's contract.
        unsafe {
            a.write(p.sigma_min());
            b.write(p.sensitivity());
            c.write(s);
        }
        Ok(())
    })
}

/// What a ledger is charged for one release: under paper accounting `(ε, δ)` approximate
/// DP (`*out_rho` = 0; approximate-DP ledgers only), under zCDP accounting `*out_rho = ρ`,
/// the largest zCDP `ρ` that converts to `(ε, δ)` (charged as `ρ` to zCDP and RDP ledgers,
/// as the `(ε, δ)` it converts to, `*out_epsilon`, `*out_delta`, to approximate-DP ones).
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for ε, δ out of range or an unknown accounting,
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; out-pointers NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_charge(
    params: *const dpattn_noisy_head_params,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
    out_rho: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (oe, od, or) = (
            Out::new(out_epsilon, "out_epsilon")?,
            Out::new(out_delta, "out_delta")?,
            Out::new(out_rho, "out_rho")?,
        );
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let budget = p.budget;
        let rho = match p.accounting {
            Accounting::Paper => 0.0,
            Accounting::Zcdp => p.zcdp_rho()?.get(),
        };
        // SAFETY: all checked non-NULL; writable per the caller's contract.
        unsafe {
            oe.write(budget.epsilon().get());
            od.write(budget.delta().get());
            or.write(rho);
        }
        Ok(())
    })
}

/// The soft diagnostics of `docs/PAPERS.md` §4.8 (never a validation error; NULL pointers, an
/// unknown accounting and ε, δ outside `(0, ∞) × [0, 1)` still are). Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_get_diagnostics(
    params: *const dpattn_noisy_head_params,
    out: *mut dpattn_noisy_head_diagnostics,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let d = unsafe { params_arg(params) }?.diagnostics();
        let d = dpattn_noisy_head_diagnostics {
            eta0_in_theorem_interval: u32::from(d.eta0_in_theorem_interval),
            eta0_theorem_upper: d.eta0_theorem_upper,
            contraction: d.contraction,
        };
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(d) };
        Ok(())
    })
}

/// `*out_len` = the `double` scratch `dpattn_noisy_head` needs: `N(2D + 1) + D²` plus the
/// form's `2D²` (streaming) or `2D² + D⁴ + D²` (Gram). Returns
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_OUT_OF_RANGE` (unknown form/accounting),
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; `out_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_scratch_len(
    params: *const dpattn_noisy_head_params,
    form_kind: u32,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let n = nh::noisy_head_scratch_len(&p, form(form_kind)?)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// NoisyHead (Algorithm 1): writes `Γ̂ = Γ^T` (`D × D`, row-major) to `out`. Labels are
/// clipped to `±C`, each `Z_k` projected on the `G`-ball, `Γ ← Π_R(Γ⁰)`, then `T` times
/// `Γ ← Π_R((1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z̃_k⟩ − t_k)Z̃_k + z_t)` with `z_t ~ N(0, s²I)`
/// (released on a public grid with exact discrete Gaussian noise); noise entry `(t, i, j)`
/// is element `t·D² + i·D + j` of one fresh stream id of `session` (its epoch and stream
/// id, `dpattn_session_position` just before the call, identify the release for audit).
/// The used part of `scratch` is zeroed before returning (it held private summaries).
///
/// **Guarantee** (Theorem 3.2): `(ε, δ)`-DP for `Γ̂` under replace-one-prompt neighbours
/// (one whole prompt: tokens, labels and query target; `N` public), given `σ ≥ 2G(C + RG)`,
/// `ε/T < 1` (enforced here; the paper leaves it unstated) and `gamma0` and every parameter
/// independent of the private prompts. Test prompts are not protected. The exported head
/// weights (`dpattn_noisy_head_export_attention`) are post-processing.
///
/// **Accounting.** The session's ledger (kept for `DPATTN_UNIT_PROMPT`; a ledger of another
/// unit refuses with `DPATTN_STATUS_UNIT_MISMATCH`) is charged once, after every check and
/// before any noise is drawn or `out` written: under paper accounting an approximate-DP
/// charge of `(ε, δ)` (accepted by approximate-DP ledgers only; others refuse it with
/// `DPATTN_STATUS_OUT_OF_RANGE`), under zCDP accounting the Gaussian charge of
/// `dpattn_noisy_head_charge` (`ρ` on zCDP and RDP ledgers, the `(ε, δ)` it converts to on
/// approximate-DP ones). A refused charge returns the ledger's status
/// (`DPATTN_STATUS_INFEASIBLE` over budget) with `out`, `scratch` and the ledger unchanged
/// (the stream id is consumed either way). The session and its ledger are locked for the
/// whole call (concurrent calls on them wait). To replay a release for an audit, pass a
/// session from `dpattn_session_new_for_replay` (stored master key, epoch and stream id)
/// with a NULL ledger: nothing is charged.
///
/// Returns the errors of `dpattn_noisy_head_validate`; `DPATTN_STATUS_SHAPE_MISMATCH` when
/// the prompts are not `N × L × D` of `params` or `out`/`gamma0` are not `D²` long;
/// `DPATTN_STATUS_NON_FINITE` for a non-finite `gamma0`; `DPATTN_STATUS_SCRATCH_TOO_SMALL`;
/// `DPATTN_STATUS_INFEASIBLE` / `DPATTN_STATUS_OUT_OF_RANGE` /
/// `DPATTN_STATUS_UNIT_MISMATCH` for a refused charge; `DPATTN_STATUS_SIZE_OVERFLOW` when
/// the session's stream ids are used up; `DPATTN_STATUS_INVALID_HANDLE` for a freed
/// `session` (or its ledger); `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_MISALIGNED`,
/// `DPATTN_STATUS_ALIASING`. None depends on prompt content (non-finite prompts are
/// sanitised). `out` is untouched on error. Allocation-free. Thread-safe.
///
/// ```c
/// dpattn_noisy_head_params p;
/// dpattn_noisy_head_params_low_dim(1000, 1.0, &p);   // D = 5, L = 31, T = 44
/// size_t need;
/// dpattn_noisy_head_scratch_len(&p, DPATTN_NOISY_HEAD_FORM_GRAM, &need);
/// double *scratch = malloc(need * sizeof *scratch);
/// dpattn_noisy_head_prompts pr = {p.n, p.l, p.d, x, p.n*p.l*p.d, y, p.n*p.l, q, p.n*p.d, t, p.n};
/// double gamma0[25] = {0}, gamma[25];
/// dpattn_privacy_unit unit = {DPATTN_UNIT_PROMPT, 0};
/// dpattn_ledger *ledger;
/// dpattn_session *session;
/// dpattn_ledger_new_approx(unit, 2.0, 1e-4, &ledger);
/// dpattn_session_new(ledger, &session);           // a key from the operating system
/// dpattn_status s = dpattn_noisy_head(gamma, 25, gamma0, 25, &pr, &p,
///     DPATTN_NOISY_HEAD_FORM_GRAM, session, scratch, need);
/// dpattn_session_free(session);
/// dpattn_ledger_free(ledger);
/// ```
///
/// # Safety
/// `out` NULL or valid for `out_len` writes; `gamma0` NULL or valid for `gamma0_len`
/// reads; `prompts`, `params` NULL or readable (prompt pointers valid for their lengths);
/// `scratch` NULL or valid for `scratch_len` writes. Written buffers must not be accessed
/// by anyone else during the call. `session` NULL or a value returned by
/// `dpattn_session_new*` (a freed one is detected).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head(
    out: *mut f64,
    out_len: usize,
    gamma0: *const f64,
    gamma0_len: usize,
    prompts: *const dpattn_noisy_head_prompts,
    params: *const dpattn_noisy_head_params,
    form_kind: u32,
    session: *mut dpattn_session,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let g0 = unsafe { slice(gamma0, gamma0_len, "gamma0") }?;
        bufs.input("gamma0", gamma0, gamma0_len);
        // SAFETY: forwarded caller contract.
        let pr = unsafe { prompts_arg(prompts, &mut bufs) }?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let form = form(form_kind)?;
        bufs.output("out", out, out_len).output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint from every other buffer (checked).
        let (o, s) = unsafe {
            (slice_mut(out, out_len, "out")?, slice_mut(scratch, scratch_len, "scratch")?)
        };
        with_session(session, nh::STREAMS, |draw, l| {
            Ok(nh::noisy_head_keyed(o, g0, &pr, &p, form, draw, l, s)?)
        })
    })
}

/// `*out_len` = the scratch of `dpattn_noisy_head_linear_attention_head` for an embedding of
/// `rows = D + 1` and `cols = L + 1`: `2·rows·cols + cols²`. Returns
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared
/// state.
///
/// # Safety
/// `out_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_linear_attention_head_scratch_len(
    rows: usize,
    cols: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = nh::linear_attention_head_scratch_len(rows, cols)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// The linear attention head of eq. (2.2): `out = E + W^{PV}E·(EᵀW^{KQ}E)/L` for an
/// embedding `E` (`rows = D + 1` × `cols = L + 1`, row stride `e_stride`); `out` has the
/// same shape (row stride `out_stride`); `w_pv`, `w_kq` are `rows × rows` row-major. The
/// prediction is `out[D][L]`. A deterministic model: no privacy by itself.
///
/// Returns `DPATTN_STATUS_SHAPE_MISMATCH` (shapes disagree or `E` smaller than 2 × 2),
/// `DPATTN_STATUS_NON_FINITE`, `DPATTN_STATUS_SCRATCH_TOO_SMALL`,
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`, `DPATTN_STATUS_OUT_OF_RANGE` (a stride below `cols`),
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_ALIASING`.
/// `out` is untouched on error. Allocation-free. Thread-safe; no shared state.
///
/// # Safety
/// Every pointer NULL or valid for its length (reads, or reads and writes for `out` and
/// `scratch`, which nobody else may access during the call).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_linear_attention_head(
    out: *mut f64,
    out_len: usize,
    out_stride: usize,
    e: *const f64,
    e_len: usize,
    rows: usize,
    cols: usize,
    e_stride: usize,
    w_pv: *const f64,
    w_pv_len: usize,
    w_kq: *const f64,
    w_kq_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let ext = |name, len, stride| -> Result<usize, FfiError> {
            let n = dpattn_core::matrix_view::required_len(rows, cols, stride)?;
            if len < n {
                return Err(Error::BufferTooShort { arg: name, needed: n, got: len }.into());
            }
            Ok(n)
        };
        let (ne, no) = (ext("e", e_len, e_stride)?, ext("out", out_len, out_stride)?);
        // SAFETY: forwarded caller contract.
        let (es, pv, kq) = unsafe {
            (slice(e, ne, "e")?, slice(w_pv, w_pv_len, "w_pv")?, slice(w_kq, w_kq_len, "w_kq")?)
        };
        let mut bufs = Buffers::default();
        bufs.input("e", e, ne).input("w_pv", w_pv, w_pv_len).input("w_kq", w_kq, w_kq_len);
        bufs.output("out", out, no).output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        let ev = MatRef::new(es, rows, cols, e_stride)?;
        let pvv = MatRef::from_row_major(pv, rows, rows)?;
        let kqv = MatRef::from_row_major(kq, rows, rows)?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (o, s) =
            unsafe { (slice_mut(out, no, "out")?, slice_mut(scratch, scratch_len, "scratch")?) };
        let ov = MatMut::new(o, rows, cols, out_stride)?;
        nh::linear_attention_head(ov, ev, pvv, kqv, s)?;
        Ok(())
    })
}

/// Writes the head weights that realise `ŷ = uᵀΓv`: `W^{PV}` with `w22 = 1` and
/// `W^{KQ}` with `W11 = Γᵀ` (\[FIX\] `docs/PAPERS.md` P4-1: the paper's `Γ = w22·W11` would predict
/// with `Γᵀ`), every other entry 0, both `(D+1) × (D+1)` row-major. Post-processing of a
/// released `Γ̂`. Returns `DPATTN_STATUS_SHAPE_MISMATCH`, `DPATTN_STATUS_OUT_OF_RANGE`
/// (`d = 0`), `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_ALIASING`. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_export_attention(
    w_pv: *mut f64,
    w_pv_len: usize,
    w_kq: *mut f64,
    w_kq_len: usize,
    gamma: *const f64,
    gamma_len: usize,
    d: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let g = unsafe { slice(gamma, gamma_len, "gamma") }?;
        let mut bufs = Buffers::default();
        bufs.input("gamma", gamma, gamma_len);
        bufs.output("w_pv", w_pv, w_pv_len).output("w_kq", w_kq, w_kq_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (a, b) =
            unsafe { (slice_mut(w_pv, w_pv_len, "w_pv")?, slice_mut(w_kq, w_kq_len, "w_kq")?) };
        // Check lengths first so an error leaves both outputs untouched.
        nh::export_attention(g, d, a, b)?;
        Ok(())
    })
}

/// The private summaries of Algorithm 1: `u_k = x_{k,L+1}`,
/// `v_k = L⁻¹Σᵢ clip_C(y_{k,i})x_{k,i}`, `t_k = clip_C(y_{k,L+1})`, rescaled so that
/// `‖u_k v_kᵀ‖_F ≤ G`. Every prompt, whatever its content (NaN, ±∞), maps to a bounded
/// summary: no error depends on prompt content. Returns `DPATTN_STATUS_OUT_OF_RANGE` (`C`
/// or `G ∉ [1e-100, 1e100]`), `DPATTN_STATUS_SHAPE_MISMATCH`,
/// `DPATTN_STATUS_OUT_OF_RANGE`/`SIZE_OVERFLOW` for bad prompt sizes,
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_private_features(
    u: *mut f64,
    u_len: usize,
    v: *mut f64,
    v_len: usize,
    t: *mut f64,
    t_len: usize,
    prompts: *const dpattn_noisy_head_prompts,
    clip_c: f64,
    proj_g: f64,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let p = unsafe { prompts_arg(prompts, &mut bufs) }?;
        bufs.output("u", u, u_len).output("v", v, v_len).output("t", t, t_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (u, v, t) = unsafe {
            (slice_mut(u, u_len, "u")?, slice_mut(v, v_len, "v")?, slice_mut(t, t_len, "t")?)
        };
        nh::private_features(&p, clip_c, proj_g, u, v, t)?;
        Ok(())
    })
}

/// The raw (non-private) summaries `u_k = x_{k,L+1}`, `v_k = L⁻¹Σᵢ y_{k,i}x_{k,i}`,
/// `t_k = y_{k,L+1}` (no clipping or projection): for the ridge baseline, the non-private
/// descent and test prompts. Errors as `dpattn_noisy_head_private_features` (no radii).
/// Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_noisy_head_private_features`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_raw_features(
    u: *mut f64,
    u_len: usize,
    v: *mut f64,
    v_len: usize,
    t: *mut f64,
    t_len: usize,
    prompts: *const dpattn_noisy_head_prompts,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let p = unsafe { prompts_arg(prompts, &mut bufs) }?;
        bufs.output("u", u, u_len).output("v", v, v_len).output("t", t, t_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (u, v, t) = unsafe {
            (slice_mut(u, u_len, "u")?, slice_mut(v, v_len, "v")?, slice_mut(t, t_len, "t")?)
        };
        nh::raw_features(&p, u, v, t)?;
        Ok(())
    })
}

/// Copies one prompt from the paper's embedding `E` (`rows = D + 1` × `cols = L + 1`, row
/// stride `e_stride`; column `i < L` is `(x_i; y_i)`, the last is `(x_q; 0)`) into the flat
/// prompt layout: `ctx_x` (`L·D`), `ctx_y` (`L`), `query_x` (`D`). Returns
/// `DPATTN_STATUS_SHAPE_MISMATCH` (`E` smaller than 2 × 2 or wrong lengths),
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`, `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_ALIASING`. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_prompt_from_embedding(
    ctx_x: *mut f64,
    ctx_x_len: usize,
    ctx_y: *mut f64,
    ctx_y_len: usize,
    query_x: *mut f64,
    query_x_len: usize,
    e: *const f64,
    e_len: usize,
    rows: usize,
    cols: usize,
    e_stride: usize,
) -> dpattn_status {
    ffi_status(|| {
        let n = dpattn_core::matrix_view::required_len(rows, cols, e_stride)?;
        if e_len < n {
            return Err(Error::BufferTooShort { arg: "e", needed: n, got: e_len }.into());
        }
        // SAFETY: forwarded caller contract.
        let es = unsafe { slice(e, n, "e") }?;
        let mut bufs = Buffers::default();
        bufs.input("e", e, n);
        bufs.output("ctx_x", ctx_x, ctx_x_len).output("ctx_y", ctx_y, ctx_y_len).output(
            "query_x",
            query_x,
            query_x_len,
        );
        bufs.disjoint()?;
        let ev = MatRef::new(es, rows, cols, e_stride)?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (a, b, c) = unsafe {
            (
                slice_mut(ctx_x, ctx_x_len, "ctx_x")?,
                slice_mut(ctx_y, ctx_y_len, "ctx_y")?,
                slice_mut(query_x, query_x_len, "query_x")?,
            )
        };
        nh::prompt_from_embedding(ev, a, b, c)?;
        Ok(())
    })
}

/// `*out_prediction = uᵀΓv` for a row-major `Γ` of `u_len × v_len` (the head's
/// prediction `⟨Γ, u vᵀ⟩`). Returns `DPATTN_STATUS_SHAPE_MISMATCH` unless
/// `gamma_len = u_len·v_len`, `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; `out_prediction` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_predict(
    gamma: *const f64,
    gamma_len: usize,
    u: *const f64,
    u_len: usize,
    v: *const f64,
    v_len: usize,
    out_prediction: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_prediction, "out_prediction")?;
        // SAFETY: forwarded caller contract.
        let (g, u, v) = unsafe {
            (slice(gamma, gamma_len, "gamma")?, slice(u, u_len, "u")?, slice(v, v_len, "v")?)
        };
        if u.len().checked_mul(v.len()) != Some(g.len()) {
            return Err(Error::ShapeMismatch {
                arg: "gamma",
                axis: "len (u_len * v_len)",
                expected: u.len().saturating_mul(v.len()),
                got: g.len(),
            }
            .into());
        }
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(nh::predict(g, u, v)) };
        Ok(())
    })
}

/// One noiseless, unprojected step `(1 − 2λη0)Γ − (η0/N)Σ_k(u_kᵀΓv_k − t_k)u_k v_kᵀ` into
/// `out` (the map whose sensitivity Theorem 3.2 bounds; its fixed point is ridge with
/// `2λ`, `docs/PAPERS.md` P4-3). Returns `DPATTN_STATUS_SHAPE_MISMATCH`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (`λ < 0`, `η0 ≤ 0`, bad feature sizes),
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`. Not private. Thread-safe; no shared
/// state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; `out` not accessed by anyone else.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_gradient_step(
    out: *mut f64,
    out_len: usize,
    gamma: *const f64,
    gamma_len: usize,
    features: *const dpattn_noisy_head_features,
    lambda: f64,
    eta0: f64,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let g = unsafe { slice(gamma, gamma_len, "gamma") }?;
        bufs.input("gamma", gamma, gamma_len);
        // SAFETY: forwarded caller contract.
        let f = unsafe { features_arg(features, "features", &mut bufs) }?;
        bufs.output("out", out, out_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let o = unsafe { slice_mut(out, out_len, "out") }?;
        nh::gradient_step(o, g, &f, lambda, eta0)?;
        Ok(())
    })
}

/// `H̃ = N⁻¹Σ vec(Z_k)vec(Z_k)ᵀ` (`D⁴`, row-major, symmetric) and `b̃ = N⁻¹Σ t_k vec(Z_k)`
/// (`D²`) of the Gram form. Returns `DPATTN_STATUS_SHAPE_MISMATCH`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`.
/// Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_gram_build(
    h: *mut f64,
    h_len: usize,
    b: *mut f64,
    b_len: usize,
    features: *const dpattn_noisy_head_features,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let f = unsafe { features_arg(features, "features", &mut bufs) }?;
        bufs.output("h", h, h_len).output("b", b, b_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (hs, bs) = unsafe { (slice_mut(h, h_len, "h")?, slice_mut(b, b_len, "b")?) };
        nh::gram_build(&f, hs, bs)?;
        Ok(())
    })
}

/// The non-private baseline: copies `gamma0` to `out` and runs `iters` noiseless,
/// unprojected steps on it (`form` as in `dpattn_noisy_head`), calling `on_iter(user_data,
/// t, Γ^t, D²)` after each step `t = 1..=iters` if `on_iter` is not NULL. **Not private.**
/// `scratch` needs `2D²` (streaming) or `2D² + D⁴ + D²` (Gram) doubles. Returns
/// `DPATTN_STATUS_SHAPE_MISMATCH`, `DPATTN_STATUS_SCRATCH_TOO_SMALL`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (`λ < 0`, `η0 ≤ 0`, unknown form),
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`; `out` is written only on
/// success (the iteration runs in `out`, so on success it holds `Γ^T`; every error is
/// detected before). Allocation-free. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else;
/// `on_iter` must not unwind.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_train_nonprivate(
    out: *mut f64,
    out_len: usize,
    gamma0: *const f64,
    gamma0_len: usize,
    features: *const dpattn_noisy_head_features,
    lambda: f64,
    eta0: f64,
    iters: u32,
    form_kind: u32,
    scratch: *mut f64,
    scratch_len: usize,
    on_iter: dpattn_noisy_head_iter_fn,
    user_data: *mut c_void,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let g0 = unsafe { slice(gamma0, gamma0_len, "gamma0") }?;
        bufs.input("gamma0", gamma0, gamma0_len);
        // SAFETY: forwarded caller contract.
        let f = unsafe { features_arg(features, "features", &mut bufs) }?;
        let form = form(form_kind)?;
        bufs.output("out", out, out_len).output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        // Every check of the core runs before `out` is written.
        let d2 = f.d().checked_mul(f.d()).ok_or(Error::SizeOverflow { what: "D²" })?;
        for (arg, len) in [("out", out_len), ("gamma0", gamma0_len)] {
            if len != d2 {
                return Err(
                    Error::ShapeMismatch { arg, axis: "len", expected: d2, got: len }.into()
                );
            }
        }
        if !(lambda.is_finite() && lambda >= 0.0) {
            return Err(
                Error::OutOfRange { name: "lambda", value: lambda, allowed: "[0, inf)" }.into()
            );
        }
        if !(eta0.is_finite() && eta0 > 0.0) {
            return Err(Error::OutOfRange { name: "eta0", value: eta0, allowed: "(0, inf)" }.into());
        }
        dpattn_core::scratch::check_scratch(scratch_len, form.scratch_len(f.d())?)?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (o, s) = unsafe {
            (slice_mut(out, out_len, "out")?, slice_mut(scratch, scratch_len, "scratch")?)
        };
        o.copy_from_slice(g0);
        nh::train_nonprivate(o, &f, lambda, eta0, iters, form, s, |t, g| {
            if let Some(cb) = on_iter {
                // SAFETY: the caller's callback; `g` is valid for `g.len()` reads during
                // the call.
                unsafe { cb(user_data, t, g.as_ptr(), g.len()) };
            }
        })?;
        Ok(())
    })
}

/// The non-private ridge estimate `Γ*` of eq. (2.7) into `out` (`D²`):
/// `vec(Γ*) = (λN·I + Σ vec(Z_k)vec(Z_k)ᵀ)⁻¹Σ y_k vec(Z_k)` (pass `2λ` to compare with the
/// descent's limit, `docs/PAPERS.md` P4-3). **Allocates** (`O(D⁴)` or `O((N + D²)D²)` doubles).
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` (`λ < 0` or not finite, unknown solver),
/// `DPATTN_STATUS_INFEASIBLE` (numerically singular system or non-finite features),
/// `DPATTN_STATUS_SHAPE_MISMATCH` (`out_len ≠ D²`), `DPATTN_STATUS_ALLOCATION_FAILED`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`.
/// Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; `out` not accessed by anyone else.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_ridge(
    out: *mut f64,
    out_len: usize,
    features: *const dpattn_noisy_head_features,
    lambda: f64,
    solver: u32,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let f = unsafe { features_arg(features, "features", &mut bufs) }?;
        let solver = match solver {
            DPATTN_NOISY_HEAD_RIDGE_CHOLESKY => RidgeSolver::Cholesky,
            DPATTN_NOISY_HEAD_RIDGE_QR => RidgeSolver::Qr,
            v => return Err(unknown("solver", v, "DPATTN_NOISY_HEAD_RIDGE_CHOLESKY (0), _QR (1)")),
        };
        bufs.output("out", out, out_len);
        bufs.disjoint()?;
        let g = nh::ridge(&f, lambda, solver)?;
        if g.len() != out_len {
            return Err(Error::ShapeMismatch {
                arg: "out",
                axis: "len (D²)",
                expected: g.len(),
                got: out_len,
            }
            .into());
        }
        // SAFETY: forwarded caller contract; disjoint (checked).
        unsafe { slice_mut(out, out_len, "out") }?.copy_from_slice(&g);
        Ok(())
    })
}

/// Schedule rules for `T`, fixed before the run from public quantities (`docs/PAPERS.md` §4.5):
/// `which = 0`: the code's low-dim rule `⌊2.5 ln N / ln(1/(1 − η0λ))⌋` (P4-7; `x` =
/// `N`, `l`, `d` unused); `1`: Theorem 4.2(i) `⌈ln(N²LD³)/ln(1/(1 − η0λ))⌉`; `2`: Theorem
/// 4.2(ii) `⌈ln r/ln(1/(1 − η0λ))⌉` with `r = x_r` (`n`, `l`, `d` unused). Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` unless `η0λ ∈ (0, 1)`, sizes positive (`N ≥ 2`), `r > 1`
/// and the result in `[1, 2³²)`, or for an unknown `which`; `DPATTN_STATUS_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_iters` NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_schedule_iters(
    which: u32,
    n: usize,
    l: usize,
    d: usize,
    r: f64,
    eta0: f64,
    lambda: f64,
    out_iters: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_iters, "out_iters")?;
        let t = match which {
            0 => schedule::t_low_dim_code(n, eta0, lambda)?,
            1 => schedule::t_low_dim_theorem(n, l, d, eta0, lambda)?,
            2 => schedule::t_from_r(r, eta0, lambda)?,
            v => return Err(unknown("which", v, "0 (low-dim code), 1 (Thm 4.2(i)), 2 (from r)")),
        };
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(t) };
        Ok(())
    })
}

/// `*out = E‖Z‖_F² = (1 + τ²)/L + (L − 1)/(L D)` for the data model of `docs/PAPERS.md` §4.3
/// (exact). Returns `DPATTN_STATUS_OUT_OF_RANGE` (`l`/`d` zero, `τ²` negative or not finite),
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_expected_z_norm_sq(
    l: usize,
    d: usize,
    tau2: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let o = Out::new(out, "out")?;
        let v = schedule::expected_z_norm_sq(l, d, tau2)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { o.write(v) };
        Ok(())
    })
}

/// The mean-field predictor of the expected excess risk at `params.iters` (`docs/PAPERS.md` §4.7;
/// an approximation for planning, not a bound), and, when `max_iters > 0`, the data-independent
/// best `T ∈ [1, max_iters]` with its predicted risk (`*out_best_iters`, `*out_best_risk`; both 0
/// when `max_iters = 0`). `c0` is the per-entry std of a random start; the best-`T` search uses
/// `τ² = 0`, as the core does. Returns the errors of `dpattn_noisy_head_calibration`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (`c0 < 0`, `τ² < 0`, `|1 − 2λη0| ≥ 1`), `DPATTN_STATUS_INFEASIBLE`
/// (no feasible `T ≤ max_iters`), `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; out-pointers NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_mean_field(
    params: *const dpattn_noisy_head_params,
    c0: f64,
    tau2: f64,
    max_iters: u32,
    out_risk: *mut f64,
    out_best_iters: *mut u32,
    out_best_risk: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b, c) = (
            Out::new(out_risk, "out_risk")?,
            Out::new(out_best_iters, "out_best_iters")?,
            Out::new(out_best_risk, "out_best_risk")?,
        );
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let risk = schedule::mean_field_excess_risk(&p, c0, tau2)?;
        let best = if max_iters == 0 {
            (0, 0.0)
        } else {
            schedule::mean_field_best_iters(&p, c0, max_iters)?
        };
        // SAFETY: all checked non-NULL; writable per the caller's contract.
        unsafe {
            a.write(risk);
            b.write(best.0);
            c.write(best.1);
        }
        Ok(())
    })
}

/// Writes prompts `first .. first + n` of the synthetic model of `docs/PAPERS.md` §4.3 (tokens
/// uniform on the sphere, a fresh task `w_k ~ N(0, I)` per prompt, labels `w_kᵀx + τϵ`); prompt `k`
/// is a function of `(key, stream, k)` only. Not private data: for experiments. Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` (zero sizes, `τ` negative or not finite),
/// `DPATTN_STATUS_SHAPE_MISMATCH`, `DPATTN_STATUS_SIZE_OVERFLOW`,
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_ALIASING`. Allocation-free. Thread-safe;
/// no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; outputs not accessed by anyone else.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_generate_prompts(
    ctx_x: *mut f64,
    ctx_x_len: usize,
    ctx_y: *mut f64,
    ctx_y_len: usize,
    query_x: *mut f64,
    query_x_len: usize,
    query_y: *mut f64,
    query_y_len: usize,
    n: usize,
    l: usize,
    d: usize,
    tau: f64,
    key: *const dpattn_key,
    stream: u64,
    first: u64,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?.to_core();
        let mut bufs = Buffers::default();
        bufs.output("ctx_x", ctx_x, ctx_x_len)
            .output("ctx_y", ctx_y, ctx_y_len)
            .output("query_x", query_x, query_x_len)
            .output("query_y", query_y, query_y_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint (checked).
        let (a, b, c, e) = unsafe {
            (
                slice_mut(ctx_x, ctx_x_len, "ctx_x")?,
                slice_mut(ctx_y, ctx_y_len, "ctx_y")?,
                slice_mut(query_x, query_x_len, "query_x")?,
                slice_mut(query_y, query_y_len, "query_y")?,
            )
        };
        paper::generate_prompts(n, l, d, tau, &key, stream, first, a, b, c, e)?;
        Ok(())
    })
}

/// A public random start `Γ⁰` with i.i.d. `N(0, c0²)` entries: entry `i` is element
/// `2⁶² + i` of `(key, stream)` (never overlapping a release's noise). Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` (`c0` negative or not finite), `DPATTN_STATUS_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out` NULL or valid for `out_len` writes, accessed by nobody else; `key` NULL or
/// readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_random_start(
    out: *mut f64,
    out_len: usize,
    c0: f64,
    key: *const dpattn_key,
    stream: u64,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?.to_core();
        if !(c0.is_finite() && c0 >= 0.0) {
            return Err(Error::OutOfRange { name: "c0", value: c0, allowed: "[0, inf)" }.into());
        }
        // SAFETY: forwarded caller contract; the only written buffer.
        let o = unsafe { slice_mut(out, out_len, "out") }?;
        paper::random_start(o, c0, &key, stream)?;
        Ok(())
    })
}

/// Test-set risks over (raw) test features: `*out_excess_risk = n⁻¹Σ_k⟨Γ̂ − Γ*, Z_k⟩²`
/// (eq. B.1) and `*out_test_mse = n⁻¹Σ_k(⟨Γ̂, Z_k⟩ − t_k)²`. Returns
/// `DPATTN_STATUS_SHAPE_MISMATCH` (a `Γ` not `D²` long), `DPATTN_STATUS_OUT_OF_RANGE`
/// (bad feature sizes), `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// Pointers NULL or valid for their lengths; out-pointers NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_noisy_head_risks(
    gamma_hat: *const f64,
    gamma_hat_len: usize,
    gamma_star: *const f64,
    gamma_star_len: usize,
    test: *const dpattn_noisy_head_features,
    out_excess_risk: *mut f64,
    out_test_mse: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (
            Out::new(out_excess_risk, "out_excess_risk")?,
            Out::new(out_test_mse, "out_test_mse")?,
        );
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let (gh, gs) = unsafe {
            (
                slice(gamma_hat, gamma_hat_len, "gamma_hat")?,
                slice(gamma_star, gamma_star_len, "gamma_star")?,
            )
        };
        // SAFETY: forwarded caller contract.
        let f = unsafe { features_arg(test, "test", &mut bufs) }?;
        let er = paper::excess_risk(gh, gs, &f)?;
        let mse = paper::test_mse(gh, &f)?;
        // SAFETY: both checked non-NULL; writable per the caller's contract.
        unsafe {
            a.write(er);
            b.write(mse);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use crate::ledger::dpattn_ledger;
    use crate::session::{dpattn_session_free, dpattn_session_new_for_replay};
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::{Draw, epoch_key};
    use std::ptr::{null, null_mut};

    /// A replay session on master key `[key; 32]` at epoch 0 whose next stream id is
    /// `stream`, charging `ledger` (NULL: nothing).
    fn replay(key: u8, stream: u64, ledger: *mut dpattn_ledger) -> *mut dpattn_session {
        let mut s = null_mut();
        let k = dpattn_key { bytes: [key; 32] };
        // SAFETY: valid locals; `ledger` NULL or a live handle.
        let st = unsafe { dpattn_session_new_for_replay(&k, 0, stream, ledger, &mut s) };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        s
    }

    /// The epoch key the sessions of [`replay`] draw with.
    fn replay_key(key: u8) -> NoiseKey {
        epoch_key(&NoiseKey::for_replay([key; 32]), 0)
    }

    fn low_dim() -> dpattn_noisy_head_params {
        let mut p = std::mem::MaybeUninit::uninit();
        // SAFETY: writable local.
        let s = unsafe { dpattn_noisy_head_params_low_dim(200, 1.0, p.as_mut_ptr()) };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        // SAFETY: initialised on success.
        unsafe { p.assume_init() }
    }

    #[test]
    fn release_equals_the_core_bit_for_bit() {
        let p = low_dim();
        let core = p.to_core().unwrap();
        assert_eq!(core, presets::low_dim(200, 1.0).unwrap());
        let (n, l, d) = (p.n, p.l, p.d);
        let (mut x, mut y, mut q, mut t) =
            (vec![0.0; n * l * d], vec![0.0; n * l], vec![0.0; n * d], vec![0.0; n]);
        let k = dpattn_key { bytes: [1; 32] };
        // SAFETY: valid buffers.
        let s = unsafe {
            dpattn_noisy_head_generate_prompts(
                x.as_mut_ptr(),
                x.len(),
                y.as_mut_ptr(),
                y.len(),
                q.as_mut_ptr(),
                q.len(),
                t.as_mut_ptr(),
                t.len(),
                n,
                l,
                d,
                0.0,
                &k,
                0,
                0,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        let pr = dpattn_noisy_head_prompts {
            n,
            l,
            d,
            ctx_x: x.as_ptr(),
            ctx_x_len: x.len(),
            ctx_y: y.as_ptr(),
            ctx_y_len: y.len(),
            query_x: q.as_ptr(),
            query_x_len: q.len(),
            query_y: t.as_ptr(),
            query_y_len: t.len(),
        };
        let mut need = 0;
        // SAFETY: valid locals.
        unsafe { dpattn_noisy_head_scratch_len(&p, DPATTN_NOISY_HEAD_FORM_GRAM, &mut need) };
        let mut scratch = vec![0.0; need];
        let mut gamma = [0.0; 25];
        let g0 = [0.0; 25];
        let session = replay(2, 4, null_mut());
        // SAFETY: valid buffers and session.
        let s = unsafe {
            dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                &pr,
                &p,
                DPATTN_NOISY_HEAD_FORM_GRAM,
                session,
                scratch.as_mut_ptr(),
                need,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        let prompts = Prompts::new(n, l, d, &x, &y, &q, &t).unwrap();
        let mut expect = [0.0; 25];
        nh::noisy_head_keyed(
            &mut expect,
            &g0,
            &prompts,
            &core,
            Form::Gram,
            Draw { key: &replay_key(2), stream: 4 },
            None,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(gamma.map(f64::to_bits), expect.map(f64::to_bits));
        // The session handed out stream 4: the next release draws stream 5.
        let (mut epoch, mut next) = (9, 9);
        // SAFETY: live session, valid locals.
        let st = unsafe { crate::session::dpattn_session_position(session, &mut epoch, &mut next) };
        assert_eq!((st, epoch, next), (dpattn_status::Ok, 0, 5));
        // Errors: session, short scratch, aliasing; output untouched.
        let before = gamma;
        let mut dummy = 0u8;
        // SAFETY: valid buffers; the error paths touch nothing.
        unsafe {
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                &pr,
                &p,
                0,
                (&mut dummy as *mut u8).cast(),
                scratch.as_mut_ptr(),
                need,
            );
            assert_eq!(s, dpattn_status::InvalidHandle);
            assert!(last_error_string().contains("session"));
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                &pr,
                &p,
                0,
                session,
                scratch.as_mut_ptr(),
                3,
            );
            assert_eq!(s, dpattn_status::ScratchTooSmall);
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                gamma.as_ptr(),
                25,
                &pr,
                &p,
                0,
                session,
                scratch.as_mut_ptr(),
                need,
            );
            assert_eq!(s, dpattn_status::Aliasing);
            assert!(last_error_string().contains("gamma0"));
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                &pr,
                &p,
                7,
                session,
                scratch.as_mut_ptr(),
                need,
            );
            assert_eq!(s, dpattn_status::OutOfRange);
            assert!(last_error_string().contains("form"));
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                null(),
                &p,
                0,
                session,
                scratch.as_mut_ptr(),
                need,
            );
            assert_eq!(s, dpattn_status::NullArgument);
            assert!(last_error_string().contains("prompts"));
            let s = dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                &pr,
                &p,
                0,
                null_mut(),
                scratch.as_mut_ptr(),
                need,
            );
            assert_eq!(s, dpattn_status::NullArgument);
            assert!(last_error_string().contains("session"));
            dpattn_session_free(session);
        }
        assert_eq!(gamma, before);
    }

    /// Prompts of the low-dim preset at `n = 200`, as owned buffers.
    struct Data {
        x: Vec<f64>,
        y: Vec<f64>,
        q: Vec<f64>,
        t: Vec<f64>,
    }

    impl Data {
        fn new(p: &dpattn_noisy_head_params) -> Self {
            let (n, l, d) = (p.n, p.l, p.d);
            let mut s = Self {
                x: vec![0.0; n * l * d],
                y: vec![0.0; n * l],
                q: vec![0.0; n * d],
                t: vec![0.0; n],
            };
            let core = p.to_core().unwrap();
            paper::generate_prompts(
                n,
                l,
                d,
                0.0,
                &NoiseKey::for_replay([1; 32]),
                0,
                0,
                &mut s.x,
                &mut s.y,
                &mut s.q,
                &mut s.t,
            )
            .unwrap();
            assert_eq!(core.d, d);
            s
        }

        fn c(&self, p: &dpattn_noisy_head_params) -> dpattn_noisy_head_prompts {
            dpattn_noisy_head_prompts {
                n: p.n,
                l: p.l,
                d: p.d,
                ctx_x: self.x.as_ptr(),
                ctx_x_len: self.x.len(),
                ctx_y: self.y.as_ptr(),
                ctx_y_len: self.y.len(),
                query_x: self.q.as_ptr(),
                query_x_len: self.q.len(),
                query_y: self.t.as_ptr(),
                query_y_len: self.t.len(),
            }
        }
    }

    /// One release through a replay session (key `[2; 32]`, stream 4) charging `ledger`.
    fn release(
        p: &dpattn_noisy_head_params,
        pr: &dpattn_noisy_head_prompts,
        ledger: *mut dpattn_ledger,
        gamma: &mut [f64; 25],
    ) -> dpattn_status {
        let session = replay(2, 4, ledger);
        // SAFETY: a live session, freed once.
        let st = unsafe { release_in(p, pr, session, gamma) };
        // SAFETY: as above.
        unsafe { dpattn_session_free(session) };
        st
    }

    /// One release in `session`.
    ///
    /// # Safety
    /// `session` NULL or a (possibly freed) handle.
    unsafe fn release_in(
        p: &dpattn_noisy_head_params,
        pr: &dpattn_noisy_head_prompts,
        session: *mut dpattn_session,
        gamma: &mut [f64; 25],
    ) -> dpattn_status {
        let mut need = 0;
        // SAFETY: valid locals.
        unsafe { dpattn_noisy_head_scratch_len(p, DPATTN_NOISY_HEAD_FORM_GRAM, &mut need) };
        let mut scratch = vec![0.0; need];
        let g0 = [0.0; 25];
        // SAFETY: valid buffers; `session` per the caller's contract.
        unsafe {
            dpattn_noisy_head(
                gamma.as_mut_ptr(),
                25,
                g0.as_ptr(),
                25,
                pr,
                p,
                DPATTN_NOISY_HEAD_FORM_GRAM,
                session,
                scratch.as_mut_ptr(),
                need,
            )
        }
    }

    #[test]
    fn release_with_a_ledger_charges_exactly_what_the_core_charges() {
        let mut p = low_dim();
        let data = Data::new(&p);
        let pr = data.c(&p);
        let prompts = Prompts::new(p.n, p.l, p.d, &data.x, &data.y, &data.q, &data.t).unwrap();
        for accounting in [DPATTN_NOISY_HEAD_ACCOUNTING_PAPER, DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP] {
            p.accounting = accounting;
            let core = p.to_core().unwrap();
            for kind in [Kind::Approx(2.0, 1e-4), Kind::Zcdp(5.0), Kind::Rdp(20.0, 1e-5)] {
                let (h, mut cl) = lt::pair(PrivacyUnit::Prompt, kind);
                let mut gamma = [7.0; 25];
                let st = release(&p, &pr, h, &mut gamma);
                let mut expect = [7.0; 25];
                let mut scratch = vec![0.0; nh::noisy_head_scratch_len(&core, Form::Gram).unwrap()];
                let r = nh::noisy_head_keyed(
                    &mut expect,
                    &[0.0; 25],
                    &prompts,
                    &core,
                    Form::Gram,
                    Draw { key: &replay_key(2), stream: 4 },
                    Some(&mut cl),
                    &mut scratch,
                );
                // Paper accounting is an (ε, δ) charge: approximate-DP ledgers only. The
                // zCDP mode is a Gaussian charge: ρ on zCDP and RDP ledgers, the (ε, δ) it
                // was calibrated to convert to on approximate-DP ones.
                let fits = matches!(
                    (accounting, kind),
                    (DPATTN_NOISY_HEAD_ACCOUNTING_PAPER, Kind::Approx(..))
                        | (DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP, _)
                );
                if fits {
                    assert_eq!(st, dpattn_status::Ok, "{kind:?}: {}", last_error_string());
                    r.unwrap();
                    assert!(lt::nonzero(cl.spent()));
                    if let Kind::Approx(..) = kind {
                        let want = dpattn_core::accounting::ledger::Amount::Approx {
                            epsilon: core.budget.epsilon().get(),
                            delta: core.budget.delta().get(),
                        };
                        assert_eq!(cl.spent(), want, "{accounting}");
                    }
                } else {
                    // A charge of a kind this ledger cannot take: the core's error.
                    assert_eq!(st, dpattn_status::OutOfRange, "{kind:?}");
                    assert_eq!(st, dpattn_status::of(&r.unwrap_err()));
                    lt::assert_untouched(h);
                }
                assert_eq!(gamma.map(f64::to_bits), expect.map(f64::to_bits));
                lt::assert_same(h, &cl);
                lt::free(h);
            }
        }
    }

    #[test]
    fn release_refused_or_freed_session_writes_nothing() {
        let mut p = low_dim();
        let data = Data::new(&p);
        let pr = data.c(&p);
        for (accounting, kind) in [
            (DPATTN_NOISY_HEAD_ACCOUNTING_PAPER, Kind::Approx(0.5, 1e-4)),
            (DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP, Kind::Approx(0.5, 1e-4)),
            (DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP, Kind::Zcdp(1e-4)),
            (DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP, Kind::Rdp(0.1, 1e-5)),
        ] {
            p.accounting = accounting;
            let (h, _) = lt::pair(PrivacyUnit::Prompt, kind);
            let mut gamma = [7.0; 25];
            assert_eq!(release(&p, &pr, h, &mut gamma), dpattn_status::Infeasible, "{kind:?}");
            assert_eq!(gamma, [7.0; 25]);
            lt::assert_untouched(h);
            lt::free(h);
        }
        // A ledger kept for another unit: refused, nothing written.
        let (h, _) = lt::pair(PrivacyUnit::Record, Kind::Approx(100.0, 1e-2));
        let mut gamma = [7.0; 25];
        assert_eq!(release(&p, &pr, h, &mut gamma), dpattn_status::UnitMismatch);
        assert_eq!(gamma, [7.0; 25]);
        lt::assert_untouched(h);
        lt::free(h);
        // A freed session.
        let session = replay(2, 4, null_mut());
        // SAFETY: a live session, freed once; then a freed handle (detected).
        let st = unsafe {
            dpattn_session_free(session);
            release_in(&p, &pr, session, &mut gamma)
        };
        assert_eq!(st, dpattn_status::InvalidHandle);
        assert_eq!(gamma, [7.0; 25]);
    }

    #[test]
    fn presets_and_errors() {
        let mut p = low_dim();
        let mut out = p;
        // SAFETY: valid locals.
        unsafe {
            assert_eq!(
                dpattn_noisy_head_params_low_dim(1, 1.0, &mut out),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("`n`"));
            assert_eq!(out, p, "untouched on error");
            p.sigma = p.sigma_min_core() * 0.5;
            assert_eq!(dpattn_noisy_head_validate(&p), dpattn_status::Infeasible);
            p.accounting = 5;
            assert_eq!(dpattn_noisy_head_validate(&p), dpattn_status::OutOfRange);
            assert!(last_error_string().contains("accounting"));
        }
    }

    impl dpattn_noisy_head_params {
        fn sigma_min_core(&self) -> f64 {
            self.to_core().unwrap().sigma_min()
        }
    }
}
