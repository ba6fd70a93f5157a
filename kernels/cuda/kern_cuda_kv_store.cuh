/* kern_cuda_kv_store.cuh - writes a batch's new K and V rows into the paged
 * f16 KV cache, and adds projection biases (C header; kern_cuda_kv_store.cu).
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

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_kv_store(uint16_t *k16, uint16_t *v16, const float *k, const float *v, size_t ld,
                       const int64_t *slots, int n_tok, int kv_dim, cudaStream_t stream);

int kern_cuda_add_bias(float *x, size_t ld, const float *b, int n_tok, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
