//! Privacy accounting from C: composition of (ε, δ)-DP mechanisms, zCDP conversions, and
//! Rényi DP of the (Poisson-subsampled) Gaussian mechanism with its conversion to (ε, δ)
//! and the DP-SGD noise calibration.
//!
//! Every returned bound is rounded in the safe direction (composed ε, δ and converted ε up;
//! per-step budgets and ρ targets down; noise multipliers up). **Neighbour relation**: none
//! of its own; all composed mechanisms must share one relation (add/remove-one or
//! replace-one), and the result holds for it.
//!
//! RDP functions take the orders as `const double *orders, size_t orders_len`; pass
//! `NULL, 0` for the 156 default orders (dp_accounting's `DEFAULT_RDP_ORDERS`, copied by
//! `dpattn_rdp_default_orders`).

use dpattn_core::accounting::composition::{
    Rho, advanced_composition, advanced_composition_step_epsilon, basic_composition,
    basic_composition_k, zcdp_from_pure, zcdp_gaussian, zcdp_rho_for, zcdp_rho_for_bs16,
    zcdp_to_epsilon, zcdp_to_epsilon_bs16,
};
use dpattn_core::accounting::rdp::{
    DEFAULT_ORDER_COUNT, DEFAULT_ORDERS, SampledGaussianRdp, calibrate_sampled_gaussian,
    delta_from_rdp, epsilon_after_steps, epsilon_from_rdp,
};
use dpattn_core::{Delta, Epsilon, PrivacyBudget, Sensitivity};

use crate::args::{Out, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status};
use crate::status::dpattn_status;

/// The number of default RDP orders (`dpattn_rdp_default_orders`).
pub const DPATTN_RDP_DEFAULT_ORDER_COUNT: usize = 156;
const _: () = assert!(DPATTN_RDP_DEFAULT_ORDER_COUNT == DEFAULT_ORDER_COUNT);

/// Runs `f` and writes its two results on success.
///
/// # Safety
/// `a` and `b` must be NULL or valid for one write each.
unsafe fn pair<A, B>(
    a: *mut A,
    a_name: &'static str,
    b: *mut B,
    b_name: &'static str,
    f: impl FnOnce() -> Result<(A, B), FfiError>,
) -> dpattn_status {
    ffi_status(|| {
        let (oa, ob) = (Out::new(a, a_name)?, Out::new(b, b_name)?);
        let (va, vb) = f()?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe {
            oa.write(va);
            ob.write(vb);
        }
        Ok(())
    })
}

/// Runs `f` and writes its result on success.
///
/// # Safety
/// `a` must be NULL or valid for one write.
unsafe fn one<A>(
    a: *mut A,
    a_name: &'static str,
    f: impl FnOnce() -> Result<A, FfiError>,
) -> dpattn_status {
    ffi_status(|| {
        let oa = Out::new(a, a_name)?;
        let v = f()?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { oa.write(v) };
        Ok(())
    })
}

fn budget_parts(b: PrivacyBudget) -> (f64, f64) {
    (b.epsilon().get(), b.delta().get())
}

/// Steps per call of the core's `basic_composition` (a stack array: no allocation).
const CHUNK: usize = 32;

/// Basic composition (Dwork & Roth 2014, Thm 3.16; adaptive: Dwork, Rothblum, Vadhan 2010)
/// of `len` mechanisms, mechanism `i` being `(epsilons[i], deltas[i])`-DP: the composition
/// is `(Σεᵢ, Σδᵢ)`-DP, both sums rounded up (exact when exactly representable). Writes
/// `*out_epsilon`, `*out_delta`. Allocation-free (the core is called on chunks with the
/// running total carried, which performs the same sequence of rounded additions).
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer, or an
/// array with `len > 0`), `DPATTN_STATUS_OUT_OF_RANGE` (`len = 0`; an `epsilons[i]` not
/// finite and `> 0`; a `deltas[i]` outside `[0, 1)`; the message names the parameter),
/// `DPATTN_STATUS_INFEASIBLE` (`Σεᵢ` overflows or `Σδᵢ ≥ 1`), `DPATTN_STATUS_MISALIGNED`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// ```c
/// double eps[2] = {0.5, 0.25}, del[2] = {1e-6, 0.0}, e, d;
/// dpattn_basic_composition(eps, del, 2, &e, &d); // e = 0.75, d = 1e-6
/// ```
///
/// # Safety
/// `epsilons` and `deltas` must be NULL or valid for reading `len` doubles; the
/// out-pointers NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_basic_composition(
    epsilons: *const f64,
    deltas: *const f64,
    len: usize,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_epsilon, "out_epsilon", out_delta, "out_delta", || {
            // SAFETY: readable for `len` doubles per the caller contract.
            let eps = slice(epsilons, len, "epsilons")?;
            // SAFETY: as above.
            let del = slice(deltas, len, "deltas")?;
            let mut acc: Option<PrivacyBudget> = None;
            let mut buf = [PrivacyBudget::from_parts(Epsilon::new(1.0)?, Delta::ZERO); CHUNK + 1];
            for (ce, cd) in eps.chunks(CHUNK).zip(del.chunks(CHUNK)) {
                let mut n = 0;
                if let Some(a) = acc {
                    buf[0] = a;
                    n = 1;
                }
                for (&e, &d) in ce.iter().zip(cd) {
                    buf[n] = PrivacyBudget::new(e, d)?;
                    n += 1;
                }
                acc = Some(basic_composition(&buf[..n])?);
            }
            Ok(budget_parts(basic_composition(acc.as_slice())?))
        })
    }
}

/// Basic composition of `k` mechanisms that are each `(epsilon, delta)`-DP: `(kε, kδ)`,
/// rounded up. Writes `*out_epsilon`, `*out_delta`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`k = 0`, `epsilon` not finite and `> 0`, `delta` outside
/// `[0, 1)`), `DPATTN_STATUS_INFEASIBLE` (`kε` overflows or `kδ ≥ 1`). Thread-safe; no
/// shared state.
///
/// # Safety
/// The out-pointers must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_basic_composition_k(
    epsilon: f64,
    delta: f64,
    k: u64,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_epsilon, "out_epsilon", out_delta, "out_delta", || {
            Ok(budget_parts(basic_composition_k(PrivacyBudget::new(epsilon, delta)?, k)?))
        })
    }
}

/// Advanced composition (Dwork, Rothblum, Vadhan 2010; Dwork & Roth 2014, Thm 3.20): `k`
/// adaptively composed `(ε, δ)`-DP mechanisms are `(ε', kδ + δ')`-DP for the slack
/// `δ' = slack_delta > 0`, with `ε' = √(2k ln(1/δ'))·ε + k·ε·(e^ε − 1)`, both rounded up.
/// (`k`, ε and δ must be fixed in advance.) Basic composition can be smaller for small `k`;
/// this function does not switch. Writes `*out_epsilon`, `*out_delta`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`k = 0`, `slack_delta` outside `(0, 1)`, `epsilon`/`delta`
/// invalid), `DPATTN_STATUS_INFEASIBLE` (`ε'` overflows or `kδ + δ' ≥ 1`). Thread-safe; no
/// shared state.
///
/// # Safety
/// The out-pointers must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_advanced_composition(
    epsilon: f64,
    delta: f64,
    k: u64,
    slack_delta: f64,
    out_epsilon: *mut f64,
    out_delta: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_epsilon, "out_epsilon", out_delta, "out_delta", || {
            let step = PrivacyBudget::new(epsilon, delta)?;
            let slack = Delta::new(slack_delta).map_err(|_| slack_error(slack_delta))?;
            Ok(budget_parts(advanced_composition(step, k, slack)?))
        })
    }
}

fn slack_error(v: f64) -> FfiError {
    FfiError::Core(dpattn_core::Error::OutOfRange {
        name: "slack_delta",
        value: v,
        allowed: "(0, 1)",
    })
}

/// The largest per-step ε such that `k` `(ε, δ)`-DP steps compose to `total_epsilon`
/// under advanced composition with slack `slack_delta` — never smaller than basic
/// composition's `total_epsilon / k` — rounded down. The composition is then
/// `(total_epsilon, kδ + slack_delta)`-DP. Writes `*out_epsilon`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_epsilon`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`k = 0`, `total_epsilon` not finite and `> 0`,
/// `slack_delta` outside `(0, 1)`), `DPATTN_STATUS_INFEASIBLE` (no positive double works).
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_advanced_composition_step_epsilon(
    total_epsilon: f64,
    k: u64,
    slack_delta: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_epsilon, "out_epsilon", || {
            let total = Epsilon::new(total_epsilon).map_err(|_| {
                FfiError::Core(dpattn_core::Error::OutOfRange {
                    name: "total_epsilon",
                    value: total_epsilon,
                    allowed: "(0, inf)",
                })
            })?;
            let slack = Delta::new(slack_delta).map_err(|_| slack_error(slack_delta))?;
            Ok(advanced_composition_step_epsilon(total, k, slack)?.get())
        })
    }
}

fn rho_arg(rho: f64) -> Result<Rho, FfiError> {
    Ok(Rho::new(rho)?)
}

fn positive_delta(delta: f64) -> Result<Delta, FfiError> {
    Ok(Delta::new_positive(delta)?)
}

/// ε-DP implies `(ε²/2)`-zCDP (Bun & Steinke 2016, Prop 1.4), rounded up. Writes
/// `*out_rho`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_rho`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` not finite and `> 0`),
/// `DPATTN_STATUS_INFEASIBLE` (`ε²/2` overflows). Thread-safe; no shared state.
///
/// # Safety
/// `out_rho` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_from_pure(epsilon: f64, out_rho: *mut f64) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { one(out_rho, "out_rho", || Ok(zcdp_from_pure(Epsilon::new(epsilon)?)?.get())) }
}

/// The Gaussian mechanism `N(0, σ²)` on a query of L2 sensitivity `Δ` is
/// `Δ²/(2σ²)`-zCDP (Bun & Steinke 2016, Prop 1.6), rounded up. Writes `*out_rho`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_rho`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sensitivity` or `sigma` not finite and `> 0`),
/// `DPATTN_STATUS_INFEASIBLE` (ρ overflows). Thread-safe; no shared state.
///
/// # Safety
/// `out_rho` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_gaussian(
    sensitivity: f64,
    sigma: f64,
    out_rho: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_rho, "out_rho", || Ok(zcdp_gaussian(Sensitivity::new(sensitivity)?, sigma)?.get()))
    }
}

/// ρ-zCDP implies `(ε, δ)`-DP with the tight conversion of Canonne, Kamath & Steinke 2020,
/// Cor 13: `ε = inf_{α>1} αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)`, evaluated at a
/// numerically optimised order and rounded up (never above Bun–Steinke's). Writes
/// `*out_epsilon`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_epsilon`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`rho` negative/NaN/infinite, `delta` outside `(0, 1)`),
/// `DPATTN_STATUS_INFEASIBLE` (the bound overflows). Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_to_epsilon(
    rho: f64,
    delta: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_epsilon, "out_epsilon", || {
            Ok(zcdp_to_epsilon(rho_arg(rho)?, positive_delta(delta)?)?)
        })
    }
}

/// ρ-zCDP implies `(ρ + 2√(ρ ln(1/δ)), δ)`-DP (Bun & Steinke 2016, Prop 1.3), rounded up.
/// `dpattn_zcdp_to_epsilon` is never larger. Writes `*out_epsilon`.
///
/// Status codes as `dpattn_zcdp_to_epsilon`. Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_to_epsilon_bs16(
    rho: f64,
    delta: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_epsilon, "out_epsilon", || {
            Ok(zcdp_to_epsilon_bs16(rho_arg(rho)?, positive_delta(delta)?)?)
        })
    }
}

/// The largest ρ such that ρ-zCDP implies `(epsilon, delta)`-DP by the CKS20 conversion
/// (`dpattn_zcdp_to_epsilon(ρ, δ) ≤ ε` is guaranteed), rounded down. Writes `*out_rho`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_rho`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` not finite and `> 0`, `delta` outside `(0, 1)`),
/// `DPATTN_STATUS_INFEASIBLE` (no positive ρ works). Thread-safe; no shared state.
///
/// # Safety
/// `out_rho` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_rho_for(
    epsilon: f64,
    delta: f64,
    out_rho: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_rho, "out_rho", || {
            positive_delta(delta)?;
            Ok(zcdp_rho_for(PrivacyBudget::new(epsilon, delta)?)?.get())
        })
    }
}

/// The closed-form inverse of the Bun–Steinke conversion,
/// `ρ = (√(ln(1/δ) + ε) − √ln(1/δ))²`, rounded down. Writes `*out_rho`.
///
/// Status codes as `dpattn_zcdp_rho_for`. Thread-safe; no shared state.
///
/// # Safety
/// `out_rho` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_zcdp_rho_for_bs16(
    epsilon: f64,
    delta: f64,
    out_rho: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_rho, "out_rho", || {
            positive_delta(delta)?;
            Ok(zcdp_rho_for_bs16(PrivacyBudget::new(epsilon, delta)?)?.get())
        })
    }
}

/// The orders: `NULL, 0` means the defaults.
///
/// # Safety
/// A non-NULL `orders` must be readable for `len` doubles for `'a`.
unsafe fn orders_arg<'a>(orders: *const f64, len: usize) -> Result<&'a [f64], FfiError> {
    if orders.is_null() && len == 0 {
        return Ok(&DEFAULT_ORDERS);
    }
    // SAFETY: forwarded caller contract.
    unsafe { slice(orders, len, "orders") }
}

/// Copies the 156 default RDP orders (`1.1, 1.2, …, 10.9`, `11, 12, …, 63`, `128, 256,
/// 512, 1024`: dp_accounting's `DEFAULT_RDP_ORDERS`) into `out[0..len]`; `len` must be at
/// least `DPATTN_RDP_DEFAULT_ORDER_COUNT` (only that many are written).
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out`),
/// `DPATTN_STATUS_BUFFER_TOO_SHORT` (`len < 156`), `DPATTN_STATUS_MISALIGNED`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`. Thread-safe; no shared state.
///
/// # Safety
/// `out` must be NULL or valid for writing `len` doubles, accessed by nothing else.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_default_orders(out: *mut f64, len: usize) -> dpattn_status {
    ffi_status(|| {
        if out.is_null() {
            return Err(FfiError::Null("out"));
        }
        if len < DEFAULT_ORDER_COUNT {
            return Err(FfiError::Core(dpattn_core::Error::BufferTooShort {
                arg: "out",
                needed: DEFAULT_ORDER_COUNT,
                got: len,
            }));
        }
        // SAFETY: writable for `len` doubles, exclusive (caller contract; one buffer only).
        let o = unsafe { slice_mut(out, len, "out") }?;
        o[..DEFAULT_ORDER_COUNT].copy_from_slice(&DEFAULT_ORDERS);
        Ok(())
    })
}

/// ε(α), an upper bound on the Rényi divergence of order `order` of the Poisson-subsampled
/// Gaussian mechanism with sampling rate `sample_rate` and noise multiplier
/// `noise_multiplier = σ/Δ` (Mironov, Talwar, Zhang 2019; DP-SGD's step; add/remove-one
/// neighbours under Poisson subsampling). `sample_rate = 1` is the plain Gaussian
/// `α/(2z²)` (Mironov 2017), valid for any neighbours at L2 distance `Δ`. Writes
/// `*out_rdp`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_rdp`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sample_rate` outside `[0, 1]`, `noise_multiplier` not
/// finite and `> 0`, `order` outside `(1, 1e6]`), `DPATTN_STATUS_INFEASIBLE` (a
/// fractional-order series that cannot be bracketed). Thread-safe; no shared state.
///
/// # Safety
/// `out_rdp` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_sampled_gaussian(
    sample_rate: f64,
    noise_multiplier: f64,
    order: f64,
    out_rdp: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_rdp, "out_rdp", || {
            Ok(SampledGaussianRdp::new(sample_rate, noise_multiplier)?.rdp(order)?)
        })
    }
}

/// The (ε, δ)-DP ε implied by the RDP curve `rdp[i]` at `orders[i]` (`i < len`), minimised
/// over the orders (Balle et al. 2020, Thm 21; CKS20 Prop 12; with the Bretagnolle–Huber
/// bound for tiny values), rounded up; the order attaining it goes to `*out_order`.
/// `orders` may not be NULL here (the curve's orders must be given).
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an array or out-pointer),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`len = 0`, an order outside `(1, 1e6]`, an RDP value
/// negative or NaN, `delta` outside `(0, 1)`), `DPATTN_STATUS_INFEASIBLE` (every value
/// infinite). Thread-safe; no shared state.
///
/// # Safety
/// `orders` and `rdp` must be NULL or readable for `len` doubles; the out-pointers NULL or
/// valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_epsilon(
    orders: *const f64,
    rdp: *const f64,
    len: usize,
    delta: f64,
    out_epsilon: *mut f64,
    out_order: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_epsilon, "out_epsilon", out_order, "out_order", || {
            // SAFETY: readable per the caller contract.
            let (o, r) = (slice(orders, len, "orders")?, slice(rdp, len, "rdp")?);
            let b = epsilon_from_rdp(o, r, delta)?;
            Ok((b.epsilon, b.order))
        })
    }
}

/// The (ε, δ)-DP δ implied by the RDP curve `rdp[i]` at `orders[i]` for a given `epsilon`
/// (the inverse of `dpattn_rdp_epsilon`), minimised over the orders and clamped at 1,
/// rounded up; the order attaining it goes to `*out_order`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (`len = 0`, an invalid order, an RDP value negative or
/// NaN, `epsilon` negative or not finite). Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_rdp_epsilon`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_delta(
    orders: *const f64,
    rdp: *const f64,
    len: usize,
    epsilon: f64,
    out_delta: *mut f64,
    out_order: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_delta, "out_delta", out_order, "out_order", || {
            // SAFETY: readable per the caller contract.
            let (o, r) = (slice(orders, len, "orders")?, slice(rdp, len, "rdp")?);
            let b = delta_from_rdp(o, r, epsilon)?;
            Ok((b.delta, b.order))
        })
    }
}

/// The ε, at `delta`, of `steps` compositions of the Poisson-subsampled Gaussian mechanism
/// (rate `sample_rate`, noise multiplier `noise_multiplier`) by the RDP accountant over
/// `orders` (`NULL, 0`: the defaults) — DP-SGD's privacy after `steps` steps, the core's
/// `epsilon_after_steps`. The order attaining the minimum goes to `*out_order`. With
/// `sample_rate = 1` this is the plain Gaussian mechanism with `σ/Δ = noise_multiplier`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer, or
/// `orders` NULL with `orders_len > 0`), `DPATTN_STATUS_OUT_OF_RANGE` (`sample_rate`
/// outside `[0, 1]`, `noise_multiplier` not finite and `> 0`, an invalid order, `delta`
/// outside `(0, 1)`), `DPATTN_STATUS_INFEASIBLE` (no finite ε, or a series failure).
/// Thread-safe; no shared state.
///
/// ```c
/// double eps, order;
/// // Opacus' golden value: q = 0.04, z = 1.5, 2250 steps, δ = 1e-5 (its own orders give
/// // 7.32911117143; the default orders give at most that)
/// dpattn_rdp_sampled_gaussian_epsilon(0.04, 1.5, 2250, NULL, 0, 1e-5, &eps, &order);
/// ```
///
/// # Safety
/// `orders` must be NULL or readable for `orders_len` doubles; the out-pointers NULL or
/// valid for writing a `double`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_sampled_gaussian_epsilon(
    sample_rate: f64,
    noise_multiplier: f64,
    steps: u64,
    orders: *const f64,
    orders_len: usize,
    delta: f64,
    out_epsilon: *mut f64,
    out_order: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        pair(out_epsilon, "out_epsilon", out_order, "out_order", || {
            // SAFETY: readable per the caller contract.
            let o = orders_arg(orders, orders_len)?;
            let m = SampledGaussianRdp::new(sample_rate, noise_multiplier)?;
            let b = epsilon_after_steps(&m, steps, o, delta)?;
            Ok((b.epsilon, b.order))
        })
    }
}

/// The smallest noise multiplier `z` (to 1e-10 relative, rounded up) such that `steps`
/// steps of the Poisson-subsampled Gaussian mechanism with rate `sample_rate` are
/// `(epsilon, delta)`-DP by the RDP accountant over `orders` (`NULL, 0`: the defaults):
/// DP-SGD noise calibration. The returned `z` always has computed ε `≤ epsilon`. Writes
/// `*out_noise_multiplier`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sample_rate` outside `(0, 1]`, `steps = 0`, `epsilon` not
/// finite and `> 0`, `delta` outside `(0, 1)`, invalid orders), `DPATTN_STATUS_INFEASIBLE`
/// (even `z = 2^40` does not reach `epsilon`). Thread-safe; no shared state.
///
/// # Safety
/// `orders` must be NULL or readable for `orders_len` doubles; `out_noise_multiplier` NULL
/// or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_rdp_calibrate_sampled_gaussian(
    sample_rate: f64,
    steps: u64,
    epsilon: f64,
    delta: f64,
    orders: *const f64,
    orders_len: usize,
    out_noise_multiplier: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        one(out_noise_multiplier, "out_noise_multiplier", || {
            // SAFETY: readable per the caller contract.
            let o = orders_arg(orders, orders_len)?;
            Ok(calibrate_sampled_gaussian(sample_rate, steps, epsilon, delta, o)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use dpattn_core::accounting::rdp::RdpCurve;
    use std::ptr::{null, null_mut};

    fn fails(st: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(st, code);
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    #[test]
    fn composition_equals_the_core() {
        // 70 steps: three chunks, with the running total carried.
        let eps: Vec<f64> = (1..=70).map(|i| 0.01 * f64::from(i)).collect();
        let del: Vec<f64> = (1..=70).map(|i| 1e-9 * f64::from(i)).collect();
        let steps: Vec<PrivacyBudget> =
            eps.iter().zip(&del).map(|(&e, &d)| PrivacyBudget::new(e, d).unwrap()).collect();
        let want = basic_composition(&steps).unwrap();
        let (mut e, mut d) = (0.0, 0.0);
        // SAFETY: valid arrays and out-pointers.
        unsafe {
            let st = dpattn_basic_composition(eps.as_ptr(), del.as_ptr(), 70, &mut e, &mut d);
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(
                (e.to_bits(), d.to_bits()),
                (want.epsilon().get().to_bits(), want.delta().get().to_bits())
            );
            let want = basic_composition_k(PrivacyBudget::new(0.1, 1e-7).unwrap(), 7).unwrap();
            assert_eq!(dpattn_basic_composition_k(0.1, 1e-7, 7, &mut e, &mut d), dpattn_status::Ok);
            assert_eq!((e, d), budget_parts(want));
            let want = advanced_composition(
                PrivacyBudget::new(0.1, 1e-8).unwrap(),
                100,
                Delta::new(1e-6).unwrap(),
            )
            .unwrap();
            assert_eq!(
                dpattn_advanced_composition(0.1, 1e-8, 100, 1e-6, &mut e, &mut d),
                dpattn_status::Ok
            );
            assert_eq!((e, d), budget_parts(want));
            let want = advanced_composition_step_epsilon(
                Epsilon::new(1.0).unwrap(),
                1000,
                Delta::new(1e-6).unwrap(),
            )
            .unwrap();
            assert_eq!(
                dpattn_advanced_composition_step_epsilon(1.0, 1000, 1e-6, &mut e),
                dpattn_status::Ok
            );
            assert_eq!(e, want.get());
        }
    }

    #[test]
    fn composition_errors() {
        let (mut e, mut d) = (-1.0, -1.0);
        let one = [1.0];
        // SAFETY: bad arguments are rejected before the out-pointers are written.
        unsafe {
            fails(
                dpattn_basic_composition(null(), null(), 0, &mut e, &mut d),
                dpattn_status::OutOfRange,
                "number of mechanisms",
            );
            fails(
                dpattn_basic_composition(null(), one.as_ptr(), 1, &mut e, &mut d),
                dpattn_status::NullArgument,
                "epsilons",
            );
            fails(
                dpattn_basic_composition(one.as_ptr(), one.as_ptr(), 1, &mut e, &mut d),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(
                dpattn_basic_composition(one.as_ptr(), [0.0].as_ptr(), 1, null_mut(), &mut d),
                dpattn_status::NullArgument,
                "out_epsilon",
            );
            fails(
                dpattn_basic_composition_k(1.0, 0.5, 2, &mut e, &mut d),
                dpattn_status::Infeasible,
                "k * delta < 1",
            );
            fails(
                dpattn_basic_composition_k(1.0, 0.0, 0, &mut e, &mut d),
                dpattn_status::OutOfRange,
                "number of mechanisms k",
            );
            fails(
                dpattn_advanced_composition(0.1, 0.0, 10, 0.0, &mut e, &mut d),
                dpattn_status::OutOfRange,
                "slack",
            );
            fails(
                dpattn_advanced_composition(800.0, 0.0, 10, 1e-6, &mut e, &mut d),
                dpattn_status::Infeasible,
                "finite",
            );
            fails(
                dpattn_advanced_composition_step_epsilon(f64::NAN, 10, 1e-6, &mut e),
                dpattn_status::OutOfRange,
                "total_epsilon",
            );
            fails(
                dpattn_advanced_composition_step_epsilon(1.0, 10, 1.5, &mut e),
                dpattn_status::OutOfRange,
                "slack_delta",
            );
        }
        assert_eq!((e, d), (-1.0, -1.0));
    }

    #[test]
    fn zcdp_equals_the_core() {
        let mut r = 0.0;
        let rho = Rho::new(0.5).unwrap();
        let dl = Delta::new(1e-5).unwrap();
        // SAFETY: valid out-pointers; bad arguments are rejected before writing.
        unsafe {
            assert_eq!(dpattn_zcdp_from_pure(0.5, &mut r), dpattn_status::Ok);
            assert_eq!(r, 0.125);
            assert_eq!(dpattn_zcdp_gaussian(1.0, 2.0, &mut r), dpattn_status::Ok);
            assert_eq!(r, 0.125);
            assert_eq!(dpattn_zcdp_to_epsilon(0.5, 1e-5, &mut r), dpattn_status::Ok);
            assert_eq!(r, zcdp_to_epsilon(rho, dl).unwrap());
            assert_eq!(dpattn_zcdp_to_epsilon_bs16(0.5, 1e-5, &mut r), dpattn_status::Ok);
            assert_eq!(r, zcdp_to_epsilon_bs16(rho, dl).unwrap());
            let t = PrivacyBudget::new(1.0, 1e-5).unwrap();
            assert_eq!(dpattn_zcdp_rho_for(1.0, 1e-5, &mut r), dpattn_status::Ok);
            assert_eq!(r, zcdp_rho_for(t).unwrap().get());
            assert_eq!(dpattn_zcdp_rho_for_bs16(1.0, 1e-5, &mut r), dpattn_status::Ok);
            assert_eq!(r, zcdp_rho_for_bs16(t).unwrap().get());
            let keep = r;
            fails(dpattn_zcdp_from_pure(0.0, &mut r), dpattn_status::OutOfRange, "epsilon");
            fails(dpattn_zcdp_gaussian(1.0, 0.0, &mut r), dpattn_status::OutOfRange, "sigma");
            fails(dpattn_zcdp_to_epsilon(-1.0, 1e-5, &mut r), dpattn_status::OutOfRange, "rho");
            fails(dpattn_zcdp_to_epsilon(0.5, 0.0, &mut r), dpattn_status::OutOfRange, "delta");
            fails(dpattn_zcdp_rho_for(1.0, 0.0, &mut r), dpattn_status::OutOfRange, "delta");
            fails(
                dpattn_zcdp_rho_for_bs16(1.0, 1e-5, null_mut()),
                dpattn_status::NullArgument,
                "out_rho",
            );
            assert_eq!(r, keep);
        }
    }

    #[test]
    fn rdp_equals_the_core() {
        let m = SampledGaussianRdp::new(0.01, 1.1).unwrap();
        let curve = RdpCurve::from_mechanism(DEFAULT_ORDERS, &m, 1000).unwrap();
        let (mut e, mut o) = (0.0, 0.0);
        let mut orders = [0.0; DEFAULT_ORDER_COUNT + 1];
        // SAFETY: valid buffers and out-pointers.
        unsafe {
            assert_eq!(
                dpattn_rdp_default_orders(orders.as_mut_ptr(), orders.len()),
                dpattn_status::Ok
            );
            assert_eq!(orders[..DEFAULT_ORDER_COUNT], DEFAULT_ORDERS);
            assert_eq!(dpattn_rdp_sampled_gaussian(0.01, 1.1, 4.5, &mut e), dpattn_status::Ok);
            assert_eq!(e, m.rdp(4.5).unwrap());
            let want = curve.epsilon(1e-5).unwrap();
            let st = dpattn_rdp_epsilon(
                DEFAULT_ORDERS.as_ptr(),
                curve.rdp().as_ptr(),
                DEFAULT_ORDER_COUNT,
                1e-5,
                &mut e,
                &mut o,
            );
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!((e, o), (want.epsilon, want.order));
            let want = curve.delta(2.0).unwrap();
            let st = dpattn_rdp_delta(
                DEFAULT_ORDERS.as_ptr(),
                curve.rdp().as_ptr(),
                DEFAULT_ORDER_COUNT,
                2.0,
                &mut e,
                &mut o,
            );
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!((e, o), (want.delta, want.order));
            let want = epsilon_after_steps(&m, 1000, &DEFAULT_ORDERS, 1e-5).unwrap();
            let st = dpattn_rdp_sampled_gaussian_epsilon(
                0.01,
                1.1,
                1000,
                null(),
                0,
                1e-5,
                &mut e,
                &mut o,
            );
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!((e, o), (want.epsilon, want.order));
            let few = [2.0, 8.0, 32.0];
            let want = epsilon_after_steps(&m, 1000, &few, 1e-5).unwrap();
            let st = dpattn_rdp_sampled_gaussian_epsilon(
                0.01,
                1.1,
                1000,
                few.as_ptr(),
                3,
                1e-5,
                &mut e,
                &mut o,
            );
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!((e, o), (want.epsilon, want.order));
            let want = calibrate_sampled_gaussian(0.01, 1000, 2.0, 1e-5, &DEFAULT_ORDERS).unwrap();
            assert_eq!(
                dpattn_rdp_calibrate_sampled_gaussian(0.01, 1000, 2.0, 1e-5, null(), 0, &mut e),
                dpattn_status::Ok
            );
            assert_eq!(e, want);
        }
    }

    #[test]
    fn rdp_errors() {
        let (mut e, mut o) = (-1.0, -1.0);
        let orders = [2.0, 4.0];
        let rdp = [1.0, f64::NAN];
        let mut short = [0.0; 10];
        // SAFETY: bad arguments are rejected before any write.
        unsafe {
            fails(
                dpattn_rdp_default_orders(short.as_mut_ptr(), 10),
                dpattn_status::BufferTooShort,
                "out",
            );
            fails(dpattn_rdp_default_orders(null_mut(), 200), dpattn_status::NullArgument, "out");
            fails(
                dpattn_rdp_sampled_gaussian(1.5, 1.0, 2.0, &mut e),
                dpattn_status::OutOfRange,
                "sampling_rate",
            );
            fails(
                dpattn_rdp_sampled_gaussian(0.5, 1.0, 1.0, &mut e),
                dpattn_status::OutOfRange,
                "order",
            );
            fails(
                dpattn_rdp_epsilon(orders.as_ptr(), rdp.as_ptr(), 2, 1e-5, &mut e, &mut o),
                dpattn_status::OutOfRange,
                "`rdp`",
            );
            fails(
                dpattn_rdp_epsilon(null(), rdp.as_ptr(), 2, 1e-5, &mut e, &mut o),
                dpattn_status::NullArgument,
                "orders",
            );
            fails(
                dpattn_rdp_epsilon(orders.as_ptr(), [1.0, 2.0].as_ptr(), 2, 1.0, &mut e, &mut o),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(
                dpattn_rdp_delta(orders.as_ptr(), [1.0, 2.0].as_ptr(), 2, -1.0, &mut e, null_mut()),
                dpattn_status::NullArgument,
                "out_order",
            );
            fails(
                dpattn_rdp_delta(orders.as_ptr(), [1.0, 2.0].as_ptr(), 2, -1.0, &mut e, &mut o),
                dpattn_status::OutOfRange,
                "epsilon",
            );
            fails(
                dpattn_rdp_sampled_gaussian_epsilon(0.01, 0.0, 10, null(), 0, 1e-5, &mut e, &mut o),
                dpattn_status::OutOfRange,
                "noise_multiplier",
            );
            fails(
                dpattn_rdp_sampled_gaussian_epsilon(0.01, 1.0, 10, null(), 3, 1e-5, &mut e, &mut o),
                dpattn_status::NullArgument,
                "orders",
            );
            fails(
                dpattn_rdp_sampled_gaussian_epsilon(
                    0.01,
                    1.0,
                    10,
                    [0.5].as_ptr(),
                    1,
                    1e-5,
                    &mut e,
                    &mut o,
                ),
                dpattn_status::OutOfRange,
                "order",
            );
            fails(
                dpattn_rdp_calibrate_sampled_gaussian(0.01, 0, 1.0, 1e-5, null(), 0, &mut e),
                dpattn_status::OutOfRange,
                "steps",
            );
            fails(
                dpattn_rdp_calibrate_sampled_gaussian(0.01, 10, -1.0, 1e-5, null(), 0, &mut e),
                dpattn_status::OutOfRange,
                "epsilon",
            );
        }
        assert_eq!((e, o), (-1.0, -1.0));
        assert_eq!(short, [0.0; 10]);
    }
}
