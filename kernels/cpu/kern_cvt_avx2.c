/* kern_cvt_avx2.c - bf16 -> f16 and bf16 -> f32 at 8 lanes (kern_cvt.h's
 * contract). Compiled with -mavx2 -mfma -mf16c.
 *
 * bf16 -> f32 is exact (the bits moved up 16 places), and vcvtps2ph rounds
 * the f32 to nearest even as kern_fp32_to_fp16 does, subnormal halfs and
 * overflow to infinity included; only a NaN differs (F16C sets the quiet
 * bit), so NaN lanes are rebuilt as the reference writes them: the sign,
 * exponent 31 and the bf16 mantissa's 7 bits on top of the half's 10.
 * Where dst is 32-byte aligned (the model's buffers) the main loop streams
 * (non-temporal stores): the weights are not read again before the first
 * forward pass, and a streamed line is written without being read first. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_cvt_internal.h"

#define AI static inline __attribute__((always_inline))

AI __m128i bf16_to_f16_8(__m128i b) {
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* |b| > 0x7f80 (infinity) is a NaN; the magnitude is below 0x8000, so
     * the signed compare is the unsigned one. */
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7f80));
    __m128i fix =
        _mm_or_si128(_mm_and_si128(b, _mm_set1_epi16((short)0x8000)),
                     _mm_or_si128(_mm_set1_epi16(0x7c00),
                                  _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 3)));
    return _mm_blendv_epi8(h, fix, nan);
}

AI __m256i bf16_to_f32_8(__m128i b) {
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
}

void kern_cvt_bf16_f16_avx2(const void *src, void *dst, int64_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    int64_t i = 0;
    if ((uintptr_t)d % 32 == 0) {
        for (; i + 16 <= n; i += 16) {
            __m128i a = bf16_to_f16_8(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
            __m128i b = bf16_to_f16_8(_mm_loadu_si128((const __m128i *)(s + 2 * i + 16)));
            _mm256_stream_si256((__m256i *)(d + 2 * i), _mm256_set_m128i(b, a));
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        _mm_storeu_si128((__m128i *)(d + 2 * i), bf16_to_f16_8(a));
        _mm_storeu_si128((__m128i *)(d + 2 * i + 16), bf16_to_f16_8(b));
    }
    for (; i < n; i += 8) {
        /* The last 1..15 values through a zero-padded block: the same code,
         * so the same bits. */
        int64_t k = n - i < 8 ? n - i : 8;
        uint16_t in[8] = {0}, out[8];
        memcpy(in, s + 2 * i, (size_t)k * 2);
        _mm_storeu_si128((__m128i *)out, bf16_to_f16_8(_mm_loadu_si128((const __m128i *)in)));
        memcpy(d + 2 * i, out, (size_t)k * 2);
    }
}

void kern_cvt_bf16_f32_avx2(const void *src, void *dst, int64_t n) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    int64_t i = 0;
    if ((uintptr_t)d % 32 == 0) {
        for (; i + 16 <= n; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
            _mm256_stream_si256((__m256i *)(d + 4 * i), bf16_to_f32_8(a));
            _mm256_stream_si256((__m256i *)(d + 4 * i + 32), bf16_to_f32_8(b));
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        _mm256_storeu_si256((__m256i *)(d + 4 * i), bf16_to_f32_8(a));
        _mm256_storeu_si256((__m256i *)(d + 4 * i + 32), bf16_to_f32_8(b));
    }
    for (; i < n; i += 8) {
        int64_t k = n - i < 8 ? n - i : 8;
        uint16_t in[8] = {0};
        uint32_t out[8];
        memcpy(in, s + 2 * i, (size_t)k * 2);
        _mm256_storeu_si256((__m256i *)out, bf16_to_f32_8(_mm_loadu_si128((const __m128i *)in)));
        memcpy(d + 4 * i, out, (size_t)k * 4);
    }
}

void kern_cvt_copy_avx2(const void *src, void *dst, size_t nbytes) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t i = 0;
    if ((uintptr_t)d % 32 == 0) {
        for (; i + 32 <= nbytes; i += 32)
            _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    }
    memcpy(d + i, s + i, nbytes - i);
}
