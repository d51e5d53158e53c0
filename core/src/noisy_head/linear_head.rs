//! The linear attention head of the paper and the export of a trained `Γ` to its weights
//! (the paper's eqs. (2.2)–(2.5); `docs/PAPERS.md` §4.3 and P4-1).
//!
//! **Guarantee.** None by itself (a deterministic model). [`export_attention`] is
//! post-processing of a released `Γ̂`, so the weights it writes are as private as `Γ̂`.
//! The paper writes `Γ = w22^{PV} W11^{KQ}`, but evaluating the head (2.2) gives
//! `ŷ = ⟨w22^{PV}(W11^{KQ})ᵀ, Z⟩`: the export writes `W11^{KQ} = Γᵀ` so that the head
//! predicts exactly `uᵀΓv`.

use super::features::{check_len, embedding_shape};
use crate::error::{Error, Result, mul_size};
use crate::{MatMut, MatRef};

/// Writes the head weights that realise `ŷ = uᵀΓv`: `W^{PV}` with `w22 = 1` and
/// `W^{KQ}` with `W11 = Γᵀ`, every other entry 0 (both `(D+1) × (D+1)`, row-major).
///
/// ```
/// use dpattn_core::noisy_head::export_attention;
/// let (mut pv, mut kq) = ([9.0; 9], [9.0; 9]);
/// export_attention(&[1.0, 2.0, 3.0, 4.0], 2, &mut pv, &mut kq)?;
/// assert_eq!(pv, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
/// assert_eq!(kq, [1.0, 3.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] on lengths, [`Error::OutOfRange`] for `d = 0`.
pub fn export_attention(gamma: &[f64], d: usize, w_pv: &mut [f64], w_kq: &mut [f64]) -> Result<()> {
    if d == 0 {
        return Err(Error::OutOfRange { name: "d", value: 0.0, allowed: "[1, inf)" });
    }
    let d1 = d.checked_add(1).ok_or(Error::SizeOverflow { what: "D + 1" })?;
    check_len("gamma", gamma.len(), mul_size(d, d, "D²")?)?;
    let d1sq = mul_size(d1, d1, "(D+1)²")?;
    check_len("w_pv", w_pv.len(), d1sq)?;
    check_len("w_kq", w_kq.len(), d1sq)?;
    w_pv.fill(0.0);
    w_pv[d1sq - 1] = 1.0;
    w_kq.fill(0.0);
    for i in 0..d {
        for j in 0..d {
            w_kq[i * d1 + j] = gamma[j * d + i];
        }
    }
    Ok(())
}

/// Scratch for [`linear_attention_head`]: `2(D+1)(L+1) + (L+1)²` for an embedding of
/// `D + 1` rows and `L + 1` columns.
///
/// # Errors
/// [`Error::SizeOverflow`].
pub fn linear_attention_head_scratch_len(rows: usize, cols: usize) -> Result<usize> {
    let a = mul_size(2, mul_size(rows, cols, "(D+1)(L+1)")?, "2(D+1)(L+1)")?;
    a.checked_add(mul_size(cols, cols, "(L+1)²")?).ok_or(Error::SizeOverflow { what: "scratch" })
}

/// The head of eq. (2.2): `f(E; θ) = E + W^{PV}E·(EᵀW^{KQ}E)/L` for an embedding `E` of
/// `D + 1` rows and `L + 1` columns (`L` context tokens and the query), written to `out`
/// (same shape). The prediction is `out[(D, L)]`. `O((D+1)(L+1)(D+L+2))` flops.
///
/// ```
/// use dpattn_core::noisy_head::{export_attention, linear_attention_head, predict};
/// use dpattn_core::{MatMut, MatRef};
/// // D = 2, L = 1: E = [[x; y], [q; 0]] with x = (1, 2), y = 3, q = (0.5, −1).
/// let e = [1.0, 0.5, 2.0, -1.0, 3.0, 0.0];
/// let gamma = [0.1, 0.2, 0.3, 0.4];
/// let (mut pv, mut kq) = ([0.0; 9], [0.0; 9]);
/// export_attention(&gamma, 2, &mut pv, &mut kq)?;
/// let mut out = [0.0; 6];
/// let mut scratch = [0.0; 16];
/// linear_attention_head(
///     MatMut::from_row_major(&mut out, 3, 2)?, MatRef::from_row_major(&e, 3, 2)?,
///     MatRef::from_row_major(&pv, 3, 3)?, MatRef::from_row_major(&kq, 3, 3)?, &mut scratch)?;
/// // ŷ = uᵀΓv with u = q, v = y·x / L = (3, 6).
/// let y_hat = predict(&gamma, &[0.5, -1.0], &[3.0, 6.0]);
/// assert!((out[5] - y_hat).abs() < 1e-14);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] when shapes disagree or `E` has fewer than 2 rows or columns;
/// [`Error::NonFinite`] for non-finite weights, [`Error::PrivateNonFinite`] for a non-finite
/// embedding; [`Error::ScratchTooSmall`].
pub fn linear_attention_head(
    mut out: MatMut<'_, f64>,
    e: MatRef<'_, f64>,
    w_pv: MatRef<'_, f64>,
    w_kq: MatRef<'_, f64>,
    scratch: &mut [f64],
) -> Result<()> {
    let (rows, cols) = embedding_shape(&e)?;
    for (arg, m) in [("w_pv", &w_pv), ("w_kq", &w_kq)] {
        if m.rows() != rows || m.cols() != rows {
            return Err(Error::ShapeMismatch {
                arg,
                axis: "rows and cols",
                expected: rows,
                got: m.rows().max(m.cols()),
            });
        }
    }
    if out.rows() != rows || out.cols() != cols {
        return Err(Error::ShapeMismatch {
            arg: "out",
            axis: "rows and cols",
            expected: rows,
            got: out.rows(),
        });
    }
    e.check_finite("e")?;
    w_pv.check_finite_public("w_pv")?;
    w_kq.check_finite_public("w_kq")?;
    let need = linear_attention_head_scratch_len(rows, cols)?;
    crate::scratch::check_scratch(scratch.len(), need)?;
    let (pe, rest) = scratch.split_at_mut(rows * cols);
    let (qe, rest) = rest.split_at_mut(rows * cols);
    let m = &mut rest[..cols * cols];
    // pe = W^{PV} E, qe = W^{KQ} E.
    for (w, dst) in [(&w_pv, &mut *pe), (&w_kq, &mut *qe)] {
        for i in 0..rows {
            for j in 0..cols {
                dst[i * cols + j] = (0..rows).map(|k| w.row(i)[k] * e.row(k)[j]).sum();
            }
        }
    }
    // m = Eᵀ (W^{KQ} E).
    for a in 0..cols {
        for b in 0..cols {
            m[a * cols + b] = (0..rows).map(|k| e.row(k)[a] * qe[k * cols + b]).sum();
        }
    }
    let inv_l = 1.0 / (cols - 1) as f64;
    for i in 0..rows {
        let row = out.row_mut(i);
        for (j, o) in row.iter_mut().enumerate() {
            let s: f64 = (0..cols).map(|k| pe[i * cols + k] * m[k * cols + j]).sum();
            *o = e.row(i)[j] + s * inv_l;
        }
    }
    Ok(())
}
