//! Integration tests of the samplers: continuous and exact noise, the gamma and
//! matrix-Gaussian samplers, keyed permutations, and the statistics toolkit the tests use.
//! One test binary per area keeps the test command's build short; each module is one topic.

#[path = "../support/mod.rs"]
mod support;

mod constant_time;
mod continuous;
mod exact;
mod gamma;
mod matrix_gaussian;
mod permutation;
mod stats_toolkit;
