//! The DP-Forward hook: clip or normalise, then add aMGM noise, on a batch of hidden-state
//! matrices in place (seed-003 §3.10, §4.2, §4.4, §4.8).

use crate::accounting::ledger::{Amount, Charge, Ledger};
use crate::dp_forward::clip::{ClipReport, check_finite_hidden, clip_checked};
use crate::dp_forward::noise::{NoiseFactors, add_noise, check_factors, dp_forward_scratch_len};
use crate::dp_forward::params::DpForwardParams;
use crate::error::{Error, Result, mul_size};
use crate::matrix_view::MatMut;
use crate::sampling::{KeyedStream, NoiseFloat, NoiseKey};
use crate::scratch::check_scratch;

/// Releases `x ← clip(x) + Z` for every sequence of a batch, in place: `x` is
/// `(batch·tokens) × dim` (sequences stacked along rows, any row stride), `f32` or `f64`.
/// Each sequence is one input of the configured neighbour relation and gets one release;
/// the guarantee is that of [`DpForwardParams`] for each sequence (sequences of a batch
/// are different inputs: parallel composition, so one batch is one release per sequence).
///
/// Noise element `(r, j)` is element `first + r·dim + j` of the standard normal draw of
/// `(key, stream)` (`docs/RANDOMNESS.md` §5.4). **Never reuse** `(key, stream, first)`
/// ranges across releases: equal noise on two different matrices reveals their difference.
///
/// If `ledger` is given it is charged after every check and before `x` is touched:
/// * an approximate-DP ledger, `Charge::Approx(params.guarantee())`, only for a plan of one
///   release (`releases = 1`); a plan of `k > 1` composes exactly only as a whole: charge
///   [`DpForwardParams::plan_charge`] once per input yourself and pass no ledger;
/// * a zCDP or RDP ledger, the exact `ρ = S₂²/(2σ²)` of one release
///   ([`DpForwardParams::release_rho`]), for any `k`.
///
/// ```
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
///     NoiseFactors, NoisePosition, SensitivityRule, dp_forward};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::{MatMut, PrivacyBudget};
/// let p = DpForwardParams {
///     budget: PrivacyBudget::new(4.0, 1e-5)?, releases: 1, clip_norm: 1.0,
///     region: ClipRegion::Frobenius, mode: ClipMode::Normalize,
///     neighbours: Neighbours::Sequence, position: NoisePosition::Embedding,
///     tokens: 4, dim: 8, rule: SensitivityRule::Derived,
/// };
/// let mut x: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect(); // batch 2
/// let mut ledger = Ledger::new_approx(PrivacyBudget::new(8.0, 1e-4)?);
/// let report = dp_forward(MatMut::from_row_major(&mut x, 8, 8)?, &p, &NoiseFactors::Iid,
///     &NoiseKey::from_bytes([7; 32]), 0, 0, Some(&mut ledger), &mut [])?;
/// assert_eq!(report.scaled, 2);
/// assert_eq!(ledger.charges(), 1);
/// // σ = 2C/A(4, 1e-5) = 2.16232369904 (seed-003 §5-A) per entry, against a signal of
/// // norm 1 spread over 32 entries.
/// assert!((p.noise_floor()? / 2.16232369904 - 1.0).abs() < 1e-10);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`DpForwardParams::validate`] and [`check_factors`](super::check_factors);
/// [`Error::ShapeMismatch`] when `x` has not `dim` columns or its row count is not a
/// positive multiple of `tokens`; [`Error::NonFinite`] for NaN or ±∞ in `x`;
/// [`Error::ScratchTooSmall`]; [`Error::SizeOverflow`] when `first + rows·dim` overflows;
/// [`Error::Unsupported`] for an approximate-DP ledger with `releases > 1`; the ledger's
/// error when the charge does not fit. On every error `x` and the ledger are untouched.
#[allow(clippy::too_many_arguments)]
pub fn dp_forward<T: NoiseFloat, const N: usize>(
    mut x: MatMut<'_, T>,
    params: &DpForwardParams,
    factors: &NoiseFactors<'_>,
    key: &NoiseKey,
    stream: u64,
    first: u64,
    ledger: Option<&mut Ledger<N>>,
    scratch: &mut [f64],
) -> Result<ClipReport> {
    let floor = check_factors(params, factors)?;
    let (tokens, dim) = (params.tokens, params.dim);
    if x.cols() != dim {
        return Err(Error::ShapeMismatch { arg: "x", axis: "cols", expected: dim, got: x.cols() });
    }
    if x.rows() == 0 || !x.rows().is_multiple_of(tokens) {
        return Err(Error::ShapeMismatch {
            arg: "x",
            axis: "rows (a positive multiple of tokens)",
            expected: (x.rows() / tokens).max(1) * tokens,
            got: x.rows(),
        });
    }
    check_scratch(scratch.len(), dp_forward_scratch_len(factors, tokens, dim))?;
    let total = mul_size(x.rows(), dim, "rows * dim")? as u64;
    first.checked_add(total).ok_or(Error::SizeOverflow { what: "first + rows * dim" })?;
    check_finite_hidden(&x)?;
    if let Some(ledger) = ledger {
        let charge = match ledger.total() {
            Amount::Approx { .. } if params.releases == 1 => {
                Charge::Approx(params.guarantee_at(floor)?)
            }
            Amount::Approx { .. } => {
                return Err(Error::Unsupported {
                    what: "an approximate-DP ledger cannot take one release of a k > 1 plan: charge plan_charge() once per input, or use a zCDP ledger",
                });
            }
            _ => Charge::Zcdp(params.release_rho_at(floor)?),
        };
        ledger.try_charge(charge)?;
    }
    // Every check of clip_hidden ran above (C by validate, shape, finiteness).
    let report = clip_checked(x.rb_mut(), tokens, params.region, params.mode, params.clip_norm);
    let noise_stream = KeyedStream::new(key, stream);
    add_noise(x, tokens, factors, floor, &noise_stream, first, scratch)?;
    Ok(report)
}
