/* kern_avx512_q8.h - the integer-weight (Q8_0, Q8_0M, Q4_0, Q4_1) tile
 * shared by the two AVX-512 files (kern_matmul_avx512.c: vpmaddwd + vpaddd,
 * kern_matmul_avx512vnni.c: vpmaddwd + vpdpwssd). Include only from files
 * compiled with the AVX-512 flags, after defining
 *   Q8_DOT2(wa, xa, wb, xb): int32 lanes of madd(wa, xa) + madd(wb, xb).
 *
 * A tile is R rows x T tokens = 16 outputs, output k = r*T + t. Eight zmm
 * hold the 16 pairs' per-block partial sums, two pairs per register:
 *   zmm j = [pair klo(j) | pair klo(j) + 4],  klo(j) = j < 4 ? j : j + 4,
 * so that reduce16() puts pair k in lane k (derivation at reduce16). Since
 * T divides 4, both halves of zmm j belong to the same token t = j % T, and
 * to rows kern_q8_row_lo(j / T, T) and that + 4/T: zmm j = c*T + t uses the
 * row pair ("combo") c = j / T, shared by the T tokens.
 *
 * A block's 32 int16 activations are two 256-bit halves; each half of a
 * token is broadcast to both halves of a zmm, and each combo's weights are
 * widened to [16 int16 of row lo | 16 int16 of row hi] per block half, so
 * one Q8_DOT2 gives both pairs' partial sums over the whole block (exact:
 * |lane| <= 4 * 128 * 32767 < 2^24). A Q4 block's 16 bytes hold both
 * halves: the two rows' bytes are zero-extended once to [16 of row lo | 16
 * of row hi] and split in the int16 lanes, `and 15` giving the first half
 * and `>> 4` the second (minus 8 for Q4_0), as in the AVX2 file.
 * K is the weight format (KERN_WK_*, kern_internal.h). */
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

/* The 16 bytes at offset off of rows lo and hi, as one 256-bit vector. */
AI __m256i q8_bytes_pair(const uint8_t *const *wr, size_t off, int lo, int hi)
{
    __m128i l = _mm_loadu_si128((const __m128i *)(wr[lo] + off));
    __m128i u = _mm_loadu_si128((const __m128i *)(wr[hi] + off));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(l), u, 1);
}

/* *wa = [values 0..15 of block b of row lo | the same of row hi] and *wb
 * the same of values 16..31, as int16. */
AI void q8_load_pairs(const uint8_t *const *wr, int b, int lo, int hi, const int K, __m512i *wa, __m512i *wb)
{
    const size_t off = (size_t)b * KERN_WK_BB(K) + KERN_WK_QO(K);
    if (KERN_WK_NIB(K)) {
        __m512i w = _mm512_cvtepu8_epi16(q8_bytes_pair(wr, off, lo, hi));
        *wa = _mm512_and_si512(w, _mm512_set1_epi16(0x0f));
        *wb = _mm512_srli_epi16(w, 4);
        if (K == KERN_WK_Q4_0) {
            *wa = _mm512_sub_epi16(*wa, _mm512_set1_epi16(8));
            *wb = _mm512_sub_epi16(*wb, _mm512_set1_epi16(8));
        }
        return;
    }
    *wa = _mm512_cvtepi8_epi16(q8_bytes_pair(wr, off, lo, hi));
    *wb = _mm512_cvtepi8_epi16(q8_bytes_pair(wr, off + 16, lo, hi));
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
AI void q8_prefetch_next(const uint8_t *const *pf, int b, const int R, const int K)
{
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        if (pf[r])
            _mm_prefetch((const char *)pf[r] + (size_t)b * KERN_WK_BB(K), _MM_HINT_T0);
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

/* The fp16 at byte offset off of block b of a row (d: 0, m: 2). */
AI short q8_h(const uint8_t *row, int b, size_t off, const int K)
{
    uint16_t h;
    memcpy(&h, row + (size_t)b * KERN_WK_BB(K) + off, 2);
    return (short)h;
}

/* Lane k (row k/T) of the fp16 at offset off of block b, as floats. */
AI __m512 q8_row_halfs(const uint8_t *const *wr, int b, size_t off, const int T, const int K)
{
    __m256i h = _mm256_setr_epi16(
        q8_h(wr[0 / T], b, off, K), q8_h(wr[1 / T], b, off, K), q8_h(wr[2 / T], b, off, K),
        q8_h(wr[3 / T], b, off, K), q8_h(wr[4 / T], b, off, K), q8_h(wr[5 / T], b, off, K),
        q8_h(wr[6 / T], b, off, K), q8_h(wr[7 / T], b, off, K), q8_h(wr[8 / T], b, off, K),
        q8_h(wr[9 / T], b, off, K), q8_h(wr[10 / T], b, off, K), q8_h(wr[11 / T], b, off, K),
        q8_h(wr[12 / T], b, off, K), q8_h(wr[13 / T], b, off, K), q8_h(wr[14 / T], b, off, K),
        q8_h(wr[15 / T], b, off, K));
    return _mm512_cvtph_ps(h);
}

/* The T tokens' values at v (d or s of one block), lane k = token k % T. */
AI __m512 q8_tok_bcast(const float *v, const int T)
{
    if (T == 4)
        return _mm512_broadcast_f32x4(_mm_loadu_ps(v));
    if (T == 2)
        return _mm512_broadcast_f32x2(_mm_castpd_ps(_mm_load_sd((const double *)v)));
    return _mm512_set1_ps(*v);
}

/* The 16 outputs of rows wr[0..R) and tokens t0..t0+T (see the top). */
AI void q8_tile(const kern_mm_args *a, const uint8_t *const *wr, const uint8_t *const *pf, int t0, const int R,
                const int T, const int K, float *out)
{
    const int nb = a->n_in / 32, NC = 8 / T;
    const int16_t *xr[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xr[t] = a->xq + (size_t)(t0 + t) * a->n_in;
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (T == 1)
            q8_prefetch_next(pf, b, R, K);
        __m512i xa[4], xb[4], z[8];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            xa[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xr[t] + b * 32)));
            xb[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xr[t] + b * 32 + 16)));
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const int lo = kern_q8_row_lo(c, T), hi = lo + 4 / T;
            __m512i wa, wb;
            q8_load_pairs(wr, b, lo, hi, K, &wa, &wb);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                z[c * T + t] = Q8_DOT2(wa, xa[t], wb, xb[t]);
        }
        const size_t xo = (size_t)b * a->n_tok + t0;
        __m512 scale = _mm512_mul_ps(q8_row_halfs(wr, b, 0, T, K), q8_tok_bcast(a->xd + xo, T));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(z)), scale, acc);
        if (KERN_WK_M(K))
            acc = _mm512_fmadd_ps(q8_row_halfs(wr, b, 2, T, K), q8_tok_bcast(a->xs + xo, T), acc);
    }
    _mm512_storeu_ps(out, acc);
}

#endif
