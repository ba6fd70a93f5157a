/* test_kern_ops.c - row ops at every level vs their references, exp error,
 * RoPE vs a direct float64 formula, attention over a paged KV view.
 *
 * Tolerances (normalised error ||y - ref|| / ||ref|| unless stated):
 *   rmsnorm 1e-6 (f32 lane sums vs a double sum of squares);
 *   exp max relative error 1e-6 vs libm double; silu_mul and softmax 2e-6
 *   (that exp error plus one division/multiply); gelu_tanh_mul 2e-6 (the
 *   same exp and division; the reference's 1 + tanhf(z) loses digits for
 *   z << 0, where the values are ~1e-7 of the row's norm);
 *   rope 1e-6 absolute per element vs float64 (cos/sin rounded to float,
 *   then two f32 products and a sum of values ~N(0,1));
 *   attention 1e-5 (f32 dot products over head_dim and f32 softmax). */
#include <string.h>

#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_ops.h"
#include "test_kern_util.h"

static void test_exp(kern_level top) {
    if (top < KERN_LEVEL_AVX2) {
        printf("skip avx2 exp: not supported by this CPU\n");
        return;
    }
    enum { N = 100003 }; /* odd: exercises the masked tail */
    static float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = -87.0f + 175.0f * (float)i / (N - 1);
    kern_exp_avx2(y, x, N);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double e = exp((double)x[i]);
        double r = fabs(y[i] - e) / e;
        worst = r > worst ? r : worst;
    }
    printf("exp avx2: max relative error %.2e over [-87, 88]\n", worst);
    CHECK(worst <= 1e-6, "exp relative error %g > 1e-6", worst);
}

static void test_rows(kern_level top) {
    const int ns[] = {1, 7, 8, 9, 64, 576, 1536, 1539};
    enum { NMAX = 1539 };
    static float x[NMAX], w[NMAX], g[NMAX], u[NMAX], a[NMAX], b[NMAX];
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        double e_rms = 0, e_silu = 0, e_gelu = 0, e_soft = 0;
        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
            int n = ns[k];
            fill_normal(x, n, 1.0f);
            fill_normal(w, n, 1.0f);
            fill_normal(g, n, 3.0f);
            fill_normal(u, n, 1.0f);
            g[0] = -100.0f; /* far tails of silu: exp(100) clamps, result ~0 */
            if (n > 1)
                g[1] = 95.0f;
            kern_rmsnorm(a, x, w, n, 1e-5f);
            kern_rmsnorm_ref(b, x, w, n, 1e-5f);
            double e = norm_err(a, b, n);
            e_rms = e > e_rms ? e : e_rms;
            memcpy(a, x, sizeof(float) * n); /* in place (out aliases x) */
            kern_rmsnorm(a, a, w, n, 1e-5f);
            e = norm_err(a, b, n);
            e_rms = e > e_rms ? e : e_rms;

            kern_silu_mul(a, g, u, n);
            kern_silu_mul_ref(b, g, u, n);
            e = norm_err(a, b, n);
            e_silu = e > e_silu ? e : e_silu;

            kern_gelu_tanh_mul(a, g, u, n);
            kern_gelu_tanh_mul_ref(b, g, u, n);
            e = norm_err(a, b, n);
            e_gelu = e > e_gelu ? e : e_gelu;
            memcpy(a, g, sizeof(float) * n); /* in place (out aliases gate) */
            kern_gelu_tanh_mul(a, a, u, n);
            e = norm_err(a, b, n);
            e_gelu = e > e_gelu ? e : e_gelu;

            for (int i = 0; i < n; i++)
                a[i] = b[i] = x[i] * 10.0f;
            kern_softmax(a, n);
            kern_softmax_ref(b, n);
            e = norm_err(a, b, n);
            e_soft = e > e_soft ? e : e_soft;
            double sum = 0;
            for (int i = 0; i < n; i++)
                sum += a[i];
            CHECK(fabs(sum - 1.0) < 1e-5, "softmax sums to %g", sum);
        }
        printf("level %-6s rmsnorm %.1e silu_mul %.1e gelu_tanh_mul %.1e softmax %.1e\n",
               kern_level_name((kern_level)lv), e_rms, e_silu, e_gelu, e_soft);
        CHECK(e_rms <= 1e-6, "rmsnorm err %g", e_rms);
        CHECK(e_silu <= 2e-6, "silu_mul err %g", e_silu);
        CHECK(e_gelu <= 2e-6, "gelu_tanh_mul err %g", e_gelu);
        CHECK(e_soft <= 2e-6, "softmax err %g", e_soft);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

static void test_rope(void) {
    const int n_heads = 3, head_dim = 64;
    enum { D = 3 * 64 };
    static float x[D], y[D], ff[32];
    const int positions[] = {0, 1, 17, 1000, 8191, 32767};
    for (int i = 0; i < 32; i++)
        ff[i] = 1.0f + (float)i / 8.0f;
    double worst = 0, worst_norm = 0;
    for (int mode = 0; mode < 2; mode++)
        for (int n_rot_i = 0; n_rot_i < 2; n_rot_i++)
            for (int sc = 0; sc < 2; sc++)
                for (int use_ff = 0; use_ff < 2; use_ff++)
                    for (size_t pi = 0; pi < sizeof(positions) / sizeof(positions[0]); pi++) {
                        int n_rot =
                            n_rot_i ? 32 : 64; /* partial rotation leaves dims >= n_rot alone */
                        float fs = sc ? 0.25f : 1.0f, base = 10000.0f;
                        int pos = positions[pi];
                        fill_normal(x, D, 1.0f);
                        memcpy(y, x, sizeof(x));
                        const float *f = use_ff ? ff : NULL;
                        kern_rope(y, n_heads, head_dim, n_rot, pos, base, fs, f,
                                  (kern_rope_mode)mode);
                        for (int h = 0; h < n_heads; h++) {
                            const float *xi = x + h * head_dim;
                            const float *yo = y + h * head_dim;
                            double n0 = 0, n1 = 0;
                            for (int i = 0; i < n_rot / 2; i++) {
                                double th = pos * (double)fs * pow(base, -2.0 * i / n_rot) /
                                            (f ? f[i] : 1.0);
                                int i0 = mode == KERN_ROPE_ADJACENT ? 2 * i : i;
                                int i1 = mode == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + n_rot / 2;
                                double r0 = xi[i0] * cos(th) - xi[i1] * sin(th);
                                double r1 = xi[i0] * sin(th) + xi[i1] * cos(th);
                                double e = fmax(fabs(r0 - yo[i0]), fabs(r1 - yo[i1]));
                                worst = e > worst ? e : worst;
                            }
                            for (int i = 0; i < n_rot; i++) {
                                n0 += (double)xi[i] * xi[i];
                                n1 += (double)yo[i] * yo[i];
                            }
                            double rel = fabs(sqrt(n1) - sqrt(n0)) / sqrt(n0);
                            worst_norm = rel > worst_norm ? rel : worst_norm;
                            for (int i = n_rot; i < head_dim; i++)
                                CHECK(xi[i] == yo[i], "rope touched dim %d >= n_rot %d", i, n_rot);
                        }
                    }
    printf("rope: max abs error vs float64 %.1e, max relative norm change %.1e\n", worst,
           worst_norm);
    CHECK(worst <= 1e-6, "rope error %g", worst);
    CHECK(worst_norm <= 1e-6, "rope norm change %g", worst_norm);
}

/* Paged (block_size 16, shuffled block table, padded row stride) and
 * contiguous caches holding the same K/V must give identical outputs. */
static void test_attention(kern_level top) {
    const int n_kv_head = 2, block_size = 16;
    const int head_dims[] = {64, 8, 12, 5};
    const int ctxs[] = {1, 15, 16, 17, 100};
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        double worst = 0;
        int diffs = 0;
        for (size_t hi = 0; hi < 4; hi++)
            for (size_t ci = 0; ci < 5; ci++) {
                int hd = head_dims[hi], n_ctx = ctxs[ci];
                int n_blocks = (n_ctx + block_size - 1) / block_size;
                size_t row = (size_t)n_kv_head * hd;
                size_t prow = row + 3; /* padded stride */
                float *kc = malloc(sizeof(float) * row * n_ctx),
                      *vc = malloc(sizeof(float) * row * n_ctx);
                fill_normal(kc, row * n_ctx, 1.0f);
                fill_normal(vc, row * n_ctx, 1.0f);
                /* Physical blocks in a shuffled order, one spare block. */
                int32_t table[16];
                int phys = n_blocks + 1;
                for (int i = 0; i < n_blocks; i++)
                    table[i] = (i * 5 + 3) % phys;
                float *kp = calloc((size_t)phys * block_size * prow, sizeof(float));
                float *vp = calloc((size_t)phys * block_size * prow, sizeof(float));
                for (int p = 0; p < n_ctx; p++) {
                    size_t off = (size_t)table[p / block_size] * block_size * prow +
                                 (size_t)(p % block_size) * prow;
                    memcpy(kp + off, kc + p * row, sizeof(float) * row);
                    memcpy(vp + off, vc + p * row, sizeof(float) * row);
                }
                int32_t zero = 0;
                kern_kv_view contig = {kc,   vc, &zero, 1 << 30, 0,    row,         NULL,
                                       NULL, 0,  0.0f,  NULL,    NULL, KERN_KV_F32, 0};
                kern_kv_view paged = {
                    kp,   vp,   table,       block_size, (size_t)block_size * prow,
                    prow, NULL, NULL,        0,          0.0f,
                    NULL, NULL, KERN_KV_F32, 0};
                float q[64], o1[64], o2[64], oref[64], scratch[128];
                fill_normal(q, hd, 1.0f);
                float scale = 1.0f / sqrtf((float)hd);
                for (int g = 0; g < n_kv_head; g++) {
                    kern_attention_head(o1, q, &contig, g, n_ctx, hd, scale, scratch);
                    kern_attention_head(o2, q, &paged, g, n_ctx, hd, scale, scratch);
                    kern_attention_head_ref(oref, q, &paged, g, n_ctx, hd, scale, scratch);
                    diffs += memcmp(o1, o2, sizeof(float) * hd) != 0;
                    double e = norm_err(o1, oref, hd);
                    worst = e > worst ? e : worst;
                }
                free(kc);
                free(vc);
                free(kp);
                free(vp);
            }
        printf("level %-6s attention: worst error %.1e, paged vs contiguous mismatches %d\n",
               kern_level_name((kern_level)lv), worst, diffs);
        CHECK(worst <= 1e-5, "attention err %g", worst);
        CHECK(diffs == 0, "paged != contiguous in %d cases", diffs);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* kern_attention_rows: every row equals kern_attention_head at that row's
 * position bit for bit (whatever the number of rows and where a tile starts),
 * and matches the float64 reference within 1e-5. Head sizes cover the
 * register-resident AVX2 specialisations (32, 64, 128), a generic multiple
 * of 8 (40) and the portable fallback (12). */
static void test_attention_rows(kern_level top) {
    const int hds[] = {32, 64, 128, 40, 12, 256};
    const int n_kv_head = 1, n_rows = 23, pos0 = 9, n_ctx = pos0 + n_rows;
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        int mismatches = 0;
        double worst = 0;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            int hd = hds[hi];
            size_t row = (size_t)n_kv_head * hd;
            float *k = malloc(sizeof(float) * row * n_ctx),
                  *v = malloc(sizeof(float) * row * n_ctx);
            float *q = malloc(sizeof(float) * hd * n_rows),
                  *out = malloc(sizeof(float) * hd * n_rows);
            float *one = malloc(sizeof(float) * hd), *ref = malloc(sizeof(float) * hd);
            float *scratch = malloc(sizeof(float) * (size_t)n_rows * n_ctx);
            fill_normal(k, row * n_ctx, 1.0f);
            fill_normal(v, row * n_ctx, 1.0f);
            fill_normal(q, (size_t)hd * n_rows, 1.0f);
            int32_t zero = 0;
            kern_kv_view view = {k,    v, &zero, 1 << 30, 0,    row,         NULL,
                                 NULL, 0, 0.0f,  NULL,    NULL, KERN_KV_F32, 0};
            float scale = 1.0f / sqrtf((float)hd);
            /* Split the rows at a few places: 1+22, 5+18, 23. */
            const int splits[] = {1, 5, 23};
            for (size_t si = 0; si < 3; si++) {
                int a = splits[si];
                kern_attention_rows(out, hd, q, hd, a, pos0, &view, 0, hd, scale, scratch);
                if (a < n_rows)
                    kern_attention_rows(out + (size_t)a * hd, hd, q + (size_t)a * hd, hd,
                                        n_rows - a, pos0 + a, &view, 0, hd, scale, scratch);
                for (int r = 0; r < n_rows; r++) {
                    kern_attention_head(one, q + (size_t)r * hd, &view, 0, pos0 + r + 1, hd, scale,
                                        scratch);
                    mismatches += memcmp(one, out + (size_t)r * hd, sizeof(float) * hd) != 0;
                    kern_attention_head_ref(ref, q + (size_t)r * hd, &view, 0, pos0 + r + 1, hd,
                                            scale, scratch);
                    double e = norm_err(out + (size_t)r * hd, ref, hd);
                    worst = e > worst ? e : worst;
                }
            }
            free(k), free(v), free(q), free(out), free(one), free(ref), free(scratch);
        }
        printf("level %-6s attention rows: worst error %.1e, rows vs single-query mismatches %d\n",
               kern_level_name((kern_level)lv), worst, mismatches);
        CHECK(worst <= 1e-5, "attention rows err %g", worst);
        CHECK(mismatches == 0, "attention rows differ from single-query in %d rows", mismatches);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* kern_attention_rows_gqa: for GQA groups of 1, 3 and 4 query heads, over a
 * paged view whose blocks (5 positions, shuffled, padded rows) cut across
 * the kernel's blocks of 8 positions, and with the rows split at a few
 * places, every (row, head) equals kern_attention_head bit for bit and
 * matches the float64 reference within 1e-5. The query and output rows
 * hold all n_kv_head groups, as in the model. */
static void test_attention_gqa(kern_level top) {
    const int hds[] = {64, 32, 128, 40, 12};
    const int groups[] = {1, 3, 4};
    const int n_kv_head = 2, n_rows = 21, pos0 = 6, n_ctx = pos0 + n_rows, block_size = 5;
    const int n_blocks = (n_ctx + block_size - 1) / block_size, phys = n_blocks + 2;
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        int mismatches = 0, cases = 0;
        double worst = 0;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
                int hd = hds[hi], group = groups[gi], n_heads = group * n_kv_head;
                size_t prow = (size_t)n_kv_head * hd + 3; /* padded stride */
                size_t q_dim = (size_t)n_heads * hd;
                int32_t table[16];
                for (int i = 0; i < n_blocks; i++)
                    table[i] = (i * 3 + 2) % phys;
                float *k = malloc(sizeof(float) * phys * block_size * prow);
                float *v = malloc(sizeof(float) * phys * block_size * prow);
                float *q = malloc(sizeof(float) * q_dim * n_rows),
                      *out = malloc(sizeof(float) * q_dim * n_rows);
                float *one = malloc(sizeof(float) * hd), *ref = malloc(sizeof(float) * hd);
                float *scratch = malloc(sizeof(float) * (size_t)group * n_rows * n_ctx);
                fill_normal(k, (size_t)phys * block_size * prow, 1.0f);
                fill_normal(v, (size_t)phys * block_size * prow, 1.0f);
                fill_normal(q, q_dim * n_rows, 1.0f);
                kern_kv_view view = {k,    v,    table,       block_size, (size_t)block_size * prow,
                                     prow, NULL, NULL,        0,          0.0f,
                                     NULL, NULL, KERN_KV_F32, 0};
                float scale = 1.0f / sqrtf((float)hd);
                const int splits[] = {1, 4, 9, 21};
                for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++) {
                    int a = splits[si];
                    memset(out, 0xff,
                           sizeof(float) * q_dim * n_rows); /* NaN: catches unwritten lanes */
                    for (int g = 0; g < n_kv_head; g++) {
                        size_t off = (size_t)g * group * hd;
                        kern_attention_rows_gqa(out + off, q_dim, q + off, q_dim, a, group, pos0,
                                                &view, g, hd, scale, scratch);
                        if (a < n_rows)
                            kern_attention_rows_gqa(out + a * q_dim + off, q_dim,
                                                    q + a * q_dim + off, q_dim, n_rows - a, group,
                                                    pos0 + a, &view, g, hd, scale, scratch);
                    }
                    /* All the groups in one call (the decode task of a
                     * sequence): the same bits as group by group. */
                    float *all = malloc(sizeof(float) * q_dim * n_rows);
                    memset(all, 0xff, sizeof(float) * q_dim * n_rows);
                    kern_attention_rows_all(all, q_dim, q, q_dim, a, n_heads, n_kv_head, pos0,
                                            &view, hd, scale, scratch);
                    if (a < n_rows)
                        kern_attention_rows_all(all + a * q_dim, q_dim, q + a * q_dim, q_dim,
                                                n_rows - a, n_heads, n_kv_head, pos0 + a, &view, hd,
                                                scale, scratch);
                    mismatches += memcmp(all, out, sizeof(float) * q_dim * n_rows) != 0;
                    free(all);
                    for (int r = 0; r < n_rows; r++)
                        for (int h = 0; h < n_heads; h++) {
                            const float *qh = q + r * q_dim + (size_t)h * hd;
                            const float *oh = out + r * q_dim + (size_t)h * hd;
                            kern_attention_head(one, qh, &view, h / group, pos0 + r + 1, hd, scale,
                                                scratch);
                            mismatches += memcmp(one, oh, sizeof(float) * hd) != 0;
                            kern_attention_head_ref(ref, qh, &view, h / group, pos0 + r + 1, hd,
                                                    scale, scratch);
                            double e = norm_err(oh, ref, hd);
                            worst = e > worst || e != e ? e : worst;
                            cases++;
                        }
                }
                free(k), free(v), free(q), free(out), free(one), free(ref), free(scratch);
            }
        printf("level %-6s attention gqa: worst error %.1e, (row, head) vs single-query mismatches "
               "%d of %d\n",
               kern_level_name((kern_level)lv), worst, mismatches, cases);
        CHECK(worst <= 1e-5, "attention gqa err %g", worst);
        CHECK(mismatches == 0, "attention gqa differs from single-query in %d (row, head)s",
              mismatches);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* An f16 KV cache: the kernels convert each element as they load it, so an
 * f16 view gives bit for bit what an f32 view of the same (f16-rounded)
 * values gives, at every level, paged and with GQA groups; and the float64
 * reference reading the f16 view agrees within 1e-5. */
static void test_attention_f16(kern_level top) {
    const int hds[] = {64, 32, 40, 12};
    const int group = 3, n_kv_head = 2, n_rows = 13, pos0 = 7, n_ctx = pos0 + n_rows,
              block_size = 6;
    const int n_blocks = (n_ctx + block_size - 1) / block_size, phys = n_blocks + 1;
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        int mismatches = 0;
        double worst = 0;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            int hd = hds[hi], n_heads = group * n_kv_head;
            size_t prow = (size_t)n_kv_head * hd, q_dim = (size_t)n_heads * hd;
            size_t n_el = (size_t)phys * block_size * prow;
            int32_t table[16];
            for (int i = 0; i < n_blocks; i++)
                table[i] = (i * 2 + 1) % phys;
            float *k = malloc(sizeof(float) * n_el), *v = malloc(sizeof(float) * n_el);
            uint16_t *k16 = malloc(sizeof(uint16_t) * n_el), *v16 = malloc(sizeof(uint16_t) * n_el);
            fill_normal(k, n_el, 1.0f);
            fill_normal(v, n_el, 1.0f);
            for (size_t i = 0; i < n_el; i++) { /* the f32 view holds the f16-rounded values */
                k16[i] = kern_fp32_to_fp16(k[i]);
                v16[i] = kern_fp32_to_fp16(v[i]);
                k[i] = kern_fp16_to_fp32(k16[i]);
                v[i] = kern_fp16_to_fp32(v16[i]);
            }
            kern_kv_view v32 = {k,    v,    table,       block_size, (size_t)block_size * prow,
                                prow, NULL, NULL,        0,          0.0f,
                                NULL, NULL, KERN_KV_F32, 0};
            kern_kv_view vh = {NULL, NULL, table,       block_size, (size_t)block_size * prow,
                               prow, k16,  v16,         0,          0.0f,
                               NULL, NULL, KERN_KV_F32, 0};
            float *q = malloc(sizeof(float) * q_dim * n_rows);
            float *o32 = malloc(sizeof(float) * q_dim * n_rows),
                  *oh = malloc(sizeof(float) * q_dim * n_rows);
            float *ref = malloc(sizeof(float) * hd),
                  *scratch = malloc(sizeof(float) * (size_t)group * n_rows * n_ctx);
            fill_normal(q, q_dim * n_rows, 1.0f);
            float scale = 1.0f / sqrtf((float)hd);
            for (int g = 0; g < n_kv_head; g++) {
                size_t off = (size_t)g * group * hd;
                kern_attention_rows_gqa(o32 + off, q_dim, q + off, q_dim, n_rows, group, pos0, &v32,
                                        g, hd, scale, scratch);
                kern_attention_rows_gqa(oh + off, q_dim, q + off, q_dim, n_rows, group, pos0, &vh,
                                        g, hd, scale, scratch);
            }
            mismatches += memcmp(o32, oh, sizeof(float) * q_dim * n_rows) != 0;
            for (int r = 0; r < n_rows; r++)
                for (int h = 0; h < n_heads; h++) {
                    kern_attention_head_ref(ref, q + r * q_dim + (size_t)h * hd, &vh, h / group,
                                            pos0 + r + 1, hd, scale, scratch);
                    double e = norm_err(oh + r * q_dim + (size_t)h * hd, ref, hd);
                    worst = e > worst ? e : worst;
                }
            free(k), free(v), free(k16), free(v16), free(q), free(o32), free(oh), free(ref),
                free(scratch);
        }
        printf("level %-6s attention f16 KV: worst error %.1e, f16 vs f32-of-same-values "
               "mismatches %d\n",
               kern_level_name((kern_level)lv), worst, mismatches);
        CHECK(worst <= 1e-5, "f16 attention err %g", worst);
        CHECK(mismatches == 0,
              "f16 view differs from the f32 view of the same values in %d head sizes", mismatches);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* kern_fp32_to_fp16_row at every level equals kern_fp32_to_fp16 bit for bit
 * on random values of every magnitude (normal halves, subnormal halves,
 * values that round to zero or overflow to infinity, ties), signed zeros and
 * infinities, and keeps a NaN a NaN; row lengths cover the vector tail. */
static void test_fp16_row(kern_level top) {
    enum { N = 4099 };
    static float x[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) {
        float e = (float)((int)(rng_u64() % 60) - 30); /* 2^-30 .. 2^29 */
        x[i] = ldexpf((float)rng_uniform() + 0.5f, (int)e) * (rng_u64() & 1 ? -1.0f : 1.0f);
    }
    x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN, x[5] = 65504.0f,
    x[6] = 65520.0f;
    x[7] = 65519.99f, x[8] = ldexpf(1.0f, -25), x[9] = ldexpf(1.5f, -25), x[10] = ldexpf(1.0f, -24);
    x[11] = 1.0f + ldexpf(1.0f, -11),
    x[12] = 1.0f + 3 * ldexpf(1.0f, -11); /* ties to even, both ways */
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        const int lens[] = {N, 1, 7, 8, 9, 192};
        int bad = 0;
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
            memset(h, 0xa5, sizeof h);
            kern_fp32_to_fp16_row(h, x, lens[k]);
            for (int i = 0; i < lens[k]; i++) {
                uint16_t want = kern_fp32_to_fp16(x[i]);
                if (x[i] != x[i])
                    bad += (h[i] & 0x7c00) != 0x7c00 || (h[i] & 0x3ff) == 0;
                else
                    bad += h[i] != want;
            }
            bad += lens[k] < N && h[lens[k]] != 0xa5a5; /* nothing written past n */
        }
        CHECK(bad == 0, "level %s: fp32 -> fp16 rows differ from kern_fp32_to_fp16 in %d values",
              kern_level_name((kern_level)lv), bad);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* Sliding-window attention (kern_kv_view.window, Gemma's local layers): at
 * every level, rows of queries with window W equal, within 1e-5, the float64
 * reference run without a window on a cache holding only each query's last
 * W positions; and a window wider than the context changes nothing (bits). */
static void test_attention_window(kern_level top) {
    const int hd = 64, n_rows = 21, pos0 = 30, n_ctx = pos0 + n_rows, W = 7;
    float *k = malloc(sizeof(float) * hd * n_ctx), *v = malloc(sizeof(float) * hd * n_ctx);
    float *q = malloc(sizeof(float) * hd * n_rows), *out = malloc(sizeof(float) * hd * n_rows);
    float *full = malloc(sizeof(float) * hd * n_rows), *wide = malloc(sizeof(float) * hd * n_rows);
    float *ref = malloc(sizeof(float) * hd), *scratch = malloc(sizeof(float) * n_rows * n_ctx);
    fill_normal(k, (size_t)hd * n_ctx, 1.0f);
    fill_normal(v, (size_t)hd * n_ctx, 1.0f);
    fill_normal(q, (size_t)hd * n_rows, 1.0f);
    int32_t zero = 0;
    float scale = 0.125f;
    for (int lv = test_min_level(); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        kern_kv_view view = {k,    v, &zero, 1 << 30, 0,    (size_t)hd,  NULL,
                             NULL, W, 0.0f,  NULL,    NULL, KERN_KV_F32, 0};
        kern_attention_rows(out, hd, q, hd, n_rows, pos0, &view, 0, hd, scale, scratch);
        double worst = 0;
        for (int r = 0; r < n_rows; r++) {
            /* The last W positions of row r as a cache of their own. */
            int first = pos0 + r - W + 1;
            kern_kv_view tail = {k + (size_t)first * hd,
                                 v + (size_t)first * hd,
                                 &zero,
                                 1 << 30,
                                 0,
                                 (size_t)hd,
                                 NULL,
                                 NULL,
                                 0,
                                 0.0f,
                                 NULL,
                                 NULL,
                                 KERN_KV_F32,
                                 0};
            kern_attention_head_ref(ref, q + (size_t)r * hd, &tail, 0, W, hd, scale, scratch);
            double e = norm_err(out + (size_t)r * hd, ref, hd);
            worst = e > worst ? e : worst;
        }
        view.window = 0;
        kern_attention_rows(full, hd, q, hd, n_rows, pos0, &view, 0, hd, scale, scratch);
        view.window = n_ctx + 1;
        kern_attention_rows(wide, hd, q, hd, n_rows, pos0, &view, 0, hd, scale, scratch);
        double moved = norm_err(out, full, (size_t)hd * n_rows);
        printf("level %-6s attention window %d: worst error %.1e vs the window's own cache; "
               "differs from no window by %.2f\n",
               kern_level_name((kern_level)lv), W, worst, moved);
        CHECK(worst <= 1e-5, "windowed attention err %g", worst);
        CHECK(moved > 0.05, "the window changed nothing (%g)", moved);
        CHECK(memcmp(wide, full, sizeof(float) * hd * n_rows) == 0,
              "a window wider than the context changed the result");
        /* Soft-capping (Gemma 2) with the window, against the formula in
         * double: scores s * scale -> cap * tanh(. / cap), softmax over the
         * window, weighted V. */
        const float cap = 0.75f;
        view.window = W;
        view.softcap = cap;
        kern_attention_rows(out, hd, q, hd, n_rows, pos0, &view, 0, hd, scale, scratch);
        double worst_cap = 0, moved_cap = norm_err(out, full, (size_t)hd * n_rows);
        for (int r = 0; r < n_rows; r++) {
            int pq = pos0 + r, first = pq - W + 1;
            double sc[64], mx = -1e300, sum = 0, o[64] = {0};
            for (int p = first; p <= pq; p++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[(size_t)r * hd + e] * k[(size_t)p * hd + e];
                d = cap * tanh(d * scale / cap);
                sc[p - first] = d;
                mx = d > mx ? d : mx;
            }
            for (int p = 0; p < W; p++)
                sum += (sc[p] = exp(sc[p] - mx));
            for (int p = 0; p < W; p++)
                for (int e = 0; e < hd; e++)
                    o[e] += sc[p] / sum * v[(size_t)(first + p) * hd + e];
            float of[64];
            for (int e = 0; e < hd; e++)
                of[e] = (float)o[e];
            double e = norm_err(out + (size_t)r * hd, of, hd);
            worst_cap = e > worst_cap ? e : worst_cap;
        }
        printf("level %-6s attention soft-cap %.2f: worst error %.1e vs the formula\n",
               kern_level_name((kern_level)lv), cap, worst_cap);
        CHECK(worst_cap <= 1e-5, "soft-capped attention err %g", worst_cap);
        CHECK(moved_cap > 0.05, "soft-capping changed nothing");
        view.softcap = 0.0f;
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    free(k), free(v), free(q), free(out), free(full), free(wide), free(ref), free(scratch);
}

int main(void) {
    kern_level top = detected_level();
    test_fp16_row(top);
    test_exp(top);
    test_rows(top);
    test_rope();
    test_attention(top);
    test_attention_rows(top);
    test_attention_gqa(top);
    test_attention_f16(top);
    test_attention_window(top);
    return finish("test_kern_ops");
}
