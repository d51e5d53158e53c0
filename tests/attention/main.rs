//! Integration tests of the attention kernels: the fast kernels against the float64
//! reference, the reference itself, noisy attention and Gram-matrix attention. One test
//! binary per area keeps the test command's build short; each module is one topic.

#[path = "../support/mod.rs"]
mod support;

mod gram;
mod grouped_query;
mod kernels;
mod noisy;
mod reference;
mod threaded;
