/* kern_ops.c - row ops: references, dispatch to the AVX2 versions, RoPE and
 * attention over the paged KV view.
 *
 * The references accumulate sums in double so they are the more accurate
 * side of every comparison; the fast paths accumulate in f32 lanes. AVX-512
 * machines use the AVX2 row ops: they are a few percent of a decode step and
 * not worth a third untested-here variant. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_ops.h"

/* ---- f32 -> f16 rows --------------------------------------------------------- */

void kern_fp32_to_fp16_row(uint16_t *dst, const float *src, int n) {
    if (kern_cpu_level() >= KERN_LEVEL_AVX2) {
        kern_fp32_to_fp16_row_avx2(dst, src, n);
        return;
    }
    for (int i = 0; i < n; i++)
        dst[i] = kern_fp32_to_fp16(src[i]);
}

/* ---- RMSNorm -------------------------------------------------------------- */

void kern_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void kern_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    if (kern_cpu_level() >= KERN_LEVEL_AVX2)
        kern_rmsnorm_avx2(out, x, w, n, eps);
    else
        kern_rmsnorm_ref(out, x, w, n, eps);
}

/* ---- SiLU gate -------------------------------------------------------------- */

void kern_silu_mul_ref(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kern_gelu_tanh_mul_ref(float *out, const float *gate, const float *up, int n) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        out[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * up[i];
    }
}

void kern_gelu_tanh_mul(float *out, const float *gate, const float *up, int n) {
    if (kern_cpu_level() >= KERN_LEVEL_AVX2)
        kern_gelu_tanh_mul_avx2(out, gate, up, n);
    else
        kern_gelu_tanh_mul_ref(out, gate, up, n);
}

void kern_silu_mul(float *out, const float *gate, const float *up, int n) {
    if (kern_cpu_level() >= KERN_LEVEL_AVX2)
        kern_silu_mul_avx2(out, gate, up, n);
    else
        kern_silu_mul_ref(out, gate, up, n);
}

/* ---- softmax ------------------------------------------------------------------ */

void kern_softmax_ref(float *x, int n) {
    if (n <= 0)
        return;
    float max = x[0];
    for (int i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void kern_softmax(float *x, int n) {
    if (kern_cpu_level() >= KERN_LEVEL_AVX2)
        kern_softmax_avx2(x, n);
    else
        kern_softmax_ref(x, n);
}

/* ---- RoPE ------------------------------------------------------------------------
 * Angles are computed in double (pos * theta_i reaches ~1e4 rad, where a
 * float angle would already be off by ~1e-3) and their cos/sin rounded to
 * float. A decode step rotates q and k of every layer at the same position,
 * so the last table is cached per thread: one sin/cos pass per position
 * instead of 2 * n_layer. */

#define ROPE_CACHE_PAIRS 512 /* n_rot/2 up to 512: head_dim 1024 */

typedef struct {
    int valid, pos, n_rot;
    float base, freq_scale;
    float ff[ROPE_CACHE_PAIRS]; /* freq_factors copy (1 when NULL) */
    float cs[ROPE_CACHE_PAIRS], sn[ROPE_CACHE_PAIRS];
} rope_cache;

static _Thread_local rope_cache g_rope;

/* base^(-2i/n_rot) of the last (n_rot, base), per thread: a prompt rotates
 * every position once per layer, so the positions change at every call but
 * the frequencies do not (Gemma 3 alternates two bases: two entries). The
 * same pow() values, so the same angles as computing them each time. */
typedef struct {
    int n_rot;
    float base;
    double p[ROPE_CACHE_PAIRS];
} rope_freqs;

static _Thread_local rope_freqs g_freqs[2];
static _Thread_local int g_freqs_next;

static const double *rope_freqs_get(int n_rot, float base) {
    for (int k = 0; k < 2; k++)
        if (g_freqs[k].n_rot == n_rot && g_freqs[k].base == base)
            return g_freqs[k].p;
    rope_freqs *f = &g_freqs[g_freqs_next];
    g_freqs_next ^= 1;
    for (int i = 0; i < n_rot / 2; i++)
        f->p[i] = pow((double)base, -2.0 * i / n_rot);
    f->n_rot = n_rot;
    f->base = base;
    return f->p;
}

static void rope_angles(int pos, int n_rot, float base, float freq_scale, const float *ff,
                        float *cs, float *sn) {
    const double *p = rope_freqs_get(n_rot, base);
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * freq_scale * p[i];
        if (ff)
            theta /= ff[i];
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

static int rope_cache_hit(const rope_cache *c, int pos, int n_rot, float base, float freq_scale,
                          const float *ff) {
    if (!c->valid || c->pos != pos || c->n_rot != n_rot || c->base != base ||
        c->freq_scale != freq_scale)
        return 0;
    for (int i = 0; i < n_rot / 2; i++)
        if (c->ff[i] != (ff ? ff[i] : 1.0f))
            return 0;
    return 1;
}

static void rope_apply(float *x, int n_heads, int head_dim, int n_rot, const float *cs,
                       const float *sn, kern_rope_mode mode) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int i0 = mode == KERN_ROPE_ADJACENT ? 2 * i : i;
            int i1 = mode == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + half;
            float a = v[i0], b = v[i1];
            v[i0] = a * cs[i] - b * sn[i];
            v[i1] = a * sn[i] + b * cs[i];
        }
    }
}

void kern_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, float base,
               float freq_scale, const float *freq_factors, kern_rope_mode mode) {
    if (n_rot > head_dim)
        n_rot = head_dim;
    if (n_rot / 2 > ROPE_CACHE_PAIRS) { /* no model has this; stay correct anyway */
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int i = 0; i < n_rot / 2; i++) {
                double theta = (double)pos * freq_scale * pow((double)base, -2.0 * i / n_rot);
                if (freq_factors)
                    theta /= freq_factors[i];
                float c = (float)cos(theta), s = (float)sin(theta);
                int i0 = mode == KERN_ROPE_ADJACENT ? 2 * i : i;
                int i1 = mode == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + n_rot / 2;
                float a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = a * s + b * c;
            }
        }
        return;
    }
    rope_cache *c = &g_rope;
    if (!rope_cache_hit(c, pos, n_rot, base, freq_scale, freq_factors)) {
        rope_angles(pos, n_rot, base, freq_scale, freq_factors, c->cs, c->sn);
        for (int i = 0; i < n_rot / 2; i++)
            c->ff[i] = freq_factors ? freq_factors[i] : 1.0f;
        c->pos = pos;
        c->n_rot = n_rot;
        c->base = base;
        c->freq_scale = freq_scale;
        c->valid = 1;
    }
    rope_apply(x, n_heads, head_dim, n_rot, c->cs, c->sn, mode);
}

/* ---- attention ---------------------------------------------------------------- */

/* Element offset of position p, KV head kv_head, in the view's K or V
 * (the float storages). */
static inline size_t kv_off(const kern_kv_view *kv, int kv_head, int head_dim, int p) {
    return (size_t)kv->block_table[p / kv->block_size] * kv->block_stride +
           (size_t)(p % kv->block_size) * kv->row_stride + (size_t)kv_head * head_dim;
}

/* Value d of position p, KV head kv_head, of K (is_v = 0) or V as f32, from
 * an f32, f16 or quantized view (kern_ops.h: scale times code). */
static inline float kv_value(const kern_kv_view *kv, int is_v, int kv_head, int head_dim, int p,
                             int d) {
    if (!kv->kq) {
        size_t i = kv_off(kv, kv_head, head_dim, p) + (size_t)d;
        if (kv->k16)
            return kern_fp16_to_fp32((is_v ? kv->v16 : kv->k16)[i]);
        return (is_v ? kv->v : kv->k)[i];
    }
    const uint8_t *blk =
        (is_v ? kv->vq : kv->kq) + (size_t)kv->block_table[p / kv->block_size] * kv->block_stride;
    size_t e = (size_t)(p % kv->block_size) * kv->row_stride + (size_t)kv_head * head_dim + d;
    uint16_t sc;
    memcpy(&sc, blk + kv->scale_off + 2 * (e / (size_t)kern_kv_group(kv->dtype, head_dim)), 2);
    return kern_fp16_to_fp32(sc) * kern_kv_code_value(kv->dtype, blk, (int)e);
}

void kern_kv_store(const kern_kv_view *kv, int pos, const float *k, const float *v, int kv_dim,
                   int head_dim) {
    size_t blk = (size_t)kv->block_table[pos / kv->block_size] * kv->block_stride;
    size_t r = (size_t)(pos % kv->block_size);
    if (kv->kq) { /* the row's codes and its scales, nothing else of the block */
        const kern_kv_traits *tr = kern_kv_traits_of((int)kv->dtype);
        int group = kern_kv_group(kv->dtype, head_dim);
        size_t codes = blk + r * kv->row_stride * tr->bits / 8;
        size_t scales = blk + kv->scale_off + r * (kv->row_stride / (size_t)group) * 2;
        kern_kv_quantize(kv->dtype, k, kv_dim, group, kv->kq + codes,
                         (uint16_t *)(void *)(kv->kq + scales));
        kern_kv_quantize(kv->dtype, v, kv_dim, group, kv->vq + codes,
                         (uint16_t *)(void *)(kv->vq + scales));
    } else if (kv->k16) { /* round to nearest even, as F16C does */
        kern_fp32_to_fp16_row(kv->k16 + blk + r * kv->row_stride, k, kv_dim);
        kern_fp32_to_fp16_row(kv->v16 + blk + r * kv->row_stride, v, kv_dim);
    } else {
        memcpy(kv->k + blk + r * kv->row_stride, k, (size_t)kv_dim * sizeof(float));
        memcpy(kv->v + blk + r * kv->row_stride, v, (size_t)kv_dim * sizeof(float));
    }
}

void kern_attention_head_ref(float *out, const float *q, const kern_kv_view *kv, int kv_head,
                             int n_ctx, int head_dim, float scale, float *scratch) {
    for (int p = 0; p < n_ctx; p++) {
        double s = 0.0;
        for (int d = 0; d < head_dim; d++)
            s += (double)q[d] * kv_value(kv, 0, kv_head, head_dim, p, d);
        scratch[p] = (float)s * scale;
        if (kv->softcap > 0.0f)
            scratch[p] = kv->softcap * tanhf(scratch[p] / kv->softcap);
    }
    for (int p = 0; kv->window > 0 && p < n_ctx - kv->window; p++)
        scratch[p] = -INFINITY; /* outside the sliding window */
    kern_softmax_ref(scratch, n_ctx);
    for (int d = 0; d < head_dim; d++) {
        double acc = 0.0;
        for (int p = 0; p < n_ctx; p++)
            acc += (double)scratch[p] * kv_value(kv, 1, kv_head, head_dim, p, d);
        out[d] = (float)acc;
    }
}

/* Portable path of kern_attention_rows_gqa: the same three phases as the
 * AVX2 one (scores, softmax, weighted V sum), one (row, head) at a time in
 * plain C. */
static void attention_rows_c(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                             int head_dim, float scale, float *scratch) {
    int n_ctx_max = pos0 + n_rows;
    for (int h = 0; h < n_heads; h++)
        for (int r = 0; r < n_rows; r++) {
            const float *qr = q + (size_t)r * q_stride + (size_t)h * head_dim;
            float *sr = scratch + ((size_t)h * n_rows + r) * n_ctx_max;
            int n_ctx = pos0 + r + 1;
            for (int p = 0; p < n_ctx; p++) {
                float s = 0.0f;
                for (int d = 0; d < head_dim; d++)
                    s += qr[d] * kv_value(kv, 0, kv_head, head_dim, p, d);
                sr[p] = s * scale;
                if (kv->softcap > 0.0f)
                    sr[p] = kv->softcap * tanhf(sr[p] / kv->softcap);
            }
            for (int p = 0; kv->window > 0 && p < n_ctx - kv->window; p++)
                sr[p] = -INFINITY; /* outside the sliding window */
            kern_softmax(sr, n_ctx);
            for (int p = 0; kv->window > 0 && p < n_ctx - kv->window; p++)
                sr[p] = 0.0f; /* exactly (see kern_attn_x.h) */
            float *o = out + (size_t)r * out_stride + (size_t)h * head_dim;
            memset(o, 0, (size_t)head_dim * sizeof(float));
            for (int p = 0; p < n_ctx; p++)
                for (int d = 0; d < head_dim; d++)
                    o[d] += sr[p] * kv_value(kv, 1, kv_head, head_dim, p, d);
        }
}

typedef void (*attn_rows_fn)(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                             int head_dim, float scale, float *scratch, int row_pf);

/* The SIMD attention for this level, head size and storage (one choice for
 * every batch size: decode and prompt rows get the same bits), or NULL for
 * the portable path: a head size the templates do not take, or a dtype the
 * SIMD kernels do not read (int8 and fp8 are CUDA's; the portable path reads
 * them for the tests' references). */
static attn_rows_fn attn_pick_kv(int head_dim, const kern_kv_view *kv) {
    if (head_dim > KERN_ATTN_MAX_HEAD_DIM || head_dim % 8 != 0)
        return NULL;
    if (kv && kv->kq &&
        ((kv->dtype != KERN_KV_Q8_0 && kv->dtype != KERN_KV_Q4_0) || head_dim % KERN_KV_QK != 0))
        return NULL;
    const kern_level lv = kern_cpu_level();
    /* q8_0 and q4_0 with integer scores where VNNI has vpdpbusd. */
    if (kv && kv->kq && lv >= KERN_LEVEL_AVX512VNNI && head_dim % 64 == 0)
        return kern_attention_rows_avx512vnni;
    if (lv >= KERN_LEVEL_AVX512 && head_dim % 16 == 0)
        return kern_attention_rows_avx512;
    return lv >= KERN_LEVEL_AVX2 ? kern_attention_rows_avx2 : NULL;
}

static attn_rows_fn attn_pick(int head_dim) {
    return attn_pick_kv(head_dim, NULL);
}

const char *kern_attention_level_name(int head_dim) {
    const attn_rows_fn f = attn_pick(head_dim);
    return f == kern_attention_rows_avx512 ? "avx512" : f ? "avx2" : "scalar";
}

const char *kern_attention_level_name_kv(int head_dim, kern_kv_dtype dtype) {
    if (!kern_kv_traits_of((int)dtype)->cpu)
        return "unsupported";
    kern_kv_view v = {0};
    uint8_t one = 0;
    v.kq = kern_kv_is_quant(dtype) ? &one : NULL;
    v.dtype = dtype;
    const attn_rows_fn f = attn_pick_kv(head_dim, &v);
    return f == kern_attention_rows_avx512vnni ? "avx512vnni"
           : f == kern_attention_rows_avx512   ? "avx512"
           : f                                 ? "avx2"
                                               : "scalar";
}

void kern_attention_rows_gqa(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int pos0, const kern_kv_view *kv, int kv_head,
                             int head_dim, float scale, float *scratch) {
    const attn_rows_fn simd = attn_pick_kv(head_dim, kv);
    if (simd)
        simd(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim, scale,
             scratch, 0);
    else
        attention_rows_c(out, out_stride, q, q_stride, n_rows, n_heads, pos0, kv, kv_head, head_dim,
                         scale, scratch);
}

void kern_attention_rows_all(float *out, size_t out_stride, const float *q, size_t q_stride,
                             int n_rows, int n_heads, int n_kv_heads, int pos0,
                             const kern_kv_view *kv, int head_dim, float scale, float *scratch) {
    const int group = n_heads / n_kv_heads;
    const attn_rows_fn simd = attn_pick_kv(head_dim, kv);
    for (int g = 0; g < n_kv_heads; g++) {
        const size_t off = (size_t)g * group * head_dim;
        if (simd)
            simd(out + off, out_stride, q + off, q_stride, n_rows, group, pos0, kv, g, head_dim,
                 scale, scratch, g == 0 && n_kv_heads > 1 ? n_kv_heads * head_dim : 0);
        else
            attention_rows_c(out + off, out_stride, q + off, q_stride, n_rows, group, pos0, kv, g,
                             head_dim, scale, scratch);
    }
}

void kern_attention_rows(float *out, size_t out_stride, const float *q, size_t q_stride, int n_rows,
                         int pos0, const kern_kv_view *kv, int kv_head, int head_dim, float scale,
                         float *scratch) {
    kern_attention_rows_gqa(out, out_stride, q, q_stride, n_rows, 1, pos0, kv, kv_head, head_dim,
                            scale, scratch);
}

void kern_attention_head(float *out, const float *q, const kern_kv_view *kv, int kv_head, int n_ctx,
                         int head_dim, float scale, float *scratch) {
    kern_attention_rows(out, 0, q, 0, 1, n_ctx - 1, kv, kv_head, head_dim, scale, scratch);
}
