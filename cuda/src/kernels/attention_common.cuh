// Shared by the fused attention kernels (flash_attention.cu, flash_attention_f32.cu): the
// launch parameters, the causal mask, and the keyed Gaussian noise they add in registers.
//
// Noise (docs/RANDOMNESS.md §5): output element (b, h, i, c) receives element
// ((b·heads + h)·s_q + i)·d + c of the f64 Gaussian draw (key, out_stream); logit (b, h, i, j)
// element ((b·heads + h)·s_q + i)·s_k + j of (key, logit_stream). Each value is the CPU's f64
// Box–Muller value times σ, rounded once to f32 and added in f32. Indices are logical, never
// thread or block ids, so any launch geometry draws the same noise.
#pragma once

#define DP_ATT_BF16 0
#define DP_ATT_F16 1
#define DP_ATT_F32 2

#define DP_SCORE_EXP 0
#define DP_SCORE_COSH 1

#define DP_SIGMA_NONE 0     // no draw
#define DP_SIGMA_UNIFORM 1  // one σ for every (b, h)
#define DP_SIGMA_HEADS 2    // sigma[h]
#define DP_SIGMA_BATCH 3    // sigma[b·heads + h]

// One operand: element (b, h, s, c) is at base + b·sb + h·sh + s·ss + c (elements).
struct DpOperand {
    u64 ptr;
    u64 sb, sh, ss;
};

// Mirrored field for field by `AttnLaunch` in cuda/src/attention.rs (repr(C)): 8-byte
// fields first, then 4-byte fields, so both sides agree on every offset.
struct DpAttnParams {
    DpOperand q, k, v, out;
    u64 out_stream, logit_stream;
    u64 out_sigma_ptr, logit_sigma_ptr;  // device f64 arrays (modes HEADS / BATCH)
    double out_sigma, logit_sigma;       // mode UNIFORM
    double scale_f64;                    // the logit scale, for the f64 variant
    DpKey key;
    u32 batch, heads, s_q, s_k;
    float scale;
    u32 causal, score;
    u32 out_sigma_mode, logit_sigma_mode;
    u32 pad;
};

DP_FN double dp_sigma_of(u32 mode, double uniform, u64 ptr, u32 b, u32 h, u32 heads) {
    if (mode == DP_SIGMA_NONE) return 0.0;
    if (mode == DP_SIGMA_UNIFORM) return uniform;
    const double* s = (const double*)ptr;
    return mode == DP_SIGMA_HEADS ? s[h] : s[(u64)b * heads + h];
}

// The last key query row i may see (exclusive bound): keys j < i + 1 + s_k − s_q under
// the bottom-right aligned causal mask, all s_k keys otherwise. May be ≤ 0 (no key).
DP_FN i64 dp_key_end(const DpAttnParams& p, i64 i) {
    if (!p.causal) return (i64)p.s_k;
    i64 e = i + 1 + (i64)p.s_k - (i64)p.s_q;
    return e < (i64)p.s_k ? e : (i64)p.s_k;
}

// Words 4m .. 4m + 3 of a block, m in 0..4 chosen at run time, by selects (an indexed read
// would put the block in local memory).
DP_FN void dp_pick4(const u32 w[16], u32 m, u32 o[4]) {
    for (int k = 0; k < 4; ++k)
        o[k] = m == 0 ? w[k] : m == 1 ? w[4 + k] : m == 2 ? w[8 + k] : w[12 + k];
}

// Noise elements e and e + 1 of a draw, rounded to f32. One ChaCha20 block when e is even
// (a Box–Muller pair), up to two when e is odd (the second half of one pair, the first
// of the next, which may start the next block). Not inlined: the kernels call it from
// unrolled loops, and one copy of ChaCha20 and Box–Muller is enough.
DP_NOINLINE void dp_noise2(const DpKey& key, u64 stream, u64 e, double sigma, float* n0,
                           float* n1) {
    u32 w[16], g[4];
    dp_chacha20_block(key, e >> 3, stream, w);
    double a, b;
    dp_pick4(w, (u32)(e >> 1) & 3u, g);
    dp_gauss_pair(g, 2, sigma, &a, &b);
    if ((e & 1) == 0) {
        *n0 = dp_f64_to_f32_rn(a);
        *n1 = dp_f64_to_f32_rn(b);
        return;
    }
    *n0 = dp_f64_to_f32_rn(b);
    u64 f = e + 1;
    if ((f & 7) == 0) dp_chacha20_block(key, f >> 3, stream, w);
    dp_pick4(w, (u32)(f >> 1) & 3u, g);
    dp_gauss_pair(g, 2, sigma, &a, &b);
    *n1 = dp_f64_to_f32_rn(a);
}

// The 8 output noise values of elements e .. e + 7, e a multiple of 8: one block.
DP_FN void dp_noise8(const DpKey& key, u64 stream, u64 e, double sigma, float n[8]) {
    u32 w[16];
    double z[8];
    dp_chacha20_block(key, e >> 3, stream, w);
    dp_gauss8(w, sigma, z);
    for (int t = 0; t < 8; ++t) n[t] = dp_f64_to_f32_rn(z[t]);
}

// Output element type of the variant.
#if DP_ATT == DP_ATT_F32
typedef float dp_out_t;
#else
typedef u16 dp_out_t;
#endif

DP_FN u16 dp_pack_out16(float x) {
#if DP_ATT == DP_ATT_F16
    return dp_f32_to_f16_bits(x);
#else
    return dp_f32_to_bf16_bits(x);
#endif
}

// 16-byte store to global memory (dst 16-byte aligned: checked on the host).
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
DP_FN void dp_store16(void* dst, const u32 v[4]) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
}
#else
DP_FN void dp_store16(void* dst, const u32 v[4]) { std::memcpy(dst, v, 16); }
#endif

// Epilogue shared by both kernels: the block's normalised outputs are in `stage`, an f32
// [rows][D] tile whose 16-byte chunk c of row r lives at chunk c ^ (r & 7) (bank-conflict
// swizzle). Each thread takes units of 8 consecutive elements of one row, which are one
// ChaCha20 block of the output draw (D is a multiple of 8), adds σ·z, rounds once to the
// output type and writes them. Rows at or past s_q are not written.
template <int D>
DP_FN void dp_store_rows(const DpAttnParams& p, const float* stage, int rows, u32 row0, u32 b,
                         u32 h, int tid, int nthreads) {
    const double sigma = dp_sigma_of(p.out_sigma_mode, p.out_sigma, p.out_sigma_ptr, b, h, p.heads);
    const bool noisy = sigma != 0.0;
    const u64 head_row0 = ((u64)b * p.heads + h) * (u64)p.s_q;
    dp_out_t* out = (dp_out_t*)p.out.ptr + b * p.out.sb + h * p.out.sh;
    for (int u = tid; u < rows * (D / 8); u += nthreads) {
        int r = u / (D / 8), c8 = u % (D / 8);
        u32 i = row0 + (u32)r;
        if (i >= p.s_q) continue;
        float x[8];
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#pragma unroll
#endif
        for (int half = 0; half < 2; ++half) {
            int chunk = (2 * c8 + half) ^ (r & 7);
            const float* src = stage + r * D + chunk * 4;
            for (int t = 0; t < 4; ++t) x[4 * half + t] = src[t];
        }
        if (noisy) {
            float n[8];
            dp_noise8(p.key, p.out_stream, (head_row0 + i) * (u64)D + (u64)(8 * c8), sigma, n);
            for (int t = 0; t < 8; ++t) x[t] = x[t] + n[t];
        }
        dp_out_t* dst = out + (u64)i * p.out.ss + 8 * c8;
#if DP_ATT == DP_ATT_F32
        for (int t = 0; t < 8; ++t) dst[t] = x[t];
#else
        u32 packed[4];
        for (int t = 0; t < 4; ++t)
            packed[t] = (u32)dp_pack_out16(x[2 * t]) | ((u32)dp_pack_out16(x[2 * t + 1]) << 16);
        dp_store16(dst, packed);
#endif
    }
}

// Writes one normalised f32 value pair into the swizzled stage (see dp_store_rows).
DP_FN void dp_stage_pair(float* stage, int D, int r, int c, float a, float b) {
    int chunk = (c >> 2) ^ (r & 7);
    float* dst = stage + r * D + chunk * 4 + (c & 3);
    dst[0] = a;
    dst[1] = b;
}
