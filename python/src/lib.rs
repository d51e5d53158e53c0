//! `dpattn._dpattn`: the Python extension of dpattn (re-exported by the `dpattn` package).
//! NumPy arrays in and out, errors as `DpattnError`, the GIL released during computations.
//! One small file per concept: [`errors`], [`arrays`], [`accounting`] (keys, ledgers,
//! sessions), [`attention`], [`output_perturbation`], [`kv_sketch`], [`moment_sketch`], [`softmax_tree`], [`dp_forward`],
//! [`samplers`] (and calibration).

mod accounting;
mod arrays;
mod attention;
mod dp_forward;
mod errors;
mod kv_sketch;
mod moment_sketch;
mod output_perturbation;
mod samplers;
mod softmax_tree;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static INVALID_ARGUMENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The `InvalidArgument` exception type (a `DpattnError` and a `ValueError`).
pub(crate) fn invalid_argument(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    INVALID_ARGUMENT
        .get_or_try_init(py, || errors::invalid_argument_type(py).map(Bound::unbind))
        .map(|t| t.bind(py).clone())
}

#[pymodule]
// `wrap_pyfunction!` imports each function under another name, which clippy flags for
// `gaussian_unsafe_float`; the Python name keeps the word.
#[allow(clippy::unsafe_removed_from_name)]
fn _dpattn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", dpattn_core::VERSION)?;
    m.add("DpattnError", py.get_type::<errors::DpattnError>())?;
    m.add("InvalidArgument", invalid_argument(py)?)?;
    m.add_class::<accounting::NoiseKey>()?;
    m.add_class::<accounting::Ledger>()?;
    m.add_class::<accounting::Session>()?;
    m.add_class::<kv_sketch::KvSketch>()?;
    m.add_class::<moment_sketch::MomentSketch>()?;
    m.add_class::<softmax_tree::SoftmaxTreeCrossAttention>()?;
    m.add_function(wrap_pyfunction!(attention::attention, m)?)?;
    m.add_function(wrap_pyfunction!(output_perturbation::output_perturbation, m)?)?;
    m.add_function(wrap_pyfunction!(output_perturbation::output_perturbation_keyed, m)?)?;
    m.add_function(wrap_pyfunction!(dp_forward::dp_forward, m)?)?;
    m.add_function(wrap_pyfunction!(dp_forward::dp_forward_keyed_py, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::discrete_gaussian, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::discrete_laplace, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::gaussian_unsafe_float, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::analytic_gaussian_sigma, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::discrete_gaussian_sigma, m)?)?;
    m.add_function(wrap_pyfunction!(samplers::laplace_scale, m)?)?;
    Ok(())
}
