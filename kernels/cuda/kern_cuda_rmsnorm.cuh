/* kern_cuda_rmsnorm.cuh - RMSNorm fused with the residual add, on the GPU
 * (C header; the kernel is in kern_cuda_rmsnorm.cu).
 *
 * For every row r < n_rows (rows of dim floats, row stride dim):
 *   if res: x[r] += res[r]                 (the residual stream, written back)
 *   y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * w[i]
 * which is kern_rmsnorm() on the updated x. The add is a plain f32 add, so x
 * matches the CPU's x + res bit for bit; the sum of squares is f32 (the CPU
 * reference sums in double).
 *   x:   n_rows * dim floats, read and (when res) written. Device memory.
 *   res: n_rows * dim floats or NULL. w: dim floats. Device, borrowed.
 *   y:   n_rows * dim floats; may be x itself (then only the normalised
 *        values are kept), must not overlap res or w otherwise.
 * Returns 0, BRISK_EINVAL (negative size, dim 0 with rows, NULL pointer), or
 * the launch error. Asynchronous on stream. */
#ifndef KERN_CUDA_RMSNORM_CUH
#define KERN_CUDA_RMSNORM_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_rmsnorm(float *y, float *x, const float *res, const float *w, int n_rows, int dim,
                      float eps, cudaStream_t stream);
/* The per-head norm of Qwen3 and Gemma 3 in place on rows of a wider
 * buffer: for every token t < n_tok and head h < n_heads the head_dim floats
 * at x + t * ld + h * head_dim are kern_rmsnorm()ed with w (head_dim
 * floats) - kern_cuda_rmsnorm without a residual on each of those rows, the
 * same arithmetic. ld >= n_heads * head_dim (q or k inside a fused QKV
 * row); the rest of a row is left alone. Returns 0, BRISK_EINVAL, or the
 * launch error; asynchronous on stream. */
int kern_cuda_rmsnorm_heads(float *x, size_t ld, int n_tok, int n_heads, int head_dim,
                            const float *w, float eps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
