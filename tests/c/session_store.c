/*
 * Sessions on a durable budget store from C99 (SQLite in a temporary folder). Checked:
 *  - a release on a store session is charged in the store; the same charge id again is not
 *    charged and returns the same output bit for bit; the same id with another cost is
 *    refused with DPATTN_STATUS_STORE_CONFLICT and writes nothing;
 *  - the charges survive closing and reopening the session (a restart), and the budget
 *    runs out across both sessions (DPATTN_STATUS_INFEASIBLE, nothing written);
 *  - another budget under the same owner and another key under the same key id are
 *    refused; a store in a folder that does not exist is DPATTN_STATUS_STORE_UNAVAILABLE;
 *  - DPATTN_STORE_KEY_IN_STORE: the store generates the key once and hands the same key
 *    to every later session;
 *  - the new status codes have descriptions, and dpattn_live_handle_count() is back where
 *    it started.
 * Returns 0 or the line of the failed check.
 */
#define _POSIX_C_SOURCE 200809L

#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SQ 2
#define SK 6
#define D 4
#define NO (SQ * D)

static const dpattn_privacy_unit TOKEN = {DPATTN_UNIT_TOKENS, 1};

static dpattn_tensor4 tin(const float *p, size_t s) {
    dpattn_tensor4 t;
    t.data = p; t.len = s * D; t.dtype = DPATTN_DTYPE_F32;
    t.shape[0] = 1; t.shape[1] = 1; t.shape[2] = s; t.shape[3] = D;
    t.strides[3] = 1; t.strides[2] = D; t.strides[1] = s * D; t.strides[0] = s * D;
    return t;
}

/* One output-perturbation release of (epsilon, 1e-6) under `charge_id` (NULL: a fresh id)
 * into `out`, whose NaN fill is left alone on failure. */
static dpattn_status release(dpattn_session *s, const char *charge_id, double epsilon, float *out) {
    static float q[SQ * D], kv[SK * D];
    float *scratch;
    double sigma[1];
    dpattn_output_perturbation_params p;
    dpattn_tensor4 qt = tin(q, SQ), kt = tin(kv, SK);
    dpattn_tensor4_mut ot;
    size_t i, n = 0;
    dpattn_status st;
    for (i = 0; i < SQ * D; i++) q[i] = (float)(0.1 * (double)i - 0.3);
    for (i = 0; i < SK * D; i++) kv[i] = (float)(0.05 * (double)(i % 7) - 0.1);
    for (i = 0; i < NO; i++) out[i] = NAN;
    memset(&ot, 0, sizeof ot);
    ot.data = out; ot.len = NO; ot.dtype = DPATTN_DTYPE_F32;
    memcpy(ot.shape, qt.shape, sizeof ot.shape);
    memcpy(ot.strides, qt.strides, sizeof ot.strides);
    dpattn_output_perturbation_params_default(&p);
    p.key_norm = 1.0; p.value_norm = 1.0; p.epsilon = epsilon; p.delta = 1e-6;
    if (dpattn_output_perturbation_scratch_len(D, D, &n) != DPATTN_STATUS_OK) return DPATTN_STATUS_INTERNAL;
    if (charge_id != NULL) {
        st = dpattn_session_set_charge_id(s, charge_id);
        if (st != DPATTN_STATUS_OK) return st;
    }
    scratch = malloc(n * sizeof *scratch);
    if (scratch == NULL) return DPATTN_STATUS_ALLOCATION_FAILED;
    st = dpattn_output_perturbation_attention(&ot, &qt, &kt, &kt, &p, s, sigma, 1, scratch, n);
    free(scratch);
    return st;
}

static int untouched(const float *out) {
    size_t i;
    for (i = 0; i < NO; i++)
        if (!isnan(out[i])) return 0;
    return 1;
}

static uint64_t stored_charges(const dpattn_session *s) {
    dpattn_ledger *l = NULL;
    uint64_t n = UINT64_MAX;
    if (dpattn_session_ledger_snapshot(s, &l) != DPATTN_STATUS_OK) return UINT64_MAX;
    if (dpattn_ledger_charges(l, &n) != DPATTN_STATUS_OK) n = UINT64_MAX;
    dpattn_ledger_free(l);
    return n;
}

static dpattn_status open_store(const char *path, const char *owner, const dpattn_ledger *budget,
                                const dpattn_key *key, dpattn_session **out) {
    return dpattn_session_open_sqlite(path, owner, budget, "service-key",
                                      key, key == NULL ? DPATTN_STORE_KEY_IN_STORE : DPATTN_STORE_KEY_CALLER,
                                      out);
}

static void remove_store(const char *dir, const char *path) {
    char buf[320]; /* path has at most 299 characters */
    remove(path);
    snprintf(buf, sizeof buf, "%s-wal", path);
    remove(buf);
    snprintf(buf, sizeof buf, "%s-shm", path);
    remove(buf);
    rmdir(dir);
}

static int store_session_checks(const char *dir, const char *path) {
    static float a[NO], b[NO], c[NO];
    const size_t handles = dpattn_live_handle_count();
    dpattn_ledger *budget = NULL, *bigger = NULL;
    dpattn_session *s = NULL, *k1 = NULL, *k2 = NULL;
    dpattn_session *sentinel = (dpattn_session *)(uintptr_t)0x10, *none = sentinel;
    dpattn_key key, wrong, m1, m2;
    char missing[320]; /* dir has at most 255 characters */
    memset(key.bytes, 42, sizeof key.bytes);
    memset(wrong.bytes, 43, sizeof wrong.bytes);

    /* Room for four releases of epsilon 0.125. */
    CHECK(dpattn_ledger_new_approx(TOKEN, 0.5, 1e-3, &budget) == DPATTN_STATUS_OK);
    CHECK(open_store(path, "doc-1", budget, &key, &s) == DPATTN_STATUS_OK);
    CHECK(release(s, "req-1", 0.125, a) == DPATTN_STATUS_OK && !isnan(a[0]));
    CHECK(release(s, "req-1", 0.125, b) == DPATTN_STATUS_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(stored_charges(s) == 1);
    CHECK(release(s, "req-1", 0.25, c) == DPATTN_STATUS_STORE_CONFLICT && untouched(c));
    CHECK(msg_has("req-1"));
    CHECK(stored_charges(s) == 1);
    dpattn_session_free(s);

    /* A restart: the charge is there; the budget runs out across both sessions. */
    CHECK(open_store(path, "doc-1", budget, &key, &s) == DPATTN_STATUS_OK);
    CHECK(stored_charges(s) == 1);
    CHECK(release(s, NULL, 0.125, b) == DPATTN_STATUS_OK && memcmp(a, b, sizeof a) != 0);
    CHECK(release(s, NULL, 0.125, b) == DPATTN_STATUS_OK);
    CHECK(release(s, NULL, 0.125, b) == DPATTN_STATUS_OK);
    CHECK(release(s, NULL, 0.125, c) == DPATTN_STATUS_INFEASIBLE && untouched(c));
    CHECK(stored_charges(s) == 4);
    dpattn_session_free(s);

    /* Another budget, another key, a folder that does not exist: refused, nothing written. */
    CHECK(dpattn_ledger_new_approx(TOKEN, 5.0, 1e-3, &bigger) == DPATTN_STATUS_OK);
    CHECK(open_store(path, "doc-1", bigger, &key, &none) == DPATTN_STATUS_STORE_CONFLICT);
    CHECK(open_store(path, "doc-2", budget, &wrong, &none) == DPATTN_STATUS_STORE_CONFLICT);
    CHECK(msg_has("service-key"));
    snprintf(missing, sizeof missing, "%s/no/such/folder/b.sqlite", dir);
    CHECK(open_store(missing, "doc-1", budget, &key, &none) == DPATTN_STATUS_STORE_UNAVAILABLE);
    CHECK(none == sentinel);

    /* A key kept by the store (another key id): the same key for every session. */
    CHECK(dpattn_session_open_sqlite(path, "doc-3", budget, "kept-key", NULL,
                                     DPATTN_STORE_KEY_IN_STORE, &k1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_open_sqlite(path, "doc-3", budget, "kept-key", NULL,
                                     DPATTN_STORE_KEY_IN_STORE, &k2) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_master_key(k1, &m1) == DPATTN_STATUS_OK);
    CHECK(dpattn_session_master_key(k2, &m2) == DPATTN_STATUS_OK);
    CHECK(memcmp(m1.bytes, m2.bytes, sizeof m1.bytes) == 0);
    CHECK(release(k1, NULL, 0.125, a) == DPATTN_STATUS_OK);
    CHECK(release(k2, NULL, 0.125, b) == DPATTN_STATUS_OK && memcmp(a, b, sizeof a) != 0);
    CHECK(stored_charges(k1) == 2 && stored_charges(k2) == 2);
    dpattn_session_free(k1);
    dpattn_session_free(k2);

    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_STORE_UNAVAILABLE), "unknown status code") != 0);
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_STORE_CONFLICT), "unknown status code") != 0);
    dpattn_ledger_free(budget);
    dpattn_ledger_free(bigger);
    CHECK(dpattn_live_handle_count() == handles);
    return 0;
}

int dpattn_c_session_store(void) {
    char dir[256], path[300];
    const char *tmp = getenv("TMPDIR");
    int line;
    snprintf(dir, sizeof dir, "%s/dpattn-c-store-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/budget.sqlite", dir);
    line = store_session_checks(dir, path);
    remove_store(dir, path);
    return line;
}
