//! A certified bracket for the alternating tail of the fractional-order series.
//!
//! From `⌊α⌋ + 2` on, both of MTZ19's series alternate in sign and their magnitudes form
//! a Hausdorff moment sequence; [`euler_tail`] bounds the rest of such a series from its
//! next `EULER_K + 1` terms ([`EULER_K`] = 6) by an Euler transform, returning a lower
//! bound `L` and a gap `G` with `L ≤ tail ≤ L + G` (the derivation is on [`euler_tail`]).
//! Only `L` is ever subtracted, so the sum stays an upper bound; `G` decides when the
//! series may stop.

use super::round_up::U;

/// Order of the Euler-transform bound on the alternating tail (see [`euler_tail`]).
pub(super) const EULER_K: usize = 6;

/// One index of the alternating part of the fractional-order series: both terms (ln and
/// error bound), their combined magnitude, and the sign of C(α, i).
#[derive(Clone, Copy, Debug)]
pub(super) struct TailTerm {
    pub(super) t0: (f64, f64),
    pub(super) t1: (f64, f64),
    pub(super) ln_mag: f64,
    pub(super) err: f64,
    pub(super) negative: bool,
}

impl TailTerm {
    pub(super) const ZERO: Self = Self {
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
pub(super) fn euler_tail(ring: &[TailTerm; EULER_K + 1], head: usize) -> (f64, f64) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
