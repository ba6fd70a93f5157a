/* kern_cuda_matmul.cuh - the weight matmuls on the GPU: FP16 weights through
 * cuBLAS, INT8 weight-only (W8A16) through brisk's own kernels (C header; the
 * code is in kern_cuda_matmul.cu and kern_cuda_w8a16.cu).
 *
 * Every matmul is y[t][o] = sum_i W[o][i] * x16[t][i] for t < n_tok, o < n_out:
 *   W:   a kern_cuda_weight on the device (n_out rows of n_in, row-major).
 *   x:   n_tok rows of n_in f32 activations (row stride n_in). They are
 *        rounded to f16 (round to nearest even) first - x16 above - so the
 *        products are those of f16 activations (A16), summed in f32.
 *   y:   n_tok rows of f32, row stride ldy >= n_out (the rest of a row is
 *        left alone). Must not overlap x or the workspace.
 *   ws:  device workspace of kern_cuda_matmul_ws_bytes(n_in, n_tok) bytes,
 *        for the f16 copy of x.
 * FP16: cublasGemmEx (f16 A and B, f32 C, f32 compute) on the context's
 * stream; tensor cores on every listed architecture.
 * INT8: int8 weights with one f16 scale per block of 32 consecutive weights
 * of a row (the Q8_0 grouping, stored as two arrays: the int8 values row-major
 * and the scales [n_out][n_in / 32]), w = scale * q. For n_tok <=
 * KERN_CUDA_W8A16_GEMV_MAX_TOK a GEMV-like kernel (each weight byte read once
 * per call, every token's dot product from the same load); above it a tiled
 * tensor-core kernel (WMMA f16 x f16 -> f32, weight tiles dequantised to f16 in
 * shared memory). n_in must be a multiple of 32.
 * All calls are asynchronous on the context's stream and capture into a CUDA
 * graph (no allocation, no synchronisation; cuBLAS gets a fixed workspace at
 * context creation). Return 0, BRISK_EINVAL for bad sizes or pointers, or a
 * CUDA/cuBLAS error code (kern_cuda_last_error() says which). */
#ifndef KERN_CUDA_MATMUL_CUH
#define KERN_CUDA_MATMUL_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

#define KERN_CUDA_W8A16_GEMV_MAX_TOK 8

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KERN_CUDA_W_F16 = 0, KERN_CUDA_W_INT8 = 1 } kern_cuda_wfmt;

typedef struct kern_cuda_weight {
    kern_cuda_wfmt fmt;
    int n_out, n_in;
    void *data;       /* F16: n_out * n_in halves; INT8: n_out * n_in int8 (device) */
    uint16_t *scales; /* INT8: n_out * (n_in / 32) f16 scales (device); F16: NULL */
} kern_cuda_weight;

/* Converts n_out rows of n_in values of src_type (F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1; host memory, e.g. the mmap) into fmt on the host, a bounded
 * slice of rows at a time, and uploads them into new device memory. Q8_0 into
 * INT8 is copied exactly (values and scales), and Q4_0 is exact too (q - 8
 * with the same scale, as kern_requantize_row_q8 and the CPU's int8 weights
 * make it); any other source into INT8 is quantised as
 * kern_quantize_row(KERN_TYPE_Q8_0) does. On failure *w is zeroed and
 * nothing is left allocated. Synchronous. */
int kern_cuda_weight_upload(kern_cuda_weight *w, kern_cuda_wfmt fmt, kern_type src_type,
                            const void *src, int n_out, int n_in);
/* Device bytes of a weight in fmt; 0 for an invalid fmt or size. */
size_t kern_cuda_weight_bytes(kern_cuda_wfmt fmt, int n_out, int n_in);
void kern_cuda_weight_free(kern_cuda_weight *w); /* NULL or zeroed: no-op */

typedef struct kern_cuda_matmul_ctx kern_cuda_matmul_ctx;

/* A cuBLAS handle bound to stream, with its own fixed workspace. */
int kern_cuda_matmul_ctx_create(kern_cuda_matmul_ctx **out, cudaStream_t stream);
void kern_cuda_matmul_ctx_free(kern_cuda_matmul_ctx *c);

/* Workspace bytes for n_tok rows of n_in (any alignment of ws will do); 0
 * for no tokens, (size_t)-1 for invalid sizes. */
size_t kern_cuda_matmul_ws_bytes(int n_in, int n_tok);

int kern_cuda_matmul(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w, const float *x, int n_tok,
                     float *y, size_t ldy, void *ws, size_t ws_bytes);

#ifdef __cplusplus
}
#endif

#endif
