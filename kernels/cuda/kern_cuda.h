/* kern_cuda.h - the CUDA backend's host-side entry points (C linkage).
 * Compiled only when CMake finds a CUDA toolkit (BRISK_HAVE_CUDA). */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no GPU. */
int kern_cuda_device_count(void);

/* Writes "cuda(sm_75 sm_80 sm_90; <devices>)" into buf: the architectures
 * compiled in and what the runtime finds. Returns 0, or -1 when brisk was
 * built without CUDA. */
int kern_cuda_describe(char *buf, int len);

#ifdef __cplusplus
}
#endif

#endif
