/* rig.c - test_cuda_model's rig (cuda_model.h): backends built by hand, logits
 * tables and the comparisons the checks share.
 *
 * The rig does not go through sched_setup: it runs one host model under two
 * backends at once (CPU and CUDA), which sched_setup (one owned model per
 * setup) does not do, and pre-grows every slot to a fixed context as a
 * scheduler would not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kern_cuda_buf.h"
#include "tests/cuda_model/cuda_model.h"

static kern_pool *the_pool;

kern_pool *cm_pool(void) {
    if (!the_pool)
        the_pool = kern_pool_create(0);
    return the_pool;
}

void cm_pool_free(void) {
    kern_pool_free(the_pool);
    the_pool = NULL;
}

int cm_rig_open(cm_rig *r, const model *m, model_device dev, model_weights_fmt w,
                int max_batch_tokens, int ctx, int n_seqs, int graphs, int kv16) {
    return cm_rig_open_kv(r, m, dev, w, max_batch_tokens, ctx, n_seqs, graphs,
                          dev == MODEL_DEVICE_CUDA || kv16 ? KERN_KV_F16 : KERN_KV_F32);
}

int cm_rig_open_kv(cm_rig *r, const model *m, model_device dev, model_weights_fmt w,
                   int max_batch_tokens, int ctx, int n_seqs, int graphs, kern_kv_dtype dt) {
    memset(r, 0, sizeof *r);
    char err[256] = "";
    model_backend_opts o = {.device = dev,
                            .max_batch_tokens = max_batch_tokens,
                            .max_ctx = ctx,
                            .max_seqs = n_seqs,
                            .block_size = 16,
                            .pool = cm_pool(),
                            .gpu_memory_utilization = 0.5,
                            .cuda_graphs = graphs,
                            .weights = w};
    if (model_backend_create(m, &o, &r->be, err, sizeof err) < 0) {
        fprintf(stderr, "test_cuda_model: backend %s: %s\n", model_device_name(dev), err);
        return -1;
    }
    const model_config *c = model_get_config(m);
    int per = (ctx + 15) / 16;
    kv_cache_config kc = {.n_layers = c->n_layers,
                          .kv_dim = c->n_kv_heads * c->head_dim,
                          .block_size = 16,
                          .n_blocks = per * n_seqs,
                          .max_seqs = n_seqs,
                          .max_seq_blocks = per,
                          .dtype = dt,
                          .head_dim = c->head_dim};
    if (model_backend_kv_create(r->be, &kc, &r->kv) < 0) {
        fprintf(stderr, "test_cuda_model: KV pool of %d blocks on %s\n", kc.n_blocks,
                model_device_name(dev));
        return -1;
    }
    for (int s = 0; s < n_seqs; s++)
        if (kv_cache_seq_grow(r->kv, s, ctx) < 0)
            return -1;
    r->n_vocab = c->n_vocab;
    return 0;
}

void cm_rig_close(cm_rig *r) {
    kv_cache_free(r->kv);
    model_backend_free(r->be);
    r->kv = NULL;
    r->be = NULL;
}

int cm_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

float *cm_logits(cm_rig *r, const int32_t *toks, int n, int chunk, int slot, int from, int stride,
                 int *n_rows) {
    int nv = r->n_vocab, kept = 0;
    for (int p = 0; p < n; p++)
        kept += (p >= from && (p - from) % stride == 0) || p == n - 1;
    float *all = malloc(sizeof(float) * (size_t)kept * (size_t)nv);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk),
            *seq = malloc(sizeof(int32_t) * (size_t)chunk);
    uint8_t *want = malloc((size_t)chunk);
    int at = 0, rc = all && pos && seq && want ? 0 : -1;
    for (int off = 0; rc == 0 && off < n; off += chunk) {
        int k = n - off < chunk ? n - off : chunk, wanted = 0;
        for (int i = 0; i < k; i++) {
            int p = off + i;
            pos[i] = p, seq[i] = slot;
            want[i] = (p >= from && (p - from) % stride == 0) || p == n - 1;
            wanted += want[i];
        }
        model_batch b = {k, toks + off, pos, seq, want, NULL};
        int n_out = 0;
        rc = model_backend_forward(r->be, r->kv, &b, &n_out);
        if (rc == 0 && n_out != wanted)
            rc = -1;
        for (int i = 0; rc == 0 && i < n_out; i++) {
            const float *row;
            if ((rc = model_backend_logits(r->be, i, &row)) == 0)
                memcpy(all + (size_t)at++ * nv, row, sizeof(float) * (size_t)nv);
        }
    }
    if (rc != 0)
        fprintf(stderr, "test_cuda_model: forward of %d tokens in chunks of %d: rc %d (%s)\n", n,
                chunk, rc, kern_cuda_last_error());
    free(pos), free(seq), free(want);
    if (rc != 0) {
        free(all);
        return NULL;
    }
    *n_rows = kept;
    return all;
}

double cm_rel_err(const float *x, const float *ref, int n) {
    double num = 0, den = 0;
    for (int j = 0; j < n; j++)
        num += (double)(x[j] - ref[j]) * (x[j] - ref[j]), den += (double)ref[j] * ref[j];
    return sqrt(num / (den > 0 ? den : 1));
}

int cm_clear_margin(const float *ref, int nv, double bound) {
    int c1 = cm_argmax(ref, nv), c2 = c1 == 0 ? 1 : 0;
    double den = 0;
    for (int j = 0; j < nv; j++) {
        if (j != c1 && ref[j] > ref[c2])
            c2 = j;
        den += (double)ref[j] * ref[j];
    }
    return ref[c1] - ref[c2] > CM_MARGIN_K * bound * sqrt(den / nv);
}

int cm_compare_rows(const float *ref, const float *x, int n, int nv, double bound, double *worst,
                    int *counted) {
    int bad = 0;
    *worst = 0;
    *counted = 0;
    for (int i = 0; i < n; i++) {
        const float *c = ref + (size_t)i * nv, *g = x + (size_t)i * nv;
        double rel = cm_rel_err(g, c, nv);
        if (rel > *worst || rel != rel) /* a NaN is the worst */
            *worst = rel;
        if (cm_clear_margin(c, nv, bound)) {
            ++*counted;
            bad += cm_argmax(g, nv) != cm_argmax(c, nv);
        }
    }
    return bad;
}

model *cm_load(const char *path, model_weights_fmt f) {
    model_load_opts o = {.weights = f, .pool = cm_pool()};
    model *m = NULL;
    char err[256];
    if (model_load(path, &o, &m, err, sizeof err) < 0)
        fprintf(stderr, "test_cuda_model: load %s: %s\n", path, err);
    return m;
}

model *cm_load_dummy(const char *shape, model_weights_fmt f) {
    model_load_opts o = {.weights = f, .pool = cm_pool(), .dummy = shape};
    model *m = NULL;
    char err[256];
    if (model_load(NULL, &o, &m, err, sizeof err) < 0)
        fprintf(stderr, "test_cuda_model: dummy %s: %s\n", shape, err);
    return m;
}
