//! DP-Forward (paper 003, `dpattn_core::dp_forward`): clip each sequence's hidden matrix
//! and add i.i.d. Gaussian noise calibrated by the analytic matrix Gaussian mechanism, for
//! local DP of one sequence (or of `c` tokens at the row-local embedding position). Each
//! sequence of a batch is one input of the neighbour relation; the release is on a public
//! grid with exact integer noise unless the caller names `"unsafe_float"`.

use dpattn_core::PrivacyBudget;
use dpattn_core::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, SubLayer, dp_forward as core_dp_forward, dp_forward_keyed,
};
use dpattn_core::matrix_view::MatMut;
use dpattn_core::sampling::NoiseFloat;
use dpattn_core::session::Draw;
use numpy::{Element as NpElement, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::accounting::{NoiseKey, Session, Source};
use crate::arrays::{Floats, c_order, floats, to_numpy};
use crate::errors::{OrRaise, invalid};
use crate::output_perturbation::noise_mode;

fn unknown(what: &str, name: &str, allowed: &str) -> PyErr {
    invalid("out_of_range", format!("unknown {what} {name:?}; expected {allowed}"))
}

/// `"embedding"`, `"pooled"` or `"encoder:<layer>:<mha|add_norm1|ffn|add_norm2>"`.
fn position(name: &str) -> PyResult<NoisePosition> {
    const ALLOWED: &str =
        "\"embedding\", \"pooled\" or \"encoder:<layer>:<mha|add_norm1|ffn|add_norm2>\"";
    match name {
        "embedding" => return Ok(NoisePosition::Embedding),
        "pooled" => return Ok(NoisePosition::Pooled),
        _ => {}
    }
    let mut parts = name.split(':');
    let (Some("encoder"), Some(layer), Some(sub), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(unknown("position", name, ALLOWED));
    };
    let layer = layer.parse().map_err(|_| unknown("position", name, ALLOWED))?;
    let sub = match sub {
        "mha" => SubLayer::Mha,
        "add_norm1" => SubLayer::AddNorm1,
        "ffn" => SubLayer::Ffn,
        "add_norm2" => SubLayer::AddNorm2,
        _ => return Err(unknown("position", name, ALLOWED)),
    };
    Ok(NoisePosition::Encoder { layer, sub })
}

fn neighbours(name: &str) -> PyResult<Neighbours> {
    if name == "sequence" {
        return Ok(Neighbours::Sequence);
    }
    match name.strip_prefix("tokens:").and_then(|c| c.parse().ok()) {
        Some(c) => Ok(Neighbours::Tokens(c)),
        None => Err(unknown("neighbours", name, "\"sequence\" or \"tokens:<c>\"")),
    }
}

/// The public parameters of a release, from the keyword arguments.
struct Public<'a> {
    epsilon: f64,
    delta: f64,
    clip_norm: f64,
    region: &'a str,
    mode: &'a str,
    neighbours: &'a str,
    position: &'a str,
    releases: u32,
    noise_mode: &'a str,
}

impl Public<'_> {
    fn params(&self, tokens: usize, dim: usize) -> PyResult<DpForwardParams> {
        let region = match self.region {
            "frobenius" => ClipRegion::Frobenius,
            "rows" => ClipRegion::Rows,
            r => return Err(unknown("region", r, "\"frobenius\" or \"rows\"")),
        };
        let mode = match self.mode {
            "clip" => ClipMode::Clip,
            "normalize" => ClipMode::Normalize,
            m => return Err(unknown("mode", m, "\"clip\" or \"normalize\"")),
        };
        let params = DpForwardParams {
            budget: PrivacyBudget::new(self.epsilon, self.delta).or_raise()?,
            releases: self.releases,
            clip_norm: self.clip_norm,
            region,
            mode,
            neighbours: neighbours(self.neighbours)?,
            position: position(self.position)?,
            tokens,
            dim,
            rule: SensitivityRule::Derived,
            noise_mode: noise_mode(self.noise_mode)?,
        };
        params.validate().or_raise()?;
        Ok(params)
    }
}

fn release<T: NoiseFloat + NpElement + Clone + Send>(
    py: Python<'_>,
    x: &PyReadonlyArrayDyn<'_, T>,
    public: &Public<'_>,
    source: Source<'_>,
) -> PyResult<Py<PyAny>> {
    let shape = x.shape().to_vec();
    let (rows, tokens, dim) = match shape[..] {
        [t, d] => (t, t, d),
        [b, t, d] => (b * t, t, d),
        _ => {
            return Err(invalid(
                "shape_mismatch",
                format!(
                    "x has {} dimensions; expected 2 (tokens, dim) or 3 (batch, tokens, dim)",
                    shape.len()
                ),
            ));
        }
    };
    let params = public.params(tokens, dim)?;
    let mut out = c_order(x).into_owned();
    let report = py
        .detach(|| {
            let m = MatMut::from_row_major(&mut out, rows, dim)?;
            match source {
                Source::Session(s) => core_dp_forward(m, &params, &NoiseFactors::Iid, s, &mut []),
                Source::Keyed(key, stream) => dp_forward_keyed(
                    m,
                    &params,
                    &NoiseFactors::Iid,
                    Draw { key, stream },
                    0,
                    None,
                    &mut [],
                ),
            }
        })
        .or_raise()?;
    let floor = params.noise_floor().or_raise()?;
    let out = to_numpy(py, out, &shape)?;
    let resolution = report.resolution.into_pyobject(py)?.into_any();
    let floor = floor.into_pyobject(py)?.into_any();
    Ok(PyTuple::new(py, [out, floor, resolution])?.into_any().unbind())
}

fn dispatch(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    public: &Public<'_>,
    source: Source<'_>,
) -> PyResult<Py<PyAny>> {
    match floats("x", x)? {
        Floats::F32(a) => release(py, &a, public, source),
        Floats::F64(a) => release(py, &a, public, source),
        Floats::F16(_) => {
            Err(PyTypeError::new_err("x has dtype float16; expected float32 or float64"))
        }
    }
}

/// DP-Forward through a session: returns `(x_released, noise_floor, resolution)`.
#[pyfunction]
#[pyo3(signature = (session, x, *, epsilon, delta, clip_norm, region="frobenius",
    mode="clip", neighbours="sequence", position="embedding", releases=1, noise_mode="exact"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dp_forward(
    py: Python<'_>,
    mut session: PyRefMut<'_, Session>,
    x: &Bound<'_, PyAny>,
    epsilon: f64,
    delta: f64,
    clip_norm: f64,
    region: &str,
    mode: &str,
    neighbours: &str,
    position: &str,
    releases: u32,
    noise_mode: &str,
) -> PyResult<Py<PyAny>> {
    let public = Public {
        epsilon,
        delta,
        clip_norm,
        region,
        mode,
        neighbours,
        position,
        releases,
        noise_mode,
    };
    dispatch(py, x, &public, Source::Session(&mut session.0))
}

/// [`dp_forward`] with an explicit key and stream and no ledger (replay, audit).
#[pyfunction]
#[pyo3(name = "dp_forward_keyed", signature = (key, stream, x, *, epsilon, delta, clip_norm, region="frobenius",
    mode="clip", neighbours="sequence", position="embedding", releases=1, noise_mode="exact"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dp_forward_keyed_py(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    x: &Bound<'_, PyAny>,
    epsilon: f64,
    delta: f64,
    clip_norm: f64,
    region: &str,
    mode: &str,
    neighbours: &str,
    position: &str,
    releases: u32,
    noise_mode: &str,
) -> PyResult<Py<PyAny>> {
    let public = Public {
        epsilon,
        delta,
        clip_norm,
        region,
        mode,
        neighbours,
        position,
        releases,
        noise_mode,
    };
    dispatch(py, x, &public, Source::Keyed(&key.0, stream))
}
