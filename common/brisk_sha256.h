/* brisk_sha256.h - SHA-256 (FIPS 180-4), streaming and one-shot. Used to
 * derive API key ids and to compare presented keys in constant time (the
 * digests, not the keys, are compared). No allocation; the context lives in
 * the caller's memory. */
#ifndef BRISK_SHA256_H
#define BRISK_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define BRISK_SHA256_BYTES 32

typedef struct brisk_sha256_ctx {
    uint32_t h[8];
    uint64_t n_bytes;  /* message bytes seen so far */
    uint8_t block[64]; /* a partial block */
    size_t block_len;
} brisk_sha256_ctx;

void brisk_sha256_init(brisk_sha256_ctx *s);
void brisk_sha256_update(brisk_sha256_ctx *s, const void *data, size_t len);
/* Writes the 32-byte digest; s must be initialised again before reuse. */
void brisk_sha256_final(brisk_sha256_ctx *s, uint8_t out[BRISK_SHA256_BYTES]);

/* One call: digest of data[0..len). */
void brisk_sha256(const void *data, size_t len, uint8_t out[BRISK_SHA256_BYTES]);

/* Lower-case hex of the first n_bytes of a digest into out (2 * n_bytes + 1
 * bytes, NUL-terminated). */
void brisk_sha256_hex(const uint8_t digest[BRISK_SHA256_BYTES], size_t n_bytes, char *out);

#endif
