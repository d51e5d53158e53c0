//! Rényi differential privacy (RDP): the Gaussian and the Poisson-subsampled Gaussian
//! mechanism, composition, conversion to (ε, δ)-DP, and noise calibration for DP-SGD.
//!
//! **Guarantee.** A mechanism `M` is `(α, ε(α))`-RDP if `D_α(M(D) ‖ M(D')) ≤ ε(α)` for every
//! ordered pair of neighbours `D, D'`, where `D_α` is the Rényi divergence of order `α > 1`
//! (Mironov 2017, "Rényi Differential Privacy", CSF, arXiv:1702.07476). Every
//! number this module reports is an *upper bound* on the quantity it names: RDP values
//! ε(α), (ε, δ) conversions and calibrated noise multipliers are all rounded in the safe
//! direction (ε and δ up, the noise multiplier up), so floating-point error can only make
//! the reported guarantee weaker than the true one, never stronger. Invalid inputs give an
//! [`Error`]; no function returns NaN or panics.
//!
//! **Neighbour relation.** [`GaussianRdp`]: any `D, D'` with `‖f(D) − f(D')‖₂ ≤ Δ` (the
//! sensitivity). [`SampledGaussianRdp`]: add/remove one record under Poisson subsampling
//! with rate `q` (each record included independently; see
//! [`PoissonSubsampling`](crate::sampling::PoissonSubsampling)), followed by a sum of
//! per-record values clipped to L2 norm `Δ` plus `N(0, σ²I)` noise, `z = σ/Δ` — DP-SGD's
//! step.
//!
//! **Formulas.**
//! * Gaussian mechanism: `ε(α) = α·Δ²/(2σ²)` for every real `α > 1` (Mironov 2017,
//!   Table II), computed with every operation rounded up.
//! * Sampled Gaussian mechanism (Mironov, Talwar, Zhang 2019, "Rényi Differential Privacy
//!   of the Sampled Gaussian Mechanism", arXiv:1908.10530, §3): `ε(α) = ln(A_α)/(α − 1)`
//!   with `A_α = E_{x∼N(0,z²)}[(1 − q + q·e^{(2x−1)/(2z²)})^α]`.
//!   - Integer `α`: the binomial expansion `A_α = Σₖ C(α,k) qᵏ (1−q)^{α−k} e^{(k²−k)/(2z²)}`
//!     (MTZ19 §3.3). Because the binomial weights sum to 1 exactly, we sum
//!     `A_α − 1 = Σ_{k≥2} C(α,k) qᵏ (1−q)^{α−k} (e^{(k²−k)/(2z²)} − 1)` instead: all terms
//!     are positive, the log-sum-exp has no cancellation, and `ln A_α = ln1p(A_α − 1)` keeps
//!     full relative accuracy even when ε(α) is tiny. `ln C(α,k)` comes from the ratio
//!     recurrence with compensated summation.
//!   - Fractional `α`: the two series of MTZ19 §3.3 (as in Opacus'
//!     `_compute_log_a_for_frac_alpha` and dp_accounting's `_compute_log_a_frac`), split at
//!     `z₀ = z²·ln(1/q − 1) + ½`:
//!     `A_α = Σᵢ C(α,i) qⁱ (1−q)^{α−i} e^{(i²−i)/(2z²)} Φc((i − z₀)/z)
//!          + Σᵢ C(α,i) q^{α−i} (1−q)ⁱ e^{(j²−j)/(2z²)} Φc((z₀ − j)/z)`, `j = α − i`,
//!     with the generalised binomial coefficient (positive for `i ≤ ⌊α⌋ + 1`, alternating
//!     in sign after), in log space with [`log_normal_sf`] and separate positive and
//!     negative accumulators. As for integer orders we sum `A_α − 1`: writing
//!     `A_α − 1 = E[(1 − q + qL)^α − 1 − αq(L − 1)]` (`E[L] = 1`), the subtracted part is
//!     folded into the `i = 0, 1` terms of the first series (coefficients
//!     `(1−q)^α − 1 + αq` and `αq((1−q)^{α−1} − 1)`, computed without cancellation) and
//!     subtracted on `x > z₀` as `(1 − αq)Φc(z₀/z) + αqΦc((z₀ − 1)/z)`.
//!     *Stopping rule.* For `i ≥ ⌊α⌋ + 2` both series alternate, and their magnitudes form a
//!     Hausdorff moment sequence (`|C(α,i)|` is a Beta integral in `i`, the other factor a
//!     moment of the expansion ratio, which is ≤ 1 on each half-line). The alternating
//!     tail from a negative term on is then bracketed by an Euler transform of order 6
//!     computed from the next seven terms (see `euler_tail`): only its certified lower
//!     bound is subtracted, so the result stays an upper bound, and we stop once the
//!     bracket is below `2⁻⁴⁶·(A_α − 1)` — typically after 20–120 terms, where the plain
//!     series decays only like `i^{−α−2}`. If that has not happened after
//!     `⌊α⌋ + 2 + 20000` terms, a bracket below `1e-6·(A_α − 1)` is accepted; otherwise
//!     the order is reported as an [`Error::Infeasible`] naming the series, never as a
//!     silently wrong value (not observed for `q ∈ [1e-9, 1 − 1e-6]`, `z ∈ [0.05, 1e4]`).
//!   - The two series cancel to about `1/(2z²)` of their size, so for large `z` their
//!     certified accuracy degrades (≈ 1e-12 relative for `z ≤ 10`, ≈ 1e-4 at `z = 1e4`
//!     with `q ≈ ½`). When the certificate is worse than 1e-9, and always for `z > 1e4`,
//!     the value is also bounded by the chord between the neighbouring integer orders —
//!     `ln A_α` is convex in α (a cumulant generating function) and `ln A_1 = 0` — and by
//!     the Gaussian `α/(2z²)`, and the smallest of these upper bounds is reported.
//!   - `q = 0` gives ε(α) = 0 and `q = 1` the plain Gaussian `α/(2z²)`. For `z` outside
//!     `[1e-100, 1e100]` (where `z²` would leave the `f64` range) the Gaussian value
//!     `α/(2z²)` is used: an upper bound (Rényi divergence is quasi-convex, so subsampling
//!     cannot increase it), and equal to the subsampled value to within `f64` resolution.
//!   - Floating-point error: every term carries a first-order bound on the error of its
//!     logarithm (from its components' magnitudes, plus 2e-13 relative for `ln Φc`, whose
//!     documented accuracy is 1e-13), the accumulators carry the weighted sum of these
//!     bounds, and the result is increased by the total before dividing by `α − 1`
//!     (rounded up). Both series are split at the same computed `z₀`, so its rounding
//!     cancels between them except on the sliver between the computed and the exact split,
//!     whose contribution is bounded and added too. Against 40-digit quadrature of `A_α`
//!     (mpmath) the reported values are above the exact ones by at most ~1e-11 relative
//!     for `z ∈ [0.5, 4]` (`tests/rdp.rs`).
//! * Composition (Mironov 2017, Prop. 1): RDP curves add order by order; `T` steps multiply
//!   by `T`. Both are rounded up exactly (an error-free transformation decides the
//!   rounding).
//! * RDP → (ε, δ) (Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis testing
//!   interpretations and Rényi differential privacy", AISTATS, arXiv:1905.09982, Thm 21;
//!   also Canonne, Kamath, Steinke 2020, arXiv:2004.00010, Prop. 12):
//!   `ε = min_α ε(α) + ln((α−1)/α) − (ln δ + ln α)/(α−1)`, clamped at 0, and its inverse
//!   `δ = min_α exp((α−1)(ε(α) − ε + ln(1 − 1/α)) − ln α)`, clamped at 1. As in
//!   dp_accounting's `compute_epsilon`/`compute_delta`, each order also contributes the
//!   Bretagnolle–Huber bound `δ(0) = TV ≤ √(1 − e^{−KL})` with `KL ≤ ε(α)`, which decides
//!   the very small ε(α) case (ε = 0 whenever `δ ≥ √(1 − e^{−ε(α)})`).
//!
//! **Orders.** [`DEFAULT_ORDERS`] is dp_accounting's `DEFAULT_RDP_ORDERS` (0.6.0):
//! `1.1, 1.2, …, 10.9` (step 0.1), `11, 12, …, 63`, `128, 256, 512, 1024` — 156 orders in a
//! fixed-size array (no allocation). Any finite order in `(1, 1e6]` may be passed in a
//! custom slice or array. Opacus' `RDPAccountant.DEFAULT_ALPHAS` is the same list without
//! `11` and `128…1024`. (dp_accounting 0.6.0 itself over-states ε(α) at fractional orders:
//! its `_log_comb` uses `gammaln`, i.e. `ln|Γ|`, so the negative terms of the series are
//! added — 3 % too high at α = 1.5 for q = 0.01, z = 1.1 — and gives up with `inf` after
//! 1000 terms; its ε on these orders is therefore slightly above ours.)
//!
//! ```
//! use dpattn_core::accounting::rdp::{RdpCurve, SampledGaussianRdp};
//! // DP-SGD: sampling rate 1 %, noise multiplier 1.1, 10 000 steps, δ = 1e-5.
//! let step = SampledGaussianRdp::new(0.01, 1.1)?;
//! let mut curve = RdpCurve::default();
//! curve.compose(&step, 10_000)?;
//! let bound = curve.epsilon(1e-5)?;
//! // Opacus 1.6.0's formulas on these orders: 5.63199236854841 at α = 4.7.
//! assert!((bound.epsilon - 5.631_992_368_5).abs() < 1e-9);
//! assert_eq!(bound.order, 4.7);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

use crate::calibration::normal::log_normal_sf;
use crate::error::{Error, Result};

/// Unit roundoff of `f64`, 2⁻⁵³.
const U: f64 = f64::EPSILON * 0.5;

/// The largest order accepted (the integer-order sum has `α + 1` terms).
pub const MAX_ORDER: f64 = 1e6;

/// Number of orders in [`DEFAULT_ORDERS`].
pub const DEFAULT_ORDER_COUNT: usize = 156;

/// The default RDP orders: dp_accounting's `DEFAULT_RDP_ORDERS` —
/// `1 + x/10` for `x = 1..=99`, then `11..=63`, then `128, 256, 512, 1024`.
///
/// ```
/// use dpattn_core::accounting::rdp::DEFAULT_ORDERS;
/// assert_eq!(DEFAULT_ORDERS.len(), 156);
/// assert_eq!((DEFAULT_ORDERS[0], DEFAULT_ORDERS[98]), (1.1, 10.9));
/// assert_eq!((DEFAULT_ORDERS[99], DEFAULT_ORDERS[155]), (11.0, 1024.0));
/// ```
pub const DEFAULT_ORDERS: [f64; DEFAULT_ORDER_COUNT] = default_orders();

const fn default_orders() -> [f64; DEFAULT_ORDER_COUNT] {
    let mut out = [0.0; DEFAULT_ORDER_COUNT];
    let mut x = 1;
    while x <= 99 {
        // Same double as Python's `1 + x / 10.0`.
        out[x - 1] = 1.0 + x as f64 / 10.0;
        x += 1;
    }
    let mut k = 11;
    while k <= 63 {
        out[99 + k - 11] = k as f64;
        k += 1;
    }
    out[152] = 128.0;
    out[153] = 256.0;
    out[154] = 512.0;
    out[155] = 1024.0;
    out
}

/// Outside `[Z_EXACT_MIN, Z_EXACT_MAX]` the subsampled Gaussian uses the Gaussian bound.
const Z_EXACT_MIN: f64 = 1e-100;
const Z_EXACT_MAX: f64 = 1e100;
/// Above this noise multiplier fractional orders use [`chord_rdp`] (the two series lose
/// about 2·log10(z) digits to cancellation).
const Z_SERIES_MAX: f64 = 1e4;
/// If the two series cannot certify this relative accuracy, also try [`chord_rdp`].
const CHORD_FROM_REL_ERR: f64 = 1e-9;
/// ln √(2π).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
/// Terms of the fractional-order series allowed beyond `⌊α⌋ + 2`.
const SERIES_EXTRA_TERMS: u64 = 20_000;
/// Stop the fractional series at a negative term below `2^-46 · (A_α − 1)` ...
const SERIES_LN_TOL: f64 = -46.0 * core::f64::consts::LN_2;
/// ... or, after `SERIES_EXTRA_TERMS`, below `1e-6 · (A_α − 1)`.
const SERIES_LN_LOOSE_TOL: f64 = -13.815_510_557_964_274; // ln 1e-6
/// Assumed relative accuracy of `log_normal_sf` (its documented bound is 1e-13).
const LOG_SF_REL_ERR: f64 = 2e-13;
/// The calibration search range for the noise multiplier.
const Z_SEARCH_MIN: f64 = 1.0 / (1u64 << 40) as f64;
const Z_SEARCH_MAX: f64 = (1u64 << 40) as f64;
/// Relative width at which the calibration bisection stops.
const CALIBRATION_REL_TOL: f64 = 1e-10;

// ------------------------------------------------------------------ directed rounding

/// `a + b` rounded up (exactly: TwoSum decides whether the rounded sum is below).
fn add_up(a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return s;
    }
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    if err > 0.0 { s.next_up() } else { s }
}

/// `a · b` rounded up, for `a, b ≥ 0` (fma gives the exact residual's sign).
fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() {
        return p;
    }
    if p < f64::MIN_POSITIVE {
        // Subnormal or zero: the residual may round to 0; step up unconditionally.
        return if a == 0.0 || b == 0.0 { 0.0 } else { p.next_up() };
    }
    if libm::fma(a, b, -p) > 0.0 { p.next_up() } else { p }
}

/// `a / b` rounded up, for `a ≥ 0`, `b > 0`.
fn div_up(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() {
        return q;
    }
    if q < f64::MIN_POSITIVE {
        return if a == 0.0 { 0.0 } else { q.next_up() };
    }
    if libm::fma(q, b, -a) < 0.0 { q.next_up() } else { q }
}

/// `x` increased by the relative amount `rel` and one more ulp (for values whose error is
/// bounded by `rel·|x|` plus half an ulp).
fn approx_up(x: f64, rel: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    (x + x.abs() * rel).next_up()
}

/// The smallest `f64` ≥ `n` (`u64 → f64` rounds to nearest).
fn u64_up(n: u64) -> f64 {
    let f = n as f64;
    // `f ≤ 2^64` is an integer, so `as u128` is exact.
    if (f as u128) < u128::from(n) { f.next_up() } else { f }
}

// ------------------------------------------------------------------ log-space helpers

/// Σ exp(lᵢ) in log space (scaled by the largest term, Neumaier-compensated), with a
/// running bound on the error of ln of the sum.
#[derive(Clone, Copy, Debug)]
struct LogSum {
    /// Largest term so far (the scale).
    max: f64,
    /// Σ exp(lᵢ − max) = `sum + comp`.
    sum: f64,
    comp: f64,
    /// Σ exp(lᵢ − max)·(eᵢ + weight rounding): the absolute error of the scaled sum.
    err: f64,
    /// Number of finite terms added.
    count: u64,
}

impl LogSum {
    const EMPTY: Self = Self { max: f64::NEG_INFINITY, sum: 0.0, comp: 0.0, err: 0.0, count: 0 };

    /// Neumaier step: `sum + comp += w` (`w ≥ 0`).
    fn push(&mut self, w: f64) {
        let t = self.sum + w;
        if self.sum >= w {
            self.comp += (self.sum - t) + w;
        } else {
            self.comp += (w - t) + self.sum;
        }
        self.sum = t;
    }

    /// Adds exp(`l`), where `l` is known to within `e`. `l = −∞` (a zero term) is skipped.
    /// A weight exp(−d) is computed with relative error ≤ 2u(1 + d) (the rounding of
    /// `d` is amplified by exp), which is charged to `err`.
    fn add(&mut self, l: f64, e: f64) {
        if l == f64::NEG_INFINITY {
            return;
        }
        self.count += 1;
        if self.max == f64::NEG_INFINITY || l.is_nan() {
            *self = Self { max: l, sum: 1.0, comp: 0.0, err: e, count: 1 };
        } else if l > self.max {
            let d = l - self.max;
            let w = libm::exp(-d);
            self.sum *= w;
            self.comp *= w;
            self.err = self.err * w + (self.sum + self.comp) * 2.0 * U * (1.0 + d);
            self.max = l;
            self.push(1.0);
            self.err += e;
        } else {
            let d = self.max - l;
            let w = libm::exp(-d);
            self.push(w);
            self.err += w * (e + 2.0 * U * (1.0 + d));
        }
    }

    /// ln Σ exp(lᵢ) (−∞ when empty; NaN if a NaN term was added).
    fn ln(&self) -> f64 {
        if self.count == 0 {
            return f64::NEG_INFINITY;
        }
        self.max + libm::log(self.sum + self.comp)
    }

    /// A bound on |computed `ln()` − exact ln Σ exp(lᵢ)|: the weighted term and weight
    /// errors, compensated summation (≤ (2u + n·u²) relative, all terms positive), and the
    /// final logarithm and addition.
    fn ln_err(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let s = self.sum + self.comp;
        self.err / s + (4.0 + self.count as f64 * U) * U + 2.0 * U * (self.max.abs() + 1.0)
    }
}

/// ln(eˣ − 1) for `x > 0` (`x` finite), without overflow or cancellation.
fn ln_expm1(x: f64) -> f64 {
    if x > 36.0 { x + libm::log1p(-libm::exp(-x)) } else { libm::log(libm::expm1(x)) }
}

/// Neumaier-compensated running sum of ln C(α, k) over the ratio recurrence
/// `C(α, k+1) = C(α, k)·(α − k)/(k + 1)`, with a bound on its error.
#[derive(Clone, Copy, Debug)]
struct LnBinomial {
    sum: f64,
    comp: f64,
    /// Σ (1 + |ln ratio|): the error of the sum is ≤ 2u·abs + 2u·|sum|.
    abs: f64,
    /// The coefficient became exactly zero (integer α, k > α).
    zero: bool,
}

impl LnBinomial {
    const ONE: Self = Self { sum: 0.0, comp: 0.0, abs: 0.0, zero: false };

    /// ln |C(α, k)| (−∞ once the coefficient is zero).
    fn value(&self) -> f64 {
        if self.zero { f64::NEG_INFINITY } else { self.sum + self.comp }
    }

    /// Error bound of `value()`.
    fn err(&self) -> f64 {
        2.0 * U * (self.abs + self.value().abs() + 1.0)
    }

    /// Advances from k to k + 1.
    fn advance(&mut self, alpha: f64, k: f64) {
        if self.zero {
            return;
        }
        let ratio = (alpha - k).abs() / (k + 1.0);
        if ratio == 0.0 {
            self.zero = true;
            return;
        }
        let l = libm::log(ratio);
        let t = self.sum + l;
        if self.sum.abs() >= l.abs() {
            self.comp += (self.sum - t) + l;
        } else {
            self.comp += (l - t) + self.sum;
        }
        self.sum = t;
        self.abs += 1.0 + l.abs();
    }
}

// ------------------------------------------------------------------ validation

fn check_order(order: f64) -> Result<()> {
    if order.is_finite() && order > 1.0 && order <= MAX_ORDER {
        Ok(())
    } else {
        Err(Error::OutOfRange { name: "order", value: order, allowed: "(1, 1e6]" })
    }
}

fn check_orders(orders: &[f64]) -> Result<()> {
    if orders.is_empty() {
        return Err(Error::OutOfRange { name: "orders.len()", value: 0.0, allowed: "[1, inf)" });
    }
    orders.iter().try_for_each(|&a| check_order(a))
}

fn check_rdp_value(r: f64) -> Result<()> {
    // +∞ is allowed: "no bound at this order".
    if r >= 0.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange { name: "rdp", value: r, allowed: "[0, inf]" })
    }
}

fn check_delta(delta: f64) -> Result<()> {
    if delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange { name: "delta", value: delta, allowed: "(0, 1)" })
    }
}

fn check_epsilon(epsilon: f64) -> Result<()> {
    if epsilon.is_finite() && epsilon >= 0.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "[0, inf), finite" })
    }
}

// ------------------------------------------------------------------ mechanisms

/// A mechanism with a known RDP curve: `rdp(α)` is an upper bound on ε(α) for one use.
///
/// Implement it for your own mechanism to compose it with the ones here. Values must be
/// in `[0, +∞]` (`+∞` meaning "no bound at this order"); [`RdpCurve`] and the conversion
/// functions reject NaN and negative values with an [`Error`].
///
/// ```
/// use dpattn_core::accounting::rdp::{RdpCurve, RdpMechanism};
/// /// ρ-zCDP, e.g. a Gaussian with ρ = Δ²/(2σ²): ε(α) = ρα.
/// struct Zcdp(f64);
/// impl RdpMechanism for Zcdp {
///     fn rdp(&self, order: f64) -> dpattn_core::Result<f64> {
///         Ok(self.0 * order)
///     }
/// }
/// let curve = RdpCurve::from_mechanism([2.0, 4.0], &Zcdp(0.5), 3)?;
/// assert_eq!(curve.rdp(), &[3.0, 6.0]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub trait RdpMechanism {
    /// An upper bound on the mechanism's RDP ε(α) at `order` α > 1.
    ///
    /// # Errors
    /// Implementation-defined; those in this module return [`Error::OutOfRange`] for an
    /// order outside `(1, 1e6]`.
    fn rdp(&self, order: f64) -> Result<f64>;
}

impl<M: RdpMechanism + ?Sized> RdpMechanism for &M {
    fn rdp(&self, order: f64) -> Result<f64> {
        (**self).rdp(order)
    }
}

/// The Gaussian mechanism `f(D) + N(0, σ²I)` for `f` with L2 sensitivity `Δ`:
/// `ε(α) = α·Δ²/(2σ²)` (Mironov 2017, Table II), every operation rounded up.
///
/// ```
/// use dpattn_core::accounting::rdp::GaussianRdp;
/// let g = GaussianRdp::new(2.0, 1.0)?; // σ = 2, Δ = 1
/// assert_eq!(g.rdp(4.0)?, 0.5);
/// assert_eq!(GaussianRdp::from_noise_multiplier(2.0)?.rdp(4.0)?, 0.5);
/// assert!(GaussianRdp::new(0.0, 1.0).is_err() && g.rdp(1.0).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianRdp {
    sigma: f64,
    sensitivity: f64,
}

impl GaussianRdp {
    /// Noise standard deviation `σ` and L2 sensitivity `Δ`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless both are finite and `> 0`.
    pub fn new(sigma: f64, sensitivity: f64) -> Result<Self> {
        if !(sigma.is_finite() && sigma > 0.0) {
            return Err(Error::OutOfRange { name: "sigma", value: sigma, allowed: "(0, inf)" });
        }
        if !(sensitivity.is_finite() && sensitivity > 0.0) {
            return Err(Error::OutOfRange {
                name: "sensitivity",
                value: sensitivity,
                allowed: "(0, inf)",
            });
        }
        Ok(Self { sigma, sensitivity })
    }

    /// Noise multiplier `z = σ/Δ` (i.e. `Δ = 1`, `σ = z`).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::GaussianRdp;
    /// assert_eq!(GaussianRdp::from_noise_multiplier(1.5)?.noise_multiplier(), 1.5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] unless `z` is finite and `> 0`.
    pub fn from_noise_multiplier(noise_multiplier: f64) -> Result<Self> {
        Self::new(noise_multiplier, 1.0).map_err(|_| Error::OutOfRange {
            name: "noise_multiplier",
            value: noise_multiplier,
            allowed: "(0, inf)",
        })
    }

    /// `σ/Δ` (rounded to nearest).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::GaussianRdp;
    /// assert_eq!(GaussianRdp::new(3.0, 2.0)?.noise_multiplier(), 1.5);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn noise_multiplier(&self) -> f64 {
        self.sigma / self.sensitivity
    }

    /// `ε(α) = α·Δ²/(2σ²)`, rounded up (`+∞` if it overflows).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::GaussianRdp;
    /// let g = GaussianRdp::new(3.0, 1.0)?;
    /// // 2.5/18 is not a double: the result is the double just above it.
    /// let r = g.rdp(2.5)?;
    /// assert!(r >= 2.5 / 18.0 && r <= 2.5 / 18.0 * (1.0 + 1e-15));
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an order outside `(1, 1e6]` or NaN.
    pub fn rdp(&self, order: f64) -> Result<f64> {
        check_order(order)?;
        Ok(gaussian_rdp_up(order, self.sensitivity, self.sigma))
    }
}

impl RdpMechanism for GaussianRdp {
    fn rdp(&self, order: f64) -> Result<f64> {
        GaussianRdp::rdp(self, order)
    }
}

/// `α·Δ²/(2σ²)` rounded up.
fn gaussian_rdp_up(order: f64, sensitivity: f64, sigma: f64) -> f64 {
    let d = div_up(sensitivity, sigma);
    mul_up(mul_up(order, mul_up(d, d)), 0.5)
}

/// The sampled Gaussian mechanism (one DP-SGD step): Poisson subsampling with rate `q`,
/// then the Gaussian mechanism with noise multiplier `z = σ/Δ`; add/remove neighbours.
/// ε(α) = ln(A_α)/(α − 1) by MTZ19 §3 (see the [module docs](self)).
///
/// ```
/// use dpattn_core::accounting::rdp::{GaussianRdp, SampledGaussianRdp};
/// let m = SampledGaussianRdp::new(0.01, 1.1)?;
/// let r = m.rdp(32.0)?; // dp-accounting 0.6.0 and Opacus 1.6.0: 8.469416433675926
/// assert!((r / 8.469416433675926 - 1.0).abs() < 1e-13);
/// // Fractional orders use MTZ19's two series.
/// assert!(m.rdp(2.5)? > m.rdp(2.0)? && m.rdp(2.5)? < m.rdp(3.0)?);
/// // q = 1 is the plain Gaussian, q = 0 costs nothing.
/// let g = GaussianRdp::from_noise_multiplier(1.1)?;
/// assert_eq!(SampledGaussianRdp::new(1.0, 1.1)?.rdp(8.0)?, g.rdp(8.0)?);
/// assert_eq!(SampledGaussianRdp::new(0.0, 1.1)?.rdp(8.0)?, 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampledGaussianRdp {
    q: f64,
    z: f64,
}

impl SampledGaussianRdp {
    /// Sampling rate `q ∈ [0, 1]` and noise multiplier `z = σ/Δ > 0`.
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::SampledGaussianRdp;
    /// assert!(SampledGaussianRdp::new(0.5, 1.0).is_ok());
    /// assert!(SampledGaussianRdp::new(1.5, 1.0).is_err());
    /// assert!(SampledGaussianRdp::new(0.5, f64::INFINITY).is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] if `q` is NaN or outside `[0, 1]`, or `z` is not finite and
    /// `> 0`.
    pub fn new(sampling_rate: f64, noise_multiplier: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&sampling_rate) {
            return Err(Error::OutOfRange {
                name: "sampling_rate",
                value: sampling_rate,
                allowed: "[0, 1]",
            });
        }
        if !(noise_multiplier.is_finite() && noise_multiplier > 0.0) {
            return Err(Error::OutOfRange {
                name: "noise_multiplier",
                value: noise_multiplier,
                allowed: "(0, inf)",
            });
        }
        Ok(Self { q: sampling_rate, z: noise_multiplier })
    }

    /// `q`.
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::SampledGaussianRdp;
    /// assert_eq!(SampledGaussianRdp::new(0.25, 2.0)?.sampling_rate(), 0.25);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn sampling_rate(&self) -> f64 {
        self.q
    }

    /// `z`.
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::SampledGaussianRdp;
    /// assert_eq!(SampledGaussianRdp::new(0.25, 2.0)?.noise_multiplier(), 2.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn noise_multiplier(&self) -> f64 {
        self.z
    }

    /// An upper bound on ε(α): the exact binomial sum at integer orders (tight to ~1e-13
    /// relative), MTZ19's two series at fractional ones (tight to ~1e-12 for `z ≤ 10`,
    /// degrading like `z²`; for `z > 1e4`, or when the series cannot certify 1e-9, the
    /// log-convexity chord between the neighbouring integer orders is used if smaller —
    /// see the [module docs](self)).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::SampledGaussianRdp;
    /// let m = SampledGaussianRdp::new(0.04, 1.5)?;
    /// // Integer and fractional formulas agree where they meet.
    /// let (a, b) = (m.rdp(8.0)?, m.rdp(8.0 + 1e-9)?);
    /// assert!((a - b).abs() < 1e-9 * a);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an order outside `(1, 1e6]`; [`Error::Infeasible`] if the
    /// fractional-order series cannot be bracketed to `1e-6` relative within
    /// `⌊α⌋ + 20002` terms (not observed for `q ∈ [1e-9, 1 − 1e-6]`, `z ∈ [0.05, 1e4]`,
    /// `α ∈ [1.0001, 1000.5]`).
    pub fn rdp(&self, order: f64) -> Result<f64> {
        check_order(order)?;
        let (q, z) = (self.q, self.z);
        if q == 0.0 {
            return Ok(0.0);
        }
        if q == 1.0 || !(Z_EXACT_MIN..=Z_EXACT_MAX).contains(&z) {
            return Ok(gaussian_rdp_up(order, 1.0, z));
        }
        // `order − 1` is exact (order < 2^53).
        let v = if order == libm::floor(order) {
            // order ≤ 1e6, so the conversion is exact.
            div_up(ln_a_integer(q, z, order as u64), order - 1.0)
        } else {
            let (ln_a, rel_err) = if z <= Z_SERIES_MAX {
                ln_a_fractional(q, z, order)?
            } else {
                (f64::INFINITY, f64::INFINITY)
            };
            let v = div_up(ln_a, order - 1.0);
            if rel_err > CHORD_FROM_REL_ERR { v.min(chord_rdp(q, z, order)) } else { v }
        };
        if v.is_nan() {
            return Err(Error::Infeasible {
                condition: "sampled Gaussian RDP evaluates to a number",
                lhs: v,
                rhs: order,
            });
        }
        // For q ∈ (0, 1) the true value is > 0.
        Ok(v.max(2.0 * f64::MIN_POSITIVE))
    }
}

impl RdpMechanism for SampledGaussianRdp {
    fn rdp(&self, order: f64) -> Result<f64> {
        SampledGaussianRdp::rdp(self, order)
    }
}

/// Upper bound on ln A_α for integer `alpha ≥ 2`, `q ∈ (0, 1)`, `z ∈ [1e-100, 1e100]`, via
/// `A_α − 1 = Σ_{k≥2} C(α,k) qᵏ (1−q)^{α−k} (e^{(k²−k)/(2z²)} − 1)`.
fn ln_a_integer(q: f64, z: f64, alpha: u64) -> f64 {
    let ln_q = libm::log(q);
    let ln_1mq = libm::log1p(-q);
    let inv_2z2 = 0.5 / (z * z);
    let af = alpha as f64;
    let mut acc = LogSum::EMPTY;
    let mut ln_c = LnBinomial::ONE;
    for k in 0..=alpha {
        let kf = k as f64;
        if k >= 2 {
            // k(k − 1) ≤ 1e12 is exact; x ∈ [1e-200, 5e211].
            let x = (kf * (kf - 1.0)) * inv_2z2;
            let lx = ln_expm1(x);
            let c = ln_c.value();
            let a = kf * ln_q;
            let b = (af - kf) * ln_1mq;
            let l = c + a + b + lx;
            // ln C, k·ln q and (α−k)·ln(1−q) to a few ulps each; x to 4u relative, and
            // d ln(eˣ − 1)/dx ≤ 1 + 1/x; four additions.
            let e =
                ln_c.err() + 8.0 * U * (c.abs() + a.abs() + b.abs() + lx.abs() + x + l.abs() + 2.0);
            acc.add(l, e);
        }
        if k < alpha {
            ln_c.advance(af, kf);
        }
    }
    // ln(A − 1) (upper bound), then ln A = ln1p(A − 1).
    ln1p_exp_up(acc.ln() + acc.ln_err())
}

/// ln(1 + eˢ) rounded up (no overflow for large `s`).
fn ln1p_exp_up(s: f64) -> f64 {
    let v = if s > 36.0 { s + libm::log1p(libm::exp(-s)) } else { libm::log1p(libm::exp(s)) };
    approx_up(v, 4.0 * U)
}

/// `(1 + t)^α − 1 − αt` for `t ∈ (−1, 0)` (≥ 0 by Bernoulli's inequality), with a bound
/// on its relative error. Taylor series `Σ_{k≥2} C(α,k) tᵏ` when `α|t| ≤ ½` (the terms
/// then shrink by a factor ≤ ⅔ from the first), otherwise directly (the result is then
/// ≥ e^{−½} − ½ > 0.1 times `α|t|`, so the subtraction loses at most a few bits).
fn binomial_remainder(alpha: f64, t: f64) -> (f64, f64) {
    if alpha * -t <= 0.5 {
        let mut term = 0.5 * alpha * (alpha - 1.0) * t * t;
        let mut sum = 0.0f64;
        let mut abs = 0.0;
        let mut k = 2.0;
        // |t| ≤ ½ here, so 200 terms are far more than enough.
        while term != 0.0 && term.abs() > 1e-20 * sum.abs() && k < 200.0 {
            sum += term;
            abs += term.abs();
            term *= (alpha - k) / (k + 1.0) * t;
            k += 1.0;
        }
        // The neglected tail is below 1e-20·|sum|·3.
        (sum, 8.0 * U * (k + abs / sum))
    } else {
        let e = libm::expm1(alpha * libm::log1p(t));
        let d = e - alpha * t;
        (d, 8.0 * U * ((e.abs() * (2.0 + alpha * libm::log1p(t).abs()) - alpha * t) / d + 1.0))
    }
}

/// Upper bound on ln A_α for fractional `alpha`, `q ∈ (0, 1)`, `z ∈ [1e-100, 1e100]`, by
/// MTZ19 §3.3's two series, rearranged to sum `A_α − 1` (see the module docs).
fn ln_a_fractional(q: f64, z: f64, alpha: f64) -> Result<(f64, f64)> {
    let ln_q = libm::log(q);
    let ln_1mq = libm::log1p(-q);
    let sigma2 = z * z;
    let inv_2s2 = 0.5 / sigma2;
    // L = ln(1/q − 1), accurate relative to |L| (which vanishes at q = ½): 1 − 2q is exact
    // for q ≥ ¼ and 1 − q for q ≥ ½ (Sterbenz).
    let (ln_odds, ln_odds_err) = if q > 0.5 {
        let l = libm::log((1.0 - q) / q);
        (l, 4.0 * U * (l.abs() + 1.0))
    } else {
        let l = libm::log1p((1.0 - 2.0 * q) / q);
        (l, 4.0 * U * l.abs() + if q < 0.25 { 4.0 * U } else { 0.0 })
    };
    let z0 = sigma2 * ln_odds + 0.5;
    // Error of z0 (σ², the product, the sum). Both series are split at the same computed
    // z0, so this error does not enter the terms; it only moves the split off the point
    // where the expansion ratios equal 1 (see `ln_sliver` below).
    let z0_err = sigma2 * (ln_odds_err + 4.0 * U * ln_odds.abs()) + 2.0 * U * z0.abs();
    let floor_alpha = libm::floor(alpha) as u64; // alpha ≤ 1e6
    let alternating_from = floor_alpha + 2;
    let limit = alternating_from + SERIES_EXTRA_TERMS;
    let aq = alpha * q;

    // ln Φc(arg) for arg = (shift − z0)/σ or (z0 − shift)/σ, with the error that the
    // rounding of the argument causes (d ln Φc(a)/da is minus the hazard h(a):
    // h(a) ≤ a + 1 for a ≥ 0 and h(a) ≤ 2φ(a) < 0.8·e^{−a²/2} for a < 0, where Φc ≥ ½)
    // plus `log_normal_sf`'s own.
    let ln_sf = |arg: f64, shift: f64| -> (f64, f64) {
        let arg_err = 2.0 * U * (shift.abs() + z0.abs()) / z + 2.0 * U * arg.abs();
        let hazard = if arg >= 0.0 { arg + 1.0 } else { 0.8 * libm::exp(-0.5 * arg * arg) };
        let v = log_normal_sf(arg);
        (v, LOG_SF_REL_ERR * v.abs() + hazard * arg_err)
    };
    // ln(term) = Σ parts + ln Φc, with its error bound.
    let term = |ln_c: &LnBinomial, parts: [f64; 3], sf: (f64, f64)| -> (f64, f64) {
        let c = ln_c.value();
        let l = c + parts[0] + parts[1] + parts[2] + sf.0;
        let e = ln_c.err()
            + sf.1
            + 8.0
                * U
                * (c.abs()
                    + parts[0].abs()
                    + parts[1].abs()
                    + parts[2].abs()
                    + sf.0.abs()
                    + l.abs()
                    + 2.0);
        (l, e)
    };

    // A_α − 1 = E[(1 − q + qL)^α − 1 − αq(L − 1)] with L = e^{(2x−1)/(2σ²)}, E[L] = 1:
    // the i = 0, 1 terms of series 0 absorb the subtracted part on x ≤ z0, and the part
    // on x > z0 is subtracted explicitly.
    let mut pos = LogSum::EMPTY;
    let mut neg = LogSum::EMPTY;
    {
        // ((1−q)^α − 1 + αq)·Φ(z0/σ).
        let (d0, d0_err) = binomial_remainder(alpha, -q);
        let sf = ln_sf(-z0 / z, 0.0);
        pos.add(libm::log(d0) + sf.0, d0_err + sf.1 + 4.0 * U * (sf.0.abs() + 1.0));
        // αq((1−q)^{α−1} − 1)·Φc((1 − z0)/σ) ≤ 0.
        let c1 = -libm::expm1((alpha - 1.0) * ln_1mq);
        let sf = ln_sf((1.0 - z0) / z, 1.0);
        let l = libm::log(aq * c1) + sf.0;
        let e = 8.0 * U * (2.0 + (alpha - 1.0) * ln_1mq.abs()) + sf.1 + 4.0 * U * l.abs();
        neg.add(l, e);
        // −(1 − αq)·Φc(z0/σ) − αq·Φc((z0 − 1)/σ): the subtracted part on x > z0.
        let one_m_aq = 1.0 - aq;
        if one_m_aq != 0.0 {
            let sf = ln_sf(z0 / z, 0.0);
            let l = libm::log(one_m_aq.abs()) + sf.0;
            let e = 2.0 * U * (1.0 + aq) / one_m_aq.abs() + sf.1 + 4.0 * U * (l.abs() + 1.0);
            if one_m_aq > 0.0 { neg.add(l, e) } else { pos.add(l, e) }
        }
        let sf = ln_sf((z0 - 1.0) / z, 1.0);
        let l = libm::log(aq) + sf.0;
        neg.add(l, 4.0 * U * (l.abs() + 2.0) + sf.1);
    }

    let mut ln_c = LnBinomial::ONE;
    // The alternating tail is held back in a ring of EULER_K + 1 terms so that the Euler
    // bound can be evaluated before the oldest one is committed.
    let mut ring = [TailTerm::ZERO; EULER_K + 1];
    let (mut head, mut len) = (0usize, 0usize);
    let mut i: u64 = 0;
    loop {
        let fi = i as f64;
        let j = alpha - fi; // exact: both are multiples of ulp(alpha) ≤ 2^-33
        // Series 0 (x ≤ z0): C(α,i) qⁱ (1−q)^j e^{(i²−i)/(2σ²)} Φc((i − z0)/σ), i ≥ 2.
        let t0 = if i >= 2 {
            let parts = [fi * ln_q, j * ln_1mq, (fi * fi - fi) * inv_2s2];
            term(&ln_c, parts, ln_sf((fi - z0) / z, fi))
        } else {
            (f64::NEG_INFINITY, 0.0)
        };
        // Series 1 (x > z0): C(α,i) q^j (1−q)ⁱ e^{(j²−j)/(2σ²)} Φc((z0 − j)/σ), i ≥ 0.
        let parts = [j * ln_q, fi * ln_1mq, (j * j - j) * inv_2s2];
        let t1 = term(&ln_c, parts, ln_sf((z0 - j) / z, j));
        if t0.0.is_nan() || t1.0.is_nan() {
            return Ok((f64::NAN, f64::NAN));
        }

        if i < alternating_from {
            // C(α, i) > 0.
            pos.add(t0.0, t0.1);
            pos.add(t1.0, t1.1);
        } else {
            let new = TailTerm {
                t0,
                t1,
                ln_mag: ln_add(t0.0, t1.0),
                err: t0.1.max(t1.1) + 2.0 * U,
                negative: (i - floor_alpha).is_multiple_of(2),
            };
            if len < EULER_K + 1 {
                ring[(head + len) % (EULER_K + 1)] = new;
                len += 1;
            } else {
                let oldest = ring[head];
                if oldest.negative {
                    // Tail from the oldest buffered term on: −(L' + [0, gap]).
                    let (ln_lower, ln_gap) = euler_tail(&ring, head);
                    let ln_total = ln_diff(pos.ln(), neg.ln());
                    if ln_gap <= ln_total + SERIES_LN_TOL
                        || (i >= limit && ln_gap <= ln_total + SERIES_LN_LOOSE_TOL)
                    {
                        // Subtracting only the lower bound L' keeps an upper bound.
                        neg.add(ln_lower, 0.0);
                        break;
                    }
                    if i >= limit {
                        return Err(Error::Infeasible {
                            condition: "fractional-order RDP series (MTZ19 §3.3) converges to 1e-6 within the term limit",
                            lhs: libm::exp(ln_gap - ln_total),
                            rhs: 1e-6,
                        });
                    }
                }
                let acc = if oldest.negative { &mut neg } else { &mut pos };
                acc.add(oldest.t0.0, oldest.t0.1);
                acc.add(oldest.t1.0, oldest.t1.1);
                ring[head] = new;
                head = (head + 1) % (EULER_K + 1);
            }
        }
        ln_c.advance(alpha, fi);
        i += 1;
    }

    let (ln_p, ln_n) = (pos.ln(), neg.ln());
    if ln_n >= ln_p || ln_p.is_nan() || ln_n.is_nan() {
        return Err(Error::Infeasible {
            condition: "positive part of the MTZ19 series exceeds its negative part",
            lhs: ln_n,
            rhs: ln_p,
        });
    }
    let r = libm::exp(ln_n - ln_p); // N/P < 1
    // ln(A − 1) and its error: the relative error of P − N is (P·eP + N·eN)/(P − N).
    let ln_s = ln_p + libm::log1p(-r);
    // The split sits within `z0_err` of the true z0, so on a sliver of that width one
    // expansion is used where its ratio is up to e^{z0_err/σ²} ≈ 1 + 1e-15 instead of ≤ 1.
    // For the ≤ 1e6 terms summed, its partial sums stay below 2·Σ|C(α,i)|(1−q)^α ≤
    // (2^{α+2} + 4)(1−q)^α there, and the integrand is below 2^α(1−q)^α·(1 + 1e-9); the
    // sliver's contribution is at most z0_err·max φ_σ·(1−q)^α·2^{α+3}.
    let t = z0 / z;
    let ln_sliver = libm::log(z0_err) - libm::log(z) - 0.5 * t * t - LN_SQRT_2PI
        + alpha * ln_1mq
        + (alpha + 3.0) * core::f64::consts::LN_2;
    let err = (pos.ln_err() + r * neg.ln_err()) / (1.0 - r)
        + 4.0 * U * (ln_s.abs() + 1.0)
        + libm::exp(ln_sliver - ln_s);
    Ok((ln1p_exp_up(ln_s + err), err))
}

/// Upper bound on ε(α) for fractional α from the neighbouring integer orders: ln A_α is
/// convex in α (a cumulant generating function) with ln A_1 = 0, so it lies below the
/// chord between ⌊α⌋ and ⌈α⌉; also at most the Gaussian α/(2z²).
fn chord_rdp(q: f64, z: f64, alpha: f64) -> f64 {
    let k = libm::floor(alpha);
    let lo = if k < 2.0 { 0.0 } else { ln_a_integer(q, z, k as u64) };
    let hi = ln_a_integer(q, z, k as u64 + 1);
    // k + 1 − α and α − k are exact.
    let chord = add_up(mul_up(k + 1.0 - alpha, lo), mul_up(alpha - k, hi));
    div_up(chord, alpha - 1.0).min(gaussian_rdp_up(alpha, 1.0, z))
}

/// ln(eᵃ + eᵇ).
fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY { hi } else { hi + libm::log1p(libm::exp(lo - hi)) }
}

/// Order of the Euler-transform bound on the alternating tail (see [`euler_tail`]).
const EULER_K: usize = 6;

/// One index of the alternating part of the fractional-order series: both terms (ln and
/// error bound), their combined magnitude, and the sign of C(α, i).
#[derive(Clone, Copy, Debug)]
struct TailTerm {
    t0: (f64, f64),
    t1: (f64, f64),
    ln_mag: f64,
    err: f64,
    negative: bool,
}

impl TailTerm {
    const ZERO: Self = Self {
        t0: (f64::NEG_INFINITY, 0.0),
        t1: (f64::NEG_INFINITY, 0.0),
        ln_mag: f64::NEG_INFINITY,
        err: 0.0,
        negative: false,
    };
}

/// Bounds on the alternating tail `T = Σ_{k≥0} (−1)ᵏ a_{n+k}` from its first `EULER_K + 1`
/// magnitudes (`ring`, oldest at `head`), where `(a_{n+m})_m` is a Hausdorff moment
/// sequence, `a_{n+m} = ∫₀¹ tᵐ dμ(t)`. Returns `(ln L, ln G)` with `L ≤ T ≤ L + G`.
///
/// Why a moment sequence: for `i > α`, `|C(α,i)| = Γ(i−α)/(|Γ(−α)| Γ(i+1))` is a Beta
/// integral `∝ ∫ t^{i−α−1}(1−t)^α dt`, and `E[rⁱ 1{…}]` with the integrand ratio
/// `r ∈ [0, 1]` is a moment sequence too; products and sums of moment sequences are
/// moment sequences. Then `T = ∫ dμ/(1 + t)` and `1/(1 + t) = Σ_k (1 − t)ᵏ/2^{k+1}` on
/// `[0, 1]`, so `T = Σ_k D_k/2^{k+1}` with `D_k = ∫(1 − t)ᵏ dμ = Σ_j C(k,j)(−1)ʲ a_{n+j} ≥ 0`
/// (the k-th forward difference, non-increasing in k). Truncating after `k = K` leaves at
/// most `D_K/2^{K+1}`. Every `D_k` is computed with an error bound `s_k` (from the terms'
/// error bounds), and `L` uses `max(D_k − s_k, 0)`.
fn euler_tail(ring: &[TailTerm; EULER_K + 1], head: usize) -> (f64, f64) {
    let ln_a0 = ring[head].ln_mag;
    if ln_a0 == f64::NEG_INFINITY {
        return (f64::NEG_INFINITY, f64::NEG_INFINITY);
    }
    let e0 = ring[head].err;
    let mut d = [0.0f64; EULER_K + 1];
    let mut s = [0.0f64; EULER_K + 1];
    for (j, (dj, sj)) in d.iter_mut().zip(&mut s).enumerate() {
        let t = ring[(head + j) % (EULER_K + 1)];
        let diff = t.ln_mag - ln_a0;
        let b = libm::exp(diff);
        *dj = b;
        *sj = b * (2.0 * (t.err + e0) + 2.0 * U * (1.0 + diff.abs()) + 4.0 * EULER_K as f64 * U);
    }
    let (mut lower, mut gap, mut w) = (0.0, 0.0, 0.5);
    for k in 0..=EULER_K {
        lower += w * (d[0] - s[0]).max(0.0);
        gap += w * 2.0 * s[0];
        if k == EULER_K {
            gap += w * (d[0].max(0.0) + s[0]);
        }
        for j in 0..EULER_K - k {
            d[j] -= d[j + 1];
            s[j] += s[j + 1];
        }
        w *= 0.5;
    }
    (ln_a0 + libm::log(lower), ln_a0 + libm::log(gap))
}

/// ln(eᵃ − eᵇ) for `a > b` (−∞ if `a ≤ b`).
fn ln_diff(a: f64, b: f64) -> f64 {
    if a <= b {
        return f64::NEG_INFINITY;
    }
    a + libm::log1p(-libm::exp(b - a))
}

// ------------------------------------------------------------------ conversion

/// An (ε, δ) guarantee's ε from an RDP curve, and the order that gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpsilonBound {
    /// The smallest ε over the orders (≥ 0, finite, rounded up).
    pub epsilon: f64,
    /// The order α attaining it (the first one on ties).
    pub order: f64,
}

/// An (ε, δ) guarantee's δ from an RDP curve, and the order that gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaBound {
    /// The smallest δ over the orders (in `[0, 1]`, rounded up).
    pub delta: f64,
    /// The order α attaining it (the first one on ties).
    pub order: f64,
}

/// Upper bound on the ε(δ) given by one order (Balle et al. 2020 Thm 21, and the
/// Bretagnolle–Huber bound for tiny `r`); `+∞` if `r = +∞`.
fn epsilon_at(order: f64, r: f64, ln_delta: f64) -> f64 {
    if r == f64::INFINITY {
        return f64::INFINITY;
    }
    // D_α = 0: the output distributions are identical.
    if r == 0.0 {
        return 0.0;
    }
    // TV ≤ √(1 − e^{−KL}) ≤ √(1 − e^{−r}) ≤ δ  ⇒  ε = 0 (compared in log space, the left
    // side rounded up and ln δ down, so that tiny δ cannot underflow).
    if ln_tv_up(r) <= ln_delta - 2.0 * U * ln_delta.abs() {
        return 0.0;
    }
    let ln_order = libm::log(order);
    let l1 = libm::log1p(-1.0 / order);
    let l2 = (ln_delta + ln_order) / (order - 1.0);
    let eps = r + l1 - l2;
    let err = 8.0 * U * (r + l1.abs() + l2.abs() + (ln_delta.abs() + ln_order) / (order - 1.0));
    approx_up(eps + err, 0.0).max(0.0)
}

/// Upper bound on ln δ(ε) given by one order; 0 (δ = 1) if `r = +∞`.
fn ln_delta_at(order: f64, r: f64, epsilon: f64) -> f64 {
    if r == f64::INFINITY {
        return 0.0;
    }
    if r == 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_order = libm::log(order);
    let l1 = libm::log1p(-1.0 / order);
    let am1 = order - 1.0;
    let ln_d = am1 * (r - epsilon + l1) - ln_order;
    let err = 8.0 * U * (am1 * (r + epsilon + l1.abs()) + ln_order + ln_d.abs() + 1.0);
    let rdp_bound = ln_d + err;
    // Bretagnolle–Huber: δ(ε) ≤ δ(0) = TV ≤ √(1 − e^{−r}).
    rdp_bound.min(ln_tv_up(r)).min(0.0)
}

/// Upper bound on ln √(1 − e^{−r}) for `r > 0` finite (the Bretagnolle–Huber bound on the
/// total variation distance when the KL divergence is at most `r`).
fn ln_tv_up(r: f64) -> f64 {
    let tv2 = approx_up(-libm::expm1(-r), 4.0 * U);
    approx_up(0.5 * libm::log(tv2), 4.0 * U)
}

/// The (ε, δ)-DP ε implied by RDP values `rdp[i]` at `orders[i]` (Balle et al. 2020,
/// Thm 21, minimised over the orders; see the module docs).
///
/// ```
/// use dpattn_core::accounting::rdp::epsilon_from_rdp;
/// // A Gaussian with σ = Δ: ε(α) = α/2.
/// let orders = [2.0, 4.0, 8.0];
/// let rdp = [1.0, 2.0, 4.0];
/// let b = epsilon_from_rdp(&orders, &rdp, 1e-5)?;
/// assert_eq!(b.order, 4.0);
/// let direct = 2.0 + (3.0f64 / 4.0).ln() - ((1e-5f64).ln() + 4.0f64.ln()) / 3.0;
/// assert!(b.epsilon >= direct && b.epsilon - direct < 1e-14);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] if the lengths differ; [`Error::OutOfRange`] for an empty or
/// invalid order list, a NaN or negative RDP value, or `δ ∉ (0, 1)`;
/// [`Error::Infeasible`] if every RDP value is `+∞` (no finite ε exists).
pub fn epsilon_from_rdp(orders: &[f64], rdp: &[f64], delta: f64) -> Result<EpsilonBound> {
    if orders.len() != rdp.len() {
        return Err(Error::ShapeMismatch {
            arg: "rdp",
            axis: "len",
            expected: orders.len(),
            got: rdp.len(),
        });
    }
    check_orders(orders)?;
    rdp.iter().try_for_each(|&r| check_rdp_value(r))?;
    check_delta(delta)?;
    let ln_delta = libm::log(delta);
    let mut best = EpsilonBound { epsilon: f64::INFINITY, order: orders[0] };
    for (&a, &r) in orders.iter().zip(rdp) {
        let e = epsilon_at(a, r, ln_delta);
        if e < best.epsilon {
            best = EpsilonBound { epsilon: e, order: a };
        }
    }
    finite_epsilon(best)
}

fn finite_epsilon(best: EpsilonBound) -> Result<EpsilonBound> {
    if best.epsilon.is_finite() {
        Ok(best)
    } else {
        Err(Error::Infeasible {
            condition: "min over orders of epsilon(alpha) < inf (some RDP value is finite)",
            lhs: f64::INFINITY,
            rhs: f64::INFINITY,
        })
    }
}

/// The (ε, δ)-DP δ implied by RDP values `rdp[i]` at `orders[i]` for a given ε: the
/// inverse of [`epsilon_from_rdp`], minimised over the orders, clamped at 1.
///
/// ```
/// use dpattn_core::accounting::rdp::{delta_from_rdp, epsilon_from_rdp};
/// let orders = [2.0, 4.0, 8.0];
/// let rdp = [1.0, 2.0, 4.0];
/// let e = epsilon_from_rdp(&orders, &rdp, 1e-5)?;
/// let d = delta_from_rdp(&orders, &rdp, e.epsilon)?;
/// // Both directions round up: the round trip is exact up to rounding.
/// assert!((d.delta / 1e-5 - 1.0).abs() < 1e-12 && d.order == e.order);
/// // δ(0) = e^{(α−1)(ε(α) + ln(1 − 1/α)) − ln α} at α = 2.
/// let d0 = delta_from_rdp(&orders, &rdp, 0.0)?;
/// assert!((d0.delta - (1.0 + 0.5f64.ln() - 2.0f64.ln()).exp()).abs() < 1e-13);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] if the lengths differ; [`Error::OutOfRange`] for an empty or
/// invalid order list, a NaN or negative RDP value, or ε negative or not finite.
pub fn delta_from_rdp(orders: &[f64], rdp: &[f64], epsilon: f64) -> Result<DeltaBound> {
    if orders.len() != rdp.len() {
        return Err(Error::ShapeMismatch {
            arg: "rdp",
            axis: "len",
            expected: orders.len(),
            got: rdp.len(),
        });
    }
    check_orders(orders)?;
    rdp.iter().try_for_each(|&r| check_rdp_value(r))?;
    check_epsilon(epsilon)?;
    let mut best_ln = f64::INFINITY;
    let mut order = orders[0];
    for (&a, &r) in orders.iter().zip(rdp) {
        let l = ln_delta_at(a, r, epsilon);
        if l < best_ln {
            best_ln = l;
            order = a;
        }
    }
    Ok(DeltaBound { delta: delta_from_ln(best_ln), order })
}

/// exp(`ln_delta`) rounded up, in `[0, 1]`; positive unless `ln_delta = −∞`.
fn delta_from_ln(ln_delta: f64) -> f64 {
    if ln_delta == f64::NEG_INFINITY {
        return 0.0;
    }
    approx_up(libm::exp(ln_delta), 4.0 * U).clamp(2.0 * f64::MIN_POSITIVE, 1.0)
}

/// ε after `steps` uses of `mechanism`, over `orders`, without storing the curve (no
/// allocation; any number of orders).
///
/// ```
/// use dpattn_core::accounting::rdp::{epsilon_after_steps, SampledGaussianRdp, DEFAULT_ORDERS};
/// // Opacus' accountant test: q = 0.04, σ = 1.5, 2250 steps, δ = 1e-5, its orders
/// // (1.1..=10.9 step 0.1, then 12..=63): ε = 7.32911117143.
/// let mut opacus = [0.0; 151];
/// for (x, a) in opacus.iter_mut().enumerate() {
///     *a = if x < 99 { 1.0 + (x + 1) as f64 / 10.0 } else { (x - 99 + 12) as f64 };
/// }
/// let m = SampledGaussianRdp::new(0.04, 1.5)?;
/// let b = epsilon_after_steps(&m, 2250, &opacus, 1e-5)?;
/// assert!((b.epsilon - 7.32911117143).abs() < 1e-9);
/// assert!(epsilon_after_steps(&m, 2250, &DEFAULT_ORDERS, 1e-5)?.epsilon <= b.epsilon);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`epsilon_from_rdp`], plus whatever `mechanism.rdp` returns.
pub fn epsilon_after_steps<M: RdpMechanism + ?Sized>(
    mechanism: &M,
    steps: u64,
    orders: &[f64],
    delta: f64,
) -> Result<EpsilonBound> {
    check_orders(orders)?;
    check_delta(delta)?;
    let ln_delta = libm::log(delta);
    let mut best = EpsilonBound { epsilon: f64::INFINITY, order: orders[0] };
    for &a in orders {
        let r = scaled_rdp(mechanism, a, steps)?;
        let e = epsilon_at(a, r, ln_delta);
        if e < best.epsilon {
            best = EpsilonBound { epsilon: e, order: a };
        }
    }
    finite_epsilon(best)
}

/// `steps · mechanism.rdp(order)`, validated and rounded up (0 steps cost nothing).
fn scaled_rdp<M: RdpMechanism + ?Sized>(mechanism: &M, order: f64, steps: u64) -> Result<f64> {
    let r = mechanism.rdp(order)?;
    check_rdp_value(r)?;
    Ok(if steps == 0 || r == 0.0 { 0.0 } else { mul_up(r, u64_up(steps)) })
}

/// The smallest noise multiplier `z` (to `1e-10` relative, rounded up) such that `steps`
/// steps of the sampled Gaussian mechanism with rate `q` are `(ε, δ)`-DP by the RDP
/// accountant over `orders` (e.g. `&DEFAULT_ORDERS`).
///
/// Bracketing by doubling/halving from `z = 1`, then bisection; the returned `z` is always
/// one whose computed ε (itself an upper bound) is `≤ epsilon`. The search covers
/// `[2⁻⁴⁰, 2⁴⁰]`.
///
/// ```
/// use dpattn_core::accounting::rdp::{
///     calibrate_sampled_gaussian, epsilon_after_steps, SampledGaussianRdp, DEFAULT_ORDERS,
/// };
/// let z = calibrate_sampled_gaussian(0.01, 10_000, 3.0, 1e-5, &DEFAULT_ORDERS)?;
/// let eps = |z| epsilon_after_steps(&SampledGaussianRdp::new(0.01, z)?, 10_000, &DEFAULT_ORDERS, 1e-5);
/// assert!(eps(z)?.epsilon <= 3.0);
/// assert!(eps(z * (1.0 - 1e-9))?.epsilon > 3.0 - 1e-6);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `q ∉ (0, 1]`, `steps = 0`, `ε` not finite and `> 0`,
/// `δ ∉ (0, 1)` or invalid orders; [`Error::Infeasible`] if even `z = 2⁴⁰` does not reach
/// `ε` (the orders cannot certify so small an ε — add larger orders);
/// [`Error::Infeasible`] from [`SampledGaussianRdp::rdp`] if a series fails to converge.
pub fn calibrate_sampled_gaussian(
    sampling_rate: f64,
    steps: u64,
    epsilon: f64,
    delta: f64,
    orders: &[f64],
) -> Result<f64> {
    if !(sampling_rate > 0.0 && sampling_rate <= 1.0) {
        return Err(Error::OutOfRange {
            name: "sampling_rate",
            value: sampling_rate,
            allowed: "(0, 1]",
        });
    }
    if steps == 0 {
        return Err(Error::OutOfRange { name: "steps", value: 0.0, allowed: "[1, inf)" });
    }
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, inf)" });
    }
    check_delta(delta)?;
    check_orders(orders)?;
    let eps_at = |z: f64| -> Result<f64> {
        let m = SampledGaussianRdp::new(sampling_rate, z)?;
        match epsilon_after_steps(&m, steps, orders, delta) {
            Ok(b) => Ok(b.epsilon),
            Err(Error::Infeasible { lhs, .. }) if lhs == f64::INFINITY => Ok(f64::INFINITY),
            Err(e) => Err(e),
        }
    };
    let (mut lo, mut hi);
    if eps_at(1.0)? <= epsilon {
        hi = 1.0;
        lo = 0.5;
        while eps_at(lo)? <= epsilon {
            hi = lo;
            lo *= 0.5;
            if lo < Z_SEARCH_MIN {
                return Ok(hi);
            }
        }
    } else {
        lo = 1.0;
        hi = 2.0;
        loop {
            let e = eps_at(hi)?;
            if e <= epsilon {
                break;
            }
            if hi >= Z_SEARCH_MAX {
                return Err(Error::Infeasible {
                    condition: "epsilon(z = 2^40) <= target epsilon",
                    lhs: e,
                    rhs: epsilon,
                });
            }
            lo = hi;
            hi *= 2.0;
        }
    }
    while hi - lo > CALIBRATION_REL_TOL * hi {
        let mid = lo + 0.5 * (hi - lo);
        if eps_at(mid)? <= epsilon {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

// ------------------------------------------------------------------ curves

/// An RDP curve on `N` fixed orders: `rdp()[i]` bounds ε at `orders()[i]`. No allocation;
/// `N` defaults to the 156 [`DEFAULT_ORDERS`] (`RdpCurve::default()`).
///
/// Composition adds curves order by order ([`compose`](Self::compose),
/// [`compose_curve`](Self::compose_curve)), rounding up; conversion gives (ε, δ)
/// ([`epsilon`](Self::epsilon), [`delta`](Self::delta)).
///
/// ```
/// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve, SampledGaussianRdp};
/// let mut c = RdpCurve::new([2.0, 8.0, 32.0])?;
/// c.compose(&SampledGaussianRdp::new(0.01, 1.0)?, 1000)?;
/// c.compose(&GaussianRdp::new(10.0, 1.0)?, 1)?;
/// let e = c.epsilon(1e-6)?;
/// assert!((e.epsilon - 2.4767).abs() < 1e-4 && e.order == 8.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RdpCurve<const N: usize = DEFAULT_ORDER_COUNT> {
    orders: [f64; N],
    rdp: [f64; N],
}

impl Default for RdpCurve<DEFAULT_ORDER_COUNT> {
    /// The zero curve (no privacy spent) on [`DEFAULT_ORDERS`].
    fn default() -> Self {
        Self { orders: DEFAULT_ORDERS, rdp: [0.0; DEFAULT_ORDER_COUNT] }
    }
}

impl<const N: usize> RdpCurve<N> {
    /// The zero curve on `orders` (each finite in `(1, 1e6]`; `N ≥ 1`).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([1.5, 2.0])?.rdp(), &[0.0, 0.0]);
    /// assert!(RdpCurve::new([1.0]).is_err() && RdpCurve::new([]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `N = 0` or an invalid order.
    pub fn new(orders: [f64; N]) -> Result<Self> {
        check_orders(&orders)?;
        Ok(Self { orders, rdp: [0.0; N] })
    }

    /// A curve from given values (e.g. from another accountant).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let c = RdpCurve::from_values([2.0, 4.0], [0.5, f64::INFINITY])?;
    /// assert_eq!(c.epsilon(0.1)?.order, 2.0);
    /// assert!(RdpCurve::from_values([2.0], [f64::NAN]).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an invalid order or a NaN or negative value.
    pub fn from_values(orders: [f64; N], rdp: [f64; N]) -> Result<Self> {
        check_orders(&orders)?;
        rdp.iter().try_for_each(|&r| check_rdp_value(r))?;
        Ok(Self { orders, rdp })
    }

    /// The curve of `steps` uses of `mechanism` on `orders`.
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve};
    /// let c = RdpCurve::from_mechanism([2.0, 3.0], &GaussianRdp::new(1.0, 1.0)?, 4)?;
    /// assert_eq!(c.rdp(), &[4.0, 6.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new) and [`compose`](Self::compose).
    pub fn from_mechanism<M: RdpMechanism + ?Sized>(
        orders: [f64; N],
        mechanism: &M,
        steps: u64,
    ) -> Result<Self> {
        let mut c = Self::new(orders)?;
        c.compose(mechanism, steps)?;
        Ok(c)
    }

    /// The orders.
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([3.0])?.orders(), &[3.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn orders(&self) -> &[f64; N] {
        &self.orders
    }

    /// The RDP values, one per order (each in `[0, +∞]`).
    ///
    /// ```
    /// # use dpattn_core::accounting::rdp::RdpCurve;
    /// assert_eq!(RdpCurve::new([3.0])?.rdp(), &[0.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn rdp(&self) -> &[f64; N] {
        &self.rdp
    }

    /// Adds `steps` uses of `mechanism` (RDP composition, Mironov 2017 Prop. 1), rounding
    /// up. On error the curve is unchanged.
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{GaussianRdp, RdpCurve};
    /// let mut c = RdpCurve::new([2.0])?;
    /// let g = GaussianRdp::new(1.0, 1.0)?;
    /// c.compose(&g, 3)?;
    /// c.compose(&g, 0)?; // no-op
    /// assert_eq!(c.rdp(), &[3.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Whatever `mechanism.rdp` returns; [`Error::OutOfRange`] if it returns NaN or a
    /// negative value.
    pub fn compose<M: RdpMechanism + ?Sized>(&mut self, mechanism: &M, steps: u64) -> Result<()> {
        let mut add = [0.0; N];
        for (s, &a) in add.iter_mut().zip(&self.orders) {
            *s = scaled_rdp(mechanism, a, steps)?;
        }
        for (r, s) in self.rdp.iter_mut().zip(add) {
            *r = add_up(*r, s);
        }
        Ok(())
    }

    /// Adds another curve on the same orders (order-wise sum, rounded up).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let mut a = RdpCurve::from_values([2.0, 4.0], [1.0, 2.0])?;
    /// a.compose_curve(&RdpCurve::from_values([2.0, 4.0], [0.5, 0.5])?)?;
    /// assert_eq!(a.rdp(), &[1.5, 2.5]);
    /// assert!(a.compose_curve(&RdpCurve::new([2.0, 5.0])?).is_err());
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfRange`] (naming the first differing order of `other`) if the orders
    /// differ; the curve is then unchanged.
    pub fn compose_curve(&mut self, other: &Self) -> Result<()> {
        if let Some((_, &b)) = self.orders.iter().zip(&other.orders).find(|(a, b)| a != b) {
            return Err(Error::OutOfRange {
                name: "other.orders",
                value: b,
                allowed: "the same orders as this curve",
            });
        }
        for (r, &s) in self.rdp.iter_mut().zip(&other.rdp) {
            *r = add_up(*r, s);
        }
        Ok(())
    }

    /// The `times`-fold self-composition (every value multiplied by `times`, rounded up).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::RdpCurve;
    /// let c = RdpCurve::from_values([2.0], [0.25])?;
    /// assert_eq!(c.self_composed(8).rdp(), &[2.0]);
    /// assert_eq!(c.self_composed(0).rdp(), &[0.0]);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    pub fn self_composed(&self, times: u64) -> Self {
        let t = u64_up(times);
        let mut out = *self;
        for r in &mut out.rdp {
            *r = if times == 0 || *r == 0.0 { 0.0 } else { mul_up(*r, t) };
        }
        out
    }

    /// ε for the given δ ∈ (0, 1), minimised over the orders (see [`epsilon_from_rdp`]).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{RdpCurve, SampledGaussianRdp};
    /// let c = RdpCurve::default().self_composed(1); // zero curve
    /// assert_eq!(c.epsilon(1e-5)?.epsilon, 0.0);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`epsilon_from_rdp`].
    pub fn epsilon(&self, delta: f64) -> Result<EpsilonBound> {
        epsilon_from_rdp(&self.orders, &self.rdp, delta)
    }

    /// δ for the given ε ≥ 0, minimised over the orders (see [`delta_from_rdp`]).
    ///
    /// ```
    /// use dpattn_core::accounting::rdp::{RdpCurve, SampledGaussianRdp};
    /// let mut c = RdpCurve::default();
    /// c.compose(&SampledGaussianRdp::new(0.01, 1.1)?, 10_000)?;
    /// let e = c.epsilon(1e-5)?;
    /// assert!((c.delta(e.epsilon)?.delta / 1e-5 - 1.0).abs() < 1e-12);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`delta_from_rdp`].
    pub fn delta(&self, epsilon: f64) -> Result<DeltaBound> {
        delta_from_rdp(&self.orders, &self.rdp, epsilon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-series formula evaluated at integer orders (where the binomial series
    /// terminates) must agree with the exact binomial sum.
    #[test]
    fn integer_and_fractional_formulas_agree_at_integer_orders() {
        for &(q, z) in &[(0.01, 1.1), (0.04, 1.5), (0.3, 0.7), (1e-4, 4.0), (0.9, 2.0)] {
            for alpha in [2u64, 3, 5, 8, 16, 33, 64] {
                let a = ln_a_integer(q, z, alpha);
                let b = ln_a_fractional(q, z, alpha as f64).unwrap().0;
                // The fractional path's certified margin is wider (its P − N cancels).
                let tol = 1e-11 * a.abs();
                assert!((a - b).abs() <= tol, "q={q} z={z} α={alpha}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn directed_rounding_is_never_below() {
        let (a, b) = (0.1, 0.2);
        assert!(add_up(a, b) >= 0.30000000000000004);
        assert_eq!(add_up(1.0, 2.0), 3.0);
        assert_eq!(mul_up(3.0, 0.5), 1.5);
        let p = mul_up(0.1, 0.1);
        assert!(libm::fma(0.1, 0.1, -p) <= 0.0);
        let q = div_up(1.0, 3.0);
        assert!(libm::fma(q, 3.0, -1.0) >= 0.0);
        assert_eq!(u64_up(u64::MAX), 18446744073709551616.0);
        assert!(u64_up((1 << 53) + 1) >= ((1u64 << 53) + 1) as f64);
        assert_eq!(div_up(0.0, 3.0), 0.0);
        assert!(mul_up(1e-200, 1e-200) > 0.0);
    }

    #[test]
    fn log_sum_matches_direct_sum() {
        let mut s = LogSum::EMPTY;
        assert_eq!(s.ln(), f64::NEG_INFINITY);
        for l in [-3.0, 1.0, -800.0, 0.5, f64::NEG_INFINITY] {
            s.add(l, 0.0);
        }
        let direct = libm::log(libm::exp(-3.0) + libm::exp(1.0) + libm::exp(0.5));
        assert!((s.ln() - direct).abs() <= s.ln_err());
        assert!(s.ln_err() < 1e-13);
    }

    #[test]
    fn ln_binomial_recurrence() {
        let mut c = LnBinomial::ONE;
        for k in 0..10 {
            c.advance(10.0, k as f64);
        }
        assert!(c.value().abs() < 1e-14); // C(10, 10) = 1
        c.advance(10.0, 10.0);
        assert_eq!(c.value(), f64::NEG_INFINITY);
        let mut c = LnBinomial::ONE;
        c.advance(2.5, 0.0);
        c.advance(2.5, 1.0);
        c.advance(2.5, 2.0);
        c.advance(2.5, 3.0); // |C(2.5, 4)| = 2.5·1.5·0.5·0.5/24
        assert!((c.value() - libm::log(2.5 * 1.5 * 0.5 * 0.5 / 24.0)).abs() < 1e-15);
    }

    #[test]
    fn ln_expm1_is_smooth_across_the_switch() {
        let a = ln_expm1(36.0);
        let b = ln_expm1(36.0f64.next_up());
        assert!((a - b).abs() < 1e-13);
        assert!((ln_expm1(1e-200) - libm::log(1e-200)).abs() < 1e-12);
    }

    #[test]
    fn binomial_remainder_both_branches() {
        for &(alpha, t) in &[(1.5, -1e-6), (2.5, -0.1), (1.01, -0.4), (40.0, -0.01), (8.5, -0.3)] {
            let (d, rel) = binomial_remainder(alpha, t);
            // Reference: the same quantity from an independent formula, (1+t)^α via powf.
            let direct = libm::pow(1.0 + t, alpha) - 1.0 - alpha * t;
            assert!(d > 0.0 && rel < 1e-12, "α={alpha} t={t}: {d} ({rel})");
            // `direct` cancels badly for small |t|; compare where it is meaningful.
            if alpha * -t > 0.05 {
                assert!((d / direct - 1.0).abs() < 1e-12, "α={alpha} t={t}: {d} vs {direct}");
            } else {
                let lead = 0.5 * alpha * (alpha - 1.0) * t * t;
                assert!((d / lead - 1.0).abs() < 4.0 * alpha * -t, "α={alpha} t={t}");
            }
        }
    }

    /// `euler_tail` brackets known alternating sums of moment sequences.
    #[test]
    fn euler_tail_brackets_known_sums() {
        let ring_of = |a: &dyn Fn(f64) -> f64| {
            let mut ring = [TailTerm::ZERO; EULER_K + 1];
            for (m, t) in ring.iter_mut().enumerate() {
                t.ln_mag = libm::log(a(m as f64));
            }
            ring
        };
        // a_m = 1/(m + 1) = ∫ t^m dt: Σ (−1)^m a_m = ln 2.
        let (lo, gap) = euler_tail(&ring_of(&|m| 1.0 / (m + 1.0)), 0);
        let (lo, gap) = (libm::exp(lo), libm::exp(gap));
        let ln2 = core::f64::consts::LN_2;
        assert!(lo <= ln2 && ln2 <= lo + gap && gap < 2e-3, "{lo} {gap}");
        // a_m = 1/(m + 50)³ (a slowly decaying tail): Σ (−1)^m a_m, summed directly.
        let a = |m: f64| 1.0 / ((m + 50.0) * (m + 50.0) * (m + 50.0));
        let mut exact = 0.0;
        for m in (0..2_000_000).rev() {
            exact += if m % 2 == 0 { a(m as f64) } else { -a(m as f64) };
        }
        let (lo, gap) = euler_tail(&ring_of(&a), 0);
        let (lo, gap) = (libm::exp(lo), libm::exp(gap));
        // D₆ ≈ E[(−ln t)⁶]·a₀ = Γ(9)/(Γ(3)·50⁶)·a₀ ≈ 1.3e-6·a₀, so G ≈ D₆/2⁷ ≈ 1e-8·a₀.
        assert!(lo <= exact && exact <= lo + gap && gap < 2e-8 * exact, "{lo} {gap} {exact}");
        // Rotated ring (head ≠ 0) and a zero tail.
        let mut ring = ring_of(&|m| 0.5f64.powf(m));
        ring.rotate_left(3);
        let (lo, gap) = euler_tail(&ring, EULER_K + 1 - 3);
        assert!((libm::exp(lo) - 2.0 / 3.0).abs() <= libm::exp(gap));
        assert_eq!(euler_tail(&[TailTerm::ZERO; EULER_K + 1], 0).0, f64::NEG_INFINITY);
    }

    /// The chord bound is an upper bound and is used for very large z.
    #[test]
    fn chord_bound() {
        for &(q, z) in &[(0.01, 1.1), (0.5, 0.5), (0.3, 50.0)] {
            let m = SampledGaussianRdp::new(q, z).unwrap();
            for a in [1.3, 2.5, 7.75] {
                let c = chord_rdp(q, z, a);
                let exact = m.rdp(a).unwrap();
                let hi = m.rdp(libm::ceil(a)).unwrap();
                assert!(c >= exact && c <= hi * (1.0 + 1e-15), "{q} {z} {a}");
            }
        }
        // z > 1e4: fractional orders come from the chord (or the Gaussian bound).
        let m = SampledGaussianRdp::new(0.01, 2e4).unwrap();
        assert_eq!(m.rdp(2.5).unwrap(), chord_rdp(0.01, 2e4, 2.5));
    }

    /// At q = ½ the split point is exactly ½ and the series still converge quickly.
    #[test]
    fn split_point_at_one_half() {
        for z in [0.3, 1.0, 10.0] {
            let m = SampledGaussianRdp::new(0.5, z).unwrap();
            for a in [1.01, 1.5, 2.5, 10.3] {
                let r = m.rdp(a).unwrap();
                let hi = m.rdp(libm::ceil(a)).unwrap();
                assert!(r.is_finite() && r <= hi * (1.0 + 1e-12), "z={z} α={a}");
            }
        }
    }
}
