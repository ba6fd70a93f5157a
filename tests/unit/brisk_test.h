/* brisk_test.h - the minimal test harness of brisk's C unit tests.
 * CHECK records a failure with file:line and goes on; the test's main ends
 * with BT_SUMMARY(), which prints "name: N passed, M failed" and returns the
 * exit code. */
#ifndef BRISK_TEST_H
#define BRISK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bt_tsan.h"

static int bt_passed, bt_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            bt_passed++;                                                                           \
        } else {                                                                                   \
            bt_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* A check whose condition says it all. */
#define CHECK_COND(cond) CHECK(cond, "%s", "")

#define BT_SUMMARY(name)                                                                           \
    (printf("%s: %d passed, %d failed\n", name, bt_passed, bt_failed), bt_failed ? 1 : 0)

/* A useful error message is non-empty and exactly one line. */
static inline int bt_one_line(const char *err) {
    return err[0] != '\0' && strchr(err, '\n') == NULL && strchr(err, '\r') == NULL;
}

/* Directory of ../shared (models, vocab): $BRISK_SHARED_DIR or ../shared. */
static inline const char *bt_shared_dir(void) {
    const char *d = getenv("BRISK_SHARED_DIR");
    return d && *d ? d : "../shared";
}

#endif
