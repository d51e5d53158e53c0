//! The DP-Forward hook: clip or normalise, then add aMGM noise, on a batch of hidden-state
//! matrices in place (`docs/PAPERS.md` §3.6, "Release", and §3.7).

use crate::accounting::cost::{Accountant, Cost};
use crate::dp_forward::clip::clip_checked;
use crate::dp_forward::exact::{plan_exact, release_exact};
use crate::dp_forward::noise::{
    NoiseFactors, add_noise, check_factors, check_float_range, dp_forward_scratch_len,
};
use crate::dp_forward::params::DpForwardParams;
use crate::error::{Error, Result, mul_size};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, NoiseMode};
use crate::matrix_view::MatMut;
use crate::sampling::NoiseFloat;
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

/// Stream ids one release uses (`draw.stream` only).
pub const STREAMS: u64 = 1;

/// What one call of [`dp_forward`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpForwardReport {
    /// Blocks whose entries the clip multiplied by a factor other than 1. Private data:
    /// keep it on the data owner's side.
    pub scaled: usize,
    /// The largest block norm before clipping. Private data, like `scaled`.
    pub max_norm: f64,
    /// The noise that ran (public).
    pub noise_mode: NoiseMode,
    /// `Λ`, the resolution of the exact release's grid (public, for audit): every output of
    /// i.i.d. and diagonal noise is a multiple of it (matrix factors add float noise to the
    /// grid release afterwards). `None` in [`NoiseMode::UnsafeFloat`].
    pub resolution: Option<f64>,
    sanitized_rows: usize,
}

impl DpForwardReport {
    /// How many rows of `x` held NaN or ±∞ and were released as the zero row (plus noise).
    /// **Private** (a count of private entries): for the data holder only, never logged or
    /// released.
    pub fn private_sanitized_rows(&self) -> usize {
        self.sanitized_rows
    }
}

/// Releases `x ← clip(x) + Z` for every sequence of a batch, in place: `x` is
/// `(batch·tokens) × dim` (sequences stacked along rows, any row stride), `f32` or `f64`.
/// Each sequence is one input of the configured neighbour relation and gets one release;
/// the guarantee is that of [`DpForwardParams`] for each sequence (sequences of a batch
/// are different inputs: parallel composition, so one batch is one release per sequence).
///
/// **Noise** ([`DpForwardParams::noise_mode`]). In [`NoiseMode::Exact`] (the default) the
/// clipped matrix is released on the public grid of
/// [`exact_grid`](DpForwardParams::exact_grid) with exact discrete Gaussian noise, so the
/// returned floats are DP, low-order bits included (`docs/PRIVACY.md` §6.5): entry `(r, j)`
/// is a multiple of `Λ` ([`DpForwardReport::resolution`]) whose integer noise comes from
/// the exact-sampler window of element `first + r·dim + j`; matrix factors then add
/// data-independent float noise drawn from the next `⌈rows·dim/8⌉` elements'
/// blocks. In [`NoiseMode::UnsafeFloat`] float noise element `(r, j)` is element
/// `first + r·dim + j` of the standard normal draw, added in `f64` (not DP in its low-order
/// bits). Both layouts: `docs/RANDOMNESS.md` §5.4. **Never reuse** `(key, stream)` element
/// ranges across releases: equal noise on two different matrices reveals their difference.
///
/// The randomness is a fresh stream of `session` and the session's ledger, which must be kept
/// for [`DpForwardParams::privacy_unit`] ([`Error::UnitMismatch`] otherwise), is charged (in
/// the params' mode) after every check and before `x` is touched:
/// * an approximate-DP ledger, `Charge::Approx(params.guarantee())`, only for a plan of one
///   release (`releases = 1`); a plan of `k > 1` composes exactly only as a whole: charge
///   [`DpForwardParams::plan_charge`] once per input yourself and use
///   [`dp_forward_keyed`] without a ledger;
/// * a zCDP or RDP ledger, the exact `ρ = S₂²/(2σ²)` of one release
///   ([`DpForwardParams::release_rho`]), for any `k`.
///
/// A row of `x` holding NaN or ±∞ is released as the zero row plus noise, never refused
/// (a refusal would depend on private data; the zero row is inside the ball, so the
/// guarantee holds: [`clip_hidden`](crate::dp_forward::clip_hidden)); how many rows were
/// sanitised is private: [`DpForwardReport::private_sanitized_rows`].
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
///     NoiseFactors, NoisePosition, SensitivityRule, dp_forward};
/// use dpattn_core::session::Session;
/// use dpattn_core::{MatMut, NoiseMode, PrivacyBudget};
/// let p = DpForwardParams {
///     budget: PrivacyBudget::new(4.0, 1e-5)?, releases: 1, clip_norm: 1.0,
///     region: ClipRegion::Frobenius, mode: ClipMode::Normalize,
///     neighbours: Neighbours::Sequence, position: NoisePosition::Embedding,
///     tokens: 4, dim: 8, rule: SensitivityRule::Derived, noise_mode: NoiseMode::Exact,
/// };
/// let mut x: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect(); // batch 2
/// // A session: a key from the operating system, fresh stream ids, a ledger for sequences.
/// let ledger = Ledger::new_approx(PrivacyUnit::Sequence, PrivacyBudget::new(8.0, 1e-4)?);
/// let mut session = Session::new(ledger)?;
/// let report = dp_forward(MatMut::from_row_major(&mut x, 8, 8)?, &p, &NoiseFactors::Iid,
///     &mut session, &mut [])?;
/// assert_eq!(report.scaled, 2);
/// assert_eq!((session.ledger().charges(), session.ledger().unsafe_float_charges()), (1, 0));
/// // σ = 2C/A(4, 1e-5) = 2.16232369904 (docs/PAPERS.md T3-A) per entry, against a signal of
/// // norm 1 spread over 32 entries.
/// assert!((p.noise_floor()? / 2.16232369904 - 1.0).abs() < 1e-10);
/// // Every output is an exact multiple of the public resolution Λ = 2^-10
/// // (the largest power of two with √32·Λ ≤ 2/256).
/// let lambda = report.resolution.unwrap();
/// assert_eq!(lambda, 2f64.powi(-10));
/// assert!(x.iter().all(|&v| (f64::from(v) / lambda).fract() == 0.0));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`DpForwardParams::validate`] and [`check_factors`]; in exact mode those of
/// [`DpForwardParams::exact_grid`] (a clip norm no grid of the format holds), [`Error::OutOfRange`]
/// for diagonal noise beyond the exact sampler's range or an element index reaching `2^40`;
/// [`Error::ShapeMismatch`] when `x` has not `dim` columns or its row count is not a positive
/// multiple of `tokens`; [`Error::ScratchTooSmall`]; [`Error::SizeOverflow`] when
/// `first + rows·dim` overflows; [`Error::Unsupported`] for an approximate-DP ledger with
/// `releases > 1`; the ledger's error when the charge does not fit. On every error `x` and the
/// ledger are untouched (but for an exhausted randomness window, probability below `2^−1000`, after
/// which `x` is all NaN).
pub fn dp_forward<T: NoiseFloat, const N: usize>(
    x: MatMut<'_, T>,
    params: &DpForwardParams,
    factors: &NoiseFactors<'_>,
    session: &mut Session<N>,
    scratch: &mut [f64],
) -> Result<DpForwardReport> {
    let r = session.begin(STREAMS)?;
    dp_forward_keyed(x, params, factors, r.draw, 0, Some(r.ledger), scratch)
}

/// [`dp_forward`] with an explicit key and stream id and an optional ledger: **for replay,
/// audit, and hosts that manage their own stream ids** — a `(key, stream)` pair must never
/// serve two releases. `first` offsets the element indices (noise element `(r, j)` is
/// element `first + r·dim + j` of the stream), so that one batch split across calls (or
/// across the CPU and the GPU) draws what one call would; the session route uses `first = 0`.
///
/// # Errors
/// As [`dp_forward`].
#[allow(clippy::too_many_arguments)]
pub fn dp_forward_keyed<T: NoiseFloat>(
    mut x: MatMut<'_, T>,
    params: &DpForwardParams,
    factors: &NoiseFactors<'_>,
    draw: Draw<'_>,
    first: u64,
    ledger: Option<&mut dyn Accountant>,
    scratch: &mut [f64],
) -> Result<DpForwardReport> {
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
    let grid = match params.noise_mode {
        NoiseMode::Exact => Some(plan_exact::<T>(params, factors, floor, first, total)?),
        NoiseMode::UnsafeFloat => {
            check_float_range::<T>(params, factors, floor)?;
            None
        }
        NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
    };
    if let Some(ledger) = ledger {
        let approx = match params.releases {
            1 => Some(params.guarantee_at(floor)?),
            _ => None, // one release of a k > 1 plan has no stand-alone (ε, δ)
        };
        let rho = params.release_rho_at(floor)?.get();
        ledger.charge(
            params.privacy_unit()?,
            &Cost::Gaussian { approx, rho },
            params.noise_mode,
        )?;
    }
    // Every check of clip_hidden ran above (C by validate, shape). Non-finite rows are
    // private data: the clip sanitises them to the zero row (inside the ball), never refuses.
    let clip = clip_checked(x.rb_mut(), tokens, params.region, params.mode, params.clip_norm);
    let noise_stream = draw.keyed(0);
    match &grid {
        Some(g) => release_exact(x, tokens, factors, g, floor, &noise_stream, first, scratch)?,
        None => add_noise(x, tokens, factors, floor, &noise_stream, first, scratch)?,
    }
    Ok(DpForwardReport {
        scaled: clip.scaled,
        max_norm: clip.max_norm,
        noise_mode: params.noise_mode,
        resolution: grid.map(|g| g.resolution()),
        sanitized_rows: clip.private_sanitized_rows(),
    })
}
