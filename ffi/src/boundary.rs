//! The panic boundary every `extern "C"` function goes through.
//!
//! Since Rust 1.81 a panic unwinding out of an `extern "C"` function aborts the process,
//! so each entry point runs its body inside `catch_unwind` and turns a panic into
//! `DPATTN_STATUS_PANIC` (fallible functions) or a documented fallback value (infallible
//! ones), recording the panic message as the thread's last error.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::last_error::{clear_last_error, set_last_error, set_last_private_detail};
use crate::status::dpattn_status;

/// Why an entry point failed.
#[derive(Debug)]
pub(crate) enum FfiError {
    /// A core routine rejected its input.
    Core(dpattn_core::Error),
    /// A required pointer argument was NULL.
    Null(&'static str),
    /// A pointer is not aligned for its element type.
    Misaligned(&'static str),
    /// A `len` whose byte size does not fit in `isize` (no real buffer is that long).
    TooLong(&'static str),
    /// Two buffers overlap where one of them is written.
    Aliasing(&'static str, &'static str),
    /// A handle (argument name, handle type) that is not live or not of that type.
    InvalidHandle(&'static str, &'static str),
    /// An enum-like `uint32_t` argument (dtype, kind, ...) with an unknown value.
    UnknownValue { arg: &'static str, value: u32, allowed: &'static str },
    /// A GPU entry point failed on the CUDA side (never `dpattn_cuda::Error::Core`, which
    /// becomes [`FfiError::Core`]).
    Cuda(dpattn_cuda::Error),
    /// A durable budget store refused or failed (a session opened on a store), with the
    /// store's own message.
    Store(dpattn_store::StoreError),
}

impl From<dpattn_store::StoreError> for FfiError {
    fn from(e: dpattn_store::StoreError) -> Self {
        FfiError::Store(e)
    }
}

impl From<dpattn_core::Error> for FfiError {
    fn from(e: dpattn_core::Error) -> Self {
        FfiError::Core(e)
    }
}

impl From<dpattn_cuda::Error> for FfiError {
    fn from(e: dpattn_cuda::Error) -> Self {
        match e {
            dpattn_cuda::Error::Core(e) => FfiError::Core(e),
            e => FfiError::Cuda(e),
        }
    }
}

impl FfiError {
    /// The private detail of a refusal of private data (never part of the message).
    fn private_detail(&self) -> Option<dpattn_core::PrivateDetail> {
        match self {
            FfiError::Core(e) => e.private_detail(),
            FfiError::Store(e) => e.to_core().private_detail(),
            _ => None,
        }
    }

    fn status(&self) -> dpattn_status {
        match self {
            FfiError::Core(e) => dpattn_status::of(e),
            FfiError::Null(_) => dpattn_status::NullArgument,
            FfiError::Misaligned(_) => dpattn_status::Misaligned,
            FfiError::TooLong(_) => dpattn_status::SizeOverflow,
            FfiError::Aliasing(..) => dpattn_status::Aliasing,
            FfiError::InvalidHandle(..) => dpattn_status::InvalidHandle,
            FfiError::UnknownValue { .. } => dpattn_status::OutOfRange,
            FfiError::Cuda(e) => dpattn_status::of_cuda(e),
            FfiError::Store(e) => dpattn_status::of(&e.to_core()),
        }
    }
}

impl fmt::Display for FfiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FfiError::Core(e) => e.fmt(f),
            FfiError::Null(arg) => write!(f, "argument `{arg}` is NULL"),
            FfiError::Misaligned(arg) => {
                write!(f, "argument `{arg}` is not aligned for its element type")
            }
            FfiError::TooLong(arg) => {
                write!(f, "length of `{arg}` in bytes does not fit in a signed size")
            }
            FfiError::Aliasing(a, b) => write!(f, "buffers `{a}` and `{b}` overlap"),
            FfiError::InvalidHandle(arg, ty) => write!(
                f,
                "handle `{arg}` is not a live `{ty}` (freed, not created by dpattn, or of another type)"
            ),
            FfiError::UnknownValue { arg, value, allowed } => {
                write!(f, "`{arg}` = {value} is not one of {allowed}")
            }
            FfiError::Cuda(e) => e.fmt(f),
            FfiError::Store(e) => e.fmt(f),
        }
    }
}

/// An enum-like `uint32_t` argument with a value outside `allowed`.
pub(crate) fn unknown(arg: &'static str, value: u32, allowed: &'static str) -> FfiError {
    FfiError::UnknownValue { arg, value, allowed }
}

/// Runs a fallible entry point: clears the last error, catches panics, maps errors to
/// status codes and records their messages.
pub(crate) fn ffi_status(body: impl FnOnce() -> Result<(), FfiError>) -> dpattn_status {
    let run = || {
        clear_last_error();
        body()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => dpattn_status::Ok,
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            if let Some(d) = e.private_detail() {
                set_last_private_detail(&d.reveal().to_string());
            }
            e.status()
        }
        Err(payload) => {
            record_panic(payload.as_ref());
            dpattn_status::Panic
        }
    }
}

/// Runs an infallible entry point, returning `fallback` if it panics.
pub(crate) fn ffi_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            record_panic(payload.as_ref());
            fallback
        }
    }
}

fn record_panic(payload: &(dyn Any + Send)) {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "non-string panic payload"
    };
    set_last_error(&format!("panic inside dpattn (a bug, please report it): {msg}"));
}

/// Panics inside the boundary on purpose and returns `DPATTN_STATUS_PANIC`, with the panic
/// message ("deliberate panic for testing the boundary") as the last error. Only built with
/// the `panic-test` feature; it exists so tests in C can prove that a Rust panic comes back
/// as a status code instead of aborting the host.
#[cfg(feature = "panic-test")]
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_test_panic() -> dpattn_status {
    ffi_status(|| panic!("deliberate panic for testing the boundary"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;

    #[test]
    fn panics_become_status_codes_with_a_message() {
        let s = ffi_status(|| panic!("index out of bounds: test"));
        assert_eq!(s, dpattn_status::Panic);
        assert!(last_error_string().contains("index out of bounds: test"));
        let v = ffi_value(-1i32, || panic!("boom"));
        assert_eq!(v, -1);
        assert!(last_error_string().ends_with("boom"));
    }

    #[test]
    fn errors_set_and_success_clears_the_message() {
        let s = ffi_status(|| Err(FfiError::Null("out")));
        assert_eq!(s, dpattn_status::NullArgument);
        assert_eq!(last_error_string(), "argument `out` is NULL");
        assert_eq!(ffi_status(|| Ok(())), dpattn_status::Ok);
        assert_eq!(last_error_string(), "");
    }
}
