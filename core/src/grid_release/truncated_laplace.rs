//! [`TruncatedLaplaceGrid`]: the exact counterpart of a one-dimensional truncated Laplace
//! release (the softmax trees' node noise).
//!
//! **Guarantee.** For a scalar of sensitivity `Δ`, computed with error at most `E`, the
//! integer `round(f̂/Λ)` has sensitivity `D = ⌊(Δ + 2E)/Λ⌋ + 1` (an integer bound on an
//! integer difference of at most `(Δ + 2E)/Λ + 1`), and adding the truncated discrete
//! Laplace calibrated for `(D, ε, δ)` is `(ε, δ)`-DP
//! ([`TruncatedDiscreteLaplace`]). `Λ = 2^⌊log₂(Δ/256)⌋`, so `D·Λ ≤ Δ(1 + 1/256) + 2E`.

use crate::directed_rounding::{add_up, mul_up};
use crate::error::{Error, Result, nonneg_finite, positive_finite};
use crate::grid_release::floor_log2;
use crate::grid_release::gaussian::release_keyed_with;
use crate::grid_release::grid::{Grid, GridFormat};
use crate::sampling::{ExactSampler, KeyedStream, TruncatedDiscreteLaplace};

/// A calibrated exact truncated Laplace release of one scalar per element.
///
/// ```
/// use dpattn_core::grid_release::{GridFormat, TruncatedLaplaceGrid};
/// let t = TruncatedLaplaceGrid::calibrate(2.0, 0.0, 0.5, 1e-6, GridFormat::F64)?;
/// assert_eq!(t.resolution(), 2f64.powi(-7)); // 2/256
/// assert_eq!(t.integer_sensitivity(), 257); // ⌊2/2^-7⌋ + 1
/// assert!(t.bound() >= t.integer_sensitivity() as f64 * t.resolution());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruncatedLaplaceGrid {
    grid: Grid,
    noise: TruncatedDiscreteLaplace,
    integer_sensitivity: u64,
}

impl TruncatedLaplaceGrid {
    /// Calibrates the `(ε, δ)`-DP release of a scalar of sensitivity `Δ` computed with
    /// error at most `E`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for parameters outside their domains (`δ ∈ (0, 1)`), or an
    /// integer sensitivity beyond `2^53`.
    pub fn calibrate(
        sensitivity: f64,
        computation_error: f64,
        epsilon: f64,
        delta: f64,
        format: GridFormat,
    ) -> Result<Self> {
        let s = positive_finite("sensitivity", sensitivity)?;
        let e = nonneg_finite("computation_error", computation_error)?;
        let (lo, hi) = format.exponents();
        let k = floor_log2(s / 256.0).clamp(lo, hi);
        let grid = Grid::new(k, format)?;
        let units = libm::floor(libm::scalbn(add_up(s, mul_up(2.0, e)), -k));
        if units.is_nan() || units >= 9.0e15 {
            return Err(Error::OutOfRange {
                name: "integer sensitivity (computation error too large)",
                value: units,
                allowed: "below 2^53",
            });
        }
        let integer_sensitivity = units as u64 + 1;
        let noise = TruncatedDiscreteLaplace::calibrated(integer_sensitivity, epsilon, delta)?;
        Ok(Self { grid, noise, integer_sensitivity })
    }

    /// The grid.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// `Λ`.
    pub fn resolution(&self) -> f64 {
        self.grid.resolution()
    }

    /// `D`.
    pub fn integer_sensitivity(&self) -> u64 {
        self.integer_sensitivity
    }

    /// The largest noise magnitude in value units, `B·Λ`.
    pub fn bound(&self) -> f64 {
        self.noise.bound() as f64 * self.resolution()
    }

    /// The noise variance in value units, `Λ²·Var(Z)`.
    pub fn variance(&self) -> f64 {
        let l = self.resolution();
        self.noise.variance() * l * l
    }

    /// The integer noise.
    pub fn integer_noise(&self) -> &TruncatedDiscreteLaplace {
        &self.noise
    }

    /// Releases one value with the integer noise of `stream`'s element `element`.
    ///
    /// # Errors
    /// As [`ExactSampler::sample_at`].
    pub fn release_at(&self, stream: &KeyedStream, element: u64, x: f64) -> Result<f64> {
        Ok(self.grid.release(x, self.noise.sample_at(stream, element)?))
    }

    /// Releases `values` in place as elements `first, …` of `stream`.
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

    #[test]
    fn calibration_covers_rounding_and_error() {
        let t = TruncatedLaplaceGrid::calibrate(1.0, 0.01, 1.0, 1e-5, GridFormat::F64).unwrap();
        let l = t.resolution();
        assert_eq!(l, 2f64.powi(-8));
        // (1 + 0.02)/2^-8 = 261.12 → D = 262.
        assert_eq!(t.integer_sensitivity(), 262);
        assert!(t.integer_noise().delta_for(262) <= 1e-5);
        assert!(t.integer_noise().scale().scale_f64() >= 262.0);
        assert!(TruncatedLaplaceGrid::calibrate(1.0, 0.0, 1.0, 0.0, GridFormat::F64).is_err());
        assert!(TruncatedLaplaceGrid::calibrate(0.0, 0.0, 1.0, 0.1, GridFormat::F64).is_err());
        assert!(TruncatedLaplaceGrid::calibrate(1.0, 1e300, 1.0, 0.1, GridFormat::F64).is_err());
    }
}
