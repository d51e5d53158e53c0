//! The privacy budget ledger (a privacy *filter*) from C: `dpattn_ledger`.
//!
//! A ledger accepts a charge only if the composition of every accepted charge, including
//! this one, stays within the total it was built with; a refused charge changes nothing
//! (`DPATTN_STATUS_INFEASIBLE` for "over budget", `DPATTN_STATUS_OUT_OF_RANGE` for "this
//! ledger cannot take this kind of charge"). If every mechanism is charged first and runs
//! only when the charge is accepted, the whole interaction satisfies the ledger's total.
//! Three kinds (core `Ledger`):
//!
//! | constructor | total | composition | adaptivity |
//! | --- | --- | --- | --- |
//! | `dpattn_ledger_new_approx` | `(ε, δ)` | basic `(Σεᵢ, Σδᵢ)` | valid filter for adaptively chosen charges |
//! | `dpattn_ledger_new_zcdp` | ρ | `Σρᵢ` | valid filter for adaptively chosen charges |
//! | `dpattn_ledger_new_rdp` | `(ε, δ)` target | RDP curves add order by order on the 156 default orders, converted to ε at δ | the *sequence of charges* must be fixed in advance (use zCDP for fully adaptive parameters) |
//!
//! A ledger is created for one privacy unit (`dpattn_privacy_unit`: one token, one feature
//! column, one sequence, one prompt, one record) and refuses, with
//! `DPATTN_STATUS_UNIT_MISMATCH`, a charge about another unit: guarantees about different
//! units do not add up. Manual charges name the unit of the mechanism they pay for.

use dpattn_core::accounting::composition::Rho;
use dpattn_core::accounting::ledger::{Amount, Charge, Ledger};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::accounting::rdp::{
    DEFAULT_ORDER_COUNT, DEFAULT_ORDERS, RdpCurve, SampledGaussianRdp,
};
use dpattn_core::{Delta, Epsilon, PrivacyBudget};

use crate::args::{Out, slice};
use crate::boundary::{FfiError, ffi_status, ffi_value};
use crate::handle::Handle;
use crate::status::dpattn_status;

/// A privacy budget ledger (opaque). Create with `dpattn_ledger_new_*`, release with
/// `dpattn_ledger_free`. Thread safety: a handle may be used from any thread; each call
/// locks the ledger for its duration, so concurrent charges are serialised (each is
/// checked against the budget left by the others). Use of a freed handle returns
/// `DPATTN_STATUS_INVALID_HANDLE`.
pub struct dpattn_ledger {
    _private: [u8; 0],
}

impl Handle for dpattn_ledger {
    type Inner = Ledger;
    const NAME: &'static str = "dpattn_ledger";
}

/// `dpattn_privacy_unit.kind`: up to `tokens ≥ 1` tokens of one private context or sequence
/// (output perturbation and paper 001: 1; DP-Forward's token level: `c`).
pub const DPATTN_UNIT_TOKENS: u32 = 0;
/// `dpattn_privacy_unit.kind`: one feature column (paper 000, the Gram-matrix attention).
pub const DPATTN_UNIT_FEATURE_COLUMN: u32 = 1;
/// `dpattn_privacy_unit.kind`: one whole sequence (DP-Forward's sequence level).
pub const DPATTN_UNIT_SEQUENCE: u32 = 2;
/// `dpattn_privacy_unit.kind`: one training prompt (NoisyHead).
pub const DPATTN_UNIT_PROMPT: u32 = 3;
/// `dpattn_privacy_unit.kind`: one training record, added or removed (DP-SGD).
pub const DPATTN_UNIT_RECORD: u32 = 4;

/// What neighbouring inputs differ in (the core `PrivacyUnit`): `kind` is a
/// `DPATTN_UNIT_*` value; `tokens` is the group size for `DPATTN_UNIT_TOKENS` (at least 1)
/// and must be 0 otherwise. A guarantee for up to `c` tokens covers a ledger for up to
/// `c′ ≤ c` tokens; every other unit covers only itself.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct dpattn_privacy_unit {
    /// `DPATTN_UNIT_*`.
    pub kind: u32,
    /// Tokens per group for `DPATTN_UNIT_TOKENS`, else 0.
    pub tokens: u32,
}

impl dpattn_privacy_unit {
    /// The C form of a core unit.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn from_core(unit: PrivacyUnit) -> Self {
        let (kind, tokens) = match unit {
            PrivacyUnit::Tokens(c) => (DPATTN_UNIT_TOKENS, c.get()),
            PrivacyUnit::FeatureColumn => (DPATTN_UNIT_FEATURE_COLUMN, 0),
            PrivacyUnit::Sequence => (DPATTN_UNIT_SEQUENCE, 0),
            PrivacyUnit::Prompt => (DPATTN_UNIT_PROMPT, 0),
            PrivacyUnit::Record => (DPATTN_UNIT_RECORD, 0),
        };
        Self { kind, tokens }
    }

    /// The core unit.
    pub(crate) fn to_core(self) -> Result<PrivacyUnit, FfiError> {
        let plain = |u| if self.tokens == 0 { Ok(u) } else { Err(bad_tokens(self.tokens)) };
        match self.kind {
            DPATTN_UNIT_TOKENS => Ok(PrivacyUnit::tokens(self.tokens)?),
            DPATTN_UNIT_FEATURE_COLUMN => plain(PrivacyUnit::FeatureColumn),
            DPATTN_UNIT_SEQUENCE => plain(PrivacyUnit::Sequence),
            DPATTN_UNIT_PROMPT => plain(PrivacyUnit::Prompt),
            DPATTN_UNIT_RECORD => plain(PrivacyUnit::Record),
            k => Err(crate::boundary::unknown(
                "unit.kind",
                k,
                "DPATTN_UNIT_TOKENS (0), _FEATURE_COLUMN (1), _SEQUENCE (2), _PROMPT (3), _RECORD (4)",
            )),
        }
    }
}

fn bad_tokens(tokens: u32) -> FfiError {
    FfiError::Core(dpattn_core::Error::OutOfRange {
        name: "unit.tokens",
        value: f64::from(tokens),
        allowed: "0 for every unit but DPATTN_UNIT_TOKENS",
    })
}

/// `dpattn_amount.kind` of an approximate-DP ledger: `epsilon` and `delta` are meaningful
/// (`(Σεᵢ, Σδᵢ)` under basic composition), `rho` is NaN.
pub const DPATTN_AMOUNT_APPROX: u32 = 0;
/// `dpattn_amount.kind` of a zCDP ledger: `rho` is meaningful, `epsilon` and `delta` are
/// NaN.
pub const DPATTN_AMOUNT_ZCDP: u32 = 1;
/// `dpattn_amount.kind` of an RDP ledger: `epsilon` is ε at the ledger's fixed target δ,
/// `delta` is that target δ, `rho` is NaN. Remaining ε is the target minus the spent ε;
/// RDP composition is not additive in ε, so a pure charge of that size need not fit.
pub const DPATTN_AMOUNT_RDP: u32 = 2;

/// An amount of privacy budget in a ledger's native units (the core `Amount`). Which
/// fields are meaningful depends on `kind` (`DPATTN_AMOUNT_*`); the others are NaN.
/// Amounts may be zero. Spent amounts are rounded up, remaining ones down (never negative).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_amount {
    /// `DPATTN_AMOUNT_APPROX`, `DPATTN_AMOUNT_ZCDP` or `DPATTN_AMOUNT_RDP`.
    pub kind: u32,
    /// ε (approximate-DP and RDP ledgers), else NaN.
    pub epsilon: f64,
    /// δ (approximate-DP ledgers: Σδᵢ or the total δ; RDP ledgers: the target δ), else NaN.
    pub delta: f64,
    /// ρ (zCDP ledgers), else NaN.
    pub rho: f64,
}

impl From<Amount> for dpattn_amount {
    fn from(a: Amount) -> Self {
        let nan = f64::NAN;
        match a {
            Amount::Approx { epsilon, delta } => {
                Self { kind: DPATTN_AMOUNT_APPROX, epsilon, delta, rho: nan }
            }
            Amount::Zcdp { rho } => {
                Self { kind: DPATTN_AMOUNT_ZCDP, epsilon: nan, delta: nan, rho }
            }
            Amount::Rdp { epsilon, delta } => {
                Self { kind: DPATTN_AMOUNT_RDP, epsilon, delta, rho: nan }
            }
        }
    }
}

/// Registers a new ledger and writes its handle.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
unsafe fn create(
    out: *mut *mut dpattn_ledger,
    make: impl FnOnce() -> Result<Ledger, FfiError>,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, "out_ledger")?;
        let ledger = make()?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(dpattn_ledger::into_handle(ledger)) };
        Ok(())
    })
}

/// A new approximate-DP ledger for `unit` with total `(epsilon, delta)`: charges compose by basic
/// composition `(Σεᵢ, Σδᵢ)`, a valid filter even for adaptively chosen charges (Rogers,
/// Roth, Ullman, Vadhan 2016). Accepts `dpattn_ledger_charge_approx` (`δ = 0` is a pure
/// charge). `delta = 0` makes a pure-DP ledger. Writes the handle to `*out_ledger`
/// (allocates; release with `dpattn_ledger_free`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_ledger`) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (a bad `unit`, `epsilon` not finite and `> 0`, `delta`
/// outside `[0, 1)`). Thread-safe.
///
/// ```c
/// dpattn_ledger *ledger = NULL;
/// dpattn_amount left;
/// dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
/// if (dpattn_ledger_new_approx(token, 1.0, 1e-6, &ledger) != DPATTN_STATUS_OK) return;
/// if (dpattn_ledger_charge_approx(ledger, token, 0.5, 5e-7) == DPATTN_STATUS_OK) {
///     // run the (0.5, 5e-7)-DP mechanism
/// }
/// // over budget: refused with DPATTN_STATUS_INFEASIBLE, nothing changes
/// dpattn_ledger_charge_approx(ledger, token, 0.75, 0.0);
/// dpattn_ledger_remaining(ledger, &left); // left.epsilon = 0.5, left.delta = 5e-7
/// dpattn_ledger_free(ledger);
/// ```
///
/// # Safety
/// `out_ledger` must be NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_new_approx(
    unit: dpattn_privacy_unit,
    epsilon: f64,
    delta: f64,
    out_ledger: *mut *mut dpattn_ledger,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        create(out_ledger, || {
            Ok(Ledger::new_approx(unit.to_core()?, PrivacyBudget::new(epsilon, delta)?))
        })
    }
}

/// A new zCDP ledger for `unit` with total `rho`: charges compose by adding ρ, a valid filter for
/// adaptively chosen charges (Feldman & Zrnic 2021). Accepts `dpattn_ledger_charge_zcdp`
/// and `dpattn_ledger_charge_approx` with `δ = 0` (as `ρ = ε²/2`). Writes the handle to
/// `*out_ledger` (allocates; release with `dpattn_ledger_free`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_ledger`) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (a bad `unit`; `rho` negative, NaN or infinite). Thread-safe.
///
/// # Safety
/// `out_ledger` must be NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_new_zcdp(
    unit: dpattn_privacy_unit,
    rho: f64,
    out_ledger: *mut *mut dpattn_ledger,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { create(out_ledger, || Ok(Ledger::new_zcdp(unit.to_core()?, Rho::new(rho)?))) }
}

/// A new RDP ledger for `unit` on the 156 default orders with target `(epsilon, delta)`: charges are
/// composed as RDP curves and a charge is accepted while the composed curve converts to at
/// most `epsilon` at `delta`. Accepts `dpattn_ledger_charge_sampled_gaussian`,
/// `dpattn_ledger_charge_rdp`, `dpattn_ledger_charge_zcdp` (`ε(α) = αρ`) and
/// `dpattn_ledger_charge_approx` with `δ = 0`. Valid when the sequence of charges does not
/// depend on earlier outputs. Writes the handle to `*out_ledger` (allocates; release with
/// `dpattn_ledger_free`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_ledger`) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (a bad `unit`; `epsilon` not finite and `> 0`, `delta`
/// outside `(0, 1)`: RDP gives no pure-DP bound). Thread-safe.
///
/// # Safety
/// `out_ledger` must be NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_new_rdp(
    unit: dpattn_privacy_unit,
    epsilon: f64,
    delta: f64,
    out_ledger: *mut *mut dpattn_ledger,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        create(out_ledger, || {
            Ok(Ledger::new_rdp(unit.to_core()?, Epsilon::new(epsilon)?, Delta::new(delta)?)?)
        })
    }
}

/// Charges `charge` (built by `make`, so that argument errors come before the lookup is
/// used) for a release protecting `unit` to the ledger.
fn charge(
    ledger: *mut dpattn_ledger,
    unit: dpattn_privacy_unit,
    make: impl FnOnce() -> Result<Charge, FfiError>,
) -> dpattn_status {
    ffi_status(|| {
        let h = dpattn_ledger::lookup(ledger, "ledger")?;
        let unit = unit.to_core()?;
        let c = make()?;
        h.with(|l| l.try_charge(unit, c))?;
        Ok(())
    })
}

/// Charges an `(epsilon, delta)`-DP mechanism protecting `unit` (`delta = 0`: a pure ε-DP
/// mechanism).
/// Accepted if the total still holds after it; otherwise refused and the ledger is left
/// exactly as it was.
///
/// Returns `DPATTN_STATUS_OK` (accepted), or
/// * `DPATTN_STATUS_INFEASIBLE`: refused, over budget (the message names the budget:
///   "spent epsilon + charge epsilon <= total epsilon", "spent delta + …", "spent rho + …",
///   or "epsilon(delta) of the composed RDP curve <= target epsilon");
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `epsilon` not finite and `> 0`, `delta` outside `[0, 1)`,
///   or `delta > 0` on a zCDP or RDP ledger (such a mechanism satisfies no zCDP/RDP bound;
///   the ledger is unchanged);
/// * `DPATTN_STATUS_UNIT_MISMATCH`: `unit` does not cover the ledger's unit (ledger
///   unchanged);
/// * `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE` (freed or foreign
///   `ledger`).
///
/// Thread-safe (the ledger is locked for the call).
///
/// # Safety
/// `ledger` must be NULL or a value returned by a `dpattn_ledger_new_*` function (a freed
/// one is detected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_charge_approx(
    ledger: *mut dpattn_ledger,
    unit: dpattn_privacy_unit,
    epsilon: f64,
    delta: f64,
) -> dpattn_status {
    charge(ledger, unit, || Ok(Charge::Approx(PrivacyBudget::new(epsilon, delta)?)))
}

/// Charges a ρ-zCDP mechanism (zCDP ledgers; RDP ledgers as the curve `ε(α) = αρ`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_INFEASIBLE` (over budget, ledger unchanged),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`rho` negative/NaN/infinite, or an approximate-DP ledger,
/// which cannot take zCDP charges: convert with `dpattn_zcdp_to_epsilon` and charge the
/// result), `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// As `dpattn_ledger_charge_approx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_charge_zcdp(
    ledger: *mut dpattn_ledger,
    unit: dpattn_privacy_unit,
    rho: f64,
) -> dpattn_status {
    charge(ledger, unit, || Ok(Charge::Zcdp(Rho::new(rho)?)))
}

/// Charges `steps` steps of the Poisson-subsampled Gaussian mechanism (DP-SGD: rate
/// `sample_rate`, noise multiplier `noise_multiplier = σ/Δ`; add/remove-one neighbours) as
/// its RDP curve on the default orders (RDP ledgers only).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_INFEASIBLE` (over budget, ledger unchanged;
/// or a series failure), `DPATTN_STATUS_OUT_OF_RANGE` (`sample_rate` outside `[0, 1]`,
/// `noise_multiplier` not finite and `> 0`, or a ledger that is not an RDP ledger),
/// `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// As `dpattn_ledger_charge_approx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_charge_sampled_gaussian(
    ledger: *mut dpattn_ledger,
    unit: dpattn_privacy_unit,
    sample_rate: f64,
    noise_multiplier: f64,
    steps: u64,
) -> dpattn_status {
    charge(ledger, unit, || {
        let m = SampledGaussianRdp::new(sample_rate, noise_multiplier)?;
        Ok(Charge::Rdp(RdpCurve::from_mechanism(DEFAULT_ORDERS, &m, steps)?))
    })
}

/// Charges a mechanism given by its RDP curve: `rdp[i]` at the `i`-th default order
/// (`dpattn_rdp_default_orders`; `len` must be `DPATTN_RDP_DEFAULT_ORDER_COUNT`); RDP
/// ledgers only.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_INFEASIBLE` (over budget, ledger unchanged),
/// `DPATTN_STATUS_SHAPE_MISMATCH` (`len` not 156), `DPATTN_STATUS_OUT_OF_RANGE` (a value
/// negative or NaN, or a ledger that is not an RDP ledger), `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// As `dpattn_ledger_charge_approx`; `rdp` must be NULL or readable for `len` doubles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_charge_rdp(
    ledger: *mut dpattn_ledger,
    unit: dpattn_privacy_unit,
    rdp: *const f64,
    len: usize,
) -> dpattn_status {
    charge(ledger, unit, || {
        // SAFETY: readable for `len` doubles per the caller contract.
        let r = unsafe { slice(rdp, len, "rdp") }?;
        let values: [f64; DEFAULT_ORDER_COUNT] = r.try_into().map_err(|_| {
            FfiError::Core(dpattn_core::Error::ShapeMismatch {
                arg: "rdp",
                axis: "len (one value per default order)",
                expected: DEFAULT_ORDER_COUNT,
                got: len,
            })
        })?;
        Ok(Charge::Rdp(RdpCurve::from_values(DEFAULT_ORDERS, values)?))
    })
}

/// Reads an amount of the ledger into `*out`.
///
/// # Safety
/// `out` must be NULL or valid for writing a `dpattn_amount`.
unsafe fn amount(
    ledger: *const dpattn_ledger,
    out: *mut dpattn_amount,
    name: &'static str,
    get: impl FnOnce(&Ledger) -> Amount,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, name)?;
        let a = dpattn_ledger::lookup(ledger, "ledger")?.with(|l| get(l));
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(a.into()) };
        Ok(())
    })
}

/// The budget spent by the accepted charges, rounded up: `(Σεᵢ, Σδᵢ)`, `Σρᵢ`, or ε of the
/// composed RDP curve at the target δ (0 before the first charge). Writes `*out_spent`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// `ledger` as in `dpattn_ledger_charge_approx`; `out_spent` NULL or valid for writing a
/// `dpattn_amount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_spent(
    ledger: *const dpattn_ledger,
    out_spent: *mut dpattn_amount,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { amount(ledger, out_spent, "out_spent", Ledger::spent) }
}

/// The total minus the spent budget, rounded down and never negative (for an RDP ledger:
/// ε room at the target δ). Writes `*out_remaining`.
///
/// Status codes and thread safety as `dpattn_ledger_spent`.
///
/// # Safety
/// As `dpattn_ledger_spent`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_remaining(
    ledger: *const dpattn_ledger,
    out_remaining: *mut dpattn_amount,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { amount(ledger, out_remaining, "out_remaining", Ledger::remaining) }
}

/// The total the ledger was built with. Writes `*out_total`.
///
/// Status codes and thread safety as `dpattn_ledger_spent`.
///
/// # Safety
/// As `dpattn_ledger_spent`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_total(
    ledger: *const dpattn_ledger,
    out_total: *mut dpattn_amount,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { amount(ledger, out_total, "out_total", Ledger::total) }
}

/// The privacy unit the ledger was created for. Writes `*out_unit`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// `ledger` as in `dpattn_ledger_charge_approx`; `out_unit` NULL or valid for writing a
/// `dpattn_privacy_unit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_unit(
    ledger: *const dpattn_ledger,
    out_unit: *mut dpattn_privacy_unit,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_unit, "out_unit")?;
        let unit = dpattn_ledger::lookup(ledger, "ledger")?.with(|l| l.unit());
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(dpattn_privacy_unit::from_core(unit)) };
        Ok(())
    })
}

/// The number of accepted charges (refused ones do not count). Writes `*out_count`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`. Thread-safe.
///
/// # Safety
/// `ledger` as in `dpattn_ledger_charge_approx`; `out_count` NULL or valid for writing a
/// `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_charges(
    ledger: *const dpattn_ledger,
    out_count: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_count, "out_count")?;
        let n = dpattn_ledger::lookup(ledger, "ledger")?.with(|l| l.charges());
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Releases a ledger. NULL, an already-freed handle or a foreign value is ignored (a double
/// free is a no-op). A call in flight on another thread finishes first. Thread-safe.
///
/// # Safety
/// None beyond passing a value that was returned by `dpattn_ledger_new_*` (or NULL); other
/// values are detected and ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_ledger_free(ledger: *mut dpattn_ledger) {
    ffi_value((), || {
        dpattn_ledger::free(ledger);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use std::ptr::{null, null_mut};

    const TOKEN: dpattn_privacy_unit = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 1 };
    const PROMPT: dpattn_privacy_unit = dpattn_privacy_unit { kind: DPATTN_UNIT_PROMPT, tokens: 0 };
    const RECORD: dpattn_privacy_unit = dpattn_privacy_unit { kind: DPATTN_UNIT_RECORD, tokens: 0 };

    fn fails(st: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(st, code);
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    fn amounts(l: *const dpattn_ledger) -> (dpattn_amount, dpattn_amount, dpattn_amount, u64) {
        let z = dpattn_amount { kind: 9, epsilon: 0.0, delta: 0.0, rho: 0.0 };
        let (mut s, mut r, mut t, mut n) = (z, z, z, 0);
        // SAFETY: valid out-pointers; `l` is a live handle.
        unsafe {
            assert_eq!(dpattn_ledger_spent(l, &mut s), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_remaining(l, &mut r), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_total(l, &mut t), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_charges(l, &mut n), dpattn_status::Ok);
        }
        (s, r, t, n)
    }

    fn same(a: dpattn_amount, b: dpattn_amount) -> bool {
        a.kind == b.kind
            && a.epsilon.to_bits() == b.epsilon.to_bits()
            && a.delta.to_bits() == b.delta.to_bits()
            && a.rho.to_bits() == b.rho.to_bits()
    }

    /// Compares the handle's amounts with a core ledger charged the same way.
    fn matches(l: *const dpattn_ledger, core: &Ledger) {
        let (s, r, t, n) = amounts(l);
        assert!(same(s, core.spent().into()), "{s:?} vs {:?}", core.spent());
        assert!(same(r, core.remaining().into()));
        assert!(same(t, core.total().into()));
        assert_eq!(n, core.charges());
    }

    #[test]
    fn approx_ledger_equals_the_core_and_refusals_change_nothing() {
        let mut l = null_mut();
        let mut core =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-6).unwrap());
        // SAFETY: valid out-pointer, live handle until freed.
        unsafe {
            assert_eq!(dpattn_ledger_new_approx(TOKEN, 1.0, 1e-6, &mut l), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_charge_approx(l, TOKEN, 0.5, 5e-7), dpattn_status::Ok);
            core.try_charge(
                PrivacyUnit::TOKEN,
                Charge::Approx(PrivacyBudget::new(0.5, 5e-7).unwrap()),
            )
            .unwrap();
            assert_eq!(dpattn_ledger_charge_approx(l, TOKEN, 0.25, 0.0), dpattn_status::Ok);
            core.try_charge(
                PrivacyUnit::TOKEN,
                Charge::Approx(PrivacyBudget::new(0.25, 0.0).unwrap()),
            )
            .unwrap();
            matches(l, &core);
            fails(
                dpattn_ledger_charge_approx(l, TOKEN, 0.5, 0.0),
                dpattn_status::Infeasible,
                "spent epsilon",
            );
            fails(
                dpattn_ledger_charge_approx(l, TOKEN, 0.1, 6e-7),
                dpattn_status::Infeasible,
                "spent delta",
            );
            fails(dpattn_ledger_charge_zcdp(l, TOKEN, 0.01), dpattn_status::OutOfRange, "charge");
            fails(
                dpattn_ledger_charge_sampled_gaussian(l, TOKEN, 0.01, 1.0, 1),
                dpattn_status::OutOfRange,
                "charge",
            );
            fails(
                dpattn_ledger_charge_approx(l, TOKEN, f64::NAN, 0.0),
                dpattn_status::OutOfRange,
                "epsilon",
            );
            matches(l, &core);
            let (s, _, _, _) = amounts(l);
            assert_eq!((s.kind, s.epsilon, s.delta), (DPATTN_AMOUNT_APPROX, 0.75, 5e-7));
            assert!(s.rho.is_nan());
            dpattn_ledger_free(l);
            fails(
                dpattn_ledger_charge_approx(l, TOKEN, 0.1, 0.0),
                dpattn_status::InvalidHandle,
                "ledger",
            );
            let mut a = dpattn_amount { kind: 9, epsilon: 1.0, delta: 2.0, rho: 3.0 };
            fails(dpattn_ledger_spent(l, &mut a), dpattn_status::InvalidHandle, "ledger");
            assert_eq!((a.kind, a.epsilon), (9, 1.0));
            dpattn_ledger_free(l); // double free: no-op
            dpattn_ledger_free(null_mut());
        }
    }

    #[test]
    fn zcdp_and_rdp_ledgers_equal_the_core() {
        let (mut z, mut r) = (null_mut(), null_mut());
        let mut cz = Ledger::new_zcdp(PrivacyUnit::Prompt, Rho::new(0.5).unwrap());
        let mut cr = Ledger::new_rdp(
            PrivacyUnit::Record,
            Epsilon::new(3.0).unwrap(),
            Delta::new(1e-5).unwrap(),
        )
        .unwrap();
        let m = SampledGaussianRdp::new(0.01, 1.1).unwrap();
        let curve = RdpCurve::from_mechanism(DEFAULT_ORDERS, &m, 10).unwrap();
        // SAFETY: valid pointers; live handles until freed.
        unsafe {
            assert_eq!(dpattn_ledger_new_zcdp(PROMPT, 0.5, &mut z), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_charge_zcdp(z, PROMPT, 0.125), dpattn_status::Ok);
            cz.try_charge(PrivacyUnit::Prompt, Charge::Zcdp(Rho::new(0.125).unwrap())).unwrap();
            assert_eq!(dpattn_ledger_charge_approx(z, PROMPT, 0.5, 0.0), dpattn_status::Ok);
            cz.try_charge(
                PrivacyUnit::Prompt,
                Charge::Approx(PrivacyBudget::new(0.5, 0.0).unwrap()),
            )
            .unwrap();
            fails(
                dpattn_ledger_charge_zcdp(z, PROMPT, 0.5),
                dpattn_status::Infeasible,
                "spent rho",
            );
            fails(
                dpattn_ledger_charge_approx(z, PROMPT, 0.1, 1e-9),
                dpattn_status::OutOfRange,
                "charge delta",
            );
            matches(z, &cz);

            assert_eq!(dpattn_ledger_new_rdp(RECORD, 3.0, 1e-5, &mut r), dpattn_status::Ok);
            assert_eq!(
                dpattn_ledger_charge_sampled_gaussian(r, RECORD, 0.01, 1.1, 1000),
                dpattn_status::Ok
            );
            cr.try_charge(
                PrivacyUnit::Record,
                Charge::Rdp(RdpCurve::from_mechanism(DEFAULT_ORDERS, &m, 1000).unwrap()),
            )
            .unwrap();
            assert_eq!(
                dpattn_ledger_charge_rdp(r, RECORD, curve.rdp().as_ptr(), DEFAULT_ORDER_COUNT),
                dpattn_status::Ok
            );
            cr.try_charge(PrivacyUnit::Record, Charge::Rdp(curve)).unwrap();
            assert_eq!(dpattn_ledger_charge_zcdp(r, RECORD, 0.01), dpattn_status::Ok);
            cr.try_charge(PrivacyUnit::Record, Charge::Zcdp(Rho::new(0.01).unwrap())).unwrap();
            matches(r, &cr);
            fails(
                dpattn_ledger_charge_sampled_gaussian(r, RECORD, 0.01, 1.1, 1_000_000),
                dpattn_status::Infeasible,
                "RDP curve",
            );
            fails(
                dpattn_ledger_charge_sampled_gaussian(r, RECORD, 2.0, 1.1, 1),
                dpattn_status::OutOfRange,
                "sampling_rate",
            );
            fails(
                dpattn_ledger_charge_rdp(r, RECORD, curve.rdp().as_ptr(), 10),
                dpattn_status::ShapeMismatch,
                "rdp",
            );
            fails(
                dpattn_ledger_charge_rdp(r, RECORD, null(), 156),
                dpattn_status::NullArgument,
                "rdp",
            );
            matches(r, &cr);
            // A zCDP ledger is not an approximate one: the handle types are one type, but
            // the kinds differ.
            let (_, _, t, _) = amounts(z);
            assert_eq!(t.kind, DPATTN_AMOUNT_ZCDP);
            assert!(t.epsilon.is_nan() && t.delta.is_nan());
            dpattn_ledger_free(z);
            dpattn_ledger_free(r);
        }
    }

    #[test]
    fn constructor_and_accessor_errors() {
        let mut l = 0x10 as *mut dpattn_ledger;
        let mut n = 77u64;
        // SAFETY: bad arguments are rejected before the out-pointers are written.
        unsafe {
            fails(
                dpattn_ledger_new_approx(TOKEN, 1.0, 1.0, &mut l),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(dpattn_ledger_new_zcdp(TOKEN, -1.0, &mut l), dpattn_status::OutOfRange, "rho");
            fails(
                dpattn_ledger_new_rdp(TOKEN, 1.0, 0.0, &mut l),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(
                dpattn_ledger_new_rdp(TOKEN, 0.0, 1e-5, &mut l),
                dpattn_status::OutOfRange,
                "epsilon",
            );
            fails(
                dpattn_ledger_new_approx(TOKEN, 1.0, 0.0, null_mut()),
                dpattn_status::NullArgument,
                "out_ledger",
            );
            assert_eq!(l, 0x10 as *mut dpattn_ledger);
            fails(dpattn_ledger_charges(null(), &mut n), dpattn_status::NullArgument, "ledger");
            fails(
                dpattn_ledger_charges(0x1234 as *const dpattn_ledger, &mut n),
                dpattn_status::InvalidHandle,
                "ledger",
            );
            assert_eq!(n, 77);
            assert_eq!(dpattn_ledger_new_zcdp(TOKEN, 1.0, &mut l), dpattn_status::Ok);
            fails(dpattn_ledger_charges(l, null_mut()), dpattn_status::NullArgument, "out_count");
            fails(dpattn_ledger_total(l, null_mut()), dpattn_status::NullArgument, "out_total");
            fails(
                dpattn_ledger_remaining(l, null_mut()),
                dpattn_status::NullArgument,
                "out_remaining",
            );
            dpattn_ledger_free(l);
        }
    }

    #[test]
    fn a_charge_for_another_unit_is_refused_and_changes_nothing() {
        let four = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 4 };
        let column = dpattn_privacy_unit { kind: DPATTN_UNIT_FEATURE_COLUMN, tokens: 0 };
        let sequence = dpattn_privacy_unit { kind: DPATTN_UNIT_SEQUENCE, tokens: 0 };
        let (mut t, mut g, mut r) = (null_mut(), null_mut(), null_mut());
        let mut ct = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-6).unwrap());
        let approx = |e| Charge::Approx(PrivacyBudget::new(e, 0.0).unwrap());
        let curve = RdpCurve::from_mechanism(
            DEFAULT_ORDERS,
            &SampledGaussianRdp::new(0.01, 1.1).unwrap(),
            10,
        )
        .unwrap();
        // SAFETY: valid pointers; live handles until freed.
        unsafe {
            assert_eq!(dpattn_ledger_new_approx(TOKEN, 1.0, 1e-6, &mut t), dpattn_status::Ok);
            assert_eq!(dpattn_ledger_charge_approx(t, TOKEN, 0.25, 0.0), dpattn_status::Ok);
            ct.try_charge(PrivacyUnit::TOKEN, approx(0.25)).unwrap();
            // A charge protecting another unit is refused whether or not it would fit (the
            // unit is checked first), and the ledger keeps its spent budget and count.
            for unit in [PROMPT, RECORD, column, sequence] {
                for e in [0.1, 5.0] {
                    fails(
                        dpattn_ledger_charge_approx(t, unit, e, 0.0),
                        dpattn_status::UnitMismatch,
                        "unit mismatch",
                    );
                }
                fails(
                    dpattn_ledger_charge_zcdp(t, unit, 0.01),
                    dpattn_status::UnitMismatch,
                    "one token",
                );
                matches(t, &ct);
            }
            // A guarantee for any 4 tokens covers one token: accepted.
            assert_eq!(dpattn_ledger_charge_approx(t, four, 0.25, 0.0), dpattn_status::Ok);
            ct.try_charge(PrivacyUnit::tokens(4).unwrap(), approx(0.25)).unwrap();
            matches(t, &ct);
            // The reverse is not: a one-token guarantee says nothing about groups of 4.
            assert_eq!(dpattn_ledger_new_zcdp(four, 1.0, &mut g), dpattn_status::Ok);
            fails(
                dpattn_ledger_charge_zcdp(g, TOKEN, 0.01),
                dpattn_status::UnitMismatch,
                "one token",
            );
            let (s, _, _, n) = amounts(g);
            assert_eq!((s.rho, n), (0.0, 0));
            // Every charge kind of an RDP ledger checks the unit.
            assert_eq!(dpattn_ledger_new_rdp(RECORD, 3.0, 1e-5, &mut r), dpattn_status::Ok);
            fails(
                dpattn_ledger_charge_sampled_gaussian(r, PROMPT, 0.01, 1.1, 10),
                dpattn_status::UnitMismatch,
                "one record",
            );
            fails(
                dpattn_ledger_charge_rdp(r, TOKEN, curve.rdp().as_ptr(), DEFAULT_ORDER_COUNT),
                dpattn_status::UnitMismatch,
                "one record",
            );
            let (s, _, _, n) = amounts(r);
            assert_eq!((s.epsilon, n), (0.0, 0));
            // A malformed unit is an argument error, also with nothing charged.
            let bad_kind = dpattn_privacy_unit { kind: 9, tokens: 0 };
            let no_tokens = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 0 };
            let stray_tokens = dpattn_privacy_unit { kind: DPATTN_UNIT_RECORD, tokens: 2 };
            fails(
                dpattn_ledger_charge_approx(t, bad_kind, 0.1, 0.0),
                dpattn_status::OutOfRange,
                "unit.kind",
            );
            fails(
                dpattn_ledger_charge_approx(t, no_tokens, 0.1, 0.0),
                dpattn_status::OutOfRange,
                "token count",
            );
            fails(
                dpattn_ledger_charge_sampled_gaussian(r, stray_tokens, 0.01, 1.1, 10),
                dpattn_status::OutOfRange,
                "unit.tokens",
            );
            matches(t, &ct);
            // The unit reads back as created.
            let mut u = dpattn_privacy_unit { kind: 77, tokens: 77 };
            for (h, want) in [(t, TOKEN), (g, four), (r, RECORD)] {
                assert_eq!(dpattn_ledger_unit(h, &mut u), dpattn_status::Ok);
                assert_eq!(u, want);
            }
            fails(dpattn_ledger_unit(t, null_mut()), dpattn_status::NullArgument, "out_unit");
            for h in [t, g, r] {
                dpattn_ledger_free(h);
            }
            u = dpattn_privacy_unit { kind: 77, tokens: 77 };
            fails(dpattn_ledger_unit(t, &mut u), dpattn_status::InvalidHandle, "ledger");
            assert_eq!(u, dpattn_privacy_unit { kind: 77, tokens: 77 });
            // Constructors refuse a malformed unit before writing the handle.
            let mut l = 0x10 as *mut dpattn_ledger;
            fails(
                dpattn_ledger_new_approx(bad_kind, 1.0, 0.0, &mut l),
                dpattn_status::OutOfRange,
                "unit.kind",
            );
            fails(
                dpattn_ledger_new_zcdp(no_tokens, 1.0, &mut l),
                dpattn_status::OutOfRange,
                "token count",
            );
            fails(
                dpattn_ledger_new_rdp(stray_tokens, 1.0, 1e-5, &mut l),
                dpattn_status::OutOfRange,
                "unit.tokens",
            );
            assert_eq!(l, 0x10 as *mut dpattn_ledger);
        }
    }
}
