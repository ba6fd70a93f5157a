/* brisk_utf8.h - UTF-8 well-formedness as Unicode defines it (table 3-7:
 * no overlong forms, surrogates or code points above U+10FFFF), and the
 * sanitising every text that leaves brisk goes through (API responses, SSE
 * chunks, audit lines): each maximal ill-formed subpart becomes U+FFFD.
 * Pure functions, reentrant. */
#ifndef BRISK_UTF8_H
#define BRISK_UTF8_H

#include <stddef.h>

/* Classifies the sequence at s[0] (len > 0): returns 1 and sets *n to its
 * length for a well-formed sequence; 0 and *n = the maximal ill-formed
 * subpart (what one U+FFFD replaces, as Unicode recommends) for an ill-formed
 * one; -1 and *n = len when the input ends inside a sequence that more bytes
 * could still complete. */
int brisk_utf8_next(const char *s, size_t len, size_t *n);

/* 1 if s[0..len) is well-formed UTF-8 (NUL bytes included), else 0. */
int brisk_utf8_valid(const char *s, size_t len);

/* Writes s with every ill-formed subpart replaced by U+FFFD (EF BF BD) into
 * out, which must hold 3 * len bytes; returns the bytes written. No NUL. */
size_t brisk_utf8_sanitize(const char *s, size_t len, char *out);

/* Malloc'd, NUL-terminated sanitised copy; *out_len (may be NULL) its length. */
char *brisk_utf8_sanitize_dup(const char *s, size_t len, size_t *out_len);

/* How many leading bytes of s can be emitted now: len, less a final sequence
 * that is still incomplete (at most 3 bytes, held back until more bytes
 * arrive). An ill-formed tail is not held back. sanitize(s[0..k)) followed by
 * sanitize of the rest plus any later bytes equals sanitising everything. */
size_t brisk_utf8_complete_prefix(const char *s, size_t len);

#endif
