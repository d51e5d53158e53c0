//! Many consecutive ChaCha20 blocks at once, with SIMD where the CPU has it.
//!
//! **Guarantee.** [`chacha20_blocks`] writes into `out[i]` exactly
//! [`chacha20_block`]`(key, first_counter.wrapping_add(i), stream)` for every `i`, on every
//! backend, bit for bit: the SIMD code is only a faster way to compute the scalar
//! specification of `docs/RANDOMNESS.md` §1, never a different stream. The 64-bit block
//! counter wraps modulo 2^64 (after block `2^64 − 1` comes block `0` of the *same* stream
//! id; nothing carries into the stream id), which is what `rand_chacha::ChaCha20Rng` does
//! when it runs past word position `2^68 − 1`: it adds its block counter as a wrapping
//! 64-bit lane (tested below against `rand_chacha` across the wrap).
//!
//! **Backends** ([`ChaChaBackend`]), all x86-64 code compiled only on `target_arch =
//! "x86_64"`:
//!
//! | backend | blocks per batch | rotations |
//! | --- | --- | --- |
//! | [`Avx512`](ChaChaBackend::Avx512) | 16 (one block per 32-bit lane of a `__m512i`) | `vprold` |
//! | [`Avx2`](ChaChaBackend::Avx2) | 8 (one block per lane of a `__m256i`) | by 16 and 8: byte shuffles; by 12 and 7: shifts + or |
//! | [`Portable`](ChaChaBackend::Portable) | 1 (the scalar [`chacha20_block`] itself) | `u32::rotate_left` |
//!
//! A batch keeps word `j` of its blocks in vector `j` (one block per lane), runs the ten
//! double rounds on the sixteen vectors, adds the input, and transposes the result back to
//! block order. Blocks left over after the last full batch go to the next narrower backend
//! (AVX-512 → AVX2 → portable).
//!
//! **Selection.** [`chacha20_blocks`] uses [`ChaChaBackend::detected`]: with `std` the CPU
//! is asked at run time (`is_x86_feature_detected!`, which caches its answer), without `std`
//! the compile-time target features decide (e.g. `-C target-cpu=x86-64-v4` enables AVX-512).
//! [`chacha20_blocks_with`] forces a backend (tests, benchmarks) and reports
//! [`Error::Unsupported`] if the CPU lacks it.
//!
//! **Tests** (this module): every backend the CPU has is compared with the scalar
//! [`chacha20_block`] on random keys, stream ids and first counters and on the lengths
//! around each batch size (0, 1, 7, 8, 9, 15, 16, 17, 33, 100, …), on counters that carry
//! from word 12 into word 13 and that wrap at `2^64`, on stream id `2^64 − 1`, on the RFC 8439
//! A.1 vectors #1 and #2, and on `rand_chacha`'s output across the counter wrap.
//!
//! No paper section: this is an implementation of the randomness contract.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use crate::sampling::keyed_stream::{BLOCK_WORDS, chacha20_block};

/// One ChaCha20 block: 16 words in stream order.
type Block = [u32; BLOCK_WORDS];

/// An implementation of [`chacha20_blocks`]. All produce the same words; they differ in
/// speed and in which CPUs can run them.
///
/// ```
/// use dpattn_core::sampling::{ChaChaBackend, chacha20_block, chacha20_blocks_with};
/// let key = [7u32; 8];
/// let mut out = [[0u32; 16]; 20];
/// for backend in ChaChaBackend::ALL.into_iter().filter(|b| b.is_available()) {
///     chacha20_blocks_with(backend, &key, 3, 100, &mut out)?;
///     assert_eq!(out[19], chacha20_block(&key, 119, 3));
/// }
/// assert!(ChaChaBackend::detected().is_available());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChaChaBackend {
    /// Plain Rust, one block at a time ([`chacha20_block`]); every target.
    Portable,
    /// x86-64 AVX2: eight blocks per batch.
    Avx2,
    /// x86-64 AVX-512F (with AVX2 for the tails): sixteen blocks per batch.
    Avx512,
}

impl ChaChaBackend {
    /// Every backend, fastest first.
    pub const ALL: [ChaChaBackend; 3] =
        [ChaChaBackend::Avx512, ChaChaBackend::Avx2, ChaChaBackend::Portable];

    /// The fastest backend this CPU (with this build) can run; what [`chacha20_blocks`]
    /// uses.
    pub fn detected() -> ChaChaBackend {
        if ChaChaBackend::Avx512.is_available() {
            ChaChaBackend::Avx512
        } else if ChaChaBackend::Avx2.is_available() {
            ChaChaBackend::Avx2
        } else {
            ChaChaBackend::Portable
        }
    }

    /// Whether this backend can run on this CPU (with this build). With `std` this asks
    /// the CPU (cached by the standard library); without it, the compile-time target
    /// features decide. Never true for the x86 backends on other architectures.
    pub fn is_available(self) -> bool {
        match self {
            ChaChaBackend::Portable => true,
            ChaChaBackend::Avx2 => has_avx2(),
            ChaChaBackend::Avx512 => has_avx2() && has_avx512f(),
        }
    }

    /// A short lowercase name: `"avx512"`, `"avx2"` or `"portable"`.
    pub fn name(self) -> &'static str {
        match self {
            ChaChaBackend::Portable => "portable",
            ChaChaBackend::Avx2 => "avx2",
            ChaChaBackend::Avx512 => "avx512",
        }
    }

    /// Blocks one batch of this backend computes together.
    pub fn batch_blocks(self) -> usize {
        match self {
            ChaChaBackend::Portable => 1,
            ChaChaBackend::Avx2 => 8,
            ChaChaBackend::Avx512 => 16,
        }
    }
}

#[cfg(all(target_arch = "x86_64", any(feature = "std", test)))]
fn has_avx2() -> bool {
    // Unit tests link `std` whatever the features, so they detect at run time too.
    std::is_x86_feature_detected!("avx2")
}

#[cfg(all(target_arch = "x86_64", any(feature = "std", test)))]
fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

#[cfg(not(all(target_arch = "x86_64", any(feature = "std", test))))]
fn has_avx2() -> bool {
    cfg!(all(target_arch = "x86_64", target_feature = "avx2"))
}

#[cfg(not(all(target_arch = "x86_64", any(feature = "std", test))))]
fn has_avx512f() -> bool {
    cfg!(all(target_arch = "x86_64", target_feature = "avx512f"))
}

/// Blocks `first_counter, first_counter + 1, …` (wrapping modulo 2^64) of stream `stream`
/// under `key` (the eight key words of ChaCha20 state words 4–11), one per element of
/// `out`, with the fastest backend of this CPU ([`ChaChaBackend::detected`]).
///
/// `out[i]` is exactly [`chacha20_block`]`(key, first_counter.wrapping_add(i as u64),
/// stream)`, the same words `rand_chacha::ChaCha20Rng` produces (after block `2^64 − 1` it
/// too continues with block `0` of the same stream).
///
/// ```
/// use dpattn_core::sampling::{chacha20_block, chacha20_blocks};
/// let key = [1u32, 2, 3, 4, 5, 6, 7, 8];
/// let mut out = [[0u32; 16]; 3];
/// chacha20_blocks(&key, 9, u64::MAX, &mut out);
/// assert_eq!(out[0], chacha20_block(&key, u64::MAX, 9));
/// assert_eq!(out[2], chacha20_block(&key, 1, 9)); // the counter wrapped
/// ```
pub fn chacha20_blocks(key: &[u32; 8], stream: u64, first_counter: u64, out: &mut [Block]) {
    generate(ChaChaBackend::detected(), key, stream, first_counter, out);
}

/// [`chacha20_blocks`] on a chosen backend (for tests and benchmarks; the output is the
/// same on every backend).
///
/// # Errors
/// [`Error::Unsupported`] if this CPU (or, without `std`, this build) cannot run `backend`;
/// `out` is then left unchanged.
pub fn chacha20_blocks_with(
    backend: ChaChaBackend,
    key: &[u32; 8],
    stream: u64,
    first_counter: u64,
    out: &mut [Block],
) -> Result<()> {
    if !backend.is_available() {
        return Err(Error::Unsupported {
            what: match backend {
                ChaChaBackend::Avx512 => "the AVX-512F ChaCha20 backend on this CPU/target",
                _ => "the AVX2 ChaCha20 backend on this CPU/target",
            },
        });
    }
    generate(backend, key, stream, first_counter, out);
    Ok(())
}

/// Runs `backend`, which must be available: full batches on it, the rest on the narrower
/// backends.
#[cfg(target_arch = "x86_64")]
fn generate(
    backend: ChaChaBackend,
    key: &[u32; 8],
    stream: u64,
    mut counter: u64,
    mut out: &mut [Block],
) {
    debug_assert!(backend.is_available());
    if backend == ChaChaBackend::Avx512 {
        let (batches, rest) = core::mem::take(&mut out).as_chunks_mut::<16>();
        // SAFETY: `generate` is only called with an available backend, and `Avx512` is
        // available only where the CPU (or the build's target features) has AVX-512F,
        // the feature `avx512_batches` is compiled with.
        unsafe { x86::avx512_batches(key, stream, counter, batches) };
        counter = counter.wrapping_add(16 * batches.len() as u64);
        out = rest;
    }
    if matches!(backend, ChaChaBackend::Avx512 | ChaChaBackend::Avx2) {
        let (batches, rest) = core::mem::take(&mut out).as_chunks_mut::<8>();
        // SAFETY: as above; both `Avx512` and `Avx2` are available only where the CPU has
        // AVX2, the feature `avx2_batches` is compiled with.
        unsafe { x86::avx2_batches(key, stream, counter, batches) };
        counter = counter.wrapping_add(8 * batches.len() as u64);
        out = rest;
    }
    portable(key, stream, counter, out);
}

/// Only the portable backend is ever available off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn generate(_backend: ChaChaBackend, key: &[u32; 8], stream: u64, first: u64, out: &mut [Block]) {
    portable(key, stream, first, out);
}

/// The portable backend: [`chacha20_block`] once per block. (A four-block `[u32; 4]`-lane
/// form was measured slower on x86-64: the compiler did not vectorise it and spilled the
/// 64-word state.)
fn portable(key: &[u32; 8], stream: u64, first: u64, out: &mut [Block]) {
    let mut counter = first;
    for block in out {
        *block = chacha20_block(key, counter, stream);
        counter = counter.wrapping_add(1);
    }
}

/// The AVX2 and AVX-512 backends. Every function is `#[target_feature]`; the intrinsics
/// without pointer arguments are safe to call inside them, so the only `unsafe` blocks are
/// the stores.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::Block;
    use crate::sampling::keyed_stream::SIGMA;

    /// The input state of a batch of `N` blocks: word `j` of block `first + l` in lane `l`
    /// of vector `j`. `splat` broadcasts a word, `lanes` loads per-lane words.
    #[inline(always)]
    fn batch_input<V: Copy, const N: usize>(
        key: &[u32; 8],
        stream: u64,
        first: u64,
        splat: impl Fn(u32) -> V,
        lanes: impl Fn([u32; N]) -> V,
    ) -> [V; 16] {
        let counters: [u64; N] = core::array::from_fn(|l| first.wrapping_add(l as u64));
        [
            splat(SIGMA[0]),
            splat(SIGMA[1]),
            splat(SIGMA[2]),
            splat(SIGMA[3]),
            splat(key[0]),
            splat(key[1]),
            splat(key[2]),
            splat(key[3]),
            splat(key[4]),
            splat(key[5]),
            splat(key[6]),
            splat(key[7]),
            lanes(counters.map(|c| c as u32)),
            lanes(counters.map(|c| (c >> 32) as u32)),
            splat(stream as u32),
            splat((stream >> 32) as u32),
        ]
    }

    // ---- AVX2: eight blocks per batch ----

    /// Full batches of eight blocks, the first at counter `first`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2_batches(
        key: &[u32; 8],
        stream: u64,
        first: u64,
        out: &mut [[Block; 8]],
    ) {
        let rot = Rotations::new();
        let mut counter = first;
        for batch in out {
            avx2_batch(key, stream, counter, rot, batch);
            counter = counter.wrapping_add(8);
        }
    }

    #[target_feature(enable = "avx2")]
    fn avx2_batch(key: &[u32; 8], stream: u64, first: u64, rot: Rotations, out: &mut [Block; 8]) {
        let input = batch_input(
            key,
            stream,
            first,
            |w| _mm256_set1_epi32(w as i32),
            |l: [u32; 8]| {
                let l = l.map(|w| w as i32);
                _mm256_setr_epi32(l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7])
            },
        );
        let mut x = input;
        for _ in 0..10 {
            avx2_quarter_round(&mut x, rot, 0, 4, 8, 12);
            avx2_quarter_round(&mut x, rot, 1, 5, 9, 13);
            avx2_quarter_round(&mut x, rot, 2, 6, 10, 14);
            avx2_quarter_round(&mut x, rot, 3, 7, 11, 15);
            avx2_quarter_round(&mut x, rot, 0, 5, 10, 15);
            avx2_quarter_round(&mut x, rot, 1, 6, 11, 12);
            avx2_quarter_round(&mut x, rot, 2, 7, 8, 13);
            avx2_quarter_round(&mut x, rot, 3, 4, 9, 14);
        }
        for (v, i) in x.iter_mut().zip(input) {
            *v = _mm256_add_epi32(*v, i);
        }
        // Words 0–7 and 8–15 of the eight blocks, each transposed to block order.
        let lo = avx2_transpose8([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
        let hi = avx2_transpose8([x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]]);
        for (block, (lo, hi)) in out.iter_mut().zip(lo.into_iter().zip(hi)) {
            let p = block.as_mut_ptr().cast::<__m256i>();
            // SAFETY: `block` is 16 writable `u32` (64 bytes); the two unaligned 32-byte
            // stores write bytes 0–31 and 32–63 of it. AVX is available (AVX2 is).
            unsafe {
                _mm256_storeu_si256(p, lo);
                _mm256_storeu_si256(p.add(1), hi);
            }
        }
    }

    /// The byte shuffles that rotate each 32-bit word left by 16 and by 8.
    #[derive(Clone, Copy)]
    struct Rotations {
        rot16: __m256i,
        rot8: __m256i,
    }

    impl Rotations {
        /// The masks, hidden from the optimiser (`black_box`): with constant masks LLVM
        /// rewrites the rotation by 16 as two half-lane word shuffles and moves the
        /// rotation by 8 across the xor (two shuffles each), which costs about a third of
        /// the throughput on shuffle-port-bound x86 cores.
        #[target_feature(enable = "avx2")]
        #[inline]
        fn new() -> Self {
            let rot16 = _mm256_setr_epi8(
                2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, //
                2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
            );
            let rot8 = _mm256_setr_epi8(
                3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14, //
                3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14,
            );
            core::hint::black_box(Rotations { rot16, rot8 })
        }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn avx2_quarter_round(
        x: &mut [__m256i; 16],
        r: Rotations,
        a: usize,
        b: usize,
        c: usize,
        d: usize,
    ) {
        x[a] = _mm256_add_epi32(x[a], x[b]);
        x[d] = _mm256_shuffle_epi8(_mm256_xor_si256(x[d], x[a]), r.rot16);
        x[c] = _mm256_add_epi32(x[c], x[d]);
        let t = _mm256_xor_si256(x[b], x[c]);
        x[b] = _mm256_or_si256(_mm256_slli_epi32::<12>(t), _mm256_srli_epi32::<20>(t));
        x[a] = _mm256_add_epi32(x[a], x[b]);
        x[d] = _mm256_shuffle_epi8(_mm256_xor_si256(x[d], x[a]), r.rot8);
        x[c] = _mm256_add_epi32(x[c], x[d]);
        let t = _mm256_xor_si256(x[b], x[c]);
        x[b] = _mm256_or_si256(_mm256_slli_epi32::<7>(t), _mm256_srli_epi32::<25>(t));
    }

    /// Transposes an 8×8 matrix of `u32` held as eight rows: lane `l` of output `k` is lane
    /// `k` of input `l`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn avx2_transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
        // Per 128-bit half h: t0 = [r0[4h], r1[4h], r0[4h+1], r1[4h+1]], t1 = words 2, 3; …
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        // u{c} (c < 4): rows 0–3 of columns c and 4 + c; u{4 + c}: rows 4–7 of them.
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ]
    }

    // ---- AVX-512F: sixteen blocks per batch ----

    /// Full batches of sixteen blocks, the first at counter `first`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512_batches(
        key: &[u32; 8],
        stream: u64,
        first: u64,
        out: &mut [[Block; 16]],
    ) {
        let mut counter = first;
        for batch in out {
            avx512_batch(key, stream, counter, batch);
            counter = counter.wrapping_add(16);
        }
    }

    #[target_feature(enable = "avx512f")]
    fn avx512_batch(key: &[u32; 8], stream: u64, first: u64, out: &mut [Block; 16]) {
        let input = batch_input(
            key,
            stream,
            first,
            |w| _mm512_set1_epi32(w as i32),
            |l: [u32; 16]| {
                let l = l.map(|w| w as i32);
                _mm512_setr_epi32(
                    l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], l[9], l[10], l[11],
                    l[12], l[13], l[14], l[15],
                )
            },
        );
        let mut x = input;
        for _ in 0..10 {
            avx512_quarter_round(&mut x, 0, 4, 8, 12);
            avx512_quarter_round(&mut x, 1, 5, 9, 13);
            avx512_quarter_round(&mut x, 2, 6, 10, 14);
            avx512_quarter_round(&mut x, 3, 7, 11, 15);
            avx512_quarter_round(&mut x, 0, 5, 10, 15);
            avx512_quarter_round(&mut x, 1, 6, 11, 12);
            avx512_quarter_round(&mut x, 2, 7, 8, 13);
            avx512_quarter_round(&mut x, 3, 4, 9, 14);
        }
        for (v, i) in x.iter_mut().zip(input) {
            *v = _mm512_add_epi32(*v, i);
        }
        for (block, v) in out.iter_mut().zip(avx512_transpose16(x)) {
            // SAFETY: `block` is 16 writable `u32` (64 bytes), exactly one unaligned 64-byte
            // store. AVX-512F is available.
            unsafe { _mm512_storeu_si512(block.as_mut_ptr().cast(), v) };
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn avx512_quarter_round(x: &mut [__m512i; 16], a: usize, b: usize, c: usize, d: usize) {
        x[a] = _mm512_add_epi32(x[a], x[b]);
        x[d] = _mm512_rol_epi32::<16>(_mm512_xor_si512(x[d], x[a]));
        x[c] = _mm512_add_epi32(x[c], x[d]);
        x[b] = _mm512_rol_epi32::<12>(_mm512_xor_si512(x[b], x[c]));
        x[a] = _mm512_add_epi32(x[a], x[b]);
        x[d] = _mm512_rol_epi32::<8>(_mm512_xor_si512(x[d], x[a]));
        x[c] = _mm512_add_epi32(x[c], x[d]);
        x[b] = _mm512_rol_epi32::<7>(_mm512_xor_si512(x[b], x[c]));
    }

    /// Transposes a 16×16 matrix of `u32` held as sixteen rows: lane `l` of output `k` is
    /// lane `k` of input `l`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn avx512_transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
        // Within each 128-bit lane q: t[2k] = [r2k[4q], r2k+1[4q], r2k[4q+1], r2k+1[4q+1]],
        // t[2k + 1] the same for words 4q + 2, 4q + 3.
        let t: [__m512i; 16] = core::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i % 2 == 0 { _mm512_unpacklo_epi32(a, b) } else { _mm512_unpackhi_epi32(a, b) }
        });
        // u[4m + c], 128-bit lane q: rows 4m … 4m + 3 of column 4q + c.
        let u: [__m512i; 16] = core::array::from_fn(|i| {
            let (m, c) = (i / 4, i % 4);
            let (a, b) = (t[4 * m + c / 2], t[4 * m + c / 2 + 2]);
            if c % 2 == 0 { _mm512_unpacklo_epi64(a, b) } else { _mm512_unpackhi_epi64(a, b) }
        });
        // Column 4q + c gathers 128-bit lane q of u[c], u[4 + c], u[8 + c], u[12 + c]: a 4×4
        // transpose of 128-bit lanes, two lane shuffles deep.
        let mut out = u;
        for c in 0..4 {
            let (a0, a1, a2, a3) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
            let v0 = _mm512_shuffle_i32x4::<0x44>(a0, a1); // a0.q0 a0.q1 a1.q0 a1.q1
            let v1 = _mm512_shuffle_i32x4::<0xee>(a0, a1); // a0.q2 a0.q3 a1.q2 a1.q3
            let v2 = _mm512_shuffle_i32x4::<0x44>(a2, a3);
            let v3 = _mm512_shuffle_i32x4::<0xee>(a2, a3);
            out[c] = _mm512_shuffle_i32x4::<0x88>(v0, v2); // lane q = 0 of a0 … a3
            out[4 + c] = _mm512_shuffle_i32x4::<0xdd>(v0, v2); // q = 1
            out[8 + c] = _mm512_shuffle_i32x4::<0x88>(v1, v3); // q = 2
            out[12 + c] = _mm512_shuffle_i32x4::<0xdd>(v1, v3); // q = 3
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};
    use std::vec;
    use std::vec::Vec;

    fn reference(key: &[u32; 8], stream: u64, first: u64, len: usize) -> Vec<Block> {
        (0..len).map(|i| chacha20_block(key, first.wrapping_add(i as u64), stream)).collect()
    }

    fn available() -> impl Iterator<Item = ChaChaBackend> {
        ChaChaBackend::ALL.into_iter().filter(|b| b.is_available())
    }

    fn check(backend: ChaChaBackend, key: &[u32; 8], stream: u64, first: u64, len: usize) {
        let want = reference(key, stream, first, len);
        let mut got = vec![[0xdead_beef_u32; 16]; len];
        chacha20_blocks_with(backend, key, stream, first, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "{} block {i} of {len}, first counter {first:#x}, stream {stream:#x}",
                backend.name()
            );
        }
    }

    const LENGTHS: [usize; 16] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 257];

    #[test]
    fn every_backend_equals_the_scalar_block_function_on_random_cases() {
        let mut rng = ChaCha20Rng::from_seed([29; 32]);
        for backend in available() {
            for &len in &LENGTHS {
                for _ in 0..4 {
                    let key: [u32; 8] = core::array::from_fn(|_| rng.next_u32());
                    check(backend, &key, rng.next_u64(), rng.next_u64(), len);
                }
            }
            // Random lengths too.
            for _ in 0..20 {
                let key: [u32; 8] = core::array::from_fn(|_| rng.next_u32());
                let len = (rng.next_u32() % 300) as usize;
                check(backend, &key, rng.next_u64(), rng.next_u64(), len);
            }
        }
    }

    #[test]
    fn counters_carry_into_the_high_word_and_wrap_at_2_pow_64() {
        let key: [u32; 8] = core::array::from_fn(|i| 0x0101_0101 * (i as u32 + 1));
        let firsts = [
            0,
            u64::from(u32::MAX) - 5, // carry from state word 12 into word 13
            u64::MAX - 40,
            u64::MAX - 16,
            u64::MAX - 8,
            u64::MAX - 3,
            u64::MAX,
        ];
        for backend in available() {
            for &first in &firsts {
                for stream in [0, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
                    for &len in &LENGTHS {
                        check(backend, &key, stream, first, len);
                    }
                }
            }
        }
    }

    #[test]
    fn rfc8439_a1_vectors_1_and_2() {
        let v1_first_word = u32::from_le_bytes([0x76, 0xb8, 0xe0, 0xad]);
        // Vector #2 (counter 1) starts 9f 07 e7 be.
        let v2_first_word = u32::from_le_bytes([0x9f, 0x07, 0xe7, 0xbe]);
        for backend in available() {
            let mut out = [[0u32; 16]; 33];
            chacha20_blocks_with(backend, &[0; 8], 0, 0, &mut out).unwrap();
            assert_eq!(out[0][0], v1_first_word, "{}", backend.name());
            assert_eq!(out[0], chacha20_block(&[0; 8], 0, 0));
            assert_eq!(out[1][0], v2_first_word, "{}", backend.name());
            assert_eq!(out[1][15].to_le_bytes(), [0x4b, 0x79, 0x4d, 0x6f]);
        }
    }

    #[test]
    fn equals_rand_chacha_across_the_counter_wrap() {
        let seed: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(13) ^ 0x5a);
        let key: [u32; 8] = core::array::from_fn(|i| {
            u32::from_le_bytes([seed[4 * i], seed[4 * i + 1], seed[4 * i + 2], seed[4 * i + 3]])
        });
        for stream in [0, 7, u64::MAX] {
            let first = u64::MAX - 20;
            let mut rng = ChaCha20Rng::from_seed(seed);
            rng.set_stream(stream);
            rng.set_word_pos(u128::from(first) * 16);
            // Blocks 2^64 − 21 … 2^64 − 1, then 0 … 19 of the same stream.
            let want: Vec<u32> = (0..41 * 16).map(|_| rng.next_u32()).collect();
            for backend in available() {
                let mut out = [[0u32; 16]; 41];
                chacha20_blocks_with(backend, &key, stream, first, &mut out).unwrap();
                assert_eq!(out.as_flattened(), &want[..], "{} stream {stream}", backend.name());
            }
            assert_eq!(&want[21 * 16..22 * 16], &chacha20_block(&key, 0, stream)[..]);
        }
    }

    #[test]
    fn detection_is_consistent_and_missing_backends_are_errors() {
        let detected = ChaChaBackend::detected();
        assert!(detected.is_available());
        // `detected` is the first available backend in `ALL` (fastest first).
        assert_eq!(Some(detected), available().next());
        assert!(ChaChaBackend::Portable.is_available());
        for backend in ChaChaBackend::ALL.into_iter().filter(|b| !b.is_available()) {
            let mut out = [[1u32; 16]; 20];
            let r = chacha20_blocks_with(backend, &[0; 8], 0, 0, &mut out);
            assert!(matches!(r, Err(Error::Unsupported { .. })), "{}", backend.name());
            assert_eq!(out, [[1u32; 16]; 20]);
        }
        // The default entry point is the detected backend.
        let key = [3u32; 8];
        let mut a = [[0u32; 16]; 50];
        let mut b = [[0u32; 16]; 50];
        chacha20_blocks(&key, 4, 5, &mut a);
        chacha20_blocks_with(detected, &key, 4, 5, &mut b).unwrap();
        assert_eq!(a, b);
        std::eprintln!("ChaCha20 backends available: {:?}", available().collect::<Vec<_>>());
    }
}
