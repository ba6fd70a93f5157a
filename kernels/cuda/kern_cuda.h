/* kern_cuda.h - the CUDA backend's host-side entry points (C linkage).
 * Compiled only when CMake finds a CUDA toolkit (BRISK_HAVE_CUDA). */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no GPU. */
int kern_cuda_device_count(void);

/* Writes "cuda(sm_75 sm_80 sm_90; <devices>)" into buf: the architectures
 * compiled in and what the runtime finds. Returns 0, or -1 when brisk was
 * built without CUDA. */
int kern_cuda_describe(char *buf, int len);

/* Device-to-device copy bandwidth of device 0 in bytes/s (read + write),
 * best of reps copies of `bytes`. Returns 0 or a BRISK_E* code. */
int kern_cuda_measure_copy_bw(size_t bytes, int reps, double *bytes_per_s);
/* Read-only bandwidth of device 0 in bytes/s: best of reps streaming
 * reductions over `bytes` of device memory (each byte read once, nothing
 * written but one word): the ceiling of a decode step, which only reads its
 * weights. The buffer is halved down to 256 MiB when `bytes` cannot be
 * allocated. Returns 0 or a BRISK_E* code. */
int kern_cuda_measure_read_bw(size_t bytes, int reps, double *bytes_per_s);
/* Peak memory bandwidth of device 0 from its memory clock and bus width
 * (bytes/s); 0 when the driver does not report them. */
double kern_cuda_peak_bw(void);

#ifdef __cplusplus
}
#endif

#endif
