/* test_kern_uarch.c - the CPU kind (kern_cpu.c) and the kernel table's rows
 * (kern_table.c), as pure functions: CPUID signatures decoded, synthetic
 * CPUs (vendor, family, model, features) classified, names, the
 * BRISK_CPU_UARCH and kern_cpu_set_uarch overrides, every row well formed
 * and never above the level it is given, and the Zen 4 and generic rows
 * equal to the rule they replaced (written out below as the reference).
 * Machine-independent: no kernel runs here (test_kern_matmul's test_table
 * runs every row's choices on this CPU's kernels). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_table.h"
#include "test_kern_util.h"

static void test_signature(void) {
    static const struct {
        unsigned eax, family, model;
    } cases[] = {
        {0x00A00F11, 0x19, 0x01}, /* EPYC 7003 (Milan) */
        {0x00A10F11, 0x19, 0x11}, /* EPYC 9004 (Genoa) */
        {0x00A60F12, 0x19, 0x61}, /* Ryzen 7000 (Raphael) */
        {0x00B00F21, 0x1A, 0x02}, /* EPYC 9005 (Turin) */
        {0x000C06F2, 0x06, 0xCF}, /* Xeon 5th gen (Emerald Rapids) */
        {0x000806F8, 0x06, 0x8F}, /* Xeon 4th gen (Sapphire Rapids) */
        {0x00050654, 0x06, 0x55}, /* Xeon Skylake-SP */
        {0x00000F29, 0x0F, 0x02}, /* family 0xF, extended family 0 */
        {0x00010543, 0x05, 0x04}, /* family 5: the extended model is not used */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned f = 0, m = 0;
        kern_cpu_signature(cases[i].eax, &f, &m);
        if (f != cases[i].family || m != cases[i].model) {
            bad++;
            fprintf(stderr, "  signature %08x: family %x model %x, want %x %x\n", cases[i].eax, f,
                    m, cases[i].family, cases[i].model);
        }
    }
    CHECK(bad == 0, "%d CPUID signatures decoded wrongly", bad);
}

static void test_classify(void) {
    const kern_cpu_features none = {0}, avx2 = {.avx2 = 1},
                            avx512 = {.avx2 = 1, .avx512 = 1, .avx512vnni = 1},
                            amx = {.avx2 = 1, .avx512 = 1, .avx512vnni = 1, .amx = 1, .amx_cpu = 1},
                            amx_refused = {.avx2 = 1,
                                           .avx512 = 1,
                                           .avx512vnni = 1,
                                           .amx_cpu = 1,
                                           .amx_refused = "test"};
    static const char amd[] = "AuthenticAMD", intel[] = "GenuineIntel";
    const struct {
        const char *vendor;
        unsigned family, model;
        const kern_cpu_features *f;
        kern_uarch want;
    } cases[] = {
        {amd, 0x19, 0x01, &avx2, KERN_UARCH_ZEN3},      /* Milan */
        {amd, 0x19, 0x0F, &avx2, KERN_UARCH_ZEN3},      /* end of the first Zen 3 range */
        {amd, 0x19, 0x21, &avx2, KERN_UARCH_ZEN3},      /* Vermeer */
        {amd, 0x19, 0x50, &avx2, KERN_UARCH_ZEN3},      /* Cezanne */
        {amd, 0x19, 0x5F, &avx2, KERN_UARCH_ZEN3},      /* end of the second */
        {amd, 0x19, 0x10, &avx512, KERN_UARCH_ZEN4},    /* Genoa's range */
        {amd, 0x19, 0x11, &avx512, KERN_UARCH_ZEN4},    /* this project's VM */
        {amd, 0x19, 0x1F, &avx512, KERN_UARCH_ZEN4},    /* end of it */
        {amd, 0x19, 0x61, &avx512, KERN_UARCH_ZEN4},    /* Raphael */
        {amd, 0x19, 0x74, &avx512, KERN_UARCH_ZEN4},    /* Phoenix */
        {amd, 0x19, 0xA0, &avx512, KERN_UARCH_ZEN4},    /* Bergamo, Siena */
        {amd, 0x19, 0xAF, &avx512, KERN_UARCH_ZEN4},    /* end of the last Zen 4 range */
        {amd, 0x19, 0xB0, &avx512, KERN_UARCH_GENERIC}, /* no known Zen */
        {amd, 0x1A, 0x02, &avx512, KERN_UARCH_ZEN5},    /* Turin */
        {amd, 0x1A, 0x11, &avx512, KERN_UARCH_ZEN5},    /* Turin dense */
        {amd, 0x1A, 0x24, &avx512, KERN_UARCH_ZEN5},    /* Strix Point */
        {amd, 0x1A, 0x44, &avx512, KERN_UARCH_ZEN5},    /* Granite Ridge */
        {amd, 0x1A, 0x60, &avx512, KERN_UARCH_ZEN5},    /* Krackan Point */
        {amd, 0x1A, 0x70, &avx512, KERN_UARCH_ZEN5},    /* Strix Halo */
        {amd, 0x1A, 0x30, &avx512, KERN_UARCH_GENERIC}, /* outside Linux's Zen 5 list */
        {amd, 0x1A, 0x50, &avx512, KERN_UARCH_GENERIC}, /* Zen 6: unmeasured */
        {amd, 0x1A, 0x90, &avx512, KERN_UARCH_GENERIC}, /* Zen 6 */
        {amd, 0x17, 0x31, &avx2, KERN_UARCH_GENERIC},   /* Zen 2 */
        {amd, 0x00, 0x00, &avx512, KERN_UARCH_GENERIC}, /* a hypervisor masking the model */
        {"HygonGenuine", 0x18, 0x00, &avx2, KERN_UARCH_GENERIC},
        {intel, 0x06, 0xCF, &amx, KERN_UARCH_INTEL_AMX},         /* Emerald Rapids */
        {intel, 0x06, 0x8F, &amx_refused, KERN_UARCH_INTEL_AMX}, /* AMX the OS refused */
        {intel, 0x06, 0x00, &amx, KERN_UARCH_INTEL_AMX},         /* model masked: features */
        {intel, 0x06, 0x55, &avx512, KERN_UARCH_INTEL_AVX512},   /* Skylake-SP / Cascade */
        {intel, 0x06, 0x97, &avx2, KERN_UARCH_INTEL_AVX2},       /* Alder Lake */
        {intel, 0x06, 0x8F, &avx2, KERN_UARCH_INTEL_AVX2},       /* AVX-512 state hidden */
        {intel, 0x06, 0x1A, &none, KERN_UARCH_GENERIC},          /* no AVX2 */
        {"CentaurHauls", 0x06, 0x0F, &avx2, KERN_UARCH_GENERIC},
        {"", 0x19, 0x11, &avx512, KERN_UARCH_GENERIC}, /* no vendor string */
        {"AuthenticAMDx", 0x19, 0x11, &avx512, KERN_UARCH_GENERIC},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kern_uarch u =
            kern_uarch_classify(cases[i].vendor, cases[i].family, cases[i].model, cases[i].f);
        if (u != cases[i].want) {
            bad++;
            fprintf(stderr, "  %s family %x model %x: %s, want %s\n", cases[i].vendor,
                    cases[i].family, cases[i].model, kern_uarch_name(u),
                    kern_uarch_name(cases[i].want));
        }
    }
    bad += kern_uarch_classify(NULL, 0x19, 0x11, &avx512) != KERN_UARCH_GENERIC;
    bad += kern_uarch_classify(amd, 0x19, 0x11, NULL) != KERN_UARCH_GENERIC;
    CHECK(bad == 0, "%d synthetic CPUs classified wrongly", bad);
}

static void test_names(void) {
    int bad = 0;
    for (int u = 0; u < KERN_UARCH_COUNT; u++)
        bad += kern_uarch_from_name(kern_uarch_name((kern_uarch)u)) != u;
    CHECK(bad == 0, "%d names do not round-trip", bad);
    CHECK(kern_uarch_from_name("zen 4") == -1 && kern_uarch_from_name("") == -1 &&
              kern_uarch_from_name(NULL) == -1,
          "unknown names");
    CHECK(strcmp(kern_uarch_name(KERN_UARCH_COUNT), "unknown") == 0 &&
              strcmp(kern_uarch_name((kern_uarch)-1), "unknown") == 0,
          "out-of-range names");
    CHECK(strcmp(kern_uarch_name(KERN_UARCH_INTEL_AMX), "intel-amx") == 0, "intel-amx");
}

/* The rule pick_level held before the table had rows (kern_matmul.c at
 * 4ea9c4c), for X8 and float weights at top >= avx512, with the one change
 * measured since (f16 at 2 tokens: AVX-512, kern_table.c): the reference
 * the Zen 4 and generic rows must equal. */
static kern_level old_rule(kern_type wt, int n_tok, kern_level top) {
    if (wt == KERN_TYPE_F16 && n_tok == 2)
        return KERN_LEVEL_AVX512;
    if (top == KERN_LEVEL_AMX) {
        if (kern_type_is_x8(wt) && n_tok >= KERN_AMX_MIN_TOK)
            return KERN_LEVEL_AMX;
        top = KERN_LEVEL_AVX512VNNI;
    }
    if (kern_type_is_x8(wt))
        return top == KERN_LEVEL_AVX512 && n_tok <= 2 ? KERN_LEVEL_AVX2 : top;
    if (n_tok == 1)
        return KERN_LEVEL_AVX2;
    if (wt == KERN_TYPE_F32 || n_tok >= 8)
        return KERN_LEVEL_AVX512;
    return KERN_LEVEL_AVX2;
}

static void test_rows(void) {
    const char *fault = kern_table_check();
    CHECK(fault == NULL, "kernel table: %s", fault ? fault : "");
    static const kern_type types[] = {KERN_TYPE_F32,      KERN_TYPE_F16,     KERN_TYPE_BF16,
                                      KERN_TYPE_Q8_0X8,   KERN_TYPE_Q8_0MX8, KERN_TYPE_Q4_0X8,
                                      KERN_TYPE_Q4_1X8,   KERN_TYPE_Q5_0X8,  KERN_TYPE_Q5_1X8,
                                      KERN_TYPE_IQ4_NLX8, KERN_TYPE_Q6_0SX8};
    int above = 0, wrong = 0, differs = 0, checked = 0;
    for (int u = 0; u < KERN_UARCH_COUNT; u++)
        for (int top = KERN_LEVEL_AVX512; top <= KERN_LEVEL_TOP; top++)
            for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
                for (int n = 1; n <= 70; n++) {
                    const kern_type wt = types[ti];
                    kern_level lv = kern_table_pick((kern_uarch)u, wt, n, (kern_level)top);
                    checked++;
                    above += (int)lv > top || lv < KERN_LEVEL_AVX2;
                    /* Float types: avx2 or avx512 kernels only; X8 at avx512
                     * without VNNI: avx2 or avx512. */
                    wrong +=
                        !kern_type_is_x8(wt) && lv != KERN_LEVEL_AVX2 && lv != KERN_LEVEL_AVX512;
                    wrong += kern_type_is_x8(wt) && top == KERN_LEVEL_AVX512 &&
                             lv != KERN_LEVEL_AVX2 && lv != KERN_LEVEL_AVX512;
                    if ((u == KERN_UARCH_ZEN4 || u == KERN_UARCH_GENERIC) &&
                        lv != old_rule(wt, n, (kern_level)top)) {
                        differs++;
                        fprintf(stderr, "  %s %s %d tok at %s: %s, the old rule %s\n",
                                kern_uarch_name((kern_uarch)u), kern_type_name(wt), n,
                                kern_level_name((kern_level)top), kern_level_name(lv),
                                kern_level_name(old_rule(wt, n, (kern_level)top)));
                    }
                }
    printf("table rows: %d picks (7 rows x 3 levels x 11 types x 1-70 tokens): %d above the "
           "level, %d without kernels, %d Zen 4 / generic picks off the old rule\n",
           checked, above, wrong, differs);
    CHECK(above == 0, "%d picks above the level they were given", above);
    CHECK(wrong == 0, "%d picks of a level without kernels for the type", wrong);
    CHECK(differs == 0, "%d Zen 4 / generic picks differ from the rule they replaced", differs);
    /* Out-of-range kinds read the generic row; a batch under 1 counts as 1. */
    CHECK(kern_table_pick((kern_uarch)99, KERN_TYPE_F16, 9, KERN_LEVEL_AVX512VNNI) ==
              kern_table_pick(KERN_UARCH_GENERIC, KERN_TYPE_F16, 9, KERN_LEVEL_AVX512VNNI),
          "out-of-range kind");
    CHECK(kern_table_pick(KERN_UARCH_ZEN4, KERN_TYPE_F32, 0, KERN_LEVEL_AVX512) ==
              kern_table_pick(KERN_UARCH_ZEN4, KERN_TYPE_F32, 1, KERN_LEVEL_AVX512),
          "0 tokens");
    /* The Intel rows run f16 on AVX-512 at every batch size (kern_table.c). */
    CHECK(kern_table_pick(KERN_UARCH_INTEL_AMX, KERN_TYPE_F16, 4, KERN_LEVEL_AMX) ==
              KERN_LEVEL_AVX512,
          "intel-amx f16 at 4 tokens");
}

/* BRISK_CPU_UARCH (set before the first kern_cpu_uarch call, read once)
 * and kern_cpu_set_uarch; the detected kind is the classification of the
 * detected CPU. */
static void test_override(void) {
    const kern_cpu_features *f = kern_cpu_detect();
    const kern_uarch detected = kern_uarch_classify(f->vendor, f->family, f->model, f);
    printf("this CPU: vendor \"%s\" family 0x%x model 0x%x: %s\n", f->vendor, f->family, f->model,
           kern_uarch_name(detected));
    CHECK(strlen(f->vendor) == 0 || strlen(f->vendor) == 12, "vendor string");
    const kern_uarch env = detected == KERN_UARCH_ZEN5 ? KERN_UARCH_ZEN3 : KERN_UARCH_ZEN5;
    setenv("BRISK_CPU_UARCH", kern_uarch_name(env), 1);
    CHECK(kern_cpu_uarch() == env, "BRISK_CPU_UARCH=%s gave %s", kern_uarch_name(env),
          kern_uarch_name(kern_cpu_uarch()));
    kern_cpu_set_uarch(KERN_UARCH_INTEL_AMX);
    CHECK(kern_cpu_uarch() == KERN_UARCH_INTEL_AMX, "kern_cpu_set_uarch");
    char buf[256];
    kern_cpu_describe(buf, sizeof buf);
    CHECK(strstr(buf, "table intel-amx)") != NULL, "describe names the row: %s", buf);
    kern_cpu_set_uarch(-1);
    CHECK(kern_cpu_uarch() == env, "back to the environment's");
    kern_cpu_set_uarch(KERN_UARCH_COUNT); /* out of range: as -1 */
    CHECK(kern_cpu_uarch() == env, "an out-of-range override is none");
}

int main(void) {
    test_signature();
    test_classify();
    test_names();
    test_rows();
    test_override();
    return finish("test_kern_uarch");
}
