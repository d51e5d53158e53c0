//! The floating-point safety audit of every DP release (issue: "every DP release is safe in
//! floating point by default").
//!
//! For each mechanism a worst-case neighbouring pair `x, x′` is released many times (at
//! least 1e5 values per input) and only the low-order bits of the released floats are
//! compared ([`low_bits`]): the parity of the last mantissa bit among the values of each
//! binade (Mironov's "this entry lies in one binade and its last bit is odd" event, taken
//! conditionally on the binade so that the legitimate, DP-bounded difference between the
//! two inputs' distributions does not count), and a two-sample χ² over the low 8 bits of
//! each value's grid index. In the default exact mode neither separates the inputs
//! (`p > 1e-6`) and every value is an exact multiple of the release's resolution `Λ`, exactly
//! representable in its output type. The same audit run on [`NoiseMode::UnsafeFloat`]
//! must separate them (`p < 1e-6`): that shows the test has power.
//!
//! [`NoiseMode::UnsafeFloat`]: dpattn::NoiseMode::UnsafeFloat

#[path = "../support/mod.rs"]
mod support;

mod dp_forward;
mod dp_sgd;
mod gram_attention;
mod low_bits;
mod moment_sketch;
mod noisy_head;
mod output_perturbation;
mod softmax_tree;
