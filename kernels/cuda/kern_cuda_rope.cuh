/* kern_cuda_rope.cuh - rotary position embedding on the GPU, both pairings
 * (C header; the kernel is in kern_cuda_rope.cu).
 *
 * For every token t < n_tok this is
 *   kern_rope(x + t * row_stride, n_heads, head_dim, n_rot, pos[t], base,
 *             freq_scale, freq_factors, mode)
 * (kernels/cpu/kern_ops.h has the definition): the first n_rot dims of each
 * head turn pair by pair, adjacent pairs (2i, 2i+1) for KERN_ROPE_ADJACENT
 * (llama), halves (i, i + n_rot/2) for KERN_ROPE_SPLIT_HALF (NeoX, qwen2), by
 *   pos[t] * freq_scale * base^(-2i/n_rot) / (freq_factors ? freq_factors[i] : 1).
 * n_rot > head_dim is clamped to head_dim, as on the CPU; dims past n_rot are
 * left alone. Angles, cos and sin are computed in double and rounded to
 * float, and the rotation is done without FMA contraction, exactly as the CPU
 * reference does: results match it bit for bit except where the GPU's and
 * libm's double cos/sin (within 2 ulp of each other) round to different floats.
 *   x:   row t at x + t * row_stride floats, n_heads * head_dim floats used
 *        (row_stride >= that: q or k inside a fused QKV row works). In
 *        place. Device memory.
 *   pos: n_tok int32 positions. freq_factors: n_rot/2 floats or NULL.
 *        Device memory, borrowed.
 * n_rot/2 may be at most KERN_CUDA_ROPE_MAX_PAIRS (the cos/sin of one token
 * live in shared memory). Returns 0, BRISK_EINVAL (bad sizes, row_stride too
 * small, a NULL pointer with work to do, an unknown mode), or the launch
 * error. Asynchronous on stream. */
#ifndef KERN_CUDA_ROPE_CUH
#define KERN_CUDA_ROPE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KERN_CUDA_ROPE_MAX_PAIRS 4096 /* 32 KiB of cos/sin: head_dim 8192 */

int kern_cuda_rope(float *x, size_t row_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                   const int32_t *pos, float base, float freq_scale, const float *freq_factors,
                   kern_rope_mode mode, cudaStream_t stream);
/* The same, then the rotated dims times mscale (> 0; Phi-3's LongRoPE
 * rope.scaling.attn_factor, applied after the turn as the CPU's forward pass
 * does): kern_cuda_rope is mscale 1. */
int kern_cuda_rope_ex(float *x, size_t row_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                      const int32_t *pos, float base, float freq_scale, const float *freq_factors,
                      float mscale, kern_rope_mode mode, cudaStream_t stream);
/* kern_cuda_rope_ex from x (row stride x_stride) into out (row stride
 * out_stride), the dims that do not turn copied as they are: the fused QKV
 * step's q rotated out of its [q | k | v] rows into the contiguous rows the
 * attention kernels read. out == x (with equal strides) is kern_cuda_rope_ex
 * in place; otherwise the two must not overlap. */
int kern_cuda_rope_to(float *out, size_t out_stride, const float *x, size_t x_stride, int n_tok,
                      int n_heads, int head_dim, int n_rot, const int32_t *pos, float base,
                      float freq_scale, const float *freq_factors, float mscale,
                      kern_rope_mode mode, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
