/*
 * Weight shuffling / shuffled DP-SGD (paper 002) through the C ABI: plans, permutations,
 * apply/invert, the step with a C gradient callback, and the refutation helpers. The
 * invariance checks run a tiny MLP written here in double precision before and after the
 * permutation; the d = 2 exact δ is re-derived here by numerical integration.
 * Returns 0 on success or the line of the first failed check.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <string.h>

/* y = W2·relu(W1·x + b1) + b2 with W1 5×3 at 0, b1 at 15, W2 2×5 at 20, b2 at 30 (all
   (out, in) row-major); elements 32..34 belong to no block and never move. */
#define IN 3
#define HID 5
#define OUTF 2
#define PLEN 35

static void mlp(const double *w, const double *x, double *y) {
    int i, j;
    double h[HID];
    for (j = 0; j < HID; j++) {
        double s = w[15 + j];
        for (i = 0; i < IN; i++) s += w[j * IN + i] * x[i];
        h[j] = s > 0 ? s : 0;
    }
    for (i = 0; i < OUTF; i++) {
        double s = w[30 + i];
        for (j = 0; j < HID; j++) s += w[20 + i * HID + j] * h[j];
        y[i] = s;
    }
}

static dpattn_shuffle_block mlp_block(void) {
    dpattn_shuffle_block b;
    memset(&b, 0, sizeof b);
    b.kind = DPATTN_SHUFFLE_BLOCK_MLP;
    b.up.weight = 0; b.up.out_features = HID; b.up.in_features = IN;
    b.up.layout = DPATTN_SHUFFLE_LAYOUT_OUT_IN; b.up.has_bias = 1; b.up.bias = 15;
    b.down.weight = 20; b.down.out_features = OUTF; b.down.in_features = HID;
    b.down.layout = DPATTN_SHUFFLE_LAYOUT_OUT_IN; b.down.has_bias = 1; b.down.bias = 30;
    return b;
}

static void init_weights(double *w) {
    int i;
    for (i = 0; i < PLEN; i++) w[i] = sin(1.0 + 0.7 * i); /* mixed signs: some ReLUs off */
}

static int max_diff_ok(const double *w0, const double *w1) {
    /* Same function: only the order of the 5-term hidden sum changes, so outputs agree to
       a few ulp; 1e-12 absolute is far above that and far below any real change. */
    double x[3][IN] = {{0.3, -1.2, 2.0}, {1.0, 1.0, 1.0}, {-0.5, 0.25, -2.0}};
    int k;
    for (k = 0; k < 3; k++) {
        double a[OUTF], b[OUTF];
        mlp(w0, x[k], a);
        mlp(w1, x[k], b);
        if (fabs(a[0] - b[0]) > 1e-12 || fabs(a[1] - b[1]) > 1e-12) return 0;
    }
    return 1;
}

static int plans_and_perms(void) {
    dpattn_shuffle_block b = mlp_block();
    dpattn_shuffle_plan *plan = NULL, *bad = (dpattn_shuffle_plan *)(void *)&b;
    dpattn_shuffle_perms *perms = NULL, *inv = NULL, *id = NULL, *chk = NULL;
    dpattn_key k1, k2;
    size_t plen = 0, nperm = 0, ascr = 0, sscr = 0, moved = 0, total = 0, orbit = 0, n = 0;
    uint32_t idx[HID], idx2[HID], seen = 0;
    double w0[PLEN], w[PLEN], scratch[15];
    int j;
    memset(&k1, 1, sizeof k1);
    memset(&k2, 2, sizeof k2);
    CHECK(dpattn_shuffle_plan_new(&b, 1, PLEN, &plan) == DPATTN_STATUS_OK && plan != NULL);
    CHECK(dpattn_shuffle_plan_sizes(plan, &plen, &nperm, &ascr, &sscr) == DPATTN_STATUS_OK);
    CHECK(plen == PLEN && nperm == HID && ascr == 15 && sscr == 2 * PLEN);
    /* Moved: W1 (15), b1 (5), W2 (10); b2 and the 3 free elements stay: orbit 1. */
    CHECK(dpattn_shuffle_plan_coverage(plan, &moved, &total, &orbit) == DPATTN_STATUS_OK);
    CHECK(moved == 30 && total == PLEN && orbit == 1);

    /* Keyed draws: a bijection of 0..4, replayable, and the handle holds the same values. */
    CHECK(dpattn_shuffle_sample_keyed(idx, HID, plan, &k1, 3) == DPATTN_STATUS_OK);
    for (j = 0; j < HID; j++) seen |= 1u << idx[j];
    CHECK(seen == 0x1F);
    CHECK(dpattn_shuffle_perms_sample_keyed(plan, &k1, 3, &perms) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffle_perms_indices(NULL, 0, perms, &n) == DPATTN_STATUS_OK && n == HID);
    CHECK(dpattn_shuffle_perms_indices(idx2, HID, perms, &n) == DPATTN_STATUS_OK);
    CHECK(memcmp(idx, idx2, sizeof idx) == 0);
    CHECK(dpattn_shuffle_sample_keyed(idx2, HID, plan, &k2, 3) == DPATTN_STATUS_OK);
    CHECK(memcmp(idx, idx2, sizeof idx) != 0); /* another key: another draw (fixed keys) */

    /* Apply: hidden unit j now holds old unit idx[j]; the function is unchanged. */
    init_weights(w0);
    memcpy(w, w0, sizeof w);
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, perms, scratch, 15) == DPATTN_STATUS_OK);
    for (j = 0; j < HID; j++) {
        CHECK(w[15 + j] == w0[15 + idx[j]]);              /* b1 */
        CHECK(w[j * IN + 1] == w0[idx[j] * IN + 1]);      /* row j of W1 */
        CHECK(w[20 + HID + j] == w0[20 + HID + idx[j]]);  /* column j of W2, row 1 */
    }
    CHECK(memcmp(w + 30, w0 + 30, 5 * sizeof w[0]) == 0); /* b2 and the free tail */
    CHECK(memcmp(w, w0, sizeof w) != 0);
    CHECK(max_diff_ok(w0, w));
    /* Invert restores exactly. */
    CHECK(dpattn_shuffle_perms_invert(plan, perms, &inv) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, inv, scratch, 15) == DPATTN_STATUS_OK);
    CHECK(memcmp(w, w0, sizeof w) == 0);
    /* f32 and bf16 buffers move the same way (bf16 as its 16 bits). */
    {
        float wf[PLEN];
        uint16_t wb[PLEN];
        for (j = 0; j < PLEN; j++) {
            wf[j] = (float)j;
            wb[j] = (uint16_t)(0x3F80 + j); /* distinct bf16 patterns near 1.0 */
        }
        CHECK(dpattn_shuffle_apply(wf, PLEN, DPATTN_DTYPE_F32, plan, perms, scratch, 15) == DPATTN_STATUS_OK);
        CHECK(dpattn_shuffle_apply(wb, PLEN, DPATTN_DTYPE_BF16, plan, perms, scratch, 15) == DPATTN_STATUS_OK);
        for (j = 0; j < HID; j++) {
            CHECK(wf[15 + j] == (float)(15 + idx[j]));
            CHECK(wb[15 + j] == (uint16_t)(0x3F80 + 15 + idx[j]));
        }
        CHECK(dpattn_shuffle_apply(wb, PLEN, DPATTN_DTYPE_BF16, plan, inv, scratch, 15) == DPATTN_STATUS_OK);
        for (j = 0; j < PLEN; j++) CHECK(wb[j] == (uint16_t)(0x3F80 + j));
    }
    /* Identity and caller indices. */
    CHECK(dpattn_shuffle_perms_identity(plan, &id) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, id, scratch, 15) == DPATTN_STATUS_OK);
    CHECK(memcmp(w, w0, sizeof w) == 0);
    CHECK(dpattn_shuffle_perms_from_indices(plan, idx, HID, &chk) == DPATTN_STATUS_OK);
    idx2[0] = 0; idx2[1] = 0; idx2[2] = 1; idx2[3] = 2; idx2[4] = 3;
    {
        dpattn_shuffle_perms *none = NULL;
        CHECK(dpattn_shuffle_perms_from_indices(plan, idx2, HID, &none) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(msg_has("permutation index") && none == NULL);
        CHECK(dpattn_shuffle_perms_from_indices(plan, idx2, 4, &none) == DPATTN_STATUS_SHAPE_MISMATCH && none == NULL);
    }

    /* Bad input, nothing written. */
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, perms, scratch, 14) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_shuffle_apply(w, PLEN - 1, DPATTN_DTYPE_F64, plan, perms, scratch, 15) == DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_shuffle_apply(w, PLEN, 4u, plan, perms, scratch, 15) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("dtype"));
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, perms, w + 20, 15) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, bad, perms, scratch, 15) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(msg_has("plan"));
    CHECK(dpattn_shuffle_apply(w, PLEN, DPATTN_DTYPE_F64, plan, NULL, scratch, 15) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(memcmp(w, w0, sizeof w) == 0);
    CHECK(dpattn_shuffle_sample_keyed(idx2, HID - 1, plan, &k1, 0) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("out"));
    CHECK(dpattn_shuffle_sample_keyed(idx2, HID, plan, NULL, 0) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    CHECK(dpattn_shuffle_perms_indices(idx2, 3, perms, &n) == DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_shuffle_plan_sizes(plan, &plen, NULL, &ascr, &sscr) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_shuffle_plan_coverage(NULL, &moved, &total, &orbit) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_shuffle_perms_identity(plan, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_shuffle_perms_invert(plan, NULL, &inv) == DPATTN_STATUS_NULL_ARGUMENT);

    /* Descriptors the core refuses. */
    {
        dpattn_shuffle_plan *none = NULL;
        dpattn_shuffle_block c = b;
        CHECK(dpattn_shuffle_plan_new(&b, 1, 31, &none) == DPATTN_STATUS_BUFFER_TOO_SHORT && none == NULL);
        c.down.in_features = 4;
        CHECK(dpattn_shuffle_plan_new(&c, 1, PLEN, &none) == DPATTN_STATUS_SHAPE_MISMATCH);
        c = b;
        c.down.weight = 10; /* overlaps W1 */
        CHECK(dpattn_shuffle_plan_new(&c, 1, PLEN, &none) == DPATTN_STATUS_OUT_OF_RANGE);
        c = b;
        c.up.has_bias = 2;
        CHECK(dpattn_shuffle_plan_new(&c, 1, PLEN, &none) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("has_bias"));
        c = b;
        c.kind = 7;
        CHECK(dpattn_shuffle_plan_new(&c, 1, PLEN, &none) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("kind"));
        c = b;
        c.up.layout = 3;
        CHECK(dpattn_shuffle_plan_new(&c, 1, PLEN, &none) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("layout"));
        CHECK(dpattn_shuffle_plan_new(&b, 0, PLEN, &none) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(dpattn_shuffle_plan_new(NULL, 1, PLEN, &none) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("blocks"));
        CHECK(dpattn_shuffle_plan_new(&b, 1, PLEN, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_plan"));
        CHECK(none == NULL);
    }
    /* An attention block (separate QKV, 2 heads of 2 features, d_model 4, GQA-free):
       per-head Q/K features (2 × 2) and the value features (2) move: 6 indices. */
    {
        dpattn_shuffle_block a;
        dpattn_shuffle_plan *ap = NULL;
        memset(&a, 0, sizeof a);
        a.kind = DPATTN_SHUFFLE_BLOCK_ATTENTION;
        a.qkv = DPATTN_SHUFFLE_QKV_SEPARATE;
        a.q.weight = 0; a.k.weight = 16; a.v.weight = 32; a.output.weight = 48;
        a.q.out_features = a.k.out_features = a.v.out_features = a.output.out_features = 4;
        a.q.in_features = a.k.in_features = a.v.in_features = a.output.in_features = 4;
        a.heads = 2; a.kv_heads = 2; a.qk_head_dim = 2; a.v_head_dim = 2;
        a.positions = DPATTN_SHUFFLE_POSITIONS_ADDITIVE;
        a.values = DPATTN_SHUFFLE_VALUES_ALL_HEADS;
        CHECK(dpattn_shuffle_plan_new(&a, 1, 64, &ap) == DPATTN_STATUS_OK);
        CHECK(dpattn_shuffle_plan_sizes(ap, &plen, &nperm, &ascr, &sscr) == DPATTN_STATUS_OK && nperm == 6);
        a.positions = DPATTN_SHUFFLE_POSITIONS_ROTARY; /* RoPE: only the value permutation */
        dpattn_shuffle_plan_free(ap);
        CHECK(dpattn_shuffle_plan_new(&a, 1, 64, &ap) == DPATTN_STATUS_OK);
        CHECK(dpattn_shuffle_plan_sizes(ap, &plen, &nperm, &ascr, &sscr) == DPATTN_STATUS_OK && nperm == 2);
        dpattn_shuffle_plan_free(ap);
        a.kv_heads = 3;
        CHECK(dpattn_shuffle_plan_new(&a, 1, 64, &ap) == DPATTN_STATUS_OUT_OF_RANGE);
        a.kv_heads = 2;
        a.values = 9;
        CHECK(dpattn_shuffle_plan_new(&a, 1, 64, &ap) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("values"));
    }
    /* Freed handles are detected; double free and NULL are no-ops. */
    dpattn_shuffle_perms_free(chk);
    dpattn_shuffle_perms_free(chk);
    dpattn_shuffle_perms_free(NULL);
    CHECK(dpattn_shuffle_perms_indices(idx2, HID, chk, &n) == DPATTN_STATUS_INVALID_HANDLE && msg_has("perms"));
    dpattn_shuffle_perms_free(perms);
    dpattn_shuffle_perms_free(inv);
    dpattn_shuffle_perms_free(id);
    dpattn_shuffle_plan_free(plan);
    dpattn_shuffle_plan_free(plan);
    dpattn_shuffle_plan_free(NULL);
    CHECK(dpattn_shuffle_plan_sizes(plan, &plen, &nperm, &ascr, &sscr) == DPATTN_STATUS_INVALID_HANDLE);
    return 0;
}

/* Gradient callback: a fixed per-slot vector (0.01·(slot % 3 + 1) in every coordinate);
   user_data, when set, is the slot at which to fail with DPATTN_STATUS_DOMAIN_VIOLATION. */
static uint32_t grad_cb(void *user, uint64_t slot, const void *weights, size_t wlen, double *g, size_t glen) {
    size_t j;
    (void)weights;
    if (wlen != PLEN || glen != PLEN) return DPATTN_STATUS_INTERNAL;
    if (user != NULL && *(const uint64_t *)user == slot) return DPATTN_STATUS_DOMAIN_VIOLATION;
    for (j = 0; j < glen; j++) g[j] = 0.01 * (double)(slot % 3 + 1);
    return DPATTN_STATUS_OK;
}

/* The epoch key of a session (core `session::epoch_key`): the first 32 bytes of the
   ChaCha20 block of `master` at block counter `epoch` and stream 2⁶⁴ − 1, written here from
   the raw keystream words (little-endian), as an auditor holding the master key would. */
static int epoch_key(const dpattn_key *master, uint64_t epoch, dpattn_key *out) {
    uint32_t words[8];
    int i;
    CHECK(epoch < (UINT64_MAX >> 4));
    CHECK(dpattn_stream_words(master, UINT64_MAX, 16 * epoch, 0, words, 8) == DPATTN_STATUS_OK);
    for (i = 0; i < 32; i++) out->bytes[i] = (uint8_t)(words[i / 4] >> (8 * (i % 4)));
    return 0;
}

static int step(void) {
    dpattn_shuffle_block b = mlp_block();
    dpattn_shuffle_plan *plan = NULL;
    dpattn_shuffled_dp_sgd_params p;
    dpattn_session *ses = NULL, *replay = NULL;
    dpattn_shuffled_dp_sgd_report r, r2;
    dpattn_key key, ek;
    double w0[PLEN], w[PLEN], w2[PLEN], m[PLEN], m0[PLEN], scratch[2 * PLEN], q = 0, s = 0, tail = -1;
    void *state[1];
    uint32_t perms[HID], perms2[HID], drawn[HID];
    uint64_t fail_slot = 0, epoch = 9, next = 9;
    size_t live = dpattn_live_handle_count();
    int j, line;
    memset(&key, 5, sizeof key);
    CHECK(dpattn_shuffle_plan_new(&b, 1, PLEN, &plan) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_params_default(&p) == DPATTN_STATUS_OK);
    CHECK(p.clip_norm == 1.0 && p.batch_clip == DPATTN_SHUFFLE_BATCH_CLIP_NONE && p.has_fixed_noise_multiplier == 0);
    p.sampling_rate = 0.5;
    p.noise_multiplier = 1.2;
    p.has_fixed_noise_multiplier = 1;
    p.fixed_noise_multiplier = 0.9;
    p.learning_rate = 0.0; /* η = 0: the released weights are P[w], the same function */
    p.planned_steps = 10;
    /* The charge: SampledGaussianRdp(q, min(σ, σ₀)) — no credit for shuffling (docs/PAPERS.md
       P2-10). */
    CHECK(dpattn_shuffled_dp_sgd_charge(&p, PLEN, &q, &s, &tail) == DPATTN_STATUS_OK);
    CHECK(q == 0.5 && s == 0.9 && tail >= 0.0 && tail < 1e-10);

    init_weights(w0);
    memcpy(w, w0, sizeof w);
    for (j = 0; j < PLEN; j++) m0[j] = m[j] = j;
    state[0] = m;
    /* A replay session (master key, epoch 3, next stream 0, no ledger) so that the step can
       be reissued and audited below. */
    CHECK(dpattn_session_new_for_replay(&key, 3, 0, NULL, &ses) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r) == DPATTN_STATUS_OK);
    CHECK(r.batch_size > 10 && r.batch_size < 54 && r.non_finite == 0 && r.effective_noise_multiplier == 0.9);
    /* The step took three stream ids (selection, noise, permutations). */
    CHECK(dpattn_session_position(ses, &epoch, &next) == DPATTN_STATUS_OK && epoch == 3 && next == 3);
    /* The permutations are the keyed draw of the third stream (id 2) under the epoch key. */
    if ((line = epoch_key(&key, 3, &ek)) != 0) return line;
    CHECK(dpattn_shuffle_sample_keyed(drawn, HID, plan, &ek, 2) == DPATTN_STATUS_OK);
    CHECK(memcmp(perms, drawn, sizeof perms) == 0);
    /* η = 0: the weights moved but compute the same function; the state moved alike. */
    CHECK(max_diff_ok(w0, w));
    for (j = 0; j < HID; j++) CHECK(m[15 + j] == m0[15 + perms[j]] && w[15 + j] == w0[15 + perms[j]]);
    /* Replay with the same key, epoch and stream: identical bits. */
    memcpy(w2, w0, sizeof w2);
    for (j = 0; j < PLEN; j++) m[j] = j;
    CHECK(dpattn_session_new_for_replay(&key, 3, 0, NULL, &replay) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, replay, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OK);
    CHECK(memcmp(w, w2, sizeof w) == 0 && memcmp(perms, perms2, sizeof perms) == 0);
    CHECK(r.batch_size == r2.batch_size);
    dpattn_session_free(replay);

    /* With η > 0 the update moves every coordinate (noise everywhere). */
    p.learning_rate = 0.1;
    memcpy(w2, w0, sizeof w2);
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, NULL, 0, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OK);
    CHECK(w2[34] != w0[34]);

    /* A failing callback (q = 1: slot 0 is sampled first): its status comes back, the step
       is uncharged and nothing is written. */
    p.sampling_rate = 1.0;
    memcpy(w2, w0, sizeof w2);
    memcpy(perms2, perms, sizeof perms2);
    r2 = r;
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, &fail_slot, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_DOMAIN_VIOLATION);
    CHECK(msg_has("grad"));
    CHECK(memcmp(w2, w0, sizeof w2) == 0 && memcmp(perms2, perms, sizeof perms) == 0);
    CHECK(r2.batch_size == r.batch_size);

    /* Bad input: each refused before anything is written. */
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, (dpattn_session *)(void *)&r, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, NULL, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              NULL, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("grad"));
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 0,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("capacity"));
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN - 1, &r2) == DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID - 1, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_SHAPE_MISMATCH && msg_has("perms"));
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, w2 + 2, 2 * PLEN, &r2) == DPATTN_STATUS_ALIASING);
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 9, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("n_state"));
    /* A session whose epoch has fewer than three stream ids left. */
    CHECK(dpattn_session_new_for_replay(&key, 3, UINT64_MAX - 2, NULL, &replay) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, replay, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("stream"));
    dpattn_session_free(replay);
    p.sampling_rate = 0.0;
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sampling_rate"));
    CHECK(dpattn_shuffled_dp_sgd_charge(&p, PLEN, &q, &s, &tail) == DPATTN_STATUS_OUT_OF_RANGE);
    p.sampling_rate = 0.5;
    w2[4] = NAN;
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_NON_FINITE && msg_has("weights"));
    w2[4] = w0[4];
    p.batch_clip = 5;
    CHECK(dpattn_shuffled_dp_sgd_step(w2, PLEN, DPATTN_DTYPE_F64, state, 1, perms2, HID, plan, &p, 64,
              grad_cb, NULL, ses, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("batch_clip"));
    CHECK(dpattn_shuffled_dp_sgd_charge(NULL, PLEN, &q, &s, &tail) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_shuffled_dp_sgd_params_default(NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(memcmp(w2, w0, sizeof w2) == 0 && memcmp(perms2, perms, sizeof perms) == 0);
    CHECK(r2.batch_size == r.batch_size);
    dpattn_session_free(ses);
    dpattn_shuffle_plan_free(plan);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

static double npdf(double x, double m, double s) {
    double z = (x - m) / s;
    return exp(-0.5 * z * z) / (s * sqrt(2.0 * 3.14159265358979323846));
}

/* δ(p′‖p) = ∫ (p′ − e^ε p)₊ for p = ½N(±c′, σ²), p′ = ½N(±(c + c′), σ²), by the midpoint
   rule on [−30, 30] with h = 2e-4 (tails beyond are < 1e-100; the kinks of (·)₊ give an
   O(h²) error, < 1e-7 here). */
static double delta_d2(double eps, double sigma, double c, double cp, int backward) {
    double h = 2e-4, x, sum = 0, bb = c + cp, ee = exp(eps);
    for (x = -30 + h / 2; x < 30; x += h) {
        double p = 0.5 * (npdf(x, cp, sigma) + npdf(x, -cp, sigma));
        double q = 0.5 * (npdf(x, bb, sigma) + npdf(x, -bb, sigma));
        double v = backward ? q - ee * p : p - ee * q;
        if (v > 0) sum += v * h;
    }
    return sum;
}

static double eq45(double a, double b, double d) {
    double t1 = 1 - a - d > 0 ? log((1 - a - d) / b) : 0, t2 = 1 - b - d > 0 ? log((1 - b - d) / a) : 0;
    double m = t1 > t2 ? t1 : t2;
    return m > 0 ? m : 0;
}

static int refutation(void) {
    double v = -1, fw = 0, bw = 0, h = 0;
    dpattn_shuffle_audit_bound ab;
    dpattn_shuffle_monte_carlo_delta mc, mc2;
    dpattn_key key;
    double scr[2];
    size_t n = 0;
    memset(&key, 7, sizeof key);
    /* Eq. 45: docs/PAPERS.md T2-C gives 1.9458959 at (0.1, 0.3, 1e-5); the closed form here agrees
       to rounding (1e-12). */
    CHECK(dpattn_shuffle_refute_audit_epsilon(0.1, 0.3, 1e-5, &v) == DPATTN_STATUS_OK);
    CHECK(fabs(v - eq45(0.1, 0.3, 1e-5)) < 1e-12 && fabs(v - 1.9458959) < 1e-7);
    CHECK(dpattn_shuffle_refute_audit_epsilon(0.0, 0.3, 1e-5, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("alpha"));
    /* Clopper–Pearson with no successes: 1 − (1 − conf)^(1/n) exactly (1e-12). */
    CHECK(dpattn_shuffle_refute_clopper_pearson_upper(0, 10, 0.95, &v) == DPATTN_STATUS_OK);
    CHECK(fabs(v - (1 - pow(0.05, 0.1))) < 1e-12);
    CHECK(dpattn_shuffle_refute_clopper_pearson_upper(7, 7, 0.95, &v) == DPATTN_STATUS_OK && v == 1.0);
    CHECK(dpattn_shuffle_refute_clopper_pearson_upper(8, 7, 0.95, &v) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("successes"));
    /* The lower bound is Eq. 45 of the two upper bounds taken at (1 + conf)/2 each. */
    CHECK(dpattn_shuffle_refute_audit_epsilon_lower_bound(10, 100, 30, 100, 1e-5, 0.95, &ab) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffle_refute_clopper_pearson_upper(10, 100, 0.975, &v) == DPATTN_STATUS_OK && v == ab.alpha_upper);
    CHECK(fabs(ab.epsilon_lower - eq45(ab.alpha_upper, ab.beta_upper, 1e-5)) < 1e-12);
    CHECK(fabs(ab.epsilon_point - eq45(0.1, 0.3, 1e-5)) < 1e-12 && ab.epsilon_lower < ab.epsilon_point);
    CHECK(dpattn_shuffle_refute_audit_epsilon_lower_bound(1, 0, 1, 1, 0, 0.95, &ab) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("negatives"));

    /* T2-I (a): at d = 2, σ = 1.16125 the paper's Theorem 6 certifies (1, 1e-5) ... */
    CHECK(dpattn_weight_shuffle_paper_thm6_h(1.0, 1.16125, 2.0, 1.0, &h) == DPATTN_STATUS_OK);
    CHECK(h < 1e-5 && fabs(h - 5.97e-7) < 5e-9);
    /* ... while the exact δ is 0.07985 (and 0.01274 the other way): the library, the
       quadrature above and T2-I agree (T2-I prints 4 digits: 5e-6). */
    CHECK(dpattn_shuffle_refute_gaussian_delta_d2(1.0, 1.16125, 1.0, 1.0, &fw, &bw) == DPATTN_STATUS_OK);
    CHECK(fabs(bw - 0.07985) < 5e-6 && fabs(fw - 0.01274) < 5e-6);
    CHECK(fabs(bw - delta_d2(1.0, 1.16125, 1.0, 1.0, 1)) < 1e-6);
    CHECK(fabs(fw - delta_d2(1.0, 1.16125, 1.0, 1.0, 0)) < 1e-6);
    CHECK(dpattn_shuffle_refute_gaussian_delta_d2(1.0, 1.5, 1.0, 1.0, &fw, &bw) == DPATTN_STATUS_OK);
    CHECK(fw == 0.0 && fabs(bw - 0.02907) < 5e-6);
    /* Theorem 6 at d = 1 is the plain Gaussian δ (docs/PAPERS.md T2-B: 0.1269367375). */
    CHECK(dpattn_weight_shuffle_paper_thm6_h(1.0, 1.0, 1.0, 1.0, &h) == DPATTN_STATUS_OK && fabs(h - 0.1269367375) < 1e-9);
    CHECK(dpattn_weight_shuffle_paper_thm6_h(-1.0, 1.0, 1.0, 1.0, &h) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_weight_shuffle_paper_thm6_h(1.0, 1.0, 1.0, 1.0, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(dpattn_shuffle_refute_gaussian_delta_d2(1.0, 0.0, 1.0, 1.0, &fw, &bw) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));

    /* Monte Carlo at d = 2 agrees with the exact value within 5 standard errors; the same
       key replays bit-identically; another stream differs. */
    CHECK(dpattn_shuffle_refute_monte_carlo_delta_scratch_len(2, &n) == DPATTN_STATUS_OK && n == 2);
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 2, 4000, &key, 0, scr, 2, &mc) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffle_refute_gaussian_delta_d2(1.0, 1.16125, 1.0, 1.0, &fw, &bw) == DPATTN_STATUS_OK);
    CHECK(fabs(mc.backward - bw) < 5 * mc.backward_stderr && mc.backward_stderr > 0);
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 2, 4000, &key, 0, scr, 2, &mc2) == DPATTN_STATUS_OK);
    CHECK(memcmp(&mc, &mc2, sizeof mc) == 0);
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 2, 4000, &key, 1, scr, 2, &mc2) == DPATTN_STATUS_OK);
    CHECK(mc.backward != mc2.backward);
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 3, 10, &key, 0, scr, 2, &mc2) ==
          DPATTN_STATUS_SCRATCH_TOO_SMALL);
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 1, 10, &key, 0, scr, 2, &mc2) ==
          DPATTN_STATUS_OUT_OF_RANGE && msg_has("d"));
    CHECK(dpattn_shuffle_refute_monte_carlo_delta(1.0, 1.16125, 1.0, 1.0, 2, 10, NULL, 0, scr, 2, &mc2) ==
          DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    CHECK(dpattn_shuffle_refute_monte_carlo_delta_scratch_len(2, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
    return 0;
}

/* The step in a session: its ledger (an RDP ledger for one record) is charged exactly
   what dpattn_ledger_charge_sampled_gaussian(q, σ_eff, 1) charges with the (q, σ_eff) of
   dpattn_shuffled_dp_sgd_charge; a too-small ledger refuses the step, which then writes no
   weight, state or report; approximate-DP ledgers and ledgers of another unit are refused
   before any work. */
static int step_with_ledger(void) {
    dpattn_shuffle_block b = mlp_block();
    dpattn_shuffle_plan *plan = NULL;
    dpattn_ledger *l = NULL, *ref = NULL, *tiny = NULL, *approx = NULL, *other = NULL;
    dpattn_session *sl = NULL, *stiny = NULL, *sapprox = NULL, *sother = NULL;
    dpattn_privacy_unit record = {DPATTN_UNIT_RECORD, 0}, prompt = {DPATTN_UNIT_PROMPT, 0};
    dpattn_shuffled_dp_sgd_params p;
    dpattn_shuffled_dp_sgd_report r, r2, r0;
    dpattn_amount spent, want;
    double w0[PLEN], w[PLEN], m[PLEN], scratch[2 * PLEN], q = 0, s = 0, tail = -1;
    void *state[1];
    uint32_t perms[HID];
    uint64_t n = 9;
    size_t live = dpattn_live_handle_count();
    int j;
    memset(&r2, 0x5A, sizeof r2);
    memset(&r0, 0x5A, sizeof r0);
    CHECK(dpattn_shuffle_plan_new(&b, 1, PLEN, &plan) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_params_default(&p) == DPATTN_STATUS_OK);
    p.sampling_rate = 0.5;
    p.noise_multiplier = 1.2;
    p.learning_rate = 0.1;
    p.planned_steps = 10;
    CHECK(dpattn_shuffled_dp_sgd_charge(&p, PLEN, &q, &s, &tail) == DPATTN_STATUS_OK);
    init_weights(w0);
    memcpy(w, w0, sizeof w);
    for (j = 0; j < PLEN; j++) m[j] = j;
    state[0] = m;
    CHECK(dpattn_ledger_new_rdp(record, 8.0, 1e-5, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_new_rdp(record, 8.0, 1e-5, &ref) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(l, &sl) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, sl, scratch, 2 * PLEN, &r) == DPATTN_STATUS_OK);
    CHECK(memcmp(w, w0, sizeof w) != 0);
    CHECK(dpattn_ledger_charge_sampled_gaussian(ref, record, q, s, 1) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_spent(l, &spent) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_spent(ref, &want) == DPATTN_STATUS_OK);
    CHECK(spent.kind == DPATTN_AMOUNT_RDP && spent.epsilon > 0 && spent.epsilon == want.epsilon);
    CHECK(dpattn_ledger_charges(l, &n) == DPATTN_STATUS_OK && n == 1);
    /* Over budget: refused, nothing written, the ledger unchanged. */
    CHECK(dpattn_ledger_new_rdp(record, 0.05, 1e-5, &tiny) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(tiny, &stiny) == DPATTN_STATUS_OK);
    memcpy(w, w0, sizeof w);
    for (j = 0; j < PLEN; j++) m[j] = j;
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, stiny, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_INFEASIBLE);
    CHECK(memcmp(w, w0, sizeof w) == 0 && memcmp(&r2, &r0, sizeof r2) == 0);
    for (j = 0; j < PLEN; j++) CHECK(m[j] == j && scratch[j] == 0.0);
    CHECK(dpattn_ledger_charges(tiny, &n) == DPATTN_STATUS_OK && n == 0);
    /* Only RDP ledgers take the charge. */
    CHECK(dpattn_ledger_new_approx(record, 8.0, 1e-5, &approx) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(approx, &sapprox) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, sapprox, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_UNSUPPORTED);
    CHECK(memcmp(w, w0, sizeof w) == 0);
    CHECK(dpattn_ledger_charges(approx, &n) == DPATTN_STATUS_OK && n == 0);
    /* Only ledgers kept for one record. */
    CHECK(dpattn_ledger_new_rdp(prompt, 8.0, 1e-5, &other) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(other, &sother) == DPATTN_STATUS_OK);
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, sother, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_UNIT_MISMATCH);
    CHECK(memcmp(w, w0, sizeof w) == 0 && memcmp(&r2, &r0, sizeof r2) == 0);
    CHECK(dpattn_ledger_charges(other, &n) == DPATTN_STATUS_OK && n == 0);
    /* A freed session. */
    dpattn_session_free(stiny);
    CHECK(dpattn_shuffled_dp_sgd_step(w, PLEN, DPATTN_DTYPE_F64, state, 1, perms, HID, plan, &p, 64,
              grad_cb, NULL, stiny, scratch, 2 * PLEN, &r2) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session"));
    CHECK(memcmp(w, w0, sizeof w) == 0);
    dpattn_session_free(sother);
    dpattn_session_free(sapprox);
    dpattn_session_free(sl);
    dpattn_ledger_free(other);
    dpattn_ledger_free(approx);
    dpattn_ledger_free(tiny);
    dpattn_ledger_free(ref);
    dpattn_ledger_free(l);
    dpattn_shuffle_plan_free(plan);
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}

int dpattn_c_weight_shuffle(void) {
    int line;
    if ((line = plans_and_perms()) != 0) return line;
    if ((line = step()) != 0) return line;
    if ((line = step_with_ledger()) != 0) return line;
    return refutation();
}
