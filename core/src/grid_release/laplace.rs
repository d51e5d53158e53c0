//! [`LaplaceGrid`]: the exact release of a Laplace mechanism on the grid `Λ·ℤ`.
//!
//! **Guarantee.** For a function of L1 sensitivity `Δ₁` over `d` coordinates, computed with
//! L1 error at most `E`, the release `clamp(round(f̂/Λ) + DLap(b))·Λ` with
//! `b ≥ Δ₁′/(Λε)`, `Δ₁′ = Δ₁ + 2E + d·Λ`, is `ε`-DP: the integer data have L1 sensitivity
//! `Δ₁′/Λ` (module docs of [`grid_release`](super)) and the discrete Laplace's mass ratio
//! at two points `a, a′` is at most `e^{|a − a′|/b}`.

use crate::directed_rounding::{add_up, count_up, div_up, mul_up};
use crate::error::{Error, Result, nonneg_finite, positive_finite};
use crate::grid_release::floor_log2;
use crate::grid_release::gaussian::release_keyed_with;
use crate::grid_release::grid::{Grid, GridFormat};
use crate::sampling::{DiscreteLaplace, KeyedStream};

/// The public description of a Laplace release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaplaceGridSpec {
    /// `Δ₁ > 0`: the L1 sensitivity of the exact function.
    pub l1_sensitivity: f64,
    /// `d ≥ 1`: the number of released coordinates one neighbour can change.
    pub dimension: u64,
    /// `E ≥ 0`: a bound on the L1 distance between the computed and the exact function.
    pub computation_error: f64,
    /// `M ≥ 0`: a bound on `|f̂|` per coordinate (`0` if none is known).
    pub value_bound: f64,
    /// The format the values are written in.
    pub format: GridFormat,
}

/// A calibrated exact Laplace release (module docs).
///
/// ```
/// use dpattn_core::grid_release::{GridFormat, LaplaceGrid, LaplaceGridSpec};
/// let spec = LaplaceGridSpec { l1_sensitivity: 2.0, dimension: 8, computation_error: 0.0,
///     value_bound: 0.0, format: GridFormat::F64 };
/// let g = LaplaceGrid::calibrate(&spec, 0.5)?;
/// assert_eq!(g.resolution(), 2f64.powi(-10)); // 8·Λ ≤ 2/256
/// assert!(g.scale() >= g.rounded_sensitivity() / 0.5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaplaceGrid {
    grid: Grid,
    noise: DiscreteLaplace,
    base_sensitivity: f64,
    sensitivity: f64,
}

/// Tail multiple of the scale that must fit in the format's index range
/// (`P(|Z| > 40b) = e^{−40}`).
const TAIL: f64 = 40.0;
/// Largest discrete Laplace scale used (the sampler's range ends at `2^56`).
const MAX_SCALE: f64 = 72_057_594_037_927_936.0; // 2^56

impl LaplaceGrid {
    /// Calibrates the `ε`-DP release of `spec`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for parameters outside their domains or a release no grid
    /// exponent of the format can hold.
    pub fn calibrate(spec: &LaplaceGridSpec, epsilon: f64) -> Result<Self> {
        let delta = positive_finite("l1_sensitivity", spec.l1_sensitivity)?;
        positive_finite("epsilon", epsilon)?;
        let err = nonneg_finite("computation_error", spec.computation_error)?;
        let bound = nonneg_finite("value_bound", spec.value_bound)?;
        if spec.dimension == 0 {
            return Err(Error::OutOfRange { name: "dimension", value: 0.0, allowed: ">= 1" });
        }
        let d = count_up(spec.dimension);
        let (lo, hi) = spec.format.exponents();
        let index_bound = spec.format.index_bound() as f64;
        let target = delta / (256.0 * d);
        let mut k = if target > 0.0 { floor_log2(target).max(lo) } else { lo };
        loop {
            if k > hi {
                return Err(Error::OutOfRange {
                    name: "grid exponent (sensitivity or value bound too large for the output format)",
                    value: f64::from(k),
                    allowed: "the output format's exponent range",
                });
            }
            let lambda = libm::scalbn(1.0, k);
            let sens = add_up(add_up(delta, mul_up(2.0, err)), mul_up(d, lambda));
            let b = div_up(libm::scalbn(sens, -k), epsilon);
            let reach = add_up(libm::scalbn(bound, -k), mul_up(TAIL, b));
            if !(b <= MAX_SCALE && reach <= index_bound) {
                k += 1;
                continue;
            }
            return Ok(Self {
                grid: Grid::new(k, spec.format)?,
                noise: DiscreteLaplace::from_f64(b)?,
                base_sensitivity: delta,
                sensitivity: sens,
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

    /// `Δ₁′ = Δ₁ + 2E + d·Λ` (rounded up).
    pub fn rounded_sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// `Δ₁′/Δ₁ − 1`.
    pub fn inflation(&self) -> f64 {
        self.sensitivity / self.base_sensitivity - 1.0
    }

    /// The Laplace scale in value units, `b·Λ`.
    pub fn scale(&self) -> f64 {
        self.noise.scale_f64() * self.resolution()
    }

    /// The integer noise.
    pub fn integer_noise(&self) -> &DiscreteLaplace {
        &self.noise
    }

    /// Releases `values` in place as elements `first, …` of `stream` (as
    /// [`GaussianGrid::release_keyed`](super::GaussianGrid::release_keyed)).
    ///
    /// # Errors
    /// As [`GaussianGrid::release_keyed`](super::GaussianGrid::release_keyed).
    pub fn release_keyed(
        &self,
        stream: &KeyedStream,
        first: u64,
        values: &mut [f64],
    ) -> Result<()> {
        release_keyed_with(&self.grid, &self.noise, stream, first, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{ExactSampler, NoiseKey};

    #[test]
    fn calibration_and_release() {
        let spec = LaplaceGridSpec {
            l1_sensitivity: 1.0,
            dimension: 4,
            computation_error: 1e-9,
            value_bound: 3.0,
            format: GridFormat::F32,
        };
        let g = LaplaceGrid::calibrate(&spec, 2.0).unwrap();
        let l = g.resolution();
        assert!(4.0 * l <= 1.0 / 256.0 && 8.0 * l > 1.0 / 256.0);
        assert!(g.rounded_sensitivity() >= 1.0 + 2e-9 + 4.0 * l);
        assert!(g.integer_noise().scale_f64() * 2.0 >= g.rounded_sensitivity() / l);
        let s = KeyedStream::new(&NoiseKey::for_replay([2; 32]), 0);
        let mut x = [0.3, -0.7, 2.9, 0.0];
        let x0 = x;
        g.release_keyed(&s, 10, &mut x).unwrap();
        for i in 0..4 {
            let z = g.integer_noise().sample_at(&s, 10 + i as u64).unwrap();
            assert_eq!(x[i], g.grid().release(x0[i], z));
        }
        assert!(LaplaceGrid::calibrate(&spec, 0.0).is_err());
        assert!(LaplaceGrid::calibrate(&LaplaceGridSpec { dimension: 0, ..spec }, 1.0).is_err());
    }
}
