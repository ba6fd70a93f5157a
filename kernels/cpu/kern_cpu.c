/* kern_cpu.c - cpuid/xgetbv feature detection and the kernel-level cap.
 *
 * A feature counts only if the CPU has it AND the OS saves the register
 * state it needs (XCR0 via xgetbv): a hypervisor can hide AVX-512 state even
 * when cpuid advertises the instructions, and using them would fault. */
#include "kernels/cpu/kern_cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KERN_X86 1
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KERN_LINUX_X86_64 1
#endif

#define KERN_AMX_CAPPED "BRISK_CPU_LEVEL caps the level below amx"

static kern_cpu_features g_features;
static pthread_once_t g_detect_once = PTHREAD_ONCE_INIT; /* guards g_features */
static atomic_int g_level = -1;     /* cached effective level, -1 = recompute */
static atomic_int g_cap = -1;       /* kern_cpu_set_max_level(), -1 = none */
static atomic_int g_pick = -1;      /* kern_cpu_set_pick(), -1 = from the environment */
static atomic_int g_env_pick = -1;  /* BRISK_CPU_KERNELS, read once */
static atomic_int g_uarch = -1;     /* kern_cpu_set_uarch(), -1 = none */
static atomic_int g_env_uarch = -2; /* BRISK_CPU_UARCH, read once; -1 = unset */

#ifdef KERN_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    /* xgetbv with ecx = 0; written as asm so that this baseline-compiled file
     * needs no -mxsave. */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* Linux keeps AMX's 8 KiB of tile data out of a thread's saved state until
 * the process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA;
 * Linux 5.16+); a tile instruction before that faults. The permission is
 * the whole process's, so asking once here covers every pool thread, and
 * ARCH_GET_XCOMP_PERM confirms it. NULL when granted, else why not. */
static const char *amx_request(void) {
#ifdef KERN_LINUX_X86_64
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return errno == EINVAL || errno == ENOSYS
                   ? "the kernel does not offer the tile state (Linux before 5.16?)"
                   : "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
        !(perm & (1ul << XFEATURE_XTILEDATA)))
        return "the tile-state permission did not hold (arch_prctl ARCH_GET_XCOMP_PERM)";
    return NULL;
#else
    return "AMX needs Linux on x86-64 here";
#endif
}

/* The level BRISK_CPU_LEVEL names, or -1 (unset, empty or unknown). */
static int env_level(void) {
    const char *s = getenv("BRISK_CPU_LEVEL");
    for (int l = KERN_LEVEL_SCALAR; s && *s && l <= KERN_LEVEL_TOP; l++)
        if (strcmp(s, kern_level_name((kern_level)l)) == 0)
            return l;
    return -1;
}

/* 1 if BRISK_CPU_LEVEL names a level below amx: then the tile state is not
 * asked for (a granted permission makes the process's signal frames larger:
 * a small sigaltstack would then fail). */
static int env_below_amx(void) {
    const int l = env_level();
    return l >= 0 && l < KERN_LEVEL_AMX;
}

void kern_cpu_signature(unsigned eax, unsigned *family, unsigned *model) {
    unsigned base_family = (eax >> 8) & 0xf, base_model = (eax >> 4) & 0xf;
    unsigned ext_family = (eax >> 20) & 0xff, ext_model = (eax >> 16) & 0xf;
    *family = base_family == 0xf ? base_family + ext_family : base_family;
    *model = base_family == 0x6 || base_family == 0xf ? (ext_model << 4) | base_model : base_model;
}

static void detect(kern_cpu_features *f) {
    memset(f, 0, sizeof(*f));
#ifdef KERN_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    memcpy(f->vendor, &b, 4); /* "Genu" "ineI" "ntel": ebx, edx, ecx */
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    f->vendor[12] = '\0';
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    kern_cpu_signature(a, &f->family, &f->model);
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = xgetbv0();
    int ymm_os = (xcr0 & 0x6) == 0x6;   /* SSE + AVX state */
    int zmm_os = (xcr0 & 0xe0) == 0xe0; /* opmask + ZMM_Hi256 + Hi16_ZMM */
    if (!ymm_os)
        return;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
    int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    int avx512vnni = (c >> 11) & 1;
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    int avxvnni = (a1 >> 4) & 1;
    f->avx2 = avx2 && fma && f16c;
    f->avx512 = f->avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl;
    f->avx512vnni = f->avx512 && avx512vnni;
    f->avxvnni = f->avx2 && avxvnni;
    /* AMX: CPUID.(7,0):EDX bits 22 (BF16), 24 (TILE), 25 (INT8); XCR0 bits
     * 17-18 (XTILECFG, XTILEDATA) enabled by the OS; then the permission. */
    f->amx_cpu = f->avx512vnni && ((d >> 24) & 1) && ((d >> 25) & 1);
    f->amx_bf16 = f->amx_cpu && ((d >> 22) & 1);
    if (f->amx_cpu) {
        if ((xcr0 & 0x60000) != 0x60000)
            f->amx_refused = "the OS does not enable the tile state (XCR0)";
        else if (env_below_amx())
            f->amx_refused = KERN_AMX_CAPPED;
        else
            f->amx_refused = amx_request();
        f->amx = f->amx_refused == NULL;
    }
#endif
#ifdef KERN_EMU_AVX512
    /* Test builds only (tests/tools/run_emu512.sh): the AVX-512 files are
     * compiled against scalar emulations of their intrinsics, so claim the
     * features wherever the AVX2 files can run. */
    f->avx512 = f->avx512vnni = f->avx2;
#endif
#ifdef KERN_EMU_AMX
    /* Test builds only (tests/tools/run_emu512.sh): kern_matmul_amx.c is
     * compiled against tests/tools/emuamx.h's tile emulation, no permission
     * needed. */
    f->amx = f->amx_cpu = f->avx512vnni;
    f->amx_refused = NULL;
#endif
}

static void detect_once(void) {
    detect(&g_features);
    if (g_features.amx_refused && strcmp(g_features.amx_refused, KERN_AMX_CAPPED) != 0)
        fprintf(stderr, "brisk: AMX not used (%s): the batch kernels run AVX-512 VNNI\n",
                g_features.amx_refused);
}

const kern_cpu_features *kern_cpu_detect(void) {
    /* Kernel threads reach here at once after kern_cpu_set_max_level() resets
     * the cached level: pthread_once runs detect() exactly once and orders
     * its writes before every caller's reads. */
    pthread_once(&g_detect_once, detect_once);
    return &g_features;
}

static int env_cap(void) {
    const int l = env_level();
    const char *s = getenv("BRISK_CPU_LEVEL");
    if (l < 0 && s && *s)
        fprintf(stderr, "brisk: ignoring unknown BRISK_CPU_LEVEL=%s\n", s);
    return l;
}

static int compute_level(void) {
    const kern_cpu_features *f = kern_cpu_detect();
    int l = KERN_LEVEL_SCALAR;
    if (f->avx2)
        l = KERN_LEVEL_AVX2;
    if (f->avx512)
        l = KERN_LEVEL_AVX512;
    if (f->avx512vnni)
        l = KERN_LEVEL_AVX512VNNI;
    if (f->amx)
        l = KERN_LEVEL_AMX;
    int e = env_cap();
    if (e >= 0 && e < l)
        l = e;
    int cap = atomic_load_explicit(&g_cap, memory_order_relaxed);
    if (cap >= 0 && cap < l)
        l = cap;
    return l;
}

kern_level kern_cpu_level(void) {
    /* Called once per kernel call, so it is one relaxed load when cached. */
    int l = atomic_load_explicit(&g_level, memory_order_relaxed);
    if (l < 0) {
        l = compute_level();
        atomic_store_explicit(&g_level, l, memory_order_relaxed);
    }
    return (kern_level)l;
}

void kern_cpu_set_max_level(kern_level level) {
    atomic_store_explicit(&g_cap, (int)level, memory_order_relaxed);
    atomic_store_explicit(&g_level, -1, memory_order_relaxed);
}

static int env_pick(void) {
    const char *s = getenv("BRISK_CPU_KERNELS");
    if (!s || !*s || strcmp(s, "table") == 0)
        return KERN_PICK_TABLE;
    if (strcmp(s, "level") == 0)
        return KERN_PICK_LEVEL;
    fprintf(stderr, "brisk: ignoring unknown BRISK_CPU_KERNELS=%s (table or level)\n", s);
    return KERN_PICK_TABLE;
}

kern_pick kern_cpu_pick(void) {
    int p = atomic_load_explicit(&g_pick, memory_order_relaxed);
    if (p >= 0)
        return (kern_pick)p;
    p = atomic_load_explicit(&g_env_pick, memory_order_relaxed);
    if (p < 0) {
        p = env_pick();
        atomic_store_explicit(&g_env_pick, p, memory_order_relaxed);
    }
    return (kern_pick)p;
}

void kern_cpu_set_pick(int pick) {
    atomic_store_explicit(&g_pick, pick == KERN_PICK_TABLE || pick == KERN_PICK_LEVEL ? pick : -1,
                          memory_order_relaxed);
}

/* ---- microarchitecture --------------------------------------------------- */

static int in(unsigned v, unsigned lo, unsigned hi) {
    return v >= lo && v <= hi;
}

kern_uarch kern_uarch_classify(const char *vendor, unsigned family, unsigned model,
                               const kern_cpu_features *f) {
    if (!vendor || !f)
        return KERN_UARCH_GENERIC;
    if (strcmp(vendor, "AuthenticAMD") == 0) {
        if (family == 0x19) {
            if (in(model, 0x00, 0x0f) || in(model, 0x20, 0x5f))
                return KERN_UARCH_ZEN3;
            if (in(model, 0x10, 0x1f) || in(model, 0x60, 0xaf))
                return KERN_UARCH_ZEN4;
        }
        if (family == 0x1a &&
            (in(model, 0x00, 0x2f) || in(model, 0x40, 0x4f) || in(model, 0x60, 0x7f)))
            return KERN_UARCH_ZEN5;
        return KERN_UARCH_GENERIC;
    }
    if (strcmp(vendor, "GenuineIntel") == 0) {
        /* By features, not models: Intel's model numbers do not say which
         * vector units a part has (one family-6 model spans parts with one
         * and two 512-bit FMA ports), and the features are what the rows
         * differ by. */
        if (f->amx_cpu)
            return KERN_UARCH_INTEL_AMX;
        if (f->avx512)
            return KERN_UARCH_INTEL_AVX512;
        if (f->avx2)
            return KERN_UARCH_INTEL_AVX2;
    }
    return KERN_UARCH_GENERIC;
}

static const char *const k_uarch_names[KERN_UARCH_COUNT] = {
    [KERN_UARCH_GENERIC] = "generic",
    [KERN_UARCH_ZEN3] = "zen3",
    [KERN_UARCH_ZEN4] = "zen4",
    [KERN_UARCH_ZEN5] = "zen5",
    [KERN_UARCH_INTEL_AVX2] = "intel-avx2",
    [KERN_UARCH_INTEL_AVX512] = "intel-avx512",
    [KERN_UARCH_INTEL_AMX] = "intel-amx",
};

const char *kern_uarch_name(kern_uarch uarch) {
    return (int)uarch >= 0 && uarch < KERN_UARCH_COUNT ? k_uarch_names[uarch] : "unknown";
}

int kern_uarch_from_name(const char *name) {
    for (int u = 0; name && u < KERN_UARCH_COUNT; u++)
        if (strcmp(name, k_uarch_names[u]) == 0)
            return u;
    return -1;
}

static int env_uarch(void) {
    const char *s = getenv("BRISK_CPU_UARCH");
    if (!s || !*s)
        return -1;
    int u = kern_uarch_from_name(s);
    if (u < 0)
        fprintf(stderr,
                "brisk: ignoring unknown BRISK_CPU_UARCH=%s (generic, zen3, zen4, zen5, "
                "intel-avx2, intel-avx512 or intel-amx)\n",
                s);
    return u;
}

static kern_uarch detected_uarch(void) {
    static atomic_int cached = -1;
    int u = atomic_load_explicit(&cached, memory_order_relaxed);
    if (u < 0) {
        const kern_cpu_features *f = kern_cpu_detect();
        u = (int)kern_uarch_classify(f->vendor, f->family, f->model, f);
        atomic_store_explicit(&cached, u, memory_order_relaxed);
    }
    return (kern_uarch)u;
}

kern_uarch kern_cpu_uarch(void) {
    int u = atomic_load_explicit(&g_uarch, memory_order_relaxed);
    if (u >= 0)
        return (kern_uarch)u;
    u = atomic_load_explicit(&g_env_uarch, memory_order_relaxed);
    if (u == -2) {
        u = env_uarch();
        atomic_store_explicit(&g_env_uarch, u, memory_order_relaxed);
    }
    return u >= 0 ? (kern_uarch)u : detected_uarch();
}

void kern_cpu_set_uarch(int uarch) {
    atomic_store_explicit(&g_uarch, uarch >= 0 && uarch < KERN_UARCH_COUNT ? uarch : -1,
                          memory_order_relaxed);
}

const char *kern_level_name(kern_level level) {
    switch (level) {
    case KERN_LEVEL_SCALAR: return "scalar";
    case KERN_LEVEL_AVX2: return "avx2";
    case KERN_LEVEL_AVX512: return "avx512";
    case KERN_LEVEL_AVX512VNNI: return "avx512vnni";
    case KERN_LEVEL_AMX: return "amx";
    }
    return "unknown";
}

void kern_cpu_describe(char *buf, int len) {
    if (!buf || len <= 0)
        return;
    const kern_cpu_features *f = kern_cpu_detect();
    const char *amx = "";
    if (f->amx)
        amx = " amx-int8";
    else if (f->amx_cpu) /* the CPU has it: capped by BRISK_CPU_LEVEL, or refused */
        amx = f->amx_refused && strcmp(f->amx_refused, KERN_AMX_CAPPED) == 0 ? " amx-int8(capped)"
                                                                             : " amx-int8(refused)";
    snprintf(buf, (size_t)len, "cpu(%s%s%s%s%s%s; kernels %s, table %s)",
             f->avx2 ? "avx2 fma f16c" : "baseline", f->avx512 ? " avx512f/bw/vl/dq" : "",
             f->avx512vnni ? " avx512vnni" : "", f->avxvnni ? " avxvnni" : "", amx,
             f->amx_bf16 ? " amx-bf16" : "", kern_level_name(kern_cpu_level()),
             kern_uarch_name(kern_cpu_uarch()));
}
