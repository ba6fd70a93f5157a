/* backend_cuda_kv.c - the CUDA backend's K/V pool: device memory in
 * kv_cache's paged layout (the host keeps the books), copy-on-write copies
 * on the stream, and the budget --gpu-memory-utilization leaves for it. */
#include "brisk_config.h"

#if BRISK_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "common/brisk_error.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kv/kv_cache.h"
#include "models/backend.h"

#include "models/backend_cuda_internal.h"

/* ---- KV pool ----------------------------------------------------------------- */

static void cuda_copy_rows(void *ctx, int32_t dst, int32_t src, int n_rows) {
    cuda_backend *cb = ctx;
    size_t bytes = (size_t)n_rows * cb->row_stride * sizeof(uint16_t);
    for (int l = 0; l < cb->c.n_layers && !cb->kv_error; l++) {
        size_t base = (size_t)l * cb->layer_elems;
        int rc =
            kern_cuda_copy(cb->k_pool + base + (size_t)dst * cb->block_stride,
                           cb->k_pool + base + (size_t)src * cb->block_stride, bytes, cb->stream);
        if (!rc)
            rc = kern_cuda_copy(cb->v_pool + base + (size_t)dst * cb->block_stride,
                                cb->v_pool + base + (size_t)src * cb->block_stride, bytes,
                                cb->stream);
        if (rc)
            cb->kv_error = rc;
    }
}

int model_cuda_kv_create(model_backend *be, const kv_cache_config *cfg, kv_cache **out) {
    cuda_backend *cb = (cuda_backend *)be;
    *out = NULL;
    if (cb->k_pool || !cfg->f16 || cfg->n_layers != cb->c.n_layers ||
        cfg->block_size != cb->o.block_size || cfg->kv_dim != cb->c.n_kv_heads * cb->c.head_dim ||
        cfg->max_seq_blocks > cb->max_blocks || cfg->max_seqs <= 0)
        return BRISK_EINVAL;
    cb->block_size = cfg->block_size;
    cb->n_blocks = cfg->n_blocks;
    cb->row_stride = (size_t)cfg->kv_dim;
    cb->block_stride = (size_t)cfg->block_size * cb->row_stride;
    cb->layer_elems = (size_t)cfg->n_blocks * cb->block_stride;
    size_t bytes = (size_t)cfg->n_layers * cb->layer_elems * sizeof(uint16_t);
    int rc = kern_cuda_malloc((void **)&cb->k_pool, bytes);
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->v_pool, bytes);
    /* Unwritten rows are never read, but zeroes keep compute-sanitizer's
     * initcheck quiet. */
    if (!rc)
        rc = kern_cuda_memset(cb->k_pool, 0, bytes, cb->stream);
    if (!rc)
        rc = kern_cuda_memset(cb->v_pool, 0, bytes, cb->stream);
    if (!rc)
        rc = kern_cuda_sync(cb->stream);
    kv_cache_config k = *cfg;
    k.copy_rows = cuda_copy_rows;
    k.copy_ctx = cb;
    if (!rc && !(*out = kv_cache_create_paged(&k)))
        rc = BRISK_ENOMEM;
    if (rc) {
        kern_cuda_free(cb->k_pool);
        kern_cuda_free(cb->v_pool);
        cb->k_pool = cb->v_pool = NULL;
        return rc;
    }
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
