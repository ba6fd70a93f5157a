/* kern_attn_av16.h - the 16-lane (AVX-512) vector operations kern_attn_x.h
 * is written in, shared by kern_attn_avx512.c and kern_attn_avx512vnni.c:
 * include it, then define ATT_FN (and ATT_VNNI where wanted), then include
 * kern_attn_x.h. Only for files compiled with the AVX-512 flags. */
#ifndef KERN_ATTN_AV16_H
#define KERN_ATTN_AV16_H

#include <immintrin.h>

#define AV __m512
#define AW 16
#define AV_LOADU(p) _mm512_loadu_ps(p)
#define AV_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define AV_LOADPH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define AV_MUL(a, b) _mm512_mul_ps((a), (b))
#define AV_ADD(a, b) _mm512_add_ps((a), (b))
#define AV_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define AV_SET1(x) _mm512_set1_ps(x)
#define AV_ZERO() _mm512_setzero_ps()
#define AV_FOLD(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps((v), 1))
#define AV_LOADQ8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
/* 16 bytes zero-extended to 32-bit lanes: the low nibbles, or the high ones. */
#define AV_LOADQ4(p, hi)                                                                           \
    _mm512_cvtepi32_ps(_mm512_sub_epi32(                                                           \
        (hi) ? _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))), 4)   \
             : _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))),       \
                                _mm512_set1_epi32(15)),                                            \
        _mm512_set1_epi32(8)))
#define AV_CV1 16
#define AV_CV3 8

#endif
