/* kern_amx.h - what the two AMX files (kern_matmul_amx.c, kern_bench_amx.c)
 * share: the tile configuration's layout and a LDTILECFG whose operand is
 * the whole configuration. Include only from a file compiled with the AMX
 * flags, or against tests/tools/emuamx.h (force-included before it). */
#ifndef KERN_AMX_H
#define KERN_AMX_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

/* GCC's tile intrinsics are asm statements that name no memory (only
 * tilestored has a memory clobber): this orders the C code's stores before
 * a tile load of them, and a tile store before the C code's loads of it. */
#define KERN_AMX_FENCE() __asm__ volatile("" ::: "memory")

/* The 64 bytes LDTILECFG reads (palette 1: tiles 0-7). */
typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kern_amx_cfg;
KERN_STATIC_ASSERT(sizeof(kern_amx_cfg) == 64, "LDTILECFG reads 64 bytes");

/* Loads the tile configuration c. Not GCC's _tile_loadconfig, whose
 * operand names 8 of the 64 bytes read: at -O3 GCC dropped the stores of a
 * configuration built in a local before it (seen in a review experiment). */
static inline void kern_amx_load_config(const kern_amx_cfg *c) {
    KERN_AMX_FENCE();
#ifdef EMUAMX_H
    _tile_loadconfig(c);
#else
    __asm__ volatile("ldtilecfg %0" ::"m"(*c));
#endif
    KERN_AMX_FENCE();
}

#endif
