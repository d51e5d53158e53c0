//! The noise of one release: i.i.d., diagonal, or a general matrix normal, checked against
//! Theorem 6 (`docs/PAPERS.md` §3.6 and §3.2).
//!
//! **Guarantee.** [`check_factors`] accepts a noise shape only if
//! `σ_min(U)·σ_min(V) ≥ floor`, where `Z = U·N·Vᵀ`, `N` has i.i.d. N(0, 1) entries, and
//! `floor` is [`DpForwardParams::noise_floor`](super::DpForwardParams::noise_floor). The
//! singular values are exact for [`NoiseFactors::Iid`] and [`NoiseFactors::Diagonal`]
//! (`U = diag(row_std)`, `V = diag(col_std)`) and certified lower bounds for
//! [`NoiseFactors::Matrix`] (see [`CertifiedMatrixGaussian`](super::CertifiedMatrixGaussian)).
//! Only the two smallest singular values are constrained: every other one may be larger,
//! which only adds noise (Theorem 6). The condition is sufficient for every `f` and
//! necessary only against the worst-case difference, aligned with the weakest noise
//! directions (`docs/PAPERS.md` P3-9).
//!
//! **Randomness** (the float noise of [`NoiseMode::UnsafeFloat`]; the default exact release
//! is described in the `exact` module and [`dp_forward`](super::dp_forward)). Element
//! `(r, j)` of the stacked `(batch·tokens) × dim` matrix takes element `first + r·dim + j`
//! of the standard normal draw of the [`KeyedStream`] ([`Gaussian::STANDARD`],
//! `docs/RANDOMNESS.md` §5.4): the same stream a GPU kernel draws for the same logical
//! element. For [`NoiseFactors::Matrix`], sequence `b`'s `N` is the block starting at
//! `first + b·tokens·dim` and `Z = U·N·Vᵀ` is formed per sequence.

use crate::calibration::normal::normal_sf;
use crate::dp_forward::params::DpForwardParams;
use crate::error::{Error, Result};
use crate::grid_release::NoiseMode;
use crate::matrix_view::MatMut;
use crate::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseFloat, check_largest};

#[cfg(feature = "alloc")]
use crate::dp_forward::certify::CertifiedMatrixGaussian;

/// Normals drawn per chunk (stack buffer).
const CHUNK: usize = 128;

/// The noise factors of one release.
#[derive(Debug, Clone, Copy)]
pub enum NoiseFactors<'a> {
    /// `Z = σ·N` with `σ` the noise floor: the paper's choice (Eq. 6; aMGM is then the
    /// analytic Gaussian mechanism).
    Iid,
    /// `Z_ij = row_std[i]·N_ij·col_std[j]`: per-token and per-feature magnitudes, with
    /// `min(row_std)·min(col_std) ≥ floor`.
    Diagonal {
        /// `tokens` positive standard deviations (the singular values of `U`).
        row_std: &'a [f64],
        /// `dim` positive standard deviations (the singular values of `V`).
        col_std: &'a [f64],
    },
    /// A general `MN(0, Σ, Ψ)` whose factors' smallest singular values are certified.
    #[cfg(feature = "alloc")]
    Matrix(&'a CertifiedMatrixGaussian),
}

/// The smallest entry of a slice of standard deviations, all checked finite and positive.
fn min_std(name: &'static str, v: &[f64], len: usize) -> Result<f64> {
    if v.len() != len {
        return Err(Error::ShapeMismatch { arg: name, axis: "len", expected: len, got: v.len() });
    }
    let mut m = f64::INFINITY;
    for (i, &x) in v.iter().enumerate() {
        if !x.is_finite() {
            return Err(Error::NonFinite { arg: name, index: i });
        }
        if x <= 0.0 {
            return Err(Error::OutOfRange { name, value: x, allowed: "(0, inf)" });
        }
        m = m.min(x);
    }
    Ok(m)
}

/// Checks the factors against the params' shape and Theorem 6; returns `floor` and the
/// scratch the release needs.
///
/// # Errors
/// [`Error::ShapeMismatch`] for factors of the wrong size; [`Error::NonFinite`] /
/// [`Error::OutOfRange`] for a standard deviation that is not finite and positive;
/// [`Error::Infeasible`] (`lhs` the product of the smallest singular values, `rhs` the
/// floor) when Theorem 6 fails, and, in [`NoiseMode::UnsafeFloat`] only, when the float
/// sampler's bounded support would be visible at this ε (see [`GAUSSIAN_SUPPORT`]; the
/// exact discrete Gaussian has unbounded support); the errors of
/// [`noise_floor`](DpForwardParams::noise_floor).
pub fn check_factors(params: &DpForwardParams, factors: &NoiseFactors<'_>) -> Result<f64> {
    let floor = params.noise_floor()?;
    if params.noise_mode == NoiseMode::UnsafeFloat {
        check_support(params, floor)?;
    }
    let (su, sv) = match factors {
        NoiseFactors::Iid => return Ok(floor),
        NoiseFactors::Diagonal { row_std, col_std } => {
            (min_std("row_std", row_std, params.tokens)?, min_std("col_std", col_std, params.dim)?)
        }
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(m) => {
            if (m.rows(), m.cols()) != (params.tokens, params.dim) {
                let (axis, expected, got) = if m.rows() != params.tokens {
                    ("rows", params.tokens, m.rows())
                } else {
                    ("cols", params.dim, m.cols())
                };
                return Err(Error::ShapeMismatch { arg: "factors", axis, expected, got });
            }
            m.sigma_min_bounds()
        }
    };
    // The sign of su·sv − floor, exactly.
    if libm::fma(su, sv, -floor) >= 0.0 {
        Ok(floor)
    } else {
        Err(Error::Infeasible {
            condition: "σ_min(U)·σ_min(V) ≥ S·√k/A(ε, δ) (DP-Forward Thm 6)",
            lhs: su * sv,
            rhs: floor,
        })
    }
}

/// `√(106·ln 2)`: the largest `|z|` the `f64` Box–Muller sampler can return (its uniform is
/// never below `2⁻⁵³`). Checked in [`NoiseMode::UnsafeFloat`] only.
pub const GAUSSIAN_SUPPORT: f64 = 8.571_674_348_7; // √(106 ln 2) = 8.5716743486529…, rounded up

/// Refuses a calibration whose per-release `μ = S₂/σ` is so large that the sampler's bounded
/// support is visible: with `|z| ≤ R` every output lies in a box around `clip(x)`, and an
/// output in `x`'s box but outside `x′`'s happens with probability `Q(R − μ)` per release,
/// an event the Gaussian analysis does not pay for. The hook requires
/// `k·Q(R − μ) ≤ δ/100`, so this event adds at most 1% of δ (about ε ≤ 20 at δ = 1e-5 for
/// one release).
fn check_support(params: &DpForwardParams, floor: f64) -> Result<()> {
    let mu = params.sensitivity()? / floor;
    let slack = f64::from(params.releases) * normal_sf(GAUSSIAN_SUPPORT - mu);
    let allowed = params.budget.delta().get() / 100.0;
    if slack <= allowed {
        Ok(())
    } else {
        Err(Error::Infeasible {
            condition: "k·Q(8.57 − S₂/σ) ≤ δ/100: the f64 Gaussian's support |z| ≤ 8.57 must stay invisible (ε too large for this δ)",
            lhs: slack,
            rhs: allowed,
        })
    }
}

/// Unsafe float mode: refuses noise whose largest value would make an output non-finite in
/// `T`. Every clipped entry is at most `C` in magnitude and every noise entry at most the
/// largest `f64` normal (8.57) times the largest standard deviation an entry can get: the
/// floor (i.i.d.), `max row_std · max col_std` (diagonal), or for a matrix sampler
/// `(A·N·Bᵀ)_ij ≤ 8.57·Σ_k|A_ik|·Σ_l|B_jl|`, bounded by the entrywise ℓ1 norms.
pub(crate) fn check_float_range<T: NoiseFloat>(
    params: &DpForwardParams,
    factors: &NoiseFactors<'_>,
    floor: f64,
) -> Result<()> {
    let max_abs = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let std = match factors {
        NoiseFactors::Iid => floor,
        NoiseFactors::Diagonal { row_std, col_std } => max_abs(row_std) * max_abs(col_std),
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(c) => {
            let m = c.matrix_gaussian();
            match (m.iid_sigma(), m.row_factor(), m.col_factor()) {
                (Some(s), _, _) => s,
                (None, Some(a), Some(b)) => {
                    let l1 = |f: crate::MatRef<'_, f64>| {
                        (0..f.rows())
                            .map(|i| f.row(i).iter().map(|x| x.abs()).sum::<f64>())
                            .sum::<f64>()
                    };
                    l1(a) * l1(b)
                }
                _ => 0.0, // an empty factor: no noise entries
            }
        }
    };
    check_largest(
        "noise standard deviation (clip_norm + 8.57·std must be finite in the output type)",
        std,
        params.clip_norm + std * crate::sampling::max_box_muller::<f64>(),
        T::MAX_FINITE,
        "a noise scale whose largest noisy output is finite",
    )
}

/// The `f64` scratch [`dp_forward`](super::dp_forward) needs for sequences of
/// `tokens × dim`: none for i.i.d. and diagonal noise, `tokens·dim` plus the sampler's
/// scratch for [`NoiseFactors::Matrix`] (saturating).
///
/// ```
/// use dpattn_core::dp_forward::{NoiseFactors, dp_forward_scratch_len};
/// assert_eq!(dp_forward_scratch_len(&NoiseFactors::Iid, 128, 768), 0);
/// ```
#[cfg_attr(not(feature = "alloc"), allow(unused_variables))]
pub fn dp_forward_scratch_len(factors: &NoiseFactors<'_>, tokens: usize, dim: usize) -> usize {
    match factors {
        NoiseFactors::Iid | NoiseFactors::Diagonal { .. } => 0,
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(m) => tokens.saturating_mul(dim).saturating_add(m.scratch_len()),
    }
}

/// Adds the noise to `x` (`(batch·tokens) × dim`, already checked by the caller: shape,
/// factors, scratch, and `first + rows·dim` without overflow).
pub(crate) fn add_noise<T: NoiseFloat>(
    mut x: MatMut<'_, T>,
    tokens: usize,
    factors: &NoiseFactors<'_>,
    floor: f64,
    stream: &KeyedStream,
    first: u64,
    scratch: &mut [f64],
) -> Result<()> {
    #[cfg(not(feature = "alloc"))]
    let _ = (tokens, scratch);
    match factors {
        NoiseFactors::Iid => add_scaled(&mut x, stream, first, |_, _| floor),
        NoiseFactors::Diagonal { row_std, col_std } => {
            add_scaled(&mut x, stream, first, |r, j| row_std[r % tokens] * col_std[j])
        }
        #[cfg(feature = "alloc")]
        NoiseFactors::Matrix(m) => {
            let dim = x.cols();
            let block = tokens * dim;
            let (z, rest) = scratch.split_at_mut(block);
            for b in 0..x.rows() / tokens {
                let offset = first + (b * block) as u64;
                m.sample_keyed(MatMut::from_row_major(z, tokens, dim)?, stream, offset, rest)?;
                for i in 0..tokens {
                    let row = x.row_mut(b * tokens + i);
                    for (v, &n) in row.iter_mut().zip(&z[i * dim..(i + 1) * dim]) {
                        *v = T::from_f64(v.to_f64() + n);
                    }
                }
            }
            Ok(())
        }
    }
}

/// `x[r][j] += scale(r, j)·N[r][j]`, drawing `N` row by row in chunks (`N[r][j]` is element
/// `first + r·dim + j` of the standard normal draw).
pub(crate) fn add_scaled<T: NoiseFloat>(
    x: &mut MatMut<'_, T>,
    stream: &KeyedStream,
    first: u64,
    scale: impl Fn(usize, usize) -> f64,
) -> Result<()> {
    let dim = x.cols();
    let mut buf = [0.0f64; CHUNK];
    for r in 0..x.rows() {
        let row = x.row_mut(r);
        let mut j0 = 0;
        while j0 < dim {
            let len = CHUNK.min(dim - j0);
            let at = first + (r * dim + j0) as u64;
            Gaussian::STANDARD.fill_keyed::<f64>(stream, at, &mut buf[..len])?;
            for (k, &n) in buf[..len].iter().enumerate() {
                let v = &mut row[j0 + k];
                *v = T::from_f64(v.to_f64() + scale(r, j0 + k) * n);
            }
            j0 += len;
        }
    }
    Ok(())
}
