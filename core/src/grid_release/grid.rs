//! The public grid `Λ·ℤ` of a release and the number format it is written in.
//!
//! **Guarantee.** [`Grid::index`] is `round(clamp(x/Λ, −I, I))` (half away from zero; NaN
//! maps to 0), a 1-Lipschitz-then-round map of `x`, and [`Grid::value`] writes
//! `clamp(m, −I, I)·Λ`, which is exactly representable in the grid's [`GridFormat`]. A
//! release is therefore a function of the integer `index + noise` alone.

use crate::element::Element;
use crate::error::{Error, Result};

/// A floating-point format an exact release is written in: every `n·2^k` with `|n| ≤ I`
/// and `k` in `[min_exponent, max_exponent]` is exactly representable and finite.
///
/// `f16` and `bf16` outputs are released on the `f32` grid and then rounded, which is
/// post-processing of the integer (the rounded value is a function of it alone).
///
/// ```
/// use dpattn_core::grid_release::GridFormat;
/// assert_eq!(GridFormat::F32.index_bound(), (1 << 24) - 1);
/// assert_eq!(GridFormat::of::<half::bf16>(), GridFormat::F32);
/// assert_eq!(GridFormat::of::<f64>(), GridFormat::F64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridFormat {
    index_bound: i64,
    min_exponent: i32,
    max_exponent: i32,
}

impl GridFormat {
    /// `f64`: `|n| < 2^53`, `2^−1022 ≤ Λ`, `2^53·Λ < 2^1024`.
    pub const F64: Self =
        Self { index_bound: (1 << 53) - 1, min_exponent: -1022, max_exponent: 1024 - 54 };
    /// `f32`: `|n| < 2^24`, `2^−149 ≤ Λ` (subnormal multiples included), `2^24·Λ < 2^128`.
    pub const F32: Self =
        Self { index_bound: (1 << 24) - 1, min_exponent: -149, max_exponent: 128 - 25 };

    /// The grid format of an output element type: [`F64`](Self::F64) for `f64`,
    /// [`F32`](Self::F32) otherwise.
    pub fn of<E: Element>() -> Self {
        if E::NAME == "f64" { Self::F64 } else { Self::F32 }
    }

    /// `I`: the largest grid index written.
    pub fn index_bound(self) -> i64 {
        self.index_bound
    }

    /// The allowed exponents `k` of `Λ = 2^k`.
    pub fn exponents(self) -> (i32, i32) {
        (self.min_exponent, self.max_exponent)
    }
}

/// The grid `Λ = 2^k` of one release, with its format's index bound.
///
/// ```
/// use dpattn_core::grid_release::{Grid, GridFormat};
/// let g = Grid::new(-3, GridFormat::F32)?; // Λ = 1/8
/// assert_eq!(g.index(0.3125), 3); // 2.5 rounds away from zero
/// assert_eq!(g.index(f64::NAN), 0);
/// assert_eq!(g.index(1e30), (1 << 24) - 1); // clamped
/// assert_eq!(g.value(g.index(0.3125) + 2), 0.625);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    exponent: i32,
    bound: i64,
}

impl Grid {
    /// The grid `2^exponent` in `format`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if the exponent is outside the format's range.
    pub fn new(exponent: i32, format: GridFormat) -> Result<Self> {
        if !(format.min_exponent..=format.max_exponent).contains(&exponent) {
            return Err(Error::OutOfRange {
                name: "grid exponent",
                value: f64::from(exponent),
                allowed: "the output format's exponent range (f32: [-149, 103], f64: [-1022, 970])",
            });
        }
        Ok(Self { exponent, bound: format.index_bound })
    }

    /// `k` of `Λ = 2^k`.
    pub fn exponent(&self) -> i32 {
        self.exponent
    }

    /// `Λ`.
    pub fn resolution(&self) -> f64 {
        libm::scalbn(1.0, self.exponent)
    }

    /// `I`.
    pub fn index_bound(&self) -> i64 {
        self.bound
    }

    /// `round(clamp(x/Λ, −I, I))`, half away from zero; `0` for NaN.
    #[inline]
    pub fn index(&self, x: f64) -> i64 {
        if x.is_nan() {
            return 0;
        }
        let b = self.bound as f64; // exact: I < 2^53
        libm::round(libm::scalbn(x, -self.exponent).clamp(-b, b)) as i64
    }

    /// `clamp(m, −I, I)·Λ`, exact.
    #[inline]
    pub fn value(&self, m: i64) -> f64 {
        libm::scalbn(m.clamp(-self.bound, self.bound) as f64, self.exponent)
    }

    /// `value(index(x) + z)`.
    #[inline]
    pub fn release(&self, x: f64, z: i64) -> f64 {
        self.value(self.index(x).saturating_add(z))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_exact_in_the_format() {
        for (format, k) in [(GridFormat::F32, -149), (GridFormat::F32, 103), (GridFormat::F32, -20)]
        {
            let g = Grid::new(k, format).unwrap();
            for m in [1, -1, 12345, (1 << 24) - 1, -(1 << 24) + 1, 1 << 30] {
                let v = g.value(m);
                assert!(v.is_finite());
                assert_eq!(f64::from(v as f32), v, "{k} {m}");
            }
        }
        let g = Grid::new(970, GridFormat::F64).unwrap();
        assert!(g.value((1 << 53) - 1).is_finite());
        let g = Grid::new(-1022, GridFormat::F64).unwrap();
        assert_eq!(g.index(g.resolution() * 7.0), 7);
        assert!(Grid::new(-150, GridFormat::F32).is_err());
        assert!(Grid::new(104, GridFormat::F32).is_err());
        assert!(Grid::new(971, GridFormat::F64).is_err());
    }

    #[test]
    fn index_is_one_lipschitz_then_rounded() {
        let g = Grid::new(-2, GridFormat::F64).unwrap();
        assert_eq!(g.index(0.125), 1);
        assert_eq!(g.index(-0.125), -1);
        assert_eq!(g.index(0.1249), 0);
        assert_eq!(g.index(f64::INFINITY), (1 << 53) - 1);
        assert_eq!(g.index(f64::NEG_INFINITY), -(1 << 53) + 1);
        // Neighbouring inputs x, x' round to integers at most |x − x'|/Λ + 1 apart.
        for (a, b) in [(0.12, 0.38), (0.126, 0.374), (-5.0, 5.0)] {
            let gap = (g.index(a) - g.index(b)).unsigned_abs() as f64;
            assert!(gap <= (a - b).abs() * 4.0 + 1.0);
        }
        assert_eq!(g.release(0.25, i64::MAX), g.value((1 << 53) - 1));
    }
}
