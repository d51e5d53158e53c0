//! Python exceptions for the library's errors: `DpattnError` carries the status name and the
//! C ABI's status code; `InvalidArgument` (also a `ValueError`) is the subclass for bad
//! shapes, sizes and parameters. Messages are the core's `Display`, which never carries a
//! value computed from private data.

use dpattn_core::Error;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

pyo3::create_exception!(
    dpattn,
    DpattnError,
    PyException,
    "An error reported by dpattn; `status` names it and `code` is the C ABI's dpattn_status."
);

/// `DpattnError` and `ValueError` at once (pyo3's `create_exception!` takes one base).
pub(crate) fn invalid_argument_type(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let builtins = py.import("builtins")?;
    let bases = PyTuple::new(
        py,
        [py.get_type::<DpattnError>().into_any(), py.get_type::<PyValueError>().into_any()],
    )?;
    let namespace = pyo3::types::PyDict::new(py);
    namespace
        .set_item("__doc__", "Bad shapes, sizes or parameters (a DpattnError and a ValueError).")?;
    namespace.set_item("__module__", "dpattn")?;
    builtins.getattr("type")?.call1(("InvalidArgument", bases, namespace))
}

/// The status name and C ABI code (`dpattn_status`, `ffi/src/status.rs`) of a core error.
pub(crate) fn status_of(e: &Error) -> (&'static str, u32) {
    match e {
        Error::ShapeMismatch { .. } => ("shape_mismatch", 2),
        Error::BufferTooShort { .. } => ("buffer_too_short", 3),
        Error::NonFinite { .. } | Error::PrivateNonFinite { .. } => ("non_finite", 4),
        Error::OutOfRange { .. } => ("out_of_range", 5),
        Error::ScratchTooSmall { .. } => ("scratch_too_small", 6),
        Error::SizeOverflow { .. } => ("size_overflow", 7),
        Error::Infeasible { .. } => ("infeasible", 8),
        Error::AllocationFailed { .. } => ("allocation_failed", 9),
        Error::RandomnessExhausted { .. } => ("randomness_exhausted", 10),
        Error::Unsupported { .. } => ("unsupported", 11),
        Error::DomainViolation { .. } => ("domain_violation", 12),
        Error::MemoryLimit { .. } => ("memory_limit", 13),
        Error::UnitMismatch { .. } => ("unit_mismatch", 19),
        Error::StoreUnavailable { .. } => ("store_unavailable", 20),
        Error::StoreConflict { .. } => ("store_conflict", 21),
        _ => ("internal", 99),
    }
}

/// Whether a status is a caller's mistake in shapes, sizes or parameters.
fn is_invalid_argument(status: &str) -> bool {
    matches!(
        status,
        "shape_mismatch" | "buffer_too_short" | "non_finite" | "out_of_range" | "size_overflow"
    )
}

/// The Python exception of a status and message.
pub(crate) fn raise(status: &'static str, code: u32, message: String) -> PyErr {
    Python::attach(|py| {
        let make = || -> PyResult<PyErr> {
            let class = if is_invalid_argument(status) {
                crate::invalid_argument(py)?
            } else {
                py.get_type::<DpattnError>().into_any()
            };
            let exc = class.call1((message.clone(),))?;
            exc.setattr("status", status)?;
            exc.setattr("code", code)?;
            Ok(PyErr::from_value(exc))
        };
        make().unwrap_or_else(|e| e)
    })
}

/// A core error as a Python exception.
pub(crate) fn to_py(e: Error) -> PyErr {
    let (status, code) = status_of(&e);
    raise(status, code, e.to_string())
}

/// A binding-level argument error (status `shape_mismatch` or `out_of_range`).
pub(crate) fn invalid(status: &'static str, message: impl Into<String>) -> PyErr {
    let code = if status == "shape_mismatch" { 2 } else { 5 };
    raise(status, code, message.into())
}

/// `?` for core results inside `#[pyfunction]`s.
pub(crate) trait OrRaise<T> {
    /// The value, or the error as a Python exception.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
