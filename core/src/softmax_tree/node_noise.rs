//! The noise of one released tree node: in [`NoiseMode::Exact`] (the default) the node is
//! released on a public grid with exact truncated discrete Laplace noise
//! ([`TruncatedLaplaceGrid`]); in [`NoiseMode::UnsafeFloat`] the paper's float
//! [`TruncatedLaplace`] is added to the float sum.
//!
//! **Exact mode (proof).** Every tree of this module stores, per node and moment `q`, the
//! sum of per-row contributions `c_k = fl(⋯fl(w_k·x_k)⋯·x_k)` (`q` products, the order of
//! `TreeArena::add_point`), with `w_k` clamped into `[−R_w, R_w]` and `x_k` into `[0, ρ]`
//! (`ρ = Γ` for the softmax features, whose computed values are clamped too). Rounding is
//! monotone, so `|c_k| ≤ C_q`, `C_q` = `R_w·ρ·…·ρ` in the same order rounded upwards
//! ([`term_bound`]).
//!
//! * *Exact sums.* In exact mode each contribution is rounded (half away from zero) to a
//!   multiple of the public `η_q = 2^k`, `k = ⌈log₂(N·C_q)⌉ − 52`, `N = 2^L` the leaf count,
//!   before it is added: `ĉ_k = η_q·round(c_k/η_q)`, `|ĉ_k| ≤ C′_q = C_q + η_q/2`. A node
//!   holds at most `N` rows (`n ≤ N`), so every partial sum of the leaf chains and of the
//!   children is a multiple of `η_q` of magnitude at most `N·C′_q ≤ 2^53·η_q`: exactly
//!   representable, so every addition is exact and the stored node **is** `f = Σ ĉ_k` over
//!   its rows (computation error `E = 0`). `ĉ_k` is a function of row `k` alone.
//! * *Shifts.* A neighbour (one row changed) moves `f` by at most `Δ = 2C′_q` on a node that
//!   holds the row before and after, and by at most `C′_q` on a node that holds it on one side
//!   only (the row changed bins: the nodes below the split of the two leaf paths). With
//!   `Λ = 2^⌊log₂(Δ/256)⌋` the integer `round(f/Λ)` moves by at most `⌊Δ/Λ⌋ + 1` (full shift)
//!   and `μ = ⌊C′_q/Λ⌋ + 1` (half shift).
//! * *Calibration.* For binned rows the truncated discrete Laplace is calibrated for the
//!   integer sensitivity `D = ⌊(Δ + Λ)/Λ⌋ + 1 ≥ 2μ` (computation error `Λ/2` in
//!   [`TruncatedLaplaceGrid::calibrate`]; `2⌊a⌋ ≤ ⌊2a⌋`), which also covers the full shift;
//!   with one value per leaf ([`DpTree`](super::DpTree): no bin changes) for `⌊Δ/Λ⌋ + 1`.
//!   A full shift then costs the node's `(ε, δ)`
//!   ([`TruncatedDiscreteLaplace`](crate::sampling::TruncatedDiscreteLaplace)), and a half
//!   shift `μ ≤ D/2` costs `(ε/2, δ/2)`: the likelihood ratio is at most `e^{μ/b} ≤ e^{ε/2}`
//!   (`b ≥ D/ε`), and the mass `S` of the `μ` outermost support points satisfies
//!   `S·(1 + q^{−μ}) = ` the mass of the `2μ` outermost points `≤ δ(B, D) ≤ δ`
//!   (`q = e^{−1/b}`, `B ≥ D ≥ 2μ`), so `S < δ/2`.
//!
//! These are exactly the per-node costs of the continuous argument (`docs/PRIVACY.md` §4.2,
//! step 3), so every composition of the paper's budget hierarchy holds unchanged, now for
//! the floats released: each node is `Λ` times an integer, and queries read only released
//! nodes (post-processing). The price: `Δ` grows by `η_q < N·2^{−43}·Λ` (under an eighth of
//! a grid step for `N ≤ 2^40`) and `D·Λ ≤ Δ + 2Λ`, at most 0.8% more noise than the float
//! TLap; the rounding of contributions moves a node by at most (its rows)`·η_q/2`, an
//! accuracy cost no larger than the float sum's own worst-case rounding.
//!
//! The noise of a node around its stored sum is `Λ·Z` plus a rounding of at most `Λ/2`:
//! [`NodeNoise::variance`] is `Λ²·Var(Z)` and [`NodeNoise::deviation_bound`] is
//! `(B + 1/2)·Λ`.

use crate::directed_rounding::{add_up, count_up, mul_up};
use crate::error::{Error, Result};
use crate::grid_release::{GridFormat, NoiseMode, TruncatedLaplaceGrid};
use crate::sampling::TruncatedLaplace;

/// The largest tree depth `L` of an exact-mode node (`2^50` leaves; a build is limited
/// far below it by the exact samplers' `2^40` elements per stream).
pub const MAX_EXACT_DEPTH: u32 = 50;

/// The noise of one node (module docs).
///
/// ```
/// use dpattn_core::{NoiseMode, PrivacyBudget};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::session::Draw;
/// use dpattn_core::softmax_tree::DpTree;
/// let values = [0.5; 16];
/// let key = NoiseKey::generate()?;
/// let tree = DpTree::new_keyed(&values, 1.0, PrivacyBudget::new(1.0, 1e-6)?,
///     Draw { key: &key, stream: 0 }, None, NoiseMode::Exact)?;
/// let noise = tree.node_noise().unwrap();
/// assert_eq!(noise.noise_mode(), NoiseMode::Exact);
/// let lambda = noise.resolution().unwrap(); // 2^⌊log₂((2 + η)/256)⌋
/// assert_eq!(lambda, 2f64.powi(-7));
/// assert_eq!(noise.quantum(), Some(2f64.powi(4 - 52))); // η = 2^(⌈log₂(16·1)⌉ − 52)
/// assert!((2..32).all(|v| (tree.node(v).unwrap() / lambda).fract() == 0.0));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeNoise(Kind);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// The exact release on the node's grid, contributions rounded to `2^quantum`.
    Exact { grid: TruncatedLaplaceGrid, quantum: i32 },
    /// The paper's float `TLap(Δ, ε, δ)` added to the float sum.
    UnsafeFloat(TruncatedLaplace),
}

/// How the rows of a tree reach its leaves (module docs: whether a neighbour can move a
/// row to another leaf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Leaf `j` holds value `j` alone, and neighbours differ at one leaf.
    OnePerLeaf,
    /// Rows are binned by private values: any number per leaf, and a row may change bins.
    Binned,
}

impl NodeNoise {
    /// The exact node noise for contributions bounded by `term_bound` (`C`) in a tree of
    /// depth `L`, at the node budget `(ε, δ)` (module docs).
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a depth above [`MAX_EXACT_DEPTH`], a bound that is not
    /// positive and finite, or the calibration's errors.
    pub(crate) fn exact(
        term_bound: f64,
        depth: u32,
        layout: Layout,
        epsilon: f64,
        delta: f64,
    ) -> Result<Self> {
        if depth > MAX_EXACT_DEPTH {
            return Err(Error::OutOfRange {
                name: "tree depth (exact mode)",
                value: f64::from(depth),
                allowed: "<= 50",
            });
        }
        let c = crate::error::positive_finite("node term bound", term_bound)?;
        // η = 2^k with 2^k ≥ N·C·2^−52.
        let reach = mul_up(count_up(1u64 << depth), c);
        let k = ceil_log2(reach).saturating_sub(52).max(-1073);
        let sens = mul_up(2.0, add_up(c, libm::scalbn(0.5, k))); // 2C′ = 2C + η
        let f64s = GridFormat::F64;
        // Binned rows: a computation error of Λ/2 adds one to D; Λ = 2^⌊log₂(Δ/256)⌋ is
        // TruncatedLaplaceGrid's documented rule (checked below).
        let (lo, hi) = f64s.exponents();
        let lambda_exp = crate::grid_release::floor_log2(sens / 256.0).clamp(lo, hi);
        let slack = match layout {
            Layout::OnePerLeaf => 0.0,
            Layout::Binned => libm::scalbn(0.5, lambda_exp),
        };
        let grid = TruncatedLaplaceGrid::calibrate(sens, slack, epsilon, delta, f64s)?;
        if grid.grid().exponent() != lambda_exp {
            return Err(Error::Unsupported {
                what: "node grid rule (Λ = 2^⌊log₂(Δ/256)⌋)"
            });
        }
        Ok(Self(Kind::Exact { grid, quantum: k }))
    }

    /// The unsafe-float node noise `t`.
    pub(crate) fn unsafe_float(t: TruncatedLaplace) -> Self {
        Self(Kind::UnsafeFloat(t))
    }

    /// Which mode the node is released in.
    pub fn noise_mode(&self) -> NoiseMode {
        match self.0 {
            Kind::Exact { .. } => NoiseMode::Exact,
            Kind::UnsafeFloat(_) => NoiseMode::UnsafeFloat,
        }
    }

    /// The noise variance: `Λ²·Var(Z)` (exact) or the TLap variance (Fact 3.5).
    pub fn variance(&self) -> f64 {
        match &self.0 {
            Kind::Exact { grid, .. } => grid.variance(),
            Kind::UnsafeFloat(t) => t.variance(),
        }
    }

    /// The largest noise magnitude: `B·Λ` (exact) or the TLap bound `B`.
    pub fn bound(&self) -> f64 {
        match &self.0 {
            Kind::Exact { grid, .. } => grid.bound(),
            Kind::UnsafeFloat(t) => t.bound(),
        }
    }

    /// The largest distance between a released node and its stored sum: `(B + 1/2)·Λ`
    /// (noise plus rounding to the grid) or the TLap bound `B`.
    pub fn deviation_bound(&self) -> f64 {
        match &self.0 {
            Kind::Exact { grid, .. } => grid.bound() + grid.resolution() / 2.0,
            Kind::UnsafeFloat(t) => t.bound(),
        }
    }

    /// `Λ`, the grid of the released values (exact mode only).
    pub fn resolution(&self) -> Option<f64> {
        self.as_exact().map(TruncatedLaplaceGrid::resolution)
    }

    /// `η`, the multiple every contribution is rounded to before summation (exact mode
    /// only).
    pub fn quantum(&self) -> Option<f64> {
        self.quantum_exponent().map(|k| libm::scalbn(1.0, k))
    }

    pub(crate) fn quantum_exponent(&self) -> Option<i32> {
        match self.0 {
            Kind::Exact { quantum, .. } => Some(quantum),
            Kind::UnsafeFloat(_) => None,
        }
    }

    /// The exact release, if this is one.
    pub fn as_exact(&self) -> Option<&TruncatedLaplaceGrid> {
        match &self.0 {
            Kind::Exact { grid, .. } => Some(grid),
            Kind::UnsafeFloat(_) => None,
        }
    }

    /// The float TLap, if this is one.
    pub fn as_unsafe_float(&self) -> Option<&TruncatedLaplace> {
        match &self.0 {
            Kind::Exact { .. } => None,
            Kind::UnsafeFloat(t) => Some(t),
        }
    }
}

/// `⌈log₂ x⌉` for a positive finite `x` (exact).
fn ceil_log2(x: f64) -> i32 {
    let k = crate::grid_release::floor_log2(x);
    if libm::scalbn(1.0, k) < x { k + 1 } else { k }
}

/// `η·round(v/η)` for `η = 2^k` (half away from zero; exact).
#[inline]
pub(crate) fn quantize(v: f64, k: i32) -> f64 {
    libm::scalbn(libm::round(libm::scalbn(v, -k)), k)
}

/// `C_q`: `R_w·ρ·…·ρ` (`q` factors `ρ`) multiplied left to right with upward rounding, an
/// upper bound on every computed contribution `fl(⋯fl(w·x)⋯·x)` with `|w| ≤ R_w`,
/// `0 ≤ x ≤ ρ` (rounding to nearest is monotone and below rounding up).
///
/// ```
/// use dpattn_core::softmax_tree::term_bound;
/// assert_eq!(term_bound(2.0, 0.5, 3), 0.25);
/// assert!(term_bound(1.0, 0.1, 2) >= 0.1 * 0.1);
/// ```
pub fn term_bound(weight_bound: f64, range: f64, q: u32) -> f64 {
    (0..q).fold(weight_bound, |c, _| mul_up(c, range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binned_nodes_cover_twice_the_half_shift() {
        // C = 1 (Δ = 2 + η), depth 10: η = 2^(10 − 52), Λ = 2^-7.
        let n = NodeNoise::exact(1.0, 10, Layout::Binned, 0.1, 1e-6).unwrap();
        let g = n.as_exact().unwrap();
        assert_eq!(n.quantum(), Some(2f64.powi(-42)));
        assert_eq!(g.resolution(), 2f64.powi(-7));
        let half = ((1.0 + 2f64.powi(-43)) / g.resolution()).floor() as u64 + 1; // μ = 129
        assert_eq!(half, 129);
        assert!(g.integer_sensitivity() >= 2 * half);
        assert_eq!(g.integer_sensitivity(), 258); // ⌊(2 + η + Λ)/Λ⌋ + 1
        let one = NodeNoise::exact(1.0, 10, Layout::OnePerLeaf, 0.1, 1e-6).unwrap();
        assert_eq!(one.as_exact().unwrap().integer_sensitivity(), 257); // ⌊(2 + η)/Λ⌋ + 1
        assert_eq!(n.deviation_bound(), n.bound() + g.resolution() / 2.0);
        assert!(NodeNoise::exact(1.0, 51, Layout::Binned, 0.1, 1e-6).is_err());
        assert!(NodeNoise::exact(0.0, 5, Layout::Binned, 0.1, 1e-6).is_err());
        // C = 3: N·C = 3·2^10 → ⌈log₂⌉ = 12.
        let three = NodeNoise::exact(3.0, 10, Layout::Binned, 0.1, 1e-6).unwrap();
        assert_eq!(three.quantum(), Some(2f64.powi(12 - 52)));
    }

    #[test]
    fn quantized_sums_are_exact() {
        // N·(C + η/2) ≤ 2^53·η: the largest sum of N rounded contributions is exact.
        let (depth, c) = (20u32, 0.7);
        let k = ceil_log2((1u64 << depth) as f64 * c) - 52;
        let t = quantize(c, k);
        assert!(t <= c + libm::scalbn(0.5, k));
        let mut s = 0.0;
        for _ in 0..(1u32 << depth) {
            s += t;
        }
        assert_eq!(s, t * (1u64 << depth) as f64); // no rounding anywhere
        assert_eq!(quantize(-0.3, -2), -0.25);
        assert_eq!(quantize(0.375, -2), 0.5); // half away from zero
        assert_eq!((ceil_log2(1.0), ceil_log2(1.5), ceil_log2(0.25)), (0, 1, -2));
    }
}
