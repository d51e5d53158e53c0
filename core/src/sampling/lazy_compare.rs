//! Lazy comparison of a uniform `U = 0.u₁u₂u₃…` with a probability `p`: `Bernoulli(p)`
//! is the event `U < p`, decided at the first digit where `U` and `p` differ. Bit `u_j` is
//! the `j`-th bit of the [`BitBuf`].
//!
//! **Guarantee.** Each comparison returns `true` with *exactly* probability `p`, given
//! independent fair bits, and consumes exactly the bits up to and including the first
//! digit where `U` and `p` differ (none when `p = 0` or `p = 1`); the arithmetic is
//! fixed-width integer (`u64`/`u128`) and no floating-point value takes part.
//!
//! * Rational `p = num/den`: the binary expansion `0.p₁p₂p₃…` is produced by long
//!   division (the remainder `r < den` gives the digit `2r ≥ den`, tested as
//!   `r ≥ den − r`, so nothing overflows). The result is `p_j` at the first `j` with
//!   `u_j ≠ p_j`, and `false` as soon as the remaining digits of `p` are all zero. For
//!   `u64` ratios, 32 digits are compared at once (`⌊num·2^32/den⌋`, one division, against
//!   the next 32 bits, the first difference found with a leading-zero count), consuming
//!   the same bits with the same result as one digit at a time (tested); the digits of
//!   `1/k` for `k ≤ 64` are tabulated. `u128` ratios go one digit at a time.
//! * Dyadic `p = m · 2^−e`: compared one digit at a time with its finite expansion.
//!
//! The bits are read in the order of the randomness contract of
//! [`ExactSampler`](crate::sampling::ExactSampler).
//!
//! Background: `docs/PAPERS.md` A.2.1 (OpenDP's CKS20 samplers), A.2.7.

use crate::error::Result;
use crate::sampling::bit_source::BitSource;
use crate::sampling::exact_sampler::BitBuf;

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
    pub(crate) fn new(num: u64, den: u64) -> Self {
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
pub(crate) fn ratio_chunked<B: BitSource + ?Sized>(
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
    ($vis:vis $name:ident, $t:ty) => {
        /// The lazy comparison one digit at a time, for any `0 < num < den`. The digit of
        /// the remainder `r < den` is `2r ≥ den`, tested as `r ≥ den − r`; the new remainder
        /// `2r − den` or `2r` stays below `den`, so nothing overflows. (The `u64` form is
        /// the reference the chunked comparison is tested against.)
        #[inline]
        #[cfg_attr(not(test), allow(dead_code))]
        $vis fn $name<B: BitSource + ?Sized>(
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
ratio_bitwise!(pub(crate) ratio_bitwise_u128, u128);

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
pub(crate) fn bernoulli_inverse<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    k: u64,
) -> Result<bool> {
    if k < 65 {
        ratio_chunked(bits, INVERSES[k as usize], k)
    } else {
        bernoulli_ratio_u64(bits, 1, k)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::exact_sampler::tests::run;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    fn ratio(bits: &[u8], num: u64, den: u64) -> (Result<bool>, u64) {
        run(bits, |b| bernoulli_ratio_u64(b, num, den))
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
}
