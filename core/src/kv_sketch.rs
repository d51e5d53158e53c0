//! `[EXT]` The random-feature DP KV sketch: DP cross-attention over a private context at any
//! head dimension, by releasing `(Σ_j φ(k_j) v_jᵀ, Σ_j φ(k_j))` once and answering any
//! number of public queries from it. Our extension (`docs/PRIVACY.md` §13); no paper has it.
//!
//! **Guarantee.** `(ε, δ)`-DP for neighbours that differ in **one context position** (row `j`
//! of `K` and of `V` replaced; `n` public), privacy unit [`PRIVACY_UNIT`] (one token). Every
//! answer, for every query, adaptive or not, is post-processing of the one release, so the
//! cost does not grow with the number of queries.
//!
//! **Feature map (public).** `φ_i(k) = exp(ω_i·k̃ − ‖k̃‖²/2)/√m`, `i = 1 … m`, with
//! `k̃ = c·k`, `c = √s` for the logit scale `s`, and `ω_i ~ N(0, I_d)` drawn from the public
//! [`feature_seed`](KvSketchParams::feature_seed), orthogonal within blocks of `d` (positive
//! orthogonal random features, Choromanski et al. 2021): `E_ω[φ(q)·φ(k)] = exp(s·q·k)`, so
//! `φ(q)ᵀ(Σ_j φ(k_j) v_jᵀ) / φ(q)ᵀ(Σ_j φ(k_j))` estimates softmax attention, and every
//! weight `φ(q)·φ(k_j)` is positive. Key features (not query features) are clipped to
//! `τ = e^{κR̃ − R̃²/2}/√m` ([`feature_clip`](KvSketchParams::feature_clip) `κ`, default
//! [`DEFAULT_CLIP`]): the clip bounds the sensitivity by `e^{κR̃}` instead of
//! `e^{‖ω‖R̃} ≈ e^{√d·R̃}` and biases the estimate where `ω_i·k̃ > κR̃`.
//!
//! **Sensitivity (proof).** Key rows are clamped to `‖k‖ ≤ R_k` and value rows to
//! `‖v‖ ≤ R_v` (NaN or infinite rows become zero rows; private data is never refused), so
//! `‖k̃‖ ≤ R̃ = c·R_k` and, for every feature, `φ_i(k) ≤ U_i = min(e^{h_i}/√m, τ)` with
//! `h_i = max_{0≤r≤R̃} (‖ω_i‖r − r²/2)` (`‖ω_i‖R̃ − R̃²/2` if `‖ω_i‖ ≥ R̃`, else `‖ω_i‖²/2`),
//! and `φ_i(k) ≥ L_i = min(e^{−‖ω_i‖R̃ − R̃²/2}/√m, τ)`. Position `j` contributes
//! `g_j = [φ(k_j) v_jᵀ, γ·φ(k_j)]` (the second block scaled by the public `γ`) with
//! `‖g_j‖_F² = Σ_i φ_i(k_j)²(‖v_j‖² + γ²) ≤ (Σ_i U_i²)(R_v² + γ²)`; replacing one position
//! moves the released sum by at most `Δ = 2·‖U‖·√(R_v² + γ²)`. We take
//! `γ = √2·R_v/d_v^{1/4}`, which minimises `Δ²·(d_v + R_v²/γ²)`, the size of the noise in an
//! answer when the output has norm `R_v`.
//!
//! **Floating point: the exact release.** The sum is released on a public grid with exact
//! discrete Gaussian noise ([`GaussianGrid`], `f64` format, `m·(d_v + 1)` coordinates), as
//! the moment sketch does: the exact function is the real sum of the *computed* per-position
//! terms `ĝ_j`, so `Δ` bounds the computed terms (`U_i` evaluated with every rounding against
//! us: the exponent's dot products and norms within `γ_{d+2}(‖ω_i‖R̃ + R̃²/2)`, `exp` within
//! one ulp, three more roundings), and the computation error is that of the blocked sum
//! (blocks of `⌊√n⌋`): `E ≤ γ_h·n·Δ/2`, `h = ⌊√n⌋ + ⌈n/⌊√n⌋⌉`. The noise multiplier is the
//! analytic Gaussian mechanism's at `(ε, δ)` (Balle & Wang 2018). [`NoiseMode::ConstantTime`]
//! draws the same release's noise with the constant-time sampler and reserves its `δ`
//! (`docs/PRIVACY.md` §12).
//!
//! **Answers (post-processing, documented rules).** For a public query `q` the answer is
//! `num/den` with `num = φ(q)ᵀÃ`, `den = φ(q)ᵀb̃`; `den` is first clamped into its public
//! range `[n·Σ_i φ_i(q)L_i, n·Σ_i φ_i(q)U_i]` (the noise-free `den` lies there, so it cannot
//! go to zero or flip sign unless that lower bound underflows to `0`, in which case a
//! non-positive `den` gives the zero answer), and the answer is then clamped to the ball of
//! radius `R_v` (the noise-free answer is a convex combination of value rows).
//!
//! **Accuracy.** Two errors add: the random-feature estimate (no privacy; its variance falls
//! as `1/m` and grows quickly with the logit range `s·R_q·R_k`; the clip adds a bias), and
//! the noise, whose relative size falls as `1/n` against a sensitivity of order
//! `e^{κR̃ − R̃²/2}`: the sketch suits long contexts (`n ≳ 10^5`) with a moderate logit range,
//! and many queries. Measured figures: `docs/BENCHMARKS.md`.

use alloc::vec::Vec;

use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::attention::clamp_factor;
use crate::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use crate::directed_rounding::{add_up, count_up, gamma_up, mul_up, sqrt_up};
use crate::error::{Error, Result, mul_size, positive_finite};
use crate::grid_release::{
    GaussianGrid, GaussianGridSpec, GridFormat, NoiseMode, constant_time_exact_delta,
};
use crate::matrix_view::{MatMut, MatRef};
use crate::privacy_params::PrivacyBudget;
use crate::sampling::{ConstantTimeGaussian, FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use crate::scratch::try_filled;
use crate::session::{Draw, Session};

/// The privacy unit: one position of the private context (row `j` of `K` and of `V`).
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::TOKEN;

/// Stream ids one release uses (`draw.stream` only).
pub const STREAMS: u64 = 1;

/// The default feature clip `κ` (module docs).
pub const DEFAULT_CLIP: f64 = 3.0;

/// Positions whose features are computed together (module `sum`).
const TILE: usize = 32;

/// Largest number of features.
const MAX_FEATURES: usize = 1 << 16;

/// Public parameters of a KV sketch release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvSketchParams {
    /// `R_k > 0`: private key rows are clamped to this L2 norm.
    pub key_norm: f64,
    /// `R_v > 0`: private value rows are clamped to this L2 norm.
    pub value_norm: f64,
    /// `s > 0`: the logit scale of the attention the sketch estimates (`1/√d` usually).
    pub scale: f64,
    /// `m`: the number of random features, in `[1, 65536]`.
    pub features: usize,
    /// `κ ≥ 0` or `+∞`: every feature value is clipped to `τ = e^{κR̃ − R̃²/2}/√m` (module
    /// docs; `+∞`: no clip). Clipping bounds the sensitivity by `e^{κR̃}` instead of
    /// `e^{‖ω‖R̃} ≈ e^{√d·R̃}`, at the price of a bias where `ω_i·k̃ > κR̃`.
    pub feature_clip: f64,
    /// The public seed of the features `ω_i` (anyone can recompute them).
    pub feature_seed: [u8; 32],
    /// `(ε, δ)` of the release, `δ > 0`.
    pub budget: PrivacyBudget,
    /// [`NoiseMode::Exact`] (the default) or [`NoiseMode::ConstantTime`]; the unsafe float
    /// path does not exist for this mechanism.
    pub noise_mode: NoiseMode,
}

impl KvSketchParams {
    /// The exact release with seed `[0; 32]` and clip [`DEFAULT_CLIP`].
    pub fn new(
        key_norm: f64,
        value_norm: f64,
        scale: f64,
        features: usize,
        budget: PrivacyBudget,
    ) -> Self {
        Self {
            key_norm,
            value_norm,
            scale,
            features,
            feature_clip: DEFAULT_CLIP,
            feature_seed: [0; 32],
            budget,
            noise_mode: NoiseMode::Exact,
        }
    }

    fn check(&self) -> Result<()> {
        positive_finite("key_norm", self.key_norm)?;
        positive_finite("value_norm", self.value_norm)?;
        positive_finite("scale", self.scale)?;
        if self.features == 0 || self.features > MAX_FEATURES {
            return Err(Error::OutOfRange {
                name: "features",
                value: self.features as f64,
                allowed: "[1, 65536]",
            });
        }
        if self.feature_clip.is_nan() || self.feature_clip < 0.0 {
            return Err(Error::OutOfRange {
                name: "feature_clip",
                value: self.feature_clip,
                allowed: "[0, inf]",
            });
        }
        if self.budget.delta().get() <= 0.0 {
            return Err(Error::OutOfRange {
                name: "delta",
                value: 0.0,
                allowed: "(0, 1) for the Gaussian mechanism",
            });
        }
        if self.noise_mode == NoiseMode::UnsafeFloat {
            return Err(Error::Unsupported {
                what: "NoiseMode::UnsafeFloat for the KV sketch (it has only exact releases)",
            });
        }
        Ok(())
    }

    /// `γ`, the weight of the feature-sum block (module docs).
    fn gamma(&self, d_v: usize) -> f64 {
        core::f64::consts::SQRT_2 * self.value_norm / libm::sqrt(libm::sqrt(d_v as f64))
    }

    /// The calibrated grid of a release of `n` positions with `d`-dimensional keys and
    /// `d_v`-dimensional values (public: it depends on the parameters and shapes only). For
    /// [`NoiseMode::ConstantTime`] the exact part is calibrated at `δ − δ_ct`.
    ///
    /// # Errors
    /// Invalid parameters or shapes ([`Error::OutOfRange`]), and those of
    /// [`GaussianGrid::calibrate`].
    pub fn grid(&self, d: usize, d_v: usize, n: usize) -> Result<GaussianGrid> {
        let map = FeatureMap::new(self, d)?;
        self.grid_for(&map, d_v, n)
    }

    /// The sketch's size `m·(d_v + 1)`, checked: `n, d_v ≥ 1` and every entry has an
    /// exact-sampler window.
    fn entries(&self, d_v: usize, n: usize) -> Result<u64> {
        if d_v == 0 || n == 0 {
            return Err(Error::OutOfRange { name: "n and d_v", value: 0.0, allowed: ">= 1" });
        }
        let entries = mul_size(self.features, d_v + 1, "sketch size")? as u64;
        crate::sampling::bit_source::check_element(entries - 1)?;
        Ok(entries)
    }

    fn grid_for(&self, map: &FeatureMap, d_v: usize, n: usize) -> Result<GaussianGrid> {
        let entries = self.entries(d_v, n)?;
        let (rv, gamma) = (self.value_norm, self.gamma(d_v));
        // ‖ĝ‖ ≤ (1 + u)·‖Û‖·√(R_v² + γ²), Δ = 2·that.
        let row = sqrt_up(add_up(mul_up(rv, rv), mul_up(gamma, gamma)));
        let sens = mul_up(2.0, mul_up(mul_up(map.upper_norm, row), 1.0 + f64::EPSILON));
        let block = n.isqrt().max(1);
        let chain = (block + n.div_ceil(block)) as u64;
        let err = mul_up(mul_up(gamma_up(chain as f64), count_up(n as u64)), sens / 2.0);
        let entry = mul_up(map.upper_max, rv.max(gamma));
        let value_bound = add_up(mul_up(count_up(n as u64), entry), err);
        let spec = GaussianGridSpec {
            l2_sensitivity: sens,
            dimension: entries,
            computation_error: err,
            value_bound,
            format: GridFormat::F64,
        };
        let (eps, mut delta) = (self.budget.epsilon().get(), self.budget.delta().get());
        if self.noise_mode == NoiseMode::ConstantTime {
            delta = constant_time_exact_delta(eps, delta, entries)?;
        }
        GaussianGrid::calibrate(&spec, analytic_gaussian_sigma(eps, delta, 1.0)?)
    }
}

/// The public feature map: `ω` (`m × d`, row-major), `c = √s`, and the per-feature bounds.
#[derive(Debug, Clone, PartialEq)]
struct FeatureMap {
    omega: Vec<f64>,
    m: usize,
    d: usize,
    c: f64,
    /// `U_i` and `L_i` (module docs), `1/√m` included.
    upper: Vec<f64>,
    lower: Vec<f64>,
    /// `‖U‖` and `max_i U_i`, rounded up.
    upper_norm: f64,
    upper_max: f64,
    inv_sqrt_m: f64,
    /// `τ` (`+∞`: no clip).
    clip: f64,
}

impl FeatureMap {
    fn new(params: &KvSketchParams, d: usize) -> Result<Self> {
        params.check()?;
        if d == 0 {
            return Err(Error::OutOfRange { name: "d", value: 0.0, allowed: ">= 1" });
        }
        let m = params.features;
        let len = mul_size(m, d, "features * d")?;
        let mut omega = try_filled(len, 0.0, "random features")?;
        let key = NoiseKey::for_replay(params.feature_seed);
        Gaussian::STANDARD.fill_keyed::<f64>(&KeyedStream::new(&key, 0), 0, &mut omega)?;
        let mut lengths = try_filled(len, 0.0, "random feature lengths")?;
        Gaussian::STANDARD.fill_keyed::<f64>(&KeyedStream::new(&key, 1), 0, &mut lengths)?;
        orthogonalise(&mut omega, &lengths, d);
        let c = libm::sqrt(params.scale);
        // R̃ = c·R_k, and the clamped rows' computed k̃ = fl(c·k) are within (1 + u) of it.
        let r = mul_up(mul_up(c, params.key_norm), 1.0 + f64::EPSILON);
        let inv_sqrt_m = 1.0 / libm::sqrt(m as f64);
        // The computed exponent is within γ_{d+2}(‖ω‖R̃ + R̃²/2) of the exact one, and the
        // bound h below is computed to within 3u of the same scale: γ_{d+8} covers both.
        let g = gamma_up((d + 8) as f64);
        let (mut upper, mut lower) = (try_filled(m, 0.0, "bounds")?, try_filled(m, 0.0, "bounds")?);
        let clip = if params.feature_clip.is_finite() {
            libm::exp(params.feature_clip * r - r * r / 2.0) * inv_sqrt_m
        } else {
            f64::INFINITY
        };
        let (mut norm2, mut max) = (0.0f64, 0.0f64);
        for i in 0..m {
            let row = &omega[i * d..(i + 1) * d];
            let w = sqrt_up(row.iter().fold(0.0, |a, &x| add_up(a, mul_up(x, x))));
            let h = if w >= r { w * r - r * r / 2.0 } else { w * w / 2.0 };
            let slack = mul_up(g, add_up(mul_up(w, r), mul_up(r, r) / 2.0));
            // exp within one ulp, 1/√m and the final product: (1 + 8u) covers them.
            let u = mul_up(libm::exp(add_up(h, slack)), inv_sqrt_m) * (1.0 + 8.0 * f64::EPSILON);
            let u = u.min(clip); // the computed value is min(φ̂, τ) ≤ τ exactly
            upper[i] = u;
            let low = libm::exp(-(w * r) - r * r / 2.0 - slack) * inv_sqrt_m;
            lower[i] = (low * (1.0 - 8.0 * f64::EPSILON)).min(clip);
            norm2 = add_up(norm2, mul_up(u, u));
            max = max.max(u);
        }
        if !norm2.is_finite() {
            return Err(Error::OutOfRange {
                name: "key_norm * sqrt(scale) (the feature bound overflows)",
                value: params.key_norm,
                allowed: "a smaller key norm or scale",
            });
        }
        let upper_norm = sqrt_up(norm2);
        Ok(Self { omega, m, d, c, upper, lower, upper_norm, upper_max: max, inv_sqrt_m, clip })
    }

    /// `φ(x)` into `out` (`m`), each value clipped to `τ` when `clip` (keys; queries are
    /// not clipped), with `xt` as room for `c·x`.
    fn eval_into(&self, x: &[f64], xt: &mut [f64], out: &mut [f64], clip: bool) {
        for (t, &v) in xt.iter_mut().zip(x) {
            *t = self.c * v;
        }
        let half = xt.iter().map(|v| v * v).sum::<f64>() / 2.0;
        for (o, w) in out.iter_mut().zip(self.omega.chunks_exact(self.d)) {
            let dot: f64 = w.iter().zip(xt.iter()).map(|(a, b)| a * b).sum();
            let f = libm::exp(dot - half) * self.inv_sqrt_m;
            *o = if clip { f.min(self.clip) } else { f };
        }
    }
}

/// Orthogonal random features (Yu et al. 2016; Choromanski et al. 2021): each block of `d`
/// consecutive rows of `omega` (`m × d` i.i.d. `N(0, 1)`) is orthonormalised (modified
/// Gram–Schmidt), then row `i` is scaled to the norm of row `i` of `lengths` (independent
/// `N(0, I_d)` rows), so every row is still marginally `N(0, I_d)` and the estimator stays
/// unbiased, with less variance. A row that Gram–Schmidt cannot normalise (probability 0)
/// keeps its i.i.d. direction.
fn orthogonalise(omega: &mut [f64], lengths: &[f64], d: usize) {
    for block in omega.chunks_mut(d * d) {
        let rows = block.len() / d;
        for i in 0..rows {
            let (done, rest) = block.split_at_mut(i * d);
            let row = &mut rest[..d];
            for prev in done.chunks_exact(d) {
                let dot: f64 = prev.iter().zip(row.iter()).map(|(a, b)| a * b).sum();
                row.iter_mut().zip(prev).for_each(|(x, p)| *x -= dot * p);
            }
            let norm = libm::sqrt(row.iter().map(|x| x * x).sum::<f64>());
            if norm > 1e-8 {
                row.iter_mut().for_each(|x| *x /= norm);
            }
        }
    }
    for (row, len) in omega.chunks_exact_mut(d).zip(lengths.chunks_exact(d)) {
        let unit = libm::sqrt(row.iter().map(|x| x * x).sum::<f64>());
        let target = libm::sqrt(len.iter().map(|x| x * x).sum::<f64>());
        row.iter_mut().for_each(|x| *x *= target / unit);
    }
}

/// A released KV sketch: the noisy `[Σ φ(k_j) v_jᵀ, γ·Σ φ(k_j)]` and what answering needs.
///
/// ```
/// use dpattn_core::{MatMut, MatRef, PrivacyBudget};
/// use dpattn_core::kv_sketch::{KvSketch, KvSketchParams};
/// use dpattn_core::accounting::{ledger::Ledger, privacy_unit::PrivacyUnit};
/// use dpattn_core::session::Session;
/// // 2000 private positions, d = d_v = 4; 64 features.
/// let n = 2000;
/// let keys: Vec<f64> = (0..n * 4).map(|i| ((i * 7) % 13) as f64 / 13.0 - 0.5).collect();
/// let vals: Vec<f64> = (0..n * 4).map(|i| ((i * 5) % 11) as f64 / 11.0).collect();
/// let params = KvSketchParams::new(1.0, 2.0, 0.5, 64, PrivacyBudget::new(4.0, 1e-6)?);
/// let total = PrivacyBudget::new(8.0, 1e-5)?;
/// let mut session = Session::new(Ledger::new_approx(PrivacyUnit::TOKEN, total))?;
/// let sketch = KvSketch::new(MatRef::from_row_major(&keys, n, 4)?,
///     MatRef::from_row_major(&vals, n, 4)?, &params, &mut session)?;
/// // Any number of queries, one charge.
/// let q = [0.3, -0.2, 0.1, 0.0, 0.5, 0.5, -0.5, 0.2];
/// let mut out = [0.0; 8];
/// sketch.answer(MatRef::from_row_major(&q, 2, 4)?, MatMut::from_row_major(&mut out, 2, 4)?)?;
/// assert_eq!(session.ledger().charges(), 1);
/// assert!(out.chunks(4).all(|o| o.iter().map(|x| x * x).sum::<f64>() <= 4.0 + 1e-12));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct KvSketch {
    params: KvSketchParams,
    map: FeatureMap,
    n: usize,
    d_v: usize,
    gamma: f64,
    /// `m × (d_v + 1)`, row-major: feature `i`'s value sums then `γ`·its sum.
    sketch: Vec<f64>,
    grid: Option<GaussianGrid>,
}

impl KvSketch {
    /// The release: clamps the private rows, sums, releases through the grid with fresh
    /// noise from `session` (one stream id) and charges its ledger (`(ε, δ)` on
    /// approximate-DP ledgers, the discrete Gaussian's `ρ` on zCDP and RDP ledgers; a
    /// constant-time release charges `(ε, δ)` only).
    ///
    /// # Errors
    /// Invalid parameters or shapes (`keys` is `n × d`, `values` `n × d_v`, `n ≥ 1`), an
    /// allocation failure, or the ledger's refusal: the sketch is then not returned and
    /// nothing is charged.
    pub fn new<const N: usize>(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &KvSketchParams,
        session: &mut Session<N>,
    ) -> Result<Self> {
        let r = session.begin(STREAMS)?;
        Self::new_keyed(keys, values, params, r.draw, Some(r.ledger))
    }

    /// [`new`](Self::new) with an explicit key and stream id and an optional ledger: for
    /// replay, audit and hosts that manage their own stream ids (a `(key, stream)` pair must
    /// never serve two releases).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn new_keyed(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &KvSketchParams,
        draw: Draw<'_>,
        ledger: Option<&mut dyn Accountant>,
    ) -> Result<Self> {
        let map = FeatureMap::new(params, keys.cols())?;
        let grid = params.grid_for(&map, values.cols(), keys.rows())?;
        let mut s = Self::sum(keys, values, params, map)?;
        if let Some(ledger) = ledger {
            ledger.charge(PRIVACY_UNIT, &s.cost_of(&grid), params.noise_mode)?;
        }
        let stream = draw.keyed(0);
        let released = match params.noise_mode {
            NoiseMode::ConstantTime => ConstantTimeGaussian::new(grid.integer_noise())
                .and_then(|ct| grid.release_keyed_constant_time(&ct, &stream, 0, &mut s.sketch)),
            _ => grid.release_keyed(&stream, 0, &mut s.sketch),
        };
        if let Err(e) = released {
            s.sketch.fill(0.0);
            return Err(e);
        }
        s.grid = Some(grid);
        Ok(s)
    }

    /// The noise-free sketch (**not private**): the random-feature estimate of attention
    /// alone, for measuring the two errors apart.
    ///
    /// # Errors
    /// As [`new`](Self::new), without the ledger.
    pub fn non_private(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &KvSketchParams,
    ) -> Result<Self> {
        let map = FeatureMap::new(params, keys.cols())?;
        params.entries(values.cols(), keys.rows())?;
        Self::sum(keys, values, params, map)
    }

    /// The clamped, blocked sum (module docs).
    fn sum(
        keys: MatRef<'_, f64>,
        values: MatRef<'_, f64>,
        params: &KvSketchParams,
        map: FeatureMap,
    ) -> Result<Self> {
        let (n, d, d_v) = (keys.rows(), keys.cols(), values.cols());
        if values.rows() != n {
            return Err(Error::ShapeMismatch {
                arg: "values",
                axis: "rows",
                expected: n,
                got: values.rows(),
            });
        }
        let (m, cols) = (map.m, d_v + 1);
        let gamma = params.gamma(d_v);
        let len = mul_size(m, cols, "sketch size")?;
        let mut sketch = try_filled(len, 0.0, "sketch")?;
        let mut part = try_filled(len, 0.0, "sketch block")?;
        // A tile of up to TILE positions: c·k transposed (d × TILE), ‖c·k‖²/2, the value
        // rows with γ appended (TILE × (d_v + 1)), one feature's exponents.
        let mut xt = try_filled(mul_size(d, TILE, "key tile")?, 0.0, "key tile")?;
        let mut vt = try_filled(mul_size(TILE, cols, "value tile")?, 0.0, "value tile")?;
        let (mut half, mut acc) = ([0.0f64; TILE], [0.0f64; TILE]);
        let block = n.isqrt().max(1);
        let mut j = 0;
        while j < n {
            // Tiles never straddle the end of a summation block.
            let t_len = TILE.min(block - j % block).min(n - j);
            for t in 0..t_len {
                let fk = clamp_factor(keys.row(j + t), params.key_norm);
                let mut sq = 0.0;
                for (l, &b) in keys.row(j + t).iter().enumerate() {
                    let x = if fk == 0.0 { 0.0 } else { b * fk };
                    let y = map.c * x;
                    xt[l * TILE + t] = y;
                    sq += y * y;
                }
                half[t] = sq / 2.0;
                let fv = clamp_factor(values.row(j + t), params.value_norm);
                let row = &mut vt[t * cols..(t + 1) * cols];
                for (a, &b) in row.iter_mut().zip(values.row(j + t)) {
                    *a = if fv == 0.0 { 0.0 } else { b * fv };
                }
                row[d_v] = gamma;
            }
            for (w, out) in map.omega.chunks_exact(d).zip(part.chunks_exact_mut(cols)) {
                // φ_i of every position of the tile: each dot product summed over l in
                // order (as `FeatureMap::eval_into`), the tile's positions side by side.
                let acc = &mut acc[..t_len];
                acc.fill(0.0);
                for (l, &wl) in w.iter().enumerate() {
                    for (a, &x) in acc.iter_mut().zip(&xt[l * TILE..l * TILE + t_len]) {
                        *a += wl * x;
                    }
                }
                for (t, &a) in acc.iter().enumerate() {
                    let phi = (libm::exp(a - half[t]) * map.inv_sqrt_m).min(map.clip);
                    for (o, &v) in out.iter_mut().zip(&vt[t * cols..(t + 1) * cols]) {
                        *o += phi * v;
                    }
                }
            }
            j += t_len;
            if j % block == 0 || j == n {
                for (s, p) in sketch.iter_mut().zip(part.iter_mut()) {
                    *s += *p;
                    *p = 0.0;
                }
            }
        }
        xt.fill(0.0);
        vt.fill(0.0);
        half.fill(0.0);
        acc.fill(0.0);
        Ok(Self { params: *params, map, n, d_v, gamma, sketch, grid: None })
    }

    fn cost_of(&self, grid: &GaussianGrid) -> Cost {
        match self.params.noise_mode {
            NoiseMode::ConstantTime => Cost::Approx(self.params.budget),
            _ => Cost::Gaussian { approx: Some(self.params.budget), rho: grid.rho() },
        }
    }

    /// What the release cost (`None` for the non-private sketch).
    pub fn cost(&self) -> Option<Cost> {
        self.grid.as_ref().map(|g| self.cost_of(g))
    }

    /// The grid of the release (`None` for the non-private sketch).
    pub fn grid(&self) -> Option<&GaussianGrid> {
        self.grid.as_ref()
    }

    /// The released (or, for the non-private sketch, computed) `m × (d_v + 1)` values.
    pub fn sketch(&self) -> &[f64] {
        &self.sketch
    }

    /// Answers every row of `queries` (`q × d`, public) into `out` (`q × d_v`), by the
    /// rules of the module docs. Post-processing: no privacy cost.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`]; [`Error::NonFinite`] for a non-finite query and
    /// [`Error::OutOfRange`] for a query so long that its features overflow or all vanish
    /// (public data).
    /// `out` is written only on success.
    pub fn answer(&self, queries: MatRef<'_, f64>, mut out: MatMut<'_, f64>) -> Result<()> {
        let (d, m, cols) = (self.map.d, self.map.m, self.d_v + 1);
        if queries.cols() != d {
            return Err(Error::ShapeMismatch {
                arg: "queries",
                axis: "cols",
                expected: d,
                got: queries.cols(),
            });
        }
        if out.rows() != queries.rows() || out.cols() != self.d_v {
            let (axis, expected, got) = if out.rows() != queries.rows() {
                ("rows", queries.rows(), out.rows())
            } else {
                ("cols", self.d_v, out.cols())
            };
            return Err(Error::ShapeMismatch { arg: "out", axis, expected, got });
        }
        for r in 0..queries.rows() {
            if let Some(c) = queries.row(r).iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite { arg: "queries", index: r * d + c });
            }
        }
        let mut phi = try_filled(m, 0.0, "feature vector")?;
        let mut xt = try_filled(d, 0.0, "query row")?;
        let mut answers =
            try_filled(mul_size(queries.rows(), self.d_v, "answers")?, 0.0, "answers")?;
        let n = self.n as f64;
        for (r, o) in answers.chunks_exact_mut(self.d_v).enumerate() {
            self.map.eval_into(queries.row(r), &mut xt, &mut phi, false);
            let (mut den, mut lo, mut hi) = (0.0, 0.0, 0.0);
            for (i, &p) in phi.iter().enumerate() {
                let row = &self.sketch[i * cols..(i + 1) * cols];
                for (a, &s) in o.iter_mut().zip(row) {
                    *a += p * s;
                }
                den += p * row[self.d_v];
                lo += p * self.map.lower[i];
                hi += p * self.map.upper[i];
            }
            let (lo, hi) = (n * lo, n * hi);
            let finite = lo.is_finite() && hi.is_finite() && den.is_finite();
            if !(finite && hi > 0.0 && o.iter().all(|x| x.is_finite())) {
                let norm = libm::sqrt(queries.row(r).iter().map(|x| x * x).sum::<f64>());
                return Err(Error::OutOfRange {
                    name: "query norm (its random features overflow or all vanish in f64)",
                    value: norm,
                    allowed: "a norm for which exp(omega.q~ - |q~|^2/2) is finite and not all 0",
                });
            }
            let den = (den / self.gamma).clamp(lo, hi);
            if den <= 0.0 {
                o.fill(0.0); // the lower end underflowed to 0 (module docs)
                continue;
            }
            o.iter_mut().for_each(|a| *a /= den);
            let f = clamp_factor(o, self.params.value_norm);
            o.iter_mut().for_each(|a| *a *= f);
        }
        for (r, a) in answers.chunks_exact(self.d_v).enumerate() {
            out.row_mut(r).copy_from_slice(a);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn map(clip: f64, m: usize, d: usize) -> (KvSketchParams, FeatureMap) {
        let budget = PrivacyBudget::new(1.0, 1e-6).unwrap();
        let p =
            KvSketchParams { feature_clip: clip, ..KvSketchParams::new(2.0, 1.0, 0.25, m, budget) };
        (p, FeatureMap::new(&p, d).unwrap())
    }

    #[test]
    fn tiled_sum_equals_the_position_by_position_sum_bit_for_bit() {
        // The reference: each position's clamped rows, `eval_into` and the rank-one update
        // in position order, flushed every ⌊√n⌋ positions (the module docs' sum).
        for (n, clip) in [(1usize, 3.0), (37, 3.0), (100, f64::INFINITY), (1000, 0.5)] {
            let (d, dv, m) = (5, 3, 7);
            let (p, f) = map(clip, m, d);
            let keys: Vec<f64> = (0..n * d).map(|i| libm::sin(i as f64) * 1.5).collect();
            let vals: Vec<f64> = (0..n * dv).map(|i| libm::cos(i as f64 * 0.7)).collect();
            let (km, vm) = (
                MatRef::from_row_major(&keys, n, d).unwrap(),
                MatRef::from_row_major(&vals, n, dv).unwrap(),
            );
            let got = KvSketch::sum(km, vm, &p, f.clone()).unwrap().sketch;
            let (cols, gamma, block) = (dv + 1, p.gamma(dv), n.isqrt().max(1));
            let (mut want, mut part) = (vec![0.0; m * cols], vec![0.0; m * cols]);
            let (mut xt, mut phi) = (vec![0.0; d], vec![0.0; m]);
            for j in 0..n {
                let fk = clamp_factor(km.row(j), p.key_norm);
                let x: Vec<f64> =
                    km.row(j).iter().map(|&b| if fk == 0.0 { 0.0 } else { b * fk }).collect();
                let fv = clamp_factor(vm.row(j), p.value_norm);
                let mut v: Vec<f64> =
                    vm.row(j).iter().map(|&b| if fv == 0.0 { 0.0 } else { b * fv }).collect();
                v.push(gamma);
                f.eval_into(&x, &mut xt, &mut phi, true);
                for (ph, row) in phi.iter().zip(part.chunks_exact_mut(cols)) {
                    row.iter_mut().zip(&v).for_each(|(a, &vc)| *a += ph * vc);
                }
                if (j + 1) % block == 0 || j + 1 == n {
                    want.iter_mut().zip(part.iter_mut()).for_each(|(w, p)| {
                        *w += *p;
                        *p = 0.0;
                    });
                }
            }
            assert_eq!(got, want, "n = {n}");
        }
    }

    #[test]
    fn features_are_orthogonal_within_a_block_with_gaussian_lengths() {
        let (d, m) = (16, 40); // blocks of 16, 16, 8 rows
        let (_, f) = map(f64::INFINITY, m, d);
        let row = |i: usize| &f.omega[i * d..(i + 1) * d];
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        for i in 0..m {
            for j in 0..i {
                let c = dot(row(i), row(j)) / libm::sqrt(dot(row(i), row(i)) * dot(row(j), row(j)));
                if i / d == j / d {
                    assert!(c.abs() < 1e-12, "rows {i}, {j}: cosine {c}");
                }
            }
        }
        // Lengths are chi_16: mean ≈ 3.94, so the 40 norms average within 0.5 of it.
        let mean = (0..m).map(|i| libm::sqrt(dot(row(i), row(i)))).sum::<f64>() / m as f64;
        assert!((mean - 3.94).abs() < 0.5, "{mean}");
    }

    #[test]
    fn the_feature_bound_is_attained_by_an_aligned_key() {
        // Without the clip, the key of norm R_k along ω_i reaches U_i (to rounding) when
        // ‖ω_i‖ ≥ R̃; no key in the ball exceeds it. With the clip, τ is reached.
        let (d, m) = (8, 8);
        for clip in [f64::INFINITY, 1.0] {
            let (p, f) = map(clip, m, d);
            let (mut xt, mut out) = ([0.0; 8], [0.0; 8]);
            for i in 0..m {
                let w = &f.omega[i * d..(i + 1) * d];
                let norm = libm::sqrt(w.iter().map(|x| x * x).sum::<f64>());
                let key: Vec<f64> = w.iter().map(|x| x * p.key_norm / norm).collect();
                f.eval_into(&key, &mut xt, &mut out, true);
                assert!(out[i] <= f.upper[i], "feature {i}: {} > {}", out[i], f.upper[i]);
                if norm * f.c * p.key_norm >= (f.c * p.key_norm).powi(2) {
                    assert!(
                        out[i] >= f.upper[i] * (1.0 - 1e-12),
                        "feature {i}: {} ≪ {}",
                        out[i],
                        f.upper[i]
                    );
                }
                let away: Vec<f64> = key.iter().map(|x| -x).collect();
                f.eval_into(&away, &mut xt, &mut out, true);
                assert!(out[i] >= f.lower[i] && out[i] <= f.lower[i] * (1.0 + 1e-12) + 1e-300);
            }
        }
    }
}
