//! DPAttention (Algorithm 1 of paper 000), batched over heads: for every problem
//! `X_{b,h}` (`n × d`), `A = XXᵀ`, `B = DPCovariance(A, k)`, `P = D(B)⁻¹ f(B)`.
//!
//! **Guarantee** (Theorem 4.1 Part 2 via Theorem 5.9; `docs/PRIVACY.md` §3): each problem's
//! `(B, P)` is `(ε, δ)`-DP with respect to one feature column of its `X` moving by at most
//! `β` in ℓ2, provided every possible input lies in the declared `(α, η)`-good domain. The
//! whole call composes over problems (basic composition, or parallel over batch elements
//! when the caller declares them disjoint) and is charged to the ledger once.

use crate::accounting::composition::basic_composition_k;
use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::attention::normalise_scores;
use crate::attention_options::ScoreFn;
use crate::batched::{BatchedMut, BatchedRef};
use crate::element::Element;
use crate::error::{Error, PrivateDetail, Result, mul_size};
use crate::grid_release::NoiseMode;
use crate::matrix_view::MatRef;
use crate::privacy_params::PrivacyBudget;
use crate::scratch::{check_scratch, scratch_len_sum, take_scratch};
use crate::session::{Draw, Session};

use super::calibration::{Calibration, DeltaConstants, Domain, SensitivityBound, check_privacy};
use super::covariance::{
    SAMPLE_BLOCK, Sampler, check_k, check_stream_capacity, factor_free, factor_free_scratch_len,
    sample_from_factor,
};
use crate::linalg::{cholesky_in_place, gram, symmetric_min_eigenvalue};

/// The privacy unit: one feature column of one problem's `X`, moved by at most `β`.
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::FeatureColumn;

/// Stream ids one release uses.
pub const STREAMS: u64 = 1;

/// What the mechanism does with private data outside the declared domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutOfDomain {
    /// Refuse with [`Error::DomainViolation`] (the paper's setting). The refusal is a
    /// data-dependent event that the guarantee does not cover: show it only to the data
    /// holder. Requires `d ≥ n`.
    #[default]
    Reject,
    /// `[EXT]` (`docs/PAPERS.md` P0-16, not in the paper): replace every column holding a NaN
    /// or an infinity by the zero column, clip every column to norm `α` and append the
    /// public columns `√η·I_n`, so the mechanism runs on `A' = X_c X_cᵀ + η·I ⪰ η·I` and
    /// never refuses private data (a non-finite entry included). The steps preserve
    /// β-closeness (zeroing is the identity on finite columns, clipping is 1-Lipschitz and
    /// its factor is computed without overflow for every finite column; the appended
    /// columns are the same for all neighbours), so the guarantee holds for every pair of
    /// finite neighbours; for non-finite inputs see the [module docs](super). The release
    /// then estimates `A + η·I`: every diagonal logit is shifted by `η` (and clipped
    /// columns shrink). Allows `d < n`. With the Bartlett or literal sampler the public parameters
    /// must satisfy `η ≥ 20·n^2.5·u·(d·α² + η)` (`u = 2^-53`), which guarantees that the
    /// Cholesky factorisation of `A'` succeeds in floating point (checked up front, an
    /// [`Error::OutOfRange`]); the factor-free sampler needs no factorisation.
    ClipAndRidge,
}

/// Parameters of [`gaussian_sampling_attention`](super::gaussian_sampling_attention()).
/// All of them are public and must be fixed without looking at the private `X`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianSamplingParams {
    /// `(ε, δ)` of one problem: `ε ∈ (0, 1)`, `δ ∈ (0, 0.1)`.
    pub budget: PrivacyBudget,
    /// The declared data domain `(α, η, β)`.
    pub domain: Domain,
    /// The number of Gaussian samples `k` (see `feasible_k`). More samples: more accuracy,
    /// less privacy.
    pub k: u64,
    /// `f` of `D(B)⁻¹ f(B)`: [`ScoreFn::Exp`] or [`ScoreFn::Cosh`].
    pub score: ScoreFn,
    /// How `B` is drawn (the same law for all three).
    pub sampler: Sampler,
    /// Which `Δ(k)` constants the privacy check uses.
    pub constants: DeltaConstants,
    /// Which sensitivity bound the privacy check uses.
    pub sensitivity: SensitivityBound,
    /// Reject or clip-and-ridge out-of-domain data.
    pub out_of_domain: OutOfDomain,
    /// Declare that neighbouring inputs differ only inside one batch element (different
    /// data subjects per batch element): the call is then charged `heads` releases (parallel
    /// composition) instead of `batch · heads`.
    pub batch_elements_disjoint: bool,
    /// Must be [`NoiseMode::UnsafeFloat`] ([`unsafe_float`](Self::unsafe_float)): the
    /// mechanism has no floating-point-safe form (`docs/PRIVACY.md` §3.5), so in the
    /// default [`NoiseMode::Exact`] every release is refused with [`Error::Unsupported`].
    /// The exact route for the same privacy unit is [`crate::gram_attention`].
    pub noise_mode: NoiseMode,
}

impl GaussianSamplingParams {
    /// Paper-literal defaults: `exp`, Bartlett sampler, Theorem 4.1 constants,
    /// `2αβ√n/η`, reject out-of-domain data, every problem charged.
    pub fn new(budget: PrivacyBudget, domain: Domain, k: u64) -> Self {
        Self {
            budget,
            domain,
            k,
            score: ScoreFn::Exp,
            sampler: Sampler::Bartlett,
            constants: DeltaConstants::Theorem41,
            sensitivity: SensitivityBound::PaperSqrtN,
            out_of_domain: OutOfDomain::Reject,
            batch_elements_disjoint: false,
            noise_mode: NoiseMode::Exact,
        }
    }

    /// These parameters in [`NoiseMode::UnsafeFloat`], the only mode the mechanism runs in:
    /// its `(ε, δ)` holds for the idealised mechanism on real numbers, **not** for the
    /// floating-point samples it releases (`docs/PRIVACY.md` §3.5).
    ///
    /// ```
    /// use dpattn_core::{NoiseMode, PrivacyBudget};
    /// use dpattn_core::gaussian_sampling_attention::{Domain, GaussianSamplingParams};
    /// let domain = Domain { alpha: 1.0, eta: 0.5, beta: 5e-6 };
    /// let p = GaussianSamplingParams::new(PrivacyBudget::new(0.09, 1e-6)?, domain, 300_000);
    /// assert_eq!(p.noise_mode, NoiseMode::Exact); // refused when released
    /// assert_eq!(p.unsafe_float().noise_mode, NoiseMode::UnsafeFloat);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn unsafe_float(self) -> Self {
        Self { noise_mode: NoiseMode::UnsafeFloat, ..self }
    }

    fn calibration(&self) -> Calibration {
        Calibration {
            constants: self.constants,
            sensitivity: self.sensitivity,
            ..Calibration::PAPER_LITERAL
        }
    }
}

/// Private diagnostics of a release, for the data holder only. **Never publish these**:
/// they are functions of the private `X` (`docs/PAPERS.md` P0-15).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrivateReport {
    /// Largest column norm of any problem, before clipping (`+∞` when a column held a NaN
    /// or an infinity, which [`OutOfDomain::ClipAndRidge`] zeroed).
    pub alpha_hat: f64,
    /// Largest `|A_ij| = max_i (XXᵀ)_ii` of any problem, of the matrix the mechanism runs on
    /// before the ridge (after clipping in [`OutOfDomain::ClipAndRidge`]): compare with the
    /// public `r` of the accuracy statement.
    pub r_hat: f64,
    /// Columns clipped to `α`, or zeroed because they held a NaN or an infinity (always 0
    /// with [`OutOfDomain::Reject`]).
    pub clipped_columns: usize,
}

/// Scratch (`f64` elements) for one call with problems of `n × d`.
///
/// ```
/// use dpattn_core::gaussian_sampling_attention::{OutOfDomain, Sampler, gaussian_sampling_attention_scratch_len};
/// let len = gaussian_sampling_attention_scratch_len(4, 64, Sampler::Bartlett, OutOfDomain::Reject)?;
/// assert_eq!(len, 64 + 2 * 16 + 4); // clip factors, A, then T and one row
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for a zero size; [`Error::SizeOverflow`].
pub fn gaussian_sampling_attention_scratch_len(
    n: usize,
    d: usize,
    sampler: Sampler,
    out_of_domain: OutOfDomain,
) -> Result<usize> {
    if n == 0 || d == 0 {
        return Err(Error::OutOfRange { name: "n, d", value: 0.0, allowed: ">= 1" });
    }
    let nn = mul_size(n, n, "n²")?;
    let sampling = match sampler {
        // T and one row (the factor L lives in the `a` part).
        Sampler::Bartlett => scratch_len_sum(&[nn, n])?,
        Sampler::Literal => scratch_len_sum(&[nn, mul_size(SAMPLE_BLOCK, n, "block")?])?,
        // Its own accumulator and blocks; its factors are the clip factors.
        Sampler::FactorFree => {
            factor_free_scratch_len(n, d, out_of_domain == OutOfDomain::ClipAndRidge)? - d
        }
    };
    // clip factors (d), A / L (n²), then the larger of the domain check (n²) and sampling.
    scratch_len_sum(&[d, nn, sampling.max(nn)])
}

/// The per-problem state both passes compute identically: the Gram matrix of the
/// (clipped, ridged) problem in `a` and its clip factors in `factors`.
struct Problem {
    alpha_hat: f64,
    r_hat: f64,
    clipped: usize,
}

fn prepare<T: Element>(
    x: MatRef<'_, T>,
    p: &GaussianSamplingParams,
    factors: &mut [f64],
    a: &mut [f64],
) -> Problem {
    let n = x.rows();
    let ridge_mode = p.out_of_domain == OutOfDomain::ClipAndRidge;
    let clip = ridge_mode.then_some(p.domain.alpha);
    let (alpha_hat, clipped) = gram(x, clip, 0.0, factors, a);
    let r_hat = (0..n).map(|i| a[i * n + i]).fold(0.0, f64::max);
    if ridge_mode {
        for i in 0..n {
            a[i * n + i] += p.domain.eta;
        }
    }
    Problem { alpha_hat, r_hat, clipped }
}

/// The private domain check of one problem (Reject mode): `max‖x_c‖ ≤ α` and
/// `λ_min(XXᵀ) ≥ η` (Cholesky of `A − ηI`; on failure the exact `λ_min` by Jacobi goes into
/// the error's private detail), then that `A` itself factors. `work` holds `n²` elements.
fn check_domain(
    a: &[f64],
    n: usize,
    prob: &Problem,
    p: &GaussianSamplingParams,
    work: &mut [f64],
) -> Result<()> {
    if p.out_of_domain == OutOfDomain::Reject {
        if prob.alpha_hat > p.domain.alpha {
            return Err(Error::DomainViolation {
                condition: "every column norm ‖X[:, c]‖₂ ≤ α",
                detail: PrivateDetail::from_measured(prob.alpha_hat),
            });
        }
        work[..n * n].copy_from_slice(&a[..n * n]);
        for i in 0..n {
            work[i * n + i] -= p.domain.eta;
        }
        if cholesky_in_place(&mut work[..n * n], n).is_err() {
            work[..n * n].copy_from_slice(&a[..n * n]);
            let lambda = symmetric_min_eigenvalue(&mut work[..n * n], n);
            return Err(Error::DomainViolation {
                condition: "λ_min(X Xᵀ) ≥ η",
                detail: PrivateDetail::from_measured(lambda),
            });
        }
    }
    if p.out_of_domain == OutOfDomain::ClipAndRidge && p.sampler == Sampler::FactorFree {
        return Ok(()); // no factorisation is used: nothing can fail
    }
    work[..n * n].copy_from_slice(&a[..n * n]);
    cholesky_in_place(&mut work[..n * n], n).map_err(|(_, pivot)| Error::DomainViolation {
        condition: "X Xᵀ positive definite (a Cholesky pivot is not positive)",
        detail: PrivateDetail::from_measured(pivot),
    })
}

/// Public magnitude guards (no data read). Every entry of `A` is at most `d·α² + η` for any
/// input the call accepts (columns of norm `≤ α`), so bounding that by `2^900` keeps `A`,
/// `k·B` and `B` finite (`k ≤ 2^53`; the Wishart factor is bounded by the samplers' bounded
/// normals). In clip-and-ridge mode with a factorising sampler, Demmel's condition
/// `20·n^{3/2}·κ₂·u ≤ 1` (Higham, *Accuracy and Stability*, Thm 10.7) with
/// `κ₂ ≤ n(dα² + η)/η` makes the Cholesky of `X_c X_cᵀ + ηI` succeed for every input.
fn check_public_scale(n: usize, d: usize, p: &GaussianSamplingParams) -> Result<()> {
    let (alpha, eta) = (p.domain.alpha, p.domain.eta);
    let top = (d as f64) * alpha * alpha + eta;
    if top.is_nan() || top > libm::ldexp(1.0, 900) {
        return Err(Error::OutOfRange {
            name: "d·α² + η (largest possible Gram entry)",
            value: top,
            allowed: "[0, 2^900] (keeps B finite)",
        });
    }
    if p.out_of_domain == OutOfDomain::ClipAndRidge && p.sampler != Sampler::FactorFree {
        let nf = n as f64;
        let needed = 20.0 * nf * nf * libm::sqrt(nf) * f64::EPSILON / 2.0 * top;
        if needed > eta {
            return Err(Error::OutOfRange {
                name: "η (clip-and-ridge: too small against d·α² for a guaranteed Cholesky; raise η or use Sampler::FactorFree)",
                value: eta,
                allowed: "η ≥ 20·n^2.5·u·(d·α² + η)",
            });
        }
    }
    Ok(())
}

/// The privacy charge of one call: `(ε, δ)` composed over the charged problems.
fn charge(p: &GaussianSamplingParams, batch: usize, heads: usize) -> Result<PrivacyBudget> {
    let problems = if p.batch_elements_disjoint { heads } else { batch * heads };
    basic_composition_k(p.budget, problems as u64)
}

/// The public checks of one release on an input of shape `[batch, heads, n, d]`, exactly
/// those [`gaussian_sampling_attention`](super::gaussian_sampling_attention()) runs before
/// it reads any data, in its order: non-zero sizes; `d ≥ n` in reject mode; the domain
/// `(α, η, β)`; the privacy condition `s < Δ(k)` ([`check_privacy`]); a non-empty declared
/// domain in reject mode; `k ∈ [1, 2^53]` (and `k ≥ n` for the Bartlett sampler); the
/// public magnitude guard `d·α² + η ≤ 2^900` (and, for clip-and-ridge with a factorising
/// sampler, the ridge that guarantees the Cholesky factorisation); that every noise
/// element index of the release fits the stream. Nothing here reads private data, so the
/// outcome may be shown to anyone.
///
/// Returns the `(ε, δ)` the call is charged: `params.budget` composed (basic composition)
/// over `batch · heads` problems, or over `heads` when `batch_elements_disjoint`.
/// Other implementations of the same release (the GPU kernels of `dpattn-cuda`) call it so
/// that both refuse exactly the same public parameters.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::gaussian_sampling_attention::{
///     Domain, GaussianSamplingParams, check_release_parameters};
/// let domain = Domain::new(0.04, 0.05, 1e-6)?;
/// let params = GaussianSamplingParams::new(PrivacyBudget::new(0.09, 1e-6)?, domain, 100_000);
/// assert!(check_release_parameters(&params, [1, 2, 2, 64]).is_err()); // exact mode: refused
/// let params = params.unsafe_float();
/// let total = check_release_parameters(&params, [1, 2, 2, 64])?;
/// assert!((total.epsilon().get() - 0.18).abs() < 1e-12); // two problems, basic composition
/// assert!(check_release_parameters(&params, [1, 1, 0, 64]).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`gaussian_sampling_attention`](super::gaussian_sampling_attention()) for the
/// conditions above: [`Error::OutOfRange`], [`Error::ShapeMismatch`], [`Error::Infeasible`],
/// [`Error::SizeOverflow`].
pub fn check_release_parameters(
    params: &GaussianSamplingParams,
    shape: [usize; 4],
) -> Result<PrivacyBudget> {
    if params.noise_mode == NoiseMode::ConstantTime {
        return Err(crate::grid_release::CONSTANT_TIME_UNSUPPORTED);
    }
    if params.noise_mode == NoiseMode::Exact {
        return Err(Error::Unsupported {
            what: "paper 000's Gaussian sampling in NoiseMode::Exact: it has no floating-point-safe form \
                   (docs/PRIVACY.md §3.5); use gram_attention for an exact release with the same privacy \
                   unit, or set noise_mode to NoiseMode::UnsafeFloat to run it anyway",
        });
    }
    let [batch, heads, n, d] = shape;
    for (name, v) in [("batch", batch), ("heads", heads), ("n", n), ("d", d)] {
        if v == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: ">= 1" });
        }
    }
    let reject = params.out_of_domain == OutOfDomain::Reject;
    if reject && d < n {
        return Err(Error::ShapeMismatch {
            arg: "x",
            axis: "dim d (Theorem 4.1 needs d ≥ n; use OutOfDomain::ClipAndRidge otherwise)",
            expected: n,
            got: d,
        });
    }
    params.domain.validate()?;
    check_privacy(n, params.k, &params.domain, params.budget, &params.calibration())?;
    if reject {
        params.domain.check_nonempty(n, d)?;
    }
    check_k(params.k, n, params.sampler)?;
    check_public_scale(n, d, params)?;
    let problems =
        batch.checked_mul(heads).ok_or(Error::SizeOverflow { what: "batch · heads" })?;
    let ridged =
        if reject { d } else { d.checked_add(n).ok_or(Error::SizeOverflow { what: "d + n" })? };
    check_stream_capacity(params.sampler, problems as u64, n, ridged, params.k)?;
    charge(params, batch, heads)
}

/// DPAttention: `B = DPCovariance(XXᵀ, k)` and `P = D(B)⁻¹ f(B)` for every problem
/// `x[b, h]` (`n × d`) into `out_b[b, h]` and `out_p[b, h]` (`n × n`). See the
/// [module documentation](super) for the guarantee, the privacy unit, and what must be
/// public.
///
/// Order of work: shapes and public parameters (the privacy condition `s < Δ(k)`, with
/// [`Error::Infeasible`] naming it); finiteness (reject mode only: clip-and-ridge zeroes a
/// non-finite column instead) and scratch; the private domain check of every problem; then the
/// ledger is charged (once, the composed `(ε, δ)` of all charged problems); then the releases are
/// drawn. Any error leaves `out_b`, `out_p` and the ledger untouched (every condition that could
/// fail while drawing is checked before the charge: stream capacity, and the public bound
/// `d·α² + η ≤ 2^900` that keeps `B` finite). The part of `scratch` the call uses is zeroed before
/// it returns, so the private `XXᵀ` and its factor do not outlive the call. Randomness: one keyed
/// stream `(key, stream)` for the whole call; problem `b·heads + h` reads the elements the
/// [`Sampler`] documents.
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::{BatchedMut, BatchedRef, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::gaussian_sampling_attention::{
///     Domain, GaussianSamplingParams, OutOfDomain, Sampler, gaussian_sampling_attention,
///     gaussian_sampling_attention_scratch_len};
/// use dpattn_core::session::Session;
/// // Two tokens, 64 features; X Xᵀ = 0.05·I, columns of norm 0.04 (the shape of
/// // docs/PAPERS.md T0-A).
/// let (n, d) = (2, 64);
/// let x: Vec<f64> = (0..n * d).map(|i| {
///     let (row, col) = (i / d, i % d);
///     0.028 * if row == 1 && col % 2 == 1 { -1.0 } else { 1.0 }
/// }).collect();
/// let domain = Domain::new(0.04, 0.05, 1e-6)?;
/// let params = GaussianSamplingParams::new(PrivacyBudget::new(0.09, 1e-6)?, domain, 100_000)
///     .unsafe_float(); // no floating-point-safe form (module docs)
/// let (mut b, mut p) = (vec![0.0; n * n], vec![0.0; n * n]);
/// let mut scratch = vec![0.0; gaussian_sampling_attention_scratch_len(n, d, Sampler::Bartlett, OutOfDomain::Reject)?];
/// let ledger = Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(1.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let report = gaussian_sampling_attention(
///     BatchedMut::contiguous(&mut b, [1, 1, n, n])?, BatchedMut::contiguous(&mut p, [1, 1, n, n])?,
///     BatchedRef::contiguous(&x, [1, 1, n, d])?, &params, &mut session, &mut scratch)?;
/// assert!((p[0] + p[1] - 1.0).abs() < 1e-15);
/// assert_eq!(session.ledger().unsafe_float_charges(), 1); // counted as not DP as shipped
/// assert!(report.alpha_hat <= 0.04); // private: for the data holder only
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Unsupported`] in [`NoiseMode::Exact`] (the default: the mechanism has no
/// floating-point-safe form, `docs/PRIVACY.md` §3.5);
/// [`Error::ShapeMismatch`] (any axis; `d < n` in reject mode), [`Error::OutOfRange`]
/// (`ε ∉ (0, 1)`, `δ ∉ (0, 0.1)`, `k ∉ [1, 2^53]`, Bartlett with `k < n`, a bad domain,
/// problem indices past the stream's window range), [`Error::Infeasible`] (the privacy
/// condition, or an empty declared domain), [`Error::ScratchTooSmall`], or the ledger's
/// error when the charge does not fit; in reject mode only (**data-dependent refusals**),
/// [`Error::PrivateNonFinite`] and [`Error::DomainViolation`] (private data outside the
/// domain; the measured `α̂`, `λ_min` or pivot only through [`Error::private_detail`]).
pub fn gaussian_sampling_attention<T: Element, const N: usize>(
    out_b: BatchedMut<'_, f64>,
    out_p: BatchedMut<'_, f64>,
    x: BatchedRef<'_, T>,
    params: &GaussianSamplingParams,
    session: &mut Session<N>,
    scratch: &mut [f64],
) -> Result<PrivateReport> {
    let r = session.begin(STREAMS)?;
    gaussian_sampling_attention_keyed(out_b, out_p, x, params, r.draw, Some(r.ledger), scratch)
}

/// [`gaussian_sampling_attention`] with an explicit key and stream id (`draw.stream` is its
/// one stream) and an optional ledger: **for replay, audit, and hosts that manage their own
/// stream ids** — a `(key, stream)` pair must never serve two releases.
///
/// # Errors
/// As [`gaussian_sampling_attention`].
pub fn gaussian_sampling_attention_keyed<T: Element>(
    out_b: BatchedMut<'_, f64>,
    out_p: BatchedMut<'_, f64>,
    x: BatchedRef<'_, T>,
    params: &GaussianSamplingParams,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    scratch: &mut [f64],
) -> Result<PrivateReport> {
    let [_, _, n, d] = x.layout().shape();
    let result = release_all(out_b, out_p, x, params, draw, ledger, scratch);
    // The scratch held A = XXᵀ and its Cholesky factor: private intermediates are not left
    // behind in the caller's memory, whatever the outcome (`A` and `L` are private; only `B`
    // and `P_B` are ever released).
    if let Ok(used) =
        gaussian_sampling_attention_scratch_len(n, d, params.sampler, params.out_of_domain)
    {
        let used = used.min(scratch.len());
        scratch[..used].fill(0.0);
    }
    result
}

fn release_all<T: Element>(
    mut out_b: BatchedMut<'_, f64>,
    mut out_p: BatchedMut<'_, f64>,
    x: BatchedRef<'_, T>,
    params: &GaussianSamplingParams,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    scratch: &mut [f64],
) -> Result<PrivateReport> {
    let [batch, heads, n, d] = x.layout().shape();
    let total = check_release_parameters(params, x.layout().shape())?;
    for out in [out_b.layout(), out_p.layout()] {
        for (axis, expected) in [(0, batch), (1, heads), (2, n), (3, n)] {
            out.expect_axis("out", axis, expected)?;
        }
    }
    let reject = params.out_of_domain == OutOfDomain::Reject;
    let needed =
        gaussian_sampling_attention_scratch_len(n, d, params.sampler, params.out_of_domain)?;
    if reject {
        x.check_finite("x")?; // clip-and-ridge zeroes a non-finite column (`gram`)
    }
    check_scratch(scratch.len(), needed)?;
    let (factors, rest) = take_scratch(scratch, d)?;
    let (a, work) = take_scratch(rest, n * n)?;

    // Pass 1: the private domain check of every problem (nothing written yet).
    let mut report = PrivateReport { alpha_hat: 0.0, r_hat: 0.0, clipped_columns: 0 };
    for b in 0..batch {
        for h in 0..heads {
            let prob = prepare(x.head(b, h), params, factors, a);
            check_domain(a, n, &prob, params, work)?;
            report.alpha_hat = report.alpha_hat.max(prob.alpha_hat);
            report.r_hat = report.r_hat.max(prob.r_hat);
            report.clipped_columns += prob.clipped;
        }
    }
    if let Some(ledger) = ledger {
        ledger.charge(PRIVACY_UNIT, &Cost::Approx(total), params.noise_mode)?;
    }

    // Pass 2: the releases (the same deterministic Gram and Cholesky as pass 1). With one
    // problem, `a` and `factors` still hold its Gram matrix and clip factors from pass 1.
    let stream = draw.keyed(0);
    let ridge = if reject { 0.0 } else { params.domain.eta };
    for b in 0..batch {
        for h in 0..heads {
            let problem = (b * heads + h) as u64;
            let xh = x.head(b, h);
            if batch * heads > 1 {
                prepare(xh, params, factors, a);
            }
            let mut ob = out_b.head_mut(b, h);
            if params.sampler == Sampler::FactorFree {
                factor_free(ob.rb_mut(), xh, factors, ridge, params.k, &stream, problem, work)?;
            } else {
                cholesky_in_place(a, n).map_err(|_| Error::Unsupported {
                    what: "a Cholesky factorisation that passed the domain check failed on recomputation",
                })?;
                sample_from_factor(
                    ob.rb_mut(),
                    a,
                    n,
                    params.k,
                    params.sampler,
                    &stream,
                    problem,
                    work,
                )?;
            }
            let mut op = out_p.head_mut(b, h);
            op.copy_from(ob.rb())?;
            normalise_scores(op, params.score)?;
        }
    }
    Ok(report)
}

/// Measures the domain parameters of one private `X` (`n × d`) for the **data holder**:
/// `α̂ = max‖x_c‖`, `η̂ = λ_min(XXᵀ)` (cyclic Jacobi), `r̂ = max (XXᵀ)_ii`. Use it to audit a
/// dataset against a declared domain; never to choose the domain of a release (that would
/// make the calibration depend on private data, breaking DP; `docs/PAPERS.md` P0-15). Returns
/// `(α̂, η̂, r̂)`; `scratch` holds `d + n²` elements.
///
/// ```
/// use dpattn_core::MatRef;
/// use dpattn_core::gaussian_sampling_attention::measure_domain;
/// let x = [3.0f64, 0.0, 0.0, 2.0]; // XXᵀ = diag(9, 4)
/// let mut scratch = [0.0; 6];
/// let (alpha, eta, r) = measure_domain(MatRef::from_row_major(&x, 2, 2)?, &mut scratch)?;
/// assert_eq!((alpha, eta, r), (3.0, 4.0, 9.0));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] (zero size), [`Error::PrivateNonFinite`], [`Error::ScratchTooSmall`].
pub fn measure_domain<T: Element>(
    x: MatRef<'_, T>,
    scratch: &mut [f64],
) -> Result<(f64, f64, f64)> {
    let (n, d) = (x.rows(), x.cols());
    if n == 0 || d == 0 {
        return Err(Error::OutOfRange { name: "n, d", value: 0.0, allowed: ">= 1" });
    }
    x.check_finite("x")?;
    check_scratch(scratch.len(), scratch_len_sum(&[d, mul_size(n, n, "n²")?])?)?;
    let (factors, a) = take_scratch(scratch, d)?;
    let (alpha, _) = gram(x, None, 0.0, factors, a);
    let r = (0..n).map(|i| a[i * n + i]).fold(0.0, f64::max);
    let eta = symmetric_min_eigenvalue(&mut a[..n * n], n);
    Ok((alpha, eta, r))
}
