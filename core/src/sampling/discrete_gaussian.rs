//! The discrete Gaussian distribution `N_ℤ(0, σ²)` on the integers, sampled exactly.
//!
//! **Guarantee.** [`DiscreteGaussian`] with rational `σ = s/q` returns `x ∈ ℤ` with
//! probability exactly `e^{−x²/2σ²} / Σ_{y∈ℤ} e^{−y²/2σ²}`, given fair bits. If an
//! integer-valued `f` has L2 sensitivity `Δ`, `f(X) + N_ℤ(0, σ²)` (per coordinate) is
//! `Δ²/(2σ²)`-zCDP (CKS20 Theorem 4), the same as the continuous Gaussian, and its variance
//! is below `σ²`.
//!
//! **Two exact algorithms, chosen by `σ`.** For `σ ≥ 2^10` — the integer
//! noise of every grid release — the sampler is Karney's discrete normal at `σ' = 64`
//! refined by uniform cells of width `σ/64` (module `gaussian_cells`: the same law, exact,
//! with about half of CKS20's work per sample). Every other `σ` uses CKS20 Algorithm 3 as
//! follows.
//!
//! Algorithm: Canonne, Kamath and Steinke 2020 (CKS20), Algorithm 3: with `t = ⌊σ⌋ + 1`, repeat
//! `Y ← DLap(t)` ([`DiscreteLaplace`], scale `t`) until
//! `Bernoulli(exp(−(|Y| − σ²/t)² / 2σ²))` accepts, and return `Y`.
//!
//! **Exact integer arithmetic.** The exponent is `(A/B)²/2` with
//! `A = |Y|·q²·t − s²` (taken in absolute value) and `B = s·q·t`. Writing
//! `A = a·B + r` (`0 ≤ r < B`) and `f = r/B`,
//! `exp(−(a + f)²/2) = exp(−a²/2) · exp(−f)^a · exp(−f²/2)`, so the acceptance is three
//! independent exact draws, in this order, stopping at the first failure:
//!
//! 1. `Bernoulli(exp(−a²/2))`: `a²/2` is an integer or a half-integer, so `⌊a²/2⌋` draws of
//!    `Bernoulli(e^−1)` and, if `a` is odd, one of `Bernoulli(e^−1/2)`;
//! 2. `a` draws of `Bernoulli(exp(−r/B))`;
//! 3. `Bernoulli(exp(−r²/2B²))`, whose inner `Bernoulli(r²/2B²)` is drawn as
//!    `Bernoulli(r/B) ∧ Bernoulli(r/2B)`;
//!
//! each CKS20 Algorithm 1 on integers. `(s, q)` is reduced to lowest terms, and the
//! construction bounds `B = s·q·t < 2^63` and `q²·t < 2^64` make every intermediate fit:
//! `|Y| ≤ i64::MAX` gives `|Y|·q²·t < 2^127` and `s² < 2^126` (the only `u128` values; `A`
//! is divided by `B` in `u64` whenever it fits), and `2B < 2^64`. `a ≥ 2^64` (never in
//! practice) is handled as `a` draws of `Bernoulli(exp(−a/2))`. No floating point is
//! involved except in [`from_f64`](DiscreteGaussian::from_f64) and the reporting helpers.
//! Bits are read as described in [`crate::sampling::ExactSampler`].
//!
//! **Supported range.** Any `s, q ≥ 1` whose reduced form has `s·q·(⌊s/q⌋ + 1) < 2^63` and
//! `q²·(⌊s/q⌋ + 1) < 2^64`: for integer `σ` (`q = 1`) up to `σ = 3 037 000 499`; in
//! general `σ ≲ 3.04·10⁹`, with a finer `q` allowed the smaller `σ` is.
//!
//! Run time is random (expected `O(1)` proposals); it leaks the magnitude of the noise
//! through timing (JMRO22; `docs/PAPERS.md` A.2.5).

use crate::error::{Error, Result};
use crate::sampling::bit_source::BitSource;
use crate::sampling::discrete_laplace::{DiscreteLaplace, ratio_f64};
use crate::sampling::exact_bernoulli::{
    bernoulli_exp_product, bernoulli_exp_split, bernoulli_exp_u64,
};
use crate::sampling::exact_sampler::{BitBuf, ExactSampler};
use crate::sampling::gaussian_cells::Cells;

const RANGE: &str = "s, q >= 1 with s*q*(floor(s/q)+1) < 2^63 and q^2*(floor(s/q)+1) < 2^64 \
                     (sigma up to about 3.04e9)";

/// The discrete Gaussian `N_ℤ(0, σ²)`, `P(x) ∝ exp(−x²/2σ²)`, with rational `σ = s/q`.
///
/// ```
/// use dpattn_core::sampling::{DiscreteGaussian, ExactSampler, KeyedStream, NoiseKey};
/// let g = DiscreteGaussian::new(7, 2)?; // σ = 3.5
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut noise = [0i64; 4000];
/// g.fill_keyed(&s, 0, &mut noise)?;
/// assert_eq!(noise[17], g.sample_at(&s, 17)?);
/// let var = noise.iter().map(|&x| (x * x) as f64).sum::<f64>() / 4000.0;
/// assert!((var / g.variance() - 1.0).abs() < 0.1);
/// assert!(DiscreteGaussian::new(0, 1).is_err() && DiscreteGaussian::new(u64::MAX, 1).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscreteGaussian {
    s: u64,
    q: u64,
    /// The proposal `DLap(t)`, `t = ⌊σ⌋ + 1`.
    lap: DiscreteLaplace,
    /// `q²·t < 2^64`.
    q2t: u64,
    /// `s²`.
    s2: u128,
    /// `B = s·q·t < 2^63`.
    b: u64,
    /// The cell algorithm, for `σ ≥ 2^10`.
    cells: Option<Cells>,
}

impl DiscreteGaussian {
    /// `σ = s/q` (reduced to lowest terms before the range check).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `s` or `q` is zero or the pair is outside the supported
    /// range (module docs).
    pub fn new(s: u64, q: u64) -> Result<Self> {
        let bad = |value: f64| Error::OutOfRange { name: "sigma = s/q", value, allowed: RANGE };
        if s == 0 || q == 0 {
            return Err(bad(if q == 0 { f64::INFINITY } else { 0.0 }));
        }
        let g = gcd(s, q);
        let (s, q) = (s / g, q / g);
        let t = (s / q).checked_add(1).ok_or(bad(ratio_f64(s, q)))?;
        let q2t = u128::from(q) * u128::from(q) * u128::from(t);
        let b = u128::from(s) * u128::from(q) * u128::from(t);
        if q2t >= 1 << 64 || b >= 1 << 63 {
            return Err(bad(ratio_f64(s, q)));
        }
        let cells = Cells::new(s, q);
        Ok(Self {
            s,
            q,
            lap: DiscreteLaplace::integer(t)?,
            q2t: q2t as u64,
            s2: u128::from(s) * u128::from(s),
            b: b as u64,
            cells,
        })
    }

    /// `σ` from an `f64`, rounded *up* (the privacy-safe direction) to `s/q` with `q` the
    /// largest power of two the supported range allows and `s = ⌈σ·q⌉` (then reduced, so a
    /// dyadic `σ` such as `10.5` is represented exactly as `21/2`). The relative
    /// rounding `s/(σq) − 1` is below `1/(σq)`: below `2^−30` for every `σ ≥ 1/2`, and below
    /// `2^−31/σ` for smaller `σ` (for which `q = 2^31`). [`sigma_ratio`](Self::sigma_ratio)
    /// gives the exact value used.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteGaussian;
    /// assert_eq!(DiscreteGaussian::from_f64(3.0)?.sigma_ratio(), (3, 1));
    /// let (s, q) = DiscreteGaussian::from_f64(0.8)?.sigma_ratio();
    /// assert!(q.is_power_of_two() && q >= 1 << 30 && s == (0.8 * q as f64).ceil() as u64);
    /// let g = DiscreteGaussian::from_f64(0.1)?;
    /// assert!(g.sigma() >= 0.1 && g.sigma() < 0.1 * (1.0 + 1e-9));
    /// assert!(DiscreteGaussian::from_f64(4e9).is_err() && DiscreteGaussian::from_f64(0.0).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `σ` is not positive and finite, or too large even with
    /// `q = 1` (`σ > 3 037 000 499`).
    pub fn from_f64(sigma: f64) -> Result<Self> {
        if !(sigma.is_finite() && sigma > 0.0) {
            return Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, inf)" });
        }
        // q = 2^j for j = 31 down to 0 (q²·t < 2^64 rules out q ≥ 2^32). σ·2^j is exact.
        for j in (0..32).rev() {
            let sq = libm::ldexp(sigma, j);
            let s = libm::ceil(sq);
            if s >= 9_223_372_036_854_775_808.0 {
                continue;
            }
            if let Ok(g) = Self::new(s as u64, 1 << j) {
                return Ok(g);
            }
        }
        Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, 3037000499]" })
    }

    /// `(s, q)` in lowest terms: `σ = s/q` exactly.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteGaussian;
    /// assert_eq!(DiscreteGaussian::new(21, 2)?.sigma_ratio(), (21, 2));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sigma_ratio(&self) -> (u64, u64) {
        (self.s, self.q)
    }

    /// `σ` in `f64` (rounded to nearest; for `s ≥ 2^53` within 2 ulps).
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteGaussian;
    /// assert_eq!(DiscreteGaussian::new(21, 2)?.sigma(), 10.5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sigma(&self) -> f64 {
        ratio_f64(self.s, self.q)
    }

    /// The proposal's integer scale `t = ⌊σ⌋ + 1`.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteGaussian;
    /// assert_eq!(DiscreteGaussian::new(21, 2)?.proposal_scale(), 11);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn proposal_scale(&self) -> u64 {
        self.lap.scale().0
    }

    /// The variance `Σ x² P(x)` in `f64`. For `σ < 4` it is summed over `|x| ≤ 160` (the
    /// rest is below `e^{−800}`); for `σ ≥ 4` it equals `σ²` to within a relative
    /// `8π²σ² e^{−2π²σ²} < 10^{−130}` (Poisson summation), so `σ²` is returned.
    ///
    /// ```
    /// # use dpattn_core::sampling::DiscreteGaussian;
    /// assert_eq!(DiscreteGaussian::new(10, 1)?.variance(), 100.0);
    /// let v = DiscreteGaussian::new(1, 2)?.variance(); // σ = 0.5
    /// assert!(v < 0.25 && v > 0.2);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn variance(&self) -> f64 {
        let sigma = self.sigma();
        if sigma >= 4.0 {
            return sigma * sigma;
        }
        let c = 1.0 / (2.0 * sigma * sigma);
        let (mut norm, mut second) = (1.0, 0.0);
        for x in (1..=160u32).rev() {
            let x = f64::from(x);
            let w = libm::exp(-x * x * c);
            norm += 2.0 * w;
            second += 2.0 * x * x * w;
        }
        second / norm
    }

    /// The cell algorithm, or CKS20 Algorithm 3.
    #[inline]
    fn draw<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>) -> Result<i64> {
        if let Some(cells) = &self.cells {
            return cells.draw(bits);
        }
        loop {
            let y = self.lap.draw(bits)?;
            if self.accept(bits, y)? {
                return Ok(y);
            }
        }
    }

    /// CKS20 Algorithm 3's acceptance test for the proposal `y`.
    #[inline]
    fn accept<B: BitSource + ?Sized>(&self, bits: &mut BitBuf<'_, B>, y: i64) -> Result<bool> {
        let num = (u128::from(y.unsigned_abs()) * u128::from(self.q2t)).abs_diff(self.s2);
        let b = u128::from(self.b);
        // A = a·B + r; a is small in the common case, so avoid the u128 division.
        let (a, r) = if num < b {
            (0, num as u64)
        } else if num < 2 * b {
            (1, (num - b) as u64)
        } else if let Ok(n) = u64::try_from(num) {
            (u128::from(n / self.b), n % self.b)
        } else {
            (num / b, (num % b) as u64)
        };
        if a != 0 {
            if !bernoulli_exp_half_square(bits, a)? {
                return Ok(false);
            }
            if r != 0 {
                let mut i = 0u128;
                while i < a {
                    if !bernoulli_exp_u64(bits, r, self.b)? {
                        return Ok(false);
                    }
                    i += 1;
                }
            }
        }
        if r == 0 {
            return Ok(true);
        }
        // exp(−r²/2B²): Algorithm 1 with Bernoulli(r²/2B²) = Bernoulli(r/B) ∧ Bernoulli(r/2B).
        bernoulli_exp_product(bits, (r, self.b), (r, 2 * self.b))
    }
}

/// Greatest common divisor (binary algorithm), for `a, b ≥ 1`.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            core::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

/// `Bernoulli(exp(−a²/2))`.
#[inline]
fn bernoulli_exp_half_square<B: BitSource + ?Sized>(
    bits: &mut BitBuf<'_, B>,
    a: u128,
) -> Result<bool> {
    if let Ok(a) = u64::try_from(a) {
        let sq = u128::from(a) * u128::from(a);
        return bernoulli_exp_split(bits, sq >> 1, sq & 1, 2);
    }
    // exp(−a²/2) = exp(−a/2)^a.
    let mut i = 0u128;
    while i < a {
        if !bernoulli_exp_split(bits, a >> 1, a & 1, 2)? {
            return Ok(false);
        }
        i += 1;
    }
    Ok(true)
}

impl ExactSampler for DiscreteGaussian {
    type Output = i64;

    /// # Errors
    /// Besides exhaustion, [`Error::SizeOverflow`] if a proposal does not fit in `i64`
    /// (probability below `e^{−2^{31}}` in the supported range).
    #[inline]
    fn sample_bits<B: BitSource + ?Sized>(&self, bits: &mut B) -> Result<i64> {
        self.draw(&mut BitBuf::new(bits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::exact_sampler::tests::run;
    use crate::sampling::{KeyedStream, NoiseKey};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn range_is_validated() {
        assert!(DiscreteGaussian::new(0, 1).is_err());
        assert!(DiscreteGaussian::new(1, 0).is_err());
        assert!(DiscreteGaussian::new(u64::MAX, 1).is_err());
        assert!(DiscreteGaussian::new(3_037_000_499, 1).is_ok());
        assert!(DiscreteGaussian::new(3_037_000_500, 1).is_err());
        // q²·t < 2^64: q = 2^32 fails even for tiny σ.
        assert!(DiscreteGaussian::new(1, 1 << 31).is_ok());
        assert!(DiscreteGaussian::new(1, 1 << 32).is_err());
        for x in [0.0, -1.0, f64::NAN, f64::INFINITY, 3_037_000_500.0] {
            assert!(matches!(DiscreteGaussian::from_f64(x), Err(Error::OutOfRange { .. })), "{x}");
        }
        let g = DiscreteGaussian::from_f64(3_037_000_499.0).unwrap();
        assert_eq!(g.sigma_ratio(), (3_037_000_499, 1));
    }

    #[test]
    fn from_f64_rounds_up_by_less_than_two_to_the_minus_30() {
        for sigma in [0.5, 0.8, 1.0, 3.0, 10.5, 1e3, 12345.678, 1e6, 5e8, 3e9] {
            // The largest q = 2^j the range allows, found independently.
            let j = (0..32)
                .rev()
                .find(|&j| {
                    let s = libm::ceil(libm::ldexp(sigma, j)) as u64;
                    DiscreteGaussian::new(s, 1 << j).is_ok()
                })
                .unwrap();
            let sq = libm::ldexp(sigma, j); // exact
            assert!(sq >= 2f64.powi(30), "{sigma}: σq = {sq}");
            let s = libm::ceil(sq) as u64;
            let g = DiscreteGaussian::from_f64(sigma).unwrap();
            let (rs, rq) = g.sigma_ratio();
            // Same value as s/2^j, in lowest terms.
            assert_eq!(u128::from(rs) << j, u128::from(s) * u128::from(rq), "{sigma}");
            assert_eq!(gcd(rs, rq), 1);
            assert!(rs as f64 >= sigma * rq as f64);
        }
        let g = DiscreteGaussian::from_f64(1e-3).unwrap();
        // σ < 1/2 uses q = 2^31: ⌈2147483.648⌉ = 2147484 = 4 · 536871.
        assert_eq!(g.sigma_ratio(), (536_871, 1 << 29));
        assert_eq!(DiscreteGaussian::from_f64(10.5).unwrap().sigma_ratio(), (21, 2));
    }

    #[test]
    fn the_cell_algorithm_is_used_from_sigma_two_to_the_10() {
        let cells = |s, q| DiscreteGaussian::new(s, q).unwrap().cells.is_some();
        assert!(cells(1024, 1) && cells(2048, 2) && cells(3_037_000_499, 1));
        assert!(!cells(1023, 1) && !cells(2047, 2) && !cells(7, 3));
        // The range (s·q·t < 2^63, so s < 2^31.5) keeps s far below the cells' 2^50.
        assert!(cells(3_037_000_499, 2) && cells(1 << 20, 1 << 10));
        assert!(DiscreteGaussian::from_f64(1e9 + 0.5).unwrap().cells.is_some());
        assert!(DiscreteGaussian::from_f64(1000.0).unwrap().cells.is_none());
    }

    #[test]
    fn fractions_are_reduced() {
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(1, u64::MAX), 1);
        assert_eq!(gcd(1 << 40, 3 << 20), 1 << 20);
        assert_eq!(DiscreteGaussian::new(42, 4).unwrap(), DiscreteGaussian::new(21, 2).unwrap());
        // Reduction happens before the range check.
        assert!(DiscreteGaussian::new(3_037_000_499 << 20, 1 << 20).is_ok());
    }

    #[test]
    fn exponent_numerator_matches_the_formula() {
        let g = DiscreteGaussian::new(21, 2).unwrap(); // σ = 10.5, t = 11
        assert_eq!((g.q2t, g.s2, g.b), (44, 441, 462));
        // Check A = |y|·q²t − s² against direct evaluation of (|y| − σ²/t)/σ.
        for y in [0i64, 1, 10, 11, 20, 40, 1000, i64::MAX] {
            let num = (u128::from(y.unsigned_abs()) * 44).abs_diff(441);
            let direct = ((y as f64) - 110.25 / 11.0).abs() / 10.5;
            if y < 1 << 40 {
                assert!((num as f64 / 462.0 - direct).abs() < 1e-9);
            }
        }
    }

    /// Bounds on the acceptance probability of `y` from all bit strings of length `depth`.
    fn acceptance_bracket(g: &DiscreteGaussian, y: i64, depth: usize) -> (f64, f64) {
        let (mut yes, mut open) = (0u64, 0u64);
        let mut buf = [0u8; 20];
        for u in 0..(1u32 << depth) {
            for (i, b) in buf[..depth].iter_mut().enumerate() {
                *b = ((u >> i) & 1) as u8;
            }
            match run(&buf[..depth], |b| g.accept(b, y)) {
                (_, used) if used > depth as u64 => open += 1,
                (Ok(true), _) => yes += 1,
                _ => {}
            }
        }
        let n = (1u64 << depth) as f64;
        (yes as f64 / n, (yes + open) as f64 / n)
    }

    #[test]
    fn acceptance_probability_is_exact() {
        // All bit strings of length 16: the resolved mass brackets the exact probability.
        for (s, q) in [(1u64, 1u64), (7, 2), (4, 5)] {
            let g = DiscreteGaussian::new(s, q).unwrap();
            let sigma = s as f64 / q as f64;
            let t = g.proposal_scale() as f64;
            for y in [0i64, 1, -2, 3, 5, 9] {
                let d = (y.unsigned_abs() as f64 - sigma * sigma / t) / sigma;
                let p = libm::exp(-d * d / 2.0);
                let (lo, hi) = acceptance_bracket(&g, y, 16);
                assert!(lo <= p + 1e-12 && p <= hi + 1e-12, "σ={sigma} y={y}: {lo} ≤ {p} ≤ {hi}");
                assert!(hi - lo < 0.05, "σ={sigma} y={y}: {lo}..{hi}");
            }
        }
    }

    #[test]
    fn huge_a_takes_the_nested_path() {
        // a ≥ 2^64 is handled as a draws of Bernoulli(exp(−a/2)); the first fails quickly.
        assert_eq!(run(&[1, 1, 1, 1], |b| bernoulli_exp_half_square(b, 1 << 70)).0, Ok(false));
        assert_eq!(run(&[], |b| bernoulli_exp_half_square(b, 0)), (Ok(true), 0));
        // a = 1: one Bernoulli(e^−1/2); K = 1: Bernoulli(1/2) bit 1 fails → true.
        assert_eq!(run(&[1], |b| bernoulli_exp_half_square(b, 1)), (Ok(true), 1));
    }

    #[test]
    fn keyed_fill_equals_single_elements() {
        let s = KeyedStream::new(&NoiseKey::for_replay([8; 32]), 2);
        for g in [DiscreteGaussian::from_f64(3.0).unwrap(), DiscreteGaussian::new(4, 5).unwrap()] {
            let mut out = [0i64; 40];
            g.fill_keyed(&s, 100, &mut out).unwrap();
            for (i, &x) in out.iter().enumerate() {
                assert_eq!(x, g.sample_at(&s, 100 + i as u64).unwrap());
            }
        }
        let g = DiscreteGaussian::from_f64(2.0).unwrap();
        let mut out = [0i64; 200];
        g.fill(&mut ChaCha20Rng::from_seed([9; 32]), &mut out).unwrap();
        assert!(out.iter().all(|x| x.abs() < 20) && out.iter().any(|&x| x != 0));
    }
}
