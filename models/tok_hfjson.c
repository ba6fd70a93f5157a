/* tok_hfjson.c - tokenizer.json and tokenizer_config.json as the
 * tokenizer.ggml.* keys of a GGUF (tok_hfjson.h). */
#include "models/tok_hfjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "common/brisk_file.h"
#include "common/brisk_utf8.h"
#include "models/tok_internal.h"

/* Gemma 3's tokenizer.json is 33 MB; 128 MiB bounds a hostile one. */
#define HFJ_MAX_TOKENIZER_BYTES (128u << 20)
#define HFJ_MAX_CONFIG_BYTES (16u << 20)
/* Vocabularies beyond 2^22 tokens do not exist (Gemma's is 262,144). */
#define HFJ_MAX_TOKENS (1 << 22)
#define ERR(code, ...) brisk_set_err(err, err_len, code, __VA_ARGS__)

/* The expressions of the Split pre-tokenizers brisk has matchers for
 * (tok_pretok.c), as tokenizer.json holds them, and the GGUF
 * tokenizer.ggml.pre name that selects each. */
static const struct {
    const char *regex;
    const char *pre;
} KNOWN_SPLITS[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt2"},
};

typedef struct hfj {
    char **tok; /* [n] borrowed from the cJSON trees */
    int32_t *type;
    float *score;
    int n;
    int spm;             /* SentencePiece style (Metaspace / Replace), else byte level */
    int add_space;       /* SPM: a "▁" before the text */
    int metaspace;       /* SPM: Metaspace adds it only where the text has no space first */
    const char *pre;     /* byte level: tokenizer.ggml.pre */
    const char **merges; /* [n_merges] "a b", owned strings */
    int n_merges;
} hfj;

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(j) ? NULL : j;
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = get(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "?";
}

/* A piece of JSON text for a message: at most 60 bytes, control bytes as '?'. */
static void clip(char *dst, size_t cap, const char *s) {
    snprintf(dst, cap, "%.60s", s);
    for (char *q = dst; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = '?';
}

static int byte_level(const cJSON *b, int need_regex, char *err, size_t err_len) {
    if (cJSON_IsTrue(get(b, "add_prefix_space")))
        return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: ByteLevel add_prefix_space is not "
                                       "supported");
    const cJSON *ur = get(b, "use_regex");
    int use_regex = ur ? cJSON_IsTrue(ur) : 1;
    if (use_regex != need_regex)
        return ERR(BRISK_EUNSUPPORTED,
                   "tokenizer.json: a ByteLevel pre-tokenizer with use_regex "
                   "%s here is not one brisk knows",
                   use_regex ? "true" : "false");
    return 0;
}

/* The byte-level pre-tokenizers brisk recognises, into h->pre. */
static int read_byte_level_pre(hfj *h, const cJSON *pt, char *err, size_t err_len) {
    if (!strcmp(type_of(pt), "ByteLevel")) {
        h->pre = "gpt2";
        return byte_level(pt, 1, err, err_len);
    }
    const cJSON *seq = get(pt, "pretokenizers");
    if (strcmp(type_of(pt), "Sequence") || !cJSON_IsArray(seq) || cJSON_GetArraySize(seq) != 2)
        return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: pre-tokenizer '%.40s' is not supported",
                   type_of(pt));
    const cJSON *a = seq->child, *b = seq->child->next;
    if (!strcmp(type_of(a), "Digits") && cJSON_IsTrue(get(a, "individual_digits")) &&
        !strcmp(type_of(b), "ByteLevel")) {
        h->pre = "smollm";
        return byte_level(b, 1, err, err_len);
    }
    if (strcmp(type_of(a), "Split") || strcmp(type_of(b), "ByteLevel"))
        return ERR(BRISK_EUNSUPPORTED,
                   "tokenizer.json: pre-tokenizer sequence %.30s + %.30s is not supported",
                   type_of(a), type_of(b));
    const cJSON *pat = get(get(a, "pattern"), "Regex");
    const cJSON *beh = get(a, "behavior");
    if (!cJSON_IsString(pat))
        return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: a Split pre-tokenizer without a Regex");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") ||
        cJSON_IsTrue(get(a, "invert")))
        return ERR(BRISK_EUNSUPPORTED,
                   "tokenizer.json: a Split pre-tokenizer must be Isolated and not inverted");
    for (size_t i = 0; i < sizeof KNOWN_SPLITS / sizeof KNOWN_SPLITS[0]; i++)
        if (!strcmp(pat->valuestring, KNOWN_SPLITS[i].regex)) {
            h->pre = KNOWN_SPLITS[i].pre;
            return byte_level(b, 0, err, err_len);
        }
    char re[64];
    clip(re, sizeof re, pat->valuestring);
    return ERR(BRISK_EUNSUPPORTED,
               "tokenizer.json: pre-tokenizer regex '%s%s' is not one brisk has a pre-tokenizer "
               "for (GPT-2, Llama 3, Qwen 2, SmolLM)",
               re, strlen(pat->valuestring) > 60 ? "..." : "");
}

/* SentencePiece style: Metaspace, or a Replace(" ", "▁") normalizer with
 * an optional Prepend("▁") (Llama 2's newer files, Gemma). */
static int is_replace_space(const cJSON *n) {
    const cJSON *c = get(get(n, "pattern"), "String");
    const cJSON *to = get(n, "content");
    return !strcmp(type_of(n), "Replace") && cJSON_IsString(c) && !strcmp(c->valuestring, " ") &&
           cJSON_IsString(to) && !strcmp(to->valuestring, "\xe2\x96\x81");
}

static int is_prepend_space(const cJSON *n) {
    const cJSON *p = get(n, "prepend");
    return !strcmp(type_of(n), "Prepend") && cJSON_IsString(p) &&
           !strcmp(p->valuestring, "\xe2\x96\x81");
}

/* Whether the normalizer turns every space into U+2581 (alone or in a
 * sequence). */
static int replaces_spaces(const cJSON *norm) {
    if (is_replace_space(norm))
        return 1;
    const cJSON *seq = get(norm, "normalizers");
    if (strcmp(type_of(norm), "Sequence") || !cJSON_IsArray(seq))
        return 0;
    for (const cJSON *n = seq->child; n; n = n->next)
        if (is_replace_space(n))
            return 1;
    return 0;
}

/* A Split on the string " " (not inverted) after such a normalizer finds no
 * space to split at: no pre-tokenizer (Gemma's files, as transformers writes
 * them). */
static int is_noop_space_split(const cJSON *pt, const cJSON *norm) {
    const cJSON *c = get(get(pt, "pattern"), "String");
    return !strcmp(type_of(pt), "Split") && cJSON_IsString(c) && !strcmp(c->valuestring, " ") &&
           !cJSON_IsTrue(get(pt, "invert")) && replaces_spaces(norm);
}

static int read_spm_style(hfj *h, const cJSON *norm, const cJSON *pt, char *err, size_t err_len) {
    h->spm = 1;
    if (pt && norm && is_noop_space_split(pt, norm))
        pt = NULL;
    if (pt) {
        if (strcmp(type_of(pt), "Metaspace"))
            return ERR(BRISK_EUNSUPPORTED,
                       "tokenizer.json: pre-tokenizer '%.40s' is not supported "
                       "with a SentencePiece-style vocabulary",
                       type_of(pt));
        const cJSON *rep = get(pt, "replacement");
        if (!cJSON_IsString(rep) || strcmp(rep->valuestring, "\xe2\x96\x81"))
            return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: Metaspace replacement is not U+2581");
        const cJSON *sch = get(pt, "prepend_scheme");
        const cJSON *aps = get(pt, "add_prefix_space");
        h->metaspace = 1;
        h->add_space = cJSON_IsString(sch) ? strcmp(sch->valuestring, "never") != 0
                       : aps               ? cJSON_IsTrue(aps)
                                           : 1;
        if (norm)
            return ERR(BRISK_EUNSUPPORTED,
                       "tokenizer.json: normalizer '%.40s' is not supported "
                       "with Metaspace",
                       type_of(norm));
        return 0;
    }
    if (!norm)
        return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: a BPE vocabulary with neither a "
                                       "pre-tokenizer nor a normalizer is not supported");
    if (is_replace_space(norm))
        return 0;
    const cJSON *seq = get(norm, "normalizers");
    if (!strcmp(type_of(norm), "Sequence") && cJSON_IsArray(seq)) {
        int n = cJSON_GetArraySize(seq);
        if (n == 1 && is_replace_space(seq->child))
            return 0;
        if (n == 2 && is_prepend_space(seq->child) && is_replace_space(seq->child->next)) {
            h->add_space = 1;
            return 0;
        }
    }
    return ERR(BRISK_EUNSUPPORTED,
               "tokenizer.json: normalizer '%.40s' is not supported (brisk "
               "takes Replace(' ', U+2581), with or without Prepend(U+2581))",
               type_of(norm));
}

/* vocab + added_tokens into h->tok[id], dense from 0. */
static int read_tokens(hfj *h, const cJSON *model, const cJSON *added, char *err, size_t err_len) {
    const cJSON *vocab = get(model, "vocab");
    if (!cJSON_IsObject(vocab) || !vocab->child)
        return ERR(BRISK_EFORMAT, "tokenizer.json: model.vocab is not an object of tokens");
    int max_id = -1;
    const cJSON *lists[2] = {vocab, cJSON_IsArray(added) ? added : NULL};
    for (int k = 0; k < 2; k++)
        for (const cJSON *e = lists[k] ? lists[k]->child : NULL; e; e = e->next) {
            const cJSON *idj = k == 0 ? e : get(e, "id");
            double d = cJSON_IsNumber(idj) ? idj->valuedouble : -1.0;
            if (!(d >= 0.0 && d < HFJ_MAX_TOKENS) || d != floor(d))
                return ERR(BRISK_EFORMAT, "tokenizer.json: a token id outside [0, %d)",
                           HFJ_MAX_TOKENS);
            if ((int)d > max_id)
                max_id = (int)d;
        }
    h->n = max_id + 1;
    h->tok = calloc((size_t)h->n, sizeof *h->tok);
    h->type = calloc((size_t)h->n, sizeof *h->type);
    h->score = calloc((size_t)h->n, sizeof *h->score);
    if (!h->tok || !h->type || !h->score)
        return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int id = (int)e->valuedouble;
        if (h->tok[id])
            return ERR(BRISK_EFORMAT, "tokenizer.json: token id %d given twice", id);
        h->tok[id] = e->string;
        h->type[id] = TOK_T_NORMAL;
        if (h->spm && strlen(e->string) == 6 && !strncmp(e->string, "<0x", 3) &&
            e->string[5] == '>')
            h->type[id] = TOK_T_BYTE;
    }
    for (const cJSON *e = lists[1] ? lists[1]->child : NULL; e; e = e->next) {
        int id = (int)get(e, "id")->valuedouble;
        const cJSON *c = get(e, "content");
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return ERR(BRISK_EFORMAT, "tokenizer.json: added token %d has no content", id);
        if (h->tok[id] && strcmp(h->tok[id], c->valuestring))
            return ERR(BRISK_EFORMAT, "tokenizer.json: added token %d differs from the vocab's",
                       id);
        h->tok[id] = c->valuestring;
        h->type[id] = cJSON_IsTrue(get(e, "special")) ? TOK_T_CONTROL : TOK_T_USER_DEFINED;
    }
    for (int i = 0; i < h->n; i++)
        if (!h->tok[i])
            return ERR(BRISK_EFORMAT, "tokenizer.json: no token has id %d (ids must be dense)", i);
    const cJSON *unk = get(model, "unk_token");
    if (cJSON_IsString(unk))
        for (int i = 0; i < h->n; i++)
            if (!strcmp(h->tok[i], unk->valuestring) && h->type[i] == TOK_T_NORMAL)
                h->type[i] = TOK_T_UNKNOWN;
    return 0;
}

static int find_token(const hfj *h, const char *s) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->tok[i], s))
            return i;
    return -1;
}

/* Merges as "a b" strings, in rank order. */
static int read_merges(hfj *h, const cJSON *model, char *err, size_t err_len) {
    const cJSON *m = get(model, "merges");
    if (!m && h->spm)
        return 0;
    if (!cJSON_IsArray(m))
        return ERR(BRISK_EFORMAT, "tokenizer.json: model.merges is not an array");
    int n = cJSON_GetArraySize(m);
    h->merges = calloc((size_t)n + 1, sizeof *h->merges);
    if (!h->merges)
        return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
    int rank = 0;
    for (const cJSON *e = m->child; e; e = e->next, rank++) {
        char *s;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || sp == e->valuestring || !sp[1] || strchr(sp + 1, ' '))
                return ERR(BRISK_EFORMAT, "tokenizer.json: merge %d is not 'a b'", rank);
            s = strdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next) && e->child->valuestring[0] &&
                   e->child->next->valuestring[0]) {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            /* The string form cannot hold a part with a space: brisk's
             * vocabulary takes merges in that form only. */
            if (strchr(a, ' ') || strchr(b, ' '))
                return ERR(BRISK_EUNSUPPORTED, "tokenizer.json: merge %d holds a space", rank);
            size_t la = strlen(a), lb = strlen(b);
            s = malloc(la + lb + 2);
            if (s) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            return ERR(BRISK_EFORMAT, "tokenizer.json: merge %d is not 'a b' or [a, b]", rank);
        }
        if (!s)
            return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
        h->merges[h->n_merges++] = s;
    }
    return 0;
}

typedef struct tok_ref {
    const char *s;
    int id;
} tok_ref;

static int cmp_ref(const void *x, const void *y) {
    return strcmp(((const tok_ref *)x)->s, ((const tok_ref *)y)->s);
}

/* SentencePiece scores from the merge ranks, the order SentencePiece's BPE
 * applies them in: the token merge r makes scores -(r + 1), one no merge
 * makes scores below every merge (-1e9), so that the highest-scoring pair
 * is the earliest merge, as in tokenizers' BPE. */
static int spm_scores(hfj *h, char *err, size_t err_len) {
    for (int i = 0; i < h->n; i++)
        h->score[i] = h->type[i] == TOK_T_NORMAL ? -1e9f : 0.0f;
    tok_ref *refs = malloc((size_t)h->n * sizeof *refs);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!refs)
        return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
    for (int i = 0; i < h->n; i++)
        refs[i] = (tok_ref){h->tok[i], i};
    qsort(refs, (size_t)h->n, sizeof *refs, cmp_ref);
    int rc = 0;
    for (int r = 0; r < h->n_merges; r++) {
        const char *sp = strchr(h->merges[r], ' ');
        size_t la = (size_t)(sp - h->merges[r]), lb = strlen(sp + 1);
        if (la + lb + 1 > cat_cap) {
            cat_cap = 2 * (la + lb + 1);
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                rc = ERR(BRISK_ENOMEM, "tokenizer: out of memory");
                break;
            }
            cat = nc;
        }
        memcpy(cat, h->merges[r], la);
        memcpy(cat + la, sp + 1, lb + 1);
        tok_ref key = {cat, 0};
        tok_ref *hit = bsearch(&key, refs, (size_t)h->n, sizeof *refs, cmp_ref);
        if (hit && h->score[hit->id] == -1e9f)
            h->score[hit->id] = -(float)(r + 1);
    }
    free(cat);
    free(refs);
    return rc;
}

/* A token named in tokenizer_config.json: a string or {"content": ...}. */
static int config_token(const hfj *h, const cJSON *cfg, const char *key) {
    const cJSON *t = get(cfg, key);
    if (cJSON_IsObject(t))
        t = get(t, "content");
    return cJSON_IsString(t) ? find_token(h, t->valuestring) : -1;
}

/* The chat template: a string, or a list of {name, template} (the
 * "default" one, else the first). */
static const char *config_template(const cJSON *cfg) {
    const cJSON *t = get(cfg, "chat_template");
    if (cJSON_IsString(t))
        return t->valuestring;
    if (!cJSON_IsArray(t))
        return NULL;
    const char *first = NULL;
    for (const cJSON *e = t->child; e; e = e->next) {
        const cJSON *n = get(e, "name"), *tt = get(e, "template");
        if (!cJSON_IsString(tt))
            continue;
        if (!first)
            first = tt->valuestring;
        if (cJSON_IsString(n) && !strcmp(n->valuestring, "default"))
            return tt->valuestring;
    }
    return first;
}

static int write_keys(hfj *h, const cJSON *root, const cJSON *cfg, const char *jinja,
                      gguf_writer *w, char *err, size_t err_len) {
    uint64_t *lens = malloc((size_t)h->n * sizeof *lens);
    if (!lens)
        return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
    for (int i = 0; i < h->n; i++)
        lens[i] = strlen(h->tok[i]);
    int rc = gguf_writer_set_str(w, "tokenizer.ggml.model", h->spm ? "llama" : "gpt2");
    rc = rc ? rc
            : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)h->tok, lens,
                                      (uint64_t)h->n);
    free(lens);
    rc = rc ? rc
            : gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, h->type,
                                  (uint64_t)h->n);
    if (h->spm) {
        rc = rc ? rc
                : gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, h->score,
                                      (uint64_t)h->n);
        rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", h->add_space);
        if (h->metaspace)
            rc = rc ? rc : gguf_writer_set_bool(w, "brisk.tokenizer.prefix_unless_space", 1);
    } else {
        uint64_t *ml = malloc(((size_t)h->n_merges + 1) * sizeof *ml);
        if (!ml)
            return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
        for (int i = 0; i < h->n_merges; i++)
            ml[i] = strlen(h->merges[i]);
        rc = rc ? rc
                : gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", h->merges, ml,
                                          (uint64_t)h->n_merges);
        free(ml);
        rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.pre", h->pre);
    }
    /* BOS is added when tokenizer_config.json says so, else when the
     * post-processor's single-sequence template starts with a special token. */
    int add_bos = 0;
    const cJSON *ab = get(cfg, "add_bos_token");
    if (cJSON_IsBool(ab)) {
        add_bos = cJSON_IsTrue(ab);
    } else {
        const cJSON *pp = get(root, "post_processor");
        if (!strcmp(type_of(pp), "Sequence") && cJSON_IsArray(get(pp, "processors")))
            for (const cJSON *p = get(pp, "processors")->child; p; p = p->next)
                if (!strcmp(type_of(p), "TemplateProcessing"))
                    pp = p;
        const cJSON *single = get(pp, "single");
        if (!strcmp(type_of(pp), "TemplateProcessing") && cJSON_IsArray(single) && single->child &&
            get(single->child, "SpecialToken"))
            add_bos = 1;
    }
    rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    int bos = config_token(h, cfg, "bos_token"), eos = config_token(h, cfg, "eos_token");
    int unk = config_token(h, cfg, "unk_token"), pad = config_token(h, cfg, "pad_token");
    if (bos >= 0)
        rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0)
        rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (unk >= 0)
        rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk);
    if (pad >= 0)
        rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    const char *tmpl = config_template(cfg);
    if (!tmpl)
        tmpl = jinja;
    if (tmpl)
        rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    return rc ? ERR(BRISK_ENOMEM, "tokenizer: out of memory") : 0;
}

static int convert(const cJSON *root, const cJSON *cfg, const char *jinja, gguf_writer *w,
                   char *err, size_t err_len) {
    hfj h = {0};
    int rc;
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model))
        return ERR(BRISK_EFORMAT, "tokenizer.json: no model object");
    const char *mt = type_of(model);
    if (strcmp(mt, "BPE")) {
        char t[64];
        clip(t, sizeof t, mt);
        return ERR(BRISK_EUNSUPPORTED,
                   "tokenizer.json: model type '%s' is not supported (brisk reads BPE)", t);
    }
    const cJSON *norm = get(root, "normalizer"), *pt = get(root, "pre_tokenizer");
    int bl = pt && (!strcmp(type_of(pt), "ByteLevel") || !strcmp(type_of(pt), "Sequence"));
    if (bl) {
        rc = norm ? ERR(BRISK_EUNSUPPORTED,
                        "tokenizer.json: normalizer '%.40s' is not supported with a byte-level "
                        "vocabulary",
                        type_of(norm))
                  : read_byte_level_pre(&h, pt, err, err_len);
    } else {
        rc = read_spm_style(&h, norm, pt, err, err_len);
    }
    if (rc == 0)
        rc = read_tokens(&h, model, get(root, "added_tokens"), err, err_len);
    if (rc == 0)
        rc = read_merges(&h, model, err, err_len);
    if (rc == 0 && h.spm)
        rc = spm_scores(&h, err, err_len);
    if (rc == 0)
        rc = write_keys(&h, root, cfg, jinja, w, err, err_len);
    for (int i = 0; i < h.n_merges; i++)
        free((char *)h.merges[i]);
    free(h.merges);
    free(h.tok);
    free(h.type);
    free(h.score);
    return rc;
}

static int parse_json(const char *text, size_t len, const char *what, cJSON **out, char *err,
                      size_t err_len) {
    *out = NULL;
    if (!brisk_utf8_valid(text, len))
        return ERR(BRISK_EFORMAT, "%s: not UTF-8 text", what);
    *out = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return ERR(BRISK_EFORMAT, "%s: not a JSON object", what);
    }
    return 0;
}

static int to_gguf(const char *tok_json, size_t tok_len, const char *cfg_json, size_t cfg_len,
                   const char *jinja, gguf_writer *w, char *err, size_t err_len) {
    cJSON *root = NULL, *cfg = NULL;
    int rc = parse_json(tok_json, tok_len, "tokenizer.json", &root, err, err_len);
    if (rc == 0 && cfg_json)
        rc = parse_json(cfg_json, cfg_len, "tokenizer_config.json", &cfg, err, err_len);
    if (rc == 0)
        rc = convert(root, cfg, jinja, w, err, err_len);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return rc;
}

int tok_hfjson_to_gguf_mem(const char *tok_json, size_t tok_len, const char *cfg_json,
                           size_t cfg_len, gguf_writer *w, char *err, size_t err_len) {
    return to_gguf(tok_json, tok_len, cfg_json, cfg_len, NULL, w, err, err_len);
}

/* Reads dir/name into *text (NULL when absent and optional). */
static int read_in(const char *dir, const char *name, size_t max, int optional, char **text,
                   size_t *len, char *err, size_t err_len) {
    size_t pl = strlen(dir) + strlen(name) + 2;
    char *path = malloc(pl);
    *text = NULL;
    *len = 0;
    if (!path)
        return ERR(BRISK_ENOMEM, "tokenizer: out of memory");
    snprintf(path, pl, "%s/%s", dir, name);
    FILE *f = optional ? fopen(path, "rb") : NULL;
    if (optional && !f) {
        free(path);
        return 0;
    }
    if (f)
        fclose(f);
    int rc = brisk_file_read(path, max, name, text, len, err, err_len);
    free(path);
    return rc;
}

int tok_hfjson_to_gguf(const char *dir, gguf_writer *w, char *err, size_t err_len) {
    char *tok = NULL, *cfg = NULL, *jinja = NULL;
    size_t tl, cl, jl;
    int rc = read_in(dir, "tokenizer.json", HFJ_MAX_TOKENIZER_BYTES, 0, &tok, &tl, err, err_len);
    if (rc == 0)
        rc =
            read_in(dir, "tokenizer_config.json", HFJ_MAX_CONFIG_BYTES, 1, &cfg, &cl, err, err_len);
    /* transformers 4.43+ writes the template beside the config. */
    if (rc == 0)
        rc =
            read_in(dir, "chat_template.jinja", HFJ_MAX_CONFIG_BYTES, 1, &jinja, &jl, err, err_len);
    if (rc == 0 && jinja && (!brisk_utf8_valid(jinja, jl) || strlen(jinja) != jl))
        rc = ERR(BRISK_EFORMAT, "chat_template.jinja: not UTF-8 text without NUL");
    if (rc == 0)
        rc = to_gguf(tok, tl, cfg, cfg ? cl : 0, jinja, w, err, err_len);
    free(tok);
    free(cfg);
    free(jinja);
    return rc;
}
