/* kern_matmul.c - matmul entry point: reference, portable C path, activation
 * quantization, threading.
 *
 * Work split: output rows are cut into tasks of whole 16-row groups (16 is a
 * multiple of every SIMD row tile, so no tile straddles two tasks), about
 * 4 tasks per thread so the atomic task counter evens out a slow core, and
 * the task count is rounded to a multiple of the thread count so the last
 * round is not left to one thread; tasks are numbered so that each thread's
 * usual share is one contiguous run of rows (mm_task). Each task runs
 * every token over its rows; the row kernels tile tokens so one weight row
 * read serves a whole tile.
 *
 * Integer weights (Q8_0, Q8_0M, Q4_0, Q4_1): the activations are quantized
 * once per call to int16 blocks in the caller's workspace (in parallel over
 * tokens for a long prompt; kern_internal.h gives the rule), then every level
 * computes, per block, the exact int32 dot product isum of the integer
 * weights q and int16 activations (|isum| <= 32 * 128 * 32767 < 2^31) and
 * accumulates
 *     acc = fma((float)isum, d_w * d_x, acc)
 *     acc = fma(m_w, s_x, acc)                    (Q8_0M and Q4_1 only)
 * in block order with exactly these IEEE operations - so every level gives
 * the reference's result bit for bit, whatever order it sums isum in. Q4_0's
 * q is nibble - 8 and Q4_1's the nibble: the integers kern_requantize_row_q8
 * stores in the Q8_0 / Q8_0M blocks it makes from them, with the same d and
 * m, so a Q4 matrix and its int8 requantization give identical results (a
 * Q4 matrix is 18 or 20 bytes per 32 weights against 34 or 36: decode reads
 * 44-47% fewer bytes). The int16 activations keep their quantization error
 * ~256x below int8's, which matters for models that amplify it (SmolLM2-135M:
 * 25% logit error with int8 activations). */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_kquant.h"
#include "kernels/cpu/kern_ops.h"
#include "kernels/cpu/kern_table.h"

#define ROW_GROUP 16 /* rows; a multiple of the largest row tile (AVX-512 T=1: 16) */
/* Below this many tokens a matmul streams its weights (see the task count
 * in kern_matmul_multi). */
#define MM_STREAM_MAX_TOK 16

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* The AMX planes' bytes (each of the two), or 0 when this CPU runs no AMX.
 * Counted for every integer type (kern_matmul_ws_bytes), not only the X8
 * forms AMX runs, so that all integer types still need the same workspace
 * (kern_matmul_multi's contract: sized by any part's type). */
static size_t amx_plane_bytes(int n_in, int n_tok) {
    if (!kern_cpu_detect()->amx)
        return 0;
    return align64((size_t)kern_amx_tok_pad(n_tok) * (size_t)n_in);
}

/* int16 activations [n_tok][n_in], then d, s and sum(q), each [n_in/32][n_tok];
 * on an AMX CPU (whatever the cap), then the high and low byte planes
 * (kern_mm_args.xh, xl). */
size_t kern_matmul_ws_bytes(kern_type wt, int n_in, int n_tok) {
    if (!kern_is_int_weight(wt))
        return 0;
    size_t scales = (size_t)(n_in / KERN_QK) * (size_t)n_tok * sizeof(float);
    return align64((size_t)n_tok * (size_t)n_in * sizeof(int16_t)) + 3 * align64(scales) +
           2 * amx_plane_bytes(n_in, n_tok);
}

/* ---- activation quantization ------------------------------------------------ */

/* rintf(v) as int16. A NaN has no integer value (converting it is undefined
 * in C): it arises from NaN or infinite activations, which a hostile model's
 * weights produce. The SIMD paths give -32768 for it (cvtps' "integer
 * indefinite", saturated by packs), so this does too; a finite v is within
 * +-32767 by construction of the scale. */
static int16_t act_q16(float v) {
    float r = rintf(v);
    return r == r ? (int16_t)r : INT16_MIN;
}

void kern_quantize_act_scalar(const float *x, int n, int16_t *q, float *d, float *s, int32_t *qsum,
                              int stride) {
    for (int b = 0; b < n / KERN_QK; b++) {
        const float *xb = x + b * KERN_QK;
        float amax = 0.0f;
        for (int j = 0; j < KERN_QK; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        /* Below FLT_MIN, 1/d would overflow: such a block counts as zero. */
        float db = amax / 32767.0f;
        if (!(db >= FLT_MIN))
            db = 0.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < KERN_QK; j++) {
            int16_t v = act_q16(xb[j] * id);
            q[b * KERN_QK + j] = v;
            sum += v;
        }
        d[(size_t)b * stride] = db;
        s[(size_t)b * stride] = db * (float)sum; /* |sum| < 2^20: exact in float */
        qsum[(size_t)b * stride] = sum;
    }
}

/* ---- reference ------------------------------------------------------------ */

static float weight_at(kern_type wt, const uint8_t *row, int i) {
    uint16_t h;
    switch (wt) {
    case KERN_TYPE_F32: {
        float f;
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    case KERN_TYPE_F16: memcpy(&h, row + (size_t)i * 2, 2); return kern_fp16_to_fp32(h);
    case KERN_TYPE_BF16: memcpy(&h, row + (size_t)i * 2, 2); return kern_bf16_to_fp32(h);
    default: return 0.0f;
    }
}

/* Block b of an integer weight row: its 32 values q, d and (Q8_0M, Q4_1)
 * m. The int8 types return their qs; the Q4 types unpack into buf. */
static const int8_t *q8_block(kern_type wt, const uint8_t *row, int b, float *dw, float *mw,
                              int8_t buf[KERN_QK]) {
    switch (wt) {
    case KERN_TYPE_Q8_0M: {
        const kern_block_q8_0m *blk = (const kern_block_q8_0m *)row + b;
        *dw = kern_fp16_to_fp32(blk->d);
        *mw = kern_fp16_to_fp32(blk->m);
        return blk->qs;
    }
    case KERN_TYPE_Q4_0: {
        const kern_block_q4_0 *blk = (const kern_block_q4_0 *)row + b;
        *dw = kern_fp16_to_fp32(blk->d);
        *mw = 0.0f;
        for (int j = 0; j < KERN_QK / 2; j++) {
            buf[j] = (int8_t)((blk->qs[j] & 0x0f) - 8);
            buf[j + 16] = (int8_t)((blk->qs[j] >> 4) - 8);
        }
        return buf;
    }
    case KERN_TYPE_Q4_1: {
        const kern_block_q4_1 *blk = (const kern_block_q4_1 *)row + b;
        *dw = kern_fp16_to_fp32(blk->d);
        *mw = kern_fp16_to_fp32(blk->m);
        for (int j = 0; j < KERN_QK / 2; j++) {
            buf[j] = (int8_t)(blk->qs[j] & 0x0f);
            buf[j + 16] = (int8_t)(blk->qs[j] >> 4);
        }
        return buf;
    }
    case KERN_TYPE_Q6_0S: { /* q = code - 32; da as dw, db as mw */
        const uint8_t *blk = row + (size_t)b * kern_type_traits_of(wt)->block_bytes;
        uint16_t h;
        memcpy(&h, blk, 2);
        *dw = kern_fp16_to_fp32(h);
        memcpy(&h, blk + 2, 2);
        *mw = kern_fp16_to_fp32(h);
        for (int j = 0; j < KERN_QK; j++)
            buf[j] = (int8_t)(((j < 16 ? blk[4 + j] & 0x0f : blk[4 + j - 16] >> 4) |
                               ((blk[20 + j / 4] >> (2 * (j % 4))) & 3) << 4) -
                              32);
        return buf;
    }
    case KERN_TYPE_Q5_0:
    case KERN_TYPE_Q5_1:
    case KERN_TYPE_IQ4_NL: {
        /* Q5_0 as Q8_0 with q = code - 16, Q5_1 as Q8_0M with q = code,
         * IQ4_NL as Q8_0 with q = KV[code]: the exact conversion
         * (kern_kq_convert_row) of the one block. */
        kern_block_q8_0m q;
        const size_t bb = kern_type_block_bytes(wt);
        kern_kq_convert_row(wt, row + (size_t)b * bb, kern_int8_type(wt), &q, KERN_QK);
        if (wt != KERN_TYPE_Q5_1) {
            const kern_block_q8_0 *q0 = (const kern_block_q8_0 *)(void *)&q;
            *dw = kern_fp16_to_fp32(q0->d);
            *mw = 0.0f;
            memcpy(buf, q0->qs, KERN_QK);
        } else {
            *dw = kern_fp16_to_fp32(q.d);
            *mw = kern_fp16_to_fp32(q.m);
            memcpy(buf, q.qs, KERN_QK);
        }
        return buf;
    }
    default: {
        const kern_block_q8_0 *blk = (const kern_block_q8_0 *)row + b;
        *dw = kern_fp16_to_fp32(blk->d);
        *mw = 0.0f;
        return blk->qs;
    }
    }
}

/* Block b of row o of matrix W (rows of rb bytes, nb blocks): q8_block, and
 * for the X8 types the row's block taken out of its group (kern_x8_get_row)
 * first, its values copied into buf. */
static const int8_t *q8_block_at(kern_type wt, const uint8_t *W, size_t rb, int nb, int o, int b,
                                 float *dw, float *mw, int8_t buf[KERN_QK]) {
    if (!kern_type_is_x8(wt))
        return q8_block(wt, W + (size_t)o * rb, b, dw, mw, buf);
    const kern_type base = kern_x8_base(wt);
    const size_t gb = 8 * kern_type_block_bytes(base); /* one block of a group */
    _Alignas(8) uint8_t blk[sizeof(kern_block_q8_0m)];
    kern_x8_get_row(wt, W + ((size_t)(o / 8) * (size_t)nb + (size_t)b) * gb, KERN_QK, o % 8, blk);
    const int8_t *q = q8_block(base, blk, 0, dw, mw, buf);
    if (q != buf)
        memcpy(buf, q, KERN_QK);
    return buf;
}

/* One block's contribution, the arithmetic every level reproduces. */
static float q8_block_acc(float acc, kern_type wt, const int8_t *qw, float dw, float mw,
                          const int16_t *qx, float dx, float sx) {
    const kern_type_traits *tr = kern_type_traits_of(wt);
    if (tr->two_scales) {
        /* Two half-blocks: da (dw) for values 0..15, db (mw) for 16..31. */
        int32_t ia = 0, ib = 0;
        for (int j = 0; j < 16; j++) {
            ia += (int32_t)qw[j] * (int32_t)qx[j];
            ib += (int32_t)qw[j + 16] * (int32_t)qx[j + 16];
        }
        acc = fmaf((float)ia, dw * dx, acc);
        return fmaf((float)ib, mw * dx, acc);
    }
    int32_t isum = 0;
    for (int j = 0; j < KERN_QK; j++)
        isum += (int32_t)qw[j] * (int32_t)qx[j];
    acc = fmaf((float)isum, dw * dx, acc);
    if (tr->offset)
        acc = fmaf(mw, sx, acc);
    return acc;
}

/* The definition. Allocates a temporary for the quantized activations (it
 * is a test oracle, not a hot path). */
void kern_matmul_ref(kern_type wt, const void *W, int n_out, int n_in, const float *x, int n_tok,
                     float *y) {
    const uint8_t *w = W;
    size_t rb = kern_row_bytes(wt, n_in);
    if (kern_is_int_weight(wt)) {
        int nb = n_in / KERN_QK;
        int16_t *xq = malloc((size_t)n_in * sizeof(*xq));
        float *xd = malloc((size_t)nb * 2 * sizeof(float));
        int32_t *xi = malloc((size_t)nb * sizeof(int32_t));
        if (!xq || !xd || !xi) {
            /* Out of memory in the test oracle: NaN makes every comparison fail. */
            free(xq);
            free(xd);
            free(xi);
            for (size_t i = 0; i < (size_t)n_tok * (size_t)n_out; i++)
                y[i] = NAN;
            return;
        }
        float *xs = xd + nb;
        for (int t = 0; t < n_tok; t++) {
            kern_quantize_act_scalar(x + (size_t)t * n_in, n_in, xq, xd, xs, xi, 1);
            for (int o = 0; o < n_out; o++) {
                float acc = 0.0f;
                for (int b = 0; b < nb; b++) {
                    float dw, mw;
                    int8_t buf[KERN_QK];
                    const int8_t *qw = q8_block_at(wt, w, rb, nb, o, b, &dw, &mw, buf);
                    acc = q8_block_acc(acc, wt, qw, dw, mw, xq + b * KERN_QK, xd[b], xs[b]);
                }
                y[(size_t)t * n_out + o] = acc;
            }
        }
        free(xq);
        free(xd);
        free(xi);
        return;
    }
    for (int t = 0; t < n_tok; t++) {
        for (int o = 0; o < n_out; o++) {
            const uint8_t *row = w + (size_t)o * rb;
            float acc = 0.0f;
            for (int i = 0; i < n_in; i++)
                acc = acc + weight_at(wt, row, i) * x[(size_t)t * n_in + i];
            y[(size_t)t * n_out + o] = acc;
        }
    }
}

/* ---- portable C path ------------------------------------------------------
 * Same arithmetic as the reference (so bit-identical to it), but a weight
 * row is read once per tile of 4 tokens instead of once per token. */

#define SCALAR_TT 4 /* tokens per tile */

static void rows_scalar_q8(const kern_mm_args *a, int r0, int r1) {
    int nb = a->n_in / KERN_QK;
    for (int t0 = 0; t0 < a->n_tok; t0 += SCALAR_TT) {
        int nt = a->n_tok - t0 < SCALAR_TT ? a->n_tok - t0 : SCALAR_TT;
        for (int o = r0; o < r1; o++) {
            float acc[SCALAR_TT] = {0};
            for (int b = 0; b < nb; b++) {
                float dw, mw;
                int8_t buf[KERN_QK];
                const int8_t *qw = q8_block_at(a->wt, a->W, a->row_bytes, nb, o, b, &dw, &mw, buf);
                for (int t = 0; t < nt; t++) {
                    size_t k = (size_t)b * a->n_tok + t0 + t;
                    acc[t] = q8_block_acc(acc[t], a->wt, qw, dw, mw,
                                          a->xq + (size_t)(t0 + t) * a->n_in + b * KERN_QK,
                                          a->xd[k], a->xs[k]);
                }
            }
            for (int t = 0; t < nt; t++)
                a->y[(size_t)(t0 + t) * a->n_out + o] = acc[t];
        }
    }
}

static void rows_scalar_float(const kern_mm_args *a, int r0, int r1) {
    for (int t0 = 0; t0 < a->n_tok; t0 += SCALAR_TT) {
        int nt = a->n_tok - t0 < SCALAR_TT ? a->n_tok - t0 : SCALAR_TT;
        for (int o = r0; o < r1; o++) {
            const uint8_t *row = a->W + (size_t)o * a->row_bytes;
            float acc[SCALAR_TT] = {0};
            for (int i = 0; i < a->n_in; i++) {
                float w = weight_at(a->wt, row, i);
                for (int t = 0; t < nt; t++)
                    acc[t] = acc[t] + w * a->x[(size_t)(t0 + t) * a->n_in + i];
            }
            for (int t = 0; t < nt; t++)
                a->y[(size_t)(t0 + t) * a->n_out + o] = acc[t];
        }
    }
}

void kern_mm_rows_scalar(const kern_mm_args *a, int r0, int r1) {
    if (kern_is_int_weight(a->wt))
        rows_scalar_q8(a, r0, r1);
    else
        rows_scalar_float(a, r0, r1);
}

/* ---- kernel choice -------------------------------------------------------------
 * Which level's kernel runs a weight type at a batch size. Every level gives
 * the same bits for the integer types (the reference's block arithmetic) and
 * the AVX2 and AVX-512 float kernels share one arithmetic (8-lane
 * accumulators in input order, then hsum8), so the choice can follow the
 * batch size without breaking batch invariance. The choice is the kernel
 * table's (kern_table.c): a row per kind of CPU (kern_cpu_uarch), fixed in
 * the code from measurements (docs/KERNELS.md, "Kernel choice"), the same
 * on every replica, never timed at start-up. */

/* 1: the AVX2 kernel of row-major integer weights for n_tok tokens reads the
 * paired activation layout (kern_internal.h). */
static int act_paired(kern_level lv, kern_type wt, int n_tok) {
    return lv == KERN_LEVEL_AVX2 && kern_is_int_weight(wt) && !kern_type_is_x8(wt) &&
           n_tok < KERN_AVX2_PLAIN_MIN_TOK;
}

static kern_level pick_level(kern_type wt, int n_tok, kern_level top, kern_pick pick) {
    /* Row-major integer weights have AVX2 kernels only: the AVX-512 levels
     * run them (the X8 forms, which the CPU backend loads, have their own). */
    if (top > KERN_LEVEL_AVX2 && kern_is_int_weight(wt) && !kern_type_is_x8(wt))
        return KERN_LEVEL_AVX2;
    if (top < KERN_LEVEL_AVX512 || pick == KERN_PICK_LEVEL)
        return top;
    return kern_table_pick(kern_cpu_uarch(), wt, n_tok, top);
}

kern_level kern_matmul_level(kern_type wt, int n_tok) {
    return pick_level(wt, n_tok, kern_cpu_level(), kern_cpu_pick());
}

const char *kern_matmul_kernel_name(kern_type wt, int n_tok) {
    const kern_level lv = kern_matmul_level(wt, n_tok);
    const int x8 = kern_type_is_x8(wt), integer = kern_is_int_weight(wt);
    switch (lv) {
    case KERN_LEVEL_SCALAR: return "scalar 4-token tiles";
    case KERN_LEVEL_AVX2:
        if (x8)
            return n_tok <= KERN_X8_STREAM_MAX_TOK ? "avx2 x8 2-stream" : "avx2 x8 16x3";
        if (integer)
            return n_tok == 1                        ? "avx2 row 8x1"
                   : n_tok < KERN_AVX2_PLAIN_MIN_TOK ? "avx2 row 2x4 paired"
                                                     : "avx2 row g8 16x3";
        return n_tok == 1 ? "avx2 f 2-stream" : "avx2 f 2x4";
    case KERN_LEVEL_AMX:
        if (x8)
            return "amx x8 16x16 tiles";
        return n_tok == 1 ? "avx512 f 2-stream" : "avx512 f 6x8";
    case KERN_LEVEL_AVX512:
    case KERN_LEVEL_AVX512VNNI:
        if (x8) {
            if (lv == KERN_LEVEL_AVX512VNNI)
                return n_tok <= KERN_X8Z_STREAM_MAX_TOK ? "avx512vnni x8 2-stream"
                                                        : "avx512vnni x8 32x6";
            return n_tok <= KERN_X8Z_STREAM_MAX_TOK ? "avx512 x8 2-stream" : "avx512 x8 32x6";
        }
        return n_tok == 1 ? "avx512 f 2-stream" : "avx512 f 6x8";
    }
    return "unknown";
}

void kern_matmul_describe(kern_type wt, char *buf, int len) {
    if (!buf || len <= 0)
        return;
    snprintf(buf, (size_t)len, "%s: 1 token %s, 4 tokens %s, 64 tokens %s", kern_type_name(wt),
             kern_matmul_kernel_name(wt, 1), kern_matmul_kernel_name(wt, 4),
             kern_matmul_kernel_name(wt, 64));
}

static kern_mm_rows_fn rows_fn(kern_level lv) {
    switch (lv) {
    case KERN_LEVEL_AMX: return kern_mm_rows_amx;
    case KERN_LEVEL_AVX512VNNI: return kern_mm_rows_avx512vnni;
    case KERN_LEVEL_AVX512: return kern_mm_rows_avx512;
    case KERN_LEVEL_AVX2: return kern_mm_rows_avx2;
    case KERN_LEVEL_SCALAR: break;
    }
    return kern_mm_rows_scalar;
}

/* ---- threading --------------------------------------------------------------- */

typedef struct {
    kern_mm_args a[KERN_MATMUL_MAX_PARTS];
    kern_mm_rows_fn rows[KERN_MATMUL_MAX_PARTS];
    int g_first[KERN_MATMUL_MAX_PARTS + 1]; /* part p owns groups [g_first[p], g_first[p + 1]) */
    int n_parts;
    int n_groups, n_tasks, n_threads;
    kern_pool *pool; /* wide: each thread's kern_pool_scratch for the X8 long-batch tiles */
    int wide;
} mm_job;

static void mm_task(void *ctx, int task, int thread) {
    const mm_job *j = ctx;
    /* The pool hands tasks out in order, so thread k usually runs tasks k,
     * k + n_threads, ...: those become consecutive row ranges, each thread's
     * share one contiguous stretch of the matrices that its prefetch of the
     * next tile runs on into (the task order does not change any result). */
    if (j->n_tasks % j->n_threads == 0) {
        int per = j->n_tasks / j->n_threads;
        task = (task % j->n_threads) * per + task / j->n_threads;
    }
    int g0 = (int)((int64_t)task * j->n_groups / j->n_tasks);
    int g1 = (int)((int64_t)(task + 1) * j->n_groups / j->n_tasks);
    /* The groups of all parts form one row space; a task may span two. */
    for (int p = 0; p < j->n_parts; p++) {
        int lo = g0 > j->g_first[p] ? g0 : j->g_first[p];
        int hi = g1 < j->g_first[p + 1] ? g1 : j->g_first[p + 1];
        if (lo >= hi)
            continue;
        kern_mm_args a_thread;
        const kern_mm_args *a = &j->a[p];
        if (j->wide) {
            a_thread = *a;
            a_thread.wide = kern_pool_scratch(j->pool, thread);
            a_thread.wide_bytes = a_thread.wide ? kern_pool_scratch_bytes(j->pool) : 0;
            a = &a_thread;
        }
        int r0 = (lo - j->g_first[p]) * ROW_GROUP;
        int r1 = (hi - j->g_first[p]) * ROW_GROUP < a->n_out ? (hi - j->g_first[p]) * ROW_GROUP
                                                             : a->n_out;
        j->rows[p](a, r0, r1);
    }
}

typedef struct {
    const float *x;
    int n_in, n_tok, tok_per_task;
    int avx2;   /* the AVX2 quantizer (same values as the scalar one) */
    int paired; /* the paired layout of the AVX2 kernels (kern_internal.h) */
    int16_t *xq;
    float *xd, *xs;
    int32_t *xi;
    int8_t *xh; /* the AMX planes, or NULL */
    uint8_t *xl;
} quant_job;

/* q = 256 h + l with h = q >> 8 (arithmetic) and l = q & 255: TDPBSSD
 * multiplies the signed high bytes, TDPBUSD the unsigned low ones, and
 * 256 * isum(h) + isum(l) is the block's exact int32 sum. */
static void amx_split_row(const int16_t *q, int n, int8_t *h, uint8_t *l) {
    for (int i = 0; i < n; i++) {
        h[i] = (int8_t)(q[i] >> 8);
        l[i] = (uint8_t)(q[i] & 0xff);
    }
}

static void quant_task(void *ctx, int task, int thread) {
    (void)thread;
    const quant_job *q = ctx;
    int t0 = task * q->tok_per_task;
    int t1 = t0 + q->tok_per_task < q->n_tok ? t0 + q->tok_per_task : q->n_tok;
    for (int t = t0; t < t1; t++) {
        const float *x = q->x + (size_t)t * q->n_in;
        if (!q->avx2) {
            int16_t *row = q->xq + (size_t)t * q->n_in;
            kern_quantize_act_scalar(x, q->n_in, row, q->xd + t, q->xs + t, q->xi + t, q->n_tok);
            if (q->xh)
                amx_split_row(row, q->n_in, q->xh + (size_t)t * q->n_in,
                              q->xl + (size_t)t * q->n_in);
            continue;
        }
        int paired = q->paired && t < (q->n_tok & ~1);
        int16_t *row = q->xq + (size_t)(paired ? t & ~1 : t) * q->n_in;
        kern_quantize_act_avx2(x, q->n_in, row, q->xd + t, q->xs + t, q->xi + t, q->n_tok,
                               paired ? t & 1 : -1);
        if (q->xh && !paired)
            amx_split_row(row, q->n_in, q->xh + (size_t)t * q->n_in, q->xl + (size_t)t * q->n_in);
    }
    /* The last task zeroes the planes' padding rows. */
    if (q->xh && t1 == q->n_tok) {
        size_t pad = (size_t)(kern_amx_tok_pad(q->n_tok) - q->n_tok) * (size_t)q->n_in;
        memset(q->xh + (size_t)q->n_tok * q->n_in, 0, pad);
        memset(q->xl + (size_t)q->n_tok * q->n_in, 0, pad);
    }
}

/* Below this many tokens quantizing on the caller (~0.3 us per 576-float
 * row) is cheaper than a pool dispatch (~1-2 us). */
#define QUANT_PARALLEL_MIN_TOK 8

void kern_matmul_multi(kern_pool *pool, const kern_matmul_part *parts, int n_parts, int n_in,
                       const float *x, int n_tok, void *ws) {
    if (n_tok <= 0 || n_parts <= 0)
        return;
    assert(n_parts <= KERN_MATMUL_MAX_PARTS);
    const kern_level top = kern_cpu_level();
    const kern_pick pick = kern_cpu_pick();
    int n_threads = kern_pool_size(pool);
    mm_job j = {.n_parts = n_parts};
    int any_int = 0, n_paired = 0, n_plain = 0, any_amx = 0;
    for (int p = 0; p < n_parts; p++) {
        const kern_matmul_part *q = &parts[p];
        int n_out = q->n_out > 0 ? q->n_out : 0;
        kern_level lv = pick_level(q->wt, n_tok, top, pick);
        j.a[p] = (kern_mm_args){
            .wt = q->wt,
            .W = q->W,
            .row_bytes = kern_row_bytes(q->wt, n_in),
            .n_out = n_out,
            .n_in = n_in,
            .n_tok = n_tok,
            .x = x,
            .y = q->y,
        };
        j.rows[p] = rows_fn(lv);
        if (lv >= KERN_LEVEL_AVX512 && kern_type_is_x8(q->wt) && n_tok >= KERN_X8_WIDE_MIN_TOK)
            j.wide = 1;
        if (lv == KERN_LEVEL_AMX && kern_type_is_x8(q->wt)) /* the level implies the CPU's AMX */
            any_amx = j.wide = 1;
        j.g_first[p + 1] = j.g_first[p] + (n_out + ROW_GROUP - 1) / ROW_GROUP;
        if (kern_is_int_weight(q->wt)) {
            any_int = 1;
            if (act_paired(lv, q->wt, n_tok))
                n_paired++;
            else
                n_plain++;
        }
    }
    /* The integer parts share one quantization of x, so they must read the
     * same activation layout: mixed, each part runs alone. */
    if (n_paired && n_plain) {
        for (int p = 0; p < n_parts; p++)
            kern_matmul_multi(pool, &parts[p], 1, n_in, x, n_tok, ws);
        return;
    }
    j.n_groups = j.g_first[n_parts];
    if (j.n_groups == 0)
        return;

    /* Integer weights: the activations are quantized once for every part
     * (the layout depends on n_in, n_tok and the kernels only). */
    if (any_int) {
        size_t scales = align64((size_t)(n_in / KERN_QK) * (size_t)n_tok * sizeof(float));
        int16_t *xq = ws;
        float *xd =
            (float *)((uint8_t *)ws + align64((size_t)n_tok * (size_t)n_in * sizeof(int16_t)));
        float *xs = (float *)((uint8_t *)xd + scales);
        int32_t *xi = (int32_t *)((uint8_t *)xs + scales);
        quant_job q = {.x = x,
                       .n_in = n_in,
                       .n_tok = n_tok,
                       .xq = xq,
                       .xd = xd,
                       .xs = xs,
                       .xi = xi,
                       .avx2 = top >= KERN_LEVEL_AVX2,
                       .paired = n_paired > 0};
        if (any_amx) {
            /* After the scales: kern_matmul_ws_bytes counted them for an
             * X8 type on this CPU. */
            const size_t pb = amx_plane_bytes(n_in, n_tok);
            q.xh = (int8_t *)((uint8_t *)xi + scales);
            q.xl = (uint8_t *)q.xh + pb;
        }
        if (n_threads > 1 && n_tok >= QUANT_PARALLEL_MIN_TOK) {
            int n_tasks = n_threads * 4 < n_tok ? n_threads * 4 : n_tok;
            q.tok_per_task = (n_tok + n_tasks - 1) / n_tasks;
            n_tasks = (n_tok + q.tok_per_task - 1) / q.tok_per_task;
            kern_pool_run(pool, quant_task, &q, n_tasks);
        } else {
            q.tok_per_task = n_tok;
            quant_task(&q, 0, 0);
        }
        for (int p = 0; p < n_parts; p++) {
            j.a[p].xq = xq;
            j.a[p].xd = xd;
            j.a[p].xs = xs;
            j.a[p].xi = xi;
            if (kern_type_is_x8(j.a[p].wt)) {
                j.a[p].xh = q.xh;
                j.a[p].xl = q.xl;
            }
        }
    }

    /* ~4 tasks per thread, never more tasks than groups. A long batch,
     * compute-bound, cuts big matrices finer (at most 64 rows, 4 groups, per
     * task) so the tail of the run is short; a decode step or a short batch
     * is bound by how fast each thread streams its weights, and keeps a
     * thread's share in 4 long runs: cut into 64-row tasks, each restarting
     * its streams, a 1536 x 576 Q4_0 decode read 14 GB/s on one Zen 4 core
     * instead of 21-22 GB/s. */
    int n_tasks = n_threads * 4;
    if (n_tok >= MM_STREAM_MAX_TOK && n_tasks < j.n_groups / 4)
        n_tasks = j.n_groups / 4;
    n_tasks = (n_tasks + n_threads - 1) / n_threads * n_threads;
    if (n_tasks > j.n_groups)
        n_tasks = j.n_groups;
    j.n_tasks = n_tasks;
    j.n_threads = n_threads;
    /* The long-batch X8 tiles decode into per-thread scratch; without it
     * (no pool, or no memory) they run the plain tiles: the same bits. */
    if (j.wide && kern_pool_reserve_scratch(pool, KERN_X8_WIDE_BYTES) != 0)
        j.wide = 0;
    j.pool = pool;
    kern_pool_run(pool, mm_task, &j, n_tasks);
}

void kern_matmul(kern_pool *pool, kern_type wt, const void *W, int n_out, int n_in, const float *x,
                 int n_tok, float *y, void *ws) {
    kern_matmul_part part = {.wt = wt, .W = W, .n_out = n_out, .y = y};
    kern_matmul_multi(pool, &part, 1, n_in, x, n_tok, ws);
}
