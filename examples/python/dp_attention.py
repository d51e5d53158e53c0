"""dpattn from Python through ctypes on NumPy arrays (no compiled extension needed).

Loads the shared library (``$DPATTN_LIB``, else ``target/release/libdpattn_ffi.so``),
draws keyed Gaussian inputs, runs exact attention on NumPy buffers without copies, checks
it against a NumPy float64 reference, calibrates a Gaussian mechanism, shows that bad input
comes back as a status code with a message, and releases differentially private attention
the safe way: a ledger for the mechanism's privacy unit (one token for output
perturbation) and a session whose master key comes from the operating system, so no two
releases share noise and every release is charged.

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
STATUS_INFEASIBLE, STATUS_ALIASING, STATUS_INVALID_HANDLE = 8, 15, 16
STATUS_UNIT_MISMATCH = 19
UNIT_TOKENS, UNIT_FEATURE_COLUMN, UNIT_SEQUENCE, UNIT_PROMPT, UNIT_RECORD = range(5)


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


class PrivacyUnit(C.Structure):
    """dpattn_privacy_unit: what neighbouring inputs differ in (passed by value)."""

    _fields_ = [("kind", C.c_uint32), ("tokens", C.c_uint32)]


TOKEN = PrivacyUnit(UNIT_TOKENS, 1)


class OutputPerturbationParams(C.Structure):
    """dpattn_output_perturbation_params (fill with dpattn_output_perturbation_params_default)."""

    _fields_ = [
        ("key_norm", C.c_double),
        ("value_norm", C.c_double),
        ("epsilon", C.c_double),
        ("delta", C.c_double),
        ("score", C.c_uint32),
        ("scale_kind", C.c_uint32),
        ("scale", C.c_double),
        ("kernel", C.c_uint32),
        ("key_padding", C.c_void_p),
        ("key_padding_len", C.c_size_t),
    ]


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
    lib.dpattn_ledger_new_approx.argtypes = [PrivacyUnit, C.c_double, C.c_double, C.POINTER(C.c_void_p)]
    lib.dpattn_ledger_charge_approx.restype = status
    lib.dpattn_ledger_charge_approx.argtypes = [C.c_void_p, PrivacyUnit, C.c_double, C.c_double]
    lib.dpattn_ledger_charges.restype = status
    lib.dpattn_ledger_charges.argtypes = [C.c_void_p, C.POINTER(C.c_uint64)]
    lib.dpattn_ledger_free.restype = None
    lib.dpattn_ledger_free.argtypes = [C.c_void_p]
    lib.dpattn_session_new.restype = status
    lib.dpattn_session_new.argtypes = [C.c_void_p, C.POINTER(C.c_void_p)]
    lib.dpattn_session_position.restype = status
    lib.dpattn_session_position.argtypes = [C.c_void_p, C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]
    lib.dpattn_session_free.restype = None
    lib.dpattn_session_free.argtypes = [C.c_void_p]
    lib.dpattn_output_perturbation_params_default.restype = status
    lib.dpattn_output_perturbation_params_default.argtypes = [C.POINTER(OutputPerturbationParams)]
    lib.dpattn_output_perturbation_scratch_len.restype = status
    lib.dpattn_output_perturbation_scratch_len.argtypes = [C.c_size_t, C.c_size_t, C.POINTER(C.c_size_t)]
    lib.dpattn_output_perturbation_attention.restype = status
    lib.dpattn_output_perturbation_attention.argtypes = [C.POINTER(Tensor4)] * 4 + [
        C.POINTER(OutputPerturbationParams), C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t,
    ]
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
    # A fixed key only to make the example's *inputs* reproducible; DP releases below draw
    # their noise from a session's secret master key instead.
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

    # DP attention, the safe route: a ledger for one token (what output perturbation
    # protects) and a session with a master key from the operating system. Budget
    # (2, 1e-5) holds two (1, 1e-6) releases; the third is refused and writes nothing.
    ledger, session = C.c_void_p(), C.c_void_p()
    check(lib, lib.dpattn_ledger_new_approx(TOKEN, 2.0, 1e-5, C.byref(ledger)))
    check(lib, lib.dpattn_session_new(ledger, C.byref(session)))
    params = OutputPerturbationParams()
    check(lib, lib.dpattn_output_perturbation_params_default(C.byref(params)))
    params.key_norm = params.value_norm = 8.0  # public bounds: longer rows are clamped
    params.epsilon, params.delta = 1.0, 1e-6
    check(lib, lib.dpattn_output_perturbation_scratch_len(d, d, C.byref(n)))
    op_scratch = np.empty(n.value, np.float32)
    noise = np.empty(b * h, np.float64)
    released = np.empty_like(out)
    op_args = [C.byref(tensor(x)) for x in (released, q, k, v)]
    for i in range(3):
        epoch, stream = C.c_uint64(), C.c_uint64()
        # The position is public: log it with the release so an auditor holding the master
        # key can replay it (dpattn_session_new_for_replay).
        check(lib, lib.dpattn_session_position(session, C.byref(epoch), C.byref(stream)))
        st = lib.dpattn_output_perturbation_attention(
            *op_args, C.byref(params), session, noise.ctypes.data, noise.size,
            op_scratch.ctypes.data, op_scratch.size)
        if i < 2:
            check(lib, st)
            print(f"DP release at stream id {stream.value}: noise scale {noise[0]:.4g}")
            assert np.isfinite(released).all() and noise[0] > 0
        else:
            assert st == STATUS_INFEASIBLE, st
            print("third release refused:", lib.dpattn_status_str(st).decode())
    charges = C.c_uint64()
    check(lib, lib.dpattn_ledger_charges(ledger, C.byref(charges)))
    assert charges.value == 2
    # A ledger kept for one token refuses a charge about another unit.
    st = lib.dpattn_ledger_charge_approx(ledger, PrivacyUnit(UNIT_PROMPT, 0), 0.1, 0.0)
    assert st == STATUS_UNIT_MISMATCH, st
    lib.dpattn_session_free(session)
    lib.dpattn_ledger_free(ledger)
    assert lib.dpattn_ledger_charge_approx(ledger, TOKEN, 0.1, 0.0) == STATUS_INVALID_HANDLE
    print("Python example: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
