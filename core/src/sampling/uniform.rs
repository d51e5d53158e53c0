//! Uniform variates in `(0, 1]` and exponential variates.
//!
//! **Guarantee.** [`Uniform`] returns [`NoiseFloat::open_uniform`] of one group: each of the
//! `2^53` (`f64`) or `2^24` (`f32`) grid values `(k + 1) · 2^-p` with probability `2^-p`.
//! [`Exponential`] returns `-ln(U) / rate`, the exact inverse CDF applied to that grid; the
//! only error is the grid (no value above `53 ln 2 / rate`, resp. `24 ln 2 / rate`) and the
//! rounding of `ln`. These are floating-point samplers: see `docs/RANDOMNESS.md` for why
//! they are not to be used to release `x + noise` directly.
//!
//! Layout: one group = one element = [`NoiseFloat::UNIFORM_WORDS`] words.

use crate::error::{Result, positive_finite};
use crate::sampling::fixed_word::FixedWordSampler;
use crate::sampling::keyed_stream::WordLayout;
use crate::sampling::noise_float::{NoiseFloat, check_finite_draws, max_neg_ln, neg_ln};

/// The uniform distribution on `(0, 1]` (see the module docs).
///
/// ```
/// use dpattn_core::sampling::{FixedWordSampler, Uniform};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let mut rng = ChaCha20Rng::from_seed([0; 32]);
/// let u: f64 = Uniform.sample(&mut rng);
/// assert!(u > 0.0 && u <= 1.0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uniform;

impl FixedWordSampler for Uniform {
    fn layout<T: NoiseFloat>(&self) -> WordLayout {
        WordLayout { words: T::UNIFORM_WORDS, elements: 1 }
    }

    #[inline]
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2] {
        let u = T::from_f64(T::open_uniform(words));
        [u, u]
    }
}

/// The exponential distribution with rate `λ` (mean `1/λ`, variance `1/λ²`).
///
/// ```
/// use dpattn_core::sampling::{Exponential, FixedWordSampler};
/// use rand_chacha::ChaCha20Rng;
/// use rand_core::SeedableRng;
/// let e = Exponential::new(2.0)?;
/// let mut out = [0f32; 4];
/// e.fill(&mut ChaCha20Rng::from_seed([0; 32]), &mut out);
/// assert!(out.iter().all(|&x| x >= 0.0));
/// assert!(Exponential::new(0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exponential {
    inv_rate: f64,
}

impl Exponential {
    /// Rate `λ ∈ (0, ∞)` whose largest draw, about `36.7/λ`, is finite in `f64`
    /// (`λ ≥ 2.05e-307`; for `f32` output see [`check_output`](FixedWordSampler::check_output)).
    ///
    /// # Errors
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) otherwise (NaN included).
    pub fn new(rate: f64) -> Result<Self> {
        positive_finite("rate", rate)?;
        let inv_rate = 1.0 / rate;
        positive_finite("1 / rate", inv_rate)?;
        let e = Self { inv_rate };
        e.check_output::<f64>()?;
        Ok(e)
    }

    /// The mean `1/λ`.
    pub fn mean(&self) -> f64 {
        self.inv_rate
    }
}

impl FixedWordSampler for Exponential {
    fn layout<T: NoiseFloat>(&self) -> WordLayout {
        WordLayout { words: T::UNIFORM_WORDS, elements: 1 }
    }

    fn check_output<T: NoiseFloat>(&self) -> Result<()> {
        let name = "1 / rate (its largest exponential draw must be finite)";
        check_finite_draws::<T>(name, self.inv_rate, self.inv_rate * max_neg_ln::<T>())
    }

    #[inline]
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2] {
        let x = T::from_f64(neg_ln(T::open_uniform(words)) * self.inv_rate);
        [x, x]
    }
}
