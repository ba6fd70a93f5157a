/* kern_matmul_avx2.c - AVX2 + FMA + F16C matmul row kernels and the AVX2
 * activation quantizer. Compiled with -mavx2 -mfma -mf16c; only called when
 * kern_cpu_level() >= KERN_LEVEL_AVX2.
 *
 * Tiles: every micro-kernel computes 8 outputs (R rows x T tokens, R*T = 8):
 * 2x4 for prompts, 4x2 for a token remainder of 2-3, 8x1 for decode. A weight
 * block loaded once serves the T tokens of the tile. Rows past the end of the
 * task are computed on a clamped (valid) row and not stored.
 *
 * Q8_0, per block (32 weights) and per (row r, token t) pair:
 *     maddubs(|w|, sign(x, w)) -> 16 int16, each the sum of two products;
 *     |w| <= 128 and |x| <= 127 (the quantizer never makes -128), so a sum is
 *     at most 2 * 128 * 127 = 32512 < 32767: no saturation, exact;
 *     madd with ones -> 8 int32 partial sums.
 * The 8 pairs' partial-sum vectors are then reduced together (reduce8) into
 * one vector whose lane k is pair k's exact block dot product, and the float
 * part is done for all 8 outputs at once:
 *     acc = acc + cvt(isum) * (d_w * d_x)
 * which is exactly the reference's arithmetic per output, lane by lane.
 *
 * Float types: each output owns one 8-lane f32 accumulator advanced by one
 * FMA per 8 inputs in input order, then hsum8() and a scalar tail for n_in
 * not a multiple of 8 - the same sequence in every tile shape. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

/* ---- activation quantization (bit-identical to kern_quantize_row) ------ */

/* roundf() semantics (half away from zero) for |v| < 2^23: truncate, then
 * step away from zero when the exact fractional part is >= 0.5. */
AI __m256 round_half_away(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    __m256 ge = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(ge, step));
}

void kern_quantize_act_avx2(const float *x, int n, int8_t *qs, float *d, int d_stride)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < n / 32; b++) {
        const float *p = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
        __m256 v2 = _mm256_loadu_ps(p + 16), v3 = _mm256_loadu_ps(p + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float dd = amax / 127.0f;
        float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        /* F16C rounds to nearest even, like kern_fp32_to_fp16 (tested). */
        d[(size_t)b * d_stride] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
        __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v0, vid)));
        __m256i i1 = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v1, vid)));
        __m256i i2 = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v2, vid)));
        __m256i i3 = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v3, vid)));
        /* packs work per 128-bit lane; the permute restores element order. */
        __m256i s = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(qs + b * 32), _mm256_permutevar8x32_epi32(s, perm));
    }
}

/* ---- Q8_0 ------------------------------------------------------------------- */

/* Pairwise folds; each keeps integer sums exact, so only the final lane
 * assignment matters: reduce8(v)[k] = sum of the 8 lanes of v[k]. */
AI __m256i fold32(__m256i a, __m256i b)
{
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
AI __m256i fold64(__m256i a, __m256i b)
{
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}
AI __m256i reduce8(const __m256i v[8])
{
    __m256i lo = fold64(fold32(v[0], v[1]), fold32(v[2], v[3])); /* per 128: v0..v3 partials */
    __m256i hi = fold64(fold32(v[4], v[5]), fold32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

AI uint16_t load_u16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The 8 outputs k = r*T + t of rows wr[0..R) and tokens t0..t0+T.
 * Decode (T = 1) is bound by how many weight bytes are in flight, and the
 * ~9 instructions per 34-byte block keep the out-of-order window short of
 * DRAM latency, so block b of the NEXT tile's rows (pf[r], NULL past the
 * task's end) is prefetched while block b of this tile is computed: the
 * whole next tile arrives during this one. Measured single-core on Zen 3
 * with weights streamed from DRAM: 8.3 -> 11 GB/s (1536x576); prefetching
 * within the row (384-1536 bytes ahead) or two tiles ahead did worse. */
AI void q8_tile(const kern_mm_args *a, const uint8_t *const *wr, const uint8_t *const *pf, int t0, const int R,
               const int T, float *out)
{
    const int nb = a->n_in / 32;
    const int8_t *xr[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xr[t] = a->xq + (size_t)(t0 + t) * a->n_in;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i w[8], aw[8], xv[4], v[8];
        uint16_t h[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = wr[r] + (size_t)b * sizeof(kern_block_q8_0);
            if (T == 1 && pf[r])
                _mm_prefetch((const char *)pf[r] + (size_t)b * sizeof(kern_block_q8_0), _MM_HINT_T0);
            h[r] = load_u16(blk);
            w[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            aw[r] = _mm256_abs_epi8(w[r]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            xv[t] = _mm256_loadu_si256((const __m256i *)(xr[t] + b * 32));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const int r = k / T, t = k % T;
            __m256i p16 = _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv[t], w[r]));
            v[k] = _mm256_madd_epi16(p16, ones);
        }
        __m256i isum = reduce8(v);
        __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16((short)h[0 / T], (short)h[1 / T], (short)h[2 / T], (short)h[3 / T],
                                                   (short)h[4 / T], (short)h[5 / T], (short)h[6 / T],
                                                   (short)h[7 / T]));
        const float *xd = a->xd + (size_t)b * a->n_tok + t0;
        __m256 dx;
        if (T == 4)
            dx = _mm256_broadcast_ps((const __m128 *)xd);
        else if (T == 2)
            dx = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)xd));
        else
            dx = _mm256_broadcast_ss(xd);
        __m256 scale = _mm256_mul_ps(dw, dx);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), scale));
    }
    _mm256_storeu_ps(out, acc);
}

/* Runs tiles of R rows x T tokens over rows [r0, r1) for tokens t0..t0+T. */
#define DEFINE_Q8_SPAN(R, T)                                                                       \
    static void q8_span_##R##x##T(const kern_mm_args *a, int r0, int r1, int t0)                   \
    {                                                                                              \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;                 \
            const uint8_t *pf[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                pf[r] = o + R + r < r1 ? wr[r] + (size_t)R * a->row_bytes : NULL;                 \
            float out[8];                                                                          \
            q8_tile(a, wr, pf, t0, R, T, out);                                                         \
            for (int k = 0; k < 8; k++)                                                            \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
DEFINE_Q8_SPAN(2, 4)
DEFINE_Q8_SPAN(4, 2)
DEFINE_Q8_SPAN(8, 1)

static void q8_rows(const kern_mm_args *a, int r0, int r1)
{
    int t0 = 0;
    for (; t0 + 4 <= a->n_tok; t0 += 4)
        q8_span_2x4(a, r0, r1, t0);
    for (; t0 + 2 <= a->n_tok; t0 += 2)
        q8_span_4x2(a, r0, r1, t0);
    for (; t0 < a->n_tok; t0++)
        q8_span_8x1(a, r0, r1, t0);
}

/* ---- F32 / F16 / BF16 ------------------------------------------------------ */

AI __m256 load8(kern_type wt, const uint8_t *row, int i)
{
    if (wt == KERN_TYPE_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(row + (size_t)i * 2));
    if (wt == KERN_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

AI float load1(kern_type wt, const uint8_t *row, int i)
{
    if (wt == KERN_TYPE_F32) {
        float f;
        memcpy(&f, row + (size_t)i * 4, 4);
        return f;
    }
    uint16_t h = load_u16(row + (size_t)i * 2);
    if (wt == KERN_TYPE_F16)
        return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Fixed horizontal sum: (lo128 + hi128), then pairs, then the last two. */
AI float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI void f_tile(const kern_mm_args *a, kern_type wt, const uint8_t *const *wr, int t0, const int R, const int T,
               float *out)
{
    const int n = a->n_in, n8 = n & ~7;
    const float *xr[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xr[t] = a->x + (size_t)(t0 + t) * n;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < n8; i += 8) {
        __m256 w[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            w[r] = load8(wt, wr[r], i);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(xr[t] + i);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r * T + t] = _mm256_fmadd_ps(w[r], xv, acc[r * T + t]);
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        float s = hsum8(acc[k]);
        for (int i = n8; i < n; i++)
            s = s + load1(wt, wr[k / T], i) * xr[k % T][i];
        out[k] = s;
    }
}

#define DEFINE_F_SPAN(NAME, WT, R, T)                                                              \
    static void f_span_##NAME##_##R##x##T(const kern_mm_args *a, int r0, int r1, int t0)           \
    {                                                                                              \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;                 \
            float out[8];                                                                          \
            f_tile(a, WT, wr, t0, R, T, out);                                                      \
            for (int k = 0; k < 8; k++)                                                            \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
#define DEFINE_F_ROWS(NAME, WT)                                                                    \
    DEFINE_F_SPAN(NAME, WT, 2, 4)                                                                  \
    DEFINE_F_SPAN(NAME, WT, 4, 2)                                                                  \
    DEFINE_F_SPAN(NAME, WT, 8, 1)                                                                  \
    static void f_rows_##NAME(const kern_mm_args *a, int r0, int r1)                               \
    {                                                                                              \
        int t0 = 0;                                                                                \
        for (; t0 + 4 <= a->n_tok; t0 += 4)                                                        \
            f_span_##NAME##_2x4(a, r0, r1, t0);                                                    \
        for (; t0 + 2 <= a->n_tok; t0 += 2)                                                        \
            f_span_##NAME##_4x2(a, r0, r1, t0);                                                    \
        for (; t0 < a->n_tok; t0++)                                                                \
            f_span_##NAME##_8x1(a, r0, r1, t0);                                                    \
    }
DEFINE_F_ROWS(f32, KERN_TYPE_F32)
DEFINE_F_ROWS(f16, KERN_TYPE_F16)
DEFINE_F_ROWS(bf16, KERN_TYPE_BF16)

void kern_mm_rows_avx2(const kern_mm_args *a, int r0, int r1)
{
    switch (a->wt) {
    case KERN_TYPE_Q8_0: q8_rows(a, r0, r1); break;
    case KERN_TYPE_F32: f_rows_f32(a, r0, r1); break;
    case KERN_TYPE_F16: f_rows_f16(a, r0, r1); break;
    case KERN_TYPE_BF16: f_rows_bf16(a, r0, r1); break;
    default: kern_mm_rows_scalar(a, r0, r1); break;
    }
}
