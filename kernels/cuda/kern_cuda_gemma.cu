// kern_cuda_gemma.cu - GELU-tanh gate (over separate arrays or the fused
// gate|up rows), scale and soft-cap: kernels, C entries.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_gemma.cuh"

// kern_gelu_tanh_mul_ref's expression, operation for operation.
__device__ __forceinline__ float gelu_mul(float x, float u) {
    const float k = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * u;
}

// Grid-stride, one element a thread. No __restrict__: out may alias an input
// (each element is read and written by the same thread).
static __global__ void gelu_mul_kernel(float *out, const float *gate, const float *up, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = gelu_mul(gate[i], up[i]);
}

// Rows of the fused GATE_UP product (gate then up in each row), as
// silu_mul_rows_kernel in kern_cuda_silu.cu: rows in y, elements in x.
static __global__ void gelu_mul_rows_kernel(float *__restrict__ out, size_t ld_out,
                                            const float *__restrict__ gu, size_t ld_gu, int n_rows,
                                            int n) {
    for (int r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const float *g = gu + (size_t)r * ld_gu;
        float *o = out + (size_t)r * ld_out;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            o[i] = gelu_mul(g[i], g[n + i]);
    }
}

static __global__ void scale_kernel(float *x, size_t n, float s) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] *= s;
}

static __global__ void softcap_kernel(float *x, size_t n, float cap) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = cap * tanhf(x[i] / cap);
}

static const int ELT_THREADS = 256;

extern "C" int kern_cuda_gelu_mul(float *out, const float *gate, const float *up, size_t n,
                                  cudaStream_t stream) {
    if (n == 0)
        return BRISK_OK;
    if (!out || !gate || !up)
        return BRISK_EINVAL;
    gelu_mul_kernel<<<kern_cuda_grid(n, ELT_THREADS, 4096), ELT_THREADS, 0, stream>>>(out, gate, up,
                                                                                      n);
    return KERN_CUDA_LAUNCH_CHECK("gelu_mul_kernel");
}

extern "C" int kern_cuda_gelu_mul_rows(float *out, size_t ld_out, const float *gu, size_t ld_gu,
                                       int n_rows, int n, cudaStream_t stream) {
    if (n_rows < 0 || n < 0 || ld_out < (size_t)n || ld_gu < 2 * (size_t)n)
        return BRISK_EINVAL;
    if (n_rows == 0 || n == 0)
        return BRISK_OK;
    if (!out || !gu)
        return BRISK_EINVAL;
    const dim3 grid(kern_cuda_grid((size_t)n, ELT_THREADS, 64),
                    kern_cuda_grid((size_t)n_rows, 1, 65535));
    gelu_mul_rows_kernel<<<grid, ELT_THREADS, 0, stream>>>(out, ld_out, gu, ld_gu, n_rows, n);
    return KERN_CUDA_LAUNCH_CHECK("gelu_mul_rows_kernel");
}

extern "C" int kern_cuda_scale(float *x, size_t n, float s, cudaStream_t stream) {
    if (n == 0)
        return BRISK_OK;
    if (!x)
        return BRISK_EINVAL;
    scale_kernel<<<kern_cuda_grid(n, ELT_THREADS, 4096), ELT_THREADS, 0, stream>>>(x, n, s);
    return KERN_CUDA_LAUNCH_CHECK("scale_kernel");
}

extern "C" int kern_cuda_softcap(float *x, size_t n, float cap, cudaStream_t stream) {
    if (!(cap > 0.0f))
        return BRISK_EINVAL;
    if (n == 0)
        return BRISK_OK;
    if (!x)
        return BRISK_EINVAL;
    softcap_kernel<<<kern_cuda_grid(n, ELT_THREADS, 4096), ELT_THREADS, 0, stream>>>(x, n, cap);
    return KERN_CUDA_LAUNCH_CHECK("softcap_kernel");
}
