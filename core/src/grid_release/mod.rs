//! Floating-point-safe releases: every DP mechanism of the crate releases exact multiples
//! of a public power-of-two resolution `Λ`, noised with exact integer noise — the default
//! [`NoiseMode::Exact`].
//!
//! **Why.** A textbook release `f(x) + z` with floating-point `z` leaks `f(x)` through the
//! low-order bits of the result (Mironov 2012; the Gaussian follow-ups; an audit of this
//! crate's float path measured effective `δ` of 1e-2 to 2e-1 against a claimed 1e-5). The
//! defence OpenDP and Google's libraries use, and this module implements, is to make the
//! output a function of an integer alone:
//!
//! `y = clamp(round(clamp(f̂(x)/Λ)) + Z) · Λ`, `Z` exact integer noise,
//!
//! where `f̂` is the function as computed, `round` is half away from zero, both clamps are
//! to the public index range `[−I, I]` of the output format ([`GridFormat`]), and the
//! product is exact. The released float is then post-processing of the integer
//! `round(f̂(x)/Λ) + Z`, whose privacy is that of an integer mechanism.
//!
//! **Sensitivity of the rounded data (proof).** Let `‖f(x) − f(x′)‖ ≤ Δ` for neighbours
//! (L2 for Gaussian noise, L1 for Laplace) and `‖f̂(x) − f(x)‖ ≤ E` for every input (the
//! mechanism's *computation error*, a public bound derived per mechanism in
//! `docs/PRIVACY.md`). Dividing by `Λ` is exact, clamping is 1-Lipschitz per coordinate,
//! and rounding moves each coordinate by at most `1/2`, so the integer vectors of
//! neighbours differ by at most `(Δ + 2E)/Λ + √d` in L2 and `(Δ + 2E)/Λ + d` in L1 over
//! `d` coordinates (OpenDP's rounding distance). Every quantity is computed with directed
//! rounding.
//!
//! **Discrete Gaussian noise (lemma).** Let `Y ~ N_ℤ(0, s²)^d` and `s₁ = √(s² − s₂²)` with
//! `s₂ = 4`. The kernel `K(x, z) = e^{−(z−x)²/2s₂²}/θ(x)`, `θ(x) = Σ_{w∈ℤ} e^{−(w−x)²/2s₂²}`,
//! rounds a real `x` to an integer and commutes with integer shifts. Applied to
//! `N(μ, s₁²)` (integer `μ`) it gives `(z) ↦ ∫ φ_{s₁}(x − μ) e^{−(z−x)²/2s₂²}/θ(x) dx`;
//! the Gaussian convolution `φ_{s₁} ∗ φ_{s₂} = φ_s` and Poisson summation
//! (`θ(x) = s₂√(2π)(1 + 2Σ_{k≥1} e^{−2π²s₂²k²} cos 2πkx)`) put this within a factor
//! `r = (1 + 2τ)/(1 − 2τ)`, `τ = Σ_{k≥1} e^{−2π²s₂²k²} < 10^{−137}`, of `N_ℤ(μ, s²)`'s mass
//! function, coordinate by coordinate. So the discrete Gaussian mechanism at `s` is, up to a
//! pointwise factor `r^{±d}`, post-processing of the continuous Gaussian mechanism at `s₁`:
//! whatever `(ε, δ)`-DP the continuous mechanism with noise `s₁` has on the integer data,
//! the discrete one has `(ε + 2d·ln r, r^d·δ)` — with `d < 2^64`, `2d·ln r < 2·10^{−117}`.
//! The same argument bounds Rényi divergences (post-processing does not increase them; the
//! pointwise factor adds at most `(2α − 1)/(α − 1)·d·ln r`), so Rényi and zCDP accounting
//! carry over too; for zCDP CKS20 Theorem 14 gives `ρ = Δ²/2s²` directly. [`GaussianGrid`]
//! therefore draws `N_ℤ(0, s²)` with `s = √((σ_c/Λ)² + 16)`, `σ_c` the continuous
//! calibration at the inflated sensitivity, and every continuous-Gaussian guarantee of the
//! crate (analytic Gaussian, aMGM, classical, RDP of the subsampled Gaussian) holds for the
//! release with the additive slack above, which lies below `f64` resolution and is not
//! charged.
//!
//! **Laplace and truncated Laplace.** The discrete Laplace `DLap(b)` on integer data of L1
//! sensitivity `D` is `D/b`-DP exactly; the truncated discrete Laplace is `(ε, δ)`-DP with
//! the bound of [`TruncatedDiscreteLaplace`](crate::sampling::TruncatedDiscreteLaplace).
//!
//! **Resolution.** `Λ = 2^k` is public: it depends on the mechanism's public parameters
//! only. The rule: the largest `Λ` whose rounding inflation `√d·Λ` (L2; `d·Λ` in L1) is at
//! most `Δ/256` (accuracy: the noise grows by at most 0.4% against the float release), then
//! raised until (a) the released range `M + 12σ` fits the format's exact index range `I`
//! (`2^24 − 1` for `f32`, `2^53 − 1` for `f64`; `M` the public bound on `|f̂|`), so clamping
//! the noisy index happens only when the noise exceeds 12σ (probability below `10^{−32}`
//! per value), and (b) the integer noise stays in the samplers' exact range. Condition (a)
//! wins for high-dimensional `f32` releases of small sensitivity, where the inflation
//! then exceeds 0.4%; [`GaussianGrid::inflation`] reports it.
//!
//! **Randomness.** Value `i` of a release uses the exact-sampler window of element `i` of
//! its keyed stream (`docs/RANDOMNESS.md` §4), so CPU, GPU and auditors draw the same
//! integers.

mod gaussian;
mod grid;
mod laplace;
mod truncated_laplace;

pub use gaussian::{GaussianGrid, GaussianGridSpec};
pub use grid::{Grid, GridFormat};
pub use laplace::{LaplaceGrid, LaplaceGridSpec};
pub use truncated_laplace::TruncatedLaplaceGrid;

/// How a mechanism draws its noise.
///
/// ```
/// use dpattn_core::NoiseMode;
/// assert_eq!(NoiseMode::default(), NoiseMode::Exact);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum NoiseMode {
    /// Exact integer noise on a public power-of-two grid: the release is DP in the
    /// floating-point values it returns (module docs). The default.
    #[default]
    Exact,
    /// **Not differentially private as shipped.** Textbook floating-point noise added to
    /// the floating-point result: the low-order bits of the output reveal the noise-free
    /// value (Mironov 2012), so the stated `(ε, δ)` holds only for the idealised real
    /// mechanism. For reproducing papers and for benchmarks; a ledger records every charge
    /// made in this mode ([`Ledger::unsafe_float_charges`](crate::accounting::ledger::Ledger::unsafe_float_charges)).
    UnsafeFloat,
    /// For enclaves: [`Exact`](Self::Exact)'s grid, with the integer noise drawn by
    /// [`ConstantTimeGaussian`](crate::sampling::ConstantTimeGaussian), whose running time
    /// and memory accesses do not depend on the noise or the key. Its law is within total
    /// variation `2^−100` of the exact one per value, so the release is `(ε, δ)`-DP with
    /// the `δ` of [`constant_time_delta`](crate::sampling::constant_time_delta) reserved
    /// out of the budget; it has no zCDP form and charges approximate-DP ledgers only.
    /// Output perturbation and the KV sketch support it (CPU); other mechanisms return
    /// [`Error::Unsupported`].
    ///
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    ConstantTime,
}

impl NoiseMode {
    /// `"exact"` or `"unsafe-float"`.
    ///
    /// ```
    /// # use dpattn_core::NoiseMode;
    /// assert_eq!(NoiseMode::UnsafeFloat.name(), "unsafe-float");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            NoiseMode::Exact => "exact",
            NoiseMode::UnsafeFloat => "unsafe-float",
            NoiseMode::ConstantTime => "constant-time",
        }
    }
}

/// The error of a mechanism that has no [`NoiseMode::ConstantTime`] path.
pub(crate) const CONSTANT_TIME_UNSUPPORTED: crate::Error = crate::Error::Unsupported {
    what: "NoiseMode::ConstantTime for this mechanism (only output perturbation and the KV sketch have a constant-time path)",
};

/// The `δ` left for the exact part of a [`NoiseMode::ConstantTime`] release of `samples`
/// values at `(ε, δ)`: `δ − δ_ct` (rounded down), `δ_ct` from
/// [`constant_time_delta`](crate::sampling::constant_time_delta) (`docs/PRIVACY.md` §12).
///
/// # Errors
/// [`crate::Error::OutOfRange`] when nothing is left.
pub(crate) fn constant_time_exact_delta(
    epsilon: f64,
    delta: f64,
    samples: u64,
) -> crate::Result<f64> {
    let share = crate::sampling::constant_time_delta(samples, epsilon);
    let rest = delta - share; // to nearest: at most half an ulp above δ − δ_ct
    let rest = rest - rest * f64::EPSILON;
    if rest.is_nan() || rest <= 0.0 || !share.is_finite() {
        return Err(crate::Error::OutOfRange {
            name: "delta",
            value: delta,
            allowed: "above (1 + e^epsilon)*N*2^-100, the constant-time sampler's share (N released values)",
        });
    }
    Ok(rest)
}

/// `⌊log₂ x⌋` for a positive finite `x` (exact).
pub(crate) fn floor_log2(x: f64) -> i32 {
    let (m, e) = libm::frexp(x); // x = m · 2^e, m ∈ [1/2, 1)
    let _ = m;
    e - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_log2_is_exact() {
        assert_eq!(floor_log2(1.0), 0);
        assert_eq!(floor_log2(1.99), 0);
        assert_eq!(floor_log2(2.0), 1);
        assert_eq!(floor_log2(0.3), -2);
        assert_eq!(floor_log2(f64::from_bits(1)), -1074);
        assert_eq!(floor_log2(f64::MAX), 1023);
    }
}
