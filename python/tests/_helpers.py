"""Independent references for the dpattn tests (NumPy float64 and the standard library only).

Nothing here calls dpattn: every expected value the tests compare against is computed from
the mathematical definitions below.
"""

import math

import numpy as np

# C ABI status codes (ffi/src/status.rs, enum dpattn_status).
CODE = {
    "shape_mismatch": 2,
    "buffer_too_short": 3,
    "non_finite": 4,
    "out_of_range": 5,
    "size_overflow": 7,
    "infeasible": 8,
    "unsupported": 11,
    "unit_mismatch": 19,
}


def as4d(x):
    """View an attention input of 2, 3 or 4 dimensions as (batch, heads, s, d)."""
    x = np.asarray(x)
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[None]
    assert x.ndim == 4
    return x


def padding4d(key_padding, batch, s_k):
    """The (batch, s_k) boolean mask for a stub-style key_padding ((s_k,) or (batch, s_k))."""
    if key_padding is None:
        return np.ones((batch, s_k), dtype=bool)
    kp = np.asarray(key_padding, dtype=bool)
    if kp.ndim == 1:
        kp = kp[None]
    assert kp.shape == (batch, s_k)
    return kp


def visible_mask(s_q, s_k, causal):
    """[s_q, s_k]: query i sees key j iff j <= i + (s_k - s_q) (bottom-right aligned causal
    diagonal, core/src/attention_options.rs, `Mask`)."""
    i = np.arange(s_q)[:, None]
    j = np.arange(s_k)[None, :]
    if causal:
        return j <= i + (s_k - s_q)
    return np.ones((s_q, s_k), dtype=bool)


def reference_attention(q, k, v, *, scale=None, causal=False, key_padding=None, score="exp"):
    """softmax(scale·q·kᵀ + mask)·v in float64; a query row that sees no key is zero.

    Accepts 2-, 3- or 4-D inputs and returns the same number of dimensions."""
    ndim = np.asarray(q).ndim
    q4 = as4d(q).astype(np.float64)
    k4 = as4d(k).astype(np.float64)
    v4 = as4d(v).astype(np.float64)
    batch, heads, s_q, d = q4.shape
    s_k = k4.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    kp = padding4d(key_padding, batch, s_k)
    vis = visible_mask(s_q, s_k, causal)
    out = np.zeros((batch, heads, s_q, v4.shape[3]))
    for b in range(batch):
        mask = vis & kp[b][None, :]
        for h in range(heads):
            a = scale * q4[b, h] @ k4[b, h].T
            for i in range(s_q):
                sel = mask[i]
                if not sel.any():
                    continue  # no visible key: zero row
                x = a[i, sel]
                if score == "exp":
                    w = np.exp(x - x.max())
                else:  # cosh
                    w = np.cosh(x)
                w = w / w.sum()
                out[b, h, i] = w @ v4[b, h][sel]
    return out.reshape(out.shape[4 - ndim:]) if ndim < 4 else out


def clamp_rows(x, bound):
    """Scale every last-axis row of x down to L2 norm <= bound; rows with NaN/inf become
    zero (the documented sanitisation of private rows)."""
    x = np.array(x, dtype=np.float64)
    finite = np.all(np.isfinite(x), axis=-1, keepdims=True)
    x = np.where(finite, x, 0.0)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    factor = np.where(norms > bound, bound / np.where(norms > 0, norms, 1.0), 1.0)
    return x * factor


def phi(x):
    """Standard normal CDF (from math.erfc, accurate in the tails)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


# z with Phi(z) = 1 - 1e-6 (the standard normal quantile; checked in test_samplers).
Z_1E6 = 4.753424308822899


def chi2_critical(df, z=Z_1E6):
    """Wilson–Hilferty approximation of the chi-square upper quantile with `df` degrees of
    freedom at the normal quantile z. At α = 1e-6 it is slightly conservative: for df = 21
    it gives 67.86 where the exact quantile (continued-fraction incomplete gamma, computed
    once by hand) is 67.15; df = 10: 47.96 vs 46.86."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(observed, expected):
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.sum((observed - expected) ** 2 / expected))


def discrete_gaussian_pmf(sigma, zs):
    """Exact N_Z(0, sigma²) probabilities of the integers zs (normaliser summed to 60σ)."""
    lim = int(math.ceil(60 * sigma)) + 1
    norm = math.fsum(math.exp(-(y * y) / (2 * sigma * sigma)) for y in range(-lim, lim + 1))
    return np.array([math.exp(-(z * z) / (2 * sigma * sigma)) / norm for z in zs])


def discrete_gaussian_variance(sigma):
    lim = int(math.ceil(60 * sigma)) + 1
    w = [math.exp(-(y * y) / (2 * sigma * sigma)) for y in range(-lim, lim + 1)]
    ys = range(-lim, lim + 1)
    return math.fsum(y * y * wy for y, wy in zip(ys, w)) / math.fsum(w)


def discrete_laplace_pmf(scale, zs):
    """P(x) = (1 - q)/(1 + q) · q^{|x|}, q = e^{-1/scale}."""
    q = math.exp(-1.0 / scale)
    return np.array([(1 - q) / (1 + q) * q ** abs(z) for z in zs])


def discrete_laplace_variance(scale):
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q) ** 2


def lowest_bit_exponent(x):
    """The exponent e of the lowest set bit of the nonzero finite float x (x = odd · 2^e)."""
    m, e = math.frexp(abs(x))  # x = m·2^e, 0.5 <= m < 1
    mant = int(m * (1 << 53))  # exact: m has at most 53 significant bits
    e -= 53
    while mant % 2 == 0:
        mant //= 2
        e += 1
    return e


def grid_exponent(values):
    """The largest k such that every value is an integer multiple of 2^k (None if all zero)."""
    ks = [lowest_bit_exponent(float(x)) for x in np.ravel(values) if x != 0]
    return min(ks) if ks else None


def all_multiples_of(values, lam):
    y = np.asarray(values, dtype=np.float64) / lam  # exact: lam is a power of two
    return bool(np.all(np.isfinite(y)) and np.all(np.floor(y) == y))


def analytic_gaussian_delta(epsilon, sigma, sensitivity):
    """Balle & Wang (2018) Thm 8: the exact δ of N(0, σ²) at L2 sensitivity Δ."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    tail = phi(-a - b)
    second = 0.0 if tail == 0.0 else math.exp(epsilon + math.log(tail))
    return phi(a - b) - second


def analytic_gaussian_sigma_ref(epsilon, delta, sensitivity=1.0):
    """The smallest σ with analytic_gaussian_delta(ε, σ, Δ) <= δ, by bisection (δ(σ) is
    decreasing in σ)."""
    lo, hi = 1e-6 * sensitivity, 1e6 * sensitivity
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if analytic_gaussian_delta(epsilon, mid, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def op_row_sensitivity(n, a, value_norm, score="exp"):
    """Δ_i of output perturbation (core/src/output_perturbation.rs, docs/PRIVACY.md §2.2):
    2R_v/(1 + (n−1)e^{−2a}) for softmax, 2R_v·cosh a/(cosh a + n − 1) for cosh."""
    if n == 0:
        return 0.0
    if score == "exp":
        return 2.0 * value_norm / (1.0 + (n - 1) * math.exp(-2.0 * a))
    return 2.0 * value_norm * math.cosh(a) / (math.cosh(a) + n - 1)


def op_batch_sensitivity(q4_b, n, key_norm, value_norm, scale, score="exp"):
    """Δ_b = sqrt(Σ_{h,i} Δ_{h,i}²) over the query rows of one batch element [heads, s_q, d]."""
    total = 0.0
    for h in range(q4_b.shape[0]):
        for i in range(q4_b.shape[1]):
            a = scale * float(np.linalg.norm(q4_b[h, i].astype(np.float64))) * key_norm
            total += op_row_sensitivity(n, a, value_norm, score) ** 2
    return math.sqrt(total)
