/* kern_matmul_avx2.c - AVX2 + FMA + F16C matmul row kernels and the AVX2
 * activation quantizer. Compiled with -mavx2 -mfma -mf16c; only called when
 * kern_cpu_level() >= KERN_LEVEL_AVX2.
 *
 * Tiles: every micro-kernel computes 8 outputs (R rows x T tokens, R*T = 8):
 * 2x4 for short batches, 4x2 for a token remainder of 2-3, 8x1 for decode;
 * from KERN_AVX2_PLAIN_MIN_TOK tokens on, 16 rows x 3 tokens from repacked
 * weights (g8_*, below; SmolLM2-135M pp512 on 2 Zen 3 cores: 535 -> ~690
 * tok/s with 8x4 tiles, Q4_1 and Q8_0M alike; 8x6 tiles and chunks of
 * groups sharing each token tile: ~745 -> ~780-800; 16x3 tiles sharing each
 * broadcast activation pair: Q8_0 GEMM ~228 -> ~248 GOP/s). A weight
 * block loaded (and widened to int16) once serves the T tokens of the tile.
 * Rows past the end of the task are computed on a clamped (valid) row and
 * not stored.
 *
 * Integer weights (Q8_0, Q8_0M, Q4_0, Q4_1): the weights are widened to
 * int16 and multiplied by the int16 activations with vpmaddwd, which adds
 * adjacent products into int32 lanes: a lane is at most 2 * 128 * 32767 <
 * 2^23 and a block's sum below 2^28, so every step is exact and the order of
 * the integer additions is free. Int8 blocks are sign-extended (vpmovsxbw,
 * one per 16 values); a Q4 block's 16 bytes are zero-extended once
 * (vpmovzxbw) and split in the int16 lanes, `and 15` giving values 0..15 and
 * `>> 4` values 16..31 (a byte's high nibble, no mask needed), minus 8 for
 * Q4_0: the integers of the Q8_0 / Q8_0M block kern_requantize_row_q8 would
 * make, in the same lanes. The float part is then done for all 8 outputs of
 * the tile at once, lane by lane exactly the reference's arithmetic:
 *     acc = fma(cvt(isum), d_w * d_x, acc);  acc = fma(m_w, s_x, acc) (Q8_0M, Q4_1)
 * Decode (8x1) reads plain activation rows: per (row, token) pair, two
 * vpmaddwd over the block's two halves and one add give 8 partial sums, and
 * reduce8() turns the 8 pairs' vectors into one vector of 8 sums.
 * Prompts (2x4, 4x2) read the paired layout (below), where one vector holds
 * two tokens' partial sums, so the reduction is half as long (reduce4); with
 * the software pipelining of q8_tile that measured 74 -> 83 GOP/s on one
 * Zen 3 core (1536x576, 512 tokens; int8 activations: 65).
 * Lane-crossing shuffles (vpermq, vperm2i128) compete with vpmaddwd for
 * the same pipes on Zen 3 and cost ~2 slots; alternatives that avoid the one
 * vpermq per row and pair measured slower (a second weight widening with
 * swapped halves: 75; summing the swap after the reduction: 74).
 *
 * Float types: each output owns one 8-lane f32 accumulator advanced by one
 * FMA per 8 inputs in input order, then hsum8() and a scalar tail for n_in
 * not a multiple of 8 - the same sequence in every tile shape and in decode,
 * which runs two rows at a time from two streams (f_pair) instead of tiles. */
#include <float.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

/* ---- activation quantization (bit-identical to kern_quantize_act_scalar) -- */

AI int32_t hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* The paired layout: tokens t = 2p and u = 2p + 1 share rows 2p and 2p+1,
 * and each block b is 64 int16 at offset 64 b of those rows. With c0..c3 a
 * token's four 8-value chunks of the block, the 64 values are the four
 * 256-bit vectors
 *     X = [t.c0 | u.c1]   X' = [u.c0 | t.c1]   Y = [t.c2 | u.c3]   Y' = [u.c2 | t.c3]
 * Against a weight row widened to A = [c0 | c1] and B = [c2 | c3],
 *     madd(A, X) + madd(B, Y)   = [t's partial sums over c0, c2 | u's over c1, c3]
 *     madd(A, X') + madd(B, Y') = [u's over c0, c2 | t's over c1, c3]
 * and the first plus the second with its halves swapped is [t | u]: one
 * vector carries two outputs' partial sums, 4 lanes each. So a token's chunk
 * c goes to PAIR_OFF[slot][c]. */
static const int PAIR_OFF[2][4] = {{0, 24, 32, 56}, {16, 8, 48, 40}};

void kern_quantize_act_avx2(const float *x, int n, int16_t *q, float *d, float *s, int32_t *qsum,
                            int stride, int slot) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < n / 32; b++) {
        const float *p = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
        __m256 v2 = _mm256_loadu_ps(p + 16), v3 = _mm256_loadu_ps(p + 24);
        __m256 m =
            _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                          _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float db = _mm_cvtss_f32(m4) / 32767.0f;
        if (!(db >= FLT_MIN))
            db = 0.0f;
        __m256 vid = _mm256_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
        /* cvtps rounds to nearest even (the MXCSR default), like rintf. */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        /* packs works per 128-bit lane; the permute restores element order. */
        __m256i q01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xd8);
        __m256i q23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xd8);
        if (slot < 0) {
            _mm256_storeu_si256((__m256i *)(q + b * 32), q01);
            _mm256_storeu_si256((__m256i *)(q + b * 32 + 16), q23);
        } else {
            int16_t *o = q + b * 64;
            const int *off = PAIR_OFF[slot];
            _mm_storeu_si128((__m128i *)(o + off[0]), _mm256_castsi256_si128(q01));
            _mm_storeu_si128((__m128i *)(o + off[1]), _mm256_extracti128_si256(q01, 1));
            _mm_storeu_si128((__m128i *)(o + off[2]), _mm256_castsi256_si128(q23));
            _mm_storeu_si128((__m128i *)(o + off[3]), _mm256_extracti128_si256(q23, 1));
        }
        int32_t sum = hsum8_epi32(
            _mm256_add_epi32(_mm256_madd_epi16(q01, ones), _mm256_madd_epi16(q23, ones)));
        d[(size_t)b * stride] = db;
        s[(size_t)b * stride] = db * (float)sum;
        qsum[(size_t)b * stride] = sum;
    }
}

/* ---- int8 weights ----------------------------------------------------------- */

/* Pairwise folds; each keeps integer sums exact, so only the final lane
 * assignment matters. Per 128 bits, fold32(a, b) = [a0+a2, b0+b2, a1+a3,
 * b1+b3] and fold64(p, q) = [p0+p2, p1+p3, q0+q2, q1+q3]. */
AI __m256i fold32(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
AI __m256i fold64(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}
/* Each 128-bit half of the result holds the sums of that half of v[0..3]. */
AI __m256i reduce4(const __m256i v[4]) {
    return fold64(fold32(v[0], v[1]), fold32(v[2], v[3]));
}
/* reduce8(v)[k] = the sum of the 8 lanes of v[k]. */
AI __m256i reduce8(const __m256i v[8]) {
    __m256i lo = reduce4(v), hi = reduce4(v + 4);
    return _mm256_add_epi32(_mm256_blend_epi32(lo, hi, 0xf0),
                            _mm256_permute2x128_si256(lo, hi, 0x21));
}

AI uint16_t load_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}
AI uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
/* The two floats at v (any 4-byte alignment) in every 64-bit lane: through
 * an integer load, since a double-typed load of a float array is misaligned
 * for C (UBSan reports it) even where the instruction is not. */
AI __m256 bcast2(const float *v) {
    long long q;
    memcpy(&q, v, 8);
    return _mm256_castsi256_ps(_mm256_set1_epi64x(q));
}

/* The T activation values of tokens t0.. for block b (d or s), repeated in
 * each 128-bit half: [v0 v1 v2 v3], [v0 v1 v0 v1] or [v0 v0 v0 v0]. */
AI __m256 tok_bcast(const float *v, const int T) {
    if (T == 4)
        return _mm256_castsi256_ps(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)v)));
    if (T == 2)
        return bcast2(v);
    return _mm256_broadcast_ss(v);
}

/* Output lane k of a tile: T = 1 (plain): row k, token 0. Paired (T = 2, 4):
 * the duo vectors D[i], i = pair * R + row, each [token 2 pair | 2 pair + 1],
 * reduce4() to lane k = (i = k & 3) in the half k >> 2 (the token's slot). */
#define LANE_ROW(k, R, T) ((T) == 1 ? (k) : ((k)&3) % (R))
#define LANE_TOK(k, R, T) ((T) == 1 ? 0 : 2 * (((k)&3) / (R)) + ((k) >> 2))

/* Cache lines prefetched per block in decode: 8 rows' blocks (272, 288, 144
 * or 160 bytes) rounded up to whole lines (see q8_tile). */
#define PF_LINES(K) ((int)((8 * KERN_WK_BB(K) + 63) / 64))

/* Values 0..15 and 16..31 of block b of a weight row as int16 (w0, w1). */
AI void q8_widen(const uint8_t *row, int b, const int K, __m256i *w0, __m256i *w1) {
    const uint8_t *qs = row + (size_t)b * KERN_WK_BB(K) + KERN_WK_QO(K);
    if (KERN_WK_NIB(K)) {
        __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)qs));
        *w0 = _mm256_and_si256(w, _mm256_set1_epi16(0x0f));
        *w1 = _mm256_srli_epi16(w, 4);
        if (K == KERN_WK_Q4_0) {
            *w0 = _mm256_sub_epi16(*w0, _mm256_set1_epi16(8));
            *w1 = _mm256_sub_epi16(*w1, _mm256_set1_epi16(8));
        }
        return;
    }
    *w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qs));
    *w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16)));
}

/* The integer part for block b: the 8 (T = 1) or 4 (paired) partial-sum
 * vectors that reduce8() / reduce4() turn into the 8 lanes' block sums. */
AI void q8_dots(const kern_mm_args *a, const uint8_t *const *wr, const uint8_t *pf,
                const int16_t *xr, int b, const int R, const int T, const int K, __m256i *v) {
    if (T == 1) {
        /* Row by row, so that only x and the 8 sums stay in registers. */
        const __m256i *xp = (const __m256i *)(xr + b * 32);
        __m256i x0 = _mm256_loadu_si256(xp), x1 = _mm256_loadu_si256(xp + 1);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i w0, w1;
            q8_widen(wr[r], b, K, &w0, &w1);
            v[r] = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
        }
        if (pf) { /* see q8_tile */
            const int nl = PF_LINES(K);
            const char *q = (const char *)pf + (size_t)b * 64 * nl;
#pragma GCC unroll 5
            for (int l = 0; l < nl; l++)
                _mm_prefetch(q + 64 * l, _MM_HINT_NTA);
        }
        return;
    }
    __m256i w0[8], w1[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        q8_widen(wr[r], b, K, &w0[r], &w1[r]);
    if (pf) { /* the next tile's R rows, walked at the rate this one is read */
        const int nl = (int)((R * KERN_WK_BB(K) + 63) / 64);
        const char *q = (const char *)pf + (size_t)b * 64 * nl;
#pragma GCC unroll 2
        for (int l = 0; l < nl; l++)
            _mm_prefetch(q + 64 * l, _MM_HINT_NTA);
    }
#pragma GCC unroll 2
    for (int p = 0; p < T / 2; p++) {
        const __m256i *xp = (const __m256i *)(xr + (size_t)2 * p * a->n_in + b * 64);
        __m256i x = _mm256_loadu_si256(xp), xs = _mm256_loadu_si256(xp + 1);
        __m256i y = _mm256_loadu_si256(xp + 2), ys = _mm256_loadu_si256(xp + 3);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i pt = _mm256_add_epi32(_mm256_madd_epi16(w0[r], x), _mm256_madd_epi16(w1[r], y));
            __m256i pu =
                _mm256_add_epi32(_mm256_madd_epi16(w0[r], xs), _mm256_madd_epi16(w1[r], ys));
            v[p * R + r] = _mm256_add_epi32(pt, _mm256_permute4x64_epi64(pu, 0x4e));
        }
    }
}

/* The float part for block b, given its partial-sum vectors v. */
AI __m256 q8_finish(const kern_mm_args *a, const uint8_t *const *wr, const float *sd,
                    const float *sm, int t0, int b, const __m256i *v, const int R, const int T,
                    const int K, const int P, __m256 acc) {
    const size_t bb = KERN_WK_BB(K);
    const int M = KERN_WK_M(K);
    __m256i isum = T == 1 ? reduce8(v) : reduce4(v);
    __m256 dw, mw = _mm256_setzero_ps();
    if (P) {
        dw = bcast2(sd + (size_t)b * 2);
        if (M)
            mw = bcast2(sm + (size_t)b * 2);
    } else if (T == 1) {
        /* The first 4 bytes of the block in each of the 8 rows (d, then m
         * or the first qs), assembled with inserts of 32 bits rather than 16
         * (every block type is at least 18 bytes, so this stays inside it). */
        const size_t bo = (size_t)b * bb;
        if (M) {
            /* Rows 0 1 4 5 in lo, 2 3 6 7 in hi, as [d | m] pairs: converted
             * whole, one shufps per 128 bits picks rows 0-3 | 4-7 of d or m. */
            __m128i lo = _mm_cvtsi32_si128((int)load_u32(wr[0] + bo));
            __m128i hi = _mm_cvtsi32_si128((int)load_u32(wr[2] + bo));
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[1] + bo), 1);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[3] + bo), 1);
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[4] + bo), 2);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[6] + bo), 2);
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[5] + bo), 3);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[7] + bo), 3);
            __m256 fl = _mm256_cvtph_ps(lo), fh = _mm256_cvtph_ps(hi);
            dw = _mm256_shuffle_ps(fl, fh, _MM_SHUFFLE(2, 0, 2, 0));
            mw = _mm256_shuffle_ps(fl, fh, _MM_SHUFFLE(3, 1, 3, 1));
        } else {
            __m128i lo = _mm_cvtsi32_si128((int)load_u32(wr[0] + bo));
            __m128i hi = _mm_cvtsi32_si128((int)load_u32(wr[4] + bo));
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[1] + bo), 1);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[5] + bo), 1);
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[2] + bo), 2);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[6] + bo), 2);
            lo = _mm_insert_epi32(lo, (int)load_u32(wr[3] + bo), 3);
            hi = _mm_insert_epi32(hi, (int)load_u32(wr[7] + bo), 3);
            /* Per 32 bits [d | qs0 qs1] -> the four d first, in each half. */
            const __m128i split =
                _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
            dw = _mm256_cvtph_ps(
                _mm_unpacklo_epi64(_mm_shuffle_epi8(lo, split), _mm_shuffle_epi8(hi, split)));
        }
    } else {
#define HL(off, k) (short)load_u16(wr[LANE_ROW(k, R, T)] + (size_t)b * bb + (off))
        dw = _mm256_cvtph_ps(_mm_setr_epi16(HL(0, 0), HL(0, 1), HL(0, 2), HL(0, 3), HL(0, 4),
                                            HL(0, 5), HL(0, 6), HL(0, 7)));
        if (M)
            mw = _mm256_cvtph_ps(_mm_setr_epi16(HL(2, 0), HL(2, 1), HL(2, 2), HL(2, 3), HL(2, 4),
                                                HL(2, 5), HL(2, 6), HL(2, 7)));
#undef HL
    }
    const __m256i ctrl = _mm256_setr_epi32(LANE_TOK(0, R, T), LANE_TOK(1, R, T), LANE_TOK(2, R, T),
                                           LANE_TOK(3, R, T), LANE_TOK(4, R, T), LANE_TOK(5, R, T),
                                           LANE_TOK(6, R, T), LANE_TOK(7, R, T));
    const size_t xo = (size_t)b * a->n_tok + t0;
    __m256 dx =
        T == 1 ? tok_bcast(a->xd + xo, T) : _mm256_permutevar_ps(tok_bcast(a->xd + xo, T), ctrl);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc);
    if (M) {
        __m256 sx = T == 1 ? tok_bcast(a->xs + xo, T)
                           : _mm256_permutevar_ps(tok_bcast(a->xs + xo, T), ctrl);
        acc = _mm256_fmadd_ps(mw, sx, acc);
    }
    return acc;
}

/* The 8 outputs of rows wr[0..R) and tokens t0..t0+T (lanes as above);
 * K is the weight format (KERN_WK_*, kern_internal.h). P = 1 (2x4 only): the
 * weight scales come as floats from sd (and sm, for the formats with an
 * offset), [d_row0, d_row1] per block (no caller since the g8 path took over
 * long prompts); P = 0: they are
 * read and converted from the blocks here.
 * Prompt tiles are software-pipelined: block b's multiplies are issued
 * before block b-1's reduction and float part, whose dependency chain (~20
 * cycles) otherwise fills the out-of-order window (+6%; decode's 8 sums per
 * block, computed row by row, leave no registers for a second block's).
 * Decode (T = 1) is bound by how many weight bytes are in flight. The 8 rows
 * of a tile are contiguous, so the next tile is one stretch of memory, pf,
 * and each block prefetches the next PF_LINES lines of it (5 lines, 320
 * bytes, >= the 8 rows' 272 or 288 bytes per block of Q8_0 / Q8_0M; 3 lines,
 * 192 bytes, >= 144 or 160 for Q4_0 / Q4_1; pf is NULL for the last tiles
 * of the matrix, as this overshoots by up to 48 bytes per block, less than 3
 * rows of any type, so it stays inside the matrix): it has arrived by the time
 * it is computed, across page boundaries too, where the hardware prefetchers
 * stop. The hint is NTA (non-temporal: the line is kept out of the outer
 * caches as far as the CPU allows; every weight byte is read once per step). Measured on Zen 3, DRAM-fed, Q8_0M 1536x576: 10.5 ->
 * 14.5 GB/s on one core, 19 -> 24 GB/s on two, against the int8-activation
 * kernel's scheme (block b of each row of the next tile, leaving 8 row
 * streams to the hardware prefetchers); then NTA one tile ahead against T0
 * two tiles ahead, on a whole SmolLM2-135M decode step (2 threads, brisk
 * bench tg128, the machine shared, hence ranges): Q4_1 178-180 -> 189-233
 * tok/s, Q8_0M 130-132 -> 137-156; NTA two tiles ahead and T0 one tile ahead
 * each gained less. A task's first tile is prefetched whole (up to 81 lines)
 * before it is computed: without that, each task start waited for DRAM with
 * only the hardware prefetchers' help, one tile's worth of stall per task
 * (~4 to 12 tasks per thread per matrix). With the task order of
 * kern_matmul.c (SmolLM2-135M, 2 threads, brisk bench tg128, machine
 * shared): int8 120-145 -> 135-169 tok/s, Q4_1 210-238 -> 203-256. */
AI void q8_tile(const kern_mm_args *a, const uint8_t *const *wr, const uint8_t *pf, const float *sd,
                const float *sm, int t0, const int R, const int T, const int K, const int P,
                float *out) {
    const int nb = a->n_in / 32;
    const int16_t *xr = a->xq + (size_t)t0 * a->n_in; /* the plain row, or the first pair's rows */
    __m256 acc = _mm256_setzero_ps();
    __m256i prev[8], cur[8];
    if (T == 1 || nb == 0) {
        for (int b = 0; b < nb; b++) {
            q8_dots(a, wr, pf, xr, b, R, T, K, cur);
            acc = q8_finish(a, wr, sd, sm, t0, b, cur, R, T, K, P, acc);
        }
        _mm256_storeu_ps(out, acc);
        return;
    }
    q8_dots(a, wr, pf, xr, 0, R, T, K, prev);
    for (int b = 1; b < nb; b++) {
        q8_dots(a, wr, pf, xr, b, R, T, K, cur);
        acc = q8_finish(a, wr, sd, sm, t0, b - 1, prev, R, T, K, P, acc);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            prev[k] = cur[k];
    }
    acc = q8_finish(a, wr, sd, sm, t0, nb - 1, prev, R, T, K, P, acc);
    _mm256_storeu_ps(out, acc);
}

/* Decode tile of 8 whole rows w, w + rs, ..., w + 7 rs: q8_tile's T = 1 path
 * (same integer sums, same float operations in block order), with the rows
 * addressed as two pointers advanced per block (rows 0-3 and 4-7) plus rs and
 * 3 rs, instead of 8 row pointers that do not fit in the registers (which
 * spilled them to the stack). SmolLM2-135M, 2 threads, brisk bench tg128,
 * machine shared: int8 136-191 -> 147-202 tok/s, paired runs 9 of 9 faster;
 * Q4_1 unchanged within noise. */
AI void q8_tile1_(const kern_mm_args *a, const uint8_t *w, size_t rs, const uint8_t *pf, int t0,
                  const int K, const int PF, float *out) {
    const int nb = a->n_in / 32;
    const size_t bb = KERN_WK_BB(K);
    const int M = KERN_WK_M(K);
    const int16_t *xr = a->xq + (size_t)t0 * a->n_in;
    const float *xd = a->xd + t0, *xs = a->xs + t0;
    const size_t xstep = (size_t)a->n_tok;
    const size_t r3 = 3 * rs;
    const uint8_t *p = w, *q = w + 4 * rs, *const pend = w + (size_t)nb * bb;
    const char *f = (const char *)pf;
    __m256 acc = _mm256_setzero_ps();
    for (; p != pend; xr += 32, xd += xstep, xs += xstep) {
        const __m256i *xp = (const __m256i *)xr;
        __m256i x0 = _mm256_loadu_si256(xp), x1 = _mm256_loadu_si256(xp + 1);
        const uint8_t *rp[8] = {p, p + rs, p + 2 * rs, p + r3, q, q + rs, q + 2 * rs, q + r3};
        __m256i v[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i w0, w1;
            q8_widen(rp[r], 0, K, &w0, &w1);
            v[r] = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
        }
        if (PF) { /* see q8_tile */
            /* Keeps the prefetches after this block's loads: scheduled
             * before them they cost ~15% (1 thread, int8 tg128). */
            __asm__ volatile("" ::: "memory");
            const int nl = PF_LINES(K);
#pragma GCC unroll 5
            for (int l = 0; l < nl; l++)
                _mm_prefetch(f + 64 * l, _MM_HINT_NTA);
            f += 64 * nl;
        }
        __m256i isum = reduce8(v);
        __m256 dw, mw = _mm256_setzero_ps();
        if (M) { /* as in q8_finish */
            __m128i lo = _mm_cvtsi32_si128((int)load_u32(rp[0]));
            __m128i hi = _mm_cvtsi32_si128((int)load_u32(rp[2]));
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[1]), 1);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[3]), 1);
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[4]), 2);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[6]), 2);
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[5]), 3);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[7]), 3);
            __m256 fl = _mm256_cvtph_ps(lo), fh = _mm256_cvtph_ps(hi);
            dw = _mm256_shuffle_ps(fl, fh, _MM_SHUFFLE(2, 0, 2, 0));
            mw = _mm256_shuffle_ps(fl, fh, _MM_SHUFFLE(3, 1, 3, 1));
        } else {
            __m128i lo = _mm_cvtsi32_si128((int)load_u32(rp[0]));
            __m128i hi = _mm_cvtsi32_si128((int)load_u32(rp[4]));
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[1]), 1);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[5]), 1);
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[2]), 2);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[6]), 2);
            lo = _mm_insert_epi32(lo, (int)load_u32(rp[3]), 3);
            hi = _mm_insert_epi32(hi, (int)load_u32(rp[7]), 3);
            const __m128i split =
                _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
            dw = _mm256_cvtph_ps(
                _mm_unpacklo_epi64(_mm_shuffle_epi8(lo, split), _mm_shuffle_epi8(hi, split)));
        }
        __m256 dx = _mm256_broadcast_ss(xd);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc);
        if (M)
            acc = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(xs), acc);
        p += bb;
        q += bb;
    }
    _mm256_storeu_ps(out, acc);
}
AI void q8_tile1(const kern_mm_args *a, const uint8_t *w, size_t rs, const uint8_t *pf, int t0,
                 const int K, float *out) {
    if (pf)
        q8_tile1_(a, w, rs, pf, t0, K, 1, out);
    else
        q8_tile1_(a, w, rs, pf, t0, K, 0, out);
}

/* Decode: a task's first tile, which no earlier tile of the task prefetched,
 * is prefetched whole (rows r0.. up to R of them, contiguous). */
AI void prefetch_first_tile(const kern_mm_args *a, int r0, int r1, int R) {
    const char *f = (const char *)(a->W + (size_t)r0 * a->row_bytes);
    size_t nl = ((size_t)(r1 - r0 < R ? r1 - r0 : R) * a->row_bytes + 63) / 64;
    for (size_t l = 0; l < nl; l++)
        _mm_prefetch(f + 64 * l, _MM_HINT_NTA);
}

/* Runs tiles of R rows x T tokens over rows [r0, r1) for tokens t0..t0+T.
 * With P, sd/sm hold the rows' float scales, [d_row0, d_row1] per block. */
#define DEFINE_Q8_SPAN(NAME, K, P, R, T)                                                           \
    static void q8_span_##NAME##_##R##x##T##_##P(const kern_mm_args *a, int r0, int r1, int t0,    \
                                                 const float *sd, const float *sm) {               \
        const size_t sstride = (size_t)(a->n_in / 32) * 2;                                         \
        if (T <= 4)                                                                                \
            prefetch_first_tile(a, r0, r1, R);                                                     \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;               \
            const uint8_t *pf =                                                                    \
                T <= 4 && o + 3 * R < a->n_out ? a->W + (size_t)(o + R) * a->row_bytes : NULL;     \
            float out[8];                                                                          \
            size_t so = (size_t)((o - r0) / R) * sstride;                                          \
            if (T == 1 && !P && o + 8 <= r1)                                                       \
                q8_tile1(a, wr[0], a->row_bytes, pf, t0, K, out);                                  \
            else                                                                                   \
                q8_tile(a, wr, pf, P ? sd + so : NULL, P &&KERN_WK_M(K) ? sm + so : NULL, t0, R,   \
                        T, K, P, out);                                                             \
            for (int k = 0; k < 8; k++)                                                            \
                if (o + LANE_ROW(k, R, T) < r1)                                                    \
                    a->y[(size_t)(t0 + LANE_TOK(k, R, T)) * a->n_out + o + LANE_ROW(k, R, T)] =    \
                        out[k];                                                                    \
        }                                                                                          \
    }

/* ---- long prompts: 8 rows x T tokens from repacked weights -----------------
 * From KERN_AVX2_PLAIN_MIN_TOK tokens on, the output lanes are rows rather
 * than tokens: each group of 8 rows is repacked once per call into G8_VECS
 * vectors per block, 16 of int16 weights W[j] (lane r = values 2j and 2j+1 of
 * row r), then the rows' d and m as floats. A token's block sum for all 8 rows
 * is then sum_j madd(W[j], [x_2j x_2j+1] broadcast): no horizontal reduction
 * and no lane shuffles, only one add per vpmaddwd, and the float part is one
 * vector per token per block, the reference's arithmetic lane by lane. The
 * repacking (about 60 instructions per 8 row blocks) is paid once per row for
 * every token of the call. */
#define G8_VECS 18 /* per block: 16 weight vectors, d, m */
#define G8_TOK                                                                                     \
    3 /* tokens per tile of 2 groups: 6 sums + 6 accumulators + 2 weights + 1 broadcast in 16 ymm */
_Static_assert(G8_TOK == 3, "g8_rows: the remainder of a token tile is 1 or 2 tokens");
#ifndef G8_CHUNK_BYTES
#define G8_CHUNK_BYTES (160 * 1024) /* repacked groups per chunk: 160 KiB of L2 */
#endif
#define G8_STACK_BLOCKS 64 /* n_in <= 2048: the repacked group (36 KiB) on the stack */

/* In-lane 8x8 transpose of int32 elements: out[j] lane r = in[r] lane j. */
AI void transpose8(const __m256i in[8], __m256i *out, size_t stride) {
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* rows 0-3, rows 4-7 */
        const __m256i *th = t + 4 * h;
        u[4 * h + 0] = _mm256_unpacklo_epi64(th[0], th[2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(th[0], th[2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(th[1], th[3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(th[1], th[3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        _mm256_store_si256(out + j * stride, _mm256_permute2x128_si256(u[j], u[4 + j], 0x20));
        _mm256_store_si256(out + (j + 4) * stride, _mm256_permute2x128_si256(u[j], u[4 + j], 0x31));
    }
}

/* Repacks rows [o, o + 8) (clamped to r1 - 1) into pk, G8_VECS per block. */
AI void g8_pack(const kern_mm_args *a, int o, int r1, const int K, __m256i *pk) {
    const int nb = a->n_in / 32;
    const size_t bb = KERN_WK_BB(K);
    const uint8_t *wr[8];
    for (int r = 0; r < 8; r++)
        wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;
    for (int b = 0; b < nb; b++) {
        __m256i w0[8], w1[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            q8_widen(wr[r], b, K, &w0[r], &w1[r]);
        __m256i *p = pk + (size_t)b * G8_VECS;
        transpose8(w0, p, 1);
        transpose8(w1, p + 8, 1);
        float *dm = (float *)(p + 16);
        for (int r = 0; r < 8; r++) {
            dm[r] = _cvtsh_ss(load_u16(wr[r] + (size_t)b * bb));
            dm[8 + r] = KERN_WK_M(K) ? _cvtsh_ss(load_u16(wr[r] + (size_t)b * bb + 2)) : 0.0f;
        }
    }
}

/* The float step of block b for T tokens of one group of 8 rows (lanes):
 * acc = fma(cvt(isum), d_w * d_x, acc), then fma(m_w, s_x, acc) when the
 * weights carry an offset (M), as the reference does lane by lane. */
AI void g8_scale(const kern_mm_args *a, __m256 *acc, const __m256i *s, __m256 dw, __m256 mw, int b,
                 int t0, const int T, const int M) {
    const size_t xo = (size_t)b * a->n_tok + t0;
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]),
                                 _mm256_mul_ps(dw, _mm256_broadcast_ss(a->xd + xo + t)), acc[t]);
        if (M)
            acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(a->xs + xo + t), acc[t]);
    }
}

/* Stores G groups x T tokens of outputs (rows from o, those below r1). */
AI void g8_store(const kern_mm_args *a, __m256 (*acc)[8], int o, int ostep, int r1, int t0,
                 const int G, const int T) {
#pragma GCC unroll 2
    for (int g = 0; g < G; g++) {
        const int og = o + ostep * g;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            float *y = a->y + (size_t)(t0 + t) * a->n_out + og;
            if (og + 8 <= r1) {
                _mm256_storeu_ps(y, acc[g][t]);
            } else {
                float tmp[8];
                _mm256_storeu_ps(tmp, acc[g][t]);
                for (int r = 0; r < r1 - og; r++)
                    y[r] = tmp[r];
            }
        }
    }
}

/* The start of a g8/x8 tile: the T tokens' int16 activation rows, and G x T
 * zeroed accumulators. */
AI void g8_begin(const kern_mm_args *a, int t0, const int G, const int T, const int16_t **x,
                 __m256 (*acc)[8]) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        x[t] = a->xq + (size_t)(t0 + t) * a->n_in;
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            acc[g][t] = _mm256_setzero_ps();
    }
}

/* Rows o..o+8G (those below r1 stored) x tokens t0..t0+T from G consecutive
 * repacked groups (gstride vectors apart), plain activation rows. With G = 2
 * each broadcast activation pair feeds two vpmaddwd, which are then 2 of
 * every 5 vector ops instead of 1 of 3 (broadcast, madd, add). */
AI void g8_tile(const kern_mm_args *a, const __m256i *pk, size_t gstride, int o, int r1, int t0,
                const int G, const int T, const int K) {
    const int nb = a->n_in / 32;
    const int16_t *x[8];
    __m256 acc[2][8];
    g8_begin(a, t0, G, T, x, acc);
    for (int b = 0; b < nb; b++) {
        const __m256i *w[2];
        const int16_t *xb[8];
        __m256i s[2][8];
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            w[g] = pk + (size_t)g * gstride + (size_t)b * G8_VECS;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            xb[t] = x[t] + b * 32;
#pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                s[g][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int j = 0; j < 16; j++) {
            __m256i wj[2];
#pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                wj[g] = _mm256_load_si256(w[g] + j);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const __m256i xj =
                    _mm256_set1_epi32((int)load_u32((const uint8_t *)(xb[t] + 2 * j)));
#pragma GCC unroll 2
                for (int g = 0; g < G; g++)
                    s[g][t] = _mm256_add_epi32(s[g][t], _mm256_madd_epi16(wj[g], xj));
            }
        }
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            g8_scale(a, acc[g], s[g], _mm256_load_ps((const float *)(w[g] + 16)),
                     _mm256_load_ps((const float *)(w[g] + 17)), b, t0, T, KERN_WK_M(K));
    }
    g8_store(a, acc, o, 8, r1, t0, G, T);
}

/* Tokens t0..t0+T against every group of the chunk (ng groups from row o),
 * two groups per tile while two remain. */
AI void g8_tiles(const kern_mm_args *a, const __m256i *pk, size_t gstride, int ng, int o, int r1,
                 int t0, const int T, const int K) {
    int g = 0;
    for (; g + 2 <= ng; g += 2)
        g8_tile(a, pk + (size_t)g * gstride, gstride, o + 8 * g, r1, t0, 2, T, K);
    if (g < ng)
        g8_tile(a, pk + (size_t)g * gstride, gstride, o + 8 * g, r1, t0, 1, T, K);
}

AI void g8_rows(const kern_mm_args *a, int r0, int r1, const int K) {
    const int nb = a->n_in / 32;
    const size_t gstride = (size_t)nb * G8_VECS; /* vectors per repacked group */
    /* Groups repacked together: a token tile's activations, loaded into L1
     * once, then serve all of them, so that the activation matrix (512 x 576
     * int16 = 576 KiB, more than a Zen 3 L2) is streamed once per chunk
     * rather than once per 8 rows; the chunk stays within G8_CHUNK_BYTES of
     * L2. */
    int ng = (int)(G8_CHUNK_BYTES / (gstride * sizeof(__m256i)));
    int need = (r1 - r0 + 7) / 8;
    if (ng < 1)
        ng = 1;
    if (ng > need)
        ng = need;
    _Alignas(32) __m256i stack[G8_STACK_BLOCKS * G8_VECS];
    __m256i *pk = stack;
    if ((size_t)ng * gstride > (size_t)G8_STACK_BLOCKS * G8_VECS) {
        pk = aligned_alloc(32, (size_t)ng * gstride * sizeof(__m256i));
        if (!pk) {
            /* No memory for the repacked rows: the portable kernel reads the
             * same plain activation layout and gives the same bits. */
            kern_mm_rows_scalar(a, r0, r1);
            return;
        }
    }
    const int nt = a->n_tok - a->n_tok % G8_TOK;
    for (int o = r0; o < r1; o += 8 * ng) {
        int cg = (r1 - o + 7) / 8;
        if (cg > ng)
            cg = ng;
        for (int g = 0; g < cg; g++)
            g8_pack(a, o + 8 * g, r1, K, pk + (size_t)g * gstride);
        for (int t0 = 0; t0 < nt; t0 += G8_TOK)
            g8_tiles(a, pk, gstride, cg, o, r1, t0, G8_TOK, K);
        /* The remainder in one tile of its own width. */
        if (a->n_tok - nt == 2)
            g8_tiles(a, pk, gstride, cg, o, r1, nt, 2, K);
        else if (a->n_tok - nt == 1)
            g8_tiles(a, pk, gstride, cg, o, r1, nt, 1, K);
    }
    if (pk != stack)
        free(pk);
}

/* ---- X8 weights (row-interleaved, kern_types.h) -----------------------------
 * The g8 tiles above without the per-call repacking: a 16-byte load widened
 * to int16 (vpmovsxbw) is the W[j] that g8_pack makes, and the 8 rows' d (and
 * m) come as 8 fp16 in one load, so every token count runs the same 16 rows x
 * 3 tokens tiles (remainder 1-2 tokens; 8 rows when a group is left over),
 * with the same arithmetic lane by lane as the reference. The 4-bit forms
 * (Q4_0X8, Q4_1X8) hold two value pairs per 16 bytes: widened once
 * (vpmovzxbw), `and 15` gives pair 2c and `>> 4` pair 2c + 1. Q4_0's values
 * are nibble - 8: the kernels multiply the nibbles and subtract 8 times the
 * block's activation sum (xi, exact integers: the same isum). Decode (1
 * token) streams the weights once; the first token tile of a chunk
 * prefetches the groups of the next tile, the later tiles find the chunk in
 * L2. K is the base format (KERN_WK_*). */
#define X8_CHUNK_BYTES (96 * 1024) /* groups per chunk: 96 KiB of L2 */
/* Decode prefetch distance in bytes (x8_rows1; -D to tune): in stories110M
 * int8 tg, 3 rounds of runs, 768 beat 0, 192, 384 and 1536. */
#ifndef X8_STREAM_PF
#define X8_STREAM_PF 768
#endif
/* One block of a group (8 base blocks) and the offset of its d[8]. */
#define X8_BB(K) (8 * KERN_WK_BB(K))
#define X8_DOFF(K) KERN_WK_X8_DOFF(K)

/* Q5_0X8/Q5_1X8/Q6_0SX8: OR v (16; Q6_0S's second plane: 32) into the
 * int16 lanes of w whose bit is set in the 16-bit mask h (lane i <-> bit i;
 * kern_types.h's bit planes). */
AI __m256i x8_h5(__m256i w, uint32_t h, short v) {
    const __m256i bits = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                           8192, 16384, (short)0x8000);
    const __m256i set =
        _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)h), bits), bits);
    return _mm256_or_si256(w, _mm256_and_si256(set, _mm256_set1_epi16(v)));
}

/* G groups at grp + g * gstride, rows o + g * ostep (those below r1 stored),
 * tokens t0..t0+T. pf 1: prefetch the groups 2 * gbytes on (the next tile's,
 * consecutive groups); pf 2: prefetch X8_STREAM_PF bytes ahead in each
 * group's stream (decode, x8_rows1). */
AI void x8_tile(const kern_mm_args *a, const uint8_t *grp, size_t gstride, size_t gbytes, int o,
                int ostep, int r1, int t0, const int G, const int T, const int K, int pf) {
    const int nb = a->n_in / 32, M = KERN_WK_M(K);
    const size_t bb = X8_BB(K), doff = X8_DOFF(K);
    const int16_t *x[3];
    __m256 acc[2][8];
    g8_begin(a, t0, G, T, x, acc);
    for (int b = 0; b < nb; b++) {
        const uint8_t *w[2];
        __m256i s[2][8];
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            w[g] = grp + (size_t)g * gstride + (size_t)b * bb;
            if (pf == 1)
                for (size_t l = 0; l < bb; l += 64)
                    _mm_prefetch((const char *)w[g] + 2 * gbytes + l, _MM_HINT_T0);
            else if (pf == 2) /* the lines that start in this block, X8_STREAM_PF on */
                for (size_t l = ((size_t)b * bb + 63) & ~(size_t)63; l < (size_t)(b + 1) * bb;
                     l += 64)
                    _mm_prefetch((const char *)grp + (size_t)g * gstride + l + X8_STREAM_PF,
                                 _MM_HINT_T0);
#pragma GCC unroll 3
            for (int t = 0; t < T; t++)
                s[g][t] = _mm256_setzero_si256();
        }
        __m256i sa[2][8]; /* Q6_0S: the sums of values 0..15 (chunks 0-3) */
        if (KERN_WK_NIB(K)) {
#pragma GCC unroll 2
            for (int c = 0; c < 8; c++) {
                if (KERN_WK_S2(K) && c == 4)
#pragma GCC unroll 2
                    for (int g = 0; g < G; g++)
#pragma GCC unroll 3
                        for (int t = 0; t < T; t++) {
                            sa[g][t] = s[g][t];
                            s[g][t] = _mm256_setzero_si256();
                        }
                __m256i w0[2], w1[2];
#pragma GCC unroll 2
                for (int g = 0; g < G; g++) {
                    if (KERN_WK_LUT(K)) { /* IQ4_NL: the table's values of the nibbles */
                        const __m128i tbl = _mm_loadu_si128((const __m128i *)kern_iq4_values);
                        const __m128i nb4 = _mm_loadu_si128((const __m128i *)(w[g] + 16 * c));
                        const __m128i m4 = _mm_set1_epi8(0x0f);
                        w0[g] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tbl, _mm_and_si128(nb4, m4)));
                        w1[g] = _mm256_cvtepi8_epi16(
                            _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(nb4, 4), m4)));
                        continue;
                    }
                    const __m256i raw =
                        _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w[g] + 16 * c)));
                    w0[g] = _mm256_and_si256(raw, _mm256_set1_epi16(0x0f));
                    w1[g] = _mm256_srli_epi16(raw, 4);
                    if (KERN_WK_H5(K)) {
                        const uint32_t h = load_u32(w[g] + 128 + 4 * c);
                        w0[g] = x8_h5(w0[g], h & 0xffff, 16);
                        w1[g] = x8_h5(w1[g], h >> 16, 16);
                    }
                    if (KERN_WK_H6(K)) { /* Q6_0S: bit 5 from the second plane, then - 32 */
                        const uint32_t h = load_u32(w[g] + 160 + 4 * c);
                        const __m256i c32 = _mm256_set1_epi16(32);
                        w0[g] = _mm256_sub_epi16(x8_h5(w0[g], h & 0xffff, 32), c32);
                        w1[g] = _mm256_sub_epi16(x8_h5(w1[g], h >> 16, 32), c32);
                    }
                }
#pragma GCC unroll 3
                for (int t = 0; t < T; t++) {
                    const uint8_t *xp = (const uint8_t *)(x[t] + b * 32 + 4 * c);
                    const __m256i x0 = _mm256_set1_epi32((int)load_u32(xp));
                    const __m256i x1 = _mm256_set1_epi32((int)load_u32(xp + 4));
#pragma GCC unroll 2
                    for (int g = 0; g < G; g++)
                        s[g][t] = _mm256_add_epi32(s[g][t],
                                                   _mm256_add_epi32(_mm256_madd_epi16(w0[g], x0),
                                                                    _mm256_madd_epi16(w1[g], x1)));
                }
            }
            if (KERN_WK_BIAS(K)) /* sum (q - 8) x = sum q x - 8 sum x, exactly (Q5_0: 16) */
#pragma GCC unroll 3
                for (int t = 0; t < T; t++) {
                    const __m256i c8 =
                        _mm256_set1_epi32(KERN_WK_BIAS(K) * a->xi[(size_t)b * a->n_tok + t0 + t]);
#pragma GCC unroll 2
                    for (int g = 0; g < G; g++)
                        s[g][t] = _mm256_sub_epi32(s[g][t], c8);
                }
        } else {
#pragma GCC unroll 4
            for (int j = 0; j < 16; j++) {
                __m256i wj[2];
#pragma GCC unroll 2
                for (int g = 0; g < G; g++)
                    wj[g] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[g] + 16 * j)));
#pragma GCC unroll 3
                for (int t = 0; t < T; t++) {
                    const __m256i xj =
                        _mm256_set1_epi32((int)load_u32((const uint8_t *)(x[t] + b * 32 + 2 * j)));
#pragma GCC unroll 2
                    for (int g = 0; g < G; g++)
                        s[g][t] = _mm256_add_epi32(s[g][t], _mm256_madd_epi16(wj[g], xj));
                }
            }
        }
        if (KERN_WK_S2(K)) { /* da for values 0..15, then db for 16..31 */
#pragma GCC unroll 2
            for (int g = 0; g < G; g++) {
                g8_scale(a, acc[g], sa[g],
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[g] + doff))),
                         _mm256_setzero_ps(), b, t0, T, 0);
                g8_scale(a, acc[g], s[g],
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[g] + doff + 16))),
                         _mm256_setzero_ps(), b, t0, T, 0);
            }
        } else {
#pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                g8_scale(a, acc[g], s[g],
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[g] + doff))),
                         M ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[g] + doff + 16)))
                           : _mm256_setzero_ps(),
                         b, t0, T, M);
        }
    }
    g8_store(a, acc, o, ostep, r1, t0, G, T);
}

/* Tokens t0..t0+T against the ng groups from row o (group o / 8). pf: the
 * weights come from memory (first token tile), prefetch the next tile's. */
AI void x8_tiles(const kern_mm_args *a, int ng, int o, int r1, int t0, const int T, const int K,
                 int pf) {
    const size_t gbytes = (size_t)(a->n_in / 32) * X8_BB(K);
    const uint8_t *grp = a->W + (size_t)(o / 8) * gbytes;
    int g = 0;
    for (; g + 2 <= ng; g += 2)
        x8_tile(a, grp + (size_t)g * gbytes, gbytes, gbytes, o + 8 * g, 8, r1, t0, 2, T, K,
                pf && o + 8 * (g + 2) < r1);
    if (g < ng)
        x8_tile(a, grp + (size_t)g * gbytes, gbytes, gbytes, o + 8 * g, 8, r1, t0, 1, T, K, 0);
}

/* Decode (T <= 3 tokens) of rows [r0, r1) (r0 a multiple of 8): as f_pair
 * does for float weights, the two groups of a tile come from the two halves
 * of the range, so the thread reads two sequential streams, each prefetched
 * X8_STREAM_PF bytes ahead; a step of two or three decoding sequences reads
 * each weight once, as one does. Same tiles and arithmetic as x8_rows. */
AI void x8_rows1(const kern_mm_args *a, int r0, int r1, const int T, const int K) {
    const size_t gbytes = (size_t)(a->n_in / 32) * X8_BB(K);
    const int n_g = (r1 - r0 + 7) / 8, half = n_g / 2;
    const uint8_t *grp = a->W + (size_t)(r0 / 8) * gbytes;
    for (int g = 0; g < half; g++)
        x8_tile(a, grp + (size_t)g * gbytes, (size_t)half * gbytes, gbytes, r0 + 8 * g, 8 * half,
                r1, 0, 2, T, K, 2);
    if (n_g & 1)
        x8_tile(a, grp + (size_t)(n_g - 1) * gbytes, gbytes, gbytes, r0 + 8 * (n_g - 1), 8, r1, 0,
                1, T, K, 2);
}

/* Rows [r0, r1) (r0 a multiple of 8) of an X8 matrix. */
AI void x8_rows(const kern_mm_args *a, int r0, int r1, const int K) {
    if (a->n_tok <= KERN_X8_STREAM_MAX_TOK) {
        if (a->n_tok == 1)
            x8_rows1(a, r0, r1, 1, K);
        else if (a->n_tok == 2)
            x8_rows1(a, r0, r1, 2, K);
        else
            x8_rows1(a, r0, r1, 3, K);
        return;
    }
    const size_t gbytes = (size_t)(a->n_in / 32) * X8_BB(K);
    int ng = (int)(X8_CHUNK_BYTES / gbytes) & ~1;
    if (ng < 2)
        ng = 2;
    const int nt = a->n_tok - a->n_tok % 3;
    for (int o = r0; o < r1; o += 8 * ng) {
        int cg = (r1 - o + 7) / 8;
        if (cg > ng)
            cg = ng;
        for (int t0 = 0; t0 < nt; t0 += 3)
            x8_tiles(a, cg, o, r1, t0, 3, K, t0 == 0);
        if (a->n_tok - nt == 2)
            x8_tiles(a, cg, o, r1, nt, 2, K, nt == 0);
        else if (a->n_tok - nt == 1)
            x8_tiles(a, cg, o, r1, nt, 1, K, nt == 0);
    }
}

#define DEFINE_Q8_ROWS(NAME, K)                                                                    \
    DEFINE_Q8_SPAN(NAME, K, 0, 2, 4)                                                               \
    DEFINE_Q8_SPAN(NAME, K, 0, 4, 2)                                                               \
    DEFINE_Q8_SPAN(NAME, K, 0, 8, 1)                                                               \
    static void q8_rows_##NAME(const kern_mm_args *a, int r0, int r1) {                            \
        if (a->n_tok >= KERN_AVX2_PLAIN_MIN_TOK) {                                                 \
            g8_rows(a, r0, r1, K);                                                                 \
            return;                                                                                \
        }                                                                                          \
        int t0 = 0;                                                                                \
        for (; t0 + 4 <= a->n_tok; t0 += 4)                                                        \
            q8_span_##NAME##_2x4_0(a, r0, r1, t0, NULL, NULL);                                     \
        for (; t0 + 2 <= a->n_tok; t0 += 2)                                                        \
            q8_span_##NAME##_4x2_0(a, r0, r1, t0, NULL, NULL);                                     \
        for (; t0 < a->n_tok; t0++)                                                                \
            q8_span_##NAME##_8x1_0(a, r0, r1, t0, NULL, NULL);                                     \
    }
DEFINE_Q8_ROWS(q8_0, KERN_WK_Q8_0)
DEFINE_Q8_ROWS(q8_0m, KERN_WK_Q8_0M)
DEFINE_Q8_ROWS(q4_0, KERN_WK_Q4_0)
DEFINE_Q8_ROWS(q4_1, KERN_WK_Q4_1)

/* ---- F32 / F16 / BF16 ------------------------------------------------------ */

AI __m256 load8(kern_type wt, const uint8_t *row, int i) {
    if (wt == KERN_TYPE_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(row + (size_t)i * 2));
    if (wt == KERN_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

AI float load1(kern_type wt, const uint8_t *row, int i) {
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
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Batches (2x4, 4x2 tiles) of 16-bit weights prefetch as q8_tile does: the R
 * rows of a tile are one stretch of memory, so each step of 8 values
 * prefetches the next tile's matching R x 8 values NTA; pf is NULL near the
 * matrix end. F32 rows stream well without it. Decode uses f_pair, below. */
AI void f_tile(const kern_mm_args *a, kern_type wt, const uint8_t *const *wr, const uint8_t *pf,
               int t0, const int R, const int T, float *out) {
    const char *f = wt == KERN_TYPE_F32 ? NULL : (const char *)pf;
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
        if (f) {
            __asm__ volatile("" ::: "memory");
            _mm_prefetch(f, _MM_HINT_NTA);
            f += 16 * R; /* R rows' 8 values: a line every 64 / (16 R) steps */
        }
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

/* Decode (T = 1) of 16/32-bit weights: two rows at a time, one from each
 * half of [r0, r1), so that each thread reads its share as two sequential
 * streams; each step prefetches F_PAIR_PF bytes ahead in both (T0). Eight
 * interleaved rows (f_tile) are eight streams 1-2 KB apart, and plain
 * sequential rows leave too few misses in flight: on the 2-core Zen 3 VM, the
 * f16 matrices of one stories110M decode step took 8.0-8.3 ms as 8-row tiles,
 * 7.4-7.9 ms one row at a time with prefetch, 6.4-7.0 ms as two streams; four
 * streams (quarters, or two rows per half) were slower again (8.3-9.3 ms).
 * Each row keeps f_tile's arithmetic (one accumulator stepping 8 values,
 * hsum8, then the tail), so decode and batch give the same bits. (Row-major
 * int8/int4 decode keeps its 8-row tiles: taking 4 rows from each half
 * measured slower, kern_bench gemv Q4_1 49152x576 613 -> 750 us.) */
#ifndef F_PAIR_PF /* -D to tune */
#define F_PAIR_PF 384
#endif

/* P = 2: rows w0 and w1; P = 1: w0 alone (the odd row of a range). */
AI void f_pair(const kern_mm_args *a, kern_type wt, const uint8_t *w0, const uint8_t *w1,
               const float *x, float *y0, float *y1, const int P) {
    const int n = a->n_in, n8 = n & ~7, es = wt == KERN_TYPE_F32 ? 4 : 2;
    const int pf_mask = 64 / es - 1; /* one prefetch per line of progress */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int i = 0; i < n8; i += 8) {
        if ((i & pf_mask) == 0) {
            _mm_prefetch((const char *)w0 + (size_t)i * es + F_PAIR_PF, _MM_HINT_T0);
            if (P == 2)
                _mm_prefetch((const char *)w1 + (size_t)i * es + F_PAIR_PF, _MM_HINT_T0);
        }
        __m256 xv = _mm256_loadu_ps(x + i);
        acc0 = _mm256_fmadd_ps(load8(wt, w0, i), xv, acc0);
        if (P == 2)
            acc1 = _mm256_fmadd_ps(load8(wt, w1, i), xv, acc1);
    }
    float s0 = hsum8(acc0), s1 = P == 2 ? hsum8(acc1) : 0.0f;
    for (int i = n8; i < n; i++) {
        s0 = s0 + load1(wt, w0, i) * x[i];
        if (P == 2)
            s1 = s1 + load1(wt, w1, i) * x[i];
    }
    *y0 = s0;
    if (P == 2)
        *y1 = s1;
}

#define DEFINE_F_PAIRS(NAME, WT)                                                                   \
    static void f_pairs_##NAME(const kern_mm_args *a, int r0, int r1, int t0) {                    \
        const int half = (r1 - r0) / 2;                                                            \
        const float *x = a->x + (size_t)t0 * a->n_in;                                              \
        float *y = a->y + (size_t)t0 * a->n_out;                                                   \
        for (int o = r0; o < r0 + half; o++)                                                       \
            f_pair(a, WT, a->W + (size_t)o * a->row_bytes,                                         \
                   a->W + (size_t)(o + half) * a->row_bytes, x, y + o, y + o + half, 2);           \
        if ((r1 - r0) & 1)                                                                         \
            f_pair(a, WT, a->W + (size_t)(r1 - 1) * a->row_bytes, NULL, x, y + r1 - 1, NULL, 1);   \
    }

#define DEFINE_F_SPAN(NAME, WT, R, T)                                                              \
    static void f_span_##NAME##_##R##x##T(const kern_mm_args *a, int r0, int r1, int t0) {         \
        if (WT != KERN_TYPE_F32) /* see f_tile */                                                  \
            prefetch_first_tile(a, r0, r1, R);                                                     \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;               \
            const uint8_t *pf =                                                                    \
                o + 3 * R < a->n_out ? a->W + (size_t)(o + R) * a->row_bytes : NULL;               \
            float out[8];                                                                          \
            f_tile(a, WT, wr, pf, t0, R, T, out);                                                  \
            for (int k = 0; k < 8; k++)                                                            \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
#define DEFINE_F_ROWS(NAME, WT)                                                                    \
    DEFINE_F_SPAN(NAME, WT, 2, 4)                                                                  \
    DEFINE_F_SPAN(NAME, WT, 4, 2)                                                                  \
    DEFINE_F_PAIRS(NAME, WT)                                                                       \
    static void f_rows_##NAME(const kern_mm_args *a, int r0, int r1) {                             \
        int t0 = 0;                                                                                \
        for (; t0 + 4 <= a->n_tok; t0 += 4)                                                        \
            f_span_##NAME##_2x4(a, r0, r1, t0);                                                    \
        for (; t0 + 2 <= a->n_tok; t0 += 2)                                                        \
            f_span_##NAME##_4x2(a, r0, r1, t0);                                                    \
        for (; t0 < a->n_tok; t0++)                                                                \
            f_pairs_##NAME(a, r0, r1, t0);                                                         \
    }
DEFINE_F_ROWS(f32, KERN_TYPE_F32)
DEFINE_F_ROWS(f16, KERN_TYPE_F16)
DEFINE_F_ROWS(bf16, KERN_TYPE_BF16)

void kern_mm_rows_avx2(const kern_mm_args *a, int r0, int r1) {
    switch (a->wt) {
    case KERN_TYPE_Q8_0: q8_rows_q8_0(a, r0, r1); break;
    case KERN_TYPE_Q8_0M: q8_rows_q8_0m(a, r0, r1); break;
    case KERN_TYPE_Q4_0: q8_rows_q4_0(a, r0, r1); break;
    case KERN_TYPE_Q4_1: q8_rows_q4_1(a, r0, r1); break;
    case KERN_TYPE_Q8_0X8: x8_rows(a, r0, r1, KERN_WK_Q8_0); break;
    case KERN_TYPE_Q8_0MX8: x8_rows(a, r0, r1, KERN_WK_Q8_0M); break;
    case KERN_TYPE_Q4_0X8: x8_rows(a, r0, r1, KERN_WK_Q4_0); break;
    case KERN_TYPE_Q4_1X8: x8_rows(a, r0, r1, KERN_WK_Q4_1); break;
    case KERN_TYPE_Q5_0X8: x8_rows(a, r0, r1, KERN_WK_Q5_0); break;
    case KERN_TYPE_Q5_1X8: x8_rows(a, r0, r1, KERN_WK_Q5_1); break;
    case KERN_TYPE_IQ4_NLX8: x8_rows(a, r0, r1, KERN_WK_IQ4NL); break;
    case KERN_TYPE_Q6_0SX8: x8_rows(a, r0, r1, KERN_WK_Q6S); break;
    case KERN_TYPE_F32: f_rows_f32(a, r0, r1); break;
    case KERN_TYPE_F16: f_rows_f16(a, r0, r1); break;
    case KERN_TYPE_BF16: f_rows_bf16(a, r0, r1); break;
    default: kern_mm_rows_scalar(a, r0, r1); break;
    }
}
