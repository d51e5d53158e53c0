//! [`GridLaplace`]: exact discrete Laplace noise on the power-of-two grid `r = 2^k`,
//! calibrated to `ε`-DP ("secure" floating-point Laplace noise).
//!
//! **Guarantee.** For `f64` data `x` of `d` coordinates the mechanism releases
//! `y = (round(x/r) + Z) · r` with `r` a *data-independent* resolution and `Z` exact
//! integer noise from [`DiscreteLaplace`] of scale at least `(Δ₁ + d·r)/(r·ε)`, which is
//! `ε`-DP. The output is a function of the integer `round(x/r) + Z` alone; what is exact
//! and what is floating point is set out in the grid machinery's docs (module
//! `grid_noise`).
//!
//! **Neighbour relation and sensitivity.** Neighbouring inputs are those whose data
//! differ by at most `Δ₁` in L1 norm (`Δ₁` is the caller's L1 sensitivity). Rounding to the
//! grid moves each coordinate by at most `r/2`, so neighbouring inputs round to integers
//! differing by at most `|δᵢ|/r + 1` per coordinate and the rounded data has L1
//! sensitivity `Δ₁ + d·r`: the integer scale is `(Δ₁ + d·r)/(r·ε)`, which for `d = 1` is
//! Google's Proposition 1 (`λ = rε/(Δ + r)`), and `d·r` is OpenDP's rounding distance
//! `2^k · size`. Both are computed with every operation rounded up.
//!
//! **Resolution.** [`GridLaplace::new`] uses Google's rule, the smallest power of two
//! `r ≥ (Δ₁/ε)/2^40`, so the integer scale `Δ₁/(εr)` is in `(2^39, 2^40]` and the inflation
//! `d·r/Δ₁` below `d·2^−39/ε`; inputs then need `|x| ≲ 2^13·Δ₁/ε`. [`GridLaplace::with_resolution`]
//! takes `k` (`−1023 ≤ k ≤ 960`) from the caller, up to an integer scale of `2^56`.
//!
//! **Errors.** Bad inputs (NaN, infinities, `|x| ≥ 2^53·r`, more than `d` coordinates) are reported
//! before `data` is touched (the position and value of a bad data entry only through
//! [`Error::private_detail`](crate::Error::private_detail)); if the sampler fails mid-way (window
//! exhausted, or an integer overflow of probability below 2^−60), every element of `data` is set to
//! NaN so that no un-noised value can be released by mistake.
//!
//! Background: `docs/PAPERS.md` A.2.1, A.2.3 (Google's "Secure Noise Generation"), A.2.5,
//! A.2.7.

use rand_core::CryptoRng;

use crate::directed_rounding::{add_up, div_up, mul_up};
use crate::error::{Error, Result, positive_finite};
use crate::sampling::discrete_laplace::DiscreteLaplace;
use crate::sampling::grid_noise::{Grid, ceil_log2};
use crate::sampling::keyed_stream::KeyedStream;

/// Exact discrete Laplace noise on the grid `2^k`, calibrated to `ε`-DP for data of L1
/// sensitivity `Δ₁` over `d` coordinates (module docs).
///
/// ```
/// use dpattn_core::sampling::{GridLaplace, KeyedStream, NoiseKey};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let lap = GridLaplace::new(1.0, 0.5, 3)?; // Δ₁ = 1, ε = 0.5, 3 coordinates
/// assert_eq!(lap.resolution(), 2f64.powi(-39)); // smallest 2^k ≥ 2/2^40
/// assert!(lap.scale() >= (1.0 + 3.0 * lap.resolution()) / 0.5);
/// let mut data = [1.0, 2.5, -3.25];
/// lap.add_noise(&mut ChaCha20Rng::from_seed([1; 32]), &mut data)?;
/// // Every output is a multiple of the resolution.
/// assert!(data.iter().all(|&y| (y / lap.resolution()).fract() == 0.0));
/// let s = KeyedStream::new(&NoiseKey::generate()?, 7);
/// let mut same = [1.0, 2.5, -3.25];
/// lap.add_noise_keyed(&s, 0, &mut same)?;
/// assert!(lap.add_noise_keyed(&s, 2, &mut same).is_err()); // coordinates 2..5 of 3
/// assert!(lap.add_noise(&mut ChaCha20Rng::from_seed([1; 32]), &mut [f64::NAN]).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridLaplace {
    l1_sensitivity: f64,
    epsilon: f64,
    grid: Grid,
    /// `Δ₁ + d·r`, rounded up.
    rounded_sensitivity: f64,
    noise: DiscreteLaplace,
}

impl GridLaplace {
    /// `ε`-DP Laplace noise for data of L1 sensitivity `Δ₁` over `dimension` coordinates,
    /// at Google's resolution: the smallest power of two `≥ (Δ₁/ε)/2^40`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `Δ₁` or `ε` is not positive and finite, `dimension` is 0
    /// or above `2^53`, or `Δ₁/ε` is outside `(2^−984, 2^1000]`.
    pub fn new(l1_sensitivity: f64, epsilon: f64, dimension: usize) -> Result<Self> {
        positive_finite("l1_sensitivity", l1_sensitivity)?;
        positive_finite("epsilon", epsilon)?;
        let b = l1_sensitivity / epsilon;
        positive_finite("l1_sensitivity / epsilon", b)?;
        Self::with_resolution(l1_sensitivity, epsilon, dimension, ceil_log2(b) - 40)
    }

    /// As [`new`](Self::new) with the resolution `2^k` chosen by the caller (it must not
    /// depend on the data).
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// let lap = GridLaplace::with_resolution(1.0, 1.0, 1, -10)?;
    /// assert_eq!(lap.resolution(), 1.0 / 1024.0);
    /// // The integer scale is (Δ + r)/(rε) = 1025, exactly.
    /// assert_eq!(lap.integer_noise().scale(), (1025, 1));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::OutOfRange`] if `k ∉ [−1023, 960]` or the
    /// integer scale `(Δ₁ + d·r)/(r·ε)` exceeds `2^56` (the discrete Laplace's range).
    pub fn with_resolution(
        l1_sensitivity: f64,
        epsilon: f64,
        dimension: usize,
        k: i32,
    ) -> Result<Self> {
        positive_finite("l1_sensitivity", l1_sensitivity)?;
        positive_finite("epsilon", epsilon)?;
        let grid = Grid::new(k, dimension)?;
        // Δ₁ + d·r and (Δ₁ + d·r)/(r·ε), each operation rounded up.
        let rounded_sensitivity = add_up(l1_sensitivity, mul_up(dimension as f64, grid.r));
        positive_finite("l1_sensitivity + dimension * resolution", rounded_sensitivity)?;
        let int_scale = div_up(mul_up(rounded_sensitivity, grid.inv_r), epsilon);
        if !(int_scale.is_finite() && int_scale <= 72_057_594_037_927_936.0) {
            return Err(Error::OutOfRange {
                name: "integer noise scale (l1_sensitivity + d*r) / (r*epsilon)",
                value: int_scale,
                allowed: "(0, 2^56]",
            });
        }
        let noise = DiscreteLaplace::from_f64(int_scale)?;
        Ok(Self { l1_sensitivity, epsilon, grid, rounded_sensitivity, noise })
    }

    /// The resolution `r = 2^k`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// assert_eq!(GridLaplace::new(1.0, 1.0, 1)?.resolution(), 2f64.powi(-40));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn resolution(&self) -> f64 {
        self.grid.r
    }

    /// The exponent `k` of the resolution `2^k`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// assert_eq!(GridLaplace::new(3.0, 1.0, 1)?.resolution_exponent(), -38);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn resolution_exponent(&self) -> i32 {
        self.grid.k
    }

    /// The effective noise scale in data units, `r · t/s` (the integer noise's scale times
    /// `r`; rounded to nearest): at least `(Δ₁ + d·r)/ε`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// let lap = GridLaplace::new(2.0, 0.5, 1)?;
    /// assert!(lap.scale() >= 4.0 && lap.scale() < 4.0 * (1.0 + 1e-11));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn scale(&self) -> f64 {
        self.noise.scale_f64() * self.grid.r
    }

    /// `Δ₁ + d·r` (rounded up): the sensitivity of the rounded data.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// let lap = GridLaplace::with_resolution(1.0, 1.0, 4, -3)?;
    /// assert_eq!(lap.rounded_sensitivity(), 1.5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rounded_sensitivity(&self) -> f64 {
        self.rounded_sensitivity
    }

    /// `(Δ₁, ε, d)` as given.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// assert_eq!(GridLaplace::new(1.0, 0.5, 3)?.params(), (1.0, 0.5, 3));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn params(&self) -> (f64, f64, usize) {
        (self.l1_sensitivity, self.epsilon, self.grid.dimension)
    }

    /// The integer noise: [`DiscreteLaplace`] with scale `≥ (Δ₁ + d·r)/(r·ε)`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridLaplace;
    /// // (Δ + r)/(rε) = 2^40 + 1 with r = 2^−40: exact in f64, so not rounded.
    /// assert_eq!(GridLaplace::new(1.0, 1.0, 1)?.integer_noise().scale(), ((1 << 40) + 1, 1));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn integer_noise(&self) -> &DiscreteLaplace {
        &self.noise
    }

    /// Adds noise to every element of `data` (coordinates `0 .. data.len()`), drawing from
    /// `rng`.
    ///
    /// # Errors
    /// [`Error::PrivateNonFinite`], [`Error::DomainViolation`] (`|x| ≥ 2^53·r`) or
    /// [`Error::ShapeMismatch`] (`data.len() > d`) with `data` untouched; a sampler error
    /// with `data` set to NaN (module docs).
    pub fn add_noise<R: CryptoRng + ?Sized>(&self, rng: &mut R, data: &mut [f64]) -> Result<()> {
        self.grid.add_rng(&self.noise, rng, data)
    }

    /// Adds noise to coordinates `first .. first + data.len()` of the draw defined by
    /// `stream`: coordinate `i` uses the window of element `i`.
    ///
    /// # Errors
    /// As [`add_noise`](Self::add_noise), with `first + data.len() > d` a
    /// [`Error::ShapeMismatch`] and an element index `≥ 2^40` an [`Error::OutOfRange`].
    pub fn add_noise_keyed(
        &self,
        stream: &KeyedStream,
        first: u64,
        data: &mut [f64],
    ) -> Result<()> {
        self.grid.add_keyed(&self.noise, stream, first, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_rule() {
        // Google: smallest 2^k ≥ (Δ/ε)/2^40.
        for (d, e) in [(1.0, 1.0), (1.0, 3.0), (5.0, 0.01), (1e-3, 7.0)] {
            let lap = GridLaplace::new(d, e, 1).unwrap();
            let r = lap.resolution();
            assert!(r >= d / e / 2f64.powi(40) && r / 2.0 < d / e / 2f64.powi(40));
        }
    }

    #[test]
    fn integer_scale_is_an_upper_bound() {
        // (Δ + d·r)/(rε) with r = 2^−10, Δ = 0.3, ε = 0.7, d = 5: compare as rationals.
        let lap = GridLaplace::with_resolution(0.3, 0.7, 5, -10).unwrap();
        let (t, s) = lap.integer_noise().scale();
        let exact = (0.3 * 1024.0 + 5.0) / 0.7; // ≈ 446.0571
        assert!(t as f64 / s as f64 >= exact);
        assert!(t as f64 / s as f64 <= exact * (1.0 + 1e-14));
        assert!(lap.scale() >= (0.3 + 5.0 / 1024.0) / 0.7);
    }

    #[test]
    fn bad_parameters_are_errors() {
        for (d, e, dim) in [(0.0, 1.0, 1), (1.0, 0.0, 1), (f64::NAN, 1.0, 1), (1.0, 1.0, 0)] {
            assert!(matches!(GridLaplace::new(d, e, dim), Err(Error::OutOfRange { .. })));
        }
        assert!(GridLaplace::with_resolution(1.0, 1.0, 1, 961).is_err());
        assert!(GridLaplace::with_resolution(1.0, 1.0, 1, -1024).is_err());
        // Integer scale above 2^56.
        assert!(GridLaplace::with_resolution(1.0, 1.0, 1, -57).is_err());
        assert!(GridLaplace::with_resolution(1.0, 1.0, 1, -55).is_ok());
    }
}
