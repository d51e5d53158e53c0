//! Exact Bernoulli samplers from fair bits; each implements [`ExactSampler`].
//!
//! **Guarantee.** Each sampler returns `true` with *exactly* the stated probability, given
//! independent fair bits; the arithmetic is fixed-width integer (`u64`/`u128`) and no
//! floating-point value takes part in any decision.
//!
//! * [`Bernoulli`]: `p = num/den`. A uniform `U = 0.u₁u₂u₃…` is compared lazily with the
//!   binary expansion `0.p₁p₂p₃…` of `p`, produced digit by digit by long division (the
//!   remainder `r < den` gives the digit `2r ≥ den`, tested as `r ≥ den − r`, so nothing
//!   overflows). Bit `u_j` is the `j`-th bit read. The result is `p_j` at the first `j`
//!   with `u_j ≠ p_j` (that is the event `U < p`), and `false` as soon as the remaining
//!   digits of `p` are all zero. Expected 2 bits; `p = 0` and `p = 1` read none.
//! * [`BernoulliDyadic`]: an `f64` probability `q ∈ [0, 1]` taken *exactly* as the dyadic
//!   rational `m · 2^−e` it is (so `0.1` means the double nearest 0.1, not 1/10), compared
//!   the same way against its finite binary expansion. Used by Poisson subsampling.
//! * [`BernoulliExp`]: `exp(−γ)` for rational `γ = num/den ≥ 0` by Canonne, Kamath and
//!   Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020, CKS20),
//!   Algorithm 1. For `γ ∈ [0, 1]`: `K ← 1`; repeat `A ← Bernoulli(γ/K)`, stop when `A = 0`,
//!   else `K ← K + 1`; return `K` odd (`P(K ≥ k + 1) = γᵏ/k!`, so `P(K odd) = e^−γ`).
//!   `Bernoulli(γ/K)` is drawn as `Bernoulli(1/K) ∧ Bernoulli(γ)`, two independent exact
//!   draws in that order (the second skipped when the first fails, and `Bernoulli(1/1)`
//!   never drawn), which avoids the product `den · K`. For `γ > 1`: `⌊γ⌋` draws of
//!   `Bernoulli(e^−1)`, stopping at the first failure, then `Bernoulli(exp(−frac γ))`.
//!
//! Bits are read as the randomness contract of [`ExactSampler`] describes (module
//! `exact_sampler`); the lazy comparisons with `num/den` and with a dyadic `q` are in
//! `lazy_compare`.
//!
//! Background: `docs/PAPERS.md` A.2.1 (OpenDP's CKS20 samplers), A.2.5, A.2.7.

use crate::error::{Error, Result};
use crate::sampling::bit_source::BitSource;
use crate::sampling::exact_sampler::{BitBuf, ExactSampler};
use crate::sampling::lazy_compare::{
    Digits, bernoulli_dyadic, bernoulli_inverse, bernoulli_ratio_u64, ratio_bitwise_u128,
    ratio_chunked,
};

const ITERATIONS: Error = Error::SizeOverflow { what: "Bernoulli(exp(-x)) iteration count" };

/// CKS20 Algorithm 1 for `γ ∈ (0, 1]`, `gamma` drawing `Bernoulli(γ)`: `K ← 1`; while
/// `Bernoulli(γ/K)` (drawn as `Bernoulli(1/K)`, then `Bernoulli(γ)`; `K = 1` skips the
/// first), `K ← K + 1`; return `K` odd.
#[inline(always)]
fn exp_loop<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    mut gamma: impl FnMut(&mut BitBuf<'_, B>) -> Result<bool>,
) -> Result<bool> {
    if !gamma(bits)? {
        return Ok(true);
    }
    let mut k: u64 = 2;
    loop {
        if !(bernoulli_inverse(bits, k)? && gamma(bits)?) {
            return Ok(k & 1 == 1);
        }
        k = k.checked_add(1).ok_or(ITERATIONS)?;
    }
}

/// `Bernoulli(e^−1)`: Algorithm 1 with `γ = 1`, where `Bernoulli(γ)` is certain.
#[inline]
pub(crate) fn bernoulli_exp_minus_one<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
) -> Result<bool> {
    exp_loop(bits, |_| Ok(true))
}

/// `Bernoulli(exp(−num/den))` for `num ≤ den` (CKS20 Algorithm 1).
#[inline]
pub(crate) fn bernoulli_exp_u64<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    num: u64,
    den: u64,
) -> Result<bool> {
    if num == 0 {
        Ok(true)
    } else if num >= den {
        bernoulli_exp_minus_one(bits)
    } else {
        let g = Digits::new(num, den);
        exp_loop(bits, |b| ratio_chunked(b, g, den))
    }
}

/// `Bernoulli(exp(−(n1/d1)·(n2/d2)))` for `n1 ≤ d1`, `n2 ≤ d2` (`d1, d2 > 0`): Algorithm 1
/// with `Bernoulli(γ)` drawn as `Bernoulli(n1/d1) ∧ Bernoulli(n2/d2)`, which keeps every
/// number in `u64`.
#[inline]
pub(crate) fn bernoulli_exp_product<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    (n1, d1): (u64, u64),
    (n2, d2): (u64, u64),
) -> Result<bool> {
    if n1 == 0 || n2 == 0 {
        return Ok(true);
    }
    if n1 >= d1 || n2 >= d2 {
        let (n, d) = if n1 >= d1 { (n2, d2) } else { (n1, d1) };
        return bernoulli_exp_u64(bits, n.min(d), d);
    }
    let (g1, g2) = (Digits::new(n1, d1), Digits::new(n2, d2));
    exp_loop(bits, |b| Ok(ratio_chunked(b, g1, d1)? && ratio_chunked(b, g2, d2)?))
}

/// `Bernoulli(exp(−num/den))` for `num ≤ den`, in `u128`.
#[inline]
pub(crate) fn bernoulli_exp_u128<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    num: u128,
    den: u128,
) -> Result<bool> {
    match (u64::try_from(num), u64::try_from(den)) {
        (Ok(n), Ok(d)) => bernoulli_exp_u64(bits, n, d),
        _ if num == 0 => Ok(true),
        _ if num >= den => bernoulli_exp_minus_one(bits),
        _ => exp_loop(bits, |b| ratio_bitwise_u128(b, num, den)),
    }
}

/// `Bernoulli(exp(−(whole + num/den)))` with `num < den`: `whole` draws of
/// `Bernoulli(e^−1)` (stopping at the first failure), then `Bernoulli(exp(−num/den))`.
#[inline]
pub(crate) fn bernoulli_exp_split<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    whole: u128,
    num: u128,
    den: u128,
) -> Result<bool> {
    let mut i = 0u128;
    while i < whole {
        if !bernoulli_exp_minus_one(bits)? {
            return Ok(false);
        }
        i += 1;
    }
    bernoulli_exp_u128(bits, num, den)
}

/// `Bernoulli(num/den)` for a rational probability, exact.
///
/// ```
/// use dpattn_core::sampling::{Bernoulli, ExactSampler};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let b = Bernoulli::new(2, 7)?;
/// let mut rng = ChaCha20Rng::from_seed([7; 32]);
/// let hits = (0..7000).filter(|_| b.sample(&mut rng).unwrap()).count();
/// assert!((1700..2300).contains(&hits));
/// assert!(Bernoulli::new(3, 2).is_err() && Bernoulli::new(0, 0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bernoulli {
    num: u64,
    den: u64,
}

impl Bernoulli {
    /// `p = num/den` with `den > 0` and `num ≤ den`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] otherwise.
    pub fn new(num: u64, den: u64) -> Result<Self> {
        if den == 0 {
            return Err(Error::OutOfRange { name: "den", value: 0.0, allowed: "[1, 2^64)" });
        }
        if num > den {
            return Err(Error::OutOfRange { name: "num", value: num as f64, allowed: "[0, den]" });
        }
        Ok(Self { num, den })
    }

    /// `(num, den)`.
    ///
    /// ```
    /// # use dpattn_core::sampling::Bernoulli;
    /// assert_eq!(Bernoulli::new(2, 4)?.ratio(), (2, 4));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn ratio(&self) -> (u64, u64) {
        (self.num, self.den)
    }
}

impl ExactSampler for Bernoulli {
    type Output = bool;

    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<bool> {
        bernoulli_ratio_u64(&mut BitBuf::new(bits), self.num, self.den)
    }
}

/// `Bernoulli(q)` for an `f64` probability `q ∈ [0, 1]`, taken exactly as the dyadic
/// rational it is.
///
/// ```
/// use dpattn_core::sampling::{BernoulliDyadic, ExactSampler, KeyedStream, NoiseKey};
/// let b = BernoulliDyadic::new(0.25)?;
/// assert_eq!(b.probability(), 0.25);
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut out = [false; 4000];
/// b.fill_keyed(&s, 0, &mut out)?;
/// let hits = out.iter().filter(|&&x| x).count();
/// assert!((850..1150).contains(&hits));
/// assert!(BernoulliDyadic::new(f64::NAN).is_err() && BernoulliDyadic::new(1.5).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BernoulliDyadic {
    q: f64,
    /// Odd mantissa `m` of `q = m · 2^−e` (unused when `q ∈ {0, 1}`).
    m: u64,
    e: u32,
}

impl BernoulliDyadic {
    /// `q ∈ [0, 1]`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `q` is NaN or outside `[0, 1]`.
    pub fn new(q: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&q) {
            return Err(Error::OutOfRange { name: "probability", value: q, allowed: "[0, 1]" });
        }
        if q == 0.0 || q == 1.0 {
            return Ok(Self { q, m: 0, e: 0 });
        }
        let raw = q.to_bits();
        let biased = ((raw >> 52) & 0x7ff) as u32;
        let frac = raw & ((1u64 << 52) - 1);
        // Normal: q = (2^52 + frac) · 2^(biased − 1075); subnormal: q = frac · 2^−1074.
        let (m, e) = if biased == 0 { (frac, 1074) } else { (frac | 1 << 52, 1075 - biased) };
        let tz = m.trailing_zeros();
        Ok(Self { q, m: m >> tz, e: e - tz })
    }

    /// `q`.
    ///
    /// ```
    /// # use dpattn_core::sampling::BernoulliDyadic;
    /// assert_eq!(BernoulliDyadic::new(0.1)?.probability(), 0.1);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn probability(&self) -> f64 {
        self.q
    }

    /// One draw from the buffered bits.
    #[inline]
    pub(crate) fn draw<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<bool> {
        if self.q == 0.0 {
            Ok(false)
        } else if self.q == 1.0 {
            Ok(true)
        } else {
            bernoulli_dyadic(bits, self.m, self.e)
        }
    }

    /// `q` as `(m, e)` with `q = m · 2^−e`, `m` odd (`(0, 0)` for `q = 0`, `(1, 0)` for
    /// `q = 1`).
    ///
    /// ```
    /// # use dpattn_core::sampling::BernoulliDyadic;
    /// assert_eq!(BernoulliDyadic::new(0.375)?.dyadic(), (3, 3));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn dyadic(&self) -> (u64, u32) {
        if self.q == 0.0 {
            (0, 0)
        } else if self.q == 1.0 {
            (1, 0)
        } else {
            (self.m, self.e)
        }
    }
}

impl ExactSampler for BernoulliDyadic {
    type Output = bool;

    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<bool> {
        self.draw(&mut BitBuf::new(bits))
    }
}

/// `Bernoulli(exp(−γ))` for a rational `γ = num/den ≥ 0` (CKS20 Algorithm 1, extended to
/// `γ > 1`), exact.
///
/// ```
/// use dpattn_core::sampling::{BernoulliExp, ExactSampler};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let b = BernoulliExp::new(7, 3)?; // exp(−7/3) ≈ 0.097
/// let mut rng = ChaCha20Rng::from_seed([5; 32]);
/// let hits = (0..10_000).filter(|_| b.sample(&mut rng).unwrap()).count();
/// assert!((800..1150).contains(&hits));
/// assert!(BernoulliExp::new(1, 0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BernoulliExp {
    num: u128,
    den: u128,
    whole: u128,
    frac: u128,
}

impl BernoulliExp {
    /// `γ = num/den` with `den > 0` (any `num`, so `γ ∈ [0, 2^128)`).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `den = 0`.
    pub fn new(num: u128, den: u128) -> Result<Self> {
        if den == 0 {
            return Err(Error::OutOfRange { name: "den", value: 0.0, allowed: "[1, 2^128)" });
        }
        Ok(Self { num, den, whole: num / den, frac: num % den })
    }

    /// One draw from the buffered bits.
    #[inline]
    pub(crate) fn draw<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<bool> {
        bernoulli_exp_split(bits, self.whole, self.frac, self.den)
    }

    /// `(num, den)` of `γ`.
    ///
    /// ```
    /// # use dpattn_core::sampling::BernoulliExp;
    /// assert_eq!(BernoulliExp::new(5, 2)?.gamma(), (5, 2));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn gamma(&self) -> (u128, u128) {
        (self.num, self.den)
    }
}

impl ExactSampler for BernoulliExp {
    type Output = bool;

    /// # Errors
    /// Besides exhaustion, [`Error::SizeOverflow`] if Algorithm 1's counter would pass
    /// `2^64` (it needs `2^64` consecutive successes).
    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<bool> {
        self.draw(&mut BitBuf::new(bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::exact_sampler::tests::run;

    #[test]
    fn dyadic_decomposes_doubles_exactly() {
        assert_eq!(BernoulliDyadic::new(0.5).unwrap().dyadic(), (1, 1));
        assert_eq!(BernoulliDyadic::new(0.75).unwrap().dyadic(), (3, 2));
        let b = BernoulliDyadic::new(0.1).unwrap();
        let (m, e) = b.dyadic();
        assert_eq!((m, e), (0x0019_9999_9999_999a >> 1, 55));
        assert_eq!(m as f64 / (1u64 << 55) as f64, 0.1);
        let tiny = BernoulliDyadic::new(f64::from_bits(1)).unwrap();
        assert_eq!(tiny.dyadic(), (1, 1074));
        assert_eq!(BernoulliDyadic::new(1.0).unwrap().dyadic(), (1, 0));
        assert_eq!(BernoulliDyadic::new(-0.0).unwrap().dyadic(), (0, 0));
        for q in [f64::NAN, -1e-300, 1.0 + f64::EPSILON, f64::INFINITY] {
            assert!(matches!(BernoulliDyadic::new(q), Err(Error::OutOfRange { .. })));
        }
    }

    #[test]
    fn dyadic_compares_bits_with_the_expansion() {
        let b = BernoulliDyadic::new(0.375).unwrap(); // 0.011
        assert_eq!(run(&[1], |x| b.draw(x)), (Ok(false), 1));
        assert_eq!(run(&[0, 0], |x| b.draw(x)), (Ok(true), 2));
        assert_eq!(run(&[0, 1, 0], |x| b.draw(x)), (Ok(true), 3));
        assert_eq!(run(&[0, 1, 1, 1], |x| b.draw(x)), (Ok(false), 3));
        // 2^−1074: 1073 zero digits then a one.
        let tiny = BernoulliDyadic::new(f64::from_bits(1)).unwrap();
        let mut bits = [0u8; 1074];
        assert_eq!(run(&bits, |x| tiny.draw(x)), (Ok(true), 1074));
        bits[1073] = 1;
        assert_eq!(run(&bits, |x| tiny.draw(x)), (Ok(false), 1074));
        bits[500] = 1;
        assert_eq!(run(&bits, |x| tiny.draw(x)), (Ok(false), 501));
        // q = 0 and q = 1 read nothing.
        assert_eq!(run(&[], |x| BernoulliDyadic::new(0.0).unwrap().draw(x)), (Ok(false), 0));
        assert_eq!(run(&[], |x| BernoulliDyadic::new(1.0).unwrap().draw(x)), (Ok(true), 0));
    }

    #[test]
    fn exp_algorithm_one_on_hand_made_bits() {
        // γ = 1/2. K = 1: Bernoulli(1/2) reads 0 → A = 1. K = 2: Bernoulli(1/K = 1/2) reads 1
        // → fails → K = 2 even → false.
        assert_eq!(run(&[0, 1], |b| bernoulli_exp_u64(b, 1, 2)), (Ok(false), 2));
        // The first Bernoulli(γ) fails: K = 1 → true.
        assert_eq!(run(&[1], |b| bernoulli_exp_u64(b, 1, 2)), (Ok(true), 1));
        // K = 1 ok (0); K = 2: 1/2 ok (0), γ ok (0); K = 3: 1/3 = 0.01…, bit 1 → fails, K = 3
        // odd → true.
        assert_eq!(run(&[0, 0, 0, 1], |b| bernoulli_exp_u64(b, 1, 2)), (Ok(true), 4));
        // γ = 0 reads nothing; γ = 1 is e^−1, whose K starts at 2 (Bernoulli(1/1) certain).
        assert_eq!(run(&[], |b| bernoulli_exp_u64(b, 0, 5)), (Ok(true), 0));
        assert_eq!(run(&[1], |b| bernoulli_exp_u64(b, 1, 1)), (Ok(false), 1));
        assert_eq!(run(&[1], |b| bernoulli_exp_u64(b, 5, 5)), (Ok(false), 1));
        // The u128 form agrees with the u64 form where both apply, and handles huge γ's.
        assert_eq!(run(&[0, 0, 0, 1], |b| bernoulli_exp_u128(b, 1, 2)), (Ok(true), 4));
        let big = 1u128 << 100;
        assert_eq!(run(&[0, 0, 0, 1], |b| bernoulli_exp_u128(b, big, 2 * big)), (Ok(true), 4));
    }

    #[test]
    fn exp_splits_whole_and_fractional_parts() {
        let b = BernoulliExp::new(7, 3).unwrap();
        assert_eq!((b.whole, b.frac, b.den), (2, 1, 3));
        // The first Bernoulli(e^−1) fails after one bit: nothing else is read.
        assert_eq!(run(&[1], |x| b.draw(x)), (Ok(false), 1));
        // γ = 2 exactly: two Bernoulli(e^−1) (each: 1/2 ok, 1/3 fails at its first digit, so
        // K = 3 odd → true) and no fractional draw.
        let b = BernoulliExp::new(4, 2).unwrap();
        assert_eq!(run(&[0, 1, 0, 1], |x| b.draw(x)), (Ok(true), 4));
        assert!(BernoulliExp::new(1, 0).is_err());
        // Huge γ stops at the first failure.
        let b = BernoulliExp::new(u128::MAX, 1).unwrap();
        assert_eq!(run(&[1], |x| b.draw(x)), (Ok(false), 1));
    }

    #[test]
    fn exp_probabilities_by_exhaustive_enumeration() {
        // All 2^16 prefixes of 16 bits: those decided within them bracket P(true).
        for (num, den) in [(1u64, 2u64), (1, 1), (3, 10), (5, 1 << 40)] {
            let (mut yes, mut open) = (0u64, 0u64);
            for u in 0..(1u32 << 16) {
                let bits: [u8; 16] = core::array::from_fn(|i| ((u >> i) & 1) as u8);
                match ratio_exp(&bits, num, den) {
                    (_, used) if used > 16 => open += 1,
                    (Ok(true), _) => yes += 1,
                    _ => {}
                }
            }
            let p = libm::exp(-(num as f64) / den as f64);
            let lo = yes as f64 / 65536.0;
            let hi = (yes + open) as f64 / 65536.0;
            assert!(lo <= p && p <= hi, "γ = {num}/{den}: {lo} ≤ {p} ≤ {hi}");
            assert!(hi - lo < 0.01, "γ = {num}/{den}: {lo}..{hi}");
        }
    }

    fn ratio_exp(bits: &[u8], num: u64, den: u64) -> (Result<bool>, u64) {
        run(bits, |b| bernoulli_exp_u64(b, num, den))
    }
}
