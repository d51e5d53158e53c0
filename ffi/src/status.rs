//! The status codes every fallible entry point returns.

use std::ffi::c_char;

use crate::boundary::ffi_value;

/// Result of a dpattn call. `DPATTN_STATUS_OK` (0) is success; every other value is a
/// failure whose details are in `dpattn_last_error_message`. Values are stable: they are
/// never renumbered or reused, and new ones are only appended.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum dpattn_status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// Shapes of the arguments are inconsistent.
    ShapeMismatch = 2,
    /// A buffer is shorter than its shape and strides require.
    BufferTooShort = 3,
    /// An input contains NaN or infinity. For private data the message withholds where
    /// (`dpattn_last_error_private_detail` has the position, for the data holder).
    NonFinite = 4,
    /// A parameter is outside its domain (including zero sizes and aliasing strides).
    OutOfRange = 5,
    /// Caller-provided scratch is smaller than the `*_scratch_len` query says.
    ScratchTooSmall = 6,
    /// A size computed from the inputs does not fit in `size_t`.
    SizeOverflow = 7,
    /// The requested privacy guarantee cannot be met with these parameters.
    Infeasible = 8,
    /// A convenience routine could not allocate memory.
    AllocationFailed = 9,
    /// An exact sampler used up the noise-stream window reserved for one element.
    RandomnessExhausted = 10,
    /// The request needs a capability this build or CPU lacks (e.g. a forced SIMD kernel).
    Unsupported = 11,
    /// Private input lies outside the declared public domain of a mechanism (or a matrix
    /// that must be positive definite is not, or private data is too large for the
    /// computation's range). The refusal depends on private data: show it only to the data
    /// holder. The message names the condition but withholds the measured value
    /// (`dpattn_last_error_private_detail` has it).
    DomainViolation = 12,
    /// A structure's memory estimate exceeds the caller's memory limit (nothing was
    /// allocated).
    MemoryLimit = 13,
    /// A pointer is not aligned for its element type.
    Misaligned = 14,
    /// An output buffer overlaps an input or another output.
    Aliasing = 15,
    /// A handle is not live: already freed, never created by dpattn, or of another type.
    InvalidHandle = 16,
    /// CUDA cannot run here (a `dpattn_cuda_*` call): no CUDA driver library, no NVRTC
    /// library, no device, the driver failed to initialise, or the device ordinal asked for
    /// is not present. The message says which. Nothing was queued or written.
    CudaUnavailable = 17,
    /// A CUDA driver call, an NVRTC kernel compilation or a kernel launch failed (a
    /// `dpattn_cuda_*` call); the message carries the driver's error name and description
    /// or NVRTC's compile log.
    CudaError = 18,
    /// A release charged a ledger kept for another privacy unit (one token, one prompt, one
    /// record, ...): guarantees about different units cannot be added up. Nothing was
    /// released or charged.
    UnitMismatch = 19,
    /// An internal error that has no more specific code (a bug; please report it).
    Internal = 99,
    /// A panic inside dpattn was caught at the boundary (a bug; please report it).
    Panic = 100,
}

impl dpattn_status {
    /// The code of a core error.
    pub(crate) fn of(e: &dpattn_core::Error) -> Self {
        use dpattn_core::Error as E;
        match e {
            E::ShapeMismatch { .. } => Self::ShapeMismatch,
            E::BufferTooShort { .. } => Self::BufferTooShort,
            E::NonFinite { .. } | E::PrivateNonFinite { .. } => Self::NonFinite,
            E::OutOfRange { .. } => Self::OutOfRange,
            E::ScratchTooSmall { .. } => Self::ScratchTooSmall,
            E::SizeOverflow { .. } => Self::SizeOverflow,
            E::Infeasible { .. } => Self::Infeasible,
            E::AllocationFailed { .. } => Self::AllocationFailed,
            E::RandomnessExhausted { .. } => Self::RandomnessExhausted,
            E::Unsupported { .. } => Self::Unsupported,
            E::DomainViolation { .. } => Self::DomainViolation,
            E::MemoryLimit { .. } => Self::MemoryLimit,
            E::UnitMismatch { .. } => Self::UnitMismatch,
            _ => Self::Internal,
        }
    }

    /// The code of a GPU error.
    pub(crate) fn of_cuda(e: &dpattn_cuda::Error) -> Self {
        use dpattn_cuda::Error as E;
        match e {
            E::Core(e) => Self::of(e),
            E::Unavailable(_) | E::NoSuchDevice { .. } => Self::CudaUnavailable,
            E::Unsupported { .. } => Self::Unsupported,
            // Compile, Driver, DriverTooOld, Panicked and variants added later: the message
            // carries the full text.
            _ => Self::CudaError,
        }
    }

    fn description(code: u32) -> &'static [u8] {
        match code {
            0 => b"ok\0",
            1 => b"a required pointer argument was NULL\0",
            2 => b"shape mismatch\0",
            3 => b"buffer too short for its shape and strides\0",
            4 => b"non-finite input (NaN or infinity)\0",
            5 => b"parameter out of range\0",
            6 => b"scratch buffer too small\0",
            7 => b"size overflow\0",
            8 => b"infeasible privacy parameters\0",
            9 => b"allocation failed\0",
            10 => b"noise-stream window exhausted\0",
            11 => b"unsupported by this build or CPU\0",
            12 => b"private input outside the declared domain\0",
            13 => b"memory estimate over the caller's limit\0",
            14 => b"misaligned pointer\0",
            15 => b"output buffer overlaps another buffer\0",
            16 => b"invalid handle (freed, foreign, or of another type)\0",
            17 => b"CUDA unavailable (no driver, no NVRTC, or no such device)\0",
            18 => b"CUDA error (driver call, NVRTC compilation or kernel launch)\0",
            19 => b"privacy unit mismatch between a release and its ledger\0",
            99 => b"internal error\0",
            100 => b"panic inside dpattn\0",
            _ => b"unknown status code\0",
        }
    }
}

/// A static, NUL-terminated description of a status code; unknown codes give
/// "unknown status code". Never returns NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_status_str(status: u32) -> *const c_char {
    static FALLBACK: &[u8] = b"panic inside dpattn\0";
    ffi_value(FALLBACK.as_ptr().cast(), || dpattn_status::description(status).as_ptr().cast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_core_error_has_a_specific_code() {
        use dpattn_core::{Error as E, PrivateDetail};
        let errors = [
            E::ShapeMismatch { arg: "a", axis: "b", expected: 1, got: 2 },
            E::BufferTooShort { arg: "a", needed: 1, got: 0 },
            E::NonFinite { arg: "a", index: 0 },
            E::OutOfRange { name: "a", value: 0.0, allowed: "" },
            E::ScratchTooSmall { needed: 1, got: 0 },
            E::SizeOverflow { what: "a" },
            E::Infeasible { condition: "a", lhs: 0.0, rhs: 0.0 },
            E::AllocationFailed { what: "a", elements: 1 },
            E::RandomnessExhausted { element: 0 },
            E::Unsupported { what: "a" },
            E::DomainViolation { condition: "a", detail: PrivateDetail::from_measured(0.0) },
            E::MemoryLimit { what: "a", needed_bytes: 2, limit_bytes: 1 },
            E::PrivateNonFinite { arg: "a", detail: PrivateDetail::from_index(0) },
        ];
        let codes: Vec<u32> = errors.iter().map(|e| dpattn_status::of(e) as u32).collect();
        assert_eq!(codes, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 4]);
    }

    #[test]
    fn every_cuda_error_has_a_code() {
        use dpattn_cuda::{Availability, Error as E};
        let errors = [
            E::Core(dpattn_core::Error::SizeOverflow { what: "a" }),
            E::Unavailable(Availability::NoDriverLibrary),
            E::Unavailable(Availability::NoNvrtcLibrary),
            E::Unavailable(Availability::NoDevice),
            E::NoSuchDevice { ordinal: 1, devices: 1 },
            E::Compile { kernel: "k".into(), options: vec![], log: "error: x".into() },
            E::Driver { during: "d".into(), name: "CUDA_ERROR_X".into(), message: "m".into() },
            E::DriverTooOld { nvrtc: (12, 8), driver: 12020, error: "e".into() },
            E::Unsupported { what: "a".into() },
            E::Panicked("p".into()),
        ];
        let codes: Vec<u32> = errors.iter().map(|e| dpattn_status::of_cuda(e) as u32).collect();
        assert_eq!(codes, [7, 17, 17, 17, 17, 18, 18, 18, 11, 18]);
    }

    #[test]
    fn descriptions_are_nul_terminated_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for code in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 99, 100] {
            // SAFETY: `dpattn_status_str` returns a pointer to a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(dpattn_status_str(code)) };
            assert!(seen.insert(s.to_str().unwrap().to_owned()), "duplicate for {code}");
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(dpattn_status_str(12345)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown status code");
    }
}
