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
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_moe.cuh"
#include "kernels/cuda/kern_cuda_sample.cuh"
#include "models/backend.h"

#include "models/backend_cuda_internal.h"

/* ---- helpers ---------------------------------------------------------------- */

static int cuda_fail(char *err, size_t len, int rc, const char *what) {
    snprintf(err, len, "CUDA backend: %s: %s (%s)", what, brisk_strerror(rc),
             kern_cuda_last_error());
    return rc;
}

int model_cuda_dev_alloc(void **p, size_t bytes, size_t *total) {
    *p = NULL;
    if (bytes == 0)
        return 0;
    int rc = kern_cuda_malloc(p, bytes);
    if (rc == 0 && total)
        *total += bytes;
    return rc;
}

int model_cuda_pinned_alloc(void **p, size_t bytes) {
    *p = NULL;
    if (cudaMallocHost(p, bytes ? bytes : 1) != cudaSuccess) {
        *p = NULL;
        return BRISK_ENOMEM;
    }
    return 0;
}

void model_cuda_pinned_free(void *p) {
    if (p)
        cudaFreeHost(p);
}
/* Uploads n floats into new device memory. */
static int upload_f32(float **out, const float *src, size_t n, size_t *total) {
    *out = NULL;
    if (!src)
        return 0;
    int rc = model_cuda_dev_alloc((void **)out, n * sizeof(float), total);
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
    int rc = f && h ? model_cuda_dev_alloc((void **)&cb->tok_embd, (size_t)m->n_out * dim * 2,
                                           &cb->weight_bytes)
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

/* Matrices that read the same input (wq, wk, wv; w_gate, w_up) as one
 * weight, their rows in order, each part converted from its own type (a
 * quantised file may store them differently; Phi-3's split row ranges of
 * one fused tensor upload the same way): the QKV and GATE_UP steps are then
 * one matmul, one pass over the concatenated rows. The parts share n_in, so
 * matrix_wfmt gives them one format; the bytes are the sum of the parts'
 * (a weight's size is linear in its rows), which keeps weight_bytes equal
 * to model_backend_cuda_weight_bytes. */
static int upload_fused(cuda_backend *cb, kern_cuda_weight *w, const model_matrix *const *parts,
                        int n_parts) {
    int n_in = parts[0]->n_in, n_out = 0;
    for (int i = 0; i < n_parts; i++) {
        if (parts[i]->n_in != n_in || !parts[i]->data)
            return BRISK_EINVAL;
        n_out += parts[i]->n_out;
    }
    kern_cuda_wfmt f = matrix_wfmt(cb->wfmt, n_in);
    TRY(kern_cuda_weight_alloc(w, f, n_out, n_in));
    for (int i = 0, row = 0; i < n_parts; row += parts[i]->n_out, i++)
        TRY(kern_cuda_weight_upload_rows(w, row, parts[i]->type, parts[i]->data, parts[i]->n_out));
    cb->weight_bytes += kern_cuda_weight_bytes(f, n_out, n_in);
    return 0;
}

/* Qwen2's biases as one [q_dim + 2 kv_dim] array, laid out as the QKV
 * step's rows, when the layer has all three; otherwise each present one
 * alone (the QKV_BIAS step adds those part by part). */
static int upload_biases(cuda_backend *cb, cuda_layer *L, const model_layer *H, int q_dim,
                         int kv_dim) {
    if (!(H->bq && H->bk && H->bv)) {
        TRY(upload_f32(&L->bq, H->bq, (size_t)q_dim, &cb->weight_bytes));
        TRY(upload_f32(&L->bk, H->bk, (size_t)kv_dim, &cb->weight_bytes));
        return upload_f32(&L->bv, H->bv, (size_t)kv_dim, &cb->weight_bytes);
    }
    size_t n = (size_t)q_dim + 2 * (size_t)kv_dim;
    float *h = malloc(n * sizeof(float));
    if (!h)
        return BRISK_ENOMEM;
    memcpy(h, H->bq, (size_t)q_dim * sizeof(float));
    memcpy(h + q_dim, H->bk, (size_t)kv_dim * sizeof(float));
    memcpy(h + q_dim + kv_dim, H->bv, (size_t)kv_dim * sizeof(float));
    int rc = upload_f32(&L->bqkv, h, n, &cb->weight_bytes);
    free(h);
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
        const model_matrix *ms[] = {&L->wq,      &L->wk,       &L->wv,     &L->wo,
                                    &L->w_gate,  &L->w_up,     &L->w_down, &L->exps_gate,
                                    &L->exps_up, &L->exps_down};
        for (int i = 0; i < 10; i++) /* empty ones (dense or experts) count 0 */
            b += kern_cuda_weight_bytes(matrix_wfmt(f, ms[i]->n_in), ms[i]->n_out, ms[i]->n_in);
        if (L->router.data)
            b += (size_t)L->router.n_out * L->router.n_in * sizeof(float);
        b += 2 * (size_t)c->dim * sizeof(float);
    }
    return b;
}

/* The roofline's bandwidth: a streaming read of 2 GiB (far beyond any L2),
 * best of 5; the kernel halves the buffer when memory is short. */
static double cuda_mem_bw(model_backend *be) {
    (void)be;
    double bw = 0.0;
    return kern_cuda_measure_read_bw((size_t)2 << 30, 5, &bw) == 0 ? bw : 0.0;
}

/* Copies of 1 GiB, read + write counted, best of 5. */
static double cuda_copy_bw(model_backend *be) {
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
            kern_cuda_free(L->bqkv);
            kern_cuda_free(L->q_norm), kern_cuda_free(L->k_norm);
            kern_cuda_free(L->post_attn_norm), kern_cuda_free(L->post_ffn_norm);
            kern_cuda_free(L->router);
            kern_cuda_weight *ws[] = {&L->wqkv,      &L->wo,      &L->w_gate_up, &L->w_down,
                                      &L->exps_gate, &L->exps_up, &L->exps_down};
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
    /* cb->k and cb->v are views into qkv, not allocations. */
    void *dev[] = {cb->x,      cb->xb,         cb->xb2,         cb->q,       cb->qkv,
                   cb->att,    cb->hb,         cb->hgu,         cb->xout,    cb->logits,
                   cb->mm_ws,  cb->attn_ws,    cb->d_tok,       cb->d_pos,   cb->d_out_idx,
                   cb->d_runs, cb->d_bt,       cb->d_ctx,       cb->d_slots, cb->d_rows,
                   cb->d_ids,  cb->d_edit_ids, cb->d_edit_vals, cb->samp_ws, cb->k_pool,
                   cb->v_pool, cb->moe_ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        kern_cuda_free(dev[i]);
    void *pin[] = {cb->h_tok, cb->h_pos,      cb->h_out_idx,   cb->h_runs,
                   cb->h_bt,  cb->h_ctx,      cb->h_slots,     cb->h_rows,
                   cb->h_ids, cb->h_edit_ids, cb->h_edit_vals, cb->h_row};
    for (size_t i = 0; i < sizeof pin / sizeof pin[0]; i++)
        model_cuda_pinned_free(pin[i]);
    /* hidden states and the KV pool's layout (backend_cuda_fwd.c, backend_cuda_kv.c) */
    kern_cuda_free(cb->d_hidden), kern_cuda_free(cb->d_hid_idx);
    model_cuda_pinned_free(cb->h_hidden), model_cuda_pinned_free(cb->h_hid_idx);
    model_cuda_sample_free(cb); /* the mask buffers (backend_cuda_sample.c) */
    free(cb->out_map);
    free(cb->layer_base);
    free(cb->layer_group);
    free(cb->copy_base);
    kern_cuda_matmul_ctx_free(cb->mm);
    kern_cuda_stream_destroy(cb->stream);
    free(cb);
}

static void cuda_set_trace(model_backend *be, model_recipe *trace) {
    ((cuda_backend *)be)->trace = trace;
}

static const model_backend_ops cuda_ops = {
    .name = "cuda",
    .forward = model_cuda_forward,
    .logits = model_cuda_logits,
    .sample = model_cuda_sample,
    .hidden = model_cuda_hidden,
    .kv_create = model_cuda_kv_create,
    .kv_budget = model_cuda_kv_budget,
    .mem_bw = cuda_mem_bw,
    .copy_bw = cuda_copy_bw,
    .describe = cuda_describe,
    .set_trace = cuda_set_trace,
    .free = cuda_free,
};

/* A mixture of experts' layer: the router as f32 (the routing reads what
 * the CPU's does; [n_expert][dim] is small), the three stacks each as one
 * weight, converted a slice of rows at a time (kern_cuda_weight_upload), so
 * the host never holds a converted stack. */
static int upload_experts(cuda_backend *cb, cuda_layer *L, const model_layer *H) {
    const model_config *c = &cb->c;
    const model_matrix *r = &H->router;
    if (r->type != KERN_TYPE_F32 || r->n_out != c->n_expert || r->n_in != c->dim ||
        !H->exps_gate.data || !H->exps_up.data || !H->exps_down.data)
        return BRISK_EINVAL;
    TRY(upload_f32(&L->router, r->data, (size_t)r->n_out * r->n_in, &cb->weight_bytes));
    TRY(upload_matrix(cb, &L->exps_gate, &H->exps_gate));
    TRY(upload_matrix(cb, &L->exps_up, &H->exps_up));
    return upload_matrix(cb, &L->exps_down, &H->exps_down);
}

/* Layer l's experts as kern_cuda_moe_ffn takes them (views of L). */
kern_cuda_moe model_cuda_moe_of(const cuda_backend *cb, int l) {
    const cuda_layer *L = &cb->layers[l];
    return (kern_cuda_moe){.router = L->router,
                           .gate = &L->exps_gate,
                           .up = &L->exps_up,
                           .down = &L->exps_down,
                           .n_expert = cb->c.n_expert,
                           .n_used = cb->c.n_expert_used,
                           .dim = cb->c.dim,
                           .hidden = cb->c.expert_hidden,
                           .norm_topk = cb->c.moe_norm_topk,
                           .gelu = cb->c.act == MODEL_ACT_GELU_TANH};
}

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
        TRY(upload_biases(cb, L, H, q_dim, kv_dim));
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
        const model_matrix *qkv[] = {&H->wq, &H->wk, &H->wv}, *gate_up[] = {&H->w_gate, &H->w_up};
        TRY(upload_fused(cb, &L->wqkv, qkv, 3));
        TRY(upload_matrix(cb, &L->wo, &H->wo));
        if (H->router.data) {
            TRY(upload_experts(cb, L, H));
        } else {
            TRY(upload_fused(cb, &L->w_gate_up, gate_up, 2));
            TRY(upload_matrix(cb, &L->w_down, &H->w_down));
        }
    }
    return 0;
}

static int cuda_alloc_scratch(cuda_backend *cb) {
    const model_config *c = &cb->c;
    size_t T = (size_t)cb->o.max_batch_tokens, S = (size_t)cb->o.max_seqs;
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t used = 0, f = sizeof(float);
    TRY(model_cuda_dev_alloc((void **)&cb->x, T * c->dim * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->xb, T * c->dim * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->xb2, T * c->dim * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->xout, T * c->dim * f, &used));
    cb->qkv_ld = q_dim + 2 * kv_dim;
    TRY(model_cuda_dev_alloc((void **)&cb->qkv, T * cb->qkv_ld * f, &used));
    cb->k = cb->qkv + q_dim;
    cb->v = cb->qkv + q_dim + kv_dim;
    TRY(model_cuda_dev_alloc((void **)&cb->q, T * q_dim * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->att, T * q_dim * f, &used));
    /* The dense MLP's rows; a mixture of experts has its own workspace
     * (every layer of it has experts, as the loader requires). */
    size_t hid = c->n_expert > 0 ? 0 : (size_t)c->hidden_dim;
    TRY(model_cuda_dev_alloc((void **)&cb->hb, T * hid * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->hgu, T * 2 * hid * f, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->logits, T * c->n_vocab * f, &used));
    int max_in = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if ((int)q_dim > max_in)
        max_in = (int)q_dim;
    cb->mm_ws_bytes = kern_cuda_matmul_ws_bytes(max_in, (int)T);
    TRY(model_cuda_dev_alloc(&cb->mm_ws, cb->mm_ws_bytes, &used));
    cb->attn_ws_bytes = kern_cuda_attn_decode_workspace((int)S, c->n_heads, c->head_dim,
                                                        cb->max_blocks, cb->o.block_size);
    if (cb->attn_ws_bytes == (size_t)-1)
        return BRISK_EINVAL;
    TRY(model_cuda_dev_alloc((void **)&cb->attn_ws, cb->attn_ws_bytes, &used));
    if (c->n_expert > 0) { /* every layer has layer 0's shape */
        kern_cuda_moe mo = model_cuda_moe_of(cb, 0);
        cb->moe_ws_bytes = kern_cuda_moe_ws_bytes(&mo, (int)T);
        if (cb->moe_ws_bytes == (size_t)-1)
            return BRISK_EINVAL;
        TRY(model_cuda_dev_alloc(&cb->moe_ws, cb->moe_ws_bytes, &used));
    }
    /* INT8 weights at large batches run dequantised into cuBLAS chunk by
     * chunk (kern_cuda_matmul.cuh): the workspace is made here, so it counts
     * in the budget the KV pool gets what is left of, and no pass allocates. */
    if (cb->wfmt == KERN_CUDA_W_INT8) {
        TRY(kern_cuda_matmul_ctx_dequant_ws(cb->mm, KERN_CUDA_MM_DEQUANT_WS_BYTES));
        used += KERN_CUDA_MM_DEQUANT_WS_BYTES;
    }
    /* Sampling takes a row per proposal too (speculative verification). */
    cb->sample_rows = cb->o.max_sample_rows > 0 ? cb->o.max_sample_rows : cb->o.max_seqs;
    const size_t SR = (size_t)cb->sample_rows;
    cb->samp_ws_bytes = kern_cuda_sample_ws_bytes((int)SR, c->n_vocab);
    TRY(model_cuda_dev_alloc(&cb->samp_ws, cb->samp_ws_bytes, &used));
    /* per-step arrays: a run per token at most */
    size_t bt = T * (size_t)cb->max_blocks * sizeof(int32_t);
    TRY(model_cuda_dev_alloc((void **)&cb->d_tok, T * 4, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_pos, T * 4, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_out_idx, T * 4, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_ctx, T * 4, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_runs, T * 12, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_slots, T * 8, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_bt, bt, &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_rows, SR * sizeof(kern_cuda_sample_row), &used));
    TRY(model_cuda_dev_alloc((void **)&cb->d_ids, SR * 4, &used));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_tok, T * 4));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_pos, T * 4));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_out_idx, T * 4));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_ctx, T * 4));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_runs, T * 12));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_slots, T * 8));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_bt, bt));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_rows, SR * sizeof(kern_cuda_sample_row)));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_ids, SR * 4));
    TRY(model_cuda_pinned_alloc((void **)&cb->h_row, (size_t)c->n_vocab * f));
    cb->out_map = malloc(T * sizeof *cb->out_map);
    if (!cb->out_map)
        return BRISK_ENOMEM;
    BRISK_INFO("cuda: scratch for %zu tokens: %.1f MB", T, used / 1e6);
    return 0;
}

int model_backend_cuda_create(const model *m, const model_backend_opts *o, model_backend **out,
                              char *err, size_t err_len) {
    *out = NULL;
    const model_config *c = model_get_config(m);
    if (c->n_expert > KERN_CUDA_MOE_MAX_EXPERT || c->n_expert_used > KERN_CUDA_MOE_MAX_USED) {
        snprintf(err, err_len,
                 "--device cuda: %d experts, %d a token (%s): the GPU routes at most %d experts, "
                 "%d a token; use --device cpu",
                 c->n_expert, c->n_expert_used, c->arch->name, KERN_CUDA_MOE_MAX_EXPERT,
                 KERN_CUDA_MOE_MAX_USED);
        return BRISK_EUNSUPPORTED;
    }
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
    /* Nor the experts a token leaves idle (n_expert - n_expert_used of each
     * layer's stacks): a decode step of one token reads the active ones. */
    for (int l = 0; l < c->n_layers && c->n_expert > 0; l++) {
        const cuda_layer *L = &cb->layers[l];
        const kern_cuda_weight *ws[] = {&L->exps_gate, &L->exps_up, &L->exps_down};
        for (int i = 0; i < 3; i++) {
            size_t eb = kern_cuda_weight_bytes(ws[i]->fmt, ws[i]->n_out, ws[i]->n_in);
            cb->base.weight_bytes -=
                eb / (size_t)c->n_expert * (size_t)(c->n_expert - c->n_expert_used);
        }
    }
    BRISK_INFO("cuda: %s: weights %s, %.2f GB on the device", cb->gpu_name,
               cb->wfmt == KERN_CUDA_W_INT8 ? "int8" : "f16", cb->weight_bytes / 1e9);
    *out = &cb->base;
    return 0;
}

#endif /* BRISK_HAVE_CUDA */
