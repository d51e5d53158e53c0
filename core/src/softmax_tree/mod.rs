//! Noisy segment trees for weighted distances and the softmax kernel (paper 001, "Provable
//! Differentially Private Computation of the Cross-Attention Mechanism"; summarised, with
//! its errata, in `docs/PAPERS.md` §1), faithful mode.
//!
//! | type | paper | guarantee (neighbours differ in one row) |
//! | --- | --- | --- |
//! | [`TruncatedLaplace`](crate::sampling::TruncatedLaplace) | Def. 3.4, Lemma 3.6 | `(ε, δ)` for sensitivity `Δ`, `δ ≤ 1/2` |
//! | [`DpTree`] | Alg. 2, App. B | `(ε, δ)`, values in `[−b, b]` |
//! | [`DpTreeDistance`] | Alg. 4–5, App. D | `(ε, δ)`, `x ∈ [0, ρ]`, `w ∈ [−R_w, R_w]` |
//! | [`DpTreeHighDim`] | Alg. 6, App. E | `(√2·c·ε + O(c²), δ + δ′)` |
//! | [`TaylorFeatureMap`] | Lemmas G.2–G.6 `[RECON]` | none (public arithmetic) |
//! | [`DpTreeSoftmax`] | Alg. 3, Thm G.7 | `(ε, δ + δ′)`; spends about `2ε/3` (P1-15) |
//! | [`DpTreeSoftmaxAdaptive`] | Alg. 7, Thm G.10 | `(ε, δ + δ′)`; accuracy uniform over queries |
//!
//! DPCrossAttention (Algorithm 1) is [`crate::softmax_tree_cross_attention`]; the practical
//! alternative, the moment sketch (extension P1-X1, ~1e5× more accurate at the same privacy), is
//! [`crate::moment_sketch`].
//!
//! **When the faithful mode is practical.** The structures hold `r = C(d+s, s)` features, each with
//! `3(2N − 2)` noisy nodes, per copy: memory, not time, binds
//! ([`estimate_cross_attention_bytes`](crate::softmax_tree_cross_attention::estimate_cross_attention_bytes)
//! is available before building, and the softmax, adaptive and cross-attention constructors refuse
//! configurations over their memory limit with [`Error::MemoryLimit`]). Realistically `d ≤ 8`,
//! `s ≤ 5`, `R ≈ 1`; and the noise makes answers useful only for `n ≳ 1e9` (`docs/PAPERS.md` T1-K,
//! reproduced by [`crate::softmax_tree_cross_attention::estimate_error`]).
//!
//! **Privacy unit and neighbour relation.** Every structure of this module protects
//! [`PRIVACY_UNIT`], one token: neighbouring inputs differ in one element of the private input
//! — one value of a [`DpTree`], one point `(x_k, w_k)` of a [`DpTreeDistance`] or
//! [`DpTreeHighDim`], one row `(x_k, w_k)` (a key row and its weight) of a softmax structure;
//! replace-one, `n` public. Each type's docs state its `(ε, δ)`.
//!
//! **The construction is the release.** A structure is built once, noised, and then queried
//! any number of times by post-processing. Its primary constructor (`new`) takes a
//! [`Session`](crate::session::Session): it draws one fresh stream id ([`STREAMS`]) and
//! charges the session's ledger (kept for [`PRIVACY_UNIT`]) what the structure achieves, as
//! an `(ε, δ)` ([`Cost::Approx`]: truncated Laplace noise has no zCDP form, so
//! approximate-DP ledgers only), after the structure is built and before it is returned;
//! nothing is returned when the charge is refused. `new_keyed` takes an explicit
//! [`Draw`](crate::session::Draw) and an optional ledger, **for replay, audit, and hosts that
//! manage their own stream ids** — a `(key, stream)` pair must never serve two releases.
//!
//! Every structure is built from one keyed ChaCha20 stream, `draw.keyed(0)`: node noise is
//! addressed by the node's logical index (`docs/RANDOMNESS.md` §5.2), so builds are reproducible
//! and auditable. By default ([`NoiseMode::Exact`](crate::NoiseMode)) every node is an exact
//! multiple of a public grid with exact truncated discrete Laplace noise, so the guarantees above
//! hold for the released floats ([`NodeNoise`] has the proof);
//! [`NoiseMode::UnsafeFloat`](crate::NoiseMode) is the paper's float TLap. The private data and
//! exact sums are never stored; each type's `non_private_exact` constructor builds the noise-free
//! structure for tests and audits and is **not** differentially private.

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

use crate::accounting::cost::{Accountant, Cost};
use crate::accounting::privacy_unit::PrivacyUnit;
use crate::directed_rounding::div_down;
use crate::error::{Error, Result};
use crate::grid_release::NoiseMode;
use crate::privacy_params::PrivacyBudget;

/// The privacy unit of every structure of this module (and of
/// [`crate::softmax_tree_cross_attention`]): one token — one value, point or row of the private
/// input.
pub const PRIVACY_UNIT: PrivacyUnit = PrivacyUnit::TOKEN;

/// Stream ids one build of any structure of this module uses (`draw.stream` only: every node
/// of every copy is an element of that one stream).
pub const STREAMS: u64 = 1;

/// Charges a built structure's `(ε, δ)` to `ledger` (if any), in `mode`.
pub(crate) fn charge(
    ledger: Option<&mut dyn Accountant>,
    achieved: PrivacyBudget,
    mode: NoiseMode,
) -> Result<()> {
    match ledger {
        Some(l) => l.charge(PRIVACY_UNIT, &Cost::Approx(achieved), mode),
        None => Ok(()),
    }
}

/// Clamps a private value into `[lo, hi]`, NaN → `0` clamped (`docs/PAPERS.md` §1.9, "Domain and
/// parameters"): a per-value map, so neighbouring datasets stay neighbouring.
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
