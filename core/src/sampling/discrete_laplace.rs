//! The discrete Laplace distribution on the integers, sampled exactly.
//!
//! **Guarantee.** [`DiscreteLaplace`] with rational scale `b = t/s` (positive `u64`s)
//! returns `x ∈ ℤ` with probability exactly `tanh(s/2t) · e^{−|x| s/t}`, given fair bits.
//! If an integer-valued `f` has L1 sensitivity `Δ`, `f(X) + DLap(Δ/ε)` is `ε`-DP.
//!
//! Algorithm: Canonne, Kamath and Steinke 2020 (CKS20), Algorithm 2, in fixed-width
//! integers (as OpenDP does, `docs/PAPERS.md` A.2.1):
//!
//! ```text
//! repeat
//!     U ← uniform {0, …, t−1}           (Lemire's method; see below)
//!     D ← Bernoulli(exp(−U/t))           (exact, CKS20 Alg. 1); if D = 0: restart
//!     V ← 0; while Bernoulli(e^−1): V ← V + 1
//!     X ← U + t·V;  Y ← ⌊X/s⌋
//!     B ← one fair bit;  if B = 1 and Y = 0: restart
//!     return (1 − 2B)·Y
//! ```
//!
//! `U` is drawn exactly by Lemire's multiply-and-reject method ("Fast random integer
//! generation in an interval", 2019): `w` is the next `L = min(⌈log₂ t⌉ + 8, 64)` bits (the
//! first read most significant), `U = ⌊w·t/2^L⌋`, and `w` is redrawn when
//! `w·t mod 2^L < 2^L mod t` (probability below `2^−8` while `⌈log₂ t⌉ ≤ 56`; up to about
//! `1/2` for `t` near `2^63`, where `L` is capped at 64), which leaves every value exactly
//! `⌊2^L/t⌋` preimages. `t = 1` reads no bits.
//!
//! Everything is exact: `X` is geometric with `P(X = x) ∝ e^{−x/t}`, so `Y` is geometric
//! with ratio `e^{−s/t}`, and the sign with the rejected "−0" gives the two-sided law.
//! `X` is formed in `u128` (it cannot overflow there), so `t` and `s` may be any `u64`s
//! with a scale `t/s ≤ 2^56`; the bound makes `|Y| > i64::MAX`, reported as
//! [`Error::SizeOverflow`] rather than wrapped, an event of probability below
//! `e^{−2^{63}/2^{56}} = e^{−128}`. No floating point is involved except in
//! [`from_f64`](DiscreteLaplace::from_f64) (which converts its argument exactly, or rounds
//! the scale up) and the reporting helpers ([`variance`](DiscreteLaplace::variance)).
//!
//! Run time is random (expected `O(1)` iterations, each a few dozen bits); like every
//! rejection sampler it leaks the noise magnitude through timing (JMRO22; `docs/PAPERS.md` A.2.5).

use crate::error::{Error, Result};
use crate::sampling::bit_source::BitSource;
use crate::sampling::exact_bernoulli::{bernoulli_exp_minus_one, bernoulli_exp_u64};
use crate::sampling::exact_sampler::{BitBuf, ExactSampler};

/// The discrete Laplace distribution `P(x) ∝ exp(−|x| · s/t)` on `ℤ`, with scale `t/s`.
///
/// ```
/// use dpattn_core::sampling::{DiscreteLaplace, ExactSampler};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let lap = DiscreteLaplace::new(5, 2)?; // scale 2.5
/// let mut rng = ChaCha20Rng::from_seed([1; 32]);
/// let mut noise = [0i64; 2000];
/// lap.fill(&mut rng, &mut noise)?;
/// let var = noise.iter().map(|&x| (x * x) as f64).sum::<f64>() / 2000.0;
/// assert!((var / lap.variance() - 1.0).abs() < 0.2);
/// assert!(DiscreteLaplace::new(0, 1).is_err() && DiscreteLaplace::new(1, 0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscreteLaplace {
    t: u64,
    s: u64,
    /// Bits per uniform candidate: `min(⌈log₂ t⌉ + 8, 64)`, or 0 when `t = 1`.
    ubits: u32,
    /// Lemire's rejection threshold `2^ubits mod t`.
    thresh: u64,
    /// `log₂ s` when `s` is a power of two.
    s_shift: Option<u32>,
}

const OVERFLOW: Error = Error::SizeOverflow { what: "discrete Laplace sample (exceeds i64)" };

impl DiscreteLaplace {
    /// Scale `t/s` with `t, s ≥ 1` and `t/s ≤ 2^56` (the fraction need not be reduced, but
    /// a reduced one reads fewer bits).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `t` or `s` is zero or `t/s > 2^56`.
    pub fn new(t: u64, s: u64) -> Result<Self> {
        if t == 0 {
            return Err(Error::OutOfRange {
                name: "scale numerator t",
                value: 0.0,
                allowed: "[1, 2^64)",
            });
        }
        if s == 0 {
            return Err(Error::OutOfRange {
                name: "scale denominator s",
                value: 0.0,
                allowed: "[1, 2^64)",
            });
        }
        if u128::from(t) > u128::from(s) << 56 {
            return Err(Error::OutOfRange {
                name: "scale t/s",
                value: ratio_f64(t, s),
                allowed: "(0, 2^56]",
            });
        }
        let ubits = if t == 1 { 0 } else { (u64::BITS - (t - 1).leading_zeros() + 8).min(64) };
        let thresh = ((1u128 << ubits) % u128::from(t)) as u64;
        let s_shift = s.is_power_of_two().then(|| s.trailing_zeros());
        Ok(Self { t, s, ubits, thresh, s_shift })
    }

    /// Integer scale `t` (`s = 1`), the form the discrete Gaussian uses.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteLaplace;
    /// assert_eq!(DiscreteLaplace::integer(3)?.scale(), (3, 1));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `t = 0`.
    pub fn integer(t: u64) -> Result<Self> {
        Self::new(t, 1)
    }

    /// The scale of an `f64`, as the dyadic rational `t/2^j` it is when its binary exponent
    /// allows `j ≤ 63` (every scale `≥ 2^−11`), otherwise rounded *up* to the next
    /// multiple of `2^−63` (a larger scale is the privacy-safe direction).
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteLaplace;
    /// assert_eq!(DiscreteLaplace::from_f64(2.5)?.scale(), (5, 2));
    /// assert_eq!(DiscreteLaplace::from_f64(0.1)?.scale_f64(), 0.1);
    /// assert!(DiscreteLaplace::from_f64(1e-30)?.scale_f64() >= 1e-30);
    /// assert!(DiscreteLaplace::from_f64(-1.0).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `scale ∈ (0, 2^56]`.
    pub fn from_f64(scale: f64) -> Result<Self> {
        let (t, s) = dyadic_round_up(scale, "scale", 63)?;
        Self::new(t, s)
    }

    /// `(t, s)`: the scale is `t/s`.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteLaplace;
    /// assert_eq!(DiscreteLaplace::new(6, 4)?.scale(), (6, 4));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn scale(&self) -> (u64, u64) {
        (self.t, self.s)
    }

    /// The scale `t/s` in `f64` (rounded to nearest).
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteLaplace;
    /// assert_eq!(DiscreteLaplace::new(6, 4)?.scale_f64(), 1.5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn scale_f64(&self) -> f64 {
        ratio_f64(self.t, self.s)
    }

    /// The variance `2e^{−λ}/(1 − e^{−λ})²` with `λ = s/t`, in `f64`.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteLaplace;
    /// let v = DiscreteLaplace::new(1, 1)?.variance();
    /// assert!((v - 2.0 * (-1f64).exp() / (1.0 - (-1f64).exp()).powi(2)).abs() < 1e-12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn variance(&self) -> f64 {
        let lambda = 1.0 / self.scale_f64();
        let em1 = libm::expm1(-lambda);
        2.0 * libm::exp(-lambda) / (em1 * em1)
    }

    /// `U` uniform on `{0, …, t−1}` (Lemire's method); also the cell uniform of the
    /// discrete Gaussian's cell algorithm.
    #[inline]
    pub(crate) fn uniform<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<u64> {
        if self.ubits == 0 {
            return Ok(0);
        }
        if self.ubits > 36 {
            loop {
                if let Some(u) = self.lemire(bits.uint(self.ubits)?) {
                    return Ok(u);
                }
            }
        }
        // Candidates of at most 36 bits against t < 2^28: the product fits in u64. The same
        // bits as `uint`, the first read most significant.
        let (first, rest) = (self.ubits.min(32), self.ubits.saturating_sub(32));
        loop {
            let mut w = bits.peek32()? >> (32 - first);
            bits.consume(first);
            if rest > 0 {
                w = (w << rest) | (bits.peek32()? >> (32 - rest));
                bits.consume(rest);
            }
            let m = w * self.t;
            if m & ((1 << self.ubits) - 1) >= self.thresh {
                return Ok(m >> self.ubits);
            }
        }
    }

    /// `⌊w·t/2^L⌋` for an `L = ubits`-bit `w`, or `None` (reject) when
    /// `w·t mod 2^L < 2^L mod t`. Every `u < t` then has exactly `⌊2^L/t⌋` accepted `w`.
    #[inline(always)]
    fn lemire(&self, w: u64) -> Option<u64> {
        let m = u128::from(w) * u128::from(self.t);
        let low = if self.ubits == 64 { m as u64 } else { (m as u64) & ((1u64 << self.ubits) - 1) };
        (low >= self.thresh).then_some((m >> self.ubits) as u64)
    }

    /// CKS20 Algorithm 2.
    #[inline]
    pub(crate) fn draw<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<i64> {
        loop {
            let u = self.uniform(bits)?;
            if !bernoulli_exp_u64(bits, u, self.t)? {
                continue;
            }
            let mut v = 0u64;
            while bernoulli_exp_minus_one(bits)? {
                v = v.checked_add(1).ok_or(OVERFLOW)?;
            }
            // t·V + U < (2^64 − 1)² + 2^64 < 2^128.
            let x = u128::from(self.t) * u128::from(v) + u128::from(u);
            let y = match (self.s_shift, u64::try_from(x)) {
                (Some(k), _) => x >> k,
                (None, Ok(x)) => u128::from(x / self.s),
                (None, Err(_)) => x / u128::from(self.s),
            };
            let negative = bits.bit()?;
            if negative && y == 0 {
                continue;
            }
            let y = i64::try_from(y).map_err(|_| OVERFLOW)?;
            return Ok(if negative { -y } else { y });
        }
    }
}

impl ExactSampler for DiscreteLaplace {
    type Output = i64;

    /// # Errors
    /// Besides exhaustion, [`Error::SizeOverflow`] if the sample does not fit in `i64`
    /// (probability below `e^{−128}`).
    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<i64> {
        self.draw(&mut BitBuf::new(bits))
    }
}

/// `t/s` in `f64`, correctly rounded for `t, s < 2^53` and within 2 ulps otherwise.
pub(crate) fn ratio_f64(t: u64, s: u64) -> f64 {
    t as f64 / s as f64
}

/// A positive finite `x < 2^64` as `(t, 2^j)` with `t/2^j ≥ x`, equal to `x` when its
/// binary exponent allows `j ≤ max_j`; otherwise `t = ⌈x · 2^max_j⌉`.
pub(crate) fn dyadic_round_up(x: f64, name: &'static str, max_j: u32) -> Result<(u64, u64)> {
    if !(x.is_finite() && x > 0.0 && x < 18_446_744_073_709_551_616.0) {
        return Err(Error::OutOfRange { name, value: x, allowed: "(0, 2^64)" });
    }
    let raw = x.to_bits();
    let biased = ((raw >> 52) & 0x7ff) as i32;
    let frac = raw & ((1u64 << 52) - 1);
    // x = m · 2^k exactly.
    let (m, k) = if biased == 0 { (frac, -1074) } else { (frac | 1 << 52, biased - 1075) };
    let tz = m.trailing_zeros();
    let (m, k) = (m >> tz, k + tz as i32);
    if k >= 0 {
        // An integer below 2^64.
        return Ok((m << k, 1));
    }
    let j = k.unsigned_abs();
    if j <= max_j {
        return Ok((m, 1u64 << j));
    }
    // x · 2^max_j = m / 2^(j − max_j); round up.
    let shift = j - max_j;
    let t = if shift >= 64 { 1 } else { (m >> shift) + u64::from(m & ((1u64 << shift) - 1) != 0) };
    Ok((t.max(1), 1u64 << max_j))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::sampling::exact_sampler::tests::run;
    use crate::sampling::{KeyedStream, NoiseKey};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;
    use std::{vec, vec::Vec};

    #[test]
    fn algorithm_two_on_hand_made_bits() {
        // t = s = 1: U = 0 (no bits), D = 1 (no bits); V loop: Bernoulli(e^−1) reads one bit
        // for K = 2 (Bernoulli(1/2)); bit 1 fails → K = 2 even → false → V = 0. Sign bit 1 and
        // Y = 0: restart. Then V: bit 0 → Bernoulli(1/2) ok; K = 3: 1/3 = 0.01…, bit 1 → fails,
        // K = 3 odd → true, V = 1; next Bernoulli(e^−1): bit 1 → false. Sign 1 → −1.
        let lap = DiscreteLaplace::integer(1).unwrap();
        assert_eq!(run(&[1, 1, 0, 1, 1, 1], |b| lap.draw(b)), (Ok(-1), 6));
        // t = 3: U from L = 10 bits, first bit most significant. w = 0 gives w·t mod 2^10 = 0
        // < 2^10 mod 3 = 1: rejected. w = 1023: U = ⌊3069/1024⌋ = 2 (3069 mod 1024 = 1021 ≥ 1).
        // D = Bernoulli(exp(−2/3)): K = 1, Bernoulli(2/3) = 0.1010…: bit 1 agrees, bit 1 > 0
        // → A = 0 → K = 1 odd → D = 1. V: bit 1 → 0. Sign 0 → +2.
        let mut bits = [0u8; 24];
        bits[10..23].fill(1);
        let lap = DiscreteLaplace::integer(3).unwrap();
        assert_eq!(run(&bits, |b| lap.draw(b)), (Ok(2), 24));
        // Same bits with s = 2: Y = ⌊2/2⌋ = 1; with s = 3 (no shift): Y = 0, sign 0 → 0.
        let lap = DiscreteLaplace::new(3, 2).unwrap();
        assert_eq!(run(&bits, |b| lap.draw(b)), (Ok(1), 24));
        let lap = DiscreteLaplace::new(3, 3).unwrap();
        assert_eq!(run(&bits, |b| lap.draw(b)), (Ok(0), 24));
    }

    #[test]
    fn lemire_uniform_is_exactly_uniform() {
        // Over all 2^L candidates, every value u < t has exactly ⌊2^L/t⌋ accepted ones.
        for t in [2u64, 3, 5, 7, 11, 100, 255, 256, 257] {
            let lap = DiscreteLaplace::integer(t).unwrap();
            let mut counts = [0u64; 257];
            for w in 0..(1u64 << lap.ubits) {
                if let Some(u) = lap.lemire(w) {
                    counts[u as usize] += 1;
                }
            }
            let want = (1u64 << lap.ubits) / t;
            assert!(counts[..t as usize].iter().all(|&c| c == want), "t = {t}");
            assert!(counts[t as usize..].iter().all(|&c| c == 0), "t = {t}");
        }
        // With L = 64 (t ≥ 2^56) the threshold is 2^64 mod t.
        let lap = DiscreteLaplace::new(u64::MAX, 1 << 8).unwrap();
        assert_eq!((lap.ubits, lap.thresh), (64, 1));
        assert_eq!(lap.lemire(0), None);
        assert_eq!(lap.lemire(u64::MAX), Some(u64::MAX - 1));
    }

    #[test]
    fn the_u64_uniform_reads_the_same_bits_as_the_u128_reference() {
        use rand_core::{Rng, SeedableRng};
        let mut rng = ChaCha20Rng::from_seed([5; 32]);
        // Candidate widths from 9 to 36 bits (the u64 form) and past it (the reference).
        for t in [
            2u64,
            3,
            255,
            1000,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            (1 << 28) - 1,
            1 << 28,
            1 << 40,
        ] {
            let lap = DiscreteLaplace::integer(t).unwrap();
            for _ in 0..2000 {
                let bits: Vec<u8> = (0..96).map(|_| (rng.next_u32() & 1) as u8).collect();
                let reference = run(&bits, |b| {
                    loop {
                        if let Some(u) = lap.lemire(b.uint(lap.ubits)?) {
                            return Ok(u);
                        }
                    }
                });
                assert_eq!(run(&bits, |b| lap.uniform(b)), reference, "t = {t}");
            }
        }
    }

    #[test]
    fn parameters_are_validated() {
        assert!(matches!(DiscreteLaplace::new(0, 1), Err(Error::OutOfRange { .. })));
        assert!(matches!(DiscreteLaplace::new(1, 0), Err(Error::OutOfRange { .. })));
        for x in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.8446744073709552e19, 1e17] {
            assert!(matches!(DiscreteLaplace::from_f64(x), Err(Error::OutOfRange { .. })), "{x}");
        }
        let d = DiscreteLaplace::new(u64::MAX, 1 << 10).unwrap();
        assert_eq!(d.ubits, 64);
        assert_eq!(DiscreteLaplace::new(1, 7).unwrap().ubits, 0);
        assert_eq!(DiscreteLaplace::new(2, 7).unwrap().ubits, 9);
        assert_eq!(DiscreteLaplace::new(5, 7).unwrap().ubits, 11);
        assert_eq!(DiscreteLaplace::new(8, 7).unwrap().ubits, 11);
        assert_eq!(DiscreteLaplace::new(1 << 56, 1).unwrap().ubits, 64);
    }

    #[test]
    fn from_f64_is_exact_or_rounds_up() {
        assert_eq!(dyadic_round_up(3.0, "x", 63), Ok((3, 1)));
        assert_eq!(dyadic_round_up(0.75, "x", 63), Ok((3, 4)));
        assert_eq!(dyadic_round_up(2f64.powi(63), "x", 63), Ok((1 << 63, 1)));
        let (t, s) = dyadic_round_up(0.1, "x", 63).unwrap();
        assert_eq!(t as f64 / s as f64, 0.1);
        assert_eq!(dyadic_round_up(2f64.powi(-63), "x", 63), Ok((1, 1 << 63)));
        // 3 · 2^−70 → ⌈3 · 2^−7⌉ = 1 at j = 63; 2^−1074 likewise.
        assert_eq!(dyadic_round_up(3.0 * 2f64.powi(-70), "x", 63), Ok((1, 1 << 63)));
        assert_eq!(dyadic_round_up(f64::from_bits(1), "x", 63), Ok((1, 1 << 63)));
        // 1e-5 needs rounding: the result is ≥ x and within one unit of 2^−63.
        let (t, s) = dyadic_round_up(1e-5, "x", 63).unwrap();
        let exact = 1e-5 * s as f64;
        assert!(t as f64 >= exact && (t as f64) < exact + 1.0);
    }

    /// Bits making `U = 0` (`w = 1` in `ubits` bits: `⌊t/2^L⌋ = 0`, and `t mod 2^L = t` is
    /// above the threshold; then `D = 1` reads nothing), `V = v` (each `Bernoulli(e^−1)`
    /// success is `[0, 1]`: 1/2 accepted, 1/3 refused at its first digit, `K = 3`; the
    /// failure is `[1]`), then the sign bit.
    fn bits_for(lap: &DiscreteLaplace, v: usize, negative: bool) -> Vec<u8> {
        let mut bits = vec![0u8; lap.ubits as usize];
        *bits.last_mut().unwrap() = 1;
        for _ in 0..v {
            bits.extend([0, 1]);
        }
        bits.extend([1, u8::from(negative)]);
        bits
    }

    #[test]
    fn large_numerators_do_not_overflow_and_huge_samples_are_errors() {
        // t·V = 2^64 overflows u64 but X/s = 2^57 fits: formed in u128.
        let lap = DiscreteLaplace::new(1 << 63, 1 << 7).unwrap();
        assert_eq!(run(&bits_for(&lap, 2, true), |b| lap.draw(b)), (Ok(-(1 << 57)), 64 + 4 + 2));
        let lap = DiscreteLaplace::new(u64::MAX, (1 << 8) + 1).unwrap(); // s not a power of 2
        let want = (2 * u128::from(u64::MAX) / 257) as i64;
        assert_eq!(run(&bits_for(&lap, 2, false), |b| lap.draw(b)).0, Ok(want));
        // Scale 2^56 with V = 128: Y = 2^63 does not fit in i64.
        let lap = DiscreteLaplace::new(1 << 56, 1).unwrap();
        assert_eq!(run(&bits_for(&lap, 128, false), |b| lap.draw(b)).0, Err(OVERFLOW));
        assert_eq!(run(&bits_for(&lap, 127, true), |b| lap.draw(b)).0, Ok(-(127 << 56)));
        // Scales above 2^56 are refused.
        assert!(DiscreteLaplace::new((1 << 56) + 1, 1).is_err());
        assert!(DiscreteLaplace::new(u64::MAX, 1 << 8).is_ok());
        assert!(DiscreteLaplace::from_f64(2f64.powi(56)).is_ok());
        assert!(DiscreteLaplace::from_f64(2f64.powi(56) * (1.0 + f64::EPSILON)).is_err());
    }

    #[test]
    fn keyed_fill_equals_single_elements_and_fill_reads_one_stream() {
        let s = KeyedStream::new(&NoiseKey::for_replay([6; 32]), 1);
        let lap = DiscreteLaplace::new(7, 3).unwrap();
        let mut out = [0i64; 50];
        lap.fill_keyed(&s, 0, &mut out).unwrap();
        for (i, &x) in out.iter().enumerate() {
            assert_eq!(x, lap.sample_at(&s, i as u64).unwrap());
        }
        let mut tail = [0i64; 20];
        lap.fill_keyed(&s, 30, &mut tail).unwrap();
        assert_eq!(&tail[..], &out[30..]);
        let mut a = [0i64; 64];
        let mut b = [0i64; 64];
        lap.fill(&mut ChaCha20Rng::from_seed([2; 32]), &mut a).unwrap();
        let mut rng = ChaCha20Rng::from_seed([2; 32]);
        let mut bits = crate::sampling::RngBits::new(&mut rng);
        for x in &mut b {
            *x = lap.sample_bits(&mut bits).unwrap();
        }
        assert_eq!(a, b);
        assert!(a.iter().any(|&x| x < 0) && a.iter().any(|&x| x > 0));
    }
}
