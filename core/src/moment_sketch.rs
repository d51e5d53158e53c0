//! `[EXT]` The moment sketch (`docs/PAPERS.md` P1-X1): DP cross-attention by releasing
//! `M = P(K)ᵀ[1_n, V] ∈ R^{r×(d+1)}` once with one noise draw, then answering any number of
//! public query tokens `Õ_k = ⟨P(q), M̃_{:,k+1}⟩ / ⟨P(q), M̃_{:,0}⟩`. Not in paper 001: it is
//! exactly what the paper's trees compute in the noise-free limit (P1-26), without trees,
//! bins, own-bin bias or copies. The practical mode; reach for it before the trees.
//!
//! **Guarantee.** Neighbours differ in **one token** (row `j` of `K` and of `V`; `n` public).
//! For `K ∈ [0, R]^{n×d}` and `V ∈ [−R_w, R_w]^{n×d}` (private rows are clamped into that
//! domain, NaN → 0), one token contributes `P(k)[1, v]ᵀ`, so
//! * [`SketchNoise::Gaussian`]: Frobenius sensitivity `2·√(T_s(z_max))·√(1 + d R_w²)`
//!   (both sensitivities times [`SENSITIVITY_MARGIN`] for rounding)
//!   (`‖P(k)‖² = T_s(τ‖k‖²) ≤ T_s(z_max)`), analytic Gaussian mechanism (Balle & Wang 2018):
//!   `(ε, δ)`-DP;
//! * [`SketchNoise::Laplace`]: ℓ1 sensitivity `2·(Σ_a β_a)·(1 + d R_w)` with the per-feature
//!   bounds `β_a`: `ε`-DP.
//!
//! **Privacy unit:** [`PRIVACY_UNIT`], one token (replace-one). **The construction is the
//! release:** [`MomentSketch::new`] draws [`STREAMS`] (one) fresh stream id from a [`Session`]
//! and charges its ledger (kept for [`PRIVACY_UNIT`]) after the sketch is built and before
//! it is returned — Gaussian noise as [`Cost::Gaussian`] (its `(ε, δ)` on approximate-DP
//! ledgers, its zCDP `ρ` ([`MomentSketch::rho`]) on zCDP and RDP ledgers), Laplace noise as
//! the pure [`Cost::Pure`] `ε`; [`MomentSketch::new_keyed`] takes an explicit [`Draw`] and
//! an optional ledger, for replay, audit, and hosts that manage their own stream ids.
//!
//! Every answer, for every query, adaptive or not, is post-processing of `M̃`. The noise of
//! `⟨P(q), g⟩` is at most `‖P(q)‖·‖g‖ ≤ √(T_s(z_max))·‖g‖` for all `q` at once.
//! `[EXT]` P1-X8 (default on): the denominator is clamped into its public range
//! `[n, n·T_s(z_max)]` and outputs into `[−R_w, R_w]`.
//!
//! **Floating point: the exact release ([`NoiseMode::Exact`], the default).** `M̃` is
//! released on a public grid `Λ·ℤ` with exact integer noise ([`GaussianGrid`]: discrete
//! Gaussian, or [`LaplaceGrid`]: discrete Laplace, `f64` format, `r(d+1)` coordinates),
//! which needs a sensitivity `Δ` of the exact function and a bound `E` on the computation
//! error. Take as the exact function `f = Σ_j ĝ_j`, the **real** sum of the computed per-token
//! term matrices `ĝ_j = [fl(û_a(k_j)·v_{j,c})]` (`û = P(k)` as computed, `v_0 = 1`); each
//! `ĝ_j` is a function of token `j` alone, so `Δ = 2·max‖ĝ‖` over the clamped domain, and
//! `E` is the summation error alone.
//!
//! * *Per-token bound.* Feature `a` is a product of `t = |a| ≤ s` steps
//!   `fl(fl(p·fl(√τ·x_l))·fl(1/fl(√m)))`: six roundings per step, so
//!   `û_a = P_a(k)(1 + θ)`, `|θ| ≤ γ_{6s}` (`γ_k = ku/(1 − ku)`, `u = 2^−53`, `P` the exact map
//!   at the `f64` `τ`); one more for the product with `v_c`. With `P_a(k) ≤ β_a`,
//!   `Σ_a P_a(k)² = T_s(τ‖k‖²) ≤ T_s(z_max)` and `‖[1, v]‖ ≤ √(1 + d R_w²)`:
//!   `‖ĝ‖_F ≤ (1 + γ_{6s+1})·√T_s(z_max)·√(1 + d R_w²)` and
//!   `‖ĝ‖_1 ≤ (1 + γ_{6s+1})·(Σ_a β_a)·(1 + d R_w)`. The exact release takes `Δ` as twice
//!   these, evaluated with upward rounding (`T_s` term by term; `Σβ_a` from the computed
//!   `β̂_a ≥ (1 − γ_{6s})β_a`), instead of the unsafe-float path's [`SENSITIVITY_MARGIN`]
//!   (which also covers them: `γ_{6s+8} < 5·10^−14` for `s ≤ 64`, and `γ_r` for the `r`-term
//!   sum of `β̂` while `r < 9·10^6`).
//! * *Summation error.* The exact release sums the tokens in blocks of `B = ⌊√n⌋` (each
//!   block's partial sum, then the partial sums in order), so every term passes through at
//!   most `h = B + ⌈n/B⌉` rounded additions and, entrywise, `|f̂ − f| ≤ γ_h·Σ_j |ĝ_j|`;
//!   in Frobenius (or ℓ1) norm `E = γ_h·Σ_j ‖ĝ_j‖ ≤ γ_h·n·Δ/2` (Minkowski). Against `Δ` that
//!   is a relative `γ_h·n ≈ 2n^{3/2}u`: `2·10^−7` at `n = 10^6`, `7·10^−3` at `n = 10^9`.
//!   (The unsafe-float path keeps its plain running sum, `γ_n·n ≈ n²u`.)
//! * *Value bound* (accuracy only): `|f̂| ≤ n·Γ·max(1, R_w)` per entry (`β_a ≤ Γ`) plus `E`.
//!
//! [`GaussianGrid`] then releases `round(f̂/Λ) + N_ℤ(0, s²)` with `s = √((m·Δ′/Λ)² + 16)`,
//! `Δ′ = Δ + 2E + √(r(d+1))·Λ`, `m = σ/Δ` of the analytic Gaussian mechanism at `(ε, δ)`:
//! `(ε, δ)`-DP (up to `2·10^−117`, `grid_release`'s lemma); [`LaplaceGrid`] releases
//! `round(f̂/Λ) + DLap(Δ₁′/(Λε))`, `Δ₁′ = Δ₁ + 2E + r(d+1)·Λ`: `ε`-DP. The released floats are
//! `Λ` times integers, so the guarantee is the one of the floats the caller receives; entry
//! `(i, c)` uses the exact-sampler window of element `i·(d+1) + c`. The `(ε, δ)` charged
//! is the same in both modes; the zCDP `ρ` of the exact Gaussian release is the discrete
//! Gaussian's `(Δ′/Λ)²/(2s²)` ([`GaussianGrid::rho`], CKS20), that of the float path
//! `Δ²/(2σ²)`. [`NoiseMode::UnsafeFloat`] is the previous textbook release
//! `f̂ + z` with float `z` (not DP as shipped, Mironov 2012), kept bit for bit.

use alloc::vec::Vec;

use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::directed_rounding::{add_down, add_up, count_up, div_up, mul_down, mul_up, sqrt_up};
use crate::error::{Error, Result, mul_size};
use crate::grid_release::{
    CONSTANT_TIME_UNSUPPORTED, GaussianGrid, GaussianGridSpec, GridFormat, LaplaceGrid,
    LaplaceGridSpec, NoiseMode,
};
use crate::matrix_view::MatRef;
use crate::privacy_params::{Epsilon, PrivacyBudget};
use crate::sampling::{FixedWordSampler, Gaussian, KeyedStream, Laplace};
use crate::scratch::try_filled;
use crate::session::{Draw, Session};
use crate::softmax_tree::{
    QueryPolicy, SoftmaxTreeParams, TaylorFeatureMap, Temperature, clamp_private, query_features,
    taylor_exp,
};

/// The privacy unit: one token of the private context (row `j` of `K` and of `V`).
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::TOKEN;

/// Stream ids one release uses (`draw.stream` only).
pub const STREAMS: u64 = 1;

/// Relative margin on the unsafe-float path's sensitivities for floating-point rounding in
/// `P(k)` and its norms (module docs: it covers them; the exact release derives its own).
pub const SENSITIVITY_MARGIN: f64 = 1.0 + 1e-9;

/// The noise added to the sketch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SketchNoise {
    /// Gaussian, `(ε, δ)`-DP, calibrated by the analytic Gaussian mechanism.
    #[default]
    Gaussian,
    /// Laplace, pure `ε`-DP (`δ` must be 0).
    Laplace,
}

/// Parameters of a [`MomentSketch`]. All public.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MomentSketchParams {
    /// `R > 0`: keys and queries in `[0, R]^d`.
    pub radius: f64,
    /// `R_w > 0`: values in `[−R_w, R_w]`.
    pub weight_bound: f64,
    /// `(ε, δ)`.
    pub budget: PrivacyBudget,
    /// The kernel's relative accuracy `ε_s ∈ (0, 1)`; fixes the degree `s`.
    pub eps_s: f64,
    /// The kernel temperature (`1/d` as in paper 001, or custom, e.g. `1/√d`).
    pub temperature: Temperature,
    /// Gaussian or Laplace noise.
    pub noise: SketchNoise,
    /// Out-of-domain public queries.
    pub query_policy: QueryPolicy,
    /// `[EXT]` `docs/PAPERS.md` P1-X8 output clamps.
    pub clamp_outputs: bool,
    /// Exact (the default) or the unsafe float path.
    pub noise_mode: NoiseMode,
    /// The most memory the release may allocate, in bytes (default 1 GiB): a larger
    /// estimate is refused with [`Error::MemoryLimit`] before anything is allocated.
    pub memory_limit_bytes: u64,
}

impl MomentSketchParams {
    /// Gaussian noise, `ε_s = 0.01`, `τ = 1/d`, queries rejected outside the domain, clamps
    /// on, the exact release.
    pub fn new(radius: f64, weight_bound: f64, budget: PrivacyBudget) -> Self {
        Self {
            radius,
            weight_bound,
            budget,
            eps_s: 0.01,
            temperature: Temperature::OneOverDim,
            noise: SketchNoise::Gaussian,
            query_policy: QueryPolicy::Reject,
            clamp_outputs: true,
            noise_mode: NoiseMode::Exact,
            memory_limit_bytes: 1 << 30,
        }
    }

    fn tree_params(&self) -> SoftmaxTreeParams {
        let mut p = SoftmaxTreeParams::paper(self.radius, self.weight_bound, self.budget, 0.5);
        p.eps_s = self.eps_s;
        p.temperature = self.temperature;
        p.strict = false;
        p.query_policy = self.query_policy;
        p.noise_mode = self.noise_mode;
        p
    }

    /// The feature map for `d`-dimensional keys.
    ///
    /// # Errors
    /// Invalid parameters.
    pub fn feature_map(&self, dim: usize) -> Result<TaylorFeatureMap> {
        if self.noise == SketchNoise::Gaussian && self.budget.delta().get() == 0.0 {
            return Err(Error::OutOfRange {
                name: "delta",
                value: 0.0,
                allowed: "(0, 1) for Gaussian noise",
            });
        }
        if self.noise == SketchNoise::Laplace && self.budget.delta().get() != 0.0 {
            let d = self.budget.delta().get();
            return Err(Error::OutOfRange {
                name: "delta",
                value: d,
                allowed: "0 for Laplace noise",
            });
        }
        let mut p = self.tree_params();
        // The tree checks want δ ∈ (0, 1); the sketch's δ was checked above, and only R, R_w,
        // ε_s and τ matter for the map.
        p.budget = PrivacyBudget::new(self.budget.epsilon().get(), 0.5)?;
        let map = p.feature_map(dim)?;
        self.check_memory(&map)?;
        Ok(map)
    }

    /// The bytes a release with `map` allocates: the sketch and its block sum
    /// (`2·r·(d + 1)`), the feature vector or the Laplace bounds (`r` each), a key and a value
    /// row, in `f64`.
    ///
    /// ```
    /// use dpattn_core::PrivacyBudget;
    /// use dpattn_core::moment_sketch::MomentSketchParams;
    /// let p = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
    /// let map = p.feature_map(4)?;
    /// let r = map.features() as u128;
    /// assert_eq!(p.memory_bytes(&map), 8 * (2 * r * 5 + 2 * r + 9));
    /// // With keys in [0, 4]^16 (τ·d·R² = 16, degree 26), r = 1.7e11: refused before
    /// // allocating anything; at d = 64 even the feature count overflows.
    /// let wide = MomentSketchParams::new(4.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
    /// assert!(matches!(wide.feature_map(16), Err(dpattn_core::Error::MemoryLimit { .. })));
    /// assert!(wide.feature_map(64).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn memory_bytes(&self, map: &TaylorFeatureMap) -> u128 {
        let (r, d) = (map.features() as u128, map.dim() as u128);
        8 * (2 * r * (d + 1) + 2 * r + 2 * d + 1)
    }

    fn check_memory(&self, map: &TaylorFeatureMap) -> Result<()> {
        let needed = self.memory_bytes(map);
        if needed > u128::from(self.memory_limit_bytes) {
            return Err(Error::MemoryLimit {
                what: "the moment sketch: r = C(d+s, s) Taylor features times d + 1 columns, the degree s \
                       growing with tau*d*R^2 and 1/eps_s (docs/PRIVACY.md §4.6 has the feasible range); \
                       lower d or R, raise eps_s or memory_limit_bytes, or use the KV sketch",
                needed_bytes: u64::try_from(needed).unwrap_or(u64::MAX),
                limit_bytes: self.memory_limit_bytes,
            });
        }
        Ok(())
    }

    /// The continuous calibration: the sensitivity (ℓ2 for Gaussian, ℓ1 for Laplace, with
    /// [`SENSITIVITY_MARGIN`]) and the noise scale (σ or `b`) of the unsafe-float release.
    /// The exact release rounds both up ([`exact_grid`](Self::exact_grid)).
    ///
    /// # Errors
    /// Invalid parameters.
    pub fn calibrate(&self, dim: usize) -> Result<(f64, f64)> {
        let map = self.feature_map(dim)?;
        let d = dim as f64;
        let rw = self.weight_bound;
        match self.noise {
            SketchNoise::Gaussian => {
                let ts = taylor_exp(map.z_max(self.radius), map.degree());
                // The computed ‖P(k)‖² can exceed the computed T_s(z_max) by rounding (about
                // r ulps); the margin covers it.
                let sens =
                    2.0 * libm::sqrt(ts) * libm::sqrt(1.0 + d * rw * rw) * SENSITIVITY_MARGIN;
                let sigma = analytic_gaussian_sigma(
                    self.budget.epsilon().get(),
                    self.budget.delta().get(),
                    sens,
                )?;
                Ok((sens, sigma))
            }
            SketchNoise::Laplace => {
                let mut beta = try_filled(map.features(), 0.0, "feature bounds")?;
                map.feature_bounds_into(self.radius, &mut beta)?;
                let sens = 2.0 * beta.iter().sum::<f64>() * (1.0 + d * rw) * SENSITIVITY_MARGIN;
                Ok((sens, sens / self.budget.epsilon().get()))
            }
        }
    }

    /// The exact release of a sketch of `n` tokens of dimension `dim` (module docs): the
    /// per-token sensitivity `Δ` (upward-rounded bound, `γ_{6s+1}` for the feature map),
    /// the blocked summation's `E = γ_h·n·Δ/2`, the value bound `n·Γ·max(1, R_w) + E`, over
    /// `r(d+1)` coordinates in `f64`, calibrated for `(ε, δ)` (analytic Gaussian) or `ε`.
    /// Public parameters only.
    ///
    /// ```
    /// use dpattn_core::PrivacyBudget;
    /// use dpattn_core::moment_sketch::MomentSketchParams;
    /// let p = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
    /// let g = p.exact_grid(2, 16_384)?;
    /// let (delta, sigma) = p.calibrate(2)?;
    /// // Δ′ = Δ + 2E + √(r(d+1))·Λ exceeds the float release's Δ by under 0.4%.
    /// assert!(g.rounded_sensitivity() / delta < 1.004);
    /// assert!(g.scale() >= sigma * (1.0 - 1e-8) && g.scale() / sigma < 1.004);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Invalid parameters; more than `2^40` sketch entries; a release the `f64` grid cannot
    /// hold.
    pub fn exact_grid(&self, dim: usize, n: usize) -> Result<SketchGrid> {
        let map = self.feature_map(dim)?;
        let (r, s) = (map.features(), map.degree());
        let entries = mul_size(r, dim + 1, "sketch size")? as u64;
        crate::sampling::bit_source::check_element(entries - 1)?;
        let (d, rw) = (count_up(dim as u64), self.weight_bound);
        // |û_a·v_c| ≤ (1 + γ_{6s+1})·P_a(k)·|v_c|.
        let eval = add_up(1.0, gamma_up(6 * u64::from(s) + 1));
        let sens = match self.noise {
            SketchNoise::Gaussian => {
                let z = mul_up(mul_up(mul_up(map.tau(), d), self.radius), self.radius);
                let v2 = add_up(1.0, mul_up(d, mul_up(rw, rw)));
                mul_up(2.0, mul_up(eval, mul_up(sqrt_up(taylor_exp_up(z, s)), sqrt_up(v2))))
            }
            SketchNoise::Laplace => {
                let mut beta = try_filled(r, 0.0, "feature bounds")?;
                map.feature_bounds_into(self.radius, &mut beta)?;
                let computed = beta.iter().fold(0.0, |a, &b| add_up(a, b));
                // β_a ≤ β̂_a/(1 − γ_{6s}).
                let g = gamma_up(6 * u64::from(s));
                let sum = div_up(computed, add_down(1.0, -g));
                mul_up(2.0, mul_up(eval, mul_up(sum, add_up(1.0, mul_up(d, rw)))))
            }
        };
        let block = n.isqrt().max(1);
        let chain = (block + n.div_ceil(block)) as u64;
        let err = mul_up(mul_up(gamma_up(chain), count_up(n as u64)), sens / 2.0);
        let entry = mul_up(map.range(self.radius), rw.max(1.0));
        let value_bound = add_up(mul_up(count_up(n as u64), entry), err);
        let (eps, delta) = (self.budget.epsilon().get(), self.budget.delta().get());
        Ok(match self.noise {
            SketchNoise::Gaussian => {
                let spec = GaussianGridSpec {
                    l2_sensitivity: sens,
                    dimension: entries,
                    computation_error: err,
                    value_bound,
                    format: GridFormat::F64,
                };
                // Every Gaussian calibration of the crate is linear in Δ: m = σ(ε, δ, 1).
                let m = analytic_gaussian_sigma(eps, delta, 1.0)?;
                SketchGrid::Gaussian(GaussianGrid::calibrate(&spec, m)?)
            }
            SketchNoise::Laplace => {
                let spec = LaplaceGridSpec {
                    l1_sensitivity: sens,
                    dimension: entries,
                    computation_error: err,
                    value_bound,
                    format: GridFormat::F64,
                };
                SketchGrid::Laplace(LaplaceGrid::calibrate(&spec, eps)?)
            }
        })
    }
}

/// `γ_h = h·u/(1 − h·u)`, `u = 2^−53`, rounded up: the relative error bound of `h` rounded
/// operations (Higham §3.1); `+∞` when `h·u ≥ 1/2`.
fn gamma_up(h: u64) -> f64 {
    let hu = mul_up(count_up(h), f64::EPSILON / 2.0);
    if hu >= 0.5 { f64::INFINITY } else { div_up(hu, add_down(1.0, -hu)) }
}

/// `T_s(z) = Σ_{t ≤ s} z^t/t!` rounded up (every term and partial sum rounded upwards).
fn taylor_exp_up(z: f64, degree: u32) -> f64 {
    let (mut term, mut sum) = (1.0, 1.0);
    for t in 1..=degree {
        term = mul_up(term, div_up(z, f64::from(t)));
        sum = add_up(sum, term);
    }
    sum
}

/// The exact release of a sketch ([`MomentSketchParams::exact_grid`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SketchGrid {
    /// Gaussian noise: the discrete Gaussian on the grid.
    Gaussian(GaussianGrid),
    /// Laplace noise: the discrete Laplace on the grid.
    Laplace(LaplaceGrid),
}

impl SketchGrid {
    /// `Λ`: every released entry is an integer multiple of it.
    pub fn resolution(&self) -> f64 {
        match self {
            Self::Gaussian(g) => g.resolution(),
            Self::Laplace(g) => g.resolution(),
        }
    }

    /// `Δ′ = Δ + 2E + √(r(d+1))·Λ` (Gaussian, ℓ2) or `Δ₁ + 2E + r(d+1)·Λ` (Laplace, ℓ1).
    pub fn rounded_sensitivity(&self) -> f64 {
        match self {
            Self::Gaussian(g) => g.rounded_sensitivity(),
            Self::Laplace(g) => g.rounded_sensitivity(),
        }
    }

    /// The noise scale in value units: the discrete Gaussian's `s·Λ` or the discrete
    /// Laplace's `b·Λ`.
    pub fn scale(&self) -> f64 {
        match self {
            Self::Gaussian(g) => g.sigma(),
            Self::Laplace(g) => g.scale(),
        }
    }

    /// The standard deviation of one entry's noise (a bound for the discrete Gaussian):
    /// `s·Λ`, which the discrete Gaussian's does not exceed (CKS20), or `Λ·√Var(Z)` of the
    /// discrete Laplace.
    pub fn entry_std(&self) -> f64 {
        match self {
            Self::Gaussian(g) => g.sigma(),
            Self::Laplace(g) => libm::sqrt(g.integer_noise().variance()) * g.resolution(),
        }
    }

    fn release_keyed(&self, stream: &KeyedStream, first: u64, values: &mut [f64]) -> Result<()> {
        match self {
            Self::Gaussian(g) => g.release_keyed(stream, first, values),
            Self::Laplace(g) => g.release_keyed(stream, first, values),
        }
    }
}

/// The released sketch `M̃` (row-major `r × (d+1)`; column 0 is `P(K)ᵀ1`).
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// use dpattn_core::{MatRef, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::moment_sketch::{MomentSketch, MomentSketchParams};
/// use dpattn_core::session::Session;
/// let (n, d) = (2000, 2);
/// let keys: Vec<f64> = (0..n * d).map(|i| ((i * 37) % 100) as f64 / 100.0).collect();
/// let vals: Vec<f64> = (0..n * d).map(|i| ((i * 53) % 200) as f64 / 100.0 - 1.0).collect();
/// let params = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
/// // A session: a key from the operating system, fresh stream ids, a ledger for tokens.
/// let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5)?);
/// let mut session = Session::new(ledger)?;
/// let s = MomentSketch::new(MatRef::from_row_major(&keys, n, d)?, MatRef::from_row_major(&vals, n, d)?,
///     &params, &mut session)?;
/// let mut out = [0.0; 2];
/// s.query(&[0.5, 0.5], &mut out)?;
/// assert!(out.iter().all(|o| o.abs() <= 1.0) && session.ledger().charges() == 1);
/// // The exact release: every entry is an integer multiple of Λ.
/// let lambda = s.resolution().unwrap();
/// assert!(s.sketch().iter().all(|m| (m / lambda).fract() == 0.0));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MomentSketch {
    params: MomentSketchParams,
    map: TaylorFeatureMap,
    n: usize,
    sensitivity: f64,
    scale: f64,
    grid: Option<SketchGrid>,
    sketch: Vec<f64>,
    /// Released with noise (`false` for [`MomentSketch::non_private_exact`]).
    private: bool,
}

impl MomentSketch {
    /// Releases the sketch of private `keys`, `values` (`n × d`), noised with fresh
    /// randomness from `session` (entry `(i, c)` is element `i·(d+1) + c` of its stream,
    /// `docs/RANDOMNESS.md` §5.2), and charges the session's ledger (module docs: Gaussian
    /// `(ε, δ)` / `ρ`, Laplace `ε`, in `params.noise_mode`) before returning. In exact mode
    /// (the default) the entries are multiples of [`resolution`](Self::resolution) with exact
    /// noise (module docs).
    ///
    /// # Errors
    /// Bad parameters or shapes; the session's and the ledger's errors
    /// ([`Error::UnitMismatch`] for a ledger of another unit); in exact mode, more than
    /// `2^40` entries. Nothing is returned or charged on error (the stream id is consumed
    /// either way).
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(keys, values, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id (its one stream is
    /// `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
    /// their own stream ids** — a `(key, stream)` pair must never serve two releases.
    ///
    /// ```
    /// use dpattn_core::{MatRef, PrivacyBudget};
    /// use dpattn_core::moment_sketch::{MomentSketch, MomentSketchParams};
    /// use dpattn_core::sampling::NoiseKey;
    /// use dpattn_core::session::Draw;
    /// let (keys, vals) = ([0.25, 0.5, 0.75, 1.0], [0.5, -0.5, 1.0, 0.0]);
    /// let params = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
    /// let key = NoiseKey::generate()?; // kept in a key store to replay the release later
    /// let replay = || MomentSketch::new_keyed(MatRef::from_row_major(&keys, 2, 2)?,
    ///     MatRef::from_row_major(&vals, 2, 2)?, &params, Draw { key: &key, stream: 5 }, None);
    /// assert_eq!(replay()?.sketch(), replay()?.sketch()); // reproduced exactly
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        let stream = draw.keyed(0);
        let mut s = match params.noise_mode {
            NoiseMode::Exact => Self::exact_release(keys, values, params, &stream)?,
            NoiseMode::UnsafeFloat => Self::float_release(keys, values, params, &stream)?,
            NoiseMode::ConstantTime => return Err(CONSTANT_TIME_UNSUPPORTED),
        };
        if let Some(ledger) = ledger {
            let charged =
                s.cost().and_then(|cost| ledger.charge(PRIVACY_UNIT, &cost, params.noise_mode));
            if let Err(e) = charged {
                s.sketch.fill(0.0);
                return Err(e);
            }
        }
        Ok(s)
    }

    /// What the release costs: Gaussian noise [`Cost::Gaussian`] with the `(ε, δ)` of
    /// `params` and [`rho`](Self::rho), Laplace noise the pure [`Cost::Pure`] `ε`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for the non-private sketch.
    pub fn cost(&self) -> Result<Cost> {
        if !self.private {
            return Err(Error::Unsupported {
                what: "the privacy cost of the non-private sketch (MomentSketch::non_private_exact)",
            });
        }
        let budget = self.params.budget;
        match (self.params.noise, self.rho()) {
            (SketchNoise::Gaussian, Some(rho)) => Ok(Cost::Gaussian { approx: Some(budget), rho }),
            _ => Ok(Cost::Pure(Epsilon::new(budget.epsilon().get())?)),
        }
    }

    /// An upper bound on the zCDP `ρ` of a Gaussian release: the discrete Gaussian's
    /// `(Δ′/Λ)²/(2s²)` ([`GaussianGrid::rho`]) in exact mode, `Δ²/(2σ²)` of the float
    /// Gaussian in unsafe-float mode (rounded up). `None` for Laplace noise (a pure `ε`
    /// release) and for the non-private sketch.
    pub fn rho(&self) -> Option<f64> {
        if !self.private || self.params.noise != SketchNoise::Gaussian {
            return None;
        }
        Some(match self.grid {
            Some(SketchGrid::Gaussian(g)) => g.rho(),
            Some(SketchGrid::Laplace(_)) => return None,
            None => {
                let (d, s) = (self.sensitivity, self.scale);
                div_up(mul_up(d, d), mul_down(2.0 * s, s))
            }
        })
    }

    /// The exact release: the calibration (public) first, then the blocked sum, then the
    /// grid release in place.
    fn exact_release(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        stream: &KeyedStream,
    ) -> Result<Self> {
        let grid = params.exact_grid(keys.cols(), keys.rows())?;
        let mut s = Self::exact(keys, values, params, true)?;
        if let Err(e) = grid.release_keyed(stream, 0, &mut s.sketch) {
            s.sketch.fill(0.0);
            return Err(e);
        }
        s.sensitivity = grid.rounded_sensitivity();
        s.scale = grid.scale();
        s.grid = Some(grid);
        Ok(s)
    }

    /// The textbook float release `f̂ + z` (unsafe-float mode, unchanged).
    fn float_release(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        stream: &KeyedStream,
    ) -> Result<Self> {
        let mut s = Self::exact(keys, values, params, true)?;
        let noise = try_filled(s.sketch.len(), 0.0, "sketch noise");
        let mut noise = match noise {
            Ok(v) => v,
            Err(e) => {
                s.sketch.fill(0.0);
                return Err(e);
            }
        };
        let filled = match params.noise {
            SketchNoise::Gaussian => {
                Gaussian::new(s.scale).and_then(|g| g.fill_keyed(stream, 0, &mut noise))
            }
            SketchNoise::Laplace => {
                Laplace::new(s.scale).and_then(|g| g.fill_keyed(stream, 0, &mut noise))
            }
        };
        if let Err(e) = filled {
            s.sketch.fill(0.0);
            return Err(e);
        }
        for (m, z) in s.sketch.iter_mut().zip(&noise) {
            *m += z;
        }
        Ok(s)
    }

    /// **Not differentially private.** The exact sketch of unclamped finite data, summed as
    /// `params.noise_mode`'s release sums it (blocked in exact mode; tests and audits only).
    ///
    /// # Errors
    /// As [`MomentSketch::new`], plus [`Error::PrivateNonFinite`].
    pub fn non_private_exact(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
    ) -> Result<Self> {
        keys.check_finite("keys")?;
        values.check_finite("values")?;
        Self::exact(keys, values, params, false)
    }

    fn exact(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        clamp: bool,
    ) -> Result<Self> {
        let (n, d) = (keys.rows(), keys.cols());
        let map = params.feature_map(d)?;
        let (sensitivity, scale) = params.calibrate(d)?;
        if n == 0 {
            return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: ">= 1" });
        }
        if values.rows() != n || values.cols() != d {
            let (axis, expected, got) = if values.rows() != n {
                ("rows", n, values.rows())
            } else {
                ("cols", d, values.cols())
            };
            return Err(Error::ShapeMismatch { arg: "values", axis, expected, got });
        }
        let r = map.features();
        let cols = d + 1;
        let len = mul_size(r, cols, "sketch size")?;
        let mut sketch = try_filled(len, 0.0, "sketch")?;
        // Exact mode sums blocks of ⌊√n⌋ tokens into `part`, then the parts into the sketch
        // (module docs); the unsafe-float path keeps its running sum.
        let blocked = params.noise_mode == NoiseMode::Exact;
        let block = if blocked { n.isqrt().max(1) } else { n };
        let mut part = try_filled(if blocked { len } else { 0 }, 0.0, "sketch block")?;
        let mut u = try_filled(r, 0.0, "feature vector")?;
        let mut x = try_filled(d, 0.0, "key row")?;
        let mut v = try_filled(cols, 0.0, "value row")?;
        let (rr, rw) = (params.radius, params.weight_bound);
        for j in 0..n {
            for (a, &b) in x.iter_mut().zip(keys.row(j)) {
                *a = if clamp { clamp_private(b, 0.0, rr) } else { b };
            }
            v[0] = 1.0;
            for (a, &b) in v[1..].iter_mut().zip(values.row(j)) {
                *a = if clamp { clamp_private(b, -rw, rw) } else { b };
            }
            map.eval_into(&x, &mut u)?;
            let acc = if blocked { &mut part } else { &mut sketch };
            for (i, &ui) in u.iter().enumerate() {
                for (m, &vc) in acc[i * cols..(i + 1) * cols].iter_mut().zip(&v) {
                    *m += ui * vc;
                }
            }
            if blocked && ((j + 1) % block == 0 || j + 1 == n) {
                for (m, p) in sketch.iter_mut().zip(part.iter_mut()) {
                    *m += *p;
                    *p = 0.0;
                }
            }
        }
        u.fill(0.0);
        x.fill(0.0);
        v.fill(0.0);
        Ok(Self { params: *params, map, n, sensitivity, scale, grid: None, sketch, private: clamp })
    }

    /// The released `M̃`, row-major `r × (d+1)`.
    pub fn sketch(&self) -> &[f64] {
        &self.sketch
    }

    /// The feature map.
    pub fn feature_map(&self) -> &TaylorFeatureMap {
        &self.map
    }

    /// `(sensitivity, noise scale)`: `(Δ₂, σ)` or `(Δ₁, b)`; in exact mode the rounded
    /// sensitivity `Δ′` and the discrete noise's scale in value units
    /// ([`SketchGrid::rounded_sensitivity`], [`SketchGrid::scale`]).
    pub fn calibration(&self) -> (f64, f64) {
        (self.sensitivity, self.scale)
    }

    /// How the sketch was released.
    pub fn noise_mode(&self) -> NoiseMode {
        self.params.noise_mode
    }

    /// `Λ`: every entry of an exact release is an integer multiple of it (`None` for the
    /// unsafe-float and the non-private sketch).
    pub fn resolution(&self) -> Option<f64> {
        self.grid.map(|g| g.resolution())
    }

    /// The exact release's calibration (`None` for the unsafe-float and the non-private
    /// sketch).
    pub fn grid(&self) -> Option<&SketchGrid> {
        self.grid.as_ref()
    }

    /// The standard deviation of the noise in `⟨P(q), M̃_{:,c}⟩` at a query with
    /// `‖P(q)‖² = u2`: `σ√u2` (Gaussian) or `b√(2·u2)` (Laplace); in exact mode
    /// [`SketchGrid::entry_std`]`·√u2`.
    pub fn projection_noise_std(&self, u2: f64) -> f64 {
        if let Some(g) = &self.grid {
            return g.entry_std() * libm::sqrt(u2);
        }
        match self.params.noise {
            SketchNoise::Gaussian => self.scale * libm::sqrt(u2),
            SketchNoise::Laplace => self.scale * libm::sqrt(2.0 * u2),
        }
    }

    /// Scratch for [`query_into`](Self::query_into): `r + d`.
    pub fn query_scratch_len(&self) -> usize {
        self.map.features() + self.map.dim()
    }

    /// Answers one public query `q ∈ [0, R]^d` into `out` (length `d`); returns the
    /// denominator used.
    ///
    /// # Errors
    /// Shapes, scratch, bad queries.
    pub fn query_into(&self, q: &[f64], out: &mut [f64], scratch: &mut [f64]) -> Result<f64> {
        let d = self.map.dim();
        if out.len() != d {
            return Err(Error::ShapeMismatch {
                arg: "out",
                axis: "len",
                expected: d,
                got: out.len(),
            });
        }
        let (u, _) = query_features(&self.params.tree_params(), &self.map, false, q, scratch, 0)?;
        let cols = d + 1;
        let proj = |c: usize| -> f64 {
            u.iter().enumerate().map(|(i, &ui)| ui * self.sketch[i * cols + c]).sum()
        };
        let mut den = proj(0);
        if self.params.clamp_outputs {
            let n = self.n as f64;
            let hi = n * taylor_exp(self.map.z_max(self.params.radius), self.map.degree());
            den = if den.is_nan() { n } else { den.clamp(n, hi) };
        }
        let rw = self.params.weight_bound;
        for (k, o) in out.iter_mut().enumerate() {
            let v = proj(k + 1) / den;
            *o = if self.params.clamp_outputs { v.clamp(-rw, rw) } else { v };
        }
        Ok(den)
    }

    /// [`query_into`](Self::query_into) with allocated scratch.
    ///
    /// # Errors
    /// As [`query_into`](Self::query_into).
    pub fn query(&self, q: &[f64], out: &mut [f64]) -> Result<f64> {
        let mut scratch = try_filled(self.query_scratch_len(), 0.0, "query scratch")?;
        self.query_into(q, out, &mut scratch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_is_the_standard_bound() {
        let u = f64::EPSILON / 2.0;
        for h in [1u64, 10, 1 << 20, 1 << 40] {
            let g = gamma_up(h);
            let want = h as f64 * u / (1.0 - h as f64 * u);
            assert!(g >= want && g <= want * (1.0 + 1e-15), "{h}");
        }
        assert_eq!(gamma_up(0), 0.0);
        assert_eq!(gamma_up(1 << 52), f64::INFINITY);
    }
}
