/* ops_fused.c - the fused projections of the CUDA forward pass
 * (backend_cuda_fwd.c) against the separate ones they replaced, which stay
 * here as the reference, on random data (OPNAME "fused"):
 *
 *   FUSED_QKV      one matmul over wq | wk | wv (row ranges of one weight,
 *                  kern_cuda_weight_upload_rows) into [n][q_dim + 2 kv_dim]
 *                  rows; Qwen2's biases as one array through that row stride;
 *                  Qwen3's per-head q/k norms in place (kern_cuda_rmsnorm_heads);
 *                  q turned out into contiguous rows (kern_cuda_rope_to), k in
 *                  place; K and V stored from the fused rows (kern_cuda_kv_store
 *                  with its ld) - against three matmuls into q, k, v, three
 *                  bias adds, kern_cuda_rmsnorm over rows of head_dim, RoPE in
 *                  place and kv_store from the separate rows. Compared: q after
 *                  RoPE, and the K and V pools.
 *   FUSED_GATE_UP  one matmul over w_gate | w_up into [n][2 hidden] and the
 *                  activation over those rows (kern_cuda_silu_mul_rows,
 *                  kern_cuda_gelu_mul_rows) - against two matmuls and
 *                  kern_cuda_silu_mul / kern_cuda_gelu_mul.
 * F16 and INT8 weights at 1, 7 and 16 tokens (the tensor-core GEMV), 33 (the
 * legacy path) and 80 (INT8 dequantised into cuBLAS).
 * Bounds: each matmul is within 5e-5 of the exact product of its operands
 * (ops_matmul.c), and a fused matmul splits K among its warps differently
 * from the separate ones (its row count differs), so the two sides differ by
 * up to ~1e-4 in norm (typically ~1e-6); RMSNorm and RoPE carry relative
 * errors through unchanged, the gated activations within a small factor:
 * q and the MLP output 1e-4. The pools are f16: a difference near an f16
 * rounding boundary flips a value by one f16 ulp (2^-11 relative), in a
 * fraction of the values of about (the difference / 2^-11), which is
 * ~2^-11 sqrt(0.1) = 1.5e-4 in norm at the worst matmul bound: 2e-4. A
 * wrong stride or offset gives errors of order 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_gemma.cuh"
#include "kernels/cuda/kern_cuda_kv_store.cuh"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_rmsnorm.cuh"
#include "kernels/cuda/kern_cuda_rope.cuh"
#include "kernels/cuda/kern_cuda_silu.cuh"
#include "tests/cuda/cuda_test.h"

#define FU_BOUND 1e-4
#define FU_POOL_BOUND 2e-4

/* A llama-like layer, small: 4 query heads and 2 KV heads of 64, width 256,
 * hidden 512. */
enum { DIM = 256, N_HEADS = 4, N_KV = 2, HD = 64, HIDDEN = 512 };
enum { Q_DIM = N_HEADS * HD, KV_DIM = N_KV * HD, QKV = Q_DIM + 2 * KV_DIM };

static kern_cuda_matmul_ctx *g_fmm;

/* A random weight uploaded alone and as rows [row0, row0 + n_out) of a fused
 * one (from the same F32 rows). */
static void fu_weight(kern_cuda_wfmt fmt, int n_out, kern_cuda_weight *alone,
                      kern_cuda_weight *fused, int row0) {
    size_t n = (size_t)n_out * DIM;
    float *f = xmalloc(n * sizeof(float));
    fill(f, n, 0.05f);
    must(kern_cuda_weight_upload(alone, fmt, KERN_TYPE_F32, f, n_out, DIM),
         "kern_cuda_weight_upload");
    must(kern_cuda_weight_upload_rows(fused, row0, KERN_TYPE_F32, f, n_out),
         "kern_cuda_weight_upload_rows");
    free(f);
}

static void mm(const kern_cuda_weight *w, const float *x, int n, float *y, size_t ldy, void *ws,
               size_t ws_bytes) {
    must(kern_cuda_matmul(g_fmm, w, x, n, y, ldy, ws, ws_bytes), "kern_cuda_matmul");
}

static double dev_err(const float *d_got, size_t ld_got, const float *d_ref, size_t ld_ref,
                      int rows, int cols) {
    float *got = xmalloc((size_t)rows * ld_got * sizeof(float));
    float *ref = xmalloc((size_t)rows * ld_ref * sizeof(float));
    float *a = xmalloc((size_t)rows * cols * sizeof(float));
    float *b = xmalloc((size_t)rows * cols * sizeof(float));
    to_host(got, d_got, (size_t)rows * ld_got * sizeof(float));
    to_host(ref, d_ref, (size_t)rows * ld_ref * sizeof(float));
    for (int r = 0; r < rows; r++) {
        memcpy(a + (size_t)r * cols, got + (size_t)r * ld_got, (size_t)cols * sizeof(float));
        memcpy(b + (size_t)r * cols, ref + (size_t)r * ld_ref, (size_t)cols * sizeof(float));
    }
    double e = norm_err(a, b, (size_t)rows * cols);
    free(got), free(ref), free(a), free(b);
    return e;
}

static double pool_err(const uint16_t *d_got, const uint16_t *d_ref, size_t n) {
    uint16_t *g = xmalloc(n * sizeof(uint16_t)), *r = xmalloc(n * sizeof(uint16_t));
    float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
    to_host(g, d_got, n * sizeof(uint16_t));
    to_host(r, d_ref, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        a[i] = kern_fp16_to_fp32(g[i]);
        b[i] = kern_fp16_to_fp32(r[i]);
    }
    double e = norm_err(a, b, n);
    free(g), free(r), free(a), free(b);
    return e;
}

static void fused_qkv_case(kern_cuda_wfmt fmt, int n) {
    kern_cuda_weight wq, wk, wv, wqkv;
    must(kern_cuda_weight_alloc(&wqkv, fmt, QKV, DIM), "kern_cuda_weight_alloc");
    fu_weight(fmt, Q_DIM, &wq, &wqkv, 0);
    fu_weight(fmt, KV_DIM, &wk, &wqkv, Q_DIM);
    fu_weight(fmt, KV_DIM, &wv, &wqkv, Q_DIM + KV_DIM);
    float bias[QKV], qn[HD], kn[HD];
    fill(bias, QKV, 0.5f);
    fill(qn, HD, 0.2f);
    fill(kn, HD, 0.2f);
    for (int i = 0; i < HD; i++)
        qn[i] += 1.0f, kn[i] += 1.0f;
    int32_t pos[128];
    int64_t slots[128];
    for (int t = 0; t < n; t++) {
        pos[t] = rng_int(4096);
        slots[t] = (int64_t)(n - 1 - t) * KV_DIM; /* every token its own row, reversed */
    }
    float *d_x = dev_random((size_t)n * DIM, 1.0f);
    float *d_b = dev_from(bias, sizeof bias), *d_qn = dev_from(qn, sizeof qn);
    float *d_kn = dev_from(kn, sizeof kn);
    int32_t *d_pos = dev_from(pos, (size_t)n * sizeof(int32_t));
    int64_t *d_slots = dev_from(slots, (size_t)n * sizeof(int64_t));
    size_t ws_bytes = kern_cuda_matmul_ws_bytes(DIM, n);
    void *d_ws = dev_alloc(ws_bytes);
    size_t pool = (size_t)n * KV_DIM;
    uint16_t *kp[2], *vp[2];
    for (int i = 0; i < 2; i++) {
        kp[i] = dev_alloc(pool * sizeof(uint16_t));
        vp[i] = dev_alloc(pool * sizeof(uint16_t));
    }

    /* The reference: the separate projections as the pass ran them before. */
    float *d_q = dev_alloc((size_t)n * Q_DIM * sizeof(float));
    float *d_k = dev_alloc((size_t)n * KV_DIM * sizeof(float));
    float *d_v = dev_alloc((size_t)n * KV_DIM * sizeof(float));
    mm(&wq, d_x, n, d_q, Q_DIM, d_ws, ws_bytes);
    mm(&wk, d_x, n, d_k, KV_DIM, d_ws, ws_bytes);
    mm(&wv, d_x, n, d_v, KV_DIM, d_ws, ws_bytes);
    must(kern_cuda_add_bias(d_q, Q_DIM, d_b, n, Q_DIM, g_stream), "add_bias");
    must(kern_cuda_add_bias(d_k, KV_DIM, d_b + Q_DIM, n, KV_DIM, g_stream), "add_bias");
    must(kern_cuda_add_bias(d_v, KV_DIM, d_b + Q_DIM + KV_DIM, n, KV_DIM, g_stream), "add_bias");
    must(kern_cuda_rmsnorm(d_q, d_q, NULL, d_qn, n * N_HEADS, HD, 1e-6f, g_stream), "rmsnorm");
    must(kern_cuda_rmsnorm(d_k, d_k, NULL, d_kn, n * N_KV, HD, 1e-6f, g_stream), "rmsnorm");
    must(kern_cuda_rope_ex(d_q, Q_DIM, n, N_HEADS, HD, HD, d_pos, 1e4f, 1.0f, NULL, 1.0f,
                           KERN_ROPE_SPLIT_HALF, g_stream),
         "rope");
    must(kern_cuda_rope_ex(d_k, KV_DIM, n, N_KV, HD, HD, d_pos, 1e4f, 1.0f, NULL, 1.0f,
                           KERN_ROPE_SPLIT_HALF, g_stream),
         "rope");
    must(kern_cuda_kv_store(kp[0], vp[0], d_k, d_v, KV_DIM, d_slots, n, KV_DIM, g_stream),
         "kv_store");

    /* The fused steps, as backend_cuda_fwd.c runs them. */
    float *d_qkv = dev_alloc((size_t)n * QKV * sizeof(float));
    float *d_qf = dev_alloc((size_t)n * Q_DIM * sizeof(float));
    mm(&wqkv, d_x, n, d_qkv, QKV, d_ws, ws_bytes);
    must(kern_cuda_add_bias(d_qkv, QKV, d_b, n, QKV, g_stream), "add_bias");
    must(kern_cuda_rmsnorm_heads(d_qkv, QKV, n, N_HEADS, HD, d_qn, 1e-6f, g_stream),
         "rmsnorm_heads");
    must(kern_cuda_rmsnorm_heads(d_qkv + Q_DIM, QKV, n, N_KV, HD, d_kn, 1e-6f, g_stream),
         "rmsnorm_heads");
    must(kern_cuda_rope_to(d_qf, Q_DIM, d_qkv, QKV, n, N_HEADS, HD, HD, d_pos, 1e4f, 1.0f, NULL,
                           1.0f, KERN_ROPE_SPLIT_HALF, g_stream),
         "rope_to");
    must(kern_cuda_rope_ex(d_qkv + Q_DIM, QKV, n, N_KV, HD, HD, d_pos, 1e4f, 1.0f, NULL, 1.0f,
                           KERN_ROPE_SPLIT_HALF, g_stream),
         "rope");
    must(kern_cuda_kv_store(kp[1], vp[1], d_qkv + Q_DIM, d_qkv + Q_DIM + KV_DIM, QKV, d_slots, n,
                            KV_DIM, g_stream),
         "kv_store");

    double eq = dev_err(d_qf, Q_DIM, d_q, Q_DIM, n, Q_DIM);
    double ek = pool_err(kp[1], kp[0], pool), ev = pool_err(vp[1], vp[0], pool);
    const char *f = fmt == KERN_CUDA_W_F16 ? "f16" : "int8";
    report("FUSED_QKV", eq, FU_BOUND, "%s,q,n_tok=%d", f, n);
    report("FUSED_QKV", ek > ev ? ek : ev, FU_POOL_BOUND, "%s,k/v pools,n_tok=%d (k %.1e, v %.1e)",
           f, n, ek, ev);

    kern_cuda_weight_free(&wq), kern_cuda_weight_free(&wk), kern_cuda_weight_free(&wv);
    kern_cuda_weight_free(&wqkv);
    dev_free(d_x), dev_free(d_b), dev_free(d_qn), dev_free(d_kn), dev_free(d_pos);
    dev_free(d_slots), dev_free(d_ws), dev_free(d_q), dev_free(d_k), dev_free(d_v);
    dev_free(d_qkv), dev_free(d_qf);
    for (int i = 0; i < 2; i++)
        dev_free(kp[i]), dev_free(vp[i]);
}

static void fused_gate_up_case(kern_cuda_wfmt fmt, int n, int gelu) {
    kern_cuda_weight wg, wu, wgu;
    must(kern_cuda_weight_alloc(&wgu, fmt, 2 * HIDDEN, DIM), "kern_cuda_weight_alloc");
    fu_weight(fmt, HIDDEN, &wg, &wgu, 0);
    fu_weight(fmt, HIDDEN, &wu, &wgu, HIDDEN);
    float *d_x = dev_random((size_t)n * DIM, 1.0f);
    size_t ws_bytes = kern_cuda_matmul_ws_bytes(DIM, n);
    void *d_ws = dev_alloc(ws_bytes);
    size_t nh = (size_t)n * HIDDEN;
    float *d_g = dev_alloc(nh * sizeof(float)), *d_u = dev_alloc(nh * sizeof(float));
    float *d_ref = dev_alloc(nh * sizeof(float)), *d_got = dev_alloc(nh * sizeof(float));
    float *d_gu = dev_alloc(2 * nh * sizeof(float));
    mm(&wg, d_x, n, d_g, HIDDEN, d_ws, ws_bytes);
    mm(&wu, d_x, n, d_u, HIDDEN, d_ws, ws_bytes);
    if (gelu)
        must(kern_cuda_gelu_mul(d_ref, d_g, d_u, nh, g_stream), "gelu_mul");
    else
        must(kern_cuda_silu_mul(d_ref, d_g, d_u, nh, g_stream), "silu_mul");
    mm(&wgu, d_x, n, d_gu, 2 * HIDDEN, d_ws, ws_bytes);
    if (gelu)
        must(kern_cuda_gelu_mul_rows(d_got, HIDDEN, d_gu, 2 * HIDDEN, n, HIDDEN, g_stream),
             "gelu_mul_rows");
    else
        must(kern_cuda_silu_mul_rows(d_got, HIDDEN, d_gu, 2 * HIDDEN, n, HIDDEN, g_stream),
             "silu_mul_rows");
    report("FUSED_GATE_UP", dev_err(d_got, HIDDEN, d_ref, HIDDEN, n, HIDDEN), FU_BOUND,
           "%s,%s,n_tok=%d", fmt == KERN_CUDA_W_F16 ? "f16" : "int8", gelu ? "gelu" : "silu", n);
    kern_cuda_weight_free(&wg), kern_cuda_weight_free(&wu), kern_cuda_weight_free(&wgu);
    dev_free(d_x), dev_free(d_ws), dev_free(d_g), dev_free(d_u), dev_free(d_ref);
    dev_free(d_got), dev_free(d_gu);
}

void test_fused(void) {
    must(kern_cuda_matmul_ctx_create(&g_fmm, g_stream), "kern_cuda_matmul_ctx_create");
    must(kern_cuda_matmul_ctx_dequant_ws(g_fmm, KERN_CUDA_MM_DEQUANT_WS_BYTES),
         "kern_cuda_matmul_ctx_dequant_ws");
    const int toks[] = {1, 7, 16, 33, 80};
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t ti = 0; ti < CASES_LEN(toks); ti++) {
            fused_qkv_case((kern_cuda_wfmt)fmt, toks[ti]);
            fused_gate_up_case((kern_cuda_wfmt)fmt, toks[ti], ti % 2);
        }
    kern_cuda_matmul_ctx_free(g_fmm);
    g_fmm = NULL;
}
