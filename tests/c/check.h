/* CHECK(cond): on failure, print the file, line and condition, and return the line number
 * from the enclosing int function (0 means every check passed). Shared by the C tests. */
#ifndef DPATTN_TEST_CHECK_H
#define DPATTN_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "dpattn.h"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return __LINE__;                                                         \
        }                                                                            \
    } while (0)

/* Whether this thread's last-error message contains `needle` (messages name the argument
 * at fault; the tests check that they do). */
static inline int msg_has(const char *needle) {
    char buf[512];
    dpattn_last_error_message(buf, sizeof buf);
    return strstr(buf, needle) != NULL;
}

#endif /* DPATTN_TEST_CHECK_H */
