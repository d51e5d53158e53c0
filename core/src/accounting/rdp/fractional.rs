//! `ln A_α` of the sampled Gaussian mechanism at fractional orders: MTZ19 §3.3's two
//! series, split at `z₀ = z²·ln(1/q − 1) + ½`, rearranged to sum `A_α − 1`.
//!
//! **Guarantee.** [`ln_a_fractional`] returns an upper bound on `ln A_α` and the relative
//! error bound it certified for `A_α − 1`: every term carries a bound on the error of its
//! logarithm, the alternating tail is bracketed by [`euler_tail`] and only its lower bound
//! is subtracted, and the rounding of the split point is bounded and added. The formula,
//! the stopping rule and the error accounting are described in the [`rdp`](super) module
//! docs (Mironov, Talwar, Zhang 2019, arXiv:1908.10530, §3.3).

use super::euler_tail::{EULER_K, TailTerm, euler_tail};
use super::log_space::{LnBinomial, LogSum, ln_add, ln_diff, ln1p_exp_up};
use super::round_up::U;
use crate::calibration::normal::log_normal_sf;
use crate::error::{Error, Result};

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
pub(super) fn ln_a_fractional(q: f64, z: f64, alpha: f64) -> Result<(f64, f64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::rdp::SampledGaussianRdp;
    use crate::accounting::rdp::sampled_gaussian::ln_a_integer;

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
