// Bulk keyed noise fill (docs/RANDOMNESS.md §2-3): element e of a draw is computed from
// ChaCha20 block e / EPB of the stream (EPB = 16 / UW elements per block), never from a
// thread or block id, so any grid, any chunking and the CPU give the same values.
//
// Variant macros (set by the host as -D options; one module per variant):
//   DP_SAMPLER  0 uniform, 1 Gaussian, 2 Laplace, 3 exponential, 4 raw stream words
//   DP_UW       words per uniform: 1 (24-bit "f32" layout) or 2 (53-bit "f64" layout)
//   DP_OUT      0 f32, 1 f64, 2 bf16, 3 f16, 4 u32 (raw words only)
//
// Each thread computes one ChaCha20 block (EPB values) into shared memory; the block then
// writes its 256·EPB values with consecutive threads on consecutive elements (coalesced).

#ifndef DP_SAMPLER
#error "DP_SAMPLER must be defined"
#endif
#if DP_SAMPLER == 4
#define DP_EPB 16
#else
#define DP_EPB (16 / DP_UW)
#endif
#define DP_FILL_THREADS 256

#if DP_OUT == 0
typedef float dp_out_t;
#elif DP_OUT == 1
typedef double dp_out_t;
#elif DP_OUT == 2 || DP_OUT == 3
typedef u16 dp_out_t;
#else
typedef u32 dp_out_t;
#endif

#if DP_SAMPLER != 4
DP_FN dp_out_t dp_convert(double v) {
#if DP_OUT == 1
    return dp_out_f64(v, DP_UW);
#elif DP_OUT == 0
    return dp_out_f32(v);
#elif DP_OUT == 2
    return dp_out_bf16(v);
#else
    return dp_out_f16(v);
#endif
}
#endif

// Stage row stride: EPB + 1 (odd) so that the 32 threads of a warp writing their block's
// t-th value hit 32 different shared-memory banks for 4-byte outputs (2-way conflicts for
// f64, which spans two banks).
#define DP_STAGE (DP_EPB + 1)

// out[i] = element (first_block · EPB + skip + i) of the draw, for i < n (n >= 1).
extern "C" __global__ void __launch_bounds__(DP_FILL_THREADS)
dp_fill(dp_out_t* __restrict__ out, u64 n, u64 first_block, u32 skip, DpKey key, u64 stream, double p) {
    __shared__ dp_out_t stage[DP_FILL_THREADS * DP_STAGE];
    const u64 epb = DP_EPB;
    const u64 nblocks = (n + skip + epb - 1) / epb;
    for (u64 base = (u64)blockIdx.x * DP_FILL_THREADS; base < nblocks;
         base += (u64)gridDim.x * DP_FILL_THREADS) {
        const u64 b = base + threadIdx.x;
        if (b < nblocks) {
            u32 w[16];
            dp_chacha20_block(key, first_block + b, stream, w);
#pragma unroll
            for (int t = 0; t < DP_EPB; ++t) {
#if DP_SAMPLER == 4
                stage[threadIdx.x * DP_STAGE + t] = w[t];
#else
                stage[threadIdx.x * DP_STAGE + t] = dp_convert(dp_block_value(w, DP_SAMPLER, DP_UW, p, t));
#endif
            }
        }
        __syncthreads();
        // Slot i (value i % EPB of the block's (i / EPB)-th ChaCha block) is output
        // element base·EPB + i − skip (relative to `first`).
        const u64 start = base * epb;
        for (u32 i = threadIdx.x; i < DP_FILL_THREADS * DP_EPB; i += DP_FILL_THREADS) {
            const u64 slot = start + i;
            if (slot >= skip && slot - skip < n) out[slot - skip] = stage[(i / DP_EPB) * DP_STAGE + i % DP_EPB];
        }
        __syncthreads();
    }
}
