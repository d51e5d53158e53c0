//! Matrix normal noise `MN(0, Σ, Ψ)`: the noise of the analytic matrix Gaussian mechanism.
//!
//! **Guarantee.** [`MatrixGaussian`] draws an `n × m` matrix `Z = A · N · Bᵀ`, where `N` has
//! i.i.d. standard normal entries ([`Gaussian::STANDARD`], Box–Muller in `f64`) and the
//! factors satisfy `A·Aᵀ = Σ` (`n × n` row covariance) and `B·Bᵀ = Ψ` (`m × m` column
//! covariance). Then `vec(Z) ~ N(0, Ψ ⊗ Σ)` (column-stacking `vec`), i.e.
//! `Cov(Z_ij, Z_kl) = Σ_ik · Ψ_jl` (`docs/PAPERS.md` §3.4, sampling by the paper's Lemma 7;
//! no DP library offers it, A.2.8). `Z` is a linear function of `N`, so it is exactly as good a
//! Gaussian as `N` is (see [`Gaussian`] for the floating-point caveats).
//!
//! **Factorisation** ([`MatrixGaussian::new`], feature `alloc`). Each covariance is checked
//! (square, finite, symmetric within [`SYMMETRY_TOL`](crate::sampling::SYMMETRY_TOL)) and
//! its symmetric part factored by Cholesky, falling back to a symmetric eigendecomposition
//! with negative rounding clamped (within [`PSD_TOL`](crate::sampling::PSD_TOL)) for a
//! positive semi-definite one. The checks, the factoring, the tolerances and their errors
//! are in [`covariance_factor`](super::covariance_factor).
//!
//! A pair of scalar identities (`Σ = s·I`, `Ψ = t·I`, `s, t > 0`) is recognised and sampled
//! on the i.i.d. fast path `Z = √s·√t · N`, as is [`MatrixGaussian::iid`], which needs no
//! allocation. [`MatrixGaussian::from_factors`] takes `A` and `B` as they are.
//!
//! **Randomness.** Element `(i, j)` of `N` is element `first + i·m + j` of the standard
//! normal draw of a [`KeyedStream`] ([`FixedWordSampler::fill_keyed`] with `f64`: four words
//! per pair of elements), so `N` is reproducible element by element and `Z` is a
//! deterministic function of `(stream, first)`. From a [`CryptoRng`], `N` is
//! [`FixedWordSampler::fill`]ed in row-major order (on a `ChaCha20Rng` at word 0 of a stream
//! that is the keyed draw with `first = 0`). `f32` output is the `f64` result rounded: it
//! consumes the same words.
//!
//! **Errors** (never panics on user input): [`Error::ShapeMismatch`] for a non-square
//! covariance or factor and for an output of the wrong shape; [`Error::NonFinite`] for NaN or
//! infinity in a covariance or factor; [`Error::OutOfRange`] for a covariance that is
//! asymmetric or not positive semi-definite (details in
//! [`covariance_factor`](super::covariance_factor)); [`Error::ScratchTooSmall`];
//! [`Error::SizeOverflow`] when `2·n·m` or `first + n·m` overflows.
//!
//! Products are computed by hand on row-major buffers (`O(n²m + nm²)`), not with nalgebra's
//! GEMM (see [`crate::nalgebra_interop`] for the strided-view bug that rules it out).

use rand_core::CryptoRng;

use crate::error::{Error, Result, mul_size};
use crate::matrix_view::{MatMut, check_same_shape};
use crate::sampling::fixed_word::FixedWordSampler;
use crate::sampling::gaussian::Gaussian;
use crate::sampling::keyed_stream::KeyedStream;
use crate::sampling::noise_float::NoiseFloat;
use crate::scratch::check_scratch;

#[cfg(feature = "alloc")]
use crate::matrix_view::MatRef;
#[cfg(feature = "alloc")]
use crate::sampling::covariance_factor::{
    COL_COV, ROW_COV, check_square, check_symmetric, factor_covariance, scalar_identity,
};
#[cfg(feature = "alloc")]
use alloc::vec::Vec;

/// Normals drawn per chunk on the i.i.d. path (stack buffer; even, so no Box–Muller pair is
/// split between chunks).
const CHUNK: usize = 128;

/// Scratch (in `f64` elements) that [`MatrixGaussian::sample_into`] and
/// [`MatrixGaussian::sample_keyed_into`] need for an `rows × cols` output: `2 · rows · cols`
/// (the i.i.d. path needs none; [`MatrixGaussian::scratch_len`] is exact). Saturates at
/// `usize::MAX`, which no buffer reaches, so an overflowing shape fails the scratch check.
///
/// ```
/// use dpattn_core::sampling::matrix_gaussian_scratch_len;
/// assert_eq!(matrix_gaussian_scratch_len(3, 4), 24);
/// assert_eq!(matrix_gaussian_scratch_len(usize::MAX, 2), usize::MAX);
/// ```
pub fn matrix_gaussian_scratch_len(rows: usize, cols: usize) -> usize {
    rows.saturating_mul(cols).saturating_mul(2)
}

/// The matrix normal distribution `MN(0, Σ, Ψ)` of `rows × cols` matrices, with its factors
/// computed once (see the module docs for the guarantee and the error rules).
///
/// ```
/// use dpattn_core::sampling::{KeyedStream, MatrixGaussian, NoiseKey};
/// use dpattn_core::{MatMut, MatRef};
///
/// // Row covariance with correlation 0.5, column covariance diag(1, 4).
/// let sigma = [1.0, 0.5, 0.5, 1.0];
/// let psi = [1.0, 0.0, 0.0, 4.0];
/// let mg = MatrixGaussian::new(
///     MatRef::from_row_major(&sigma, 2, 2)?,
///     MatRef::from_row_major(&psi, 2, 2)?,
/// )?;
/// let stream = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let mut z = [0.0f64; 4];
/// let mut scratch = vec![0.0; mg.scratch_len()];
/// mg.sample_keyed_into(MatMut::from_row_major(&mut z, 2, 2)?, &stream, 0, &mut scratch)?;
/// // Reproducible: the same (stream, first) gives the same matrix.
/// let mut again = [0.0f64; 4];
/// mg.sample_keyed_into(MatMut::from_row_major(&mut again, 2, 2)?, &stream, 0, &mut scratch)?;
/// assert_eq!(z, again);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixGaussian {
    rows: usize,
    cols: usize,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// `Z = sigma · N`.
    Iid { sigma: f64 },
    /// `Z = A · N · Bᵀ`.
    #[cfg(feature = "alloc")]
    Dense { a: Factor, b: Factor },
}

/// A square factor, row-major; `lower` when every entry above the diagonal is zero (the
/// products then skip them).
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, PartialEq)]
struct Factor {
    data: Vec<f64>,
    dim: usize,
    lower: bool,
}

#[cfg(feature = "alloc")]
impl Factor {
    fn new(data: Vec<f64>, dim: usize) -> Self {
        let lower =
            (0..dim).all(|i| data[i * dim + i + 1..(i + 1) * dim].iter().all(|&x| x == 0.0));
        Self { data, dim, lower }
    }

    /// The entries of row `i` that can be non-zero: `[0, i]` when lower triangular.
    #[inline]
    fn row(&self, i: usize) -> &[f64] {
        let len = if self.lower { i + 1 } else { self.dim };
        &self.data[i * self.dim..i * self.dim + len]
    }

    fn view(&self) -> Option<MatRef<'_, f64>> {
        MatRef::from_row_major(&self.data, self.dim, self.dim).ok()
    }
}

impl MatrixGaussian {
    /// I.i.d. noise: every entry `N(0, σ²)` (`Σ = σ²·I`, `Ψ = I`). Needs no allocation and no
    /// scratch.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `σ ∈ (0, ∞)`; [`Error::SizeOverflow`] if `rows · cols`
    /// overflows.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::MatMut;
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    ///
    /// let mg = MatrixGaussian::iid(2, 3, 0.5)?;
    /// assert_eq!((mg.scratch_len(), mg.iid_sigma()), (0, Some(0.5)));
    /// let mut z = [0.0f32; 6];
    /// let mut rng = ChaCha20Rng::from_seed([2; 32]);
    /// mg.sample_into(MatMut::from_row_major(&mut z, 2, 3)?, &mut rng, &mut [])?;
    /// assert!(z.iter().all(|x| x.is_finite() && *x != 0.0));
    /// assert!(MatrixGaussian::iid(2, 3, 0.0).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn iid(rows: usize, cols: usize, sigma: f64) -> Result<Self> {
        Gaussian::new(sigma)?;
        mul_size(rows, cols, "matrix Gaussian element count")?;
        Ok(Self { rows, cols, kind: Kind::Iid { sigma } })
    }

    /// `MN(0, Σ, Ψ)` for `row_cov = Σ` (`n × n`) and `col_cov = Ψ` (`m × m`): output
    /// `n × m`. Factors as described in the module docs (Cholesky, else eigendecomposition
    /// for a positive semi-definite covariance); scalar identities take the i.i.d. path.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`arg` `"row_cov"` / `"col_cov"`, axis `"cols"`) for a non-square
    /// covariance; [`Error::NonFinite`] for a NaN or infinity; [`Error::OutOfRange`] named
    /// `"… asymmetry …"` when the relative asymmetry exceeds
    /// [`SYMMETRY_TOL`](crate::sampling::SYMMETRY_TOL), or
    /// `"… smallest eigenvalue / max|eigenvalue|"` when that ratio is below
    /// `−`[`PSD_TOL`](crate::sampling::PSD_TOL) (not positive semi-definite);
    /// [`Error::SizeOverflow`] if `2 · n · m` overflows; [`Error::AllocationFailed`] if the factors
    /// cannot be stored.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::{Error, MatRef};
    ///
    /// let psi = [2.0];
    /// let psi = MatRef::from_row_major(&psi, 1, 1)?;
    /// // Singular (rank 1) but positive semi-definite: accepted.
    /// let ones = [1.0; 4];
    /// assert!(MatrixGaussian::new(MatRef::from_row_major(&ones, 2, 2)?, psi).is_ok());
    /// // Indefinite (eigenvalues 3 and -1): rejected.
    /// let bad = [1.0, 2.0, 2.0, 1.0];
    /// let e = MatrixGaussian::new(MatRef::from_row_major(&bad, 2, 2)?, psi).unwrap_err();
    /// assert!(matches!(e, Error::OutOfRange { value, .. } if value < -0.3));
    /// // Not symmetric: rejected.
    /// let skew = [1.0, 0.5, 0.0, 1.0];
    /// assert!(MatrixGaussian::new(MatRef::from_row_major(&skew, 2, 2)?, psi).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn new(row_cov: MatRef<'_, f64>, col_cov: MatRef<'_, f64>) -> Result<Self> {
        check_square(row_cov, ROW_COV.arg)?;
        check_square(col_cov, COL_COV.arg)?;
        row_cov.check_finite_public(ROW_COV.arg)?;
        col_cov.check_finite_public(COL_COV.arg)?;
        let (rows, cols) = (row_cov.rows(), col_cov.rows());
        check_dense_size(rows, cols)?;
        check_symmetric(row_cov, &ROW_COV)?;
        check_symmetric(col_cov, &COL_COV)?;
        if let (Some(s), Some(t)) = (scalar_identity(row_cov), scalar_identity(col_cov))
            && s > 0.0
            && t > 0.0
        {
            let sigma = libm::sqrt(s) * libm::sqrt(t);
            if sigma > 0.0 && sigma.is_finite() {
                return Ok(Self { rows, cols, kind: Kind::Iid { sigma } });
            }
        }
        let a = Factor::new(factor_covariance(row_cov, &ROW_COV)?, rows);
        let b = Factor::new(factor_covariance(col_cov, &COL_COV)?, cols);
        Ok(Self { rows, cols, kind: Kind::Dense { a, b } })
    }

    /// `MN(0, A·Aᵀ, B·Bᵀ)` from given factors `A` (`n × n`) and `B` (`m × m`), used as they
    /// are: `Z = A · N · Bᵀ`, with the matrix products computed even for identity factors.
    /// Factors need not be invertible or triangular (any factors `U` and `V` are accepted:
    /// `docs/PAPERS.md` §3.6, "Choosing the factors").
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`arg` `"row_factor"` / `"col_factor"`) for a non-square
    /// factor; [`Error::NonFinite`] for a NaN or infinity; [`Error::SizeOverflow`] if
    /// `2 · n · m` overflows; [`Error::AllocationFailed`].
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::MatRef;
    /// let a = [2.0, 0.0, 1.0, 1.0];
    /// let b = [3.0];
    /// let mg = MatrixGaussian::from_factors(
    ///     MatRef::from_row_major(&a, 2, 2)?,
    ///     MatRef::from_row_major(&b, 1, 1)?,
    /// )?;
    /// assert_eq!((mg.rows(), mg.cols(), mg.scratch_len()), (2, 1, 4));
    /// assert_eq!(mg.row_factor().unwrap().row(1), &[1.0, 1.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn from_factors(row_factor: MatRef<'_, f64>, col_factor: MatRef<'_, f64>) -> Result<Self> {
        check_square(row_factor, "row_factor")?;
        check_square(col_factor, "col_factor")?;
        row_factor.check_finite_public("row_factor")?;
        col_factor.check_finite_public("col_factor")?;
        let (rows, cols) = (row_factor.rows(), col_factor.rows());
        check_dense_size(rows, cols)?;
        let copy = |f: MatRef<'_, f64>| -> Result<Factor> {
            let n = f.rows();
            let mut data = crate::scratch::try_filled(n * n, 0.0f64, "matrix Gaussian factor")?;
            for i in 0..n {
                data[i * n..(i + 1) * n].copy_from_slice(f.row(i));
            }
            Ok(Factor::new(data, n))
        };
        Ok(Self { rows, cols, kind: Kind::Dense { a: copy(row_factor)?, b: copy(col_factor)? } })
    }

    /// Rows `n` of a sample.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// assert_eq!(MatrixGaussian::iid(4, 5, 1.0)?.rows(), 4);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns `m` of a sample.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// assert_eq!(MatrixGaussian::iid(4, 5, 1.0)?.cols(), 5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `Some(σ)` when samples are drawn on the i.i.d. path `Z = σ · N`.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::MatRef;
    /// let four = [4.0];
    /// let four = MatRef::from_row_major(&four, 1, 1)?;
    /// // Σ = 4, Ψ = 4: i.i.d. with σ = 2 · 2.
    /// assert_eq!(MatrixGaussian::new(four, four)?.iid_sigma(), Some(4.0));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn iid_sigma(&self) -> Option<f64> {
        match self.kind {
            Kind::Iid { sigma } => Some(sigma),
            #[cfg(feature = "alloc")]
            Kind::Dense { .. } => None,
        }
    }

    /// The row factor `A` (`A·Aᵀ = Σ`), or `None` on the i.i.d. path.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::MatRef;
    /// let sigma = [4.0, 2.0, 2.0, 5.0];
    /// let psi = [1.0];
    /// let mg = MatrixGaussian::new(
    ///     MatRef::from_row_major(&sigma, 2, 2)?,
    ///     MatRef::from_row_major(&psi, 1, 1)?,
    /// )?;
    /// let a = mg.row_factor().unwrap(); // Cholesky: [[2, 0], [1, 2]]
    /// assert_eq!((a.row(0), a.row(1)), (&[2.0, 0.0][..], &[1.0, 2.0][..]));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn row_factor(&self) -> Option<MatRef<'_, f64>> {
        match &self.kind {
            Kind::Iid { .. } => None,
            Kind::Dense { a, .. } => a.view(),
        }
    }

    /// The column factor `B` (`B·Bᵀ = Ψ`), or `None` on the i.i.d. path.
    ///
    /// ```
    /// use dpattn_core::sampling::MatrixGaussian;
    /// use dpattn_core::MatRef;
    /// let sigma = [1.0, 0.0, 0.0, 2.0];
    /// let psi = [9.0];
    /// let mg = MatrixGaussian::new(
    ///     MatRef::from_row_major(&sigma, 2, 2)?,
    ///     MatRef::from_row_major(&psi, 1, 1)?,
    /// )?;
    /// assert_eq!(mg.col_factor().unwrap().row(0), &[3.0]);
    /// assert!(MatrixGaussian::iid(2, 2, 1.0)?.col_factor().is_none());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    #[cfg(feature = "alloc")]
    pub fn col_factor(&self) -> Option<MatRef<'_, f64>> {
        match &self.kind {
            Kind::Iid { .. } => None,
            Kind::Dense { b, .. } => b.view(),
        }
    }

    /// Scratch (in `f64` elements) this sampler needs: 0 on the i.i.d. path, else
    /// `2 · rows · cols` (= [`matrix_gaussian_scratch_len`]).
    ///
    /// ```
    /// use dpattn_core::sampling::{MatrixGaussian, matrix_gaussian_scratch_len};
    /// use dpattn_core::MatRef;
    /// assert_eq!(MatrixGaussian::iid(3, 4, 1.0)?.scratch_len(), 0);
    /// let a = [1.0, 0.0, 1.0, 1.0];
    /// let b = [1.0];
    /// let mg = MatrixGaussian::from_factors(
    ///     MatRef::from_row_major(&a, 2, 2)?,
    ///     MatRef::from_row_major(&b, 1, 1)?,
    /// )?;
    /// assert_eq!(mg.scratch_len(), matrix_gaussian_scratch_len(2, 1));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn scratch_len(&self) -> usize {
        match self.kind {
            Kind::Iid { .. } => 0,
            #[cfg(feature = "alloc")]
            Kind::Dense { .. } => matrix_gaussian_scratch_len(self.rows, self.cols),
        }
    }

    /// Draws `Z` into `out` (`rows × cols`, any row stride) with `N` from `rng`, in
    /// row-major order (see the module docs). `f32` output is the `f64` result rounded.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`arg` `"out"`) for a wrong output shape;
    /// [`Error::ScratchTooSmall`] if `scratch.len() < self.scratch_len()`. On error nothing
    /// is drawn and `out` is not written.
    ///
    /// ```
    /// use dpattn_core::sampling::{MatrixGaussian, matrix_gaussian_scratch_len};
    /// use dpattn_core::{MatMut, MatRef};
    /// use rand_chacha::ChaCha20Rng;
    /// use rand_core::SeedableRng;
    ///
    /// let sigma = [4.0, 2.0, 2.0, 2.0];
    /// let psi = [1.0, 0.0, 0.0, 1.0];
    /// let mg = MatrixGaussian::new(
    ///     MatRef::from_row_major(&sigma, 2, 2)?,
    ///     MatRef::from_row_major(&psi, 2, 2)?,
    /// )?;
    /// let mut rng = ChaCha20Rng::from_seed([5; 32]);
    /// let mut buf = [0.0f64; 6]; // a 2x2 output inside a 2x3 buffer
    /// let mut scratch = vec![0.0; matrix_gaussian_scratch_len(2, 2)];
    /// mg.sample_into(MatMut::new(&mut buf, 2, 2, 3)?, &mut rng, &mut scratch)?;
    /// assert_eq!(buf[2], 0.0); // padding untouched
    /// assert!(mg.sample_into(MatMut::new(&mut buf, 2, 3, 3)?, &mut rng, &mut scratch).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sample_into<T: NoiseFloat, R: CryptoRng + ?Sized>(
        &self,
        out: MatMut<'_, T>,
        rng: &mut R,
        scratch: &mut [f64],
    ) -> Result<()> {
        self.sample_with(out, scratch, |buf, _| {
            Gaussian::STANDARD.fill::<f64, R>(rng, buf);
            Ok(())
        })
    }

    /// Draws `Z` into `out` with `N`'s element `(i, j)` equal to element
    /// `first + i·cols + j` of the standard normal `f64` draw of `stream`
    /// ([`Gaussian::STANDARD`]`.`[`fill_keyed`](FixedWordSampler::fill_keyed)). The same
    /// `(stream, first)` always gives the same `Z`; draws over disjoint element ranges are
    /// independent.
    ///
    /// # Errors
    /// As [`sample_into`](Self::sample_into), plus [`Error::SizeOverflow`] if
    /// `first + rows · cols` overflows `u64`.
    ///
    /// ```
    /// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, MatrixGaussian, NoiseKey};
    /// use dpattn_core::MatMut;
    ///
    /// let s = KeyedStream::new(&NoiseKey::generate()?, 9);
    /// let mg = MatrixGaussian::iid(2, 2, 3.0)?;
    /// let mut z = [0.0f64; 4];
    /// mg.sample_keyed_into(MatMut::from_row_major(&mut z, 2, 2)?, &s, 100, &mut [])?;
    /// // Element (1, 0) is 3 * element 100 + 2 of the standard normal draw.
    /// assert_eq!(z[2], 3.0 * Gaussian::STANDARD.sample_at::<f64>(&s, 102)?);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sample_keyed_into<T: NoiseFloat>(
        &self,
        out: MatMut<'_, T>,
        stream: &KeyedStream,
        first: u64,
        scratch: &mut [f64],
    ) -> Result<()> {
        let total = self.rows as u64 * self.cols as u64;
        first
            .checked_add(total)
            .ok_or(Error::SizeOverflow { what: "first element + rows * cols" })?;
        self.sample_with(out, scratch, |buf, offset| {
            Gaussian::STANDARD.fill_keyed::<f64>(stream, first + offset as u64, buf)
        })
    }

    /// The shared body: `draw(buf, offset)` fills `buf` with elements
    /// `offset .. offset + buf.len()` of `N` (row-major).
    fn sample_with<T: NoiseFloat>(
        &self,
        mut out: MatMut<'_, T>,
        scratch: &mut [f64],
        mut draw: impl FnMut(&mut [f64], usize) -> Result<()>,
    ) -> Result<()> {
        check_same_shape("out", out.rows(), out.cols(), self.rows, self.cols)?;
        check_scratch(scratch.len(), self.scratch_len())?;
        let (n, m) = (self.rows, self.cols);
        if n == 0 || m == 0 {
            return Ok(());
        }
        match &self.kind {
            Kind::Iid { sigma } => {
                let total = n * m;
                let mut buf = [0.0f64; CHUNK];
                let (mut i, mut j, mut offset) = (0usize, 0usize, 0usize);
                while offset < total {
                    let len = CHUNK.min(total - offset);
                    draw(&mut buf[..len], offset)?;
                    let mut chunk = &buf[..len];
                    while !chunk.is_empty() {
                        let take = (m - j).min(chunk.len());
                        let row = &mut out.row_mut(i)[j..j + take];
                        for (o, &z) in row.iter_mut().zip(&chunk[..take]) {
                            *o = T::from_f64(z * sigma);
                        }
                        chunk = &chunk[take..];
                        j += take;
                        if j == m {
                            j = 0;
                            i += 1;
                        }
                    }
                    offset += len;
                }
                Ok(())
            }
            #[cfg(feature = "alloc")]
            Kind::Dense { a, b } => {
                let nm = n * m;
                let (noise, rest) = scratch.split_at_mut(nm);
                let tmp = &mut rest[..nm];
                draw(noise, 0)?;
                // tmp = N · Bᵀ: tmp[i][j] = Σ_k N[i][k] · B[j][k].
                for (nrow, trow) in noise.chunks_exact(m).zip(tmp.chunks_exact_mut(m)) {
                    for (j, t) in trow.iter_mut().enumerate() {
                        let brow = b.row(j);
                        *t = nrow[..brow.len()]
                            .iter()
                            .zip(brow)
                            .fold(0.0, |acc, (x, y)| acc + x * y);
                    }
                }
                // Z = A · tmp, row by row into the noise buffer (N is no longer needed).
                for i in 0..n {
                    let zrow = &mut noise[i * m..(i + 1) * m];
                    zrow.fill(0.0);
                    for (k, &aik) in a.row(i).iter().enumerate() {
                        for (z, &t) in zrow.iter_mut().zip(&tmp[k * m..(k + 1) * m]) {
                            *z += aik * t;
                        }
                    }
                    for (o, &z) in out.row_mut(i).iter_mut().zip(zrow.iter()) {
                        *o = T::from_f64(z);
                    }
                }
                Ok(())
            }
        }
    }
}

/// `2 · rows · cols` (the dense scratch) must fit in `usize`.
#[cfg(feature = "alloc")]
fn check_dense_size(rows: usize, cols: usize) -> Result<()> {
    let nm = mul_size(rows, cols, "matrix Gaussian element count")?;
    mul_size(nm, 2, "matrix Gaussian scratch length")?;
    Ok(())
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use crate::sampling::NoiseKey;
    use alloc::vec;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn mat(data: &[f64], n: usize) -> MatRef<'_, f64> {
        MatRef::from_row_major(data, n, n).unwrap()
    }

    #[test]
    fn scalar_identities_take_the_iid_path() {
        let s = [4.0, 0.0, 0.0, 4.0];
        let t = [9.0];
        let mg = MatrixGaussian::new(mat(&s, 2), mat(&t, 1)).unwrap();
        assert_eq!(mg.iid_sigma(), Some(6.0));
        assert_eq!(mg.scratch_len(), 0);
        // A diagonal that is not scalar is dense.
        let d = [4.0, 0.0, 0.0, 1.0];
        assert_eq!(MatrixGaussian::new(mat(&d, 2), mat(&t, 1)).unwrap().iid_sigma(), None);
    }

    #[test]
    fn output_is_the_product_of_the_factors_and_the_keyed_noise() {
        let a = [1.0, 2.0, -1.0, 0.5];
        let b = [1.0, 0.0, 0.0, 3.0, 1.0, 0.0, -2.0, 0.25, 2.0];
        let mg = MatrixGaussian::from_factors(mat(&a, 2), mat(&b, 3)).unwrap();
        let s = KeyedStream::new(&NoiseKey::for_replay([6; 32]), 1);
        let first = 7;
        let mut z = [0.0f64; 6];
        let mut scratch = vec![0.0; mg.scratch_len()];
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut z, 2, 3).unwrap(),
            &s,
            first,
            &mut scratch,
        )
        .unwrap();
        let nz = |i: usize, j: usize| {
            Gaussian::STANDARD.sample_at::<f64>(&s, first + (i * 3 + j) as u64).unwrap()
        };
        for i in 0..2 {
            for j in 0..3 {
                let mut want = 0.0;
                for k in 0..2 {
                    for l in 0..3 {
                        want += a[i * 2 + k] * nz(k, l) * b[j * 3 + l];
                    }
                }
                assert!((z[i * 3 + j] - want).abs() < 1e-12 * (1.0 + want.abs()));
            }
        }
        // f32 output is the f64 output rounded.
        let mut z32 = [0.0f32; 6];
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut z32, 2, 3).unwrap(),
            &s,
            first,
            &mut scratch,
        )
        .unwrap();
        assert!(z.iter().zip(&z32).all(|(&x, &y)| x as f32 == y));
    }

    #[test]
    fn rng_draw_equals_keyed_draw_from_element_zero() {
        let c = [2.0, 0.3, 0.3, 1.0];
        let mg = MatrixGaussian::new(mat(&c, 2), mat(&[1.0, 0.2, 0.2, 0.5], 2)).unwrap();
        let iid = MatrixGaussian::iid(17, 19, 0.7).unwrap(); // odd n·m spans several chunks
        let key = [8; 32];
        let s = KeyedStream::new(&NoiseKey::for_replay(key), 4);
        for g in [&mg, &iid] {
            let (n, m) = (g.rows(), g.cols());
            let mut scratch = vec![0.0; g.scratch_len()];
            let mut x = vec![0.0f64; n * m];
            let mut y = vec![0.0f64; n * m];
            let mut rng = ChaCha20Rng::from_seed(key);
            rng.set_stream(4);
            g.sample_into(MatMut::from_row_major(&mut x, n, m).unwrap(), &mut rng, &mut scratch)
                .unwrap();
            g.sample_keyed_into(MatMut::from_row_major(&mut y, n, m).unwrap(), &s, 0, &mut scratch)
                .unwrap();
            assert_eq!(x, y);
        }
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        let ok = [1.0];
        assert_eq!(
            MatrixGaussian::new(MatRef::from_row_major(&[1.0, 0.0], 1, 2).unwrap(), mat(&ok, 1)),
            Err(Error::ShapeMismatch { arg: "row_cov", axis: "cols", expected: 1, got: 2 })
        );
        assert_eq!(
            MatrixGaussian::new(mat(&ok, 1), mat(&[1.0, f64::NAN, f64::NAN, 1.0], 2)),
            Err(Error::NonFinite { arg: "col_cov", index: 1 })
        );
        assert!(matches!(
            MatrixGaussian::from_factors(mat(&[f64::INFINITY], 1), mat(&ok, 1)),
            Err(Error::NonFinite { arg: "row_factor", index: 0 })
        ));
        let mg = MatrixGaussian::new(mat(&[1.0, 0.5, 0.5, 1.0], 2), mat(&ok, 1)).unwrap();
        let mut out = [0.0f64; 2];
        let mut short = [0.0; 3];
        let mut rng = ChaCha20Rng::from_seed([0; 32]);
        assert_eq!(
            mg.sample_into(MatMut::from_row_major(&mut out, 2, 1).unwrap(), &mut rng, &mut short),
            Err(Error::ScratchTooSmall { needed: 4, got: 3 })
        );
        assert_eq!(
            mg.sample_into(
                MatMut::from_row_major(&mut out, 1, 2).unwrap(),
                &mut rng,
                &mut [0.0; 4]
            ),
            Err(Error::ShapeMismatch { arg: "out", axis: "rows", expected: 2, got: 1 })
        );
        let s = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
        assert!(matches!(
            mg.sample_keyed_into(
                MatMut::from_row_major(&mut out, 2, 1).unwrap(),
                &s,
                u64::MAX - 1,
                &mut [0.0; 4]
            ),
            Err(Error::SizeOverflow { .. })
        ));
        assert!(matches!(MatrixGaussian::iid(usize::MAX, 2, 1.0), Err(Error::SizeOverflow { .. })));
        assert!(MatrixGaussian::iid(2, 2, f64::NAN).is_err());
    }

    #[test]
    fn empty_shapes_are_valid() {
        let mg = MatrixGaussian::new(mat(&[], 0), mat(&[1.0], 1)).unwrap();
        assert_eq!((mg.rows(), mg.cols(), mg.scratch_len()), (0, 1, 0));
        let mut rng = ChaCha20Rng::from_seed([0; 32]);
        mg.sample_into::<f64, _>(MatMut::from_row_major(&mut [], 0, 1).unwrap(), &mut rng, &mut [])
            .unwrap();
    }
}
