/* kern_bench.c - CPU kernel micro-benchmark: read bandwidth (the decode
 * roofline), matmul GEMV GB/s per weight type, Q8_0 at the batch sizes of a
 * decode step (1-24 tokens; row-major and the row-interleaved X8 form), integer-weight (Q8_0, Q8_0M, Q4_0, Q4_1) GEMM
 * GOP/s on the SmolLM2-135M shapes, decode attention over a paged cache,
 * pool dispatch cost. Not built by CMake; build with
 *   cc -O2 -I. -Ibuild/generated bench/kern_bench.c build/libbrisk_core.a -lpthread -lm -o kern_bench
 * Usage: kern_bench [threads [section]]   (BRISK_CPU_LEVEL caps the SIMD level;
 * section: gemv, step, attn or gemm runs that one alone). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_ops.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One decode step's attention for SmolLM2-135M's shape (30 layers, 9 query
 * heads over 3 KV heads of 64) and n_seq sequences of ctx positions each, on
 * one thread: f32 K/V in 16-position blocks placed in shuffled order (as a
 * paged pool fills), random values, every (sequence, layer) its own blocks
 * so the cache comes from memory as in a server. Best of reps, ms. */
static double bench_attention(int n_seq, int ctx, int reps)
{
    const int n_layers = 30, n_kv = 3, group = 3, hd = 64, bs = 16;
    const int nblk = (ctx + bs - 1) / bs, total = n_seq * n_layers * nblk;
    const size_t row = (size_t)n_kv * hd, bstride = row * bs, n_el = bstride * (size_t)total;
    float *k = malloc(n_el * sizeof(float)), *v = malloc(n_el * sizeof(float));
    int32_t *table = malloc((size_t)total * sizeof(int32_t));
    float *q = malloc((size_t)n_kv * group * hd * sizeof(float)), *out = malloc((size_t)n_kv * group * hd * sizeof(float));
    float *scratch = malloc((size_t)group * ctx * sizeof(float));
    double best = 0.0;
    if (k && v && table && q && out && scratch) {
        uint64_t x = 0x9E3779B97F4A7C15ULL;
        for (size_t i = 0; i < n_el; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            k[i] = (float)((int)(x >> 40 & 0xffff) - 32768) / 32768.0f;
            v[i] = (float)((int)(x >> 24 & 0xffff) - 32768) / 32768.0f;
        }
        for (int i = 0; i < n_kv * group * hd; i++)
            q[i] = k[(size_t)i * 7919 % n_el];
        for (int i = 0; i < total; i++)
            table[i] = i;
        for (int i = total - 1; i > 0; i--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int j = (int)(x % (uint64_t)(i + 1)), t = table[i];
            table[i] = table[j], table[j] = t;
        }
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t = now_s();
            for (int l = 0; l < n_layers; l++)
                for (int s = 0; s < n_seq; s++) {
                    kern_kv_view view = {k, v, table + (size_t)(l * n_seq + s) * nblk, bs, bstride, row, NULL, NULL};
                    for (int g = 0; g < n_kv; g++)
                        kern_attention_rows_gqa(out + g * group * hd, (size_t)n_kv * group * hd, q + g * group * hd,
                                                (size_t)n_kv * group * hd, 1, group, ctx - 1, &view, g, hd, 0.125f,
                                                scratch);
                }
            t = now_s() - t;
            best = t < best ? t : best;
        }
    }
    free(k);
    free(v);
    free(table);
    free(q);
    free(out);
    free(scratch);
    return best * 1e3;
}

static const char *only; /* the one section to run, or NULL for all */
static int run(const char *section) { return !only || !strcmp(only, section); }

int main(int argc, char **argv)
{
    int n_threads = argc > 1 ? atoi(argv[1]) : 0;
    only = argc > 2 ? argv[2] : NULL;
    kern_pool *pool = kern_pool_create(n_threads);
    char desc[128];
    kern_cpu_describe(desc, sizeof(desc));
    printf("%s, %d threads\n", desc, kern_pool_size(pool));
    double bw = 0.0;
    if (run("gemv")) {
        bw = kern_measure_read_bw(pool, (size_t)512 << 20, 5);
        printf("read bandwidth: %.1f GB/s (512 MiB buffer, best of 5)\n", bw);
        printf("pool dispatch: %.2f us\n", kern_bench_pool_dispatch(pool, 10000));
    }

    /* GEMV: weight bytes streamed per second vs the read roofline. */
    const kern_type types[] = {KERN_TYPE_Q8_0,   KERN_TYPE_Q8_0M,   KERN_TYPE_Q4_0,   KERN_TYPE_Q4_1,
                               KERN_TYPE_Q8_0X8, KERN_TYPE_Q8_0MX8, KERN_TYPE_Q4_0X8, KERN_TYPE_Q4_1X8,
                               KERN_TYPE_F16,    KERN_TYPE_BF16,    KERN_TYPE_F32};
    const int n_types = (int)(sizeof(types) / sizeof(types[0])), n_int_types = 8;
    const int gemv[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_types && run("gemv"); ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemv[s][0], n_in = gemv[s][1];
            double gf, t = kern_bench_matmul(pool, types[ti], n_out, n_in, 1, 50, &gf);
            double bytes = (double)kern_row_bytes(types[ti], n_in) * n_out;
            printf("gemv %-7s %5d x %4d: %8.1f us  %5.1f GB/s (%3.0f%% of read bw)  [%s]\n",
                   kern_type_name(types[ti]), n_out, n_in, t * 1e6, bytes / t / 1e9, 100 * bytes / t / 1e9 / bw,
                   kern_level_name(kern_matmul_level(types[ti], 1)));
        }
    /* The batch sizes of a decode step: every weight read serves n_tok rows. */
    const int steps[] = {1, 2, 4, 6, 8, 10, 16, 24};
    const int step_shapes[][2] = {{1536, 576}, {576, 1536}, {49152, 576}};
    const kern_type step_types[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0X8};
    for (int s = 0; s < 3 && run("step"); s++)
        for (int k = 0; k < (int)(sizeof(steps) / sizeof(steps[0])); k++)
            for (int ti = 0; ti < 2; ti++) {
                double gf, t = kern_bench_matmul(pool, step_types[ti], step_shapes[s][0], step_shapes[s][1],
                                                 steps[k], 10, &gf);
                printf("step %-6s %5d x %4d x %2d tok: %8.1f us  %5.1f us/token  %6.1f GOP/s\n",
                       kern_type_name(step_types[ti]), step_shapes[s][0], step_shapes[s][1], steps[k], t * 1e6,
                       t * 1e6 / steps[k], gf);
            }
    /* Decode attention, one thread, SmolLM2 shape. */
    for (int c = 0; c < 2 && run("attn"); c++) {
        int ctx = c ? 272 : 144;
        printf("attention decode step, 16 seqs x ctx %d, SmolLM2 shape, 1 thread: %.2f ms\n", ctx,
               bench_attention(16, ctx, 5));
    }
    /* Prefill: n_tok = 512. */
    const int gemm[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_int_types && run("gemm"); ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemm[s][0], n_in = gemm[s][1];
            double gf, t = kern_bench_matmul(pool, types[ti], n_out, n_in, 512, s == 3 ? 2 : 5, &gf);
            printf("gemm %-7s %5d x %4d x 512 tok: %8.2f ms  %6.1f GOP/s  [%s]\n", kern_type_name(types[ti]), n_out,
                   n_in, t * 1e3, gf, kern_level_name(kern_matmul_level(types[ti], 512)));
        }
    kern_pool_free(pool);
    return 0;
}
