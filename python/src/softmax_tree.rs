//! Paper 001's softmax trees (`dpattn_core::softmax_tree_cross_attention`): `d + 1` noisy
//! segment-tree structures over the private keys in `[0, R]^d` and values in
//! `[−R_w, R_w]^d` (privacy unit: one token), released once with the recommended settings
//! (per-vector budget split, Hoeffding-net copies, the output clamps of docs/PAPERS.md
//! P1-X8); public queries are answered afterwards at no further cost.

use dpattn_core::PrivacyBudget;
use dpattn_core::session::Draw;
use dpattn_core::softmax_tree::{Copies, QueryPolicy, SoftmaxTreeParams, Temperature};
use dpattn_core::softmax_tree_cross_attention::{
    SoftmaxTreeCrossAttention as Core, SoftmaxTreeCrossAttentionParams,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::accounting::{NoiseKey, Session};
use crate::arrays::answer_rows;
use crate::errors::{OrRaise, invalid};
use crate::kv_sketch::with_matrices;
use crate::output_perturbation::noise_mode;

/// Released softmax trees.
#[pyclass(module = "dpattn", frozen)]
pub(crate) struct SoftmaxTreeCrossAttention {
    inner: Core,
    d: usize,
}

/// The public parameters, from the keyword arguments.
#[allow(clippy::too_many_arguments)]
fn params(
    radius: f64,
    weight_bound: f64,
    epsilon: f64,
    delta: f64,
    delta_prime: f64,
    eps_s: f64,
    temperature: Option<f64>,
    copies: Option<u64>,
    query_policy: &str,
    mode: &str,
    memory_limit_bytes: u64,
) -> PyResult<SoftmaxTreeCrossAttentionParams> {
    let budget = PrivacyBudget::new(epsilon, delta).or_raise()?;
    let mut tree = SoftmaxTreeParams::paper(radius, weight_bound, budget, delta_prime);
    tree.eps_s = eps_s;
    tree.temperature = temperature.map_or(Temperature::OneOverDim, Temperature::Custom);
    tree.query_policy = match query_policy {
        "reject" => QueryPolicy::Reject,
        "clamp" => QueryPolicy::Clamp,
        p => {
            let msg = format!("unknown query_policy {p:?}; expected \"reject\" or \"clamp\"");
            return Err(invalid("out_of_range", msg));
        }
    };
    tree.memory_limit_bytes = memory_limit_bytes;
    tree.noise_mode = noise_mode(mode)?;
    let mut p = SoftmaxTreeCrossAttentionParams::new(tree);
    if let Some(l) = copies {
        p.adaptive.copies = Copies::Fixed(l);
    }
    Ok(p)
}

#[pymethods]
impl SoftmaxTreeCrossAttention {
    /// One DP release through a session (charged its achieved `(ε, δ)`, kept for tokens).
    #[staticmethod]
    #[pyo3(signature = (session, keys, values, *, radius, weight_bound, epsilon, delta,
        delta_prime=1e-6, eps_s=0.01, temperature=None, copies=None, query_policy="reject",
        noise_mode="exact", memory_limit_bytes=1 << 30))]
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
        delta_prime: f64,
        eps_s: f64,
        temperature: Option<f64>,
        copies: Option<u64>,
        query_policy: &str,
        noise_mode: &str,
        memory_limit_bytes: u64,
    ) -> PyResult<Self> {
        let p = params(
            radius,
            weight_bound,
            epsilon,
            delta,
            delta_prime,
            eps_s,
            temperature,
            copies,
            query_policy,
            noise_mode,
            memory_limit_bytes,
        )?;
        let s = &mut session.0;
        let (inner, d) =
            with_matrices(py, keys, values, |k, v| Ok((Core::new(k, v, &p, s)?, k.cols())))?;
        Ok(Self { inner, d })
    }

    /// `release` with an explicit key and stream and no ledger (replay, audit).
    #[staticmethod]
    #[pyo3(signature = (key, stream, keys, values, *, radius, weight_bound, epsilon, delta,
        delta_prime=1e-6, eps_s=0.01, temperature=None, copies=None, query_policy="reject",
        noise_mode="exact", memory_limit_bytes=1 << 30))]
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
        delta_prime: f64,
        eps_s: f64,
        temperature: Option<f64>,
        copies: Option<u64>,
        query_policy: &str,
        noise_mode: &str,
        memory_limit_bytes: u64,
    ) -> PyResult<Self> {
        let p = params(
            radius,
            weight_bound,
            epsilon,
            delta,
            delta_prime,
            eps_s,
            temperature,
            copies,
            query_policy,
            noise_mode,
            memory_limit_bytes,
        )?;
        let draw = Draw { key: &key.0, stream };
        let (inner, d) = with_matrices(py, keys, values, |k, v| {
            Ok((Core::new_keyed(k, v, &p, draw, None)?, k.cols()))
        })?;
        Ok(Self { inner, d })
    }

    /// Estimates for public queries `(s_q, d)` in `[0, R]^d` → `(s_q, d)`.
    fn answer(&self, py: Python<'_>, queries: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        answer_rows(py, queries, self.d, |q, out| self.inner.query(q, out).map(drop))
    }

    /// The `(ε, δ)` the release achieves (what a session charges).
    #[getter]
    fn achieved_privacy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let b = self.inner.achieved_privacy().or_raise()?;
        let d = PyDict::new(py);
        d.set_item("epsilon", b.epsilon().get())?;
        d.set_item("delta", b.delta().get())?;
        Ok(d)
    }
}
