/*
 * Proves from C that a Rust panic inside an entry point comes back as
 * DPATTN_STATUS_PANIC with a message, and that the library keeps working afterwards.
 * Needs the dpattn-ffi feature `panic-test` (enabled by tests/c-abi), which exports
 * dpattn_test_panic. Returns 0 on success or the line number of the failed check.
 */
#define DPATTN_PANIC_TEST 1
#include "dpattn.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

int dpattn_c_panic_boundary(void) {
    char buf[256];
    CHECK(dpattn_test_panic() == DPATTN_STATUS_PANIC);
    CHECK(dpattn_last_error_message(buf, sizeof buf) > 0);
    CHECK(strstr(buf, "deliberate panic for testing the boundary") != NULL);
    CHECK(strcmp(dpattn_status_str(DPATTN_STATUS_PANIC), "panic inside dpattn") == 0);
    /* The library is still usable after a caught panic. */
    CHECK(dpattn_check_privacy_params(1.0, 1e-6) == DPATTN_STATUS_OK);
    CHECK(dpattn_last_error_message(NULL, 0) == 0);
    return 0;
}
