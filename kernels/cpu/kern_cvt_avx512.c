/* kern_cvt_avx512.c - bf16 -> f16 and bf16 -> f32 at 16 lanes (kern_cvt.h's
 * contract), with masked loads and stores for the tail. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c.
 *
 * As kern_cvt_avx2.c: bf16 -> f32 exactly, vcvtps2ph rounds to nearest even
 * as the reference does, NaN lanes rebuilt without the quiet bit F16C would
 * set; non-temporal stores where dst is 64-byte aligned (the model's
 * buffers: the weights are not read again before the first forward pass,
 * and a streamed line is written without being read first). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_cvt_internal.h"

#define AI static inline __attribute__((always_inline))

AI __m256i bf16_to_f16_16(__m256i b) {
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(b, _mm256_set1_epi16(0x7fff)),
                                            _mm256_set1_epi16(0x7f80));
    __m256i fix = _mm256_or_si256(
        _mm256_and_si256(b, _mm256_set1_epi16((short)0x8000)),
        _mm256_or_si256(_mm256_set1_epi16(0x7c00),
                        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 3)));
    return _mm256_mask_blend_epi16(nan, h, fix);
}

AI __m512i bf16_to_f32_16(__m256i b) {
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16);
}

void kern_cvt_bf16_f16_avx512(const void *src, void *dst, int64_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    int64_t i = 0;
    if ((uintptr_t)d % 64 == 0) {
        for (; i + 32 <= n; i += 32) {
            __m256i a = bf16_to_f16_16(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
            __m256i b = bf16_to_f16_16(_mm256_loadu_si256((const __m256i *)(s + 2 * i + 32)));
            _mm512_stream_si512((void *)(d + 2 * i),
                                _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
        }
    }
    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32));
        _mm256_storeu_si256((__m256i *)(d + 2 * i), bf16_to_f16_16(a));
        _mm256_storeu_si256((__m256i *)(d + 2 * i + 32), bf16_to_f16_16(b));
    }
    for (; i < n; i += 16) {
        /* Masked-off lanes are neither read nor written (no fault past the
         * end of src or dst). */
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m256i a = _mm256_maskz_loadu_epi16(m, s + 2 * i);
        _mm256_mask_storeu_epi16(d + 2 * i, m, bf16_to_f16_16(a));
    }
}

void kern_cvt_bf16_f32_avx512(const void *src, void *dst, int64_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    int64_t i = 0;
    if ((uintptr_t)d % 64 == 0) {
        for (; i + 32 <= n; i += 32) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
            __m256i b = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32));
            _mm512_stream_si512((void *)(d + 4 * i), bf16_to_f32_16(a));
            _mm512_stream_si512((void *)(d + 4 * i + 64), bf16_to_f32_16(b));
        }
    }
    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32));
        _mm512_storeu_si512(d + 4 * i, bf16_to_f32_16(a));
        _mm512_storeu_si512(d + 4 * i + 64, bf16_to_f32_16(b));
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m256i a = _mm256_maskz_loadu_epi16(m, s + 2 * i);
        _mm512_mask_storeu_epi32(d + 4 * i, m, bf16_to_f32_16(a));
    }
}

void kern_cvt_copy_avx512(const void *src, void *dst, size_t nbytes) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t i = 0;
    if ((uintptr_t)d % 64 == 0) {
        for (; i + 64 <= nbytes; i += 64)
            _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512(s + i));
    }
    memcpy(d + i, s + i, nbytes - i);
}
