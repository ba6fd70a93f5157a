/* cuda_test.c - the helpers every CUDA op test file shares (cuda_test.h). */
#include "tests/cuda/cuda_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_buf.h"

cudaStream_t g_stream;
const char *g_filter;
int g_small;
double g_peak_bw;
double g_read_bw;
int g_cc_major;
static int g_cases, g_passed, g_failed;

void must(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "test_cuda_ops: %s failed: %s (%s)\n", what, brisk_strerror(rc),
                kern_cuda_last_error());
        exit(1);
    }
}

void cuda_must(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "test_cuda_ops: %s failed: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_cuda_ops: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

void *dev_alloc(size_t bytes) {
    void *d = NULL;
    must(kern_cuda_malloc(&d, bytes), "kern_cuda_malloc");
    return d;
}

void *dev_from(const void *host, size_t bytes) {
    void *d = dev_alloc(bytes);
    must(kern_cuda_upload(d, host, bytes, g_stream), "kern_cuda_upload");
    return d;
}

void to_host(void *host, const void *dev, size_t bytes) {
    must(kern_cuda_download(host, dev, bytes, g_stream), "kern_cuda_download");
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
}

void dev_free(void *d) {
    must(kern_cuda_free(d), "kern_cuda_free");
}

float *dev_random(size_t n, float scale) {
    float *h = xmalloc(n * sizeof(float));
    fill(h, n, scale);
    float *d = dev_from(h, n * sizeof(float));
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
    free(h);
    return d;
}

uint16_t *nan_pool(size_t n) {
    uint16_t *p = xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        p[i] = 0x7e00u;
    return p;
}

int32_t *shuffled_ids(int n, int (*rand_below)(int)) {
    int32_t *perm = xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = rand_below(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    return perm;
}

int selected(const char *op) {
    return !g_filter || strstr(op, g_filter) != NULL;
}

void report(const char *op, double err, double bound, const char *fmt, ...) {
    char params[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(params, sizeof params, fmt, ap);
    va_end(ap);
    int ok = err <= bound; /* a NaN error fails */
    g_cases++;
    g_passed += ok;
    g_failed += !ok;
    if (bound == 0.0)
        printf("  %s(%s): %s (bound: exact) %s\n", op, params, ok ? "exact" : "differs",
               ok ? "OK" : "FAIL");
    else
        printf("  %s(%s): err %.2e (bound %.0e) %s\n", op, params, err, bound, ok ? "OK" : "FAIL");
}

int cuda_test_cases(void) {
    return g_cases;
}
int cuda_test_passed(void) {
    return g_passed;
}
int cuda_test_failed(void) {
    return g_failed;
}

double copy_bandwidth(void) {
    size_t bytes = (size_t)256 << 20;
    void *a = dev_alloc(bytes), *b = dev_alloc(bytes);
    must(kern_cuda_memset(a, 1, bytes, g_stream), "kern_cuda_memset");
    cudaEvent_t e0, e1;
    cuda_must(cudaEventCreate(&e0), "cudaEventCreate");
    cuda_must(cudaEventCreate(&e1), "cudaEventCreate");
    must(kern_cuda_copy(b, a, bytes, g_stream), "kern_cuda_copy");
    cuda_must(cudaEventRecord(e0, g_stream), "cudaEventRecord");
    for (int i = 0; i < 10; i++)
        must(kern_cuda_copy(b, a, bytes, g_stream), "kern_cuda_copy");
    cuda_must(cudaEventRecord(e1, g_stream), "cudaEventRecord");
    cuda_must(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0.0f;
    cuda_must(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    dev_free(a);
    dev_free(b);
    return 10.0 * 2.0 * (double)bytes / ((double)ms * 1e-3); /* read + write */
}

double read_bandwidth(void) {
    double bw = 0.0;
    must(kern_cuda_measure_read_bw((size_t)2 << 30, 5, &bw), "kern_cuda_measure_read_bw");
    return bw;
}

double cuda_test_time(int (*call)(void *ctx), void *ctx, const char *name) {
    cudaEvent_t e0, e1;
    cuda_must(cudaEventCreate(&e0), "cudaEventCreate");
    cuda_must(cudaEventCreate(&e1), "cudaEventCreate");
    int iters = 1;
    float ms = 0.0f;
    for (;;) {
        for (int i = 0; i < 3; i++)
            must(call(ctx), name);
        cuda_must(cudaEventRecord(e0, g_stream), "cudaEventRecord");
        for (int i = 0; i < iters; i++)
            must(call(ctx), name);
        cuda_must(cudaEventRecord(e1, g_stream), "cudaEventRecord");
        cuda_must(cudaEventSynchronize(e1), "cudaEventSynchronize");
        cuda_must(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (ms >= 50.0f || iters >= (1 << 20))
            break;
        iters *= ms < 1.0f ? 16 : 4;
    }
    must(kern_cuda_sync(g_stream), "kern_cuda_sync");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return (double)ms * 1e-3 / iters;
}

void perf_line(const char *name, const char *shape, double bytes, double seconds, double copy_bw) {
    double bw = bytes / seconds;
    printf("  %-12s %-28s %9.2f us %8.1f GB/s %5.1f%% of copy %5.1f%% of peak\n", name, shape,
           seconds * 1e6, bw * 1e-9, 100.0 * bw / copy_bw, 100.0 * bw / g_peak_bw);
}

void perf_line_flops(const char *name, const char *shape, double bytes, double flops,
                     double seconds, double copy_bw, double peak_flops) {
    double bw = bytes / seconds, fl = flops / seconds;
    printf("  %-12s %-28s %9.2f us %8.1f GB/s %5.1f%% of copy %5.1f%% of peak bw %7.1f TFLOP/s",
           name, shape, seconds * 1e6, bw * 1e-9, 100.0 * bw / copy_bw, 100.0 * bw / g_peak_bw,
           fl * 1e-12);
    if (peak_flops > 0)
        printf(" %5.1f%% of matmul peak", 100.0 * fl / peak_flops);
    printf("\n");
}
