"""DP-Forward (paper 003) from Python: the noise floor against an independent Balle-Wang
bisection (sensitivity 2C, docs/PAPERS.md T3-A), the public grid, the noise law, the ledger
and its privacy unit, replay, sanitised rows and argument errors."""

import numpy as np
import pytest

import dpattn
from _helpers import analytic_gaussian_sigma_ref

KEY = dpattn.NoiseKey.for_replay(bytes(range(32)))


def test_noise_floor_is_the_analytic_gaussian_at_sensitivity_2c():
    x = np.zeros((2, 8, 32), np.float32)
    for eps, c in [(4.0, 1.0), (1.0, 0.5), (8.0, 3.0)]:
        _, floor, _ = dpattn.dp_forward_keyed(KEY, 0, x, epsilon=eps, delta=1e-5, clip_norm=c)
        want = analytic_gaussian_sigma_ref(eps, 1e-5, 2 * c)
        assert abs(floor / want - 1) < 1e-9, (eps, c, floor, want)
    # docs/PAPERS.md T3-A: eps = 4, delta = 1e-5, C = 1 gives 2.16232369904.
    _, floor, _ = dpattn.dp_forward_keyed(KEY, 0, x, epsilon=4.0, delta=1e-5, clip_norm=1.0)
    assert abs(floor - 2.16232369904) < 1e-10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_release_is_on_the_grid_with_noise_at_the_floor(dtype):
    x = np.zeros((4, 128, 64), dtype)  # clip is the identity; the output is the noise alone
    out, floor, lam = dpattn.dp_forward_keyed(KEY, 3, x, epsilon=2.0, delta=1e-5, clip_norm=0.25)
    assert out.dtype == dtype and out.shape == x.shape
    assert lam is not None and lam == 2.0 ** np.round(np.log2(lam))
    assert np.all(np.mod(out.astype(np.float64) / lam, 1.0) == 0.0)
    # The exact release's sigma is s*lam with s = sqrt((m*D'/lam)^2 + 16) (PRIVACY 8.2): at
    # most a few per cent above the floor here; 32768 draws estimate it within 1 %.
    ratio = out.std() / floor
    assert 0.98 < ratio < 1.05, ratio
    assert abs(out.mean()) < 4 * floor / np.sqrt(out.size)


def test_session_charges_the_sequence_ledger_once():
    x = np.random.default_rng(1).standard_normal((3, 16, 8))
    s = dpattn.Session(dpattn.Ledger.approx("sequence", 10.0, 1e-4))
    out, _, _ = dpattn.dp_forward(s, x, epsilon=4.0, delta=1e-5, clip_norm=1.0)
    assert s.ledger.charges == 1 and s.ledger.spent == {"epsilon": 4.0, "delta": 1e-5}
    out2, _, _ = dpattn.dp_forward(s, x, epsilon=4.0, delta=1e-5, clip_norm=1.0)
    assert s.ledger.charges == 2 and not np.array_equal(out, out2)
    with pytest.raises(dpattn.DpattnError) as e:
        dpattn.dp_forward(s, x, epsilon=4.0, delta=1e-5, clip_norm=1.0)
    assert e.value.status == "infeasible" and s.ledger.charges == 2


def test_a_token_ledger_refuses_a_sequence_release():
    s = dpattn.Session(dpattn.Ledger.approx("token", 10.0, 1e-4))
    with pytest.raises(dpattn.DpattnError) as e:
        dpattn.dp_forward(s, np.zeros((4, 8)), epsilon=1.0, delta=1e-5, clip_norm=1.0)
    assert e.value.status == "unit_mismatch" and e.value.code == 19
    assert s.ledger.charges == 0


def test_replay_streams_and_sanitised_rows():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 16))
    a, _, _ = dpattn.dp_forward_keyed(KEY, 5, x, epsilon=2.0, delta=1e-5, clip_norm=1.0)
    b, _, _ = dpattn.dp_forward_keyed(KEY, 5, x, epsilon=2.0, delta=1e-5, clip_norm=1.0)
    c, _, _ = dpattn.dp_forward_keyed(KEY, 6, x, epsilon=2.0, delta=1e-5, clip_norm=1.0)
    assert a.tobytes() == b.tobytes() and not np.array_equal(a, c)
    # A row holding NaN or inf is released as the zero row (private data is never refused).
    for bad in [np.nan, np.inf]:
        y, z = x.copy(), x.copy()
        y[1, 3, 7] = bad
        z[1, 3, :] = 0.0
        ry, _, _ = dpattn.dp_forward_keyed(KEY, 5, y, epsilon=2.0, delta=1e-5, clip_norm=1.0, region="rows")
        rz, _, _ = dpattn.dp_forward_keyed(KEY, 5, z, epsilon=2.0, delta=1e-5, clip_norm=1.0, region="rows")
        assert ry.tobytes() == rz.tobytes()


def test_unsafe_float_has_no_grid_and_is_counted():
    s = dpattn.Session(dpattn.Ledger.approx("sequence", 10.0, 1e-4))
    _, _, lam = dpattn.dp_forward(
        s, np.zeros((2, 4)), epsilon=1.0, delta=1e-5, clip_norm=1.0, noise_mode="unsafe_float"
    )
    assert lam is None and s.ledger.unsafe_float_charges == 1


@pytest.mark.parametrize(
    "kw",
    [
        {"position": "decoder"},
        {"position": "encoder:x:mha"},
        {"region": "columns"},
        {"mode": "scale"},
        {"neighbours": "tokens:0"},
        {"neighbours": "tokens:1"},  # token-level neighbours need the row-local embedding...
        {"releases": 0},
        {"clip_norm": 0.0},
        {"delta": 0.0},
    ],
)
def test_bad_parameters_raise(kw):
    args = dict(epsilon=1.0, delta=1e-5, clip_norm=1.0, position="encoder:3:add_norm2")
    args.update(kw)
    with pytest.raises(dpattn.DpattnError) as e:
        dpattn.dp_forward_keyed(KEY, 0, np.zeros((4, 8)), **args)
    assert e.value.status in ("out_of_range", "unsupported"), e.value.status


def test_shapes_and_dtypes():
    with pytest.raises(dpattn.InvalidArgument):
        dpattn.dp_forward_keyed(KEY, 0, np.zeros(8), epsilon=1.0, delta=1e-5, clip_norm=1.0)
    with pytest.raises(TypeError):
        dpattn.dp_forward_keyed(KEY, 0, np.zeros((4, 8), np.float16), epsilon=1.0, delta=1e-5, clip_norm=1.0)
    with pytest.raises(TypeError):
        dpattn.dp_forward_keyed(KEY, 0, np.zeros((4, 8), np.int32), epsilon=1.0, delta=1e-5, clip_norm=1.0)
    # pooled features are 1 x d per sequence
    out, _, _ = dpattn.dp_forward_keyed(KEY, 0, np.zeros((5, 1, 8)), epsilon=1.0, delta=1e-5, clip_norm=1.0, position="pooled")
    assert out.shape == (5, 1, 8)
