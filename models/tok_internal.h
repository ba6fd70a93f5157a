/* tok_internal.h - the vocabulary layout shared by the tokenizer files.
 *
 *   tokenizer.c  loading and validation, special-token splitting,
 *                decoding and the streaming decoder
 *   tok_util.c   the id list, the hash and lookups, the merge queue
 *   tok_spm.c    SentencePiece-style BPE driven by token scores
 *   tok_bpe.c    byte-level BPE driven by merge ranks
 *   tok_pretok.c the pre-tokenizer split rules that cut text into words
 *                before byte-level BPE
 *
 * Everything here is read-only after tok_vocab_create_from_gguf(), so one
 * vocab may be used by any number of threads at once. */
#ifndef TOK_INTERNAL_H
#define TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "models/tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    TOK_T_UNDEFINED = 0,
    TOK_T_NORMAL = 1,
    TOK_T_UNKNOWN = 2,
    TOK_T_CONTROL = 3,
    TOK_T_USER_DEFINED = 4,
    TOK_T_UNUSED = 5,
    TOK_T_BYTE = 6,
};

/* Pre-tokenizer split rules for byte-level BPE (tokenizer.ggml.pre). */
typedef enum {
    TOK_PRE_GPT2 =
        0,          /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TOK_PRE_LLAMA3, /* case-insensitive contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, ... */
    TOK_PRE_QWEN2,  /* the Llama-3 rules with single digits \p{N} */
    TOK_PRE_SMOLLM, /* every \p{N} on its own, then the GPT-2 rules on the rest */
} tok_pre_kind;

/* Open-addressing map from a byte string (a token's text) to its id. The
 * strings are not stored: a slot holds the id, whose text is compared. */
typedef struct tok_strslot {
    uint32_t hash; /* full hash of the slot's text (for fast mismatch) */
    int32_t id;    /* -1 = empty */
} tok_strslot;     /* side by side: one cache miss per probe, not two */

typedef struct tok_strmap {
    tok_strslot *slot;
    size_t mask; /* capacity - 1; capacity is a power of two */
} tok_strmap;

/* Open-addressing map from a pair of token ids to a BPE merge. */
typedef struct tok_mergemap {
    uint64_t *key;   /* (left << 32) | right; UINT64_MAX = empty */
    int32_t *rank;   /* position in tokenizer.ggml.merges: lower merges first */
    int32_t *result; /* id of the concatenation */
    size_t mask;
} tok_mergemap;

struct tok_vocab {
    tok_type type;
    int32_t n;

    /* Token i's text is text[text_off[i] .. + text_len[i]] (as in the GGUF);
     * the bytes it decodes to are piece[piece_off[i] .. + piece_len[i]]. */
    char *text;
    uint32_t *text_off, *text_len;
    char *piece;
    uint32_t *piece_off, *piece_len;
    float *score;   /* SPM merge priority; NULL for BPE */
    uint8_t *ttype; /* TOK_T_* */
    uint8_t *is_eog;

    tok_strmap by_text;
    tok_mergemap merges; /* BPE only */
    int32_t n_merges;

    /* SPM: the <0xNN> token of each byte. BPE: the token of the one-char
     * string GPT-2's byte-to-unicode table maps each byte to. -1 if absent. */
    int32_t byte_id[256];
    /* BPE: the UTF-8 of the char byte b is mapped to (1 or 2 bytes). */
    char byte_char[256][2];
    uint8_t byte_char_len[256];

    tok_pre_kind pre;
    int ignore_merges; /* BPE: a word that is a whole token skips merging (Llama-3) */

    int32_t bos, eos, eot, unk, pad; /* -1 = none */
    int32_t *extra_eog;              /* more ids that end a generation (read_extra_eog) */
    int n_extra_eog;
    int add_bos;
    int add_space_prefix; /* SPM */
    /* SPM: no prefix when the text already starts with a space, as a
     * tokenizer.json Metaspace pre-tokenizer does (tok_hfjson.c) */
    int prefix_unless_space;

    /* Tokens matched in the text under TOK_PARSE_SPECIAL (control and
     * user-defined), grouped by first byte and longest first within a group:
     * the candidates for a text position starting with byte b are
     * special[special_start[b] .. special_start[b+1]). */
    int32_t *special;
    int32_t special_start[257];

    /* Most bytes any piece can decode to in the streaming decoder (invalid
     * UTF-8 becoming U+FFFD), for tok_decoder_max_out(). */
    size_t max_decoded;
    /* The longest token text, in bytes (tok_max_token_bytes). */
    uint32_t max_text_len;
};

/* ---- growable id list (tokenizer.c) ------------------------------------ */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

/* Appends id; returns 0 or BRISK_ENOMEM. */
int tok_ids_push(tok_ids *ids, int32_t id);

/* ---- lookups (tokenizer.c) --------------------------------------------- */
uint32_t tok_hash_bytes(const void *p, size_t n);
/* A 64-bit mixer (the merge map's hash) and the smallest power of two >= n
 * and >= 16 (the maps' capacities); tok_util.c. */
uint64_t tok_mix64(uint64_t x);
size_t tok_pow2_at_least(size_t n);
/* Id of the token whose text is exactly s[0..n), or -1. */
int32_t tok_lookup(const tok_vocab *v, const char *s, size_t n);
/* 1 if a BPE merge of tokens left and right exists, with its rank and the
 * id of the merged token. */
int tok_merge_find(const tok_vocab *v, int32_t left, int32_t right, int32_t *rank, int32_t *result);

/* ---- merge queue (tokenizer.c) ----------------------------------------- */
/* A candidate merge of two adjacent symbols. Both tokenizers keep symbols
 * as spans of the input that only ever grow, so a candidate is still valid
 * exactly when both symbols are alive and their lengths still add up to
 * `size` (whatever merged in between changed one of the two). */
typedef struct tok_bigram {
    uint64_t key; /* higher merges first; see tok_bigram_key_*() */
    int32_t left; /* symbol index */
    int32_t right;
    uint32_t size; /* combined byte length when the candidate was made */
    int32_t id;    /* token id of the merged symbol */
} tok_bigram;

/* One integer that orders candidates as the tokenizers want, so the heap
 * compares once: the priority (the SPM score, whose float bits are mapped
 * to an unsigned order; or the BPE rank, lower first) in the high half, and
 * for equal priorities the leftmost pair first. */
static inline uint64_t tok_bigram_key_score(float score, int32_t left) {
    uint32_t u;
    score += 0.0f; /* -0 and +0 compare equal as floats; make them one */
    memcpy(&u, &score, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (0xFFFFFFFFu - (uint32_t)left);
}
static inline uint64_t tok_bigram_key_rank(int32_t rank, int32_t left) {
    return ((uint64_t)(0xFFFFFFFFu - (uint32_t)rank) << 32) | (0xFFFFFFFFu - (uint32_t)left);
}

typedef struct tok_heap {
    tok_bigram *v;
    size_t n, cap;
} tok_heap;

int tok_heap_push(tok_heap *h, tok_bigram b);
/* Removes the best candidate into *out; returns 0 when the heap is empty. */
int tok_heap_pop(tok_heap *h, tok_bigram *out);

/* A symbol of the merge loops: a span of the word, doubly linked. */
typedef struct tok_sym {
    uint32_t start, len; /* len 0 = merged away */
    int32_t prev, next;  /* -1 at either end */
    int32_t id;          /* token of the span, -1 if none */
} tok_sym;

/* Applies candidate b: the right symbol joins the left one and leaves the
 * list. Returns 0 (nothing done) when b is stale. */
static inline int tok_sym_merge(tok_sym *sym, const tok_bigram *b) {
    tok_sym *l = &sym[b->left], *r = &sym[b->right];
    if (l->len == 0 || r->len == 0 || l->len + r->len != b->size)
        return 0;
    l->len += r->len;
    l->id = b->id;
    r->len = 0;
    l->next = r->next;
    if (r->next >= 0)
        sym[r->next].prev = b->left;
    return 1;
}

/* ---- the tokenizers ----------------------------------------------------- */
/* Both append the ids of one stretch of plain text (no special tokens in
 * it) to out and return 0 or a negative code. */

/* SPM: space_prefix adds the leading "▁" (the caller decides: at the start
 * of the text and after a special token, when the vocab asks for it). */
int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, int space_prefix,
                   tok_ids *out);
int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);

/* ---- pre-tokenizer (tok_pretok.c) -------------------------------------- */
/* Cuts text into words by the rules of kind and appends each word's byte
 * span as a pair (start, length) to *spans (n_spans pairs; the array is
 * realloc'ed, the caller frees it). Returns 0 or BRISK_ENOMEM. Invalid
 * UTF-8 bytes are kept, one "other" character each. */
int tok_pretok_split(tok_pre_kind kind, const char *text, size_t len, uint32_t **spans,
                     size_t *n_spans, size_t *cap_spans);

#endif
