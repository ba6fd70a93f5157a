/* fuzz_vocab.c - builds the fuzz targets' vocabularies (see fuzz_vocab.h). */
#include "tests/fuzz/fuzz_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/gguf.h"
#include "models/gguf_write.h"

/* The text pieces and merges are learnt from: English, code, numbers, and a
 * little French, Chinese, Russian, Arabic and emoji, so that multi-byte
 * characters get tokens of their own. */
static const char g_train[] =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs on and on.\n"
    "It's 3.14159 o'clock and 12345 people can't wait: they're sure we'll see 2024 and 1999.\n"
    "Once upon a time there was a little girl who lived in a village near the forest.\n"
    "def main(argc, argv):\n    for i in range(10):\n        print(i * 2)  # comment\n"
    "int main(void) { return printf(\"%d\\n\", x + 42); }\n"
    "<html><body class=\"main\">{\"key\": [1, 2, 3], \"value\": null}</body></html>\n"
    "Caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9\x65, na\xC3\xAFve fa\xC3\xA7\x61\x64\x65 "
    "\xC3\xA9t\xC3\xA9.\n"
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82\xE4\xBD\xA0\xE5\xA5"
    "\xBD"
    "\xE5\x90\x97\xEF\xBC\x9F\n"
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80 \xD0\x9F\xD1\x80\xD0"
    "\xB8\xD0\xB2\xD0\xB5\xD1\x82\n"
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 "
    "\xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85\n"
    "\xF0\x9F\x98\x80 \xF0\x9F\x98\x80\xF0\x9F\x9A\x80 \xE2\x9C\x93 \xE2\x80\x94 \xC2\xA0 "
    "tabs\tand  "
    "spaces   here\r\n";

#define N_MERGES 320

/* ---- a tiny BPE trainer over words of symbols ---------------------------- */

typedef struct word {
    char **sym;
    int n;
} word;

typedef struct trainer {
    word *w;
    int n_words;
    char **tok; /* every distinct symbol and merge result, in creation order */
    int n_tok, cap_tok;
    int n_single; /* tok[0..n_single) are the single symbols */
    char **merge; /* "left right" in rank order */
    int n_merge;
} trainer;

static char *dup_n(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

static int add_tok(trainer *t, const char *s) {
    for (int i = 0; i < t->n_tok; i++)
        if (!strcmp(t->tok[i], s))
            return 0;
    if (t->n_tok == t->cap_tok) {
        int cap = t->cap_tok ? 2 * t->cap_tok : 512;
        char **p = realloc(t->tok, (size_t)cap * sizeof *p);
        if (!p)
            return BRISK_ENOMEM;
        t->tok = p;
        t->cap_tok = cap;
    }
    if (!(t->tok[t->n_tok] = strdup(s)))
        return BRISK_ENOMEM;
    t->n_tok++;
    return 0;
}

/* Appends symbol s (copied) to word w. */
static int word_push(word *w, const char *s, size_t n) {
    char **p = realloc(w->sym, (size_t)(w->n + 1) * sizeof *p);
    if (!p)
        return BRISK_ENOMEM;
    w->sym = p;
    if (!(w->sym[w->n] = dup_n(s, n)))
        return BRISK_ENOMEM;
    w->n++;
    return 0;
}

typedef struct pair {
    const char *l, *r;
} pair;

static int cmp_pair(const void *a, const void *b) {
    const pair *x = a, *y = b;
    int c = strcmp(x->l, y->l);
    return c ? c : strcmp(x->r, y->r);
}

/* One merge step: the most frequent adjacent pair (ties: the smallest by
 * bytes) is joined everywhere. Returns 1, 0 when no pair is left, or <0. */
static int train_step(trainer *t) {
    size_t np = 0;
    for (int i = 0; i < t->n_words; i++)
        np += t->w[i].n > 1 ? (size_t)t->w[i].n - 1 : 0;
    if (np == 0)
        return 0;
    pair *ps = malloc(np * sizeof *ps);
    if (!ps)
        return BRISK_ENOMEM;
    size_t k = 0;
    for (int i = 0; i < t->n_words; i++)
        for (int j = 0; j + 1 < t->w[i].n; j++)
            ps[k++] = (pair){t->w[i].sym[j], t->w[i].sym[j + 1]};
    qsort(ps, np, sizeof *ps, cmp_pair);
    size_t best = 0, best_n = 0;
    for (size_t a = 0; a < np;) {
        size_t b = a;
        while (b < np && !cmp_pair(&ps[a], &ps[b]))
            b++;
        if (b - a > best_n) {
            best = a;
            best_n = b - a;
        }
        a = b;
    }
    size_t ll = strlen(ps[best].l), rl = strlen(ps[best].r);
    char *l = dup_n(ps[best].l, ll), *r = dup_n(ps[best].r, rl), *lr = malloc(ll + rl + 1);
    char *m = malloc(ll + rl + 2);
    free(ps);
    int rc = l && r && lr && m ? 0 : BRISK_ENOMEM;
    if (rc == 0) {
        memcpy(lr, l, ll);
        memcpy(lr + ll, r, rl + 1);
        snprintf(m, ll + rl + 2, "%s %s", l, r);
        char **mp = realloc(t->merge, (size_t)(t->n_merge + 1) * sizeof *mp);
        rc = mp ? add_tok(t, lr) : BRISK_ENOMEM;
        if (mp)
            t->merge = mp;
        if (rc == 0) {
            t->merge[t->n_merge++] = m;
            m = NULL;
        }
    }
    for (int i = 0; rc == 0 && i < t->n_words; i++) {
        word *w = &t->w[i];
        int o = 0;
        for (int j = 0; j < w->n; j++) {
            if (j + 1 < w->n && !strcmp(w->sym[j], l) && !strcmp(w->sym[j + 1], r)) {
                char *nw = strdup(lr);
                if (!nw) {
                    rc = BRISK_ENOMEM;
                    break;
                }
                free(w->sym[j]);
                free(w->sym[j + 1]);
                w->sym[o++] = nw;
                j++;
            } else {
                w->sym[o++] = w->sym[j];
            }
        }
        w->n = o;
    }
    free(l);
    free(r);
    free(lr);
    free(m);
    return rc < 0 ? rc : 1;
}

static void trainer_free(trainer *t) {
    for (int i = 0; i < t->n_words; i++) {
        for (int j = 0; j < t->w[i].n; j++)
            free(t->w[i].sym[j]);
        free(t->w[i].sym);
    }
    free(t->w);
    for (int i = 0; i < t->n_tok; i++)
        free(t->tok[i]);
    free(t->tok);
    for (int i = 0; i < t->n_merge; i++)
        free(t->merge[i]);
    free(t->merge);
    memset(t, 0, sizeof *t);
}

/* Bytes of the UTF-8 character at s (1 for a stray byte). */
static size_t char_len(const unsigned char *s, size_t n) {
    size_t k = s[0] < 0x80 ? 1 : s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 1;
    return k <= n ? k : 1;
}

/* GPT-2's printable character for byte b, as UTF-8 into out; its length. */
static size_t gpt2_char(unsigned b, char out[2]) {
    unsigned cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        unsigned k = 0;
        for (unsigned c = 0; c < b; c++)
            if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Splits g_train into words at spaces (a word keeps the space before it,
 * as GPT-2's pre-tokenizer and SentencePiece's "▁" both do). byte_level:
 * symbols are GPT-2 byte characters; else UTF-8 characters, space as "▁". */
static int train(trainer *t, int byte_level) {
    size_t n = sizeof g_train - 1;
    t->w = calloc(n, sizeof *t->w);
    if (!t->w)
        return BRISK_ENOMEM;
    const unsigned char *s = (const unsigned char *)g_train;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        word *w = &t->w[t->n_words++];
        size_t j = i;
        do {
            size_t k = byte_level ? 1 : char_len(s + j, n - j);
            char b[4];
            size_t bl;
            if (byte_level) {
                bl = gpt2_char(s[j], b);
            } else if (s[j] == ' ') {
                memcpy(b, "\xE2\x96\x81", 3);
                bl = 3;
            } else {
                memcpy(b, s + j, k);
                bl = k;
            }
            char sym[8];
            memcpy(sym, b, bl);
            sym[bl] = '\0';
            rc = word_push(w, sym, bl);
            if (rc == 0)
                rc = add_tok(t, sym);
            j += k;
        } while (rc == 0 && j < n && s[j] != ' ');
        i = j;
    }
    t->n_single = t->n_tok;
    for (int m = 0; rc == 0 && m < N_MERGES; m++) {
        rc = train_step(t);
        if (rc == 0)
            break;
        rc = rc > 0 ? 0 : rc;
    }
    return rc;
}

/* ---- vocabularies ------------------------------------------------------- */

static tok_vocab *g_vocab[FUZZ_VOCAB_COUNT];
static int g_real[FUZZ_VOCAB_COUNT];
static int g_inited;

/* Serialises w, opens it and builds the vocab. Frees w. */
static int finish(gguf_writer *w, int rc, tok_vocab **out) {
    uint8_t *buf = NULL;
    size_t len = 0;
    gguf_file *gf = NULL;
    char err[256] = "";
    if (rc == 0)
        rc = gguf_writer_to_buffer(w, &buf, &len);
    gguf_writer_free(w);
    if (rc == 0)
        rc = gguf_open_memory(buf, len, &gf, err, sizeof err);
    if (rc == 0)
        rc = tok_vocab_create_from_gguf(gf, out, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "fuzz_vocab: %s\n", err[0] ? err : brisk_strerror(rc));
    gguf_close(gf);
    free(buf);
    return rc;
}

/* Token list builder with parallel types and scores. */
typedef struct toks {
    const char **s;
    uint64_t *len;
    int32_t *type;
    float *score;
    int n, cap;
} toks;

static int toks_add(toks *t, const char *s, size_t len, int32_t type, float score) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        const char **ns = realloc(t->s, (size_t)cap * sizeof *ns);
        if (ns)
            t->s = ns;
        uint64_t *nl = realloc(t->len, (size_t)cap * sizeof *nl);
        if (nl)
            t->len = nl;
        int32_t *nt = realloc(t->type, (size_t)cap * sizeof *nt);
        if (nt)
            t->type = nt;
        float *nf = realloc(t->score, (size_t)cap * sizeof *nf);
        if (nf)
            t->score = nf;
        if (!ns || !nl || !nt || !nf)
            return BRISK_ENOMEM;
        t->cap = cap;
    }
    t->s[t->n] = s;
    t->len[t->n] = len;
    t->type[t->n] = type;
    t->score[t->n] = score;
    t->n++;
    return 0;
}

static void toks_free(toks *t) {
    free(t->s);
    free(t->len);
    free(t->type);
    free(t->score);
}

/* Token types (llama.cpp's llama_token_type). */
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

static int build_spm(tok_vocab **out) {
    static char bytes[256][8];
    trainer tr = {0};
    toks t = {0};
    int rc = train(&tr, 0);
    rc = rc ? rc : toks_add(&t, "<unk>", 5, T_UNKNOWN, 0);
    rc = rc ? rc : toks_add(&t, "<s>", 3, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "</s>", 4, T_CONTROL, 0);
    for (int b = 0; rc == 0 && b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        rc = toks_add(&t, bytes[b], 6, T_BYTE, 0);
    }
    /* Single characters first (lowest scores), then the merges by rank. */
    int n_single = tr.n_single;
    for (int i = 0; rc == 0 && i < tr.n_tok; i++) {
        float score = i < n_single ? -1000.0f - (float)i : -(float)(i - n_single);
        rc = toks_add(&t, tr.tok[i], strlen(tr.tok[i]), T_NORMAL, score);
    }
    rc = rc ? rc : toks_add(&t, "<|im_start|>", 12, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "<|im_end|>", 10, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "[INST]", 6, T_USER, 0);
    rc = rc ? rc : toks_add(&t, "<|user|>", 8, T_USER, 0);
    rc = rc ? rc : toks_add(&t, "<unused0>", 9, T_UNUSED, 0);
    gguf_writer *w = gguf_writer_create();
    if (!w)
        rc = BRISK_ENOMEM;
    if (rc == 0) {
        rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", t.s, t.len, (uint64_t)t.n);
        rc |= gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, t.score,
                                  (uint64_t)t.n);
        rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t.type,
                                  (uint64_t)t.n);
        rc |= gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
        rc = rc ? BRISK_ENOMEM : 0;
    }
    rc = w ? finish(w, rc, out) : rc;
    toks_free(&t);
    trainer_free(&tr);
    return rc;
}

static int build_bpe(const char *pre, tok_vocab **out) {
    static char chars[256][3];
    trainer tr = {0};
    toks t = {0};
    int rc = train(&tr, 1);
    /* The 256 byte characters first, as GPT-2 numbers them. */
    for (unsigned b = 0; rc == 0 && b < 256; b++) {
        size_t l = gpt2_char(b, chars[b]);
        chars[b][l] = '\0';
        rc = toks_add(&t, chars[b], l, T_NORMAL, 0);
    }
    for (int i = tr.n_single; rc == 0 && i < tr.n_tok; i++)
        rc = toks_add(&t, tr.tok[i], strlen(tr.tok[i]), T_NORMAL, 0);
    int eot = t.n;
    rc = rc ? rc : toks_add(&t, "<|endoftext|>", 13, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "<|im_start|>", 12, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "<|im_end|>", 10, T_CONTROL, 0);
    rc = rc ? rc : toks_add(&t, "<|user|>", 8, T_USER, 0);
    rc = rc ? rc : toks_add(&t, "<|user|>\n", 9, T_USER, 0);
    uint64_t *mlen = calloc((size_t)tr.n_merge + 1, sizeof *mlen);
    if (!mlen)
        rc = BRISK_ENOMEM;
    for (int i = 0; rc == 0 && i < tr.n_merge; i++)
        mlen[i] = strlen(tr.merge[i]);
    gguf_writer *w = gguf_writer_create();
    if (!w)
        rc = BRISK_ENOMEM;
    if (rc == 0) {
        rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
        rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", t.s, t.len, (uint64_t)t.n);
        rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t.type,
                                  (uint64_t)t.n);
        rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)tr.merge,
                                      mlen, (uint64_t)tr.n_merge);
        rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)eot);
        rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eot);
        rc = rc ? BRISK_ENOMEM : 0;
    }
    rc = w ? finish(w, rc, out) : rc;
    free(mlen);
    toks_free(&t);
    trainer_free(&tr);
    return rc;
}

/* A vocab file of ../shared/vocab, or NULL when it is not there. */
static tok_vocab *load_real(const char *name) {
    const char *dir = getenv("BRISK_SHARED_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/%s", dir && dir[0] ? dir : "../shared", name);
    gguf_file *gf = NULL;
    tok_vocab *v = NULL;
    char err[256];
    if (gguf_open(path, &gf, err, sizeof err) < 0)
        return NULL;
    if (tok_vocab_create_from_gguf(gf, &v, err, sizeof err) < 0)
        v = NULL;
    gguf_close(gf);
    return v;
}

int fuzz_vocabs_init(void) {
    if (g_inited)
        return 0;
    static const char *const pres[] = {"gpt2", "llama-bpe", "qwen2", "smollm"};
    int rc = build_spm(&g_vocab[FUZZ_VOCAB_SPM]);
    for (int i = 0; rc == 0 && i < 4; i++)
        rc = build_bpe(pres[i], &g_vocab[FUZZ_VOCAB_BPE_GPT2 + i]);
    if (rc < 0)
        return rc;
    g_vocab[FUZZ_VOCAB_REAL_SPM] = load_real("ggml-vocab-llama-spm.gguf");
    g_vocab[FUZZ_VOCAB_REAL_GPT2] = load_real("ggml-vocab-gpt-2.gguf");
    g_real[FUZZ_VOCAB_REAL_SPM] = g_vocab[FUZZ_VOCAB_REAL_SPM] != NULL;
    g_real[FUZZ_VOCAB_REAL_GPT2] = g_vocab[FUZZ_VOCAB_REAL_GPT2] != NULL;
    if (!g_vocab[FUZZ_VOCAB_REAL_SPM])
        g_vocab[FUZZ_VOCAB_REAL_SPM] = g_vocab[FUZZ_VOCAB_SPM];
    if (!g_vocab[FUZZ_VOCAB_REAL_GPT2])
        g_vocab[FUZZ_VOCAB_REAL_GPT2] = g_vocab[FUZZ_VOCAB_BPE_GPT2];
    g_inited = 1;
    return 0;
}

const tok_vocab *fuzz_vocab(unsigned which) {
    return g_vocab[which % FUZZ_VOCAB_COUNT];
}

int fuzz_vocab_is_real(unsigned which) {
    return g_real[which % FUZZ_VOCAB_COUNT];
}
