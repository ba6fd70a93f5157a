// kern_cuda_argmax.cu - greedy argmax over rows of logits: kernel, launcher,
// C entry.
#include <limits.h>

#include "kernels/cuda/kern_cuda_argmax.cuh"
#include "kernels/cuda/kern_cuda_common.cuh"

// (v, i) beats (bv, bi): larger value, or the same value at a lower index.
// NaN compares false both ways, so it never beats anything. The empty
// candidate is (-inf, INT_MAX): any non-NaN value, -inf included, beats it.
__device__ __forceinline__ bool argmax_beats(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// The order is total on non-NaN candidates and symmetric, so after the xor
// butterfly every lane holds the same winner.
__device__ __forceinline__ void argmax_warp(float &bv, int &bi) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, o);
        const int i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_beats(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
}

// ---- kernel -----------------------------------------------------------------
// One block per row (grid-stride over rows): each thread scans its strided
// columns in increasing order, warps reduce with shuffles, warp winners meet
// in shared memory and warp 0 picks the row's winner.
static __global__ void argmax_kernel(int32_t *__restrict__ ids, const float *__restrict__ logits,
                                     int n_rows, int n_cols) {
    __shared__ float s_val[KERN_CUDA_WARP];
    __shared__ int s_idx[KERN_CUDA_WARP];
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int n_warps = blockDim.x / KERN_CUDA_WARP;
    for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const float *xr = logits + (size_t)row * (size_t)n_cols;
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = threadIdx.x; i < n_cols; i += blockDim.x) {
            const float v = xr[i];
            if (argmax_beats(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        argmax_warp(bv, bi);
        __syncthreads(); // the previous row's winners have been read
        if (lane == 0) {
            s_val[warp] = bv;
            s_idx[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            bv = lane < n_warps ? s_val[lane] : -INFINITY;
            bi = lane < n_warps ? s_idx[lane] : INT_MAX;
            argmax_warp(bv, bi);
            if (lane == 0) {
                // All-NaN row, or NaN first: the CPU loop never leaves 0.
                ids[row] = (bi == INT_MAX || isnan(xr[0])) ? 0 : bi;
            }
        }
    }
}

// ---- launcher ---------------------------------------------------------------
static int argmax_launch(int32_t *ids, const float *logits, int n_rows, int n_cols,
                         cudaStream_t stream) {
    // About 8 columns a thread up to 1024 threads (a 152K vocabulary: 149).
    const int threads = kern_cuda_row_threads(n_cols, 8, 1024);
    argmax_kernel<<<(unsigned)n_rows, threads, 0, stream>>>(ids, logits, n_rows, n_cols);
    return KERN_CUDA_LAUNCH_CHECK("argmax_kernel");
}

// ---- entry ------------------------------------------------------------------
extern "C" int kern_cuda_argmax(int32_t *ids, const float *logits, int n_rows, int n_cols,
                                cudaStream_t stream) {
    if (n_rows < 0 || n_cols < 0)
        return BRISK_EINVAL;
    if (n_rows == 0)
        return BRISK_OK;
    if (n_cols == 0 || !ids || !logits)
        return BRISK_EINVAL;
    return argmax_launch(ids, logits, n_rows, n_cols, stream);
}
