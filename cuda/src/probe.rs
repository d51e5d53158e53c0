//! Whether CUDA work can run here, found out without panicking.
//!
//! cudarc panics (rather than returning an error) when the driver or NVRTC shared library
//! is missing, or when a driver lacks a symbol. [`probe`] therefore checks that both
//! libraries can be loaded before touching the driver, and catches any unwind from cudarc;
//! it never panics. [`nvrtc_present`] checks NVRTC alone (kernels can be compiled on a
//! machine with no driver and no GPU).
//!
//! ```
//! match dpattn_cuda::probe() {
//!     dpattn_cuda::Availability::Available { devices } => assert!(devices > 0),
//!     other => println!("no GPU here: {other}"),
//! }
//! assert_eq!(dpattn_cuda::available(), dpattn_cuda::probe().is_available());
//! ```

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Whether CUDA work can run here, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// The driver and NVRTC load and at least one device is visible.
    Available {
        /// Number of visible CUDA devices.
        devices: usize,
    },
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) cannot be loaded.
    NoDriverLibrary,
    /// The NVRTC library (`libnvrtc.so.12`, e.g. from the `nvidia-cuda-nvrtc-cu12` wheel)
    /// cannot be loaded; kernels cannot be compiled.
    NoNvrtcLibrary,
    /// The driver loads but reports no device.
    NoDevice,
    /// The driver returned an error (e.g. `CUDA_ERROR_NO_DEVICE`, an old driver).
    DriverError(String),
    /// cudarc panicked (e.g. a symbol missing from an old driver); the message is kept.
    Panicked(String),
}

impl Availability {
    /// `true` for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available { .. })
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Available { devices } => write!(f, "CUDA available: {devices} device(s)"),
            Availability::NoDriverLibrary => f.write_str("CUDA driver library not found (libcuda)"),
            Availability::NoNvrtcLibrary => f.write_str("NVRTC library not found (libnvrtc)"),
            Availability::NoDevice => f.write_str("CUDA driver found but no device is visible"),
            Availability::DriverError(e) => write!(f, "CUDA driver error: {e}"),
            Availability::Panicked(m) => write!(f, "CUDA probe failed inside cudarc: {m}"),
        }
    }
}

/// Finds out whether CUDA work can run here. Never panics; cheap enough to call per test
/// (each call retries, so a library installed later is found).
pub fn probe() -> Availability {
    // SAFETY: `is_culib_present` only tries `libloading::Library::new` on candidate
    // library names and drops the handle; it touches no CUDA state. Loading a library runs
    // its initialisers, which is exactly what using CUDA at all requires.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Availability::NoDriverLibrary;
    }
    // SAFETY: as above, for the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Availability::NoNvrtcLibrary;
    }
    match catch_unwind(AssertUnwindSafe(cudarc::driver::CudaContext::device_count)) {
        Ok(Ok(n)) if n > 0 => Availability::Available { devices: usize::try_from(n).unwrap_or(0) },
        Ok(Ok(_)) => Availability::NoDevice,
        Ok(Err(e)) => Availability::DriverError(format!("{e:?}")),
        Err(payload) => Availability::Panicked(panic_message(payload.as_ref())),
    }
}

/// `true` when the NVRTC shared library (`libnvrtc.so.12`) can be loaded, so kernels can be
/// compiled (no driver or GPU needed). Never panics.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries `libloading::Library::new` on candidate names; see `probe`.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// `true` when [`probe`] finds a usable device. Never panics.
pub fn available() -> bool {
    probe().is_available()
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_agrees_with_the_library_checks() {
        // SAFETY: see `probe`.
        let driver = unsafe { cudarc::driver::sys::is_culib_present() };
        // SAFETY: see `probe`.
        let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        let p = probe();
        eprintln!("probe: {p}");
        if !driver {
            assert_eq!(p, Availability::NoDriverLibrary);
        } else if !nvrtc {
            assert_eq!(p, Availability::NoNvrtcLibrary);
        } else {
            assert!(!matches!(p, Availability::NoDriverLibrary | Availability::NoNvrtcLibrary));
        }
        assert_eq!(available(), p.is_available());
    }

    #[test]
    fn probe_is_safe_to_call_concurrently_and_repeatedly() {
        let first = probe();
        let handles: Vec<_> = (0..4).map(|_| std::thread::spawn(probe)).collect();
        for h in handles {
            assert_eq!(h.join().expect("probe must not panic"), first);
        }
    }

    #[test]
    fn panic_payloads_are_kept() {
        let p = catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "boom 1");
        let p = catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "non-string panic payload");
    }
}
