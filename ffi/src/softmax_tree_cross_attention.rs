//! Paper 001's DPCrossAttention from C (`dpattn_core::softmax_tree_cross_attention`): the
//! private keys and values released once as noisy softmax trees and queried afterwards by
//! post-processing (docs/PRIVACY.md §4), behind the opaque handle
//! `dpattn_softmax_tree_cross_attention`. C prefix `dpattn_softmax_tree_cross_attention_`.

use dpattn_core::softmax_tree::{AdaptiveParams, SoftmaxTreeParams};
use dpattn_core::softmax_tree_cross_attention::{
    self as cross, BudgetSplit, DomainPolicy, SoftmaxTreeCrossAttention,
    SoftmaxTreeCrossAttentionParams,
};
use dpattn_core::{MatRef, NoiseMode, PrivacyBudget};

use crate::args::{Buffers, Out, flag, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, ffi_value, unknown};
use crate::handle::Handle;
use crate::session::{dpattn_session, with_session};
use crate::softmax_tree::{
    DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER, DPATTN_SOFTMAX_TREE_ACCOUNTING_TIGHT,
    DPATTN_SOFTMAX_TREE_COPIES_FIXED, DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING,
    DPATTN_SOFTMAX_TREE_COPIES_PAPER, DPATTN_SOFTMAX_TREE_QUERY_CLAMP,
    DPATTN_SOFTMAX_TREE_QUERY_REJECT, DPATTN_SOFTMAX_TREE_TEMPERATURE_CUSTOM,
    DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM, accounting_of, copies_of, query_policy_of,
    temperature_of,
};
use crate::status::dpattn_status;

// The structure-level choices are the softmax tree's (`DPATTN_SOFTMAX_TREE_*`), under
// shorter names and with the same values, decoded by the same functions.

/// `τ = 1/d`, the paper's Definition 1.1 (default).
pub const DPATTN_TEMPERATURE_ONE_OVER_DIM: u32 = DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM;
/// `[EXT]` `docs/PAPERS.md` P1-X6: `τ` = the `temperature` field (`> 0`, e.g. `1/√d`).
pub const DPATTN_TEMPERATURE_CUSTOM: u32 = DPATTN_SOFTMAX_TREE_TEMPERATURE_CUSTOM;
/// Algorithm 3 as printed (default); spends about `2ε/3` (`docs/PAPERS.md` P1-15).
pub const DPATTN_ACCOUNTING_PAPER: u32 = DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER;
/// `[EXT]` `docs/PAPERS.md` P1-X2: the feature structures share the budget exactly (less noise).
pub const DPATTN_ACCOUNTING_TIGHT: u32 = DPATTN_SOFTMAX_TREE_ACCOUNTING_TIGHT;
/// Public query coordinates outside `[0, R]` are refused (default).
pub const DPATTN_QUERY_REJECT: u32 = DPATTN_SOFTMAX_TREE_QUERY_REJECT;
/// Public query coordinates are clamped into `[0, R]` (NaN still refused).
pub const DPATTN_QUERY_CLAMP: u32 = DPATTN_SOFTMAX_TREE_QUERY_CLAMP;
/// `[FIX]` `docs/PAPERS.md` P1-14: `l` from a union bound over an ℓ∞ net; `copies_param` is the
/// Chebyshev multiple `k > √2` (default, `k = 10`).
pub const DPATTN_COPIES_NET_HOEFFDING: u32 = DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING;
/// The paper's `l = ⌈C r ln(d R/(ε_s p_f))⌉`; `copies_param` is `C > 0`.
pub const DPATTN_COPIES_PAPER: u32 = DPATTN_SOFTMAX_TREE_COPIES_PAPER;
/// A fixed `l = copies_fixed >= 1` (even values rounded up to odd).
pub const DPATTN_COPIES_FIXED: u32 = DPATTN_SOFTMAX_TREE_COPIES_FIXED;
/// Remark 4.2: `(ε/(d+1), ...)` per structure; the whole output is covered (default).
pub const DPATTN_SPLIT_PER_VECTOR: u32 = 0;
/// Algorithm 1 as printed: `ε/2` per structure; protects each output coordinate only.
pub const DPATTN_SPLIT_PER_ENTRY: u32 = 1;
/// Private entries outside the domain are clamped (NaN → 0): DP-preserving (default).
pub const DPATTN_DOMAIN_CLAMP: u32 = 0;
/// Private entries outside the domain are refused with `DPATTN_STATUS_DOMAIN_VIOLATION`.
/// **Not DP** (a data-dependent refusal): trusted pipelines only; show the error only to
/// the data holder.
pub const DPATTN_DOMAIN_REJECT: u32 = 1;

/// Public parameters of DPCrossAttention (paper 001 Algorithm 1). Fill with
/// `dpattn_softmax_tree_cross_attention_params_default` (the recommended configuration) and set
/// `epsilon`, `delta`, `delta_prime`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_softmax_tree_cross_attention_params {
    /// `R`: keys and queries lie in `[0, R]^d` (`R >= 1` when strict). Default 1.
    pub radius: f64,
    /// `R_w`: values lie in `[−R_w, R_w]` (`R_w >= 1` when strict). Default 1.
    pub weight_bound: f64,
    /// Total `ε` of the release (`(0, 1]` when strict). Default NaN: must be set.
    pub epsilon: f64,
    /// Total `δ` (`(0, 1)`). Default NaN: must be set.
    pub delta: f64,
    /// `δ′`, the advanced-composition slack (`(0, 1)`); the release is `(ε, δ + δ′)`-DP.
    /// Default NaN: must be set.
    pub delta_prime: f64,
    /// Composition constant `c` (`(0, 0.1)` strict, `(0, 0.7]` relaxed); default 0.09.
    pub c: f64,
    /// `ε_s`, the relative accuracy of the polynomial kernel (`(0, 0.1)` strict); 0.01.
    pub eps_s: f64,
    /// `DPATTN_TEMPERATURE_ONE_OVER_DIM` (default) or `_CUSTOM`.
    pub temperature_kind: u32,
    /// `τ` for `DPATTN_TEMPERATURE_CUSTOM`; ignored otherwise.
    pub temperature: f64,
    /// `DPATTN_ACCOUNTING_PAPER` (default) or `_TIGHT`.
    pub accounting: u32,
    /// 1: enforce the paper's parameter ranges (default); 0: relaxed ranges.
    pub strict: u32,
    /// `DPATTN_QUERY_REJECT` (default) or `_CLAMP`.
    pub query_policy: u32,
    /// Refuse to build when the memory estimate exceeds this (bytes); default 1 GiB.
    pub memory_limit_bytes: u64,
    /// `DPATTN_COPIES_NET_HOEFFDING` (default), `_PAPER` or `_FIXED`.
    pub copies_kind: u32,
    /// `k` (net Hoeffding, default 10) or `C` (paper); unused for `_FIXED`.
    pub copies_param: f64,
    /// `l` for `DPATTN_COPIES_FIXED`; unused otherwise (default 1).
    pub copies_fixed: u64,
    /// Failure probability `p_f` of the uniform accuracy statement; default 0.01.
    pub p_fail: f64,
    /// 1: `[FIX]` `docs/PAPERS.md` P1-13, snap query coordinates to the net before answering; 0
    /// (default).
    pub snap_to_net: u32,
    /// `DPATTN_SPLIT_PER_VECTOR` (default) or `_PER_ENTRY`.
    pub split: u32,
    /// 1 (default): `[EXT]` `docs/PAPERS.md` P1-X8, clamp `D̃` into `[n, n e^{z_max}]` and outputs
    /// into `[−R_w, R_w]` (post-processing); 0: Algorithm 1 as printed.
    pub clamp_outputs: u32,
    /// `DPATTN_DOMAIN_CLAMP` (default) or `DPATTN_DOMAIN_REJECT` (not DP).
    pub domain_policy: u32,
}

impl Default for dpattn_softmax_tree_cross_attention_params {
    fn default() -> Self {
        Self {
            radius: 1.0,
            weight_bound: 1.0,
            epsilon: f64::NAN,
            delta: f64::NAN,
            delta_prime: f64::NAN,
            c: 0.09,
            eps_s: 0.01,
            temperature_kind: DPATTN_TEMPERATURE_ONE_OVER_DIM,
            temperature: 1.0,
            accounting: DPATTN_ACCOUNTING_PAPER,
            strict: 1,
            query_policy: DPATTN_QUERY_REJECT,
            memory_limit_bytes: 1 << 30,
            copies_kind: DPATTN_COPIES_NET_HOEFFDING,
            copies_param: 10.0,
            copies_fixed: 1,
            p_fail: 0.01,
            snap_to_net: 0,
            split: DPATTN_SPLIT_PER_VECTOR,
            clamp_outputs: 1,
            domain_policy: DPATTN_DOMAIN_CLAMP,
        }
    }
}

/// # Safety
/// `ptr` must be NULL or readable for one struct.
unsafe fn decode_cross(
    ptr: *const dpattn_softmax_tree_cross_attention_params,
) -> Result<SoftmaxTreeCrossAttentionParams, FfiError> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { read(ptr, "params") }?;
    let temperature = temperature_of("params.temperature_kind", p.temperature_kind, p.temperature)?;
    let accounting = accounting_of("params.accounting", p.accounting)?;
    let query_policy = query_policy_of("params.query_policy", p.query_policy)?;
    let copies = copies_of("params.copies_kind", p.copies_kind, p.copies_param, p.copies_fixed)?;
    let split = match p.split {
        DPATTN_SPLIT_PER_VECTOR => BudgetSplit::PerVector,
        DPATTN_SPLIT_PER_ENTRY => BudgetSplit::PerEntry,
        v => return Err(unknown("params.split", v, "0 (per vector), 1 (per entry)")),
    };
    let domain_policy = match p.domain_policy {
        DPATTN_DOMAIN_CLAMP => DomainPolicy::Clamp,
        DPATTN_DOMAIN_REJECT => DomainPolicy::Reject,
        v => return Err(unknown("params.domain_policy", v, "0 (clamp), 1 (reject)")),
    };
    let tree = SoftmaxTreeParams {
        radius: p.radius,
        weight_bound: p.weight_bound,
        budget: PrivacyBudget::new(p.epsilon, p.delta)?,
        delta_prime: p.delta_prime,
        c: p.c,
        eps_s: p.eps_s,
        temperature,
        accounting,
        strict: flag("params.strict", p.strict)?,
        query_policy,
        memory_limit_bytes: p.memory_limit_bytes,
        noise_mode: NoiseMode::Exact,
    };
    Ok(SoftmaxTreeCrossAttentionParams {
        adaptive: AdaptiveParams {
            tree,
            copies,
            p_fail: p.p_fail,
            snap_to_net: flag("params.snap_to_net", p.snap_to_net)?,
        },
        split,
        clamp_outputs: flag("params.clamp_outputs", p.clamp_outputs)?,
        domain_policy,
    })
}

/// Fills `*out` with the recommended configuration (`SoftmaxTreeCrossAttentionParams::new` over the
/// paper's `SoftmaxTreeParams`): `R = R_w = 1`, `c = 0.09`, `ε_s = 0.01`, `τ = 1/d`, paper
/// accounting, strict ranges, queries outside the domain refused, 1 GiB memory limit,
/// net-Hoeffding copies with `k = 10`, `p_f = 0.01`, no snapping, per-vector split (Remark
/// 4.2), the output clamps of `docs/PAPERS.md` P1-X8, private data clamped; `epsilon`, `delta`,
/// `delta_prime` are NaN and must be set. Returns `DPATTN_STATUS_NULL_ARGUMENT` for a NULL `out`.
/// Thread-safe.
///
/// # Safety
/// `out` must be NULL or writable for one struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_params_default(
    out: *mut dpattn_softmax_tree_cross_attention_params,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { crate::args::write_default(out) }
}

/// The released `d + 1` DPTreeSoftmaxAdaptive structures of DPCrossAttention (opaque).
/// Handle rules: any thread may use it; concurrent calls on one handle are serialised;
/// use after `dpattn_softmax_tree_cross_attention_free` is `DPATTN_STATUS_INVALID_HANDLE`.
pub struct dpattn_softmax_tree_cross_attention {
    _private: [u8; 0],
}

impl Handle for dpattn_softmax_tree_cross_attention {
    type Inner = SoftmaxTreeCrossAttention;
    const NAME: &'static str = "dpattn_softmax_tree_cross_attention";
}

/// Reads a dense row-major `n × d` matrix of doubles, recorded as an input.
///
/// # Safety
/// A non-NULL `ptr` must be readable for `len` doubles for `'a`.
unsafe fn matrix<'a>(
    ptr: *const f64,
    len: usize,
    n: usize,
    d: usize,
    name: &'static str,
) -> Result<MatRef<'a, f64>, FfiError> {
    let want = n
        .checked_mul(d)
        .ok_or(FfiError::Core(dpattn_core::Error::SizeOverflow { what: "n * d" }))?;
    if len != want {
        return Err(FfiError::Core(dpattn_core::Error::ShapeMismatch {
            arg: name,
            axis: "length (n * d)",
            expected: want,
            got: len,
        }));
    }
    // SAFETY: forwarded caller contract.
    let data = unsafe { slice(ptr, len, name) }?;
    Ok(MatRef::from_row_major(data, n, d)?)
}

/// Releases DPCrossAttention (paper 001 Algorithm 1, Theorem 4.1; `docs/PAPERS.md` §1.9) for
/// private `keys` and `values` (both `n × d`, row-major doubles, lengths `n * d`), noised with
/// fresh randomness from `session` (one stream id; every node of every copy is an element of that
/// stream), and returns the handle in `*out`. Any number of public queries are then answered by
/// post-processing (`dpattn_softmax_tree_cross_attention_query`). **Allocates** (the structures;
/// `dpattn_softmax_tree_cross_attention_estimate_bytes` gives the size before building, and builds
/// over `memory_limit_bytes` are refused).
///
/// **Guarantee.** Neighbouring inputs differ in one token (row `j` of `K` and row `j` of `V`; `n`
/// public; privacy unit `DPATTN_UNIT_TOKENS` with 1 token). With `DPATTN_SPLIT_PER_VECTOR` the
/// whole release — every answer to every query — is `(ε, δ + δ′)`-DP; with `DPATTN_SPLIT_PER_ENTRY`
/// (Algorithm 1 as printed) each output coordinate is `(ε, δ + δ′)`-DP and the whole vector costs
/// up to `((d+1)ε/2, (d+1)(δ+δ′)/2)`; `dpattn_softmax_tree_cross_attention_achieved_privacy`
/// reports what is actually spent (`docs/PAPERS.md` P1-15). Private `K ∈ [0, R]^{n×d}`,
/// `V ∈ [−R_w, R_w]^{n×d}` are clamped (NaN → 0). Every node is released on its grid with exact
/// noise, so the guarantee holds for the floats returned. Accuracy is poor unless `n` is huge
/// (`docs/PAPERS.md` T1-K; see `dpattn_softmax_tree_cross_attention_estimate_error`).
///
/// **Accounting.** The session's ledger (kept for one token) is charged the whole-release `(ε, δ)`
/// that `dpattn_softmax_tree_cross_attention_achieved_privacy` reports (basic composition over the
/// `(d + 1) · l` copies; an approximate-DP charge with `δ > 0`, so only approximate-DP ledgers
/// accept it: zCDP and RDP ledgers refuse it with `DPATTN_STATUS_OUT_OF_RANGE`) after the
/// structures are built and before the handle is returned. A refused charge returns the ledger's
/// status (`DPATTN_STATUS_INFEASIBLE` over budget, `DPATTN_STATUS_UNIT_MISMATCH` for a ledger of
/// another unit), drops the structures, and leaves `*out` and the ledger unchanged (the stream id
/// is consumed). The session and its ledger are locked for the whole call (concurrent calls on them
/// wait). To replay a release for an audit, pass a session from `dpattn_session_new_for_replay`
/// (with a NULL ledger nothing is charged).
///
/// ```c
/// dpattn_softmax_tree_cross_attention_params p;
/// dpattn_softmax_tree_cross_attention_params_default(&p);
/// p.epsilon = 0.9; p.delta = 1e-6; p.delta_prime = 1e-6;
/// dpattn_softmax_tree_cross_attention *att = NULL;
/// if (dpattn_softmax_tree_cross_attention_new(K, n * d, V, n * d, n, d, &p, session, &att) == DPATTN_STATUS_OK) {
///     dpattn_softmax_tree_cross_attention_query(att, out, d, q, d, scratch, scratch_len, &info);
///     dpattn_softmax_tree_cross_attention_free(att);
/// }
/// ```
///
/// Status: `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_SHAPE_MISMATCH` (a length other than
/// `n * d`); `DPATTN_STATUS_OUT_OF_RANGE` (parameters outside their ranges, unknown enum
/// values, flags not 0/1, a vacuous composed budget); `DPATTN_STATUS_MEMORY_LIMIT`;
/// `DPATTN_STATUS_ALLOCATION_FAILED`; `DPATTN_STATUS_SIZE_OVERFLOW`;
/// `DPATTN_STATUS_DOMAIN_VIOLATION` only with `DPATTN_DOMAIN_REJECT` (data-dependent: show it
/// only to the data holder); the ledger's status for a refused charge;
/// `DPATTN_STATUS_INVALID_HANDLE` for a freed `session` (or ledger). `*out` is written only
/// on success. Thread-safe.
///
/// # Safety
/// `keys`/`values` NULL or readable for their lengths; `params` NULL or readable for one
/// struct; `out` NULL or writable for one pointer; `session` a value returned by
/// `dpattn_session_new*` (a freed one is detected).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_new(
    keys: *const f64,
    keys_len: usize,
    values: *const f64,
    values_len: usize,
    n: usize,
    d: usize,
    params: *const dpattn_softmax_tree_cross_attention_params,
    session: *mut dpattn_session,
    out: *mut *mut dpattn_softmax_tree_cross_attention,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract (all unsafe calls of this body).
        let k = unsafe { matrix(keys, keys_len, n, d, "keys") }?;
        // SAFETY: as above.
        let v = unsafe { matrix(values, values_len, n, d, "values") }?;
        // SAFETY: as above.
        let p = unsafe { decode_cross(params) }?;
        let att = with_session(session, cross::STREAMS, |draw, l| {
            Ok(SoftmaxTreeCrossAttention::new_keyed(k, v, &p, draw, l)?)
        })?;
        let h = dpattn_softmax_tree_cross_attention::into_handle(att);
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Releases a handle. NULL, an already freed handle or a foreign pointer is ignored.
/// Thread-safe (a call in flight on the handle finishes first).
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_cross_attention_free(
    att: *mut dpattn_softmax_tree_cross_attention,
) {
    ffi_value((), || {
        dpattn_softmax_tree_cross_attention::free(att);
    })
}

/// Writes the scratch (`double` elements) of `dpattn_softmax_tree_cross_attention_query`:
/// `r + d + l` (features, dimension, copies). Status: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe (handle rule).
///
/// # Safety
/// `out_len` must be NULL or writable for one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_query_scratch_len(
    att: *const dpattn_softmax_tree_cross_attention,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = dpattn_softmax_tree_cross_attention::lookup(att, "att")?
            .with(|a| a.query_scratch_len());
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// What a query reports besides its output row.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_softmax_tree_cross_attention_query_info {
    /// The denominator `D̃` used (after the clamp of `docs/PAPERS.md` P1-X8 when enabled).
    pub denominator: f64,
    /// 1 when the raw noisy `D̃` was not positive (without the P1-X8 clamp the outputs are then
    /// meaningless; with it, `D̃` was clamped to `n`), else 0.
    pub nonpositive_denominator: u32,
}

/// Answers one public query `q ∈ [0, R]^d` (`q_len == d`): `out[k] = Ã_k(q) / D̃(q)` (medians
/// over the copies), `out_len == d`. Post-processing of the release: costs no privacy. No
/// allocation. Status: `DPATTN_STATUS_NULL_ARGUMENT`; `DPATTN_STATUS_INVALID_HANDLE`;
/// `DPATTN_STATUS_SHAPE_MISMATCH` (lengths); `DPATTN_STATUS_SCRATCH_TOO_SMALL`;
/// `DPATTN_STATUS_NON_FINITE` / `DPATTN_STATUS_OUT_OF_RANGE` (a query coordinate NaN or outside
/// `[0, R]` under `DPATTN_QUERY_REJECT`); `DPATTN_STATUS_ALIASING`. `out` and `*out_info` are
/// written only on success. Thread-safe (handle rule).
///
/// # Safety
/// `out` writable for `out_len` doubles, `q` readable for `q_len`, `scratch` writable for
/// `scratch_len` (each may be NULL only with length 0), `out_info` NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_query(
    att: *const dpattn_softmax_tree_cross_attention,
    out: *mut f64,
    out_len: usize,
    q: *const f64,
    q_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
    out_info: *mut dpattn_softmax_tree_cross_attention_query_info,
) -> dpattn_status {
    ffi_status(|| {
        let info = Out::new(out_info, "out_info")?;
        let h = dpattn_softmax_tree_cross_attention::lookup(att, "att")?;
        // SAFETY: forwarded caller contract.
        let qs = unsafe { slice(q, q_len, "q") }?;
        let mut bufs = Buffers::default();
        bufs.input("q", q, q_len).output("out", out, out_len).output(
            "scratch",
            scratch,
            scratch_len,
        );
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; the outputs overlap nothing (checked above).
        let (o, s) = unsafe {
            (slice_mut(out, out_len, "out")?, slice_mut(scratch, scratch_len, "scratch")?)
        };
        let d = h.with(|a| a.dim());
        if q_len != d {
            return Err(FfiError::Core(dpattn_core::Error::ShapeMismatch {
                arg: "q",
                axis: "length (d)",
                expected: d,
                got: q_len,
            }));
        }
        // Compute into `out` only when it is the right length (checked by the core before
        // any write; a failed query writes nothing to `out`).
        let r = h.with(|a| a.query_into(qs, o, s))?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            info.write(dpattn_softmax_tree_cross_attention_query_info {
                denominator: r.denominator,
                nonpositive_denominator: u32::from(r.nonpositive_denominator),
            })
        };
        Ok(())
    })
}

/// What the whole release achieves, `(ε, δ)` (basic composition over the `(d + 1) · l`
/// copies; for the per-entry guarantee see the core docs). Status:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`, accountant errors. Both
/// out-params are written only on success. Thread-safe (handle rule).
///
/// # Safety
/// `out_epsilon`, `out_delta` NULL or writable for one `double` each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_achieved_privacy(
    att: *const dpattn_softmax_tree_cross_attention,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let e = Out::new(out_epsilon, "out_epsilon")?;
        let dl = Out::new(out_delta, "out_delta")?;
        let b = dpattn_softmax_tree_cross_attention::lookup(att, "att")?
            .with(|a| a.achieved_privacy())?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            e.write(b.epsilon().get());
            dl.write(b.delta().get());
        }
        Ok(())
    })
}

/// A non-private report of private entries outside the declared domain.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dpattn_domain_report {
    /// Finite key entries outside `[0, R]`.
    pub keys_outside: usize,
    /// Finite value entries outside `[−R_w, R_w]`.
    pub values_outside: usize,
    /// NaN or infinite entries in either.
    pub non_finite: usize,
}

/// Counts the entries of `keys`/`values` (`n × d` row-major doubles) the DP constructor would
/// clamp, into `*out_report`. **Not differentially private**: the counts depend on the
/// private data; show them only to the data holder, never publish them. Status:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_SHAPE_MISMATCH` (lengths other than `n * d`),
/// `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// # Safety
/// `keys`/`values` NULL or readable for their lengths; `out_report` NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_check_domain(
    keys: *const f64,
    keys_len: usize,
    values: *const f64,
    values_len: usize,
    n: usize,
    d: usize,
    radius: f64,
    weight_bound: f64,
    out_report: *mut dpattn_domain_report,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_report, "out_report")?;
        // SAFETY: forwarded caller contract.
        let k = unsafe { matrix(keys, keys_len, n, d, "keys") }?;
        // SAFETY: forwarded caller contract.
        let v = unsafe { matrix(values, values_len, n, d, "values") }?;
        let r = cross::check_domain(k, v, radius, weight_bound);
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            out.write(dpattn_domain_report {
                keys_outside: r.keys_outside,
                values_outside: r.values_outside,
                non_finite: r.non_finite,
            })
        };
        Ok(())
    })
}

/// The memory (bytes, saturating) a DPCrossAttention over `n` keys of dimension `d` would
/// need, from public parameters only, before anything is built. Status:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_OUT_OF_RANGE` (invalid parameters),
/// `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; `out_bytes` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_estimate_bytes(
    n: usize,
    d: usize,
    params: *const dpattn_softmax_tree_cross_attention_params,
    out_bytes: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_bytes, "out_bytes")?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { decode_cross(params) }?;
        let b = cross::estimate_cross_attention_bytes(n, d, &p)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe { out.write(b) };
        Ok(())
    })
}

/// The theorem-level error estimate of `docs/PAPERS.md` P1-AC12 (values: T1-K).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dpattn_softmax_tree_cross_attention_error_estimate {
    /// `l`, the number of copies.
    pub copies: usize,
    /// Uniform per-copy noise std of an `A_k` structure (weight bound `R_w`).
    pub sigma_weighted: f64,
    /// Uniform per-copy noise std of `A_0` (weight bound 1).
    pub sigma_normaliser: f64,
    /// `10(σ_AV + R_w σ_D)/n`: the additive attention error at Chebyshev's `k = 10`.
    pub additive: f64,
    /// `2ε_s/(1 − ε_s)`, relative to the softmax average of `|V|` (`docs/PAPERS.md` P1-11,
    /// corrected).
    pub relative: f64,
    /// `[EXT]` `docs/PAPERS.md` P1-X5: deterministic per-copy bound on the `A_k` answer noise.
    pub worst_case_weighted: f64,
}

/// The additive error estimate for `n` keys of dimension `d` (public parameters only).
/// Print it, and warn when `additive` exceeds `R_w` (useful only for `n ≳ 1e9` at `d <= 4`).
/// Status: `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_OUT_OF_RANGE`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// # Safety
/// `params` NULL or readable; `out_estimate` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_cross_attention_estimate_error(
    n: usize,
    d: usize,
    params: *const dpattn_softmax_tree_cross_attention_params,
    out_estimate: *mut dpattn_softmax_tree_cross_attention_error_estimate,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_estimate, "out_estimate")?;
        // SAFETY: forwarded caller contract.
        let p = unsafe { decode_cross(params) }?;
        let e = cross::estimate_error(n, d, &p)?;
        // SAFETY: checked non-NULL; writable per the caller's contract.
        unsafe {
            out.write(dpattn_softmax_tree_cross_attention_error_estimate {
                copies: e.copies,
                sigma_weighted: e.sigma_weighted,
                sigma_normaliser: e.sigma_normaliser,
                additive: e.additive,
                relative: e.relative,
                worst_case_weighted: e.worst_case_weighted,
            })
        };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use dpattn_core::accounting::ledger::Ledger;
    use dpattn_core::softmax_tree::Copies;
    #[test]
    fn cross_attention_choices_decode_as_the_softmax_tree_constants_say() {
        // The cross-attention names are the softmax tree's values: a C caller may use
        // either set and gets the same rule.
        let mut p = dpattn_softmax_tree_cross_attention_params {
            epsilon: 1.0,
            delta: 1e-6,
            delta_prime: 1e-6,
            ..Default::default()
        };
        for (kind, want) in [
            (DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING, Copies::NetHoeffding { k: 10.0 }),
            (DPATTN_SOFTMAX_TREE_COPIES_PAPER, Copies::Paper { c: 10.0 }),
            (DPATTN_COPIES_FIXED, Copies::Fixed(1)),
        ] {
            p.copies_kind = kind;
            // SAFETY: a live local struct.
            assert_eq!(unsafe { decode_cross(&p) }.unwrap().adaptive.copies, want);
        }
        p.copies_kind = 3;
        // SAFETY: a live local struct.
        let e = unsafe { decode_cross(&p) }.unwrap_err();
        assert!(e.to_string().contains("params.copies_kind"), "{e}");
    }

    /// A release on a replay session of master key `[5; 32]` whose next stream id is 2,
    /// charging `ledger` (NULL: nothing).
    fn cross_new(
        ledger: *mut crate::ledger::dpattn_ledger,
        h: &mut *mut dpattn_softmax_tree_cross_attention,
    ) -> dpattn_status {
        use crate::softmax_tree::session_testing as ss;
        let k = [0.1, 0.8, 0.6, 0.3, 0.9, 0.2];
        let v = [0.5, -0.5, 1.0, 0.0, -1.0, 0.25];
        let session = ss::replay(5, 2, ledger);
        // SAFETY: live locals and session.
        let st = unsafe {
            dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &cross_params(),
                session,
                h,
            )
        };
        ss::free(session);
        st
    }

    #[test]
    fn cross_attention_with_a_ledger_charges_exactly_what_the_core_charges() {
        use dpattn_core::accounting::privacy_unit::PrivacyUnit;
        let k = [0.1, 0.8, 0.6, 0.3, 0.9, 0.2];
        let v = [0.5, -0.5, 1.0, 0.0, -1.0, 0.25];
        let mut cp = SoftmaxTreeCrossAttentionParams::new(SoftmaxTreeParams::paper(
            1.0,
            1.0,
            PrivacyBudget::new(0.9, 1e-6).unwrap(),
            1e-6,
        ));
        cp.adaptive.copies = Copies::Fixed(3);
        let core_new = |l: &mut Ledger| {
            use crate::softmax_tree::session_testing as ss;
            SoftmaxTreeCrossAttention::new_keyed(
                MatRef::from_row_major(&k, 3, 2).unwrap(),
                MatRef::from_row_major(&v, 3, 2).unwrap(),
                &cp,
                dpattn_core::session::Draw { key: &ss::key(5), stream: 2 },
                Some(l),
            )
        };
        for kind in [Kind::Approx(100.0, 1e-2), Kind::Zcdp(50.0), Kind::Rdp(50.0, 1e-5)] {
            let (l, mut cl) = lt::pair(PrivacyUnit::TOKEN, kind);
            let mut h: *mut dpattn_softmax_tree_cross_attention = std::ptr::null_mut();
            let st = cross_new(l, &mut h);
            let core = core_new(&mut cl);
            if matches!(kind, Kind::Approx(..)) {
                assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
                let core = core.unwrap();
                let (mut e, mut dl) = (0.0, 0.0);
                // SAFETY: live handle and locals.
                let s = unsafe {
                    dpattn_softmax_tree_cross_attention_achieved_privacy(h, &mut e, &mut dl)
                };
                assert_eq!(s, dpattn_status::Ok);
                let a = core.achieved_privacy().unwrap();
                assert_eq!((e, dl), (a.epsilon().get(), a.delta().get()));
                let (spent, _) = lt::state(l);
                assert_eq!((spent.epsilon, spent.delta), (e, dl));
                let (mut got, mut want) = ([0.0; 2], [0.0; 2]);
                let mut s = vec![0.0; core.query_scratch_len()];
                let mut info = dpattn_softmax_tree_cross_attention_query_info {
                    denominator: 0.0,
                    nonpositive_denominator: 0,
                };
                let q = [0.5, 0.25];
                // SAFETY: live handle and locals.
                let st = unsafe {
                    dpattn_softmax_tree_cross_attention_query(
                        h,
                        got.as_mut_ptr(),
                        2,
                        q.as_ptr(),
                        2,
                        s.as_mut_ptr(),
                        s.len(),
                        &mut info,
                    )
                };
                assert_eq!(st, dpattn_status::Ok);
                core.query(&q, &mut want).unwrap();
                assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
                dpattn_softmax_tree_cross_attention_free(h);
            } else {
                // An (ε, δ > 0) charge: only approximate-DP ledgers take it.
                assert_eq!(st, dpattn_status::OutOfRange, "{kind:?}");
                assert_eq!(st, dpattn_status::of(&core.unwrap_err()));
                assert!(h.is_null());
                lt::assert_untouched(l);
            }
            lt::assert_same(l, &cl);
            lt::free(l);
        }
        // Refused (over budget; a ledger kept for another unit): nothing returned, ledger
        // unchanged.
        for (unit, total, want) in [
            (PrivacyUnit::TOKEN, 1e-3, dpattn_status::Infeasible),
            (PrivacyUnit::Prompt, 100.0, dpattn_status::UnitMismatch),
        ] {
            let (l, _) = lt::pair(unit, Kind::Approx(total, 1e-2));
            let mut h = 0x10 as *mut dpattn_softmax_tree_cross_attention;
            assert_eq!(cross_new(l, &mut h), want);
            assert_eq!(h, 0x10 as *mut dpattn_softmax_tree_cross_attention);
            lt::assert_untouched(l);
            lt::free(l);
        }
    }

    fn cross_params() -> dpattn_softmax_tree_cross_attention_params {
        dpattn_softmax_tree_cross_attention_params {
            epsilon: 0.9,
            delta: 1e-6,
            delta_prime: 1e-6,
            copies_kind: DPATTN_COPIES_FIXED,
            copies_fixed: 3,
            ..Default::default()
        }
    }

    #[test]
    fn cross_attention_equals_the_core_and_handles_are_checked() {
        let k = [0.1, 0.8, 0.6, 0.3, 0.9, 0.2];
        let v = [0.5, -0.5, 1.0, 0.0, -1.0, 0.25];
        let mut cp = SoftmaxTreeCrossAttentionParams::new(SoftmaxTreeParams::paper(
            1.0,
            1.0,
            PrivacyBudget::new(0.9, 1e-6).unwrap(),
            1e-6,
        ));
        cp.adaptive.copies = Copies::Fixed(3);
        use crate::softmax_tree::session_testing as ss;
        let session = ss::replay(5, 2, std::ptr::null_mut());
        let core = SoftmaxTreeCrossAttention::new_keyed(
            MatRef::from_row_major(&k, 3, 2).unwrap(),
            MatRef::from_row_major(&v, 3, 2).unwrap(),
            &cp,
            dpattn_core::session::Draw { key: &ss::key(5), stream: 2 },
            None,
        )
        .unwrap();
        let mut want = [0.0; 2];
        let wi = core.query(&[0.5, 0.25], &mut want).unwrap();
        let mut h: *mut dpattn_softmax_tree_cross_attention = std::ptr::null_mut();
        let p = cross_params();
        // SAFETY: live locals throughout.
        unsafe {
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &p,
                session,
                &mut h,
            );
            assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
            let mut n = 0;
            assert_eq!(
                dpattn_softmax_tree_cross_attention_query_scratch_len(h, &mut n),
                dpattn_status::Ok
            );
            assert_eq!(n, core.query_scratch_len());
            let mut s = vec![0.0; n];
            let (mut got, mut info) = (
                [0.0; 2],
                dpattn_softmax_tree_cross_attention_query_info {
                    denominator: 0.0,
                    nonpositive_denominator: 9,
                },
            );
            let q = [0.5, 0.25];
            let st = dpattn_softmax_tree_cross_attention_query(
                h,
                got.as_mut_ptr(),
                2,
                q.as_ptr(),
                2,
                s.as_mut_ptr(),
                n,
                &mut info,
            );
            assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
            assert_eq!(got, want);
            assert_eq!(info.denominator, wi.denominator);
            let (mut e, mut dl) = (0.0, 0.0);
            assert_eq!(
                dpattn_softmax_tree_cross_attention_achieved_privacy(h, &mut e, &mut dl),
                dpattn_status::Ok
            );
            let b = core.achieved_privacy().unwrap();
            assert_eq!((e, dl), (b.epsilon().get(), b.delta().get()));
            // Bad query: outside [0, R] is refused; out untouched.
            let bad = [1.5, 0.0];
            let mut o = [7.0; 2];
            let st = dpattn_softmax_tree_cross_attention_query(
                h,
                o.as_mut_ptr(),
                2,
                bad.as_ptr(),
                2,
                s.as_mut_ptr(),
                n,
                &mut info,
            );
            assert_ne!(st, dpattn_status::Ok);
            assert_eq!(o, [7.0; 2]);
            let st = dpattn_softmax_tree_cross_attention_query(
                h,
                o.as_mut_ptr(),
                2,
                q.as_ptr(),
                2,
                s.as_mut_ptr(),
                1,
                &mut info,
            );
            assert_eq!(st, dpattn_status::ScratchTooSmall);
            assert_eq!(o, [7.0; 2]);
            dpattn_softmax_tree_cross_attention_free(h);
            dpattn_softmax_tree_cross_attention_free(h); // double free: ignored
            dpattn_softmax_tree_cross_attention_free(std::ptr::null_mut());
            let st = dpattn_softmax_tree_cross_attention_achieved_privacy(h, &mut e, &mut dl);
            assert_eq!(st, dpattn_status::InvalidHandle);
            assert!(last_error_string().contains("att"));
            // Constructor errors.
            let mut h2: *mut dpattn_softmax_tree_cross_attention = std::ptr::null_mut();
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                5,
                v.as_ptr(),
                6,
                3,
                2,
                &p,
                session,
                &mut h2,
            );
            assert_eq!(st, dpattn_status::ShapeMismatch);
            assert!(last_error_string().contains("keys"));
            let bad_p = dpattn_softmax_tree_cross_attention_params { delta: 1.0, ..p };
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &bad_p,
                session,
                &mut h2,
            );
            assert_eq!(st, dpattn_status::OutOfRange);
            let bad_p = dpattn_softmax_tree_cross_attention_params { split: 4, ..p };
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &bad_p,
                session,
                &mut h2,
            );
            assert_eq!(st, dpattn_status::OutOfRange);
            assert!(last_error_string().contains("params.split"));
            let rej = dpattn_softmax_tree_cross_attention_params {
                domain_policy: DPATTN_DOMAIN_REJECT,
                ..p
            };
            let vbad = [0.5, -0.5, 3.0, 0.0, -1.0, 0.25];
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                vbad.as_ptr(),
                6,
                3,
                2,
                &rej,
                session,
                &mut h2,
            );
            assert_eq!(st, dpattn_status::DomainViolation);
            assert!(h2.is_null());
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &p,
                std::ptr::null_mut(),
                &mut h2,
            );
            assert_eq!(st, dpattn_status::NullArgument);
            assert!(last_error_string().contains("session"));
            let st = dpattn_softmax_tree_cross_attention_new(
                k.as_ptr(),
                6,
                v.as_ptr(),
                6,
                3,
                2,
                &p,
                ss::freed(),
                &mut h2,
            );
            assert_eq!(st, dpattn_status::InvalidHandle);
            assert!(last_error_string().contains("session"));
            // The release took stream 2; the domain refusal (inside the build) took 3; the
            // argument errors took none.
            assert_eq!(ss::next_stream(session), 4);
            ss::free(session);
            // Domain report, estimates.
            let mut rep = dpattn_domain_report::default();
            let st = dpattn_softmax_tree_cross_attention_check_domain(
                k.as_ptr(),
                6,
                vbad.as_ptr(),
                6,
                3,
                2,
                1.0,
                1.0,
                &mut rep,
            );
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!((rep.keys_outside, rep.values_outside, rep.non_finite), (0, 1, 0));
            let mut bytes = 0u64;
            assert_eq!(
                dpattn_softmax_tree_cross_attention_estimate_bytes(1000, 2, &p, &mut bytes),
                dpattn_status::Ok
            );
            assert_eq!(bytes, cross::estimate_cross_attention_bytes(1000, 2, &cp).unwrap());
            let mut est = dpattn_softmax_tree_cross_attention_error_estimate::default();
            assert_eq!(
                dpattn_softmax_tree_cross_attention_estimate_error(1000, 2, &p, &mut est),
                dpattn_status::Ok
            );
            let we = cross::estimate_error(1000, 2, &cp).unwrap();
            assert_eq!((est.copies, est.additive), (we.copies, we.additive));
            let mut pd = cross_params();
            assert_eq!(
                dpattn_softmax_tree_cross_attention_params_default(&mut pd),
                dpattn_status::Ok
            );
            assert!(pd.epsilon.is_nan());
            let st = dpattn_softmax_tree_cross_attention_estimate_error(1000, 2, &pd, &mut est);
            assert_eq!(st, dpattn_status::OutOfRange);
        }
    }
}
