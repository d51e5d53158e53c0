//! Exact Bernoulli samplers from fair bits, and the [`ExactSampler`] trait every exact
//! sampler implements.
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
//! **Reading bits (the randomness contract).** Every exact sampler reads its
//! [`BitSource`] with `next_bits(32)` — for the crate's sources, one whole 32-bit word at a
//! time — and uses the bits in the order the source delivers them (least significant bit
//! of each word first). A sample is a function of that bit sequence exactly as if the bits
//! were read one at a time by the algorithms above; the bits of the last 32-bit read that
//! a sample does not use are discarded, so each sample starts on a fresh word. Integers
//! drawn from `k` bits (the uniform of the discrete Laplace) take the first bit as the
//! most significant. For speed, comparisons with `num/den` (`u64`) look at 32 digits at
//! once — the digits `⌊num·2^32/den⌋` (one division) against the next 32 bits, the first
//! difference found with a leading-zero count — and consume exactly the bits the
//! one-digit-at-a-time comparison would (tested); only ratios wider than 64 bits (a
//! [`BernoulliExp`] with such a `γ`) and dyadic probabilities go one digit at a time. A
//! CUDA port reproduces a keyed draw by following the one-digit-at-a-time description with
//! the same bit order.
//!
//! Spec: `shared/spec/dp-library-anchors.md` §1.2 (OpenDP's CKS20 samplers), §6, §8.1.

use rand_core::CryptoRng;

use crate::error::{Error, Result};
use crate::sampling::bit_source::{BitSource, ElementBits, RngBits, fill_windows};
use crate::sampling::keyed_stream::KeyedStream;

/// A sampler that draws from a [`BitSource`]; the provided methods are the API.
///
/// Implemented by every exact sampler of the crate ([`Bernoulli`], [`BernoulliDyadic`],
/// [`BernoulliExp`], [`DiscreteLaplace`](crate::sampling::DiscreteLaplace),
/// [`DiscreteGaussian`](crate::sampling::DiscreteGaussian),
/// [`PoissonSubsampling`](crate::sampling::PoissonSubsampling)). Keyed draws follow the
/// per-element window layout of [`ElementBits`]: element `i` reads only its own window,
/// so element `i` of [`fill_keyed`](Self::fill_keyed) with `first = 0` equals
/// [`sample_at(stream, i)`](Self::sample_at) whatever other elements consumed.
///
/// ```
/// use dpattn_core::sampling::{Bernoulli, ExactSampler, KeyedStream, NoiseKey};
/// let b = Bernoulli::new(1, 3)?;
/// let s = KeyedStream::new(&NoiseKey::from_bytes([1; 32]), 0);
/// let mut out = [false; 8];
/// b.fill_keyed(&s, 0, &mut out)?;
/// assert_eq!(out[5], b.sample_at(&s, 5)?);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub trait ExactSampler {
    /// The type of one sample.
    type Output: Copy;

    /// One sample from `bits`, read as the module docs describe.
    ///
    /// # Errors
    /// [`Error::RandomnessExhausted`] if a bounded source runs out; sampler-specific
    /// overflow errors (probability far below 2^−60) as documented by the implementor.
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<Self::Output>;

    /// One sample from any cryptographic RNG (the unused bits of the last word read are
    /// discarded).
    ///
    /// # Errors
    /// As [`sample_bits`](Self::sample_bits).
    fn sample<R: CryptoRng + ?Sized>(&self, rng: &mut R) -> Result<Self::Output> {
        self.sample_bits(&mut RngBits::new(rng))
    }

    /// Element `element` of the draw defined by `stream`, from that element's window.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `element >= 2^40`; otherwise as
    /// [`sample_bits`](Self::sample_bits).
    fn sample_at(&self, stream: &KeyedStream, element: u64) -> Result<Self::Output> {
        self.sample_bits(&mut ElementBits::new(stream, element)?)
    }

    /// Fills `out` from any cryptographic RNG, sample after sample, each starting on a
    /// fresh word of the RNG's `next_u32` stream.
    ///
    /// # Errors
    /// As [`sample_bits`](Self::sample_bits); `out` is then partly written.
    fn fill<R: CryptoRng + ?Sized>(&self, rng: &mut R, out: &mut [Self::Output]) -> Result<()> {
        let mut bits = RngBits::new(rng);
        for o in out {
            *o = self.sample_bits(&mut bits)?;
        }
        Ok(())
    }

    /// Fills `out` with elements `first, first + 1, …` of the draw defined by `stream`,
    /// each from its own window.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] if `first + out.len()` overflows, [`Error::OutOfRange`] if an
    /// element index reaches `2^40`; otherwise as [`sample_bits`](Self::sample_bits) (`out`
    /// is then partly written).
    fn fill_keyed(&self, stream: &KeyedStream, first: u64, out: &mut [Self::Output]) -> Result<()> {
        fill_windows(stream, first, out, |b| self.sample_bits(b))
    }
}

/// The samplers' view of a [`BitSource`]: the source is read 32 bits at a time
/// (`next_bits(32)`) and the bits are handed out in the order the source delivers them.
/// Keeping them in a register lets the lazy comparisons look at 32 bits at once. Bits still
/// buffered when a sample is complete are discarded.
pub(crate) struct BitBuf<'a, B: BitSource + ?Sized> {
    src: &'a mut B,
    /// The next `left` bits, the first in the most significant place; zero below them.
    buf: u64,
    left: u32,
    /// 32-bit reads made so far.
    reads: u64,
}

impl<'a, B: BitSource + ?Sized> BitBuf<'a, B> {
    #[inline(always)]
    pub(crate) fn new(src: &'a mut B) -> Self {
        Self { src, buf: 0, left: 0, reads: 0 }
    }

    /// Appends the source's next 32 bits (requires `left ≤ 32`).
    #[inline]
    fn refill(&mut self) -> Result<()> {
        // next_bits puts the first bit in the least significant place; reversed, it leads.
        let w = self.src.next_bits(32)? as u32;
        self.buf |= u64::from(w.reverse_bits()) << (32 - self.left);
        self.left += 32;
        self.reads += 1;
        Ok(())
    }

    /// The next bit.
    #[inline(always)]
    pub(crate) fn bit(&mut self) -> Result<bool> {
        if self.left == 0 {
            self.refill()?;
        }
        let b = self.buf >> 63 == 1;
        self.buf <<= 1;
        self.left -= 1;
        Ok(b)
    }

    /// The next 32 bits as a number, the first bit most significant, left unconsumed.
    #[inline(always)]
    pub(crate) fn peek32(&mut self) -> Result<u64> {
        if self.left < 32 {
            self.refill()?;
        }
        Ok(self.buf >> 32)
    }

    /// Consumes `n ≤ 32` bits; only after [`peek32`](Self::peek32).
    #[inline(always)]
    pub(crate) fn consume(&mut self, n: u32) {
        debug_assert!(n <= 32 && n <= self.left);
        self.buf <<= n;
        self.left -= n;
    }

    /// The next `n ≤ 64` bits as a number, the first bit most significant.
    #[inline]
    pub(crate) fn uint(&mut self, n: u32) -> Result<u64> {
        let n = n.min(64);
        let hi_bits = n.saturating_sub(32);
        let mut v = 0u64;
        for part in [n - hi_bits, hi_bits] {
            if part > 0 {
                let x = self.peek32()? >> (32 - part);
                self.consume(part);
                v = (v << part) | x;
            }
        }
        Ok(v)
    }

    /// Bits consumed so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.reads * 32 - u64::from(self.left)
    }
}

/// The first 32 binary digits `d` of `num/den` (`0 < num < den`), the remainder `rem`
/// after them (`num · 2^32 = d · den + rem`), and `len`, the number of them the lazy
/// comparison reads at most: 32, or the place of the last one digit when the expansion
/// ends within the 32 digits (`rem = 0`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Digits {
    d: u64,
    rem: u64,
    len: u32,
}

impl Digits {
    /// For `den ≤ 2^32`, in `u64`.
    #[inline(always)]
    const fn small(num: u64, den: u64) -> Self {
        let x = num << 32;
        let (d, rem) = (x / den, x % den);
        Self::with(d, rem)
    }

    /// For any `den`: `den ≤ 2^32` in `u64`, otherwise one `u128`-by-`u64` division whose
    /// quotient fits in 32 bits (compiled to the hardware divide on x86-64).
    #[inline(always)]
    fn new(num: u64, den: u64) -> Self {
        if den <= 1 << 32 {
            return Self::small(num, den);
        }
        let x = u128::from(num) << 32;
        let d = (x / u128::from(den)) as u64;
        Self::with(d, (x - u128::from(d) * u128::from(den)) as u64)
    }

    #[inline(always)]
    const fn with(d: u64, rem: u64) -> Self {
        let len = if rem == 0 { 32 - d.trailing_zeros() } else { 32 };
        Self { d, rem, len }
    }
}

/// `Digits` of `1/k` for `k = 2 ..= 64` (entries 0 and 1 unused).
const INVERSES: [Digits; 65] = {
    let mut t = [Digits { d: 0, rem: 0, len: 0 }; 65];
    let mut k = 2;
    while k < 65 {
        t[k] = Digits::small(1, k as u64);
        k += 1;
    }
    t
};

/// The lazy comparison of `U` with `num/den` (`0 < num < den`) whose first digits are
/// `first`, 32 digits at a time: the first digit where `U` and `num/den` differ decides
/// (`U < num/den` exactly when `U`'s digit is 0), and exactly the bits up to it are
/// consumed — the same bits, with the same result, as one digit at a time.
#[inline(always)]
fn ratio_chunked<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    first: Digits,
    den: u64,
) -> Result<bool> {
    let mut g = first;
    loop {
        let u = bits.peek32()?;
        // First differing digit, counted from 0 (32 when all agree).
        let j = (u ^ g.d).leading_zeros() - 32;
        if j < g.len {
            bits.consume(j + 1);
            return Ok(u < g.d);
        }
        bits.consume(g.len);
        if g.rem == 0 {
            // The expansion ended and U agreed with all of it: U ≥ num/den.
            return Ok(false);
        }
        g = Digits::new(g.rem, den);
    }
}

macro_rules! ratio_bitwise {
    ($name:ident, $t:ty) => {
        /// The lazy comparison one digit at a time, for any `0 < num < den`. The digit of
        /// the remainder `r < den` is `2r ≥ den`, tested as `r ≥ den − r`; the new remainder
        /// `2r − den` or `2r` stays below `den`, so nothing overflows. (The `u64` form is
        /// the reference the chunked comparison is tested against.)
        #[inline]
        #[cfg_attr(not(test), allow(dead_code))]
        fn $name<B: BitSource + ?Sized>(
            bits: &mut BitBuf<'_, B>,
            num: $t,
            den: $t,
        ) -> Result<bool> {
            let mut r = num;
            while r != 0 {
                let digit = r >= den - r;
                r = if digit { r - (den - r) } else { r << 1 };
                if bits.bit()? != digit {
                    return Ok(digit);
                }
            }
            Ok(false)
        }
    };
}

ratio_bitwise!(ratio_bitwise_u64, u64);
ratio_bitwise!(ratio_bitwise_u128, u128);

/// `Bernoulli(num/den)` (`den > 0`; `num ≥ den` means `p = 1`).
#[inline]
pub(crate) fn bernoulli_ratio_u64<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    num: u64,
    den: u64,
) -> Result<bool> {
    if num >= den {
        Ok(true)
    } else if num == 0 {
        Ok(false)
    } else {
        ratio_chunked(bits, Digits::new(num, den), den)
    }
}

/// `Bernoulli(1/k)` for `k ≥ 2`.
#[inline(always)]
fn bernoulli_inverse<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>, k: u64) -> Result<bool> {
    if k < 65 {
        ratio_chunked(bits, INVERSES[k as usize], k)
    } else {
        bernoulli_ratio_u64(bits, 1, k)
    }
}

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

/// `Bernoulli(q)` for the dyadic `q = m · 2^−e` with `m` odd and `0 < m < 2^e`, one digit
/// at a time.
#[inline]
pub(crate) fn bernoulli_dyadic<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    m: u64,
    e: u32,
) -> Result<bool> {
    let len = u64::BITS - m.leading_zeros();
    // Digits 1 ..= e − len of q are zero: a one in U there means U > q.
    for _ in 0..e - len {
        if bits.bit()? {
            return Ok(false);
        }
    }
    for i in (0..len).rev() {
        let digit = (m >> i) & 1 == 1;
        if bits.bit()? != digit {
            return Ok(digit);
        }
    }
    // U agrees with every digit of q, so U ≥ q.
    Ok(false)
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
/// let s = KeyedStream::new(&NoiseKey::from_bytes([2; 32]), 0);
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
pub(crate) mod tests {
    use super::*;
    use crate::sampling::keyed_stream::NoiseKey;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    /// Replays given bits, then (unless `strict`) 1024 ones — which end every loop of the
    /// Bernoulli samplers quickly — and then reports exhaustion.
    pub(crate) struct Replay<'a> {
        bits: &'a [u8],
        next: usize,
        strict: bool,
    }

    impl<'a> Replay<'a> {
        pub(crate) fn new(bits: &'a [u8]) -> Self {
            Self { bits, next: 0, strict: false }
        }
    }

    impl BitSource for Replay<'_> {
        fn next_bit(&mut self) -> Result<bool> {
            let b = match self.bits.get(self.next) {
                Some(&b) => b == 1,
                None if self.strict || self.next >= self.bits.len() + 1024 => {
                    return Err(Error::RandomnessExhausted { element: 0 });
                }
                None => true,
            };
            self.next += 1;
            Ok(b)
        }
    }

    /// `f` on buffered `bits` (then ones): its result and the number of bits it consumed.
    pub(crate) fn run<T>(
        bits: &[u8],
        f: impl FnOnce(&mut BitBuf<'_, Replay<'_>>) -> Result<T>,
    ) -> (Result<T>, u64) {
        let mut src = Replay::new(bits);
        let mut buf = BitBuf::new(&mut src);
        let out = f(&mut buf);
        (out, buf.used())
    }

    fn ratio(bits: &[u8], num: u64, den: u64) -> (Result<bool>, u64) {
        run(bits, |b| bernoulli_ratio_u64(b, num, den))
    }

    #[test]
    fn bit_buffer_hands_out_bits_in_source_order() {
        let pattern: [u8; 200] = core::array::from_fn(|i| ((i * 7 + i / 3) % 5 % 2) as u8);
        let value = |range: core::ops::Range<usize>| {
            pattern[range].iter().fold(0u64, |v, &b| (v << 1) | u64::from(b))
        };
        let mut src = Replay::new(&pattern);
        let mut b = BitBuf::new(&mut src);
        assert_eq!(b.bit().unwrap(), pattern[0] == 1);
        assert_eq!(b.uint(5).unwrap(), value(1..6));
        assert_eq!(b.peek32().unwrap(), value(6..38));
        b.consume(7);
        assert_eq!(b.uint(40).unwrap(), value(13..53));
        assert_eq!(b.uint(64).unwrap(), value(53..117));
        assert_eq!(b.uint(0).unwrap(), 0);
        assert_eq!(b.used(), 117);
        assert_eq!(b.reads, 4);
        // A source that runs dry reports it at the next 32-bit read.
        let mut src = Replay { bits: &pattern[..40], next: 0, strict: true };
        let mut b = BitBuf::new(&mut src);
        assert!(b.uint(32).is_ok());
        assert_eq!(b.bit(), Err(Error::RandomnessExhausted { element: 0 }));
    }

    #[test]
    fn ratio_compares_bits_with_the_expansion() {
        // 5/8 = 0.101: U = 0.0… < p; U = 0.11… > p; U = 0.100… < p; U = 0.101… agrees with
        // every digit of p, so U ≥ p.
        assert_eq!(ratio(&[0], 5, 8), (Ok(true), 1));
        assert_eq!(ratio(&[1, 1], 5, 8), (Ok(false), 2));
        assert_eq!(ratio(&[1, 0, 0], 5, 8), (Ok(true), 3));
        assert_eq!(ratio(&[1, 0, 1, 1, 1], 5, 8), (Ok(false), 3));
        // 1/3 = 0.010101…: U = 0.0100… (fourth digit 0 < 1) ⇒ true; U = 0.011 ⇒ false.
        assert_eq!(ratio(&[0, 1, 0, 0], 1, 3), (Ok(true), 4));
        assert_eq!(ratio(&[0, 1, 1], 1, 3), (Ok(false), 3));
        assert_eq!(ratio(&[1], 1, 3), (Ok(false), 1));
        // Agreement goes on as long as the expansion does, across 32-digit chunks.
        let mut long = [0u8; 80];
        for (i, b) in long.iter_mut().enumerate() {
            *b = (i % 2) as u8;
        }
        long[70] = 1; // digit 71 of 1/3 is 0
        assert_eq!(ratio(&long, 1, 3), (Ok(false), 71));
        // p = 0 and p = 1 read nothing.
        assert_eq!(ratio(&[], 0, 3), (Ok(false), 0));
        assert_eq!(ratio(&[], 3, 3), (Ok(true), 0));
    }

    #[test]
    fn chunked_comparison_reads_the_same_bits_as_one_digit_at_a_time() {
        let mut rng = ChaCha20Rng::from_seed([11; 32]);
        let dens = [
            2u64,
            3,
            5,
            7,
            8,
            12,
            64,
            96,
            1000,
            65_537,
            (1 << 31) + 11,
            1 << 32,
            (1 << 32) + 1,
            (1 << 40) * 3,
            0x1234_5678_9abc_def1,
            u64::MAX,
        ];
        for _ in 0..6000 {
            let den = dens[(rng.next_u32() % dens.len() as u32) as usize];
            // Small numerators too: their expansions start with long runs of zeros.
            let num = 1 + (rng.next_u64() >> (rng.next_u32() % 64)) % (den - 1);
            // Long runs of agreement: start the bits with the expansion of num/den itself.
            let mut bits = [0u8; 100];
            let agree = (rng.next_u32() % 100) as usize;
            let mut r = num;
            for (i, b) in bits.iter_mut().enumerate() {
                let digit = r >= den - r;
                r = if digit { r - (den - r) } else { r << 1 };
                *b = if i < agree { u8::from(digit) } else { (rng.next_u32() & 1) as u8 };
            }
            let chunked = run(&bits, |b| ratio_chunked(b, Digits::new(num, den), den));
            let bitwise = run(&bits, |b| ratio_bitwise_u64(b, num, den));
            assert_eq!(chunked, bitwise, "{num}/{den}");
            let inv = run(&bits, |b| bernoulli_inverse(b, den));
            assert_eq!(inv, run(&bits, |b| ratio_bitwise_u64(b, 1, den)), "1/{den}");
        }
    }

    #[test]
    fn ratio_never_overflows_near_the_top_of_the_range() {
        let den = u64::MAX;
        // p = (2^64 − 2)/(2^64 − 1) = 0.(1…1 0) repeating: 63 ones, then a zero. U = 0.1…1 1
        // (64 ones) exceeds p at digit 64; U = 0.1…1 0 0 falls below it at digit 65.
        let mut bits = [1u8; 65];
        assert_eq!(ratio(&bits, den - 1, den), (Ok(false), 64));
        bits[63] = 0;
        bits[64] = 0;
        assert_eq!(ratio(&bits, den - 1, den), (Ok(true), 65));
        assert_eq!(
            run(&[1, 1, 0], |b| ratio_bitwise_u128(b, u128::MAX - 1, u128::MAX)),
            (Ok(true), 3)
        );
    }

    #[test]
    fn ratio_probability_is_floor_of_p_times_two_to_the_depth() {
        // Over all 2^12 equally likely 12-bit prefixes, those decided `true` within them
        // number exactly ⌊p · 2^12⌋.
        for (num, den) in [(1u64, 3u64), (5, 8), (2, 7), (999, 1000), (1, 4096), (1, 5000)] {
            let mut count = 0u64;
            for u in 0..(1u32 << 12) {
                let bits: [u8; 12] = core::array::from_fn(|i| ((u >> (11 - i)) & 1) as u8);
                if let (Ok(true), used) = ratio(&bits, num, den) {
                    count += u64::from(used <= 12);
                }
            }
            assert_eq!(count, (num << 12) / den, "{num}/{den}");
        }
    }

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

    #[test]
    fn keyed_fill_equals_single_elements() {
        let s = KeyedStream::new(&NoiseKey::from_bytes([3; 32]), 4);
        let samplers = (Bernoulli::new(2, 7).unwrap(), BernoulliExp::new(5, 4).unwrap());
        let mut a = [false; 40];
        let mut b = [false; 40];
        samplers.0.fill_keyed(&s, 0, &mut a).unwrap();
        samplers.1.fill_keyed(&s, 0, &mut b).unwrap();
        for i in 0..40 {
            assert_eq!(a[i], samplers.0.sample_at(&s, i as u64).unwrap());
            assert_eq!(b[i], samplers.1.sample_at(&s, i as u64).unwrap());
        }
        let mut rng = ChaCha20Rng::from_seed([1; 32]);
        samplers.0.fill(&mut rng, &mut a).unwrap();
        assert!(a.iter().any(|&x| x) && a.iter().any(|&x| !x));
    }
}
