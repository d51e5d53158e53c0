/* Stand-alone host for abi_smoke.c: scripts/test.sh links it against the built
 * libdpattn_ffi.a and libdpattn_ffi.so to prove both artifacts and the documented link
 * lines work outside cargo. */
#include <stdio.h>

int dpattn_c_abi_smoke(void);

int main(void) {
    int line = dpattn_c_abi_smoke();
    if (line != 0) {
        fprintf(stderr, "abi_smoke.c failed at line %d\n", line);
        return 1;
    }
    printf("C host: all checks passed\n");
    return 0;
}
