"""Sessions, ledgers and keys: every release is charged once, a refused release charges
nothing and uses no stream id, and no `(key, stream)` pair serves two releases."""

import numpy as np
import pytest

import dpattn
from _helpers import CODE


def data(rng, s_q=3, s_k=40, d=4):
    return (
        rng.standard_normal((s_q, d)) * 0.5,
        rng.standard_normal((s_k, d)) * 0.5,
        rng.standard_normal((s_k, d)) * 0.5,
    )


def release(session, q, k, v, epsilon=0.5, delta=1e-6, **kw):
    return dpattn.output_perturbation(
        session, q, k, v, key_norm=1.0, value_norm=1.0, epsilon=epsilon, delta=delta, **kw
    )


def test_ledger_properties():
    led = dpattn.Ledger.approx("token", 2.0, 1e-5)
    assert led.unit == "token"
    assert led.kind == "approx"
    assert led.charges == 0 and led.unsafe_float_charges == 0
    assert led.total["epsilon"] == 2.0 and led.total["delta"] == 1e-5
    assert led.spent["epsilon"] == 0.0 and led.spent["delta"] == 0.0
    assert led.remaining["epsilon"] == 2.0
    z = dpattn.Ledger.zcdp("prompt", 0.25)
    assert z.kind == "zcdp" and z.unit == "prompt" and z.total["rho"] == 0.25
    r = dpattn.Ledger.rdp("record", 3.0, 1e-6)
    assert r.kind == "rdp" and r.unit == "record"


@pytest.mark.parametrize("unit", ["token", "tokens:4", "feature_column", "sequence", "prompt", "record"])
def test_units_accepted(unit):
    assert dpattn.Ledger.approx(unit, 1.0, 1e-6).unit == unit


@pytest.mark.parametrize("unit", ["tokens", "tokens:0", "word", ""])
def test_bad_unit(unit):
    with pytest.raises(ValueError):
        dpattn.Ledger.approx(unit, 1.0, 1e-6)


@pytest.mark.parametrize("eps,delta", [(0.0, 1e-6), (-1.0, 1e-6), (1.0, 1.0), (float("nan"), 1e-6)])
def test_bad_ledger_budget(eps, delta):
    with pytest.raises(dpattn.InvalidArgument):
        dpattn.Ledger.approx("token", eps, delta)


def test_release_charges_once(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    assert session.unit == "token"
    assert session.ledger.charges == 0
    s0 = session.next_stream
    release(session, *data(rng), epsilon=0.5, delta=1e-6)
    led = session.ledger
    assert led.charges == 1
    assert led.unsafe_float_charges == 0
    assert led.spent["epsilon"] == pytest.approx(0.5, rel=1e-12)
    assert led.spent["delta"] == pytest.approx(1e-6, rel=1e-12)
    assert led.remaining["epsilon"] == pytest.approx(0.5, rel=1e-12)
    assert session.next_stream == s0 + 1  # output perturbation uses one stream id


def test_ledger_is_a_copy(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    before = session.ledger
    release(session, *data(rng))
    assert before.charges == 0  # the earlier copy does not change
    assert session.ledger.charges == 1


def test_infeasible_release_changes_nothing(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    q, k, v = data(rng)
    release(session, q, k, v, epsilon=0.7)
    s1, spent1 = session.next_stream, session.ledger.spent
    streams = []  # next_stream after each refused release (checked last)
    with pytest.raises(dpattn.DpattnError) as ei:
        release(session, q, k, v, epsilon=0.4)  # 0.7 + 0.4 > 1
    streams.append(session.next_stream)
    assert ei.value.status == "infeasible" and ei.value.code == CODE["infeasible"]
    assert not isinstance(ei.value, dpattn.InvalidArgument)
    assert session.ledger.charges == 1
    assert session.ledger.spent == spent1
    # delta too can run out
    with pytest.raises(dpattn.DpattnError) as ei:
        release(session, q, k, v, epsilon=0.1, delta=1e-4)
    streams.append(session.next_stream)
    assert ei.value.status == "infeasible"
    assert session.ledger.charges == 1
    # what does fit still works
    release(session, q, k, v, epsilon=0.25)
    assert session.ledger.charges == 2
    assert session.ledger.spent["epsilon"] == pytest.approx(0.95, rel=1e-12)
    # stub conventions: a failed release may skip the one stream id it had reserved, and
    # next_stream never goes back (an id once handed out is never handed out again)
    assert streams[0] in (s1, s1 + 1), (s1, streams)
    assert streams[1] in (streams[0], streams[0] + 1), (s1, streams)


def test_invalid_input_charges_nothing(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    q, k, v = data(rng)
    q[0, 0] = np.nan
    s0 = session.next_stream
    with pytest.raises(dpattn.InvalidArgument):
        release(session, q, k, v)
    with pytest.raises(dpattn.InvalidArgument):
        release(session, q[:, :3], k, v)
    assert session.ledger.charges == 0
    assert session.ledger.spent["epsilon"] == 0.0
    # at most the reserved stream id of each failed release is skipped
    assert s0 <= session.next_stream <= s0 + 2


@pytest.mark.parametrize("unit", ["prompt", "sequence", "tokens:2"])
def test_unit_mismatch(rng, unit):
    session = dpattn.Session(dpattn.Ledger.approx(unit, 10.0, 1e-5))
    s0 = session.next_stream
    with pytest.raises(dpattn.DpattnError) as ei:
        release(session, *data(rng))
    assert ei.value.status == "unit_mismatch" and ei.value.code == CODE["unit_mismatch"]
    assert session.ledger.charges == 0
    with pytest.raises(dpattn.DpattnError) as ei:
        dpattn.KvSketch.release(
            session, *data(rng)[1:], key_norm=1.0, value_norm=1.0, scale=0.5, features=16,
            epsilon=1.0, delta=1e-6,
        )
    assert ei.value.status == "unit_mismatch"
    assert session.ledger.charges == 0
    # each refused release skips at most the one stream id it had reserved
    assert s0 <= session.next_stream <= s0 + 2


def test_two_releases_use_fresh_streams(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 10.0, 1e-4))
    q, k, v = data(rng)
    s0 = session.next_stream
    a, _ = release(session, q, k, v)
    s1 = session.next_stream
    b, _ = release(session, q, k, v)
    s2 = session.next_stream
    assert s0 < s1 < s2
    assert not np.array_equal(a, b)  # different noise on identical inputs
    assert session.ledger.charges == 2
    assert session.ledger.spent["epsilon"] == pytest.approx(1.0, rel=1e-12)


def test_two_sessions_differ(rng):
    q, k, v = data(rng)
    a, _ = release(dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5)), q, k, v)
    b, _ = release(dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5)), q, k, v)
    assert not np.array_equal(a, b)


def test_unsafe_float_is_counted(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 1.0, 1e-5))
    release(session, *data(rng), noise_mode="unsafe_float")
    assert session.ledger.charges == 1
    assert session.ledger.unsafe_float_charges == 1
    release(session, *data(rng), epsilon=0.1)
    assert session.ledger.charges == 2 and session.ledger.unsafe_float_charges == 1


def test_zcdp_ledger_is_charged(rng):
    session = dpattn.Session(dpattn.Ledger.zcdp("token", 5.0))
    release(session, *data(rng))
    led = session.ledger
    assert led.charges == 1
    assert 0.0 < led.spent["rho"] <= 5.0
    assert led.remaining["rho"] == pytest.approx(5.0 - led.spent["rho"], rel=1e-12, abs=1e-15)


def test_save_restore_round_trip(rng):
    session = dpattn.Session(dpattn.Ledger.approx("token", 2.0, 1e-5))
    q, k, v = data(rng)
    release(session, q, k, v, epsilon=0.5)
    release(session, q, k, v, epsilon=0.25)
    state = session.save()
    assert isinstance(state, bytes)
    restored = dpattn.Session.restore(state)
    assert restored.ledger.spent == session.ledger.spent
    assert restored.ledger.spent["epsilon"] == pytest.approx(0.75, rel=1e-12)
    assert restored.ledger.charges == session.ledger.charges == 2
    assert restored.ledger.total == session.ledger.total
    assert restored.unit == "token"
    assert restored.next_stream == session.next_stream
    assert restored.epoch != session.epoch  # a fresh epoch (equal with probability 2^-64)
    # the restored session keeps enforcing the remaining budget
    with pytest.raises(dpattn.DpattnError) as ei:
        release(restored, q, k, v, epsilon=1.5)
    assert ei.value.status == "infeasible"
    release(restored, q, k, v, epsilon=1.0)
    assert restored.ledger.spent["epsilon"] == pytest.approx(1.75, rel=1e-12)
    # two restores of one save draw different noise on the same stream id
    r1, r2 = dpattn.Session.restore(state), dpattn.Session.restore(state)
    assert r1.next_stream == r2.next_stream
    a, _ = release(r1, q, k, v)
    b, _ = release(r2, q, k, v)
    assert not np.array_equal(a, b)


def test_restore_garbage():
    with pytest.raises(dpattn.DpattnError):
        dpattn.Session.restore(b"not a session state")


def test_noise_key_repr_and_bytes(replay_key_bytes):
    key = dpattn.NoiseKey.for_replay(replay_key_bytes)
    assert bytes(key) == replay_key_bytes
    text = repr(key) + str(key)
    low = text.lower()
    assert replay_key_bytes.hex() not in low
    assert replay_key_bytes[:8].hex() not in low
    assert repr(replay_key_bytes) not in text
    assert str(list(replay_key_bytes[:8]))[1:-1] not in text
    secret = bytes([0xAB, 0xCD, 0xEF, 0x12] * 8)
    k2 = dpattn.NoiseKey.for_replay(secret)
    assert "abcdef12" not in repr(k2).lower() and "abcdef12" not in str(k2).lower()
    assert "171, 205" not in repr(k2)


def test_noise_key_generate():
    a, b = dpattn.NoiseKey.generate(), dpattn.NoiseKey.generate()
    assert len(bytes(a)) == 32 and len(bytes(b)) == 32
    assert bytes(a) != bytes(b)
    assert bytes(a).hex() not in repr(a).lower()
