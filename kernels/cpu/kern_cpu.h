/* kern_cpu.h - run-time CPU feature detection and kernel-path selection. */
#ifndef KERN_CPU_H
#define KERN_CPU_H

typedef struct kern_cpu_features {
    int avx2;       /* AVX2 + FMA + F16C */
    int avx512;     /* AVX-512 F, BW, VL, DQ */
    int avx512vnni; /* AVX-512 VNNI */
    int avxvnni;    /* AVX-VNNI (256-bit) */
} kern_cpu_features;

/* Detected once (cpuid + xgetbv for OS support), cached. */
const kern_cpu_features *kern_cpu_detect(void);

/* The SIMD level kernels use: detected features, capped by
 * kern_cpu_set_max_level() or the BRISK_CPU_LEVEL environment variable
 * ("scalar", "avx2", "avx512", "avx512vnni"), so tests and benchmarks can
 * force a path. */
typedef enum {
    KERN_LEVEL_SCALAR = 0,
    KERN_LEVEL_AVX2 = 1,
    KERN_LEVEL_AVX512 = 2,
    KERN_LEVEL_AVX512VNNI = 3
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
