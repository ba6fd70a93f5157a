/* kern_cuda_attn_decode.cuh - decode attention over the paged f16 KV cache
 * on the GPU (C header; the kernels are in kern_cuda_attn_decode.cu).
 *
 * A batch of n_seq sequences, one query token each. For sequence s, query
 * head h (KV head g = h / (n_heads / n_kv_heads), GQA) and d < head_dim:
 *   out[s][h*head_dim + d] = sum_p softmax_p(q[s][h] . K[s][p][g] * scale) * V[s][p][g][d]
 * over positions p in [0, ctx_lens[s]), which is kern_attention_head_ref()
 * on the same f16 view (kern_kv_view with k16/v16) - f32 arithmetic instead
 * of double (see the bound in tests/cuda/test_cuda_ops.c).
 *   out, q:       n_seq rows of n_heads * head_dim floats (row stride
 *                 n_heads * head_dim); out must not overlap q.
 *   k16, v16:     one layer's K and V pools (IEEE half bits): where its rows
 *                 of block 0 start (in a pool grouped by sliding window,
 *                 kv/kv_cache.h, the layer's index in its group times
 *                 block_size * row_stride past the pool's start, block_stride
 *                 spanning the group's layers, and the tables the group's).
 *                 Element offset of (position p, KV head g) of sequence s:
 *                   block_tables[s * max_blocks + p / block_size] * block_stride
 *                   + (p % block_size) * row_stride + g * head_dim
 *   block_tables: n_seq rows of max_blocks int32 block ids (device memory);
 *                 only the first ceil(ctx_lens[s] / block_size) entries of a
 *                 row are read, and only positions < ctx_lens[s] of them.
 *   ctx_lens:     n_seq int32 lengths (device memory). A length <= 0 gives a
 *                 row of zeros; one past max_blocks * block_size is clamped
 *                 to it (the table has no more blocks).
 *   workspace:    device memory of at least
 *                 kern_cuda_attn_decode_workspace(n_seq, n_heads, head_dim,
 *                 max_blocks, block_size) bytes (NULL/0 when that is 0),
 *                 for the split-K partials.
 * Split-K ("flash decoding"): the context is cut into partitions of
 * KERN_CUDA_ATTN_PART positions, each computed by its own block with its own
 * max and sum; a second kernel combines them. A context of at most one
 * partition is finished by the first kernel alone.
 * head_dim must be a multiple of 8 in [8, 256]; n_heads a multiple of
 * n_kv_heads; row_stride >= n_kv_heads * head_dim; block_stride >=
 * (block_size - 1) * row_stride + n_kv_heads * head_dim. f16 loads are 16
 * bytes wide when the pools and strides allow it (8-element aligned).
 * Returns 0; BRISK_EINVAL for a bad size, stride or pointer, or a workspace
 * too small; or the launch error (kern_cuda_last_error() says which).
 * Asynchronous on stream. */
#ifndef KERN_CUDA_ATTN_DECODE_CUH
#define KERN_CUDA_ATTN_DECODE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_kv.h"

#define KERN_CUDA_ATTN_PART 256    /* positions per split-K partition */
#define KERN_CUDA_ATTN_MAX_DIM 256 /* largest head_dim */

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of workspace kern_cuda_attn_decode needs for these sizes: 0 when
 * max_blocks * block_size fits one partition; (size_t)-1 for invalid sizes. */
size_t kern_cuda_attn_decode_workspace(int n_seq, int n_heads, int head_dim, int max_blocks,
                                       int block_size);

int kern_cuda_attn_decode(float *out, const float *q, const uint16_t *k16, const uint16_t *v16,
                          const int32_t *block_tables, int max_blocks, const int32_t *ctx_lens,
                          int n_seq, int n_heads, int n_kv_heads, int head_dim, int block_size,
                          size_t block_stride, size_t row_stride, float scale, float *workspace,
                          size_t workspace_bytes, cudaStream_t stream);

/* The same with a sliding window (window > 0: only positions >= ctx_len -
 * window count, kern_kv_view.window) and attention-logit soft-capping
 * (softcap > 0: each scaled score s becomes softcap * tanh(s / softcap)
 * before the window and the softmax, kern_kv_view.softcap), as the CPU's
 * attention does them; 0 and 0 is kern_cuda_attn_decode. window < 0 or
 * softcap < 0 (or NaN): BRISK_EINVAL. */
int kern_cuda_attn_decode_ex(float *out, const float *q, const uint16_t *k16, const uint16_t *v16,
                             const int32_t *block_tables, int max_blocks, const int32_t *ctx_lens,
                             int n_seq, int n_heads, int n_kv_heads, int head_dim, int block_size,
                             size_t block_stride, size_t row_stride, float scale, int window,
                             float softcap, float *workspace, size_t workspace_bytes,
                             cudaStream_t stream);

/* The same over any pool the GPU reads (kern_kv.h): dtype KERN_KV_F16
 * (k_pool, v_pool halves, as above; scale_off unused) or KERN_KV_INT8 /
 * KERN_KV_FP8, whose pools are bytes addressed as kern_cuda_kv_fmt.cuh says
 * (block_stride in bytes, row_stride in values, scale_off the layer-block's
 * scale plane; head_dim and row_stride multiples of 16). The values are
 * fp16(scale) * code, exact in f32: the result is kern_attention_head_ref()
 * on the same quantized view within the f16 bound. Another dtype:
 * BRISK_EINVAL. */
int kern_cuda_attn_decode_kv(float *out, const float *q, const void *k_pool, const void *v_pool,
                             kern_kv_dtype dtype, size_t scale_off, const int32_t *block_tables,
                             int max_blocks, const int32_t *ctx_lens, int n_seq, int n_heads,
                             int n_kv_heads, int head_dim, int block_size, size_t block_stride,
                             size_t row_stride, float scale, int window, float softcap,
                             float *workspace, size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
