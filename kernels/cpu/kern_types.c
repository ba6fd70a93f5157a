/* kern_types.c - type table, fp16/bf16 conversions, row (de)quantization.
 *
 * The conversions are plain integer bit manipulation so that they are exact
 * (round-to-nearest-even) on every machine and need no F16C; the matmul
 * kernels use F16C where they have it and agree with these bit for bit. */
#include "kernels/cpu/kern_types.h"

#include "kernels/cpu/kern_kquant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Q8_0M is deliberately missing here: the GGUF reader and writer accept
 * exactly the ids this returns 1 for, and Q8_0M is no GGML type. */
int kern_type_valid(uint32_t type) {
    switch (type) {
    case KERN_TYPE_F32:
    case KERN_TYPE_F16:
    case KERN_TYPE_Q4_0:
    case KERN_TYPE_Q4_1:
    case KERN_TYPE_Q8_0:
    case KERN_TYPE_BF16: return 1;
    default: return kern_kq_is((kern_type)type);
    }
}

int kern_type_matmul_ok(uint32_t type) {
    return (kern_type_known(type) && !kern_kq_block_size((kern_type)type)) ||
           kern_type_is_x8((kern_type)type);
}

int kern_type_known(uint32_t type) {
    return kern_type_valid(type) || type == KERN_TYPE_Q8_0M || type == KERN_TYPE_Q6_0S;
}

const char *kern_type_name(kern_type t) {
    switch (t) {
    case KERN_TYPE_F32: return "f32";
    case KERN_TYPE_F16: return "f16";
    case KERN_TYPE_Q4_0: return "q4_0";
    case KERN_TYPE_Q4_1: return "q4_1";
    case KERN_TYPE_Q8_0: return "q8_0";
    case KERN_TYPE_BF16: return "bf16";
    case KERN_TYPE_Q8_0M: return "q8_0m";
    case KERN_TYPE_Q8_0X8: return "q8_0x8";
    case KERN_TYPE_Q8_0MX8: return "q8_0mx8";
    case KERN_TYPE_Q4_0X8: return "q4_0x8";
    case KERN_TYPE_Q4_1X8: return "q4_1x8";
    case KERN_TYPE_Q5_0X8: return "q5_0x8";
    case KERN_TYPE_Q5_1X8: return "q5_1x8";
    case KERN_TYPE_IQ4_NLX8: return "iq4_nlx8";
    case KERN_TYPE_Q6_0S: return "q6_0s";
    case KERN_TYPE_Q6_0SX8: return "q6_0sx8";
    case KERN_TYPE_Q5_0: return "q5_0";
    case KERN_TYPE_Q5_1: return "q5_1";
    case KERN_TYPE_Q2_K: return "q2_K";
    case KERN_TYPE_Q3_K: return "q3_K";
    case KERN_TYPE_Q4_K: return "q4_K";
    case KERN_TYPE_Q5_K: return "q5_K";
    case KERN_TYPE_Q6_K: return "q6_K";
    case KERN_TYPE_IQ4_NL: return "iq4_nl";
    case KERN_TYPE_IQ4_XS: return "iq4_xs";
    }
    return "unknown";
}

int kern_type_block_size(kern_type t) {
    switch (t) {
    case KERN_TYPE_Q4_0:
    case KERN_TYPE_Q4_1:
    case KERN_TYPE_Q8_0:
    case KERN_TYPE_Q8_0M:
    case KERN_TYPE_Q8_0X8:
    case KERN_TYPE_Q8_0MX8:
    case KERN_TYPE_Q4_0X8:
    case KERN_TYPE_Q4_1X8:
    case KERN_TYPE_Q5_0X8:
    case KERN_TYPE_Q5_1X8:
    case KERN_TYPE_IQ4_NLX8:
    case KERN_TYPE_Q6_0SX8: return KERN_QK;
    default: return kern_kq_block_size(t) ? kern_kq_block_size(t) : 1;
    }
}

size_t kern_type_block_bytes(kern_type t) {
    switch (t) {
    case KERN_TYPE_F32: return 4;
    case KERN_TYPE_F16: return 2;
    case KERN_TYPE_BF16: return 2;
    case KERN_TYPE_Q8_0: return sizeof(kern_block_q8_0);
    case KERN_TYPE_Q4_0: return sizeof(kern_block_q4_0);
    case KERN_TYPE_Q4_1: return sizeof(kern_block_q4_1);
    case KERN_TYPE_Q8_0M: return sizeof(kern_block_q8_0m);
    case KERN_TYPE_Q8_0X8: return sizeof(kern_block_q8_0);
    case KERN_TYPE_Q8_0MX8: return sizeof(kern_block_q8_0m);
    case KERN_TYPE_Q4_0X8: return sizeof(kern_block_q4_0);
    case KERN_TYPE_Q4_1X8: return sizeof(kern_block_q4_1);
    case KERN_TYPE_Q5_0X8: return kern_kq_block_bytes(KERN_TYPE_Q5_0);
    case KERN_TYPE_Q5_1X8: return kern_kq_block_bytes(KERN_TYPE_Q5_1);
    case KERN_TYPE_IQ4_NLX8: return kern_kq_block_bytes(KERN_TYPE_IQ4_NL);
    case KERN_TYPE_Q6_0SX8: return kern_kq_block_bytes(KERN_TYPE_Q6_0S);
    default: return kern_kq_block_bytes(t);
    }
}

size_t kern_row_bytes(kern_type t, int64_t n) {
    return (size_t)(n / kern_type_block_size(t)) * kern_type_block_bytes(t);
}

/* ---- row-interleaved int8 ------------------------------------------------ */

kern_type kern_x8_type(kern_type t) {
    switch (t) {
    case KERN_TYPE_Q8_0: return KERN_TYPE_Q8_0X8;
    case KERN_TYPE_Q8_0M: return KERN_TYPE_Q8_0MX8;
    case KERN_TYPE_Q4_0: return KERN_TYPE_Q4_0X8;
    case KERN_TYPE_Q4_1: return KERN_TYPE_Q4_1X8;
    case KERN_TYPE_Q5_0: return KERN_TYPE_Q5_0X8;
    case KERN_TYPE_Q5_1: return KERN_TYPE_Q5_1X8;
    case KERN_TYPE_IQ4_NL: return KERN_TYPE_IQ4_NLX8;
    case KERN_TYPE_Q6_0S: return KERN_TYPE_Q6_0SX8;
    default: return t;
    }
}

kern_type kern_x8_base(kern_type t) {
    switch (t) {
    case KERN_TYPE_Q8_0X8: return KERN_TYPE_Q8_0;
    case KERN_TYPE_Q8_0MX8: return KERN_TYPE_Q8_0M;
    case KERN_TYPE_Q4_0X8: return KERN_TYPE_Q4_0;
    case KERN_TYPE_Q4_1X8: return KERN_TYPE_Q4_1;
    case KERN_TYPE_Q5_0X8: return KERN_TYPE_Q5_0;
    case KERN_TYPE_Q5_1X8: return KERN_TYPE_Q5_1;
    case KERN_TYPE_IQ4_NLX8: return KERN_TYPE_IQ4_NL;
    case KERN_TYPE_Q6_0SX8: return KERN_TYPE_Q6_0S;
    default: return t;
    }
}

int kern_type_is_x8(kern_type t) {
    return kern_x8_base(t) != t;
}

size_t kern_x8_bytes(kern_type t, int64_t n_out, int64_t n_in) {
    return (size_t)((n_out + 7) / 8) * 8 * kern_row_bytes(t, n_in);
}

/* A base block's 32 stored codes (the int8 q of Q8_0/Q8_0M as bytes, the
 * nibbles of Q4_0/Q4_1), d and m (0 where the type has none). */
static void x8_block_codes(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK], uint16_t *d,
                           uint16_t *m) {
    *m = 0;
    memcpy(d, blk, 2);
    switch (base) {
    case KERN_TYPE_Q8_0M:
        memcpy(m, blk + 2, 2);
        memcpy(codes, blk + 4, KERN_QK);
        break;
    case KERN_TYPE_Q4_0:
    case KERN_TYPE_IQ4_NL: /* { d, qs[16] } as Q4_0: the codes are table indices */
    case KERN_TYPE_Q4_1: {
        const uint8_t *qs = blk + (base == KERN_TYPE_Q4_1 ? 4 : 2);
        if (base == KERN_TYPE_Q4_1)
            memcpy(m, blk + 2, 2);
        for (int j = 0; j < KERN_QK / 2; j++) {
            codes[j] = qs[j] & 0x0f;
            codes[j + 16] = qs[j] >> 4;
        }
        break;
    }
    case KERN_TYPE_Q5_0:
    case KERN_TYPE_Q5_1: { /* { d, (m), qh[4], qs[16] }: codes 0..31 */
        const int o = base == KERN_TYPE_Q5_1 ? 4 : 2;
        if (base == KERN_TYPE_Q5_1)
            memcpy(m, blk + 2, 2);
        uint32_t qh = (uint32_t)blk[o] | (uint32_t)blk[o + 1] << 8 | (uint32_t)blk[o + 2] << 16 |
                      (uint32_t)blk[o + 3] << 24;
        for (int j = 0; j < KERN_QK / 2; j++) {
            codes[j] = (uint8_t)((blk[o + 4 + j] & 0x0f) | ((qh >> j) & 1) << 4);
            codes[j + 16] = (uint8_t)((blk[o + 4 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        break;
    }
    case KERN_TYPE_Q6_0S: /* { da, db (as m), qs[16], qh[8] }: codes 0..63 */
        memcpy(m, blk + 2, 2);
        for (int j = 0; j < KERN_QK; j++)
            codes[j] = (uint8_t)((j < 16 ? blk[4 + j] & 0x0f : blk[4 + j - 16] >> 4) |
                                 ((blk[20 + j / 4] >> (2 * (j % 4))) & 3) << 4);
        break;
    default: /* Q8_0 */ memcpy(codes, blk + 2, KERN_QK); break;
    }
}

/* The inverse: a base block from its codes, d and m. */
static void x8_block_make(kern_type base, const uint8_t codes[KERN_QK], uint16_t d, uint16_t m,
                          uint8_t *blk) {
    memcpy(blk, &d, 2);
    switch (base) {
    case KERN_TYPE_Q8_0M:
        memcpy(blk + 2, &m, 2);
        memcpy(blk + 4, codes, KERN_QK);
        break;
    case KERN_TYPE_Q4_0:
    case KERN_TYPE_IQ4_NL:
    case KERN_TYPE_Q4_1: {
        uint8_t *qs = blk + (base == KERN_TYPE_Q4_1 ? 4 : 2);
        if (base == KERN_TYPE_Q4_1)
            memcpy(blk + 2, &m, 2);
        for (int j = 0; j < KERN_QK / 2; j++)
            qs[j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
        break;
    }
    case KERN_TYPE_Q5_0:
    case KERN_TYPE_Q5_1: {
        const int o = base == KERN_TYPE_Q5_1 ? 4 : 2;
        if (base == KERN_TYPE_Q5_1)
            memcpy(blk + 2, &m, 2);
        uint32_t qh = 0;
        for (int j = 0; j < KERN_QK; j++)
            qh |= (uint32_t)(codes[j] >> 4 & 1) << j;
        for (int k = 0; k < 4; k++)
            blk[o + k] = (uint8_t)(qh >> (8 * k));
        for (int j = 0; j < KERN_QK / 2; j++)
            blk[o + 4 + j] = (uint8_t)((codes[j] & 0x0f) | (codes[j + 16] & 0x0f) << 4);
        break;
    }
    case KERN_TYPE_Q6_0S:
        memcpy(blk + 2, &m, 2);
        memset(blk + 4, 0, 24);
        for (int j = 0; j < KERN_QK; j++) {
            blk[4 + j % 16] |= (uint8_t)((codes[j] & 15) << (j < 16 ? 0 : 4));
            blk[20 + j / 4] |= (uint8_t)((codes[j] >> 4 & 3) << (2 * (j % 4)));
        }
        break;
    default: memcpy(blk + 2, codes, KERN_QK); break;
    }
}

static int x8_has_h6(kern_type base) {
    return base == KERN_TYPE_Q6_0S;
}
static int x8_has_h5(kern_type base) {
    return base == KERN_TYPE_Q5_0 || base == KERN_TYPE_Q5_1 || x8_has_h6(base);
}
static int x8_is_nibble(kern_type base) {
    return base == KERN_TYPE_Q4_0 || base == KERN_TYPE_Q4_1 || base == KERN_TYPE_IQ4_NL ||
           x8_has_h5(base);
}
static int x8_has_m(kern_type base) {
    /* Q6_0S's second scale db sits where the others' m does. */
    return base == KERN_TYPE_Q8_0M || base == KERN_TYPE_Q4_1 || base == KERN_TYPE_Q5_1 ||
           base == KERN_TYPE_Q6_0S;
}

/* Where value i (0..31) of lane r sits in a group block: byte *at, and for
 * the 4-bit bases *shift 0 (low nibble) or 4 (high). */
static void x8_value_at(kern_type base, int r, int i, size_t *at, int *shift) {
    if (!x8_is_nibble(base)) {
        *at = (size_t)(16 * (i / 2) + 2 * r + (i & 1));
        *shift = 0;
        return;
    }
    *at = (size_t)(16 * (i / 4) + 2 * r + (i & 1));
    *shift = (i & 2) ? 4 : 0;
}

/* Byte offset of d[8] in a group block (m[8] follows it). */
static size_t x8_d_off(kern_type base) {
    return x8_has_h6(base) ? 192 : x8_has_h5(base) ? 160 : x8_is_nibble(base) ? 128 : 256;
}

/* Q5_0X8/Q5_1X8: byte and bit of value i's fifth bit for row r. */
static void x8_h5_at(int r, int i, size_t *at, int *bit) {
    int c = i / 4, hi = (i & 2) ? 1 : 0, lane = 2 * r + (i & 1);
    *at = (size_t)(128 + 4 * c + 2 * hi + lane / 8);
    *bit = lane % 8;
}

void kern_x8_pack_group(kern_type base, const void *const *rows, int n_rows, int64_t n_in,
                        void *dst, int64_t g) {
    const size_t bb = kern_type_block_bytes(base), gb = 8 * bb, doff = x8_d_off(base);
    const int64_t nb = n_in / KERN_QK;
    const int nib = x8_is_nibble(base), has_m = x8_has_m(base), h5 = x8_has_h5(base);
    uint8_t *grp = (uint8_t *)dst + (size_t)g * (size_t)nb * gb;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = grp + (size_t)b * gb;
        memset(o, 0, gb);
        for (int r = 0; r < n_rows; r++) {
            uint8_t codes[KERN_QK];
            uint16_t d, m;
            x8_block_codes(base, (const uint8_t *)rows[r] + (size_t)b * bb, codes, &d, &m);
            /* x8_value_at's placement, written out: this runs over every
             * weight of a model at load. */
            if (nib) {
                for (int c = 0; c < 8; c++)
                    for (int e = 0; e < 2; e++)
                        o[16 * c + 2 * r + e] = (uint8_t)((codes[4 * c + e] & 0x0f) |
                                                          (codes[4 * c + 2 + e] & 0x0f) << 4);
                if (h5)
                    for (int i = 0; i < KERN_QK; i++) {
                        size_t at;
                        int bit;
                        x8_h5_at(r, i, &at, &bit);
                        o[at] |= (uint8_t)((codes[i] >> 4 & 1) << bit);
                        if (x8_has_h6(base)) /* bit 5: the same plane 32 bytes on */
                            o[at + 32] |= (uint8_t)((codes[i] >> 5 & 1) << bit);
                    }
            } else {
                for (int j = 0; j < 16; j++) {
                    o[16 * j + 2 * r] = codes[2 * j];
                    o[16 * j + 2 * r + 1] = codes[2 * j + 1];
                }
            }
            memcpy(o + doff + 2 * r, &d, 2);
            if (has_m)
                memcpy(o + doff + 16 + 2 * r, &m, 2);
        }
    }
}

void kern_x8_get_row(kern_type t, const void *W, int64_t n_in, int64_t r, void *dst) {
    const kern_type base = kern_x8_base(t);
    const size_t bb = kern_type_block_bytes(base), gb = 8 * bb, doff = x8_d_off(base);
    const int64_t nb = n_in / KERN_QK;
    const int lane = (int)(r % 8);
    const uint8_t *grp = (const uint8_t *)W + (size_t)(r / 8) * (size_t)nb * gb;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *in = grp + (size_t)b * gb;
        uint8_t codes[KERN_QK];
        for (int i = 0; i < KERN_QK; i++) {
            size_t at;
            int shift;
            x8_value_at(base, lane, i, &at, &shift);
            codes[i] = x8_is_nibble(base) ? (uint8_t)((in[at] >> shift) & 0x0f) : in[at];
            if (x8_has_h5(base)) {
                int bit;
                x8_h5_at(lane, i, &at, &bit);
                codes[i] |= (uint8_t)((in[at] >> bit & 1) << 4);
                if (x8_has_h6(base))
                    codes[i] |= (uint8_t)((in[at + 32] >> bit & 1) << 5);
            }
        }
        uint16_t d, m = 0;
        memcpy(&d, in + doff + 2 * lane, 2);
        if (x8_has_m(base))
            memcpy(&m, in + doff + 16 + 2 * lane, 2);
        x8_block_make(base, codes, d, m, (uint8_t *)dst + (size_t)b * bb);
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

/* ---- rows ---------------------------------------------------------------- */

void kern_dequantize_row(kern_type t, const void *src, float *dst, int64_t n) {
    if (kern_kq_block_size(t)) { /* the nine file types and Q6_0S */
        kern_kq_dequantize_row(t, src, dst, n);
        return;
    }
    switch (t) {
    case KERN_TYPE_Q8_0X8:
    case KERN_TYPE_Q8_0MX8:
    case KERN_TYPE_Q4_0X8:
    case KERN_TYPE_Q4_1X8:
    case KERN_TYPE_Q5_0X8:
    case KERN_TYPE_Q5_1X8:
    case KERN_TYPE_IQ4_NLX8:
    case KERN_TYPE_Q6_0SX8:
        /* Not a row-major type: callers use kern_x8_get_row / pack_group. */
        assert(!"kern_(de)quantize_row: X8 type");
        break;
    case KERN_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case KERN_TYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = kern_fp16_to_fp32(s[i]);
        break;
    default: break; /* kern_kquant.h's types: above, or nothing to write */
    }
    case KERN_TYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = kern_bf16_to_fp32(s[i]);
        break;
    }
    case KERN_TYPE_Q8_0: {
        const kern_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d = kern_fp16_to_fp32(b[i].d);
            for (int j = 0; j < KERN_QK; j++)
                dst[i * KERN_QK + j] = d * (float)b[i].qs[j];
        }
        break;
    }
    case KERN_TYPE_Q4_0: {
        const kern_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d = kern_fp16_to_fp32(b[i].d);
            for (int j = 0; j < KERN_QK / 2; j++) {
                dst[i * KERN_QK + j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
                dst[i * KERN_QK + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        break;
    }
    case KERN_TYPE_Q4_1: {
        const kern_block_q4_1 *b = src;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d = kern_fp16_to_fp32(b[i].d);
            float m = kern_fp16_to_fp32(b[i].m);
            for (int j = 0; j < KERN_QK / 2; j++) {
                dst[i * KERN_QK + j] = d * (float)(b[i].qs[j] & 0x0f) + m;
                dst[i * KERN_QK + j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
            }
        }
        break;
    }
    case KERN_TYPE_Q8_0M: {
        /* The same two operations as Q4_1, so a Q4_1 row converted by
         * kern_requantize_row_q8 dequantizes to the same floats. */
        const kern_block_q8_0m *b = src;
        for (int64_t i = 0; i < n / KERN_QK; i++) {
            float d = kern_fp16_to_fp32(b[i].d);
            float m = kern_fp16_to_fp32(b[i].m);
            for (int j = 0; j < KERN_QK; j++)
                dst[i * KERN_QK + j] = d * (float)b[i].qs[j] + m;
        }
        break;
    }
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

void kern_quantize_row(kern_type t, const float *src, void *dst, int64_t n) {
    switch (t) {
    case KERN_TYPE_Q8_0X8:
    case KERN_TYPE_Q8_0MX8:
    case KERN_TYPE_Q4_0X8:
    case KERN_TYPE_Q4_1X8:
    case KERN_TYPE_Q5_0X8:
    case KERN_TYPE_Q5_1X8:
    case KERN_TYPE_IQ4_NLX8:
    case KERN_TYPE_Q6_0SX8:
        /* Not a row-major type: callers use kern_x8_get_row / pack_group. */
        assert(!"kern_(de)quantize_row: X8 type");
        break;
    case KERN_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case KERN_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = kern_fp32_to_fp16(src[i]);
        break;
    default: break; /* brisk writes no other type */
    }
    case KERN_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = kern_fp32_to_bf16(src[i]);
        break;
    }
    case KERN_TYPE_Q8_0: {
        kern_block_q8_0 *b = dst;
        for (int64_t i = 0; i < n / KERN_QK; i++)
            quantize_block_q8_0(src + i * KERN_QK, &b[i]);
        break;
    }
    case KERN_TYPE_Q8_0M: {
        kern_block_q8_0m *b = dst;
        for (int64_t i = 0; i < n / KERN_QK; i++)
            quantize_block_q8_0m(src + i * KERN_QK, &b[i]);
        break;
    }
    case KERN_TYPE_Q4_0: {
        /* GGML's rule: the signed value of largest magnitude maps to -8, so
         * d = max / -8 and q = x / d + 8 (truncated after +0.5), capped at 15. */
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
        break;
    }
    case KERN_TYPE_Q4_1: {
        /* x = d * q + m with m = min and d = (max - min) / 15. */
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
        break;
    }
    }
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
     * dequantize one block exactly in f32 and requantize it. */
    float tmp[KERN_QK];
    size_t bb = kern_type_block_bytes(t) * (kern_type_block_size(t) == 1 ? KERN_QK : 1);
    for (int64_t i = 0; i < n / KERN_QK; i++) {
        kern_dequantize_row(t, (const uint8_t *)src + (size_t)i * bb, tmp, KERN_QK);
        quantize_block_q8_0(tmp, &dst[i]);
    }
}

kern_type kern_int8_type(kern_type t) {
    switch (t) {
    case KERN_TYPE_Q4_1:
    case KERN_TYPE_Q5_1:
    case KERN_TYPE_Q4_K:
    case KERN_TYPE_Q5_K:
    case KERN_TYPE_Q8_0M: return KERN_TYPE_Q8_0M;
    default: return KERN_TYPE_Q8_0;
    }
}

int kern_requantize_row_q8(kern_type src_type, const void *src, void *dst, int64_t n) {
    switch (src_type) {
    case KERN_TYPE_Q4_0: kern_requantize_row_q8_0(src_type, src, dst, n); return 0;
    case KERN_TYPE_Q4_1: {
        /* Lossless: the nibble (0..15) is the int8 q, d and m carry over. */
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
    case KERN_TYPE_Q8_0:
    case KERN_TYPE_Q8_0M: memcpy(dst, src, kern_row_bytes(src_type, n)); return 0;
    default: return kern_kq_convert_row(src_type, src, kern_int8_type(src_type), dst, n);
    }
}
