/* kern_cuda_attn_prefill.cuh - causal attention for runs of query tokens over
 * the paged f16 KV cache: prompt chunks (prefill) and, in mixed batches,
 * decode tokens (C header; the kernels are in kern_cuda_attn_prefill.cu).
 *
 * A run is consecutive rows of q/out that belong to one sequence at
 * consecutive positions: run r = (first, n, pos0) covers rows [first, first +
 * n) at positions pos0 .. pos0 + n - 1, and its sequence's K/V for positions
 * [0, pos0 + n) are already in the cache (the rows of this batch included).
 * For row i of run r (position p = pos0 + i), query head h, KV head g = h /
 * (n_heads / n_kv_heads):
 *   out[row][h*head_dim + d] = sum_{j <= p} softmax_j(q[row][h] . K[j][g] * scale) V[j][g][d]
 * which is kern_attention_head_ref() over n_ctx = p + 1 positions of the
 * same f16 view. Tiled over query rows and key positions with an online
 * softmax (running max and sum, flash-attention style), K/V tiles staged in
 * shared memory, f32 arithmetic.
 *   out, q:       rows of n_heads * head_dim floats, row stride q_stride
 *                 (>= n_heads * head_dim); out must not overlap q.
 *   k16, v16:     one layer's K and V pools (IEEE half bits), addressed as in
 *                 kern_cuda_attn_decode.cuh (block_stride, row_stride; a
 *                 grouped pool's layer the same way).
 *   block_tables: n_runs rows of max_blocks int32 block ids (device).
 *   runs:         n_runs x 3 int32 (first, n, pos0) (device). A run with n
 *                 <= 0 does nothing; pos0 + n is clamped to max_blocks *
 *                 block_size (rows past it get zeros).
 *   max_run:      an upper bound of every run's n (sizes the grid).
 * head_dim a multiple of 8 in [8, 256]; n_heads a multiple of n_kv_heads.
 * Returns 0, BRISK_EINVAL for bad sizes, strides or pointers, or the launch
 * error. Asynchronous on stream; no workspace. */
#ifndef KERN_CUDA_ATTN_PREFILL_CUH
#define KERN_CUDA_ATTN_PREFILL_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_attn_prefill(float *out, const float *q, size_t q_stride, const uint16_t *k16,
                           const uint16_t *v16, const int32_t *block_tables, int max_blocks,
                           const int32_t *runs, int n_runs, int max_run, int n_heads,
                           int n_kv_heads, int head_dim, int block_size, size_t block_stride,
                           size_t row_stride, float scale, cudaStream_t stream);

/* The same with a sliding window (window > 0: the row at position p sees keys
 * in (p - window, p], kern_kv_view.window; whole key tiles before a tile's
 * first window are skipped) and attention-logit soft-capping (softcap > 0:
 * each scaled score s becomes softcap * tanh(s / softcap) before the masks,
 * kern_kv_view.softcap); 0 and 0 is kern_cuda_attn_prefill. window < 0 or
 * softcap < 0 (or NaN): BRISK_EINVAL. */
int kern_cuda_attn_prefill_ex(float *out, const float *q, size_t q_stride, const uint16_t *k16,
                              const uint16_t *v16, const int32_t *block_tables, int max_blocks,
                              const int32_t *runs, int n_runs, int max_run, int n_heads,
                              int n_kv_heads, int head_dim, int block_size, size_t block_stride,
                              size_t row_stride, float scale, int window, float softcap,
                              cudaStream_t stream);

/* The same over any pool the GPU reads: dtype KERN_KV_F16 (halves, as
 * above; scale_off unused), KERN_KV_INT8 or KERN_KV_FP8 (bytes, addressed as
 * kern_cuda_kv_fmt.cuh says: block_stride in bytes, row_stride in values,
 * scale_off the layer-block's scale plane; head_dim and row_stride multiples
 * of 16), as kern_cuda_attn_decode_kv. Another dtype: BRISK_EINVAL. */
int kern_cuda_attn_prefill_kv(float *out, const float *q, size_t q_stride, const void *k_pool,
                              const void *v_pool, kern_kv_dtype dtype, size_t scale_off,
                              const int32_t *block_tables, int max_blocks, const int32_t *runs,
                              int n_runs, int max_run, int n_heads, int n_kv_heads, int head_dim,
                              int block_size, size_t block_stride, size_t row_stride, float scale,
                              int window, float softcap, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
