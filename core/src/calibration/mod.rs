//! Privacy calibration: noise scales from privacy targets and back.
//!
//! Every calibrator rounds the noise scale *up* (never below what the guarantee needs) and
//! returns an [`Error`](crate::Error) for infeasible inputs, never NaN.

pub mod amgm;
pub mod discrete_gaussian_mechanism;
pub mod gaussian_mechanism;
pub mod laplace_mechanism;
pub mod normal;
