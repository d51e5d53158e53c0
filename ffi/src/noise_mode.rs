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
/// For enclaves: the exact mode's grid with noise drawn in constant time, within total
/// variation 2^-100 of the exact noise per value; `(ε, δ)` only (docs/PRIVACY.md §12).
/// The Rust API's output perturbation and KV sketch support it, and so does
/// `dpattn_output_perturbation_attention`; the other C entry points with a `noise_mode`
/// field return `DPATTN_STATUS_UNSUPPORTED` for it.
pub const DPATTN_NOISE_MODE_CONSTANT_TIME: u32 = 2;

/// The core mode of a C value.
pub(crate) fn decode(v: u32, field: &'static str) -> Result<NoiseMode, FfiError> {
    match v {
        DPATTN_NOISE_MODE_EXACT => Ok(NoiseMode::Exact),
        DPATTN_NOISE_MODE_UNSAFE_FLOAT => Ok(NoiseMode::UnsafeFloat),
        DPATTN_NOISE_MODE_CONSTANT_TIME => Ok(NoiseMode::ConstantTime),
        _ => Err(unknown(
            field,
            v,
            "DPATTN_NOISE_MODE_EXACT (0), _UNSAFE_FLOAT (1), _CONSTANT_TIME (2)",
        )),
    }
}
