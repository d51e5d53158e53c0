//! NoisyHead's exact release ([`NoiseMode::Exact`](crate::NoiseMode::Exact)): the
//! pre-noise iterate of every step is released on a public grid with exact discrete Gaussian
//! noise ([`GaussianGrid`]), so that the floats returned are DP, not only the ideal real
//! mechanism (`docs/PRIVACY.md` §5.5).
//!
//! **What is released.** Step `t` computes `next = (1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z̃_k⟩ − t_k)Z̃_k`
//! in `f64` and releases it as `grid.release(next, z)`, `z` the integer noise of elements
//! `t·D² + i·D + j` of the keyed stream (window layout). `Π_R` then acts on the released
//! grid values: post-processing.
//!
//! **Calibration.** Sensitivity `Δ = η0σ/N·(1 + 2⁻⁵¹) ≥ η0σ_min/N` (Theorem 3.2; the
//! factor covers the three roundings for `N < 2⁵³`; `s` is calibrated to this value),
//! `d = D²`, noise multiplier `m = s/Δ` (`s` the paper's or the zCDP calibration at
//! sensitivity `Δ`, both linear in `Δ`), value bound `M = R + η0·G·B + E` (`|a| < 1` under the
//! stable-descent rule, `B = RG + C`), `f64` grid. The [`grid_release`](crate::grid_release)
//! lemma gives each step the continuous mechanism's `(ε/T, δ/T)` (resp. `ρ/T`) at the
//! inflated sensitivity `Δ′ = Δ + 2E + D·Λ`, for which `m·Δ′` is calibrated.
//!
//! **The computation error `E`** (a public bound on `‖next − f(Γ)‖_F`, `f` the exact real
//! step on the same stored `Γ` and features). The exact mode uses *balanced* features
//! (`|u_i| ≤ 2`, `|v_j| ≤ 2G`, `‖u vᵀ‖_F ≤ G` exactly: `balanced_private_features` in module
//! `features`), `‖Γ‖_F ≤ R`, `|t| ≤ C`. Model: every `f64` operation returns
//! `(x∘y)(1 + δ) + η` with `|δ| ≤ u = 2⁻⁵³` and an underflow term `|η| ≤ 2⁻¹⁰⁷⁵` (zero for
//! sums); `γ_n = nu/(1 − nu)`.
//! * Streaming: `p̂ = Σ_i u_i Σ_j Γ_ij v_j` errs by `γ_{2D}·RG` (`Σ|u_iΓ_ij v_j| ≤ ‖Γ‖‖uvᵀ‖`),
//!   `ê = p̂ − t` by `γ_{2D+1}B`; the `N` rank-one terms `fl(fl(ê u_i) v_j)` summed from 0
//!   give `‖ĝ − g‖_F ≤ N·G·B·γ_{N+2D+2}`; `fl(η0/N)·ĝ` and the subtraction add
//!   `γ_4` (relative), so the data term errs by `η0·G·B·γ_{N+2D+6}`.
//! * Gram: `Ĥ = H(1 + θ_{N+5})`, `b̂ = b(1 + θ_{N+4})` entrywise, `‖|H||Γ|‖ ≤ G²R`,
//!   `‖|b|‖ ≤ CG`; the `D²`-term dot product and the subtraction give
//!   `γ_{N+D²+6}·G²R + γ_{N+5}·CG ≤ γ_{N+D²+6}·G·B`, times `η0` and two roundings:
//!   `η0·G·B·γ_{N+D²+8}`.
//! * Both: `â = fl(1 − 2λη0)` errs by `γ_2(1 + 2λη0)`, and `fl(âΓ)` by
//!   `γ_5(1 + 2λη0)·R` in all.
//! * Underflow: each product's `η` reaches the output multiplied by the later factors
//!   (`|u_i| ≤ 2`, `|v_j| ≤ 2G`, `|Γ_q| ≤ R`, `|t| ≤ C`, `η0/N`); summed over the
//!   `O(N·D⁴)` products and doubled for the `(1 + γ)` factors this is at most
//!   `E_uf = 2⁻¹⁰⁷⁴·(η0·D⁴·(8G(R + 1) + 3R + C + 3) + 2D² + 4N·G·B + R)`.
//!
//! `E = γ_5(1 + 2λη0)·R + η0·G·B·γ_K + E_uf` with `K = N + D² + 2D + 8` (covers both
//! forms, so the release's law does not depend on the form). It requires `K·u < 1/2` and
//! every intermediate below `2¹⁰⁰⁰` (`32·N·G·(G + B) + 32·D·R·G² ≤ 2¹⁰⁰⁰`), and the noise
//! elements below `2⁴⁰` (`T·D² ≤ 2⁴⁰`); the exact mode refuses other (public) parameters.

use super::params::NoisyHeadParams;
use crate::directed_rounding::{add_up, count_up, div_up, gamma_up, mul_up};
use crate::error::{Error, Result};
use crate::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};

/// `2⁻¹⁰⁷⁴`: twice the largest underflow error of one product.
const TWO_ETA: f64 = f64::from_bits(1);
/// Largest intermediate bound accepted (`2¹⁰⁰⁰`).
const MAX_INTERMEDIATE: f64 = 1.0715086071862673e301;
/// Number of noise elements of one release allowed (`2⁴⁰`).
const MAX_ELEMENTS: f64 = 1_099_511_627_776.0;

fn up(terms: &[f64]) -> f64 {
    terms.iter().fold(0.0, |acc, &t| add_up(acc, t))
}

fn prod(factors: &[f64]) -> f64 {
    factors.iter().fold(1.0, |acc, &f| mul_up(acc, f))
}

/// The public bound `E` on the computation error of one step (module docs).
///
/// # Errors
/// [`Error::OutOfRange`] when `K·u ≥ 1/2` or an intermediate could exceed `2¹⁰⁰⁰`.
pub(crate) fn computation_error(p: &NoisyHeadParams) -> Result<f64> {
    let (n, d) = (count_up(p.n as u64), count_up(p.d as u64));
    let (r, g, c, eta0) = (p.proj_r, p.proj_g, p.clip_c, p.eta0);
    let d2 = mul_up(d, d);
    let b = add_up(mul_up(r, g), c);
    let intermediate = up(&[prod(&[32.0, n, g, add_up(g, b)]), prod(&[32.0, d, r, g, g])]);
    if intermediate.is_nan() || intermediate > MAX_INTERMEDIATE {
        return Err(Error::OutOfRange {
            name: "exact NoisyHead intermediates 32·N·G·(G + RG + C) + 32·D·R·G²",
            value: intermediate,
            allowed: "[0, 2^1000]",
        });
    }
    let k = up(&[n, d2, mul_up(2.0, d), 8.0]);
    let gamma_k = gamma_up(k);
    if !gamma_k.is_finite() {
        return Err(Error::OutOfRange {
            name: "exact NoisyHead N + D² + 2D + 8 (rounding-error bound)",
            value: k,
            allowed: "[1, 2^52)",
        });
    }
    let two_lambda_eta = prod(&[2.0, p.lambda, eta0]);
    let contraction = prod(&[gamma_up(5.0), add_up(1.0, two_lambda_eta), r]);
    let data = prod(&[eta0, g, b, gamma_k]);
    let d4 = mul_up(d2, d2);
    let per_product = up(&[prod(&[8.0, g, add_up(r, 1.0)]), mul_up(3.0, r), c, 3.0]);
    let underflow = mul_up(
        TWO_ETA,
        up(&[prod(&[eta0, d4, per_product]), mul_up(2.0, d2), prod(&[4.0, n, g, b]), r]),
    );
    Ok(up(&[contraction, data, underflow]))
}

/// The grid of the exact release for a parameter set whose noise std is `s`
/// (module docs).
///
/// # Errors
/// Those of [`computation_error`]; [`Error::OutOfRange`] for `T·D² > 2⁴⁰`; those of
/// [`GaussianGrid::calibrate`].
pub(crate) fn exact_grid(p: &NoisyHeadParams, s: f64) -> Result<GaussianGrid> {
    let d2 = (p.d as u64).saturating_mul(p.d as u64);
    let elements = count_up(d2.saturating_mul(u64::from(p.iters)));
    if elements > MAX_ELEMENTS {
        return Err(Error::OutOfRange {
            name: "exact NoisyHead noise elements T·D²",
            value: elements,
            allowed: "[1, 2^40]",
        });
    }
    let err = computation_error(p)?;
    let delta = p.noise_sensitivity();
    let b = add_up(mul_up(p.proj_r, p.proj_g), p.clip_c);
    let spec = GaussianGridSpec {
        l2_sensitivity: delta,
        dimension: d2,
        computation_error: err,
        value_bound: up(&[p.proj_r, prod(&[p.eta0, p.proj_g, b]), err]),
        format: GridFormat::F64,
    };
    GaussianGrid::calibrate(&spec, div_up(s, delta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PrivacyBudget;
    use crate::grid_release::NoiseMode;
    use crate::noisy_head::schedule::t_low_dim_code;
    use crate::noisy_head::{Accounting, GForm, Radii};

    /// The paper's low-dimensional configuration at `N = 4000`, `ε = 1` (what
    /// `dpattn_paper::noisy_head::presets::low_dim(4000, 1.0)` builds).
    fn low_dim_4000() -> NoisyHeadParams {
        let (n, l, d, lambda) = (4000, 63, 5, 5.0);
        let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0).unwrap();
        let den = lambda + radii.g * radii.g;
        let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
        let mut p = NoisyHeadParams {
            d,
            l,
            n,
            lambda,
            eta0,
            iters: t_low_dim_code(n, eta0, lambda).unwrap(),
            clip_c: radii.c,
            proj_g: radii.g,
            proj_r: radii.r,
            sigma: 0.0,
            budget: PrivacyBudget::new(1.0, 1e-5).unwrap(),
            accounting: Accounting::Paper,
            noise_mode: NoiseMode::Exact,
        };
        p.sigma = p.sigma_min();
        p
    }

    #[test]
    fn the_error_bound_is_negligible_at_the_presets_and_refuses_absurd_sizes() {
        let p = low_dim_4000();
        let e = computation_error(&p).unwrap();
        let delta = p.noise_sensitivity();
        assert!(e > 0.0 && e < 1e-9 * delta, "E = {e:e}, Δ = {delta:e}");
        let huge = NoisyHeadParams { n: 1 << 53, ..p };
        assert!(computation_error(&huge).is_err());
        let wide = NoisyHeadParams { proj_g: 1e100, proj_r: 1e100, ..p };
        assert!(computation_error(&wide).is_err());
        let long = NoisyHeadParams { iters: 1 << 30, d: 1 << 6, noise_mode: NoiseMode::Exact, ..p };
        assert!(exact_grid(&long, 1.0).is_err());
    }
}
