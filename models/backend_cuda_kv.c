/* backend_cuda_kv.c - the CUDA backend's K/V pool: device memory in
 * kv_cache's paged layout (the host keeps the books and says where each
 * layer lies), copy-on-write copies on the stream, and the budget
 * --gpu-memory-utilization leaves for it.
 *
 * The pool holds the dtype the host cache was made with (f16, or int8 / fp8
 * codes with their scales: kern_kv.h; the books' kv_cache_bytes and
 * kv_cache_copy_bytes give every size, nothing here counts bytes itself).
 * The layout is the host cache's (kv_cache.h): one run of blocks per layer,
 * [n_layers][n_blocks][block_size][kv_dim], or, where sliding-window layers
 * release the blocks behind their window, layers grouped by window with a
 * block holding layers_per_group layers, [n_blocks + 1][layers_per_group]
 * [block_size][kv_dim] (the extra block stays zero: released table entries
 * name it). Either way a layer is its base offset (kv_cache_layer_place)
 * plus block id * block_stride, addressed through its group's block tables,
 * so the KV store and attention kernels take a layer's pool pointer and its
 * group's slots and tables and need nothing else. */
#include "brisk_config.h"

#if BRISK_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdlib.h>

#include "common/brisk_error.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kv/kv_cache.h"
#include "models/backend.h"

#include "models/backend_cuda_internal.h"

/* ---- KV pool ----------------------------------------------------------------- */

/* Copy-on-write (kv_cache_config.copy_rows): rows [0, n_rows) of block src
 * into block dst in every layer the block holds, K and V, on the stream
 * (before the next forward's kernels). One table: every layer's run of
 * blocks. Grouped: the block's layers_per_group layers, which lie at the same
 * places whichever group the block serves (copy_base: group 0's layers). */
static void cuda_copy_rows(void *ctx, int32_t dst, int32_t src, int n_rows) {
    cuda_backend *cb = ctx;
    /* The books say how much (rows of f16, or a quantized layer-block with
     * its scales); the offsets are in the pool's units. */
    size_t bytes = kv_cache_copy_bytes(cb->kv_books, n_rows);
    for (int i = 0; i < cb->n_copy && !cb->kv_error; i++) {
        size_t to = (cb->copy_base[i] + (size_t)dst * cb->block_stride) * cb->kv_unit;
        size_t from = (cb->copy_base[i] + (size_t)src * cb->block_stride) * cb->kv_unit;
        int rc = kern_cuda_copy(cb->k_pool + to, cb->k_pool + from, bytes, cb->stream);
        if (!rc)
            rc = kern_cuda_copy(cb->v_pool + to, cb->v_pool + from, bytes, cb->stream);
        if (rc)
            cb->kv_error = rc;
    }
}

/* Where each layer lies in the pool and which group addresses it, from the
 * books (kv_cache_layer_place), and the strides of its view. */
static int cuda_kv_layout(cuda_backend *cb, kv_cache *kv) {
    int n = cb->c.n_layers;
    kv_cache_shape sh;
    kern_kv_view view;
    kv_cache_get_shape(kv, &sh);
    if (kv_cache_view(kv, 0, 0, &view) != 0 || sh.n_groups < 1)
        return BRISK_EINVAL;
    cb->layer_base = malloc((size_t)n * sizeof *cb->layer_base);
    cb->layer_group = malloc((size_t)n * sizeof *cb->layer_group);
    cb->copy_base = malloc((size_t)n * sizeof *cb->copy_base);
    if (!cb->layer_base || !cb->layer_group || !cb->copy_base)
        return BRISK_ENOMEM;
    cb->n_copy = 0;
    for (int l = 0; l < n; l++) {
        int g;
        size_t base;
        if (kv_cache_layer_place(kv, l, &g, &base) != 0 || g < 0 || g >= sh.n_groups)
            return BRISK_EINVAL;
        cb->layer_base[l] = base;
        cb->layer_group[l] = g;
        if (g == 0)
            cb->copy_base[cb->n_copy++] = base;
    }
    cb->n_groups = sh.n_groups;
    cb->kv_dtype = view.dtype;
    cb->kv_unit = kern_kv_unit_bytes(view.dtype);
    cb->scale_off = view.scale_off;
    cb->block_stride = view.block_stride;
    cb->row_stride = view.row_stride;
    /* A quantized slot is the block's byte offset plus the row (the store
     * kernel splits them: kern_cuda_kv_store_q); an f16 one the row's
     * element offset. */
    cb->slot_row = kern_kv_is_quant(view.dtype) ? 1 : view.row_stride;
    return 0;
}

/* The per-step KV slots and block tables for every group: create sized them
 * for one ([T] and [T][max_blocks]: a run per token at most); n_groups
 * tables per sequence need n_groups slots a token and tables a run
 * (cuda_stage). The tables are sized for max_seqs runs, not T: a grouped
 * pool is the serving engine's (sched_setup; the tools keep one table), whose
 * batches hold one run per sequence, and a table row per token of every
 * group would be n_groups x T x max_blocks ints (Gemma 3 27B, 31 groups, 8192
 * tokens and a 131,072-position context: 8 GB). The old arrays are kept on
 * failure. */
static int cuda_group_arrays(cuda_backend *cb) {
    size_t T = (size_t)cb->o.max_batch_tokens, G = (size_t)cb->n_groups;
    cb->max_runs = (int)T;
    if (G == 1)
        return 0;
    size_t R = (size_t)cb->o.max_seqs < T ? (size_t)cb->o.max_seqs : T;
    size_t slots = G * T * sizeof(int64_t), bt = G * R * (size_t)cb->max_blocks * sizeof(int32_t);
    int64_t *d_slots = NULL, *h_slots = NULL;
    int32_t *d_bt = NULL, *h_bt = NULL;
    int rc = kern_cuda_malloc((void **)&d_slots, slots);
    if (!rc)
        rc = kern_cuda_malloc((void **)&d_bt, bt);
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&h_slots, slots);
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&h_bt, bt);
    if (rc) {
        kern_cuda_free(d_slots);
        kern_cuda_free(d_bt);
        model_cuda_pinned_free(h_slots);
        model_cuda_pinned_free(h_bt);
        return rc;
    }
    kern_cuda_free(cb->d_slots);
    kern_cuda_free(cb->d_bt);
    model_cuda_pinned_free(cb->h_slots);
    model_cuda_pinned_free(cb->h_bt);
    cb->d_slots = d_slots, cb->d_bt = d_bt, cb->h_slots = h_slots, cb->h_bt = h_bt;
    cb->max_runs = (int)R;
    return 0;
}

int model_cuda_kv_create(model_backend *be, const kv_cache_config *cfg, kv_cache **out) {
    cuda_backend *cb = (cuda_backend *)be;
    *out = NULL;
    if (cb->k_pool || !kern_kv_traits_of((int)kv_cache_config_dtype(cfg))->cuda ||
        cfg->n_layers != cb->c.n_layers || cfg->block_size != cb->o.block_size ||
        cfg->kv_dim != cb->c.n_kv_heads * cb->c.head_dim || cfg->max_seq_blocks > cb->max_blocks ||
        cfg->max_seqs <= 0)
        return BRISK_EINVAL;
    /* The books first: they decide the layout (grouped by window or one
     * table) and the pool's size, the zero block included. */
    kv_cache_config k = *cfg;
    k.copy_rows = cuda_copy_rows;
    k.copy_ctx = cb;
    kv_cache *kv = kv_cache_create_paged(&k);
    if (!kv)
        return BRISK_ENOMEM;
    cb->block_size = cfg->block_size;
    cb->n_blocks = cfg->n_blocks;
    cb->kv_books = kv;
    int rc = cuda_kv_layout(cb, kv);
    size_t bytes = kv_cache_bytes(kv) / 2; /* K, and as much again for V */
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->k_pool, bytes);
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->v_pool, bytes);
    /* Zeroes: the zero block of a grouped pool must read as zeros (released
     * entries name it and attention gives it weight zero, which a NaN there
     * would break); elsewhere unwritten rows are never read, but zeroes keep
     * compute-sanitizer's initcheck quiet. */
    if (!rc)
        rc = kern_cuda_memset(cb->k_pool, 0, bytes, cb->stream);
    if (!rc)
        rc = kern_cuda_memset(cb->v_pool, 0, bytes, cb->stream);
    if (!rc)
        rc = kern_cuda_sync(cb->stream);
    if (!rc)
        rc = cuda_group_arrays(cb);
    if (rc) {
        kv_cache_free(kv);
        kern_cuda_free(cb->k_pool);
        kern_cuda_free(cb->v_pool);
        cb->k_pool = cb->v_pool = NULL;
        free(cb->layer_base);
        free(cb->layer_group);
        free(cb->copy_base);
        cb->layer_base = NULL, cb->layer_group = NULL, cb->copy_base = NULL;
        cb->n_groups = cb->n_copy = 0;
        cb->kv_books = NULL;
        return rc;
    }
    *out = kv;
    return 0;
}

long long model_cuda_kv_budget(model_backend *be) {
    cuda_backend *cb = (cuda_backend *)be;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess)
        return 1;
    double budget =
        cb->o.gpu_memory_utilization * (double)t - (double)(t - f) - (double)CUDA_RESERVE_BYTES;
    return budget > 1.0 ? (long long)budget : 1; /* 1 byte: the engine reports too small a pool */
}

#endif /* BRISK_HAVE_CUDA */
