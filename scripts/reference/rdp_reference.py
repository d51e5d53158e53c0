#!/usr/bin/env python3
"""Reference values for tests/accounting/rdp.rs (the RDP accountant in core/src/accounting/rdp.rs).

Run from the repository root:

    python3 -m venv .venv
    .venv/bin/pip install dp-accounting==0.6.0 mpmath==1.4.1
    .venv/bin/pip install --no-deps opacus==1.6.0
    .venv/bin/python scripts/reference/rdp_reference.py

Sources (independent of the Rust code):
  * dp_accounting 0.6.0 (Google): rdp.rdp_privacy_accountant (RdpAccountant, DEFAULT_RDP_ORDERS,
    _compute_rdp_poisson_subsampled_gaussian, compute_epsilon, compute_delta).
  * opacus 1.6.0 (Meta): accountants/analysis/rdp.py (compute_rdp, get_privacy_spent) and
    RDPAccountant.DEFAULT_ALPHAS; loaded from its file, without torch.
  * mpmath 1.4.1: A_alpha = E_{x~N(0,z^2)}[(1 - q + q exp((2x-1)/(2z^2)))^alpha] by numerical
    quadrature at 40 digits (no series at all), for single-step RDP values.
"""
import importlib.util
import math
import sys
import sysconfig

import mpmath as mp
import numpy as np
from scipy import optimize

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as rdpa

# Opacus' analysis module imports only numpy/scipy; load it without the opacus package
# (whose __init__ needs torch).
site = sysconfig.get_paths()["purelib"]
spec = importlib.util.spec_from_file_location(
    "opacus_rdp", f"{site}/opacus/accountants/analysis/rdp.py"
)
opacus_rdp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(opacus_rdp)
OPACUS_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))

from importlib.metadata import version
print(f"# dp-accounting {version('dp-accounting')}, opacus {version('opacus')},"
      f" mpmath {mp.__version__}, numpy {np.__version__}, scipy {version('scipy')}")


def dpa_eps(q, z, steps, delta, orders=None):
    acc = rdpa.RdpAccountant(orders)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps))
    e, a = acc.get_epsilon_and_optimal_order(delta)
    return float(e), float(a)


def dpa_delta(q, z, steps, eps, orders=None):
    acc = rdpa.RdpAccountant(orders)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps))
    d, a = acc.get_delta_and_optimal_order(eps)
    return float(d), float(a)


def opacus_eps(q, z, steps, delta, orders=OPACUS_ALPHAS):
    rdp = opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=steps, orders=orders)
    e, a = opacus_rdp.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
    return float(e), float(a)


def mp_rdp(q, z, alpha, dps=40):
    """Single-step RDP by quadrature of A_alpha (split at z0 and a few sigmas)."""
    with mp.workdps(dps):
        q, z, alpha = mp.mpf(q), mp.mpf(z), mp.mpf(alpha)
        s2 = z * z

        def f(x):
            ratio = 1 - q + q * mp.exp((2 * x - 1) / (2 * s2))
            return mp.npdf(x, 0, z) * ratio ** alpha

        # The integrand ~ exp(-x^2/(2 s2) + alpha x / s2): mode near alpha (for large x).
        z0 = s2 * mp.log(1 / q - 1) + mp.mpf(1) / 2
        pts = sorted({-40 * z, -10 * z, 0, z0, alpha, alpha + 10 * z, alpha + 40 * z})
        pts = [mp.ninf] + [p for p in pts] + [mp.inf]
        a = mp.quad(f, pts)
        return mp.log(a) / (alpha - 1)


def show(name, v):
    print(f"{name} = {v!r}")


print("\n## single-step RDP values: dp_accounting, opacus, mpmath quadrature")
cases = [
    (0.01, 1.1, [1.5, 2.0, 2.5, 3.0, 7.3, 9.5, 10.0, 32.0, 63.0, 256.0]),
    (0.04, 1.5, [1.1, 2.0, 4.5, 16.0, 40.0]),
    (0.3, 0.7, [1.25, 2.0, 3.75, 6.0]),
    (1e-4, 4.0, [1.5, 2.0, 12.0, 128.0]),
    (0.9, 2.0, [1.3, 3.0, 5.5]),
    (0.5, 0.5, [1.1, 2.5]),
]
for q, z, orders in cases:
    d = rdpa._compute_rdp_poisson_subsampled_gaussian(q, z, orders)
    o = opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=1, orders=orders)
    for a, dv, ov in zip(orders, d, o):
        m = mp_rdp(q, z, a)
        print(f"q={q} z={z} alpha={a}: dpa={float(dv)!r} opacus={float(ov)!r} mp={mp.nstr(m, 20)}")

print("\n## dp_accounting RdpAccountant (DEFAULT_RDP_ORDERS) epsilon")
for q, z, steps, delta in [
    (0.01, 1.1, 10_000, 1e-5),
    (0.04, 1.5, 2250, 1e-5),
    (0.001, 0.8, 100_000, 1e-6),
    (0.01, 1.1, 10_000, 1e-50),
    (0.01, 5.0, 1_000_000_000, 1e-5),
    (0.2, 3.0, 500, 1e-7),
    (1.0, 10.0, 100, 1e-5),
]:
    e, a = dpa_eps(q, z, steps, delta)
    print(f"q={q} z={z} T={steps} delta={delta}: eps={e!r} order={a!r}")

print("\n## dp_accounting delta for given epsilon")
for q, z, steps, eps in [(0.01, 1.1, 10_000, 2.0), (0.01, 1.1, 10_000, 5.0), (0.04, 1.5, 2250, 7.0)]:
    d, a = dpa_delta(q, z, steps, eps)
    print(f"q={q} z={z} T={steps} eps={eps}: delta={d!r} order={a!r}")

print("\n## Opacus (DEFAULT_ALPHAS) epsilon")
show("opacus q=0.04 z=1.5 T=2250 delta=1e-5", opacus_eps(0.04, 1.5, 2250, 1e-5))
show("opacus q=0.01 z=1.1 T=10000 delta=1e-5", opacus_eps(0.01, 1.1, 10000, 1e-5))

print("\n## Opacus get_noise_multiplier (RDP, epsilon_tolerance=0.01) and the exact root")
for steps, label in [(int(90 / 0.04), "90 epochs"), (2000, "2000 steps")]:
    # Opacus' own bisection (accountants/utils.py), reproduced to avoid importing torch.
    eps_high, sigma_low, sigma_high = float("inf"), 0, 10
    while eps_high > 8:
        sigma_high *= 2
        eps_high = opacus_eps(0.04, sigma_high, steps, 1e-5)[0]
    while 8 - eps_high > 0.01:
        sigma = (sigma_low + sigma_high) / 2
        eps = opacus_eps(0.04, sigma, steps, 1e-5)[0]
        if eps < 8:
            sigma_high, eps_high = sigma, eps
        else:
            sigma_low = sigma
    exact = optimize.brentq(lambda s: opacus_eps(0.04, s, steps, 1e-5)[0] - 8, 0.5, 5,
                            xtol=1e-15, rtol=1e-15)
    print(f"{label} (T={steps}): opacus get_noise_multiplier={sigma_high!r} "
          f"eps_at_it={eps_high!r} exact_root={exact!r}")

print("\n## exact calibration root with dp_accounting's default orders")
for q, steps, target, delta in [(0.01, 10_000, 3.0, 1e-5), (0.04, 2250, 8.0, 1e-5)]:
    root = optimize.brentq(lambda s: dpa_eps(q, s, steps, delta)[0] - target, 0.3, 20,
                           xtol=1e-15, rtol=1e-15)
    print(f"q={q} T={steps} eps={target} delta={delta}: z={root!r}")

print("\n## Opacus' exact (signed two-series) formula on dp_accounting's DEFAULT_RDP_ORDERS")
DPA_ORDERS = list(rdpa.DEFAULT_RDP_ORDERS)
for q, z, steps, delta in [
    (0.01, 1.1, 10_000, 1e-5),
    (0.04, 1.5, 2250, 1e-5),
    (0.001, 0.8, 100_000, 1e-6),
    (0.01, 1.1, 10_000, 1e-50),
    (0.2, 3.0, 500, 1e-7),
]:
    print(f"q={q} z={z} T={steps} delta={delta}: eps,order={opacus_eps(q, z, steps, delta, DPA_ORDERS)!r}")
for q, steps, target, delta in [(0.01, 10_000, 3.0, 1e-5), (0.04, 2250, 8.0, 1e-5)]:
    root = optimize.brentq(lambda s: opacus_eps(q, s, steps, delta, DPA_ORDERS)[0] - target,
                           0.3, 20, xtol=1e-15, rtol=1e-15)
    print(f"calibration q={q} T={steps} eps={target} delta={delta}: z={root!r}")

print("\n## epsilon from 40-digit quadrature at the optimal order (ground truth for the optimum)")
for q, z, steps, delta, alpha in [
    (0.04, 1.5, 2250, 1e-5, 3.9),
    (0.01, 1.1, 10_000, 1e-5, 4.7),
]:
    with mp.workdps(40):
        a = mp.mpf(alpha)
        e = steps * mp_rdp(q, z, alpha) + mp.log((a - 1) / a) - (mp.log(mp.mpf(delta)) + mp.log(a)) / (a - 1)
    print(f"q={q} z={z} T={steps} delta={delta} alpha={alpha}: eps={mp.nstr(e, 20)}")

print("\n## dp_accounting restricted to integer orders (exact binomial sums there)")
INT_ORDERS = list(range(2, 64)) + [128, 256, 512, 1024]
for q, z, steps, delta in [(0.01, 1.1, 10_000, 1e-5), (0.04, 1.5, 2250, 1e-5), (0.001, 0.8, 100_000, 1e-6)]:
    e, a = dpa_eps(q, z, steps, delta, INT_ORDERS)
    print(f"eps q={q} z={z} T={steps} delta={delta}: {e!r} order={a!r}")
for q, z, steps, eps in [(0.01, 1.1, 10_000, 2.0), (0.01, 1.1, 10_000, 5.0), (0.04, 1.5, 2250, 7.0)]:
    d, a = dpa_delta(q, z, steps, eps, INT_ORDERS)
    print(f"delta q={q} z={z} T={steps} eps={eps}: {d!r} order={a!r}")
print("single-step integer orders, dp_accounting:",
      [(q, z, a, float(v)) for q, z in [(0.01, 1.1), (1e-4, 4.0), (0.3, 0.7)] for a, v in
       zip([2, 3, 10, 32, 256], rdpa._compute_rdp_poisson_subsampled_gaussian(q, z, [2, 3, 10, 32, 256]))])
