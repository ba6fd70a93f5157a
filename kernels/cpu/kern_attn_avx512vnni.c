/* kern_attn_avx512vnni.c - the attention of kern_attn_x.h at 16 lanes over a
 * q8_0 or q4_0 cache, with the scores in integers (ATT_VNNI: each query
 * quantized to int8 per 32 values, vpdpbusd against K's codes; see the
 * header). The softmax and the weighted V sum are the AVX-512 file's.
 * Compiled with the AVX-512 VNNI flags; chosen for those dtypes and heads a
 * multiple of 64 at the avx512vnni level (kern_ops.c). */
#include "kernels/cpu/kern_internal.h"

#include "kernels/cpu/kern_attn_av16.h"

#define ATT_VNNI 1
#define ATT_FN kern_attention_rows_avx512vnni
#include "kernels/cpu/kern_attn_x.h"
