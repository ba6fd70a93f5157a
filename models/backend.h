/* backend.h - where the forward pass and sampling run: a small vtable that
 * the CPU path (backend_cpu.c: models/forward.c and models/sampler.c on the
 * thread pool) and the CUDA path (backend_cuda.c: weights, KV pool and
 * scratch on the GPU) both implement.
 *
 * A backend is made for one model and one shape of work (at most max_batch_tokens
 * tokens per forward call, contexts up to max_ctx, at most max_seqs
 * sequences). It owns the KV storage: model_backend_kv_create makes the
 * paged cache (kv_cache.h) whose bookkeeping stays on the host and whose K/V
 * memory is the backend's (host arrays on the CPU, a device pool on CUDA).
 *
 * A step is: forward (logits of the rows that want them stay in the
 * backend) -> optionally host copies of some rows (log-probs) -> sample
 * (token ids for the rows that pick a next token). On CUDA only the chosen
 * ids, and the rows asked for, cross to the host.
 *
 * Threading: one thread (the engine) uses a backend and its KV cache. */
#ifndef MODEL_BACKEND_H
#define MODEL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "models/sampler.h"

typedef enum { MODEL_DEVICE_CPU = 0, MODEL_DEVICE_CUDA = 1, MODEL_DEVICE_AUTO = 2 } model_device;

/* "cpu", "cuda", "auto"; BRISK_EINVAL otherwise. */
int model_device_parse(const char *s, model_device *out);
const char *model_device_name(model_device d);

typedef struct model_backend_opts {
    model_device device;  /* AUTO: CUDA when a GPU is present and the model fits */
    int max_batch_tokens; /* tokens per forward call */
    int max_ctx;          /* positions per sequence */
    int max_seqs;         /* sequences (KV slots, rows sampled per step) */
    /* Rows one sample call may take: speculative verification samples each
     * proposal's row as well (up to max_seqs x (proposals + 1)); 0: max_seqs. */
    int max_sample_rows;
    int block_size;  /* KV positions per block (the pool kv_create will be asked for) */
    kern_pool *pool; /* CPU: borrowed thread pool */
    /* CUDA: the fraction of the GPU's memory brisk may hold (weights,
     * scratch and the KV pool together), as vLLM's --gpu-memory-utilization. */
    double gpu_memory_utilization;
    int cuda_graphs; /* CUDA: capture decode steps into graphs (1) or not (0) */
    /* CUDA: the device's weight format, as --weights: F16, INT8, or AUTO
     * (INT8 for a file of quantised blocks, F16 otherwise); F32 is refused. */
    model_weights_fmt weights;
} model_backend_opts;

/* One row to sample: row r of the last forward's logits, for a sequence
 * whose settings and seeded generator are in sampler; hist holds the tokens
 * the penalties look at (prompt and output so far). */
typedef struct model_sample_job {
    int row;
    model_sampler *sampler;
    const int32_t *hist;
    int n_hist;
    /* Draft-model verification (speculative decoding), or draft_q NULL for
     * plain sampling: draft_q is the draft's distribution at this row
     * (n_vocab floats, host memory, borrowed for the call) and draft_id its
     * proposal; the backend writes p(draft_id), the row's probability of
     * it after every edit and filter, into *p_draft, and the id it returns
     * is drawn from the residual max(0, p - q) normalised, with the one draw
     * plain sampling makes (model_sampler_sample_spec's contract). */
    const float *draft_q;
    int32_t draft_id;
    float *p_draft;
} model_sample_job;

typedef struct model_backend model_backend;

typedef struct model_backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Runs the batch (model.h's model_forward contract), writing K/V into
     * kv, which must come from this backend's kv_create. *n_out = rows of
     * logits kept, one per token that wanted them, in batch order. CUDA with
     * a cache grouped by sliding window (kv_cache.h): at most max_seqs runs
     * (stretches of one sequence at consecutive positions), as the engine's
     * batches are; more is BRISK_EINVAL. */
    int (*forward)(model_backend *be, kv_cache *kv, const model_batch *b, int *n_out);
    /* A host copy of logits row `row` of the last forward (n_vocab floats),
     * valid until the next forward or sample call. */
    int (*logits)(model_backend *be, int row, const float **out);
    /* ids[i] = the token chosen for jobs[i]. Each job's sampler advances
     * its generator as model_sampler_sample does; jobs of one sampler draw
     * in job order. A job with draft_q set samples the residual and reports
     * p(draft_id) (model_sample_job). At most max_sample_rows jobs. */
    int (*sample)(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids);
    /* The hidden states of the last forward's want_hidden rows
     * (model_state_hidden's contract), host memory valid until the next
     * forward (CUDA gathers the rows on the device and downloads only them).
     * NULL: the backend has none, and its forward refuses a batch that asks
     * for them (BRISK_EUNSUPPORTED). */
    int (*hidden)(model_backend *be, const float **rows, int *n_rows);
    /* A paged KV cache (cfg: every field but the storage ones) whose K/V
     * memory this backend provides. Freed with kv_cache_free before the
     * backend is freed. */
    int (*kv_create)(model_backend *be, const kv_cache_config *cfg, kv_cache **out);
    /* Bytes the backend can give a KV pool now (CUDA: what the memory
     * budget leaves after weights and scratch); 0 when the caller decides
     * (CPU). */
    long long (*kv_budget)(model_backend *be);
    /* The device's measured read-only memory bandwidth in bytes/s, the
     * denominator of the decode roofline (a decode step only reads its
     * weights): CPU, every pool thread reading a 512 MiB buffer; CUDA, a
     * streaming reduction over 2 GiB. 0 when it cannot be measured. */
    double (*mem_bw)(model_backend *be);
    /* The device-to-device copy bandwidth in bytes/s (read + write), a
     * second ceiling for reference; NULL where there is none (CPU). */
    double (*copy_bw)(model_backend *be);
    /* One line about the device for the start-up log. */
    void (*describe)(model_backend *be, char *buf, size_t len);
    /* From the next forward on, appends each layer's steps to trace[l] as
     * they run (model_recipe.h; NULL stops), trace borrowed until then: the
     * tests' check that the pass follows model_layer_recipe. CUDA runs its
     * passes eagerly while a trace is set (a graph replay runs no host code). */
    void (*set_trace)(model_backend *be, struct model_recipe *trace);
    void (*free)(model_backend *be);
} model_backend_ops;

/* How the last forward ran, for the engine's step trace: the CPU's passes,
 * and CUDA's prompt and mixed steps, are EAGER (kernel by kernel); a CUDA
 * decode step is a graph REPLAY, or the step that CAPTUREs its bucket's
 * graph (then launches it), or a bucket's first step, run eagerly to set
 * every kernel up (WARMUP). */
typedef enum {
    MODEL_PASS_EAGER = 0,
    MODEL_PASS_WARMUP,
    MODEL_PASS_CAPTURE,
    MODEL_PASS_REPLAY,
} model_pass_kind;

/* "eager", "warmup", "capture", "replay". */
const char *model_pass_kind_name(model_pass_kind k);

struct model_backend {
    const model_backend_ops *ops;
    const model *m;
    model_device device;       /* CPU or CUDA: what AUTO resolved to */
    size_t weight_bytes;       /* the weights one decode step reads, in the backend's format */
    model_pass_kind last_pass; /* set by each forward call */
};

/* Makes the backend o->device asks for (AUTO: CUDA if brisk was built with
 * it, a GPU is present and the weights fit in the memory budget; else CPU,
 * and the reason is logged). On failure *out is NULL and err says why. */
int model_backend_create(const model *m, const model_backend_opts *o, model_backend **out,
                         char *err, size_t err_len);
void model_backend_free(model_backend *be);

/* The CPU backend (always built). */
/* The CPU kernels model m runs on this machine, per op: for each weight type
 * its matmul kernel at 1, 4 and 64 tokens (kern_matmul_describe), then
 * attention and the row ops, e.g.
 *   "q4_0x8: 1 token avx512vnni x8 2-stream, ...; attention avx2; norms avx2"
 * (logged at start, recorded by brisk bench). */
void model_cpu_kernels_describe(const model *m, char *buf, size_t len);
int model_backend_cpu_create(const model *m, const model_backend_opts *o, model_backend **out,
                             char *err, size_t err_len);
/* The CUDA backend; BRISK_EUNSUPPORTED in a build without CUDA or with no
 * device. */
int model_backend_cuda_create(const model *m, const model_backend_opts *o, model_backend **out,
                              char *err, size_t err_len);
/* Whether this build has CUDA and the driver reports a device; with a
 * device, *free_bytes / *total_bytes get its memory (may be NULL). */
int model_backend_cuda_available(size_t *free_bytes, size_t *total_bytes);
/* Whether device d will run on the CPU backend: CPU, or AUTO without a CUDA
 * device (then a model can be loaded in the CPU layout, model_load_opts). */
int model_device_is_cpu(model_device d);
/* Device bytes the CUDA backend would need for m's weights. */
size_t model_backend_cuda_weight_bytes(const model *m);

/* Convenience wrappers over be->ops. */
static inline int model_backend_forward(model_backend *be, kv_cache *kv, const model_batch *b,
                                        int *n_out) {
    return be->ops->forward(be, kv, b, n_out);
}
static inline int model_backend_logits(model_backend *be, int row, const float **out) {
    return be->ops->logits(be, row, out);
}
static inline int model_backend_sample(model_backend *be, const model_sample_job *jobs, int n,
                                       int32_t *ids) {
    return be->ops->sample(be, jobs, n, ids);
}
/* 1 when the backend gives hidden states (embeddings). */
static inline int model_backend_has_hidden(const model_backend *be) {
    return be->ops->hidden != NULL;
}
static inline int model_backend_hidden(model_backend *be, const float **rows, int *n_rows) {
    if (!be->ops->hidden)
        return BRISK_EUNSUPPORTED;
    return be->ops->hidden(be, rows, n_rows);
}
static inline void model_backend_set_trace(model_backend *be, struct model_recipe *trace) {
    be->ops->set_trace(be, trace);
}
static inline int model_backend_kv_create(model_backend *be, const kv_cache_config *cfg,
                                          kv_cache **out) {
    return be->ops->kv_create(be, cfg, out);
}

#endif
