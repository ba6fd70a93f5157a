/* brisk_utf8.c - UTF-8 classification and sanitising (brisk_utf8.h). */
#include "common/brisk_utf8.h"

#include <stdint.h>
#include <string.h>

#include "common/brisk_alloc.h"

int brisk_utf8_next(const char *s, size_t len, size_t *n) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    if (c < 0x80) {
        *n = 1;
        return 1;
    }
    /* The lead byte fixes the length and the range of the first continuation
     * byte; the narrowed ranges exclude overlong forms, surrogates and code
     * points above U+10FFFF (Unicode table 3-7). */
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        *n = 1;
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= len) {
            *n = len;
            return -1;
        }
        if (u[i] < lo || u[i] > hi) {
            *n = i;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    *n = need + 1;
    return 1;
}

int brisk_utf8_valid(const char *s, size_t len) {
    size_t i = 0, n;
    while (i < len) {
        if ((unsigned char)s[i] < 0x80) { /* ASCII runs are the common case */
            i++;
            continue;
        }
        if (brisk_utf8_next(s + i, len - i, &n) != 1)
            return 0;
        i += n;
    }
    return 1;
}

size_t brisk_utf8_sanitize(const char *s, size_t len, char *out) {
    size_t i = 0, o = 0, n;
    while (i < len) {
        if (brisk_utf8_next(s + i, len - i, &n) == 1) {
            memcpy(out + o, s + i, n);
            o += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += n;
    }
    return o;
}

char *brisk_utf8_sanitize_dup(const char *s, size_t len, size_t *out_len) {
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = brisk_malloc(3 * len + 1);
    if (!out)
        return NULL;
    size_t n = brisk_utf8_sanitize(s, len, out);
    out[n] = '\0';
    if (out_len)
        *out_len = n;
    return out;
}

size_t brisk_utf8_complete_prefix(const char *s, size_t len) {
    /* Only the last unit can be incomplete. Any byte that is not a
     * continuation byte starts a new unit, so step back over at most three
     * continuation bytes to such a byte and classify from there: the rest of
     * s never needs to be read again, whatever its length. */
    size_t j = len, k = 0;
    while (j > 0 && k < 4 && ((unsigned char)s[j - 1] & 0xC0) == 0x80) {
        j--;
        k++;
    }
    if (j == 0 || k == 4)
        return len; /* no lead byte within reach */
    size_t start = j - 1, i = start, n;
    while (i < len) {
        if (brisk_utf8_next(s + i, len - i, &n) == -1)
            return i;
        i += n;
    }
    return len;
}
