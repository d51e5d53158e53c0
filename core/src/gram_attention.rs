//! `[EXT]` DP attention from an exactly released Gram matrix: the floating-point-safe route
//! for paper 000's privacy unit (one feature column), whose own mechanism has no
//! floating-point-safe form (`docs/PRIVACY.md` §3.5).
//!
//! **Setting.** A problem is a private `X ∈ ℝ^{n×d}` (`n` tokens, `d` features). The release
//! is `B = XXᵀ + Z` and the attention `P = D(B)⁻¹ f(B)` (`f = exp` or `cosh`), the same
//! outputs as paper 000's DPAttention, for every problem `x[b, h]` of a
//! `[batch, heads, n, d]` input.
//!
//! **Neighbour relation (privacy unit: one feature column).** Two inputs are neighbours if
//! one column of one problem's `X` moves by at most `β` in ℓ2 (`β = 2α` is replacing it).
//! Private columns are **clipped** to norm `α` (never refused: a column longer than `α` is
//! scaled to `α`, a column holding NaN/±∞ becomes the zero column), so no domain needs to
//! be declared: unlike paper 000 there is no eigenvalue floor `η` and no `d ≥ n`.
//!
//! **Guarantee.** `(ε, δ)`-DP per problem, composed over the problems of a call like paper
//! 000 (basic composition over `batch · heads` problems, or over `heads` when the batch
//! elements are declared disjoint). Proof: the clipped column `y` moves by at most
//! `β′ = β + 2(n + 8)·u·α` (clipping is 1-Lipschitz; the second term covers its rounding,
//! `u = 2^-53`), so the Gram matrix `YYᵀ` changes by `ỹỹᵀ − yyᵀ`, of Frobenius norm at most
//! `‖ỹ − y‖(‖ỹ‖ + ‖y‖) ≤ 2αβ′`; its upper triangle (the `n(n+1)/2` released values) moves by
//! at most that in L2. The Gram matrix is computed in `f64` with error at most
//! `γ_d·d·α²` per entry (`|Σ_c y_ic y_jc|` over `d` products, each row of norm `≤ √d·α`). The
//! upper triangle is released on a public grid with exact discrete Gaussian noise calibrated
//! by the analytic Gaussian mechanism ([`crate::grid_release`]); the lower triangle is its
//! mirror and `P` is post-processing. Every released `B_ij` is an exact multiple of the
//! grid's `Λ`.
//!
//! **Accuracy.** The noise does not depend on the data: `σ ≈ σ_AG(ε, δ)·2αβ` per entry.
//! Paper 000's `B` instead averages `k` Wishart samples, with a relative error of order
//! `√(2/k)`, where the privacy condition caps `k` by `ε`, `δ`, `α`, `β`, `η` and `n`
//! (`docs/PRIVACY.md` §3); the quickstart prints both on the worked example of
//! `docs/PAPERS.md` T0-A.

use crate::accounting::composition::basic_composition_k;
use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::attention::normalise_scores;
use crate::attention_options::ScoreFn;
use crate::batched::{BatchedMut, BatchedRef};
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::directed_rounding::{add_up, count_up, div_up, mul_up, sqrt_up};
use crate::element::Element;
use crate::error::{Error, Result, positive_finite};
use crate::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat, NoiseMode};
use crate::matrix_view::MatRef;
use crate::privacy_params::PrivacyBudget;
use crate::sampling::MAX_WINDOW_ELEMENTS;
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

/// The privacy unit: one feature column of one problem, moved by at most `β`.
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::FeatureColumn;

/// Stream ids one release uses.
pub const STREAMS: u64 = 1;

/// Unit roundoff of `f64`.
const U: f64 = 1.0 / 9_007_199_254_740_992.0;

/// Public parameters of [`gram_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GramAttentionParams {
    /// `(ε, δ)` of one problem; `δ > 0`.
    pub budget: PrivacyBudget,
    /// `α`: private columns are clipped to this ℓ2 norm; in `[1e-100, 1e100]`.
    pub column_norm: f64,
    /// `β ∈ (0, 2α]`: how far one column of a neighbour may move in ℓ2.
    pub neighbour_distance: f64,
    /// `f` of `P = D(B)⁻¹ f(B)`.
    pub score: ScoreFn,
    /// Neighbouring inputs differ only inside one batch element (different data subjects per
    /// batch element): charge `heads` problems instead of `batch · heads`.
    pub batch_elements_disjoint: bool,
}

impl GramAttentionParams {
    /// `exp`, every problem charged.
    ///
    /// ```
    /// use dpattn_core::PrivacyBudget;
    /// use dpattn_core::gram_attention::GramAttentionParams;
    /// let p = GramAttentionParams::new(PrivacyBudget::new(0.09, 1e-6)?, 1.0, 5e-6);
    /// assert!(!p.batch_elements_disjoint);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn new(budget: PrivacyBudget, column_norm: f64, neighbour_distance: f64) -> Self {
        Self {
            budget,
            column_norm,
            neighbour_distance,
            score: ScoreFn::Exp,
            batch_elements_disjoint: false,
        }
    }

    /// The release's grid for problems of `n × d` (public: a function of the parameters and
    /// the shape only): Δ = `2αβ′`, `n(n+1)/2` coordinates, the Gram error, values bounded by
    /// `d·α²`.
    ///
    /// ```
    /// use dpattn_core::PrivacyBudget;
    /// use dpattn_core::gram_attention::GramAttentionParams;
    /// let p = GramAttentionParams::new(PrivacyBudget::new(1.0, 1e-6)?, 1.0, 0.5);
    /// let g = p.grid(4, 16)?;
    /// assert!(g.rounded_sensitivity() >= 1.0 && g.inflation() < 0.005);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for parameters outside their domains or a zero size.
    pub fn grid(&self, n: usize, d: usize) -> Result<GaussianGrid> {
        let alpha = self.column_norm;
        crate::error::check_radius("column_norm", alpha)?;
        let beta = positive_finite("neighbour_distance", self.neighbour_distance)?;
        if beta > 2.0 * alpha {
            return Err(Error::OutOfRange {
                name: "neighbour_distance",
                value: beta,
                allowed: "(0, 2 * column_norm]: two clipped columns are at most 2α apart",
            });
        }
        let delta = self.budget.delta().get();
        if delta <= 0.0 {
            return Err(Error::OutOfRange {
                name: "delta",
                value: delta,
                allowed: "(0, 1) for the Gaussian mechanism",
            });
        }
        for (name, v) in [("n", n), ("d", d)] {
            if v == 0 {
                return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
            }
        }
        let n64 = count_up(n as u64);
        // β′ = β + 2(n + 8)·u·α, Δ = 2αβ′.
        let beta_r = add_up(beta, mul_up(mul_up(2.0 * U, add_up(n64, 8.0)), alpha));
        let sens = mul_up(2.0 * alpha, beta_r);
        let m = triangle(n)?;
        let d64 = count_up(d as u64);
        let value_bound = mul_up(d64, mul_up(alpha, alpha));
        let gamma_d = div_up(mul_up(d64, U), 1.0 - d64 * U);
        let spec = GaussianGridSpec {
            l2_sensitivity: sens,
            dimension: m,
            computation_error: mul_up(sqrt_up(count_up(m)), mul_up(gamma_d, value_bound)),
            value_bound,
            format: GridFormat::F64,
        };
        let multiplier = analytic_gaussian_sigma(self.budget.epsilon().get(), delta, 1.0)?;
        GaussianGrid::calibrate(&spec, multiplier)
    }

    /// The composed budget of one call on `[batch, heads, ·, ·]` and its zCDP `ρ`.
    fn total(
        &self,
        batch: usize,
        heads: usize,
        grid: &GaussianGrid,
    ) -> Result<(PrivacyBudget, f64)> {
        let problems = if self.batch_elements_disjoint {
            heads
        } else {
            batch.checked_mul(heads).ok_or(Error::SizeOverflow { what: "batch · heads" })?
        };
        let budget = basic_composition_k(self.budget, problems as u64)?;
        Ok((budget, mul_up(count_up(problems as u64), grid.rho())))
    }
}

/// `n(n+1)/2`.
fn triangle(n: usize) -> Result<u64> {
    (n as u64)
        .checked_mul(n as u64 + 1)
        .map(|x| x / 2)
        .ok_or(Error::SizeOverflow { what: "n(n+1)/2" })
}

/// Scratch (`f64` elements) of [`gram_attention`] for `d` features: the clip factors.
///
/// ```
/// assert_eq!(dpattn_core::gram_attention::gram_attention_scratch_len(64), 64);
/// ```
pub fn gram_attention_scratch_len(d: usize) -> usize {
    d
}

/// What one call released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GramReport {
    /// The grid of every problem (the same for all: it depends on public values only).
    pub grid: GaussianGrid,
    /// The composed `(ε, δ)` charged for the call.
    pub charged: PrivacyBudget,
    /// The noise mode (always exact).
    pub noise_mode: NoiseMode,
}

/// Releases `B = XXᵀ + Z` (exact grid release of the upper triangle, mirrored) into `out_b`
/// and `P = D(B)⁻¹ f(B)` into `out_p` for every problem `x[b, h]` (`n × d`); see the
/// [module documentation](self).
///
/// Entry `(i, j)`, `i ≤ j`, of problem `p = b·heads + h` draws its integer noise from the
/// exact-sampler window of element `p·n(n+1)/2 + i·n − i(i−1)/2 + (j − i)` of the release's
/// stream (a fresh one from `session`). The session's ledger (kept for [`PRIVACY_UNIT`]) is
/// charged the composed `(ε, δ)` (approximate-DP ledgers) or `ρ` (zCDP and RDP ledgers)
/// after every check and before anything is written.
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::gram_attention::{GramAttentionParams, gram_attention, gram_attention_scratch_len};
/// use dpattn_core::session::Session;
/// use dpattn_core::{BatchedMut, BatchedRef, PrivacyBudget};
/// let (n, d) = (4, 8);
/// let x: Vec<f64> = (0..n * d).map(|i| ((i % 5) as f64 - 2.0) / 4.0).collect();
/// let params = GramAttentionParams::new(PrivacyBudget::new(1.0, 1e-6)?, 1.0, 0.1);
/// let (mut b, mut p) = (vec![0.0; n * n], vec![0.0; n * n]);
/// let ledger = Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(2.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let report = gram_attention(
///     BatchedMut::contiguous(&mut b, [1, 1, n, n])?,
///     BatchedMut::contiguous(&mut p, [1, 1, n, n])?,
///     BatchedRef::contiguous(&x, [1, 1, n, d])?,
///     &params, &mut session, &mut vec![0.0; gram_attention_scratch_len(d)],
/// )?;
/// let l = report.grid.resolution();
/// assert!(b.iter().all(|v| (v / l).fract() == 0.0)); // on the public grid
/// assert!((p[..n].iter().sum::<f64>() - 1.0).abs() < 1e-12);
/// assert_eq!(session.ledger().charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for bad parameters ([`GramAttentionParams::grid`]) or a call whose
/// element indices reach `2^40`; [`Error::ShapeMismatch`] for outputs not
/// `[batch, heads, n, n]`; [`Error::ScratchTooSmall`]; the ledger's error when the charge does
/// not fit. Nothing about the private `X` can make the call fail. On error nothing is written
/// and nothing is charged.
pub fn gram_attention<T: Element, const N: usize>(
    out_b: BatchedMut<'_, f64>,
    out_p: BatchedMut<'_, f64>,
    x: BatchedRef<'_, T>,
    params: &GramAttentionParams,
    session: &mut Session<N>,
    scratch: &mut [f64],
) -> Result<GramReport> {
    let r = session.begin(STREAMS)?;
    gram_attention_keyed(out_b, out_p, x, params, r.draw, Some(r.ledger), scratch)
}

/// [`gram_attention`] with an explicit key and stream id (`draw.stream` is its one stream)
/// and an optional ledger: **for replay, audit, and hosts that manage their own stream ids**
/// — a `(key, stream)` pair must never serve two releases.
///
/// # Errors
/// As [`gram_attention`].
pub fn gram_attention_keyed<T: Element>(
    mut out_b: BatchedMut<'_, f64>,
    mut out_p: BatchedMut<'_, f64>,
    x: BatchedRef<'_, T>,
    params: &GramAttentionParams,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    scratch: &mut [f64],
) -> Result<GramReport> {
    let [batch, heads, n, d] = x.layout().shape();
    for (name, v) in [("batch", batch), ("heads", heads)] {
        if v == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    let grid = params.grid(n, d)?;
    for out in [out_b.layout(), out_p.layout()] {
        for (axis, expected) in [(0, batch), (1, heads), (2, n), (3, n)] {
            out.expect_axis("out", axis, expected)?;
        }
    }
    check_scratch(scratch.len(), gram_attention_scratch_len(d))?;
    let per = triangle(n)?;
    let problems = (batch as u128) * (heads as u128);
    if problems * u128::from(per) > u128::from(MAX_WINDOW_ELEMENTS) {
        return Err(Error::OutOfRange {
            name: "released elements (batch * heads * n(n+1)/2)",
            value: (problems * u128::from(per)) as f64,
            allowed: "at most 2^40 (the exact samplers' windows)",
        });
    }
    let (charged, rho) = params.total(batch, heads, &grid)?;
    if let Some(ledger) = ledger {
        let cost = Cost::Gaussian { approx: Some(charged), rho };
        ledger.charge(PRIVACY_UNIT, &cost, NoiseMode::Exact)?;
    }
    let factors = &mut scratch[..d];
    let draw = draw.keyed(0);
    let mut run = || -> Result<()> {
        for b in 0..batch {
            for h in 0..heads {
                let first = (b * heads + h) as u64 * per;
                let xh = x.head(b, h);
                clip_factors(xh, params.column_norm, factors);
                let mut ob = out_b.head_mut(b, h);
                for i in 0..n {
                    for j in i..n {
                        ob.row_mut(i)[j] = clipped_dot(xh, factors, i, j);
                    }
                    let offset = (i * n - i * i.saturating_sub(1) / 2) as u64;
                    grid.release_keyed(&draw, first + offset, &mut ob.row_mut(i)[i..])?;
                    for j in 0..i {
                        let v = ob.rb().row(j)[i];
                        ob.row_mut(i)[j] = v;
                    }
                }
                let mut op = out_p.head_mut(b, h);
                op.copy_from(ob.rb())?;
                normalise_scores(op, params.score)?;
            }
        }
        Ok(())
    };
    let result = run();
    factors.fill(0.0);
    result.map(|()| GramReport { grid, charged, noise_mode: NoiseMode::Exact })
}

/// The clip factor of every column of `x` (`n × d`): `1` for a column of computed norm at
/// most `α(1 − (n + 16)ε)`, `α(1 − (n + 16)ε)/‖x_c‖` above (exact norm `≤ α` after
/// rounding, the margin rule of `dp_forward::clip`), `0` for a column holding NaN/±∞.
fn clip_factors<T: Element>(x: MatRef<'_, T>, alpha: f64, factors: &mut [f64]) {
    let n = x.rows();
    // The margin covers the computed norm's relative error, below (n + 4)·u, and the
    // rounding of the scaled entries.
    let target = alpha * (1.0 - (n as f64 + 16.0) * f64::EPSILON);
    for (c, f) in factors.iter_mut().enumerate() {
        let (mut big, mut finite) = (0.0f64, true);
        for i in 0..n {
            let v = x.row(i)[c].to_f64();
            finite &= v.is_finite();
            big = big.max(v.abs());
        }
        if !finite {
            *f = 0.0;
            continue;
        }
        if big == 0.0 {
            *f = 1.0;
            continue;
        }
        let sum_sq: f64 = (0..n)
            .map(|i| {
                let r = x.row(i)[c].to_f64() / big;
                r * r
            })
            .sum();
        let root = libm::sqrt(sum_sq);
        // target/‖x_c‖ without forming ‖x_c‖ (which can overflow for huge finite entries).
        let ratio = (target / big) / root;
        *f = if ratio >= 1.0 { 1.0 } else { ratio };
    }
}

/// `Σ_c (f_c x_ic)(f_c x_jc)` with each clipped entry rounded once, in `f64`.
fn clipped_dot<T: Element>(x: MatRef<'_, T>, factors: &[f64], i: usize, j: usize) -> f64 {
    let (ri, rj) = (x.row(i), x.row(j));
    let mut s = 0.0;
    for ((a, b), &f) in ri.iter().zip(rj).zip(factors) {
        let clip = |v: f64| {
            if f == 1.0 {
                v
            } else if f == 0.0 {
                0.0
            } else {
                v * f
            }
        };
        s += clip(a.to_f64()) * clip(b.to_f64());
    }
    s
}
