//! Gaussian noise `N(0, σ²)` by the Box–Muller transform.
//!
//! **Guarantee.** Each group consumes two uniform variates (4 words for `f64`, 2 for `f32`)
//! and yields two independent normals, `σ · r cos 2πu₂` (even element) and `σ · r sin 2πu₂`
//! (odd element) with `r = sqrt(-2 ln u₁)`. Up to the uniform grid (no `|z|` above
//! `sqrt(2 · 53 ln 2) ≈ 8.57` in `f64`, `≈ 5.77` in `f32`) and rounding of `ln`, `sqrt`,
//! `sin`, `cos`, the output is exactly Gaussian. It is a floating-point sampler: calibrated
//! Gaussian *mechanisms* that must resist precision attacks use the grid-snapped discrete
//! Gaussian instead (`docs/RANDOMNESS.md`).
//!
//! A fixed number of words per sample is what lets element `i` be computed on its own,
//! unlike the ziggurat (variable consumption).

use crate::error::{Result, positive_finite};
use crate::sampling::fast_math::{ln_unit, sincos_2pi};
use crate::sampling::fixed_word::FixedWordSampler;
use crate::sampling::keyed_stream::WordLayout;
use crate::sampling::noise_float::{NoiseFloat, box_muller};
use crate::sampling::noise_float::{check_finite_draws, max_box_muller};

/// `N(0, σ²)`.
///
/// ```
/// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
/// let g = Gaussian::new(0.5)?;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 3);
/// let mut noise = vec![0f64; 1000];
/// g.fill_keyed(&s, 0, &mut noise)?;
/// let mean = noise.iter().sum::<f64>() / 1000.0;
/// assert!(mean.abs() < 0.1);
/// assert!(Gaussian::new(-1.0).is_err() && Gaussian::new(f64::NAN).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gaussian {
    sigma: f64,
}

impl Gaussian {
    /// Standard deviation `σ ∈ (0, ∞)` whose largest draw, about `8.57σ`, is finite in
    /// `f64` (`σ ≤ 2.09e307`; for `f32` output see
    /// [`check_output`](FixedWordSampler::check_output)).
    ///
    /// # Errors
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) otherwise (NaN included).
    pub fn new(sigma: f64) -> Result<Self> {
        positive_finite("sigma", sigma)?;
        let g = Self { sigma };
        g.check_output::<f64>()?;
        Ok(g)
    }

    /// The standard normal `N(0, 1)`.
    pub const STANDARD: Self = Self { sigma: 1.0 };

    /// `σ`.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
}

impl FixedWordSampler for Gaussian {
    fn layout<T: NoiseFloat>(&self) -> WordLayout {
        WordLayout { words: 2 * T::UNIFORM_WORDS, elements: 2 }
    }

    fn check_output<T: NoiseFloat>(&self) -> Result<()> {
        let name = "sigma (its largest Gaussian draw must be finite)";
        check_finite_draws::<T>(name, self.sigma, self.sigma * max_box_muller::<T>())
    }

    #[inline]
    fn group<T: NoiseFloat>(&self, words: &[u32]) -> [T; 2] {
        let n = T::UNIFORM_WORDS as usize;
        let u1 = T::open_uniform(&words[..n]);
        let m2 = T::uniform_int(&words[n..2 * n]);
        let (a, b) = box_muller(u1, m2, T::UNIFORM_BITS);
        [T::from_f64(a * self.sigma), T::from_f64(b * self.sigma)]
    }

    #[inline]
    fn groups<T: NoiseFloat>(&self, words: &[u32], out: &mut [T]) {
        // Structure of arrays over LANES pairs so the logarithm, square-root and sine/cosine
        // loops vectorise; the operations and their order are those of `group`, so the
        // results are identical.
        const LANES: usize = 8;
        let n = T::UNIFORM_WORDS as usize;
        let mut w_chunks = words.chunks_exact(2 * n * LANES);
        let mut o_chunks = out.chunks_exact_mut(2 * LANES);
        for (w, o) in (&mut w_chunks).zip(&mut o_chunks) {
            let mut r = [0f64; LANES];
            let mut m = [0u64; LANES];
            for i in 0..LANES {
                let g = &w[2 * n * i..2 * n * (i + 1)];
                r[i] = -2.0 * ln_unit(T::open_uniform(&g[..n]));
                m[i] = T::uniform_int(&g[n..]);
            }
            for x in &mut r {
                *x = libm::sqrt(*x);
            }
            for i in 0..LANES {
                let (sn, cs) = sincos_2pi(m[i], T::UNIFORM_BITS);
                o[2 * i] = T::from_f64(r[i] * cs * self.sigma);
                o[2 * i + 1] = T::from_f64(r[i] * sn * self.sigma);
            }
        }
        for (w, o) in w_chunks
            .remainder()
            .chunks_exact(2 * n)
            .zip(o_chunks.into_remainder().chunks_exact_mut(2))
        {
            let g = self.group::<T>(w);
            o.copy_from_slice(&g);
        }
    }
}
