// kern_cuda_info.cu - device discovery for --version and --device auto, and the
// memory-bandwidth ceilings (device-to-device copy, read-only streaming).
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "brisk_config.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_common.cuh"

extern "C" int kern_cuda_device_count(void) {
    int n = 0;
    // No driver or no device is an ordinary CPU-only machine, not an error.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int kern_cuda_describe(char *buf, int len) {
    char archs[128];
    snprintf(archs, sizeof archs, "%s", BRISK_CUDA_ARCHITECTURES);
    // "75;80;90" -> "sm_75 sm_80 sm_90"
    char list[256] = "";
    for (char *tok = strtok(archs, ";"); tok; tok = strtok(NULL, ";")) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%ssm_%s", used ? " " : "", tok);
    }
    int n = kern_cuda_device_count();
    if (n == 0) {
        snprintf(buf, (size_t)len, "cuda(%s; no device)", list);
        return 0;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, (size_t)len, "cuda(%s; %d device(s))", list, n);
        return 0;
    }
    snprintf(buf, (size_t)len, "cuda(%s; %d device(s), 0: %s sm_%d%d %.1f GiB)", list, n, prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

// Best of `reps` device-to-device copies of `bytes`, counting the read and
// the write: what streaming kernels can hope for. CUDA events on a private
// stream; device 0.
extern "C" int kern_cuda_measure_copy_bw(size_t bytes, int reps, double *bytes_per_s) {
    *bytes_per_s = 0.0;
    if (bytes == 0 || reps <= 0)
        return BRISK_EINVAL;
    void *a = NULL, *b = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = KERN_CUDA_CALL(cudaMalloc(&a, bytes));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaMalloc(&b, bytes));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaEventCreate(&e0));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaEventCreate(&e1));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaMemsetAsync(a, 0x5a, bytes, s));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); // warm-up
    for (int r = 0; !rc && r < reps; r++) {
        float ms = 0.0f;
        rc = KERN_CUDA_CALL(cudaEventRecord(e0, s));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventRecord(e1, s));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventSynchronize(e1));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventElapsedTime(&ms, e0, e1));
        if (!rc && ms > 0.0f) {
            double bw = 2.0 * (double)bytes / ((double)ms * 1e-3);
            if (bw > *bytes_per_s)
                *bytes_per_s = bw;
        }
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (s)
        cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
    return rc;
}

// ---- read-only bandwidth ------------------------------------------------------
// What a decode step does with its weights: stream every byte once and only
// read it. Each thread keeps RB_UNROLL independent 16-byte loads in flight
// (ld.global.cs: evict-first, as the GEMV kernels read weights), folds them
// into an xor, and a warp's xor goes to *out with one atomic, so the loads
// cannot be optimised away. Grid-stride, one full wave of resident blocks.
#define RB_THREADS 256
#define RB_UNROLL 4

static __global__ __launch_bounds__(RB_THREADS) void read_bw_kernel(const int4 *__restrict__ p,
                                                                    size_t n, unsigned *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (RB_UNROLL - 1) * stride < n; i += RB_UNROLL * stride) {
        int4 v[RB_UNROLL];
#pragma unroll
        for (int u = 0; u < RB_UNROLL; u++)
            v[u] = __ldcs(p + i + (size_t)u * stride);
#pragma unroll
        for (int u = 0; u < RB_UNROLL; u++)
            acc ^= (unsigned)(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
    }
    for (; i < n; i += stride) {
        const int4 v = __ldcs(p + i);
        acc ^= (unsigned)(v.x ^ v.y ^ v.z ^ v.w);
    }
    for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1)
        acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % KERN_CUDA_WARP == 0)
        atomicXor(out, acc);
}

// Best of `reps` streaming reductions over `bytes` (a multiple of 16 is
// read; the rest ignored). When the allocation fails the size is halved down
// to 256 MiB - still four times any current L2 - so a nearly full GPU still
// gets a figure. Device 0, a private stream, CUDA events.
extern "C" int kern_cuda_measure_read_bw(size_t bytes, int reps, double *bytes_per_s) {
    *bytes_per_s = 0.0;
    if (bytes < 16 || reps <= 0)
        return BRISK_EINVAL;
    bytes &= ~(size_t)15;
    void *a = NULL;
    unsigned *out = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int dev = 0, n_sm = 0, per_sm = 0;
    while (cudaMalloc(&a, bytes) != cudaSuccess) {
        cudaGetLastError();
        a = NULL;
        if (bytes <= ((size_t)256 << 20))
            return kern_cuda_fail(BRISK_ENOMEM, "kern_cuda_measure_read_bw", __FILE__, __LINE__,
                                  "no device memory for the buffer");
        bytes /= 2;
    }
    int rc = KERN_CUDA_CALL(cudaMalloc((void **)&out, sizeof(unsigned)));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaGetDevice(&dev));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    if (!rc)
        rc = KERN_CUDA_CALL(
            cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaEventCreate(&e0));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaEventCreate(&e1));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaMemsetAsync(a, 0x5a, bytes, s));
    if (!rc)
        rc = KERN_CUDA_CALL(cudaMemsetAsync(out, 0, sizeof(unsigned), s));
    const size_t n = bytes / 16;
    const int per = per_sm / RB_THREADS > 0 ? per_sm / RB_THREADS : 1;
    const unsigned grid = kern_cuda_grid(n, RB_THREADS, (unsigned)(n_sm > 0 ? n_sm : 1) * per);
    // r = 0 is the warm-up (clocks, TLB), not counted.
    for (int r = 0; !rc && r <= reps; r++) {
        float ms = 0.0f;
        rc = KERN_CUDA_CALL(cudaEventRecord(e0, s));
        if (!rc) {
            read_bw_kernel<<<grid, RB_THREADS, 0, s>>>((const int4 *)a, n, out);
            rc = KERN_CUDA_LAUNCH_CHECK("read_bw_kernel");
        }
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventRecord(e1, s));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventSynchronize(e1));
        if (!rc)
            rc = KERN_CUDA_CALL(cudaEventElapsedTime(&ms, e0, e1));
        if (!rc && r > 0 && ms > 0.0f) {
            double bw = (double)bytes / ((double)ms * 1e-3);
            if (bw > *bytes_per_s)
                *bytes_per_s = bw;
        }
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (s)
        cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(out);
    return rc;
}

extern "C" double kern_cuda_peak_bw(void) {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return 2.0 * clock_khz * 1e3 * bus_bits / 8.0; // DDR: two transfers a clock
}
