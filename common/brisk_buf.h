/* brisk_buf.h - a growable, always NUL-terminated text buffer for building
 * responses and log lines. An allocation failure sets `oom` and turns every
 * later append into a no-op, so a builder appends freely and checks once at
 * the end. Zero-initialise (brisk_buf b = {0}); free(b.p) when done. */
#ifndef BRISK_BUF_H
#define BRISK_BUF_H

#include <stddef.h>

typedef struct brisk_buf {
    char *p;
    size_t len, cap;
    int oom;
} brisk_buf;

/* Appends n bytes of s (which may hold NULs). */
void brisk_buf_put(brisk_buf *b, const char *s, size_t n);

/* Appends the C string s. */
void brisk_buf_str(brisk_buf *b, const char *s);

/* Appends printf-formatted text; a formatting error also sets oom. */
void brisk_buf_printf(brisk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
