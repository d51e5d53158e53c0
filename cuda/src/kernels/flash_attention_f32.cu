// Fused flash-style noisy attention in f32 on the CUDA cores (no tensor cores, so the
// result stays within ~1e-6 of the f64 reference), head dimension DP_D ∈ {64, 128}.
//
// DP_F64 = 1 selects the f64 variant (f32 inputs, arithmetic in f64 with `exp2` of the
// CUDA math library, the normalised rows written as f64 to `out`, no output noise): the
// noiseless attention of the GPU's exact output-perturbation release, whose computation
// error dpattn_cuda::output_perturbation::GPU_F64 bounds (its module docs map every step
// below onto that bound).
//
// One block of 128 threads computes 32 query rows of one (b, h): four threads (a quad)
// share a row, each owning the dimensions 16c + 4·part + e (float4 groups), so dot products
// are four partial sums joined by two shuffles. Keys and values stream through shared memory
// in tiles of 32 rows (cp.async). Multiply-adds are explicit fmaf (the module is compiled
// with --fmad=false for the bit-exact noise). Logit noise: the quad computes the 32 logits'
// noise of its row once (four pairs per thread) and shares it by shuffles.
#define DP_BM 32
#define DP_BN 32
#define DP_THREADS 128
#define DP_G (DP_D / 16)  // float4 groups per thread
#ifndef DP_F64
#define DP_F64 0
#endif
#if DP_F64
typedef double dp_acc;
#define DP_LOG2E 1.4426950408889634
#define DP_FMA(a, b, c) __fma_rn(a, b, c)
#define DP_EXP2(x) exp2(x)
#define DP_MAX(a, b) fmax(a, b)
#define DP_ABS(x) fabs(x)
#define DP_NEG_INF dp_bits_f64(0xfff0000000000000ull)
#else
typedef float dp_acc;
#define DP_LOG2E 1.4426950408889634f
#define DP_FMA(a, b, c) __fmaf_rn(a, b, c)
#define DP_EXP2(x) dp_exp2(x)
#define DP_MAX(a, b) fmaxf(a, b)
#define DP_ABS(x) fabsf(x)
#define DP_NEG_INF dp_bits_f32(0xff800000u)
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
DP_FN void dp_lds4(float r[4], const float* src) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3])
                 : "r"(dp_smem_u32(src)));
}
#else  // the host emulation (tests/cuda-host)
DP_FN void dp_lds4(float r[4], const float* src) { std::memcpy(r, src, 16); }
#endif

// Queues rows row0 .. row0 + 31 of `op` at (b, h) into the [32][D] f32 tile (unswizzled);
// rows at or past `seq` are zero-filled.
DP_FN void dp_load_tile32(u32 tile, const DpOperand& op, u32 b, u32 h, u32 row0, u32 seq, int tid) {
    const float* base = (const float*)op.ptr + b * op.sb + h * op.sh;
    for (int u = tid; u < DP_BN * (DP_D / 4); u += DP_THREADS) {
        int r = u / (DP_D / 4), c = u % (DP_D / 4);
        u32 row = row0 + (u32)r;
        bool in = row < seq;
        const float* src = in ? base + (u64)row * op.ss + 4 * c : base;
        dp_cp_async16(tile + (u32)((r * DP_D + 4 * c) * 4), src, in ? 16u : 0u);
    }
    dp_cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(DP_THREADS)
    dp_flash_attention_f32(const DpAttnParams p) {
    extern __shared__ __attribute__((aligned(128))) unsigned char dp_smem[];
    float* sK = (float*)dp_smem;
    float* sV = sK + DP_BN * DP_D;
    const int tid = threadIdx.x, part = tid & 3, lane = tid & 31;
    const int r = tid >> 2;  // row within the block
    const u32 bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
    const u32 m0 = blockIdx.y * DP_BM;
    const u32 i = m0 + (u32)r;
    const dp_acc NEG_INF = DP_NEG_INF;
#if DP_F64
    const dp_acc scale = p.scale_f64;
#else
    const dp_acc scale = p.scale;
#endif

    const i64 kmax = dp_key_end(p, (i64)m0 + DP_BM - 1);
    const u32 ntiles = kmax > 0 ? (u32)((kmax + DP_BN - 1) / DP_BN) : 0u;
    const i64 kend = dp_key_end(p, (i64)i);
    const double lsigma =
        dp_sigma_of(p.logit_sigma_mode, p.logit_sigma, p.logit_sigma_ptr, b, h, p.heads);
    const u64 lrow = (((u64)b * p.heads + h) * (u64)p.s_q + (u64)i) * (u64)p.s_k;

    dp_acc q[DP_G][4], o[DP_G][4];
    const float* qrow = (const float*)p.q.ptr + b * p.q.sb + h * p.q.sh + (u64)i * p.q.ss;
#pragma unroll
    for (int c = 0; c < DP_G; ++c)
        for (int e = 0; e < 4; ++e) {
            q[c][e] = i < p.s_q ? (dp_acc)qrow[16 * c + 4 * part + e] : (dp_acc)0;
            o[c][e] = 0;
        }
    dp_acc m = NEG_INF, l = 0;

    for (u32 jt = 0; jt < ntiles; ++jt) {
        const u32 n0 = jt * DP_BN;
        __syncthreads();  // every thread is done with the previous tiles
        dp_load_tile32(dp_smem_u32(sK), p.k, b, h, n0, p.s_k, tid);
        dp_load_tile32(dp_smem_u32(sV), p.v, b, h, n0, p.s_k, tid);

        // Logit noise of this row's 32 keys: this thread draws pairs 2·part + 8·mm.
        float nz[4][2];
#pragma unroll
        for (int mm = 0; mm < 4; ++mm) {
            nz[mm][0] = nz[mm][1] = 0.0f;
            i64 j = (i64)n0 + 8 * mm + 2 * part;
            if (lsigma != 0.0 && j < kend)
                dp_noise2(p.key, p.logit_stream, lrow + (u64)j, lsigma, &nz[mm][0], &nz[mm][1]);
        }
        dp_cp_async_wait_all();
        __syncthreads();

        dp_acc s[DP_BN];
        dp_acc mx = NEG_INF;
#pragma unroll
        for (int j = 0; j < DP_BN; ++j) {
            dp_acc acc = 0;
#pragma unroll
            for (int c = 0; c < DP_G; ++c) {
                float kv[4];
                dp_lds4(kv, sK + j * DP_D + 16 * c + 4 * part);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc = DP_FMA(q[c][e], (dp_acc)kv[e], acc);
            }
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            dp_acc x = acc * scale;
            float z = __shfl_sync(0xffffffffu, nz[j >> 3][j & 1], (lane & ~3) | ((j >> 1) & 3));
            bool vis = (i64)(n0 + j) < kend;
            x = vis ? (lsigma != 0.0 ? x + z : x) : NEG_INF;
            s[j] = x;
            if (p.score == DP_SCORE_COSH)
                mx = DP_MAX(mx, vis ? DP_ABS(x) : (dp_acc)0);
            else
                mx = DP_MAX(mx, x);
        }
        dp_acc m_new = DP_MAX(m, mx);
        dp_acc mb = (m_new == NEG_INF ? (dp_acc)0 : m_new) * DP_LOG2E;
        dp_acc alpha = DP_EXP2(m * DP_LOG2E - mb);
        dp_acc sum = 0;
#pragma unroll
        for (int j = 0; j < DP_BN; ++j) {
            dp_acc x = s[j];
            dp_acc pr;
            if (p.score == DP_SCORE_COSH) {
                dp_acc a = DP_ABS(x);
                pr = x == NEG_INF ? (dp_acc)0
                                  : DP_EXP2(DP_FMA(a, DP_LOG2E, -mb)) +
                                        DP_EXP2(DP_FMA(-a, DP_LOG2E, -mb));
            } else {
                pr = DP_EXP2(DP_FMA(x, DP_LOG2E, -mb));
            }
            s[j] = pr;
            sum += pr;
        }
        l = DP_FMA(l, alpha, sum);
        m = m_new;
#pragma unroll
        for (int c = 0; c < DP_G; ++c)
            for (int e = 0; e < 4; ++e) o[c][e] *= alpha;
#pragma unroll
        for (int j = 0; j < DP_BN; ++j) {
#pragma unroll
            for (int c = 0; c < DP_G; ++c) {
                float vv[4];
                dp_lds4(vv, sV + j * DP_D + 16 * c + 4 * part);
#pragma unroll
                for (int e = 0; e < 4; ++e) o[c][e] = DP_FMA(s[j], (dp_acc)vv[e], o[c][e]);
            }
        }
    }

#if DP_F64
    // Epilogue of the f64 variant: each thread writes its dimensions of the normalised row
    // (rows past s_q are not written; a row that sees no key is 0).
    if (i < p.s_q) {
        double* orow = (double*)p.out.ptr + b * p.out.sb + h * p.out.sh + (u64)i * p.out.ss;
#pragma unroll
        for (int c = 0; c < DP_G; ++c)
            for (int e = 0; e < 4; ++e) orow[16 * c + 4 * part + e] = l > 0 ? o[c][e] / l : 0.0;
    }
#else
    // Epilogue: stage the normalised row over the K tile, then noise and store.
    __syncthreads();
    float* stage = sK;
#pragma unroll
    for (int c = 0; c < DP_G; ++c) {
        float v[4];
        for (int e = 0; e < 4; ++e) v[e] = l > 0.0f ? o[c][e] / l : 0.0f;
        dp_stage_pair(stage, DP_D, r, 16 * c + 4 * part, v[0], v[1]);
        dp_stage_pair(stage, DP_D, r, 16 * c + 4 * part + 2, v[2], v[3]);
    }
    __syncthreads();
    dp_store_rows<DP_D>(p, stage, DP_BM, m0, b, h, tid, DP_THREADS);
#endif
}
