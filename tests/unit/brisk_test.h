/* brisk_test.h - the minimal test harness of brisk's C unit tests.
 * CHECK records a failure with file:line and goes on; the test's main ends
 * with BT_SUMMARY(), which prints "name: N passed, M failed" and returns the
 * exit code. */
#ifndef BRISK_TEST_H
#define BRISK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bt_passed, bt_failed;

/* BT_TSAN is 1 in a ThreadSanitizer build. There a test runs its threaded
 * paths once and leaves the repeats that only change the numbers (other
 * weight types, KV-cache dtypes, model families) to the Release and ASan
 * passes: under TSan they cost minutes and can show no race the first
 * round did not. */
#if defined(__SANITIZE_THREAD__)
#define BT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BT_TSAN 1
#endif
#endif
#ifndef BT_TSAN
#define BT_TSAN 0
#endif

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
