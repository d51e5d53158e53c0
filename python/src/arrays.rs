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

/// `obj` as a NumPy array, or a `TypeError` naming `name`.
fn untyped<'a, 'py>(
    name: &str,
    obj: &'a Bound<'py, PyAny>,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    obj.cast::<PyUntypedArray>().map_err(|_| {
        let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        PyTypeError::new_err(format!("{name} must be a numpy.ndarray, got {ty}"))
    })
}

fn dtype_name(a: &Bound<'_, PyUntypedArray>) -> String {
    a.dtype().str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into())
}

/// `obj` as a `float32`/`float64`/`float16` array.
pub(crate) fn floats<'py>(name: &str, obj: &Bound<'py, PyAny>) -> PyResult<Floats<'py>> {
    let a = untyped(name, obj)?;
    let py = obj.py();
    let dt = a.dtype();
    if dt.is_equiv_to(&f32::get_dtype(py)) {
        Ok(Floats::F32(obj.extract()?))
    } else if dt.is_equiv_to(&f64::get_dtype(py)) {
        Ok(Floats::F64(obj.extract()?))
    } else if dt.is_equiv_to(&f16::get_dtype(py)) {
        Ok(Floats::F16(obj.extract()?))
    } else {
        Err(PyTypeError::new_err(format!(
            "{name} has dtype {}; expected float32, float64 or float16",
            dtype_name(a)
        )))
    }
}

/// `obj` as an array of exactly `T` (`what` names the dtype in the error).
pub(crate) fn typed<'py, T: NpElement>(
    name: &str,
    what: &str,
    obj: &Bound<'py, PyAny>,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let a = untyped(name, obj)?;
    if !a.dtype().is_equiv_to(&T::get_dtype(obj.py())) {
        return Err(PyTypeError::new_err(format!(
            "{name} has dtype {}; expected {what}",
            dtype_name(a)
        )));
    }
    obj.extract()
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
