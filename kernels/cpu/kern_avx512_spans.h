/* kern_avx512_spans.h - the Q8_0 span/row loops of an AVX-512 file, stamped
 * out around that file's tile function. Define Q8_TILE (the tile function:
 * (a, wr, pf, t0, R, T, out[16]); pf[r] = row r of the next tile or NULL, to
 * prefetch when T == 1 as in the AVX2 file) and Q8_PREFIX before including; defines
 * static void Q8_PREFIX##_rows(const kern_mm_args *a, int r0, int r1).
 * Rows past r1 are computed on a clamped (valid) row and not stored. */
#define Q8_CAT_(a, b) a##b
#define Q8_CAT(a, b) Q8_CAT_(a, b)

#define Q8_DEFINE_SPAN(R, T)                                                                       \
    static void Q8_CAT(Q8_PREFIX, _span_##R##x##T)(const kern_mm_args *a, int r0, int r1, int t0)  \
    {                                                                                              \
        for (int o = r0; o < r1; o += R) {                                                         \
            const uint8_t *wr[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                wr[r] = a->W + (size_t)(o + r < r1 ? o + r : r1 - 1) * a->row_bytes;                 \
            const uint8_t *pf[R];                                                                  \
            for (int r = 0; r < R; r++)                                                            \
                pf[r] = o + R + r < r1 ? wr[r] + (size_t)R * a->row_bytes : NULL;                  \
            float out[16];                                                                         \
            Q8_TILE(a, wr, pf, t0, R, T, out);                                                         \
            for (int k = 0; k < 16; k++)                                                           \
                if (o + k / T < r1)                                                                \
                    a->y[(size_t)(t0 + k % T) * a->n_out + o + k / T] = out[k];                    \
        }                                                                                          \
    }
Q8_DEFINE_SPAN(4, 4)
Q8_DEFINE_SPAN(8, 2)
Q8_DEFINE_SPAN(16, 1)

static void Q8_CAT(Q8_PREFIX, _rows)(const kern_mm_args *a, int r0, int r1)
{
    int t0 = 0;
    for (; t0 + 4 <= a->n_tok; t0 += 4)
        Q8_CAT(Q8_PREFIX, _span_4x4)(a, r0, r1, t0);
    for (; t0 + 2 <= a->n_tok; t0 += 2)
        Q8_CAT(Q8_PREFIX, _span_8x2)(a, r0, r1, t0);
    for (; t0 < a->n_tok; t0++)
        Q8_CAT(Q8_PREFIX, _span_16x1)(a, r0, r1, t0);
}

#undef Q8_DEFINE_SPAN
