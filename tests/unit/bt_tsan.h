/* bt_tsan.h - BT_TSAN: 1 in a ThreadSanitizer build (GCC's
 * __SANITIZE_THREAD__, clang's __has_feature(thread_sanitizer)), else 0.
 * There a test runs its threaded paths once and leaves the repeats that
 * only change the numbers (other weight types, SIMD levels, KV-cache
 * dtypes, model families) to the Release and ASan passes: under TSan they
 * cost minutes and can show no race the first round did not. */
#ifndef BT_TSAN_H
#define BT_TSAN_H

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

#endif
