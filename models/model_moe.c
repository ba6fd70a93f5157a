/* model_moe.c - the mixture-of-experts MLP on the CPU (model_moe.h). */
#include "models/model_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

struct model_moe_scratch {
    int max_tokens;
    int n_expert, n_used, dim, hidden;
    float *logits;  /* [max_tokens][n_expert] */
    int32_t *ids;   /* [max_tokens][n_used] */
    float *weights; /* [max_tokens][n_used] */
    int *start;     /* [n_expert + 1]: expert e's entries are order[start[e] .. start[e + 1]) */
    int32_t *order; /* [max_tokens * n_used]: token * n_used + slot, by expert then token */
    float *xg;      /* [max_tokens][dim] the rows routed to one expert, gathered */
    float *g, *u;   /* [max_tokens][hidden] its gate and up products */
    float *yg;      /* [max_tokens][dim] its outputs */
};

model_moe_weights model_moe_layer(const model_config *c, const model_layer *L) {
    return (model_moe_weights){.router = &L->router,
                               .gate = &L->exps_gate,
                               .up = &L->exps_up,
                               .down = &L->exps_down,
                               .n_expert = c->n_expert,
                               .n_used = c->n_expert_used,
                               .dim = c->dim,
                               .hidden = c->expert_hidden,
                               .norm_topk = c->moe_norm_topk,
                               .act = c->act};
}

void model_moe_route(const float *logits, int n_expert, int n_used, int norm_topk, int32_t *ids,
                     float *weights) {
    /* Softmax over all experts, max subtracted; only the chosen ones'
     * probabilities are kept, so the sum is computed on the way. */
    float mx = logits[0];
    for (int e = 1; e < n_expert; e++)
        if (logits[e] > mx)
            mx = logits[e];
    float sum = 0.0f;
    for (int e = 0; e < n_expert; e++)
        sum += expf(logits[e] - mx);
    /* Top n_used by selection: k passes over the experts, each taking the
     * largest logit not yet chosen; strict > keeps the lower index on a tie
     * (the softmax is monotonic, so logits and probabilities order alike). */
    for (int k = 0; k < n_used; k++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= ids[j] == e;
            if (taken)
                continue;
            if (best < 0 || logits[e] > logits[best])
                best = e;
        }
        ids[k] = best;
        weights[k] = expf(logits[best] - mx) / sum;
    }
    if (norm_topk) {
        float s = 0.0f;
        for (int k = 0; k < n_used; k++)
            s += weights[k];
        for (int k = 0; k < n_used; k++)
            weights[k] /= s;
    }
}

size_t model_moe_ws_bytes(const model_moe_weights *w, int n_tok) {
    size_t a = kern_matmul_ws_bytes(w->router->type, w->dim, n_tok);
    size_t b = kern_matmul_ws_bytes(w->gate->type, w->dim, n_tok);
    size_t c = kern_matmul_ws_bytes(w->up->type, w->dim, n_tok);
    size_t d = kern_matmul_ws_bytes(w->down->type, w->hidden, n_tok);
    size_t m = a > b ? a : b;
    m = m > c ? m : c;
    return m > d ? m : d;
}

static void *moe_alloc(size_t n, size_t elem) {
    return aligned_alloc(64, (n * elem + 63) & ~(size_t)63);
}

model_moe_scratch *model_moe_scratch_create(const model_moe_weights *w, int max_tokens) {
    if (max_tokens <= 0 || w->n_expert <= 0 || w->n_used <= 0)
        return NULL;
    model_moe_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    size_t T = (size_t)max_tokens;
    s->max_tokens = max_tokens;
    s->n_expert = w->n_expert;
    s->n_used = w->n_used;
    s->dim = w->dim;
    s->hidden = w->hidden;
    s->logits = moe_alloc(T * w->n_expert, sizeof(float));
    s->ids = moe_alloc(T * w->n_used, sizeof(int32_t));
    s->weights = moe_alloc(T * w->n_used, sizeof(float));
    s->start = moe_alloc((size_t)w->n_expert + 1, sizeof(int));
    s->order = moe_alloc(T * w->n_used, sizeof(int32_t));
    s->xg = moe_alloc(T * w->dim, sizeof(float));
    s->g = moe_alloc(T * w->hidden, sizeof(float));
    s->u = moe_alloc(T * w->hidden, sizeof(float));
    s->yg = moe_alloc(T * w->dim, sizeof(float));
    if (!s->logits || !s->ids || !s->weights || !s->start || !s->order || !s->xg || !s->g ||
        !s->u || !s->yg) {
        model_moe_scratch_free(s);
        return NULL;
    }
    return s;
}

void model_moe_scratch_free(model_moe_scratch *s) {
    if (!s)
        return;
    free(s->logits);
    free(s->ids);
    free(s->weights);
    free(s->start);
    free(s->order);
    free(s->xg);
    free(s->g);
    free(s->u);
    free(s->yg);
    free(s);
}

typedef struct act_job {
    float *g;
    const float *u;
    int hidden;
    int gelu;
} act_job;

static void moe_act_task(void *ctx, int t, int thread) {
    (void)thread;
    act_job *j = ctx;
    size_t off = (size_t)t * (size_t)j->hidden;
    if (j->gelu)
        kern_gelu_tanh_mul(j->g + off, j->g + off, j->u + off, j->hidden);
    else
        kern_silu_mul(j->g + off, j->g + off, j->u + off, j->hidden);
}

int model_moe_ffn(kern_pool *pool, const model_moe_weights *w, const float *x, int n_tok, float *y,
                  model_moe_scratch *s, void *ws, int32_t *ids_out) {
    if (n_tok <= 0 || n_tok > s->max_tokens || w->n_expert != s->n_expert ||
        w->n_used != s->n_used || w->dim != s->dim || w->hidden != s->hidden)
        return BRISK_ERANGE;
    const int E = w->n_expert, K = w->n_used, dim = w->dim, H = w->hidden;
    /* 1. Router logits, f32, for every token at once. */
    kern_matmul(pool, w->router->type, w->router->data, E, dim, x, n_tok, s->logits, ws);
    /* 2. Each token's experts and weights. */
    for (int t = 0; t < n_tok; t++)
        model_moe_route(s->logits + (size_t)t * E, E, K, w->norm_topk, s->ids + (size_t)t * K,
                        s->weights + (size_t)t * K);
    if (ids_out)
        memcpy(ids_out, s->ids, (size_t)n_tok * K * sizeof *ids_out);
    /* Group the (token, slot) pairs by expert, tokens ascending within an
     * expert (a counting sort: the order is a function of the routing only). */
    memset(s->start, 0, ((size_t)E + 1) * sizeof *s->start);
    for (int i = 0; i < n_tok * K; i++)
        s->start[s->ids[i] + 1]++;
    for (int e = 0; e < E; e++)
        s->start[e + 1] += s->start[e];
    int *fill = s->start; /* advanced per entry below, then restored */
    for (int i = 0; i < n_tok * K; i++)
        s->order[fill[s->ids[i]]++] = i;
    for (int e = E; e > 0; e--)
        fill[e] = fill[e - 1];
    fill[0] = 0;
    /* 3. Expert by expert, in ascending index: gather its tokens' rows, run
     * its gate/up (one pool run), the activation and its down, then add
     * each output row, weighted, into its token's sum. A token's experts
     * therefore add in ascending index, whatever the batch. */
    memset(y, 0, (size_t)n_tok * dim * sizeof *y);
    for (int e = 0; e < E; e++) {
        const int n = s->start[e + 1] - s->start[e];
        if (n == 0)
            continue; /* nobody picked it: its weights are not read */
        const int32_t *ent = s->order + s->start[e];
        for (int r = 0; r < n; r++)
            memcpy(s->xg + (size_t)r * dim, x + (size_t)(ent[r] / K) * dim,
                   (size_t)dim * sizeof(float));
        model_matrix g = model_matrix_expert(w->gate, E, e), u = model_matrix_expert(w->up, E, e),
                     d = model_matrix_expert(w->down, E, e);
        kern_matmul_part parts[2] = {{.wt = g.type, .W = g.data, .n_out = H, .y = s->g},
                                     {.wt = u.type, .W = u.data, .n_out = H, .y = s->u}};
        kern_matmul_multi(pool, parts, 2, dim, s->xg, n, ws);
        act_job aj = {s->g, s->u, H, w->act == MODEL_ACT_GELU_TANH};
        if (n <= 4) { /* a few rows: cheaper inline than dispatched */
            for (int r = 0; r < n; r++)
                moe_act_task(&aj, r, 0);
        } else {
            kern_pool_run(pool, moe_act_task, &aj, n);
        }
        kern_matmul(pool, d.type, d.data, dim, H, s->g, n, s->yg, ws);
        for (int r = 0; r < n; r++) {
            const float wt = s->weights[ent[r]];
            float *dst = y + (size_t)(ent[r] / K) * dim;
            const float *src = s->yg + (size_t)r * dim;
            for (int i = 0; i < dim; i++)
                dst[i] += wt * src[i];
        }
    }
    return 0;
}

/* ---- reference -------------------------------------------------------------- */

/* Row r of matrix m as floats (X8 forms through their own dequantizer). */
static void moe_ref_row(const model_matrix *m, int r, float *out) {
    if (kern_type_is_x8(m->type))
        kern_x8_dequantize_row(m->type, m->data, m->n_in, r, out);
    else
        kern_dequantize_row(m->type,
                            (const uint8_t *)m->data + kern_row_bytes(m->type, m->n_in) * (size_t)r,
                            out, m->n_in);
}

/* out[n_out] = m x in double, x of m->n_in. */
static void moe_ref_matvec(const model_matrix *m, const double *x, double *out, float *row) {
    for (int o = 0; o < m->n_out; o++) {
        moe_ref_row(m, o, row);
        double acc = 0.0;
        for (int i = 0; i < m->n_in; i++)
            acc += (double)row[i] * x[i];
        out[o] = acc;
    }
}

int model_moe_ffn_ref(const model_moe_weights *w, const float *x, int n_tok, float *y) {
    const int E = w->n_expert, K = w->n_used, dim = w->dim, H = w->hidden;
    const int wide = dim > H ? dim : H;
    double *xd = malloc((size_t)wide * sizeof *xd), *g = malloc((size_t)H * sizeof *g);
    double *u = malloc((size_t)H * sizeof *u), *o = malloc((size_t)dim * sizeof *o);
    double *acc = malloc((size_t)dim * sizeof *acc);
    double *ld = malloc((size_t)E * sizeof *ld);
    float *row = malloc((size_t)wide * sizeof *row), *lf = malloc((size_t)E * sizeof *lf);
    int32_t *ids = malloc((size_t)K * sizeof *ids);
    float *wts = malloc((size_t)K * sizeof *wts);
    int rc = xd && g && u && o && acc && ld && row && lf && ids && wts ? 0 : BRISK_ENOMEM;
    for (int t = 0; rc == 0 && t < n_tok; t++) {
        const float *xt = x + (size_t)t * dim;
        for (int i = 0; i < dim; i++)
            xd[i] = xt[i];
        /* Router logits in double, rounded once to the f32 the routing reads. */
        moe_ref_matvec(w->router, xd, ld, row);
        for (int e = 0; e < E; e++)
            lf[e] = (float)ld[e];
        model_moe_route(lf, E, K, w->norm_topk, ids, wts);
        for (int i = 0; i < dim; i++)
            acc[i] = 0.0;
        for (int k = 0; k < K; k++) {
            model_matrix mg = model_matrix_expert(w->gate, E, ids[k]);
            model_matrix mu = model_matrix_expert(w->up, E, ids[k]);
            model_matrix md = model_matrix_expert(w->down, E, ids[k]);
            moe_ref_matvec(&mg, xd, g, row);
            moe_ref_matvec(&mu, xd, u, row);
            for (int h = 0; h < H; h++) {
                double a = g[h];
                if (w->act == MODEL_ACT_GELU_TANH)
                    a = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
                else
                    a = a / (1.0 + exp(-a));
                g[h] = a * u[h];
            }
            moe_ref_matvec(&md, g, o, row);
            for (int i = 0; i < dim; i++)
                acc[i] += (double)wts[k] * o[i];
        }
        for (int i = 0; i < dim; i++)
            y[(size_t)t * dim + i] = (float)acc[i];
    }
    free(xd), free(g), free(u), free(o), free(acc), free(ld), free(row), free(lf), free(ids),
        free(wts);
    return rc;
}
