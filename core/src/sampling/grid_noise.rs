//! "Secure" floating-point noise: exact integer noise on a power-of-two grid. This module
//! holds the grid machinery shared by the two mechanisms ([`GridLaplace`] in
//! `grid_laplace`, [`GridGaussian`] in `grid_gaussian`): the grid `r = 2^k` and its
//! bounds, `⌈log₂⌉` for the resolution rules, rounding to the grid, and the add-noise
//! loops. The calibration rounds with the crate's directed-rounding helpers.
//!
//! **Guarantee.** For `f64` data `x` the mechanisms release
//! `y = (round(x/r) + Z) · r` with `r = 2^k` a *data-independent* resolution and `Z` exact
//! integer noise — [`DiscreteLaplace`] for [`GridLaplace`], [`DiscreteGaussian`] for
//! [`GridGaussian`]. The output is a function of the integer `round(x/r) + Z` alone, so the
//! floating-point attacks on textbook samplers (Mironov 2012; `docs/PAPERS.md` A.2.5) do not
//! apply: this is the pattern of Google's "Secure Noise Generation" and OpenDP's float
//! measurements (`docs/PAPERS.md` A.2.1, A.2.3, A.2.7).
//!
//! **Sensitivity inflation (what we implement and why).** Rounding moves each coordinate
//! by at most `r/2`, so two neighbouring inputs whose coordinates differ by `δᵢ` round to
//! integers differing by at most `|δᵢ|/r + 1` (not `+ 1/2`: `0.49` and `0.51` round to
//! `0` and `1`). Over `d` coordinates the rounded data therefore has
//!
//! * L1 sensitivity `Δ₁ + d·r` — [`GridLaplace`] calibrates the integer scale to
//!   `(Δ₁ + d·r)/(r·ε)`, which for `d = 1` is Google's Proposition 1 (`λ = rε/(Δ + r)`);
//! * L2 sensitivity `Δ₂ + √d·r` — [`GridGaussian`] reports
//!   `ρ = (Δ₂ + √d·r)²/(2σ²)` (zCDP, CKS20 Theorem 4),
//!
//! exactly OpenDP's `get_rounding_distance` (`2^k · size` for L1, `2^k · √size` for L2,
//! with OpenDP's `k_min` term zero because our inputs are rounded to `r` itself). Every
//! floating-point quantity in the calibration is rounded in the safe direction (upwards
//! for sensitivities, noise scales and `ρ`; the integer noise scale is the `f64` upper
//! bound converted exactly or rounded up).
//!
//! **Resolution.** [`GridLaplace::new`] uses Google's rule, the smallest power of two
//! `r ≥ (Δ₁/ε)/2^40`, so the integer scale `Δ₁/(εr)` is in `(2^39, 2^40]` and the inflation
//! `d·r/Δ₁` below `d·2^−39/ε`. [`GridGaussian::new`] takes the smallest `r` with `σ/r ≤ 2^30`
//! (`σ/r ∈ (2^29, 2^30]`), inside the range where [`DiscreteGaussian`] represents `σ/r` to a
//! relative `2^−30` (rounded up); the inflation is `√d·r/Δ₂ < √d·2^−29·σ/Δ₂`. Both have a
//! `with_resolution` form taking `k` (`−1023 ≤ k ≤ 960`).
//!
//! **What is exact and what is floating point.** Exact: the integer noise `Z` (given fair
//! bits), `round(x/r)` (half away from zero; scaling by `2^−k` is exact, and when it
//! underflows the result rounds to 0 as it should), the integer sum, and the final product
//! by `2^k`, which is exact whenever `|round(x/r) + Z| ≤ 2^53`. A larger sum is rounded to
//! the nearest `f64` — still a multiple of `r`, still a function of the integer alone, so
//! the guarantee is unaffected. Inputs need `|round(x/r)| < 2^53`, i.e. `|x| ≲ 2^53·r`
//! (`≈ 2^13·Δ₁/ε` at the default Laplace resolution, `≈ 2^23·σ` at the Gaussian one);
//! larger inputs and NaN/infinities are errors ([`Error::DomainViolation`],
//! [`Error::PrivateNonFinite`]), reported before `data` is touched. Such an error depends on
//! the data, so it is a usability check, not part of the mechanism: callers clamp their
//! data to a public bound (as the sensitivity requires anyway) before calling. The
//! offending index and value are private: only [`Error::private_detail`] returns them.
//! Floating point appears only in the calibration (choosing `r`, converting `ε`, `σ` and
//! the sensitivities, all rounded conservatively) and in the reporting helpers.
//!
//! **Randomness.** Element `i` of a keyed draw uses the window of element `first + i`
//! ([`crate::sampling::ElementBits`]); the RNG forms draw the elements in order, each from
//! a fresh 32-bit read (see [`ExactSampler`]). If a sampler fails mid-way (window
//! exhausted, or an integer overflow of probability below 2^−60), every element of `data`
//! is set to NaN so that no un-noised value can be released by mistake.
//!
//! Background: `docs/PAPERS.md` A.2.1, A.2.3, A.2.5, A.2.7.
//!
//! [`GridLaplace`]: crate::sampling::GridLaplace
//! [`GridLaplace::new`]: crate::sampling::GridLaplace::new
//! [`GridGaussian`]: crate::sampling::GridGaussian
//! [`GridGaussian::new`]: crate::sampling::GridGaussian::new
//! [`DiscreteLaplace`]: crate::sampling::DiscreteLaplace
//! [`DiscreteGaussian`]: crate::sampling::DiscreteGaussian

use rand_core::CryptoRng;

use crate::error::{Error, PrivateDetail, Result};
use crate::sampling::bit_source::{RngBits, check_element, fill_windows};
use crate::sampling::exact_sampler::ExactSampler;
use crate::sampling::keyed_stream::KeyedStream;

/// Smallest and largest resolution exponent: `2^−k` and `2^63 · 2^k` must be finite.
const K_MIN: i32 = -1023;
const K_MAX: i32 = 960;
/// Inputs with `|round(x/r)| ≥ 2^53` are rejected.
const MAX_GRID_INDEX: f64 = 9_007_199_254_740_992.0;
/// Elements noised per keyed chunk.
const CHUNK: usize = 64;

/// The grid `r = 2^k` and the input checks shared by both mechanisms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grid {
    pub(crate) k: i32,
    pub(crate) r: f64,
    pub(crate) inv_r: f64,
    pub(crate) dimension: usize,
}

impl Grid {
    pub(crate) fn new(k: i32, dimension: usize) -> Result<Self> {
        if !(K_MIN..=K_MAX).contains(&k) {
            return Err(Error::OutOfRange {
                name: "resolution exponent k",
                value: f64::from(k),
                allowed: "[-1023, 960]",
            });
        }
        if dimension == 0 || dimension as u64 > 1 << 53 {
            return Err(Error::OutOfRange {
                name: "dimension",
                value: dimension as f64,
                allowed: "[1, 2^53]",
            });
        }
        Ok(Self { k, r: pow2(k), inv_r: pow2(-k), dimension })
    }

    /// `round(x/r)`, half away from zero. `x` is private data: an error keeps `i` and `x` in
    /// its [`PrivateDetail`].
    #[inline]
    fn index(&self, x: f64, i: usize) -> Result<i64> {
        if !x.is_finite() {
            return Err(Error::private_non_finite("data", i));
        }
        let n = libm::round(x * self.inv_r);
        if n.abs() >= MAX_GRID_INDEX {
            return Err(Error::DomainViolation {
                condition: "every |data[i]| / resolution below 2^53",
                detail: PrivateDetail::from_entry(i, x),
            });
        }
        Ok(n as i64)
    }

    /// Validates `data` as elements `first ..` of a `dimension`-coordinate query.
    fn check(&self, data: &[f64], first: u64) -> Result<()> {
        let end = first
            .checked_add(data.len() as u64)
            .ok_or(Error::SizeOverflow { what: "first element + length" })?;
        if end > self.dimension as u64 {
            return Err(Error::ShapeMismatch {
                arg: "data",
                axis: "coordinates (first + len, at most the calibrated dimension)",
                expected: self.dimension,
                got: usize::try_from(end).unwrap_or(usize::MAX),
            });
        }
        for (i, &x) in data.iter().enumerate() {
            self.index(x, i)?;
        }
        Ok(())
    }

    /// `(n + z) · r`.
    #[inline]
    fn output(&self, n: i64, z: i64) -> Result<f64> {
        let m = n.checked_add(z).ok_or(Error::SizeOverflow { what: "grid index + noise" })?;
        Ok(m as f64 * self.r)
    }

    pub(crate) fn add_rng<S, R>(&self, noise: &S, rng: &mut R, data: &mut [f64]) -> Result<()>
    where
        S: ExactSampler<Output = i64>,
        R: CryptoRng + ?Sized,
    {
        self.check(data, 0)?;
        let mut bits = RngBits::new(rng);
        let mut run = || -> Result<()> {
            for (i, x) in data.iter_mut().enumerate() {
                let z = noise.sample_bits(&mut bits)?;
                *x = self.output(self.index(*x, i)?, z)?;
            }
            Ok(())
        };
        let out = run();
        poison_on_error(out, data)
    }

    pub(crate) fn add_keyed<S>(
        &self,
        noise: &S,
        stream: &KeyedStream,
        first: u64,
        data: &mut [f64],
    ) -> Result<()>
    where
        S: ExactSampler<Output = i64>,
    {
        if data.is_empty() {
            return Ok(());
        }
        self.check(data, first)?;
        check_element(first + data.len() as u64 - 1)?;
        let mut z = [0i64; CHUNK];
        let mut run = || -> Result<()> {
            let mut off = 0;
            while off < data.len() {
                let len = CHUNK.min(data.len() - off);
                fill_windows(stream, first + off as u64, &mut z[..len], |b| noise.sample_bits(b))?;
                for (j, &z) in z[..len].iter().enumerate() {
                    let x = &mut data[off + j];
                    *x = self.output(self.index(*x, off + j)?, z)?;
                }
                off += len;
            }
            Ok(())
        };
        let out = run();
        poison_on_error(out, data)
    }
}

fn poison_on_error(out: Result<()>, data: &mut [f64]) -> Result<()> {
    if out.is_err() {
        data.fill(f64::NAN);
    }
    out
}

/// `2^k` for `−1074 ≤ k ≤ 1023`, exactly.
fn pow2(k: i32) -> f64 {
    libm::ldexp(1.0, k)
}

/// `⌈log₂ x⌉` for a positive finite `x`.
pub(crate) fn ceil_log2(x: f64) -> i32 {
    let (m, e) = libm::frexp(x); // x = m · 2^e, m ∈ [1/2, 1)
    if m == 0.5 { e - 1 } else { e }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;
    use crate::sampling::grid_gaussian::GridGaussian;
    use crate::sampling::grid_laplace::GridLaplace;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn ceil_log2_is_exact() {
        assert_eq!(ceil_log2(1.0), 0);
        assert_eq!(ceil_log2(1.5), 1);
        assert_eq!(ceil_log2(2.0), 1);
        assert_eq!(ceil_log2(0.3), -1);
        assert_eq!(ceil_log2(f64::from_bits(1)), -1074);
    }

    #[test]
    fn inputs_are_validated_before_data_is_touched() {
        let lap = GridLaplace::with_resolution(1.0, 1.0, 4, -2).unwrap();
        let mut rng = ChaCha20Rng::from_seed([0; 32]);
        let mut data = [1.0, 2.0, f64::INFINITY, 3.0];
        assert_eq!(lap.add_noise(&mut rng, &mut data), Err(Error::private_non_finite("data", 2)));
        assert_eq!(data[..2], [1.0, 2.0]);
        let mut data = [1.0, 2f64.powi(51)]; // |x/r| = 2^53
        let e = lap.add_noise(&mut rng, &mut data).unwrap_err();
        assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
        let d = e.private_detail().unwrap();
        assert_eq!((d.index(), d.value()), (Some(1), Some(2f64.powi(51))));
        assert_eq!(data[0], 1.0);
        let mut data = [1.0, 2f64.powi(51) - 1.0]; // fine
        assert!(lap.add_noise(&mut rng, &mut data).is_ok());
        let mut five = [0.0; 5];
        assert!(matches!(lap.add_noise(&mut rng, &mut five), Err(Error::ShapeMismatch { .. })));
        let s = KeyedStream::new(&NoiseKey::for_replay([1; 32]), 0);
        assert!(matches!(
            lap.add_noise_keyed(&s, u64::MAX, &mut [0.0]),
            Err(Error::SizeOverflow { .. })
        ));
        let wide = GridLaplace::with_resolution(1.0, 1.0, 1 << 50, -2).unwrap();
        assert!(matches!(
            wide.add_noise_keyed(&s, (1 << 40) - 1, &mut [0.0, 0.0]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(wide.add_noise_keyed(&s, 0, &mut []).is_ok());
    }

    #[test]
    fn rounding_is_half_away_from_zero_and_exact() {
        let g = Grid::new(-1, 8).unwrap(); // r = 1/2
        assert_eq!(g.index(0.25, 0), Ok(1));
        assert_eq!(g.index(-0.25, 0), Ok(-1));
        assert_eq!(g.index(0.2499, 0), Ok(0));
        assert_eq!(g.index(1e-300, 0), Ok(0));
        let g = Grid::new(K_MAX, 1).unwrap();
        assert_eq!(g.index(2f64.powi(1012), 0), Ok(1 << 52));
        assert!(g.index(f64::MAX, 0).is_err());
        let g = Grid::new(K_MIN, 1).unwrap();
        assert_eq!(g.index(f64::from_bits(1), 0), Ok(0));
        assert!(g.index(1.0, 0).is_err()); // 2^1023 ≥ 2^53
        assert_eq!(g.output(3, 4), Ok(7.0 * pow2(K_MIN)));
        assert!(g.output(i64::MAX, 1).is_err());
    }

    #[test]
    fn keyed_noise_is_the_integer_noise_of_each_window() {
        let s = KeyedStream::new(&NoiseKey::for_replay([5; 32]), 3);
        let g = GridGaussian::with_resolution(1.0, 2.0, 200, -3).unwrap(); // σ/r = 16
        let lap = GridLaplace::with_resolution(1.0, 1.0, 200, -3).unwrap();
        let x: [f64; 150] = core::array::from_fn(|i| i as f64 * 0.3 - 20.0);
        let mut yg = x;
        let mut yl = x;
        g.add_noise_keyed(&s, 10, &mut yg).unwrap();
        lap.add_noise_keyed(&s, 10, &mut yl).unwrap();
        for i in 0..150 {
            let n = libm::round(x[i] * 8.0);
            let zg = g.integer_noise().sample_at(&s, 10 + i as u64).unwrap();
            let zl = lap.integer_noise().sample_at(&s, 10 + i as u64).unwrap();
            assert_eq!(yg[i], (n + zg as f64) / 8.0);
            assert_eq!(yl[i], (n + zl as f64) / 8.0);
        }
        // The RNG form draws the integer noise in order from one RngBits.
        let mut a = x;
        g.add_noise(&mut ChaCha20Rng::from_seed([6; 32]), &mut a).unwrap();
        let mut rng = ChaCha20Rng::from_seed([6; 32]);
        let mut bits = RngBits::new(&mut rng);
        for i in 0..150 {
            let z = g.integer_noise().sample_bits(&mut bits).unwrap();
            assert_eq!(a[i], (libm::round(x[i] * 8.0) + z as f64) / 8.0);
        }
    }

    #[test]
    fn sampler_failure_poisons_the_data() {
        let mut data = [1.0, 2.0];
        let out = poison_on_error(Err(Error::RandomnessExhausted { element: 1 }), &mut data);
        assert!(out.is_err() && data.iter().all(|x| x.is_nan()));
        let mut data = [1.0, 2.0];
        assert!(poison_on_error(Ok(()), &mut data).is_ok() && data == [1.0, 2.0]);
    }
}
