// kern_cuda_softmax.cu - numerically stable row softmax: kernel, launcher,
// C entry.
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_softmax.cuh"

// ---- kernel -----------------------------------------------------------------
// One block per row (grid-stride over rows), three passes over the row: the
// max, the sum of exp(x - max), and the write of exp(x - max) / sum, with exp
// recomputed rather than stored in pass 2 (a read is cheaper than a write
// and a re-read). Every thread sums its strided elements in order, then the
// block reduces the partials.
static __global__ void softmax_kernel(float *x, int n_rows, int n_cols) {
    __shared__ float scratch[KERN_CUDA_WARP];
    for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
        float *xr = x + (size_t)row * (size_t)n_cols;
        float m = -INFINITY;
        for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
            m = fmaxf(m, xr[i]);
        m = kern_block_max(m, scratch);
        float s = 0.0f;
        for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
            s += expf(xr[i] - m);
        s = kern_block_sum(s, scratch);
        const float inv = 1.0f / s;
        for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
            xr[i] = expf(xr[i] - m) * inv;
    }
}

// ---- launcher ---------------------------------------------------------------
static int softmax_launch(float *x, int n_rows, int n_cols, cudaStream_t stream) {
    // About 4 elements a thread up to 1024 threads: one warp for 64 or 100
    // columns, the whole block for a vocabulary (152K columns: 149 each).
    const int threads = kern_cuda_row_threads(n_cols, 4, 1024);
    softmax_kernel<<<(unsigned)n_rows, threads, 0, stream>>>(x, n_rows, n_cols);
    return KERN_CUDA_LAUNCH_CHECK("softmax_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_softmax(float *x, int n_rows, int n_cols, cudaStream_t stream) {
    if (n_rows < 0 || n_cols < 0)
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    if (n_cols == 0 || !x)
        return BRISK_EINVAL;
    return softmax_launch(x, n_rows, n_cols, stream);
}
