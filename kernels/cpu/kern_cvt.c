/* kern_cvt.c - the reference float-type conversions and the dispatch to the
 * AVX2 and AVX-512 versions (kern_cvt.h). */
#include "kernels/cpu/kern_cvt.h"

#include <string.h>

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

int kern_cvt_row_ref(kern_type src_type, const void *src, kern_type dst_type, void *dst,
                     int64_t n) {
    if (src_type == dst_type && float_size(src_type)) {
        memcpy(dst, src, (size_t)n * float_size(src_type));
        return 0;
    }
    if (src_type == KERN_TYPE_BF16 && dst_type == KERN_TYPE_F16) {
        kern_cvt_bf16_f16_scalar(src, dst, n);
        return 0;
    }
    if (src_type == KERN_TYPE_BF16 && dst_type == KERN_TYPE_F32) {
        kern_cvt_bf16_f32_scalar(src, dst, n);
        return 0;
    }
    return -1;
}

int kern_cvt_row(kern_type src_type, const void *src, kern_type dst_type, void *dst, int64_t n) {
    kern_level lv = kern_cpu_level();
    if (src_type == dst_type && float_size(src_type) && lv >= KERN_LEVEL_AVX2) {
        if (lv >= KERN_LEVEL_AVX512)
            kern_cvt_copy_avx512(src, dst, (size_t)n * float_size(src_type));
        else
            kern_cvt_copy_avx2(src, dst, (size_t)n * float_size(src_type));
        return 0;
    }
    if (src_type == KERN_TYPE_BF16 && dst_type == KERN_TYPE_F16 && lv >= KERN_LEVEL_AVX2) {
        if (lv >= KERN_LEVEL_AVX512)
            kern_cvt_bf16_f16_avx512(src, dst, n);
        else
            kern_cvt_bf16_f16_avx2(src, dst, n);
        return 0;
    }
    if (src_type == KERN_TYPE_BF16 && dst_type == KERN_TYPE_F32 && lv >= KERN_LEVEL_AVX2) {
        if (lv >= KERN_LEVEL_AVX512)
            kern_cvt_bf16_f32_avx512(src, dst, n);
        else
            kern_cvt_bf16_f32_avx2(src, dst, n);
        return 0;
    }
    return kern_cvt_row_ref(src_type, src, dst_type, dst, n);
}
