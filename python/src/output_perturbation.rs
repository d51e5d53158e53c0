//! DP cross-attention by output perturbation (`dpattn_core::output_perturbation`): public
//! queries over a private context; privacy unit one token (one key/value row in every
//! head); one Gaussian release of all query rows, on a public grid with exact integer noise
//! unless the caller names `"unsafe_float"`.

use dpattn_core::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention, output_perturbation_attention_keyed,
    output_perturbation_scratch_len,
};
use dpattn_core::session::Draw;
use dpattn_core::{BatchedMut, Element, Kernel, NoiseMode, PrivacyBudget, ScoreFn};
use numpy::Element as NpElement;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::accounting::{NoiseKey, Session, Source};
use crate::arrays::{Floats, floats, to_numpy, with_scratch};
use crate::attention::{Qkv, key_padding, same_dtype, scale_of};
use crate::errors::{OrRaise, invalid};

/// A noise mode from its Python name.
pub(crate) fn noise_mode(name: &str) -> PyResult<NoiseMode> {
    match name {
        "exact" => Ok(NoiseMode::Exact),
        "constant_time" => Ok(NoiseMode::ConstantTime),
        "unsafe_float" => Ok(NoiseMode::UnsafeFloat),
        _ => Err(invalid(
            "out_of_range",
            format!(
                "unknown noise_mode {name:?}; expected \"exact\", \"constant_time\" or \
                 \"unsafe_float\""
            ),
        )),
    }
}

fn score_fn(name: &str) -> PyResult<ScoreFn> {
    match name {
        "exp" => Ok(ScoreFn::Exp),
        "cosh" => Ok(ScoreFn::Cosh),
        _ => Err(invalid(
            "out_of_range",
            format!("unknown score {name:?}; expected \"exp\" or \"cosh\""),
        )),
    }
}

/// The public parameters shared by the session and keyed entry points.
struct Public {
    key_norm: f64,
    value_norm: f64,
    epsilon: f64,
    delta: f64,
    scale: Option<f64>,
    score: String,
    noise_mode: String,
}

fn release<T: Element + NpElement + Clone + Send + Sync>(
    py: Python<'_>,
    qkv: Qkv<'_, T>,
    public: &Public,
    padding: Option<&[bool]>,
    source: Source<'_>,
) -> PyResult<Py<PyAny>> {
    let params = OutputPerturbationParams {
        key_norm: public.key_norm,
        value_norm: public.value_norm,
        budget: PrivacyBudget::new(public.epsilon, public.delta).or_raise()?,
        scale: scale_of(public.scale),
        score: score_fn(&public.score)?,
        key_padding: padding,
        kernel: Kernel::Auto,
        noise_mode: noise_mode(&public.noise_mode)?,
    };
    let [b, h, _, d] = qkv.shapes[0];
    let d_v = qkv.shapes[2][3];
    let mut out = vec![T::from_f32(0.0); qkv.out_len()];
    let mut sigma = vec![0f64; b * h];
    py.detach(|| -> dpattn_core::Result<()> {
        let [q, k, v] = qkv.views()?;
        let len = output_perturbation_scratch_len(d, d_v)?;
        let o = BatchedMut::contiguous(&mut out, qkv.out_shape4())?;
        with_scratch(len, |scratch| match source {
            Source::Session(s) => {
                output_perturbation_attention(o, q, k, v, &params, s, &mut sigma, scratch)
            }
            Source::Keyed(key, stream) => output_perturbation_attention_keyed(
                o,
                q,
                k,
                v,
                &params,
                Draw { key, stream },
                None,
                &mut sigma,
                scratch,
            ),
        })
        .map(drop)
    })
    .or_raise()?;
    let out = to_numpy(py, out, &qkv.out_shape)?;
    let sigma = to_numpy(py, sigma, &qkv.lead)?;
    Ok(PyTuple::new(py, [out, sigma])?.into_any().unbind())
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    public: Public,
    padding: Option<&Bound<'_, PyAny>>,
    source: Source<'_>,
) -> PyResult<Py<PyAny>> {
    let padding = key_padding(padding)?;
    let (q, k, v) = (floats("q", q)?, floats("k", k)?, floats("v", v)?);
    same_dtype!(&q, &k, &v, |q, k, v| {
        release(py, Qkv::new(q, k, v)?, &public, padding.as_deref(), source)
    })
}

/// DP cross-attention by output perturbation through a session: returns `(out, sigma)`.
#[pyfunction]
#[pyo3(signature = (session, q, k, v, *, key_norm, value_norm, epsilon, delta, scale=None,
    score="exp".to_string(), key_padding=None, noise_mode="exact".to_string()))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn output_perturbation(
    py: Python<'_>,
    mut session: PyRefMut<'_, Session>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    key_norm: f64,
    value_norm: f64,
    epsilon: f64,
    delta: f64,
    scale: Option<f64>,
    score: String,
    key_padding: Option<&Bound<'_, PyAny>>,
    noise_mode: String,
) -> PyResult<Py<PyAny>> {
    let public = Public { key_norm, value_norm, epsilon, delta, scale, score, noise_mode };
    dispatch(py, q, k, v, public, key_padding, Source::Session(&mut session.0))
}

/// [`output_perturbation`] with an explicit key and stream and no ledger (replay, audit).
#[pyfunction]
#[pyo3(signature = (key, stream, q, k, v, *, key_norm, value_norm, epsilon, delta, scale=None,
    score="exp".to_string(), key_padding=None, noise_mode="exact".to_string()))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn output_perturbation_keyed(
    py: Python<'_>,
    key: &NoiseKey,
    stream: u64,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    key_norm: f64,
    value_norm: f64,
    epsilon: f64,
    delta: f64,
    scale: Option<f64>,
    score: String,
    key_padding: Option<&Bound<'_, PyAny>>,
    noise_mode: String,
) -> PyResult<Py<PyAny>> {
    let public = Public { key_norm, value_norm, epsilon, delta, scale, score, noise_mode };
    dispatch(py, q, k, v, public, key_padding, Source::Keyed(&key.0, stream))
}
