// kern_cuda_buf.cu - device memory, copies, streams, and the CUDA status ->
// BRISK_E* mapping every kernel file's launch check goes through.
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_common.cuh"

// One reason per host thread: kernels are launched from the engine thread,
// tests and tools from theirs, and a message must not be torn by another.
static thread_local char g_last_error[256];

extern "C" const char *kern_cuda_last_error(void) {
    return g_last_error;
}

static int brisk_code(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return BRISK_OK;
    case cudaErrorMemoryAllocation: return BRISK_ENOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle: return BRISK_EINVAL;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion: return BRISK_EUNSUPPORTED;
    default: return BRISK_EIO;
    }
}

int kern_cuda_fail(int code, const char *what, const char *file, int line, const char *msg) {
    const char *base = strrchr(file, '/');
    snprintf(g_last_error, sizeof g_last_error, "%s (%s:%d): %s", what, base ? base + 1 : file,
             line, msg);
    return code;
}

int kern_cuda_status(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess)
        return BRISK_OK;
    // Clear the runtime's last-error slot, or a later launch check would see
    // this (non-sticky) error again and blame an innocent kernel.
    cudaGetLastError();
    return kern_cuda_fail(brisk_code(e), what, file, line, cudaGetErrorString(e));
}

extern "C" int kern_cuda_malloc(void **dptr, size_t bytes) {
    if (!dptr)
        return BRISK_EINVAL;
    *dptr = NULL;
    if (bytes == 0)
        return BRISK_OK;
    int rc = KERN_CUDA_CALL(cudaMalloc(dptr, bytes));
    if (rc != BRISK_OK)
        *dptr = NULL;
    return rc;
}

extern "C" int kern_cuda_free(void *dptr) {
    if (!dptr)
        return BRISK_OK;
    return KERN_CUDA_CALL(cudaFree(dptr));
}

extern "C" int kern_cuda_upload(void *dst_dev, const void *src_host, size_t bytes,
                                cudaStream_t stream) {
    if (bytes == 0)
        return BRISK_OK;
    if (!dst_dev || !src_host)
        return BRISK_EINVAL;
    return KERN_CUDA_CALL(
        cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, stream));
}

extern "C" int kern_cuda_download(void *dst_host, const void *src_dev, size_t bytes,
                                  cudaStream_t stream) {
    if (bytes == 0)
        return BRISK_OK;
    if (!dst_host || !src_dev)
        return BRISK_EINVAL;
    return KERN_CUDA_CALL(
        cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, stream));
}

extern "C" int kern_cuda_copy(void *dst_dev, const void *src_dev, size_t bytes,
                              cudaStream_t stream) {
    if (bytes == 0)
        return BRISK_OK;
    if (!dst_dev || !src_dev)
        return BRISK_EINVAL;
    return KERN_CUDA_CALL(
        cudaMemcpyAsync(dst_dev, src_dev, bytes, cudaMemcpyDeviceToDevice, stream));
}

extern "C" int kern_cuda_memset(void *dst_dev, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0)
        return BRISK_OK;
    if (!dst_dev)
        return BRISK_EINVAL;
    return KERN_CUDA_CALL(cudaMemsetAsync(dst_dev, value, bytes, stream));
}

extern "C" int kern_cuda_sync(cudaStream_t stream) {
    return KERN_CUDA_CALL(cudaStreamSynchronize(stream));
}

extern "C" int kern_cuda_stream_create(cudaStream_t *stream) {
    if (!stream)
        return BRISK_EINVAL;
    *stream = NULL;
    return KERN_CUDA_CALL(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
}

extern "C" int kern_cuda_stream_destroy(cudaStream_t stream) {
    if (!stream)
        return BRISK_OK;
    return KERN_CUDA_CALL(cudaStreamDestroy(stream));
}
