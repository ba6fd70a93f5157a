// kern_cuda_rmsnorm.cu - RMSNorm with the residual add fused in: kernel,
// launcher, C entry.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_rmsnorm.cuh"

// ---- kernel -----------------------------------------------------------------
// One block per row (grid-stride over rows). Pass 1 adds the residual, writes
// x back and sums squares; a block reduction (warp shuffles, then one value
// per warp through shared memory) gives the scale; pass 2 re-reads x, which
// this same thread wrote or read in pass 1 (L1/L2-resident: a 4096-float row
// is 16 KiB), and writes y. x and y carry no __restrict__: they may alias.
static __global__ void rmsnorm_kernel(float *y, float *x, const float *__restrict__ res,
                                      const float *__restrict__ w, int n_rows, int dim, float eps) {
    __shared__ float scratch[KERN_CUDA_WARP];
    for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
        float *xr = x + (size_t)row * (size_t)dim;
        float *yr = y + (size_t)row * (size_t)dim;
        float ss = 0.0f;
        if (res) {
            const float *rr = res + (size_t)row * (size_t)dim;
            for (int i = threadIdx.x; i < dim; i += blockDim.x) {
                const float v = xr[i] + rr[i];
                xr[i] = v;
                ss += v * v;
            }
        } else {
            for (int i = threadIdx.x; i < dim; i += blockDim.x) {
                const float v = xr[i];
                ss += v * v;
            }
        }
        ss = kern_block_sum(ss, scratch);
        const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            yr[i] = xr[i] * scale * w[i];
    }
}

// ---- launcher ---------------------------------------------------------------
static int rmsnorm_launch(float *y, float *x, const float *res, const float *w, int n_rows, int dim,
                          float eps, cudaStream_t stream) {
    // About 8 elements a thread: 512 threads for dim 4096, 96 for 576, one
    // warp for 64 or 100. More threads would only idle in the reduction.
    const int threads = kern_cuda_row_threads(dim, 8, 512);
    rmsnorm_kernel<<<(unsigned)n_rows, threads, 0, stream>>>(y, x, res, w, n_rows, dim, eps);
    return KERN_CUDA_LAUNCH_CHECK("rmsnorm_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_rmsnorm(float *y, float *x, const float *res, const float *w, int n_rows,
                                 int dim, float eps, cudaStream_t stream) {
    if (n_rows < 0 || dim < 0)
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    if (dim == 0 || !y || !x || !w)
        return BRISK_EINVAL;
    return rmsnorm_launch(y, x, res, w, n_rows, dim, eps, stream);
}
