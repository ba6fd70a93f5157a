/* kern_cuda_kv_store.cuh - writes a batch's new K and V rows into the paged
 * KV cache (f16, or int8 / fp8 codes), and adds projection biases (C header;
 * kern_cuda_kv_store.cu).
 *
 * kern_cuda_kv_store: for t < n_tok with slots[t] >= 0,
 *   k16[slots[t] + i] = f16(k[t * ld + i]),  v16[slots[t] + i] = f16(v[t * ld + i])
 * for i < kv_dim, rounded to nearest even (as kern_quantize_row(KERN_TYPE_F16)
 * does on the CPU: bit-exact). slots[t] is the element offset of the token's
 * row in one layer's pool: block_table[pos / block_size] * block_stride +
 * (pos % block_size) * row_stride; the same offsets serve every layer whose
 * rows the same block table addresses (every layer, or one group of a pool
 * grouped by sliding window, kv/kv_cache.h). A slot < 0 (padding rows of a
 * captured graph) is skipped.
 *   k, v: f32 rows (device); ld >= kv_dim. k16, v16: a layer's pools: the
 *   start of its rows of block 0 (in a grouped pool, the pool plus the
 *   layer's index in its group times block_size * row_stride; block_stride,
 *   in the slots, then spans the group's layers).
 *   slots: n_tok int64 (device).
 * kern_cuda_add_bias: x[t * ld + i] += b[i] for t < n_tok, i < n (qwen2's
 * q/k/v biases), f32, in place.
 * Both return 0, BRISK_EINVAL, or the launch error; asynchronous on stream. */
#ifndef KERN_CUDA_KV_STORE_CUH
#define KERN_CUDA_KV_STORE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_kv_store(uint16_t *k16, uint16_t *v16, const float *k, const float *v, size_t ld,
                       const int64_t *slots, int n_tok, int kv_dim, cudaStream_t stream);

/* kern_cuda_kv_store_q: the same into a quantized pool (kern_kv.h: dtype
 * KERN_KV_INT8 or KERN_KV_FP8, one fp16 scale per position and KV head),
 * bit for bit kern_kv_quantize's codes and scales (the CPU reference), and
 * nothing else of the block. kq, vq: a layer's pools where its block 0
 * starts (bytes; as kern_cuda_kv_fmt.cuh addresses them); slots[t] = the
 * token's block id * block_stride (bytes) + its row in the block, < 0
 * skipped; scale_off: the scale plane's offset in a layer-block
 * (kern_kv_scale_off). head_dim a multiple of 16, ld >= n_kv_heads *
 * head_dim. */
int kern_cuda_kv_store_q(uint8_t *kq, uint8_t *vq, kern_kv_dtype dtype, const float *k,
                         const float *v, size_t ld, const int64_t *slots, int n_tok, int n_kv_heads,
                         int head_dim, int block_size, size_t block_stride, size_t scale_off,
                         cudaStream_t stream);

int kern_cuda_add_bias(float *x, size_t ld, const float *b, int n_tok, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
