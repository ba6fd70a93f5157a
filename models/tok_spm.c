/* tok_spm.c - SentencePiece-style BPE over token scores ("llama" vocabs).
 *
 * The text (spaces written as "▁", with a leading "▁" when asked) is cut
 * into UTF-8 characters; then, as long as some pair of adjacent symbols
 * concatenates to a token, the pair whose token has the highest score is
 * merged (ties: the leftmost pair). This is what llama.cpp's
 * llm_tokenizer_spm does, and what SentencePiece's BPE model does. A symbol
 * left over that is not a token is written as its bytes' <0xNN> tokens
 * (byte fallback), or as the unknown token when the vocab has no byte
 * tokens.
 *
 * Only normal and user-defined tokens take part in merges: a control token
 * such as "</s>" or a byte token such as "<0x41>" written in the text must
 * not turn into that token (SentencePiece never produces them from text). */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/tok_internal.h"
#include "models/tok_unicode.h"

static int mergeable(const tok_vocab *v, int32_t id) {
    int t = v->ttype[id];
    return t == TOK_T_NORMAL || t == TOK_T_USER_DEFINED || t == TOK_T_UNDEFINED;
}

/* Token for the text span, if it may be produced from text; -1 otherwise. */
static int32_t span_token(const tok_vocab *v, const char *s, size_t n) {
    int32_t id = tok_lookup(v, s, n);
    return id >= 0 && mergeable(v, id) ? id : -1;
}

static int try_bigram(const tok_vocab *v, const char *buf, const tok_sym *sym, int32_t l, int32_t r,
                      tok_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    uint32_t size = sym[l].len + sym[r].len;
    int32_t id = span_token(v, buf + sym[l].start, size);
    if (id < 0)
        return 0;
    tok_bigram b = {tok_bigram_key_score(v->score[id], l), l, r, size, id};
    return tok_heap_push(h, b);
}

/* Writes one final symbol: its token, or byte fallback. */
static int emit_symbol(const tok_vocab *v, const char *buf, const tok_sym *s, tok_ids *out) {
    int32_t id = s->id >= 0 ? s->id : span_token(v, buf + s->start, s->len);
    if (id >= 0)
        return tok_ids_push(out, id);
    int all_bytes = 1;
    for (uint32_t i = 0; i < s->len; i++)
        if (v->byte_id[(unsigned char)buf[s->start + i]] < 0)
            all_bytes = 0;
    if (!all_bytes)
        return v->unk >= 0 ? tok_ids_push(out, v->unk) : 0;
    for (uint32_t i = 0; i < s->len; i++) {
        int rc = tok_ids_push(out, v->byte_id[(unsigned char)buf[s->start + i]]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, int space_prefix,
                   tok_ids *out) {
    static const char ws[3] = {'\xE2', '\x96', '\x81'}; /* "▁" */
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    size_t blen = len + 2 * spaces + (space_prefix ? 3 : 0);
    if (blen == 0)
        return 0;
    char *buf = malloc(blen);
    tok_sym *sym = malloc(blen * sizeof *sym);
    tok_heap heap = {0};
    int rc = 0;
    if (!buf || !sym) {
        rc = BRISK_ENOMEM;
        goto done;
    }

    /* Escape: every ' ' becomes "▁". */
    size_t o = 0;
    if (space_prefix) {
        memcpy(buf, ws, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + o, ws, 3);
            o += 3;
        } else {
            buf[o++] = text[i];
        }
    }

    /* One symbol per character; a byte that is not valid UTF-8 is a
     * character of its own (it ends up as its byte token). */
    int32_t ns = 0;
    for (size_t p = 0; p < blen;) {
        uint32_t cp;
        int l = tok_utf8_next((const unsigned char *)buf + p, blen - p, &cp);
        sym[ns].start = (uint32_t)p;
        sym[ns].len = (uint32_t)l;
        sym[ns].prev = ns - 1;
        sym[ns].next = ns + 1;
        sym[ns].id = -1;
        ns++;
        p += (size_t)l;
    }
    sym[ns - 1].next = -1;

    for (int32_t i = 0; i + 1 < ns && rc == 0; i++)
        rc = try_bigram(v, buf, sym, i, i + 1, &heap);

    tok_bigram b;
    while (rc == 0 && tok_heap_pop(&heap, &b)) {
        if (!tok_sym_merge(sym, &b))
            continue;
        rc = try_bigram(v, buf, sym, sym[b.left].prev, b.left, &heap);
        if (rc == 0)
            rc = try_bigram(v, buf, sym, b.left, sym[b.left].next, &heap);
    }

    for (int32_t i = 0; i >= 0 && rc == 0; i = sym[i].next)
        rc = emit_symbol(v, buf, &sym[i], out);
done:
    free(buf);
    free(sym);
    free(heap.v);
    return rc;
}
