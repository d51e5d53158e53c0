//! DP-Forward from C (paper 003, `dpattn_core::dp_forward`; `docs/PAPERS.md` §3).
//!
//! Hidden-state matrices are passed as `(data, len, dtype, rows, cols, row_stride)`:
//! `dtype` is `DPATTN_DTYPE_F32` or `DPATTN_DTYPE_F64` (the hook's noise is drawn and added
//! in `f64`; 16-bit types are refused with `DPATTN_STATUS_OUT_OF_RANGE`), strides are in
//! elements, and `len` must cover `(rows − 1)·row_stride + cols` elements.
//!
//! Not wrapped: general matrix-normal factors (`NoiseFactors::Matrix` with a
//! `CertifiedMatrixGaussian`), which need an owned certified factor object; i.i.d. and
//! diagonal factors are covered. The hook draws from and charges a `dpattn_session` (see
//! `dpattn_dp_forward`): the ledger of its session is charged
//! `dpattn_dp_forward_guarantee` (approximate DP, plans of one release) or
//! `dpattn_dp_forward_release_rho` (zCDP/RDP, per release).

use std::ffi::c_void;

use dpattn_core::dp_forward::{
    self as dpf, ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    RandomizedResponse, SensitivityRule, SubLayer,
};
use dpattn_core::matrix_view::required_len;
use dpattn_core::sampling::KeyedStream;
use dpattn_core::{Epsilon, Error, MatMut, MatRef, NoiseMode, PrivacyBudget};

use crate::args::{Buffers, Out, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, unknown};
use crate::session::{dpattn_session, with_session};
use crate::status::dpattn_status;
use crate::tensor::{DPATTN_DTYPE_F32, DPATTN_DTYPE_F64, dpattn_dtype, dpattn_key};

/// `region`: bound the whole `tokens × dim` matrix of each sequence (sequence level,
/// `docs/PAPERS.md` §3.7).
pub const DPATTN_DP_FORWARD_REGION_FROBENIUS: u32 = 0;
/// `region`: bound each row (token) on its own (App. A.2).
pub const DPATTN_DP_FORWARD_REGION_ROWS: u32 = 1;
/// `mode`: `x / max(1, ‖x‖/C)`.
pub const DPATTN_DP_FORWARD_MODE_CLIP: u32 = 0;
/// `mode`: `C·x/‖x‖` (the paper's choice; zero stays zero).
pub const DPATTN_DP_FORWARD_MODE_NORMALIZE: u32 = 1;
/// `mode`: the released code's `x·min(1, C/(‖x‖ + 1e-6))` (reproduction only).
pub const DPATTN_DP_FORWARD_MODE_RELEASED_CODE: u32 = 2;
/// `neighbours`: any two sequences with the same label (SeqLDP; sensitivity `2C`).
pub const DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE: u32 = 0;
/// `neighbours`: hidden matrices differing in at most `neighbour_rows` rows (token level;
/// only at the embedding position).
pub const DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS: u32 = 1;
/// `position`: after `LayerNorm(token + segment + position embedding)` (row-local).
pub const DPATTN_DP_FORWARD_POSITION_EMBEDDING: u32 = 0;
/// `position`: inside encoder `encoder_layer` (0-based), after sub-layer `sublayer`.
pub const DPATTN_DP_FORWARD_POSITION_ENCODER: u32 = 1;
/// `position`: the pooled `1 × d` feature (`tokens` must be 1).
pub const DPATTN_DP_FORWARD_POSITION_POOLED: u32 = 2;
/// `sublayer`: attention output projection, before LayerNorm (host drops that residual).
pub const DPATTN_DP_FORWARD_SUBLAYER_MHA: u32 = 0;
/// `sublayer`: `LayerNorm(h + input)` after attention.
pub const DPATTN_DP_FORWARD_SUBLAYER_ADD_NORM1: u32 = 1;
/// `sublayer`: second FFN dense layer, before LayerNorm (host drops that residual).
pub const DPATTN_DP_FORWARD_SUBLAYER_FFN: u32 = 2;
/// `sublayer`: the encoder output (the paper's Table 5 "Encoder i").
pub const DPATTN_DP_FORWARD_SUBLAYER_ADD_NORM2: u32 = 3;
/// `rule`: calibrate with the true sensitivity (default).
pub const DPATTN_DP_FORWARD_RULE_DERIVED: u32 = 0;
/// `rule`: \[FIX\] `docs/PAPERS.md` P3-1 reproduction: calibrate with half of it as the released
/// code does; the guarantee reported is the effective one (nominal ε = 8 is really 19.12).
pub const DPATTN_DP_FORWARD_RULE_RELEASED_CODE: u32 = 1;
/// `kind` of `dpattn_dp_forward_factors`: `Z = σ·N`, σ the noise floor (Eq. 6).
pub const DPATTN_DP_FORWARD_FACTORS_IID: u32 = 0;
/// `kind` of `dpattn_dp_forward_factors`: `Z_ij = row_std[i]·N_ij·col_std[j]`.
pub const DPATTN_DP_FORWARD_FACTORS_DIAGONAL: u32 = 1;

/// The parameters of one DP-Forward hook (`DpForwardParams`). Fill with
/// `dpattn_dp_forward_params_default`, then set at least `tokens` and `dim`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_dp_forward_params {
    /// ε of all `releases` releases of one input together; finite, `> 0`. Default 1.
    pub epsilon: f64,
    /// δ, in `(0, 1)` (no Gaussian noise gives pure DP). Default 1e-5.
    pub delta: f64,
    /// `k ≥ 1`: how many times one input is released (composed exactly, \[FIX\]
    /// `docs/PAPERS.md` P3-6).
    /// Default 1.
    pub releases: u32,
    /// `C`, in `[1e-100, 1e100]`. Default 1.
    pub clip_norm: f64,
    /// `DPATTN_DP_FORWARD_REGION_*`. Default Frobenius.
    pub region: u32,
    /// `DPATTN_DP_FORWARD_MODE_*`. Default normalize (the paper's choice).
    pub mode: u32,
    /// `DPATTN_DP_FORWARD_NEIGHBOURS_*`. Default sequence.
    pub neighbours: u32,
    /// Rows that may differ (`c ≥ 1`) for token-level neighbours; ignored for sequence
    /// neighbours. Default 1.
    pub neighbour_rows: usize,
    /// `DPATTN_DP_FORWARD_POSITION_*`. Default embedding.
    pub position: u32,
    /// 0-based encoder layer at the encoder position; ignored elsewhere. Default 0.
    pub encoder_layer: usize,
    /// `DPATTN_DP_FORWARD_SUBLAYER_*` at the encoder position; ignored elsewhere.
    /// Default add-norm 2 (the encoder output).
    pub sublayer: u32,
    /// `n`, the padded sequence length (rows per sequence); no default (0: must be set).
    pub tokens: usize,
    /// `d`, the hidden size; no default (0: must be set).
    pub dim: usize,
    /// `DPATTN_DP_FORWARD_RULE_*`. Default derived.
    pub rule: u32,
}

/// The noise factors of one release: i.i.d. (`kind = DPATTN_DP_FORWARD_FACTORS_IID`, the
/// std pointers are ignored and may be NULL) or diagonal (`..._DIAGONAL`: `tokens` row
/// standard deviations and `dim` column standard deviations, all finite and positive, with
/// `min(row_std)·min(col_std) ≥` the noise floor, Theorem 6).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_dp_forward_factors {
    /// `DPATTN_DP_FORWARD_FACTORS_*`.
    pub kind: u32,
    /// Row standard deviations (singular values of `U`), diagonal only.
    pub row_std: *const f64,
    /// Length of `row_std` (must be `tokens`).
    pub row_std_len: usize,
    /// Column standard deviations (singular values of `V`), diagonal only.
    pub col_std: *const f64,
    /// Length of `col_std` (must be `dim`).
    pub col_std_len: usize,
}

/// What a clip did. Private data: keep it on the data owner's side.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_dp_forward_clip_report {
    /// Blocks whose entries were rescaled.
    pub scaled: usize,
    /// The largest block norm before clipping (of the sanitised input).
    pub max_norm: f64,
    /// Rows that held NaN or ±∞ and were set to zero before clipping (sanitised, never
    /// refused). Private: a count of private entries.
    pub private_sanitized_rows: usize,
}

impl dpattn_dp_forward_clip_report {
    fn of(scaled: usize, max_norm: f64, private_sanitized_rows: usize) -> Self {
        Self { scaled, max_norm, private_sanitized_rows }
    }
}

fn region(v: u32) -> Result<ClipRegion, FfiError> {
    match v {
        DPATTN_DP_FORWARD_REGION_FROBENIUS => Ok(ClipRegion::Frobenius),
        DPATTN_DP_FORWARD_REGION_ROWS => Ok(ClipRegion::Rows),
        _ => Err(unknown("region", v, "DPATTN_DP_FORWARD_REGION_FROBENIUS (0), _ROWS (1)")),
    }
}

fn mode(v: u32) -> Result<ClipMode, FfiError> {
    match v {
        DPATTN_DP_FORWARD_MODE_CLIP => Ok(ClipMode::Clip),
        DPATTN_DP_FORWARD_MODE_NORMALIZE => Ok(ClipMode::Normalize),
        DPATTN_DP_FORWARD_MODE_RELEASED_CODE => Ok(ClipMode::ReleasedCode),
        _ => Err(unknown(
            "mode",
            v,
            "DPATTN_DP_FORWARD_MODE_CLIP (0), _NORMALIZE (1), _RELEASED_CODE (2)",
        )),
    }
}

fn neighbours(v: u32, rows: usize) -> Result<Neighbours, FfiError> {
    match v {
        DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE => Ok(Neighbours::Sequence),
        DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS => Ok(Neighbours::Tokens(rows)),
        _ => {
            Err(unknown("neighbours", v, "DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE (0), _TOKENS (1)"))
        }
    }
}

fn position(v: u32, layer: usize, sub: u32) -> Result<NoisePosition, FfiError> {
    match v {
        DPATTN_DP_FORWARD_POSITION_EMBEDDING => Ok(NoisePosition::Embedding),
        DPATTN_DP_FORWARD_POSITION_POOLED => Ok(NoisePosition::Pooled),
        DPATTN_DP_FORWARD_POSITION_ENCODER => {
            let sub = match sub {
                DPATTN_DP_FORWARD_SUBLAYER_MHA => SubLayer::Mha,
                DPATTN_DP_FORWARD_SUBLAYER_ADD_NORM1 => SubLayer::AddNorm1,
                DPATTN_DP_FORWARD_SUBLAYER_FFN => SubLayer::Ffn,
                DPATTN_DP_FORWARD_SUBLAYER_ADD_NORM2 => SubLayer::AddNorm2,
                _ => {
                    return Err(unknown(
                        "sublayer",
                        sub,
                        "DPATTN_DP_FORWARD_SUBLAYER_MHA (0), _ADD_NORM1 (1), _FFN (2), _ADD_NORM2 (3)",
                    ));
                }
            };
            Ok(NoisePosition::Encoder { layer, sub })
        }
        _ => Err(unknown(
            "position",
            v,
            "DPATTN_DP_FORWARD_POSITION_EMBEDDING (0), _ENCODER (1), _POOLED (2)",
        )),
    }
}

impl dpattn_dp_forward_params {
    fn to_core(self) -> Result<DpForwardParams, FfiError> {
        Ok(DpForwardParams {
            budget: PrivacyBudget::new(self.epsilon, self.delta)?,
            releases: self.releases,
            clip_norm: self.clip_norm,
            region: region(self.region)?,
            mode: mode(self.mode)?,
            neighbours: neighbours(self.neighbours, self.neighbour_rows)?,
            position: position(self.position, self.encoder_layer, self.sublayer)?,
            tokens: self.tokens,
            dim: self.dim,
            rule: match self.rule {
                DPATTN_DP_FORWARD_RULE_DERIVED => SensitivityRule::Derived,
                DPATTN_DP_FORWARD_RULE_RELEASED_CODE => SensitivityRule::ReleasedCode,
                v => {
                    return Err(unknown(
                        "rule",
                        v,
                        "DPATTN_DP_FORWARD_RULE_DERIVED (0), _RELEASED_CODE (1)",
                    ));
                }
            },
            noise_mode: NoiseMode::Exact,
        })
    }
}

/// Reads and converts a params pointer.
///
/// # Safety
/// `p` must be NULL or readable.
unsafe fn params_arg(p: *const dpattn_dp_forward_params) -> Result<DpForwardParams, FfiError> {
    // SAFETY: forwarded caller contract.
    unsafe { read(p, "params") }?.to_core()
}

/// Reads a factors descriptor; the returned slices borrow caller memory.
///
/// # Safety
/// `f` must be NULL or readable, and its std pointers valid for their lengths for `'a`.
unsafe fn factors_arg<'a>(
    f: *const dpattn_dp_forward_factors,
    bufs: Option<&mut Buffers>,
) -> Result<NoiseFactors<'a>, FfiError> {
    // SAFETY: forwarded caller contract.
    let f = unsafe { read(f, "factors") }?;
    match f.kind {
        DPATTN_DP_FORWARD_FACTORS_IID => Ok(NoiseFactors::Iid),
        DPATTN_DP_FORWARD_FACTORS_DIAGONAL => {
            // SAFETY: forwarded caller contract.
            let row_std = unsafe { slice(f.row_std, f.row_std_len, "factors.row_std") }?;
            // SAFETY: forwarded caller contract.
            let col_std = unsafe { slice(f.col_std, f.col_std_len, "factors.col_std") }?;
            if let Some(b) = bufs {
                b.input("factors.row_std", f.row_std, row_std.len());
                b.input("factors.col_std", f.col_std, col_std.len());
            }
            Ok(NoiseFactors::Diagonal { row_std, col_std })
        }
        v => Err(unknown("factors.kind", v, "DPATTN_DP_FORWARD_FACTORS_IID (0), _DIAGONAL (1)")),
    }
}

/// The elements a strided `rows × cols` view addresses, checked against `len`.
fn matrix_extent(
    name: &'static str,
    len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
) -> Result<usize, FfiError> {
    let needed = required_len(rows, cols, row_stride)?;
    if len < needed {
        return Err(Error::BufferTooShort { arg: name, needed, got: len }.into());
    }
    Ok(needed)
}

/// Fills `*out` with the defaults documented on each field of
/// `dpattn_dp_forward_params` (ε = 1, δ = 1e-5, one release, `C = 1`, Frobenius
/// normalisation, sequence neighbours at the embedding, derived sensitivity;
/// `tokens = dim = 0`, which the caller must set). Returns `DPATTN_STATUS_NULL_ARGUMENT`
/// for a NULL `out`. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_params_default(
    out: *mut dpattn_dp_forward_params,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let p = dpattn_dp_forward_params {
            epsilon: 1.0,
            delta: 1e-5,
            releases: 1,
            clip_norm: 1.0,
            region: DPATTN_DP_FORWARD_REGION_FROBENIUS,
            mode: DPATTN_DP_FORWARD_MODE_NORMALIZE,
            neighbours: DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE,
            neighbour_rows: 1,
            position: DPATTN_DP_FORWARD_POSITION_EMBEDDING,
            encoder_layer: 0,
            sublayer: DPATTN_DP_FORWARD_SUBLAYER_ADD_NORM2,
            tokens: 0,
            dim: 0,
            rule: DPATTN_DP_FORWARD_RULE_DERIVED,
        };
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(p) };
        Ok(())
    })
}

/// Checks every parameter (`DpForwardParams::validate`; nothing depends on private data).
///
/// Returns `DPATTN_STATUS_OK`; `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_OUT_OF_RANGE`
/// for ε ≤ 0 or not finite, δ ∉ (0, 1), `releases = 0`, `C ∉ [1e-100, 1e100]`, zero
/// `tokens`/`dim`, `neighbour_rows = 0` with token neighbours, `tokens ≠ 1` at the pooled
/// position, or an unknown enum value; `DPATTN_STATUS_SIZE_OVERFLOW` if `tokens·dim`
/// overflows; `DPATTN_STATUS_UNSUPPORTED` for token-level neighbours after the embedding
/// layer, or the released-code rule with anything but Frobenius clipping and sequence
/// neighbours. Thread-safe; no shared state.
///
/// # Safety
/// `params` must be NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_validate(
    params: *const dpattn_dp_forward_params,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        unsafe { params_arg(params) }?.validate()?;
        Ok(())
    })
}

/// `*out_sensitivity` = the true L2 sensitivity `S₂` of one release of the hook (rounded
/// up): `2C` for Frobenius clipping; `2C·√n` (sequence) or `2C·√min(c, n)` (token level)
/// for row clipping. \[FIX\] `docs/PAPERS.md` P3-1, P3-2: the paper's `C` is half of it. Errors as
/// `dpattn_dp_forward_validate`. Thread-safe; no shared state.
///
/// # Safety
/// `params` must be NULL or readable; `out_sensitivity` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_sensitivity(
    params: *const dpattn_dp_forward_params,
    out_sensitivity: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sensitivity, "out_sensitivity")?;
        // SAFETY: forwarded caller contract.
        let s = unsafe { params_arg(params) }?.sensitivity()?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// `*out_sensitivity` = the L2 sensitivity of a clipped `tokens × dim` matrix for a clip
/// region and neighbour relation (core `dp_forward::sensitivity`): `2C` (Frobenius), `2C√n`
/// (rows, sequence), `2C√min(c, n)` (rows, `c = neighbour_rows` changed rows), rounded up.
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for `C ∉ [1e-100, 1e100]`, `tokens = 0`,
/// `neighbour_rows = 0` with token neighbours, or an unknown enum value;
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out_sensitivity` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_clip_sensitivity(
    region_kind: u32,
    neighbour_kind: u32,
    neighbour_rows: usize,
    clip_norm: f64,
    tokens: usize,
    out_sensitivity: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sensitivity, "out_sensitivity")?;
        let s = dpf::sensitivity(
            region(region_kind)?,
            neighbours(neighbour_kind, neighbour_rows)?,
            clip_norm,
            tokens,
        )?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// Refuses neighbour relations a position cannot support (core `check_neighbours`):
/// `DPATTN_STATUS_OUT_OF_RANGE` for token neighbours with `neighbour_rows = 0` or an
/// unknown enum value, `DPATTN_STATUS_UNSUPPORTED` for token neighbours at any position but
/// the embedding (after attention one token changes every row). Thread-safe; no shared
/// state.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_dp_forward_check_neighbours(
    neighbour_kind: u32,
    neighbour_rows: usize,
    position_kind: u32,
    encoder_layer: usize,
    sublayer: u32,
) -> dpattn_status {
    ffi_status(|| {
        dpf::check_neighbours(
            neighbours(neighbour_kind, neighbour_rows)?,
            position(position_kind, encoder_layer, sublayer)?,
        )?;
        Ok(())
    })
}

/// `*out_sigma` = the noise floor `S·√k / A(ε, δ)` (rounded up): the per-entry std of
/// i.i.d. noise and the smallest admissible `σ_min(U)·σ_min(V)` (Algorithm 1 with
/// branch-aware bisection, \[FIX\] `docs/PAPERS.md` P3-4, P3-17; `k` releases composed exactly,
/// \[FIX\] P3-6; half the sensitivity under the released-code rule). `docs/PAPERS.md` T3-A: ε = 8,
/// δ = 1e-5, `S = 2` gives 1.2004581444. Errors as `dpattn_dp_forward_validate`, plus
/// `DPATTN_STATUS_INFEASIBLE` if the calibration fails. Thread-safe; no shared state.
///
/// # Safety
/// `params` must be NULL or readable; `out_sigma` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_noise_floor(
    params: *const dpattn_dp_forward_params,
    out_sigma: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_sigma, "out_sigma")?;
        // SAFETY: forwarded caller contract.
        let s = unsafe { params_arg(params) }?.noise_floor()?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// The `(ε, δ)` the whole plan of `releases` releases satisfies, which an approximate-DP
/// ledger is charged once per input before its first release: the budget under the derived
/// rule; under the released-code rule the effective ε of its noise against the true
/// sensitivity (`docs/PAPERS.md` T3-G: nominal 8 is 19.121181). Errors as
/// `dpattn_dp_forward_noise_floor`; outputs written only on success. Thread-safe; no shared state.
///
/// # Safety
/// `params` must be NULL or readable; the out-pointers NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_guarantee(
    params: *const dpattn_dp_forward_params,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let oe = Out::new(out_epsilon, "out_epsilon")?;
        let od = Out::new(out_delta, "out_delta")?;
        // SAFETY: forwarded caller contract.
        let g = unsafe { params_arg(params) }?.guarantee()?;
        // SAFETY: both checked non-NULL; writable per the caller's contract.
        unsafe {
            oe.write(g.epsilon().get());
            od.write(g.delta().get());
        }
        Ok(())
    })
}

/// `*out_rho` = the exact zCDP cost of ONE release, `ρ = S₂²/(2σ²)` with the true `S₂`
/// and σ the noise floor (rounded up); `k` releases cost `kρ`. This is what a zCDP or RDP
/// ledger is charged per release. Errors as `dpattn_dp_forward_noise_floor`. Thread-safe;
/// no shared state.
///
/// # Safety
/// `params` must be NULL or readable; `out_rho` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_release_rho(
    params: *const dpattn_dp_forward_params,
    out_rho: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_rho, "out_rho")?;
        // SAFETY: forwarded caller contract.
        let r = unsafe { params_arg(params) }?.release_rho()?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(r.get()) };
        Ok(())
    })
}

/// Checks noise factors against the params' shape and Theorem 6 (core `check_factors`):
/// accepted only if `σ_min(U)·σ_min(V) ≥` the noise floor, which goes to `*out_floor`.
/// Returns `DPATTN_STATUS_SHAPE_MISMATCH` for std arrays of the wrong length,
/// `DPATTN_STATUS_NON_FINITE` / `DPATTN_STATUS_OUT_OF_RANGE` for a std that is not finite
/// and positive, `DPATTN_STATUS_INFEASIBLE` when Theorem 6 fails or the sampler's bounded
/// support would be visible at this ε (about ε > 20 at δ = 1e-5), the errors of
/// `dpattn_dp_forward_validate`, `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared
/// state.
///
/// # Safety
/// `params`, `factors` NULL or readable (and the std pointers valid for their lengths);
/// `out_floor` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_check_factors(
    params: *const dpattn_dp_forward_params,
    factors: *const dpattn_dp_forward_factors,
    out_floor: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_floor, "out_floor")?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        // SAFETY: forwarded caller contract.
        let f = unsafe { factors_arg(factors, None) }?;
        let floor = dpf::check_factors(&p, &f)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(floor) };
        Ok(())
    })
}

/// `*out_len` = the `double` scratch `dpattn_dp_forward` needs for sequences of
/// `tokens × dim` with these factors: 0 for i.i.d. and diagonal noise (the only kinds this
/// ABI offers; the query exists so callers stay correct if matrix factors are added).
/// Returns `DPATTN_STATUS_NULL_ARGUMENT` or `DPATTN_STATUS_OUT_OF_RANGE` (unknown kind).
/// Thread-safe; no shared state.
///
/// # Safety
/// `factors` NULL or readable (std pointers valid for their lengths); `out_len` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_scratch_len(
    factors: *const dpattn_dp_forward_factors,
    tokens: usize,
    dim: usize,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        // SAFETY: forwarded caller contract.
        let f = unsafe { factors_arg(factors, None) }?;
        let n = dpf::dp_forward_scratch_len(&f, tokens, dim);
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Clips or normalises `x` (`rows × cols`, `f32` or `f64`, any row stride ≥ cols) in place,
/// block by block: a block is `block_rows` consecutive rows (one sequence) for Frobenius
/// clipping and one row for row clipping. After the call every block has exact Euclidean
/// norm `≤ C`, rounding included. A row holding NaN or ±∞ is set to the zero row first
/// (private data is sanitised, never refused; the zero row is inside the ball).
/// `*out_report` receives the number of rescaled blocks, the largest norm seen and the
/// number of sanitised rows — private data, keep it on the data owner's side.
///
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for `C ∉ [1e-100, 1e100]`, `block_rows = 0`,
/// `row_stride < cols` with several rows, an unknown `region`/`mode`, or a dtype other than
/// F32/F64; `DPATTN_STATUS_SHAPE_MISMATCH` for zero columns or `rows` not a multiple of
/// `block_rows`; `DPATTN_STATUS_BUFFER_TOO_SHORT`; `DPATTN_STATUS_NULL_ARGUMENT`;
/// `DPATTN_STATUS_MISALIGNED`. `x` is untouched on error. Thread-safe; no shared state.
///
/// # Safety
/// `x` must be NULL or valid for reads and writes of `x_len` elements of `dtype`, not
/// accessed by anyone else during the call; `out_report` NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_clip_hidden(
    x: *mut c_void,
    x_len: usize,
    dtype: dpattn_dtype,
    rows: usize,
    cols: usize,
    row_stride: usize,
    block_rows: usize,
    region_kind: u32,
    mode_kind: u32,
    clip_norm: f64,
    out_report: *mut dpattn_dp_forward_clip_report,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_report, "out_report")?;
        let (region, mode) = (region(region_kind)?, mode(mode_kind)?);
        let n = matrix_extent("x", x_len, rows, cols, row_stride)?;
        let r = match dtype {
            DPATTN_DTYPE_F32 => {
                // SAFETY: forwarded caller contract (`n <= x_len`).
                let data = unsafe { slice_mut(x.cast::<f32>(), n, "x") }?;
                let m = MatMut::new(data, rows, cols, row_stride)?;
                dpf::clip_hidden(m, block_rows, region, mode, clip_norm)?
            }
            DPATTN_DTYPE_F64 => {
                // SAFETY: as above.
                let data = unsafe { slice_mut(x.cast::<f64>(), n, "x") }?;
                let m = MatMut::new(data, rows, cols, row_stride)?;
                dpf::clip_hidden(m, block_rows, region, mode, clip_norm)?
            }
            v => return Err(unknown("dtype", v, "DPATTN_DTYPE_F32 (0), _F64 (1)")),
        };
        let report =
            dpattn_dp_forward_clip_report::of(r.scaled, r.max_norm, r.private_sanitized_rows());
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(report) };
        Ok(())
    })
}

/// The DP-Forward hook: `x ← clip_C(x) + Z` in place for every sequence of a batch. `x`
/// is `(batch·tokens) × dim` (`rows = batch·tokens`, sequences stacked along rows, any
/// row stride ≥ dim), `f32` or `f64`. Noise `Z = U·N·Vᵀ` is i.i.d. (`σ` = the noise
/// floor, the paper's Eq. 6) or diagonal (`factors`); noise element `(r, j)` is element
/// `r·dim + j` of the standard-normal draw of one fresh stream id of `session` (its
/// position before the call, `dpattn_session_position`; `docs/RANDOMNESS.md` §5.4). The id
/// is used up even when the call fails, so no two releases share noise (equal noise on two
/// matrices would reveal their difference).
///
/// **Guarantee** (the paper's Theorems 3 and 6 with Algorithm 1's exact calibration;
/// `docs/PAPERS.md` §3.6 and §3.7): each
/// sequence's `k = releases` releases together are `(ε, δ)`-DP under the configured
/// neighbour relation — any two sequences with the same label (SeqLDP, `S₂ = 2C`), or
/// matrices differing in `c` rows (token level, embedding position only). Sequences of one
/// batch are different inputs (parallel composition). \[FIX\] P3-1, P3-2: sensitivity `2C`, not
/// the paper's/code's `C`; \[FIX\] P3-6: the `k` releases are composed. Labels are not
/// protected (use `dpattn_dp_forward_randomize_labels`). The guarantee is local only while
/// `f` is frozen or updated without the raw inputs (P3-5). Floating point: the low-order
/// bits are not covered by the proof (P3-18); calibrations where the sampler's bounded
/// support would be visible are refused.
///
/// **Accounting.** The session's ledger must be kept for the plan's privacy unit: one
/// sequence (`DPATTN_UNIT_SEQUENCE`) for sequence neighbours, or groups of at most
/// `neighbour_rows` tokens (`DPATTN_UNIT_TOKENS`, `c ≤ neighbour_rows`) for token-level
/// neighbours; another unit is refused with `DPATTN_STATUS_UNIT_MISMATCH`. It is charged
/// after every check and before `x` is touched:
/// * an approximate-DP ledger (`dpattn_ledger_new_approx`): `(ε, δ)` of
///   `dpattn_dp_forward_guarantee`, only for a plan of one release (`releases = 1`); with
///   `releases > 1` the call fails with `DPATTN_STATUS_UNSUPPORTED` (the plan composes
///   exactly only as a whole: use a zCDP or RDP ledger);
/// * a zCDP or RDP ledger (`dpattn_ledger_new_zcdp` / `_new_rdp`): a zCDP charge of the
///   `ρ` of `dpattn_dp_forward_release_rho` (one release), for any `releases`.
///
/// A refused charge returns the ledger's status (`DPATTN_STATUS_INFEASIBLE` over budget) with `x`,
/// `*out_report` and the ledger unchanged. The session and its ledger are locked for the whole call
/// (concurrent calls from other threads wait). `*out_report` receives the clip report (private
/// data). A row of `x` holding NaN or ±∞ is released as the zero row plus noise, never refused
/// (counted in `private_sanitized_rows`). To replay a release for an audit, run it on a
/// `dpattn_session_new_for_replay` session (the master key, the logged epoch and stream id, a NULL
/// ledger): the output is reproduced bit for bit and nothing is charged.
///
/// Returns the errors of `dpattn_dp_forward_check_factors`; `DPATTN_STATUS_SHAPE_MISMATCH`
/// when `cols ≠ dim` or `rows` is not a positive multiple of `tokens`;
/// `DPATTN_STATUS_SCRATCH_TOO_SMALL`; `DPATTN_STATUS_SIZE_OVERFLOW` when
/// `rows·dim` overflows or the session's stream ids are used up;
/// `DPATTN_STATUS_UNSUPPORTED` for an approximate-DP ledger with `releases > 1`;
/// `DPATTN_STATUS_INFEASIBLE` for a charge that does not fit;
/// `DPATTN_STATUS_UNIT_MISMATCH` for a ledger of another unit;
/// `DPATTN_STATUS_INVALID_HANDLE` for a freed `session`;
/// `DPATTN_STATUS_OUT_OF_RANGE` for a dtype other than F32/F64;
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`, `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_ALIASING` (scratch overlapping `x` or the
/// factors). `x` is untouched on every error. Allocation-free. Thread-safe; no shared
/// state.
///
/// ```c
/// dpattn_dp_forward_params p;
/// dpattn_dp_forward_params_default(&p);
/// p.epsilon = 8.0; p.tokens = 128; p.dim = 768;
/// dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, NULL, 0, NULL, 0};
/// dpattn_privacy_unit sequence = {DPATTN_UNIT_SEQUENCE, 0};
/// dpattn_ledger *ledger = NULL;
/// dpattn_session *session = NULL;
/// dpattn_ledger_new_approx(sequence, 8.0, 1e-5, &ledger);
/// dpattn_session_new(ledger, &session); // a master key from the operating system
/// dpattn_dp_forward_clip_report rep;
/// // hidden: float[batch * 128 * 768], released in place
/// dpattn_status s = dpattn_dp_forward(hidden, batch * 128 * 768, DPATTN_DTYPE_F32,
///     batch * 128, 768, 768, &p, &iid, session, NULL, 0, &rep);
/// dpattn_session_free(session);
/// dpattn_ledger_free(ledger);
/// ```
///
/// # Safety
/// `x` NULL or valid for reads and writes of `x_len` elements of `dtype`, not accessed by
/// anyone else during the call; `params`, `factors` NULL or readable (factor pointers
/// valid for their lengths); `scratch` NULL or valid for `scratch_len` writes;
/// `out_report` NULL or writable; `session` NULL or a value returned by
/// `dpattn_session_new*` / `_restore` (a freed one is detected).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward(
    x: *mut c_void,
    x_len: usize,
    dtype: dpattn_dtype,
    rows: usize,
    cols: usize,
    row_stride: usize,
    params: *const dpattn_dp_forward_params,
    factors: *const dpattn_dp_forward_factors,
    session: *mut dpattn_session,
    scratch: *mut f64,
    scratch_len: usize,
    out_report: *mut dpattn_dp_forward_clip_report,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_report, "out_report")?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { params_arg(params) }?;
        let n = matrix_extent("x", x_len, rows, cols, row_stride)?;
        let elem = match dtype {
            DPATTN_DTYPE_F32 => 4usize,
            DPATTN_DTYPE_F64 => 8,
            v => return Err(unknown("dtype", v, "DPATTN_DTYPE_F32 (0), _F64 (1)")),
        };
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let f = unsafe { factors_arg(factors, Some(&mut bufs)) }?;
        bufs.output("x", x.cast::<u8>(), n.saturating_mul(elem));
        bufs.output("scratch", scratch, scratch_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; disjoint from every other buffer (checked).
        let scratch = unsafe { slice_mut(scratch, scratch_len, "scratch") }?;
        let r = if elem == 4 {
            // SAFETY: forwarded caller contract (`n <= x_len`), disjoint (checked).
            let data = unsafe { slice_mut(x.cast::<f32>(), n, "x") }?;
            let m = MatMut::new(data, rows, cols, row_stride)?;
            with_session(session, dpf::STREAMS, |draw, l| {
                Ok(dpf::dp_forward_keyed(m, &p, &f, draw, 0, l, scratch)?)
            })?
        } else {
            // SAFETY: as above.
            let data = unsafe { slice_mut(x.cast::<f64>(), n, "x") }?;
            let m = MatMut::new(data, rows, cols, row_stride)?;
            with_session(session, dpf::STREAMS, |draw, l| {
                Ok(dpf::dp_forward_keyed(m, &p, &f, draw, 0, l, scratch)?)
            })?
        };
        let report =
            dpattn_dp_forward_clip_report::of(r.scaled, r.max_norm, r.private_sanitized_rows());
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(report) };
        Ok(())
    })
}

/// k-ary randomized response at `ε₂` over labels `0..classes`, in place: label `i` is
/// kept with probability `≤ e^{ε₂}/(e^{ε₂} + k − 1)` and otherwise replaced by one of the
/// other `k − 1` uniformly, using the stream window of logical index `first + i` of
/// `(key, stream)` (windows start at word 2⁶⁷, never shared with hidden-state noise).
///
/// **Guarantee** (Theorem 4): `ε₂`-DP (pure) for each label under "any two labels"; with
/// a sequence release at `(ε₁, δ)` the pair is `(ε₁ + ε₂, δ)`-LDP
/// (`dpattn_dp_forward_full_ldp_budget`). Randomize once and reuse the noisy label.
///
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for `classes ∉ [2, 32768]`, `ε₂ < 1e-9` or not
/// finite, a label `≥ classes` (data-dependent; nothing is changed: every label is checked
/// first), or a window past the stream's end; `DPATTN_STATUS_SIZE_OVERFLOW` for
/// `first + len > 2⁶¹`; `DPATTN_STATUS_RANDOMNESS_EXHAUSTED` (probability < 2⁻¹⁰⁰⁰; labels
/// before the failing one are then already randomized); `DPATTN_STATUS_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `labels` NULL or valid for reads and writes of `len` values, accessed by nobody else
/// during the call; `key` NULL or readable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_randomize_labels(
    labels: *mut u32,
    len: usize,
    epsilon: f64,
    classes: u32,
    key: *const dpattn_key,
    stream: u64,
    first: u64,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?.to_core();
        let rr = RandomizedResponse::new(Epsilon::new(epsilon)?, classes)?;
        // SAFETY: forwarded caller contract; the only buffer of the call.
        let labels = unsafe { slice_mut(labels, len, "labels") }?;
        rr.randomize(labels, &KeyedStream::new(&key, stream), first)?;
        Ok(())
    })
}

/// The keep probability `e^{ε₂}/(e^{ε₂} + k − 1)` (ideal; the realised one is at most this)
/// and the realised flip probability `T/2⁶⁴` (at least the ideal `1 − keep`) of k-ary
/// randomized response. `docs/PAPERS.md` T3-J: ε₂ = ln 9, k = 2 keeps with probability 0.9.
/// Errors as `dpattn_dp_forward_randomize_labels` for `epsilon`/`classes`. Thread-safe; no
/// shared state.
///
/// # Safety
/// The out-pointers must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_rr_probabilities(
    epsilon: f64,
    classes: u32,
    out_keep: *mut f64,
    out_flip: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let ok = Out::new(out_keep, "out_keep")?;
        let of = Out::new(out_flip, "out_flip")?;
        let rr = RandomizedResponse::new(Epsilon::new(epsilon)?, classes)?;
        // SAFETY: both checked non-NULL; writable per the caller's contract.
        unsafe {
            ok.write(rr.keep_probability());
            of.write(rr.flip_probability());
        }
        Ok(())
    })
}

/// Randomized response restricted to a public candidate set (RR with a prior, Ghazi et
/// al. 2021): if `label` is a candidate, `|candidates|`-ary randomized response over the
/// candidates; otherwise a uniform candidate. `ε₂`-DP for the label when the candidates do
/// not depend on it. Label `index` uses the same stream window as
/// `dpattn_dp_forward_randomize_labels`. The result (always a candidate) goes to
/// `*out_label`.
///
/// Returns `DPATTN_STATUS_OUT_OF_RANGE` for an empty set, more than 32768 or repeated
/// candidates, or `ε₂ < 1e-9` / not finite; `DPATTN_STATUS_SIZE_OVERFLOW` for an index past
/// the stream's label windows; `DPATTN_STATUS_RANDOMNESS_EXHAUSTED`;
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `candidates` NULL or valid for `candidates_len` reads; `key` NULL or readable;
/// `out_label` NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_randomize_label_in(
    label: u32,
    candidates: *const u32,
    candidates_len: usize,
    epsilon: f64,
    key: *const dpattn_key,
    stream: u64,
    index: u64,
    out_label: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_label, "out_label")?;
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?.to_core();
        // SAFETY: forwarded caller contract.
        let c = unsafe { slice(candidates, candidates_len, "candidates") }?;
        let s = KeyedStream::new(&key, stream);
        let l = dpf::randomize_label_in(label, c, Epsilon::new(epsilon)?, &s, index)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(l) };
        Ok(())
    })
}

/// Theorem 4's budget for a sequence released at `(ε₁, δ)` and its label randomized at
/// `ε₂`: `(ε₁ + ε₂, δ)`-LDP (basic composition, ε rounded up). Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` for ε ≤ 0 / not finite, δ ∉ [0, 1) or an overflowing sum;
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// The out-pointers must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_full_ldp_budget(
    sequence_epsilon: f64,
    sequence_delta: f64,
    label_epsilon: f64,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let oe = Out::new(out_epsilon, "out_epsilon")?;
        let od = Out::new(out_delta, "out_delta")?;
        let b = dpf::full_ldp_budget(
            PrivacyBudget::new(sequence_epsilon, sequence_delta)?,
            Epsilon::new(label_epsilon)?,
        )?;
        // SAFETY: both checked non-NULL; writable per the caller's contract.
        unsafe {
            oe.write(b.epsilon().get());
            od.write(b.delta().get());
        }
        Ok(())
    })
}

/// The per-entry std of the i.i.d. MVG baseline (Chanyaswad et al. 2018, paper Theorem 2)
/// for an `n × d` query with L2 sensitivity `s2` and `γ = sup ‖f‖_F` (`docs/PAPERS.md`
/// §3.4, MVG): `Var = √(nd)·4α²/(−β + √(β² + 8αε))²`. For comparison only (T3-H: `n = 128`,
/// `d = 768`, ε = 8, δ = 1e-5, `S = γ = 1` gives 2.13903e7, against aMGM's 0.6). Returns
/// `DPATTN_STATUS_OUT_OF_RANGE` for ε not finite and positive, δ ∉ (0, 1), `s2` or `γ`
/// not finite and positive, or a zero dimension; `DPATTN_STATUS_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_std` must be NULL or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_mvg_iid_std(
    epsilon: f64,
    delta: f64,
    n: usize,
    d: usize,
    s2: f64,
    gamma: f64,
    out_std: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_std, "out_std")?;
        let s = dpattn_paper::dp_forward::mvg_iid_std(epsilon, delta, n, d, s2, gamma)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// A certified upper bound on `σ_max(W)` for `W` (`rows × cols` doubles, any row stride ≥
/// cols): `min(‖W‖_F, √(‖W‖₁‖W‖_∞))`, every sum rounded up. Use it as the Lipschitz
/// constant of a linear map between the clip and the noise (\[FIX\] `docs/PAPERS.md` P3-3: release
/// `X·[W^Q|W^K|W^V]` once with sensitivity `2C·σ̄_max`). Returns
/// `DPATTN_STATUS_NON_FINITE` for NaN/±∞, `DPATTN_STATUS_OUT_OF_RANGE` for an empty `W`
/// or `row_stride < cols` with several rows, `DPATTN_STATUS_BUFFER_TOO_SHORT`,
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_MISALIGNED`. Thread-safe; no shared state.
///
/// # Safety
/// `w` NULL or valid for `w_len` reads; `out_bound` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_forward_spectral_norm_upper_bound(
    w: *const f64,
    w_len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    out_bound: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_bound, "out_bound")?;
        if rows > 1 && cols > 0 && row_stride < cols {
            return Err(Error::OutOfRange {
                name: "row_stride",
                value: row_stride as f64,
                allowed: ">= cols",
            }
            .into());
        }
        let n = matrix_extent("w", w_len, rows, cols, row_stride)?;
        // SAFETY: forwarded caller contract (`n <= w_len`).
        let data = unsafe { slice(w, n, "w") }?;
        let b = dpf::spectral_norm_upper_bound(MatRef::new(data, rows, cols, row_stride)?)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(b) };
        Ok(())
    })
}

/// Test helpers shared by the modules whose entry points take a `dpattn_ledger`.
#[cfg(test)]
pub(crate) mod ledger_testing {
    use dpattn_core::accounting::composition::Rho;
    use dpattn_core::accounting::ledger::{Amount, Ledger};
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::{Delta, Epsilon, PrivacyBudget};

    use crate::ledger::{
        dpattn_amount, dpattn_ledger, dpattn_ledger_charges, dpattn_ledger_free,
        dpattn_ledger_new_approx, dpattn_ledger_new_rdp, dpattn_ledger_new_zcdp,
        dpattn_ledger_spent, dpattn_privacy_unit,
    };
    use crate::status::dpattn_status;

    /// A ledger kind and total.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Kind {
        Approx(f64, f64),
        Zcdp(f64),
        Rdp(f64, f64),
    }

    /// A C ledger handle and a core ledger with the same unit and total.
    pub(crate) fn pair(unit: PrivacyUnit, kind: Kind) -> (*mut dpattn_ledger, Ledger) {
        let mut h = std::ptr::null_mut();
        let u = dpattn_privacy_unit::from_core(unit);
        // SAFETY: valid out-pointer.
        let (st, core) = unsafe {
            match kind {
                Kind::Approx(e, d) => (
                    dpattn_ledger_new_approx(u, e, d, &mut h),
                    Ledger::new_approx(unit, PrivacyBudget::new(e, d).unwrap()),
                ),
                Kind::Zcdp(r) => (
                    dpattn_ledger_new_zcdp(u, r, &mut h),
                    Ledger::new_zcdp(unit, Rho::new(r).unwrap()),
                ),
                Kind::Rdp(e, d) => (
                    dpattn_ledger_new_rdp(u, e, d, &mut h),
                    Ledger::new_rdp(unit, Epsilon::new(e).unwrap(), Delta::new(d).unwrap())
                        .unwrap(),
                ),
            }
        };
        assert_eq!(st, dpattn_status::Ok);
        (h, core)
    }

    /// What the handle reports: spent amount and number of accepted charges.
    pub(crate) fn state(h: *const dpattn_ledger) -> (dpattn_amount, u64) {
        let mut a = dpattn_amount { kind: 9, epsilon: 0.0, delta: 0.0, rho: 0.0 };
        let mut n = 0;
        // SAFETY: valid out-pointers; `h` is a live handle.
        unsafe {
            assert_eq!(dpattn_ledger_spent(h, &mut a), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_charges(h, &mut n), dpattn_status::Ok);
        }
        (a, n)
    }

    /// The handle's spent amount and charge count equal the core ledger's, bit for bit.
    pub(crate) fn assert_same(h: *const dpattn_ledger, core: &Ledger) {
        let (a, n) = state(h);
        let c: dpattn_amount = core.spent().into();
        assert_eq!(a.kind, c.kind);
        for (x, y) in [(a.epsilon, c.epsilon), (a.delta, c.delta), (a.rho, c.rho)] {
            assert_eq!(x.to_bits(), y.to_bits(), "{a:?} vs {c:?}");
        }
        assert_eq!(n, core.charges());
    }

    /// The handle has accepted no charge.
    pub(crate) fn assert_untouched(h: *const dpattn_ledger) {
        let (a, n) = state(h);
        assert_eq!(n, 0);
        let zero = match a.kind {
            1 => a.rho,
            _ => a.epsilon,
        };
        assert_eq!(zero, 0.0, "{a:?}");
    }

    /// A handle that was freed (its id is never reused).
    pub(crate) fn freed() -> *mut dpattn_ledger {
        let (h, _) = pair(PrivacyUnit::Sequence, Kind::Zcdp(1.0));
        // SAFETY: live handle, freed once.
        unsafe { dpattn_ledger_free(h) };
        h
    }

    /// Frees a handle made by [`pair`].
    pub(crate) fn free(h: *mut dpattn_ledger) {
        // SAFETY: a live handle (or an ignored value).
        unsafe { dpattn_ledger_free(h) };
    }

    /// `true` for a spent amount that is not zero.
    pub(crate) fn nonzero(a: Amount) -> bool {
        match a {
            Amount::Approx { epsilon, .. } | Amount::Rdp { epsilon, .. } => epsilon > 0.0,
            Amount::Zcdp { rho } => rho > 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ledger_testing::{self as lt, Kind};
    use super::*;
    use crate::last_error::last_error_string;
    use crate::ledger::dpattn_ledger;
    use crate::session::{dpattn_session, session_testing as ss};
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::Draw;
    use std::ptr::{null, null_mut};

    fn params(tokens: usize, dim: usize) -> dpattn_dp_forward_params {
        let mut p = std::mem::MaybeUninit::uninit();
        // SAFETY: writable local.
        assert_eq!(unsafe { dpattn_dp_forward_params_default(p.as_mut_ptr()) }, dpattn_status::Ok);
        // SAFETY: initialised by the call above.
        let mut p = unsafe { p.assume_init() };
        p.tokens = tokens;
        p.dim = dim;
        p
    }

    const IID: dpattn_dp_forward_factors = dpattn_dp_forward_factors {
        kind: DPATTN_DP_FORWARD_FACTORS_IID,
        row_std: null(),
        row_std_len: 0,
        col_std: null(),
        col_std_len: 0,
    };

    fn key(b: u8) -> dpattn_key {
        dpattn_key { bytes: [b; 32] }
    }

    /// The epoch of the replay sessions of these tests.
    const EPOCH: u64 = 0xD9F0;

    /// A replay session of master key `[b; 32]` at [`EPOCH`], next stream id 3, charging
    /// `ledger` (NULL: none). Its first release draws with `Draw { key: &draw_key(b),
    /// stream: 3 }`.
    fn session(b: u8, ledger: *mut dpattn_ledger) -> *mut dpattn_session {
        ss::replay(b, EPOCH, 3, ledger)
    }

    fn draw_key(b: u8) -> NoiseKey {
        ss::drawing_key(b, EPOCH)
    }

    #[test]
    fn hook_equals_the_core_bit_for_bit() {
        let mut p = params(4, 8);
        p.epsilon = 4.0;
        let core = p.to_core().unwrap();
        let x0: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut a = x0.clone();
        let mut rep = dpattn_dp_forward_clip_report::of(9, 0.0, 9);
        let sess = session(7, null_mut());
        // SAFETY: valid buffers and structs.
        let s = unsafe {
            dpattn_dp_forward(
                a.as_mut_ptr().cast(),
                a.len(),
                DPATTN_DTYPE_F32,
                8,
                8,
                8,
                &p,
                &IID,
                sess,
                null_mut(),
                0,
                &mut rep,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        assert_eq!(ss::position(sess), (EPOCH, 3 + dpf::STREAMS));
        let mut b = x0.clone();
        let r = dpf::dp_forward_keyed::<f32>(
            MatMut::from_row_major(&mut b, 8, 8).unwrap(),
            &core,
            &NoiseFactors::Iid,
            Draw { key: &draw_key(7), stream: 3 },
            0,
            None,
            &mut [],
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        assert_eq!((rep.scaled, rep.max_norm), (r.scaled, r.max_norm));
        // The next release of the session draws on the next stream id: other noise.
        let mut a2 = x0.clone();
        // SAFETY: valid buffers and structs.
        let s = unsafe {
            dpattn_dp_forward(
                a2.as_mut_ptr().cast(),
                a2.len(),
                DPATTN_DTYPE_F32,
                8,
                8,
                8,
                &p,
                &IID,
                sess,
                null_mut(),
                0,
                &mut rep,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        assert_ne!(bits(&a2), bits(&a));
        ss::free(sess);
        // Diagonal factors, f64, strided.
        let rows = [3.0f64; 4];
        let cols = [2.0f64; 8];
        let f = dpattn_dp_forward_factors {
            kind: DPATTN_DP_FORWARD_FACTORS_DIAGONAL,
            row_std: rows.as_ptr(),
            row_std_len: 4,
            col_std: cols.as_ptr(),
            col_std_len: 8,
        };
        let x0: Vec<f64> = (0..4 * 10).map(|i| i as f64 * 0.1).collect();
        let mut a = x0.clone();
        let sess = session(1, null_mut());
        // SAFETY: valid buffers and structs.
        let s = unsafe {
            dpattn_dp_forward(
                a.as_mut_ptr().cast(),
                a.len(),
                DPATTN_DTYPE_F64,
                4,
                8,
                10,
                &p,
                &f,
                sess,
                null_mut(),
                0,
                &mut rep,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        ss::free(sess);
        let mut b = x0.clone();
        let cf = NoiseFactors::Diagonal { row_std: &rows, col_std: &cols };
        dpf::dp_forward_keyed::<f64>(
            MatMut::new(&mut b, 4, 8, 10).unwrap(),
            &core,
            &cf,
            Draw { key: &draw_key(1), stream: 3 },
            0,
            None,
            &mut [],
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(&a[8..10], &x0[8..10], "stride padding untouched");
    }

    /// The hook on an 8 × 8 f32 batch of two sequences through a replay session of key
    /// `[7; 32]` charging `ledger`.
    fn hook_call(
        x: &mut [f32],
        p: &dpattn_dp_forward_params,
        ledger: *mut dpattn_ledger,
        rep: &mut dpattn_dp_forward_clip_report,
    ) -> dpattn_status {
        let sess = session(7, ledger);
        let st = hook_call_in(x, p, sess, rep);
        ss::free(sess);
        st
    }

    /// The hook on an 8 × 8 f32 batch of two sequences with `session`.
    fn hook_call_in(
        x: &mut [f32],
        p: &dpattn_dp_forward_params,
        session: *mut dpattn_session,
        rep: &mut dpattn_dp_forward_clip_report,
    ) -> dpattn_status {
        // SAFETY: valid buffers and structs; `session` is NULL or a (possibly freed) handle.
        unsafe {
            dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                x.len(),
                DPATTN_DTYPE_F32,
                8,
                8,
                8,
                p,
                &IID,
                session,
                null_mut(),
                0,
                rep,
            )
        }
    }

    #[test]
    fn hook_with_a_ledger_charges_exactly_what_the_core_charges() {
        let mut p = params(4, 8);
        p.epsilon = 4.0;
        let x0: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
        for kind in [Kind::Approx(8.0, 1e-4), Kind::Zcdp(10.0), Kind::Rdp(50.0, 1e-5)] {
            for releases in [1u32, 3] {
                p.releases = releases;
                let core = p.to_core().unwrap();
                let (h, mut cl) = lt::pair(PrivacyUnit::Sequence, kind);
                let mut a = x0.clone();
                let mut rep = dpattn_dp_forward_clip_report::of(9, 9.0, 9);
                let st = hook_call(&mut a, &p, h, &mut rep);
                let mut b = x0.clone();
                let r = dpf::dp_forward_keyed(
                    MatMut::from_row_major(&mut b, 8, 8).unwrap(),
                    &core,
                    &NoiseFactors::Iid,
                    Draw { key: &draw_key(7), stream: 3 },
                    0,
                    Some(&mut cl),
                    &mut [],
                );
                if matches!(kind, Kind::Approx(..)) && releases > 1 {
                    assert_eq!(st, dpattn_status::Unsupported);
                    assert!(r.is_err());
                    assert_eq!(a, x0);
                    assert_eq!(rep.scaled, 9);
                    lt::assert_untouched(h);
                } else {
                    assert_eq!(st, dpattn_status::Ok, "{kind:?}: {}", last_error_string());
                    let r = r.unwrap();
                    assert!(lt::nonzero(cl.spent()));
                    assert_eq!(
                        a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    );
                    assert_eq!((rep.scaled, rep.max_norm), (r.scaled, r.max_norm));
                }
                lt::assert_same(h, &cl);
                lt::free(h);
            }
        }
    }

    #[test]
    fn hook_refused_other_unit_or_freed_session_writes_nothing() {
        let mut p = params(4, 8);
        p.epsilon = 4.0;
        let x0: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
        for kind in [Kind::Approx(1.0, 1e-4), Kind::Zcdp(1e-3), Kind::Rdp(0.5, 1e-5)] {
            let (h, _) = lt::pair(PrivacyUnit::Sequence, kind);
            let mut a = x0.clone();
            let mut rep = dpattn_dp_forward_clip_report::of(9, 9.0, 9);
            assert_eq!(hook_call(&mut a, &p, h, &mut rep), dpattn_status::Infeasible, "{kind:?}");
            assert_eq!(a, x0);
            assert_eq!((rep.scaled, rep.max_norm), (9, 9.0));
            lt::assert_untouched(h);
            lt::free(h);
        }
        // The sequence-level plan protects one sequence; the token-level plan for c tokens
        // protects groups of up to c tokens: each refuses a ledger of another unit.
        let mut token_level = p;
        token_level.neighbours = DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS;
        token_level.neighbour_rows = 2;
        for (params, unit) in [
            (p, PrivacyUnit::TOKEN),
            (p, PrivacyUnit::Record),
            (token_level, PrivacyUnit::Sequence),
            (token_level, PrivacyUnit::tokens(3).unwrap()),
        ] {
            let (h, _) = lt::pair(unit, Kind::Approx(100.0, 1e-2));
            let mut a = x0.clone();
            let mut rep = dpattn_dp_forward_clip_report::of(9, 9.0, 9);
            let st = hook_call(&mut a, &params, h, &mut rep);
            assert_eq!(st, dpattn_status::UnitMismatch, "{unit:?}: {}", last_error_string());
            assert_eq!(a, x0);
            assert_eq!(rep.scaled, 9);
            lt::assert_untouched(h);
            lt::free(h);
        }
        // ... and accepts a ledger for its own unit (or, token level, for fewer tokens).
        for unit in [PrivacyUnit::tokens(2).unwrap(), PrivacyUnit::TOKEN] {
            let (h, _) = lt::pair(unit, Kind::Approx(100.0, 1e-2));
            let mut a = x0.clone();
            let mut rep = dpattn_dp_forward_clip_report::of(9, 9.0, 9);
            let st = hook_call(&mut a, &token_level, h, &mut rep);
            assert_eq!(st, dpattn_status::Ok, "{unit:?}: {}", last_error_string());
            lt::free(h);
        }
        let mut a = x0.clone();
        let mut rep = dpattn_dp_forward_clip_report::of(9, 9.0, 9);
        let sess = session(7, null_mut());
        ss::free(sess);
        assert_eq!(hook_call_in(&mut a, &p, sess, &mut rep), dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("session"));
        assert_eq!(hook_call_in(&mut a, &p, null_mut(), &mut rep), dpattn_status::NullArgument);
        assert!(last_error_string().contains("session"));
        assert_eq!(a, x0);
        assert_eq!(rep.scaled, 9);
    }

    #[test]
    fn scalars_equal_the_core() {
        let mut p = params(1, 768);
        p.epsilon = 8.0;
        p.position = DPATTN_DP_FORWARD_POSITION_POOLED;
        let core = p.to_core().unwrap();
        let (mut s, mut sig, mut e, mut d, mut rho) = (0.0, 0.0, 0.0, 0.0, 0.0);
        // SAFETY: valid locals.
        unsafe {
            assert_eq!(dpattn_dp_forward_sensitivity(&p, &mut s), dpattn_status::Ok);
            assert_eq!(dpattn_dp_forward_noise_floor(&p, &mut sig), dpattn_status::Ok);
            assert_eq!(dpattn_dp_forward_guarantee(&p, &mut e, &mut d), dpattn_status::Ok);
            assert_eq!(dpattn_dp_forward_release_rho(&p, &mut rho), dpattn_status::Ok);
        }
        assert_eq!(s, core.sensitivity().unwrap());
        assert_eq!(sig.to_bits(), core.noise_floor().unwrap().to_bits());
        assert_eq!(rho, core.release_rho().unwrap().get());
        assert_eq!((e, d), (8.0, 1e-5));
        let mut labels = [0u32, 1, 1, 0, 1];
        let mut expect = labels;
        // SAFETY: valid locals.
        let st = unsafe {
            dpattn_dp_forward_randomize_labels(labels.as_mut_ptr(), 5, 2.0, 2, &key(3), 1, 9)
        };
        assert_eq!(st, dpattn_status::Ok);
        RandomizedResponse::new(Epsilon::new(2.0).unwrap(), 2)
            .unwrap()
            .randomize(&mut expect, &KeyedStream::new(&NoiseKey::for_replay([3; 32]), 1), 9)
            .unwrap();
        assert_eq!(labels, expect);
    }

    #[test]
    fn hook_releases_a_non_finite_row_as_the_zero_row() {
        let p = params(2, 2);
        let run = |x: &mut [f64; 4]| {
            let mut rep = dpattn_dp_forward_clip_report::of(7, 7.0, 7);
            let sess = session(0, null_mut()); // the same session position for both runs
            // SAFETY: valid locals.
            let st = unsafe {
                dpattn_dp_forward(
                    x.as_mut_ptr().cast(),
                    4,
                    DPATTN_DTYPE_F64,
                    2,
                    2,
                    2,
                    &p,
                    &IID,
                    sess,
                    null_mut(),
                    0,
                    &mut rep,
                )
            };
            ss::free(sess);
            assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
            rep.private_sanitized_rows
        };
        let (mut bad, mut zeroed) = ([1.0, 2.0, 3.0, f64::NAN], [1.0, 2.0, 0.0, 0.0]);
        assert_eq!((run(&mut bad), run(&mut zeroed)), (1, 0));
        assert_eq!(bad.map(f64::to_bits), zeroed.map(f64::to_bits));
    }

    #[test]
    fn errors_leave_outputs_alone_and_name_the_argument() {
        let p = params(2, 2);
        let mut x = [1.0f64, 2.0, 3.0, 4.0];
        let mut rep = dpattn_dp_forward_clip_report::of(7, 7.0, 7);
        let sess = session(0, null_mut());
        let call = |x: &mut [f64], p: &dpattn_dp_forward_params, rep: &mut _, session, dtype| {
            // SAFETY: valid locals.
            unsafe {
                dpattn_dp_forward(
                    x.as_mut_ptr().cast(),
                    x.len(),
                    dtype,
                    2,
                    2,
                    2,
                    p,
                    &IID,
                    session,
                    null_mut(),
                    0,
                    rep,
                )
            }
        };
        let mut dummy = 0u8;
        let foreign = (&mut dummy as *mut u8).cast();
        assert_eq!(
            call(&mut x, &p, &mut rep, foreign, DPATTN_DTYPE_F64),
            dpattn_status::InvalidHandle
        );
        assert!(last_error_string().contains("session"));
        assert_eq!(
            call(&mut x, &p, &mut rep, null_mut(), DPATTN_DTYPE_F64),
            dpattn_status::NullArgument
        );
        assert!(last_error_string().contains("session"));
        assert_eq!(call(&mut x, &p, &mut rep, sess, 2), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("dtype"));
        let mut bad = p;
        bad.delta = 1.0;
        assert_eq!(call(&mut x, &bad, &mut rep, sess, DPATTN_DTYPE_F64), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("delta"));
        let mut bad = p;
        bad.region = 9;
        assert_eq!(call(&mut x, &bad, &mut rep, sess, DPATTN_DTYPE_F64), dpattn_status::OutOfRange);
        assert!(last_error_string().contains("region"));
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!((rep.scaled, rep.max_norm), (7, 7.0));
        // Scratch overlapping x.
        // SAFETY: valid locals (the overlap is detected before any view exists).
        let s = unsafe {
            dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                4,
                DPATTN_DTYPE_F64,
                2,
                2,
                2,
                &p,
                &IID,
                sess,
                x.as_mut_ptr().wrapping_add(2),
                1,
                &mut rep,
            )
        };
        assert_eq!(s, dpattn_status::Aliasing);
        // NULL out-param, NULL params, short buffer.
        // SAFETY: NULLs are reported before any access.
        unsafe {
            let s = dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                4,
                DPATTN_DTYPE_F64,
                2,
                2,
                2,
                &p,
                &IID,
                sess,
                null_mut(),
                0,
                null_mut(),
            );
            assert_eq!(s, dpattn_status::NullArgument);
            assert!(last_error_string().contains("out_report"));
            let s = dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                4,
                DPATTN_DTYPE_F64,
                2,
                2,
                2,
                null(),
                &IID,
                sess,
                null_mut(),
                0,
                &mut rep,
            );
            assert_eq!(s, dpattn_status::NullArgument);
            assert!(last_error_string().contains("params"));
            let s = dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                3,
                DPATTN_DTYPE_F64,
                2,
                2,
                2,
                &p,
                &IID,
                sess,
                null_mut(),
                0,
                &mut rep,
            );
            assert_eq!(s, dpattn_status::BufferTooShort);
            assert!(last_error_string().contains("`x`"));
            let s = dpattn_dp_forward(
                x.as_mut_ptr().cast(),
                usize::MAX,
                DPATTN_DTYPE_F64,
                usize::MAX,
                2,
                2,
                &p,
                &IID,
                sess,
                null_mut(),
                0,
                &mut rep,
            );
            assert_eq!(s, dpattn_status::SizeOverflow);
        }
        ss::free(sess);
        let mut out = 5.0;
        // SAFETY: valid locals.
        unsafe {
            let s = dpattn_dp_forward_mvg_iid_std(0.0, 1e-5, 1, 1, 1.0, 1.0, &mut out);
            assert_eq!(s, dpattn_status::OutOfRange);
            assert!(last_error_string().contains("epsilon"));
            let w = [1.0, f64::INFINITY];
            let s = dpattn_dp_forward_spectral_norm_upper_bound(w.as_ptr(), 2, 1, 2, 2, &mut out);
            assert_eq!(s, dpattn_status::NonFinite);
            assert!(last_error_string().contains("`w`"));
        }
        assert_eq!(out, 5.0);
    }
}
