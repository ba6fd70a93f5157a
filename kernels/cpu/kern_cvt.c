/* kern_cvt.c - the reference float-type conversions and the dispatch to the
 * AVX2 and AVX-512 versions (kern_cvt.h). The SIMD versions stream into
 * aligned destinations without fencing; the entry points here fence once
 * when they are done (kern_cvt_rows: once for all its rows, since a fence
 * per 4 KiB row stalls the stream: the whole wait for the write-combining
 * buffers to drain, half a million times for a 1B model). */
#include "kernels/cpu/kern_cvt.h"

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define cvt_fence() _mm_sfence()
#else
#define cvt_fence() ((void)0)
#endif

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_cvt_internal.h"

/* Element i of a 16-bit array at any alignment. */
static inline uint16_t load_u16(const void *p, int64_t i) {
    uint16_t v;
    memcpy(&v, (const uint8_t *)p + 2 * i, 2);
    return v;
}

static inline void store_u16(void *p, int64_t i, uint16_t v) {
    memcpy((uint8_t *)p + 2 * i, &v, 2);
}

void kern_cvt_bf16_f16_scalar(const void *src, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        store_u16(dst, i, kern_fp32_to_fp16(kern_bf16_to_fp32(load_u16(src, i))));
}

void kern_cvt_bf16_f32_scalar(const void *src, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float f = kern_bf16_to_fp32(load_u16(src, i));
        memcpy((uint8_t *)dst + 4 * i, &f, 4);
    }
}

/* Bytes per value of the three float types; 0 for the others. */
static size_t float_size(kern_type t) {
    return t == KERN_TYPE_F32 ? 4 : t == KERN_TYPE_F16 || t == KERN_TYPE_BF16 ? 2 : 0;
}

/* A row converter: n values from src to dst. */
typedef void (*cvt_fn)(const void *src, void *dst, int64_t n);

static void copy2_scalar(const void *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * 2);
}
static void copy4_scalar(const void *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * 4);
}
static void copy2_avx2(const void *src, void *dst, int64_t n) {
    kern_cvt_copy_avx2(src, dst, (size_t)n * 2);
}
static void copy4_avx2(const void *src, void *dst, int64_t n) {
    kern_cvt_copy_avx2(src, dst, (size_t)n * 4);
}
static void copy2_avx512(const void *src, void *dst, int64_t n) {
    kern_cvt_copy_avx512(src, dst, (size_t)n * 2);
}
static void copy4_avx512(const void *src, void *dst, int64_t n) {
    kern_cvt_copy_avx512(src, dst, (size_t)n * 4);
}

/* The converter of a pair at a level (0 scalar, 1 AVX2, 2 AVX-512), or NULL
 * for a pair kern_cvt.h does not convert. */
static cvt_fn pick(kern_type s, kern_type d, int lv) {
    static const cvt_fn bf16_f16[3] = {kern_cvt_bf16_f16_scalar, kern_cvt_bf16_f16_avx2,
                                       kern_cvt_bf16_f16_avx512};
    static const cvt_fn bf16_f32[3] = {kern_cvt_bf16_f32_scalar, kern_cvt_bf16_f32_avx2,
                                       kern_cvt_bf16_f32_avx512};
    static const cvt_fn copy2[3] = {copy2_scalar, copy2_avx2, copy2_avx512};
    static const cvt_fn copy4[3] = {copy4_scalar, copy4_avx2, copy4_avx512};
    if (s == d && float_size(s))
        return float_size(s) == 2 ? copy2[lv] : copy4[lv];
    if (s == KERN_TYPE_BF16 && d == KERN_TYPE_F16)
        return bf16_f16[lv];
    if (s == KERN_TYPE_BF16 && d == KERN_TYPE_F32)
        return bf16_f32[lv];
    return NULL;
}

static int level_index(void) {
    kern_level lv = kern_cpu_level();
    return lv >= KERN_LEVEL_AVX512 ? 2 : lv >= KERN_LEVEL_AVX2 ? 1 : 0;
}

int kern_cvt_row_ref(kern_type src_type, const void *src, kern_type dst_type, void *dst,
                     int64_t n) {
    cvt_fn f = pick(src_type, dst_type, 0);
    if (!f)
        return -1;
    f(src, dst, n);
    return 0;
}

int kern_cvt_row(kern_type src_type, const void *src, kern_type dst_type, void *dst, int64_t n) {
    cvt_fn f = pick(src_type, dst_type, level_index());
    if (!f)
        return -1;
    f(src, dst, n);
    cvt_fence();
    return 0;
}

int kern_cvt_rows(kern_type src_type, const void *src, size_t src_stride, const int64_t *src_rows,
                  kern_type dst_type, void *dst, size_t dst_stride, int64_t n, int64_t n_rows) {
    cvt_fn f = pick(src_type, dst_type, level_index());
    if (!f)
        return -1;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t sr = src_rows ? src_rows[r] : r;
        f((const uint8_t *)src + (size_t)sr * src_stride, (uint8_t *)dst + (size_t)r * dst_stride,
          n);
    }
    cvt_fence();
    return 0;
}
