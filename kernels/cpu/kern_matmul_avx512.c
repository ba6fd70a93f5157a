/* kern_matmul_avx512.c - AVX-512 (F/BW/VL/DQ) matmul row kernels.
 *
 * Structurally the AVX2 file with 16 outputs per tile instead of 8:
 * tiles are 4x4 (prompt), 8x2 (token remainder of 2-3) and 16x1 (decode).
 *
 * Integer weights (Q8_0, Q8_0M, Q4_0, Q4_1): the tile lives in
 * kern_avx512_q8.h (shared with the VNNI file); here each pair of block halves is multiplied with vpmaddwd and the
 * two int32 results added.
 *
 * Float types: one 16-lane accumulator per output, one FMA per 16 inputs in
 * order, the tail as one more FMA on zero-masked loads, then hsum16(). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#define Q8_DOT2(wa, xa, wb, xb) _mm512_add_epi32(_mm512_madd_epi16(wa, xa), _mm512_madd_epi16(wb, xb))
#include "kernels/cpu/kern_avx512_q8.h"
#define Q8_PREFIX q8m
#include "kernels/cpu/kern_avx512_spans.h"

/* ---- F32 / F16 / BF16 ------------------------------------------------------ */

AI __m512 load16(kern_type wt, const uint8_t *row, int i)
{
    if (wt == KERN_TYPE_F32)
        return _mm512_loadu_ps((const float *)row + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)(row + (size_t)i * 2));
    if (wt == KERN_TYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The first m of 16 values, the rest zero (masked loads do not fault). */
AI __m512 load16_tail(kern_type wt, const uint8_t *row, int i, __mmask16 m)
{
    if (wt == KERN_TYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + (size_t)i * 2);
    if (wt == KERN_TYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI float hsum16(__m512 v)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI void f_tile(const kern_mm_args *a, kern_type wt, const uint8_t *const *wr, int t0, const int R, const int T,
               float *out)
{
    const int n = a->n_in, n16 = n & ~15;
    const float *xr[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xr[t] = a->x + (size_t)(t0 + t) * n;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += 16) {
        __m512 w[16];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
            w[r] = load16(wt, wr[r], i);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_loadu_ps(xr[t] + i);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                acc[r * T + t] = _mm512_fmadd_ps(w[r], xv, acc[r * T + t]);
        }
    }
    if (n16 < n) {
        __mmask16 m = (__mmask16)((1u << (n - n16)) - 1);
        __m512 w[16];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
            w[r] = load16_tail(wt, wr[r], n16, m);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, xr[t] + n16);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                acc[r * T + t] = _mm512_fmadd_ps(w[r], xv, acc[r * T + t]);
        }
    }
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        out[k] = hsum16(acc[k]);
}

#define DEFINE_F_SPAN(NAME, WT, R, T)                                                              \
    static void f_span_##NAME##_##R##x##T(const kern_mm_args *a, int r0, int r1, int t0)           \
    {                                                                                              \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;                 \
            float out[16];                                                                         \
            f_tile(a, WT, wr, t0, R, T, out);                                                      \
            for (int k = 0; k < 16; k++)                                                           \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
#define DEFINE_F_ROWS(NAME, WT)                                                                    \
    DEFINE_F_SPAN(NAME, WT, 4, 4)                                                                  \
    DEFINE_F_SPAN(NAME, WT, 8, 2)                                                                  \
    DEFINE_F_SPAN(NAME, WT, 16, 1)                                                                 \
    static void f_rows_##NAME(const kern_mm_args *a, int r0, int r1)                               \
    {                                                                                              \
        int t0 = 0;                                                                                \
        for (; t0 + 4 <= a->n_tok; t0 += 4)                                                        \
            f_span_##NAME##_4x4(a, r0, r1, t0);                                                    \
        for (; t0 + 2 <= a->n_tok; t0 += 2)                                                        \
            f_span_##NAME##_8x2(a, r0, r1, t0);                                                    \
        for (; t0 < a->n_tok; t0++)                                                                \
            f_span_##NAME##_16x1(a, r0, r1, t0);                                                   \
    }
DEFINE_F_ROWS(f32, KERN_TYPE_F32)
DEFINE_F_ROWS(f16, KERN_TYPE_F16)
DEFINE_F_ROWS(bf16, KERN_TYPE_BF16)

void kern_mm_rows_avx512(const kern_mm_args *a, int r0, int r1)
{
    switch (a->wt) {
    case KERN_TYPE_Q8_0: q8m_rows_q8_0(a, r0, r1); break;
    case KERN_TYPE_Q8_0M: q8m_rows_q8_0m(a, r0, r1); break;
    case KERN_TYPE_Q4_0: q8m_rows_q4_0(a, r0, r1); break;
    case KERN_TYPE_Q4_1: q8m_rows_q4_1(a, r0, r1); break;
    case KERN_TYPE_Q8_0X8:
    case KERN_TYPE_Q8_0MX8: kern_mm_rows_avx2(a, r0, r1); break; /* the layout of the AVX2 tiles */
    case KERN_TYPE_F32: f_rows_f32(a, r0, r1); break;
    case KERN_TYPE_F16: f_rows_f16(a, r0, r1); break;
    case KERN_TYPE_BF16: f_rows_bf16(a, r0, r1); break;
    default: kern_mm_rows_scalar(a, r0, r1); break;
    }
}
