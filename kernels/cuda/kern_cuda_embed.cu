// kern_cuda_embed.cu - token embedding gather: kernel, launcher, C entry.
#include <cuda_fp16.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_embed.cuh"

__device__ __forceinline__ float embed_to_f32(float v) {
    return v;
}
__device__ __forceinline__ float embed_to_f32(__half v) {
    return __half2float(v);
}

// ---- kernel -----------------------------------------------------------------
// Grid: x strides over the VEC-groups of a row, y over tokens; both loops are
// grid-stride, so any dim and n_tok are covered whatever the grid.
template <typename T, int VEC>
static __global__ void embed_kernel(float *__restrict__ out, const T *__restrict__ table,
                                    int n_vocab, int dim, const int32_t *__restrict__ ids,
                                    int n_tok, int *__restrict__ err_flag) {
    typedef kern_cuda_vec<T, VEC> in_vec;
    typedef kern_cuda_vec<float, VEC> out_vec;
    const int n_vec = dim / VEC; // the launcher picks VEC dividing dim
    for (int t = blockIdx.y; t < n_tok; t += gridDim.y) {
        const int32_t id = ids[t];
        const bool ok = id >= 0 && id < n_vocab;
        if (!ok && err_flag && blockIdx.x == 0 && threadIdx.x == 0)
            *err_flag = 1;
        // A bad id never forms a pointer outside the table: row 0 is named
        // but not read.
        const in_vec *src = (const in_vec *)(table + (size_t)(ok ? id : 0) * (size_t)dim);
        out_vec *dst = (out_vec *)(out + (size_t)t * (size_t)dim);
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n_vec;
             c += gridDim.x * blockDim.x) {
            out_vec o;
            if (ok) {
                const in_vec v = src[c];
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    o.v[k] = embed_to_f32(v.v[k]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    o.v[k] = 0.0f;
            }
            dst[c] = o;
        }
    }
}

// ---- launcher ---------------------------------------------------------------
template <typename T>
static int embed_launch(float *out, const T *table, int n_vocab, int dim, const int32_t *ids,
                        int n_tok, int *err_flag, cudaStream_t stream) {
    const int threads = 256;
    const bool vec4 = dim % 4 == 0 && kern_cuda_aligned(table, 4 * sizeof(T)) &&
                      kern_cuda_aligned(out, 4 * sizeof(float));
    const int n_vec = vec4 ? dim / 4 : dim;
    // 64 blocks across a row is 16K threads: every row of a real model in one pass.
    dim3 grid(kern_cuda_grid((size_t)n_vec, threads, 64), n_tok < 65535 ? n_tok : 65535);
    if (vec4)
        embed_kernel<T, 4>
            <<<grid, threads, 0, stream>>>(out, table, n_vocab, dim, ids, n_tok, err_flag);
    else
        embed_kernel<T, 1>
            <<<grid, threads, 0, stream>>>(out, table, n_vocab, dim, ids, n_tok, err_flag);
    return KERN_CUDA_LAUNCH_CHECK("embed_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_embedding(float *out, const void *table, kern_type type, int n_vocab,
                                   int dim, const int32_t *ids, int n_tok, int *err_flag,
                                   cudaStream_t stream) {
    if (n_vocab < 0 || dim < 0 || n_tok < 0)
        return BRISK_EINVAL;
    if (type != KERN_TYPE_F32 && type != KERN_TYPE_F16)
        return BRISK_EUNSUPPORTED;
    if (dim == 0 || n_tok == 0)
        return BRISK_OK;
    if (!out || !ids || (!table && n_vocab > 0))
        return BRISK_EINVAL;
    if (type == KERN_TYPE_F32)
        return embed_launch(out, (const float *)table, n_vocab, dim, ids, n_tok, err_flag, stream);
    return embed_launch(out, (const __half *)table, n_vocab, dim, ids, n_tok, err_flag, stream);
}
