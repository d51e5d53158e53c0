//! The NoisyHead release: Algorithm 1 end to end on raw prompts, charged to a ledger
//! (spec seed-004 §2.3, §2.4, §5.7).
//!
//! **Guarantee.** `(ε, δ)`-DP for the released `Γ^T` under replace-one-prompt neighbours
//! (Theorem 3.2, with the per-step condition `ε/T < 1` enforced), given that `Γ⁰` and every
//! parameter are data-independent — in the floats returned under the default
//! [`NoiseMode::Exact`] (each step's iterate is released on a public grid with exact
//! integer noise, module `exact`); for the ideal real mechanism only under
//! [`NoiseMode::UnsafeFloat`]. Noise entry `(t, i, j)` is element `t·D² + i·D + j` of the
//! keyed stream `(key, stream)` (`docs/RANDOMNESS.md` §5.3): a discrete Gaussian from that
//! element's window (exact), or the `f64` Gaussian layout (unsafe float).

use super::features::{Prompts, balanced_private_features, check_len, private_features};
use super::params::{Calibration, NoisyHeadParams};
use super::train::{Form, Stepper, project_ball};
use crate::accounting::ledger::Ledger;
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::error::{Error, Result, add_size, mul_size};
use crate::grid_release::NoiseMode;
use crate::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use crate::scratch::check_scratch;

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

/// Runs NoisyHead (Algorithm 1) and writes `Γ̂ = Γ^T` (`D × D`, row-major) to `out`.
///
/// Order: every check on public inputs (parameters, shapes, `Γ⁰` finite, scratch) and the
/// calibration ([`NoisyHeadParams::calibrate`], once); then the ledger is charged
/// [`NoisyHeadParams::charge`] (in `params.noise_mode`); then the private summaries are
/// built ([`private_features`]: labels clipped to `±C`, each `Z_k` projected on the
/// `G`-ball, non-finite content sanitised; balanced factors in exact mode),
/// `Γ ← Π_R(Γ⁰)`, and `T` times `Γ ← Π_R(release(next))` with
/// `next = (1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z̃_k⟩ − t_k)Z̃_k`: in exact mode
/// `release(next) = grid.release(next, z_t)` with `z_t` exact discrete Gaussian integers
/// ([`Calibration::grid`]), in unsafe-float mode `next + z_t`, `z_t ~ N(0, s²I)`.
/// Any error leaves `out` and the ledger untouched. The part of `scratch` this call used
/// is zeroed before it returns (it held summaries of private prompts).
///
/// `gamma0` must not depend on the private prompts (use zeros, or
/// [`random_start`](super::random_start) with its own key).
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::noisy_head::{
///     Form, Prompts, generate_prompts, noisy_head, noisy_head_scratch_len, presets,
/// };
/// use dpattn_core::sampling::NoiseKey;
/// let p = presets::low_dim(1000, 1.0)?; // N = 1000, L = 31, D = 5, T = 44
/// let (n, l, d) = (p.n, p.l, p.d);
/// let (mut x, mut y, mut q, mut t) = (vec![0.0; n * l * d], vec![0.0; n * l], vec![0.0; n * d], vec![0.0; n]);
/// generate_prompts(n, l, d, 0.0, &NoiseKey::for_replay([1; 32]), 0, 0, &mut x, &mut y, &mut q, &mut t)?;
/// let prompts = Prompts::new(n, l, d, &x, &y, &q, &t)?;
/// let mut ledger = Ledger::new_approx(PrivacyUnit::Prompt, PrivacyBudget::new(2.0, 1e-4)?);
/// let mut scratch = vec![0.0; noisy_head_scratch_len(&p, Form::Gram)?];
/// let mut gamma = [0.0; 25];
/// let key = NoiseKey::for_replay([2; 32]);
/// noisy_head(&mut gamma, &[0.0; 25], &prompts, &p, Form::Gram, &key, 0, Some(&mut ledger), &mut scratch)?;
/// assert!(gamma.iter().map(|g| g * g).sum::<f64>() <= p.proj_r * p.proj_r);
/// assert_eq!(ledger.charges(), 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`NoisyHeadParams::validate`]; [`Error::ShapeMismatch`] when `prompts` is not
/// `N × L × D` of `params` or `out`, `gamma0` are not `D²` long; [`Error::NonFinite`] for a
/// non-finite `Γ⁰`; [`Error::ScratchTooSmall`]; the ledger's error when the charge does not
/// fit. None depends on prompt content.
#[allow(clippy::too_many_arguments)]
pub fn noisy_head<const K: usize>(
    out: &mut [f64],
    gamma0: &[f64],
    prompts: &Prompts<'_>,
    params: &NoisyHeadParams,
    form: Form,
    key: &NoiseKey,
    stream: u64,
    ledger: Option<&mut Ledger<K>>,
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
        ledger.try_charge_in(PrivacyUnit::Prompt, cal.charge(), cal.noise_mode())?;
    }

    let used = &mut scratch[..need];
    let result =
        run(out, gamma0, prompts, params, form, &cal, &KeyedStream::new(key, stream), used);
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
