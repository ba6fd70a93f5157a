/* kern_avx512_spans.h - the integer-weight span/row loops of an AVX-512
 * file, stamped out around q8_tile() from kern_avx512_q8.h for Q8_0, Q8_0M,
 * Q4_0 and Q4_1. Define Q8_PREFIX before including; defines
 *   static void Q8_PREFIX##_rows_q8_0(const kern_mm_args *a, int r0, int r1)
 * and the same with _q8_0m, _q4_0 and _q4_1. pf[r] = row r of the next tile or NULL (for the
 * T == 1 prefetch, as in the AVX2 file). Rows past r1 are computed on a
 * clamped (valid) row and not stored. */
#define Q8_CAT_(a, b) a##b
#define Q8_CAT(a, b) Q8_CAT_(a, b)

#define Q8_DEFINE_SPAN(NAME, K, R, T)                                                              \
    static void Q8_CAT(Q8_PREFIX, _span_##NAME##_##R##x##T)(const kern_mm_args *a, int r0, int r1, \
                                                            int t0)                                \
    {                                                                                              \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;               \
            const uint8_t *pf[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                pf[r] = o + R + r < r1 ? wr[r] + (size_t)R * a->row_bytes : NULL;                  \
            float out[16];                                                                         \
            q8_tile(a, wr, pf, t0, R, T, K, out);                                                  \
            for (int k = 0; k < 16; k++)                                                           \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
#define Q8_DEFINE_ROWS(NAME, K)                                                                    \
    Q8_DEFINE_SPAN(NAME, K, 4, 4)                                                                  \
    Q8_DEFINE_SPAN(NAME, K, 8, 2)                                                                  \
    Q8_DEFINE_SPAN(NAME, K, 16, 1)                                                                 \
    static void Q8_CAT(Q8_PREFIX, _rows_##NAME)(const kern_mm_args *a, int r0, int r1)             \
    {                                                                                              \
        int t0 = 0;                                                                                \
        for (; t0 + 4 <= a->n_tok; t0 += 4)                                                        \
            Q8_CAT(Q8_PREFIX, _span_##NAME##_4x4)(a, r0, r1, t0);                                  \
        for (; t0 + 2 <= a->n_tok; t0 += 2)                                                        \
            Q8_CAT(Q8_PREFIX, _span_##NAME##_8x2)(a, r0, r1, t0);                                  \
        for (; t0 < a->n_tok; t0++)                                                                \
            Q8_CAT(Q8_PREFIX, _span_##NAME##_16x1)(a, r0, r1, t0);                                 \
    }
Q8_DEFINE_ROWS(q8_0, KERN_WK_Q8_0)
Q8_DEFINE_ROWS(q8_0m, KERN_WK_Q8_0M)
Q8_DEFINE_ROWS(q4_0, KERN_WK_Q4_0)
Q8_DEFINE_ROWS(q4_1, KERN_WK_Q4_1)

#undef Q8_DEFINE_ROWS
#undef Q8_DEFINE_SPAN
