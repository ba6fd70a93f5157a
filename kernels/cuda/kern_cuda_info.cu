// kern_cuda_info.cu - device discovery for --version and --device auto.
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

extern "C" double kern_cuda_peak_bw(void) {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return 2.0 * clock_khz * 1e3 * bus_bits / 8.0; // DDR: two transfers a clock
}
