//! The fast exact algorithm of [`DiscreteGaussian`] for `σ = s/q ≥ 2^10`: Karney's discrete
//! normal at `σ' = 64`, refined by uniform cells of width `σ/64`.
//!
//! **Guarantee.** [`Cells::draw`] returns `z ∈ ℤ` with probability exactly
//! `e^{−z²/2σ²} / Σ_{y∈ℤ} e^{−y²/2σ²}` given fair bits: the same law as CKS20 Algorithm 3
//! (which [`DiscreteGaussian`] uses below `2^10`), so the privacy statement of the discrete
//! Gaussian (CKS20 Theorem 4) holds unchanged. Every decision is an exact Bernoulli draw of
//! a rational or of `exp(−rational)` (the samplers of `exact_bernoulli`); no floating point
//! takes part.
//!
//! **Algorithm** (proof inline; `w(n) = e^{−n²/2σ²}`):
//!
//! 1. *Base:* `b ≥ 0` with `P(b) ∝ e^{−b²/2·64²}` (the discrete Gaussian at `σ' = 64` on
//!    `b ≥ 0`), by Karney ("Sampling exactly from the normal distribution", ACM TOMS 42(1),
//!    2016, §6) with an integer `σ'`:
//!    - (a) `k ← 0`; while `Bernoulli(e^{−1/2})`: `k ← k + 1` (so `P(k) ∝ e^{−k/2}`); for
//!      `k ≥ 2` accept `k` with `Bernoulli(e^{−k(k−1)/2})`, drawn as `k(k−1)/2` draws of
//!      `Bernoulli(e^{−1})` stopping at the first failure; on rejection repeat (a). Now
//!      `P(k) ∝ e^{−k/2 − k(k−1)/2} = e^{−k²/2}`.
//!    - (b) `j ←` 6 bits, the first most significant (uniform on `0..64`); `x = j/64`.
//!    - (c) Accept with `e^{−x(2k+x)/2} = (e^{−x})^k · e^{−x²/2}`: `k` draws of
//!      `Bernoulli(exp(−j/64))` stopping at the first failure, then
//!      `Bernoulli(exp(−j²/8192))`. On rejection go to (a). Accepted `b = 64k + j` has
//!      probability `∝ e^{−k²/2 − x(2k+x)/2} = e^{−(k+x)²/2} = e^{−b²/2·64²}`, and every
//!      `b ≥ 0` is reached by exactly one `(k, j)`.
//! 2. *Cell:* cell `b` is the real interval `[bσ/64, (b+1)σ/64)`; the cells tile `[0, ∞)`,
//!    so every integer `n ≥ 0` lies in exactly one. `u` uniform on `0..w`, `w = ⌈σ/64⌉`
//!    (Lemire's method, as the discrete Laplace draws its uniform), `n = ⌈bσ/64⌉ + u`;
//!    if `n ≥ (b+1)σ/64` (past the cell: only when `σ/64` is not an integer) go to 1.
//!    Every integer of cell `b` is proposed with probability `P(b)/w`.
//! 3. Accept with `exp(−(n² − (bσ/64)²)/2σ²)` (`≤ 1`, as `n ≥ bσ/64`): then
//!    `P(n) ∝ e^{−(bσ/64)²/2σ²} · e^{−(n² − (bσ/64)²)/2σ²} = w(n)`, since
//!    `(bσ/64)²/2σ² = b²/2·64²`. With `A = 64q·n` and `B = b·s` the exponent is
//!    `(A − B)(A + B)/(2^13·s²)` (`q` cancels); as `A − B < s` it is below
//!    `(2b + 1)/2^13`, so for the `b` that occur a leading-zero test of the first bits of
//!    `U` almost always accepts at once. On rejection go to 1.
//! 4. A fair sign bit; `(n = 0, negative)` is rejected (go to 1), so `0` is not counted
//!    twice: every `z` then has probability `∝ w(|z|)/2`. Return `±n`.
//!
//! Expected cost: about 1.4 base proposals per sample, about 1.006 cells (the cell
//! acceptance is about `1/(1 + 0.4/64)`), under `1/w ≤ 1/16` of proposals past a cell's
//! end; roughly 90 bits, so a keyed sample almost always stays inside its element's
//! 512-bit primary block.
//!
//! **Reading bits.** In the order above, through the crate's exact Bernoulli samplers and
//! [`BitBuf`] (the randomness contract of [`ExactSampler`](crate::sampling::ExactSampler)):
//! `Bernoulli(e^{−1/2})` is `BernoulliExp(1/2)`, `Bernoulli(exp(−p/q))` is CKS20
//! Algorithm 1 on `p/q`, and an exponent `≥ 1` of step 3 is split as in
//! `bernoulli_exp_split`. The CPU decides the common cases from tables of 8- and 14-bit
//! patterns and leading-zero tests, each tested to consume the same bits with the same
//! result as the digit-by-digit form. The CUDA port (`exact_sampler.cuh`) follows the
//! digit-by-digit form.
//!
//! Run time is random (JMRO22: it leaks the magnitude of the noise through timing).

use crate::error::{Error, Result};
use crate::sampling::bit_source::BitSource;
use crate::sampling::discrete_laplace::DiscreteLaplace;
use crate::sampling::exact_bernoulli::{
    bernoulli_exp_minus_one, bernoulli_exp_split, bernoulli_exp_u64,
};
use crate::sampling::exact_sampler::BitBuf;
use crate::sampling::lazy_compare::bernoulli_inverse;

/// `σ' = 2^CELL_BITS` of the base sampler.
const CELL_BITS: u32 = 6;

const OVERFLOW: Error = Error::SizeOverflow { what: "discrete Gaussian sample (exceeds i64)" };

/// The cell form of `N_ℤ(0, σ²)`, `σ = s/q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cells {
    /// `σ = s/q`, `s < 2^50`.
    s: u64,
    /// `64·q`: cell `b` is `[b·s/64q, (b+1)·s/64q)`.
    q64: u64,
    /// Lemire's uniform on `0..w`, `w = ⌈s/64q⌉` (only [`DiscreteLaplace::uniform`] is
    /// used).
    cell: DiscreteLaplace,
    /// `2^13 · s² < 2^113`, the denominator of step 3's exponent.
    den: u128,
}

impl Cells {
    /// The smallest `σ` the cell algorithm is used for: cells at least 16 wide, so at most
    /// one proposal in 16 falls past a cell's end.
    pub(crate) const MIN_SIGMA: u64 = 1 << 10;

    /// `σ = s/q` in lowest terms, or `None` when `σ < 2^10` or `s ≥ 2^50` (which keeps
    /// every product of step 3 in `u128`; larger `s` take CKS20's algorithm).
    pub(crate) fn new(s: u64, q: u64) -> Option<Self> {
        if s >= 1 << 50 || s / q < Self::MIN_SIGMA {
            return None;
        }
        let q64 = q.checked_mul(1 << CELL_BITS)?;
        let w = s.div_ceil(q64);
        let den = (u128::from(s) * u128::from(s)) << (2 * CELL_BITS + 1);
        Some(Self { s, q64, cell: DiscreteLaplace::integer(w).ok()?, den })
    }

    /// Steps 1–4 of the module docs.
    #[inline]
    pub(crate) fn draw<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<i64> {
        loop {
            let b = base(bits)?;
            let u = self.cell.uniform(bits)?;
            // B = b·s (< 2^114), n = ⌈B/64q⌉ + u; n must stay in cell b: A = 64q·n < B + s.
            let big_b = u128::from(b) * u128::from(self.s);
            let n = self.ceil_div_q64(big_b) + u128::from(u);
            let a = n.checked_mul(u128::from(self.q64)).ok_or(OVERFLOW)?;
            if a >= big_b + u128::from(self.s) {
                continue;
            }
            // γ = (A − B)(A + B) / (2^13·s²), with A − B < s.
            let num = (a - big_b).checked_mul(a.checked_add(big_b).ok_or(OVERFLOW)?);
            if !exp_small_first(bits, num.ok_or(OVERFLOW)?, self.den)? {
                continue;
            }
            let negative = bits.bit()?;
            if negative && n == 0 {
                continue;
            }
            let n = i64::try_from(n).map_err(|_| OVERFLOW)?;
            return Ok(if negative { -n } else { n });
        }
    }

    /// `⌈x / 64q⌉`: a shift when `q` is a power of two (every `from_f64` σ), a `u64`
    /// division when `x` fits, else a `u128` one.
    #[inline(always)]
    fn ceil_div_q64(&self, x: u128) -> u128 {
        if self.q64.is_power_of_two() {
            let k = self.q64.trailing_zeros();
            return (x >> k) + u128::from(x & u128::from(self.q64 - 1) != 0);
        }
        match u64::try_from(x) {
            Ok(x) => u128::from(x.div_ceil(self.q64)),
            Err(_) => x.div_ceil(u128::from(self.q64)),
        }
    }
}

/// Step 1: `b ≥ 0` with `P(b) ∝ e^{−b²/2·64²}`.
#[inline]
fn base<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>) -> Result<u64> {
    loop {
        let k = karney_k(bits)?;
        let j = bits.peek32()? >> (32 - CELL_BITS);
        bits.consume(CELL_BITS);
        let mut accept = true;
        let mut i = 0;
        while accept && i < k {
            accept = exp_dyadic(bits, j, CELL_BITS)?;
            i += 1;
        }
        if accept && exp_dyadic(bits, j * j, 2 * CELL_BITS + 1)? {
            return k.checked_mul(1 << CELL_BITS).and_then(|x| x.checked_add(j)).ok_or(OVERFLOW);
        }
    }
}

/// Step 1a: `k ≥ 0` with `P(k) ∝ e^{−k²/2}`. Decided from [`KARNEY_K`] when the next
/// 14 bits suffice (most draws).
#[inline(always)]
fn karney_k<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>) -> Result<u64> {
    let e = KARNEY_K[(bits.peek32()? >> (32 - K_BITS)) as usize];
    if e != 0 {
        bits.consume(u32::from(e & 0x0f));
        return Ok(u64::from(e >> 4));
    }
    loop {
        let mut k = 0u64;
        while exp_minus_half(bits)? {
            k = k.checked_add(1).ok_or(OVERFLOW)?;
        }
        if k < 2 {
            return Ok(k);
        }
        // k(k − 1)/2 draws of Bernoulli(e^−1), stopping at the first failure.
        let mut draws = u128::from(k) * u128::from(k - 1) / 2;
        let mut keep = true;
        while keep && draws > 0 {
            keep = exp_minus_one(bits)?;
            draws -= 1;
        }
        if keep {
            return Ok(k);
        }
    }
}

/// Bits in a [`KARNEY_K`] pattern.
const K_BITS: u32 = 14;

/// Step 1a decided by the 14 bits `pattern` (first bit most significant): `k << 4 | used`,
/// or `0` when 14 bits do not decide (or `k > 15`). Built from the digit-by-digit
/// description, tested against the sampler.
static KARNEY_K: [u8; 1 << K_BITS] = {
    let mut t = [0u8; 1 << K_BITS];
    let mut p = 0;
    while p < 1 << K_BITS {
        t[p] = karney_k_in_bits(p as u32);
        p += 1;
    }
    t
};

/// The next bit of a `width`-bit pattern at `*used`, or `None` past its end.
const fn take(pattern: u32, width: u32, used: &mut u32) -> Option<bool> {
    if *used == width {
        return None;
    }
    *used += 1;
    Some((pattern >> (width - *used)) & 1 == 1)
}

/// `Bernoulli(1/k)` digit by digit (the remainder `r < k` gives the digit `2r ≥ k`).
const fn inverse_bits(pattern: u32, width: u32, used: &mut u32, k: u64) -> Option<bool> {
    let mut r = 1u64;
    while r != 0 {
        let digit = 2 * r >= k;
        r = if digit { 2 * r - k } else { 2 * r };
        match take(pattern, width, used) {
            None => return None,
            Some(u) if u != digit => return Some(digit),
            Some(_) => {}
        }
    }
    Some(false)
}

/// CKS20 Algorithm 1 for `γ = 1/2` (`half`: `Bernoulli(γ)` is the next bit being 0) or
/// `γ = 1` (`Bernoulli(γ)` certain, no bit).
const fn exp_bits(pattern: u32, width: u32, used: &mut u32, half: bool) -> Option<bool> {
    if half {
        match take(pattern, width, used) {
            None => return None,
            Some(true) => return Some(true),
            Some(false) => {}
        }
    }
    let mut k = 2u64;
    loop {
        match inverse_bits(pattern, width, used, k) {
            None => return None,
            Some(false) => return Some(k & 1 == 1),
            Some(true) => {}
        }
        if half {
            match take(pattern, width, used) {
                None => return None,
                Some(true) => return Some(k & 1 == 1),
                Some(false) => {}
            }
        }
        k += 1;
    }
}

const fn karney_k_in_bits(pattern: u32) -> u8 {
    let mut used = 0u32;
    loop {
        let mut k = 0u64;
        loop {
            match exp_bits(pattern, K_BITS, &mut used, true) {
                None => return 0,
                Some(true) => k += 1,
                Some(false) => break,
            }
        }
        if k > 15 {
            return 0;
        }
        let mut draws = k * k.saturating_sub(1) / 2;
        let mut keep = true;
        while keep && draws > 0 {
            match exp_bits(pattern, K_BITS, &mut used, false) {
                None => return 0,
                Some(b) => keep = b,
            }
            draws -= 1;
        }
        if keep {
            return (k as u8) << 4 | used as u8;
        }
    }
}

/// `Bernoulli(e^{−1/2})` (CKS20 Algorithm 1, [`bernoulli_exp_u64`]`(1, 2)`), decided from
/// [`EXP_MINUS_HALF`] when the next 8 bits suffice (more than 99 % of draws).
#[inline(always)]
fn exp_minus_half<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>) -> Result<bool> {
    match from_table(&EXP_MINUS_HALF, bits)? {
        Some(b) => Ok(b),
        None => bernoulli_exp_u64(bits, 1, 2),
    }
}

/// `Bernoulli(e^{−1})` ([`bernoulli_exp_minus_one`]), decided from [`EXP_MINUS_ONE`] when
/// the next 8 bits suffice.
#[inline(always)]
fn exp_minus_one<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>) -> Result<bool> {
    match from_table(&EXP_MINUS_ONE, bits)? {
        Some(b) => Ok(b),
        None => bernoulli_exp_minus_one(bits),
    }
}

/// The decision an 8-bit table holds for the next 8 bits, consuming the bits it used, or
/// `None` (nothing consumed) when they do not decide.
#[inline(always)]
fn from_table<B: BitSource + ?Sized>(
    table: &[u8; 256],
    bits: &mut BitBuf<'_, B>,
) -> Result<Option<bool>> {
    let e = table[(bits.peek32()? >> 24) as usize];
    if e == 0 {
        return Ok(None);
    }
    bits.consume(u32::from(e & 0x0f));
    Ok(Some(e & 0x80 != 0))
}

/// `Bernoulli(e^{−1/2})` decided by the 8 bits `p` (first bit most significant):
/// `0x80 | used` for true, `used` for false, `0` when 8 bits do not decide. Built from the
/// digit-by-digit description (module `exact_bernoulli`), tested against the sampler.
static EXP_MINUS_HALF: [u8; 256] = exp_table(true);

/// `Bernoulli(e^{−1})` decided by 8 bits, coded as [`EXP_MINUS_HALF`].
static EXP_MINUS_ONE: [u8; 256] = exp_table(false);

/// CKS20 Algorithm 1 for `γ = 1/2` (`half`) or `γ = 1` on every 8-bit pattern.
const fn exp_table(half: bool) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut p = 0;
    while p < 256 {
        let mut used = 0u32;
        t[p] = match exp_bits(p as u32, 8, &mut used, half) {
            None => 0,
            Some(true) => 0x80 | used as u8,
            Some(false) => used as u8,
        };
        p += 1;
    }
    t
}

/// `Bernoulli(num/2^e)` for `0 < num < 2^e ≤ 2^32`: the lazy comparison of `U` with the
/// `len` binary digits of `num/2^e` (up to its last one), decided at the first difference
/// (`U < num/2^e` exactly when `U`'s digit is the zero), `false` when all `len` agree.
#[inline(always)]
fn dyadic<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>, num: u64, e: u32) -> Result<bool> {
    let len = e - num.trailing_zeros();
    let digits = num >> (e - len);
    let u = bits.peek32()? >> (32 - len);
    let diff = u ^ digits;
    if diff == 0 {
        bits.consume(len);
        return Ok(false);
    }
    let at = u64::BITS - diff.leading_zeros(); // the first difference is digit len − at
    bits.consume(len - at + 1);
    Ok(u < digits)
}

/// `Bernoulli(exp(−num/2^e))` for `num < 2^e ≤ 2^32`: CKS20 Algorithm 1 with the dyadic
/// comparison.
#[inline(always)]
fn exp_dyadic<B: BitSource + ?Sized>(bits: &mut BitBuf<'_, B>, num: u64, e: u32) -> Result<bool> {
    if num == 0 {
        return Ok(true);
    }
    if !dyadic(bits, num, e)? {
        return Ok(true);
    }
    let mut k = 2u64;
    loop {
        if !(bernoulli_inverse(bits, k)? && dyadic(bits, num, e)?) {
            return Ok(k & 1 == 1);
        }
        k = k.checked_add(1).ok_or(OVERFLOW)?;
    }
}

/// Step 3's `Bernoulli(exp(−num/den))`, first deciding the common case without a division:
/// when `num/den < 2^−z` its first `z` digits are zero, so a one among the first `z` bits
/// of `U` ends the first comparison (`U > num/den`: `Bernoulli(num/den)` fails and
/// Algorithm 1 accepts), consuming exactly the bits the digit-by-digit comparison would.
/// Otherwise `⌊num/den⌋` draws of `Bernoulli(e^−1)`, then the fraction.
#[inline(always)]
fn exp_small_first<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    num: u128,
    den: u128,
) -> Result<bool> {
    if num == 0 {
        return Ok(true);
    }
    // num < 2^a and den ≥ 2^(b−1) with a, b their bit lengths: num/den < 2^−(b−a−1).
    let z = num.leading_zeros().saturating_sub(den.leading_zeros() + 1).min(32);
    if z > 0 {
        let u = bits.peek32()?;
        let lead = (u as u32).leading_zeros();
        if lead < z {
            bits.consume(lead + 1);
            return Ok(true);
        }
    }
    bernoulli_exp_split(bits, num / den, num % den, den)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::sampling::exact_sampler::tests::{Replay, run};
    use std::vec::Vec;

    /// Over all bit strings of length `depth`: the probability of each value below
    /// `values` among the strings that decide within them, and the undecided mass.
    fn exhaust(
        depth: usize,
        values: usize,
        f: impl Fn(&mut BitBuf<'_, Replay<'_>>) -> Result<u64>,
    ) -> (Vec<f64>, f64) {
        let mut mass = std::vec![0f64; values];
        let mut open = 0f64;
        let mut buf = std::vec![0u8; depth];
        let w = 1.0 / (1u64 << depth) as f64;
        for v in 0..(1u64 << depth) {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = ((v >> i) & 1) as u8;
            }
            match run(&buf, &f) {
                (_, used) if used > depth as u64 => open += w,
                (Ok(x), _) if (x as usize) < values => mass[x as usize] += w,
                _ => open += w,
            }
        }
        (mass, open)
    }

    /// The decided mass of a value is at most its probability, which is at most that mass
    /// plus the undecided mass.
    fn assert_brackets(mass: &[f64], open: f64, want: impl Fn(usize) -> f64) {
        for (x, &m) in mass.iter().enumerate() {
            let p = want(x);
            assert!(m <= p + 1e-12 && p <= m + open + 1e-12, "value {x}: {m} (+{open}) vs {p}");
        }
    }

    #[test]
    #[allow(clippy::redundant_closure)] // the closures pick the lifetime `exhaust` needs
    fn karney_k_has_weights_exp_minus_k_squared_over_two() {
        let (mass, open) = exhaust(18, 4, |b| karney_k(b));
        let z: f64 = (0..40).map(|k| libm::exp(-f64::from(k * k) / 2.0)).sum();
        assert_brackets(&mass, open, |k| libm::exp(-((k * k) as f64) / 2.0) / z);
        assert!(open < 0.2, "{open}");
    }

    #[test]
    #[allow(clippy::redundant_closure)]
    fn base_has_weights_of_the_half_discrete_gaussian_at_64() {
        let (mass, open) = exhaust(20, 130, |b| base(b));
        let w = |b: usize| libm::exp(-((b * b) as f64) / 8192.0);
        let z: f64 = (0..4000).map(w).sum();
        assert_brackets(&mass, open, |b| w(b) / z);
        assert!(open < 0.5, "{open}");
    }

    /// Random bit strings (`0`/`1` bytes), the first `len` of each then ones.
    fn strings(seed: u8, count: usize, len: usize) -> Vec<Vec<u8>> {
        use rand_core::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::from_seed([seed; 32]);
        (0..count).map(|_| (0..len).map(|_| (rng.next_u32() & 1) as u8).collect()).collect()
    }

    /// The fast forms read the same bits and decide the same way as the reference
    /// samplers of `exact_bernoulli` (the digit-by-digit description, which the CUDA port
    /// follows).
    #[test]
    fn the_exp_minus_half_and_exp_minus_one_tables_are_the_samplers_on_every_8_bit_pattern() {
        for (table, num, den) in [(&EXP_MINUS_HALF, 1, 2), (&EXP_MINUS_ONE, 1, 1)] {
            let mut decided = 0;
            for p in 0..256u32 {
                let bits: Vec<u8> = (0..8).map(|i| ((p >> (7 - i)) & 1) as u8).collect();
                let (want, used) = run(&bits, |b| bernoulli_exp_u64(b, num, den));
                let e = table[p as usize];
                if used <= 8 {
                    assert_eq!(
                        (e & 0x80 != 0, u64::from(e & 0x0f)),
                        (want.unwrap(), used),
                        "{p:08b}"
                    );
                    decided += 1;
                } else {
                    assert_eq!(e, 0, "{p:08b}");
                }
            }
            assert!(decided > 240, "{decided}");
        }
    }

    #[test]
    fn the_karney_k_table_is_the_sampler_on_every_14_bit_pattern() {
        let mut decided = 0;
        for p in 0..1u32 << K_BITS {
            let bits: Vec<u8> = (0..K_BITS).map(|i| ((p >> (K_BITS - 1 - i)) & 1) as u8).collect();
            // The loop form, without the table.
            let (want, used) = run(&bits, |b| {
                loop {
                    let mut k = 0u64;
                    while bernoulli_exp_u64(b, 1, 2)? {
                        k += 1;
                    }
                    if k < 2 || bernoulli_exp_split(b, u128::from(k * (k - 1) / 2), 0, 1)? {
                        return Ok(k);
                    }
                }
            });
            let e = KARNEY_K[p as usize];
            if used <= u64::from(K_BITS) && want.unwrap() <= 15 {
                assert_eq!(
                    (u64::from(e >> 4), u64::from(e & 0x0f)),
                    (want.unwrap(), used),
                    "{p:012b}"
                );
                decided += 1;
            } else {
                assert_eq!(e, 0, "{p:012b}");
            }
        }
        assert!(decided > 12_500, "{decided}");
    }

    #[test]
    #[allow(clippy::redundant_closure)]
    fn fast_forms_equal_the_reference_samplers_bit_for_bit() {
        for bits in strings(1, 20_000, 96) {
            assert_eq!(
                run(&bits, |b| exp_minus_half(b)),
                run(&bits, |b| bernoulli_exp_u64(b, 1, 2))
            );
            for (num, e) in [(1u64, 6), (5, 6), (63, 6), (32, 6), (4095, 13), (1, 13), (8191, 13)] {
                assert_eq!(
                    run(&bits, |b| exp_dyadic(b, num, e)),
                    run(&bits, |b| bernoulli_exp_u64(b, num, 1 << e)),
                    "{num}/2^{e}"
                );
            }
            for (num, den) in [
                (1u128, 8u128),
                (1, 9),
                (3, 8),
                (7, 8),
                (1, 1 << 40),
                (12_345, 1 << 61),
                ((1 << 40) + 7, (1 << 61) + 3),
                (5, 3),
                (1 << 62, (1 << 61) + 1),
                (1, u64::MAX.into()),
                (1 << 60, u64::MAX.into()),
                (1 << 70, 1 << 100),
                ((1 << 100) + 3, (1 << 100) + 1),
                (12_345_678_901, (1 << 112) + 5),
            ] {
                assert_eq!(
                    run(&bits, |b| exp_small_first(b, num, den)),
                    run(&bits, |b| bernoulli_exp_split(b, num / den, num % den, den)),
                    "{num}/{den}"
                );
            }
        }
    }
}
