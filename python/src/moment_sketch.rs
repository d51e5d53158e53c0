//! Paper 001's moment sketch (`dpattn_core::moment_sketch`): one DP release of a private
//! context's keys in `[0, R]^d` and values in `[−R_w, R_w]^d` (privacy unit: one token) as a
//! noisy Taylor-feature sketch of the softmax kernel; any number of public queries are
//! answered from it afterwards.

use dpattn_core::PrivacyBudget;
use dpattn_core::moment_sketch::{self, MomentSketchParams, SketchNoise};
use dpattn_core::session::Draw;
use dpattn_core::softmax_tree::{QueryPolicy, Temperature};
use pyo3::prelude::*;

use crate::accounting::{NoiseKey, Session};
use crate::arrays::{answer_rows, to_numpy};
use crate::errors::{OrRaise, invalid};
use crate::kv_sketch::with_matrices;
use crate::output_perturbation::noise_mode;

/// A released moment sketch.
#[pyclass(module = "dpattn", frozen)]
pub(crate) struct MomentSketch {
    inner: moment_sketch::MomentSketch,
    d: usize,
}

/// The public parameters, from the keyword arguments.
#[allow(clippy::too_many_arguments)]
fn params(
    radius: f64,
    weight_bound: f64,
    epsilon: f64,
    delta: f64,
    eps_s: f64,
    temperature: Option<f64>,
    noise: &str,
    query_policy: &str,
    clamp_outputs: bool,
    mode: &str,
    memory_limit_bytes: u64,
) -> PyResult<MomentSketchParams> {
    let budget = PrivacyBudget::new(epsilon, delta).or_raise()?;
    let noise = match noise {
        "gaussian" => SketchNoise::Gaussian,
        "laplace" => SketchNoise::Laplace,
        n => {
            let msg = format!("unknown noise {n:?}; expected \"gaussian\" or \"laplace\"");
            return Err(invalid("out_of_range", msg));
        }
    };
    let query_policy = match query_policy {
        "reject" => QueryPolicy::Reject,
        "clamp" => QueryPolicy::Clamp,
        p => {
            let msg = format!("unknown query_policy {p:?}; expected \"reject\" or \"clamp\"");
            return Err(invalid("out_of_range", msg));
        }
    };
    Ok(MomentSketchParams {
        eps_s,
        temperature: temperature.map_or(Temperature::OneOverDim, Temperature::Custom),
        noise,
        query_policy,
        clamp_outputs,
        noise_mode: noise_mode(mode)?,
        memory_limit_bytes,
        ..MomentSketchParams::new(radius, weight_bound, budget)
    })
}

#[pymethods]
impl MomentSketch {
    /// One DP release through a session (charged to its ledger, kept for tokens).
    #[staticmethod]
    #[pyo3(signature = (session, keys, values, *, radius, weight_bound, epsilon, delta,
        eps_s=0.01, temperature=None, noise="gaussian", query_policy="reject",
        clamp_outputs=true, noise_mode="exact", memory_limit_bytes=1 << 30))]
    #[allow(clippy::too_many_arguments)]
    fn release(
        py: Python<'_>,
        mut session: PyRefMut<'_, Session>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        radius: f64,
        weight_bound: f64,
        epsilon: f64,
        delta: f64,
        eps_s: f64,
        temperature: Option<f64>,
        noise: &str,
        query_policy: &str,
        clamp_outputs: bool,
        noise_mode: &str,
        memory_limit_bytes: u64,
    ) -> PyResult<Self> {
        let p = params(
            radius,
            weight_bound,
            epsilon,
            delta,
            eps_s,
            temperature,
            noise,
            query_policy,
            clamp_outputs,
            noise_mode,
            memory_limit_bytes,
        )?;
        let s = &mut session.0;
        let (inner, d) = with_matrices(py, keys, values, |k, v| {
            Ok((moment_sketch::MomentSketch::new(k, v, &p, s)?, k.cols()))
        })?;
        Ok(Self { inner, d })
    }

    /// `release` with an explicit key and stream and no ledger (replay, audit).
    #[staticmethod]
    #[pyo3(signature = (key, stream, keys, values, *, radius, weight_bound, epsilon, delta,
        eps_s=0.01, temperature=None, noise="gaussian", query_policy="reject",
        clamp_outputs=true, noise_mode="exact", memory_limit_bytes=1 << 30))]
    #[allow(clippy::too_many_arguments)]
    fn release_keyed(
        py: Python<'_>,
        key: &NoiseKey,
        stream: u64,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        radius: f64,
        weight_bound: f64,
        epsilon: f64,
        delta: f64,
        eps_s: f64,
        temperature: Option<f64>,
        noise: &str,
        query_policy: &str,
        clamp_outputs: bool,
        noise_mode: &str,
        memory_limit_bytes: u64,
    ) -> PyResult<Self> {
        let p = params(
            radius,
            weight_bound,
            epsilon,
            delta,
            eps_s,
            temperature,
            noise,
            query_policy,
            clamp_outputs,
            noise_mode,
            memory_limit_bytes,
        )?;
        let draw = Draw { key: &key.0, stream };
        let (inner, d) = with_matrices(py, keys, values, |k, v| {
            Ok((moment_sketch::MomentSketch::new_keyed(k, v, &p, draw, None)?, k.cols()))
        })?;
        Ok(Self { inner, d })
    }

    /// Attention estimates for public query rows `(s_q, d)` in `[0, R]^d` → `(s_q, d)`.
    fn answer(&self, py: Python<'_>, queries: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        answer_rows(py, queries, self.d, |q, out| self.inner.query(q, out).map(drop))
    }

    /// The released sketch (features × (d + 1)).
    #[getter]
    fn sketch(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = self.inner.sketch().to_vec();
        let rows = s.len() / (self.d + 1);
        Ok(to_numpy(py, s, &[rows, self.d + 1])?.unbind())
    }

    fn __repr__(&self) -> String {
        format!("MomentSketch(d={}, features={})", self.d, self.inner.sketch().len() / (self.d + 1))
    }
}
