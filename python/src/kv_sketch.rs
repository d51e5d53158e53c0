//! The random-feature DP KV sketch (`dpattn_core::kv_sketch`): one DP release of a private
//! context (privacy unit: one token), then any number of public queries answered from it as
//! post-processing, at no further privacy cost.

use dpattn_core::kv_sketch::{self, KvSketchParams};
use dpattn_core::matrix_view::{MatMut, MatRef};
use dpattn_core::session::Draw;
use dpattn_core::{NoiseMode, PrivacyBudget};
use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;

use crate::accounting::{NoiseKey, Session};
use crate::arrays::{c_order, shape2, to_numpy, typed};
use crate::errors::{OrRaise, invalid};
use crate::output_perturbation::noise_mode;

/// A released KV sketch (or a noise-free one from `non_private`).
#[pyclass(module = "dpattn", frozen)]
pub(crate) struct KvSketch {
    inner: kv_sketch::KvSketch,
    features: usize,
    private: bool,
}

/// `base` with the feature clip, the feature seed (32 bytes) and the noise mode.
fn params(
    base: KvSketchParams,
    feature_clip: f64,
    feature_seed: &[u8],
    noise_mode: NoiseMode,
) -> PyResult<KvSketchParams> {
    let seed: [u8; 32] = feature_seed.try_into().map_err(|_| {
        invalid("out_of_range", format!("feature_seed has 32 bytes, got {}", feature_seed.len()))
    })?;
    Ok(KvSketchParams { feature_clip, feature_seed: seed, noise_mode, ..base })
}

/// Runs `f` on the keys and values as float64 matrices, with the GIL released.
pub(crate) fn with_matrices<R: Send>(
    py: Python<'_>,
    keys: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    f: impl FnOnce(MatRef<'_, f64>, MatRef<'_, f64>) -> dpattn_core::Result<R> + Send,
) -> PyResult<R> {
    let (k, v) =
        (typed::<f64>("keys", "float64", keys)?, typed::<f64>("values", "float64", values)?);
    let ([n, d], [n_v, d_v]) = (shape2("keys", k.shape())?, shape2("values", v.shape())?);
    let (kd, vd) = (c_order(&k), c_order(&v));
    py.detach(|| {
        let km = MatRef::from_row_major(&kd, n, d)?;
        let vm = MatRef::from_row_major(&vd, n_v, d_v)?;
        if n_v != n {
            return Err(dpattn_core::Error::ShapeMismatch {
                arg: "values",
                axis: "rows",
                expected: n,
                got: n_v,
            });
        }
        f(km, vm)
    })
    .or_raise()
}

#[pymethods]
impl KvSketch {
    /// One DP release through a session (charged to its ledger, kept for tokens).
    #[staticmethod]
    #[pyo3(signature = (session, keys, values, *, key_norm, value_norm, scale, features,
        epsilon, delta, feature_clip=kv_sketch::DEFAULT_CLIP, feature_seed=&[0u8; 32][..],
        noise_mode="exact"))]
    #[allow(clippy::too_many_arguments)]
    fn release(
        py: Python<'_>,
        mut session: PyRefMut<'_, Session>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        key_norm: f64,
        value_norm: f64,
        scale: f64,
        features: usize,
        epsilon: f64,
        delta: f64,
        feature_clip: f64,
        feature_seed: &[u8],
        noise_mode: &str,
    ) -> PyResult<Self> {
        let budget = PrivacyBudget::new(epsilon, delta).or_raise()?;
        let mode = self::noise_mode(noise_mode)?;
        let p = params(
            KvSketchParams::new(key_norm, value_norm, scale, features, budget),
            feature_clip,
            feature_seed,
            mode,
        )?;
        let s = &mut session.0;
        let inner = with_matrices(py, keys, values, |k, v| kv_sketch::KvSketch::new(k, v, &p, s))?;
        Ok(Self { inner, features, private: true })
    }

    /// `release` with an explicit key and stream and no ledger (replay, audit).
    #[staticmethod]
    #[pyo3(signature = (key, stream, keys, values, *, key_norm, value_norm, scale, features,
        epsilon, delta, feature_clip=kv_sketch::DEFAULT_CLIP, feature_seed=&[0u8; 32][..],
        noise_mode="exact"))]
    #[allow(clippy::too_many_arguments)]
    fn release_keyed(
        py: Python<'_>,
        key: &NoiseKey,
        stream: u64,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        key_norm: f64,
        value_norm: f64,
        scale: f64,
        features: usize,
        epsilon: f64,
        delta: f64,
        feature_clip: f64,
        feature_seed: &[u8],
        noise_mode: &str,
    ) -> PyResult<Self> {
        let budget = PrivacyBudget::new(epsilon, delta).or_raise()?;
        let mode = self::noise_mode(noise_mode)?;
        let p = params(
            KvSketchParams::new(key_norm, value_norm, scale, features, budget),
            feature_clip,
            feature_seed,
            mode,
        )?;
        let draw = Draw { key: &key.0, stream };
        let inner = with_matrices(py, keys, values, |k, v| {
            kv_sketch::KvSketch::new_keyed(k, v, &p, draw, None)
        })?;
        Ok(Self { inner, features, private: true })
    }

    /// The noise-free sketch (**not private**).
    #[staticmethod]
    #[pyo3(signature = (keys, values, *, key_norm, value_norm, scale, features,
        feature_clip=kv_sketch::DEFAULT_CLIP, feature_seed=&[0u8; 32][..]))]
    #[allow(clippy::too_many_arguments)]
    fn non_private(
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        key_norm: f64,
        value_norm: f64,
        scale: f64,
        features: usize,
        feature_clip: f64,
        feature_seed: &[u8],
    ) -> PyResult<Self> {
        // The budget is not used by a noise-free sketch; any valid one passes the checks.
        let budget = PrivacyBudget::new(1.0, 0.5).or_raise()?;
        let p = params(
            KvSketchParams::new(key_norm, value_norm, scale, features, budget),
            feature_clip,
            feature_seed,
            NoiseMode::Exact,
        )?;
        let inner =
            with_matrices(py, keys, values, |k, v| kv_sketch::KvSketch::non_private(k, v, &p))?;
        Ok(Self { inner, features, private: false })
    }

    /// Attention estimates for public query rows `(s_q, d)` → `(s_q, d_v)`.
    fn answer(&self, py: Python<'_>, queries: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let q = typed::<f64>("queries", "float64", queries)?;
        let [rows, d] = shape2("queries", q.shape())?;
        let d_v = self.d_v();
        let qd = c_order(&q);
        let mut out = vec![0f64; rows * d_v];
        py.detach(|| {
            let qm = MatRef::from_row_major(&qd, rows, d)?;
            self.inner.answer(qm, MatMut::from_row_major(&mut out, rows, d_v)?)
        })
        .or_raise()?;
        Ok(to_numpy(py, out, &[rows, d_v])?.unbind())
    }

    /// The released `features × (d_v + 1)` matrix.
    #[getter]
    fn sketch(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = self.inner.sketch().to_vec();
        Ok(to_numpy(py, s, &[self.features, self.d_v() + 1])?.unbind())
    }

    /// Whether this sketch is a DP release (false for `non_private`).
    #[getter]
    fn private(&self) -> bool {
        self.private
    }

    fn __repr__(&self) -> String {
        format!(
            "KvSketch(features={}, d_v={}, private={})",
            self.features,
            self.d_v(),
            if self.private { "True" } else { "False" }
        )
    }
}

impl KvSketch {
    fn d_v(&self) -> usize {
        self.inner.sketch().len() / self.features - 1
    }
}
