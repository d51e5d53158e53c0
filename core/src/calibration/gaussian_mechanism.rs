//! The Gaussian mechanism: the classical calibration (Dwork & Roth 2014, Thm A.1) and the
//! exact *analytic* calibration (Balle & Wang 2018, Thm 8 and Alg. 1).
//!
//! **Guarantee.** For `f` with L2 sensitivity `Δ = sup ‖f(x) − f(x')‖₂` over neighbouring
//! inputs `x ≃ x'`, the release `f(x) + N(0, σ² I)` is `(ε, δ)`-DP when the calibrators
//! here say so. `Δ` is the L2 sensitivity *under whatever neighbour relation the caller
//! computed it for* (add/remove, replace-one, any two inputs for local DP, one token …);
//! the guarantee is for that same relation. Nothing in this module knows the relation.
//!
//! * **Classical** ([`classical_gaussian_sigma`], [`classical_gaussian_epsilon`]):
//!   `σ = Δ·√(2 ln(1.25/δ))/ε` is `(ε, δ)`-DP **only for `ε ∈ (0, 1)`** (Dwork–Roth
//!   Thm A.1). Outside that range the formula is not a theorem, and for large ε it is
//!   false: at `δ = 1e-5` it gives *less* noise than the exact minimum once
//!   `ε > 8.41977` (`docs/PAPERS.md` §3.4 and T3-A's ratio column). The calibrators
//!   therefore refuse `ε ≥ 1`; [`classical_gaussian_sigma_unchecked`] exists only to
//!   reproduce papers that used the formula beyond its range (`docs/PAPERS.md` P3-7).
//! * **Analytic** ([`analytic_gaussian_delta`], [`analytic_gaussian_sigma`],
//!   [`analytic_gaussian_epsilon`]): the mechanism is `(ε, δ)`-DP **if and only if**
//!   `δ ≥ δ(ε; μ)` with `μ = Δ/σ` and the privacy profile (Balle–Wang Thm 8;
//!   `docs/PAPERS.md` §3.4, where `μ` is written `b`)
//!
//!   `δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε · Φ(−μ/2 − ε/μ)`.
//!
//!   It is valid for every `ε ≥ 0` (at `ε = 0` it is `2Φ(μ/2) − 1`), increasing in `μ` and
//!   decreasing in `ε`. Balle–Wang's Alg. 1 inverts it through a change of variables;
//!   the same algorithm, with both of its branches, is in [`crate::calibration::amgm`].
//!   Here it is inverted directly by bisection on the noise scale.
//!
//! **Rounding.** Every returned δ, noise scale and ε is rounded *up*. [`analytic_gaussian_delta`]
//! evaluates the profile at `μ = Δ/σ` rounded up and raises the result by twice its
//! measured error bound (below, "Accuracy"), so it is never below the exact δ.
//! [`analytic_gaussian_sigma`] brackets `σ` and bisects it down to the smallest float whose
//! bounded δ is `≤ δ`, and [`analytic_gaussian_epsilon`] does the same for ε: the exact
//! value, whose exact δ equals the target, can then not lie above the result. (This replaces
//! a fixed 4-ulp step and a `δ·(1 − 4·EPSILON)` target, which covered the steep and the flat
//! parts of the profile only by measurement.) The classical formulas are rounded up by a
//! bound on their rounding error. Infeasible or invalid inputs (δ ∉ (0, 1), ε < 0, NaN, infinities,
//! Δ ≤ 0, a result outside the `f64` range) give an [`Error`], never NaN and never a
//! panic.
//!
//! **Numerics.** With `a = μ/2 − ε/μ` and `b = a − μ` the profile is `Φ(a) − e^ε Φ(b)`, a
//! difference of two nearly equal terms exactly where calibration happens, so it is never
//! evaluated as written. Three facts make it stable:
//! * It is stationary in the midpoint `m = (a + b)/2 = −ε/μ` (`φ(a) = e^ε φ(b)`), so
//!   rounding `m` costs only second order; `a` and `b` are formed from `m` and `μ/2` with
//!   their rounding errors kept (TwoSum), so that `a − b = μ` holds exactly (rounding `a`
//!   and `b` independently would cost up to `1e-10` relative).
//! * For `a ≤ −4` it is the integral `δ = E[(1 − e^{ε−L})₊] = φ(a)·∫₀^∞ (1 − e^{−μs})
//!   e^{as − s²/2} ds` (L the privacy-loss variable), which has a positive integrand and no
//!   `e^ε`; it is evaluated by 24-point Gauss–Laguerre after the substitution
//!   `u = −as + s²/2` (error < 1e-16, checked against mpmath). This covers δ → 0, ε → ∞
//!   (ε = 500 or 10⁶ neither overflows nor loses accuracy) and tiny ε with tiny δ.
//! * Otherwise it is `[Φ(a) − Φ(b)] − (e^ε − 1)Φ(b)`, with `Φ(a) − Φ(b)` as a sum of two
//!   `erf`s for `a ≥ 0` (full relative accuracy as ε → 0, where the profile tends to
//!   `2Φ(μ/2) − 1`), by 12-point Gauss–Legendre over short intervals (`μ ≤ 1`), and as a
//!   difference of `erf`s or of tail probabilities ([`normal_cdf`]) otherwise;
//!   `e^ε Φ(b) = φ(a)·Φc(−b)/φ(−b)` replaces `e^ε` when `b ≤ −4`.
//!
//! The Gauss rules only integrate the normal density over short intervals or against the
//! privacy-loss weight; `Φ` itself always comes from [`crate::calibration::normal`].
//!
//! **Accuracy** (measured against 60-digit mpmath on 3,780 profile points, ε ∈ [0, 10⁴]
//! (log-spread) × μ ∈ [1e-6, 10³] with δ ≥ 1e-300, and on 315 σ and 225 ε inversions over ε ∈ [0,
//! 10⁴], μ ∈ [1e-6, 10³], δ ∈ [1e-300, 0.9] (issue 28; `tests/accounting/gaussian_calibration.rs`
//! keeps reference tables): the evaluated profile is within `7.34·(1 + a²)·2⁻⁵³` relative of the
//! exact one, `a = μ/2 − ε/μ` (the rounding of the argument `ε/μ` alone is worth `a²·2⁻⁵³`), which
//! is at most 1.2e-13 over the grid and 4.3e-14 where δ ≥ 1e-60; [`analytic_gaussian_delta`] adds
//! twice that bound, so it is never below the exact δ. The returned σ and ε are never below the
//! exact values and, over that grid, at most 2.4e-15 relative above them; where δ is flat in the
//! solved variable (δ near 1 for σ, ε near 0 for ε) the excess is instead about the bound's margin
//! divided by the slope, `26(1 + a²)·2⁻⁵³·δ/|∂δ/∂ln σ|` with `∂δ/∂ln σ = −μφ(a)` (5e-15 relative at
//! ε = 0, δ = 0.9), resp. `/|∂δ/∂ε|` with `∂δ/∂ε = −e^ε·Φ(−μ/2 − ε/μ)` (1.2e-14 relative at μ =
//! 0.3, δ = 0.1, where ε = 0.046). `tests/accounting/gaussian_calibration.rs` checks these bounds.
//!
//! [`normal_cdf`]: crate::calibration::normal::normal_cdf

// The calibrators and their validation live here; the stable evaluation of the privacy
// profile (quadrature rules, centred Φ differences) lives in the child module `numerics`.
mod numerics;

pub(crate) use numerics::{profile, profile_mh};

use crate::error::{Error, Result, nonneg_finite};
use crate::privacy_params::{Delta, Sensitivity};

/// How many ulps the aMGM calibrators of [`crate::calibration::amgm`] move their result
/// up, to absorb the evaluation error of the profile (their result itself is within 1.5
/// ulps of the exact value in every measured case, either side). The calibrators of this
/// module bound that error instead (module docs, "Rounding").
///
/// ```
/// use dpattn_core::calibration::amgm::amgm_sigma;
/// use dpattn_core::calibration::gaussian_mechanism::SAFETY_ULPS;
/// let s = amgm_sigma(1.0, 1e-5, 1.0)?;
/// // A few ulps above the exact 3.730631634815942… (docs/PAPERS.md T3-A), never below.
/// assert!(s >= 3.730631634815942 && s - 3.730631634815942 < (SAFETY_ULPS + 4) as f64 * 4.5e-16);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub const SAFETY_ULPS: u32 = 4;

/// Validates an ε that may be 0 (the analytic profile is defined for every ε ≥ 0).
pub(crate) fn check_epsilon_nonneg(epsilon: f64) -> Result<f64> {
    nonneg_finite("epsilon", epsilon)
}

/// Validates a noise scale σ: finite and `> 0`.
pub(crate) fn check_sigma(sigma: f64) -> Result<f64> {
    if sigma.is_finite() && sigma > 0.0 {
        Ok(sigma)
    } else {
        Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, inf), finite" })
    }
}

/// `x` moved up by `n` ulps (`+∞` stays `+∞`).
pub(crate) fn ulps_up(mut x: f64, n: u32) -> f64 {
    for _ in 0..n {
        x = x.next_up();
    }
    x
}

/// The smallest float `x` in `(lo, hi]` with `passes(x)`, given `!passes(lo)` and
/// `passes(hi)` (a bisection down to adjacent floats; `lo` may be 0).
pub(crate) fn bisect_to_adjacent(mut lo: f64, mut hi: f64, passes: impl Fn(f64) -> bool) -> f64 {
    // Halving the gap reaches adjacent floats in at most ~1100 steps, even from lo = 0.
    for _ in 0..2200 {
        let mid = lo + 0.5 * (hi - lo);
        if mid <= lo || mid >= hi {
            break;
        }
        if passes(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// An upper bound on the exact profile at `μ = sens/σ` (the quotient rounded up when it
/// is inexact, as the profile increases in `μ`; [`profile_up`] bounds the evaluation error).
fn delta_upper(eps: f64, sens: f64, sigma: f64) -> f64 {
    let mu = sens / sigma;
    // The sign of μ̂·σ − Δ, exactly: negative when μ̂ is below the real quotient.
    let mu = if libm::fma(mu, sigma, -sens) < 0.0 { mu.next_up() } else { mu };
    if mu == f64::INFINITY {
        return 1.0;
    }
    profile_up(profile(eps, mu), 0.5 * mu - eps / mu)
}

/// The smallest float σ whose upper-bounded profile is `≤ δ`, so the exact σ is never
/// above it; inputs already validated.
pub(crate) fn sigma_for(eps: f64, delta: f64, sens: f64) -> Result<f64> {
    let passes = |s: f64| delta_upper(eps, sens, s) <= delta;
    // Start at μ = √(2ε) (Alg. 1's α = 1, where δ(ε; μ) = δ₀(ε)).
    let guess = if eps > 0.0 { sens / libm::sqrt(2.0 * eps) } else { sens };
    let guess = guess.clamp(f64::MIN_POSITIVE, f64::MAX);
    let (mut lo, mut hi);
    if passes(guess) {
        hi = guess;
        lo = 0.5 * guess;
        // σ → 0 means μ → ∞ and δ → 1 > δ, so this stops (at the latest when Δ/σ = ∞).
        while passes(lo) {
            hi = lo;
            lo *= 0.5;
            if lo == 0.0 {
                break;
            }
        }
    } else {
        lo = guess;
        hi = 2.0 * guess;
        while !passes(hi) {
            lo = hi;
            hi *= 2.0;
            if hi == f64::INFINITY {
                return Err(Error::Infeasible {
                    condition: "analytic Gaussian: σ(ε, δ, Δ) ≤ f64::MAX",
                    lhs: f64::INFINITY,
                    rhs: f64::MAX,
                });
            }
        }
    }
    let sigma = bisect_to_adjacent(lo, hi, passes);
    if sigma.is_finite() {
        Ok(sigma)
    } else {
        Err(Error::Infeasible {
            condition: "analytic Gaussian: σ(ε, δ, Δ) ≤ f64::MAX",
            lhs: sigma,
            rhs: f64::MAX,
        })
    }
}

/// Classical Gaussian mechanism: `σ = Δ·√(2 ln(1.25/δ))/ε`, valid only for `ε ∈ (0, 1)`.
///
/// `(ε, δ)`-DP for `f` with L2 sensitivity `Δ` under the neighbour relation `Δ` was
/// computed for (Dwork & Roth 2014, Thm A.1). The result is rounded up (by 4 ulps, which
/// bounds the rounding error of the formula). Prefer [`analytic_gaussian_sigma`]: it is
/// exact, valid for every ε, and always gives less noise (`docs/PAPERS.md` T3-A: 30.75 vs
/// 48.45 at ε = 0.1, δ = 1e-5).
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::classical_gaussian_sigma;
/// // docs/PAPERS.md T3-A, row ε = 0.5: σ_GM (S = 1) = 9.68961052521.
/// let s = classical_gaussian_sigma(0.5, 1e-5, 1.0)?;
/// assert!((s / 9.68961052521 - 1.0).abs() < 1e-11);
/// assert!(classical_gaussian_sigma(1.0, 1e-5, 1.0).is_err()); // outside Thm A.1
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] naming `epsilon` (allowed `(0, 1)`) for ε ∉ (0, 1) or NaN,
/// `delta` for δ ∉ (0, 1), `sensitivity` for Δ ∉ (0, ∞); [`Error::Infeasible`] if σ
/// overflows `f64`.
pub fn classical_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    if !(epsilon > 0.0 && epsilon < 1.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, 1)" });
    }
    classical_gaussian_sigma_unchecked(epsilon, delta, sensitivity)
}

/// The classical formula `Δ·√(2 ln(1.25/δ))/ε` for any `ε > 0`. **Not a DP guarantee for
/// `ε ≥ 1`.**
///
/// Dwork–Roth Thm A.1 proves the formula only for ε < 1, and for large ε it is wrong: at
/// `δ = 1e-5` it returns *less* noise than the exact minimum for every `ε > 8.41977`
/// (`docs/PAPERS.md` §3.4 and T3-A's ratio column). This function exists to reproduce papers that
/// used it anyway (DP-Forward Table 4, `docs/PAPERS.md` P3-7) and for comparisons; calibrate real
/// releases with [`analytic_gaussian_sigma`]. Rounded up like [`classical_gaussian_sigma`].
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::{
///     analytic_gaussian_sigma, classical_gaussian_sigma_unchecked,
/// };
/// // docs/PAPERS.md T3-A, row ε = 16: σ_GM = 0.302800328913 < σ_aGM = 0.344177428496.
/// let gm = classical_gaussian_sigma_unchecked(16.0, 1e-5, 1.0)?;
/// let agm = analytic_gaussian_sigma(16.0, 1e-5, 1.0)?;
/// assert!((gm / 0.302800328913 - 1.0).abs() < 1e-11);
/// assert!(gm < agm); // the classical formula under-noises here
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ (0, ∞) or NaN, δ ∉ (0, 1), Δ ∉ (0, ∞);
/// [`Error::Infeasible`] if σ overflows `f64`.
pub fn classical_gaussian_sigma_unchecked(
    epsilon: f64,
    delta: f64,
    sensitivity: f64,
) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, inf)" });
    }
    let delta = Delta::new_positive(delta)?.get();
    let sens = Sensitivity::new(sensitivity)?.get();
    let sigma = ulps_up(sens * classical_factor(delta) / epsilon, 4);
    if !sigma.is_finite() {
        return Err(Error::Infeasible {
            condition: "classical Gaussian: σ = Δ√(2 ln(1.25/δ))/ε ≤ f64::MAX",
            lhs: sigma,
            rhs: f64::MAX,
        });
    }
    Ok(sigma)
}

/// `√(2 ln(1.25/δ))`, with `ln(1.25/δ) = ln 1.25 − ln δ` (a sum of non-negative terms).
fn classical_factor(delta: f64) -> f64 {
    const LN_1_25: f64 = 0.223_143_551_314_209_76;
    libm::sqrt(2.0 * (LN_1_25 - libm::log(delta)))
}

/// The ε of the classical Gaussian mechanism with noise σ: `ε = Δ·√(2 ln(1.25/δ))/σ`,
/// rounded up, and only if it is `< 1` (Dwork–Roth Thm A.1).
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::{
///     classical_gaussian_epsilon, classical_gaussian_sigma,
/// };
/// let s = classical_gaussian_sigma(0.5, 1e-5, 1.0)?;
/// let e = classical_gaussian_epsilon(s, 1e-5, 1.0)?;
/// assert!(e <= 0.5 && e > 0.5 * (1.0 - 1e-14));
/// // σ = 1 at δ = 1e-5 would be ε ≈ 4.84: outside the theorem, an error.
/// assert!(classical_gaussian_epsilon(1.0, 1e-5, 1.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for σ ∉ (0, ∞), δ ∉ (0, 1), Δ ∉ (0, ∞);
/// [`Error::Infeasible`] when the implied ε is `≥ 1`.
pub fn classical_gaussian_epsilon(sigma: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    let sigma = check_sigma(sigma)?;
    let delta = Delta::new_positive(delta)?.get();
    let sens = Sensitivity::new(sensitivity)?.get();
    let eps = ulps_up(sens * classical_factor(delta) / sigma, 4);
    if eps < 1.0 {
        Ok(eps)
    } else {
        Err(Error::Infeasible {
            condition: "classical Gaussian (Dwork–Roth Thm A.1): ε = Δ√(2 ln(1.25/δ))/σ < 1",
            lhs: eps,
            rhs: 1.0,
        })
    }
}

/// The exact privacy profile of the Gaussian mechanism: the smallest δ for which noise
/// `N(0, σ²)` on an L2-sensitivity-`Δ` query is `(ε, δ)`-DP (Balle & Wang 2018, Thm 8).
///
/// `δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)` with `μ = Δ/σ`, evaluated stably (see the
/// module docs); `ε = 0` gives `2Φ(μ/2) − 1`. The result is in `(0, 1]`: it tends to 0 as
/// σ → ∞ or ε → ∞ and to 1 as σ → 0.
///
/// **Rounded up**: the result is never below the exact profile. The evaluation is within
/// `8(1 + a²)·2⁻⁵³` relative of it (`a = μ/2 − ε/μ`; module docs, "Accuracy"), and the
/// returned value is the evaluation raised by twice that, plus `64·2⁻¹⁰⁷⁴` for the
/// subnormal range (so a profile below about `3e-322` reads as that).
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_delta;
/// // docs/PAPERS.md T3-E: μ = Δ/σ = 1, ε = 1 gives 0.126936737507.
/// let d = analytic_gaussian_delta(1.0, 1.0, 1.0)?;
/// assert!((d / 0.126936737507 - 1.0).abs() < 1e-11);
/// // ε = 0: 2Φ(μ/2) − 1 (T3-E, μ = 2: 0.682689492137).
/// assert!((analytic_gaussian_delta(0.0, 1.0, 2.0)? / 0.682689492137 - 1.0).abs() < 1e-11);
/// // Very large ε neither overflows nor returns NaN: δ (exactly about 1e-54,000) reads as
/// // the smallest bound, about 64 subnormal ulps.
/// let tiny = analytic_gaussian_delta(500.0, 1.0, 1.0)?;
/// assert!(tiny > 0.0 && tiny < 1e-321);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ [0, ∞) or NaN, σ ∉ (0, ∞), Δ ∉ (0, ∞).
pub fn analytic_gaussian_delta(epsilon: f64, sigma: f64, sensitivity: f64) -> Result<f64> {
    let eps = check_epsilon_nonneg(epsilon)?;
    let sigma = check_sigma(sigma)?;
    let sens = Sensitivity::new(sensitivity)?.get();
    Ok(delta_upper(eps, sens, sigma))
}

/// Relative error bound of [`profile`] per unit of `1 + min(a, 0)²` (`a = μ/2 − ε/μ`):
/// twice the largest measured, `7.34·2⁻⁵³` (module docs, "Accuracy"). The `a²` is the
/// rounding of the argument `ε/μ` (an absolute `|a|·2⁻⁵³`) times `d ln φ(a)/da = −a`, which
/// matters in the lower tail only (`a ≥ 0` measured at most `3.1·2⁻⁵³`).
const PROFILE_REL_ERR: f64 = 16.0 * f64::EPSILON / 2.0;

/// An upper bound on the exact profile at representable `(ε, μ)` from its evaluation `d`
/// at `a = μ/2 − ε/μ`: `d·(1 + 16(1 + min(a, 0)²)·2⁻⁵³)` plus 64 subnormal ulps (the
/// absolute error where `d` underflows), rounded up, at most 1.
fn profile_up(d: f64, a: f64) -> f64 {
    let tail = a.min(0.0);
    let relative = if d == 0.0 { 0.0 } else { d * (1.0 + PROFILE_REL_ERR * (1.0 + tail * tail)) };
    (relative + 64.0 * f64::from_bits(1)).next_up().min(1.0)
}

/// The smallest noise scale σ for which `N(0, σ²)` on an L2-sensitivity-`Δ` query is
/// `(ε, δ)`-DP, exactly (analytic Gaussian mechanism, Balle & Wang 2018, Thm 8 / Alg. 1).
///
/// Valid for every `ε ≥ 0` (no ε < 1 restriction). σ is found by bracketing and bisecting
/// the monotone profile [`analytic_gaussian_delta`] down to two adjacent floats; the upper
/// end is returned, so `analytic_gaussian_delta(ε, σ, Δ) ≤ δ` always holds for the result
/// (σ is rounded up). It is at most 2.5e-15 relative above the exact value in the range stated
/// in the module docs. `docs/PAPERS.md` T3-A and T3-B list reference values.
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::{
///     analytic_gaussian_delta, analytic_gaussian_sigma,
/// };
/// // docs/PAPERS.md T3-A, row ε = 1, δ = 1e-5: σ_aMGM (S = 1) = 3.73063163482.
/// let s = analytic_gaussian_sigma(1.0, 1e-5, 1.0)?;
/// assert!((s / 3.730631634815942 - 1.0).abs() < 1e-14);
/// assert!(analytic_gaussian_delta(1.0, s, 1.0)? <= 1e-5);
/// // Linear in Δ; finite even for δ = 1e-300; fine for ε = 500.
/// assert!((analytic_gaussian_sigma(1.0, 1e-5, 2.0)? / (2.0 * s) - 1.0).abs() < 1e-15);
/// assert!(analytic_gaussian_sigma(1.0, 1e-300, 1.0)?.is_finite());
/// assert!(analytic_gaussian_sigma(500.0, 1e-5, 1.0)? > 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ [0, ∞) or NaN, δ ∉ (0, 1) (no Gaussian noise gives
/// δ = 0), Δ ∉ (0, ∞); [`Error::Infeasible`] if σ exceeds `f64::MAX` (e.g. ε = 0 with
/// δ = 1e-310 and Δ = 1e10).
pub fn analytic_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    let eps = check_epsilon_nonneg(epsilon)?;
    let delta = Delta::new_positive(delta)?.get();
    let sens = Sensitivity::new(sensitivity)?.get();
    sigma_for(eps, delta, sens)
}

/// The smallest ε for which noise `N(0, σ²)` on an L2-sensitivity-`Δ` query is
/// `(ε, δ)`-DP (the inverse of the exact profile in ε), rounded up.
///
/// Returns 0 when `δ ≥ 2Φ(Δ/2σ) − 1` (the mechanism is then `(0, δ)`-DP). Otherwise ε is
/// bisected down to two adjacent floats and the upper end returned, so
/// `analytic_gaussian_delta(ε, σ, Δ) ≤ δ` holds for the result.
///
/// ```
/// use dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_epsilon;
/// // docs/PAPERS.md T3-E, inverse values at δ = 1e-5: ε(μ = 1) = 4.37717809568.
/// let e = analytic_gaussian_epsilon(1.0, 1e-5, 1.0)?;
/// assert!((e / 4.37717809568 - 1.0).abs() < 1e-11);
/// // Enough noise for (0, δ)-DP: ε = 0.
/// assert_eq!(analytic_gaussian_epsilon(1e6, 0.5, 1.0)?, 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for σ ∉ (0, ∞), δ ∉ (0, 1), Δ ∉ (0, ∞);
/// [`Error::Infeasible`] when no finite `f64` ε suffices (σ tiny against Δ).
pub fn analytic_gaussian_epsilon(sigma: f64, delta: f64, sensitivity: f64) -> Result<f64> {
    let sigma = check_sigma(sigma)?;
    let delta = Delta::new_positive(delta)?.get();
    let sens = Sensitivity::new(sensitivity)?.get();
    let mu = sens / sigma;
    let infeasible = Error::Infeasible {
        condition: "analytic Gaussian: ε(σ, δ, Δ) ≤ f64::MAX",
        lhs: mu,
        rhs: f64::MAX,
    };
    if !mu.next_up().is_finite() {
        return Err(infeasible);
    }
    let passes = |e: f64| delta_upper(e, sens, sigma) <= delta;
    if passes(0.0) {
        return Ok(0.0);
    }
    let mut lo = 0.0;
    // ε* ≈ μ²/2 + μ·z for large μ; start near there and double.
    let mut hi = (0.5 * mu * mu).clamp(1.0, f64::MAX);
    while !passes(hi) {
        lo = hi;
        hi *= 2.0;
        if hi == f64::INFINITY {
            return Err(infeasible);
        }
    }
    let eps = bisect_to_adjacent(lo, hi, passes);
    if eps.is_finite() { Ok(eps) } else { Err(infeasible) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_delta_inverses_are_not_below_the_exact_values() {
        // Review finding (mpmath, 80 digits): exact ε(0.3, 0.9, 1) = 0.0909127752568394497 and
        // exact σ(0.04709985172502885, 0.9882117083474001, 1) = 0.1978873969953661840; the
        // fixed 4-ulp margin alone returned values 125 and 5.4 ulps below them.
        assert!(analytic_gaussian_epsilon(0.3, 0.9, 1.0).unwrap() >= 0.090_912_775_256_839_45);
        assert!(
            analytic_gaussian_sigma(0.04709985172502885, 0.9882117083474001, 1.0).unwrap()
                >= 0.197_887_396_995_366_2
        );
    }

    #[test]
    fn sigma_is_the_smallest_float_whose_bounded_delta_passes() {
        for (eps, delta) in [(1.0, 1e-5), (0.1, 1e-8), (0.0, 0.5), (50.0, 1e-10), (1e-9, 0.3)] {
            let s = sigma_for(eps, delta, 1.0).unwrap();
            assert!(delta_upper(eps, 1.0, s) <= delta);
            assert!(delta_upper(eps, 1.0, s.next_down()) > delta);
            // The bound is above the evaluation by 16(1 + a²) units (plus two roundings).
            let mu = (1.0 / s).next_up();
            let a = (0.5 * mu - eps / mu).min(0.0);
            let (d, up) = (profile(eps, mu), delta_upper(eps, 1.0, s));
            assert!(up >= d && up <= d * (1.0 + 20.0 * (1.0 + a * a) * f64::EPSILON / 2.0));
        }
    }

    #[test]
    fn classical_rounds_up() {
        let s = classical_gaussian_sigma(0.5, 1e-5, 1.0).unwrap();
        let exact = libm::sqrt(2.0 * libm::log(1.25 / 1e-5)) / 0.5;
        assert!(s >= exact && s <= exact * (1.0 + 1e-14));
    }
}
