//! The budget hierarchy of paper 001 (`docs/PAPERS.md` §1.9, values T1-J), the copy count `l`
//! (§1.8, values T1-I), the accountant that reports what a configuration actually achieves (P1-15,
//! P1-X2), and the closed-form noise and error estimates (§1.7, P1-AC12 with values T1-K, P1-X5).
//! All of it is arithmetic on public parameters. Privacy-side values are rounded in the safe
//! direction (budgets down, achieved totals up). The estimates use the node noise of the budget's
//! [`noise_mode`](SoftmaxBudget::noise_mode) ([`NodeNoise`]): the exact noise's variance and bound
//! by default, the float TLap's in unsafe-float mode.

use crate::accounting::composition::{
    advanced_composition_step_epsilon, basic_composition, tighter_composition,
};
use crate::directed_rounding::{div_down, ln_inv_up, mul_down, mul_up, sqrt_up};
use crate::error::{Error, Result};
use crate::grid_release::{CONSTANT_TIME_UNSUPPORTED, NoiseMode};
use crate::privacy_params::{Delta, Epsilon, PrivacyBudget};
use crate::sampling::TruncatedLaplace;

use super::node_noise::{Layout, NodeNoise, term_bound};

/// How one DPTreeSoftmax divides its `(ε_S, δ_S, δ′_S)` between its `r` feature structures
/// and the weight-sum structure `D_0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accounting {
    /// Algorithm 3 as printed: `ε_D = c·ε_S/(3√(r ln(2/δ′_S)))`, `δ_D = δ_S/(3r)` per feature
    /// structure, `(ε_S/3, δ_S/3)` for `D_0`. It spends about `2ε_S/3 + O(c²)`
    /// (`docs/PAPERS.md` P1-15).
    /// With relaxed parameters (`c` up to 0.7, large `ε`) it can exceed the nominal budget;
    /// only [`SoftmaxBudget::achieved`] is authoritative.
    #[default]
    Paper,
    /// `[EXT]` `docs/PAPERS.md` P1-X2: the feature structures share `(2ε_S/3, 2δ_S/3)` with `ε_D`
    /// the largest per-structure ε that advanced composition with slack `δ′_S` (or basic
    /// composition, whichever is better) allows; `D_0` keeps `(ε_S/3, δ_S/3)`. `c` is unused. The
    /// total is exactly `(ε_S, δ_S + δ′_S)` with less noise.
    Tight,
}

/// The budgets of one DPTreeSoftmax copy, from the copy's `(ε_S, δ_S, δ′_S)` down to a node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxBudget {
    /// `(ε_S, δ_S)` of the copy.
    pub copy: PrivacyBudget,
    /// `δ′_S`.
    pub delta_prime: f64,
    /// `(ε_D, δ_D)` of each feature DPTreeDistance (`p = 2`).
    pub distance: PrivacyBudget,
    /// The node budget of the feature trees, `(ε_D/(3L), δ_D/(3L))`.
    pub feature_node: PrivacyBudget,
    /// The node budget of `D_0`'s trees, `(ε_S/(9L), δ_S/(9L))`.
    pub ones_node: PrivacyBudget,
    /// The advanced-composition slack the accountant uses over the features (`δ′_S/2` for
    /// [`Accounting::Paper`], `δ′_S` for [`Accounting::Tight`]).
    pub slack: f64,
    /// `r`.
    pub features: usize,
    /// `L`, the depth of every tree.
    pub depth: u32,
    /// How the nodes are released: [`NoiseMode::Exact`] (what [`softmax_budget`] returns)
    /// or the unsafe float path. The budgets do not depend on it; the node noise does.
    pub noise_mode: NoiseMode,
}

/// The relative margin [`Accounting::Tight`] leaves for rounding.
const TIGHT_SHAVE: f64 = 1.0 - 1e-12;

/// The budgets of one DPTreeSoftmax copy with `r` features and depth `L`, for exact-mode
/// nodes (set [`SoftmaxBudget::noise_mode`] for the unsafe float path).
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// use dpattn_core::softmax_tree::{Accounting, softmax_budget};
/// // docs/PAPERS.md T1-J (Config A), l = 1: ε_D = 4.59827e-4, δ_D = 2.38095e-9.
/// let b = softmax_budget(PrivacyBudget::new(0.5, 5e-7)?, 5e-7, 0.09, 70, 10, Accounting::Paper)?;
/// assert!((b.distance.epsilon().get() / 4.59827e-4 - 1.0).abs() < 1e-5);
/// assert!((b.feature_node.epsilon().get() / 1.53276e-5 - 1.0).abs() < 1e-5);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `r = 0`, `L = 0`, `δ′ ∉ (0, 1)`, `c ≤ 0`;
/// [`Error::Infeasible`] when a budget underflows.
pub fn softmax_budget(
    copy: PrivacyBudget,
    delta_prime: f64,
    c: f64,
    features: usize,
    depth: u32,
    accounting: Accounting,
) -> Result<SoftmaxBudget> {
    if features == 0 || depth == 0 {
        return Err(Error::OutOfRange { name: "features, depth", value: 0.0, allowed: ">= 1" });
    }
    if !(delta_prime > 0.0 && delta_prime < 1.0) {
        return Err(Error::OutOfRange {
            name: "delta_prime",
            value: delta_prime,
            allowed: "(0, 1)",
        });
    }
    let (eps, delta) = (copy.epsilon().get(), copy.delta().get());
    let r = features as f64;
    let l3 = 3.0 * f64::from(depth);
    let (distance, slack) = match accounting {
        Accounting::Paper => {
            if !(c > 0.0 && c.is_finite()) {
                return Err(Error::OutOfRange { name: "c", value: c, allowed: "(0, inf)" });
            }
            let denom = mul_up(3.0, sqrt_up(mul_up(r, ln_inv_up(delta_prime / 2.0))));
            let e = div_down(mul_down(c, eps), denom);
            (budget(e, div_down(delta, 3.0 * r))?, delta_prime / 2.0)
        }
        Accounting::Tight => {
            // Shaved by 1e-12 (relative) so that the rounded-up report of what is spent never
            // exceeds (ε_S, δ_S + δ′_S).
            let target = Epsilon::new(mul_down(div_down(2.0 * eps, 3.0), TIGHT_SHAVE))?;
            let e = advanced_composition_step_epsilon(
                target,
                features as u64,
                Delta::new(delta_prime)?,
            )?;
            let dd = div_down(mul_down(div_down(2.0 * delta, 3.0), TIGHT_SHAVE), r);
            (budget(e.get(), dd)?, delta_prime)
        }
    };
    let feature_node =
        budget(div_down(distance.epsilon().get(), l3), div_down(distance.delta().get(), l3))?;
    let shave = if accounting == Accounting::Tight { TIGHT_SHAVE } else { 1.0 };
    let ones_node = budget(
        div_down(mul_down(eps, shave), 3.0 * l3),
        div_down(mul_down(delta, shave), 3.0 * l3),
    )?;
    Ok(SoftmaxBudget {
        copy,
        delta_prime,
        distance,
        feature_node,
        ones_node,
        slack,
        features,
        depth,
        noise_mode: NoiseMode::Exact,
    })
}

fn budget(eps: f64, delta: f64) -> Result<PrivacyBudget> {
    if eps > 0.0 {
        PrivacyBudget::new(eps, delta)
    } else {
        Err(Error::Infeasible { condition: "node epsilon > 0", lhs: eps, rhs: 0.0 })
    }
}

impl SoftmaxBudget {
    /// What one copy achieves: the `r` feature structures under advanced composition with
    /// slack [`slack`](Self::slack) (or basic, if smaller), plus `D_0`, composed basically.
    /// For Config A (`docs/PAPERS.md` T1-J, `l = 1`) the feature part is `ε = 0.021228`.
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved(&self) -> Result<PrivacyBudget> {
        // D_0: 3 trees × L nodes, each at the node budget; the sum is rounded up.
        let nodes = 3.0 * f64::from(self.depth);
        let ones = PrivacyBudget::new(
            mul_up(nodes, self.ones_node.epsilon().get()),
            mul_up(nodes, self.ones_node.delta().get()),
        )?;
        basic_composition(&[self.achieved_features()?, ones])
    }

    /// The feature part of [`achieved`](Self::achieved) alone.
    ///
    /// # Errors
    /// Propagates the accountant's errors.
    pub fn achieved_features(&self) -> Result<PrivacyBudget> {
        tighter_composition(self.distance, self.features as u64, Delta::new(self.slack)?)
    }

    /// The `TLap` of feature tree `q ∈ 0..3` with range `Γ` and weight bound `R_w`:
    /// `TLap(2 R_w Γ^q, ε_D/(3L), δ_D/(3L))`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when the node δ exceeds 1/2.
    pub fn feature_tlap(&self, q: u32, gamma: f64, weight_bound: f64) -> Result<TruncatedLaplace> {
        // ((2R_w)·Γ)·Γ…: the same order as the data's ((w·u)·u)…, so by monotone rounding no
        // computed leaf contribution exceeds half the computed sensitivity.
        let mut sens = 2.0 * weight_bound;
        for _ in 0..q {
            sens *= gamma;
        }
        let n = self.feature_node;
        TruncatedLaplace::new(sens, n.epsilon().get(), n.delta().get())
    }

    /// The `TLap` of `D_0`'s trees: `TLap(2 R_w, ε_S/(9L), δ_S/(9L))`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] when the node δ exceeds 1/2.
    pub fn ones_tlap(&self, weight_bound: f64) -> Result<TruncatedLaplace> {
        let n = self.ones_node;
        TruncatedLaplace::new(2.0 * weight_bound, n.epsilon().get(), n.delta().get())
    }

    /// The node noise of feature tree `q ∈ 0..3` in [`noise_mode`](Self::noise_mode):
    /// [`feature_tlap`](Self::feature_tlap), or the exact release of contributions bounded
    /// by [`term_bound`]`(R_w, Γ, q)` in trees of depth `L` at the node budget.
    ///
    /// ```
    /// use dpattn_core::{NoiseMode, PrivacyBudget};
    /// use dpattn_core::softmax_tree::{Accounting, softmax_budget};
    /// let mut b = softmax_budget(PrivacyBudget::new(0.5, 5e-7)?, 5e-7, 0.09, 70, 10, Accounting::Paper)?;
    /// let exact = b.feature_noise(1, 1.0, 1.0)?;
    /// assert_eq!(exact.resolution(), Some(2f64.powi(-7))); // 2/256
    /// b.noise_mode = NoiseMode::UnsafeFloat;
    /// let float = b.feature_noise(1, 1.0, 1.0)?;
    /// assert_eq!(float.variance(), b.feature_tlap(1, 1.0, 1.0)?.variance());
    /// // The exact noise is at most 1% larger.
    /// assert!((exact.variance() / float.variance()).sqrt() < 1.01);
    /// # Ok::<(), dpattn_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`feature_tlap`](Self::feature_tlap), plus the exact calibration's errors.
    pub fn feature_noise(&self, q: u32, gamma: f64, weight_bound: f64) -> Result<NodeNoise> {
        match self.noise_mode {
            NoiseMode::UnsafeFloat => {
                Ok(NodeNoise::unsafe_float(self.feature_tlap(q, gamma, weight_bound)?))
            }
            NoiseMode::Exact => self.exact_node(term_bound(weight_bound, gamma, q), true),
            NoiseMode::ConstantTime => Err(CONSTANT_TIME_UNSUPPORTED),
        }
    }

    /// The node noise of `D_0`'s trees in [`noise_mode`](Self::noise_mode):
    /// [`ones_tlap`](Self::ones_tlap), or the exact release of contributions bounded by
    /// `R_w` (their bin never changes; the half-shift rule of [`NodeNoise`] is applied all
    /// the same, at the cost of one grid step).
    ///
    /// # Errors
    /// As [`feature_noise`](Self::feature_noise).
    pub fn ones_noise(&self, weight_bound: f64) -> Result<NodeNoise> {
        match self.noise_mode {
            NoiseMode::UnsafeFloat => Ok(NodeNoise::unsafe_float(self.ones_tlap(weight_bound)?)),
            NoiseMode::Exact => self.exact_node(weight_bound, false),
            NoiseMode::ConstantTime => Err(CONSTANT_TIME_UNSUPPORTED),
        }
    }

    fn exact_node(&self, term: f64, feature: bool) -> Result<NodeNoise> {
        let n = if feature { self.feature_node } else { self.ones_node };
        let (eps, delta) = (n.epsilon().get(), n.delta().get());
        NodeNoise::exact(term, self.depth, Layout::Binned, eps, delta)
    }
}

/// How many independent copies `l` the adaptive structure takes the median of
/// (`docs/PAPERS.md` §1.8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Copies {
    /// The paper's `l = ⌈C·r·ln(d R/(ε_s p_f))⌉` (Theorem G.10 with its big-O constant `C`
    /// supplied by the caller), rounded up to odd.
    Paper {
        /// The constant `C > 0`.
        c: f64,
    },
    /// `[FIX]` (`docs/PAPERS.md` P1-14): a union bound over an ℓ∞ net of the query box with
    /// exponent `d` (not `r`): step `2ε₀`, `ε₀ = ε_s/(√d R)`, `|N| = (⌈R/(2ε₀)⌉ + 1)^d`, per-copy
    /// success `1 − 1/k²` (Chebyshev at `kσ`), `l = ⌈ln(|N|/p_f) / (2(1/2 − 1/k²)²)⌉`, rounded up
    /// to odd. `k = 10` is the recommended value.
    NetHoeffding {
        /// The Chebyshev multiple `k > √2`.
        k: f64,
    },
    /// A fixed `l ≥ 1` (even values are rounded up to odd).
    Fixed(u64),
}

/// `l` for the given configuration, always odd (`docs/PAPERS.md` P1-16).
///
/// ```
/// use dpattn_core::softmax_tree::{Copies, copy_count};
/// // docs/PAPERS.md T1-I at R = 1, ε_s = 0.01, p_f = 0.01.
/// assert_eq!(copy_count(Copies::NetHoeffding { k: 10.0 }, 2, 15, 1.0, 0.01, 0.01)?, 29);
/// assert_eq!(copy_count(Copies::Paper { c: 1.0 }, 4, 70, 1.0, 0.01, 0.01)?, 742 + 1);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for bad parameters; [`Error::SizeOverflow`] when `l` is huge.
pub fn copy_count(
    copies: Copies,
    dim: usize,
    features: usize,
    radius: f64,
    eps_s: f64,
    p_fail: f64,
) -> Result<u64> {
    let raw = match copies {
        Copies::Fixed(l) => {
            if l == 0 {
                return Err(Error::OutOfRange { name: "copies", value: 0.0, allowed: ">= 1" });
            }
            l as f64
        }
        Copies::Paper { c } => {
            check_copy_inputs(dim, radius, eps_s, p_fail)?;
            crate::error::positive_finite("C", c)?;
            libm::ceil(c * features as f64 * libm::log(dim as f64 * radius / (eps_s * p_fail)))
        }
        Copies::NetHoeffding { k } => {
            check_copy_inputs(dim, radius, eps_s, p_fail)?;
            if !(k.is_finite() && k > core::f64::consts::SQRT_2) {
                return Err(Error::OutOfRange { name: "k", value: k, allowed: "(sqrt 2, inf)" });
            }
            let ln_net = dim as f64 * libm::log(net_points_per_axis(dim, radius, eps_s));
            let gap = 0.5 - 1.0 / (k * k);
            libm::ceil((ln_net + libm::log(1.0 / p_fail)) / (2.0 * gap * gap))
        }
    };
    if !(raw.is_finite() && raw < 1e15) {
        return Err(Error::SizeOverflow { what: "copy count l" });
    }
    let l = (raw as u64).max(1);
    Ok(if l.is_multiple_of(2) { l + 1 } else { l })
}

fn check_copy_inputs(dim: usize, radius: f64, eps_s: f64, p_fail: f64) -> Result<()> {
    if dim == 0 {
        return Err(Error::OutOfRange { name: "dim", value: 0.0, allowed: ">= 1" });
    }
    crate::error::positive_finite("radius", radius)?;
    for (name, v) in [("eps_s", eps_s), ("p_fail", p_fail)] {
        if !(v > 0.0 && v < 1.0) {
            return Err(Error::OutOfRange { name, value: v, allowed: "(0, 1)" });
        }
    }
    Ok(())
}

/// `ε₀ = ε_s/(√d R)`, the net resolution of [`Copies::NetHoeffding`].
pub fn net_resolution(dim: usize, radius: f64, eps_s: f64) -> f64 {
    eps_s / (libm::sqrt(dim as f64) * radius)
}

/// `⌈R/(2ε₀)⌉ + 1`.
fn net_points_per_axis(dim: usize, radius: f64, eps_s: f64) -> f64 {
    libm::ceil(radius / (2.0 * net_resolution(dim, radius, eps_s))) + 1.0
}

/// Snaps a public query coordinate to the net `{0, 2ε₀, 4ε₀, …} ∩ [0, R] ∪ {R}` (`docs/PAPERS.md`
/// P1-13, "proof mode"): the nearest net point. Post-processing of a public value.
pub fn snap_to_net(y: f64, step: f64, radius: f64) -> f64 {
    let k = libm::round(y / step);
    let g = (k * step).min(radius);
    if (radius - y).abs() < (g - y).abs() { radius } else { g }
}

/// The uniform (over all queries) noise standard deviation of one DPTreeSoftmax answer
/// (`docs/PAPERS.md` §1.7 with `bl → L`, `u_i → Γ`, `‖P(y)‖² → T_s(z_max)`):
/// `√(¼[r(2L V₂ + 4Γ² L V₁ + Γ⁴ L V₀) + T_s² L V_ones])`, the `V` the node variances of
/// the budget's mode ([`SoftmaxBudget::feature_noise`]).
///
/// # Errors
/// [`Error::OutOfRange`] when a node budget is invalid for the node noise.
pub fn uniform_noise_std(
    budget: &SoftmaxBudget,
    depth: u32,
    gamma: f64,
    taylor_max: f64,
    weight_bound: f64,
) -> Result<f64> {
    let l = f64::from(depth);
    let v = |q| budget.feature_noise(q, gamma, weight_bound).map(|t| t.variance());
    let (v0, v1, v2) = (v(0)?, v(1)?, v(2)?);
    let vo = budget.ones_noise(weight_bound)?.variance();
    let g2 = gamma * gamma;
    let r = budget.features as f64;
    let var = 0.25
        * (r * (2.0 * l * v2 + 4.0 * g2 * l * v1 + g2 * g2 * l * v0)
            + taylor_max * taylor_max * l * vo);
    Ok(libm::sqrt(var))
}

/// `[EXT]` `docs/PAPERS.md` P1-X5: the deterministic bound on the noise of one DPTreeSoftmax copy's
/// answer, for **every** query at once (the node noise is bounded):
/// `½[r(2L B₂ + 2Γ L B₁ + Γ² L B₀) + T_s L B_ones]`, `B` each node's largest distance from its
/// computed sum ([`NodeNoise::deviation_bound`]: the noise bound, plus `Λ/2` of rounding in exact
/// mode).
///
/// # Errors
/// [`Error::OutOfRange`] when a node budget is invalid for the node noise.
pub fn worst_case_noise_bound(
    budget: &SoftmaxBudget,
    depth: u32,
    gamma: f64,
    taylor_max: f64,
    weight_bound: f64,
) -> Result<f64> {
    let l = f64::from(depth);
    let b = |q| budget.feature_noise(q, gamma, weight_bound).map(|t| t.deviation_bound());
    let (b0, b1, b2) = (b(0)?, b(1)?, b(2)?);
    let bo = budget.ones_noise(weight_bound)?.deviation_bound();
    let r = budget.features as f64;
    Ok(0.5
        * (r * (2.0 * l * b2 + 2.0 * gamma * l * b1 + gamma * gamma * l * b0)
            + taylor_max * l * bo))
}
