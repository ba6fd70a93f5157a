/* kern_matmul_avx512.c - AVX-512 (F/BW/VL/DQ) matmul row kernels: the float
 * weight types (F32, F16, BF16) and the X8 integer forms (kern_avx512_x8.h
 * with vpmaddwd + vpaddd; the VNNI file fuses the two). Row-major integer
 * weights run the AVX2 kernels (the same bits; they measured faster than
 * this level's own row-major tiles, which were removed: docs/KERNELS.md,
 * "Kernel choice").
 *
 * Float types repeat the AVX2 arithmetic exactly (kern_matmul_avx2.c): each
 * output owns one 8-lane f32 accumulator advanced by one FMA per 8 inputs in
 * input order, then hsum8() and the scalar tail. A zmm holds two outputs'
 * accumulators side by side - two rows' weights [row A | row B] against the
 * token's 8 activations broadcast to both halves - so this level and AVX2
 * give the same bits for every output and the kernel choice may mix them.
 * Tiles: F_RP row pairs x F_TT tokens for batches (32 zmm registers hold
 * F_RP * F_TT accumulators), one row pair for decode, whose two rows come
 * from the two halves of the task's rows (two sequential streams, each
 * prefetched F_STREAM_PF bytes ahead), as the AVX2 decode (f_pair) reads. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

#define X8Z_DPW(s, w, x) _mm512_add_epi32((s), _mm512_madd_epi16((w), (x)))
#define X8Z_PREFIX x8m
#include "kernels/cpu/kern_avx512_x8.h"

/* ---- F32 / F16 / BF16 ------------------------------------------------------ */

#ifndef F_STREAM_PF /* decode prefetch distance per stream, bytes (-D to tune) */
#define F_STREAM_PF 512
#endif
#ifndef F_RP
#define F_RP 3 /* row pairs per batch tile */
#endif
#ifndef F_TT
#define F_TT 8 /* tokens per batch tile (<= 8) */
#endif

/* [8 values of row ra from i | 8 of row rb from i] as floats. */
AI __m512 f_load2(kern_type wt, const uint8_t *ra, const uint8_t *rb, int i) {
    if (wt == KERN_TYPE_F32)
        return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)ra + i)),
                                  _mm256_loadu_ps((const float *)rb + i), 1);
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ra + (size_t)i * 2))),
        _mm_loadu_si128((const __m128i *)(rb + (size_t)i * 2)), 1);
    if (wt == KERN_TYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

AI float f_load1(kern_type wt, const uint8_t *row, int i) {
    if (wt == KERN_TYPE_F32) {
        float f;
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + (size_t)i * 2, 2);
    if (wt == KERN_TYPE_F16)
        return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* kern_matmul_avx2.c's hsum8: (lo128 + hi128), then pairs, then the last two. */
AI float f_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* f_hsum8 of the 16 accumulators in z[0..8) (each zmm two 8-lane ones, A in
 * lanes 0-7 and B in 8-15) at once, with f_hsum8's additions exactly:
 * (v_k + v_k+4), then (s0 + s2, s1 + s3), then their sum, done on
 * whole registers with the partial sums of different outputs side by side.
 * Lane 4 j + m of the result is output (j & 1 ? B : A) of z[2 m + (j >> 1)]. */
AI __m512 f_hsum8x16(const __m512 z[8]) {
    __m512 r[4], w[2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) /* blocks [z2k.A, z2k.B, z2k+1.A, z2k+1.B], lane i: v_i + v_i+4 */
        r[k] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) { /* per block [r2k: s0+s2, s1+s3 | r2k+1: s0+s2, s1+s3] */
        const __m512d a = _mm512_castps_pd(r[2 * k]), b = _mm512_castps_pd(r[2 * k + 1]);
        w[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* per block [r0, r1, r2, r3] of that block: (s0 + s2) + (s1 + s3) */
    return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Output of one row: hsum8 of its accumulator, then the tail n8..n in order
 * (the AVX2 kernels' exact sequence). */
AI float f_finish(kern_type wt, __m256 acc, const uint8_t *row, const float *x, int n8, int n) {
    float s = f_hsum8(acc);
    for (int i = n8; i < n; i++)
        s = s + f_load1(wt, row, i) * x[i];
    return s;
}

/* RP row pairs (ra[p], rb[p]) x T tokens from t0; out[p][t][0..1] gets the
 * two rows' outputs. pf: prefetch F_STREAM_PF bytes ahead in each row
 * (decode: each row is its own stream). */
AI void f_tile(const kern_mm_args *a, kern_type wt, const uint8_t *const *ra,
               const uint8_t *const *rb, int t0, const int RP, const int T, const int pf,
               const char *nt, float (*out)[F_TT][2]) {
    /* nt (may be NULL): the next tile's rows, 2 RP rows from nt, walked at
     * the rate this tile reads its own: 2 RP * 8 values per step. */
    const size_t nt_step = (size_t)2 * RP * 8 * (wt == KERN_TYPE_F32 ? 4 : 2);
    const int n = a->n_in, n8 = n & ~7, es = wt == KERN_TYPE_F32 ? 4 : 2;
    const int pf_mask = 64 / es - 1; /* one prefetch per line of progress */
    const float *xr[F_TT];
    __m512 acc[F_RP][F_TT];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        xr[t] = a->x + (size_t)(t0 + t) * n;
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++)
            acc[p][t] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n8; i += 8) {
        if (pf && (i & pf_mask) == 0) {
#pragma GCC unroll 4
            for (int p = 0; p < RP; p++) {
                _mm_prefetch((const char *)ra[p] + (size_t)i * es + F_STREAM_PF, _MM_HINT_T0);
                _mm_prefetch((const char *)rb[p] + (size_t)i * es + F_STREAM_PF, _MM_HINT_T0);
            }
        }
        if (nt) {
            const size_t k0 = (size_t)(i / 8) * nt_step, k1 = k0 + nt_step;
            for (size_t l = (k0 + 63) & ~(size_t)63; l < k1; l += 64)
                _mm_prefetch(nt + l, _MM_HINT_T0);
        }
        __m512 w[F_RP];
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++)
            w[p] = f_load2(wt, ra[p], rb[p], i);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xr[t] + i));
#pragma GCC unroll 4
            for (int p = 0; p < RP; p++)
                acc[p][t] = _mm512_fmadd_ps(w[p], xv, acc[p][t]);
        }
    }
    /* Eight accumulators (16 outputs) at a time through f_hsum8x16 when
     * there is no tail; the rest one by one through memory (a loop, not
     * 2 RP T copies of the reduction and its tail). */
    int q0 = 0;
    const int NQ = RP * T;
    if (n8 == n)
#pragma GCC unroll 1
        for (; q0 + 8 <= NQ; q0 += 8) {
            __m512 z[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                z[k] = acc[(q0 + k) / T][(q0 + k) % T];
            _Alignas(64) float r[16];
            _mm512_store_ps(r, f_hsum8x16(z));
#pragma GCC unroll 16
            for (int lane = 0; lane < 16; lane++) {
                const int j = lane / 4, m = lane % 4, q = q0 + 2 * m + (j >> 1);
                out[q / T][q % T][j & 1] = r[lane];
            }
        }
    _Alignas(64) float sums[F_RP * F_TT][16];
#pragma GCC unroll 24
    for (int q = q0; q < NQ; q++)
        _mm512_store_ps(sums[q], acc[q / T][q % T]);
#pragma GCC unroll 1
    for (int q = q0; q < NQ; q++) {
        const int p = q / T, t = q % T;
        out[p][t][0] = f_finish(wt, _mm256_load_ps(sums[q]), ra[p], xr[t], n8, n);
        out[p][t][1] = f_finish(wt, _mm256_load_ps(sums[q] + 8), rb[p], xr[t], n8, n);
    }
}

/* Decode and short batches (T < F_TT tokens) of rows [r0, r1): row o of the
 * first half beside row o + half of the second, so the thread reads two
 * sequential streams, each prefetched F_STREAM_PF bytes ahead, as the AVX2
 * decode does; every weight is read once for the T tokens. (Two row pairs
 * per step, four streams, ran at half the speed from memory; the batch tiles
 * below, six rows at a time, lost to the AVX2 tiles at 2-4 tokens.) */
AI void f_rows_stream(const kern_mm_args *a, kern_type wt, int r0, int r1, const int T) {
    const int half = (r1 - r0) / 2;
    const size_t rs = a->row_bytes;
    float out[1][F_TT][2];
    for (int o = r0; o < r0 + half; o++) {
        const uint8_t *ra = a->W + (size_t)o * rs, *rb = a->W + (size_t)(o + half) * rs;
        f_tile(a, wt, &ra, &rb, 0, 1, T, 1, NULL, out);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            a->y[(size_t)t * a->n_out + o] = out[0][t][0];
            a->y[(size_t)t * a->n_out + o + half] = out[0][t][1];
        }
    }
    if ((r1 - r0) & 1) {
        const uint8_t *ra = a->W + (size_t)(r1 - 1) * rs;
        f_tile(a, wt, &ra, &ra, 0, 1, T, 1, NULL, out);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            a->y[(size_t)t * a->n_out + r1 - 1] = out[0][t][0];
    }
}

/* Tokens t0..t0+T over rows [r0, r1) in tiles of RP row pairs (2 RP
 * consecutive rows; rows past r1 computed on row r1 - 1 and not stored).
 * pf: this pass reads the rows from memory; each tile then prefetches the
 * next one's rows (the next 2 RP rows, one contiguous stretch) into L1/L2 at
 * the rate it reads its own, as the AVX2 tiles do (a burst of the whole next
 * tile at once, NTA, left the chunk out of L2 for the later passes and ran
 * 4-token batches at 0.4x the AVX2 tiles). */
AI void f_span(const kern_mm_args *a, kern_type wt, int r0, int r1, int t0, const int RP,
               const int T, int pf) {
    float out[F_RP][F_TT][2];
    const size_t rs = a->row_bytes;
    for (int o = r0; o < r1; o += 2 * RP) {
        const uint8_t *ra[F_RP], *rb[F_RP];
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++) {
            const int oa = o + 2 * p < r1 ? o + 2 * p : r1 - 1,
                      ob = o + 2 * p + 1 < r1 ? o + 2 * p + 1 : r1 - 1;
            ra[p] = a->W + (size_t)oa * rs;
            rb[p] = a->W + (size_t)ob * rs;
        }
        /* The next tile's rows (inside the matrix), when this pass is the
         * one that brings the chunk from memory. */
        const char *nt =
            pf && o + 4 * RP <= a->n_out ? (const char *)(a->W + (size_t)(o + 2 * RP) * rs) : NULL;
        f_tile(a, wt, ra, rb, t0, RP, T, 0, nt, out);
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int row = o + 2 * p + h;
                if (row < r1)
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++)
                        a->y[(size_t)(t0 + t) * a->n_out + row] = out[p][t][h];
            }
    }
}

/* Batches: the rows in chunks of about F_CHUNK_BYTES (whole tiles), and
 * every token tile over a chunk before the next: the chunk comes from memory
 * once (the first token tile prefetches as it goes) and from L2 after, so a
 * remainder of the tokens runs as tiles of 4, 2 and 1 (three tile widths, not
 * F_TT - 1, keep the code small) at little cost. */
#ifndef F_CHUNK_BYTES
#define F_CHUNK_BYTES (256 * 1024)
#endif
AI void f_rows(const kern_mm_args *a, kern_type wt, int r0, int r1) {
    switch (a->n_tok) {
    case 1: f_rows_stream(a, wt, r0, r1, 1); return;
    case 2: f_rows_stream(a, wt, r0, r1, 2); return;
    case 3: f_rows_stream(a, wt, r0, r1, 3); return;
    case 4: f_rows_stream(a, wt, r0, r1, 4); return;
    case 5: f_rows_stream(a, wt, r0, r1, 5); return;
    case 6: f_rows_stream(a, wt, r0, r1, 6); return;
    case 7: f_rows_stream(a, wt, r0, r1, 7); return;
    default: break;
    }
    int chunk = (int)(F_CHUNK_BYTES / a->row_bytes) / (2 * F_RP) * (2 * F_RP);
    if (chunk < 2 * F_RP)
        chunk = 2 * F_RP;
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        const int c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        int t0 = 0;
        for (; t0 + F_TT <= a->n_tok; t0 += F_TT)
            f_span(a, wt, c0, c1, t0, F_RP, F_TT, t0 == 0);
        if (F_TT > 4 && t0 + 4 <= a->n_tok) {
            f_span(a, wt, c0, c1, t0, F_RP, 4, t0 == 0);
            t0 += 4;
        }
        if (F_TT > 2 && t0 + 2 <= a->n_tok) {
            f_span(a, wt, c0, c1, t0, F_RP, 2, t0 == 0);
            t0 += 2;
        }
        if (t0 < a->n_tok)
            f_span(a, wt, c0, c1, t0, F_RP, 1, t0 == 0);
    }
}

static void f_rows_f32(const kern_mm_args *a, int r0, int r1) {
    f_rows(a, KERN_TYPE_F32, r0, r1);
}
static void f_rows_f16(const kern_mm_args *a, int r0, int r1) {
    f_rows(a, KERN_TYPE_F16, r0, r1);
}
static void f_rows_bf16(const kern_mm_args *a, int r0, int r1) {
    f_rows(a, KERN_TYPE_BF16, r0, r1);
}

void kern_mm_rows_avx512(const kern_mm_args *a, int r0, int r1) {
    switch (a->wt) {
    case KERN_TYPE_Q8_0X8:
    case KERN_TYPE_Q8_0MX8:
    case KERN_TYPE_Q4_0X8:
    case KERN_TYPE_Q4_1X8:
    case KERN_TYPE_Q5_0X8:
    case KERN_TYPE_Q5_1X8:
    case KERN_TYPE_IQ4_NLX8:
    case KERN_TYPE_Q6_0SX8: x8m_rows(a, r0, r1); break;
    case KERN_TYPE_F32: f_rows_f32(a, r0, r1); break;
    case KERN_TYPE_F16: f_rows_f16(a, r0, r1); break;
    case KERN_TYPE_BF16: f_rows_bf16(a, r0, r1); break;
    default:
        kern_mm_rows_scalar(a, r0, r1);
        break; /* row-major integer weights run at AVX2 (kern_matmul.c) */
    }
}
