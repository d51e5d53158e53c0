//! The error type of `dpattn-cuda`: every GPU entry point returns [`Result<T>`].
//!
//! Nothing in this crate panics on a missing driver, a missing NVRTC, a device without
//! support or bad input: cudarc's panics (it panics when a library or symbol is missing) are
//! caught at this crate's boundary and reported as [`Error::Panicked`], and the compile log
//! of a failed NVRTC compilation travels in [`Error::Compile`].
//!
//! ```
//! use dpattn_cuda::Error;
//! let e = Error::Unsupported { what: "clip dtype bf16".into() };
//! assert_eq!(e.to_string(), "unsupported on the GPU: clip dtype bf16");
//! ```

use std::fmt;

/// What went wrong on the GPU side, with enough context to act on it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// CUDA cannot run here; the [`Availability`](crate::Availability) says why (no driver
    /// library, no NVRTC library, no device, driver error).
    Unavailable(crate::Availability),
    /// A device ordinal that is not present.
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices are visible.
        devices: usize,
    },
    /// NVRTC rejected a kernel. `log` is NVRTC's own compile log.
    Compile {
        /// The kernel module and variant, e.g. `noise_fill[gaussian,w2,f32]`.
        kernel: String,
        /// The options passed to NVRTC.
        options: Vec<String>,
        /// NVRTC's log (warnings and errors), possibly empty.
        log: String,
    },
    /// A CUDA driver call failed: the call, the `CUresult` name and its description.
    Driver {
        /// What was being done, e.g. `"load module noise_fill"`.
        during: String,
        /// `CUDA_ERROR_…` name.
        name: String,
        /// The driver's description.
        message: String,
    },
    /// The driver cannot load code for this device, e.g. PTX newer than the driver
    /// (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`): both the NVRTC and driver versions are named.
    DriverTooOld {
        /// NVRTC version `(major, minor)`.
        nvrtc: (i32, i32),
        /// Driver CUDA version, e.g. `12020` for 12.2.
        driver: i32,
        /// The load error's name.
        error: String,
    },
    /// Input validation failed (shapes, lengths, alignment, parameters) before any launch.
    Core(dpattn_core::Error),
    /// A feature this crate does not provide (a dtype, a sampler, a mode).
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// cudarc panicked (a library or symbol missing, an internal `unwrap`); the message is kept.
    Panicked(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(a) => write!(f, "CUDA unavailable: {a}"),
            Error::NoSuchDevice { ordinal, devices } => {
                write!(f, "no CUDA device {ordinal} ({devices} visible)")
            }
            Error::Compile { kernel, options, log } => write!(
                f,
                "NVRTC failed to compile {kernel} (options {}):\n{}",
                options.join(" "),
                log.trim_end()
            ),
            Error::Driver { during, name, message } => {
                write!(f, "CUDA driver error during {during}: {name} ({message})")
            }
            Error::DriverTooOld { nvrtc, driver, error } => write!(
                f,
                "the CUDA driver (CUDA {}.{}) cannot load code from NVRTC {}.{}: {error}; \
                 update the driver or use an NVRTC no newer than the driver",
                driver / 1000,
                (driver % 1000) / 10,
                nvrtc.0,
                nvrtc.1
            ),
            Error::Core(e) => write!(f, "{e}"),
            Error::Unsupported { what } => write!(f, "unsupported on the GPU: {what}"),
            Error::Panicked(m) => write!(f, "CUDA call panicked inside cudarc: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The values behind a refusal of private data, for the **data holder only**: the core
    /// error's [`private_detail`](dpattn_core::Error::private_detail) (`Display` and `Debug`
    /// withhold them). `None` for every other error.
    pub fn private_detail(&self) -> Option<dpattn_core::PrivateDetail> {
        match self {
            Error::Core(e) => e.private_detail(),
            _ => None,
        }
    }
}

impl From<dpattn_core::Error> for Error {
    fn from(e: dpattn_core::Error) -> Self {
        Error::Core(e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Converts a driver error into [`Error::Driver`], naming the operation (`during`), with
/// the driver's `CUDA_ERROR_…` name and description.
pub(crate) fn driver(
    during: impl Into<String>,
) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    let during = during.into();
    move |e| Error::Driver {
        during,
        name: e
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", e.0)),
        message: e
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "no description".to_owned()),
    }
}

/// Runs `f`, turning a cudarc panic into [`Error::Panicked`].
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::Panicked(crate::probe::panic_message(p.as_ref()))))
}
