/* tok_util.c - what the tokenizer files share: the growable id list, the
 * byte-string hash and the two open-addressing lookups (token text -> id,
 * token pair -> merge), and the merge queue (a binary heap of bigrams) that
 * both the SPM and the BPE tokenizer drive. tokenizer.c builds the maps;
 * tok_spm.c and tok_bpe.c only read them, through these functions. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/tok_internal.h"

/* ---- small helpers ------------------------------------------------------ */

int tok_ids_push(tok_ids *ids, int32_t id) {
    if (brisk_grow_libc(&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v, 64, 0) < 0)
        return BRISK_ENOMEM;
    ids->v[ids->n++] = id;
    return 0;
}

/* Eight bytes per step: the SPM merge loop hashes every candidate span, and
 * runs of "▁" make those spans tens of bytes long. The value only has to be
 * consistent within one process (byte order does not matter). */
uint32_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return (uint32_t)h;
}

uint64_t tok_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

size_t tok_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int32_t tok_lookup(const tok_vocab *v, const char *s, size_t n) {
    if (n == 0)
        return -1;
    uint32_t h = tok_hash_bytes(s, n);
    const tok_strmap *m = &v->by_text;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i].id;
        if (id < 0)
            return -1;
        if (m->slot[i].hash == h && v->text_len[id] == n &&
            !memcmp(v->text + v->text_off[id], s, n))
            return id;
    }
}

int tok_merge_find(const tok_vocab *v, int32_t left, int32_t right, int32_t *rank,
                   int32_t *result) {
    const tok_mergemap *m = &v->merges;
    if (!m->key || left < 0 || right < 0)
        return 0;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = tok_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == UINT64_MAX)
            return 0;
        if (m->key[i] == key) {
            *rank = m->rank[i];
            *result = m->result[i];
            return 1;
        }
    }
}

/* ---- merge queue -------------------------------------------------------- */

static int bigram_better(const tok_bigram *a, const tok_bigram *b) {
    return a->key > b->key;
}

int tok_heap_push(tok_heap *h, tok_bigram b) {
    if (brisk_grow_libc(&h->v, &h->cap, h->n + 1, sizeof *h->v, 64, 0) < 0)
        return BRISK_ENOMEM;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_better(&b, &h->v[parent]))
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return 0;
}

int tok_heap_pop(tok_heap *h, tok_bigram *out) {
    if (h->n == 0)
        return 0;
    *out = h->v[0];
    tok_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_better(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_better(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return 1;
}
