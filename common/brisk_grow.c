/* brisk_grow.c - see brisk_grow.h. */
#include "common/brisk_grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"

/* The new capacity for `need` elements, or 0 when it cannot be had. */
static size_t next_cap(size_t cap, size_t need, size_t elem, size_t first, size_t max) {
    size_t c = cap ? cap : (first ? first : 1);
    while (c < need)
        c = c > SIZE_MAX / 2 ? need : 2 * c;
    if (max && c > max)
        c = max;
    if (elem && c > SIZE_MAX / elem)
        return 0;
    return c;
}

/* The caller's pointer is read and written through memcpy: pp is a T **
 * for some T, and every object pointer has void *'s representation here. */
#define GROW_BODY(realloc_fn)                                                                      \
    if (max && need > max)                                                                         \
        return BRISK_ERANGE;                                                                       \
    size_t c = next_cap(*cap, need, elem, first, max);                                             \
    if (!c)                                                                                        \
        return BRISK_ENOMEM;                                                                       \
    void *old;                                                                                     \
    memcpy(&old, pp, sizeof old);                                                                  \
    void *p = realloc_fn(old, c * elem);                                                           \
    if (!p)                                                                                        \
        return BRISK_ENOMEM;                                                                       \
    memcpy(pp, &p, sizeof p);                                                                      \
    *cap = c;                                                                                      \
    return 0

int brisk_grow_slow(void *pp, size_t *cap, size_t need, size_t elem, size_t first, size_t max) {
    GROW_BODY(brisk_realloc);
}

int brisk_grow_libc_slow(void *pp, size_t *cap, size_t need, size_t elem, size_t first,
                         size_t max) {
    GROW_BODY(realloc);
}
