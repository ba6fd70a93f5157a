/* kern_matmul.c - matmul entry point: reference, portable C path, activation
 * quantization, threading.
 *
 * Work split: output rows are cut into tasks of whole 16-row groups (16 is a
 * multiple of every SIMD row tile, so no tile straddles two tasks), about
 * 4 tasks per thread so the atomic task counter evens out a slow core, and
 * the task count is rounded to a multiple of the thread count so the last
 * round is not left to one thread. Each task runs every token over its rows;
 * the row kernels tile tokens so one weight row read serves a whole tile.
 *
 * Q8_0: the activations are quantized once per call into the caller's
 * workspace (in parallel over tokens for a long prompt), then every level
 * computes, per block, an exact int32 dot product and accumulates
 *     acc = acc + (float)isum * (d_w * d_x)
 * in block order with exactly these three IEEE operations - so every level
 * gives the reference's result bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_ops.h"

#define ROW_GROUP 16 /* rows; a multiple of the largest row tile (AVX-512 T=1: 16) */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t kern_matmul_ws_bytes(kern_type wt, int n_in, int n_tok)
{
    if (wt != KERN_TYPE_Q8_0)
        return 0;
    return align64((size_t)n_tok * (size_t)n_in) + (size_t)(n_in / KERN_QK) * (size_t)n_tok * sizeof(float);
}

/* ---- reference ------------------------------------------------------------ */

static float weight_at(kern_type wt, const uint8_t *row, int i)
{
    uint16_t h;
    switch (wt) {
    case KERN_TYPE_F32: {
        float f;
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    case KERN_TYPE_F16:
        memcpy(&h, row + (size_t)i * 2, 2);
        return kern_fp16_to_fp32(h);
    case KERN_TYPE_BF16:
        memcpy(&h, row + (size_t)i * 2, 2);
        return kern_bf16_to_fp32(h);
    default:
        return 0.0f;
    }
}

/* The definition. Allocates a temporary for the quantized activations (it
 * is a test oracle, not a hot path). */
void kern_matmul_ref(kern_type wt, const void *W, int n_out, int n_in, const float *x, int n_tok, float *y)
{
    const uint8_t *w = W;
    size_t rb = kern_row_bytes(wt, n_in);
    if (wt == KERN_TYPE_Q8_0) {
        int nb = n_in / KERN_QK;
        kern_block_q8_0 *xq = malloc((size_t)nb * sizeof(*xq));
        if (!xq)
            abort();
        for (int t = 0; t < n_tok; t++) {
            kern_quantize_row(KERN_TYPE_Q8_0, x + (size_t)t * n_in, xq, n_in);
            for (int o = 0; o < n_out; o++) {
                const kern_block_q8_0 *wb = (const kern_block_q8_0 *)(w + (size_t)o * rb);
                float acc = 0.0f;
                for (int b = 0; b < nb; b++) {
                    int32_t isum = 0;
                    for (int j = 0; j < KERN_QK; j++)
                        isum += (int32_t)wb[b].qs[j] * (int32_t)xq[b].qs[j];
                    float scale = kern_fp16_to_fp32(wb[b].d) * kern_fp16_to_fp32(xq[b].d);
                    acc = acc + (float)isum * scale;
                }
                y[(size_t)t * n_out + o] = acc;
            }
        }
        free(xq);
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

static void rows_scalar_q8_0(const kern_mm_args *a, int r0, int r1)
{
    int nb = a->n_in / KERN_QK;
    for (int t0 = 0; t0 < a->n_tok; t0 += SCALAR_TT) {
        int nt = a->n_tok - t0 < SCALAR_TT ? a->n_tok - t0 : SCALAR_TT;
        for (int o = r0; o < r1; o++) {
            const kern_block_q8_0 *wb = (const kern_block_q8_0 *)(a->W + (size_t)o * a->row_bytes);
            float acc[SCALAR_TT] = {0};
            for (int b = 0; b < nb; b++) {
                float dw = kern_fp16_to_fp32(wb[b].d);
                for (int t = 0; t < nt; t++) {
                    const int8_t *xq = a->xq + (size_t)(t0 + t) * a->n_in + b * KERN_QK;
                    int32_t isum = 0;
                    for (int j = 0; j < KERN_QK; j++)
                        isum += (int32_t)wb[b].qs[j] * (int32_t)xq[j];
                    float scale = dw * a->xd[(size_t)b * a->n_tok + t0 + t];
                    acc[t] = acc[t] + (float)isum * scale;
                }
            }
            for (int t = 0; t < nt; t++)
                a->y[(size_t)(t0 + t) * a->n_out + o] = acc[t];
        }
    }
}

static void rows_scalar_float(const kern_mm_args *a, int r0, int r1)
{
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

void kern_mm_rows_scalar(const kern_mm_args *a, int r0, int r1)
{
    if (a->wt == KERN_TYPE_Q8_0)
        rows_scalar_q8_0(a, r0, r1);
    else
        rows_scalar_float(a, r0, r1);
}

/* ---- threading --------------------------------------------------------------- */

typedef struct {
    const kern_mm_args *a;
    kern_mm_rows_fn rows;
    int n_groups, n_tasks;
} mm_job;

static void mm_task(void *ctx, int task, int thread)
{
    (void)thread;
    const mm_job *j = ctx;
    int g0 = (int)((int64_t)task * j->n_groups / j->n_tasks);
    int g1 = (int)((int64_t)(task + 1) * j->n_groups / j->n_tasks);
    int r0 = g0 * ROW_GROUP;
    int r1 = g1 * ROW_GROUP < j->a->n_out ? g1 * ROW_GROUP : j->a->n_out;
    if (r0 < r1)
        j->rows(j->a, r0, r1);
}

typedef struct {
    const float *x;
    int n_in, n_tok, tok_per_task;
    int8_t *xq;
    float *xd;
    void (*quant)(const float *, int, int8_t *, float *, int);
} quant_job;

static void quant_task(void *ctx, int task, int thread)
{
    (void)thread;
    const quant_job *q = ctx;
    int t0 = task * q->tok_per_task;
    int t1 = t0 + q->tok_per_task < q->n_tok ? t0 + q->tok_per_task : q->n_tok;
    for (int t = t0; t < t1; t++)
        q->quant(q->x + (size_t)t * q->n_in, q->n_in, q->xq + (size_t)t * q->n_in, q->xd + t, q->n_tok);
}

/* Below this many tokens quantizing on the caller (~0.3 us per 576-float
 * row) is cheaper than a pool dispatch (~1-2 us). */
#define QUANT_PARALLEL_MIN_TOK 8

void kern_matmul(kern_pool *pool, kern_type wt, const void *W, int n_out, int n_in, const float *x, int n_tok,
                 float *y, void *ws)
{
    if (n_out <= 0 || n_tok <= 0)
        return;
    kern_level level = kern_cpu_level();
    kern_mm_args a = {
        .wt = wt, .W = W, .row_bytes = kern_row_bytes(wt, n_in),
        .n_out = n_out, .n_in = n_in, .n_tok = n_tok, .x = x, .y = y,
    };
    int n_threads = kern_pool_size(pool);

    if (wt == KERN_TYPE_Q8_0) {
        int8_t *xq = ws;
        float *xd = (float *)((uint8_t *)ws + align64((size_t)n_tok * (size_t)n_in));
        quant_job q = {.x = x, .n_in = n_in, .n_tok = n_tok, .xq = xq, .xd = xd,
                       .quant = level >= KERN_LEVEL_AVX2 ? kern_quantize_act_avx2 : kern_quantize_act_scalar};
        if (n_threads > 1 && n_tok >= QUANT_PARALLEL_MIN_TOK) {
            int n_tasks = n_threads * 4 < n_tok ? n_threads * 4 : n_tok;
            q.tok_per_task = (n_tok + n_tasks - 1) / n_tasks;
            n_tasks = (n_tok + q.tok_per_task - 1) / q.tok_per_task;
            kern_pool_run(pool, quant_task, &q, n_tasks);
        } else {
            q.tok_per_task = n_tok;
            quant_task(&q, 0, 0);
        }
        a.xq = xq;
        a.xd = xd;
    }

    kern_mm_rows_fn rows = kern_mm_rows_scalar;
    switch (level) {
    case KERN_LEVEL_AVX512VNNI: rows = kern_mm_rows_avx512vnni; break;
    case KERN_LEVEL_AVX512: rows = kern_mm_rows_avx512; break;
    case KERN_LEVEL_AVX2: rows = kern_mm_rows_avx2; break;
    case KERN_LEVEL_SCALAR: break;
    }

    mm_job j = {.a = &a, .rows = rows, .n_groups = (n_out + ROW_GROUP - 1) / ROW_GROUP};
    /* ~4 tasks per thread, at most 64 rows (4 groups) per task for big
     * matrices so the tail of the run is short, never more tasks than groups. */
    int n_tasks = n_threads * 4;
    if (n_tasks < j.n_groups / 4)
        n_tasks = j.n_groups / 4;
    n_tasks = (n_tasks + n_threads - 1) / n_threads * n_threads;
    if (n_tasks > j.n_groups)
        n_tasks = j.n_groups;
    j.n_tasks = n_tasks;
    kern_pool_run(pool, mm_task, &j, n_tasks);
}
