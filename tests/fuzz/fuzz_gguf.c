/* fuzz_gguf.c - a hostile model file: the GGUF reader (header, metadata,
 * tensor table), every accessor over what it accepted, the tokenizer built
 * from the metadata, and model_load's architecture, hyper-parameter and
 * tensor-shape checks and weight conversion (model_load_memory), as brisk
 * loads a file given to --model.
 *
 * The input is the file. It is copied into a 64-byte-aligned buffer of
 * exactly its size: a mapping starts on a page, and tensor data alignment is
 * relative to the start of the file. Properties checked:
 *   - a refusal is a negative code with a one-line message, nothing else;
 *   - after gguf_open_memory() succeeds, every key, value, array, string and
 *     tensor the accessors hand out lies inside the buffer (ASan checks each
 *     byte touched), tensor sizes agree with their types and shapes, and
 *     tensors do not overlap;
 *   - a vocabulary built from the metadata encodes and decodes text to ids
 *     inside the vocabulary and valid UTF-8;
 *   - a model that loads has a config that passes the checks model.c
 *     promises (positive shapes, heads dividing evenly, the tokenizer not
 *     larger than the embedding), and runs: a prompt, one decode step and
 *     the sampler, greedy and with every filter and penalty on, give a
 *     token of the vocabulary whatever the weights hold (NaN and infinities
 *     included), with UBSan watching every conversion on the way. Inputs
 *     of odd length run the portable C kernels, the others the best SIMD
 *     level of the machine (kern_cpu_set_max_level), so both are covered. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_cpu.h"
#include "kv/kv_cache.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/sampler.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

/* Bounds a replayed file; the fuzzer's -max_len is far lower. */
#define FUZZ_GGUF_MAX_BYTES (4u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static void check_refusal(int rc, const char *err) {
    FUZZ_CHECK(rc < 0);
    FUZZ_CHECK(err[0] != '\0');
    FUZZ_CHECK(!strchr(err, '\n') && !strchr(err, '\r'));
}

static volatile uint8_t g_sink;

/* Reads every byte of [p, p + n): ASan reports any outside the buffer. */
static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    g_sink ^= x;
}

static int inside(const uint8_t *base, size_t size, const void *p, size_t n) {
    const uint8_t *q = p;
    return q >= base && q <= base + size && n <= (size_t)(base + size - q);
}

/* A NUL-terminated copy of s when it holds no NUL (names are looked up as C
 * strings), else NULL. */
static char *cstr(gguf_str s) {
    if (s.len > 65535 || (s.len && memchr(s.data, '\0', s.len)))
        return NULL;
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.data, s.len);
        c[s.len] = '\0';
    }
    return c;
}

static void walk_metadata(const gguf_file *gf, const uint8_t *base, size_t size) {
    int64_t n = gguf_n_kv(gf);
    FUZZ_CHECK(n >= 0);
    for (int64_t i = 0; i < n; i++) {
        gguf_str k = gguf_key_at(gf, i);
        FUZZ_CHECK(k.len > 0 && inside(base, size, k.data, k.len));
        char *key = cstr(k);
        if (!key)
            continue;
        /* Keys are unique, so the lookup finds this very entry. */
        FUZZ_CHECK(gguf_find_key(gf, key) == i);
        gguf_type t = gguf_kv_type(gf, i);
        uint32_t u32;
        int64_t i64;
        float f;
        int b;
        gguf_str s;
        gguf_type et;
        uint64_t an;
        const void *ad;
        (void)gguf_get_u32(gf, key, &u32);
        (void)gguf_get_i64(gf, key, &i64);
        (void)gguf_get_f32(gf, key, &f);
        (void)gguf_get_bool(gf, key, &b);
        if (gguf_get_str(gf, key, &s) == 0) {
            FUZZ_CHECK(t == GGUF_TYPE_STRING && inside(base, size, s.data, s.len));
            touch(s.data, s.len);
        }
        if (gguf_get_arr(gf, key, &et, &an, &ad) == 0) {
            FUZZ_CHECK(t == GGUF_TYPE_ARRAY);
            size_t es = gguf_type_size(et);
            if (es > 0) {
                FUZZ_CHECK(an <= size / es && inside(base, size, ad, (size_t)an * es));
                touch(ad, (size_t)an * es);
            }
        }
        gguf_str *strs = NULL;
        uint64_t ns = 0;
        if (gguf_get_arr_str(gf, key, &strs, &ns) == 0) {
            for (uint64_t j = 0; j < ns; j++) {
                FUZZ_CHECK(inside(base, size, strs[j].data, strs[j].len));
                touch(strs[j].data, strs[j].len);
            }
            free(strs);
        }
        free(key);
    }
}

static void walk_tensors(const gguf_file *gf, const uint8_t *base, size_t size) {
    int64_t n = gguf_n_tensors(gf);
    FUZZ_CHECK(n >= 0);
    FUZZ_CHECK(gguf_data_offset(gf) % gguf_alignment(gf) == 0);
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(gf, i);
        FUZZ_CHECK(t && t->name.len > 0 && inside(base, size, t->name.data, t->name.len));
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        int64_t rows = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            FUZZ_CHECK(t->ne[d] >= 1);
            if (d > 0)
                rows *= t->ne[d];
        }
        FUZZ_CHECK(kern_type_valid(t->type));
        FUZZ_CHECK(t->ne[0] % kern_type_block_size(t->type) == 0);
        FUZZ_CHECK(t->nbytes == kern_row_bytes(t->type, t->ne[0]) * (size_t)rows);
        FUZZ_CHECK(inside(base, size, t->data, t->nbytes));
        FUZZ_CHECK(((const uint8_t *)t->data - base) % gguf_alignment(gf) == 0);
        if (t->nbytes) {
            touch(t->data, 1);
            touch((const uint8_t *)t->data + t->nbytes - 1, 1);
        }
        char *name = cstr(t->name);
        if (name) {
            FUZZ_CHECK(gguf_find_tensor(gf, name) == t);
            free(name);
        }
        for (int64_t j = 0; j < i; j++) {
            const gguf_tensor *u = gguf_tensor_at(gf, j);
            const uint8_t *a = t->data, *b = u->data;
            FUZZ_CHECK(a + t->nbytes <= b || b + u->nbytes <= a);
        }
    }
    FUZZ_CHECK(gguf_tensor_at(gf, n) == NULL && gguf_tensor_at(gf, -1) == NULL);
}

/* Text covering plain words, digits, a special token, multi-byte and invalid
 * UTF-8 and a NUL byte. */
static const char g_text[] =
    "Hello world, 123 <|im_start|>user\n\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"
    " <s></s>\xFF\xC3 \x00 end";

static void check_vocab(const gguf_file *gf) {
    tok_vocab *v = NULL;
    char err[256] = "";
    int rc = tok_vocab_create_from_gguf(gf, &v, err, sizeof err);
    if (rc < 0) {
        check_refusal(rc, err);
        FUZZ_CHECK(v == NULL);
        return;
    }
    int32_t nv = tok_n_vocab(v);
    FUZZ_CHECK(nv > 0);
    int32_t ids[512];
    int n = tok_encode(v, g_text, sizeof g_text - 1, TOK_ADD_BOS | TOK_PARSE_SPECIAL, ids, 512);
    FUZZ_CHECK(n >= 0 || n == BRISK_ENOMEM);
    if (n > 512)
        n = 512;
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
    char *s = tok_decode_all(v, ids, n > 0 ? n : 0, TOK_PARSE_SPECIAL);
    free(s);
    tok_decoder d;
    tok_decoder_init(&d, v, 0);
    size_t cap = tok_decoder_max_out(v);
    char *out = malloc(cap);
    for (int i = 0; out && i < n; i++) {
        int k = tok_decoder_push(&d, ids[i], out, cap);
        FUZZ_CHECK(k >= 0 && (size_t)k <= cap);
        FUZZ_CHECK(fuzz_utf8_valid(out, (size_t)k));
    }
    free(out);
    tok_vocab_free(v);
}

/* A prompt of 5 tokens, one more decode step, and the sampler on each. */
static void run_model(const model *m) {
    enum { N = 5, CTX = 8 };
    const model_config *c = model_get_config(m);
    kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 1, CTX);
    model_state *st = model_state_create(m, N, CTX);
    float *copy = malloc((size_t)c->n_vocab * sizeof *copy);
    model_sampling sp = model_sampling_default();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.min_p = 0.05f;
    sp.repetition_penalty = 1.3f;
    sp.presence_penalty = 0.5f;
    sp.frequency_penalty = -0.5f;
    int32_t bias_id = c->n_vocab - 1;
    float bias = 5.0f;
    sp.n_logit_bias = 1;
    sp.logit_bias_ids = &bias_id;
    sp.logit_bias = &bias;
    model_sampling greedy = model_sampling_default();
    greedy.temperature = 0.0f;
    model_sampler *s1 = model_sampler_create(&sp, c->n_vocab);
    model_sampler *s0 = model_sampler_create(&greedy, c->n_vocab);
    int32_t toks[N + 1], pos[N], seq[N] = {0};
    for (int i = 0; i < N; i++) {
        toks[i] = (int32_t)((i * 7919u + 1u) % (uint32_t)c->n_vocab);
        pos[i] = i;
    }
    if (!kv || !st || !copy || !s1 || !s0)
        goto out;
    for (int step = 0; step < 2; step++) {
        model_batch b = {step ? 1 : N, step ? &toks[N] : toks, step ? &pos[0] : pos, seq, NULL,
                         NULL};
        int32_t p = N;
        if (step)
            b.pos = &p;
        float *logits = NULL;
        int n_out = 0;
        int rc = model_forward(m, st, kv, NULL, &b, &logits, &n_out);
        FUZZ_CHECK(rc == 0 && n_out == 1 && logits);
        memcpy(copy, logits, (size_t)c->n_vocab * sizeof *copy);
        int32_t t1 = model_sampler_sample(s1, copy, toks, N);
        int32_t t0 = model_sampler_sample(s0, logits, toks, N);
        FUZZ_CHECK(t1 >= 0 && t1 < c->n_vocab && t0 >= 0 && t0 < c->n_vocab);
        toks[N] = t0;
    }
out:
    model_sampler_free(s0);
    model_sampler_free(s1);
    free(copy);
    model_state_free(st);
    kv_cache_free(kv);
}

/* Returns 1 when the model loaded. */
static int check_model(const uint8_t *buf, size_t size, model_weights_fmt fmt) {
    model *m = NULL;
    char err[256] = "";
    model_load_opts o = {.weights = fmt};
    int rc = model_load_memory(buf, size, &o, &m, err, sizeof err);
    if (rc < 0) {
        check_refusal(rc, err);
        FUZZ_CHECK(m == NULL);
        return 0;
    }
    const model_config *c = model_get_config(m);
    FUZZ_CHECK(c->n_layers >= 1 && c->dim >= 1 && c->hidden_dim >= 1);
    FUZZ_CHECK(c->n_heads >= 1 && c->n_kv_heads >= 1 && c->n_heads % c->n_kv_heads == 0);
    FUZZ_CHECK(c->head_dim >= 1 && c->n_rot >= 0 && c->n_rot <= c->head_dim && c->n_rot % 2 == 0);
    FUZZ_CHECK(c->n_vocab >= 1 && tok_n_vocab(model_get_vocab(m)) <= c->n_vocab);
    FUZZ_CHECK(c->n_ctx_train >= 1);
    FUZZ_CHECK(c->norm_eps > 0.0f && c->rope_base > 0.0f);
    FUZZ_CHECK(model_weight_bytes(m) > 0);
    run_model(m);
    model_free(m);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_GGUF_MAX_BYTES)
        return 0;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, size ? size : 1) != 0)
        return 0;
    uint8_t *buf = mem;
    if (size)
        memcpy(buf, data, size);
    gguf_file *gf = NULL;
    char err[256] = "";
    int rc = gguf_open_memory(buf, size, &gf, err, sizeof err);
    if (rc < 0) {
        check_refusal(rc, err);
        FUZZ_CHECK(gf == NULL);
        free(buf);
        return 0;
    }
    FUZZ_CHECK(gguf_version(gf) == 2 || gguf_version(gf) == 3);
    uint32_t a = gguf_alignment(gf);
    FUZZ_CHECK(a != 0 && (a & (a - 1)) == 0);
    walk_metadata(gf, buf, size);
    walk_tensors(gf, buf, size);
    check_vocab(gf);
    gguf_close(gf);
    /* The whole model: as stored, then converted (f32, f16 or int8, chosen
     * by the input so that every conversion path is reached). */
    kern_cpu_set_max_level(size % 2 ? KERN_LEVEL_SCALAR : KERN_LEVEL_TOP);
    if (check_model(buf, size, MODEL_WEIGHTS_AUTO))
        check_model(buf, size, (model_weights_fmt)(1 + size % 3));
    free(buf);
    return 0;
}
