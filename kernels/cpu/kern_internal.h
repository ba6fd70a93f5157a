/* kern_internal.h - what the CPU kernel files share and nothing else sees.
 *
 * Each instruction-set file (kern_*_avx2.c, kern_*_avx512.c,
 * kern_*_avx512vnni.c) is compiled with its own -m flags and exports only the
 * entry points below; kern_matmul.c and kern_ops.c pick one at run time from
 * kern_cpu_level(), so baseline-compiled code never executes an AVX
 * instruction on a machine that lacks it. */
#ifndef KERN_INTERNAL_H
#define KERN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

/* One matmul call as the row kernels see it. For Q8_0 weights the
 * activations have already been quantized: xq holds n_tok rows of n_in int8
 * (row stride n_in) and xd the block scales as floats laid out [n_in/32][n_tok]
 * (block-major, so the scales of a tile of consecutive tokens are adjacent and
 * load as one vector). For the float types x is used directly. */
typedef struct kern_mm_args {
    kern_type wt;
    const uint8_t *W;
    size_t row_bytes; /* kern_row_bytes(wt, n_in) */
    int n_out, n_in, n_tok;
    const float *x;   /* [n_tok][n_in], float types */
    const int8_t *xq; /* [n_tok][n_in], Q8_0 */
    const float *xd;  /* [n_in/32][n_tok], Q8_0 */
    float *y;         /* [n_tok][n_out] */
} kern_mm_args;

/* Computes y[t][o] for every t < n_tok and o in [r0, r1). Each (t, o) is a
 * function of row o of W and row t of x alone, computed with one fixed
 * instruction sequence whatever r0, r1 and n_tok are (batch invariance). */
typedef void (*kern_mm_rows_fn)(const kern_mm_args *a, int r0, int r1);

void kern_mm_rows_scalar(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx2(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1);

/* Quantizes one activation row of n floats (n a multiple of 32) to int8
 * values qs[n] and one float scale per block written to d[b * d_stride].
 * The result is bit-identical to kern_quantize_row(KERN_TYPE_Q8_0) followed
 * by converting each block's fp16 scale back to float. */
void kern_quantize_act_scalar(const float *x, int n, int8_t *qs, float *d, int d_stride);
void kern_quantize_act_avx2(const float *x, int n, int8_t *qs, float *d, int d_stride);

/* Row-op SIMD versions (kern_ops_avx2.c); kern_ops.c dispatches. */
void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n);
void kern_softmax_avx2(float *x, int n);
/* dot(a, b) over n floats, n a multiple of 8. */
float kern_dot_avx2(const float *a, const float *b, int n);
/* y[i] += alpha * x[i] over n floats, n a multiple of 8. */
void kern_axpy_avx2(float *y, float alpha, const float *x, int n);
/* exp over n floats (n any): the vectorised exp used by silu and softmax,
 * exported so the tests can measure its error against libm. */
void kern_exp_avx2(float *out, const float *x, int n);

#endif
