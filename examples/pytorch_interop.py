"""dpattn's fused noisy attention on PyTorch CUDA tensors, through ctypes (no extension).

    DPATTN_LIB=target/gpu-bundle/libdpattn_ffi.so python3 examples/pytorch_interop.py

`dpattn_cuda_noisy_attention` reads and writes the tensors' device memory in place
(`tensor.data_ptr()`) and queues its kernel on PyTorch's current stream, so it orders with
PyTorch's own work like any PyTorch op. Tensors are described as [batch, heads, seq, dim]
with strides in elements: the [B, S, H, D] layout a QKV projection produces is passed as
`x.transpose(1, 2)`, without a copy. bf16, f16 or f32; head dim 64 or 128.

What the noise is (docs/RANDOMNESS.md §5): output element (b, h, i, c) receives element
((b·H + h)·S_q + i)·D + c of the Gaussian draw (key, output stream), N(0, σ_h²) in the f64
layout, added after the softmax normalisation; with logit noise, logit (b, h, i, j) (already
scaled) receives element ((b·H + h)·S_q + i)·S_k + j of the draw (key, logit stream) before
the mask and the softmax. The index is logical — never a memory offset or a thread id — so
anyone holding the key can recompute every noise value, as this example does on the CPU.
Keep the key secret, and never reuse a (key, stream) pair for a second release. This call
adds noise of the σ you give; it does not choose σ or claim a privacy guarantee.

For a release *with* a guarantee, the end of this example takes the safe route on PyTorch
tensors: `dpattn_output_perturbation_attention` (ε, δ)-DP for one token of the keys and
values, charged to a ledger kept for that privacy unit, through a session whose master key
comes from the operating system — it picks a fresh stream id for each release, so no noise
is ever reused, and no key bytes appear in the program.
"""

import ctypes as C
import os
import secrets
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
LIB = Path(os.environ.get("DPATTN_LIB", ROOT / "target" / "gpu-bundle" / "libdpattn_ffi.so"))
DTYPE_F64, DTYPE_BF16 = 1, 3  # DPATTN_DTYPE_*


class Tensor4(C.Structure):  # dpattn_tensor4 and dpattn_tensor4_mut (same layout)
    _fields_ = [("data", C.c_void_p), ("len", C.c_size_t), ("dtype", C.c_uint32),
                ("shape", C.c_size_t * 4), ("strides", C.c_size_t * 4)]


class Key(C.Structure):  # dpattn_key
    _fields_ = [("bytes", C.c_uint8 * 32)]


class NoiseStream(C.Structure):  # dpattn_noise_stream
    _fields_ = [("stream", C.c_uint64), ("sigma", C.POINTER(C.c_double)), ("sigma_len", C.c_size_t)]


class NoiseSpec(C.Structure):  # dpattn_noise_spec
    _fields_ = [("key", Key), ("output_enabled", C.c_uint32), ("output", NoiseStream),
                ("logits_enabled", C.c_uint32), ("logits", NoiseStream)]


def as_tensor4(t):
    """A [batch, heads, seq, dim] view of a CUDA bf16 tensor: device pointer and strides."""
    assert t.is_cuda and t.dtype == torch.bfloat16 and t.stride(3) == 1
    return Tensor4(t.data_ptr(), sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1,
                   DTYPE_BF16, (C.c_size_t * 4)(*t.shape), (C.c_size_t * 4)(*t.stride()))


lib = C.CDLL(str(LIB))
lib.dpattn_cuda_noisy_attention.restype = C.c_uint32  # dpattn_status
lib.dpattn_cuda_noisy_attention.argtypes = [C.c_int32, C.c_void_p] + [C.POINTER(Tensor4)] * 4 + [
    C.c_void_p, C.POINTER(NoiseSpec)]  # options: NULL = defaults (no mask, scale 1/sqrt(D))
lib.dpattn_fill_gaussian.restype = C.c_uint32
lib.dpattn_fill_gaussian.argtypes = [C.POINTER(Key), C.c_uint64, C.c_uint64, C.c_double,
                                     C.c_uint32, C.c_void_p, C.c_size_t]
lib.dpattn_last_error_message.restype = C.c_size_t
lib.dpattn_last_error_message.argtypes = [C.c_char_p, C.c_size_t]


class PrivacyUnit(C.Structure):  # dpattn_privacy_unit, passed by value
    _fields_ = [("kind", C.c_uint32), ("tokens", C.c_uint32)]


class OutputPerturbationParams(C.Structure):  # dpattn_output_perturbation_params
    _fields_ = [("key_norm", C.c_double), ("value_norm", C.c_double), ("epsilon", C.c_double),
                ("delta", C.c_double), ("score", C.c_uint32), ("scale_kind", C.c_uint32),
                ("scale", C.c_double), ("kernel", C.c_uint32), ("key_padding", C.c_void_p),
                ("key_padding_len", C.c_size_t)]


TOKEN = PrivacyUnit(0, 1)  # DPATTN_UNIT_TOKENS, one token
lib.dpattn_ledger_new_approx.restype = C.c_uint32
lib.dpattn_ledger_new_approx.argtypes = [PrivacyUnit, C.c_double, C.c_double, C.POINTER(C.c_void_p)]
lib.dpattn_ledger_charges.restype = C.c_uint32
lib.dpattn_ledger_charges.argtypes = [C.c_void_p, C.POINTER(C.c_uint64)]
lib.dpattn_ledger_free.restype = None
lib.dpattn_ledger_free.argtypes = [C.c_void_p]
lib.dpattn_session_new.restype = C.c_uint32
lib.dpattn_session_new.argtypes = [C.c_void_p, C.POINTER(C.c_void_p)]
lib.dpattn_session_position.restype = C.c_uint32
lib.dpattn_session_position.argtypes = [C.c_void_p, C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]
lib.dpattn_session_free.restype = None
lib.dpattn_session_free.argtypes = [C.c_void_p]
lib.dpattn_output_perturbation_params_default.restype = C.c_uint32
lib.dpattn_output_perturbation_params_default.argtypes = [C.POINTER(OutputPerturbationParams)]
lib.dpattn_output_perturbation_scratch_len.restype = C.c_uint32
lib.dpattn_output_perturbation_scratch_len.argtypes = [C.c_size_t, C.c_size_t, C.POINTER(C.c_size_t)]
lib.dpattn_output_perturbation_attention.restype = C.c_uint32
lib.dpattn_output_perturbation_attention.argtypes = [C.POINTER(Tensor4)] * 4 + [
    C.POINTER(OutputPerturbationParams), C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t]


def check(status):
    if status != 0:
        msg = C.create_string_buffer(1024)
        lib.dpattn_last_error_message(msg, len(msg))
        raise RuntimeError(f"dpattn status {status}: {msg.value.decode()}")


def noisy_attention(out, q, k, v, noise):
    """out, q, k, v: [B, S, H, D] CUDA tensors. Queued on the current stream; returns at once."""
    views = [as_tensor4(x.transpose(1, 2)) for x in (out, q, k, v)]  # [B, H, S, D] by strides
    stream = torch.cuda.current_stream().cuda_stream  # a CUstream; 0 is the legacy default
    check(lib.dpattn_cuda_noisy_attention(torch.cuda.current_device(), stream,
                                          *[C.byref(t) for t in views], None,
                                          C.byref(noise) if noise is not None else None))


B, S, H, D = 2, 256, 8, 64
q, k, v = (torch.randn(B, S, H, D, dtype=torch.bfloat16, device="cuda") for _ in range(3))
plain, noisy = torch.empty_like(q), torch.empty_like(q)

# Output noise σ = 0.1 on every head, draw (key, stream 1). The key comes from a CSPRNG.
sigma = (C.c_double * H)(*[0.1] * H)
spec = NoiseSpec(key=Key.from_buffer_copy(secrets.token_bytes(32)), output_enabled=1,
                 output=NoiseStream(1, C.cast(sigma, C.POINTER(C.c_double)), H))
noisy_attention(plain, q, k, v, None)  # noise = NULL: exact attention
noisy_attention(noisy, q, k, v, spec)

# Noise off matches PyTorch's SDPA (which takes [B, H, S, D]).
ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
rel = ((plain.transpose(1, 2).float() - ref.float()).norm() / ref.float().norm()).item()
print(f"noise off vs torch SDPA: relative error {rel:.2e}")
assert rel < 1e-2

# Recompute the output noise on the CPU from the key alone: element ((b·H + h)·S + i)·D + c
# of the draw, i.e. a plain fill in logical [B, H, S, D] order (the tensors' memory is
# [B, S, H, D]; the noise does not depend on it).
expected = torch.empty(B, H, S, D, dtype=torch.float64)
check(lib.dpattn_fill_gaussian(C.byref(spec.key), 1, 0, 0.1, DTYPE_F64, expected.data_ptr(), expected.numel()))
got = (noisy.float() - plain.float()).transpose(1, 2).cpu().double()
# noisy and plain are each rounded to bf16 once (relative error <= 2^-8).
bound = (noisy.float().abs() + plain.float().abs()).transpose(1, 2).cpu().double() * 2.0**-8 + 1e-6
assert ((got - expected).abs() <= bound).all(), (got - expected).abs().max()
print(f"output noise = the keyed draw recomputed on the CPU (std {got.std().item():.4f}, σ = 0.1)")

# A DP release with a guarantee, on PyTorch CPU tensors (f32, [B, S, H, D] viewed as
# [B, H, S, D] by strides): output perturbation protects one token's key and value rows, so
# the ledger is kept for one token; the session's master key comes from the operating system.
DTYPE_F32 = 0


def cpu_tensor4(t):
    """A [batch, heads, seq, dim] view of a CPU f32 tensor."""
    assert not t.is_cuda and t.dtype == torch.float32 and t.stride(3) == 1
    return Tensor4(t.data_ptr(), sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1,
                   DTYPE_F32, (C.c_size_t * 4)(*t.shape), (C.c_size_t * 4)(*t.stride()))


ledger, session = C.c_void_p(), C.c_void_p()
check(lib.dpattn_ledger_new_approx(TOKEN, 2.0, 1e-5, C.byref(ledger)))  # total (2, 1e-5)
check(lib.dpattn_session_new(ledger, C.byref(session)))
params = OutputPerturbationParams()
check(lib.dpattn_output_perturbation_params_default(C.byref(params)))
params.key_norm = params.value_norm = 12.0  # public bounds: longer rows are clamped
params.epsilon, params.delta = 1.0, 1e-6
qc, kc, vc = (x.float().cpu() for x in (q, k, v))
released = torch.empty_like(qc)
n = C.c_size_t()
check(lib.dpattn_output_perturbation_scratch_len(D, D, C.byref(n)))
scratch = torch.empty(n.value, dtype=torch.float32)
noise_scale = torch.empty(B * H, dtype=torch.float64)
epoch, stream = C.c_uint64(), C.c_uint64()
check(lib.dpattn_session_position(session, C.byref(epoch), C.byref(stream)))  # log it (public)
views = [cpu_tensor4(x.transpose(1, 2)) for x in (released, qc, kc, vc)]
check(lib.dpattn_output_perturbation_attention(
    *[C.byref(t) for t in views], C.byref(params), session, noise_scale.data_ptr(), B * H,
    scratch.data_ptr(), n.value))
charges = C.c_uint64()
check(lib.dpattn_ledger_charges(ledger, C.byref(charges)))
assert charges.value == 1 and torch.isfinite(released).all()
print(f"DP release (ε = 1, δ = 1e-6, one token) at stream id {stream.value}: "
      f"noise scale {noise_scale[0].item():.4g}, ledger charges {charges.value}")
lib.dpattn_session_free(session)
lib.dpattn_ledger_free(ledger)
