/* cuda_test.h - what the CUDA op test files share (tests/cuda/): the stream,
 * the -o filter, result lines and their counts, device buffers and timing.
 *
 * test_cuda_ops.c has main() and the row ops; each further op family has its
 * own file (ops_*.c) with a test_<op>(void) and a perf_<op>(copy_bw) that
 * main() lists. A CUDA failure inside a helper is a broken device or kernel,
 * not a result to compare: it is reported and the program exits 1. */
#ifndef CUDA_TEST_H
#define CUDA_TEST_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "../unit/test_kern_util.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* How many entries of a shape or batch list a test walks: all of them, or
 * with --small (the reduced set compute-sanitizer runs, ~100x slower per
 * access) the first two, which hold the small and the odd sizes. */
#define CASES_LEN(a) (g_small && ARRAY_LEN(a) > 2 ? (size_t)2 : ARRAY_LEN(a))

extern cudaStream_t g_stream; /* every op runs on it */
extern const char *g_filter;  /* -o OP, or NULL for every op */
extern int g_small;           /* --small: the reduced shape set (CASES_LEN) */
extern double g_peak_bw;      /* bytes/s from the memory clock and bus width (perf) */
extern double g_read_bw;      /* bytes/s of a read-only stream (perf): the decode roofline */
extern int g_cc_major;        /* the device's compute capability, major */

void must(int rc, const char *what);             /* a kern_cuda_* return code */
void cuda_must(cudaError_t e, const char *what); /* a CUDA runtime call */
void *xmalloc(size_t bytes);
void *dev_alloc(size_t bytes);
void *dev_from(const void *host, size_t bytes);          /* a device copy of host[0, bytes) */
void to_host(void *host, const void *dev, size_t bytes); /* waits for the stream, copies back */
void dev_free(void *d);
float *dev_random(size_t n, float scale); /* n random floats (never zero) on the device */
int selected(const char *op);             /* whether -o selects op */
/* A paged-pool test fixture: n f16 values all NaN (0x7e00), so a kernel that
 * reads a position no sequence owns poisons its result. */
uint16_t *nan_pool(size_t n);
/* The ids 0 .. n-1 in a random order (Fisher-Yates on the file's RNG
 * through rand_below): block tables that are not contiguous. */
int32_t *shuffled_ids(int n, int (*rand_below)(int));

/* One result line, test-backend-ops style: OP(params): err (bound) OK|FAIL.
 * bound 0 means exact. A NaN error fails. Counted for the summary. */
__attribute__((format(printf, 4, 5))) void report(const char *op, double err, double bound,
                                                  const char *fmt, ...);
int cuda_test_cases(void);
int cuda_test_passed(void);
int cuda_test_failed(void);

/* Device-to-device copy bandwidth (bytes/s read + write) over 256 MiB. */
double copy_bandwidth(void);
/* Read-only bandwidth (bytes/s): kern_cuda_measure_read_bw over 2 GiB, best
 * of 5 - what a decode step, which only reads its weights, can reach. */
double read_bandwidth(void);
/* Seconds per call of call(ctx) on g_stream: warm-up, then back-to-back
 * calls between two events, as many as fill ~50 ms. */
double cuda_test_time(int (*call)(void *ctx), void *ctx, const char *name);
/* One perf line: time per call, bytes/time, as fractions of the copy and the
 * peak bandwidth; flops > 0 adds the compute rate (TFLOP/s). */
void perf_line(const char *name, const char *shape, double bytes, double seconds, double copy_bw);
void perf_line_flops(const char *name, const char *shape, double bytes, double flops,
                     double seconds, double copy_bw, double peak_flops);

/* Normal values times scale, never exactly zero: a zero input hides a kernel
 * that forgets to write or to read. Each file has its own fixed-seed RNG
 * (test_kern_util.h), so its cases reproduce. */
static inline void fill(float *x, size_t n, float scale) {
    fill_normal(x, n, scale);
    for (size_t i = 0; i < n; i++)
        if (x[i] == 0.0f)
            x[i] = 1e-3f * scale;
}

static inline int rng_int(int n) {
    return (int)(rng_u64() % (uint64_t)n);
}

/* ops_attn.c: prefill attention, the KV-cache store and the bias add; both
 * attention kernels and the store over a grouped (window-release) pool. */
void test_attn_prefill(void);
void test_kv_store(void);
void test_kv_grouped(void);
void perf_attn_prefill(double copy_bw);

/* ops_kvq.c: the int8 and fp8 KV cache: the store, decode and prefill
 * attention against the CPU references (OPNAME "kv_quant"). */
void test_kv_quant(void);

/* ops_matmul.c: kern_cuda_matmul on every path, kern_cuda_weight_upload. */
void test_matmul(void);
/* perf_matmul.c: decode old vs new, large batches, the automatic choice
 * (sections selected by -o matmul_gemv, matmul_prefill, matmul_auto). */
void perf_matmul(double copy_bw);

/* ops_fused.c: the fused QKV and gate|up steps against the separate
 * projections (OPNAME "fused"). */
void test_fused(void);

/* ops_moe.c: the mixture-of-experts MLP against model_moe_ffn_ref (OPNAME
 * "moe"). */
void test_moe(void);
void perf_moe(double copy_bw);

/* ops_sample.c: kern_cuda_sample (OPNAME "sample"). */
void test_sample(void);
void perf_sample(double copy_bw);

#endif
