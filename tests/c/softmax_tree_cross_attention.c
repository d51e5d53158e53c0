/*
 * Paper 001's DPCrossAttention through the C ABI (dpattn_softmax_tree_cross_attention_*).
 * Returns 0 or the line of the failed check.
 *
 * Independent derivations in C: the error estimate's relative part is 2 eps_s / (1 - eps_s);
 * the domain report counts hand-placed violations; answers lie in [-R_w, R_w] (the query
 * clamps of docs/PAPERS.md P1-X8); the achieved budget is within the requested
 * (eps, delta + delta') (the paper's Remark 4.2, per-vector split).
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int test_cross_attention(void) {
    /* n = 3 tokens, d = 2 (paper 001 example scale; far too small to be accurate). */
    double keys[6] = {0.1, 0.8, 0.6, 0.3, 0.9, 0.2}, vals[6] = {0.5, -0.5, 1.0, 0.0, -1.0, 0.25};
    double bad_k[6] = {0.1, 1.8, 0.6, -0.3, 0.9, 0.2}, bad_v[6] = {0.5, -0.5, 1.0, 0.0, NAN, 2.0};
    double qv[2] = {0.5, 0.25}, o1[2], o2[2], *scr, e = 0, dl = 0;
    dpattn_softmax_tree_cross_attention_params p;
    dpattn_softmax_tree_cross_attention_query_info info;
    dpattn_softmax_tree_cross_attention_error_estimate est;
    dpattn_domain_report rep;
    dpattn_softmax_tree_cross_attention *a = NULL, *a2 = NULL;
    dpattn_key key;
    dpattn_session *r1 = NULL, *r2 = NULL;
    const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
    uint64_t bytes = 0;
    size_t n = 0;
    size_t live = dpattn_live_handle_count();

    memset(&key, 9, sizeof key);
    /* Two replay sessions of one (master key, epoch, stream): the same release twice. */
    CHECK(dpattn_session_new_for_replay(&key, 4, 1, NULL, &r1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&key, 4, 1, NULL, &r2) == DPATTN_STATUS_OK);
    CHECK(dpattn_softmax_tree_cross_attention_params_default(&p) == DPATTN_STATUS_OK);
    CHECK(isnan(p.epsilon) && p.split == DPATTN_SPLIT_PER_VECTOR && p.clamp_outputs == 1);
    CHECK(dpattn_softmax_tree_cross_attention_estimate_bytes(1000, 2, &p, &bytes) ==
          DPATTN_STATUS_OUT_OF_RANGE && bytes == 0 && msg_has("epsilon"));
    p.epsilon = 0.9; p.delta = 1e-6; p.delta_prime = 1e-6;
    CHECK(dpattn_softmax_tree_cross_attention_estimate_bytes(1000, 2, &p, &bytes) == 0 && bytes > 0);
    CHECK(dpattn_softmax_tree_cross_attention_estimate_error(1000000, 2, &p, &est) == DPATTN_STATUS_OK);
    CHECK(fabs(est.relative - 0.02 / 0.99) < 1e-15 && est.copies % 2 == 1);
    CHECK(est.additive > 0.0 && est.sigma_weighted > 0.0);

    CHECK(dpattn_softmax_tree_cross_attention_check_domain(bad_k, 6, bad_v, 6, 3, 2, 1.0, 1.0, &rep) == 0);
    CHECK(rep.keys_outside == 2 && rep.values_outside == 1 && rep.non_finite == 1);
    CHECK(dpattn_softmax_tree_cross_attention_check_domain(bad_k, 5, bad_v, 6, 3, 2, 1.0, 1.0, &rep) ==
          DPATTN_STATUS_SHAPE_MISMATCH && msg_has("keys"));

    p.copies_kind = DPATTN_COPIES_FIXED; p.copies_fixed = 3;
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, r1, &a) == 0);
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, r2, &a2) == 0);
    CHECK(a != NULL && a2 != NULL && a != a2);
    CHECK(dpattn_softmax_tree_cross_attention_query_scratch_len(a, &n) == 0 && n > 0);
    scr = malloc(n * sizeof *scr);
    CHECK(scr != NULL);
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o1, 2, qv, 2, scr, n, &info) == DPATTN_STATUS_OK);
    CHECK(fabs(o1[0]) <= 1.0 && fabs(o1[1]) <= 1.0 && info.denominator >= 3.0);
    /* Same key, epoch and stream: the same release, the same answers, bit for bit. */
    CHECK(dpattn_softmax_tree_cross_attention_query(a2, o2, 2, qv, 2, scr, n, &info) == DPATTN_STATUS_OK);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    CHECK(dpattn_softmax_tree_cross_attention_achieved_privacy(a, &e, &dl) == DPATTN_STATUS_OK);
    CHECK(e > 0.0 && e <= 0.9 * (1 + 1e-12) && dl > 0.0 && dl <= 2e-6 * (1 + 1e-12));
    /* The session's ledger is charged what dpattn_softmax_tree_cross_attention_achieved_privacy reports
       (a replay session over a ledger: the same release as above); a session with a key
       from the operating system draws fresh noise; a too-small ledger, a zCDP one (δ > 0)
       or one kept for another unit refuses and returns no handle. */
    {
        dpattn_softmax_tree_cross_attention *a3 = NULL, *a4 = (dpattn_softmax_tree_cross_attention *)(void *)&bytes;
        dpattn_ledger *l = NULL, *tiny = NULL, *z = NULL, *pr = NULL;
        dpattn_session *sl = NULL, *os = NULL, *st = NULL, *sz = NULL, *sp = NULL;
        const dpattn_privacy_unit prompt = {DPATTN_UNIT_PROMPT, 0};
        dpattn_amount spent;
        double e3 = 0, dl3 = 0;
        uint64_t charges = 9;
        CHECK(dpattn_ledger_new_approx(token, 2.0, 1e-5, &l) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new_for_replay(&key, 4, 1, l, &sl) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, sl, &a3) == 0);
        CHECK(dpattn_softmax_tree_cross_attention_achieved_privacy(a3, &e3, &dl3) == DPATTN_STATUS_OK);
        CHECK(e3 == e && dl3 == dl);
        CHECK(dpattn_ledger_spent(l, &spent) == DPATTN_STATUS_OK);
        CHECK(spent.kind == DPATTN_AMOUNT_APPROX && spent.epsilon == e && spent.delta == dl);
        CHECK(dpattn_softmax_tree_cross_attention_query(a3, o2, 2, qv, 2, scr, n, &info) == DPATTN_STATUS_OK);
        CHECK(memcmp(o1, o2, sizeof o1) == 0);
        dpattn_softmax_tree_cross_attention_free(a3);
        CHECK(dpattn_session_new(l, &os) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, os, &a3) == 0);
        CHECK(dpattn_ledger_charges(l, &charges) == DPATTN_STATUS_OK && charges == 2);
        dpattn_softmax_tree_cross_attention_free(a3);
        CHECK(dpattn_ledger_new_approx(token, e / 2, 1e-5, &tiny) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(tiny, &st) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, st, &a4) ==
              DPATTN_STATUS_INFEASIBLE);
        CHECK(a4 == (dpattn_softmax_tree_cross_attention *)(void *)&bytes);
        CHECK(dpattn_ledger_charges(tiny, &charges) == DPATTN_STATUS_OK && charges == 0);
        CHECK(dpattn_ledger_new_zcdp(token, 1.0, &z) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(z, &sz) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, sz, &a4) ==
              DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(a4 == (dpattn_softmax_tree_cross_attention *)(void *)&bytes);
        CHECK(dpattn_ledger_new_approx(prompt, 10.0, 1e-5, &pr) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(pr, &sp) == DPATTN_STATUS_OK);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, sp, &a4) ==
              DPATTN_STATUS_UNIT_MISMATCH);
        CHECK(a4 == (dpattn_softmax_tree_cross_attention *)(void *)&bytes);
        dpattn_session_free(st);
        CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, st, &a4) ==
              DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
        CHECK(a4 == (dpattn_softmax_tree_cross_attention *)(void *)&bytes);
        dpattn_session_free(sl);
        dpattn_session_free(os);
        dpattn_session_free(sz);
        dpattn_session_free(sp);
        dpattn_ledger_free(tiny);
        dpattn_ledger_free(z);
        dpattn_ledger_free(pr);
        dpattn_ledger_free(l);
    }
    /* Bad queries: outside [0, R], wrong length, short scratch; out untouched. */
    o2[0] = o2[1] = 7.0;
    qv[0] = 1.5;
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o2, 2, qv, 2, scr, n, &info) == DPATTN_STATUS_OUT_OF_RANGE);
    qv[0] = 0.5;
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o2, 2, qv, 1, scr, n, &info) ==
          DPATTN_STATUS_SHAPE_MISMATCH && msg_has("q"));
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o2, 2, qv, 2, scr, 1, &info) ==
          DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o2, 2, qv, 2, scr, n, NULL) ==
          DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_info"));
    CHECK(o2[0] == 7.0 && o2[1] == 7.0);
    /* Handles: free, double free, use after free, NULL. */
    dpattn_softmax_tree_cross_attention_free(a);
    dpattn_softmax_tree_cross_attention_free(a);
    dpattn_softmax_tree_cross_attention_free(NULL);
    CHECK(dpattn_softmax_tree_cross_attention_query(a, o2, 2, qv, 2, scr, n, &info) ==
          DPATTN_STATUS_INVALID_HANDLE && msg_has("att"));
    CHECK(dpattn_softmax_tree_cross_attention_achieved_privacy(NULL, &e, &dl) == DPATTN_STATUS_NULL_ARGUMENT);
    dpattn_softmax_tree_cross_attention_free(a2);
    free(scr);
    /* Constructor refusals: nothing is returned. */
    a = NULL;
    p.domain_policy = DPATTN_DOMAIN_REJECT; /* not DP: a data-dependent refusal */
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, bad_v, 6, 3, 2, &p, r1, &a) ==
          DPATTN_STATUS_DOMAIN_VIOLATION && a == NULL);
    p.domain_policy = DPATTN_DOMAIN_CLAMP; /* the default clamps: the same data is accepted */
    CHECK(dpattn_softmax_tree_cross_attention_new(bad_k, 6, bad_v, 6, 3, 2, &p, r1, &a) == 0);
    dpattn_softmax_tree_cross_attention_free(a);
    a = NULL;
    p.split = 5;
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, r1, &a) ==
          DPATTN_STATUS_OUT_OF_RANGE && msg_has("params.split") && a == NULL);
    p.split = DPATTN_SPLIT_PER_ENTRY;
    p.delta = 1.0;
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, r1, &a) ==
          DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta") && a == NULL);
    p.delta = 1e-6;
    p.memory_limit_bytes = 16;
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, r1, &a) ==
          DPATTN_STATUS_MEMORY_LIMIT && a == NULL);
    CHECK(dpattn_softmax_tree_cross_attention_new(keys, 6, vals, 6, 3, 2, &p, NULL, &a) ==
          DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    dpattn_session_free(r1);
    dpattn_session_free(r2);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

int dpattn_c_softmax_tree_cross_attention(void) { return test_cross_attention(); }
