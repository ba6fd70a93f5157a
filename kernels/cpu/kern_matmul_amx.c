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

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

/* GCC's tile intrinsics are asm statements that name no memory: this
 * orders the C code's stores before a tile load of them and a tile store
 * before the C code's loads of it. */
#define AMX_FENCE() __asm__ volatile("" ::: "memory")

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

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* K-byte blocks (32, or 16 for Q6_0S's half-blocks). */
static void amx_config(int kbytes) {
    _Alignas(64) amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette_id = 1;
    const int ctiles[] = {T_CH, T_CL, T_CH2, T_CL2};
    for (int i = 0; i < 4; i++) {
        c.rows[ctiles[i]] = KERN_AMX_TT;
        c.colsb[ctiles[i]] = 64; /* 16 int32 */
    }
    c.rows[T_AH] = c.rows[T_AL] = KERN_AMX_TT;
    c.colsb[T_AH] = c.colsb[T_AL] = (uint16_t)kbytes;
    c.rows[T_B] = (uint8_t)(kbytes / 4);
    c.colsb[T_B] = 64;
    AMX_FENCE();
    _tile_loadconfig(&c);
    AMX_FENCE();
}

/* 16 bytes, byte i 0xff where bit i of m is set. */
AI __m128i amx_bits(const uint8_t *p) {
    uint16_t m;
    memcpy(&m, p, 2);
    const __m128i v = _mm_shuffle_epi8(
        _mm_set1_epi16((short)m), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    const __m128i sel =
        _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 1, 2, 4, 8, 16, 32, 64, (char)128);
    return _mm_cmpeq_epi8(_mm_and_si128(v, sel), sel);
}

/* Block b's group block of 8 rows at g (or NULL: zero rows) into half h
 * (rows 8h..8h+7) of the panel p. B row kk (values 4kk..4kk+3) of row r is
 * bytes 4r..4r+3 of the half's 32: for the int8 forms the u16 pairs 2kk and
 * 2kk + 1 of row r interleaved; for the 4-bit forms chunk kk's low nibbles
 * (values 4kk, 4kk + 1) then its high ones (4kk + 2, 4kk + 3). */
AI void amx_decode_half(const uint8_t *g, int h, uint8_t *p, const int K) {
    if (!g) {
        for (int kk = 0; kk < 8; kk++)
            memset(p + 64 * kk + 32 * h, 0, 32);
        memset(p + PB_D + 32 * h, 0, 32);
        memset(p + PB_M + 32 * h, 0, 32);
        return;
    }
    for (int kk = 0; kk < 8; kk++) {
        __m128i lo, hi;
        if (!KERN_WK_NIB(K)) {
            lo = _mm_loadu_si128((const __m128i *)(g + 32 * kk));
            hi = _mm_loadu_si128((const __m128i *)(g + 32 * kk + 16));
        } else {
            const __m128i c = _mm_loadu_si128((const __m128i *)(g + 16 * kk));
            const __m128i m4 = _mm_set1_epi8(0x0f);
            lo = _mm_and_si128(c, m4);
            hi = _mm_and_si128(_mm_srli_epi16(c, 4), m4);
            if (KERN_WK_LUT(K)) {
                const __m128i tbl = _mm_loadu_si128((const __m128i *)kern_iq4_values);
                lo = _mm_shuffle_epi8(tbl, lo);
                hi = _mm_shuffle_epi8(tbl, hi);
            }
            if (KERN_WK_H5(K)) {
                const __m128i v16 = _mm_set1_epi8(16);
                lo = _mm_add_epi8(lo, _mm_and_si128(amx_bits(g + 128 + 4 * kk), v16));
                hi = _mm_add_epi8(hi, _mm_and_si128(amx_bits(g + 130 + 4 * kk), v16));
            }
            if (KERN_WK_H6(K)) {
                const __m128i v32 = _mm_set1_epi8(32);
                lo = _mm_add_epi8(lo, _mm_and_si128(amx_bits(g + 160 + 4 * kk), v32));
                hi = _mm_add_epi8(hi, _mm_and_si128(amx_bits(g + 162 + 4 * kk), v32));
            }
            const int bias = KERN_WK_H6(K) ? 32 : KERN_WK_BIAS(K);
            if (bias) {
                lo = _mm_sub_epi8(lo, _mm_set1_epi8((char)bias));
                hi = _mm_sub_epi8(hi, _mm_set1_epi8((char)bias));
            }
        }
        _mm_storeu_si128((__m128i *)(p + 64 * kk + 32 * h), _mm_unpacklo_epi16(lo, hi));
        _mm_storeu_si128((__m128i *)(p + 64 * kk + 32 * h + 16), _mm_unpackhi_epi16(lo, hi));
    }
    const size_t doff = KERN_WK_X8_DOFF(K);
    _mm256_storeu_ps((float *)(p + PB_D + 32 * h),
                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + doff))));
    if (KERN_WK_M(K) || KERN_WK_S2(K))
        _mm256_storeu_ps((float *)(p + PB_M + 32 * h),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + doff + 16))));
    else
        memset(p + PB_M + 32 * h, 0, 32);
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
                amx_decode_half(ga, 0, pan + (size_t)b * KERN_AMX_PB, K);
                amx_decode_half(g + 1 < n_groups ? ga + gbytes : NULL, 1,
                                pan + (size_t)b * KERN_AMX_PB, K);
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
