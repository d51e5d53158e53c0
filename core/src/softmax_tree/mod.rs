//! Noisy segment trees for weighted distances and the softmax kernel (paper 001, "Provable
//! Differentially Private Computation of the Cross-Attention Mechanism"; spec
//! `shared/spec/seed-001.md`), faithful mode.
//!
//! | type | paper | guarantee (neighbours differ in one row) |
//! | --- | --- | --- |
//! | [`TruncatedLaplace`](crate::sampling::TruncatedLaplace) | Def. 3.4, Lemma 3.6 | `(ε, δ)` for sensitivity `Δ`, `δ ≤ 1/2` |
//! | [`DpTree`] | Alg. 2, §B | `(ε, δ)`, values in `[−b, b]` |
//! | [`DpTreeDistance`] | Alg. 4–5, §D | `(ε, δ)`, `x ∈ [0, ρ]`, `w ∈ [−R_w, R_w]` |
//! | [`DpTreeHighDim`] | Alg. 6, §E | `(√2·c·ε + O(c²), δ + δ′)` |
//! | [`TaylorFeatureMap`] | Lemmas G.2–G.6 `[RECON]` | none (public arithmetic) |
//! | [`DpTreeSoftmax`] | Alg. 3, Thm G.7 | `(ε, δ + δ′)`; spends about `2ε/3` (OQ15) |
//! | [`DpTreeSoftmaxAdaptive`] | Alg. 7, Thm G.10 | `(ε, δ + δ′)`; accuracy uniform over queries |
//!
//! DPCrossAttention (Algorithm 1) is [`crate::dp_cross_attention`]; the practical alternative,
//! the moment sketch (extension E1, ~1e5× more accurate at the same privacy), is
//! [`crate::moment_sketch`].
//!
//! **When the faithful mode is practical.** The structures hold `r = C(d+s, s)` features,
//! each with `3(2N − 2)` noisy nodes, per copy: memory, not time, binds
//! ([`estimate_cross_attention_bytes`](crate::dp_cross_attention::estimate_cross_attention_bytes)
//! is available before building, and the softmax, adaptive and cross-attention constructors
//! refuse configurations over their memory limit with [`Error::MemoryLimit`]).
//! Realistically `d ≤ 8`, `s ≤ 5`, `R ≈ 1`; and the noise makes answers useful only for `n ≳ 1e9`
//! (seed-001 AC-12, reproduced by [`crate::dp_cross_attention::estimate_error`]).
//!
//! Every structure is built from a keyed ChaCha20 stream: node noise is addressed by the
//! node's logical index (`docs/RANDOMNESS.md` §5.2), so builds are reproducible and
//! auditable. By default ([`NoiseMode::Exact`](crate::NoiseMode)) every node is an exact
//! multiple of a public grid with exact truncated discrete Laplace noise, so the guarantees
//! above hold for the released floats ([`NodeNoise`] has the proof);
//! [`NoiseMode::UnsafeFloat`](crate::NoiseMode) is the paper's float TLap. The private data and exact sums are never stored; each type's
//! `non_private_exact` constructor builds the noise-free structure for tests and audits and
//! is **not** differentially private.

mod adaptive;
mod budget;
mod build;
mod feature_map;
mod node_noise;
mod segment_tree;
mod softmax;
mod tree_arena;
mod tree_distance;

pub use adaptive::{AdaptiveParams, DpTreeSoftmaxAdaptive};
pub use budget::{
    Accounting, Copies, SoftmaxBudget, copy_count, net_resolution, snap_to_net, softmax_budget,
    uniform_noise_std, worst_case_noise_bound,
};
pub use feature_map::{
    MAX_DEGREE, TaylorFeatureMap, feature_count, gamma_bound, min_degree, taylor_exp,
    taylor_relative_error,
};
pub use node_noise::{MAX_EXACT_DEPTH, NodeNoise, term_bound};
pub use segment_tree::{DpTree, Side};
pub use softmax::{DpTreeSoftmax, QueryPolicy, SoftmaxTreeParams, Temperature};
pub use tree_arena::{bin, leaf_count};
pub use tree_distance::{DistanceParams, DpTreeDistance, DpTreeHighDim, HighDimParams};

pub(crate) use adaptive::median_answer;
pub(crate) use build::{SoftmaxCopy, StructureSpec, build_structures, estimate_bytes};
pub(crate) use softmax::{check_memory, query_features, taylor_max};

use crate::directed_rounding::div_down;
use crate::error::{Error, Result};
use crate::privacy_params::PrivacyBudget;

/// Clamps a private value into `[lo, hi]`, NaN → `0` clamped (seed-001 §12.4): a per-value
/// map, so neighbouring datasets stay neighbouring.
#[inline]
pub(crate) fn clamp_private(v: f64, lo: f64, hi: f64) -> f64 {
    if v.is_nan() { 0.0f64.clamp(lo, hi) } else { v.clamp(lo, hi) }
}

/// `(ε/parts, δ/parts)`, rounded down.
pub(crate) fn split_budget(budget: PrivacyBudget, parts: f64) -> (f64, f64) {
    (div_down(budget.epsilon().get(), parts), div_down(budget.delta().get(), parts))
}

/// A public scalar query must lie in `[0, range]`.
pub(crate) fn check_query_value(arg: &'static str, y: f64, range: f64) -> Result<()> {
    if !y.is_finite() {
        return Err(Error::NonFinite { arg, index: 0 });
    }
    if !(0.0..=range).contains(&y) {
        return Err(Error::OutOfRange { name: arg, value: y, allowed: "[0, range]" });
    }
    Ok(())
}
