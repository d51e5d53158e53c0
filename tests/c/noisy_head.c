/*
 * NoisyHead (paper 004) through the C ABI: presets against the reference values of docs/PAPERS.md
 * §4.10 and closed forms recomputed here, the release (determinism, bounds, bad input), the linear
 * attention head, features, training helpers, schedules and simulation helpers. Returns 0 on
 * success or the line of the first failed check.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int rel(double a, double b, double tol) { return fabs(a / b - 1.0) <= tol; }

/* Field-by-field equality (the struct has padding after `iters` and `accounting`, whose
 * bytes the library leaves unspecified, so memcmp would compare garbage). */
static int same_params(const dpattn_noisy_head_params *a, const dpattn_noisy_head_params *b) {
    return a->d == b->d && a->l == b->l && a->n == b->n && a->lambda == b->lambda &&
           a->eta0 == b->eta0 && a->iters == b->iters && a->clip_c == b->clip_c &&
           a->proj_g == b->proj_g && a->proj_r == b->proj_r && a->sigma == b->sigma &&
           a->epsilon == b->epsilon && a->delta == b->delta && a->accounting == b->accounting;
}

static int presets(void) {
    dpattn_noisy_head_params p, q;
    dpattn_noisy_head_radii r;
    dpattn_noisy_head_diagnostics dg;
    double c, g, sm = 0, sens = 0, s = 0, e = 0, d = 0, rho = -1, risk = 0, best_risk = 0;
    uint32_t it = 0, best = 0;
    /* T4-A (checks P4-U3, P4-U4), low-dim N = 1000, ε = 1: D = 5, L = 31, T = 44,
       s = 1.6880798479843007. */
    CHECK(dpattn_noisy_head_params_low_dim(1000, 1.0, &p) == DPATTN_STATUS_OK);
    CHECK(p.d == 5 && p.l == 31 && p.iters == 44 && p.lambda == 5.0 && p.delta == 1e-5);
    CHECK(p.accounting == DPATTN_NOISY_HEAD_ACCOUNTING_PAPER);
    /* Closed forms (κ = 1, τ² = 0, proof G): C = √(2 ln NL), G = C/√L·(1 + (ln N/D²)^¼),
       η0 = 0.95·(2/3)·λ/(λ + G²)², σ = 2G(C + RG). Only libm rounding differs: 1e-12. */
    c = sqrt(2.0 * log(1000.0 * 31.0));
    g = c / sqrt(31.0) * (1.0 + pow(log(1000.0) / 25.0, 0.25));
    CHECK(rel(p.clip_c, c, 1e-12) && rel(p.clip_c, 4.547909955895627, 1e-12));
    CHECK(rel(p.proj_g, g, 1e-12) && rel(p.proj_g, 1.4090448880154893, 1e-12));
    CHECK(rel(p.proj_r, 23.494860120883494, 1e-12));
    CHECK(rel(p.eta0, 0.95 * (2.0 / 3.0) * 5.0 / ((5.0 + g * g) * (5.0 + g * g)), 1e-12));
    CHECK(rel(p.sigma, 2.0 * g * (c + p.proj_r * g), 1e-12));
    CHECK(dpattn_noisy_head_validate(&p) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head_calibration(&p, &sm, &sens, &s) == DPATTN_STATUS_OK);
    CHECK(rel(s, 1.6880798479843007, 1e-12));
    /* s = η0·T·σ·√(2 ln(1.25T/δ))/(εN): the classical mechanism at (ε/T, δ/T). */
    CHECK(rel(s, p.eta0 * 44 * p.sigma * sqrt(2.0 * log(1.25 * 44 / 1e-5)) / 1000.0, 1e-12));
    CHECK(rel(sm, p.sigma, 1e-12) && rel(sens, p.eta0 * sm / 1000.0, 1e-12));
    CHECK(dpattn_noisy_head_radii_theorem41(1000, 31, 5, 5.0, 0.0, 1.0, DPATTN_NOISY_HEAD_GFORM_PROOF, 1.0, &r) == DPATTN_STATUS_OK);
    CHECK(r.c == p.clip_c && r.g == p.proj_g && r.r == p.proj_r);
    CHECK(dpattn_noisy_head_radii_theorem41(1000, 31, 5, 5.0, 0.0, 1.0, DPATTN_NOISY_HEAD_GFORM_THEOREM41, 1.0, &r) == DPATTN_STATUS_OK);
    CHECK(rel(r.g, c / sqrt(31.0) * (1.0 + sqrt(log(1000.0)) / 5.0), 1e-12));
    CHECK(dpattn_noisy_head_radii_theorem41(1000, 31, 5, 5.0, 0.0, 2.0, 1, 1.0, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("kappa"));
    CHECK(dpattn_noisy_head_radii_theorem41(1000, 31, 5, 5.0, 0.0, 1.0, 4, 1.0, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("gform"));
    CHECK(dpattn_noisy_head_charge(&p, &e, &d, &rho) == DPATTN_STATUS_OK && e == 1.0 && d == 1e-5 && rho == 0.0);
    CHECK(dpattn_noisy_head_get_diagnostics(&p, &dg) == DPATTN_STATUS_OK);
    CHECK(dg.contraction == 1.0 - 2.0 * 5.0 * p.eta0 && dg.eta0_in_theorem_interval == 0); /* P4-6 */
    /* T4-C: mean-field excess risk 0.7339 at N = 1000, ε = 1, c0 = 0.1 (4 digits). */
    CHECK(dpattn_noisy_head_mean_field(&p, 0.1, 0.0, 0, &risk, &best, &best_risk) == DPATTN_STATUS_OK);
    CHECK(rel(risk, 0.7339, 1e-3) && best == 0 && best_risk == 0.0);
    /* T4-D: early-stopping preset, c0 = 0.1 → best T = 141 (grid) ±3. */
    CHECK(dpattn_noisy_head_params_early_stopping(1000, 1, 0.8, &q) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head_mean_field(&q, 0.1, 0.0, 481, &risk, &best, &best_risk) == DPATTN_STATUS_OK);
    CHECK(best >= 138 && best <= 144 && best_risk > 0);
    /* zCDP accounting (our extension): far less noise, charged ρ > 0. */
    q = p;
    q.accounting = DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP;
    CHECK(dpattn_noisy_head_calibration(&q, &sm, &sens, &e) == DPATTN_STATUS_OK && e < s / 5);
    CHECK(dpattn_noisy_head_charge(&q, &e, &d, &rho) == DPATTN_STATUS_OK && rho > 0);

    /* Other presets: low-dim N = 4000 (L = 63, T = 39, σ = 107.87125561363094); early
       stopping N = 400 (D = L = 20, η0 = 2.8478920952431833e-4); high-dim N = 400
       (D = L = 20, λ = N/D = 20, T = 5); robustness (5000, 500, 0.5): D = 5, λ = 0.01,
       δ = 1e-2, T = ⌊ln 5000⌋ = 8, R = 0.1·C²·√(N/L). */
    CHECK(dpattn_noisy_head_params_low_dim(4000, 1.0, &q) == DPATTN_STATUS_OK);
    CHECK(q.l == 63 && q.iters == 39 && rel(q.sigma, 107.87125561363094, 1e-12));
    CHECK(dpattn_noisy_head_params_early_stopping(400, 51, 0.8, &q) == DPATTN_STATUS_OK);
    CHECK(q.d == 20 && q.l == 20 && q.iters == 51 && rel(q.eta0, 2.8478920952431833e-4, 1e-12));
    CHECK(dpattn_noisy_head_params_high_dim(400, 1.0, 1e-2, &q) == DPATTN_STATUS_OK);
    CHECK(q.d == 20 && q.l == 20 && q.lambda == 20.0 && q.iters == 5 && q.delta == 1e-2);
    CHECK(dpattn_noisy_head_params_robustness(5000, 500, 0.5, &q) == DPATTN_STATUS_OK);
    CHECK(q.d == 5 && q.lambda == 0.01 && q.delta == 1e-2 && q.iters == 8);
    CHECK(rel(q.proj_r, 0.1 * q.clip_c * q.clip_c * sqrt(10.0), 1e-12));

    /* Bad input: outputs untouched. */
    q = p;
    CHECK(dpattn_noisy_head_params_low_dim(1, 1.0, &q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("n"));
    CHECK(dpattn_noisy_head_params_low_dim(1000, 50.0, &q) == DPATTN_STATUS_INFEASIBLE); /* ε/T ≥ 1 */
    CHECK(dpattn_noisy_head_params_high_dim(400, 1.0, 1.0, &q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_noisy_head_params_early_stopping(400, 0, 0.8, &q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("iters"));
    CHECK(dpattn_noisy_head_params_robustness(2, 1, 0.5, &q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("n"));
    CHECK(dpattn_noisy_head_params_robustness(5000, 500, 0.5, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    CHECK(same_params(&q, &p)); /* field by field: memcmp would read padding bytes */
    q.sigma = p.sigma * 0.99; /* Theorem 3.2 needs σ ≥ 2G(C + RG) */
    CHECK(dpattn_noisy_head_validate(&q) == DPATTN_STATUS_INFEASIBLE);
    q = p;
    q.accounting = 3;
    CHECK(dpattn_noisy_head_validate(&q) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("accounting"));
    q = p;
    q.epsilon = NAN;
    CHECK(dpattn_noisy_head_calibration(&q, &sm, &sens, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_noisy_head_charge(&q, &e, &d, &rho) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_noisy_head_get_diagnostics(NULL, &dg) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_noisy_head_mean_field(&p, -1.0, 0.0, 0, &risk, &best, &best_risk) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("c0"));

    /* Schedules: T = ⌊2.5 ln N/ln(1/(1 − η0λ))⌋ = 44 (T4-A); Thm 4.2 forms by hand. */
    CHECK(dpattn_noisy_head_schedule_iters(0, 1000, 0, 0, 0, 0.06489613892943313, 5.0, &it) == DPATTN_STATUS_OK && it == 44);
    CHECK(dpattn_noisy_head_schedule_iters(1, 1000, 31, 5, 0, 0.05, 5.0, &it) == DPATTN_STATUS_OK);
    CHECK(it == (uint32_t)ceil(log(1e6 * 31 * 125) / -log(1 - 0.25)));
    CHECK(dpattn_noisy_head_schedule_iters(2, 0, 0, 0, 1000.0, 0.05, 5.0, &it) == DPATTN_STATUS_OK);
    CHECK(it == (uint32_t)ceil(log(1000.0) / -log(0.75)));
    CHECK(dpattn_noisy_head_schedule_iters(2, 0, 0, 0, 1.0, 0.05, 5.0, &it) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("r"));
    CHECK(dpattn_noisy_head_schedule_iters(9, 0, 0, 0, 2.0, 0.05, 5.0, &it) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("which"));
    CHECK(dpattn_noisy_head_expected_z_norm_sq(1, 3, 0.5, &e) == DPATTN_STATUS_OK && e == 1.5);
    CHECK(dpattn_noisy_head_expected_z_norm_sq(4, 3, 0.0, &e) == DPATTN_STATUS_OK && fabs(e - (0.25 + 3.0 / 12.0)) < 1e-15);
    CHECK(dpattn_noisy_head_expected_z_norm_sq(0, 3, 0.0, &e) == DPATTN_STATUS_OUT_OF_RANGE);
    return 0;
}

static int head_and_features(void) {
    /* D = 2, L = 1: E = [[x; y], [q; 0]] with x = (1, 2), y = 3, q = (0.5, −1), stored
       with row stride 3 (the third column is padding). */
    double e[9] = {1.0, 0.5, 77, 2.0, -1.0, 77, 3.0, 0.0, 77};
    double gamma[4] = {0.1, 0.2, 0.3, 0.4}, pv[9], kq[9], out[6], scr[64], cx[2], cy[1], qx[2];
    double u[2] = {0.5, -1.0}, v[2] = {3.0, 6.0}, y = 0, expect;
    size_t n = 0;
    /* ŷ = uᵀΓv = Σ u_i Γ_ij v_j by hand. */
    expect = 0.5 * (0.1 * 3 + 0.2 * 6) - 1.0 * (0.3 * 3 + 0.4 * 6);
    CHECK(dpattn_noisy_head_predict(gamma, 4, u, 2, v, 2, &y) == DPATTN_STATUS_OK && fabs(y - expect) < 1e-15);
    CHECK(dpattn_noisy_head_predict(gamma, 3, u, 2, v, 2, &y) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("gamma"));
    /* Export: W^{PV} = e_{D}e_{D}ᵀ, W^{KQ}_11 = Γᵀ (P4-1). */
    CHECK(dpattn_noisy_head_export_attention(pv, 9, kq, 9, gamma, 4, 2) == DPATTN_STATUS_OK);
    CHECK(pv[8] == 1.0 && pv[0] == 0.0 && kq[0] == 0.1 && kq[1] == 0.3 && kq[3] == 0.2 && kq[4] == 0.4 && kq[8] == 0.0);
    CHECK(dpattn_noisy_head_export_attention(pv, 9, kq, 8, gamma, 4, 2) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("w_kq"));
    CHECK(dpattn_noisy_head_export_attention(pv, 9, pv, 9, gamma, 4, 2) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_noisy_head_linear_attention_head_scratch_len(3, 2, &n) == DPATTN_STATUS_OK && n == 2 * 6 + 4);
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 9, kq, 9, scr, n) == DPATTN_STATUS_OK);
    /* The head's prediction out[D][L] equals uᵀΓv with v = y·x/L (1e-14: a few roundings). */
    CHECK(fabs(out[5] - expect) < 1e-14);
    CHECK(out[0] == 1.0 && out[1] == 0.5); /* only the label row changes: W^{PV} has one 1 */
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 9, kq, 9, scr, n - 1) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    e[2] = NAN; /* padding is not read */
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 9, kq, 9, scr, n) == DPATTN_STATUS_OK);
    e[0] = NAN;
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 9, kq, 9, scr, n) == DPATTN_STATUS_NON_FINITE && msg_has("e"));
    e[0] = 1.0;
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 4, kq, 9, scr, n) == DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 7, 3, 2, 3, pv, 9, kq, 9, scr, n) == DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("e"));
    CHECK(dpattn_noisy_head_linear_attention_head(out, 6, 2, e, 9, 3, 2, 3, pv, 9, kq, 9, out, 6) == DPATTN_STATUS_ALIASING);
    /* Embedding → flat prompt. */
    CHECK(dpattn_noisy_head_prompt_from_embedding(cx, 2, cy, 1, qx, 2, e, 9, 3, 2, 3) == DPATTN_STATUS_OK);
    CHECK(cx[0] == 1.0 && cx[1] == 2.0 && cy[0] == 3.0 && qx[0] == 0.5 && qx[1] == -1.0);
    CHECK(dpattn_noisy_head_prompt_from_embedding(cx, 1, cy, 1, qx, 2, e, 9, 3, 2, 3) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("ctx_x"));
    CHECK(dpattn_noisy_head_prompt_from_embedding(cx, 2, cy, 1, qx, 2, e, 9, 1, 2, 3) == DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_noisy_head_prompt_from_embedding(cx, 2, cy, 1, qx, 2, NULL, 9, 3, 2, 3) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Features of one prompt (D = 2, L = 1): x = (1, 0), y = 10, query (0, 1), target −7.
       Raw: u = q, v = y·x, t = −7. Private with C = 3, G = 2: y clipped to 3, ‖Z‖ = 3 > 2 so
       v is scaled to norm 2 minus the (2D + 8)·2⁻⁵² margin; t = −3. */
    {
        double px[2] = {1, 0}, py[1] = {10}, pq[2] = {0, 1}, pt[1] = {-7}, fu[2], fv[2], ft[1];
        dpattn_noisy_head_prompts pr = {1, 1, 2, px, 2, py, 1, pq, 2, pt, 1};
        CHECK(dpattn_noisy_head_raw_features(fu, 2, fv, 2, ft, 1, &pr) == DPATTN_STATUS_OK);
        CHECK(fu[0] == 0 && fu[1] == 1 && fv[0] == 10 && fv[1] == 0 && ft[0] == -7);
        CHECK(dpattn_noisy_head_private_features(fu, 2, fv, 2, ft, 1, &pr, 3.0, 2.0) == DPATTN_STATUS_OK);
        CHECK(fu[0] == 0 && fu[1] == 1 && ft[0] == -3 && fv[0] <= 2.0 && fv[0] > 2.0 - 1e-14 && fv[1] == 0);
        py[0] = NAN; /* never an error: a NaN label counts as 0 */
        CHECK(dpattn_noisy_head_private_features(fu, 2, fv, 2, ft, 1, &pr, 3.0, 2.0) == DPATTN_STATUS_OK);
        CHECK(fv[0] == 0 && fv[1] == 0);
        CHECK(dpattn_noisy_head_private_features(fu, 2, fv, 2, ft, 1, &pr, 0.0, 2.0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("clip_c"));
        CHECK(dpattn_noisy_head_private_features(fu, 2, fv, 1, ft, 1, &pr, 3.0, 2.0) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("v"));
        pr.ctx_x_len = 3;
        CHECK(dpattn_noisy_head_raw_features(fu, 2, fv, 2, ft, 1, &pr) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("ctx_x"));
        CHECK(dpattn_noisy_head_raw_features(fu, 2, fv, 2, ft, 1, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("prompts"));
    }
    return 0;
}

static int iter_calls;
static void on_iter(void *user, uint32_t t, const double *g, size_t len) {
    double *trace = (double *)user;
    if (len == 1 && t >= 1 && t <= 8) trace[t - 1] = g[0];
    iter_calls++;
}

static int training(void) {
    /* N = 2, D = 1: z = u·v = (1, 2), t = (1, 3). */
    double fu[2] = {1, 1}, fv[2] = {1, 2}, ft[2] = {1, 3}, g0[1] = {0.25}, out[1], scr[8], trace[8];
    double h[1], b[1], gs[1], er = -1, mse = -1, ref;
    dpattn_noisy_head_features f = {2, 1, fu, 2, fv, 2, ft, 2};
    int t;
    /* One step: (1 − 2λη)γ − (η/N)Σ(zγ − t)z with λ = 0.1, η = 0.2. */
    CHECK(dpattn_noisy_head_gradient_step(out, 1, g0, 1, &f, 0.1, 0.2) == DPATTN_STATUS_OK);
    ref = (1 - 0.04) * 0.25 - 0.1 * ((0.25 - 1) * 1 + (0.5 - 3) * 2);
    CHECK(fabs(out[0] - ref) < 1e-15);
    CHECK(dpattn_noisy_head_gradient_step(out, 1, g0, 1, &f, -0.1, 0.2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("lambda"));
    CHECK(dpattn_noisy_head_gradient_step(out, 1, out, 1, &f, 0.1, 0.2) == DPATTN_STATUS_ALIASING);
    /* Gram: H = mean z² = 2.5, b = mean t·z = 3.5. */
    CHECK(dpattn_noisy_head_gram_build(h, 1, b, 1, &f) == DPATTN_STATUS_OK && h[0] == 2.5 && b[0] == 3.5);
    CHECK(dpattn_noisy_head_gram_build(h, 2, b, 1, &f) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("h"));
    /* 8 noiseless steps, both forms, against the recursion by hand (1e-14). */
    for (t = 0; t < 2; t++) {
        double gam = 0.25;
        int k;
        iter_calls = 0;
        CHECK(dpattn_noisy_head_train_nonprivate(out, 1, g0, 1, &f, 0.1, 0.2, 8, (uint32_t)t, scr, 8, on_iter, trace) == DPATTN_STATUS_OK);
        CHECK(iter_calls == 8);
        for (k = 0; k < 8; k++) {
            gam = (1 - 0.04) * gam - 0.1 * ((gam - 1) * 1 + (2 * gam - 3) * 2);
            CHECK(fabs(trace[k] - gam) < 1e-14);
        }
        CHECK(fabs(out[0] - gam) < 1e-14);
    }
    CHECK(dpattn_noisy_head_train_nonprivate(out, 1, g0, 1, &f, 0.1, 0.2, 8, 0, scr, 1, NULL, NULL) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_noisy_head_train_nonprivate(out, 1, g0, 1, &f, 0.1, 0.2, 8, 5, scr, 8, NULL, NULL) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("form"));
    CHECK(dpattn_noisy_head_train_nonprivate(out, 1, g0, 1, &f, 0.1, 0.0, 8, 0, scr, 8, NULL, NULL) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("eta0"));
    /* Ridge (allocates): γ* = Σ t z/(λN + Σ z²) = 7/(0.5·2 + 5) = 7/6 (doc example). */
    CHECK(dpattn_noisy_head_ridge(gs, 1, &f, 0.5, DPATTN_NOISY_HEAD_RIDGE_CHOLESKY) == DPATTN_STATUS_OK && fabs(gs[0] - 7.0 / 6.0) < 1e-14);
    CHECK(dpattn_noisy_head_ridge(gs, 1, &f, 0.5, DPATTN_NOISY_HEAD_RIDGE_QR) == DPATTN_STATUS_OK && fabs(gs[0] - 7.0 / 6.0) < 1e-14);
    CHECK(dpattn_noisy_head_ridge(gs, 1, &f, -1.0, 0) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("lambda"));
    CHECK(dpattn_noisy_head_ridge(gs, 1, &f, 0.5, 2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("solver"));
    CHECK(dpattn_noisy_head_ridge(gs, 2, &f, 0.5, 0) == DPATTN_STATUS_SHAPE_MISMATCH);
    /* Risks: ⟨Γ̂ − Γ*, Z⟩² and (⟨Γ̂, Z⟩ − t)² averaged. */
    {
        double gh[1] = {1.0};
        CHECK(dpattn_noisy_head_risks(gh, 1, gs, 1, &f, &er, &mse) == DPATTN_STATUS_OK);
        CHECK(fabs(er - 0.5 * ((1 - 7.0 / 6) * (1 - 7.0 / 6) * (1 + 4))) < 1e-15);
        CHECK(fabs(mse - 0.5 * (0 + 1)) < 1e-15);
        CHECK(dpattn_noisy_head_risks(gh, 2, gs, 1, &f, &er, &mse) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("gamma_hat"));
        f.t_len = 1;
        CHECK(dpattn_noisy_head_risks(gh, 1, gs, 1, &f, &er, &mse) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("t"));
    }
    return 0;
}

static int release(void) {
    dpattn_noisy_head_params p;
    dpattn_key k1, k2;
    dpattn_session *s = NULL, *s2 = NULL;
    dpattn_privacy_unit prompt = {DPATTN_UNIT_PROMPT, 0};
    size_t n, l, d, need = 0, i;
    double *x, *y, *q, *t, *scr, g0[25] = {0}, a[25], b[25], c[25], x1[31 * 5], y1[31], q1[5], t1[1], norm = 0;
    dpattn_noisy_head_prompts pr;
    uint64_t epoch = 9, next = 9;
    int ok = 0;
    size_t live = dpattn_live_handle_count();
    memset(&k1, 1, sizeof k1);
    memset(&k2, 2, sizeof k2);
    CHECK(dpattn_noisy_head_params_low_dim(1000, 1.0, &p) == DPATTN_STATUS_OK);
    n = p.n; l = p.l; d = p.d;
    x = malloc(n * l * d * sizeof *x); y = malloc(n * l * sizeof *y);
    q = malloc(n * d * sizeof *q); t = malloc(n * sizeof *t);
    CHECK(dpattn_noisy_head_scratch_len(&p, DPATTN_NOISY_HEAD_FORM_STREAMING, &need) == DPATTN_STATUS_OK);
    CHECK(need == n * (2 * d + 1) + d * d + 2 * d * d);
    CHECK(dpattn_noisy_head_scratch_len(&p, DPATTN_NOISY_HEAD_FORM_GRAM, &need) == DPATTN_STATUS_OK);
    CHECK(need == n * (2 * d + 1) + d * d + 2 * d * d + d * d * d * d + d * d);
    scr = malloc(need * sizeof *scr);
    if (!x || !y || !q || !t || !scr) goto done;
    CHECK(dpattn_noisy_head_generate_prompts(x, n * l * d, y, n * l, q, n * d, t, n, n, l, d, 0.0, &k1, 0, 0) == DPATTN_STATUS_OK);
    /* Queries on the unit sphere (1e-12); prompt 11 alone equals the 12th of the draw. */
    for (i = 0; i < d; i++) norm += q[i] * q[i];
    CHECK(fabs(norm - 1.0) < 1e-12);
    CHECK(dpattn_noisy_head_generate_prompts(x1, l * d, y1, l, q1, d, t1, 1, 1, l, d, 0.0, &k1, 0, 11) == DPATTN_STATUS_OK);
    CHECK(memcmp(x1, x + 11 * l * d, sizeof x1) == 0 && t1[0] == t[11]);
    CHECK(dpattn_noisy_head_generate_prompts(x1, l * d, y1, l, q1, d, t1, 1, 1, l, d, -1.0, &k1, 0, 11) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("tau"));
    pr.n = n; pr.l = l; pr.d = d;
    pr.ctx_x = x; pr.ctx_x_len = n * l * d; pr.ctx_y = y; pr.ctx_y_len = n * l;
    pr.query_x = q; pr.query_x_len = n * d; pr.query_y = t; pr.query_y_len = n;
    /* A replay session (master key k2, epoch 0, next stream 0, no ledger) so that releases
       can be reissued bit for bit below. */
    CHECK(dpattn_session_new_for_replay(&k2, 0, 0, NULL, &s) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head(a, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, s, scr, need) == DPATTN_STATUS_OK);
    /* Γ̂ lies in the R-ball; the used scratch was zeroed (it held private summaries). */
    norm = 0;
    for (i = 0; i < 25; i++) norm += a[i] * a[i];
    CHECK(sqrt(norm) <= p.proj_r && norm > 0);
    for (i = 0; i < need; i++) CHECK(scr[i] == 0.0);
    /* The release used stream 0; the next one draws stream 1: other noise. */
    CHECK(dpattn_session_position(s, &epoch, &next) == DPATTN_STATUS_OK && epoch == 0 && next == 1);
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, s, scr, need) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    /* The same (key, epoch, stream) again: identical bits; the streaming form is the same
       function (≈1e-15 relative, amplified by at most T = 44 contracting steps: 1e-9
       absolute is ample). */
    CHECK(dpattn_session_new_for_replay(&k2, 0, 0, NULL, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, s2, scr, need) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    dpattn_session_free(s2);
    CHECK(dpattn_session_new_for_replay(&k2, 0, 0, NULL, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_STREAMING, s2, scr, need) == DPATTN_STATUS_OK);
    for (i = 0; i < 25; i++) CHECK(fabs(c[i] - a[i]) < 1e-9);
    dpattn_session_free(s2);
    /* Another master key, or another epoch of the same one: other noise. */
    CHECK(dpattn_session_new_for_replay(&k1, 0, 0, NULL, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, s2, scr, need) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    dpattn_session_free(s2);
    CHECK(dpattn_session_new_for_replay(&k2, 1, 0, NULL, &s2) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, s2, scr, need) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    dpattn_session_free(s2);
    /* With a ledger: the same release, charged what dpattn_noisy_head_charge reports
       ((ε, δ) under paper accounting; under zCDP accounting ρ on a zCDP ledger and the
       (ε, δ) it converts to on an approximate one); a too-small ledger or one kept for
       another unit refuses it and out stays untouched. */
    {
        dpattn_ledger *ap = NULL, *z = NULL, *tiny = NULL, *rec = NULL;
        dpattn_session *sa = NULL, *sz = NULL, *st = NULL, *sr = NULL;
        dpattn_privacy_unit record = {DPATTN_UNIT_RECORD, 0};
        dpattn_amount spent;
        double ce = 0, cd = 0, cr = -1;
        uint64_t charges = 9;
        CHECK(p.accounting == DPATTN_NOISY_HEAD_ACCOUNTING_PAPER);
        CHECK(dpattn_noisy_head_charge(&p, &ce, &cd, &cr) == DPATTN_STATUS_OK && cr == 0.0);
        CHECK(ce == 1.0 && cd == 1e-5);
        CHECK(dpattn_ledger_new_approx(prompt, 3.0, 1e-4, &ap) == DPATTN_STATUS_OK);
        /* A replay session with a ledger reissues the release above and charges it. */
        CHECK(dpattn_session_new_for_replay(&k2, 0, 0, ap, &sa) == DPATTN_STATUS_OK);
        CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, sa, scr, need) == DPATTN_STATUS_OK);
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(dpattn_ledger_spent(ap, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == ce && spent.delta == cd);
        p.accounting = DPATTN_NOISY_HEAD_ACCOUNTING_ZCDP;
        CHECK(dpattn_noisy_head_charge(&p, &ce, &cd, &cr) == DPATTN_STATUS_OK && cr > 0);
        CHECK(ce == 1.0 && cd == 1e-5);
        /* A session with a key from the operating system. */
        CHECK(dpattn_ledger_new_zcdp(prompt, 1.0, &z) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(z, &sz) == DPATTN_STATUS_OK);
        CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, sz, scr, need) == DPATTN_STATUS_OK);
        norm = 0;
        for (i = 0; i < 25; i++) norm += c[i] * c[i];
        CHECK(sqrt(norm) <= p.proj_r && norm > 0);
        CHECK(dpattn_ledger_spent(z, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_ZCDP && spent.rho == cr);
        CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, sa, scr, need) == DPATTN_STATUS_OK);
        CHECK(dpattn_ledger_spent(ap, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == 2 * ce && spent.delta == 2 * cd);
        memset(c, 0, sizeof c);
        CHECK(dpattn_ledger_new_zcdp(prompt, cr / 2, &tiny) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(tiny, &st) == DPATTN_STATUS_OK);
        CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, st, scr, need) == DPATTN_STATUS_INFEASIBLE);
        CHECK(dpattn_ledger_new_zcdp(record, 10.0, &rec) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(rec, &sr) == DPATTN_STATUS_OK);
        CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, sr, scr, need) == DPATTN_STATUS_UNIT_MISMATCH);
        for (i = 0; i < 25; i++) CHECK(c[i] == 0.0);
        CHECK(dpattn_ledger_charges(tiny, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_charges(rec, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_charges(ap, &charges) == DPATTN_STATUS_OK && charges == 2);
        dpattn_session_free(st);
        CHECK(dpattn_noisy_head(c, 25, g0, 25, &pr, &p, DPATTN_NOISY_HEAD_FORM_GRAM, st, scr, need) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
        for (i = 0; i < 25; i++) CHECK(c[i] == 0.0);
        dpattn_session_free(sr);
        dpattn_session_free(sz);
        dpattn_session_free(sa);
        dpattn_ledger_free(rec);
        dpattn_ledger_free(tiny);
        dpattn_ledger_free(z);
        dpattn_ledger_free(ap);
        p.accounting = DPATTN_NOISY_HEAD_ACCOUNTING_PAPER;
    }
    /* Bad input: out untouched. */
    memcpy(b, a, sizeof a);
    g0[3] = INFINITY;
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, s, scr, need) == DPATTN_STATUS_NON_FINITE && msg_has("gamma0"));
    g0[3] = 0;
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, s, scr, need - 1) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_noisy_head(b, 24, g0, 25, &pr, &p, 1, s, scr, need) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("out"));
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, (dpattn_session *)(void *)&p, scr, need) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, NULL, scr, need) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, s, b, 25) == DPATTN_STATUS_ALIASING);
    pr.n = n - 1;
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, s, scr, need) == DPATTN_STATUS_SHAPE_MISMATCH);
    pr.n = n;
    p.iters = 0;
    CHECK(dpattn_noisy_head(b, 25, g0, 25, &pr, &p, 1, s, scr, need) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("iters"));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(dpattn_noisy_head_scratch_len(&p, 3, &need) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("form"));
    /* Random start: entry i is element 2⁶² + i, so a shorter call is a prefix; c0 = 0 is 0. */
    CHECK(dpattn_noisy_head_random_start(a, 25, 0.1, &k1, 3) == DPATTN_STATUS_OK);
    CHECK(dpattn_noisy_head_random_start(b, 4, 0.1, &k1, 3) == DPATTN_STATUS_OK && memcmp(a, b, 4 * sizeof a[0]) == 0);
    CHECK(dpattn_noisy_head_random_start(b, 4, 0.0, &k1, 3) == DPATTN_STATUS_OK && b[0] == 0 && b[3] == 0);
    CHECK(dpattn_noisy_head_random_start(b, 4, -0.1, &k1, 3) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("c0"));
    ok = 1;
done:
    free(x); free(y); free(q); free(t); free(scr);
    dpattn_session_free(s);
    CHECK(ok);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

int dpattn_c_noisy_head(void) {
    int line;
    if ((line = presets()) != 0) return line;
    if ((line = head_and_features()) != 0) return line;
    if ((line = training()) != 0) return line;
    return release();
}
