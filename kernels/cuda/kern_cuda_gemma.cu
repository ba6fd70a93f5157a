// kern_cuda_gemma.cu - GELU-tanh gate, scale and soft-cap: kernels, C entries.
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
