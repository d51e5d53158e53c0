//! Public hyper-parameters of NoisyHead, their validation and the privacy calibration
//! (`docs/PAPERS.md` §4.4, §4.5 (eq. (4.1)), §4.6 and §4.8).
//!
//! **Guarantee.** [`NoisyHeadParams::validate`] accepts only parameter sets for which
//! Theorem 3.2 holds as proven: `σ ≥ σ_min = 2G(C + RG)` (rounded up) and a per-step
//! budget `ε/T < 1`, where the classical Gaussian mechanism the proof uses is valid
//! (Dwork–Roth Thm A.1; the paper leaves this unstated). Every parameter here must be
//! chosen without looking at the private prompts.

use crate::PrivacyBudget;
use crate::accounting::cost::Cost;
use crate::accounting::zcdp::{Rho, zcdp_rho_for, zcdp_rho_for_bs16, zcdp_to_epsilon};
use crate::calibration::gaussian_mechanism::classical_gaussian_sigma;
use crate::directed_rounding::{add_up, mul_up};
use crate::error::check_radius;
use crate::error::{Error, Result, mul_size, nonneg_finite, positive_finite};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, GaussianGrid, NoiseMode};
use crate::sampling::{check_largest, max_box_muller};

/// How the per-entry noise standard deviation `s` is calibrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accounting {
    /// Algorithm 1 as printed: each of the `T` steps is a classical Gaussian mechanism at
    /// `(ε/T, δ/T)`, composed with basic composition (Theorem 3.2). The ledger is charged
    /// [`Cost::Approx`]`(ε, δ)` (approximate-DP ledgers only). Every number of the paper's
    /// experiments uses this.
    #[default]
    Paper,
    /// **Our extension, not the paper's** (`docs/PAPERS.md` §4.4 and P4-26): the `T` steps are
    /// Gaussian mechanisms composed in zCDP, with total `ρ` (within `1e-14` relative of) the
    /// largest that converts to `(ε, δ)` ([`NoisyHeadParams::zcdp_rho`], the CKS20
    /// conversion). Same guarantee, far less noise:
    /// ≈9× smaller `s` at the low-dimensional preset (`T = 44`, `ε = 1`, `δ = 1e-5`; the
    /// 7.5× of `docs/PAPERS.md` P4-26 uses the looser BS16 conversion). The ledger is charged
    /// [`Cost::Gaussian`]: `ρ` on zCDP and RDP ledgers, the `(ε, δ)` it converts to on
    /// approximate-DP ledgers. Never mix with reproduction runs: it changes every number of
    /// the paper's figures.
    Zcdp,
}

/// All public inputs of Algorithm 1 (`docs/PAPERS.md` §4.4). Build one by hand (the paper's
/// configurations: `dpattn_paper::noisy_head::presets`), then call
/// [`validate`](Self::validate).
///
/// ```
/// use dpattn_core::noisy_head::schedule::t_low_dim_code;
/// use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
/// use dpattn_core::{Error, NoiseMode, PrivacyBudget};
/// // The paper's low-dimensional experiment (docs/PAPERS.md §4.6): D = 5, L = ⌊√N⌋, λ = 5,
/// // δ = 1e-5, Theorem 4.1's radii, η0 = 0.95·(2/3)·λ/(λ + G²)², the authors' rule for T
/// // and σ = σ_min (`dpattn_paper::noisy_head::presets::low_dim` builds the same).
/// fn low_dim(n: usize, l: usize, epsilon: f64) -> Result<NoisyHeadParams, Error> {
///     let (d, lambda) = (5, 5.0);
///     let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
///     let den = lambda + radii.g * radii.g;
///     let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
///     let mut p = NoisyHeadParams {
///         d, l, n, lambda, eta0, iters: t_low_dim_code(n, eta0, lambda)?,
///         clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
///         budget: PrivacyBudget::new(epsilon, 1e-5)?,
///         accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
///     };
///     p.sigma = p.sigma_min(); // the smallest σ of Theorem 3.2
///     Ok(p)
/// }
/// // docs/PAPERS.md T4-A and T4-B (checks P4-U3, P4-U4): the low-dimensional configuration
/// // at N = 1000 (L = 31), ε = 1.
/// let p = low_dim(1000, 31, 1.0)?;
/// assert_eq!((p.d, p.l, p.iters), (5, 31, 44));
/// assert!((p.noise_std()? / 1.6880798479843007 - 1.0).abs() < 1e-12);
/// p.validate()?;
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoisyHeadParams {
    /// Token dimension `D` (`Γ` is `D × D`).
    pub d: usize,
    /// Prompt length `L` (labelled context tokens per prompt).
    pub l: usize,
    /// Number of training prompts `N` (public: neighbours *replace* one prompt).
    pub n: usize,
    /// Ridge parameter `λ ≥ 0`.
    pub lambda: f64,
    /// Step size `η0 > 0`; must satisfy `η0 < 2/(2λ + G²)` (the descent is stable).
    pub eta0: f64,
    /// Number of iterations `T ≥ 1`, fixed before the run (`docs/PAPERS.md` P4-27).
    pub iters: u32,
    /// Label clipping bound `C > 0`.
    pub clip_c: f64,
    /// Projection radius `G > 0` of each `Z_k`.
    pub proj_g: f64,
    /// Projection radius `R > 0` of the iterate `Γ`.
    pub proj_r: f64,
    /// Noise scale `σ ≥ σ_min = 2G(C + RG)`.
    pub sigma: f64,
    /// `(ε, δ)` of the whole release; `δ > 0` (Gaussian noise).
    pub budget: PrivacyBudget,
    /// How `s` is calibrated (default [`Accounting::Paper`]).
    pub accounting: Accounting,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
}

/// The calibration of one release, computed once per release by
/// [`NoisyHeadParams::calibrate`].
///
/// ```
/// use dpattn_core::noisy_head::schedule::t_low_dim_code;
/// use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
/// use dpattn_core::{Error, NoiseMode, PrivacyBudget};
/// # fn low_dim(n: usize, l: usize, epsilon: f64) -> Result<NoisyHeadParams, Error> {
/// #     let (d, lambda) = (5, 5.0);
/// #     let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
/// #     let den = lambda + radii.g * radii.g;
/// #     let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
/// #     let mut p = NoisyHeadParams {
/// #         d, l, n, lambda, eta0, iters: t_low_dim_code(n, eta0, lambda)?,
/// #         clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
/// #         budget: PrivacyBudget::new(epsilon, 1e-5)?,
/// #         accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
/// #     };
/// #     p.sigma = p.sigma_min();
/// #     Ok(p)
/// # }
/// // `low_dim(n, l, ε)`: the paper's low-dimensional configuration, built as in
/// // the example of `NoisyHeadParams`.
/// let p = low_dim(4000, 63, 1.0)?;
/// let cal = p.calibrate()?;
/// assert_eq!(cal.noise_std(), p.noise_std()?);
/// // The exact release's grid: Λ = 2⁻²⁰ here, and its noise is within 0.4 % of s.
/// let grid = cal.grid().unwrap();
/// assert_eq!(grid.resolution(), 2f64.powi(-20));
/// assert!(grid.sigma() >= cal.noise_std() && grid.sigma() < 1.004 * cal.noise_std());
/// let float = NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..p };
/// assert!(float.calibrate()?.grid().is_none());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    noise_std: f64,
    budget: PrivacyBudget,
    rho: Option<Rho>,
    grid: Option<GaussianGrid>,
    mode: NoiseMode,
}

impl Calibration {
    /// `s`, the continuous noise std of one step ([`NoisyHeadParams::noise_std`]).
    pub fn noise_std(&self) -> f64 {
        self.noise_std
    }

    /// The exact release's grid and integer noise ([`NoiseMode::Exact`]; `None` for
    /// [`NoiseMode::UnsafeFloat`]): `Λ`, the inflated sensitivity, the noise.
    pub fn grid(&self) -> Option<&GaussianGrid> {
        self.grid.as_ref()
    }

    /// Which noise the release draws.
    pub fn noise_mode(&self) -> NoiseMode {
        self.mode
    }

    /// What a ledger is charged ([`NoisyHeadParams::cost`]).
    pub fn cost(&self) -> Cost {
        match self.rho {
            Some(rho) => Cost::Gaussian { approx: Some(self.budget), rho: rho.get() },
            None => Cost::Approx(self.budget),
        }
    }
}

/// Data-independent flags about a parameter set that are allowed but worth knowing
/// (the soft diagnostics of `docs/PAPERS.md` §4.8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Diagnostics {
    /// `η0` lies in Theorem 4.1's interval `(λ/(c(2λ+G²)²), λ/(2λ+G²)²)` for `c = 100`.
    /// The paper's low-dimensional presets exceed the upper end by ≈2× (`docs/PAPERS.md` P4-6).
    pub eta0_in_theorem_interval: bool,
    /// Theorem 4.1's upper end `λ/(2λ+G²)²`.
    pub eta0_theorem_upper: f64,
    /// The contraction factor of the noiseless map, `a = 1 − 2λη0`.
    pub contraction: f64,
}

impl NoisyHeadParams {
    /// `σ_min = 2G(C + RG)`, rounded up (Theorem 3.2).
    pub fn sigma_min(&self) -> f64 {
        mul_up(2.0 * self.proj_g, add_up(self.clip_c, mul_up(self.proj_r, self.proj_g)))
    }

    /// The ℓ2 (Frobenius) sensitivity of one gradient step under replace-one neighbours,
    /// `2η0(RG² + CG)/N = η0·σ_min/N` (eq. A.1), rounded up. The noise is calibrated to
    /// the larger `η0·σ/N`.
    pub fn sensitivity(&self) -> f64 {
        mul_up(self.eta0, self.sigma_min()) / self.n as f64 * (1.0 + 2.0 * f64::EPSILON)
    }

    /// `η0σ/N·(1 + 2⁻⁵¹)`: the step sensitivity the noise is calibrated to. The factor
    /// covers the three roundings, so it is at least the exact `η0σ/N` for `N < 2⁵³`.
    pub(crate) fn noise_sensitivity(&self) -> f64 {
        self.eta0 * self.sigma / self.n as f64 * (1.0 + 2.0 * f64::EPSILON)
    }

    /// The per-entry standard deviation `s` of the noise `z_t`.
    ///
    /// [`Accounting::Paper`]: `s = η0·T·σ·√(2 ln(1.25T/δ)) / (ε N)`, i.e. the classical
    /// Gaussian mechanism at `(ε/T, δ/T)` with sensitivity `η0σ/N` (rounded up).
    /// [`Accounting::Zcdp`]: `s = (η0σ/N)·√(T/(2ρ))` with `ρ` = [`Self::zcdp_rho`].
    ///
    /// # Errors
    /// Those of [`validate`](Self::validate) that concern `ε, δ, η0, σ, N, T`.
    pub fn noise_std(&self) -> Result<f64> {
        self.noise_std_and_rho().map(|(s, _)| s)
    }

    /// `s` and, under [`Accounting::Zcdp`], the `ρ` it was calibrated for.
    fn noise_std_and_rho(&self) -> Result<(f64, Option<Rho>)> {
        self.check_privacy_inputs()?;
        let t = f64::from(self.iters);
        let step_sens = self.noise_sensitivity();
        match self.accounting {
            Accounting::Paper => {
                let (eps, delta) = (self.budget.epsilon().get(), self.budget.delta().get());
                Ok((classical_gaussian_sigma(eps / t, delta / t, step_sens)?, None))
            }
            Accounting::Zcdp => {
                let rho = self.zcdp_rho()?;
                let s = step_sens * libm::sqrt(t / (2.0 * rho.get())) * (1.0 + 4.0 * f64::EPSILON);
                positive_finite("noise std", s)?;
                Ok((s, Some(rho)))
            }
        }
    }

    /// The total zCDP parameter `ρ` of the release under [`Accounting::Zcdp`]: a `ρ` whose
    /// conversion by [`zcdp_to_epsilon`] (what a ledger computes) is at most `ε`, within
    /// `1e-14` relative of the largest one ([`zcdp_rho_for`]; either side by a few ulps,
    /// as the conversion is monotone in ρ only up to its rounding).
    ///
    /// It is solved directly rather than by [`zcdp_rho_for`]'s nested bisection (which
    /// made a zCDP release about 7× slower than the paper mode, issue 28): CKS20 Cor 13 makes
    /// ρ-zCDP `(ε, δ)`-DP for every order `α > 1` with
    /// `ε = αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)`, so at each order the largest ρ is
    /// `g(α) = (ε − (ln(1/δ) − ln α)/(α − 1) − ln(1 − 1/α))/α`, and any order gives a valid ρ.
    /// `g` is maximised by golden-section search over `ln(α − 1)` (the tightness only), the
    /// Bun–Steinke closed form is the floor, and the result is lowered until the crate's own
    /// conversion confirms `ε` (the soundness, independent of the search).
    ///
    /// ```
    /// use dpattn_core::accounting::zcdp::{zcdp_rho_for, zcdp_to_epsilon};
    /// use dpattn_core::noisy_head::schedule::t_low_dim_code;
    /// use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
    /// use dpattn_core::{Delta, Error, NoiseMode, PrivacyBudget};
    /// # fn low_dim(n: usize, l: usize, epsilon: f64) -> Result<NoisyHeadParams, Error> {
    /// #     let (d, lambda) = (5, 5.0);
    /// #     let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
    /// #     let den = lambda + radii.g * radii.g;
    /// #     let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
    /// #     let mut p = NoisyHeadParams {
    /// #         d, l, n, lambda, eta0, iters: t_low_dim_code(n, eta0, lambda)?,
    /// #         clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
    /// #         budget: PrivacyBudget::new(epsilon, 1e-5)?,
    /// #         accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
    /// #     };
    /// #     p.sigma = p.sigma_min();
    /// #     Ok(p)
    /// # }
    /// // `low_dim(n, l, ε)`: the paper's low-dimensional configuration, built as in
    /// // the example of `NoisyHeadParams`.
    /// let p = NoisyHeadParams { accounting: Accounting::Zcdp, ..low_dim(1000, 31, 1.0)? };
    /// let rho = p.zcdp_rho()?;
    /// assert!(zcdp_to_epsilon(rho, Delta::new(1e-5)?)? <= 1.0);
    /// let largest = zcdp_rho_for(PrivacyBudget::new(1.0, 1e-5)?)?.get();
    /// assert!((rho.get() / largest - 1.0).abs() <= 1e-14);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `δ = 0`.
    pub fn zcdp_rho(&self) -> Result<Rho> {
        zcdp_rho_direct(self.budget)
    }

    /// What a ledger is charged for one release: [`Cost::Approx`]`(ε, δ)` under
    /// [`Accounting::Paper`]; under [`Accounting::Zcdp`] [`Cost::Gaussian`] with `ρ` (zCDP
    /// and RDP ledgers) and the `(ε, δ)` it converts to (approximate-DP ledgers).
    ///
    /// # Errors
    /// `δ = 0` under [`Accounting::Zcdp`].
    pub fn cost(&self) -> Result<Cost> {
        Ok(match self.accounting {
            Accounting::Paper => Cost::Approx(self.budget),
            Accounting::Zcdp => {
                Cost::Gaussian { approx: Some(self.budget), rho: self.zcdp_rho()?.get() }
            }
        })
    }

    /// Checks every hard rule of `docs/PAPERS.md` §4.8; all of them depend on public inputs only.
    ///
    /// # Errors
    /// * [`Error::OutOfRange`]: `d`, `l`, `n`, `iters` zero; `σ, η0` not positive and
    ///   finite; `C, G, R` outside `[1e-100, 1e100]` (keeps every product of the step far
    ///   from underflow and overflow); `δ = 0`; `λ` negative or not finite.
    /// * [`Error::Infeasible`]: `σ < σ_min` (Theorem 3.2); `ε/T ≥ 1` under
    ///   [`Accounting::Paper`] (classical Gaussian mechanism outside its proven range: use
    ///   more iterations, a smaller ε, or [`Accounting::Zcdp`]); `η0 ≥ 2/(2λ + G²)` (the
    ///   descent diverges and `Π_R` would hide it).
    /// * [`Error::SizeOverflow`]: `D²`, `N·L·D` or `T·D²` overflow.
    /// * [`NoiseMode::Exact`] only, [`Error::OutOfRange`]: `T·D² > 2⁴⁰` (noise elements),
    ///   sizes or radii beyond the exact release's error bound, or no grid that holds the
    ///   release (module `exact` of `noisy_head`, `docs/PRIVACY.md` §5.5).
    pub fn validate(&self) -> Result<()> {
        self.calibrate().map(|_| ())
    }

    /// Checks the parameters ([`validate`](Self::validate)) and computes everything one
    /// release needs: `s`, the charge, and the exact release's grid. One call per
    /// release: under [`Accounting::Zcdp`] it solves for `ρ` once.
    ///
    /// # Errors
    /// Those of [`validate`](Self::validate).
    pub fn calibrate(&self) -> Result<Calibration> {
        self.check()?;
        let (noise_std, rho) = self.noise_std_and_rho()?;
        let grid = match self.noise_mode {
            NoiseMode::Exact => Some(super::exact::exact_grid(self, noise_std)?),
            NoiseMode::UnsafeFloat => {
                // Γ + s·z with |Γ| far below f64::MAX/2 (radii ≤ 1e100): the largest f64
                // normal, 8.57, times s must stay below it too.
                check_largest(
                    "noise std s (its largest Gaussian draw, 8.57·s, must stay below f64::MAX/2)",
                    noise_std,
                    noise_std * max_box_muller::<f64>(),
                    f64::MAX / 2.0,
                    "a noise std whose largest draw is finite",
                )?;
                None
            }
            NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
        };
        Ok(Calibration { noise_std, budget: self.budget, rho, grid, mode: self.noise_mode })
    }

    /// The checks of [`validate`](Self::validate) that need no calibration.
    fn check(&self) -> Result<()> {
        for (name, v) in [("d", self.d), ("l", self.l), ("n", self.n)] {
            if v == 0 {
                return Err(Error::OutOfRange { name, value: 0.0, allowed: "[1, inf)" });
            }
        }
        self.check_privacy_inputs()?;
        check_radius("clip_c", self.clip_c)?;
        check_radius("proj_g", self.proj_g)?;
        check_radius("proj_r", self.proj_r)?;
        nonneg_finite("lambda", self.lambda)?;
        let d2 = mul_size(self.d, self.d, "D²")?;
        mul_size(mul_size(self.n, self.l, "N·L")?, self.d, "N·L·D")?;
        mul_size(d2, self.iters as usize, "T·D²")?;
        let sigma_min = self.sigma_min();
        if !sigma_min.is_finite() || self.sigma < sigma_min {
            return Err(Error::Infeasible {
                condition: "Theorem 3.2: σ ≥ σ_min = 2G(C + RG)",
                lhs: self.sigma,
                rhs: sigma_min,
            });
        }
        let limit = 2.0 / (2.0 * self.lambda + self.proj_g * self.proj_g);
        if self.eta0 >= limit {
            return Err(Error::Infeasible {
                condition: "stable descent: η0 < 2/(2λ + G²)",
                lhs: self.eta0,
                rhs: limit,
            });
        }
        Ok(())
    }

    fn check_privacy_inputs(&self) -> Result<()> {
        if self.iters == 0 {
            return Err(Error::OutOfRange { name: "iters", value: 0.0, allowed: "[1, inf)" });
        }
        if self.n == 0 {
            return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: "[1, inf)" });
        }
        positive_finite("eta0", self.eta0)?;
        positive_finite("sigma", self.sigma)?;
        let (epsilon, delta) = (self.budget.epsilon().get(), self.budget.delta().get());
        if delta <= 0.0 {
            return Err(Error::OutOfRange { name: "delta", value: delta, allowed: "(0, 1)" });
        }
        let per_step = epsilon / f64::from(self.iters);
        if self.accounting == Accounting::Paper && per_step >= 1.0 {
            return Err(Error::Infeasible {
                condition: "classical Gaussian mechanism per step: ε/T < 1",
                lhs: per_step,
                rhs: 1.0,
            });
        }
        Ok(())
    }

    /// The soft diagnostics of `docs/PAPERS.md` §4.8 (never an error).
    pub fn diagnostics(&self) -> Diagnostics {
        let denom = 2.0 * self.lambda + self.proj_g * self.proj_g;
        let upper = self.lambda / (denom * denom);
        Diagnostics {
            eta0_in_theorem_interval: self.eta0 < upper && self.eta0 > upper / 100.0,
            eta0_theorem_upper: upper,
            contraction: 1.0 - 2.0 * self.lambda * self.eta0,
        }
    }
}

/// The `ρ` of [`NoisyHeadParams::zcdp_rho`]: `max_α g(α)` by golden-section search, at
/// least the Bun–Steinke closed form, then lowered (by `2⁻⁵⁰` relative steps, at most a
/// few) until [`zcdp_to_epsilon`] confirms `ε`; [`zcdp_rho_for`] if that ever fails.
fn zcdp_rho_direct(target: PrivacyBudget) -> Result<Rho> {
    let (eps, delta) = (target.epsilon().get(), target.delta());
    let floor = zcdp_rho_for_bs16(target)?.get();
    let l = -libm::log(delta.get());
    // ρ at order α = 1 + e^u: (ε − (L − ln(1 + t))/t − ln(t/(1 + t)))/(1 + t), t = e^u.
    let g = |u: f64| {
        let t = libm::exp(u);
        (eps - (l - libm::log1p(t)) / t + libm::log1p(1.0 / t)) / (1.0 + t)
    };
    // The optimal order is near 1 + 2(L + ε)/ε for small ε and below it for large ε:
    // search ln t over ±24 around that (g is flat at its maximum, so 64 golden steps,
    // an interval of 48·0.618⁶⁴ ≈ 2e-12, leave ρ within rounding of the optimum).
    let centre = libm::log(2.0 * (l + eps) / eps);
    let (mut a, mut b) = (centre - 24.0, centre + 24.0);
    const INV_PHI: f64 = 0.618_033_988_749_894_9;
    let (mut c, mut d) = (b - INV_PHI * (b - a), a + INV_PHI * (b - a));
    let (mut gc, mut gd) = (g(c), g(d));
    for _ in 0..64 {
        if gc >= gd {
            (b, d, gd) = (d, c, gc);
            c = b - INV_PHI * (b - a);
            gc = g(c);
        } else {
            (a, c, gc) = (c, d, gd);
            d = a + INV_PHI * (b - a);
            gd = g(d);
        }
    }
    let best = gc.max(gd);
    let mut rho = if best.is_finite() { best.max(floor) } else { floor };
    for _ in 0..8 {
        if zcdp_to_epsilon(Rho::new(rho)?, delta)? <= eps {
            return Rho::new(rho);
        }
        rho *= 1.0 - libm::ldexp(1.0, -50);
    }
    zcdp_rho_for(target)
}

/// Which printed form of the projection radius `G` to use (`docs/PAPERS.md` P4-9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GForm {
    /// Eq. (4.1): `G = (C/√L)(1 + √(ln(N/κ))/D)`.
    Theorem41,
    /// Proof (A.11): `G = (C/√L)(1 + (ln(N/κ)/D²)^{1/4})`; what the paper's experiments use.
    /// Only `G` changes: `R` and `G0` always use the (4.1) form (the same as (A.12), (A.13)
    /// at `κ = 1`).
    Proof,
}

/// The clipping and projection radii of Theorem 4.1 (eq. (4.1); `docs/PAPERS.md` §4.5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Radii {
    /// Label clip `C = √(2ν ln(NL/κ))`, `ν = 1 + τ²`.
    pub c: f64,
    /// Projection radius of each `Z_k` (see [`GForm`]).
    pub g: f64,
    /// Test-prompt radius `G0 = (C/√L)(1 + √(ln(1/κ))/D)` (used only by the risk bound).
    pub g0: f64,
    /// Iterate radius `R = r_scale · C²√(N/L)/λ · (1 + √(ln(1/κ))/D)`.
    pub r: f64,
}

impl Radii {
    /// Eq. (4.1) with the constant of `R` set to `r_scale` (1 in the theorem). The
    /// experiments use `κ = 1`, `τ² = 0` and [`GForm::Proof`].
    ///
    /// ```
    /// use dpattn_core::noisy_head::{GForm, Radii};
    /// // docs/PAPERS.md T4-A (check P4-U4), low-dim N = 1000: L = 31, D = 5, λ = 5.
    /// let r = Radii::theorem41(1000, 31, 5, 5.0, 0.0, 1.0, GForm::Proof, 1.0)?;
    /// assert!((r.c / 4.547909955895627 - 1.0).abs() < 1e-12);
    /// assert!((r.g / 1.4090448880154893 - 1.0).abs() < 1e-12);
    /// assert!((r.r / 23.494860120883494 - 1.0).abs() < 1e-12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for zero sizes, `λ ≤ 0`, `τ² < 0`, `κ ∉ (0, 1]`,
    /// `r_scale ≤ 0`, or `NL/κ ≤ 1` (then `C` is not defined).
    #[allow(clippy::too_many_arguments)]
    pub fn theorem41(
        n: usize,
        l: usize,
        d: usize,
        lambda: f64,
        tau2: f64,
        kappa: f64,
        gform: GForm,
        r_scale: f64,
    ) -> Result<Self> {
        for (name, v) in [("n", n), ("l", l), ("d", d)] {
            if v == 0 {
                return Err(Error::OutOfRange { name, value: 0.0, allowed: "[1, inf)" });
            }
        }
        positive_finite("lambda", lambda)?;
        positive_finite("r_scale", r_scale)?;
        let tau2 = nonneg_finite("tau2", tau2)?;
        if !(kappa > 0.0 && kappa <= 1.0) {
            return Err(Error::OutOfRange { name: "kappa", value: kappa, allowed: "(0, 1]" });
        }
        let (nf, lf, df) = (n as f64, l as f64, d as f64);
        let log_nl = libm::log(nf * lf / kappa);
        if log_nl <= 0.0 {
            return Err(Error::OutOfRange {
                name: "n·l/kappa",
                value: nf * lf / kappa,
                allowed: "(1, inf)",
            });
        }
        let c = libm::sqrt(2.0 * (1.0 + tau2) * log_nl);
        let base = c / libm::sqrt(lf);
        let log_n = libm::log(nf / kappa);
        let g = match gform {
            GForm::Theorem41 => base * (1.0 + libm::sqrt(log_n) / df),
            GForm::Proof => base * (1.0 + libm::sqrt(libm::sqrt(log_n / (df * df)))),
        };
        let conf = 1.0 + libm::sqrt(libm::log(1.0 / kappa)) / df;
        Ok(Self { c, g, g0: base * conf, r: r_scale * c * c * libm::sqrt(nf / lf) / lambda * conf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::zcdp::zcdp_rho_for;

    #[test]
    fn direct_rho_is_valid_and_within_1e_14_of_the_largest() {
        // Issue 28: the zCDP mode solved ρ by zcdp_rho_for's nested bisection on every
        // release. The direct solution must convert to at most ε (the ledger's check) and
        // differ by at most 1e-14 relative from the largest valid ρ (measured: 8e-16).
        let mut worst = 0.0f64;
        for eps in [1e-9, 1e-6, 1e-3, 0.05, 0.3, 1.0, 2.0, 8.0, 40.0, 300.0, 5e3] {
            for delta in [1e-300, 1e-40, 1e-12, 1e-5, 1e-2, 0.3, 0.9] {
                let target = PrivacyBudget::new(eps, delta).unwrap();
                let rho = zcdp_rho_direct(target).unwrap().get();
                let largest = zcdp_rho_for(target).unwrap().get();
                assert!(
                    zcdp_to_epsilon(Rho::new(rho).unwrap(), target.delta()).unwrap() <= eps,
                    "ε = {eps}, δ = {delta}: ρ = {rho} converts above ε"
                );
                let gap = (1.0 - rho / largest).abs();
                assert!(gap <= 1e-14, "ε = {eps}, δ = {delta}: {rho} vs {largest}");
                worst = worst.max(gap);
            }
        }
        std::println!("direct ρ: largest relative gap to zcdp_rho_for {worst:e}");
    }
}
