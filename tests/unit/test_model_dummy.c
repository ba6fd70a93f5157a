/* test_model_dummy.c - --dummy-weights: the shapes against the published
 * parameter counts of the real models, seeded weights that do not depend on
 * the thread count, their scale, a forward pass on them, the synthetic
 * vocabulary's round trip, a vocabulary from a GGUF file, and refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kernels/cpu/kern_pool.h"
#include "kernels/cpu/kern_types.h"
#include "models/model.h"

/* Parameters of a configuration: embedding (and output when untied), the
 * final norm, and per layer two norms, q/k/v/o, the three MLP matrices and
 * the qwen2 q/k/v biases or the qwen3 q/k norms. */
static int64_t count_params(const model_config *c) {
    int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim,
            kv = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t per_layer = 2 * d + d * q + 2 * d * kv + q * d;
    if (c->n_expert > 0) /* the router and every expert's three matrices */
        per_layer += d * c->n_expert + (int64_t)c->n_expert * 3 * d * c->expert_hidden;
    else
        per_layer += 3 * d * c->hidden_dim;
    if (c->has_qkv_bias)
        per_layer += q + 2 * kv;
    if (c->has_qk_norm == MODEL_QK_NORM_FULL) /* olmoe: over the whole q and k */
        per_layer += q + kv;
    else if (c->has_qk_norm) /* qwen3, gemma3: q and k norm weights per layer */
        per_layer += 2 * (int64_t)c->head_dim;
    if (c->has_post_norms) /* the norms after the attention and the MLP */
        per_layer += 2 * d;
    return (int64_t)c->n_vocab * d * (c->tied_output ? 1 : 2) + d + c->n_layers * per_layer;
}

static void test_shapes(void) {
    /* The parameter counts the publishers state for these checkpoints. */
    static const struct {
        const char *name;
        int64_t params;
    } known[] = {
        {"llama-3-8b", 8030261248LL},   /* Meta-Llama-3-8B */
        {"llama-3.2-1b", 1235814400LL}, /* Llama-3.2-1B */
        {"qwen2.5-7b", 7615616512LL},   /* Qwen2.5-7B */
        {"qwen3-8b", 8190735360LL},     /* Qwen3-8B (6.95B without the embeddings) */
        {"gemma3-1b", 999885952LL},     /* gemma-3-1b-pt */
        {"smollm2-135m", 134515008LL},  /* SmolLM2-135M (as its GGUF loads in brisk) */
        {"gemma2-2b", 2614341888LL},    /* gemma-2-2b */
        /* Mistral-7B-v0.1's 7,241,732,096 less 28 of its 32 layers of
         * 218,112,000 (two norms, q/k/v/o, the three MLP matrices). */
        {"mistral-7b-4l", 7241732096LL - 28LL * 218112000LL},
        /* Qwen3-30B-A3B's 30,532,122,624 less 44 of its 48 layers of
         * 623,120,640 (two norms, q/k/v/o, q/k norms, the router and 128
         * experts of 3 x 768 x 2,048). */
        {"qwen3-30b-a3b-4l", 30532122624LL - 44LL * 623120640LL},
        /* OLMoE-1B-7B-0924's 6,919,161,856 less 12 of its 16 layers of
         * 419,569,664 (two norms, q/k/v/o, q/k norms of 2,048 each, the
         * router and 64 experts of 3 x 1,024 x 2,048). */
        {"olmoe-1b-7b-4l", 6919161856LL - 12LL * 419569664LL},
        /* Mixtral-8x7B's 46,702,792,704 less 30 of its 32 layers of
         * 1,451,270,144 (two norms, q/k/v/o, the router and 8 experts of
         * 3 x 14,336 x 4,096). */
        {"mixtral-8x7b-2l", 46702792704LL - 30LL * 1451270144LL},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        model_config c;
        CHECK(model_dummy_config(known[i].name, &c) == 0, "%s", known[i].name);
        CHECK(count_params(&c) == known[i].params, "%s: %lld params, published %lld", known[i].name,
              (long long)count_params(&c), (long long)known[i].params);
    }
    int n = 0;
    for (; model_dummy_configs[n]; n++) {
        model_config c;
        CHECK(model_dummy_config(model_dummy_configs[n], &c) == 0, "%s", model_dummy_configs[n]);
        CHECK(c.dim % c.n_heads == 0 || c.head_dim > 0, "%s", model_dummy_configs[n]);
        CHECK(c.n_heads % c.n_kv_heads == 0, "%s", model_dummy_configs[n]);
    }
    CHECK(n == 14, "%d configurations", n);
    model_config c;
    CHECK(model_dummy_config("llama-3-70b", &c) == BRISK_EINVAL, "unknown name");
    CHECK(model_dummy_config(NULL, &c) == BRISK_EINVAL, "NULL name");
}

static model *load_dummy(const char *name, model_weights_fmt fmt, kern_pool *pool, uint64_t seed,
                         const char *tokenizer, char *err, size_t err_len) {
    model_load_opts o = {
        .weights = fmt, .pool = pool, .dummy = name, .tokenizer = tokenizer, .dummy_seed = seed};
    model *m = NULL;
    /* The path is ignored for a dummy model: nothing is opened. */
    if (model_load("/nonexistent/ignored.gguf", &o, &m, err, err_len) < 0)
        return NULL;
    return m;
}

static size_t matrix_bytes(const model_matrix *mm) {
    return kern_row_bytes(mm->type, mm->n_in) * (size_t)mm->n_out;
}

static void test_weights(void) {
    kern_pool *p2 = kern_pool_create(2), *p1 = kern_pool_create(1);
    char err[256] = "";
    model *a = load_dummy("stories110m", MODEL_WEIGHTS_INT8, p2, 0, NULL, err, sizeof err);
    CHECK(a != NULL, "load: %s", err);
    model *b = load_dummy("stories110m", MODEL_WEIGHTS_INT8, p1, 0, NULL, err, sizeof err);
    CHECK(b != NULL, "load: %s", err);
    model *s = load_dummy("stories110m", MODEL_WEIGHTS_INT8, p2, 7, NULL, err, sizeof err);
    CHECK(s != NULL, "load: %s", err);
    if (!a || !b || !s)
        goto out;
    const model_config *c = model_get_config(a);
    CHECK(model_n_params(a) == count_params(c), "%lld vs %lld", (long long)model_n_params(a),
          (long long)count_params(c));
    CHECK(model_n_params(a) == 109529856LL,
          "stories110M (tied) has 109,529,856 parameters, got %lld", (long long)model_n_params(a));
    CHECK(c->n_layers == 12 && c->dim == 768 && c->n_vocab == 32000 && c->tied_output, "shape");
    CHECK(!strcmp(model_name(a), "dummy-stories110m"), "name %s", model_name(a));
    const model_weights *wa = model_get_weights(a), *wb = model_get_weights(b),
                        *ws = model_get_weights(s);
    CHECK(wa->layers[0].wq.type == KERN_TYPE_Q8_0, "int8 -> Q8_0, got type %d",
          wa->layers[0].wq.type);
    /* Same seed: the same bytes with 1 or 2 threads; another seed: others. */
    const model_matrix *ma[] = {&wa->output, &wa->layers[0].wq, &wa->layers[11].w_down,
                                &wa->layers[5].wv};
    const model_matrix *mb[] = {&wb->output, &wb->layers[0].wq, &wb->layers[11].w_down,
                                &wb->layers[5].wv};
    const model_matrix *ms[] = {&ws->output, &ws->layers[0].wq, &ws->layers[11].w_down,
                                &ws->layers[5].wv};
    for (int i = 0; i < 4; i++) {
        CHECK(memcmp(ma[i]->data, mb[i]->data, matrix_bytes(ma[i])) == 0,
              "matrix %d differs across thread counts", i);
        CHECK(memcmp(ma[i]->data, ms[i]->data, matrix_bytes(ma[i])) != 0,
              "matrix %d equal across seeds", i);
    }
    /* Different tensors differ (each has its own seed). */
    CHECK(memcmp(wa->layers[0].wq.data, wa->layers[1].wq.data, matrix_bytes(&wa->layers[0].wq)) !=
              0,
          "layers 0 and 1 share weights");
    /* Scale: uniform in [-a, a] with a = sqrt(3 / n_in): mean 0, variance 1 / n_in. */
    const model_matrix *w = &wa->layers[3].w_down;
    float *row = malloc((size_t)w->n_in * sizeof *row);
    double sum = 0, sq = 0, amax = 0;
    long n = 0;
    for (int r = 0; r < 64; r++) {
        kern_dequantize_row(w->type,
                            (const uint8_t *)w->data + (size_t)r * kern_row_bytes(w->type, w->n_in),
                            row, w->n_in);
        for (int i = 0; i < w->n_in; i++, n++) {
            sum += row[i];
            sq += (double)row[i] * row[i];
            if (fabs(row[i]) > amax)
                amax = fabs(row[i]);
        }
    }
    free(row);
    double mean = sum / n, var = sq / n - mean * mean, want = 1.0 / w->n_in;
    CHECK(fabs(mean) < 0.05 * sqrt(want), "mean %g", mean);
    CHECK(fabs(var / want - 1.0) < 0.05, "variance %g, want %g", var, want);
    CHECK(amax <= sqrt(3.0 / w->n_in) * 1.01, "max |w| %g", amax);
    for (int i = 0; i < c->dim; i++)
        if (wa->layers[2].attn_norm[i] != 1.0f) {
            CHECK(0, "norm weight %d = %g", i, wa->layers[2].attn_norm[i]);
            break;
        }

    /* A forward pass on them: finite logits with a spread. */
    kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 1, 8);
    model_state *st = model_state_create(a, 4, 8);
    int32_t toks[4] = {1, 500, 20000, 31999}, pos[4] = {0, 1, 2, 3}, seq[4] = {0, 0, 0, 0};
    model_batch batch = {4, toks, pos, seq, NULL, NULL};
    float *lg = NULL;
    int n_out = 0;
    CHECK(kv && st && model_forward(a, st, kv, p2, &batch, &lg, &n_out) == 0 && n_out == 1,
          "forward");
    if (lg && n_out == 1) {
        double ls = 0, lq = 0;
        int finite = 1;
        for (int i = 0; i < c->n_vocab; i++) {
            finite &= isfinite(lg[i]);
            ls += lg[i];
            lq += (double)lg[i] * lg[i];
        }
        double sd = sqrt(lq / c->n_vocab - (ls / c->n_vocab) * (ls / c->n_vocab));
        CHECK(finite, "non-finite logits");
        CHECK(sd > 0.1 && sd < 100, "logit standard deviation %g", sd);
    }
    model_state_free(st);
    kv_cache_free(kv);

    /* The synthetic vocabulary: 32000 SentencePiece tokens, exact round trip. */
    const tok_vocab *v = model_get_vocab(a);
    CHECK(tok_n_vocab(v) == 32000 && tok_vocab_type(v) == TOK_TYPE_SPM && tok_bos(v) == 1 &&
              tok_eos(v) == 2,
          "vocab %d", tok_n_vocab(v));
    const char *texts[] = {"hello world", "The quick brown fox, 42 times!",
                           "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"};
    for (int t = 0; t < 3; t++) {
        int32_t ids[128];
        int k = tok_encode(v, texts[t], strlen(texts[t]), 0, ids, 128);
        CHECK(k > 0 && k < (int)strlen(texts[t]) + 8, "encode '%s': %d tokens", texts[t], k);
        char *back = k > 0 ? tok_decode_all(v, ids, k, 0) : NULL;
        CHECK(back && !strcmp(back, texts[t]), "round trip '%s' -> '%s'", texts[t],
              back ? back : "(null)");
        free(back);
    }
out:
    model_free(a);
    model_free(b);
    model_free(s);
    kern_pool_free(p1);
    kern_pool_free(p2);
}

static void test_tokenizer_file_and_errors(void) {
    char path[1024], err[256] = "";
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", bt_shared_dir());
    kern_pool *p = kern_pool_create(2);
    /* smollm2-135m's f16 weights from a 32000-token Llama vocabulary (it fits in 49152). */
    model *m = load_dummy("smollm2-135m", MODEL_WEIGHTS_F16, p, 3, path, err, sizeof err);
    CHECK(m != NULL, "with %s: %s", path, err);
    if (m) {
        CHECK(tok_n_vocab(model_get_vocab(m)) == 32000, "vocab %d",
              tok_n_vocab(model_get_vocab(m)));
        CHECK(model_get_config(m)->n_vocab == 49152, "n_vocab %d", model_get_config(m)->n_vocab);
        CHECK(model_get_weights(m)->layers[0].w_up.type == KERN_TYPE_F16, "f16");
        model_free(m);
    }
    /* gpt-2's 50257 tokens do not fit stories110m's 32000 rows. */
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", bt_shared_dir());
    err[0] = '\0';
    m = load_dummy("stories110m", MODEL_WEIGHTS_INT8, p, 0, path, err, sizeof err);
    CHECK(m == NULL && bt_one_line(err) && strstr(err, "50257"), "too large a vocab: '%s'", err);
    model_free(m);
    err[0] = '\0';
    m = load_dummy("stories110m", MODEL_WEIGHTS_INT8, p, 0, "/nonexistent.gguf", err, sizeof err);
    CHECK(m == NULL && bt_one_line(err), "missing tokenizer file: '%s'", err);
    model_free(m);
    err[0] = '\0';
    m = load_dummy("gpt-5", MODEL_WEIGHTS_INT8, p, 0, NULL, err, sizeof err);
    CHECK(m == NULL && bt_one_line(err) && strstr(err, "llama-3-8b") && strstr(err, "stories110m"),
          "unknown config: '%s'", err);
    model_free(m);
    kern_pool_free(p);
}

int main(void) {
    test_shapes();
    test_weights();
    test_tokenizer_file_and_errors();
    return BT_SUMMARY("test_model_dummy");
}
