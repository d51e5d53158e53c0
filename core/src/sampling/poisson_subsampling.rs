//! Poisson subsampling: every record is included independently with probability `q`.
//!
//! **Guarantee.** Each inclusion is an exact `Bernoulli(q)` draw ([`BernoulliDyadic`]):
//! the `f64` rate is taken as the dyadic rational it is (`0.01` means the double nearest
//! 0.01, which is what an accountant given the same `f64` assumes), compared lazily with
//! fair bits, with no floating-point decision. Inclusions are independent across records,
//! which is what privacy amplification by Poisson subsampling requires (the model of
//! `dp_accounting`'s `PoissonSampledDpEvent`: `docs/PAPERS.md` A.2.2).
//!
//! Record `i` of a keyed draw uses the window of element `i` (one ChaCha20 block; the
//! expected use is 2 bits), so a selection can be recomputed, or split across devices, by
//! record index. The RNG forms draw records in order, each from a fresh 32-bit read (see
//! [`ExactSampler`]). `q = 0` and `q = 1` read no randomness.

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use rand_core::CryptoRng;

use crate::error::{Error, Result};
use crate::sampling::bit_source::BitSource;
#[cfg(feature = "alloc")]
use crate::sampling::bit_source::{RngBits, fill_windows};
use crate::sampling::exact_bernoulli::BernoulliDyadic;
use crate::sampling::exact_sampler::{BitBuf, ExactSampler};
use crate::sampling::keyed_stream::KeyedStream;

/// Poisson subsampling with rate `q ∈ [0, 1]`; as an [`ExactSampler`], one sample is one
/// record's inclusion.
///
/// ```
/// use dpattn_core::sampling::{KeyedStream, NoiseKey, PoissonSubsampling};
/// let p = PoissonSubsampling::new(0.25)?;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 9);
/// let mut mask = [false; 2000];
/// p.select_keyed(&s, 0, &mut mask)?;
/// let n = mask.iter().filter(|&&m| m).count();
/// assert!((400..600).contains(&n));
/// // Records can be recomputed one by one.
/// assert_eq!(p.included_at(&s, 17)?, mask[17]);
/// assert!(PoissonSubsampling::new(1.5).is_err() && PoissonSubsampling::new(f64::NAN).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoissonSubsampling {
    rate: BernoulliDyadic,
}

impl PoissonSubsampling {
    /// Sampling rate `q ∈ [0, 1]`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `q` is NaN or outside `[0, 1]`.
    pub fn new(q: f64) -> Result<Self> {
        BernoulliDyadic::new(q).map(|rate| Self { rate }).map_err(|_| Error::OutOfRange {
            name: "sampling rate q",
            value: q,
            allowed: "[0, 1]",
        })
    }

    /// `q`.
    ///
    /// ```
    /// # use dpattn_core::sampling::PoissonSubsampling;
    /// assert_eq!(PoissonSubsampling::new(0.01)?.rate(), 0.01);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rate(&self) -> f64 {
        self.rate.probability()
    }

    /// Whether record `record` of the draw defined by `stream` is included.
    ///
    /// ```
    /// # use dpattn_core::sampling::{KeyedStream, NoiseKey, PoissonSubsampling};
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
    /// assert!(PoissonSubsampling::new(1.0)?.included_at(&s, 5)?);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `record >= 2^40`.
    pub fn included_at(&self, stream: &KeyedStream, record: u64) -> Result<bool> {
        self.sample_at(stream, record)
    }

    /// Sets `mask[i]` to whether record `i` is included, drawing from `rng`.
    ///
    /// ```
    /// # use dpattn_core::sampling::PoissonSubsampling;
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    /// let mut mask = [true; 100];
    /// PoissonSubsampling::new(0.0)?.select(&mut ChaCha20Rng::from_seed([0; 32]), &mut mask)?;
    /// assert!(mask.iter().all(|&m| !m));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// None in practice (the `Result` is the [`ExactSampler`] contract).
    pub fn select<R: CryptoRng + ?Sized>(&self, rng: &mut R, mask: &mut [bool]) -> Result<()> {
        self.fill(rng, mask)
    }

    /// Sets `mask[i]` to whether record `first + i` of the draw defined by `stream` is
    /// included.
    ///
    /// ```
    /// # use dpattn_core::sampling::{KeyedStream, NoiseKey, PoissonSubsampling};
    /// let p = PoissonSubsampling::new(0.5)?;
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 1);
    /// let (mut all, mut tail) = ([false; 64], [false; 24]);
    /// p.select_keyed(&s, 0, &mut all)?;
    /// p.select_keyed(&s, 40, &mut tail)?;
    /// assert_eq!(tail[..], all[40..]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] if `first + mask.len()` overflows, [`Error::OutOfRange`] if a
    /// record index reaches `2^40`.
    pub fn select_keyed(&self, stream: &KeyedStream, first: u64, mask: &mut [bool]) -> Result<()> {
        self.fill_keyed(stream, first, mask)
    }

    /// The included records among `0 .. n`, in increasing order, drawing from `rng` (the
    /// same draws as [`select`](Self::select) on a mask of length `n`).
    ///
    /// ```
    /// # use dpattn_core::sampling::PoissonSubsampling;
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    /// let p = PoissonSubsampling::new(0.1)?;
    /// let idx = p.indices(&mut ChaCha20Rng::from_seed([4; 32]), 1000)?;
    /// let mut mask = [false; 1000];
    /// p.select(&mut ChaCha20Rng::from_seed([4; 32]), &mut mask)?;
    /// assert!(idx.iter().all(|&i| mask[i]) && idx.len() == mask.iter().filter(|&&m| m).count());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::AllocationFailed`] if the output cannot grow.
    #[cfg(feature = "alloc")]
    pub fn indices<R: CryptoRng + ?Sized>(&self, rng: &mut R, n: usize) -> Result<Vec<usize>> {
        let mut bits = RngBits::new(rng);
        let mut out = Vec::new();
        for i in 0..n {
            if self.sample_bits(&mut bits)? {
                push(&mut out, i)?;
            }
        }
        Ok(out)
    }

    /// The included records among `first .. first + n` of the draw defined by `stream`,
    /// as offsets from `first` (`i` stands for record `first + i`), in increasing order.
    ///
    /// ```
    /// # use dpattn_core::sampling::{KeyedStream, NoiseKey, PoissonSubsampling};
    /// let p = PoissonSubsampling::new(0.3)?;
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 2);
    /// let idx = p.indices_keyed(&s, 100, 500)?;
    /// assert!(idx.iter().all(|&i| p.included_at(&s, 100 + i as u64).unwrap()));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`select_keyed`](Self::select_keyed), and [`Error::AllocationFailed`] if the
    /// output cannot grow.
    #[cfg(feature = "alloc")]
    pub fn indices_keyed(&self, stream: &KeyedStream, first: u64, n: usize) -> Result<Vec<usize>> {
        const CHUNK: usize = 256;
        let mut mask = [false; CHUNK];
        let mut out = Vec::new();
        let mut off = 0usize;
        while off < n {
            let len = CHUNK.min(n - off);
            let start = first
                .checked_add(off as u64)
                .ok_or(Error::SizeOverflow { what: "first element + length" })?;
            fill_windows(stream, start, &mut mask[..len], |b| self.sample_bits(b))?;
            for (j, _) in mask[..len].iter().enumerate().filter(|(_, m)| **m) {
                push(&mut out, off + j)?;
            }
            off += len;
        }
        Ok(out)
    }
}

#[cfg(feature = "alloc")]
fn push(out: &mut Vec<usize>, i: usize) -> Result<()> {
    if out.len() == out.capacity() {
        let extra = out.capacity().max(64);
        out.try_reserve(extra).map_err(|_| Error::AllocationFailed {
            what: "subsample indices",
            elements: out.len() + extra,
        })?;
    }
    out.push(i);
    Ok(())
}

impl ExactSampler for PoissonSubsampling {
    type Output = bool;

    /// Whether one record is included.
    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<bool> {
        self.rate.draw(&mut BitBuf::new(bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn rates_are_validated() {
        for q in [-0.1, 1.1, f64::NAN, f64::INFINITY, -f64::INFINITY] {
            assert!(matches!(PoissonSubsampling::new(q), Err(Error::OutOfRange { .. })), "{q}");
        }
        assert_eq!(PoissonSubsampling::new(-0.0).unwrap().rate(), 0.0);
    }

    #[test]
    fn extreme_rates_read_no_randomness() {
        let s = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
        let mut mask = [false; 10];
        PoissonSubsampling::new(1.0).unwrap().select_keyed(&s, 0, &mut mask).unwrap();
        assert!(mask.iter().all(|&m| m));
        let mut rng = ChaCha20Rng::from_seed([1; 32]);
        let before = rng.clone();
        PoissonSubsampling::new(0.0).unwrap().select(&mut rng, &mut mask).unwrap();
        assert!(mask.iter().all(|&m| !m));
        assert_eq!(rng, before);
    }

    #[test]
    fn keyed_selection_equals_single_records() {
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 5);
        let p = PoissonSubsampling::new(0.3).unwrap();
        let mut mask = [false; 300];
        p.select_keyed(&s, 1000, &mut mask).unwrap();
        for (i, &m) in mask.iter().enumerate() {
            assert_eq!(m, p.included_at(&s, 1000 + i as u64).unwrap());
        }
        assert!(p.select_keyed(&s, (1 << 40) - 1, &mut mask).is_err());
        assert!(p.select_keyed(&s, u64::MAX, &mut mask).is_err());
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn indices_match_masks() {
        let s = KeyedStream::new(&NoiseKey::for_replay([7; 32]), 0);
        let p = PoissonSubsampling::new(0.2).unwrap();
        let n = 700; // several chunks
        let idx = p.indices_keyed(&s, 3, n).unwrap();
        let mut mask = [false; 700];
        p.select_keyed(&s, 3, &mut mask).unwrap();
        let from_mask: Vec<usize> = (0..n).filter(|&i| mask[i]).collect();
        assert_eq!(idx, from_mask);
        let idx = p.indices(&mut ChaCha20Rng::from_seed([8; 32]), n).unwrap();
        p.select(&mut ChaCha20Rng::from_seed([8; 32]), &mut mask).unwrap();
        let from_mask: Vec<usize> = (0..n).filter(|&i| mask[i]).collect();
        assert_eq!(idx, from_mask);
        assert!(p.indices_keyed(&s, (1 << 40) - 10, 20).is_err());
    }
}
