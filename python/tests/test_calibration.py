"""Calibration functions against their defining conditions and published reference values."""

import math
from fractions import Fraction

import pytest

import dpattn
from _helpers import analytic_gaussian_delta

# docs/PAPERS.md T3-A (δ = 1e-5, S = 1, values "derived independently of dpattn's code"):
# σ_aMGM of the analytic Gaussian mechanism.
T3A = [
    (0.1, 30.749566132),
    (0.5, 7.03182667558),
    (1.0, 3.73063163482),
    (2.0, 1.99381244564),
    (4.0, 1.08116184952),
    (8.0, 0.600229072199),
]


@pytest.mark.parametrize("eps,sigma", T3A)
def test_analytic_gaussian_reference_values(eps, sigma):
    assert dpattn.analytic_gaussian_sigma(eps, 1e-5, 1.0) == pytest.approx(sigma, rel=5e-11)  # the table has 11-12 significant digits


@pytest.mark.parametrize(
    "eps,delta,sens", [(1.0, 1e-5, 1.0), (0.3, 1e-6, 2.5), (5.0, 1e-9, 0.1), (0.05, 1e-3, 7.0), (20.0, 1e-12, 1.0)]
)
def test_analytic_gaussian_balle_wang_condition(eps, delta, sens):
    # Balle & Wang Thm 8: Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) <= δ, and σ is the smallest.
    s = dpattn.analytic_gaussian_sigma(eps, delta, sens)
    assert analytic_gaussian_delta(eps, s, sens) <= delta * (1 + 1e-9)
    assert analytic_gaussian_delta(eps, 0.99 * s, sens) > delta  # tight
    # linear in the sensitivity
    assert dpattn.analytic_gaussian_sigma(eps, delta, 2 * sens) == pytest.approx(2 * s, rel=1e-12)


@pytest.mark.parametrize(
    "eps,delta,sens",
    [(-1.0, 1e-5, 1.0), (math.nan, 1e-5, 1.0), (1.0, 0.0, 1.0), (1.0, 1.0, 1.0), (1.0, -1e-5, 1.0),
     (1.0, 1.5, 1.0), (1.0, math.nan, 1.0), (1.0, 1e-5, 0.0), (1.0, 1e-5, -1.0), (1.0, 1e-5, math.inf)],
)
def test_analytic_gaussian_invalid(eps, delta, sens):
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.analytic_gaussian_sigma(eps, delta, sens)
    assert ei.value.status == "out_of_range" and ei.value.code == 5


def discrete_gaussian_delta(eps, sigma, sens):
    """CKS20 Thm 7: δ = P[Y > εσ²/Δ − Δ/2] − e^ε P[Y > εσ²/Δ + Δ/2], Y ~ N_Z(0, σ²),
    summed over the lattice (normaliser and tails to 60σ)."""
    lim = int(math.ceil(60 * sigma + abs(eps * sigma * sigma / sens))) + sens + 2
    w = {y: math.exp(-(y * y) / (2 * sigma * sigma)) for y in range(-lim, lim + 1)}
    norm = math.fsum(w.values())
    a = eps * sigma * sigma / sens - sens / 2.0
    b = eps * sigma * sigma / sens + sens / 2.0
    # both tails are summed with fsum: the absolute error (~1e-17) is far below the δs tested
    p1 = math.fsum(wy for y, wy in w.items() if y > a) / norm
    p2 = math.fsum(wy for y, wy in w.items() if y > b) / norm
    return p1 - math.exp(eps) * p2


@pytest.mark.parametrize("eps,delta,sens", [(1.0, 1e-5, 1), (0.5, 1e-6, 3), (2.0, 1e-8, 2)])
def test_discrete_gaussian_sigma_cks20(eps, delta, sens):
    s = dpattn.discrete_gaussian_sigma(eps, delta, sens)
    assert discrete_gaussian_delta(eps, s, sens) <= delta * (1 + 1e-6)
    assert discrete_gaussian_delta(eps, 0.99 * s, sens) > delta
    # close to the continuous mechanism's σ at the same sensitivity (within a few %)
    cont = dpattn.analytic_gaussian_sigma(eps, delta, float(sens))
    assert 0.9 * cont < s < 1.1 * cont


def test_discrete_gaussian_sigma_invalid():
    for args in [(1.0, 1e-5, 0), (-1.0, 1e-5, 1), (math.nan, 1e-5, 1), (1.0, 0.0, 1), (1.0, 1.0, 1)]:
        with pytest.raises(dpattn.InvalidArgument):
            dpattn.discrete_gaussian_sigma(*args)


@pytest.mark.parametrize("sens,eps", [(1.0, 1.0), (2.0, 0.5), (1.0, 4.0), (0.3, 0.7), (1e-3, 3.0), (1.0, 3.0), (5.0, 1e-4)])
def test_laplace_scale(sens, eps):
    # Δ/ε, rounded up (stub; core laplace_mechanism::laplace_scale): never below the exact
    # quotient, and at most one ulp above the round-to-nearest quotient
    b = dpattn.laplace_scale(sens, eps)
    assert Fraction(b) >= Fraction(sens) / Fraction(eps)
    assert b in (sens / eps, math.nextafter(sens / eps, math.inf))
    if Fraction(sens / eps) == Fraction(sens) / Fraction(eps):
        assert b == sens / eps  # exact quotients are returned as they are


@pytest.mark.parametrize(
    "sens,eps", [(1.0, 0.0), (1.0, -1.0), (0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0), (1.0, math.nan), (math.inf, 1.0)]
)
def test_laplace_scale_invalid(sens, eps):
    with pytest.raises(dpattn.InvalidArgument) as ei:
        dpattn.laplace_scale(sens, eps)
    assert ei.value.code == 5 or ei.value.status == "non_finite"
