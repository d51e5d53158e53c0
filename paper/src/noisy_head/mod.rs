//! Paper 004 (Bonnerjee–Yeon–Asch–Nandy–Ghosal, "How Private is Your Attention? Bridging
//! Privacy with In-Context Learning"; summarised, with its errata, in `docs/PAPERS.md` §4): the
//! paper's experiment configurations ([`presets`]), its synthetic in-context regression data
//! ([`generate_prompts`]), corruption attack ([`corrupt_prompt`]), random start
//! ([`random_start`]) and risk measures ([`excess_risk`], [`test_mse`]), for runs of the
//! mechanism in [`dpattn_core::noisy_head`].
//!
//! ```
//! use dpattn_core::noisy_head::schedule::mean_field_excess_risk;
//! use dpattn_paper::noisy_head::presets;
//! let p = presets::low_dim(4000, 1.0)?;
//! // docs/PAPERS.md T4-C: the mean-field prediction of the excess risk at N = 4000, ε = 1
//! // is 0.05016.
//! let risk = mean_field_excess_risk(&p, 0.1, 0.0)?;
//! assert!((risk / 0.05016 - 1.0).abs() < 2e-3);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

pub mod presets;
mod simulation;

pub use simulation::{
    RANDOM_START_FIRST_ELEMENT, corrupt_prompt, excess_risk, generate_prompts, random_start,
    test_mse,
};
