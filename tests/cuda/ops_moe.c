/* ops_moe.c - the mixture-of-experts MLP on the GPU (kern_cuda_moe_ffn,
 * kern_cuda_moe.cuh) against the CPU's readable reference,
 * model_moe_ffn_ref (models/model_moe.h), on random data (OPNAME "moe"):
 *
 *   MOE         y of n tokens against the reference on the very weights the
 *               device holds: the host matrices are made F16 or Q8_0 first
 *               and uploaded from those (exact, kern_cuda_weight_upload),
 *               so the two sides differ only in summation: f32 on the GPU,
 *               double in the reference, over at most a few hundred terms
 *               per product (~1e-7 relative) through the gated activation
 *               and the weighted sum: bound 2e-5 on ||y - ref|| / ||ref||.
 *               A wrong expert, weight or normalisation gives errors of
 *               order 1e-1 to 1.
 *   MOE_ROUTE   the chosen experts against model_moe_route on the
 *               reference's logits: exact (random logits are far apart
 *               next to f32 rounding; the tie cases make router rows equal,
 *               whose logits are then equal bits on both sides, so the
 *               lower index must win).
 *   MOE_BATCH   each token run alone (a batch of one) against the same token
 *               inside the batch on the same path: bit-identical (bound 0),
 *               the batch invariance the CPU path has too.
 *   Every case runs on both paths, forced (kern_cuda_moe_ffn_path): the
 *   per-pair GEMV and the grouped GEMM (tokens sorted by expert), each
 *   against the reference, and then
 *   MOE_AGREE   the grouped output against the GEMV's for the same inputs:
 *               the two differ only in f32 summation order (~1e-7 relative),
 *               bound 2e-5 as against the reference;
 *   MOE_AUTO    kern_cuda_moe_ffn against the path its size should take
 *               (GEMV up to KERN_CUDA_MOE_GROUPED_MIN tokens, grouped
 *               above): bit-identical;
 *   MOE_SKEW    (skewed cases) the premise: expert 0 on every token, expert
 *               n_expert - 1 on none (an expert nobody picks, one every
 *               token picks: empty and full groups of the sort).
 *   MOE args    bad sizes and a short workspace are refused (BRISK_EINVAL).
 * Shapes: top-2 of 8 up to top-16 of 256, k = n_expert, one token and
 * batches past the GEMV sizes (17, 64, 300 tokens, and 1,100: two chunks of
 * the grouped path), odd and unaligned widths (F16 scalar path),
 * F16 and INT8 experts (INT8 where the row length is a multiple of 32, as
 * the backend's matrix_wfmt), SiLU and GELU, renormalised or not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_moe.cuh"
#include "models/model_moe.h"
#include "tests/cuda/cuda_test.h"

#define MOE_BOUND 2e-5

typedef struct moe_case {
    int n_expert, n_used, dim, hidden, n_tok;
    int norm, gelu;
    int ties; /* router rows repeat every `ties` experts (0: all distinct) */
    int skew; /* 1: expert 0 chosen by every token, expert n_expert - 1 by none */
} moe_case;

static const char *moe_path_name(kern_cuda_moe_path path) {
    return path == KERN_CUDA_MOE_PATH_GROUPED ? "grouped" : "gemv";
}

/* A host matrix in type t (F16 or Q8_0) from random f32 rows, and its upload
 * into the device weight of the matching format. *data is owned by the
 * caller. */
static model_matrix moe_matrix(kern_cuda_wfmt fmt, int n_out, int n_in, float scale,
                               kern_cuda_weight *dev, void **data) {
    const kern_type t = fmt == KERN_CUDA_W_INT8 ? KERN_TYPE_Q8_0 : KERN_TYPE_F16;
    size_t n = (size_t)n_out * n_in;
    float *f = xmalloc(n * sizeof(float));
    fill(f, n, scale);
    *data = xmalloc(kern_row_bytes(t, n_in) * (size_t)n_out);
    for (int r = 0; r < n_out; r++)
        kern_quantize_row(t, f + (size_t)r * n_in,
                          (uint8_t *)*data + kern_row_bytes(t, n_in) * (size_t)r, n_in);
    free(f);
    must(kern_cuda_weight_upload(dev, fmt, t, *data, n_out, n_in), "kern_cuda_weight_upload");
    return (model_matrix){.type = t, .data = *data, .n_out = n_out, .n_in = n_in};
}

static kern_cuda_wfmt moe_fmt(kern_cuda_wfmt want, int n_in) {
    return want == KERN_CUDA_W_INT8 && n_in % 32 != 0 ? KERN_CUDA_W_F16 : want;
}

/* Skew (dim >= 3, n_used < n_expert): router column 0 is 1 for expert 0 and
 * 0 elsewhere, column 1 is -1 for the last expert and 0 elsewhere; each
 * token's x[0] and x[1] are then set so that expert 0's logit is 1 above
 * every other expert's and the last expert's 1 below: every token picks
 * expert 0 and none the last, with the other logits (and weights) as random
 * as in the other cases. */
static void moe_skew(float *router, float *x, int E, int D, int T) {
    for (int e = 0; e < E; e++) {
        router[(size_t)e * D] = e == 0 ? 1.0f : 0.0f;
        router[(size_t)e * D + 1] = e == E - 1 ? -1.0f : 0.0f;
    }
    for (int t = 0; t < T; t++) {
        float *xt = x + (size_t)t * D;
        double l0 = 0.0, lz = 0.0, mx = -1e300, mn = 1e300;
        for (int e = 0; e < E; e++) {
            double acc = 0.0;
            for (int i = 2; i < D; i++)
                acc += (double)router[(size_t)e * D + i] * xt[i];
            if (e == 0)
                l0 = acc;
            else if (e == E - 1)
                lz = acc;
            else {
                mx = acc > mx ? acc : mx;
                mn = acc < mn ? acc : mn;
            }
        }
        xt[0] = (float)(1.0 + mx - l0);
        xt[1] = (float)(1.0 + lz - mn);
    }
}

static void moe_run_case(const moe_case *mc, kern_cuda_wfmt fmt) {
    const int E = mc->n_expert, K = mc->n_used, D = mc->dim, H = mc->hidden, T = mc->n_tok;
    float *router = xmalloc((size_t)E * D * sizeof(float));
    fill(router, (size_t)E * D, 0.5f);
    if (mc->ties > 0)
        for (int e = mc->ties; e < E; e++)
            memcpy(router + (size_t)e * D, router + (size_t)(e % mc->ties) * D,
                   (size_t)D * sizeof(float));
    kern_cuda_weight g, u, d;
    void *gd, *ud, *dd;
    model_matrix mr = {.type = KERN_TYPE_F32, .data = router, .n_out = E, .n_in = D};
    model_matrix mg = moe_matrix(moe_fmt(fmt, D), E * H, D, 0.1f, &g, &gd);
    model_matrix mu = moe_matrix(moe_fmt(fmt, D), E * H, D, 0.1f, &u, &ud);
    model_matrix md = moe_matrix(moe_fmt(fmt, H), E * D, H, 0.1f, &d, &dd);
    model_moe_weights hw = {.router = &mr,
                            .gate = &mg,
                            .up = &mu,
                            .down = &md,
                            .n_expert = E,
                            .n_used = K,
                            .dim = D,
                            .hidden = H,
                            .norm_topk = mc->norm,
                            .act = mc->gelu ? MODEL_ACT_GELU_TANH : MODEL_ACT_SILU};
    float *x = xmalloc((size_t)T * D * sizeof(float));
    fill(x, (size_t)T * D, 1.0f);
    if (mc->skew)
        moe_skew(router, x, E, D, T);
    float *d_router = dev_from(router, (size_t)E * D * sizeof(float));
    kern_cuda_moe m = {.router = d_router,
                       .gate = &g,
                       .up = &u,
                       .down = &d,
                       .n_expert = E,
                       .n_used = K,
                       .dim = D,
                       .hidden = H,
                       .norm_topk = mc->norm,
                       .gelu = mc->gelu};

    float *ref = xmalloc((size_t)T * D * sizeof(float));
    float *got[2] = {xmalloc((size_t)T * D * sizeof(float)),
                     xmalloc((size_t)T * D * sizeof(float))};
    float *one = xmalloc((size_t)D * sizeof(float));
    if (model_moe_ffn_ref(&hw, x, T, ref) != 0) {
        fprintf(stderr, "model_moe_ffn_ref: out of memory\n");
        exit(1);
    }
    size_t ws_bytes = kern_cuda_moe_ws_bytes(&m, T);
    void *d_ws = dev_alloc(ws_bytes);
    float *d_x = dev_from(x, (size_t)T * D * sizeof(float));
    float *d_y = dev_alloc((size_t)T * D * sizeof(float));
    int32_t *d_ids = dev_alloc((size_t)T * K * sizeof(int32_t));
    float *d_w = dev_alloc((size_t)T * K * sizeof(float));
    int32_t *ids = xmalloc((size_t)T * K * sizeof(int32_t));
    char shape[160];
    snprintf(shape, sizeof shape, "%s,E=%d,k=%d,dim=%d,hidden=%d,n=%d,%s,%s%s%s",
             fmt == KERN_CUDA_W_INT8 ? "int8" : "f16", E, K, D, H, T, mc->norm ? "norm" : "raw",
             mc->gelu ? "gelu" : "silu", mc->ties ? ",ties" : "", mc->skew ? ",skew" : "");
    size_t ws1 = kern_cuda_moe_ws_bytes(&m, 1);
    const kern_cuda_moe_path paths[2] = {KERN_CUDA_MOE_PATH_GEMV, KERN_CUDA_MOE_PATH_GROUPED};
    for (int pi = 0; pi < 2; pi++) {
        const kern_cuda_moe_path path = paths[pi];
        must(kern_cuda_moe_ffn_path(&m, d_x, T, d_y, d_ws, ws_bytes, d_ids, d_w, path, g_stream),
             "kern_cuda_moe_ffn_path");
        to_host(got[pi], d_y, (size_t)T * D * sizeof(float));
        report("MOE", norm_err(got[pi], ref, (size_t)T * D), MOE_BOUND, "%s,%s", shape,
               moe_path_name(path));
        /* Batch invariance: every token alone gives the bits it gets in the
         * batch, on the same path. */
        int bad_bits = 0;
        for (int t = 0; t < T && T > 1; t++) {
            must(kern_cuda_moe_ffn_path(&m, d_x + (size_t)t * D, 1, d_y, d_ws, ws1, NULL, NULL,
                                        path, g_stream),
                 "kern_cuda_moe_ffn_path");
            to_host(one, d_y, (size_t)D * sizeof(float));
            bad_bits += memcmp(one, got[pi] + (size_t)t * D, (size_t)D * sizeof(float)) != 0;
        }
        if (T > 1)
            report("MOE_BATCH", (double)bad_bits, 0.0, "%s,%s; %d tokens differ alone", shape,
                   moe_path_name(path), bad_bits);
    }
    to_host(ids, d_ids, (size_t)T * K * sizeof(int32_t));
    report("MOE_AGREE", norm_err(got[1], got[0], (size_t)T * D), MOE_BOUND, "%s; grouped vs gemv",
           shape);
    /* The size's own path: bit for bit what that path gave when forced. */
    must(kern_cuda_moe_ffn(&m, d_x, T, d_y, d_ws, ws_bytes, NULL, NULL, g_stream),
         "kern_cuda_moe_ffn");
    to_host(ref, d_y, (size_t)T * D * sizeof(float)); /* ref is done with */
    const int want = T > KERN_CUDA_MOE_GROUPED_MIN;
    report("MOE_AUTO", memcmp(ref, got[want], (size_t)T * D * sizeof(float)) != 0, 0.0,
           "%s; auto takes %s", shape, moe_path_name(paths[want]));

    /* The routing against model_moe_route on the reference's f32 logits. */
    int bad_route = 0;
    float *lg = xmalloc((size_t)E * sizeof(float)), *wr = xmalloc((size_t)K * sizeof(float));
    int32_t *ir = xmalloc((size_t)K * sizeof(int32_t));
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) {
            double acc = 0.0;
            for (int i = 0; i < D; i++)
                acc += (double)router[(size_t)e * D + i] * x[(size_t)t * D + i];
            lg[e] = (float)acc;
        }
        model_moe_route(lg, E, K, mc->norm, ir, wr);
        for (int k = 0; k < K; k++)
            bad_route += ir[k] != ids[(size_t)t * K + k];
    }
    report("MOE_ROUTE", (double)bad_route, 0.0, "%s; %d of %d choices differ", shape, bad_route,
           T * K);
    if (mc->skew) { /* the premise: a full group and an empty one */
        int without0 = 0, with_last = 0;
        for (int t = 0; t < T; t++) {
            int has0 = 0;
            for (int k = 0; k < K; k++) {
                has0 |= ids[(size_t)t * K + k] == 0;
                with_last += ids[(size_t)t * K + k] == E - 1;
            }
            without0 += !has0;
        }
        report("MOE_SKEW", (double)(without0 + with_last), 0.0,
               "%s; %d tokens without expert 0, %d choices of expert %d", shape, without0,
               with_last, E - 1);
    }

    free(lg), free(wr), free(ir), free(ids);
    free(x), free(ref), free(got[0]), free(got[1]), free(one), free(router), free(gd), free(ud),
        free(dd);
    dev_free(d_ws), dev_free(d_x), dev_free(d_y), dev_free(d_ids), dev_free(d_w);
    dev_free(d_router);
    kern_cuda_weight_free(&g), kern_cuda_weight_free(&u), kern_cuda_weight_free(&d);
}

static void moe_args(void) {
    kern_cuda_weight g, u, d;
    void *gd, *ud, *dd;
    enum { E = 8, D = 64, H = 32 };
    moe_matrix(KERN_CUDA_W_F16, E * H, D, 0.1f, &g, &gd);
    moe_matrix(KERN_CUDA_W_F16, E * H, D, 0.1f, &u, &ud);
    moe_matrix(KERN_CUDA_W_F16, E * D, H, 0.1f, &d, &dd);
    float *d_router = dev_random((size_t)E * D, 0.5f);
    float *d_x = dev_random(4 * D, 1.0f);
    float *d_y = dev_alloc(4 * D * sizeof(float));
    kern_cuda_moe ok = {d_router, &g, &u, &d, E, 2, D, H, 1, 0};
    size_t ws_bytes = kern_cuda_moe_ws_bytes(&ok, 4);
    void *d_ws = dev_alloc(ws_bytes);
    struct {
        const char *what;
        kern_cuda_moe m;
        size_t ws;
        int want;
    } cases[] = {
        {"ok", ok, ws_bytes, BRISK_OK},
        {"k=0", {d_router, &g, &u, &d, E, 0, D, H, 1, 0}, ws_bytes, BRISK_EINVAL},
        {"k>E", {d_router, &g, &u, &d, E, E + 1, D, H, 1, 0}, ws_bytes, BRISK_EINVAL},
        {"E!=stack", {d_router, &g, &u, &d, E - 1, 2, D, H, 1, 0}, ws_bytes, BRISK_EINVAL},
        {"hidden!=stack", {d_router, &g, &u, &d, E, 2, D, H + 1, 1, 0}, ws_bytes, BRISK_EINVAL},
        {"no router", {NULL, &g, &u, &d, E, 2, D, H, 1, 0}, ws_bytes, BRISK_EINVAL},
        {"workspace", ok, ws_bytes - 1, BRISK_EINVAL},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        int rc =
            kern_cuda_moe_ffn(&cases[c].m, d_x, 4, d_y, d_ws, cases[c].ws, NULL, NULL, g_stream);
        report("MOE", rc != cases[c].want, 0.0, "args:%s -> %d (want %d)", cases[c].what, rc,
               cases[c].want);
    }
    int rc = kern_cuda_moe_ffn_path(&ok, d_x, 4, d_y, d_ws, ws_bytes, NULL, NULL,
                                    (kern_cuda_moe_path)7, g_stream);
    report("MOE", rc != BRISK_EINVAL, 0.0, "args:path 7 -> %d (want %d)", rc, BRISK_EINVAL);
    /* One workspace size serves both paths: grouped at 4 tokens fits it. */
    rc = kern_cuda_moe_ffn_path(&ok, d_x, 4, d_y, d_ws, ws_bytes, NULL, NULL,
                                KERN_CUDA_MOE_PATH_GROUPED, g_stream);
    report("MOE", rc != BRISK_OK, 0.0, "args:grouped in the same workspace -> %d", rc);
    cuda_must(cudaStreamSynchronize(g_stream), "sync");
    kern_cuda_moe big = ok;
    big.n_expert = KERN_CUDA_MOE_MAX_EXPERT + 1;
    report("MOE", kern_cuda_moe_ws_bytes(&big, 4) != (size_t)-1, 0.0,
           "args:E>%d has no workspace size", KERN_CUDA_MOE_MAX_EXPERT);
    free(gd), free(ud), free(dd);
    dev_free(d_router), dev_free(d_x), dev_free(d_y), dev_free(d_ws);
    kern_cuda_weight_free(&g), kern_cuda_weight_free(&u), kern_cuda_weight_free(&d);
}

void test_moe(void) {
    static const moe_case cases[] = {
        /* E,  k, dim, hidden, n, norm, gelu, ties, skew */
        {8, 2, 64, 32, 1, 1, 0, 0, 0},    /* a batch of one, top-2 (Mixtral's routing) */
        {8, 8, 130, 65, 5, 0, 0, 0, 0},   /* k = n_expert; odd hidden: F16 scalar rows */
        {16, 4, 96, 64, 9, 1, 0, 3, 0},   /* ties: rows repeat every 3 experts */
        {64, 8, 128, 96, 33, 0, 0, 0, 0}, /* OLMoE's routing (raw weights), past the GEMV sizes */
        {128, 8, 256, 64, 4, 1, 0, 0, 0}, /* Qwen3-30B-A3B's routing, a decode batch */
        {256, 16, 64, 32, 3, 1, 1, 0, 0}, /* the limits; GELU gating */
        {32, 16, 64, 32, 17, 0, 0, 5, 0}, /* top-16, ties among 5 distinct rows */
        /* the grouped path's sizes (auto takes it above 16 tokens) */
        {8, 2, 96, 80, 17, 1, 0, 0, 0},     /* top-2 of 8, one past the threshold */
        {128, 8, 128, 64, 64, 1, 0, 0, 0},  /* Qwen3's routing, 64 tokens */
        {128, 8, 160, 96, 300, 1, 0, 0, 1}, /* 300 tokens, all on expert 0, none on 127 */
        {8, 2, 64, 48, 64, 0, 1, 0, 1},     /* top-2 of 8 skewed, GELU, raw weights */
        {8, 2, 64, 32, 1100, 1, 0, 0, 0},   /* two chunks of KERN_CUDA_MOE_GROUP_TOKENS */
    };
    const kern_cuda_wfmt fmts[] = {KERN_CUDA_W_F16, KERN_CUDA_W_INT8};
    for (size_t c = 0; c < CASES_LEN(cases); c++)
        for (size_t f = 0; f < ARRAY_LEN(fmts); f++)
            moe_run_case(&cases[c], fmts[f]);
    moe_args();
}

/* ---- perf ------------------------------------------------------------------------ */

typedef struct moe_perf {
    const kern_cuda_moe *m;
    const float *x;
    float *y;
    void *ws;
    size_t ws_bytes;
    int n_tok;
    kern_cuda_moe_path path;
} moe_perf;

static int moe_perf_call(void *ctx) {
    moe_perf *p = ctx;
    return kern_cuda_moe_ffn_path(p->m, p->x, p->n_tok, p->y, p->ws, p->ws_bytes, NULL, NULL,
                                  p->path, g_stream);
}

/* A stack of n_exp experts of [n_out][n_in] in fmt: one chunk of random rows
 * made once on the host (F16, or Q8_0 for INT8: both upload as copies) and
 * uploaded into every row range, so a stack of a real model's size costs no
 * host conversion. */
static void moe_perf_stack(kern_cuda_weight *w, kern_cuda_wfmt fmt, int n_exp, int n_out,
                           int n_in) {
    const kern_type t = fmt == KERN_CUDA_W_INT8 ? KERN_TYPE_Q8_0 : KERN_TYPE_F16;
    const int rows = n_out < 1024 ? n_out : 1024, total = n_exp * n_out;
    float *f = xmalloc((size_t)rows * n_in * sizeof(float));
    fill(f, (size_t)rows * n_in, 0.05f);
    uint8_t *q = xmalloc(kern_row_bytes(t, n_in) * (size_t)rows);
    for (int r = 0; r < rows; r++)
        kern_quantize_row(t, f + (size_t)r * n_in, q + kern_row_bytes(t, n_in) * (size_t)r, n_in);
    must(kern_cuda_weight_alloc(w, fmt, total, n_in), "kern_cuda_weight_alloc");
    for (int r0 = 0; r0 < total; r0 += rows)
        must(kern_cuda_weight_upload_rows(w, r0, t, q, total - r0 < rows ? total - r0 : rows),
             "kern_cuda_weight_upload_rows");
    free(f), free(q);
}

/* One Qwen3-30B-A3B layer (128 experts of 768, dim 2048, top 8) at decode
 * and prefill sizes, F16 and INT8, on each path: time per call and the
 * bandwidth of the distinct experts' bytes the tokens chose (what any kernel
 * must read at least: the decode roofline; the GEMV re-reads experts per
 * token, the grouped path once per tile of 32 of an expert's tokens). Where
 * the two paths' times cross is KERN_CUDA_MOE_GROUPED_MIN's measure. */
void perf_moe(double copy_bw) {
    if (!selected("moe"))
        return;
    enum { E = 128, K = 8, D = 2048, H = 768 };
    const int toks[] = {1, 4, 16, 32, 64, 512};
    const kern_cuda_wfmt fmts[] = {KERN_CUDA_W_F16, KERN_CUDA_W_INT8};
    for (size_t f = 0; f < ARRAY_LEN(fmts); f++) {
        kern_cuda_weight g, u, d;
        moe_perf_stack(&g, fmts[f], E, H, D);
        moe_perf_stack(&u, fmts[f], E, H, D);
        moe_perf_stack(&d, fmts[f], E, D, H);
        float *d_router = dev_random((size_t)E * D, 0.05f);
        kern_cuda_moe m = {d_router, &g, &u, &d, E, K, D, H, 1, 0};
        const int T = toks[ARRAY_LEN(toks) - 1];
        size_t ws_bytes = kern_cuda_moe_ws_bytes(&m, T);
        moe_perf p = {&m,
                      dev_random((size_t)T * D, 1.0f),
                      dev_alloc((size_t)T * D * sizeof(float)),
                      dev_alloc(ws_bytes),
                      ws_bytes,
                      0,
                      KERN_CUDA_MOE_PATH_AUTO};
        int32_t *d_ids = dev_alloc((size_t)T * K * sizeof(int32_t));
        int32_t *ids = xmalloc((size_t)T * K * sizeof(int32_t));
        const double expert_bytes = (double)kern_cuda_weight_bytes(fmts[f], 2 * H, D) +
                                    kern_cuda_weight_bytes(fmts[f], D, H);
        for (size_t i = 0; i < ARRAY_LEN(toks); i++) {
            p.n_tok = toks[i];
            must(kern_cuda_moe_ffn(&m, p.x, p.n_tok, p.y, p.ws, ws_bytes, d_ids, NULL, g_stream),
                 "kern_cuda_moe_ffn");
            to_host(ids, d_ids, (size_t)p.n_tok * K * sizeof(int32_t));
            int seen[E] = {0}, distinct = 0;
            for (int j = 0; j < p.n_tok * K; j++)
                if (ids[j] >= 0 && ids[j] < E && !seen[ids[j]]++)
                    distinct++;
            for (int pi = 0; pi < 2; pi++) { /* both paths: where they cross sets the threshold */
                p.path = pi ? KERN_CUDA_MOE_PATH_GROUPED : KERN_CUDA_MOE_PATH_GEMV;
                double t = cuda_test_time(moe_perf_call, &p, "kern_cuda_moe_ffn_path");
                char shape[80];
                snprintf(shape, sizeof shape, "%s,E=%d,k=%d,n=%d,%d experts,%s",
                         fmts[f] == KERN_CUDA_W_INT8 ? "int8" : "f16", E, K, p.n_tok, distinct,
                         moe_path_name(p.path));
                perf_line("moe", shape, distinct * expert_bytes + (double)E * D * sizeof(float), t,
                          copy_bw);
            }
        }
        free(ids);
        dev_free(d_ids), dev_free((void *)p.x), dev_free(p.y), dev_free(p.ws), dev_free(d_router);
        kern_cuda_weight_free(&g), kern_cuda_weight_free(&u), kern_cuda_weight_free(&d);
    }
}
