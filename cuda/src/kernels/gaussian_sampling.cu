// Gaussian-sampling DP attention (paper 000, Algorithms 1-2) with the factor-free sampler
// and clip-and-ridge: the GPU port of `factor_free`, `gram` (column clip factors) and
// `normalise_scores` in dpattn-core (core/src/gaussian_sampling_attention/,
// core/src/linalg.rs, core/src/attention/matrix.rs).
//
// Problem p (= b·heads + h) has X_p (n × d, row stride sr, feature stride 1). A column
// holding a NaN or an infinity is the zero column (f_c = 0, its entries read as 0: the
// CPU's `gram` and `finite_or_zero`); the columns are scaled by the clip factors f_c
// (min(1, α/‖x_c‖)) and √η·I_n columns are appended, so q = d + n. Sample i is g_i = X'·z_i with coordinate c of z_i the element
// p·k·q + i·q + c of the f64 Gaussian layout of the draw (docs/RANDOMNESS.md §3, §5.1),
// B = (1/k)·Σ_i g_i g_iᵀ and P = D(B)⁻¹ f(B) row by row (f = exp or cosh, max-shifted).
//
// Determinism (no floating-point atomics): g_i is computed exactly as the CPU computes it
// (the same products, summed over c in order), the k samples are split into chunks that
// depend on k only, each CUDA block sums its chunk in sample order into a partial of the
// lower triangle, and dp_gs_finish adds the partials in chunk order. The bits depend on
// (X, k, key, stream) only, never on the device, the grid or the batch. With one chunk
// (k <= 512) the order is the CPU's and B and P are bit-identical to the CPU's.
//
// Variant macro DP_GS_T: 0 f32 input, 1 f64 input (dp_gs_finish does not read X).
// Entries: dp_gs_factors, dp_gs_partial, dp_gs_finish. Compiled with --fmad=false.

#ifndef DP_GS_T
#error "DP_GS_T must be defined"
#endif
#if DP_GS_T == 0
typedef float dp_gs_t;
#else
typedef double dp_gs_t;
#endif

#define DP_GS_THREADS 256
#define DP_GS_NMAX 64                                          // largest n (rows per problem)
#define DP_GS_TRI_MAX (DP_GS_NMAX * (DP_GS_NMAX + 1) / 2)       // lower-triangle entries
#define DP_GS_EPT ((DP_GS_TRI_MAX + DP_GS_THREADS - 1) / DP_GS_THREADS) // entries per thread
#define DP_GS_S 32                                             // samples per batch
#define DP_GS_TC 32                                            // columns per tile
#define DP_GS_RUN_BLOCKS (DP_GS_TC / 8 + 1)                    // ChaCha blocks of one run

// ---------------------------------------------------------------------------------------
// exp(x): the port of libm's exp (FreeBSD e_exp.c), the function the CPU's
// normalise_scores calls. Same constants (decimal literals, parsed to the same doubles),
// same operations in the same order; with --fmad=false the bits equal the CPU's.

// y · 2^k for the k exp produces (|k| <= 1075): libm's scalbn, one pre-scaling step.
DP_FN double dp_gs_scalbn(double y, int k) {
    if (k > 1023) {
        y = y * dp_bits_f64(0x7fe0000000000000ull); // 2^1023
        k -= 1023;
    } else if (k < -1022) {
        y = y * dp_bits_f64(0x0360000000000000ull); // 2^-969 = 2^-1022 · 2^53
        k += 969;
    }
    return y * dp_bits_f64((u64)(k + 1023) << 52);
}

DP_FN double dp_gs_exp(double x) {
    const double ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10;
    const double invln2 = 1.44269504088896338700e+00;
    const double p1 = 1.66666666666666019037e-01, p2 = -2.77777777770155933842e-03;
    const double p3 = 6.61375632143793436117e-05, p4 = -1.65339022054652515390e-06;
    const double p5 = 4.13813679705723846039e-08;
    u32 hx = (u32)(dp_f64_bits(x) >> 32);
    const int sign = (int)(hx >> 31);
    hx &= 0x7fffffffu;
    if (hx >= 0x4086232bu) {
        if (x != x) return x;
        if (x > 709.782712893383973096) return x * dp_bits_f64(0x7fe0000000000000ull);
        if (x < -745.13321910194110842) return 0.0;
    }
    double hi, lo;
    int k;
    if (hx > 0x3fd62e42u) {
        if (hx >= 0x3ff0a2b2u) {
            k = (int)(invln2 * x + (sign ? -0.5 : 0.5));
        } else {
            k = 1 - sign - sign;
        }
        hi = x - (double)k * ln2hi;
        lo = (double)k * ln2lo;
        x = hi - lo;
    } else if (hx > 0x3e300000u) {
        k = 0;
        hi = x;
        lo = 0.0;
    } else {
        return 1.0 + x;
    }
    const double xx = x * x;
    const double c = x - xx * (p1 + xx * (p2 + xx * (p3 + xx * (p4 + xx * p5))));
    const double y = 1.0 + (x * c / (2.0 - c) - lo + hi);
    return k == 0 ? y : dp_gs_scalbn(y, k);
}

// ---------------------------------------------------------------------------------------
// Clip factors (the CPU's `gram` with a clip): one thread per (problem, column).

// ‖x_c‖ without overflow, m·√Σ(x/m)² with m = max |x| (the CPU's scaled_column_norm).
DP_FN double dp_gs_scaled_norm(const dp_gs_t* col, u64 n, u64 sr) {
    double m = 0.0;
    for (u64 r = 0; r < n; ++r) m = fmax(m, fabs((double)col[r * sr]));
    if (m == 0.0) return m; // only finite columns get here
    double s = -0.0;
    for (u64 r = 0; r < n; ++r) {
        const double v = (double)col[r * sr] / m;
        s = s + v * v;
    }
    return m * dp_sqrt(s);
}

// factors[p·d + c] = α/‖x_c‖ for columns longer than α, 0 for a column holding a NaN or
// an infinity (it is zeroed, never refused), else 1.
extern "C" __global__ void __launch_bounds__(DP_GS_THREADS)
dp_gs_factors(const dp_gs_t* __restrict__ x, u64 problems, u64 heads, u64 n, u64 d, u64 sb,
              u64 sh, u64 sr, double alpha, double* __restrict__ factors) {
    const u64 total = problems * d;
    for (u64 t = (u64)blockIdx.x * DP_GS_THREADS + threadIdx.x; t < total;
         t += (u64)gridDim.x * DP_GS_THREADS) {
        const u64 p = t / d, c = t % d;
        const dp_gs_t* col = x + (p / heads) * sb + (p % heads) * sh + c;
        double s = 0.0;
        bool finite = true;
        for (u64 r = 0; r < n && finite; ++r) {
            const double v = (double)col[r * sr];
            finite = dp_is_finite(v);
            s = s + v * v;
        }
        if (!finite) {
            factors[t] = 0.0;
            continue;
        }
        const double norm = dp_is_finite(s) ? dp_sqrt(s) : dp_gs_scaled_norm(col, n, sr);
        factors[t] = norm > alpha ? alpha / norm : 1.0;
    }
}

// ---------------------------------------------------------------------------------------
// Partial sums of Σ g_i g_iᵀ over one chunk of samples of one problem.

// zs[s·TC + j] = standard normal (f64 layout) number first + s·q + j of the draw, for
// s < ns, j < w <= TC. One thread per ChaCha20 block of a run; a run of w elements
// touches at most TC/8 + 1 blocks.
DP_FN void dp_gs_noise_tile(double* zs, u64 first, u64 q, u32 ns, u32 w, const DpKey& key,
                            u64 stream) {
    for (u32 job = threadIdx.x; job < ns * DP_GS_RUN_BLOCKS; job += DP_GS_THREADS) {
        const u32 s = job / DP_GS_RUN_BLOCKS;
        const u64 e0 = first + (u64)s * q, e1 = e0 + (w - 1);
        const u64 blk = e0 / 8 + job % DP_GS_RUN_BLOCKS;
        if (blk > e1 / 8) continue;
        u32 words[16];
        double z[8];
        dp_chacha20_block(key, blk, stream, words);
        dp_gauss8(words, 1.0, z);  // each Box–Muller pair once
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const u64 e = blk * 8 + t;
            if (e < e0 || e > e1) continue;
            zs[s * DP_GS_TC + (u32)(e - e0)] = z[t];
        }
    }
}

// xs[c·NMAX + r] = x[r][c0 + c] · f[c0 + c] (the CPU's `v · w` of `v · w · z`, a NaN or
// an infinity read as 0 like its `finite_or_zero`), c < w.
DP_FN void dp_gs_load_tile(double* xs, const dp_gs_t* xp, u64 sr, u32 n, u64 c0, u32 w,
                           const double* f) {
    for (u32 i = threadIdx.x; i < n * w; i += DP_GS_THREADS) {
        const u32 r = i / w, c = i % w;
        const double v = (double)xp[r * sr + c0 + c];
        xs[c * DP_GS_NMAX + r] = (dp_is_finite(v) ? v : 0.0) * f[c0 + c];
    }
}

// gs[s][r] += Σ_{c < w} xs[c][r] · zs[s][c], in column order (the CPU's dot product order).
// Pair (s, r) always belongs to thread (s·n + r) mod THREADS.
DP_FN void dp_gs_dot_tile(double* gs, const double* xs, const double* zs, u32 n, u32 ns, u32 w) {
    for (u32 i = threadIdx.x; i < ns * n; i += DP_GS_THREADS) {
        const u32 s = i / n, r = i % n;
        double acc = gs[s * DP_GS_NMAX + r];
        for (u32 c = 0; c < w; ++c) acc = acc + xs[c * DP_GS_NMAX + r] * zs[s * DP_GS_TC + c];
        gs[s * DP_GS_NMAX + r] = acc;
    }
}

// gs[s][r0 + j] += √η · zs[s][j]: the ridge column of row r0 + j (the CPU's `dot + √η·z`).
DP_FN void dp_gs_ridge_tile(double* gs, const double* zs, double root_ridge, u32 r0, u32 ns, u32 w) {
    for (u32 i = threadIdx.x; i < ns * w; i += DP_GS_THREADS) {
        const u32 s = i / w, j = i % w;
        double* g = gs + s * DP_GS_NMAX + r0 + j;
        *g = *g + root_ridge * zs[s * DP_GS_TC + j];
    }
}

// Lower-triangle entry e = i(i+1)/2 + j (j <= i) as (i, j).
DP_FN void dp_gs_tri(u32 e, u32* i, u32* j) {
    u32 r = 0;
    while ((r + 1) * (r + 2) / 2 <= e) ++r;
    *i = r;
    *j = e - r * (r + 1) / 2;
}

// g_i for samples i0 .. i0 + ns of problem p into gs (ns <= S): the column tiles of X',
// then the ridge columns. Ends with a barrier (gs complete for every thread).
DP_FN void dp_gs_samples(double* gs, double* xs, double* zs, const dp_gs_t* xp, u64 sr, u32 n,
                         u64 d, const double* f, double root_ridge, u64 first, u64 q, u32 ns,
                         const DpKey& key, u64 stream) {
    for (u32 i = threadIdx.x; i < DP_GS_S * DP_GS_NMAX; i += DP_GS_THREADS) gs[i] = -0.0;
    for (u64 c0 = 0; c0 < d; c0 += DP_GS_TC) {
        const u32 w = (u32)(d - c0 < DP_GS_TC ? d - c0 : DP_GS_TC);
        __syncthreads(); // gs zeroed / the previous tile's readers are done
        dp_gs_load_tile(xs, xp, sr, n, c0, w, f);
        dp_gs_noise_tile(zs, first + c0, q, ns, w, key, stream);
        __syncthreads();
        dp_gs_dot_tile(gs, xs, zs, n, ns, w);
    }
    for (u32 r0 = 0; r0 < n; r0 += DP_GS_TC) {
        const u32 w = n - r0 < DP_GS_TC ? n - r0 : DP_GS_TC;
        __syncthreads();
        dp_gs_noise_tile(zs, first + d + r0, q, ns, w, key, stream);
        __syncthreads();
        dp_gs_ridge_tile(gs, zs, root_ridge, r0, ns, w);
    }
    __syncthreads();
}

// Block (chunk, g) sums g_i g_iᵀ (lower triangle) over samples [chunk·chunk_len,
// min(k, (chunk + 1)·chunk_len)) of problem p0 + g, in sample order, into
// partial[(g·chunks + chunk)·ntri + e].
extern "C" __global__ void __launch_bounds__(DP_GS_THREADS)
dp_gs_partial(const dp_gs_t* __restrict__ x, u64 heads, u64 n64, u64 d, u64 sb, u64 sh, u64 sr,
              const double* __restrict__ factors, u64 p0, u64 k, u64 chunk_len, double root_ridge,
              DpKey key, u64 stream, double* __restrict__ partial) {
    __shared__ double xs[DP_GS_TC * DP_GS_NMAX];
    __shared__ double zs[DP_GS_S * DP_GS_TC];
    __shared__ double gs[DP_GS_S * DP_GS_NMAX];
    const u32 n = (u32)n64, ntri = n * (n + 1) / 2;
    const u64 p = p0 + blockIdx.y, q = d + n64;
    const u64 i_begin = (u64)blockIdx.x * chunk_len;
    const u64 i_end = k - i_begin < chunk_len ? k : i_begin + chunk_len;
    const dp_gs_t* xp = x + (p / heads) * sb + (p % heads) * sh;
    const double* f = factors + p * d;

    u32 ei[DP_GS_EPT], ej[DP_GS_EPT];
    double acc[DP_GS_EPT];
#pragma unroll
    for (int t = 0; t < DP_GS_EPT; ++t) {
        const u32 e = threadIdx.x + t * DP_GS_THREADS;
        u32 i = 0, j = 0; // entries past ntri read g[0]·g[0] and are never written
        if (e < ntri) dp_gs_tri(e, &i, &j);
        ei[t] = i;
        ej[t] = j;
        acc[t] = 0.0;
    }
    for (u64 i0 = i_begin; i0 < i_end; i0 += DP_GS_S) {
        const u32 ns = (u32)(i_end - i0 < DP_GS_S ? i_end - i0 : DP_GS_S);
        __syncthreads(); // the previous batch's readers of gs are done
        dp_gs_samples(gs, xs, zs, xp, sr, n, d, f, root_ridge, p * k * q + i0 * q, q, ns, key, stream);
        for (u32 s = 0; s < ns; ++s) {
            const double* g = gs + s * DP_GS_NMAX;
#pragma unroll
            for (int t = 0; t < DP_GS_EPT; ++t) acc[t] = acc[t] + g[ei[t]] * g[ej[t]];
        }
    }
    double* out = partial + ((u64)blockIdx.y * gridDim.x + blockIdx.x) * ntri;
#pragma unroll
    for (int t = 0; t < DP_GS_EPT; ++t) {
        const u32 e = threadIdx.x + t * DP_GS_THREADS;
        if (e < ntri) out[e] = acc[t];
    }
}

// ---------------------------------------------------------------------------------------
// B = (Σ partials)/k, symmetric, and P = D(B)⁻¹ f(B): one CUDA block per problem.

// Row r of B in place → row r of P: the CPU's normalise_row (every entry is visible).
DP_FN void dp_gs_normalise_row(double* row, u32 n, int cosh_score) {
    double m = dp_bits_f64(0xfff0000000000000ull); // -inf
    for (u32 j = 0; j < n; ++j) m = fmax(m, cosh_score ? fabs(row[j]) : row[j]);
    double sum = 0.0;
    for (u32 j = 0; j < n; ++j) {
        const double a = fabs(row[j]);
        const double v = cosh_score ? dp_gs_exp(a - m) + dp_gs_exp(-a - m) : dp_gs_exp(row[j] - m);
        row[j] = v;
        sum = sum + v;
    }
    for (u32 j = 0; j < n; ++j) row[j] = row[j] / sum;
}

// Problem p0 + blockIdx.x: B and P into out_b, out_p ([problem][n][n], contiguous).
extern "C" __global__ void __launch_bounds__(DP_GS_THREADS)
dp_gs_finish(const double* __restrict__ partial, u64 p0, u64 n64, u64 chunks, double k,
             int cosh_score, double* __restrict__ out_b, double* __restrict__ out_p) {
    __shared__ double bs[DP_GS_NMAX * DP_GS_NMAX];
    const u32 n = (u32)n64, ntri = n * (n + 1) / 2;
    const u64 p = p0 + blockIdx.x;
    double* ob = out_b + p * n64 * n64;
    double* op = out_p + p * n64 * n64;
    const double* part = partial + (u64)blockIdx.x * chunks * ntri;
    for (u32 e = threadIdx.x; e < ntri; e += DP_GS_THREADS) {
        double s = part[e];
        for (u64 c = 1; c < chunks; ++c) s = s + part[c * ntri + e];
        u32 i, j;
        dp_gs_tri(e, &i, &j);
        const double v = s / k;
        bs[i * n + j] = v;
        bs[j * n + i] = v;
        ob[i * n + j] = v;
        ob[j * n + i] = v;
    }
    __syncthreads();
    for (u32 r = threadIdx.x; r < n; r += DP_GS_THREADS) {
        dp_gs_normalise_row(bs + r * n, n, cosh_score);
        for (u32 j = 0; j < n; ++j) op[r * n + j] = bs[r * n + j];
    }
}
