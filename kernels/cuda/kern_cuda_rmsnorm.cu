// kern_cuda_rmsnorm.cu - RMSNorm with the residual add fused in: kernel,
// launcher, C entry.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_rmsnorm.cuh"

// ---- kernel -----------------------------------------------------------------
// One block per row (grid-stride over rows). Row r lives at (r / per) * ld +
// (r % per) * dim: plain rows are per = 1, ld = dim; the per-head norm of a
// fused QKV row has per = n_heads heads of dim = head_dim in rows ld apart.
// Pass 1 adds the residual, writes x back and sums squares; a block
// reduction (warp shuffles, then one value per warp through shared memory)
// gives the scale; pass 2 re-reads x, which this same thread wrote or read
// in pass 1 (L1/L2-resident: a 4096-float row is 16 KiB), and writes y. x
// and y carry no __restrict__: they may alias.
static __global__ void rmsnorm_kernel(float *y, float *x, const float *__restrict__ res,
                                      const float *__restrict__ w, int n_rows, int dim, int per,
                                      size_t ld, float eps) {
    __shared__ float scratch[KERN_CUDA_WARP];
    for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const size_t off = (size_t)(row / per) * ld + (size_t)(row % per) * (size_t)dim;
        float *xr = x + off;
        float *yr = y + off;
        float ss = 0.0f;
        if (res) {
            const float *rr = res + off;
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
                          int per, size_t ld, float eps, cudaStream_t stream) {
    // About 8 elements a thread: 512 threads for dim 4096, 96 for 576, one
    // warp for 64 or 100. More threads would only idle in the reduction.
    const int threads = kern_cuda_row_threads(dim, 8, 512);
    const unsigned grid = kern_cuda_grid((size_t)n_rows, 1, 0x7fffffffu);
    rmsnorm_kernel<<<grid, threads, 0, stream>>>(y, x, res, w, n_rows, dim, per, ld, eps);
    return KERN_CUDA_LAUNCH_CHECK("rmsnorm_kernel");
}

// ---- entries ----------------------------------------------------------------
extern "C" int kern_cuda_rmsnorm(float *y, float *x, const float *res, const float *w, int n_rows,
                                 int dim, float eps, cudaStream_t stream) {
    if (n_rows < 0 || dim < 0)
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    if (dim == 0 || !y || !x || !w)
        return BRISK_EINVAL;
    return rmsnorm_launch(y, x, res, w, n_rows, dim, 1, (size_t)dim, eps, stream);
}

extern "C" int kern_cuda_rmsnorm_heads(float *x, size_t ld, int n_tok, int n_heads, int head_dim,
                                       const float *w, float eps, cudaStream_t stream) {
    if (n_tok < 0 || n_heads < 0 || head_dim < 0)
        return BRISK_EINVAL;
    if (n_tok == 0 || n_heads == 0)
        return BRISK_OK;
    if (head_dim == 0 || !x || !w || ld < (size_t)n_heads * (size_t)head_dim ||
        (long long)n_tok * n_heads > 0x7fffffffLL)
        return BRISK_EINVAL;
    return rmsnorm_launch(x, x, NULL, w, n_tok * n_heads, head_dim, n_heads, ld, eps, stream);
}
