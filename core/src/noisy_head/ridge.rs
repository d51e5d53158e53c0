//! The non-private ridge estimate `Γ*` of eq. (2.7), solved with nalgebra (`docs/PAPERS.md`
//! §4.3, §4.8 and P4-21). Feature `alloc`.
//!
//! **Guarantee.** None: this is the experiments' non-private reference, computed on raw
//! prompts. `vec(Γ*) = (λN·I + Σ_k vec(Z_k)vec(Z_k)ᵀ)⁻¹ Σ_k y_k vec(Z_k)`. Note that
//! NoisyHead's noiseless descent converges to this with `2λ` (`docs/PAPERS.md` P4-3): pass
//! `2λ` to compare with the descent's limit.
//!
//! [`RidgeSolver::Cholesky`] solves the normal equations; their condition number grows
//! like `α²/(Nλ)` for a prompt with labels of size `α`, and in `f64` that is what produced
//! the paper's rising ridge curve in Fig. 3. [`RidgeSolver::Qr`] factors
//! `[Z; √(λN)·I]` instead and stays exact there.

use alloc::vec::Vec;

use nalgebra::{DMatrix, DVector};

use super::features::Features;
use super::train::gram_build;
use crate::error::{Error, Result, mul_size, nonneg_finite};
use crate::scratch::try_filled;

/// How [`ridge`] solves eq. (2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RidgeSolver {
    /// Cholesky of `λN·I + ZᵀZ` (`D⁴` memory, `≈ND⁴ + D⁶/3` flops). For honest data; it
    /// refuses numerically singular systems, such as the paper's robustness attack with
    /// labels of size `α ≳ 1e7` (condition number `∝ α²/(Nλ)`): use [`RidgeSolver::Qr`].
    Cholesky,
    /// Householder QR of the `(N + D²) × D²` matrix `[Z; √(λN)·I]`. For adversarial data.
    Qr,
}

fn not_definite(lambda: f64) -> Error {
    Error::Infeasible {
        condition: "ridge (2.7): λN·I + Σ vec(Z)vec(Z)ᵀ positive definite",
        lhs: lambda,
        rhs: 0.0,
    }
}

/// [`not_definite`] unless every pivot exceeds `D²·2⁻⁵²` times the largest (the usual
/// numerical-rank tolerance).
fn rank_check(pivots: &[f64], d2: usize, lambda: f64) -> Result<()> {
    let max = pivots.iter().fold(0.0f64, |m, p| m.max(*p));
    let tol = d2 as f64 * f64::EPSILON * max;
    if !(max > 0.0 && max.is_finite()) || pivots.iter().any(|p| *p <= tol) {
        return Err(not_definite(lambda));
    }
    Ok(())
}

/// `Γ*` of eq. (2.7) (`D × D`, row-major) for the features `f` (raw features for the
/// paper's baseline) and `λ ≥ 0`.
///
/// ```
/// use dpattn_core::noisy_head::{Features, RidgeSolver, ridge};
/// // N = 2, D = 1: z = (1, 2), y = (1, 3), λ = 0.5 → γ* = (1 + 6)/(0.5·2 + 1 + 4) = 7/6.
/// let f = Features::new(2, 1, &[1.0, 1.0], &[1.0, 2.0], &[1.0, 3.0])?;
/// for solver in [RidgeSolver::Cholesky, RidgeSolver::Qr] {
///     let g = ridge(&f, 0.5, solver)?;
///     assert!((g[0] - 7.0 / 6.0).abs() < 1e-14);
/// }
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `λ < 0` or not finite; [`Error::Infeasible`] when the system
/// is numerically singular (a pivot below `D²·2⁻⁵²` times the largest; with `λ = 0` and
/// `N < D²`, for example) or the features are not finite; [`Error::AllocationFailed`],
/// [`Error::SizeOverflow`].
pub fn ridge(f: &Features<'_>, lambda: f64, solver: RidgeSolver) -> Result<Vec<f64>> {
    let lambda = nonneg_finite("lambda", lambda)?;
    let d = f.d;
    let d2 = mul_size(d, d, "D²")?;
    let nf = f.n as f64;
    let g = match solver {
        RidgeSolver::Cholesky => {
            let mut h = try_filled(mul_size(d2, d2, "D⁴")?, 0.0, "ridge normal matrix")?;
            let mut b = try_filled(d2, 0.0, "ridge right-hand side")?;
            gram_build(f, &mut h, &mut b)?;
            // gram_build divides by N: (λ·I + H̃) g = b̃ is (2.7) divided by N.
            let mut a = DMatrix::from_vec(d2, d2, h);
            for i in 0..d2 {
                a[(i, i)] += lambda;
            }
            let chol = a.cholesky().ok_or_else(|| not_definite(lambda))?;
            let l = chol.l_dirty();
            // A pivot below the rank tolerance means the system is numerically singular.
            let pivots: Vec<f64> = (0..d2).map(|i| l[(i, i)] * l[(i, i)]).collect();
            rank_check(&pivots, d2, lambda)?;
            chol.solve(&DVector::from_vec(b))
        }
        RidgeSolver::Qr => {
            let rows = f.n.checked_add(d2).ok_or(Error::SizeOverflow { what: "N + D²" })?;
            let mut z = try_filled(mul_size(rows, d2, "(N + D²)·D²")?, 0.0, "ridge QR matrix")?;
            let mut y = try_filled(rows, 0.0, "ridge QR right-hand side")?;
            let root = libm::sqrt(lambda * nf);
            // Column-major (nalgebra's order): entry (r, p) at p·rows + r.
            for k in 0..f.n {
                let (u, v, t) = f.get(k);
                for p in 0..d2 {
                    z[p * rows + k] = u[p / d] * v[p % d];
                }
                y[k] = t;
            }
            for p in 0..d2 {
                z[p * rows + f.n + p] = root;
            }
            let qr = DMatrix::from_vec(rows, d2, z).qr();
            let mut qty = DVector::from_vec(y);
            qr.q_tr_mul(&mut qty);
            let r = qr.r();
            let rhs = qty.rows(0, d2).into_owned();
            let pivots: Vec<f64> = (0..d2).map(|i| r[(i, i)].abs()).collect();
            rank_check(&pivots, d2, lambda)?;
            r.solve_upper_triangular(&rhs).ok_or_else(|| not_definite(lambda))?
        }
    };
    if g.iter().any(|x| !x.is_finite()) {
        return Err(not_definite(lambda));
    }
    let mut out = try_filled(d2, 0.0, "ridge solution")?;
    out.copy_from_slice(g.as_slice());
    Ok(out)
}
