//! Log-space arithmetic for the sampled-Gaussian series, with error bounds.
//!
//! [`LogSum`] accumulates `Σ exp(lᵢ)` scaled by its largest term (Neumaier-compensated)
//! together with a first-order bound on the error of `ln Σ`, given a bound on each `lᵢ`;
//! [`LnBinomial`] runs `ln |C(α, k)|` along the ratio recurrence with its own error bound.
//! The remaining helpers are `ln(eˣ − 1)`, `ln(1 + eˢ)` (rounded up), `ln(eᵃ + eᵇ)` and
//! `ln(eᵃ − eᵇ)`, each written to avoid overflow and cancellation. The error bounds are
//! what let [`SampledGaussianRdp`](super::SampledGaussianRdp) report an upper bound (see
//! the [`rdp`](super) module docs, "Floating-point error").

use super::round_up::{U, approx_up};

/// Σ exp(lᵢ) in log space (scaled by the largest term, Neumaier-compensated), with a
/// running bound on the error of ln of the sum.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogSum {
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
    pub(super) const EMPTY: Self =
        Self { max: f64::NEG_INFINITY, sum: 0.0, comp: 0.0, err: 0.0, count: 0 };

    /// Neumaier step: `sum + comp += w` (`w ≥ 0`).
    pub(super) fn push(&mut self, w: f64) {
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
    pub(super) fn add(&mut self, l: f64, e: f64) {
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
    pub(super) fn ln(&self) -> f64 {
        if self.count == 0 {
            return f64::NEG_INFINITY;
        }
        self.max + libm::log(self.sum + self.comp)
    }

    /// A bound on |computed `ln()` − exact ln Σ exp(lᵢ)|: the weighted term and weight
    /// errors, compensated summation (≤ (2u + n·u²) relative, all terms positive), and the
    /// final logarithm and addition.
    pub(super) fn ln_err(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let s = self.sum + self.comp;
        self.err / s + (4.0 + self.count as f64 * U) * U + 2.0 * U * (self.max.abs() + 1.0)
    }
}

/// ln(eˣ − 1) for `x > 0` (`x` finite), without overflow or cancellation.
pub(crate) fn ln_expm1(x: f64) -> f64 {
    if x > 36.0 { x + libm::log1p(-libm::exp(-x)) } else { libm::log(libm::expm1(x)) }
}

/// Neumaier-compensated running sum of ln C(α, k) over the ratio recurrence
/// `C(α, k+1) = C(α, k)·(α − k)/(k + 1)`, with a bound on its error.
#[derive(Clone, Copy, Debug)]
pub(super) struct LnBinomial {
    sum: f64,
    comp: f64,
    /// Σ (1 + |ln ratio|): the error of the sum is ≤ 2u·abs + 2u·|sum|.
    abs: f64,
    /// The coefficient became exactly zero (integer α, k > α).
    zero: bool,
}

impl LnBinomial {
    pub(super) const ONE: Self = Self { sum: 0.0, comp: 0.0, abs: 0.0, zero: false };

    /// ln |C(α, k)| (−∞ once the coefficient is zero).
    pub(super) fn value(&self) -> f64 {
        if self.zero { f64::NEG_INFINITY } else { self.sum + self.comp }
    }

    /// Error bound of `value()`.
    pub(super) fn err(&self) -> f64 {
        2.0 * U * (self.abs + self.value().abs() + 1.0)
    }

    /// Advances from k to k + 1.
    pub(super) fn advance(&mut self, alpha: f64, k: f64) {
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

/// ln(1 + eˢ) rounded up (no overflow for large `s`).
pub(super) fn ln1p_exp_up(s: f64) -> f64 {
    let v = if s > 36.0 { s + libm::log1p(libm::exp(-s)) } else { libm::log1p(libm::exp(s)) };
    approx_up(v, 4.0 * U)
}

/// ln(eᵃ + eᵇ).
pub(super) fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY { hi } else { hi + libm::log1p(libm::exp(lo - hi)) }
}

/// ln(eᵃ − eᵇ) for `a > b` (−∞ if `a ≤ b`).
pub(super) fn ln_diff(a: f64, b: f64) -> f64 {
    if a <= b {
        return f64::NEG_INFINITY;
    }
    a + libm::log1p(-libm::exp(b - a))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
