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
    /// A session on a durable budget store (`dpattn_session_open_sqlite`, `_postgres`) could
    /// not reach its database or commit the charge: unreachable, locked past its timeout,
    /// read-only, or failed mid-transaction. Nothing was charged and nothing was released;
    /// the same request may succeed later (with the same charge id it is charged at most
    /// once).
    StoreUnavailable = 20,
    /// A durable budget store holds state that contradicts the request: the charge id is
    /// recorded with another cost or other stream ids, the budget or the key differs from
    /// the stored one, or a record was not written by dpattn. Nothing was charged or
    /// released; repeating the same request cannot succeed.
    StoreConflict = 21,
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
            E::StoreUnavailable { .. } => Self::StoreUnavailable,
            E::StoreConflict { .. } => Self::StoreConflict,
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

    /// The status whose value is `code`, or `None` for a value that is not a status (the
    /// one table from integers to statuses: a status a C callback returns comes back
    /// through it, and `dpattn_status_str` describes through it).
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s as u32 == code)
    }

    /// Every status, in value order.
    pub(crate) const ALL: [Self; 24] = [
        Self::Ok,
        Self::NullArgument,
        Self::ShapeMismatch,
        Self::BufferTooShort,
        Self::NonFinite,
        Self::OutOfRange,
        Self::ScratchTooSmall,
        Self::SizeOverflow,
        Self::Infeasible,
        Self::AllocationFailed,
        Self::RandomnessExhausted,
        Self::Unsupported,
        Self::DomainViolation,
        Self::MemoryLimit,
        Self::Misaligned,
        Self::Aliasing,
        Self::InvalidHandle,
        Self::CudaUnavailable,
        Self::CudaError,
        Self::UnitMismatch,
        Self::StoreUnavailable,
        Self::StoreConflict,
        Self::Internal,
        Self::Panic,
    ];

    /// A static NUL-terminated description (an exhaustive match: a new status must get one).
    fn description(self) -> &'static [u8] {
        match self {
            Self::Ok => b"ok\0",
            Self::NullArgument => b"a required pointer argument was NULL\0",
            Self::ShapeMismatch => b"shape mismatch\0",
            Self::BufferTooShort => b"buffer too short for its shape and strides\0",
            Self::NonFinite => b"non-finite input (NaN or infinity)\0",
            Self::OutOfRange => b"parameter out of range\0",
            Self::ScratchTooSmall => b"scratch buffer too small\0",
            Self::SizeOverflow => b"size overflow\0",
            Self::Infeasible => b"infeasible privacy parameters\0",
            Self::AllocationFailed => b"allocation failed\0",
            Self::RandomnessExhausted => b"noise-stream window exhausted\0",
            Self::Unsupported => b"unsupported by this build or CPU\0",
            Self::DomainViolation => b"private input outside the declared domain\0",
            Self::MemoryLimit => b"memory estimate over the caller's limit\0",
            Self::Misaligned => b"misaligned pointer\0",
            Self::Aliasing => b"output buffer overlaps another buffer\0",
            Self::InvalidHandle => b"invalid handle (freed, foreign, or of another type)\0",
            Self::CudaUnavailable => b"CUDA unavailable (no driver, no NVRTC, or no such device)\0",
            Self::CudaError => b"CUDA error (driver call, NVRTC compilation or kernel launch)\0",
            Self::UnitMismatch => b"privacy unit mismatch between a release and its ledger\0",
            Self::StoreUnavailable => b"budget store unavailable (nothing charged or released)\0",
            Self::StoreConflict => b"budget store conflict (nothing charged or released)\0",
            Self::Internal => b"internal error\0",
            Self::Panic => b"panic inside dpattn\0",
        }
    }
}

/// A static, NUL-terminated description of a status code; unknown codes give
/// "unknown status code". Never returns NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_status_str(status: u32) -> *const c_char {
    static FALLBACK: &[u8] = b"panic inside dpattn\0";
    ffi_value(FALLBACK.as_ptr().cast(), || {
        let text = dpattn_status::from_code(status)
            .map_or(&b"unknown status code\0"[..], dpattn_status::description);
        text.as_ptr().cast()
    })
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
            E::UnitMismatch { ledger: "a", charge: "b" },
            E::StoreUnavailable { what: "a" },
            E::StoreConflict { what: "a" },
        ];
        let codes: Vec<u32> = errors.iter().map(|e| dpattn_status::of(e) as u32).collect();
        assert_eq!(codes, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 4, 19, 20, 21]);
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

    /// The position of `s` in `ALL`: an exhaustive match, so a new status fails to compile
    /// here until it is added (and then `ALL` must grow, or the lookup below fails).
    fn position(s: dpattn_status) -> usize {
        use dpattn_status as S;
        match s {
            S::Ok => 0,
            S::NullArgument => 1,
            S::ShapeMismatch => 2,
            S::BufferTooShort => 3,
            S::NonFinite => 4,
            S::OutOfRange => 5,
            S::ScratchTooSmall => 6,
            S::SizeOverflow => 7,
            S::Infeasible => 8,
            S::AllocationFailed => 9,
            S::RandomnessExhausted => 10,
            S::Unsupported => 11,
            S::DomainViolation => 12,
            S::MemoryLimit => 13,
            S::Misaligned => 14,
            S::Aliasing => 15,
            S::InvalidHandle => 16,
            S::CudaUnavailable => 17,
            S::CudaError => 18,
            S::UnitMismatch => 19,
            S::StoreUnavailable => 20,
            S::StoreConflict => 21,
            S::Internal => 22,
            S::Panic => 23,
        }
    }

    #[test]
    fn every_code_round_trips_and_nothing_else_is_a_status() {
        for (i, &s) in dpattn_status::ALL.iter().enumerate() {
            assert_eq!(position(s), i, "{s:?}");
            assert_eq!(dpattn_status::from_code(s as u32), Some(s), "{s:?}");
        }
        // The codes the header documents (17 and 18 were missing from the callback table).
        let codes = dpattn_status::ALL.map(|s| s as u32);
        assert_eq!(
            codes,
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 99, 100]
        );
        let mut found = 0;
        for code in (0..=0x1_0000).chain([u32::MAX - 1, u32::MAX]) {
            match dpattn_status::from_code(code) {
                Some(s) => {
                    assert_eq!(s as u32, code);
                    found += 1;
                }
                None => assert!(!codes.contains(&code), "{code}"),
            }
        }
        assert_eq!(found, dpattn_status::ALL.len());
    }

    #[test]
    fn descriptions_are_nul_terminated_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for s in dpattn_status::ALL {
            // SAFETY: `dpattn_status_str` returns a pointer to a static NUL-terminated string.
            let text = unsafe { CStr::from_ptr(dpattn_status_str(s as u32)) };
            let text = text.to_str().unwrap().to_owned();
            assert!(text != "unknown status code", "{s:?}");
            assert!(seen.insert(text), "duplicate for {s:?}");
        }
        for code in [22, 98, 101, 12345, u32::MAX] {
            // SAFETY: as above.
            let unknown = unsafe { CStr::from_ptr(dpattn_status_str(code)) };
            assert_eq!(unknown.to_str().unwrap(), "unknown status code");
        }
    }
}
