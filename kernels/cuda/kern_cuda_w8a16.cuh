/* kern_cuda_w8a16.cuh - the INT8 weight-only (W8A16) kernels behind
 * kern_cuda_matmul's KERN_CUDA_W_INT8 weights (C header; the kernels are in
 * kern_cuda_w8a16.cu). kern_cuda_matmul is the public entry; this one is
 * also called by the tests, to run each kernel on every shape.
 *
 *   y[t][o] = sum_i w[o][i] * x16[t][i],  w[o][i] = s[o][i / 32] * q[o][i]
 * for t < n_tok, o < n_out:
 *   q:   n_out rows of n_in int8 (row-major), 16-byte aligned.
 *   s:   n_out rows of n_in / 32 f16 scales (IEEE half bits).
 *   x16: n_tok rows of n_in f16 activations (row stride n_in), 16-byte
 *        aligned.
 *   y:   n_tok rows of f32, row stride ldy >= n_out; the rest of a row is
 *        left alone. Must not overlap the inputs.
 * n_in must be a positive multiple of 32.
 *
 * The kernels, by the number of tokens:
 *   GEMV    n_tok <= KERN_CUDA_W8A16_GEMV_MAX_TOK, CUDA cores: memory-bound,
 *           each weight byte is read once for all the tokens. Products
 *           q * x16 are exact in f32; each lane sums 8 of them, scales the
 *           sum by s and adds it to its f32 total; a warp tree, and for
 *           long rows a few warps' partials, finish the row.
 *   SKINNY  a few dozen tokens, tensor cores: 32 rows x 16 or 32 tokens a
 *           block, K split among its 8 warps (each streams its own part of
 *           the rows, so even 4096 rows keep enough loads in flight), the
 *           warps' tiles summed in shared memory in a fixed order.
 *   TILED   many tokens, tensor cores: 64 x 64 or 128 x 128 (rows x tokens)
 *           block tiles, double-buffered in shared memory.
 * The tensor-core kernels multiply the weights dequantised to f16 - each
 * f16(s * q), rounded to nearest even once (s * q itself is exact in f32) -
 * by x16, with f32 accumulation (WMMA 16x16x16). A weight |s * q| beyond
 * the f16 range (65504) becomes infinite there, as it would in an F16 weight.
 * Sums are f32 in a fixed order: a result does not depend on the run.
 *
 * kern_cuda_w8a16 validates its arguments (BRISK_EINVAL for a bad size,
 * pointer, alignment or kernel choice, or a shape past the grid limits:
 * n_out > 2,097,120 rows for SKINNY) and launches on stream: asynchronous,
 * no allocation, graph-capturable. n_sm (the device's multiprocessor count)
 * steers the automatic choice between the two tile sizes; <= 0 means "small
 * GPU". */
#ifndef KERN_CUDA_W8A16_CUH
#define KERN_CUDA_W8A16_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kern_cuda_matmul.cuh" /* KERN_CUDA_W8A16_GEMV_MAX_TOK */

/* Above this many tokens the automatic choice is TILED, from
 * KERN_CUDA_W8A16_GEMV_MAX_TOK + 1 up to it SKINNY. */
#define KERN_CUDA_W8A16_SKINNY_MAX_TOK 128

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KERN_CUDA_W8A16_AUTO = 0, /* by n_tok and the tile count, as above */
    KERN_CUDA_W8A16_GEMV,     /* n_tok <= KERN_CUDA_W8A16_GEMV_MAX_TOK only */
    KERN_CUDA_W8A16_SKINNY,
    KERN_CUDA_W8A16_TILED64,
    KERN_CUDA_W8A16_TILED128,
} kern_cuda_w8a16_kernel;

int kern_cuda_w8a16(float *y, size_t ldy, const int8_t *q, const uint16_t *s, const uint16_t *x16,
                    int n_out, int n_in, int n_tok, kern_cuda_w8a16_kernel kernel, int n_sm,
                    cudaStream_t stream);

/* The weights of n_rows whole rows as the tensor-core kernels multiply them:
 * out[r][i] = f16(s[r][i / 32] * q[r][i]), rounded to nearest even (|s q|
 * past 65504 becomes infinite), for the cuBLAS f16 GEMM that runs INT8
 * weights at large batches (kern_cuda_matmul, KERN_CUDA_MM_DEQUANT).
 *   out: n_rows * n_in halves, 16-byte aligned (device).
 *   q, s: as above (q 16-byte aligned). n_in a positive multiple of 32.
 * Returns 0, BRISK_EINVAL, or the launch error; asynchronous on stream. */
int kern_cuda_w8a16_dequant(uint16_t *out, const int8_t *q, const uint16_t *s, int n_rows, int n_in,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
