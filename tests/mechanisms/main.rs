//! Integration tests of the DP mechanisms, one module per mechanism and topic: output
//! perturbation, the KV sketch, Gaussian-sampling attention, the softmax trees, DP-Forward, NoisyHead and
//! weight shuffling, plus regression tests that have no better home.
//! One test binary per area keeps the test command's build short; each module is one topic.

#[path = "../support/mod.rs"]
mod support;

mod dp_forward_acceptance;
mod dp_forward_exact;
mod dp_forward_noise;
mod dp_forward_regressions;
mod gaussian_sampling_attention;
mod gaussian_sampling_calibration;
mod gaussian_sampling_theory;
mod huge_noise_scales;
mod kv_sketch;
mod noisy_head_exact;
mod noisy_head_units;
mod output_perturbation;
mod softmax_tree_budget;
mod softmax_tree_primitives;
mod softmax_tree_statistics;
mod weight_shuffle_counterexample;
mod weight_shuffle_exact;
mod weight_shuffle_invariance;
mod weight_shuffle_step;
