//! Noise calibration from C: Gaussian (analytic and classical), Laplace, truncated Laplace,
//! discrete Gaussian, and the standard normal distribution.
//!
//! Every calibrator rounds the noise scale *up* and the privacy loss *up* (never below what
//! the guarantee needs) and reports infeasible inputs as a status code, never NaN. The
//! sensitivity is for whatever neighbour relation the caller computed it for; the
//! guarantee is for that same relation.

use dpattn_core::calibration::discrete_gaussian_mechanism::{
    discrete_gaussian_delta, discrete_gaussian_epsilon, discrete_gaussian_sigma,
};
use dpattn_core::calibration::gaussian_mechanism::{
    analytic_gaussian_delta, analytic_gaussian_epsilon, analytic_gaussian_sigma,
    classical_gaussian_epsilon, classical_gaussian_sigma,
};
use dpattn_core::calibration::laplace_mechanism::{laplace_epsilon, laplace_scale};
use dpattn_core::calibration::normal::{normal_cdf, normal_isf, normal_quantile, normal_sf};
use dpattn_core::sampling::TruncatedLaplace;

use crate::args::Out;
use crate::boundary::{FfiError, ffi_status, ffi_value};
use crate::status::dpattn_status;

/// Runs a scalar calibrator and writes its result to `out` on success.
///
/// # Safety
/// `out` must be NULL or valid for writing a `double`.
unsafe fn scalar(
    out: *mut f64,
    name: &'static str,
    f: impl FnOnce() -> dpattn_core::Result<f64>,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out, name)?;
        let v = f().map_err(FfiError::from)?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The smallest noise scale σ for which `N(0, σ²)` added to a query of L2 sensitivity
/// `sensitivity` is `(epsilon, delta)`-DP, exactly (the *analytic* Gaussian mechanism,
/// Balle & Wang 2018, Thm 8 / Alg. 1): the σ with `δ(ε; Δ/σ) = δ` for the privacy profile
/// `δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)`. Valid for every `ε ≥ 0` (no `ε < 1`
/// restriction), rounded up (`dpattn_analytic_gaussian_delta(ε, σ, Δ) ≤ δ` always holds
/// for the result; within about 1e-15 relative of the exact value). Writes `*out_sigma`.
///
/// **Privacy**: for `f` with L2 sensitivity `Δ` under the caller's neighbour relation,
/// `f(x) + N(0, σ² I)` is `(ε, δ)`-DP for the same relation, if and only if σ is at least
/// this value.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_sigma`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` negative, NaN or infinite; `delta` outside
/// `(0, 1)`; `sensitivity` not finite and `> 0`), `DPATTN_STATUS_INFEASIBLE` (σ beyond
/// the `double` range). `*out_sigma` is written only on success. Thread-safe; no shared
/// state.
///
/// ```c
/// double sigma;
/// if (dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, &sigma) == DPATTN_STATUS_OK) {
///     // sigma ≈ 3.7306316348 (Balle–Wang; docs/PAPERS.md T3-A)
///     dpattn_fill_gaussian(&key, stream, 0, sigma, DPATTN_DTYPE_F64, noise, n);
/// }
/// ```
///
/// # Safety
/// `out_sigma` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_analytic_gaussian_sigma(
    epsilon: f64,
    delta: f64,
    sensitivity: f64,
    out_sigma: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_sigma, "out_sigma", || analytic_gaussian_sigma(epsilon, delta, sensitivity))
    }
}

/// The smallest ε for which noise `N(0, σ²)` on a query of L2 sensitivity `sensitivity`
/// is `(ε, delta)`-DP (the inverse of the analytic profile in ε), rounded up; 0 when the
/// mechanism is already `(0, δ)`-DP. Writes `*out_epsilon`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_epsilon`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sigma` or `sensitivity` not finite and `> 0`, `delta`
/// outside `(0, 1)`), `DPATTN_STATUS_INFEASIBLE` (no finite ε suffices). Thread-safe; no
/// shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_analytic_gaussian_epsilon(
    sigma: f64,
    delta: f64,
    sensitivity: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_epsilon, "out_epsilon", || analytic_gaussian_epsilon(sigma, delta, sensitivity))
    }
}

/// The exact privacy profile of the Gaussian mechanism (Balle & Wang 2018, Thm 8): the
/// smallest δ for which `N(0, σ²)` on a query of L2 sensitivity `Δ` is `(ε, δ)`-DP,
/// `δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)` with `μ = Δ/σ`, evaluated stably and
/// rounded up: never below the exact δ, at most `26(1 + a²)·2⁻⁵³` relative above it
/// (`a = min(μ/2 − ε/μ, 0)`; 1.2e-13 at worst for δ ≥ 1e-300), with a floor of about
/// 3e-322; `ε = 0` gives `2Φ(μ/2) − 1`. Writes `*out_delta`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_delta`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` negative/NaN/infinite, `sigma` or
/// `sensitivity` not finite and `> 0`). Thread-safe; no shared state.
///
/// # Safety
/// `out_delta` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_analytic_gaussian_delta(
    epsilon: f64,
    sigma: f64,
    sensitivity: f64,
    out_delta: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_delta, "out_delta", || analytic_gaussian_delta(epsilon, sigma, sensitivity))
    }
}

/// The classical Gaussian mechanism `σ = Δ·√(2 ln(1.25/δ))/ε` (Dwork & Roth 2014,
/// Thm A.1), rounded up by 4 ulps. **Only for `ε ∈ (0, 1)`**: outside that range the
/// formula is not a theorem (and for large ε it under-noises), so it is refused. Prefer
/// `dpattn_analytic_gaussian_sigma`, which is exact and always smaller. Writes
/// `*out_sigma`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_sigma`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` outside `(0, 1)`, `delta` outside `(0, 1)`,
/// `sensitivity` not finite and `> 0`), `DPATTN_STATUS_INFEASIBLE` (σ overflows).
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_sigma` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_classical_gaussian_sigma(
    epsilon: f64,
    delta: f64,
    sensitivity: f64,
    out_sigma: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_sigma, "out_sigma", || classical_gaussian_sigma(epsilon, delta, sensitivity))
    }
}

/// The ε of the classical Gaussian mechanism with noise σ, `ε = Δ·√(2 ln(1.25/δ))/σ`,
/// rounded up, returned only if it is `< 1` (Dwork & Roth Thm A.1). Writes `*out_epsilon`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_epsilon`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sigma`/`sensitivity` not finite and `> 0`, `delta`
/// outside `(0, 1)`), `DPATTN_STATUS_INFEASIBLE` (the implied ε is `≥ 1`, outside the
/// theorem). Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_classical_gaussian_epsilon(
    sigma: f64,
    delta: f64,
    sensitivity: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_epsilon, "out_epsilon", || classical_gaussian_epsilon(sigma, delta, sensitivity))
    }
}

/// The Laplace scale `b = Δ/ε` for an ε-DP release of a query with L1 sensitivity
/// `sensitivity` (Dwork & Roth Thm 3.6), rounded up (the smallest double with `b·ε ≥ Δ`).
/// Writes `*out_scale`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_scale`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sensitivity` or `epsilon` not finite and `> 0`, or
/// `Δ/ε` overflowing). Thread-safe; no shared state.
///
/// # Safety
/// `out_scale` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_laplace_scale(
    sensitivity: f64,
    epsilon: f64,
    out_scale: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { scalar(out_scale, "out_scale", || laplace_scale(sensitivity, epsilon)) }
}

/// The privacy loss `ε = Δ/b` of Laplace noise with scale `b` on a query with L1
/// sensitivity `Δ`, rounded up. Writes `*out_epsilon`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_epsilon`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`scale` or `sensitivity` not finite and `> 0`, or the
/// quotient overflowing). Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_laplace_epsilon(
    scale: f64,
    sensitivity: f64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { scalar(out_epsilon, "out_epsilon", || laplace_epsilon(scale, sensitivity)) }
}

/// The bound `B = (Δ/ε)·ln(1 + (e^ε − 1)/(2δ))` and the variance
/// `(2Δ²/ε²)(1 − δ(t² + 2t)/(e^ε − 1))` (`t = εB/Δ`) of the truncated Laplace
/// `TLap(Δ, ε, δ)` that `dpattn_fill_truncated_laplace` samples (`docs/PAPERS.md` §1.3,
/// Fact 3.5). `δ = 0` gives `B = +∞` and the Laplace variance `2Δ²/ε²`. `B` is rounded
/// up (never below the exact bound, at most 4.5e-15 relative above it), so the δ it implies
/// never exceeds `delta`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`sensitivity`/`epsilon` not finite and `> 0`, `delta`
/// outside `[0, 1/2]`). Both out-params are written only on success. Thread-safe; no
/// shared state.
///
/// # Safety
/// `out_bound` and `out_variance` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_truncated_laplace_bound(
    sensitivity: f64,
    epsilon: f64,
    delta: f64,
    out_bound: *mut f64,
    out_variance: *mut f64,
) -> dpattn_status {
    ffi_status(|| {
        let bound = Out::new(out_bound, "out_bound")?;
        let variance = Out::new(out_variance, "out_variance")?;
        let t = TruncatedLaplace::new(sensitivity, epsilon, delta)?;
        // SAFETY: writable per the caller contract.
        unsafe {
            bound.write(t.bound());
            variance.write(t.variance());
        }
        Ok(())
    })
}

/// The smallest σ (to 1e-12 relative, rounded up) for which the discrete Gaussian
/// `N_ℤ(0, σ²)` added to an integer-valued query of integer sensitivity `sensitivity` is
/// `(epsilon, delta)`-DP, by the tight profile of Canonne, Kamath & Steinke 2020, Thm 7.
/// Writes `*out_sigma`. Sample with `dpattn_discrete_gaussian_ratio` +
/// `dpattn_fill_discrete_gaussian`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_sigma`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` not finite and `> 0`, `delta` outside `(0, 1)`,
/// `sensitivity` 0, or a σ whose evaluation would sum more than 2^24 lattice terms).
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_sigma` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_discrete_gaussian_sigma(
    epsilon: f64,
    delta: f64,
    sensitivity: u64,
    out_sigma: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_sigma, "out_sigma", || discrete_gaussian_sigma(epsilon, delta, sensitivity))
    }
}

/// The smallest ε (rounded up, to 1e-12 relative or 1e-15 absolute) for which
/// `N_ℤ(0, σ²)` on an integer query of sensitivity `sensitivity` is `(ε, delta)`-DP
/// (CKS20 Thm 7); 0 if ε = 0 already suffices. Writes `*out_epsilon`.
///
/// Status codes as `dpattn_discrete_gaussian_sigma` (`sigma` not finite and `> 0` is
/// `DPATTN_STATUS_OUT_OF_RANGE`). Thread-safe; no shared state.
///
/// # Safety
/// `out_epsilon` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_discrete_gaussian_epsilon(
    sigma: f64,
    delta: f64,
    sensitivity: u64,
    out_epsilon: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_epsilon, "out_epsilon", || discrete_gaussian_epsilon(sigma, delta, sensitivity))
    }
}

/// The tight privacy profile of the discrete Gaussian mechanism (CKS20 Thm 7),
/// `δ(ε) = P[Y > εσ²/Δ − Δ/2] − e^ε P[Y > εσ²/Δ + Δ/2]`, `Y ~ N_ℤ(0, σ²)`, evaluated as an
/// upper bound without cancellation. Writes `*out_delta`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`out_delta`),
/// `DPATTN_STATUS_OUT_OF_RANGE` (`epsilon` negative/NaN/infinite, `sigma` not finite and
/// `> 0`, `sensitivity` 0, more than 2^24 terms). Thread-safe; no shared state.
///
/// # Safety
/// `out_delta` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_discrete_gaussian_delta(
    epsilon: f64,
    sigma: f64,
    sensitivity: u64,
    out_delta: *mut f64,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        scalar(out_delta, "out_delta", || discrete_gaussian_delta(epsilon, sigma, sensitivity))
    }
}

/// The standard normal CDF `Φ(x) = P(Z ≤ x)`, relative error ≤ 1e-13 wherever the result
/// is a normal double (also deep in the lower tail); `Φ(−∞) = 0`, `Φ(+∞) = 1`, NaN for NaN
/// (and NaN if a panic were caught). Infallible; thread-safe; no shared state.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_normal_cdf(x: f64) -> f64 {
    ffi_value(f64::NAN, || normal_cdf(x))
}

/// The standard normal survival function `Φc(x) = 1 − Φ(x) = P(Z > x)`, relative error
/// ≤ 1e-13 wherever the result is a normal double (`x ≤ 37.5`); NaN for NaN. Infallible;
/// thread-safe; no shared state.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_normal_sf(x: f64) -> f64 {
    ffi_value(f64::NAN, || normal_sf(x))
}

/// The standard normal quantile `Φ⁻¹(p)`, relative error ≤ 1e-13 for every `p` in
/// `(0, 1)` down to the smallest subnormal. Writes `*out_x`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_x`) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (`p` NaN or outside the open interval `(0, 1)`).
/// Thread-safe; no shared state.
///
/// # Safety
/// `out_x` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_normal_quantile(p: f64, out_x: *mut f64) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { scalar(out_x, "out_x", || normal_quantile(p)) }
}

/// The inverse survival function `Φc⁻¹(q) = −Φ⁻¹(q)`: the `x` with `P(Z > x) = q`,
/// accurate (≤ 1e-13 relative) for tiny `q` such as 1e-300. Writes `*out_x`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_x`) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (`q` NaN or outside `(0, 1)`). Thread-safe; no shared
/// state.
///
/// # Safety
/// `out_x` must be NULL or valid for writing a `double`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_normal_isf(q: f64, out_x: *mut f64) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    unsafe { scalar(out_x, "out_x", || normal_isf(q)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use std::ptr::null_mut;

    type Fn3 = unsafe extern "C" fn(f64, f64, f64, *mut f64) -> dpattn_status;
    type Core3 = fn(f64, f64, f64) -> dpattn_core::Result<f64>;

    fn call3(f: Fn3, a: f64, b: f64, c: f64) -> (dpattn_status, f64) {
        let mut out = -7.0;
        // SAFETY: `out` is a valid double.
        let st = unsafe { f(a, b, c, &mut out) };
        (st, out)
    }

    fn fails(st: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(st, code);
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    #[test]
    fn gaussian_calibrators_equal_the_core() {
        let cases: [(Fn3, Core3, [f64; 3]); 5] = [
            (dpattn_analytic_gaussian_sigma, analytic_gaussian_sigma, [1.0, 1e-5, 1.0]),
            (dpattn_analytic_gaussian_epsilon, analytic_gaussian_epsilon, [3.0, 1e-5, 2.0]),
            (dpattn_analytic_gaussian_delta, analytic_gaussian_delta, [1.0, 1.0, 1.0]),
            (dpattn_classical_gaussian_sigma, classical_gaussian_sigma, [0.5, 1e-5, 1.0]),
            (dpattn_classical_gaussian_epsilon, classical_gaussian_epsilon, [20.0, 1e-5, 1.0]),
        ];
        for (f, core, [a, b, c]) in cases {
            let (st, v) = call3(f, a, b, c);
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(v.to_bits(), core(a, b, c).unwrap().to_bits());
        }
        let mut out = 0.0;
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(dpattn_laplace_scale(1.0, 3.0, &mut out), dpattn_status::Ok);
            assert_eq!(out, laplace_scale(1.0, 3.0).unwrap());
            assert_eq!(dpattn_laplace_epsilon(2.0, 1.0, &mut out), dpattn_status::Ok);
            assert_eq!(out, 0.5);
            assert_eq!(dpattn_discrete_gaussian_sigma(1.0, 1e-5, 1, &mut out), dpattn_status::Ok);
            assert_eq!(out, discrete_gaussian_sigma(1.0, 1e-5, 1).unwrap());
            assert_eq!(dpattn_discrete_gaussian_epsilon(4.0, 1e-6, 3, &mut out), dpattn_status::Ok);
            assert_eq!(out, discrete_gaussian_epsilon(4.0, 1e-6, 3).unwrap());
            assert_eq!(dpattn_discrete_gaussian_delta(1.0, 3.0, 2, &mut out), dpattn_status::Ok);
            assert_eq!(out, discrete_gaussian_delta(1.0, 3.0, 2).unwrap());
            assert_eq!(dpattn_normal_quantile(0.975, &mut out), dpattn_status::Ok);
            assert_eq!(out, normal_quantile(0.975).unwrap());
            assert_eq!(dpattn_normal_isf(1e-300, &mut out), dpattn_status::Ok);
            assert_eq!(out, normal_isf(1e-300).unwrap());
            let mut v = 0.0;
            assert_eq!(
                dpattn_truncated_laplace_bound(1.0, 1.0, 0.01, &mut out, &mut v),
                dpattn_status::Ok
            );
            let t = TruncatedLaplace::new(1.0, 1.0, 0.01).unwrap();
            assert_eq!((out, v), (t.bound(), t.variance()));
        }
        assert_eq!(dpattn_normal_cdf(1.96), normal_cdf(1.96));
        assert_eq!(dpattn_normal_sf(10.0), normal_sf(10.0));
        assert!(dpattn_normal_cdf(f64::NAN).is_nan());
    }

    #[test]
    fn calibration_errors_name_the_argument_and_leave_outputs_untouched() {
        let bad: [(Fn3, [f64; 3], dpattn_status, &str); 9] = [
            (
                dpattn_analytic_gaussian_sigma,
                [-1.0, 1e-5, 1.0],
                dpattn_status::OutOfRange,
                "epsilon",
            ),
            (dpattn_analytic_gaussian_sigma, [1.0, 1.0, 1.0], dpattn_status::OutOfRange, "delta"),
            (dpattn_analytic_gaussian_sigma, [1.0, 0.0, 1.0], dpattn_status::OutOfRange, "delta"),
            (
                dpattn_analytic_gaussian_sigma,
                [1.0, 1e-5, f64::NAN],
                dpattn_status::OutOfRange,
                "sensitivity",
            ),
            (
                dpattn_analytic_gaussian_sigma,
                [0.0, 1e-310, 1e300],
                dpattn_status::Infeasible,
                "f64::MAX",
            ),
            (
                dpattn_analytic_gaussian_epsilon,
                [0.0, 1e-5, 1.0],
                dpattn_status::OutOfRange,
                "sigma",
            ),
            (
                dpattn_analytic_gaussian_delta,
                [f64::INFINITY, 1.0, 1.0],
                dpattn_status::OutOfRange,
                "epsilon",
            ),
            (
                dpattn_classical_gaussian_sigma,
                [1.0, 1e-5, 1.0],
                dpattn_status::OutOfRange,
                "epsilon",
            ),
            (dpattn_classical_gaussian_epsilon, [1.0, 1e-5, 1.0], dpattn_status::Infeasible, "< 1"),
        ];
        for (f, [a, b, c], code, needle) in bad {
            let (st, v) = call3(f, a, b, c);
            fails(st, code, needle);
            assert_eq!(v, -7.0, "output written on error");
        }
        // SAFETY: NULL out-pointers are rejected; valid ones otherwise.
        unsafe {
            fails(
                dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, null_mut()),
                dpattn_status::NullArgument,
                "out_sigma",
            );
            fails(dpattn_laplace_scale(1.0, 0.0, &mut 0.0), dpattn_status::OutOfRange, "epsilon");
            fails(
                dpattn_laplace_epsilon(1.0, 1.0, null_mut()),
                dpattn_status::NullArgument,
                "out_epsilon",
            );
            fails(
                dpattn_discrete_gaussian_sigma(1.0, 1e-5, 0, &mut 0.0),
                dpattn_status::OutOfRange,
                "sensitivity",
            );
            fails(
                dpattn_discrete_gaussian_delta(-1.0, 1.0, 1, &mut 0.0),
                dpattn_status::OutOfRange,
                "epsilon",
            );
            fails(dpattn_normal_quantile(1.0, &mut 0.0), dpattn_status::OutOfRange, "p");
            fails(dpattn_normal_isf(f64::NAN, &mut 0.0), dpattn_status::OutOfRange, "q");
            let mut b = 3.0;
            fails(
                dpattn_truncated_laplace_bound(1.0, 1.0, 0.6, &mut b, &mut 0.0),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(
                dpattn_truncated_laplace_bound(1.0, 1.0, 0.1, &mut b, null_mut()),
                dpattn_status::NullArgument,
                "out_variance",
            );
            assert_eq!(b, 3.0);
        }
    }
}
