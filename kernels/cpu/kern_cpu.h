/* kern_cpu.h - run-time CPU feature detection and kernel-path selection. */
#ifndef KERN_CPU_H
#define KERN_CPU_H

typedef struct kern_cpu_features {
    int avx2;       /* AVX2 + FMA + F16C */
    int avx512;     /* AVX-512 F, BW, VL, DQ */
    int avx512vnni; /* AVX-512 VNNI */
    int avxvnni;    /* AVX-VNNI (256-bit) */
    /* AMX tiles with int8 products (AMX-TILE + AMX-INT8), the OS saving the
     * tile state, and this process granted it (Linux: arch_prctl
     * ARCH_REQ_XCOMP_PERM, asked once in kern_cpu_detect); amx_cpu: the CPU
     * has them whatever the OS said; amx_bf16: AMX-BF16 (reported only). */
    int amx;
    int amx_cpu;
    int amx_bf16;
    /* Why amx is 0 on a CPU that has AMX (static string), or NULL. */
    const char *amx_refused;
    /* CPUID leaf 0's vendor string ("AuthenticAMD", "GenuineIntel", "" when
     * unknown) and leaf 1's family and model with their extended fields
     * folded in (kern_cpu_signature), as the CPU (or hypervisor) reports. */
    char vendor[13];
    unsigned family, model;
} kern_cpu_features;

/* Detected once (cpuid + xgetbv for OS support, and the AMX tile
 * permission request, which logs its reason to stderr once when the kernel
 * refuses), cached. */
const kern_cpu_features *kern_cpu_detect(void);

/* The SIMD level kernels use: detected features, capped by
 * kern_cpu_set_max_level() or the BRISK_CPU_LEVEL environment variable
 * ("scalar", "avx2", "avx512", "avx512vnni", "amx"), so tests and benchmarks
 * can force a path. KERN_LEVEL_AMX has VNNI too: the X8 integer kernels of
 * batches run on AMX tiles (kern_matmul_amx.c), everything else as at
 * avx512vnni. KERN_LEVEL_TOP: the highest level (a cap that caps nothing). */
typedef enum {
    KERN_LEVEL_SCALAR = 0,
    KERN_LEVEL_AVX2 = 1,
    KERN_LEVEL_AVX512 = 2,
    KERN_LEVEL_AVX512VNNI = 3,
    KERN_LEVEL_AMX = 4,
    KERN_LEVEL_TOP = KERN_LEVEL_AMX
} kern_level;
kern_level kern_cpu_level(void);
void kern_cpu_set_max_level(kern_level level);
const char *kern_level_name(kern_level level);

/* How kern_matmul picks its kernel for a weight type and batch size:
 * KERN_PICK_TABLE (the default) runs the fastest kernel at or below
 * kern_cpu_level() from a fixed table (kern_table.c: a row per
 * microarchitecture, kern_cpu_uarch(), written from measurements, never
 * timed at start-up, so every replica on the same CPU runs the same code); KERN_PICK_LEVEL runs the level's own kernels for
 * everything (the tests sweep levels this way so every kernel is checked, and
 * a benchmark can time one level alone). BRISK_CPU_KERNELS=table|level sets
 * it; kern_cpu_set_pick() overrides that (-1 goes back to the environment). */
typedef enum { KERN_PICK_TABLE = 0, KERN_PICK_LEVEL = 1 } kern_pick;
kern_pick kern_cpu_pick(void);
void kern_cpu_set_pick(int pick);

/* The microarchitecture the kernel table's row is chosen by
 * (kern_table.c: each row written from measurements on that kind of CPU,
 * docs/KERNELS.md "Kernel choice"). GENERIC: a CPU of no known kind, e.g. a
 * hypervisor that masks the model; its row is the Zen 4 one. INTEL_AVX2:
 * an Intel CPU without AVX-512 (or whose AVX-512 state the OS hides). */
typedef enum {
    KERN_UARCH_GENERIC = 0,
    KERN_UARCH_ZEN3,
    KERN_UARCH_ZEN4,
    KERN_UARCH_ZEN5,
    KERN_UARCH_INTEL_AVX2,
    KERN_UARCH_INTEL_AVX512,
    KERN_UARCH_INTEL_AMX,
    KERN_UARCH_COUNT
} kern_uarch;

/* CPUID leaf 1's EAX -> the display family and model (Intel SDM / AMD
 * APM: base family 0xF adds the extended family, base family 0x6 or 0xF
 * prefixes the extended model). Pure. */
void kern_cpu_signature(unsigned eax, unsigned *family, unsigned *model);

/* The kind of CPU from its vendor string, family, model and detected
 * features (f: the OS-usable features, amx_cpu and avx512 for Intel). Pure:
 * the test feeds it synthetic CPUs. AMD family 0x19 models 0x00-0x0F and
 * 0x20-0x5F are Zen 3, 0x10-0x1F and 0x60-0xAF Zen 4; family 0x1A models
 * 0x00-0x2F, 0x40-0x4F and 0x60-0x7F Zen 5 (the ranges Linux's
 * arch/x86/kernel/cpu/amd.c uses; family 0x1A's other models are Zen 6,
 * unmeasured: GENERIC). Intel: AMX on the CPU -> INTEL_AMX, else AVX-512
 * -> INTEL_AVX512, else AVX2 -> INTEL_AVX2. Anything else GENERIC. */
kern_uarch kern_uarch_classify(const char *vendor, unsigned family, unsigned model,
                               const kern_cpu_features *f);

/* The kind this process uses: kern_cpu_set_uarch()'s, else the
 * BRISK_CPU_UARCH environment variable's (a kern_uarch_name, read once;
 * an unknown name is logged and ignored), else the detected one. Cached:
 * one relaxed load a call. */
kern_uarch kern_cpu_uarch(void);
/* Overrides the kind for tests and benchmarks (a kern_uarch), or -1: back
 * to the environment / detection. */
void kern_cpu_set_uarch(int uarch);
/* "generic", "zen3", "zen4", "zen5", "intel-avx2", "intel-avx512",
 * "intel-amx"; "unknown" out of range. */
const char *kern_uarch_name(kern_uarch uarch);
/* The kern_uarch of a name, or -1. */
int kern_uarch_from_name(const char *name);

/* Writes e.g. "cpu(avx2 fma f16c; kernels avx2, table zen3)" into buf for
 * --version. */
void kern_cpu_describe(char *buf, int len);

#endif
