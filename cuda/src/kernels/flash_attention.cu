// Fused flash-style noisy attention on tensor cores: bf16 or f16 inputs (DP_ATT), head
// dimension DP_D ∈ {64, 128}, f32 accumulation, output in the input type.
//
// One block of 4 warps computes 64 query rows of one (b, h); each warp owns 16 rows. Keys
// and values stream through shared memory in tiles of 64 rows (cp.async, 16-byte chunks
// XOR-swizzled by row so ldmatrix reads hit distinct banks); S = Q·Kᵀ and O += P·V run on
// mma.m16n8k16 with the online softmax (FlashAttention-2) in between. Logit noise is added
// to the scaled logits in registers before the mask; output noise in the epilogue
// (attention_common.cuh). Shared memory: Q, K, V tiles of 64·D 16-bit values (48 KiB at
// D = 128); the epilogue reuses the K and V tiles as an f32 [64][D] stage.
#define DP_BM 64
#define DP_BN 64
#define DP_THREADS 128
#define DP_CHUNKS (DP_D / 8)
#define DP_TILE_BYTES (DP_BM * DP_D * 2)
#define DP_LOG2E 1.4426950408889634f

// Byte offset of 16-byte chunk c of row r in a swizzled [64][D] 16-bit tile.
DP_FN u32 dp_tile_off(int r, int c) { return (u32)(r * (DP_D * 2) + ((c ^ (r & 7)) << 4)); }

// Queues the copy of rows row0 .. row0 + 63 of operand `op` at (b, h) into `tile`; rows at
// or past `seq` are zero-filled (nothing read).
DP_FN void dp_load_tile(u32 tile, const DpOperand& op, u32 b, u32 h, u32 row0, u32 seq, int tid) {
    const u16* base = (const u16*)op.ptr + b * op.sb + h * op.sh;
#pragma unroll
    for (int u = tid; u < DP_BM * DP_CHUNKS; u += DP_THREADS) {
        int r = u / DP_CHUNKS, c = u % DP_CHUNKS;
        u32 row = row0 + (u32)r;
        bool in = row < seq;
        const u16* src = in ? base + (u64)row * op.ss + 8 * c : base;
        dp_cp_async16(tile + dp_tile_off(r, c), src, in ? 16u : 0u);
    }
}

// Scales one warp's 16×64 logit tile, adds the logit noise, masks keys a row may not see
// (-inf), and applies the score function's online update. Returns nothing; updates m, l
// (thread-partial sums) and rescales o.
DP_FN void dp_softmax_tile(const DpAttnParams& p, float s[8][4], float o[DP_D / 8][4],
                           float m[2], float l[2], const i64 kend[2], u32 n0, int t,
                           double lsigma, const u64 lrow[2]) {
    const float NEG_INF = dp_bits_f32(0xff800000u);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float mx = NEG_INF;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            i64 j = (i64)n0 + 8 * nt + 2 * t;
            float x0 = s[nt][2 * hr] * p.scale, x1 = s[nt][2 * hr + 1] * p.scale;
            if (lsigma != 0.0 && j < kend[hr]) {
                float z0, z1;
                dp_noise2(p.key, p.logit_stream, lrow[hr] + (u64)j, lsigma, &z0, &z1);
                x0 = x0 + z0;
                x1 = x1 + z1;
            }
            x0 = j < kend[hr] ? x0 : NEG_INF;
            x1 = j + 1 < kend[hr] ? x1 : NEG_INF;
            if (p.score == DP_SCORE_COSH) {
                mx = fmaxf(mx, fmaxf(x0 == NEG_INF ? 0.0f : fabsf(x0),
                                     x1 == NEG_INF ? 0.0f : fabsf(x1)));
            } else {
                mx = fmaxf(mx, fmaxf(x0, x1));
            }
            s[nt][2 * hr] = x0;
            s[nt][2 * hr + 1] = x1;
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(m[hr], mx);
        float m_use = m_new == NEG_INF ? 0.0f : m_new;  // a row that sees nothing yet
        float mb = m_use * DP_LOG2E;
        float alpha = dp_exp2(m[hr] * DP_LOG2E - mb);  // m = -inf: 0, and o, l are 0
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float x = s[nt][2 * hr + e], pr;
                if (p.score == DP_SCORE_COSH) {
                    float a = fabsf(x);
                    pr = x == NEG_INF ? 0.0f
                                      : dp_exp2(__fmaf_rn(a, DP_LOG2E, -mb)) +
                                            dp_exp2(__fmaf_rn(-a, DP_LOG2E, -mb));
                } else {
                    pr = dp_exp2(__fmaf_rn(x, DP_LOG2E, -mb));
                }
                s[nt][2 * hr + e] = pr;
                sum += pr;
            }
        }
        l[hr] = __fmaf_rn(l[hr], alpha, sum);
        m[hr] = m_new;
#pragma unroll
        for (int dt = 0; dt < DP_D / 8; ++dt) {
            o[dt][2 * hr] *= alpha;
            o[dt][2 * hr + 1] *= alpha;
        }
    }
}

extern "C" __global__ void __launch_bounds__(DP_THREADS)
    dp_flash_attention(const DpAttnParams p) {
    extern __shared__ __attribute__((aligned(128))) unsigned char dp_smem[];
    const u32 sQ = dp_smem_u32(dp_smem), sK = sQ + DP_TILE_BYTES, sV = sK + DP_TILE_BYTES;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const u32 bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
    const u32 m0 = blockIdx.y * DP_BM;

    // Keys any row of this block may see, in tiles of 64.
    i64 last_row = (i64)m0 + DP_BM - 1;
    i64 kmax = dp_key_end(p, last_row);
    const u32 ntiles = kmax > 0 ? (u32)((kmax + DP_BN - 1) / DP_BN) : 0u;

    i64 kend[2];
    u64 lrow[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        i64 i = (i64)m0 + warp * 16 + g + 8 * hr;
        kend[hr] = dp_key_end(p, i);
        lrow[hr] = (((u64)b * p.heads + h) * (u64)p.s_q + (u64)i) * (u64)p.s_k;
    }
    const double lsigma =
        dp_sigma_of(p.logit_sigma_mode, p.logit_sigma, p.logit_sigma_ptr, b, h, p.heads);

    const float NEG_INF = dp_bits_f32(0xff800000u);
    float o[DP_D / 8][4];
#pragma unroll
    for (int dt = 0; dt < DP_D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    u32 qf[DP_D / 16][4];

    if (ntiles > 0) {
        dp_load_tile(sQ, p.q, b, h, m0, p.s_q, tid);
        dp_load_tile(sK, p.k, b, h, 0, p.s_k, tid);
    }
    dp_cp_async_commit();
    for (u32 jt = 0; jt < ntiles; ++jt) {
        const u32 n0 = jt * DP_BN;
        dp_cp_async_wait_all();
        __syncthreads();  // K tile jt (and Q) visible; every warp is done with V tile jt-1
        if (jt == 0) {
#pragma unroll
            for (int kk = 0; kk < DP_D / 16; ++kk)
                dp_ldmatrix_x4(qf[kk], sQ + dp_tile_off(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)));
        }
        dp_load_tile(sV, p.v, b, h, n0, p.s_k, tid);
        dp_cp_async_commit();

        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DP_D / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                u32 r[4];
                int row = 16 * np + 8 * (lane >> 4) + (lane & 7);
                dp_ldmatrix_x4(r, sK + dp_tile_off(row, 2 * kk + ((lane >> 3) & 1)));
                dp_mma16816(s[2 * np], qf[kk], r[0], r[1]);
                dp_mma16816(s[2 * np + 1], qf[kk], r[2], r[3]);
            }
        }
        dp_softmax_tile(p, s, o, m, l, kend, n0, t, lsigma, lrow);

        dp_cp_async_wait_all();
        __syncthreads();  // V tile jt visible; every warp is done with K tile jt
        if (jt + 1 < ntiles) dp_load_tile(sK, p.k, b, h, n0 + DP_BN, p.s_k, tid);
        dp_cp_async_commit();
#pragma unroll
        for (int kb = 0; kb < 4; ++kb) {
            u32 a[4] = {dp_pack2(s[2 * kb][0], s[2 * kb][1]), dp_pack2(s[2 * kb][2], s[2 * kb][3]),
                        dp_pack2(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                        dp_pack2(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
            for (int dp = 0; dp < DP_D / 16; ++dp) {
                u32 r[4];
                dp_ldmatrix_x4_trans(r, sV + dp_tile_off(16 * kb + (lane & 15), 2 * dp + (lane >> 4)));
                dp_mma16816(o[2 * dp], a, r[0], r[1]);
                dp_mma16816(o[2 * dp + 1], a, r[2], r[3]);
            }
        }
    }

    // Epilogue: normalise (a row that saw no key is 0), stage in f32 over the K and V
    // tiles, then add the output noise and store (dp_store_rows).
    dp_cp_async_wait_all();
    __syncthreads();
    float* stage = (float*)(dp_smem + DP_TILE_BYTES);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float lt = l[hr];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        int r = warp * 16 + g + 8 * hr;
#pragma unroll
        for (int dt = 0; dt < DP_D / 8; ++dt) {
            float v0 = lt > 0.0f ? o[dt][2 * hr] / lt : 0.0f;
            float v1 = lt > 0.0f ? o[dt][2 * hr + 1] / lt : 0.0f;
            dp_stage_pair(stage, DP_D, r, 8 * dt + 2 * t, v0, v1);
        }
    }
    __syncthreads();
    dp_store_rows<DP_D>(p, stage, DP_BM, m0, b, h, tid, DP_THREADS);
}
