//! Noisy segment trees for weighted distances and the softmax kernel (paper 001; core module
//! `dpattn_core::softmax_tree`; `docs/PAPERS.md` §1), faithful mode, from C.
//!
//! Structures are opaque registry handles (`_new` / `_free`); every query takes a `const`
//! handle. Handles are thread-safe: each call locks its handle's mutex, so concurrent
//! calls on one handle are serialised; a freed handle gives `DPATTN_STATUS_INVALID_HANDLE`
//! and a second `_free` is harmless. The construction is the release: every `_new` takes a
//! `dpattn_session`, draws all its noise at build time from one fresh stream id of it and
//! charges the session's ledger (kept for one token, `DPATTN_UNIT_TOKENS` with 1 token)
//! what the structure achieves, an `(ε, δ)` with `δ > 0` (approximate-DP ledgers only:
//! truncated Laplace noise has no zCDP form), after the structure is built and before the
//! handle is returned; a refused charge returns the ledger's status and no handle (the
//! stream id is consumed). Replaying a build for an audit takes a session from
//! `dpattn_session_new_for_replay` (with a NULL ledger nothing is charged). Queries are
//! post-processing (any number, adaptive or not).
//! Constructors allocate (the structures hold `3(2N − 2)` nodes per feature); the softmax
//! constructors refuse configurations whose memory estimate exceeds
//! `memory_limit_bytes` with `DPATTN_STATUS_MEMORY_LIMIT` before allocating.

use dpattn_core::softmax_tree as st;
use dpattn_core::softmax_tree::{
    Accounting, AdaptiveParams, Copies, DistanceParams, DpTree, DpTreeDistance, DpTreeHighDim,
    DpTreeSoftmax, DpTreeSoftmaxAdaptive, HighDimParams, QueryPolicy, Side, SoftmaxBudget,
    SoftmaxTreeParams, TaylorFeatureMap, Temperature,
};
use dpattn_core::{Error, MatRef, NoiseMode, PrivacyBudget};

use crate::args::{Buffers, Out, flag, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status, ffi_value, unknown};
use crate::handle::Handle;
use crate::session::{dpattn_session, with_session};
use crate::status::dpattn_status;

/// `Side` of a touched node: a left sibling (added to `c_left`).
pub const DPATTN_DP_TREE_SIDE_LEFT: u32 = 0;
/// `Side` of a touched node: a right sibling (added to `c_right`).
pub const DPATTN_DP_TREE_SIDE_RIGHT: u32 = 1;
/// The largest supported Taylor degree `s`.
pub const DPATTN_SOFTMAX_TREE_MAX_DEGREE: u32 = 64;
const _: () = assert!(DPATTN_SOFTMAX_TREE_MAX_DEGREE == st::MAX_DEGREE);
/// Temperature `τ = 1/d` (paper Definition 1.1).
pub const DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM: u32 = 0;
/// `[EXT]` `docs/PAPERS.md` P1-X6: a custom temperature `τ > 0` (the `tau` field).
pub const DPATTN_SOFTMAX_TREE_TEMPERATURE_CUSTOM: u32 = 1;
/// Algorithm 3's budget split as printed (spends about `2ε/3`, `docs/PAPERS.md` P1-15).
pub const DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER: u32 = 0;
/// `[EXT]` `docs/PAPERS.md` P1-X2: advanced-composition split spending exactly `(ε, δ + δ′)`
/// (`c` unused).
pub const DPATTN_SOFTMAX_TREE_ACCOUNTING_TIGHT: u32 = 1;
/// Refuse public queries outside `[0, R]`.
pub const DPATTN_SOFTMAX_TREE_QUERY_REJECT: u32 = 0;
/// Clamp public queries into `[0, R]` (NaN still refused).
pub const DPATTN_SOFTMAX_TREE_QUERY_CLAMP: u32 = 1;
/// `l = ⌈C·r·ln(dR/(ε_s p_f))⌉` (Theorem G.10 with caller constant `C = value`), made odd.
pub const DPATTN_SOFTMAX_TREE_COPIES_PAPER: u32 = 0;
/// `[FIX]` `docs/PAPERS.md` P1-14: net/Hoeffding count with Chebyshev multiple `k = value > √2`
/// (10 recommended).
pub const DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING: u32 = 1;
/// A fixed `l = fixed ≥ 1` (even values rounded up to odd).
pub const DPATTN_SOFTMAX_TREE_COPIES_FIXED: u32 = 2;

/// Implements [`Handle`] for an opaque handle type (the struct itself is written out so that
/// cbindgen sees it).
macro_rules! impl_handle {
    ($name:ident, $inner:ty) => {
        impl Handle for $name {
            type Inner = $inner;
            const NAME: &'static str = stringify!($name);
        }
    };
}
pub(crate) use impl_handle;

/// A noisy summation segment tree (Algorithm 2, `DpTree`).
pub struct dpattn_dp_tree {
    _private: [u8; 0],
}
impl_handle!(dpattn_dp_tree, DpTree);
/// DPTreeDistance (Algorithms 4–5): `p + 1` noisy moment trees.
pub struct dpattn_dp_tree_distance {
    _private: [u8; 0],
}
impl_handle!(dpattn_dp_tree_distance, DpTreeDistance);
/// DPTreeHighDim (Algorithm 6): one DPTreeDistance per coordinate.
pub struct dpattn_dp_tree_high_dim {
    _private: [u8; 0],
}
impl_handle!(dpattn_dp_tree_high_dim, DpTreeHighDim);
/// The Taylor polynomial-kernel feature map `P(x)` (public arithmetic, no privacy).
pub struct dpattn_taylor_feature_map {
    _private: [u8; 0],
}
impl_handle!(dpattn_taylor_feature_map, TaylorFeatureMap);
/// DPTreeSoftmax (Algorithm 3).
pub struct dpattn_softmax_tree {
    _private: [u8; 0],
}
impl_handle!(dpattn_softmax_tree, DpTreeSoftmax);
/// DPTreeSoftmaxAdaptive (Algorithm 7): the median of `l` DPTreeSoftmax copies.
pub struct dpattn_softmax_tree_adaptive {
    _private: [u8; 0],
}
impl_handle!(dpattn_softmax_tree_adaptive, DpTreeSoftmaxAdaptive);

/// Runs `f` on the value behind a handle.
fn with<H: Handle, R>(
    h: *const H,
    name: &'static str,
    f: impl FnOnce(&mut H::Inner) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    H::lookup(h, name)?.with(f)
}

/// [`with`] for queries that report a privacy guarantee or a noise level: handles built by
/// a `_new_exact` constructor are refused (`DPATTN_STATUS_UNSUPPORTED`).
fn with_private<H: Handle, R>(
    h: *const H,
    name: &'static str,
    f: impl FnOnce(&mut H::Inner) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    H::lookup(h, name)?.require_private()?.with(f)
}

// The decoders below serve every structure built on the softmax tree (this module and
// DPCrossAttention); `arg` names the field in errors.

pub(crate) fn accounting_of(arg: &'static str, v: u32) -> Result<Accounting, FfiError> {
    match v {
        DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER => Ok(Accounting::Paper),
        DPATTN_SOFTMAX_TREE_ACCOUNTING_TIGHT => Ok(Accounting::Tight),
        _ => Err(unknown(arg, v, "DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER (0), _TIGHT (1)")),
    }
}

pub(crate) fn temperature_of(
    arg: &'static str,
    kind: u32,
    tau: f64,
) -> Result<Temperature, FfiError> {
    match kind {
        DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM => Ok(Temperature::OneOverDim),
        DPATTN_SOFTMAX_TREE_TEMPERATURE_CUSTOM => Ok(Temperature::Custom(tau)),
        _ => {
            Err(unknown(arg, kind, "DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM (0), _CUSTOM (1)"))
        }
    }
}

pub(crate) fn query_policy_of(arg: &'static str, v: u32) -> Result<QueryPolicy, FfiError> {
    match v {
        DPATTN_SOFTMAX_TREE_QUERY_REJECT => Ok(QueryPolicy::Reject),
        DPATTN_SOFTMAX_TREE_QUERY_CLAMP => Ok(QueryPolicy::Clamp),
        _ => Err(unknown(arg, v, "DPATTN_SOFTMAX_TREE_QUERY_REJECT (0), _CLAMP (1)")),
    }
}

/// The copy-count rule `kind` with its parameter (`value`: `C` or `k`; `fixed`: `l`).
pub(crate) fn copies_of(
    arg: &'static str,
    kind: u32,
    value: f64,
    fixed: u64,
) -> Result<Copies, FfiError> {
    match kind {
        DPATTN_SOFTMAX_TREE_COPIES_PAPER => Ok(Copies::Paper { c: value }),
        DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING => Ok(Copies::NetHoeffding { k: value }),
        DPATTN_SOFTMAX_TREE_COPIES_FIXED => Ok(Copies::Fixed(fixed)),
        v => Err(unknown(
            arg,
            v,
            "DPATTN_SOFTMAX_TREE_COPIES_PAPER (0), _NET_HOEFFDING (1), _FIXED (2)",
        )),
    }
}

/// Writes a `(ε, δ)` pair.
///
/// # Safety
/// Both pointers checked by `Out::new`, writable per the caller's contract.
unsafe fn write_budget(e: Out<f64>, d: Out<f64>, b: PrivacyBudget) {
    // SAFETY: forwarded caller contract.
    unsafe {
        e.write(b.epsilon().get());
        d.write(b.delta().get());
    }
}

/// A strided matrix argument.
///
/// # Safety
/// `ptr` NULL or valid for `len` reads.
unsafe fn mat<'a>(
    ptr: *const f64,
    len: usize,
    rows: usize,
    cols: usize,
    stride: usize,
    name: &'static str,
) -> Result<MatRef<'a, f64>, FfiError> {
    // SAFETY: forwarded caller contract.
    let data = unsafe { slice(ptr, len, name) }?;
    Ok(MatRef::new(data, rows, cols, stride)?)
}

// ---------------------------------------------------------------------------------------
// Scalar helpers (public arithmetic).

/// The budget hierarchy of one DPTreeSoftmax copy (`SoftmaxBudget`), from the copy's
/// `(ε_S, δ_S, δ′_S)` down to a node.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_softmax_budget {
    /// `ε_S` of the copy.
    pub copy_epsilon: f64,
    /// `δ_S` of the copy.
    pub copy_delta: f64,
    /// `δ′_S`.
    pub delta_prime: f64,
    /// `ε_D` of each feature DPTreeDistance.
    pub distance_epsilon: f64,
    /// `δ_D` of each feature DPTreeDistance.
    pub distance_delta: f64,
    /// Node ε of the feature trees, `ε_D/(3L)`.
    pub feature_node_epsilon: f64,
    /// Node δ of the feature trees, `δ_D/(3L)`.
    pub feature_node_delta: f64,
    /// Node ε of `D_0`'s trees, `ε_S/(9L)`.
    pub ones_node_epsilon: f64,
    /// Node δ of `D_0`'s trees, `δ_S/(9L)`.
    pub ones_node_delta: f64,
    /// The advanced-composition slack over the features.
    pub slack: f64,
    /// `r`, the number of features.
    pub features: usize,
    /// `L`, the depth of every tree.
    pub depth: u32,
}

impl dpattn_softmax_budget {
    fn from_core(b: &SoftmaxBudget) -> Self {
        Self {
            copy_epsilon: b.copy.epsilon().get(),
            copy_delta: b.copy.delta().get(),
            delta_prime: b.delta_prime,
            distance_epsilon: b.distance.epsilon().get(),
            distance_delta: b.distance.delta().get(),
            feature_node_epsilon: b.feature_node.epsilon().get(),
            feature_node_delta: b.feature_node.delta().get(),
            ones_node_epsilon: b.ones_node.epsilon().get(),
            ones_node_delta: b.ones_node.delta().get(),
            slack: b.slack,
            features: b.features,
            depth: b.depth,
        }
    }
    fn to_core(self) -> Result<SoftmaxBudget, FfiError> {
        Ok(SoftmaxBudget {
            copy: PrivacyBudget::new(self.copy_epsilon, self.copy_delta)?,
            delta_prime: self.delta_prime,
            distance: PrivacyBudget::new(self.distance_epsilon, self.distance_delta)?,
            feature_node: PrivacyBudget::new(self.feature_node_epsilon, self.feature_node_delta)?,
            ones_node: PrivacyBudget::new(self.ones_node_epsilon, self.ones_node_delta)?,
            slack: self.slack,
            features: self.features,
            depth: self.depth,
            noise_mode: NoiseMode::Exact,
        })
    }
}

/// The budgets of one DPTreeSoftmax copy with `features = r` and `depth = L` (`docs/PAPERS.md`
/// §1.9, values T1-J):
/// `ACCOUNTING_PAPER`: `ε_D = c·ε_S/(3√(r ln(2/δ′_S)))`, `δ_D = δ_S/(3r)`; `_TIGHT`: the
/// largest `ε_D` advanced composition allows in `2ε_S/3`. Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (`r = 0`, `L = 0`, `δ′ ∉ (0, 1)`, `c ≤ 0`, bad ε/δ, unknown
/// accounting), `_INFEASIBLE` (a budget underflows), `_NULL_ARGUMENT`. Thread-safe; no
/// shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_budget(
    epsilon: f64,
    delta: f64,
    delta_prime: f64,
    c: f64,
    features: usize,
    depth: u32,
    accounting: u32,
    out: *mut dpattn_softmax_budget,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let b = st::softmax_budget(
            PrivacyBudget::new(epsilon, delta)?,
            delta_prime,
            c,
            features,
            depth,
            accounting_of("accounting", accounting)?,
        )?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_softmax_budget::from_core(&b)) };
        Ok(())
    })
}

/// What one copy with budget `*budget` achieves (`SoftmaxBudget::achieved`): the `r`
/// feature structures under advanced composition (or basic, if smaller) plus `D_0`.
/// Errors: `DPATTN_STATUS_OUT_OF_RANGE` (invalid fields), `_INFEASIBLE`, `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `budget` readable, out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_budget_achieved(
    budget: *const dpattn_softmax_budget,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, d) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        // SAFETY: readable per the caller's contract.
        let b = unsafe { read(budget, "budget") }?.to_core()?.achieved()?;
        // SAFETY: checked non-NULL; writable.
        unsafe { write_budget(e, d, b) };
        Ok(())
    })
}

/// How many copies `l` the adaptive structure takes the median of.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_softmax_tree_copies {
    /// `DPATTN_SOFTMAX_TREE_COPIES_*`.
    pub kind: u32,
    /// `C > 0` for `_PAPER`, the Chebyshev multiple `k > √2` for `_NET_HOEFFDING`.
    pub value: f64,
    /// `l ≥ 1` for `_FIXED`.
    pub fixed: u64,
}

impl dpattn_softmax_tree_copies {
    fn to_core(self) -> Result<Copies, FfiError> {
        copies_of("copies.kind", self.kind, self.value, self.fixed)
    }
}

/// The copy count `l` (always odd, `docs/PAPERS.md` P1-16) for `dim`, `features = r`, radius `R`,
/// kernel accuracy `ε_s` and failure probability `p_fail` (§1.8, values T1-I). Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE`, `_SIZE_OVERFLOW` (huge `l`), `_NULL_ARGUMENT`. Thread-safe;
/// no shared state.
///
/// # Safety
/// `copies` readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_copy_count(
    copies: *const dpattn_softmax_tree_copies,
    dim: usize,
    features: usize,
    radius: f64,
    eps_s: f64,
    p_fail: f64,
    out: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: readable per the caller's contract.
        let c = unsafe { read(copies, "copies") }?.to_core()?;
        let l = st::copy_count(c, dim, features, radius, eps_s, p_fail)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(l) };
        Ok(())
    })
}

/// `ε₀ = ε_s/(√d·R)`, the net resolution of the net/Hoeffding copy count. Pure arithmetic
/// (NaN on a caught panic). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_net_resolution(dim: usize, radius: f64, eps_s: f64) -> f64 {
    ffi_value(f64::NAN, || st::net_resolution(dim, radius, eps_s))
}

/// Snaps a public query coordinate `y` to the nearest point of the net
/// `{0, step, 2·step, …} ∩ [0, R] ∪ {R}` (`docs/PAPERS.md` P1-13; post-processing of a public
/// value). Pure arithmetic (NaN on a caught panic). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_snap_to_net(y: f64, step: f64, radius: f64) -> f64 {
    ffi_value(f64::NAN, || st::snap_to_net(y, step, radius))
}

type NoiseFn = fn(&SoftmaxBudget, u32, f64, f64, f64) -> dpattn_core::Result<f64>;

/// # Safety
/// `budget` readable, `out` writable (or NULL).
unsafe fn noise_helper(
    f: NoiseFn,
    budget: *const dpattn_softmax_budget,
    depth: u32,
    gamma: f64,
    taylor_max: f64,
    weight_bound: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: readable per the caller's contract.
        let b = unsafe { read(budget, "budget") }?.to_core()?;
        let v = f(&b, depth, gamma, taylor_max, weight_bound)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The uniform (over all queries) noise standard deviation of one DPTreeSoftmax answer
/// (`docs/PAPERS.md` §1.7): `√(¼[r(2L V₂ + 4Γ² L V₁ + Γ⁴ L V₀) + T_s² L V_ones])`. Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (a node budget invalid for TLap), `_NULL_ARGUMENT`.
/// Thread-safe; no shared state.
///
/// # Safety
/// `budget` readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_uniform_noise_std(
    budget: *const dpattn_softmax_budget,
    depth: u32,
    gamma: f64,
    taylor_max: f64,
    weight_bound: f64,
    out: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        noise_helper(st::uniform_noise_std, budget, depth, gamma, taylor_max, weight_bound, out)
    }
}

/// `[EXT]` `docs/PAPERS.md` P1-X5: the deterministic bound on one copy's answer noise for every
/// query at once, `½[r(2L B₂ + 2Γ L B₁ + Γ² L B₀) + T_s L B_ones]`. Errors as
/// `dpattn_softmax_tree_uniform_noise_std`. Thread-safe; no shared state.
///
/// # Safety
/// `budget` readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_worst_case_noise_bound(
    budget: *const dpattn_softmax_budget,
    depth: u32,
    gamma: f64,
    taylor_max: f64,
    weight_bound: f64,
    out: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        noise_helper(
            st::worst_case_noise_bound,
            budget,
            depth,
            gamma,
            taylor_max,
            weight_bound,
            out,
        )
    }
}

/// `N = max(2, next_pow2(n))` leaves. Errors: `DPATTN_STATUS_OUT_OF_RANGE` (`n = 0`),
/// `_SIZE_OVERFLOW`, `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_leaf_count(
    n: usize,
    out: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = st::leaf_count(n)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The bin of a value, `min(⌊x·N/ρ⌋, N − 1)` in `f64` (values below 0 and NaN go to bin 0).
/// Errors: `DPATTN_STATUS_OUT_OF_RANGE` (`n_leaves = 0`, `range` not positive and finite),
/// `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_bin(
    x: f64,
    range: f64,
    n_leaves: usize,
    out: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        if n_leaves == 0 {
            return Err(Error::OutOfRange { name: "n_leaves", value: 0.0, allowed: ">= 1" }.into());
        }
        if !(range.is_finite() && range > 0.0) {
            return Err(
                Error::OutOfRange { name: "range", value: range, allowed: "(0, inf)" }.into()
            );
        }
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(st::bin(x, range, n_leaves)) };
        Ok(())
    })
}

/// `r = C(d + s, s)`, the number of Taylor features of degree ≤ `s` in `d` variables.
/// Errors: `DPATTN_STATUS_SIZE_OVERFLOW`, `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_feature_count(
    dim: usize,
    degree: u32,
    out: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = st::feature_count(dim, degree)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// `T_s(z) = Σ_{t ≤ s} z^t/t!`, the degree-`s` Taylor polynomial of `exp`; NaN for
/// `degree > DPATTN_SOFTMAX_TREE_MAX_DEGREE` (or a caught panic). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_taylor_exp(z: f64, degree: u32) -> f64 {
    ffi_value(
        f64::NAN,
        || if degree > st::MAX_DEGREE { f64::NAN } else { st::taylor_exp(z, degree) },
    )
}

/// The worst-case relative error `(e^z − T_s(z))/T_s(z)` on `[0, z_max]`
/// (`= Pr[Pois(z_max) > s]/Pr[Pois(z_max) ≤ s]`); NaN for `degree > MAX_DEGREE`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_taylor_relative_error(z_max: f64, degree: u32) -> f64 {
    ffi_value(f64::NAN, || {
        if degree > st::MAX_DEGREE { f64::NAN } else { st::taylor_relative_error(z_max, degree) }
    })
}

/// The smallest degree `s` with worst-case relative error `≤ ε_s` on `[0, z_max]`
/// (`docs/PAPERS.md` §1.6, values T1-E).
/// Errors: `DPATTN_STATUS_OUT_OF_RANGE` (`z_max ∉ [0, 100]`, `ε_s ∉ (0, 1)`),
/// `_INFEASIBLE` (no degree ≤ 64), `_NULL_ARGUMENT`. Thread-safe; no shared state.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_min_degree(
    z_max: f64,
    eps_s: f64,
    out: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = st::min_degree(z_max, eps_s)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The paper's `Γ_{R,s} = max_{j ∈ [s]} R^j/√(j!)` (Definition G.3, without `max(1, ·)`);
/// NaN for `degree > MAX_DEGREE`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_gamma_bound(radius: f64, degree: u32) -> f64 {
    ffi_value(f64::NAN, || {
        if degree > st::MAX_DEGREE { f64::NAN } else { st::gamma_bound(radius, degree) }
    })
}

// ---------------------------------------------------------------------------------------
// DPTree.

/// Builds a DPTree over `values[0..values_len]` (padded to `N = max(2, next_pow2(n))`
/// leaves, each value clamped into `[−bound, bound]`, NaN → 0), noised with fresh randomness
/// from `session` (node `v` is element `v − 2` of its stream): every node on its grid with
/// exact truncated discrete Laplace noise for `TLap(2·bound, ε/L, δ/L)`.
///
/// **Guarantee** (Lemma B.6, root dropped): `(ε, δ)`-DP for neighbouring inputs that differ
/// in **one value** (one token). **Accounting**: the session's ledger is charged
/// `(epsilon, delta)` (module docs). Queries are post-processing. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_MISALIGNED`, `_SIZE_OVERFLOW`, `_OUT_OF_RANGE` (empty
/// input, bad bound/ε/δ, node `δ/L > 1/2`), `_ALLOCATION_FAILED`, `_INVALID_HANDLE` (a
/// freed session), the ledger's status for a refused charge. Allocates. Thread-safe.
///
/// # Safety
/// `values` valid for `values_len` reads, `session` a value returned by
/// `dpattn_session_new*` (a freed one is detected), `out_tree` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_dp_tree_new(
    values: *const f64,
    values_len: usize,
    bound: f64,
    epsilon: f64,
    delta: f64,
    session: *mut dpattn_session,
    out_tree: *mut *mut dpattn_dp_tree,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let v = unsafe { slice(values, values_len, "values") }?;
        let budget = PrivacyBudget::new(epsilon, delta)?;
        let t = with_session(session, st::STREAMS, |draw, l| {
            Ok(DpTree::new_keyed(v, bound, budget, draw, l, NoiseMode::Exact)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_dp_tree::into_handle(t)) };
        Ok(())
    })
}

/// **Not differentially private.** The noise-free tree over the unclamped finite `values`
/// (tests and audits only; never release it). Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_OUT_OF_RANGE` (empty), `_NON_FINITE`. Allocates. Thread-safe.
///
/// The handle is marked exact: queries that report a privacy guarantee or a noise level on it
/// (`_achieved_privacy`, `_get_budget`, a nominal `_noise_variance` or `_projection_noise_std`)
/// return `DPATTN_STATUS_UNSUPPORTED`, so it cannot be passed off as a DP release.
///
/// # Safety
/// `values` valid for `values_len` reads, `out_tree` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_new_exact(
    values: *const f64,
    values_len: usize,
    out_tree: *mut *mut dpattn_dp_tree,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let v = unsafe { slice(values, values_len, "values") }?;
        let t = DpTree::non_private_exact(v)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_dp_tree::into_exact_handle(t)) };
        Ok(())
    })
}

/// Releases a tree. NULL and already-freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_dp_tree_free(tree: *mut dpattn_dp_tree) {
    ffi_value((), || {
        dpattn_dp_tree::free(tree);
    })
}

/// `N` (leaves), `L = log2 N` (nodes read per query), the per-node noise bound `B` and
/// variance (0 for the exact tree). Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_info(
    tree: *const dpattn_dp_tree,
    out_n_leaves: *mut usize,
    out_depth: *mut u32,
    out_bound: *mut f64,
    out_node_variance: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_n_leaves, "out_n_leaves")?, Out::new(out_depth, "out_depth")?);
        let (c, d) =
            (Out::new(out_bound, "out_bound")?, Out::new(out_node_variance, "out_node_variance")?);
        let v =
            with(tree, "tree", |t| Ok((t.n_leaves(), t.depth(), t.bound(), t.node_variance())))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(v.0);
            b.write(v.1);
            c.write(v.2);
            d.write(v.3);
        }
        Ok(())
    })
}

/// The released value of heap node `v ∈ [2, 2N)` (the root, 1, is not released). Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE` (other `v`), `_NULL_ARGUMENT`, `_INVALID_HANDLE`.
/// Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_node(
    tree: *const dpattn_dp_tree,
    v: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let x = with(tree, "tree", |t| {
            t.node(v).ok_or_else(|| {
                Error::OutOfRange { name: "v", value: v as f64, allowed: "[2, 2N)" }.into()
            })
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(x) };
        Ok(())
    })
}

/// `(c_left, c_right)` at leaf `j`: noisy sums of the leaves strictly left and strictly
/// right of `j`. Errors: `DPATTN_STATUS_OUT_OF_RANGE` (`j ≥ N`), `_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_query_leaf(
    tree: *const dpattn_dp_tree,
    leaf: usize,
    out_left: *mut f64,
    out_right: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (l, r) = (Out::new(out_left, "out_left")?, Out::new(out_right, "out_right")?);
        let (a, b) = with(tree, "tree", |t| Ok(t.query_leaf(leaf)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            l.write(a);
            r.write(b);
        }
        Ok(())
    })
}

/// The heap indices a query at `leaf` reads, bottom-up, into `out_nodes`, with their sides
/// (`DPATTN_DP_TREE_SIDE_*`) into `out_sides`; `*out_count = L`. Both buffers need `L`
/// elements. Errors: `DPATTN_STATUS_OUT_OF_RANGE` (`leaf ≥ N`), `_BUFFER_TOO_SHORT`,
/// `_ALIASING`, `_NULL_ARGUMENT`, `_MISALIGNED`, `_INVALID_HANDLE`. Buffers are written
/// only on success. Allocation-free. Thread-safe (per-handle lock).
///
/// # Safety
/// Buffers writable for their lengths; `out_count` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_touched_nodes(
    tree: *const dpattn_dp_tree,
    out_nodes: *mut usize,
    out_nodes_len: usize,
    out_sides: *mut u32,
    out_sides_len: usize,
    leaf: usize,
    out_count: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let cnt = Out::new(out_count, "out_count")?;
        let mut bufs = Buffers::default();
        bufs.output("out_nodes", out_nodes, out_nodes_len).output(
            "out_sides",
            out_sides,
            out_sides_len,
        );
        bufs.disjoint()?;
        // SAFETY: writable per the caller's contract; disjoint.
        let (nodes, sides) = unsafe {
            (
                slice_mut(out_nodes, out_nodes_len, "out_nodes")?,
                slice_mut(out_sides, out_sides_len, "out_sides")?,
            )
        };
        let n = with(tree, "tree", |t| {
            const MAX: usize = usize::BITS as usize;
            let mut tmp = [(0usize, Side::Left); MAX];
            let l = t.touched_nodes(leaf, &mut tmp)?;
            for (name, len) in [("out_nodes", nodes.len()), ("out_sides", sides.len())] {
                if len < l {
                    return Err(Error::BufferTooShort { arg: name, needed: l, got: len }.into());
                }
            }
            for (i, (v, s)) in tmp[..l].iter().enumerate() {
                nodes[i] = *v;
                sides[i] = match s {
                    Side::Left => DPATTN_DP_TREE_SIDE_LEFT,
                    Side::Right => DPATTN_DP_TREE_SIDE_RIGHT,
                };
            }
            Ok(l)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { cnt.write(n) };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// DPTreeDistance / DPTreeHighDim.

/// Parameters of a DPTreeDistance.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_dp_tree_distance_params {
    /// The exponent `p ∈ [1, 8]` of `Σ w |y − x|^p`.
    pub p: u32,
    /// The value range `ρ`: data and queries in `[0, ρ]`.
    pub range: f64,
    /// The weight bound `R_w`: weights in `[−R_w, R_w]`.
    pub weight_bound: f64,
    /// `ε` of the whole structure.
    pub epsilon: f64,
    /// `δ` of the whole structure (`δ ≤ (p+1)·L/2`).
    pub delta: f64,
}

impl dpattn_dp_tree_distance_params {
    fn to_core(self) -> Result<DistanceParams, FfiError> {
        Ok(DistanceParams {
            p: self.p,
            range: self.range,
            weight_bound: self.weight_bound,
            budget: PrivacyBudget::new(self.epsilon, self.delta)?,
            noise_mode: NoiseMode::Exact,
        })
    }
}

/// Builds DPTreeDistance over points `x` with weights `w` (`n = x_len = w_len`), noised
/// with fresh randomness from `session` (from element 0 of its stream): `p + 1` moment
/// trees, tree `q` summing `w x^q`.
///
/// **Guarantee** (Theorem D.1): `(ε, δ)`-DP for neighbouring datasets that differ in **one
/// point** `(x_k, w_k)` (one token), for `x ∈ [0, ρ]`, `w ∈ [−R_w, R_w]` (private values
/// are clamped there, NaN → 0). **Accounting**: the session's ledger is charged
/// `(epsilon, delta)` (module docs). Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_SHAPE_MISMATCH` (`x_len ≠ w_len`), `_OUT_OF_RANGE` (empty, bad parameters),
/// `_MISALIGNED`, `_SIZE_OVERFLOW`, `_ALLOCATION_FAILED`, `_INVALID_HANDLE` (a freed
/// session), the ledger's status for a refused charge. Allocates. Thread-safe.
///
/// # Safety
/// Buffers valid for their lengths, struct pointers readable, `session` a value returned
/// by `dpattn_session_new*` (a freed one is detected), `out_tree` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_dp_tree_distance_new(
    x: *const f64,
    x_len: usize,
    w: *const f64,
    w_len: usize,
    params: *const dpattn_dp_tree_distance_params,
    session: *mut dpattn_session,
    out_tree: *mut *mut dpattn_dp_tree_distance,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (x, w, p) =
            unsafe { (slice(x, x_len, "x")?, slice(w, w_len, "w")?, read(params, "params")?) };
        let p = p.to_core()?;
        let t = with_session(session, st::STREAMS, |draw, l| {
            Ok(DpTreeDistance::new_keyed(x, w, &p, draw, l)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_dp_tree_distance::into_handle(t)) };
        Ok(())
    })
}

/// **Not differentially private.** The noise-free DPTreeDistance with `n_leaves` leaves (a
/// power of two ≥ 2) over unclamped finite data (tests and audits only). Errors as
/// `dpattn_dp_tree_distance_new` plus `_NON_FINITE` and a bad `n_leaves`. Allocates.
/// Thread-safe.
///
/// The handle is marked exact: queries that report a privacy guarantee or a noise level on it
/// (`_achieved_privacy`, `_get_budget`, a nominal `_noise_variance` or `_projection_noise_std`)
/// return `DPATTN_STATUS_UNSUPPORTED`, so it cannot be passed off as a DP release.
///
/// # Safety
/// As `dpattn_dp_tree_distance_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_distance_new_exact(
    x: *const f64,
    x_len: usize,
    w: *const f64,
    w_len: usize,
    n_leaves: usize,
    params: *const dpattn_dp_tree_distance_params,
    out_tree: *mut *mut dpattn_dp_tree_distance,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (x, w, p) =
            unsafe { (slice(x, x_len, "x")?, slice(w, w_len, "w")?, read(params, "params")?) };
        let t = DpTreeDistance::non_private_exact(x, w, n_leaves, &p.to_core()?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_dp_tree_distance::into_exact_handle(t)) };
        Ok(())
    })
}

/// Releases a DPTreeDistance; NULL and freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_dp_tree_distance_free(tree: *mut dpattn_dp_tree_distance) {
    ffi_value((), || {
        dpattn_dp_tree_distance::free(tree);
    })
}

/// `N` and `L = log2 N`. Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`.
/// Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_distance_info(
    tree: *const dpattn_dp_tree_distance,
    out_n_leaves: *mut usize,
    out_depth: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_n_leaves, "out_n_leaves")?, Out::new(out_depth, "out_depth")?);
        let (n, d) = with(tree, "tree", |t| Ok((t.n_leaves(), t.depth())))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(n);
            b.write(d);
        }
        Ok(())
    })
}

/// The noisy `Σ_k w_k |y − x_k|^p` (Algorithm 5; points in `y`'s own bin are dropped,
/// `docs/PAPERS.md` P1-10) for a public `y ∈ [0, ρ]`. Errors: `DPATTN_STATUS_OUT_OF_RANGE` /
/// `_NON_FINITE` (bad `y`), `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_distance_query(
    tree: *const dpattn_dp_tree_distance,
    y: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = with(tree, "tree", |t| Ok(t.query(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The exact noise variance of `dpattn_dp_tree_distance_query(y)` (`docs/PAPERS.md` §1.5). Errors
/// as the query. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_distance_noise_variance(
    tree: *const dpattn_dp_tree_distance,
    y: f64,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let v = with(tree, "tree", |t| Ok(t.noise_variance(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Parameters of a DPTreeHighDim.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_dp_tree_high_dim_params {
    /// The exponent `p ∈ [1, 8]`.
    pub p: u32,
    /// The coordinate range `R`: points and queries in `[0, R]^d`.
    pub range: f64,
    /// The weight bound `R_w`.
    pub weight_bound: f64,
    /// Target `ε`; the structure is `(ε', δ + δ′)`-DP with `ε' ≈ √2·c·ε`.
    pub epsilon: f64,
    /// Target `δ`.
    pub delta: f64,
    /// The advanced-composition slack `δ′ ∈ (0, 1)`.
    pub delta_prime: f64,
    /// The composition constant `c ∈ (0, 1)` (the paper takes `c < 0.1`).
    pub c: f64,
}

/// Builds DPTreeHighDim over the rows of `x` (`rows × cols`, row stride `row_stride`) with
/// weights `w` (`w_len = rows`): one DPTreeDistance per coordinate at
/// `ε_k = c·ε/√(d ln(1/δ′))`, `δ_k = δ/d`.
///
/// **Guarantee** (Lemma E.1): `(ε', δ + δ′)`-DP for neighbours differing in one row
/// `(x_k, w_k)` (one token) with `ε'` = `dpattn_dp_tree_high_dim_achieved_privacy`
/// (≈ `√2·c·ε`). **Accounting**: the session's ledger (one fresh stream id of `session`) is
/// charged that `(ε', δ + δ′)` (module docs). Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_SHAPE_MISMATCH`, `_BUFFER_TOO_SHORT`, `_OUT_OF_RANGE`, `_MISALIGNED`, `_SIZE_OVERFLOW`,
/// `_ALLOCATION_FAILED`, `_INVALID_HANDLE` (a freed session), the ledger's status for a
/// refused charge. Allocates. Thread-safe.
///
/// # Safety
/// Buffers valid for their lengths, struct pointers readable, `session` a value returned
/// by `dpattn_session_new*` (a freed one is detected), `out_tree` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_dp_tree_high_dim_new(
    x: *const f64,
    x_len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    w: *const f64,
    w_len: usize,
    params: *const dpattn_dp_tree_high_dim_params,
    session: *mut dpattn_session,
    out_tree: *mut *mut dpattn_dp_tree_high_dim,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (xm, w, p) = unsafe {
            (
                mat(x, x_len, rows, cols, row_stride, "x")?,
                slice(w, w_len, "w")?,
                read(params, "params")?,
            )
        };
        let hp = HighDimParams {
            p: p.p,
            range: p.range,
            weight_bound: p.weight_bound,
            budget: PrivacyBudget::new(p.epsilon, p.delta)?,
            delta_prime: p.delta_prime,
            c: p.c,
            noise_mode: NoiseMode::Exact,
        };
        let t = with_session(session, st::STREAMS, |draw, l| {
            Ok(DpTreeHighDim::new_keyed(xm, w, &hp, draw, l)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_dp_tree_high_dim::into_handle(t)) };
        Ok(())
    })
}

/// Releases a DPTreeHighDim; NULL and freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_dp_tree_high_dim_free(tree: *mut dpattn_dp_tree_high_dim) {
    ffi_value((), || {
        dpattn_dp_tree_high_dim::free(tree);
    })
}

/// The per-coordinate budget `(ε_k, δ_k)`. Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_high_dim_per_coordinate(
    tree: *const dpattn_dp_tree_high_dim,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, d) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        let b = with(tree, "tree", |t| Ok(t.per_coordinate()))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { write_budget(e, d, b) };
        Ok(())
    })
}

/// The `(ε', d·δ_k + δ′)` the structure achieves (advanced composition, rounded up).
/// Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`, accountant errors.
/// Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_high_dim_achieved_privacy(
    tree: *const dpattn_dp_tree_high_dim,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, d) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        let b = with_private(tree, "tree", |t| Ok(t.achieved_privacy()?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { write_budget(e, d, b) };
        Ok(())
    })
}

/// The noisy `Σ_i w_i ‖y − x_i‖_p^p` for a public `y ∈ [0, R]^d` (`y_len = d`). Errors:
/// `DPATTN_STATUS_SHAPE_MISMATCH`, `_OUT_OF_RANGE` / `_NON_FINITE` (bad coordinate),
/// `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Allocation-free. Thread-safe (per-handle lock).
///
/// # Safety
/// `y` valid for `y_len` reads; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_high_dim_query(
    tree: *const dpattn_dp_tree_high_dim,
    y: *const f64,
    y_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let y = unsafe { slice(y, y_len, "y") }?;
        let v = with(tree, "tree", |t| Ok(t.query(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The exact noise variance of `dpattn_dp_tree_high_dim_query(y)`. Errors as the query.
/// Thread-safe (per-handle lock).
///
/// # Safety
/// `y` valid for `y_len` reads; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_dp_tree_high_dim_noise_variance(
    tree: *const dpattn_dp_tree_high_dim,
    y: *const f64,
    y_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let y = unsafe { slice(y, y_len, "y") }?;
        let v = with_private(tree, "tree", |t| Ok(t.noise_variance(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Taylor feature map.

/// A Taylor feature map for `dim ≥ 1` inputs, degree `s ≤ 64` and temperature `τ > 0`:
/// `P(x)·P(y) = T_s(τ xᵀy)` exactly, `r = C(d + s, s)` features. Public arithmetic, no
/// privacy. Errors: `DPATTN_STATUS_OUT_OF_RANGE`, `_SIZE_OVERFLOW`, `_NULL_ARGUMENT`.
/// Thread-safe.
///
/// # Safety
/// `out_map` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_new(
    dim: usize,
    degree: u32,
    tau: f64,
    out_map: *mut *mut dpattn_taylor_feature_map,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_map, "out_map")?;
        let m = TaylorFeatureMap::new(dim, degree, tau)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_taylor_feature_map::into_handle(m)) };
        Ok(())
    })
}

/// Releases a feature map; NULL and freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_taylor_feature_map_free(map: *mut dpattn_taylor_feature_map) {
    ffi_value((), || {
        dpattn_taylor_feature_map::free(map);
    })
}

/// `d`, `s`, `τ` and `r` of a map. Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_info(
    map: *const dpattn_taylor_feature_map,
    out_dim: *mut usize,
    out_degree: *mut u32,
    out_tau: *mut f64,
    out_features: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_dim, "out_dim")?, Out::new(out_degree, "out_degree")?);
        let (c, d) = (Out::new(out_tau, "out_tau")?, Out::new(out_features, "out_features")?);
        let m = with(map, "map", |m| Ok(*m))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(m.dim());
            b.write(m.degree());
            c.write(m.tau());
            d.write(m.features());
        }
        Ok(())
    })
}

/// `z_max = τ d R²` and the feature range `Γ = max(1, max_{j ≤ s} R_eff^j/√(j!))`,
/// `R_eff = √(τ d)·R`, for inputs in `[0, R]^d`. Errors: `DPATTN_STATUS_OUT_OF_RANGE`
/// (`radius` not positive and finite), `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe
/// (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_range(
    map: *const dpattn_taylor_feature_map,
    radius: f64,
    out_z_max: *mut f64,
    out_gamma: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_z_max, "out_z_max")?, Out::new(out_gamma, "out_gamma")?);
        if !(radius.is_finite() && radius > 0.0) {
            return Err(
                Error::OutOfRange { name: "radius", value: radius, allowed: "(0, inf)" }.into()
            );
        }
        let (z, g) = with(map, "map", |m| Ok((m.z_max(radius), m.range(radius))))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(z);
            b.write(g);
        }
        Ok(())
    })
}

/// `T_s(τ xᵀy)`, which equals `P(x)·P(y)`; `x_len` and `y_len` must equal `d`. Errors:
/// `DPATTN_STATUS_SHAPE_MISMATCH`, `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe
/// (per-handle lock).
///
/// # Safety
/// `x`, `y` valid for their lengths; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_kernel(
    map: *const dpattn_taylor_feature_map,
    x: *const f64,
    x_len: usize,
    y: *const f64,
    y_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (x, y) = unsafe { (slice(x, x_len, "x")?, slice(y, y_len, "y")?) };
        let v = with(map, "map", |m| {
            for (arg, v) in [("x", x), ("y", y)] {
                if v.len() != m.dim() {
                    return Err(Error::ShapeMismatch {
                        arg,
                        axis: "len",
                        expected: m.dim(),
                        got: v.len(),
                    }
                    .into());
                }
            }
            Ok(m.kernel(x, y))
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Writes `P(x)` (`out_len = r`, canonical order: by degree, then lexicographic index
/// tuples) for `x` of length `d`. Errors: `DPATTN_STATUS_SHAPE_MISMATCH`, `_ALIASING`,
/// `_NULL_ARGUMENT`, `_MISALIGNED`, `_INVALID_HANDLE`; `out` untouched on error.
/// Allocation-free. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable for `out_len`, `x` readable for `x_len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_eval(
    map: *const dpattn_taylor_feature_map,
    out: *mut f64,
    out_len: usize,
    x: *const f64,
    x_len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        bufs.input("x", x, x_len).output("out", out, out_len);
        bufs.disjoint()?;
        // SAFETY: forwarded caller contract; `out` disjoint from `x`.
        let (x, o) = unsafe { (slice(x, x_len, "x")?, slice_mut(out, out_len, "out")?) };
        with(map, "map", |m| Ok(m.eval_into(x, o)?))
    })
}

/// Writes the per-feature bounds `β_a = (√τ R)^{|a|}/√(a!)` (`out_len = r`): `P_a(x) ≤ β_a`
/// for `x ∈ [0, R]^d`. Errors: `DPATTN_STATUS_SHAPE_MISMATCH`, `_OUT_OF_RANGE` (bad
/// radius), `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable for `out_len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_taylor_feature_map_feature_bounds(
    map: *const dpattn_taylor_feature_map,
    out: *mut f64,
    out_len: usize,
    radius: f64,
) -> dpattn_status {
    ffi_status(|| {
        if !(radius.is_finite() && radius > 0.0) {
            return Err(
                Error::OutOfRange { name: "radius", value: radius, allowed: "(0, inf)" }.into()
            );
        }
        // SAFETY: forwarded caller contract.
        let o = unsafe { slice_mut(out, out_len, "out") }?;
        with(map, "map", |m| Ok(m.feature_bounds_into(radius, o)?))
    })
}

// ---------------------------------------------------------------------------------------
// DPTreeSoftmax / DPTreeSoftmaxAdaptive.

/// Parameters shared by the softmax-tree structures (all public).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_softmax_tree_params {
    /// `R`: keys and queries in `[0, R]^d` (`R ≥ 1` when strict).
    pub radius: f64,
    /// `R_w`: weights in `[−R_w, R_w]` (`R_w ≥ 1` when strict).
    pub weight_bound: f64,
    /// `ε` of the structure (`(0, 1]` when strict).
    pub epsilon: f64,
    /// `δ ∈ (0, 1)` of the structure.
    pub delta: f64,
    /// `δ′ ∈ (0, 1)`, the advanced-composition slack: the structure is `(ε, δ + δ′)`-DP.
    pub delta_prime: f64,
    /// The composition constant `c` (`(0, 0.1)` strict, up to 0.7 relaxed; unused by tight
    /// accounting).
    pub c: f64,
    /// `ε_s`, the relative accuracy of the polynomial kernel; fixes the degree `s`.
    pub eps_s: f64,
    /// `DPATTN_SOFTMAX_TREE_TEMPERATURE_*`.
    pub temperature: u32,
    /// `τ > 0` when `temperature` is `_CUSTOM` (ignored otherwise).
    pub tau: f64,
    /// `DPATTN_SOFTMAX_TREE_ACCOUNTING_*`.
    pub accounting: u32,
    /// 1: enforce the paper's ranges; 0: relaxed ranges.
    pub strict: u32,
    /// `DPATTN_SOFTMAX_TREE_QUERY_*` for public queries outside `[0, R]`.
    pub query_policy: u32,
    /// Refuse to build when the memory estimate exceeds this many bytes
    /// (`DPATTN_STATUS_MEMORY_LIMIT`).
    pub memory_limit_bytes: u64,
}

impl dpattn_softmax_tree_params {
    fn to_core(self) -> Result<SoftmaxTreeParams, FfiError> {
        let mut p = SoftmaxTreeParams::paper(
            self.radius,
            self.weight_bound,
            PrivacyBudget::new(self.epsilon, self.delta)?,
            self.delta_prime,
        );
        p.c = self.c;
        p.eps_s = self.eps_s;
        p.temperature = temperature_of("temperature", self.temperature, self.tau)?;
        p.accounting = accounting_of("accounting", self.accounting)?;
        p.strict = flag("strict", self.strict)?;
        p.query_policy = query_policy_of("query_policy", self.query_policy)?;
        p.memory_limit_bytes = self.memory_limit_bytes;
        Ok(p)
    }
}

/// Fills `*out` with the paper's setting: `R = R_w = 1`, `c = 0.09`, `ε_s = 0.01`,
/// `τ = 1/d`, paper accounting, strict ranges, queries rejected outside the domain, a 1 GiB
/// memory limit; `epsilon`, `delta` and `delta_prime` are 0 and **must** be set (builds
/// refuse them otherwise). Errors: `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_params_default(
    out: *mut dpattn_softmax_tree_params,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(default_tree_params()) };
        Ok(())
    })
}

fn default_tree_params() -> dpattn_softmax_tree_params {
    dpattn_softmax_tree_params {
        radius: 1.0,
        weight_bound: 1.0,
        epsilon: 0.0,
        delta: 0.0,
        delta_prime: 0.0,
        c: 0.09,
        eps_s: 0.01,
        temperature: DPATTN_SOFTMAX_TREE_TEMPERATURE_ONE_OVER_DIM,
        tau: 0.0,
        accounting: DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER,
        strict: 1,
        query_policy: DPATTN_SOFTMAX_TREE_QUERY_REJECT,
        memory_limit_bytes: 1 << 30,
    }
}

/// Shape of a built softmax structure.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_softmax_tree_shape {
    /// Key dimension `d`.
    pub dim: usize,
    /// Taylor degree `s`.
    pub degree: u32,
    /// Temperature `τ`.
    pub tau: f64,
    /// Number of features `r = C(d + s, s)`.
    pub features: usize,
    /// `Γ`, the feature range.
    pub gamma: f64,
    /// Copies `l` (1 for the non-adaptive structure).
    pub copies: usize,
}

fn info_of(m: &TaylorFeatureMap, gamma: f64, copies: usize) -> dpattn_softmax_tree_shape {
    dpattn_softmax_tree_shape {
        dim: m.dim(),
        degree: m.degree(),
        tau: m.tau(),
        features: m.features(),
        gamma,
        copies,
    }
}

/// Builds DPTreeSoftmax (Algorithm 3) over the rows of `keys` (`rows × cols`, row stride
/// `row_stride`) with weights `weights` (`weights_len = rows`), noised with fresh randomness
/// from `session` (from element 0 of its stream). Answers `Z(y) = Σ_i w_i exp(τ⟨x_i, y⟩)`
/// for public `y`.
///
/// **Guarantee** (Theorem G.7 with the corrections P1-11 and P1-15 of `docs/PAPERS.md`):
/// `(ε, δ + δ′)`-DP for neighbouring datasets that differ in **one row** `(x_k, w_k)` (one token),
/// for `X ∈ [0, R]^{n×d}`, `w ∈ [−R_w, R_w]^n` (private rows clamped there, NaN → 0); `n` is
/// public. The accountant (`dpattn_softmax_tree_achieved_privacy`) reports what is actually spent
/// (about `2ε/3` under the paper split); the session's ledger is charged exactly that (module
/// docs). Errors: `DPATTN_STATUS_NULL_ARGUMENT`, `_SHAPE_MISMATCH`, `_BUFFER_TOO_SHORT`,
/// `_OUT_OF_RANGE` (bad parameters), `_INFEASIBLE`, `_MEMORY_LIMIT` (estimate over
/// `memory_limit_bytes`, before allocating), `_ALLOCATION_FAILED`, `_MISALIGNED`,
/// `_SIZE_OVERFLOW`, `_INVALID_HANDLE` (a freed session), the ledger's status for a refused
/// charge. Allocates. Thread-safe.
///
/// ```c
/// dpattn_softmax_tree_params p;
/// dpattn_softmax_tree_params_default(&p);
/// p.epsilon = 0.5; p.delta = 1e-6; p.delta_prime = 1e-6;
/// dpattn_softmax_tree *t = NULL;
/// dpattn_softmax_tree_new(keys, n * d, n, d, d, w, n, &p, session, &t);
/// size_t len; dpattn_softmax_tree_query_scratch_len(t, &len);
/// double z; dpattn_softmax_tree_query(t, y, d, scratch, len, &z);
/// dpattn_softmax_tree_free(t);
/// ```
///
/// # Safety
/// Buffers valid for their lengths, struct pointers readable, `session` a value returned
/// by `dpattn_session_new*` (a freed one is detected), `out_tree` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_new(
    keys: *const f64,
    keys_len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    weights: *const f64,
    weights_len: usize,
    params: *const dpattn_softmax_tree_params,
    session: *mut dpattn_session,
    out_tree: *mut *mut dpattn_softmax_tree,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (k, w, p) = unsafe {
            (
                mat(keys, keys_len, rows, cols, row_stride, "keys")?,
                slice(weights, weights_len, "weights")?,
                read(params, "params")?,
            )
        };
        let p = p.to_core()?;
        let t = with_session(session, st::STREAMS, |draw, l| {
            Ok(DpTreeSoftmax::new_keyed(k, w, &p, draw, l)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_softmax_tree::into_handle(t)) };
        Ok(())
    })
}

/// **Not differentially private.** The noise-free DPTreeSoftmax over unclamped finite data
/// (tests, audits, bias measurement only). Errors as `dpattn_softmax_tree_new` plus
/// `_NON_FINITE`. Allocates. Thread-safe.
///
/// The handle is marked exact: queries that report a privacy guarantee or a noise level on it
/// (`_achieved_privacy`, `_get_budget`, a nominal `_noise_variance` or `_projection_noise_std`)
/// return `DPATTN_STATUS_UNSUPPORTED`, so it cannot be passed off as a DP release.
///
/// # Safety
/// As `dpattn_softmax_tree_new`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_new_exact(
    keys: *const f64,
    keys_len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    weights: *const f64,
    weights_len: usize,
    params: *const dpattn_softmax_tree_params,
    out_tree: *mut *mut dpattn_softmax_tree,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (k, w, p) = unsafe {
            (
                mat(keys, keys_len, rows, cols, row_stride, "keys")?,
                slice(weights, weights_len, "weights")?,
                read(params, "params")?,
            )
        };
        let t = DpTreeSoftmax::non_private_exact(k, w, &p.to_core()?)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_softmax_tree::into_exact_handle(t)) };
        Ok(())
    })
}

/// Releases a DPTreeSoftmax; NULL and freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_free(tree: *mut dpattn_softmax_tree) {
    ffi_value((), || {
        dpattn_softmax_tree::free(tree);
    })
}

/// The structure's shape (`copies = 1`) and depth `L`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_info(
    tree: *const dpattn_softmax_tree,
    out_info: *mut dpattn_softmax_tree_shape,
    out_depth: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_info, "out_info")?, Out::new(out_depth, "out_depth")?);
        let (i, d) =
            with(tree, "tree", |t| Ok((info_of(t.feature_map(), t.gamma(), 1), t.depth())))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(i);
            b.write(d);
        }
        Ok(())
    })
}

/// The structure's budget hierarchy. Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_get_budget(
    tree: *const dpattn_softmax_tree,
    out: *mut dpattn_softmax_budget,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        let b = with_private(tree, "tree", |t| Ok(dpattn_softmax_budget::from_core(t.budget())))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(b) };
        Ok(())
    })
}

/// What the structure actually achieves, `(ε, δ)` with `δ′` included in `δ`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`, accountant errors. Thread-safe
/// (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_achieved_privacy(
    tree: *const dpattn_softmax_tree,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, d) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        let b = with_private(tree, "tree", |t| Ok(t.achieved_privacy()?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { write_budget(e, d, b) };
        Ok(())
    })
}

/// Scratch (`double` elements) for `dpattn_softmax_tree_query`: `r + d`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_query_scratch_len(
    tree: *const dpattn_softmax_tree,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = with(tree, "tree", |t| Ok(t.query_scratch_len()))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// The noisy `Σ_k w_k P(x_k)·P(y)` (Algorithm 3 DistanceQuery) for a public `y`
/// (`y_len = d`). Accuracy: `|answer − wᵀexp(τXy)| ≤ ε_s Σ|w_i| e^{τ⟨x_i,y⟩}` (the corrected
/// form of `docs/PAPERS.md` P1-11) + own-bin bias + noise (variance
/// `dpattn_softmax_tree_noise_variance`). Errors: `DPATTN_STATUS_SCRATCH_TOO_SMALL`,
/// `_SHAPE_MISMATCH`, `_OUT_OF_RANGE` / `_NON_FINITE` (bad query per the policy), `_ALIASING`,
/// `_NULL_ARGUMENT`, `_INVALID_HANDLE`. Allocation-free. Thread-safe (per-handle lock).
///
/// # Safety
/// `y` readable for `y_len`, `scratch` writable for `scratch_len`, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_query(
    tree: *const dpattn_softmax_tree,
    y: *const f64,
    y_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (y, sc) = unsafe { query_bufs(y, y_len, scratch, scratch_len) }?;
        let v = with(tree, "tree", |t| Ok(t.query_into(y, sc)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// # Safety
/// Pointers valid for their lengths.
unsafe fn query_bufs<'a>(
    y: *const f64,
    y_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
) -> Result<(&'a [f64], &'a mut [f64]), FfiError> {
    let mut bufs = Buffers::default();
    bufs.input("y", y, y_len).output("scratch", scratch, scratch_len);
    bufs.disjoint()?;
    // SAFETY: forwarded caller contract; scratch disjoint from `y`.
    unsafe { Ok((slice(y, y_len, "y")?, slice_mut(scratch, scratch_len, "scratch")?)) }
}

/// The exact noise variance of the answer at `y` (`docs/PAPERS.md` §1.7). Allocates `r + d`
/// doubles. Errors as the query (plus `_ALLOCATION_FAILED`). Thread-safe (per-handle lock).
///
/// # Safety
/// `y` readable for `y_len`, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_noise_variance(
    tree: *const dpattn_softmax_tree,
    y: *const f64,
    y_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let y = unsafe { slice(y, y_len, "y") }?;
        let v = with_private(tree, "tree", |t| Ok(t.noise_variance(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The released scalars `(P_wx, s_w)`. Errors: `DPATTN_STATUS_NULL_ARGUMENT`,
/// `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_scalars(
    tree: *const dpattn_softmax_tree,
    out_pwx: *mut f64,
    out_sw: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) = (Out::new(out_pwx, "out_pwx")?, Out::new(out_sw, "out_sw")?);
        let (p, s) = with(tree, "tree", |t| Ok(t.scalars()))?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(p);
            b.write(s);
        }
        Ok(())
    })
}

/// Parameters of DPTreeSoftmaxAdaptive.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dpattn_softmax_tree_adaptive_params {
    /// Per-structure parameters; `epsilon`, `delta`, `delta_prime` are the total.
    pub tree: dpattn_softmax_tree_params,
    /// The copy count rule.
    pub copies: dpattn_softmax_tree_copies,
    /// Failure probability `p_f` of the uniform accuracy statement (`(0, 0.01]` strict).
    pub p_fail: f64,
    /// `[FIX]` `docs/PAPERS.md` P1-13: 1 to snap each query coordinate to the `2ε₀` net before
    /// answering.
    pub snap_to_net: u32,
}

impl dpattn_softmax_tree_adaptive_params {
    fn to_core(self) -> Result<AdaptiveParams, FfiError> {
        let mut p = AdaptiveParams::new(self.tree.to_core()?);
        p.copies = self.copies.to_core()?;
        p.p_fail = self.p_fail;
        p.snap_to_net = flag("snap_to_net", self.snap_to_net)?;
        Ok(p)
    }
}

/// Fills `*out`: the tree defaults of `dpattn_softmax_tree_params_default` (budget to be
/// set), net/Hoeffding copies with `k = 10`, `p_f = 0.01`, no snapping. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_params_default(
    out: *mut dpattn_softmax_tree_adaptive_params,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            out.write(dpattn_softmax_tree_adaptive_params {
                tree: default_tree_params(),
                copies: dpattn_softmax_tree_copies {
                    kind: DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING,
                    value: 10.0,
                    fixed: 1,
                },
                p_fail: 0.01,
                snap_to_net: 0,
            })
        };
        Ok(())
    })
}

/// The copy count `l` (odd) these parameters give for keys of dimension `dim`. Errors:
/// `DPATTN_STATUS_OUT_OF_RANGE`, `_INFEASIBLE`, `_SIZE_OVERFLOW`, `_NULL_ARGUMENT`.
/// Thread-safe.
///
/// # Safety
/// `params` readable, `out` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_copy_count(
    params: *const dpattn_softmax_tree_adaptive_params,
    dim: usize,
    out: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: readable per the caller's contract.
        let p = unsafe { read(params, "params") }?.to_core()?;
        let l = p.copy_count(dim)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(l) };
        Ok(())
    })
}

/// Builds DPTreeSoftmaxAdaptive (Algorithm 7): `l` independent DPTreeSoftmax copies at
/// `(ε/l, δ/l, δ′/l)`, queries answered by their median.
///
/// **Guarantee**: `(ε, δ + δ′)`-DP for neighbours differing in one row `(x_k, w_k)` (one
/// token; basic composition over the copies; `dpattn_softmax_tree_adaptive_achieved_privacy`
/// reports the spend, and the session's ledger is charged exactly that, one fresh stream id
/// for all copies). "Robust to adaptive queries" is an accuracy property, not a privacy
/// one. Errors as `dpattn_softmax_tree_new` (incl. `_MEMORY_LIMIT`). Allocates.
/// Thread-safe.
///
/// # Safety
/// As `dpattn_softmax_tree_new`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_new(
    keys: *const f64,
    keys_len: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    weights: *const f64,
    weights_len: usize,
    params: *const dpattn_softmax_tree_adaptive_params,
    session: *mut dpattn_session,
    out_tree: *mut *mut dpattn_softmax_tree_adaptive,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_tree, "out_tree")?;
        // SAFETY: forwarded caller contract.
        let (k, w, p) = unsafe {
            (
                mat(keys, keys_len, rows, cols, row_stride, "keys")?,
                slice(weights, weights_len, "weights")?,
                read(params, "params")?,
            )
        };
        let p = p.to_core()?;
        let t = with_session(session, st::STREAMS, |draw, l| {
            Ok(DpTreeSoftmaxAdaptive::new_keyed(k, w, &p, draw, l)?)
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(dpattn_softmax_tree_adaptive::into_handle(t)) };
        Ok(())
    })
}

/// Releases a DPTreeSoftmaxAdaptive; NULL and freed handles are ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_softmax_tree_adaptive_free(tree: *mut dpattn_softmax_tree_adaptive) {
    ffi_value((), || {
        dpattn_softmax_tree_adaptive::free(tree);
    })
}

/// The structure's shape (`copies = l`) and the budget hierarchy of one copy. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_info(
    tree: *const dpattn_softmax_tree_adaptive,
    out_info: *mut dpattn_softmax_tree_shape,
    out_copy_budget: *mut dpattn_softmax_budget,
) -> dpattn_status {
    ffi_status(|| {
        let (a, b) =
            (Out::new(out_info, "out_info")?, Out::new(out_copy_budget, "out_copy_budget")?);
        let (i, bb) = with(tree, "tree", |t| {
            let cb = dpattn_softmax_budget::from_core(t.copy_budget());
            Ok((info_of(t.feature_map(), t.gamma(), t.copies()), cb))
        })?;
        // SAFETY: checked non-NULL; writable.
        unsafe {
            a.write(i);
            b.write(bb);
        }
        Ok(())
    })
}

/// What the structure achieves: `l` copies under basic composition. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`, accountant errors. Thread-safe
/// (per-handle lock).
///
/// # Safety
/// Out-params writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_achieved_privacy(
    tree: *const dpattn_softmax_tree_adaptive,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, d) = (Out::new(out_epsilon, "out_epsilon")?, Out::new(out_delta, "out_delta")?);
        let b = with_private(tree, "tree", |t| Ok(t.achieved_privacy()?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { write_budget(e, d, b) };
        Ok(())
    })
}

/// Scratch for `dpattn_softmax_tree_adaptive_query`: `r + d + l`. Errors:
/// `DPATTN_STATUS_NULL_ARGUMENT`, `_INVALID_HANDLE`. Thread-safe (per-handle lock).
///
/// # Safety
/// `out_len` writable (or NULL, rejected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_query_scratch_len(
    tree: *const dpattn_softmax_tree_adaptive,
    out_len: *mut usize,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_len, "out_len")?;
        let n = with(tree, "tree", |t| Ok(t.query_scratch_len()))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// The median answer of the `l` copies at a public `y` (snapped to the net if configured).
/// Errors as `dpattn_softmax_tree_query`. Allocation-free. Thread-safe (per-handle lock).
///
/// # Safety
/// As `dpattn_softmax_tree_query`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_query(
    tree: *const dpattn_softmax_tree_adaptive,
    y: *const f64,
    y_len: usize,
    scratch: *mut f64,
    scratch_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let (y, sc) = unsafe { query_bufs(y, y_len, scratch, scratch_len) }?;
        let v = with(tree, "tree", |t| Ok(t.query_into(y, sc)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The exact noise variance of one copy's answer at `y` (`docs/PAPERS.md` §1.7). Allocates. Errors
/// as the query. Thread-safe (per-handle lock).
///
/// # Safety
/// `y` readable for `y_len`, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_softmax_tree_adaptive_copy_noise_variance(
    tree: *const dpattn_softmax_tree_adaptive,
    y: *const f64,
    y_len: usize,
    out: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out")?;
        // SAFETY: forwarded caller contract.
        let y = unsafe { slice(y, y_len, "y") }?;
        let v = with(tree, "tree", |t| Ok(t.copy_noise_variance(y)?))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Replay sessions for the unit tests of the paper-001 entry points: a C session and the
/// core [`Draw`](dpattn_core::session::Draw) it hands out, so a C release can be compared
/// with the core's keyed release bit for bit.
#[cfg(test)]
pub(crate) mod session_testing {
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::epoch_key;

    use crate::ledger::dpattn_ledger;
    use crate::session::{
        dpattn_session, dpattn_session_free, dpattn_session_new_for_replay, dpattn_session_position,
    };
    use crate::status::dpattn_status;
    use crate::tensor::dpattn_key;

    /// The epoch of every replay session made here.
    pub(crate) const EPOCH: u64 = 0x5eed;

    /// A replay session of master key `[byte; 32]` at [`EPOCH`] whose next release gets
    /// stream id `next`, charging `ledger` (NULL: nothing is charged).
    pub(crate) fn replay(byte: u8, next: u64, ledger: *mut dpattn_ledger) -> *mut dpattn_session {
        let mut s = std::ptr::null_mut();
        let key = dpattn_key { bytes: [byte; 32] };
        // SAFETY: live locals; `ledger` NULL or a handle.
        let st = unsafe { dpattn_session_new_for_replay(&key, EPOCH, next, ledger, &mut s) };
        assert_eq!(st, dpattn_status::Ok);
        s
    }

    /// The key the sessions of [`replay`] draw with (the epoch key of the master key).
    pub(crate) fn key(byte: u8) -> NoiseKey {
        epoch_key(&NoiseKey::for_replay([byte; 32]), EPOCH)
    }

    /// The session's next stream id.
    pub(crate) fn next_stream(s: *const dpattn_session) -> u64 {
        let (mut e, mut n) = (0, 0);
        // SAFETY: live out-pointers; `s` a handle.
        let st = unsafe { dpattn_session_position(s, &mut e, &mut n) };
        assert_eq!((st, e), (dpattn_status::Ok, EPOCH));
        n
    }

    /// A session that was freed (its id is never reused).
    pub(crate) fn freed() -> *mut dpattn_session {
        let s = replay(0, 0, std::ptr::null_mut());
        // SAFETY: a live handle, freed once.
        unsafe { dpattn_session_free(s) };
        s
    }

    /// Frees a session.
    pub(crate) fn free(s: *mut dpattn_session) {
        // SAFETY: a handle (or an ignored value).
        unsafe { dpattn_session_free(s) };
    }
}

#[cfg(test)]
mod tests {
    use super::session_testing as ss;
    use super::*;
    use crate::dp_forward::ledger_testing::{self as lt, Kind};
    use crate::last_error::last_error_string;
    use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    use dpattn_core::session::Draw;
    use std::ptr::null_mut;

    #[test]
    fn dp_tree_equals_core_and_detects_freed_handles() {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let mut t = null_mut();
        let session = ss::replay(7, 3, null_mut());
        // SAFETY: valid pointers.
        let s = unsafe { dpattn_dp_tree_new(values.as_ptr(), 8, 8.0, 1.0, 1e-6, session, &mut t) };
        assert_eq!(s, dpattn_status::Ok);
        assert_eq!(ss::next_stream(session), 4);
        let core = DpTree::new_keyed(
            &values,
            8.0,
            PrivacyBudget::new(1.0, 1e-6).unwrap(),
            Draw { key: &ss::key(7), stream: 3 },
            None,
            NoiseMode::Exact,
        )
        .unwrap();
        let (mut l, mut r) = (0.0, 0.0);
        // SAFETY: valid pointers.
        assert_eq!(unsafe { dpattn_dp_tree_query_leaf(t, 5, &mut l, &mut r) }, dpattn_status::Ok);
        let (cl, cr) = core.query_leaf(5).unwrap();
        assert_eq!((l.to_bits(), r.to_bits()), (cl.to_bits(), cr.to_bits()));
        // Out of range leaf: outputs untouched.
        // SAFETY: valid pointers.
        let st = unsafe { dpattn_dp_tree_query_leaf(t, 8, &mut l, &mut r) };
        assert_eq!(st, dpattn_status::OutOfRange);
        assert_eq!(l.to_bits(), cl.to_bits());
        let (mut nodes, mut sides, mut cnt) = ([0usize; 3], [9u32; 3], 0usize);
        // SAFETY: valid buffers.
        let s = unsafe {
            dpattn_dp_tree_touched_nodes(
                t,
                nodes.as_mut_ptr(),
                3,
                sides.as_mut_ptr(),
                3,
                5,
                &mut cnt,
            )
        };
        assert_eq!(s, dpattn_status::Ok);
        assert_eq!((nodes, sides, cnt), ([12, 7, 2], [0, 1, 0], 3)); // docs/PAPERS.md T1-B
        // SAFETY: too-short buffer.
        let s = unsafe {
            dpattn_dp_tree_touched_nodes(
                t,
                nodes.as_mut_ptr(),
                2,
                sides.as_mut_ptr(),
                3,
                5,
                &mut cnt,
            )
        };
        assert_eq!(s, dpattn_status::BufferTooShort);
        assert!(last_error_string().contains("out_nodes"));
        dpattn_dp_tree_free(t);
        // SAFETY: freed handle is detected, never dereferenced.
        let st = unsafe { dpattn_dp_tree_query_leaf(t, 5, &mut l, &mut r) };
        assert_eq!(st, dpattn_status::InvalidHandle);
        assert!(last_error_string().contains("tree"));
        dpattn_dp_tree_free(t); // double free is harmless
        dpattn_dp_tree_free(null_mut());
        // SAFETY: NULL / bad inputs rejected.
        unsafe {
            assert_eq!(
                dpattn_dp_tree_new(values.as_ptr(), 8, 8.0, 1.0, 1e-6, null_mut(), &mut t),
                dpattn_status::NullArgument
            );
            assert!(last_error_string().contains("session"));
            assert_eq!(
                dpattn_dp_tree_new(values.as_ptr(), 8, 8.0, 1.0, 1e-6, ss::freed(), &mut t),
                dpattn_status::InvalidHandle
            );
            assert!(last_error_string().contains("session"));
            assert_eq!(
                dpattn_dp_tree_new(values.as_ptr(), 0, 8.0, 1.0, 1e-6, session, &mut t),
                dpattn_status::OutOfRange
            );
            assert_eq!(
                dpattn_dp_tree_new(values.as_ptr(), 8, 8.0, -1.0, 1e-6, session, &mut t),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("epsilon"));
            assert_eq!(
                dpattn_dp_tree_new(
                    values.as_ptr(),
                    usize::MAX / 4,
                    8.0,
                    1.0,
                    1e-6,
                    session,
                    &mut t
                ),
                dpattn_status::SizeOverflow
            );
        }
        // Invalid arguments are refused before the session hands out a stream id; an error
        // of the build itself (empty input) consumes one.
        assert_eq!(ss::next_stream(session), 5);
        ss::free(session);
    }

    #[test]
    fn distance_figure_one_and_softmax_equal_core() {
        let x = [0.1, 0.3, 0.3, 0.3, 0.4, 0.6, 0.7, 0.9, 0.9];
        let w = [2.2, 3.1, -2.0, -3.0, 2.0, 6.0, 0.5, -1.0, 1.0];
        let p = dpattn_dp_tree_distance_params {
            p: 1,
            range: 1.0,
            weight_bound: 6.0,
            epsilon: 1.0,
            delta: 1e-3,
        };
        let mut t = null_mut();
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(
                dpattn_dp_tree_distance_new_exact(x.as_ptr(), 9, w.as_ptr(), 9, 16, &p, &mut t),
                dpattn_status::Ok
            );
            let mut v = 0.0;
            assert_eq!(dpattn_dp_tree_distance_query(t, 0.0, &mut v), dpattn_status::Ok);
            assert!((v - 4.4).abs() < 1e-12);
            assert_eq!(dpattn_dp_tree_distance_query(t, 1.5, &mut v), dpattn_status::OutOfRange);
            dpattn_dp_tree_distance_free(t);
            assert_eq!(
                dpattn_dp_tree_distance_new_exact(x.as_ptr(), 9, w.as_ptr(), 8, 16, &p, &mut t),
                dpattn_status::ShapeMismatch
            );
        }

        let keys = [0.2, 0.9, 0.5, 0.1, 1.0, 0.4];
        let wts = [1.0, -1.0, 0.5];
        let mut tp = default_tree_params();
        tp.epsilon = 0.5;
        tp.delta = 1e-6;
        tp.delta_prime = 1e-6;
        let mut h = null_mut();
        let session = ss::replay(7, 1, null_mut());
        // SAFETY: valid pointers.
        let s = unsafe {
            dpattn_softmax_tree_new(
                keys.as_ptr(),
                6,
                3,
                2,
                2,
                wts.as_ptr(),
                3,
                &tp,
                session,
                &mut h,
            )
        };
        assert_eq!(s, dpattn_status::Ok, "{}", last_error_string());
        let core = DpTreeSoftmax::new_keyed(
            MatRef::from_row_major(&keys, 3, 2).unwrap(),
            &wts,
            &tp.to_core().unwrap(),
            Draw { key: &ss::key(7), stream: 1 },
            None,
        )
        .unwrap();
        let mut len = 0;
        // SAFETY: valid pointers.
        unsafe { dpattn_softmax_tree_query_scratch_len(h, &mut len) };
        let mut sc = vec![0.0; len];
        let (y, mut z) = ([0.3, 0.7], 0.0);
        // SAFETY: valid pointers.
        let s =
            unsafe { dpattn_softmax_tree_query(h, y.as_ptr(), 2, sc.as_mut_ptr(), len, &mut z) };
        assert_eq!(s, dpattn_status::Ok);
        assert_eq!(z.to_bits(), core.query(&y).unwrap().to_bits());
        // SAFETY: scratch too small; NaN query.
        unsafe {
            assert_eq!(
                dpattn_softmax_tree_query(h, y.as_ptr(), 2, sc.as_mut_ptr(), len - 1, &mut z),
                dpattn_status::ScratchTooSmall
            );
            let bad = [f64::NAN, 0.5];
            assert_eq!(
                dpattn_softmax_tree_query(h, bad.as_ptr(), 2, sc.as_mut_ptr(), len, &mut z),
                dpattn_status::NonFinite
            );
        }
        dpattn_softmax_tree_free(h);
        // Memory limit and unknown enum values.
        tp.memory_limit_bytes = 16;
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(
                dpattn_softmax_tree_new(
                    keys.as_ptr(),
                    6,
                    3,
                    2,
                    2,
                    wts.as_ptr(),
                    3,
                    &tp,
                    session,
                    &mut h
                ),
                dpattn_status::MemoryLimit
            );
            tp.memory_limit_bytes = 1 << 30;
            tp.accounting = 7;
            assert_eq!(
                dpattn_softmax_tree_new(
                    keys.as_ptr(),
                    6,
                    3,
                    2,
                    2,
                    wts.as_ptr(),
                    3,
                    &tp,
                    session,
                    &mut h
                ),
                dpattn_status::OutOfRange
            );
            assert!(last_error_string().contains("accounting"));
        }
        ss::free(session);
    }

    /// Builds each of the five structures through the C ABI on `session`, returning the
    /// status and the `(ε, δ)` its handle reports as achieved (NaN when not built); frees
    /// the handles.
    fn build_all(session: *mut dpattn_session) -> Vec<(dpattn_status, f64, f64)> {
        let values = [0.25, -1.0, 0.5, 2.0];
        let x = [0.1, 0.3, 0.6, 0.9];
        let keys = [0.2, 0.9, 0.5, 0.1, 1.0, 0.4, 0.3, 0.3];
        let dp = dpattn_dp_tree_distance_params {
            p: 1,
            range: 1.0,
            weight_bound: 1.0,
            epsilon: 0.5,
            delta: 1e-4,
        };
        let hp = dpattn_dp_tree_high_dim_params {
            p: 1,
            range: 1.0,
            weight_bound: 1.0,
            epsilon: 0.5,
            delta: 1e-6,
            delta_prime: 1e-6,
            c: 0.09,
        };
        let mut tp = default_tree_params();
        (tp.epsilon, tp.delta, tp.delta_prime) = (0.5, 1e-6, 1e-6);
        let mut ap = std::mem::MaybeUninit::uninit();
        // SAFETY: writable local, initialised on success.
        let mut ap = unsafe {
            assert_eq!(
                dpattn_softmax_tree_adaptive_params_default(ap.as_mut_ptr()),
                dpattn_status::Ok
            );
            ap.assume_init()
        };
        ap.tree = tp;
        ap.copies = dpattn_softmax_tree_copies {
            kind: DPATTN_SOFTMAX_TREE_COPIES_FIXED,
            value: 0.0,
            fixed: 3,
        };
        let nan = (f64::NAN, f64::NAN);
        let mut out = Vec::new();
        // SAFETY: live locals of the stated lengths; handles freed once.
        unsafe {
            let mut t = null_mut();
            let st = dpattn_dp_tree_new(values.as_ptr(), 4, 2.0, 0.5, 1e-6, session, &mut t);
            // DPTree reports no achieved privacy: it spends exactly (ε, δ).
            let (e, d) = if st == dpattn_status::Ok { (0.5, 1e-6) } else { nan };
            out.push((st, e, d));
            dpattn_dp_tree_free(t);

            let mut t = null_mut();
            let st = dpattn_dp_tree_distance_new(
                x.as_ptr(),
                4,
                values.as_ptr(),
                4,
                &dp,
                session,
                &mut t,
            );
            let (e, d) = if st == dpattn_status::Ok { (0.5, 1e-4) } else { nan };
            out.push((st, e, d));
            dpattn_dp_tree_distance_free(t);

            let (mut e, mut d) = nan;
            let mut t = null_mut();
            let st = dpattn_dp_tree_high_dim_new(
                x.as_ptr(),
                4,
                2,
                2,
                2,
                values.as_ptr(),
                2,
                &hp,
                session,
                &mut t,
            );
            if st == dpattn_status::Ok {
                assert_eq!(
                    dpattn_dp_tree_high_dim_achieved_privacy(t, &mut e, &mut d),
                    dpattn_status::Ok
                );
            }
            out.push((st, e, d));
            dpattn_dp_tree_high_dim_free(t);

            let (mut e, mut d) = nan;
            let mut t = null_mut();
            let st = dpattn_softmax_tree_new(
                keys.as_ptr(),
                8,
                4,
                2,
                2,
                values.as_ptr(),
                4,
                &tp,
                session,
                &mut t,
            );
            if st == dpattn_status::Ok {
                assert_eq!(
                    dpattn_softmax_tree_achieved_privacy(t, &mut e, &mut d),
                    dpattn_status::Ok
                );
            }
            out.push((st, e, d));
            dpattn_softmax_tree_free(t);

            let (mut e, mut d) = nan;
            let mut t = null_mut();
            let st = dpattn_softmax_tree_adaptive_new(
                keys.as_ptr(),
                8,
                4,
                2,
                2,
                values.as_ptr(),
                4,
                &ap,
                session,
                &mut t,
            );
            if st == dpattn_status::Ok {
                assert_eq!(
                    dpattn_softmax_tree_adaptive_achieved_privacy(t, &mut e, &mut d),
                    dpattn_status::Ok
                );
            }
            out.push((st, e, d));
            dpattn_softmax_tree_adaptive_free(t);
        }
        out
    }

    #[test]
    fn every_build_charges_the_sessions_ledger_what_it_achieves() {
        // An approximate-DP ledger for tokens: each build is one (ε, δ) charge of what the
        // structure reports as achieved, on one fresh stream id.
        let (l, _) = lt::pair(PrivacyUnit::TOKEN, Kind::Approx(100.0, 0.5));
        let session = ss::replay(9, 40, l);
        let built = build_all(session);
        let (mut eps, mut delta) = (0.0, 0.0);
        for (i, &(st, e, d)) in built.iter().enumerate() {
            assert_eq!(st, dpattn_status::Ok, "structure {i}: {}", last_error_string());
            assert!(e > 0.0 && e <= 0.5 && d > 0.0, "structure {i}: ({e}, {d})");
            eps += e;
            delta += d;
        }
        let (spent, charges) = lt::state(l);
        assert_eq!(charges, 5);
        assert!((spent.epsilon / eps - 1.0).abs() < 1e-12, "{spent:?} vs {eps}");
        assert!((spent.delta / delta - 1.0).abs() < 1e-12, "{spent:?} vs {delta}");
        assert_eq!(ss::next_stream(session), 45);
        ss::free(session);
        lt::free(l);

        // zCDP and RDP ledgers cannot take an (ε, δ > 0) charge; a ledger kept for another
        // unit refuses it too; over budget is refused. No handle, ledger unchanged.
        for (unit, kind, want) in [
            (PrivacyUnit::TOKEN, Kind::Zcdp(10.0), dpattn_status::OutOfRange),
            (PrivacyUnit::TOKEN, Kind::Rdp(10.0, 1e-5), dpattn_status::OutOfRange),
            (PrivacyUnit::Prompt, Kind::Approx(100.0, 0.5), dpattn_status::UnitMismatch),
            (PrivacyUnit::TOKEN, Kind::Approx(0.01, 0.5), dpattn_status::Infeasible),
        ] {
            let (l, _) = lt::pair(unit, kind);
            let session = ss::replay(9, 0, l);
            for (i, (st, e, _)) in build_all(session).into_iter().enumerate() {
                assert_eq!(st, want, "{kind:?} {unit:?}, structure {i}");
                assert!(e.is_nan());
            }
            lt::assert_untouched(l);
            assert_eq!(ss::next_stream(session), 5, "each refused build consumed its stream id");
            ss::free(session);
            lt::free(l);
        }

        // A replay session without a ledger builds and charges nothing.
        let session = ss::replay(9, 40, null_mut());
        let again = build_all(session);
        assert!(again.iter().all(|r| r.0 == dpattn_status::Ok));
        ss::free(session);
    }

    #[test]
    fn each_structure_equals_the_cores_keyed_build_with_its_charge() {
        // The C session's draw (epoch key, next stream id) and ledger against the core's
        // new_keyed with the same draw and a core ledger of the same kind.
        let x = [0.1, 0.3, 0.6, 0.9, 0.45, 0.2];
        let w = [0.5, -1.0, 0.25, 1.0, 0.0, 0.75];
        let hp = dpattn_dp_tree_high_dim_params {
            p: 2,
            range: 1.0,
            weight_bound: 1.0,
            epsilon: 0.5,
            delta: 1e-6,
            delta_prime: 1e-6,
            c: 0.09,
        };
        let (l, mut cl) = lt::pair(PrivacyUnit::TOKEN, Kind::Approx(10.0, 1e-3));
        let session = ss::replay(3, 17, l);
        let mut t = null_mut();
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_dp_tree_high_dim_new(x.as_ptr(), 6, 3, 2, 2, w.as_ptr(), 3, &hp, session, &mut t)
        };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let core = DpTreeHighDim::new_keyed(
            MatRef::from_row_major(&x, 3, 2).unwrap(),
            &w[..3],
            &HighDimParams {
                p: 2,
                range: 1.0,
                weight_bound: 1.0,
                budget: PrivacyBudget::new(0.5, 1e-6).unwrap(),
                delta_prime: 1e-6,
                c: 0.09,
                noise_mode: NoiseMode::Exact,
            },
            Draw { key: &ss::key(3), stream: 17 },
            Some(&mut cl),
        )
        .unwrap();
        lt::assert_same(l, &cl);
        for y in [[0.0, 0.0], [0.3, 0.8], [1.0, 0.5]] {
            let mut v = 0.0;
            // SAFETY: live locals.
            let st = unsafe { dpattn_dp_tree_high_dim_query(t, y.as_ptr(), 2, &mut v) };
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(v.to_bits(), core.query(&y).unwrap().to_bits());
        }
        dpattn_dp_tree_high_dim_free(t);

        let dp = dpattn_dp_tree_distance_params {
            p: 2,
            range: 1.0,
            weight_bound: 1.0,
            epsilon: 0.5,
            delta: 1e-4,
        };
        let mut t = null_mut();
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_dp_tree_distance_new(x.as_ptr(), 6, w.as_ptr(), 6, &dp, session, &mut t)
        };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let core = DpTreeDistance::new_keyed(
            &x,
            &w,
            &dp.to_core().unwrap(),
            Draw { key: &ss::key(3), stream: 18 },
            Some(&mut cl),
        )
        .unwrap();
        lt::assert_same(l, &cl);
        for y in [0.0, 0.3, 1.0] {
            let mut v = 0.0;
            // SAFETY: live locals.
            assert_eq!(unsafe { dpattn_dp_tree_distance_query(t, y, &mut v) }, dpattn_status::Ok);
            assert_eq!(v.to_bits(), core.query(y).unwrap().to_bits());
        }
        dpattn_dp_tree_distance_free(t);

        let keys = [0.2, 0.9, 0.5, 0.1, 1.0, 0.4];
        let mut ap = std::mem::MaybeUninit::uninit();
        // SAFETY: writable local, initialised on success.
        let mut ap = unsafe {
            assert_eq!(
                dpattn_softmax_tree_adaptive_params_default(ap.as_mut_ptr()),
                dpattn_status::Ok
            );
            ap.assume_init()
        };
        (ap.tree.epsilon, ap.tree.delta, ap.tree.delta_prime) = (0.5, 1e-6, 1e-6);
        ap.copies = dpattn_softmax_tree_copies {
            kind: DPATTN_SOFTMAX_TREE_COPIES_FIXED,
            value: 0.0,
            fixed: 3,
        };
        let mut t = null_mut();
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_softmax_tree_adaptive_new(
                keys.as_ptr(),
                6,
                3,
                2,
                2,
                w.as_ptr(),
                3,
                &ap,
                session,
                &mut t,
            )
        };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let core = DpTreeSoftmaxAdaptive::new_keyed(
            MatRef::from_row_major(&keys, 3, 2).unwrap(),
            &w[..3],
            &ap.to_core().unwrap(),
            Draw { key: &ss::key(3), stream: 19 },
            Some(&mut cl),
        )
        .unwrap();
        lt::assert_same(l, &cl);
        let mut len = 0;
        // SAFETY: live locals.
        unsafe { dpattn_softmax_tree_adaptive_query_scratch_len(t, &mut len) };
        let (y, mut sc, mut z) = ([0.3, 0.7], vec![0.0; len], 0.0);
        // SAFETY: live locals of the stated lengths.
        let st = unsafe {
            dpattn_softmax_tree_adaptive_query(t, y.as_ptr(), 2, sc.as_mut_ptr(), len, &mut z)
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(z.to_bits(), core.query(&y).unwrap().to_bits());
        dpattn_softmax_tree_adaptive_free(t);
        assert_eq!(cl.charges(), 3);
        ss::free(session);
        lt::free(l);
    }

    #[test]
    fn budget_config_a() {
        let mut b = std::mem::MaybeUninit::uninit();
        // SAFETY: valid pointer.
        let s =
            unsafe { dpattn_softmax_tree_budget(0.5, 5e-7, 5e-7, 0.09, 70, 10, 0, b.as_mut_ptr()) };
        assert_eq!(s, dpattn_status::Ok);
        // SAFETY: initialised on success.
        let b = unsafe { b.assume_init() };
        assert!((b.distance_epsilon / 4.59827e-4 - 1.0).abs() < 1e-5);
        assert!((b.distance_delta / 2.38095e-9 - 1.0).abs() < 1e-5);
        let mut v = 3.0;
        // SAFETY: valid pointers; δ′ ≥ 1 rejected.
        let s = unsafe {
            dpattn_softmax_tree_budget(0.5, 5e-7, 1.0, 0.09, 70, 10, 0, &mut std::mem::zeroed())
        };
        assert_eq!(s, dpattn_status::OutOfRange);
        assert!(last_error_string().contains("delta_prime"));
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(
                dpattn_softmax_tree_uniform_noise_std(&b, 10, 1.0, 2.0, 1.0, &mut v),
                dpattn_status::Ok
            );
            let core = st::uniform_noise_std(&b.to_core().unwrap(), 10, 1.0, 2.0, 1.0).unwrap();
            assert_eq!(v.to_bits(), core.to_bits());
            let mut n = 0usize;
            assert_eq!(dpattn_softmax_tree_bin(0.5, 1.0, 0, &mut n), dpattn_status::OutOfRange);
            assert!(last_error_string().contains("n_leaves"));
        }
        assert!(dpattn_softmax_tree_taylor_exp(1.0, 65).is_nan());
    }
}
