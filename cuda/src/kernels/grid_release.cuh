// Exact release on a public grid Λ = 2^k (core/src/grid_release/grid.rs and
// GaussianGrid::release_keyed): value x becomes clamp(round(clamp(x/Λ, ±I)) + Z, ±I)·Λ with Z
// the discrete Gaussian integer of the element's window (exact_sampler.cuh), so the
// released float is a function of an integer alone. Every step is exact: x/Λ and m·Λ are
// products with a power of two (rounded only below 2^-1022, where the index is 0 anyway),
// the rounding is half away from zero on a value below 2^53, and m·Λ with |m| <= I is
// representable in the grid's format (f32: I = 2^24 − 1, k in [−149, 103]; f64:
// I = 2^53 − 1, k in [−1022, 970]; the host checks both through dpattn_core::grid_release).
#pragma once

// One group of consecutive logical elements: grid exponent k, index bound I and the
// discrete Gaussian σ = s/q in lowest terms. Mirrored by `GridGroup` in
// cuda/src/grid_release.rs (32 bytes).
struct DpGridGroup {
    int k;
    u32 pad;
    i64 bound;
    u64 s;
    u64 q;
};

// 2^k for k in [−1022, 1023], from its bits.
DP_FN double dp_pow2(int k) { return dp_bits_f64((u64)(k + 1023) << 52); }

// round(v) half away from zero, for |v| < 2^53 (v − trunc(v) is exact).
DP_FN i64 dp_round_half_away(double v) {
    i64 t = (i64)v;
    const double f = v - (double)t;
    if (f >= 0.5) t += 1;
    else if (f <= -0.5) t -= 1;
    return t;
}

// Grid::index: round(clamp(x/Λ, −I, I)); 0 for NaN.
DP_FN i64 dp_grid_index(double x, int k, i64 bound) {
    if (x != x) return 0;
    const double b = (double)bound;
    double v = x * dp_pow2(-k);
    if (v < -b) v = -b;
    if (v > b) v = b;
    return dp_round_half_away(v);
}

// Grid::value: clamp(m, −I, I)·Λ.
DP_FN double dp_grid_value(i64 m, int k, i64 bound) {
    if (m < -bound) m = -bound;
    if (m > bound) m = bound;
    return (double)m * dp_pow2(k);
}

// a + b, saturating at the ends of i64.
DP_FN i64 dp_sat_add(i64 a, i64 b) {
    const i64 max = 0x7fffffffffffffffll, min = -max - 1;
    if (b > 0 && a > max - b) return max;
    if (b < 0 && a < min - b) return min;
    return a + b;
}

// Grid::release(x, Z) with Z element `element` of the draw (key, stream) under `g`'s
// discrete Gaussian. On a sampler failure (status < 0, probability below 2^-1000) the
// value is NaN.
DP_FN int dp_grid_release_value(double x, const DpGridGroup* g, const DpKey* key, u64 stream,
                                u64 element, double* out) {
    const DpDGauss noise = dp_dgauss(g->s, g->q);
    i64 z;
    const int st = dp_dgauss_sample_at(key, stream, element, &noise, &z);
    if (st < 0) {
        *out = dp_nan_f64();
        return st;
    }
    *out = dp_grid_value(dp_sat_add(dp_grid_index(x, g->k, g->bound), z), g->k, g->bound);
    return 0;
}

// Records a failed element in a release status: status[0] |= the failure's bit (1 for
// DP_EXHAUSTED, 2 for DP_OVERFLOW), status[1] = min(status[1], element).
DP_FN void dp_release_failed(u64* status, u64 element, int st) {
    atomicOr(&status[0], st == DP_EXHAUSTED ? 1ull : 2ull);
    atomicMin(&status[1], element);
}
