//! How a mechanism draws its noise, for the C structs that let the caller choose
//! (`dpattn_core::NoiseMode`). Every release defaults to the exact mode; the unsafe float
//! path exists only where a mechanism has no exact form and is named as unsafe.

use dpattn_core::NoiseMode;

use crate::boundary::{FfiError, unknown};

/// Exact integer noise on a public power-of-two grid: DP in the floats returned (default).
pub const DPATTN_NOISE_MODE_EXACT: u32 = 0;
/// **Not DP as shipped**: textbook floating-point noise whose low-order bits leak the
/// noise-free value (docs/PRIVACY.md §8.4).
pub const DPATTN_NOISE_MODE_UNSAFE_FLOAT: u32 = 1;

/// The core mode of a C value.
pub(crate) fn decode(v: u32, field: &'static str) -> Result<NoiseMode, FfiError> {
    match v {
        DPATTN_NOISE_MODE_EXACT => Ok(NoiseMode::Exact),
        DPATTN_NOISE_MODE_UNSAFE_FLOAT => Ok(NoiseMode::UnsafeFloat),
        _ => Err(unknown(field, v, "DPATTN_NOISE_MODE_EXACT (0), _UNSAFE_FLOAT (1)")),
    }
}
