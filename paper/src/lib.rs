//! # dpattn-paper
//!
//! Reproduction and refutation tools for the five papers dpattn implements
//! (`docs/PAPERS.md`): the papers' experiment configurations and synthetic data, their own
//! (unsound) accountants and baseline noise levels, and the lower bounds and audits that
//! contradict them. They exist to reproduce the papers' numbers and to test the library
//! against them.
//!
//! **An engine does not need this crate.** The mechanisms, their calibration and their
//! accounting are in [`dpattn_core`] (no_std); this crate depends on it, never the other way
//! round. **Nothing in it is a privacy guarantee**: the papers' accountants are heuristic
//! estimates whose result types convert into no budget or ledger charge, the refuters give
//! lower bounds only, and the data generators and risk measures are for experiments.
//!
//! | module | paper | contents |
//! | --- | --- | --- |
//! | [`weight_shuffle::paper_estimate`] | 002 | Theorem 6's accountant, a labelled estimate |
//! | [`weight_shuffle::refute`] | 002 | lower bounds on the shuffled Gaussian's `δ(ε)`, audit bounds |
//! | [`dp_forward::baselines`] | 003 | the i.i.d. MVG baseline noise level |
//! | [`noisy_head::presets`] | 004 | the experiments' parameters |
//! | [`noisy_head`] | 004 | prompt generator, corruption attack, random start, excess risk, test MSE |
//!
//! ```
//! use dpattn_paper::weight_shuffle::paper_estimate::thm6_h;
//! use dpattn_paper::weight_shuffle::refute::shuffled_gaussian_delta_d2;
//! // Paper 002's Theorem 6 accepts (ε, δ) = (1, 1e-5) at d = 2, σ = 1.16125 ...
//! assert!(thm6_h(1.0, 1.16125, 2.0, 1.0)? < 1e-5);
//! // ... where the exact δ of the paper's own worst-case pair is 0.0799.
//! assert!(shuffled_gaussian_delta_d2(1.0, 1.16125, 1.0, 1.0)?.backward > 0.0798);
//!
//! // Paper 004's low-dimensional experiment at N = 1000, ε = 1, for the core's NoisyHead.
//! let p = dpattn_paper::noisy_head::presets::low_dim(1000, 1.0)?;
//! assert_eq!((p.d, p.l, p.iters), (5, 31, 44));
//! p.validate()?;
//! # Ok::<(), dpattn_core::Error>(())
//! ```
#![forbid(unsafe_code)]

mod check;
mod math;

pub mod dp_forward;
pub mod noisy_head;
pub mod weight_shuffle;
