//! Random bits for the exact samplers: from any cryptographic RNG, or from one element's
//! window of a keyed stream.
//!
//! **Guarantee.** Both sources hand out the bits of their 32-bit words in a fixed order:
//! word by word, and within a word from the least significant bit up. [`ElementBits`] reads
//! only the window that `docs/RANDOMNESS.md` reserves for its element, so an element's
//! randomness does not depend on how many bits any other element used:
//!
//! * first the 16 words of block `element` of the stream (the *primary block*);
//! * then, if more are needed, the continuation blocks `(j + 1) · 2^40 + element` for
//!   `j = 0, 1, …, 2^24 − 2`.
//!
//! Elements therefore range over `[0, 2^40)`, and each has `(2^24 − 1) · 512` bits
//! (about 2^33). Running out is reported as [`Error::RandomnessExhausted`], never by reading
//! another element's bits. Fixed-word samplers do not use this module (see
//! [`crate::sampling::WordLayout`]); the two address spaces of one stream overlap, so one
//! (key, stream id) pair must serve one draw only.
//!
//! No paper section: this is part of the randomness contract.

use rand_core::CryptoRng;

use crate::error::{Error, Result};
use crate::sampling::keyed_stream::{BLOCK_WORDS, KeyedStream};

/// Exclusive upper bound of element indices in the per-element window layout.
pub const MAX_WINDOW_ELEMENTS: u64 = 1 << 40;

/// Continuation blocks per element.
pub const CONTINUATION_BLOCKS: u64 = (1 << 24) - 1;

/// A source of independent fair bits.
pub trait BitSource {
    /// The next bit.
    ///
    /// # Errors
    /// [`Error::RandomnessExhausted`] when a bounded source is used up.
    fn next_bit(&mut self) -> Result<bool>;

    /// The next `n` bits (`n <= 64`; larger `n` is treated as 64), the first drawn bit in the
    /// least significant place.
    ///
    /// # Errors
    /// As [`next_bit`](Self::next_bit).
    fn next_bits(&mut self, n: u32) -> Result<u64> {
        let n = n.min(64);
        let mut v = 0u64;
        for k in 0..n {
            v |= u64::from(self.next_bit()?) << k;
        }
        Ok(v)
    }

    /// The next 32 bits, `next_bits(32)` (the exact samplers read only whole words, so the
    /// crate's sources answer this without their bit buffers).
    ///
    /// # Errors
    /// As [`next_bit`](Self::next_bit).
    #[inline]
    fn next_word(&mut self) -> Result<u32> {
        Ok(self.next_bits(32)? as u32)
    }
}

/// Bit buffer over 32-bit words, shared by both sources.
#[derive(Debug, Clone, Copy, Default)]
struct WordBits {
    cur: u32,
    left: u32,
}

impl WordBits {
    #[inline]
    fn take(&mut self, n: u32) -> u64 {
        debug_assert!(n <= self.left && n <= 32);
        let v = if n == 32 { self.cur } else { self.cur & ((1u32 << n) - 1) };
        self.cur = if n == 32 { 0 } else { self.cur >> n };
        self.left -= n;
        u64::from(v)
    }

    #[inline]
    fn bits<F: FnMut() -> Result<u32>>(&mut self, n: u32, mut refill: F) -> Result<u64> {
        let n = n.min(64);
        let mut v = 0u64;
        let mut got = 0u32;
        while got < n {
            if self.left == 0 {
                self.cur = refill()?;
                self.left = 32;
            }
            let take = (n - got).min(self.left);
            v |= self.take(take) << got;
            got += take;
        }
        Ok(v)
    }
}

/// Bits from any `rand_core` cryptographic RNG, read with `next_u32`.
///
/// ```
/// use dpattn_core::sampling::{BitSource, RngBits};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let mut rng = ChaCha20Rng::from_seed([3; 32]);
/// let mut bits = RngBits::new(&mut rng);
/// let x = bits.next_bits(10)?;
/// assert!(x < 1024);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug)]
pub struct RngBits<'a, R: CryptoRng + ?Sized> {
    rng: &'a mut R,
    buf: WordBits,
}

impl<'a, R: CryptoRng + ?Sized> RngBits<'a, R> {
    /// Bits from `rng`.
    pub fn new(rng: &'a mut R) -> Self {
        Self { rng, buf: WordBits::default() }
    }
}

impl<R: CryptoRng + ?Sized> BitSource for RngBits<'_, R> {
    #[inline]
    fn next_bit(&mut self) -> Result<bool> {
        Ok(self.next_bits(1)? == 1)
    }

    #[inline]
    fn next_bits(&mut self, n: u32) -> Result<u64> {
        let rng = &mut *self.rng;
        self.buf.bits(n, || Ok(rng.next_u32()))
    }

    #[inline]
    fn next_word(&mut self) -> Result<u32> {
        if self.buf.left == 0 {
            return Ok(self.rng.next_u32());
        }
        Ok(self.next_bits(32)? as u32)
    }
}

/// The bits of one element's window of a keyed stream (see the module docs).
///
/// ```
/// use dpattn_core::sampling::{BitSource, ElementBits, KeyedStream, NoiseKey};
/// let s = KeyedStream::new(&NoiseKey::generate()?, 1);
/// let mut bits = ElementBits::new(&s, 5)?;
/// // The first 32 bits are word 0 of block 5.
/// assert_eq!(bits.next_bits(32)?, u64::from(s.block(5)[0]));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ElementBits<'s> {
    stream: &'s KeyedStream,
    element: u64,
    words: [u32; BLOCK_WORDS],
    next_word: usize,
    continuation: u64,
    buf: WordBits,
}

impl<'s> ElementBits<'s> {
    /// The window of `element`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `element >= 2^40`.
    pub fn new(stream: &'s KeyedStream, element: u64) -> Result<Self> {
        check_element(element)?;
        Ok(Self::with_primary(stream, element, stream.block(element)))
    }

    /// The window of `element` whose primary block the caller already generated (bulk fills
    /// generate primary blocks in batches, [`KeyedStream::blocks`]). `primary` must be
    /// `stream.block(element)`.
    pub(crate) fn with_primary(
        stream: &'s KeyedStream,
        element: u64,
        primary: [u32; BLOCK_WORDS],
    ) -> Self {
        Self {
            stream,
            element,
            words: primary,
            next_word: 0,
            continuation: 0,
            buf: WordBits::default(),
        }
    }

    /// The element this window belongs to.
    pub fn element(&self) -> u64 {
        self.element
    }

    /// Words consumed so far (including a partly used one).
    pub fn words_used(&self) -> u64 {
        self.continuation * BLOCK_WORDS as u64 + self.next_word as u64
    }

    #[inline]
    fn window_word(&mut self) -> Result<u32> {
        if self.next_word == BLOCK_WORDS {
            self.next_block()?;
        }
        let w = self.words[self.next_word];
        self.next_word += 1;
        Ok(w)
    }

    /// Moves to the next continuation block (rare: most samples stay in the primary one).
    #[cold]
    #[inline(never)]
    fn next_block(&mut self) -> Result<()> {
        if self.continuation == CONTINUATION_BLOCKS {
            return Err(Error::RandomnessExhausted { element: self.element });
        }
        self.continuation += 1;
        self.words = self.stream.block((self.continuation << 40) | self.element);
        self.next_word = 0;
        Ok(())
    }
}

impl BitSource for ElementBits<'_> {
    #[inline]
    fn next_bit(&mut self) -> Result<bool> {
        Ok(self.next_bits(1)? == 1)
    }

    #[inline]
    fn next_bits(&mut self, n: u32) -> Result<u64> {
        let mut buf = self.buf;
        let r = buf.bits(n, || self.window_word());
        self.buf = buf;
        r
    }

    #[inline]
    fn next_word(&mut self) -> Result<u32> {
        if self.buf.left == 0 {
            return self.window_word();
        }
        Ok(self.next_bits(32)? as u32)
    }
}

/// Elements `first .. first + len` (`len ≥ 1`) all have windows.
pub(crate) fn check_elements(first: u64, len: usize) -> Result<()> {
    let end = first
        .checked_add(len as u64)
        .ok_or(Error::SizeOverflow { what: "first element + length" })?;
    check_element(end - 1)
}

pub(crate) fn check_element(element: u64) -> Result<()> {
    if element >= MAX_WINDOW_ELEMENTS {
        return Err(Error::OutOfRange {
            name: "element",
            value: element as f64,
            allowed: "[0, 2^40)",
        });
    }
    Ok(())
}

/// Primary blocks a bulk fill generates per batch (1 KiB of stack; one AVX-512 batch).
const FILL_BATCH: usize = 16;

/// Runs `sample` once per element `first + k` of `out`, each on its own window, and stores
/// the results. Primary blocks are generated `FILL_BATCH` at a time with SIMD
/// ([`KeyedStream::blocks`]); continuation blocks one by one, on demand.
pub(crate) fn fill_windows<T>(
    stream: &KeyedStream,
    first: u64,
    out: &mut [T],
    mut sample: impl FnMut(&mut ElementBits<'_>) -> Result<T>,
) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    check_elements(first, out.len())?;
    let mut primary = [[0u32; BLOCK_WORDS]; FILL_BATCH];
    let mut element = first;
    for chunk in out.chunks_mut(FILL_BATCH) {
        let blocks = &mut primary[..chunk.len()];
        stream.blocks(element, blocks);
        for (o, block) in chunk.iter_mut().zip(blocks.iter()) {
            let mut bits = ElementBits::with_primary(stream, element, *block);
            *o = sample(&mut bits)?;
            element += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    #[test]
    fn rng_bits_are_words_lsb_first() {
        let mut a = ChaCha20Rng::from_seed([5; 32]);
        let mut b = a.clone();
        let mut bits = RngBits::new(&mut a);
        let w0 = u64::from(b.next_u32());
        let w1 = u64::from(b.next_u32());
        assert_eq!(bits.next_bits(3).unwrap(), w0 & 7);
        assert_eq!(bits.next_bit().unwrap(), (w0 >> 3) & 1 == 1);
        // 40 bits span the rest of word 0 (28 bits) and 12 bits of word 1.
        assert_eq!(bits.next_bits(40).unwrap(), (w0 >> 4) | ((w1 & 0xfff) << 28));
        assert_eq!(bits.next_bits(64).unwrap() & 0xf_ffff, w1 >> 12);
    }

    #[test]
    fn element_window_reads_primary_then_continuation_blocks() {
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 77);
        let e = 12345u64;
        let mut bits = ElementBits::new(&s, e).unwrap();
        for w in s.block(e) {
            assert_eq!(bits.next_bits(32).unwrap(), u64::from(w));
        }
        for j in 1..=2u64 {
            for w in s.block((j << 40) | e) {
                assert_eq!(bits.next_bits(32).unwrap(), u64::from(w));
            }
        }
        assert_eq!(bits.words_used(), 48);
    }

    #[test]
    fn element_window_exhaustion_is_an_error() {
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 0);
        let mut bits = ElementBits::new(&s, 3).unwrap();
        bits.continuation = CONTINUATION_BLOCKS;
        bits.next_word = BLOCK_WORDS;
        assert_eq!(bits.next_bit(), Err(Error::RandomnessExhausted { element: 3 }));
    }

    #[test]
    fn elements_outside_the_window_layout_are_rejected() {
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 0);
        assert!(ElementBits::new(&s, MAX_WINDOW_ELEMENTS - 1).is_ok());
        assert!(matches!(ElementBits::new(&s, MAX_WINDOW_ELEMENTS), Err(Error::OutOfRange { .. })));
        let mut out = [0u8; 2];
        let r = fill_windows(&s, MAX_WINDOW_ELEMENTS - 1, &mut out, |b| Ok(b.next_bits(8)? as u8));
        assert!(matches!(r, Err(Error::OutOfRange { .. })));
        let r = fill_windows(&s, u64::MAX, &mut out, |b| Ok(b.next_bits(8)? as u8));
        assert!(matches!(r, Err(Error::SizeOverflow { .. })));
    }

    #[test]
    fn bulk_windows_equal_single_windows() {
        let s = KeyedStream::new(&NoiseKey::for_replay([4; 32]), 9);
        let mut out = [0u64; 7];
        // Each element reads 600 bits: the primary block and one continuation block.
        fill_windows(&s, 100, &mut out, |b| {
            let mut x = 0u64;
            for _ in 0..10 {
                x ^= b.next_bits(60)?;
            }
            Ok(x)
        })
        .unwrap();
        for (k, &o) in out.iter().enumerate() {
            let mut b = ElementBits::new(&s, 100 + k as u64).unwrap();
            let mut x = 0u64;
            for _ in 0..10 {
                x ^= b.next_bits(60).unwrap();
            }
            assert_eq!(o, x);
        }
    }

    #[test]
    fn bulk_windows_across_primary_batches_equal_single_windows() {
        // Lengths that end inside, at, and past a batch of primary blocks, up to the last
        // element of the layout; each element reads 40 bits of its primary block.
        let s = KeyedStream::new(&NoiseKey::for_replay([6; 32]), 3);
        for (first, len) in [(0u64, 37usize), (5, 16), (1000, 33), (MAX_WINDOW_ELEMENTS - 50, 50)] {
            let mut out = [0u64; 50];
            fill_windows(&s, first, &mut out[..len], |b| b.next_bits(40)).unwrap();
            for (k, &o) in out[..len].iter().enumerate() {
                let mut b = ElementBits::new(&s, first + k as u64).unwrap();
                assert_eq!(o, b.next_bits(40).unwrap(), "element {}", first + k as u64);
            }
        }
    }
}
