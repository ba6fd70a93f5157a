/* kern_attn_avx512.c - the attention of kern_attn_x.h at 16 lanes: a K
 * row of head_dim 256 is 16 zmm and stays in registers (at 8 lanes it is 32
 * ymm and spills), and every dot, axpy and conversion is half as many
 * instructions. Compiled with the AVX-512 flags; the softmax stays AVX2. */
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
/* 16 bytes zero-extended to 32-bit lanes: the low nibbles, or the high ones. */
#define AV_LOADQ4(p, hi)                                                                           \
    _mm512_cvtepi32_ps(_mm512_sub_epi32(                                                           \
        (hi) ? _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))), 4)   \
             : _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))),       \
                                _mm512_set1_epi32(15)),                                            \
        _mm512_set1_epi32(8)))
#define AV_CV1 16
#define AV_CV3 8
#define ATT_FN kern_attention_rows_avx512
#include "kernels/cpu/kern_attn_x.h"
