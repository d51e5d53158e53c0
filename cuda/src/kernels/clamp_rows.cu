// Clamp each row of a strided [batch, heads, seq, dim] operand to L2 norm `bound` into a
// contiguous copy: the private key/value clamp of the output-perturbation DP
// cross-attention (core/src/output_perturbation.rs), for the GPU kernels.
//
// The factor is the CPU's `clamp_factor` (core/src/attention/tiled.rs): f64 arithmetic,
// norm = big·sqrt(Σ (x/big)²) with big = max|x|, target = bound·(1 − 2^-21), factor 1 when
// norm ≤ target, target/norm otherwise, and 0 for a row holding NaN or ±∞ (clamped to
// zero, never passed on). The product x·factor is rounded once: to nearest for f32 (as the
// CPU; the 2^-21 margin covers it) and **toward zero** for bf16/f16, whose rounding
// (2^-9, 2^-12 relative) the margin does not cover: rounding toward zero never increases a
// magnitude, so the stored row's norm stays ≤ the bound.
//
// DP_T: 0 bf16, 1 f16, 2 f32. One warp per row; the sum is a warp reduction, so the factor
// may differ from the CPU's in the last place (a different summation order).

DP_FN double dp_load_el(const void* row, u32 c) {
#if DP_T == 2
    return (double)((const float*)row)[c];
#elif DP_T == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(((const u16*)row)[c]));
    return (double)f;
#else
    return (double)dp_bits_f32((u32)((const u16*)row)[c] << 16);
#endif
}

DP_FN void dp_store_el(void* row, u32 c, double y) {
#if DP_T == 2
    ((float*)row)[c] = __double2float_rn(y);
#elif DP_T == 1
    float f = __double2float_rz(y);
    u16 h;
    asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    ((u16*)row)[c] = h;
#else
    // f64 -> f32 toward zero, then drop the low 16 bits: toward zero again.
    ((u16*)row)[c] = (u16)(dp_f32_bits(__double2float_rz(y)) >> 16);
#endif
}

#if DP_T == 2
#define DP_EL_BYTES 4
#else
#define DP_EL_BYTES 2
#endif

extern "C" __global__ void dp_clamp_rows(u64 src, u64 sb, u64 sh, u64 ss, u64 dst, u32 heads,
                                         u32 seq, u32 dim, u64 rows, double bound) {
    const u32 lane = threadIdx.x & 31;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) >> 5;
    const double target = __dmul_rn(bound, 1.0 - 1.0 / 2097152.0);
    for (u64 r = warp; r < rows; r += nwarps) {
        const u64 bh = r / seq, s = r % seq, b = bh / heads, h = bh % heads;
        const unsigned char* in =
            (const unsigned char*)src + (b * sb + h * sh + s * ss) * DP_EL_BYTES;
        unsigned char* out = (unsigned char*)dst + r * dim * DP_EL_BYTES;
        double big = 0.0;
        int bad = 0;
        for (u32 c = lane; c < dim; c += 32) {
            double x = dp_load_el(in, c);
            if (!dp_is_finite(x)) bad = 1;
            else big = fmax(big, fabs(x));
        }
        for (int o = 16; o > 0; o >>= 1) {
            big = fmax(big, __shfl_xor_sync(0xffffffffu, big, o));
            bad |= __shfl_xor_sync(0xffffffffu, bad, o);
        }
        double f = 1.0;
        if (bad) {
            f = 0.0;
        } else if (big > 0.0) {
            double sum = 0.0;
            for (u32 c = lane; c < dim; c += 32) {
                double t = __ddiv_rn(dp_load_el(in, c), big);
                sum = __dadd_rn(sum, __dmul_rn(t, t));
            }
            for (int o = 16; o > 0; o >>= 1) sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
            double norm = __dmul_rn(big, dp_sqrt(sum));
            if (norm > target) f = __ddiv_rn(target, norm);
        }
        for (u32 c = lane; c < dim; c += 32)
            dp_store_el(out, c, f == 0.0 ? 0.0 : __dmul_rn(dp_load_el(in, c), f));
    }
}
