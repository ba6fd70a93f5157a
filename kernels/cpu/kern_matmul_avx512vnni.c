/* kern_matmul_avx512vnni.c - integer-weight (Q8_0, Q8_0M, Q4_0, Q4_1) row
 * kernels with AVX-512 VNNI.
 *
 * The tile of kern_avx512_q8.h with the second half-block product fused
 * into the first by vpdpwssd (int16 pairs multiplied and added into int32
 * lanes, exact for the same bounds as vpmaddwd): one instruction fewer per
 * pair of outputs and block than the AVX-512 file. Float weight types use
 * the AVX-512 kernels. */
#include <immintrin.h>

#include "kernels/cpu/kern_internal.h"

#define Q8_DOT2(wa, xa, wb, xb) _mm512_dpwssd_epi32(_mm512_madd_epi16(wa, xa), wb, xb)
#include "kernels/cpu/kern_avx512_q8.h"
#define Q8_PREFIX q8v
#include "kernels/cpu/kern_avx512_spans.h"

void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1)
{
    switch (a->wt) {
    case KERN_TYPE_Q8_0: q8v_rows_q8_0(a, r0, r1); break;
    case KERN_TYPE_Q8_0M: q8v_rows_q8_0m(a, r0, r1); break;
    case KERN_TYPE_Q4_0: q8v_rows_q4_0(a, r0, r1); break;
    case KERN_TYPE_Q4_1: q8v_rows_q4_1(a, r0, r1); break;
    default: kern_mm_rows_avx512(a, r0, r1); break;
    }
}
