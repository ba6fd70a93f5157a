/* kern_types.h - tensor element types, quantized block layouts, conversions.
 *
 * Type ids equal the GGML type ids stored in GGUF files, so a tensor's type
 * field can be used directly once validated with kern_type_valid(). One
 * type is brisk's own and never valid in a file: Q8_0M (id 64, far above the
 * GGML ids), the lossless int8 form of Q4_1 (`--weights int8`; the matmul
 * kernels also run Q4_0 and Q4_1 as stored, with the same results).
 *
 * Quantized layouts (blocks of KERN_QK = 32 consecutive values of one row):
 *   Q8_0: { fp16 d; int8 qs[32]; }              x[i] = d * qs[i]
 *   Q4_0: { fp16 d; uint8 qs[16]; }             x[i] = d * ((nibble) - 8)
 *   Q4_1: { fp16 d; fp16 m; uint8 qs[16]; }     x[i] = d * nibble + m
 *   Q8_0M: { fp16 d; fp16 m; int8 qs[32]; }     x[i] = d * qs[i] + m
 *   For Q4_*: byte j holds value j in its low nibble and value j+16 in its
 *   high nibble (j = 0..15), as in GGML.
 * A row of n values (n a multiple of the block size) is n/32 blocks packed
 * back to back; kern_row_bytes() gives its size. */
#ifndef KERN_TYPES_H
#define KERN_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* The CUDA kernels (C++) include this header too: there the static
 * assertion is spelled static_assert and the functions keep C linkage. */
#ifdef __cplusplus
#define KERN_STATIC_ASSERT static_assert
extern "C" {
#else
#define KERN_STATIC_ASSERT _Static_assert
#endif

typedef enum kern_type {
    KERN_TYPE_F32 = 0,
    KERN_TYPE_F16 = 1,
    KERN_TYPE_Q4_0 = 2,
    KERN_TYPE_Q4_1 = 3,
    KERN_TYPE_Q5_0 = 6, /* Q5_0 .. IQ4_XS: read from files and converted */
    KERN_TYPE_Q5_1 = 7, /* (kern_kquant.h); the matmul kernels never see them */
    KERN_TYPE_Q8_0 = 8,
    KERN_TYPE_Q2_K = 10,
    KERN_TYPE_Q3_K = 11,
    KERN_TYPE_Q4_K = 12,
    KERN_TYPE_Q5_K = 13,
    KERN_TYPE_Q6_K = 14,
    KERN_TYPE_IQ4_NL = 20,
    KERN_TYPE_IQ4_XS = 23,
    KERN_TYPE_BF16 = 30,
    KERN_TYPE_Q8_0M = 64,    /* brisk-internal, see above */
    KERN_TYPE_Q8_0X8 = 65,   /* brisk-internal: Q8_0 in groups of 8 rows, see below */
    KERN_TYPE_Q8_0MX8 = 66,  /* brisk-internal: Q8_0M in groups of 8 rows */
    KERN_TYPE_Q4_0X8 = 67,   /* brisk-internal: Q4_0 in groups of 8 rows */
    KERN_TYPE_Q4_1X8 = 68,   /* brisk-internal: Q4_1 in groups of 8 rows */
    KERN_TYPE_Q5_0X8 = 69,   /* brisk-internal: Q5_0 in groups of 8 rows */
    KERN_TYPE_Q5_1X8 = 70,   /* brisk-internal: Q5_1 in groups of 8 rows */
    KERN_TYPE_IQ4_NLX8 = 71, /* brisk-internal: IQ4_NL in groups of 8 rows */
    KERN_TYPE_Q6_0S = 72,    /* brisk-internal: Q6_K's values 32 at a time, see below */
    KERN_TYPE_Q6_0SX8 = 73,  /* brisk-internal: Q6_0S in groups of 8 rows */
} kern_type;

#define KERN_QK 32

typedef struct {
    uint16_t d;
    int8_t qs[KERN_QK];
} kern_block_q8_0;
typedef struct {
    uint16_t d;
    uint8_t qs[KERN_QK / 2];
} kern_block_q4_0;
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[KERN_QK / 2];
} kern_block_q4_1;

typedef struct {
    uint16_t d;
    uint16_t m;
    int8_t qs[KERN_QK];
} kern_block_q8_0m;

KERN_STATIC_ASSERT(sizeof(kern_block_q8_0) == 34, "q8_0 block is 34 bytes");
KERN_STATIC_ASSERT(sizeof(kern_block_q8_0m) == 36, "q8_0m block is 36 bytes");
KERN_STATIC_ASSERT(sizeof(kern_block_q4_0) == 18, "q4_0 block is 18 bytes");
KERN_STATIC_ASSERT(sizeof(kern_block_q4_1) == 20, "q4_1 block is 20 bytes");

/* ---- row-interleaved integer weights (the X8 types) ------------------------
 * Q8_0X8, Q8_0MX8, Q4_0X8 and Q4_1X8 hold the values of Q8_0, Q8_0M, Q4_0
 * and Q4_1 in groups of 8 rows, so that one 16-byte load gives value pairs of
 * each of 8 rows, the operand the SIMD kernels multiply by a broadcast
 * activation pair with no repacking per call. n_out is padded to a multiple
 * of 8 with zero rows. Group g starts at byte g * 8 * kern_row_bytes(base,
 * n_in); in it, block b (values 32b..32b+31 of the 8 rows) starts at byte
 * b * 8 * block_bytes(base) and holds, for the int8 bases,
 *   qs[16][8][2]: byte 16 j + 2 r + e = value 2 j + e of row r (int8),
 *   d[8] (fp16, row r's d) at byte 256, then for Q8_0MX8 m[8] (fp16),
 * and for the 4-bit bases
 *   qs[8][8][2]: byte 16 c + 2 r + e = value 4 c + e of row r in its low
 *     nibble and value 4 c + 2 + e in its high nibble (the nibbles as stored
 *     in the base block: Q4_0's value is nibble - 8),
 *   d[8] at byte 128, then for Q4_1X8 m[8],
 * so that a 16-byte chunk widened to 16-bit lanes gives, masked with 15, the
 * value pair 2c of each row and, shifted right by 4, the pair 2c + 1. A
 * group block is 8 base blocks long (272, 288, 144 or 160 bytes) and a
 * matrix is as large as its base form. A row is not contiguous:
 * kern_x8_get_row() extracts one. The generic row conversions
 * (kern_dequantize_row, ...) do not take these types (kern_type_known() is 0
 * for them); kern_matmul() does. */
/* Q5_0X8 and Q5_1X8 are Q4_0X8 and Q4_1X8 of the codes' low 4 bits, with
 * 32 bytes of fifth bits between the nibbles and d[8] (d at byte 160): for
 * 16-byte chunk c, the little-endian u16 at byte 128 + 4 c has bit 2 r + e
 * set where value 4 c + e of row r has its fifth bit, the u16 at 130 + 4 c
 * the same for value 4 c + 2 + e: the lanes of the chunk widened to int16,
 * low nibbles then high. A group block is 176 (Q5_0) or 192 (Q5_1) bytes.
 * Q5_0's value is d * (code - 16), Q5_1's d * code + m. IQ4_NLX8 is Q4_0X8's
 * layout of IQ4_NL's nibbles, the value d * KV[nibble] (kern_kquant.h). The
 * row-major Q5_0, Q5_1 and IQ4_NL have no matmul kernel: a matrix in them is
 * either X8 or converted (kern_kquant.h).
 * Q6_0S is Q6_K regrouped 32 values at a time (kern_kquant.h: 28 bytes,
 * { fp16 da, db; u8 qs[16]; u8 qh[8] }: x = da * (code - 32) for values
 * 0..15, db * (code - 32) for 16..31, the scales d * sc of the two 16-value
 * sub-blocks in fp16); Q6_0SX8 holds its codes as Q5_0X8 does plus a second
 * bit plane (bit 5) at byte 160, and da[8], db[8] at 192 and 208: a group
 * block of 224 bytes. Its block sum is two integer sums, one per scale. */
/* The X8 form of t (Q8_0 -> Q8_0X8, Q8_0M -> Q8_0MX8, Q4_0 -> Q4_0X8,
 * Q4_1 -> Q4_1X8, Q5_0 -> Q5_0X8, Q5_1 -> Q5_1X8, IQ4_NL -> IQ4_NLX8, Q6_0S
 * -> Q6_0SX8), or t when it has none. */
kern_type kern_x8_type(kern_type t);
/* The row-major type of an X8 type (Q8_0X8 -> Q8_0, ...), or t itself. */
kern_type kern_x8_base(kern_type t);
int kern_type_is_x8(kern_type t);
/* Bytes of an X8 matrix of n_out rows (padded to a multiple of 8) of n_in. */
size_t kern_x8_bytes(kern_type t, int64_t n_out, int64_t n_in);
/* Writes group g of X8 matrix dst (type kern_x8_type(base)) from n_rows <= 8
 * rows of base type at rows[0..n_rows) (each kern_row_bytes(base, n_in)
 * bytes); rows n_rows..7 of the group are zero. */
void kern_x8_pack_group(kern_type base, const void *const *rows, int n_rows, int64_t n_in,
                        void *dst, int64_t g);
/* Copies row r of X8 matrix W (type t) into dst as one row of
 * kern_x8_base(t). */
void kern_x8_get_row(kern_type t, const void *W, int64_t n_in, int64_t r, void *dst);
/* Row r of X8 matrix W as floats: the bits kern_dequantize_row gives for
 * that row in the base type. */
void kern_x8_dequantize_row(kern_type t, const void *W, int64_t n_in, int64_t r, float *dst);

/* ---- the type table ---------------------------------------------------------
 * Every fact about a type is one row of kern_type_table, indexed by the
 * type's id; the functions of this header read it and decide nothing per
 * type themselves. Adding a type is adding its row (kern_types.c), its
 * functions, and its tests (test_kern_traits.c walks the table and checks
 * each row's invariants). */

/* A row of n values (a multiple of the block size) as floats. The type is
 * passed so that one function can serve a family: kern_kquant.c's
 * reference serves ten types. */
typedef void (*kern_to_f32_fn)(kern_type t, const void *src, float *dst, int64_t n);
/* n floats quantized into a row of the type. */
typedef void (*kern_from_f32_fn)(kern_type t, const float *src, void *dst, int64_t n);
/* A row converted to the type's exact int8 form (kern_requantize_row_q8);
 * 0, or -1 with dst untouched. */
typedef int (*kern_to_int8_fn)(kern_type t, const void *src, void *dst, int64_t n);
/* The X8 packing of a base type, one block: its 32 stored codes (the int8 q
 * as bytes, or the 4- to 6-bit codes), d and m (0 where it has none); and
 * the inverse. */
typedef void (*kern_x8_codes_fn)(kern_type base, const uint8_t *blk, uint8_t codes[KERN_QK],
                                 uint16_t *d, uint16_t *m);
typedef void (*kern_x8_make_fn)(kern_type base, const uint8_t codes[KERN_QK], uint16_t d,
                                uint16_t m, uint8_t *blk);

typedef struct kern_type_traits {
    const char *name;   /* GGML's name ("q4_K"), brisk's for its own types */
    int block_size;     /* values per block (an X8 type: its base's) */
    size_t block_bytes; /* bytes per block (an X8 type: its base's, 1/8 of a group block) */
    uint8_t valid;      /* a GGML type a file may hold (kern_type_valid) */
    uint8_t known;      /* the row conversions take it (kern_type_known) */
    uint8_t matmul_ok;  /* kern_matmul multiplies it as stored */
    uint8_t matmul_int; /* ... as integer weights against quantized activations */
    uint8_t kquant;     /* kern_kquant.h's reference is its dequantizer */
    uint8_t offset;     /* each 32-value block holds d and m: x = d * q + m */
    uint8_t two_scales; /* each 32-value block holds two scales, one per 16 values */
    /* Types related to it; KERN_TYPE_F32 (0), which has none and is none of
     * them, stands for "none". */
    kern_type x8;      /* its X8 form */
    kern_type x8_base; /* for an X8 type: its row-major base */
    kern_type int8;    /* the int8 type that holds its values exactly */
    kern_type kq_run;  /* kern_kquant.h's: the row-major type the matmul runs it as */
    /* Conversions; NULL: none (the row functions then write nothing). */
    kern_to_f32_fn to_f32;
    kern_from_f32_fn from_f32; /* only the types brisk writes */
    kern_to_int8_fn to_int8;   /* exactly the types with an int8 form */
    /* A base of an X8 type: its codes in the group block (kern_types.h's X8
     * layouts) and the functions that take them out of and put them into
     * one of its blocks. */
    uint8_t x8_nibble; /* 4-bit code pairs per byte (else one int8 per byte) */
    uint8_t x8_planes; /* bit planes of higher code bits: 1 (Q5_*), 2 (Q6_0S) */
    kern_x8_codes_fn x8_codes;
    kern_x8_make_fn x8_make;
} kern_type_traits;

/* Type ids are below this. */
#define KERN_TYPE_TABLE_SIZE 74
/* Rows of ids no type has are zero (name NULL). */
extern const kern_type_traits kern_type_table[KERN_TYPE_TABLE_SIZE];
/* The row kern_type_traits_of gives for an id no type has: name "unknown",
 * block size 1, 0 bytes, no flags, no functions. */
extern const kern_type_traits kern_type_unknown;

/* The row of type id t (any id, e.g. one read from a file): static, never
 * freed. Inline: the matmul dispatch reads it per call. */
static inline const kern_type_traits *kern_type_traits_of(uint32_t t) {
    return t < KERN_TYPE_TABLE_SIZE && kern_type_table[t].name ? &kern_type_table[t]
                                                               : &kern_type_unknown;
}

/* The type named name (kern_type_name's names, exactly): 0 and *out set,
 * or BRISK_EINVAL (*out untouched). */
int kern_type_parse(const char *name, kern_type *out);

/* 1 for the fifteen GGML types above, 0 for anything else (e.g. an id read
 * from a file, and Q8_0M, which no file may hold). */
int kern_type_valid(uint32_t type);
/* 1 for the GGML types, Q8_0M and Q6_0S: the types the row conversions
 * below handle. */
int kern_type_known(uint32_t type);
/* 1 for the types kern_matmul multiplies as they are: F32, F16, BF16, Q8_0,
 * Q8_0M, Q4_0, Q4_1 and the X8 forms. The others (kern_kquant.h) are
 * converted at load. */
int kern_type_matmul_ok(uint32_t type);
const char *kern_type_name(kern_type t);
/* Values per block: 1 for F32/F16/BF16, 32 for Q4_*, Q5_*, Q8_*, IQ4_NL
 * (the X8 types: as their base), 256 for the K-quants and IQ4_XS. */
int kern_type_block_size(kern_type t);
/* Bytes per block: 4, 2, 2, 34, 18, 20, 36 (Q8_0M), the others' as in
 * kern_kquant.h; an X8 type as its base (so kern_row_bytes gives 1/8 of a
 * group). */
size_t kern_type_block_bytes(kern_type t);
/* Bytes of a row of n values; n must be a multiple of the block size. */
size_t kern_row_bytes(kern_type t, int64_t n);

/* Scalar conversions (IEEE half with round-to-nearest-even; bf16 by rounding). */
float kern_fp16_to_fp32(uint16_t h);
uint16_t kern_fp32_to_fp16(float f);
float kern_bf16_to_fp32(uint16_t h);
uint16_t kern_fp32_to_bf16(float f);

/* Row conversions. n is a multiple of the type's block size. */
void kern_dequantize_row(kern_type t, const void *src, float *dst, int64_t n);
/* Quantize f32 to t: F32, F16, BF16, Q8_0, Q8_0M, Q4_0 or Q4_1 (brisk
 * writes no other type; for those this does nothing). Q8_0 uses d = max|x| / 127 and
 * qs = round(x / d), as GGML does. Q8_0M centres each block: m = its
 * (max + min) / 2 in fp16, d = the larger distance from m to max or min,
 * over 127, rounded up to fp16, and qs = round((x - m) / d) in [-127, 127]. */
void kern_quantize_row(kern_type t, const float *src, void *dst, int64_t n);

/* ---- int8 weights for the matmul kernels ----------------------------------
 * The int8 type that holds every value of type t exactly, where one exists:
 * Q4_0 -> Q8_0 (q - 8 fits int8, same d), Q4_1 -> Q8_0M (the nibble fits
 * int8, same d and m), Q8_0 and Q8_0M -> themselves; Q5_0 and IQ4_NL ->
 * Q8_0 and Q5_1 -> Q8_0M exactly, IQ4_XS -> Q8_0 and Q4_K, Q5_K -> Q8_0M
 * with their block scales rounded to fp16 (kern_kq_convert_row). Any other
 * t (F32, F16, BF16, Q2_K, Q3_K, Q6_K) has no such int8 form and gets Q8_0
 * (quantize from f32). */
kern_type kern_int8_type(kern_type t);
/* Converts a row of n values (n a multiple of 32) of src_type to
 * kern_int8_type(src_type) bit-exactly: dequantizing dst gives the same
 * floats as dequantizing src (for IQ4_XS, Q4_K and Q5_K: up to the fp16
 * rounding of the scales). Returns 0, or -1 (dst untouched) if src_type has
 * no exact int8 form; the caller then dequantizes to f32 and calls
 * kern_quantize_row(KERN_TYPE_Q8_0, ...). src and dst are borrowed. */
int kern_requantize_row_q8(kern_type src_type, const void *src, void *dst, int64_t n);
/* Older contract, kept: Q4_0/Q4_1 -> Q8_0. Exact for Q4_0; Q4_1's offset has
 * no Q8_0 form, so each block is dequantized in f32 and requantized (lossy:
 * prefer kern_requantize_row_q8, which makes Q8_0M). */
void kern_requantize_row_q8_0(kern_type t, const void *src, kern_block_q8_0 *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
