/*
 * C ABI of Gaussian-sampling DP attention (paper 000): every entry point of the family,
 * checked against the golden values of docs/PAPERS.md T0-A (check P0-AC1), closed forms written
 * here, a naive C softmax of the released B, determinism/addressability of the noise, and bad
 * input. Returns 0 or the failing line.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Relative closeness; docs/PAPERS.md T0-A prints 6 significant digits, so 1e-5 for its values. */
static int rel(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

/* X = rows of a Sylvester-Hadamard matrix scaled so that X X^T = 0.05 I (n x d). */
static void hadamard(double *x, size_t n, size_t d) {
    double s = sqrt(0.05 / (double)d);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++) {
            size_t b = i & j, c = 0;
            while (b) { c ^= b & 1u; b >>= 1; }
            x[i * d + j] = c ? -s : s;
        }
}

static int calibration(void) {
    dpattn_gaussian_sampling_calibration cal, tight, def55, rig;
    dpattn_gaussian_sampling_domain dom = {sqrt(0.2 / 4096.0), 0.05, 5e-6};
    double v = 0, l = log(1e6);
    uint64_t k = 0, lo = 0, hi = 0;

    CHECK(dpattn_gaussian_sampling_calibration_default(&cal) == DPATTN_STATUS_OK);
    CHECK(cal.constants == DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_THEOREM41 && cal.rho_c == 1.0);
    tight = cal; tight.sensitivity = DPATTN_GAUSSIAN_SAMPLING_SENSITIVITY_TIGHT;
    def55 = cal; def55.constants = DPATTN_GAUSSIAN_SAMPLING_CONSTANTS_DEFINITION55;
    rig = cal; rig.rho_model = DPATTN_GAUSSIAN_SAMPLING_RHO_GAUSSIAN_SPECTRAL;
    rig.coupling = DPATTN_GAUSSIAN_SAMPLING_COUPLING_DECOUPLED; rig.eps_acc = 0.09;

    /* s = 2 alpha beta sqrt(n)/eta: closed form, rounded up by a few ulps at most. */
    CHECK(dpattn_gaussian_sampling_sensitivity(4, &dom, 0, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 2.0 * dom.alpha * dom.beta * 2.0 / dom.eta, 1e-14) && v >= 2.7950849719e-6 * (1 - 1e-10));
    CHECK(rel(v, 2.7950849719e-6, 1e-10));
    CHECK(dpattn_gaussian_sampling_sensitivity(4, &dom, 1, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 2.0 * dom.alpha * dom.beta / dom.eta, 1e-14));

    /* Delta(k): 0.1 min(eps/sqrt(k L), eps/L) (Thm 4.1); min(eps/sqrt(8kL), eps/(8L)). */
    CHECK(dpattn_gaussian_sampling_delta_threshold(500000, 0.09, 1e-6, 0, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 0.1 * 0.09 / sqrt(500000.0 * l), 1e-13) && rel(v, 3.42432e-6, 1e-5));
    CHECK(dpattn_gaussian_sampling_delta_threshold(500000, 0.09, 1e-6, 1, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 0.09 / sqrt(8.0 * 500000.0 * l), 1e-13) && rel(v, 1.21068e-5, 1e-5));

    /* k_max golden values (P0-AC1) and the PRIV boundary. */
    CHECK(dpattn_gaussian_sampling_k_max(4, &dom, 0.09, 1e-6, &cal, &k) == DPATTN_STATUS_OK && k == 750460);
    CHECK(dpattn_gaussian_sampling_check_privacy(4, k, &dom, 0.09, 1e-6, &cal) == DPATTN_STATUS_OK);
    CHECK(dpattn_gaussian_sampling_check_privacy(4, k + 1, &dom, 0.09, 1e-6, &cal) == DPATTN_STATUS_INFEASIBLE);
    CHECK(msg_has("PRIV-b"));
    CHECK(dpattn_gaussian_sampling_k_max(4, &dom, 0.09, 1e-6, &def55, &k) == DPATTN_STATUS_OK && k == 9380760);
    CHECK(dpattn_gaussian_sampling_k_max(4, &dom, 0.09, 1e-6, &tight, &k) == DPATTN_STATUS_OK && k == 3001843);
    {
        dpattn_gaussian_sampling_domain d0 = dom;
        d0.beta = 0.0;
        CHECK(dpattn_gaussian_sampling_k_max(4, &d0, 0.09, 1e-6, &cal, &k) == DPATTN_STATUS_OK);
        CHECK(k == DPATTN_GAUSSIAN_SAMPLING_K_UNBOUNDED);
    }
    CHECK(dpattn_gaussian_sampling_k_min(4, 0.09, 0.01, &cal, &k) == DPATTN_STATUS_OK && k == 258944);
    CHECK(dpattn_gaussian_sampling_k_min(4, 0.09, 0.01, &rig, &k) == DPATTN_STATUS_OK && k == 16867);
    CHECK(dpattn_gaussian_sampling_feasible_k(4, &dom, 0.09, 1e-6, 0.01, &cal, &lo, &hi) == DPATTN_STATUS_OK);
    CHECK(lo == 258944 && hi == 750460);
    /* Paper coupling with the rigorous rho: k_min = 1369964 > k_max, infeasible. */
    rig.coupling = DPATTN_GAUSSIAN_SAMPLING_COUPLING_PAPER;
    lo = hi = 5;
    CHECK(dpattn_gaussian_sampling_feasible_k(4, &dom, 0.09, 1e-6, 0.01, &rig, &lo, &hi) == DPATTN_STATUS_INFEASIBLE);
    CHECK(lo == 5 && hi == 5 && msg_has("k_min"));

    /* rho: paper C(u + u^2), u = sqrt((n^2 + ln(1/g))/k); spectral 2a + a^2. */
    CHECK(dpattn_gaussian_sampling_rho(500000, 4, 0.01, 0, 1.0, &v) == DPATTN_STATUS_OK);
    {
        double u = sqrt((16.0 + log(100.0)) / 500000.0);
        double a = (2.0 + sqrt(2.0 * log(200.0))) / sqrt(500000.0);
        CHECK(rel(v, u + u * u, 1e-13) && rel(v, 0.00646074, 1e-5));
        CHECK(dpattn_gaussian_sampling_rho(500000, 4, 0.01, 1, 0.0, &v) == DPATTN_STATUS_OK);
        CHECK(rel(v, 2 * a + a * a, 1e-13) && rel(v, 0.0149193, 1e-5));
        CHECK(rel(dpattn_gaussian_sampling_error_bound_tight(v, 0.05), 1.4925e-3, 1e-4));
        CHECK(rel(dpattn_gaussian_sampling_error_bound_tight(v, 0.05), 2.0 * expm1(v * 0.05), 1e-15));
    }
    CHECK(rel(dpattn_gaussian_sampling_error_bound_paper(0.09, 0.05), 0.238, 1e-12));
    CHECK(rel(dpattn_gaussian_sampling_uniform_baseline_bound(0.05), 2.0 * expm1(0.05), 1e-15));
    CHECK(rel(dpattn_gaussian_sampling_uniform_baseline_bound(0.05), 0.10254, 1e-4));

    CHECK(dpattn_gaussian_sampling_min_epsilon_for_k(4, 500000, &dom, 1e-6, &cal, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 0.073462, 1e-4));
    CHECK(dpattn_gaussian_sampling_min_epsilon_for_k(4, 500000, &dom, 1e-6, &def55, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 0.020778, 1e-4));
    CHECK(dpattn_gaussian_sampling_min_feasible_epsilon(4, &dom, 1e-6, 0.01, &cal, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 0.0689072, 1e-5));
    CHECK(dpattn_gaussian_sampling_max_beta(4, 258944, &dom, 0.09, 1e-6, &cal, &v) == DPATTN_STATUS_OK);
    CHECK(rel(v, 8.51199e-6, 1e-5));

    /* Bad input: out-params untouched, messages name the argument. */
    v = 42.0;
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, 0.0, 1e-6, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, 0.5, 0.1, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, 0.5, 1.0, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_gaussian_sampling_delta_threshold(0, 0.5, 1e-6, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, NAN, 1e-6, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, 0.5, 1e-6, 2, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("constants"));
    CHECK(dpattn_gaussian_sampling_delta_threshold(10, 0.5, 1e-6, 0, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    CHECK(dpattn_gaussian_sampling_sensitivity(0, &dom, 0, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_sensitivity(4, NULL, 0, &v) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("domain"));
    CHECK(dpattn_gaussian_sampling_rho(10, 4, 0.01, 7, 1.0, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("rho_model"));
    CHECK(dpattn_gaussian_sampling_rho(10, 4, 0.01, 0, 0.5, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_k_min(4, 0.09, 0.01, NULL, &k) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("calibration"));
    CHECK(dpattn_gaussian_sampling_check_privacy(4, 10, &dom, 0.09, 1e-6, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_gaussian_sampling_min_epsilon_for_k(4, 10, &dom, 0.5, &cal, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_min_feasible_epsilon(0, &dom, 1e-6, 0.01, &cal, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_max_beta(4, 10, &dom, 2.0, 1e-6, &cal, &v) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(v == 42.0);
    return 0;
}

enum { N = 4, D = 64 };

static dpattn_tensor4_mut out4(double *p, size_t b, size_t n) {
    dpattn_tensor4_mut t;
    t.data = p; t.len = b * n * n; t.dtype = DPATTN_DTYPE_F64;
    t.shape[0] = b; t.shape[1] = 1; t.shape[2] = n; t.shape[3] = n;
    t.strides[0] = n * n; t.strides[1] = n * n; t.strides[2] = n; t.strides[3] = 1;
    return t;
}

/* One release on a replay session of `key` at epoch 5, next stream id `stream`, charging
 * `ledger` (NULL: nothing): exactly what a live session at that position releases. Returns
 * the session constructor's status if it fails (a freed ledger). */
static dpattn_status gsa_at(const dpattn_key *key, uint64_t stream, dpattn_ledger *ledger,
                            const dpattn_tensor4_mut *b, const dpattn_tensor4_mut *p,
                            const dpattn_tensor4 *x, const dpattn_gaussian_sampling_params *prm,
                            double *sc, size_t len, dpattn_gaussian_sampling_report *rep) {
    dpattn_session *s = NULL;
    dpattn_status st = dpattn_session_new_for_replay(key, 5, stream, ledger, &s);
    if (st != DPATTN_STATUS_OK) return st;
    st = dpattn_gaussian_sampling_attention(b, p, x, prm, s, sc, len, rep);
    dpattn_session_free(s);
    return st;
}

static int mechanism(void) {
    static double x[2 * N * D], sc[4096], b[2 * N * N], p[2 * N * N], b2[2 * N * N], p2[2 * N * N];
    dpattn_gaussian_sampling_params prm, q;
    dpattn_gaussian_sampling_report rep;
    dpattn_key key, key2;
    dpattn_tensor4 xt;
    dpattn_tensor4_mut bt, pt;
    size_t len = 0, i, j;
    double e = 0, dl = 0;
    size_t live = dpattn_live_handle_count();

    hadamard(x, N, D);
    memcpy(x + N * D, x, sizeof(double) * N * D); /* batch element 1 = element 0 */
    memset(key.bytes, 7, 32);
    memset(key2.bytes, 8, 32);
    CHECK(dpattn_gaussian_sampling_params_default(&prm) == DPATTN_STATUS_OK);
    CHECK(prm.k == 0 && prm.epsilon == 0.0 && prm.sampler == DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT);
    prm.epsilon = 0.09; prm.delta = 1e-6; prm.k = 100000;
    prm.domain.alpha = 0.06; prm.domain.eta = 0.05; prm.domain.beta = 1e-6;

    CHECK(dpattn_gaussian_sampling_attention_scratch_len(N, D, 0, 0, &len) == DPATTN_STATUS_OK);
    CHECK(len == D + 2 * N * N + N); /* clip factors, A, T, one row */
    CHECK(dpattn_gaussian_sampling_attention_scratch_len(0, D, 0, 0, &len) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_attention_scratch_len(N, D, 9, 0, &len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sampler"));
    CHECK(dpattn_gaussian_sampling_attention_scratch_len(N, D, 0, 9, &len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("out_of_domain"));
    CHECK(dpattn_gaussian_sampling_attention_scratch_len(N, D, 0, 0, &len) == DPATTN_STATUS_OK);

    xt.data = x; xt.len = 2 * N * D; xt.dtype = DPATTN_DTYPE_F64;
    xt.shape[0] = 2; xt.shape[1] = 1; xt.shape[2] = N; xt.shape[3] = D;
    xt.strides[0] = N * D; xt.strides[1] = N * D; xt.strides[2] = D; xt.strides[3] = 1;
    bt = out4(b, 2, N); pt = out4(p, 2, N);
    /* The mechanism has no floating-point-safe form: the default exact mode refuses it, and
     * it runs only when the caller names the unsafe float mode. */
    CHECK(prm.noise_mode == DPATTN_NOISE_MODE_EXACT);
    CHECK(gsa_at(&key, 0, NULL, &bt, &pt, &xt, &prm, sc, len, &rep) ==
          DPATTN_STATUS_UNSUPPORTED && msg_has("floating-point-safe"));
    prm.noise_mode = DPATTN_NOISE_MODE_UNSAFE_FLOAT;
    CHECK(gsa_at(&key, 0, NULL, &bt, &pt, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
    /* Report (private): column norm sqrt(n * 0.05/d), r = 0.05, nothing clipped. */
    CHECK(rel(rep.alpha_hat, sqrt(N * 0.05 / D), 1e-12) && rel(rep.r_hat, 0.05, 1e-12));
    CHECK(rep.clipped_columns == 0);
    /* B symmetric exactly; B ~ Wishart(k, 0.05 I)/k: sd(B_ii) = 0.05 sqrt(2/k) = 2.2e-4,
     * sd(B_ij) = 1.6e-4. 7e-4 is >= 3 sd... use 1.5e-3 (~7 sd): P(fail) < 1e-10 per entry. */
    for (i = 0; i < 2 * N; i++)
        for (j = 0; j < N; j++) {
            size_t h = i / N, r = i % N;
            double bij = b[h * N * N + r * N + j];
            CHECK(bij == b[h * N * N + j * N + r]);
            CHECK(fabs(bij - (r == j ? 0.05 : 0.0)) < 1.5e-3);
        }
    /* P = D(B)^-1 exp(B): naive C softmax of the released B, to 1e-14. */
    for (i = 0; i < 2 * N; i++) {
        double s = 0, row = 0;
        for (j = 0; j < N; j++) s += exp(b[i * N + j]);
        for (j = 0; j < N; j++) {
            CHECK(fabs(p[i * N + j] - exp(b[i * N + j]) / s) < 1e-14);
            row += p[i * N + j];
        }
        CHECK(fabs(row - 1.0) < 1e-14);
    }
    /* Determinism and addressability: the same session position (master key, epoch,
     * stream id) gives identical bits; a one-problem call equals problem 0 of the batch;
     * problems 0 and 1 (same data) differ; another key or stream id differs. */
    CHECK(gsa_at(&key, 0, NULL, &bt, &pt, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
    {
        dpattn_tensor4 x1 = xt;
        dpattn_tensor4_mut b1 = out4(b2, 1, N), p1 = out4(p2, 1, N);
        x1.shape[0] = 1; x1.len = N * D;
        CHECK(gsa_at(&key, 0, NULL, &b1, &p1, &x1, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
        CHECK(memcmp(b2, b, sizeof(double) * N * N) == 0 && memcmp(p2, p, sizeof(double) * N * N) == 0);
        CHECK(memcmp(b, b + N * N, sizeof(double) * N * N) != 0);
        CHECK(gsa_at(&key, 1, NULL, &b1, &p1, &x1, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
        CHECK(memcmp(b2, b, sizeof(double) * N * N) != 0);
        CHECK(gsa_at(&key2, 0, NULL, &b1, &p1, &x1, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
        CHECK(memcmp(b2, b, sizeof(double) * N * N) != 0);
    }
    /* Charge: basic composition over batch*heads problems, or heads when disjoint. */
    CHECK(dpattn_gaussian_sampling_attention_charge(&prm, 2, 3, &e, &dl) == DPATTN_STATUS_OK);
    CHECK(rel(e, 6 * 0.09, 1e-15) && rel(dl, 6e-6, 1e-12));
    q = prm; q.batch_elements_disjoint = 1;
    CHECK(dpattn_gaussian_sampling_attention_charge(&q, 2, 3, &e, &dl) == DPATTN_STATUS_OK);
    CHECK(rel(e, 3 * 0.09, 1e-15));
    CHECK(dpattn_gaussian_sampling_attention_charge(&q, 0, 3, &e, &dl) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_attention_charge(&q, SIZE_MAX, 3, &e, &dl) == DPATTN_STATUS_OK);
    q.batch_elements_disjoint = 0;
    CHECK(dpattn_gaussian_sampling_attention_charge(&q, SIZE_MAX, 3, &e, &dl) == DPATTN_STATUS_SIZE_OVERFLOW);

    /* With an approximate-DP ledger: the same release, charged exactly the total of
       dpattn_gaussian_sampling_attention_charge (2 problems); a too-small ledger, or a zCDP
       one (δ > 0), refuses it and writes nothing. */
    {
        const dpattn_privacy_unit column = {DPATTN_UNIT_FEATURE_COLUMN, 0};
        const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
        dpattn_ledger *l = NULL, *tiny = NULL, *z = NULL, *other = NULL;
        dpattn_session *s = NULL;
        dpattn_tensor4_mut b2t = out4(b2, 2, N), p2t = out4(p2, 2, N);
        dpattn_amount spent;
        uint64_t charges = 9;
        CHECK(dpattn_gaussian_sampling_attention_charge(&prm, 2, 1, &e, &dl) == DPATTN_STATUS_OK);
        CHECK(dpattn_ledger_new_approx(column, 1.0, 1e-5, &l) == DPATTN_STATUS_OK);
        CHECK(gsa_at(&key, 0, l, &b2t, &p2t, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_OK);
        CHECK(memcmp(b2, b, sizeof b) == 0 && memcmp(p2, p, sizeof p) == 0);
        CHECK(dpattn_ledger_spent(l, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == e && spent.delta == dl);
        memset(b2, 0, sizeof b2);
        rep.clipped_columns = 99;
        CHECK(dpattn_ledger_new_approx(column, e / 2, 1e-5, &tiny) == DPATTN_STATUS_OK);
        CHECK(gsa_at(&key, 0, tiny, &b2t, &p2t, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_INFEASIBLE);
        CHECK(dpattn_ledger_charges(tiny, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_new_zcdp(column, 1.0, &z) == DPATTN_STATUS_OK);
        CHECK(gsa_at(&key, 0, z, &b2t, &p2t, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_OUT_OF_RANGE);
        dpattn_ledger_free(tiny);
        CHECK(gsa_at(&key, 0, tiny, &b2t, &p2t, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_INVALID_HANDLE && msg_has("ledger"));
        for (i = 0; i < 2 * N * N; i++) CHECK(b2[i] == 0.0);
        CHECK(rep.clipped_columns == 99);
        /* A ledger for one token: paper 000 protects a feature column, refused. */
        CHECK(dpattn_ledger_new_approx(token, 100.0, 1e-2, &other) == DPATTN_STATUS_OK);
        CHECK(gsa_at(&key, 0, other, &b2t, &p2t, &xt, &prm, sc, len, &rep) == DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(msg_has("one feature column"));
        CHECK(dpattn_ledger_charges(other, &charges) == DPATTN_STATUS_OK && charges == 0);
        for (i = 0; i < 2 * N * N; i++) CHECK(b2[i] == 0.0);
        CHECK(rep.clipped_columns == 99);
        /* The default route: a session with a key from the operating system. Each release
           takes the next stream id, so two releases of the same input differ, and each is
           charged. */
        CHECK(dpattn_session_new(l, &s) == DPATTN_STATUS_OK);
        CHECK(dpattn_gaussian_sampling_attention(&b2t, &p2t, &xt, &prm, s, sc, len, &rep) == DPATTN_STATUS_OK);
        memcpy(b2 + N * N, b2, sizeof(double) * N * N); /* keep problem 0 of the first */
        CHECK(dpattn_gaussian_sampling_attention(&b2t, &p2t, &xt, &prm, s, sc, len, &rep) == DPATTN_STATUS_OK);
        CHECK(memcmp(b2, b2 + N * N, sizeof(double) * N * N) != 0);
        CHECK(dpattn_ledger_charges(l, &charges) == DPATTN_STATUS_OK && charges == 3);
        dpattn_session_free(s);
        dpattn_ledger_free(other);
        dpattn_ledger_free(z);
        dpattn_ledger_free(l);
    }

    /* Bad input: outputs untouched. */
    memcpy(b2, b, sizeof b);
    rep.clipped_columns = 99;
#define RUN(P, S, L) gsa_at(&key, 0, NULL, &bt, &pt, &xt, (P), (S), (L), &rep)
    q = prm; q.epsilon = NAN;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    q = prm; q.epsilon = -1.0;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    q = prm; q.delta = 1.0;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    q = prm; q.delta = 0.2; /* the mechanism needs delta < 0.1 (docs/PAPERS.md P0-18) */
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    q = prm; q.k = 0;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE);
    q = prm; q.k = 10000000; /* PRIV-b fails */
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_INFEASIBLE);
    q = prm; q.score = 5;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("score"));
    q = prm; q.batch_elements_disjoint = 2;
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("batch_elements_disjoint"));
    q = prm; q.domain.eta = 0.055; /* private lambda_min = 0.05 < eta: data-dependent refusal */
    CHECK(RUN(&q, sc, len) == DPATTN_STATUS_DOMAIN_VIOLATION);
    CHECK(RUN(&prm, sc, len - 1) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(RUN(NULL, sc, len) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("params"));
    CHECK(RUN(&prm, NULL, len) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("scratch"));
    CHECK(RUN(&prm, sc, SIZE_MAX / 2) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(RUN(&prm, b, len) == DPATTN_STATUS_ALIASING);
    x[3] = NAN;
    CHECK(RUN(&prm, sc, len) == DPATTN_STATUS_NON_FINITE);
    hadamard(x, N, D);
    bt.dtype = DPATTN_DTYPE_F32;
    CHECK(RUN(&prm, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("out_b"));
    bt = out4(b, 2, N);
    bt.shape[3] = N - 1; /* [2,1,4,3] inside the same 32 elements */
    CHECK(RUN(&prm, sc, len) == DPATTN_STATUS_SHAPE_MISMATCH);
    bt = out4(b, 2, N);
    CHECK(dpattn_gaussian_sampling_attention(&bt, &pt, &xt, &prm, NULL, sc, len, &rep) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(gsa_at(&key, 0, NULL, &bt, &pt, &xt, &prm, sc, len, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_report"));
#undef RUN
    CHECK(memcmp(b2, b, sizeof b) == 0 && rep.clipped_columns == 99);
    CHECK(dpattn_gaussian_sampling_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_gaussian_sampling_calibration_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

static int covariance(void) {
    const double sigma[4] = {2.0, 0.5, 0.5, 1.0}, bad[4] = {1.0, 2.0, 2.0, 1.0};
    double out[4], out2[4], sc[512];
    float xf[8] = {3, 0, 0, 0, 0, 2, 0, 0};
    double xd[8] = {3, 0, 0, 0, 0, 2, 0, 0};
    dpattn_key key;
    size_t len = 0, i;
    double a = 0, e = 0, r = 0;
    memset(key.bytes, 1, 32);

    CHECK(dpattn_gaussian_sampling_dp_covariance_scratch_len(2, 0, &len) == DPATTN_STATUS_OK && len == 2 * 4 + 2);
    CHECK(dpattn_gaussian_sampling_dp_covariance_scratch_len(2, 1, &len) == DPATTN_STATUS_OK && len == 2 * 4 + 64 * 2);
    CHECK(dpattn_gaussian_sampling_dp_covariance_scratch_len(2, 2, &len) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_dp_covariance_scratch_len(SIZE_MAX, 0, &len) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(dpattn_gaussian_sampling_dp_covariance_scratch_len(2, 0, &len) == DPATTN_STATUS_OK);
    /* k = 1e6: sd(B_00) = sqrt(2 * 2^2 / k) = 2.8e-3; 0.02 is 7 sd. */
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1000000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_OK);
    for (i = 0; i < 4; i++) CHECK(fabs(out[i] - sigma[i]) < 0.02);
    CHECK(out[1] == out[2]);
    /* Problem addressing: problem 1 differs from problem 0; the same problem repeats. */
    CHECK(dpattn_gaussian_sampling_dp_covariance(out2, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1000000, 0, &key, 0, 1, sc, len) == DPATTN_STATUS_OK);
    CHECK(memcmp(out, out2, sizeof out) != 0);
    CHECK(dpattn_gaussian_sampling_dp_covariance(out2, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1000000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_OK);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    /* Bad input, out untouched. */
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, bad, 4, 2, 2, 2, 1000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_DOMAIN_VIOLATION);
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_OUT_OF_RANGE); /* Bartlett k < n */
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1000, 0, &key, 0, 0, sc, len - 1) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 3, 2, 2, 2, 1000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, NULL, 4, 2, 2, 2, 1000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("sigma"));
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 1000, 7, &key, 0, 0, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sampler"));
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, out, 4, 2, 2, 2, 1000, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_ALIASING);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    CHECK(dpattn_gaussian_sampling_dp_covariance(out, 4, 2, 2, 2, sigma, 4, 2, 2, 2, 100, 1, &key, 0, 0, sc, 2 * 4 + 128) == DPATTN_STATUS_OK);

    /* Factor-free on X (2 x 4, rows (3,0,0,0), (0,2,0,0)): E[B] = X X^T = diag(9, 4);
     * k = 20000: sd(B_00) = 9 sqrt(2/k) = 0.09; 0.7 is ~8 sd. */
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data_scratch_len(2, 4, &len) == DPATTN_STATUS_OK);
    CHECK(len == 4 + 4 + 64 * 4 + 64 * 2);
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data_scratch_len(0, 4, &len) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data_scratch_len(2, 4, &len) == DPATTN_STATUS_OK);
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data(out, 4, 2, 2, 2, xf, 8, DPATTN_DTYPE_F32, 2, 4, 4, 20000, &key, 0, 0, sc, len) == DPATTN_STATUS_OK);
    CHECK(fabs(out[0] - 9.0) < 0.7 && fabs(out[3] - 4.0) < 0.35 && fabs(out[1]) < 0.5 && out[1] == out[2]);
    /* f32 and f64 copies of the same (exactly representable) X give identical bits. */
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data(out2, 4, 2, 2, 2, xd, 8, DPATTN_DTYPE_F64, 2, 4, 4, 20000, &key, 0, 0, sc, len) == DPATTN_STATUS_OK);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data(out, 4, 2, 2, 2, xd, 8, 9, 2, 4, 4, 100, &key, 0, 0, sc, len) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("x_dtype"));
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data(out, 4, 2, 2, 2, xd, 8, DPATTN_DTYPE_F64, 2, 4, 4, 0, &key, 0, 0, sc, len) == DPATTN_STATUS_OUT_OF_RANGE);
    xd[5] = INFINITY;
    CHECK(dpattn_gaussian_sampling_dp_covariance_from_data(out, 4, 2, 2, 2, xd, 8, DPATTN_DTYPE_F64, 2, 4, 4, 100, &key, 0, 0, sc, len) == DPATTN_STATUS_NON_FINITE);
    xd[5] = 2.0;
    CHECK(memcmp(out, out2, sizeof out) == 0);

    /* measure_domain on X = diag(3, 2) (as 2 x 2 with row stride 4): (alpha, eta, r) = (3, 4, 9). */
    CHECK(dpattn_gaussian_sampling_measure_domain_scratch_len(2, 2, &len) == DPATTN_STATUS_OK && len == 2 + 4);
    CHECK(dpattn_gaussian_sampling_measure_domain_scratch_len(0, 2, &len) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_gaussian_sampling_measure_domain_scratch_len(SIZE_MAX, 2, &len) == DPATTN_STATUS_SIZE_OVERFLOW);
    {
        const double xm[6] = {3, 0, 9, 0, 2, 9}; /* the 9s are skipped by the stride */
        CHECK(dpattn_gaussian_sampling_measure_domain(xm, 6, DPATTN_DTYPE_F64, 2, 2, 3, sc, 6, &a, &e, &r) == DPATTN_STATUS_OK);
        CHECK(a == 3.0 && fabs(e - 4.0) < 1e-12 && r == 9.0);
        a = -1;
        CHECK(dpattn_gaussian_sampling_measure_domain(xm, 6, DPATTN_DTYPE_F64, 2, 2, 3, sc, 5, &a, &e, &r) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
        CHECK(dpattn_gaussian_sampling_measure_domain(xm, 6, DPATTN_DTYPE_F64, 2, 2, 3, sc, 6, NULL, &e, &r) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_alpha"));
        CHECK(dpattn_gaussian_sampling_measure_domain(xm, 4, DPATTN_DTYPE_F64, 2, 2, 3, sc, 6, &a, &e, &r) == DPATTN_STATUS_BUFFER_TOO_SHORT);
        CHECK(a == -1);
    }
    return 0;
}

int dpattn_c_gaussian_sampling(void) {
    int line;
    if ((line = calibration()) != 0) return line;
    if ((line = mechanism()) != 0) return line;
    return covariance();
}
