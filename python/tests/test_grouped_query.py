"""Grouped-query attention from Python: k and v with fewer heads than q (dividing them)
give exactly the result on k and v repeated per group (``np.repeat`` along the head axis,
PyTorch's ``repeat_interleave``)."""

import numpy as np
import pytest

import dpattn


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_query_attention_is_the_repeated_problem(kv_heads):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, kv_heads, 7, 8)).astype(np.float32)
    v = rng.standard_normal((2, kv_heads, 7, 8)).astype(np.float32)
    group = 4 // kv_heads
    grouped = dpattn.attention(q, k, v, causal=True)
    repeated = dpattn.attention(q, np.repeat(k, group, axis=1), np.repeat(v, group, axis=1), causal=True)
    assert grouped.tobytes() == repeated.tobytes()


def test_key_value_heads_must_divide_query_heads():
    x = np.ones((1, 4, 3, 8), np.float32)
    kv = np.ones((1, 3, 3, 8), np.float32)
    with pytest.raises(dpattn.InvalidArgument) as e:
        dpattn.attention(x, kv, kv)
    assert e.value.status == "shape_mismatch"
