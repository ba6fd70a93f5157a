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

/* For a writer that formats in place: makes room for `extra` more bytes (plus
 * the NUL) and returns where they go, b->p + b->len, or NULL with oom set. The
 * caller writes at most `extra` bytes there and then calls brisk_buf_commit
 * with how many it wrote. */
char *brisk_buf_reserve(brisk_buf *b, size_t extra);

/* Takes n bytes written after brisk_buf_reserve into the text and terminates
 * it. n must not exceed the `extra` reserved. A no-op once oom is set. */
void brisk_buf_commit(brisk_buf *b, size_t n);

/* Hands the text over: returns b->p (an empty string when nothing was
 * appended) with its length in *len, and leaves b empty; or frees everything
 * and returns NULL when any append failed. The caller frees the text. */
char *brisk_buf_take(brisk_buf *b, size_t *len);

#endif
