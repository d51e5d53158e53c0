//! Samplers on the keyed ChaCha20 stream (`dpattn_core::sampling`): element `i` of every fill
//! is the sample at index `i` of `(key, stream)`, bit for bit the Rust and C APIs' value.

use dpattn_core::sampling::{
    DiscreteGaussian, DiscreteLaplace, ExactSampler, FixedWordSampler, Gaussian, KeyedStream,
};
use pyo3::prelude::*;

use crate::accounting::NoiseKey;
use crate::arrays::to_numpy;
use crate::errors::OrRaise;

/// `n` samples of `fill` on `(key, stream)`, with the GIL released.
fn fill<T: Copy + Default + Send + numpy::Element>(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    n: usize,
    fill: impl FnOnce(&KeyedStream, &mut [T]) -> dpattn_core::Result<()> + Send,
) -> PyResult<Py<PyAny>> {
    let s = KeyedStream::new(&key.0, stream);
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| {
        crate::errors::to_py(dpattn_core::Error::AllocationFailed { what: "samples", elements: n })
    })?;
    out.resize(n, T::default());
    py.detach(|| fill(&s, &mut out)).or_raise()?;
    Ok(to_numpy(py, out, &[n])?.unbind())
}

/// `n` exact samples of the discrete Gaussian `N_Z(0, sigma²)`.
#[pyfunction]
pub(crate) fn discrete_gaussian(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    n: usize,
    sigma: f64,
) -> PyResult<Py<PyAny>> {
    let g = DiscreteGaussian::from_f64(sigma).or_raise()?;
    fill::<i64>(py, key, stream, n, |s, out| g.fill_keyed(s, 0, out))
}

/// `n` exact samples of the discrete Laplace `P(x) ∝ exp(-|x|/scale)`.
#[pyfunction]
pub(crate) fn discrete_laplace(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    n: usize,
    scale: f64,
) -> PyResult<Py<PyAny>> {
    let l = DiscreteLaplace::from_f64(scale).or_raise()?;
    fill::<i64>(py, key, stream, n, |s, out| l.fill_keyed(s, 0, out))
}

/// `n` floating-point Gaussian samples (Box–Muller): **not safe** for releasing private
/// values; for simulations only.
#[pyfunction]
pub(crate) fn gaussian_unsafe_float(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    n: usize,
    sigma: f64,
) -> PyResult<Py<PyAny>> {
    let g = Gaussian::new(sigma).or_raise()?;
    fill::<f64>(py, key, stream, n, |s, out| g.fill_keyed(s, 0, out))
}

/// The smallest σ of the Gaussian mechanism that is (ε, δ)-DP (analytic calibration).
#[pyfunction]
pub(crate) fn analytic_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> PyResult<f64> {
    dpattn_core::calibration::gaussian_mechanism::analytic_gaussian_sigma(
        epsilon,
        delta,
        sensitivity,
    )
    .or_raise()
}

/// The σ of the discrete Gaussian mechanism for an integer L2 sensitivity (CKS20).
#[pyfunction]
pub(crate) fn discrete_gaussian_sigma(epsilon: f64, delta: f64, sensitivity: u64) -> PyResult<f64> {
    dpattn_core::calibration::discrete_gaussian_mechanism::discrete_gaussian_sigma(
        epsilon,
        delta,
        sensitivity,
    )
    .or_raise()
}

/// The Laplace scale `sensitivity / epsilon`, rounded up.
#[pyfunction]
pub(crate) fn laplace_scale(sensitivity: f64, epsilon: f64) -> PyResult<f64> {
    dpattn_core::calibration::laplace_mechanism::laplace_scale(sensitivity, epsilon).or_raise()
}
