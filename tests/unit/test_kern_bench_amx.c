/* test_kern_bench_amx.c - the AMX tile peak microbenchmark (kern_bench_amx.c)
 * runs and its tiles hold iters x the scalar products (the function checks
 * every thread's four C tiles itself and returns -1 when one differs).
 * On a CPU without AMX it must return 0 and print nothing; on one with AMX,
 * or compiled against tests/tools/emuamx.h (tests/tools/run_emu512.sh, where
 * kern_cpu.c claims AMX), it must return a positive rate from 1 and 2
 * threads, the per-thread mean being the sum's share. The iteration counts
 * are tiny: the emulation runs each TDPBSSD as 16,384 scalar multiply-adds. */
#include "brisk_test.h"
#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"

int main(void) {
    const int amx = kern_cpu_detect()->amx;
    kern_pool *pool2 = kern_pool_create(2);
    CHECK(pool2 != NULL, "kern_pool_create(2)");
    /* iters: 1, and 7 (the accumulation, wrapping int32, 7 x the product). */
    const long iters[] = {1, 7};
    for (int i = 0; i < 2; i++) {
        double per1 = -2.0, per2 = -2.0;
        const double g1 = kern_bench_amx_peak(NULL, iters[i], &per1);
        const double g2 = kern_bench_amx_peak(pool2, iters[i], &per2);
        if (!amx) {
            CHECK(g1 == 0.0 && per1 == 0.0, "no AMX: %g %g", g1, per1);
            CHECK(g2 == 0.0 && per2 == 0.0, "no AMX: %g %g", g2, per2);
            continue;
        }
        CHECK(g1 > 0.0, "1 thread, %ld iters: %g (-1: tiles differ from the products)", iters[i],
              g1);
        CHECK(g2 > 0.0, "2 threads, %ld iters: %g", iters[i], g2);
        CHECK(per1 == g1, "1 thread: mean %g, sum %g", per1, g1);
        CHECK(per2 > 0.0 && per2 * 2 > g2 * 0.999 && per2 * 2 < g2 * 1.001, "2 threads: %g %g",
              per2, g2);
    }
    /* Invalid counts measure nothing. */
    double per = -2.0;
    CHECK(kern_bench_amx_peak(pool2, 0, &per) == 0.0 && per == 0.0, "iters 0: %g", per);
    CHECK(kern_bench_amx_peak(pool2, -5, NULL) == 0.0, "iters -5");
    printf("amx peak: %s\n", amx ? "ran (AMX or its emulation)" : "this CPU has no AMX: returns 0");
    kern_pool_free(pool2);
    return BT_SUMMARY("test_kern_bench_amx");
}
