/* sched_setup.c - the model, its backend and the KV cache in one place
 * (sched_setup.h says which rules live here). */
#include "scheduler/sched_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

/* Blocks in the pool, by the policy in sched_setup.h: seq_blocks is what
 * one full context holds at once (every group's table), per_block one
 * block's bytes. */
static long setup_pool_blocks(const sched_setup_opts *o, long seq_blocks, size_t per_block,
                              long long budget) {
    if (o->kv_exact) /* at least 2: a pool of one block cannot copy on write */
        return seq_blocks * o->max_seqs < 2 ? 2 : seq_blocks * o->max_seqs;
    double share = o->kv_share > 0 && o->kv_share < 1 ? o->kv_share : 1.0;
    if (o->kv_cache_bytes > 0)
        return (long)((double)o->kv_cache_bytes * share / (double)per_block);
    if (budget > 0)
        return (long)((double)budget * share / (double)per_block); /* the GPU's */
    long full = seq_blocks * o->max_seqs;
    long cap = (long)(((size_t)1 << 30) / per_block);
    long want = (long)((double)(full < cap ? full : cap) * share);
    return want < seq_blocks ? seq_blocks : want;
}

/* Sizes the pool for kc and cuts kc->max_seq_blocks to the longest context
 * whose blocks (every group's, at once) fit in it. 0; -1 when that cut
 * would change the grouping (a window no longer saves anything there). */
static int setup_size_pool(const sched_setup_opts *o, long long budget, kv_cache_config *kc,
                           kv_cache_shape *sh, long *n_blocks) {
    *n_blocks = 0;
    if (kv_cache_shape_of(kc, sh) < 0 || sh->block_bytes == 0)
        return 0;
    *n_blocks = setup_pool_blocks(o, sh->seq_blocks, sh->block_bytes, budget);
    if (*n_blocks < 2 || *n_blocks > (1L << 30) || sh->seq_blocks <= *n_blocks)
        return 0;
    size_t bytes = sh->block_bytes;
    int lo = 1, hi = kc->max_seq_blocks - 1;
    while (lo < hi) {
        kc->max_seq_blocks = lo + (hi - lo + 1) / 2;
        if (kv_cache_shape_of(kc, sh) == 0 && sh->seq_blocks <= *n_blocks)
            lo = kc->max_seq_blocks;
        else
            hi = kc->max_seq_blocks - 1;
    }
    kc->max_seq_blocks = lo;
    kv_cache_shape_of(kc, sh);
    return sh->block_bytes == bytes ? 0 : -1;
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
                             .max_sample_rows = o->max_sample_rows,
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
    out->max_ctx = ctx;
    out->block_size = bs;
    return o->defer_kv ? 0 : sched_setup_kv(o, out, err, err_len);
}

int sched_setup_kv(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len) {
    if (!out->m || !out->be || out->kv) {
        snprintf(err, err_len, "setup: the KV cache needs a model and a backend, and only once");
        sched_setup_free(out);
        return BRISK_EINVAL;
    }
    const model_config *c = model_get_config(out->m);
    int ctx = out->max_ctx, bs = out->block_size;
    /* The dtype asked for, or no start: never silently another one. */
    int on_cuda = out->be->device == MODEL_DEVICE_CUDA;
    kern_kv_dtype dtype = o->kv_dtype;
    if (o->kv_dtype_by_device)
        dtype = on_cuda ? KERN_KV_F16 : KERN_KV_F32;
    const kern_kv_traits *kt = kern_kv_traits_of((int)dtype);
    if (!(on_cuda ? kt->cuda : kt->cpu)) {
        snprintf(err, err_len, "--kv-cache-dtype %s: the %s device cannot run it (%s%s reads %s)",
                 kt->name, model_device_name(out->be->device),
                 o->device == MODEL_DEVICE_AUTO ? "chosen by --device auto; " : "",
                 model_device_name(out->be->device), kern_kv_dtype_list(on_cuda));
        sched_setup_free(out);
        return BRISK_EUNSUPPORTED;
    }
    if (kern_kv_check(dtype, c->n_kv_heads, c->head_dim, err, err_len) < 0) {
        sched_setup_free(out);
        return BRISK_EINVAL;
    }
    int kv_dim = c->n_kv_heads * c->head_dim;
    /* Sliding-window layers release the blocks behind their window (the
     * serving engine, on either backend: the CUDA pool takes the cache's
     * grouped layout; not the tools, which grow a whole context at once). */
    int *windows = NULL;
    if (!o->kv_exact && !o->no_window_release) {
        windows = calloc((size_t)c->n_layers, sizeof *windows);
        const model_weights *w = model_get_weights(out->m);
        for (int l = 0; windows && l < c->n_layers; l++)
            windows[l] = w->layers[l].window;
    }
    kv_cache_config kc = {.n_layers = c->n_layers,
                          .kv_dim = kv_dim,
                          .block_size = bs,
                          .max_seqs = o->max_seqs,
                          .max_seq_blocks = (ctx + bs - 1) / bs,
                          .prefix_cache = o->prefix_caching,
                          .layer_window = windows,
                          .max_grow = windows ? o->max_batch_tokens : 0,
                          .dtype = dtype,
                          .head_dim = c->head_dim};
    kv_cache_shape sh;
    long n_blocks;
    long long budget = out->be->ops->kv_budget(out->be);
    int msb = kc.max_seq_blocks;
    if (setup_size_pool(o, budget, &kc, &sh, &n_blocks) < 0) {
        /* Even one context with windows does not fit: no release then. */
        kc.layer_window = NULL;
        kc.max_grow = 0;
        kc.max_seq_blocks = msb;
        setup_size_pool(o, budget, &kc, &sh, &n_blocks);
    }
    if (n_blocks < 2 || n_blocks > (1L << 30) || sh.seq_blocks > n_blocks) {
        snprintf(
            err, err_len,
            "the KV cache holds %ld blocks of %d positions (%.1f MB each); it needs at least 2",
            n_blocks, bs, sh.block_bytes / 1e6);
        free(windows);
        sched_setup_free(out);
        return BRISK_EINVAL;
    }
    if (ctx > kc.max_seq_blocks * bs)
        ctx = kc.max_seq_blocks * bs;
    kc.n_blocks = (int)n_blocks;
    int rc_kv = model_backend_kv_create(out->be, &kc, &out->kv);
    free(windows); /* borrowed by create only */
    if (rc_kv < 0) {
        snprintf(err, err_len, "out of memory for the KV cache (%ld blocks, %.1f MB)", n_blocks,
                 (double)sh.block_bytes * (double)n_blocks / 1e6);
        out->kv = NULL;
        sched_setup_free(out);
        return BRISK_ENOMEM;
    }
    out->max_ctx = ctx;
    out->n_blocks = n_blocks;
    out->kv_dtype = dtype;
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
