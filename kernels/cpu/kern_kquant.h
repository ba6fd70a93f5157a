/* kern_kquant.h - the GGML block types brisk reads from files but does not
 * multiply as stored: Q5_0, Q5_1, the K-quants (Q2_K .. Q6_K) and IQ4_NL /
 * IQ4_XS. Each has a plain C dequantize reference (what every other form of
 * the tensor is measured against) and a conversion into a form the matmul
 * kernels run (kern_kq_run_type).
 *
 * Layouts (GGML's, byte for byte; fp16 fields little-endian; "value i" is
 * element i of the block):
 *   Q5_0  (32 values, 22 bytes): fp16 d; u8 qh[4]; u8 qs[16]
 *         q_i = nibble_i | bit_i(qh as a LE u32) << 4; x_i = d * (q_i - 16)
 *         nibble_i: qs[i] low nibble for i < 16, qs[i - 16] high nibble else
 *   Q5_1  (32, 24): fp16 d, m; u8 qh[4]; u8 qs[16]     x_i = d * q_i + m
 *   IQ4_NL (32, 18): fp16 d; u8 qs[16]   x_i = d * KV[nibble_i]
 *         KV = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,53,69,89,113}
 * Super-blocks of 256 values (QK_K):
 *   Q2_K  (84):  u8 scales[16]; u8 qs[64]; fp16 d, dmin
 *         i = 128 h + 32 s + l: q = qs[32 h + l] >> 2 s & 3;
 *         x_i = d * (scales[i/16] & 15) * q - dmin * (scales[i/16] >> 4)
 *   Q3_K  (110): u8 hmask[32]; u8 qs[64]; u8 scales[12]; fp16 d
 *         low 2 bits as Q2_K; high bit = hmask[i % 32] >> (i / 32) & 1;
 *         q = low - (high ? 0 : 4); 16 six-bit scales (low nibbles in bytes
 *         0..7, j < 8 low and j >= 8 high nibble of byte j % 8; top 2 bits
 *         of scale j in byte 8 + j % 4 at bit 2 (j / 4)); x_i = d * (sc - 32) * q
 *   Q4_K  (144): fp16 d, dmin; u8 scales[12]; u8 qs[128]
 *         8 sub-blocks j of 32 with 6-bit scale sc_j and min m_j (packed as
 *         kq_scale_min unpacks them); i = 64 c + 32 hi + l:
 *         q = qs[32 c + l] >> 4 hi & 15; x_i = d * sc_j * q - dmin * m_j
 *   Q5_K  (176): fp16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *         as Q4_K plus bit 4 of q = qh[l] >> j & 1 (j = i / 32, l = i % 32)
 *   Q6_K  (210): u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d
 *         i = 128 h + 64 s + k (k < 64): low = ql[64 h + k] >> 4 s & 15;
 *         i = 128 h + 32 t + l: high = qh[32 h + l] >> 2 t & 3;
 *         x_i = d * scales[i/16] * ((low | high << 4) - 32)
 *   IQ4_XS (136): fp16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
 *         sub-block j of 32: ls = (scales_l[j/2] >> 4 (j%2) & 15) |
 *         (scales_h >> 2 j & 3) << 4; value k < 16: qs[16 j + k] low
 *         nibble, k >= 16: qs[16 j + k - 16] high; x = d * (ls - 32) * KV[.]
 */
#ifndef KERN_KQUANT_H
#define KERN_KQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

#define KERN_QK_K 256

/* 1 for the nine types above. */
int kern_kq_is(kern_type t);
/* Values per block (32 or 256) and bytes per block, for the nine and for
 * brisk's Q6_0S (32, 28: kern_types.h); 0 for other types. */
int kern_kq_block_size(kern_type t);
size_t kern_kq_block_bytes(kern_type t);

/* The reference: n values (a multiple of the block size) of t (or Q6_0S) as floats,
 * computed in f32 as GGML does (d * sc first, then times q, minus the min). */
void kern_kq_dequantize_row(kern_type t, const void *src, float *dst, int64_t n);

/* The row-major form the CPU's matmul kernels run for t when the weights
 * are `auto`: Q5_0, IQ4_NL, IQ4_XS -> Q8_0; Q5_1, Q5_K -> Q8_0M; Q4_K ->
 * Q4_1; Q2_K, Q3_K, Q6_K -> Q8_0. (The CPU backend keeps Q5_0, Q5_1 and
 * IQ4_NL as stored and makes IQ4_XS IQ4_NL, Q5_K Q5_1 and Q3_K and Q6_K
 * Q6_0S where their X8 forms apply, models/model.c.) */
kern_type kern_kq_run_type(kern_type t);

/* Converts a row of n values of src_type into dst_type without going
 * through a requantization, where the target holds the values:
 *   exact:  Q5_0 -> Q8_0 (q - 16, same d), Q5_1 -> Q8_0M (q, same d and m),
 *           IQ4_NL -> Q8_0 (KV[q], same d);
 *   scales rounded to fp16 (relative error <= 2^-11 per block scale, the
 *   quants exact): IQ4_XS -> Q8_0 and IQ4_XS -> IQ4_NL (d * (ls - 32) per
 *   32 values, the nibbles as they are), Q6_K -> Q6_0S (d * sc per 16
 *   values), Q3_K -> Q6_0S (d * (sc - 32) per 16 values, code q - 4 + 32),
 *   Q5_K -> Q5_1 (d * sc, -dmin * m per 32), Q4_K -> Q4_1 and
 *   Q4_K, Q5_K -> Q8_0M (d * sc_j and -dmin * m_j per 32 values).
 * Returns 0, or -1 (dst untouched) for any other pair; the caller then
 * dequantizes to f32 and quantizes (Q2_K, Q3_K and Q6_K to Q8_0: their 16-
 * value sub-blocks carry two scales in each 32-value block). */
int kern_kq_convert_row(kern_type src_type, const void *src, kern_type dst_type, void *dst,
                        int64_t n);

#endif
