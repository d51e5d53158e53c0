"""Paper 001's moment sketch from Python: answers against NumPy softmax attention with the
kernel exp(tau * q.k), tau = 1/d (the sketch's Taylor kernel is within relative eps_s of it,
so at a large epsilon the answers are within about 2 * eps_s * R_w), one charge for any
number of queries, replay, the query domain and the memory limit."""

import numpy as np
import pytest

import dpattn

KEY = dpattn.NoiseKey.for_replay(bytes(range(32)))
N, D, R = 300, 2, 3.0


def attention(q, k, v, tau):
    w = np.exp(tau * q @ k.T)
    return (w / w.sum(axis=1, keepdims=True)) @ v


def problem():
    rng = np.random.default_rng(7)
    k = rng.uniform(0, R, (N, D))
    v = rng.uniform(-1, 1, (N, D))
    q = rng.uniform(0, R, (20, D))
    return k, v, q, attention(q, k, v, 1.0 / D)


def release(k, v, epsilon, **kw):
    return dpattn.MomentSketch.release_keyed(
        KEY, 0, k, v, radius=R, weight_bound=1.0, epsilon=epsilon, delta=1e-6, **kw
    )


def test_answers_approach_softmax_attention_as_epsilon_grows():
    k, v, q, ref = problem()
    err = {eps: np.abs(release(k, v, eps).answer(q) - ref).max() for eps in [1.0, 1e6]}
    assert err[1e6] < 2 * 0.01 * 1.0, err  # 2 * eps_s * R_w
    assert err[1.0] > err[1e6], err  # more noise at a smaller epsilon
    # The answers are those of temperature 1/d: ten times closer than to temperature 1.
    wrong = np.abs(release(k, v, 1e6).answer(q) - attention(q, k, v, 1.0)).max()
    assert err[1e6] < wrong / 10, (err, wrong)


def test_one_charge_for_any_number_of_queries_and_replay():
    k, v, q, _ = problem()
    s = dpattn.Session(dpattn.Ledger.approx("token", 4.0, 1e-5))
    ms = dpattn.MomentSketch.release(s, k, v, radius=R, weight_bound=1.0, epsilon=1.0, delta=1e-6)
    for _ in range(5):
        ms.answer(q)
    assert s.ledger.charges == 1 and s.ledger.spent["epsilon"] == 1.0
    a, b = release(k, v, 1.0), release(k, v, 1.0)
    assert a.sketch.tobytes() == b.sketch.tobytes()
    assert a.answer(q).tobytes() == b.answer(q).tobytes()


def test_queries_outside_the_domain_and_the_memory_limit():
    k, v, q, _ = problem()
    with pytest.raises(dpattn.InvalidArgument) as e:
        release(k, v, 1.0).answer(q + R)  # public queries beyond [0, R]^d
    assert e.value.status == "out_of_range"
    assert release(k, v, 1.0, query_policy="clamp").answer(q + R).shape == q.shape
    with pytest.raises(dpattn.DpattnError) as e:
        release(k, v, 1.0, memory_limit_bytes=100)
    assert e.value.status == "memory_limit" and e.value.code == 13
    with pytest.raises(dpattn.InvalidArgument):
        release(k, v, 1.0, noise="cauchy")
    with pytest.raises(TypeError):
        release(k.astype(np.float32), v, 1.0)
