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

/* ---- attention -------------------------------------------------------------------
 * Rows of queries at consecutive positions for the n_heads query heads that
 * read one KV head (a GQA group). Phase 1 loads each K row once per tile of
 * ATTN_TILE rows x ATTN_HEADS heads and reduces the dot products of
 * ATTN_PB positions together; phase 2 is the softmax of each (row, head);
 * phase 3 sums the V rows into outputs held in registers, each V vector
 * loaded once for up to three heads. Every (row, head) result goes through
 * the same operations in the same order whatever its tile, the heads beside
 * it and where its positions fall in the blocks of ATTN_PB, so results do
 * not depend on how rows and heads are split (batch invariance). */

#define ATTN_TILE 4  /* query rows per K row load */
#define ATTN_HEADS 4 /* query heads per K row load */
#define ATTN_PB 8    /* positions whose scores are reduced together */

/* Element offset of position p, KV head kv_head, in the view's K or V. */
static inline size_t attn_off(const kern_kv_view *kv, int kv_head, int head_dim, int p) {
    return (size_t)kv->block_table[p / kv->block_size] * kv->block_stride +
           (size_t)(p % kv->block_size) * kv->row_stride + (size_t)kv_head * head_dim;
}

/* Eight elements of K (is_v = 0) or V from element offset off, as f32; an
 * f16 cache (f16 = 1) converts with F16C, exactly as kern_fp16_to_fp32. */
AI __m256 kv_load8(const kern_kv_view *kv, int is_v, size_t off, const int f16) {
    if (f16)
        return _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)((is_v ? kv->v16 : kv->k16) + off)));
    return _mm256_loadu_ps((is_v ? kv->v : kv->k) + off);
}

/* Software prefetch of the K/V rows ATTN_PF positions ahead: a head's slice
 * of a row is head_dim floats inside a row of all KV heads, so successive
 * positions are strided and, across blocks, scattered; the hardware
 * prefetcher alone leaves the loads waiting on memory. Prefetching changes
 * no result. */
#ifndef ATTN_HINT
#define ATTN_HINT _MM_HINT_T0
#endif
#ifndef ATTN_PF
#define ATTN_PF 8
#endif
_Static_assert(ATTN_PF % ATTN_PB == 0, "attn_scores: a prefetched chunk starts a chunk");

/* Prefetches n elements of K or V from element offset off. */
AI void attn_prefetch(const kern_kv_view *kv, int is_v, size_t off, int n, const int f16) {
    const char *p = f16 ? (const char *)((is_v ? kv->v16 : kv->k16) + off)
                        : (const char *)((is_v ? kv->v : kv->k) + off);
    size_t bytes = (size_t)n * (f16 ? 2 : 4);
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch(p + i, ATTN_HINT);
}

/* The same into L2 only (prefetcht1): the far prefetch of whole rows, which
 * as L1 prefetches would fill the core's few L1 miss buffers (a read of
 * shuffled 16-position blocks of rows on a Zen 4 core: 21.5 GB/s with T1
 * eight positions ahead, 9 GB/s with T0). */
#ifndef ATTN_ROW_PF
#define ATTN_ROW_PF 8
#endif
AI void attn_prefetch_l2(const kern_kv_view *kv, int is_v, size_t off, int n, const int f16) {
    const char *p = f16 ? (const char *)((is_v ? kv->v16 : kv->k16) + off)
                        : (const char *)((is_v ? kv->v : kv->k) + off);
    size_t bytes = (size_t)n * (f16 ? 2 : 4);
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch(p + i, _MM_HINT_T1);
}

/* q . k over nv vectors with two accumulators (even and odd vectors), so the
 * FMA chain is half as long as with one; returns the eight lanes that
 * hsum8 turns into the score. */
AI __m256 attn_dotv(const float *q, const __m256 *k, int nv) {
    __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(q), k[0]);
    if (nv == 1)
        return a0;
    __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(q + 8), k[1]);
    for (int i = 2; i < nv; i += 2) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), k[i], a0);
        if (i + 1 < nv)
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i + 8), k[i + 1], a1);
    }
    return _mm256_add_ps(a0, a1);
}

/* Eight hsum8 at once: lane i of the result equals hsum8(v[i]) bit for bit,
 * because the same pairs of lanes are added in the same order (j and j + 4,
 * then j and j + 2, then j and j + 1). Pairing v[i] with v[i + 4] in the
 * first step leaves the sums in the order of i. */
AI __m256 hsum8x8(const __m256 *v) {
    __m256 w[4]; /* w[i] = [v[i] low + high | v[i + 4] low + high] */
    for (int i = 0; i < 4; i++)
        w[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[i], v[i + 4], 0x20),
                             _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
    /* a = [t0(w0), t0(w1), t1(w0), t1(w1)] per half, tj = lane j + lane j + 2. */
    __m256 a = _mm256_add_ps(_mm256_unpacklo_ps(w[0], w[1]), _mm256_unpackhi_ps(w[0], w[1]));
    __m256 b = _mm256_add_ps(_mm256_unpacklo_ps(w[2], w[3]), _mm256_unpackhi_ps(w[2], w[3]));
    __m256d ad = _mm256_castps_pd(a), bd = _mm256_castps_pd(b);
    return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(ad, bd)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(ad, bd)));
}

/* Phase 1 for heads [h0, h0 + nh) and rows [r0, r0 + nt): scores times scale
 * into scratch row h * n_rows + r. Row r needs positions [0, pos0 + r]. In a
 * full block of ATTN_PB positions, rows that end inside the block also get
 * the scores past their end: those land inside their own scratch row (the
 * block ends at or before the tile's last position) and are never read. */
AI void attn_scores(const float *q, size_t q_stride, int n_rows, int pos0, const kern_kv_view *kv,
                    int kv_head, int head_dim, float scale, float *scratch, int h0, int nh, int r0,
                    int nt, const int nv, const int f16, int row_pf) {
    /* row_pf > 0: also bring the whole cache rows (row_pf elements from KV
     * head 0, K and V) into L2, ATTN_ROW_PF positions ahead, for the later
     * groups and phase 3 (first tile only). */
    if (h0 || r0)
        row_pf = 0;
    size_t n_ctx_max = (size_t)(pos0 + n_rows);
    int last = pos0 + r0 + nt - 1; /* the tile's longest causal span */
    __m256 k[KERN_ATTN_MAX_HEAD_DIM / 8];
    __m256 part[ATTN_TILE * ATTN_HEADS][ATTN_PB];
    __m256 vscale = _mm256_set1_ps(scale);
    int p = 0;
    /* When the cache blocks hold whole chunks of ATTN_PB positions (the
     * default 16 does), a chunk's rows are evenly spaced in one block: one
     * block-table lookup (a division) per chunk instead of two per position. */
    const int chunked = kv->block_size % ATTN_PB == 0;
    for (; p + ATTN_PB <= last + 1; p += ATTN_PB) {
        /* Rows before rfirst end before this block. */
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        size_t ko0 = chunked ? attn_off(kv, kv_head, head_dim, p) : 0;
        size_t pf0 =
            chunked && p + ATTN_PF <= last ? attn_off(kv, kv_head, head_dim, p + ATTN_PF) : 0;
        for (int i = 0; i < ATTN_PB; i++) {
            if (row_pf && p + i + ATTN_ROW_PF <= last) {
                const size_t ro = attn_off(kv, 0, head_dim, p + i + ATTN_ROW_PF);
                attn_prefetch_l2(kv, 0, ro, row_pf, f16);
                attn_prefetch_l2(kv, 1, ro, row_pf, f16);
            }
            if (p + i + ATTN_PF <= last)
                attn_prefetch(kv, 0,
                              chunked ? pf0 + (size_t)i * kv->row_stride
                                      : attn_off(kv, kv_head, head_dim, p + i + ATTN_PF),
                              head_dim, f16);
            size_t ko =
                chunked ? ko0 + (size_t)i * kv->row_stride : attn_off(kv, kv_head, head_dim, p + i);
            for (int d = 0; d < nv; d++)
                k[d] = kv_load8(kv, 0, ko + 8 * (size_t)d, f16);
            int j = 0;
            for (int r = rfirst; r < r0 + nt; r++)
                for (int h = h0; h < h0 + nh; h++)
                    part[j++][i] =
                        attn_dotv(q + (size_t)r * q_stride + (size_t)h * head_dim, k, nv);
        }
        int j = 0;
        for (int r = rfirst; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++)
                _mm256_storeu_ps(scratch + ((size_t)h * n_rows + r) * n_ctx_max + p,
                                 _mm256_mul_ps(hsum8x8(part[j++]), vscale));
    }
    for (; p <= last; p++) {
        size_t ko = attn_off(kv, kv_head, head_dim, p);
        for (int d = 0; d < nv; d++)
            k[d] = kv_load8(kv, 0, ko + 8 * (size_t)d, f16);
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        for (int r = rfirst; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++)
                scratch[((size_t)h * n_rows + r) * n_ctx_max + p] =
                    hsum8(attn_dotv(q + (size_t)r * q_stride + (size_t)h * head_dim, k, nv)) *
                    scale;
    }
}

/* Phase 3 for hg (<= 3) heads of one row, output vectors [c0, c0 + cv) of
 * each: head h's weights are w[h * w_stride + p], its output starts at
 * o + h * head_dim. Each lane is acc = fma(weight_p, v_p, acc) over p in
 * order from zero, as for one head alone; sharing a V load between heads
 * and splitting head_dim into chunks changes no lane's sequence. Positions
 * are walked block by block of the paged view, without a division each. */
AI void attn_values(float *o, const float *w, size_t w_stride, int n_ctx, const kern_kv_view *kv,
                    int kv_head, int head_dim, int c0, const int hg, const int cv, const int f16) {
    __m256 acc[3][8];
    for (int h = 0; h < hg; h++)
        for (int i = 0; i < cv; i++)
            acc[h][i] = _mm256_setzero_ps();
    for (int b0 = 0, n; b0 < n_ctx; b0 += n) {
        n = n_ctx - b0 < kv->block_size ? n_ctx - b0 : kv->block_size;
        size_t vb = attn_off(kv, kv_head, head_dim, b0) + 8 * (size_t)c0;
        /* the rows ATTN_PF ahead may lie in the next block */
        int has_next = b0 + n < n_ctx;
        size_t vnext = has_next ? attn_off(kv, kv_head, head_dim, b0 + n) + 8 * (size_t)c0 : 0;
        const float *wb = w + b0;
        for (int p = 0; p < n; p++) {
            size_t vp = vb + (size_t)p * kv->row_stride;
            if (p + ATTN_PF < n)
                attn_prefetch(kv, 1, vp + (size_t)ATTN_PF * kv->row_stride, 8 * cv, f16);
            else if (has_next && p + ATTN_PF - n < n_ctx - b0 - n &&
                     p + ATTN_PF - n < kv->block_size)
                attn_prefetch(kv, 1, vnext + (size_t)(p + ATTN_PF - n) * kv->row_stride, 8 * cv,
                              f16);
            __m256 wp[3];
            for (int h = 0; h < hg; h++)
                wp[h] = _mm256_broadcast_ss(wb + (size_t)h * w_stride + p);
            for (int i = 0; i < cv; i++) {
                __m256 v = kv_load8(kv, 1, vp + 8 * (size_t)i, f16);
                for (int h = 0; h < hg; h++)
                    acc[h][i] = _mm256_fmadd_ps(wp[h], v, acc[h][i]);
            }
        }
    }
    for (int h = 0; h < hg; h++)
        for (int i = 0; i < cv; i++)
            _mm256_storeu_ps(o + (size_t)h * head_dim + 8 * (c0 + i), acc[h][i]);
}

/* Phase 3 over all of head_dim in chunks that keep hg x cv accumulators,
 * the hg weights and one V vector within the 16 ymm registers. */
AI void attn_values_heads(float *o, const float *w, size_t w_stride, int n_ctx,
                          const kern_kv_view *kv, int kv_head, int head_dim, const int hg,
                          const int nv, const int f16) {
    const int cv = hg == 1 ? 8 : 4;
    int c0 = 0;
    for (; c0 + cv <= nv; c0 += cv)
        attn_values(o, w, w_stride, n_ctx, kv, kv_head, head_dim, c0, hg, cv, f16);
    if (c0 < nv)
        attn_values(o, w, w_stride, n_ctx, kv, kv_head, head_dim, c0, hg, nv - c0, f16);
}

AI void attn_rows_nv(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows,
                     int n_heads, int pos0, const kern_kv_view *kv, int kv_head, int head_dim,
                     float scale, float *scratch, const int nv, const int f16, int row_pf) {
    size_t n_ctx_max = (size_t)(pos0 + n_rows);
    size_t w_stride = (size_t)n_rows * n_ctx_max; /* floats between heads in scratch */
    /* Phase 1: scores, a tile of heads x rows at a time. */
    for (int h0 = 0; h0 < n_heads; h0 += ATTN_HEADS) {
        int nh = n_heads - h0 < ATTN_HEADS ? n_heads - h0 : ATTN_HEADS;
        for (int r0 = 0; r0 < n_rows; r0 += ATTN_TILE) {
            int nt = n_rows - r0 < ATTN_TILE ? n_rows - r0 : ATTN_TILE;
            attn_scores(q, q_stride, n_rows, pos0, kv, kv_head, head_dim, scale, scratch, h0, nh,
                        r0, nt, nv, f16, row_pf);
        }
    }
    /* Phases 2 and 3, row by row. */
    for (int r = 0; r < n_rows; r++) {
        int n_ctx = pos0 + r + 1;
        float *w = scratch + (size_t)r * n_ctx_max;
        for (int h = 0; h < n_heads; h++) {
            /* Soft-capping (Gemma 2), then a sliding window: the positions
             * before it get zero weight. */
            if (kv->softcap > 0.0f)
                for (int p = 0; p < n_ctx; p++)
                    w[(size_t)h * w_stride + p] =
                        kv->softcap * tanhf(w[(size_t)h * w_stride + p] / kv->softcap);
            for (int p = 0; kv->window > 0 && p < n_ctx - kv->window; p++)
                w[(size_t)h * w_stride + p] = -INFINITY;
            kern_softmax_avx2(w + (size_t)h * w_stride, n_ctx); /* this file is the AVX2 level */
        }
        float *o = out + (size_t)r * out_stride;
        for (int h = 0, hg; h < n_heads; h += hg) {
            hg = n_heads - h < 3 ? n_heads - h : 3;
            float *oh = o + (size_t)h * head_dim;
            const float *wh = w + (size_t)h * w_stride;
            if (hg == 3)
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 3, nv, f16);
            else if (hg == 2)
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 2, nv, f16);
            else
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 1, nv, f16);
        }
    }
}

/* The head sizes as constants, so the compiler keeps K and the outputs in
 * registers for the common ones. */
AI void attn_rows_dispatch(float *out, size_t out_stride, const float *q, size_t q_stride,
                           int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                           int head_dim, float scale, float *scratch, const int f16, int row_pf) {
    switch (head_dim) {
    case 64:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 8, f16, row_pf);
        break;
    case 128:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 16, f16, row_pf);
        break;
    case 32:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 4, f16, row_pf);
        break;
    default:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, head_dim / 8, f16, row_pf);
        break;
    }
}

void kern_attention_rows_avx2(float *out, size_t out_stride, const float *q, size_t q_stride,
                              int n_rows, int n_heads, int pos0, const kern_kv_view *kv,
                              int kv_head, int head_dim, float scale, float *scratch, int row_pf) {
    if (kv->k16)
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, 1, row_pf);
    else
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, 0, row_pf);
}
