//! The discrete Gaussian `N_ℤ(0, σ²)` drawn in **constant time**, for enclaves: the running
//! time and the memory accesses of a draw do not depend on the value drawn or on the key.
//!
//! **Guarantee.** [`ConstantTimeGaussian`] reads exactly
//! [`words_per_sample`](ConstantTimeGaussian::words_per_sample) words of its [`BitSource`]
//! per sample and executes the same instructions whatever their values (no branch, index or
//! early exit depends on them; loop lengths depend on the public `σ` only). Its output law
//! is within **total-variation distance `2^−100`** of `N_ℤ(0, σ²)`. It cannot be exact: a
//! draw from a fixed number of fair bits has dyadic probabilities, the discrete Gaussian
//! irrational ones. A release of `N` such values that is `(ε, δ)`-DP with exact noise is
//! therefore `(ε, δ + (1 + e^ε)·N·2^−100)`-DP ([`constant_time_delta`]): with `M` the exact
//! release and `M′` this one, coupled so that they differ with probability
//! `t ≤ N·2^−100`, `P[M′(x) ∈ S] ≤ P[M(x) ∈ S] + t ≤ e^ε·P[M(x′) ∈ S] + δ + t
//! ≤ e^ε·(P[M′(x′) ∈ S] + t) + δ + t`. There is no zCDP form: releases in
//! [`NoiseMode::ConstantTime`](crate::NoiseMode::ConstantTime) charge `(ε, δ)` only.
//!
//! **Algorithm** (the cells of `gaussian_cells`, with a table for the base and a fixed
//! number of trials). Let `W = 2^m` be the largest power of two with `W ≤ σ/4` (so
//! `σ/W ∈ [4, 8)`; `σ ≥ 4` is required), `w_b = e^{−(bW)²/2σ²}`, and `B = ⌈13σ/W⌉ ≤ 104`
//! cells. A table holds `C(j) ≈ 2^128·κ·Σ_{b<j} w_b` for `j = 1 … B`, `κ` a public constant
//! with `κ·Σ_{b≥0} w_b ≤ 1`. A *trial* reads 9 words: `U₁` (128 bits), one word giving `u`
//! (its low `m` bits) and a sign (its top bit), and `U₃` (127 bits). Then
//!
//! 1. `b = #{j : C(j) ≤ U₁}` by a linear scan of the whole table (`b = B`: no cell, reject);
//! 2. `n = bW + u` (every integer `n ≥ 0` lies in exactly one cell);
//! 3. accept iff `U₃ < e^{−(n² − (bW)²)/2σ²}` (computed in `Q127`, module `fixed_point`)
//!    and not (`n = 0` and negative), so that `0` is not counted twice.
//!
//! All `K` trials run ([`trials`](ConstantTimeGaussian::trials), 24 to 30 depending on
//! `σ/W`); the output is `±n` of the first accepted one (selected with masks), or `0` if
//! none accepts.
//!
//! **Proof of the bound.** Compare with the exact procedure `M` that runs trials with real
//! `U₁, U₃` (the bits read, followed by independent infinite tails), the true
//! `κ·Σ_{b<j} w_b` and the true `e^{−x}`, until one accepts. `M` is exact: cell `b` is
//! proposed with probability `κw_b`, each of its `W` integers with `κw_b/W`, and accepting
//! with `e^{−(n² − (bW)²)/2σ²}` leaves mass `κ·e^{−n²/2σ²}/W`, halved by the sign except
//! at `0`; so the accepted value has law `∝ e^{−z²/2σ²}`. This sampler differs from `M`
//! only when
//! * `U₁` falls between some `C(j)` and its true value, or beyond `C(B)`: each weight
//!   `e^{−2^9·y}` is within `3584·2^−127` (`fixed_point`'s bound with 24 terms, `k = 9` and a
//!   `2`-unit error in `y`), so `|C(j) − true| ≤ 1700·j + 1` units of `2^−128`
//!   (`2^128·κ ≤ 64/5.5`); summed over `j ≤ 104`, probability `≤ 2^−104.8` per trial, the
//!   mass beyond `13σ` (`≤ 2^−121`) included;
//! * `U₃` falls between the computed and the true `e^{−x}` (`x ≤ 3.35`: 15 terms at
//!   `x/256 ≤ 0.0131`, then `k = 8` squarings): error `≤ 1792·2^−127`, probability
//!   `≤ 2^−116`;
//! * `M` rejects all of the first `K` trials. Its rejection probability is
//!   `r ≤ (1/2)/(a + 1/2)` with `a = (σ/W)·√(π/2) ≥ 5.013` (by Poisson summation,
//!   `Σ_{n∈ℤ} e^{−n²/2σ²} ≥ σ√(2π)` and `Σ_{b∈ℤ} e^{−b²W²/2σ²} = (σ/W)√(2π)(1 + 10^−137)`
//!   for `σ/W ≥ 4`), and `K` is chosen with `r^K ≤ 2^−103.5`.
//!
//! Trial `t` is reached with probability `r^{t−1}`, so the total is at most
//! `2^−104.7/(1 − r) + 2^−103.5 < 2^−102.9`; we state `2^−100`.
//!
//! **What is and is not constant time.** The draw: the ChaCha20 words (a fixed number of
//! blocks per element), the table scan, the fixed-point arithmetic (64-bit multiplications
//! and shifts by public amounts) and the mask selects (passed through
//! `core::hint::black_box` so that the compiler keeps them branch-free; a dudect-style test
//! checks the timing, `tests/samplers/constant_time.rs`). Not covered: the set-up (public
//! `σ`), what the caller does with the value (the grid release's `f64` arithmetic on private
//! data, whose timing can depend on subnormal operands) and the attention kernel itself.
//!
//! **Reading bits.** Each trial reads 9 words with [`BitSource::next_word`]: `U₁` is words
//! 1–4 (the first most significant), `u` and the sign come from word 5, `U₃` is words 6–9
//! shifted right by one. A keyed sample reads the first `9K` words of its element's window
//! (`ElementBits`: the primary block, then continuation blocks; `docs/RANDOMNESS.md` §4).

use core::hint::black_box;

use crate::error::{Error, Result};
use crate::sampling::DiscreteGaussian;
use crate::sampling::bit_source::{BitSource, check_elements};
use crate::sampling::exact_sampler::ExactSampler;
use crate::sampling::fixed_point::{div_pow2, div_wide, exp_neg, mul_shr};
use crate::sampling::keyed_stream::{BLOCK_WORDS, KeyedStream};

const MAX_TRIALS: usize = 30;
const MAX_WORDS: usize = 9 * MAX_TRIALS;
const DEVIATION_LOG2: i32 = -100;

/// `⌈MAX_WORDS / 16⌉`: the blocks of a keyed window a sample reads.
const MAX_BLOCKS: usize = MAX_WORDS.div_ceil(BLOCK_WORDS);

/// Elements whose windows [`ConstantTimeGaussian::fill_keyed`] generates together.
const FILL_CHUNK: usize = 8;

/// Most cells (`⌈13σ/W⌉` with `σ/W < 8`).
const MAX_CELLS: usize = 104;

/// Cells reach `13σ`.
const TAIL_SIGMAS: u128 = 13;

/// Margin added to the table's total, in units of `2^−122` per cell: each weight is within
/// `3584·2^−127 = 112·2^−122`, plus one unit for the shift to `Q122` (module docs).
const MARGIN_PER_CELL: u128 = 160;

/// `N_ℤ(0, σ²)` within total variation `2^−100`, drawn in constant time (module docs).
///
/// ```
/// use dpattn_core::sampling::{ConstantTimeGaussian, DiscreteGaussian, ExactSampler,
///     KeyedStream, NoiseKey};
/// let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(100, 1)?)?;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut z = [0i64; 2000];
/// g.fill_keyed(&s, 0, &mut z)?;
/// assert_eq!(z[7], g.sample_at(&s, 7)?);
/// let var = z.iter().map(|&x| (x * x) as f64).sum::<f64>() / 2000.0;
/// assert!((var / 10_000.0 - 1.0).abs() < 0.15);
/// assert!(ConstantTimeGaussian::new(&DiscreteGaussian::new(3, 1)?).is_err()); // σ < 4
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ConstantTimeGaussian {
    /// `σ = s/q` (the [`DiscreteGaussian`]'s reduced form, so `s < 2^32`).
    s: u64,
    q: u64,
    /// `W = 2^w_log2`.
    w_log2: u32,
    /// `B`.
    cells: usize,
    /// `C(1) … C(B)` (entries past `B` are not used).
    cdf: [u128; MAX_CELLS],
    /// `q²`.
    q2: u128,
    /// `⌊2^E / s²⌋ ∈ (2^126, 2^127]` with `E = 126 + bitlen(s²)`.
    inv: u128,
    /// `E − 118`: `y = N·inv >> shift` is `N/(512s²)` in `Q127`.
    shift: u32,
    /// `K`.
    trials: usize,
}

impl core::fmt::Debug for ConstantTimeGaussian {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConstantTimeGaussian")
            .field("sigma", &(self.s, self.q))
            .field("cell_width", &(1u64 << self.w_log2))
            .field("cells", &self.cells)
            .finish_non_exhaustive()
    }
}

impl ConstantTimeGaussian {
    /// The most trials a sample runs (at `σ/W = 4`; [`trials`](Self::trials)).
    pub const MAX_TRIALS: usize = MAX_TRIALS;

    /// `log₂` of the proven bound on the total-variation distance between one sample's law
    /// and `N_ℤ(0, σ²)` (module docs).
    pub const DEVIATION_LOG2: i32 = DEVIATION_LOG2;

    /// The constant-time sampler for `g`'s `σ = s/q` (the same rational).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `σ < 4`.
    pub fn new(g: &DiscreteGaussian) -> Result<Self> {
        let (s, q) = g.sigma_ratio();
        let per_quarter = s / q / 4; // ⌊σ/4⌋ (floor of a floor)
        if per_quarter == 0 {
            return Err(Error::OutOfRange {
                name: "sigma of the constant-time sampler",
                value: g.sigma(),
                allowed: "[4, 3.04e9]",
            });
        }
        let w_log2 = 63 - per_quarter.leading_zeros(); // 4qW ≤ s < 8qW
        let (s, q) = (u128::from(s), u128::from(q));
        let wq = q << w_log2;
        let cells = (TAIL_SIGMAS * s).div_ceil(wq) as usize;
        debug_assert!((52..=MAX_CELLS).contains(&cells));
        let s2 = s * s;
        let e = 126 + (128 - s2.leading_zeros());
        let inv = div_pow2(e, s2);
        // Weights w_b = e^{−(bW)²q²/2s²} = exp_neg((bWq)²/(1024·s²), 9), summed in Q122.
        let mut sums = [0u128; MAX_CELLS + 1];
        for b in 0..cells {
            let bwq = b as u128 * wq;
            let y = mul_shr(bwq * bwq, inv, e - 117);
            sums[b + 1] = sums[b] + (exp_neg::<24>(y, 9) >> 5);
        }
        let total = sums[cells] + MARGIN_PER_CELL * cells as u128 + 8;
        let mut cdf = [u128::MAX; MAX_CELLS];
        for j in 1..=cells {
            cdf[j - 1] = div_wide(sums[j], total);
        }
        Ok(Self {
            s: s as u64,
            q: q as u64,
            w_log2,
            cells,
            cdf,
            q2: q * q,
            inv,
            shift: e - 118,
            trials: trials_for(s as f64 / (q << w_log2) as f64),
        })
    }

    /// `K`, the trials every sample runs: the smallest with `r^K ≤ 2^−103.5` for the bound
    /// `r ≤ 1/(2a + 1)`, `a = (σ/W)·√(π/2)`, on the rejection probability (module docs);
    /// from 30 at `σ/W = 4` down to 24 near `σ/W = 8`.
    ///
    /// ```
    /// # use dpattn_core::sampling::{ConstantTimeGaussian, DiscreteGaussian};
    /// assert_eq!(ConstantTimeGaussian::new(&DiscreteGaussian::new(1 << 30, 1)?)?.trials(), 30);
    /// assert_eq!(ConstantTimeGaussian::new(&DiscreteGaussian::new((1 << 31) - 1, 1)?)?.trials(), 24);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn trials(&self) -> usize {
        self.trials
    }

    /// The words every sample reads, `9·K`.
    pub fn words_per_sample(&self) -> usize {
        9 * self.trials
    }

    /// One sample from its `9·K` words (module docs).
    #[inline]
    fn sample_words(&self, words: &[u32]) -> i64 {
        let (mut found, mut n, mut negative) = (0u64, 0u64, 0u64);
        for w in words[..9 * self.trials].chunks_exact(9) {
            let (accept, cand, sign) = self.trial(w);
            let take = accept & !found;
            n = (n & !take) | (cand & take);
            negative = (negative & !take) | (sign & take);
            found |= accept;
        }
        // ±n without a branch: (n ^ m) − m with m = 0 or −1.
        ((n ^ negative) as i64).wrapping_sub(negative as i64)
    }

    /// `σ = s/q` as `(s, q)`, the [`DiscreteGaussian`]'s reduced form.
    ///
    /// ```
    /// # use dpattn_core::sampling::{ConstantTimeGaussian, DiscreteGaussian};
    /// let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(21, 2)?)?;
    /// assert_eq!(g.sigma_ratio(), (21, 2));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sigma_ratio(&self) -> (u64, u64) {
        (self.s, self.q)
    }

    /// The number of cells `B` the table scan visits each trial.
    ///
    /// ```
    /// # use dpattn_core::sampling::{ConstantTimeGaussian, DiscreteGaussian};
    /// // σ = 100: W = 16 (σ/W = 6.25), B = ⌈1300/16⌉ = 82.
    /// assert_eq!(ConstantTimeGaussian::new(&DiscreteGaussian::new(100, 1)?)?.cells(), 82);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn cells(&self) -> usize {
        self.cells
    }

    /// One trial: `(accepted mask, n, sign mask)`.
    #[inline(always)]
    fn trial(&self, w: &[u32]) -> (u64, u64, u64) {
        let u1 = words_u128(&w[0..4]);
        let u = u64::from(w[4]) & ((1u64 << self.w_log2) - 1);
        let sign = u64::from(w[4] >> 31);
        let u3 = words_u128(&w[5..9]) >> 1;
        // b = #{j : C(j) ≤ U₁}, over the whole table.
        let mut b = 0u64;
        for &c in &self.cdf[..self.cells] {
            b += u64::from(!u1.overflowing_sub(c).1);
        }
        let in_table = ct_mask(u1.overflowing_sub(self.cdf[self.cells - 1]).1);
        let bw = b << self.w_log2;
        let n = bw + u;
        // (n² − (bW)²)·q² = u·(2bW + u)·q², then /(512 s²) in Q127 (≤ 0.0131).
        let num = u128::from(u) * u128::from(2 * bw + u) * self.q2;
        let accept_p = exp_neg::<15>(mul_shr(num, self.inv, self.shift), 8);
        let below = ct_mask(u3.overflowing_sub(accept_p).1);
        let zero_negative = ct_mask(n == 0) & ct_mask(sign == 1);
        (below & in_table & !zero_negative, n, ct_mask(sign == 1))
    }
}

/// `0` or all ones, through `black_box` so the compiler does not turn the selects that use
/// it into branches.
#[inline(always)]
fn ct_mask(bit: bool) -> u64 {
    black_box(0u64.wrapping_sub(u64::from(bit)))
}

/// Four words as one 128-bit integer, the first most significant.
#[inline(always)]
fn words_u128(w: &[u32]) -> u128 {
    w.iter().fold(0u128, |acc, &x| (acc << 32) | u128::from(x))
}

/// `K` for `σ/W = ratio ∈ [4, 8)` (see [`ConstantTimeGaussian::trials`]), with every
/// rounding against us: `a` rounded down, `r` and the final margin up.
fn trials_for(ratio: f64) -> usize {
    let a = ratio * 1.253_314_137_315_5 * (1.0 - 1e-12); // √(π/2) = 1.2533141373155002…
    let r = 1.0 / (2.0 * a + 1.0) * (1.0 + 1e-12) + 1e-30;
    let k = libm::ceil(103.5 / (-libm::log2(r) * (1.0 - 1e-12))) as usize;
    debug_assert!((24..=MAX_TRIALS).contains(&k));
    k.min(MAX_TRIALS)
}

impl ExactSampler for ConstantTimeGaussian {
    type Output = i64;

    /// One sample from exactly [`words_per_sample`](ConstantTimeGaussian::words_per_sample)
    /// words of `bits`. Not exact: within total variation `2^−100` of `N_ℤ(0, σ²)` (module
    /// docs).
    ///
    /// # Errors
    /// [`Error::RandomnessExhausted`] if `bits` runs out (never for keyed windows).
    fn sample_bits<S: BitSource + ?Sized>(&self, bits: &mut S) -> Result<i64> {
        let mut words = [0u32; MAX_WORDS];
        for x in &mut words[..self.words_per_sample()] {
            *x = bits.next_word()?;
        }
        Ok(self.sample_words(&words))
    }

    /// As the provided method (element `first + i`'s window, the same values as
    /// [`sample_at`](ExactSampler::sample_at)), generating the windows of 8 elements at a
    /// time with SIMD: block `c` of the windows of elements `e … e + 7` are consecutive
    /// counters `(c << 40) | e …`.
    fn fill_keyed(&self, stream: &KeyedStream, first: u64, out: &mut [i64]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        check_elements(first, out.len())?;
        let blocks = self.words_per_sample().div_ceil(BLOCK_WORDS);
        let mut buf = [[[0u32; BLOCK_WORDS]; FILL_CHUNK]; MAX_BLOCKS];
        let mut words = [0u32; MAX_BLOCKS * BLOCK_WORDS];
        let mut element = first;
        for chunk in out.chunks_mut(FILL_CHUNK) {
            for (c, row) in buf[..blocks].iter_mut().enumerate() {
                stream.blocks(((c as u64) << 40) | element, &mut row[..chunk.len()]);
            }
            for (i, o) in chunk.iter_mut().enumerate() {
                for (c, row) in buf[..blocks].iter().enumerate() {
                    words[c * BLOCK_WORDS..(c + 1) * BLOCK_WORDS].copy_from_slice(&row[i]);
                }
                *o = self.sample_words(&words);
            }
            element += chunk.len() as u64;
        }
        Ok(())
    }
}

/// The `δ` that `N` constant-time samples add to an `(ε, δ)` release: `(1 + e^ε)·N·2^−100`,
/// rounded up (module docs). `+∞` when it overflows.
///
/// ```
/// use dpattn_core::sampling::constant_time_delta;
/// let d = constant_time_delta(1 << 40, 1.0);
/// assert!(d >= (1.0 + 1f64.exp()) * 2f64.powi(-60) && d < 3.8 * 2f64.powi(-60));
/// ```
pub fn constant_time_delta(samples: u64, epsilon: f64) -> f64 {
    use crate::directed_rounding::{add_up, mul_up};
    let growth = add_up(1.0, libm::exp(epsilon) * (1.0 + 4.0 * f64::EPSILON));
    mul_up(
        mul_up(growth, samples as f64 * (1.0 + f64::EPSILON)),
        libm::exp2(f64::from(DEVIATION_LOG2)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{KeyedStream, NoiseKey};

    #[test]
    fn cell_width_and_count_follow_the_rule() {
        for (s, q) in
            [(4u64, 1u64), (7, 1), (8, 1), (100, 1), (1 << 30, 1), (3_037_000_499, 1), (21, 2)]
        {
            let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(s, q).unwrap()).unwrap();
            let sigma = s as f64 / q as f64;
            let w = (1u64 << g.w_log2) as f64;
            assert!(sigma / w >= 4.0 && sigma / w < 8.0, "σ = {sigma}");
            assert!(g.cells as f64 * w >= 13.0 * sigma && (g.cells - 1) as f64 * w < 13.0 * sigma);
        }
    }

    #[test]
    fn table_is_the_normalised_gaussian_cdf() {
        // Independent f64 reference: C(j)/2^128 against Σ_{b<j} w_b / Σ_b w_b.
        let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(1000, 1).unwrap()).unwrap();
        let w = (1u64 << g.w_log2) as f64;
        let mut weights = [0.0f64; 400];
        for (b, x) in weights.iter_mut().enumerate() {
            *x = libm::exp(-(b as f64 * w).powi(2) / (2.0 * 1e6));
        }
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        for j in 1..=g.cells {
            acc += weights[j - 1];
            let got = g.cdf[j - 1] as f64 / 2f64.powi(128);
            assert!((got - acc / total).abs() < 1e-13, "j = {j}: {got} vs {}", acc / total);
        }
        assert!(g.cdf[g.cells - 1] < u128::MAX);
    }

    #[test]
    fn bulk_fill_equals_single_draws() {
        // The SIMD window fill against ElementBits, up to the last element index (2^40 − 1),
        // for 30, 24 and 30 trials (17, 14 and 17 blocks), over a chunk boundary.
        let s = KeyedStream::new(&NoiseKey::for_replay([4; 32]), 9);
        for (sg, q) in [(1u64 << 30, 1u64), ((1 << 31) - 1, 1), (21, 2)] {
            let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(sg, q).unwrap()).unwrap();
            let first = (1u64 << 40) - 21;
            let mut out = [0i64; 21];
            g.fill_keyed(&s, first, &mut out).unwrap();
            for (i, &z) in out.iter().enumerate() {
                assert_eq!(z, g.sample_at(&s, first + i as u64).unwrap(), "σ = {sg}/{q}, {i}");
            }
            assert!(g.fill_keyed(&s, first, &mut [0i64; 22]).is_err());
        }
    }

    #[test]
    fn reads_a_fixed_number_of_words() {
        let s = KeyedStream::new(&NoiseKey::for_replay([9; 32]), 3);
        let g = ConstantTimeGaussian::new(&DiscreteGaussian::new(1 << 20, 1).unwrap()).unwrap();
        for e in 0..50 {
            let mut bits = crate::sampling::ElementBits::new(&s, e).unwrap();
            g.sample_bits(&mut bits).unwrap();
            assert_eq!(bits.words_used(), g.words_per_sample() as u64);
        }
    }
}
