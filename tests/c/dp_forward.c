/*
 * DP-Forward (paper 003) through the C ABI: every dpattn_dp_forward_* entry point, checked
 * against the reference values of docs/PAPERS.md §3.9 (tables T3-A … T3-J) and against closed
 * forms computed here. Returns 0 on success or the line of the first failed check.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <string.h>

/* |a/b - 1| <= tol */
static int rel(double a, double b, double tol) { return fabs(a / b - 1.0) <= tol; }

static dpattn_dp_forward_params base(size_t tokens, size_t dim) {
    dpattn_dp_forward_params p;
    memset(&p, 0xAB, sizeof p);
    if (dpattn_dp_forward_params_default(&p) != DPATTN_STATUS_OK) p.tokens = 999;
    p.tokens = tokens;
    p.dim = dim;
    return p;
}

static int params_and_calibration(void) {
    dpattn_dp_forward_params p = base(0, 0);
    double s = 0, sigma = 0, e = 0, d = 0, rho = 0;
    /* Documented defaults. */
    CHECK(p.epsilon == 1.0 && p.delta == 1e-5 && p.releases == 1 && p.clip_norm == 1.0);
    CHECK(p.region == DPATTN_DP_FORWARD_REGION_FROBENIUS);
    CHECK(p.mode == DPATTN_DP_FORWARD_MODE_NORMALIZE);
    CHECK(p.neighbours == DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE);
    CHECK(p.position == DPATTN_DP_FORWARD_POSITION_EMBEDDING);
    CHECK(p.rule == DPATTN_DP_FORWARD_RULE_DERIVED);
    /* tokens = dim = 0 by default: must be set. */
    CHECK(dpattn_dp_forward_validate(&p) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("tokens"));
    CHECK(dpattn_dp_forward_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* T3-A: ε = 8, δ = 1e-5, S₂ = 2C = 2 gives σ = 1.2004581444 (printed to 11 digits, so
       the relative rounding of the table is < 5e-11; tolerance 1e-10). */
    p = base(1, 768);
    p.epsilon = 8.0;
    p.position = DPATTN_DP_FORWARD_POSITION_POOLED;
    CHECK(dpattn_dp_forward_validate(&p) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_forward_sensitivity(&p, &s) == DPATTN_STATUS_OK && s == 2.0);
    CHECK(dpattn_dp_forward_noise_floor(&p, &sigma) == DPATTN_STATUS_OK);
    CHECK(rel(sigma, 1.2004581444, 1e-10));
    CHECK(dpattn_dp_forward_guarantee(&p, &e, &d) == DPATTN_STATUS_OK && e == 8.0 && d == 1e-5);
    /* ρ = S²/(2σ²) (Bun–Steinke), rounded up by the library: within 1e-12. */
    CHECK(dpattn_dp_forward_release_rho(&p, &rho) == DPATTN_STATUS_OK);
    CHECK(rel(rho, 4.0 / (2.0 * sigma * sigma), 1e-12) && rho >= 4.0 / (2.0 * sigma * sigma) * (1 - 1e-15));
    /* [FIX] P3-1 reproduction: the released code's S = C gives σ = 0.600229072199 and the
       effective ε at the true sensitivity is 19.121181 (T3-G; 8 digits -> 1e-6). */
    p.rule = DPATTN_DP_FORWARD_RULE_RELEASED_CODE;
    CHECK(dpattn_dp_forward_noise_floor(&p, &sigma) == DPATTN_STATUS_OK);
    CHECK(rel(sigma, 0.600229072199, 1e-10));
    CHECK(dpattn_dp_forward_guarantee(&p, &e, &d) == DPATTN_STATUS_OK && rel(e, 19.121181, 1e-6));
    p.region = DPATTN_DP_FORWARD_REGION_ROWS; /* the code never ran rows */
    CHECK(dpattn_dp_forward_validate(&p) == DPATTN_STATUS_UNSUPPORTED);

    /* T3-C: k = 3 releases at a total (1, 1e-5), unit sensitivity (C = 0.5): σ per release
       6.461643536 (10 digits -> 1e-9). */
    p = base(128, 768);
    p.releases = 3;
    p.clip_norm = 0.5;
    CHECK(dpattn_dp_forward_noise_floor(&p, &sigma) == DPATTN_STATUS_OK);
    CHECK(rel(sigma, 6.461643536, 1e-9));

    /* Sensitivity table (module docs): 2C, 2C√n, 2C√min(c, n). */
    CHECK(dpattn_dp_forward_clip_sensitivity(DPATTN_DP_FORWARD_REGION_ROWS,
              DPATTN_DP_FORWARD_NEIGHBOURS_SEQUENCE, 1, 1.0, 16, &s) == DPATTN_STATUS_OK && s == 8.0);
    CHECK(dpattn_dp_forward_clip_sensitivity(DPATTN_DP_FORWARD_REGION_ROWS,
              DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 4, 1.0, 128, &s) == DPATTN_STATUS_OK && s == 4.0);
    /* √2 is irrational: rounded up, at most 2 ulp above 2√2. */
    CHECK(dpattn_dp_forward_clip_sensitivity(DPATTN_DP_FORWARD_REGION_ROWS,
              DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 2, 1.0, 128, &s) == DPATTN_STATUS_OK);
    CHECK(s >= 2.0 * sqrt(2.0) && s <= 2.0 * sqrt(2.0) * (1 + 4e-16));
    CHECK(dpattn_dp_forward_clip_sensitivity(DPATTN_DP_FORWARD_REGION_FROBENIUS,
              DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 9, 3.0, 5, &s) == DPATTN_STATUS_OK && s == 6.0);
    s = -1;
    CHECK(dpattn_dp_forward_clip_sensitivity(7, 0, 1, 1.0, 1, &s) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("region") && s == -1);
    CHECK(dpattn_dp_forward_clip_sensitivity(0, 0, 1, 0.0, 1, &s) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("clip_norm"));
    CHECK(dpattn_dp_forward_clip_sensitivity(0, 0, 1, 1.0, 1, NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Token neighbours only at the row-local embedding. */
    CHECK(dpattn_dp_forward_check_neighbours(DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 1,
              DPATTN_DP_FORWARD_POSITION_EMBEDDING, 0, 0) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_forward_check_neighbours(DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 1,
              DPATTN_DP_FORWARD_POSITION_ENCODER, 3, DPATTN_DP_FORWARD_SUBLAYER_FFN) == DPATTN_STATUS_UNSUPPORTED);
    CHECK(dpattn_dp_forward_check_neighbours(DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS, 0,
              DPATTN_DP_FORWARD_POSITION_EMBEDDING, 0, 0) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("neighbours"));
    CHECK(dpattn_dp_forward_check_neighbours(0, 0, DPATTN_DP_FORWARD_POSITION_ENCODER, 0, 9) ==
          DPATTN_STATUS_OUT_OF_RANGE && msg_has("sublayer"));

    /* Bad params for every params-taking query; outputs untouched. */
    p = base(4, 8);
    p.delta = 1.0;
    sigma = -3;
    CHECK(dpattn_dp_forward_noise_floor(&p, &sigma) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(sigma == -3);
    p.delta = 1e-5;
    p.epsilon = -1.0;
    CHECK(dpattn_dp_forward_sensitivity(&p, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    p.epsilon = 1.0;
    p.releases = 0;
    CHECK(dpattn_dp_forward_guarantee(&p, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("releases"));
    p.releases = 1;
    p.mode = 5;
    CHECK(dpattn_dp_forward_release_rho(&p, &rho) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("mode"));
    CHECK(dpattn_dp_forward_release_rho(NULL, &rho) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("params"));
    CHECK(dpattn_dp_forward_guarantee(&p, NULL, &d) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_epsilon"));
    /* ε so large the float sampler's support |z| ≤ 8.57 would show (about ε > 20 at
       δ = 1e-5): the C ABI runs the exact discrete Gaussian, whose support is unbounded, so
       it is accepted at its noise floor (docs/C_API.md). */
    p = base(4, 8);
    p.epsilon = 60.0;
    CHECK(dpattn_dp_forward_validate(&p) == DPATTN_STATUS_OK);
    {
        dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, NULL, 0, NULL, 0};
        double floor_ = 0;
        CHECK(dpattn_dp_forward_noise_floor(&p, &floor_) == DPATTN_STATUS_OK);
        CHECK(dpattn_dp_forward_check_factors(&p, &iid, &sigma) == DPATTN_STATUS_OK && sigma == floor_);
    }
    return 0;
}

static int factors_and_clip(void) {
    /* T3-I: ε = 1, δ = 1e-5, S = 1 (C = 0.5, Frobenius) needs σ_min(U)σ_min(V) ≥
       3.730631634815942; U = diag(f, 2f), V = diag(1, 1.5, 2). */
    dpattn_dp_forward_params p = base(2, 3);
    double floor_ = 0, rows[2], cols[3] = {1.0, 1.5, 2.0};
    size_t n = 7;
    dpattn_dp_forward_factors f = {DPATTN_DP_FORWARD_FACTORS_DIAGONAL, rows, 2, cols, 3};
    p.clip_norm = 0.5;
    CHECK(dpattn_dp_forward_noise_floor(&p, &floor_) == DPATTN_STATUS_OK);
    CHECK(rel(floor_, 3.730631634815942, 1e-12));
    rows[0] = floor_;
    rows[1] = 2 * floor_;
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_OK);
    rows[0] = floor_ * (1 - 1e-9); /* Theorem 6 fails */
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_INFEASIBLE);
    rows[0] = -1.0;
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("row_std"));
    rows[0] = NAN;
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_NON_FINITE && msg_has("row_std"));
    f.col_std_len = 2;
    rows[0] = 10.0;
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("col_std"));
    f.col_std = NULL;
    CHECK(dpattn_dp_forward_check_factors(&p, &f, &floor_) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("col_std"));
    f.kind = 9;
    CHECK(dpattn_dp_forward_scratch_len(&f, 2, 3, &n) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("kind") && n == 7);
    f.kind = DPATTN_DP_FORWARD_FACTORS_IID;
    CHECK(dpattn_dp_forward_scratch_len(&f, 2, 3, &n) == DPATTN_STATUS_OK && n == 0);
    CHECK(dpattn_dp_forward_scratch_len(NULL, 2, 3, &n) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Clip: (3, 4) normalised to C = 1 is (0.6, 0.8) up to the documented margin
       (len + 16)·2⁻⁵² (< 1e-14 here); the zero sequence stays zero. Stride 3 pads. */
    {
        double x[6] = {3.0, 4.0, 99.0, 0.0, 0.0, 99.0};
        dpattn_dp_forward_clip_report r = {0, 0, 0};
        CHECK(dpattn_dp_forward_clip_hidden(x, 6, DPATTN_DTYPE_F64, 2, 2, 3, 1,
                  DPATTN_DP_FORWARD_REGION_FROBENIUS, DPATTN_DP_FORWARD_MODE_NORMALIZE, 1.0, &r) == DPATTN_STATUS_OK);
        CHECK(fabs(x[0] - 0.6) < 1e-14 && fabs(x[1] - 0.8) < 1e-14 && x[0] * x[0] + x[1] * x[1] <= 1.0);
        CHECK(x[2] == 99.0 && x[3] == 0.0 && x[4] == 0.0 && x[5] == 99.0);
        CHECK(r.scaled == 1 && r.max_norm == 5.0);
        /* Clip mode leaves a block inside the ball alone; f32, row clipping. */
        {
            float y[4] = {0.3f, 0.4f, 30.0f, 40.0f};
            CHECK(dpattn_dp_forward_clip_hidden(y, 4, DPATTN_DTYPE_F32, 2, 2, 2, 2,
                      DPATTN_DP_FORWARD_REGION_ROWS, DPATTN_DP_FORWARD_MODE_CLIP, 1.0, &r) == DPATTN_STATUS_OK);
            CHECK(y[0] == 0.3f && y[1] == 0.4f && r.scaled == 1);
            CHECK((double)y[2] * y[2] + (double)y[3] * y[3] <= 1.0 && fabs(y[2] - 0.6f) < 1e-6);
        }
        /* A non-finite private row is sanitised to the zero row (counted privately), never
           refused. */
        {
            double z[4] = {0.3, INFINITY, 0.3, 0.4};
            CHECK(dpattn_dp_forward_clip_hidden(z, 4, DPATTN_DTYPE_F64, 2, 2, 2, 1,
                      DPATTN_DP_FORWARD_REGION_ROWS, DPATTN_DP_FORWARD_MODE_CLIP, 1.0, &r) == DPATTN_STATUS_OK);
            CHECK(z[0] == 0.0 && z[1] == 0.0 && z[2] == 0.3 && z[3] == 0.4);
            CHECK(r.private_sanitized_rows == 1 && r.scaled == 0);
        }
        /* Errors: x untouched. */
        CHECK(dpattn_dp_forward_clip_hidden(x, 6, DPATTN_DTYPE_F64, 2, 2, 3, 0, 0, 1, 1.0, &r) ==
              DPATTN_STATUS_OUT_OF_RANGE && msg_has("block_rows"));
        CHECK(dpattn_dp_forward_clip_hidden(x, 6, DPATTN_DTYPE_F64, 2, 2, 3, 1, 0, 9, 1.0, &r) ==
              DPATTN_STATUS_OUT_OF_RANGE && msg_has("mode"));
        CHECK(dpattn_dp_forward_clip_hidden(x, 6, DPATTN_DTYPE_BF16, 2, 2, 3, 1, 0, 1, 1.0, &r) ==
              DPATTN_STATUS_OUT_OF_RANGE && msg_has("dtype"));
        CHECK(dpattn_dp_forward_clip_hidden(x, 4, DPATTN_DTYPE_F64, 2, 2, 3, 1, 0, 1, 1.0, &r) ==
              DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("x"));
        CHECK(dpattn_dp_forward_clip_hidden(x, 6, DPATTN_DTYPE_F64, 2, 2, 3, 1, 0, 1, 1.0, NULL) ==
              DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_report"));
        CHECK(dpattn_dp_forward_clip_hidden(NULL, 6, DPATTN_DTYPE_F64, 2, 2, 3, 1, 0, 1, 1.0, &r) ==
              DPATTN_STATUS_NULL_ARGUMENT);
    }
    return 0;
}

#define TOK 4
#define DIM 64
#define ROWS (2 * TOK) /* two sequences */

/* One DP-Forward release of `rows` × DIM doubles (row stride DIM) on a replay session of
 * `key` at epoch 9, next stream id `stream`, charging `ledger` (NULL: nothing): exactly
 * what a live session at that position releases. Returns the session constructor's status
 * if it fails (a freed or foreign ledger). */
static dpattn_status df_at(const dpattn_key *key, uint64_t stream, dpattn_ledger *ledger, double *x,
                           size_t x_len, dpattn_dtype dtype, size_t rows,
                           const dpattn_dp_forward_params *p, const dpattn_dp_forward_factors *f,
                           double *scratch, size_t scratch_len, dpattn_dp_forward_clip_report *r) {
    dpattn_session *s = NULL;
    dpattn_status st = dpattn_session_new_for_replay(key, 9, stream, ledger, &s);
    if (st != DPATTN_STATUS_OK) return st;
    st = dpattn_dp_forward(x, x_len, dtype, rows, DIM, DIM, p, f, s, scratch, scratch_len, r);
    dpattn_session_free(s);
    return st;
}

static int hook(void) {
    /* ε = 4, C = 1, Frobenius: σ = 2C/A(4, 1e-5) = 2.16232369904 (T3-A). Zero inputs stay
       zero under normalisation, so the release is pure noise. */
    dpattn_dp_forward_params p = base(TOK, DIM);
    dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, NULL, 0, NULL, 0};
    dpattn_key k1, k2;
    dpattn_dp_forward_clip_report r;
    static double a[ROWS * DIM], b[ROWS * DIM], c[TOK * DIM];
    double sum = 0, sq = 0, sd;
    size_t i;
    p.epsilon = 4.0;
    memset(&k1, 1, sizeof k1);
    memset(&k2, 2, sizeof k2);
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(c, 0, sizeof c);
    CHECK(df_at(&k1, 5, NULL, a, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(r.scaled == 0 && r.max_norm == 0.0);
    for (i = 0; i < ROWS * DIM; i++) {
        sum += a[i];
        sq += a[i] * a[i];
    }
    /* 512 N(0, σ²) draws: the sample std is within 4.5·σ/√(2·512) ≈ 14% with overwhelming
       probability; the mean within 4.5·σ/√512 ≈ 0.43. The noise is fixed by the key, so
       these are deterministic checks of a fixed draw, not flaky ones. */
    sd = sqrt(sq / (ROWS * DIM));
    CHECK(fabs(sd / 2.16232369904 - 1.0) < 0.14);
    CHECK(fabs(sum / (ROWS * DIM)) < 0.43);
    /* The same session position (master key, epoch, stream id): identical bits. */
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* Addressable: the first sequence alone, at the same session position, equals the
       slice (noise element (r, j) is element r·DIM + j of the release's stream). */
    CHECK(df_at(&k1, 5, NULL, c, TOK * DIM, DPATTN_DTYPE_F64, TOK, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(c, a, sizeof c) == 0);
    /* Another master key, or another stream id, differs. */
    memset(b, 0, sizeof b);
    CHECK(df_at(&k2, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    memset(b, 0, sizeof b);
    CHECK(df_at(&k1, 6, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    /* A NaN in the private input is released as the zero row: the same bits as `a`. */
    memset(b, 0, sizeof b);
    b[3] = NAN;
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) == 0 && r.private_sanitized_rows == 1);
    /* Bad input: nothing written. */
    memcpy(b, a, sizeof a);
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS - 1, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("x"));
    CHECK(dpattn_dp_forward(b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, DIM, DIM, &p, &iid, NULL, NULL, 0,
              &r) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_dp_forward(b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, DIM, DIM, &p, &iid,
              (dpattn_session *)(void *)&r, NULL, 0, &r) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, NULL, NULL, 0, &r) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("factors"));
    CHECK(df_at(&k1, 5, (dpattn_ledger *)(void *)&r, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_INVALID_HANDLE && msg_has("ledger"));
    /* A session whose stream ids are used up refuses (restore it to start a new epoch). */
    CHECK(df_at(&k1, UINT64_MAX, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(msg_has("new epoch"));
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, b + 8, 4, &r) == DPATTN_STATUS_ALIASING && msg_has("scratch"));
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F16, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("dtype"));
    CHECK(memcmp(b, a, sizeof a) == 0);
    return 0;
}

static int labels_and_baselines(void) {
    static uint32_t lab[20000], lab2[20000];
    uint32_t one[4], out = 99, cand[3] = {3, 7, 9}, dup[2] = {4, 4};
    dpattn_key k;
    double keep = 0, flip = 0, e = 0, d = 0, v = 0;
    size_t i, kept = 0;
    memset(&k, 9, sizeof k);
    /* T3-J: ε₂ = ln 9 keeps a binary label with probability 0.9 exactly (1e-15 relative
       from exp/log rounding); the realised flip probability is never below 0.1. */
    CHECK(dpattn_dp_forward_rr_probabilities(log(9.0), 2, &keep, &flip) == DPATTN_STATUS_OK);
    CHECK(fabs(keep - 0.9) < 1e-14 && flip >= 0.1 * (1 - 1e-14) && flip < 0.1 + 1e-12);
    CHECK(dpattn_dp_forward_rr_probabilities(2.0, 3, &keep, &flip) == DPATTN_STATUS_OK);
    CHECK(fabs(keep - exp(2.0) / (exp(2.0) + 2.0)) < 1e-15 && fabs(keep - 0.786986) < 1e-6);
    CHECK(dpattn_dp_forward_rr_probabilities(1.0, 1, &keep, &flip) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("classes"));
    for (i = 0; i < 20000; i++) lab[i] = lab2[i] = (uint32_t)(i & 1);
    CHECK(dpattn_dp_forward_randomize_labels(lab, 20000, log(9.0), 2, &k, 3, 0) == DPATTN_STATUS_OK);
    for (i = 0; i < 20000; i++) kept += lab[i] == (i & 1);
    /* Binomial(20000, 0.9): 4.5 standard deviations = 0.0095. */
    CHECK(fabs((double)kept / 20000 - 0.9) < 0.0095);
    /* Determinism and addressability: labels 10..13 alone, from index 10. */
    for (i = 0; i < 4; i++) one[i] = (uint32_t)((10 + i) & 1);
    CHECK(dpattn_dp_forward_randomize_labels(one, 4, log(9.0), 2, &k, 3, 10) == DPATTN_STATUS_OK);
    CHECK(memcmp(one, lab + 10, sizeof one) == 0);
    CHECK(dpattn_dp_forward_randomize_labels(lab2, 20000, log(9.0), 2, &k, 4, 0) == DPATTN_STATUS_OK);
    CHECK(memcmp(lab, lab2, sizeof lab) != 0); /* another stream differs */
    /* A label ≥ classes: nothing changes. */
    one[0] = 0; one[1] = 5; one[2] = 1; one[3] = 0;
    CHECK(dpattn_dp_forward_randomize_labels(one, 4, 1.0, 2, &k, 0, 0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("label"));
    CHECK(one[0] == 0 && one[1] == 5 && one[2] == 1 && one[3] == 0);
    CHECK(dpattn_dp_forward_randomize_labels(one, 4, 0.0, 2, &k, 0, 0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_dp_forward_randomize_labels(NULL, 4, 1.0, 2, &k, 0, 0) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("labels"));
    CHECK(dpattn_dp_forward_randomize_labels(one, 4, 1.0, 2, NULL, 0, 0) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));

    CHECK(dpattn_dp_forward_randomize_label_in(7, cand, 3, 2.0, &k, 0, 5, &out) == DPATTN_STATUS_OK);
    CHECK(out == 3 || out == 7 || out == 9);
    {
        uint32_t again = 0;
        CHECK(dpattn_dp_forward_randomize_label_in(7, cand, 3, 2.0, &k, 0, 5, &again) == DPATTN_STATUS_OK && again == out);
    }
    out = 99;
    CHECK(dpattn_dp_forward_randomize_label_in(4, dup, 2, 2.0, &k, 0, 0, &out) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("candidates") && out == 99);
    CHECK(dpattn_dp_forward_randomize_label_in(4, cand, 0, 2.0, &k, 0, 0, &out) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_dp_forward_randomize_label_in(4, cand, 3, 2.0, &k, 0, 0, NULL) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Theorem 4: (ε₁ + ε₂, δ). */
    CHECK(dpattn_dp_forward_full_ldp_budget(1.0, 1e-5, 2.0, &e, &d) == DPATTN_STATUS_OK && e == 3.0 && d == 1e-5);
    CHECK(dpattn_dp_forward_full_ldp_budget(1.0, 1.5, 2.0, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_dp_forward_full_ldp_budget(1.0, 1e-5, -2.0, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));

    /* T3-H: MVG std at n = 128, d = 768, ε = 8, S = γ = 1 is 2.13903e7 (6 digits). */
    CHECK(dpattn_dp_forward_mvg_iid_std(8.0, 1e-5, 128, 768, 1.0, 1.0, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 2.13903e7, 5e-6));
    CHECK(dpattn_dp_forward_mvg_iid_std(8.0, 1e-5, 0, 768, 1.0, 1.0, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_dp_forward_mvg_iid_std(8.0, 1e-5, 1, 1, 1.0, -1.0, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("gamma"));

    /* Spectral bound: diag(3, 4) → 4 (√(‖W‖₁‖W‖∞) is exact); the all-ones 2×2 → 2; a
       strided 1×3 row (1, 2, 2) → its norm 3. */
    {
        double w[4] = {3, 0, 0, 4}, ones[4] = {1, 1, 1, 1}, row[5] = {1, 2, 2, NAN, NAN};
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(w, 4, 2, 2, 2, &v) == DPATTN_STATUS_OK && v == 4.0);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(ones, 4, 2, 2, 2, &v) == DPATTN_STATUS_OK && v == 2.0);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(row, 3, 1, 3, 5, &v) == DPATTN_STATUS_OK && v == 3.0);
        v = -1;
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(row, 5, 1, 4, 5, &v) == DPATTN_STATUS_NON_FINITE);
        CHECK(msg_has("w") && v == -1);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(w, 3, 2, 2, 2, &v) == DPATTN_STATUS_BUFFER_TOO_SHORT);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(w, 4, 0, 2, 2, &v) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(w, 4, 2, 2, 1, &v) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(dpattn_dp_forward_spectral_norm_upper_bound(NULL, 4, 2, 2, 2, &v) == DPATTN_STATUS_NULL_ARGUMENT);
    }
    return 0;
}

/* The hook with ledgers: a zCDP ledger is charged the ρ of dpattn_dp_forward_release_rho,
   an approximate one the (ε, δ) of dpattn_dp_forward_guarantee (one-release plans only);
   a too-small ledger refuses the release and nothing is written. */
static int hook_with_ledger(void) {
    dpattn_dp_forward_params p = base(TOK, DIM);
    dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, NULL, 0, NULL, 0};
    dpattn_dp_forward_clip_report r = {77, 7.0, 77};
    const dpattn_privacy_unit sequence = {DPATTN_UNIT_SEQUENCE, 0}, token = {DPATTN_UNIT_TOKENS, 1};
    dpattn_ledger *z = NULL, *ap = NULL, *tiny = NULL, *other = NULL;
    dpattn_amount spent;
    dpattn_key k1;
    static double a[ROWS * DIM], b[ROWS * DIM];
    double rho = 0, e = 0, d = 0;
    uint64_t n = 9;
    size_t live = dpattn_live_handle_count();
    p.epsilon = 4.0;
    memset(&k1, 1, sizeof k1);
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    CHECK(dpattn_dp_forward_release_rho(&p, &rho) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_forward_guarantee(&p, &e, &d) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_new_zcdp(sequence, 10.0, &z) == DPATTN_STATUS_OK);
    CHECK(df_at(&k1, 5, z, a, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_spent(z, &spent) == DPATTN_STATUS_OK);
    CHECK(spent.kind == DPATTN_AMOUNT_ZCDP && spent.rho == rho);
    /* The same release as without a ledger. */
    CHECK(df_at(&k1, 5, NULL, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(dpattn_ledger_new_approx(sequence, 8.0, 1e-4, &ap) == DPATTN_STATUS_OK);
    CHECK(df_at(&k1, 6, ap, a, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_spent(ap, &spent) == DPATTN_STATUS_OK);
    CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == e && spent.delta == d);
    /* A plan of two releases cannot be charged per release on an approximate ledger. */
    p.releases = 2;
    memcpy(b, a, sizeof a);
    CHECK(df_at(&k1, 7, ap, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_UNSUPPORTED);
    CHECK(memcmp(a, b, sizeof a) == 0);
    p.releases = 1;
    /* Over budget: refused, x, the report and the ledger untouched. */
    CHECK(dpattn_ledger_new_zcdp(sequence, 1e-3, &tiny) == DPATTN_STATUS_OK);
    r.scaled = 77;
    CHECK(df_at(&k1, 8, tiny, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_INFEASIBLE);
    CHECK(memcmp(a, b, sizeof a) == 0 && r.scaled == 77);
    CHECK(dpattn_ledger_charges(tiny, &n) == DPATTN_STATUS_OK && n == 0);
    dpattn_ledger_free(tiny);
    CHECK(df_at(&k1, 8, tiny, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_INVALID_HANDLE && msg_has("ledger"));
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* A ledger for one token: the sequence-level plan protects whole sequences, refused;
       the token-level plan for groups of 2 rows covers one token, accepted. */
    CHECK(dpattn_ledger_new_approx(token, 100.0, 1e-2, &other) == DPATTN_STATUS_OK);
    CHECK(df_at(&k1, 8, other, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_UNIT_MISMATCH);
    CHECK(msg_has("one sequence") && memcmp(a, b, sizeof a) == 0 && r.scaled == 77);
    CHECK(dpattn_ledger_charges(other, &n) == DPATTN_STATUS_OK && n == 0);
    p.neighbours = DPATTN_DP_FORWARD_NEIGHBOURS_TOKENS;
    p.neighbour_rows = 2;
    CHECK(df_at(&k1, 8, other, b, ROWS * DIM, DPATTN_DTYPE_F64, ROWS, &p, &iid, NULL, 0, &r) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charges(other, &n) == DPATTN_STATUS_OK && n == 1);
    dpattn_ledger_free(other);
    dpattn_ledger_free(ap);
    dpattn_ledger_free(z);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

int dpattn_c_dp_forward(void) {
    int line;
    if ((line = params_and_calibration()) != 0) return line;
    if ((line = factors_and_clip()) != 0) return line;
    if ((line = hook()) != 0) return line;
    if ((line = hook_with_ledger()) != 0) return line;
    return labels_and_baselines();
}
