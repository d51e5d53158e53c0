//! Choosing the number of iterations `T` before the run (`docs/PAPERS.md` §4.5, §4.6 and
//! P4-7), and the mean-field predictor of the excess risk that explains early stopping
//! (§4.7).
//!
//! **Guarantee.** Every rule here is a formula of public quantities, so the `T` it returns
//! may be used without extra privacy cost. Choosing `T` by watching a loss on the private
//! prompts is *not* covered by Theorem 3.2 (`docs/PAPERS.md` P4-27) and is not offered.

use super::params::NoisyHeadParams;
use crate::error::{Error, Result};

fn log_contraction(eta0: f64, lambda: f64) -> Result<f64> {
    let x = eta0 * lambda;
    if !(x > 0.0 && x < 1.0) {
        return Err(Error::OutOfRange { name: "eta0·lambda", value: x, allowed: "(0, 1)" });
    }
    Ok(-libm::log1p(-x))
}

fn to_iters(t: f64) -> Result<u32> {
    if !(t >= 1.0 && t <= f64::from(u32::MAX)) {
        return Err(Error::OutOfRange { name: "iterations", value: t, allowed: "[1, 2^32)" });
    }
    Ok(t as u32)
}

/// The low-dimensional experiments' rule as the authors' code computes it:
/// `T = ⌊2.5 ln N / ln(1/(1 − η0λ))⌋` (the paper prints `log N^{5/2}/log(1 − λη0)`, which
/// is negative).
///
/// ```
/// use dpattn_core::noisy_head::schedule::t_low_dim_code;
/// assert_eq!(t_low_dim_code(1000, 0.06489613892943313, 5.0)?, 44);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] unless `η0λ ∈ (0, 1)`, `N ≥ 2` and the result is in `[1, 2^32)`.
pub fn t_low_dim_code(n: usize, eta0: f64, lambda: f64) -> Result<u32> {
    let lc = log_contraction(eta0, lambda)?;
    to_iters(libm::floor(2.5 * libm::log(n as f64) / lc))
}

/// Theorem 4.2(i): `T = ⌈ln(N² L D³) / ln(1/(1 − η0λ))⌉` (rounded up so that the
/// optimisation term reaches the theorem's level).
///
/// # Errors
/// As [`t_low_dim_code`].
pub fn t_low_dim_theorem(n: usize, l: usize, d: usize, eta0: f64, lambda: f64) -> Result<u32> {
    let lc = log_contraction(eta0, lambda)?;
    let (nf, lf, df) = (n as f64, l as f64, d as f64);
    let num = 2.0 * libm::log(nf) + libm::log(lf) + 3.0 * libm::log(df);
    to_iters(libm::ceil(num / lc))
}

/// Theorem 4.2(ii) / Proposition 4.1: `T = ⌈ln r / ln(1/(1 − η0λ))⌉` for a chosen `r > 1`
/// (`r ≍ N` gives the optimal `T = Θ(log N)`).
///
/// # Errors
/// [`Error::OutOfRange`] for `r ≤ 1` or `η0λ ∉ (0, 1)`.
pub fn t_from_r(r: f64, eta0: f64, lambda: f64) -> Result<u32> {
    if !(r > 1.0 && r.is_finite()) {
        return Err(Error::OutOfRange { name: "r", value: r, allowed: "(1, inf)" });
    }
    to_iters(libm::ceil(libm::log(r) / log_contraction(eta0, lambda)?))
}

/// `E‖Z‖_F² = (1 + τ²)/L + (L − 1)/(L D)` for the data model of `docs/PAPERS.md` §4.3 (exact).
///
/// ```
/// use dpattn_core::noisy_head::schedule::expected_z_norm_sq;
/// assert_eq!(expected_z_norm_sq(1, 3, 0.5)?, 1.5);
/// assert!(expected_z_norm_sq(0, 3, 0.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `l` or `d` zero or `τ²` negative / not finite.
pub fn expected_z_norm_sq(l: usize, d: usize, tau2: f64) -> Result<f64> {
    for (name, v) in [("l", l), ("d", d)] {
        if v == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: "[1, inf)" });
        }
    }
    if !(tau2 >= 0.0 && tau2.is_finite()) {
        return Err(Error::OutOfRange { name: "tau2", value: tau2, allowed: "[0, inf)" });
    }
    let (lf, df) = (l as f64, d as f64);
    Ok((1.0 + tau2) / lf + (lf - 1.0) / (lf * df))
}

/// The mean-field predictor of the expected excess risk `E[ℰ_test(T)]` (`docs/PAPERS.md` §4.7, our
/// derivation): `E‖Z‖²·min(R²/D², c0'² a^{2T} + s(T)²(1 − a^{2T})/(1 − a²))` with `a = 1 − 2λη0`,
/// `c0' = min(c0, R/D)` and `s(T)` the noise std of `params` with `iters = T`. `c0` is the
/// per-entry std of a random start (0 for `Γ⁰ = 0`).
///
/// It assumes `η0‖H̃‖ ≪ 2λη0`, `Γ* ≈ 0` and `Π_G` inactive, which hold in the paper's
/// presets except robustness; there it agrees with simulation to ≈10 %. It is an
/// approximation for planning and for tests, not a bound.
///
/// ```
/// use dpattn_core::noisy_head::schedule::{mean_field_excess_risk, t_low_dim_code};
/// use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// // The paper's low-dimensional experiment at N = 1000, ε = 1 (docs/PAPERS.md §4.6; built as
/// // in the example of `NoisyHeadParams`, or by `dpattn_paper::noisy_head::presets::low_dim`).
/// let (n, l, d, lambda) = (1000, 31, 5, 5.0);
/// let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
/// let den = lambda + radii.g * radii.g;
/// let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
/// let mut p = NoisyHeadParams {
///     d, l, n, lambda, eta0, iters: t_low_dim_code(n, eta0, lambda)?,
///     clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
///     budget: PrivacyBudget::new(1.0, 1e-5)?,
///     accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
/// };
/// p.sigma = p.sigma_min();
/// // docs/PAPERS.md T4-C: the mean-field excess risk is 0.7339.
/// let e = mean_field_excess_risk(&p, 0.1, 0.0)?;
/// assert!((e / 0.7339 - 1.0).abs() < 1e-3);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`NoisyHeadParams::noise_std`]; [`Error::OutOfRange`] for `c0 < 0`, `τ² < 0`
/// or `|a| ≥ 1`.
pub fn mean_field_excess_risk(params: &NoisyHeadParams, c0: f64, tau2: f64) -> Result<f64> {
    if !(c0 >= 0.0 && c0.is_finite()) {
        return Err(Error::OutOfRange { name: "c0", value: c0, allowed: "[0, inf)" });
    }
    let ez2 = expected_z_norm_sq(params.l, params.d, tau2)?;
    let a = 1.0 - 2.0 * params.lambda * params.eta0;
    if a.is_nan() || a.abs() >= 1.0 {
        return Err(Error::OutOfRange {
            name: "1 - 2·lambda·eta0", value: a, allowed: "(-1, 1)"
        });
    }
    let s = params.noise_std()?;
    let df = params.d as f64;
    let cap = params.proj_r / df;
    let c0e = c0.min(cap);
    let a2t = libm::pow(a * a, f64::from(params.iters));
    let v = c0e * c0e * a2t + s * s * (1.0 - a2t) / (1.0 - a * a);
    Ok(ez2 * v.min(cap * cap))
}

/// The `T ∈ [1, max_iters]` that minimises [`mean_field_excess_risk`] (ties: the smallest),
/// a data-independent early-stopping rule, with the predicted risk there. Values of `T`
/// with `ε/T ≥ 1` under [`Accounting::Paper`](super::Accounting::Paper) are skipped.
///
/// ```
/// use dpattn_core::noisy_head::schedule::mean_field_best_iters;
/// use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// // The paper's early-stopping experiment (docs/PAPERS.md §4.6): N = 1000, D = L = ⌊√N⌋ = 31,
/// // λ = N/D, η0 = 0.01·(2/3)·λ/(λ + G²)², ε = 0.8, δ = 1e-5, σ = σ_min; T is to be chosen
/// // (`dpattn_paper::noisy_head::presets::early_stopping(1000, 1, 0.8)`).
/// let (n, d) = (1000, 31);
/// let lambda = n as f64 / d as f64;
/// let radii = Radii::theorem41(n, d, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
/// let den = lambda + radii.g * radii.g;
/// let mut p = NoisyHeadParams {
///     d, l: d, n, lambda, eta0: 0.01 * (2.0 / 3.0) * lambda / (den * den), iters: 1,
///     clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
///     budget: PrivacyBudget::new(0.8, 1e-5)?,
///     accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
/// };
/// p.sigma = p.sigma_min();
/// // docs/PAPERS.md T4-D: with a random start of std 0.1, T = 141 on the grid; the continuous
/// // minimiser is also at 141.
/// let (t, _) = mean_field_best_iters(&p, 0.1, 481)?;
/// assert!((138..=144).contains(&t));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`mean_field_excess_risk`] for some `T`; [`Error::OutOfRange`] for `max_iters = 0`;
/// [`Error::Infeasible`] when no `T ≤ max_iters` is feasible.
pub fn mean_field_best_iters(
    params: &NoisyHeadParams,
    c0: f64,
    max_iters: u32,
) -> Result<(u32, f64)> {
    if max_iters == 0 {
        return Err(Error::OutOfRange { name: "max_iters", value: 0.0, allowed: "[1, inf)" });
    }
    let mut best = (0u32, f64::INFINITY);
    for t in 1..=max_iters {
        // A `T` whose per-step budget is outside the classical mechanism is skipped.
        let risk = match mean_field_excess_risk(&NoisyHeadParams { iters: t, ..*params }, c0, 0.0) {
            Err(Error::Infeasible { .. }) => continue,
            r => r?,
        };
        if risk < best.1 {
            best = (t, risk);
        }
    }
    if best.0 == 0 {
        return Err(Error::Infeasible {
            condition: "some T ≤ max_iters with ε/T < 1",
            lhs: params.budget.epsilon().get() / f64::from(max_iters),
            rhs: 1.0,
        });
    }
    Ok(best)
}
