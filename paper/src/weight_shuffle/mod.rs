//! Paper 002 (Yang, Ji, Xiang, "Weights Shuffling for Improving DPSGD in Transformer-based
//! Models"; summarised, with its errata, in `docs/PAPERS.md` §2): the paper's accountant and the
//! bounds that refute it. The shuffling itself and the soundly charged step are in
//! [`dpattn_core::weight_shuffle`].
//!
//! * [`paper_estimate`]: Theorem 6, amplification and composition as the paper runs them —
//!   a heuristic estimate whose types cannot become a guarantee.
//! * [`refute`]: lower bounds on the true `δ(ε)` of the shuffled Gaussian mechanism and
//!   audit bounds; any accountant claiming less for the same pair is contradicted.
//!
//! ```
//! use dpattn_paper::weight_shuffle::{paper_estimate, refute};
//! let (eps, sigma) = (1.0, 1.16125);
//! let claimed = paper_estimate::thm6_h(eps, sigma, 2.0, 1.0)?;
//! let lower = refute::shuffled_gaussian_delta_d2(eps, sigma, 1.0, 1.0)?.backward;
//! assert!(lower > 1000.0 * claimed);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

pub mod paper_estimate;
pub mod refute;
