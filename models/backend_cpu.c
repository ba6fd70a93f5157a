/* backend_cpu.c - the CPU backend: model_forward on the thread pool, K/V in
 * host arrays, model_sampler_sample on each row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_ops.h"
#include "kernels/cpu/kern_types.h"
#include "models/backend.h"

typedef struct cpu_backend {
    model_backend base;
    model_state *st;
    kern_pool *pool;
    float *logits; /* of the last forward: n_out rows of n_vocab */
    int n_out;
} cpu_backend;

static int cpu_forward(model_backend *be, kv_cache *kv, const model_batch *b, int *n_out) {
    cpu_backend *c = (cpu_backend *)be;
    c->n_out = 0;
    int rc = model_forward(be->m, c->st, kv, c->pool, b, &c->logits, &c->n_out);
    *n_out = c->n_out;
    return rc;
}

static int cpu_logits(model_backend *be, int row, const float **out) {
    cpu_backend *c = (cpu_backend *)be;
    if (row < 0 || row >= c->n_out)
        return BRISK_ERANGE;
    *out = c->logits + (size_t)row * (size_t)model_get_config(be->m)->n_vocab;
    return 0;
}

/* The sampler works in place on the row (penalties, temperature): rows are
 * sampled once each, after any log-prob copies. */
static int cpu_sample(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids) {
    cpu_backend *c = (cpu_backend *)be;
    size_t nv = (size_t)model_get_config(be->m)->n_vocab;
    for (int i = 0; i < n; i++) {
        if (jobs[i].row < 0 || jobs[i].row >= c->n_out)
            return BRISK_ERANGE;
        const model_sample_job *j = &jobs[i];
        ids[i] = model_sampler_sample_spec(j->sampler, c->logits + (size_t)j->row * nv, j->hist,
                                           j->n_hist, j->draft_q, j->draft_id,
                                           j->draft_q ? j->p_draft : NULL, NULL);
        if (ids[i] < 0)
            return ids[i];
    }
    return 0;
}

static int cpu_hidden(model_backend *be, const float **rows, int *n_rows) {
    cpu_backend *c = (cpu_backend *)be;
    *rows = model_state_hidden(c->st, n_rows);
    return 0;
}

static int cpu_kv_create(model_backend *be, const kv_cache_config *cfg, kv_cache **out) {
    (void)be;
    kv_cache_config k = *cfg;
    k.copy_rows = NULL;
    k.copy_ctx = NULL;
    *out = kv_cache_create_paged(&k);
    return *out ? 0 : BRISK_ENOMEM;
}

static long long cpu_kv_budget(model_backend *be) {
    (void)be;
    return 0;
}

static double cpu_mem_bw(model_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    /* 512 MiB is far beyond any last-level cache: DRAM bandwidth. */
    return c->pool ? kern_measure_read_bw(c->pool, (size_t)512 << 20, 5) * 1e9 : 0.0;
}

static void cpu_describe(model_backend *be, char *buf, size_t len) {
    cpu_backend *c = (cpu_backend *)be;
    snprintf(buf, len, "cpu, %d threads", c->pool ? kern_pool_size(c->pool) : 1);
}

void model_cpu_kernels_describe(const model *m, char *buf, size_t len) {
    if (!buf || len == 0)
        return;
    buf[0] = '\0';
    const model_weights *w = model_get_weights(m);
    const model_config *c = model_get_config(m);
    kern_type seen[16];
    int n_seen = 0;
    size_t at = 0;
    for (int l = -1; l < c->n_layers; l++) {
        const model_matrix *mats[10];
        int n_mats = 0;
        if (l < 0) {
            mats[n_mats++] = &w->output;
        } else {
            const model_layer *ly = &w->layers[l];
            const model_matrix *all[10] = {&ly->wq,      &ly->wk,       &ly->wv,     &ly->wo,
                                           &ly->w_gate,  &ly->w_up,     &ly->w_down, &ly->exps_gate,
                                           &ly->exps_up, &ly->exps_down};
            for (int i = 0; i < 10; i++)
                mats[n_mats++] = all[i];
        }
        for (int i = 0; i < n_mats; i++) {
            if (!mats[i]->data) /* a mixture of experts' empty dense MLP, or the reverse */
                continue;
            kern_type t = mats[i]->type;
            int dup = 0;
            for (int k = 0; k < n_seen; k++)
                dup |= seen[k] == t;
            if (dup || n_seen == 16)
                continue;
            seen[n_seen++] = t;
            char one[256];
            kern_matmul_describe(t, one, sizeof one);
            int k = snprintf(buf + at, len - at, "%s%s", at ? "; " : "", one);
            if (k < 0 || (size_t)k >= len - at)
                return;
            at += (size_t)k;
        }
    }
    const char *simd = kern_cpu_level() >= KERN_LEVEL_AVX2 ? "avx2" : "scalar";
    const char *attn = kern_attention_level_name(c->head_dim);
    snprintf(buf + at, len - at, "%sattention %s; norms, rope, silu, gelu %s", at ? "; " : "", attn,
             simd);
}

static void cpu_free(model_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    model_state_free(c->st);
    free(c);
}

static void cpu_set_trace(model_backend *be, struct model_recipe *trace) {
    model_state_set_trace(((cpu_backend *)be)->st, trace);
}

static const model_backend_ops cpu_ops = {
    .name = "cpu",
    .forward = cpu_forward,
    .hidden = cpu_hidden,
    .logits = cpu_logits,
    .sample = cpu_sample,
    .kv_create = cpu_kv_create,
    .kv_budget = cpu_kv_budget,
    .mem_bw = cpu_mem_bw,
    .describe = cpu_describe,
    .set_trace = cpu_set_trace,
    .free = cpu_free,
};

int model_backend_cpu_create(const model *m, const model_backend_opts *o, model_backend **out,
                             char *err, size_t err_len) {
    *out = NULL;
    /* A model loaded for a converting backend (keep_stored) may hold blocks
     * the CPU kernels do not multiply. */
    const model_weights *w = model_get_weights(m);
    const model_config *cfg = model_get_config(m);
    for (int l = -1; l < cfg->n_layers; l++) {
        const model_matrix *mats[10] = {&w->output};
        if (l >= 0) {
            const model_layer *ly = &w->layers[l];
            const model_matrix *lm[10] = {&ly->wq,      &ly->wk,       &ly->wv,     &ly->wo,
                                          &ly->w_gate,  &ly->w_up,     &ly->w_down, &ly->exps_gate,
                                          &ly->exps_up, &ly->exps_down};
            memcpy(mats, lm, sizeof mats);
        }
        for (int i = 0; i < 10 && mats[i]; i++)
            if (mats[i]->data && !kern_type_matmul_ok(mats[i]->type)) {
                snprintf(err, err_len,
                         "the CPU backend does not multiply %s matrices as stored (the model "
                         "was loaded with keep_stored, for the GPU)",
                         kern_type_name(mats[i]->type));
                return BRISK_EUNSUPPORTED;
            }
    }
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return BRISK_ENOMEM;
    }
    c->base.ops = &cpu_ops;
    c->base.m = m;
    c->base.device = MODEL_DEVICE_CPU;
    c->base.weight_bytes = model_weight_bytes(m);
    c->pool = o->pool;
    c->st = model_state_create(m, o->max_batch_tokens, o->max_ctx);
    if (!c->st) {
        free(c);
        snprintf(err, err_len, "out of memory for the forward pass scratch (%d tokens, context %d)",
                 o->max_batch_tokens, o->max_ctx);
        return BRISK_ENOMEM;
    }
    *out = &c->base;
    return 0;
}
