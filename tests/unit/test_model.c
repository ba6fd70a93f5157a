/* test_model.c - the forward pass on a real trained model (stories260K,
 * converted from llama2.c format): the publishers' greedy golden output,
 * batched == sequential, several sequences in one batch == each alone,
 * thread-count invariance, int8/f16 agreement, and error paths; and the
 * same invariances for every KV dtype of the CPU on tiny random models
 * whose heads the quantized dtypes take (tiny_model.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kernels/cpu/kern_pool.h"
#include "models/gguf_write.h"
#include "models/llama2c.h"
#include "models/model.h"
#include "models/sampler.h"

#include "model_run.h"
#include "stories_golden.h"
#include "tiny_model.h"

static model *load(const char *path, model_weights_fmt fmt, kern_pool *pool) {
    model_load_opts o = {.weights = fmt, .pool = pool};
    model *m = NULL;
    char err[256];
    if (model_load(path, &o, &m, err, sizeof err) < 0)
        fprintf(stderr, "load: %s\n", err);
    return m;
}

/* Greedy decoding from BOS; returns how many tokens matched the golden. */
static int greedy_match(model *m, kern_pool *pool, int n) {
    const model_config *c = model_get_config(m);
    kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 1, n + 1);
    model_state *st = model_state_create(m, 1, n + 1);
    int32_t tok = 1, seq = 0, matched = 0;
    for (int pos = 0; pos < n; pos++) {
        model_batch b = {1, &tok, &pos, &seq, NULL, NULL};
        float *lg;
        int n_out;
        if (model_forward(m, st, kv, pool, &b, &lg, &n_out) < 0)
            break;
        int best = 0;
        for (int i = 1; i < c->n_vocab; i++)
            if (lg[i] > lg[best])
                best = i;
        if (best != golden[pos])
            break;
        matched++;
        tok = best;
    }
    model_state_free(st);
    kv_cache_free(kv);
    return matched;
}

/* Logits for tokens[0..n) of one sequence evaluated in batches of `chunk`. */
static float *run_chunked(model *m, kern_pool *pool, const int32_t *toks, int n, int chunk) {
    const model_config *c = model_get_config(m);
    kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 1, n);
    model_state *st = model_state_create(m, chunk, n);
    float *all = model_run_chunks(m, st, kv, pool, toks, n, chunk);
    CHECK(all != NULL, "cache, state and logits");
    model_state_free(st);
    kv_cache_free(kv);
    return all;
}

/* A paged cache of one slot holding n positions, of dtype dt. */
static kv_cache *kv_of(const model *m, int n, int n_seqs, kern_kv_dtype dt) {
    const model_config *c = model_get_config(m);
    int per = (n + 15) / 16;
    kv_cache_config kc = {.n_layers = c->n_layers,
                          .kv_dim = c->n_kv_heads * c->head_dim,
                          .block_size = 16,
                          .n_blocks = per * n_seqs,
                          .max_seqs = n_seqs,
                          .max_seq_blocks = per,
                          .dtype = dt,
                          .head_dim = c->head_dim};
    kv_cache *kv = kv_cache_create_paged(&kc);
    for (int s = 0; kv && s < n_seqs; s++)
        if (kv_cache_seq_grow(kv, s, n) < 0) {
            kv_cache_free(kv);
            return NULL;
        }
    return kv;
}

/* run_chunked with a cache of dtype dt. */
static float *run_chunked_kv(model *m, kern_pool *pool, const int32_t *toks, int n, int chunk,
                             kern_kv_dtype dt) {
    kv_cache *kv = kv_of(m, n, 1, dt);
    model_state *st = model_state_create(m, chunk, n);
    float *all = model_run_chunks(m, st, kv, pool, toks, n, chunk);
    CHECK(all != NULL, "%s cache, state and logits", kern_kv_dtype_name(dt));
    model_state_free(st);
    kv_cache_free(kv);
    return all;
}

/* Batch invariance for every KV dtype the CPU runs (the memcmp checks of
 * main, per dtype): batched == one token at a time == chunks of 7 == one
 * thread, and two sequences interleaved in one batch == each alone, on tiny
 * random models with heads of 32 and of 64 (GQA 2), 100 positions. The
 * quantized dtypes store each position's codes and scales on their own, so
 * the bits of a position never depend on what else was written. Also: how
 * far q8_0 and q4_0 move the logits from f32 (printed; random weights, so
 * no quality claim: that is bench/kv_quality's job on real models). */
static void test_kv_dtypes(const char *dir, kern_pool *pool1, kern_pool *pool2) {
    const kern_kv_dtype dts[] = {KERN_KV_F32, KERN_KV_F16, KERN_KV_Q8_0, KERN_KV_Q4_0};
    const int hds[] = {32, 64};
    enum { N = 100 };
    int32_t toks[N], tokB[N];
    for (int i = 0; i < N; i++) {
        toks[i] = i ? 3 + (i * 131) % 500 : 1;
        tokB[i] = i ? 3 + (i * 47 + 11) % 500 : 1;
    }
    for (int hi = 0; hi < 2; hi++) {
        char path[1100], err[256];
        snprintf(path, sizeof path, "%s/tiny%d.gguf", dir, hds[hi]);
        CHECK(tiny_model_write(path, 3, 4, 2, hds[hi], 0, err, sizeof err) == 0, "tiny: %s", err);
        model *m = load(path, MODEL_WEIGHTS_F32, pool2);
        CHECK(m != NULL, "load tiny %d", hds[hi]);
        if (!m)
            continue;
        const model_config *c = model_get_config(m);
        size_t bytes = sizeof(float) * N * (size_t)c->n_vocab;
        float *ref = NULL;
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
            kern_kv_dtype dt = dts[di];
            float *one = run_chunked_kv(m, pool2, toks, N, 1, dt);
            float *batch = run_chunked_kv(m, pool2, toks, N, N, dt);
            float *chunk7 = run_chunked_kv(m, pool2, toks, N, 7, dt);
            float *single = run_chunked_kv(m, pool1, toks, N, N, dt);
            CHECK(!memcmp(one, batch, bytes) && !memcmp(one, chunk7, bytes) &&
                      !memcmp(one, single, bytes),
                  "head %d %s: batched, chunked, 1 thread == sequential", hds[hi],
                  kern_kv_dtype_name(dt));
            /* Two sequences interleaved in one batch. */
            kv_cache *kv = kv_of(m, 40, 2, dt);
            model_state *st = model_state_create(m, 80, 40);
            int32_t bt[80], bp[80], bs[80];
            uint8_t bw[80];
            for (int i = 0; i < 40; i++) {
                bt[2 * i] = toks[i], bp[2 * i] = i, bs[2 * i] = 0, bw[2 * i] = 1;
                bt[2 * i + 1] = tokB[i], bp[2 * i + 1] = i, bs[2 * i + 1] = 1, bw[2 * i + 1] = 1;
            }
            model_batch b = {80, bt, bp, bs, bw, NULL};
            float *lg = NULL;
            int n_out = 0;
            CHECK(kv && st && model_forward(m, st, kv, pool2, &b, &lg, &n_out) == 0 && n_out == 80,
                  "mixed batch %s", kern_kv_dtype_name(dt));
            float *aloneB = run_chunked_kv(m, pool2, tokB, 40, 40, dt);
            int ok = lg != NULL;
            size_t row = sizeof(float) * (size_t)c->n_vocab;
            for (int i = 0; ok && i < 40; i++)
                ok =
                    !memcmp(lg + (size_t)(2 * i) * c->n_vocab, one + (size_t)i * c->n_vocab, row) &&
                    !memcmp(lg + (size_t)(2 * i + 1) * c->n_vocab, aloneB + (size_t)i * c->n_vocab,
                            row);
            CHECK(ok, "head %d %s: two sequences in one batch == each alone", hds[hi],
                  kern_kv_dtype_name(dt));
            if (!ref) {
                ref = one;
                one = NULL;
            } else {
                double worst = 0;
                for (int i = 0; i < N; i++) {
                    const float *a = ref + (size_t)i * c->n_vocab,
                                *q = one + (size_t)i * c->n_vocab;
                    double num = 0, den = 0;
                    for (int j = 0; j < c->n_vocab; j++) {
                        num += (double)(a[j] - q[j]) * (a[j] - q[j]);
                        den += (double)a[j] * a[j];
                    }
                    worst = fmax(worst, sqrt(num / den));
                }
                printf("test_model: tiny model, heads of %d: %s KV vs f32 KV: max relative logit "
                       "error %.2e (batch invariance: %s)\n",
                       hds[hi], kern_kv_dtype_name(dt), worst, ok ? "bit-exact" : "BROKEN");
            }
            free(aloneB), free(one), free(batch), free(chunk7), free(single);
            model_state_free(st);
            kv_cache_free(kv);
        }
        free(ref);
        model_free(m);
        unlink(path);
    }
}

/* A hostile file's counts must not size allocations before the file is
 * seen to hold what they claim: a block_count of 16M in a file of eleven
 * tensors is refused for what it is, not after allocating 3.5 GB of layers
 * (fuzz_gguf's malloc limit reports such an allocation). */
static void test_hostile_block_count(void) {
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "a"};
    static const uint64_t lens[] = {5, 3, 4, 1};
    static float embd[4 * 32], norm[32];
    for (int i = 0; i < 32; i++)
        norm[i] = 1.0f;
    for (int i = 0; i < 4 * 32; i++)
        embd[i] = 0.01f * (float)(i % 13);
    for (int pass = 0; pass < 2; pass++) {
        uint32_t blocks = pass ? (1u << 24) : 1;
        gguf_writer *w = gguf_writer_create();
        int rc = gguf_writer_set_str(w, "general.architecture", "llama");
        rc |= gguf_writer_set_u32(w, "llama.block_count", blocks);
        rc |= gguf_writer_set_u32(w, "llama.embedding_length", 32);
        rc |= gguf_writer_set_u32(w, "llama.feed_forward_length", 32);
        rc |= gguf_writer_set_u32(w, "llama.attention.head_count", 2);
        rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, 4);
        int64_t ne_e[2] = {32, 4}, ne_n[1] = {32};
        rc |= gguf_writer_add_tensor(w, "token_embd.weight", KERN_TYPE_F32, 2, ne_e, embd);
        rc |= gguf_writer_add_tensor(w, "output_norm.weight", KERN_TYPE_F32, 1, ne_n, norm);
        /* Enough tensors for one layer, none of them the layer's. */
        for (int i = 0; i < 9; i++) {
            char name[16];
            snprintf(name, sizeof name, "extra.%d", i);
            rc |= gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 1, ne_n, norm);
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        if (rc == 0)
            rc = gguf_writer_to_buffer(w, &buf, &len);
        gguf_writer_free(w);
        CHECK(rc == 0, "writing the file");
        model *m = (model *)1;
        char err[256] = "";
        rc = model_load_memory(buf, len, NULL, &m, err, sizeof err);
        /* One layer: its first tensor is missing. 16M layers: the count. */
        CHECK(rc == BRISK_EFORMAT && m == NULL, "block_count %u: rc %d", blocks, rc);
        CHECK(strstr(err, pass ? "block_count 16777216 but only" : "missing tensor 'blk.0.") !=
                  NULL,
              "block_count %u: %s", blocks, err);
        free(buf);
    }
}

int main(void) {
    test_hostile_block_count();
    char src[1024], tok[1024], dir[] = "/tmp/brisk-test-model-XXXXXX", out[1100];
    snprintf(src, sizeof src, "%s/models/stories260K.bin", bt_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", bt_shared_dir());
    if (access(src, R_OK) != 0) {
        printf("test_model: SKIP: %s not found (set BRISK_SHARED_DIR)\n", src);
        return 0;
    }
    if (!mkdtemp(dir))
        return 1;
    snprintf(out, sizeof out, "%s/stories260K.gguf", dir);
    char err[256];
    int rc = model_convert_llama2c(src, tok, out, err, sizeof err);
    CHECK(rc == 0, "convert: %s", err);

    kern_pool *pool2 = kern_pool_create(2), *pool1 = kern_pool_create(1);
    model *m = load(out, MODEL_WEIGHTS_F32, pool2);
    CHECK(m != NULL, "load f32");
    if (!m)
        return BT_SUMMARY("test_model");
    const model_config *c = model_get_config(m);
    CHECK(c->dim == 64 && c->n_layers == 5 && c->n_heads == 8 && c->n_kv_heads == 4 &&
              c->n_vocab == 512 && c->hidden_dim == 172 && c->tied_output,
          "config");

    /* The golden: all 200 greedy tokens. */
    int matched = greedy_match(m, pool2, 200);
    CHECK(matched == 200, "golden: first %d of 200 tokens match", matched);

    /* Batched prefill gives bit-identical logits to one token at a time,
     * and to any chunking, with 1 or 2 threads. */
    int32_t toks[120];
    toks[0] = 1;
    memcpy(toks + 1, golden, sizeof(int32_t) * 119);
    size_t bytes = sizeof(float) * 120 * (size_t)c->n_vocab;
    float *one = run_chunked(m, pool2, toks, 120, 1);
    float *batch = run_chunked(m, pool2, toks, 120, 120);
    float *chunk7 = run_chunked(m, pool2, toks, 120, 7);
    float *single = run_chunked(m, pool1, toks, 120, 120);
    CHECK(memcmp(one, batch, bytes) == 0, "batched == sequential");
    CHECK(memcmp(one, chunk7, bytes) == 0, "chunk 7 == sequential");
    CHECK(memcmp(one, single, bytes) == 0, "1 thread == 2 threads");

    /* Two sequences in one batch, interleaved, equal each run alone. */
    {
        kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 2, 64);
        model_state *st = model_state_create(m, 64, 64);
        int32_t bt[64], bp[64], bs[64];
        uint8_t bw[64];
        const int32_t *seqB = toks + 50; /* a different token sequence */
        for (int i = 0; i < 30; i++) {
            bt[2 * i] = toks[i], bp[2 * i] = i, bs[2 * i] = 0, bw[2 * i] = 1;
            bt[2 * i + 1] = seqB[i], bp[2 * i + 1] = i, bs[2 * i + 1] = 1, bw[2 * i + 1] = 1;
        }
        model_batch b = {60, bt, bp, bs, bw, NULL};
        float *lg;
        int n_out;
        rc = model_forward(m, st, kv, pool2, &b, &lg, &n_out);
        CHECK(rc == 0 && n_out == 60, "mixed batch");
        float *aloneB = run_chunked(m, pool2, seqB, 30, 30);
        int okA = 1, okB = 1;
        for (int i = 0; i < 30; i++) {
            okA &= !memcmp(lg + (size_t)(2 * i) * c->n_vocab, one + (size_t)i * c->n_vocab,
                           sizeof(float) * c->n_vocab);
            okB &= !memcmp(lg + (size_t)(2 * i + 1) * c->n_vocab, aloneB + (size_t)i * c->n_vocab,
                           sizeof(float) * c->n_vocab);
        }
        CHECK(okA && okB, "two sequences in one batch == each alone (%d %d)", okA, okB);
        /* Error paths: bad token, bad sequence, position beyond the cache. */
        int32_t badtok = 512, p0 = 0, s0 = 0, s9 = 9, p99 = 99;
        model_batch e1 = {1, &badtok, &p0, &s0, NULL, NULL};
        CHECK(model_forward(m, st, kv, pool2, &e1, &lg, &n_out) == BRISK_EINVAL, "bad token");
        model_batch e2 = {1, toks, &p0, &s9, NULL, NULL};
        CHECK(model_forward(m, st, kv, pool2, &e2, &lg, &n_out) == BRISK_ERANGE, "bad seq");
        model_batch e3 = {1, toks, &p99, &s0, NULL, NULL};
        CHECK(model_forward(m, st, kv, pool2, &e3, &lg, &n_out) == BRISK_ERANGE, "bad pos");
        free(aloneB);
        model_state_free(st);
        kv_cache_free(kv);
    }

    /* int8 and f16 weights: teacher-forced top-1 agreement with f32 over the
     * 120 golden positions, and bounded relative logit error. */
    model_weights_fmt fmts[2] = {MODEL_WEIGHTS_F16, MODEL_WEIGHTS_INT8};
    /* f16 rounds each weight by up to 2^-11 relative and int8 by up to 1/254
     * of its block's largest value; through five layers that compounds to
     * about 1e-3 and 4e-2 measured, so the bounds leave 3x and 1.5x headroom. */
    double max_rel[2] = {3e-3, 6e-2};
    for (int f = 0; f < 2; f++) {
        model *mq = load(out, fmts[f], pool2);
        CHECK(mq != NULL, "load %s", model_weights_fmt_name(fmts[f]));
        if (!mq)
            continue;
        float *q = run_chunked(mq, pool2, toks, 120, 120);
        int agree = 0;
        double worst = 0;
        for (int i = 0; i < 120; i++) {
            const float *a = one + (size_t)i * c->n_vocab, *b = q + (size_t)i * c->n_vocab;
            int ia = 0, ib = 0;
            double num = 0, den = 0;
            for (int j = 0; j < c->n_vocab; j++) {
                if (a[j] > a[ia])
                    ia = j;
                if (b[j] > b[ib])
                    ib = j;
                num += (double)(a[j] - b[j]) * (a[j] - b[j]);
                den += (double)a[j] * a[j];
            }
            agree += ia == ib;
            double rel = sqrt(num / den);
            if (rel > worst)
                worst = rel;
        }
        printf("test_model: %s vs f32: top-1 agreement %d/120, max relative logit error %.2e\n",
               model_weights_fmt_name(fmts[f]), agree, worst);
        CHECK(agree >= 114, "%s top-1 agreement %d/120", model_weights_fmt_name(fmts[f]), agree);
        CHECK(worst <= max_rel[f], "%s relative error %g", model_weights_fmt_name(fmts[f]), worst);
        free(q);
        model_free(mq);
    }

    /* stories260K's heads of 8 hold no 32-value group: q8_0 is refused. */
    CHECK(kv_of(m, 16, 1, KERN_KV_Q8_0) == NULL && kv_of(m, 16, 1, KERN_KV_Q4_0) == NULL,
          "quantized KV refused for heads of 8");
    test_kv_dtypes(dir, pool1, pool2);

    /* A vocab-only GGUF is refused with a message, not a crash. */
    char vocab_only[1024];
    snprintf(vocab_only, sizeof vocab_only, "%s/vocab/ggml-vocab-llama-spm.gguf", bt_shared_dir());
    model *bad = NULL;
    err[0] = 0;
    model_load_opts o = {.weights = MODEL_WEIGHTS_AUTO, .pool = pool2};
    rc = model_load(vocab_only, &o, &bad, err, sizeof err);
    CHECK(rc < 0 && bad == NULL && err[0] && !strchr(err, '\n'), "vocab-only refused: %s", err);

    free(one);
    free(batch);
    free(chunk7);
    free(single);
    model_free(m);
    kern_pool_free(pool1);
    kern_pool_free(pool2);
    unlink(out);
    rmdir(dir);
    return BT_SUMMARY("test_model");
}
