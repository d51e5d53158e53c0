//! The NoisyHead release: Algorithm 1 end to end on raw prompts, charged to a ledger
//! (`docs/PAPERS.md` §4.4 and §4.8).
//!
//! **Guarantee.** `(ε, δ)`-DP for the released `Γ^T` under replace-one-prompt neighbours
//! (Theorem 3.2, with the per-step condition `ε/T < 1` enforced), given that `Γ⁰` and every
//! parameter are data-independent — in the floats returned under the default
//! [`NoiseMode::Exact`] (each step's iterate is released on a public grid with exact
//! integer noise, module `exact`); for the ideal real mechanism only under
//! [`NoiseMode::UnsafeFloat`]. Noise entry `(t, i, j)` is element `t·D² + i·D + j` of the
//! release's one stream `draw.keyed(0)` (`docs/RANDOMNESS.md` §5.3): a discrete Gaussian
//! from that element's window (exact), or the `f64` Gaussian layout (unsafe float).

use super::features::{Prompts, balanced_private_features, check_len, private_features};
use super::params::{Calibration, NoisyHeadParams};
use super::train::{Form, Stepper, project_ball};
use crate::accounting::cost::Accountant;
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::error::{Error, Result, add_size, mul_size};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, NoiseMode};
use crate::sampling::{FixedWordSampler, Gaussian, KeyedStream};
use crate::scratch::check_scratch;
use crate::session::{Draw, Session};

/// The privacy unit: one whole prompt (its `L + 1` tokens, the labels and the query
/// target), replaced; `N` is public.
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::Prompt;

/// Stream ids one release uses (`draw.stream` only: all `T·D²` noise entries).
pub const STREAMS: u64 = 1;

/// Scratch (in `f64`) for [`noisy_head`]: the private summaries `N(2D + 1)`, the iterate
/// `D²`, and [`Form::scratch_len`].
///
/// # Errors
/// [`Error::SizeOverflow`].
pub fn noisy_head_scratch_len(params: &NoisyHeadParams, form: Form) -> Result<usize> {
    let per_prompt = add_size(mul_size(2, params.d, "2·D")?, 1, "2·D + 1")?;
    let features = mul_size(params.n, per_prompt, "N·(2D + 1)")?;
    let d2 = mul_size(params.d, params.d, "D²")?;
    add_size(add_size(features, d2, "scratch")?, form.scratch_len(params.d)?, "scratch")
}

/// Runs NoisyHead (Algorithm 1) and writes `Γ̂ = Γ^T` (`D × D`, row-major) to `out`,
/// `(ε, δ)`-DP for one prompt (module docs), drawing fresh randomness from `session` and
/// charging its ledger (which must be kept for [`PRIVACY_UNIT`]; [`Error::UnitMismatch`]
/// otherwise).
///
/// Order: every check on public inputs (parameters, shapes, `Γ⁰` finite, scratch) and the
/// calibration ([`NoisyHeadParams::calibrate`], once); then the ledger is charged
/// [`NoisyHeadParams::cost`] (in `params.noise_mode`); then the private summaries are
/// built ([`private_features`]: labels clipped to `±C`, each `Z_k` projected on the
/// `G`-ball, non-finite content sanitised; balanced factors in exact mode),
/// `Γ ← Π_R(Γ⁰)`, and `T` times `Γ ← Π_R(release(next))` with
/// `next = (1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z̃_k⟩ − t_k)Z̃_k`: in exact mode
/// `release(next) = grid.release(next, z_t)` with `z_t` exact discrete Gaussian integers
/// ([`Calibration::grid`]), in unsafe-float mode `next + z_t`, `z_t ~ N(0, s²I)`.
/// Any error leaves `out` and the ledger untouched (the stream id is consumed either way).
/// The part of `scratch` this call used is zeroed before it returns (it held summaries of
/// private prompts). For audit, keep the session's epoch and the stream id
/// (`session.next_stream()` before the call).
///
/// `gamma0` must not depend on the private prompts (use zeros, or a random start drawn
/// with its own key, as `dpattn_paper::noisy_head::random_start` reproduces the paper's).
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::noisy_head::{
///     Accounting, Form, NoisyHeadParams, Prompts, noisy_head, noisy_head_scratch_len,
/// };
/// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
/// use dpattn_core::session::Session;
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// // Public parameters, fixed before the data is seen (N = 1000 prompts of L = 31 tokens in
/// // D = 5; the paper's configurations are in `dpattn_paper::noisy_head::presets`).
/// let mut p = NoisyHeadParams {
///     d: 5, l: 31, n: 1000, lambda: 5.0, eta0: 0.06, iters: 44,
///     clip_c: 4.5, proj_g: 1.4, proj_r: 23.5, sigma: 0.0,
///     budget: PrivacyBudget::new(1.0, 1e-5)?,
///     accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
/// };
/// p.sigma = p.sigma_min(); // the smallest σ of Theorem 3.2
/// let (n, l, d) = (p.n, p.l, p.d);
/// // Synthetic prompts (not private data): Gaussian tokens, labels y = ⟨w, x⟩.
/// let data = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let (mut x, mut q) = (vec![0.0; n * l * d], vec![0.0; n * d]);
/// Gaussian::STANDARD.fill_keyed(&data, 0, &mut x)?;
/// Gaussian::STANDARD.fill_keyed(&data, x.len() as u64, &mut q)?;
/// let w = [0.5, -0.5, 0.25, 0.0, 0.5];
/// let label = |token: &[f64]| -> f64 { token.iter().zip(&w).map(|(a, b)| a * b).sum() };
/// let y: Vec<f64> = x.chunks(d).map(label).collect();
/// let t: Vec<f64> = q.chunks(d).map(label).collect();
/// let prompts = Prompts::new(n, l, d, &x, &y, &q, &t)?;
/// // A session: a key from the operating system, fresh stream ids, a ledger for prompts.
/// let ledger = Ledger::new_approx(PrivacyUnit::Prompt, PrivacyBudget::new(2.0, 1e-4)?);
/// let mut session = Session::new(ledger)?;
/// let mut scratch = vec![0.0; noisy_head_scratch_len(&p, Form::Gram)?];
/// let mut gamma = [0.0; 25];
/// noisy_head(&mut gamma, &[0.0; 25], &prompts, &p, Form::Gram, &mut session, &mut scratch)?;
/// assert!(gamma.iter().map(|g| g * g).sum::<f64>() <= p.proj_r * p.proj_r);
/// assert_eq!(session.ledger().charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`NoisyHeadParams::validate`]; [`Error::ShapeMismatch`] when `prompts` is not
/// `N × L × D` of `params` or `out`, `gamma0` are not `D²` long; [`Error::NonFinite`] for a
/// non-finite `Γ⁰`; [`Error::ScratchTooSmall`]; [`Error::SizeOverflow`] when the session's
/// stream ids are used up; the ledger's error when the charge does not fit
/// ([`Error::UnitMismatch`] for a ledger of another unit). None depends on prompt content.
pub fn noisy_head<const N: usize>(
    out: &mut [f64],
    gamma0: &[f64],
    prompts: &Prompts<'_>,
    params: &NoisyHeadParams,
    form: Form,
    session: &mut Session<N>,
    scratch: &mut [f64],
) -> Result<()> {
    let r = session.begin(STREAMS)?;
    noisy_head_keyed(out, gamma0, prompts, params, form, r.draw, Some(r.ledger), scratch)
}

/// [`noisy_head`] with an explicit key and stream id (its one stream is `draw.stream`) and
/// an optional ledger: **for replay, audit, and hosts that manage their own stream ids** —
/// a `(key, stream)` pair must never serve two releases.
///
/// ```
/// use dpattn_core::noisy_head::{
///     Accounting, Form, NoisyHeadParams, Prompts, noisy_head_keyed, noisy_head_scratch_len,
/// };
/// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
/// use dpattn_core::session::Draw;
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// let mut p = NoisyHeadParams {
///     d: 5, l: 10, n: 100, lambda: 5.0, eta0: 0.06, iters: 20,
///     clip_c: 4.0, proj_g: 1.3, proj_r: 15.0, sigma: 0.0,
///     budget: PrivacyBudget::new(1.0, 1e-5)?,
///     accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
/// };
/// p.sigma = p.sigma_min();
/// let (n, l, d) = (p.n, p.l, p.d);
/// // Synthetic prompts: Gaussian tokens, labels y = x₀.
/// let data = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let (mut x, mut q) = (vec![0.0; n * l * d], vec![0.0; n * d]);
/// Gaussian::STANDARD.fill_keyed(&data, 0, &mut x)?;
/// Gaussian::STANDARD.fill_keyed(&data, x.len() as u64, &mut q)?;
/// let y: Vec<f64> = x.iter().step_by(d).copied().collect();
/// let t: Vec<f64> = q.iter().step_by(d).copied().collect();
/// let prompts = Prompts::new(n, l, d, &x, &y, &q, &t)?;
/// let key = NoiseKey::generate()?; // kept in a key store to replay the release later
/// let mut scratch = vec![0.0; noisy_head_scratch_len(&p, Form::Gram)?];
/// let mut replay = |gamma: &mut [f64]| noisy_head_keyed(gamma, &[0.0; 25], &prompts, &p,
///     Form::Gram, Draw { key: &key, stream: 3 }, None, &mut scratch);
/// let (mut a, mut b) = ([0.0; 25], [0.0; 25]);
/// replay(&mut a)?;
/// replay(&mut b)?;
/// assert_eq!(a, b); // the same key and stream reproduce the release exactly
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`noisy_head`].
#[allow(clippy::too_many_arguments)]
pub fn noisy_head_keyed(
    out: &mut [f64],
    gamma0: &[f64],
    prompts: &Prompts<'_>,
    params: &NoisyHeadParams,
    form: Form,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    scratch: &mut [f64],
) -> Result<()> {
    let cal = params.calibrate()?;
    for (axis, expected, got) in
        [("n", params.n, prompts.n()), ("l", params.l, prompts.l()), ("d", params.d, prompts.d())]
    {
        if expected != got {
            return Err(Error::ShapeMismatch { arg: "prompts", axis, expected, got });
        }
    }
    let d2 = params.d * params.d;
    check_len("out", out.len(), d2)?;
    check_len("gamma0", gamma0.len(), d2)?;
    if let Some(index) = gamma0.iter().position(|g| !g.is_finite()) {
        return Err(Error::NonFinite { arg: "gamma0", index });
    }
    let need = noisy_head_scratch_len(params, form)?;
    check_scratch(scratch.len(), need)?;
    if let Some(ledger) = ledger {
        ledger.charge(PRIVACY_UNIT, &cal.cost(), cal.noise_mode())?;
    }

    let used = &mut scratch[..need];
    let result = run(out, gamma0, prompts, params, form, &cal, &draw.keyed(0), used);
    used.fill(0.0);
    result
}

#[allow(clippy::too_many_arguments)]
fn run(
    out: &mut [f64],
    gamma0: &[f64],
    prompts: &Prompts<'_>,
    params: &NoisyHeadParams,
    form: Form,
    cal: &Calibration,
    ks: &KeyedStream,
    scratch: &mut [f64],
) -> Result<()> {
    let (n, d) = (params.n, params.d);
    let d2 = d * d;
    let (u, rest) = scratch.split_at_mut(n * d);
    let (v, rest) = rest.split_at_mut(n * d);
    let (t, rest) = rest.split_at_mut(n);
    let (gamma, rest) = rest.split_at_mut(d2);
    let (c, g) = (params.clip_c, params.proj_g);
    match cal.noise_mode() {
        NoiseMode::Exact => balanced_private_features(prompts, c, g, u, v, t)?,
        NoiseMode::UnsafeFloat => private_features(prompts, c, g, u, v, t)?,
        NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
    }
    let f = super::Features::new(n, d, u, v, t)?;
    let (stepper, grad, next) = Stepper::new(f, params.lambda, params.eta0, form, rest)?;
    gamma.copy_from_slice(gamma0);
    project_ball(gamma, params.proj_r);
    for step in 0..u64::from(params.iters) {
        stepper.step(gamma, grad, next);
        let first = step * d2 as u64;
        match cal.grid() {
            Some(grid) => {
                grid.release_keyed(ks, first, next)?;
                gamma.copy_from_slice(next);
            }
            None => {
                // `grad` is free after the step: it holds the standard normals of step t.
                Gaussian::STANDARD.fill_keyed(ks, first, grad)?;
                let s = cal.noise_std();
                for (g, (nx, z)) in gamma.iter_mut().zip(next.iter().zip(grad.iter())) {
                    *g = nx + s * z;
                }
            }
        }
        project_ball(gamma, params.proj_r);
    }
    out.copy_from_slice(gamma);
    Ok(())
}
