/* fuzz_util.h - what brisk's fuzz targets share: the failure report, an
 * input reader, an independent UTF-8 checker, the one-line JSON check and
 * log silencing.
 *
 * A target reports a broken property the way libFuzzer expects a bug to be
 * reported: it prints one line and traps (FUZZ_CHECK), so the input is kept
 * as a crash file. The same trap fails the CTest replay of a corpus in every
 * build (tests/fuzz/fuzz_replay.c), sanitized or not.
 *
 * Targets are deterministic, single-threaded, write no files and open no
 * sockets; all state they keep between inputs is built once at init and
 * read-only afterwards. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_log.h"

/* libFuzzer's entry points (the replay driver calls them too). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond);     \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

/* Hostile inputs make brisk warn by design; the fuzzer's output stays quiet. */
static inline void fuzz_quiet_logs(void) {
    brisk_log_set_level((brisk_log_level)(BRISK_LOG_ERROR + 1));
}

/* ---- reading an input ---------------------------------------------------- */

typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;

/* The next byte, or 0 once the input is used up. */
static inline uint8_t fuzz_u8(fuzz_in *in) {
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(fuzz_in *in) {
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

/* Up to `want` bytes; *got says how many there were. */
static inline const uint8_t *fuzz_take(fuzz_in *in, size_t want, size_t *got) {
    const uint8_t *p = in->p;
    *got = want < in->n ? want : in->n;
    in->p += *got;
    in->n -= *got;
    return p;
}

/* The bytes up to the next `sep` (not included, and skipped) or the end. */
static inline const uint8_t *fuzz_field(fuzz_in *in, uint8_t sep, size_t *len) {
    const uint8_t *p = in->p;
    const uint8_t *e = in->n ? memchr(p, sep, in->n) : NULL;
    *len = e ? (size_t)(e - p) : in->n;
    in->p += *len + (e ? 1 : 0);
    in->n -= *len + (e ? 1 : 0);
    return p;
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* 1 if s[0..n) is well-formed UTF-8 (Unicode 15, table 3-7: no overlong
 * forms, no surrogates, nothing above U+10FFFF; NUL allowed). Written
 * independently of brisk's brisk_utf8_valid so that it can judge it. */
static inline int fuzz_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        if (u[i + 1] < lo || u[i + 1] > hi)
            return 0;
        for (size_t j = 2; j <= k; j++)
            if (u[i + j] < 0x80 || u[i + j] > 0xBF)
                return 0;
        i += k + 1;
    }
    return 1;
}

/* 1 if s[0..n) has no byte b. */
static inline int fuzz_no_byte(const char *s, size_t n, char b) {
    return n == 0 || memchr(s, b, n) == NULL;
}

/* s[0..n) is one line of valid UTF-8 JSON (no NUL) that parses, whole, to
 * an object: the promise every response builder makes. */
static inline void fuzz_check_json_object_line(const char *s, size_t n) {
    FUZZ_CHECK(s != NULL);
    FUZZ_CHECK(fuzz_no_byte(s, n, '\0'));
    FUZZ_CHECK(fuzz_utf8_valid(s, n));
    FUZZ_CHECK(fuzz_no_byte(s, n, '\n') && fuzz_no_byte(s, n, '\r'));
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    FUZZ_CHECK(j != NULL && cJSON_IsObject(j) && end == s + n);
    cJSON_Delete(j);
}

#endif
