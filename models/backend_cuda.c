/* backend_cuda.c - the CUDA backend: weights uploaded once in F16 or INT8,
 * the K/V pool in device memory (f16, paged: the host keeps the books in
 * kv_cache), every op of the forward pass a kernel of kernels/cuda/ or a
 * cuBLAS call on one stream, sampling on the GPU, and decode steps replayed
 * from CUDA graphs captured per batch-size bucket.
 *
 * Per step the host uploads the batch's small arrays (tokens, positions, KV
 * slots, attention runs and block tables, the rows that want logits), runs
 * the pass, and waits once at the end; sample() sends the rows' settings and
 * reads back only token ids. Activations are f32 (as on the CPU), rounded
 * to f16 at the input of each matmul (W*A16); the KV cache is f16.
 *
 * Memory budget: weights, then scratch for max_batch_tokens tokens, then the KV
 * pool gets what --gpu-memory-utilization leaves (kv_budget), less a
 * reserve for graphs, cuBLAS and sampling edits. */
#include "brisk_config.h"

#if BRISK_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_attn_decode.cuh"
#include "kernels/cuda/kern_cuda_attn_prefill.cuh"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_embed.cuh"
#include "kernels/cuda/kern_cuda_gemma.cuh"
#include "kernels/cuda/kern_cuda_kv_store.cuh"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_rmsnorm.cuh"
#include "kernels/cuda/kern_cuda_rope.cuh"
#include "kernels/cuda/kern_cuda_sample.cuh"
#include "kernels/cuda/kern_cuda_silu.cuh"
#include "models/backend.h"
#include "models/model_recipe.h"

#define CUDA_RESERVE_BYTES ((size_t)512 << 20) /* graphs, cuBLAS, edits: kept out of the KV pool */
#define CUDA_MAX_BUCKETS 48

typedef struct cuda_layer {
    float *attn_norm, *ffn_norm;
    float *bq, *bk, *bv;    /* qwen2, else NULL */
    float *q_norm, *k_norm; /* qwen3, gemma3: [head_dim] per-head RMSNorm weights, else NULL */
    float *post_attn_norm, *post_ffn_norm; /* has_post_norms: [dim], else NULL */
    int window;                            /* sliding window of this layer, 0: global */
    float rope_base, rope_freq_scale;      /* this layer's RoPE base and linear scale */
    float attn_softcap;                    /* > 0: attention-logit soft-capping, else 0 */
    kern_cuda_weight wq, wk, wv, wo, w_gate, w_up, w_down;
} cuda_layer;

typedef struct cuda_graph {
    int n;                /* bucket: rows the graph runs */
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
    float *x, *xb, *xb2, *q, *k, *v, *att, *hb, *hb2, *xout, *logits;
    void *mm_ws;
    size_t mm_ws_bytes;
    float *attn_ws;
    size_t attn_ws_bytes;

    /* per-step inputs: device arrays and their pinned host staging */
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
    void *samp_ws;
    size_t samp_ws_bytes;
    float *h_row;    /* one downloaded logits row */
    int h_row_valid; /* which physical row h_row holds, or -1 */

    /* KV pool (kv_create) */
    uint16_t *k_pool, *v_pool;
    size_t layer_elems, block_stride, row_stride;
    int block_size, n_blocks;
    int kv_error; /* a failed copy-on-write copy, reported at the next forward */

    /* decode graphs */
    cuda_graph graphs[CUDA_MAX_BUCKETS];
    int n_graphs;
    int graphs_off;      /* --no-cuda-graphs, or a capture failed */
    model_recipe *trace; /* borrowed, [n_layers] (set_trace); passes run eagerly while set */
} cuda_backend;

/* ---- helpers ---------------------------------------------------------------- */

static int cuda_fail(char *err, size_t len, int rc, const char *what) {
    snprintf(err, len, "CUDA backend: %s: %s (%s)", what, brisk_strerror(rc),
             kern_cuda_last_error());
    return rc;
}

static int dev_alloc(void **p, size_t bytes, size_t *total) {
    *p = NULL;
    if (bytes == 0)
        return 0;
    int rc = kern_cuda_malloc(p, bytes);
    if (rc == 0 && total)
        *total += bytes;
    return rc;
}

static int pinned_alloc(void **p, size_t bytes) {
    *p = NULL;
    if (cudaMallocHost(p, bytes ? bytes : 1) != cudaSuccess) {
        *p = NULL;
        return BRISK_ENOMEM;
    }
    return 0;
}

static void pinned_free(void *p) {
    if (p)
        cudaFreeHost(p);
}

/* Uploads n floats into new device memory. */
static int upload_f32(float **out, const float *src, size_t n, size_t *total) {
    *out = NULL;
    if (!src)
        return 0;
    int rc = dev_alloc((void **)out, n * sizeof(float), total);
    if (rc == 0)
        rc = kern_cuda_upload(*out, src, n * sizeof(float), NULL);
    if (rc == 0)
        rc = kern_cuda_sync(NULL);
    return rc;
}

/* The embedding table as f16 rows, converted on the host a slice at a time. */
static int upload_embedding(cuda_backend *cb, const model_matrix *m) {
    int dim = m->n_in, rows_per = 4096;
    size_t row_bytes = kern_row_bytes(m->type, dim);
    float *f = malloc((size_t)rows_per * dim * sizeof(float));
    uint16_t *h = malloc((size_t)rows_per * dim * sizeof(uint16_t));
    int rc = f && h
                 ? dev_alloc((void **)&cb->tok_embd, (size_t)m->n_out * dim * 2, &cb->weight_bytes)
                 : BRISK_ENOMEM;
    for (int r0 = 0; rc == 0 && r0 < m->n_out; r0 += rows_per) {
        int n = m->n_out - r0 < rows_per ? m->n_out - r0 : rows_per;
        for (int r = 0; r < n; r++)
            kern_dequantize_row(m->type, (const uint8_t *)m->data + (size_t)(r0 + r) * row_bytes,
                                f + (size_t)r * dim, dim);
        kern_quantize_row(KERN_TYPE_F16, f, h, (int64_t)n * dim);
        rc = kern_cuda_upload(cb->tok_embd + (size_t)r0 * dim, h, (size_t)n * dim * 2, NULL);
        if (rc == 0)
            rc = kern_cuda_sync(NULL); /* h is reused */
    }
    free(f);
    free(h);
    return rc;
}

/* INT8 weights come in blocks of 32 along each row: a matrix whose rows are
 * not a multiple of 32 long (stories260K's FFN of 172) is kept f16, as the
 * CPU keeps such rows in f32 (model_target_type). kern_cuda_matmul picks
 * its kernel from each weight's own format. */
static kern_cuda_wfmt matrix_wfmt(kern_cuda_wfmt f, int n_in) {
    return f == KERN_CUDA_W_INT8 && n_in % 32 != 0 ? KERN_CUDA_W_F16 : f;
}

static int upload_matrix(cuda_backend *cb, kern_cuda_weight *w, const model_matrix *m) {
    kern_cuda_wfmt f = matrix_wfmt(cb->wfmt, m->n_in);
    int rc = kern_cuda_weight_upload(w, f, m->type, m->data, m->n_out, m->n_in);
    if (rc == 0)
        cb->weight_bytes += kern_cuda_weight_bytes(f, m->n_out, m->n_in);
    return rc;
}

/* Any block type (Q4_*, Q5_*, Q8_*, the K-quants, IQ4_*): a quantized file
 * runs int8 weights by default, a float one f16. */
static int is_quantized(kern_type t) {
    return kern_type_block_size(t) > 1;
}

static kern_cuda_wfmt pick_wfmt(const model *m, model_weights_fmt want) {
    if (want == MODEL_WEIGHTS_F16)
        return KERN_CUDA_W_F16;
    if (want == MODEL_WEIGHTS_INT8)
        return KERN_CUDA_W_INT8;
    return is_quantized(model_get_weights(m)->layers[0].wq.type) ? KERN_CUDA_W_INT8
                                                                 : KERN_CUDA_W_F16;
}

/* ---- model_backend_cuda_available / _weight_bytes ------------------------ */

int model_backend_cuda_available(size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes)
        *free_bytes = 0;
    if (total_bytes)
        *total_bytes = 0;
    if (kern_cuda_device_count() <= 0)
        return 0;
    size_t f = 0, t = 0;
    if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess)
        return 0;
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return 1;
}

size_t model_backend_cuda_weight_bytes(const model *m) {
    const model_config *c = model_get_config(m);
    const model_weights *w = model_get_weights(m);
    kern_cuda_wfmt f = pick_wfmt(m, MODEL_WEIGHTS_AUTO);
    size_t b = (size_t)c->n_vocab * c->dim * 2;
    if (!c->tied_output || f != KERN_CUDA_W_F16)
        b += kern_cuda_weight_bytes(matrix_wfmt(f, c->dim), c->n_vocab, c->dim);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &w->layers[l];
        const model_matrix *ms[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                    &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            b += kern_cuda_weight_bytes(matrix_wfmt(f, ms[i]->n_in), ms[i]->n_out, ms[i]->n_in);
        b += 2 * (size_t)c->dim * sizeof(float);
    }
    return b;
}

/* ---- forward ----------------------------------------------------------------- */

/* Fills the host staging for the batch: tokens, positions, KV slots, runs
 * (consecutive tokens of one sequence at consecutive positions) with their
 * block tables and context lengths, and the rows that want logits.
 * Returns the number of runs; *max_run gets the longest. */
static int cuda_stage(cuda_backend *cb, kv_cache *kv, const model_batch *b, int *max_run,
                      int *n_want) {
    int n = b->n_tokens, n_runs = 0, bs = cb->block_size, mb = cb->max_blocks;
    *max_run = 0;
    *n_want = 0;
    for (int i = 0; i < n; i++) {
        const int32_t *table = kv_cache_seq_blocks(kv, b->seq[i]);
        int pos = b->pos[i];
        cb->h_tok[i] = b->tokens[i];
        cb->h_pos[i] = pos;
        cb->h_slots[i] = (int64_t)table[pos / bs] * (int64_t)cb->block_stride +
                         (int64_t)(pos % bs) * (int64_t)cb->row_stride;
        int32_t *last = n_runs ? &cb->h_runs[3 * (n_runs - 1)] : NULL;
        if (last && b->seq[i] == b->seq[i - 1] && pos == b->pos[i - 1] + 1) {
            last[1]++;
        } else {
            int32_t *r = &cb->h_runs[3 * n_runs];
            r[0] = i;
            r[1] = 1;
            r[2] = pos;
            int nb = kv_cache_seq_n_blocks(kv, b->seq[i]);
            memcpy(cb->h_bt + (size_t)n_runs * mb, table, (size_t)nb * sizeof(int32_t));
            memset(cb->h_bt + (size_t)n_runs * mb + nb, 0, (size_t)(mb - nb) * sizeof(int32_t));
            n_runs++;
        }
        int want = b->want_logits ? b->want_logits[i] != 0 : i == n - 1;
        if (want)
            cb->h_out_idx[(*n_want)++] = i;
    }
    for (int r = 0; r < n_runs; r++) {
        int32_t *run = &cb->h_runs[3 * r];
        cb->h_ctx[r] = run[2] + run[1];
        if (run[1] > *max_run)
            *max_run = run[1];
    }
    return n_runs;
}

/* Decode rows past n (a graph's bucket): no token of theirs is stored
 * (slot -1), their attention is empty (length 0), their logits unused. */
static void cuda_pad(cuda_backend *cb, int n, int bucket) {
    for (int i = n; i < bucket; i++) {
        cb->h_tok[i] = 0;
        cb->h_pos[i] = 0;
        cb->h_slots[i] = -1;
        cb->h_ctx[i] = 0;
        cb->h_out_idx[i] = i;
        memset(cb->h_bt + (size_t)i * cb->max_blocks, 0, (size_t)cb->max_blocks * sizeof(int32_t));
        int32_t *run = &cb->h_runs[3 * i];
        run[0] = i, run[1] = 1, run[2] = 0;
    }
}

static int cuda_upload_step(cuda_backend *cb, int n, int n_runs, int n_want) {
    cudaStream_t s = cb->stream;
    int rc = kern_cuda_upload(cb->d_tok, cb->h_tok, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_pos, cb->h_pos, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_slots, cb->h_slots, (size_t)n * sizeof(int64_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_runs, cb->h_runs, (size_t)n_runs * 3 * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_ctx, cb->h_ctx, (size_t)n_runs * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_bt, cb->h_bt, (size_t)n_runs * cb->max_blocks * sizeof(int32_t),
                              s);
    if (!rc && n_want > 0)
        rc = kern_cuda_upload(cb->d_out_idx, cb->h_out_idx, (size_t)n_want * sizeof(int32_t), s);
    return rc;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            return rc_;                                                                            \
    } while (0)

/* Step `step` of layer l over n rows (cuda_pass's arguments). *resid: a
 * RESIDUAL is pending, for the next norm of x to add. */
static int cuda_step(cuda_backend *cb, int l, int step, int n, int n_runs, int max_run, int decode,
                     int *resid) {
    const model_config *c = &cb->c;
    const cuda_layer *L = &cb->layers[l];
    cudaStream_t s = cb->stream;
    const int dim = c->dim, q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    uint16_t *kp = cb->k_pool + (size_t)l * cb->layer_elems;
    uint16_t *vp = cb->v_pool + (size_t)l * cb->layer_elems;
    const float *pending = *resid ? cb->xb2 : NULL;
    switch (step) {
    case MODEL_STEP_ATTN_NORM: /* x += a pending block output; xb = norm(x) */
        *resid = 0;
        return kern_cuda_rmsnorm(cb->xb, cb->x, pending, L->attn_norm, n, dim, c->norm_eps, s);
    case MODEL_STEP_QKV:
        TRY(kern_cuda_matmul(cb->mm, &L->wq, cb->xb, n, cb->q, (size_t)q_dim, cb->mm_ws,
                             cb->mm_ws_bytes));
        TRY(kern_cuda_matmul(cb->mm, &L->wk, cb->xb, n, cb->k, (size_t)kv_dim, cb->mm_ws,
                             cb->mm_ws_bytes));
        return kern_cuda_matmul(cb->mm, &L->wv, cb->xb, n, cb->v, (size_t)kv_dim, cb->mm_ws,
                                cb->mm_ws_bytes);
    case MODEL_STEP_QKV_BIAS:
        TRY(kern_cuda_add_bias(cb->q, (size_t)q_dim, L->bq, n, q_dim, s));
        TRY(kern_cuda_add_bias(cb->k, (size_t)kv_dim, L->bk, n, kv_dim, s));
        return kern_cuda_add_bias(cb->v, (size_t)kv_dim, L->bv, n, kv_dim, s);
    case MODEL_STEP_QK_NORM: /* each head of q and k as a row of head_dim, in place */
        TRY(kern_cuda_rmsnorm(cb->q, cb->q, NULL, L->q_norm, n * c->n_heads, c->head_dim,
                              c->norm_eps, s));
        return kern_cuda_rmsnorm(cb->k, cb->k, NULL, L->k_norm, n * c->n_kv_heads, c->head_dim,
                                 c->norm_eps, s);
    case MODEL_STEP_ROPE:
        TRY(kern_cuda_rope_ex(cb->q, (size_t)q_dim, n, c->n_heads, c->head_dim, c->n_rot, cb->d_pos,
                              L->rope_base, L->rope_freq_scale, cb->rope_freqs, c->rope_attn_factor,
                              c->rope_mode, s));
        return kern_cuda_rope_ex(cb->k, (size_t)kv_dim, n, c->n_kv_heads, c->head_dim, c->n_rot,
                                 cb->d_pos, L->rope_base, L->rope_freq_scale, cb->rope_freqs,
                                 c->rope_attn_factor, c->rope_mode, s);
    case MODEL_STEP_KV_STORE:
        return kern_cuda_kv_store(kp, vp, cb->k, cb->v, (size_t)kv_dim, cb->d_slots, n, kv_dim, s);
    case MODEL_STEP_ATTENTION: /* the scale is 1 / sqrt(head_dim) unless the family says */
        if (decode)
            return kern_cuda_attn_decode_ex(
                cb->att, cb->q, kp, vp, cb->d_bt, cb->max_blocks, cb->d_ctx, n, c->n_heads,
                c->n_kv_heads, c->head_dim, cb->block_size, cb->block_stride, cb->row_stride,
                c->attn_scale, L->window, L->attn_softcap, cb->attn_ws, cb->attn_ws_bytes, s);
        return kern_cuda_attn_prefill_ex(
            cb->att, cb->q, (size_t)q_dim, kp, vp, cb->d_bt, cb->max_blocks, cb->d_runs, n_runs,
            max_run, c->n_heads, c->n_kv_heads, c->head_dim, cb->block_size, cb->block_stride,
            cb->row_stride, c->attn_scale, L->window, L->attn_softcap, s);
    case MODEL_STEP_ATTN_OUT:
        return kern_cuda_matmul(cb->mm, &L->wo, cb->att, n, cb->xb2, (size_t)dim, cb->mm_ws,
                                cb->mm_ws_bytes);
    case MODEL_STEP_POST_ATTN_NORM: /* the block's output normalised before the add */
        return kern_cuda_rmsnorm(cb->xb2, cb->xb2, NULL, L->post_attn_norm, n, dim, c->norm_eps, s);
    case MODEL_STEP_RESIDUAL: /* added by the next norm of x */
        if (*resid)
            return BRISK_EUNSUPPORTED; /* two in a row: no recipe makes that */
        *resid = 1;
        return 0;
    case MODEL_STEP_FFN_NORM:
        *resid = 0;
        return kern_cuda_rmsnorm(cb->xb, cb->x, pending, L->ffn_norm, n, dim, c->norm_eps, s);
    case MODEL_STEP_GATE_UP:
        TRY(kern_cuda_matmul(cb->mm, &L->w_gate, cb->xb, n, cb->hb, (size_t)c->hidden_dim,
                             cb->mm_ws, cb->mm_ws_bytes));
        return kern_cuda_matmul(cb->mm, &L->w_up, cb->xb, n, cb->hb2, (size_t)c->hidden_dim,
                                cb->mm_ws, cb->mm_ws_bytes);
    case MODEL_STEP_ACT:
        if (c->act == MODEL_ACT_GELU_TANH)
            return kern_cuda_gelu_mul(cb->hb, cb->hb, cb->hb2, (size_t)n * c->hidden_dim, s);
        return kern_cuda_silu_mul(cb->hb, cb->hb, cb->hb2, (size_t)n * c->hidden_dim, s);
    case MODEL_STEP_DOWN:
        return kern_cuda_matmul(cb->mm, &L->w_down, cb->hb, n, cb->xb2, (size_t)dim, cb->mm_ws,
                                cb->mm_ws_bytes);
    case MODEL_STEP_POST_FFN_NORM:
        return kern_cuda_rmsnorm(cb->xb2, cb->xb2, NULL, L->post_ffn_norm, n, dim, c->norm_eps, s);
    }
    return BRISK_EUNSUPPORTED;
}

/* The pass itself: every kernel of one forward over n rows, on cb->stream,
 * reading only device arrays (so it can be captured into a graph). decode:
 * every run is one token (n_runs == n) and uses the split-K decode kernel;
 * otherwise the tiled prefill kernel. n_gather rows (d_out_idx) get logits. */
static int cuda_pass(cuda_backend *cb, int n, int n_runs, int max_run, int decode, int n_gather) {
    const model_config *c = &cb->c;
    cudaStream_t s = cb->stream;
    const int dim = c->dim;
    TRY(kern_cuda_embedding(cb->x, cb->tok_embd, KERN_TYPE_F16, c->n_vocab, dim, cb->d_tok, n, NULL,
                            s));
    if (c->embd_scale != 0.0f) /* gemma: embeddings times sqrt(dim) */
        TRY(kern_cuda_scale(cb->x, (size_t)n * dim, c->embd_scale, s));
    /* The layers as their recipes say (model_recipe.h). RESIDUAL runs inside
     * the next norm of x (kern_cuda_rmsnorm adds its residual first), so it
     * leaves the residual pending until then. */
    int resid = 0;
    for (int l = 0; l < c->n_layers; l++) {
        model_recipe r;
        model_layer_recipe(c, &model_get_weights(cb->base.m)->layers[l], &r);
        for (int i = 0; i < r.n; i++) {
            TRY(cuda_step(cb, l, r.step[i], n, n_runs, max_run, decode, &resid));
            model_recipe_trace(cb->trace, l, (model_step)r.step[i]);
        }
    }
    /* x += the last block's output; the final norm; then only the rows that
     * want logits (gathered as an f32 "embedding" of xb) meet the output. */
    TRY(kern_cuda_rmsnorm(cb->xb, cb->x, resid ? cb->xb2 : NULL, cb->output_norm, n, dim,
                          c->norm_eps, s));
    if (n_gather == 0)
        return 0;
    TRY(kern_cuda_embedding(cb->xout, cb->xb, KERN_TYPE_F32, n, dim, cb->d_out_idx, n_gather, NULL,
                            s));
    TRY(kern_cuda_matmul(cb->mm, &cb->output, cb->xout, n_gather, cb->logits, (size_t)c->n_vocab,
                         cb->mm_ws, cb->mm_ws_bytes));
    if (c->final_softcap > 0.0f) /* gemma2: logits -> cap * tanh(logit / cap) */
        TRY(kern_cuda_softcap(cb->logits, (size_t)n_gather * c->n_vocab, c->final_softcap, s));
    return 0;
}

/* The smallest bucket holding n decode rows: 1, 2, 4, 8, then multiples of
 * 8 to 64, of 16 to 256, of 32 beyond (vLLM's capture sizes are alike). */
static int cuda_bucket(int n) {
    if (n <= 1)
        return 1;
    if (n <= 2)
        return 2;
    if (n <= 4)
        return 4;
    if (n <= 64)
        return (n + 7) / 8 * 8;
    if (n <= 256)
        return (n + 15) / 16 * 16;
    return (n + 31) / 32 * 32;
}

static cuda_graph *cuda_graph_for(cuda_backend *cb, int bucket) {
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].n == bucket)
            return &cb->graphs[i];
    if (cb->n_graphs == CUDA_MAX_BUCKETS)
        return NULL;
    cuda_graph *g = &cb->graphs[cb->n_graphs++];
    g->n = bucket;
    g->exec = NULL;
    g->warm = 0;
    return g;
}

/* Captures the decode pass for g->n rows. On failure the stream is left
 * out of capture mode and graphs are turned off (eager from then on). */
static int cuda_capture(cuda_backend *cb, cuda_graph *g) {
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1;
    int rc = cuda_pass(cb, g->n, g->n, 1, 1, g->n);
    cudaError_t e = cudaStreamEndCapture(cb->stream, &graph);
    if (rc != 0 || e != cudaSuccess || !graph) {
        if (graph)
            cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return -1;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

static int cuda_forward(model_backend *be, kv_cache *kv, const model_batch *b, int *n_out) {
    cuda_backend *cb = (cuda_backend *)be;
    *n_out = 0;
    cb->n_out = 0;
    cb->h_row_valid = -1;
    if (!cb->k_pool)
        return BRISK_EINVAL; /* kv did not come from kv_create */
    if (b->want_hidden)
        return BRISK_EUNSUPPORTED; /* no hidden states on this backend (ops.hidden NULL) */
    if (cb->kv_error) {
        int rc = cb->kv_error;
        cb->kv_error = 0;
        return rc;
    }
    int rc = model_batch_validate(be->m, kv, b, cb->o.max_batch_tokens, cb->o.max_ctx);
    if (rc < 0)
        return rc;
    int n = b->n_tokens, max_run = 0, n_want = 0;
    int n_runs = cuda_stage(cb, kv, b, &max_run, &n_want);
    int decode = max_run == 1 && n <= cb->o.max_seqs;
    cuda_graph *g = NULL;
    if (decode && !cb->graphs_off && !cb->trace) {
        int bucket = cuda_bucket(n);
        if (bucket <= cb->o.max_seqs && bucket <= cb->o.max_batch_tokens)
            g = cuda_graph_for(cb, bucket);
    }
    if (g) {
        /* The graph runs the whole bucket and computes logits for every
         * row; the wanted ones are found through out_map. */
        for (int r = 0; r < n_want; r++)
            cb->out_map[r] = cb->h_out_idx[r];
        cuda_pad(cb, n, g->n);
        for (int i = 0; i < g->n; i++)
            cb->h_out_idx[i] = i;
        rc = cuda_upload_step(cb, g->n, g->n, g->n);
        /* A bucket's first step runs eagerly, so every kernel (and cuBLAS's
         * first GEMM) is loaded and set up outside a capture; the second is
         * captured. */
        if (rc == 0 && !g->exec && g->warm && cuda_capture(cb, g) != 0) {
            BRISK_WARN(
                "cuda: capturing a decode graph of %d rows failed (%s); running without graphs",
                g->n, kern_cuda_last_error());
            cb->graphs_off = 1;
            g = NULL;
        }
        if (rc == 0 && g && g->exec) {
            cudaError_t le = cudaGraphLaunch(g->exec, cb->stream);
            if (le != cudaSuccess) {
                BRISK_ERROR("cuda: cudaGraphLaunch (%d rows): %s", g->n, cudaGetErrorString(le));
                (void)cudaGetLastError();
                rc = BRISK_EIO;
            }
        } else if (rc == 0 && g) {
            rc = cuda_pass(cb, g->n, g->n, 1, 1, g->n); /* the bucket's first step: eager */
        }
        if (rc == 0 && !g)
            rc = cuda_pass(cb, n, n, 1, 1, n); /* the capture failed: eager */
        if (g)
            g->warm = 1;
    } else {
        for (int r = 0; r < n_want; r++)
            cb->out_map[r] = r;
        rc = cuda_upload_step(cb, n, n_runs, n_want);
        if (rc == 0)
            rc = cuda_pass(cb, n, n_runs, max_run, decode, n_want);
    }
    if (rc == 0)
        rc = kern_cuda_sync(cb->stream);
    if (rc < 0) {
        BRISK_ERROR("cuda: forward failed: %s", kern_cuda_last_error());
        return rc;
    }
    cb->n_out = n_want;
    *n_out = n_want;
    return 0;
}

static int cuda_logits(model_backend *be, int row, const float **out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (row < 0 || row >= cb->n_out)
        return BRISK_ERANGE;
    int phys = cb->out_map[row];
    if (cb->h_row_valid != phys) {
        size_t nv = (size_t)cb->c.n_vocab;
        int rc = kern_cuda_download(cb->h_row, cb->logits + (size_t)phys * nv, nv * sizeof(float),
                                    cb->stream);
        if (rc == 0)
            rc = kern_cuda_sync(cb->stream);
        if (rc < 0)
            return rc;
        cb->h_row_valid = phys;
    }
    *out = cb->h_row;
    return 0;
}

/* ---- sampling ------------------------------------------------------------------ */

static int cuda_edits_reserve(cuda_backend *cb, int need) {
    if (need <= cb->edit_cap)
        return 0;
    int cap = cb->edit_cap ? cb->edit_cap : 4096;
    while (cap < need)
        cap *= 2;
    kern_cuda_free(cb->d_edit_ids);
    kern_cuda_free(cb->d_edit_vals);
    pinned_free(cb->h_edit_ids);
    pinned_free(cb->h_edit_vals);
    cb->d_edit_ids = NULL, cb->d_edit_vals = NULL, cb->h_edit_ids = NULL, cb->h_edit_vals = NULL;
    cb->edit_cap = 0;
    int rc = kern_cuda_malloc((void **)&cb->d_edit_ids, (size_t)cap * sizeof(int32_t));
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->d_edit_vals, (size_t)cap * sizeof(float));
    if (!rc)
        rc = pinned_alloc((void **)&cb->h_edit_ids, (size_t)cap * sizeof(int32_t));
    if (!rc)
        rc = pinned_alloc((void **)&cb->h_edit_vals, (size_t)cap * sizeof(float));
    if (!rc)
        cb->edit_cap = cap;
    return rc;
}

/* Appends a job's edit list (the sampler's own: models/sampler.h) to the
 * upload arrays and points its row at the two parts. */
static void cuda_job_edits(cuda_backend *cb, const model_sample_edits *e, kern_cuda_sample_row *r,
                           int *n_edits) {
    int n = e->n_bias + e->n_pen;
    memcpy(cb->h_edit_ids + *n_edits, e->ids, (size_t)n * sizeof *e->ids);
    memcpy(cb->h_edit_vals + *n_edits, e->vals, (size_t)n * sizeof *e->vals);
    r->bias_first = *n_edits;
    r->n_bias = e->n_bias;
    r->pen_first = *n_edits + e->n_bias;
    r->n_pen = e->n_pen;
    *n_edits += n;
}

static int cuda_sample_device(cuda_backend *cb, const model_sample_job *jobs, int n, int32_t *ids);

/* Rows whose sampler bans tokens or holds a grammar's mask are sampled on
 * the host, from the row's logits, by the CPU's sampler (the same code the
 * CPU backend runs); the others in one kernel. */
static int cuda_sample(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0)
        return 0;
    if (n > cb->o.max_seqs)
        return BRISK_ERANGE;
    int n_host = 0;
    for (int i = 0; i < n; i++)
        n_host += model_sampler_constrained(jobs[i].sampler);
    if (n_host == 0)
        return cuda_sample_device(cb, jobs, n, ids);
    model_sample_job *dev = malloc((size_t)n * sizeof *dev);
    int *where = malloc((size_t)n * sizeof *where);
    int rc = dev && where ? 0 : BRISK_ENOMEM, n_dev = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!model_sampler_constrained(jobs[i].sampler)) {
            where[n_dev] = i;
            dev[n_dev++] = jobs[i];
            continue;
        }
        const float *raw = NULL;
        rc = cuda_logits(be, jobs[i].row, &raw);
        if (rc == 0) {
            /* h_row is scratch: the sampler edits it, so the cached row is gone */
            ids[i] = model_sampler_sample(jobs[i].sampler, cb->h_row, jobs[i].hist, jobs[i].n_hist);
            cb->h_row_valid = -1;
            rc = ids[i] < 0 ? ids[i] : 0;
        }
    }
    if (rc == 0 && n_dev > 0) {
        int32_t *got = malloc((size_t)n_dev * sizeof *got);
        rc = got ? cuda_sample_device(cb, dev, n_dev, got) : BRISK_ENOMEM;
        for (int k = 0; rc == 0 && k < n_dev; k++)
            ids[where[k]] = got[k];
        free(got);
    }
    free(dev);
    free(where);
    return rc;
}

static int cuda_sample_device(cuda_backend *cb, const model_sample_job *jobs, int n, int32_t *ids) {
    /* Every job's edit list first (each sampler holds its own), then room
     * for all of them: growing the upload arrays drops their contents. */
    model_sample_edits *edits = malloc((size_t)n * sizeof *edits);
    if (!edits)
        return BRISK_ENOMEM;
    long need = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (jobs[i].row < 0 || jobs[i].row >= cb->n_out)
            rc = BRISK_ERANGE;
        else
            rc = model_sampler_edits(jobs[i].sampler, jobs[i].hist, jobs[i].n_hist, &edits[i]);
        need += rc == 0 ? edits[i].n_bias + edits[i].n_pen : 0;
    }
    if (rc == 0 && need > 0x7fffffffL)
        rc = BRISK_ERANGE;
    if (rc == 0)
        rc = cuda_edits_reserve(cb, (int)need);
    if (rc < 0) {
        free(edits);
        return rc;
    }
    int n_edits = 0;
    for (int i = 0; i < n; i++) {
        const model_sample_job *j = &jobs[i];
        const model_sampling *p = model_sampler_params(j->sampler);
        kern_cuda_sample_row *r = &cb->h_rows[i];
        memset(r, 0, sizeof *r);
        r->logit_row = cb->out_map[j->row];
        r->temperature = p->temperature;
        r->top_k = p->top_k;
        r->top_p = p->top_p;
        r->min_p = p->min_p;
        r->repetition_penalty = p->repetition_penalty;
        r->presence_penalty = p->presence_penalty;
        r->frequency_penalty = p->frequency_penalty;
        /* One draw per sampled token, as the CPU sampler makes. */
        r->u = p->temperature > 0.0f ? model_sampler_next_uniform(j->sampler) : 0.0;
        cuda_job_edits(cb, &edits[i], r, &n_edits);
    }
    free(edits);
    cudaStream_t s = cb->stream;
    rc = kern_cuda_upload(cb->d_rows, cb->h_rows, (size_t)n * sizeof *cb->h_rows, s);
    if (!rc && n_edits > 0) {
        rc = kern_cuda_upload(cb->d_edit_ids, cb->h_edit_ids, (size_t)n_edits * sizeof(int32_t), s);
        if (!rc)
            rc = kern_cuda_upload(cb->d_edit_vals, cb->h_edit_vals, (size_t)n_edits * sizeof(float),
                                  s);
    }
    if (!rc)
        rc = kern_cuda_sample(cb->d_ids, cb->logits, cb->o.max_batch_tokens, cb->c.n_vocab,
                              cb->d_rows, n, n_edits ? cb->d_edit_ids : NULL,
                              n_edits ? cb->d_edit_vals : NULL, n_edits, cb->samp_ws,
                              cb->samp_ws_bytes, s);
    if (!rc)
        rc = kern_cuda_download(cb->h_ids, cb->d_ids, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_sync(s);
    if (rc < 0) {
        BRISK_ERROR("cuda: sampling failed: %s", kern_cuda_last_error());
        return rc;
    }
    memcpy(ids, cb->h_ids, (size_t)n * sizeof(int32_t));
    return 0;
}

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

static int cuda_kv_create(model_backend *be, const kv_cache_config *cfg, kv_cache **out) {
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

static long long cuda_kv_budget(model_backend *be) {
    cuda_backend *cb = (cuda_backend *)be;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess)
        return 1;
    double budget =
        cb->o.gpu_memory_utilization * (double)t - (double)(t - f) - (double)CUDA_RESERVE_BYTES;
    return budget > 1.0 ? (long long)budget : 1; /* 1 byte: the engine reports too small a pool */
}

static double cuda_mem_bw(model_backend *be) {
    (void)be;
    double bw = 0.0;
    return kern_cuda_measure_copy_bw((size_t)1 << 30, 5, &bw) == 0 ? bw : 0.0;
}

static void cuda_describe(model_backend *be, char *buf, size_t len) {
    cuda_backend *cb = (cuda_backend *)be;
    snprintf(buf, len, "cuda: %s; weights %s %.2f GB; decode graphs %s", cb->gpu_name,
             cb->wfmt == KERN_CUDA_W_INT8 ? "int8 (W8A16)" : "f16", cb->weight_bytes / 1e9,
             cb->graphs_off ? "off" : "on");
}

/* ---- create / free ------------------------------------------------------------ */

static void cuda_free(model_backend *be) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!cb)
        return;
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].exec)
            cudaGraphExecDestroy(cb->graphs[i].exec);
    if (cb->layers) {
        for (int l = 0; l < cb->c.n_layers; l++) {
            cuda_layer *L = &cb->layers[l];
            kern_cuda_free(L->attn_norm), kern_cuda_free(L->ffn_norm);
            kern_cuda_free(L->bq), kern_cuda_free(L->bk), kern_cuda_free(L->bv);
            kern_cuda_free(L->q_norm), kern_cuda_free(L->k_norm);
            kern_cuda_free(L->post_attn_norm), kern_cuda_free(L->post_ffn_norm);
            kern_cuda_weight *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                      &L->w_gate, &L->w_up, &L->w_down};
            for (int i = 0; i < 7; i++)
                kern_cuda_weight_free(ws[i]);
        }
        free(cb->layers);
    }
    if (!cb->output_shared)
        kern_cuda_weight_free(&cb->output);
    kern_cuda_free(cb->tok_embd);
    kern_cuda_free(cb->output_norm);
    kern_cuda_free(cb->rope_freqs);
    void *dev[] = {cb->x,         cb->xb,     cb->xb2,        cb->q,           cb->k,
                   cb->v,         cb->att,    cb->hb,         cb->hb2,         cb->xout,
                   cb->logits,    cb->mm_ws,  cb->attn_ws,    cb->d_tok,       cb->d_pos,
                   cb->d_out_idx, cb->d_runs, cb->d_bt,       cb->d_ctx,       cb->d_slots,
                   cb->d_rows,    cb->d_ids,  cb->d_edit_ids, cb->d_edit_vals, cb->samp_ws,
                   cb->k_pool,    cb->v_pool};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        kern_cuda_free(dev[i]);
    void *pin[] = {cb->h_tok, cb->h_pos,      cb->h_out_idx,   cb->h_runs,
                   cb->h_bt,  cb->h_ctx,      cb->h_slots,     cb->h_rows,
                   cb->h_ids, cb->h_edit_ids, cb->h_edit_vals, cb->h_row};
    for (size_t i = 0; i < sizeof pin / sizeof pin[0]; i++)
        pinned_free(pin[i]);
    free(cb->out_map);
    kern_cuda_matmul_ctx_free(cb->mm);
    kern_cuda_stream_destroy(cb->stream);
    free(cb);
}

static void cuda_set_trace(model_backend *be, model_recipe *trace) {
    ((cuda_backend *)be)->trace = trace;
}

static const model_backend_ops cuda_ops = {
    .name = "cuda",
    .forward = cuda_forward,
    .logits = cuda_logits,
    .sample = cuda_sample,
    .kv_create = cuda_kv_create,
    .kv_budget = cuda_kv_budget,
    .mem_bw = cuda_mem_bw,
    .describe = cuda_describe,
    .set_trace = cuda_set_trace,
    .free = cuda_free,
};

static int cuda_upload_weights(cuda_backend *cb, const model *m) {
    const model_config *c = &cb->c;
    const model_weights *w = model_get_weights(m);
    TRY(upload_embedding(cb, &w->tok_embd));
    TRY(upload_f32(&cb->output_norm, w->output_norm, (size_t)c->dim, &cb->weight_bytes));
    /* Llama 3.1's divisors, or Phi-3's LongRoPE ones: long where the context
     * per sequence exceeds the original one (the CPU's rule, forward.c). */
    const float *freqs = w->rope_freqs                                      ? w->rope_freqs
                         : w->rope_long && cb->o.max_ctx > c->rope_orig_ctx ? w->rope_long
                                                                            : w->rope_short;
    if (freqs)
        TRY(upload_f32(&cb->rope_freqs, freqs, (size_t)c->n_rot / 2, &cb->weight_bytes));
    if (c->tied_output && cb->wfmt == KERN_CUDA_W_F16) {
        /* The f16 table is the output matrix too. */
        cb->output = (kern_cuda_weight){KERN_CUDA_W_F16, c->n_vocab, c->dim, cb->tok_embd, NULL};
        cb->output_shared = 1;
    } else {
        TRY(upload_matrix(cb, &cb->output, &w->output));
    }
    cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers);
    if (!cb->layers)
        return BRISK_ENOMEM;
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *H = &w->layers[l];
        cuda_layer *L = &cb->layers[l];
        TRY(upload_f32(&L->attn_norm, H->attn_norm, (size_t)c->dim, &cb->weight_bytes));
        TRY(upload_f32(&L->ffn_norm, H->ffn_norm, (size_t)c->dim, &cb->weight_bytes));
        TRY(upload_f32(&L->bq, H->bq, (size_t)q_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->bk, H->bk, (size_t)kv_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->bv, H->bv, (size_t)kv_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->q_norm, H->q_norm, (size_t)c->head_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->k_norm, H->k_norm, (size_t)c->head_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->post_attn_norm, H->post_attn_norm, (size_t)c->dim, &cb->weight_bytes));
        TRY(upload_f32(&L->post_ffn_norm, H->post_ffn_norm, (size_t)c->dim, &cb->weight_bytes));
        /* The kernels refuse a negative window or cap: out-of-range values
         * mean "none" here as on the CPU. */
        L->window = H->window > 0 ? H->window : 0;
        L->rope_base = H->rope_base;
        L->rope_freq_scale = H->rope_freq_scale != 0.0f ? H->rope_freq_scale : c->rope_freq_scale;
        L->attn_softcap = c->attn_softcap > 0.0f ? c->attn_softcap : 0.0f;
        TRY(upload_matrix(cb, &L->wq, &H->wq));
        TRY(upload_matrix(cb, &L->wk, &H->wk));
        TRY(upload_matrix(cb, &L->wv, &H->wv));
        TRY(upload_matrix(cb, &L->wo, &H->wo));
        TRY(upload_matrix(cb, &L->w_gate, &H->w_gate));
        TRY(upload_matrix(cb, &L->w_up, &H->w_up));
        TRY(upload_matrix(cb, &L->w_down, &H->w_down));
    }
    return 0;
}

static int cuda_alloc_scratch(cuda_backend *cb) {
    const model_config *c = &cb->c;
    size_t T = (size_t)cb->o.max_batch_tokens, S = (size_t)cb->o.max_seqs;
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t used = 0, f = sizeof(float);
    TRY(dev_alloc((void **)&cb->x, T * c->dim * f, &used));
    TRY(dev_alloc((void **)&cb->xb, T * c->dim * f, &used));
    TRY(dev_alloc((void **)&cb->xb2, T * c->dim * f, &used));
    TRY(dev_alloc((void **)&cb->xout, T * c->dim * f, &used));
    TRY(dev_alloc((void **)&cb->q, T * q_dim * f, &used));
    TRY(dev_alloc((void **)&cb->att, T * q_dim * f, &used));
    TRY(dev_alloc((void **)&cb->k, T * kv_dim * f, &used));
    TRY(dev_alloc((void **)&cb->v, T * kv_dim * f, &used));
    TRY(dev_alloc((void **)&cb->hb, T * c->hidden_dim * f, &used));
    TRY(dev_alloc((void **)&cb->hb2, T * c->hidden_dim * f, &used));
    TRY(dev_alloc((void **)&cb->logits, T * c->n_vocab * f, &used));
    int max_in = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if ((int)q_dim > max_in)
        max_in = (int)q_dim;
    cb->mm_ws_bytes = kern_cuda_matmul_ws_bytes(max_in, (int)T);
    TRY(dev_alloc(&cb->mm_ws, cb->mm_ws_bytes, &used));
    cb->attn_ws_bytes = kern_cuda_attn_decode_workspace((int)S, c->n_heads, c->head_dim,
                                                        cb->max_blocks, cb->o.block_size);
    if (cb->attn_ws_bytes == (size_t)-1)
        return BRISK_EINVAL;
    TRY(dev_alloc((void **)&cb->attn_ws, cb->attn_ws_bytes, &used));
    cb->samp_ws_bytes = kern_cuda_sample_ws_bytes((int)S, c->n_vocab);
    TRY(dev_alloc(&cb->samp_ws, cb->samp_ws_bytes, &used));
    /* per-step arrays: a run per token at most */
    size_t bt = T * (size_t)cb->max_blocks * sizeof(int32_t);
    TRY(dev_alloc((void **)&cb->d_tok, T * 4, &used));
    TRY(dev_alloc((void **)&cb->d_pos, T * 4, &used));
    TRY(dev_alloc((void **)&cb->d_out_idx, T * 4, &used));
    TRY(dev_alloc((void **)&cb->d_ctx, T * 4, &used));
    TRY(dev_alloc((void **)&cb->d_runs, T * 12, &used));
    TRY(dev_alloc((void **)&cb->d_slots, T * 8, &used));
    TRY(dev_alloc((void **)&cb->d_bt, bt, &used));
    TRY(dev_alloc((void **)&cb->d_rows, S * sizeof(kern_cuda_sample_row), &used));
    TRY(dev_alloc((void **)&cb->d_ids, S * 4, &used));
    TRY(pinned_alloc((void **)&cb->h_tok, T * 4));
    TRY(pinned_alloc((void **)&cb->h_pos, T * 4));
    TRY(pinned_alloc((void **)&cb->h_out_idx, T * 4));
    TRY(pinned_alloc((void **)&cb->h_ctx, T * 4));
    TRY(pinned_alloc((void **)&cb->h_runs, T * 12));
    TRY(pinned_alloc((void **)&cb->h_slots, T * 8));
    TRY(pinned_alloc((void **)&cb->h_bt, bt));
    TRY(pinned_alloc((void **)&cb->h_rows, S * sizeof(kern_cuda_sample_row)));
    TRY(pinned_alloc((void **)&cb->h_ids, S * 4));
    TRY(pinned_alloc((void **)&cb->h_row, (size_t)c->n_vocab * f));
    cb->out_map = malloc(T * sizeof *cb->out_map);
    if (!cb->out_map)
        return BRISK_ENOMEM;
    BRISK_INFO("cuda: scratch for %zu tokens: %.1f MB", T, used / 1e6);
    return 0;
}

int model_backend_cuda_create(const model *m, const model_backend_opts *o, model_backend **out,
                              char *err, size_t err_len) {
    *out = NULL;
    if (kern_cuda_device_count() <= 0) {
        snprintf(err, err_len, "--device cuda: no CUDA device (%s)",
                 kern_cuda_last_error()[0] ? kern_cuda_last_error() : "the driver reports none");
        return BRISK_EUNSUPPORTED;
    }
    if (o->weights == MODEL_WEIGHTS_F32) {
        snprintf(err, err_len,
                 "--device cuda runs f16 or int8 weights (--weights f16|int8|auto), not f32");
        return BRISK_EINVAL;
    }
    const model_config *c = model_get_config(m);
    const model_weights *mw = model_get_weights(m);
    if (kern_type_is_x8(mw->output.type) || kern_type_is_x8(mw->layers[0].wq.type)) {
        snprintf(err, err_len,
                 "--device cuda: the model was loaded in the CPU layout "
                 "(model_load_opts.cpu_layout)");
        return BRISK_EINVAL;
    }
    if (c->head_dim % 8 != 0 || c->head_dim > KERN_CUDA_ATTN_MAX_DIM) {
        snprintf(err, err_len,
                 "--device cuda: head_dim %d is not supported on the GPU (a multiple of 8 "
                 "up to %d)",
                 c->head_dim, KERN_CUDA_ATTN_MAX_DIM);
        return BRISK_EUNSUPPORTED;
    }
    cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, err_len, "out of memory");
        return BRISK_ENOMEM;
    }
    cb->base.ops = &cuda_ops;
    cb->base.m = m;
    cb->base.device = MODEL_DEVICE_CUDA;
    cb->o = *o;
    if (cb->o.gpu_memory_utilization <= 0)
        cb->o.gpu_memory_utilization = 0.9;
    if (cb->o.block_size <= 0)
        cb->o.block_size = 16;
    cb->c = *c;
    cb->graphs_off = !o->cuda_graphs;
    cb->wfmt = pick_wfmt(m, o->weights);
    cb->max_blocks = (o->max_ctx + cb->o.block_size - 1) / cb->o.block_size;
    struct cudaDeviceProp prop;
    int rc = cudaSetDevice(0) == cudaSuccess && cudaGetDeviceProperties(&prop, 0) == cudaSuccess
                 ? 0
                 : BRISK_EIO;
    if (rc) {
        free(cb);
        snprintf(err, err_len, "--device cuda: cannot open device 0");
        return rc;
    }
    snprintf(cb->gpu_name, sizeof cb->gpu_name, "%.96s (sm_%d%d, %.1f GiB)", prop.name, prop.major,
             prop.minor, prop.totalGlobalMem / (double)(1 << 30));
    rc = kern_cuda_stream_create(&cb->stream);
    if (rc) {
        free(cb);
        return cuda_fail(err, err_len, rc, "stream");
    }
    if ((rc = kern_cuda_matmul_ctx_create(&cb->mm, cb->stream)) != 0) {
        cuda_fail(err, err_len, rc, "cuBLAS");
    } else if ((rc = cuda_upload_weights(cb, m)) != 0) {
        cuda_fail(err, err_len, rc, "uploading the weights");
    } else if ((rc = cuda_alloc_scratch(cb)) != 0) {
        cuda_fail(err, err_len, rc, "allocating scratch");
    }
    if (rc) {
        cuda_free(&cb->base);
        return rc;
    }
    /* A decode step reads every matrix once, not the embedding table (one
     * row a token) - unless the table is the output matrix. */
    cb->base.weight_bytes = cb->weight_bytes;
    if (!cb->output_shared)
        cb->base.weight_bytes -= (size_t)c->n_vocab * c->dim * sizeof(uint16_t);
    BRISK_INFO("cuda: %s: weights %s, %.2f GB on the device", cb->gpu_name,
               cb->wfmt == KERN_CUDA_W_INT8 ? "int8" : "f16", cb->weight_bytes / 1e9);
    *out = &cb->base;
    return 0;
}

#endif /* BRISK_HAVE_CUDA */
