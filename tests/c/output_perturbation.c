/*
 * Output-perturbation DP attention through the C ABI.
 * Returns 0 or the line of the failed check.
 *
 * Independent derivations in C:
 *  - row sensitivity: 2 R_v / (1 + (n - 1) e^{-2a}) (softmax), 2 R_v cosh a / (cosh a + n - 1)
 *    (cosh), docs/PRIVACY.md 2.2. The library rounds upward: accept [exact (1 - 1e-15),
 *    exact (1 + 1e-12)];
 *  - sensitivity of given queries: sqrt(sum over heads and rows of Delta_i^2), a_i =
 *    scale ||q_i|| R_k, n = visible keys of the batch element (same tolerance, 1e-12);
 *  - sigma: the analytic Gaussian mechanism (Balle & Wang 2018, Thm 8): delta(sigma) =
 *    Phi(D/(2s) - e s/D) - e^e Phi(-D/(2s) - e s/D) must be <= delta (1 + 1e-6) at the
 *    returned noise scale and > delta at 1/1.01 of it (the exact release's grid and
 *    computation-error allowance cost under 1 % of noise, docs/PRIVACY.md 2.5);
 *  - the noise: (release - exact attention) / sigma_b has mean 0, variance 1 over 4096
 *    elements (z-tests, alpha = 1e-6, |z| < 4.892);
 *  - the grid: every released value of batch element b is a multiple of one power of two
 *    Lambda_b with sigma_b / Lambda_b >= 256 (the exact release's public grid);
 *  - clamping: a value row of norm 1e6 and a key row holding NaN do not fail the call, and
 *    every released value stays within R_v + 12 sigma_b.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 4242;
static double unif(void) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rs >> 11) / 4503599627370496.0 - 1.0;
}
static int up_close(double got, double exact) {
    return got >= exact * (1.0 - 1e-15) && got <= exact * (1.0 + 1e-12);
}
static double row_delta(double n, double a, double rv, int use_cosh) {
    if (n == 0.0) return 0.0;
    return use_cosh ? 2.0 * rv * cosh(a) / (cosh(a) + n - 1.0)
                    : 2.0 * rv / (1.0 + (n - 1.0) * exp(-2.0 * a));
}
static double phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double agm_delta(double s, double eps, double d) {
    return phi(d / (2 * s) - eps * s / d) - exp(eps) * phi(-d / (2 * s) - eps * s / d);
}

enum { B = 2, H = 4, SQ = 32, SK = 64, D = 8, DV = 16 };
#define NQ ((size_t)B * H * SQ * D)
#define NK ((size_t)B * H * SK * D)
#define NV ((size_t)B * H * SK * DV)
#define NO ((size_t)B * H * SQ * DV)

static dpattn_tensor4 tin(const void *p, size_t len, size_t s, size_t d) {
    dpattn_tensor4 t;
    t.data = p; t.len = len; t.dtype = DPATTN_DTYPE_F32;
    t.shape[0] = B; t.shape[1] = H; t.shape[2] = s; t.shape[3] = d;
    t.strides[3] = 1; t.strides[2] = d; t.strides[1] = s * d; t.strides[0] = H * s * d;
    return t;
}
static dpattn_tensor4_mut tout(float *p) {
    dpattn_tensor4_mut t;
    dpattn_tensor4 i = tin(p, NO, SQ, DV);
    t.data = p; t.len = NO; t.dtype = DPATTN_DTYPE_F32;
    memcpy(t.shape, i.shape, sizeof t.shape);
    memcpy(t.strides, i.strides, sizeof t.strides);
    return t;
}
/* Scales each row of `len / dim` rows of `x` to norm `r * u`, u uniform in (0.1, 0.9). */
static void rows_in_ball(float *x, size_t len, size_t dim, double r) {
    size_t i, c;
    for (i = 0; i < len / dim; i++) {
        double nn = 0.0, target = r * (0.5 + 0.4 * unif());
        for (c = 0; c < dim; c++) { x[i * dim + c] = (float)unif(); nn += x[i * dim + c] * (double)x[i * dim + c]; }
        for (c = 0; c < dim; c++) x[i * dim + c] = (float)(x[i * dim + c] * target / sqrt(nn));
    }
}

static int test_output_perturbation(void) {
    static float q[NQ], k[NK], v[NV], out[NO], exact[NO];
    static uint8_t pad[B * SK];
    double sens[B + 1], sigma[B * H], x = 0.0;
    const double rk = 1.5, rv = 2.0, eps = 1.0, delta = 1e-6, scale = 1.0 / sqrt((double)D);
    dpattn_output_perturbation_params p;
    dpattn_attention_options opt;
    dpattn_key key;
    dpattn_session *replay = NULL;
    const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
    dpattn_tensor4 qt = tin(q, NQ, SQ, D), kt = tin(k, NK, SK, D), vt = tin(v, NV, SK, DV);
    dpattn_tensor4_mut ot = tout(out);
    size_t n = 0, i, b, h, r, c;
    size_t live = dpattn_live_handle_count();
    float *scratch;

    /* Closed forms of the row sensitivity. */
    CHECK(dpattn_output_perturbation_row_sensitivity(4, 0.0, 1.0, DPATTN_SCORE_EXP, &x) == 0);
    CHECK(up_close(x, 0.5));
    CHECK(dpattn_output_perturbation_row_sensitivity(4, log(2.0), 1.0, DPATTN_SCORE_EXP, &x) == 0);
    CHECK(up_close(x, 2.0 / 1.75));
    CHECK(dpattn_output_perturbation_row_sensitivity(5, 1.0, 3.0, DPATTN_SCORE_COSH, &x) == 0);
    CHECK(up_close(x, 6.0 * cosh(1.0) / (cosh(1.0) + 4.0)));
    CHECK(dpattn_output_perturbation_row_sensitivity(1, 5.0, 3.0, DPATTN_SCORE_EXP, &x) == 0);
    CHECK(x == 6.0);
    CHECK(dpattn_output_perturbation_row_sensitivity(0, 5.0, 3.0, DPATTN_SCORE_EXP, &x) == 0);
    CHECK(x == 0.0);
    x = 9.0;
    CHECK(dpattn_output_perturbation_row_sensitivity(4, -1.0, 1.0, 0, &x) ==
          DPATTN_STATUS_OUT_OF_RANGE && x == 9.0 && msg_has("logit_bound"));
    CHECK(dpattn_output_perturbation_row_sensitivity(4, 1.0, 1.0, 7, &x) ==
          DPATTN_STATUS_OUT_OF_RANGE && x == 9.0 && msg_has("score"));
    CHECK(dpattn_output_perturbation_row_sensitivity(4, 1.0, 1.0, 0, NULL) ==
          DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_sensitivity"));
    /* Worst case: sqrt(64) * row(1024, 0.125 * 2 * 2 = 0.5). */
    CHECK(dpattn_output_perturbation_worst_case_sensitivity(64, 1024, 2.0, 2.0, 1.0, 0.125, 0,
                                                            &x) == 0);
    CHECK(up_close(x, 8.0 * row_delta(1024, 0.5, 1.0, 0)));
    CHECK(dpattn_output_perturbation_worst_case_sensitivity(1, 1, 1.0, 0.0, 1.0, 1.0, 0, &x) ==
          DPATTN_STATUS_OUT_OF_RANGE && msg_has("key_norm"));

    /* Defaults: the privacy fields are NaN and must be set. */
    memset(&p, 0, sizeof p);
    CHECK(dpattn_output_perturbation_params_default(&p) == DPATTN_STATUS_OK);
    CHECK(isnan(p.epsilon) && isnan(p.delta) && isnan(p.key_norm) && isnan(p.value_norm));
    CHECK(p.score == DPATTN_SCORE_EXP && p.key_padding == NULL);
    CHECK(dpattn_output_perturbation_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Inputs: keys and values inside their balls; batch 1 has 16 padded keys. */
    for (i = 0; i < NQ; i++) q[i] = (float)unif();
    rows_in_ball(k, NK, D, rk);
    rows_in_ball(v, NV, DV, rv);
    for (i = 0; i < B * SK; i++) pad[i] = (uint8_t)!(i >= SK && i % 4 == 0);
    for (i = 0; i < 32; i++) key.bytes[i] = (uint8_t)(200 - i);
    p.key_norm = rk; p.value_norm = rv; p.epsilon = eps; p.delta = delta;
    p.key_padding = pad; p.key_padding_len = B * SK;

    /* Sensitivity of these queries, derived here. */
    sens[B] = -1.0;
    CHECK(dpattn_output_perturbation_sensitivity(sens, B + 1, &qt, SK, &p) == DPATTN_STATUS_OK);
    CHECK(sens[B] == -1.0);
    for (b = 0; b < B; b++) {
        double ss = 0.0, nvis = b == 0 ? SK : SK - SK / 4;
        for (h = 0; h < H; h++)
            for (r = 0; r < SQ; r++) {
                double nn = 0.0, dl;
                for (c = 0; c < D; c++) {
                    double e = q[((b * H + h) * SQ + r) * D + c];
                    nn += e * e;
                }
                dl = row_delta(nvis, scale * sqrt(nn) * rk, rv, 0);
                ss += dl * dl;
            }
        CHECK(up_close(sens[b], sqrt(ss)));
    }
    CHECK(dpattn_output_perturbation_sensitivity(sens, 1, &qt, SK, &p) ==
          DPATTN_STATUS_SHAPE_MISMATCH && msg_has("sensitivity"));

    /* The release (its scratch also serves dpattn_attention below). */
    CHECK(dpattn_output_perturbation_scratch_len(D, DV, &n) == DPATTN_STATUS_OK);
    {
        size_t a = 0;
        CHECK(dpattn_attention_scratch_len(D, DV, &a) == DPATTN_STATUS_OK && n == 2 * a + 1);
        CHECK(dpattn_output_perturbation_scratch_len(D, DV, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    }
    scratch = malloc(n * sizeof *scratch);
    CHECK(scratch != NULL);
    /* A replay session (a stored master key, epoch 77, next stream id 3, no ledger): the
       tests below reproduce its first release bit for bit. */
    CHECK(dpattn_session_new_for_replay(&key, 77, 3, NULL, &replay) == DPATTN_STATUS_OK);
    CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, replay, sigma, B * H,
                                               scratch, n) == DPATTN_STATUS_OK);
    for (b = 0; b < B; b++) {
        double s = sigma[b * H];
        for (h = 0; h < H; h++) CHECK(sigma[b * H + h] == s);
        CHECK(agm_delta(s, eps, sens[b]) <= delta * (1.0 + 1e-6));
        CHECK(agm_delta(s / 1.01, eps, sens[b]) > delta);
    }
    /* With an approximate-DP ledger for one token: the same release (a replay session at
       the same position), charged (ε, δ) of the params; a too-small ledger, or one kept for
       another unit, refuses it and writes nothing. */
    {
        static float out2[NO];
        const dpattn_privacy_unit prompt = {DPATTN_UNIT_PROMPT, 0}, pair = {DPATTN_UNIT_TOKENS, 2};
        dpattn_ledger *l = NULL, *tiny = NULL, *other = NULL, *groups = NULL;
        dpattn_session *s = NULL, *stale = (dpattn_session *)(uintptr_t)0x1230;
        dpattn_amount spent;
        uint64_t charges = 9;
        CHECK(dpattn_ledger_new_approx(token, 2.0, 1e-5, &l) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new_for_replay(&key, 77, 3, l, &s) == DPATTN_STATUS_OK);
        ot.data = out2;
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_OK);
        CHECK(memcmp(out2, out, sizeof out2) == 0);
        CHECK(dpattn_ledger_spent(l, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == eps && spent.delta == delta);
        dpattn_session_free(s);
        CHECK(dpattn_ledger_new_approx(token, eps / 2, 1e-5, &tiny) == DPATTN_STATUS_OK);
        CHECK(dpattn_ledger_new_approx(prompt, 100.0, 1e-2, &other) == DPATTN_STATUS_OK);
        CHECK(dpattn_ledger_new_approx(pair, 100.0, 1e-2, &groups) == DPATTN_STATUS_OK);
        memset(out2, 0, sizeof out2);
        CHECK(dpattn_session_new_for_replay(&key, 77, 3, tiny, &s) == DPATTN_STATUS_OK);
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma,
                                                   B * H, scratch, n) == DPATTN_STATUS_INFEASIBLE);
        dpattn_session_free(s);
        CHECK(dpattn_session_new(other, &s) == DPATTN_STATUS_OK);
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(msg_has("one prompt"));
        dpattn_session_free(s);
        /* One token's guarantee does not cover groups of two tokens. */
        CHECK(dpattn_session_new(groups, &s) == DPATTN_STATUS_OK);
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_UNIT_MISMATCH);
        dpattn_session_free(s);
        for (i = 0; i < NO; i++) CHECK(out2[i] == 0.0f);
        CHECK(dpattn_ledger_charges(tiny, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_charges(other, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_charges(groups, &charges) == DPATTN_STATUS_OK && charges == 0);
        dpattn_ledger_free(tiny);
        CHECK(dpattn_session_new_for_replay(&key, 77, 3, tiny, &stale) == DPATTN_STATUS_INVALID_HANDLE);
        CHECK(msg_has("ledger") && stale == (dpattn_session *)(uintptr_t)0x1230);
        /* s was freed: a release on it is refused. */
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma,
                                                   B * H, scratch, n) == DPATTN_STATUS_INVALID_HANDLE);
        CHECK(msg_has("session"));
        for (i = 0; i < NO; i++) CHECK(out2[i] == 0.0f);
        dpattn_ledger_free(l);
        dpattn_ledger_free(other);
        dpattn_ledger_free(groups);
        ot.data = out;
    }
    /* Exact attention over the same (unclamped: inside the balls) inputs, and the noise. */
    dpattn_attention_options_default(&opt);
    opt.key_padding = pad; opt.key_padding_len = B * SK;
    ot.data = exact;
    CHECK(dpattn_attention(&ot, &qt, &kt, &vt, &opt, scratch, n) == DPATTN_STATUS_OK);
    {
        double sum = 0.0, sum2 = 0.0, mean, kdf = (double)NO - 1.0, z;
        for (i = 0; i < NO; i++) sum += (out[i] - (double)exact[i]) / sigma[i / (SQ * DV)];
        mean = sum / (double)NO;
        for (i = 0; i < NO; i++) {
            double u = (out[i] - (double)exact[i]) / sigma[i / (SQ * DV)] - mean;
            sum2 += u * u;
        }
        CHECK(fabs(mean * sqrt((double)NO)) < 4.892);
        z = (cbrt(sum2 / kdf) - (1.0 - 2.0 / (9.0 * kdf))) / sqrt(2.0 / (9.0 * kdf));
        CHECK(fabs(z) < 4.892);
    }
    /* The grid: the largest power of two dividing every value of batch element b. */
    for (b = 0; b < B; b++) {
        double lambda = ldexp(1.0, 30);
        size_t per = NO / B;
        for (i = b * per; i < (b + 1) * per; i++)
            while (lambda > 0.0 && fmod((double)out[i], lambda) != 0.0) lambda /= 2.0;
        CHECK(lambda > 0.0 && sigma[b * H] / lambda >= 256.0);
    }

    /* Clamping: a huge value row and a NaN key row do not fail; every released value stays
     * within R_v + 12 sigma_b. */
    for (c = 0; c < DV; c++) v[(1 * SK + 5) * DV + c] = 1e6f / 4.0f;
    k[(2 * SK + 7) * D + 3] = NAN;
    ot.data = out;
    CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, replay, sigma, B * H,
                                               scratch, n) == DPATTN_STATUS_OK);
    k[(2 * SK + 7) * D + 3] = 0.5f;
    for (i = 0; i < NO; i++) CHECK(fabs((double)out[i]) <= rv + 12.0 * sigma[i / (SQ * DV)]);
    /* Constant-time noise (for enclaves): charged (eps, delta) on an approximate-DP ledger,
     * values within R_v + 12 sigma_b; a zCDP ledger cannot account for an (eps, delta > 0)
     * charge and refuses it (OUT_OF_RANGE on "charge delta": nothing written or charged); the unsafe float path is not offered through the C ABI; an
     * unknown mode is out of range. */
    {
        static float ct[NO];
        dpattn_ledger *al = NULL, *zl = NULL;
        dpattn_session *s = NULL;
        dpattn_amount spent;
        uint64_t zc = 9;
        CHECK(p.noise_mode == DPATTN_NOISE_MODE_EXACT); /* the default */
        p.noise_mode = DPATTN_NOISE_MODE_CONSTANT_TIME;
        CHECK(dpattn_ledger_new_approx(token, 2.0, 1e-5, &al) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(al, &s) == DPATTN_STATUS_OK);
        ot.data = ct;
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_OK);
        for (i = 0; i < NO; i++) CHECK(fabs((double)ct[i]) <= rv + 12.0 * sigma[i / (SQ * DV)]);
        CHECK(dpattn_ledger_spent(al, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == eps && spent.delta == delta);
        dpattn_session_free(s);
        CHECK(dpattn_ledger_new_zcdp(token, 100.0, &zl) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(zl, &s) == DPATTN_STATUS_OK);
        for (i = 0; i < NO; i++) ct[i] = 7.0f;
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, s, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(msg_has("charge delta"));
        for (i = 0; i < NO; i++) CHECK(ct[i] == 7.0f);
        CHECK(dpattn_ledger_charges(zl, &zc) == DPATTN_STATUS_OK && zc == 0);
        p.noise_mode = DPATTN_NOISE_MODE_UNSAFE_FLOAT;
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, replay, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_UNSUPPORTED);
        CHECK(msg_has("UNSAFE_FLOAT"));
        p.noise_mode = 7;
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, replay, sigma, B * H,
                                                   scratch, n) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(msg_has("noise_mode"));
        for (i = 0; i < NO; i++) CHECK(ct[i] == 7.0f);
        p.noise_mode = DPATTN_NOISE_MODE_EXACT;
        dpattn_session_free(s);
        dpattn_ledger_free(al);
        dpattn_ledger_free(zl);
    }

    /* Bad input: status, message, out untouched. */
    ot.data = out;
    for (i = 0; i < NO; i++) out[i] = 7.0f;
#define BAD(sess, slen, status, needle)                                                   \
    do {                                                                                  \
        CHECK(dpattn_output_perturbation_attention(&ot, &qt, &kt, &vt, &p, sess, sigma,   \
                                                   slen, scratch, n) == (status));        \
        CHECK(msg_has(needle));                                                           \
        for (i = 0; i < NO; i++) CHECK(out[i] == 7.0f);                                   \
    } while (0)
    BAD(replay, B * H - 1, DPATTN_STATUS_SHAPE_MISMATCH, "sigma");
    BAD(NULL, B * H, DPATTN_STATUS_NULL_ARGUMENT, "session");
    p.delta = 0.0;
    BAD(replay, B * H, DPATTN_STATUS_OUT_OF_RANGE, "delta");
    p.delta = 1.0;
    BAD(replay, B * H, DPATTN_STATUS_OUT_OF_RANGE, "delta");
    p.delta = delta; p.epsilon = 0.0;
    BAD(replay, B * H, DPATTN_STATUS_OUT_OF_RANGE, "epsilon");
    p.epsilon = eps; p.value_norm = 0.0;
    BAD(replay, B * H, DPATTN_STATUS_OUT_OF_RANGE, "value_norm");
    p.value_norm = rv;
    pad[3] = 2;
    BAD(replay, B * H, DPATTN_STATUS_OUT_OF_RANGE, "key_padding");
    pad[3] = 1;
    q[9] = NAN; /* public queries are validated */
    BAD(replay, B * H, DPATTN_STATUS_NON_FINITE, "q");
    q[9] = 0.25f;
#undef BAD
    dpattn_session_free(replay);
    free(scratch);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

int dpattn_c_output_perturbation(void) { return test_output_perturbation(); }
