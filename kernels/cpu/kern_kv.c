/* kern_kv.c - the KV cache's dtypes (kern_kv.h): their table, the one rule
 * for a layer-block's bytes, and the C reference of each quantization. */
#include "kernels/cpu/kern_kv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_types.h"

static const kern_kv_traits kv_table[KERN_KV_N_DTYPES] = {
    /* f32 has no CUDA kernels: the device's attention reads halves or codes. */
    [KERN_KV_F32] = {.name = "f32", .elem = 4, .cpu = 1},
    [KERN_KV_F16] = {.name = "f16", .elem = 2, .cpu = 1, .cuda = 1},
    [KERN_KV_Q8_0] = {.name = "q8_0", .bits = 8, .group = KERN_KV_QK, .cpu = 1},
    [KERN_KV_Q4_0] = {.name = "q4_0", .bits = 4, .group = KERN_KV_QK, .cpu = 1},
    /* One scale per head: a 32-group's fp16 scale would cost 1/16 of an
     * int8 row, and 2 bytes per head of 64+ values keeps a position at
     * <= 0.52x its f16 bytes (issue 38's 1.9x target). */
    [KERN_KV_INT8] = {.name = "int8", .bits = 8, .group = 0, .cuda = 1},
    [KERN_KV_FP8] = {.name = "fp8", .alias = "fp8_e4m3", .bits = 8, .group = 0, .cuda = 1},
};

static const kern_kv_traits kv_unknown = {.name = "unknown"};

const kern_kv_traits *kern_kv_traits_of(int t) {
    return t >= 0 && t < KERN_KV_N_DTYPES ? &kv_table[t] : &kv_unknown;
}

const char *kern_kv_dtype_name(kern_kv_dtype t) {
    return kern_kv_traits_of((int)t)->name;
}

int kern_kv_dtype_parse(const char *s, kern_kv_dtype *out) {
    for (int t = 0; s && t < KERN_KV_N_DTYPES; t++)
        if (!strcmp(s, kv_table[t].name) || (kv_table[t].alias && !strcmp(s, kv_table[t].alias))) {
            *out = (kern_kv_dtype)t;
            return 0;
        }
    return BRISK_EINVAL;
}

const char *kern_kv_dtype_list(int cuda) {
    /* Kept in step with the table by test_kern_kv. */
    return cuda ? "f16, int8, fp8" : "f32, f16, q8_0, q4_0";
}

int kern_kv_is_quant(kern_kv_dtype t) {
    return kern_kv_traits_of((int)t)->bits != 0;
}

int kern_kv_check(kern_kv_dtype t, int n_kv_heads, int head_dim, char *err, size_t err_len) {
    const kern_kv_traits *tr = kern_kv_traits_of((int)t);
    if (!tr->elem && !tr->bits) {
        snprintf(err, err_len, "unknown KV cache dtype %d", (int)t);
        return BRISK_EINVAL;
    }
    if (n_kv_heads <= 0 || head_dim <= 0) {
        snprintf(err, err_len, "KV cache: %d heads of %d values", n_kv_heads, head_dim);
        return BRISK_EINVAL;
    }
    int need = tr->group ? tr->group : 16;
    if (tr->bits && head_dim % need != 0) {
        snprintf(err, err_len,
                 "--kv-cache-dtype %s needs a head size that is a multiple of %d (this model's "
                 "is %d)",
                 tr->name, need, head_dim);
        return BRISK_EINVAL;
    }
    return 0;
}

size_t kern_kv_unit_bytes(kern_kv_dtype t) {
    const kern_kv_traits *tr = kern_kv_traits_of((int)t);
    return tr->elem ? tr->elem : 1;
}

/* *out = a * b; 0 on overflow. */
static int kv_mul(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

size_t kern_kv_layer_block_bytes(kern_kv_dtype t, int kv_dim, int head_dim, int block_size) {
    const kern_kv_traits *tr = kern_kv_traits_of((int)t);
    size_t rows;
    if (kv_dim <= 0 || head_dim <= 0 || block_size <= 0 || kv_dim % head_dim != 0 ||
        !kv_mul((size_t)kv_dim, (size_t)block_size, &rows))
        return 0;
    if (tr->elem) {
        size_t b;
        return kv_mul(rows, tr->elem, &b) ? b : 0;
    }
    if (!tr->bits)
        return 0;
    int group = tr->group ? tr->group : head_dim;
    if (head_dim % group != 0 || (rows * tr->bits) % 8 != 0 || rows > SIZE_MAX / 16)
        return 0;
    size_t bytes = rows * tr->bits / 8 + rows / (size_t)group * sizeof(uint16_t);
    return bytes > SIZE_MAX - 15 ? 0 : (bytes + 15) & ~(size_t)15;
}

size_t kern_kv_scale_off(kern_kv_dtype t, int kv_dim, int block_size) {
    const kern_kv_traits *tr = kern_kv_traits_of((int)t);
    return tr->bits ? (size_t)kv_dim * (size_t)block_size * tr->bits / 8 : 0;
}

/* ---- fp8 e4m3 ---------------------------------------------------------------- */

uint8_t kern_fp8_e4m3_from_f32(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a != a)
        return sign | 0x7f;
    if (a >= 448.0f) /* saturated: no infinities in e4m3 */
        return sign | 0x7e;
    if (a < 0.015625f) {             /* below 2^-6: subnormal steps of 2^-9, round half to even */
        float m = rintf(a * 512.0f); /* exact scaling; 8 becomes the smallest normal */
        return sign | (uint8_t)m;
    }
    int e;
    float f = frexpf(a, &e);                   /* a = f * 2^e, f in [0.5, 1): exponent e - 1 */
    float m = rintf((2.0f * f - 1.0f) * 8.0f); /* 3 mantissa bits, half to even */
    int ex = e - 1 + 7;
    if (m >= 8.0f) {
        m = 0.0f;
        ex++;
    }
    if (ex > 15 || (ex == 15 && m > 6.0f))
        return sign | 0x7e;
    return sign | (uint8_t)((ex << 3) | (int)m);
}

float kern_fp8_e4m3_to_f32(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return c & 0x80 ? -v : v;
}

/* ---- rows ---------------------------------------------------------------------- */

/* int8's code: |q| <= 127 for finite input; NaN -> 0 (a float-to-int
 * conversion of NaN or of a value out of range is undefined). */
static int8_t kv_pin8(float q) {
    if (q != q)
        return 0;
    return (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
}

void kern_kv_quantize(kern_kv_dtype t, const float *x, int n, int group, uint8_t *codes,
                      uint16_t *scales) {
    for (int g = 0; g < n / group; g++) {
        const float *xg = x + (size_t)g * group;
        if (t == KERN_KV_Q8_0) { /* llama.cpp's rule, from the type table */
            kern_block_q8_0 b;
            kern_quantize_row(KERN_TYPE_Q8_0, xg, &b, KERN_KV_QK);
            scales[g] = b.d;
            memcpy(codes + (size_t)g * KERN_KV_QK, b.qs, KERN_KV_QK);
            continue;
        }
        if (t == KERN_KV_Q4_0) {
            kern_block_q4_0 b;
            kern_quantize_row(KERN_TYPE_Q4_0, xg, &b, KERN_KV_QK);
            scales[g] = b.d;
            memcpy(codes + (size_t)g * (KERN_KV_QK / 2), b.qs, KERN_KV_QK / 2);
            continue;
        }
        float amax = 0.0f;
        for (int i = 0; i < group; i++)
            amax = fmaxf(amax, fabsf(xg[i]));
        float d = amax / (t == KERN_KV_FP8 ? 448.0f : 127.0f);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        scales[g] = kern_fp32_to_fp16(d);
        uint8_t *c = codes + (size_t)g * group;
        for (int i = 0; i < group; i++)
            c[i] = t == KERN_KV_FP8 ? kern_fp8_e4m3_from_f32(xg[i] * id)
                                    : (uint8_t)kv_pin8(roundf(xg[i] * id));
    }
}

float kern_kv_code_value(kern_kv_dtype t, const uint8_t *codes, int i) {
    switch (t) {
    case KERN_KV_Q8_0:
    case KERN_KV_INT8: return (float)(int8_t)codes[i];
    case KERN_KV_Q4_0: {
        int g = i / KERN_KV_QK, v = i % KERN_KV_QK;
        uint8_t b = codes[g * (KERN_KV_QK / 2) + v % (KERN_KV_QK / 2)];
        return (float)((v < KERN_KV_QK / 2 ? b & 15 : b >> 4) - 8);
    }
    case KERN_KV_FP8: return kern_fp8_e4m3_to_f32(codes[i]);
    default: return 0.0f;
    }
}

void kern_kv_dequantize(kern_kv_dtype t, const uint8_t *codes, const uint16_t *scales, int n,
                        int group, float *out) {
    for (int i = 0; i < n; i++)
        out[i] = kern_fp16_to_fp32(scales[i / group]) * kern_kv_code_value(t, codes, i);
}
