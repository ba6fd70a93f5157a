// kern_cuda_silu.cu - out = silu(gate) * up, over separate arrays or over the
// fused gate|up rows: kernels, launchers, C entries.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_silu.cuh"

// The CPU reference's expression, operation for operation (no product feeds
// a sum, so FMA contraction cannot change it). g = -100 gives exp(100) = inf
// and -0 * up, as on the CPU.
__device__ __forceinline__ float silu_mul(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

// ---- kernel -----------------------------------------------------------------
// Grid-stride over groups of VEC elements, then the n % VEC tail one element
// a thread. No __restrict__: out may be gate or up, which is safe because each
// element is read and written by the same thread.
template <int VEC>
static __global__ void silu_mul_kernel(float *out, const float *gate, const float *up, size_t n) {
    typedef kern_cuda_vec<float, VEC> vec;
    const size_t n_vec = n / VEC;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const vec g = ((const vec *)gate)[i], u = ((const vec *)up)[i];
        vec o;
#pragma unroll
        for (int k = 0; k < VEC; k++)
            o.v[k] = silu_mul(g.v[k], u.v[k]);
        ((vec *)out)[i] = o;
    }
    for (size_t i = n_vec * VEC + first; i < n; i += stride)
        out[i] = silu_mul(gate[i], up[i]);
}

// Rows of the fused GATE_UP product: row r of gu is gate (n floats) then up
// (n floats), row stride ld_gu; out row r has stride ld_out. Grid-stride
// over rows in y and over groups of VEC in x (the launcher checked the
// alignment of both pointers, both strides and n for VEC = 4). out never
// overlaps gu here, so __restrict__ holds.
template <int VEC>
static __global__ void silu_mul_rows_kernel(float *__restrict__ out, size_t ld_out,
                                            const float *__restrict__ gu, size_t ld_gu, int n_rows,
                                            int n) {
    typedef kern_cuda_vec<float, VEC> vec;
    for (int r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const vec *g = reinterpret_cast<const vec *>(gu + (size_t)r * ld_gu);
        const vec *u = reinterpret_cast<const vec *>(gu + (size_t)r * ld_gu + n);
        vec *o = reinterpret_cast<vec *>(out + (size_t)r * ld_out);
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n / VEC;
             i += gridDim.x * blockDim.x) {
            const vec a = g[i], b = u[i];
            vec c;
#pragma unroll
            for (int k = 0; k < VEC; k++)
                c.v[k] = silu_mul(a.v[k], b.v[k]);
            o[i] = c;
        }
    }
}

// ---- launcher ---------------------------------------------------------------
static int silu_mul_launch(float *out, const float *gate, const float *up, size_t n,
                           cudaStream_t stream) {
    const int threads = 256;
    const size_t vec_bytes = sizeof(kern_cuda_vec<float, 4>);
    const bool vec4 = kern_cuda_aligned(out, vec_bytes) && kern_cuda_aligned(gate, vec_bytes) &&
                      kern_cuda_aligned(up, vec_bytes);
    // 4096 blocks of 256 threads fill any current GPU several times over
    // (H100: 132 SMs x 2048 threads = 1056 blocks); the loop does the rest.
    const unsigned grid = kern_cuda_grid(vec4 ? n / 4 + 1 : n, threads, 4096);
    if (vec4)
        silu_mul_kernel<4><<<grid, threads, 0, stream>>>(out, gate, up, n);
    else
        silu_mul_kernel<1><<<grid, threads, 0, stream>>>(out, gate, up, n);
    return KERN_CUDA_LAUNCH_CHECK("silu_mul_kernel");
}

static int silu_mul_rows_launch(float *out, size_t ld_out, const float *gu, size_t ld_gu,
                                int n_rows, int n, cudaStream_t stream) {
    const int threads = 256;
    const bool vec4 = kern_cuda_aligned(out, 16) && kern_cuda_aligned(gu, 16) && n % 4 == 0 &&
                      ld_out % 4 == 0 && ld_gu % 4 == 0;
    const int per_row = vec4 ? n / 4 : n;
    // x: enough blocks for a row (14336 floats: 14 blocks of float4s), y:
    // the rows, capped (the loop takes the rest).
    const dim3 grid(kern_cuda_grid((size_t)per_row, threads, 64),
                    kern_cuda_grid((size_t)n_rows, 1, 65535));
    if (vec4)
        silu_mul_rows_kernel<4><<<grid, threads, 0, stream>>>(out, ld_out, gu, ld_gu, n_rows, n);
    else
        silu_mul_rows_kernel<1><<<grid, threads, 0, stream>>>(out, ld_out, gu, ld_gu, n_rows, n);
    return KERN_CUDA_LAUNCH_CHECK("silu_mul_rows_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_silu_mul(float *out, const float *gate, const float *up, size_t n,
                                  cudaStream_t stream) {
    if (n == 0)
        return BRISK_OK;
    if (!out || !gate || !up)
        return BRISK_EINVAL;
    return silu_mul_launch(out, gate, up, n, stream);
}

extern "C" int kern_cuda_silu_mul_rows(float *out, size_t ld_out, const float *gu, size_t ld_gu,
                                       int n_rows, int n, cudaStream_t stream) {
    if (n_rows < 0 || n < 0 || ld_out < (size_t)n || ld_gu < 2 * (size_t)n)
        return BRISK_EINVAL;
    if (n_rows == 0 || n == 0)
        return BRISK_OK;
    if (!out || !gu)
        return BRISK_EINVAL;
    return silu_mul_rows_launch(out, ld_out, gu, ld_gu, n_rows, n, stream);
}
