/* kern_bench.c - CPU kernel micro-benchmark: read bandwidth (the decode
 * roofline), matmul GEMV GB/s per weight type and integer-weight (Q8_0,
 * Q8_0M, Q4_0, Q4_1) GEMM GOP/s on the SmolLM2-135M shapes, pool dispatch cost. Not built by CMake; build with
 *   cc -O2 -I. -Ibuild/generated bench/kern_bench.c build/libbrisk_core.a -lpthread -lm -o kern_bench
 * Usage: kern_bench [threads]   (BRISK_CPU_LEVEL caps the SIMD level). */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_ops.h"

int main(int argc, char **argv)
{
    int n_threads = argc > 1 ? atoi(argv[1]) : 0;
    kern_pool *pool = kern_pool_create(n_threads);
    char desc[128];
    kern_cpu_describe(desc, sizeof(desc));
    printf("%s, %d threads\n", desc, kern_pool_size(pool));
    double bw = kern_measure_read_bw(pool, (size_t)512 << 20, 5);
    printf("read bandwidth: %.1f GB/s (512 MiB buffer, best of 5)\n", bw);
    printf("pool dispatch: %.2f us\n", kern_bench_pool_dispatch(pool, 10000));

    /* GEMV: weight bytes streamed per second vs the read roofline. */
    const kern_type types[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0M, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1,
                               KERN_TYPE_F16,  KERN_TYPE_BF16,  KERN_TYPE_F32};
    const int n_types = (int)(sizeof(types) / sizeof(types[0])), n_int_types = 4;
    const int gemv[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_types; ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemv[s][0], n_in = gemv[s][1];
            double gf, t = kern_bench_matmul(pool, types[ti], n_out, n_in, 1, 50, &gf);
            double bytes = (double)kern_row_bytes(types[ti], n_in) * n_out;
            printf("gemv %-5s %5d x %4d: %8.1f us  %5.1f GB/s (%3.0f%% of read bw)\n", kern_type_name(types[ti]),
                   n_out, n_in, t * 1e6, bytes / t / 1e9, 100 * bytes / t / 1e9 / bw);
        }
    /* Prefill: n_tok = 512. */
    const int gemm[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_int_types; ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemm[s][0], n_in = gemm[s][1];
            double gf, t = kern_bench_matmul(pool, types[ti], n_out, n_in, 512, s == 3 ? 2 : 5, &gf);
            printf("gemm %-5s %5d x %4d x 512 tok: %8.2f ms  %6.1f GOP/s\n", kern_type_name(types[ti]), n_out, n_in,
                   t * 1e3, gf);
        }
    kern_pool_free(pool);
    return 0;
}
