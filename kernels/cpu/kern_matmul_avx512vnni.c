/* kern_matmul_avx512vnni.c - Q8_0 row kernel with AVX-512 VNNI (vpdpbusd).
 *
 * vpdpbusd multiplies unsigned bytes by signed bytes and adds groups of four
 * products into int32 lanes without int16 saturation. Activations are made
 * unsigned by adding 128 (x ^ 0x80 maps int8 x to x + 128 in [1, 255]), and
 * the extra 128 * sum(w) is removed by starting each lane's accumulator at
 *     -(128 * sum of its 4 weights) = -vpdpbusd(0, 0x80..., w),
 * computed once per weight register and shared by the tile's T tokens. So
 * each lane holds sum (x+128)*w - 128*sum w = sum x*w exactly, in int32
 * (|lane| <= 4 * 255 * 128), with the same lane layout as the maddubs path;
 * the tile plumbing (pair layout, reduce16, float accumulation) is shared
 * with kern_matmul_avx512.c through kern_avx512_q8.h. Float weight types use
 * the AVX-512 kernels. */
#include <immintrin.h>

#include "kernels/cpu/kern_avx512_q8.h"
#include "kernels/cpu/kern_internal.h"

AI void q8_tile_vnni(const kern_mm_args *a, const uint8_t *const *wr, const uint8_t *const *pf, int t0, const int R,
                     const int T, float *out)
{
    const int nb = a->n_in / 32, NC = 8 / T;
    const int8_t *xr[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xr[t] = a->xq + (size_t)(t0 + t) * a->n_in;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (T == 1)
            q8_prefetch_next(pf, b, R);
        __m512i xu[4], z[8];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512i xb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xr[t] + b * 32)));
            xu[t] = _mm512_xor_si512(xb, bias); /* x + 128 as unsigned */
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            __m512i wc = q8_load_pair(wr, b, kern_q8_row_lo(c, T), kern_q8_row_lo(c, T) + 4 / T);
            __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wc); /* 128 * sum4(w) */
            __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                z[c * T + t] = _mm512_dpbusd_epi32(init, xu[t], wc);
        }
        acc = q8_accumulate(a, wr, b, t0, R, T, reduce16(z), acc);
    }
    _mm512_storeu_ps(out, acc);
}

#define Q8_TILE q8_tile_vnni
#define Q8_PREFIX q8v
#include "kernels/cpu/kern_avx512_spans.h"

void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1)
{
    if (a->wt == KERN_TYPE_Q8_0)
        q8v_rows(a, r0, r1);
    else
        kern_mm_rows_avx512(a, r0, r1);
}
