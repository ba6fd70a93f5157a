/* tokenizer.c - vocabulary loading and validation, special-token splitting,
 * dispatch to the SPM / BPE tokenizers, and decoding (the shared helpers are
 * in tok_util.c).
 *
 * The GGUF metadata is untrusted: every array length, id and merge string is
 * checked here, and anything wrong fails the load with BRISK_EFORMAT and a
 * one-line reason, never later with a crash. Everything the tokenizers need
 * at run time (texts, decoded pieces, maps) is copied or built once here. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/tok_internal.h"
#include "models/tok_unicode.h"

/* Upper bounds that keep every size computation below far from overflow;
 * real vocabularies are under 300k tokens and 300k merges. */
#define MAX_TOKENS (1 << 24)
#define MAX_MERGES (1 << 24)
#define MAX_TOKEN_BYTES (1 << 20)

/* ---- loading ------------------------------------------------------------ */

void tok_vocab_free(tok_vocab *v) {
    if (!v)
        return;
    free(v->text);
    free(v->text_off);
    free(v->text_len);
    free(v->piece);
    free(v->piece_off);
    free(v->piece_len);
    free(v->score);
    free(v->ttype);
    free(v->is_eog);
    free(v->extra_eog);
    free(v->by_text.slot);
    free(v->merges.key);
    free(v->merges.rank);
    free(v->merges.result);
    free(v->special);
    free(v);
}

/* Reads element i of a numeric GGUF array as an integer; 0 on success. */
static int arr_int(gguf_type t, const void *data, uint64_t i, int64_t *out) {
    const unsigned char *p = data;
    switch (t) {
    case GGUF_TYPE_INT8: {
        int8_t x;
        memcpy(&x, p + i, 1);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_UINT8: {
        uint8_t x;
        memcpy(&x, p + i, 1);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p + 2 * i, 2);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p + 4 * i, 4);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        *out = x;
        return 0;
    }
    case GGUF_TYPE_INT64: {
        int64_t x;
        memcpy(&x, p + 8 * i, 8);
        *out = x;
        return 0;
    }
    default: return -1;
    }
}

/* Reads an optional token id key. Absent: *id keeps its default. Present:
 * must be an integer in [0, n); -1 and 0xFFFFFFFF (how converters write
 * "no such token") mean none. */
static int read_id(const gguf_file *gf, const char *key, int32_t n, int32_t *id, char *err,
                   size_t err_len) {
    int64_t x;
    int rc = gguf_get_i64(gf, key, &x);
    if (rc == BRISK_ENOTFOUND)
        return 0;
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: %s is not an integer", key);
    if (x == -1 || x == 0xFFFFFFFFLL) {
        *id = -1;
        return 0;
    }
    if (x < 0 || x >= n)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: %s = %lld is outside the %d tokens", key, (long long)x,
                             (int)n);
    *id = (int32_t)x;
    return 0;
}

static int read_bool(const gguf_file *gf, const char *key, int *out, char *err, size_t err_len) {
    int b, rc = gguf_get_bool(gf, key, &b);
    if (rc == BRISK_ENOTFOUND)
        return 0;
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: %s is not a bool", key);
    *out = b;
    return 0;
}

static int build_text_map(tok_vocab *v) {
    size_t cap = tok_pow2_at_least((size_t)v->n * 2);
    tok_strmap *m = &v->by_text;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot)
        return BRISK_ENOMEM;
    m->mask = cap - 1;
    for (size_t i = 0; i < cap; i++)
        m->slot[i].id = -1;
    for (int32_t id = 0; id < v->n; id++) {
        size_t n = v->text_len[id];
        if (n == 0)
            continue;
        const char *s = v->text + v->text_off[id];
        uint32_t h = tok_hash_bytes(s, n);
        size_t i = h & m->mask;
        for (;; i = (i + 1) & m->mask) {
            int32_t o = m->slot[i].id;
            if (o < 0)
                break;
            /* A repeated text maps to its last id, as llama.cpp does. */
            if (m->slot[i].hash == h && v->text_len[o] == n &&
                !memcmp(v->text + v->text_off[o], s, n))
                break;
        }
        m->slot[i].hash = h;
        m->slot[i].id = id;
    }
    return 0;
}

/* GPT-2's reversible byte -> printable char table: bytes that are printable
 * Latin-1 map to themselves, the other 68 to U+0100.. in byte order. */
static uint32_t gpt2_byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE)))
            k++;
    return 0x100 + k;
}

static int load_merges(tok_vocab *v, const gguf_file *gf, char *err, size_t err_len) {
    gguf_str *m = NULL;
    uint64_t n = 0;
    int rc = gguf_get_arr_str(gf, "tokenizer.ggml.merges", &m, &n);
    if (rc == BRISK_ENOTFOUND)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: gpt2 vocab without tokenizer.ggml.merges");
    if (rc == BRISK_ENOMEM)
        return brisk_set_err(err, err_len, rc, "tokenizer: out of memory");
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: tokenizer.ggml.merges is not a string array");
    if (n > MAX_MERGES) {
        free(m);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: %llu merges (max %d)",
                             (unsigned long long)n, MAX_MERGES);
    }
    size_t cap = tok_pow2_at_least((size_t)n * 2);
    tok_mergemap *mm = &v->merges;
    mm->key = malloc(cap * sizeof *mm->key);
    mm->rank = malloc(cap * sizeof *mm->rank);
    mm->result = malloc(cap * sizeof *mm->result);
    if (!mm->key || !mm->rank || !mm->result) {
        free(m);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
    }
    mm->mask = cap - 1;
    for (size_t i = 0; i < cap; i++)
        mm->key[i] = UINT64_MAX;

    char small[512];
    size_t skipped = 0;
    for (uint64_t r = 0; r < n; r++) {
        const char *s = m[r].data;
        size_t len = (size_t)m[r].len;
        /* "left right": the separator is the first space after the first
         * byte (a left part may itself begin with a space). */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp + 1 == s + len) {
            free(m);
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "tokenizer: merge %llu is not of the form \"a b\"",
                                 (unsigned long long)r);
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t a = tok_lookup(v, s, ll), b = tok_lookup(v, sp + 1, rl), c = -1;
        if (a >= 0 && b >= 0) {
            /* The merged text: both parts back to back, without the space. */
            char *cat = len <= sizeof small ? small : malloc(len);
            if (!cat) {
                free(m);
                return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
            }
            memcpy(cat, s, ll);
            memcpy(cat + ll, sp + 1, rl);
            c = tok_lookup(v, cat, ll + rl);
            if (cat != small)
                free(cat);
        }
        if (c < 0) {
            /* Hugging Face refuses such a merge; it can never apply here,
             * since symbols always stand for tokens, so it is dropped. */
            skipped++;
            continue;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t i = tok_mix64(key) & mm->mask;
        while (mm->key[i] != UINT64_MAX && mm->key[i] != key)
            i = (i + 1) & mm->mask;
        if (mm->key[i] == key)
            continue; /* a repeated merge keeps its first rank */
        mm->key[i] = key;
        mm->rank[i] = (int32_t)r;
        mm->result[i] = c;
    }
    free(m);
    v->n_merges = (int32_t)n;
    if (skipped)
        BRISK_WARN("tokenizer: %zu of %llu merges name texts that are not tokens; ignored", skipped,
                   (unsigned long long)n);
    return 0;
}

/* Parses "<0xNN>" (SPM byte tokens); returns the byte or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The most bytes the streaming decoder can write for a piece of n bytes
 * starting with nothing held back: valid characters as they are, and at
 * worst one 3-byte U+FFFD for each other byte. */
static size_t decoded_worst_len(const unsigned char *p, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_next(p + i, n - i, &cp);
        out += cp == TOK_CP_INVALID ? 3 : (size_t)l;
        i += (size_t)l;
    }
    return out;
}

/* Fills piece / piece_off / piece_len: the bytes each token decodes to.
 * rev is the inverse of gpt2_byte_cp (code point -> byte, -1 if none). */
static void build_pieces(tok_vocab *v, const int16_t rev[0x144]) {
    size_t o = 0;
    for (int32_t id = 0; id < v->n; id++) {
        const char *s = v->text + v->text_off[id];
        size_t n = v->text_len[id];
        char *dst = v->piece + o;
        size_t k = 0;
        int t = v->ttype[id];
        int b;
        v->piece_off[id] = (uint32_t)o;
        if (t == TOK_T_UNUSED) {
            /* nothing: unused slots never stand for text */
        } else if (t == TOK_T_BYTE && (b = parse_byte_token(s, n)) >= 0) {
            dst[k++] = (char)b;
        } else if (t == TOK_T_CONTROL || t == TOK_T_UNKNOWN || t == TOK_T_USER_DEFINED ||
                   t == TOK_T_BYTE) {
            memcpy(dst, s, n); /* written as is */
            k = n;
        } else if (v->type == TOK_TYPE_SPM) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                    dst[k++] = ' ';
                    i += 3;
                } else {
                    dst[k++] = s[i++];
                }
            }
        } else {
            /* Byte-level: each char stands for one byte; a char outside the
             * table (not produced by the byte mapping) is kept as is. */
            const unsigned char *u = (const unsigned char *)s;
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                int l = tok_utf8_next(u + i, n - i, &cp);
                if (cp < 0x144 && rev[cp] >= 0) {
                    dst[k++] = (char)rev[cp];
                } else {
                    memcpy(dst + k, s + i, (size_t)l);
                    k += (size_t)l;
                }
                i += (size_t)l;
            }
        }
        v->piece_len[id] = (uint32_t)k;
        size_t worst = decoded_worst_len((const unsigned char *)dst, k);
        if (worst > v->max_decoded)
            v->max_decoded = worst;
        o += k;
    }
}

typedef struct spec_ent {
    unsigned char first;
    uint32_t len;
    int32_t id;
} spec_ent;

static int spec_cmp(const void *pa, const void *pb) {
    const spec_ent *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

static int build_specials(tok_vocab *v) {
    size_t k = 0;
    for (int32_t id = 0; id < v->n; id++)
        if ((v->ttype[id] == TOK_T_CONTROL || v->ttype[id] == TOK_T_USER_DEFINED) &&
            v->text_len[id] > 0)
            k++;
    spec_ent *e = malloc((k ? k : 1) * sizeof *e);
    v->special = malloc((k ? k : 1) * sizeof *v->special);
    if (!e || !v->special) {
        free(e);
        return BRISK_ENOMEM;
    }
    k = 0;
    for (int32_t id = 0; id < v->n; id++) {
        if ((v->ttype[id] == TOK_T_CONTROL || v->ttype[id] == TOK_T_USER_DEFINED) &&
            v->text_len[id] > 0) {
            e[k].first = (unsigned char)v->text[v->text_off[id]];
            e[k].len = v->text_len[id];
            e[k].id = id;
            k++;
        }
    }
    qsort(e, k, sizeof *e, spec_cmp);
    size_t j = 0;
    for (int b = 0; b < 256; b++) {
        v->special_start[b] = (int32_t)j;
        while (j < k && e[j].first == b) {
            v->special[j] = e[j].id;
            j++;
        }
    }
    v->special_start[256] = (int32_t)k;
    free(e);
    return 0;
}

static void mark_eog(tok_vocab *v) {
    static const char *const names[] = {"<|im_end|>", "<|eot_id|>",    "<|endoftext|>",  "<|end|>",
                                        "</s>",       "<end_of_turn>", "<|end_of_text|>"};
    if (v->eos >= 0)
        v->is_eog[v->eos] = 1;
    if (v->eot >= 0)
        v->is_eog[v->eot] = 1;
    for (int i = 0; i < v->n_extra_eog; i++)
        v->is_eog[v->extra_eog[i]] = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tok_lookup(v, names[i], strlen(names[i]));
        if (id >= 0 && v->ttype[id] == TOK_T_CONTROL)
            v->is_eog[id] = 1;
    }
}

/* brisk.generation.eos_token_ids (a Hugging Face folder's
 * generation_config.json eos_token_id list): more ids that end a
 * generation, each inside the vocabulary. */
static int read_extra_eog(tok_vocab *v, const gguf_file *gf, char *err, size_t err_len) {
    gguf_type et;
    uint64_t n;
    const void *data;
    int rc = gguf_get_arr(gf, "brisk.generation.eos_token_ids", &et, &n, &data);
    if (rc == BRISK_ENOTFOUND)
        return 0;
    if (rc < 0 || et != GGUF_TYPE_INT32)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: brisk.generation.eos_token_ids is not an int32 array");
    v->extra_eog = calloc(n ? n : 1, sizeof *v->extra_eog);
    if (!v->extra_eog)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        int32_t id;
        memcpy(&id, (const uint8_t *)data + 4 * i, 4);
        if (id < 0 || id >= v->n)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "tokenizer: eos token id %d is outside the vocabulary of %d", id,
                                 v->n);
        v->extra_eog[v->n_extra_eog++] = id;
    }
    return 0;
}

static int pre_from_name(tok_vocab *v, const gguf_file *gf, char *err, size_t err_len) {
    gguf_str s;
    v->pre = TOK_PRE_GPT2;
    int rc = gguf_get_str(gf, "tokenizer.ggml.pre", &s);
    if (rc == BRISK_ENOTFOUND)
        return 0;
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: tokenizer.ggml.pre is not a string");
    if (gguf_str_eq(s, "default") || gguf_str_eq(s, "gpt2") || gguf_str_eq(s, "gpt-2")) {
        v->pre = TOK_PRE_GPT2;
    } else if (gguf_str_eq(s, "llama3") || gguf_str_eq(s, "llama-v3") ||
               gguf_str_eq(s, "llama-bpe")) {
        v->pre = TOK_PRE_LLAMA3;
        v->ignore_merges = 1; /* Llama-3's tokenizer.json sets ignore_merges */
    } else if (gguf_str_eq(s, "qwen2")) {
        v->pre = TOK_PRE_QWEN2;
    } else if (gguf_str_eq(s, "smollm") || gguf_str_eq(s, "starcoder") ||
               gguf_str_eq(s, "refact") || gguf_str_eq(s, "command-r") ||
               gguf_str_eq(s, "codeshell")) {
        /* llama.cpp gives these families the same two expressions. */
        v->pre = TOK_PRE_SMOLLM;
    } else {
        int n = s.len > 64 ? 64 : (int)s.len;
        BRISK_WARN("tokenizer: unknown pre-tokenizer '%.*s'; using the GPT-2 rules", n, s.data);
    }
    return 0;
}

/* Copies tokens, scores and types out of the file; validates lengths. */
static int load_tokens(tok_vocab *v, const gguf_file *gf, int *had_types, char *err,
                       size_t err_len) {
    gguf_str *toks = NULL;
    uint64_t n = 0;
    int rc = gguf_get_arr_str(gf, "tokenizer.ggml.tokens", &toks, &n);
    if (rc == BRISK_ENOMEM)
        return brisk_set_err(err, err_len, rc, "tokenizer: out of memory");
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: %s",
                             rc == BRISK_ENOTFOUND ? "missing tokenizer.ggml.tokens"
                                                   : "tokenizer.ggml.tokens is not a string array");
    if (n == 0 || n > MAX_TOKENS) {
        free(toks);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: %llu tokens (expected 1..%d)",
                             (unsigned long long)n, MAX_TOKENS);
    }
    v->n = (int32_t)n;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        /* Real tokens are at most a few hundred bytes; this keeps every
         * piece length representable in the int that returns it. */
        if (toks[i].len > MAX_TOKEN_BYTES) {
            unsigned long long l = (unsigned long long)toks[i].len;
            free(toks);
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "tokenizer: token %llu is %llu bytes long", (unsigned long long)i,
                                 l);
        }
        total += (size_t)toks[i].len;
        if (toks[i].len > v->max_text_len)
            v->max_text_len = (uint32_t)toks[i].len;
    }
    if (total > UINT32_MAX - 1) {
        free(toks);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "tokenizer: token texts too large");
    }
    v->text = malloc(total + 1);
    v->piece = malloc(total + 1);
    v->text_off = malloc(n * sizeof *v->text_off);
    v->text_len = malloc(n * sizeof *v->text_len);
    v->piece_off = malloc(n * sizeof *v->piece_off);
    v->piece_len = malloc(n * sizeof *v->piece_len);
    v->ttype = malloc(n);
    v->is_eog = calloc(n, 1);
    if (!v->text || !v->piece || !v->text_off || !v->text_len || !v->piece_off || !v->piece_len ||
        !v->ttype || !v->is_eog) {
        free(toks);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
    }
    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(v->text + o, toks[i].data, (size_t)toks[i].len);
        v->text_off[i] = (uint32_t)o;
        v->text_len[i] = (uint32_t)toks[i].len;
        o += (size_t)toks[i].len;
    }
    free(toks);

    gguf_type et;
    uint64_t cnt;
    const void *data;
    rc = gguf_get_arr(gf, "tokenizer.ggml.scores", &et, &cnt, &data);
    if (rc == 0) {
        if (et != GGUF_TYPE_FLOAT32 || cnt != n)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "tokenizer: tokenizer.ggml.scores must be %llu float32 values",
                                 (unsigned long long)n);
        /* Only SPM merges by score, but a NaN is a broken file either way. */
        for (uint64_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, (const char *)data + 4 * i, 4);
            if (isnan(f))
                return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                     "tokenizer: score of token %llu is NaN",
                                     (unsigned long long)i);
        }
        if (v->type == TOK_TYPE_SPM) {
            v->score = malloc(n * sizeof *v->score);
            if (!v->score)
                return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
            memcpy(v->score, data, n * sizeof *v->score);
        }
    } else if (rc != BRISK_ENOTFOUND) {
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: tokenizer.ggml.scores is not an array");
    } else if (v->type == TOK_TYPE_SPM) {
        BRISK_WARN("tokenizer: SPM vocab without scores; merges will be leftmost-first");
    }
    if (v->type == TOK_TYPE_SPM && !v->score) {
        v->score = calloc(n, sizeof *v->score);
        if (!v->score)
            return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
    }

    rc = gguf_get_arr(gf, "tokenizer.ggml.token_type", &et, &cnt, &data);
    *had_types = rc == 0;
    if (rc == 0) {
        if (cnt != n)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "tokenizer: %llu token types for %llu tokens",
                                 (unsigned long long)cnt, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            int64_t t;
            if (arr_int(et, data, i, &t) < 0)
                return brisk_set_err(
                    err, err_len, BRISK_EFORMAT,
                    "tokenizer: tokenizer.ggml.token_type is not an integer array");
            if (t < 0 || t > TOK_T_BYTE)
                return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                     "tokenizer: token %llu has type %lld", (unsigned long long)i,
                                     (long long)t);
            v->ttype[i] = (uint8_t)t;
        }
    } else if (rc != BRISK_ENOTFOUND) {
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: tokenizer.ggml.token_type is not an array");
    } else {
        /* No types: everything is normal text, except SPM byte tokens, which
         * must not decode as their literal "<0xNN>". */
        for (int32_t i = 0; i < v->n; i++) {
            int bt = v->type == TOK_TYPE_SPM
                         ? parse_byte_token(v->text + v->text_off[i], v->text_len[i])
                         : -1;
            v->ttype[i] = bt >= 0 ? TOK_T_BYTE : TOK_T_NORMAL;
        }
    }
    return 0;
}

int tok_vocab_create_from_gguf(const gguf_file *gf, tok_vocab **out, char *err, size_t err_len) {
    if (!out)
        return BRISK_EINVAL;
    *out = NULL;
    if (!gf)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "tokenizer: no file");
    gguf_str model;
    int rc = gguf_get_str(gf, "tokenizer.ggml.model", &model);
    if (rc == BRISK_ENOTFOUND)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: missing tokenizer.ggml.model");
    if (rc < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "tokenizer: tokenizer.ggml.model is not a string");
    tok_type type;
    if (gguf_str_eq(model, "llama")) {
        type = TOK_TYPE_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        type = TOK_TYPE_BPE;
    } else {
        int n = model.len > 64 ? 64 : (int)model.len;
        return brisk_set_err(err, err_len, BRISK_EUNSUPPORTED,
                             "tokenizer: unsupported tokenizer model '%.*s'", n, model.data);
    }

    tok_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "tokenizer: out of memory");
    v->type = type;
    v->bos = v->eos = v->eot = v->unk = v->pad = -1;
    int had_types = 0;
    if ((rc = load_tokens(v, gf, &had_types, err, err_len)) < 0)
        goto fail;

    /* SentencePiece's fixed ids are the defaults when the keys are absent. */
    if (type == TOK_TYPE_SPM) {
        v->unk = 0 < v->n ? 0 : -1;
        v->bos = 1 < v->n ? 1 : -1;
        v->eos = 2 < v->n ? 2 : -1;
    }
    if ((rc = read_id(gf, "tokenizer.ggml.bos_token_id", v->n, &v->bos, err, err_len)) < 0 ||
        (rc = read_id(gf, "tokenizer.ggml.eos_token_id", v->n, &v->eos, err, err_len)) < 0 ||
        (rc = read_id(gf, "tokenizer.ggml.eot_token_id", v->n, &v->eot, err, err_len)) < 0 ||
        (rc = read_id(gf, "tokenizer.ggml.unknown_token_id", v->n, &v->unk, err, err_len)) < 0 ||
        (rc = read_id(gf, "tokenizer.ggml.padding_token_id", v->n, &v->pad, err, err_len)) < 0)
        goto fail;
    if (!had_types) {
        /* Without types (llama2.c-style conversions), the special ids are
         * still known: keep "<s>" and "</s>" out of decoded text. */
        if (v->unk >= 0)
            v->ttype[v->unk] = TOK_T_UNKNOWN;
        if (v->bos >= 0)
            v->ttype[v->bos] = TOK_T_CONTROL;
        if (v->eos >= 0)
            v->ttype[v->eos] = TOK_T_CONTROL;
    }
    v->add_bos = type == TOK_TYPE_SPM;
    v->add_space_prefix = type == TOK_TYPE_SPM;
    if ((rc = read_bool(gf, "tokenizer.ggml.add_bos_token", &v->add_bos, err, err_len)) < 0 ||
        (rc = read_bool(gf, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err,
                        err_len)) < 0 ||
        (rc = read_bool(gf, "brisk.tokenizer.prefix_unless_space", &v->prefix_unless_space, err,
                        err_len)) < 0)
        goto fail;
    if (type == TOK_TYPE_BPE && (rc = pre_from_name(v, gf, err, err_len)) < 0)
        goto fail;
    if ((rc = read_extra_eog(v, gf, err, err_len)) < 0)
        goto fail;

    if ((rc = build_text_map(v)) < 0) {
        brisk_set_err(err, err_len, rc, "tokenizer: out of memory");
        goto fail;
    }
    int16_t rev[0x144];
    for (int i = 0; i < 0x144; i++)
        rev[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        if (type == TOK_TYPE_SPM) {
            char name[8];
            static const char hex[] = "0123456789ABCDEF";
            memcpy(name, "<0x", 3);
            name[3] = hex[b >> 4];
            name[4] = hex[b & 15];
            name[5] = '>';
            v->byte_id[b] = tok_lookup(v, name, 6);
        } else {
            uint32_t cp = gpt2_byte_cp(b);
            rev[cp] = (int16_t)b;
            v->byte_char_len[b] = (uint8_t)tok_utf8_put(cp, v->byte_char[b]);
            v->byte_id[b] = tok_lookup(v, v->byte_char[b], v->byte_char_len[b]);
        }
    }
    if (type == TOK_TYPE_BPE && (rc = load_merges(v, gf, err, err_len)) < 0)
        goto fail;
    build_pieces(v, rev);
    if ((rc = build_specials(v)) < 0) {
        brisk_set_err(err, err_len, rc, "tokenizer: out of memory");
        goto fail;
    }
    mark_eog(v);
    *out = v;
    return 0;
fail:
    tok_vocab_free(v);
    return rc;
}

/* ---- accessors ---------------------------------------------------------- */

tok_type tok_vocab_type(const tok_vocab *v) {
    return v->type;
}
int32_t tok_n_vocab(const tok_vocab *v) {
    return v->n;
}
int32_t tok_bos(const tok_vocab *v) {
    return v->bos;
}
int32_t tok_eos(const tok_vocab *v) {
    return v->eos;
}
int tok_is_eog(const tok_vocab *v, int32_t id) {
    return id >= 0 && id < v->n && v->is_eog[id];
}
int tok_add_bos_default(const tok_vocab *v) {
    return v->add_bos;
}
size_t tok_max_token_bytes(const tok_vocab *v) {
    return v->max_text_len > 4 ? v->max_text_len : 4;
}

int32_t tok_find_piece(const tok_vocab *v, const char *text, size_t len) {
    if (!v || !text)
        return -1;
    return tok_lookup(v, text, len);
}

/* ---- encoding ----------------------------------------------------------- */

static int encode_plain(const tok_vocab *v, const char *s, size_t n, int after_special,
                        tok_ids *ids) {
    if (n == 0)
        return 0;
    if (v->type == TOK_TYPE_SPM)
        return tok_spm_encode(
            v, s, n,
            v->add_space_prefix && after_special && !(v->prefix_unless_space && s[0] == ' '), ids);
    return tok_bpe_encode(v, s, n, ids);
}

/* Longest special token whose text starts at s (n bytes left), or -1. */
static int32_t match_special(const tok_vocab *v, const char *s, size_t n) {
    unsigned char b = (unsigned char)s[0];
    for (int32_t k = v->special_start[b]; k < v->special_start[b + 1]; k++) {
        int32_t id = v->special[k];
        size_t l = v->text_len[id];
        if (l <= n && !memcmp(v->text + v->text_off[id], s, l))
            return id;
    }
    return -1;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int flags, int32_t *out, int cap) {
    if (!v || (!text && len) || cap < 0 || (cap > 0 && !out))
        return BRISK_EINVAL;
    /* Word spans are 32-bit and escaping can triple the text (SPM). */
    if (len > (size_t)UINT32_MAX / 4)
        return BRISK_ERANGE;
    tok_ids ids = {0};
    int rc = 0;
    if ((flags & TOK_ADD_BOS) && v->bos >= 0)
        rc = tok_ids_push(&ids, v->bos);
    size_t seg = 0;
    int after_special = 1; /* the start of the text counts as after one */
    if (rc == 0 && (flags & TOK_PARSE_SPECIAL) && v->special_start[256] > 0) {
        for (size_t i = 0; i < len && rc == 0;) {
            unsigned char b = (unsigned char)text[i];
            int32_t id = v->special_start[b] < v->special_start[b + 1]
                             ? match_special(v, text + i, len - i)
                             : -1;
            if (id < 0) {
                i++;
                continue;
            }
            rc = encode_plain(v, text + seg, i - seg, after_special, &ids);
            if (rc == 0)
                rc = tok_ids_push(&ids, id);
            i += v->text_len[id];
            seg = i;
            after_special = 1;
        }
    }
    if (rc == 0)
        rc = encode_plain(v, text + seg, len - seg, after_special, &ids);
    if (rc == 0 && ids.n > INT_MAX)
        rc = BRISK_ERANGE;
    if (rc == 0) {
        size_t k = ids.n < (size_t)cap ? ids.n : (size_t)cap;
        if (k)
            memcpy(out, ids.v, k * sizeof *out);
        rc = (int)ids.n;
    }
    free(ids.v);
    return rc;
}

/* ---- decoding ----------------------------------------------------------- */

/* The bytes of token id under flags (control and unknown tokens only with
 * TOK_PARSE_SPECIAL); *n = 0 for none. */
static const char *piece_of(const tok_vocab *v, int32_t id, int flags, size_t *n) {
    int t = v->ttype[id];
    if ((t == TOK_T_CONTROL || t == TOK_T_UNKNOWN) && !(flags & TOK_PARSE_SPECIAL)) {
        *n = 0;
        return "";
    }
    *n = v->piece_len[id];
    return v->piece + v->piece_off[id];
}

/* SentencePiece decoding drops the space the encoder put in front of the
 * text: the first piece that has any bytes loses a leading ' '. */
static int drops_first_space(const tok_vocab *v) {
    return v->type == TOK_TYPE_SPM && v->add_space_prefix;
}

int tok_vocab_drops_first_space(const tok_vocab *v) {
    return v && drops_first_space(v);
}

int tok_ids_have_text(const tok_vocab *v, const int32_t *ids, int n) {
    if (!v || !ids)
        return 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        if (ids[i] >= 0 && ids[i] < v->n)
            piece_of(v, ids[i], 0, &k);
        if (k)
            return 1;
    }
    return 0;
}

int tok_token_to_piece(const tok_vocab *v, int32_t id, int flags, char *buf, size_t cap) {
    if (!v || id < 0 || id >= v->n)
        return BRISK_EINVAL;
    size_t n;
    const char *p = piece_of(v, id, flags, &n);
    if (buf)
        memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

char *tok_decode_all(const tok_vocab *v, const int32_t *ids, int n, int flags) {
    if (!v || n < 0 || (n > 0 && !ids))
        return NULL;
    size_t total = 1;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < v->n)
            total += v->piece_len[ids[i]];
    char *s = malloc(total);
    if (!s)
        return NULL;
    size_t o = 0;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n)
            continue; /* out-of-vocab ids decode to nothing */
        size_t k;
        const char *p = piece_of(v, ids[i], flags, &k);
        if (k == 0)
            continue;
        if (first && drops_first_space(v) && p[0] == ' ') {
            p++;
            k--;
        }
        first = 0;
        memcpy(s + o, p, k);
        o += k;
    }
    s[o] = 0;
    return s;
}

size_t tok_decoder_max_out(const tok_vocab *v) {
    /* Held-back bytes come out with the piece (at most 3 of them, completed
     * by bytes the piece bound counts as 3 each) or as one U+FFFD. */
    return 3 + v->max_decoded;
}

void tok_decoder_init(tok_decoder *d, const tok_vocab *v, int flags) {
    memset(d, 0, sizeof *d);
    d->v = v;
    d->flags = flags;
}

/* Expected length of a UTF-8 sequence from its lead byte; 0 if not a lead. */
static int utf8_lead_len(unsigned char c) {
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* Whether b may follow the k bytes in p (1 <= k < the sequence length). */
static int utf8_cont_ok(const unsigned char *p, int k, unsigned char b) {
    unsigned lo = 0x80, hi = 0xBF;
    if (k == 1) {
        if (p[0] == 0xE0)
            lo = 0xA0;
        if (p[0] == 0xED)
            hi = 0x9F;
        if (p[0] == 0xF0)
            lo = 0x90;
        if (p[0] == 0xF4)
            hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

typedef struct outbuf {
    char *p;
    size_t n, cap;
    int full;
} outbuf;

static void out_put(outbuf *o, const void *s, size_t n) {
    if (o->n + n > o->cap) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
}

static void out_fffd(outbuf *o) {
    out_put(o, "\xEF\xBF\xBD", 3);
}

int tok_decoder_push(tok_decoder *d, int32_t id, char *out, size_t cap) {
    if (!d || !d->v || (!out && cap))
        return BRISK_EINVAL;
    const tok_vocab *v = d->v;
    if (id < 0 || id >= v->n)
        return BRISK_EINVAL;
    size_t n;
    const unsigned char *p = (const unsigned char *)piece_of(v, id, d->flags, &n);
    if (n == 0)
        return 0;
    if (d->n_pushed == 0 && !(d->flags & TOK_CONTINUATION) && drops_first_space(v) && p[0] == ' ') {
        p++;
        n--;
    }
    /* Work on a copy of the state so that ENOSPC leaves d untouched. */
    unsigned char pend[8];
    int np = d->n_pending;
    memcpy(pend, d->pending, sizeof pend);
    outbuf o = {out, 0, cap, 0};
    for (size_t i = 0; i < n && !o.full;) {
        unsigned char b = p[i];
        if (np == 0) {
            int l = utf8_lead_len(b);
            if (b < 0x80)
                out_put(&o, &b, 1);
            else if (l == 0)
                out_fffd(&o);
            else
                pend[np++] = b;
            i++;
            continue;
        }
        if (!utf8_cont_ok(pend, np, b)) {
            /* The held bytes were a prefix that cannot complete: one U+FFFD
             * for them, then b starts afresh. */
            out_fffd(&o);
            np = 0;
            continue;
        }
        pend[np++] = b;
        i++;
        if (np == utf8_lead_len(pend[0])) {
            out_put(&o, pend, (size_t)np);
            np = 0;
        }
    }
    if (o.full)
        return BRISK_ENOSPC;
    memcpy(d->pending, pend, sizeof pend);
    d->n_pending = np;
    d->n_pushed++;
    return (int)o.n;
}

int tok_decoder_flush(tok_decoder *d, char *out, size_t cap) {
    if (!d || (!out && cap))
        return BRISK_EINVAL;
    if (d->n_pending == 0)
        return 0;
    if (cap < 3)
        return BRISK_ENOSPC;
    memcpy(out, "\xEF\xBF\xBD", 3);
    d->n_pending = 0;
    return 3;
}
