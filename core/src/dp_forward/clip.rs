//! Bounding a hidden-state matrix before noise: clip or normalise to norm `C`, over the
//! whole matrix (Frobenius) or row by row (`docs/PAPERS.md` §3.7, "Bounding" and
//! "Token-level designs"; the paper's Appendix A.2).
//!
//! **Guarantee.** After [`clip_hidden`], every block (a whole `tokens × dim` sequence for
//! [`ClipRegion::Frobenius`], one row for [`ClipRegion::Rows`]) has exact Euclidean norm
//! `≤ C`, including floating-point rounding: a rescaled block is scaled to `C·(1 − m)`
//! with `m = (len + 16)·2⁻⁵²` (which covers the error of the computed norm and of the
//! rescaling), and `f32` results are rounded toward zero. Blocks are independent: the map is
//! applied per block, so one changed row (or sequence) changes only its own block.
//!
//! * [`ClipMode::Clip`]: `x ← x / max(1, ‖x‖/C)` (blocks inside the ball are untouched).
//! * [`ClipMode::Normalize`]: `x ← C·x/‖x‖` (the paper's choice); the zero block stays zero,
//!   which is inside the ball (`docs/PAPERS.md` P3-16).
//! * [`ClipMode::ReleasedCode`]: the released code's `x ← x·min(1, C/(‖x‖ + 1e-6))`, kept
//!   for reproduction, with the same rounding margin on top.
//!
//! Norms are computed with scaling (no overflow for entries near `f64::MAX`, no underflow
//! for tiny ones).
//!
//! **Non-finite rows are sanitised, never refused** (issue 28; as the GPU's
//! `clip_rows_release_exact`). A row holding NaN or ±∞ is private data like any other, and
//! refusing it would reveal that it exists; it becomes the zero row before the block is
//! clipped. This keeps the guarantee: the map "zero the non-finite rows, then clip each
//! block" still acts on each row's block alone (a row belongs to one block, so inputs that
//! differ in one sequence, or in `c` rows, still differ only there), and its output still
//! lies in the ball, since the zero row has norm 0 and the block is clipped after it. The
//! number of sanitised rows is private: [`ClipReport::private_sanitized_rows`].

use crate::error::{Error, Result, check_radius};
use crate::matrix_view::MatMut;
use crate::sampling::NoiseFloat;

/// Which blocks are bounded by `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipRegion {
    /// The whole `tokens × dim` matrix of each sequence (sequence-level DP-Forward,
    /// `docs/PAPERS.md` §3.7).
    Frobenius,
    /// Each row (token) on its own (the token-level design of App. A.2).
    Rows,
}

/// How a block is brought into the ball of radius `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipMode {
    /// `x / max(1, ‖x‖/C)`.
    Clip,
    /// `C·x/‖x‖`; zero stays zero.
    Normalize,
    /// `x·min(1, C/(‖x‖ + 1e-6))`, as the authors' `dp_noise._max_norm_clip` (reproduction).
    ReleasedCode,
}

/// What [`clip_hidden`] did: how many blocks it rescaled and the largest norm it saw
/// (before rescaling). Private data: keep it on the data owner's side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipReport {
    /// Blocks whose entries were multiplied by a factor other than 1.
    pub scaled: usize,
    /// The largest block norm (before clipping) of the sanitised input.
    pub max_norm: f64,
    sanitized_rows: usize,
}

impl ClipReport {
    /// How many rows held NaN or ±∞ and were set to zero before clipping. **Private** (a
    /// count of private entries): for the data holder only, never logged or released.
    pub fn private_sanitized_rows(&self) -> usize {
        self.sanitized_rows
    }
}

/// The relative margin kept inside the ball for a block of `len` entries.
pub(crate) fn ball_margin(len: usize) -> f64 {
    1.0 - (len as f64 + 16.0) * f64::EPSILON
}

/// `(max |x|, √(Σ (x/max)²))` over the rows `rows` of `x`; the norm is their product.
/// One pass sums the raw squares alongside the max; a second, scaled pass runs only when the
/// max is outside `[1e-140, 1e140]`, where raw squares could overflow or lose precision.
/// Either way the relative error of `max·root` is below `(len + 4)·2⁻⁵³`.
fn block_norm<T: NoiseFloat>(x: &MatMut<'_, T>, rows: core::ops::Range<usize>) -> (f64, f64) {
    let view = x.rb();
    let (mut m, mut raw) = (0.0f64, 0.0f64);
    for i in rows.clone() {
        for v in view.row(i) {
            let a = v.to_f64().abs();
            m = m.max(a);
            raw += a * a;
        }
    }
    if m == 0.0 {
        return (0.0, 0.0);
    }
    if (1e-140..=1e140).contains(&m) {
        // Entries below 1e-154 lose their squares to underflow: at most len·1e-308 against
        // m² ≥ 1e-280, far inside the margin.
        return (m, libm::sqrt(raw) / m);
    }
    let mut s = 0.0f64;
    for i in rows {
        for v in view.row(i) {
            let r = v.to_f64() / m;
            s += r * r;
        }
    }
    (m, libm::sqrt(s))
}

/// Sets every row of `x` that holds NaN or ±∞ to the zero row; returns how many.
fn zero_non_finite_rows<T: NoiseFloat>(x: &mut MatMut<'_, T>) -> usize {
    let zero = T::from_f64_toward_zero(0.0);
    let mut count = 0;
    for i in 0..x.rows() {
        let row = x.row_mut(i);
        if row.iter().any(|v| !v.to_f64().is_finite()) {
            row.fill(zero);
            count += 1;
        }
    }
    count
}

/// Clips or normalises `x` (`rows × dim`, any row stride) block by block, where a block is
/// `block_rows` consecutive rows for [`ClipRegion::Frobenius`] (one sequence of a batch
/// stacked along rows) and one row for [`ClipRegion::Rows`]. See the module docs for the
/// guarantee.
///
/// ```
/// use dpattn_core::dp_forward::{ClipMode, ClipRegion, clip_hidden};
/// use dpattn_core::MatMut;
/// let mut x = [3.0f64, 4.0, 0.0, 0.0]; // two sequences of one 1×2 row each
/// let r = clip_hidden(MatMut::from_row_major(&mut x, 2, 2)?, 1, ClipRegion::Frobenius,
///     ClipMode::Normalize, 1.0)?;
/// assert!((x[0] - 0.6).abs() < 1e-12 && (x[1] - 0.8).abs() < 1e-12);
/// assert_eq!(&x[2..], &[0.0, 0.0]); // the zero sequence stays zero
/// assert_eq!((r.scaled, r.max_norm), (1, 5.0));
/// // A row holding NaN is sanitised to the zero row, not refused.
/// let mut y = [f64::NAN, 1.0, 0.3, 0.4];
/// let r = clip_hidden(MatMut::from_row_major(&mut y, 2, 2)?, 1, ClipRegion::Rows,
///     ClipMode::Clip, 1.0)?;
/// assert_eq!(y, [0.0, 0.0, 0.3, 0.4]);
/// assert_eq!(r.private_sanitized_rows(), 1); // private: for the data holder only
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `C ∉ [1e-100, 1e100]` or `block_rows = 0`;
/// [`Error::ShapeMismatch`] for zero columns or a row count that is not a multiple of
/// `block_rows`. `x` is untouched on error. Non-finite values are not an error: their rows
/// are sanitised (module docs).
pub fn clip_hidden<T: NoiseFloat>(
    x: MatMut<'_, T>,
    block_rows: usize,
    region: ClipRegion,
    mode: ClipMode,
    c: f64,
) -> Result<ClipReport> {
    check_radius("clip_norm", c)?;
    if block_rows == 0 {
        return Err(Error::OutOfRange { name: "block_rows", value: 0.0, allowed: ">= 1" });
    }
    if x.cols() == 0 {
        return Err(Error::ShapeMismatch { arg: "x", axis: "cols", expected: 1, got: 0 });
    }
    if !x.rows().is_multiple_of(block_rows) {
        return Err(Error::ShapeMismatch {
            arg: "x",
            axis: "rows (a multiple of block_rows)",
            expected: (x.rows() / block_rows).saturating_add(1).saturating_mul(block_rows),
            got: x.rows(),
        });
    }
    Ok(clip_checked(x, block_rows, region, mode, c))
}

/// [`clip_hidden`] after its checks (`C` in range, a positive number of columns and a row
/// count that is a multiple of `block_rows ≥ 1`): the hook runs the checks once, before its
/// ledger charge, and then this. Rows holding NaN or ±∞ are zeroed first.
pub(crate) fn clip_checked<T: NoiseFloat>(
    mut x: MatMut<'_, T>,
    block_rows: usize,
    region: ClipRegion,
    mode: ClipMode,
    c: f64,
) -> ClipReport {
    let rows_per_block = match region {
        ClipRegion::Frobenius => block_rows,
        ClipRegion::Rows => 1,
    };
    let sanitized_rows = zero_non_finite_rows(&mut x);
    let mut report = ClipReport { scaled: 0, max_norm: 0.0, sanitized_rows };
    let mut start = 0;
    while start < x.rows() {
        let range = start..start + rows_per_block;
        start += rows_per_block;
        let len = rows_per_block * x.cols();
        let (m, root) = block_norm(&x, range.clone());
        let norm = m * root; // may overflow to +∞; only reported
        report.max_norm = report.max_norm.max(norm);
        if let Some(factor) = block_factor(mode, c, len, m, root) {
            report.scaled += 1;
            for i in range {
                for v in x.row_mut(i) {
                    *v = T::from_f64_toward_zero((v.to_f64() / m) * factor);
                }
            }
        }
    }
    report
}

/// The factor `f` such that the block becomes `(x/m)·f`, or `None` to leave it alone.
/// `(m, root)` are the parts of the block norm `m·root`; `len` the number of entries.
///
/// A block is left alone when its computed norm is `≤ C·(1 − μ)` (`μ` = `1 −`
/// [`ball_margin`]); a rescaled block is aimed at `C·(1 − 2μ)`, so its computed norm falls
/// below the first threshold and a second clip leaves it bit-identical (idempotence).
fn block_factor(mode: ClipMode, c: f64, len: usize, m: f64, root: f64) -> Option<f64> {
    if m == 0.0 {
        return None; // the zero block is inside the ball in every mode
    }
    let keep = c * ball_margin(len); // blocks at or below this computed norm stay
    let target = c * (2.0 * ball_margin(len) - 1.0); // C·(1 − 2μ): where rescaled blocks go
    // `inside`: the computed norm m·root ≤ keep, decided without forming m·root.
    let inside = root <= keep / m;
    let to_ball = target / root; // (x/m)·to_ball has norm ≈ target
    match mode {
        ClipMode::Clip => (!inside).then_some(to_ball),
        ClipMode::Normalize => Some(to_ball),
        ClipMode::ReleasedCode => {
            // coef = min(1, C/(‖x‖ + 1e-6)); the block becomes (x/m)·(m·coef), with
            // m·coef = C/(root + 1e-6/m) formed on the scaled parts (no subnormal coef for
            // huge ‖x‖/C).
            let m_coef =
                if m >= 1e-290 { c / (root + 1e-6 / m) } else { m * (c / (m * root + 1e-6)) };
            if m_coef >= m && inside { None } else { Some(m_coef.min(to_ball)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factor_rules() {
        // Inside the ball: Clip leaves it, Normalize scales up to C.
        assert_eq!(block_factor(ClipMode::Clip, 2.0, 4, 1.0, 1.0), None);
        let f = block_factor(ClipMode::Normalize, 2.0, 4, 1.0, 1.0).unwrap();
        assert!((f - 2.0).abs() < 1e-13 && f < 2.0);
        // A block aimed at the target is inside on the next pass.
        let g = block_factor(ClipMode::Clip, 2.0, 4, 1.0, 4.0).unwrap();
        assert_eq!(block_factor(ClipMode::Clip, 2.0, 4, 1.0, g * 4.0 / 4.0 * 1.0), None);
        // Released code: coef = 1/(5 + 1e-6) on a norm-5 block.
        let f = block_factor(ClipMode::ReleasedCode, 1.0, 2, 4.0, 1.25).unwrap();
        assert!((f / (4.0 / (5.0 + 1e-6)) - 1.0).abs() < 1e-15);
        assert_eq!(block_factor(ClipMode::ReleasedCode, 1.0, 2, 0.25, 1.0), None);
    }
}
