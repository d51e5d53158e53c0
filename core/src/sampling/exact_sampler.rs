//! The [`ExactSampler`] trait every exact sampler implements, and [`BitBuf`], the
//! samplers' buffered view of a [`BitSource`].
//!
//! **Guarantee.** Each exact sampler ([`Bernoulli`](crate::sampling::Bernoulli),
//! [`BernoulliDyadic`](crate::sampling::BernoulliDyadic),
//! [`BernoulliExp`](crate::sampling::BernoulliExp),
//! [`DiscreteLaplace`](crate::sampling::DiscreteLaplace),
//! [`DiscreteGaussian`](crate::sampling::DiscreteGaussian),
//! [`PoissonSubsampling`](crate::sampling::PoissonSubsampling)) returns a sample with
//! *exactly* its stated distribution, given independent fair bits; the arithmetic is
//! fixed-width integer (`u64`/`u128`) and no floating-point value takes part in any
//! decision. The trait's provided methods only choose where the bits come from (any
//! `rand_core::CryptoRng`, or the per-element windows of a [`KeyedStream`]).
//!
//! **Reading bits (the randomness contract).** Every exact sampler reads its
//! [`BitSource`] with `next_bits(32)` — for the crate's sources, one whole 32-bit word at a
//! time — and uses the bits in the order the source delivers them (least significant bit
//! of each word first). A sample is a function of that bit sequence exactly as if the bits
//! were read one at a time by the algorithms in the samplers' module docs (the Bernoulli
//! samplers in `exact_bernoulli`, the lazy comparisons in `lazy_compare`); the bits of the
//! last 32-bit read that a sample does not use are discarded, so each sample starts on a
//! fresh word. Integers drawn from `k` bits (the uniform of the discrete Laplace) take the
//! first bit as the most significant. For speed, comparisons with `num/den` (`u64`) look
//! at 32 digits at once — the digits `⌊num·2^32/den⌋` (one division) against the next 32
//! bits, the first difference found with a leading-zero count — and consume exactly the
//! bits the one-digit-at-a-time comparison would (tested); only ratios wider than 64 bits
//! (a [`BernoulliExp`](crate::sampling::BernoulliExp) with such a `γ`) and dyadic
//! probabilities go one digit at a time. A CUDA port reproduces a keyed draw by following
//! the one-digit-at-a-time description with the same bit order.
//!
//! Background: `docs/PAPERS.md` A.2.1 (OpenDP's CKS20 samplers), A.2.5, A.2.7.

use rand_core::CryptoRng;

use crate::error::Result;
use crate::sampling::bit_source::{BitSource, ElementBits, RngBits, fill_windows};
use crate::sampling::keyed_stream::KeyedStream;

/// A sampler that draws from a [`BitSource`]; the provided methods are the API.
///
/// Implemented by every exact sampler of the crate ([`Bernoulli`](crate::sampling::Bernoulli),
/// [`BernoulliDyadic`](crate::sampling::BernoulliDyadic),
/// [`BernoulliExp`](crate::sampling::BernoulliExp),
/// [`DiscreteLaplace`](crate::sampling::DiscreteLaplace),
/// [`DiscreteGaussian`](crate::sampling::DiscreteGaussian),
/// [`PoissonSubsampling`](crate::sampling::PoissonSubsampling)). Keyed draws follow the
/// per-element window layout of [`ElementBits`]: element `i` reads only its own window,
/// so element `i` of [`fill_keyed`](Self::fill_keyed) with `first = 0` equals
/// [`sample_at(stream, i)`](Self::sample_at) whatever other elements consumed.
///
/// ```
/// use dpattn_core::sampling::{Bernoulli, ExactSampler, KeyedStream, NoiseKey};
/// let b = Bernoulli::new(1, 3)?;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
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
    /// [`Error::RandomnessExhausted`](crate::Error::RandomnessExhausted) if a bounded source
    /// runs out; sampler-specific overflow errors (probability far below 2^−60) as
    /// documented by the implementor.
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
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) if `element >= 2^40`; otherwise as
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
    /// [`Error::SizeOverflow`](crate::Error::SizeOverflow) if `first + out.len()` overflows,
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) if an element index reaches `2^40`;
    /// otherwise as [`sample_bits`](Self::sample_bits) (`out` is then partly written).
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
        let w = self.src.next_word()?;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::Error;
    use crate::sampling::NoiseKey;
    use crate::sampling::exact_bernoulli::{Bernoulli, BernoulliExp};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

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
    fn keyed_fill_equals_single_elements() {
        let s = KeyedStream::new(&NoiseKey::for_replay([3; 32]), 4);
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
