//! The paper's experiment configurations (`docs/PAPERS.md` §4.6, constants T4-A), with the
//! constants its released code used where the text is garbled (errata P4-6, P4-7, P4-10, P4-18).
//! All are functions of public sizes and `(ε, δ)` only, with `κ = 1`, `τ² = 0`, [`GForm::Proof`]
//! and `σ = σ_min` exactly (the paper's "sigma_multiplier = 1"), and the exact release
//! ([`NoiseMode::Exact`]).
//!
//! Step sizes are `η0 = k·(2/3)·λ/(λ + G²)²` with `k` = 0.95 (low-dim), 0.1 (high-dim),
//! 0.01 (early stopping), 1 (robustness).

use dpattn_core::noisy_head::schedule::t_low_dim_code;
use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
use dpattn_core::{Error, NoiseMode, PrivacyBudget, Result};

fn isqrt(n: usize) -> usize {
    let mut r = libm::sqrt(n as f64) as usize;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

fn step(k: f64, lambda: f64, g: f64) -> f64 {
    let den = lambda + g * g;
    k * (2.0 / 3.0) * lambda / (den * den)
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    n: usize,
    l: usize,
    d: usize,
    lambda: f64,
    radii: Radii,
    eta0: f64,
    iters: u32,
    epsilon: f64,
    delta: f64,
) -> Result<NoisyHeadParams> {
    let mut p = NoisyHeadParams {
        d,
        l,
        n,
        lambda,
        eta0,
        iters,
        clip_c: radii.c,
        proj_g: radii.g,
        proj_r: radii.r,
        sigma: 0.0,
        budget: PrivacyBudget::new(epsilon, delta)?,
        accounting: Accounting::Paper,
        noise_mode: NoiseMode::Exact,
    };
    p.sigma = p.sigma_min();
    p.validate()?;
    Ok(p)
}

/// Low-dimensional experiment (`docs/PAPERS.md` §4.6): `D = 5`, `L = ⌊√N⌋`, `λ = 5`, `δ = 1e-5`,
/// `k = 0.95`, `T = ⌊2.5 ln N / ln(1/(1 − η0λ))⌋`.
///
/// ```
/// use dpattn_paper::noisy_head::presets;
/// let p = presets::low_dim(4000, 1.0)?;
/// assert_eq!((p.l, p.iters), (63, 39));
/// assert!((p.sigma / 107.87125561363094 - 1.0).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// `n ∉ [2, 2⁵²]`, or `ε` such that the parameters fail [`NoisyHeadParams::validate`] (e.g.
/// `ε/T ≥ 1`).
pub fn low_dim(n: usize, epsilon: f64) -> Result<NoisyHeadParams> {
    min_n(n)?;
    let (d, l, lambda) = (5, isqrt(n), 5.0);
    let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
    let eta0 = step(0.95, lambda, radii.g);
    let iters = t_low_dim_code(n, eta0, lambda)?;
    assemble(n, l, d, lambda, radii, eta0, iters, epsilon, 1e-5)
}

/// High-dimensional experiment (`docs/PAPERS.md` §4.6): `D = L = ⌊√N⌋`, `λ = N/D`, `k = 0.1`,
/// `T = 5`. The paper says `δ = 1e-5`, its code used `1e-2` (P4-18): pass either.
///
/// # Errors
/// As [`low_dim`].
pub fn high_dim(n: usize, epsilon: f64, delta: f64) -> Result<NoisyHeadParams> {
    min_n(n)?;
    let d = isqrt(n);
    let lambda = n as f64 / d as f64;
    let radii = Radii::theorem41(n, d, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
    assemble(n, d, d, lambda, radii, step(0.1, lambda, radii.g), 5, epsilon, delta)
}

/// Early-stopping experiment (`docs/PAPERS.md` §4.6, values T4-D): `D = L = ⌊√N⌋`, `λ = N/D`,
/// `k = 0.01`, `δ = 1e-5`, `T = iters`.
///
/// ```
/// use dpattn_paper::noisy_head::presets;
/// // docs/PAPERS.md T4-A (check P4-U4): the quick early-stopping configuration N = 400.
/// let p = presets::early_stopping(400, 51, 0.8)?;
/// assert_eq!((p.d, p.l), (20, 20));
/// assert!((p.eta0 / 2.8478920952431833e-4 - 1.0).abs() < 1e-12);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`low_dim`].
pub fn early_stopping(n: usize, iters: u32, epsilon: f64) -> Result<NoisyHeadParams> {
    min_n(n)?;
    let d = isqrt(n);
    let lambda = n as f64 / d as f64;
    let radii = Radii::theorem41(n, d, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
    assemble(n, d, d, lambda, radii, step(0.01, lambda, radii.g), iters, epsilon, 1e-5)
}

/// Robustness experiment (`docs/PAPERS.md` §4.6, values T4-F), generalised to any `N`, `L`:
/// `D = 5`, `λ = 0.01`, `δ = 1e-2`, `k = 1`, `T = ⌊ln N⌋`, and — as the authors' code, not the
/// paper's "all other parameters unchanged" — `R = 0.1·C²√(N/L)` (`docs/PAPERS.md` P4-10; eq. (4.1)
/// would give `C²√(N/L)/λ`, 1000× larger and pure noise). The paper's run is
/// `robustness(5000, 500, 0.5)`.
///
/// # Errors
/// As [`low_dim`], with `n ≥ 3` (else `⌊ln N⌋ = 0`).
pub fn robustness(n: usize, l: usize, epsilon: f64) -> Result<NoisyHeadParams> {
    if n < 3 || n as u64 > 1 << 52 {
        return Err(Error::OutOfRange { name: "n", value: n as f64, allowed: "[3, 2^52]" });
    }
    let (d, lambda) = (5, 0.01);
    let mut radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
    radii.r = 0.1 * radii.c * radii.c * libm::sqrt(n as f64 / l as f64);
    let iters = libm::floor(libm::log(n as f64)) as u32;
    assemble(n, l, d, lambda, radii, step(1.0, lambda, radii.g), iters, epsilon, 1e-2)
}

fn min_n(n: usize) -> Result<()> {
    if n < 2 || n as u64 > 1 << 52 {
        return Err(Error::OutOfRange { name: "n", value: n as f64, allowed: "[2, 2^52]" });
    }
    Ok(())
}
