#!/usr/bin/env python3
"""dpattn's fused noisy attention on the GPU against PyTorch's scaled_dot_product_attention.

This is a benchmark and, at the same time, the worked example of calling the dpattn C ABI
from PyTorch: `dpattn_cuda_noisy_attention` runs on the device pointers of PyTorch tensors
(`tensor.data_ptr()`), on PyTorch's current CUDA stream, without copies. The library is
loaded with ctypes; the structs below mirror include/dpattn.h field for field.

For bf16, head dim D in {128, 64}, S in {1024, 2048, 4096, 8192} (S_q = S_k = S), batch
16384 // S, 16 heads, non-causal and causal, it times in one process, on one stream, with
CUDA events (warm-up, then the median of --iters runs):

  (a) torch.nn.functional.scaled_dot_product_attention on [B, H, S, D] tensors (PyTorch
      picks its backend; the kernels it actually launched are recorded with the profiler);
  (b) dpattn_cuda_noisy_attention, noise off (noise = NULL);
  (c) the same with output noise, sigma = --sigma on every head;
  (d) the same with output noise and logit noise (--logit-sigma).

Before timing, each configuration is checked once: (b) against SDPA (max abs and relative
error, fail above --rtol), the same on [B, S, H, D] memory passed as strided views, both
against a float32 reference on batch 0 (reported, not a criterion), (c) minus (b)
must have mean ~0 and standard deviation ~sigma, (c) and (d) must repeat bit for bit
(keyed noise), (d) must differ from (c). Any failed check or nonzero dpattn status ends
the script with exit status 1 (the status's text and dpattn_last_error_message printed).

Output: a Markdown table on stdout and a JSON file ($OUT/bench_attention_sdpa.json when $OUT
is set, else target/bench_attention_sdpa.json; --json to choose).

    python3 scripts/bench_attention_sdpa.py [--lib target/gpu-bundle/libdpattn_ffi.so]
    python3 scripts/bench_attention_sdpa.py --quick          # one small shape, smoke test
    python3 scripts/bench_attention_sdpa.py --check-layout   # no torch, no GPU: struct layout

The library path comes from --lib, else $DPATTN_LIB, else target/gpu-bundle/libdpattn_ffi.so
(what `bash scripts/gpu-bench.sh --bundle` builds). It needs an NVRTC on the loader path
(scripts/gpu-bench.sh --run arranges that).
"""

import argparse
import ctypes as C
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LIB = ROOT / "target" / "gpu-bundle" / "libdpattn_ffi.so"

# --------------------------------------------------------------------------------------
# The C ABI, as declared in include/dpattn.h
# --------------------------------------------------------------------------------------

# `dpattn_status` is a uint32_t in C (an enum with a uint32_t underlying type in C23/C++).
Status = C.c_uint32
DPATTN_STATUS_OK = 0
DPATTN_STATUS_CUDA_UNAVAILABLE = 17

# `dpattn_dtype` codes (DPATTN_DTYPE_*).
DPATTN_DTYPE_F32 = 0
DPATTN_DTYPE_F64 = 1
DPATTN_DTYPE_F16 = 2
DPATTN_DTYPE_BF16 = 3

# `dpattn_attention_options.scale_kind` (DPATTN_SCALE_*); the default is 1/sqrt(d), the
# same as SDPA's default scale.
DPATTN_SCALE_INV_SQRT_DIM = 0
DPATTN_SCALE_INV_DIM = 1
DPATTN_SCALE_CUSTOM = 2


class Tensor4(C.Structure):
    """`dpattn_tensor4`: a read-only [batch, heads, seq, dim] tensor (here: device memory)."""

    _fields_ = [
        ("data", C.c_void_p),  # const void *: first element
        ("len", C.c_size_t),  # elements available at data
        ("dtype", C.c_uint32),  # dpattn_dtype
        ("shape", C.c_size_t * 4),  # [batch, heads, seq, dim]
        ("strides", C.c_size_t * 4),  # in elements, not bytes
    ]


class Tensor4Mut(C.Structure):
    """`dpattn_tensor4_mut`: the writable twin of `dpattn_tensor4` (same layout)."""

    _fields_ = Tensor4._fields_


class AttentionOptions(C.Structure):
    """`dpattn_attention_options`; fill with dpattn_attention_options_default."""

    _fields_ = [
        ("causal", C.c_uint32),  # 1: bottom-right aligned causal mask
        ("score", C.c_uint32),  # DPATTN_SCORE_EXP (softmax) or _COSH
        ("scale_kind", C.c_uint32),  # DPATTN_SCALE_*
        ("scale", C.c_double),  # used with DPATTN_SCALE_CUSTOM only
        ("kernel", C.c_uint32),  # CPU kernel choice
        ("key_padding", C.POINTER(C.c_uint8)),  # must be NULL on the GPU
        ("key_padding_len", C.c_size_t),
    ]


class Key(C.Structure):
    """`dpattn_key`: a 256-bit ChaCha20 key. Secret: whoever has it can subtract the noise."""

    _fields_ = [("bytes", C.c_uint8 * 32)]


class NoiseStream(C.Structure):
    """`dpattn_noise_stream`: one noise draw, its stream id and sigma per head (host memory)."""

    _fields_ = [
        ("stream", C.c_uint64),  # one (key, stream) pair serves one draw only
        ("sigma", C.POINTER(C.c_double)),  # `heads` or `batch * heads` standard deviations
        ("sigma_len", C.c_size_t),
    ]


class NoiseSpec(C.Structure):
    """`dpattn_noise_spec`: where the noise of a noisy attention call comes from."""

    _fields_ = [
        ("key", Key),
        ("output_enabled", C.c_uint32),  # 1: Gaussian noise on every output element
        ("output", NoiseStream),
        ("logits_enabled", C.c_uint32),  # 1: Gaussian noise on every scaled logit
        ("logits", NoiseStream),
    ]


# (C type name, ctypes class) pairs whose layout --check-layout verifies.
STRUCTS = [
    ("dpattn_tensor4", Tensor4),
    ("dpattn_tensor4_mut", Tensor4Mut),
    ("dpattn_attention_options", AttentionOptions),
    ("dpattn_key", Key),
    ("dpattn_noise_stream", NoiseStream),
    ("dpattn_noise_spec", NoiseSpec),
]

# Sizes and field offsets on LP64 (x86-64 / aarch64 Linux), derived by hand from the header:
# size_t and pointers are 8 bytes, uint32_t 4, double 8 (8-aligned), so a uint32_t followed
# by an 8-aligned field leaves 4 bytes of padding.
EXPECTED_LP64 = {
    "dpattn_tensor4": (88, {"data": 0, "len": 8, "dtype": 16, "shape": 24, "strides": 56}),
    "dpattn_tensor4_mut": (88, {"data": 0, "len": 8, "dtype": 16, "shape": 24, "strides": 56}),
    "dpattn_attention_options": (48, {
        "causal": 0, "score": 4, "scale_kind": 8, "scale": 16, "kernel": 24,
        "key_padding": 32, "key_padding_len": 40}),
    "dpattn_key": (32, {"bytes": 0}),
    "dpattn_noise_stream": (24, {"stream": 0, "sigma": 8, "sigma_len": 16}),
    "dpattn_noise_spec": (96, {
        "key": 0, "output_enabled": 32, "output": 40, "logits_enabled": 64, "logits": 72}),
}

# Macro values this script relies on, checked against the header by --check-layout.
MACROS = {
    "DPATTN_STATUS_OK": DPATTN_STATUS_OK,
    "DPATTN_STATUS_CUDA_UNAVAILABLE": DPATTN_STATUS_CUDA_UNAVAILABLE,
    "DPATTN_DTYPE_F32": DPATTN_DTYPE_F32,
    "DPATTN_DTYPE_F64": DPATTN_DTYPE_F64,
    "DPATTN_DTYPE_F16": DPATTN_DTYPE_F16,
    "DPATTN_DTYPE_BF16": DPATTN_DTYPE_BF16,
    "DPATTN_SCALE_INV_SQRT_DIM": DPATTN_SCALE_INV_SQRT_DIM,
    "DPATTN_SCALE_INV_DIM": DPATTN_SCALE_INV_DIM,
    "DPATTN_SCALE_CUSTOM": DPATTN_SCALE_CUSTOM,
}


class DpattnError(RuntimeError):
    """A nonzero dpattn_status, with the library's text for it and the thread's last message."""

    def __init__(self, lib, status, what):
        n = lib.dpattn_last_error_message(None, 0)
        buf = C.create_string_buffer(n + 1)
        lib.dpattn_last_error_message(buf, n + 1)
        self.status = status
        name = lib.dpattn_status_str(status).decode()
        super().__init__(f"{what}: status {status} ({name}): {buf.value.decode() or '(no message)'}")


def load_library(path):
    """Loads libdpattn_ffi and declares the signatures this script calls."""
    lib = C.CDLL(str(path))
    lib.dpattn_version.restype = C.c_char_p
    lib.dpattn_version.argtypes = []
    lib.dpattn_status_str.restype = C.c_char_p
    lib.dpattn_status_str.argtypes = [C.c_uint32]
    # size_t dpattn_last_error_message(char *buf, size_t len): snprintf-like, per thread.
    lib.dpattn_last_error_message.restype = C.c_size_t
    lib.dpattn_last_error_message.argtypes = [C.c_char_p, C.c_size_t]
    lib.dpattn_cuda_probe.restype = Status
    lib.dpattn_cuda_probe.argtypes = [C.POINTER(C.c_uint32)]
    lib.dpattn_attention_options_default.restype = Status
    lib.dpattn_attention_options_default.argtypes = [C.POINTER(AttentionOptions)]
    try:
        fn = lib.dpattn_cuda_noisy_attention
    except AttributeError:
        sys.exit(f"FAIL: {path} does not export dpattn_cuda_noisy_attention "
                 "(an older build? rebuild with `bash scripts/gpu-bench.sh --bundle`)")
    # dpattn_status dpattn_cuda_noisy_attention(int32_t device, void *cu_stream,
    #     const dpattn_tensor4_mut *out, const dpattn_tensor4 *q, const dpattn_tensor4 *k,
    #     const dpattn_tensor4 *v, const dpattn_attention_options *options,
    #     const dpattn_noise_spec *noise);
    fn.restype = Status
    fn.argtypes = [
        C.c_int32, C.c_void_p,
        C.POINTER(Tensor4Mut), C.POINTER(Tensor4), C.POINTER(Tensor4), C.POINTER(Tensor4),
        C.POINTER(AttentionOptions), C.POINTER(NoiseSpec),
    ]
    return lib


def check(lib, status, what):
    if status != DPATTN_STATUS_OK:
        raise DpattnError(lib, status, what)


# --------------------------------------------------------------------------------------
# --check-layout: the ctypes structs against the header, without torch or a GPU
# --------------------------------------------------------------------------------------


def ctypes_layout(cls):
    """{field: (offset, size)} of a ctypes Structure."""
    return {name: (getattr(cls, name).offset, getattr(cls, name).size) for name, _ in cls._fields_}


def c_compiler_layout(cc, header_dir):
    """Compiles a C program against include/dpattn.h that prints sizeof/_Alignof/offsetof of
    every struct and field above (and the macros); returns the parsed output."""
    lines = []
    for cname, cls in STRUCTS:
        lines.append(f'    printf("size %s %zu %zu\\n", "{cname}", sizeof({cname}), _Alignof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'    printf("field %s %s %zu %zu\\n", "{cname}", "{field}", '
                         f"offsetof({cname}, {field}), sizeof((({cname} *)0)->{field}));")
    for macro in MACROS:
        lines.append(f'    printf("macro %s %lld\\n", "{macro}", (long long)({macro}));')
    lines.append('    printf("size dpattn_status %zu %zu\\n", sizeof(dpattn_status), _Alignof(dpattn_status));')
    src = ("#include <stddef.h>\n#include <stdio.h>\n#include \"dpattn.h\"\n"
           "int main(void) {\n" + "\n".join(lines) + "\n    return 0;\n}\n")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = Path(tmp, "layout.c"), Path(tmp, "layout")
        c_path.write_text(src)
        cmd = [cc, "-std=c11", "-Wall", "-Werror", f"-I{header_dir}", str(c_path), "-o", str(exe)]
        print("  $", " ".join(cmd))
        subprocess.run(cmd, check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    sizes, fields, macros = {}, {}, {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "size":
            sizes[rest[0]] = (int(rest[1]), int(rest[2]))
        elif kind == "field":
            fields[(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
        elif kind == "macro":
            macros[rest[0]] = int(rest[1])
    return sizes, fields, macros


def check_layout(args):
    errors = []
    print("ctypes layout (sizeof, alignment; field: offset/size):")
    for cname, cls in STRUCTS:
        fields = ", ".join(f"{f}@{o}/{s}" for f, (o, s) in ctypes_layout(cls).items())
        print(f"  {cname}: {C.sizeof(cls)} bytes, align {C.alignment(cls)}; {fields}")

    if C.sizeof(C.c_void_p) == 8 and C.sizeof(C.c_size_t) == 8:
        for cname, cls in STRUCTS:
            size, offsets = EXPECTED_LP64[cname]
            if C.sizeof(cls) != size:
                errors.append(f"{cname}: ctypes sizeof {C.sizeof(cls)}, header (LP64) {size}")
            for field, off in offsets.items():
                if getattr(cls, field).offset != off:
                    errors.append(f"{cname}.{field}: ctypes offset {getattr(cls, field).offset}, header {off}")
        print("hand-derived LP64 sizes/offsets:", "mismatch" if errors else "match")
    else:
        print("hand-derived LP64 table skipped (not an LP64 platform)")

    cc = args.cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    header_dir = ROOT / "include"
    if args.no_cc:
        print("C compiler check skipped (--no-cc)")
    elif not cc or not (header_dir / "dpattn.h").exists():
        errors.append("no C compiler or no include/dpattn.h for the C check (use --no-cc to skip it)")
    else:
        print(f"C compiler check ({cc}, {header_dir / 'dpattn.h'}):")
        sizes, fields, macros = c_compiler_layout(cc, header_dir)
        n_fields = 0
        for cname, cls in STRUCTS:
            if sizes[cname] != (C.sizeof(cls), C.alignment(cls)):
                errors.append(f"{cname}: C sizeof/align {sizes[cname]}, ctypes {(C.sizeof(cls), C.alignment(cls))}")
            for field, (off, size) in ctypes_layout(cls).items():
                n_fields += 1
                if fields[(cname, field)] != (off, size):
                    errors.append(f"{cname}.{field}: C offset/size {fields[(cname, field)]}, ctypes {(off, size)}")
        for macro, value in MACROS.items():
            if macros[macro] != value:
                errors.append(f"{macro}: header {macros[macro]}, script {value}")
        if sizes["dpattn_status"][0] != C.sizeof(Status):
            errors.append(f"dpattn_status: C sizeof {sizes['dpattn_status'][0]}, ctypes {C.sizeof(Status)}")
        print(f"  {len(STRUCTS)} structs, {n_fields} fields, {len(MACROS)} macros, sizeof(dpattn_status) = "
              f"{sizes['dpattn_status'][0]}: {'mismatch' if errors else 'match'}")

    lib_path = library_path(args)
    if lib_path.exists():
        lib = C.CDLL(str(lib_path))
        lib.dpattn_version.restype = C.c_char_p
        has = hasattr(lib, "dpattn_cuda_noisy_attention")
        print(f"library {lib_path}: dpattn {lib.dpattn_version().decode()}, "
              f"dpattn_cuda_noisy_attention {'exported' if has else 'NOT exported (a build without the GPU attention entry point)'}")
    else:
        print(f"library {lib_path}: not present (not checked)")

    for e in errors:
        print("FAIL:", e)
    print("layout check:", "FAILED" if errors else "passed")
    return 1 if errors else 0


# --------------------------------------------------------------------------------------
# PyTorch tensors as dpattn tensors
# --------------------------------------------------------------------------------------


def library_path(args):
    return Path(args.lib or os.environ.get("DPATTN_LIB") or DEFAULT_LIB)


def as_dpattn(t, cls=Tensor4):
    """Describes a 4-d PyTorch CUDA tensor, read as [batch, heads, seq, dim], to dpattn:
    its device pointer, shape and strides in elements (no copy). A [B, S, H, D] tensor
    passed as t.transpose(1, 2) works the same way; only the last axis must be contiguous."""
    import torch

    dtypes = {torch.bfloat16: DPATTN_DTYPE_BF16, torch.float16: DPATTN_DTYPE_F16, torch.float32: DPATTN_DTYPE_F32}
    assert t.is_cuda and t.dim() == 4 and t.stride(3) == 1, "CUDA tensor, 4 axes, last axis contiguous"
    return cls(
        t.data_ptr(),  # device pointer
        # Elements addressable from the first one: the largest offset + 1.
        sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1,
        dtypes[t.dtype],
        (C.c_size_t * 4)(*t.shape),
        (C.c_size_t * 4)(*t.stride()),
    )


def noise_spec(heads, out_sigma, logit_sigma, key=bytes(range(32))):
    """A dpattn_noise_spec with one sigma per head. Output noise is draw (key, stream 1),
    logit noise draw (key, stream 2). The fixed key is fine for a benchmark; a release
    takes a secret key from a CSPRNG (secrets.token_bytes(32)) and a fresh stream id."""
    spec = NoiseSpec()
    spec.key = Key.from_buffer_copy(key)
    keep = []  # the sigma arrays must outlive every call that uses the spec
    for enabled, field, stream, sigma in (("output_enabled", "output", 1, out_sigma),
                                          ("logits_enabled", "logits", 2, logit_sigma)):
        if sigma is None:
            continue
        arr = (C.c_double * heads)(*([sigma] * heads))
        keep.append(arr)
        setattr(spec, enabled, 1)
        setattr(spec, field, NoiseStream(stream, C.cast(arr, C.POINTER(C.c_double)), heads))
    return spec, keep


class NoisyAttention:
    """One prepared dpattn_cuda_noisy_attention call. The ctypes structs are built once, so
    a timed call only crosses the C boundary (host-side checks and the launch)."""

    def __init__(self, lib, device, stream, out, q, k, v, causal, noise):
        self.lib, self.device = lib, device
        # The CUstream handle of a torch stream. PyTorch's default stream has handle 0, the
        # legacy default stream, which is also what NULL means to dpattn.
        self.stream = C.c_void_p(stream.cuda_stream)
        self.tensors = (as_dpattn(out, Tensor4Mut), as_dpattn(q), as_dpattn(k), as_dpattn(v))
        self.options = AttentionOptions()
        check(lib, lib.dpattn_attention_options_default(C.byref(self.options)), "options_default")
        self.options.causal = 1 if causal else 0  # S_q == S_k: the same mask as is_causal=True
        self.noise = noise  # (spec, keep-alive) or None
        self.args = (
            C.c_int32(device), self.stream, *(C.byref(t) for t in self.tensors),
            C.byref(self.options), C.byref(noise[0]) if noise else None,  # NULL: no noise
        )

    def __call__(self):
        # Queues the kernel on the stream and returns; errors found before queuing (bad
        # shapes, no device, NVRTC) come back as a status.
        check(self.lib, self.lib.dpattn_cuda_noisy_attention(*self.args), "dpattn_cuda_noisy_attention")


# --------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------


def time_ms(fn, stream, warmup, iters):
    """Median (and all samples) of `iters` timings of fn() in ms, CUDA events on `stream`,
    and the host's time per call (queuing only, the GPU being busy) in µs."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    with torch.cuda.stream(stream):
        # Keep the GPU busy while the host queues the runs, so host-side launch latency is
        # not inside the event pairs (a private but long-standing PyTorch helper).
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        for s, e in zip(starts, ends):
            s.record(stream)
            fn()
            e.record(stream)
        host_us = (time.perf_counter() - t0) / iters * 1e6
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(samples), samples, host_us


def sdpa_kernel_names(fn):
    """The CUDA kernels one SDPA call launched (torch.profiler), to say which backend ran."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})
    except Exception as exc:  # CUPTI missing or busy: report, do not guess
        return [f"unknown (profiler failed: {exc})"]


def backend_of(kernels):
    text = " ".join(kernels).lower()
    for needle, name in (("flash", "flash"), ("cudnn", "cudnn"), ("fmha", "mem-efficient"),
                         ("efficient", "mem-efficient"), ("unknown", "unknown")):
        if needle in text:
            return name
    return "math/other"


def reference_fp32(q, k, v, causal, batch=0):
    """Attention of one batch element in float32 (no TF32), head by head."""
    import torch

    out = torch.empty(q.shape[1:], dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        qf, kf, vf = (x[batch, h].float() for x in (q, k, v))
        logits = (qf @ kf.T) * scale
        if causal:
            s_q, s_k = logits.shape
            mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril(s_k - s_q)
            logits.masked_fill_(~mask, float("-inf"))
        out[h] = torch.softmax(logits, dim=-1) @ vf
    return out


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm()).item(), (x - ref).abs().max().item()


class CheckFailed(Exception):
    pass


def run_config(lib, args, device, stream, dtype, b, h, s, d, causal):
    import torch
    import torch.nn.functional as F

    row = {"dtype": str(dtype).replace("torch.", ""), "batch": b, "heads": h, "seq": s, "dim": d,
           "causal": causal}
    gen = torch.Generator(device="cuda").manual_seed(1234 + s + d)
    q, k, v = (torch.randn(b, h, s, d, dtype=dtype, device="cuda", generator=gen) for _ in range(3))

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    outs = {name: torch.empty_like(q) for name in ("plain", "out", "both", "again")}
    plain = NoisyAttention(lib, device, stream, outs["plain"], q, k, v, causal, None)
    out_spec = noise_spec(h, args.sigma, None)
    both_spec = noise_spec(h, args.sigma, args.logit_sigma)
    with_out = NoisyAttention(lib, device, stream, outs["out"], q, k, v, causal, out_spec)
    with_both = NoisyAttention(lib, device, stream, outs["both"], q, k, v, causal, both_spec)

    # ---- correctness, once per configuration (the first calls also compile the kernels)
    ref = sdpa()
    plain()
    torch.cuda.synchronize()
    if not torch.isfinite(outs["plain"]).all():
        raise CheckFailed("non-finite values in dpattn's output")
    row["rel_err_vs_sdpa"], row["max_abs_err_vs_sdpa"] = rel_err(outs["plain"], ref)
    exact = reference_fp32(q, k, v, causal)
    row["rel_err_vs_fp32_b0"], row["max_abs_err_vs_fp32_b0"] = rel_err(outs["plain"][0], exact)
    row["sdpa_rel_err_vs_fp32_b0"], row["sdpa_max_abs_err_vs_fp32_b0"] = rel_err(ref[0], exact)
    del exact
    if not row["rel_err_vs_sdpa"] <= args.rtol:
        raise CheckFailed(f"dpattn vs SDPA: relative error {row['rel_err_vs_sdpa']:.3e} > {args.rtol:g} "
                          f"(max abs {row['max_abs_err_vs_sdpa']:.3e})")

    # The same inputs in PyTorch's [B, S, H, D] memory layout, passed as [B, H, S, D] views
    # (strides only, no copy at the call); the output is written through a strided view too.
    q2, k2, v2 = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    out2 = torch.empty(b, s, h, d, dtype=dtype, device="cuda").transpose(1, 2)
    NoisyAttention(lib, device, stream, out2, q2, k2, v2, causal, None)()
    torch.cuda.synchronize()
    row["strided_rel_err_vs_sdpa"] = rel_err(out2, ref)[0]
    row["strided_bit_identical"] = torch.equal(out2, outs["plain"])
    del q2, k2, v2, out2
    if not row["strided_rel_err_vs_sdpa"] <= args.rtol:
        raise CheckFailed(f"[B, S, H, D] strided views vs SDPA: relative error "
                          f"{row['strided_rel_err_vs_sdpa']:.3e} > {args.rtol:g}")

    for call, name in ((with_out, "out"), (with_both, "both")):
        call()
        NoisyAttention(lib, device, stream, outs["again"], q, k, v, causal, call.noise)()
        torch.cuda.synchronize()
        if not torch.equal(outs[name], outs["again"]):
            raise CheckFailed(f"noise {name}: two calls with the same key and streams differ")
    noise = outs["out"].float() - outs["plain"].float()
    row["out_noise_mean"], row["out_noise_std"] = noise.mean().item(), noise.std().item()
    del noise
    if not (abs(row["out_noise_std"] / args.sigma - 1) < 0.05 and abs(row["out_noise_mean"]) < 0.01 * args.sigma):
        raise CheckFailed(f"output noise: mean {row['out_noise_mean']:.3e}, std {row['out_noise_std']:.4f}, "
                          f"expected about 0 and {args.sigma}")
    if torch.equal(outs["both"], outs["out"]):
        raise CheckFailed("logit noise enabled but the output equals the output-noise-only one")
    row["logit_noise_rel_change"] = rel_err(outs["both"], outs["out"])[0]

    row["sdpa_kernels"] = sdpa_kernel_names(sdpa)
    row["sdpa_backend"] = backend_of(row["sdpa_kernels"])

    # ---- timing: same stream, same inputs, one after the other
    for name, fn in (("sdpa", sdpa), ("ours", plain), ("ours_out_noise", with_out),
                     ("ours_out_logit_noise", with_both)):
        row[f"{name}_ms"], row[f"{name}_samples_ms"], row[f"{name}_host_us_per_call"] = time_ms(
            fn, stream, args.warmup, args.iters)

    # FLOPs: the two matrix products, 4·B·H·S_q·S_k·D, for causal too (full-matrix count);
    # FlashAttention's papers count half for causal ("fa" fields).
    flops = 4.0 * b * h * s * s * d
    for name in ("sdpa", "ours", "ours_out_noise", "ours_out_logit_noise"):
        row[f"{name}_tflops"] = flops / (row[f"{name}_ms"] * 1e-3) / 1e12
        row[f"{name}_tflops_fa"] = row[f"{name}_tflops"] / (2 if causal else 1)
    row["ours_over_sdpa"] = row["sdpa_ms"] / row["ours_ms"]  # throughput ratio, > 1: ours faster
    row["out_noise_overhead"] = row["ours_out_noise_ms"] / row["ours_ms"] - 1
    row["out_logit_noise_overhead"] = row["ours_out_logit_noise_ms"] / row["ours_ms"] - 1
    return row


def fmt_row(r):
    return (f"| {r['dim']} | {r['seq']} | {r['batch']} | {'causal' if r['causal'] else 'none'} "
            f"| {r['sdpa_backend']} | {r['sdpa_ms']:.3f} | {r['sdpa_tflops']:.1f} "
            f"| {r['ours_ms']:.3f} | {r['ours_tflops']:.1f} | {r['ours_over_sdpa']:.2f} "
            f"| {r['ours_out_noise_ms']:.3f} | {100 * r['out_noise_overhead']:+.1f}% "
            f"| {r['ours_out_logit_noise_ms']:.3f} | {100 * r['out_logit_noise_overhead']:+.1f}% "
            f"| {r['rel_err_vs_sdpa']:.1e} |")


TABLE_HEAD = (
    "| D | S | B | mask | SDPA backend | (a) SDPA ms | (a) TFLOP/s | (b) ours ms | (b) TFLOP/s "
    "| ours/SDPA | (c) +output noise ms | (c)/(b) − 1 | (d) +output+logit noise ms | (d)/(b) − 1 "
    "| rel. err. vs SDPA |\n"
    "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def bench(args):
    try:
        import torch
    except ImportError:
        sys.exit("FAIL: PyTorch is not installed (python3 -c 'import torch' fails)")
    if not torch.cuda.is_available():
        sys.exit("FAIL: torch.cuda.is_available() is False: no usable GPU")

    lib_path = library_path(args)
    if not lib_path.exists():
        sys.exit(f"FAIL: {lib_path} not found (build it with `bash scripts/gpu-bench.sh --bundle`, "
                 "or pass --lib / set DPATTN_LIB)")
    lib = load_library(lib_path)
    n_dev = C.c_uint32()
    try:
        check(lib, lib.dpattn_cuda_probe(C.byref(n_dev)), "dpattn_cuda_probe")
    except DpattnError as e:
        sys.exit(f"FAIL: {e}")

    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream()  # everything below runs on this one stream
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference stays float32
    dtype = torch.bfloat16
    heads = 16
    if args.quick:
        configs = [(64, 1024, 2)]
    else:
        configs = [(d, s, 16384 // s) for d in args.dims for s in args.seqs]
    masks = {"both": (False, True), "none": (False,), "causal": (True,)}[args.mask]

    enabled = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
               for name in ("flash", "mem_efficient", "math", "cudnn")
               if hasattr(torch.backends.cuda, f"{name}_sdp_enabled")}
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "dpattn": lib.dpattn_version().decode(),
        "library": str(lib_path),
        "python": platform.python_version(),
        "sdpa_backends_enabled": enabled,
        "warmup": args.warmup,
        "iters": args.iters,
        "sigma_output": args.sigma,
        "sigma_logits": args.logit_sigma,
        "flops_formula": "4*B*H*S_q*S_k*D for every row, causal included (tflops); "
                         "tflops_fa halves it for causal (FlashAttention papers' convention)",
    }
    print(f"# dpattn_cuda_noisy_attention vs torch SDPA — {meta['gpu']}")
    print(f"torch {meta['torch']} (CUDA {meta['torch_cuda']}), dpattn {meta['dpattn']} from {lib_path}")
    print("SDPA backends enabled:", ", ".join(f"{k}={v}" for k, v in enabled.items()))
    print(f"bf16, {heads} heads, S_q = S_k = S, scale 1/sqrt(D); {args.warmup} warm-up calls, "
          f"median of {args.iters} timed calls (CUDA events, one stream); σ_out = {args.sigma}, "
          f"σ_logit = {args.logit_sigma} on every head\n", flush=True)

    rows, failure = [], None
    for d, s, b in configs:
        for causal in masks:
            label = f"D={d} S={s} B={b} {'causal' if causal else 'non-causal'}"
            print(f"... {label}", file=sys.stderr, flush=True)
            try:
                row = run_config(lib, args, device, stream, dtype, b, heads, s, d, causal)
            except (CheckFailed, DpattnError) as e:
                failure = f"{label}: {e}"
                break
            rows.append(row)
            print(f"    SDPA kernels: {'; '.join(k[:100] for k in row['sdpa_kernels'])}", file=sys.stderr)
            print(f"    errors: vs SDPA rel {row['rel_err_vs_sdpa']:.2e} max {row['max_abs_err_vs_sdpa']:.2e}; "
                  f"vs fp32 (batch 0) ours rel {row['rel_err_vs_fp32_b0']:.2e}, "
                  f"SDPA rel {row['sdpa_rel_err_vs_fp32_b0']:.2e}; [B,S,H,D] views rel "
                  f"{row['strided_rel_err_vs_sdpa']:.2e} (bit-identical: {row['strided_bit_identical']}); output noise std "
                  f"{row['out_noise_std']:.4f}; host µs per call: SDPA {row['sdpa_host_us_per_call']:.0f}, "
                  f"ours {row['ours_host_us_per_call']:.0f}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
        if failure:
            break

    if rows:
        print(TABLE_HEAD)
        for r in rows:
            print(fmt_row(r))
        print()
        print("TFLOP/s = 4·B·H·S_q·S_k·D / t for every row, causal rows included: the full-matrix "
              "count, so causal TFLOP/s are half of what FlashAttention's papers report (they count "
              "only the unmasked half); the JSON has both (`*_tflops`, `*_tflops_fa`).")
        print("ours/SDPA = SDPA time / our time (> 1: ours faster). (c)/(b) − 1 and (d)/(b) − 1: "
              "extra time of the noisy calls over ours without noise. Rel. err. = ‖ours − SDPA‖/‖SDPA‖ "
              "(noise off).")

    json_path = Path(args.json) if args.json else (
        Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "target") / "bench_attention_sdpa.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"meta": meta, "rows": rows, "failure": failure}, indent=1))
    print(f"\nJSON: {json_path}")
    if failure:
        print(f"FAIL: {failure}")
        return 1
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", help=f"libdpattn_ffi.so (default $DPATTN_LIB, else {DEFAULT_LIB.relative_to(ROOT)})")
    p.add_argument("--json", help="where to write the JSON (default $OUT/ or target/bench_attention_sdpa.json)")
    p.add_argument("--quick", action="store_true", help="one small shape (D=64, S=1024, B=2), for smoke tests")
    p.add_argument("--check-layout", action="store_true",
                   help="check the ctypes structs against include/dpattn.h (no torch, no GPU) and exit")
    p.add_argument("--cc", help="C compiler for --check-layout (default $CC, cc or gcc)")
    p.add_argument("--no-cc", action="store_true", help="--check-layout without the C compiler")
    p.add_argument("--dims", type=int, nargs="+", default=[128, 64], help="head dims (default 128 64)")
    p.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096, 8192],
                   help="sequence lengths; batch = 16384 // S (default 1024 2048 4096 8192)")
    p.add_argument("--mask", choices=["both", "none", "causal"], default="both")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per variant (default 10; --quick 2)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per variant (default 30; --quick 5)")
    p.add_argument("--sigma", type=float, default=0.1, help="output noise σ on every head (default 0.1)")
    p.add_argument("--logit-sigma", type=float, default=0.1, help="logit noise σ on every head (default 0.1)")
    p.add_argument("--rtol", type=float, default=1e-2, help="max ‖ours − SDPA‖/‖SDPA‖ (default 1e-2)")
    args = p.parse_args()
    if args.warmup is None:
        args.warmup = 2 if args.quick else 10
    if args.iters is None:
        args.iters = 5 if args.quick else 30
    if not (args.sigma > 0 and args.logit_sigma > 0 and args.iters >= 1 and args.warmup >= 0):
        p.error("--sigma and --logit-sigma must be > 0, --iters >= 1, --warmup >= 0")
    if any(s < 1 or 16384 % s for s in args.seqs) or any(d not in (64, 128) for d in args.dims):
        p.error("--seqs must divide 16384; --dims must be 64 or 128")
    if args.check_layout:
        return check_layout(args)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
