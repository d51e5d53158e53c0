// Host-side entry points over the CUDA device headers, so that Rust tests can compare the
// GPU code's arithmetic with dpattn-core without a GPU. Each function mirrors what one
// kernel thread does for one element or one row, with the same device functions.
#include "prelude.cuh"
#include "chacha20.cuh"
#include "fast_math.cuh"
#include "noise_value.cuh"
#include "clip.cuh"
#include <cstddef>

// The release status atomics of grid_release.cuh, sequential here (one host thread).
[[maybe_unused]] static void atomicOr(u64* a, u64 v) { *a |= v; }
[[maybe_unused]] static void atomicMin(u64* a, u64 v) { if (v < *a) *a = v; }
#include "exact_sampler.cuh"
#include "grid_release.cuh"
#define DP_ATT 2  // DP_ATT_F32: the f32 epilogue
#include "attention_common.cuh"

static DpKey key_of(const u32* k) {
    DpKey key;
    for (int i = 0; i < 8; ++i) key.w[i] = k[i];
    return key;
}

extern "C" {

void dpck_chacha20_block(const u32* key, u64 counter, u64 stream, u32* out) {
    dp_chacha20_block(key_of(key), counter, stream, out);
}

double dpck_ln_unit(double u) { return dp_ln_unit(u); }

void dpck_sincos_2pi(u64 m, u32 bits, double* s, double* c) { dp_sincos_2pi(m, bits, s, c); }

u16 dpck_f32_to_bf16(float x) { return dp_f32_to_bf16_bits(x); }
u16 dpck_f32_to_f16(float x) { return dp_f32_to_f16_bits(x); }
float dpck_f64_to_f32_rz(double x) { return dp_f64_to_f32_rz(x); }

// What dp_fill writes for elements first .. first + n − 1: out_kind 0 f32, 1 f64, 2 bf16,
// 3 f16 (16-bit outputs as u16), sampler as DP_SAMPLER.
void dpck_fill(int sampler, int uw, int out_kind, double p, const u32* key, u64 stream, u64 first,
               u64 n, void* out) {
    const DpKey k = key_of(key);
    const u64 epb = (u64)(16 / uw);
    u32 w[16];
    u64 cached = ~0ull;
    for (u64 i = 0; i < n; ++i) {
        const u64 e = first + i, blk = e / epb;
        if (blk != cached) { dp_chacha20_block(k, blk, stream, w); cached = blk; }
        const double v = dp_block_value(w, sampler, uw, p, (int)(e % epb));
        switch (out_kind) {
            case 0: ((float*)out)[i] = dp_out_f32(v); break;
            case 1: ((double*)out)[i] = dp_out_f64(v, uw); break;
            case 2: ((u16*)out)[i] = dp_out_bf16(v); break;
            default: ((u16*)out)[i] = dp_out_f16(v); break;
        }
    }
}

// One row of dp_clip_rows_gaussian with a sequential sum (the CPU's order): returns 1 if the
// row was rescaled, 0 if not, 2 if it held a non-finite value (then it was released as the
// zero row).
// is_f32: the row is f32 (read from and written to `x32`), else f64 (`x64`).
int dpck_clip_row(int is_f32, float* x32, double* x64, u64 dim, double c, double sigma, const u32* key,
                  u64 stream, u64 e_begin) {
    const DpKey k = key_of(key);
    double m = 0.0, raw = 0.0;
    int bad = 0;
    for (u64 j = 0; j < dim; ++j) {
        double a = std::fabs(is_f32 ? (double)x32[j] : x64[j]);
        if (!dp_is_finite(a)) bad = 1;
        else { m = std::fmax(m, a); raw += a * a; }
    }
    if (bad) m = 0.0;
    double root = 0.0;
    if (m != 0.0) {
        if (dp_norm_raw_ok(m)) {
            root = dp_sqrt(raw) / m;
        } else {
            double s = 0.0;
            for (u64 j = 0; j < dim; ++j) {
                double r = (is_f32 ? (double)x32[j] : x64[j]) / m;
                s += r * r;
            }
            root = dp_sqrt(s);
        }
    }
    const double factor = dp_clip_factor(c, dim, m, root);
    u32 w[16];
    double z[8];
    u64 cached = ~0ull;
    for (u64 j = 0; j < dim; ++j) {
        const u64 e = e_begin + j, q = e / 8;
        double v = bad ? 0.0 : (is_f32 ? (double)x32[j] : x64[j]);
        if (factor >= 0.0) v = is_f32 ? (double)dp_f64_to_f32_rz((v / m) * factor) : (v / m) * factor;
        if (sigma > 0.0) {
            if (q != cached) {
                dp_chacha20_block(k, q, stream, w);
                dp_gauss8(w, 1.0, z);
                cached = q;
            }
            const double n = z[e % 8];
            v = is_f32 ? (double)dp_f64_to_f32_rn(v + sigma * n) : v + sigma * n;
        }
        if (is_f32) x32[j] = (float)v; else x64[j] = v;
    }
    return bad ? 2 : factor >= 0.0 ? 1 : 0;
}

// dp_noise2 / dp_noise8 of attention_common.cuh: logit and output noise of the fused
// attention kernels.
void dpck_noise2(const u32* key, u64 stream, u64 e, double sigma, float* out) {
    dp_noise2(key_of(key), stream, e, sigma, &out[0], &out[1]);
}
void dpck_noise8(const u32* key, u64 stream, u64 e, double sigma, float* out) {
    dp_noise8(key_of(key), stream, e, sigma, out);
}

// sizeof and field offsets of DpAttnParams, mirrored by AttnLaunch in cuda/src/attention.rs.
void dpck_attn_params_layout(u64* out) {
    out[0] = sizeof(DpAttnParams);
    out[1] = offsetof(DpAttnParams, out_stream);
    out[2] = offsetof(DpAttnParams, key);
    out[3] = offsetof(DpAttnParams, batch);
    out[4] = offsetof(DpAttnParams, scale);
    out[5] = offsetof(DpAttnParams, pad);
}

// The fused kernels' epilogue for one block, run by one "thread": rows `rows` of the
// row-major f32 tile `x` ([rows][d], d = 64 or 128) are staged through dp_stage_pair and
// written by dp_store_rows to the f32 tensor `out` (row stride `ld`) of head (b, h), query
// rows row0 .., with output noise σ (uniform) of (key, stream). Returns 0, or 1 for a bad d.
int dpck_store_rows(int d, const float* x, int rows, u32 row0, u32 b, u32 h, u32 heads, u32 s_q,
                    float* out, u64 ld, const u32* key, u64 stream, double sigma) {
    static float stage[64 * 128];
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < d; c += 2) dp_stage_pair(stage, d, r, c, x[r * d + c], x[r * d + c + 1]);
    DpAttnParams p;
    std::memset(&p, 0, sizeof p);
    p.out.ptr = (u64)(size_t)out;
    p.out.ss = ld;
    p.key = key_of(key);
    p.out_stream = stream;
    p.out_sigma = sigma;
    p.out_sigma_mode = sigma != 0.0 ? DP_SIGMA_UNIFORM : DP_SIGMA_NONE;
    p.heads = heads;
    p.s_q = s_q;
    if (d == 64) dp_store_rows<64>(p, stage, rows, row0, b, h, 0, 1);
    else if (d == 128) dp_store_rows<128>(p, stage, rows, row0, b, h, 0, 1);
    else return 1;
    return 0;
}

// ---- exact samplers (exact_sampler.cuh) -------------------------------------------------

// n words of element `element`'s window; with continuation > 0, as if the primary block and
// `continuation` continuation blocks were used up. Returns 0, or DP_EXHAUSTED after writing
// the words read before the window ran out (*written says how many).
int dpck_window_words(const u32* key, u64 stream, u64 element, u64 continuation, u64 n, u32* out,
                      u64* written) {
    const DpKey k = key_of(key);
    DpWindow win;
    dp_window_init(&win, &k, stream, element);
    if (continuation > 0) {
        win.continuation = continuation;
        win.next = 16;
    }
    for (*written = 0; *written < n; ++*written) {
        const int st = dp_window_word(&win, &out[*written]);
        if (st < 0) return st;
    }
    return 0;
}

// (⌊num·2^32/den⌋, num·2^32 mod den, len) of dp_digits (0 < num < den).
void dpck_digits(u64 num, u64 den, u64* d, u64* rem, u32* len) {
    const DpDigits g = dp_digits(num, den);
    *d = g.d;
    *rem = g.rem;
    *len = g.len;
}

// (hi·2^64 + lo) / d and the remainder (d >= 1).
void dpck_divmod128(u64 lo, u64 hi, u64 d, u64* q_lo, u64* q_hi, u64* rem) {
    const DpU128 q = dp_divmod128(DpU128{lo, hi}, d, rem);
    *q_lo = q.lo;
    *q_hi = q.hi;
}

// a / d and the remainder for 128-bit a and d >= 1 (the cell algorithm's rare split).
void dpck_divmod128_128(const u64* a, const u64* d, u64* q, u64* rem) {
    DpU128 r;
    const DpU128 x = dp_divmod128_128(DpU128{a[0], a[1]}, DpU128{d[0], d[1]}, &r);
    q[0] = x.lo;
    q[1] = x.hi;
    rem[0] = r.lo;
    rem[1] = r.hi;
}

// a·m and whether it fits in 128 bits.
int dpck_mul128_64(const u64* a, u64 m, u64* out) {
    DpU128 p{0, 0};  // written only when the product fits
    const bool ok = dp_mul128_64(DpU128{a[0], a[1]}, m, &p);
    out[0] = p.lo;
    out[1] = p.hi;
    return ok ? 1 : 0;
}

// Bernoulli(num/den) from element `element`'s window: 0, 1 or a negative status.
int dpck_bernoulli(const u32* key, u64 stream, u64 element, u64 num, u64 den) {
    const DpKey k = key_of(key);
    DpBits b;
    dp_bits_init(&b, &k, stream, element);
    return dp_bernoulli_ratio(&b, num, den);
}

// Bernoulli(exp(−(whole + num/den))) (num < den, u128 as lo/hi pairs): BernoulliExp.
int dpck_bernoulli_exp(const u32* key, u64 stream, u64 element, const u64* whole, const u64* num,
                       const u64* den) {
    const DpKey k = key_of(key);
    DpBits b;
    dp_bits_init(&b, &k, stream, element);
    return dp_exp_split(&b, DpU128{whole[0], whole[1]}, DpU128{num[0], num[1]},
                        DpU128{den[0], den[1]});
}

// DiscreteLaplace::new(t, s).sample_at(element): 0 and *out, or a negative status.
int dpck_discrete_laplace(const u32* key, u64 stream, u64 element, u64 t, u64 s, i64* out) {
    const DpKey k = key_of(key);
    const DpDLap l = dp_dlap(t, s);
    DpBits b;
    dp_bits_init(&b, &k, stream, element);
    return dp_dlap_draw(&b, &l, out);
}

// DiscreteGaussian with sigma_ratio (s, q): sample_at(element).
int dpck_discrete_gaussian(const u32* key, u64 stream, u64 element, u64 s, u64 q, i64* out) {
    const DpKey k = key_of(key);
    const DpDGauss g = dp_dgauss(s, q);
    return dp_dgauss_sample_at(&k, stream, element, &g, out);
}

// ---- grid release (grid_release.cuh) ----------------------------------------------------

i64 dpck_grid_index(double x, int k, i64 bound) { return dp_grid_index(x, k, bound); }
double dpck_grid_value(i64 m, int k, i64 bound) { return dp_grid_value(m, k, bound); }
i64 dpck_sat_add(i64 a, i64 b) { return dp_sat_add(a, b); }

// One value of a grid release: Grid::release(x, Z), Z element `element` of the draw.
int dpck_grid_release_value(double x, int k, i64 bound, u64 s, u64 q, const u32* key, u64 stream,
                            u64 element, double* out) {
    const DpKey kk = key_of(key);
    const DpGridGroup g{k, 0, bound, s, q};
    return dp_grid_release_value(x, &g, &kk, stream, element, out);
}

// One row of dp_clip_rows_exact with a sequential sum (the CPU's order): returns 1 if the
// row was rescaled, 0 if not, 2 if it held a non-finite value (then it was released as the
// zero row), or a negative sampler status.
int dpck_clip_row_exact(int is_f32, float* x32, double* x64, u64 dim, double c, int k, i64 bound,
                        u64 s, u64 q, const u32* key, u64 stream, u64 e_begin) {
    const DpKey kk = key_of(key);
    const DpGridGroup g{k, 0, bound, s, q};
    double m = 0.0, raw = 0.0;
    int bad = 0;
    for (u64 j = 0; j < dim; ++j) {
        double a = std::fabs(is_f32 ? (double)x32[j] : x64[j]);
        if (!dp_is_finite(a)) bad = 1;
        else { m = std::fmax(m, a); raw += a * a; }
    }
    if (bad) m = 0.0;
    double root = 0.0;
    if (m != 0.0) {
        if (dp_norm_raw_ok(m)) {
            root = dp_sqrt(raw) / m;
        } else {
            double sum = 0.0;
            for (u64 j = 0; j < dim; ++j) {
                double r = (is_f32 ? (double)x32[j] : x64[j]) / m;
                sum += r * r;
            }
            root = dp_sqrt(sum);
        }
    }
    const double factor = dp_clip_factor(c, dim, m, root);
    for (u64 j = 0; j < dim; ++j) {
        double v = bad ? 0.0 : (is_f32 ? (double)x32[j] : x64[j]);
        if (factor >= 0.0) v = is_f32 ? (double)dp_f64_to_f32_rz((v / m) * factor) : (v / m) * factor;
        const int st = dp_grid_release_value(v, &g, &kk, stream, e_begin + j, &v);
        if (st < 0) return st;
        if (is_f32) x32[j] = (float)v; else x64[j] = v;
    }
    return bad ? 2 : factor >= 0.0 ? 1 : 0;
}

}  // extern "C"
