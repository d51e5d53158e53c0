/*
 * Exact attention through the C ABI, checked against a naive double-precision reference
 * written here: softmax(scale * Q K^T + mask) V (or the cosh variant), with the causal mask
 * aligned bottom-right and a key-padding mask. Returns 0 or the line of the failed check.
 *
 * Tolerances (all relative to S = sum_j p_j |v_jc|, the row's sum of |weight * value|,
 * which is what the f32 tiled kernel's rounding error scales with):
 *   - f32 compute (f32/f16/bf16 inputs, f32/f64 output): 1e-5 * S. The kernel accumulates
 *     <= 100 keys in f32 with max-shifted exponentials: a few hundred ulps of 6e-8 at most.
 *   - 16-bit outputs: plus half an ulp of the output format (2^-11 f16, 2^-8 bf16) * |ref|.
 *   - the f64 tiled variant: 1e-12 * S; the f64 reference entry point: 1e-13 * S.
 * 16-bit inputs are compared with the reference of the *rounded* inputs (converted back to
 * double exactly here), so the tolerance measures the computation, not input rounding.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg_state = 12345;
static double unif(void) { /* in [-1, 1) */
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) / 4503599627370496.0 - 1.0;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* bf16: the top 16 bits of the float, rounded to nearest even (finite inputs). */
static uint16_t to_bf16(float f) {
    uint32_t u = f2u(f);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static double from_bf16(uint16_t h) { return (double)u2f((uint32_t)h << 16); }

/* f16 for |f| < 65504, round to nearest even; subnormals handled. */
static uint16_t to_f16(float f) {
    uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
    uint32_t m = (u & 0x7FFFFFu) | 0x800000u, shift, r, half, q;
    if ((u & 0x7FFFFFFFu) == 0) return (uint16_t)sign;
    shift = e >= 1 ? 13u : (uint32_t)(13 + 1 - e);
    if (shift > 24) return (uint16_t)sign;
    q = m >> shift;
    r = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (r > half || (r == half && (q & 1u))) q++;
    if (e >= 1) return (uint16_t)(sign | (((uint32_t)e << 10) + (q - 0x400u)));
    return (uint16_t)(sign | q); /* subnormal (a carry into the exponent is correct too) */
}
static double from_f16(uint16_t h) {
    int e = (h >> 10) & 0x1F;
    double m = (double)(h & 0x3FF), v = e ? ldexp(1024.0 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

/* Naive reference over contiguous [B, H, S, D] doubles. Writes out and the bound S. */
static void ref_attn(double *out, double *bound, const double *q, const double *k,
                     const double *v, size_t B, size_t H, size_t sq, size_t sk, size_t d,
                     size_t dv, double scale, int causal, const uint8_t *pad, int use_cosh) {
    double *w = malloc(sk * sizeof *w);
    size_t b, h, i, j, c;
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++)
            for (i = 0; i < sq; i++) {
                const double *qi = q + ((b * H + h) * sq + i) * d;
                double m = -INFINITY, den = 0.0;
                int any = 0;
                for (j = 0; j < sk; j++) {
                    const double *kj = k + ((b * H + h) * sk + j) * d;
                    double a = 0.0;
                    int vis = (!causal || j + sq <= i + sk) && (!pad || pad[b * sk + j]);
                    for (c = 0; c < d; c++) a += qi[c] * kj[c];
                    a *= scale;
                    w[j] = vis ? a : NAN;
                    if (vis) { any = 1; m = fmax(m, use_cosh ? fabs(a) : a); }
                }
                for (j = 0; j < sk; j++) {
                    if (isnan(w[j])) { w[j] = 0.0; continue; }
                    w[j] = use_cosh ? exp(fabs(w[j]) - m) + exp(-fabs(w[j]) - m) : exp(w[j] - m);
                    den += w[j];
                }
                for (c = 0; c < dv; c++) {
                    double o = 0.0, s = 0.0;
                    for (j = 0; j < sk && any; j++) {
                        double x = v[((b * H + h) * sk + j) * dv + c];
                        o += w[j] / den * x;
                        s += w[j] / den * fabs(x);
                    }
                    out[((b * H + h) * sq + i) * dv + c] = o;
                    bound[((b * H + h) * sq + i) * dv + c] = s;
                }
            }
    free(w);
}

/* A [B, H, S, D] tensor stored as [B, S, H, D] with `extra` padding elements per row. */
static dpattn_tensor4 strided_in(const void *data, size_t len, uint32_t dt, size_t B, size_t H,
                                 size_t S, size_t D, size_t extra) {
    dpattn_tensor4 t;
    size_t row = D + extra;
    t.data = data; t.len = len; t.dtype = dt;
    t.shape[0] = B; t.shape[1] = H; t.shape[2] = S; t.shape[3] = D;
    t.strides[0] = S * H * row; t.strides[1] = row; t.strides[2] = H * row; t.strides[3] = 1;
    return t;
}
static dpattn_tensor4_mut as_mut(dpattn_tensor4 t, void *data) {
    dpattn_tensor4_mut m;
    m.data = data; m.len = t.len; m.dtype = t.dtype;
    memcpy(m.shape, t.shape, sizeof m.shape);
    memcpy(m.strides, t.strides, sizeof m.strides);
    return m;
}
/* Storage offset of logical (b, h, s, c). */
static size_t off(const size_t *st, size_t b, size_t h, size_t s, size_t c) {
    return b * st[0] + h * st[1] + s * st[2] + c * st[3];
}

enum { B = 2, H = 3, SQ = 100, SK = 70, D = 5, DV = 3, EX = 2 };
#define NQ ((size_t)B * SQ * H * (D + EX))
#define NK ((size_t)B * SK * H * (D + EX))
#define NV ((size_t)B * SK * H * (DV + EX))
#define NO ((size_t)B * SQ * H * (DV + EX))
#define NR ((size_t)B * H * SQ * DV)

int dpattn_c_attention(void) {
    static float qf[NQ], kf[NK], vf[NV], of[NO], of2[NO];
    static uint16_t qh[NQ], kh[NK], vh[NV], oh[NO];
    static double qd[B * H * SQ * D], kd[B * H * SK * D], vd[B * H * SK * DV];
    static double ref[NR], bnd[NR], od[NO];
    static uint8_t pad[B * SK];
    dpattn_attention_options opt;
    size_t n = 0, n64 = 0, i, b, h, s, c;
    float *scratch;
    double *scratch64;
    int variant, fmt;

    /* Scratch query and defaults. */
    CHECK(dpattn_attention_scratch_len(D, DV, &n) == DPATTN_STATUS_OK && n > 0);
    CHECK(dpattn_attention_scratch_len((size_t)-1, 1, &n64) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(n64 == 0);
    CHECK(dpattn_attention_scratch_len(D, DV, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(msg_has("out_len"));
    n64 = n;
    scratch = malloc(n * sizeof *scratch);
    scratch64 = malloc(n64 * sizeof *scratch64);
    CHECK(scratch && scratch64);
    memset(&opt, 0xAB, sizeof opt);
    CHECK(dpattn_attention_options_default(&opt) == DPATTN_STATUS_OK);
    CHECK(opt.causal == 0 && opt.score == DPATTN_SCORE_EXP && opt.key_padding == NULL);
    CHECK(opt.scale_kind == DPATTN_SCALE_INV_SQRT_DIM && opt.kernel == DPATTN_KERNEL_AUTO);
    CHECK(dpattn_attention_options_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Random inputs in strided [B, S, H, D(+EX)] storage; padding elements are NaN, so any
     * read outside the logical layout would be caught as NaN output. */
    for (i = 0; i < NQ; i++) qf[i] = NAN;
    for (i = 0; i < NK; i++) kf[i] = NAN;
    for (i = 0; i < NV; i++) vf[i] = NAN;
    {
        dpattn_tensor4 q = strided_in(qf, NQ, 0, B, H, SQ, D, EX);
        dpattn_tensor4 k = strided_in(kf, NK, 0, B, H, SK, D, EX);
        dpattn_tensor4 v = strided_in(vf, NV, 0, B, H, SK, DV, EX);
        for (b = 0; b < B; b++)
            for (h = 0; h < H; h++) {
                for (s = 0; s < SQ; s++)
                    for (c = 0; c < D; c++) qf[off(q.strides, b, h, s, c)] = (float)(2.0 * unif());
                for (s = 0; s < SK; s++) {
                    for (c = 0; c < D; c++) kf[off(k.strides, b, h, s, c)] = (float)(2.0 * unif());
                    for (c = 0; c < DV; c++) vf[off(v.strides, b, h, s, c)] = (float)(3.0 * unif());
                }
            }
        for (i = 0; i < B * SK; i++) pad[i] = (uint8_t)(i % 5 != 2);
        pad[0] = 0; /* with causal and s_q > s_k, row 30 of batch 0 then sees only key 0: */
        pad[1] = 0; /* ... a fully masked row, which must be exactly zero */

        /* Four fp formats of the inputs: 0 = f32, 1 = f16, 2 = bf16 (output f32), 3 = bf16
         * in and bf16 out. Three mask/score variants each. */
        for (fmt = 0; fmt < 4; fmt++)
            for (variant = 0; variant < 3; variant++) {
                int causal = variant >= 1, use_cosh = variant == 2;
                uint32_t dt = fmt == 0 ? DPATTN_DTYPE_F32 : fmt == 1 ? DPATTN_DTYPE_F16
                                                                    : DPATTN_DTYPE_BF16;
                const void *qp = qf, *kp = kf, *vp = vf;
                dpattn_tensor4 qt, kt, vt;
                dpattn_tensor4_mut ot;
                double out_ulp = fmt == 3 ? ldexp(1.0, -8) : 0.0;
                for (i = 0; i < NQ; i++) { qh[i] = fmt == 1 ? to_f16(qf[i]) : to_bf16(qf[i]); }
                for (i = 0; i < NK; i++) { kh[i] = fmt == 1 ? to_f16(kf[i]) : to_bf16(kf[i]); }
                for (i = 0; i < NV; i++) { vh[i] = fmt == 1 ? to_f16(vf[i]) : to_bf16(vf[i]); }
                if (fmt) { qp = qh; kp = kh; vp = vh; }
                /* The reference sees exactly the values the library sees. */
#define CONV(arr16, arrf, idx) \
    (fmt == 0 ? (double)arrf[idx] : fmt == 1 ? from_f16(arr16[idx]) : from_bf16(arr16[idx]))
                for (b = 0; b < B; b++)
                    for (h = 0; h < H; h++) {
                        for (s = 0; s < SQ; s++)
                            for (c = 0; c < D; c++)
                                qd[((b * H + h) * SQ + s) * D + c] =
                                    CONV(qh, qf, off(q.strides, b, h, s, c));
                        for (s = 0; s < SK; s++) {
                            for (c = 0; c < D; c++)
                                kd[((b * H + h) * SK + s) * D + c] =
                                    CONV(kh, kf, off(k.strides, b, h, s, c));
                            for (c = 0; c < DV; c++)
                                vd[((b * H + h) * SK + s) * DV + c] =
                                    CONV(vh, vf, off(v.strides, b, h, s, c));
                        }
                    }
#undef CONV
                ref_attn(ref, bnd, qd, kd, vd, B, H, SQ, SK, D, DV, 1.0 / sqrt((double)D),
                         causal, causal ? pad : NULL, use_cosh);
                qt = strided_in(qp, NQ, dt, B, H, SQ, D, EX);
                kt = strided_in(kp, NK, dt, B, H, SK, D, EX);
                vt = strided_in(vp, NV, dt, B, H, SK, DV, EX);
                ot = as_mut(strided_in(of, NO, DPATTN_DTYPE_F32, B, H, SQ, DV, EX),
                            fmt == 3 ? (void *)oh : (void *)of);
                if (fmt == 3) ot.dtype = DPATTN_DTYPE_BF16;
                dpattn_attention_options_default(&opt);
                opt.causal = (uint32_t)causal;
                opt.score = use_cosh ? DPATTN_SCORE_COSH : DPATTN_SCORE_EXP;
                opt.kernel = variant == 1 ? DPATTN_KERNEL_PORTABLE : DPATTN_KERNEL_AUTO;
                if (causal) { opt.key_padding = pad; opt.key_padding_len = B * SK; }
                CHECK(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n) == DPATTN_STATUS_OK);
                for (b = 0; b < B; b++)
                    for (h = 0; h < H; h++)
                        for (s = 0; s < SQ; s++)
                            for (c = 0; c < DV; c++) {
                                size_t r = ((b * H + h) * SQ + s) * DV + c;
                                size_t o = off(ot.strides, b, h, s, c);
                                double got = fmt == 3 ? from_bf16(oh[o]) : (double)of[o];
                                CHECK(fabs(got - ref[r]) <= 1e-5 * bnd[r] + out_ulp * fabs(ref[r]));
                                if (bnd[r] == 0.0) CHECK(got == 0.0);
                            }
                if (causal) CHECK(of[off(ot.strides, 0, 0, 30, 0)] == 0.0f || fmt == 3);
                if (fmt == 0 && variant == 2) {
                    /* Heads split across two calls equal one call bit for bit. */
                    dpattn_tensor4_mut part = ot;
                    size_t per = (size_t)SQ * (DV + EX);
                    memset(of2, 0, sizeof of2);
                    part.data = of2; part.len = NO;
                    part.shape[0] = 1; part.shape[1] = 4;
                    part.strides[1] = per; part.strides[2] = DV + EX; part.strides[0] = 6 * per;
                    CHECK(dpattn_attention_heads(&part, &qt, &kt, &vt, &opt, 0, scratch, n) ==
                          DPATTN_STATUS_OK);
                    part.data = of2 + 4 * per; part.len = NO - 4 * per; part.shape[1] = 2;
                    CHECK(dpattn_attention_heads(&part, &qt, &kt, &vt, &opt, 4, scratch, n) ==
                          DPATTN_STATUS_OK);
                    for (b = 0; b < B; b++)
                        for (h = 0; h < H; h++)
                            for (s = 0; s < SQ; s++)
                                for (c = 0; c < DV; c++)
                                    CHECK(f2u(of2[(b * H + h) * per + s * (DV + EX) + c]) ==
                                          f2u(of[off(ot.strides, b, h, s, c)]));
                    part.data = of2; part.len = NO;
                    part.shape[1] = 3; /* 4 + 3 passes the 6 heads */
                    CHECK(dpattn_attention_heads(&part, &qt, &kt, &vt, &opt, 4, scratch, n) ==
                          DPATTN_STATUS_SHAPE_MISMATCH);
                }
                if (fmt == 0 && variant != 1) {
                    /* The f64 tiled path into a double output, and the f64 reference. */
                    dpattn_tensor4_mut o64 = ot;
                    o64.data = od; o64.dtype = DPATTN_DTYPE_F64;
                    CHECK(dpattn_attention_f64(&o64, &qt, &kt, &vt, &opt, scratch64, n64) ==
                          DPATTN_STATUS_OK);
                    for (b = 0; b < B; b++)
                        for (h = 0; h < H; h++)
                            for (s = 0; s < SQ; s++)
                                for (c = 0; c < DV; c++) {
                                    size_t r = ((b * H + h) * SQ + s) * DV + c;
                                    double got = od[off(o64.strides, b, h, s, c)];
                                    CHECK(fabs(got - ref[r]) <= 1e-12 * bnd[r]);
                                }
                    if (!use_cosh) {
                        size_t rn = 0;
                        CHECK(dpattn_reference_attention_scratch_len(SK, &rn) ==
                              DPATTN_STATUS_OK && rn == SK);
                        CHECK(dpattn_reference_attention(&o64, &qt, &kt, &vt, &opt, scratch64,
                                                         rn) == DPATTN_STATUS_OK);
                        for (b = 0; b < B; b++)
                            for (h = 0; h < H; h++)
                                for (s = 0; s < SQ; s++)
                                    for (c = 0; c < DV; c++) {
                                        size_t r = ((b * H + h) * SQ + s) * DV + c;
                                        double got = od[off(o64.strides, b, h, s, c)];
                                        CHECK(fabs(got - ref[r]) <= 1e-13 * bnd[r]);
                                    }
                    } else {
                        CHECK(dpattn_reference_attention(&o64, &qt, &kt, &vt, &opt, scratch64,
                                                         n64) == DPATTN_STATUS_OUT_OF_RANGE);
                        CHECK(msg_has("options.score"));
                    }
                }
            }

        /* Custom scale 1/d equals DPATTN_SCALE_INV_DIM bit for bit. */
        dpattn_attention_options_default(&opt);
        opt.scale_kind = DPATTN_SCALE_INV_DIM;
        {
            dpattn_tensor4 qt = strided_in(qf, NQ, 0, B, H, SQ, D, EX);
            dpattn_tensor4 kt = strided_in(kf, NK, 0, B, H, SK, D, EX);
            dpattn_tensor4 vt = strided_in(vf, NV, 0, B, H, SK, DV, EX);
            dpattn_tensor4_mut ot = as_mut(strided_in(of, NO, 0, B, H, SQ, DV, EX), of);
            dpattn_tensor4_mut ot2 = ot;
            ot2.data = of2;
            CHECK(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n) == DPATTN_STATUS_OK);
            opt.scale_kind = DPATTN_SCALE_CUSTOM;
            opt.scale = 1.0 / D;
            CHECK(dpattn_attention(&ot2, &qt, &kt, &vt, &opt, scratch, n) == DPATTN_STATUS_OK);
            CHECK(memcmp(of, of2, sizeof of) == 0);
            /* NULL options = defaults. */
            dpattn_attention_options_default(&opt);
            CHECK(dpattn_attention(&ot, &qt, &kt, &vt, NULL, scratch, n) == DPATTN_STATUS_OK);
            CHECK(dpattn_attention(&ot2, &qt, &kt, &vt, &opt, scratch, n) == DPATTN_STATUS_OK);
            CHECK(memcmp(of, of2, sizeof of) == 0);

            /* Bad input: each returns its status, names the argument, leaves out alone. */
            for (i = 0; i < NO; i++) of[i] = 7.0f;
#define BAD(expr, status, needle)                                   \
    do {                                                            \
        CHECK((expr) == (status));                                  \
        CHECK(msg_has(needle));                                     \
        for (i = 0; i < NO; i++) CHECK(of[i] == 7.0f);              \
    } while (0)
            {
                dpattn_tensor4 bad = kt;
                bad.shape[3] = D - 1; /* key dim differs from the query dim */
                BAD(dpattn_attention(&ot, &qt, &bad, &vt, NULL, scratch, n),
                    DPATTN_STATUS_SHAPE_MISMATCH, "k");
                bad = kt; bad.dtype = DPATTN_DTYPE_F16; /* k's dtype differs from q's */
                BAD(dpattn_attention(&ot, &qt, &bad, &vt, NULL, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "k");
                bad = qt; bad.dtype = 17;
                BAD(dpattn_attention(&ot, &bad, &kt, &vt, NULL, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "q.dtype");
                bad = vt; bad.len = 10;
                BAD(dpattn_attention(&ot, &qt, &kt, &bad, NULL, scratch, n),
                    DPATTN_STATUS_BUFFER_TOO_SHORT, "v");
            }
            {
                /* Zero extent: batch 0 everywhere. */
                dpattn_tensor4 q0 = qt, k0 = kt, v0 = vt;
                dpattn_tensor4_mut o0 = ot;
                q0.shape[0] = k0.shape[0] = v0.shape[0] = o0.shape[0] = 0;
                BAD(dpattn_attention(&o0, &q0, &k0, &v0, NULL, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "batch");
            }
            BAD(dpattn_attention(&ot, &qt, &kt, &vt, NULL, scratch, n - 1),
                DPATTN_STATUS_SCRATCH_TOO_SMALL, "scratch");
            {
                /* out overlapping q (the same buffer). */
                dpattn_tensor4_mut alias = ot;
                alias.data = (void *)qf;
                BAD(dpattn_attention(&alias, &qt, &kt, &vt, NULL, scratch, n),
                    DPATTN_STATUS_ALIASING, "out");
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, NULL, (float *)kf, n),
                    DPATTN_STATUS_ALIASING, "scratch");
            }
            {
                uint8_t bad_pad[B * SK];
                memset(bad_pad, 1, sizeof bad_pad);
                bad_pad[7] = 2;
                opt.key_padding = bad_pad; opt.key_padding_len = B * SK;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "key_padding");
                bad_pad[7] = 1;
                opt.key_padding_len = B * SK - 1;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n),
                    DPATTN_STATUS_SHAPE_MISMATCH, "key_padding");
                dpattn_attention_options_default(&opt);
                opt.causal = 2;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "options.causal");
                dpattn_attention_options_default(&opt);
                opt.scale_kind = DPATTN_SCALE_CUSTOM; opt.scale = -1.0;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "scale");
                dpattn_attention_options_default(&opt);
                opt.kernel = 9;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n),
                    DPATTN_STATUS_OUT_OF_RANGE, "options.kernel");
            }
            BAD(dpattn_attention(NULL, &qt, &kt, &vt, NULL, scratch, n),
                DPATTN_STATUS_NULL_ARGUMENT, "out");
            BAD(dpattn_attention(&ot, &qt, &kt, &vt, NULL, NULL, n),
                DPATTN_STATUS_NULL_ARGUMENT, "scratch");
            {
                /* NaN in q (a logical element, not padding). */
                float saved = qf[off(qt.strides, 1, 2, 50, 3)];
                qf[off(qt.strides, 1, 2, 50, 3)] = NAN;
                BAD(dpattn_attention(&ot, &qt, &kt, &vt, NULL, scratch, n),
                    DPATTN_STATUS_NON_FINITE, "q");
                qf[off(qt.strides, 1, 2, 50, 3)] = saved;
                /* f64 variant refuses a non-double output. */
                BAD(dpattn_attention_f64(&ot, &qt, &kt, &vt, NULL, scratch64, n64),
                    DPATTN_STATUS_OUT_OF_RANGE, "out");
            }
#undef BAD
        }
    }
    free(scratch);
    free(scratch64);
    return 0;
}
