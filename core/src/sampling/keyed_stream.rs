//! The addressable ChaCha20 noise stream every sampler draws from by default.
//!
//! **Guarantee.** A [`KeyedStream`] is the ChaCha20 keystream (20 rounds, Bernstein's original
//! layout: 64-bit block counter, 64-bit stream id) under a 256-bit [`NoiseKey`]. It is word
//! for word the stream of `rand_chacha::ChaCha20Rng` seeded with the same key, switched to the
//! same stream with `set_stream`, at the same word position (`set_word_pos`), and its blocks
//! equal the RFC 8439 block test vectors (tested). Any word can be computed on its own
//! ([`KeyedStream::block`], [`KeyedStream::word`]), which is what lets a GPU thread draw
//! element `i` of a tensor without drawing elements `0..i`.
//!
//! **Contract.** Which words element `i` of a draw consumes is fixed per sampler by
//! `docs/RANDOMNESS.md` (fixed-word samplers: [`WordLayout`]; exact samplers: one window per
//! element, [`crate::sampling::ElementBits`]). Indices are logical (row-major over the
//! tensor's logical shape), never thread ids.
//!
//! **Security.** The noise is as unpredictable as the key is secret ([`NoiseKey`]: generated
//! by the operating system or a caller's `CryptoRng`; fixed bytes only for replay and tests).
//! Never use the same (key, stream id) pair for two different draws: the noise would repeat —
//! a [`Session`](crate::session::Session) hands out stream ids so that this cannot happen.
//!
//! No paper section: this is the library's randomness contract (issue "noise samplers").

use core::fmt;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

use crate::error::{Error, Result};
use crate::sampling::chacha_simd::chacha20_blocks;
use crate::sampling::noise_key::NoiseKey;

/// Words in one ChaCha20 block.
pub const BLOCK_WORDS: usize = 16;

/// One past the largest word position of a stream: 2^64 blocks of 16 words.
pub const STREAM_WORDS: u128 = 1 << 68;

/// ChaCha20 state words 0–3, "expand 32-byte k".
pub(crate) const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// One draw's randomness: the ChaCha20 keystream of a key and a 64-bit stream id.
///
/// ```
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::{Rng, SeedableRng};
///
/// let key = NoiseKey::generate()?;
/// let s = KeyedStream::new(&key, 42);
/// let mut rng = ChaCha20Rng::from_seed(*key.expose_bytes());
/// rng.set_stream(42);
/// rng.set_word_pos(1000);
/// assert_eq!(s.word(1000)?, rng.next_u32());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Clone)]
pub struct KeyedStream {
    key: NoiseKey,
    key_words: [u32; 8],
    stream: u64,
}

impl Drop for KeyedStream {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key_words);
    }
}

impl fmt::Debug for KeyedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedStream").field("key", &self.key).field("stream", &self.stream).finish()
    }
}

impl KeyedStream {
    /// The stream `stream` under `key`.
    pub fn new(key: &NoiseKey, stream: u64) -> Self {
        Self { key: key.clone(), key_words: key.words(), stream }
    }

    /// The key as the eight little-endian words of ChaCha20 state words 4–11 (what a GPU
    /// kernel takes by value).
    ///
    /// ```
    /// use dpattn_core::sampling::{KeyedStream, NoiseKey, chacha20_block};
    /// let s = KeyedStream::new(&NoiseKey::for_replay([1; 32]), 5); // a test vector
    /// assert_eq!(s.key_words()[0], 0x0101_0101);
    /// assert_eq!(chacha20_block(&s.key_words(), 3, 5), s.block(3));
    /// ```
    pub fn key_words(&self) -> [u32; 8] {
        self.key_words
    }

    /// The stream id.
    pub fn stream_id(&self) -> u64 {
        self.stream
    }

    /// The key.
    pub fn key(&self) -> &NoiseKey {
        &self.key
    }

    /// Block `counter` of the stream: its 16 words, in stream order.
    pub fn block(&self, counter: u64) -> [u32; BLOCK_WORDS] {
        chacha20_block(&self.key_words, counter, self.stream)
    }

    /// Blocks `first_counter, first_counter + 1, …` of the stream (the counter wraps
    /// modulo 2^64), one per element of `out`: `out[i] == self.block(first_counter + i)`.
    /// Computed several blocks at a time with SIMD where the CPU has it
    /// ([`chacha20_blocks`](crate::sampling::chacha20_blocks)).
    ///
    /// ```
    /// use dpattn_core::sampling::{KeyedStream, NoiseKey};
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 7);
    /// let mut out = [[0u32; 16]; 20];
    /// s.blocks(1000, &mut out);
    /// assert_eq!(out[19], s.block(1019));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn blocks(&self, first_counter: u64, out: &mut [[u32; BLOCK_WORDS]]) {
        chacha20_blocks(&self.key_words, self.stream, first_counter, out);
    }

    /// The word at position `pos` (block `pos / 16`, word `pos % 16`).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `pos >= 2^68`.
    pub fn word(&self, pos: u128) -> Result<u32> {
        check_word_pos(pos)?;
        Ok(self.block((pos >> 4) as u64)[(pos & 15) as usize])
    }

    /// A sequential reader (`rand_chacha::ChaCha20Rng`, a `rand_core::CryptoRng`) positioned
    /// at word `pos`. Fixed-word bulk fills use it: it generates four blocks at a time with
    /// SIMD. (Exact-sampler fills take whole blocks from [`blocks`](Self::blocks).)
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `pos >= 2^68`.
    pub fn reader_at(&self, pos: u128) -> Result<ChaCha20Rng> {
        check_word_pos(pos)?;
        let mut rng = ChaCha20Rng::from_seed(*self.key.expose_bytes());
        rng.set_stream(self.stream);
        rng.set_word_pos(pos);
        Ok(rng)
    }
}

fn check_word_pos(pos: u128) -> Result<()> {
    if pos >= STREAM_WORDS {
        return Err(Error::OutOfRange {
            name: "word position",
            value: pos as f64,
            allowed: "[0, 2^68)",
        });
    }
    Ok(())
}

/// How a fixed-word sampler maps logical element indices to stream words: elements are
/// grouped `elements` at a time (Box–Muller makes two normals from one group), and group `g`
/// consumes the `words` words starting at word `g * words`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordLayout {
    /// Words one group consumes.
    pub words: u32,
    /// Elements one group produces (1 or 2).
    pub elements: u32,
}

impl WordLayout {
    /// The group holding element `element`, and the element's place within it.
    pub fn group_of(self, element: u64) -> (u64, u32) {
        let e = u64::from(self.elements);
        (element / e, (element % e) as u32)
    }

    /// The first word of group `group` (always `< 2^68` for the layouts in this crate, which
    /// use at most 16 words per group).
    pub fn first_word(self, group: u64) -> u128 {
        u128::from(group) * u128::from(self.words)
    }
}

#[inline(always)]
fn quarter_round(x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(16);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(12);
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(8);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(7);
}

/// The ChaCha20 block function in Bernstein's layout: state words 0–3 the constant
/// "expand 32-byte k", 4–11 the key, 12–13 the block counter (low word first), 14–15 the
/// stream id (low word first); ten double rounds; output = rounds(state) + state.
///
/// This scalar function is the specification a CUDA kernel ports line by line.
///
/// ```
/// use dpattn_core::sampling::chacha20_block;
/// // RFC 8439 A.1 test vector #1: zero key, counter 0, nonce 0.
/// assert_eq!(chacha20_block(&[0; 8], 0, 0)[0].to_le_bytes(), [0x76, 0xb8, 0xe0, 0xad]);
/// ```
pub fn chacha20_block(key: &[u32; 8], counter: u64, stream: u64) -> [u32; BLOCK_WORDS] {
    let mut input = [0u32; 16];
    input[..4].copy_from_slice(&SIGMA);
    input[4..12].copy_from_slice(key);
    input[12] = counter as u32;
    input[13] = (counter >> 32) as u32;
    input[14] = stream as u32;
    input[15] = (stream >> 32) as u32;
    let mut x = input;
    for _ in 0..10 {
        quarter_round(&mut x, 0, 4, 8, 12);
        quarter_round(&mut x, 1, 5, 9, 13);
        quarter_round(&mut x, 2, 6, 10, 14);
        quarter_round(&mut x, 3, 7, 11, 15);
        quarter_round(&mut x, 0, 5, 10, 15);
        quarter_round(&mut x, 1, 6, 11, 12);
        quarter_round(&mut x, 2, 7, 8, 13);
        quarter_round(&mut x, 3, 4, 9, 14);
    }
    for (o, i) in x.iter_mut().zip(input) {
        *o = o.wrapping_add(i);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::Rng;

    fn hex_words(h: &str) -> [u32; 16] {
        let b: [u8; 64] =
            core::array::from_fn(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap());
        core::array::from_fn(|i| {
            u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        })
    }

    fn key_words(bytes: [u8; 32]) -> [u32; 8] {
        KeyedStream::new(&NoiseKey::for_replay(bytes), 0).key_words
    }

    // Published vectors. RFC 8439 uses a 32-bit counter and a 96-bit nonce (n0, n1, n2);
    // in Bernstein's layout that is counter = c | n0 << 32 and stream = n1 | n2 << 32.
    #[test]
    fn rfc8439_a1_vector_1_zero_key_counter_0() {
        let want = hex_words(concat!(
            "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7",
            "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
        ));
        assert_eq!(chacha20_block(&[0; 8], 0, 0), want);
    }

    #[test]
    fn rfc8439_a1_vector_2_zero_key_counter_1() {
        let want = hex_words(concat!(
            "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed",
            "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f"
        ));
        assert_eq!(chacha20_block(&[0; 8], 1, 0), want);
    }

    #[test]
    fn rfc8439_a1_vector_5_nonce_in_the_stream_id_high_word() {
        // Nonce 00..00 02: n2 = 0x02000000, so stream = 0x0200_0000 << 32.
        let want = hex_words(concat!(
            "c2c64d378cd536374ae204b9ef933fcd1a8b2288b3dfa49672ab765b54ee27c7",
            "8a970e0e955c14f3a88e741b97c286f75f8fc299e8148362fa198a39531bed6d"
        ));
        assert_eq!(chacha20_block(&[0; 8], 0, 0x0200_0000 << 32), want);
    }

    #[test]
    fn rfc8439_2_3_2_counter_high_word_and_stream_low_word() {
        // Key 00..1f, nonce 00000009 0000004a 00000000, counter 1.
        let key = key_words(core::array::from_fn(|i| i as u8));
        let want = hex_words(concat!(
            "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e",
            "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
        ));
        assert_eq!(chacha20_block(&key, 1 | (0x0900_0000 << 32), 0x4a00_0000), want);
    }

    #[test]
    fn equals_rand_chacha_at_any_stream_and_word_position() {
        let key: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        for stream in [0u64, 1, 0xdead_beef, u64::MAX] {
            let s = KeyedStream::new(&NoiseKey::for_replay(key), stream);
            for pos in [0u128, 1, 15, 16, 17, 63, 64, 1000, (1 << 36) + 5, STREAM_WORDS - 40] {
                let mut rng = ChaCha20Rng::from_seed(key);
                rng.set_stream(stream);
                rng.set_word_pos(pos);
                let mut ours = s.reader_at(pos).unwrap();
                for k in 0..40u128 {
                    let w = rng.next_u32();
                    assert_eq!(s.word(pos + k).unwrap(), w, "stream {stream} word {}", pos + k);
                    assert_eq!(ours.next_u32(), w);
                }
            }
        }
    }

    #[test]
    fn word_positions_past_the_stream_are_rejected() {
        let s = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
        assert!(s.word(STREAM_WORDS - 1).is_ok());
        assert!(matches!(
            s.word(STREAM_WORDS),
            Err(Error::OutOfRange { name: "word position", .. })
        ));
        assert!(s.reader_at(STREAM_WORDS).is_err());
    }

    #[test]
    fn layouts_group_elements() {
        let pair = WordLayout { words: 4, elements: 2 };
        assert_eq!(pair.group_of(7), (3, 1));
        assert_eq!(pair.first_word(3), 12);
        let one = WordLayout { words: 2, elements: 1 };
        assert_eq!(one.group_of(u64::MAX), (u64::MAX, 0));
        assert!(one.first_word(u64::MAX) < STREAM_WORDS);
    }
}
