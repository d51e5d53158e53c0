//! Validating and factoring a covariance for the matrix Gaussian sampler
//! ([`MatrixGaussian::new`](super::MatrixGaussian::new)).
//!
//! **Guarantee.** A covariance `C` is checked for shape ([`check_square`]), finiteness
//! ([`MatRef::check_finite`](crate::MatRef::check_finite)) and symmetry ([`check_symmetric`]); [`factor_covariance`] then
//! returns a row-major square `A` with `A·Aᵀ = (C + Cᵀ)/2` up to rounding:
//!
//! 1. by Cholesky (`A` lower triangular) when every pivot is positive and finite;
//! 2. otherwise (singular, i.e. positive *semi*-definite, or indefinite) by the symmetric
//!    eigendecomposition `C = W·Λ·Wᵀ` and `A = W·diag(√λ)`. Eigenvalues in
//!    `[−`[`PSD_TOL`]`·max |λ|, 0)` are rounding of a true zero and are set to 0; a more
//!    negative one means `C` is not positive semi-definite, which is an error. Positive
//!    eigenvalues are never changed, so no direction gets less noise than asked for beyond
//!    rounding. Samples of a singular covariance lie in its range up to rounding: a zero
//!    eigenvalue is only known to about `ε·‖C‖`, so components outside the range have a
//!    standard deviation of order `√(ε·‖C‖)` (about `1e-8 · √‖C‖`), whichever path runs.
//!
//! [`scalar_identity`] recognises `C = s·I` exactly (no tolerance), which the sampler draws
//! on its i.i.d. fast path instead of factoring.
//!
//! **Tolerances** (relative, so independent of the covariance's scale): asymmetry
//! `max |c_ij − c_ji| ≤` [`SYMMETRY_TOL`] `· max |c_kl|` is accepted and the symmetric part is
//! factored; eigenvalues down to `−`[`PSD_TOL`]` · max |λ|` are clamped to zero.
//!
//! **Errors** (never panics on user input): [`Error::ShapeMismatch`] (axis `"cols"`) for a
//! non-square matrix; [`Error::NonFinite`] for NaN or infinity; [`Error::OutOfRange`] for
//! asymmetry beyond the tolerance (value: the relative asymmetry), for a covariance that is
//! not positive semi-definite (value: `λ_min / max |λ|`) and for an eigendecomposition that
//! does not converge (value: the iteration limit); [`Error::AllocationFailed`] if a factor
//! cannot be stored. (`OutOfRange`, not `Infeasible`: an asymmetric or indefinite matrix is an
//! invalid argument, not a privacy requirement that cannot be met; its `name` says which check
//! failed on which argument.)

#[cfg(feature = "alloc")]
use crate::error::{Error, Result};
#[cfg(feature = "alloc")]
use crate::matrix_view::MatRef;
#[cfg(feature = "alloc")]
use crate::scratch::try_filled;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;

/// Relative tolerance of the symmetry check: a covariance `C` is accepted when
/// `max |c_ij − c_ji| ≤ SYMMETRY_TOL · max |c_kl|`; its symmetric part is what gets factored.
///
/// ```
/// use dpattn_core::sampling::{MatrixGaussian, SYMMETRY_TOL};
/// use dpattn_core::MatRef;
/// let almost = [1.0, 0.5 + 0.1 * SYMMETRY_TOL, 0.5, 1.0];
/// let one = [1.0];
/// let one = MatRef::from_row_major(&one, 1, 1)?;
/// assert!(MatrixGaussian::new(MatRef::from_row_major(&almost, 2, 2)?, one).is_ok());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub const SYMMETRY_TOL: f64 = 1e-10;

/// Relative tolerance of the positive semi-definiteness check: eigenvalues in
/// `[−PSD_TOL · max |λ|, 0)` are treated as zero, smaller ones are an error.
///
/// ```
/// use dpattn_core::sampling::{MatrixGaussian, PSD_TOL};
/// use dpattn_core::{Error, MatRef};
/// let one = [1.0];
/// let one = MatRef::from_row_major(&one, 1, 1)?;
/// let negative = [-1.0];
/// let e = MatrixGaussian::new(MatRef::from_row_major(&negative, 1, 1)?, one).unwrap_err();
/// assert!(matches!(e, Error::OutOfRange { value, .. } if value < -PSD_TOL));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub const PSD_TOL: f64 = 1e-10;

/// Static strings naming one covariance argument in errors.
#[cfg(feature = "alloc")]
pub(crate) struct CovArg {
    /// The argument's name (`arg` of shape and finiteness errors).
    pub(crate) arg: &'static str,
    asym: &'static str,
    eig: &'static str,
    iters: &'static str,
}

/// Error names for the row covariance `Σ`.
#[cfg(feature = "alloc")]
pub(crate) const ROW_COV: CovArg = CovArg {
    arg: "row_cov",
    asym: "row_cov asymmetry max|c_ij - c_ji| / max|c_kl|",
    eig: "row_cov smallest eigenvalue / max|eigenvalue|",
    iters: "row_cov eigendecomposition iterations",
};

/// Error names for the column covariance `Ψ`.
#[cfg(feature = "alloc")]
pub(crate) const COL_COV: CovArg = CovArg {
    arg: "col_cov",
    asym: "col_cov asymmetry max|c_ij - c_ji| / max|c_kl|",
    eig: "col_cov smallest eigenvalue / max|eigenvalue|",
    iters: "col_cov eigendecomposition iterations",
};

/// [`Error::ShapeMismatch`] unless `c` is square.
#[cfg(feature = "alloc")]
pub(crate) fn check_square(c: MatRef<'_, f64>, arg: &'static str) -> Result<()> {
    if c.cols() != c.rows() {
        return Err(Error::ShapeMismatch { arg, axis: "cols", expected: c.rows(), got: c.cols() });
    }
    Ok(())
}

/// [`Error::OutOfRange`] when `max |c_ij − c_ji| > SYMMETRY_TOL · max |c_kl|`.
#[cfg(feature = "alloc")]
pub(crate) fn check_symmetric(c: MatRef<'_, f64>, names: &CovArg) -> Result<()> {
    let n = c.rows();
    let mut scale = 0.0f64;
    let mut asym = 0.0f64;
    for i in 0..n {
        for j in 0..n {
            let x = c.row(i)[j];
            scale = scale.max(libm::fabs(x));
            if j < i {
                asym = asym.max(libm::fabs(x - c.row(j)[i]));
            }
        }
    }
    if asym > SYMMETRY_TOL * scale {
        return Err(Error::OutOfRange {
            name: names.asym,
            value: asym / scale,
            allowed: "[0, 1e-10] (a covariance must be symmetric)",
        });
    }
    Ok(())
}

/// Entry `(i, j)` of the symmetric part `(C + Cᵀ)/2` (halves first: no overflow).
#[cfg(feature = "alloc")]
#[inline]
fn sym(c: MatRef<'_, f64>, i: usize, j: usize) -> f64 {
    0.5 * c.row(i)[j] + 0.5 * c.row(j)[i]
}

/// `Some(s)` when `c = s · I` exactly.
#[cfg(feature = "alloc")]
pub(crate) fn scalar_identity(c: MatRef<'_, f64>) -> Option<f64> {
    let n = c.rows();
    let s = c.get(0, 0)?;
    for i in 0..n {
        for (j, &x) in c.row(i).iter().enumerate() {
            if x != if i == j { s } else { 0.0 } {
                return None;
            }
        }
    }
    Some(s)
}

/// A factor `A` (row-major, `n × n`) with `A·Aᵀ = sym(c)`: Cholesky when it succeeds, else
/// the clamped eigendecomposition (module docs). `c` must be square.
#[cfg(feature = "alloc")]
pub(crate) fn factor_covariance(c: MatRef<'_, f64>, names: &CovArg) -> Result<Vec<f64>> {
    let n = c.rows();
    if let Some(l) = cholesky(c)? {
        return Ok(l);
    }
    let (values, vectors) = symmetric_eigen(c, names)?;
    let scale = values.iter().fold(0.0f64, |acc, &l| acc.max(libm::fabs(l)));
    let min = values.iter().fold(f64::INFINITY, |acc, &l| acc.min(l));
    if min < -PSD_TOL * scale {
        return Err(Error::OutOfRange {
            name: names.eig,
            value: min / scale,
            allowed: "[-1e-10, 1] (a covariance must be positive semi-definite)",
        });
    }
    let roots: Vec<f64> = values.iter().map(|&l| libm::sqrt(l.max(0.0))).collect();
    let mut a = try_filled(n * n, 0.0f64, "matrix Gaussian factor")?;
    for i in 0..n {
        for k in 0..n {
            a[i * n + k] = vectors[i * n + k] * roots[k];
        }
    }
    Ok(a)
}

/// The lower Cholesky factor of `sym(c)` (row-major), or `None` when a pivot is not
/// positive or an entry is not finite.
#[cfg(feature = "alloc")]
fn cholesky(c: MatRef<'_, f64>) -> Result<Option<Vec<f64>>> {
    let n = c.rows();
    let mut l = try_filled(n * n, 0.0f64, "matrix Gaussian factor")?;
    for i in 0..n {
        for j in 0..n {
            l[i * n + j] = sym(c, i, j);
        }
    }
    let ok = crate::linalg::cholesky_in_place(&mut l, n).is_ok() && l.iter().all(|x| x.is_finite());
    Ok(ok.then_some(l))
}

/// Eigenvalues and eigenvectors (row-major, eigenvector `k` in column `k`) of `sym(c)`.
#[cfg(feature = "alloc")]
fn symmetric_eigen(c: MatRef<'_, f64>, names: &CovArg) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = c.rows();
    if n == 1 {
        let mut values = try_filled(1, 0.0f64, "matrix Gaussian eigenvalues")?;
        values[0] = sym(c, 0, 0);
        let mut vectors = try_filled(1, 0.0f64, "matrix Gaussian eigenvectors")?;
        vectors[0] = 1.0;
        return Ok((values, vectors));
    }
    let m = nalgebra::DMatrix::from_fn(n, n, |i, j| sym(c, i, j));
    let max_iter = 1000 + 100 * n;
    let e = nalgebra::linalg::SymmetricEigen::try_new(m, f64::EPSILON, max_iter).ok_or(
        Error::OutOfRange {
            name: names.iters,
            value: max_iter as f64,
            allowed: "converges within 1000 + 100 n QR sweeps",
        },
    )?;
    let values = e.eigenvalues.iter().copied().collect::<Vec<f64>>();
    let mut vectors = try_filled(n * n, 0.0f64, "matrix Gaussian eigenvectors")?;
    for i in 0..n {
        for k in 0..n {
            vectors[i * n + k] = e.eigenvectors[(i, k)];
        }
    }
    if !values.iter().chain(vectors.iter()).all(|x| x.is_finite()) {
        return Err(Error::NonFinite { arg: names.arg, index: 0 });
    }
    Ok((values, vectors))
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;

    fn mat(data: &[f64], n: usize) -> MatRef<'_, f64> {
        MatRef::from_row_major(data, n, n).unwrap()
    }

    /// max |F·Fᵀ − C| over entries.
    fn reconstruction_error(f: MatRef<'_, f64>, c: &[f64]) -> f64 {
        let n = f.rows();
        let mut worst = 0.0f64;
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| f.row(i)[k] * f.row(j)[k]).sum();
                worst = worst.max((s - c[i * n + j]).abs());
            }
        }
        worst
    }

    #[test]
    fn cholesky_factor_reproduces_a_positive_definite_covariance() {
        let c = [4.0, 2.0, 0.4, 2.0, 2.0, 0.5, 0.4, 0.5, 1.0];
        let a = factor_covariance(mat(&c, 3), &ROW_COV).unwrap();
        assert_eq!(cholesky(mat(&c, 3)).unwrap().as_ref(), Some(&a));
        let a = mat(&a, 3);
        assert!(reconstruction_error(a, &c) < 1e-14);
        assert_eq!((a.get(0, 1), a.get(0, 2), a.get(1, 2)), (Some(0.0), Some(0.0), Some(0.0)));
        assert_eq!(a.get(0, 0), Some(2.0));
    }

    #[test]
    fn singular_covariances_use_the_clamped_eigendecomposition() {
        // Rank 1: v vᵀ with v = (1, 2, 3); the Cholesky pivot of row 2 is exactly 0.
        let v = [1.0, 2.0, 3.0];
        let c: [f64; 9] = core::array::from_fn(|k| v[k / 3] * v[k % 3]);
        assert_eq!(cholesky(mat(&c, 3)).unwrap(), None);
        let a = factor_covariance(mat(&c, 3), &ROW_COV).unwrap();
        assert!(reconstruction_error(mat(&a, 3), &c) < 1e-13);
        // The zero matrix is positive semi-definite; its factor is zero.
        let z = factor_covariance(mat(&[0.0; 4], 2), &ROW_COV).unwrap();
        assert!(z.iter().all(|&x| x == 0.0));
        assert_eq!(factor_covariance(mat(&[0.0], 1), &COL_COV).unwrap(), [0.0]);
    }

    #[test]
    fn tiny_negative_eigenvalues_are_clamped_and_large_ones_rejected() {
        // Eigenvalues 2 and -1e-13 (relative -5e-14): within the tolerance.
        let e = -1e-13;
        let c = [(2.0 + e) / 2.0, (2.0 - e) / 2.0, (2.0 - e) / 2.0, (2.0 + e) / 2.0];
        assert!(factor_covariance(mat(&c, 2), &ROW_COV).is_ok());
        // Eigenvalues 2 and -1e-6: not positive semi-definite.
        let e = -1e-6;
        let c = [(2.0 + e) / 2.0, (2.0 - e) / 2.0, (2.0 - e) / 2.0, (2.0 + e) / 2.0];
        let err = factor_covariance(mat(&c, 2), &COL_COV).unwrap_err();
        match err {
            Error::OutOfRange { name, value, .. } => {
                assert_eq!(name, COL_COV.eig);
                assert!((value + 5e-7).abs() < 1e-12, "{value}");
            }
            other => panic!("{other:?}"),
        }
        // A negative 1 x 1 covariance.
        assert!(matches!(
            factor_covariance(mat(&[-1.0], 1), &ROW_COV),
            Err(Error::OutOfRange { value, .. }) if value == -1.0
        ));
    }

    #[test]
    fn asymmetry_within_the_tolerance_is_accepted() {
        let c = [1.0, 0.5 + 1e-12, 0.5, 1.0];
        assert!(check_symmetric(mat(&c, 2), &ROW_COV).is_ok());
        assert!(factor_covariance(mat(&c, 2), &ROW_COV).is_ok());
        let c = [1.0, 0.5 + 1e-8, 0.5, 1.0];
        let err = check_symmetric(mat(&c, 2), &ROW_COV).unwrap_err();
        assert!(matches!(err, Error::OutOfRange { name, .. } if name == ROW_COV.asym));
    }

    #[test]
    fn non_square_matrices_are_shape_errors() {
        let wide = MatRef::from_row_major(&[1.0, 0.0], 1, 2).unwrap();
        assert_eq!(
            check_square(wide, ROW_COV.arg),
            Err(Error::ShapeMismatch { arg: "row_cov", axis: "cols", expected: 1, got: 2 })
        );
        assert!(check_square(mat(&[], 0), COL_COV.arg).is_ok());
    }

    #[test]
    fn scalar_identities_are_recognised_exactly() {
        assert_eq!(scalar_identity(mat(&[4.0, 0.0, 0.0, 4.0], 2)), Some(4.0));
        assert_eq!(scalar_identity(mat(&[9.0], 1)), Some(9.0));
        // A diagonal that is not scalar, or any off-diagonal entry, is not.
        assert_eq!(scalar_identity(mat(&[4.0, 0.0, 0.0, 1.0], 2)), None);
        assert_eq!(scalar_identity(mat(&[4.0, 1e-300, 1e-300, 4.0], 2)), None);
        assert_eq!(scalar_identity(mat(&[], 0)), None);
    }
}
