/* emu512.h - scalar emulation of the AVX-512 intrinsics brisk's CPU kernels
 * use, so that kern_matmul_avx512*.c can be run and tested on a machine
 * without AVX-512 (run_emu512.sh builds the kernel tests that way).
 *
 * Force-included (-include) before the kernel file, compiled with the AVX2
 * flags: <immintrin.h> is included first (its include guard makes the
 * kernel's own include a no-op), then __m512/__m512i are renamed to plain
 * 64-byte unions and every intrinsic the kernels call to a scalar function
 * with the instruction's documented lane semantics. Test-only: slow, and
 * it knows only the intrinsics the kernels use - a missing one fails to
 * compile (implicit declaration) rather than silently running native code. */
#ifndef EMU512_H
#define EMU512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef union {
    int8_t b[64];
    uint8_t ub[64];
    int16_t w[32];
    uint16_t uw[32];
    int32_t d[16];
    int64_t q[8];
    float f[16];
    __m256i h256[2];
} emu_v;
typedef struct {
    emu_v v;
} emu_m512i;
typedef struct {
    emu_v v;
} emu_m512;
typedef struct {
    emu_v v;
} emu_m512d;
#define __m512i emu_m512i
#define __m512 emu_m512
#define __m512d emu_m512d

#define EMU static inline __attribute__((noinline))
#define EMU_LOOP(n) for (int i = 0; i < (n); i++)

/* ---- set / load / store / casts ---- */
EMU emu_m512 e_setzero_ps(void) {
    emu_m512 r;
    memset(&r, 0, 64);
    return r;
}
EMU emu_m512i e_setzero_si512(void) {
    emu_m512i r;
    memset(&r, 0, 64);
    return r;
}
EMU emu_m512i e_set1_epi16(short x) {
    emu_m512i r;
    EMU_LOOP(32) r.v.w[i] = x;
    return r;
}
EMU emu_m512i e_set1_epi8(char x) {
    emu_m512i r;
    EMU_LOOP(64) r.v.b[i] = x;
    return r;
}
EMU emu_m512i e_set1_epi64(long long x) {
    emu_m512i r;
    EMU_LOOP(8) r.v.q[i] = x;
    return r;
}
EMU emu_m512i e_set1_epi32(int x) {
    emu_m512i r;
    EMU_LOOP(16) r.v.d[i] = x;
    return r;
}
EMU emu_m512 e_set1_ps(float x) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = x;
    return r;
}
EMU void e_storeu_ps(void *p, emu_m512 a) {
    memcpy(p, a.v.f, 64);
}
EMU emu_m512 e_loadu_ps(const void *p) {
    emu_m512 r;
    memcpy(r.v.f, p, 64);
    return r;
}
EMU emu_m512 e_maskz_loadu_ps(__mmask16 m, const void *p) {
    emu_m512 r;
    const float *f = p;
    EMU_LOOP(16) r.v.f[i] = ((m >> i) & 1) ? f[i] : 0.0f;
    return r;
}
EMU __m256i e256_maskz_loadu_epi16(__mmask16 m, const void *p) {
    uint16_t u[16];
    const uint16_t *s = p;
    EMU_LOOP(16) u[i] = ((m >> i) & 1) ? s[i] : 0;
    __m256i r;
    memcpy(&r, u, 32);
    return r;
}
EMU emu_m512 e_castsi512_ps(emu_m512i a) {
    emu_m512 r;
    memcpy(&r, &a, 64);
    return r;
}
EMU __m256 e_castps512_ps256(emu_m512 a) {
    __m256 r;
    memcpy(&r, a.v.f, 32);
    return r;
}
/* The upper half of a cast is undefined: fill it with junk so that code
 * relying on it shows up. */
EMU emu_m512i e_castsi256_si512(__m256i x) {
    emu_m512i r;
    memset(&r, 0x5a, 64);
    r.v.h256[0] = x;
    return r;
}
EMU __m256 e_extractf32x8_ps(emu_m512 a, int i) {
    __m256 r;
    memcpy(&r, a.v.f + 8 * i, 32);
    return r;
}
/* As e_castsi256_si512: the upper half is undefined, filled with junk. */
EMU emu_m512 e_castps256_ps512(__m256 x) {
    emu_m512 r;
    memset(&r, 0x5a, 64);
    memcpy(r.v.f, &x, 32);
    return r;
}
EMU emu_m512 e_insertf32x8(emu_m512 a, __m256 h, int i) {
    memcpy(a.v.f + 8 * i, &h, 32);
    return a;
}
EMU emu_m512 e_broadcast_f32x8(__m256 x) {
    emu_m512 r;
    memcpy(r.v.f, &x, 32);
    memcpy(r.v.f + 8, &x, 32);
    return r;
}
/* AVX-512VL's masked 256-bit store: only the lanes of m are written. */
EMU void e256_mask_storeu_ps(void *p, __mmask8 m, __m256 a) {
    float f[8];
    memcpy(f, &a, 32);
    EMU_LOOP(8) if ((m >> i) & 1) memcpy((float *)p + i, &f[i], 4);
}
/* kern_cvt_avx512.c's conversions and stores. */
/* Only the rounding the kernels use (nearest, no exceptions): any other
 * immediate traps rather than round differently from the instruction. */
EMU __m256i e_cvtps_ph(emu_m512 a, int imm) {
    if (imm != (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        __builtin_trap();
    __m256 lo, hi;
    memcpy(&lo, a.v.f, 32);
    memcpy(&hi, a.v.f + 8, 32);
    __m128i l = _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i h = _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(l), h, 1);
}
EMU void e_storeu_si512(void *p, emu_m512i a) {
    memcpy(p, &a, 64);
}
/* The streaming store needs 64-byte alignment, as the instruction. */
EMU void e_stream_si512(void *p, emu_m512i a) {
    if ((uintptr_t)p % 64)
        __builtin_trap();
    memcpy(p, &a, 64);
}
EMU void e_mask_storeu_epi32(void *p, __mmask16 m, emu_m512i a) {
    EMU_LOOP(16) if ((m >> i) & 1) memcpy((int32_t *)p + i, &a.v.d[i], 4);
}
EMU __m256i e256_mask_blend_epi16(__mmask16 m, __m256i a, __m256i b) {
    uint16_t ua[16], ub[16];
    memcpy(ua, &a, 32);
    memcpy(ub, &b, 32);
    EMU_LOOP(16) if ((m >> i) & 1) ua[i] = ub[i];
    __m256i r;
    memcpy(&r, ua, 32);
    return r;
}
EMU __mmask16 e256_cmpgt_epu16_mask(__m256i a, __m256i b) {
    uint16_t ua[16], ub[16];
    memcpy(ua, &a, 32);
    memcpy(ub, &b, 32);
    __mmask16 m = 0;
    EMU_LOOP(16) if (ua[i] > ub[i]) m = (__mmask16)(m | (1u << i));
    return m;
}
EMU void e256_mask_storeu_epi16(void *p, __mmask16 m, __m256i a) {
    uint16_t u[16];
    memcpy(u, &a, 32);
    EMU_LOOP(16) if ((m >> i) & 1) memcpy((uint16_t *)p + i, &u[i], 2);
}
/* kern_matmul_amx.c's weight decode. */
EMU emu_m512i e_permutex2var_epi64(emu_m512i a, emu_m512i idx, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(8) {
        const int j = (int)(idx.v.q[i] & 15);
        r.v.q[i] = j < 8 ? a.v.q[j] : b.v.q[j - 8];
    }
    return r;
}
EMU emu_m512i e_broadcast_i32x4(__m128i x) {
    emu_m512i r;
    EMU_LOOP(4) memcpy(r.v.ub + 16 * i, &x, 16);
    return r;
}
/* vpshufb: per 128-bit lane, byte i = lane byte (idx & 15), 0 if idx bit 7. */
EMU emu_m512i e_shuffle_epi8(emu_m512i a, emu_m512i idx) {
    emu_m512i r;
    EMU_LOOP(64) {
        const uint8_t k = idx.v.ub[i];
        r.v.ub[i] = (k & 0x80) ? 0 : a.v.ub[(i & ~15) + (k & 15)];
    }
    return r;
}
EMU emu_m512i e_mask_add_epi8(emu_m512i src, __mmask64 m, emu_m512i a, emu_m512i b) {
    EMU_LOOP(64) if ((m >> i) & 1) src.v.ub[i] = (uint8_t)(a.v.ub[i] + b.v.ub[i]);
    return src;
}
EMU emu_m512i e_sub_epi8(emu_m512i a, emu_m512i b) {
    EMU_LOOP(64) a.v.ub[i] = (uint8_t)(a.v.ub[i] - b.v.ub[i]);
    return a;
}
/* Per 128-bit lane: words 0-3 (lo) or 4-7 (hi) of a and b interleaved. */
EMU emu_m512i e_unpack_epi16(emu_m512i a, emu_m512i b, int hi) {
    emu_m512i r;
    EMU_LOOP(4) {
        for (int k = 0; k < 4; k++) {
            r.v.uw[8 * i + 2 * k] = a.v.uw[8 * i + 4 * hi + k];
            r.v.uw[8 * i + 2 * k + 1] = b.v.uw[8 * i + 4 * hi + k];
        }
    }
    return r;
}
EMU emu_m512i e_unpacklo_epi16(emu_m512i a, emu_m512i b) {
    return e_unpack_epi16(a, b, 0);
}
EMU emu_m512i e_unpackhi_epi16(emu_m512i a, emu_m512i b) {
    return e_unpack_epi16(a, b, 1);
}
EMU void e_store_si512(void *p, emu_m512i a) {
    if ((uintptr_t)p % 64)
        __builtin_trap();
    memcpy(p, &a, 64);
}
/* AVX-512F's masked 512-bit store: only the lanes of m are written. */
EMU void e_mask_storeu_ps(void *p, __mmask16 m, emu_m512 a) {
    EMU_LOOP(16) if ((m >> i) & 1) memcpy((float *)p + i, &a.v.f[i], 4);
}
/* The aligned load faults on a misaligned address: so does this. */
EMU emu_m512i e_load_si512(const void *p) {
    if ((uintptr_t)p % 64)
        __builtin_trap();
    emu_m512i r;
    memcpy(&r, p, 64);
    return r;
}
EMU emu_m512i e_inserti64x4(emu_m512i a, __m256i h, int i) {
    a.v.h256[i] = h;
    return a;
}
EMU emu_m512i e_broadcast_i64x4(__m256i x) {
    emu_m512i r;
    r.v.h256[0] = x;
    r.v.h256[1] = x;
    return r;
}
EMU emu_m512 e_broadcast_f32x4(__m128 x) {
    emu_m512 r;
    float f[4];
    memcpy(f, &x, 16);
    EMU_LOOP(16) r.v.f[i] = f[i % 4];
    return r;
}
EMU emu_m512 e_broadcast_f32x2(__m128 x) {
    emu_m512 r;
    float f[4];
    memcpy(f, &x, 16);
    EMU_LOOP(16) r.v.f[i] = f[i % 2];
    return r;
}

/* ---- conversions ---- */
EMU emu_m512 e_cvtph_ps(__m256i h) {
    emu_m512 r;
    uint16_t u[16];
    memcpy(u, &h, 32);
    EMU_LOOP(16) r.v.f[i] = _cvtsh_ss(u[i]);
    return r;
}
EMU emu_m512i e_cvtepu16_epi32(__m256i h) {
    emu_m512i r;
    uint16_t u[16];
    memcpy(u, &h, 32);
    EMU_LOOP(16) r.v.d[i] = u[i];
    return r;
}
EMU emu_m512i e_loadu_si512(const void *p) {
    emu_m512i r;
    memcpy(&r.v, p, 64);
    return r;
}
/* vpdpbusd: each int32 lane += the 4 products of unsigned bytes of a and
 * signed bytes of b (no saturation). */
EMU emu_m512i e_dpbusd_epi32(emu_m512i src, emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(16) {
        int32_t s = 0;
        for (int j = 0; j < 4; j++)
            s += (int32_t)a.v.ub[4 * i + j] * (int32_t)b.v.b[4 * i + j];
        r.v.d[i] = (int32_t)((uint32_t)src.v.d[i] + (uint32_t)s);
    }
    return r;
}
EMU emu_m512 e_permutexvar_ps(emu_m512i idx, emu_m512 a) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = a.v.f[idx.v.d[i] & 15];
    return r;
}
EMU emu_m512 e_castps128_ps512(__m128 a) {
    emu_m512 r;
    memset(&r, 0, 64); /* the upper lanes are undefined in the real cast */
    memcpy(r.v.f, &a, 16);
    return r;
}
EMU emu_m512i e_cvtepi8_epi32(__m128i h) {
    emu_m512i r;
    int8_t s[16];
    memcpy(s, &h, 16);
    EMU_LOOP(16) r.v.d[i] = s[i];
    return r;
}
EMU emu_m512i e_cvtepu8_epi32(__m128i h) {
    emu_m512i r;
    uint8_t u[16];
    memcpy(u, &h, 16);
    EMU_LOOP(16) r.v.d[i] = u[i];
    return r;
}
EMU emu_m512i e_srli_epi32(emu_m512i a, unsigned n) {
    emu_m512i r;
    EMU_LOOP(16) r.v.d[i] = n > 31 ? 0 : (int32_t)((uint32_t)a.v.d[i] >> n);
    return r;
}
EMU emu_m512i e_cvtepi8_epi16(__m256i h) {
    emu_m512i r;
    int8_t s[32];
    memcpy(s, &h, 32);
    EMU_LOOP(32) r.v.w[i] = s[i];
    return r;
}
EMU emu_m512i e_cvtepu8_epi16(__m256i h) {
    emu_m512i r;
    uint8_t u[32];
    memcpy(u, &h, 32);
    EMU_LOOP(32) r.v.w[i] = u[i];
    return r;
}
/* Round to nearest even, the MXCSR default, like vcvtdq2ps. */
EMU emu_m512 e_cvtepi32_ps(emu_m512i a) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = (float)a.v.d[i];
    return r;
}

/* ---- integer arithmetic (wrapping, as the instructions do) ---- */
EMU emu_m512i e_add_epi32(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(16) r.v.d[i] = (int32_t)((uint32_t)a.v.d[i] + (uint32_t)b.v.d[i]);
    return r;
}
EMU emu_m512i e_sub_epi32(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(16) r.v.d[i] = (int32_t)((uint32_t)a.v.d[i] - (uint32_t)b.v.d[i]);
    return r;
}
EMU emu_m512i e_slli_epi32(emu_m512i a, int n) {
    emu_m512i r;
    EMU_LOOP(16) r.v.d[i] = (int32_t)((uint32_t)a.v.d[i] << n);
    return r;
}
EMU emu_m512i e_sub_epi16(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(32) r.v.w[i] = (int16_t)((uint16_t)a.v.w[i] - (uint16_t)b.v.w[i]);
    return r;
}
/* vpaddw with a write mask: lanes whose bit of m is clear keep src. */
EMU emu_m512i e_mask_add_epi16(emu_m512i src, __mmask32 m, emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(32)
    r.v.w[i] = (m >> i) & 1 ? (int16_t)((uint16_t)a.v.w[i] + (uint16_t)b.v.w[i]) : src.v.w[i];
    return r;
}
/* Logical shift; a count above 15 gives 0, as the instruction does. */
EMU emu_m512i e_srli_epi16(emu_m512i a, unsigned n) {
    emu_m512i r;
    EMU_LOOP(32) r.v.uw[i] = n > 15 ? 0 : (uint16_t)(a.v.uw[i] >> n);
    return r;
}
EMU emu_m512i e_and_si512(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(8) r.v.q[i] = a.v.q[i] & b.v.q[i];
    return r;
}
EMU emu_m512i e_xor_si512(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(8) r.v.q[i] = a.v.q[i] ^ b.v.q[i];
    return r;
}
/* vpmaddwd: the only overflow (-32768 * -32768 * 2) wraps to INT32_MIN. */
EMU emu_m512i e_madd_epi16(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(16) {
        int64_t s =
            (int64_t)a.v.w[2 * i] * b.v.w[2 * i] + (int64_t)a.v.w[2 * i + 1] * b.v.w[2 * i + 1];
        r.v.d[i] = (int32_t)(uint32_t)s;
    }
    return r;
}
/* vpdpwssd: the two products added to the accumulator, wrapping. */
EMU emu_m512i e_dpwssd_epi32(emu_m512i s, emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(16) {
        int64_t t = (int64_t)s.v.d[i] + (int64_t)a.v.w[2 * i] * b.v.w[2 * i] +
                    (int64_t)a.v.w[2 * i + 1] * b.v.w[2 * i + 1];
        r.v.d[i] = (int32_t)(uint32_t)t;
    }
    return r;
}

/* ---- shuffles ---- */
EMU emu_m512i e_unpacklo_epi32(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    for (int l = 0; l < 16; l += 4) {
        r.v.d[l] = a.v.d[l];
        r.v.d[l + 1] = b.v.d[l];
        r.v.d[l + 2] = a.v.d[l + 1];
        r.v.d[l + 3] = b.v.d[l + 1];
    }
    return r;
}
EMU emu_m512i e_unpackhi_epi32(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    for (int l = 0; l < 16; l += 4) {
        r.v.d[l] = a.v.d[l + 2];
        r.v.d[l + 1] = b.v.d[l + 2];
        r.v.d[l + 2] = a.v.d[l + 3];
        r.v.d[l + 3] = b.v.d[l + 3];
    }
    return r;
}
EMU emu_m512i e_unpacklo_epi64(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(4) {
        r.v.q[2 * i] = a.v.q[2 * i];
        r.v.q[2 * i + 1] = b.v.q[2 * i];
    }
    return r;
}
EMU emu_m512i e_unpackhi_epi64(emu_m512i a, emu_m512i b) {
    emu_m512i r;
    EMU_LOOP(4) {
        r.v.q[2 * i] = a.v.q[2 * i + 1];
        r.v.q[2 * i + 1] = b.v.q[2 * i + 1];
    }
    return r;
}
/* Quarters 0-1 of the result from a, 2-3 from b, each picked by 2 bits. */
EMU emu_m512i e_shuffle_i32x4(emu_m512i a, emu_m512i b, int imm) {
    emu_m512i r;
    EMU_LOOP(4) memcpy(&r.v.d[4 * i], &(i < 2 ? &a : &b)->v.d[4 * ((imm >> (2 * i)) & 3)], 16);
    return r;
}

/* Float shuffles: quarters 0-1 of the result from a, 2-3 from b (vshuff32x4);
 * within each 128-bit lane, elements 0-1 from a and 2-3 from b (vshufps). */
EMU emu_m512 e_shuffle_f32x4(emu_m512 a, emu_m512 b, int imm) {
    emu_m512 r;
    EMU_LOOP(4) memcpy(&r.v.f[4 * i], &(i < 2 ? &a : &b)->v.f[4 * ((imm >> (2 * i)) & 3)], 16);
    return r;
}
EMU emu_m512 e_shuffle_ps(emu_m512 a, emu_m512 b, int imm) {
    emu_m512 r;
    for (int l = 0; l < 16; l += 4) {
        r.v.f[l] = a.v.f[l + (imm & 3)];
        r.v.f[l + 1] = a.v.f[l + ((imm >> 2) & 3)];
        r.v.f[l + 2] = b.v.f[l + ((imm >> 4) & 3)];
        r.v.f[l + 3] = b.v.f[l + ((imm >> 6) & 3)];
    }
    return r;
}
EMU emu_m512d e_unpacklo_pd(emu_m512d a, emu_m512d b) {
    emu_m512d r;
    EMU_LOOP(4) {
        r.v.q[2 * i] = a.v.q[2 * i];
        r.v.q[2 * i + 1] = b.v.q[2 * i];
    }
    return r;
}
EMU emu_m512d e_unpackhi_pd(emu_m512d a, emu_m512d b) {
    emu_m512d r;
    EMU_LOOP(4) {
        r.v.q[2 * i] = a.v.q[2 * i + 1];
        r.v.q[2 * i + 1] = b.v.q[2 * i + 1];
    }
    return r;
}
EMU emu_m512d e_castps_pd(emu_m512 a) {
    emu_m512d r;
    memcpy(&r, &a, 64);
    return r;
}
EMU emu_m512 e_castpd_ps(emu_m512d a) {
    emu_m512 r;
    memcpy(&r, &a, 64);
    return r;
}
/* The aligned store: a misaligned address faults as the instruction would. */
EMU void e_store_ps(void *p, emu_m512 a) {
    if ((uintptr_t)p % 64)
        __builtin_trap();
    memcpy(p, a.v.f, 64);
}

/* The aligned load: a misaligned address faults as the instruction would. */
EMU emu_m512 e_load_ps(const void *p) {
    if ((uintptr_t)p % 64)
        __builtin_trap();
    emu_m512 r;
    memcpy(r.v.f, p, 64);
    return r;
}
/* vpmovwb: the low byte of each of 32 int16 lanes (truncation). */
EMU __m256i e_cvtepi16_epi8(emu_m512i a) {
    int8_t s[32];
    EMU_LOOP(32) s[i] = (int8_t)(uint8_t)(uint16_t)a.v.w[i];
    __m256i r;
    memcpy(&r, s, 32);
    return r;
}

/* ---- float ---- */
EMU emu_m512 e_mul_ps(emu_m512 a, emu_m512 b) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = a.v.f[i] * b.v.f[i];
    return r;
}
EMU emu_m512 e_add_ps(emu_m512 a, emu_m512 b) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = a.v.f[i] + b.v.f[i];
    return r;
}
EMU emu_m512 e_fmadd_ps(emu_m512 a, emu_m512 b, emu_m512 c) {
    emu_m512 r;
    EMU_LOOP(16) r.v.f[i] = __builtin_fmaf(a.v.f[i], b.v.f[i], c.v.f[i]);
    return r;
}

#define _mm512_setzero_ps e_setzero_ps
#define _mm512_setzero_si512 e_setzero_si512
#define _mm512_set1_epi16 e_set1_epi16
#define _mm512_set1_epi8 e_set1_epi8
#define _mm512_set1_ps e_set1_ps
#define _mm512_set1_epi64 e_set1_epi64
#define _mm512_set1_epi32 e_set1_epi32
#define _mm512_shuffle_f32x4 e_shuffle_f32x4
#define _mm512_shuffle_ps e_shuffle_ps
#define _mm512_unpacklo_pd e_unpacklo_pd
#define _mm512_unpackhi_pd e_unpackhi_pd
#define _mm512_castps_pd e_castps_pd
#define _mm512_castpd_ps e_castpd_ps
#define _mm512_store_ps e_store_ps
#define _mm512_load_ps e_load_ps
#define _mm512_cvtepi16_epi8 e_cvtepi16_epi8
#define _mm512_castps256_ps512 e_castps256_ps512
#define _mm512_insertf32x8 e_insertf32x8
#define _mm512_broadcast_f32x8 e_broadcast_f32x8
#define _mm256_mask_storeu_ps e256_mask_storeu_ps
#define _mm512_mask_storeu_ps e_mask_storeu_ps
#define _mm512_permutex2var_epi64 e_permutex2var_epi64
#define _mm512_broadcast_i32x4 e_broadcast_i32x4
#define _mm512_shuffle_epi8 e_shuffle_epi8
#define _mm512_mask_add_epi8 e_mask_add_epi8
#define _mm512_sub_epi8 e_sub_epi8
#define _mm512_unpacklo_epi16 e_unpacklo_epi16
#define _mm512_unpackhi_epi16 e_unpackhi_epi16
#define _mm512_store_si512 e_store_si512
#define _mm512_cvtps_ph e_cvtps_ph
#define _mm512_storeu_si512 e_storeu_si512
#define _mm512_stream_si512 e_stream_si512
#define _mm512_mask_storeu_epi32 e_mask_storeu_epi32
#define _mm256_mask_blend_epi16 e256_mask_blend_epi16
#define _mm256_mask_storeu_epi16 e256_mask_storeu_epi16
#define _mm256_cmpgt_epu16_mask e256_cmpgt_epu16_mask
#define _mm512_load_si512 e_load_si512
#define _mm512_storeu_ps e_storeu_ps
#define _mm512_loadu_ps e_loadu_ps
#define _mm512_maskz_loadu_ps e_maskz_loadu_ps
#define _mm256_maskz_loadu_epi16 e256_maskz_loadu_epi16
#define _mm512_castsi512_ps e_castsi512_ps
#define _mm512_castps512_ps256 e_castps512_ps256
#define _mm512_castsi256_si512 e_castsi256_si512
#define _mm512_extractf32x8_ps e_extractf32x8_ps
#define _mm512_inserti64x4 e_inserti64x4
#define _mm512_broadcast_i64x4 e_broadcast_i64x4
#define _mm512_broadcast_f32x4 e_broadcast_f32x4
#define _mm512_broadcast_f32x2 e_broadcast_f32x2
#define _mm512_cvtph_ps e_cvtph_ps
#define _mm512_cvtepu16_epi32 e_cvtepu16_epi32
#define _mm512_cvtepi8_epi16 e_cvtepi8_epi16
#define _mm512_cvtepi8_epi32 e_cvtepi8_epi32
#define _mm512_loadu_si512 e_loadu_si512
#define _mm512_dpbusd_epi32 e_dpbusd_epi32
#define _mm512_permutexvar_ps e_permutexvar_ps
#define _mm512_castps128_ps512 e_castps128_ps512
#define _mm512_cvtepu8_epi32 e_cvtepu8_epi32
#define _mm512_srli_epi32 e_srli_epi32
#define _mm512_cvtepu8_epi16 e_cvtepu8_epi16
#define _mm512_cvtepi32_ps e_cvtepi32_ps
#define _mm512_add_epi32 e_add_epi32
#define _mm512_sub_epi32 e_sub_epi32
#define _mm512_slli_epi32 e_slli_epi32
#define _mm512_sub_epi16 e_sub_epi16
#define _mm512_srli_epi16 e_srli_epi16
#define _mm512_mask_add_epi16 e_mask_add_epi16
#define _mm512_and_si512 e_and_si512
#define _mm512_xor_si512 e_xor_si512
#define _mm512_madd_epi16 e_madd_epi16
#define _mm512_dpwssd_epi32 e_dpwssd_epi32
#define _mm512_unpacklo_epi32 e_unpacklo_epi32
#define _mm512_unpackhi_epi32 e_unpackhi_epi32
#define _mm512_unpacklo_epi64 e_unpacklo_epi64
#define _mm512_unpackhi_epi64 e_unpackhi_epi64
#define _mm512_shuffle_i32x4 e_shuffle_i32x4
#define _mm512_mul_ps e_mul_ps
#define _mm512_add_ps e_add_ps
#define _mm512_fmadd_ps e_fmadd_ps

#endif
