"""Exact attention (`dpattn.attention`) against an independent NumPy float64 reference."""

import math

import numpy as np
import pytest

import dpattn
from _helpers import reference_attention

# Tolerance. The library computes in float32 (inputs rounded to f32 once, unit roundoff
# 2^-24 ≈ 6e-8). With |logits| of a few units and at most ~100 keys per row, the f32 logit,
# exp and accumulation errors move an output by well under 1e-6·max|v| (the Rust tests hold
# relative error <= 1e-5 on random data). We allow 2e-5·max|v| + 1e-4 relative: 20x margin,
# still 1000x smaller than any masking/scale/indexing mistake (those move outputs by ~1e-1).
ATOL_F32 = 2e-5
RTOL_F32 = 1e-4
# float16 outputs are the f32 result rounded to f16 (unit roundoff 2^-11 ≈ 4.9e-4).
ATOL_F16 = 2e-3
RTOL_F16 = 2e-3


def assert_close(out, ref, v, dtype=np.float32):
    vmax = float(np.max(np.abs(np.asarray(v, dtype=np.float64))))
    atol, rtol = (ATOL_F16, RTOL_F16) if dtype == np.float16 else (ATOL_F32, RTOL_F32)
    out64 = np.asarray(out, dtype=np.float64)
    assert out64.shape == ref.shape
    err = np.abs(out64 - ref)
    bound = atol * vmax + rtol * np.abs(ref)
    assert np.all(err <= bound), f"max error {err.max():.3e} (bound {bound.min():.3e}..)"


def make(rng, shape_q, shape_k, d_v=None, dtype=np.float32):
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    vshape = shape_k[:-1] + ((d_v if d_v is not None else shape_k[-1]),)
    v = rng.standard_normal(vshape).astype(dtype)
    return q, k, v


@pytest.mark.parametrize(
    "shape_q,shape_k",
    [
        ((7, 16), (11, 16)),
        ((3, 9, 8), (3, 13, 8)),
        ((2, 3, 5, 8), (2, 3, 70, 8)),  # 70 keys: more than one 64-key block
    ],
    ids=["2d", "3d", "4d"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_matches_reference(rng, shape_q, shape_k, dtype):
    q, k, v = make(rng, shape_q, shape_k, dtype=dtype)
    out = dpattn.attention(q, k, v)
    assert out.dtype == dtype  # output dtype = q's dtype
    assert out.shape == shape_q
    assert_close(out, reference_attention(q, k, v), v, dtype)


def test_default_scale_is_inv_sqrt_d(rng):
    q, k, v = make(rng, (6, 16), (9, 16))
    default = dpattn.attention(q, k, v)
    explicit = dpattn.attention(q, k, v, scale=0.25)  # 1/sqrt(16)
    np.testing.assert_array_equal(default, explicit)
    # and another scale gives a clearly different result, matching the reference
    other = dpattn.attention(q, k, v, scale=1.0)
    assert_close(other, reference_attention(q, k, v, scale=1.0), v)
    assert np.max(np.abs(other - default)) > 1e-2


def test_value_dim_differs_from_key_dim(rng):
    q, k, v = make(rng, (2, 5, 8), (2, 12, 8), d_v=3)
    out = dpattn.attention(q, k, v)
    assert out.shape == (2, 5, 3)
    assert_close(out, reference_attention(q, k, v), v)


def test_rows_are_convex_combinations(rng):
    # Independent property: with v = one-hot columns the output rows are the softmax weights.
    s_k = 10
    q = rng.standard_normal((4, 8)).astype(np.float32)
    k = rng.standard_normal((s_k, 8)).astype(np.float32)
    v = np.eye(s_k, dtype=np.float32)
    w = dpattn.attention(q, k, v)
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-5)
    logits = (q.astype(np.float64) @ k.astype(np.float64).T) / math.sqrt(8)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(w, p, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("s_q,s_k", [(6, 6), (3, 8), (8, 5)])
def test_causal_bottom_right(rng, s_q, s_k):
    q, k, v = make(rng, (2, s_q, 8), (2, s_k, 8))
    out = dpattn.attention(q, k, v, causal=True)
    ref = reference_attention(q, k, v, causal=True)
    assert_close(out, ref, v)
    # The last query row always sees every key (bottom-right alignment).
    full = reference_attention(q, k, v)
    assert_close(out[:, -1], full[:, -1], v)
    if s_q > s_k:
        # the first s_q - s_k rows see no key: exactly zero
        assert np.all(out[:, : s_q - s_k] == 0)
    if s_q == s_k:
        # usual lower-triangular mask: row 0 sees key 0 only, so its output is v[0]
        assert_close(out[:, 0], v[:, 0].astype(np.float64), v)


def test_causal_changes_result(rng):
    q, k, v = make(rng, (6, 8), (6, 8))
    assert np.max(np.abs(dpattn.attention(q, k, v, causal=True) - dpattn.attention(q, k, v))) > 1e-2


def test_key_padding_2d_and_3d(rng):
    q, k, v = make(rng, (2, 4, 8), (2, 9, 8))
    kp = np.array([True, False, True, True, False, True, True, True, False])
    out = dpattn.attention(q, k, v, key_padding=kp)
    assert_close(out, reference_attention(q, k, v, key_padding=kp), v)
    # padding keys are never attended to: changing them changes nothing
    k2, v2 = k.copy(), v.copy()
    k2[:, ~kp] = 100.0
    v2[:, ~kp] = -7.0
    np.testing.assert_array_equal(dpattn.attention(q, k2, v2, key_padding=kp), out)

    q2, k2d, v2d = q[0], k[0], v[0]
    out2 = dpattn.attention(q2, k2d, v2d, key_padding=kp)
    assert_close(out2, reference_attention(q2, k2d, v2d, key_padding=kp), v2d)


def test_key_padding_4d_and_empty_rows(rng):
    q, k, v = make(rng, (2, 2, 3, 8), (2, 2, 7, 8))
    kp = np.ones((2, 7), dtype=bool)
    kp[0, [1, 4]] = False
    kp[1, :] = False  # batch element 1 sees no key at all
    out = dpattn.attention(q, k, v, key_padding=kp)
    ref = reference_attention(q, k, v, key_padding=kp)
    assert_close(out, ref, v)
    assert np.all(out[1] == 0) and not np.any(np.isnan(out))


def test_key_padding_with_causal(rng):
    q, k, v = make(rng, (2, 1, 5, 8), (2, 1, 5, 8))
    kp = np.array([[True, True, False, True, True], [False, True, True, True, True]])
    out = dpattn.attention(q, k, v, causal=True, key_padding=kp)
    ref = reference_attention(q, k, v, causal=True, key_padding=kp)
    assert_close(out, ref, v)
    assert np.all(out[1, 0, 0] == 0)  # row 0 sees only key 0, which is padding


def test_non_contiguous_inputs(rng):
    d, s_q, s_k = 8, 6, 10
    # transposed views
    qt = rng.standard_normal((d, s_q)).astype(np.float32).T
    kt = rng.standard_normal((d, s_k)).astype(np.float32).T
    # slices with steps, and negative strides
    vbig = rng.standard_normal((2 * s_k, 3 * d)).astype(np.float32)
    vs = vbig[::2, ::3]
    assert not qt.flags.c_contiguous and not vs.flags.c_contiguous
    expect = dpattn.attention(np.ascontiguousarray(qt), np.ascontiguousarray(kt), np.ascontiguousarray(vs))
    np.testing.assert_array_equal(dpattn.attention(qt, kt, vs), expect)
    assert_close(expect, reference_attention(qt, kt, vs), vs)

    kneg = np.ascontiguousarray(kt)[::-1]
    vneg = np.ascontiguousarray(vs)[::-1, ::-1]
    assert kneg.strides[0] < 0 and vneg.strides[1] < 0
    out = dpattn.attention(qt, kneg, vneg)
    np.testing.assert_array_equal(out, dpattn.attention(qt, kneg.copy(), vneg.copy()))
    assert_close(out, reference_attention(qt, kneg, vneg), vneg)


def test_non_contiguous_4d_and_broadcast(rng):
    base = rng.standard_normal((2, 8, 3, 12)).astype(np.float64)
    q = base.transpose(0, 2, 1, 3)[:, :, :5, ::2]  # (2, 3, 5, 6), permuted and stepped
    k = rng.standard_normal((2, 3, 9, 6))[:, :, ::-1]
    v = rng.standard_normal((2, 3, 9, 12))[..., 1::2]
    out = dpattn.attention(q, k, v)
    np.testing.assert_array_equal(out, dpattn.attention(q.copy(), k.copy(), v.copy()))
    assert_close(out, reference_attention(q, k, v), v)
    # a broadcast (stride-0) query is accepted too
    qb = np.broadcast_to(rng.standard_normal((1, 1, 1, 6)), (2, 3, 5, 6))
    outb = dpattn.attention(qb, k, v)
    np.testing.assert_array_equal(outb, dpattn.attention(np.ascontiguousarray(qb), k.copy(), v.copy()))


def test_threads_bit_identical(rng):
    q, k, v = make(rng, (2, 2, 250, 16), (2, 2, 130, 16))
    one = dpattn.attention(q, k, v, causal=True, threads=1)
    two = dpattn.attention(q, k, v, causal=True, threads=2)
    assert one.tobytes() == two.tobytes()
    q2, k2, v2 = q[0, 0], k[0, 0], v[0, 0]
    assert dpattn.attention(q2, k2, v2, threads=2).tobytes() == dpattn.attention(q2, k2, v2).tobytes()
    assert_close(two, reference_attention(q, k, v, causal=True), v)


def test_inputs_not_modified(rng):
    q, k, v = make(rng, (4, 8), (6, 8))
    copies = [x.copy() for x in (q, k, v)]
    dpattn.attention(q, k, v, causal=True)
    for a, b in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, b)


class DLPackOnly:
    """An object that is not a NumPy array but exports __dlpack__ (like a CPU tensor)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_inputs(rng):
    q, k, v = make(rng, (2, 5, 8), (2, 9, 8))
    assert not isinstance(DLPackOnly(q), np.ndarray)
    out = dpattn.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, dpattn.attention(q, k, v))
