//! The analytic matrix Gaussian mechanism (aMGM) of DP-Forward (Du et al., CCS 2023):
//! Algorithm 1, `B = A(ε, δ)`, and the Theorem 6 condition on the noise factors
//! (`docs/PAPERS.md` §3.4–§3.6, reference values §3.9).
//!
//! **Guarantee.** Let `f` map inputs to `R^{n×d}` with L2 (Frobenius) sensitivity
//! `S₂ = sup ‖f(X) − f(X')‖_F`, taken over the neighbour relation the caller works under
//! (any two sequences with the same label for SeqLDP, one substituted token for
//! token-level SeqLDP, replace-one for central DP; `docs/PAPERS.md` §3.3). The release
//! `f(X) + U·N·Vᵀ`, `N` with i.i.d. N(0, 1) entries, is `(ε, δ)`-DP under that relation if
//! `σ_min(U)·σ_min(V) ≥ S₂/B` with `B = A(ε, δ)` (paper Thm 6; the condition is also
//! necessary against the worst-case `f`, `docs/PAPERS.md` §3.6 and P3-9). The caller
//! computes `S₂`: DP-Forward's normalisation or clipping to Frobenius norm `C` gives
//! `S₂ = 2C` for any two inputs, although the released code calibrates with `C`
//! (`docs/PAPERS.md` P3-1).
//!
//! With i.i.d. noise (`U = a·I`, `V = b·I`) the per-entry standard deviation is `σ = S₂/B`
//! ([`amgm_sigma`]), and aMGM *is* the analytic Gaussian mechanism of Balle & Wang (2018):
//! `amgm_sigma(ε, δ, S)` equals
//! [`analytic_gaussian_sigma`](crate::calibration::gaussian_mechanism::analytic_gaussian_sigma)`(ε, δ, S)`
//! up to a few ulps (two independent solvers for the same number; the tests check it).
//!
//! **Algorithm 1** (`docs/PAPERS.md` §3.4–§3.5). `B` is the largest `b` with `g_ε(b) ≤ δ`, where
//! `g_ε(b) = Φ(b/2 − ε/b) − e^ε Φ(−b/2 − ε/b)` ([`amgm_profile`], Eq. (4)) is increasing. With
//! `b = √(2ε)/α`:
//! * `δ₀(ε) = Φ(0) − e^ε Φ(−√(2ε)) = g_ε(√(2ε))` ([`delta0`]);
//! * **branch A** (`δ ≥ δ₀`, `α ≤ 1`): `g⁺(v) = Φ(√(εv)) − e^ε Φ(−√(ε(v+2)))` is
//!   *increasing* in `v`; `v* = sup{v ≥ 0 : g⁺(v) ≤ δ}`, `α = √(1 + v*/2) − √(v*/2)`;
//! * **branch B** (`δ < δ₀`, `α > 1`): `g⁻(u) = Φ(−√(εu)) − e^ε Φ(−√(ε(u+2)))` is
//!   *decreasing* in `u`; `u* = inf{u ≥ 0 : g⁻(u) ≤ δ}`, `α = √(1 + u*/2) + √(u*/2)`.
//!
//! **Fixes relative to the paper and its released code** (the implementation requirements
//! P3-R1 … P3-R6 and errata P3-4, P3-10, P3-17 of `docs/PAPERS.md`), all applied here:
//! * [FIX P3-4, P3-R3] Branch A keeps its own monotonicity direction. The released
//!   bisection treats `g⁺` as decreasing, runs to the end of its bracket and returns noise
//!   hundreds of times too small (`docs/PAPERS.md` T3-D: σ = 0.00223606 instead of
//!   0.865868816946 at ε = 0.5, δ = 0.3). The bug is latent at δ = 1e-5, where branch A
//!   needs ε < 3.14e-10.
//! * [FIX P3-R2] The bracket is found by doubling from `[0, 1]`, not fixed at `[0, 1e5]`
//!   (u* = 8786 at ε = 1e-4, δ = 1e-5, and grows without bound as ε → 0).
//! * [FIX P3-R1, P3-17] Bisection on the bracket, not Newton (`d/dv Φ(√(εv))` is singular
//!   at `v = 0`); it stops when the two ends give `B` values within an ulp.
//! * [FIX P3-R5] No `(1 + erf(−x/√2))/2` tails: `g⁺`, `g⁻` are evaluated with the stable
//!   profile of [`crate::calibration::gaussian_mechanism`] (TwoSum-exact arguments,
//!   Gauss–Laguerre tail integral, no `e^ε` overflow). In `f64` the erf form's σ is off by
//!   −4.3e-6 relative at ε = 20 and −7.6e-4 at ε = 24 (under-noising), +1.6e-2 at ε = 32.
//! * [FIX P3-R4, P3-10] "`g(v) = δ`" is implemented as `sup`/`inf` with the conservative end
//!   of the final bracket (`v_lo` in branch A, `u_hi` in branch B); `g_ε(B) ≤ δ` is then
//!   re-checked, `B` moved down by ulps if it fails, and finally [`SAFETY_ULPS`] more ulps
//!   (σ up, B down) to cover the evaluation error, as in the analytic Gaussian calibrator.
//! * [FIX P3-R6] δ must be in (0, 1): δ = 0 is pure DP, which no Gaussian gives.
//!
//! **ε → 0** (P3-R7): `B₀ = 2Φ⁻¹((1+δ)/2)` ([`amgm_bound_zero_eps`]) is the `ε = 0` bound and,
//! since `B` increases with ε, a valid (conservative) bound for every ε ≥ 0.
//!
//! Accuracy: `B` and `σ` agree with the 60-digit values of `docs/PAPERS.md` T3-A, T3-B and T3-D to
//! every printed digit, and with 120-digit mpmath to within 2e-15 relative, on the safe side (σ
//! never below, B never above the exact value; the last few ulps are the safety margin), for ε ∈
//! [1e-12, 10⁶] and δ ∈ [1e-300, 0.9] (`tests/accounting/gaussian_calibration.rs`).
//!
//! [`SAFETY_ULPS`]: crate::calibration::gaussian_mechanism::SAFETY_ULPS

use crate::calibration::gaussian_mechanism::{
    SAFETY_ULPS, bisect_to_adjacent, check_epsilon_nonneg, check_sigma, profile, profile_mh,
    ulps_up,
};
use crate::error::{Error, Result};
use crate::privacy_params::{Delta, Epsilon, Sensitivity};

/// Which branch of Algorithm 1 produced the bound.
///
/// ```
/// use dpattn_core::calibration::amgm::{Branch, amgm_solve, delta0};
/// let d0 = delta0(1.0)?; // 0.2862082119 (docs/PAPERS.md T3-A)
/// assert_eq!(amgm_solve(1.0, 1e-5)?.branch, Branch::B); // δ < δ₀
/// assert_eq!(amgm_solve(1.0, d0)?.branch, Branch::A); // δ ≥ δ₀
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// `δ ≥ δ₀(ε)`: `g⁺(v)` increasing, `α ∈ (0, 1]`, `B ≥ √(2ε)` (lines 2–5).
    A,
    /// `δ < δ₀(ε)`: `g⁻(u)` decreasing, `α > 1`, `B < √(2ε)` (lines 7–10). Every practical
    /// `(ε, δ)` lands here (at δ = 1e-5, branch A needs ε < 3.14e-10).
    B,
}

/// The full output of Algorithm 1, for reporting and for comparison with `docs/PAPERS.md`
/// T3-A.
///
/// ```
/// use dpattn_core::calibration::amgm::amgm_solve;
/// // docs/PAPERS.md T3-A, row ε = 4: u* = 3.72911235227, α = 3.05798750142,
/// // B = 0.924930897667.
/// let s = amgm_solve(4.0, 1e-5)?;
/// assert!((s.root / 3.72911235227 - 1.0).abs() < 1e-11);
/// assert!(((2.0f64 * 4.0).sqrt() / s.alpha / s.bound - 1.0).abs() < 1e-14); // B = √(2ε)/α
/// assert!(s.delta0 > 1e-5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmgmSolution {
    /// The branch taken.
    pub branch: Branch,
    /// `δ₀(ε)`, the branch threshold.
    pub delta0: f64,
    /// `v*` (branch A, lower end of the final bracket) or `u*` (branch B, upper end).
    pub root: f64,
    /// `α`, with `B = √(2ε)/α` (computed from `root`).
    pub alpha: f64,
    /// `B = A(ε, δ)`, rounded down: `g_ε(B) ≤ δ`.
    pub bound: f64,
}

/// `g_ε` at `a = m + h`, `b = m − h` for the two substitutions (see `profile_mh`).
fn g_plus(eps: f64, v: f64) -> f64 {
    // a = √(εv), b = −√(ε(v+2)): m = −ε/(s₁ + s₂), h = (s₁ + s₂)/2.
    let s = libm::sqrt(eps * v) + libm::sqrt(eps * (v + 2.0));
    profile_mh(eps, -(eps / s), 0.5 * s)
}

fn g_minus(eps: f64, u: f64) -> f64 {
    // a = −√(εu), b = −√(ε(u+2)): m = −(s₁ + s₂)/2, h = ε/(s₁ + s₂).
    let s = libm::sqrt(eps * u) + libm::sqrt(eps * (u + 2.0));
    profile_mh(eps, -0.5 * s, eps / s)
}

/// `B` from the branch-A root: `√(2ε)/α = √(εv) + √(ε(v+2))`.
fn bound_a(eps: f64, v: f64) -> f64 {
    libm::sqrt(eps * v) + libm::sqrt(eps * (v + 2.0))
}

/// `B` from the branch-B root: `√(2ε)/α = 2ε/(√(εu) + √(ε(u+2)))`.
fn bound_b(eps: f64, u: f64) -> f64 {
    2.0 * eps / (libm::sqrt(eps * u) + libm::sqrt(eps * (u + 2.0)))
}

/// The bracket could not be found below `1e300` (never observed; kept total).
fn no_bracket(eps: f64, delta: f64) -> Error {
    Error::Infeasible {
        condition: "Algorithm 1: a bracket for the root exists below 1e300",
        lhs: eps,
        rhs: delta,
    }
}

/// `δ₀(ε) = Φ(0) − e^ε Φ(−√(2ε))`, the threshold between the branches of Algorithm 1
/// (line 1); `δ₀ = g_ε(√(2ε))`, increasing from 0 (ε = 0) to ½ (ε → ∞).
///
/// ```
/// use dpattn_core::calibration::amgm::delta0;
/// // docs/PAPERS.md T3-A, row ε = 1: δ₀ = 0.2862082119.
/// assert!((delta0(1.0)? - 0.2862082119).abs() < 1e-10);
/// assert!(delta0(1e6)? < 0.5 && delta0(0.0)? == 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ [0, ∞) or NaN.
pub fn delta0(epsilon: f64) -> Result<f64> {
    let eps = check_epsilon_nonneg(epsilon)?;
    if eps == 0.0 {
        return Ok(0.0);
    }
    // a = 0, b = −√(2ε): m = −√(ε/2), h = √(ε/2).
    let r = libm::sqrt(0.5 * eps);
    Ok(profile_mh(eps, -r, r))
}

/// `g_ε(b) = Φ(b/2 − ε/b) − e^ε Φ(−b/2 − ε/b)` (paper Eq. (4)): the left side of the
/// Balle–Wang condition for a whitened difference of norm `b = ‖U⁻¹ΔV⁻ᵀ‖_F`.
///
/// The mechanism is `(ε, δ)`-DP iff `g_ε(b) ≤ δ` for the largest such `b` over neighbours.
/// `g_ε(b)` is the analytic Gaussian profile at `μ = b`.
///
/// ```
/// use dpattn_core::calibration::amgm::{amgm_profile, delta0};
/// // docs/PAPERS.md T3-E: g_2(2) = 0.331897998777 = δ₀(2) (b = √(2ε)).
/// let g = amgm_profile(2.0, 2.0)?;
/// assert!((g / 0.331897998777 - 1.0).abs() < 1e-11);
/// assert!((g / delta0(2.0)? - 1.0).abs() < 1e-14);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ [0, ∞) or NaN, `b` ∉ (0, ∞) (named `b`).
pub fn amgm_profile(epsilon: f64, b: f64) -> Result<f64> {
    let eps = check_epsilon_nonneg(epsilon)?;
    if !(b.is_finite() && b > 0.0) {
        return Err(Error::OutOfRange { name: "b", value: b, allowed: "(0, inf), finite" });
    }
    Ok(profile(eps, b))
}

/// Algorithm 1 with its intermediate values: branch, `δ₀`, the root `u*`/`v*`, `α` and
/// `B = A(ε, δ)` (rounded down).
///
/// ```
/// use dpattn_core::calibration::amgm::{Branch, amgm_solve};
/// // docs/PAPERS.md T3-A, row ε = 1, δ = 1e-5: branch g⁻, u* = 12.9355752459,
/// // α = 5.27590985417, B = 0.268051123211.
/// let s = amgm_solve(1.0, 1e-5)?;
/// assert_eq!(s.branch, Branch::B);
/// assert!((s.root / 12.9355752459 - 1.0).abs() < 1e-10);
/// assert!((s.alpha / 5.27590985417 - 1.0).abs() < 1e-11);
/// assert!((s.bound / 0.268051123211 - 1.0).abs() < 1e-11);
/// // Branch A (δ ≥ δ₀), T3-D: ε = 0.5, δ = 0.3 gives σ = 1/B = 0.865868816946.
/// let a = amgm_solve(0.5, 0.3)?;
/// assert_eq!(a.branch, Branch::A);
/// assert!((1.0 / a.bound / 0.865868816946 - 1.0).abs() < 1e-11);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε ∉ (0, ∞) or NaN (named `epsilon`), δ ∉ (0, 1) (`delta`).
pub fn amgm_solve(epsilon: f64, delta: f64) -> Result<AmgmSolution> {
    let mut sol = solve_checked(epsilon, delta)?;
    for _ in 0..SAFETY_ULPS {
        sol.bound = sol.bound.next_down();
    }
    Ok(sol)
}

/// Brackets and bisects the root of Algorithm 1 on `[0, ∞)`: `below(x)` holds left of the
/// root and fails right of it. Returns `(lo, hi)` with `below(lo)` and `!below(hi)`, stopped
/// once the two ends give `B` values (`bound`) within one ulp.
fn bisect_root(
    eps: f64,
    delta: f64,
    below: impl Fn(f64) -> bool,
    bound: impl Fn(f64) -> f64,
) -> Result<(f64, f64)> {
    let close = |x: f64, y: f64| (x - y).abs() <= f64::EPSILON * x.max(y);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while below(hi) {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return Err(no_bracket(eps, delta));
        }
    }
    for _ in 0..2200 {
        let mid = lo + 0.5 * (hi - lo);
        if mid <= lo || mid >= hi || close(bound(lo), bound(hi)) {
            break;
        }
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, hi))
}

/// Algorithm 1 with the re-check of `docs/PAPERS.md` P3-R4 but without the final safety
/// ulps.
fn solve_checked(epsilon: f64, delta: f64) -> Result<AmgmSolution> {
    let eps = Epsilon::new(epsilon)?.get();
    let delta = Delta::new_positive(delta)?.get();
    let d0 = delta0(eps)?;
    let (branch, root, alpha, mut bound) = if delta >= d0 {
        // Branch A: g⁺ increases from g⁺(0) = δ₀ ≤ δ; keep g⁺(lo) ≤ δ < g⁺(hi).
        let lo = bisect_root(eps, delta, |x| g_plus(eps, x) <= delta, |x| bound_a(eps, x))?.0;
        let alpha = 1.0 / (libm::sqrt(1.0 + 0.5 * lo) + libm::sqrt(0.5 * lo));
        (Branch::A, lo, alpha, bound_a(eps, lo))
    } else {
        // Branch B: g⁻ decreases from g⁻(0) = δ₀ > δ; keep g⁻(lo) > δ ≥ g⁻(hi).
        let hi = bisect_root(eps, delta, |x| g_minus(eps, x) > delta, |x| bound_b(eps, x))?.1;
        let alpha = libm::sqrt(1.0 + 0.5 * hi) + libm::sqrt(0.5 * hi);
        (Branch::B, hi, alpha, bound_b(eps, hi))
    };
    // Re-check g_ε(B) ≤ δ on the profile itself and move B down if needed (P3-R4).
    let mut steps = 0;
    while profile(eps, bound) > delta {
        bound = bound.next_down();
        steps += 1;
        if steps > 64 || bound <= 0.0 {
            return Err(no_bracket(eps, delta));
        }
    }
    Ok(AmgmSolution { branch, delta0: d0, root, alpha, bound })
}

/// `B = A(ε, δ)` (Algorithm 1): the largest Frobenius norm of the whitened difference
/// `U⁻¹ΔV⁻ᵀ` that keeps aMGM `(ε, δ)`-DP, rounded down (`g_ε(B) ≤ δ`).
///
/// ```
/// use dpattn_core::calibration::amgm::amgm_bound;
/// // docs/PAPERS.md T3-B, δ = 1e-6, ε = 2: B = 0.448334740395.
/// assert!((amgm_bound(2.0, 1e-6)? / 0.448334740395 - 1.0).abs() < 1e-11);
/// assert!(amgm_bound(0.0, 1e-6).is_err() && amgm_bound(1.0, 0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`amgm_solve`].
pub fn amgm_bound(epsilon: f64, delta: f64) -> Result<f64> {
    Ok(amgm_solve(epsilon, delta)?.bound)
}

/// The i.i.d. aMGM noise standard deviation `σ = S₂/B` (paper Eq. (6)), rounded up: the
/// smallest `σ_min(U)·σ_min(V)` Theorem 6 allows, and the per-entry σ of the paper's
/// experiments.
///
/// `g_ε(S₂/σ) ≤ δ` is re-checked and σ moved up by ulps if it fails (`docs/PAPERS.md`
/// P3-R4), then
/// [`SAFETY_ULPS`] more.
///
/// ```
/// use dpattn_core::calibration::amgm::amgm_sigma;
/// use dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_sigma;
/// // docs/PAPERS.md T3-A, row ε = 8: σ_aMGM = 0.600229072199 (S = 1), 1.2004581444 (S = 2).
/// assert!((amgm_sigma(8.0, 1e-5, 1.0)? / 0.600229072199 - 1.0).abs() < 1e-11);
/// assert!((amgm_sigma(8.0, 1e-5, 2.0)? / 1.2004581444 - 1.0).abs() < 1e-10);
/// // i.i.d. aMGM is the analytic Gaussian mechanism.
/// let (m, g) = (amgm_sigma(8.0, 1e-5, 1.0)?, analytic_gaussian_sigma(8.0, 1e-5, 1.0)?);
/// assert!((m / g - 1.0).abs() < 1e-14);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`amgm_solve`], plus [`Error::OutOfRange`] for `s2` ∉ (0, ∞) (named `sensitivity`) and
/// [`Error::Infeasible`] if σ overflows.
pub fn amgm_sigma(epsilon: f64, delta: f64, s2: f64) -> Result<f64> {
    let sol = solve_checked(epsilon, delta)?;
    let s2 = Sensitivity::new(s2)?.get();
    let mut sigma = s2 / sol.bound;
    let mut steps = 0;
    while profile(epsilon, s2 / sigma) > delta {
        sigma = sigma.next_up();
        steps += 1;
        if steps > 64 {
            return Err(no_bracket(epsilon, delta));
        }
    }
    let sigma = ulps_up(sigma, SAFETY_ULPS);
    if sigma.is_finite() {
        Ok(sigma)
    } else {
        Err(Error::Infeasible {
            condition: "aMGM: σ = S₂/B ≤ f64::MAX", lhs: sigma, rhs: f64::MAX
        })
    }
}

/// `B₀ = 2Φ⁻¹((1+δ)/2) = 2√2·erfinv(δ)`, the `ε → 0` limit of `A(ε, δ)` (paper §4.2.2,
/// `docs/PAPERS.md` P3-R7), rounded down.
///
/// It is the exact bound for `(0, δ)`-DP, and since `A(ε, δ)` increases with ε it is a
/// valid, conservative bound for every `ε ≥ 0`.
///
/// ```
/// use dpattn_core::calibration::amgm::{amgm_bound, amgm_bound_zero_eps};
/// // docs/PAPERS.md T3-E: B₀(1e-5) = 2.5066282747e-5; Algorithm 1 at ε = 1e-12 gives
/// // 2.50662840e-5.
/// let b0 = amgm_bound_zero_eps(1e-5)?;
/// assert!((b0 / 2.5066282747e-5 - 1.0).abs() < 1e-10);
/// assert!(b0 <= amgm_bound(1e-12, 1e-5)?);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for δ ∉ (0, 1).
pub fn amgm_bound_zero_eps(delta: f64) -> Result<f64> {
    let delta = Delta::new_positive(delta)?.get();
    let fails = |mu: f64| profile(0.0, mu) > delta;
    // 2Φ(μ/2) − 1 ≤ μ/√(2π), so the root is above 2.5δ: start below it and above it.
    let (mut lo, mut hi) = (0.5 * delta, 1.0f64);
    while fails(lo) {
        lo *= 0.5;
        if lo == 0.0 {
            return Err(no_bracket(0.0, delta));
        }
    }
    while !fails(hi) {
        hi *= 2.0;
        if hi > 1e300 {
            return Err(no_bracket(0.0, delta));
        }
    }
    let mut bound = bisect_to_adjacent(lo, hi, fails).next_down();
    for _ in 0..SAFETY_ULPS {
        bound = bound.next_down();
    }
    Ok(bound)
}

/// Theorem 6 for given noise factors: `Ok(())` iff
/// `σ_min(U)·σ_min(V) ≥ S₂/A(ε, δ)` with the right side rounded up ([`amgm_sigma`]), so
/// that the release `f(X) + U·N·Vᵀ` is `(ε, δ)`-DP.
///
/// Pass the *smallest* singular values of the factors (`σ_min(U) = σ_n(U)`,
/// `σ_min(V) = σ_d(V)`; for diagonal factors the smallest `|entry|`; for dense ones a
/// certified lower bound, `docs/PAPERS.md` §3.6). Only the product matters. The comparison is
/// exact (fused multiply-add), and the requirement is the rounded-up σ, so a product
/// equal to the mathematically exact requirement to the last ulp can be refused: this is
/// the conservative side.
///
/// ```
/// use dpattn_core::calibration::amgm::{amgm_check_factors, amgm_sigma};
/// // docs/PAPERS.md T3-I: ε = 1, δ = 1e-5, S₂ = 1 needs σ_min(U)·σ_min(V) ≥ 3.7306316348…
/// let need = amgm_sigma(1.0, 1e-5, 1.0)?;
/// assert!(amgm_check_factors(1.0, 1e-5, 1.0, need, 1.0).is_ok());
/// assert!(amgm_check_factors(1.0, 1e-5, 1.0, 0.5 * need, 2.0).is_ok());
/// assert!(amgm_check_factors(1.0, 1e-5, 1.0, 0.999 * need, 1.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Infeasible`] (`lhs` the product, `rhs` the requirement) if the condition
/// fails; [`Error::OutOfRange`] for invalid ε, δ, `s2`, or singular values ∉ (0, ∞)
/// (named `sigma`).
pub fn amgm_check_factors(
    epsilon: f64,
    delta: f64,
    s2: f64,
    sigma_min_u: f64,
    sigma_min_v: f64,
) -> Result<()> {
    let su = check_sigma(sigma_min_u)?;
    let sv = check_sigma(sigma_min_v)?;
    let need = amgm_sigma(epsilon, delta, s2)?;
    // Sign of su·sv − need, exactly.
    if libm::fma(su, sv, -need) >= 0.0 {
        Ok(())
    } else {
        Err(Error::Infeasible {
            condition: "σ_min(U)·σ_min(V) ≥ S₂/A(ε, δ) (DP-Forward Thm 6)",
            lhs: su * sv,
            rhs: need,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_meet_at_delta0() {
        for eps in [1e-6, 0.01, 0.5, 1.0, 8.0, 100.0] {
            let d0 = delta0(eps).unwrap();
            let b = amgm_bound(eps, d0).unwrap();
            let b_below = amgm_bound(eps, d0 * (1.0 - 1e-12)).unwrap();
            let s = libm::sqrt(2.0 * eps);
            assert!((b / s - 1.0).abs() < 1e-6, "eps {eps}: {b} vs {s}");
            assert!(b_below <= b);
            assert_eq!(amgm_solve(eps, d0).unwrap().branch, Branch::A);
            assert_eq!(amgm_solve(eps, d0 * 0.99).unwrap().branch, Branch::B);
        }
    }

    #[test]
    fn g_plus_and_g_minus_are_monotone_in_their_own_direction() {
        let eps = 0.7;
        let (mut p, mut m) = (g_plus(eps, 0.0), g_minus(eps, 0.0));
        assert!((p - m).abs() < 1e-15 && (p - delta0(eps).unwrap()).abs() < 1e-15);
        let mut x = 1e-6;
        while x < 1e4 {
            let (gp, gm) = (g_plus(eps, x), g_minus(eps, x));
            assert!(gp >= p && gm <= m, "x {x}");
            (p, m) = (gp, gm);
            x *= 1.3;
        }
    }

    #[test]
    fn bound_is_feasible_and_tight() {
        for (eps, delta) in [(1.0, 1e-5), (0.5, 0.3), (1e-9, 1e-5), (50.0, 1e-12), (0.01, 0.1)] {
            let b = amgm_bound(eps, delta).unwrap();
            assert!(profile(eps, b) <= delta);
            assert!(profile(eps, b * (1.0 + 1e-13)) > delta, "eps {eps} delta {delta}");
        }
    }
}
