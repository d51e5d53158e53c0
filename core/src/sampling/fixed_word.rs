//! Bulk and addressable drawing for samplers that consume a fixed number of stream words
//! per group of outputs (uniform, exponential, Gaussian, Laplace, truncated Laplace).
//!
//! **Guarantee.** A sampler implements two pure functions, [`FixedWordSampler::layout`] and
//! [`FixedWordSampler::group`]; every way of drawing is derived from them, so the four
//! entry points agree: element `i` of [`fill_keyed`](FixedWordSampler::fill_keyed) with
//! `first = 0` equals [`sample_at(stream, i)`](FixedWordSampler::sample_at) bit for bit, and
//! [`fill`](FixedWordSampler::fill) on a `ChaCha20Rng` positioned at word 0 of the stream
//! produces the same values as `fill_keyed` from element 0 (tested for every sampler).
//!
//! No paper section: part of the randomness contract in `docs/RANDOMNESS.md`.

use rand_core::{CryptoRng, Rng as _};

use crate::error::{Error, Result};
use crate::sampling::keyed_stream::{BLOCK_WORDS, KeyedStream, WordLayout};
use crate::sampling::noise_float::NoiseFloat;

/// Largest number of words one group may consume (a group never straddles a block).
pub const MAX_GROUP_WORDS: usize = 4;

/// A sampler whose output group `g` is a pure function of the words
/// `[g · words, (g + 1) · words)` of the stream.
///
/// Implementations are in this crate ([`Uniform`](crate::sampling::Uniform),
/// [`Exponential`](crate::sampling::Exponential), [`Gaussian`](crate::sampling::Gaussian),
/// [`Laplace`](crate::sampling::Laplace),
/// [`TruncatedLaplace`](crate::sampling::TruncatedLaplace)); the provided methods are the
/// API.
///
/// ```
/// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
/// let g = Gaussian::new(2.0)?;
/// let s = KeyedStream::new(&NoiseKey::from_bytes([1; 32]), 0);
/// let mut out = [0f32; 5];
/// g.fill_keyed(&s, 10, &mut out)?;
/// assert_eq!(out[3], g.sample_at::<f32>(&s, 13)?);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub trait FixedWordSampler {
    /// The word layout for output type `T`. `words` is 1, 2 or 4 and `elements` 1 or 2.
    fn layout<T: NoiseFloat>(&self) -> WordLayout;

    /// The outputs of one group made from its `layout::<T>().words` words; only the first
    /// `layout::<T>().elements` entries are meaningful.
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2];

    /// One value from any cryptographic RNG (consumes one whole group of words).
    fn sample<T: NoiseFloat, R: CryptoRng + ?Sized>(&self, rng: &mut R) -> T {
        let l = self.layout::<T>();
        let mut w = [0u32; MAX_GROUP_WORDS];
        for x in &mut w[..l.words as usize] {
            *x = rng.next_u32();
        }
        self.group::<T>(&w[..l.words as usize])[0]
    }

    /// Fills `out` from any cryptographic RNG, group after group.
    fn fill<T: NoiseFloat, R: CryptoRng + ?Sized>(&self, rng: &mut R, out: &mut [T]) {
        let l = self.layout::<T>();
        let (nw, ne) = (l.words as usize, l.elements as usize);
        let mut w = [0u32; MAX_GROUP_WORDS];
        for chunk in out.chunks_mut(ne) {
            for x in &mut w[..nw] {
                *x = rng.next_u32();
            }
            let g = self.group::<T>(&w[..nw]);
            chunk.copy_from_slice(&g[..chunk.len()]);
        }
    }

    /// Fills `out` with elements `first, first + 1, …` of the draw defined by `stream`:
    /// element `i` uses exactly the words the layout assigns to it, wherever the fill starts.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] if `first + out.len()` overflows `u64`.
    fn fill_keyed<T: NoiseFloat>(
        &self,
        stream: &KeyedStream,
        first: u64,
        out: &mut [T],
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        first
            .checked_add(out.len() as u64)
            .ok_or(Error::SizeOverflow { what: "first element + length" })?;
        let l = self.layout::<T>();
        let (nw, ne) = (l.words as usize, l.elements as usize);
        let (group, within) = l.group_of(first);
        let mut reader = stream.reader_at(l.first_word(group))?;
        let mut w = [0u32; MAX_GROUP_WORDS];
        let mut rest = out;
        let mut skip = within as usize;
        while !rest.is_empty() {
            for x in &mut w[..nw] {
                *x = reader.next_u32();
            }
            let g = self.group::<T>(&w[..nw]);
            let take = (ne - skip).min(rest.len());
            let (head, tail) = rest.split_at_mut(take);
            head.copy_from_slice(&g[skip..skip + take]);
            rest = tail;
            skip = 0;
        }
        Ok(())
    }

    /// Element `element` of the draw defined by `stream`, computed on its own (one ChaCha20
    /// block); what a GPU thread computes.
    ///
    /// # Errors
    /// None for the layouts in this crate; the `Result` guards future layouts.
    fn sample_at<T: NoiseFloat>(&self, stream: &KeyedStream, element: u64) -> Result<T> {
        let l = self.layout::<T>();
        let (group, within) = l.group_of(element);
        let pos = l.first_word(group);
        let block = stream.block((pos / BLOCK_WORDS as u128) as u64);
        let start = (pos % BLOCK_WORDS as u128) as usize;
        let g = self.group::<T>(&block[start..start + l.words as usize]);
        Ok(g[within as usize])
    }
}
