/* kern_cuda_gemma.cuh - the element-wise ops Gemma adds to a forward pass, on
 * the GPU (C header; the kernels are in kern_cuda_gemma.cu). Each is the CPU
 * reference's expression (kernels/cpu/kern_ops.c, models/forward.c) on n
 * contiguous floats of device memory, in place where it says; the GPU's tanhf
 * and expf are within 2 ulp where libm's are within 1.
 *
 *   kern_cuda_gelu_mul: out[i] = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up[i]
 *     with g = gate[i] (kern_gelu_tanh_mul_ref); out may be gate or up.
 *   kern_cuda_gelu_mul_rows: the same over the fused gate|up rows of the
 *     GATE_UP step, as kern_cuda_silu_mul_rows (kern_cuda_silu.cuh) reads
 *     them: out[r * ld_out + i] = gelu_mul(gu[r * ld_gu + i],
 *     gu[r * ld_gu + n + i]) for r < n_rows, i < n; ld_out >= n, ld_gu >=
 *     2 n, out not overlapping gu.
 *   kern_cuda_scale:    x[i] *= s (Gemma's embeddings times sqrt(dim)).
 *   kern_cuda_softcap:  x[i] = cap * tanh(x[i] / cap) (Gemma 2's final logits).
 *
 * Each returns 0, BRISK_EINVAL (NULL pointer with n > 0; cap <= 0), or the
 * launch error. Asynchronous on stream. */
#ifndef KERN_CUDA_GEMMA_CUH
#define KERN_CUDA_GEMMA_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_gelu_mul(float *out, const float *gate, const float *up, size_t n,
                       cudaStream_t stream);
int kern_cuda_gelu_mul_rows(float *out, size_t ld_out, const float *gu, size_t ld_gu, int n_rows,
                            int n, cudaStream_t stream);
int kern_cuda_scale(float *x, size_t n, float s, cudaStream_t stream);
int kern_cuda_softcap(float *x, size_t n, float cap, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
