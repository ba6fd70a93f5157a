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

#include "kernels/cpu/kern_ops.h"
#include "kernels/cpu/kern_types.h"

/* One matmul call as the row kernels see it. For the int8 weight types
 * (Q8_0, Q8_0M) the activations have already been quantized per 32-block to
 * int16 (kern_quantize_act_*): xq holds n_tok rows of n_in int16 (row stride
 * n_in), and xd / xs the blocks' scale d and offset term s = d * sum(q) as
 * floats laid out [n_in/32][n_tok] (block-major, so the values of a tile of
 * consecutive tokens are adjacent and load as one vector). At the AVX2 level
 * the rows of tokens 2p and 2p+1 (for 2p + 1 < n_tok) are interleaved into a
 * "paired" layout that its kernels read (kern_matmul_avx2.c); a last odd
 * token, and every token at the other levels, is stored plainly. For the
 * float types x is used directly. */
typedef struct kern_mm_args {
    kern_type wt;
    const uint8_t *W;
    size_t row_bytes; /* kern_row_bytes(wt, n_in) */
    int n_out, n_in, n_tok;
    const float *x;    /* [n_tok][n_in], float types */
    const int16_t *xq; /* [n_tok][n_in], int8 types */
    const float *xd;   /* [n_in/32][n_tok], int8 types */
    const float *xs;   /* [n_in/32][n_tok], int8 types */
    float *y;          /* [n_tok][n_out] */
} kern_mm_args;

/* Computes y[t][o] for every t < n_tok and o in [r0, r1). Each (t, o) is a
 * function of row o of W and row t of x alone, computed with one fixed
 * instruction sequence whatever r0, r1 and n_tok are (batch invariance). */
typedef void (*kern_mm_rows_fn)(const kern_mm_args *a, int r0, int r1);

void kern_mm_rows_scalar(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx2(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1);

/* Quantizes one activation row of n floats (n a multiple of 32) for the
 * int8-weight matmul, per block of 32:
 *     amax = max |x|,  d = amax / 32767 (0 if that is below FLT_MIN),
 *     q = rint(x * (1 / d)) in [-32767, 32767] (round to nearest even),
 *     s = d * (float)sum(q)
 * q goes to q[n], d and s to d[b * stride] and s[b * stride]. The AVX2
 * version computes the same values bit for bit (tested) and with slot = -1
 * stores them the same way; slot 0 or 1 stores them as token 0 or 1 of the
 * paired rows starting at q (2n values, see kern_matmul_avx2.c). */
void kern_quantize_act_scalar(const float *x, int n, int16_t *q, float *d, float *s, int stride);
void kern_quantize_act_avx2(const float *x, int n, int16_t *q, float *d, float *s, int stride, int slot);

/* Row-op SIMD versions (kern_ops_avx2.c); kern_ops.c dispatches. */
void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n);
void kern_softmax_avx2(float *x, int n);
/* dot(a, b) over n floats, n a multiple of 8. */
float kern_dot_avx2(const float *a, const float *b, int n);
/* AVX2 attention keeps one output row in registers: head_dim / 8 vectors. */
#define KERN_ATTN_MAX_HEAD_DIM 128
void kern_attention_rows_avx2(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows,
                              int pos0, const kern_kv_view *kv, int kv_head, int head_dim, float scale,
                              float *scratch);
/* y[i] += alpha * x[i] over n floats, n a multiple of 8. */
void kern_axpy_avx2(float *y, float alpha, const float *x, int n);
/* exp over n floats (n any): the vectorised exp used by silu and softmax,
 * exported so the tests can measure its error against libm. */
void kern_exp_avx2(float *out, const float *x, int n);

#endif
