"""dpattn: differentially private attention.

Every DP release goes through a :class:`Session` (a key from the operating system, a fresh
stream id per release, and a :class:`Ledger` for one privacy unit) and, by default, is safe
in floating point: the released floats lie on a public grid and carry exact integer noise.

>>> import numpy as np, dpattn
>>> session = dpattn.Session(dpattn.Ledger.approx("token", epsilon=4.0, delta=1e-5))
>>> rng = np.random.default_rng(0)
>>> q = rng.standard_normal((4, 16)).astype(np.float32)        # public queries
>>> kv = rng.standard_normal((256, 16)).astype(np.float32)     # private context
>>> out, sigma = dpattn.output_perturbation(
...     session, q, kv, kv, key_norm=4.0, value_norm=4.0, epsilon=1.0, delta=1e-6)
>>> out.shape, session.ledger.charges
((4, 16), 1)
"""

from ._dpattn import (
    DpattnError,
    InvalidArgument,
    KvSketch,
    Ledger,
    MomentSketch,
    NoiseKey,
    Session,
    SoftmaxTreeCrossAttention,
    __version__,
    analytic_gaussian_sigma,
    attention,
    discrete_gaussian,
    discrete_gaussian_sigma,
    discrete_laplace,
    dp_forward,
    dp_forward_keyed,
    gaussian_unsafe_float,
    laplace_scale,
    output_perturbation,
    output_perturbation_keyed,
)

__all__ = [
    "DpattnError",
    "InvalidArgument",
    "KvSketch",
    "Ledger",
    "MomentSketch",
    "NoiseKey",
    "Session",
    "SoftmaxTreeCrossAttention",
    "__version__",
    "analytic_gaussian_sigma",
    "attention",
    "discrete_gaussian",
    "discrete_gaussian_sigma",
    "discrete_laplace",
    "dp_forward",
    "dp_forward_keyed",
    "gaussian_unsafe_float",
    "laplace_scale",
    "output_perturbation",
    "output_perturbation_keyed",
]
