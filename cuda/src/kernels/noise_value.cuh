// Values of the fixed-word samplers (docs/RANDOMNESS.md §3) from one ChaCha20 block: the
// port of Uniform, Exponential, Laplace and Gaussian in core/src/sampling/. A block of 16
// words holds 16/UW elements (UW = words per uniform: 1 for the 24-bit "f32" layout, 2 for
// the 53-bit "f64" layout); a Gaussian pair uses 2·UW words, the others UW words each.
#pragma once

#define DP_SAMPLER_UNIFORM 0
#define DP_SAMPLER_GAUSSIAN 1
#define DP_SAMPLER_LAPLACE 2
#define DP_SAMPLER_EXPONENTIAL 3

// k + 1 in 1..=2^bits from the first UW words (f64: top 53 bits of w0 | w1 << 32; f32: top
// 24 bits of w0).
DP_FN u64 dp_uniform_int(const u32* w, int uw) {
    return uw == 2 ? ((((u64)w[0]) | ((u64)w[1] << 32)) >> 11) + 1ull : (u64)(w[0] >> 8) + 1ull;
}

DP_FN u32 dp_uniform_bits(int uw) { return uw == 2 ? 53u : 24u; }

// U = (k + 1) · 2^-bits in (0, 1].
DP_FN double dp_open_uniform(const u32* w, int uw) {
    return (double)dp_uniform_int(w, uw) * dp_bits_f64((u64)(1023u - dp_uniform_bits(uw)) << 52);
}

// The Box–Muller pair in words w[0 .. 2·uw): (r·cos θ)·σ and (r·sin θ)·σ with r = √(−2 ln U1),
// θ = 2π·U2, the CPU's Gaussian pair (elements 2m and 2m + 1 of a draw).
DP_FN void dp_gauss_pair(const u32* w, int uw, double sigma, double* z0, double* z1) {
    double u1 = dp_open_uniform(w, uw);
    u64 m2 = dp_uniform_int(w + uw, uw);
    double r = dp_sqrt(-2.0 * dp_ln_unit(u1));
    double sn, cs;
    dp_sincos_2pi(m2, dp_uniform_bits(uw), &sn, &cs);
    *z0 = (r * cs) * sigma;
    *z1 = (r * sn) * sigma;
}

// The 8 Gaussian values of a block in the f64 layout (uw = 2): its four Box–Muller pairs,
// each computed once (elements 8q .. 8q + 7 of a draw for block q).
DP_FN void dp_gauss8(const u32 w[16], double sigma, double z[8]) {
    for (int m = 0; m < 4; ++m) dp_gauss_pair(w + 4 * m, 2, sigma, &z[2 * m], &z[2 * m + 1]);
}

// Element `t` (0 <= t < 16/uw) of a block, as the f64 value the CPU computes before its
// final rounding to the output precision. `p` is σ (Gaussian), b (Laplace) or 1/λ
// (exponential); the uniform ignores it.
DP_FN double dp_block_value(const u32 w[16], int sampler, int uw, double p, int t) {
    if (sampler == DP_SAMPLER_GAUSSIAN) {
        double z0, z1;
        dp_gauss_pair(w + (t >> 1) * 2 * uw, uw, p, &z0, &z1);
        return (t & 1) ? z1 : z0;
    }
    const u32* g = w + t * uw;
    double u = dp_open_uniform(g, uw);
    if (sampler == DP_SAMPLER_UNIFORM) return u;
    double mag = -dp_ln_unit(u) * p;
    if (sampler == DP_SAMPLER_LAPLACE && (g[0] & 1u)) return -mag;
    return mag;
}

// The CPU's final rounding of a sampler value `v` to each output type: the 24-bit layout
// is the CPU's f32 sampler (rounded once to f32), the 53-bit layout its f64 sampler;
// 16-bit outputs round that f32 value to nearest even.
DP_FN double dp_out_f64(double v, int uw) { return uw == 1 ? (double)dp_f64_to_f32_rn(v) : v; }
DP_FN float dp_out_f32(double v) { return dp_f64_to_f32_rn(v); }
DP_FN u16 dp_out_bf16(double v) { return dp_f32_to_bf16_bits(dp_f64_to_f32_rn(v)); }
DP_FN u16 dp_out_f16(double v) { return dp_f32_to_f16_bits(dp_f64_to_f32_rn(v)); }
