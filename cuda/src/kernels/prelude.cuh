// dpattn CUDA prelude: fixed-width types, bit casts and qualifiers that work under NVRTC
// alone (no toolkit headers) and, for the host-side port check, under a plain C++17
// compiler (tests/cuda-host compiles these headers with g++ and compares every value with
// dpattn-core bit for bit).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;
typedef long long i64;

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define DP_FN __device__ __forceinline__
// Kept out of line (large bodies called from many places: attention noise, exact samplers).
#define DP_NOINLINE __device__ __noinline__
DP_FN double dp_bits_f64(u64 b) { return __longlong_as_double((i64)b); }
DP_FN u64 dp_f64_bits(double x) { return (u64)__double_as_longlong(x); }
DP_FN float dp_bits_f32(u32 b) { return __uint_as_float(b); }
DP_FN u32 dp_f32_bits(float x) { return __float_as_uint(x); }
DP_FN u32 dp_rotl(u32 x, int n) { return __funnelshift_l(x, x, n); }
// f64 -> f32 rounded to nearest even / toward zero (IEEE conversions).
DP_FN float dp_f64_to_f32_rn(double x) { return __double2float_rn(x); }
DP_FN float dp_f64_to_f32_rz(double x) { return __double2float_rz(x); }
DP_FN double dp_sqrt(double x) { return __dsqrt_rn(x); }
// f32 -> IEEE binary16, round to nearest even (the PTX conversion, no cuda_fp16.h).
DP_FN u16 dp_f32_to_f16_bits(float x) {
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
// Integer helpers of the exact samplers: the high 64 bits of a 64×64-bit product, a word's
// bits reversed, leading/trailing zero counts (64 for 0).
DP_FN u64 dp_umulhi(u64 a, u64 b) { return __umul64hi(a, b); }
DP_FN u32 dp_brev(u32 x) { return __brev(x); }
DP_FN int dp_clz64(u64 x) { return __clzll((i64)x); }
DP_FN int dp_ctz64(u64 x) { return x ? __ffsll((i64)x) - 1 : 64; }
#else
#include <cmath>
#include <cstring>
#include <cfenv>
#define DP_FN static inline
#define DP_NOINLINE static inline
DP_FN double dp_bits_f64(u64 b) { double x; std::memcpy(&x, &b, 8); return x; }
DP_FN u64 dp_f64_bits(double x) { u64 b; std::memcpy(&b, &x, 8); return b; }
DP_FN float dp_bits_f32(u32 b) { float x; std::memcpy(&x, &b, 4); return x; }
DP_FN u32 dp_f32_bits(float x) { u32 b; std::memcpy(&b, &x, 4); return b; }
DP_FN u32 dp_rotl(u32 x, int n) { return (x << n) | (x >> (32 - n)); }
DP_FN float dp_f64_to_f32_rn(double x) { return (float)x; }
DP_FN float dp_f64_to_f32_rz(double x) {
    float r = (float)x;
    if (std::fabs((double)r) > std::fabs(x)) r = std::nextafter(r, 0.0f);
    return r;
}
DP_FN double dp_sqrt(double x) { return std::sqrt(x); }
DP_FN u64 dp_umulhi(u64 a, u64 b) { return (u64)(((unsigned __int128)a * b) >> 64); }
DP_FN u32 dp_brev(u32 x) {
    u32 r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
DP_FN int dp_clz64(u64 x) { return x ? __builtin_clzll(x) : 64; }
DP_FN int dp_ctz64(u64 x) { return x ? __builtin_ctzll(x) : 64; }
// Software f32 -> binary16, round to nearest even (host check only).
DP_FN u16 dp_f32_to_f16_bits(float x) {
    u32 f = dp_f32_bits(x);
    u32 sign = (f >> 16) & 0x8000u, exp = (f >> 23) & 0xffu, man = f & 0x7fffffu;
    if (exp == 0xffu) return (u16)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (u16)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (u16)sign;
        man |= 0x800000u;
        u32 shift = (u32)(14 - e);
        u32 half_m = man >> shift, rest = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half_m & 1u))) half_m++;
        return (u16)(sign | half_m);
    }
    u32 h = sign | ((u32)e << 10) | (man >> 13);
    u32 rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (u16)h;
}
#endif

// Neither NaN nor ±∞ (by the exponent bits, so fast-math settings cannot change it).
DP_FN bool dp_is_finite(double x) {
    return (dp_f64_bits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

// The canonical quiet NaN of each width.
DP_FN double dp_nan_f64() { return dp_bits_f64(0x7ff8000000000000ull); }
DP_FN float dp_nan_f32() { return dp_bits_f32(0x7fc00000u); }

// f32 -> bfloat16, round to nearest even; NaN stays NaN (quiet bit set), as the `half` crate.
DP_FN u16 dp_f32_to_bf16_bits(float x) {
    u32 b = dp_f32_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
    u32 bias = 0x7fffu + ((b >> 16) & 1u);
    return (u16)((b + bias) >> 16);
}
