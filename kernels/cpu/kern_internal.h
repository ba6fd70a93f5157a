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

/* The integer weight formats of the int8 kernels (kern_matmul.c), as the
 * compile-time parameter K of the SIMD templates: each is one block of 32
 * integer weights q with a scale d (and an offset m where KERN_WK_M), so a
 * block's dot with int16 activations is an exact int32 and the float part is
 * the same for all four. Q4_0 runs as Q8_0 with q = nibble - 8, Q4_1 as
 * Q8_0M with q = nibble: the same integers, scales and offsets that
 * kern_requantize_row_q8 writes, hence the same results bit for bit. */
/* Q5_0 and Q5_1 (X8 forms only: Q5_0X8, Q5_1X8) run as Q8_0 with q = code -
 * 16 and as Q8_0M with q = code: the 4-bit X8 layout plus a plane of the
 * codes' fifth bits (kern_types.h). */
/* IQ4_NL (X8 form only: IQ4_NLX8) runs as Q8_0 with q = the IQ4 table's
 * value of the nibble (KERN_WK_LUT: a 16-entry byte shuffle). */
enum {
    KERN_WK_Q8_0,
    KERN_WK_Q8_0M,
    KERN_WK_Q4_0,
    KERN_WK_Q4_1,
    KERN_WK_Q5_0,
    KERN_WK_Q5_1,
    KERN_WK_IQ4NL,
    KERN_WK_Q6S
};
/* Q6_0S (X8 form only) runs as two Q8_0 half-blocks: q = code - 32 (6-bit
 * codes from nibbles and two bit planes, minus 32 in the lanes), an integer
 * sum over values 0..15 scaled by da, one over 16..31 by db:
 *     acc = fma(isum_a, da * d_x, acc);  acc = fma(isum_b, db * d_x, acc) */
/* Block bytes: 34, 36, 18, 20, 22, 24, 18, 28. */
#define KERN_WK_BB(K)                                                                              \
    ((K) == KERN_WK_Q8_0                           ? sizeof(kern_block_q8_0)                       \
     : (K) == KERN_WK_Q8_0M                        ? sizeof(kern_block_q8_0m)                      \
     : (K) == KERN_WK_Q4_0 || (K) == KERN_WK_IQ4NL ? sizeof(kern_block_q4_0)                       \
     : (K) == KERN_WK_Q4_1                         ? sizeof(kern_block_q4_1)                       \
     : (K) == KERN_WK_Q5_0                         ? (size_t)22                                    \
     : (K) == KERN_WK_Q5_1                         ? (size_t)24                                    \
                                                   : (size_t)28)
/* 1 if the block carries an offset m (at byte 2), which puts qs at byte 4. */
#define KERN_WK_M(K) ((K) == KERN_WK_Q8_0M || (K) == KERN_WK_Q4_1 || (K) == KERN_WK_Q5_1)
#define KERN_WK_QO(K) ((size_t)(KERN_WK_M(K) ? 4 : 2))
/* 1 if the X8 form holds the codes as nibbles (two value pairs per 16
 * bytes); KERN_WK_H5: and a plane of fifth bits after them. */
#define KERN_WK_H6(K) ((K) == KERN_WK_Q6S)
#define KERN_WK_H5(K) ((K) == KERN_WK_Q5_0 || (K) == KERN_WK_Q5_1 || KERN_WK_H6(K))
/* 1 for the two-scale block (Q6_0S). */
#define KERN_WK_S2(K) ((K) == KERN_WK_Q6S)
#define KERN_WK_LUT(K) ((K) == KERN_WK_IQ4NL)
#define KERN_WK_NIB(K)                                                                             \
    ((K) == KERN_WK_Q4_0 || (K) == KERN_WK_Q4_1 || KERN_WK_H5(K) || KERN_WK_LUT(K))
/* The IQ4 table (kern_kquant.h), for the byte shuffles. */
extern const int8_t kern_iq4_values[16];
/* Offset of d[8] in an X8 group block: after the codes (and the bit plane). */
#define KERN_WK_X8_DOFF(K)                                                                         \
    ((size_t)(KERN_WK_H6(K) ? 192 : KERN_WK_H5(K) ? 160 : KERN_WK_NIB(K) ? 128 : 256))
/* The code bias subtracted in the integer sum (Q4_0: 8, Q5_0: 16, else 0). */
#define KERN_WK_BIAS(K) ((K) == KERN_WK_Q4_0 ? 8 : (K) == KERN_WK_Q5_0 ? 16 : 0)

/* 1 for the weight types the int8 kernels run (Q8_0, Q8_0M, Q4_0, Q4_1 and
 * every X8 form): the table's matmul_int. */
static inline int kern_is_int_weight(kern_type t) {
    return kern_type_traits_of(t)->matmul_int;
}

/* One matmul call as the row kernels see it. For the integer weight types
 * (Q8_0, Q8_0M, Q4_0, Q4_1) the activations have already been quantized per
 * 32-block to int16 (kern_quantize_act_*): xq holds n_tok rows of n_in int16
 * (row stride n_in), and xd / xs the blocks' scale d and offset term
 * s = d * sum(q) as floats laid out [n_in/32][n_tok] (block-major, so the
 * values of a tile of consecutive tokens are adjacent and load as one
 * vector). At the AVX2 level
 * the rows of tokens 2p and 2p+1 (for 2p + 1 < n_tok) are interleaved into a
 * "paired" layout that its kernels read (kern_matmul_avx2.c) when n_tok <
 * KERN_AVX2_PLAIN_MIN_TOK; a last odd token, every token of a longer batch
 * (whose AVX2 kernel broadcasts pairs of values from plain rows) and every
 * token at the other levels are stored plainly. For the float types x is
 * used directly. 10: with the next tile prefetched, the 2x4 tiles (a pass
 * over the weights per 4 tokens, later passes from L2) beat the repacking
 * below 10 tokens (SmolLM2 int8 49152x576, 2 threads: 6-9 tokens 11-27%
 * faster than repacked; equal from 10 on; it was 6 before the prefetch). */
#define KERN_AVX2_PLAIN_MIN_TOK 10
typedef struct kern_mm_args {
    kern_type wt;
    const uint8_t *W;
    size_t row_bytes; /* kern_row_bytes(wt, n_in) */
    int n_out, n_in, n_tok;
    const float *x;    /* [n_tok][n_in], float types */
    const int16_t *xq; /* [n_tok][n_in], integer types */
    const float *xd;   /* [n_in/32][n_tok], integer types */
    const float *xs;   /* [n_in/32][n_tok], integer types */
    const int32_t *xi; /* [n_in/32][n_tok], integer types: sum(q) of the block */
    float *y;          /* [n_tok][n_out] */
    /* The calling thread's scratch for the AVX-512 X8 long-batch tiles
     * (kern_avx512_x8.h) and the AMX weight panels, or NULL; not owned. */
    uint8_t *wide;
    size_t wide_bytes;
    /* At the amx level (X8 weights): xq split into its high bytes xh
     * (signed, q >> 8) and low bytes xl (unsigned, q & 255), q = 256 xh + xl,
     * each [kern_amx_tok_pad(n_tok)][n_in] with zero rows after n_tok (the
     * A operands of TDPBSSD and TDPBUSD); NULL elsewhere. */
    const int8_t *xh;
    const uint8_t *xl;
} kern_mm_args;

/* The AMX X8 kernels (kern_matmul_amx.c): tiles of KERN_AMX_TT tokens, so
 * the activation planes hold the token count rounded up to it. The kernel
 * table runs them from KERN_AMX_MIN_TOK tokens (below, AVX-512 VNNI: the
 * same bits). */
#define KERN_AMX_TT 16
#define KERN_AMX_MIN_TOK 16
static inline int kern_amx_tok_pad(int n_tok) {
    return (n_tok + KERN_AMX_TT - 1) / KERN_AMX_TT * KERN_AMX_TT;
}

/* The AVX-512 X8 long-batch tiles: from this many tokens on, a chunk of a
 * task's groups is decoded once into KERN_X8_WIDE_PB bytes per pair of groups
 * and block (16 zmm of int16 value pairs, then d and m as f32) in a
 * per-thread scratch of KERN_X8_WIDE_BYTES, if 4 groups fit (n_in up to
 * KERN_X8_WIDE_BYTES / 2304 * 32: 7264 at 512 KiB). */
#define KERN_X8_WIDE_MIN_TOK 32
/* Up to this many tokens the X8 kernels stream each row once (the decode
 * kernel with T tokens: a batch of a few decoding sequences, or one with its
 * speculative proposals, reads the weights once), above it they run
 * cache-blocked tiles: 3 at AVX2 (16 ymm), 6 at AVX-512 (32 zmm). */
#define KERN_X8_STREAM_MAX_TOK 3
#define KERN_X8Z_STREAM_MAX_TOK 6
#define KERN_X8_WIDE_PB 640
#define KERN_X8_WIDE_BYTES ((size_t)512 * 1024)

/* Computes y[t][o] for every t < n_tok and o in [r0, r1). Each (t, o) is a
 * function of row o of W and row t of x alone, computed with one fixed
 * instruction sequence whatever r0, r1 and n_tok are (batch invariance). */
typedef void (*kern_mm_rows_fn)(const kern_mm_args *a, int r0, int r1);

void kern_mm_rows_scalar(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx2(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512(const kern_mm_args *a, int r0, int r1);
void kern_mm_rows_avx512vnni(const kern_mm_args *a, int r0, int r1);
/* X8 weights with a->xh, a->xl and a->wide set: AMX tiles; anything else
 * (float or row-major weights, no scratch, rows too long for it): the
 * avx512vnni kernels, which give the same bits. */
void kern_mm_rows_amx(const kern_mm_args *a, int r0, int r1);
/* How many kern_mm_rows_amx calls ran the tiles (not the fallback) in this
 * process: the tests check the AMX path ran. */
long kern_amx_runs(void);

/* Quantizes one activation row of n floats (n a multiple of 32) for the
 * int8-weight matmul, per block of 32:
 *     amax = max |x|,  d = amax / 32767 (0 if that is below FLT_MIN),
 *     q = rint(x * (1 / d)) in [-32767, 32767] (round to nearest even),
 *     s = d * (float)sum(q)
 * q goes to q[n], d, s and sum(q) to d[b * stride], s[b * stride] and
 * qsum[b * stride]. The AVX2 version computes the same values bit for bit
 * (tested) and with slot = -1 stores them the same way; slot 0 or 1 stores
 * them as token 0 or 1 of the paired rows starting at q (2n values, see
 * kern_matmul_avx2.c). */
void kern_quantize_act_scalar(const float *x, int n, int16_t *q, float *d, float *s, int32_t *qsum,
                              int stride);
void kern_quantize_act_avx2(const float *x, int n, int16_t *q, float *d, float *s, int32_t *qsum,
                            int stride, int slot);

/* Row-op SIMD versions (kern_ops_avx2.c); kern_ops.c dispatches. */
void kern_fp32_to_fp16_row_avx2(uint16_t *dst, const float *src, int n);
void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n);
void kern_gelu_tanh_mul_avx2(float *out, const float *gate, const float *up, int n);
void kern_softmax_avx2(float *x, int n);
/* dot(a, b) over n floats, n a multiple of 8. */
float kern_dot_avx2(const float *a, const float *b, int n);
/* AVX2 attention (kern_attention_rows_gqa's contract) keeps one K row in
 * registers, head_dim / 8 vectors (up to 128 dims; Gemma's 256 spill to
 * L1, still ~20x the portable C path on Gemma 3 270M prefill). */
#define KERN_ATTN_MAX_HEAD_DIM 256
/* row_pf > 0: also prefetch the whole cache rows, row_pf elements from KV
 * head 0, into L2 as phase 1 walks them (kern_attention_rows_all). */
void kern_attention_rows_avx2(float *out, size_t out_stride, const float *q, size_t q_stride,
                              int n_rows, int n_heads, int pos0, const kern_kv_view *kv,
                              int kv_head, int head_dim, float scale, float *scratch, int row_pf);
/* The same at 16 lanes (AVX-512F, head_dim a multiple of 16): its own bits,
 * used at the AVX-512 levels for every batch size alike. */
void kern_attention_rows_avx512(float *out, size_t out_stride, const float *q, size_t q_stride,
                                int n_rows, int n_heads, int pos0, const kern_kv_view *kv,
                                int kv_head, int head_dim, float scale, float *scratch, int row_pf);
/* The same over a q8_0 or q4_0 cache with integer scores (AVX-512 VNNI,
 * head_dim a multiple of 64): the queries quantized to int8 per 32 values,
 * its own bits (within test_kern_kv's bound of the reference), used at the
 * avx512vnni level for every batch size alike. */
void kern_attention_rows_avx512vnni(float *out, size_t out_stride, const float *q, size_t q_stride,
                                    int n_rows, int n_heads, int pos0, const kern_kv_view *kv,
                                    int kv_head, int head_dim, float scale, float *scratch,
                                    int row_pf);
/* y[i] += alpha * x[i] over n floats, n a multiple of 8. */
void kern_axpy_avx2(float *y, float alpha, const float *x, int n);
/* exp over n floats (n any): the vectorised exp used by silu and softmax,
 * exported so the tests can measure its error against libm. */
void kern_exp_avx2(float *out, const float *x, int n);

#endif
