"""What a call costs from Python: the shapes of `benches/ffi_overhead.rs`, through the
`dpattn` package (array checks, dtype dispatch, the output array, releasing the GIL).

    pip install ./python
    taskset -c 1 python benches/python_overhead.py

Prints the median time per call over 30 repeats of a timed loop (each loop long enough to
take about 20 ms); compare with the Rust API rows of `cargo bench --bench ffi_overhead` run
on the same core right before or after (docs/BENCHMARKS.md).
"""

import statistics
import timeit

import numpy as np

import dpattn


def per_call(fn):
    loops, _ = timeit.Timer(fn).autorange()  # about 0.2 s
    loops = max(1, loops // 10)
    times = timeit.Timer(fn).repeat(repeat=30, number=loops)
    return statistics.median(times) / loops


def main():
    rng = np.random.default_rng(0)
    x16 = rng.standard_normal((1, 1, 16, 64)).astype(np.float32)
    x1 = x16[:, :, :1].copy()
    key = dpattn.NoiseKey.generate()
    rows = [
        ("attention 1x1x16x64", lambda: dpattn.attention(x16, x16, x16)),
        ("attention 1x1x1x64 (1 query, 16 keys)", lambda: dpattn.attention(x1, x16, x16)),
        ("gaussian fill 64 (f64, unsafe float)", lambda: dpattn.gaussian_unsafe_float(key, 7, 64, 1.0)),
        ("discrete gaussian 64 (sigma 3)", lambda: dpattn.discrete_gaussian(key, 7, 64, 3.0)),
        ("empty Python call (len(x16)) - floor", lambda: len(x16)),
    ]
    for name, fn in rows:
        print(f"{name:40s} {per_call(fn) * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
