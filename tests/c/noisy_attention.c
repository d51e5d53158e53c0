/*
 * Noisy attention through the C ABI. Returns 0 or the line of the failed check.
 *
 * Checks: noise off (flags 0, or sigma = 0) equals dpattn_attention bit for bit; with
 * output noise sigma_h, (noisy - exact) / sigma_h over 8192 outputs has mean 0 and
 * variance 1 (z-tests at alpha = 1e-6, |z| < 4.892 two-sided; the variance test uses the
 * Wilson-Hilferty cube-root normal approximation of chi^2 with n - 1 = 8191 degrees of
 * freedom). The difference is the f64 Gaussian rounded to f32 and added to an f32 output,
 * so it equals the noise up to ~1e-7 relative: far below what the tests can see. Same key
 * and streams give identical bits; a different stream or key changes (almost) every noisy
 * element; a head sub-range equals the slice of a full call; per-(batch, head) sigma equal
 * to per-head sigma gives the same bits; the f64 oracle agrees with the f32 kernel to
 * 1e-5 * (max|v| + |out|) (the f32 attention error bound used in attention.c).
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t st = 777;
static double unif(void) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(st >> 11) / 4503599627370496.0 - 1.0;
}
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
enum { B = 2, H = 4, SQ = 64, SK = 48, D = 8, DV = 16 };
#define NQ ((size_t)B * H * SQ * D)
#define NK ((size_t)B * H * SK * D)
#define NV ((size_t)B * H * SK * DV)
#define NO ((size_t)B * H * SQ * DV)

static dpattn_tensor4 tin(const void *p, size_t len, uint32_t dt, size_t s, size_t d) {
    dpattn_tensor4 t;
    t.data = p; t.len = len; t.dtype = dt;
    t.shape[0] = B; t.shape[1] = H; t.shape[2] = s; t.shape[3] = d;
    t.strides[3] = 1; t.strides[2] = d; t.strides[1] = s * d; t.strides[0] = H * s * d;
    return t;
}
static dpattn_tensor4_mut tout(void *p, size_t len, uint32_t dt, size_t b, size_t h) {
    dpattn_tensor4_mut t;
    t.data = p; t.len = len; t.dtype = dt;
    t.shape[0] = b; t.shape[1] = h; t.shape[2] = SQ; t.shape[3] = DV;
    t.strides[3] = 1; t.strides[2] = DV; t.strides[1] = SQ * DV; t.strides[0] = h * SQ * DV;
    return t;
}

static size_t count_diff(const float *a, const float *b, size_t n) {
    size_t i, c = 0;
    for (i = 0; i < n; i++) c += bits(a[i]) != bits(b[i]);
    return c;
}

int dpattn_c_noisy_attention(void) {
    static float q[NQ], k[NK], v[NV], exact[NO], noisy[NO], again[NO], part[NO];
    static double o64[NO];
    double sigma[H] = {0.25, 0.5, 1.0, 2.0}, sigma_bh[B * H], zero[H] = {0, 0, 0, 0};
    double logit_sigma[H] = {0.3, 0.3, 0.3, 0.3};
    dpattn_noise_spec ns;
    dpattn_tensor4 qt, kt, vt;
    dpattn_tensor4_mut ot;
    size_t n = 0, i, b, h;
    float *scratch;
    double *scratch64, vmax = 0.0;

    for (i = 0; i < NQ; i++) q[i] = (float)unif();
    for (i = 0; i < NK; i++) k[i] = (float)unif();
    for (i = 0; i < NV; i++) { v[i] = (float)(2.0 * unif()); vmax = fmax(vmax, fabs(v[i])); }
    for (b = 0; b < B; b++) for (h = 0; h < H; h++) sigma_bh[b * H + h] = sigma[h];
    CHECK(dpattn_attention_scratch_len(D, DV, &n) == DPATTN_STATUS_OK);
    scratch = malloc(n * sizeof *scratch);
    scratch64 = malloc(n * sizeof *scratch64);
    CHECK(scratch && scratch64);
    qt = tin(q, NQ, DPATTN_DTYPE_F32, SQ, D);
    kt = tin(k, NK, DPATTN_DTYPE_F32, SK, D);
    vt = tin(v, NV, DPATTN_DTYPE_F32, SK, DV);
    ot = tout(exact, NO, DPATTN_DTYPE_F32, B, H);
    CHECK(dpattn_attention(&ot, &qt, &kt, &vt, NULL, scratch, n) == DPATTN_STATUS_OK);

    memset(&ns, 0, sizeof ns);
    for (i = 0; i < 32; i++) ns.key.bytes[i] = (uint8_t)(i * 7 + 1);
    ns.output.stream = 10;
    ns.logits.stream = 11;

    /* Noise off: both flags 0, then output noise with sigma = 0. */
    ot.data = noisy;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(memcmp(noisy, exact, sizeof exact) == 0);
    ns.output_enabled = 1;
    ns.output.sigma = zero; ns.output.sigma_len = H;
    ns.logits_enabled = 1;
    ns.logits.sigma = zero; ns.logits.sigma_len = H;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(memcmp(noisy, exact, sizeof exact) == 0);

    /* Output noise: z-tests on (noisy - exact) / sigma_h. */
    ns.logits_enabled = 0;
    ns.output.sigma = sigma;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    {
        double sum = 0.0, sum2 = 0.0, mean, var, kdf = (double)NO - 1.0, z;
        for (i = 0; i < NO; i++) {
            double u = ((double)noisy[i] - (double)exact[i]) / sigma[(i / (SQ * DV)) % H];
            sum += u;
        }
        mean = sum / (double)NO;
        for (i = 0; i < NO; i++) {
            double u = ((double)noisy[i] - (double)exact[i]) / sigma[(i / (SQ * DV)) % H] - mean;
            sum2 += u * u;
        }
        var = sum2 / kdf;
        z = mean * sqrt((double)NO);
        CHECK(fabs(z) < 4.892);
        /* Wilson-Hilferty: (chi2/k)^(1/3) ~ N(1 - 2/(9k), 2/(9k)). */
        z = (cbrt(var) - (1.0 - 2.0 / (9.0 * kdf))) / sqrt(2.0 / (9.0 * kdf));
        CHECK(fabs(z) < 4.892);
        /* Per head: a wrong sigma in one head (e.g. head 3 with sigma_0) is far outside. */
        for (h = 0; h < H; h++) {
            double s2 = 0.0, m = 0.0, cnt = 0.0, kh;
            for (i = 0; i < NO; i++)
                if ((i / (SQ * DV)) % H == h) { m += (double)noisy[i] - exact[i]; cnt += 1.0; }
            m /= cnt;
            for (i = 0; i < NO; i++)
                if ((i / (SQ * DV)) % H == h) {
                    double u = ((double)noisy[i] - exact[i] - m) / sigma[h];
                    s2 += u * u;
                }
            kh = cnt - 1.0;
            z = (cbrt(s2 / kh) - (1.0 - 2.0 / (9.0 * kh))) / sqrt(2.0 / (9.0 * kh));
            CHECK(fabs(z) < 4.892);
        }
    }
    /* Same key and stream: the same bits. Per-(batch, head) sigma: the same bits. */
    ot.data = again;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(memcmp(noisy, again, sizeof again) == 0);
    ns.output.sigma = sigma_bh; ns.output.sigma_len = B * H;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(memcmp(noisy, again, sizeof again) == 0);
    ns.output.sigma = sigma; ns.output.sigma_len = H;
    /* Heads 3..7 (flattened) in one call equal the slice of the full call. */
    {
        dpattn_tensor4_mut pt = tout(part, NO, DPATTN_DTYPE_F32, 1, 5);
        CHECK(dpattn_noisy_attention_heads(&pt, &qt, &kt, &vt, NULL, &ns, 3, scratch, n) ==
              DPATTN_STATUS_OK);
        CHECK(memcmp(part, noisy + 3 * SQ * DV, 5 * SQ * DV * sizeof(float)) == 0);
    }
    /* A different stream, then a different key: nearly every element differs (a tie has
     * probability ~1e-7 per element). */
    ns.output.stream = 12;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(count_diff(noisy, again, NO) > NO - NO / 100);
    ns.output.stream = 10;
    ns.key.bytes[31] ^= 1;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(count_diff(noisy, again, NO) > NO - NO / 100);
    ns.key.bytes[31] ^= 1;

    /* Logit noise alone: changes the output, is reproducible, and stays a convex
     * combination of value rows (|out| <= max|v|). */
    ns.output_enabled = 0;
    ns.logits_enabled = 1;
    ns.logits.sigma = logit_sigma;
    ot.data = noisy;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    ot.data = again;
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == DPATTN_STATUS_OK);
    CHECK(memcmp(noisy, again, sizeof again) == 0);
    CHECK(count_diff(noisy, exact, NO) > NO / 2);
    for (i = 0; i < NO; i++) CHECK(fabs(noisy[i]) <= vmax * (1.0 + 1e-6));

    /* Both draws; the f64 oracle agrees with the f32 kernel. */
    ns.output_enabled = 1;
    {
        dpattn_tensor4_mut o = tout(o64, NO, DPATTN_DTYPE_F64, B, H);
        ot.data = noisy;
        CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) ==
              DPATTN_STATUS_OK);
        CHECK(dpattn_noisy_attention_f64(&o, &qt, &kt, &vt, NULL, &ns, scratch64, n) ==
              DPATTN_STATUS_OK);
        for (i = 0; i < NO; i++) CHECK(fabs(noisy[i] - o64[i]) <= 1e-5 * (vmax + fabs(o64[i])));
    }

    /* Bad input: status, message naming the argument, out untouched. */
    for (i = 0; i < NO; i++) noisy[i] = 7.0f;
#define BAD(status, needle)                                                            \
    do {                                                                               \
        CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, n) == (status)); \
        CHECK(msg_has(needle));                                                        \
        for (i = 0; i < NO; i++) CHECK(noisy[i] == 7.0f);                              \
    } while (0)
    ns.logits.stream = ns.output.stream;
    BAD(DPATTN_STATUS_OUT_OF_RANGE, "stream");
    ns.logits.stream = 11;
    sigma[2] = -1.0;
    BAD(DPATTN_STATUS_OUT_OF_RANGE, "sigma");
    sigma[2] = NAN;
    BAD(DPATTN_STATUS_OUT_OF_RANGE, "sigma");
    sigma[2] = 1.0;
    ns.output.sigma_len = 3;
    BAD(DPATTN_STATUS_SHAPE_MISMATCH, "sigma");
    ns.output.sigma_len = H;
    ns.output_enabled = 2;
    BAD(DPATTN_STATUS_OUT_OF_RANGE, "noise.output_enabled");
    ns.output_enabled = 1;
    ns.output.sigma = NULL;
    BAD(DPATTN_STATUS_NULL_ARGUMENT, "noise.output.sigma");
    ns.output.sigma = /* sigma inside out, 8-byte aligned */
        (const double *)(const void *)(noisy + ((uintptr_t)noisy % 8 ? 1 : 0));
    BAD(DPATTN_STATUS_ALIASING, "noise.output.sigma");
    ns.output.sigma = sigma;
    sigma[0] = 1e38; /* noise that could overflow f32 */
    BAD(DPATTN_STATUS_OUT_OF_RANGE, "noise");
    sigma[0] = 0.25;
    {
        float saved = q[5];
        q[5] = NAN;
        BAD(DPATTN_STATUS_NON_FINITE, "q");
        q[5] = saved;
    }
#undef BAD
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, NULL, scratch, n) ==
          DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(msg_has("noise"));
    CHECK(dpattn_noisy_attention(&ot, &qt, &kt, &vt, NULL, &ns, scratch, 1) ==
          DPATTN_STATUS_SCRATCH_TOO_SMALL);
    {
        dpattn_tensor4_mut pt = tout(part, NO, DPATTN_DTYPE_F32, 1, 5);
        CHECK(dpattn_noisy_attention_heads(&pt, &qt, &kt, &vt, NULL, &ns, 4, scratch, n) ==
              DPATTN_STATUS_SHAPE_MISMATCH);
        CHECK(msg_has("out"));
        CHECK(dpattn_noisy_attention_f64(&ot, &qt, &kt, &vt, NULL, &ns, scratch64, n) ==
              DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(msg_has("out"));
    }
    for (i = 0; i < NO; i++) CHECK(noisy[i] == 7.0f);
    free(scratch);
    free(scratch64);
    return 0;
}
