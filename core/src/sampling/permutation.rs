//! Uniform random permutations of `[0, n)` and applying them by gather.
//!
//! **Guarantee.** [`sample_permutation`] is Fisher–Yates (Durstenfeld's form): start from the
//! identity, and for `i = n − 1, n − 2, …, 1` swap entry `i` with entry `j`, `j` uniform on
//! `[0, i]`. Each `j` is an *unbiased* bounded integer from Lemire's multiply-shift with
//! rejection ([`lemire_below`]), so every one of the `n!` permutations has probability
//! exactly `1/n!` given ideal random words (`docs/PAPERS.md` §2.3, "Sampling"). Applying is a
//! gather, `dst[j] = src[perm[j]]` ([`permute_slice`], [`permute_rows`], [`permute_cols`]); never a
//! permutation-matrix product.
//!
//! **Words.** A bound `s < 2^32` uses the 32-bit method: one word per attempt, an attempt
//! rejected with probability `(2^32 mod s) / 2^32 < s / 2^32`. A bound `s ≥ 2^32` uses the
//! 64-bit method: two words per attempt (`w0 | w1 << 32`), rejected with probability
//! `< s / 2^64`. A permutation of `n ≥ 2` elements makes `n − 1` bounded draws (bounds `n`,
//! `n − 1`, …, 2, in that order), so it consumes `n − 1` words plus the rare rejections
//! (for `n ≤ 2^32`); `n ≤ 1` consumes none.
//!
//! **Sources.** Any `rand_core::CryptoRng`, read with `next_u32`; or a [`KeyedStream`], read
//! sequentially from a given word position ([`sample_permutation_keyed`]): one permutation is
//! one draw, not addressable element by element (its length in words is random), and the
//! position after the last word used is returned so a caller can chain draws. The two
//! agree: the keyed draw from word `p` equals the RNG draw on a `ChaCha20Rng` of the same
//! key and stream at word position `p`.
//!
//! **Errors** (never panics on user input): [`Error::OutOfRange`] when `n` exceeds what the
//! index type can hold (`n ≤ I::MAX + 1`), for an out-of-range index in a permutation, for a
//! non-bijective permutation passed to [`invert_permutation`], for a zero bound, and for a
//! keyed draw that would run past the end of the stream; [`Error::ShapeMismatch`] for
//! mismatched lengths or shapes.

use core::fmt;

use rand_core::{CryptoRng, Rng as _};

use crate::error::{Error, Result};
use crate::matrix_view::{MatMut, MatRef, check_same_shape};
use crate::sampling::keyed_stream::{KeyedStream, STREAM_WORDS};

/// An index type a permutation can be stored in: `u16`, `u32`, `u64` or `usize` (sealed).
/// The index type never changes which permutation a source yields.
///
/// ```
/// use dpattn_core::sampling::PermIndex;
/// assert_eq!(<u16 as PermIndex>::MAX_LEN, 65_536);
/// assert_eq!(<u32 as PermIndex>::MAX_LEN, 1 << 32);
/// ```
pub trait PermIndex: Copy + Eq + fmt::Debug + sealed::Sealed + 'static {
    /// The largest permutation length whose indices fit: `MAX + 1`.
    const MAX_LEN: u128;
    /// [`MAX_LEN`](Self::MAX_LEN) as interval text, for errors.
    const ALLOWED: &'static str;

    /// `i` as this type. Only called with `i < MAX_LEN`.
    ///
    /// ```
    /// use dpattn_core::sampling::PermIndex;
    /// assert_eq!(<u32 as PermIndex>::from_index(7), 7u32);
    /// ```
    fn from_index(i: usize) -> Self;

    /// The index as `usize` (`usize::MAX` when it does not fit, which no slice index reaches).
    ///
    /// ```
    /// use dpattn_core::sampling::PermIndex;
    /// assert_eq!(PermIndex::to_index(7u16), 7usize);
    /// ```
    fn to_index(self) -> usize;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u16 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for usize {}
}

macro_rules! perm_index {
    ($t:ty, $allowed:literal) => {
        impl PermIndex for $t {
            const MAX_LEN: u128 = <$t>::MAX as u128 + 1;
            const ALLOWED: &'static str = $allowed;
            #[inline]
            fn from_index(i: usize) -> Self {
                i as $t
            }
            #[inline]
            fn to_index(self) -> usize {
                usize::try_from(self).unwrap_or(usize::MAX)
            }
        }
    };
}

perm_index!(u16, "[0, 2^16] for u16 indices");
perm_index!(u32, "[0, 2^32] for u32 indices");
perm_index!(u64, "[0, 2^64] for u64 indices");
perm_index!(usize, "[0, usize::MAX + 1] for usize indices");

/// [`Error::OutOfRange`] unless a permutation of `n` elements fits in `I`.
fn check_len<I: PermIndex>(n: usize) -> Result<()> {
    if n as u128 > I::MAX_LEN {
        return Err(Error::OutOfRange {
            name: "permutation length n",
            value: n as f64,
            allowed: I::ALLOWED,
        });
    }
    Ok(())
}

/// Lemire's 32-bit multiply-shift with rejection: uniform on `[0, s)`, `s ≥ 1`.
#[inline]
fn lemire32(s: u32, next: &mut impl FnMut() -> Result<u32>) -> Result<u32> {
    let mut m = u64::from(next()?) * u64::from(s);
    if (m as u32) < s {
        let t = s.wrapping_neg() % s; // 2^32 mod s
        while (m as u32) < t {
            m = u64::from(next()?) * u64::from(s);
        }
    }
    Ok((m >> 32) as u32)
}

/// Lemire's 64-bit multiply-shift with rejection: uniform on `[0, s)`, `s ≥ 1`; each attempt
/// reads two words, `w0 | w1 << 32`.
#[inline]
fn lemire64(s: u64, next: &mut impl FnMut() -> Result<u32>) -> Result<u64> {
    let mut word = || -> Result<u64> {
        let lo = u64::from(next()?);
        Ok(lo | (u64::from(next()?) << 32))
    };
    let mut m = u128::from(word()?) * u128::from(s);
    if (m as u64) < s {
        let t = s.wrapping_neg() % s; // 2^64 mod s
        while (m as u64) < t {
            m = u128::from(word()?) * u128::from(s);
        }
    }
    Ok((m >> 64) as u64)
}

/// Uniform on `[0, s)`: the 32-bit method when `s < 2^32`, else the 64-bit one.
#[inline]
pub(crate) fn below(s: u64, next: &mut impl FnMut() -> Result<u32>) -> Result<u64> {
    match u32::try_from(s) {
        Ok(s32) => lemire32(s32, next).map(u64::from),
        Err(_) => lemire64(s, next),
    }
}

/// Fisher–Yates into `out` from a word source.
fn fisher_yates<I: PermIndex>(out: &mut [I], next: &mut impl FnMut() -> Result<u32>) -> Result<()> {
    check_len::<I>(out.len())?;
    for (k, o) in out.iter_mut().enumerate() {
        *o = I::from_index(k);
    }
    for i in (1..out.len()).rev() {
        // `i + 1 <= n <= usize::MAX` fits in u64 on every target Rust supports.
        let j = below(i as u64 + 1, next)? as usize;
        out.swap(i, j);
    }
    Ok(())
}

/// An unbiased uniform integer on `[0, bound)` by Lemire's multiply-shift with rejection:
/// 32-bit (one word per attempt) when `bound < 2^32`, 64-bit (two words, `w0 | w1 << 32`)
/// otherwise. The building block of [`sample_permutation`].
///
/// # Errors
/// [`Error::OutOfRange`] if `bound == 0`.
///
/// ```
/// use dpattn_core::sampling::lemire_below;
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let mut rng = ChaCha20Rng::from_seed([1; 32]);
/// let x = lemire_below(&mut rng, 6)?;
/// assert!(x < 6);
/// assert_eq!(lemire_below(&mut rng, 1)?, 0);
/// assert!(lemire_below(&mut rng, 0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn lemire_below<R: CryptoRng + ?Sized>(rng: &mut R, bound: u64) -> Result<u64> {
    if bound == 0 {
        return Err(Error::OutOfRange { name: "bound", value: 0.0, allowed: "[1, 2^64)" });
    }
    below(bound, &mut || Ok(rng.next_u32()))
}

/// Writes a uniformly random permutation of `[0, out.len())` into `out`, drawing from `rng`
/// (see the module docs for the algorithm and the words it consumes).
///
/// # Errors
/// [`Error::OutOfRange`] if `out.len()` exceeds [`PermIndex::MAX_LEN`] of `I`; then
/// nothing is drawn.
///
/// ```
/// use dpattn_core::sampling::sample_permutation;
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let mut rng = ChaCha20Rng::from_seed([4; 32]);
/// let mut perm = [0u32; 10];
/// sample_permutation(&mut rng, &mut perm)?;
/// let mut sorted = perm;
/// sorted.sort();
/// assert_eq!(sorted, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn sample_permutation<I: PermIndex, R: CryptoRng + ?Sized>(
    rng: &mut R,
    out: &mut [I],
) -> Result<()> {
    fisher_yates(out, &mut || Ok(rng.next_u32()))
}

/// Writes a uniformly random permutation of `[0, out.len())` into `out`, reading the words
/// of `stream` sequentially from word position `word_pos`. Returns the position after the
/// last word used (`word_pos` itself when `out.len() <= 1`), where an independent next
/// draw may start.
///
/// # Errors
/// [`Error::OutOfRange`] if `out.len()` exceeds [`PermIndex::MAX_LEN`] of `I`, or if a word
/// at position `2^68` or beyond would be needed (including `word_pos >= 2^68`).
///
/// ```
/// use dpattn_core::sampling::{KeyedStream, NoiseKey, sample_permutation, sample_permutation_keyed};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
///
/// let key = NoiseKey::generate()?;
/// let s = KeyedStream::new(&key, 3);
/// let mut a = [0usize; 6];
/// let next = sample_permutation_keyed(&s, 1000, &mut a)?;
/// assert!(next >= 1005); // 5 bounded draws, at least one word each
/// // The same draw from a ChaCha20Rng positioned at the same word.
/// let mut rng = ChaCha20Rng::from_seed(*key.expose_bytes());
/// rng.set_stream(3);
/// rng.set_word_pos(1000);
/// let mut b = [0usize; 6];
/// sample_permutation(&mut rng, &mut b)?;
/// assert_eq!(a, b);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn sample_permutation_keyed<I: PermIndex>(
    stream: &KeyedStream,
    word_pos: u128,
    out: &mut [I],
) -> Result<u128> {
    let mut reader = stream.reader_at(word_pos)?;
    let mut pos = word_pos;
    fisher_yates(out, &mut || {
        if pos >= STREAM_WORDS {
            return Err(Error::OutOfRange {
                name: "word position",
                value: pos as f64,
                allowed: "[0, 2^68)",
            });
        }
        pos += 1;
        Ok(reader.next_u32())
    })?;
    Ok(pos)
}

/// [`Error::OutOfRange`] at the first `perm[j] >= n`.
fn check_indices<I: PermIndex>(perm: &[I], n: usize) -> Result<()> {
    if let Some(&bad) = perm.iter().find(|p| p.to_index() >= n) {
        return Err(Error::OutOfRange {
            name: "permutation index",
            value: bad.to_index() as f64,
            allowed: "[0, n) where n is the permuted length",
        });
    }
    Ok(())
}

/// Gathers `dst[j] = src[perm[j]]`.
///
/// The indices are only checked to be in range (a gather with repeated indices is not a
/// permutation, but is memory-safe); use [`invert_permutation`] to validate a permutation.
///
/// # Errors
/// [`Error::ShapeMismatch`] unless `src`, `dst` and `perm` have the same length;
/// [`Error::OutOfRange`] for an index `>= n`. On error `dst` is not written.
///
/// ```
/// use dpattn_core::sampling::permute_slice;
/// let mut dst = [0.0; 3];
/// permute_slice(&[2u32, 0, 1], &[10.0, 20.0, 30.0], &mut dst)?;
/// assert_eq!(dst, [30.0, 10.0, 20.0]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn permute_slice<I: PermIndex, T: Copy>(perm: &[I], src: &[T], dst: &mut [T]) -> Result<()> {
    let n = perm.len();
    if src.len() != n {
        return Err(Error::ShapeMismatch { arg: "src", axis: "len", expected: n, got: src.len() });
    }
    if dst.len() != n {
        return Err(Error::ShapeMismatch { arg: "dst", axis: "len", expected: n, got: dst.len() });
    }
    check_indices(perm, n)?;
    for (d, p) in dst.iter_mut().zip(perm) {
        *d = src[p.to_index()];
    }
    Ok(())
}

/// Gathers rows: row `j` of `dst` is row `perm[j]` of `src` (any row strides).
///
/// # Errors
/// [`Error::ShapeMismatch`] unless `perm.len() == src.rows()` and `dst` has `src`'s shape;
/// [`Error::OutOfRange`] for an index `>= rows`. On error `dst` is not written.
///
/// ```
/// use dpattn_core::sampling::permute_rows;
/// use dpattn_core::{MatMut, MatRef};
/// let src = [1, 2, 3, 4, 5, 6];
/// let mut dst = [0; 6];
/// permute_rows(
///     &[2usize, 0, 1],
///     MatRef::from_row_major(&src, 3, 2)?,
///     MatMut::from_row_major(&mut dst, 3, 2)?,
/// )?;
/// assert_eq!(dst, [5, 6, 1, 2, 3, 4]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn permute_rows<I: PermIndex, T: Copy>(
    perm: &[I],
    src: MatRef<'_, T>,
    mut dst: MatMut<'_, T>,
) -> Result<()> {
    let n = src.rows();
    if perm.len() != n {
        return Err(Error::ShapeMismatch {
            arg: "perm",
            axis: "len",
            expected: n,
            got: perm.len(),
        });
    }
    check_same_shape("dst", dst.rows(), dst.cols(), n, src.cols())?;
    check_indices(perm, n)?;
    for (j, p) in perm.iter().enumerate() {
        dst.row_mut(j).copy_from_slice(src.row(p.to_index()));
    }
    Ok(())
}

/// Gathers columns: column `j` of `dst` is column `perm[j]` of `src`
/// (`dst[i][j] = src[i][perm[j]]`).
///
/// # Errors
/// [`Error::ShapeMismatch`] unless `perm.len() == src.cols()` and `dst` has `src`'s shape;
/// [`Error::OutOfRange`] for an index `>= cols`. On error `dst` is not written.
///
/// ```
/// use dpattn_core::sampling::permute_cols;
/// use dpattn_core::{MatMut, MatRef};
/// let src = [1, 2, 3, 4, 5, 6];
/// let mut dst = [0; 6];
/// permute_cols(
///     &[2u16, 0, 1],
///     MatRef::from_row_major(&src, 2, 3)?,
///     MatMut::from_row_major(&mut dst, 2, 3)?,
/// )?;
/// assert_eq!(dst, [3, 1, 2, 6, 4, 5]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn permute_cols<I: PermIndex, T: Copy>(
    perm: &[I],
    src: MatRef<'_, T>,
    mut dst: MatMut<'_, T>,
) -> Result<()> {
    let m = src.cols();
    if perm.len() != m {
        return Err(Error::ShapeMismatch {
            arg: "perm",
            axis: "len",
            expected: m,
            got: perm.len(),
        });
    }
    check_same_shape("dst", dst.rows(), dst.cols(), src.rows(), m)?;
    check_indices(perm, m)?;
    for i in 0..src.rows() {
        let s = src.row(i);
        for (d, p) in dst.row_mut(i).iter_mut().zip(perm) {
            *d = s[p.to_index()];
        }
    }
    Ok(())
}

/// Writes the inverse permutation, `inv[perm[j]] = j`, and checks that `perm` is a
/// permutation of `[0, n)` (every value exactly once). Gathering with `perm` and then with
/// `inv` restores the original order.
///
/// # Errors
/// [`Error::ShapeMismatch`] unless `inv.len() == perm.len()`; [`Error::OutOfRange`] if `n` exceeds
/// [`PermIndex::MAX_LEN`], for an index `>= n` (`inv` not written) or when a value in `[0, n)` is
/// missing, i.e. `perm` repeats one (`value` names the missing value; `inv` then holds unspecified
/// indices).
///
/// ```
/// use dpattn_core::sampling::invert_permutation;
/// let mut inv = [0u32; 4];
/// invert_permutation(&[2u32, 0, 3, 1], &mut inv)?;
/// assert_eq!(inv, [1, 3, 0, 2]);
/// assert!(invert_permutation(&[0u32, 0, 1, 2], &mut inv).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub fn invert_permutation<I: PermIndex>(perm: &[I], inv: &mut [I]) -> Result<()> {
    let n = perm.len();
    if inv.len() != n {
        return Err(Error::ShapeMismatch { arg: "inv", axis: "len", expected: n, got: inv.len() });
    }
    check_len::<I>(n)?;
    check_indices(perm, n)?;
    for (j, p) in perm.iter().enumerate() {
        inv[p.to_index()] = I::from_index(j);
    }
    // If `perm` misses a value `k`, no `x` has `perm[x] == k`, whatever `inv[k]` holds.
    for (k, q) in inv.iter().enumerate() {
        let x = q.to_index();
        if x >= n || perm[x].to_index() != k {
            return Err(Error::OutOfRange {
                name: "perm (missing value)",
                value: k as f64,
                allowed: "a permutation of [0, n): every value exactly once",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn words(w: &[u32]) -> impl FnMut() -> Result<u32> + '_ {
        let mut it = w.iter();
        move || Ok(*it.next().expect("test ran out of words"))
    }

    #[test]
    fn lemire32_maps_the_high_half_of_the_product() {
        // s = 6: 2^32 mod 6 = 4, so low products 0..3 are rejected.
        let s = 6u32;
        let w = [u32::MAX, 0x8000_0001];
        assert_eq!(lemire32(s, &mut words(&w[..1])).unwrap(), 5);
        assert_eq!(lemire32(s, &mut words(&w[1..])).unwrap(), 3);
        // Word 0 gives product 0 (< 4): rejected; word 1 gives product 6 (>= 4): result 0.
        let mut used = 0;
        let seq = [0u32, 1];
        let mut src = || {
            used += 1;
            Ok(seq[used - 1])
        };
        assert_eq!(lemire32(s, &mut src).unwrap(), 0);
        assert_eq!(used, 2);
    }

    #[test]
    fn lemire64_reads_two_words_low_first() {
        let s = (1u64 << 32) + 1; // needs the 64-bit path
        // x = 2^63 -> floor(x * s / 2^64) = s / 2 = 2^31.
        let w = [0u32, 0x8000_0000];
        assert_eq!(below(s, &mut words(&w)).unwrap(), 1 << 31);
    }

    #[test]
    fn small_lengths_consume_no_words() {
        let s = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
        let mut empty: [u32; 0] = [];
        assert_eq!(sample_permutation_keyed(&s, 5, &mut empty).unwrap(), 5);
        let mut one = [9u32];
        assert_eq!(sample_permutation_keyed(&s, 5, &mut one).unwrap(), 5);
        assert_eq!(one, [0]);
        let mut two = [0u32; 2];
        assert_eq!(sample_permutation_keyed(&s, 5, &mut two).unwrap(), 6);
    }

    #[test]
    fn keyed_draw_stops_at_the_end_of_the_stream() {
        let s = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
        let mut p = [0u32; 4];
        let r = sample_permutation_keyed(&s, STREAM_WORDS - 2, &mut p);
        assert!(matches!(r, Err(Error::OutOfRange { name: "word position", .. })));
        assert!(sample_permutation_keyed(&s, STREAM_WORDS, &mut p).is_err());
        assert!(sample_permutation_keyed(&s, STREAM_WORDS - 3, &mut [0u32; 3]).is_ok());
    }

    #[test]
    fn lengths_beyond_the_index_type_are_rejected() {
        assert!(check_len::<u16>(65_536).is_ok());
        assert!(matches!(
            check_len::<u16>(65_537),
            Err(Error::OutOfRange { name: "permutation length n", .. })
        ));
        let mut big = [0u16; 65_537];
        let mut rng = ChaCha20Rng::from_seed([0; 32]);
        assert!(sample_permutation(&mut rng, &mut big[..]).is_err());
        assert!(sample_permutation(&mut rng, &mut big[..65_536]).is_ok());
        assert_eq!(big[..65_536].iter().map(|&x| u64::from(x)).sum::<u64>(), 65_535 * 65_536 / 2);
        assert!(check_len::<u32>(1 << 20).is_ok());
    }

    #[test]
    fn gathers_check_lengths_and_indices() {
        let mut dst = [0u8; 3];
        assert!(matches!(
            permute_slice(&[0u32, 1], &[1u8, 2, 3], &mut dst),
            Err(Error::ShapeMismatch { arg: "src", .. })
        ));
        assert!(matches!(
            permute_slice(&[0u32, 3, 1], &[1u8, 2, 3], &mut dst),
            Err(Error::OutOfRange { value, .. }) if value == 3.0
        ));
        assert_eq!(dst, [0, 0, 0]);
        let src = [1u8, 2, 3, 4];
        let mut out = [0u8; 4];
        assert!(matches!(
            permute_rows(
                &[0u32, 1, 2],
                MatRef::from_row_major(&src, 2, 2).unwrap(),
                MatMut::from_row_major(&mut out, 2, 2).unwrap()
            ),
            Err(Error::ShapeMismatch { arg: "perm", .. })
        ));
        assert!(matches!(
            permute_cols(
                &[1u32, 0],
                MatRef::from_row_major(&src, 2, 2).unwrap(),
                MatMut::from_row_major(&mut out, 1, 4).unwrap()
            ),
            Err(Error::ShapeMismatch { arg: "dst", .. })
        ));
        let mut inv = [0u32; 3];
        assert!(matches!(
            invert_permutation(&[1u32, 1, 0], &mut inv),
            Err(Error::OutOfRange { value, .. }) if value == 2.0
        ));
        assert!(invert_permutation(&[1u32, 0], &mut inv).is_err());
    }

    #[test]
    fn strided_row_and_column_gathers() {
        // 3 x 2 source with row stride 3, output with row stride 4.
        let src = [1, 2, 0, 3, 4, 0, 5, 6];
        let src = MatRef::new(&src, 3, 2, 3).unwrap();
        let mut buf = [0; 10];
        permute_rows(&[1usize, 2, 0], src, MatMut::new(&mut buf, 3, 2, 4).unwrap()).unwrap();
        assert_eq!(buf, [3, 4, 0, 0, 5, 6, 0, 0, 1, 2]);
        let mut buf = [0; 10];
        permute_cols(&[1u64, 0], src, MatMut::new(&mut buf, 3, 2, 4).unwrap()).unwrap();
        assert_eq!(buf, [2, 1, 0, 0, 4, 3, 0, 0, 6, 5]);
    }
}
