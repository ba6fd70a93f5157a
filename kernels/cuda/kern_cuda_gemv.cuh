/* kern_cuda_gemv.cuh - the decode GEMV behind kern_cuda_matmul: a few tokens
 * (1 to KERN_CUDA_GEMV_MAX_TOK) against F16 or INT8 (W8A16) weights on the
 * tensor cores, reading the f32 activations directly (C header; the kernel
 * is in kern_cuda_gemv.cu). kern_cuda_matmul picks it; tests and the perf
 * mode reach it through kern_cuda_matmul_ex.
 *
 *   y[t][o] = sum_i w[o][i] * x16[t][i]  for t < n_tok, o < n_out
 *   x16 = x rounded to f16 (nearest even, |x| > 65504 clamped, NaN kept)
 *         inside the kernel - the rounding kern_cuda_matmul's conversion
 *         pass applies, without that pass and its launch;
 *   w   = the F16 value, or for INT8 f16(s * q) (the operand the W8A16
 *         tensor-core kernels multiply; kern_cuda_w8_util.cuh).
 * Products f16 x f16 -> f32 exactly (mma.sync m16n8k16), sums in f32 in a
 * fixed order: the MMA's own, then a fixed split of K among a block's warps
 * summed in slot order. A result does not depend on the run.
 *   w:  a kern_cuda_weight (kern_cuda_matmul.cuh), data 16-byte aligned;
 *       F16 n_in a multiple of 8, INT8 of 32.
 *   x:  n_tok rows of n_in f32 (row stride n_in), 16-byte aligned.
 *   y:  n_tok rows of f32, row stride ldy >= n_out; the rest of a row is
 *       left alone. Must not overlap x or the weight.
 * cc_major: the device's compute capability (the kernel needs sm_80's
 * mma.sync.m16n8k16; below it kern_cuda_gemv_fits says no). n_sm: its
 * multiprocessor count, which sizes the split of K. Asynchronous on stream,
 * no allocation, no workspace: graph-capturable. */
#ifndef KERN_CUDA_GEMV_CUH
#define KERN_CUDA_GEMV_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "kernels/cuda/kern_cuda_matmul.cuh"

#define KERN_CUDA_GEMV_MAX_TOK 16

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when kern_cuda_gemv takes this weight, input and token count on a
 * device of compute capability cc_major, else 0. */
int kern_cuda_gemv_fits(const kern_cuda_weight *w, const float *x, int n_tok, int cc_major);

/* 0, BRISK_EINVAL when kern_cuda_gemv_fits says no or y/ldy are bad, or the
 * launch error. */
int kern_cuda_gemv(float *y, size_t ldy, const kern_cuda_weight *w, const float *x, int n_tok,
                   int n_sm, int cc_major, cudaStream_t stream);

/* For the perf mode's tuning lines: kern_cuda_gemv with the split of K
 * forced (kw warps a tile: 1, 2, 4 or 8; 0 is kern_cuda_gemv's own choice);
 * BRISK_EINVAL for another kw. */
int kern_cuda_gemv_ex(float *y, size_t ldy, const kern_cuda_weight *w, const float *x, int n_tok,
                      int n_sm, int cc_major, int kw, cudaStream_t stream);
/* The split kern_cuda_gemv chooses for w on n_sm multiprocessors (*kw) and
 * the blocks it launches (*blocks); *per_sm = the kernel's resident blocks
 * per multiprocessor on this device (its occupancy), 0 if unknown. */
void kern_cuda_gemv_plan(const kern_cuda_weight *w, int n_sm, int *kw, int *blocks, int *per_sm);

#ifdef __cplusplus
}
#endif

#endif
