/* sched_setup.c - the model, its backend and the KV cache in one place
 * (sched_setup.h says which rules live here). */
#include "scheduler/sched_setup.h"

#include <stdio.h>
#include <string.h>

#include "common/brisk_error.h"

/* Blocks in the pool, by the policy in sched_setup.h. */
static long setup_pool_blocks(const sched_setup_opts *o, int bs, int ctx, size_t per_block,
                              long long budget) {
    long ctx_blocks = (ctx + bs - 1) / bs;
    if (o->kv_exact) /* at least 2: a pool of one block cannot copy on write */
        return ctx_blocks * o->max_seqs < 2 ? 2 : ctx_blocks * o->max_seqs;
    if (o->kv_cache_bytes > 0)
        return (long)(o->kv_cache_bytes / (long long)per_block);
    if (budget > 0)
        return (long)(budget / (long long)per_block); /* the GPU's */
    long full = ctx_blocks * o->max_seqs;
    long cap = (long)(((size_t)1 << 30) / per_block);
    long want = full < cap ? full : cap;
    return want < ctx_blocks ? ctx_blocks : want;
}

int sched_setup_load(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    model_load_opts lo = {.weights = o->weights,
                          .pool = o->pool,
                          .dummy = o->dummy,
                          .tokenizer = o->tokenizer,
                          .cpu_layout = model_device_is_cpu(o->device),
                          .keep_stored = o->device == MODEL_DEVICE_CUDA};
    /* On the GPU the weights are converted while uploaded: keep the file's
     * blocks on the host (mmap, no conversion) unless f32 is asked for. */
    if (o->device == MODEL_DEVICE_CUDA && lo.weights != MODEL_WEIGHTS_F32 && !o->dummy)
        lo.weights = MODEL_WEIGHTS_AUTO;
    return model_load(o->model_path, &lo, &out->m, err, err_len);
}

int sched_setup_finish(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len) {
    if (!out->m || o->max_batch_tokens < 1 || o->max_seqs < 1 || o->block_size < 0 ||
        o->max_ctx < 0) {
        snprintf(err, err_len,
                 "setup: no model, or max_batch_tokens %d, max_seqs %d, block_size %d, max_ctx %d "
                 "out of range",
                 o->max_batch_tokens, o->max_seqs, o->block_size, o->max_ctx);
        sched_setup_free(out);
        return BRISK_EINVAL;
    }
    const model_config *c = model_get_config(out->m);
    int ctx = o->max_ctx > 0 ? o->max_ctx : (c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
    if (ctx < 2)
        ctx = 2;
    int bs = o->block_size > 0 ? o->block_size : SCHED_BLOCK_SIZE_DEFAULT;
    double gmu = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization
                                               : SCHED_GPU_MEMORY_UTILIZATION_DEFAULT;
    model_backend_opts bo = {.device = o->device,
                             .max_batch_tokens = o->max_batch_tokens,
                             .max_ctx = ctx,
                             .max_seqs = o->max_seqs,
                             .block_size = bs,
                             .pool = o->pool,
                             .gpu_memory_utilization = gmu,
                             .cuda_graphs = o->cuda_graphs,
                             .weights = o->weights};
    int rc = model_backend_create(out->m, &bo, &out->be, err, err_len);
    if (rc < 0) {
        sched_setup_free(out);
        return rc;
    }
    int kv_f16 = o->kv_f16 || out->be->device == MODEL_DEVICE_CUDA;
    int kv_dim = c->n_kv_heads * c->head_dim;
    size_t per_block = kv_cache_pool_bytes_dtype(c->n_layers, kv_dim, bs, 1, kv_f16);
    long n_blocks =
        per_block ? setup_pool_blocks(o, bs, ctx, per_block, out->be->ops->kv_budget(out->be)) : 0;
    if (n_blocks < 2 || n_blocks > (1L << 30)) {
        snprintf(
            err, err_len,
            "the KV cache holds %ld blocks of %d positions (%.1f MB each); it needs at least 2",
            n_blocks, bs, per_block / 1e6);
        sched_setup_free(out);
        return BRISK_EINVAL;
    }
    if ((long)ctx > n_blocks * bs)
        ctx = (int)(n_blocks * bs); /* a sequence never outgrows the pool */
    kv_cache_config kc = {.n_layers = c->n_layers,
                          .kv_dim = kv_dim,
                          .block_size = bs,
                          .n_blocks = (int)n_blocks,
                          .max_seqs = o->max_seqs,
                          .max_seq_blocks = (ctx + bs - 1) / bs,
                          .prefix_cache = o->prefix_caching,
                          .f16 = kv_f16};
    if (model_backend_kv_create(out->be, &kc, &out->kv) < 0) {
        snprintf(err, err_len, "out of memory for the KV cache (%ld blocks, %.1f MB)", n_blocks,
                 kv_cache_pool_bytes_dtype(c->n_layers, kv_dim, bs, n_blocks, kv_f16) / 1e6);
        out->kv = NULL;
        sched_setup_free(out);
        return BRISK_ENOMEM;
    }
    out->max_ctx = ctx;
    out->block_size = bs;
    out->n_blocks = n_blocks;
    out->kv_f16 = kv_f16;
    return 0;
}

int sched_setup_create(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len) {
    int rc = sched_setup_load(o, out, err, err_len);
    return rc < 0 ? rc : sched_setup_finish(o, out, err, err_len);
}

void sched_setup_free(sched_setup *s) {
    if (!s)
        return;
    kv_cache_free(s->kv); /* before the backend that holds its K/V memory */
    model_backend_free(s->be);
    model_free(s->m);
    memset(s, 0, sizeof *s);
}
