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

use rand_core::CryptoRng;

use crate::batched::BatchedMut;
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
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
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

    /// Checks that every output in `T` is finite: the samplers of this crate refuse a scale
    /// whose largest draw overflows `T` (their constructors already refuse one that
    /// overflows `f64`). [`fill_keyed`](Self::fill_keyed),
    /// [`fill_keyed_batched`](Self::fill_keyed_batched) and [`sample_at`](Self::sample_at)
    /// call it; call it before [`fill`](Self::fill) or [`sample`](Self::sample) with `f32`
    /// output and a scale above about `10^37`, which cannot report an error. The default
    /// accepts everything.
    ///
    /// ```
    /// use dpattn_core::sampling::{FixedWordSampler, Gaussian};
    /// let g = Gaussian::new(1e38)?; // finite draws in f64 ...
    /// assert!(g.check_output::<f64>().is_ok());
    /// assert!(g.check_output::<f32>().is_err()); // ... but up to 5.8e38 > f32::MAX in f32
    /// assert!(Gaussian::new(1e308).is_err()); // 8.6e308 overflows f64 itself
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the scale.
    fn check_output<T: NoiseFloat>(&self) -> Result<()> {
        Ok(())
    }

    /// The outputs of `n` consecutive groups from their `n · words` words, into
    /// `out[..n · elements]`. The default calls [`group`](Self::group) per group; samplers
    /// override it with a loop the compiler can vectorise. Must equal the default.
    fn groups<T: NoiseFloat>(&self, words: &[u32], out: &mut [T]) {
        let l = self.layout::<T>();
        let (nw, ne) = (l.words as usize, l.elements as usize);
        for (w, o) in words.chunks_exact(nw).zip(out.chunks_exact_mut(ne)) {
            let g = self.group::<T>(w);
            o.copy_from_slice(&g[..ne]);
        }
    }

    /// One value from any cryptographic RNG (consumes one whole group of words). Finite
    /// when [`check_output`](Self::check_output) passes for `T` (always for `f64`).
    fn sample<T: NoiseFloat, R: CryptoRng + ?Sized>(&self, rng: &mut R) -> T {
        let l = self.layout::<T>();
        let mut w = [0u32; MAX_GROUP_WORDS];
        for x in &mut w[..l.words as usize] {
            *x = rng.next_u32();
        }
        self.group::<T>(&w[..l.words as usize])[0]
    }

    /// Fills `out` from any cryptographic RNG, group after group (the RNG's words are read
    /// in `next_u32` order). Finite when [`check_output`](Self::check_output) passes for
    /// `T` (always for `f64`).
    fn fill<T: NoiseFloat, R: CryptoRng + ?Sized>(&self, rng: &mut R, out: &mut [T]) {
        fill_batched(self, |w| read_words(rng, w), 0, out);
    }

    /// Fills `out` with elements `first, first + 1, …` of the draw defined by `stream`:
    /// element `i` uses exactly the words the layout assigns to it, wherever the fill starts.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] if `first + out.len()` overflows `u64`; those of
    /// [`check_output`](Self::check_output) (`out` is then untouched).
    fn fill_keyed<T: NoiseFloat>(
        &self,
        stream: &KeyedStream,
        first: u64,
        out: &mut [T],
    ) -> Result<()> {
        self.check_output::<T>()?;
        if out.is_empty() {
            return Ok(());
        }
        first
            .checked_add(out.len() as u64)
            .ok_or(Error::SizeOverflow { what: "first element + length" })?;
        let l = self.layout::<T>();
        let (group, within) = l.group_of(first);
        let mut reader = stream.reader_at(l.first_word(group))?;
        fill_batched(self, |w| read_words(&mut reader, w), within as usize, out);
        Ok(())
    }

    /// Fills a `[batch, heads, seq, dim]` tensor with the draw defined by `stream`: element
    /// `(b, h, s, d)` receives element [`Layout4::logical_index`](crate::Layout4::logical_index)
    /// of the draw, whatever the output's strides (`docs/RANDOMNESS.md` §2).
    ///
    /// ```
    /// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
    /// use dpattn_core::{BatchedMut, Layout4};
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
    /// // A [1, 2, 3, 4] tensor stored heads-last (bshd): strides [24, 4, 8, 1].
    /// let mut buf = [0f32; 24];
    /// let layout = Layout4::new([1, 2, 3, 4], [24, 4, 8, 1])?;
    /// Gaussian::STANDARD.fill_keyed_batched(&s, BatchedMut::new(&mut buf, layout)?)?;
    /// // Element (0, 1, 0, 0) is logical element 12 and lives at offset 4.
    /// assert_eq!(buf[4], Gaussian::STANDARD.sample_at::<f32>(&s, 12)?);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// None beyond those of [`fill_keyed`](Self::fill_keyed) (a refused scale leaves `out`
    /// untouched).
    fn fill_keyed_batched<T: NoiseFloat>(
        &self,
        stream: &KeyedStream,
        mut out: BatchedMut<'_, T>,
    ) -> Result<()> {
        self.check_output::<T>()?;
        let layout = *out.layout();
        let [nb, nh, ns, _] = layout.shape();
        for b in 0..nb {
            for h in 0..nh {
                let mut head = out.head_mut(b, h);
                for s in 0..ns {
                    self.fill_keyed(stream, layout.logical_index(b, h, s, 0), head.row_mut(s))?;
                }
            }
        }
        Ok(())
    }

    /// Element `element` of the draw defined by `stream`, computed on its own (one ChaCha20
    /// block); what a GPU thread computes.
    ///
    /// # Errors
    /// Those of [`check_output`](Self::check_output).
    fn sample_at<T: NoiseFloat>(&self, stream: &KeyedStream, element: u64) -> Result<T> {
        self.check_output::<T>()?;
        let l = self.layout::<T>();
        let (group, within) = l.group_of(element);
        let pos = l.first_word(group);
        let block = stream.block((pos / BLOCK_WORDS as u128) as u64);
        let start = (pos % BLOCK_WORDS as u128) as usize;
        let g = self.group::<T>(&block[start..start + l.words as usize]);
        Ok(g[within as usize])
    }
}

/// Groups per batch of the bulk fills (a 1 KiB word buffer on the stack).
const BATCH_GROUPS: usize = 64;

/// Reads `out.len()` words in `next_u32` order (through `fill_bytes`, which copies from the
/// generator's block buffer).
#[inline]
fn read_words<R: CryptoRng + ?Sized>(rng: &mut R, out: &mut [u32]) {
    let mut bytes = [0u8; BATCH_GROUPS * MAX_GROUP_WORDS * 4];
    let bytes = &mut bytes[..out.len() * 4];
    rng.fill_bytes(bytes);
    for (w, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Fills `out` batch by batch: words for up to [`BATCH_GROUPS`] groups, then
/// [`FixedWordSampler::groups`]; the first `skip` outputs of the first group are dropped.
fn fill_batched<S: FixedWordSampler + ?Sized, T: NoiseFloat>(
    s: &S,
    mut next_words: impl FnMut(&mut [u32]),
    mut skip: usize,
    out: &mut [T],
) {
    let l = s.layout::<T>();
    let (nw, ne) = (l.words as usize, l.elements as usize);
    let mut words = [0u32; BATCH_GROUPS * MAX_GROUP_WORDS];
    let mut vals = [T::from_f64(0.0); BATCH_GROUPS * 2];
    let mut rest = out;
    while !rest.is_empty() {
        let groups = (skip + rest.len()).div_ceil(ne).min(BATCH_GROUPS);
        next_words(&mut words[..groups * nw]);
        s.groups::<T>(&words[..groups * nw], &mut vals[..groups * ne]);
        let take = (groups * ne - skip).min(rest.len());
        let (head, tail) = rest.split_at_mut(take);
        head.copy_from_slice(&vals[skip..skip + take]);
        rest = tail;
        skip = 0;
    }
}
