"""Output-perturbation DP cross-attention: replay, the public grid of the exact release,
the calibration of σ, the noise law, masks, and sanitised private rows."""

import math

import numpy as np
import pytest

import dpattn
from _helpers import (
    all_multiples_of,
    analytic_gaussian_sigma_ref,
    as4d,
    clamp_rows,
    grid_exponent,
    op_batch_sensitivity,
    reference_attention,
)

KN, VN = 1.0, 1.0  # key_norm, value_norm


def keyed(key, stream, q, k, v, epsilon=1.0, delta=1e-6, **kw):
    return dpattn.output_perturbation_keyed(
        key, stream, q, k, v, key_norm=KN, value_norm=VN, epsilon=epsilon, delta=delta, **kw
    )


def data(rng, q_shape, s_k, d_v=None, dtype=np.float64):
    d = q_shape[-1]
    kv_lead = q_shape[:-2] + (s_k,)
    q = (rng.standard_normal(q_shape) * 0.6).astype(dtype)
    k = (rng.standard_normal(kv_lead + (d,)) * 0.6).astype(dtype)
    v = (rng.standard_normal(kv_lead + (d_v or d,)) * 0.6).astype(dtype)
    return q, k, v


def check_exact_sigma(sig, m, delta_b, n_out):
    """Exact mode (docs/PRIVACY.md §8.2, §2.5): σ_b = s·Λ_b, s = √((m·Δ'_b/Λ_b)² + 16),
    Δ_b <= Δ'_b = Δ_b + 2E_b + √N·Λ_b <= Δ_b(1 + 1/256) + 2E_b (E_b ~ 1e-14 here) and
    Λ_b <= Δ_b/(256√N), N = H·s_q·d_v; m = σ(ε, δ, 1) of the analytic Gaussian mechanism."""
    lam_max = delta_b / (256.0 * math.sqrt(n_out))
    lower = m * delta_b * (1 - 1e-9)
    upper = math.sqrt((m * delta_b * (1 + 1 / 256)) ** 2 + 16 * lam_max**2) * (1 + 1e-6)
    sig = np.asarray(sig, dtype=np.float64)
    assert np.all(sig >= lower), (sig, lower)
    assert np.all(sig <= upper), (sig, upper)


def clamped_reference(q, k, v, **kw):
    return reference_attention(q, clamp_rows(k, KN), clamp_rows(v, VN), **kw)


@pytest.mark.parametrize(
    "q_shape", [(3, 4), (2, 3, 4), (2, 2, 3, 4)], ids=["2d", "3d", "4d"]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_shapes_and_dtypes(rng, replay_key, q_shape, dtype):
    q, k, v = data(rng, q_shape, 20, d_v=5, dtype=dtype)
    out, sigma = keyed(replay_key, 0, q, k, v)
    assert out.dtype == dtype
    assert out.shape == q_shape[:-1] + (5,)
    q4 = as4d(q)
    assert sigma.dtype == np.float64
    assert sigma.size == q4.shape[0] * q4.shape[1]
    assert np.all(sigma > 0) and np.all(np.isfinite(out))


def test_replay_is_bit_identical(rng, replay_key):
    q, k, v = data(rng, (2, 4, 4), 30)
    a, sa = keyed(replay_key, 7, q, k, v)
    b, sb = keyed(replay_key, 7, q, k, v)
    assert a.tobytes() == b.tobytes() and sa.tobytes() == sb.tobytes()
    c, sc = keyed(replay_key, 8, q, k, v)
    assert not np.array_equal(a, c)
    assert sc.tobytes() == sa.tobytes()  # σ is public: it does not depend on the stream
    other = dpattn.NoiseKey.for_replay(bytes(32))
    assert not np.array_equal(a, keyed(other, 7, q, k, v)[0])
    # the float path replays too
    u1, _ = keyed(replay_key, 3, q, k, v, noise_mode="unsafe_float")
    u2, _ = keyed(replay_key, 3, q, k, v, noise_mode="unsafe_float")
    assert u1.tobytes() == u2.tobytes()
    t1, _ = keyed(replay_key, 3, q, k, v, noise_mode="constant_time")
    t2, _ = keyed(replay_key, 3, q, k, v, noise_mode="constant_time")
    assert t1.tobytes() == t2.tobytes()


def _grid_setup(rng, dtype):
    """q (heads=2, s_q=4, d=4), k, v (2, 64, 4) with a Δ_b whose log2(Δ_b/(256√N)) is not
    near an integer (so the documented grid Λ is unambiguous)."""
    heads, s_q, d, s_k = 2, 4, 4, 64
    _, k, v = data(rng, (heads, s_q, d), s_k)
    base = rng.standard_normal((heads, s_q, d))
    n_out = heads * s_q * d
    for t in np.linspace(0.3, 1.5, 25):
        q = (base * t).astype(dtype)
        delta_b = op_batch_sensitivity(q, s_k, KN, VN, 1.0 / math.sqrt(d))
        x = math.log2(delta_b / (256.0 * math.sqrt(n_out)))
        if 0.05 < x - math.floor(x) < 0.95:
            return q, k.astype(dtype), v.astype(dtype), delta_b, 2.0 ** math.floor(x)
    raise AssertionError("no suitable query scale")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exact_release_lies_on_the_documented_grid(rng, replay_key, dtype):
    # docs/PRIVACY.md §2.5/§8.3: outputs of batch element b are exact multiples of the
    # public Λ_b = 2^k, the largest power of two with √(H·s_q·d_v)·Λ_b <= Δ_b/256 (the range
    # condition cannot raise it at these sizes: (R_v + 12σ)/Λ ≈ 1e5 << 2^24).
    q, k, v, delta_b, lam = _grid_setup(rng, dtype)
    for stream in range(3):
        out, _ = keyed(replay_key, stream, q, k, v)
        assert all_multiples_of(out, lam), "release is not on the grid Λ"
        # and not on a coarser one: the noisy integers have σ/Λ ≈ 6000, so all 32 being
        # even has probability 2^-32
        assert grid_exponent(out) == round(math.log2(lam))
    # the noise-free attention is not on that grid (the test can fail)
    assert not all_multiples_of(clamped_reference(q, k, v), lam)


def test_sigma_matches_analytic_gaussian_calibration(rng, replay_key):
    # σ_b (exact mode) = s·Λ with s = sqrt((m·Δ'_b/Λ)² + 16), Δ'_b = Δ_b + 2E_b + √N·Λ_b
    # <= Δ_b(1 + 1/256) + 2E_b, m = σ(ε, δ, 1) of Balle–Wang. E_b ~ 1e-14 here.
    for eps, delta in [(1.0, 1e-6), (0.3, 1e-5), (4.0, 1e-9)]:
        q, k, v = data(rng, (2, 2, 3, 4), 50)
        _, sigma = keyed(replay_key, 0, q, k, v, epsilon=eps, delta=delta)
        m = analytic_gaussian_sigma_ref(eps, delta)
        q4 = as4d(q)
        sig = np.asarray(sigma).reshape(q4.shape[0], q4.shape[1])
        for b in range(q4.shape[0]):
            delta_b = op_batch_sensitivity(q4[b], 50, KN, VN, 0.5)
            check_exact_sigma(sig[b], m, delta_b, 2 * 3 * 4)


def test_sigma_float_mode(rng, replay_key):
    q, k, v = data(rng, (3, 3, 4), 50)
    _, sigma = keyed(replay_key, 0, q, k, v, noise_mode="unsafe_float")
    delta_b = op_batch_sensitivity(as4d(q)[0], 50, KN, VN, 0.5)
    np.testing.assert_allclose(sigma, analytic_gaussian_sigma_ref(1.0, 1e-6) * delta_b, rtol=1e-6)


@pytest.mark.parametrize("mode", ["exact", "constant_time", "unsafe_float"])
def test_noise_has_the_reported_scale(rng, replay_key, mode):
    # out − attention(q, clamp(k), clamp(v)) must be N(0, σ²) per element: over 16 streams ×
    # 48 elements, the standardised residuals have mean ≈ 0 (se 0.036) and std ≈ 1 (se 0.026).
    q, k, v = data(rng, (2, 6, 4), 40)
    k[:, 3] *= 10.0  # rows beyond the bound, to exercise the clamp
    v[:, 5] *= 10.0
    ref = clamped_reference(q, k, v)
    zs = []
    for stream in range(16):
        out, sigma = keyed(replay_key, stream, q, k, v, noise_mode=mode)
        sig = np.asarray(sigma).reshape(2)  # one σ per head (batch 1)
        assert np.all(sig > 0)
        zs.append(((out - ref) / sig[:, None, None]).ravel())
    z = np.concatenate(zs)
    assert abs(z.mean()) < 0.2
    assert 0.85 < z.std() < 1.15


def test_large_epsilon_is_accurate(rng, replay_key):
    q, k, v = data(rng, (2, 2, 5, 4), 200)
    ref = clamped_reference(q, k, v)
    out, sigma = keyed(replay_key, 1, q, k, v, epsilon=200.0, delta=1e-6)
    sig = np.asarray(sigma).reshape(2, 2)
    err = np.abs(out - ref)
    assert np.all(err <= 6.0 * sig[:, :, None, None] + 1e-9)


def test_cosh_score(rng, replay_key):
    q, k, v = data(rng, (2, 5, 4), 60)
    out, sigma = keyed(replay_key, 0, q, k, v, epsilon=100.0, score="cosh")
    ref = clamped_reference(q, k, v, score="cosh")
    sig = float(np.asarray(sigma).ravel()[0])
    assert np.all(np.abs(out - ref) <= 6 * sig)
    m = analytic_gaussian_sigma_ref(100.0, 1e-6)
    delta_b = op_batch_sensitivity(q, 60, KN, VN, 0.5, score="cosh")
    check_exact_sigma(sigma, m, delta_b, 2 * 5 * 4)
    # cosh and exp are different mechanisms (different σ)
    _, s_exp = keyed(replay_key, 0, q, k, v, epsilon=100.0)
    assert not np.allclose(sigma, s_exp)


def test_custom_scale(rng, replay_key):
    q, k, v = data(rng, (4, 4), 30)
    out, sigma = keyed(replay_key, 0, q, k, v, epsilon=300.0, scale=1.3)
    ref = clamped_reference(q, k, v, scale=1.3)
    assert np.all(np.abs(out - ref) <= 6 * float(sigma.ravel()[0]))
    m = analytic_gaussian_sigma_ref(300.0, 1e-6)
    delta_b = op_batch_sensitivity(as4d(q)[0], 30, KN, VN, 1.3)
    check_exact_sigma(sigma, m, delta_b, 4 * 4)


def test_key_padding(rng, replay_key):
    q, k, v = data(rng, (2, 2, 3, 4), 12)
    kp = np.ones((2, 12), dtype=bool)
    kp[0, [0, 5, 7]] = False
    kp[1, :] = False  # batch element 1 sees no key: constant zero output, no noise
    out, sigma = keyed(replay_key, 0, q, k, v, epsilon=100.0, key_padding=kp)
    sig = np.asarray(sigma).reshape(2, 2)
    assert np.all(out[1] == 0)
    assert np.all(sig[1] == 0)
    ref = clamped_reference(q, k, v, key_padding=kp)
    assert np.all(np.abs(out[0] - ref[0]) <= 6 * sig[0][:, None, None])
    # n in the sensitivity is the number of visible keys (9)
    m = analytic_gaussian_sigma_ref(100.0, 1e-6)
    delta_b = op_batch_sensitivity(q[0], 9, KN, VN, 0.5)
    check_exact_sigma(sig[0], m, delta_b, 2 * 3 * 4)
    # padding keys do not influence the release at all
    k2, v2 = k.copy(), v.copy()
    k2[0, :, [0, 5, 7]] = 3.0
    v2[0, :, [0, 5, 7]] = -3.0
    out2, _ = keyed(replay_key, 0, q, k2, v2, epsilon=100.0, key_padding=kp)
    assert out2.tobytes() == out.tobytes()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_private_rows_become_zero_rows(rng, replay_key, bad):
    # core/src/attention/mod.rs + tiled.rs: non-finite private key/value rows are clamped to
    # zero (sanitised, never refused). Same key and stream: bit-identical to zero rows.
    q, k, v = data(rng, (2, 3, 4), 16)
    k_bad, v_bad, k_zero, v_zero = k.copy(), v.copy(), k.copy(), v.copy()
    k_bad[0, 2, 1] = bad
    k_zero[0, 2, :] = 0.0
    v_bad[1, 9, 3] = bad
    v_zero[1, 9, :] = 0.0
    for mode in ["exact", "unsafe_float"]:
        a, sa = keyed(replay_key, 4, q, k_bad, v_bad, noise_mode=mode)
        b, sb = keyed(replay_key, 4, q, k_zero, v_zero, noise_mode=mode)
        assert np.all(np.isfinite(a))
        assert a.tobytes() == b.tobytes()
        assert sa.tobytes() == sb.tobytes()


def test_non_finite_private_rows_through_a_session(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    q, k, v = data(rng, (3, 4), 16)
    k[4, 0] = np.nan
    v[2, 2] = np.inf
    out, sigma = dpattn.output_perturbation(
        session, q, k, v, key_norm=KN, value_norm=VN, epsilon=1.0, delta=1e-6
    )
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(sigma))
    assert session.ledger.charges == 1


def test_non_contiguous_inputs(rng, replay_key):
    q, k, v = data(rng, (2, 4, 6), 20)
    qn = np.ascontiguousarray(q.transpose(0, 2, 1)).transpose(0, 2, 1)
    kn = np.ascontiguousarray(k[:, ::-1])[:, ::-1]
    vbig = np.repeat(v, 2, axis=-1)
    vn = vbig[..., ::2]
    assert not (qn.flags.c_contiguous or kn.flags.c_contiguous or vn.flags.c_contiguous)
    a, _ = keyed(replay_key, 2, qn, kn, vn)
    b, _ = keyed(replay_key, 2, q, k, v)
    assert a.tobytes() == b.tobytes()
