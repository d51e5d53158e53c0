//! The paper's baseline noise levels, for comparison only (`docs/PAPERS.md` §3.4, T3-H,
//! P3-7, P3-12).
//!
//! **Guarantee.** [`mvg_iid_std`] is the per-entry standard deviation of the i.i.d. MVG mechanism
//! (Chanyaswad et al. 2018, paper Theorem 2), which that paper proves `(ε, δ)`-DP; it is computed,
//! not used by the hook. The classical Gaussian mechanism is
//! [`classical_gaussian_sigma`](dpattn_core::calibration::gaussian_mechanism::classical_gaussian_sigma),
//! which refuses `ε ≥ 1` where its proof does not hold (P3-7); the paper's Table 4 used it up to ε
//! = 8, and past ε ≈ 8.42 (δ = 1e-5) it gives *less* noise than the exact minimum.
//!
//! MVG's variance grows like `(nd)^{3/2}·H_r` (P3-12: at `n = 128`, `d = 768`, `ε = 8` its
//! standard deviation is 2.1e7 where aMGM's is 0.6), which is why it stays at chance
//! accuracy in the paper's Table 4.

use dpattn_core::{Delta, Epsilon, Error, Result, Sensitivity};

/// The i.i.d. MVG standard deviation for an `n × d` query with L2 sensitivity `s2` and
/// `γ = sup ‖f‖_F` (`docs/PAPERS.md` §3.4, MVG):
/// `Var = √(nd)·4α²/(−β + √(β² + 8αε))²` with `α = (H_r + H_{r,1/2})γ² + 2H_rγS₂`,
/// `β = 2(nd)^{1/4}H_rS₂ζ(δ)`, `ζ = 2√(−nd·ln δ) − 2 ln δ + nd`, `r = min(n, d)`.
///
/// ```
/// use dpattn_paper::dp_forward::mvg_iid_std;
/// // docs/PAPERS.md T3-H: n = 128, d = 768, γ = 1, δ = 1e-5, ε = 8: 2.13903e7 (S = 1).
/// let s = mvg_iid_std(8.0, 1e-5, 128, 768, 1.0, 1.0)?;
/// assert!((s / 2.13903e7 - 1.0).abs() < 1e-5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for ε not finite and positive, δ ∉ (0, 1), `s2` or `γ` not finite
/// and positive, or a zero dimension.
pub fn mvg_iid_std(
    epsilon: f64,
    delta: f64,
    n: usize,
    d: usize,
    s2: f64,
    gamma: f64,
) -> Result<f64> {
    let eps = Epsilon::new(epsilon)?.get();
    let delta = Delta::new_positive(delta)?.get();
    let s2 = Sensitivity::new(s2)?.get();
    if !(gamma.is_finite() && gamma > 0.0) {
        return Err(Error::OutOfRange { name: "gamma", value: gamma, allowed: "(0, inf), finite" });
    }
    if n == 0 || d == 0 {
        return Err(Error::OutOfRange { name: "n, d", value: 0.0, allowed: ">= 1" });
    }
    let r = n.min(d);
    let (h, h_half) = harmonic(r);
    let nd = n as f64 * d as f64;
    let ln_d = libm::log(delta);
    let zeta = 2.0 * libm::sqrt(-nd * ln_d) - 2.0 * ln_d + nd;
    let alpha = (h + h_half) * gamma * gamma + 2.0 * h * gamma * s2;
    let beta = 2.0 * libm::pow(nd, 0.25) * h * s2 * zeta;
    // −β + √(β² + 8αε) = 8αε / (β + √(β² + 8αε)), without cancellation.
    let root = 8.0 * alpha * eps / (beta + libm::sqrt(beta * beta + 8.0 * alpha * eps));
    let var = libm::sqrt(nd) * 4.0 * alpha * alpha / (root * root);
    Ok(libm::sqrt(var))
}

/// `(H_r, H_{r,1/2}) = (Σ 1/j, Σ 1/√j)` over `j ≤ r`: summed exactly below 10⁶ terms, by the
/// Euler–Maclaurin expansions (`ln r + γ + 1/2r − 1/12r²`, `2√r + ζ(½) + 1/2√r − 1/24r^{3/2}`,
/// error below 1e-24 there) above.
fn harmonic(r: usize) -> (f64, f64) {
    if r <= 1_000_000 {
        let (mut h, mut h_half) = (0.0f64, 0.0f64);
        for j in (1..=r).rev() {
            h += 1.0 / j as f64;
            h_half += 1.0 / libm::sqrt(j as f64);
        }
        return (h, h_half);
    }
    let x = r as f64;
    let sq = libm::sqrt(x);
    let h = libm::log(x) + 0.577_215_664_901_532_9 + 0.5 / x - 1.0 / (12.0 * x * x);
    let h_half = 2.0 * sq - 1.460_354_508_809_586_8 + 0.5 / sq - 1.0 / (24.0 * x * sq);
    (h, h_half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harmonic_expansions_meet_the_sums() {
        let (h, g) = harmonic(1_000_000);
        let x = 1e6f64;
        let h2 = x.ln() + 0.577_215_664_901_532_9 + 0.5 / x - 1.0 / (12.0 * x * x);
        let g2 = 2.0 * x.sqrt() - 1.460_354_508_809_586_8 + 0.5 / x.sqrt();
        assert!((h - h2).abs() < 1e-12 && (g - g2).abs() < 1e-9, "{h} {h2} {g} {g2}");
    }
}
