/* backend_cuda_internal.h - the CUDA backend's state, shared by its files:
 * backend_cuda.c (weights, scratch, create/free, the ops table),
 * backend_cuda_fwd.c (the forward pass, decode graphs, logits),
 * backend_cuda_sample.c (sampling on the GPU) and backend_cuda_kv.c (the
 * K/V pool). Only those files include it; everything else sees backend.h.
 * Built only with BRISK_HAVE_CUDA. */
#ifndef BRISK_BACKEND_CUDA_INTERNAL_H
#define BRISK_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_moe.cuh"
#include "kernels/cuda/kern_cuda_sample.cuh"
#include "models/backend.h"
#include "models/model_recipe.h"

#define CUDA_RESERVE_BYTES ((size_t)512 << 20) /* graphs, cuBLAS, edits, masks: not KV pool */
#define CUDA_MAX_BUCKETS 48

typedef struct cuda_layer {
    float *attn_norm, *ffn_norm;
    float *bq, *bk, *bv;    /* qwen2 (apart only when not all three are there), else NULL */
    float *bqkv;            /* bq | bk | bv as one [q_dim + 2 kv_dim] when all three are */
    float *q_norm, *k_norm; /* qwen3, gemma3: [head_dim] per-head RMSNorm weights, else NULL */
    float *post_attn_norm, *post_ffn_norm; /* has_post_norms: [dim], else NULL */
    int window;                            /* sliding window of this layer, 0: global */
    float rope_base, rope_freq_scale;      /* this layer's RoPE base and linear scale */
    float attn_softcap;                    /* > 0: attention-logit soft-capping, else 0 */
    /* The projections that read one input are one weight each, rows in
     * order: wqkv = wq | wk | wv ([q_dim + 2 kv_dim][dim]), w_gate_up =
     * w_gate | w_up ([2 hidden][dim]); one matmul a step (see qkv, hgu). */
    kern_cuda_weight wqkv, wo, w_gate_up, w_down;
    /* A mixture of experts (model_config.n_expert > 0; then w_gate_up and
     * w_down are empty): the router in f32 ([n_expert][dim], as the CPU
     * routes) and the experts' stacks as the host holds them
     * (model_matrix_expert), each in the backend's weight format. */
    float *router;
    kern_cuda_weight exps_gate, exps_up, exps_down;
} cuda_layer;

typedef struct cuda_graph {
    int n;                /* bucket: runs (sequences) the graph runs */
    int run;              /* rows per run: 1 decode; > 1 short runs (speculative verification) */
    cudaGraphExec_t exec; /* NULL until captured */
    int warm;             /* 1 once a step of this size ran (eagerly): the next is captured */
} cuda_graph;

typedef struct cuda_backend {
    model_backend base;
    model_backend_opts o;
    model_config c;
    cudaStream_t stream;
    kern_cuda_matmul_ctx *mm;
    kern_cuda_wfmt wfmt;
    char gpu_name[128];
    size_t weight_bytes;

    /* weights */
    uint16_t *tok_embd; /* f16 [n_vocab][dim] */
    float *output_norm, *rope_freqs;
    kern_cuda_weight output;
    int output_shared; /* output.data is tok_embd (tied, F16) */
    cuda_layer *layers;

    /* activations, [T][...] with T = o.max_batch_tokens */
    float *x, *xb, *xb2, *att, *hb, *xout, *logits;
    float *qkv;    /* [T][qkv_ld]: the QKV step's q | k | v rows; biases, q/k norms and
                         k's RoPE work in place there, KV_STORE reads k and v from them */
    size_t qkv_ld; /* q_dim + 2 kv_dim */
    float *k, *v;  /* views: qkv + q_dim and qkv + q_dim + kv_dim (row stride qkv_ld),
                         not allocations */
    float *q;      /* [T][q_dim]: q after RoPE (written out of qkv), the attention's input */
    float *hgu;    /* [T][2 hidden]: the GATE_UP step's gate | up rows; ACT reads them into hb */
    void *mm_ws;
    size_t mm_ws_bytes;
    float *attn_ws;
    size_t attn_ws_bytes;
    void *moe_ws; /* a mixture of experts: kern_cuda_moe_ffn's workspace for T tokens */
    size_t moe_ws_bytes;

    /* per-step inputs: device arrays and their pinned host staging. The KV
     * slots and block tables are per group of the pool (n_groups): a pass
     * over n rows and r runs reads group g's slots at d_slots + g * n and its
     * tables at d_bt + g * r * max_blocks (cuda_stage). */
    int32_t *d_tok, *d_pos, *d_out_idx, *d_runs, *d_bt, *d_ctx;
    int64_t *d_slots;
    int32_t *h_tok, *h_pos, *h_out_idx, *h_runs, *h_bt, *h_ctx;
    int64_t *h_slots;
    int max_blocks; /* block-table row length */
    int *out_map;   /* logits row r of the last forward -> physical row of c->logits */
    int n_out;

    /* sampling */
    kern_cuda_sample_row *d_rows, *h_rows;
    int32_t *d_ids, *h_ids;
    int32_t *d_edit_ids, *h_edit_ids;
    float *d_edit_vals, *h_edit_vals;
    int edit_cap;
    uint32_t *d_mask, *h_mask; /* constrained rows' masks, one pinned upload a step; grown */
    size_t mask_cap;           /* words (backend_cuda_sample.c frees them) */
    /* Draft-model verification (speculative decoding): the draft's
     * distributions of a step's draft rows (q_cap rows of n_vocab floats)
     * and each row's p(draft_id); made on the first such row, freed with
     * the masks. */
    float *d_q, *h_q, *d_pout, *h_pout;
    int q_cap;
    int sample_rows; /* rows one sample call takes: o.max_sample_rows, else max_seqs */
    void *samp_ws;
    size_t samp_ws_bytes;
    float *h_row;    /* one downloaded logits row */
    int h_row_valid; /* which physical row h_row holds, or -1 */

    /* hidden states (ops.hidden), allocated by the first forward that wants them */
    float *d_hidden, *h_hidden;     /* [T][dim]: the wanted rows of xb, device and pinned host */
    int32_t *d_hid_idx, *h_hid_idx; /* [T]: which rows */
    int n_hidden;                   /* rows of the last forward */

    /* KV pool (kv_create), laid out as the host kv_cache says: one table per
     * layer group; grouped (sliding windows released), a block holds
     * layers_per_group layers, else every layer has its own run of blocks */
    uint8_t *k_pool, *v_pool;        /* bytes; f16 halves or int8/fp8 codes and scales */
    kern_kv_dtype kv_dtype;          /* f16, int8 or fp8 (kern_kv.h) */
    size_t kv_unit;                  /* bytes of a unit of the strides and bases (2, or 1) */
    size_t scale_off;                /* quantized: a layer-block's scale plane (bytes) */
    size_t block_stride, row_stride; /* units between block ids; values between rows */
    size_t slot_row;                 /* a slot's step per row: row_stride (f16), 1 (codes) */
    size_t *layer_base;              /* [n_layers]: units before the layer's rows of block 0 */
    const kv_cache *kv_books;        /* borrowed: the host books (copy sizes) */
    int *layer_group;                /* [n_layers]: the group whose tables address the layer */
    int n_groups;                    /* block tables per sequence */
    int max_runs; /* runs a batch may have: max_batch_tokens, max_seqs with groups (kv_create) */
    int n_copy;   /* layers one block holds (copy-on-write copies them) */
    size_t *copy_base; /* [n_copy]: where they lie in a block (group 0's bases) */
    int block_size, n_blocks;
    int kv_error; /* a failed copy-on-write copy, reported at the next forward */

    /* decode graphs */
    cuda_graph graphs[CUDA_MAX_BUCKETS];
    int n_graphs;
    int graphs_off;      /* --no-cuda-graphs, or a capture failed */
    model_recipe *trace; /* borrowed, [n_layers] (set_trace); passes run eagerly while set */
} cuda_backend;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            return rc_;                                                                            \
    } while (0)

/* Device memory of `bytes` (none for 0) at *p; *total (if given) grows by it. */
int model_cuda_dev_alloc(void **p, size_t bytes, size_t *total);
/* Pinned host memory (at least 1 byte); model_cuda_pinned_free(NULL) is a no-op. */
int model_cuda_pinned_alloc(void **p, size_t bytes);
void model_cuda_pinned_free(void *p);

/* Layer l's experts (a mixture of experts) as kern_cuda_moe_ffn takes them:
 * views of the layer's device arrays (backend_cuda.c). */
kern_cuda_moe model_cuda_moe_of(const cuda_backend *cb, int l);

/* The model_backend_ops entries the other files define (backend.h says
 * what each does). */
int model_cuda_forward(model_backend *be, kv_cache *kv, const model_batch *b, int *n_out);
int model_cuda_logits(model_backend *be, int row, const float **out);
int model_cuda_hidden(model_backend *be, const float **rows, int *n_rows);
int model_cuda_sample(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids);
/* Frees what sampling allocated on first use (the mask buffers). */
void model_cuda_sample_free(cuda_backend *cb);
int model_cuda_kv_create(model_backend *be, const kv_cache_config *cfg, kv_cache **out);
long long model_cuda_kv_budget(model_backend *be);

#endif /* BRISK_BACKEND_CUDA_INTERNAL_H */
