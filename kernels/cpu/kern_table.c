/* kern_table.c - the kernel table's rows, one per kind of CPU.
 *
 * Every SIMD level computes the same bits for the integer types, and the
 * AVX2 and AVX-512 float kernels share one arithmetic (8-lane accumulators
 * in input order, then hsum8), so a row may switch levels at any batch size
 * without breaking batch invariance (test_kern_matmul's test_table runs
 * every row). A row is written from `bench/kern_table.sh` on that kind of
 * CPU (each level's own kernels timed from DRAM, interleaved; the default
 * must be within 0.95x of the fastest level for every weight type and batch
 * size), and says where its figures come from. docs/KERNELS.md, "Kernel
 * choice". */
#include "kernels/cpu/kern_table.h"

#include <stdio.h>

#include "kernels/cpu/kern_internal.h"

#define AVX2 KERN_LEVEL_AVX2
#define AVX512 KERN_LEVEL_AVX512
#define VNNI KERN_LEVEL_AVX512VNNI
#define AMX KERN_LEVEL_AMX

/* The Zen 4 rules, measured with `kern_bench N levels` (each level's own
 * kernels from DRAM, interleaved; 1 and 2 threads of a Zen 4 EPYC VM,
 * 2026-11-26; docs/KERNELS.md "Kernel choice"):
 * - X8 with VNNI: 1.04-1.13x AVX2 at 1 token, 1.2-1.9x at 4-64 tokens.
 * - X8 without VNNI (vpmaddwd + vpaddd): the AVX-512 tiles tie AVX2 at 1-2
 *   tokens (0.85-1.06x) and win from 4 (1.1-1.5x); AVX-512 from 3.
 * - f16, bf16: decode streams at the same speed at both levels (0.91-1.1x,
 *   AVX2 kept); at 3-7 tokens the AVX2 2x4 tiles read them faster
 *   (AVX-512 0.75-0.8x at 4); from 8 tokens the AVX-512 6x8 tiles win
 *   (1.05-2x at 8-64).
 * - f16 at 2 tokens: AVX-512 (until 2026-11-29: AVX2). bench/kern_table.sh
 *   on the same VM, 2026-11-29 (bench/results/2026-11-29-vm-kern-table*.json,
 *   load average 0.9-1.1): avx2 time / avx512 time at 2 tokens on the three
 *   shapes 1.10-1.40 in 3 runs of 2 threads (9 of 9 faster), 0.81-1.38 in 3
 *   runs of 1 thread (7 of 9; the 0.81 did not repeat: 1.38, 1.14), where
 *   AVX2 left the default at 0.71-0.95 of the fastest. bf16 at 2 tokens
 *   stays AVX2: 0.89-1.23 by shape and thread count, no level within 0.95
 *   of the other everywhere.
 * - f32: AVX-512 1.3-1.7x faster from 2 tokens; decode a tie (AVX2 kept).
 * - AMX (no Zen has it): X8 batches from KERN_AMX_MIN_TOK tokens, the
 *   lead's switch (kern_internal.h), below it AVX-512 VNNI. */
#define ZEN4_STEPS                                                                                 \
    {                                                                                              \
        [KERN_TABLE_X8_VNNI] = {{1, VNNI}, {KERN_AMX_MIN_TOK, AMX}},                               \
        [KERN_TABLE_X8_AVX512] = {{1, AVX2}, {3, AVX512}},                                         \
        [KERN_TABLE_F32] = {{1, AVX2}, {2, AVX512}},                                               \
        [KERN_TABLE_F16] = {{1, AVX2}, {2, AVX512}, {3, AVX2}, {8, AVX512}},                       \
        [KERN_TABLE_BF16] = {{1, AVX2}, {8, AVX512}},                                              \
    }

/* Intel with AVX-512. NO measurement of these rows on Intel exists yet:
 * the X8 classes repeat the Zen 4 rules. The float classes run AVX-512 at
 * every batch size, reasoned, not measured:
 * - Intel's server cores (Skylake-SP on; Sapphire and Emerald Rapids) run
 *   512-bit loads, FMAs and f16/bf16 conversions at full width, where Zen 4
 *   splits each into two 256-bit halves; the Zen 4 rows' AVX2 choices (a
 *   tie at 1 token, the 2x4 tiles ahead at 3-7) are that split's
 *   measurements, not Intel's.
 * - The one Intel figure (issue 41: Emerald Rapids, family 6 model 0xCF,
 *   AMX): with the Zen 4 rules the default ran f16 weights at 0.84-0.91x
 *   of forcing a single level. Those rules depart from AVX-512 only at 1-7
 *   tokens (AVX2 there), so AVX-512 everywhere is the single level that
 *   fits a 512-bit-native core. Not certain (the figure does not say which
 *   level or batch size won): the first bench/kern_table.sh run on such a
 *   machine replaces this with measured rows. */
#define INTEL_AVX512_STEPS                                                                         \
    {                                                                                              \
        [KERN_TABLE_X8_VNNI] = {{1, VNNI}, {KERN_AMX_MIN_TOK, AMX}},                               \
        [KERN_TABLE_X8_AVX512] = {{1, AVX2}, {3, AVX512}}, [KERN_TABLE_F32] = {{1, AVX512}},       \
        [KERN_TABLE_F16] = {{1, AVX512}}, [KERN_TABLE_BF16] = {{1, AVX512}},                       \
    }

static const kern_table_row k_rows[KERN_UARCH_COUNT] = {
    /* A CPU of no known kind (another vendor, a family or model this file
     * does not know, a hypervisor that masks the model): the Zen 4 rules,
     * the only measured AVX-512 row, as before the table had rows. */
    [KERN_UARCH_GENERIC] = {ZEN4_STEPS},
    /* Zen 3 has no AVX-512, so pick_level runs its AVX2 kernels for
     * everything before the table is read (the AVX2-level choices, such as
     * the X8 streams up to KERN_X8_STREAM_MAX_TOK tokens and the paired
     * layout below KERN_AVX2_PLAIN_MIN_TOK, are inside the AVX2 kernels,
     * measured on Zen 3: docs/KERNELS.md "Tiles"). The row is read only
     * when AVX-512 is emulated (tests/tools/run_emu512.sh): the Zen 4
     * rules. */
    [KERN_UARCH_ZEN3] = {ZEN4_STEPS},
    [KERN_UARCH_ZEN4] = {ZEN4_STEPS},
    /* Zen 5: NO measurement yet. Its desktop and server cores run 512-bit
     * operations at full width (unlike Zen 4), its mobile ones split them;
     * which way the float choices go is unmeasured: the Zen 4 rules until
     * bench/kern_table.sh has run on one. */
    [KERN_UARCH_ZEN5] = {ZEN4_STEPS},
    /* Intel without AVX-512 (or with its state hidden by the OS): AVX2
     * kernels for everything, the row is read only under emulation. NO
     * measurement: the Zen 4 rules. */
    [KERN_UARCH_INTEL_AVX2] = {ZEN4_STEPS},
    /* Skylake-SP to Ice Lake-SP and the client parts with AVX-512: see
     * INTEL_AVX512_STEPS (unmeasured). */
    [KERN_UARCH_INTEL_AVX512] = {INTEL_AVX512_STEPS},
    /* Sapphire, Emerald and Granite Rapids: INTEL_AVX512_STEPS
     * (unmeasured); X8 batches on AMX tiles from KERN_AMX_MIN_TOK tokens. */
    [KERN_UARCH_INTEL_AMX] = {INTEL_AVX512_STEPS},
};

const kern_table_row *kern_table_row_of(kern_uarch uarch) {
    return &k_rows[(int)uarch >= 0 && uarch < KERN_UARCH_COUNT ? uarch : KERN_UARCH_GENERIC];
}

static kern_table_class class_of(kern_type wt, kern_level top) {
    if (kern_type_is_x8(wt))
        return top >= KERN_LEVEL_AVX512VNNI ? KERN_TABLE_X8_VNNI : KERN_TABLE_X8_AVX512;
    if (wt == KERN_TYPE_F32)
        return KERN_TABLE_F32;
    if (wt == KERN_TYPE_BF16)
        return KERN_TABLE_BF16;
    return KERN_TABLE_F16;
}

kern_level kern_table_pick(kern_uarch uarch, kern_type wt, int n_tok, kern_level top) {
    const kern_table_step *s = kern_table_row_of(uarch)->steps[class_of(wt, top)];
    kern_level lv = KERN_LEVEL_AVX2;
    for (int i = 0; i < KERN_TABLE_MAX_STEPS && s[i].from_tok > 0; i++)
        if ((n_tok < 1 ? 1 : n_tok) >= s[i].from_tok)
            lv = s[i].level;
    return lv < top ? lv : top;
}

/* 1: the class has kernels at lv. */
static int class_has(kern_table_class c, kern_level lv) {
    if (lv == KERN_LEVEL_AVX2)
        return 1;
    if (c == KERN_TABLE_X8_VNNI)
        return lv == KERN_LEVEL_AVX512VNNI || lv == KERN_LEVEL_AMX;
    return lv == KERN_LEVEL_AVX512;
}

const char *kern_table_check(void) {
    static char msg[160];
    for (int u = 0; u < KERN_UARCH_COUNT; u++)
        for (int c = 0; c < KERN_TABLE_N_CLASSES; c++) {
            const kern_table_step *s = k_rows[u].steps[c];
            const char *fault = s[0].from_tok != 1 ? "does not start at 1 token" : NULL;
            for (int i = 0; !fault && i < KERN_TABLE_MAX_STEPS && s[i].from_tok > 0; i++) {
                if (i > 0 && s[i].from_tok <= s[i - 1].from_tok)
                    fault = "steps do not rise";
                else if (!class_has((kern_table_class)c, s[i].level))
                    fault = "names a level the class has no kernels for";
            }
            if (fault) {
                snprintf(msg, sizeof msg, "row %s, class %d: %s", kern_uarch_name((kern_uarch)u), c,
                         fault);
                return msg;
            }
        }
    return NULL;
}
