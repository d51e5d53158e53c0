//! The polynomial-kernel feature map `P(x)` (`docs/PAPERS.md` §1.6, paper Lemmas G.2–G.6
//! `[RECON]`): truncated-Taylor monomials with a symmetric factorisation, so that
//! `P(x)·P(y) = T_s(τ xᵀy) = Σ_{t ≤ s} (τ xᵀy)^t / t!` exactly (multinomial theorem).
//!
//! * Feature `a` (a multi-index with `|a| ≤ s`) is `P_a(x) = τ^{|a|/2} x^a / √(a!)`.
//! * There are `r = C(d + s, s)` features (the paper's `C(2s + 2d, 2s)` is only a bound).
//! * Canonical order: by degree `t = 0..s`, then lexicographically in the sorted index tuple
//!   `l_1 ≤ … ≤ l_t` (Python's `combinations_with_replacement` order).
//! * For `x ∈ [0, R]^d` every feature lies in `[0, Γ]`, `Γ = max(1, max_{j ≤ s} R_eff^j/√(j!))`
//!   with `R_eff = √(τ d)·R` (Definition G.3 with `R_eff = R` at the paper's `τ = 1/d`).
//!
//! Evaluation needs no allocation and no table: the tuples are walked in order, keeping the
//! prefix products of the current tuple, so each feature costs O(1) amortised multiplications.
//! This module is pure arithmetic on public parameters and carries no privacy guarantee.

use crate::error::{Error, Result};

/// The largest supported degree `s`.
pub const MAX_DEGREE: u32 = 64;

/// `r = C(d + s, s)`, the number of Taylor features of degree ≤ `s` in `d` variables.
///
/// ```
/// use dpattn_core::softmax_tree::feature_count;
/// assert_eq!(feature_count(4, 4)?, 70);   // docs/PAPERS.md T1-G
/// assert_eq!(feature_count(64, 4)?, 814_385);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::SizeOverflow`] when `r` does not fit in `usize`.
pub fn feature_count(dim: usize, degree: u32) -> Result<usize> {
    // C(d + s, s) = Π_{t=1..s} (d + t) / t; each partial product is an exact binomial.
    let mut r: u128 = 1;
    for t in 1..=u128::from(degree) {
        r = r
            .checked_mul(dim as u128 + t)
            .ok_or(Error::SizeOverflow { what: "feature count C(d+s, s)" })?
            / t;
    }
    usize::try_from(r).map_err(|_| Error::SizeOverflow { what: "feature count C(d+s, s)" })
}

/// The degree-`s` Taylor polynomial of `exp`, `T_s(z) = Σ_{t ≤ s} z^t / t!`.
///
/// ```
/// use dpattn_core::softmax_tree::taylor_exp;
/// assert_eq!(taylor_exp(2.0, 2), 5.0);
/// ```
pub fn taylor_exp(z: f64, degree: u32) -> f64 {
    let (mut term, mut sum) = (1.0, 1.0);
    for t in 1..=degree {
        term *= z / f64::from(t);
        sum += term;
    }
    sum
}

/// The worst-case relative error `(e^z − T_s(z)) / T_s(z)` of the degree-`s` Taylor kernel
/// for `z ∈ [0, z_max]`, which equals `Pr[Pois(z_max) > s] / Pr[Pois(z_max) ≤ s]`
/// (`docs/PAPERS.md` §1.6). The remainder is summed directly, so tiny errors keep their digits.
///
/// ```
/// use dpattn_core::softmax_tree::taylor_relative_error;
/// assert!((taylor_relative_error(1.0, 3) - 1.936e-2).abs() < 1e-5);
/// ```
pub fn taylor_relative_error(z_max: f64, degree: u32) -> f64 {
    let mut term = 1.0;
    let mut head = 1.0;
    for t in 1..=degree {
        term *= z_max / f64::from(t);
        head += term;
    }
    let mut tail = 0.0;
    let mut t = degree + 1;
    loop {
        term *= z_max / f64::from(t);
        tail += term;
        if term <= tail * 1e-18 || term == 0.0 || t > degree + 10_000 {
            break;
        }
        t += 1;
    }
    tail / head
}

/// The smallest degree `s` whose Taylor kernel has worst-case relative error `≤ ε_s` on
/// `[0, z_max]` (`docs/PAPERS.md` §1.6 and T1-E; `z_max = τ d R²`, which is `R²` at the paper's
/// `τ = 1/d`).
///
/// ```
/// use dpattn_core::softmax_tree::min_degree;
/// assert_eq!(min_degree(1.0, 0.01)?, 4);   // the s_min table, R = 1
/// assert_eq!(min_degree(4.0, 1e-6)?, 17);  // R = 2
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `z_max` not in `[0, 100]` or `ε_s` not in `(0, 1)`;
/// [`Error::Infeasible`] when no degree up to [`MAX_DEGREE`] suffices.
pub fn min_degree(z_max: f64, eps_s: f64) -> Result<u32> {
    if !(0.0..=100.0).contains(&z_max) {
        return Err(Error::OutOfRange { name: "z_max", value: z_max, allowed: "[0, 100]" });
    }
    if !(eps_s > 0.0 && eps_s < 1.0) {
        return Err(Error::OutOfRange { name: "eps_s", value: eps_s, allowed: "(0, 1)" });
    }
    (0..=MAX_DEGREE).find(|&s| taylor_relative_error(z_max, s) <= eps_s).ok_or(Error::Infeasible {
        condition: "Taylor degree <= MAX_DEGREE reaches eps_s",
        lhs: taylor_relative_error(z_max, MAX_DEGREE),
        rhs: eps_s,
    })
}

/// The paper's `Γ_{R,s} = max_{j ∈ [s]} R^j / √(j!)` (Definition G.3), without the `max(1, ·)`
/// that [`TaylorFeatureMap::range`] adds for the constant feature.
///
/// ```
/// use dpattn_core::softmax_tree::gamma_bound;
/// assert!((gamma_bound(2.0, 3) - 8.0 / 6f64.sqrt()).abs() < 1e-12);
/// assert!((gamma_bound(3.0, 8) - 32.67).abs() < 0.01);
/// ```
pub fn gamma_bound(radius: f64, degree: u32) -> f64 {
    let (mut term, mut best) = (1.0f64, 0.0f64);
    for j in 1..=degree {
        term *= radius / libm::sqrt(f64::from(j));
        best = best.max(term);
    }
    best
}

/// The Taylor feature map for `d` inputs, degree `s` and temperature `τ` (the kernel is
/// `exp(τ xᵀy)`; the paper's `τ` is `1/d`, Definition 1.1).
///
/// ```
/// use dpattn_core::softmax_tree::TaylorFeatureMap;
/// // docs/PAPERS.md T1-H, first example: d = 2, s = 2, τ = 1/2.
/// let map = TaylorFeatureMap::new(2, 2, 0.5)?;
/// let (mut px, mut py) = ([0.0; 6], [0.0; 6]);
/// map.eval_into(&[1.0, 2.0], &mut px)?;
/// map.eval_into(&[2.0, 1.0], &mut py)?;
/// let dot: f64 = px.iter().zip(&py).map(|(a, b)| a * b).sum();
/// assert!((dot - 5.0).abs() < 1e-12); // T_2(2) = 1 + 2 + 2
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaylorFeatureMap {
    dim: usize,
    degree: u32,
    tau: f64,
    features: usize,
}

impl TaylorFeatureMap {
    /// A map for `dim ≥ 1` inputs, degree `s ≤ MAX_DEGREE`, temperature `τ ∈ (0, ∞)`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a bad parameter; [`Error::SizeOverflow`] when `r` does not
    /// fit in `usize`.
    pub fn new(dim: usize, degree: u32, tau: f64) -> Result<Self> {
        if dim == 0 {
            return Err(Error::OutOfRange { name: "dim", value: 0.0, allowed: ">= 1" });
        }
        if degree > MAX_DEGREE {
            return Err(Error::OutOfRange {
                name: "degree",
                value: f64::from(degree),
                allowed: "[0, 64]",
            });
        }
        if !(tau.is_finite() && tau > 0.0) {
            return Err(Error::OutOfRange { name: "tau", value: tau, allowed: "(0, inf)" });
        }
        Ok(Self { dim, degree, tau, features: feature_count(dim, degree)? })
    }

    /// The number of inputs `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The degree `s`.
    pub fn degree(&self) -> u32 {
        self.degree
    }

    /// The temperature `τ`.
    pub fn tau(&self) -> f64 {
        self.tau
    }

    /// The number of features `r = C(d + s, s)`.
    pub fn features(&self) -> usize {
        self.features
    }

    /// `z_max = τ d R²`, the largest kernel argument `τ xᵀy` for `x, y ∈ [0, R]^d`.
    pub fn z_max(&self, radius: f64) -> f64 {
        self.tau * self.dim as f64 * radius * radius
    }

    /// The value range `[0, Γ]` of every feature for inputs in `[0, R]^d`:
    /// `Γ = max(1, max_{j ≤ s} R_eff^j / √(j!))`, `R_eff = √(τ d)·R`.
    pub fn range(&self, radius: f64) -> f64 {
        gamma_bound(libm::sqrt(self.z_max(radius)), self.degree).max(1.0)
    }

    /// `T_s(τ xᵀy)`, which equals `P(x)·P(y)`.
    pub fn kernel(&self, x: &[f64], y: &[f64]) -> f64 {
        let dot: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
        taylor_exp(self.tau * dot, self.degree)
    }

    /// Writes `P(x)` into `out` (length [`features`](Self::features)) in the canonical order.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `x` or `out` has the wrong length.
    pub fn eval_into(&self, x: &[f64], out: &mut [f64]) -> Result<()> {
        if x.len() != self.dim {
            return Err(Error::ShapeMismatch {
                arg: "x",
                axis: "len",
                expected: self.dim,
                got: x.len(),
            });
        }
        let sqrt_tau = libm::sqrt(self.tau);
        self.walk(out, |l| sqrt_tau * x[l])
    }

    /// Writes the per-feature bounds `β_a = (√τ R)^{|a|} / √(a!)` into `out`: `P_a(x) ≤ β_a`
    /// for `x ∈ [0, R]^d` (`docs/PAPERS.md` §1.6, used by extension P1-X3).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `out` has the wrong length.
    pub fn feature_bounds_into(&self, radius: f64, out: &mut [f64]) -> Result<()> {
        let f = libm::sqrt(self.tau) * radius;
        self.walk(out, |_| f)
    }

    /// Walks the tuples in canonical order; `factor(l)` is the factor of input index `l`.
    fn walk(&self, out: &mut [f64], factor: impl Fn(usize) -> f64) -> Result<()> {
        if out.len() != self.features {
            return Err(Error::ShapeMismatch {
                arg: "out",
                axis: "len",
                expected: self.features,
                got: out.len(),
            });
        }
        const M: usize = MAX_DEGREE as usize + 1;
        let s = self.degree as usize;
        let mut inv_sqrt = [1.0f64; M];
        for (m, v) in inv_sqrt.iter_mut().enumerate().skip(1).take(s) {
            *v = 1.0 / libm::sqrt(m as f64);
        }
        let mut idx = [0usize; M];
        let mut mult = [0usize; M];
        let mut prefix = [1.0f64; M + 1];
        out[0] = 1.0;
        let mut pos = 1;
        for t in 1..=s {
            idx[..t].fill(0);
            let mut from = 0;
            loop {
                for m in from..t {
                    mult[m] = if m > 0 && idx[m - 1] == idx[m] { mult[m - 1] + 1 } else { 1 };
                    prefix[m + 1] = prefix[m] * factor(idx[m]) * inv_sqrt[mult[m]];
                }
                out[pos] = prefix[t];
                pos += 1;
                // The next tuple: bump the rightmost index below d − 1, copy it to the right.
                match (0..t).rev().find(|&k| idx[k] + 1 < self.dim) {
                    Some(k) => {
                        let v = idx[k] + 1;
                        idx[k..t].fill(v);
                        from = k;
                    }
                    None => break,
                }
            }
        }
        debug_assert_eq!(pos, self.features);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_example_of_table_t1_h() {
        let map = TaylorFeatureMap::new(3, 2, 1.0 / 3.0).unwrap();
        let mut p = [0.0; 10];
        map.eval_into(&[0.5, 1.0, 0.25], &mut p).unwrap();
        let want = [
            1.0, 0.288675, 0.57735, 0.144338, 0.058926, 0.166667, 0.041667, 0.235702, 0.083333,
            0.014731,
        ];
        for (a, b) in p.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
    }

    #[test]
    fn bounds_of_example_1() {
        let map = TaylorFeatureMap::new(2, 2, 0.5).unwrap();
        let mut b = [0.0; 6];
        map.feature_bounds_into(2.0, &mut b).unwrap();
        let s2 = core::f64::consts::SQRT_2;
        for (a, w) in b.iter().zip([1.0, s2, s2, s2, 2.0, s2]) {
            assert!((a - w).abs() < 1e-12, "{b:?}");
        }
        assert!((map.range(2.0) - 2.0 * s2).abs() < 1e-12);
    }
}
