/* kern_cuda_softmax.cuh - row softmax on the GPU (C header; the kernel is in
 * kern_cuda_softmax.cu).
 *
 * In place, for every row r < n_rows of n_cols floats (row stride n_cols):
 *   x[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r)
 * which is kern_softmax() per row: the max is subtracted first, so logits in
 * the hundreds do not overflow. exp and the sum are f32 (the CPU reference
 * sums in double).
 *   x: n_rows * n_cols floats of device memory.
 * Returns 0, BRISK_EINVAL (negative size, n_cols 0 with rows, NULL x), or
 * the launch error. Asynchronous on stream. */
#ifndef KERN_CUDA_SOFTMAX_CUH
#define KERN_CUDA_SOFTMAX_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_softmax(float *x, int n_rows, int n_cols, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
