//! Weight shuffling and the shuffled DP-SGD step (paper 002, Yang, Ji, Xiang, "Weights
//! Shuffling for Improving DPSGD in Transformer-based Models"; summarised, with its errata, in
//! `docs/PAPERS.md` §2).
//!
//! **What it is.** Transformer blocks are invariant under relabelling hidden units: an MLP's
//! hidden units (Theorem 3) and, per attention head, the query/key features and the value
//! features together with the output projection's matching inputs (Theorem 4). A
//! [`ShufflePlan`] describes where those tensors live in a flat parameter buffer (layout
//! descriptors: `(out, in)` or `(in, out)` storage, biases, separate or fused QKV,
//! grouped-query attention, RoPE, gated MLPs) and applies one sampled permutation to the
//! weights, the gradients and any optimizer state, so any framework can use it.
//! [`shuffled_dp_sgd_step`] is Algorithm 1 on those buffers: Poisson sampling, per-example
//! clipping to `c`, optional batch clipping to `c′`, Gaussian noise, the update, then the
//! permutation.
//!
//! **Guarantee.** Shuffling is *function-preserving and utility-neutral, not a privacy
//! mechanism*. The step is `(q, σ_eff)` Poisson-subsampled Gaussian DP-SGD with
//! add/remove-one neighbours (one training record, [`PRIVACY_UNIT`]), drawing [`STREAMS`]
//! `= 3` stream ids of a [`Session`](crate::session::Session) and charged on its RDP ledger
//! with [`SampledGaussianRdp`](crate::accounting::rdp::SampledGaussianRdp) — exactly what the
//! same step without shuffling costs, and it holds in the floats returned under the default
//! [`NoiseMode::Exact`](crate::NoiseMode::Exact) (the noisy sum is released on a public grid
//! with exact integer noise: [`ShuffledDpSgdParams::exact_grid`], `docs/PRIVACY.md` §7.4).
//! The permutation is post-processing, so this is a valid
//! upper bound (Theorem 5, read as post-processing, `docs/PAPERS.md` P2-11), and no smaller
//! bound is claimed: the permutation can be recovered from the previous weights (P2-6).
//! A run of `T` steps is `T` charges; the RDP ledger's total holds for a sequence of charges
//! fixed in advance (`q`, `σ`, `σ₀` and `T` chosen before training), not for parameters
//! chosen from earlier steps' outputs (the [ledger's adaptivity
//! notes](crate::accounting::ledger)).
//!
//! **The paper's errors and our resolutions** (`docs/PAPERS.md` §2.7, `docs/PRIVACY.md` §7):
//! * \[FIX\] P2-1 … P2-6: Theorem 6 is not a sufficient condition (it approximates a *lower*
//!   bound on δ with Fenton–Wilkinson on dependent summands, uses an infeasible worst case,
//!   the wrong `d`, and ignores that the permutation is revealed). At `d = 2` it certifies
//!   `(1, 1e-5)` where the exact δ is 0.0799. It is available only in the reproduction
//!   crate `dpattn-paper` (`dpattn_paper::weight_shuffle::paper_estimate`), whose types
//!   cannot become a guarantee; `dpattn_paper::weight_shuffle::refute` holds the lower
//!   bounds that contradict it.
//! * \[FIX\] P2-10: mixing `σ` (shuffled coordinates) and `σ₀` (the rest) is charged at
//!   `min(σ, σ₀)`, not as two separate guarantees.
//! * \[FIX\] P2-13 … P2-15: biases, per-head value permutations, GQA and RoPE are handled; one
//!   set of indices is shared by all coupled tensors (the paper's Appendix B code draws
//!   them independently, which breaks the model); weights *and* optimizer state are
//!   permuted after the update (line 14).
//! * \[FIX\] P2-17: [`ShufflePlan::coverage`] and [`ShufflePlan::min_orbit`] report what is
//!   really moved ("shuffle ratio 100 %" is not reachable with Theorems 3–4).
//!
//! ```
//! use dpattn_core::weight_shuffle::{Block, LinearLayout, MlpBlock, ShufflePlan, WeightLayout};
//! // A 4-unit MLP inside a 40-element buffer: the last 8 elements never move.
//! let blocks = [Block::Mlp(MlpBlock {
//!     up: LinearLayout::new(0, 4, 4, WeightLayout::OutIn).with_bias(16),
//!     gate: None,
//!     down: LinearLayout::new(20, 3, 4, WeightLayout::OutIn),
//! })];
//! let plan = ShufflePlan::new(&blocks, 40)?;
//! assert_eq!((plan.coverage().moved, plan.min_orbit()), (32, 1));
//! # Ok::<(), dpattn_core::Error>(())
//! ```

mod axis_map;
mod layout;
mod plan;
mod step;

pub use layout::{
    AttentionBlock, Block, LinearLayout, MlpBlock, PositionEncoding, Qkv, ValueSharing,
    WeightLayout,
};
pub use plan::{Coverage, Permutations, ShufflePlan};
pub use step::{
    BatchClip, BatchClipScope, PRIVACY_UNIT, STREAMS, ShuffledDpSgdParams, StepReport,
    shuffled_dp_sgd_step, shuffled_dp_sgd_step_keyed, shuffled_dp_sgd_step_scratch_len,
};
