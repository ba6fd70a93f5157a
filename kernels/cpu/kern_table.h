/* kern_table.h - the kernel table: for each kind of CPU (kern_uarch), which
 * SIMD level's kernel kern_matmul runs for a class of weights at a batch
 * size. Rows are constants written from offline measurements
 * (bench/kern_table.sh), never timed at start-up. Internal to kernels/cpu. */
#ifndef KERN_TABLE_H
#define KERN_TABLE_H

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_types.h"

/* The weight classes a row distinguishes. X8 integer weights (every X8
 * form: their kernels share one structure per level) split by the level
 * the CPU tops at: X8_VNNI at avx512vnni and amx, X8_AVX512 at avx512
 * (AVX-512 without VNNI). Row-major integer weights have AVX2 kernels
 * only and never reach the table. */
typedef enum {
    KERN_TABLE_X8_VNNI,
    KERN_TABLE_X8_AVX512,
    KERN_TABLE_F32,
    KERN_TABLE_F16,
    KERN_TABLE_BF16,
    KERN_TABLE_N_CLASSES
} kern_table_class;

/* From from_tok tokens on (up to the next step's from_tok), level's
 * kernels. A class's steps start at 1 token and rise; from_tok 0 ends the
 * list. Levels: avx2 or avx512 for the float classes and X8_AVX512; avx2,
 * avx512vnni or amx for X8_VNNI (amx on a CPU without it runs as
 * avx512vnni: the same bits). */
typedef struct {
    int from_tok;
    kern_level level;
} kern_table_step;
#define KERN_TABLE_MAX_STEPS 4

typedef struct {
    kern_table_step steps[KERN_TABLE_N_CLASSES][KERN_TABLE_MAX_STEPS];
} kern_table_row;

/* The row of a kind (GENERIC's for a value out of range); static. */
const kern_table_row *kern_table_row_of(kern_uarch uarch);

/* The level the row of uarch runs weights wt at n_tok tokens with, on a
 * CPU whose level is top (>= avx512; wt not a row-major integer type):
 * never above top. n_tok < 1 counts as 1. */
kern_level kern_table_pick(kern_uarch uarch, kern_type wt, int n_tok, kern_level top);

/* NULL when every row is well formed (each class's steps start at 1 token,
 * rise, and name only levels the class has kernels for), else a static
 * description of the first fault (tests). */
const char *kern_table_check(void);

#endif
