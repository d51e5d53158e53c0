"""Paper 001's softmax trees from Python: the session is charged exactly the achieved
(epsilon, delta), which never exceeds the requested one; replay; answers clamped into
[-R_w, R_w] (docs/PAPERS.md P1-X8); the query domain and the memory limit. (Accuracy is
the Rust tests' business: below n = 1e5 the trees' answers are mostly noise, BENCHMARKS.)"""

import numpy as np
import pytest

import dpattn

KEY = dpattn.NoiseKey.for_replay(bytes(range(32)))


def problem(n=500, d=2):
    rng = np.random.default_rng(11)
    return rng.uniform(0, 1, (n, d)), rng.uniform(-1, 1, (n, d)), rng.uniform(0, 1, (8, d))


def release(k, v, **kw):
    args = dict(radius=1.0, weight_bound=1.0, epsilon=1.0, delta=1e-6, copies=3)
    args.update(kw)
    return dpattn.SoftmaxTreeCrossAttention.release_keyed(KEY, 4, k, v, **args)


def test_session_charges_the_achieved_privacy_once():
    k, v, q = problem()
    s = dpattn.Session(dpattn.Ledger.approx("token", 4.0, 1e-4))
    t = dpattn.SoftmaxTreeCrossAttention.release(
        s, k, v, radius=1.0, weight_bound=1.0, epsilon=1.0, delta=1e-6, copies=3
    )
    achieved = t.achieved_privacy
    assert 0 < achieved["epsilon"] <= 1.0 and 0 < achieved["delta"] <= 1e-6
    t.answer(q)
    t.answer(q)
    assert s.ledger.charges == 1 and s.ledger.spent == achieved


def test_replay_and_clamped_answers():
    k, v, q = problem()
    a, b = release(k, v).answer(q), release(k, v).answer(q)
    assert a.tobytes() == b.tobytes() and a.shape == q.shape
    assert np.all(np.abs(a) <= 1.0)


def test_refusals():
    k, v, q = problem()
    with pytest.raises(dpattn.InvalidArgument) as e:
        release(k, v).answer(q + 2.0)  # public queries beyond [0, R]^d
    assert e.value.status == "out_of_range"
    assert release(k, v, query_policy="clamp").answer(q + 2.0).shape == q.shape
    with pytest.raises(dpattn.DpattnError) as e:
        release(k, v, memory_limit_bytes=1000)
    assert e.value.status == "memory_limit"
    with pytest.raises(dpattn.InvalidArgument):
        release(k, v, epsilon=2.0)  # the paper's setting needs epsilon <= 1
    with pytest.raises(dpattn.DpattnError) as e:
        dpattn.SoftmaxTreeCrossAttention.release(
            dpattn.Session(dpattn.Ledger.approx("prompt", 4.0, 1e-4)),
            k, v, radius=1.0, weight_bound=1.0, epsilon=1.0, delta=1e-6, copies=3,
        )
    assert e.value.status == "unit_mismatch"
