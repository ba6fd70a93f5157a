/* kern_matmul_amx.c - the X8 integer weights (every form: Q8_0, Q8_0M, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, Q6_0S, hence the K-quants brisk runs as them) on
 * AMX tiles, for batches (kern_matmul.c's table: from KERN_AMX_MIN_TOK
 * tokens; forced to the amx level, every batch size).
 *
 * brisk's activations are int16 (kern_matmul.c: int8 activations moved
 * SmolLM2's logits by 25%), and TDPBSSD multiplies bytes. Each int16 q is
 * split once per call into q = 256 h + l (h = q >> 8 signed, l = q & 255
 * unsigned, kern_matmul.c's planes xh and xl): per block of 32 values,
 * TDPBSSD gives isum(h) and TDPBUSD isum(l), each exact in int32, and
 *     isum = 256 isum(h) + isum(l)
 * is the block's exact integer sum. So this file computes the very integers
 * of every other level and applies the same float steps per block,
 *     acc = fma((float)isum, d_w * d_x, acc);  acc = fma(m_w, s_x, acc) (M)
 * (Q6_0S: two half-block sums, scaled by da and db), in block order: the
 * reference's bits at every batch size, so the table can switch to AMX at
 * KERN_AMX_MIN_TOK tokens without breaking batch invariance (tested with
 * memcmp like the other levels).
 *
 * Tiles: C (int32, 16 tokens x 16 rows) for the high and the low products,
 * A (16 tokens x 32 bytes of one block: tokens' h and l), B (the block's 32
 * values of 16 rows in the VNNI-4 order TDPB* reads: B[k/4][row][k%4]).
 * Each block needs its own int32 sum (its scale d_w * d_x is per block), so
 * a C tile holds one block's product, is stored, and the AVX-512 epilogue
 * above accumulates it into 16 zmm (one per token, 16 rows each).
 *
 * Weights: a task's rows are decoded chunk by chunk into B panels in the
 * calling thread's scratch (kern_mm_args.wide, the pool's per-thread
 * buffer): KERN_AMX_PB bytes per 16 rows and block (the B tile, then d_w and
 * m_w as f32), reused by every token tile; the matrix in memory keeps its X8
 * layout, which the decode (GEMV) kernels stream, and no second copy of the
 * weights is held. Rows too long for the scratch (n_in > ~26,000) and calls
 * without scratch run the avx512vnni kernels: the same bits. */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/kern_amx.h"
#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

#define AMX_FENCE() KERN_AMX_FENCE()

/* Tile numbers (literals: the intrinsics paste them into the asm). */
#define T_CH 0  /* C of the high bytes */
#define T_CL 1  /* C of the low bytes */
#define T_AH 2  /* A: the tokens' high bytes */
#define T_AL 3  /* A: the low bytes */
#define T_B 4   /* B: the weights */
#define T_CH2 5 /* the second pair of C tiles: the next block (one-scale */
#define T_CL2 6 /* forms), the second half-block (Q6_0S) */

/* Panel bytes per 16 rows and block: B[8][64], d_w[16], m_w[16] (Q6_0S: da,
 * db). */
#define KERN_AMX_PB 640
#define PB_D 512
#define PB_M 576

static atomic_long g_runs; /* kern_amx_runs() */

long kern_amx_runs(void) {
    return atomic_load_explicit(&g_runs, memory_order_relaxed);
}

/* The two tile configurations: 32-byte blocks, and Q6_0S's 16-byte
 * half-blocks; constant, so nothing is stored before LDTILECFG reads them. */
#define AMX_CFG(kb)                                                                                \
    {                                                                                              \
        .palette_id = 1, .colsb = {[T_CH] = 64, [T_CL] = 64,  [T_AH] = (kb), [T_AL] = (kb),        \
                                   [T_B] = 64,  [T_CH2] = 64, [T_CL2] = 64},                       \
        .rows = {[T_CH] = KERN_AMX_TT, [T_CL] = KERN_AMX_TT, [T_AH] = KERN_AMX_TT,                 \
                 [T_AL] = KERN_AMX_TT, [T_B] = (kb) / 4,     [T_CH2] = KERN_AMX_TT,                \
                 [T_CL2] = KERN_AMX_TT},                                                           \
    }
static const _Alignas(64) kern_amx_cfg g_cfg32 = AMX_CFG(32);
static const _Alignas(64) kern_amx_cfg g_cfg16 = AMX_CFG(16);

static void amx_config(int kbytes) {
    kern_amx_load_config(kbytes == 16 ? &g_cfg16 : &g_cfg32);
}

AI uint64_t amx_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Block b's group blocks of 8 rows at ga (rows 0-7) and gb (rows 8-15;
 * NULL: zero rows) into the panel p: B row kk (values 4kk..4kk+3) holds,
 * for each of the 16 rows r, those four values at bytes 4r..4r+3; then d_w
 * and m_w as f32. A zmm covers two B rows: its 128-bit lanes are (group A,
 * kk0), (A, kk1), (B, kk0), (B, kk1) for kk0 = 2q, kk1 = 2q + 1, each lane's
 * 8 rows as u16 value pairs; unpacking the lane's first pairs with its
 * second ones gives rows 0-3 and 4-7 of the lane, and one permute per B row
 * puts the four quarter rows in order.
 *   int8 forms: value pair j of the 8 rows is chunk j (16 bytes at 16 j),
 *     so B row kk interleaves chunks 2kk and 2kk + 1;
 *   4-bit forms: chunk kk's low nibbles are values 4kk, 4kk + 1 of each
 *     row, its high nibbles 4kk + 2, 4kk + 3 (+ the fifth/sixth bit planes
 *     at 128 + 4kk / 160 + 4kk for the low nibbles, + 2 for the high; the
 *     IQ4 table; then the code bias). */
AI void amx_decode(const uint8_t *ga, const uint8_t *gb, uint8_t *p, const int K) {
    static const int64_t rows0[8] = {0, 1, 8, 9, 4, 5, 12, 13};
    static const int64_t rows1[8] = {2, 3, 10, 11, 6, 7, 14, 15};
    const __m512i i0 = _mm512_loadu_si512(rows0), i1 = _mm512_loadu_si512(rows1);
    for (int q = 0; q < 4; q++) {
        __m512i lo, hi;
        if (!KERN_WK_NIB(K)) {
            static const int64_t even[8] = {0, 1, 4, 5, 8, 9, 12, 13};
            static const int64_t odd[8] = {2, 3, 6, 7, 10, 11, 14, 15};
            const __m512i va = _mm512_loadu_si512(ga + 64 * q);
            const __m512i vb = gb ? _mm512_loadu_si512(gb + 64 * q) : _mm512_setzero_si512();
            lo = _mm512_permutex2var_epi64(va, _mm512_loadu_si512(even), vb);
            hi = _mm512_permutex2var_epi64(va, _mm512_loadu_si512(odd), vb);
        } else {
            const __m256i ca = _mm256_loadu_si256((const __m256i *)(ga + 32 * q));
            const __m256i cb =
                gb ? _mm256_loadu_si256((const __m256i *)(gb + 32 * q)) : _mm256_setzero_si256();
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(ca), cb, 1);
            const __m512i m4 = _mm512_set1_epi8(0x0f);
            lo = _mm512_and_si512(v, m4);
            hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (KERN_WK_LUT(K)) {
                const __m512i tbl =
                    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kern_iq4_values));
                lo = _mm512_shuffle_epi8(tbl, lo);
                hi = _mm512_shuffle_epi8(tbl, hi);
            }
            /* The planes' u16 of lane (group, kk): bit 2r + e for byte 2r + e. */
            for (int pl = 0; pl < (KERN_WK_H6(K) ? 2 : KERN_WK_H5(K) ? 1 : 0); pl++) {
                const int off = 128 + 32 * pl + 8 * q;
                uint64_t ml = amx_u16(ga + off) | amx_u16(ga + off + 4) << 16;
                uint64_t mh = amx_u16(ga + off + 2) | amx_u16(ga + off + 6) << 16;
                if (gb) {
                    ml |= (amx_u16(gb + off) | amx_u16(gb + off + 4) << 16) << 32;
                    mh |= (amx_u16(gb + off + 2) | amx_u16(gb + off + 6) << 16) << 32;
                }
                const __m512i add = _mm512_set1_epi8((char)(16 << pl));
                lo = _mm512_mask_add_epi8(lo, (__mmask64)ml, lo, add);
                hi = _mm512_mask_add_epi8(hi, (__mmask64)mh, hi, add);
            }
            const int bias = KERN_WK_H6(K) ? 32 : KERN_WK_BIAS(K);
            if (bias) {
                lo = _mm512_sub_epi8(lo, _mm512_set1_epi8((char)bias));
                hi = _mm512_sub_epi8(hi, _mm512_set1_epi8((char)bias));
            }
            if (!gb) { /* the lone group's other half: zero rows */
                lo = _mm512_inserti64x4(lo, _mm256_setzero_si256(), 1);
                hi = _mm512_inserti64x4(hi, _mm256_setzero_si256(), 1);
            }
        }
        const __m512i ul = _mm512_unpacklo_epi16(lo, hi), uh = _mm512_unpackhi_epi16(lo, hi);
        _mm512_store_si512(p + 64 * (2 * q), _mm512_permutex2var_epi64(ul, i0, uh));
        _mm512_store_si512(p + 64 * (2 * q + 1), _mm512_permutex2var_epi64(ul, i1, uh));
    }
    const size_t doff = KERN_WK_X8_DOFF(K);
    const __m256i zero = _mm256_setzero_si256();
    const __m128i da = _mm_loadu_si128((const __m128i *)(ga + doff));
    const __m128i db = gb ? _mm_loadu_si128((const __m128i *)(gb + doff)) : _mm_setzero_si128();
    _mm512_store_ps((float *)(p + PB_D),
                    _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(da), db, 1)));
    if (KERN_WK_M(K) || KERN_WK_S2(K)) {
        const __m128i ma = _mm_loadu_si128((const __m128i *)(ga + doff + 16));
        const __m128i mb =
            gb ? _mm_loadu_si128((const __m128i *)(gb + doff + 16)) : _mm_setzero_si128();
        _mm512_store_ps((float *)(p + PB_M), _mm512_cvtph_ps(_mm256_inserti128_si256(
                                                 _mm256_castsi128_si256(ma), mb, 1)));
    } else {
        _mm512_store_ps((float *)(p + PB_M), _mm512_cvtph_ps(zero));
    }
}

/* The int32 product tiles of one block at ch/cl into the accumulators:
 * acc[m] = fma(cvt(256 ch[m] + cl[m]), s * d_x[m], acc[m]) for the mt
 * tokens present, dx the block's d_x of the tile's tokens. */
AI void amx_scale(__m512 acc[KERN_AMX_TT], const int32_t *ch, const int32_t *cl, __m512 s,
                  const float *dx, const int mt) {
#pragma GCC unroll 16
    for (int m = 0; m < KERN_AMX_TT; m++) {
        if (m >= mt)
            break;
        const __m512i is = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch + 16 * m), 8),
                                            _mm512_load_si512(cl + 16 * m));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(s, _mm512_set1_ps(dx[m])),
                                 acc[m]);
    }
}

/* Block bb's two products into the C tiles CH, CL, stored to bch, bcl (the
 * A tiles from the planes at xh, xl; the B tile from the panels at pan). */
#define AMX_PRODUCTS(CH, CL, bch, bcl, bb)                                                         \
    do {                                                                                           \
        _tile_zero(CH);                                                                            \
        _tile_zero(CL);                                                                            \
        _tile_loadd(T_AH, xh + 32 * (size_t)(bb), stride);                                         \
        _tile_loadd(T_AL, xl + 32 * (size_t)(bb), stride);                                         \
        _tile_loadd(T_B, pan + (size_t)(bb)*KERN_AMX_PB, 64);                                      \
        _tile_dpbssd(CH, T_AH, T_B);                                                               \
        _tile_dpbusd(CL, T_AL, T_B);                                                               \
        _tile_stored(CH, bch, 64);                                                                 \
        _tile_stored(CL, bcl, 64);                                                                 \
    } while (0)

/* Tokens m0..m0+mt of the 16 rows from o whose panels start at pan; stores
 * the rows below r1. The one-scale forms are software-pipelined: block
 * b + 1's products (in the other pair of C tiles and buffers) are issued
 * before block b's epilogue, so the tile unit works while the vector units
 * scale; the epilogues still run in block order. */
AI void amx_tile(const kern_mm_args *a, const uint8_t *pan, int o, int r1, int m0, const int mt,
                 const int K) {
    const int nb = a->n_in / 32, M = KERN_WK_M(K);
    _Alignas(64) int32_t buf[2][2][KERN_AMX_TT * 16]; /* [pair][high, low] */
    __m512 acc[KERN_AMX_TT];
#pragma GCC unroll 16
    for (int m = 0; m < KERN_AMX_TT; m++)
        acc[m] = _mm512_setzero_ps();
    const int8_t *xh = a->xh + (size_t)m0 * a->n_in;
    const uint8_t *xl = a->xl + (size_t)m0 * a->n_in;
    const long stride = a->n_in;
    if (!KERN_WK_S2(K)) {
        AMX_FENCE();
        AMX_PRODUCTS(T_CH, T_CL, buf[0][0], buf[0][1], 0);
        for (int b = 0; b < nb; b++) {
            if (b + 1 < nb) {
                if ((b + 1) & 1)
                    AMX_PRODUCTS(T_CH2, T_CL2, buf[1][0], buf[1][1], b + 1);
                else
                    AMX_PRODUCTS(T_CH, T_CL, buf[0][0], buf[0][1], b + 1);
            }
            AMX_FENCE();
            const uint8_t *p = pan + (size_t)b * KERN_AMX_PB;
            const float *dx = a->xd + (size_t)b * a->n_tok + m0;
            amx_scale(acc, buf[b & 1][0], buf[b & 1][1], _mm512_load_ps((const float *)(p + PB_D)),
                      dx, mt);
            if (M) {
                const __m512 mw = _mm512_load_ps((const float *)(p + PB_M));
                const float *sx = a->xs + (size_t)b * a->n_tok + m0;
#pragma GCC unroll 16
                for (int m = 0; m < KERN_AMX_TT; m++) {
                    if (m >= mt)
                        break;
                    acc[m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx[m]), acc[m]);
                }
            }
            AMX_FENCE();
        }
    } else {
        /* Q6_0S: values 0..15 (B rows 0-3) scaled by da, 16..31 (rows 4-7)
         * by db; the tiles are configured for 16-byte blocks. */
        for (int b = 0; b < nb; b++) {
            const uint8_t *p = pan + (size_t)b * KERN_AMX_PB;
            const float *dx = a->xd + (size_t)b * a->n_tok + m0;
            AMX_FENCE();
            _tile_zero(T_CH);
            _tile_zero(T_CL);
            _tile_zero(T_CH2);
            _tile_zero(T_CL2);
            _tile_loadd(T_AH, xh + 32 * b, stride);
            _tile_loadd(T_AL, xl + 32 * b, stride);
            _tile_loadd(T_B, p, 64);
            _tile_dpbssd(T_CH, T_AH, T_B);
            _tile_dpbusd(T_CL, T_AL, T_B);
            _tile_loadd(T_AH, xh + 32 * b + 16, stride);
            _tile_loadd(T_AL, xl + 32 * b + 16, stride);
            _tile_loadd(T_B, p + 256, 64);
            _tile_dpbssd(T_CH2, T_AH, T_B);
            _tile_dpbusd(T_CL2, T_AL, T_B);
            _tile_stored(T_CH, buf[0][0], 64);
            _tile_stored(T_CL, buf[0][1], 64);
            _tile_stored(T_CH2, buf[1][0], 64);
            _tile_stored(T_CL2, buf[1][1], 64);
            AMX_FENCE();
            amx_scale(acc, buf[0][0], buf[0][1], _mm512_load_ps((const float *)(p + PB_D)), dx, mt);
            amx_scale(acc, buf[1][0], buf[1][1], _mm512_load_ps((const float *)(p + PB_M)), dx, mt);
        }
    }
    const int n = r1 - o < 16 ? r1 - o : 16;
    const __mmask16 keep = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1);
#pragma GCC unroll 16
    for (int m = 0; m < KERN_AMX_TT; m++) {
        if (m >= mt)
            break;
        _mm512_mask_storeu_ps(a->y + (size_t)(m0 + m) * a->n_out + o, keep, acc[m]);
    }
}

/* Rows [r0, r1) (r0 a multiple of 16) of an X8 matrix of base form K. */
AI void amx_rows_k(const kern_mm_args *a, int r0, int r1, const int K) {
    const int nb = a->n_in / 32;
    const size_t gbytes = (size_t)nb * 8 * KERN_WK_BB(K); /* one group of 8 rows */
    const size_t tbytes = (size_t)nb * KERN_AMX_PB;       /* one row tile's panels */
    const int n_rt = (r1 - r0 + 15) / 16;
    const int n_groups = (a->n_out + 7) / 8; /* groups in the matrix */
    int ct = (int)(a->wide_bytes / tbytes);  /* row tiles per chunk */
    if (ct > n_rt)
        ct = n_rt;
    atomic_fetch_add_explicit(&g_runs, 1, memory_order_relaxed);
    amx_config(KERN_WK_S2(K) ? 16 : 32);
    for (int t0 = 0; t0 < n_rt; t0 += ct) {
        const int nt = n_rt - t0 < ct ? n_rt - t0 : ct;
        for (int t = 0; t < nt; t++) {
            const int g = (r0 + 16 * (t0 + t)) / 8;
            uint8_t *pan = a->wide + (size_t)t * tbytes;
            for (int b = 0; b < nb; b++) {
                const uint8_t *ga = a->W + (size_t)g * gbytes + (size_t)b * 8 * KERN_WK_BB(K);
                amx_decode(ga, g + 1 < n_groups ? ga + gbytes : NULL, pan + (size_t)b * KERN_AMX_PB,
                           K);
            }
        }
        AMX_FENCE();
        const int full = a->n_tok / KERN_AMX_TT * KERN_AMX_TT;
        for (int m0 = 0; m0 < full; m0 += KERN_AMX_TT)
            for (int t = 0; t < nt; t++)
                amx_tile(a, a->wide + (size_t)t * tbytes, r0 + 16 * (t0 + t), r1, m0, KERN_AMX_TT,
                         K);
        if (full < a->n_tok)
            for (int t = 0; t < nt; t++)
                amx_tile(a, a->wide + (size_t)t * tbytes, r0 + 16 * (t0 + t), r1, full,
                         a->n_tok - full, K);
    }
    _tile_release();
}

void kern_mm_rows_amx(const kern_mm_args *a, int r0, int r1) {
    const size_t tbytes = (size_t)(a->n_in / 32) * KERN_AMX_PB;
    if (!kern_type_is_x8(a->wt) || !a->xh || !a->xl || !a->wide || a->wide_bytes < tbytes ||
        r0 % 16) {
        kern_mm_rows_avx512vnni(a, r0, r1);
        return;
    }
    switch (a->wt) {
    case KERN_TYPE_Q8_0X8: amx_rows_k(a, r0, r1, KERN_WK_Q8_0); break;
    case KERN_TYPE_Q8_0MX8: amx_rows_k(a, r0, r1, KERN_WK_Q8_0M); break;
    case KERN_TYPE_Q4_0X8: amx_rows_k(a, r0, r1, KERN_WK_Q4_0); break;
    case KERN_TYPE_Q4_1X8: amx_rows_k(a, r0, r1, KERN_WK_Q4_1); break;
    case KERN_TYPE_Q5_0X8: amx_rows_k(a, r0, r1, KERN_WK_Q5_0); break;
    case KERN_TYPE_Q5_1X8: amx_rows_k(a, r0, r1, KERN_WK_Q5_1); break;
    case KERN_TYPE_IQ4_NLX8: amx_rows_k(a, r0, r1, KERN_WK_IQ4NL); break;
    case KERN_TYPE_Q6_0SX8: amx_rows_k(a, r0, r1, KERN_WK_Q6S); break;
    default: kern_mm_rows_avx512vnni(a, r0, r1); break;
    }
}
