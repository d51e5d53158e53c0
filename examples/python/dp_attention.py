"""dpattn from Python through ctypes on NumPy arrays (no compiled extension needed).

Loads the shared library (``$DPATTN_LIB``, else ``target/release/libdpattn_ffi.so``),
draws keyed Gaussian inputs, runs exact attention on NumPy buffers without copies, checks
it against a NumPy float64 reference, calibrates a Gaussian mechanism, keeps a ledger, and
shows that bad input comes back as a status code with a message.

    python examples/python/dp_attention.py

GPU tensors: the CUDA entry points of the C ABI (issue 8/9) are not part of this build;
once they are, the same pattern applies to ``tensor.data_ptr()`` and
``torch.cuda.current_stream().cuda_stream``.
"""

import ctypes as C
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
LIB = Path(os.environ.get("DPATTN_LIB", ROOT / "target" / "release" / "libdpattn_ffi.so"))

DTYPE_F32, DTYPE_F64 = 0, 1
STATUS_OK, STATUS_NON_FINITE, STATUS_SCRATCH_TOO_SMALL = 0, 4, 6
STATUS_ALIASING, STATUS_INVALID_HANDLE = 15, 16


class Tensor4(C.Structure):
    """dpattn_tensor4 / dpattn_tensor4_mut (same layout)."""

    _fields_ = [
        ("data", C.c_void_p),
        ("len", C.c_size_t),
        ("dtype", C.c_uint32),
        ("shape", C.c_size_t * 4),
        ("strides", C.c_size_t * 4),
    ]


class Key(C.Structure):
    _fields_ = [("bytes", C.c_uint8 * 32)]


def load():
    lib = C.CDLL(str(LIB))
    lib.dpattn_version.restype = C.c_char_p
    lib.dpattn_status_str.restype = C.c_char_p
    lib.dpattn_status_str.argtypes = [C.c_uint32]
    lib.dpattn_last_error_message.restype = C.c_size_t
    lib.dpattn_last_error_message.argtypes = [C.c_char_p, C.c_size_t]
    status = C.c_uint32
    lib.dpattn_fill_gaussian.restype = status
    lib.dpattn_fill_gaussian.argtypes = [
        C.POINTER(Key), C.c_uint64, C.c_uint64, C.c_double, C.c_uint32, C.c_void_p, C.c_size_t,
    ]
    lib.dpattn_attention_scratch_len.restype = status
    lib.dpattn_attention_scratch_len.argtypes = [C.c_size_t, C.c_size_t, C.POINTER(C.c_size_t)]
    lib.dpattn_attention.restype = status
    lib.dpattn_attention.argtypes = [C.POINTER(Tensor4)] * 4 + [C.c_void_p, C.c_void_p, C.c_size_t]
    lib.dpattn_analytic_gaussian_sigma.restype = status
    lib.dpattn_analytic_gaussian_sigma.argtypes = [C.c_double] * 3 + [C.POINTER(C.c_double)]
    lib.dpattn_ledger_new_approx.restype = status
    lib.dpattn_ledger_new_approx.argtypes = [C.c_double, C.c_double, C.POINTER(C.c_void_p)]
    lib.dpattn_ledger_charge_approx.restype = status
    lib.dpattn_ledger_charge_approx.argtypes = [C.c_void_p, C.c_double, C.c_double]
    lib.dpattn_ledger_free.restype = None
    lib.dpattn_ledger_free.argtypes = [C.c_void_p]
    return lib


class DpattnError(RuntimeError):
    def __init__(self, lib, status):
        n = lib.dpattn_last_error_message(None, 0)
        buf = C.create_string_buffer(n + 1)
        lib.dpattn_last_error_message(buf, n + 1)
        self.status = status
        super().__init__(buf.value.decode() or lib.dpattn_status_str(status).decode())


def check(lib, status):
    if status != STATUS_OK:
        raise DpattnError(lib, status)


def tensor(a: np.ndarray) -> Tensor4:
    """A [batch, heads, seq, dim] view of a NumPy array, strides in elements (no copy)."""
    assert a.ndim == 4 and a.dtype in (np.float32, np.float64)
    strides = [s // a.itemsize for s in a.strides]
    return Tensor4(
        a.ctypes.data,
        # Elements addressable from the first one: the largest offset + 1.
        sum((n - 1) * s for n, s in zip(a.shape, strides)) + 1,
        DTYPE_F32 if a.dtype == np.float32 else DTYPE_F64,
        (C.c_size_t * 4)(*a.shape),
        (C.c_size_t * 4)(*strides),
    )


def reference(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


def main():
    lib = load()
    print("dpattn", lib.dpattn_version().decode(), "from", LIB)
    key = Key((C.c_uint8 * 32)(*range(32)))
    b, h, s, d = 2, 4, 64, 32
    q, k, v = (np.empty((b, h, s, d), np.float32) for _ in range(3))
    for stream, a in enumerate((q, k, v), start=1):
        check(lib, lib.dpattn_fill_gaussian(C.byref(key), stream, 0, 1.0, DTYPE_F32, a.ctypes.data, a.size))
    z = (q.mean() / (1.0 / np.sqrt(q.size)), (q.var() - 1.0) / np.sqrt(2.0 / q.size))
    print(f"keyed N(0,1) fill: mean z = {z[0]:.2f}, variance z = {z[1]:.2f}")
    # |z| < 4.9 is a two-sided test at significance 1e-6.
    assert abs(z[0]) < 4.9 and abs(z[1]) < 4.9

    n = C.c_size_t()
    check(lib, lib.dpattn_attention_scratch_len(d, d, C.byref(n)))
    scratch = np.empty(n.value, np.float32)
    out = np.empty((b, h, s, d), np.float32)
    # A [batch, seq, heads, dim] buffer viewed as [batch, heads, seq, dim]: strided input.
    k_bshd = np.ascontiguousarray(np.swapaxes(k, 1, 2))
    k_view = np.swapaxes(k_bshd, 1, 2)
    args = [C.byref(tensor(x)) for x in (out, q, k_view, v)]
    check(lib, lib.dpattn_attention(*args, None, scratch.ctypes.data, scratch.size))
    err = np.abs(out - reference(q, k, v)).max()
    print(f"attention vs NumPy float64 reference: max abs error {err:.2e}")
    assert err < 1e-4, err

    # Errors are status codes with messages, never crashes.
    try:
        check(lib, lib.dpattn_attention(*args, None, scratch.ctypes.data, scratch.size - 1))
        raise AssertionError("short scratch accepted")
    except DpattnError as e:
        assert e.status == STATUS_SCRATCH_TOO_SMALL
        print("short scratch rejected:", e)
    in_place = [C.byref(tensor(x)) for x in (q, q, k, v)]
    try:
        check(lib, lib.dpattn_attention(*in_place, None, scratch.ctypes.data, scratch.size))
        raise AssertionError("in-place call accepted")
    except DpattnError as e:
        assert e.status == STATUS_ALIASING
        print("output overlapping an input rejected:", e)

    sigma = C.c_double()
    check(lib, lib.dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, C.byref(sigma)))
    print(f"analytic Gaussian sigma(1, 1e-5, 1) = {sigma.value:.6f}")
    ledger = C.c_void_p()
    check(lib, lib.dpattn_ledger_new_approx(1.0, 1e-5, C.byref(ledger)))
    check(lib, lib.dpattn_ledger_charge_approx(ledger, 0.5, 0.0))
    lib.dpattn_ledger_free(ledger)
    assert lib.dpattn_ledger_charge_approx(ledger, 0.1, 0.0) == STATUS_INVALID_HANDLE
    print("Python example: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
