/* test_kern_matmul.c - kern_matmul at every level this CPU has, against
 * kern_matmul_ref, on random data; plus batch- and thread-invariance.
 *
 * Tolerances: F32/F16/BF16 differ from the reference only by the f32
 * summation order (8 or 16 lanes, then a tree), so the normalised error
 * ||y - ref|| / ||ref|| must be <= 1e-5 (observed ~1e-6) for every shape
 * with at least 16 outputs; a shape with one or a few outputs can cancel to
 * near zero, where no summation order is accurate relative to the result,
 * so every shape is also held to ||y - ref|| / || |W| |x| || <= 1e-6, the
 * error relative to the size of the summands (observed ~1e-7). Q8_0 must be
 * bit-identical to the reference at every level: the int8 block dots are
 * exact and every level does the same three f32 operations per block in the
 * same order (see kern_matmul.c). Levels above the detected one are skipped
 * with a message. */
#include <string.h>

#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_ops.h"
#include "test_kern_util.h"

static const kern_type k_types[] = {KERN_TYPE_F32, KERN_TYPE_F16, KERN_TYPE_BF16, KERN_TYPE_Q8_0};

typedef struct {
    uint8_t *w;
    float *x, *y, *ref;
    void *ws;
} bufs;

static void make(bufs *b, kern_type wt, int n_out, int n_in, int n_tok)
{
    size_t rb = kern_row_bytes(wt, n_in);
    b->w = malloc(rb * n_out);
    b->x = malloc(sizeof(float) * n_tok * n_in);
    b->y = malloc(sizeof(float) * n_tok * n_out);
    b->ref = malloc(sizeof(float) * n_tok * n_out);
    size_t wsb = (kern_matmul_ws_bytes(wt, n_in, n_tok) + 63) & ~(size_t)63;
    b->ws = aligned_alloc(64, wsb ? wsb : 64);
    float *row = malloc(sizeof(float) * n_in);
    /* Weights ~ N(0, 1/n_in) like a trained projection, activations ~ N(0, 1). */
    for (int o = 0; o < n_out; o++) {
        fill_normal(row, n_in, 1.0f / sqrtf((float)n_in));
        kern_quantize_row(wt, row, b->w + rb * o, n_in);
    }
    free(row);
    fill_normal(b->x, (size_t)n_tok * n_in, 1.0f);
}

static void unmake(bufs *b)
{
    free(b->w);
    free(b->x);
    free(b->y);
    free(b->ref);
    free(b->ws);
}

/* || |W| |x| ||: the reference computed on absolute values, in double. */
static double abs_norm(kern_type wt, const uint8_t *w, int n_out, int n_in, const float *x, int n_tok)
{
    size_t rb = kern_row_bytes(wt, n_in);
    float *row = malloc(sizeof(float) * n_in);
    double s2 = 0.0;
    for (int o = 0; o < n_out; o++) {
        kern_dequantize_row(wt, w + rb * o, row, n_in);
        for (int t = 0; t < n_tok; t++) {
            double s = 0.0;
            for (int i = 0; i < n_in; i++)
                s += fabs((double)row[i] * x[(size_t)t * n_in + i]);
            s2 += s * s;
        }
    }
    free(row);
    return sqrt(s2);
}

static void test_vs_ref(kern_pool *pool, kern_level top)
{
    const int outs[] = {1, 3, 17, 64, 577};
    const int ins[] = {32, 64, 576, 1536};
    const int toks[] = {1, 2, 3, 4, 5, 8, 33};
    for (int lv = 0; lv <= KERN_LEVEL_AVX512VNNI; lv++) {
        if (lv > (int)top) {
            printf("skip level %s: not supported by this CPU\n", kern_level_name((kern_level)lv));
            continue;
        }
        kern_cpu_set_max_level((kern_level)lv);
        for (int ti = 0; ti < 4; ti++) {
            double worst = 0.0, worst_abs = 0.0;
            int exact_fail = 0, cases = 0;
            for (size_t oi = 0; oi < sizeof(outs) / sizeof(outs[0]); oi++)
                for (size_t ii = 0; ii < sizeof(ins) / sizeof(ins[0]); ii++)
                    for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
                        int n_out = outs[oi], n_in = ins[ii], n_tok = toks[ki];
                        /* Keep the run short: the big row count with only a few token counts. */
                        if (n_out == 577 && n_tok != 1 && n_tok != 5 && n_tok != 33)
                            continue;
                        if (n_out == 577 && n_in == 1536 && n_tok == 33)
                            continue;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
                        /* Sanitized builds run ~10x slower: drop the largest products. */
                        if (n_out >= 64 && n_in == 1536 && n_tok > 1)
                            continue;
#endif
                        bufs b;
                        make(&b, k_types[ti], n_out, n_in, n_tok);
                        kern_matmul(pool, k_types[ti], b.w, n_out, n_in, b.x, n_tok, b.y, b.ws);
                        kern_matmul_ref(k_types[ti], b.w, n_out, n_in, b.x, n_tok, b.ref);
                        size_t n = (size_t)n_out * n_tok;
                        if (k_types[ti] == KERN_TYPE_Q8_0) {
                            if (memcmp(b.y, b.ref, n * sizeof(float)) != 0) {
                                exact_fail++;
                                fprintf(stderr, "  q8_0 %s %dx%d tok %d: err %g\n", kern_level_name((kern_level)lv),
                                        n_out, n_in, n_tok, norm_err(b.y, b.ref, n));
                            }
                        } else {
                            double diff = norm_err(b.y, b.ref, n);
                            double num = 0.0;
                            for (size_t i = 0; i < n; i++)
                                num += ((double)b.y[i] - b.ref[i]) * ((double)b.y[i] - b.ref[i]);
                            double e_abs = sqrt(num) / abs_norm(k_types[ti], b.w, n_out, n_in, b.x, n_tok);
                            worst_abs = e_abs > worst_abs ? e_abs : worst_abs;
                            if (n >= 16)
                                worst = diff > worst ? diff : worst;
                        }
                        cases++;
                        unmake(&b);
                    }
            printf("level %-10s %-4s: %3d shapes, worst normalised error %.2e (vs |W||x|: %.2e)%s\n",
                   kern_level_name((kern_level)lv), kern_type_name(k_types[ti]), cases, worst, worst_abs,
                   k_types[ti] == KERN_TYPE_Q8_0 ? " (bit-exact required)" : "");
            CHECK(worst_abs <= 1e-6, "%s %s: error vs |W||x| %g > 1e-6", kern_level_name((kern_level)lv),
                  kern_type_name(k_types[ti]), worst_abs);
            CHECK(worst <= 1e-5, "%s %s: normalised error %g > 1e-5", kern_level_name((kern_level)lv),
                  kern_type_name(k_types[ti]), worst);
            CHECK(exact_fail == 0, "%s q8_0: %d shapes not bit-exact", kern_level_name((kern_level)lv), exact_fail);
        }
    }
    kern_cpu_set_max_level(KERN_LEVEL_AVX512VNNI);
}

/* n_in not a multiple of 8/16 (float types only): exercises the tails. */
static void test_odd_n_in(kern_pool *pool, kern_level top)
{
    const int ins[] = {1, 7, 9, 15, 17, 33, 100};
    for (int lv = 0; lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        for (int ti = 0; ti < 3; ti++)
            for (size_t ii = 0; ii < sizeof(ins) / sizeof(ins[0]); ii++) {
                bufs b;
                make(&b, k_types[ti], 19, ins[ii], 5);
                kern_matmul(pool, k_types[ti], b.w, 19, ins[ii], b.x, 5, b.y, b.ws);
                kern_matmul_ref(k_types[ti], b.w, 19, ins[ii], b.x, 5, b.ref);
                double e = norm_err(b.y, b.ref, 19 * 5);
                CHECK(e <= 1e-5, "%s %s n_in %d: err %g", kern_level_name((kern_level)lv),
                      kern_type_name(k_types[ti]), ins[ii], e);
                unmake(&b);
            }
    }
    kern_cpu_set_max_level(KERN_LEVEL_AVX512VNNI);
}

/* y[t][o] must not depend on n_tok, on the other rows of x, or on the
 * thread count: one token at a time == a batch of 37, 1 thread == 2. */
static void test_invariance(kern_pool *pool1, kern_pool *pool2, kern_level top)
{
    const int n_out = 577, n_in = 576, n_tok = 37;
    for (int lv = 0; lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        for (int ti = 0; ti < 4; ti++) {
            kern_type wt = k_types[ti];
            bufs b;
            make(&b, wt, n_out, n_in, n_tok);
            kern_matmul(pool2, wt, b.w, n_out, n_in, b.x, n_tok, b.y, b.ws);
            /* One token at a time, single-threaded, with a fresh workspace. */
            int diff_tok = 0;
            float *y1 = malloc(sizeof(float) * n_out);
            void *ws1 = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, 1) + 64) & ~(size_t)63);
            for (int t = 0; t < n_tok; t++) {
                kern_matmul(pool1, wt, b.w, n_out, n_in, b.x + (size_t)t * n_in, 1, y1, ws1);
                diff_tok += memcmp(y1, b.y + (size_t)t * n_out, sizeof(float) * n_out) != 0;
            }
            /* The same batch with the rows of x reordered (other tokens change). */
            int diff_perm = 0;
            float *xp = malloc(sizeof(float) * n_tok * n_in), *yp = malloc(sizeof(float) * n_tok * n_out);
            for (int t = 0; t < n_tok; t++)
                memcpy(xp + (size_t)t * n_in, b.x + (size_t)((t * 11) % n_tok) * n_in, sizeof(float) * n_in);
            kern_matmul(pool1, wt, b.w, n_out, n_in, xp, n_tok, yp, b.ws);
            for (int t = 0; t < n_tok; t++)
                diff_perm += memcmp(yp + (size_t)t * n_out, b.y + (size_t)((t * 11) % n_tok) * n_out,
                                    sizeof(float) * n_out) != 0;
            CHECK(diff_tok == 0, "%s %s: %d tokens differ between n_tok=1 and n_tok=%d",
                  kern_level_name((kern_level)lv), kern_type_name(wt), diff_tok, n_tok);
            CHECK(diff_perm == 0, "%s %s: %d tokens differ when the batch is reordered (1 vs 2 threads)",
                  kern_level_name((kern_level)lv), kern_type_name(wt), diff_perm);
            free(y1);
            free(ws1);
            free(xp);
            free(yp);
            unmake(&b);
        }
    }
    kern_cpu_set_max_level(KERN_LEVEL_AVX512VNNI);
}

/* The SIMD activation quantizer must equal kern_quantize_row bit for bit,
 * including exact .5 ties (round half away from zero) and all-zero blocks. */
static void test_quantize_act(kern_level top)
{
    enum { N = 1536 };
    static float x[N], d_ref[N / 32], d_simd[N / 32];
    static int8_t q_ref[N], q_simd[N];
    fill_normal(x, N, 2.0f);
    for (int i = 0; i < 32; i++) /* block 0: max 127 so x * (1/d) lands on .5 ties */
        x[i] = (float)(i - 16) + 0.5f;
    x[0] = 127.0f;
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f;
    kern_quantize_act_scalar(x, N, q_ref, d_ref, 1);
    /* The scalar helper itself must equal kern_quantize_row. */
    kern_block_q8_0 blk[N / 32];
    kern_quantize_row(KERN_TYPE_Q8_0, x, blk, N);
    int bad = 0;
    for (int b = 0; b < N / 32; b++)
        bad += memcmp(blk[b].qs, q_ref + b * 32, 32) != 0 || kern_fp16_to_fp32(blk[b].d) != d_ref[b];
    CHECK(bad == 0, "scalar activation quantizer != kern_quantize_row (%d blocks)", bad);
    if (top >= KERN_LEVEL_AVX2) {
        kern_quantize_act_avx2(x, N, q_simd, d_simd, 1);
        CHECK(memcmp(q_ref, q_simd, N) == 0 && memcmp(d_ref, d_simd, sizeof(d_ref)) == 0,
              "avx2 activation quantizer differs from the reference");
    }
}

/* GGUF files may hold any int8 in a Q8_0 block, including -128, which the
 * quantizer never makes: the SIMD dot products must stay exact for it
 * (|w| = 128 still fits maddubs' unsigned operand; see the AVX2 file). */
static void test_q8_full_range(kern_pool *pool, kern_level top)
{
    const int n_out = 37, n_in = 96, n_tok = 7;
    size_t rb = kern_row_bytes(KERN_TYPE_Q8_0, n_in);
    uint8_t *w = malloc(rb * n_out);
    for (int o = 0; o < n_out; o++) {
        kern_block_q8_0 *b = (kern_block_q8_0 *)(w + rb * o);
        for (int k = 0; k < n_in / 32; k++) {
            b[k].d = kern_fp32_to_fp16(0.01f + 0.02f * (float)rng_uniform());
            for (int j = 0; j < 32; j++)
                b[k].qs[j] = (o + k) % 3 == 0 ? (int8_t)-128 : (int8_t)(rng_u64() & 0xff);
        }
    }
    float *x = malloc(sizeof(float) * n_tok * n_in), *y = malloc(sizeof(float) * n_tok * n_out);
    float *ref = malloc(sizeof(float) * n_tok * n_out);
    fill_normal(x, (size_t)n_tok * n_in, 1.0f);
    for (int i = 0; i < n_in; i++) /* token 0: a row whose block max is negative */
        x[i] = -fabsf(x[i]);
    void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(KERN_TYPE_Q8_0, n_in, n_tok) + 64) & ~(size_t)63);
    kern_matmul_ref(KERN_TYPE_Q8_0, w, n_out, n_in, x, n_tok, ref);
    for (int lv = 0; lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        kern_matmul(pool, KERN_TYPE_Q8_0, w, n_out, n_in, x, n_tok, y, ws);
        CHECK(memcmp(y, ref, sizeof(float) * n_tok * n_out) == 0, "%s: q8_0 with -128 weights not exact",
              kern_level_name((kern_level)lv));
    }
    kern_cpu_set_max_level(KERN_LEVEL_AVX512VNNI);
    free(w);
    free(x);
    free(y);
    free(ref);
    free(ws);
}

int main(void)
{
    kern_level top = detected_level();
    printf("detected level: %s\n", kern_level_name(top));
    kern_pool *pool1 = kern_pool_create(1), *pool2 = kern_pool_create(2);
    double t = now_sec();
    test_quantize_act(top);
    test_q8_full_range(pool2, top);
    test_vs_ref(pool2, top);
    test_odd_n_in(pool2, top);
    test_invariance(pool1, pool2, top);
    printf("(%.1f s)\n", now_sec() - t);
    kern_pool_free(pool1);
    kern_pool_free(pool2);
    return finish("test_kern_matmul");
}
