/* backend_cuda_fwd.c - the CUDA backend's forward pass: the batch staged into
 * device arrays (per group of the KV pool's layout, backend_cuda_kv.c), the
 * layers walked as their recipes say (model_recipe.h), decode steps replayed
 * from CUDA graphs per batch-size bucket, logits rows read back on request,
 * and the hidden states of the rows that want them (ops.hidden). */
#include "brisk_config.h"

#if BRISK_HAVE_CUDA

#include <cuda_runtime_api.h>
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
#include "kernels/cuda/kern_cuda_silu.cuh"
#include "models/backend.h"
#include "models/model_recipe.h"

#include "models/backend_cuda_internal.h"

/* ---- forward ----------------------------------------------------------------- */

/* Whether token i of the batch starts a run: consecutive tokens of one
 * sequence at consecutive positions are one run (cuda_count_runs and
 * cuda_stage must cut alike). */
static int cuda_run_starts(const model_batch *b, int i) {
    return i == 0 || b->seq[i] != b->seq[i - 1] || b->pos[i] != b->pos[i - 1] + 1;
}

/* The batch's runs; *max_run gets the longest. */
static int cuda_count_runs(const model_batch *b, int *max_run) {
    int n_runs = 0, len = 0;
    *max_run = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        len = cuda_run_starts(b, i) ? 1 : len + 1;
        n_runs += len == 1;
        if (len > *max_run)
            *max_run = len;
    }
    return n_runs;
}

/* Fills the host staging for the batch: tokens, positions, runs with their
 * context lengths, the rows that want logits (*n_want) and those that want
 * hidden states (*n_hid, when b asks), and per group of the KV pool each
 * token's KV slot and each run's block table: group g's slot of token i at
 * h_slots[g * rows + i], its table of run r at h_bt[(g * runs + r) *
 * max_blocks], rows and runs the strides the pass reads them with (the
 * batch's own counts, or a graph's bucket). */
static void cuda_stage(cuda_backend *cb, kv_cache *kv, const model_batch *b, int rows, int runs,
                       int *n_want, int *n_hid) {
    int n = b->n_tokens, n_runs = 0, bs = cb->block_size, mb = cb->max_blocks;
    *n_want = 0;
    *n_hid = 0;
    for (int i = 0; i < n; i++) {
        int pos = b->pos[i], start = cuda_run_starts(b, i);
        cb->h_tok[i] = b->tokens[i];
        cb->h_pos[i] = pos;
        if (start) {
            int32_t *r = &cb->h_runs[3 * n_runs++];
            r[0] = i;
            r[1] = 1;
            r[2] = pos;
        } else {
            cb->h_runs[3 * (n_runs - 1) + 1]++;
        }
        int nb = kv_cache_seq_n_blocks(kv, b->seq[i]);
        for (int g = 0; g < cb->n_groups; g++) {
            const int32_t *table = kv_cache_seq_table(kv, b->seq[i], g);
            cb->h_slots[(size_t)g * rows + i] =
                (int64_t)table[pos / bs] * (int64_t)cb->block_stride +
                (int64_t)(pos % bs) * (int64_t)cb->slot_row;
            if (start) {
                int32_t *row = cb->h_bt + ((size_t)g * runs + (size_t)(n_runs - 1)) * mb;
                memcpy(row, table, (size_t)nb * sizeof(int32_t));
                memset(row + nb, 0, (size_t)(mb - nb) * sizeof(int32_t));
            }
        }
        int want = b->want_logits ? b->want_logits[i] != 0 : i == n - 1;
        if (want)
            cb->h_out_idx[(*n_want)++] = i;
        if (b->want_hidden && b->want_hidden[i])
            cb->h_hid_idx[(*n_hid)++] = i;
    }
    for (int r = 0; r < n_runs; r++) {
        int32_t *run = &cb->h_runs[3 * r];
        cb->h_ctx[r] = run[2] + run[1];
    }
}

/* Decode rows past n (a graph's bucket, the strides of cuda_stage): no token
 * of theirs is stored (slot -1 in every group), their attention is empty
 * (length 0), their logits unused. */
static void cuda_pad(cuda_backend *cb, int n, int bucket) {
    for (int i = n; i < bucket; i++) {
        cb->h_tok[i] = 0;
        cb->h_pos[i] = 0;
        cb->h_ctx[i] = 0;
        cb->h_out_idx[i] = i;
        for (int g = 0; g < cb->n_groups; g++) {
            cb->h_slots[(size_t)g * bucket + i] = -1;
            memset(cb->h_bt + ((size_t)g * bucket + i) * cb->max_blocks, 0,
                   (size_t)cb->max_blocks * sizeof(int32_t));
        }
        int32_t *run = &cb->h_runs[3 * i];
        run[0] = i, run[1] = 1, run[2] = 0;
    }
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

/* ---- short runs in graphs (speculative verification) ---------------------------
 * A step whose runs are all short (each sequence's last token and its
 * proposals, or a few prompt tokens) replays a graph too: its runs are laid
 * out R rows apart (R: the longest run rounded up to a power of two, at
 * most CUDA_GRAPH_MAX_RUN) and padded to a bucket of runs. A run's rows past
 * its tokens belong to no run: they store nothing (slot -1), attention skips
 * them and their logits are never read, so every real row reads exactly the
 * keys it reads eagerly. A padding run has no tokens (length 0, an all-zero
 * table) and R such rows. Every run's positions with its padding rows must
 * stay within the table (pos0 + R <= max_blocks * block_size), the padding may at most double the
 * step's rows, and a graph runs at most CUDA_GRAPH_MAX_ROWS; else the step
 * runs eagerly. */
#define CUDA_GRAPH_MAX_RUN 32
#define CUDA_GRAPH_MAX_ROWS 256

/* The graph shape for a step of n_runs runs, the longest max_run (> 1): 1
 * and *runs, *run set, or 0 (eager). */
static int cuda_runs_shape(const cuda_backend *cb, const model_batch *b, int n_runs, int max_run,
                           int *runs, int *run) {
    int R = 2;
    while (R < max_run)
        R *= 2;
    int nb = cuda_bucket(n_runs);
    /* Padding may at most double the rows, and only small steps are worth
     * it: beyond CUDA_GRAPH_MAX_ROWS the launches are a small share. */
    long rows = (long)nb * R;
    if (R > CUDA_GRAPH_MAX_RUN || nb > cb->o.max_seqs || rows > cb->o.max_batch_tokens ||
        rows > 2L * b->n_tokens || rows > CUDA_GRAPH_MAX_ROWS)
        return 0;
    long cap = (long)cb->max_blocks * cb->block_size;
    for (int i = 0; i < b->n_tokens; i++)
        if (cuda_run_starts(b, i) && (long)b->pos[i] + R > cap)
            return 0;
    *runs = nb;
    *run = R;
    return 1;
}

/* Stages the batch for a short-runs graph of nb runs of R rows (strides nb
 * * R rows, nb runs): run r's tokens at rows r * R on, every row's logits
 * computed, out_map from the wanted tokens (in batch order) to their rows. */
static void cuda_stage_runs(cuda_backend *cb, kv_cache *kv, const model_batch *b, int nb, int R,
                            int *n_want) {
    const int n = b->n_tokens, rows = nb * R, bs = cb->block_size, mb = cb->max_blocks;
    int r = -1, j = 0;
    *n_want = 0;
    for (int i = 0; i <= n; i++) {
        int start = i < n && cuda_run_starts(b, i);
        if ((i == n || start) && r >= 0) { /* the previous run's padding rows */
            const int32_t *run = &cb->h_runs[3 * r];
            for (; j < R; j++) {
                int row = r * R + j;
                cb->h_tok[row] = 0;
                cb->h_pos[row] = run[2] + j;
                for (int g = 0; g < cb->n_groups; g++)
                    cb->h_slots[(size_t)g * rows + row] = -1;
            }
            cb->h_ctx[r] = run[2] + run[1];
        }
        if (i == n)
            break;
        if (start) {
            r++;
            j = 0;
            int32_t *run = &cb->h_runs[3 * r];
            run[0] = r * R;
            run[1] = 0;
            run[2] = b->pos[i];
            int nblk = kv_cache_seq_n_blocks(kv, b->seq[i]);
            for (int g = 0; g < cb->n_groups; g++) {
                int32_t *bt = cb->h_bt + ((size_t)g * nb + (size_t)r) * mb;
                memcpy(bt, kv_cache_seq_table(kv, b->seq[i], g), (size_t)nblk * sizeof(int32_t));
                memset(bt + nblk, 0, (size_t)(mb - nblk) * sizeof(int32_t));
            }
        }
        cb->h_runs[3 * r + 1]++;
        int row = r * R + j++, pos = b->pos[i];
        cb->h_tok[row] = b->tokens[i];
        cb->h_pos[row] = pos;
        for (int g = 0; g < cb->n_groups; g++) {
            const int32_t *table = kv_cache_seq_table(kv, b->seq[i], g);
            cb->h_slots[(size_t)g * rows + row] =
                (int64_t)table[pos / bs] * (int64_t)cb->block_stride +
                (int64_t)(pos % bs) * (int64_t)cb->slot_row;
        }
        int want = b->want_logits ? b->want_logits[i] != 0 : i == n - 1;
        if (want)
            cb->out_map[(*n_want)++] = row;
    }
    for (r = r + 1; r < nb; r++) { /* padding runs */
        int32_t *run = &cb->h_runs[3 * r];
        run[0] = r * R, run[1] = 0, run[2] = 0;
        cb->h_ctx[r] = 0;
        for (int k = 0; k < R; k++) {
            cb->h_tok[r * R + k] = 0;
            cb->h_pos[r * R + k] = k;
            for (int g = 0; g < cb->n_groups; g++)
                cb->h_slots[(size_t)g * rows + r * R + k] = -1;
        }
        for (int g = 0; g < cb->n_groups; g++)
            memset(cb->h_bt + ((size_t)g * nb + (size_t)r) * mb, 0, (size_t)mb * sizeof(int32_t));
    }
    for (int i = 0; i < rows; i++)
        cb->h_out_idx[i] = i;
}

/* Uploads what cuda_stage (and cuda_pad) staged for a pass over n rows and
 * n_runs runs (the strides it staged with). */
static int cuda_upload_step(cuda_backend *cb, int n, int n_runs, int n_want) {
    cudaStream_t s = cb->stream;
    size_t G = (size_t)cb->n_groups;
    int rc = kern_cuda_upload(cb->d_tok, cb->h_tok, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_pos, cb->h_pos, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_slots, cb->h_slots, G * (size_t)n * sizeof(int64_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_runs, cb->h_runs, (size_t)n_runs * 3 * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_ctx, cb->h_ctx, (size_t)n_runs * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_upload(cb->d_bt, cb->h_bt,
                              G * (size_t)n_runs * (size_t)cb->max_blocks * sizeof(int32_t), s);
    if (!rc && n_want > 0)
        rc = kern_cuda_upload(cb->d_out_idx, cb->h_out_idx, (size_t)n_want * sizeof(int32_t), s);
    return rc;
}

/* ---- hidden states ----------------------------------------------------------- */

/* The hidden-state buffers, made by the first forward that wants them (an
 * embeddings server; others never pay for them): [T][dim] floats on the
 * device and pinned on the host, [T] row indices each side. */
static int cuda_hidden_reserve(cuda_backend *cb) {
    size_t T = (size_t)cb->o.max_batch_tokens, rows = T * (size_t)cb->c.dim * sizeof(float);
    if (!cb->d_hidden)
        TRY(model_cuda_dev_alloc((void **)&cb->d_hidden, rows, NULL));
    if (!cb->d_hid_idx)
        TRY(model_cuda_dev_alloc((void **)&cb->d_hid_idx, T * sizeof(int32_t), NULL));
    if (!cb->h_hidden)
        TRY(model_cuda_pinned_alloc((void **)&cb->h_hidden, rows));
    if (!cb->h_hid_idx)
        TRY(model_cuda_pinned_alloc((void **)&cb->h_hid_idx, T * sizeof(int32_t)));
    return 0;
}

/* After a pass over n rows: the n_hid rows h_hid_idx names of xb (the final
 * norm of every row, which is model_state_hidden's state) gathered on the
 * device and queued for the host (there after the stream's sync). */
static int cuda_hidden_gather(cuda_backend *cb, int n, int n_hid) {
    cudaStream_t s = cb->stream;
    int dim = cb->c.dim;
    TRY(kern_cuda_upload(cb->d_hid_idx, cb->h_hid_idx, (size_t)n_hid * sizeof(int32_t), s));
    TRY(kern_cuda_embedding(cb->d_hidden, cb->xb, KERN_TYPE_F32, n, dim, cb->d_hid_idx, n_hid, NULL,
                            s));
    return kern_cuda_download(cb->h_hidden, cb->d_hidden, (size_t)n_hid * dim * sizeof(float), s);
}

int model_cuda_hidden(model_backend *be, const float **rows, int *n_rows) {
    cuda_backend *cb = (cuda_backend *)be;
    *n_rows = cb->n_hidden;
    *rows = cb->n_hidden > 0 ? cb->h_hidden : NULL;
    return 0;
}

/* ---- the pass ----------------------------------------------------------------- */

/* Step `step` of layer l over n rows (cuda_pass's arguments). *resid: a
 * RESIDUAL is pending, for the next norm of x to add. */
static int cuda_step(cuda_backend *cb, int l, int step, int n, int n_runs, int max_run, int decode,
                     int *resid) {
    const model_config *c = &cb->c;
    const cuda_layer *L = &cb->layers[l];
    cudaStream_t s = cb->stream;
    const int dim = c->dim, q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    /* The layer's rows of block 0, and its group's slots and block tables
     * (cuda_stage's strides: n rows, n_runs runs). */
    uint8_t *kp = cb->k_pool + cb->layer_base[l] * cb->kv_unit;
    uint8_t *vp = cb->v_pool + cb->layer_base[l] * cb->kv_unit;
    const int quant = kern_kv_is_quant(cb->kv_dtype);
    const size_t group = (size_t)cb->layer_group[l];
    const float *pending = *resid ? cb->xb2 : NULL;
    switch (step) {
    case MODEL_STEP_ATTN_NORM: /* x += a pending block output; xb = norm(x) */
        *resid = 0;
        return kern_cuda_rmsnorm(cb->xb, cb->x, pending, L->attn_norm, n, dim, c->norm_eps, s);
    case MODEL_STEP_QKV: /* one matmul over wq | wk | wv into the q | k | v rows of qkv */
        return kern_cuda_matmul(cb->mm, &L->wqkv, cb->xb, n, cb->qkv, cb->qkv_ld, cb->mm_ws,
                                cb->mm_ws_bytes);
    case MODEL_STEP_QKV_BIAS: /* in place on the rows of qkv */
        if (L->bqkv)
            return kern_cuda_add_bias(cb->qkv, cb->qkv_ld, L->bqkv, n, (int)cb->qkv_ld, s);
        if (L->bq)
            TRY(kern_cuda_add_bias(cb->qkv, cb->qkv_ld, L->bq, n, q_dim, s));
        if (L->bk)
            TRY(kern_cuda_add_bias(cb->k, cb->qkv_ld, L->bk, n, kv_dim, s));
        return L->bv ? kern_cuda_add_bias(cb->v, cb->qkv_ld, L->bv, n, kv_dim, s) : 0;
    case MODEL_STEP_QK_NORM: /* each head of q and k as a row of head_dim, in place in qkv */
        TRY(kern_cuda_rmsnorm_heads(cb->qkv, cb->qkv_ld, n, c->n_heads, c->head_dim, L->q_norm,
                                    c->norm_eps, s));
        return kern_cuda_rmsnorm_heads(cb->k, cb->qkv_ld, n, c->n_kv_heads, c->head_dim, L->k_norm,
                                       c->norm_eps, s);
    case MODEL_STEP_ROPE: /* q turned out of qkv into the attention's rows; k in place */
        TRY(kern_cuda_rope_to(cb->q, (size_t)q_dim, cb->qkv, cb->qkv_ld, n, c->n_heads, c->head_dim,
                              c->n_rot, cb->d_pos, L->rope_base, L->rope_freq_scale, cb->rope_freqs,
                              c->rope_attn_factor, c->rope_mode, s));
        return kern_cuda_rope_ex(cb->k, cb->qkv_ld, n, c->n_kv_heads, c->head_dim, c->n_rot,
                                 cb->d_pos, L->rope_base, L->rope_freq_scale, cb->rope_freqs,
                                 c->rope_attn_factor, c->rope_mode, s);
    case MODEL_STEP_KV_STORE: /* f16, or int8 / fp8 codes with a scale per head */
        if (quant)
            return kern_cuda_kv_store_q(kp, vp, cb->kv_dtype, cb->k, cb->v, cb->qkv_ld,
                                        cb->d_slots + group * n, n, c->n_kv_heads, c->head_dim,
                                        cb->block_size, cb->block_stride, cb->scale_off, s);
        return kern_cuda_kv_store((uint16_t *)(void *)kp, (uint16_t *)(void *)vp, cb->k, cb->v,
                                  cb->qkv_ld, cb->d_slots + group * n, n, kv_dim, s);
    case MODEL_STEP_ATTENTION: { /* the scale is 1 / sqrt(head_dim) unless the family says */
        const int32_t *bt = cb->d_bt + group * (size_t)n_runs * (size_t)cb->max_blocks;
        if (decode)
            return kern_cuda_attn_decode_kv(cb->att, cb->q, kp, vp, cb->kv_dtype, cb->scale_off, bt,
                                            cb->max_blocks, cb->d_ctx, n, c->n_heads, c->n_kv_heads,
                                            c->head_dim, cb->block_size, cb->block_stride,
                                            cb->row_stride, c->attn_scale, L->window,
                                            L->attn_softcap, cb->attn_ws, cb->attn_ws_bytes, s);
        return kern_cuda_attn_prefill_kv(
            cb->att, cb->q, (size_t)q_dim, kp, vp, cb->kv_dtype, cb->scale_off, bt, cb->max_blocks,
            cb->d_runs, n_runs, max_run, c->n_heads, c->n_kv_heads, c->head_dim, cb->block_size,
            cb->block_stride, cb->row_stride, c->attn_scale, L->window, L->attn_softcap, s);
    }
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
    case MODEL_STEP_GATE_UP: /* one matmul over w_gate | w_up into the gate | up rows of hgu */
        return kern_cuda_matmul(cb->mm, &L->w_gate_up, cb->xb, n, cb->hgu,
                                2 * (size_t)c->hidden_dim, cb->mm_ws, cb->mm_ws_bytes);
    case MODEL_STEP_ACT: /* hb = act(gate) * up, both read from the rows of hgu */
        if (c->act == MODEL_ACT_GELU_TANH)
            return kern_cuda_gelu_mul_rows(cb->hb, (size_t)c->hidden_dim, cb->hgu,
                                           2 * (size_t)c->hidden_dim, n, c->hidden_dim, s);
        return kern_cuda_silu_mul_rows(cb->hb, (size_t)c->hidden_dim, cb->hgu,
                                       2 * (size_t)c->hidden_dim, n, c->hidden_dim, s);
    case MODEL_STEP_DOWN:
        return kern_cuda_matmul(cb->mm, &L->w_down, cb->hb, n, cb->xb2, (size_t)dim, cb->mm_ws,
                                cb->mm_ws_bytes);
    case MODEL_STEP_MOE: { /* routing, the chosen experts' MLPs and their sum, on the device */
        kern_cuda_moe mo = model_cuda_moe_of(cb, l);
        return kern_cuda_moe_ffn(&mo, cb->xb, n, cb->xb2, cb->moe_ws, cb->moe_ws_bytes, NULL, NULL,
                                 s);
    }
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

/* The graph of bucket x run, made (not captured) on first use; NULL when
 * the table is full. Short-run shapes take at most half of it, so decode
 * buckets needed later always find a place. */
static cuda_graph *cuda_graph_for(cuda_backend *cb, int bucket, int run) {
    int n_short = 0;
    for (int i = 0; i < cb->n_graphs; i++) {
        if (cb->graphs[i].n == bucket && cb->graphs[i].run == run)
            return &cb->graphs[i];
        n_short += cb->graphs[i].run > 1;
    }
    if (cb->n_graphs == CUDA_MAX_BUCKETS || (run > 1 && n_short >= CUDA_MAX_BUCKETS / 2))
        return NULL;
    cuda_graph *g = &cb->graphs[cb->n_graphs++];
    g->n = bucket;
    g->run = run;
    g->exec = NULL;
    g->warm = 0;
    return g;
}

/* The pass a graph runs: g->n runs of g->run rows, logits for every row. */
static int cuda_graph_pass(cuda_backend *cb, const cuda_graph *g) {
    int rows = g->n * g->run;
    return cuda_pass(cb, rows, g->n, g->run, g->run == 1, rows);
}

/* Captures g's pass. On failure the stream is left out of capture mode and
 * graphs are turned off (eager from then on). */
static int cuda_capture(cuda_backend *cb, cuda_graph *g) {
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1;
    int rc = cuda_graph_pass(cb, g);
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

int model_cuda_forward(model_backend *be, kv_cache *kv, const model_batch *b, int *n_out) {
    cuda_backend *cb = (cuda_backend *)be;
    *n_out = 0;
    cb->n_out = 0;
    cb->n_hidden = 0;
    cb->h_row_valid = -1;
    be->last_pass = MODEL_PASS_EAGER;
    if (!cb->k_pool)
        return BRISK_EINVAL; /* kv did not come from kv_create */
    if (cb->kv_error) {
        int rc = cb->kv_error;
        cb->kv_error = 0;
        return rc;
    }
    int rc = model_batch_validate(be->m, kv, b, cb->o.max_batch_tokens, cb->o.max_ctx);
    if (rc < 0)
        return rc;
    int any_hid = 0;
    for (int i = 0; b->want_hidden && i < b->n_tokens && !any_hid; i++)
        any_hid = b->want_hidden[i] != 0;
    if (any_hid && (rc = cuda_hidden_reserve(cb)) < 0) {
        BRISK_ERROR("cuda: no memory for hidden states: %s", kern_cuda_last_error());
        return rc;
    }
    int n = b->n_tokens, max_run = 0, n_want = 0, n_hid = 0;
    int n_runs = cuda_count_runs(b, &max_run);
    if (n_runs > cb->max_runs) { /* a window-grouped pool's tables: one run per sequence */
        BRISK_ERROR("cuda: a batch of %d runs; this KV pool's tables hold %d", n_runs,
                    cb->max_runs);
        return BRISK_EINVAL;
    }
    int decode = max_run == 1 && n <= cb->o.max_seqs;
    /* A decode step replays its bucket's graph, and so does a step of short
     * runs (speculative verification: cuda_runs_shape), unless it wants
     * hidden states (the graph has no gather for them: it runs eagerly). */
    cuda_graph *g = NULL;
    if (!cb->graphs_off && !cb->trace && !any_hid) {
        int bucket = cuda_bucket(n), runs = 0, run = 0;
        if (decode && bucket <= cb->o.max_seqs && bucket <= cb->o.max_batch_tokens)
            g = cuda_graph_for(cb, bucket, 1);
        else if (!decode && max_run > 1 && cuda_runs_shape(cb, b, n_runs, max_run, &runs, &run))
            g = cuda_graph_for(cb, runs, run);
    }
    if (g) {
        /* The graph runs the whole bucket and computes logits for every
         * row; the wanted ones are found through out_map. The step is
         * staged with the bucket's strides, as the graph reads them. */
        int bucket = g->n, run_rows = g->run, rows = g->n * g->run;
        if (run_rows == 1) {
            cuda_stage(cb, kv, b, bucket, bucket, &n_want, &n_hid);
            for (int r = 0; r < n_want; r++)
                cb->out_map[r] = cb->h_out_idx[r];
            cuda_pad(cb, n, bucket);
            for (int i = 0; i < bucket; i++)
                cb->h_out_idx[i] = i;
        } else {
            cuda_stage_runs(cb, kv, b, bucket, g->run, &n_want);
        }
        rc = cuda_upload_step(cb, rows, bucket, rows);
        /* A bucket's first step runs eagerly, so every kernel (and cuBLAS's
         * first GEMM) is loaded and set up outside a capture; the second is
         * captured. */
        int had_graph = g->exec != NULL;
        if (rc == 0 && !g->exec && g->warm && cuda_capture(cb, g) != 0) {
            BRISK_WARN("cuda: capturing a graph of %d runs x %d rows failed (%s); running "
                       "without graphs",
                       g->n, g->run, kern_cuda_last_error());
            cb->graphs_off = 1;
            g = NULL;
        }
        if (g) /* for the step trace */
            be->last_pass = had_graph ? MODEL_PASS_REPLAY
                            : g->exec ? MODEL_PASS_CAPTURE
                                      : MODEL_PASS_WARMUP;
        if (rc == 0 && g && g->exec) {
            cudaError_t le = cudaGraphLaunch(g->exec, cb->stream);
            if (le != cudaSuccess) {
                BRISK_ERROR("cuda: cudaGraphLaunch (%d runs x %d rows): %s", g->n, g->run,
                            cudaGetErrorString(le));
                (void)cudaGetLastError();
                rc = BRISK_EIO;
            }
        } else if (rc == 0) {
            /* the bucket's first step, or the capture failed: the same
             * bucket eagerly (its staging is what was uploaded) */
            rc = cuda_pass(cb, rows, bucket, run_rows, run_rows == 1, rows);
        }
        if (g)
            g->warm = 1;
    } else {
        cuda_stage(cb, kv, b, n, n_runs, &n_want, &n_hid);
        for (int r = 0; r < n_want; r++)
            cb->out_map[r] = r;
        rc = cuda_upload_step(cb, n, n_runs, n_want);
        if (rc == 0)
            rc = cuda_pass(cb, n, n_runs, max_run, decode, n_want);
        if (rc == 0 && n_hid > 0)
            rc = cuda_hidden_gather(cb, n, n_hid);
    }
    if (rc == 0)
        rc = kern_cuda_sync(cb->stream);
    if (rc < 0) {
        BRISK_ERROR("cuda: forward failed: %s", kern_cuda_last_error());
        return rc;
    }
    cb->n_out = n_want;
    cb->n_hidden = n_hid;
    *n_out = n_want;
    return 0;
}

int model_cuda_logits(model_backend *be, int row, const float **out) {
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

#endif /* BRISK_HAVE_CUDA */
