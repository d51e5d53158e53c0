//! Integration tests of calibration and accounting: the Gaussian calibrations, the normal
//! functions they rest on, composition, RDP, ledgers and sessions, and the rule that errors
//! carry nothing computed from private data.
//! One test binary per area keeps the test command's build short; each module is one topic.

#[path = "../support/mod.rs"]
mod support;

mod composition_and_ledger;
mod gaussian_calibration;
mod normal_functions;
mod private_errors;
mod rdp;
mod sessions;
