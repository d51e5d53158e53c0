/*
 * C ABI of the moment sketch ([EXT] P1-X1 of docs/PAPERS.md): every entry point, checked against a
 * naive C reference (the noise-free answer is sum_j T_s(tau k_j.q) v_j / sum_j T_s(tau k_j.q)
 * because P(k).P(q) = T_s(tau k.q)), closed-form sensitivities, the statistics of the
 * Gaussian noise, replay of a release from its (master key, epoch, stream id), the charge
 * of the session's ledger, and bad input. Returns 0 or the line.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { N = 40, D = 2, R = 15 /* C(2 + 4, 4) features at s = 4 */, M = R * (D + 1) };

static double taylor(double z, unsigned s) {
    double term = 1, sum = 1;
    for (unsigned t = 1; t <= s; t++) { term *= z / t; sum += term; }
    return sum;
}

static double fact(unsigned n) { return n < 2 ? 1.0 : n * fact(n - 1); }

int dpattn_c_moment_sketch(void) {
    static double keys[N * D], vals[N * D], sk[M], sk2[M], ex[M], sc[64];
    dpattn_moment_sketch_params p, q;
    dpattn_moment_sketch *s = NULL, *s2 = NULL, *e = NULL;
    dpattn_session *rs = NULL, *rs2 = NULL;
    const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
    dpattn_key key;
    size_t dim = 0, r = 0, len = 0, i, j;
    uint32_t deg = 0;
    double sens = 0, scale = 0, sens2 = 0, sd = 0, out[D], want[D], den = 0, x = 0;
    const double qy[D] = {0.5, 0.25};
    size_t live = dpattn_live_handle_count();
    memset(key.bytes, 6, 32);
    for (i = 0; i < N * D; i++) {
        keys[i] = (double)((i * 37) % 100) / 100.0;
        vals[i] = (double)((i * 53) % 200) / 100.0 - 1.0;
    }

    CHECK(dpattn_moment_sketch_params_default(&p) == DPATTN_STATUS_OK);
    CHECK(p.radius == 1.0 && p.eps_s == 0.01 && p.noise == DPATTN_MOMENT_SKETCH_NOISE_GAUSSIAN && p.clamp_outputs == 1);
    CHECK(dpattn_moment_sketch_calibrate(&p, D, &sens, &scale, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    p.epsilon = 1.0; p.delta = 1e-6;

    /* Gaussian: Delta_2 = 2 sqrt(T_s(z_max)) sqrt(1 + d R_w^2) (1 + 1e-9), z_max = tau d R^2 = 1. */
    CHECK(dpattn_moment_sketch_calibrate(&p, D, &sens, &scale, &r) == DPATTN_STATUS_OK && r == R);
    CHECK(fabs(sens - 2 * sqrt(taylor(1.0, 4)) * sqrt(3.0) * (1 + 1e-9)) <= 1e-14 * sens);
    /* The analytic Gaussian sigma is below the classical sqrt(2 ln(1.25/delta)) Delta/eps. */
    CHECK(scale > 0 && scale < sqrt(2 * log(1.25 / 1e-6)) * sens / 1.0);
    /* Laplace: Delta_1 = 2 (sum_a beta_a)(1 + d R_w)(1 + 1e-9), beta_a = sqrt(tau)^|a| / sqrt(a!). */
    q = p; q.noise = DPATTN_MOMENT_SKETCH_NOISE_LAPLACE; q.delta = 0.0;
    {
        double beta = 0;
        for (unsigned a1 = 0; a1 <= 4; a1++)
            for (unsigned a2 = 0; a1 + a2 <= 4; a2++)
                beta += pow(sqrt(0.5), (double)(a1 + a2)) / sqrt(fact(a1) * fact(a2));
        CHECK(dpattn_moment_sketch_calibrate(&q, D, &sens2, &x, &r) == DPATTN_STATUS_OK);
        CHECK(fabs(sens2 - 2 * beta * 3.0 * (1 + 1e-9)) <= 1e-13 * sens2 && x == sens2 / 1.0);
    }

    /* Noise-free sketch: row 0 (the constant feature) is [n, sum_j v_j]; queries match the
     * naive kernel ratio to 1e-12 (relative; r = 15 terms of O(1) rounding). */
    CHECK(dpattn_moment_sketch_new_exact(keys, N * D, vals, N * D, N, D, D, D, &p, &e) == DPATTN_STATUS_OK);
    {
        /* An exact (noise-free) sketch refuses the noise report. */
        double sd = -1.0;
        CHECK(dpattn_moment_sketch_projection_noise_std(e, 1.0, &sd) == DPATTN_STATUS_UNSUPPORTED && sd == -1.0);
    }
    CHECK(dpattn_moment_sketch_get(e, ex, M) == DPATTN_STATUS_OK);
    CHECK(ex[0] == (double)N);
    for (j = 0; j < D; j++) {
        double sum = 0;
        for (i = 0; i < N; i++) sum += vals[i * D + j];
        CHECK(fabs(ex[1 + j] - sum) < 1e-12);
    }
    {
        double num[D] = {0, 0}, dd = 0;
        for (i = 0; i < N; i++) {
            double t = taylor(0.5 * (keys[i * D] * qy[0] + keys[i * D + 1] * qy[1]), 4);
            dd += t;
            for (j = 0; j < D; j++) num[j] += t * vals[i * D + j];
        }
        for (j = 0; j < D; j++) want[j] = num[j] / dd;
        CHECK(dpattn_moment_sketch_query_scratch_len(e, &len) == DPATTN_STATUS_OK && len == R + D);
        CHECK(dpattn_moment_sketch_query(e, out, D, qy, D, sc, len, &den) == DPATTN_STATUS_OK);
        CHECK(fabs(den - dd) <= 1e-12 * dd);
        for (j = 0; j < D; j++) CHECK(fabs(out[j] - want[j]) <= 1e-12);
    }
    CHECK(dpattn_moment_sketch_info(e, &dim, &r, &deg, &sens2, &x) == DPATTN_STATUS_OK);
    CHECK(dim == D && r == R && deg == 4 && sens2 == sens && x == scale);

    /* Released sketch: M~ - M ~ N(0, sigma^2) i.i.d. over 45 entries. Every |z| < 6 sigma
     * (P(fail) ~ 1e-7) and the sample variance / sigma^2 in [0.25, 2.5] (chi^2_45/45 tails
     * there are below 1e-6). A replay session (master key 6, epoch 7, next stream 0, no
     * ledger) so the release can be reproduced below. */
    CHECK(dpattn_session_new_for_replay(&key, 7, 0, NULL, &rs) == DPATTN_STATUS_OK);
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, rs, &s) == DPATTN_STATUS_OK);
    CHECK(dpattn_moment_sketch_get(s, sk, M) == DPATTN_STATUS_OK);
    {
        double ss = 0;
        for (i = 0; i < M; i++) {
            double z = sk[i] - ex[i];
            CHECK(fabs(z) < 6 * scale);
            ss += z * z;
        }
        CHECK(ss / M > 0.25 * scale * scale && ss / M < 2.5 * scale * scale);
    }
    /* The exact release (C callers get it): the rounded sensitivity and the discrete
     * Gaussian's s*Lambda, at most 1% above the continuous calibration; the projection
     * noise std is s*Lambda*sqrt(u2). */
    CHECK(dpattn_moment_sketch_info(s, &dim, &r, &deg, &sens2, &x) == DPATTN_STATUS_OK);
    CHECK(sens2 > sens && sens2 < 1.01 * sens && x > scale && x < 1.01 * scale);
    CHECK(dpattn_moment_sketch_projection_noise_std(s, 4.0, &sd) == DPATTN_STATUS_OK && sd == x * 2.0);
    /* Replay: the session moved to stream 1; a second replay session at (key, epoch 7,
     * stream 0) reissues the release bit for bit, and its next release (stream 1) differs. */
    {
        uint64_t epoch = 0, next = 0;
        CHECK(dpattn_session_position(rs, &epoch, &next) == DPATTN_STATUS_OK && epoch == 7 && next == 1);
    }
    CHECK(dpattn_session_new_for_replay(&key, 7, 0, NULL, &rs2) == DPATTN_STATUS_OK);
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, rs2, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_moment_sketch_get(s2, sk2, M) == DPATTN_STATUS_OK && memcmp(sk, sk2, sizeof sk) == 0);
    dpattn_moment_sketch_free(s2);
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, rs2, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_moment_sketch_get(s2, sk2, M) == DPATTN_STATUS_OK && memcmp(sk, sk2, sizeof sk) != 0);
    dpattn_moment_sketch_free(s2);
    dpattn_session_free(rs2);
    /* The session's ledger is charged. Gaussian noise: (ε, δ) of the params on an
     * approximate-DP ledger (closed form), the discrete Gaussian's zCDP ρ = Δ'²/(2σ²) on a
     * zCDP ledger (Δ' the rounded sensitivity and σ = s·Λ of the release, from
     * dpattn_moment_sketch_info); Laplace noise the pure ε, which a zCDP ledger takes as
     * ρ = ε²/2. A too-small ledger or a ledger kept for another unit refuses the release and
     * returns no handle. */
    {
        dpattn_ledger *l = NULL, *tiny = NULL, *z = NULL, *pr = NULL;
        dpattn_session *sl = NULL, *os = NULL, *st = NULL, *sz = NULL, *sp = NULL;
        dpattn_moment_sketch *s3 = NULL, *s5 = NULL, *s4 = (dpattn_moment_sketch *)(void *)&x;
        const dpattn_privacy_unit prompt = {DPATTN_UNIT_PROMPT, 0};
        dpattn_amount spent;
        uint64_t charges = 9;
        double rsens = 0, rscale = 0, rho = 0;
        CHECK(dpattn_moment_sketch_info(s, &dim, &r, &deg, &rsens, &rscale) == DPATTN_STATUS_OK);
        rho = (rsens / rscale) * (rsens / rscale) / 2;
        CHECK(dpattn_ledger_new_approx(token, 4.0, 1e-5, &l) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new_for_replay(&key, 7, 0, l, &sl) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, sl, &s3) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_get(s3, sk2, M) == DPATTN_STATUS_OK && memcmp(sk, sk2, sizeof sk) == 0);
        dpattn_moment_sketch_free(s3);
        CHECK(dpattn_ledger_spent(l, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == p.epsilon && spent.delta == p.delta);
        /* The default API: a session with a key from the operating system; its two
         * releases draw from two fresh streams (different noise) and are both charged. */
        CHECK(dpattn_session_new(l, &os) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, os, &s3) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, os, &s5) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_get(s3, sk2, M) == DPATTN_STATUS_OK);
        {
            static double sk3[M];
            CHECK(dpattn_moment_sketch_get(s5, sk3, M) == DPATTN_STATUS_OK && memcmp(sk3, sk2, sizeof sk2) != 0);
        }
        dpattn_moment_sketch_free(s3);
        dpattn_moment_sketch_free(s5);
        CHECK(dpattn_ledger_charges(l, &charges) == DPATTN_STATUS_OK && charges == 3);
        CHECK(dpattn_ledger_new_approx(token, 0.5, 1e-5, &tiny) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(tiny, &st) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, st, &s4) == DPATTN_STATUS_INFEASIBLE);
        CHECK(s4 == (dpattn_moment_sketch *)(void *)&x);
        CHECK(dpattn_ledger_charges(tiny, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_new_approx(prompt, 10.0, 1e-5, &pr) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(pr, &sp) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, sp, &s4) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(s4 == (dpattn_moment_sketch *)(void *)&x);
        CHECK(dpattn_ledger_charges(pr, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_new_zcdp(token, 1.0, &z) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new_for_replay(&key, 7, 0, z, &sz) == DPATTN_STATUS_OK);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, sz, &s3) == DPATTN_STATUS_OK);
        dpattn_moment_sketch_free(s3);
        CHECK(dpattn_ledger_spent(z, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_ZCDP && fabs(spent.rho - rho) <= 1e-12 * rho);
        q = p; q.noise = DPATTN_MOMENT_SKETCH_NOISE_LAPLACE; q.delta = 0.0;
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &q, sz, &s3) == DPATTN_STATUS_OK);
        dpattn_moment_sketch_free(s3);
        CHECK(dpattn_ledger_spent(z, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_ZCDP && fabs(spent.rho - (rho + 0.5)) <= 1e-12);
        /* A freed session is detected. */
        dpattn_session_free(st);
        CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, st, &s4) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
        CHECK(s4 == (dpattn_moment_sketch *)(void *)&x);
        dpattn_session_free(sl);
        dpattn_session_free(os);
        dpattn_session_free(sz);
        dpattn_session_free(sp);
        dpattn_ledger_free(tiny);
        dpattn_ledger_free(pr);
        dpattn_ledger_free(z);
        dpattn_ledger_free(l);
    }
    /* Clamped outputs lie in [-R_w, R_w]. */
    CHECK(dpattn_moment_sketch_query(s, out, D, qy, D, sc, len, &den) == DPATTN_STATUS_OK);
    CHECK(fabs(out[0]) <= 1.0 && fabs(out[1]) <= 1.0 && den >= N);

    /* Bad input; outputs untouched. */
    out[0] = 42;
    {
        const double far[D] = {1.5, 0.5}, nanq[D] = {NAN, 0.5};
        CHECK(dpattn_moment_sketch_query(s, out, D, far, D, sc, len, &den) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(dpattn_moment_sketch_query(s, out, D, nanq, D, sc, len, &den) == DPATTN_STATUS_NON_FINITE);
    }
    CHECK(dpattn_moment_sketch_query(s, out, D, qy, D, sc, len - 1, &den) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_moment_sketch_query(s, out, D - 1, qy, D, sc, len, &den) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("out"));
    CHECK(dpattn_moment_sketch_query(s, out, D, qy, D, out, len, &den) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_moment_sketch_query(s, out, D, qy, D, sc, len, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_den"));
    CHECK(dpattn_moment_sketch_query(s, out, D, NULL, D, sc, len, &den) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("q"));
    CHECK(out[0] == 42);
    CHECK(dpattn_moment_sketch_get(s, sk2, M - 1) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    CHECK(dpattn_moment_sketch_get(s, NULL, M) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_moment_sketch_get(s, sk2, SIZE_MAX / 2) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(dpattn_moment_sketch_projection_noise_std(s, -1.0, &sd) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("u2"));
    CHECK(dpattn_moment_sketch_projection_noise_std(s, NAN, &sd) == DPATTN_STATUS_OUT_OF_RANGE);
#define NEW(P) dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, (P), rs, &s2)
    q = p; q.noise = 7;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("noise"));
    q = p; q.noise = DPATTN_MOMENT_SKETCH_NOISE_LAPLACE; /* delta must be 0 */
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    q = p; q.delta = 0.0; /* Gaussian needs delta > 0 */
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    q = p; q.delta = 1.0;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    q = p; q.epsilon = NAN;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    q = p; q.clamp_outputs = 2;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("clamp_outputs"));
    q = p; q.query_policy = 9;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("query_policy"));
    q = p; q.radius = -1.0;
    CHECK(NEW(&q) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(NEW(NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("params"));
#undef NEW
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, 0, D, D, D, &p, rs, &s2) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D - 1, N, D, D, D, &p, rs, &s2) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, NULL, &s2) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, rs, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_sketch"));
    keys[3] = NAN;
    CHECK(dpattn_moment_sketch_new_exact(keys, N * D, vals, N * D, N, D, D, D, &p, &s2) == DPATTN_STATUS_NON_FINITE);
    /* The private release clamps NaN to 0 instead of refusing (a per-row map). */
    CHECK(dpattn_moment_sketch_new(keys, N * D, vals, N * D, N, D, D, D, &p, rs, &s2) == DPATTN_STATUS_OK);
    dpattn_moment_sketch_free(s2);
    dpattn_session_free(rs);
    CHECK(dpattn_moment_sketch_calibrate(&p, 0, &sens, &scale, &r) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_moment_sketch_calibrate(&p, D, NULL, &scale, &r) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_moment_sketch_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Freed handles: detected; double free and NULL free are harmless. */
    dpattn_moment_sketch_free(s);
    CHECK(dpattn_moment_sketch_query_scratch_len(s, &len) == DPATTN_STATUS_INVALID_HANDLE && msg_has("sketch"));
    CHECK(dpattn_moment_sketch_info(s, &dim, &r, &deg, &sens, &scale) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(dpattn_moment_sketch_get(s, sk, M) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(dpattn_moment_sketch_projection_noise_std(s, 1.0, &sd) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_moment_sketch_free(s);
    dpattn_moment_sketch_free(NULL);
    dpattn_moment_sketch_free(e);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}
