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
//!     for `z ∈ [0.5, 4]` (`tests/accounting/rdp.rs`).
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
//!
//! [`log_normal_sf`]: crate::calibration::normal::log_normal_sf

// The public mechanism API, the default orders and input validation live here; the
// sampled-Gaussian series machinery, the (ε, δ) conversion, the noise calibration and
// `RdpCurve` live in the child modules below, and their public items are re-exported.
mod calibrate;
mod conversion;
mod curve;
mod euler_tail;
mod fractional;
mod log_space;
mod round_up;
mod sampled_gaussian;

pub use calibrate::calibrate_sampled_gaussian;
pub use conversion::{
    DeltaBound, EpsilonBound, delta_from_rdp, epsilon_after_steps, epsilon_from_rdp,
};
pub use curve::RdpCurve;
pub use sampled_gaussian::SampledGaussianRdp;

use crate::error::{Error, Result};
use round_up::{div_up, mul_up};

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
