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
 * kern_cpu_level() from a fixed table (kern_matmul.c: a rule on the CPU's
 * features, measured, never timed at start-up, so every replica on the same
 * CPU runs the same code); KERN_PICK_LEVEL runs the level's own kernels for
 * everything (the tests sweep levels this way so every kernel is checked, and
 * a benchmark can time one level alone). BRISK_CPU_KERNELS=table|level sets
 * it; kern_cpu_set_pick() overrides that (-1 goes back to the environment). */
typedef enum { KERN_PICK_TABLE = 0, KERN_PICK_LEVEL = 1 } kern_pick;
kern_pick kern_cpu_pick(void);
void kern_cpu_set_pick(int pick);

/* Writes e.g. "cpu(avx2 fma f16c)" into buf for --version. */
void kern_cpu_describe(char *buf, int len);

#endif
