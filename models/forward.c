/* forward.c - the batched transformer forward pass on the CPU, every family
 * through its layers' recipes (model_recipe.h).
 *
 * One call processes every token of the batch: the projections and the MLP
 * are matrix-matrix products over all tokens (weights streamed once per
 * call, not once per token), attention runs per (token, head) against that
 * token's own sequence in the KV cache. A mixture of experts runs its
 * experts over the tokens routed to each (models/model_moe.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/model.h"
#include "models/model_internal.h"
#include "models/model_moe.h"
#include "models/model_recipe.h"

/* Attention works on runs: consecutive batch tokens of one sequence at
 * consecutive positions (a prompt chunk, or one decode token), cut into
 * pieces of at most FORWARD_ATTN_ROWS rows so that a long prompt still
 * gives every thread work. */
#define FORWARD_ATTN_ROWS 16

typedef struct attn_run {
    int first; /* batch index of the first token */
    int n;     /* tokens in the run */
} attn_run;

struct model_state {
    int max_batch_tokens, max_ctx;
    float *x;      /* [max_batch_tokens][dim] residual stream */
    float *xb;     /* [max_batch_tokens][dim] normed input of a block */
    float *xb2;    /* [max_batch_tokens][dim] block output before the residual add */
    float *q;      /* [max_batch_tokens][q_dim] */
    float *k, *v;  /* [max_batch_tokens][kv_dim] */
    float *att;    /* [max_batch_tokens][q_dim] attention output */
    float *hb;     /* [max_batch_tokens][hidden] */
    float *hb2;    /* [max_batch_tokens][hidden] */
    float *xout;   /* [max_batch_tokens][dim] final rows that want logits */
    float *logits; /* [n_logits_cap][n_vocab] */
    int n_logits_cap;
    float *hidden; /* [max_batch_tokens][dim] rows that want hidden states (made on first use) */
    int n_hidden;  /* rows of the last forward */
    void *ws;      /* matmul workspace */
    size_t ws_bytes;
    float *att_scratch; /* [n_scratch_threads][forward_attn_scratch floats] */
    attn_run *runs;     /* [max_batch_tokens] */
    int n_scratch_threads;
    model_recipe *trace;    /* borrowed, [n_layers]: the steps run (model_state_set_trace) */
    model_moe_scratch *moe; /* owned; the experts' scratch, NULL for a dense model */
};

/* Attention scratch of one thread, in floats: scores of a task's heads (at
 * most one GQA group) x rows x positions. */
static size_t forward_attn_scratch(const model_config *c, int max_ctx) {
    return (size_t)(c->n_heads / c->n_kv_heads) * FORWARD_ATTN_ROWS * (size_t)max_ctx;
}

static float *forward_alloc(size_t n) {
    return aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
}

static size_t forward_max_ws(const model *m, int n_tok) {
    const model_layer *L = &m->w.layers[0];
    const model_matrix *mats[] = {&L->wq,     &L->wk,   &L->wv,     &L->wo,
                                  &L->w_gate, &L->w_up, &L->w_down, &m->w.output};
    size_t best = 64;
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        size_t b = kern_matmul_ws_bytes(mats[i]->type, mats[i]->n_in, n_tok);
        if (b > best)
            best = b;
    }
    /* Every layer has the same shapes and types, except that conversion may
     * fall back per tensor; scan them all to be safe. */
    for (int l = 0; l < m->cfg.n_layers && m->cfg.n_expert > 0; l++) {
        model_moe_weights mw = model_moe_layer(&m->cfg, &m->w.layers[l]);
        size_t b = model_moe_ws_bytes(&mw, n_tok);
        if (b > best)
            best = b;
    }
    for (int l = 1; l < m->cfg.n_layers; l++) {
        const model_layer *Ll = &m->w.layers[l];
        const model_matrix *ml[] = {&Ll->wq,     &Ll->wk,   &Ll->wv,    &Ll->wo,
                                    &Ll->w_gate, &Ll->w_up, &Ll->w_down};
        for (size_t i = 0; i < sizeof ml / sizeof ml[0]; i++) {
            size_t b = kern_matmul_ws_bytes(ml[i]->type, ml[i]->n_in, n_tok);
            if (b > best)
                best = b;
        }
    }
    return best;
}

model_state *model_state_create(const model *m, int max_batch_tokens, int max_ctx) {
    if (max_batch_tokens <= 0 || max_ctx <= 0)
        return NULL;
    const model_config *c = &m->cfg;
    model_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    size_t T = (size_t)max_batch_tokens;
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    st->max_batch_tokens = max_batch_tokens;
    st->max_ctx = max_ctx;
    st->x = forward_alloc(T * c->dim);
    st->xb = forward_alloc(T * c->dim);
    st->xb2 = forward_alloc(T * c->dim);
    st->q = forward_alloc(T * q_dim);
    st->k = forward_alloc(T * kv_dim);
    st->v = forward_alloc(T * kv_dim);
    st->att = forward_alloc(T * q_dim);
    /* The dense MLP's products; a mixture of experts has its own scratch. */
    size_t hidden = c->n_expert > 0 ? 1 : (size_t)c->hidden_dim;
    st->hb = forward_alloc(T * hidden);
    st->hb2 = forward_alloc(T * hidden);
    st->xout = forward_alloc(T * c->dim);
    st->runs = malloc(T * sizeof *st->runs);
    st->ws_bytes = forward_max_ws(m, max_batch_tokens);
    st->ws = aligned_alloc(64, (st->ws_bytes + 63) & ~(size_t)63);
    if (c->n_expert > 0) {
        model_moe_weights mw = model_moe_layer(c, &m->w.layers[0]);
        if (!(st->moe = model_moe_scratch_create(&mw, max_batch_tokens))) {
            model_state_free(st);
            return NULL;
        }
    }
    if (!st->x || !st->xb || !st->xb2 || !st->q || !st->k || !st->v || !st->att || !st->hb ||
        !st->hb2 || !st->xout || !st->ws || !st->runs) {
        model_state_free(st);
        return NULL;
    }
    return st;
}

void model_state_free(model_state *st) {
    if (!st)
        return;
    free(st->x);
    free(st->xb);
    free(st->xb2);
    free(st->q);
    free(st->k);
    free(st->v);
    free(st->att);
    free(st->hb);
    free(st->hb2);
    free(st->xout);
    free(st->logits);
    free(st->hidden);
    free(st->ws);
    free(st->att_scratch);
    free(st->runs);
    model_moe_scratch_free(st->moe);
    free(st);
}

/* ---- parallel pieces ------------------------------------------------------ */

typedef struct norm_job {
    float *out;
    const float *x;
    const float *w;
    int dim;
    float eps;
} norm_job;

static void forward_norm_task(void *ctx, int t, int thread) {
    norm_job *j = ctx;
    size_t off = (size_t)t * (size_t)j->dim;
    kern_rmsnorm(j->out + off, j->x + off, j->w, j->dim, j->eps);
}

/* Below this many tokens a row op is cheaper done inline than dispatched. */
#define FORWARD_INLINE_ROWS 4

static void forward_rmsnorm(kern_pool *pool, float *out, const float *x, const float *w, int n,
                            int dim, float eps) {
    norm_job j = {out, x, w, dim, eps};
    if (n <= FORWARD_INLINE_ROWS) {
        for (int t = 0; t < n; t++)
            forward_norm_task(&j, t, 0);
    } else {
        kern_pool_run(pool, forward_norm_task, &j, n);
    }
}

/* The per-token steps between the projections and attention (QKV_BIAS,
 * QK_NORM, ROPE, KV_STORE: a run of the recipe), done for one token at a
 * time in one task, so that a token's q/k/v stay in cache between them. */
typedef struct rope_job {
    const model *m;
    const model_batch *b;
    model_state *st;
    kv_cache *kv;
    int layer;
    const uint8_t *steps; /* the run of the layer's recipe */
    int n_steps;
} rope_job;

/* Is s one of the per-token steps forward_qkv_post_task runs? */
static int forward_step_per_token(int s) {
    return s == MODEL_STEP_QKV_BIAS || s == MODEL_STEP_QK_NORM || s == MODEL_STEP_ROPE ||
           s == MODEL_STEP_KV_STORE;
}

static void forward_rope_token(const rope_job *j, int t, float *q, float *k) {
    const model_config *c = &j->m->cfg;
    const model_layer *L = &j->m->w.layers[j->layer];
    const model_weights *w = &j->m->w;
    int pos = j->b->pos[t];
    /* phi3 LongRoPE: the long factors where a sequence's context exceeds
     * the original one, as llama.cpp chooses them. */
    const float *freqs = w->rope_freqs                                       ? w->rope_freqs
                         : w->rope_long && j->st->max_ctx > c->rope_orig_ctx ? w->rope_long
                                                                             : w->rope_short;
    const float fscale = L->rope_freq_scale != 0.0f ? L->rope_freq_scale : c->rope_freq_scale;
    kern_rope(q, c->n_heads, c->head_dim, c->n_rot, pos, L->rope_base, fscale, freqs, c->rope_mode);
    kern_rope(k, c->n_kv_heads, c->head_dim, c->n_rot, pos, L->rope_base, fscale, freqs,
              c->rope_mode);
    if (c->rope_attn_factor != 1.0f) /* LongRoPE's scale of the rotated dims */
        for (int h = 0; h < c->n_heads + c->n_kv_heads; h++) {
            float *x = h < c->n_heads ? q + (size_t)h * c->head_dim
                                      : k + (size_t)(h - c->n_heads) * c->head_dim;
            for (int d = 0; d < c->n_rot; d++)
                x[d] *= c->rope_attn_factor;
        }
}

static void forward_kv_store_token(const rope_job *j, int t, const float *k, const float *v) {
    const model_config *c = &j->m->cfg;
    kern_kv_view view;
    kv_cache_view(j->kv, j->layer, j->b->seq[t], &view); /* indices validated up front */
    /* Copied, rounded to f16, or quantized (one position's codes and scales:
     * nothing another position wrote changes, so batch invariance holds). */
    kern_kv_store(&view, j->b->pos[t], k, v, c->n_kv_heads * c->head_dim, c->head_dim);
}

/* Token t's run of per-token steps, in the recipe's order. */
static void forward_qkv_post_task(void *ctx, int t, int thread) {
    rope_job *j = ctx;
    const model_config *c = &j->m->cfg;
    const model_layer *L = &j->m->w.layers[j->layer];
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    float *q = j->st->q + (size_t)t * q_dim;
    float *k = j->st->k + (size_t)t * kv_dim;
    float *v = j->st->v + (size_t)t * kv_dim;
    for (int i = 0; i < j->n_steps; i++) {
        switch (j->steps[i]) {
        case MODEL_STEP_QKV_BIAS:
            for (int d = 0; d < q_dim; d++)
                q[d] += L->bq[d];
            for (int d = 0; d < kv_dim; d++)
                k[d] += L->bk[d];
            for (int d = 0; d < kv_dim; d++)
                v[d] += L->bv[d];
            break;
        case MODEL_STEP_QK_NORM: /* each head normalised with the layer's weight */
            if (c->has_qk_norm == MODEL_QK_NORM_FULL) { /* olmoe: the whole of q and of k */
                kern_rmsnorm(q, q, L->q_norm, q_dim, c->norm_eps);
                kern_rmsnorm(k, k, L->k_norm, kv_dim, c->norm_eps);
                break;
            }
            for (int h = 0; h < c->n_heads; h++)
                kern_rmsnorm(q + (size_t)h * c->head_dim, q + (size_t)h * c->head_dim, L->q_norm,
                             c->head_dim, c->norm_eps);
            for (int h = 0; h < c->n_kv_heads; h++)
                kern_rmsnorm(k + (size_t)h * c->head_dim, k + (size_t)h * c->head_dim, L->k_norm,
                             c->head_dim, c->norm_eps);
            break;
        case MODEL_STEP_ROPE: forward_rope_token(j, t, q, k); break;
        case MODEL_STEP_KV_STORE: forward_kv_store_token(j, t, k, v); break;
        }
    }
}

typedef struct attn_job {
    const model *m;
    const model_batch *b;
    model_state *st;
    kv_cache *kv;
    int layer;
    const attn_run *runs;
    int n_runs;
    int heads_per_task; /* the GQA group, or 1 when that leaves threads idle */
} attn_job;

/* Task = (run, heads_per_task query heads of one KV group): their causal
 * attention for the run's tokens, every K/V row load shared by those heads.
 * Tasks go out last run first: later runs of a prompt attend over more
 * positions, and starting the long ones first evens out the threads. */
static void forward_attn_task(void *ctx, int task, int thread) {
    attn_job *j = ctx;
    const model_config *c = &j->m->cfg;
    int hpt = j->heads_per_task;
    int tasks_per_run = c->n_heads / hpt;
    const attn_run *run = &j->runs[j->n_runs - 1 - task / tasks_per_run];
    int h = task % tasks_per_run * hpt; /* first query head */
    int q_dim = c->n_heads * c->head_dim;
    int t0 = run->first;
    kern_kv_view view;
    kv_cache_view(j->kv, j->layer, j->b->seq[t0], &view);
    view.window = j->m->w.layers[j->layer].window; /* Gemma's local layers, Mistral */
    view.softcap = c->attn_softcap;                /* Gemma 2 */
    int group = c->n_heads / c->n_kv_heads;
    float scale = c->attn_scale;
    float *scratch = j->st->att_scratch + (size_t)thread * forward_attn_scratch(c, j->st->max_ctx);
    size_t off = (size_t)t0 * q_dim + (size_t)h * c->head_dim;
    if (hpt == c->n_heads) /* every group of the run: whole cache rows read once */
        kern_attention_rows_all(j->st->att + off, (size_t)q_dim, j->st->q + off, (size_t)q_dim,
                                run->n, hpt, c->n_kv_heads, j->b->pos[t0], &view, c->head_dim,
                                scale, scratch);
    else
        kern_attention_rows_gqa(j->st->att + off, (size_t)q_dim, j->st->q + off, (size_t)q_dim,
                                run->n, hpt, j->b->pos[t0], &view, h / group, c->head_dim, scale,
                                scratch);
}

/* Splits the batch into attention runs; returns their count. */
static int forward_attn_runs(const model_batch *b, attn_run *runs) {
    int n_runs = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        attn_run *last = n_runs ? &runs[n_runs - 1] : NULL;
        int t = last ? last->first + last->n - 1 : -1;
        if (last && last->n < FORWARD_ATTN_ROWS && b->seq[i] == b->seq[t] &&
            b->pos[i] == b->pos[t] + 1) {
            last->n++;
        } else {
            runs[n_runs].first = i;
            runs[n_runs].n = 1;
            n_runs++;
        }
    }
    return n_runs;
}

typedef struct mlp_job {
    float *hb;
    const float *hb2;
    int hidden;
    int gelu; /* MODEL_ACT_GELU_TANH: GELU (tanh form) instead of SiLU */
} mlp_job;

static void forward_silu_task(void *ctx, int t, int thread) {
    mlp_job *j = ctx;
    size_t off = (size_t)t * (size_t)j->hidden;
    if (j->gelu)
        kern_gelu_tanh_mul(j->hb + off, j->hb + off, j->hb2 + off, j->hidden);
    else
        kern_silu_mul(j->hb + off, j->hb + off, j->hb2 + off, j->hidden);
}

/* ---- the pass ------------------------------------------------------------- */

int model_batch_validate(const model *m, kv_cache *kv, const model_batch *b, int max_batch_tokens,
                         int max_ctx) {
    if (b->n_tokens <= 0 || b->n_tokens > max_batch_tokens)
        return BRISK_ERANGE;
    int n_seqs = kv_cache_n_seqs(kv);
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= m->cfg.n_vocab)
            return BRISK_EINVAL;
        if (b->seq[i] < 0 || b->seq[i] >= n_seqs)
            return BRISK_ERANGE;
        /* Only positions the slot has blocks for can be written (a paged
         * slot grows through kv_cache_seq_grow before its step). */
        if (b->pos[i] < 0 || b->pos[i] >= max_ctx ||
            b->pos[i] >= kv_cache_seq_capacity(kv, b->seq[i]))
            return BRISK_ERANGE;
    }
    return 0;
}

static int forward_reserve(const model *m, model_state *st, int n_threads, int n_out, int n_vocab) {
    if (n_threads > st->n_scratch_threads) {
        free(st->att_scratch);
        st->att_scratch =
            forward_alloc((size_t)n_threads * forward_attn_scratch(&m->cfg, st->max_ctx));
        st->n_scratch_threads = st->att_scratch ? n_threads : 0;
        if (!st->att_scratch)
            return BRISK_ENOMEM;
    }
    if (n_out > st->n_logits_cap) {
        free(st->logits);
        st->logits = forward_alloc((size_t)n_out * (size_t)n_vocab);
        st->n_logits_cap = st->logits ? n_out : 0;
        if (!st->logits)
            return BRISK_ENOMEM;
    }
    return 0;
}

static void forward_matmul(kern_pool *pool, model_state *st, const model_matrix *w, const float *x,
                           int n_tok, float *y) {
    kern_matmul(pool, w->type, w->data, w->n_out, w->n_in, x, n_tok, y, st->ws);
}

/* Matrices that read the same input (q/k/v; gate/up) in one pool run:
 * one dispatch and one join instead of one each, the activations quantized
 * once. The results are the bits separate calls give (kern_matmul_multi). */
static void forward_matmul_multi(kern_pool *pool, model_state *st, const model_matrix *const *w,
                                 int n_w, const float *x, int n_tok, float *const *y) {
    kern_matmul_part parts[KERN_MATMUL_MAX_PARTS];
    for (int i = 0; i < n_w; i++)
        parts[i] =
            (kern_matmul_part){.wt = w[i]->type, .W = w[i]->data, .n_out = w[i]->n_out, .y = y[i]};
    kern_matmul_multi(pool, parts, n_w, w[0]->n_in, x, n_tok, st->ws);
}

/* Runs step steps[i] of layer l (with the per-token steps that follow it,
 * as one task) and returns the index of the next step to run, or
 * BRISK_EUNSUPPORTED for a step this pass does not know. */
static int forward_step(const model *m, model_state *st, kv_cache *kv, kern_pool *pool,
                        const model_batch *b, int l, const uint8_t *steps, int n_steps, int i,
                        int n_runs, int attn_hpt) {
    const model_config *c = &m->cfg;
    const model_layer *L = &m->w.layers[l];
    const int n = b->n_tokens, dim = c->dim;
    switch (steps[i]) {
    case MODEL_STEP_ATTN_NORM:
        forward_rmsnorm(pool, st->xb, st->x, L->attn_norm, n, dim, c->norm_eps);
        return i + 1;
    case MODEL_STEP_QKV: {
        const model_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {st->q, st->k, st->v};
        forward_matmul_multi(pool, st, qkv, 3, st->xb, n, qkv_out);
        return i + 1;
    }
    case MODEL_STEP_QKV_BIAS:
    case MODEL_STEP_QK_NORM:
    case MODEL_STEP_ROPE:
    case MODEL_STEP_KV_STORE: {
        int k = i;
        while (k < n_steps && forward_step_per_token(steps[k]))
            k++;
        rope_job rj = {m, b, st, kv, l, steps + i, k - i};
        if (n <= FORWARD_INLINE_ROWS) {
            for (int t = 0; t < n; t++)
                forward_qkv_post_task(&rj, t, 0);
        } else {
            kern_pool_run(pool, forward_qkv_post_task, &rj, n);
        }
        return k;
    }
    case MODEL_STEP_ATTENTION: { /* causal, every token over its own sequence */
        attn_job aj = {m, b, st, kv, l, st->runs, n_runs, attn_hpt};
        kern_pool_run(pool, forward_attn_task, &aj, n_runs * (c->n_heads / attn_hpt));
        return i + 1;
    }
    case MODEL_STEP_ATTN_OUT: forward_matmul(pool, st, &L->wo, st->att, n, st->xb2); return i + 1;
    case MODEL_STEP_POST_ATTN_NORM:
        forward_rmsnorm(pool, st->xb2, st->xb2, L->post_attn_norm, n, dim, c->norm_eps);
        return i + 1;
    case MODEL_STEP_RESIDUAL:
        for (size_t e = 0; e < (size_t)n * dim; e++)
            st->x[e] += st->xb2[e];
        return i + 1;
    case MODEL_STEP_FFN_NORM:
        forward_rmsnorm(pool, st->xb, st->x, L->ffn_norm, n, dim, c->norm_eps);
        return i + 1;
    case MODEL_STEP_GATE_UP: {
        const model_matrix *gate_up[2] = {&L->w_gate, &L->w_up};
        float *gate_up_out[2] = {st->hb, st->hb2};
        forward_matmul_multi(pool, st, gate_up, 2, st->xb, n, gate_up_out);
        return i + 1;
    }
    case MODEL_STEP_ACT: {
        mlp_job mj = {st->hb, st->hb2, c->hidden_dim, c->act == MODEL_ACT_GELU_TANH};
        if (n <= FORWARD_INLINE_ROWS) {
            for (int t = 0; t < n; t++)
                forward_silu_task(&mj, t, 0);
        } else {
            kern_pool_run(pool, forward_silu_task, &mj, n);
        }
        return i + 1;
    }
    case MODEL_STEP_DOWN: forward_matmul(pool, st, &L->w_down, st->hb, n, st->xb2); return i + 1;
    case MODEL_STEP_POST_FFN_NORM:
        forward_rmsnorm(pool, st->xb2, st->xb2, L->post_ffn_norm, n, dim, c->norm_eps);
        return i + 1;
    case MODEL_STEP_MOE: { /* tokens grouped by expert: each expert's weights read once */
        model_moe_weights mw = model_moe_layer(c, L);
        int rc = model_moe_ffn(pool, &mw, st->xb, n, st->xb2, st->moe, st->ws, NULL);
        return rc < 0 ? rc : i + 1;
    }
    }
    return BRISK_EUNSUPPORTED;
}

int model_forward(const model *m, model_state *st, kv_cache *kv, kern_pool *pool,
                  const model_batch *b, float **logits, int *n_out) {
    const model_config *c = &m->cfg;
    const model_weights *w = &m->w;
    int rc = model_batch_validate(m, kv, b, st->max_batch_tokens, st->max_ctx);
    if (rc < 0)
        return rc;
    int n = b->n_tokens;
    int n_want = 0;
    for (int i = 0; i < n; i++)
        n_want += b->want_logits ? (b->want_logits[i] != 0) : (i == n - 1);
    rc = forward_reserve(m, st, pool ? kern_pool_size(pool) : 1, n_want, c->n_vocab);
    if (rc < 0)
        return rc;
    st->n_hidden = 0;
    if (b->want_hidden && !st->hidden &&
        !(st->hidden = forward_alloc((size_t)st->max_batch_tokens * c->dim)))
        return BRISK_ENOMEM;

    const int dim = c->dim;
    int n_runs = forward_attn_runs(b, st->runs);
    /* One task per (run, KV group) shares K/V loads among the group's query
     * heads; with too few runs to keep the threads busy (decode) a task is
     * one query head. Either way every head's output is the same bits. */
    int n_threads = pool ? kern_pool_size(pool) : 1;
    /* Heads per attention task: a GQA group, or one head when there are too
     * few runs to keep the threads busy; a step of many single-token runs
     * (decode of many sequences) gives each run one task over all its
     * groups, which reads the sequence's cache rows whole and once
     * (kern_attention_rows_all: decode attention of 16 sequences, 1 Zen 4
     * thread, 14.5 -> 12 ms). */
    /* Otherwise the largest divisor of the group that still leaves a task
     * per thread: each KV row is then read by fewer tasks. One sequence's
     * decode (kern_bench 2 kvq, SmolLM2 shape, f16 at 512 / 4,000 / 6,000
     * positions, 2 threads): a task per KV head (3 tasks) 1.7 / 31 / 49 ms a
     * token against 2.8 / 46 / 90 with a task per query head (9 tasks, every
     * KV row read three times); Gemma 3 270M (4 heads, 1 KV head) gets tasks
     * of 2 heads. */
    const int group = c->n_heads / c->n_kv_heads;
    int attn_hpt = 1;
    for (int d = group; d > 1 && attn_hpt == 1; d--)
        if (group % d == 0 && n_runs * (c->n_heads / d) >= n_threads)
            attn_hpt = d;
    if (n_runs >= 4 * n_threads && n == n_runs)
        attn_hpt = c->n_heads;
    /* 1. Token embeddings: one row of the table per token. */
    size_t embd_row = kern_row_bytes(w->tok_embd.type, dim);
    for (int i = 0; i < n; i++) {
        if (kern_type_is_x8(w->tok_embd.type)) /* tied to an int8 output in X8 form */
            kern_x8_dequantize_row(w->tok_embd.type, w->tok_embd.data, dim, b->tokens[i],
                                   st->x + (size_t)i * dim);
        else
            kern_dequantize_row(w->tok_embd.type,
                                (const uint8_t *)w->tok_embd.data + (size_t)b->tokens[i] * embd_row,
                                st->x + (size_t)i * dim, dim);
        if (c->embd_scale != 0.0f) /* gemma: embeddings times sqrt(dim) */
            for (int d = 0; d < dim; d++)
                st->x[(size_t)i * dim + d] *= c->embd_scale;
    }

    /* 2. The layers, each as its recipe says (model_recipe.h). */
    for (int l = 0; l < c->n_layers; l++) {
        model_recipe r;
        model_layer_recipe(c, &w->layers[l], &r);
        for (int i = 0; i < r.n;) {
            int k = forward_step(m, st, kv, pool, b, l, r.step, r.n, i, n_runs, attn_hpt);
            if (k < 0)
                return k;
            for (; i < k; i++)
                model_recipe_trace(st->trace, l, (model_step)r.step[i]);
        }
    }

    /* 3. Hidden states asked for: the final norm of their rows. */
    st->n_hidden = 0;
    for (int i = 0; b->want_hidden && i < n; i++)
        if (b->want_hidden[i])
            memcpy(st->hidden + (size_t)st->n_hidden++ * dim, st->x + (size_t)i * dim,
                   (size_t)dim * sizeof(float));
    if (st->n_hidden > 0)
        forward_rmsnorm(pool, st->hidden, st->hidden, w->output_norm, st->n_hidden, dim,
                        c->norm_eps);

    /* 4. Final norm and the output projection, only for rows that want logits. */
    int r = 0;
    for (int i = 0; i < n; i++) {
        int want = b->want_logits ? (b->want_logits[i] != 0) : (i == n - 1);
        if (want)
            memcpy(st->xout + (size_t)r++ * dim, st->x + (size_t)i * dim,
                   (size_t)dim * sizeof(float));
    }
    if (n_want > 0) {
        forward_rmsnorm(pool, st->xout, st->xout, w->output_norm, n_want, dim, c->norm_eps);
        forward_matmul(pool, st, &w->output, st->xout, n_want, st->logits);
        if (c->final_softcap > 0.0f) /* gemma2: logits -> cap * tanh(logit / cap) */
            for (size_t i = 0; i < (size_t)n_want * c->n_vocab; i++)
                st->logits[i] = c->final_softcap * tanhf(st->logits[i] / c->final_softcap);
    }
    *logits = st->logits;
    *n_out = n_want;
    return 0;
}

void model_state_set_trace(model_state *st, model_recipe *trace) {
    st->trace = trace;
}

const float *model_state_hidden(const model_state *st, int *n_rows) {
    *n_rows = st->n_hidden;
    return st->n_hidden ? st->hidden : NULL;
}
