//! Exact attention on NumPy arrays (no privacy): `dpattn_core::attention`, computed in
//! float32 whatever the input dtype, the result in q's dtype.

use std::borrow::Cow;

use dpattn_core::attention::{AttentionParams, attention_scratch_len, attention_threaded};
use dpattn_core::{BatchedMut, BatchedRef, Element, Kernel, Mask, Scale, ScoreFn};
use numpy::{Element as NpElement, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::arrays::{Floats, c_order, floats, shape4, to_numpy, typed, with_scratch};
use crate::errors::{OrRaise, invalid};

/// Runs `$body` with `$q`, `$k`, `$v` bound to arrays of one element type, or raises a
/// `TypeError` when their dtypes differ.
macro_rules! same_dtype {
    ($q:expr, $k:expr, $v:expr, |$a:ident, $b:ident, $c:ident| $body:expr) => {
        match ($q, $k, $v) {
            (Floats::F32($a), Floats::F32($b), Floats::F32($c)) => $body,
            (Floats::F64($a), Floats::F64($b), Floats::F64($c)) => $body,
            (Floats::F16($a), Floats::F16($b), Floats::F16($c)) => $body,
            _ => Err(pyo3::exceptions::PyTypeError::new_err("q, k and v must have the same dtype")),
        }
    };
}
pub(crate) use same_dtype;

/// Query, key and value arrays of one element type, in C order, with their 4-D shapes.
pub(crate) struct Qkv<'a, T: Clone> {
    pub(crate) q: Cow<'a, [T]>,
    pub(crate) k: Cow<'a, [T]>,
    pub(crate) v: Cow<'a, [T]>,
    pub(crate) shapes: [[usize; 4]; 3],
    /// q's shape with its last dimension replaced by `d_v`.
    pub(crate) out_shape: Vec<usize>,
    /// q's leading (batch/head) dimensions.
    pub(crate) lead: Vec<usize>,
}

impl<'a, T: NpElement + Clone> Qkv<'a, T> {
    pub(crate) fn new(
        q: &'a PyReadonlyArrayDyn<'_, T>,
        k: &'a PyReadonlyArrayDyn<'_, T>,
        v: &'a PyReadonlyArrayDyn<'_, T>,
    ) -> PyResult<Self> {
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        if qs.len() != ks.len() || qs.len() != vs.len() {
            return Err(invalid(
                "shape_mismatch",
                format!(
                    "q, k and v must have the same number of dimensions, got {}, {} and {}",
                    qs.len(),
                    ks.len(),
                    vs.len()
                ),
            ));
        }
        let shapes = [shape4("q", qs)?, shape4("k", ks)?, shape4("v", vs)?];
        let mut out_shape = qs.to_vec();
        *out_shape.last_mut().expect("at least 2 dimensions") = shapes[2][3];
        let lead = qs[..qs.len() - 2].to_vec();
        Ok(Self { q: c_order(q), k: c_order(k), v: c_order(v), shapes, out_shape, lead })
    }

    pub(crate) fn out_len(&self) -> usize {
        self.out_shape.iter().product()
    }

    pub(crate) fn out_shape4(&self) -> [usize; 4] {
        let [b, h, s, _] = self.shapes[0];
        [b, h, s, self.shapes[2][3]]
    }

    /// The three views (the core checks that the shapes agree).
    pub(crate) fn views(&self) -> dpattn_core::Result<[BatchedRef<'_, T>; 3]>
    where
        T: Element,
    {
        Ok([
            BatchedRef::contiguous(&self.q, self.shapes[0])?,
            BatchedRef::contiguous(&self.k, self.shapes[1])?,
            BatchedRef::contiguous(&self.v, self.shapes[2])?,
        ])
    }
}

/// The logit scale: `1/√d` unless given.
pub(crate) fn scale_of(scale: Option<f64>) -> Scale {
    scale.map_or(Scale::InvSqrtDim, Scale::Custom)
}

/// A boolean key-padding mask, flattened (`(batch, s_k)`, or `(s_k,)` without a batch).
pub(crate) fn key_padding(mask: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<bool>>> {
    let Some(m) = mask else { return Ok(None) };
    let a = typed::<bool>("key_padding", "bool", m)?;
    if a.ndim() > 2 {
        return Err(invalid(
            "shape_mismatch",
            format!("key_padding has {} dimensions; expected (batch, s_k) or (s_k,)", a.ndim()),
        ));
    }
    Ok(Some(c_order(&a).into_owned()))
}

fn run<T: Element + NpElement + Clone + Send + Sync>(
    py: Python<'_>,
    qkv: Qkv<'_, T>,
    params: &AttentionParams<'_>,
    threads: usize,
) -> PyResult<Py<PyAny>> {
    let [_, _, _, d] = qkv.shapes[0];
    let d_v = qkv.shapes[2][3];
    let mut out = vec![T::from_f32(0.0); qkv.out_len()];
    py.detach(|| -> dpattn_core::Result<()> {
        let [q, k, v] = qkv.views()?;
        let per = attention_scratch_len(d, d_v)?;
        let len = dpattn_core::error::mul_size(per, threads.max(1), "scratch")?;
        let out_view = BatchedMut::contiguous(&mut out, qkv.out_shape4())?;
        with_scratch(len, |s| attention_threaded(out_view, q, k, v, params, threads, s))
    })
    .or_raise()?;
    Ok(to_numpy(py, out, &qkv.out_shape)?.unbind())
}

/// Exact attention `softmax(scale·q·kᵀ + mask)·v` (no privacy), computed in float32; the
/// result has q's dtype.
#[pyfunction]
#[pyo3(signature = (q, k, v, *, scale=None, causal=false, key_padding=None, threads=1))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    scale: Option<f64>,
    causal: bool,
    key_padding: Option<&Bound<'_, PyAny>>,
    threads: usize,
) -> PyResult<Py<PyAny>> {
    let padding = self::key_padding(key_padding)?;
    let params = AttentionParams {
        mask: Mask { causal, key_padding: padding.as_deref() },
        scale: scale_of(scale),
        score: ScoreFn::Exp,
        kernel: Kernel::Auto,
    };
    let (q, k, v) = (floats("q", q)?, floats("k", k)?, floats("v", v)?);
    same_dtype!(&q, &k, &v, |q, k, v| run(py, Qkv::new(q, k, v)?, &params, threads))
}
