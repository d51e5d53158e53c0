//! The projected gradient iterations of Algorithm 1, in streaming and Gram form, and the
//! non-private baseline (`docs/PAPERS.md` §4.4 and §4.6).
//!
//! **Guarantee.** None by themselves: these are deterministic maps of `(Γ, features)`.
//! Privacy comes from [`noisy_head`](super::noisy_head), which feeds them features with
//! `‖Z̃_k‖_F ≤ G`, `|t_k| ≤ C` and adds calibrated noise after each step. The step
//! `Γ ← (1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z_k⟩ − t_k)Z_k` is the gradient step of
//! `(2N)⁻¹Σ(…)² + λ‖Γ‖²`, whose minimiser is ridge (2.7) with `2λ`, not `λ` (`docs/PAPERS.md`
//! P4-3).

use super::features::{Features, check_len, margin};
use crate::error::{Error, Result, mul_size, nonneg_finite, positive_finite};

/// How the data term of the gradient is computed. Both give the same function of the data
/// and the noise (so the same privacy); results agree to rounding (≈1e-15 relative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `Σ_k (u_kᵀΓv_k − t_k) u_k v_kᵀ` every step: `4ND²` flops per step, `2D²` scratch.
    Streaming,
    /// Precompute `H̃ = N⁻¹Σ vec(Z_k)vec(Z_k)ᵀ` and `b̃ = N⁻¹Σ t_k vec(Z_k)` once
    /// (`≈ND⁴` flops, `D⁴ + D²` scratch), then `2D⁴` flops per step. Cheaper when
    /// `D² ≲ 4T`.
    Gram,
}

impl Form {
    /// Scratch (in `f64`) for the iteration in this form at dimension `d`: `2D²`
    /// (gradient and noise) plus `D⁴ + D²` for [`Form::Gram`].
    ///
    /// # Errors
    /// [`Error::SizeOverflow`].
    pub fn scratch_len(self, d: usize) -> Result<usize> {
        let d2 = mul_size(d, d, "D²")?;
        let base = mul_size(2, d2, "2·D²")?;
        match self {
            Form::Streaming => Ok(base),
            Form::Gram => {
                let d4 = mul_size(d2, d2, "D⁴")?;
                d4.checked_add(d2)
                    .and_then(|x| x.checked_add(base))
                    .ok_or(Error::SizeOverflow { what: "Gram scratch length" })
            }
        }
    }
}

/// `uᵀ Γ v` for a row-major `D × D` `Γ`: the head's prediction `⟨Γ, u vᵀ⟩`.
///
/// ```
/// use dpattn_core::noisy_head::predict;
/// let gamma = [1.0, 2.0, 3.0, 4.0];
/// assert_eq!(predict(&gamma, &[1.0, 0.0], &[0.0, 1.0]), 2.0);
/// ```
///
/// Panics if `gamma.len() < u.len()·v.len()`.
pub fn predict(gamma: &[f64], u: &[f64], v: &[f64]) -> f64 {
    let d = v.len();
    u.iter().enumerate().map(|(i, ui)| ui * dot(&gamma[i * d..(i + 1) * d], v)).sum()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `grad ← Σ_k (u_kᵀΓv_k − t_k) u_k v_kᵀ` (not divided by `N`).
fn data_gradient_streaming(f: &Features<'_>, gamma: &[f64], grad: &mut [f64]) {
    let d = f.d;
    grad.fill(0.0);
    for k in 0..f.n {
        let (u, v, t) = f.get(k);
        let e = predict(gamma, u, v) - t;
        for (i, ui) in u.iter().enumerate() {
            let w = e * ui;
            for (g, vj) in grad[i * d..(i + 1) * d].iter_mut().zip(v) {
                *g += w * vj;
            }
        }
    }
}

/// `H̃ = N⁻¹Σ vec(Z_k)vec(Z_k)ᵀ` (`D⁴`, row-major, full symmetric) and
/// `b̃ = N⁻¹Σ t_k vec(Z_k)` (`D²`), with `vec(u vᵀ)[iD + j] = u_i v_j`.
///
/// # Errors
/// [`Error::ShapeMismatch`] on buffer lengths; [`Error::SizeOverflow`].
pub fn gram_build(f: &Features<'_>, h: &mut [f64], b: &mut [f64]) -> Result<()> {
    let d2 = mul_size(f.d, f.d, "D²")?;
    check_len("h", h.len(), mul_size(d2, d2, "D⁴")?)?;
    check_len("b", b.len(), d2)?;
    h.fill(0.0);
    b.fill(0.0);
    let d = f.d;
    for k in 0..f.n {
        let (u, v, t) = f.get(k);
        // Row p = (i1, j1) of the upper triangle: z_p · z_q for q = (i2, j2) ≥ p.
        for (i1, &u1) in u.iter().enumerate() {
            for (j1, &v1) in v.iter().enumerate() {
                let zp = u1 * v1;
                if zp == 0.0 {
                    continue;
                }
                let p = i1 * d + j1;
                b[p] += t * zp;
                let row = &mut h[p * d2..(p + 1) * d2];
                // The rest of row i1 of Z, then the full rows below it.
                let zu = zp * u1;
                for (hq, &v2) in row[p..(i1 + 1) * d].iter_mut().zip(&v[j1..]) {
                    *hq += zu * v2;
                }
                for (i2, &u2) in u.iter().enumerate().skip(i1 + 1) {
                    let zu = zp * u2;
                    for (hq, &v2) in row[i2 * d..(i2 + 1) * d].iter_mut().zip(v) {
                        *hq += zu * v2;
                    }
                }
            }
        }
    }
    let inv_n = 1.0 / f.n as f64;
    for p in 0..d2 {
        for q in p..d2 {
            let x = h[p * d2 + q] * inv_n;
            h[p * d2 + q] = x;
            h[q * d2 + p] = x;
        }
    }
    b.iter_mut().for_each(|x| *x *= inv_n);
    Ok(())
}

/// The state of one run: features (or their Gram form) and the step constants.
pub(crate) struct Stepper<'a> {
    f: Features<'a>,
    a: f64,
    eta0: f64,
    gram: Option<(&'a [f64], &'a [f64])>,
}

impl<'a> Stepper<'a> {
    /// Splits `scratch` ([`Form::scratch_len`]`(D)` long, checked by the caller) into the
    /// two `D²` work buffers it returns (gradient, next iterate) and, for [`Form::Gram`],
    /// `H̃` and `b̃`, which it builds.
    pub(crate) fn new(
        f: Features<'a>,
        lambda: f64,
        eta0: f64,
        form: Form,
        scratch: &'a mut [f64],
    ) -> Result<(Self, &'a mut [f64], &'a mut [f64])> {
        let d2 = f.d * f.d;
        let (grad, rest) = scratch.split_at_mut(d2);
        let (next, rest) = rest.split_at_mut(d2);
        let gram = match form {
            Form::Streaming => None,
            Form::Gram => {
                let (h, rest) = rest.split_at_mut(d2 * d2);
                let b = &mut rest[..d2];
                gram_build(&f, h, b)?;
                Some((&*h, &*b))
            }
        };
        Ok((Self { f, a: 1.0 - 2.0 * lambda * eta0, eta0, gram }, grad, next))
    }

    /// `out ← aΓ − η0·∇` with `∇ = N⁻¹Σ(⟨Γ, Z_k⟩ − t_k)Z_k`; `grad` is `D²` work.
    pub(crate) fn step(&self, gamma: &[f64], grad: &mut [f64], out: &mut [f64]) {
        match self.gram {
            None => {
                data_gradient_streaming(&self.f, gamma, grad);
                let g = self.eta0 / self.f.n as f64;
                for ((o, x), gr) in out.iter_mut().zip(gamma).zip(grad.iter()) {
                    *o = self.a * x - g * gr;
                }
            }
            Some((h, b)) => {
                let d2 = gamma.len();
                for (p, gr) in grad.iter_mut().enumerate() {
                    *gr = dot(&h[p * d2..(p + 1) * d2], gamma) - b[p];
                }
                for ((o, x), gr) in out.iter_mut().zip(gamma).zip(grad.iter()) {
                    *o = self.a * x - self.eta0 * gr;
                }
            }
        }
    }
}

/// `Π_R(Γ) = Γ·min(1, R/‖Γ‖_F)` in place, keeping the relative margin of the projections
/// (module [`features`](super::features)). Returns whether it scaled.
pub(crate) fn project_ball(gamma: &mut [f64], r: f64) -> bool {
    // ‖Γ‖ = m·root, compared and divided in two factors so a norm above f64::MAX with
    // finite entries still projects to the sphere. Γ is finite here (checked start, finite
    // steps), so m is finite.
    let (m, root) = super::features::norm_parts(gamma);
    let rm = r * margin(gamma.len());
    if m > 0.0 && root > rm / m {
        gamma.iter_mut().for_each(|x| *x = *x / m / root * rm);
        true
    } else {
        false
    }
}

/// One noiseless, unprojected step `(1 − 2λη0)Γ − (η0/N)Σ_k(u_kᵀΓv_k − t_k)u_k v_kᵀ`
/// (streaming form) into `out`: the map whose sensitivity Theorem 3.2 bounds.
///
/// ```
/// use dpattn_core::noisy_head::{Features, gradient_step};
/// // One prompt Z = e1 e1ᵀ, t = 1, Γ = 0, λ = 0, η0 = 0.5 → Γ' = 0.5·e1 e1ᵀ.
/// let f = Features::new(1, 2, &[1.0, 0.0], &[1.0, 0.0], &[1.0])?;
/// let mut out = [0.0; 4];
/// gradient_step(&mut out, &[0.0; 4], &f, 0.0, 0.5)?;
/// assert_eq!(out, [0.5, 0.0, 0.0, 0.0]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] on lengths; [`Error::OutOfRange`] for `λ < 0` or `η0 ≤ 0`.
pub fn gradient_step(
    out: &mut [f64],
    gamma: &[f64],
    f: &Features<'_>,
    lambda: f64,
    eta0: f64,
) -> Result<()> {
    let d2 = mul_size(f.d, f.d, "D²")?;
    check_len("gamma", gamma.len(), d2)?;
    check_len("out", out.len(), d2)?;
    nonneg_finite("lambda", lambda)?;
    positive_finite("eta0", eta0)?;
    // The data gradient goes into `out`, then `out ← aΓ − (η0/N)·out` elementwise.
    data_gradient_streaming(f, gamma, out);
    let (a, g) = (1.0 - 2.0 * lambda * eta0, eta0 / f.n as f64);
    for (o, x) in out.iter_mut().zip(gamma) {
        *o = a * x - g * *o;
    }
    Ok(())
}

/// The non-private baseline of the experiments: `iters` noiseless, unprojected steps from
/// `gamma` (in: `Γ⁰`, out: `Γ^T`) on raw features, calling `on_iter(t, Γ^t)` after each
/// step `t = 1..=iters` (snapshots for T sweeps). `scratch` is
/// [`Form::scratch_len`]`(D)` long. **Not private.**
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::ScratchTooSmall`], [`Error::OutOfRange`] for
/// `λ < 0`, `η0 ≤ 0`.
#[allow(clippy::too_many_arguments)]
pub fn train_nonprivate(
    gamma: &mut [f64],
    f: &Features<'_>,
    lambda: f64,
    eta0: f64,
    iters: u32,
    form: Form,
    scratch: &mut [f64],
    mut on_iter: impl FnMut(u32, &[f64]),
) -> Result<()> {
    let d2 = mul_size(f.d, f.d, "D²")?;
    check_len("gamma", gamma.len(), d2)?;
    nonneg_finite("lambda", lambda)?;
    positive_finite("eta0", eta0)?;
    crate::scratch::check_scratch(scratch.len(), form.scratch_len(f.d)?)?;
    let (stepper, grad, next) = Stepper::new(*f, lambda, eta0, form, scratch)?;
    for t in 1..=iters {
        stepper.step(gamma, grad, next);
        gamma.copy_from_slice(next);
        on_iter(t, gamma);
    }
    Ok(())
}
