//! [`GridGaussian`]: exact discrete Gaussian noise on the power-of-two grid `r = 2^k`,
//! `ρ`-zCDP ("secure" floating-point Gaussian noise).
//!
//! **Guarantee.** For `f64` data `x` of `d` coordinates the mechanism releases
//! `y = (round(x/r) + Z) · r` with `r` a *data-independent* resolution and
//! `Z ~ N_ℤ(0, (σ/r)²)` exact integer noise from [`DiscreteGaussian`] (`σ/r` rounded up by
//! a relative `< 2^−30`), which is `ρ`-zCDP with `ρ = (Δ₂ + √d·r)²/(2σ²)` (CKS20
//! Theorem 4); [`GridGaussian::rho`] is an upper bound on it. The output is a function of
//! the integer `round(x/r) + Z` alone; what is exact and what is floating point is set
//! out in the grid machinery's docs (module `grid_noise`).
//!
//! **Neighbour relation and sensitivity.** Neighbouring inputs are those whose data
//! differ by at most `Δ₂` in L2 norm (`Δ₂` is the caller's L2 sensitivity). Rounding to the
//! grid moves each coordinate by at most `r/2`, so neighbouring inputs round to integers
//! differing by at most `|δᵢ|/r + 1` per coordinate and the rounded data has L2
//! sensitivity `Δ₂ + √d·r` (OpenDP's rounding distance `2^k · √size`), computed with every
//! operation rounded up, as is `ρ`.
//!
//! **Resolution.** [`GridGaussian::new`] takes the smallest `r` with `σ/r ≤ 2^30`
//! (`σ/r ∈ (2^29, 2^30]`), inside the range where [`DiscreteGaussian`] represents `σ/r`
//! to a relative `2^−30` (rounded up); the inflation is `√d·r/Δ₂ < √d·2^−29·σ/Δ₂`, and
//! inputs need `|x| ≲ 2^23·σ`. [`GridGaussian::with_resolution`] takes `k`
//! (`−1023 ≤ k ≤ 960`) from the caller, as long as `σ/r` stays in the discrete Gaussian's
//! range.
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

use crate::directed_rounding::{add_up, div_up, mul_up, sqrt_up};
use crate::error::{Result, positive_finite};
use crate::sampling::discrete_gaussian::DiscreteGaussian;
use crate::sampling::grid_noise::{Grid, ceil_log2};
use crate::sampling::keyed_stream::KeyedStream;

/// Exact discrete Gaussian noise on the grid `2^k`: `N_ℤ(0, (σ/r)²)` scaled by `r`, which is
/// `ρ`-zCDP with `ρ = (Δ₂ + √d·r)²/(2σ²)` for data of L2 sensitivity `Δ₂` over `d`
/// coordinates (module docs).
///
/// ```
/// use dpattn_core::sampling::{GridGaussian, KeyedStream, NoiseKey};
/// let g = GridGaussian::new(1.0, 4.0, 16)?; // Δ₂ = 1, σ = 4, 16 coordinates
/// assert_eq!(g.resolution(), 2f64.powi(-28)); // 4/r = 2^30
/// assert!(g.sigma() >= 4.0 && g.sigma() <= 4.0 * (1.0 + 1e-9));
/// assert!(g.rho() >= 1.0 / 32.0 && g.rho() < 1.0 / 32.0 * (1.0 + 1e-7));
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut data = [0.25; 16];
/// g.add_noise_keyed(&s, 0, &mut data)?;
/// assert!(data.iter().all(|&y| (y / g.resolution()).fract() == 0.0));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GridGaussian {
    l2_sensitivity: f64,
    requested_sigma: f64,
    grid: Grid,
    /// `Δ₂ + √d·r`, rounded up.
    rounded_sensitivity: f64,
    noise: DiscreteGaussian,
}

impl GridGaussian {
    /// Gaussian noise of standard deviation `σ` (rounded up by a relative `< 2^−30`) for
    /// data of L2 sensitivity `Δ₂` over `dimension` coordinates, at the resolution
    /// `r = 2^(⌈log₂ σ⌉ − 30)`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) if `Δ₂` or `σ` is not positive and
    /// finite, `dimension` is 0 or above `2^53`, or `σ` is outside `(2^−994, 2^990]`.
    pub fn new(l2_sensitivity: f64, sigma: f64, dimension: usize) -> Result<Self> {
        positive_finite("sigma", sigma)?;
        Self::with_resolution(l2_sensitivity, sigma, dimension, ceil_log2(sigma) - 30)
    }

    /// As [`new`](Self::new) with the resolution `2^k` chosen by the caller (it must not
    /// depend on the data). `σ/2^k` is represented as in [`DiscreteGaussian::from_f64`].
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// let g = GridGaussian::with_resolution(1.0, 3.0, 1, -4)?;
    /// assert_eq!(g.integer_noise().sigma_ratio(), (48, 1));
    /// assert!(GridGaussian::with_resolution(1.0, 3.0, 1, -40).is_err()); // σ/r = 3·2^40
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::OutOfRange`](crate::Error::OutOfRange) if
    /// `k ∉ [−1023, 960]` or `σ/2^k` exceeds the discrete Gaussian's range (`≈ 3.04·10⁹`).
    pub fn with_resolution(
        l2_sensitivity: f64,
        sigma: f64,
        dimension: usize,
        k: i32,
    ) -> Result<Self> {
        positive_finite("l2_sensitivity", l2_sensitivity)?;
        positive_finite("sigma", sigma)?;
        let grid = Grid::new(k, dimension)?;
        // Δ₂ + √d·r, each operation rounded up.
        let rounded_sensitivity = add_up(l2_sensitivity, mul_up(sqrt_up(dimension as f64), grid.r));
        positive_finite("l2_sensitivity + sqrt(dimension) * resolution", rounded_sensitivity)?;
        let noise = DiscreteGaussian::from_f64(sigma * grid.inv_r)?;
        Ok(Self { l2_sensitivity, requested_sigma: sigma, grid, rounded_sensitivity, noise })
    }

    /// The resolution `r = 2^k`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// assert_eq!(GridGaussian::new(1.0, 1.0, 1)?.resolution(), 2f64.powi(-30));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn resolution(&self) -> f64 {
        self.grid.r
    }

    /// The exponent `k` of the resolution `2^k`.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// assert_eq!(GridGaussian::new(1.0, 3.0, 1)?.resolution_exponent(), -28);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn resolution_exponent(&self) -> i32 {
        self.grid.k
    }

    /// The effective standard-deviation parameter `r · s/q ≥ σ` (rounded to nearest).
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// assert_eq!(GridGaussian::new(1.0, 0.75, 1)?.sigma(), 0.75);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sigma(&self) -> f64 {
        self.noise.sigma() * self.grid.r
    }

    /// `Δ₂ + √d·r` (rounded up): the L2 sensitivity of the rounded data.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// let g = GridGaussian::with_resolution(1.0, 1.0, 4, -2)?;
    /// assert!(g.rounded_sensitivity() >= 1.5 && g.rounded_sensitivity() < 1.5 + 1e-15);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rounded_sensitivity(&self) -> f64 {
        self.rounded_sensitivity
    }

    /// An upper bound on the zCDP parameter `ρ = (Δ₂ + √d·r)²/(2σ²)` (computed with the
    /// requested `σ`, which the effective one does not undercut, every operation rounded
    /// upwards).
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// let g = GridGaussian::new(2.0, 2.0, 1)?;
    /// assert!(g.rho() >= 0.5 && g.rho() < 0.5 * (1.0 + 1e-8));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rho(&self) -> f64 {
        // (Δ/σ)²/2 with the ratio formed first, so neither square can overflow for any σ
        // the constructor accepts (an overflow would only push the bound up, to +∞).
        let q = div_up(self.rounded_sensitivity, self.requested_sigma);
        div_up(mul_up(q, q), 2.0)
    }

    /// `(Δ₂, σ, d)` as given.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// assert_eq!(GridGaussian::new(1.0, 4.0, 16)?.params(), (1.0, 4.0, 16));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn params(&self) -> (f64, f64, usize) {
        (self.l2_sensitivity, self.requested_sigma, self.grid.dimension)
    }

    /// The integer noise: [`DiscreteGaussian`] with `σ/r` rounded up.
    ///
    /// ```
    /// # use dpattn_core::sampling::GridGaussian;
    /// let g = GridGaussian::new(1.0, 1.0, 1)?;
    /// assert_eq!(g.integer_noise().sigma_ratio(), (1 << 30, 1));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn integer_noise(&self) -> &DiscreteGaussian {
        &self.noise
    }

    /// Adds noise to every element of `data` (coordinates `0 .. data.len()`), drawing from
    /// `rng`.
    ///
    /// # Errors
    /// As [`GridLaplace::add_noise`](crate::sampling::GridLaplace::add_noise).
    pub fn add_noise<R: CryptoRng + ?Sized>(&self, rng: &mut R, data: &mut [f64]) -> Result<()> {
        self.grid.add_rng(&self.noise, rng, data)
    }

    /// Adds noise to coordinates `first .. first + data.len()` of the draw defined by
    /// `stream`: coordinate `i` uses the window of element `i`.
    ///
    /// # Errors
    /// As [`GridLaplace::add_noise_keyed`](crate::sampling::GridLaplace::add_noise_keyed).
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
    use crate::error::Error;

    #[test]
    fn rho_is_an_upper_bound_for_huge_sigma() {
        // Review finding: σ² used to overflow and make ρ 5e-324 or NaN.
        for e in [500, 511, 512, 700, 900] {
            let sigma = 2f64.powi(e) * 1.5;
            let g = GridGaussian::new(1.0, sigma, 4).unwrap();
            let exact = (g.rounded_sensitivity() / sigma).powi(2) / 2.0;
            assert!(
                g.rho().is_finite() && g.rho() >= exact,
                "σ = 1.5·2^{e}: {} vs {exact}",
                g.rho()
            );
            assert!(g.rho() <= exact * (1.0 + 1e-15));
        }
    }

    #[test]
    fn resolution_rule() {
        for sigma in [1e-6, 0.3, 1.0, 4.0, 1e6] {
            let g = GridGaussian::new(1.0, sigma, 1).unwrap();
            let ratio = sigma / g.resolution();
            assert!(ratio > 2f64.powi(29) && ratio <= 2f64.powi(30), "{sigma}");
            assert!(g.sigma() >= sigma && g.sigma() <= sigma * (1.0 + 2f64.powi(-30)));
        }
    }

    #[test]
    fn bad_parameters_are_errors() {
        for (d, e, dim) in [(0.0, 1.0, 1), (1.0, 0.0, 1), (f64::NAN, 1.0, 1), (1.0, 1.0, 0)] {
            assert!(matches!(GridGaussian::new(d, e, dim), Err(Error::OutOfRange { .. })));
        }
        assert!(GridGaussian::new(1.0, 1e-300, 1).is_err());
        assert!(GridGaussian::new(1.0, f64::INFINITY, 1).is_err());
    }
}
