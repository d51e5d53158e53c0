"""The random-feature DP KV sketch (docs/PRIVACY.md §13, core/src/kv_sketch.rs)."""

import math

import numpy as np
import pytest

import dpattn
from _helpers import (
    all_multiples_of,
    analytic_gaussian_sigma_ref,
    clamp_rows,
    grid_exponent,
    reference_attention,
)

D, DV = 8, 8
RK, RV = 2.0, 1.0
SCALE = 1.0 / math.sqrt(D)
KAPPA = 3.0  # default feature_clip


def problem(rng, n=200, n_q=20):
    """A small well-conditioned problem: keys of norm <= R_k, values v = k/2 (norm <= R_v),
    queries of norm 2, so the logits s·q·k lie in [-1.41, 1.41] and the attention output
    (≈ the direction of q) differs clearly from the query-blind mean of the values."""
    keys = clamp_rows(rng.standard_normal((n, D)) * 0.8, RK)
    values = keys / 2.0
    qs = rng.standard_normal((n_q, D))
    qs = qs / np.linalg.norm(qs, axis=1, keepdims=True) * 2.0
    return keys, values, qs


def rms(x):
    return math.sqrt(float(np.mean(np.square(x))))


def common(**kw):
    args = dict(key_norm=RK, value_norm=RV, scale=SCALE)
    args.update(kw)
    return args


def delta_bounds(m, dv=DV):
    """docs/PRIVACY.md §13.2: Δ₂ = 2‖U‖√(R_v² + γ²), γ = √2·R_v/d_v^{1/4}, with
    min(1, e^{κR̃−R̃²/2}) <= ‖U‖ <= e^{κR̃−R̃²/2} (each U_i ∈ [min(1/√m, τ), τ],
    τ = e^{κR̃−R̃²/2}/√m, R̃ = √s·R_k)."""
    rt = math.sqrt(SCALE) * RK
    gamma = math.sqrt(2.0) * RV / dv**0.25
    row = math.sqrt(RV**2 + gamma**2)
    top = math.exp(KAPPA * rt - rt * rt / 2)
    return 2.0 * min(1.0, top) * row, 2.0 * top * row * (1 + 1e-9), gamma


def test_non_private_converges_to_softmax_attention(rng):
    keys, values, qs = problem(rng)
    ref = reference_attention(qs, keys, values, scale=SCALE)
    err = {}
    for m in (64, 4096):
        sk = dpattn.KvSketch.non_private(keys, values, **common(features=m))
        assert sk.private is False
        ans = sk.answer(qs)
        assert ans.shape == (len(qs), DV) and ans.dtype == np.float64
        err[m] = rms(ans - ref)
    uniform = rms(values.mean(axis=0)[None] - ref)  # the query-blind answer: ≈ 0.055
    # Positive random features: error ∝ 1/√m. An independent NumPy implementation with iid
    # (not orthogonal) features on this problem gives rms errors ≈ 0.035 (m = 64) and
    # ≤ 0.0074 (m = 4096) over 10 seeds; orthogonal features only lower the variance and the
    # clip at κR̃ = 3.6 (ω·k̃ ~ N(0, ≤1.41)) biases < 0.1% of the features. Bound 0.02 = ~3x.
    assert err[4096] < err[64]
    assert err[4096] < 0.02
    assert err[4096] < uniform / 3


def test_answers_are_clamped_to_the_value_ball(rng):
    keys, values, qs = problem(rng)
    sk = dpattn.KvSketch.release_keyed(
        dpattn.NoiseKey.for_replay(bytes(32)), 0, keys, values,
        **common(features=32, epsilon=0.1, delta=1e-6),
    )
    ans = sk.answer(qs * 3)  # very noisy release, far queries
    assert np.all(np.isfinite(ans))
    assert np.all(np.linalg.norm(ans, axis=1) <= RV * (1 + 1e-12))


def test_private_release_close_to_non_private(rng, replay_key):
    n, m, eps, delta = 2000, 1024, 1000.0, 1e-6
    keys, values, qs = problem(rng, n=n)
    seed = bytes(range(100, 132))
    np_sk = dpattn.KvSketch.non_private(keys, values, **common(features=m, feature_seed=seed))
    pr_sk = dpattn.KvSketch.release_keyed(
        replay_key, 0, keys, values,
        **common(features=m, epsilon=eps, delta=delta, feature_seed=seed),
    )
    assert pr_sk.private is True
    assert pr_sk.sketch.shape == np_sk.sketch.shape == (m, DV + 1)
    # the sketch noise: N(0, σ²) per entry, σ = m(ε,δ)·Δ'(≤ Δ(1 + 1/256) + tiny), Δ <= Δ_max
    _, d_max, gamma = delta_bounds(m)
    sigma_max = analytic_gaussian_sigma_ref(eps, delta) * d_max * (1 + 1 / 256) * 1.001
    noise = (pr_sk.sketch - np_sk.sketch)[:, :DV]
    assert np.any(noise != 0)
    assert np.std(noise) < 1.1 * sigma_max  # 8192 entries: se of the std ≈ 0.8%
    # answers: num noise ≈ σ‖φ(q)‖ (E‖φ(q)‖² = e^{‖q̃‖²}), den >= n·e^{−s·R_q·R_k} in
    # expectation; so per coordinate the answer moves by ≈ σ·e^{‖q̃‖²/2}(1 + R_v/γ)/den
    qt2 = SCALE * 4.0  # ‖q̃‖² = s·‖q‖²
    scale_ans = sigma_max * math.exp(qt2 / 2) * (1 + RV / gamma) / (n * math.exp(-SCALE * 2.0 * RK))
    diff = pr_sk.answer(qs) - np_sk.answer(qs)
    assert rms(diff) < 2 * scale_ans
    ref = reference_attention(qs, keys, values, scale=SCALE)
    assert rms(diff) < rms(values.mean(axis=0)[None] - ref) / 3


def test_many_queries_cost_one_charge(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    keys, values, qs = problem(rng)
    s0 = session.next_stream
    sk = dpattn.KvSketch.release(session, keys, values, **common(features=64, epsilon=0.5, delta=1e-6))
    assert sk.private is True
    assert session.ledger.charges == 1
    assert session.ledger.spent["epsilon"] == pytest.approx(0.5, rel=1e-12)
    assert session.next_stream == s0 + 1
    for i in range(50):
        sk.answer(qs[i % len(qs)][None] * (1 + i / 50))
    sk.answer(np.tile(qs, (10, 1)))
    assert session.ledger.charges == 1
    assert session.ledger.spent["epsilon"] == pytest.approx(0.5, rel=1e-12)
    # an infeasible release charges nothing and uses no stream
    with pytest.raises(dpattn.DpattnError) as ei:
        dpattn.KvSketch.release(session, keys, values, **common(features=64, epsilon=0.6, delta=1e-6))
    assert ei.value.status == "infeasible"
    assert session.ledger.charges == 1
    # the refused release may skip the stream id it had reserved, never reuse one
    assert session.next_stream in (s0 + 1, s0 + 2)


def test_replay_and_streams(rng, replay_key):
    keys, values, _ = problem(rng, n=50)
    kw = common(features=64, epsilon=1.0, delta=1e-6)
    a = dpattn.KvSketch.release_keyed(replay_key, 3, keys, values, **kw)
    b = dpattn.KvSketch.release_keyed(replay_key, 3, keys, values, **kw)
    c = dpattn.KvSketch.release_keyed(replay_key, 4, keys, values, **kw)
    assert a.sketch.tobytes() == b.sketch.tobytes()
    assert not np.array_equal(a.sketch, c.sketch)
    # constant-time mode replays too (and is a different release)
    t1 = dpattn.KvSketch.release_keyed(replay_key, 3, keys, values, noise_mode="constant_time", **kw)
    t2 = dpattn.KvSketch.release_keyed(replay_key, 3, keys, values, noise_mode="constant_time", **kw)
    assert t1.sketch.tobytes() == t2.sketch.tobytes()


def test_feature_seed_is_public_and_matters(rng):
    keys, values, _ = problem(rng, n=50)
    a = dpattn.KvSketch.non_private(keys, values, **common(features=32))
    b = dpattn.KvSketch.non_private(keys, values, **common(features=32, feature_seed=bytes(32)))
    c = dpattn.KvSketch.non_private(keys, values, **common(features=32, feature_seed=bytes([1] * 32)))
    assert a.sketch.tobytes() == b.sketch.tobytes()  # default seed = 32 zero bytes
    assert not np.array_equal(a.sketch, c.sketch)


def test_release_lies_on_a_public_grid(rng, replay_key):
    # docs/PRIVACY.md §8.3: Λ = 2^k is the largest power of two with √N·Λ <= Δ/256
    # (N = m(d_v + 1) entries), so Λ ∈ (Δ/(512√N), Δ/(256√N)] with Δ ∈ [Δ_min, Δ_max]
    # (the range condition M + 12σ <= 2^53·Λ cannot raise it at these sizes).
    m = 64
    keys, values, _ = problem(rng, n=100)
    sk = dpattn.KvSketch.release_keyed(replay_key, 0, keys, values, **common(features=m, epsilon=1.0, delta=1e-6))
    s = sk.sketch
    d_min, d_max, _ = delta_bounds(m)
    root_n = math.sqrt(m * (DV + 1))
    k = grid_exponent(s)
    lam = 2.0**k
    assert all_multiples_of(s, lam)
    assert d_min / (512 * root_n) * (1 - 1e-9) < lam <= d_max / (256 * root_n) * (1 + 1e-9)
    # the noise-free sketch is not on that grid (the check can fail)
    np_sk = dpattn.KvSketch.non_private(keys, values, **common(features=m))
    assert not all_multiples_of(np_sk.sketch, lam)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_private_rows_become_zero_rows(rng, replay_key, bad):
    # §13.2: "a row with a NaN or infinity becomes the zero row" (never refused)
    keys, values, qs = problem(rng, n=60)
    kb, vb, kz, vz = keys.copy(), values.copy(), keys.copy(), values.copy()
    kb[7, 3] = bad
    kz[7] = 0.0
    vb[21, 0] = bad
    vz[21] = 0.0
    kw = common(features=64, epsilon=1.0, delta=1e-6)
    a = dpattn.KvSketch.release_keyed(replay_key, 1, kb, vb, **kw)
    b = dpattn.KvSketch.release_keyed(replay_key, 1, kz, vz, **kw)
    assert np.all(np.isfinite(a.sketch))
    assert a.sketch.tobytes() == b.sketch.tobytes()
    assert np.all(np.isfinite(a.answer(qs)))
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    sk = dpattn.KvSketch.release(session, kb, vb, **kw)
    assert session.ledger.charges == 1 and np.all(np.isfinite(sk.sketch))


def test_private_rows_are_clamped(rng):
    # a key/value row beyond its bound acts as the row scaled to the bound
    keys, values, qs = problem(rng, n=200)
    kb, vb = keys.copy(), values.copy()
    kb[5] = kb[5] / np.linalg.norm(kb[5]) * 50.0
    vb[9] = vb[9] / np.linalg.norm(vb[9]) * 20.0
    kw = common(features=4096)
    a = dpattn.KvSketch.non_private(kb, vb, **kw).answer(qs)
    ref = reference_attention(qs, clamp_rows(kb, RK), clamp_rows(vb, RV), scale=SCALE)
    bad_ref = reference_attention(qs, kb, vb, scale=SCALE)
    assert rms(a - ref) < 0.02  # as in test_non_private_converges_to_softmax_attention
    assert rms(a - ref) < rms(bad_ref - ref) / 3
