//! The parameters of one DP-Forward hook and its calibration (`docs/PAPERS.md` §3.5–§3.7,
//! errata P3-1, P3-6).
//!
//! **Guarantee.** For a plan of `k = releases` releases of the same input, each adding
//! independent noise whose factors satisfy `σ_min(U)·σ_min(V) ≥`
//! [`noise_floor`](DpForwardParams::noise_floor) `= S·√k / A(ε, δ)`, the `k` releases
//! together are `(ε, δ)`-DP under the configured neighbour relation, with
//! `S` = [`sensitivity`](DpForwardParams::sensitivity). Proof: each release is a Gaussian
//! mechanism whose privacy-loss variable is `N(η, 2η)` with `√(2η) ≤ S/σ_floor` (Lemma 4
//! and Theorem 6); the losses of `k` adaptive releases add, so their sum is `N(kη, 2kη)`,
//! the loss of one release with sensitivity `S√k`, which Algorithm 1 calibrates
//! (`docs/PAPERS.md` §3.7, "Composition over epochs", reference values T3-C). Basic
//! composition `(kε, kδ)` would need more noise.
//!
//! **\[FIX\] P3-1.** [`SensitivityRule::Derived`] (the default) calibrates with the true
//! sensitivity (`2C` for Frobenius clipping). [`SensitivityRule::ReleasedCode`] reproduces
//! the authors' code, which calibrates with half of it (`C`); the noise is then that of the
//! paper's experiments, and [`guarantee`](DpForwardParams::guarantee) reports — and a
//! ledger is charged — the *effective* ε of the real sensitivity (nominal ε = 8 at
//! δ = 1e-5 is really ε = 19.12, T3-G).
//!
//! **\[FIX\] P3-6.** The paper's tables calibrate each release and never compose the `k = 3`
//! epochs. Here `releases` is part of the calibration; for a frozen `f`, release once and
//! reuse the noisy matrix instead (post-processing is free).

use crate::accounting::composition::Rho;
use crate::accounting::ledger::Charge;
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::accounting::zcdp::zcdp_gaussian;
use crate::calibration::amgm::amgm_sigma;
use crate::calibration::gaussian_mechanism::analytic_gaussian_epsilon;
use crate::directed_rounding::{div_up, mul_up, sqrt_up};
use crate::dp_forward::clip::{ClipMode, ClipRegion};
use crate::dp_forward::sensitivity::{Neighbours, NoisePosition, check_neighbours, sensitivity};
use crate::error::{Error, Result, check_radius, mul_size};
use crate::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat, NoiseMode};
use crate::privacy_params::{PrivacyBudget, Sensitivity};

/// Which sensitivity the noise is calibrated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SensitivityRule {
    /// The true sensitivity of the clip and the neighbour relation ([`sensitivity`]).
    Derived,
    /// Half of it, as the released code does (`S = C` for Frobenius clipping,
    /// `docs/PAPERS.md` P3-1). For reproducing the paper only: the guarantee charged is the
    /// effective one.
    ReleasedCode,
}

/// One DP-Forward hook: how the hidden matrix is bounded, which inputs are neighbours, the
/// budget of the whole plan and its number of releases.
///
/// ```
/// use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
///     NoisePosition, SensitivityRule};
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// let p = DpForwardParams {
///     budget: PrivacyBudget::new(8.0, 1e-5)?, releases: 1, clip_norm: 1.0,
///     region: ClipRegion::Frobenius, mode: ClipMode::Normalize,
///     neighbours: Neighbours::Sequence, position: NoisePosition::Pooled,
///     tokens: 1, dim: 768, rule: SensitivityRule::Derived, noise_mode: NoiseMode::Exact,
/// };
/// p.validate()?;
/// // docs/PAPERS.md T3-A, ε = 8, S₂ = 2C = 2: σ = 1.2004581444.
/// assert_eq!(p.sensitivity()?, 2.0);
/// assert!((p.noise_floor()? / 1.2004581444 - 1.0).abs() < 1e-10);
/// // The released code's S = C gives the paper's "~0.6", really ε = 19.12 (T3-G).
/// let code = DpForwardParams { rule: SensitivityRule::ReleasedCode, ..p };
/// assert!((code.noise_floor()? / 0.600229072199 - 1.0).abs() < 1e-10);
/// assert!((code.guarantee()?.epsilon().get() / 19.121181 - 1.0).abs() < 1e-6);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpForwardParams {
    /// `(ε, δ)` for all `releases` releases of one input together; `δ > 0`.
    pub budget: PrivacyBudget,
    /// `k ≥ 1`: how many times one input is released (epochs, for an `f` that changes).
    pub releases: u32,
    /// `C`, in `[1e-100, 1e100]`.
    pub clip_norm: f64,
    /// Frobenius (whole sequence) or per-row clipping.
    pub region: ClipRegion,
    /// Clip, normalise, or the released code's clip.
    pub mode: ClipMode,
    /// The neighbour relation the guarantee is for.
    pub neighbours: Neighbours,
    /// Where the host applies the hook (decides whether token-level neighbours are valid).
    pub position: NoisePosition,
    /// `n`, the padded sequence length (rows per sequence); 1 at [`NoisePosition::Pooled`].
    pub tokens: usize,
    /// `d`, the hidden size.
    pub dim: usize,
    /// The sensitivity used for calibration.
    pub rule: SensitivityRule,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

impl DpForwardParams {
    /// Checks every parameter (nothing here depends on private data).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `δ = 0`, `releases = 0`, `C ∉ [1e-100, 1e100]`,
    /// `tokens = 0`, `dim = 0`, `Tokens(0)`, or `tokens ≠ 1` at the pooled position;
    /// [`Error::SizeOverflow`] if `tokens · dim` overflows; [`Error::Unsupported`] for
    /// token-level neighbours at a position that is not row-local; [`Error::Unsupported`]
    /// for [`SensitivityRule::ReleasedCode`] with anything but Frobenius clipping and
    /// sequence neighbours (the only setting the code ran).
    pub fn validate(&self) -> Result<()> {
        if self.budget.delta().get() <= 0.0 {
            return Err(Error::OutOfRange {
                name: "delta",
                value: 0.0,
                allowed: "(0, 1): no Gaussian noise gives pure DP",
            });
        }
        if self.releases == 0 {
            return Err(Error::OutOfRange { name: "releases", value: 0.0, allowed: ">= 1" });
        }
        check_radius("clip_norm", self.clip_norm)?;
        if self.tokens == 0 || self.dim == 0 {
            return Err(Error::OutOfRange {
                name: if self.tokens == 0 { "tokens" } else { "dim" },
                value: 0.0,
                allowed: ">= 1",
            });
        }
        mul_size(self.tokens, self.dim, "tokens * dim")?;
        if self.position == NoisePosition::Pooled && self.tokens != 1 {
            return Err(Error::OutOfRange {
                name: "tokens",
                value: self.tokens as f64,
                allowed: "1 at the pooled position (a 1 × d feature)",
            });
        }
        check_neighbours(self.neighbours, self.position)?;
        if self.rule == SensitivityRule::ReleasedCode
            && (self.region != ClipRegion::Frobenius || self.neighbours != Neighbours::Sequence)
        {
            return Err(Error::Unsupported {
                what: "SensitivityRule::ReleasedCode reproduces Frobenius clipping with sequence neighbours only",
            });
        }
        Ok(())
    }

    /// The privacy unit of the guarantee: one sequence, or up to `count` tokens (rows of the
    /// hidden matrix) at the token level.
    ///
    /// ```
    /// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    /// use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
    ///     NoisePosition, SensitivityRule};
    /// use dpattn_core::{NoiseMode, PrivacyBudget};
    /// let mut p = DpForwardParams {
    ///     budget: PrivacyBudget::new(1.0, 1e-5)?, releases: 1, clip_norm: 1.0,
    ///     region: ClipRegion::Rows, mode: ClipMode::Clip, neighbours: Neighbours::Tokens(2),
    ///     position: NoisePosition::Embedding, tokens: 16, dim: 8,
    ///     rule: SensitivityRule::Derived, noise_mode: NoiseMode::Exact,
    /// };
    /// assert_eq!(p.privacy_unit()?, PrivacyUnit::tokens(2)?);
    /// p.neighbours = Neighbours::Sequence;
    /// assert_eq!(p.privacy_unit()?, PrivacyUnit::Sequence);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a token count of 0 or above `u32::MAX`.
    pub fn privacy_unit(&self) -> Result<PrivacyUnit> {
        match self.neighbours {
            Neighbours::Sequence => Ok(PrivacyUnit::Sequence),
            Neighbours::Tokens(c) => PrivacyUnit::tokens(u32::try_from(c).unwrap_or(0)),
        }
    }

    /// The true L2 sensitivity `S₂` of one release (the module table of
    /// [`sensitivity`](super::sensitivity)), whatever the rule.
    ///
    /// # Errors
    /// As [`validate`](Self::validate).
    pub fn sensitivity(&self) -> Result<f64> {
        self.validate()?;
        sensitivity(self.region, self.neighbours, self.clip_norm, self.tokens)
    }

    /// The sensitivity of the whole plan the noise is calibrated for: `S·√k`, with `S` the
    /// true sensitivity, or half of it under [`SensitivityRule::ReleasedCode`]. Rounded up.
    fn calibration_sensitivity(&self) -> Result<f64> {
        let s = self.sensitivity()?;
        let s = match self.rule {
            SensitivityRule::Derived => s,
            SensitivityRule::ReleasedCode => s / 2.0, // exact
        };
        Ok(mul_up(s, sqrt_up(f64::from(self.releases))))
    }

    /// The smallest admissible `σ_min(U)·σ_min(V)`: the per-entry standard deviation of
    /// i.i.d. noise, `S·√k / A(ε, δ)` rounded up (Algorithm 1, [`amgm_sigma`]).
    ///
    /// # Errors
    /// As [`validate`](Self::validate) and [`amgm_sigma`].
    pub fn noise_floor(&self) -> Result<f64> {
        let s = self.calibration_sensitivity()?;
        amgm_sigma(self.budget.epsilon().get(), self.budget.delta().get(), s)
    }

    /// The `(ε, δ)` the whole plan of `releases` releases satisfies: the budget under
    /// [`SensitivityRule::Derived`]; under [`SensitivityRule::ReleasedCode`] the effective
    /// ε of the noise floor against the true `S₂·√k` at the same δ, rounded up.
    ///
    /// # Errors
    /// As [`noise_floor`](Self::noise_floor).
    pub fn guarantee(&self) -> Result<PrivacyBudget> {
        match self.rule {
            SensitivityRule::Derived => {
                self.validate()?;
                Ok(self.budget)
            }
            SensitivityRule::ReleasedCode => self.guarantee_at(self.noise_floor()?),
        }
    }

    /// [`guarantee`](Self::guarantee) for an already computed floor (the hook calibrates
    /// once per call).
    pub(crate) fn guarantee_at(&self, floor: f64) -> Result<PrivacyBudget> {
        match self.rule {
            SensitivityRule::Derived => Ok(self.budget),
            SensitivityRule::ReleasedCode => {
                let true_s = mul_up(self.sensitivity()?, sqrt_up(f64::from(self.releases)));
                let delta = self.budget.delta().get();
                PrivacyBudget::new(analytic_gaussian_epsilon(floor, delta, true_s)?, delta)
            }
        }
    }

    /// What an approximate-DP ledger is charged for the whole plan (once per input, before
    /// its first release): `Charge::Approx(`[`guarantee`](Self::guarantee)`)`.
    ///
    /// # Errors
    /// As [`guarantee`](Self::guarantee).
    pub fn plan_charge<const N: usize>(&self) -> Result<Charge<N>> {
        Ok(Charge::Approx(self.guarantee()?))
    }

    /// The exact zCDP cost of one release, `ρ = S₂²/(2σ²)` with the true `S₂` and
    /// `σ` = [`noise_floor`](Self::noise_floor) (Bun & Steinke 2016, Prop 1.6), rounded up;
    /// `k` releases cost `kρ`.
    ///
    /// # Errors
    /// As [`noise_floor`](Self::noise_floor).
    pub fn release_rho(&self) -> Result<Rho> {
        self.release_rho_at(self.noise_floor()?)
    }

    /// [`release_rho`](Self::release_rho) for an already computed floor.
    pub(crate) fn release_rho_at(&self, floor: f64) -> Result<Rho> {
        zcdp_gaussian(Sensitivity::new(self.sensitivity()?)?, floor)
    }

    /// The number of released coordinates one neighbour can change: `c·dim` for `c` changed
    /// rows under row clipping, `tokens·dim` otherwise (a Frobenius clip rescales the whole
    /// sequence). After [`validate`](Self::validate), which bounds `tokens·dim`.
    fn changed_coordinates(&self) -> u64 {
        let rows = match (self.region, self.neighbours) {
            (ClipRegion::Rows, Neighbours::Tokens(c)) => c.min(self.tokens),
            _ => self.tokens,
        };
        rows as u64 * self.dim as u64 // ≤ tokens·dim < 2^64
    }

    /// The exact grid release of one i.i.d. release in `format` (module docs of
    /// [`dp_forward`](super); `docs/PRIVACY.md` §6.5): a [`GaussianGrid`] for the true
    /// sensitivity `S` ([`sensitivity`](Self::sensitivity)), over the coordinates one
    /// neighbour can change (`tokens·dim`, or `c·dim` for `c` changed rows under row
    /// clipping), computation error 0 (the clip's *computed* blocks have exact norm `≤ C`),
    /// values bounded by `C`, and noise multiplier `floor/S`, so that its continuous noise
    /// is `floor·S′/S` for the rounded sensitivity `S′` and every guarantee of the float
    /// calibration (and the charge) carries over. The GPU token-level kernel uses it too.
    ///
    /// ```
    /// use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
    ///     NoisePosition, SensitivityRule};
    /// use dpattn_core::grid_release::GridFormat;
    /// use dpattn_core::{NoiseMode, PrivacyBudget};
    /// let p = DpForwardParams {
    ///     budget: PrivacyBudget::new(8.0, 1e-5)?, releases: 1, clip_norm: 1.0,
    ///     region: ClipRegion::Frobenius, mode: ClipMode::Normalize,
    ///     neighbours: Neighbours::Sequence, position: NoisePosition::Pooled,
    ///     tokens: 1, dim: 768, rule: SensitivityRule::Derived, noise_mode: NoiseMode::Exact,
    /// };
    /// let g = p.exact_grid(GridFormat::F32)?;
    /// // Λ: the largest power of two with √768·Λ ≤ S/256 = 2/256, i.e. 2^-12.
    /// assert_eq!(g.resolution(), 2f64.powi(-12));
    /// let s_rounded = 2.0 + 768f64.sqrt() * 2f64.powi(-12);
    /// assert!((g.rounded_sensitivity() / s_rounded - 1.0).abs() < 1e-15);
    /// // The continuous noise is the float calibration's floor, scaled by S′/S.
    /// let floor = p.noise_floor()?;
    /// assert!(g.continuous_sigma() >= floor * s_rounded / 2.0);
    /// assert!(g.continuous_sigma() < floor * s_rounded / 2.0 * (1.0 + 1e-14));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`noise_floor`](Self::noise_floor), and those of [`GaussianGrid::calibrate`] (a
    /// clip norm or noise that no grid of `format` can hold, e.g. `C = 1e100` in `f32`).
    pub fn exact_grid(&self, format: GridFormat) -> Result<GaussianGrid> {
        self.exact_grid_at(self.noise_floor()?, format, self.clip_norm)
    }

    /// [`exact_grid`](Self::exact_grid) for an already computed floor, with value bound
    /// `value_bound ≥ C` (the diagonal noise raises it so that its larger noise fits).
    pub(crate) fn exact_grid_at(
        &self,
        floor: f64,
        format: GridFormat,
        value_bound: f64,
    ) -> Result<GaussianGrid> {
        let s = self.sensitivity()?;
        let spec = GaussianGridSpec {
            l2_sensitivity: s,
            dimension: self.changed_coordinates(),
            computation_error: 0.0,
            value_bound,
            format,
        };
        GaussianGrid::calibrate(&spec, div_up(floor, s))
    }
}
