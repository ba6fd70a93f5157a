/* kern_avx512_q8.h - Q8_0 tile plumbing shared by the two AVX-512 files
 * (kern_matmul_avx512.c: maddubs, kern_matmul_avx512vnni.c: vpdpbusd).
 * Include only from files compiled with the AVX-512 flags.
 *
 * A tile is R rows x T tokens = 16 outputs, output k = r*T + t. Eight zmm
 * hold the 16 pairs' per-block partial sums, two pairs per register:
 *   zmm j = [pair klo(j) | pair klo(j) + 4],  klo(j) = j < 4 ? j : j + 4,
 * so that reduce16() puts pair k in lane k (derivation at reduce16). Since
 * T divides 4, both halves of zmm j belong to the same token t = j % T, and
 * to rows kern_q8_row_lo(j / T, T) and that + 4/T: zmm j = c*T + t uses the
 * row pair ("combo") c = j / T, shared by the T tokens. */
#ifndef KERN_AVX512_Q8_H
#define KERN_AVX512_Q8_H

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

/* Low row of row pair c in a tile with T tokens. */
static inline int kern_q8_row_lo(int c, int T)
{
    int j = c * T;
    return (j < 4 ? j : j + 4) / T;
}

/* zmm = [block b of row lo | block b of row hi] (the 32 int8 weights). */
AI __m512i q8_load_pair(const uint8_t *const *wr, int b, int lo, int hi)
{
    const size_t off = (size_t)b * sizeof(kern_block_q8_0) + 2;
    __m256i l = _mm256_loadu_si256((const __m256i *)(wr[lo] + off));
    __m256i h = _mm256_loadu_si256((const __m256i *)(wr[hi] + off));
    return _mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1);
}

AI __m512i fold32_512(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
AI __m512i fold64_512(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* Decode prefetch (see kern_matmul_avx2.c): block b of the next tile's rows. */
AI void q8_prefetch_next(const uint8_t *const *pf, int b, const int R)
{
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        if (pf[r])
            _mm_prefetch((const char *)pf[r] + (size_t)b * sizeof(kern_block_q8_0), _MM_HINT_T0);
}

/* Lane k of the result = the full sum of pair k. The two folds work inside
 * each 128-bit quarter Q0..Q3: lo.Qm = [sum z0.Qm, sum z1.Qm, sum z2.Qm,
 * sum z3.Qm] (and hi likewise from z4..z7). A pair's 8 lanes are Q0+Q1 (low
 * half of its zmm) or Q2+Q3 (high half), so
 *   [lo.Q0, lo.Q2, hi.Q0, hi.Q2] + [lo.Q1, lo.Q3, hi.Q1, hi.Q3]
 * = [low halves of z0..z3 | high halves of z0..z3 | low of z4..z7 | high of z4..z7]
 * = pairs [0..3 | 4..7 | 8..11 | 12..15] by the register layout above. */
AI __m512i reduce16(const __m512i z[8])
{
    __m512i lo = fold64_512(fold32_512(z[0], z[1]), fold32_512(z[2], z[3]));
    __m512i hi = fold64_512(fold32_512(z[4], z[5]), fold32_512(z[6], z[7]));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

AI short q8_d(const uint8_t *row, int b)
{
    uint16_t h;
    memcpy(&h, row + (size_t)b * sizeof(kern_block_q8_0), 2);
    return (short)h;
}

/* acc + cvt(isum) * (d_w * d_x) for the 16 outputs, lane k = (k/T, k%T). */
AI __m512 q8_accumulate(const kern_mm_args *a, const uint8_t *const *wr, int b, int t0, const int R, const int T,
                        __m512i isum, __m512 acc)
{
    (void)R;
    __m256i h = _mm256_setr_epi16(q8_d(wr[0 / T], b), q8_d(wr[1 / T], b), q8_d(wr[2 / T], b), q8_d(wr[3 / T], b),
                                  q8_d(wr[4 / T], b), q8_d(wr[5 / T], b), q8_d(wr[6 / T], b), q8_d(wr[7 / T], b),
                                  q8_d(wr[8 / T], b), q8_d(wr[9 / T], b), q8_d(wr[10 / T], b),
                                  q8_d(wr[11 / T], b), q8_d(wr[12 / T], b), q8_d(wr[13 / T], b),
                                  q8_d(wr[14 / T], b), q8_d(wr[15 / T], b));
    __m512 dw = _mm512_cvtph_ps(h);
    const float *xd = a->xd + (size_t)b * a->n_tok + t0;
    __m512 dx;
    if (T == 4)
        dx = _mm512_broadcast_f32x4(_mm_loadu_ps(xd));
    else if (T == 2)
        dx = _mm512_broadcast_f32x2(_mm_castpd_ps(_mm_load_sd((const double *)xd)));
    else
        dx = _mm512_set1_ps(*xd);
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx)));
}

#endif
