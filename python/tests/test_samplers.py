"""Noise samplers: exact laws (chi-square at α = 1e-6 with shown power), the prefix
property, replay, and bit-identity with the C ABI (`libdpattn_ffi`)."""

import ctypes
import math
import os
from fractions import Fraction

import numpy as np
import pytest

import dpattn
from _helpers import (
    Z_1E6,
    chi2_critical,
    chi_square,
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
    discrete_laplace_pmf,
    discrete_laplace_variance,
    phi,
)

N = 200_000
ZS = list(range(-10, 11))


def binned(samples):
    """Counts of z = -10..10 and one bin for |z| > 10."""
    counts = [int(np.count_nonzero(samples == z)) for z in ZS]
    counts.append(int(np.count_nonzero(np.abs(samples) > 10)))
    return np.array(counts)


def expected_counts(pmf):
    p = list(pmf)
    p.append(1.0 - math.fsum(p))  # |z| > 10
    return N * np.array(p)


def test_quantile_and_critical_value():
    # Z_1E6 is the 1 - 1e-6 normal quantile
    assert abs(phi(-Z_1E6) - 1e-6) < 1e-12
    # Wilson–Hilferty at df = 21, α = 1e-6: the exact quantile is 67.146 (regularised upper
    # incomplete gamma by continued fraction, computed independently); W–H is within 2%
    # and above it (conservative)
    c = chi2_critical(21)
    assert 67.146 < c < 67.146 * 1.02


def test_discrete_gaussian_law(replay_key):
    sigma = 3.0
    x = dpattn.discrete_gaussian(replay_key, 11, N, sigma)
    assert x.dtype == np.int64 and x.shape == (N,)
    # mean 0 (se σ/√N = 0.0067) and the exact variance Σz²e^{-z²/2σ²}/Σe^{-z²/2σ²}
    # (se of the sample variance ≈ σ²√(2/N) = 0.028); 6 se margins
    var = discrete_gaussian_variance(sigma)
    assert abs(x.mean()) < 6 * sigma / math.sqrt(N)
    assert abs(x.var() - var) < 6 * var * math.sqrt(2.0 / N)
    obs = binned(x)
    exp = expected_counts(discrete_gaussian_pmf(sigma, ZS))
    crit = chi2_critical(len(obs) - 1)
    assert chi_square(obs, exp) < crit
    # power: the same test rejects a 5% wrong σ
    wrong = expected_counts(discrete_gaussian_pmf(sigma * 1.05, ZS))
    assert chi_square(obs, wrong) > crit


def test_discrete_gaussian_non_integer_sigma(replay_key):
    sigma = 1.75
    x = dpattn.discrete_gaussian(replay_key, 12, N, sigma)
    assert abs(x.var() - discrete_gaussian_variance(sigma)) < 6 * sigma**2 * math.sqrt(2.0 / N)
    obs = binned(x)
    exp = expected_counts(discrete_gaussian_pmf(sigma, ZS))
    # bins with small expectation (|z| >= 8 at σ = 1.75) are merged into one
    keep = exp >= 5

    def merge(c):
        return np.append(c[keep], c[~keep].sum())

    crit = chi2_critical(int(keep.sum()))  # (keep.sum() + 1) bins - 1
    assert chi_square(merge(obs), merge(exp)) < crit
    wrong = expected_counts(discrete_gaussian_pmf(sigma * 1.05, ZS))
    assert chi_square(merge(obs), merge(wrong)) > crit


def test_discrete_laplace_law(replay_key):
    scale = 2.0
    x = dpattn.discrete_laplace(replay_key, 13, N, scale)
    assert x.dtype == np.int64 and x.shape == (N,)
    var = discrete_laplace_variance(scale)  # 2q/(1-q)², q = e^{-1/scale}
    assert abs(x.mean()) < 6 * math.sqrt(var / N)
    # fourth moment of DLap is about 6·var²·(...); se of the sample variance ≈ var·√(5/N)
    assert abs(x.var() - var) < 6 * var * math.sqrt(5.0 / N)
    obs = binned(x)
    exp = expected_counts(discrete_laplace_pmf(scale, ZS))
    crit = chi2_critical(len(obs) - 1)
    assert chi_square(obs, exp) < crit
    assert chi_square(obs, expected_counts(discrete_laplace_pmf(scale * 1.05, ZS))) > crit


def test_gaussian_unsafe_float(replay_key):
    sigma = 2.0
    x = dpattn.gaussian_unsafe_float(replay_key, 14, N, sigma)
    assert x.dtype == np.float64 and x.shape == (N,)
    assert abs(x.mean()) < 6 * sigma / math.sqrt(N)
    assert abs(x.var() - sigma**2) < 6 * sigma**2 * math.sqrt(2.0 / N)
    # P(|x| < σ) = 0.682689...; se ≈ 0.001
    frac = np.mean(np.abs(x) < sigma)
    assert abs(frac - (1 - 2 * phi(-1.0))) < 0.006
    # continuous: essentially no repeated values
    assert len(np.unique(x[:10000])) == 10000


@pytest.mark.parametrize(
    "fn,param",
    [(dpattn.discrete_gaussian, 3.0), (dpattn.discrete_laplace, 2.0), (dpattn.gaussian_unsafe_float, 1.0)],
)
def test_prefix_property_and_replay(replay_key, fn, param):
    long = fn(replay_key, 5, 1000, param)
    short = fn(replay_key, 5, 100, param)
    assert short.tobytes() == long[:100].tobytes()
    again = fn(replay_key, 5, 1000, param)
    assert again.tobytes() == long.tobytes()
    assert not np.array_equal(fn(replay_key, 6, 1000, param), long)
    assert not np.array_equal(fn(dpattn.NoiseKey.for_replay(bytes(32)), 5, 1000, param), long)


BAD_PARAMS = [
    (fn, bad)
    for fn in (dpattn.discrete_gaussian, dpattn.discrete_laplace, dpattn.gaussian_unsafe_float)
    for bad in (0.0, -1.0, math.nan, math.inf)
    # σ = 0 is not specified for the float sampler
    if not (fn is dpattn.gaussian_unsafe_float and bad == 0.0)
]


@pytest.mark.parametrize("fn,bad", BAD_PARAMS)
def test_bad_parameter(replay_key, fn, bad):
    with pytest.raises(dpattn.InvalidArgument):
        fn(replay_key, 0, 10, bad)


# ---------------------------------------------------------------- the C ABI

FFI_DEFAULT = "/work/main/target/debug/libdpattn_ffi.so"


class DpattnKey(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 32)]  # include/dpattn.h: dpattn_key


@pytest.fixture(scope="module")
def ffi():
    path = os.environ.get("DPATTN_FFI_LIB", FFI_DEFAULT)
    if not os.path.exists(path):
        msg = f"C ABI library not found at {path} (set DPATTN_FFI_LIB, or DPATTN_ALLOW_NO_FFI=1 to skip)"
        if os.environ.get("DPATTN_ALLOW_NO_FFI") == "1":
            pytest.skip(msg)
        pytest.fail(msg)
    lib = ctypes.CDLL(path)
    for name in ("dpattn_fill_discrete_gaussian", "dpattn_fill_discrete_laplace"):
        f = getattr(lib, name)
        # (const dpattn_key *key, uint64_t stream, uint64_t first_index, uint64_t num,
        #  uint64_t den, int64_t *out, size_t len) -> dpattn_status
        f.argtypes = [
            ctypes.POINTER(DpattnKey),
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_size_t,
        ]
        f.restype = ctypes.c_int
    return lib


def c_fill(lib, name, key_bytes, stream, first, value, n):
    ratio = Fraction(value)  # the exact binary value of the float
    key = DpattnKey()
    key.bytes[:] = list(key_bytes)
    out = np.zeros(n, dtype=np.int64)
    status = getattr(lib, name)(
        ctypes.byref(key),
        stream,
        first,
        ratio.numerator,
        ratio.denominator,
        out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
        n,
    )
    assert status == 0, f"{name} returned status {status}"
    return out


@pytest.mark.parametrize("sigma", [3.0, 1.75, 0.5, 40.0, 5000.0])
@pytest.mark.parametrize("stream", [0, 9, 2**40 + 3])
def test_discrete_gaussian_matches_c_abi(ffi, replay_key_bytes, sigma, stream):
    key = dpattn.NoiseKey.for_replay(replay_key_bytes)
    py = dpattn.discrete_gaussian(key, stream, 2000, sigma)
    c = c_fill(ffi, "dpattn_fill_discrete_gaussian", replay_key_bytes, stream, 0, sigma, 2000)
    np.testing.assert_array_equal(py, c)
    # element i is element i of the stream: a C fill from index 1500 is the tail
    tail = c_fill(ffi, "dpattn_fill_discrete_gaussian", replay_key_bytes, stream, 1500, sigma, 500)
    np.testing.assert_array_equal(py[1500:], tail)


@pytest.mark.parametrize("scale", [2.0, 1.5, 0.25, 100.0])
@pytest.mark.parametrize("stream", [0, 9])
def test_discrete_laplace_matches_c_abi(ffi, replay_key_bytes, scale, stream):
    key = dpattn.NoiseKey.for_replay(replay_key_bytes)
    py = dpattn.discrete_laplace(key, stream, 2000, scale)
    c = c_fill(ffi, "dpattn_fill_discrete_laplace", replay_key_bytes, stream, 0, scale, 2000)
    np.testing.assert_array_equal(py, c)
    tail = c_fill(ffi, "dpattn_fill_discrete_laplace", replay_key_bytes, stream, 1000, scale, 1000)
    np.testing.assert_array_equal(py[1000:], tail)


def test_c_abi_differs_for_other_key(ffi, replay_key_bytes):
    # guards against a comparison that would pass for any key
    other = bytes(reversed(replay_key_bytes))
    py = dpattn.discrete_gaussian(dpattn.NoiseKey.for_replay(replay_key_bytes), 0, 500, 3.0)
    c = c_fill(ffi, "dpattn_fill_discrete_gaussian", other, 0, 0, 3.0, 500)
    assert not np.array_equal(py, c)
