//! Laplace noise `Lap(b)` (density `exp(-|x|/b) / 2b`) by sign and inverse CDF.
//!
//! **Guarantee.** One group = one element = one uniform variate's words; the output is
//! `±b · (-ln U)`, the sign taken from the lowest bit of the first word (a bit the uniform
//! does not use). Up to the uniform grid and the rounding of `ln`, it is exactly Laplace,
//! with variance `2b²`. Floating-point Laplace noise added to data leaks through its low
//! bits (Mironov, CCS 2012); releases use the grid-snapped discrete Laplace instead
//! (`docs/RANDOMNESS.md`).

use crate::error::{Result, positive_finite};
use crate::sampling::fixed_word::FixedWordSampler;
use crate::sampling::keyed_stream::WordLayout;
use crate::sampling::noise_float::{NoiseFloat, check_finite_draws, max_neg_ln, neg_ln};

/// `Lap(b)`.
///
/// ```
/// use dpattn_core::sampling::{FixedWordSampler, Laplace};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let lap = Laplace::new(1.5)?;
/// let x: f64 = lap.sample(&mut ChaCha20Rng::from_seed([4; 32]));
/// assert!(x.is_finite());
/// assert!(Laplace::new(0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Laplace {
    scale: f64,
}

impl Laplace {
    /// Scale `b ∈ (0, ∞)` whose largest draw, about `36.7b`, is finite in `f64`
    /// (`b ≤ 4.89e306`; for `f32` output see [`check_output`](FixedWordSampler::check_output)).
    ///
    /// # Errors
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) otherwise (NaN included).
    pub fn new(scale: f64) -> Result<Self> {
        positive_finite("scale", scale)?;
        let lap = Self { scale };
        lap.check_output::<f64>()?;
        Ok(lap)
    }

    /// `b`.
    pub fn scale(&self) -> f64 {
        self.scale
    }
}

impl FixedWordSampler for Laplace {
    fn layout<T: NoiseFloat>(&self) -> WordLayout {
        WordLayout { words: T::UNIFORM_WORDS, elements: 1 }
    }

    fn check_output<T: NoiseFloat>(&self) -> Result<()> {
        let name = "scale (its largest Laplace draw must be finite)";
        check_finite_draws::<T>(name, self.scale, self.scale * max_neg_ln::<T>())
    }

    #[inline]
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2] {
        let mag = neg_ln(T::open_uniform(words)) * self.scale;
        let x = T::from_f64(if T::sign_bit(words) { -mag } else { mag });
        [x, x]
    }
}
