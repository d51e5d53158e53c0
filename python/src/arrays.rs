//! NumPy arrays in and out: dtype checks (a wrong dtype is a `TypeError`, never a
//! reinterpretation), shapes as the core's `[batch, heads, seq, dim]`, and C-order data
//! (borrowed when the array is C-contiguous, copied once otherwise: any strides, including
//! negative ones, are accepted).

use std::borrow::Cow;

use half::f16;
use numpy::ndarray::{Array, IxDyn};
use numpy::{
    Element as NpElement, IntoPyArray, PyArrayDescrMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::errors::invalid;

/// A floating-point array of one of the dtypes the kernels take.
pub(crate) enum Floats<'py> {
    /// `float32`.
    F32(PyReadonlyArrayDyn<'py, f32>),
    /// `float64`.
    F64(PyReadonlyArrayDyn<'py, f64>),
    /// `float16`.
    F16(PyReadonlyArrayDyn<'py, f16>),
}

/// `obj` as a NumPy array: an ndarray itself, or any CPU object with `__dlpack__` (a PyTorch
/// CPU tensor, say) viewed through `numpy.from_dlpack` without a copy. Else a `TypeError`
/// naming `name`.
fn ndarray<'py>(name: &str, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return Ok(a.clone());
    }
    if obj.hasattr("__dlpack__")? {
        let np = obj.py().import("numpy")?;
        let a = np.call_method1("from_dlpack", (obj,)).map_err(|e| {
            PyTypeError::new_err(format!(
                "{name}: this build reads CPU arrays only, through DLPack for non-NumPy \
                 tensors, and numpy.from_dlpack refused it ({e}); move it to the CPU as \
                 float32/float64/float16 (bfloat16 has no NumPy dtype) without autograd \
                 (tensor.detach().cpu())"
            ))
        })?;
        return Ok(a.cast_into::<PyUntypedArray>()?);
    }
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Err(PyTypeError::new_err(format!(
        "{name} must be a numpy.ndarray (or a CPU tensor with __dlpack__), got {ty}"
    )))
}

fn dtype_name(a: &Bound<'_, PyUntypedArray>) -> String {
    a.dtype().str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into())
}

/// `obj` as a `float32`/`float64`/`float16` array.
pub(crate) fn floats<'py>(name: &str, obj: &Bound<'py, PyAny>) -> PyResult<Floats<'py>> {
    let a = ndarray(name, obj)?;
    let py = obj.py();
    let dt = a.dtype();
    if dt.is_equiv_to(&f32::get_dtype(py)) {
        Ok(Floats::F32(a.extract()?))
    } else if dt.is_equiv_to(&f64::get_dtype(py)) {
        Ok(Floats::F64(a.extract()?))
    } else if dt.is_equiv_to(&f16::get_dtype(py)) {
        Ok(Floats::F16(a.extract()?))
    } else {
        Err(PyTypeError::new_err(format!(
            "{name} has dtype {}; expected float32, float64 or float16",
            dtype_name(&a)
        )))
    }
}

/// `obj` as an array of exactly `T` (`what` names the dtype in the error).
pub(crate) fn typed<'py, T: NpElement>(
    name: &str,
    what: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let a = ndarray(name, obj)?;
    if !a.dtype().is_equiv_to(&T::get_dtype(obj.py())) {
        return Err(PyTypeError::new_err(format!(
            "{name} has dtype {}; expected {what}",
            dtype_name(&a)
        )));
    }
    a.extract()
}

/// The elements in C order: borrowed when the array is C-contiguous, else one copy.
pub(crate) fn c_order<'a, T: NpElement + Clone>(a: &'a PyReadonlyArrayDyn<'_, T>) -> Cow<'a, [T]> {
    if a.is_c_contiguous()
        && let Ok(s) = a.as_slice()
    {
        return Cow::Borrowed(s);
    }
    Cow::Owned(a.as_array().iter().cloned().collect())
}

/// `shape` (2, 3 or 4 dimensions) as `[batch, heads, seq, dim]`.
pub(crate) fn shape4(name: &str, shape: &[usize]) -> PyResult<[usize; 4]> {
    match *shape {
        [s, d] => Ok([1, 1, s, d]),
        [h, s, d] => Ok([1, h, s, d]),
        [b, h, s, d] => Ok([b, h, s, d]),
        _ => Err(invalid(
            "shape_mismatch",
            format!(
                "{name} has {} dimensions; expected 2 (seq, dim), 3 (heads, seq, dim) or 4 \
                 (batch, heads, seq, dim)",
                shape.len()
            ),
        )),
    }
}

/// `shape` as `[rows, cols]`.
pub(crate) fn shape2(name: &str, shape: &[usize]) -> PyResult<[usize; 2]> {
    match *shape {
        [r, c] => Ok([r, c]),
        _ => Err(invalid(
            "shape_mismatch",
            format!("{name} has {} dimensions; expected 2 (rows, cols)", shape.len()),
        )),
    }
}

/// A new array of `shape` holding `data` (C order).
pub(crate) fn to_numpy<'py, T: NpElement>(
    py: Python<'py>,
    data: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let a = Array::from_shape_vec(IxDyn(shape), data)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py).into_any())
}

thread_local! {
    /// Kernel scratch reused across calls on this thread (its content does not matter to
    /// the kernels); zeroing a fresh buffer per call cost more than a small attention.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on at least `len` elements of this thread's scratch.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            if s.len() < len {
                s.resize(len, 0.0);
            }
            f(&mut s[..len])
        }
        // Re-entered on this thread (not done by this crate): a buffer of its own.
        Err(_) => f(&mut vec![0f32; len]),
    })
}

/// Answers the public `queries` (a float64 `(rows, d)` array) row by row with `query`, which
/// writes one `d`-element output row, with the GIL released: the `(rows, d)` result.
pub(crate) fn answer_rows(
    py: Python<'_>,
    queries: &Bound<'_, PyAny>,
    d: usize,
    query: impl Fn(&[f64], &mut [f64]) -> dpattn_core::Result<()> + Sync,
) -> PyResult<Py<PyAny>> {
    let q = typed::<f64>("queries", "float64", queries)?;
    let [rows, cols] = shape2("queries", q.shape())?;
    let qd = c_order(&q);
    let mut out = vec![0f64; rows * d];
    py.detach(|| -> dpattn_core::Result<()> {
        if cols != d {
            return Err(dpattn_core::Error::ShapeMismatch {
                arg: "queries",
                axis: "cols",
                expected: d,
                got: cols,
            });
        }
        for (qr, o) in qd.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            query(qr, o)?;
        }
        Ok(())
    })
    .map_err(crate::errors::to_py)?;
    Ok(to_numpy(py, out, &[rows, d])?.unbind())
}
