//! `[EXT]` The moment sketch (seed-001 §15 E1): DP cross-attention by releasing
//! `M = P(K)ᵀ[1_n, V] ∈ R^{r×(d+1)}` once with one noise draw, then answering any number of
//! public query tokens `Õ_k = ⟨P(q), M̃_{:,k+1}⟩ / ⟨P(q), M̃_{:,0}⟩`. Not in paper 001: it is
//! exactly what the paper's trees compute in the noise-free limit (OQ26), without trees,
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
//! Every answer, for every query, adaptive or not, is post-processing of `M̃`. The noise of
//! `⟨P(q), g⟩` is at most `‖P(q)‖·‖g‖ ≤ √(T_s(z_max))·‖g‖` for all `q` at once.
//! `[EXT]` E8 (default on): the denominator is clamped into its public range
//! `[n, n·T_s(z_max)]` and outputs into `[−R_w, R_w]`.

use alloc::vec::Vec;

use crate::accounting::ledger::{Charge, Ledger};
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::error::{Error, Result, mul_size};
use crate::matrix_view::MatRef;
use crate::privacy_params::{Epsilon, PrivacyBudget};
use crate::sampling::{FixedWordSampler, Gaussian, KeyedStream, Laplace};
use crate::scratch::try_filled;
use crate::softmax_tree::{
    QueryPolicy, SoftmaxTreeParams, TaylorFeatureMap, Temperature, clamp_private, query_features,
    taylor_exp,
};

/// Relative margin on the sensitivities for floating-point rounding in `P(k)` and its norms.
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
    /// `[EXT]` E8 output clamps.
    pub clamp_outputs: bool,
}

impl MomentSketchParams {
    /// Gaussian noise, `ε_s = 0.01`, `τ = 1/d`, queries rejected outside the domain, clamps on.
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
        }
    }

    fn tree_params(&self) -> SoftmaxTreeParams {
        let mut p = SoftmaxTreeParams::paper(self.radius, self.weight_bound, self.budget, 0.5);
        p.eps_s = self.eps_s;
        p.temperature = self.temperature;
        p.strict = false;
        p.query_policy = self.query_policy;
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
        p.feature_map(dim)
    }

    /// The sensitivity (ℓ2 for Gaussian, ℓ1 for Laplace) and the noise scale (σ or `b`).
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
}

/// The released sketch `M̃` (row-major `r × (d+1)`; column 0 is `P(K)ᵀ1`).
///
/// ```
/// use dpattn_core::{MatRef, PrivacyBudget};
/// use dpattn_core::accounting::ledger::Ledger;
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// use dpattn_core::moment_sketch::{MomentSketch, MomentSketchParams};
/// let (n, d) = (2000, 2);
/// let keys: Vec<f64> = (0..n * d).map(|i| ((i * 37) % 100) as f64 / 100.0).collect();
/// let vals: Vec<f64> = (0..n * d).map(|i| ((i * 53) % 200) as f64 / 100.0 - 1.0).collect();
/// let params = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?);
/// let mut ledger = Ledger::new_approx(PrivacyBudget::new(2.0, 1e-5)?);
/// let s = MomentSketch::new(MatRef::from_row_major(&keys, n, d)?, MatRef::from_row_major(&vals, n, d)?,
///     &params, &KeyedStream::new(&NoiseKey::from_bytes([6; 32]), 0), Some(&mut ledger))?;
/// let mut out = [0.0; 2];
/// s.query(&[0.5, 0.5], &mut out)?;
/// assert!(out.iter().all(|o| o.abs() <= 1.0) && ledger.charges() == 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MomentSketch {
    params: MomentSketchParams,
    map: TaylorFeatureMap,
    n: usize,
    sensitivity: f64,
    scale: f64,
    sketch: Vec<f64>,
}

impl MomentSketch {
    /// Releases the sketch of private `keys`, `values` (`n × d`), noised from element 0 of
    /// `stream` (entry `(i, c)` is element `i·(d+1) + c`, `docs/RANDOMNESS.md` §5.2), and
    /// charges `ledger` (`Approx` for Gaussian, `Pure` for Laplace) before returning.
    ///
    /// # Errors
    /// Bad parameters or shapes; the ledger's error.
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &MomentSketchParams,
        stream: &KeyedStream,
        ledger: Option<&mut Ledger<N>>,
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
        if let Some(ledger) = ledger {
            let charge = match params.noise {
                SketchNoise::Gaussian => Charge::Approx(params.budget),
                SketchNoise::Laplace => Charge::Pure(Epsilon::new(params.budget.epsilon().get())?),
            };
            ledger.try_charge(charge)?;
        }
        Ok(s)
    }

    /// **Not differentially private.** The exact sketch of unclamped finite data (tests and
    /// audits only).
    ///
    /// # Errors
    /// As [`MomentSketch::new`], plus [`Error::NonFinite`].
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
        let mut sketch = try_filled(mul_size(r, cols, "sketch size")?, 0.0, "sketch")?;
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
            for (i, &ui) in u.iter().enumerate() {
                for (m, &vc) in sketch[i * cols..(i + 1) * cols].iter_mut().zip(&v) {
                    *m += ui * vc;
                }
            }
        }
        u.fill(0.0);
        x.fill(0.0);
        v.fill(0.0);
        Ok(Self { params: *params, map, n, sensitivity, scale, sketch })
    }

    /// The released `M̃`, row-major `r × (d+1)`.
    pub fn sketch(&self) -> &[f64] {
        &self.sketch
    }

    /// The feature map.
    pub fn feature_map(&self) -> &TaylorFeatureMap {
        &self.map
    }

    /// `(sensitivity, noise scale)`: `(Δ₂, σ)` or `(Δ₁, b)`.
    pub fn calibration(&self) -> (f64, f64) {
        (self.sensitivity, self.scale)
    }

    /// The standard deviation of the noise in `⟨P(q), M̃_{:,c}⟩` at a query with
    /// `‖P(q)‖² = u2`: `σ√u2` (Gaussian) or `b√(2·u2)` (Laplace).
    pub fn projection_noise_std(&self, u2: f64) -> f64 {
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
