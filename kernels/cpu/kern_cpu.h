/* kern_cpu.h - run-time CPU feature detection and kernel-path selection. */
#ifndef KERN_CPU_H
#define KERN_CPU_H

typedef struct kern_cpu_features {
    int avx2;        /* AVX2 + FMA + F16C */
    int avx512;      /* AVX-512 F, BW, VL, DQ */
    int avx512vnni;  /* AVX-512 VNNI */
    int avxvnni;     /* AVX-VNNI (256-bit) */
} kern_cpu_features;

/* Detected once (cpuid + xgetbv for OS support), cached. */
const kern_cpu_features *kern_cpu_detect(void);

/* The SIMD level kernels use: detected features, capped by
 * kern_cpu_set_max_level() or the BRISK_CPU_LEVEL environment variable
 * ("scalar", "avx2", "avx512", "avx512vnni"), so tests and benchmarks can
 * force a path. */
typedef enum { KERN_LEVEL_SCALAR = 0, KERN_LEVEL_AVX2 = 1, KERN_LEVEL_AVX512 = 2, KERN_LEVEL_AVX512VNNI = 3 } kern_level;
kern_level kern_cpu_level(void);
void kern_cpu_set_max_level(kern_level level);
const char *kern_level_name(kern_level level);

/* Writes e.g. "cpu(avx2 fma f16c)" into buf for --version. */
void kern_cpu_describe(char *buf, int len);

#endif
