// Clip each row of a hidden-state matrix to Euclidean norm C, then release it: DP-Forward's
// token-level release (ClipRegion::Rows, ClipMode::Clip, i.i.d. noise) on the GPU. Row r of
// the stacked [rows, dim] matrix (row stride `ld` elements) owns elements first + r·dim + j
// of the draw, exactly as core/src/dp_forward (docs/RANDOMNESS.md §5.4). One CUDA block per
// row (grid-stride).
//
// Variant macros: DP_T 0 f32, 1 f64 (the element type, read and written in place);
// DP_EXACT 0 or 1:
// * 0, dp_clip_rows_gaussian (the unsafe float path): adds σ times the standard normals of
//   the 53-bit ("f64") Gaussian layout, rounded once to the element type.
// * 1, dp_clip_rows_exact: releases each clipped value on the grid with the discrete
//   Gaussian of the element's window (grid_release.cuh); `fail` (two u64, or NULL) receives
//   the release status of grid_release.cu (a failed element is NaN either way).
// Both: a row with NaN/±∞ is private data like any other; it is sanitised to the zero row
// (inside the ball, as the CPU's clip_hidden) and released like any other row, never
// refused. status (two u32): [0] counts the sanitised rows, [1] the rescaled rows.
#ifndef DP_EXACT
#define DP_EXACT 0
#endif

#if DP_T == 0
typedef float dp_t;
DP_FN dp_t dp_round_rn(double v) { return dp_f64_to_f32_rn(v); }
DP_FN dp_t dp_round_rz(double v) { return dp_f64_to_f32_rz(v); }
#else
typedef double dp_t;
DP_FN dp_t dp_round_rn(double v) { return v; }
DP_FN dp_t dp_round_rz(double v) { return v; }
#endif

#define DP_CLIP_THREADS 256

// Block-wide reduction of (max, sum, any) over DP_CLIP_THREADS threads.
DP_FN void dp_reduce(double* mx, double* sum, int* bad, double* sh_m, double* sh_s, int* sh_b) {
    double m = *mx, s = *sum;
    int b = *bad;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
        s += __shfl_xor_sync(0xffffffffu, s, o);
        b |= __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; sh_b[warp] = b; }
    __syncthreads();
    if (warp == 0) {
        const int nw = DP_CLIP_THREADS / 32;
        m = lane < nw ? sh_m[lane] : 0.0;
        s = lane < nw ? sh_s[lane] : 0.0;
        b = lane < nw ? sh_b[lane] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
            s += __shfl_xor_sync(0xffffffffu, s, o);
            b |= __shfl_xor_sync(0xffffffffu, b, o);
        }
        if (lane == 0) { sh_m[0] = m; sh_s[0] = s; sh_b[0] = b; }
    }
    __syncthreads();
    *mx = sh_m[0]; *sum = sh_s[0]; *bad = sh_b[0];
    __syncthreads();
}

#if DP_EXACT
extern "C" __global__ void __launch_bounds__(DP_CLIP_THREADS)
dp_clip_rows_exact(dp_t* __restrict__ x, u64 rows, u64 dim, u64 ld, double c, DpGridGroup grid,
                   DpKey key, u64 stream, u64 first, u32* __restrict__ status,
                   u64* __restrict__ fail) {
#else
extern "C" __global__ void __launch_bounds__(DP_CLIP_THREADS)
dp_clip_rows_gaussian(dp_t* __restrict__ x, u64 rows, u64 dim, u64 ld, double c, double sigma,
                      DpKey key, u64 stream, u64 first, u32* __restrict__ status) {
#endif
    __shared__ double sh_m[32], sh_s[32];
    __shared__ int sh_b[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        dp_t* xr = x + row * ld;
        double m = 0.0, raw = 0.0;
        int bad = 0;
        for (u64 j = threadIdx.x; j < dim; j += DP_CLIP_THREADS) {
            double a = fabs((double)xr[j]);
            if (!dp_is_finite(a)) bad = 1;
            else { m = fmax(m, a); raw += a * a; }
        }
        dp_reduce(&m, &raw, &bad, sh_m, sh_s, sh_b);
        // Sanitised: the zero row (m = 0: no rescaling), released below.
        if (bad && threadIdx.x == 0) atomicAdd(&status[0], 1u);
        if (bad) m = 0.0;
        double root = 0.0;
        if (m != 0.0) {
            if (dp_norm_raw_ok(m)) {
                root = dp_sqrt(raw) / m;
            } else {
                double s = 0.0, unused = 0.0;
                int none = 0;
                for (u64 j = threadIdx.x; j < dim; j += DP_CLIP_THREADS) {
                    double r = (double)xr[j] / m;
                    s += r * r;
                }
                dp_reduce(&unused, &s, &none, sh_m, sh_s, sh_b);
                root = dp_sqrt(s);
            }
        }
        const double factor = dp_clip_factor(c, dim, m, root);
        if (factor >= 0.0 && threadIdx.x == 0) atomicAdd(&status[1], 1u);
#if DP_EXACT
        for (u64 j = threadIdx.x; j < dim; j += DP_CLIP_THREADS) {
            double v = bad ? 0.0 : (double)xr[j];
            if (factor >= 0.0) v = (double)dp_round_rz((v / m) * factor);
            const u64 e = first + row * dim + j;
            const int st = dp_grid_release_value(v, &grid, &key, stream, e, &v);
            if (st < 0 && fail) dp_release_failed(fail, e, st);
            xr[j] = (dp_t)v;  // exact: v is on the grid of the element type
        }
#else
        // Elements e_begin ..= e_last of the draw (the host checks first + rows·dim <=
        // u64::MAX, so nothing here wraps); ChaCha20 block q holds elements 8q .. 8q+7.
        const u64 e_begin = first + row * dim, e_last = e_begin + (dim - 1);
        for (u64 q = e_begin / 8 + threadIdx.x; q <= e_last / 8; q += DP_CLIP_THREADS) {
            double z[8];
            if (sigma > 0.0) {
                u32 w[16];
                dp_chacha20_block(key, q, stream, w);
                dp_gauss8(w, 1.0, z);  // each Box–Muller pair once
            }
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                const u64 e = q * 8 + t;
                if (e < e_begin || e > e_last) continue;
                const u64 j = e - e_begin;
                double v = bad ? 0.0 : (double)xr[j];
                if (factor >= 0.0) v = (double)dp_round_rz((v / m) * factor);
                if (sigma > 0.0) v = (double)dp_round_rn(v + sigma * z[t]);
                xr[j] = (dp_t)v;
            }
        }
#endif
        __syncthreads();
    }
}
