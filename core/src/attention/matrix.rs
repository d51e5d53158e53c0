//! The explicit normalised attention matrix `D(A)⁻¹ f(A)` for small problems, in `f64`.
//!
//! **Guarantee.** Row `i` of the result is `f(a_ij) / Σ_j f(a_ij)` over the visible
//! entries (masked entries are 0; a row with no visible entry is all zero), evaluated
//! stably: `exp` relative to the row maximum, `cosh` as `e^{|a|−m} + e^{−|a|−m}` with
//! `m = max_j |a_ij|`, so no entry overflows whatever the logits. This is Definition 1.4 of
//! paper 000 (`shared/seeds/000_*.txt`), which applies `D(B)⁻¹ f(B)` to a *noisy* matrix
//! `B`; [`normalise_scores`] is that step on a caller's matrix. It materialises `s_q × s_k`
//! values: use the tiled [`attention`](super::attention()) for long sequences. No privacy.

use crate::attention_options::{Mask, Scale, ScoreFn};
use crate::element::Element;
use crate::error::{Error, PrivateDetail, Result};
use crate::matrix_view::{MatMut, MatRef};

/// Replaces every row of `a` by its normalisation `f(a_i·) / Σ_j f(a_ij)`. Entries equal to
/// `-inf` are masked (weight 0).
///
/// ```
/// use dpattn_core::{MatMut, ScoreFn, attention::normalise_scores};
/// let mut a = [0.0f64, 2f64.ln(), f64::NEG_INFINITY, 1.0, -1.0, 0.0];
/// normalise_scores(MatMut::from_row_major(&mut a, 2, 3)?, ScoreFn::Exp)?;
/// assert!((a[0] - 1.0 / 3.0).abs() < 1e-15 && (a[1] - 2.0 / 3.0).abs() < 1e-15 && a[2] == 0.0);
/// let mut c = [1.0f64, -1.0];
/// normalise_scores(MatMut::from_row_major(&mut c, 1, 2)?, ScoreFn::Cosh)?;
/// assert_eq!(c, [0.5, 0.5]); // cosh is even
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::PrivateNonFinite`] (argument `"scores"`) for NaN or `+inf` (scores are treated as
/// private data); `a` is then untouched.
pub fn normalise_scores(mut a: MatMut<'_, f64>, score: ScoreFn) -> Result<()> {
    let cols = a.cols();
    for i in 0..a.rows() {
        if let Some(j) = a.rb().row(i).iter().position(|x| x.is_nan() || *x == f64::INFINITY) {
            return Err(Error::private_non_finite("scores", i * cols + j));
        }
    }
    for i in 0..a.rows() {
        normalise_row(a.row_mut(i), score);
    }
    Ok(())
}

fn normalise_row(row: &mut [f64], score: ScoreFn) {
    let visible = |x: &f64| *x != f64::NEG_INFINITY;
    let m = match score {
        ScoreFn::Exp => row.iter().copied().filter(visible).fold(f64::NEG_INFINITY, f64::max),
        ScoreFn::Cosh => {
            row.iter().filter(|x| visible(x)).fold(f64::NEG_INFINITY, |m, x| m.max(x.abs()))
        }
    };
    if m == f64::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0;
    for x in row.iter_mut() {
        *x = match (visible(x), score) {
            (false, _) => 0.0,
            (true, ScoreFn::Exp) => libm::exp(*x - m),
            (true, ScoreFn::Cosh) => libm::exp(x.abs() - m) + libm::exp(-x.abs() - m),
        };
        sum += *x;
    }
    for x in row.iter_mut() {
        *x /= sum;
    }
}

/// The normalised attention matrix `D(A)⁻¹ f(A)` of one head, `A = scale · Q·Kᵀ`, into
/// `out` (`s_q × s_k`). The mask is for a batch of one: `key_padding` has `s_k` entries.
///
/// ```
/// use dpattn_core::{MatMut, MatRef, Mask, Scale, ScoreFn, attention::attention_matrix};
/// let q = [1.0f32, 0.0];
/// let k = [1.0f32, 0.0, 0.0, 1.0];
/// let mut p = [0.0f64; 2];
/// attention_matrix(MatMut::from_row_major(&mut p, 1, 2)?, MatRef::from_row_major(&q, 1, 2)?,
///     MatRef::from_row_major(&k, 2, 2)?, Mask::NONE, Scale::Custom(1.0), ScoreFn::Exp)?;
/// let e = std::f64::consts::E;
/// assert!((p[0] - e / (e + 1.0)).abs() < 1e-15);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::OutOfRange`] (zero size, bad scale),
/// [`Error::DomainViolation`] (logits that could overflow `f64`; the measured bound only
/// through [`Error::private_detail`]), [`Error::PrivateNonFinite`]; `out` is then untouched.
pub fn attention_matrix<T: Element>(
    mut out: MatMut<'_, f64>,
    q: MatRef<'_, T>,
    k: MatRef<'_, T>,
    mask: Mask<'_>,
    scale: Scale,
    score: ScoreFn,
) -> Result<()> {
    let (s_q, d, s_k) = (q.rows(), q.cols(), k.rows());
    for (name, value) in [("s_q", s_q), ("d", d), ("s_k", s_k)] {
        if value == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    let shape = |arg, axis, expected, got| {
        if expected == got {
            Ok(())
        } else {
            Err(Error::ShapeMismatch { arg, axis, expected, got })
        }
    };
    shape("k", "dim", d, k.cols())?;
    shape("out", "rows (s_q)", s_q, out.rows())?;
    shape("out", "cols (s_k)", s_k, out.cols())?;
    mask.validate(1, s_k)?;
    let scale = scale.value(d)?;
    q.check_finite("q")?;
    k.check_finite("k")?;
    let norm = |m: &MatRef<'_, T>, i: usize| {
        libm::sqrt(m.row(i).iter().map(|x| x.to_f64() * x.to_f64()).sum::<f64>())
    };
    let qmax = (0..s_q).map(|i| norm(&q, i)).fold(0.0, f64::max);
    let kmax = (0..s_k).map(|j| norm(&k, j)).fold(0.0, f64::max);
    let bound = scale * qmax * kmax;
    if bound.is_nan() || bound >= f64::MAX / 4.0 {
        return Err(Error::DomainViolation {
            condition: "logit bound scale * max|q| * max|k| below 1/4 of the largest f64",
            detail: PrivateDetail::from_measured(bound),
        });
    }
    for i in 0..s_q {
        let qi = q.row(i);
        let row = out.row_mut(i);
        for (j, a) in row.iter_mut().enumerate() {
            *a = if mask.visible(0, i, j, s_q, s_k) {
                let dot: f64 = qi.iter().zip(k.row(j)).map(|(x, y)| x.to_f64() * y.to_f64()).sum();
                dot * scale
            } else {
                f64::NEG_INFINITY
            };
        }
        normalise_row(row, score);
    }
    Ok(())
}
