/*
 * Sessions from C99: a session draws every release's noise from a master key of the
 * operating system at fresh stream ids and charges its ledger. Checked here:
 *  - position: the epoch stays, the next stream id moves by one per release (DP-Forward
 *    uses one stream id), also for a refused release;
 *  - save -> release -> restore of the older save: the restored session hands out the same
 *    stream id again, but in a new epoch, so the release draws different noise, and its
 *    ledger (a new handle) does not know the charge made after the save;
 *  - replay: dpattn_session_new_for_replay with the master key and a logged position
 *    reproduces a release bit for bit and charges nothing without a ledger;
 *  - ledgers are kept for one privacy unit: a release protecting another unit, and a
 *    manual charge for another unit, are refused with DPATTN_STATUS_UNIT_MISMATCH and
 *    change nothing;
 *  - NULL, freed and foreign handles, short buffers, foreign state bytes, exhausted stream
 *    ids: the documented status, the message names the argument, nothing is written;
 *  - dpattn_live_handle_count() is back where it started.
 * Returns 0 or the line of the failed check.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TOK 4
#define DIM 8
#define N (2 * TOK * DIM) /* two sequences of TOK x DIM */

static const dpattn_privacy_unit SEQUENCE = {DPATTN_UNIT_SEQUENCE, 0};

static dpattn_dp_forward_params plan(void) {
    dpattn_dp_forward_params p;
    memset(&p, 0, sizeof p);
    dpattn_dp_forward_params_default(&p);
    p.epsilon = 4.0;
    p.tokens = TOK;
    p.dim = DIM;
    return p;
}

/* One DP-Forward release of zero hidden states (the clip keeps zeros at zero, so x becomes
 * pure noise) into `x`. */
static dpattn_status release(dpattn_session *s, double *x) {
    const dpattn_dp_forward_params p = plan();
    const dpattn_dp_forward_factors iid = {DPATTN_DP_FORWARD_FACTORS_IID, NULL, 0, NULL, 0};
    dpattn_dp_forward_clip_report r;
    memset(x, 0, N * sizeof *x);
    return dpattn_dp_forward(x, N, DPATTN_DTYPE_F64, 2 * TOK, DIM, DIM, &p, &iid, s, NULL, 0, &r);
}

static int all_zero(const double *x) {
    size_t i;
    for (i = 0; i < N; i++)
        if (x[i] != 0.0) return 0;
    return 1;
}

static uint64_t charges(const dpattn_ledger *l) {
    uint64_t n = UINT64_MAX;
    if (dpattn_ledger_charges(l, &n) != DPATTN_STATUS_OK) return UINT64_MAX;
    return n;
}

static int save_release_restore(void) {
    static double a[N], b[N], c[N], d[N];
    dpattn_ledger *l = NULL, *restored_l = NULL, *newest_l = NULL;
    dpattn_session *s = NULL, *restored = NULL, *newest = NULL, *replay = NULL;
    dpattn_key master;
    uint64_t e0 = 0, n0 = 7, e1 = 0, n1 = 0, e2 = 0, n2 = 0;
    size_t len = dpattn_session_state_len();
    uint8_t *older = malloc(len), *newer = malloc(len);
    CHECK(older != NULL && newer != NULL);

    /* Room for a few releases: each costs rho = (2C)^2 / (2 sigma^2) = 0.43 at epsilon 4. */
    CHECK(dpattn_ledger_new_zcdp(SEQUENCE, 10.0, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(l, &s) == DPATTN_STATUS_OK && s != NULL);
    CHECK(dpattn_session_position(s, &e0, &n0) == DPATTN_STATUS_OK && n0 == 0);
    CHECK(dpattn_session_master_key(s, &master) == DPATTN_STATUS_OK);
    /* save -> release -> (newest) save */
    CHECK(dpattn_session_save(s, older, len) == DPATTN_STATUS_OK);
    CHECK(release(s, a) == DPATTN_STATUS_OK && !all_zero(a));
    CHECK(dpattn_session_position(s, &e1, &n1) == DPATTN_STATUS_OK && e1 == e0 && n1 == 1);
    CHECK(charges(l) == 1);
    CHECK(dpattn_session_save(s, newer, len) == DPATTN_STATUS_OK);
    /* The next release of the same session takes stream id 1: other noise. */
    CHECK(release(s, b) == DPATTN_STATUS_OK && memcmp(a, b, sizeof a) != 0);
    CHECK(charges(l) == 2);

    /* Restore the older save: stream id 0 again, in a new epoch; other noise. Its ledger is
       a new handle holding the snapshot (no charge yet). */
    CHECK(dpattn_session_restore(older, len, &restored, &restored_l) == DPATTN_STATUS_OK);
    CHECK(restored != NULL && restored_l != NULL && restored_l != l);
    CHECK(dpattn_session_position(restored, &e2, &n2) == DPATTN_STATUS_OK);
    CHECK(n2 == 0 && e2 != e0);
    CHECK(charges(restored_l) == 0);
    CHECK(release(restored, c) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, c, sizeof a) != 0 && memcmp(b, c, sizeof b) != 0);
    CHECK(charges(restored_l) == 1 && charges(l) == 2);
    /* Restoring the newest save knows the first charge and continues at stream id 1. */
    CHECK(dpattn_session_restore(newer, len, &newest, &newest_l) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_position(newest, &e2, &n2) == DPATTN_STATUS_OK && n2 == 1 && e2 != e0);
    CHECK(charges(newest_l) == 1);

    /* Replay for audit: the master key and the logged position (e0, 0) reproduce the first
       release bit for bit; without a ledger nothing is charged. (e2's position 0 gives c.) */
    CHECK(dpattn_session_new_for_replay(&master, e0, 0, NULL, &replay) == DPATTN_STATUS_OK);
    CHECK(release(replay, d) == DPATTN_STATUS_OK && memcmp(a, d, sizeof a) == 0);
    CHECK(release(replay, d) == DPATTN_STATUS_OK && memcmp(b, d, sizeof b) == 0);
    dpattn_session_free(replay);
    CHECK(dpattn_session_position(restored, &e2, &n2) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new_for_replay(&master, e2, 0, NULL, &replay) == DPATTN_STATUS_OK);
    CHECK(release(replay, d) == DPATTN_STATUS_OK && memcmp(c, d, sizeof c) == 0);
    CHECK(charges(l) == 2 && charges(restored_l) == 1);
    /* A replay session without a ledger has no state to save. */
    CHECK(dpattn_session_save(replay, older, len) == DPATTN_STATUS_UNSUPPORTED);
    dpattn_session_free(replay);

    /* The session keeps its ledger alive after the caller frees its handle. */
    dpattn_ledger_free(l);
    CHECK(charges(l) == UINT64_MAX); /* the caller's handle is gone */
    CHECK(release(s, a) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_position(s, &e1, &n1) == DPATTN_STATUS_OK && n1 == 3);

    dpattn_session_free(s);
    dpattn_session_free(restored);
    dpattn_session_free(newest);
    dpattn_ledger_free(restored_l);
    dpattn_ledger_free(newest_l);
    free(older);
    free(newer);
    return 0;
}

static int units(void) {
    static double x[N];
    const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
    dpattn_ledger *l = NULL;
    dpattn_session *s = NULL;
    dpattn_amount before, after;
    uint64_t e = 0, n = 0;
    /* A ledger for one token: DP-Forward's sequence-level plan protects whole sequences. */
    CHECK(dpattn_ledger_new_approx(token, 10.0, 1e-4, &l) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_new(l, &s) == DPATTN_STATUS_OK);
    CHECK(release(s, x) == DPATTN_STATUS_UNIT_MISMATCH);
    CHECK(msg_has("one sequence") && msg_has("one token"));
    CHECK(all_zero(x) && charges(l) == 0);
    /* The refused release used up its stream id all the same (no id is handed out twice). */
    CHECK(dpattn_session_position(s, &e, &n) == DPATTN_STATUS_OK && n == 1);
    /* A manual charge for another unit: refused, the ledger unchanged. */
    CHECK(dpattn_ledger_spent(l, &before) == DPATTN_STATUS_OK);
    CHECK(dpattn_ledger_charge_approx(l, SEQUENCE, 0.5, 0.0) == DPATTN_STATUS_UNIT_MISMATCH);
    CHECK(dpattn_ledger_spent(l, &after) == DPATTN_STATUS_OK);
    CHECK(after.epsilon == before.epsilon && after.delta == before.delta && charges(l) == 0);
    CHECK(dpattn_ledger_charge_approx(l, token, 0.5, 0.0) == DPATTN_STATUS_OK && charges(l) == 1);
    dpattn_session_free(s);
    dpattn_ledger_free(l);
    return 0;
}

static int bad_handles(void) {
    static double x[N];
    dpattn_ledger *l = NULL;
    dpattn_session *s = NULL, *kept = (dpattn_session *)(uintptr_t)0x1230, *r = NULL;
    dpattn_ledger *kept_l = (dpattn_ledger *)(uintptr_t)0x2340;
    dpattn_key key, k2;
    uint64_t e = 5, n = 6;
    size_t len = dpattn_session_state_len();
    uint8_t *state = malloc(len + 1);
    size_t i;
    CHECK(state != NULL);
    memset(key.bytes, 3, sizeof key.bytes);
    memset(k2.bytes, 1, sizeof k2.bytes);
    CHECK(len > 48);
    CHECK(dpattn_ledger_new_zcdp(SEQUENCE, 1.0, &l) == DPATTN_STATUS_OK);
    /* Constructors: NULL and foreign handles; nothing written. */
    CHECK(dpattn_session_new(NULL, &kept) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("ledger"));
    CHECK(dpattn_session_new(l, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_session"));
    CHECK(dpattn_session_new((dpattn_ledger *)(uintptr_t)0x1230, &kept) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(dpattn_session_new_for_replay(NULL, 0, 0, l, &kept) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    CHECK(kept == (dpattn_session *)(uintptr_t)0x1230);
    CHECK(dpattn_session_new(l, &s) == DPATTN_STATUS_OK);
    /* A session is not a ledger, nor the reverse. */
    CHECK(dpattn_session_new((dpattn_ledger *)(void *)s, &kept) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(dpattn_session_position((dpattn_session *)(void *)l, &e, &n) == DPATTN_STATUS_INVALID_HANDLE);
    CHECK(msg_has("dpattn_session") && e == 5 && n == 6);
    CHECK(dpattn_session_position(NULL, &e, &n) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session"));
    CHECK(dpattn_session_position(s, NULL, &n) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_epoch"));
    CHECK(dpattn_session_master_key(s, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_key"));
    /* Saving into a short or NULL buffer. */
    memset(state, 0xEE, len + 1);
    CHECK(dpattn_session_save(s, state, len - 1) == DPATTN_STATUS_BUFFER_TOO_SHORT && msg_has("session state"));
    CHECK(dpattn_session_save(s, NULL, len) == DPATTN_STATUS_NULL_ARGUMENT);
    for (i = 0; i <= len; i++) CHECK(state[i] == 0xEE);
    /* A longer buffer is fine: the state takes its first len bytes. */
    CHECK(dpattn_session_save(s, state, len + 1) == DPATTN_STATUS_OK && state[len] == 0xEE);
    /* Restoring short, NULL or foreign bytes. */
    CHECK(dpattn_session_restore(state, len - 1, &kept, &kept_l) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    CHECK(dpattn_session_restore(NULL, len, &kept, &kept_l) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("state"));
    CHECK(dpattn_session_restore(state, len, NULL, &kept_l) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_session"));
    CHECK(dpattn_session_restore(state, len, &kept, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_ledger"));
    state[0] ^= 0xFF; /* not the magic */
    CHECK(dpattn_session_restore(state, len, &kept, &kept_l) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(kept == (dpattn_session *)(uintptr_t)0x1230 && kept_l == (dpattn_ledger *)(uintptr_t)0x2340);
    /* Releases on NULL, foreign and freed sessions: nothing written, nothing charged. */
    CHECK(release(NULL, x) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("session") && all_zero(x));
    CHECK(release((dpattn_session *)(void *)l, x) == DPATTN_STATUS_INVALID_HANDLE && all_zero(x));
    dpattn_session_free(s);
    CHECK(release(s, x) == DPATTN_STATUS_INVALID_HANDLE && msg_has("session") && all_zero(x));
    CHECK(dpattn_session_position(s, &e, &n) == DPATTN_STATUS_INVALID_HANDLE && e == 5);
    dpattn_session_free(s); /* double free: a no-op */
    dpattn_session_free(NULL);
    CHECK(charges(l) == 0);
    /* A session whose stream ids are used up refuses, charges nothing, and does not move. */
    CHECK(dpattn_session_new_for_replay(&key, 1, UINT64_MAX, l, &r) == DPATTN_STATUS_OK);
    CHECK(release(r, x) == DPATTN_STATUS_SIZE_OVERFLOW && msg_has("new epoch") && all_zero(x));
    CHECK(dpattn_session_position(r, &e, &n) == DPATTN_STATUS_OK && e == 1 && n == UINT64_MAX);
    CHECK(charges(l) == 0);
    dpattn_session_free(r);
    /* Two masters at the same position draw different noise. */
    {
        static double y[N];
        CHECK(dpattn_session_new_for_replay(&key, 1, 0, NULL, &r) == DPATTN_STATUS_OK);
        CHECK(release(r, x) == DPATTN_STATUS_OK);
        dpattn_session_free(r);
        CHECK(dpattn_session_new_for_replay(&k2, 1, 0, NULL, &r) == DPATTN_STATUS_OK);
        CHECK(release(r, y) == DPATTN_STATUS_OK && memcmp(x, y, sizeof x) != 0);
        dpattn_session_free(r);
    }
    dpattn_ledger_free(l);
    free(state);
    return 0;
}

int dpattn_c_session(void) {
    int line;
    size_t live = dpattn_live_handle_count();
    if ((line = save_release_restore()) != 0) return line;
    if ((line = units()) != 0) return line;
    if ((line = bad_handles()) != 0) return line;
    CHECK(dpattn_live_handle_count() == live);
    return 0;
}
