//! Neighbour relations, noise positions and the L2 sensitivity each combination implies
//! (`docs/PAPERS.md` §3.3 and §3.7, the paper's Appendix A.2; errata P3-1, P3-2, P3-3,
//! P3-11, P3-13, P3-15).
//!
//! **Guarantee.** [`sensitivity`] returns an upper bound (rounded up) on
//! `sup ‖x − x′‖_F` over neighbouring inputs once both are clipped by
//! [`clip_hidden`](super::clip_hidden):
//!
//! | region \ neighbours | [`Neighbours::Sequence`] | [`Neighbours::Tokens`]`(c)` |
//! | --- | --- | --- |
//! | [`ClipRegion::Frobenius`] | `2C` | `2C` |
//! | [`ClipRegion::Rows`] | `2C·√n` | `2C·√min(c, n)` |
//!
//! Every clipped block lies in a ball of radius `C`, two points of which are at most `2C`
//! apart: the paper's `S₂ = 2C` (`docs/PAPERS.md` §3.3). The paper's token-level values `C`
//! and `C·σ_max(W)` are half of the truth (P3-2, \[FIX\]); `c` changed rows give `2C√c`, not
//! `c·2C` (P3-15). The released code's `S₂ = C` (P3-1) is available only through
//! [`SensitivityRule::ReleasedCode`](super::SensitivityRule::ReleasedCode), which charges
//! the *effective* ε of the real sensitivity.
//!
//! **Token-level needs a row-local `f`.** `Tokens(c)` says the two hidden matrices differ in
//! at most `c` rows. One substituted token changes one row only while every row depends on
//! its own token alone: true after the input-embedding layer ([`NoisePosition::Embedding`],
//! token + segment + position embedding and a row-wise LayerNorm), false after any
//! attention sub-layer, where one token moves every row. [`check_neighbours`] refuses
//! `Tokens` at any other position. Insertions and deletions shift positions and are not
//! covered (P3-15), and neither is a substitution that changes the segment (token-type) ids of
//! other rows, such as moving a `[SEP]`: the host must keep those fixed or public.
//!
//! **A linear map after the clip** (App. A.2's Q/K/V design, P3-3 and P3-11): releasing
//! `X·W + Z` for row-clipped `X` has sensitivity `lip·S₂` with `lip ≥ σ_max(W)`; use one
//! concatenated `W = [W^Q | W^K | W^V]` (one release, not three uncomposed ones) and a
//! *certified upper bound* such as [`spectral_norm_upper_bound`] — power iteration
//! converges from below and is not one.

use crate::directed_rounding::{add_up, mul_up, sqrt_up};
use crate::dp_forward::clip::ClipRegion;
use crate::error::{Error, Result, check_radius};
use crate::matrix_view::MatRef;

/// Which pairs of inputs must be indistinguishable (`docs/PAPERS.md` §3.3, "Library
/// encoding").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbours {
    /// Any two sequences with the same label: SeqLDP (local), or SeqDP for a replaced
    /// record's sequence (central). The paper's default.
    Sequence,
    /// The hidden matrices differ in at most `count` rows: token-level SeqLDP for one
    /// substituted token (`count = 1`) or a phrase of `count` tokens, at a row-local
    /// position only.
    Tokens(usize),
}

/// Where the host applies the hook, named structurally (`docs/PAPERS.md` §3.7, P3-13).
/// Encoder layers are 0-based, as in the released code (its `--noise_layer 10` is the 11th
/// encoder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoisePosition {
    /// After `LayerNorm(token + segment + position embedding)`: row-local.
    Embedding,
    /// Inside encoder `layer` (0-based), after sub-layer `sub`.
    Encoder {
        /// 0-based layer index.
        layer: usize,
        /// The sub-layer whose output is perturbed.
        sub: SubLayer,
    },
    /// The pooled `1 × d` feature (`[CLS]`, dense, tanh) before the task head.
    Pooled,
}

/// An encoder sub-layer output (`docs/PAPERS.md` §3.7, "Positions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubLayer {
    /// After the attention output projection, before LayerNorm; the host must drop that
    /// residual (the server would otherwise read `X` again).
    Mha,
    /// After `LayerNorm(h + input)`; the residual stays inside `f`.
    AddNorm1,
    /// After the second FFN dense layer; the host must drop that residual.
    Ffn,
    /// The encoder output `LayerNorm(h + input)` (the paper's Table 5 "Encoder i").
    AddNorm2,
}

impl NoisePosition {
    /// Whether each row of the hidden matrix depends on its own token only (so that one
    /// token changes one row).
    pub fn is_row_local(self) -> bool {
        matches!(self, NoisePosition::Embedding)
    }

    /// Whether the host must remove the residual connection around the perturbed
    /// sub-layer (noise after MHA or FFN, `docs/PAPERS.md` §3.7).
    pub fn drops_residual(self) -> bool {
        matches!(self, NoisePosition::Encoder { sub: SubLayer::Mha | SubLayer::Ffn, .. })
    }
}

/// Refuses neighbour relations the position cannot support: `Tokens(0)`, and `Tokens` at
/// a position that is not row-local.
///
/// # Errors
/// [`Error::OutOfRange`] (`name` `"neighbours"`) for `Tokens(0)`;
/// [`Error::Unsupported`] for `Tokens` after the embedding layer.
pub fn check_neighbours(neighbours: Neighbours, position: NoisePosition) -> Result<()> {
    match neighbours {
        Neighbours::Sequence => Ok(()),
        Neighbours::Tokens(0) => Err(Error::OutOfRange {
            name: "neighbours",
            value: 0.0,
            allowed: "Tokens(count) with count >= 1",
        }),
        Neighbours::Tokens(_) if position.is_row_local() => Ok(()),
        Neighbours::Tokens(_) => Err(Error::Unsupported {
            what: "token-level neighbours need a row-local position (Embedding): after attention one token changes every row; use Neighbours::Sequence",
        }),
    }
}

/// The L2 sensitivity of the clipped `tokens × dim` matrix (see the module table), rounded
/// up.
///
/// ```
/// use dpattn_core::dp_forward::{ClipRegion, Neighbours, sensitivity};
/// assert_eq!(sensitivity(ClipRegion::Frobenius, Neighbours::Sequence, 1.0, 128)?, 2.0);
/// assert_eq!(sensitivity(ClipRegion::Rows, Neighbours::Tokens(1), 1.0, 128)?, 2.0);
/// assert_eq!(sensitivity(ClipRegion::Rows, Neighbours::Tokens(4), 1.0, 128)?, 4.0);
/// assert_eq!(sensitivity(ClipRegion::Rows, Neighbours::Sequence, 1.0, 16)?, 8.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `C ∉ [1e-100, 1e100]`, `tokens = 0` or `Tokens(0)`.
pub fn sensitivity(
    region: ClipRegion,
    neighbours: Neighbours,
    c: f64,
    tokens: usize,
) -> Result<f64> {
    check_radius("clip_norm", c)?;
    if tokens == 0 {
        return Err(Error::OutOfRange { name: "tokens", value: 0.0, allowed: ">= 1" });
    }
    let rows_changed = match (region, neighbours) {
        (_, Neighbours::Tokens(0)) => {
            return Err(Error::OutOfRange {
                name: "neighbours",
                value: 0.0,
                allowed: "Tokens(count) with count >= 1",
            });
        }
        (ClipRegion::Frobenius, _) => 1,
        (ClipRegion::Rows, Neighbours::Sequence) => tokens,
        (ClipRegion::Rows, Neighbours::Tokens(count)) => count.min(tokens),
    };
    // 2C·√rows: exact for rows a perfect square, rounded up otherwise.
    Ok(mul_up(2.0 * c, sqrt_up(rows_changed as f64)))
}

/// A certified upper bound on the spectral norm `σ_max(W)` of `W` (`rows × cols`), rounded
/// up: the smaller of the Frobenius norm `‖W‖_F` and `√(‖W‖₁‖W‖_∞)` (largest column sum
/// times largest row sum of `|W|`). Every sum has non-negative terms and is rounded up, so
/// the result is at least the exact `σ_max`. Use it as the Lipschitz constant of a linear map
/// applied between the clip and the noise (App. A.2, `docs/PAPERS.md` P3-3).
///
/// ```
/// use dpattn_core::dp_forward::spectral_norm_upper_bound;
/// use dpattn_core::MatRef;
/// // diag(3, 4): σ_max = 4 = √(‖W‖₁‖W‖_∞).
/// let w = [3.0, 0.0, 0.0, 4.0];
/// assert_eq!(spectral_norm_upper_bound(MatRef::from_row_major(&w, 2, 2)?)?, 4.0);
/// // The all-ones 2×2 has σ_max = 2, and so do both bounds.
/// let ones = [1.0; 4];
/// assert_eq!(spectral_norm_upper_bound(MatRef::from_row_major(&ones, 2, 2)?)?, 2.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::NonFinite`] for NaN or ±∞ in `W`; [`Error::OutOfRange`] for an empty `W`.
pub fn spectral_norm_upper_bound(w: MatRef<'_, f64>) -> Result<f64> {
    if w.rows() == 0 || w.cols() == 0 {
        return Err(Error::OutOfRange { name: "w", value: 0.0, allowed: "a non-empty matrix" });
    }
    w.check_finite_public("w")?; // a public weight matrix
    let mut frob_sq = 0.0f64;
    for i in 0..w.rows() {
        for &v in w.row(i) {
            frob_sq = add_up(frob_sq, mul_up(v.abs(), v.abs()));
        }
    }
    // ‖W‖_∞ (largest row sum) and ‖W‖₁ (largest column sum); σ_max² ≤ ‖W‖₁‖W‖_∞.
    let mut row_max = 0.0f64;
    for i in 0..w.rows() {
        row_max = row_max.max(w.row(i).iter().fold(0.0f64, |acc, v| add_up(acc, v.abs())));
    }
    let mut col_max = 0.0f64;
    for j in 0..w.cols() {
        col_max = col_max.max((0..w.rows()).fold(0.0f64, |acc, i| add_up(acc, w.row(i)[j].abs())));
    }
    let best = mul_up(row_max, col_max);
    Ok(sqrt_up(frob_sq.min(best)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_refused_after_attention() {
        let deep = NoisePosition::Encoder { layer: 0, sub: SubLayer::AddNorm2 };
        assert!(check_neighbours(Neighbours::Tokens(1), deep).is_err());
        assert!(check_neighbours(Neighbours::Tokens(1), NoisePosition::Embedding).is_ok());
        assert!(check_neighbours(Neighbours::Sequence, deep).is_ok());
        assert!(NoisePosition::Encoder { layer: 3, sub: SubLayer::Ffn }.drops_residual());
        assert!(!deep.drops_residual());
    }
}
