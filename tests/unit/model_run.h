/* model_run.h - the unit tests' whole-model runner (test_model,
 * test_model_moe): the logits of tokens[0..n) of one sequence (slot 0 of
 * kv) through model_forward in batches of `chunk` tokens, every row kept.
 * Header-only; include after brisk_test.h. */
#ifndef MODEL_RUN_H
#define MODEL_RUN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/model.h"

/* n * n_vocab floats (the caller frees them), or NULL when kv, st or the
 * memory is missing; a failed forward fails the test (CHECK) and leaves its
 * rows as they were. */
static inline float *model_run_chunks(model *m, model_state *st, kv_cache *kv, kern_pool *pool,
                                      const int32_t *toks, int n, int chunk) {
    const model_config *c = model_get_config(m);
    float *all = malloc(sizeof(float) * (size_t)n * c->n_vocab);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    int32_t *seq = calloc((size_t)chunk, sizeof(int32_t));
    uint8_t *want = malloc((size_t)chunk);
    if (!kv || !st || !all || !pos || !seq || !want) {
        free(all);
        free(pos);
        free(seq);
        free(want);
        return NULL;
    }
    memset(want, 1, (size_t)chunk);
    for (int off = 0; off < n; off += chunk) {
        int k = n - off < chunk ? n - off : chunk;
        for (int i = 0; i < k; i++)
            pos[i] = off + i;
        model_batch b = {k, toks + off, pos, seq, want, NULL};
        float *lg;
        int n_out;
        int rc = model_forward(m, st, kv, pool, &b, &lg, &n_out);
        CHECK(rc == 0 && n_out == k, "forward rc %d n_out %d", rc, n_out);
        if (rc == 0 && n_out == k)
            memcpy(all + (size_t)off * c->n_vocab, lg, sizeof(float) * (size_t)k * c->n_vocab);
    }
    free(pos);
    free(seq);
    free(want);
    return all;
}

#endif
