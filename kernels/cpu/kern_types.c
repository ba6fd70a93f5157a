/* kern_types.c - the type table (kern_type_traits: one row per type, every
 * fact about it), fp16/bf16 conversions, row (de)quantization and the X8
 * packing.
 *
 * The conversions are plain integer bit manipulation so that they are exact
 * (round-to-nearest-even) on every machine and need no F16C; the matmul
 * kernels use F16C where they have it and agree with these bit for bit. */
#include "kernels/cpu/kern_types.h"

#include "common/brisk_error.h"
#include "kernels/cpu/kern_kquant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* ---- scalar conversions ------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kern_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN: keep the payload, shifted into place */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0)
        return bits_f32(sign);
    /* Subnormal half: man * 2^-24 is exact in float; 2^-24 is a power of two
     * so the product is exact too. */
    float v = (float)man * 0x1p-24f;
    return bits_f32(sign | f32_bits(v));
}

uint16_t kern_fp32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) { /* inf or NaN */
        if (a == 0x7f800000u)
            return sign | 0x7c00u;
        uint16_t man = (uint16_t)((a >> 13) & 0x3ffu);
        return sign | 0x7c00u | (man ? man : 0x200u); /* a NaN stays a NaN */
    }
    /* 65520 = max half (65504) + half an ulp (16): from there RNE gives inf. */
    if (a >= 0x477ff000u)
        return sign | 0x7c00u;
    if (a >= 0x38800000u) { /* >= 2^-14: normal half */
        uint32_t exp = (a >> 23) - 112;
        uint32_t man = a & 0x7fffffu;
        uint32_t h = (exp << 10) | (man >> 13);
        uint32_t rest = man & 0x1fffu; /* the 13 bits dropped */
        /* Round to nearest, ties to even; a carry out of the mantissa bumps
         * the exponent, which is the right answer (and 0x7c00 = inf at top). */
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++;
        return sign | (uint16_t)h;
    }
    /* Below 2^-14: subnormal half or zero. The half value is a * 2^24 rounded
     * to an integer number of 2^-24 units; shift the full 24-bit significand. */
    if (a < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 itself ties to 0) */
        return sign;
    uint32_t exp = a >> 23;                     /* 102 .. 112 */
    uint32_t sig = (a & 0x7fffffu) | 0x800000u; /* value = sig * 2^(exp-150) */
    uint32_t shift = 126 - exp;                 /* units of 2^-24: sig >> (126-exp) */
    uint32_t h = sig >> shift;
    uint32_t rest = sig & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1u)))
        h++;
    return sign | (uint16_t)h;
}

float kern_bf16_to_fp32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t kern_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- row conversions, one function per type ------------------------------ */

static void f32_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = kern_fp16_to_fp32(s[i]);
}

static void bf16_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = kern_bf16_to_fp32(s[i]);
}

static void q8_0_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const kern_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < KERN_QK; j++)
            dst[i * KERN_QK + j] = d * (float)b[i].qs[j];
    }
}

static void q4_0_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const kern_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < KERN_QK / 2; j++) {
            dst[i * KERN_QK + j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            dst[i * KERN_QK + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void q4_1_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const kern_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        float m = kern_fp16_to_fp32(b[i].m);
        for (int j = 0; j < KERN_QK / 2; j++) {
            dst[i * KERN_QK + j] = d * (float)(b[i].qs[j] & 0x0f) + m;
            dst[i * KERN_QK + j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* The same two operations as Q4_1, so a Q4_1 row converted by
 * kern_requantize_row_q8 dequantizes to the same floats. */
static void q8_0m_to_f32(kern_type t, const void *src, float *dst, int64_t n) {
    (void)t;
    const kern_block_q8_0m *b = src;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        float m = kern_fp16_to_fp32(b[i].m);
        for (int j = 0; j < KERN_QK; j++)
            dst[i * KERN_QK + j] = d * (float)b[i].qs[j] + m;
    }
}

/* A rounded quant as int8, pinned to [-127, 127], NaN as 0. Weights come
 * from files: a NaN or an infinity in a block makes x / d NaN (inf * 0) or
 * out of range, and converting such a float to an integer is undefined.
 * For finite weights q is already in range and passes unchanged. */
static int8_t q8_pin(float q) {
    if (q != q)
        return 0;
    return (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
}

/* The Q8_0 rule for one block: d = max|x| / 127, q = round-half-away(x / d)
 * computed as x * (1/d); |q| <= 127 because max|x| * (1/d) rounds to 127. */
static void quantize_block_q8_0(const float *x, kern_block_q8_0 *b) {
    float amax = 0.0f;
    for (int j = 0; j < KERN_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = kern_fp32_to_fp16(d);
    for (int j = 0; j < KERN_QK; j++)
        b->qs[j] = q8_pin(roundf(x[j] * id));
}

/* Q8_0M for one block: centre m first (rounded to fp16), then the step d
 * from the rounded m, rounded UP to fp16, so neither rounding costs range:
 * the extreme values land at |q| <= 127 and nothing is clipped (rounding d
 * to nearest could shrink it by 8% where it is an fp16 subnormal). */
static void quantize_block_q8_0m(const float *x, kern_block_q8_0m *b) {
    float min = x[0], max = x[0];
    for (int j = 1; j < KERN_QK; j++) {
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    b->m = kern_fp32_to_fp16(0.5f * (max + min));
    float m = kern_fp16_to_fp32(b->m);
    float dd = fmaxf(max - m, m - min) / 127.0f;
    b->d = kern_fp32_to_fp16(dd);
    if (kern_fp16_to_fp32(b->d) < dd)
        b->d++; /* the next larger half: dd >= 0, so the bits count up */
    float d = kern_fp16_to_fp32(b->d);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < KERN_QK; j++)
        b->qs[j] = q8_pin(roundf((x[j] - m) * id));
}

static void f32_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = kern_fp32_to_fp16(src[i]);
}

static void bf16_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = kern_fp32_to_bf16(src[i]);
}

static void q8_0_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    kern_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / KERN_QK; i++)
        quantize_block_q8_0(src + i * KERN_QK, &b[i]);
}

static void q8_0m_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    kern_block_q8_0m *b = dst;
    for (int64_t i = 0; i < n / KERN_QK; i++)
        quantize_block_q8_0m(src + i * KERN_QK, &b[i]);
}

/* GGML's rule: the signed value of largest magnitude maps to -8, so
 * d = max / -8 and q = x / d + 8 (truncated after +0.5), capped at 15. */
static void q4_0_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    kern_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        const float *x = src + i * KERN_QK;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < KERN_QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = kern_fp32_to_fp16(d);
        for (int j = 0; j < KERN_QK / 2; j++) {
            int q0 = (int)(x[j] * id + 8.5f);
            int q1 = (int)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* x = d * q + m with m = min and d = (max - min) / 15. */
static void q4_1_from_f32(kern_type t, const float *src, void *dst, int64_t n) {
    (void)t;
    kern_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        const float *x = src + i * KERN_QK;
        float min = x[0], max = x[0];
        for (int j = 1; j < KERN_QK; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        float d = (max - min) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = kern_fp32_to_fp16(d);
        b[i].m = kern_fp32_to_fp16(min);
        for (int j = 0; j < KERN_QK / 2; j++) {
            int q0 = (int)((x[j] - min) * id + 0.5f);
            int q1 = (int)((x[j + 16] - min) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Exact int8 forms (kern_requantize_row_q8). */
static int q4_0_to_int8(kern_type t, const void *src, void *dst, int64_t n) {
    kern_requantize_row_q8_0(t, src, dst, n);
    return 0;
}

/* Lossless: the nibble (0..15) is the int8 q, d and m carry over. */
static int q4_1_to_int8(kern_type t, const void *src, void *dst, int64_t n) {
    (void)t;
    const kern_block_q4_1 *b = src;
    kern_block_q8_0m *o = dst;
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        o[i].d = b[i].d;
        o[i].m = b[i].m;
        for (int j = 0; j < KERN_QK / 2; j++) {
            o[i].qs[j] = (int8_t)(b[i].qs[j] & 0x0f);
            o[i].qs[j + 16] = (int8_t)(b[i].qs[j] >> 4);
        }
    }
    return 0;
}

/* Q8_0 and Q8_0M are their own int8 form. */
static int int8_to_int8(kern_type t, const void *src, void *dst, int64_t n) {
    memcpy(dst, src, kern_row_bytes(t, n));
    return 0;
}

/* kern_kquant.h's types: converted, scales rounded to fp16 where they must. */
static int kq_to_int8(kern_type t, const void *src, void *dst, int64_t n) {
    return kern_kq_convert_row(t, src, kern_int8_type(t), dst, n);
}

/* ---- X8 block codes, one pair of functions per base layout ---------------- */

/* Where a base block's codes start: after d, and m (or Q6_0S's db). */
static int x8_has_m(kern_type base) {
    const kern_type_traits *r = kern_type_traits_of(base);
    return r->offset || r->two_scales;
}

/* Q8_0 { d, qs[32] }, Q8_0M { d, m, qs[32] }: the int8 q as bytes. */
static void x8_codes_q8(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK], uint16_t *d,
                        uint16_t *m) {
    const int has_m = x8_has_m(base);
    memcpy(d, blk, 2);
    if (has_m)
        memcpy(m, blk + 2, 2);
    memcpy(codes, blk + (has_m ? 4 : 2), KERN_QK);
}

static void x8_make_q8(kern_type base, const uint8_t codes[KERN_QK], uint16_t d, uint16_t m,
                       uint8_t *blk) {
    const int has_m = x8_has_m(base);
    memcpy(blk, &d, 2);
    if (has_m)
        memcpy(blk + 2, &m, 2);
    memcpy(blk + (has_m ? 4 : 2), codes, KERN_QK);
}

/* Q4_0 and IQ4_NL { d, qs[16] } (IQ4_NL's codes are table indices), Q4_1
 * { d, m, qs[16] }: the nibbles. */
static void x8_codes_q4(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK], uint16_t *d,
                        uint16_t *m) {
    const int has_m = x8_has_m(base);
    const uint8_t *qs = blk + (has_m ? 4 : 2);
    memcpy(d, blk, 2);
    if (has_m)
        memcpy(m, blk + 2, 2);
    for (int j = 0; j < KERN_QK / 2; j++) {
        codes[j] = qs[j] & 0x0f;
        codes[j + 16] = qs[j] >> 4;
    }
}

static void x8_make_q4(kern_type base, const uint8_t codes[KERN_QK], uint16_t d, uint16_t m,
                       uint8_t *blk) {
    const int has_m = x8_has_m(base);
    uint8_t *qs = blk + (has_m ? 4 : 2);
    memcpy(blk, &d, 2);
    if (has_m)
        memcpy(blk + 2, &m, 2);
    for (int j = 0; j < KERN_QK / 2; j++)
        qs[j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
}

/* Q5_0 { d, qh[4], qs[16] }, Q5_1 { d, m, qh[4], qs[16] }: codes 0..31. */
static void x8_codes_q5(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK], uint16_t *d,
                        uint16_t *m) {
    const int has_m = x8_has_m(base), o = has_m ? 4 : 2;
    memcpy(d, blk, 2);
    if (has_m)
        memcpy(m, blk + 2, 2);
    uint32_t qh = (uint32_t)blk[o] | (uint32_t)blk[o + 1] << 8 | (uint32_t)blk[o + 2] << 16 |
                  (uint32_t)blk[o + 3] << 24;
    for (int j = 0; j < KERN_QK / 2; j++) {
        codes[j] = (uint8_t)((blk[o + 4 + j] & 0x0f) | ((qh >> j) & 1) << 4);
        codes[j + 16] = (uint8_t)((blk[o + 4 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

static void x8_make_q5(kern_type base, const uint8_t codes[KERN_QK], uint16_t d, uint16_t m,
                       uint8_t *blk) {
    const int has_m = x8_has_m(base), o = has_m ? 4 : 2;
    memcpy(blk, &d, 2);
    if (has_m)
        memcpy(blk + 2, &m, 2);
    uint32_t qh = 0;
    for (int j = 0; j < KERN_QK; j++)
        qh |= (uint32_t)(codes[j] >> 4 & 1) << j;
    for (int k = 0; k < 4; k++)
        blk[o + k] = (uint8_t)(qh >> (8 * k));
    for (int j = 0; j < KERN_QK / 2; j++)
        blk[o + 4 + j] = (uint8_t)((codes[j] & 0x0f) | (codes[j + 16] & 0x0f) << 4);
}

/* Q6_0S { da, db (as m), qs[16], qh[8] }: codes 0..63. */
static void x8_codes_q6s(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK], uint16_t *d,
                         uint16_t *m) {
    (void)base;
    memcpy(d, blk, 2);
    memcpy(m, blk + 2, 2);
    for (int j = 0; j < KERN_QK; j++)
        codes[j] = (uint8_t)((j < 16 ? blk[4 + j] & 0x0f : blk[4 + j - 16] >> 4) |
                             ((blk[20 + j / 4] >> (2 * (j % 4))) & 3) << 4);
}

static void x8_make_q6s(kern_type base, const uint8_t codes[KERN_QK], uint16_t d, uint16_t m,
                        uint8_t *blk) {
    (void)base;
    memcpy(blk, &d, 2);
    memcpy(blk + 2, &m, 2);
    memset(blk + 4, 0, 24);
    for (int j = 0; j < KERN_QK; j++) {
        blk[4 + j % 16] |= (uint8_t)((codes[j] & 15) << (j < 16 ? 0 : 4));
        blk[20 + j / 4] |= (uint8_t)((codes[j] >> 4 & 3) << (2 * (j % 4)));
    }
}

/* ---- the table ------------------------------------------------------------- */

/* An X8 form of base: multiplied as stored, as integer weights; no row
 * conversions. It repeats its base's block size, bytes, offset and
 * two_scales (test_kern_traits checks they agree), so that the matmul
 * reads them for either form without a hop to the base. */
#define X8_ROW(nm, base, bytes, off, two)                                                          \
    {                                                                                              \
        .name = nm, .block_size = KERN_QK, .block_bytes = bytes, .matmul_ok = 1, .matmul_int = 1,  \
        .offset = off, .two_scales = two, .x8_base = base                                          \
    }

/* Rows by id (kern_types.h says what each field means). */
const kern_type_traits kern_type_table[KERN_TYPE_TABLE_SIZE] = {
    [KERN_TYPE_F32] = {.name = "f32",
                       .block_size = 1,
                       .block_bytes = 4,
                       .valid = 1,
                       .known = 1,
                       .matmul_ok = 1,
                       .to_f32 = f32_to_f32,
                       .from_f32 = f32_from_f32},
    [KERN_TYPE_F16] = {.name = "f16",
                       .block_size = 1,
                       .block_bytes = 2,
                       .valid = 1,
                       .known = 1,
                       .matmul_ok = 1,
                       .to_f32 = f16_to_f32,
                       .from_f32 = f16_from_f32},
    [KERN_TYPE_BF16] = {.name = "bf16",
                        .block_size = 1,
                        .block_bytes = 2,
                        .valid = 1,
                        .known = 1,
                        .matmul_ok = 1,
                        .to_f32 = bf16_to_f32,
                        .from_f32 = bf16_from_f32},
    [KERN_TYPE_Q8_0] = {.name = "q8_0",
                        .block_size = KERN_QK,
                        .block_bytes = sizeof(kern_block_q8_0),
                        .valid = 1,
                        .known = 1,
                        .matmul_ok = 1,
                        .matmul_int = 1,
                        .x8 = KERN_TYPE_Q8_0X8,
                        .int8 = KERN_TYPE_Q8_0,
                        .to_f32 = q8_0_to_f32,
                        .from_f32 = q8_0_from_f32,
                        .to_int8 = int8_to_int8,
                        .x8_codes = x8_codes_q8,
                        .x8_make = x8_make_q8},
    [KERN_TYPE_Q4_0] = {.name = "q4_0",
                        .block_size = KERN_QK,
                        .block_bytes = sizeof(kern_block_q4_0),
                        .valid = 1,
                        .known = 1,
                        .matmul_ok = 1,
                        .matmul_int = 1,
                        .x8 = KERN_TYPE_Q4_0X8,
                        .int8 = KERN_TYPE_Q8_0,
                        .to_f32 = q4_0_to_f32,
                        .from_f32 = q4_0_from_f32,
                        .to_int8 = q4_0_to_int8,
                        .x8_nibble = 1,
                        .x8_codes = x8_codes_q4,
                        .x8_make = x8_make_q4},
    [KERN_TYPE_Q4_1] = {.name = "q4_1",
                        .block_size = KERN_QK,
                        .block_bytes = sizeof(kern_block_q4_1),
                        .valid = 1,
                        .known = 1,
                        .matmul_ok = 1,
                        .matmul_int = 1,
                        .offset = 1,
                        .x8 = KERN_TYPE_Q4_1X8,
                        .int8 = KERN_TYPE_Q8_0M,
                        .to_f32 = q4_1_to_f32,
                        .from_f32 = q4_1_from_f32,
                        .to_int8 = q4_1_to_int8,
                        .x8_nibble = 1,
                        .x8_codes = x8_codes_q4,
                        .x8_make = x8_make_q4},
    /* kern_kquant.h's types: read from files, dequantized by its reference,
     * converted at load. */
    [KERN_TYPE_Q5_0] = {.name = "q5_0",
                        .block_size = KERN_QK,
                        .block_bytes = 22,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .x8 = KERN_TYPE_Q5_0X8,
                        .int8 = KERN_TYPE_Q8_0,
                        .kq_run = KERN_TYPE_Q8_0,
                        .to_f32 = kern_kq_dequantize_row,
                        .to_int8 = kq_to_int8,
                        .x8_nibble = 1,
                        .x8_planes = 1,
                        .x8_codes = x8_codes_q5,
                        .x8_make = x8_make_q5},
    [KERN_TYPE_Q5_1] = {.name = "q5_1",
                        .block_size = KERN_QK,
                        .block_bytes = 24,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .offset = 1,
                        .x8 = KERN_TYPE_Q5_1X8,
                        .int8 = KERN_TYPE_Q8_0M,
                        .kq_run = KERN_TYPE_Q8_0M,
                        .to_f32 = kern_kq_dequantize_row,
                        .to_int8 = kq_to_int8,
                        .x8_nibble = 1,
                        .x8_planes = 1,
                        .x8_codes = x8_codes_q5,
                        .x8_make = x8_make_q5},
    [KERN_TYPE_IQ4_NL] = {.name = "iq4_nl",
                          .block_size = KERN_QK,
                          .block_bytes = 18,
                          .valid = 1,
                          .known = 1,
                          .kquant = 1,
                          .x8 = KERN_TYPE_IQ4_NLX8,
                          .int8 = KERN_TYPE_Q8_0,
                          .kq_run = KERN_TYPE_Q8_0,
                          .to_f32 = kern_kq_dequantize_row,
                          .to_int8 = kq_to_int8,
                          .x8_nibble = 1,
                          .x8_codes = x8_codes_q4,
                          .x8_make = x8_make_q4},
    [KERN_TYPE_Q2_K] = {.name = "q2_K",
                        .block_size = KERN_QK_K,
                        .block_bytes = 84,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .kq_run = KERN_TYPE_Q8_0,
                        .to_f32 = kern_kq_dequantize_row},
    [KERN_TYPE_Q3_K] = {.name = "q3_K",
                        .block_size = KERN_QK_K,
                        .block_bytes = 110,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .kq_run = KERN_TYPE_Q8_0,
                        .to_f32 = kern_kq_dequantize_row},
    [KERN_TYPE_Q4_K] = {.name = "q4_K",
                        .block_size = KERN_QK_K,
                        .block_bytes = 144,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .int8 = KERN_TYPE_Q8_0M,
                        .kq_run = KERN_TYPE_Q4_1,
                        .to_f32 = kern_kq_dequantize_row,
                        .to_int8 = kq_to_int8},
    [KERN_TYPE_Q5_K] = {.name = "q5_K",
                        .block_size = KERN_QK_K,
                        .block_bytes = 176,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .int8 = KERN_TYPE_Q8_0M,
                        .kq_run = KERN_TYPE_Q8_0M,
                        .to_f32 = kern_kq_dequantize_row,
                        .to_int8 = kq_to_int8},
    [KERN_TYPE_Q6_K] = {.name = "q6_K",
                        .block_size = KERN_QK_K,
                        .block_bytes = 210,
                        .valid = 1,
                        .known = 1,
                        .kquant = 1,
                        .kq_run = KERN_TYPE_Q8_0,
                        .to_f32 = kern_kq_dequantize_row},
    [KERN_TYPE_IQ4_XS] = {.name = "iq4_xs",
                          .block_size = KERN_QK_K,
                          .block_bytes = 136,
                          .valid = 1,
                          .known = 1,
                          .kquant = 1,
                          .int8 = KERN_TYPE_Q8_0,
                          .kq_run = KERN_TYPE_Q8_0,
                          .to_f32 = kern_kq_dequantize_row,
                          .to_int8 = kq_to_int8},
    /* brisk's own types, never in a file. */
    [KERN_TYPE_Q8_0M] = {.name = "q8_0m",
                         .block_size = KERN_QK,
                         .block_bytes = sizeof(kern_block_q8_0m),
                         .known = 1,
                         .matmul_ok = 1,
                         .matmul_int = 1,
                         .offset = 1,
                         .x8 = KERN_TYPE_Q8_0MX8,
                         .int8 = KERN_TYPE_Q8_0M,
                         .to_f32 = q8_0m_to_f32,
                         .from_f32 = q8_0m_from_f32,
                         .to_int8 = int8_to_int8,
                         .x8_codes = x8_codes_q8,
                         .x8_make = x8_make_q8},
    [KERN_TYPE_Q6_0S] = {.name = "q6_0s",
                         .block_size = KERN_QK,
                         .block_bytes = 28,
                         .known = 1,
                         .kquant = 1,
                         .two_scales = 1,
                         .x8 = KERN_TYPE_Q6_0SX8,
                         .to_f32 = kern_kq_dequantize_row,
                         .x8_nibble = 1,
                         .x8_planes = 2,
                         .x8_codes = x8_codes_q6s,
                         .x8_make = x8_make_q6s},
    /* The X8 forms (X8_ROW). */
    [KERN_TYPE_Q8_0X8] = X8_ROW("q8_0x8", KERN_TYPE_Q8_0, sizeof(kern_block_q8_0), 0, 0),
    [KERN_TYPE_Q8_0MX8] = X8_ROW("q8_0mx8", KERN_TYPE_Q8_0M, sizeof(kern_block_q8_0m), 1, 0),
    [KERN_TYPE_Q4_0X8] = X8_ROW("q4_0x8", KERN_TYPE_Q4_0, sizeof(kern_block_q4_0), 0, 0),
    [KERN_TYPE_Q4_1X8] = X8_ROW("q4_1x8", KERN_TYPE_Q4_1, sizeof(kern_block_q4_1), 1, 0),
    [KERN_TYPE_Q5_0X8] = X8_ROW("q5_0x8", KERN_TYPE_Q5_0, 22, 0, 0),
    [KERN_TYPE_Q5_1X8] = X8_ROW("q5_1x8", KERN_TYPE_Q5_1, 24, 1, 0),
    [KERN_TYPE_IQ4_NLX8] = X8_ROW("iq4_nlx8", KERN_TYPE_IQ4_NL, 18, 0, 0),
    [KERN_TYPE_Q6_0SX8] = X8_ROW("q6_0sx8", KERN_TYPE_Q6_0S, 28, 0, 1),
};

const kern_type_traits kern_type_unknown = {.name = "unknown", .block_size = 1};

/* ---- facts --------------------------------------------------------------- */

int kern_type_parse(const char *name, kern_type *out) {
    for (int t = 0; name && t < KERN_TYPE_TABLE_SIZE; t++)
        if (kern_type_table[t].name && strcmp(kern_type_table[t].name, name) == 0) {
            *out = (kern_type)t;
            return 0;
        }
    return BRISK_EINVAL;
}

/* Q8_0M is deliberately not valid: the GGUF reader and writer accept
 * exactly the ids this returns 1 for, and Q8_0M is no GGML type. */
int kern_type_valid(uint32_t type) {
    return kern_type_traits_of(type)->valid;
}

int kern_type_known(uint32_t type) {
    return kern_type_traits_of(type)->known;
}

int kern_type_matmul_ok(uint32_t type) {
    return kern_type_traits_of(type)->matmul_ok;
}

const char *kern_type_name(kern_type t) {
    return kern_type_traits_of(t)->name;
}

int kern_type_block_size(kern_type t) {
    return kern_type_traits_of(t)->block_size;
}

size_t kern_type_block_bytes(kern_type t) {
    return kern_type_traits_of(t)->block_bytes;
}

size_t kern_row_bytes(kern_type t, int64_t n) {
    const kern_type_traits *r = kern_type_traits_of(t);
    return (size_t)(n / r->block_size) * r->block_bytes;
}

kern_type kern_x8_type(kern_type t) {
    const kern_type x8 = kern_type_traits_of(t)->x8;
    return x8 != KERN_TYPE_F32 ? x8 : t;
}

kern_type kern_x8_base(kern_type t) {
    const kern_type base = kern_type_traits_of(t)->x8_base;
    return base != KERN_TYPE_F32 ? base : t;
}

int kern_type_is_x8(kern_type t) {
    return kern_type_traits_of(t)->x8_base != KERN_TYPE_F32;
}

kern_type kern_int8_type(kern_type t) {
    const kern_type i8 = kern_type_traits_of(t)->int8;
    return i8 != KERN_TYPE_F32 ? i8 : KERN_TYPE_Q8_0;
}

/* ---- row-interleaved int8 (the X8 types) ---------------------------------- */

size_t kern_x8_bytes(kern_type t, int64_t n_out, int64_t n_in) {
    return (size_t)((n_out + 7) / 8) * 8 * kern_row_bytes(t, n_in);
}

/* How a base's codes sit in a group block (kern_types.h): read once per
 * call from the table, the loops below run over every value. */
typedef struct x8_layout {
    int nib;  /* 4-bit code pairs (else int8 bytes) */
    int h5;   /* a plane of fifth bits after the nibbles */
    int h6;   /* and a second plane (sixth bits) 32 bytes on */
    int m;    /* m[8] (Q6_0S: db[8]) after d[8] */
    size_t d; /* byte offset of d[8]: after the codes and the planes */
    kern_x8_codes_fn codes;
    kern_x8_make_fn make;
} x8_layout;

static x8_layout x8_layout_of(kern_type base) {
    const kern_type_traits *r = kern_type_traits_of(base);
    x8_layout l = {.nib = r->x8_nibble,
                   .h5 = r->x8_planes >= 1,
                   .h6 = r->x8_planes >= 2,
                   .m = x8_has_m(base),
                   .codes = r->x8_codes,
                   .make = r->x8_make};
    l.d = l.nib ? 128 + 32 * (size_t)r->x8_planes : 256;
    return l;
}

/* Where value i (0..31) of lane r sits in a group block: byte *at, and for
 * the 4-bit bases *shift 0 (low nibble) or 4 (high). */
static void x8_value_at(int nib, int r, int i, size_t *at, int *shift) {
    if (!nib) {
        *at = (size_t)(16 * (i / 2) + 2 * r + (i & 1));
        *shift = 0;
        return;
    }
    *at = (size_t)(16 * (i / 4) + 2 * r + (i & 1));
    *shift = (i & 2) ? 4 : 0;
}

/* Q5_0X8/Q5_1X8: byte and bit of value i's fifth bit for row r. */
static void x8_h5_at(int r, int i, size_t *at, int *bit) {
    int c = i / 4, hi = (i & 2) ? 1 : 0, lane = 2 * r + (i & 1);
    *at = (size_t)(128 + 4 * c + 2 * hi + lane / 8);
    *bit = lane % 8;
}

void kern_x8_pack_group(kern_type base, const void *const *rows, int n_rows, int64_t n_in,
                        void *dst, int64_t g) {
    const x8_layout L = x8_layout_of(base);
    const size_t bb = kern_type_block_bytes(base), gb = 8 * bb, doff = L.d;
    const int64_t nb = n_in / KERN_QK;
    uint8_t *grp = (uint8_t *)dst + (size_t)g * (size_t)nb * gb;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = grp + (size_t)b * gb;
        memset(o, 0, gb);
        for (int r = 0; r < n_rows; r++) {
            uint8_t codes[KERN_QK];
            uint16_t d, m = 0;
            L.codes(base, (const uint8_t *)rows[r] + (size_t)b * bb, codes, &d, &m);
            /* x8_value_at's placement, written out: this runs over every
             * weight of a model at load. */
            if (L.nib) {
                for (int c = 0; c < 8; c++)
                    for (int e = 0; e < 2; e++)
                        o[16 * c + 2 * r + e] = (uint8_t)((codes[4 * c + e] & 0x0f) |
                                                          (codes[4 * c + 2 + e] & 0x0f) << 4);
                if (L.h5)
                    for (int i = 0; i < KERN_QK; i++) {
                        size_t at;
                        int bit;
                        x8_h5_at(r, i, &at, &bit);
                        o[at] |= (uint8_t)((codes[i] >> 4 & 1) << bit);
                        if (L.h6) /* bit 5: the same plane 32 bytes on */
                            o[at + 32] |= (uint8_t)((codes[i] >> 5 & 1) << bit);
                    }
            } else {
                for (int j = 0; j < 16; j++) {
                    o[16 * j + 2 * r] = codes[2 * j];
                    o[16 * j + 2 * r + 1] = codes[2 * j + 1];
                }
            }
            memcpy(o + doff + 2 * r, &d, 2);
            if (L.m)
                memcpy(o + doff + 16 + 2 * r, &m, 2);
        }
    }
}

void kern_x8_get_row(kern_type t, const void *W, int64_t n_in, int64_t r, void *dst) {
    const kern_type base = kern_x8_base(t);
    const x8_layout L = x8_layout_of(base);
    const size_t bb = kern_type_block_bytes(base), gb = 8 * bb, doff = L.d;
    const int64_t nb = n_in / KERN_QK;
    const int lane = (int)(r % 8);
    const uint8_t *grp = (const uint8_t *)W + (size_t)(r / 8) * (size_t)nb * gb;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *in = grp + (size_t)b * gb;
        uint8_t codes[KERN_QK];
        for (int i = 0; i < KERN_QK; i++) {
            size_t at;
            int shift;
            x8_value_at(L.nib, lane, i, &at, &shift);
            codes[i] = L.nib ? (uint8_t)((in[at] >> shift) & 0x0f) : in[at];
            if (L.h5) {
                int bit;
                x8_h5_at(lane, i, &at, &bit);
                codes[i] |= (uint8_t)((in[at] >> bit & 1) << 4);
                if (L.h6)
                    codes[i] |= (uint8_t)((in[at + 32] >> bit & 1) << 5);
            }
        }
        uint16_t d, m = 0;
        memcpy(&d, in + doff + 2 * lane, 2);
        if (L.m)
            memcpy(&m, in + doff + 16 + 2 * lane, 2);
        L.make(base, codes, d, m, (uint8_t *)dst + (size_t)b * bb);
    }
}

void kern_x8_dequantize_row(kern_type t, const void *W, int64_t n_in, int64_t r, float *dst) {
    const kern_type base = kern_x8_base(t);
    const size_t gb = 8 * kern_type_block_bytes(base);
    const int64_t nb = n_in / KERN_QK;
    const uint8_t *grp = (const uint8_t *)W + (size_t)(r / 8) * (size_t)nb * gb;
    for (int64_t b = 0; b < nb; b++) {
        /* One block: block b of the group holds block b of each row. */
        _Alignas(8) uint8_t blk[sizeof(kern_block_q8_0m)];
        kern_x8_get_row(t, grp + (size_t)b * gb, KERN_QK, r % 8, blk);
        kern_dequantize_row(base, blk, dst + b * KERN_QK, KERN_QK);
    }
}

/* ---- rows ---------------------------------------------------------------- */

void kern_dequantize_row(kern_type t, const void *src, float *dst, int64_t n) {
    const kern_type_traits *r = kern_type_traits_of(t);
    /* Not a row-major type: callers use kern_x8_get_row / pack_group. */
    assert(r->x8_base == KERN_TYPE_F32 && "kern_(de)quantize_row: X8 type");
    if (r->to_f32)
        r->to_f32(t, src, dst, n);
}

void kern_quantize_row(kern_type t, const float *src, void *dst, int64_t n) {
    const kern_type_traits *r = kern_type_traits_of(t);
    assert(r->x8_base == KERN_TYPE_F32 && "kern_(de)quantize_row: X8 type");
    if (r->from_f32) /* brisk writes no other type */
        r->from_f32(t, src, dst, n);
}

void kern_requantize_row_q8_0(kern_type t, const void *src, kern_block_q8_0 *dst, int64_t n) {
    if (t == KERN_TYPE_Q4_0) {
        /* Lossless: Q4_0 values are d * (q - 8) with q - 8 in [-8, 7], which
         * Q8_0 holds exactly with the same fp16 scale. */
        const kern_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            dst[i].d = b[i].d;
            for (int j = 0; j < KERN_QK / 2; j++) {
                dst[i].qs[j] = (int8_t)((b[i].qs[j] & 0x0f) - 8);
                dst[i].qs[j + 16] = (int8_t)((b[i].qs[j] >> 4) - 8);
            }
        }
        return;
    }
    /* Q4_1 (and anything else): the offset m has no exact Q8_0 form, so
     * dequantize one block exactly in f32 and requantize it. (Zeroed: a
     * type with no dequantizer writes nothing.) */
    float tmp[KERN_QK] = {0};
    size_t bb = kern_type_block_bytes(t) * (kern_type_block_size(t) == 1 ? KERN_QK : 1);
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        kern_dequantize_row(t, (const uint8_t *)src + (size_t)i * bb, tmp, KERN_QK);
        quantize_block_q8_0(tmp, &dst[i]);
    }
}

int kern_requantize_row_q8(kern_type src_type, const void *src, void *dst, int64_t n) {
    const kern_type_traits *r = kern_type_traits_of(src_type);
    return r->to_int8 ? r->to_int8(src_type, src, dst, n) : -1;
}
