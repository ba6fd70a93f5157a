/* kern_cuda_silu.cuh - the SiLU-gated MLP activation on the GPU (C header;
 * the kernel is in kern_cuda_silu.cu).
 *
 * out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), for i < n:
 * kern_silu_mul() over n contiguous floats (n_tok rows of the hidden size
 * back to back). Same expression as the CPU reference; the GPU's expf is
 * within 2 ulp where libm's is within 1.
 *   out, gate, up: n floats of device memory; out may be gate or up (in
 *   place), no other overlap.
 * Returns 0, BRISK_EINVAL (NULL pointer with n > 0), or the launch error.
 * Asynchronous on stream. */
#ifndef KERN_CUDA_SILU_CUH
#define KERN_CUDA_SILU_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_silu_mul(float *out, const float *gate, const float *up, size_t n,
                       cudaStream_t stream);

/* The same over the fused gate|up rows of the GATE_UP step: for r < n_rows,
 * i < n,
 *   out[r * ld_out + i] = silu(gu[r * ld_gu + i]) * gu[r * ld_gu + n + i]
 * (row r of gu is the gate's n floats, then the up projection's). ld_out >=
 * n, ld_gu >= 2 n; out must not overlap gu. Returns 0, BRISK_EINVAL, or the
 * launch error; asynchronous on stream. */
int kern_cuda_silu_mul_rows(float *out, size_t ld_out, const float *gu, size_t ld_gu, int n_rows,
                            int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
