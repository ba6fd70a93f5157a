/* kern_cuda_buf.h - device memory, copies and streams for host C code.
 *
 * Every call returns 0 or a negative BRISK_E* code (common/brisk_error.h)
 * and never exits or aborts: BRISK_ENOMEM when the device is out of memory,
 * BRISK_EINVAL for a bad argument, BRISK_EUNSUPPORTED when the driver or GPU
 * cannot run this build (no device, no kernel image for its architecture),
 * BRISK_EIO for any other CUDA failure (a kernel fault, a lost device).
 * kern_cuda_last_error() then says what failed, in one line.
 *
 * Copies are asynchronous on `stream` (NULL: the legacy default stream);
 * results are in place once kern_cuda_sync(stream) returns 0, and a fault in
 * an earlier kernel on the stream surfaces there. Compiled only when CMake
 * finds a CUDA toolkit (BRISK_HAVE_CUDA). */
#ifndef KERN_CUDA_BUF_H
#define KERN_CUDA_BUF_H

#include <cuda_runtime_api.h> /* cudaStream_t; plain C */
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The reason for the last failed kern_cuda_* call on this thread, e.g.
 * "cudaMalloc (kern_cuda_buf.cu:40): out of memory"; "" when none failed.
 * Points to a per-thread buffer that the next failure overwrites. */
const char *kern_cuda_last_error(void);

/* *dptr = `bytes` of device memory (NULL when bytes is 0), owned by the
 * caller, released with kern_cuda_free(). On failure *dptr is NULL. */
int kern_cuda_malloc(void **dptr, size_t bytes);
/* Releases memory from kern_cuda_malloc(); NULL is a no-op. Waits for work
 * that may still use it (cudaFree synchronises the device). */
int kern_cuda_free(void *dptr);

/* Host -> device. From pageable host memory src may be reused as soon as
 * the call returns (the runtime stages it); pinned src must stay unchanged
 * until the stream reaches the copy. */
int kern_cuda_upload(void *dst_dev, const void *src_host, size_t bytes, cudaStream_t stream);
/* Device -> host: dst_host holds the data after kern_cuda_sync(stream). */
int kern_cuda_download(void *dst_host, const void *src_dev, size_t bytes, cudaStream_t stream);
/* Device -> device; the ranges must not overlap. */
int kern_cuda_copy(void *dst_dev, const void *src_dev, size_t bytes, cudaStream_t stream);
/* Every byte of dst_dev[0, bytes) = value (low 8 bits). */
int kern_cuda_memset(void *dst_dev, int value, size_t bytes, cudaStream_t stream);
/* Waits until all work queued on the stream is done. */
int kern_cuda_sync(cudaStream_t stream);

/* A non-blocking stream owned by the caller, destroyed with
 * kern_cuda_stream_destroy() (NULL is a no-op). */
int kern_cuda_stream_create(cudaStream_t *stream);
int kern_cuda_stream_destroy(cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
