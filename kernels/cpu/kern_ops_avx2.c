/* kern_ops_avx2.c - AVX2 + FMA row ops: RMSNorm, SiLU and GELU gates, softmax, and the
 * dot/axpy used by attention. Compiled with -mavx2 -mfma -mf16c.
 *
 * exp: Cody-Waite reduction x = n*ln2 + r (ln2 split in a high part exact in
 * float and a low correction, |r| <= ln2/2), exp(r) by its degree-7 Taylor
 * polynomial (truncation r^8/8! < 6e-9 relative on that interval), times
 * 2^n built in the exponent bits. Measured max relative error vs libm
 * double exp over [-87, 88]: 7.4e-8, under one float ulp (test_kern_ops
 * checks <= 1e-6).
 * The input is clamped to [-87.3, 88.3] so 2^n stays a normal float
 * (n in [-126, 127]): results below e^-87.3 ~ 1e-38 come out as ~1e-38
 * instead of smaller and above e^88.3 ~ 2e38 are capped, which changes
 * nothing in silu or softmax beyond 1e-30 absolute. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kern_internal.h"

#define AI static inline __attribute__((always_inline))

AI __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* 0.693145751953125 has 16 significant bits, so n * hi is exact. */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The last n % 8 elements as one zero-padded (or masked) vector step. */
AI __m256i tail_mask(int rem) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), idx);
}

void kern_exp_avx2(float *out, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, m, exp8(_mm256_maskload_ps(x + i, m)));
    }
}

void kern_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        s0 = _mm256_fmadd_ps(a, a, s0);
        s1 = _mm256_fmadd_ps(b, b, s1);
    }
    float ss = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    __m256 vs = _mm256_set1_ps(scale);
    i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

AI __m256 silu_mul8(__m256 g, __m256 u) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void kern_silu_mul_avx2(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 r = silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m));
        _mm256_maskstore_ps(out + i, m, r);
    }
}

/* gelu_tanh(g) * u. 0.5 x (1 + tanh(z)) = x / (1 + exp(-2 z)) exactly, so the
 * tanh form costs one exp8 and one division like silu (and avoids the
 * reference's 1 + tanh(z) cancellation for z << 0). */
AI __m256 gelu_tanh_mul8(__m256 g, __m256 u) {
    const __m256 k2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f); /* -2 sqrt(2/pi) */
    __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    __m256 z = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g);
    __m256 e = exp8(_mm256_mul_ps(k2, z));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void kern_gelu_tanh_mul_avx2(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i,
                         gelu_tanh_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 r = gelu_tanh_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m));
        _mm256_maskstore_ps(out + i, m, r);
    }
}

void kern_softmax_avx2(float *x, int n) {
    if (n <= 0)
        return;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float max = _mm_cvtss_f32(m4);
    for (; i < n; i++)
        max = x[i] > max ? x[i] : max;
    __m256 vmax = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
    i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum8(sum));
    i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= _mm256_cvtss_f32(inv);
}

float kern_dot_avx2(const float *a, const float *b, int n) {
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
    return hsum8(s);
}

void kern_axpy_avx2(float *y, float alpha, const float *x, int n) {
    __m256 va = _mm256_set1_ps(alpha);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
}

/* ---- f32 -> f16 rows: vcvtps2ph rounds to nearest even, as kern_fp32_to_fp16 -- */

void kern_fp32_to_fp16_row_avx2(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        dst[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* The attention, at 8 lanes (kern_attn_x.h). */
#define AV __m256
#define AW 8
#define AV_LOADU(p) _mm256_loadu_ps(p)
#define AV_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define AV_LOADPH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define AV_MUL(a, b) _mm256_mul_ps((a), (b))
#define AV_ADD(a, b) _mm256_add_ps((a), (b))
#define AV_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define AV_SET1(x) _mm256_set1_ps(x)
#define AV_ZERO() _mm256_setzero_ps()
#define AV_FOLD(v) (v)
#define AV_LOADQ8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
/* 8 bytes zero-extended to 32-bit lanes: the low nibbles, or the high ones. */
#define AV_LOADQ4(p, hi)                                                                           \
    _mm256_cvtepi32_ps(_mm256_sub_epi32(                                                           \
        (hi) ? _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))), 4)   \
             : _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))),       \
                                _mm256_set1_epi32(15)),                                            \
        _mm256_set1_epi32(8)))
#define AV_CV1 8
#define AV_CV3 4
#define ATT_FN kern_attention_rows_avx2
#include "kernels/cpu/kern_attn_x.h"
