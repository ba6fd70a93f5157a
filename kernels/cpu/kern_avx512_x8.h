/* kern_avx512_x8.h - the X8 integer-weight tiles (Q8_0X8, Q8_0MX8, Q4_0X8,
 * Q4_1X8; layout in kern_types.h) on 512-bit vectors, shared by the two
 * AVX-512 files. Include only from a file compiled with the AVX-512 flags,
 * after defining
 *   X8Z_DPW(s, w, x): s + the int32 lanes of madd(w, x)
 * (kern_matmul_avx512.c: vpmaddwd + vpaddd; kern_matmul_avx512vnni.c:
 * vpdpwssd) and X8Z_PREFIX (the name prefix of the functions defined).
 * Defines static void X8Z_PREFIX##_rows(const kern_mm_args *a, int r0, int r1).
 *
 * A zmm holds two groups of 8 rows: lanes 0-7 the rows of group A, lanes
 * 8-15 those of group B. The 16 bytes at the same offset of the two groups'
 * blocks, put side by side and widened to int16, are the value pair j of 16
 * rows (int8 forms: one pair per 16 bytes, vpmovsxbw; 4-bit forms: pairs 2c
 * and 2c + 1 per 16 bytes, vpmovzxbw then `and 15` / `>> 4`), multiplied by
 * the broadcast activation pair j of a token: 16 rows' partial sums with no
 * horizontal reduction, as in the AVX2 X8 tiles (kern_matmul_avx2.c), whose
 * arithmetic this repeats lane by lane: the exact block sum isum (Q4_0:
 * sum of nibble * x minus 8 sum x, the same integer), then
 *     acc = fma(cvt(isum), d_w * d_x, acc);  acc = fma(m_w, s_x, acc) (M)
 * so every result is the reference's bits.
 *
 * Decode (one token) pairs a group from each half of the task's rows: two
 * sequential streams, each prefetched X8Z_STREAM_PF bytes ahead (the AVX2
 * decode's pattern). Batches pair consecutive groups, X8Z_NZ zmm (2 x NZ
 * groups) x X8Z_TT tokens per tile, over chunks of groups that stay in L2
 * while every token tile passes over them; the first token tile of a chunk
 * prefetches the next tile's groups. */
#ifndef X8Z_PREFIX
#error "define X8Z_PREFIX and X8Z_DPW before including kern_avx512_x8.h"
#endif

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif

#define X8Z_CAT_(a, b) a##b
#define X8Z_CAT(a, b) X8Z_CAT_(a, b)
#define X8Z_FN(name) X8Z_CAT(X8Z_PREFIX, name)

#ifndef X8Z_HELPERS
#define X8Z_HELPERS
/* Decode prefetch distance in bytes per stream (-D to tune). */
#ifndef X8Z_STREAM_PF
#define X8Z_STREAM_PF 1024
#endif
#ifndef X8Z_HINT
#define X8Z_HINT _MM_HINT_T0
#endif
/* Groups per chunk of a batch: X8Z_CHUNK_BYTES of L2. */
#ifndef X8Z_CHUNK_BYTES
#define X8Z_CHUNK_BYTES (192 * 1024)
#endif
/* Up to this many tokens a step streams the rows once (_rows1). */
#ifndef X8Z_STREAM_MAX_TOK
#define X8Z_STREAM_MAX_TOK KERN_X8Z_STREAM_MAX_TOK
#endif
#ifndef X8Z_TT
#define X8Z_TT 6 /* tokens per batch tile (<= 8; remainders run in tiles of 4, 2 and 1) */
#endif
#define X8Z_BB(K) (8 * KERN_WK_BB(K))
#define X8Z_DOFF(K) KERN_WK_X8_DOFF(K)

AI uint32_t x8z_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* [16 bytes at pa | 16 bytes at pb]. */
AI __m256i x8z_pair(const uint8_t *pa, const uint8_t *pb) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)pa)),
                                   _mm_loadu_si128((const __m128i *)pb), 1);
}

/* The one-zmm state of a tile: groups A and B (their block-0 bytes) and the
 * first row of each. */
typedef struct {
    const uint8_t *g[2];
    int o[2];
} x8z_zp;

/* Stores lanes 0-7 at row o[0] and 8-15 at row o[1] of output row y, only
 * the rows below r1. */
AI void x8z_store(float *y, __m512 v, const x8z_zp *zp, int r1) {
    if (zp->o[1] == zp->o[0] + 8 && zp->o[0] + 16 <= r1) {
        _mm512_storeu_ps(y + zp->o[0], v);
        return;
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int o = zp->o[h];
        if (h == 1 && o == zp->o[0]) /* a lone group paired with itself */
            break;
        const int n = r1 - o < 8 ? r1 - o : 8;
        if (n <= 0)
            continue;
        const __m256 part = h ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v);
        _mm256_mask_storeu_ps(y + o, (__mmask8)((1u << n) - 1), part);
    }
}
#endif /* X8Z_HELPERS */

/* Value pairs 2c (w0) and 2c + 1 (w1) of a 4-bit-form block: lanes 0-15 the
 * 8 rows of the block at wa, 16-31 those at wb, as int16 codes (Q6_0S: code
 * - 32; the others before their bias). */
AI void X8Z_FN(_decode)(const uint8_t *wa, const uint8_t *wb, int c, const int K, __m512i *w0,
                        __m512i *w1) {
    if (KERN_WK_LUT(K)) { /* IQ4_NL: the table's values of the nibbles */
        const __m256i tbl =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kern_iq4_values));
        const __m256i nb4 = x8z_pair(wa + 16 * c, wb + 16 * c);
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        *w0 = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(tbl, _mm256_and_si256(nb4, m4)));
        *w1 = _mm512_cvtepi8_epi16(
            _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(nb4, 4), m4)));
        return;
    }
    const __m512i raw = _mm512_cvtepu8_epi16(x8z_pair(wa + 16 * c, wb + 16 * c));
    *w0 = _mm512_and_si512(raw, _mm512_set1_epi16(0x0f));
    *w1 = _mm512_srli_epi16(raw, 4);
    if (KERN_WK_H5(K)) {
        /* Fifth bits (bit 4 is clear: add is or): lanes 0-15 from group A's
         * masks, 16-31 from group B's, as write masks. */
        const uint32_t ha = x8z_u32(wa + 128 + 4 * c);
        const uint32_t hb = x8z_u32(wb + 128 + 4 * c);
        const __m512i v16 = _mm512_set1_epi16(16);
        *w0 = _mm512_mask_add_epi16(*w0, (__mmask32)((ha & 0xffff) | hb << 16), *w0, v16);
        *w1 = _mm512_mask_add_epi16(*w1, (__mmask32)((ha >> 16) | (hb & 0xffff0000u)), *w1, v16);
    }
    if (KERN_WK_H6(K)) { /* Q6_0S: bit 5 from the second plane, then - 32 */
        const uint32_t ha = x8z_u32(wa + 160 + 4 * c);
        const uint32_t hb = x8z_u32(wb + 160 + 4 * c);
        const __m512i v32 = _mm512_set1_epi16(32);
        *w0 = _mm512_sub_epi16(
            _mm512_mask_add_epi16(*w0, (__mmask32)((ha & 0xffff) | hb << 16), *w0, v32), v32);
        *w1 = _mm512_sub_epi16(
            _mm512_mask_add_epi16(*w1, (__mmask32)((ha >> 16) | (hb & 0xffff0000u)), *w1, v32),
            v32);
    }
}

/* NZ zmm (zp[0..NZ)) x T tokens from t0. pf 1: prefetch pfoff bytes on from
 * each group's block (the next tile's groups); pf 2: X8Z_STREAM_PF bytes on
 * in each group's stream (decode). */
AI void X8Z_FN(_tile)(const kern_mm_args *a, const x8z_zp *zp, int r1, int t0, const int NZ,
                      const int T, const int K, const int pf, size_t pfoff) {
    const int nb = a->n_in / 32, M = KERN_WK_M(K);
    const size_t bb = X8Z_BB(K), doff = X8Z_DOFF(K);
    const int16_t *x[8];
    __m512 acc[2][8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        x[t] = a->xq + (size_t)(t0 + t) * a->n_in;
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++)
            acc[z][t] = _mm512_setzero_ps();
    }
    /* NA independent partial sums per output when the tile is small: the
     * chain of vpdpwssd into one accumulator (latency 4 on Zen 4) would
     * otherwise bound the decode step; integer sums, so any order is exact. */
    const int NA = T == 1 ? 4 : T <= 3 ? 2 : 1;
    for (int b = 0; b < nb; b++) {
        const uint8_t *wa[2], *wb[2];
        __m512i s[2][8];
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++) {
            wa[z] = zp[z].g[0] + (size_t)b * bb;
            wb[z] = zp[z].g[1] + (size_t)b * bb;
            if (pf == 1) {
                for (size_t l = 0; l < bb; l += 64) {
                    _mm_prefetch((const char *)wa[z] + pfoff + l, _MM_HINT_T0);
                    _mm_prefetch((const char *)wb[z] + pfoff + l, _MM_HINT_T0);
                }
            } else if (pf == 2) { /* the lines that start in this block, X8Z_STREAM_PF on */
                for (size_t l = ((size_t)b * bb + 63) & ~(size_t)63; l < (size_t)(b + 1) * bb;
                     l += 64) {
                    _mm_prefetch((const char *)zp[z].g[0] + l + X8Z_STREAM_PF, X8Z_HINT);
                    _mm_prefetch((const char *)zp[z].g[1] + l + X8Z_STREAM_PF, X8Z_HINT);
                }
            }
#pragma GCC unroll 8
            for (int k = 0; k < T * NA; k++)
                s[z][k] = _mm512_setzero_si512();
        }
        __m512i sa[2][8];  /* Q6_0S: the sums of values 0..15 (chunks 0-3) */
        if (KERN_WK_S2(K)) /* set at chunk 4; zeroed so the compiler sees it set */
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
#pragma GCC unroll 2
                for (int z = 0; z < NZ; z++)
                    sa[z][t] = _mm512_setzero_si512();
        if (KERN_WK_NIB(K)) {
            /* Two chunks per iteration: enough for NA <= 4 partial sums to
             * take fixed registers, and a tenth of the code of a full unroll. */
#pragma GCC unroll 1
            for (int c0 = 0; c0 < 8; c0 += 2) {
                if (KERN_WK_S2(K) && c0 == 4)
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++)
#pragma GCC unroll 2
                        for (int z = 0; z < NZ; z++) {
                            __m512i v = s[z][t * NA];
                            for (int k = 1; k < NA; k++)
                                v = _mm512_add_epi32(v, s[z][t * NA + k]);
                            sa[z][t] = v;
                            for (int k = 0; k < NA; k++)
                                s[z][t * NA + k] = _mm512_setzero_si512();
                        }
#pragma GCC unroll 2
                for (int cc = 0; cc < 2; cc++) {
                    const int c = c0 + cc;
                    __m512i w0[2], w1[2];
#pragma GCC unroll 2
                    for (int z = 0; z < NZ; z++)
                        X8Z_FN(_decode)(wa[z], wb[z], c, K, &w0[z], &w1[z]);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const int16_t *xp = x[t] + b * 32 + 4 * c;
                        const __m512i x0 = _mm512_set1_epi32((int)x8z_u32(xp));
                        const __m512i x1 = _mm512_set1_epi32((int)x8z_u32(xp + 2));
                        const int k0 = t * NA + (2 * cc) % NA, k1 = t * NA + (2 * cc + 1) % NA;
#pragma GCC unroll 2
                        for (int z = 0; z < NZ; z++) {
                            s[z][k0] = X8Z_DPW(s[z][k0], w0[z], x0);
                            s[z][k1] = X8Z_DPW(s[z][k1], w1[z], x1);
                        }
                    }
                }
            }
        } else {
#pragma GCC unroll 1
            for (int j0 = 0; j0 < 16; j0 += 4) {
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; jj++) {
                    const int j = j0 + jj;
                    __m512i w[2];
#pragma GCC unroll 2
                    for (int z = 0; z < NZ; z++)
                        w[z] = _mm512_cvtepi8_epi16(x8z_pair(wa[z] + 16 * j, wb[z] + 16 * j));
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const __m512i xj = _mm512_set1_epi32((int)x8z_u32(x[t] + b * 32 + 2 * j));
                        const int k = t * NA + jj % NA;
#pragma GCC unroll 2
                        for (int z = 0; z < NZ; z++)
                            s[z][k] = X8Z_DPW(s[z][k], w[z], xj);
                    }
                }
            }
        }
        /* The partial sums together (exact), then Q4_0's offset:
         * sum (q - 8) x = sum q x - 8 sum x, exactly. */
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
#pragma GCC unroll 2
            for (int z = 0; z < NZ; z++) {
                if (NA == 4)
                    s[z][t * NA] =
                        _mm512_add_epi32(_mm512_add_epi32(s[z][t * NA], s[z][t * NA + 1]),
                                         _mm512_add_epi32(s[z][t * NA + 2], s[z][t * NA + 3]));
                else if (NA == 2)
                    s[z][t * NA] = _mm512_add_epi32(s[z][t * NA], s[z][t * NA + 1]);
            }
            if (KERN_WK_BIAS(K)) { /* Q4_0: 8, Q5_0: 16 */
                const __m512i c8 =
                    _mm512_set1_epi32(KERN_WK_BIAS(K) * a->xi[(size_t)b * a->n_tok + t0 + t]);
#pragma GCC unroll 2
                for (int z = 0; z < NZ; z++)
                    s[z][t * NA] = _mm512_sub_epi32(s[z][t * NA], c8);
            }
        }
        const size_t xo = (size_t)b * a->n_tok + t0;
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++) {
            const __m512 dw = _mm512_cvtph_ps(x8z_pair(wa[z] + doff, wb[z] + doff));
            const __m512 mw = M || KERN_WK_S2(K)
                                  ? _mm512_cvtph_ps(x8z_pair(wa[z] + doff + 16, wb[z] + doff + 16))
                                  : dw;
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                if (KERN_WK_S2(K)) { /* da for values 0..15, then db (mw) for 16..31 */
                    const __m512 dx = _mm512_set1_ps(a->xd[xo + t]);
                    acc[z][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa[z][t]), _mm512_mul_ps(dw, dx),
                                                acc[z][t]);
                    acc[z][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[z][t * NA]),
                                                _mm512_mul_ps(mw, dx), acc[z][t]);
                    continue;
                }
                acc[z][t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[z][t * NA]),
                                    _mm512_mul_ps(dw, _mm512_set1_ps(a->xd[xo + t])), acc[z][t]);
                if (M)
                    acc[z][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->xs[xo + t]), acc[z][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *y = a->y + (size_t)(t0 + t) * a->n_out;
#pragma GCC unroll 2
        for (int z = 0; z < NZ; z++)
            x8z_store(y, acc[z][t], &zp[z], r1);
    }
}

/* Decode of rows [r0, r1) (r0 a multiple of 8) for T <= 6 tokens: group g
 * of the first half of the range beside group g of the second half, so the
 * thread reads two sequential streams; an odd last group is paired with
 * itself. A step of a few decoding sequences (or one with its speculative
 * proposals) reads each weight once here, as one does (the wider tiles below
 * are built for longer batches). */
AI void X8Z_FN(_rows1)(const kern_mm_args *a, int r0, int r1, const int T, const int K) {
    const size_t gbytes = (size_t)(a->n_in / 32) * X8Z_BB(K);
    const int n_g = (r1 - r0 + 7) / 8, half = n_g / 2;
    const uint8_t *grp = a->W + (size_t)(r0 / 8) * gbytes;
    for (int g = 0; g < half; g++) {
        const x8z_zp zp = {{grp + (size_t)g * gbytes, grp + (size_t)(g + half) * gbytes},
                           {r0 + 8 * g, r0 + 8 * (g + half)}};
        X8Z_FN(_tile)(a, &zp, r1, 0, 1, T, K, 2, 0);
    }
    if (n_g & 1) {
        const uint8_t *gl = grp + (size_t)(n_g - 1) * gbytes;
        const x8z_zp zp = {{gl, gl}, {r0 + 8 * (n_g - 1), r0 + 8 * (n_g - 1)}};
        X8Z_FN(_tile)(a, &zp, r1, 0, 1, T, K, 2, 0);
    }
}

/* Tokens t0..t0+T against ng consecutive groups from row o, four groups
 * (two zmm) per tile; past the last group a tile reads that group again and
 * stores nothing for it (one tile shape: half the code). pf: prefetch the
 * next tile's groups (the first token tile of a chunk). */
AI void X8Z_FN(_tiles)(const kern_mm_args *a, int ng, int o, int r1, int t0, const int T,
                       const int K, int pf) {
    const size_t gbytes = (size_t)(a->n_in / 32) * X8Z_BB(K);
    const uint8_t *grp = a->W + (size_t)(o / 8) * gbytes;
    for (int g = 0; g < ng; g += 4) {
        x8z_zp zp[2];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int gk = g + k < ng ? g + k : ng - 1;
            zp[k / 2].g[k % 2] = grp + (size_t)gk * gbytes;
            zp[k / 2].o[k % 2] = g + k < ng ? o + 8 * (g + k) : r1; /* r1: not stored */
        }
        if (pf && g + 8 <= ng)
            X8Z_FN(_tile)(a, zp, r1, t0, 2, T, K, 1, 4 * gbytes);
        else
            X8Z_FN(_tile)(a, zp, r1, t0, 2, T, K, 0, 0);
    }
}

/* ---- long batches: decode once per chunk ("wide" tiles) ---------------------
 * From KERN_X8_WIDE_MIN_TOK tokens on (with a scratch buffer, a->wide), a
 * chunk of a task's groups is first decoded into the zmm operands the tiles
 * above build in their inner loop: per pair of groups (A, B) and block, 16
 * zmm of int16 (zmm j: value pair j of A's 8 rows in lanes 0-15, of B's in
 * 16-31; the code bias already subtracted, sum (q - bias) x being the same
 * integer as sum q x - bias sum x), then d of the 16 rows as f32 and m (or
 * Q6_0S's db) as f32: KERN_X8_WIDE_PB bytes. Every token tile then loads
 * whole operands: the same integer block sums and the same float operations
 * in the same order as the tiles above (Q6_0S's first fma, of the sum over
 * values 0..15, moves to the middle of the block, still before the second),
 * so the same bits, with the nibble, bit-plane, table and widening work done
 * once per chunk instead of once per 6 tokens. */
AI void X8Z_FN(_wunpack)(const uint8_t *ga, const uint8_t *gb, int nb, const int K, uint8_t *dst) {
    const size_t bb = X8Z_BB(K), doff = X8Z_DOFF(K);
    for (int b = 0; b < nb; b++, dst += KERN_X8_WIDE_PB) {
        const uint8_t *wa = ga + (size_t)b * bb, *wb = gb + (size_t)b * bb;
        __m512i *o = (__m512i *)dst;
        __m256i *o8 = (__m256i *)dst;
        if (KERN_WK_NIB(K)) {
            const __m512i bias = _mm512_set1_epi16(KERN_WK_BIAS(K));
#pragma GCC unroll 1
            for (int c = 0; c < 8; c++) {
                __m512i w0, w1;
                X8Z_FN(_decode)(wa, wb, c, K, &w0, &w1);
                if (KERN_WK_BIAS(K)) {
                    w0 = _mm512_sub_epi16(w0, bias);
                    w1 = _mm512_sub_epi16(w1, bias);
                }
                _mm256_store_si256(o8 + 2 * c, _mm512_cvtepi16_epi8(w0));
                _mm256_store_si256(o8 + 2 * c + 1, _mm512_cvtepi16_epi8(w1));
            }
        } else {
#pragma GCC unroll 4
            for (int j = 0; j < 16; j++)
                _mm256_store_si256(o8 + j, x8z_pair(wa + 16 * j, wb + 16 * j));
        }
        _mm512_store_ps((float *)(o + 8), _mm512_cvtph_ps(x8z_pair(wa + doff, wb + doff)));
        if (KERN_WK_M(K) || KERN_WK_S2(K))
            _mm512_store_ps((float *)(o + 9),
                            _mm512_cvtph_ps(x8z_pair(wa + doff + 16, wb + doff + 16)));
    }
}

/* Two decoded group pairs (u: the first one's block 0; the second follows
 * nb blocks on) x T tokens from t0. */
AI void X8Z_FN(_wtile)(const kern_mm_args *a, const uint8_t *u, const x8z_zp *zp, int r1, int t0,
                       const int T, const int K) {
    const int nb = a->n_in / 32, M = KERN_WK_M(K);
    const int16_t *x[8];
    __m512 acc[2][8];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        x[t] = a->xq + (size_t)(t0 + t) * a->n_in;
        acc[0][t] = _mm512_setzero_ps();
        acc[1][t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const __m512i *wz[2] = {(const __m512i *)(u + (size_t)b * KERN_X8_WIDE_PB),
                                (const __m512i *)(u + (size_t)(nb + b) * KERN_X8_WIDE_PB)};
        const size_t xo = (size_t)b * a->n_tok + t0;
        __m512i s[2][8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            s[0][t] = _mm512_setzero_si512();
            s[1][t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 1
        for (int j0 = 0; j0 < 16; j0 += 4) {
            if (KERN_WK_S2(K) && j0 == 8) /* values 0..15 done: their term, scaled by da */
#pragma GCC unroll 2
                for (int z = 0; z < 2; z++) {
                    const __m512 dw = _mm512_load_ps((const float *)(wz[z] + 8));
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const __m512 dx = _mm512_set1_ps(a->xd[xo + t]);
                        acc[z][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[z][t]),
                                                    _mm512_mul_ps(dw, dx), acc[z][t]);
                        s[z][t] = _mm512_setzero_si512();
                    }
                }
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++) {
                const int j = j0 + jj;
                const __m512i w0 =
                    _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)wz[0] + j));
                const __m512i w1 =
                    _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)wz[1] + j));
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m512i xj = _mm512_set1_epi32((int)x8z_u32(x[t] + b * 32 + 2 * j));
                    s[0][t] = X8Z_DPW(s[0][t], w0, xj);
                    s[1][t] = X8Z_DPW(s[1][t], w1, xj);
                }
            }
        }
#pragma GCC unroll 2
        for (int z = 0; z < 2; z++) {
            const __m512 dw = _mm512_load_ps((const float *)(wz[z] + 8));
            const __m512 mw = M || KERN_WK_S2(K) ? _mm512_load_ps((const float *)(wz[z] + 9)) : dw;
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const __m512 dx = _mm512_set1_ps(a->xd[xo + t]);
                if (KERN_WK_S2(K)) { /* values 16..31, scaled by db */
                    acc[z][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[z][t]), _mm512_mul_ps(mw, dx),
                                                acc[z][t]);
                    continue;
                }
                acc[z][t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[z][t]), _mm512_mul_ps(dw, dx), acc[z][t]);
                if (M)
                    acc[z][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->xs[xo + t]), acc[z][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float *y = a->y + (size_t)(t0 + t) * a->n_out;
        x8z_store(y, acc[0][t], &zp[0], r1);
        x8z_store(y, acc[1][t], &zp[1], r1);
    }
}

/* Tokens t0..t0+T over a decoded chunk of ng groups from row o (ng a
 * multiple of 4 here: padded as in _tiles). */
AI void X8Z_FN(_wtiles)(const kern_mm_args *a, const uint8_t *u, int ng, int o, int r1, int t0,
                        const int T, const int K) {
    const size_t pbytes = (size_t)(a->n_in / 32) * KERN_X8_WIDE_PB;
    for (int g = 0; g < ng; g += 4) {
        x8z_zp zp[2];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            zp[k / 2].o[k % 2] = o + 8 * (g + k) < r1 ? o + 8 * (g + k) : r1; /* r1: not stored */
        zp[0].g[0] = zp[0].g[1] = zp[1].g[0] = zp[1].g[1] = NULL;
        X8Z_FN(_wtile)(a, u + (size_t)(g / 2) * pbytes, zp, r1, t0, T, K);
    }
}

/* Rows [r0, r1) through the wide tiles, a->wide_bytes of decoded groups at a
 * time (a multiple of 4 groups; the caller checked that 4 fit). */
AI void X8Z_FN(_rows_wide)(const kern_mm_args *a, int r0, int r1, const int K) {
    const int nb = a->n_in / 32;
    const size_t gbytes = (size_t)nb * X8Z_BB(K), pbytes = (size_t)nb * KERN_X8_WIDE_PB;
    const int ng = (int)(a->wide_bytes / (pbytes / 2)) & ~3;
    const int n_g_all = (r1 - r0 + 7) / 8;
    const uint8_t *grp = a->W + (size_t)(r0 / 8) * gbytes;
    const int TT = X8Z_TT, nt = a->n_tok - a->n_tok % TT;
    for (int g0 = 0; g0 < n_g_all; g0 += ng) {
        const int cg = n_g_all - g0 < ng ? n_g_all - g0 : ng;
        const int cg4 = (cg + 3) & ~3;
        for (int g = 0; g < cg4; g += 2) { /* past the last group: that group again */
            const int ga = g < cg ? g : cg - 1, gb = g + 1 < cg ? g + 1 : cg - 1;
            X8Z_FN(_wunpack)
            (grp + (size_t)(g0 + ga) * gbytes, grp + (size_t)(g0 + gb) * gbytes, nb, K,
             a->wide + (size_t)(g / 2) * pbytes);
        }
        const int o = r0 + 8 * g0;
        for (int t0 = 0; t0 < nt; t0 += TT)
            X8Z_FN(_wtiles)(a, a->wide, cg4, o, r1, t0, TT, K);
        int t0 = nt;
        if (TT > 4 && t0 + 4 <= a->n_tok) {
            X8Z_FN(_wtiles)(a, a->wide, cg4, o, r1, t0, 4, K);
            t0 += 4;
        }
        if (TT > 2 && t0 + 2 <= a->n_tok) {
            X8Z_FN(_wtiles)(a, a->wide, cg4, o, r1, t0, 2, K);
            t0 += 2;
        }
        if (t0 < a->n_tok)
            X8Z_FN(_wtiles)(a, a->wide, cg4, o, r1, t0, 1, K);
    }
}

/* Rows [r0, r1) (r0 a multiple of 8) of an X8 matrix of base format K. */
AI void X8Z_FN(_rows_k)(const kern_mm_args *a, int r0, int r1, const int K) {
    if (a->n_tok <= X8Z_STREAM_MAX_TOK) {
        switch (a->n_tok) {
        case 1: X8Z_FN(_rows1)(a, r0, r1, 1, K); break;
        case 2: X8Z_FN(_rows1)(a, r0, r1, 2, K); break;
        case 3: X8Z_FN(_rows1)(a, r0, r1, 3, K); break;
#if X8Z_STREAM_MAX_TOK > 3
        case 4: X8Z_FN(_rows1)(a, r0, r1, 4, K); break;
        case 5: X8Z_FN(_rows1)(a, r0, r1, 5, K); break;
        default: X8Z_FN(_rows1)(a, r0, r1, 6, K); break;
#endif
        }
        return;
    }
    /* Q8_0 and Q8_0M only widen their bytes: their plain tiles are as fast. */
    if (KERN_WK_NIB(K) && a->wide && a->n_tok >= KERN_X8_WIDE_MIN_TOK &&
        a->wide_bytes >= 4 * (size_t)(a->n_in / 32) * (KERN_X8_WIDE_PB / 2)) {
        X8Z_FN(_rows_wide)(a, r0, r1, K);
        return;
    }
    const size_t gbytes = (size_t)(a->n_in / 32) * X8Z_BB(K);
    int ng = (int)(X8Z_CHUNK_BYTES / gbytes) & ~3;
    if (ng < 4)
        ng = 4;
    const int TT = X8Z_TT, nt = a->n_tok - a->n_tok % TT;
    for (int o = r0; o < r1; o += 8 * ng) {
        int cg = (r1 - o + 7) / 8;
        if (cg > ng)
            cg = ng;
        for (int t0 = 0; t0 < nt; t0 += TT)
            X8Z_FN(_tiles)(a, cg, o, r1, t0, TT, K, t0 == 0);
        /* The remainder in tiles of 4, 2 and 1 tokens: the chunk is in L2
         * by then, so the extra passes are cheap, and three tile widths
         * instead of TT - 1 keep the code small. */
        int t0 = nt;
        if (TT > 4 && t0 + 4 <= a->n_tok) {
            X8Z_FN(_tiles)(a, cg, o, r1, t0, 4, K, t0 == 0);
            t0 += 4;
        }
        if (TT > 2 && t0 + 2 <= a->n_tok) {
            X8Z_FN(_tiles)(a, cg, o, r1, t0, 2, K, t0 == 0);
            t0 += 2;
        }
        if (t0 < a->n_tok)
            X8Z_FN(_tiles)(a, cg, o, r1, t0, 1, K, t0 == 0);
    }
}

static void X8Z_FN(_rows)(const kern_mm_args *a, int r0, int r1) {
    switch (a->wt) {
    case KERN_TYPE_Q8_0X8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q8_0); break;
    case KERN_TYPE_Q8_0MX8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q8_0M); break;
    case KERN_TYPE_Q4_0X8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q4_0); break;
    case KERN_TYPE_Q4_1X8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q4_1); break;
    case KERN_TYPE_Q5_0X8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q5_0); break;
    case KERN_TYPE_Q5_1X8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q5_1); break;
    case KERN_TYPE_IQ4_NLX8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_IQ4NL); break;
    case KERN_TYPE_Q6_0SX8: X8Z_FN(_rows_k)(a, r0, r1, KERN_WK_Q6S); break;
    default: kern_mm_rows_scalar(a, r0, r1); break;
    }
}
