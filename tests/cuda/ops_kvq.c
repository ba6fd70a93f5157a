/* ops_kvq.c - the quantized KV cache on the GPU (issue 38: int8 and fp8
 * e4m3, one fp16 scale per position and KV head, kern_kv.h) against the CPU
 * references (test_cuda_ops -o kv_quant).
 *
 * kv_store_q    exact: every byte of both pools. The tokens' rows (codes and
 *               scales) against kern_kv_quantize of the same floats - the GPU
 *               does the same IEEE f32 operations (amax, amax / 127 or 448,
 *               1 / d, x * (1 / d), round half away / e4m3 round to nearest
 *               even with saturation, fp16 of d) - and every other byte
 *               (slot -1, rows no token names, other blocks' scales)
 *               unchanged. Rows of normal values, of wide ranges and with an
 *               outlier, so codes hit +-127 and fp8's subnormals.
 * decode, prefill (int8, fp8): 1e-5 normalised error against
 *               kern_attention_head_ref over the same quantized pool (the
 *               reference dequantizes with kern_kv_dequantize's rule: fp16
 *               scale times code, exact in f32, as the GPU's loads), so the
 *               f16 kernels' argument (ops_attn.c, test_cuda_ops.c) carries
 *               over: a few 1e-6 of f32 rounding. Positions no sequence owns
 *               hold NaN scales (fp16 0x7e00), so reading one fails the case.
 *               Contexts 1 .. 1100 (several split-K partitions), GQA groups
 *               1 / 4 / 8, heads of 64 / 128 / 256 and 16, windows and
 *               soft-caps as the f16 cases.
 * Argument checks: exact return codes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_ops.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_attn_decode.cuh"
#include "kernels/cuda/kern_cuda_attn_prefill.cuh"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_kv_store.cuh"
#include "tests/cuda/cuda_test.h"

#define KVQ_NAN_HALF 0x7e00u

/* A pool of n_blocks layer-blocks of dtype t (n_kv heads of hd, bs
 * positions): random codes, every scale NaN until a row is stored. */
typedef struct kvq_pool {
    kern_kv_dtype t;
    int n_kv, hd, bs, n_blocks;
    size_t lb, scale_off;
    uint8_t *k, *v;
} kvq_pool;

static void kvq_pool_make(kvq_pool *p, kern_kv_dtype t, int n_kv, int hd, int bs, int n_blocks) {
    p->t = t, p->n_kv = n_kv, p->hd = hd, p->bs = bs, p->n_blocks = n_blocks;
    p->lb = kern_kv_layer_block_bytes(t, n_kv * hd, hd, bs);
    p->scale_off = kern_kv_scale_off(t, n_kv * hd, bs);
    size_t n = p->lb * (size_t)n_blocks;
    p->k = xmalloc(n), p->v = xmalloc(n);
    for (size_t i = 0; i < n; i++) {
        p->k[i] = (uint8_t)rng_u64();
        p->v[i] = (uint8_t)rng_u64();
    }
    for (int b = 0; b < n_blocks; b++)
        for (int i = 0; i < bs * n_kv; i++) {
            size_t o = (size_t)b * p->lb + p->scale_off + 2 * (size_t)i;
            uint16_t nan = KVQ_NAN_HALF;
            memcpy(p->k + o, &nan, 2);
            memcpy(p->v + o, &nan, 2);
        }
}

static kern_kv_view kvq_view(const kvq_pool *p, const int32_t *table) {
    kern_kv_view w;
    memset(&w, 0, sizeof w);
    w.block_table = table;
    w.block_size = p->bs;
    w.block_stride = p->lb;
    w.row_stride = (size_t)p->n_kv * p->hd;
    w.kq = p->k, w.vq = p->v;
    w.dtype = p->t;
    w.scale_off = p->scale_off;
    return w;
}

/* A row of attention-sized values: normal, with a wide range and one
 * outlier head value in some rows, so codes reach the ends of their range. */
static void kvq_row(float *x, int n, int kind) {
    fill(x, (size_t)n, kind == 1 ? 30.0f : 1.0f);
    if (kind == 2)
        x[rng_int(n)] *= 40.0f;
}

/* ---- the store ------------------------------------------------------------------ */

static void store_case(kern_kv_dtype t, int n_kv, int hd, int bs, int n_tok, size_t ld) {
    const int kd = n_kv * hd, n_blocks = (n_tok + bs - 1) / bs + 2;
    kvq_pool p;
    kvq_pool_make(&p, t, n_kv, hd, bs, n_blocks);
    const size_t total = p.lb * (size_t)n_blocks;
    uint8_t *ref_k = xmalloc(total), *ref_v = xmalloc(total);
    memcpy(ref_k, p.k, total);
    memcpy(ref_v, p.v, total);
    /* Distinct positions in random blocks; every fifth token slot -1. */
    const int n_pos = n_blocks * bs;
    int *perm = xmalloc((size_t)n_pos * sizeof(int));
    for (int i = 0; i < n_pos; i++)
        perm[i] = i;
    for (int i = n_pos - 1; i > 0; i--) {
        int j = rng_int(i + 1), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    float *k = xmalloc((size_t)n_tok * ld * sizeof(float));
    float *v = xmalloc((size_t)n_tok * ld * sizeof(float));
    int64_t *slots = xmalloc((size_t)n_tok * sizeof(int64_t));
    int32_t ident[1] = {0};
    kern_kv_view w = kvq_view(&p, ident);
    w.kq = ref_k, w.vq = ref_v;
    for (int i = 0; i < n_tok; i++) {
        kvq_row(k + (size_t)i * ld, kd, i % 3);
        kvq_row(v + (size_t)i * ld, kd, (i + 1) % 3);
        for (size_t e = (size_t)kd; e < ld; e++) /* the padding is never read */
            k[(size_t)i * ld + e] = v[(size_t)i * ld + e] = NAN;
        int blk = perm[i] / bs, row = perm[i] % bs;
        slots[i] = i % 5 == 4 ? -1 : (int64_t)blk * (int64_t)p.lb + row;
        if (slots[i] >= 0) { /* the reference: the store op at that block and row */
            ident[0] = blk;
            kern_kv_store(&w, row, k + (size_t)i * ld, v + (size_t)i * ld, kd, hd);
        }
    }
    uint8_t *d_k = dev_from(p.k, total), *d_v = dev_from(p.v, total);
    float *d_kr = dev_from(k, (size_t)n_tok * ld * sizeof(float));
    float *d_vr = dev_from(v, (size_t)n_tok * ld * sizeof(float));
    int64_t *d_slots = dev_from(slots, (size_t)n_tok * sizeof(int64_t));
    must(kern_cuda_kv_store_q(d_k, d_v, t, d_kr, d_vr, ld, d_slots, n_tok, n_kv, hd, bs, p.lb,
                              p.scale_off, g_stream),
         "kern_cuda_kv_store_q");
    to_host(p.k, d_k, total);
    to_host(p.v, d_v, total);
    size_t bad = 0;
    for (size_t i = 0; i < total; i++)
        bad += (p.k[i] != ref_k[i]) + (p.v[i] != ref_v[i]);
    report("KV_STORE_Q", (double)bad, 0, "dtype=%s,kv=%d,hd=%d,bs=%d,n_tok=%d,ld=%zu",
           kern_kv_dtype_name(t), n_kv, hd, bs, n_tok, ld);
    dev_free(d_k), dev_free(d_v), dev_free(d_kr), dev_free(d_vr), dev_free(d_slots);
    free(p.k), free(p.v), free(ref_k), free(ref_v), free(perm), free(k), free(v), free(slots);
}

/* ---- decode and prefill ---------------------------------------------------------- */

typedef struct kvq_shape {
    int hd, n_kv, group, bs, window;
    float softcap;
} kvq_shape;

/* A pool holding each of n_seq sequences' lens[s] positions, stored by the
 * store op (the C reference), in shuffled blocks; bt gets the tables
 * (max_blocks a row, -1 past a sequence's blocks). */
static void fill_seqs(kvq_pool *p, const int *lens, int n_seq, int max_blocks, int32_t *bt) {
    int n_used = 0;
    for (int s = 0; s < n_seq; s++)
        n_used += (lens[s] + p->bs - 1) / p->bs;
    int32_t *perm = shuffled_ids(p->n_blocks, rng_int);
    int next = 0, kd = p->n_kv * p->hd;
    float *k = xmalloc((size_t)kd * sizeof(float)), *v = xmalloc((size_t)kd * sizeof(float));
    for (int s = 0; s < n_seq; s++) {
        int32_t *row = bt + (size_t)s * max_blocks;
        for (int b = 0; b < max_blocks; b++)
            row[b] = b < (lens[s] + p->bs - 1) / p->bs ? perm[next++] : -1;
        kern_kv_view w = kvq_view(p, row);
        for (int pos = 0; pos < lens[s]; pos++) {
            kvq_row(k, kd, pos % 7 == 3 ? 2 : 0);
            kvq_row(v, kd, pos % 5 == 1 ? 2 : 0);
            kern_kv_store(&w, pos, k, v, kd, p->hd);
        }
    }
    (void)n_used;
    free(perm), free(k), free(v);
}

static void decode_case(kern_kv_dtype t, const kvq_shape *sh, const int *lens, int n_seq) {
    const int hd = sh->hd, n_heads = sh->n_kv * sh->group;
    int max_len = 0, used = 0;
    for (int s = 0; s < n_seq; s++) {
        max_len = lens[s] > max_len ? lens[s] : max_len;
        used += (lens[s] + sh->bs - 1) / sh->bs;
    }
    const int max_blocks = (max_len + sh->bs - 1) / sh->bs + 1;
    kvq_pool p;
    kvq_pool_make(&p, t, sh->n_kv, hd, sh->bs, used + 3);
    int32_t *bt = xmalloc((size_t)n_seq * max_blocks * sizeof(int32_t));
    fill_seqs(&p, lens, n_seq, max_blocks, bt);
    const size_t q_n = (size_t)n_seq * n_heads * hd;
    float *q = xmalloc(q_n * sizeof(float)), *ref = xmalloc(q_n * sizeof(float));
    float *got = xmalloc(q_n * sizeof(float)),
          *scratch = xmalloc((size_t)(max_len + 1) * sizeof(float));
    fill(q, q_n, 1.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < n_seq; s++) {
        kern_kv_view view = kvq_view(&p, bt + (size_t)s * max_blocks);
        view.window = sh->window;
        view.softcap = sh->softcap;
        for (int h = 0; h < n_heads; h++) {
            size_t o = ((size_t)s * n_heads + h) * hd;
            if (lens[s] == 0)
                memset(ref + o, 0, (size_t)hd * sizeof(float));
            else
                kern_attention_head_ref(ref + o, q + o, &view, h / sh->group, lens[s], hd, scale,
                                        scratch);
        }
    }
    const size_t total = p.lb * (size_t)p.n_blocks;
    uint8_t *d_k = dev_from(p.k, total), *d_v = dev_from(p.v, total);
    int32_t *d_bt = dev_from(bt, (size_t)n_seq * max_blocks * sizeof(int32_t));
    int32_t *d_len = dev_from(lens, (size_t)n_seq * sizeof(int32_t));
    float *d_q = dev_from(q, q_n * sizeof(float)), *d_out = dev_alloc(q_n * sizeof(float));
    size_t ws_bytes = kern_cuda_attn_decode_workspace(n_seq, n_heads, hd, max_blocks, sh->bs);
    float *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    must(kern_cuda_attn_decode_kv(d_out, d_q, d_k, d_v, t, p.scale_off, d_bt, max_blocks, d_len,
                                  n_seq, n_heads, sh->n_kv, hd, sh->bs, p.lb, (size_t)sh->n_kv * hd,
                                  scale, sh->window, sh->softcap, ws, ws_bytes, g_stream),
         "kern_cuda_attn_decode_kv");
    to_host(got, d_out, q_n * sizeof(float));
    report("ATTN_DECODE_Q", norm_err(got, ref, q_n), 1e-5,
           "dtype=%s,hd=%d,kv=%d,g=%d,bs=%d,n_seq=%d,max_len=%d,window=%d,softcap=%g",
           kern_kv_dtype_name(t), hd, sh->n_kv, sh->group, sh->bs, n_seq, max_len, sh->window,
           (double)sh->softcap);
    dev_free(d_k), dev_free(d_v), dev_free(d_bt), dev_free(d_len), dev_free(d_q), dev_free(d_out);
    dev_free(ws);
    free(p.k), free(p.v), free(bt), free(q), free(ref), free(got), free(scratch);
}

/* Runs of n rows at pos0 .. pos0 + n - 1, one sequence each, rows back to back. */
static void prefill_case(kern_kv_dtype t, const kvq_shape *sh, const int (*runs)[2], int n_runs) {
    const int hd = sh->hd, n_heads = sh->n_kv * sh->group;
    int *lens = xmalloc((size_t)n_runs * sizeof(int)), max_len = 0, used = 0, n_rows = 0, max_n = 0;
    int32_t *rv = xmalloc((size_t)n_runs * 3 * sizeof(int32_t));
    for (int r = 0; r < n_runs; r++) {
        lens[r] = runs[r][1] + runs[r][0];
        max_len = lens[r] > max_len ? lens[r] : max_len;
        used += (lens[r] + sh->bs - 1) / sh->bs;
        rv[3 * r] = n_rows, rv[3 * r + 1] = runs[r][0], rv[3 * r + 2] = runs[r][1];
        n_rows += runs[r][0];
        max_n = runs[r][0] > max_n ? runs[r][0] : max_n;
    }
    const int max_blocks = (max_len + sh->bs - 1) / sh->bs + 1;
    kvq_pool p;
    kvq_pool_make(&p, t, sh->n_kv, hd, sh->bs, used + 3);
    int32_t *bt = xmalloc((size_t)n_runs * max_blocks * sizeof(int32_t));
    fill_seqs(&p, lens, n_runs, max_blocks, bt);
    const size_t q_stride = (size_t)n_heads * hd, q_n = (size_t)n_rows * q_stride;
    float *q = xmalloc(q_n * sizeof(float)), *ref = xmalloc(q_n * sizeof(float));
    float *got = xmalloc(q_n * sizeof(float)),
          *scratch = xmalloc((size_t)(max_len + 1) * sizeof(float));
    fill(q, q_n, 1.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < n_runs; r++) {
        kern_kv_view view = kvq_view(&p, bt + (size_t)r * max_blocks);
        view.window = sh->window;
        view.softcap = sh->softcap;
        for (int i = 0; i < runs[r][0]; i++)
            for (int h = 0; h < n_heads; h++) {
                size_t o = (size_t)(rv[3 * r] + i) * q_stride + (size_t)h * hd;
                kern_attention_head_ref(ref + o, q + o, &view, h / sh->group, runs[r][1] + i + 1,
                                        hd, scale, scratch);
            }
    }
    const size_t total = p.lb * (size_t)p.n_blocks;
    uint8_t *d_k = dev_from(p.k, total), *d_v = dev_from(p.v, total);
    int32_t *d_bt = dev_from(bt, (size_t)n_runs * max_blocks * sizeof(int32_t));
    int32_t *d_runs = dev_from(rv, (size_t)n_runs * 3 * sizeof(int32_t));
    float *d_q = dev_from(q, q_n * sizeof(float)), *d_out = dev_alloc(q_n * sizeof(float));
    must(kern_cuda_attn_prefill_kv(d_out, d_q, q_stride, d_k, d_v, t, p.scale_off, d_bt, max_blocks,
                                   d_runs, n_runs, max_n, n_heads, sh->n_kv, hd, sh->bs, p.lb,
                                   (size_t)sh->n_kv * hd, scale, sh->window, sh->softcap, g_stream),
         "kern_cuda_attn_prefill_kv");
    to_host(got, d_out, q_n * sizeof(float));
    report("ATTN_PREFILL_Q", norm_err(got, ref, q_n), 1e-5,
           "dtype=%s,hd=%d,kv=%d,g=%d,bs=%d,runs=%d,max_len=%d,window=%d,softcap=%g",
           kern_kv_dtype_name(t), hd, sh->n_kv, sh->group, sh->bs, n_runs, max_len, sh->window,
           (double)sh->softcap);
    dev_free(d_k), dev_free(d_v), dev_free(d_bt), dev_free(d_runs), dev_free(d_q);
    dev_free(d_out);
    free(lens), free(rv), free(p.k), free(p.v), free(bt), free(q), free(ref), free(got);
    free(scratch);
}

/* Bad arguments: BRISK_EINVAL before any launch (host addresses stand in
 * for device pointers); a dtype the GPU does not read is refused too. */
static void invalid_cases(void) {
    uint8_t pool[64];
    float x[64];
    int64_t slot = 0;
    int32_t bt = 0, len = 1, run[3] = {0, 1, 0};
    const size_t lb = kern_kv_layer_block_bytes(KERN_KV_INT8, 64, 64, 16);
    const size_t so = kern_kv_scale_off(KERN_KV_INT8, 64, 16);
    int bad = 0;
    bad += kern_cuda_kv_store_q(pool, pool, KERN_KV_Q8_0, x, x, 64, &slot, 1, 1, 64, 16, lb, so,
                                g_stream) != BRISK_EINVAL;
    bad += kern_cuda_kv_store_q(pool, pool, KERN_KV_INT8, x, x, 64, &slot, 1, 1, 40, 16, lb, so,
                                g_stream) != BRISK_EINVAL; /* head not a multiple of 16 */
    bad += kern_cuda_kv_store_q(pool, pool, KERN_KV_FP8, x, x, 64, &slot, 1, 1, 64, 16, so, so,
                                g_stream) != BRISK_EINVAL; /* block_stride without the scales */
    bad += kern_cuda_kv_store_q(pool, pool, KERN_KV_INT8, x, x, 63, &slot, 1, 1, 64, 16, lb, so,
                                g_stream) != BRISK_EINVAL; /* ld < kv_dim */
    bad += kern_cuda_kv_store_q(pool, pool, KERN_KV_INT8, x, x, 64, &slot, 0, 1, 64, 16, lb, so,
                                g_stream) != BRISK_OK;
    bad += kern_cuda_attn_decode_kv(x, x, pool, pool, KERN_KV_Q4_0, so, &bt, 1, &len, 1, 1, 1, 64,
                                    16, lb, 64, 0.125f, 0, 0.0f, NULL, 0, g_stream) != BRISK_EINVAL;
    bad += kern_cuda_attn_decode_kv(x, x, pool, pool, KERN_KV_INT8, so, &bt, 1, &len, 1, 1, 1, 64,
                                    16, so, 64, 0.125f, 0, 0.0f, NULL, 0, g_stream) != BRISK_EINVAL;
    bad += kern_cuda_attn_prefill_kv(x, x, 64, pool, pool, KERN_KV_F32, so, &bt, 1, run, 1, 1, 1, 1,
                                     64, 16, lb, 64, 0.125f, 0, 0.0f, g_stream) != BRISK_EINVAL;
    bad += kern_cuda_attn_prefill_kv(x, x, 64, pool, pool, KERN_KV_FP8, 0, &bt, 1, run, 1, 1, 1, 1,
                                     64, 16, lb, 64, 0.125f, 0, 0.0f,
                                     g_stream) != BRISK_EINVAL; /* scales inside the codes */
    report("KV_QUANT_ARGS", (double)bad, 0, "bad arguments refused");
}

void test_kv_quant(void) {
    const kern_kv_dtype dts[] = {KERN_KV_INT8, KERN_KV_FP8};
    for (int di = 0; di < 2; di++) {
        kern_kv_dtype t = dts[di];
        store_case(t, 3, 64, 16, 37, 3 * 64 + 16);
        store_case(t, 8, 128, 16, 200, 3 * 8 * 128);
        store_case(t, 1, 256, 5, 23, 256);
        if (!g_small)
            store_case(t, 2, 16, 16, 64, 32);
        const kvq_shape sh[] = {
            {64, 3, 3, 16, 0, 0.0f},   /* SmolLM2 */
            {128, 8, 4, 16, 0, 0.0f},  /* llama-3-8b */
            {256, 1, 4, 16, 0, 0.0f},  /* Gemma 3 */
            {128, 2, 8, 16, 0, 0.0f},  /* a group of 8 */
            {64, 2, 1, 5, 0, 0.0f},    /* no GQA, an odd block size */
            {64, 2, 4, 16, 100, 0.0f}, /* a window */
            {32, 2, 2, 16, 0, 30.0f},  /* a soft-cap */
            {16, 4, 2, 16, 20, 0.0f},  /* the smallest head int8/fp8 take */
        };
        const int lens[] = {1, 17, 256, 257, 1100, 0, 600};
        const int runs[][2] = {{1, 0}, {16, 0}, {7, 300}, {40, 700}, {1, 1023}};
        for (size_t i = 0; i < CASES_LEN(sh); i++) {
            decode_case(t, &sh[i], lens, (int)ARRAY_LEN(lens));
            prefill_case(t, &sh[i], runs, (int)ARRAY_LEN(runs));
        }
    }
    invalid_cases();
}
