/* moe_bench.c - the mixture-of-experts MLP on the CPU (models/model_moe.h)
 * on one layer of a real shape, against the read-bandwidth roofline.
 *
 * Builds one layer's experts with random weights in the X8 form of a base
 * type (the layout the CPU loader gives them), an f32 router, and times
 * model_moe_ffn for batches of 1 to 64 tokens, each call on fresh random
 * rows so the experts it picks change from call to call (a layer's experts
 * are far larger than the caches: Qwen3-30B-A3B's 128 experts are 642 MB in
 * q8_0, so every call reads its experts from DRAM as a decode step does).
 * For each batch it prints the distinct experts the tokens touched, the
 * bytes those experts and the router hold (what the step must read), the
 * achieved GB/s and its fraction of the machine's read bandwidth measured
 * by the same pool, and the time per token.
 *
 * Usage: moe_bench [threads [type [n_expert n_used dim expert_ff]]]
 *   defaults: all cores, q8_0, Qwen3-30B-A3B's 128 8 2048 768;
 *   type: q8_0, q4_0 or q4_1. Built by CMake with the rest (build/bin/moe_bench). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_ops.h"
#include "models/model_moe.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_x = 0x9E3779B97F4A7C15ULL;
static float rnd(float amp) {
    rng_x ^= rng_x << 13, rng_x ^= rng_x >> 7, rng_x ^= rng_x << 17;
    return amp * ((float)(rng_x >> 40) / 8388608.0f - 1.0f);
}

/* n_rows random rows of n_in (values of variance 1/n_in) in the X8 form of
 * base; rows a multiple of 8. NULL when out of memory. */
static void *x8_stack(kern_type base, int n_rows, int n_in) {
    kern_type x8 = kern_x8_type(base);
    uint8_t *dst = aligned_alloc(64, (kern_x8_bytes(x8, n_rows, n_in) + 63) & ~(size_t)63);
    size_t rb = kern_row_bytes(base, n_in);
    uint8_t *grp = malloc(8 * rb);
    float *row = malloc((size_t)n_in * sizeof *row);
    if (!dst || !grp || !row) {
        free(dst), free(grp), free(row);
        return NULL;
    }
    for (int g = 0; g < n_rows / 8; g++) {
        const void *rows[8];
        for (int r = 0; r < 8; r++) {
            for (int i = 0; i < n_in; i++)
                row[i] = rnd(1.7f / 45.0f);
            kern_quantize_row(base, row, grp + (size_t)r * rb, n_in);
            rows[r] = grp + (size_t)r * rb;
        }
        kern_x8_pack_group(base, rows, 8, n_in, dst, g);
    }
    free(grp), free(row);
    return dst;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *tname = argc > 2 ? argv[2] : "q8_0";
    int E = argc > 6 ? atoi(argv[3]) : 128, K = argc > 6 ? atoi(argv[4]) : 8;
    int dim = argc > 6 ? atoi(argv[5]) : 2048, H = argc > 6 ? atoi(argv[6]) : 768;
    kern_type base = !strcmp(tname, "q4_0")   ? KERN_TYPE_Q4_0
                     : !strcmp(tname, "q4_1") ? KERN_TYPE_Q4_1
                                              : KERN_TYPE_Q8_0;
    if (E <= 0 || K <= 0 || K > E || dim % 32 || H % 32 || H % 8 || dim % 8) {
        fprintf(stderr, "moe_bench: bad shape\n");
        return 1;
    }
    kern_pool *pool = kern_pool_create(threads > 0 ? threads : 0);
    if (!pool)
        return 1;
    kern_type x8 = kern_x8_type(base);
    float *router = malloc((size_t)E * dim * sizeof *router);
    for (size_t i = 0; router && i < (size_t)E * dim; i++)
        router[i] = rnd(1.7f / 45.0f);
    void *gd = x8_stack(base, E * H, dim), *ud = x8_stack(base, E * H, dim);
    void *dd = x8_stack(base, E * dim, H);
    if (!router || !gd || !ud || !dd) {
        fprintf(stderr, "moe_bench: out of memory\n");
        return 1;
    }
    model_matrix r = {.type = KERN_TYPE_F32, .data = router, .n_out = E, .n_in = dim};
    model_matrix g = {.type = x8, .data = gd, .n_out = E * H, .n_in = dim};
    model_matrix u = {.type = x8, .data = ud, .n_out = E * H, .n_in = dim};
    model_matrix d = {.type = x8, .data = dd, .n_out = E * dim, .n_in = H};
    model_moe_weights w = {.router = &r,
                           .gate = &g,
                           .up = &u,
                           .down = &d,
                           .n_expert = E,
                           .n_used = K,
                           .dim = dim,
                           .hidden = H,
                           .norm_topk = 1,
                           .act = MODEL_ACT_SILU};
    const int max_tok = 64;
    model_moe_scratch *s = model_moe_scratch_create(&w, max_tok);
    size_t wsb = model_moe_ws_bytes(&w, max_tok);
    void *ws = aligned_alloc(64, (wsb + 63) & ~(size_t)63);
    float *x = malloc((size_t)max_tok * dim * sizeof *x), *y = malloc((size_t)max_tok * dim * 4);
    int32_t *ids = malloc((size_t)max_tok * K * sizeof *ids);
    if (!s || !ws || !x || !y || !ids)
        return 1;
    const double expert_bytes =
        2.0 * (double)kern_x8_bytes(x8, H, dim) + (double)kern_x8_bytes(x8, dim, H);
    const double router_bytes = (double)E * dim * 4.0;
    double bw = kern_measure_read_bw(pool, (size_t)512 << 20, 3);
    printf("moe_bench: %d experts of %d (top %d) over dim %d, %s (X8: %s), %d threads, %s; one "
           "expert %.2f MB, the layer %.0f MB; read bandwidth %.1f GB/s\n",
           E, H, K, dim, tname, kern_type_name(x8), kern_pool_size(pool),
           kern_level_name(kern_cpu_level()), expert_bytes / 1e6, expert_bytes * E / 1e6, bw);
    printf("%6s %8s %10s %10s %8s %8s %10s\n", "tokens", "experts", "MB read", "ms/call", "GB/s",
           "of bw", "ms/token");
    static const int sizes[] = {1, 2, 4, 8, 16, 64};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si], reps = n <= 8 ? 40 : 10;
        /* The call that moved its bytes fastest (the touched experts vary). */
        double best = 0.0, best_bytes = 0.0, best_gbs = 0.0;
        int best_touched = 0;
        for (int rep = 0; rep < reps; rep++) {
            for (size_t i = 0; i < (size_t)n * dim; i++)
                x[i] = rnd(1.0f);
            double t0 = now_s();
            model_moe_ffn(pool, &w, x, n, y, s, ws, ids);
            double dt = now_s() - t0;
            static uint8_t seen[65536];
            memset(seen, 0, (size_t)E);
            int touched = 0;
            for (int i = 0; i < n * K; i++)
                touched += !seen[ids[i]]++;
            double bytes = touched * expert_bytes + router_bytes;
            if (bytes / dt / 1e9 > best_gbs) {
                best_gbs = bytes / dt / 1e9;
                best = dt;
                best_bytes = bytes;
                best_touched = touched;
            }
        }
        double gbs = best_bytes / best / 1e9;
        printf("%6d %8d %10.1f %10.3f %8.1f %7.0f%% %10.3f\n", n, best_touched, best_bytes / 1e6,
               best * 1e3, gbs, bw > 0 ? 100.0 * gbs / bw : 0.0, best * 1e3 / n);
    }
    model_moe_scratch_free(s);
    free(ws), free(x), free(y), free(ids), free(router), free(gd), free(ud), free(dd);
    kern_pool_free(pool);
    return 0;
}
