/* kern_cvt.h - bulk conversions between the float storage types, for loading
 * weights: bf16 -> f16 (what --weights auto makes of a bf16 checkpoint),
 * bf16 -> f32, and a type onto itself (a copy).
 *
 * The contract is the scalar conversions' bits: kern_cvt_row(s, src, d, dst,
 * n) writes exactly what kern_dequantize_row(s) followed by
 * kern_quantize_row(d) writes, for every input, NaN included (its top
 * mantissa bits kept and never quieted, as kern_fp32_to_fp16 does; the F16C
 * instructions alone would quiet a signalling one). Every SIMD level is
 * tested against kern_cvt_row_ref on every bf16 value and on random rows
 * (test_kern_cvt.c).
 *
 * src and dst may have any alignment (a safetensors tensor starts at any
 * byte) and must not overlap. Where dst is aligned to the vector (the
 * model's 64-byte aligned buffers) the SIMD levels write with non-temporal
 * stores, fenced before the calls return: made for weights, written once at
 * load and not read again before the first forward pass. */
#ifndef KERN_CVT_H
#define KERN_CVT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

/* Converts n values from src_type at src to dst_type at dst, at the best
 * level at or below kern_cpu_level(). Returns 0, or -1 for a pair it does
 * not convert (nothing is written; the caller goes through f32): the pairs
 * are BF16 -> F16, BF16 -> F32 and F32, F16 or BF16 onto itself. */
int kern_cvt_row(kern_type src_type, const void *src, kern_type dst_type, void *dst, int64_t n);

/* n_rows rows of n values: dst row r (at dst + r * dst_stride bytes) from
 * src row src_rows[r] (src_rows NULL: row r) at src + src_rows[r] *
 * src_stride, as kern_cvt_row would convert each, with one fence at the
 * end. Same pairs and return values; with n_rows 0 it reads nothing and
 * only answers whether it converts the pair. */
int kern_cvt_rows(kern_type src_type, const void *src, size_t src_stride, const int64_t *src_rows,
                  kern_type dst_type, void *dst, size_t dst_stride, int64_t n, int64_t n_rows);

/* The readable reference: one value at a time through kern_bf16_to_fp32 and
 * kern_fp32_to_fp16. Same pairs and return values. */
int kern_cvt_row_ref(kern_type src_type, const void *src, kern_type dst_type, void *dst, int64_t n);

#endif
