/* brisk_buf.c - see brisk_buf.h. */
#include "common/brisk_buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"

/* Makes room for `extra` more bytes plus the NUL. Returns 0, or -1 (oom set). */
static int buf_reserve(brisk_buf *b, size_t extra) {
    if (b->oom)
        return -1;
    if (extra > SIZE_MAX - b->len - 1) {
        b->oom = 1;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 512;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = brisk_realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void brisk_buf_put(brisk_buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) < 0)
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void brisk_buf_str(brisk_buf *b, const char *s) {
    brisk_buf_put(b, s, strlen(s));
}

void brisk_buf_printf(brisk_buf *b, const char *fmt, ...) {
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n) < 0) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *brisk_buf_reserve(brisk_buf *b, size_t extra) {
    if (buf_reserve(b, extra) < 0)
        return NULL;
    return b->p + b->len;
}

void brisk_buf_commit(brisk_buf *b, size_t n) {
    if (b->oom || !b->p)
        return;
    b->len += n;
    b->p[b->len] = '\0';
}

char *brisk_buf_take(brisk_buf *b, size_t *len) {
    if (!b->oom && !b->p && buf_reserve(b, 0) == 0)
        b->p[0] = '\0';
    char *p = b->oom ? NULL : b->p;
    size_t n = b->oom ? 0 : b->len;
    if (!p)
        free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    if (len)
        *len = n;
    return p;
}
