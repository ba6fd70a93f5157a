/* kern_attn_avx512.c - the attention of kern_attn_x.h at 16 lanes: a K
 * row of head_dim 256 is 16 zmm and stays in registers (at 8 lanes it is 32
 * ymm and spills), and every dot, axpy and conversion is half as many
 * instructions. Compiled with the AVX-512 flags; the softmax stays AVX2. */
#include "kernels/cpu/kern_internal.h"

#include "kernels/cpu/kern_attn_av16.h"

#define ATT_FN kern_attention_rows_avx512
#include "kernels/cpu/kern_attn_x.h"
