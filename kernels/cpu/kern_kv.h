/* kern_kv.h - the KV cache's element types (--kv-cache-dtype): one row of
 * facts per dtype, the one rule for the bytes a block of positions takes,
 * and the quantization a K or V row goes through when it is stored.
 *
 * The dtypes. f32 and f16 store every value (f16: IEEE half, round to
 * nearest even). The quantized ones store codes and fp16 scales, a scale per
 * group of values of ONE position and ONE KV head, so writing a position
 * never touches another's codes or scales (prefix caching, copy on write and
 * batch invariance stay as for floats):
 *   q8_0  groups of 32, d = max|x| / 127, q = round(x / d), x' = d * q
 *         (llama.cpp's Q8_0 rule: kern_quantize_row(KERN_TYPE_Q8_0));
 *   q4_0  groups of 32, d = m / -8 with m the value of largest magnitude,
 *         nibble = min(15, trunc(x / d + 8.5)), x' = d * (nibble - 8)
 *         (llama.cpp's Q4_0 rule: kern_quantize_row(KERN_TYPE_Q4_0));
 *   int8  one group per head (head_dim values), the q8_0 rule;
 *   fp8   one group per head, d = max|x| / 448, the code = fp8 e4m3 of
 *         x / d rounded to nearest even and saturated to +-448
 *         (kern_fp8_e4m3_from_f32), x' = d * e4m3.
 * d is computed in f32 and stored as fp16 (the quantization uses the f32
 * 1 / d, as llama.cpp does); x' = fp16(d) * code is exact in f32 (an 11-bit
 * times an 8-bit or 4-bit significand), so every kernel that dequantizes
 * gets the same floats as kern_kv_dequantize.
 * q8_0 and q4_0 have CPU kernels at every SIMD level; int8 and fp8 have CUDA
 * kernels (the table's cpu/cuda columns); a device refuses the others.
 *
 * Layout. A pool holds blocks of block_size positions per layer
 * ("layer-blocks", kv_cache.h places them). A float layer-block is
 * block_size rows of kv_dim elements. A quantized one is two planes, then
 * padding to 16 bytes:
 *   codes:  block_size rows of kv_dim codes, row r at byte r * kv_dim * bits / 8
 *           (q4_0: value v of a 32-group in the low nibble of byte v for
 *           v < 16, in the high nibble of byte v - 16 otherwise, as GGML);
 *   scales: at byte scale_off = block_size * kv_dim * bits / 8, block_size
 *           rows of kv_dim / group fp16 scales.
 * So value e of a layer-block (e = row * kv_dim + head * head_dim + d) has
 * its code at e * bits / 8 and its scale at scale_off + 2 * (e / group). A
 * 16-byte multiple keeps every layer-block, row and head of codes 16-byte
 * aligned (kv_dim is a multiple of 32, or of 16 for int8 and fp8) for the
 * GPU's vector loads, at no cost in bytes for 16-position blocks (SmolLM2's
 * int8 layer-block: 3168 bytes; rounded to 64 it would be 3200).
 *
 * Units. kv_cache.h's strides and offsets count the pool's units: elements
 * for f32 and f16, bytes for the quantized dtypes (kern_kv_unit_bytes).
 *
 * Everything here is pure (no allocation, no state); the CUDA files include
 * this header too. */
#ifndef KERN_KV_H
#define KERN_KV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kern_kv_dtype {
    KERN_KV_F32 = 0, /* 0 and 1: the values of the older f16 flag */
    KERN_KV_F16 = 1,
    KERN_KV_Q8_0 = 2,
    KERN_KV_Q4_0 = 3,
    KERN_KV_INT8 = 4,
    KERN_KV_FP8 = 5,
    KERN_KV_N_DTYPES
} kern_kv_dtype;

/* Values per scale of q8_0 and q4_0. */
#define KERN_KV_QK 32

typedef struct kern_kv_traits {
    const char *name;  /* as --kv-cache-dtype spells it */
    const char *alias; /* a second accepted spelling, or NULL (fp8: "fp8_e4m3") */
    uint8_t elem;      /* bytes per value of the float dtypes; 0: quantized */
    uint8_t bits;      /* bits per code of the quantized dtypes; 0: floats */
    uint8_t group;     /* values per scale: KERN_KV_QK, or 0: one per head */
    uint8_t cpu;       /* the CPU backend's kernels read it */
    uint8_t cuda;      /* the CUDA backend's kernels read it */
} kern_kv_traits;

/* The row of dtype t (any int: an unknown one gives a row named "unknown"
 * with no device). Static, never freed. */
const kern_kv_traits *kern_kv_traits_of(int t);
/* The name of dtype t ("unknown" for a bad one). */
const char *kern_kv_dtype_name(kern_kv_dtype t);
/* The dtype named s (a name or alias): 0 and *out set, or BRISK_EINVAL. */
int kern_kv_dtype_parse(const char *s, kern_kv_dtype *out);
/* The names the given device column accepts ("f16, int8, fp8"), for
 * messages: cuda = 0 the CPU's, 1 CUDA's. Static. */
const char *kern_kv_dtype_list(int cuda);
/* 1 for q8_0, q4_0, int8 and fp8. */
int kern_kv_is_quant(kern_kv_dtype t);

/* Whether dtype t can hold a model's rows of n_kv_heads heads of head_dim:
 * 0, or BRISK_EINVAL with a one-line reason in err (a group must not
 * straddle two heads: q8_0 and q4_0 need head_dim a multiple of 32; int8 and
 * fp8 a multiple of 16, so rows of codes stay 16-byte aligned). */
int kern_kv_check(kern_kv_dtype t, int n_kv_heads, int head_dim, char *err, size_t err_len);

/* Values per scale for this head size (group, or head_dim). */
static inline int kern_kv_group(kern_kv_dtype t, int head_dim) {
    const kern_kv_traits *tr = kern_kv_traits_of((int)t);
    return tr->group ? tr->group : head_dim;
}
/* Bytes of one unit of the pool's strides: 4, 2, or 1 for the quantized. */
size_t kern_kv_unit_bytes(kern_kv_dtype t);
/* THE rule for the bytes of a layer-block (block_size positions of one
 * layer, K or V alone): block_size * kv_dim * elem for the floats, the two
 * planes rounded up to 16 for the quantized. Every size the cache, the pool
 * sizing, admission and the CUDA pool use comes from here (kv_cache.h).
 * 0 for a bad argument or an overflow. */
size_t kern_kv_layer_block_bytes(kern_kv_dtype t, int kv_dim, int head_dim, int block_size);
/* Quantized: the byte offset of the scale plane in a layer-block; 0 for
 * the floats. */
size_t kern_kv_scale_off(kern_kv_dtype t, int kv_dim, int block_size);

/* ---- one row: quantize and dequantize (the C references) ------------------ */

/* n values x (a multiple of group) into codes (n * bits / 8 bytes) and
 * n / group fp16 scales, by t's rule above. t quantized. */
void kern_kv_quantize(kern_kv_dtype t, const float *x, int n, int group, uint8_t *codes,
                      uint16_t *scales);
/* The inverse: out[i] = fp16(d) * code, the floats every kernel reads. */
void kern_kv_dequantize(kern_kv_dtype t, const uint8_t *codes, const uint16_t *scales, int n,
                        int group, float *out);
/* Code i of a quantized row as its integer (q8_0, int8), nibble - 8 (q4_0)
 * or its fp8 value (fp8), times nothing: out = scale * this. */
float kern_kv_code_value(kern_kv_dtype t, const uint8_t *codes, int i);

/* fp8 e4m3 (OCP / NVIDIA __nv_fp8_e4m3, no infinities, max 448): x rounded
 * to nearest even and saturated to +-448 (NaN -> 0x7f, sign kept), the
 * value of a code. Exact inverse on codes of finite values. */
uint8_t kern_fp8_e4m3_from_f32(float x);
float kern_fp8_e4m3_to_f32(uint8_t c);

#ifdef __cplusplus
}
#endif

#endif
