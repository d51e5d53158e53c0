//! A matrix normal noise source with certified smallest singular values, for Theorem 6's
//! check on general (non-diagonal) factors (`docs/PAPERS.md` §3.6, "Choosing the
//! factors", and §3.2). Feature `alloc`.
//!
//! **Guarantee.** [`CertifiedMatrixGaussian::new`] returns lower bounds `s_U ≤ σ_min(A)` and
//! `s_V ≤ σ_min(B)` for the factors `A`, `B` the sampler *actually multiplies by* (the
//! stored `f64` matrices, so rounding in the factorisation cannot make the noise weaker than
//! certified). For a factor `A` (`m × m`):
//!
//! 1. `G = fl(A·Aᵀ)` and an eigendecomposition `G ≈ X·D·Xᵀ` (nalgebra; its accuracy only
//!    affects how tight the bound is, never whether it holds);
//! 2. the residual `E = A·Aᵀ − X·D·Xᵀ` and the loss of orthogonality `O = XᵀX − I` are
//!    bounded entrywise by their computed values plus the rounding error of every product
//!    (`γ = 2(m + 4)·2⁻⁵³` times the sums of absolute products) and in norm by their
//!    Frobenius norms, all rounded up;
//! 3. Weyl's inequality gives `λ_min(A·Aᵀ) ≥ λ_min(X·D·Xᵀ) − ‖E‖₂`, and
//!    `X·D·Xᵀ ⪰ d_min·X·Xᵀ ⪰ d_min·(1 − ‖O‖₂)·I` for `d_min ≥ 0`;
//! 4. `s_U = √(d_min·(1 − ‖O‖_F) − ‖E‖_F)`, rounded down (0 when the bracket is negative,
//!    which then fails Theorem 6's check: a numerically singular factor is refused).
//!
//! For an i.i.d. sampler (`MatrixGaussian::iid`, or scalar identities) the bound is exact:
//! `s_U·s_V = σ`. Cost `O(m³)` per factor, once per noise source. The eigendecompositions
//! of step 1 are kept (`O(m²)` memory): the exact release builds its extra noise from them
//! (module docs of `exact`).

use alloc::vec::Vec;
use nalgebra::{DMatrix, SymmetricEigen};

use crate::directed_rounding::{add_down, add_up, mul_down, mul_up, sqrt_up};
use crate::error::{Error, Result};
use crate::matrix_view::{MatMut, MatRef};
use crate::sampling::{KeyedStream, MatrixGaussian};
use crate::scratch::try_filled;

/// A [`MatrixGaussian`] together with certified lower bounds on the smallest singular
/// values of its two factors (see the module docs).
///
/// ```
/// use dpattn_core::dp_forward::CertifiedMatrixGaussian;
/// use dpattn_core::sampling::MatrixGaussian;
/// use dpattn_core::MatRef;
/// // Σ = [[4, 2], [2, 2]] has eigenvalues 3 ± √5; σ_min(A) = √(3 − √5) ≈ 0.874.
/// let sigma = [4.0, 2.0, 2.0, 2.0];
/// let psi = [1.0, 0.0, 0.0, 1.0];
/// let mg = MatrixGaussian::new(MatRef::from_row_major(&sigma, 2, 2)?,
///     MatRef::from_row_major(&psi, 2, 2)?)?;
/// let c = CertifiedMatrixGaussian::new(mg)?;
/// let (su, sv) = c.sigma_min_bounds();
/// let exact = (3.0f64 - 5f64.sqrt()).sqrt();
/// assert!(su <= exact && su > exact * (1.0 - 1e-12));
/// assert!(sv <= 1.0 && sv > 1.0 - 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CertifiedMatrixGaussian {
    inner: MatrixGaussian,
    sigma_min_row: f64,
    sigma_min_col: f64,
    /// The eigendecompositions of `A·Aᵀ` and `B·Bᵀ` computed by the certification (dense
    /// factors only), kept for the extra noise of the exact release.
    spectra: Option<(Spectrum, Spectrum)>,
}

/// An approximate eigendecomposition `G ≈ P·diag(λ)·Pᵀ` of a factor's Gram matrix
/// `G = A·Aᵀ` (`m × m`): `vectors` row-major (`vectors[i·m + k] = P_ik`), `values[k] = λ_k`.
/// Its accuracy affects only the law of the exact release's extra noise, never a guarantee.
#[derive(Debug, Clone)]
pub(crate) struct Spectrum {
    pub(crate) vectors: Vec<f64>,
    pub(crate) values: Vec<f64>,
}

impl CertifiedMatrixGaussian {
    /// Certifies the factors of `inner` (see the module docs).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] (`name` `"factor"`) if an eigendecomposition does not
    /// converge; [`Error::AllocationFailed`] if a work buffer cannot be allocated (nalgebra's
    /// own matrices abort on allocation failure, like any `Vec`).
    pub fn new(inner: MatrixGaussian) -> Result<Self> {
        let (sigma_min_row, sigma_min_col, spectra) = match inner.iid_sigma() {
            Some(s) => (s, 1.0, None),
            None => {
                let a =
                    inner.row_factor().ok_or(Error::Unsupported { what: "row factor missing" })?;
                let b = inner
                    .col_factor()
                    .ok_or(Error::Unsupported { what: "column factor missing" })?;
                let (su, pa) = certify(a)?;
                let (sv, pb) = certify(b)?;
                (su, sv, pa.zip(pb))
            }
        };
        Ok(Self { inner, sigma_min_row, sigma_min_col, spectra })
    }

    /// `(s_U, s_V)`: certified lower bounds on `σ_min` of the row and column factors.
    pub fn sigma_min_bounds(&self) -> (f64, f64) {
        (self.sigma_min_row, self.sigma_min_col)
    }

    /// The sampler.
    pub fn matrix_gaussian(&self) -> &MatrixGaussian {
        &self.inner
    }

    /// Rows (`tokens`).
    pub fn rows(&self) -> usize {
        self.inner.rows()
    }

    /// Columns (`dim`).
    pub fn cols(&self) -> usize {
        self.inner.cols()
    }

    /// The sampler's scratch in `f64` elements.
    pub fn scratch_len(&self) -> usize {
        self.inner.scratch_len()
    }

    /// The spectra of `A·Aᵀ` and `B·Bᵀ` (dense factors with a positive certified bound).
    pub(crate) fn spectra(&self) -> Option<&(Spectrum, Spectrum)> {
        self.spectra.as_ref()
    }

    pub(crate) fn sample_keyed(
        &self,
        out: MatMut<'_, f64>,
        stream: &KeyedStream,
        first: u64,
        scratch: &mut [f64],
    ) -> Result<()> {
        self.inner.sample_keyed_into(out, stream, first, scratch)
    }
}

/// A certified lower bound on `σ_min(A)` for square `A` (module docs, steps 1–4). `A` is
/// first scaled by an exact power of two so that its largest entry lies in `[1, 2)`; every
/// error term also carries an absolute `2⁻¹⁰⁶⁰` for products that underflow.
#[cfg(test)]
pub(crate) fn certified_sigma_min(a: MatRef<'_, f64>) -> Result<f64> {
    Ok(certify(a)?.0)
}

/// The certified bound on `σ_min(A)` and, when the eigendecomposition ran, the spectrum of
/// `A·Aᵀ` (unscaled).
fn certify(a: MatRef<'_, f64>) -> Result<(f64, Option<Spectrum>)> {
    let m = a.rows();
    let max = (0..m).flat_map(|i| a.row(i).iter()).fold(0.0f64, |acc, v| acc.max(v.abs()));
    if m == 0 || max == 0.0 || !max.is_finite() {
        return Ok((0.0, None));
    }
    // 2^-e with e the exponent of max: exact scaling (no entry overflows or leaves the range
    // of normal numbers unless it was already tiny next to max).
    let e = libm::ilogb(max);
    let (scale, unscale) = (libm::ldexp(1.0, -e), libm::ldexp(1.0, e));
    let mut scaled = try_filled(m * m, 0.0, "scaled factor")?;
    for i in 0..m {
        for (d, &v) in scaled[i * m..(i + 1) * m].iter_mut().zip(a.row(i)) {
            *d = v * scale;
        }
    }
    let (bound, eig) = certified_sigma_min_scaled(&scaled, m)?;
    // The eigenvalues of the scaled Gram matrix are 4^−e times those of A·Aᵀ.
    let spectrum = match eig {
        Some(eig) => {
            let mut vectors = try_filled(m * m, 0.0, "factor eigenvectors")?;
            for i in 0..m {
                for k in 0..m {
                    vectors[i * m + k] = eig.eigenvectors[(i, k)];
                }
            }
            let mut values = try_filled(m, 0.0, "factor eigenvalues")?;
            for (v, &d) in values.iter_mut().zip(eig.eigenvalues.iter()) {
                *v = libm::ldexp(d, 2 * e).min(f64::MAX);
            }
            Some(Spectrum { vectors, values })
        }
        None => None,
    };
    // σ_min(A) = σ_min(scaled)·2^e; multiplying by a power of two is exact unless it underflows,
    // and an underflowing product only gets smaller.
    Ok(((bound * unscale).min(f64::MAX), spectrum))
}

/// Steps 1–4 on a row-major `m × m` factor whose largest entry is in `[1, 2)`; also returns
/// the eigendecomposition of step 1 when it ran.
fn certified_sigma_min_scaled(
    a: &[f64],
    m: usize,
) -> Result<(f64, Option<SymmetricEigen<f64, nalgebra::Dyn>>)> {
    let tiny = libm::ldexp(1.0, -1060);
    let gamma = 2.0 * (m as f64 + 4.0) * (f64::EPSILON / 2.0);
    // G = A·Aᵀ and |A|·|A|ᵀ.
    let mut g = DMatrix::<f64>::zeros(m, m);
    let mut g_abs = try_filled(m * m, 0.0, "|A|·|A|ᵀ")?;
    for i in 0..m {
        for j in i..m {
            let (ri, rj) = (&a[i * m..(i + 1) * m], &a[j * m..(j + 1) * m]);
            let (mut s, mut t) = (0.0, 0.0);
            for k in 0..m {
                s += ri[k] * rj[k];
                t += (ri[k] * rj[k]).abs();
            }
            g[(i, j)] = s;
            g[(j, i)] = s;
            g_abs[i * m + j] = t;
            g_abs[j * m + i] = t;
        }
    }
    let eig =
        SymmetricEigen::try_new(g.clone(), f64::EPSILON, 10_000).ok_or(Error::OutOfRange {
            name: "factor",
            value: m as f64,
            allowed: "a factor whose Gram matrix has a convergent eigendecomposition",
        })?;
    let (x, d) = (&eig.eigenvectors, &eig.eigenvalues);
    let d_min = d.iter().copied().fold(f64::INFINITY, f64::min);
    if d_min.is_nan() || d_min <= 0.0 {
        return Ok((0.0, None));
    }
    // ‖E‖_F and ‖O‖_F, each entry bounded by |computed|·(1 + 2⁻⁵²) + γ·(absolute sums).
    let (mut e_sq, mut o_sq) = (0.0f64, 0.0f64);
    for i in 0..m {
        for j in 0..m {
            let (mut s, mut s_abs, mut o, mut o_abs) = (0.0, 0.0, 0.0, 0.0);
            for k in 0..m {
                let p = x[(i, k)] * d[k] * x[(j, k)];
                s += p;
                s_abs += p.abs();
                let q = x[(k, i)] * x[(k, j)];
                o += q;
                o_abs += q.abs();
            }
            let r = g[(i, j)] - s;
            let e = add_up(
                mul_up(r.abs(), 1.0 + f64::EPSILON),
                mul_up(gamma, add_up(g_abs[i * m + j], s_abs)),
            );
            e_sq = add_up(e_sq, mul_up(e, e));
            let o = if i == j { o - 1.0 } else { o };
            let oe = add_up(
                add_up(mul_up(o.abs(), 1.0 + f64::EPSILON), mul_up(gamma, add_up(o_abs, 1.0))),
                tiny,
            );
            o_sq = add_up(o_sq, mul_up(oe, oe));
        }
    }
    let (e_norm, o_norm) = (sqrt_up(e_sq), sqrt_up(o_sq));
    if o_norm.is_nan() || o_norm >= 1.0 {
        return Ok((0.0, None));
    }
    let lambda = add_down(mul_down(d_min, add_down(1.0, -o_norm)), -e_norm);
    if lambda.is_nan() || lambda <= 0.0 {
        return Ok((0.0, None));
    }
    Ok((libm::sqrt(lambda).next_down(), Some(eig)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagonal_factor_is_certified_tightly() {
        let a = [3.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 2.0];
        let s = certified_sigma_min(MatRef::from_row_major(&a, 3, 3).unwrap()).unwrap();
        assert!(s <= 0.5 && s > 0.5 * (1.0 - 1e-13), "{s}");
    }

    #[test]
    fn singular_factor_certifies_zero() {
        let a = [1.0, 2.0, 2.0, 4.0];
        let s = certified_sigma_min(MatRef::from_row_major(&a, 2, 2).unwrap()).unwrap();
        assert_eq!(s, 0.0);
    }
}
