/* kern_matmul_avx512vnni.c - the X8 integer-weight tiles of
 * kern_avx512_x8.h with AVX-512 VNNI: vpdpwssd multiplies the int16 pairs
 * and adds them into the int32 lanes in one instruction (exact for the same
 * bounds as vpmaddwd), one instruction fewer per pair than the AVX-512
 * file. Float weight types run the AVX-512 kernels, row-major integer
 * weights the AVX2 ones. */
#include <immintrin.h>

#include "kernels/cpu/kern_internal.h"

#define X8Z_DPW(s, w, x) _mm512_dpwssd_epi32((s), (w), (x))
#define X8Z_PREFIX x8v
#include "kernels/cpu/kern_avx512_x8.h"

void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1) {
    if (kern_type_is_x8(a->wt))
        x8v_rows(a, r0, r1);
    else
        kern_mm_rows_avx512(a, r0, r1);
}
