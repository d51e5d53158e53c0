//! Gamma and chi-square variates (Marsaglia & Tsang 2000), drawn word by word from a
//! [`BitSource`], so that a keyed element owns its own window of the stream.
//!
//! **Guarantee.** For shape `a ≥ 1` the sampler is Marsaglia–Tsang's squeeze/rejection
//! method, which is exact given exact normal and uniform variates: with `d = a − 1/3`,
//! `c = 1/√(9d)`, draw `x ~ N(0, 1)` and `u ~ U(0, 1]` until `v = (1 + c·x)³ > 0` and
//! (`u < 1 − 0.0331·x⁴` or `ln u < x²/2 + d·(1 − v + ln v)`); return `d·v`. For `a < 1` it
//! returns `G·u^{1/a}` with `G ~ Gamma(a + 1)` and a fresh `u` (the standard boost). Its cost
//! is the same for every shape (about 1.05 proposals), which is why the Bartlett sampler of
//! paper 000 (`gaussian_sampling_attention`) can draw `χ²_k` for `k` up to 10⁹ in constant
//! time. It is **not** a normal or Wilson–Hilferty approximation: those change the output law
//! and the privacy proof of paper 000 covers the exact law only (`docs/PAPERS.md` §0.4).
//!
//! Floating point: the normals are Box–Muller on 53-bit uniforms (bounded by `|x| < 8.57`,
//! missing tail mass ≈ 1e-17 per proposal) and the uniforms lie on the grid `2^-53·{1 … 2^53}`.
//! `1 − v + ln v` is evaluated as `ln(1 + w) − w` with `w = v − 1 = t(3 + t(3 + t))`,
//! `t = c·x`, so no cancellation grows with the shape (at `a = 5·10⁸`, `w ≈ 10⁻⁵`).
//!
//! **Words.** Every variate reads 32-bit words in order: a normal is 4 words (`u₁` from words
//! 0–1, the angle from words 2–3, exactly the `f64` [`Gaussian`](crate::sampling::Gaussian)
//! group, of which the cosine output is used), a uniform is 2 words (`open_uniform`). A
//! proposal is normal then uniform (6 words); the boost uniform follows the accepted proposal.
//!
//! No paper section by itself: the chi-square draws of Algorithm 2's Bartlett form
//! (`docs/PAPERS.md` §0.4, sampler P0-S3).

use rand_core::CryptoRng;

use crate::error::{Error, Result};
use crate::sampling::bit_source::{BitSource, ElementBits, RngBits};
use crate::sampling::keyed_stream::KeyedStream;
use crate::sampling::noise_float::{NoiseFloat, box_muller};

/// `Gamma(shape, 1)`.
///
/// ```
/// use dpattn_core::sampling::{Gamma, KeyedStream, NoiseKey};
/// let g = Gamma::new(2.5)?;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mean = (0..2000).map(|i| g.sample_at(&s, i).unwrap()).sum::<f64>() / 2000.0;
/// assert!((mean - 2.5).abs() < 0.2); // sd of the mean ≈ 0.035
/// assert!(Gamma::new(0.0).is_err() && Gamma::new(f64::INFINITY).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gamma {
    shape: f64,
}

/// The chi-square distribution `χ²_df = 2 · Gamma(df/2)`.
///
/// ```
/// use dpattn_core::sampling::{ChiSquare, KeyedStream, NoiseKey};
/// let c = ChiSquare::new(1e9)?; // constant time whatever the degrees of freedom
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let x = c.sample_at(&s, 0)?;
/// assert!((x - 1e9).abs() < 10.0 * 44_722.0); // sd = √(2·10⁹) ≈ 44,721
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChiSquare {
    half: Gamma,
}

fn uniform<B: BitSource + ?Sized>(bits: &mut B) -> Result<f64> {
    let w = [bits.next_bits(32)? as u32, bits.next_bits(32)? as u32];
    Ok(f64::open_uniform(&w))
}

/// A standard normal from 4 words (the cosine output of the `f64` Box–Muller group).
pub(crate) fn standard_normal<B: BitSource + ?Sized>(bits: &mut B) -> Result<f64> {
    let u1 = uniform(bits)?;
    let m2 = f64::uniform_int(&[bits.next_bits(32)? as u32, bits.next_bits(32)? as u32]);
    Ok(box_muller(u1, m2, f64::UNIFORM_BITS).0)
}

impl Gamma {
    /// Shape `a ∈ (0, ∞)` (scale 1).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] otherwise (NaN included).
    pub fn new(shape: f64) -> Result<Self> {
        if shape.is_finite() && shape > 0.0 {
            Ok(Self { shape })
        } else {
            Err(Error::OutOfRange { name: "gamma shape", value: shape, allowed: "(0, inf)" })
        }
    }

    /// The shape `a`.
    pub fn shape(&self) -> f64 {
        self.shape
    }

    /// One variate read from `bits` as the module docs describe.
    ///
    /// # Errors
    /// [`Error::RandomnessExhausted`] if a bounded source runs out (probability far below
    /// 2^-1000 for a keyed window).
    pub fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<f64> {
        if self.shape >= 1.0 {
            return marsaglia_tsang(self.shape, bits);
        }
        let g = marsaglia_tsang(self.shape + 1.0, bits)?;
        let u = uniform(bits)?;
        Ok(g * libm::pow(u, 1.0 / self.shape))
    }

    /// One variate from any cryptographic RNG (read with `next_u32`).
    ///
    /// # Errors
    /// None in practice (an RNG never runs out); the `Result` is that of
    /// [`sample_bits`](Self::sample_bits).
    pub fn sample<R: CryptoRng + ?Sized>(&self, rng: &mut R) -> Result<f64> {
        self.sample_bits(&mut RngBits::new(rng))
    }

    /// Element `element` of the draw defined by `stream`, from that element's window
    /// (`docs/RANDOMNESS.md` §4).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `element >= 2^40`; otherwise as
    /// [`sample_bits`](Self::sample_bits).
    pub fn sample_at(&self, stream: &KeyedStream, element: u64) -> Result<f64> {
        self.sample_bits(&mut ElementBits::new(stream, element)?)
    }
}

fn marsaglia_tsang<B: BitSource + ?Sized>(shape: f64, bits: &mut B) -> Result<f64> {
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / libm::sqrt(9.0 * d);
    loop {
        let x = standard_normal(bits)?;
        let u = uniform(bits)?;
        let t = c * x;
        if t <= -1.0 {
            continue;
        }
        let w = t * (3.0 + t * (3.0 + t)); // (1 + t)³ − 1
        let x2 = x * x;
        if u < 1.0 - 0.0331 * x2 * x2 || libm::log(u) < 0.5 * x2 + d * (libm::log1p(w) - w) {
            return Ok(d + d * w);
        }
    }
}

impl ChiSquare {
    /// Degrees of freedom `df ∈ (0, ∞)`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] otherwise.
    pub fn new(df: f64) -> Result<Self> {
        if df.is_finite() && df > 0.0 {
            Ok(Self { half: Gamma { shape: df / 2.0 } })
        } else {
            Err(Error::OutOfRange {
                name: "chi-square degrees of freedom",
                value: df,
                allowed: "(0, inf)",
            })
        }
    }

    /// The degrees of freedom.
    pub fn df(&self) -> f64 {
        2.0 * self.half.shape
    }

    /// One variate read from `bits` (`2 ·` the [`Gamma`] variate of shape `df/2`).
    ///
    /// # Errors
    /// As [`Gamma::sample_bits`].
    pub fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<f64> {
        Ok(2.0 * self.half.sample_bits(bits)?)
    }

    /// One variate from any cryptographic RNG.
    ///
    /// # Errors
    /// As [`Gamma::sample`].
    pub fn sample<R: CryptoRng + ?Sized>(&self, rng: &mut R) -> Result<f64> {
        Ok(2.0 * self.half.sample(rng)?)
    }

    /// Element `element` of the draw defined by `stream`, from its window.
    ///
    /// # Errors
    /// As [`Gamma::sample_at`].
    pub fn sample_at(&self, stream: &KeyedStream, element: u64) -> Result<f64> {
        Ok(2.0 * self.half.sample_at(stream, element)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;

    /// A source replaying fixed words, to pin which words a variate reads.
    struct Words<'a>(&'a [u32], usize);
    impl BitSource for Words<'_> {
        fn next_bit(&mut self) -> Result<bool> {
            unreachable!("the gamma sampler reads whole words")
        }
        fn next_bits(&mut self, n: u32) -> Result<u64> {
            assert_eq!(n, 32);
            let w = *self.0.get(self.1).ok_or(Error::RandomnessExhausted { element: 0 })?;
            self.1 += 1;
            Ok(u64::from(w))
        }
    }

    #[test]
    fn the_normal_is_the_cosine_output_of_the_f64_gaussian_group() {
        use crate::sampling::{FixedWordSampler, Gaussian};
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 9);
        let words: [u32; 4] = core::array::from_fn(|i| s.block(0)[i]);
        let z = standard_normal(&mut Words(&words, 0)).unwrap();
        assert_eq!(z, Gaussian::STANDARD.sample_at::<f64>(&s, 0).unwrap());
    }

    #[test]
    fn an_accepted_first_proposal_returns_d_times_v() {
        // Words giving x = 0 (u1 = 1 → r = 0) and u = 2^-53 (accepted by the squeeze):
        // the variate is d·(1 + 0)³ = a − 1/3, and exactly 6 words are read.
        let w = [u32::MAX, u32::MAX, 0, 0, 0, 0];
        let mut src = Words(&w, 0);
        let g = Gamma::new(7.0).unwrap().sample_bits(&mut src).unwrap();
        assert_eq!((g, src.1), (7.0 - 1.0 / 3.0, 6));
        // Below shape 1 the boost uniform (2 more words, here u = 1) follows.
        let w = [u32::MAX, u32::MAX, 0, 0, 0, 0, u32::MAX, u32::MAX];
        let mut src = Words(&w, 0);
        let g = Gamma::new(0.5).unwrap().sample_bits(&mut src).unwrap();
        assert_eq!((g, src.1), (1.5 - 1.0 / 3.0, 8));
    }

    #[test]
    fn keyed_elements_are_reproducible_and_independent_of_order() {
        let s = KeyedStream::new(&NoiseKey::for_replay([3; 32]), 1);
        let c = ChiSquare::new(3.0).unwrap();
        let a: [f64; 4] = core::array::from_fn(|i| c.sample_at(&s, i as u64).unwrap());
        assert_eq!(c.sample_at(&s, 2).unwrap(), a[2]);
        assert!(a.iter().all(|x| *x > 0.0 && x.is_finite()));
        assert_eq!(c.df(), 3.0);
    }
}
