//! The exact release of the hook ([`NoiseMode::Exact`], the default): the clipped matrix is
//! released on a public power-of-two grid with exact discrete Gaussian noise, so the floats
//! the receiver gets are DP, low-order bits included (`docs/PRIVACY.md` §6.5).
//!
//! **The grid release** ([`DpForwardParams::exact_grid`]). The function released is the
//! *computed* clip `ĉ(X)`. Its blocks have exact norm `≤ C` ([`clip_hidden`]'s guarantee, which
//! covers the rounding of the norm, of the rescaling and of the `f32` store), so
//! `‖ĉ(X) − ĉ(X′)‖ ≤ S` holds for the computed values themselves: the computation error is
//! `E = 0`. One neighbour changes at most `d` coordinates (`tokens·dim`; `c·dim` for `c`
//! changed rows under row clipping, where unchanged rows are clipped identically) and every
//! entry has `|ĉ_ij| ≤ C`. [`GaussianGrid`] with `Δ = S`, `d`, `E = 0`, `M = C` and noise
//! multiplier `floor/S` releases `clamp(round(ĉ/Λ) + N_ℤ(0, s²))·Λ` with
//! `s = √((σ_c/Λ)² + 16)`, `σ_c = floor·S′/S`, `S′ = S + √d·Λ` (module docs of
//! [`grid_release`](crate::grid_release)): up to a `2·10⁻¹¹⁷` slack it is post-processing of
//! the continuous Gaussian mechanism with noise `σ_c` on integer data of sensitivity `S′/Λ`.
//! That mechanism has `S′/σ_c = S/floor`, the ratio of the float calibration, so the
//! guarantee of [`DpForwardParams`] (the `k`-release composition, the released-code rule's
//! effective ε, the per-release `ρ = S²/2floor²`) holds unchanged and so do the charges. Over
//! `k` releases the pointwise factors multiply to `r^{kd}`, still below `f64` resolution.
//!
//! **Diagonal factors.** Element `(i, j)` gets `N_ℤ(0, s_ij²)` with
//! `s_ij = √((f_ij·σ_c/Λ)² + 16)`, `f_ij = max(1, r_i·c_j/floor)`
//! ([`GaussianGrid::scaled_noise`]), so `s_ij ≥ s`. By the lemma each coordinate is, up to
//! the same pointwise factor, the kernel `K` applied to `N(μ_ij, s_ij² − 16)`, and
//! `N(μ, s_ij² − 16) = N(μ, s² − 16) + N(0, s_ij² − s²)` (independent): post-processing of
//! the i.i.d. continuous mechanism at `√(s² − 16) ≥ σ_c/Λ`, coordinate by coordinate with
//! data-independent extra noise. Heterogeneous noise that dominates the i.i.d. calibration
//! therefore has its guarantee. The value bound is raised to `C + 12·max r·max c` so that the
//! larger noise fits the format as well (clamping stays a 12σ event).
//!
//! **Matrix factors.** `Z = A·N·Bᵀ` has covariance `Σ⊗Ψ` (`Σ = A·Aᵀ`, `Ψ = B·Bᵀ`), and
//! Theorem 6's certified `σ_min(A)·σ_min(B) ≥ floor` gives `Σ⊗Ψ ⪰ floor²·I`. The release is
//! the i.i.d. grid release at `floor` followed by independent float noise
//! `R = P·(W ∘ N₂)·Qᵀ`, `W_kl = √max(a_k·b_l − floor², 0)`, from the eigendecompositions
//! `Σ ≈ P·diag(a)·Pᵀ`, `Ψ ≈ Q·diag(b)·Qᵀ` kept by [`CertifiedMatrixGaussian`], so that
//! `Cov(R) ≈ Σ⊗Ψ − floor²·I`. `R` does not depend on the data: the output is post-processing
//! of the grid release, which is the DP object, and neither the rounding of `R` nor of the
//! sum can leak (the eigen-factors' rounding changes only the extra noise's law). The output
//! is then not on the grid.
//!
//! **Randomness** (`docs/RANDOMNESS.md` §5.4). Element `(r, j)` of the stacked
//! `(batch·tokens) × dim` matrix takes its integer noise from the exact-sampler window of
//! element `first + r·dim + j` (`docs/RANDOMNESS.md` §4). For matrix factors `N₂(r, j)` is
//! element `8·(first + rows·dim) + r·dim + j` of the standard normal draw
//! (`docs/RANDOMNESS.md` §3): the primary blocks of window elements `first + rows·dim …`, which no
//! window of the grid draw reads. A release therefore uses elements `first … first + rows·dim − 1`
//! (`+ ⌈rows·dim/8⌉` more for matrix factors), all below `2^40`.
//!
//! [`NoiseMode::Exact`]: crate::NoiseMode::Exact
//! [`clip_hidden`]: super::clip_hidden
//! [`CertifiedMatrixGaussian`]: super::CertifiedMatrixGaussian

use crate::directed_rounding::{add_up, div_up, mul_up};
use crate::dp_forward::noise::NoiseFactors;
use crate::dp_forward::params::DpForwardParams;
use crate::error::{Error, Result};
use crate::grid_release::{GaussianGrid, GridFormat};
use crate::matrix_view::MatMut;
use crate::sampling::bit_source::{ElementBits, fill_windows};
use crate::sampling::{ExactSampler, KeyedStream, MAX_WINDOW_ELEMENTS, NoiseFloat};

#[cfg(feature = "alloc")]
use crate::dp_forward::certify::CertifiedMatrixGaussian;
#[cfg(feature = "alloc")]
use crate::dp_forward::noise::add_scaled;
#[cfg(feature = "alloc")]
use crate::sampling::{FixedWordSampler, Gaussian};

/// Elements released per call of the window reader.
const CHUNK: usize = 64;
/// Multiples of the largest diagonal standard deviation added to the value bound.
const TAIL: f64 = 12.0;

/// The grid format of a hidden-state type: [`GridFormat::F64`] for `f64`, [`GridFormat::F32`]
/// for `f32` (a `NoiseFloat`'s uniform has exactly the type's significand precision).
fn format_of<T: NoiseFloat>() -> GridFormat {
    if T::UNIFORM_BITS == f64::MANTISSA_DIGITS { GridFormat::F64 } else { GridFormat::F32 }
}

/// The largest entry of a slice of standard deviations (already checked positive).
fn max_std(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// Calibrates the exact release of one call of `rows·dim = total` elements in `T`'s format
/// and checks that its elements fit the window layout. Public parameters only: it runs
/// before anything is charged or written.
///
/// # Errors
/// Those of [`DpForwardParams::exact_grid`] and [`GaussianGrid::scaled_noise`] (diagonal
/// noise beyond the sampler's range); [`Error::OutOfRange`] (`name` `"first"`) when the
/// release's last element reaches `2^40`.
pub(crate) fn plan_exact<T: NoiseFloat>(
    params: &DpForwardParams,
    factors: &NoiseFactors<'_>,
    floor: f64,
    first: u64,
    total: u64,
) -> Result<GaussianGrid> {
    let (bound, max_factor) = match factors {
        NoiseFactors::Diagonal { row_std, col_std } => {
            let std = mul_up(max_std(row_std), max_std(col_std));
            (add_up(params.clip_norm, mul_up(TAIL, std)), div_up(std, floor).max(1.0))
        }
        _ => (params.clip_norm, 1.0),
    };
    let grid = params.exact_grid_at(floor, format_of::<T>(), bound)?;
    // Every smaller factor is in the sampler's range too.
    grid.scaled_noise(max_factor)?;
    let used = match factors {
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(_) => total.checked_add(total.div_ceil(8)),
        _ => Some(total),
    };
    match used.and_then(|n| first.checked_add(n)) {
        Some(end) if end <= MAX_WINDOW_ELEMENTS => Ok(grid),
        _ => Err(Error::OutOfRange {
            name: "first",
            value: first as f64,
            allowed: "first + rows·dim (+ ⌈rows·dim/8⌉ for matrix factors) ≤ 2^40 in exact mode (per-element windows)",
        }),
    }
}

/// Releases the clipped `x` in place (module docs); checked by [`plan_exact`] and the
/// caller (shape, factors, scratch). If a draw fails (randomness exhausted, probability
/// below `2^−1000`), every entry of `x` is set to NaN so that no un-noised value remains.
#[allow(clippy::too_many_arguments)]
pub(crate) fn release_exact<T: NoiseFloat>(
    mut x: MatMut<'_, T>,
    tokens: usize,
    factors: &NoiseFactors<'_>,
    grid: &GaussianGrid,
    floor: f64,
    stream: &KeyedStream,
    first: u64,
    scratch: &mut [f64],
) -> Result<()> {
    #[cfg(not(feature = "alloc"))]
    let _ = scratch;
    let iid =
        |_: usize, _: usize, bits: &mut ElementBits<'_>| grid.integer_noise().sample_bits(bits);
    let out = match factors {
        NoiseFactors::Iid => release_on_grid(&mut x, grid, stream, first, iid),
        NoiseFactors::Diagonal { row_std, col_std } => {
            release_on_grid(&mut x, grid, stream, first, |r, j, bits| {
                let f = (row_std[r % tokens] * col_std[j] / floor).max(1.0);
                grid.scaled_noise(f)?.sample_bits(bits)
            })
        }
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(m) => {
            release_on_grid(&mut x, grid, stream, first, iid).and_then(|()| {
                let total = (x.rows() * x.cols()) as u64;
                add_extra_noise(&mut x, tokens, m, floor, stream, 8 * (first + total), scratch)
            })
        }
    };
    if out.is_err() {
        for r in 0..x.rows() {
            x.row_mut(r).fill(T::from_f64(f64::NAN));
        }
    }
    out
}

/// `x[r][j] ← grid.release(x[r][j], z)` with `z = noise(r, j, window of first + r·dim + j)`.
fn release_on_grid<T: NoiseFloat>(
    x: &mut MatMut<'_, T>,
    grid: &GaussianGrid,
    stream: &KeyedStream,
    first: u64,
    mut noise: impl FnMut(usize, usize, &mut ElementBits<'_>) -> Result<i64>,
) -> Result<()> {
    let (dim, g) = (x.cols(), grid.grid());
    let mut z = [0i64; CHUNK];
    for r in 0..x.rows() {
        let row = x.row_mut(r);
        for j0 in (0..dim).step_by(CHUNK) {
            let len = CHUNK.min(dim - j0);
            let at = first + (r * dim + j0) as u64;
            fill_windows(stream, at, &mut z[..len], |bits| {
                noise(r, j0 + (bits.element() - at) as usize, bits)
            })?;
            for (v, &z) in row[j0..j0 + len].iter_mut().zip(&z[..len]) {
                // The grid value is exactly representable in T: the conversion is exact.
                *v = T::from_f64(g.release(v.to_f64(), z));
            }
        }
    }
    Ok(())
}

/// Adds the extra noise `R` of matrix factors (module docs), `N₂(r, j)` being element
/// `base + r·dim + j` of the standard normal draw.
#[cfg(feature = "alloc")]
fn add_extra_noise<T: NoiseFloat>(
    x: &mut MatMut<'_, T>,
    tokens: usize,
    m: &CertifiedMatrixGaussian,
    floor: f64,
    stream: &KeyedStream,
    base: u64,
    scratch: &mut [f64],
) -> Result<()> {
    let floor2 = floor * floor;
    if let Some(s) = m.matrix_gaussian().iid_sigma() {
        let c = libm::sqrt((s * s - floor2).max(0.0));
        return add_scaled(x, stream, base, |_, _| c);
    }
    let (pa, pb) = m.spectra().ok_or(Error::Unsupported {
        what: "matrix factors without a certified spectrum (Theorem 6's check refuses them)",
    })?;
    let dim = x.cols();
    let block = tokens * dim;
    let (w, rest) = scratch.split_at_mut(block);
    let y = &mut rest[..block];
    for b in 0..x.rows() / tokens {
        // W ∘ N₂.
        Gaussian::STANDARD.fill_keyed::<f64>(stream, base + (b * block) as u64, w)?;
        for (wrow, &a) in w.chunks_exact_mut(dim).zip(&pa.values) {
            for (v, &bl) in wrow.iter_mut().zip(&pb.values) {
                *v *= libm::sqrt((a * bl - floor2).max(0.0));
            }
        }
        // Y = P·(W ∘ N₂).
        y.fill(0.0);
        for (yrow, prow) in y.chunks_exact_mut(dim).zip(pa.vectors.chunks_exact(tokens)) {
            for (&p, wrow) in prow.iter().zip(w.chunks_exact(dim)) {
                for (t, &v) in yrow.iter_mut().zip(wrow) {
                    *t += p * v;
                }
            }
        }
        // R = Y·Qᵀ, row by row into w (no longer needed), added to x.
        for (i, yrow) in y.chunks_exact(dim).enumerate() {
            let r = &mut w[..dim];
            for (t, qrow) in r.iter_mut().zip(pb.vectors.chunks_exact(dim)) {
                *t = yrow.iter().zip(qrow).fold(0.0, |acc, (u, v)| acc + u * v);
            }
            for (v, &t) in x.row_mut(b * tokens + i).iter_mut().zip(r.iter()) {
                *v = T::from_f64(v.to_f64() + t);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_state_types_map_to_their_grid_formats() {
        assert_eq!(format_of::<f64>(), GridFormat::of::<f64>());
        assert_eq!(format_of::<f32>(), GridFormat::of::<f32>());
    }
}
