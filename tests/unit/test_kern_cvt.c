/* test_kern_cvt.c - the float-type conversions of kern_cvt.h at every SIMD
 * level against the scalar reference, bit for bit (tolerance: none):
 *   - every one of the 65536 bf16 values (NaNs signalling and quiet, both
 *     infinities, subnormals, values that overflow the half range, ties of
 *     the half rounding), to f16 and to f32;
 *   - random rows (normal values mixed with those specials) of lengths
 *     around the vector widths, src and dst at odd byte offsets, with guard
 *     bytes around dst that must stay untouched;
 *   - the reference itself against the definitions: bf16 -> f32 is the bits
 *     moved up 16 places, bf16 -> f16 is kern_fp32_to_fp16 of that (whose
 *     rounding test_kern_types.c checks against an independent oracle), and
 *     a few hand-computed cases (the subnormal tie 1.5 * 2^-24 -> 2 * 2^-24,
 *     65520 -> inf, a signalling NaN keeping its quiet bit clear);
 *   - kern_cvt_rows: rows gathered through a row map (the q/k permutation's
 *     use) and with strides, equal to kern_cvt_row_ref row by row;
 *   - a pair it does not convert returns -1 and writes nothing. */
#include <string.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_cvt.h"
#include "kernels/cpu/kern_types.h"
#include "test_kern_util.h"

#define GUARD 64
#define GUARD_BYTE 0xA5

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the values used below */
}

static void test_reference(void) {
    /* Definitions, over every bf16 value. */
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t in = (uint16_t)b, h;
        float f;
        kern_cvt_row_ref(KERN_TYPE_BF16, &in, KERN_TYPE_F32, &f, 1);
        uint32_t fb;
        memcpy(&fb, &f, 4);
        bad += fb != b << 16;
        kern_cvt_row_ref(KERN_TYPE_BF16, &in, KERN_TYPE_F16, &h, 1);
        bad += h != kern_fp32_to_fp16(f);
    }
    CHECK(bad == 0, "reference: %d values differ from the definitions", bad);
    /* Hand-computed cases. */
    static const struct {
        uint16_t bf16, f16;
    } cases[] = {
        {0x3f80, 0x3c00}, /* 1.0 */
        {0xc000, 0xc000}, /* -2.0 */
        {0x33c0, 0x0002}, /* 1.5 units of 2^-24: a tie between 1 and 2 -> even (2) */
        {0x33a0, 0x0001}, /* 1.25 units: rounds to 1 */
        {0x3340, 0x0001}, /* 0.75 units: rounds to 1 */
        {0x3300, 0x0000}, /* 2^-25: half a unit, tie -> 0 */
        {0x8000, 0x8000}, /* -0 */
        {0x477f, 0x7bf8}, /* 65280: exact */
        {0x4780, 0x7c00}, /* 65536: over the largest half (65504) -> inf */
        {0x7f80, 0x7c00}, /* +inf */
        {0xff80, 0xfc00}, /* -inf */
        {0x7fc0, 0x7e00}, /* quiet NaN */
        {0x7f81, 0x7c08}, /* signalling NaN: payload kept, quiet bit not set */
        {0xffa5, 0xfd28}, /* negative signalling NaN */
        {0x0001, 0x0000}, /* a bf16 subnormal: far below the half range */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = 0;
        kern_cvt_row_ref(KERN_TYPE_BF16, &cases[i].bf16, KERN_TYPE_F16, &h, 1);
        CHECK(h == cases[i].f16, "bf16 %04x -> f16 %04x, want %04x", cases[i].bf16, h,
              cases[i].f16);
    }
    CHECK(bf16_of(1.0f) == 0x3f80, "bf16_of");
}

/* Every bf16 value through kern_cvt_row at each level, one call of 65536. */
static void test_exhaustive(kern_level top) {
    static uint16_t in[65536], h[65536], h_ref[65536];
    static float f[65536], f_ref[65536];
    for (uint32_t b = 0; b < 65536; b++)
        in[b] = (uint16_t)b;
    kern_cvt_row_ref(KERN_TYPE_BF16, in, KERN_TYPE_F16, h_ref, 65536);
    kern_cvt_row_ref(KERN_TYPE_BF16, in, KERN_TYPE_F32, f_ref, 65536);
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        CHECK(kern_cvt_row(KERN_TYPE_BF16, in, KERN_TYPE_F16, h, 65536) == 0, "bf16 -> f16");
        CHECK(kern_cvt_row(KERN_TYPE_BF16, in, KERN_TYPE_F32, f, 65536) == 0, "bf16 -> f32");
        int bad16 = 0, bad32 = 0, first = -1;
        for (int i = 0; i < 65536; i++) {
            if (h[i] != h_ref[i] && first < 0)
                first = i;
            bad16 += h[i] != h_ref[i];
            bad32 += memcmp(&f[i], &f_ref[i], 4) != 0;
        }
        printf("level %-10s every bf16: %d f16 and %d f32 results differ from the reference\n",
               kern_level_name((kern_level)lv), bad16, bad32);
        CHECK(bad16 == 0, "level %s: %d f16 differ (first bf16 %04x: %04x, want %04x)",
              kern_level_name((kern_level)lv), bad16, first, first >= 0 ? h[first] : 0,
              first >= 0 ? h_ref[first] : 0);
        CHECK(bad32 == 0, "level %s: %d f32 differ", kern_level_name((kern_level)lv), bad32);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* A random bf16: mostly N(0, sd) values of scales from 1e-9 to 1e6 (subnormal
 * halfs, overflow), sometimes a special. */
static uint16_t random_bf16(void) {
    static const uint16_t special[] = {0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x7fbf, 0x0000,
                                       0x8000, 0x0001, 0x807f, 0x33c0, 0x3300, 0x4780, 0x477f};
    uint64_t r = rng_u64();
    if (r % 8 == 0)
        return special[(r >> 8) % (sizeof special / sizeof special[0])];
    if (r % 8 == 1)
        return (uint16_t)(r >> 16); /* any bits */
    static const float scale[] = {1e-9f, 1e-7f, 6e-5f, 0.02f, 1.0f, 300.0f, 7e4f, 1e6f};
    uint32_t u;
    float f = rng_normal() * scale[(r >> 8) % 8];
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static void test_random_rows(kern_level top) {
    static const int lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 2053};
    enum { NMAX = 2053 };
    static uint8_t src[2 * NMAX + 8], want[4 * NMAX];
    static _Alignas(64) uint8_t dst[4 * NMAX + 2 * GUARD + 64];
    const kern_type dsts[] = {KERN_TYPE_F16, KERN_TYPE_F32, KERN_TYPE_BF16}; /* BF16: a copy */
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        int bad = 0, cases = 0;
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            /* src at byte offsets 0..3; dst 64-byte aligned (the streaming
             * stores of both SIMD levels), 32-byte aligned (AVX2's), 1 and 2 */
            for (int off = 0; off < 4; off++) {
                int n = lens[k];
                uint8_t *s = src + off;
                for (int i = 0; i < n; i++) {
                    uint16_t v = random_bf16();
                    memcpy(s + 2 * i, &v, 2);
                }
                for (size_t d = 0; d < sizeof dsts / sizeof dsts[0]; d++) {
                    size_t out_bytes = (size_t)n * (dsts[d] == KERN_TYPE_F32 ? 4 : 2);
                    uint8_t *o = dst + GUARD + (off == 0 ? 0 : off == 1 ? 32 : off - 1);
                    memset(dst, GUARD_BYTE, sizeof dst);
                    int rc = kern_cvt_row(KERN_TYPE_BF16, s, dsts[d], o, n);
                    kern_cvt_row_ref(KERN_TYPE_BF16, s, dsts[d], want, n);
                    int ok = rc == 0 && memcmp(o, want, out_bytes) == 0;
                    for (uint8_t *g = dst; g < o; g++)
                        ok = ok && *g == GUARD_BYTE;
                    for (uint8_t *g = o + out_bytes; g < o + out_bytes + GUARD; g++)
                        ok = ok && *g == GUARD_BYTE;
                    bad += !ok;
                    cases++;
                    if (!ok)
                        fprintf(stderr, "level %s: n %d offset %d -> %s differs\n",
                                kern_level_name((kern_level)lv), n, off, kern_type_name(dsts[d]));
                }
            }
        }
        printf("level %-10s random rows: %d of %d differ or write outside\n",
               kern_level_name((kern_level)lv), bad, cases);
        CHECK(bad == 0, "level %s: %d random rows differ", kern_level_name((kern_level)lv), bad);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

static void test_copies_and_refusals(void) {
    float a[37], b[37];
    fill_normal(a, 37, 1.0f);
    CHECK(kern_cvt_row(KERN_TYPE_F32, a, KERN_TYPE_F32, b, 37) == 0 && !memcmp(a, b, sizeof a),
          "f32 copy");
    uint16_t h[5] = {1, 2, 3, 4, 5}, g[5] = {0};
    CHECK(kern_cvt_row(KERN_TYPE_F16, h, KERN_TYPE_F16, g, 5) == 0 && !memcmp(h, g, sizeof h),
          "f16 copy");
    uint8_t out[64];
    memset(out, GUARD_BYTE, sizeof out);
    CHECK(kern_cvt_row(KERN_TYPE_F16, h, KERN_TYPE_BF16, out, 5) == -1, "f16 -> bf16 refused");
    CHECK(kern_cvt_row(KERN_TYPE_F32, a, KERN_TYPE_Q8_0, out, 32) == -1, "f32 -> q8_0 refused");
    CHECK(kern_cvt_row_ref(KERN_TYPE_Q4_0, a, KERN_TYPE_Q4_0, out, 32) == -1, "q4_0 copy refused");
    int untouched = 1;
    for (size_t i = 0; i < sizeof out; i++)
        untouched = untouched && out[i] == GUARD_BYTE;
    CHECK(untouched, "a refused pair wrote its output");
}

static void test_rows(kern_level top) {
    enum { ROWS = 12, N = 77, SRC_STRIDE = 2 * N + 3, DST_STRIDE = 4 * N + 64 };
    static uint8_t src[ROWS * SRC_STRIDE + 1];
    static _Alignas(64) uint8_t dst[ROWS * DST_STRIDE], want[ROWS * DST_STRIDE];
    int64_t map[ROWS];
    for (int r = 0; r < ROWS; r++)
        map[r] = (r * 5 + 3) % ROWS; /* a permutation */
    for (int i = 0; i < ROWS * SRC_STRIDE / 2; i++) {
        uint16_t v = random_bf16();
        memcpy(src + 1 + 2 * i, &v, 2);
    }
    const kern_type dsts[] = {KERN_TYPE_F16, KERN_TYPE_F32, KERN_TYPE_BF16};
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        for (size_t d = 0; d < sizeof dsts / sizeof dsts[0]; d++) {
            for (int mapped = 0; mapped < 2; mapped++) {
                memset(dst, GUARD_BYTE, sizeof dst);
                memset(want, GUARD_BYTE, sizeof want);
                int rc = kern_cvt_rows(KERN_TYPE_BF16, src + 1, SRC_STRIDE, mapped ? map : NULL,
                                       dsts[d], dst, DST_STRIDE, N, ROWS);
                for (int r = 0; r < ROWS; r++)
                    kern_cvt_row_ref(KERN_TYPE_BF16, src + 1 + (mapped ? map[r] : r) * SRC_STRIDE,
                                     dsts[d], want + r * DST_STRIDE, N);
                CHECK(rc == 0 && !memcmp(dst, want, sizeof dst),
                      "level %s: kern_cvt_rows to %s (map %d) differs or writes between rows",
                      kern_level_name((kern_level)lv), kern_type_name(dsts[d]), mapped);
            }
        }
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    CHECK(kern_cvt_rows(KERN_TYPE_F16, src, SRC_STRIDE, NULL, KERN_TYPE_Q8_0, dst, DST_STRIDE, 32,
                        1) == -1,
          "kern_cvt_rows: f16 -> q8_0 refused");
}

int main(void) {
    kern_level top = detected_level();
    test_reference();
    test_exhaustive(top);
    test_random_rows(top);
    test_rows(top);
    test_copies_and_refusals();
    return finish("test_kern_cvt");
}
