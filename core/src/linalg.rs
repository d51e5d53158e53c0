//! Small dense `f64` kernels, allocation-free on row-major `n × n` slices, shared by the
//! Gaussian-sampling mechanism and the matrix Gaussian sampler: the Gram matrix `XXᵀ` (with
//! optional column clipping and a ridge), Cholesky in place, the lower-triangular product `L·T`,
//! the symmetric product `Y·Yᵀ`, and the eigenvalues of a symmetric matrix (cyclic Jacobi).
//!
//! **Guarantee.** Each routine is the textbook algorithm in `f64` with no data-dependent
//! early exit except Cholesky's failing pivot and Jacobi's convergence test; no privacy by
//! itself. See `docs/PAPERS.md` §0.4 (the square root of `A`, TRMM, SYRK; `λ_min` for the
//! domain check).

use crate::element::Element;
use crate::matrix_view::{MatMut, MatRef};

/// The Gram matrix of the clipped columns plus a ridge:
/// `a[i·n + j] = Σ_c (f_c·x_ic)(f_c·x_jc) + ridge·[i = j]` with the clip factor
/// `f_c = min(1, α/‖x_c‖)` when `clip = Some(α)` and 1 otherwise. A column holding a NaN or
/// an infinity is the zero column (`f_c = 0` and its entries read as 0, [`finite_or_zero`]).
/// `factors` (length `d`) receives `f_c`. Returns the largest column norm *before* clipping
/// (`+∞` if a column is not finite) and the number of columns clipped or zeroed.
pub(crate) fn gram<T: Element>(
    x: MatRef<'_, T>,
    clip: Option<f64>,
    ridge: f64,
    factors: &mut [f64],
    a: &mut [f64],
) -> (f64, usize) {
    let (n, d) = (x.rows(), x.cols());
    factors[..d].fill(0.0);
    for i in 0..n {
        for (w, v) in factors.iter_mut().zip(x.row(i)) {
            *w += v.to_f64() * v.to_f64();
        }
    }
    let (mut max_norm, mut clipped) = (0.0f64, 0usize);
    for (c, f) in factors[..d].iter_mut().enumerate() {
        // A sum of squares that overflows is recomputed scaled by the column's largest
        // entry, so the norm (and the clip factor, which must be continuous in the data
        // for clipping to preserve neighbours) is right for every finite column.
        let norm = if f.is_finite() { Some(libm::sqrt(*f)) } else { scaled_column_norm(&x, c) };
        *f = match (norm, clip) {
            (None, _) => {
                max_norm = f64::INFINITY;
                clipped += 1;
                0.0
            }
            (Some(norm), Some(alpha)) if norm > alpha => {
                max_norm = max_norm.max(norm);
                clipped += 1;
                alpha / norm
            }
            (Some(norm), _) => {
                max_norm = max_norm.max(norm);
                1.0
            }
        };
    }
    for i in 0..n {
        let xi = x.row(i);
        for j in 0..=i {
            let xj = x.row(j);
            let mut s = [0.0f64; 4];
            let mut c = 0;
            while c + 4 <= d {
                for (l, acc) in s.iter_mut().enumerate() {
                    let f = factors[c + l];
                    *acc += (f * finite_or_zero(xi[c + l])) * (f * finite_or_zero(xj[c + l]));
                }
                c += 4;
            }
            for l in c..d {
                let f = factors[l];
                s[0] += (f * finite_or_zero(xi[l])) * (f * finite_or_zero(xj[l]));
            }
            let v = (s[0] + s[1]) + (s[2] + s[3]);
            a[i * n + j] = v;
            a[j * n + i] = v;
        }
        a[i * n + i] += ridge;
    }
    (max_norm, clipped)
}

/// `‖x[:, c]‖₂` without overflow for finite entries: `m·√(Σ(x_ic/m)²)`, `m = max_i |x_ic|`;
/// `None` when an entry is NaN or infinite.
fn scaled_column_norm<T: Element>(x: &MatRef<'_, T>, c: usize) -> Option<f64> {
    let entry = |i: usize| x.row(i)[c].to_f64();
    if (0..x.rows()).any(|i| !entry(i).is_finite()) {
        return None;
    }
    let m = (0..x.rows()).map(|i| entry(i).abs()).fold(0.0, f64::max);
    if m == 0.0 {
        return Some(0.0);
    }
    Some(m * libm::sqrt((0..x.rows()).map(|i| (entry(i) / m) * (entry(i) / m)).sum::<f64>()))
}

/// `v` as an `f64`, or 0 when it is NaN or infinite: how the clip-and-ridge paths read the
/// entries of a column they zero (a factor of 0 alone would leave `0 · ∞ = NaN`).
#[inline]
pub(crate) fn finite_or_zero<T: Element>(v: T) -> f64 {
    let v = v.to_f64();
    if v.is_finite() { v } else { 0.0 }
}

/// Cholesky `a = L·Lᵀ` in place: the lower triangle of `a` becomes `L`, the strict upper
/// triangle is zeroed. On failure returns the first pivot index and its (non-positive or
/// non-finite) value; `a` is then partly overwritten.
pub(crate) fn cholesky_in_place(a: &mut [f64], n: usize) -> Result<(), (usize, f64)> {
    for j in 0..n {
        let mut p = a[j * n + j];
        for l in 0..j {
            p -= a[j * n + l] * a[j * n + l];
        }
        if !(p > 0.0 && p.is_finite()) {
            return Err((j, p));
        }
        let ljj = libm::sqrt(p);
        a[j * n + j] = ljj;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for l in 0..j {
                s -= a[i * n + l] * a[j * n + l];
            }
            a[i * n + j] = s / ljj;
        }
        for i in 0..j {
            a[i * n + j] = 0.0;
        }
    }
    Ok(())
}

/// `t ← L·t` for lower-triangular `l` and `t` (`n × n`, row-major); `row` has length `n`.
/// Rows are produced from the last to the first, so row `i` only reads rows `≤ i` of `t`,
/// which are still unmodified.
pub(crate) fn lower_times_lower_in_place(l: &[f64], t: &mut [f64], n: usize, row: &mut [f64]) {
    for i in (0..n).rev() {
        for (j, r) in row[..=i].iter_mut().enumerate() {
            let mut s = 0.0;
            for m in j..=i {
                s += l[i * n + m] * t[m * n + j];
            }
            *r = s;
        }
        t[i * n..i * n + i + 1].copy_from_slice(&row[..=i]);
    }
}

/// `out = scale · Y·Yᵀ` for lower-triangular `y`, written as an exactly symmetric matrix.
pub(crate) fn lower_gram_into(y: &[f64], n: usize, scale_div: f64, mut out: MatMut<'_, f64>) {
    for i in 0..n {
        for j in 0..=i {
            let mut s = 0.0;
            for m in 0..=j {
                s += y[i * n + m] * y[j * n + m];
            }
            let v = s / scale_div;
            out.row_mut(i)[j] = v;
            out.row_mut(j)[i] = v;
        }
    }
}

/// `g ← L·g` for one vector (`L` lower-triangular), bottom row first.
pub(crate) fn lower_times_vector_in_place(l: &[f64], g: &mut [f64], n: usize) {
    for i in (0..n).rev() {
        let mut s = 0.0;
        for m in 0..=i {
            s += l[i * n + m] * g[m];
        }
        g[i] = s;
    }
}

/// The eigenvalues of the symmetric `a` (`n × n`, destroyed) by cyclic Jacobi rotations,
/// written to the diagonal of `a`; returns the smallest. Converges quadratically; the
/// sweep limit (60) is far above what `f64` needs (about 10 for `n ≤ 500`).
pub(crate) fn symmetric_min_eigenvalue(a: &mut [f64], n: usize) -> f64 {
    for _sweep in 0..60 {
        let mut off = 0.0;
        let mut diag = 0.0;
        for i in 0..n {
            diag += a[i * n + i] * a[i * n + i];
            for j in 0..i {
                off += a[i * n + j] * a[i * n + j];
            }
        }
        if off <= (f64::EPSILON * f64::EPSILON) * diag * 1e-2 || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (a[p * n + p], a[q * n + q]);
                let theta = (aqq - app) / (2.0 * apq);
                let t =
                    libm::copysign(1.0, theta) / (theta.abs() + libm::sqrt(theta * theta + 1.0));
                let c = 1.0 / libm::sqrt(t * t + 1.0);
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                a[p * n + q] = 0.0;
                a[q * n + p] = 0.0;
            }
        }
    }
    (0..n).map(|i| a[i * n + i]).fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_reproduces_a_known_factor_and_reports_the_failing_pivot() {
        // A = L·Lᵀ with L = [[2,0,0],[1,3,0],[-1,2,1]].
        let mut a = [4.0, 2.0, -2.0, 2.0, 10.0, 5.0, -2.0, 5.0, 6.0];
        cholesky_in_place(&mut a, 3).unwrap();
        assert_eq!(a, [2.0, 0.0, 0.0, 1.0, 3.0, 0.0, -1.0, 2.0, 1.0]);
        let mut s = [1.0, 2.0, 2.0, 1.0]; // eigenvalues 3, −1
        assert_eq!(cholesky_in_place(&mut s, 2), Err((1, -3.0)));
    }

    #[test]
    fn triangular_products_match_the_definition() {
        let l = [2.0, 0.0, 0.0, 1.0, 3.0, 0.0, -1.0, 2.0, 1.0];
        let mut t = [1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 6.0, 7.0, 8.0];
        let mut row = [0.0; 3];
        lower_times_lower_in_place(&l, &mut t, 3, &mut row);
        // L·T by hand.
        assert_eq!(t, [2.0, 0.0, 0.0, 13.0, 15.0, 0.0, 13.0, 17.0, 8.0]);
        let mut g = [1.0, 1.0, 1.0];
        lower_times_vector_in_place(&l, &mut g, 3);
        assert_eq!(g, [2.0, 4.0, 2.0]);
        let mut out = [0.0; 9];
        lower_gram_into(&l, 3, 1.0, MatMut::from_row_major(&mut out, 3, 3).unwrap());
        assert_eq!(out, [4.0, 2.0, -2.0, 2.0, 10.0, 5.0, -2.0, 5.0, 6.0]);
    }

    #[test]
    fn gram_clips_columns_and_adds_the_ridge() {
        // Columns (3,4) (norm 5) and (0,1) (norm 1); clip to 2.5 halves the first column.
        let x = [3.0f64, 0.0, 4.0, 1.0];
        let (mut w, mut a) = ([0.0; 2], [0.0; 4]);
        let m = gram(MatRef::from_row_major(&x, 2, 2).unwrap(), Some(2.5), 0.5, &mut w, &mut a);
        assert_eq!(m, (5.0, 1));
        assert_eq!(w, [0.5, 1.0]);
        assert_eq!(a, [0.25 * 9.0 + 0.5, 0.25 * 12.0, 0.25 * 12.0, 0.25 * 16.0 + 1.0 + 0.5]);
    }

    #[test]
    fn columns_whose_squared_norm_overflows_are_clipped_continuously() {
        let big = 1.3407807929942596e154; // big² overflows
        let x = [big, 1.0];
        let (mut f, mut a) = ([0.0; 2], [0.0; 1]);
        let (m, clipped) =
            gram(MatRef::from_row_major(&x, 1, 2).unwrap(), Some(1.0), 0.0, &mut f, &mut a);
        assert_eq!((m, clipped), (big, 1));
        assert_eq!(f, [1.0 / big, 1.0]);
        assert_eq!(a, [2.0]);
    }

    #[test]
    fn a_non_finite_column_is_the_zero_column() {
        // Columns (3, 4), (NaN, 1), (∞, 2), (0, −∞); clip to 2.5. The three non-finite
        // columns count as zeroed (factor 0) and the norm reports +∞; A is the Gram matrix
        // of the first column alone, halved: (1.5, 2)(1.5, 2)ᵀ.
        let x = [3.0f64, f64::NAN, f64::INFINITY, 0.0, 4.0, 1.0, 2.0, f64::NEG_INFINITY];
        let (mut f, mut a) = ([9.0; 4], [0.0; 4]);
        let m = gram(MatRef::from_row_major(&x, 2, 4).unwrap(), Some(2.5), 0.0, &mut f, &mut a);
        assert_eq!(m, (f64::INFINITY, 4));
        assert_eq!(f, [0.5, 0.0, 0.0, 0.0]);
        assert_eq!(a, [2.25, 3.0, 3.0, 4.0]);
    }

    #[test]
    fn jacobi_finds_the_eigenvalues_of_a_known_matrix() {
        // Eigenvalues of [[2,1,0],[1,2,1],[0,1,2]] are 2 − √2, 2, 2 + √2.
        let mut a = [2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 2.0];
        let min = symmetric_min_eigenvalue(&mut a, 3);
        assert!((min - (2.0 - core::f64::consts::SQRT_2)).abs() < 1e-14);
        let mut d = [a[0], a[4], a[8]];
        d.sort_by(f64::total_cmp);
        assert!(
            (d[1] - 2.0).abs() < 1e-14 && (d[2] - 2.0 - core::f64::consts::SQRT_2).abs() < 1e-14
        );
    }
}
