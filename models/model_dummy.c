/* model_dummy.c - a model of a real shape with seeded random weights
 * (--dummy-weights CONFIG, as vLLM's load_format=dummy), so that speed can be
 * measured on real sizes (llama-3-8b, qwen2.5-7b, ...) without weight files.
 *
 * The shape goes through the same path as a file: the configuration is
 * written as GGUF metadata into a buffer, opened with gguf_open_memory and
 * read by model_read_config, so a dummy model is checked exactly as a loaded
 * one is. The vocabulary comes from a GGUF file (--tokenizer) or is a
 * synthetic SentencePiece vocabulary of the shape's size. Each weight row is
 * generated from its own seed (tensor, row), in f32, then stored in the
 * compute format with kern_quantize_row: the bytes depend only on the seed,
 * not on the thread count.
 *
 * Scales: matrix entries are uniform in [-a, a] with a = sqrt(3 / n_in)
 * (variance 1 / n_in, so a unit-variance input gives unit-variance
 * outputs), norm weights are 1 and biases uniform in [-0.1, 0.1]. The output
 * is not meaningful text, but every kernel runs on realistic, non-zero data
 * and the logits have a realistic spread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "common/brisk_rng.h"
#include "models/gguf_write.h"
#include "models/model_internal.h"

#define ERR(code, ...) brisk_set_err(err, err_len, code, __VA_ARGS__)

typedef struct dummy_shape {
    const char *name;
    const char *arch; /* a row of the architecture table (model_arch.h) */
    int n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, n_ctx;
    float rope_base, norm_eps;
    int tied;
    /* The window of the local layers (Gemma 2/3, the pattern from the
     * family's row) or of every layer (a llama: Mistral); 0: none. */
    int sliding_window;
    /* phi3: LongRoPE's original context (0: no LongRoPE) and attn_factor */
    int rope_orig_ctx;
    float rope_attn_factor;
    /* gemma2: the attention-score and final-logit soft-caps (0: none) */
    float attn_softcap, final_softcap;
    /* A mixture of experts: expert_count, expert_used_count and the
     * experts' width (expert_feed_forward_length); 0: a dense MLP. */
    int n_expert, n_expert_used, expert_hidden;
} dummy_shape;

/* Shapes from the models' published configurations. */
static const dummy_shape SHAPES[] = {
    {"llama-3-8b", "llama", 128256, 4096, 32,   32,   8,    128, 14336, 8192, 500000.0f,
     1e-5f,        0,       0,      0,    0.0f, 0.0f, 0.0f, 0,   0,     0},
    {"llama-3.2-1b", "llama", 128256, 2048, 16,   32,   8,    64, 8192, 131072, 500000.0f,
     1e-5f,          1,       0,      0,    0.0f, 0.0f, 0.0f, 0,  0,    0},
    {"qwen2.5-7b", "qwen2", 152064, 3584, 28,   28,   4,    128, 18944, 32768, 1000000.0f,
     1e-6f,        0,       0,      0,    0.0f, 0.0f, 0.0f, 0,   0,     0},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28,   16,   8,    128, 3072, 40960, 1000000.0f,
     1e-6f,        1,       0,      0,    0.0f, 0.0f, 0.0f, 0,   0,    0},
    {"qwen3-8b", "qwen3", 151936, 4096, 36,   32,   8,    128, 12288, 40960, 1000000.0f,
     1e-6f,      0,       0,      0,    0.0f, 0.0f, 0.0f, 0,   0,     0},
    {"smollm2-135m", "llama", 49152, 576, 30,   9,    3,    64, 1536, 8192, 100000.0f,
     1e-5f,          1,       0,     0,   0.0f, 0.0f, 0.0f, 0,  0,    0},
    {"stories110m", "llama", 32000, 768, 12,   12,   12,   64, 2048, 1024, 10000.0f,
     1e-5f,         1,       0,     0,   0.0f, 0.0f, 0.0f, 0,  0,    0},
    {"gemma3-1b", "gemma3", 262144, 1152, 26,   4,    1,    256, 6912, 32768, 1000000.0f,
     1e-6f,       1,        512,    0,    0.0f, 0.0f, 0.0f, 0,   0,    0},
    /* Phi-3.5-mini's widths (3,072, 32 heads of 96, 8,192 hidden, its 32,064
     * vocabulary and attn_factor) in 4 of its 32 layers, for the CPU/CUDA
     * comparison; LongRoPE factors (made up, rising like the real ones) with
     * an original context of 16, so that the tests' short contexts take the
     * long factors. */
    {"phi3.5-mini-4l", "phi3", 32064, 3072, 4, 32, 32, 96, 8192, 131072, 10000.0f, 1e-5f, 0, 0, 16,
     1.1902381f,       0.0f,   0.0f,  0,    0, 0},
    /* Gemma 2 2B whole: heads of 256, a 4,096-position window on every
     * other layer (local first, the row's pattern), post-norms, GELU-tanh,
     * attention logits capped at 50 and final logits at 30. */
    {"gemma2-2b", "gemma2", 256000, 2304, 26,   8,     4,     256, 9216, 8192, 10000.0f,
     1e-6f,       1,        4096,   0,    0.0f, 50.0f, 30.0f, 0,   0,    0},
    /* Mistral 7B v0.1's widths in 4 of its 32 layers: a llama whose every
     * layer has a 4,096-position window (attention.sliding_window in a llama
     * file), the CPU/CUDA comparison's windowed llama. */
    {"mistral-7b-4l", "llama", 32000, 4096, 4,    32,   8,    128, 14336, 32768, 10000.0f,
     1e-5f,           0,       4096,  0,    0.0f, 0.0f, 0.0f, 0,   0,     0},
    /* Qwen3-30B-A3B's widths in 4 of its 48 layers: 32 query heads of 128
     * over 4 KV heads, 128 experts of 768 with 8 chosen per token (3.3B
     * active of 30.5B parameters whole), for the MoE benches and the GPU
     * comparison. */
    {"qwen3-30b-a3b-4l",
     "qwen3moe",
     151936,
     2048,
     4,
     32,
     4,
     128,
     6144,
     40960,
     1000000.0f,
     1e-6f,
     0,
     0,
     0,
     0.0f,
     0.0f,
     0.0f,
     128,
     8,
     768},
    /* OLMoE-1B-7B's widths in 4 of its 16 layers: 16 heads of 128, 64
     * experts of 1,024, top 8, weights not renormalised. */
    {"olmoe-1b-7b-4l",
     "olmoe",
     50304,
     2048,
     4,
     16,
     16,
     128,
     1024,
     4096,
     10000.0f,
     1e-5f,
     0,
     0,
     0,
     0.0f,
     0.0f,
     0.0f,
     64,
     8,
     1024},
    /* Mixtral 8x7B's widths in 2 of its 32 layers: a llama file with 8
     * experts of 14,336, top 2. */
    {"mixtral-8x7b-2l",
     "llama",
     32000,
     4096,
     2,
     32,
     8,
     128,
     14336,
     32768,
     1000000.0f,
     1e-5f,
     0,
     0,
     0,
     0.0f,
     0.0f,
     0.0f,
     8,
     2,
     14336},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

const char *const model_dummy_configs[] = {
    "llama-3-8b",    "llama-3.2-1b",     "qwen2.5-7b",     "qwen3-0.6b",      "qwen3-8b",
    "smollm2-135m",  "stories110m",      "gemma3-1b",      "phi3.5-mini-4l",  "gemma2-2b",
    "mistral-7b-4l", "qwen3-30b-a3b-4l", "olmoe-1b-7b-4l", "mixtral-8x7b-2l", NULL};

static const dummy_shape *dummy_find(const char *name) {
    for (int i = 0; i < N_SHAPES; i++)
        if (name && !strcmp(name, SHAPES[i].name))
            return &SHAPES[i];
    return NULL;
}

/* ---- the synthetic vocabulary --------------------------------------------- */

/* SentencePiece token types as GGUF stores them. */
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_BYTE = 6 };

typedef struct dummy_vocab {
    char **pieces;
    uint64_t *lens;
    float *scores;
    int32_t *types;
    int n, cap;
} dummy_vocab;

static int vocab_add(dummy_vocab *v, const char *piece, int type) {
    if (v->n == v->cap)
        return 0; /* full: the caller stops */
    size_t len = strlen(piece);
    char *p = malloc(len + 1);
    if (!p)
        return BRISK_ENOMEM;
    memcpy(p, piece, len + 1);
    v->pieces[v->n] = p;
    v->lens[v->n] = len;
    /* Earlier pieces are the more frequent ones, as in a trained vocabulary. */
    v->scores[v->n] = -(float)v->n;
    v->types[v->n] = type;
    v->n++;
    return 0;
}

static void vocab_free(dummy_vocab *v) {
    for (int i = 0; i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v->types);
}

/* <unk> <s> </s>, the 256 byte tokens, then "▁x" and "x" for letters, digits
 * and punctuation, letter pairs and triples (so English encodes to about one
 * token per 2-3 letters), then fillers "▁tok<N>" up to n. */
static int vocab_build(dummy_vocab *v, int n) {
    v->cap = n;
    v->pieces = calloc((size_t)n, sizeof *v->pieces);
    v->lens = calloc((size_t)n, sizeof *v->lens);
    v->scores = calloc((size_t)n, sizeof *v->scores);
    v->types = calloc((size_t)n, sizeof *v->types);
    if (!v->pieces || !v->lens || !v->scores || !v->types)
        return BRISK_ENOMEM;
    int rc = vocab_add(v, "<unk>", T_UNKNOWN);
    if (!rc)
        rc = vocab_add(v, "<s>", T_CONTROL);
    if (!rc)
        rc = vocab_add(v, "</s>", T_CONTROL);
    char buf[32];
    for (int b = 0; b < 256 && !rc; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        rc = vocab_add(v, buf, T_BYTE);
    }
    static const char single[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-";
    for (const char *c = single; *c && !rc; c++) {
        snprintf(buf, sizeof buf, "\xe2\x96\x81%c", *c);
        rc = vocab_add(v, buf, T_NORMAL);
        if (!rc) {
            snprintf(buf, sizeof buf, "%c", *c);
            rc = vocab_add(v, buf, T_NORMAL);
        }
    }
    if (!rc)
        rc = vocab_add(v, "\xe2\x96\x81", T_NORMAL);
    for (int len = 2; len <= 3 && !rc; len++) {
        int total = len == 2 ? 26 * 26 : 26 * 26 * 26;
        for (int k = 0; k < total && !rc; k++) {
            char w[4] = {0};
            for (int i = len - 1, x = k; i >= 0; i--, x /= 26)
                w[i] = (char)('a' + x % 26);
            snprintf(buf, sizeof buf, "\xe2\x96\x81%s", w);
            rc = vocab_add(v, buf, T_NORMAL);
            if (!rc)
                rc = vocab_add(v, w, T_NORMAL);
        }
    }
    for (int k = 0; v->n < n && !rc; k++) {
        snprintf(buf, sizeof buf, "\xe2\x96\x81tok%d", k);
        rc = vocab_add(v, buf, T_NORMAL);
    }
    return rc;
}

/* ---- metadata ------------------------------------------------------------- */

/* The shape's configuration as GGUF metadata into w and, with v, its
 * synthetic vocabulary (built into v, which the caller frees). */
static int dummy_write_meta(gguf_writer *w, const dummy_shape *s, dummy_vocab *v) {
    char key[96], name[64];
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    snprintf(name, sizeof name, "dummy-%s", s->name);
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", s->arch);
    rc = rc ? rc : gguf_writer_set_str(w, "general.name", name);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->dim);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->n_layers);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->hidden_dim);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps);
    if (s->rope_orig_ctx > 0) { /* phi3: LongRoPE (the factor tensors are made with the weights) */
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                      (uint32_t)s->rope_orig_ctx);
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), s->rope_attn_factor);
    }
    if (s->sliding_window > 0) /* the family's row gives the pattern and the local base */
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("attention.sliding_window"),
                                      (uint32_t)s->sliding_window);
    if (s->attn_softcap > 0.0f) /* read only by a family whose row has soft-caps */
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), s->attn_softcap);
    if (s->final_softcap > 0.0f)
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("final_logit_softcapping"), s->final_softcap);
    if (s->n_expert > 0) {
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("expert_feed_forward_length"),
                                      (uint32_t)s->expert_hidden);
    }
#undef KEY
    if (!v || rc)
        return rc;
    rc = vocab_build(v, s->n_vocab);
    return rc ? rc
              : gguf_writer_set_spm_vocab(w, (const char *const *)v->pieces, v->lens, v->scores,
                                          v->types, (uint64_t)v->n);
}

/* The shape's metadata (and, with v, vocabulary) as a GGUF image in *out
 * (*len bytes, malloc'ed: the caller frees). */
static int dummy_meta_image(const dummy_shape *s, dummy_vocab *v, uint8_t **out, size_t *len) {
    gguf_writer *w = gguf_writer_create();
    int rc = w ? dummy_write_meta(w, s, v) : BRISK_ENOMEM;
    if (!rc)
        rc = gguf_writer_to_buffer(w, out, len);
    gguf_writer_free(w);
    return rc;
}

/* The shape's configuration from its metadata gf, read as a file's is; the
 * vocabulary size and the tied output, which a file's tensors would tell,
 * from the shape. */
static int dummy_read_config(const dummy_shape *s, const gguf_file *gf, model_config *c, char *err,
                             size_t err_len) {
    int rc = model_read_config(gf, c, err, err_len);
    if (rc < 0)
        return rc;
    c->n_vocab = s->n_vocab;
    c->tied_output = s->tied;
    return 0;
}

int model_dummy_config(const char *name, model_config *out) {
    const dummy_shape *s = dummy_find(name);
    if (!s)
        return BRISK_EINVAL;
    memset(out, 0, sizeof *out);
    uint8_t *meta = NULL;
    size_t len = 0;
    gguf_file *gf = NULL;
    char err[256];
    int rc = dummy_meta_image(s, NULL, &meta, &len);
    if (!rc)
        rc = gguf_open_memory(meta, len, &gf, err, sizeof err);
    if (!rc)
        rc = dummy_read_config(s, gf, out, err, sizeof err);
    gguf_close(gf);
    free(meta);
    return rc;
}

/* ---- random weights ------------------------------------------------------- */

typedef struct fill_job {
    kern_type type;
    void *dst;
    size_t row_bytes;
    int n_rows, n_in;
    int rows_per_task;
    float amp;      /* values uniform in [-amp, amp] */
    uint64_t seed;  /* of this tensor */
    float *scratch; /* [n_threads][n_in] */
} fill_job;

static void fill_task(void *ctx, int task, int thread) {
    fill_job *j = ctx;
    float *tmp = j->scratch + (size_t)thread * (size_t)j->n_in;
    int r0 = task * j->rows_per_task;
    int r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    for (int r = r0; r < r1; r++) {
        uint64_t s[4];
        brisk_rng_seed(s, j->seed ^ ((uint64_t)(r + 1) * 0xd1b54a32d192ed03ull));
        /* Two values per 64 random bits: 2^-32 resolution is plenty. */
        const float k = j->amp * 0x1.0p-31f;
        for (int i = 0; i < j->n_in; i += 2) {
            uint64_t u = brisk_rng_next(s);
            tmp[i] = ((float)(uint32_t)u - 0x1.0p31f) * k;
            if (i + 1 < j->n_in)
                tmp[i + 1] = ((float)(uint32_t)(u >> 32) - 0x1.0p31f) * k;
        }
        kern_quantize_row(j->type, tmp, (uint8_t *)j->dst + (size_t)r * j->row_bytes, j->n_in);
    }
}

typedef struct dummy_ctx {
    model *m;
    kern_pool *pool;
    uint64_t seed;
    int tensor; /* index of the next tensor: part of its seed */
    float *scratch;
} dummy_ctx;

static int dummy_matrix(dummy_ctx *d, kern_type type, int n_in, int n_out, float amp,
                        model_matrix *out) {
    fill_job j = {0};
    j.type = type;
    j.n_rows = n_out;
    j.n_in = n_in;
    j.row_bytes = kern_row_bytes(type, n_in);
    j.rows_per_task = 16;
    j.amp = amp;
    uint64_t x = d->seed + (uint64_t)(d->tensor++) * 0x9e3779b97f4a7c15ull;
    j.seed = brisk_splitmix64(&x);
    j.scratch = d->scratch;
    j.dst = model_alloc_owned(d->m, j.row_bytes * (size_t)n_out);
    if (!j.dst)
        return BRISK_ENOMEM;
    kern_pool_run(d->pool, fill_task, &j, (n_out + j.rows_per_task - 1) / j.rows_per_task);
    out->type = type;
    out->data = j.dst;
    out->n_in = n_in;
    out->n_out = n_out;
    d->m->n_params += (int64_t)n_in * n_out;
    return d->m->x8 && n_out > 1 ? model_make_x8(d->m, d->pool, out, 1) : 0;
}

/* n floats: all `value`, or uniform in [-amp, amp] when amp > 0. */
static int dummy_vector(dummy_ctx *d, int n, float value, float amp, const float **out) {
    model_matrix mm;
    int rc;
    if (amp > 0.0f) {
        if ((rc = dummy_matrix(d, KERN_TYPE_F32, n, 1, amp, &mm)) < 0)
            return rc;
        d->m->n_params -= n; /* counted below */
        *out = mm.data;
    } else {
        float *v = model_alloc_owned(d->m, (size_t)n * sizeof *v);
        if (!v)
            return BRISK_ENOMEM;
        for (int i = 0; i < n; i++)
            v[i] = value;
        *out = v;
    }
    d->m->n_params += n;
    return 0;
}

/* n norm weights uniform in [0.5, 1.5]. */
static int dummy_norm(dummy_ctx *d, int n, const float **out) {
    int rc = dummy_vector(d, n, 0.0f, 0.5f, out);
    if (rc < 0)
        return rc;
    float *v = (float *)*out; /* owned by the model, written once here */
    for (int i = 0; i < n; i++)
        v[i] += 1.0f;
    return 0;
}

static int dummy_weights(dummy_ctx *d) {
    model *m = d->m;
    const model_config *c = &m->cfg;
    model_weights *w = &m->w;
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    /* The compute type of every matrix; auto means f16 (a checkpoint's dtype). */
    model_weights_fmt fmt = m->fmt == MODEL_WEIGHTS_AUTO ? MODEL_WEIGHTS_F16 : m->fmt;
    int rc;
#define MAT(n_in, n_out, dst)                                                                      \
    model_target_type(fmt, KERN_TYPE_F32, n_in), n_in, n_out, sqrtf(3.0f / (float)(n_in)), dst
    if (c->tied_output) {
        if ((rc = dummy_matrix(d, MAT(c->dim, c->n_vocab, &w->tok_embd))) < 0)
            return rc;
        w->output = w->tok_embd;
    } else {
        /* Rows are only gathered: kept in f16 as a file would store them. */
        if ((rc = dummy_matrix(d, KERN_TYPE_F16, c->dim, c->n_vocab, 1.0f, &w->tok_embd)) < 0)
            return rc;
        if ((rc = dummy_matrix(d, MAT(c->dim, c->n_vocab, &w->output))) < 0)
            return rc;
    }
    if ((rc = dummy_vector(d, c->dim, 1.0f, 0.0f, &w->output_norm)) < 0)
        return rc;
    if (c->rope_orig_ctx > 0) { /* LongRoPE divisors: long 1 to ~25, short 1 to ~2 */
        float *lo = model_alloc_owned(m, (size_t)(c->n_rot / 2) * sizeof *lo);
        float *sh = model_alloc_owned(m, (size_t)(c->n_rot / 2) * sizeof *sh);
        if (!lo || !sh)
            return BRISK_ENOMEM;
        for (int i = 0; i < c->n_rot / 2; i++) {
            lo[i] = 1.0f + 24.0f * (float)(i * i) / (float)(c->n_rot * c->n_rot / 4);
            sh[i] = 1.0f + (float)i / (float)(c->n_rot / 2);
        }
        w->rope_long = lo;
        w->rope_short = sh;
    }
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return BRISK_ENOMEM;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &w->layers[l];
        L->rope_base = c->rope_base;
        model_layer_set_window(c, l, L);
        if ((rc = dummy_vector(d, c->dim, 1.0f, 0.0f, &L->attn_norm)) < 0 ||
            (rc = dummy_vector(d, c->dim, 1.0f, 0.0f, &L->ffn_norm)) < 0 ||
            (rc = dummy_matrix(d, MAT(c->dim, q_dim, &L->wq))) < 0 ||
            (rc = dummy_matrix(d, MAT(c->dim, kv_dim, &L->wk))) < 0 ||
            (rc = dummy_matrix(d, MAT(c->dim, kv_dim, &L->wv))) < 0 ||
            (rc = dummy_matrix(d, MAT(q_dim, c->dim, &L->wo))) < 0)
            return rc;
        if (c->n_expert > 0) {
            /* The router in f32 as the loader keeps it, its logits of unit
             * variance so the routing spreads; the experts stacked as a file
             * stores them, each stack filled and interleaved as one matrix
             * (every shape's expert width is a multiple of 8). */
            int eh = c->expert_hidden, ne = c->n_expert;
            if ((rc = dummy_matrix(d, KERN_TYPE_F32, c->dim, ne, sqrtf(3.0f / (float)c->dim),
                                   &L->router)) < 0 ||
                (rc = dummy_matrix(d, MAT(c->dim, ne * eh, &L->exps_gate))) < 0 ||
                (rc = dummy_matrix(d, MAT(c->dim, ne * eh, &L->exps_up))) < 0 ||
                (rc = dummy_matrix(d, MAT(eh, ne * c->dim, &L->exps_down))) < 0)
                return rc;
        } else if ((rc = dummy_matrix(d, MAT(c->dim, c->hidden_dim, &L->w_gate))) < 0 ||
                   (rc = dummy_matrix(d, MAT(c->dim, c->hidden_dim, &L->w_up))) < 0 ||
                   (rc = dummy_matrix(d, MAT(c->hidden_dim, c->dim, &L->w_down))) < 0) {
            return rc;
        }
        /* The norms after the attention and the MLP (Gemma 2/3), in [0.5, 1.5]. */
        if (c->has_post_norms && ((rc = dummy_norm(d, c->dim, &L->post_attn_norm)) < 0 ||
                                  (rc = dummy_norm(d, c->dim, &L->post_ffn_norm)) < 0))
            return rc;
        /* Per-head q/k norms (Qwen3, Gemma 3): weights in [0.5, 1.5], so q's and k's differ. */
        int qn = c->has_qk_norm == MODEL_QK_NORM_FULL ? q_dim : c->head_dim; /* olmoe: whole */
        int kn = c->has_qk_norm == MODEL_QK_NORM_FULL ? kv_dim : c->head_dim;
        if (c->has_qk_norm &&
            ((rc = dummy_norm(d, qn, &L->q_norm)) < 0 || (rc = dummy_norm(d, kn, &L->k_norm)) < 0))
            return rc;
        if (c->has_qkv_bias && ((rc = dummy_vector(d, q_dim, 0.0f, 0.1f, &L->bq)) < 0 ||
                                (rc = dummy_vector(d, kv_dim, 0.0f, 0.1f, &L->bk)) < 0 ||
                                (rc = dummy_vector(d, kv_dim, 0.0f, 0.1f, &L->bv)) < 0))
            return rc;
    }
#undef MAT
    return 0;
}

int model_create_dummy(const model_load_opts *opts, model **out, char *err, size_t err_len) {
    *out = NULL;
    const dummy_shape *s = dummy_find(opts->dummy);
    if (!s) {
        char list[256] = "";
        for (int i = 0; model_dummy_configs[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     model_dummy_configs[i]);
        return ERR(BRISK_EINVAL, "model: unknown dummy configuration '%.64s' (known: %s)",
                   opts->dummy, list);
    }
    model *m = calloc(1, sizeof *m);
    if (!m)
        return ERR(BRISK_ENOMEM, "model: out of memory");
    m->fmt = opts->weights;
    m->x8 = model_want_x8(opts);
    dummy_vocab v = {0};
    uint8_t *meta = NULL;
    size_t meta_len = 0;
    int rc = dummy_meta_image(s, opts->tokenizer ? NULL : &v, &meta, &meta_len);
    vocab_free(&v);
    if (rc < 0) {
        free(meta);
        model_free(m);
        return ERR(BRISK_ENOMEM, "model: out of memory building the dummy model");
    }
    /* The metadata buffer lives as long as the model (the GGUF borrows it). */
    void *keep = model_alloc_owned(m, meta_len);
    if (keep)
        memcpy(keep, meta, meta_len);
    free(meta);
    if (!keep) {
        model_free(m);
        return ERR(BRISK_ENOMEM, "model: out of memory");
    }
    dummy_ctx d = {m, opts->pool, opts->dummy_seed, 0, NULL};
    if ((rc = gguf_open_memory(keep, meta_len, &m->gf, err, err_len)) < 0)
        goto fail;
    if ((rc = dummy_read_config(s, m->gf, &m->cfg, err, err_len)) < 0)
        goto fail;
    if (opts->tokenizer) {
        if ((rc = gguf_open(opts->tokenizer, &m->tok_gf, err, err_len)) < 0)
            goto fail;
        if ((rc = tok_vocab_create_from_gguf(m->tok_gf, &m->vocab, err, err_len)) < 0)
            goto fail;
        gguf_str ct;
        if (gguf_get_str(m->tok_gf, "tokenizer.chat_template", &ct) == 0 &&
            (m->chat_template = malloc(ct.len + 1))) {
            memcpy(m->chat_template, ct.data, ct.len);
            m->chat_template[ct.len] = '\0';
        }
    } else if ((rc = tok_vocab_create_from_gguf(m->gf, &m->vocab, err, err_len)) < 0) {
        goto fail;
    }
    if (tok_n_vocab(m->vocab) > m->cfg.n_vocab) {
        rc = ERR(BRISK_EINVAL, "model: the tokenizer has %d tokens but %s has a vocabulary of %d",
                 tok_n_vocab(m->vocab), s->name, m->cfg.n_vocab);
        goto fail;
    }
    int n_threads = opts->pool ? kern_pool_size(opts->pool) : 1;
    int widest = m->cfg.hidden_dim > m->cfg.dim ? m->cfg.hidden_dim : m->cfg.dim;
    if (m->cfg.expert_hidden > widest)
        widest = m->cfg.expert_hidden;
    if (m->cfg.n_heads * m->cfg.head_dim > widest)
        widest = m->cfg.n_heads * m->cfg.head_dim;
    d.scratch = malloc((size_t)n_threads * (size_t)widest * sizeof(float));
    if (!d.scratch || (rc = dummy_weights(&d)) < 0) {
        rc = ERR(BRISK_ENOMEM, "model: out of memory for the weights of %s", s->name);
        goto fail;
    }
    free(d.scratch);
    m->name = malloc(strlen(s->name) + 7);
    if (m->name)
        snprintf(m->name, strlen(s->name) + 7, "dummy-%s", s->name);
    model_count_bytes(m);
    BRISK_INFO(
        "model: dummy %s (random weights, seed %llu): %s, %d layers, dim %d, heads %d/%d, vocab %d "
        "(%s tokenizer), weights %s (%.1f MB read per token)",
        s->name, (unsigned long long)opts->dummy_seed, s->arch, m->cfg.n_layers, m->cfg.dim,
        m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.n_vocab,
        opts->tokenizer ? opts->tokenizer : "synthetic", model_weights_fmt_name(m->fmt),
        (double)m->weight_bytes / 1e6);
    *out = m;
    return 0;
fail:
    free(d.scratch);
    model_free(m);
    return rc < 0 ? rc : BRISK_EINVAL;
}
