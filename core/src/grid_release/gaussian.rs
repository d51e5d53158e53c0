//! [`GaussianGrid`]: the exact release of a Gaussian mechanism on the grid `Λ·ℤ`.
//!
//! **Guarantee.** For a function of L2 sensitivity `Δ` over `d` coordinates, computed with
//! error at most `E` (L2), and a mechanism whose continuous calibration adds `N(0, σ²)` with
//! `σ = m·Δ` (`m` the *noise multiplier* of its `(ε, δ)`, zCDP or RDP analysis — every
//! Gaussian calibration of the crate is linear in the sensitivity), the release
//! `clamp(round(f̂/Λ) + N_ℤ(0, s²))·Λ`, `s = √((m·Δ′/Λ)² + 16)`, `Δ′ = Δ + 2E + √d·Λ`, has
//! the continuous mechanism's guarantee at sensitivity `Δ′` up to an additive
//! `2·10^{−117}` in `ε` and a factor `1 + 2·10^{−117}` on `δ` (module docs of
//! [`grid_release`](super)). The integer noise is exact ([`DiscreteGaussian`]).

use crate::directed_rounding::{add_up, count_up, mul_up, sqrt_up};
use crate::error::{Error, Result, nonneg_finite, positive_finite};
use crate::grid_release::floor_log2;
use crate::grid_release::grid::{Grid, GridFormat};
use crate::sampling::{ConstantTimeGaussian, DiscreteGaussian, ExactSampler, KeyedStream};

/// The public description of a Gaussian release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianGridSpec {
    /// `Δ > 0`: the L2 sensitivity of the exact function.
    pub l2_sensitivity: f64,
    /// `d ≥ 1`: the number of released coordinates that one neighbour can change.
    pub dimension: u64,
    /// `E ≥ 0`: a bound on the L2 distance between the computed and the exact function
    /// (floating-point error), for every input.
    pub computation_error: f64,
    /// `M ≥ 0`: a bound on `|f̂|` per coordinate (`0` if none is known; only accuracy
    /// depends on it: values beyond the format's range are clamped).
    pub value_bound: f64,
    /// The format the values are written in.
    pub format: GridFormat,
}

/// A calibrated exact Gaussian release (module docs).
///
/// ```
/// use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// // Δ = 1 over 64 coordinates, values in [−4, 4], σ = 3·Δ.
/// let spec = GaussianGridSpec { l2_sensitivity: 1.0, dimension: 64, computation_error: 0.0,
///     value_bound: 4.0, format: GridFormat::F32 };
/// let g = GaussianGrid::calibrate(&spec, 3.0)?;
/// assert_eq!(g.resolution(), 2f64.powi(-11)); // √64·Λ ≤ 1/256
/// assert!(g.inflation() <= 1.0 / 256.0);
/// assert!(g.sigma() >= 3.0 * g.rounded_sensitivity());
/// let mut x = [0.1f64; 64];
/// g.release_keyed(&KeyedStream::new(&NoiseKey::generate()?, 0), 0, &mut x)?;
/// assert!(x.iter().all(|&y| (y / g.resolution()).fract() == 0.0 && y == f64::from(y as f32)));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianGrid {
    grid: Grid,
    noise: DiscreteGaussian,
    base_sensitivity: f64,
    sensitivity: f64,
    sigma_continuous: f64,
}

/// Largest discrete Gaussian parameter used (the sampler's exact range ends near 3.04e9).
const MAX_S: f64 = 2_147_483_648.0; // 2^31
/// Tail multiple of σ that must fit in the format's index range.
const TAIL: f64 = 12.0;
/// `s₂²` of the rounding kernel (module docs of `grid_release`).
const KERNEL_VAR: f64 = 16.0;

impl GaussianGrid {
    /// Calibrates the release of `spec` for a mechanism with noise multiplier
    /// `m = σ/Δ` (module docs).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `Δ`, `m` not positive and finite, `E` or `M` negative or
    /// not finite, `d = 0`, or a release that no grid exponent of the format can hold.
    pub fn calibrate(spec: &GaussianGridSpec, multiplier: f64) -> Result<Self> {
        let delta = positive_finite("l2_sensitivity", spec.l2_sensitivity)?;
        positive_finite("noise multiplier", multiplier)?;
        let err = nonneg_finite("computation_error", spec.computation_error)?;
        let bound = nonneg_finite("value_bound", spec.value_bound)?;
        if spec.dimension == 0 {
            return Err(Error::OutOfRange { name: "dimension", value: 0.0, allowed: ">= 1" });
        }
        let sqrt_d = sqrt_up(count_up(spec.dimension));
        let (lo, hi) = spec.format.exponents();
        let index_bound = spec.format.index_bound() as f64;
        // Accuracy: √d·Λ ≤ Δ/256, i.e. k = ⌊log₂(Δ/(256·√d))⌋.
        let target = delta / (256.0 * sqrt_d);
        let mut k = if target > 0.0 { floor_log2(target).max(lo) } else { lo };
        loop {
            if k > hi {
                return Err(Error::OutOfRange {
                    name: "grid exponent (sensitivity, noise or value bound too large for the output format)",
                    value: f64::from(k),
                    allowed: "the output format's exponent range",
                });
            }
            let lambda = libm::scalbn(1.0, k);
            let sens = add_up(add_up(delta, mul_up(2.0, err)), mul_up(sqrt_d, lambda));
            let sigma_c = mul_up(multiplier, sens);
            let ratio = libm::scalbn(sigma_c, -k); // σ_c/Λ (exact unless it overflows)
            let s = sqrt_up(add_up(mul_up(ratio, ratio), KERNEL_VAR));
            let reach = add_up(libm::scalbn(bound, -k), mul_up(TAIL, s));
            if !(s <= MAX_S && reach <= index_bound) {
                k += 1;
                continue;
            }
            return Ok(Self {
                grid: Grid::new(k, spec.format)?,
                noise: DiscreteGaussian::from_f64(s)?,
                base_sensitivity: delta,
                sensitivity: sens,
                sigma_continuous: sigma_c,
            });
        }
    }

    /// The grid.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// `Λ`.
    pub fn resolution(&self) -> f64 {
        self.grid.resolution()
    }

    /// `Δ′ = Δ + 2E + √d·Λ` (rounded up): the sensitivity the noise is calibrated for.
    pub fn rounded_sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// `Δ′/Δ − 1`: how much larger the noise is than the float release's (rounded up).
    pub fn inflation(&self) -> f64 {
        self.sensitivity / self.base_sensitivity - 1.0
    }

    /// `σ_c = m·Δ′`: the continuous Gaussian whose guarantee the release has.
    pub fn continuous_sigma(&self) -> f64 {
        self.sigma_continuous
    }

    /// The discrete Gaussian's parameter in value units, `s·Λ ≥ σ_c` (its standard
    /// deviation is slightly below it).
    pub fn sigma(&self) -> f64 {
        self.noise.sigma() * self.resolution()
    }

    /// An upper bound on the zCDP `ρ = (Δ′/Λ)²/(2s²)` of one release (CKS20 Theorem 14).
    pub fn rho(&self) -> f64 {
        let q = crate::directed_rounding::div_up(
            libm::scalbn(self.sensitivity, -self.grid.exponent()),
            self.noise.sigma(),
        );
        crate::directed_rounding::div_up(mul_up(q, q), 2.0)
    }

    /// The integer noise `N_ℤ(0, s²)`.
    pub fn integer_noise(&self) -> &DiscreteGaussian {
        &self.noise
    }

    /// The integer noise for coordinates whose continuous noise is `factor ≥ 1` times
    /// larger (heterogeneous noise: each coordinate's guarantee is that of its own
    /// continuous noise, which dominates the calibrated one).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `factor < 1`, not finite, or a parameter beyond the
    /// sampler's range.
    pub fn scaled_noise(&self, factor: f64) -> Result<DiscreteGaussian> {
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(Error::OutOfRange {
                name: "noise factor",
                value: factor,
                allowed: "[1, inf)",
            });
        }
        let ratio = libm::scalbn(mul_up(factor, self.sigma_continuous), -self.grid.exponent());
        DiscreteGaussian::from_f64(sqrt_up(add_up(mul_up(ratio, ratio), KERNEL_VAR)))
    }

    /// Releases `values` in place as elements `first, first + 1, …` of `stream`: value `i`
    /// becomes `grid.release(values[i], z_i)` with `z_i` from element `first + i`'s window.
    ///
    /// # Errors
    /// The window errors of [`ExactSampler::fill_keyed`] (an element index at or beyond
    /// `2^40`, checked before anything is written); if a draw fails later (probability
    /// below `2^−1000`), every value is set to NaN.
    pub fn release_keyed(
        &self,
        stream: &KeyedStream,
        first: u64,
        values: &mut [f64],
    ) -> Result<()> {
        release_keyed_with(&self.grid, &self.noise, stream, first, values)
    }

    /// [`release_keyed`](Self::release_keyed) with the integer noise drawn by `sampler`,
    /// the constant-time sampler of [`integer_noise`](Self::integer_noise) (for enclaves:
    /// the draw's time does not depend on the noise; the law is within total variation
    /// `2^−100` of the exact one per value, `docs/PRIVACY.md` §12).
    ///
    /// ```
    /// use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
    /// use dpattn_core::sampling::{ConstantTimeGaussian, KeyedStream, NoiseKey};
    /// let spec = GaussianGridSpec { l2_sensitivity: 1.0, dimension: 8, computation_error: 0.0,
    ///     value_bound: 4.0, format: GridFormat::F32 };
    /// let g = GaussianGrid::calibrate(&spec, 3.0)?;
    /// let ct = ConstantTimeGaussian::new(g.integer_noise())?;
    /// let mut x = [0.5f64; 8];
    /// g.release_keyed_constant_time(&ct, &KeyedStream::new(&NoiseKey::generate()?, 0), 0, &mut x)?;
    /// assert!(x.iter().all(|&y| (y / g.resolution()).fract() == 0.0));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `sampler` is for another `σ`; otherwise as
    /// [`release_keyed`](Self::release_keyed).
    pub fn release_keyed_constant_time(
        &self,
        sampler: &ConstantTimeGaussian,
        stream: &KeyedStream,
        first: u64,
        values: &mut [f64],
    ) -> Result<()> {
        if sampler.sigma_ratio() != self.noise.sigma_ratio() {
            return Err(Error::OutOfRange {
                name: "constant-time sampler",
                value: sampler.sigma_ratio().0 as f64,
                allowed: "the sampler of this grid's integer noise",
            });
        }
        release_keyed_with(&self.grid, sampler, stream, first, values)
    }
}

/// Elements released per chunk of windows.
const CHUNK: usize = 64;

/// The keyed release loop shared by the grid mechanisms.
pub(crate) fn release_keyed_with<S: ExactSampler<Output = i64>>(
    grid: &Grid,
    noise: &S,
    stream: &KeyedStream,
    first: u64,
    values: &mut [f64],
) -> Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    let end = first
        .checked_add(values.len() as u64)
        .ok_or(Error::SizeOverflow { what: "first element + length" })?;
    crate::sampling::bit_source::check_element(end - 1)?;
    let mut z = [0i64; CHUNK];
    let mut run = || -> Result<()> {
        for (c, chunk) in values.chunks_mut(CHUNK).enumerate() {
            let z = &mut z[..chunk.len()];
            noise.fill_keyed(stream, first + (c * CHUNK) as u64, z)?;
            for (x, &z) in chunk.iter_mut().zip(z.iter()) {
                *x = grid.release(*x, z);
            }
        }
        Ok(())
    };
    let out = run();
    if out.is_err() {
        values.fill(f64::NAN);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;

    fn spec(delta: f64, d: u64, m: f64, format: GridFormat) -> GaussianGridSpec {
        GaussianGridSpec {
            l2_sensitivity: delta,
            dimension: d,
            computation_error: 0.0,
            value_bound: m,
            format,
        }
    }

    #[test]
    fn resolution_follows_the_documented_rule() {
        // Accuracy rule alone: √d·Λ ≤ Δ/256 with the largest such power of two.
        for (delta, d) in [(1.0, 1), (1.0, 64), (0.01, 4096), (5.0, 1000)] {
            let g = GaussianGrid::calibrate(&spec(delta, d, 1.0, GridFormat::F64), 4.0).unwrap();
            let l = g.resolution();
            let sd = (d as f64).sqrt();
            assert!(sd * l <= delta / 256.0 && sd * 2.0 * l > delta / 256.0, "{delta} {d}");
            assert!(g.inflation() <= 1.0 / 256.0 + 1e-12);
            let s = g.integer_noise().sigma();
            let expect = ((4.0 * g.rounded_sensitivity() / l).powi(2) + 16.0).sqrt();
            assert!(s >= expect && s <= expect * (1.0 + 1e-8));
        }
        // Representability wins: f32, values up to 1e3 with σ ≈ 1e-3 need Λ ≥ (M + 12σ)/2^24.
        let g = GaussianGrid::calibrate(&spec(1e-3, 1, 1e3, GridFormat::F32), 1.0).unwrap();
        let l = g.resolution();
        assert!(1e3 / l + 12.0 * g.integer_noise().sigma() <= ((1 << 24) - 1) as f64);
        assert!(1e3 / (l / 2.0) > ((1 << 24) - 1) as f64 - 12.0 * 2.0 * g.integer_noise().sigma());
    }

    #[test]
    fn computation_error_enters_twice() {
        let a = GaussianGrid::calibrate(&spec(1.0, 1, 0.0, GridFormat::F64), 2.0).unwrap();
        let mut s = spec(1.0, 1, 0.0, GridFormat::F64);
        s.computation_error = 0.25;
        let b = GaussianGrid::calibrate(&s, 2.0).unwrap();
        assert_eq!(a.resolution(), b.resolution());
        assert!((b.rounded_sensitivity() - a.rounded_sensitivity() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn release_is_the_integer_noise_on_the_grid() {
        let g = GaussianGrid::calibrate(&spec(1.0, 8, 2.0, GridFormat::F32), 3.0).unwrap();
        let s = KeyedStream::new(&NoiseKey::for_replay([3; 32]), 5);
        let x: [f64; 100] = core::array::from_fn(|i| (i as f64 - 50.0) / 25.0);
        let mut y = x;
        g.release_keyed(&s, 7, &mut y).unwrap();
        for i in 0..100 {
            let z = g.integer_noise().sample_at(&s, 7 + i as u64).unwrap();
            assert_eq!(y[i], g.grid().release(x[i], z));
            assert_eq!(y[i], f64::from(y[i] as f32));
        }
        assert!(g.release_keyed(&s, (1 << 40) - 1, &mut [0.0, 0.0]).is_err());
    }

    #[test]
    fn bad_specs_are_errors() {
        let ok = spec(1.0, 1, 0.0, GridFormat::F32);
        assert!(GaussianGrid::calibrate(&ok, 0.0).is_err());
        assert!(GaussianGrid::calibrate(&ok, f64::NAN).is_err());
        for bad in [
            GaussianGridSpec { l2_sensitivity: 0.0, ..ok },
            GaussianGridSpec { dimension: 0, ..ok },
            GaussianGridSpec { computation_error: -1.0, ..ok },
            GaussianGridSpec { value_bound: f64::INFINITY, ..ok },
            GaussianGridSpec { l2_sensitivity: 1e300, ..ok }, // no f32 grid holds it
        ] {
            assert!(GaussianGrid::calibrate(&bad, 1.0).is_err(), "{bad:?}");
        }
        let g = GaussianGrid::calibrate(&ok, 1.0).unwrap();
        assert!(g.scaled_noise(0.5).is_err() && g.scaled_noise(2.0).is_ok());
    }
}
