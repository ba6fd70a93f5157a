/* brisk_alloc.c - cJSON's hooks and the allocation-failure injector (see
 * brisk_alloc.h). The injector's state is process-wide and atomic; it is
 * compiled only with -DBRISK_FAULT_INJECT, otherwise its entry points are
 * stubs that report it absent. */
#include "common/brisk_alloc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/brisk_error.h"

static _Thread_local unsigned long cjson_failures;

static void *cjson_malloc(size_t n) {
    void *p = brisk_malloc(n);
    if (!p)
        cjson_failures++;
    return p;
}

unsigned long brisk_alloc_cjson_failures(void) {
    return cjson_failures;
}

#ifdef BRISK_FAULT_INJECT

enum { FAULT_OFF = 0, FAULT_COUNT, FAULT_NTH, FAULT_RATE };

static _Atomic int fault_mode;
static _Atomic int fault_is_armed;
static _Atomic unsigned long fault_nth;
static _Atomic uint64_t fault_seed;
static _Atomic uint64_t fault_threshold; /* fail when hash < threshold (53-bit scale) */
static _Atomic unsigned long fault_n_seen, fault_n_injected;
static char fault_spec_text[64] = "off";

/* splitmix64's finaliser: a well-mixed 64-bit hash of the index. */
static uint64_t fault_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int brisk_fault_hit(void) {
    if (!atomic_load_explicit(&fault_is_armed, memory_order_acquire))
        return 0;
    int mode = atomic_load_explicit(&fault_mode, memory_order_relaxed);
    if (mode == FAULT_OFF)
        return 0;
    unsigned long i = atomic_fetch_add_explicit(&fault_n_seen, 1, memory_order_relaxed) + 1;
    int hit = 0;
    if (mode == FAULT_NTH) {
        hit = i == atomic_load_explicit(&fault_nth, memory_order_relaxed);
    } else if (mode == FAULT_RATE) {
        uint64_t h = fault_mix(atomic_load_explicit(&fault_seed, memory_order_relaxed) ^
                               fault_mix((uint64_t)i)) >>
                     11;
        hit = h < atomic_load_explicit(&fault_threshold, memory_order_relaxed);
    }
    if (hit)
        atomic_fetch_add_explicit(&fault_n_injected, 1, memory_order_relaxed);
    return hit;
}

int brisk_fault_compiled(void) {
    return 1;
}

int brisk_fault_configure(const char *spec, char *err, size_t err_len) {
    int mode = FAULT_OFF;
    unsigned long nth = 0;
    uint64_t seed = 0, threshold = 0;
    char *end = NULL;
    if (!spec || !strcmp(spec, "off") || !spec[0]) {
        mode = FAULT_OFF;
    } else if (!strcmp(spec, "count")) {
        mode = FAULT_COUNT;
    } else if (!strncmp(spec, "nth:", 4)) {
        errno = 0;
        nth = strtoul(spec + 4, &end, 10);
        if (errno || end == spec + 4 || *end || nth == 0)
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "BRISK_FAULT_ALLOC: '%s': nth:N needs N >= 1", spec);
        mode = FAULT_NTH;
    } else if (!strncmp(spec, "rate:", 5)) {
        errno = 0;
        double p = strtod(spec + 5, &end);
        if (errno || end == spec + 5 || *end != ':' || !(p >= 0.0 && p <= 1.0))
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "BRISK_FAULT_ALLOC: '%s': rate:P:SEED needs P in [0, 1]", spec);
        const char *s = end + 1;
        errno = 0;
        seed = strtoull(s, &end, 10);
        if (errno || end == s || *end)
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "BRISK_FAULT_ALLOC: '%s': rate:P:SEED needs an integer SEED",
                                 spec);
        /* The hash is compared on 53 bits, where P * 2^53 is exact enough. */
        threshold = (uint64_t)(p * 0x1p53);
        mode = FAULT_RATE;
    } else {
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "BRISK_FAULT_ALLOC: '%s' is not nth:N, rate:P:SEED, count or off",
                             spec);
    }
    atomic_store(&fault_is_armed, 0);
    atomic_store(&fault_mode, mode);
    atomic_store(&fault_nth, nth);
    atomic_store(&fault_seed, seed);
    atomic_store(&fault_threshold, threshold);
    atomic_store(&fault_n_seen, 0);
    atomic_store(&fault_n_injected, 0);
    snprintf(fault_spec_text, sizeof fault_spec_text, "%s", mode == FAULT_OFF ? "off" : spec);
    return 0;
}

const char *brisk_fault_spec(void) {
    return fault_spec_text;
}

int brisk_fault_configured(void) {
    return atomic_load(&fault_mode) != FAULT_OFF;
}

void brisk_fault_arm(int on) {
    if (on) {
        atomic_store(&fault_n_seen, 0);
        atomic_store(&fault_n_injected, 0);
    }
    atomic_store_explicit(&fault_is_armed, on ? 1 : 0, memory_order_release);
}

int brisk_fault_armed(void) {
    return atomic_load(&fault_is_armed);
}

unsigned long brisk_fault_seen(void) {
    return atomic_load(&fault_n_seen);
}

unsigned long brisk_fault_injected(void) {
    return atomic_load(&fault_n_injected);
}

#else /* !BRISK_FAULT_INJECT */

int brisk_fault_compiled(void) {
    return 0;
}

int brisk_fault_configure(const char *spec, char *err, size_t err_len) {
    if (!spec || !spec[0] || !strcmp(spec, "off"))
        return 0;
    return brisk_set_err(err, err_len, BRISK_EUNSUPPORTED,
                         "BRISK_FAULT_ALLOC is set, but this build has no fault injection "
                         "(configure with -DBRISK_FAULT_INJECT=ON)");
}

const char *brisk_fault_spec(void) {
    return "off";
}

int brisk_fault_configured(void) {
    return 0;
}

void brisk_fault_arm(int on) {
    (void)on;
}

int brisk_fault_armed(void) {
    return 0;
}

unsigned long brisk_fault_seen(void) {
    return 0;
}

unsigned long brisk_fault_injected(void) {
    return 0;
}

#endif

int brisk_alloc_init(char *err, size_t err_len) {
    /* cJSON keeps using free() for its frees, which matches: the memory is
     * libc memory either way. */
    cJSON_Hooks hooks = {cjson_malloc, free};
    cJSON_InitHooks(&hooks);
    return brisk_fault_configure(getenv("BRISK_FAULT_ALLOC"), err, err_len);
}
