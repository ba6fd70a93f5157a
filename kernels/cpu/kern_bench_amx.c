/* kern_bench_amx.c - the AMX int8 tile peak (kern_bench.h): the ceiling that
 * `kern_bench N amx` sets the X8 matmuls' GOP/s against.
 *
 * Each pool thread configures palette 1 (C tiles 0-3: 16 rows x 64 bytes of
 * int32; A tiles 4-5 and B tiles 6-7: 16 rows x 64 bytes of int8), loads two
 * A and two B tiles once, and runs `iters` rounds of four independent
 * TDPBSSD (C0 += A0 B0, C1 += A0 B1, C2 += A1 B0, C3 += A1 B1): no load or
 * store in the loop, four accumulator chains so the instruction's latency
 * (about 52 cycles on Sapphire Rapids) hides behind its throughput (16). One
 * TDPBSSD is 16 x 16 x 64 multiply-adds, 32,768 operations.
 *
 * The threads wait for each other before timing (a spin barrier, so each
 * task runs on its own thread at the same time) and each times its own loop;
 * the peak is the sum of the threads' rates. Every thread then stores its
 * four C tiles and checks them against iters x the scalar products of its
 * random tiles (int32, wrapping as the instruction does): a wrong tile
 * configuration or operand order shows as a failure, not as a number. */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kern_amx.h"
#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"

#define AMX_FENCE() KERN_AMX_FENCE()
#define PEAK_MAX_THREADS 256
#define OPS_PER_TDP (2.0 * 16 * 16 * 64)

typedef kern_amx_cfg peak_cfg;

typedef struct {
    long iters;
    int n;              /* tasks, one per pool thread */
    atomic_int arrived; /* the barrier */
    double secs[PEAK_MAX_THREADS];
    int bad[PEAK_MAX_THREADS]; /* 1: tile results differ from the scalar products */
} peak_job;

static double peak_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits (at most 2 s) until all n tasks have arrived. */
static void peak_barrier(peak_job *j) {
    atomic_fetch_add_explicit(&j->arrived, 1, memory_order_acq_rel);
    const double t0 = peak_now();
    while (atomic_load_explicit(&j->arrived, memory_order_acquire) < j->n)
        if (peak_now() - t0 > 2.0)
            break;
}

/* C[m][n] of A x B in TDPBSSD's layout: A[m][k] x B[k/4][4n + k%4], signed. */
static int32_t peak_ref(const int8_t a[16][64], const int8_t b[16][64], int m, int n) {
    int32_t s = 0;
    for (int k = 0; k < 64; k++)
        s += (int32_t)a[m][k] * (int32_t)b[k / 4][4 * n + k % 4];
    return s;
}

static void peak_task(void *ctx, int task, int thread) {
    (void)thread;
    peak_job *j = ctx;
    _Alignas(64) int8_t a[2][16][64], b[2][16][64];
    _Alignas(64) int32_t c[4][16][16];
    uint64_t x = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(task + 1) * 0xD1B54A32D192ED03ULL;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 64; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                a[t][r][k] = (int8_t)(x >> 24);
                b[t][r][k] = (int8_t)(x >> 40);
            }
    _Alignas(64) peak_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    peak_barrier(j);
    kern_amx_load_config(&cfg);
    _tile_loadd(4, a[0], 64);
    _tile_loadd(5, a[1], 64);
    _tile_loadd(6, b[0], 64);
    _tile_loadd(7, b[1], 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const long iters = j->iters;
    const double t0 = peak_now();
    for (long i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    AMX_FENCE();
    j->secs[task] = peak_now() - t0;
    _tile_release();
    int bad = 0;
    for (int p = 0; p < 4; p++)
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                const uint32_t want =
                    (uint32_t)peak_ref(a[p / 2], b[p % 2], m, n) * (uint32_t)iters;
                bad |= (uint32_t)c[p][m][n] != want;
            }
    j->bad[task] = bad;
}

double kern_bench_amx_peak(kern_pool *pool, long iters, double *gops_per_thread) {
    if (gops_per_thread)
        *gops_per_thread = 0.0;
    if (!kern_cpu_detect()->amx || iters < 1)
        return 0.0;
    peak_job *j = calloc(1, sizeof(*j));
    if (!j)
        return 0.0;
    j->iters = iters;
    j->n = pool ? kern_pool_size(pool) : 1;
    if (j->n > PEAK_MAX_THREADS)
        j->n = PEAK_MAX_THREADS;
    atomic_init(&j->arrived, 0);
    kern_pool_run(pool, peak_task, j, j->n);
    double gops = 0.0;
    int bad = 0;
    for (int t = 0; t < j->n; t++) {
        bad |= j->bad[t];
        if (j->secs[t] > 0)
            gops += 4.0 * OPS_PER_TDP * (double)iters / j->secs[t] / 1e9;
    }
    const int n = j->n;
    free(j);
    if (bad)
        return -1.0;
    if (gops_per_thread)
        *gops_per_thread = gops / n;
    return gops;
}
