/* kern_attn_avx512vnni.c - the attention of kern_attn_x.h at 16 lanes over a
 * q8_0 or q4_0 cache, with the scores in integers (ATT_VNNI: each query
 * quantized to int8 per 32 values, vpdpbusd against K's codes; see the
 * header). The softmax and the weighted V sum are the AVX-512 file's.
 * Compiled with the AVX-512 VNNI flags; chosen for those dtypes and heads a
 * multiple of 64 at the avx512vnni level (kern_ops.c). */
#include <immintrin.h>

#include "kernels/cpu/kern_internal.h"

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
#define AV_LOADQ4(p, hi)                                                                           \
    _mm512_cvtepi32_ps(_mm512_sub_epi32(                                                           \
        (hi) ? _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))), 4)   \
             : _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))),       \
                                _mm512_set1_epi32(15)),                                            \
        _mm512_set1_epi32(8)))
#define AV_CV1 16
#define AV_CV3 8
#define ATT_VNNI 1
#define ATT_FN kern_attention_rows_avx512vnni
#include "kernels/cpu/kern_attn_x.h"
