/* tok_bpe.c - byte-level BPE with ranked merges ("gpt2" vocabs).
 *
 * The pre-tokenizer cuts the text into words (tok_pretok.c); within a word
 * every byte starts as the token of its GPT-2 byte char, and the adjacent
 * pair with the lowest merge rank is merged until no pair has a merge
 * (ties: the leftmost pair). Symbols carry token ids, so a merge is one hash
 * lookup of two ints rather than a string concatenation. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/tok_internal.h"

typedef struct bpe_work {
    tok_sym *sym;
    size_t cap_sym;
    tok_heap heap;
    char *enc; /* a word in byte-level chars, for whole-word lookups */
    size_t cap_enc;
} bpe_work;

static int try_merge(const tok_vocab *v, const tok_sym *sym, int32_t l, int32_t r, tok_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    int32_t rank, result;
    if (!tok_merge_find(v, sym[l].id, sym[r].id, &rank, &result))
        return 0;
    tok_bigram b = {tok_bigram_key_rank(rank, l), l, r, sym[l].len + sym[r].len, result};
    return tok_heap_push(h, b);
}

/* Llama-3 (ignore_merges): a word that is itself a token is taken whole,
 * before any merging; returns its id or -1. */
static int32_t whole_word(const tok_vocab *v, const unsigned char *w, size_t n, bpe_work *wk) {
    if (brisk_grow_libc(&wk->enc, &wk->cap_enc, 2 * n, 1, 2 * n, 0) < 0)
        return -1; /* just merge normally */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(wk->enc + k, v->byte_char[w[i]], v->byte_char_len[w[i]]);
        k += v->byte_char_len[w[i]];
    }
    int32_t id = tok_lookup(v, wk->enc, k);
    return id >= 0 && v->ttype[id] != TOK_T_CONTROL ? id : -1;
}

/* Appends id unless it is -1: a byte whose char is not in the vocab. Trained
 * byte-level vocabs may lack bytes that never occurred in training (SmolLM2
 * has no token for 0x04 or 0xFF). Hugging Face's BPE (with no unknown token
 * in the model) drops such bytes, and so does brisk, rather than write the
 * unknown token, which in these vocabs is often <|endoftext|>. */
static int emit(int32_t id, tok_ids *out) {
    return id >= 0 ? tok_ids_push(out, id) : 0;
}

static int bpe_word(const tok_vocab *v, const unsigned char *w, size_t n, bpe_work *wk,
                    tok_ids *out) {
    if (n == 1)
        return emit(v->byte_id[w[0]], out);
    if (v->ignore_merges) {
        int32_t id = whole_word(v, w, n, wk);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    if (brisk_grow_libc(&wk->sym, &wk->cap_sym, n, sizeof *wk->sym, n, 0) < 0)
        return BRISK_ENOMEM;
    /* Bytes without a token are left out before merging, so that their
     * neighbours meet, as in Hugging Face's BPE (see emit()). */
    tok_sym *sym = wk->sym;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        if (v->byte_id[w[i]] < 0)
            continue;
        sym[ns].start = (uint32_t)i;
        sym[ns].len = 1;
        sym[ns].prev = ns - 1;
        sym[ns].next = ns + 1;
        sym[ns].id = v->byte_id[w[i]];
        ns++;
    }
    if (ns == 0)
        return 0;
    sym[ns - 1].next = -1;
    tok_heap *h = &wk->heap;
    h->n = 0;
    int rc = 0;
    for (int32_t i = 0; i + 1 < ns && rc == 0; i++)
        rc = try_merge(v, sym, i, i + 1, h);
    tok_bigram b;
    while (rc == 0 && tok_heap_pop(h, &b)) {
        if (!tok_sym_merge(sym, &b))
            continue;
        rc = try_merge(v, sym, sym[b.left].prev, b.left, h);
        if (rc == 0)
            rc = try_merge(v, sym, b.left, sym[b.left].next, h);
    }
    for (int32_t i = 0; i >= 0 && rc == 0; i = sym[i].next)
        rc = tok_ids_push(out, sym[i].id);
    return rc;
}

int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out) {
    uint32_t *spans = NULL;
    size_t n_spans = 0, cap_spans = 0;
    int rc = tok_pretok_split(v->pre, text, len, &spans, &n_spans, &cap_spans);
    bpe_work wk = {0};
    for (size_t i = 0; i < n_spans && rc == 0; i++)
        rc = bpe_word(v, (const unsigned char *)text + spans[2 * i], spans[2 * i + 1], &wk, out);
    free(spans);
    free(wk.sym);
    free(wk.heap.v);
    free(wk.enc);
    return rc;
}
