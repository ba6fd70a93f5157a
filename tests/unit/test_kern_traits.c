/* test_kern_traits.c - the type table (kern_type_traits, kern_types.h)
 * walked row by row: every type's name round-trips through the parser,
 * the size facts agree with kern_row_bytes, the flags imply each other as
 * the header says, an X8 type and its base point at each other and agree,
 * each base's X8 block codes round-trip, and the compile-time KERN_WK_*
 * facts of the SIMD kernels (kern_internal.h) agree with the table. */
#include <stdint.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_kquant.h"
#include "kernels/cpu/kern_types.h"
#include "test_kern_util.h"

static void test_names(void) {
    int n_types = 0, n_valid = 0;
    for (uint32_t id = 0; id < KERN_TYPE_TABLE_SIZE; id++) {
        const kern_type_traits *r = kern_type_traits_of(id);
        if (!kern_type_table[id].name) {
            CHECK(r == &kern_type_unknown && !kern_type_valid(id) && !kern_type_known(id) &&
                      strcmp(kern_type_name((kern_type)id), "unknown") == 0,
                  "id %u: no type, the unknown row", id);
            continue;
        }
        n_types++;
        n_valid += r->valid;
        kern_type back = KERN_TYPE_F32;
        CHECK(r == &kern_type_table[id] && kern_type_name((kern_type)id) == r->name &&
                  kern_type_parse(r->name, &back) == 0 && back == (kern_type)id,
              "%s: name round trip (%d)", r->name, (int)back);
    }
    CHECK(n_types == 25 && n_valid == 15, "25 types, 15 of them GGML's (%d, %d)", n_types, n_valid);
    const uint32_t far[] = {KERN_TYPE_TABLE_SIZE, 1000, UINT32_MAX};
    for (int i = 0; i < 3; i++)
        CHECK(kern_type_traits_of(far[i]) == &kern_type_unknown &&
                  kern_type_block_size((kern_type)far[i]) == 1 &&
                  kern_row_bytes((kern_type)far[i], 64) == 0,
              "id %u past the table: unknown", far[i]);
    kern_type t = KERN_TYPE_Q8_0;
    CHECK(kern_type_parse("unknown", &t) == BRISK_EINVAL && kern_type_parse("Q4_K", &t) < 0 &&
              kern_type_parse("", &t) < 0 && kern_type_parse(NULL, &t) < 0 && t == KERN_TYPE_Q8_0,
          "the parser takes the names exactly, and leaves *out alone otherwise");
}

static void test_sizes_and_flags(void) {
    for (uint32_t id = 0; id < KERN_TYPE_TABLE_SIZE; id++) {
        const kern_type_traits *r = &kern_type_table[id];
        if (!r->name)
            continue;
        const kern_type t = (kern_type)id;
        const char *nm = r->name;
        CHECK(r->block_size > 0 && r->block_bytes > 0 && kern_type_block_size(t) == r->block_size &&
                  kern_type_block_bytes(t) == r->block_bytes &&
                  kern_row_bytes(t, 7 * (int64_t)r->block_size) == 7 * r->block_bytes,
              "%s: sizes agree with kern_row_bytes", nm);
        CHECK(r->block_size == 1 || r->block_size == KERN_QK || r->block_size == KERN_QK_K,
              "%s: block of 1, 32 or 256 values", nm);
        CHECK(!r->valid || r->known, "%s: valid -> known", nm);
        CHECK(!r->known || (r->to_f32 && r->x8_base == KERN_TYPE_F32),
              "%s: known -> a dequantizer, row-major", nm);
        CHECK(!r->matmul_int || r->matmul_ok, "%s: matmul_int -> matmul_ok", nm);
        CHECK(!r->matmul_ok || r->known || r->x8_base != KERN_TYPE_F32,
              "%s: multiplied as stored -> known or X8", nm);
        CHECK(!r->matmul_int || r->block_size == KERN_QK, "%s: integer weights in 32-blocks", nm);
        CHECK(r->kquant == (r->to_f32 == kern_kq_dequantize_row),
              "%s: kquant <-> kern_kquant's reference", nm);
        CHECK(kern_kq_is(t) == (r->kquant && r->valid) &&
                  kern_kq_block_size(t) == (r->kquant ? r->block_size : 0) &&
                  kern_kq_block_bytes(t) == (r->kquant ? r->block_bytes : 0),
              "%s: kern_kquant.h's facts are the table's", nm);
        CHECK(!r->kquant || !r->matmul_ok, "%s: a kquant type is converted, never multiplied", nm);
        CHECK(!r->from_f32 || (r->known && !r->kquant), "%s: brisk writes only its own types", nm);
        CHECK((r->int8 != KERN_TYPE_F32) == (r->to_int8 != NULL) &&
                  (r->int8 == KERN_TYPE_F32 || r->int8 == KERN_TYPE_Q8_0 ||
                   r->int8 == KERN_TYPE_Q8_0M) &&
                  kern_int8_type(t) == (r->int8 != KERN_TYPE_F32 ? r->int8 : KERN_TYPE_Q8_0),
              "%s: an int8 form <-> a conversion to it", nm);
        CHECK((r->kq_run != KERN_TYPE_F32) == (r->kquant && r->valid) &&
                  (r->kq_run == KERN_TYPE_F32 || kern_type_matmul_ok(r->kq_run)),
              "%s: a run type for exactly the file's kquant types", nm);
        CHECK(!(r->offset && r->two_scales), "%s: an offset or two scales, not both", nm);
        CHECK(!r->x8_planes || r->x8_nibble, "%s: bit planes sit above nibbles", nm);
    }
}

static void test_x8(void) {
    int n_x8 = 0;
    for (uint32_t id = 0; id < KERN_TYPE_TABLE_SIZE; id++) {
        const kern_type_traits *r = &kern_type_table[id];
        if (!r->name)
            continue;
        const kern_type t = (kern_type)id;
        if (r->x8_base != KERN_TYPE_F32) { /* an X8 type */
            const kern_type_traits *b = kern_type_traits_of(r->x8_base);
            n_x8++;
            CHECK(b->x8 == t && kern_type_is_x8(t) && kern_x8_base(t) == r->x8_base &&
                      kern_x8_type(r->x8_base) == t,
                  "%s: X8 type and base point at each other", r->name);
            CHECK(r->block_size == b->block_size && r->block_bytes == b->block_bytes &&
                      r->offset == b->offset && r->two_scales == b->two_scales,
                  "%s: repeats its base's facts", r->name);
            CHECK(r->matmul_ok && r->matmul_int && !r->valid && !r->known && !r->to_f32 &&
                      !r->from_f32 && !r->to_int8 && r->x8 == KERN_TYPE_F32,
                  "%s: multiplied as stored, no row conversions", r->name);
            continue;
        }
        CHECK(!kern_type_is_x8(t) && kern_x8_base(t) == t, "%s: row-major", r->name);
        if (r->x8 == KERN_TYPE_F32) {
            CHECK(kern_x8_type(t) == t && !r->x8_codes && !r->x8_make && !r->x8_nibble,
                  "%s: no X8 form, no X8 layout", r->name);
            continue;
        }
        /* A base: its block fits kern_x8_get_row's buffers, and its codes
         * round-trip through one of its blocks, whatever the bytes. */
        CHECK(r->x8_codes && r->x8_make && r->block_size == KERN_QK &&
                  r->block_bytes <= sizeof(kern_block_q8_0m),
              "%s: an X8 base", r->name);
        if (!r->x8_codes || !r->x8_make || r->block_bytes > sizeof(kern_block_q8_0m))
            continue;
        int bad = 0;
        for (int rep = 0; rep < 200; rep++) {
            uint8_t blk[sizeof(kern_block_q8_0m)], back[sizeof(kern_block_q8_0m)];
            uint8_t codes[KERN_QK];
            for (size_t i = 0; i < sizeof blk; i++)
                blk[i] = (uint8_t)rng_u64();
            uint16_t d = 0, m = 0;
            memset(back, 0xa5, sizeof back);
            r->x8_codes(t, blk, codes, &d, &m);
            r->x8_make(t, codes, d, m, back);
            bad += memcmp(blk, back, r->block_bytes) != 0;
            int max = r->x8_planes == 2 ? 63 : r->x8_planes == 1 ? 31 : r->x8_nibble ? 15 : 255;
            for (int i = 0; i < KERN_QK; i++)
                bad += codes[i] > max;
        }
        CHECK(bad == 0, "%s: X8 codes round-trip through a block (%d bad)", r->name, bad);
    }
    CHECK(n_x8 == 8, "eight X8 types (%d)", n_x8);
}

/* The SIMD kernels' compile-time facts (kern_internal.h) for each X8 type:
 * the same as the table's, which the scalar code reads. */
static void test_wk_agrees(void) {
    static const struct {
        kern_type x8;
        int wk;
    } map[] = {{KERN_TYPE_Q8_0X8, KERN_WK_Q8_0},    {KERN_TYPE_Q8_0MX8, KERN_WK_Q8_0M},
               {KERN_TYPE_Q4_0X8, KERN_WK_Q4_0},    {KERN_TYPE_Q4_1X8, KERN_WK_Q4_1},
               {KERN_TYPE_Q5_0X8, KERN_WK_Q5_0},    {KERN_TYPE_Q5_1X8, KERN_WK_Q5_1},
               {KERN_TYPE_IQ4_NLX8, KERN_WK_IQ4NL}, {KERN_TYPE_Q6_0SX8, KERN_WK_Q6S}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const int K = map[i].wk;
        const kern_type_traits *r = kern_type_traits_of(map[i].x8);
        const kern_type_traits *b = kern_type_traits_of(r->x8_base);
        size_t doff = b->x8_nibble ? 128 + 32 * (size_t)b->x8_planes : 256;
        CHECK(KERN_WK_BB(K) == r->block_bytes && KERN_WK_M(K) == r->offset &&
                  KERN_WK_S2(K) == r->two_scales && KERN_WK_NIB(K) == b->x8_nibble &&
                  KERN_WK_H5(K) == (b->x8_planes >= 1) && KERN_WK_H6(K) == (b->x8_planes >= 2) &&
                  KERN_WK_X8_DOFF(K) == doff && kern_is_int_weight(map[i].x8),
              "%s: KERN_WK_* agree with the table", r->name);
    }
}

int main(void) {
    test_names();
    test_sizes_and_flags();
    test_x8();
    test_wk_agrees();
    return finish("test_kern_traits");
}
