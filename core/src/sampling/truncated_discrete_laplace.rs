//! The truncated discrete Laplace distribution on `{−B, …, B}`, sampled exactly, and its
//! `(ε, δ)` calibration: the exact counterpart of [`TruncatedLaplace`](super::TruncatedLaplace)
//! for integer-valued data.
//!
//! **Guarantee.** [`TruncatedDiscreteLaplace`] returns `z ∈ {−B, …, B}` with probability
//! exactly `e^{−|z|/b} / N`, `N = Σ_{|j| ≤ B} e^{−|j|/b}`, given fair bits: it draws
//! [`DiscreteLaplace`] samples (scale `b = t/s`) from the same bits until one has
//! `|z| ≤ B` (rejection keeps the law exactly, conditioned on the accepted set).
//!
//! **Privacy (proof).** Let `f` be integer-valued with `|f(x) − f(x′)| ≤ D` (`D` a positive
//! integer) and release `f(x) + z`. Write `μ = f(x′) − f(x)`, `|μ| ≤ D`. For an output `y`
//! in both supports, `P_x(y)/P_{x′}(y) = e^{(|y − f(x′)| − |y − f(x)|)/b} ≤ e^{|μ|/b} ≤ e^{D/b}`,
//! which is `≤ e^ε` when `b ≥ D/ε`. The outputs `x` can produce and `x′` cannot are the at
//! most `D` points of one end of `x`'s support, with mass at most
//!
//! `δ(B) = Σ_{j=B−D+1}^{B} e^{−j/b} / N = q^{B−D+1}(1 − q^D) / (1 + q − 2q^{B+1})`, `q = e^{−1/b}`
//!
//! (the geometric sums in closed form), so for every set `S`,
//! `P_x(S) ≤ e^ε P_{x′}(S) + δ(B)`: the mechanism is `(ε, δ)`-DP once `δ(B) ≤ δ`.
//! [`TruncatedDiscreteLaplace::calibrated`] takes `b` as the discrete Laplace's rational
//! scale rounded up from `D/ε`, and the smallest `B ≥ D` whose `δ(B)`, evaluated in interval
//! arithmetic (every factor rounded in the direction that raises it), is at most `δ`.
//!
//! Like every rejection sampler it takes time that depends on the noise (JMRO22); the
//! expected number of discrete Laplace draws is `1/P(|z| ≤ B) ≈ 1 + δ`.

use crate::directed_rounding::{add_down, div_up, mul_down, mul_up};
use crate::error::{Error, Result, open_unit, positive_finite};
use crate::sampling::bit_source::BitSource;
use crate::sampling::discrete_laplace::DiscreteLaplace;
use crate::sampling::exact_sampler::{BitBuf, ExactSampler};

/// `z ~ DLap(b)` conditioned on `|z| ≤ B`.
///
/// ```
/// use dpattn_core::sampling::{ExactSampler, KeyedStream, NoiseKey, TruncatedDiscreteLaplace};
/// // Integer sensitivity 3, ε = 0.5, δ = 1e-6: scale 6, bound 3 − 1 + ⌈6 ln((1 − q³)/(δ(1 + q)))⌉.
/// let t = TruncatedDiscreteLaplace::calibrated(3, 0.5, 1e-6)?;
/// assert_eq!(t.scale().scale(), (6, 1));
/// assert!(t.delta_for(3) <= 1e-6 && t.bound() >= 3);
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut z = [0i64; 1000];
/// t.fill_keyed(&s, 0, &mut z)?;
/// assert!(z.iter().all(|&z| z.unsigned_abs() <= t.bound()));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruncatedDiscreteLaplace {
    lap: DiscreteLaplace,
    bound: u64,
}

impl TruncatedDiscreteLaplace {
    /// `DLap(lap)` truncated to `{−bound, …, bound}`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `bound > 2^62`.
    pub fn new(lap: DiscreteLaplace, bound: u64) -> Result<Self> {
        if bound > 1 << 62 {
            return Err(Error::OutOfRange {
                name: "truncation bound",
                value: bound as f64,
                allowed: "[0, 2^62]",
            });
        }
        Ok(Self { lap, bound })
    }

    /// The `(ε, δ)`-DP truncated discrete Laplace for integer sensitivity `D` (module
    /// docs): scale `D/ε` rounded up to a dyadic rational, and the smallest bound `B ≥ D`
    /// whose computed `δ(B)` is at most `δ`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `D = 0`, `ε` is not positive and finite, `δ ∉ (0, 1)`, or
    /// the scale `D/ε` exceeds `2^56`.
    pub fn calibrated(sensitivity: u64, epsilon: f64, delta: f64) -> Result<Self> {
        if sensitivity == 0 {
            return Err(Error::OutOfRange {
                name: "integer sensitivity",
                value: 0.0,
                allowed: ">= 1",
            });
        }
        positive_finite("epsilon", epsilon)?;
        open_unit("delta", delta)?;
        let lap = DiscreteLaplace::from_f64(div_up(sensitivity as f64, epsilon))?;
        let rate = Rate::of(&lap);
        let too_large = Error::OutOfRange {
            name: "truncation bound (scale too large for delta)",
            value: f64::INFINITY,
            allowed: "[0, 2^62]",
        };
        // δ(B) ≈ q^{B−D+1}(1 − q^D)/(1 + q) (with 1 − q^D = −expm1(−D/b), accurate for tiny
        // ε): a guess, then a doubling search for a valid bound and a bisection for the
        // smallest one (δ(B) decreases in B).
        let d = sensitivity as f64;
        let width = -libm::expm1(-d * rate.lo);
        let guess = d - 1.0 + libm::log(width / (2.0 * delta)) / rate.hi;
        let start =
            if guess.is_finite() && guess > d { (guess as u64).min(1 << 62) } else { sensitivity };
        let (mut lo, mut hi) = (sensitivity.max(start / 2), start.max(sensitivity));
        if lo > sensitivity && rate.delta_up(sensitivity, lo) <= delta {
            lo = sensitivity; // the guess was far too high: search from D
        }
        let mut step = hi.max(1);
        while rate.delta_up(sensitivity, hi) > delta {
            lo = hi;
            hi = hi.checked_add(step).filter(|&b| b <= 1 << 62).ok_or(too_large)?;
            step = step.saturating_mul(2);
        }
        // Invariant: δ(hi) ≤ δ; δ(B) > δ for every B < lo (or lo = D).
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if rate.delta_up(sensitivity, mid) <= delta {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let b = hi;
        Self::new(lap, b)
    }

    /// The untruncated discrete Laplace.
    pub fn scale(&self) -> DiscreteLaplace {
        self.lap
    }

    /// `B`: every sample lies in `{−B, …, B}`.
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// An upper bound on `δ(B)` for integer sensitivity `D` (module docs); `1` when
    /// `B < D`.
    ///
    /// ```
    /// # use dpattn_core::sampling::{DiscreteLaplace, TruncatedDiscreteLaplace};
    /// let t = TruncatedDiscreteLaplace::new(DiscreteLaplace::integer(1)?, 10)?;
    /// // q = 1/e, D = 1: q^10 (1 − q) / (1 + q − 2 q^11).
    /// let q = (-1f64).exp();
    /// let exact = q.powi(10) * (1.0 - q) / (1.0 + q - 2.0 * q.powi(11));
    /// let d = t.delta_for(1);
    /// assert!(d >= exact && d < exact * (1.0 + 1e-12));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn delta_for(&self, sensitivity: u64) -> f64 {
        Rate::of(&self.lap).delta_up(sensitivity, self.bound)
    }

    /// The variance `2 Σ_{j=1}^{B} j² q^j / N`, in `f64` (closed forms, no cancellation
    /// while `q^B` is small against 1, which every calibrated bound ensures).
    ///
    /// ```
    /// # use dpattn_core::sampling::{DiscreteLaplace, TruncatedDiscreteLaplace};
    /// let t = TruncatedDiscreteLaplace::new(DiscreteLaplace::integer(2)?, 3)?;
    /// let q = (-0.5f64).exp();
    /// let n = 1.0 + 2.0 * (q + q * q + q * q * q);
    /// let v = 2.0 * (q + 4.0 * q * q + 9.0 * q * q * q) / n;
    /// assert!((t.variance() - v).abs() < 1e-13 * v);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn variance(&self) -> f64 {
        let lambda = 1.0 / self.lap.scale_f64();
        let q = libm::exp(-lambda);
        let one_minus_q = -libm::expm1(-lambda);
        let b = self.bound as f64;
        let qb = libm::exp(-lambda * b);
        // Σ_{j≥1} j² q^j = q(1+q)/(1−q)³; the part beyond B is q^B·[B²q/(1−q) + 2Bq/(1−q)²
        // + q(1+q)/(1−q)³]; N = (1 + q − 2q^{B+1})/(1 − q).
        let c3 = one_minus_q * one_minus_q * one_minus_q;
        let all = q * (1.0 + q) / c3;
        let beyond =
            qb * (b * b * q / one_minus_q + 2.0 * b * q / (one_minus_q * one_minus_q) + all);
        let n = (1.0 + q - 2.0 * q * qb) / one_minus_q;
        2.0 * (all - beyond) / n
    }
}

impl ExactSampler for TruncatedDiscreteLaplace {
    type Output = i64;

    /// Discrete Laplace draws from the same bits until `|z| ≤ B`.
    ///
    /// # Errors
    /// As [`DiscreteLaplace`]'s sampler.
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<i64> {
        let mut buf = BitBuf::new(bits);
        loop {
            let z = self.lap.draw(&mut buf)?;
            if z.unsigned_abs() <= self.bound {
                return Ok(z);
            }
        }
    }
}

/// `1/b = s/t` bracketed in `f64`.
struct Rate {
    lo: f64,
    hi: f64,
}

impl Rate {
    fn of(lap: &DiscreteLaplace) -> Self {
        let (t, s) = lap.scale();
        // s/t with both below 2^64: the f64 quotient of the rounded operands is within a
        // few ulps; widen by 4 ulps each way.
        let r = s as f64 / t as f64;
        let lo = r * (1.0 - 4.0 * f64::EPSILON);
        let hi = r * (1.0 + 4.0 * f64::EPSILON);
        Self { lo, hi }
    }

    /// An upper bound on `q^{B−D+1}(1 − q^D) / (1 + q − 2q^{B+1})`; `1` when `B < D`.
    fn delta_up(&self, d: u64, b: u64) -> f64 {
        if b < d {
            return 1.0;
        }
        let pad_up = |x: f64| x * (1.0 + 4.0 * f64::EPSILON);
        let pad_down = |x: f64| x * (1.0 - 4.0 * f64::EPSILON);
        // Numerator: q ≤ e^{−lo}, 1 − q^D ≤ 1 − e^{−D·hi}.
        let head = pad_up(libm::exp(-mul_down((b - d + 1) as f64, self.lo)));
        let width = pad_up(-libm::expm1(-mul_up(d as f64, self.hi)));
        // Denominator: 1 + q ≥ 1 + e^{−hi}, q^{B+1} ≤ e^{−(B+1)·lo}.
        let q_lo = pad_down(libm::exp(-self.hi));
        let q_tail = pad_up(libm::exp(-mul_down((b as f64) + 1.0, self.lo)));
        let den = add_down(add_down(1.0, q_lo), -mul_up(2.0, q_tail));
        if den <= 0.0 {
            return 1.0;
        }
        div_up(mul_up(head, width), den).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{KeyedStream, NoiseKey};

    /// `δ(B)` summed term by term in `f64` (independent of the closed form).
    fn delta_by_sum(b: f64, d: u64, bound: u64) -> f64 {
        let q = libm::exp(-1.0 / b);
        let mut n = 1.0;
        for j in 1..=bound {
            n += 2.0 * libm::pow(q, j as f64);
        }
        let mut tail = 0.0;
        for j in bound + 1 - d..=bound {
            tail += libm::pow(q, j as f64);
        }
        tail / n
    }

    #[test]
    fn calibration_is_the_smallest_valid_bound() {
        for (d, eps, delta) in [(1, 1.0, 1e-5), (3, 0.5, 1e-6), (7, 0.1, 1e-9), (2, 4.0, 0.01)] {
            let t = TruncatedDiscreteLaplace::calibrated(d, eps, delta).unwrap();
            let b = t.scale().scale_f64();
            assert!(b >= d as f64 / eps);
            let bound = t.bound();
            let at = delta_by_sum(b, d, bound);
            assert!(at <= delta, "{d} {eps} {delta}: {at}");
            assert!(delta_by_sum(b, d, bound - 1) > delta * (1.0 - 1e-9), "not minimal");
            assert!(t.delta_for(d) >= at * (1.0 - 1e-12));
        }
    }

    #[test]
    fn tiny_epsilon_calibrates_quickly_to_the_smallest_bound() {
        // Review finding: the bound used to be stepped up one at a time from a guess that
        // cancelled for tiny ε (ε = 2e-10 took seconds). The bisection lands on the
        // smallest B whose bound δ(B) ≤ δ.
        for (d, eps, delta) in [(1, 2e-10, 5e-16), (5, 1e-6, 1e-12), (3, 30.0, 1e-3)] {
            let t = TruncatedDiscreteLaplace::calibrated(d, eps, delta).unwrap();
            let b = t.bound();
            assert!(t.delta_for(d) <= delta);
            let below = TruncatedDiscreteLaplace::new(t.scale(), b - 1).unwrap();
            assert!(b == d || below.delta_for(d) > delta, "{d} {eps} {delta}: not minimal");
        }
    }

    #[test]
    fn samples_stay_inside_and_follow_the_law() {
        let t = TruncatedDiscreteLaplace::new(DiscreteLaplace::integer(3).unwrap(), 4).unwrap();
        let s = KeyedStream::new(&NoiseKey::for_replay([9; 32]), 1);
        let n = 200_000;
        let mut counts = [0u64; 9];
        for i in 0..n {
            let z = t.sample_at(&s, i).unwrap();
            assert!(z.unsigned_abs() <= 4);
            counts[(z + 4) as usize] += 1;
        }
        let q = libm::exp(-1.0 / 3.0);
        let norm: f64 = (-4..=4).map(|j: i32| libm::pow(q, f64::from(j.abs()))).sum();
        let mut chi2 = 0.0;
        for (k, &c) in counts.iter().enumerate() {
            let e = n as f64 * libm::pow(q, f64::from((k as i32 - 4).abs())) / norm;
            chi2 += (c as f64 - e) * (c as f64 - e) / e;
        }
        // 8 degrees of freedom: P(χ² > 45) < 1e-6.
        assert!(chi2 < 45.0, "χ² = {chi2}");
        let var = t.variance();
        let emp: f64 = counts
            .iter()
            .enumerate()
            .map(|(k, &c)| c as f64 * ((k as f64 - 4.0) * (k as f64 - 4.0)))
            .sum::<f64>()
            / n as f64;
        assert!((emp / var - 1.0).abs() < 0.02, "{emp} vs {var}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(TruncatedDiscreteLaplace::calibrated(0, 1.0, 1e-5).is_err());
        assert!(TruncatedDiscreteLaplace::calibrated(1, 0.0, 1e-5).is_err());
        assert!(TruncatedDiscreteLaplace::calibrated(1, 1.0, 0.0).is_err());
        assert!(TruncatedDiscreteLaplace::calibrated(1, 1.0, 1.0).is_err());
        let lap = DiscreteLaplace::integer(1).unwrap();
        assert!(TruncatedDiscreteLaplace::new(lap, (1 << 62) + 1).is_err());
        assert_eq!(TruncatedDiscreteLaplace::new(lap, 0).unwrap().delta_for(1), 1.0);
    }
}
