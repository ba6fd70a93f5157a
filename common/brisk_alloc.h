/* brisk_alloc.h - the allocator of the request path, and the seam where
 * allocation failures are injected to test that every one of them is handled.
 *
 * The HTTP layer, the API layer, the generation endpoints and the engine's
 * per-sequence work allocate through brisk_malloc / brisk_calloc /
 * brisk_realloc / brisk_strdup (and cJSON through the hooks that
 * brisk_alloc_init installs). Memory from them is plain libc memory: free()
 * releases it, and these functions behave exactly as the libc ones do,
 * including that a failed brisk_realloc leaves the old block alone.
 *
 * In a normal build they are the libc calls, inline: no cost. Built with
 * -DBRISK_FAULT_INJECT=ON (the ASan flavour of scripts/build.sh), each call
 * first asks the injector whether to fail. The injector does nothing until it
 * is configured and armed:
 *   - configured from $BRISK_FAULT_ALLOC by brisk_alloc_init(), or by a test
 *     through brisk_fault_configure():
 *       "nth:N"         fail the N-th allocation counted from arming, once;
 *       "rate:P:SEED"   fail each allocation with probability P in [0, 1],
 *                       drawn from a hash of SEED and the allocation's index
 *                       (repeatable for one interleaving of threads);
 *       "count"         fail nothing, only count (to learn how many
 *                       allocations a piece of code makes);
 *       "off"           nothing.
 *   - armed with brisk_fault_arm(1). `brisk serve` arms it once the model is
 *     loaded, so start-up (the model, the KV pool, the forward-pass buffers,
 *     which do not go through this seam anyway) is never hit, and SIGUSR2
 *     toggles it.
 * The counters are atomic: the loop thread and the engine thread may both
 * allocate while armed. */
#ifndef BRISK_ALLOC_H
#define BRISK_ALLOC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Once at start, before other threads exist: installs brisk's allocator in
 * cJSON (cJSON_InitHooks) and, in a fault-injection build, configures the
 * injector from $BRISK_FAULT_ALLOC (not armed). Returns 0, or BRISK_EINVAL
 * with a message in err when $BRISK_FAULT_ALLOC is malformed. */
int brisk_alloc_init(char *err, size_t err_len);

/* Allocations through cJSON's hooks that failed on the calling thread, ever.
 * cJSON reports a failed allocation and a syntax error alike (NULL); a caller
 * compares this before and after a parse to tell them apart. */
unsigned long brisk_alloc_cjson_failures(void);

/* ---- the injector (no-ops in a normal build) ---- */

/* 1 when the injector is compiled in (-DBRISK_FAULT_INJECT). */
int brisk_fault_compiled(void);

/* Sets the mode from a spec (see above), disarms and zeroes the counters.
 * Returns 0, BRISK_EINVAL (message in err) for a malformed spec, or
 * BRISK_EUNSUPPORTED when the injector is not compiled in. */
int brisk_fault_configure(const char *spec, char *err, size_t err_len);

/* The spec last configured ("off" when none). Static storage. */
const char *brisk_fault_spec(void);

/* 1: configured with something other than "off". */
int brisk_fault_configured(void);

/* Starts (on = 1) or stops (0) injecting; counting restarts at arming. */
void brisk_fault_arm(int on);
int brisk_fault_armed(void);

/* Allocations counted while armed, and of them the failures injected. */
unsigned long brisk_fault_seen(void);
unsigned long brisk_fault_injected(void);

#ifdef BRISK_FAULT_INJECT
/* 1: the allocation about to be made must fail. Counts it when armed. */
int brisk_fault_hit(void);
#define BRISK_FAULT_HIT() brisk_fault_hit()
#else
#define BRISK_FAULT_HIT() 0
#endif

/* ---- the allocator ---- */

static inline void *brisk_malloc(size_t n) {
    if (BRISK_FAULT_HIT())
        return NULL;
    return malloc(n);
}

static inline void *brisk_calloc(size_t n, size_t size) {
    if (BRISK_FAULT_HIT())
        return NULL;
    return calloc(n, size);
}

static inline void *brisk_realloc(void *p, size_t n) {
    if (BRISK_FAULT_HIT())
        return NULL;
    return realloc(p, n);
}

static inline char *brisk_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = brisk_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

#endif
