// kern_cuda_common.cuh - what every CUDA kernel file shares: the launch
// check, grid sizing and warp/block reductions. CUDA C++ only: included by
// the .cu files, never by C code (the C entry points are in the op headers).
#ifndef KERN_CUDA_COMMON_CUH
#define KERN_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/brisk_error.h"

#define KERN_CUDA_WARP 32

// Maps a CUDA status to 0 or a BRISK_E* code; a failure also records
// "what (file:line): CUDA message" for kern_cuda_last_error(). Defined in
// kern_cuda_buf.cu.
int kern_cuda_status(cudaError_t e, const char *what, const char *file, int line);
// Records "what (file:line): msg" for kern_cuda_last_error() and returns
// code: for failures that are no cudaError_t (a cuBLAS status). Defined in
// kern_cuda_buf.cu.
int kern_cuda_fail(int code, const char *what, const char *file, int line, const char *msg);

// After a <<<...>>> launch: configuration errors (too many threads, too much
// shared memory, no kernel image for this GPU) surface here, not at the
// launch. Faults inside the kernel surface at the next synchronising call.
#define KERN_CUDA_LAUNCH_CHECK(name) kern_cuda_status(cudaGetLastError(), name, __FILE__, __LINE__)
#define KERN_CUDA_CALL(call) kern_cuda_status((call), #call, __FILE__, __LINE__)

// Blocks for a grid-stride loop over n items with `threads` per block,
// capped: past a few waves of blocks per SM, more blocks only cost
// scheduling, and the loop covers the rest.
static inline unsigned kern_cuda_grid(size_t n, int threads, unsigned cap = 65535u) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b < 1)
        b = 1;
    return b > cap ? cap : (unsigned)b;
}

// Threads for a one-block-per-row kernel: about `per_thread` elements each,
// a whole number of warps, between one warp and `max_threads`.
static inline int kern_cuda_row_threads(int n, int per_thread, int max_threads) {
    int t = (n + per_thread - 1) / per_thread;
    t = (t + KERN_CUDA_WARP - 1) / KERN_CUDA_WARP * KERN_CUDA_WARP;
    if (t < KERN_CUDA_WARP)
        t = KERN_CUDA_WARP;
    return t > max_threads ? max_threads : t;
}

static inline bool kern_cuda_aligned(const void *p, size_t bytes) {
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

// N consecutive elements moved as one aligned load or store (float x 4: 16
// bytes, half x 4: 8 bytes). Only for pointers the launcher has checked with
// kern_cuda_aligned(p, sizeof(kern_cuda_vec<T, N>)).
template <typename T, int N> struct alignas(sizeof(T) * N) kern_cuda_vec { T v[N]; };

// ---- reductions ------------------------------------------------------------
// Butterfly (xor) shuffles: every lane ends with the result, so no broadcast
// step is needed after the warp level.

__device__ __forceinline__ float kern_warp_sum(float v) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kern_warp_max(float v) {
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Whole-block reductions for blockDim.x a multiple of 32 (at most 1024):
// each warp reduces, warp leaders meet in shared memory, and every warp then
// reduces the 32 partials itself, so all threads return the result.
// `scratch` is __shared__ float[32]; the leading __syncthreads() makes it safe
// to call these back to back with the same scratch.
__device__ __forceinline__ float kern_block_sum(float v, float *scratch) {
    int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    int n_warps = blockDim.x / KERN_CUDA_WARP;
    v = kern_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    return kern_warp_sum(lane < n_warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float kern_block_max(float v, float *scratch) {
    int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    int n_warps = blockDim.x / KERN_CUDA_WARP;
    v = kern_warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    return kern_warp_max(lane < n_warps ? scratch[lane] : -INFINITY);
}

#endif
