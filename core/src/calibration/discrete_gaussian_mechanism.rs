//! Calibration of the discrete Gaussian mechanism (Canonne, Kamath, Steinke 2020, Thm 7).
//!
//! **Guarantee.** Let `f` be integer-valued with sensitivity `Δ ∈ ℕ⁺` (any neighbour
//! relation for which `|f(x) − f(x')| ≤ Δ`). Then `f(X) + N_ℤ(0, σ²)` is `(ε, δ)`-DP with
//!
//! `δ(ε) = P[Y > εσ²/Δ − Δ/2] − e^ε · P[Y > εσ²/Δ + Δ/2]`, `Y ~ N_ℤ(0, σ²)` (CKS20 Thm 7),
//!
//! which is tight. It is evaluated without cancellation as
//! `Σ_{y > a} p(y) · (1 − e^{ε − (2yΔ + Δ²)/2σ²})` with `a = εσ²/Δ − Δ/2` (every term is
//! positive; `Δ` is an integer so the second probability is the first sum shifted by `Δ`),
//! using a compensated sum and the exact normaliser
//! `Σ_y e^{−y²/2σ²} = σ√(2π) (1 + 2 Σ_k e^{−2π²σ²k²})` (Poisson summation) for `σ ≥ 1`.
//! The computed value is an upper bound: each factor is evaluated at an exponent lowered by
//! its rounding-error bound (so a term at a lattice boundary is never lost to rounding), the
//! truncated tail is bounded by a geometric series, and the total is padded by `1e-12`
//! relative for the `exp`/`expm1`/summation errors. Deep in the tail (δ ≲ 1e-80 at small σ)
//! the per-term allowance dominates and the bound is loose, never low.
//! [`discrete_gaussian_sigma`] returns the upper end of a bisection bracket (σ rounded *up*,
//! to `1e-12` relative) and [`discrete_gaussian_epsilon`] the upper end for `ε`, so neither
//! understates the noise or the loss. For vector-valued `f` with L2 sensitivity use the zCDP
//! bound `ρ = Δ₂²/2σ²` (CKS20 Thm 4) and the conversions in [`crate::accounting`].
//!
//! **Cost.** One evaluation sums `O(σ + Δ/ε)` terms; it is refused beyond `2^24` terms
//! (`σ` of a few million) with [`Error::OutOfRange`] rather than answered inexactly.

use crate::Delta;
use crate::error::{Error, Result, nonneg_finite};

/// Largest number of lattice terms one evaluation may sum.
pub const MAX_TERMS: u64 = 1 << 24;

fn check(sigma: f64, sens: u64) -> Result<()> {
    if !(sigma.is_finite() && sigma > 0.0) {
        return Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, inf)" });
    }
    if sens == 0 {
        return Err(Error::OutOfRange {
            name: "sensitivity",
            value: 0.0,
            allowed: "integers >= 1",
        });
    }
    Ok(())
}

/// `Σ_y e^{−y²/2σ²}` over all integers.
fn normaliser(sigma: f64) -> f64 {
    if sigma >= 1.0 {
        let c = 2.0 * core::f64::consts::PI * core::f64::consts::PI * sigma * sigma;
        let corr = 2.0 * (libm::exp(-c) + libm::exp(-4.0 * c));
        return sigma * libm::sqrt(2.0 * core::f64::consts::PI) * (1.0 + corr);
    }
    // σ < 1: terms beyond |y| = 40 are below e^{−800}.
    let mut s = 1.0;
    for y in 1..=40u32 {
        let y = f64::from(y);
        s += 2.0 * libm::exp(-y * y / (2.0 * sigma * sigma));
    }
    s
}

/// The privacy profile `δ(ε)` of Thm 7 for `σ` and integer sensitivity `Δ`.
///
/// ```
/// use dpattn_core::calibration::discrete_gaussian_mechanism::discrete_gaussian_delta;
/// // Large σ: the discrete profile approaches the continuous analytic-Gaussian one
/// // (docs/PAPERS.md T3-E: μ = Δ/σ = 1, ε = 1 gives 0.126936737507).
/// let d = discrete_gaussian_delta(1.0, 40.0, 40)?;
/// assert!((d - 0.126936737507).abs() < 2e-3);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `ε < 0`, NaN, `σ ∉ (0, ∞)`, `Δ = 0`, or more than
/// [`MAX_TERMS`] terms (naming `sigma` when `40σ + 40` alone is too many, `sensitivity`
/// when the `Δ/2 − εσ²/Δ` terms before the peak make it too many).
pub fn discrete_gaussian_delta(epsilon: f64, sigma: f64, sensitivity: u64) -> Result<f64> {
    check(sigma, sensitivity)?;
    nonneg_finite("epsilon", epsilon)?;
    let d = sensitivity as f64;
    let two_s2 = 2.0 * sigma * sigma;
    let a = epsilon * sigma * sigma / d - d / 2.0;
    // One term before floor(a) + 1: if rounding put `a` just below an integer the first
    // term could otherwise be skipped; an extra term only adds a non-negative amount.
    let first = libm::floor(a);
    // Terms increase up to y = 0 and then fall; stop once past the peak and negligible.
    let peak_to_end = 40.0 * sigma + 40.0;
    let terms = if first < 0.0 { -first + peak_to_end } else { peak_to_end };
    // `terms` is finite here (σ, ε and Δ are), so `>=` is the complete test. The terms
    // before the peak number `−⌊a⌋ ≤ Δ/2 + 1`: past the limit with a σ that alone fits,
    // the sensitivity is what is too large.
    if peak_to_end >= MAX_TERMS as f64 {
        return Err(Error::OutOfRange {
            name: "sigma (terms to sum: 40σ + 40)",
            value: sigma,
            allowed: "40σ + 40 below 2^24",
        });
    }
    if terms >= MAX_TERMS as f64 {
        return Err(Error::OutOfRange {
            name: "sensitivity (terms to sum: Δ/2 − εσ²/Δ + 40σ + 40)",
            value: d,
            allowed: "Δ/2 − εσ²/Δ + 40σ + 40 below 2^24",
        });
    }
    const U: f64 = f64::EPSILON;
    let (mut sum, mut comp) = (0.0f64, 0.0f64);
    let mut y = first;
    let tail = loop {
        let p = libm::exp(-y * y / two_s2);
        if y > 0.0 && p == 0.0 {
            break 0.0;
        }
        // Upper bound of the factor 1 − e^x: x = ε − (2yΔ + Δ²)/2σ² is computed with an
        // absolute error below 4U·(ε + |2yΔ + Δ²|/2σ²); lowering x by that bound can only
        // raise the factor, and the factor of a term with y ≤ a (mathematically ≤ 0) is
        // clamped to 0 from below.
        let q = (2.0 * y * d + d * d) / two_s2;
        let x = epsilon - q;
        let factor = (-libm::expm1(x - 4.0 * U * (epsilon + q.abs()))).max(0.0);
        let w = p * factor;
        let t = sum + w;
        comp += if sum.abs() >= w.abs() { (sum - t) + w } else { (w - t) + sum };
        sum = t;
        if y > first.max(0.0) && w > 0.0 && w <= 1e-18 * (sum + comp) {
            // Every later term is at most p(y') (factor ≤ 1), and p falls by at least
            // r = e^{−(2y+1)/2σ²} per step: bound the rest by p·r/(1 − r).
            let r = libm::exp(-(2.0 * y + 1.0) / two_s2);
            break p * r / -libm::expm1(-(2.0 * y + 1.0) / two_s2);
        }
        y += 1.0;
    };
    // exp, expm1 and the summation are each within a few ulps: pad by 1e-12 relative.
    let z = normaliser(sigma);
    Ok(((sum + comp + tail) * (1.0 + 1e-12) / z).clamp(0.0, 1.0))
}

/// The smallest `σ` (to `1e-12` relative, rounded up) with `δ(ε; σ) ≤ δ`.
///
/// ```
/// use dpattn_core::calibration::discrete_gaussian_mechanism::{
///     discrete_gaussian_delta, discrete_gaussian_sigma,
/// };
/// let s = discrete_gaussian_sigma(1.0, 1e-5, 1)?;
/// assert!(discrete_gaussian_delta(1.0, s, 1)? <= 1e-5);
/// // Close to the continuous analytic Gaussian's 3.7306 (docs/PAPERS.md T3-A).
/// assert!((s - 3.7306).abs() < 0.05);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `ε ∉ (0, ∞)`, `δ ∉ (0, 1)`, `Δ = 0`, or a `σ` beyond the
/// summation limit.
pub fn discrete_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: u64) -> Result<f64> {
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, inf)" });
    }
    Delta::new_positive(delta)?;
    let f = |s: f64| discrete_gaussian_delta(epsilon, s, sensitivity);
    // Bracket: δ(σ) decreases in σ; grow `hi` until it meets the target.
    let mut lo = 1e-3;
    if f(lo)? <= delta {
        return Ok(lo);
    }
    let mut hi = (sensitivity as f64).max(1.0);
    while f(hi)? > delta {
        lo = hi;
        hi *= 2.0;
    }
    while (hi - lo) > 1e-12 * hi {
        let mid = 0.5 * (lo + hi);
        if f(mid)? <= delta { hi = mid } else { lo = mid }
    }
    Ok(hi)
}

/// The smallest `ε` (to `1e-12` relative or `1e-15` absolute, rounded up) with
/// `δ(ε; σ) ≤ δ`; 0 if `ε = 0` already suffices.
///
/// ```
/// use dpattn_core::calibration::discrete_gaussian_mechanism::{
///     discrete_gaussian_epsilon, discrete_gaussian_sigma,
/// };
/// let s = discrete_gaussian_sigma(0.5, 1e-6, 3)?;
/// let e = discrete_gaussian_epsilon(s, 1e-6, 3)?;
/// assert!(e <= 0.5 && e > 0.5 * (1.0 - 1e-9));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`discrete_gaussian_sigma`].
pub fn discrete_gaussian_epsilon(sigma: f64, delta: f64, sensitivity: u64) -> Result<f64> {
    check(sigma, sensitivity)?;
    Delta::new_positive(delta)?;
    let f = |e: f64| discrete_gaussian_delta(e, sigma, sensitivity);
    if f(0.0)? <= delta {
        return Ok(0.0);
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    while f(hi)? > delta {
        lo = hi;
        hi *= 2.0;
    }
    while (hi - lo) > 1e-12 * hi && hi - lo > 1e-15 {
        let mid = 0.5 * (lo + hi);
        if f(mid)? <= delta { hi = mid } else { lo = mid }
    }
    Ok(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thm 7 by brute force: both tail probabilities summed separately over |y| ≤ 60σ.
    fn brute(eps: f64, sigma: f64, d: u64) -> f64 {
        let d = d as f64;
        let n = libm::ceil(60.0 * sigma + 60.0) as i64;
        let p = |y: f64| libm::exp(-y * y / (2.0 * sigma * sigma));
        let z: f64 = (-n..=n).map(|y| p(y as f64)).sum();
        let m = eps * sigma * sigma / d;
        let t1: f64 = (-n..=n).map(|y| y as f64).filter(|&y| y > m - d / 2.0).map(p).sum();
        let t2: f64 = (-n..=n).map(|y| y as f64).filter(|&y| y > m + d / 2.0).map(p).sum();
        (t1 - libm::exp(eps) * t2) / z
    }

    #[test]
    fn matches_the_theorem_summed_directly() {
        for (e, s, d) in [
            (0.5, 0.7, 1),
            (1.0, 2.0, 1),
            (1.0, 3.7, 2),
            (0.1, 5.0, 1),
            (3.0, 1.5, 4),
            (0.0, 2.0, 1),
        ] {
            let (a, b) = (discrete_gaussian_delta(e, s, d).unwrap(), brute(e, s, d));
            assert!((a - b).abs() <= 1e-13 + 1e-10 * b, "ε={e} σ={s} Δ={d}: {a} vs {b}");
        }
    }

    #[test]
    fn epsilon_zero_is_the_total_variation_distance() {
        // δ(0) = P[|Y| < Δ/2 ... ] reduces to P[−Δ/2 < Y ≤ Δ/2] for Δ = 1: P[Y = 0] = 1/Z.
        let s = 1.3;
        let want = 1.0 / normaliser(s);
        let got = discrete_gaussian_delta(0.0, s, 1).unwrap();
        assert!(got >= want && got <= want * (1.0 + 1e-11), "{got} vs {want}");
    }

    #[test]
    fn profile_decreases_in_epsilon_and_sigma() {
        let mut prev = 1.0;
        for k in 0..40 {
            let d = discrete_gaussian_delta(0.1 * f64::from(k), 2.5, 1).unwrap();
            assert!(d <= prev);
            prev = d;
        }
        let mut prev = 1.0;
        for k in 1..40 {
            let d = discrete_gaussian_delta(1.0, 0.25 * f64::from(k), 1).unwrap();
            assert!(d <= prev);
            prev = d;
        }
    }

    #[test]
    fn calibration_round_trips_and_never_understates() {
        for (e, dl, d) in [(1.0, 1e-5, 1), (0.3, 1e-8, 2), (4.0, 1e-3, 1)] {
            let s = discrete_gaussian_sigma(e, dl, d).unwrap();
            assert!(discrete_gaussian_delta(e, s, d).unwrap() <= dl);
            assert!(discrete_gaussian_delta(e, s * (1.0 - 1e-9), d).unwrap() > dl);
            let e2 = discrete_gaussian_epsilon(s, dl, d).unwrap();
            assert!(e2 <= e * (1.0 + 1e-12) && e2 >= e * (1.0 - 1e-8), "{e} {e2}");
        }
    }

    #[test]
    fn lattice_boundaries_do_not_zero_the_profile() {
        // Review finding (mpmath, 60 digits): ε = 1.5/0.383², σ = 0.383, Δ = 1 puts
        // a = εσ²/Δ − Δ/2 within an ulp of the integer 1; true δ = 1.1230477e-6, and the
        // old loop returned 0.
        let eps = 1.5 / (0.383 * 0.383);
        let d = discrete_gaussian_delta(eps, 0.383, 1).unwrap();
        // The reference has 8 digits: never below its rounding interval, and within 1e-6
        // relative above it (the boundary term's rounding allowance).
        assert!((1.12304765e-6..1.1230488e-6).contains(&d), "{d}");
        // Deep in the tail the per-term error allowance dominates (the bound is loose but
        // still an upper bound): true values 1.487e-87 and 5.37e-87 (mpmath, 4 digits).
        for (e, truth) in [(51.128578148327406, 1.487e-87), (51.12857814832739, 5.37e-87)] {
            let d = discrete_gaussian_delta(e, 0.383, 1).unwrap();
            assert!((truth * (1.0 - 1e-3)..1e-84).contains(&d), "{e}: {d}");
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(discrete_gaussian_delta(-1.0, 1.0, 1).is_err());
        assert!(discrete_gaussian_delta(f64::NAN, 1.0, 1).is_err());
        assert!(discrete_gaussian_delta(1.0, 0.0, 1).is_err());
        assert!(discrete_gaussian_delta(1.0, 1.0, 0).is_err());
        assert!(discrete_gaussian_delta(1.0, 1e9, 1).is_err());
        assert!(discrete_gaussian_sigma(1.0, 1e-5, 1 << 30).is_err());
    }

    #[test]
    fn an_oversized_sum_names_the_parameter_that_is_too_large() {
        // Issue 28: Δ = 2^30 with σ = 1 (2^29 terms before the peak) was reported as a
        // problem with σ. Δ/2 alone passes 2^24 at Δ = 2^25; σ alone at 40σ + 40 = 2^24.
        let name = |r: Result<f64>| match r {
            Err(Error::OutOfRange { name, value, .. }) => (name.split(' ').next().unwrap(), value),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            name(discrete_gaussian_delta(1.0, 1.0, 1 << 30)),
            ("sensitivity", 2f64.powi(30))
        );
        assert_eq!(
            name(discrete_gaussian_delta(0.0, 1.0, 1 << 25)),
            ("sensitivity", 2f64.powi(25))
        );
        assert_eq!(name(discrete_gaussian_delta(1.0, 1e9, 1)), ("sigma", 1e9));
        assert_eq!(name(discrete_gaussian_delta(1.0, 1e9, 1 << 30)), ("sigma", 1e9));
        // A large Δ inside the limit (2^19 + 81 terms) is evaluated.
        assert!(discrete_gaussian_delta(0.0, 1.0, 1 << 20).is_ok());
        assert_eq!(
            name(discrete_gaussian_sigma(1.0, 1e-5, 1 << 30)),
            ("sensitivity", 2f64.powi(30))
        );
        assert!(discrete_gaussian_sigma(0.0, 1e-5, 1).is_err());
        assert!(discrete_gaussian_sigma(1.0, 0.0, 1).is_err());
        assert!(discrete_gaussian_sigma(1.0, 1.0, 1).is_err());
        assert!(discrete_gaussian_epsilon(1.0, f64::NAN, 1).is_err());
    }
}
