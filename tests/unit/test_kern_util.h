/* test_kern_util.h - tiny helpers shared by the kernel unit tests: a fixed-
 * seed RNG, normalised error, and CHECK macros that count failures. */
#ifndef TEST_KERN_UTIL_H
#define TEST_KERN_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bt_tsan.h"
#include "kernels/cpu/kern_cpu.h"

static int g_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            g_failures++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static uint64_t g_rng = 0x243F6A8885A308D3ULL; /* fixed seed: failures reproduce */

static inline uint64_t rng_u64(void) {
    uint64_t x = g_rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g_rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [0, 1). */
static inline double rng_uniform(void) {
    return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}

/* N(0, 1) by Box-Muller. */
static inline float rng_normal(void) {
    double u1 = rng_uniform(), u2 = rng_uniform();
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static inline void fill_normal(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = rng_normal() * scale;
}

/* ||y - ref|| / ||ref|| in double (0 when both are zero). */
static inline double norm_err(const float *y, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The lowest level the level sweeps test: KERN_TEST_MIN_LEVEL (a level
 * name) or 0. tests/tools/run_emu512.sh sets it to avx512 so that its slow
 * emulated builds test only the AVX-512 files; the native levels below run
 * in the normal builds. */
static inline int test_min_level(void) {
    const char *s = getenv("KERN_TEST_MIN_LEVEL");
    for (int l = KERN_LEVEL_SCALAR; s && l <= KERN_LEVEL_TOP; l++)
        if (strcmp(s, kern_level_name((kern_level)l)) == 0)
            return l;
    /* Under TSan the CPU's own level only: the levels share the pool's
     * threading, and the lower ones run in the Release and ASan passes. */
    static int top = -1;
    if (BT_TSAN && top < 0) { /* the CPU's level, the caller's cap left as it was */
        kern_level cur = kern_cpu_level();
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        top = (int)kern_cpu_level();
        kern_cpu_set_max_level(cur);
    }
    if (BT_TSAN)
        return top;
    return 0;
}

/* The detected level: tests loop over levels 0..detected, capping each. */
static inline kern_level detected_level(void) {
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    return kern_cpu_level();
}

static inline int finish(const char *name) {
    if (g_failures) {
        fprintf(stderr, "%s: %d failure(s)\n", name, g_failures);
        return 1;
    }
    printf("%s: all passed\n", name);
    return 0;
}

#endif
