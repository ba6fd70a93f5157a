// kern_cuda_info.cu - device discovery for --version and --device auto.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "brisk_config.h"
#include "kernels/cuda/kern_cuda.h"

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
