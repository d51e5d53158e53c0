//! Truncated Laplace noise `TLap(Δ, ε, δ)`: density `∝ exp(-ε|z|/Δ)` on `[-B, B]`.
//!
//! **Guarantee.** (`docs/PAPERS.md` §1.3, paper Definition 3.4, Fact 3.5, Lemma 3.6.)
//! With `t = ln(1 + (e^ε − 1)/(2δ))`, the bound is `B = Δ t / ε` and the variance
//! `(2Δ²/ε²)(1 − δ(t² + 2t)/(e^ε − 1))`. If `f` has sensitivity `Δ`, `f(X) + TLap(Δ, ε, δ)`
//! is `(ε, δ)`-DP for `0 < δ ≤ 1/2` (the condition that makes `B ≥ Δ`); the neighbour
//! relation is whatever `Δ` was computed for. `δ = 0` is the ordinary `Lap(Δ/ε)`.
//! `δ > 1/2` is rejected: the distribution exists but the guarantee does not hold.
//!
//! **Rounding.** The bound is rounded *up*: `B ≥ Δt/ε` exactly, so the edge strip of width
//! `Δ` holds at most `δ` (`δ(B) = (e^ε − 1)/(2(e^{εB/Δ} − 1))` decreases in `B`). The two
//! forms of `t` below lose at most `13·2⁻⁵³` relative (`ε ≤ 1`: `expm1` and `log1p` within
//! an ulp, a division, and `log1p`'s condition number ≤ 1; `ε > 1`: three non-negative-sum
//! terms and `ln(1 + y) ∈ (−0.46, 0]` against `t ≥ 0.54`, a cancellation factor ≤ 2.7),
//! so `t` is moved up by 16 ulps and `B = Δ/ε · t` by one more (measured against 60-digit
//! mpmath: never below, at most 4.5e-15 relative above; `tests/samplers/continuous.rs`).
//! `m = 1 − e^{−t}` is rounded up too, so the sampler's own truncation point
//! `−(Δ/ε)·ln(1 − m)` is not below the exact one either (in exact arithmetic on the stored
//! parameters: the rounding of `Δ/ε` and of each draw is the floating-point caveat below).
//!
//! Sampling is the exact inverse CDF of `docs/PAPERS.md` §1.3: magnitude `−(Δ/ε) ln(1 − U m)` with
//! `m = 1 − e^{−t}` and an independent sign, computed in `f64` with `expm1`/`ln_1p` (node
//! budgets reach `ε ≈ 1e-7`) whatever the output type, then rounded. The magnitude is
//! clamped to `B` so rounding can never leave `[−B, B]` (this clamps noise, never data).
//! Layout: one element = 2 words (the `f64` uniform and the sign bit), for both outputs.
//! Floating-point caveat (`docs/PAPERS.md` P1-23): see `docs/RANDOMNESS.md`.

use crate::calibration::gaussian_mechanism::ulps_up;
use crate::error::{Error, Result, positive_finite};
use crate::sampling::fixed_word::FixedWordSampler;
use crate::sampling::keyed_stream::WordLayout;
use crate::sampling::noise_float::{NoiseFloat, check_finite_draws, max_neg_ln};

/// `TLap(Δ, ε, δ)`.
///
/// ```
/// use dpattn_core::sampling::{FixedWordSampler, TruncatedLaplace};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let t = TruncatedLaplace::new(1.0, 1.0, 0.01)?;
/// assert!((t.bound() - 4.464920).abs() < 1e-6); // docs/PAPERS.md T1-A
/// let z: f64 = t.sample(&mut ChaCha20Rng::from_seed([0; 32]));
/// assert!(z.abs() <= t.bound());
/// assert!(TruncatedLaplace::new(1.0, 1.0, 0.6).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruncatedLaplace {
    sensitivity: f64,
    epsilon: f64,
    delta: f64,
    /// `Δ/ε`.
    scale: f64,
    /// `t = εB/Δ`, or infinity when `δ = 0`.
    t: f64,
    /// `m = 1 − e^{−t}` (1 when `δ = 0`).
    m: f64,
    bound: f64,
}

impl TruncatedLaplace {
    /// Sensitivity `Δ ∈ (0, ∞)`, `ε ∈ (0, ∞)`, `δ ∈ [0, 1/2]`, with finite `Δ/ε`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the first bad parameter (NaN included).
    pub fn new(sensitivity: f64, epsilon: f64, delta: f64) -> Result<Self> {
        positive_finite("sensitivity", sensitivity)?;
        positive_finite("epsilon", epsilon)?;
        if !(0.0..=0.5).contains(&delta) {
            return Err(Error::OutOfRange { name: "delta", value: delta, allowed: "[0, 0.5]" });
        }
        let scale = sensitivity / epsilon;
        positive_finite("sensitivity / epsilon", scale)?;
        if delta == 0.0 {
            let inf = f64::INFINITY;
            let lap = Self { sensitivity, epsilon, delta, scale, t: inf, m: 1.0, bound: inf };
            lap.check_output::<f64>()?;
            return Ok(lap);
        }
        // t = ln(1 + (e^ε − 1)/(2δ)); for ε > 1 use the form that cannot overflow:
        // t = ε − ln(2δ) + ln(1 + (2δ − 1) e^{−ε}). Both are within 13·2⁻⁵³ relative of the
        // exact t (module docs, "Rounding"); 16 ulps up make t, and with one more ulp B,
        // never smaller than the exact values, so the released δ is never above the target.
        let t = if epsilon <= 1.0 {
            libm::log1p(libm::expm1(epsilon) / (2.0 * delta))
        } else {
            epsilon - libm::log(2.0 * delta)
                + libm::log1p((2.0 * delta - 1.0) * libm::exp(-epsilon))
        };
        let t = ulps_up(t, 16);
        let bound = (scale * t).next_up();
        positive_finite("bound B", bound)?;
        // m = 1 − e^{−t} one ulp up (expm1 is within an ulp): the inverse CDF's own
        // truncation point −(Δ/ε)·ln(1 − m) is then at least the exact Δt/ε too.
        let m = (-libm::expm1(-t)).next_up().min(1.0);
        Ok(Self { sensitivity, epsilon, delta, scale, t, m, bound })
    }

    /// The largest magnitude a draw can have before rounding to the output type: `B`, or
    /// `Δ/ε` times the largest `−ln U` (of the `f64` uniform every output uses) if `δ = 0`.
    fn largest(&self) -> f64 {
        if self.delta == 0.0 { self.scale * max_neg_ln::<f64>() } else { self.bound }
    }

    /// The bound `B` (infinite when `δ = 0`).
    pub fn bound(&self) -> f64 {
        self.bound
    }

    /// The exact variance (Fact 3.5); `2Δ²/ε²` when `δ = 0`.
    ///
    /// Fact 3.5's `(2Δ²/ε²)(1 − δ(t² + 2t)/(e^ε − 1))` is, with `e^ε − 1 = 2δ(e^t − 1)`,
    /// `(Δ/ε)²·g(t)`, `g(t) = 2 − (t² + 2t)/(e^t − 1)`; as printed it cancels
    /// catastrophically when `t` is small (`ε ≪ δ`, issue 28). It is evaluated without
    /// cancellation: for `t ≤ 2` as `B²·h(t)`, `h(t) = g(t)/t² = 2Σ_{k≥3} t^{k−3}/k! /
    /// Σ_{k≥1} t^{k−1}/k!` (two series of positive terms; `h(0) = 1/3`, the uniform
    /// distribution's), and for `t > 2` as `(Δ/ε)²·(2 − e^{−t}(t² + 2t + 2))/(1 − e^{−t})`
    /// (the subtraction loses under two bits there).
    ///
    /// ```
    /// use dpattn_core::sampling::TruncatedLaplace;
    /// // ε ≪ δ: nearly uniform on [−B, B], variance ≈ B²/3.
    /// let t = TruncatedLaplace::new(1.0, 1e-9, 0.5)?;
    /// assert!((t.variance() / (t.bound() * t.bound() / 3.0) - 1.0).abs() < 1e-8);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn variance(&self) -> f64 {
        let lap = 2.0 * self.scale * self.scale;
        if self.delta == 0.0 {
            return lap;
        }
        let t = self.t;
        if t <= 2.0 {
            return self.bound * self.bound * unit_variance_over_t2(t);
        }
        // e^{−t}(t² + 2t + 2) < 1e−320 beyond t = 750 (and t² could overflow).
        let tail = if t > 750.0 { 0.0 } else { libm::exp(-t) * (t * t + 2.0 * t + 2.0) };
        self.scale * self.scale * (2.0 - tail) / -libm::expm1(-t)
    }

    /// `(Δ, ε, δ)`.
    pub fn params(&self) -> (f64, f64, f64) {
        (self.sensitivity, self.epsilon, self.delta)
    }

    /// The CDF `P(Z ≤ z)` (for goodness-of-fit tests and audits).
    pub fn cdf(&self, z: f64) -> f64 {
        if z < 0.0 { self.upper_tail(-z) } else { 1.0 - self.upper_tail(z) }
    }

    /// `P(Z ≥ a)`, accurate in the far tail: for `0 ≤ a ≤ B` it is
    /// `e^{−t} (e^{t − a ε/Δ} − 1) / (2m)`, computed with `expm1`.
    pub fn upper_tail(&self, a: f64) -> f64 {
        if a <= 0.0 {
            return if a == 0.0 { 0.5 } else { 1.0 - self.upper_tail(-a) };
        }
        if a >= self.bound {
            return 0.0;
        }
        if self.delta == 0.0 {
            return 0.5 * libm::exp(-a / self.scale);
        }
        0.5 * libm::exp(-self.t) * libm::expm1(self.t - a / self.scale) / self.m
    }

    #[inline]
    fn magnitude(&self, u: f64) -> f64 {
        if self.delta == 0.0 {
            // Lap(Δ/ε): −ln U is finite on U ∈ (0, 1] (ln(1 − U) would be −∞ at U = 1).
            return self.scale * -libm::log(u);
        }
        let mag = -self.scale * libm::log1p(-u * self.m);
        mag.min(self.bound)
    }
}

/// `h(t) = 2Σ_{k≥3} t^{k−3}/k! / Σ_{k≥1} t^{k−1}/k!` for `0 ≤ t ≤ 2`: the variance of the
/// density `∝ e^{−x}` on `[−t, t]`, divided by `t²`. Term `j` of the denominator is
/// `t^j/(j+1)!` and of the numerator that divided by `(j+2)(j+3)`.
fn unit_variance_over_t2(t: f64) -> f64 {
    let (mut term, mut num, mut den) = (1.0f64, 0.0f64, 0.0f64);
    for j in 0..64u32 {
        let jf = f64::from(j);
        num += term / ((jf + 2.0) * (jf + 3.0));
        den += term;
        term *= t / (jf + 2.0);
        if term < den * 1e-18 {
            break;
        }
    }
    2.0 * num / den
}

impl FixedWordSampler for TruncatedLaplace {
    fn layout<T: NoiseFloat>(&self) -> WordLayout {
        WordLayout { words: f64::UNIFORM_WORDS, elements: 1 }
    }

    fn check_output<T: NoiseFloat>(&self) -> Result<()> {
        let name = "sensitivity / epsilon (the largest truncated-Laplace draw must be finite)";
        check_finite_draws::<T>(name, self.scale, self.largest())
    }

    #[inline]
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2] {
        let mag = self.magnitude(f64::open_uniform(words));
        let signed = if f64::sign_bit(words) { -mag } else { mag };
        // Rounding to the output type must not leave [−B, B] (f32 rounds to nearest).
        let mut x = T::from_f64(signed);
        if x.to_f64().abs() > self.bound {
            x = T::from_f64_toward_zero(signed);
        }
        [x, x]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    #[test]
    fn reference_values_of_table_t1_a() {
        // (Δ, ε, δ, B, Var) from docs/PAPERS.md T1-A, to relative 1e-6.
        let table = [
            (1.0, 1.0, 0.01, 4.464920, 1.664021),
            (2.0, 0.5, 1e-6, 50.758457, 31.990805),
            (1.0, 1e-3, 1e-3, 405.631816, 49374.03),
        ];
        for (d, e, dl, b, v) in table {
            let t = TruncatedLaplace::new(d, e, dl).unwrap();
            assert!(rel(t.bound(), b) < 1e-6, "B({d},{e},{dl}) = {}", t.bound());
            assert!(rel(t.variance(), v) < 1e-6, "Var({d},{e},{dl}) = {}", t.variance());
        }
    }

    #[test]
    fn both_branches_of_t_agree_near_epsilon_one() {
        for delta in [1e-9, 1e-3, 0.25, 0.5] {
            let lo = TruncatedLaplace::new(1.0, 1.0, delta).unwrap();
            let hi = TruncatedLaplace::new(1.0, 1.0 + 1e-12, delta).unwrap();
            assert!(rel(lo.bound(), hi.bound()) < 1e-11);
        }
        // Large ε stays finite where e^ε overflows.
        let t = TruncatedLaplace::new(1.0, 800.0, 1e-5).unwrap();
        assert!(rel(t.bound(), (800.0 - (2e-5f64).ln()) / 800.0) < 5e-15); // rounded up
    }

    #[test]
    fn edge_strip_of_width_delta_holds_mass_delta() {
        // P1-AC1: P(Z ∈ [B − Δ, B]) = δ, analytically, to relative 1e-12.
        // At ε = 1e-7 the argument B − Δ itself carries a relative error of ~ulp(B)/(Δ/ε·ε)
        // ≈ 1e-9 in the exponent, hence the looser tolerance there.
        for (d, e, dl, tol) in [
            (1.0, 1.0, 0.01, 1e-12),
            (2.0, 0.5, 1e-6, 1e-12),
            (3.0, 0.1, 1e-9, 1e-12),
            (3.0, 1e-7, 1e-9, 1e-8),
        ] {
            let t = TruncatedLaplace::new(d, e, dl).unwrap();
            let strip = t.upper_tail(t.bound() - d);
            assert!(rel(strip, dl) < tol, "strip {strip} vs {dl}");
            assert_eq!((t.cdf(t.bound()), t.cdf(-t.bound()), t.cdf(0.0)), (1.0, 0.0, 0.5));
        }
    }

    #[test]
    fn delta_zero_is_laplace_and_small_delta_tends_to_it() {
        let t = TruncatedLaplace::new(2.0, 0.5, 0.0).unwrap();
        assert_eq!((t.bound(), t.variance()), (f64::INFINITY, 32.0));
        let t = TruncatedLaplace::new(2.0, 0.5, 1e-300).unwrap();
        assert!(rel(t.variance(), 32.0) < 1e-12);
    }

    /// `Var = B²·∫₀¹ y² e^{−ty} dy / ∫₀¹ e^{−ty} dy` (the density `∝ e^{−|z|/λ}` on `[−B, B]`
    /// with `z = By`, `t = B/λ`) by composite Simpson quadrature with `k` panels: an
    /// evaluation independent of the series and of Fact 3.5.
    fn variance_by_quadrature(bound: f64, t: f64, k: u32) -> f64 {
        let h = 1.0 / f64::from(2 * k);
        let (mut num, mut den) = (0.0, 0.0);
        for i in 0..=2 * k {
            let y = f64::from(i) * h;
            let c = if i == 0 || i == 2 * k {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            let w = c * libm::exp(-t * y);
            num += w * y * y;
            den += w;
        }
        bound * bound * num / den
    }

    #[test]
    fn variance_is_stable_where_fact_3_5_cancels() {
        // Issue 28: (2Δ²/ε²)(1 − δ(t² + 2t)/(e^ε − 1)) returned 0, garbage or negative values
        // for ε ≪ δ. Every (Δ, ε, δ) below, from t ≈ 2e−12 to t ≈ 27, against quadrature.
        let mut checked = 0;
        for sens in [1.0, 3.0] {
            for eps in [1e-12, 1e-9, 1e-7, 1e-5, 1e-3, 0.1, 1.0, 5.0] {
                for delta in [1e-12, 1e-9, 1e-6, 1e-3, 0.1, 0.25, 0.5] {
                    let tl = TruncatedLaplace::new(sens, eps, delta).unwrap();
                    let (b, t) = (tl.bound(), tl.t);
                    let want = variance_by_quadrature(b, t, 20_000);
                    let got = tl.variance();
                    assert!(got.is_finite() && got > 0.0, "({sens}, {eps}, {delta}): {got}");
                    assert!(
                        rel(got, want) < 1e-9,
                        "({sens}, {eps}, {delta}) t = {t}: {got} vs {want}"
                    );
                    // Never above the untruncated Laplace nor the uniform on [−B, B].
                    assert!(
                        got <= 2.0 * (sens / eps) * (sens / eps)
                            && got <= b * b / 3.0 * (1.0 + 1e-12)
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 112);
        // The worst cases of the issue: t = ε/(2δ) + … ≈ 1e−9 (Fact 3.5 gave exactly 0).
        let tl = TruncatedLaplace::new(1.0, 1e-9, 0.5).unwrap();
        assert!(rel(tl.variance(), tl.bound() * tl.bound() / 3.0) < 1e-8);
    }

    #[test]
    fn uniform_one_gives_the_bound() {
        // U = 1 gives Δt/ε with the rounded-up t; B is that rounded up once more.
        let t = TruncatedLaplace::new(1.0, 1.0, 0.01).unwrap();
        let top = t.magnitude(1.0);
        assert!(top <= t.bound() && top >= t.bound() * (1.0 - 1e-14), "{top} vs {}", t.bound());
        let z: f64 = t.group::<f64>(&[u32::MAX, u32::MAX])[0];
        assert_eq!(z, -top);
    }

    #[test]
    fn delta_zero_never_returns_infinity() {
        // Review finding: U = 1 made ln(1 − U) = −∞.
        let t = TruncatedLaplace::new(1.0, 1.0, 0.0).unwrap();
        let z: f64 = t.group::<f64>(&[u32::MAX, u32::MAX])[0];
        assert_eq!(z, -0.0);
        let z: f64 = t.group::<f64>(&[0, 0])[0];
        assert_eq!(z, 53.0 * core::f64::consts::LN_2);
    }

    #[test]
    fn f32_outputs_stay_inside_the_bound() {
        // Review finding: B = 1.8036262791699924 rounds up to an f32 above B.
        let t = TruncatedLaplace::new(1.0, 0.7, 0.2).unwrap();
        let z: f32 = t.group::<f32>(&[u32::MAX, u32::MAX])[0];
        assert!(f64::from(z).abs() <= t.bound());
        assert!(f64::from(z.abs().next_up()) > t.bound());
    }

    #[test]
    fn bad_parameters_are_errors() {
        for (d, e, dl) in [
            (0.0, 1.0, 0.1),
            (1.0, 0.0, 0.1),
            (1.0, -1.0, 0.1),
            (1.0, 1.0, -0.1),
            (1.0, 1.0, 0.51),
            (1.0, 1.0, 1.0),
            (f64::NAN, 1.0, 0.1),
            (1.0, f64::NAN, 0.1),
            (1.0, 1.0, f64::NAN),
            (1.0, f64::INFINITY, 0.1),
            (1e300, 1e-300, 0.1),
        ] {
            assert!(
                matches!(TruncatedLaplace::new(d, e, dl), Err(Error::OutOfRange { .. })),
                "{d} {e} {dl}"
            );
        }
    }
}
