"""Error contract: TypeError for dtypes, InvalidArgument (a ValueError) with the C ABI's
status name and code for shapes and public parameters; private data is never refused."""

import math

import numpy as np
import pytest

import dpattn
from _helpers import CODE


def qkv(rng, s_q=3, s_k=5, d=4, dtype=np.float32):
    return (
        rng.standard_normal((s_q, d)).astype(dtype),
        rng.standard_normal((s_k, d)).astype(dtype),
        rng.standard_normal((s_k, d)).astype(dtype),
    )


def check_status(excinfo, status):
    e = excinfo.value
    assert isinstance(e, dpattn.DpattnError)
    assert e.status == status
    assert isinstance(e.code, int) and not isinstance(e.code, bool)
    assert e.code == CODE[status]


def test_exception_hierarchy():
    assert issubclass(dpattn.InvalidArgument, dpattn.DpattnError)
    assert issubclass(dpattn.InvalidArgument, ValueError)
    assert issubclass(dpattn.DpattnError, Exception)


# ---------------------------------------------------------------- dtypes: TypeError


@pytest.mark.parametrize("bad", [np.int32, np.int64, np.complex64, np.complex128, np.bool_, np.uint8])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_wrong_dtype_is_type_error(rng, bad, which):
    args = list(qkv(rng))
    args[which] = (args[which] * 3).astype(bad)
    with pytest.raises(TypeError):
        dpattn.attention(*args)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_mixed_float_dtypes_are_type_error(rng, which):
    args = list(qkv(rng))
    args[which] = args[which].astype(np.float64)
    with pytest.raises(TypeError):
        dpattn.attention(*args)
    args16 = list(qkv(rng, dtype=np.float64))
    args16[which] = args16[which].astype(np.float16)
    with pytest.raises(TypeError):
        dpattn.attention(*args16)


def test_wrong_dtype_output_perturbation(rng, replay_key):
    q, k, v = qkv(rng)
    for args in [(q, k.astype(np.int64), v), (q, k, v.astype(np.complex128)), (q.astype(np.float64), k, v)]:
        with pytest.raises(TypeError):
            dpattn.output_perturbation_keyed(
                replay_key, 0, *args, key_norm=1.0, value_norm=1.0, epsilon=1.0, delta=1e-6
            )


# ---------------------------------------------------------------- shapes: InvalidArgument


@pytest.mark.parametrize(
    "shapes",
    [
        ((4,), (5, 4), (5, 4)),  # 1-D
        ((1, 1, 1, 3, 4), (1, 1, 1, 5, 4), (1, 1, 1, 5, 4)),  # 5-D
        ((3, 4), (1, 5, 4), (1, 5, 4)),  # ndim differs
        ((3, 4), (5, 4), (1, 5, 4)),
        ((3, 4), (5, 6), (5, 4)),  # d of q and k differ
        ((3, 4), (5, 4), (6, 4)),  # s_k of k and v differ
        ((2, 3, 4), (3, 5, 4), (3, 5, 4)),  # heads differ
        ((2, 1, 3, 4), (1, 1, 5, 4), (1, 1, 5, 4)),  # batch differs
    ],
)
def test_shape_mismatch(rng, shapes):
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.attention(q, k, v)
    assert isinstance(ei.value, ValueError)
    check_status(ei, "shape_mismatch")


def test_key_padding_wrong_length(rng):
    q, k, v = qkv(rng)
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.attention(q, k, v, key_padding=np.ones(4, dtype=bool))  # s_k = 5
    check_status(ei, "shape_mismatch")


def test_shape_mismatch_output_perturbation(rng, replay_key):
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    v = rng.standard_normal((6, 4))
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.output_perturbation_keyed(
            replay_key, 0, q, k, v, key_norm=1.0, value_norm=1.0, epsilon=1.0, delta=1e-6
        )
    check_status(ei, "shape_mismatch")


# ---------------------------------------------------------------- public parameters


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_attention_refuses_non_finite_inputs(rng, bad, which):
    # plain attention makes no privacy claim: it refuses NaN/inf in any input
    args = list(qkv(rng))
    args[which] = args[which].copy()
    args[which][1, 2] = bad
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.attention(*args)
    check_status(ei, "non_finite")


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan, math.inf])
def test_attention_bad_scale(rng, scale):
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.attention(*qkv(rng), scale=scale)
    assert ei.value.status in ("out_of_range", "non_finite")
    assert ei.value.code == CODE[ei.value.status]


def keyed(replay_key, q, k, v, **kw):
    args = dict(key_norm=1.0, value_norm=1.0, epsilon=1.0, delta=1e-6)
    args.update(kw)
    return dpattn.output_perturbation_keyed(replay_key, 0, q, k, v, **args)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_output_perturbation_refuses_non_finite_public_query(rng, replay_key, bad):
    q, k, v = qkv(rng, dtype=np.float64)
    q[0, 0] = bad
    with pytest.raises(dpattn.InvalidArgument) as ei:
        keyed(replay_key, q, k, v)
    check_status(ei, "non_finite")


@pytest.mark.parametrize(
    "kw",
    [
        dict(epsilon=0.0),
        dict(epsilon=-1.0),
        dict(epsilon=math.nan),
        dict(epsilon=math.inf),
        dict(delta=0.0),
        dict(delta=1.0),
        dict(delta=math.nan),
        dict(key_norm=0.0),
        dict(key_norm=math.nan),
        dict(key_norm=math.inf),
        dict(value_norm=-1.0),
        dict(value_norm=math.nan),
        dict(scale=-0.5),
        dict(scale=math.nan),
    ],
)
def test_output_perturbation_bad_public_parameters(rng, replay_key, kw):
    q, k, v = qkv(rng, dtype=np.float64)
    with pytest.raises(dpattn.InvalidArgument) as ei:
        keyed(replay_key, q, k, v, **kw)
    assert ei.value.status in ("out_of_range", "non_finite")
    assert ei.value.code == CODE[ei.value.status]


def test_output_perturbation_bad_mode_names(rng, replay_key):
    q, k, v = qkv(rng, dtype=np.float64)
    with pytest.raises((ValueError, TypeError)):
        keyed(replay_key, q, k, v, noise_mode="float")
    with pytest.raises((ValueError, TypeError)):
        keyed(replay_key, q, k, v, score="tanh")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e300])
def test_private_data_is_never_refused(rng, replay_key, bad):
    q, k, v = qkv(rng, s_k=6, dtype=np.float64)
    k[2, 1] = bad
    v[4, 0] = bad
    out, sigma = keyed(replay_key, q, k, v)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(sigma))
    sk = dpattn.KvSketch.release_keyed(
        replay_key, 0, k, v, key_norm=1.0, value_norm=1.0, scale=0.5, features=16, epsilon=1.0, delta=1e-6
    )
    assert np.all(np.isfinite(sk.sketch))


def test_noise_key_wrong_length():
    with pytest.raises((ValueError, TypeError)):
        dpattn.NoiseKey.for_replay(bytes(31))
    with pytest.raises((ValueError, TypeError)):
        dpattn.NoiseKey.for_replay(bytes(33))


def test_kv_sketch_bad_parameters(rng):
    keys = rng.standard_normal((10, 4))
    values = rng.standard_normal((10, 3))
    base = dict(key_norm=1.0, value_norm=1.0, scale=0.5, features=8)
    for kw in [dict(features=0), dict(features=65537), dict(key_norm=0.0), dict(scale=math.nan), dict(feature_clip=-1.0)]:
        with pytest.raises(dpattn.InvalidArgument) as ei:
            dpattn.KvSketch.non_private(keys, values, **{**base, **kw})
        assert ei.value.code == CODE[ei.value.status]
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.KvSketch.non_private(keys, values[:9], **base)  # n differs
    check_status(ei, "shape_mismatch")
    sk = dpattn.KvSketch.non_private(keys, values, **base)
    with pytest.raises(dpattn.InvalidArgument) as ei:
        sk.answer(rng.standard_normal((2, 5)))  # d = 4 expected
    check_status(ei, "shape_mismatch")
    with pytest.raises(dpattn.InvalidArgument):
        sk.answer(np.array([[math.nan, 0.0, 0.0, 0.0]]))  # public queries must be finite
