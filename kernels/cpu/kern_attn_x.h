/* kern_attn_x.h - the SIMD attention of kern_attention_rows_gqa's contract,
 * written once for two vector widths. Include from a file compiled with the
 * matching flags after defining
 *   AV, AW            the float vector type and its lanes (__m256, 8 / __m512, 16)
 *   AV_LOADU, AV_STOREU, AV_LOADPH (AW f16 -> f32), AV_MUL, AV_ADD, AV_FMA,
 *   AV_SET1, AV_ZERO, AV_FOLD (to __m256: identity / low + high half),
 *   AV_LOADQ8(p)      AW int8 codes -> f32
 *   AV_LOADQ4(p, hi)  AW q4_0 nibbles (low, or high when hi) of AW bytes -> f32 nibble - 8
 *   AV_CV1, AV_CV3    output vectors per phase-3 chunk for 1 and 2-3 heads
 *   ATT_FN            the name of the function defined
 * (kern_ops_avx2.c: kern_attention_rows_avx2; kern_attn_avx512.c:
 * kern_attention_rows_avx512). Each level's results are its own (a dot is
 * summed over AW lanes, then folded), the same for every split of rows and
 * heads at that level. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/kern_internal.h"

#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif

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

/* The storage a view holds (the compile-time parameter `kind` below). */
enum { ATTN_F32 = 0, ATTN_F16 = 1, ATTN_Q8 = 2, ATTN_Q4 = 3 };

/* Where values of position p, KV head kv_head lie: for the float storages
 * e is their element offset in the view and b is 0; for the quantized ones
 * (kern_ops.h) b is the byte offset of the layer-block and e the index of
 * the first value in it, so the next values of the row are e + 1, ... either
 * way (attn_add). */
typedef struct attn_at {
    size_t b, e;
} attn_at;

static inline attn_at attn_off(const kern_kv_view *kv, int kv_head, int head_dim, int p,
                               const int kind) {
    size_t blk = (size_t)kv->block_table[p / kv->block_size] * kv->block_stride;
    size_t in = (size_t)(p % kv->block_size) * kv->row_stride + (size_t)kv_head * head_dim;
    attn_at a = {kind >= ATTN_Q8 ? blk : 0, kind >= ATTN_Q8 ? in : blk + in};
    return a;
}

static inline attn_at attn_add(attn_at a, size_t n) {
    a.e += n;
    return a;
}

/* AW values of K (is_v = 0) or V from a, as f32: an f16 cache converts with
 * F16C, exactly as kern_fp16_to_fp32; a quantized one multiplies the codes
 * by their group's fp16 scale (exact in f32, as kern_kv_dequantize). The AW
 * values never straddle a 32-value group (a group is 32-aligned in the row,
 * AW divides 16). */
/* The scale of the 32-value group holding value a.e, broadcast. */
AI AV kv_scalev(const kern_kv_view *kv, int is_v, attn_at a) {
    uint16_t sc;
    memcpy(&sc, (is_v ? kv->vq : kv->kq) + a.b + kv->scale_off + 2 * (a.e / KERN_KV_QK), sizeof sc);
    return AV_SET1(_cvtsh_ss(sc));
}

/* AW codes from a.e as f32 integers (q4_0: nibble - 8), unscaled. */
AI AV kv_codesv(const kern_kv_view *kv, int is_v, attn_at a, const int kind) {
    const uint8_t *blk = (is_v ? kv->vq : kv->kq) + a.b;
    if (kind == ATTN_Q8)
        return AV_LOADQ8(blk + a.e);
    const size_t g = a.e / KERN_KV_QK, w = a.e % KERN_KV_QK;
    return AV_LOADQ4(blk + g * (KERN_KV_QK / 2) + w % (KERN_KV_QK / 2), w >= KERN_KV_QK / 2);
}

AI AV kv_loadv(const kern_kv_view *kv, int is_v, attn_at a, const int kind) {
    if (kind == ATTN_F16)
        return AV_LOADPH((is_v ? kv->v16 : kv->k16) + a.e);
    if (kind == ATTN_F32)
        return AV_LOADU((is_v ? kv->v : kv->k) + a.e);
    return AV_MUL(kv_codesv(kv, is_v, a, kind), kv_scalev(kv, is_v, a));
}

/* n vectors of K or V from a, into out: for the quantized kinds each
 * 32-value group's scale is loaded once for its 32 / AW vectors (a starts a
 * group: a row, head or chunk start; n * AW whole groups). The same floats
 * as n kv_loadv. */
AI void kv_loadn(const kern_kv_view *kv, int is_v, attn_at a, int n, const int kind, AV *out) {
    if (kind < ATTN_Q8) {
        for (int i = 0; i < n; i++)
            out[i] = kv_loadv(kv, is_v, attn_add(a, AW * (size_t)i), kind);
        return;
    }
    for (int i = 0; i < n; i += KERN_KV_QK / AW) {
        const AV d = kv_scalev(kv, is_v, attn_add(a, AW * (size_t)i));
        for (int j = i; j < i + KERN_KV_QK / AW && j < n; j++)
            out[j] = AV_MUL(kv_codesv(kv, is_v, attn_add(a, AW * (size_t)j), kind), d);
    }
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

/* The bytes of n values of K or V from a (n and a.e multiples of 32 for the
 * quantized kinds), and for those the line of their first scale. */
AI const char *attn_bytes(const kern_kv_view *kv, int is_v, attn_at a, int n, const int kind,
                          size_t *bytes, const char **scale) {
    *scale = NULL;
    if (kind == ATTN_F16) {
        *bytes = (size_t)n * 2;
        return (const char *)((is_v ? kv->v16 : kv->k16) + a.e);
    }
    if (kind == ATTN_F32) {
        *bytes = (size_t)n * 4;
        return (const char *)((is_v ? kv->v : kv->k) + a.e);
    }
    const char *blk = (const char *)(is_v ? kv->vq : kv->kq) + a.b;
    const size_t bits = kind == ATTN_Q8 ? 8 : 4;
    *bytes = (size_t)n * bits / 8;
    *scale = blk + kv->scale_off + 2 * (a.e / KERN_KV_QK);
    return blk + a.e * bits / 8;
}

/* Prefetches n values of K or V from a. */
AI void attn_prefetch(const kern_kv_view *kv, int is_v, attn_at a, int n, const int kind) {
    size_t bytes;
    const char *s, *p = attn_bytes(kv, is_v, a, n, kind, &bytes, &s);
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch(p + i, ATTN_HINT);
    if (s)
        _mm_prefetch(s, ATTN_HINT);
}

/* The same into L2 only (prefetcht1): the far prefetch of whole rows, which
 * as L1 prefetches would fill the core's few L1 miss buffers (a read of
 * shuffled 16-position blocks of rows on a Zen 4 core: 21.5 GB/s with T1
 * eight positions ahead, 9 GB/s with T0). */
#ifndef ATTN_ROW_PF
#define ATTN_ROW_PF 8
#endif
AI void attn_prefetch_l2(const kern_kv_view *kv, int is_v, attn_at a, int n, const int kind) {
    size_t bytes;
    const char *s, *p = attn_bytes(kv, is_v, a, n, kind, &bytes, &s);
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch(p + i, _MM_HINT_T1);
    if (s)
        _mm_prefetch(s, _MM_HINT_T1);
}

/* q . k over nv vectors with two accumulators (even and odd vectors), so the
 * FMA chain is half as long as with one; returns the lanes that AV_FOLD and
 * att_hsum8 turn into the score. */
AI AV attn_dotv(const float *q, const AV *k, int nv) {
    AV a0 = AV_MUL(AV_LOADU(q), k[0]);
    if (nv == 1)
        return a0;
    AV a1 = AV_MUL(AV_LOADU(q + AW), k[1]);
    for (int i = 2; i < nv; i += 2) {
        a0 = AV_FMA(AV_LOADU(q + AW * i), k[i], a0);
        if (i + 1 < nv)
            a1 = AV_FMA(AV_LOADU(q + AW * i + AW), k[i + 1], a1);
    }
    return AV_ADD(a0, a1);
}

AI float att_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Eight att_hsum8 at once: lane i of the result equals att_hsum8(v[i]) bit for bit,
 * because the same pairs of lanes are added in the same order (j and j + 4,
 * then j and j + 2, then j and j + 1). Pairing v[i] with v[i + 4] in the
 * first step leaves the sums in the order of i. */
AI __m256 att_hsum8x8(const __m256 *v) {
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

/* Row i of the chunk of positions from p (ko0, pf0: the chunk's first row
 * and the row ATTN_PF on when chunked, else found per position): its K
 * offset, after prefetching the row ATTN_PF on (and with row_pf, the whole
 * cache rows ATTN_ROW_PF on into L2). */
AI attn_at attn_chunk_row(const kern_kv_view *kv, int kv_head, int head_dim, int p, int i, int last,
                          const int kind, int chunked, attn_at ko0, attn_at pf0, int row_pf) {
    if (row_pf && p + i + ATTN_ROW_PF <= last) {
        const attn_at ro = attn_off(kv, 0, head_dim, p + i + ATTN_ROW_PF, kind);
        attn_prefetch_l2(kv, 0, ro, row_pf, kind);
        attn_prefetch_l2(kv, 1, ro, row_pf, kind);
    }
    if (p + i + ATTN_PF <= last)
        attn_prefetch(kv, 0,
                      chunked ? attn_add(pf0, (size_t)i * kv->row_stride)
                              : attn_off(kv, kv_head, head_dim, p + i + ATTN_PF, kind),
                      head_dim, kind);
    return chunked ? attn_add(ko0, (size_t)i * kv->row_stride)
                   : attn_off(kv, kv_head, head_dim, p + i, kind);
}

/* Phase 1 for heads [h0, h0 + nh) and rows [r0, r0 + nt): scores times scale
 * into scratch row h * n_rows + r. Row r needs positions [0, pos0 + r]. In a
 * full block of ATTN_PB positions, rows that end inside the block also get
 * the scores past their end: those land inside their own scratch row (the
 * block ends at or before the tile's last position) and are never read. */
AI void attn_scores(const float *q, size_t q_stride, int n_rows, int pos0, const kern_kv_view *kv,
                    int kv_head, int head_dim, float scale, float *scratch, int h0, int nh, int r0,
                    int nt, const int nv, const int kind, int row_pf) {
    /* row_pf > 0: also bring the whole cache rows (row_pf elements from KV
     * head 0, K and V) into L2, ATTN_ROW_PF positions ahead, for the later
     * groups and phase 3 (first tile only). */
    if (h0 || r0)
        row_pf = 0;
    size_t n_ctx_max = (size_t)(pos0 + n_rows);
    int last = pos0 + r0 + nt - 1; /* the tile's longest causal span */
    AV k[KERN_ATTN_MAX_HEAD_DIM / AW];
    AV part[ATTN_TILE * ATTN_HEADS][ATTN_PB];
    __m256 vscale = _mm256_set1_ps(scale);
    int p = 0;
    /* When the cache blocks hold whole chunks of ATTN_PB positions (the
     * default 16 does), a chunk's rows are evenly spaced in one block: one
     * block-table lookup (a division) per chunk instead of two per position. */
    const int chunked = kv->block_size % ATTN_PB == 0;
    for (; p + ATTN_PB <= last + 1; p += ATTN_PB) {
        /* Rows before rfirst end before this block. */
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        const attn_at none = {0, 0};
        const attn_at ko0 = chunked ? attn_off(kv, kv_head, head_dim, p, kind) : none;
        const attn_at pf0 = chunked && p + ATTN_PF <= last
                                ? attn_off(kv, kv_head, head_dim, p + ATTN_PF, kind)
                                : none;
        for (int i = 0; i < ATTN_PB; i++) {
            const attn_at ko =
                attn_chunk_row(kv, kv_head, head_dim, p, i, last, kind, chunked, ko0, pf0, row_pf);
            kv_loadn(kv, 0, ko, nv, kind, k);
            int j = 0;
            for (int r = rfirst; r < r0 + nt; r++)
                for (int h = h0; h < h0 + nh; h++)
                    part[j++][i] =
                        attn_dotv(q + (size_t)r * q_stride + (size_t)h * head_dim, k, nv);
        }
        int j = 0;
        for (int r = rfirst; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++) {
                __m256 f[ATTN_PB];
                for (int i = 0; i < ATTN_PB; i++)
                    f[i] = AV_FOLD(part[j][i]);
                j++;
                _mm256_storeu_ps(scratch + ((size_t)h * n_rows + r) * n_ctx_max + p,
                                 _mm256_mul_ps(att_hsum8x8(f), vscale));
            }
    }
    for (; p <= last; p++) {
        const attn_at ko = attn_off(kv, kv_head, head_dim, p, kind);
        kv_loadn(kv, 0, ko, nv, kind, k);
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        for (int r = rfirst; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++)
                scratch[((size_t)h * n_rows + r) * n_ctx_max + p] =
                    att_hsum8(AV_FOLD(
                        attn_dotv(q + (size_t)r * q_stride + (size_t)h * head_dim, k, nv))) *
                    scale;
    }
}

#ifdef ATT_VNNI
/* ---- integer scores (AVX-512 VNNI, q8_0 and q4_0 K) --------------------------
 * Each (row, head) query of the tile is quantized once to int8 in groups of
 * 32 (kern_kv.h's q8_0 rule, its f32 d kept), so a score is, per 32-value
 * group j, dk_j * dq_j * (an exact integer dot), summed in f32:
 *   vpdpbusd multiplies 4 unsigned K bytes by 4 signed q bytes into each
 *   int32 lane; K's codes are made unsigned (q8_0: k + 128 by xor 0x80;
 *   q4_0: the nibble, value + 8) and each lane starts at -offset times its 4 q
 *   bytes' sum, so a lane ends with the exact integer of its 4 products.
 *   A 64-value chunk is one zmm: q8_0's bytes in value order (lanes 0-7
 *   group A, 8-15 group B); q4_0's 32 bytes as [low nibbles | high nibbles]
 *   (A 0-15, B 0-15, A 16-31, B 16-31), with q stored in that order.
 * The lanes, times dk * dq of their group, then go through the float path's
 * fold and sums (AV_FOLD, att_hsum8x8) in the same order for every split of
 * rows, heads and positions (batch invariance). The quantized q costs
 * accuracy: test_kern_kv states the bound. Heads a multiple of 64. */
typedef struct attn_qi {
    __m512i q[KERN_ATTN_MAX_HEAD_DIM / 64];    /* the codes of each chunk, in K's order */
    __m512i init[KERN_ATTN_MAX_HEAD_DIM / 64]; /* -offset * each lane's 4-byte sum */
    __m512 dq[KERN_ATTN_MAX_HEAD_DIM / 64];    /* each lane's group scale */
} attn_qi;

/* The lanes' groups of a chunk: q8_0 8 A then 8 B; q4_0 4 A, 4 B, 4 A, 4 B. */
static const int32_t attn_qi_grp[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                           {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}};

static void attn_qi_make(attn_qi *o, const float *x, int head_dim, const int kind) {
    const int q4 = kind == ATTN_Q4, off = q4 ? 8 : 128;
    for (int c = 0; c < head_dim / 64; c++) {
        int8_t v[64], lay[64];
        float d[2];
        for (int g = 0; g < 2; g++) {
            const float *xg = x + c * 64 + g * 32;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(xg[i]));
            d[g] = amax / 127.0f;
            const float id = d[g] != 0.0f ? 1.0f / d[g] : 0.0f;
            for (int i = 0; i < 32; i++) {
                const float r = roundf(xg[i] * id);
                v[g * 32 + i] = (int8_t)(r != r        ? 0.0f
                                         : r > 127.0f  ? 127.0f
                                         : r < -127.0f ? -127.0f
                                                       : r);
            }
        }
        for (int b = 0; b < 64; b++) /* q4_0: [A 0-15 | B 0-15 | A 16-31 | B 16-31] */
            lay[b] = q4 ? v[(b / 16) % 2 * 32 + (b / 32) * 16 + b % 16] : v[b];
        int32_t init[16];
        float dl[16];
        for (int l = 0; l < 16; l++) {
            init[l] = -off * (lay[4 * l] + lay[4 * l + 1] + lay[4 * l + 2] + lay[4 * l + 3]);
            dl[l] = d[attn_qi_grp[q4][l]];
        }
        o->q[c] = _mm512_loadu_si512((const void *)lay);
        o->init[c] = _mm512_loadu_si512((const void *)init);
        o->dq[c] = _mm512_loadu_ps(dl);
    }
}

/* The unsigned codes of K's chunk c at a (see above) and its lanes' dk. */
AI __m512i attn_qi_codes(const kern_kv_view *kv, attn_at a, int c, const int kind, __m512 *dk) {
    const uint8_t *blk = kv->kq + a.b;
    const size_t e = a.e + 64 * (size_t)c;
    uint32_t s2;
    memcpy(&s2, blk + kv->scale_off + 2 * (e / KERN_KV_QK), sizeof s2);
    const __m128 d2 = _mm_cvtph_ps(_mm_cvtsi32_si128((int)s2));
    *dk = _mm512_permutexvar_ps(_mm512_loadu_si512((const void *)attn_qi_grp[kind == ATTN_Q4]),
                                _mm512_castps128_ps512(d2));
    if (kind == ATTN_Q8)
        return _mm512_xor_si512(_mm512_loadu_si512((const void *)(blk + e)),
                                _mm512_set1_epi8((char)0x80));
    const __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(blk + e / 2));
    const __m256i m = _mm256_set1_epi8(0x0f);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(y, m)),
                              _mm256_and_si256(_mm256_srli_epi16(y, 4), m), 1);
}

/* One score's lanes: sum over the chunks of dk * dq * (exact integer lanes). */
AI __m512 attn_qi_dot(const attn_qi *qi, const __m512i *kc, const __m512 *dk, const int nc) {
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(qi->init[0], kc[0], qi->q[0])),
                             _mm512_mul_ps(dk[0], qi->dq[0]));
    for (int c = 1; c < nc; c++)
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(qi->init[c], kc[c], qi->q[c])),
                            _mm512_mul_ps(dk[c], qi->dq[c]), s);
    return s;
}

/* Phase 1 with integer scores: attn_scores' walk (chunks of ATTN_PB
 * positions, prefetches, rows that end inside a chunk), each K chunk loaded
 * once for the tile's queries. */
AI void attn_scores_qi(const float *q, size_t q_stride, int n_rows, int pos0,
                       const kern_kv_view *kv, int kv_head, int head_dim, float scale,
                       float *scratch, int h0, int nh, int r0, int nt, const int kind, int row_pf) {
    if (h0 || r0)
        row_pf = 0;
    const int nc = head_dim / 64;
    size_t n_ctx_max = (size_t)(pos0 + n_rows);
    int last = pos0 + r0 + nt - 1;
    attn_qi qi[ATTN_TILE * ATTN_HEADS];
    for (int r = r0, j = 0; r < r0 + nt; r++)
        for (int h = h0; h < h0 + nh; h++)
            attn_qi_make(&qi[j++], q + (size_t)r * q_stride + (size_t)h * head_dim, head_dim, kind);
    __m512i kc[KERN_ATTN_MAX_HEAD_DIM / 64];
    __m512 dk[KERN_ATTN_MAX_HEAD_DIM / 64];
    __m512 part[ATTN_TILE * ATTN_HEADS][ATTN_PB];
    __m256 vscale = _mm256_set1_ps(scale);
    int p = 0;
    const int chunked = kv->block_size % ATTN_PB == 0;
    for (; p + ATTN_PB <= last + 1; p += ATTN_PB) {
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        const attn_at none = {0, 0};
        const attn_at ko0 = chunked ? attn_off(kv, kv_head, head_dim, p, kind) : none;
        const attn_at pf0 = chunked && p + ATTN_PF <= last
                                ? attn_off(kv, kv_head, head_dim, p + ATTN_PF, kind)
                                : none;
        for (int i = 0; i < ATTN_PB; i++) {
            const attn_at ko =
                attn_chunk_row(kv, kv_head, head_dim, p, i, last, kind, chunked, ko0, pf0, row_pf);
            for (int c = 0; c < nc; c++)
                kc[c] = attn_qi_codes(kv, ko, c, kind, &dk[c]);
            /* Rows before rfirst end before this chunk: their lanes are
             * skipped, as in attn_scores. */
            for (int r = rfirst, j = (rfirst - r0) * nh; r < r0 + nt; r++)
                for (int h = 0; h < nh; h++, j++)
                    part[j][i] = attn_qi_dot(&qi[j], kc, dk, nc);
        }
        for (int r = rfirst, j = (rfirst - r0) * nh; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++, j++) {
                __m256 f[ATTN_PB];
                for (int i = 0; i < ATTN_PB; i++)
                    f[i] = AV_FOLD(part[j][i]);
                _mm256_storeu_ps(scratch + ((size_t)h * n_rows + r) * n_ctx_max + p,
                                 _mm256_mul_ps(att_hsum8x8(f), vscale));
            }
    }
    for (; p <= last; p++) {
        const attn_at ko = attn_off(kv, kv_head, head_dim, p, kind);
        for (int c = 0; c < nc; c++)
            kc[c] = attn_qi_codes(kv, ko, c, kind, &dk[c]);
        int rfirst = p - pos0 > r0 ? p - pos0 : r0;
        for (int r = rfirst, j = (rfirst - r0) * nh; r < r0 + nt; r++)
            for (int h = h0; h < h0 + nh; h++, j++)
                scratch[((size_t)h * n_rows + r) * n_ctx_max + p] =
                    att_hsum8(AV_FOLD(attn_qi_dot(&qi[j], kc, dk, nc))) * scale;
    }
}
#endif

/* Phase 3 for hg (<= 3) heads of one row, output vectors [c0, c0 + cv) of
 * each: head h's weights are w[h * w_stride + p], its output starts at
 * o + h * head_dim. Each lane is acc = fma(weight_p, v_p, acc) over p in
 * order from zero, as for one head alone; sharing a V load between heads
 * and splitting head_dim into chunks changes no lane's sequence. Positions
 * are walked block by block of the paged view, without a division each. */
AI void attn_values(float *o, const float *w, size_t w_stride, int n_ctx, const kern_kv_view *kv,
                    int kv_head, int head_dim, int c0, const int hg, const int cv, const int kind) {
    AV acc[3][AV_CV1];
    for (int h = 0; h < hg; h++)
        for (int i = 0; i < cv; i++)
            acc[h][i] = AV_ZERO();
    for (int b0 = 0, n; b0 < n_ctx; b0 += n) {
        n = n_ctx - b0 < kv->block_size ? n_ctx - b0 : kv->block_size;
        const attn_at vb = attn_add(attn_off(kv, kv_head, head_dim, b0, kind), AW * (size_t)c0);
        /* the rows ATTN_PF ahead may lie in the next block */
        const int has_next = b0 + n < n_ctx;
        const attn_at none = {0, 0};
        const attn_at vnext =
            has_next ? attn_add(attn_off(kv, kv_head, head_dim, b0 + n, kind), AW * (size_t)c0)
                     : none;
        const float *wb = w + b0;
        for (int p = 0; p < n; p++) {
            const attn_at vp = attn_add(vb, (size_t)p * kv->row_stride);
            if (p + ATTN_PF < n)
                attn_prefetch(kv, 1, attn_add(vp, (size_t)ATTN_PF * kv->row_stride), AW * cv, kind);
            else if (has_next && p + ATTN_PF - n < n_ctx - b0 - n &&
                     p + ATTN_PF - n < kv->block_size)
                attn_prefetch(kv, 1, attn_add(vnext, (size_t)(p + ATTN_PF - n) * kv->row_stride),
                              AW * cv, kind);
            AV wp[3];
            for (int h = 0; h < hg; h++)
                wp[h] = AV_SET1(wb[(size_t)h * w_stride + p]);
            AV d = AV_ZERO();
            for (int i = 0; i < cv; i++) {
                /* A quantized group's scale once for its vectors (a chunk
                 * starts a group: c0 * AW is a multiple of 32). */
                AV v;
                if (kind >= ATTN_Q8) {
                    if (i % (KERN_KV_QK / AW) == 0)
                        d = kv_scalev(kv, 1, attn_add(vp, AW * (size_t)i));
                    v = AV_MUL(kv_codesv(kv, 1, attn_add(vp, AW * (size_t)i), kind), d);
                } else {
                    v = kv_loadv(kv, 1, attn_add(vp, AW * (size_t)i), kind);
                }
                for (int h = 0; h < hg; h++)
                    acc[h][i] = AV_FMA(wp[h], v, acc[h][i]);
            }
        }
    }
    for (int h = 0; h < hg; h++)
        for (int i = 0; i < cv; i++)
            AV_STOREU(o + (size_t)h * head_dim + AW * (c0 + i), acc[h][i]);
}

/* Phase 3 over all of head_dim in chunks that keep hg x cv accumulators,
 * the hg weights and one V vector within the vector registers (16 ymm: cv
 * 8 or 4; 32 zmm: 16 or 8). */
AI void attn_values_heads(float *o, const float *w, size_t w_stride, int n_ctx,
                          const kern_kv_view *kv, int kv_head, int head_dim, const int hg,
                          const int nv, const int kind) {
    const int cv = hg == 1 ? AV_CV1 : AV_CV3;
    int c0 = 0;
    for (; c0 + cv <= nv; c0 += cv)
        attn_values(o, w, w_stride, n_ctx, kv, kv_head, head_dim, c0, hg, cv, kind);
    if (c0 < nv)
        attn_values(o, w, w_stride, n_ctx, kv, kv_head, head_dim, c0, hg, nv - c0, kind);
}

AI void attn_rows_nv(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows,
                     int n_heads, int pos0, const kern_kv_view *kv, int kv_head, int head_dim,
                     float scale, float *scratch, const int nv, const int kind, int row_pf) {
    size_t n_ctx_max = (size_t)(pos0 + n_rows);
    size_t w_stride = (size_t)n_rows * n_ctx_max; /* floats between heads in scratch */
    /* Phase 1: scores, a tile of heads x rows at a time. */
    for (int h0 = 0; h0 < n_heads; h0 += ATTN_HEADS) {
        int nh = n_heads - h0 < ATTN_HEADS ? n_heads - h0 : ATTN_HEADS;
        for (int r0 = 0; r0 < n_rows; r0 += ATTN_TILE) {
            int nt = n_rows - r0 < ATTN_TILE ? n_rows - r0 : ATTN_TILE;
#ifdef ATT_VNNI
            if (kind >= ATTN_Q8) { /* kern_ops.c's attn_pick: heads a multiple of 64 */
                attn_scores_qi(q, q_stride, n_rows, pos0, kv, kv_head, head_dim, scale, scratch, h0,
                               nh, r0, nt, kind, row_pf);
                continue;
            }
#endif
            attn_scores(q, q_stride, n_rows, pos0, kv, kv_head, head_dim, scale, scratch, h0, nh,
                        r0, nt, nv, kind, row_pf);
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
            kern_softmax_avx2(w + (size_t)h * w_stride, n_ctx); /* AVX2 at both levels */
            /* The vector exp leaves ~1e-38 for -inf: exactly zero instead, so
             * rows the KV cache released behind the window (its zero block)
             * give the same bits as the rows they replace. */
            for (int p = 0; kv->window > 0 && p < n_ctx - kv->window; p++)
                w[(size_t)h * w_stride + p] = 0.0f;
        }
        float *o = out + (size_t)r * out_stride;
        for (int h = 0, hg; h < n_heads; h += hg) {
            hg = n_heads - h < 3 ? n_heads - h : 3;
            float *oh = o + (size_t)h * head_dim;
            const float *wh = w + (size_t)h * w_stride;
            if (hg == 3)
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 3, nv, kind);
            else if (hg == 2)
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 2, nv, kind);
            else
                attn_values_heads(oh, wh, w_stride, n_ctx, kv, kv_head, head_dim, 1, nv, kind);
        }
    }
}

/* The head sizes as constants, so the compiler keeps K and the outputs in
 * registers for the common ones. */
AI void attn_rows_dispatch(float *out, size_t out_stride, const float *q, size_t q_stride,
                           int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                           int head_dim, float scale, float *scratch, const int kind, int row_pf) {
    switch (head_dim) {
    case 64:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 64 / AW, kind, row_pf);
        break;
    case 128:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 128 / AW, kind, row_pf);
        break;
    case 256:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, 256 / AW, kind, row_pf);
        break;
    default:
        attn_rows_nv(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                     scale, scratch, head_dim / AW, kind, row_pf);
        break;
    }
}

void ATT_FN(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows, int n_heads,
            int pos0, const kern_kv_view *kv, int kv_head, int head_dim, float scale,
            float *scratch, int row_pf) {
    /* kern_ops.c's attn_pick sends only the dtypes below (the VNNI file
     * only q8_0 and q4_0, whose scores it computes in integers). */
#ifdef ATT_VNNI
    if (kv->dtype == KERN_KV_Q8_0)
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_Q8, row_pf);
    else
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_Q4, row_pf);
#else
    if (kv->kq && kv->dtype == KERN_KV_Q8_0)
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_Q8, row_pf);
    else if (kv->kq)
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_Q4, row_pf);
    else if (kv->k16)
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_F16, row_pf);
    else
        attn_rows_dispatch(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head,
                           head_dim, scale, scratch, ATTN_F32, row_pf);
#endif
}
