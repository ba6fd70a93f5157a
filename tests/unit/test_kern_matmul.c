/* test_kern_matmul.c - kern_matmul at every level this CPU has, against
 * kern_matmul_ref, on random data; plus batch- and thread-invariance.
 *
 * Tolerances: F32/F16/BF16 differ from the reference only by the f32
 * summation order (8 or 16 lanes, then a tree), so the normalised error
 * ||y - ref|| / ||ref|| must be <= 1e-5 (observed ~1e-6) for every shape
 * with at least 16 outputs; a shape with one or a few outputs can cancel to
 * near zero, where no summation order is accurate relative to the result,
 * so every shape is also held to ||y - ref|| / || |W| |x| || <= 1e-6, the
 * error relative to the size of the summands (observed ~1e-7). The integer
 * weight types (Q8_0, Q8_0M, Q4_0, Q4_1) must be bit-identical to the
 * reference at every level: the integer x int16 block dots are exact and
 * every level does the same f32 operations per block in the same order (see
 * kern_matmul.c); and a Q4_0 / Q4_1 matrix must give exactly the results of
 * its lossless Q8_0 / Q8_0M requantization (test_q4_as_q8). Their accuracy
 * against exact arithmetic is tested separately (test_accuracy).
 * Levels above the detected one are skipped with a message. */
#include <string.h>

#include "kernels/cpu/kern_internal.h"
#include "kernels/cpu/kern_ops.h"
#include "test_kern_util.h"

static const kern_type k_types[] = {KERN_TYPE_F32,   KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,
                                    KERN_TYPE_Q8_0M, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1};
#define N_TYPES (int)(sizeof(k_types) / sizeof(k_types[0]))
/* The integer weight types, in k_types from here on. */
#define INT_TYPES_FIRST 3
static const kern_type *const k_int_types = k_types + INT_TYPES_FIRST;
#define N_INT_TYPES (N_TYPES - INT_TYPES_FIRST)

static int has_offset(kern_type wt) {
    return wt == KERN_TYPE_Q8_0M || wt == KERN_TYPE_Q4_1 || wt == KERN_TYPE_Q5_1;
}

typedef struct {
    uint8_t *w;
    float *x, *y, *ref;
    void *ws;
} bufs;

static void make(bufs *b, kern_type wt, int n_out, int n_in, int n_tok) {
    size_t rb = kern_row_bytes(wt, n_in);
    b->w = malloc(rb * n_out);
    b->x = malloc(sizeof(float) * n_tok * n_in);
    b->y = malloc(sizeof(float) * n_tok * n_out);
    b->ref = malloc(sizeof(float) * n_tok * n_out);
    size_t wsb = (kern_matmul_ws_bytes(wt, n_in, n_tok) + 63) & ~(size_t)63;
    b->ws = aligned_alloc(64, wsb ? wsb : 64);
    float *row = malloc(sizeof(float) * n_in);
    /* Weights ~ N(0, 1/n_in) like a trained projection (plus a per-row
     * offset for Q8_0M and Q4_1, whose m must matter), activations ~ N(0, 1). */
    for (int o = 0; o < n_out; o++) {
        fill_normal(row, n_in, 1.0f / sqrtf((float)n_in));
        if (has_offset(wt))
            for (int i = 0; i < n_in; i++)
                row[i] += (float)(o % 5 - 2) * 0.02f;
        kern_quantize_row(wt, row, b->w + rb * o, n_in);
    }
    free(row);
    fill_normal(b->x, (size_t)n_tok * n_in, 1.0f);
}

static void unmake(bufs *b) {
    free(b->w);
    free(b->x);
    free(b->y);
    free(b->ref);
    free(b->ws);
}

/* || |W| |x| ||: the reference computed on absolute values, in double. */
static double abs_norm(kern_type wt, const uint8_t *w, int n_out, int n_in, const float *x,
                       int n_tok) {
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

/* The first SIMD level a sweep tests. Under TSan only the machine's top level:
 * TSan looks for races in the thread pool's sharing of the work, which is the
 * same at every level, and runs the kernels ~10x slower; the Release and ASan
 * runs check every level's numbers. */
static int lv_first(kern_level top) {
#if defined(__SANITIZE_THREAD__)
    return (int)top;
#else
    int lo = test_min_level();
    return lo < (int)top ? lo : (int)top;
#endif
}

static void test_vs_ref(kern_pool *pool, kern_level top) {
#if defined(__SANITIZE_THREAD__)
    /* Under TSan (the pool's sharing of the work, see lv_first): a decode, a
     * short, a tiled and a long batch over a partial and a many-task row
     * count; the Release and ASan runs check every shape's numbers. */
    const int outs[] = {3, 577};
    const int ins[] = {64, 1536};
    const int toks[] = {1, 4, 19, 33};
#else
    const int outs[] = {1, 3, 17, 64, 577};
    const int ins[] = {32, 64, 576, 1536};
    const int toks[] = {1,  2,  3,  4,  5,  6,  7, 9,
                        10, 11, 18, 19, 20, 22, 33}; /* all tile shapes and the layout tails */
#endif
    for (int lv = (int)top + 1; lv <= KERN_LEVEL_TOP; lv++)
        printf("skip level %s: not supported by this CPU\n", kern_level_name((kern_level)lv));
    for (int ti = 0; ti < N_TYPES; ti++) {
        kern_type wt = k_types[ti];
        double worst[KERN_LEVEL_TOP + 1] = {0}, worst_abs[KERN_LEVEL_TOP + 1] = {0};
        int exact_fail[KERN_LEVEL_TOP + 1] = {0}, cases = 0;
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
                    make(&b, wt, n_out, n_in, n_tok);
                    kern_matmul_ref(wt, b.w, n_out, n_in, b.x, n_tok, b.ref);
                    size_t n = (size_t)n_out * n_tok;
                    double absn =
                        kern_is_int_weight(wt) ? 0.0 : abs_norm(wt, b.w, n_out, n_in, b.x, n_tok);
                    for (int lv = lv_first(top); lv <= (int)top; lv++) {
                        kern_cpu_set_max_level((kern_level)lv);
                        kern_matmul(pool, wt, b.w, n_out, n_in, b.x, n_tok, b.y, b.ws);
                        if (kern_is_int_weight(wt)) {
                            if (memcmp(b.y, b.ref, n * sizeof(float)) != 0) {
                                exact_fail[lv]++;
                                fprintf(stderr, "  %s %s %dx%d tok %d: err %g\n",
                                        kern_type_name(wt), kern_level_name((kern_level)lv), n_out,
                                        n_in, n_tok, norm_err(b.y, b.ref, n));
                            }
                            continue;
                        }
                        double diff = norm_err(b.y, b.ref, n), num = 0.0;
                        for (size_t i = 0; i < n; i++)
                            num += ((double)b.y[i] - b.ref[i]) * ((double)b.y[i] - b.ref[i]);
                        double e_abs = sqrt(num) / absn;
                        worst_abs[lv] = e_abs > worst_abs[lv] ? e_abs : worst_abs[lv];
                        if (n >= 16)
                            worst[lv] = diff > worst[lv] ? diff : worst[lv];
                    }
                    cases++;
                    unmake(&b);
                }
        for (int lv = lv_first(top); lv <= (int)top; lv++) {
            const char *ln = kern_level_name((kern_level)lv), *tn = kern_type_name(wt);
            printf(
                "level %-10s %-5s: %3d shapes, worst normalised error %.2e (vs |W||x|: %.2e)%s\n",
                ln, tn, cases, worst[lv], worst_abs[lv],
                kern_is_int_weight(wt) ? " (bit-exact required)" : "");
            CHECK(worst_abs[lv] <= 1e-6, "%s %s: error vs |W||x| %g > 1e-6", ln, tn, worst_abs[lv]);
            CHECK(worst[lv] <= 1e-5, "%s %s: normalised error %g > 1e-5", ln, tn, worst[lv]);
            CHECK(exact_fail[lv] == 0, "%s %s: %d shapes not bit-exact", ln, tn, exact_fail[lv]);
        }
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* Long rows, where a task's rows span several chunks of the prompt path's
 * converted weight scales (the AVX2 file's SC_FLOATS / blocks rows: 32 at
 * n_in = 4096), with an odd row count so the last chunk ends in a clamped
 * row pair; one thread, so tasks are 32-48 rows. Bit-exact like the rest. */
static void test_long_rows(kern_pool *pool1, kern_level top) {
    const int n_out = 157, n_in = 4096, n_tok = 17;
    for (int ti = 0; ti < N_INT_TYPES; ti++) {
        kern_type wt = k_int_types[ti];
        bufs b;
        make(&b, wt, n_out, n_in, n_tok);
        kern_matmul_ref(wt, b.w, n_out, n_in, b.x, n_tok, b.ref);
        for (int lv = lv_first(top); lv <= (int)top; lv++) {
            kern_cpu_set_max_level((kern_level)lv);
            kern_matmul(pool1, wt, b.w, n_out, n_in, b.x, n_tok, b.y, b.ws);
            CHECK(memcmp(b.y, b.ref, sizeof(float) * n_out * n_tok) == 0,
                  "%s %s: long rows not bit-exact", kern_level_name((kern_level)lv),
                  kern_type_name(wt));
        }
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        unmake(&b);
    }
}

/* n_in not a multiple of 8/16 (float types only): exercises the tails. */
static void test_odd_n_in(kern_pool *pool, kern_level top) {
    const int ins[] = {1, 7, 9, 15, 17, 33, 100};
    for (int lv = lv_first(top); lv <= (int)top; lv++) {
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
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* y[t][o] must not depend on n_tok, on the other rows of x, or on the
 * thread count: one token at a time == a batch of 37, 1 thread == 2. */
static void test_invariance(kern_pool *pool1, kern_pool *pool2, kern_level top) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const int n_out = 193, n_in = 576, n_tok = 37; /* 13 row groups: still several tasks */
#else
    const int n_out = 577, n_in = 576, n_tok = 37;
#endif
    for (int lv = lv_first(top); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        for (int ti = 0; ti < N_TYPES; ti++) {
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
            float *xp = malloc(sizeof(float) * n_tok * n_in),
                  *yp = malloc(sizeof(float) * n_tok * n_out);
            for (int t = 0; t < n_tok; t++)
                memcpy(xp + (size_t)t * n_in, b.x + (size_t)((t * 11) % n_tok) * n_in,
                       sizeof(float) * n_in);
            kern_matmul(pool1, wt, b.w, n_out, n_in, xp, n_tok, yp, b.ws);
            for (int t = 0; t < n_tok; t++)
                diff_perm +=
                    memcmp(yp + (size_t)t * n_out, b.y + (size_t)((t * 11) % n_tok) * n_out,
                           sizeof(float) * n_out) != 0;
            CHECK(diff_tok == 0, "%s %s: %d tokens differ between n_tok=1 and n_tok=%d",
                  kern_level_name((kern_level)lv), kern_type_name(wt), diff_tok, n_tok);
            CHECK(diff_perm == 0,
                  "%s %s: %d tokens differ when the batch is reordered (1 vs 2 threads)",
                  kern_level_name((kern_level)lv), kern_type_name(wt), diff_perm);
            free(y1);
            free(ws1);
            free(xp);
            free(yp);
            unmake(&b);
        }
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* kern_matmul_multi: parts of different types and sizes (row counts not a
 * multiple of the 16-row group, so tasks straddle parts) over one x give, for
 * every part, exactly kern_matmul's bits for that part alone, for decode and
 * batch sizes, 1 and 2 threads; and the ws of an integer part serves all. */
static void test_multi(kern_pool *pool1, kern_pool *pool2, kern_level top) {
    const int n_in = 576;
    const int n_outs[3] = {200, 37, 133};
    const kern_type sets[][3] = {
        {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0, KERN_TYPE_Q8_0},
        {KERN_TYPE_F16, KERN_TYPE_Q4_1, KERN_TYPE_Q8_0M},
        {KERN_TYPE_Q4_0, KERN_TYPE_F32, KERN_TYPE_BF16},
        {KERN_TYPE_F16, KERN_TYPE_F16, KERN_TYPE_F16},
    };
    const int toks[] = {1, 2, 3, 5, 7, 17};
    for (int lv = lv_first(top); lv <= (int)top; lv++) {
        kern_cpu_set_max_level((kern_level)lv);
        for (int si = 0; si < (int)(sizeof(sets) / sizeof(sets[0])); si++)
            for (int k = 0; k < (int)(sizeof(toks) / sizeof(toks[0])); k++) {
                int n_tok = toks[k];
                bufs b[3];
                kern_matmul_part parts[3];
                for (int p = 0; p < 3; p++) {
                    make(&b[p], sets[si][p], n_outs[p], n_in, n_tok);
                    if (p > 0) /* one x for all parts */
                        memcpy(b[p].x, b[0].x, sizeof(float) * n_tok * n_in);
                    parts[p] = (kern_matmul_part){
                        .wt = sets[si][p], .W = b[p].w, .n_out = n_outs[p], .y = b[p].y};
                }
                size_t wsb = (kern_matmul_ws_bytes(KERN_TYPE_Q8_0, n_in, n_tok) + 63) & ~(size_t)63;
                void *ws = aligned_alloc(64, wsb);
                for (int np = 0; np < 2; np++) {
                    kern_pool *pool = np ? pool2 : pool1;
                    for (int p = 0; p < 3; p++)
                        fill_normal(b[p].y, (size_t)n_tok * n_outs[p],
                                    1.0f); /* no stale result can pass */
                    kern_matmul_multi(pool, parts, 3, n_in, b[0].x, n_tok, ws);
                    for (int p = 0; p < 3; p++) {
                        kern_matmul(pool1, sets[si][p], b[p].w, n_outs[p], n_in, b[0].x, n_tok,
                                    b[p].ref, b[p].ws);
                        CHECK(memcmp(b[p].y, b[p].ref, sizeof(float) * n_tok * n_outs[p]) == 0,
                              "%s multi part %d (%s, %d rows), %d tokens, %d threads: differs from "
                              "kern_matmul",
                              kern_level_name((kern_level)lv), p, kern_type_name(sets[si][p]),
                              n_outs[p], n_tok, np + 1);
                    }
                }
                free(ws);
                for (int p = 0; p < 3; p++)
                    unmake(&b[p]);
            }
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
}

/* The activation quantizer: the SIMD version equals the scalar one bit for
 * bit, including exact .5 ties (to even), all-zero and denormal blocks; and
 * the scalar one keeps its contract (|q| <= 32767, the block max at +-32767,
 * s = d * sum(q)). */
static void test_quantize_act(kern_level top) {
    enum { N = 1536, NB = N / 32 };
    static float x[N], d_ref[NB], s_ref[NB], d_simd[NB], s_simd[NB];
    static int32_t i_ref[NB], i_simd[NB];
    static int16_t q_ref[N], q_simd[N];
    fill_normal(x, N, 2.0f);
    for (int i = 0; i < 32; i++) /* block 0: max 32767 so d = 1 and x * (1/d) lands on .5 ties */
        x[i] = (float)(i - 16) + 0.5f;
    x[0] = 32767.0f;
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f;
    for (int i = 64; i < 96; i++) /* denormal block: counts as zero */
        x[i] = (float)(i - 80) * 1e-40f;
    for (int i = 96; i < 128; i++) /* one outlier: the rest quantize to small q */
        x[i] = i == 100 ? -3000.0f : x[i];
    kern_quantize_act_scalar(x, N, q_ref, d_ref, s_ref, i_ref, 1);
    int bad = 0;
    for (int b = 0; b < NB; b++) {
        int32_t sum = 0, qmax = 0;
        for (int j = 0; j < 32; j++) {
            int v = q_ref[b * 32 + j];
            sum += v;
            qmax = abs(v) > qmax ? abs(v) : qmax;
            /* Round to nearest: |q * d - x| <= d / 2 (+ the rounding of x / d). */
            if (fabs((double)v * d_ref[b] - x[b * 32 + j]) > d_ref[b] * (0.5 + 1e-5) + 1e-30)
                bad++;
        }
        bad += s_ref[b] != d_ref[b] * (float)sum;
        bad += i_ref[b] != sum;
        bad += d_ref[b] != 0.0f ? qmax != 32767 : qmax != 0;
    }
    CHECK(bad == 0, "scalar activation quantizer breaks its contract (%d)", bad);
    CHECK(d_ref[0] == 1.0f && q_ref[1] == -14 && q_ref[2] == -14 && q_ref[3] == -12,
          "ties to even: %d %d %d", q_ref[1], q_ref[2], q_ref[3]);
    CHECK(d_ref[1] == 0.0f && d_ref[2] == 0.0f && s_ref[2] == 0.0f, "zero/denormal blocks");
    if (top >= KERN_LEVEL_AVX2) {
        kern_quantize_act_avx2(x, N, q_simd, d_simd, s_simd, i_simd, 1, -1);
        CHECK(memcmp(q_ref, q_simd, sizeof(q_ref)) == 0 &&
                  memcmp(d_ref, d_simd, sizeof(d_ref)) == 0 &&
                  memcmp(s_ref, s_simd, sizeof(s_ref)) == 0 &&
                  memcmp(i_ref, i_simd, sizeof(i_ref)) == 0,
              "avx2 activation quantizer differs from the scalar one");
        /* The paired layout (kern_matmul_avx2.c): token t = slot 0 and u =
         * slot 1, chunks c0..c3 of 8 values, per block of 64 values
         * [t.c0 u.c1 | u.c0 t.c1 | t.c2 u.c3 | u.c2 t.c3]. */
        static const int off[2][4] = {{0, 24, 32, 56}, {16, 8, 48, 40}};
        static float x2[N];
        static int16_t q2[N], pair[2 * N];
        fill_normal(x2, N, 0.5f);
        kern_quantize_act_scalar(x2, N, q2, d_simd, s_simd, i_simd, 1);
        kern_quantize_act_avx2(x, N, pair, d_simd, s_simd, i_simd, 1, 0);
        kern_quantize_act_avx2(x2, N, pair, d_simd, s_simd, i_simd, 1, 1);
        bad = 0;
        for (int b = 0; b < NB; b++)
            for (int c = 0; c < 4; c++)
                for (int j = 0; j < 8; j++) {
                    bad += pair[b * 64 + off[0][c] + j] != q_ref[b * 32 + c * 8 + j];
                    bad += pair[b * 64 + off[1][c] + j] != q2[b * 32 + c * 8 + j];
                }
        CHECK(bad == 0, "avx2 paired layout: %d values misplaced", bad);
    }
}

/* Activations a hostile model's NaN or infinite weights make: the scalar
 * quantizer must stay defined (the UBSan build checks the float -> int16
 * conversion; fuzz_gguf found it undefined) and give a NaN the -32768 the
 * SIMD paths give it. A block holding an infinity has an infinite scale:
 * its finite values become 0, the infinity NaN and so -32768. */
static void test_quantize_act_nonfinite(void) {
    static float x[64];
    static int16_t q[64];
    float d[2], s[2];
    int32_t qs[2];
    for (int i = 0; i < 64; i++)
        x[i] = 0.5f * (float)(i % 9) - 2.0f;
    x[5] = NAN;
    x[40] = INFINITY;
    kern_quantize_act_scalar(x, 64, q, d, s, qs, 1);
    CHECK(q[5] == INT16_MIN, "NaN activation: %d", q[5]);
    CHECK(q[40] == INT16_MIN && q[41] == 0 && isinf(d[1]), "inf block: %d %d %g", q[40], q[41],
          (double)d[1]);
    int bad = 0;
    for (int i = 0; i < 32; i++)
        bad += i != 5 && q[i] == INT16_MIN;
    CHECK(bad == 0 && d[0] == 2.0f / 32767.0f, "finite values of the NaN block: %d bad, d %g", bad,
          (double)d[0]);
}

/* Weights of any int8 value, including -128, which no quantizer makes but a
 * GGUF Q8_0 block may hold, against the largest activations (+-32767): the
 * SIMD dot products must stay exact (|w| * |x| pairs summed in int32). */
static void test_q8_full_range(kern_pool *pool, kern_level top) {
    const int n_out = 37, n_in = 96, n_tok = 7;
    for (int ti = 0; ti < 2; ti++) {
        kern_type wt = ti ? KERN_TYPE_Q8_0M : KERN_TYPE_Q8_0;
        size_t rb = kern_row_bytes(wt, n_in), bb = kern_type_block_bytes(wt);
        uint8_t *w = malloc(rb * n_out);
        for (int o = 0; o < n_out; o++)
            for (int k = 0; k < n_in / 32; k++) {
                uint8_t *blk = w + rb * o + bb * k;
                uint16_t d = kern_fp32_to_fp16(0.01f + 0.02f * (float)rng_uniform());
                uint16_t m = kern_fp32_to_fp16((float)rng_normal() * 0.1f);
                memcpy(blk, &d, 2);
                if (wt == KERN_TYPE_Q8_0M)
                    memcpy(blk + 2, &m, 2);
                int8_t *qs = (int8_t *)(blk + (wt == KERN_TYPE_Q8_0M ? 4 : 2));
                for (int j = 0; j < 32; j++)
                    qs[j] = (o + k) % 3 == 0 ? (int8_t)-128 : (int8_t)(rng_u64() & 0xff);
            }
        float *x = malloc(sizeof(float) * n_tok * n_in), *y = malloc(sizeof(float) * n_tok * n_out);
        float *ref = malloc(sizeof(float) * n_tok * n_out);
        fill_normal(x, (size_t)n_tok * n_in, 1.0f);
        for (int i = 0; i < n_in; i++) /* token 0: every value +-amax, so every q is +-32767 */
            x[i] = i % 3 ? -1.5f : 1.5f;
        for (int i = n_in; i < 2 * n_in; i++) /* token 1: a row whose block max is negative */
            x[i] = -fabsf(x[i]);
        void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, n_tok) + 64) & ~(size_t)63);
        kern_matmul_ref(wt, w, n_out, n_in, x, n_tok, ref);
        for (int lv = lv_first(top); lv <= (int)top; lv++) {
            kern_cpu_set_max_level((kern_level)lv);
            kern_matmul(pool, wt, w, n_out, n_in, x, n_tok, y, ws);
            CHECK(memcmp(y, ref, sizeof(float) * n_tok * n_out) == 0,
                  "%s: %s with -128 weights not exact", kern_level_name((kern_level)lv),
                  kern_type_name(wt));
        }
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        free(w);
        free(x);
        free(y);
        free(ref);
        free(ws);
    }
}

/* Q4_0 / Q4_1 run the Q8_0 / Q8_0M arithmetic on q = nibble - 8 / nibble:
 * at every level a Q4 matrix must give exactly (memcmp) the result of the
 * Q8 matrix kern_requantize_row_q8 makes from it, and of the reference. The
 * blocks are random bytes, so every nibble value occurs in every position,
 * with random scales and offsets; the shapes cover every tile (1, 2-3, 4+
 * tokens), the layout tails (odd token counts, a row count that is no
 * multiple of any row tile) and the prompt path's converted scales (>= 16
 * tokens). */
static void test_q4_as_q8(kern_pool *pool, kern_level top) {
    const int outs[] = {1, 19, 61};
    const int ins[] = {32, 576};
    const int toks[] = {1, 2, 3, 4, 5, 7, 18, 33};
    int fails = 0, cases = 0;
    for (int ti = 0; ti < 2; ti++) {
        kern_type wt = ti ? KERN_TYPE_Q4_1 : KERN_TYPE_Q4_0, wt8 = kern_int8_type(wt);
        for (size_t oi = 0; oi < sizeof(outs) / sizeof(outs[0]); oi++)
            for (size_t ii = 0; ii < sizeof(ins) / sizeof(ins[0]); ii++)
                for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
                    int n_out = outs[oi], n_in = ins[ii], n_tok = toks[ki];
                    size_t rb = kern_row_bytes(wt, n_in), rb8 = kern_row_bytes(wt8, n_in);
                    size_t bb = kern_type_block_bytes(wt), n = (size_t)n_out * n_tok;
                    uint8_t *w = malloc(rb * n_out), *w8 = malloc(rb8 * n_out);
                    for (int o = 0; o < n_out; o++) {
                        for (int k = 0; k < n_in / 32; k++) {
                            uint8_t *blk = w + rb * o + bb * k;
                            uint16_t d = kern_fp32_to_fp16((0.5f + (float)rng_uniform()) / 64.0f);
                            uint16_t m = kern_fp32_to_fp16((float)rng_normal() * 0.1f);
                            memcpy(blk, &d, 2);
                            if (wt == KERN_TYPE_Q4_1)
                                memcpy(blk + 2, &m, 2);
                            for (size_t j = wt == KERN_TYPE_Q4_1 ? 4 : 2; j < bb; j++)
                                blk[j] = (uint8_t)rng_u64();
                        }
                        CHECK(kern_requantize_row_q8(wt, w + rb * o, w8 + rb8 * o, n_in) == 0,
                              "requantize");
                    }
                    float *x = malloc(sizeof(float) * n_tok * n_in),
                          *ref = malloc(sizeof(float) * n);
                    float *y = malloc(sizeof(float) * n), *y8 = malloc(sizeof(float) * n);
                    fill_normal(x, (size_t)n_tok * n_in, 1.0f);
                    void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, n_tok) + 64) &
                                                     ~(size_t)63);
                    kern_matmul_ref(wt8, w8, n_out, n_in, x, n_tok, ref);
                    kern_matmul_ref(wt, w, n_out, n_in, x, n_tok, y);
                    fails += memcmp(y, ref, n * sizeof(float)) != 0;
                    for (int lv = lv_first(top); lv <= (int)top; lv++) {
                        kern_cpu_set_max_level((kern_level)lv);
                        kern_matmul(pool, wt, w, n_out, n_in, x, n_tok, y, ws);
                        kern_matmul(pool, wt8, w8, n_out, n_in, x, n_tok, y8, ws);
                        if (memcmp(y, y8, n * sizeof(float)) != 0 ||
                            memcmp(y, ref, n * sizeof(float)) != 0) {
                            fails++;
                            fprintf(stderr, "  %s %s %dx%d tok %d: differs from %s\n",
                                    kern_type_name(wt), kern_level_name((kern_level)lv), n_out,
                                    n_in, n_tok, kern_type_name(wt8));
                        }
                    }
                    kern_cpu_set_max_level(KERN_LEVEL_TOP);
                    cases++;
                    free(w);
                    free(w8);
                    free(x);
                    free(ref);
                    free(y);
                    free(y8);
                    free(ws);
                }
    }
    printf(
        "q4_0/q4_1 vs their q8_0/q8_0m requantization: %d shapes x %d levels, %d differ (memcmp)\n",
        cases, (int)top + 1, fails);
    CHECK(fails == 0, "q4 matmul differs from its q8 requantization in %d cases", fails);
}

/* Accuracy of the int16 activations against exact arithmetic: y vs an f64
 * dot of the dequantized weights with the f32 activations, on activations
 * with outliers (one value in ~100 is 300x the rest, as in the residual
 * stream of small LLMs). A block with an outlier quantizes the others with a
 * step of ~600 / 32767 of their size; observed ~5e-5 (int8 activations,
 * with a 256x coarser step, would give ~1e-2). Bound: 1e-4. */
static void test_accuracy(kern_pool *pool, kern_level top) {
    const int n_out = 96, n_in = 576, n_tok = 9;
    for (int ti = 0; ti < N_INT_TYPES; ti++) {
        kern_type wt = k_int_types[ti];
        bufs b;
        make(&b, wt, n_out, n_in, n_tok);
        for (size_t i = 0; i < (size_t)n_tok * n_in; i++)
            if (rng_u64() % 100 == 0)
                b.x[i] *= 300.0f;
        size_t rb = kern_row_bytes(wt, n_in);
        float *row = malloc(sizeof(float) * n_in);
        for (int o = 0; o < n_out; o++) {
            kern_dequantize_row(wt, b.w + rb * o, row, n_in);
            for (int t = 0; t < n_tok; t++) {
                double s = 0.0;
                for (int i = 0; i < n_in; i++)
                    s += (double)row[i] * b.x[(size_t)t * n_in + i];
                b.ref[(size_t)t * n_out + o] = (float)s;
            }
        }
        free(row);
        for (int lv = lv_first(top); lv <= (int)top; lv++) {
            kern_cpu_set_max_level((kern_level)lv);
            kern_matmul(pool, wt, b.w, n_out, n_in, b.x, n_tok, b.y, b.ws);
            double e = norm_err(b.y, b.ref, (size_t)n_out * n_tok);
            if (lv == 0)
                printf("%s with activation outliers: normalised error %.2e vs exact (bound 1e-4)\n",
                       kern_type_name(wt), e);
            CHECK(e <= 1e-4, "%s %s: error %g vs exact > 1e-4", kern_level_name((kern_level)lv),
                  kern_type_name(wt), e);
        }
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        unmake(&b);
    }
}

/* The X8 form of a row-major matrix w of base type into wx. */
static void pack_x8(kern_type base, const uint8_t *w, int n_out, int n_in, uint8_t *wx) {
    const size_t rb = kern_row_bytes(base, n_in);
    for (int g = 0; g < (n_out + 7) / 8; g++) {
        const void *rows[8];
        int n = n_out - 8 * g < 8 ? n_out - 8 * g : 8;
        for (int r = 0; r < n; r++)
            rows[r] = w + rb * (size_t)(8 * g + r);
        kern_x8_pack_group(base, rows, n, n_in, wx, g);
    }
}

/* Random row-major blocks of base in w (fp16 scales d in [1/128, 3/128), an
 * offset m ~ N(0, 0.1) where the block has one, Q6_0S's second scale
 * negative, every other byte random, so every code value occurs) and their
 * X8 packing in wx (kern_x8_bytes of the X8 type). */
static void random_x8(kern_type base, int n_out, int n_in, uint8_t *w, uint8_t *wx) {
    const size_t rb = kern_row_bytes(base, n_in), bb = kern_type_block_bytes(base);
    const int ti = has_offset(base), s6 = base == KERN_TYPE_Q6_0S;
    for (int o = 0; o < n_out; o++)
        for (int k = 0; k < n_in / 32; k++) {
            uint8_t *blk = w + rb * o + bb * k;
            uint16_t d = kern_fp32_to_fp16((0.5f + (float)rng_uniform()) / 64.0f);
            uint16_t m = kern_fp32_to_fp16((float)rng_normal() * 0.1f);
            memcpy(blk, &d, 2);
            if (s6) /* db: another scale */
                m = kern_fp32_to_fp16((0.5f + (float)rng_uniform()) / -64.0f);
            if (ti || s6)
                memcpy(blk + 2, &m, 2);
            for (size_t j = ti || s6 ? 4 : 2; j < bb; j++)
                blk[j] = (uint8_t)rng_u64();
        }
    pack_x8(base, w, n_out, n_in, wx);
}

/* The X8 types (rows interleaved in groups of 8) must give exactly (memcmp)
 * the results of their row-major base type, at every level, with 1 and 2
 * threads, for every tile (1-3 token tiles, 8- and 16-row tiles, chunks of
 * groups larger than one task), row counts that are no multiple of 8 (the
 * padded group) and weights covering all of int8 including -128. Also:
 * kern_x8_get_row gives back each row, and kern_matmul_multi mixing X8 with
 * a row-major integer part at a short batch (the paired layout) is exact. */
static void test_x8(kern_pool *pool1, kern_pool *pool2, kern_level top) {
#if defined(__SANITIZE_THREAD__)
    /* Under TSan (races between the pool's threads, which every shape runs
     * through the same dispatch; the Release and ASan builds check the
     * numbers of all of them): a decode, a short and a long batch at a
     * partial and a many-task row count keep every kernel's task layout, in
     * a tenth of the 80 s the full sweep took. */
    const int outs[] = {7, 200};
    const int toks[] = {1, 4, 33};
    const int ins[] = {576};
#else
    const int outs[] = {1, 7, 19, 64, 200, 577};
    const int toks[] = {1, 2, 3, 4, 5, 6, 7, 10, 11, 16, 33};
    const int ins[] = {32, 576};
#endif
    int fails = 0, cases = 0;
    /* Q5_0, Q5_1 and IQ4_NL have X8 forms only: their row-major twin is the
     * exact int8 conversion (Q8_0 with q = code - 16, Q8_0M with q = code,
     * Q8_0 with q = the IQ4 table value). */
    static const kern_type bases[] = {KERN_TYPE_Q8_0,   KERN_TYPE_Q8_0M, KERN_TYPE_Q4_0,
                                      KERN_TYPE_Q4_1,   KERN_TYPE_Q5_0,  KERN_TYPE_Q5_1,
                                      KERN_TYPE_IQ4_NL, KERN_TYPE_Q6_0S};
    for (int bi = 0; bi < 8; bi++) {
        kern_type base = bases[bi], x8 = kern_x8_type(base);
        const int q5 = base == KERN_TYPE_Q5_0 || base == KERN_TYPE_Q5_1 || base == KERN_TYPE_IQ4_NL;
        /* Q6_0S (two scales per block) has no int8 twin: the reference runs
         * its X8 form block by block (kern_matmul.c q8_block_acc). */
        const int s6 = base == KERN_TYPE_Q6_0S;
        const kern_type twin = q5 ? kern_int8_type(base) : s6 ? x8 : base;
        CHECK(kern_type_is_x8(x8) && kern_x8_base(x8) == base && !kern_type_is_x8(base),
              "x8 type mapping");
        for (size_t oi = 0; oi < sizeof(outs) / sizeof(outs[0]); oi++)
            for (size_t ii = 0; ii < sizeof(ins) / sizeof(ins[0]); ii++) {
                int n_out = outs[oi], n_in = ins[ii];
                size_t rb = kern_row_bytes(base, n_in);
                uint8_t *w = malloc(rb * n_out), *wx = malloc(kern_x8_bytes(x8, n_out, n_in)),
                        *row = malloc(rb);
                random_x8(base, n_out, n_in, w, wx);
                for (int o = 0; o < n_out; o++) {
                    kern_x8_get_row(x8, wx, n_in, o, row);
                    fails += memcmp(row, w + rb * o, rb) != 0;
                }
                const size_t trb = kern_row_bytes(twin, n_in);
                uint8_t *tw = s6 ? wx : w;
                if (q5) {
                    tw = malloc(trb * n_out);
                    for (int o = 0; o < n_out; o++)
                        fails += kern_requantize_row_q8(base, w + rb * o, tw + trb * o, n_in) != 0;
                }
                for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
                    int n_tok = toks[ki];
                    size_t n = (size_t)n_out * n_tok;
                    float *x = malloc(sizeof(float) * n_tok * n_in),
                          *ref = malloc(sizeof(float) * n);
                    float *y = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n);
                    fill_normal(x, (size_t)n_tok * n_in, 1.0f);
                    void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(x8, n_in, n_tok) + 64) &
                                                     ~(size_t)63);
                    kern_matmul_ref(twin, tw, n_out, n_in, x, n_tok, ref);
                    kern_matmul_ref(x8, wx, n_out, n_in, x, n_tok, y);
                    fails += memcmp(y, ref, n * sizeof(float)) != 0;
                    for (int lv = lv_first(top); lv <= (int)top; lv++) {
                        kern_cpu_set_max_level((kern_level)lv);
                        for (int th = 0; th < 2; th++) {
                            kern_matmul(th ? pool2 : pool1, x8, wx, n_out, n_in, x, n_tok, y, ws);
                            if (memcmp(y, ref, n * sizeof(float)) != 0) {
                                fails++;
                                fprintf(stderr,
                                        "  %s %s %dx%d tok %d, %d threads: differs from %s\n",
                                        kern_type_name(x8), kern_level_name((kern_level)lv), n_out,
                                        n_in, n_tok, th + 1, kern_type_name(base));
                            }
                        }
                        /* One X8 part beside its row-major twin. */
                        kern_matmul_part parts[2] = {{x8, wx, n_out, y}, {twin, tw, n_out, y2}};
                        kern_matmul_multi(pool2, parts, 2, n_in, x, n_tok, ws);
                        fails += memcmp(y, ref, n * sizeof(float)) != 0 ||
                                 memcmp(y2, ref, n * sizeof(float)) != 0;
                    }
                    kern_cpu_set_max_level(KERN_LEVEL_TOP);
                    cases++;
                    free(x);
                    free(ref);
                    free(y);
                    free(y2);
                    free(ws);
                }
                if (tw != w && tw != wx)
                    free(tw);
                free(w);
                free(wx);
                free(row);
            }
    }
    printf("x8 types vs q8_0/q8_0m/q4_0/q4_1 (q5_0/q5_1/iq4_nl vs their int8 twins, q6_0s vs the "
           "reference): %d shapes x %d "
           "levels x 1-2 threads, %d differ "
           "(memcmp)\n",
           cases, (int)top + 1 - lv_first(top), fails);
    CHECK(fails == 0, "X8 matmul differs from its base type in %d cases", fails);
}

/* The AVX-512 long-batch X8 tiles (kern_avx512_x8.h: from
 * KERN_X8_WIDE_MIN_TOK tokens a chunk of groups is decoded once into
 * per-thread scratch) must give the reference's bits like the plain tiles:
 * every 4-bit-form type, token counts at and past the threshold with every
 * remainder tile (6k + 0..5), row counts leaving a padded group and a
 * partial chunk, n_in = 8192 (4 groups to a chunk, so a task's rows span
 * several chunks) and 640 (Gemma 3's width), 1 and 2 threads; and without a
 * pool (no scratch: the plain tiles) the same bits again. */
static void test_x8_wide(kern_pool *pool1, kern_pool *pool2, kern_level top) {
    if (top < KERN_LEVEL_AVX512) {
        printf("skip x8 long-batch tiles: this CPU has no AVX-512\n");
        return;
    }
    static const kern_type bases[] = {KERN_TYPE_Q4_0, KERN_TYPE_Q4_1,   KERN_TYPE_Q5_0,
                                      KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q6_0S,
                                      KERN_TYPE_Q8_0};
    const int outs[] = {200, 37}, ins[] = {8192, 640}, toks[] = {32, 37, 40, 45};
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* Sanitized builds, and the emulated AVX-512 run (tens of times slower):
     * the chunk-spanning shape at one token count for Q6_0S, Gemma's
     * width at the threshold and past a remainder, the top level, one thread. */
    const int small = 1;
#else
    const int small = 0;
#endif
    int fails = 0, cases = 0;
    for (size_t bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++)
        for (size_t oi = 0; oi < 2; oi++)
            for (size_t ii = 0; ii < 2; ii++) {
                const kern_type base = bases[bi], x8 = kern_x8_type(base);
                const int n_out = outs[oi], n_in = ins[ii];
                const size_t rb = kern_row_bytes(base, n_in);
                uint8_t *w = malloc(rb * n_out), *wx = malloc(kern_x8_bytes(x8, n_out, n_in));
                random_x8(base, n_out, n_in, w, wx);
                for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
                    const int n_tok = toks[ki];
                    /* small: the chunk-spanning shape (chunking is the same code for
                     * every type) for the type with the most decode work */
                    const int span_type = base == KERN_TYPE_Q6_0S;
                    if (small && !(span_type && n_out == 200 && n_in == 8192 && n_tok == 37) &&
                        !(n_out == 37 && n_in == 640 && (n_tok == 32 || n_tok == 45)))
                        continue;
#if defined(__SANITIZE_THREAD__)
                    /* TSan: the threads' scratch at Gemma's width is enough
                     * (the chunk-spanning shape's numbers are ASan's). */
                    if (n_in == 8192)
                        continue;
#endif
                    const size_t n = (size_t)n_out * n_tok;
                    float *x = malloc(sizeof(float) * n_tok * n_in),
                          *ref = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
                    fill_normal(x, (size_t)n_tok * n_in, 1.0f);
                    void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(x8, n_in, n_tok) + 64) &
                                                     ~(size_t)63);
                    kern_matmul_ref(x8, wx, n_out, n_in, x, n_tok, ref);
                    for (int lv = small ? (int)top : KERN_LEVEL_AVX512; lv <= (int)top; lv++) {
                        kern_cpu_set_max_level((kern_level)lv);
                        for (int th = 0; th < (small ? 1 : 3); th++) {
                            kern_pool *pool = th == 0 ? pool1 : th == 1 ? pool2 : NULL;
                            memset(y, 0xff, sizeof(float) * n);
                            kern_matmul(pool, x8, wx, n_out, n_in, x, n_tok, y, ws);
                            if (memcmp(y, ref, n * sizeof(float)) != 0) {
                                fails++;
                                fprintf(stderr, "  %s %s %dx%d tok %d, pool %d: differs\n",
                                        kern_type_name(x8), kern_level_name((kern_level)lv), n_out,
                                        n_in, n_tok, th);
                            }
                        }
                    }
                    kern_cpu_set_max_level(KERN_LEVEL_TOP);
                    cases++;
                    free(x);
                    free(ref);
                    free(y);
                    free(ws);
                }
                free(w);
                free(wx);
            }
    CHECK(kern_pool_scratch_bytes(pool1) >= KERN_X8_WIDE_BYTES &&
              kern_pool_scratch(pool1, 0) != NULL,
          "the long-batch tiles reserved no scratch");
    printf("x8 long-batch tiles vs the reference: %d shapes x %d levels x %d pools, %d differ "
           "(memcmp)\n",
           cases, small ? 1 : (int)top + 1 - KERN_LEVEL_AVX512, small ? 1 : 3, fails);
    CHECK(fails == 0, "X8 long-batch tiles differ from the reference in %d cases", fails);
}

/* The float kernels of every SIMD level from AVX2 up share one arithmetic
 * (8-lane accumulators in input order, hsum8, the tail): the same bits at
 * every level, every tile shape (token counts 1-17, row counts that leave
 * partial tiles, n_in with a tail), 1 and 2 threads, so the kernel choice
 * may mix levels by batch size. */
static void test_float_levels_agree(kern_pool *pool1, kern_pool *pool2, kern_level top) {
    static const kern_type types[] = {KERN_TYPE_F32, KERN_TYPE_F16, KERN_TYPE_BF16};
    const int outs[] = {1, 7, 37, 200}, ins[] = {8, 44, 576}, toks[] = {1, 2, 3, 5, 8, 9, 16, 17};
    int fails = 0, cases = 0;
    if (top < KERN_LEVEL_AVX512) {
        printf("skip float level agreement: this CPU has no AVX-512 (one x86 SIMD float kernel "
               "set)\n");
        return;
    }
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t oi = 0; oi < sizeof(outs) / sizeof(outs[0]); oi++)
            for (size_t ii = 0; ii < sizeof(ins) / sizeof(ins[0]); ii++)
                for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
                    int n_out = outs[oi], n_in = ins[ii], n_tok = toks[ki];
                    bufs b;
                    make(&b, types[ti], n_out, n_in, n_tok);
                    kern_cpu_set_max_level(KERN_LEVEL_AVX2);
                    kern_matmul(pool1, types[ti], b.w, n_out, n_in, b.x, n_tok, b.ref, b.ws);
                    for (int lv = KERN_LEVEL_AVX512; lv <= (int)top; lv++) {
                        kern_cpu_set_max_level((kern_level)lv);
                        for (int th = 0; th < 2; th++) {
                            kern_matmul(th ? pool2 : pool1, types[ti], b.w, n_out, n_in, b.x, n_tok,
                                        b.y, b.ws);
                            if (memcmp(b.y, b.ref, sizeof(float) * n_out * n_tok) != 0) {
                                fails++;
                                fprintf(stderr, "  %s %s %dx%d tok %d: differs from avx2\n",
                                        kern_level_name((kern_level)lv), kern_type_name(types[ti]),
                                        n_out, n_in, n_tok);
                            }
                        }
                    }
                    cases++;
                    unmake(&b);
                }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    printf("float kernels, avx512 levels vs avx2: %d shapes, %d differ (memcmp)\n", cases, fails);
    CHECK(fails == 0, "AVX-512 float kernels differ from AVX2 in %d cases", fails);
}

/* The default kernel choice (KERN_PICK_TABLE) mixes levels by weight type
 * and batch size: for every type (row-major and X8), the batch sizes of a
 * decode step and of a prompt give exactly the reference's bits (integer
 * types) or the top level's own bits (float types, whose kernels share one
 * arithmetic), and one token at a time equals the batch. */
static void test_table(kern_pool *pool1, kern_pool *pool2, kern_level top) {
    static const kern_type types[] = {KERN_TYPE_F32,    KERN_TYPE_F16,      KERN_TYPE_BF16,
                                      KERN_TYPE_Q8_0,   KERN_TYPE_Q8_0M,    KERN_TYPE_Q4_0,
                                      KERN_TYPE_Q4_1,   KERN_TYPE_Q8_0X8,   KERN_TYPE_Q8_0MX8,
                                      KERN_TYPE_Q4_0X8, KERN_TYPE_Q4_1X8,   KERN_TYPE_Q5_0X8,
                                      KERN_TYPE_Q5_1X8, KERN_TYPE_IQ4_NLX8, KERN_TYPE_Q6_0SX8};
    const int n_out = 200, n_in = 576, toks[] = {1, 2, 3, 5, 9, 10, 16, 37};
    int fails = 0;
    kern_cpu_set_max_level(top);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const kern_type wt = types[ti], base = kern_x8_base(wt);
        const size_t rb = kern_row_bytes(base, n_in);
        uint8_t *w = malloc(rb * n_out), *wx = malloc(kern_x8_bytes(wt, n_out, n_in));
        float *row = malloc(sizeof(float) * n_in);
        const int q5 = base == KERN_TYPE_Q5_0 || base == KERN_TYPE_Q5_1 ||
                       base == KERN_TYPE_IQ4_NL || base == KERN_TYPE_Q6_0S;
        for (int o = 0; o < n_out; o++) {
            fill_normal(row, n_in, 1.0f / 24.0f);
            if (!q5) {
                kern_quantize_row(base, row, w + rb * o, n_in);
                continue;
            }
            /* No quantizer for Q5_*: random codes, d ~ 1/24 / 16, m ~ -d * 16. */
            const size_t bb = kern_type_block_bytes(base);
            for (int k = 0; k < n_in / 32; k++) {
                uint8_t *blk = w + rb * o + bb * (size_t)k;
                for (size_t j = 0; j < bb; j++)
                    blk[j] = (uint8_t)rng_u64();
                float d = (0.5f + (float)rng_uniform()) / 384.0f;
                uint16_t dh = kern_fp32_to_fp16(d), mh = kern_fp32_to_fp16(-16.0f * d);
                memcpy(blk, &dh, 2);
                if (base == KERN_TYPE_Q5_1)
                    memcpy(blk + 2, &mh, 2);
                if (base == KERN_TYPE_Q6_0S) /* da, db: both scales, codes - 32 centred */
                    memcpy(blk + 2, &dh, 2);
            }
        }
        const uint8_t *W = w;
        if (wt != base) {
            pack_x8(base, w, n_out, n_in, wx);
            W = wx;
        }
        const int n_max = 37;
        float *x = malloc(sizeof(float) * n_max * n_in), *y = malloc(sizeof(float) * n_max * n_out);
        float *y1 = malloc(sizeof(float) * n_out), *want = malloc(sizeof(float) * n_max * n_out);
        void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, n_max) + 64) & ~(size_t)63);
        fill_normal(x, (size_t)n_max * n_in, 1.0f);
        if (kern_is_int_weight(wt)) {
            kern_matmul_ref(q5 ? wt : base, q5 ? W : w, n_out, n_in, x, n_max, want);
        } else { /* the top level's own kernels */
            kern_cpu_set_pick(KERN_PICK_LEVEL);
            kern_matmul(pool2, wt, W, n_out, n_in, x, n_max, want, ws);
        }
        kern_cpu_set_pick(KERN_PICK_TABLE);
        for (size_t k = 0; k < sizeof(toks) / sizeof(toks[0]); k++) {
            kern_matmul(pool2, wt, W, n_out, n_in, x, toks[k], y, ws);
            if (memcmp(y, want, sizeof(float) * toks[k] * n_out) != 0) {
                fails++;
                fprintf(stderr, "  table: %s %d tokens (level %s) differs\n", kern_type_name(wt),
                        toks[k], kern_level_name(kern_matmul_level(wt, toks[k])));
            }
        }
        for (int t = 0; t < n_max; t += 7) {
            kern_matmul(pool1, wt, W, n_out, n_in, x + (size_t)t * n_in, 1, y1, ws);
            fails += memcmp(y1, want + (size_t)t * n_out, sizeof(float) * n_out) != 0;
        }
        kern_cpu_set_pick(KERN_PICK_LEVEL);
        free(w);
        free(wx);
        free(row);
        free(x);
        free(y);
        free(y1);
        free(want);
        free(ws);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    printf("kernel table at %s: 15 types x 8 batch sizes, %d differ\n", kern_level_name(top),
           fails);
    CHECK(fails == 0, "the default kernel choice breaks exactness or batch invariance in %d cases",
          fails);
}

/* Every kind's row of the kernel table (kern_table.c, forced with
 * kern_cpu_set_uarch) at every level from avx512 to this CPU's (the X8 rows
 * differ with and without VNNI): for each weight type the CPU backend runs
 * and every batch size 1-70, the pick is at most the level, and the
 * results are the reference's bits (integer types) or the level's own
 * kernels' bits (float types: AVX2 and AVX-512 share one arithmetic), so
 * every batch size agrees with every other (memcmp). A CPU without AVX-512
 * never reads the rows (its level only). Emulated runs (KERN_TEST_MIN_LEVEL)
 * take a dozen batch sizes around the rows' switches. */
static void test_table_rows(kern_pool *pool, kern_level top) {
    static const kern_type types[] = {
        KERN_TYPE_F32,    KERN_TYPE_F16,      KERN_TYPE_BF16,   KERN_TYPE_Q8_0,   KERN_TYPE_Q4_1,
        KERN_TYPE_Q8_0X8, KERN_TYPE_Q8_0MX8,  KERN_TYPE_Q4_0X8, KERN_TYPE_Q4_1X8, KERN_TYPE_Q5_0X8,
        KERN_TYPE_Q5_1X8, KERN_TYPE_IQ4_NLX8, KERN_TYPE_Q6_0SX8};
    static const int sparse[] = {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 33, 70};
    const int n_out = 40, n_in = 256, n_max = 70, full = test_min_level() == 0;
    const int n_toks = full ? n_max : (int)(sizeof(sparse) / sizeof(sparse[0]));
    const kern_level lo = top < KERN_LEVEL_AVX512 ? top : KERN_LEVEL_AVX512;
    int above = 0, differ = 0, runs = 0;
    const double t0 = now_sec();
    float *x = malloc(sizeof(float) * n_max * n_in), *want = malloc(sizeof(float) * n_max * n_out);
    float *y = malloc(sizeof(float) * n_max * n_out), *row = malloc(sizeof(float) * n_in);
    fill_normal(x, (size_t)n_max * n_in, 1.0f);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const kern_type wt = types[ti], base = kern_x8_base(wt);
        const size_t rb = kern_row_bytes(base, n_in);
        uint8_t *w = malloc(rb * n_out), *wx = malloc(kern_x8_bytes(wt, n_out, n_in));
        void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, n_max) + 64) & ~(size_t)63);
        if (wt != base) {
            random_x8(base, n_out, n_in, w, wx);
        } else {
            for (int o = 0; o < n_out; o++) {
                fill_normal(row, n_in, 1.0f / 24.0f);
                kern_quantize_row(base, row, w + rb * o, n_in);
            }
        }
        const uint8_t *W = wt != base ? wx : w;
        if (kern_is_int_weight(wt))
            kern_matmul_ref(wt, W, n_out, n_in, x, n_max, want);
        for (int lv = lo; lv <= (int)top; lv++) {
            kern_cpu_set_max_level((kern_level)lv);
            if (!kern_is_int_weight(wt)) { /* the level's own float kernels */
                kern_cpu_set_pick(KERN_PICK_LEVEL);
                kern_matmul(pool, wt, W, n_out, n_in, x, n_max, want, ws);
            }
            kern_cpu_set_pick(KERN_PICK_TABLE);
            for (int u = 0; u < KERN_UARCH_COUNT; u++) {
                kern_cpu_set_uarch(u);
                for (int k = 0; k < n_toks; k++) {
                    const int n = full ? k + 1 : sparse[k];
                    const kern_level pick = kern_matmul_level(wt, n);
                    above += pick > (kern_level)lv;
                    memset(y, 0xff, sizeof(float) * n * n_out);
                    kern_matmul(pool, wt, W, n_out, n_in, x, n, y, ws);
                    runs++;
                    if (memcmp(y, want, sizeof(float) * n * n_out) != 0) {
                        differ++;
                        fprintf(stderr, "  row %s at %s: %s %d tokens (%s) differs\n",
                                kern_uarch_name((kern_uarch)u), kern_level_name((kern_level)lv),
                                kern_type_name(wt), n, kern_level_name(pick));
                    }
                }
            }
            kern_cpu_set_uarch(-1);
            kern_cpu_set_pick(KERN_PICK_LEVEL);
        }
        free(w);
        free(wx);
        free(ws);
    }
    kern_cpu_set_max_level(KERN_LEVEL_TOP);
    free(x);
    free(want);
    free(y);
    free(row);
    printf("kernel table rows: %d kinds x levels %s-%s x %zu types x %d batch sizes (%d runs): %d "
           "picks above the level, %d differ (%.1f s)\n",
           (int)KERN_UARCH_COUNT, kern_level_name(lo), kern_level_name(top),
           sizeof(types) / sizeof(types[0]), n_toks, runs, above, differ, now_sec() - t0);
    CHECK(above == 0, "a table row picks above the level in %d cases", above);
    CHECK(differ == 0, "a table row breaks exactness or batch invariance in %d cases", differ);
}

/* The AMX level (kern_matmul_amx.c): every X8 form, the exact block sums
 * of the high/low split at its extremes (token 0: every q = +-32767; token
 * 1: a NaN per block, q = -32768 = 256 * -128; token 2: small negative
 * values, high byte -1 and a borrow in the low one), weights over all of
 * int8 (random bytes), a row count leaving a lone group in the last tile,
 * one full token tile and a tail, with 1 and 2 threads and without a pool
 * (the VNNI fallback): the reference's bits (memcmp), and the tiles must
 * have run. Then the default table across its switch from VNNI to AMX
 * (KERN_AMX_MIN_TOK): each token's row of a 15-, 16-, 17- and 33-token call
 * equals that token alone (batch invariance, memcmp). */
static void test_amx(kern_pool *pool1, kern_pool *pool2, kern_level top) {
    if (top < KERN_LEVEL_AMX) {
        printf("skip amx tiles: this CPU has no AMX (tests/tools/run_emu512.sh runs them "
               "emulated)\n");
        return;
    }
    static const kern_type bases[] = {KERN_TYPE_Q8_0,   KERN_TYPE_Q8_0M, KERN_TYPE_Q4_0,
                                      KERN_TYPE_Q4_1,   KERN_TYPE_Q5_0,  KERN_TYPE_Q5_1,
                                      KERN_TYPE_IQ4_NL, KERN_TYPE_Q6_0S};
    const int n_out = 37, n_in = 96, toks[] = {1, 15, 16, 17, 33};
    const int n_tok_max = 33;
    int fails = 0, inv_fails = 0;
    const long runs0 = kern_amx_runs();
    for (size_t bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++) {
        const kern_type base = bases[bi], x8 = kern_x8_type(base);
        uint8_t *w = malloc(kern_row_bytes(base, n_in) * n_out),
                *wx = malloc(kern_x8_bytes(x8, n_out, n_in));
        random_x8(base, n_out, n_in, w, wx);
        float *x = malloc(sizeof(float) * n_tok_max * n_in);
        fill_normal(x, (size_t)n_tok_max * n_in, 1.0f);
        for (int i = 0; i < n_in; i++) {
            x[i] = i % 3 ? -1.5f : 1.5f;
            if (i % 32 == 7)
                x[n_in + i] = NAN;
            x[2 * n_in + i] = i % 32 == 0 ? -1.0f : -(float)rng_uniform() * 0.004f;
        }
        const size_t n = (size_t)n_out * n_tok_max;
        float *ref = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n),
              *one = malloc(sizeof(float) * n_out);
        void *ws =
            aligned_alloc(64, (kern_matmul_ws_bytes(x8, n_in, n_tok_max) + 64) & ~(size_t)63);
        kern_matmul_ref(x8, wx, n_out, n_in, x, n_tok_max, ref);
        kern_cpu_set_max_level(KERN_LEVEL_AMX);
        for (size_t ki = 0; ki < sizeof(toks) / sizeof(toks[0]); ki++)
            for (int th = 0; th < 3; th++) {
                kern_pool *pool = th == 0 ? pool1 : th == 1 ? pool2 : NULL;
                memset(y, 0xff, sizeof(float) * n);
                kern_matmul(pool, x8, wx, n_out, n_in, x, toks[ki], y, ws);
                if (memcmp(y, ref, sizeof(float) * n_out * toks[ki]) != 0) {
                    fails++;
                    fprintf(stderr, "  amx %s tok %d pool %d: differs from the reference\n",
                            kern_type_name(x8), toks[ki], th);
                }
            }
        kern_cpu_set_pick(KERN_PICK_TABLE);
        for (size_t ki = 1; ki < sizeof(toks) / sizeof(toks[0]); ki++) {
            kern_matmul(pool2, x8, wx, n_out, n_in, x, toks[ki], y, ws);
            for (int t = 0; t < toks[ki]; t++) {
                kern_matmul(pool2, x8, wx, n_out, n_in, x + (size_t)t * n_in, 1, one, ws);
                if (memcmp(one, y + (size_t)t * n_out, sizeof(float) * n_out) != 0) {
                    inv_fails++;
                    fprintf(stderr, "  table %s tok %d of %d: differs from it alone\n",
                            kern_type_name(x8), t, toks[ki]);
                    break;
                }
            }
        }
        kern_cpu_set_pick(KERN_PICK_LEVEL);
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        free(w);
        free(wx);
        free(x);
        free(ref);
        free(y);
        free(one);
        free(ws);
    }
    /* kern_matmul_multi mixing a row-major integer part with X8 parts at
     * batch sizes that run AMX, its workspace sized by the row-major type
     * (the contract: any part's type): each part as kern_matmul alone. */
    {
        const int n_in2 = 128, outs2[3] = {40, 37, 24}, toks2[] = {16, 33};
        uint8_t *w8 = malloc(kern_row_bytes(KERN_TYPE_Q8_0, n_in2) * outs2[0]),
                *w8x = malloc(kern_x8_bytes(KERN_TYPE_Q8_0X8, outs2[0], n_in2)),
                *w8b = malloc(kern_row_bytes(KERN_TYPE_Q8_0, n_in2) * outs2[1]),
                *w8bx = malloc(kern_x8_bytes(KERN_TYPE_Q8_0X8, outs2[1], n_in2)),
                *w4 = malloc(kern_row_bytes(KERN_TYPE_Q4_1, n_in2) * outs2[2]),
                *w4x = malloc(kern_x8_bytes(KERN_TYPE_Q4_1X8, outs2[2], n_in2));
        random_x8(KERN_TYPE_Q8_0, outs2[0], n_in2, w8, w8x);
        random_x8(KERN_TYPE_Q8_0, outs2[1], n_in2, w8b, w8bx);
        random_x8(KERN_TYPE_Q4_1, outs2[2], n_in2, w4, w4x);
        float *x = malloc(sizeof(float) * 33 * n_in2), *y[3], *r = malloc(sizeof(float) * 33 * 40);
        for (int p = 0; p < 3; p++)
            y[p] = malloc(sizeof(float) * 33 * outs2[p]);
        fill_normal(x, (size_t)33 * n_in2, 1.0f);
        kern_matmul_part parts[3] = {
            {.wt = KERN_TYPE_Q8_0, .W = w8, .n_out = outs2[0], .y = y[0]},
            {.wt = KERN_TYPE_Q8_0X8, .W = w8bx, .n_out = outs2[1], .y = y[1]},
            {.wt = KERN_TYPE_Q4_1X8, .W = w4x, .n_out = outs2[2], .y = y[2]}};
        kern_cpu_set_max_level(KERN_LEVEL_AMX);
        for (int k = 0; k < 2; k++) {
            const int nt = toks2[k];
            void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(KERN_TYPE_Q8_0, n_in2, nt) + 64) &
                                             ~(size_t)63);
            kern_matmul_multi(pool2, parts, 3, n_in2, x, nt, ws);
            for (int p = 0; p < 3; p++) {
                kern_matmul(pool1, parts[p].wt, parts[p].W, outs2[p], n_in2, x, nt, r, ws);
                if (memcmp(r, y[p], sizeof(float) * nt * outs2[p]) != 0) {
                    fails++;
                    fprintf(stderr, "  amx multi part %d tok %d: differs from alone\n", p, nt);
                }
            }
            free(ws);
        }
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        free(w8);
        free(w8x);
        free(w8b);
        free(w8bx);
        free(w4);
        free(w4x);
        free(x);
        free(r);
        for (int p = 0; p < 3; p++)
            free(y[p]);
    }
    const long ran = kern_amx_runs() - runs0;
    printf("amx tiles: %zu forms x %zu token counts x 3 pools vs the reference, %d differ; "
           "table across the amx switch, %d differ (memcmp); tile runs %ld\n",
           sizeof(bases) / sizeof(bases[0]), sizeof(toks) / sizeof(toks[0]), fails, inv_fails, ran);
    CHECK(fails == 0, "AMX tiles differ from the reference in %d cases", fails);
    CHECK(inv_fails == 0, "the table breaks batch invariance across the AMX switch (%d)",
          inv_fails);
    CHECK(ran > 0, "the AMX tiles never ran (every call fell back)");
}

int main(void) {
    kern_level top = detected_level();
    printf("detected level: %s\n", kern_level_name(top));
    if (test_min_level() > 0)
        printf("levels below %s skipped (KERN_TEST_MIN_LEVEL)\n",
               kern_level_name((kern_level)test_min_level()));
    kern_pool *pool1 = kern_pool_create(1), *pool2 = kern_pool_create(2);
    double t = now_sec();
    /* Each level's own kernels for everything, so that a sweep checks every
     * kernel; test_table then checks the default choice. */
    kern_cpu_set_pick(KERN_PICK_LEVEL);
    /* From the amx level up (the AMX-only emulated run, run_emu512.sh) only
     * the tests of X8 weights: nothing else has AMX code. */
    const int amx_only = test_min_level() >= KERN_LEVEL_AMX;
    if (!amx_only) {
        test_quantize_act(top);
        test_quantize_act_nonfinite();
        test_q8_full_range(pool2, top);
        test_q4_as_q8(pool2, top);
        test_accuracy(pool2, top);
        test_vs_ref(pool2, top);
        test_long_rows(pool1, top);
        test_odd_n_in(pool2, top);
        test_invariance(pool1, pool2, top);
        test_multi(pool1, pool2, top);
    }
    test_x8(pool1, pool2, top);
    test_x8_wide(pool1, pool2, top);
    if (!amx_only)
        test_float_levels_agree(pool1, pool2, top);
    test_table(pool1, pool2, top);
    test_table_rows(pool2, top);
    test_amx(pool1, pool2, top);
    printf("(%.1f s)\n", now_sec() - t);
    kern_pool_free(pool1);
    kern_pool_free(pool2);
    return finish("test_kern_matmul");
}
