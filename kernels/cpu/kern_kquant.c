/* kern_kquant.c - see kern_kquant.h: the references for Q5_0, Q5_1, the
 * K-quants and IQ4_NL/IQ4_XS, and their conversions into the types the
 * matmul kernels run. Written from the layouts in the header, one block at
 * a time, for reading rather than speed: they run once per weight at load. */
#include "kernels/cpu/kern_kquant.h"

#include "kernels/cpu/kern_internal.h"

#include <string.h>

const int8_t kern_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
#define KV_IQ4 kern_iq4_values

static float f16(const uint8_t *p) {
    return kern_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

static uint16_t u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* The facts are kern_type_table's rows (kern_types.c). */
int kern_kq_is(kern_type t) {
    const kern_type_traits *r = kern_type_traits_of(t);
    return r->kquant && r->valid; /* Q6_0S is brisk's, never in a file */
}

int kern_kq_block_size(kern_type t) {
    const kern_type_traits *r = kern_type_traits_of(t);
    return r->kquant ? r->block_size : 0;
}

size_t kern_kq_block_bytes(kern_type t) {
    const kern_type_traits *r = kern_type_traits_of(t);
    return r->kquant ? r->block_bytes : 0;
}

/* ---- per-block value extraction -------------------------------------- */

/* Q5_0/Q5_1: the 5-bit code of value i (0..31). */
static int q5_code(const uint8_t *qh, const uint8_t *qs, int i) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    int lo = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    return lo | (int)((h >> i) & 1) << 4;
}

/* Q4_K/Q5_K: the 6-bit scale and min of sub-block j (0..7). */
static void kq_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q4_K/Q5_K: the low 4 bits of value i (0..255) from qs[128]. */
static int q4k_low(const uint8_t *qs, int i) {
    int c = i / 64, hi = (i / 32) & 1, l = i % 32;
    return (qs[32 * c + l] >> (4 * hi)) & 15;
}

/* Q2_K/Q3_K: the low 2 bits of value i from qs[64]. */
static int q2k_low(const uint8_t *qs, int i) {
    int h = i / 128, s = (i / 32) & 3, l = i % 32;
    return (qs[32 * h + l] >> (2 * s)) & 3;
}

/* Q3_K: the signed 6-bit scale of sub-block j (0..15). */
static int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q6_K: the 6-bit code of value i (0..63, before the -32). */
static int q6k_code(const uint8_t *ql, const uint8_t *qh, int i) {
    int h = i / 128, r = i % 128;
    int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
    int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    return low | high << 4;
}

/* IQ4_XS: the signed scale of sub-block j (0..7). */
static int iq4xs_scale(const uint8_t *b, int j) {
    int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
    int hi = (u16(b + 2) >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* 4-bit code k (0..31) of a 32-value group stored as 16 bytes, low nibbles
 * first (Q4_0's, IQ4_NL's and IQ4_XS's order). */
static int nib32(const uint8_t *qs, int k) {
    return k < 16 ? qs[k] & 15 : qs[k - 16] >> 4;
}

/* ---- the references ---------------------------------------------------- */

static void dequantize_block(kern_type t, const uint8_t *b, float *y) {
    switch (t) {
    case KERN_TYPE_Q5_0: {
        float d = f16(b);
        for (int i = 0; i < 32; i++)
            y[i] = d * (float)(q5_code(b + 2, b + 6, i) - 16);
        break;
    }
    case KERN_TYPE_Q5_1: {
        float d = f16(b), m = f16(b + 2);
        for (int i = 0; i < 32; i++)
            y[i] = d * (float)q5_code(b + 4, b + 8, i) + m;
        break;
    }
    case KERN_TYPE_IQ4_NL: {
        float d = f16(b);
        for (int i = 0; i < 32; i++)
            y[i] = d * (float)KV_IQ4[nib32(b + 2, i)];
        break;
    }
    case KERN_TYPE_Q2_K: {
        const uint8_t *sc = b, *qs = b + 16;
        float d = f16(b + 80), dmin = f16(b + 82);
        for (int i = 0; i < KERN_QK_K; i++) {
            float dl = d * (float)(sc[i / 16] & 15), ml = dmin * (float)(sc[i / 16] >> 4);
            y[i] = dl * (float)q2k_low(qs, i) - ml;
        }
        break;
    }
    case KERN_TYPE_Q3_K: {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d = f16(b + 108);
        for (int i = 0; i < KERN_QK_K; i++) {
            int high = (hm[i % 32] >> (i / 32)) & 1;
            int q = q2k_low(qs, i) - (high ? 0 : 4);
            y[i] = d * (float)q3k_scale(sc, i / 16) * (float)q;
        }
        break;
    }
    case KERN_TYPE_Q4_K:
    case KERN_TYPE_Q5_K: {
        float d = f16(b), dmin = f16(b + 2);
        const uint8_t *sc = b + 4;
        const uint8_t *qh = t == KERN_TYPE_Q5_K ? b + 16 : NULL;
        const uint8_t *qs = t == KERN_TYPE_Q5_K ? b + 48 : b + 16;
        for (int j = 0; j < 8; j++) {
            int s, m;
            kq_scale_min(sc, j, &s, &m);
            float dl = d * (float)s, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int i = 32 * j + l;
                int q = q4k_low(qs, i) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
                y[i] = dl * (float)q - ml;
            }
        }
        break;
    }
    case KERN_TYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16(b + 208);
        for (int i = 0; i < KERN_QK_K; i++)
            y[i] = d * (float)sc[i / 16] * (float)(q6k_code(ql, qh, i) - 32);
        break;
    }
    case KERN_TYPE_Q6_0S: {
        float da = f16(b), db = f16(b + 2);
        for (int i = 0; i < 32; i++) {
            int code = nib32(b + 4, i) | ((b[20 + i / 4] >> (2 * (i % 4))) & 3) << 4;
            y[i] = (i < 16 ? da : db) * (float)(code - 32);
        }
        break;
    }
    case KERN_TYPE_IQ4_XS: {
        float d = f16(b);
        for (int j = 0; j < 8; j++) {
            float dl = d * (float)iq4xs_scale(b, j);
            for (int k = 0; k < 32; k++)
                y[32 * j + k] = dl * (float)KV_IQ4[nib32(b + 8 + 16 * j, k)];
        }
        break;
    }
    default: break;
    }
}

void kern_kq_dequantize_row(kern_type t, const void *src, float *dst, int64_t n) {
    int bs = kern_kq_block_size(t);
    size_t bb = kern_kq_block_bytes(t);
    if (!bs)
        return;
    for (int64_t i = 0; i < n / bs; i++)
        dequantize_block(t, (const uint8_t *)src + (size_t)i * bb, dst + i * bs);
}

kern_type kern_kq_run_type(kern_type t) {
    const kern_type run = kern_type_traits_of(t)->kq_run;
    return run != KERN_TYPE_F32 ? run : KERN_TYPE_Q8_0;
}

/* ---- conversions --------------------------------------------------------- */

/* One 32-value block of an int8 target from codes and fp16 scales. */
static void put_q8_0(kern_block_q8_0 *o, uint16_t d, const int8_t *q) {
    o->d = d;
    memcpy(o->qs, q, 32);
}

static void put_q8_0m(kern_block_q8_0m *o, uint16_t d, uint16_t m, const int8_t *q) {
    o->d = d;
    o->m = m;
    memcpy(o->qs, q, 32);
}

/* Sub-block j of a Q4_K/Q5_K super-block as codes (0..31) and the fp16 d
 * and m of x = d * q + m. */
static void kq_sub(kern_type t, const uint8_t *b, int j, int8_t q[32], uint16_t *d, uint16_t *m) {
    int s, mn;
    kq_scale_min(b + 4, j, &s, &mn);
    const uint8_t *qh = t == KERN_TYPE_Q5_K ? b + 16 : NULL;
    const uint8_t *qs = t == KERN_TYPE_Q5_K ? b + 48 : b + 16;
    for (int l = 0; l < 32; l++)
        q[l] = (int8_t)(q4k_low(qs, 32 * j + l) | (qh ? ((qh[l] >> j) & 1) << 4 : 0));
    *d = kern_fp32_to_fp16(f16(b) * (float)s);
    *m = kern_fp32_to_fp16(-(f16(b + 2) * (float)mn));
}

int kern_kq_convert_row(kern_type st, const void *src, kern_type dt, void *dst, int64_t n) {
    const uint8_t *s = src;
    const size_t sbb = kern_type_traits_of(st)->block_bytes,
                 dbb = kern_type_traits_of(dt)->block_bytes;
    int8_t q[32];
    if (st == KERN_TYPE_Q5_0 && dt == KERN_TYPE_Q8_0) {
        kern_block_q8_0 *o = dst;
        for (int64_t i = 0; i < n / 32; i++, s += sbb) {
            for (int k = 0; k < 32; k++)
                q[k] = (int8_t)(q5_code(s + 2, s + 6, k) - 16);
            put_q8_0(&o[i], u16(s), q);
        }
        return 0;
    }
    if (st == KERN_TYPE_Q5_1 && dt == KERN_TYPE_Q8_0M) {
        kern_block_q8_0m *o = dst;
        for (int64_t i = 0; i < n / 32; i++, s += sbb) {
            for (int k = 0; k < 32; k++)
                q[k] = (int8_t)q5_code(s + 4, s + 8, k);
            put_q8_0m(&o[i], u16(s), u16(s + 2), q);
        }
        return 0;
    }
    if (st == KERN_TYPE_IQ4_NL && dt == KERN_TYPE_Q8_0) {
        kern_block_q8_0 *o = dst;
        for (int64_t i = 0; i < n / 32; i++, s += sbb) {
            for (int k = 0; k < 32; k++)
                q[k] = KV_IQ4[nib32(s + 2, k)];
            put_q8_0(&o[i], u16(s), q);
        }
        return 0;
    }
    if (st == KERN_TYPE_IQ4_XS && dt == KERN_TYPE_Q8_0) {
        kern_block_q8_0 *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb)
            for (int j = 0; j < 8; j++) {
                for (int k = 0; k < 32; k++)
                    q[k] = KV_IQ4[nib32(s + 8 + 16 * j, k)];
                put_q8_0(&o[8 * i + j], kern_fp32_to_fp16(f16(s) * (float)iq4xs_scale(s, j)), q);
            }
        return 0;
    }
    if (st == KERN_TYPE_Q5_K && dt == KERN_TYPE_Q5_1) {
        /* Each 32-value sub-block is a Q5_1 block: d * sc, -dmin * m, the
         * 5-bit codes as they are. */
        uint8_t *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb)
            for (int j = 0; j < 8; j++, o += dbb) {
                uint16_t d, m;
                kq_sub(st, s, j, q, &d, &m);
                uint32_t qh = 0;
                for (int k = 0; k < 32; k++)
                    qh |= (uint32_t)(q[k] >> 4 & 1) << k;
                o[0] = (uint8_t)d, o[1] = (uint8_t)(d >> 8);
                o[2] = (uint8_t)m, o[3] = (uint8_t)(m >> 8);
                for (int k = 0; k < 4; k++)
                    o[4 + k] = (uint8_t)(qh >> (8 * k));
                for (int k = 0; k < 16; k++)
                    o[8 + k] = (uint8_t)((q[k] & 15) | (q[k + 16] & 15) << 4);
            }
        return 0;
    }
    if (st == KERN_TYPE_Q3_K && dt == KERN_TYPE_Q6_0S) {
        /* Q3_K's q - 4 (-4..3) as a 6-bit code q + 28, its two 16-value
         * scales d * (sc - 32) as da and db. */
        uint8_t *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb) {
            const uint8_t *hm = s, *qs = s + 32, *sc = s + 96;
            float d = f16(s + 108);
            for (int j = 0; j < 8; j++, o += dbb) {
                uint16_t da = kern_fp32_to_fp16(d * (float)q3k_scale(sc, 2 * j));
                uint16_t db = kern_fp32_to_fp16(d * (float)q3k_scale(sc, 2 * j + 1));
                o[0] = (uint8_t)da, o[1] = (uint8_t)(da >> 8);
                o[2] = (uint8_t)db, o[3] = (uint8_t)(db >> 8);
                memset(o + 4, 0, 24);
                for (int k = 0; k < 32; k++) {
                    int v = 32 * j + k;
                    int high = (hm[v % 32] >> (v / 32)) & 1;
                    int code = q2k_low(qs, v) - (high ? 0 : 4) + 32;
                    o[4 + k % 16] |= (uint8_t)((code & 15) << (k < 16 ? 0 : 4));
                    o[20 + k / 4] |= (uint8_t)((code >> 4) << (2 * (k % 4)));
                }
            }
        }
        return 0;
    }
    if (st == KERN_TYPE_Q6_K && dt == KERN_TYPE_Q6_0S) {
        uint8_t *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb) {
            const int8_t *sc = (const int8_t *)(s + 192);
            float d = f16(s + 208);
            for (int j = 0; j < 8; j++, o += dbb) {
                uint16_t da = kern_fp32_to_fp16(d * (float)sc[2 * j]);
                uint16_t db = kern_fp32_to_fp16(d * (float)sc[2 * j + 1]);
                o[0] = (uint8_t)da, o[1] = (uint8_t)(da >> 8);
                o[2] = (uint8_t)db, o[3] = (uint8_t)(db >> 8);
                memset(o + 4, 0, 24);
                for (int k = 0; k < 32; k++) {
                    int code = q6k_code(s, s + 128, 32 * j + k);
                    o[4 + k % 16] |= (uint8_t)((code & 15) << (k < 16 ? 0 : 4));
                    o[20 + k / 4] |= (uint8_t)((code >> 4) << (2 * (k % 4)));
                }
            }
        }
        return 0;
    }
    if (st == KERN_TYPE_IQ4_XS && dt == KERN_TYPE_IQ4_NL) {
        uint8_t *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb)
            for (int j = 0; j < 8; j++, o += dbb) {
                uint16_t d = kern_fp32_to_fp16(f16(s) * (float)iq4xs_scale(s, j));
                o[0] = (uint8_t)d, o[1] = (uint8_t)(d >> 8);
                memcpy(o + 2, s + 8 + 16 * j, 16);
            }
        return 0;
    }
    if ((st == KERN_TYPE_Q4_K || st == KERN_TYPE_Q5_K) && dt == KERN_TYPE_Q8_0M) {
        kern_block_q8_0m *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb)
            for (int j = 0; j < 8; j++) {
                uint16_t d, m;
                kq_sub(st, s, j, q, &d, &m);
                put_q8_0m(&o[8 * i + j], d, m, q);
            }
        return 0;
    }
    if (st == KERN_TYPE_Q4_K && dt == KERN_TYPE_Q4_1) {
        kern_block_q4_1 *o = dst;
        for (int64_t i = 0; i < n / KERN_QK_K; i++, s += sbb)
            for (int j = 0; j < 8; j++) {
                kern_block_q4_1 *ob = &o[8 * i + j];
                kq_sub(st, s, j, q, &ob->d, &ob->m);
                for (int k = 0; k < 16; k++)
                    ob->qs[k] = (uint8_t)(q[k] | q[k + 16] << 4);
            }
        return 0;
    }
    return -1;
}
