/* srv_keys.c - API keys and their ids: the key-file parser, id derivation
 * and the constant-time match (see srv_keys.h). */
#include "server/ops/srv_keys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_file.h"
#include "common/brisk_sha256.h"

typedef struct key_entry {
    uint8_t digest[BRISK_SHA256_BYTES];
    char id[SRV_KEYS_MAX_ID_BYTES + 1];
} key_entry;

struct srv_keys {
    key_entry *e;
    int n, cap;
};

srv_keys *srv_keys_create(void) {
    return brisk_calloc(1, sizeof(srv_keys));
}

void srv_keys_free(srv_keys *k) {
    if (!k)
        return;
    brisk_wipe(k->e, (size_t)k->cap * sizeof *k->e);
    free(k->e);
    free(k);
}

static int key_char_ok(unsigned char c) {
    return c >= 0x21 && c <= 0x7e;
}

static int id_char_ok(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

void srv_keys_derive_id(const char *key, size_t key_len, char out[13]) {
    uint8_t d[BRISK_SHA256_BYTES];
    brisk_sha256(key, key_len, d);
    memcpy(out, "key-", 4);
    brisk_sha256_hex(d, 4, out + 4);
}

int srv_keys_add(srv_keys *k, const char *id, const char *key, size_t key_len, char *err,
                 size_t err_len) {
    if (!k || !key)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "api keys: invalid arguments");
    if (key_len == 0 || key_len > SRV_KEYS_MAX_KEY_BYTES)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "a key must be 1 to %d characters",
                             SRV_KEYS_MAX_KEY_BYTES);
    for (size_t i = 0; i < key_len; i++)
        if (!key_char_ok((unsigned char)key[i]))
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "a key must be visible ASCII characters (no spaces or controls)");
    size_t id_len = id ? strlen(id) : 0;
    if (id) {
        if (id_len == 0 || id_len > SRV_KEYS_MAX_ID_BYTES)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "a key id must be 1 to %d characters",
                                 SRV_KEYS_MAX_ID_BYTES);
        for (size_t i = 0; i < id_len; i++)
            if (!id_char_ok((unsigned char)id[i]))
                return brisk_set_err(err, err_len, BRISK_EINVAL,
                                     "a key id may hold only A-Z a-z 0-9 . _ -");
    }
    if (k->n >= SRV_KEYS_MAX)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "more than %d keys", SRV_KEYS_MAX);
    key_entry ne;
    memset(&ne, 0, sizeof ne);
    brisk_sha256(key, key_len, ne.digest);
    if (id)
        memcpy(ne.id, id, id_len + 1);
    else
        srv_keys_derive_id(key, key_len, ne.id);
    for (int i = 0; i < k->n; i++) {
        if (memcmp(k->e[i].digest, ne.digest, sizeof ne.digest) == 0)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "the same key is listed twice");
        if (strcmp(k->e[i].id, ne.id) == 0)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "key id '%s' is used twice", ne.id);
    }
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 4;
        key_entry *e = brisk_calloc((size_t)cap, sizeof *e);
        if (!e)
            return brisk_set_err(err, err_len, BRISK_ENOMEM, "api keys: out of memory");
        if (k->n)
            memcpy(e, k->e, (size_t)k->n * sizeof *e);
        /* The old array held digests: wipe it before it goes back to malloc. */
        brisk_wipe(k->e, (size_t)k->cap * sizeof *k->e);
        free(k->e);
        k->e = e;
        k->cap = cap;
    }
    k->e[k->n++] = ne;
    return 0;
}

static int is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* One line (no newline): ignored, `KEY` or `ID KEY`. */
static int parse_line(srv_keys *k, const char *s, size_t n, int line, char *err, size_t err_len) {
    if (n > 0 && s[n - 1] == '\r')
        n--;
    const char *tok[3];
    size_t len[3];
    int nt = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && is_blank(s[i]))
            i++;
        if (i == n)
            break;
        if (nt == 0 && s[i] == '#')
            return 0;
        if (nt == 3)
            break;
        tok[nt] = s + i;
        while (i < n && !is_blank(s[i]))
            i++;
        len[nt] = (size_t)(s + i - tok[nt]);
        nt++;
    }
    if (nt == 0)
        return 0;
    if (nt > 2)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "api key file line %d: expected KEY or ID KEY", line);
    char id[SRV_KEYS_MAX_ID_BYTES + 1];
    if (nt == 2) {
        if (len[0] > SRV_KEYS_MAX_ID_BYTES)
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "api key file line %d: a key id must be 1 to %d characters", line,
                                 SRV_KEYS_MAX_ID_BYTES);
        memcpy(id, tok[0], len[0]);
        id[len[0]] = '\0';
        if (memchr(tok[0], '\0', len[0]))
            id[0] = '\x01'; /* refused below as a bad character */
    }
    char why[160];
    int rc = srv_keys_add(k, nt == 2 ? id : NULL, tok[nt - 1], len[nt - 1], why, sizeof why);
    if (rc < 0)
        return brisk_set_err(err, err_len, rc, "api key file line %d: %s", line, why);
    return 0;
}

int srv_keys_parse(srv_keys *k, const char *text, size_t len, char *err, size_t err_len) {
    if (!k || (!text && len))
        return brisk_set_err(err, err_len, BRISK_EINVAL, "api keys: invalid arguments");
    int line = 1, before = k->n;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] != '\n')
            continue;
        int rc = parse_line(k, text + start, i - start, line, err, err_len);
        if (rc < 0)
            return rc;
        start = i + 1;
        line++;
    }
    if (k->n == before)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "api key file: no key in it");
    return 0;
}

int srv_keys_load_file(srv_keys *k, const char *path, char *err, size_t err_len) {
    char *text;
    size_t len;
    int rc =
        brisk_file_read(path, SRV_KEYS_MAX_FILE_BYTES, "api key file", &text, &len, err, err_len);
    if (rc == BRISK_ENOMEM)
        return brisk_set_err(err, err_len, rc, "api keys: out of memory");
    if (rc < 0)
        return rc;
    rc = srv_keys_parse(k, text, len, err, err_len);
    brisk_wipe(text, len);
    free(text);
    return rc;
}

int srv_keys_count(const srv_keys *k) {
    return k ? k->n : 0;
}

const char *srv_keys_id(const srv_keys *k, int i) {
    return k && i >= 0 && i < k->n ? k->e[i].id : NULL;
}

int srv_keys_match(const srv_keys *k, const char *tok, size_t len) {
    if (!k || k->n == 0)
        return -1;
    uint8_t d[BRISK_SHA256_BYTES];
    brisk_sha256(tok ? tok : "", tok ? len : 0, d);
    /* Every key and every byte, whatever matched; the index is selected with
     * arithmetic, not a branch on the comparison. */
    int found = -1;
    for (int i = 0; i < k->n; i++) {
        volatile uint8_t diff = 0;
        for (int j = 0; j < BRISK_SHA256_BYTES; j++)
            diff |= (uint8_t)(d[j] ^ k->e[i].digest[j]);
        /* eq is 1 when diff == 0: (diff - 1) >> 8 has bit 0 set only then. */
        unsigned eq = ((unsigned)diff - 1u) >> 8 & 1u;
        unsigned mask = 0u - eq;
        found = (int)(((unsigned)found & ~mask) | ((unsigned)i & mask));
    }
    return found;
}
