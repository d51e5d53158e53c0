/*
 * C ABI of the softmax-tree structures of paper 001: every entry point, checked against
 * the acceptance checks of docs/PAPERS.md §1.13 (P1-AC2 DPTree paths, P1-AC3 Figure 1, P1-AC4
 * feature map, P1-AC6 Config A, T1-I copy counts), closed forms computed here (binomials, exp,
 * Taylor sums), TLap's deterministic noise bound, replay of a build from its (master key, epoch,
 * stream id), the charge of the session's ledger (each build is one (ε, δ) release of one token),
 * and bad input. Returns 0 or the failing line.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int rel(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

static double binom(unsigned n, unsigned k) {
    double r = 1;
    for (unsigned t = 1; t <= k; t++) r = r * (n - k + t) / t;
    return r;
}

static const dpattn_privacy_unit TOKEN = {DPATTN_UNIT_TOKENS, 1};

/* The (ε, δ) spent on an approximate-DP ledger, and its charge count. */
static int spent_approx(const dpattn_ledger *l, double *eps, double *delta, uint64_t *charges) {
    dpattn_amount a;
    CHECK(dpattn_ledger_spent(l, &a) == DPATTN_STATUS_OK && a.kind == DPATTN_AMOUNT_APPROX);
    CHECK(dpattn_ledger_charges(l, charges) == DPATTN_STATUS_OK);
    *eps = a.epsilon;
    *delta = a.delta;
    return 0;
}

static double taylor(double z, unsigned s) {
    double term = 1, sum = 1;
    for (unsigned t = 1; t <= s; t++) { term *= z / t; sum += term; }
    return sum;
}

static int scalars(void) {
    size_t n = 0;
    uint32_t s = 0;
    uint64_t l = 0;
    dpattn_softmax_tree_copies c;
    dpattn_softmax_budget b;
    double e = 0, d = 0, u = 0, w = 0;

    CHECK(dpattn_softmax_tree_leaf_count(1, &n) == DPATTN_STATUS_OK && n == 2);
    CHECK(dpattn_softmax_tree_leaf_count(9, &n) == DPATTN_STATUS_OK && n == 16);
    CHECK(dpattn_softmax_tree_leaf_count(1000, &n) == DPATTN_STATUS_OK && n == 1024);
    CHECK(dpattn_softmax_tree_leaf_count(0, &n) == DPATTN_STATUS_OUT_OF_RANGE && n == 1024);
    CHECK(dpattn_softmax_tree_leaf_count(SIZE_MAX, &n) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(dpattn_softmax_tree_leaf_count(3, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_softmax_tree_bin(0.25, 1.0, 16, &n) == DPATTN_STATUS_OK && n == 4);
    CHECK(dpattn_softmax_tree_bin(1.0, 1.0, 16, &n) == DPATTN_STATUS_OK && n == 15);
    CHECK(dpattn_softmax_tree_bin(NAN, 1.0, 16, &n) == DPATTN_STATUS_OK && n == 0);
    CHECK(dpattn_softmax_tree_bin(0.5, 1.0, 0, &n) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("n_leaves"));
    CHECK(dpattn_softmax_tree_bin(0.5, 0.0, 16, &n) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("range"));

    /* r = C(d + s, s) for d <= 16, s <= 8 (P1-AC4), exact in double at these sizes. */
    for (unsigned dd = 1; dd <= 16; dd++)
        for (unsigned ss = 0; ss <= 8; ss++) {
            CHECK(dpattn_softmax_tree_feature_count(dd, ss, &n) == DPATTN_STATUS_OK);
            CHECK((double)n == binom(dd + ss, ss));
        }
    CHECK(dpattn_softmax_tree_feature_count(SIZE_MAX, 64, &n) == DPATTN_STATUS_SIZE_OVERFLOW);

    /* T_s vs exp: T_2(2) = 5 exactly; T_30(1) = e to 1 ulp-ish (the tail is < 1e-32). */
    CHECK(dpattn_softmax_tree_taylor_exp(2.0, 2) == 5.0);
    CHECK(rel(dpattn_softmax_tree_taylor_exp(1.0, 30), exp(1.0), 1e-15));
    CHECK(isnan(dpattn_softmax_tree_taylor_exp(1.0, DPATTN_SOFTMAX_TREE_MAX_DEGREE + 1)));
    /* (e - T_3(1)) / T_3(1) = 0.0193557; the core sums the tail directly (rel 1e-12). */
    CHECK(rel(dpattn_softmax_tree_taylor_relative_error(1.0, 3), (exp(1.0) - taylor(1, 3)) / taylor(1, 3), 1e-12));
    CHECK(isnan(dpattn_softmax_tree_taylor_relative_error(1.0, 100)));
    /* s_min table (T1-E). */
    CHECK(dpattn_softmax_tree_min_degree(1.0, 0.01, &s) == DPATTN_STATUS_OK && s == 4);
    CHECK(dpattn_softmax_tree_min_degree(4.0, 1e-6, &s) == DPATTN_STATUS_OK && s == 17);
    CHECK(dpattn_softmax_tree_min_degree(101.0, 0.01, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("z_max"));
    CHECK(dpattn_softmax_tree_min_degree(1.0, 0.0, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("eps_s"));
    CHECK(s == 17);
    /* Gamma_{2,3} = 8/sqrt(6); Gamma_{3,8} = 32.67 (P1-AC4, T1-F). */
    CHECK(rel(dpattn_softmax_tree_gamma_bound(2.0, 3), 8.0 / sqrt(6.0), 1e-14));
    CHECK(fabs(dpattn_softmax_tree_gamma_bound(3.0, 8) - 32.67) < 0.01);
    CHECK(isnan(dpattn_softmax_tree_gamma_bound(3.0, 65)));

    /* Copy counts (T1-I) and the net. */
    c.kind = DPATTN_SOFTMAX_TREE_COPIES_NET_HOEFFDING; c.value = 10.0; c.fixed = 0;
    CHECK(dpattn_softmax_tree_copy_count(&c, 2, 15, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_OK && l == 29);
    c.kind = DPATTN_SOFTMAX_TREE_COPIES_PAPER; c.value = 1.0;
    CHECK(dpattn_softmax_tree_copy_count(&c, 4, 70, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_OK && l == 743);
    c.kind = DPATTN_SOFTMAX_TREE_COPIES_FIXED; c.fixed = 4;
    CHECK(dpattn_softmax_tree_copy_count(&c, 4, 70, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_OK && l == 5);
    c.fixed = 0;
    CHECK(dpattn_softmax_tree_copy_count(&c, 4, 70, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_OUT_OF_RANGE && l == 5);
    c.kind = 9;
    CHECK(dpattn_softmax_tree_copy_count(&c, 4, 70, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("copies.kind"));
    CHECK(dpattn_softmax_tree_copy_count(NULL, 4, 70, 1.0, 0.01, 0.01, &l) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(rel(dpattn_softmax_tree_net_resolution(4, 1.0, 0.01), 0.01 / 2.0, 1e-15));
    CHECK(fabs(dpattn_softmax_tree_snap_to_net(0.26, 0.1, 1.0) - 0.3) < 1e-15);
    CHECK(dpattn_softmax_tree_snap_to_net(0.97, 0.25, 1.0) == 1.0);

    /* Config A (T1-J, l = 1): eps_D = c eps/(3 sqrt(r ln(2/delta'))), delta_D = delta/(3r),
     * node budgets eps_D/(3L), eps/(9L); rounded down by at most a few ulps (1e-12). */
    CHECK(dpattn_softmax_tree_budget(0.5, 5e-7, 5e-7, 0.09, 70, 10, DPATTN_SOFTMAX_TREE_ACCOUNTING_PAPER, &b) == DPATTN_STATUS_OK);
    CHECK(rel(b.distance_epsilon, 0.09 * 0.5 / (3 * sqrt(70 * log(2 / 5e-7))), 1e-12));
    CHECK(rel(b.distance_epsilon, 4.59827e-4, 1e-5) && rel(b.distance_delta, 2.38095e-9, 1e-5));
    CHECK(rel(b.feature_node_epsilon, b.distance_epsilon / 30, 1e-12) && rel(b.ones_node_epsilon, 0.5 / 90, 1e-12));
    CHECK(b.features == 70 && b.depth == 10 && b.copy_epsilon == 0.5);
    CHECK(dpattn_softmax_budget_achieved(&b, &e, &d) == DPATTN_STATUS_OK);
    CHECK(e <= 0.5 && e > 0.5 / 3 && d <= 5e-7 + 5e-7);
    /* Tight accounting spends at most the target (P1-X2). */
    {
        dpattn_softmax_budget t;
        CHECK(dpattn_softmax_tree_budget(0.5, 5e-7, 5e-7, 0.09, 70, 10, DPATTN_SOFTMAX_TREE_ACCOUNTING_TIGHT, &t) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_budget_achieved(&t, &e, &d) == DPATTN_STATUS_OK && e <= 0.5 && e > 0.49);
        CHECK(t.distance_epsilon > b.distance_epsilon); /* less noise than the paper split */
    }
    /* The deterministic worst-case bound dominates the standard deviation (B_q >= sigma_q
     * for TLap, and a weighted sum of bounds >= the root of the weighted sum of squares). */
    CHECK(dpattn_softmax_tree_uniform_noise_std(&b, 10, 1.0, taylor(1.0, 4), 1.0, &u) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_worst_case_noise_bound(&b, 10, 1.0, taylor(1.0, 4), 1.0, &w) == DPATTN_STATUS_OK);
    CHECK(u > 0 && w >= u);
    /* Bad input. */
    CHECK(dpattn_softmax_tree_budget(0.5, 5e-7, 1.0, 0.09, 70, 10, 0, &b) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta_prime"));
    CHECK(dpattn_softmax_tree_budget(0.5, 5e-7, 5e-7, 0.09, 0, 10, 0, &b) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_softmax_tree_budget(-0.5, 5e-7, 5e-7, 0.09, 70, 10, 0, &b) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_softmax_tree_budget(0.5, 5e-7, 5e-7, 0.09, 70, 10, 2, &b) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("accounting"));
    CHECK(b.features == 70);
    b.copy_delta = 2.0;
    CHECK(dpattn_softmax_budget_achieved(&b, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_softmax_tree_uniform_noise_std(&b, 10, 1.0, 1.0, 1.0, &u) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_softmax_tree_worst_case_noise_bound(NULL, 10, 1.0, 1.0, 1.0, &w) == DPATTN_STATUS_NULL_ARGUMENT);
    return 0;
}

static int trees(void) {
    const double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    dpattn_dp_tree *t = NULL, *ex = NULL, *t2 = NULL, *t3 = NULL;
    dpattn_key key, key2;
    dpattn_ledger *lg = NULL, *zl = NULL;
    dpattn_session *s = NULL, *zs = NULL, *rp1 = NULL, *rp2 = NULL, *rp3 = NULL;
    size_t nl = 0, nodes[3], cnt = 0, j, vv;
    uint32_t depth = 0, sides[3];
    uint64_t charges = 0;
    double bound = 0, var = 0, l = 0, r = 0, l2 = 0, r2 = 0, x = 0, se = 0, sd = 0;
    memset(key.bytes, 7, 32);
    memset(key2.bytes, 8, 32);

    /* P1-AC2, T1-B: noise-free, leaves 1..8, leaf 6 (1-based) -> (15, 15); touched {12, 7, 2},
       (L, R, L). */
    CHECK(dpattn_dp_tree_new_exact(v, 8, &ex) == DPATTN_STATUS_OK && ex != NULL);
    CHECK(dpattn_dp_tree_query_leaf(ex, 5, &l, &r) == DPATTN_STATUS_OK && l == 15 && r == 15);
    CHECK(dpattn_dp_tree_touched_nodes(ex, nodes, 3, sides, 3, 5, &cnt) == DPATTN_STATUS_OK && cnt == 3);
    CHECK(nodes[0] == 12 && nodes[1] == 7 && nodes[2] == 2);
    CHECK(sides[0] == DPATTN_DP_TREE_SIDE_LEFT && sides[1] == DPATTN_DP_TREE_SIDE_RIGHT && sides[2] == DPATTN_DP_TREE_SIDE_LEFT);
    /* Property: c_left = sum of leaves < j, c_right = sum of leaves > j, for every j. */
    for (j = 0; j < 8; j++) {
        double sl = 0, sr = 0;
        for (size_t i = 0; i < 8; i++) { if (i < j) sl += v[i]; if (i > j) sr += v[i]; }
        CHECK(dpattn_dp_tree_query_leaf(ex, j, &l, &r) == DPATTN_STATUS_OK && l == sl && r == sr);
    }
    /* Heap node v >= 8 is leaf v - 8; node 2 is the left half 1+2+3+4. */
    CHECK(dpattn_dp_tree_node(ex, 9, &x) == DPATTN_STATUS_OK && x == 2.0);
    CHECK(dpattn_dp_tree_node(ex, 2, &x) == DPATTN_STATUS_OK && x == 10.0);
    CHECK(dpattn_dp_tree_node(ex, 1, &x) == DPATTN_STATUS_OUT_OF_RANGE && x == 10.0); /* root never released */
    CHECK(dpattn_dp_tree_node(ex, 16, &x) == DPATTN_STATUS_OUT_OF_RANGE);

    /* The default API: a session (key from the operating system) over a ledger for tokens;
     * the build is charged the tree's (ε, δ) = (1, 1e-6). */
    CHECK(dpattn_ledger_new_approx(TOKEN, 10.0, 1e-3, &lg) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(lg, &s) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, s, &t) == DPATTN_STATUS_OK);
    CHECK(spent_approx(lg, &se, &sd, &charges) == 0 && se == 1.0 && sd == 1e-6 && charges == 1);
    /* A zCDP ledger cannot take an (ε, δ > 0) charge: refused, no handle. */
    CHECK(dpattn_ledger_new_zcdp(TOKEN, 10.0, &zl) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(zl, &zs) == DPATTN_STATUS_OK);
    t2 = (dpattn_dp_tree *)(void *)&x;
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, zs, &t2) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(t2 == (dpattn_dp_tree *)(void *)&x);
    CHECK(dpattn_ledger_charges(zl, &charges) == DPATTN_STATUS_OK && charges == 0);
    dpattn_session_free(zs);
    dpattn_ledger_free(zl);
    CHECK(dpattn_dp_tree_info(t, &nl, &depth, &bound, &var) == DPATTN_STATUS_OK);
    CHECK(nl == 8 && depth == 3 && bound > 0 && var > 0 && var <= bound * bound);
    /* TLap is bounded: each answer reads <= L nodes, each off by <= B. */
    for (j = 0; j < 8; j++) {
        double el, er;
        CHECK(dpattn_dp_tree_query_leaf(ex, j, &el, &er) == DPATTN_STATUS_OK);
        CHECK(dpattn_dp_tree_query_leaf(t, j, &l, &r) == DPATTN_STATUS_OK);
        CHECK(fabs(l - el) <= 3 * bound && fabs(r - er) <= 3 * bound);
    }
    /* Node noise is addressed by node: replay sessions at the same (key, epoch, stream) ->
     * the same bits; another key, or the session's next stream, differs. */
    CHECK(dpattn_session_new_for_replay(&key, 1, 0, NULL, &rp1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&key, 1, 0, NULL, &rp2) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&key2, 1, 0, NULL, &rp3) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp2, &t3) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_query_leaf(t2, 3, &l, &r) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_query_leaf(t3, 3, &l2, &r2) == DPATTN_STATUS_OK);
    CHECK(memcmp(&l, &l2, sizeof l) == 0 && memcmp(&r, &r2, sizeof r) == 0);
    dpattn_dp_tree_free(t3);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp2, &t3) == DPATTN_STATUS_OK); /* stream 1 */
    CHECK(dpattn_dp_tree_query_leaf(t3, 3, &l2, &r2) == DPATTN_STATUS_OK && l2 != l);
    dpattn_dp_tree_free(t3);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp3, &t3) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_query_leaf(t3, 3, &l2, &r2) == DPATTN_STATUS_OK && l2 != l);
    dpattn_dp_tree_free(t3);
    dpattn_dp_tree_free(t2);
    dpattn_session_free(rp2);
    dpattn_session_free(rp3);
    /* Clamping: values far out of [-b, b] act as +-b (NaN as 0): a per-value map. */
    {
        const double wild[2] = {1e300, NAN};
        CHECK(dpattn_dp_tree_new(wild, 2, 1.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_OK);
        dpattn_dp_tree_free(t2);
    }
    /* Bad input. */
    l = 77;
    CHECK(dpattn_dp_tree_query_leaf(t, 8, &l, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("leaf") && l == 77);
    CHECK(dpattn_dp_tree_touched_nodes(t, nodes, 2, sides, 3, 5, &cnt) == DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("out_nodes"));
    CHECK(dpattn_dp_tree_touched_nodes(t, nodes, 3, (uint32_t *)(void *)nodes, 3, 5, &cnt) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_dp_tree_touched_nodes(t, nodes, 3, sides, 3, 5, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_count"));
    CHECK(dpattn_dp_tree_new(v, 0, 8.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_dp_tree_new(NULL, 8, 8.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("values"));
    CHECK(dpattn_dp_tree_new(v, SIZE_MAX / 4, 8.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(dpattn_dp_tree_new(v, 8, NAN, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("bound"));
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 0.0, 1e-6, rp1, &t2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1.0, rp1, &t2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, NULL, &t2) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp1, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_tree"));
    dpattn_session_free(rp1);
    CHECK(dpattn_dp_tree_new(v, 8, 8.0, 1.0, 1e-6, rp1, &t2) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
    /* Only the one build on the ledger's session was charged. */
    CHECK(spent_approx(lg, &se, &sd, &charges) == 0 && charges == 1);
    dpattn_session_free(s);
    dpattn_ledger_free(lg);
    {
        double bad[2] = {1.0, INFINITY};
        CHECK(dpattn_dp_tree_new_exact(bad, 2, &t2) == DPATTN_STATUS_NON_FINITE);
    }
    /* Freed handles: detected; double free and NULL free are harmless. */
    dpattn_dp_tree_free(t);
    CHECK(dpattn_dp_tree_query_leaf(t, 3, &l, &r) == DPATTN_STATUS_INVALID_HANDLE && msg_has("tree"));
    CHECK(dpattn_dp_tree_info(t, &nl, &depth, &bound, &var) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_dp_tree_free(t);
    dpattn_dp_tree_free(NULL);
    CHECK(dpattn_dp_tree_node(NULL, 2, &x) == DPATTN_STATUS_NULL_ARGUMENT);
    /* A handle of another type is not a tree. */
    CHECK(dpattn_dp_tree_distance_info((const dpattn_dp_tree_distance *)(const void *)ex, &vv, &depth) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_dp_tree_free(ex);
    return 0;
}

static int distance(void) {
    /* Figure 1 (T1-C, P1-AC3), noise-free with N = 16. */
    const double x[9] = {0.1, 0.3, 0.3, 0.3, 0.4, 0.6, 0.7, 0.9, 0.9};
    const double w[9] = {2.2, 3.1, -2.0, -3.0, 2.0, 6.0, 0.5, -1.0, 1.0};
    const double y1[5] = {0.0, 0.25, 0.5, 0.95, 1.0}, want1[5] = {4.4, 2.955, 1.4, 3.96, 4.4};
    const double y2[3] = {0.0, 0.25, 0.5}, want2[3] = {2.576, 0.93075, 0.376};
    dpattn_dp_tree_distance_params p = {1, 1.0, 6.0, 1.0, 1e-3};
    dpattn_dp_tree_distance *t = NULL, *n1 = NULL, *n2 = NULL;
    dpattn_key key;
    dpattn_session *r1 = NULL, *r2 = NULL, *ls = NULL;
    dpattn_ledger *lg = NULL;
    size_t nl = 0, i;
    uint32_t depth = 0;
    uint64_t charges = 0;
    double v = 0, v2 = 0, var = 0, se = 0, sd = 0;
    memset(key.bytes, 1, 32);

    CHECK(dpattn_dp_tree_distance_new_exact(x, 9, w, 9, 16, &p, &t) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_info(t, &nl, &depth) == DPATTN_STATUS_OK && nl == 16 && depth == 4);
    for (i = 0; i < 5; i++) CHECK(dpattn_dp_tree_distance_query(t, y1[i], &v) == DPATTN_STATUS_OK && fabs(v - want1[i]) < 1e-12);
    CHECK(dpattn_dp_tree_distance_noise_variance(t, 0.5, &var) == DPATTN_STATUS_OK && var == 0.0);
    dpattn_dp_tree_distance_free(t);
    p.p = 2;
    CHECK(dpattn_dp_tree_distance_new_exact(x, 9, w, 9, 16, &p, &t) == DPATTN_STATUS_OK);
    for (i = 0; i < 3; i++) CHECK(dpattn_dp_tree_distance_query(t, y2[i], &v) == DPATTN_STATUS_OK && fabs(v - want2[i]) < 1e-12);
    v = 5;
    CHECK(dpattn_dp_tree_distance_query(t, 1.5, &v) == DPATTN_STATUS_OUT_OF_RANGE && v == 5);
    CHECK(dpattn_dp_tree_distance_query(t, NAN, &v) == DPATTN_STATUS_NON_FINITE);
    CHECK(dpattn_dp_tree_distance_noise_variance(t, -0.1, &var) == DPATTN_STATUS_OUT_OF_RANGE);
    dpattn_dp_tree_distance_free(t);
    /* Noisy: reproducible from (key, epoch, stream); variance positive. */
    p.p = 1;
    CHECK(dpattn_session_new_for_replay(&key, 2, 5, NULL, &r1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&key, 2, 5, NULL, &r2) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, &p, r1, &n1) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, &p, r2, &n2) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_query(n1, 0.5, &v) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_query(n2, 0.5, &v2) == DPATTN_STATUS_OK && memcmp(&v, &v2, sizeof v) == 0);
    CHECK(dpattn_dp_tree_distance_noise_variance(n1, 0.5, &var) == DPATTN_STATUS_OK && var > 0);
    dpattn_dp_tree_distance_free(n1);
    dpattn_dp_tree_distance_free(n2);
    dpattn_dp_tree_distance_free(n2);
    CHECK(dpattn_dp_tree_distance_query(n2, 0.5, &v) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 8, &p, r1, &n1) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("w"));
    p.p = 9;
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, &p, r1, &n1) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("p"));
    p.p = 1;
    CHECK(dpattn_dp_tree_distance_new_exact(x, 9, w, 9, 12, &p, &n1) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("n_leaves"));
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, NULL, r1, &n1) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("params"));
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, &p, NULL, &n1) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    dpattn_session_free(r1);
    dpattn_session_free(r2);
    /* On a session over a ledger for tokens: charged the params' (ε, δ) = (1, 1e-3). */
    CHECK(dpattn_ledger_new_approx(TOKEN, 10.0, 0.5, &lg) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(lg, &ls) == DPATTN_STATUS_OK);
    CHECK(dpattn_dp_tree_distance_new(x, 9, w, 9, &p, ls, &n1) == DPATTN_STATUS_OK);
    dpattn_dp_tree_distance_free(n1);
    CHECK(spent_approx(lg, &se, &sd, &charges) == 0 && se == 1.0 && sd == 1e-3 && charges == 1);

    /* High-dim: eps_k = c eps / sqrt(d ln(1/delta')), delta_k = delta/d; the achieved eps'
     * is at most d eps_k (e^eps_k - 1) + eps_k sqrt(2 d ln(1/delta')) (Lemma E.1). */
    {
        const double hx[4] = {0.1, 0.9, 0.5, 0.5}, hw[2] = {1.0, 1.0}, y[2] = {0.0, 0.0};
        dpattn_dp_tree_high_dim_params hp = {1, 1.0, 1.0, 0.5, 1e-6, 1e-6, 0.09};
        dpattn_dp_tree_high_dim *h = NULL;
        double ek = 0.09 * 0.5 / sqrt(2 * log(1e6)), e = 0, d = 0;
        CHECK(dpattn_dp_tree_high_dim_new(hx, 4, 2, 2, 2, hw, 2, &hp, ls, &h) == DPATTN_STATUS_OK);
        CHECK(dpattn_dp_tree_high_dim_per_coordinate(h, &e, &d) == DPATTN_STATUS_OK);
        CHECK(rel(e, ek, 1e-12) && rel(d, 0.5e-6, 1e-12));
        CHECK(dpattn_dp_tree_high_dim_achieved_privacy(h, &e, &d) == DPATTN_STATUS_OK);
        /* Never worse than basic composition (2 eps_k, delta) or advanced (+ delta'). */
        CHECK(e <= fmin(2 * ek, 2 * ek * expm1(ek) + ek * sqrt(4 * log(1e6))) * (1 + 1e-9));
        CHECK(d >= 1e-6 * (1 - 1e-12) && d <= 2e-6 * (1 + 1e-9));
        /* The session's ledger was charged exactly what the structure achieves. */
        CHECK(spent_approx(lg, &se, &sd, &charges) == 0 && charges == 2);
        CHECK(rel(se - 1.0, e, 1e-9) && rel(sd - 1e-3, d, 1e-6));
        CHECK(dpattn_dp_tree_high_dim_query(h, y, 2, &v) == DPATTN_STATUS_OK && isfinite(v));
        CHECK(dpattn_dp_tree_high_dim_noise_variance(h, y, 2, &var) == DPATTN_STATUS_OK && var > 0);
        CHECK(dpattn_dp_tree_high_dim_query(h, y, 1, &v) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("y"));
        CHECK(dpattn_dp_tree_high_dim_noise_variance(h, NULL, 2, &var) == DPATTN_STATUS_NULL_ARGUMENT);
        dpattn_dp_tree_high_dim_free(h);
        CHECK(dpattn_dp_tree_high_dim_query(h, y, 2, &v) == DPATTN_STATUS_INVALID_HANDLE);
        dpattn_dp_tree_high_dim_free(h);
        CHECK(dpattn_dp_tree_high_dim_new(hx, 3, 2, 2, 2, hw, 2, &hp, ls, &h) == DPATTN_STATUS_BUFFER_TOO_SHORT);
        CHECK(dpattn_dp_tree_high_dim_new(hx, 4, 2, 2, 2, hw, 1, &hp, ls, &h) == DPATTN_STATUS_SHAPE_MISMATCH);
        hp.c = 1.5;
        CHECK(dpattn_dp_tree_high_dim_new(hx, 4, 2, 2, 2, hw, 2, &hp, ls, &h) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("c"));
    }
    dpattn_session_free(ls);
    dpattn_ledger_free(lg);
    return 0;
}

static int feature_map(void) {
    dpattn_taylor_feature_map *m = NULL;
    const double x[2] = {1.0, 2.0}, y[2] = {2.0, 1.0};
    double px[6], py[6], bnd[6], dot = 0, k = 0, tau = 0, z = 0, g = 0;
    size_t dim = 0, r = 0, i;
    uint32_t s = 0;
    /* T1-H, first example: d = 2, s = 2, tau = 1/2: P(x).P(y) = T_2(2) = 5. */
    CHECK(dpattn_taylor_feature_map_new(2, 2, 0.5, &m) == DPATTN_STATUS_OK);
    CHECK(dpattn_taylor_feature_map_info(m, &dim, &s, &tau, &r) == DPATTN_STATUS_OK);
    CHECK(dim == 2 && s == 2 && tau == 0.5 && r == 6);
    CHECK(dpattn_taylor_feature_map_eval(m, px, 6, x, 2) == DPATTN_STATUS_OK);
    CHECK(dpattn_taylor_feature_map_eval(m, py, 6, y, 2) == DPATTN_STATUS_OK);
    for (i = 0; i < 6; i++) dot += px[i] * py[i];
    CHECK(fabs(dot - 5.0) < 1e-12);
    /* Canonical order: 1, sqrt(tau) x1, sqrt(tau) x2, tau x1^2/sqrt2, tau x1 x2, tau x2^2/sqrt2. */
    CHECK(px[0] == 1.0 && rel(px[1], sqrt(0.5), 1e-15) && rel(px[4], 0.5 * 2.0, 1e-15) && rel(px[5], 0.5 * 4 / sqrt(2.0), 1e-15));
    CHECK(dpattn_taylor_feature_map_kernel(m, x, 2, y, 2, &k) == DPATTN_STATUS_OK && k == taylor(0.5 * 4.0, 2));
    CHECK(dpattn_taylor_feature_map_range(m, 2.0, &z, &g) == DPATTN_STATUS_OK);
    CHECK(rel(z, 0.5 * 2 * 4, 1e-15) && rel(g, fmax(1.0, fmax(2.0, 4.0 / sqrt(2.0))) /* R_eff = sqrt(tau d) R = 2 */, 1e-14));
    /* 0 <= P_a(x) <= beta_a for x in [0, R]^d (P1-AC4). */
    CHECK(dpattn_taylor_feature_map_feature_bounds(m, bnd, 6, 2.0) == DPATTN_STATUS_OK);
    for (i = 0; i < 6; i++) CHECK(px[i] >= 0 && px[i] <= bnd[i] * (1 + 1e-15) && bnd[i] <= g * (1 + 1e-15));
    /* Bad input. */
    px[0] = 9;
    CHECK(dpattn_taylor_feature_map_eval(m, px, 5, x, 2) == DPATTN_STATUS_SHAPE_MISMATCH && px[0] == 9);
    CHECK(dpattn_taylor_feature_map_eval(m, px, 6, x, 3) == DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_taylor_feature_map_eval(m, px, 6, px, 2) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_taylor_feature_map_kernel(m, x, 1, y, 2, &k) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("x"));
    CHECK(dpattn_taylor_feature_map_range(m, -1.0, &z, &g) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("radius"));
    CHECK(dpattn_taylor_feature_map_feature_bounds(m, bnd, 6, NAN) == DPATTN_STATUS_OUT_OF_RANGE);
    dpattn_taylor_feature_map_free(m);
    CHECK(dpattn_taylor_feature_map_info(m, &dim, &s, &tau, &r) == DPATTN_STATUS_INVALID_HANDLE && msg_has("map"));
    dpattn_taylor_feature_map_free(m);
    CHECK(dpattn_taylor_feature_map_new(0, 2, 0.5, &m) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("dim"));
    CHECK(dpattn_taylor_feature_map_new(2, 65, 0.5, &m) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("degree"));
    CHECK(dpattn_taylor_feature_map_new(2, 2, 0.0, &m) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("tau"));
    CHECK(dpattn_taylor_feature_map_new(2, 2, 0.5, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    return 0;
}

static int softmax(void) {
    const double keys[6] = {0.2, 0.9, 0.5, 0.1, 1.0, 0.4}, w[3] = {1.0, -1.0, 0.5}, y[2] = {0.3, 0.7};
    dpattn_softmax_tree_params p;
    dpattn_softmax_tree_adaptive_params ap;
    dpattn_softmax_tree *ex = NULL, *t = NULL, *t2 = NULL;
    dpattn_softmax_tree_adaptive *a = NULL;
    dpattn_softmax_tree_shape sh;
    dpattn_softmax_budget b;
    dpattn_key key;
    dpattn_session *r1 = NULL, *r2 = NULL, *ls = NULL;
    dpattn_ledger *lg = NULL;
    double sc[64], z = 0, z2 = 0, want = 0, abs_sum = 0, e = 0, d = 0, var = 0, pwx = 0, sw = 0;
    double se = 0, sd = 0;
    size_t len = 0, l = 0, i;
    uint32_t depth = 0;
    uint64_t charges = 0;
    memset(key.bytes, 3, 32);
    CHECK(dpattn_session_new_for_replay(&key, 3, 0, NULL, &r1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&key, 3, 0, NULL, &r2) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_new_approx(TOKEN, 10.0, 1e-3, &lg) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(lg, &ls) == DPATTN_STATUS_OK);

    CHECK(dpattn_softmax_tree_params_default(&p) == DPATTN_STATUS_OK);
    CHECK(p.epsilon == 0 && p.c == 0.09 && p.eps_s == 0.01 && p.strict == 1 && p.memory_limit_bytes == (1u << 30));
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    p.epsilon = 0.5; p.delta = 1e-6; p.delta_prime = 1e-6;

    /* Noise-free: within eps_s sum|w| e^z of the exact w^T exp(tau X y) plus own-bin bias;
     * the core's documented tolerance for this example is 0.01 * 3 * 1.5. */
    CHECK(dpattn_softmax_tree_new_exact(keys, 6, 3, 2, 2, w, 3, &p, &ex) == DPATTN_STATUS_OK);
    {
        /* An exact (noise-free) structure refuses every privacy / noise report. */
        double pe = -1.0, pd = -1.0, nv = -1.0;
        dpattn_softmax_budget bud;
        CHECK(dpattn_softmax_tree_achieved_privacy(ex, &pe, &pd) == DPATTN_STATUS_UNSUPPORTED && msg_has("_new_exact"));
        CHECK(pe == -1.0 && pd == -1.0);
        CHECK(dpattn_softmax_tree_noise_variance(ex, y, 2, &nv) == DPATTN_STATUS_UNSUPPORTED && nv == -1.0);
        CHECK(dpattn_softmax_tree_get_budget(ex, &bud) == DPATTN_STATUS_UNSUPPORTED);
    }
    for (i = 0; i < 3; i++) {
        double zz = exp((keys[2 * i] * y[0] + keys[2 * i + 1] * y[1]) / 2.0);
        want += w[i] * zz;
        abs_sum += fabs(w[i]) * zz;
    }
    CHECK(dpattn_softmax_tree_query_scratch_len(ex, &len) == DPATTN_STATUS_OK && len == 15 + 2);
    CHECK(dpattn_softmax_tree_query(ex, y, 2, sc, len, &z) == DPATTN_STATUS_OK);
    CHECK(fabs(z - want) < 0.01 * 3 * 1.5 && abs_sum > 0);
    CHECK(dpattn_softmax_tree_info(ex, &sh, &depth) == DPATTN_STATUS_OK);
    CHECK(sh.dim == 2 && sh.degree == 4 && sh.tau == 0.5 && sh.features == 15 && sh.copies == 1 && depth == 2);
    CHECK(rel(sh.gamma, 1.0, 1e-15)); /* R_eff = 1: Gamma = max(1, 1/sqrt(j!)) = 1 */

    /* Replay: the same (key, epoch, stream) gives the same bits (the refused call above
     * took no stream id). */
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r2, &t2) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_query(t, y, 2, sc, len, &z) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_query(t2, y, 2, sc, len, &z2) == DPATTN_STATUS_OK && memcmp(&z, &z2, sizeof z) == 0);
    CHECK(dpattn_softmax_tree_noise_variance(t, y, 2, &var) == DPATTN_STATUS_OK && var > 1e6); /* useless at n = 3 */
    CHECK(dpattn_softmax_tree_achieved_privacy(t, &e, &d) == DPATTN_STATUS_OK && e <= 0.5 && d <= 2e-6 * (1 + 1e-12));
    /* On a session over a ledger for tokens: charged exactly what it achieves. */
    {
        dpattn_softmax_tree *t3 = NULL;
        CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, ls, &t3) == DPATTN_STATUS_OK);
        dpattn_softmax_tree_free(t3);
        CHECK(spent_approx(lg, &se, &sd, &charges) == 0 && se == e && sd == d && charges == 1);
    }
    CHECK(dpattn_softmax_tree_get_budget(t, &b) == DPATTN_STATUS_OK && b.features == 15 && b.depth == 2 && b.copy_epsilon == 0.5);
    CHECK(dpattn_softmax_tree_scalars(t, &pwx, &sw) == DPATTN_STATUS_OK && isfinite(pwx) && isfinite(sw));
    /* Bad queries and scratch; the answer is untouched. */
    z2 = 123;
    CHECK(dpattn_softmax_tree_query(t, y, 2, sc, len - 1, &z2) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_softmax_tree_query(t, y, 1, sc, len, &z2) == DPATTN_STATUS_SHAPE_MISMATCH);
    {
        const double out_of[2] = {1.5, 0.5}, nan_q[2] = {NAN, 0.5};
        CHECK(dpattn_softmax_tree_query(t, out_of, 2, sc, len, &z2) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(dpattn_softmax_tree_query(t, nan_q, 2, sc, len, &z2) == DPATTN_STATUS_NON_FINITE);
    }
    CHECK(dpattn_softmax_tree_query(t, sc, 2, sc, len, &z2) == DPATTN_STATUS_ALIASING);
    CHECK(z2 == 123);
    dpattn_softmax_tree_free(t2);
    dpattn_softmax_tree_free(t2);
    CHECK(dpattn_softmax_tree_query(t2, y, 2, sc, len, &z2) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_softmax_tree_free(t);
    dpattn_softmax_tree_free(ex);
    /* Build-time refusals: memory limit (before allocating), shapes, enum values. */
    p.memory_limit_bytes = 16;
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_MEMORY_LIMIT);
    p.memory_limit_bytes = 1u << 30;
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 2, &p, r1, &t) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("weights"));
    CHECK(dpattn_softmax_tree_new(keys, 5, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    p.strict = 2;
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("strict"));
    p.strict = 1; p.temperature = 5;
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("temperature"));
    p.temperature = DPATTN_SOFTMAX_TREE_TEMPERATURE_CUSTOM; p.tau = -1;
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OUT_OF_RANGE);
    p.temperature = 0; p.query_policy = 4;
    CHECK(dpattn_softmax_tree_new_exact(keys, 6, 3, 2, 2, w, 3, &p, &t) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("query_policy"));
    p.query_policy = DPATTN_SOFTMAX_TREE_QUERY_CLAMP; p.c = 0.5; /* c in (0, 0.1) when strict */
    CHECK(dpattn_softmax_tree_new(keys, 6, 3, 2, 2, w, 3, &p, r1, &t) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("c"));
    p.c = 0.09;

    /* Adaptive: l = 29 for d = 2 by default (T1-I); five fixed copies here. */
    CHECK(dpattn_softmax_tree_adaptive_params_default(&ap) == DPATTN_STATUS_OK);
    ap.tree = p;
    CHECK(dpattn_softmax_tree_adaptive_copy_count(&ap, 2, &l) == DPATTN_STATUS_OK && l == 29);
    ap.copies.kind = DPATTN_SOFTMAX_TREE_COPIES_FIXED; ap.copies.fixed = 5;
    CHECK(dpattn_softmax_tree_adaptive_copy_count(&ap, 2, &l) == DPATTN_STATUS_OK && l == 5);
    CHECK(dpattn_softmax_tree_adaptive_new(keys, 6, 3, 2, 2, w, 3, &ap, ls, &a) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_adaptive_info(a, &sh, &b) == DPATTN_STATUS_OK && sh.copies == 5 && sh.features == 15);
    CHECK(rel(b.copy_epsilon, 0.5 / 5, 1e-12) && sh.gamma == 1.0);
    {
        /* Charged exactly what it achieves, on top of the softmax tree's (se, sd). */
        double se2 = 0, sd2 = 0;
        CHECK(dpattn_softmax_tree_adaptive_achieved_privacy(a, &e, &d) == DPATTN_STATUS_OK && e <= 0.5);
        CHECK(spent_approx(lg, &se2, &sd2, &charges) == 0 && charges == 2);
        CHECK(rel(se2 - se, e, 1e-9) && rel(sd2 - sd, d, 1e-6));
    }
    CHECK(dpattn_softmax_tree_adaptive_query_scratch_len(a, &len) == DPATTN_STATUS_OK && len == 15 + 2 + 5);
    CHECK(dpattn_softmax_tree_adaptive_query(a, y, 2, sc, len, &z) == DPATTN_STATUS_OK && isfinite(z));
    {
        const double far[2] = {7.0, 0.5}; /* clamped to (1, 0.5) by the policy */
        const double clamped[2] = {1.0, 0.5};
        CHECK(dpattn_softmax_tree_adaptive_query(a, far, 2, sc, len, &z) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_adaptive_query(a, clamped, 2, sc, len, &z2) == DPATTN_STATUS_OK && z == z2);
    }
    CHECK(dpattn_softmax_tree_adaptive_copy_noise_variance(a, y, 2, &var) == DPATTN_STATUS_OK && var > 0);
    CHECK(dpattn_softmax_tree_adaptive_query(a, y, 2, sc, len - 1, &z) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    dpattn_softmax_tree_adaptive_free(a);
    CHECK(dpattn_softmax_tree_adaptive_query(a, y, 2, sc, len, &z) == DPATTN_STATUS_INVALID_HANDLE);
    dpattn_softmax_tree_adaptive_free(a);
    ap.snap_to_net = 3;
    CHECK(dpattn_softmax_tree_adaptive_new(keys, 6, 3, 2, 2, w, 3, &ap, r1, &a) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("snap_to_net"));
    ap.snap_to_net = 0; ap.p_fail = 0.5; /* (0, 0.01] when strict */
    CHECK(dpattn_softmax_tree_adaptive_new(keys, 6, 3, 2, 2, w, 3, &ap, r1, &a) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("p_fail"));
    ap.p_fail = 0.01; ap.tree.memory_limit_bytes = 64;
    CHECK(dpattn_softmax_tree_adaptive_new(keys, 6, 3, 2, 2, w, 3, &ap, r1, &a) == DPATTN_STATUS_MEMORY_LIMIT);
    CHECK(dpattn_softmax_tree_adaptive_copy_count(NULL, 2, &l) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_softmax_tree_adaptive_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_softmax_tree_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_softmax_tree_adaptive_new(keys, 6, 3, 2, 2, w, 3, &ap, NULL, &a) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    dpattn_session_free(r1);
    dpattn_session_free(r2);
    dpattn_session_free(ls);
    dpattn_ledger_free(lg);
    return 0;
}

int dpattn_c_softmax_tree(void) {
    int line;
    if ((line = scalars()) != 0) return line;
    if ((line = trees()) != 0) return line;
    if ((line = distance()) != 0) return line;
    if ((line = feature_map()) != 0) return line;
    return softmax();
}
