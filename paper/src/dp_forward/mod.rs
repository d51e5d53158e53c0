//! Paper 003 (DP-Forward, Du et al., CCS 2023; summarised, with its errata, in `docs/PAPERS.md`
//! §3): the paper's baseline noise levels, for comparison with the mechanism in
//! [`dpattn_core::dp_forward`].
//!
//! ```
//! use dpattn_paper::dp_forward::mvg_iid_std;
//! // The MVG baseline needs 2.1e7 where the analytic matrix Gaussian needs about 0.6.
//! assert!(mvg_iid_std(8.0, 1e-5, 128, 768, 1.0, 1.0)? > 2e7);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

pub mod baselines;

pub use baselines::mvg_iid_std;
