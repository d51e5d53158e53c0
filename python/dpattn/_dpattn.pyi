"""Type stubs of the compiled extension ``dpattn._dpattn`` (re-exported by ``dpattn``).

Conventions of every function:

* Arrays are NumPy arrays, or CPU tensors that export ``__dlpack__`` (PyTorch CPU tensors,
  read through ``numpy.from_dlpack`` without a copy; CUDA tensors and bfloat16 are not read
  by this build). Results are NumPy arrays. Attention inputs have shape ``(s, d)``, ``(heads, s, d)`` or
  ``(batch, heads, s, d)``; all three of q, k, v have the same number of dimensions and the
  same floating dtype (``float32``, ``float64`` or ``float16``). Any strides are accepted
  (non-contiguous arrays are copied once). A wrong dtype raises ``TypeError``; a wrong
  number of dimensions or inconsistent shapes raise ``InvalidArgument``.
* Errors of the library raise ``DpattnError`` (or its subclass ``InvalidArgument``, which is
  also a ``ValueError``) carrying ``status`` (a short name such as ``"shape_mismatch"``) and
  ``code`` (the C ABI's ``dpattn_status`` value). On any error nothing is charged to a
  ledger; a session may skip the stream id it had reserved for the failed release
  (``next_stream`` still advances: an id once handed out is never handed out again).
* Long computations release the GIL.
"""

from typing import Literal, Optional, Union

import numpy as np
import numpy.typing as npt

__version__: str

Unit = str
"""A privacy unit: ``"token"``, ``"tokens:<c>"`` (any ``c >= 1`` tokens), ``"feature_column"``,
``"sequence"``, ``"prompt"`` or ``"record"``."""

NoiseModeName = Literal["exact", "constant_time", "unsafe_float"]

class DpattnError(Exception):
    """An error reported by the library."""

    status: str
    """The status name, e.g. ``"infeasible"``, ``"unit_mismatch"``, ``"out_of_range"``."""
    code: int
    """The C ABI status code (``dpattn_status``) of the same error."""

class InvalidArgument(DpattnError, ValueError):
    """Bad shapes, sizes, NaN/Inf in public parameters, or parameters out of range
    (statuses ``shape_mismatch``, ``buffer_too_short``, ``non_finite``, ``out_of_range``,
    ``size_overflow``)."""

class NoiseKey:
    """A 256-bit ChaCha20 key for noise streams."""

    @staticmethod
    def generate() -> NoiseKey:
        """A fresh key from the operating system's random number generator."""
    @staticmethod
    def for_replay(key: bytes) -> NoiseKey:
        """A fixed key (32 bytes): **for replay and audit only**; reusing a ``(key, stream)``
        pair for two releases reveals the exact difference of their inputs."""
    def __bytes__(self) -> bytes: ...
    def __repr__(self) -> str:
        """Never shows the key's bytes."""

class Ledger:
    """A privacy budget for one privacy unit, charged by releases (a copy when read from a
    session)."""

    @staticmethod
    def approx(unit: Unit, epsilon: float, delta: float) -> Ledger:
        """An (ε, δ) ledger under basic composition."""
    @staticmethod
    def zcdp(unit: Unit, rho: float) -> Ledger:
        """A ρ-zCDP ledger."""
    @staticmethod
    def rdp(unit: Unit, epsilon: float, delta: float) -> Ledger:
        """A Rényi-DP ledger with a target (ε, δ)."""
    @property
    def unit(self) -> str: ...
    @property
    def kind(self) -> Literal["approx", "zcdp", "rdp"]: ...
    @property
    def spent(self) -> dict[str, float]:
        """``{"epsilon", "delta"}`` (approx, rdp) or ``{"rho"}`` (zcdp)."""
    @property
    def remaining(self) -> dict[str, float]: ...
    @property
    def total(self) -> dict[str, float]: ...
    @property
    def charges(self) -> int:
        """The number of charges recorded."""
    @property
    def unsafe_float_charges(self) -> int:
        """How many of them were for ``"unsafe_float"`` releases (not DP as shipped)."""

class Session:
    """A key from the operating system, the next unused stream id, and a ledger: every
    release through a session uses a fresh ``(key, stream)`` pair and is charged first."""

    def __init__(self, ledger: Ledger) -> None: ...
    @property
    def ledger(self) -> Ledger:
        """A copy of the session's ledger."""
    @property
    def unit(self) -> str: ...
    @property
    def next_stream(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    def save(self) -> bytes:
        """The session's state (master key, next stream, ledger), to be stored secretly."""
    @staticmethod
    def restore(state: bytes) -> Session:
        """A session from ``save``'s bytes; it draws in a fresh epoch, so even an old save
        never reissues a ``(key, stream)`` pair."""

def attention(
    q: npt.NDArray[np.floating],
    k: npt.NDArray[np.floating],
    v: npt.NDArray[np.floating],
    *,
    scale: Optional[float] = None,
    causal: bool = False,
    key_padding: Optional[npt.NDArray[np.bool_]] = None,
    threads: int = 1,
) -> npt.NDArray[np.floating]:
    """Exact attention ``softmax(scale·q·kᵀ + mask)·v`` (no privacy), computed in float32.

    ``scale`` defaults to ``1/sqrt(d)``; ``key_padding`` is a boolean ``(batch, s_k)`` array
    (``True`` = the key exists; ``(s_k,)`` for inputs without a batch dimension); a query row
    that sees no key is zero. The result has q's dtype and shape with ``d`` replaced by
    ``d_v``. k and v may have fewer heads than q when that number divides q's
    (grouped-query attention: query head ``h`` reads key/value head ``h // (heads //
    kv_heads)``, i.e. ``np.repeat`` of k and v along the head axis). ``threads > 1`` splits query rows over threads (bit for bit the same result)."""

def output_perturbation(
    session: Session,
    q: npt.NDArray[np.floating],
    k: npt.NDArray[np.floating],
    v: npt.NDArray[np.floating],
    *,
    key_norm: float,
    value_norm: float,
    epsilon: float,
    delta: float,
    scale: Optional[float] = None,
    score: Literal["exp", "cosh"] = "exp",
    key_padding: Optional[npt.NDArray[np.bool_]] = None,
    noise_mode: NoiseModeName = "exact",
) -> tuple[npt.NDArray[np.floating], npt.NDArray[np.float64]]:
    """DP cross-attention by output perturbation: public queries ``q`` over a private
    context ``(k, v)`` (privacy unit: one token, i.e. one key/value row in every head).
    Key and value rows are clamped to ``key_norm``/``value_norm``; one release of all query
    rows at (``epsilon``, ``delta``), charged to the session's ledger (which must be kept for
    tokens) before any noise is drawn. Returns ``(out, sigma)``: the released output (q's
    dtype) and the noise standard deviation of each ``(batch, head)``."""

def output_perturbation_keyed(
    key: NoiseKey,
    stream: int,
    q: npt.NDArray[np.floating],
    k: npt.NDArray[np.floating],
    v: npt.NDArray[np.floating],
    *,
    key_norm: float,
    value_norm: float,
    epsilon: float,
    delta: float,
    scale: Optional[float] = None,
    score: Literal["exp", "cosh"] = "exp",
    key_padding: Optional[npt.NDArray[np.bool_]] = None,
    noise_mode: NoiseModeName = "exact",
) -> tuple[npt.NDArray[np.floating], npt.NDArray[np.float64]]:
    """``output_perturbation`` with an explicit key and stream and no ledger: **for replay
    and audit**. The same ``(key, stream)`` and inputs reproduce the release bit for bit."""

class KvSketch:
    """The random-feature DP KV sketch: one DP release of a private context's keys
    ``(n, d)`` and values ``(n, d_v)`` (privacy unit: one token), then any number of public
    queries answered from it at no further privacy cost."""

    @staticmethod
    def release(
        session: Session,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        key_norm: float,
        value_norm: float,
        scale: float,
        features: int,
        epsilon: float,
        delta: float,
        feature_clip: float = 3.0,
        feature_seed: bytes = bytes(32),
        noise_mode: Literal["exact", "constant_time"] = "exact",
    ) -> KvSketch: ...
    @staticmethod
    def release_keyed(
        key: NoiseKey,
        stream: int,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        key_norm: float,
        value_norm: float,
        scale: float,
        features: int,
        epsilon: float,
        delta: float,
        feature_clip: float = 3.0,
        feature_seed: bytes = bytes(32),
        noise_mode: Literal["exact", "constant_time"] = "exact",
    ) -> KvSketch:
        """``release`` with an explicit key and stream and no ledger (replay, audit)."""
    @staticmethod
    def non_private(
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        key_norm: float,
        value_norm: float,
        scale: float,
        features: int,
        feature_clip: float = 3.0,
        feature_seed: bytes = bytes(32),
    ) -> KvSketch:
        """The noise-free sketch (**not private**), to measure the random-feature error."""
    def answer(self, queries: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Attention estimates for public query rows ``(s_q, d)`` → ``(s_q, d_v)``."""
    @property
    def sketch(self) -> npt.NDArray[np.float64]:
        """The released ``features × (d_v + 1)`` matrix."""
    @property
    def private(self) -> bool: ...

class MomentSketch:
    """Paper 001's moment sketch: one DP release of private keys in ``[0, R]^d`` and values
    in ``[-R_w, R_w]^d`` (float64 ``(n, d)`` arrays; privacy unit: one token) as a noisy
    Taylor-feature sketch of the kernel ``exp(temperature * q.k)`` (temperature ``1/d`` by
    default), accurate to relative ``eps_s``; any number of public queries afterwards at no
    further cost. Infeasible sizes are refused before allocating (``memory_limit_bytes``;
    status ``"memory_limit"``); docs/PRIVACY.md §4."""

    @staticmethod
    def release(
        session: Session,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        radius: float,
        weight_bound: float,
        epsilon: float,
        delta: float,
        eps_s: float = 0.01,
        temperature: Optional[float] = None,
        noise: Literal["gaussian", "laplace"] = "gaussian",
        query_policy: Literal["reject", "clamp"] = "reject",
        clamp_outputs: bool = True,
        noise_mode: NoiseModeName = "exact",
        memory_limit_bytes: int = 1 << 30,
    ) -> MomentSketch: ...
    @staticmethod
    def release_keyed(
        key: NoiseKey,
        stream: int,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        radius: float,
        weight_bound: float,
        epsilon: float,
        delta: float,
        eps_s: float = 0.01,
        temperature: Optional[float] = None,
        noise: Literal["gaussian", "laplace"] = "gaussian",
        query_policy: Literal["reject", "clamp"] = "reject",
        clamp_outputs: bool = True,
        noise_mode: NoiseModeName = "exact",
        memory_limit_bytes: int = 1 << 30,
    ) -> MomentSketch:
        """``release`` with an explicit key and stream and no ledger (replay, audit)."""
    def answer(self, queries: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Estimates for public queries ``(s_q, d)`` in ``[0, R]^d`` (``query_policy="clamp"``
        clamps others into it) → ``(s_q, d)``."""
    @property
    def sketch(self) -> npt.NDArray[np.float64]: ...

class SoftmaxTreeCrossAttention:
    """Paper 001's softmax trees: ``d + 1`` noisy segment-tree structures over private keys
    in ``[0, R]^d`` and values in ``[-R_w, R_w]^d`` (float64 ``(n, d)``; privacy unit: one
    token), released once with the recommended settings (per-vector budget split,
    Hoeffding-net copies or ``copies`` fixed ones, output clamps); the paper's setting needs
    ``epsilon <= 1``. A session is charged the achieved ``(epsilon, delta)``, at most the
    requested one. Below about ``n = 1e5`` the answers are mostly noise (BENCHMARKS.md);
    docs/PRIVACY.md §4."""

    @staticmethod
    def release(
        session: Session,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        radius: float,
        weight_bound: float,
        epsilon: float,
        delta: float,
        delta_prime: float = 1e-6,
        eps_s: float = 0.01,
        temperature: Optional[float] = None,
        copies: Optional[int] = None,
        query_policy: Literal["reject", "clamp"] = "reject",
        noise_mode: NoiseModeName = "exact",
        memory_limit_bytes: int = 1 << 30,
    ) -> SoftmaxTreeCrossAttention: ...
    @staticmethod
    def release_keyed(
        key: NoiseKey,
        stream: int,
        keys: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        *,
        radius: float,
        weight_bound: float,
        epsilon: float,
        delta: float,
        delta_prime: float = 1e-6,
        eps_s: float = 0.01,
        temperature: Optional[float] = None,
        copies: Optional[int] = None,
        query_policy: Literal["reject", "clamp"] = "reject",
        noise_mode: NoiseModeName = "exact",
        memory_limit_bytes: int = 1 << 30,
    ) -> SoftmaxTreeCrossAttention:
        """``release`` with an explicit key and stream and no ledger (replay, audit)."""
    def answer(self, queries: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Estimates for public queries ``(s_q, d)`` in ``[0, R]^d`` → ``(s_q, d)``."""
    @property
    def achieved_privacy(self) -> dict[str, float]:
        """``{"epsilon", "delta"}`` the release achieves (what a session charges)."""

def dp_forward(
    session: Session,
    x: npt.NDArray[np.floating],
    *,
    epsilon: float,
    delta: float,
    clip_norm: float,
    region: Literal["frobenius", "rows"] = "frobenius",
    mode: Literal["clip", "normalize"] = "clip",
    neighbours: str = "sequence",
    position: str = "embedding",
    releases: int = 1,
    noise_mode: NoiseModeName = "exact",
) -> tuple[npt.NDArray[np.floating], float, Optional[float]]:
    """DP-Forward (paper 003): each sequence's hidden matrix, ``x`` of shape ``(tokens, dim)``
    or ``(batch, tokens, dim)`` (float32/float64), is clipped to ``clip_norm`` (the whole
    matrix, or each row with ``region="rows"``) and released with i.i.d. Gaussian noise
    calibrated for sensitivity ``2·clip_norm`` (the analytic Gaussian; ``releases`` releases
    of one input composed exactly). Privacy unit: one sequence (``neighbours="sequence"``,
    ledger unit ``"sequence"``) or ``c`` tokens (``"tokens:<c>"``, only at
    ``position="embedding"``). ``position`` is ``"embedding"``, ``"pooled"`` (a ``1 × d``
    feature per sequence) or ``"encoder:<layer>:<mha|add_norm1|ffn|add_norm2>"``. A row
    holding NaN/inf is released as the zero row. Returns ``(released, noise_floor,
    resolution)``: the noise standard deviation is at least ``noise_floor``, and in exact
    mode every output is a multiple of ``resolution`` (``None`` for ``"unsafe_float"``)."""

def dp_forward_keyed(
    key: NoiseKey,
    stream: int,
    x: npt.NDArray[np.floating],
    *,
    epsilon: float,
    delta: float,
    clip_norm: float,
    region: Literal["frobenius", "rows"] = "frobenius",
    mode: Literal["clip", "normalize"] = "clip",
    neighbours: str = "sequence",
    position: str = "embedding",
    releases: int = 1,
    noise_mode: NoiseModeName = "exact",
) -> tuple[npt.NDArray[np.floating], float, Optional[float]]:
    """``dp_forward`` with an explicit key and stream and no ledger (replay, audit)."""

def discrete_gaussian(key: NoiseKey, stream: int, n: int, sigma: float) -> npt.NDArray[np.int64]:
    """``n`` exact samples of the discrete Gaussian ``N_Z(0, sigma²)``; element ``i`` is the
    sample at index ``i`` of ``(key, stream)``. ``sigma`` must be a positive float (its exact
    binary value is used)."""

def discrete_laplace(key: NoiseKey, stream: int, n: int, scale: float) -> npt.NDArray[np.int64]:
    """``n`` exact samples of the discrete Laplace with ``P(x) ∝ exp(-|x|/scale)``."""

def gaussian_unsafe_float(key: NoiseKey, stream: int, n: int, sigma: float) -> npt.NDArray[np.float64]:
    """``n`` floating-point Gaussian samples (Box–Muller): **not safe** for releasing private
    values (the low-order bits leak); for simulations only."""

def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ of the (continuous) Gaussian mechanism that is (ε, δ)-DP for this L2
    sensitivity (Balle & Wang's analytic calibration)."""

def discrete_gaussian_sigma(epsilon: float, delta: float, sensitivity: int) -> float:
    """The σ of the discrete Gaussian mechanism for an integer L2 sensitivity (CKS20)."""

def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """The Laplace mechanism's scale ``sensitivity / epsilon``, rounded up (the float
    returned is never below the exact quotient, so the noise is never too small)."""
