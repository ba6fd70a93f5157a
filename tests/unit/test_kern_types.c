/* test_kern_types.c - type table, fp16/bf16 conversions (exhaustive), row
 * quantization round trips, Q4 -> Q8_0 / Q8_0M requantization, CPU
 * detection. */
#include <string.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_types.h"
#include "test_kern_util.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* An independent fp32 -> fp16 oracle: pick the nearer of the two halfs that
 * bracket f by comparing exact double distances, ties to the even one. It
 * scans the ordered positive halfs by bisection, so it shares no code or
 * idea with the bit-twiddling version under test. */
static uint16_t oracle_fp32_to_fp16(float f) {
    if (f != f)
        return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7bff; /* positive finite halfs are ordered like their bits */
    if (a >= kern_fp16_to_fp32(hi))
        return sign | hi; /* 65504 <= a < 65520 */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if ((double)kern_fp16_to_fp32(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - kern_fp16_to_fp32(lo), dh = kern_fp16_to_fp32(hi) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return sign | r;
}

static void test_fp16(void) {
    /* Every half -> float -> half is the identity (NaNs keep their payload),
     * and finite halfs convert to the exact value d * 2^e. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_fp16_to_fp32((uint16_t)h);
        uint16_t back = kern_fp32_to_fp16(f);
        if (back != h)
            bad++;
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        if (e != 31) {
            double v = e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
            if (h & 0x8000)
                v = -v;
            if ((double)f != v)
                bad++;
        }
    }
    CHECK(bad == 0, "fp16 round trip / exact value: %d mismatches", bad);

    /* Rounding: the midpoint between every pair of adjacent finite halfs
     * (exact in float), and one float ulp either side of it. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double a = kern_fp16_to_fp32((uint16_t)h);
        double b = h + 1 < 0x7c00 ? kern_fp16_to_fp32((uint16_t)(h + 1)) : 65536.0;
        float mid = (float)((a + b) / 2);
        float cands[3] = {mid, from_bits(bits(mid) - 1), from_bits(bits(mid) + 1)};
        for (int c = 0; c < 3; c++) {
            for (int s = 0; s < 2; s++) {
                float f = s ? -cands[c] : cands[c];
                if (kern_fp32_to_fp16(f) != oracle_fp32_to_fp16(f))
                    bad++;
            }
        }
    }
    /* And a million random floats over the whole range. */
    for (int i = 0; i < 1000000; i++) {
        float f = from_bits((uint32_t)rng_u64());
        if (f != f)
            continue;
        if (kern_fp32_to_fp16(f) != oracle_fp32_to_fp16(f))
            bad++;
    }
    CHECK(bad == 0, "fp32->fp16 rounding: %d mismatches vs oracle", bad);
    CHECK(kern_fp32_to_fp16(65519.0f) == 0x7bff && kern_fp32_to_fp16(65520.0f) == 0x7c00,
          "fp16 overflow edge");
    CHECK(kern_fp32_to_fp16(INFINITY) == 0x7c00 && kern_fp32_to_fp16(-INFINITY) == 0xfc00,
          "fp16 inf");
    uint16_t hn = kern_fp32_to_fp16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff), "fp16 NaN stays NaN");
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_bf16_to_fp32((uint16_t)h);
        if (bits(f) != h << 16)
            bad++;
        if (f == f && kern_fp32_to_bf16(f) != h)
            bad++;
    }
    CHECK(bad == 0, "bf16 exhaustive: %d mismatches", bad);
    /* Rounding: halfway cases go to even, anything past halfway goes up. */
    CHECK(kern_fp32_to_bf16(from_bits(0x3f808000)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(kern_fp32_to_bf16(from_bits(0x3f818000)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(kern_fp32_to_bf16(from_bits(0x3f808001)) == 0x3f81, "bf16 above half");
    uint16_t bn = kern_fp32_to_bf16(NAN);
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f), "bf16 NaN stays NaN");
}

static void test_table(void) {
    const kern_type types[] = {KERN_TYPE_F32,  KERN_TYPE_F16,    KERN_TYPE_Q4_0,  KERN_TYPE_Q4_1,
                               KERN_TYPE_Q8_0, KERN_TYPE_BF16,   KERN_TYPE_Q5_0,  KERN_TYPE_Q5_1,
                               KERN_TYPE_Q2_K, KERN_TYPE_Q3_K,   KERN_TYPE_Q4_K,  KERN_TYPE_Q5_K,
                               KERN_TYPE_Q6_K, KERN_TYPE_IQ4_NL, KERN_TYPE_IQ4_XS};
    const size_t bytes[] = {4, 2, 18, 20, 34, 2, 22, 24, 84, 110, 144, 176, 210, 18, 136};
    const int block[] = {1, 1, 32, 32, 32, 1, 32, 32, 256, 256, 256, 256, 256, 32, 256};
    for (int i = 0; i < 15; i++) {
        CHECK(kern_type_block_size(types[i]) == block[i], "block size %s",
              kern_type_name(types[i]));
        CHECK(kern_type_matmul_ok(types[i]) == (i < 6), "matmul_ok %s", kern_type_name(types[i]));
        CHECK(kern_type_valid(types[i]) && kern_type_known(types[i]), "valid %d", types[i]);
        CHECK(kern_type_block_bytes(types[i]) == bytes[i], "block bytes %s",
              kern_type_name(types[i]));
    }
    CHECK(!kern_type_valid(9) && !kern_type_valid(15) && !kern_type_valid(16) &&
              !kern_type_valid(31) && !kern_type_valid(0xffffffffu),
          "invalid ids");
    CHECK(!kern_type_known(9) && !kern_type_known(31) && !kern_type_known(65), "unknown ids");
    /* Q8_0M is brisk's own: known to the kernels, never valid in a file. */
    CHECK(!kern_type_valid(KERN_TYPE_Q8_0M) && kern_type_known(KERN_TYPE_Q8_0M), "q8_0m validity");
    CHECK(kern_type_block_bytes(KERN_TYPE_Q8_0M) == 36 &&
              kern_type_block_size(KERN_TYPE_Q8_0M) == 32 &&
              strcmp(kern_type_name(KERN_TYPE_Q8_0M), "q8_0m") == 0,
          "q8_0m table");
    CHECK(kern_row_bytes(KERN_TYPE_Q8_0, 576) == 18 * 34, "q8_0 row bytes");
    CHECK(kern_row_bytes(KERN_TYPE_Q8_0M, 576) == 18 * 36, "q8_0m row bytes");
    CHECK(kern_row_bytes(KERN_TYPE_F16, 576) == 1152, "f16 row bytes");
    CHECK(kern_int8_type(KERN_TYPE_Q4_0) == KERN_TYPE_Q8_0 &&
              kern_int8_type(KERN_TYPE_Q4_1) == KERN_TYPE_Q8_0M &&
              kern_int8_type(KERN_TYPE_Q8_0) == KERN_TYPE_Q8_0 &&
              kern_int8_type(KERN_TYPE_Q8_0M) == KERN_TYPE_Q8_0M &&
              kern_int8_type(KERN_TYPE_F16) == KERN_TYPE_Q8_0,
          "kern_int8_type");
}

/* Round-trip error bounds, per element, relative to the block's max |x|:
 * Q8_0 <= 0.5/127 of it plus the fp16 rounding of d (2^-11 relative),
 * Q4_0 <= d = max/8 (half a step inside the range, a full step for values near
 * -max, which the asymmetric 4-bit range [-8, 7] clamps to 7d), Q4_1 <= 0.5 * (max-min)/15 (+ fp16 of d, m),
 * Q8_0M <= half its step d = max(max - m, m - min) / 127, where m is the
 * block's midpoint rounded to fp16 (so the step grows by that rounding,
 * |mid| 2^-11, and by d's own rounding up to fp16: 2^-11 relative, or up to
 * 2^-24 absolute where d is an fp16 subnormal) plus the f32 rounding of the
 * dequantized value,
 * F16 <= 2^-11 relative, BF16 <= 2^-8 relative, F32 exact. */
static void test_quant_roundtrip(void) {
    enum { N = 1536 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    fill_normal(x, N, 1.0f);
    x[5] = 0.0f;
    for (int i = 64; i < 96; i++) /* one all-zero block: d = 0 must not divide by zero */
        x[i] = 0.0f;
    for (int i = 96; i < 128; i++) /* one block far from zero: Q8_0M's offset at work */
        x[i] = 100.0f + 0.01f * x[i];
    for (int i = 128; i < 160; i++) /* one constant block */
        x[i] = -0.3f;
    const kern_type types[] = {KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,
                               KERN_TYPE_Q4_0, KERN_TYPE_Q4_1, KERN_TYPE_Q8_0M};
    for (int ti = 0; ti < 7; ti++) {
        kern_type t = types[ti];
        kern_quantize_row(t, x, buf, N);
        kern_dequantize_row(t, buf, y, N);
        double worst = 0.0;
        for (int b = 0; b < N / 32; b++) {
            float amax = 0, mn = x[b * 32], mx = x[b * 32];
            for (int j = 0; j < 32; j++) {
                amax = fmaxf(amax, fabsf(x[b * 32 + j]));
                mn = fminf(mn, x[b * 32 + j]);
                mx = fmaxf(mx, x[b * 32 + j]);
            }
            for (int j = 0; j < 32; j++) {
                int i = b * 32 + j;
                double err = fabs((double)y[i] - x[i]), bound;
                switch (t) {
                case KERN_TYPE_F32: bound = 0; break;
                case KERN_TYPE_F16: bound = fabs(x[i]) * 0x1p-11; break;
                case KERN_TYPE_BF16: bound = fabs(x[i]) * 0x1p-8; break;
                case KERN_TYPE_Q8_0: bound = amax * (0.5 / 127 + 0x1p-10); break;
                case KERN_TYPE_Q4_0: bound = amax / 8 * (1.0 + 0x1p-9) + amax * 0x1p-10; break;
                case KERN_TYPE_Q8_0M:
                    bound =
                        0.5 * (((mx - mn) / 2 + fabs(mx + mn) / 2 * 0x1p-11) / 127 * (1 + 0x1p-10) +
                               0x1p-24) +
                        amax * 0x1p-23; /* the f32 rounding of d * q + m */
                    break;
                default:
                    bound = (mx - mn) / 15 * (0.5 + 0x1p-9) + fabsf(mn) * 0x1p-10 + 1e-7;
                    break;
                }
                if (err > bound * 1.0001 + 1e-30 && err - bound > worst)
                    worst = err - bound;
            }
        }
        CHECK(worst == 0.0, "%s round trip exceeds bound by %g", kern_type_name(t), worst);
    }
    /* Q8_0 never produces -128 and uses +-127 at the block maximum. */
    kern_quantize_row(KERN_TYPE_Q8_0, x, buf, N);
    const kern_block_q8_0 *qb = (const kern_block_q8_0 *)buf;
    int has127 = 0, has128 = 0;
    for (int b = 0; b < N / 32; b++)
        for (int j = 0; j < 32; j++) {
            has127 |= qb[b].qs[j] == 127 || qb[b].qs[j] == -127;
            has128 |= qb[b].qs[j] == -128;
        }
    CHECK(has127 && !has128, "q8_0 range");
    /* Q8_0M stays in [-127, 127] too, and reaches both ends in some block. */
    kern_quantize_row(KERN_TYPE_Q8_0M, x, buf, N);
    const kern_block_q8_0m *mb = (const kern_block_q8_0m *)buf;
    int lo = 0, hi = 0;
    has128 = 0;
    for (int b = 0; b < N / 32; b++)
        for (int j = 0; j < 32; j++) {
            lo |= mb[b].qs[j] == -127;
            hi |= mb[b].qs[j] == 127;
            has128 |= mb[b].qs[j] == -128;
        }
    CHECK(lo && hi && !has128, "q8_0m range");
}

static void test_requant(void) {
    enum { N = 576 };
    static float x[N], a[N], b[N];
    static uint8_t q4[N], q8[N * 2];
    fill_normal(x, N, 0.5f);
    for (int i = 32; i < 64; i++) /* an offset block, as Q4_1 files have */
        x[i] = 3.0f + 0.1f * x[i];
    /* Q4_0 -> Q8_0 is lossless, by both entry points. */
    kern_quantize_row(KERN_TYPE_Q4_0, x, q4, N);
    kern_requantize_row_q8_0(KERN_TYPE_Q4_0, q4, (kern_block_q8_0 *)q8, N);
    kern_dequantize_row(KERN_TYPE_Q4_0, q4, a, N);
    kern_dequantize_row(KERN_TYPE_Q8_0, q8, b, N);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "q4_0 -> q8_0 must be exact");
    memset(q8, 0, sizeof(q8));
    CHECK(kern_requantize_row_q8(KERN_TYPE_Q4_0, q4, q8, N) == 0, "q4_0 has an int8 form");
    kern_dequantize_row(kern_int8_type(KERN_TYPE_Q4_0), q8, b, N);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "q4_0 -> q8_0 (kern_requantize_row_q8) must be exact");
    /* Q4_1 -> Q8_0M is lossless: the same floats, bit for bit. */
    kern_quantize_row(KERN_TYPE_Q4_1, x, q4, N);
    CHECK(kern_requantize_row_q8(KERN_TYPE_Q4_1, q4, q8, N) == 0, "q4_1 has an int8 form");
    kern_dequantize_row(KERN_TYPE_Q4_1, q4, a, N);
    kern_dequantize_row(kern_int8_type(KERN_TYPE_Q4_1), q8, b, N);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "q4_1 -> q8_0m must be exact");
    /* Q8_0M -> itself is a copy; F16 has no exact int8 form. */
    static uint8_t q8b[N * 2];
    CHECK(kern_requantize_row_q8(KERN_TYPE_Q8_0M, q8, q8b, N) == 0 &&
              memcmp(q8, q8b, kern_row_bytes(KERN_TYPE_Q8_0M, N)) == 0,
          "q8_0m copy");
    CHECK(kern_requantize_row_q8(KERN_TYPE_F16, q4, q8b, N) == -1, "f16 has no exact int8 form");
    /* The old Q4_1 -> Q8_0 path loses at most half a Q8_0 step (max|x|/254) + fp16 of d. */
    kern_requantize_row_q8_0(KERN_TYPE_Q4_1, q4, (kern_block_q8_0 *)q8, N);
    kern_dequantize_row(KERN_TYPE_Q8_0, q8, b, N);
    int bad = 0;
    for (int blk = 0; blk < N / 32; blk++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(a[blk * 32 + j]));
        for (int j = 0; j < 32; j++)
            if (fabsf(a[blk * 32 + j] - b[blk * 32 + j]) > amax * (0.5f / 127 + 0x1p-10f))
                bad++;
    }
    CHECK(bad == 0, "q4_1 -> q8_0: %d values off", bad);
}

/* Weights from a file may be NaN or infinite: converting them must stay
 * defined (the ASan+UBSan build checks the float -> int8 conversions) and
 * give quants in range; a NaN becomes 0. fuzz_gguf found the undefined
 * conversion with a NaN weight converted to Q8_0 (--weights int8). */
static void test_quant_nonfinite(void) {
    static float x[64];
    static kern_block_q8_0 q8[2];
    static kern_block_q8_0m q8m[2];
    for (int i = 0; i < 64; i++)
        x[i] = 0.25f * (float)(i % 7) - 0.5f;
    x[3] = NAN;
    x[40] = INFINITY;
    x[41] = -INFINITY;
    kern_quantize_row(KERN_TYPE_Q8_0, x, q8, 64);
    kern_quantize_row(KERN_TYPE_Q8_0M, x, q8m, 64);
    int bad = 0;
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 32; j++)
            bad += q8[b].qs[j] < -127 || q8m[b].qs[j] < -127;
    CHECK(bad == 0, "%d quants out of [-127, 127]", bad);
    CHECK(q8[0].qs[3] == 0 && q8m[0].qs[3] == 0, "NaN quantizes to 0: %d %d", q8[0].qs[3],
          q8m[0].qs[3]);
    /* The finite block is unaffected by its neighbour's NaN: its scale is
     * the finite maximum, so its largest value maps to +-127. */
    CHECK(q8[0].qs[6] == 127, "finite values keep their scale: %d", q8[0].qs[6]);
}

static void test_cpu(void) {
    char buf[128];
    kern_cpu_describe(buf, sizeof(buf));
    printf("%s\n", buf);
    CHECK(strncmp(buf, "cpu(", 4) == 0, "describe format");
    kern_level top = detected_level();
    kern_cpu_set_max_level(KERN_LEVEL_SCALAR);
    CHECK(kern_cpu_level() == KERN_LEVEL_SCALAR, "cap to scalar");
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    CHECK(kern_cpu_level() == top, "cap lifted");
    const kern_cpu_features *f = kern_cpu_detect();
    CHECK(!f->avx512vnni || f->avx512, "vnni implies avx512");
    CHECK(!f->avx512 || f->avx2, "avx512 implies avx2");
    CHECK(strcmp(kern_level_name(KERN_LEVEL_AVX512VNNI), "avx512vnni") == 0, "level name");
    CHECK(strcmp(kern_level_name(KERN_LEVEL_AMX), "amx") == 0, "level name amx");
    CHECK(!f->amx || (f->amx_cpu && f->avx512vnni), "amx implies the CPU's amx and vnni");
    CHECK(!f->amx || f->amx_refused == NULL, "amx granted has no refusal");
    CHECK(!f->amx_cpu || f->amx || f->amx_refused != NULL, "amx refused says why");
}

int main(void) {
    test_table();
    test_fp16();
    test_bf16();
    test_quant_roundtrip();
    test_requant();
    test_quant_nonfinite();
    test_cpu();
    return finish("test_kern_types");
}
