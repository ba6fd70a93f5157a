/* kern_cuda_embed.cuh - token embedding gather on the GPU (C header; the
 * kernel is in kern_cuda_embed.cu).
 *
 * out[t][c] = table[ids[t]][c] as f32, for t < n_tok, c < dim.
 *   table: n_vocab rows of dim values of `type`, F32 or F16 (IEEE half),
 *          row stride dim. Device memory, borrowed.
 *   ids:   n_tok int32 token ids, device memory, borrowed.
 *   out:   n_tok rows of dim floats, row stride dim, device memory.
 * The conversion is exact, so out matches kern_dequantize_row() bit for bit.
 * An id outside [0, n_vocab) gives a row of zeros and sets *err_flag = 1
 * (a device int; may be NULL); the table is never read out of bounds. The
 * flag is only ever set, never cleared: the caller zeroes it and reads it back
 * when convenient (once per step), so a check costs no synchronisation.
 * Returns 0; BRISK_EINVAL for a negative size or a NULL pointer with work to
 * do; BRISK_EUNSUPPORTED for any other type; or the launch error
 * (kern_cuda_last_error() says which). Asynchronous on stream. */
#ifndef KERN_CUDA_EMBED_CUH
#define KERN_CUDA_EMBED_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

#ifdef __cplusplus
extern "C" {
#endif

int kern_cuda_embedding(float *out, const void *table, kern_type type, int n_vocab, int dim,
                        const int32_t *ids, int n_tok, int *err_flag, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
