//! Validation of privacy parameters from C.

use dpattn_core::PrivacyBudget;

use crate::boundary::ffi_status;
use crate::status::dpattn_status;

/// Checks an (ε, δ) budget the way every mechanism will: ε finite and `> 0`, `0 <= δ < 1`.
/// Returns `DPATTN_STATUS_OK` or `DPATTN_STATUS_OUT_OF_RANGE` (the last-error message
/// names the parameter and the allowed range). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_check_privacy_params(epsilon: f64, delta: f64) -> dpattn_status {
    ffi_status(|| {
        PrivacyBudget::new(epsilon, delta)?;
        Ok(())
    })
}
