/* kern_cvt_internal.h - what the float-type conversion files share and
 * nothing else sees: the one-pair entry points of the scalar reference
 * (kern_cvt.c), AVX2 + F16C (kern_cvt_avx2.c) and AVX-512 BW/VL
 * (kern_cvt_avx512.c), each compiled with its own -m flags; kern_cvt.c picks
 * one from kern_cpu_level(). kern_cvt.h's contract: src and dst at any
 * alignment, n any count, the reference's bits. The SIMD versions stream
 * into an aligned dst and do NOT fence: the caller (kern_cvt.c) does. */
#ifndef KERN_CVT_INTERNAL_H
#define KERN_CVT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

void kern_cvt_bf16_f16_scalar(const void *src, void *dst, int64_t n);
void kern_cvt_bf16_f32_scalar(const void *src, void *dst, int64_t n);
void kern_cvt_bf16_f16_avx2(const void *src, void *dst, int64_t n);
void kern_cvt_bf16_f32_avx2(const void *src, void *dst, int64_t n);
void kern_cvt_bf16_f16_avx512(const void *src, void *dst, int64_t n);
void kern_cvt_bf16_f32_avx512(const void *src, void *dst, int64_t n);
/* A copy of nbytes, streamed where dst is aligned to the vector (unfenced). */
void kern_cvt_copy_avx2(const void *src, void *dst, size_t nbytes);
void kern_cvt_copy_avx512(const void *src, void *dst, size_t nbytes);

#endif
