/* kern_membw.c - read-bandwidth and matmul measurement helpers (kern_bench.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64*: fast, good enough to defeat any zero-page or compression
 * effect and to give the kernels realistic operands. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Approximately N(0,1): sum of 4 uniforms, rescaled (Irwin-Hall). */
static float rng_normal(uint64_t *s) {
    float acc = 0.0f;
    for (int i = 0; i < 4; i++)
        acc += (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * 1.7320508f;
}

typedef struct {
    const uint64_t *buf;
    size_t words, per_task;
    uint64_t sums[256]; /* one slot per task, written once */
} bw_job;

static void bw_task(void *ctx, int task, int thread) {
    (void)thread;
    bw_job *j = ctx;
    size_t i0 = (size_t)task * j->per_task;
    size_t i1 = i0 + j->per_task < j->words ? i0 + j->per_task : j->words;
    /* Two sequential streams (the task's halves), four independent xor
     * chains each: the access pattern of the decode kernels (f_pair), which
     * keeps more misses in flight than one stream does. */
    size_t half = (i1 - i0) / 2 & ~(size_t)3;
    const uint64_t *a = j->buf + i0, *b = a + half;
    uint64_t s[8] = {0};
    for (size_t i = 0; i < half; i += 4) {
        if ((i & 7) == 0) { /* a line of each stream, 384 bytes on */
            __builtin_prefetch(a + i + 48);
            __builtin_prefetch(b + i + 48);
        }
        for (int k = 0; k < 4; k++) {
            s[k] ^= a[i + k];
            s[4 + k] ^= b[i + k];
        }
    }
    for (size_t i = i0 + 2 * half; i < i1; i++)
        s[0] ^= j->buf[i];
    j->sums[task] = s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

double kern_measure_read_bw(kern_pool *pool, size_t bytes, int reps) {
    size_t words = bytes / 8;
    /* On 2 MiB pages where transparent huge pages allow, as the model's
     * converted weights are (model_alloc_owned): 4 KiB pages read slower. */
    const size_t huge = (size_t)2 << 20;
    size_t sz = (words * 8 + huge - 1) & ~(huge - 1);
    uint64_t *buf = aligned_alloc(huge, sz);
    if (!buf)
        return 0.0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, sz, MADV_HUGEPAGE);
#endif
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < words; i++)
        buf[i] = rng_next(&seed);
    bw_job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(buf);
        return 0.0;
    }
    j->buf = buf;
    j->words = words;
    /* Many tasks (not one per thread) so a core slowed by a neighbour does
     * not hold up the whole measurement; capped by the sums[] slots. */
    int n_tasks = kern_pool_size(pool) * 16;
    if (n_tasks > 256)
        n_tasks = 256;
    j->per_task = (words + (size_t)n_tasks - 1) / (size_t)n_tasks;
    double best = 0.0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t = now_s();
        kern_pool_run(pool, bw_task, j, n_tasks);
        t = now_s() - t;
        for (int k = 0; k < n_tasks; k++)
            sink ^= j->sums[k];
        double gbs = (double)(words * 8) / t / 1e9;
        best = gbs > best ? gbs : best;
    }
    (void)sink;
    free(j);
    free(buf);
    return best;
}

#define BENCH_ROTATE_BYTES (256u << 20) /* 256 MiB: 8x a 32 MiB L3 */

double kern_bench_matmul(kern_pool *pool, kern_type wt, int n_out, int n_in, int n_tok, int reps,
                         double *gflops) {
    const int x8 = kern_type_is_x8(wt);
    size_t rb = kern_row_bytes(wt, n_in),
           wbytes = x8 ? kern_x8_bytes(wt, n_out, n_in) : rb * (size_t)n_out;
    int copies = (int)((BENCH_ROTATE_BYTES + wbytes - 1) / wbytes);
    size_t wsb = (kern_matmul_ws_bytes(wt, n_in, n_tok) + 63) & ~(size_t)63;
    /* On 2 MiB pages where THP allows, as the model's weights are. */
    const size_t huge = (size_t)2 << 20;
    size_t wall = (wbytes * (size_t)copies + huge - 1) & ~(huge - 1);
    uint8_t *w = aligned_alloc(huge, wall);
#ifdef MADV_HUGEPAGE
    if (w)
        (void)madvise(w, wall, MADV_HUGEPAGE);
#endif
    float *x = malloc((size_t)n_tok * n_in * sizeof(float));
    float *y = malloc((size_t)n_tok * n_out * sizeof(float));
    float *row = malloc((size_t)n_in * sizeof(float));
    void *ws = aligned_alloc(64, wsb ? wsb : 64);
    double best = 0.0;
    if (w && x && y && row && ws) {
        uint64_t seed = 42;
        /* Weights ~ N(0, 1/n_in), the scale of a trained projection;
         * activations ~ N(0, 1). */
        float wscale = 1.0f / sqrtf((float)n_in);
        /* X8: the rows of the base type, 8 at a time, then interleaved. */
        uint8_t *q8 = x8 ? malloc(8 * rb) : NULL;
        if (x8 && !q8) {
            best = 0.0;
            goto out;
        }
        for (int o = 0; o < n_out; o++) {
            for (int i = 0; i < n_in; i++)
                row[i] = rng_normal(&seed) * wscale;
            if (!x8) {
                kern_quantize_row(wt, row, w + (size_t)o * rb, n_in);
                continue;
            }
            kern_quantize_row(kern_x8_base(wt), row, q8 + (size_t)(o % 8) * rb, n_in);
            if (o % 8 == 7 || o == n_out - 1) {
                const void *rows[8];
                for (int r = 0; r <= o % 8; r++)
                    rows[r] = q8 + (size_t)r * rb;
                kern_x8_pack_group(kern_x8_base(wt), rows, o % 8 + 1, n_in, w, o / 8);
            }
        }
        free(q8);
        for (int c = 1; c < copies; c++)
            memcpy(w + (size_t)c * wbytes, w, wbytes);
        for (size_t i = 0; i < (size_t)n_tok * n_in; i++)
            x[i] = rng_normal(&seed);
        kern_matmul(pool, wt, w, n_out, n_in, x, n_tok, y, ws); /* warm-up */
        best = 1e30;
        for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
            const uint8_t *wc = w + (size_t)((r + 1) % copies) * wbytes;
            double t = now_s();
            kern_matmul(pool, wt, wc, n_out, n_in, x, n_tok, y, ws);
            t = now_s() - t;
            best = t < best ? t : best;
        }
        if (gflops)
            *gflops = 2.0 * n_out * n_in * n_tok / best / 1e9;
    }
out:
    free(w);
    free(x);
    free(y);
    free(row);
    free(ws);
    return best;
}

static void noop_task(void *ctx, int task, int thread) {
    (void)task;
    (void)thread;
    (void)ctx;
}

double kern_bench_pool_dispatch(kern_pool *pool, int n_runs) {
    int n = kern_pool_size(pool);
    kern_pool_run(pool, noop_task, NULL, n);
    double t = now_s();
    for (int i = 0; i < n_runs; i++)
        kern_pool_run(pool, noop_task, NULL, n);
    return (now_s() - t) / (n_runs > 0 ? n_runs : 1) * 1e6;
}
