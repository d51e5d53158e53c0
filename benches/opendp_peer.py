"""OpenDP's Gaussian mechanism on 4096 values: the Python peer of the `safe noise` group.

Times `make_gaussian` on a 4096-vector of floats (OpenDP's float release: exact discrete
Gaussian noise on a power-of-two grid, like `dpattn safe gaussian`) and of integers (its
exact discrete Gaussian), at scale 3, and prints values per second. Not part of the test
command; run it by hand next to `cargo bench --bench samplers -- "safe noise"`:

    python3 -m venv /tmp/odp && /tmp/odp/bin/pip install opendp
    /tmp/odp/bin/python benches/opendp_peer.py
"""

import time

import opendp.prelude as dp

dp.enable_features("contrib")
N = 4096


def rate(measurement, data, seconds=3.0):
    measurement(data)  # warm up
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        measurement(data)
        calls += 1
    return calls * N / (time.perf_counter() - start)


for name, atom, kind, value in [
    ("float", dp.atom_domain(T=float, nan=False), float, 0.5),
    ("int", dp.atom_domain(T=int), int, 1),
]:
    domain = dp.vector_domain(atom, size=N)
    m = dp.m.make_gaussian(domain, dp.l2_distance(T=kind), scale=3.0)
    print(f"opendp make_gaussian {name} x{N}: {rate(m, [value] * N):.4g} values/s")
