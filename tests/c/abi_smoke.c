/*
 * Calls the dpattn C ABI from C99 and checks every result against values derived by hand.
 * Built by tests/c-abi/build.rs with -std=c99 -Wall -Wextra -Werror and run from
 * `cargo test` (the test `c_abi_smoke` in tests/c-abi/src/lib.rs).
 * Returns 0 on success, or the line number of the first failed check.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int dpattn_c_abi_smoke(void) {
    char buf[256];
    size_t n;

    /* Version: the library matches the header it was compiled against. */
    CHECK(dpattn_version() != NULL);
    CHECK(strcmp(dpattn_version(), DPATTN_VERSION) == 0);
    CHECK(DPATTN_VERSION_MAJOR == 0 && DPATTN_VERSION_MINOR >= 1);

    /* Status strings: never NULL, unknown codes handled. */
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_OK), "ok") == 0);
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_OUT_OF_RANGE), "parameter out of range") == 0);
    CHECK(strcmp(dpattn_status_str(424242u), "unknown status code") == 0);
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_UNIT_MISMATCH),
                 "privacy unit mismatch between a release and its ledger") == 0);
    CHECK(sizeof(dpattn_status) == 4);
    /* The privacy unit is passed by value: two 32-bit fields, no padding. */
    CHECK(sizeof(dpattn_privacy_unit) == 8);

    /* A ledger for one token and a session over it; both handles freed. */
    {
        const dpattn_privacy_unit token = {DPATTN_UNIT_TOKENS, 1};
        dpattn_ledger *ledger = NULL;
        dpattn_session *session = NULL;
        uint64_t epoch = 0, next = 99;
        size_t live = dpattn_live_handle_count();
        CHECK(dpattn_ledger_new_approx(token, 1.0, 1e-6, &ledger) == DPATTN_STATUS_OK);
        CHECK(dpattn_session_new(ledger, &session) == DPATTN_STATUS_OK && session != NULL);
        CHECK(dpattn_session_position(session, &epoch, &next) == DPATTN_STATUS_OK && next == 0);
        CHECK(dpattn_live_handle_count() == live + 2);
        dpattn_session_free(session);
        dpattn_ledger_free(ledger);
        CHECK(dpattn_live_handle_count() == live);
    }

    /* A valid budget succeeds and leaves no message. */
    CHECK(dpattn_check_privacy_params(1.0, 1e-5) == DPATTN_STATUS_OK);
    CHECK(dpattn_last_error_message(NULL, 0) == 0);
    CHECK(dpattn_check_privacy_params(1.0, 0.0) == DPATTN_STATUS_OK);

    /* NaN epsilon: out of range, the message names the parameter. */
    CHECK(dpattn_check_privacy_params(NAN, 1e-5) == DPATTN_STATUS_OUT_OF_RANGE);
    n = dpattn_last_error_message(NULL, 0);
    CHECK(n > 0 && n < sizeof buf);
    CHECK(dpattn_last_error_message(buf, sizeof buf) == n);
    CHECK(strlen(buf) == n);
    CHECK(strstr(buf, "epsilon") != NULL);

    /* Truncation is snprintf-like: full length returned, NUL always written. */
    memset(buf, 'x', sizeof buf);
    CHECK(dpattn_last_error_message(buf, 8) == n);
    CHECK(buf[7] == '\0' && strlen(buf) == 7 && buf[8] == 'x');

    /* delta must be < 1 and epsilon > 0. */
    CHECK(dpattn_check_privacy_params(1.0, 1.0) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_last_error_message(buf, sizeof buf) > 0 && strstr(buf, "delta") != NULL);
    CHECK(dpattn_check_privacy_params(-1.0, 0.5) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_check_privacy_params(INFINITY, 0.5) == DPATTN_STATUS_OUT_OF_RANGE);

    /* Layout extents: contiguous [2,3,4,5] needs 120 elements. */
    {
        size_t shape[4] = {2, 3, 4, 5};
        size_t strides[4] = {60, 20, 5, 1};
        size_t len = 0;
        CHECK(dpattn_layout4_required_len(shape, strides, &len) == DPATTN_STATUS_OK);
        CHECK(len == 120);
    }
    /* [batch=2, seq=5, heads=4, dim=8] storage seen as [batch, heads, seq, dim]:
       last element (1,3,4,7) at 160 + 24 + 128 + 7 = 319, so 320 elements. */
    {
        size_t shape[4] = {2, 4, 5, 8};
        size_t strides[4] = {160, 8, 32, 1};
        size_t len = 0;
        CHECK(dpattn_layout4_required_len(shape, strides, &len) == DPATTN_STATUS_OK);
        CHECK(len == 320);
    }
    /* Errors leave the out-parameter untouched. */
    {
        size_t shape[4] = {SIZE_MAX, 2, 2, 2};
        size_t strides[4] = {SIZE_MAX, 4, 2, 1};
        size_t len = 77;
        CHECK(dpattn_layout4_required_len(shape, strides, &len) == DPATTN_STATUS_SIZE_OVERFLOW);
        CHECK(len == 77);
        CHECK(dpattn_last_error_message(buf, sizeof buf) > 0 && strstr(buf, "overflow") != NULL);
        strides[3] = 2;
        shape[0] = 1;
        CHECK(dpattn_layout4_required_len(shape, strides, &len) == DPATTN_STATUS_OUT_OF_RANGE);
        CHECK(len == 77);
        CHECK(dpattn_layout4_required_len(NULL, strides, &len) == DPATTN_STATUS_NULL_ARGUMENT);
        CHECK(dpattn_last_error_message(buf, sizeof buf) > 0 && strstr(buf, "shape") != NULL);
        CHECK(dpattn_layout4_required_len(shape, strides, NULL) == DPATTN_STATUS_NULL_ARGUMENT);
        CHECK(len == 77);
    }
    return 0;
}
