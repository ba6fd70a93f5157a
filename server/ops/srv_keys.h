/* srv_keys.h - the API keys a server accepts, each with an id that may be
 * logged (the key itself never is).
 *
 * Only SHA-256 digests of the keys are kept. A presented key is hashed once
 * and its digest compared with every configured digest, all of them and every
 * byte, with no early exit: the time taken depends on the number of keys,
 * never on which one matched, how long a key is or how much of it was right.
 *
 * Key file (--api-key-file): one key a line, either `KEY` or `ID KEY`
 * separated by spaces or tabs; blank lines and lines whose first non-blank
 * character is '#' are ignored; a trailing CR is dropped. A key is 1 to 4096
 * visible ASCII characters (0x21-0x7e); an id is 1 to 64 of [A-Za-z0-9._-].
 * A key without an id gets `key-` and the first 8 hex digits of its SHA-256.
 * Ids and keys must be unique. Any other line is an error that names its line
 * number (never its content, which may hold a key). */
#ifndef SRV_KEYS_H
#define SRV_KEYS_H

#include <stddef.h>

typedef struct srv_keys srv_keys;

#define SRV_KEYS_MAX 1000 /* keys in one set; more belong in a gateway (docs/SECURITY.md) */
#define SRV_KEYS_MAX_KEY_BYTES 4096 /* one key */
#define SRV_KEYS_MAX_ID_BYTES 64    /* one id */
#define SRV_KEYS_MAX_FILE_BYTES (1 << 20)

/* An empty set (no auth until a key is added). NULL when out of memory.
 * Free with srv_keys_free. */
srv_keys *srv_keys_create(void);
/* Zeroes the digests and frees; NULL is a no-op. */
void srv_keys_free(srv_keys *k);

/* Adds key[0..key_len) with id (NULL: derived from the key). Returns 0 or a
 * negative BRISK_E* code with a one-line reason in err (bad characters,
 * lengths, a duplicate key or id, too many keys, out of memory). */
int srv_keys_add(srv_keys *k, const char *id, const char *key, size_t key_len, char *err,
                 size_t err_len);

/* Parses a key file's text (see the top of this file) and adds its keys.
 * A file without any key is an error. Returns 0 or a negative BRISK_E* code
 * with the first bad line's number in err. */
int srv_keys_parse(srv_keys *k, const char *text, size_t len, char *err, size_t err_len);

/* Reads path (at most SRV_KEYS_MAX_FILE_BYTES) and parses it. */
int srv_keys_load_file(srv_keys *k, const char *path, char *err, size_t err_len);

int srv_keys_count(const srv_keys *k);
/* The id of key i (borrowed, valid while k lives). */
const char *srv_keys_id(const srv_keys *k, int i);

/* The index of the key equal to tok[0..len), or -1; constant time as above. */
int srv_keys_match(const srv_keys *k, const char *tok, size_t len);

/* The id derived for a key without one: "key-" + 8 hex digits (13 bytes with
 * the NUL). */
void srv_keys_derive_id(const char *key, size_t key_len, char out[13]);

#endif
