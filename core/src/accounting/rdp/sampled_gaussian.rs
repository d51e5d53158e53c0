//! The sampled Gaussian mechanism (one DP-SGD step) and its RDP at integer orders.
//!
//! [`SampledGaussianRdp::rdp`] dispatches on the order: the binomial sum of `A_α − 1`
//! ([`ln_a_integer`], MTZ19 §3.3) at integer orders, the two series ([`ln_a_fractional`])
//! at fractional ones, and the log-convexity chord between the neighbouring integer orders
//! ([`chord_rdp`]) where the series cannot certify enough accuracy; `q ∈ {0, 1}` and
//! extreme `z` reduce to closed forms. Every value is an upper bound (see the [`rdp`](super)
//! module docs).

use super::fractional::ln_a_fractional;
use super::log_space::{LnBinomial, LogSum, ln_expm1, ln1p_exp_up};
use super::round_up::{U, add_up, div_up, mul_up};
use super::{RdpMechanism, check_order, gaussian_rdp_up};
use crate::error::{Error, Result};

/// Outside `[Z_EXACT_MIN, Z_EXACT_MAX]` the subsampled Gaussian uses the Gaussian bound.
const Z_EXACT_MIN: f64 = 1e-100;
const Z_EXACT_MAX: f64 = 1e100;
/// Above this noise multiplier fractional orders use [`chord_rdp`] (the two series lose
/// about 2·log10(z) digits to cancellation).
const Z_SERIES_MAX: f64 = 1e4;
/// If the two series cannot certify this relative accuracy, also try [`chord_rdp`].
const CHORD_FROM_REL_ERR: f64 = 1e-9;

/// The sampled Gaussian mechanism (one DP-SGD step): Poisson subsampling with rate `q`,
/// then the Gaussian mechanism with noise multiplier `z = σ/Δ`; add/remove neighbours.
/// ε(α) = ln(A_α)/(α − 1) by MTZ19 §3 (see the [module docs](super)).
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
    /// see the [module docs](super)).
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
pub(super) fn ln_a_integer(q: f64, z: f64, alpha: u64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
