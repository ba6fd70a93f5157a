/* sched_setup.h - a model, its backend and the paged KV cache, set up in one
 * place for every caller: the engine (brisk serve), brisk generate, brisk
 * bench and the tests.
 *
 * The rules live here once:
 *   - on the GPU the weights are converted while uploaded, so the host model
 *     keeps the file's blocks (weights auto, mmap) unless f32 is asked for;
 *     on the CPU integer matrices take the row-interleaved X8 layout;
 *   - the context: max_ctx, or min(training context, 4096), at least 2;
 *   - the KV pool: kv_cache_bytes when given; else on the GPU what
 *     --gpu-memory-utilization leaves (the backend's kv_budget); else enough
 *     for max_seqs full contexts capped at 1 GiB (at least one context);
 *     kv_exact: exactly max_seqs full contexts (one sequence's tools);
 *   - the KV dtype (kern_kv.h) is the one asked for or the start fails: a
 *     dtype the chosen device's kernels cannot read (the CPU: f32, f16,
 *     q8_0, q4_0; CUDA: f16, int8, fp8), or whose groups do not fit the
 *     model's heads, is refused with a message naming the device (with
 *     --device auto, the device auto chose), never replaced;
 *   - a sequence never holds more positions than the pool;
 *   - the serving engine's cache releases the blocks behind sliding
 *     windows (kv_cache.h), on the CPU and on the GPU alike (the device
 *     pool takes the cache's grouped layout), so a context's blocks are the
 *     full layers' for every position plus the window layers' for a window
 *     and one step (max_batch_tokens), and the pool is sized in those; not
 *     with kv_exact (the tools grow a whole context at once) or
 *     no_window_release.
 *
 * Ownership: the setup owns the model, the backend and the cache; the
 * thread pool is borrowed from the caller and must outlive them. */
#ifndef SCHED_SETUP_H
#define SCHED_SETUP_H

#include <stddef.h>

#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "models/model.h"

#define SCHED_BLOCK_SIZE_DEFAULT 16              /* positions per KV block */
#define SCHED_GPU_MEMORY_UTILIZATION_DEFAULT 0.9 /* fraction of GPU memory brisk may hold */

typedef struct sched_setup_opts {
    const char *model_path;    /* GGUF file; unused when dummy is set */
    const char *dummy;         /* --dummy-weights shape, or NULL */
    const char *tokenizer;     /* vocabulary for dummy weights (NULL: synthetic) */
    model_weights_fmt weights; /* compute format asked for */
    model_device device;
    kern_pool *pool;               /* borrowed; outlives the setup */
    int max_batch_tokens;          /* tokens per forward call (>= 1) */
    int max_ctx;                   /* positions per sequence; 0: min(training context, 4096) */
    int max_seqs;                  /* sequence slots (>= 1) */
    int max_sample_rows;           /* rows one sample call takes (0: max_seqs; backend.h) */
    int block_size;                /* 0: SCHED_BLOCK_SIZE_DEFAULT */
    double gpu_memory_utilization; /* 0: SCHED_GPU_MEMORY_UTILIZATION_DEFAULT */
    int cuda_graphs;               /* 1: replay decode steps from CUDA graphs */
    kern_kv_dtype kv_dtype;        /* K/V element (kern_kv.h; 0 = f32, 1 = f16) */
    int kv_dtype_by_device;        /* 1: kv_dtype unset: f32 on the CPU, f16 on CUDA */
    int prefix_caching;            /* 1: reuse the blocks of earlier prompts */
    long long kv_cache_bytes;      /* > 0: the pool's size in bytes */
    int kv_exact;                  /* 1: a pool of exactly max_seqs full contexts */
    int no_window_release;         /* 1: keep the blocks behind sliding windows */
    /* The part of the pool the rules above give that this cache takes, in
     * (0, 1]; 0: all of it. A speculative draft model takes the rest
     * (docs/SPECULATIVE.md). Not with kv_exact. */
    double kv_share;
    /* 1: sched_setup_finish makes the backend only; sched_setup_kv makes
     * the cache later (when another model must be loaded in between). */
    int defer_kv;
} sched_setup_opts;

typedef struct sched_setup {
    model *m;          /* owned */
    model_backend *be; /* owned */
    kv_cache *kv;      /* owned */
    int max_ctx;       /* positions per sequence, after the defaults and the pool's size */
    int block_size;
    long n_blocks;          /* blocks in the KV pool */
    kern_kv_dtype kv_dtype; /* the cache's element type */
} sched_setup;

/* Loads the model, creates its backend and the KV cache. On success *out
 * holds all three and 0 is returned; on failure everything made is freed,
 * *out is zeroed, err holds a one-line reason and a negative BRISK_E* code
 * is returned. */
int sched_setup_create(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len);

/* The same in two steps, for a caller that needs the model (its vocabulary,
 * its training context) to choose max_batch_tokens and max_ctx: _load fills
 * out->m only; _finish adds the backend and the cache with o (whose model
 * fields it no longer reads). Failure of either frees all of *out. */
int sched_setup_load(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len);
int sched_setup_finish(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len);

/* The KV cache of a setup whose finish deferred it (o as given to finish).
 * Failure frees all of *out, as finish's does. */
int sched_setup_kv(const sched_setup_opts *o, sched_setup *out, char *err, size_t err_len);

/* Frees the cache, then the backend that holds its memory, then the model.
 * A zeroed or partly filled setup is fine. */
void sched_setup_free(sched_setup *s);

#endif
