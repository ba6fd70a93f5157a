/* kern_cuda_argmax.cuh - greedy sampling on the GPU: the argmax of each row
 * of logits (C header; the kernel is in kern_cuda_argmax.cu).
 *
 * ids[r] = the index of the largest of logits[r][0 .. n_cols), rows of
 * n_cols floats (row stride n_cols), for r < n_rows. The answer is the CPU
 * sampler's greedy loop (models/sampler.c: best = i when x[i] > x[best]),
 * exactly: ties go to the lowest index, a NaN is never chosen, and a row
 * whose first logit is NaN gives 0 (nothing compares greater than it).
 *   logits: n_rows * n_cols floats; ids: n_rows int32. Device memory, so
 *   only the chosen ids need cross to the host.
 * Returns 0, BRISK_EINVAL (negative size, n_cols 0 with rows, NULL pointer),
 * or the launch error. Asynchronous on stream. */
#ifndef KERN_CUDA_ARGMAX_CUH
#define KERN_CUDA_ARGMAX_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_argmax(int32_t *ids, const float *logits, int n_rows, int n_cols,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
