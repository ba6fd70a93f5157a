/* brisk_grow.h - one rule for every array that grows as it fills.
 *
 *   T *v = NULL; size_t cap = 0, n = 0;
 *   if (brisk_grow(&v, &cap, n + 1, sizeof *v, 16, 0) < 0) return BRISK_ENOMEM;
 *   v[n++] = x;
 *
 * makes the array *pp (a T *, passed as &v) of *cap elements of `elem` bytes
 * hold at least `need` elements. The capacity starts at `first` and doubles
 * until it holds `need`, and never exceeds `max` when max > 0. It returns 0
 * (also when it was big enough already); BRISK_ENOMEM when the allocation
 * fails or the size overflows; BRISK_ERANGE when need > max. On failure *pp
 * and *cap are untouched: the old block is still the caller's to free.
 *
 * Two allocators, kept apart on purpose:
 *   - brisk_grow allocates through brisk_realloc, the request path's seam
 *     where the fault-injection build fails allocations (brisk_alloc.h):
 *     the HTTP layer, the generation endpoints, the engine's sequences;
 *   - brisk_grow_libc through plain realloc: loading code (GGUF, the model's
 *     tables) and the tokenizer, which run outside that seam today. */
#ifndef BRISK_GROW_H
#define BRISK_GROW_H

#include <stddef.h>

/* Out-of-line halves; call the inline wrappers below. */
int brisk_grow_slow(void *pp, size_t *cap, size_t need, size_t elem, size_t first, size_t max);
int brisk_grow_libc_slow(void *pp, size_t *cap, size_t need, size_t elem, size_t first, size_t max);

/* pp: address of the caller's array pointer (T **), which stays the
 * caller's; see above. */
static inline int brisk_grow(void *pp, size_t *cap, size_t need, size_t elem, size_t first,
                             size_t max) {
    return need <= *cap ? 0 : brisk_grow_slow(pp, cap, need, elem, first, max);
}

static inline int brisk_grow_libc(void *pp, size_t *cap, size_t need, size_t elem, size_t first,
                                  size_t max) {
    return need <= *cap ? 0 : brisk_grow_libc_slow(pp, cap, need, elem, first, max);
}

#endif
