/* kern_bench.c - CPU kernel micro-benchmark: read bandwidth (the decode
 * roofline), matmul GEMV GB/s per weight type, Q8_0 at the batch sizes of a
 * decode step (1-24 tokens; row-major and the row-interleaved X8 form), integer-weight (Q8_0, Q8_0M, Q4_0, Q4_1) GEMM
 * GOP/s on the SmolLM2-135M shapes, decode attention over a paged cache,
 * pool dispatch cost. Built by CMake with the rest (build/bin/kern_bench).
 * Usage: kern_bench [threads [section]]   (BRISK_CPU_LEVEL caps the SIMD level;
 * section: gemv, step, attn, kvq, gemm, gemma or amx runs that one alone (amx:
 * the AMX tile peak and the X8 GEMMs at avx512vnni and amx; one skip line
 * without AMX); "levels" times every
 * SIMD level's own kernels side by side per weight type and batch size against
 * the kernel table's default, the evidence for the table: not part of the
 * default run; `kern_bench T levels [ROUNDS [TYPE,...]]`, bench/kern_table.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One decode step's attention for SmolLM2-135M's shape (30 layers, 9 query
 * heads over 3 KV heads of 64) and n_seq sequences of ctx positions each, on
 * one thread: f32 K/V in 16-position blocks placed in shuffled order (as a
 * paged pool fills), random values, every (sequence, layer) its own blocks
 * so the cache comes from memory as in a server. Best of reps, ms. */
static double bench_attention(int n_seq, int ctx, int reps, int per_head, int f16) {
    const int n_layers = 30, n_kv = 3, group = 3, hd = 64, bs = 16;
    const int nblk = (ctx + bs - 1) / bs, total = n_seq * n_layers * nblk;
    const size_t row = (size_t)n_kv * hd, bstride = row * bs, n_el = bstride * (size_t)total;
    /* On 2 MiB pages where THP allows, as brisk's KV pool is. */
    const size_t huge = (size_t)2 << 20, kvb = (n_el * sizeof(float) + huge - 1) & ~(huge - 1);
    float *k = aligned_alloc(huge, kvb), *v = aligned_alloc(huge, kvb);
#ifdef MADV_HUGEPAGE
    if (getenv("KB_NO_THP") == NULL && k && v) {
        (void)madvise(k, kvb, MADV_HUGEPAGE);
        (void)madvise(v, kvb, MADV_HUGEPAGE);
    }
#endif
    int32_t *table = malloc((size_t)total * sizeof(int32_t));
    float *q = malloc((size_t)n_kv * group * hd * sizeof(float)),
          *out = malloc((size_t)n_kv * group * hd * sizeof(float));
    float *scratch = malloc((size_t)group * ctx * sizeof(float));
    double best = 0.0;
    if (k && v && table && q && out && scratch) {
        uint64_t x = 0x9E3779B97F4A7C15ULL;
        for (size_t i = 0; i < n_el; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            k[i] = (float)((int)(x >> 40 & 0xffff) - 32768) / 32768.0f;
            v[i] = (float)((int)(x >> 24 & 0xffff) - 32768) / 32768.0f;
        }
        for (int i = 0; i < n_kv * group * hd; i++)
            q[i] = k[(size_t)i * 7919 % n_el];
        for (int i = 0; i < total; i++)
            table[i] = i;
        for (int i = total - 1; i > 0; i--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int j = (int)(x % (uint64_t)(i + 1)), t = table[i];
            table[i] = table[j], table[j] = t;
        }
        /* An f16 cache: the same values rounded, in the first half of k/v. */
        uint16_t *k16 = (uint16_t *)k, *v16 = (uint16_t *)v;
        if (f16)
            for (size_t i = 0; i < n_el; i++) {
                k16[i] = kern_fp32_to_fp16(k[i]);
                v16[i] = kern_fp32_to_fp16(v[i]);
            }
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t = now_s();
            for (int l = 0; l < n_layers; l++)
                for (int s = 0; s < n_seq; s++) {
                    kern_kv_view view = {.k = f16 ? NULL : k,
                                         .v = f16 ? NULL : v,
                                         .block_table = table + (size_t)(l * n_seq + s) * nblk,
                                         .block_size = bs,
                                         .block_stride = bstride,
                                         .row_stride = row,
                                         .k16 = f16 ? k16 : NULL,
                                         .v16 = f16 ? v16 : NULL};
                    if (per_head) /* one call per KV head, as a task per group does */
                        for (int g = 0; g < n_kv; g++)
                            kern_attention_rows_gqa(out + g * group * hd, (size_t)n_kv * group * hd,
                                                    q + g * group * hd, (size_t)n_kv * group * hd,
                                                    1, group, ctx - 1, &view, g, hd, 0.125f,
                                                    scratch);
                    else /* a decode step's task per sequence */
                        kern_attention_rows_all(out, (size_t)n_kv * group * hd, q,
                                                (size_t)n_kv * group * hd, 1, n_kv * group, n_kv,
                                                ctx - 1, &view, hd, 0.125f, scratch);
                }
            t = now_s() - t;
            best = t < best ? t : best;
        }
    }
    free(k);
    free(v);
    free(table);
    free(q);
    free(out);
    free(scratch);
    return best * 1e3;
}

/* The "kvq" section: one sequence's decode attention over a cache of each
 * dtype (kern_kv.h) for SmolLM2-135M's shape (30 layers, 9 query heads over
 * 3 KV heads of 64) at ctx positions, split into pool tasks as the forward
 * pass splits a one-sequence step: hpt query heads a task (1: nine tasks, a
 * KV head's rows read by three of them; 3: a task per KV head, each row read
 * once). Every (layer) has its own shuffled 16-position blocks on 2 MiB
 * pages, written by the store op from random rows; best of reps, ms per
 * token (all layers), and the KV bytes read once per token (the roofline's
 * share of the cache). */
typedef struct kvq_job {
    const kern_kv_view *views; /* [n_layers] */
    const float *q;
    float *out, *scratch;
    int layer, hpt, ctx;
} kvq_job;

static void kvq_task(void *ctx, int task, int thread) {
    const kvq_job *j = ctx;
    const int group = 3, hd = 64, q_dim = 9 * 64, h = task * j->hpt;
    kern_attention_rows_gqa(j->out + (size_t)h * hd, q_dim, j->q + (size_t)h * hd, q_dim, 1, j->hpt,
                            j->ctx - 1, &j->views[j->layer], h / group, hd, 0.125f,
                            j->scratch + (size_t)thread * group * j->ctx);
}

typedef struct kvq_cache {
    kern_kv_dtype dt;
    uint8_t *k, *v;
    int32_t *table;
    kern_kv_view *views; /* [30] */
    double kv_bytes;     /* read once per token */
} kvq_cache;

static void kvq_free(kvq_cache *c) {
    free(c->k), free(c->v), free(c->table), free(c->views);
}

/* A cache of dtype dt holding ctx positions of every layer. 0 or -1. */
static int kvq_make(kvq_cache *c, kern_kv_dtype dt, int ctx) {
    const int n_layers = 30, n_kv = 3, hd = 64, kd = n_kv * hd, bs = 16;
    const int nblk = (ctx + bs - 1) / bs, total = n_layers * nblk;
    const size_t lb = kern_kv_layer_block_bytes(dt, kd, hd, bs);
    const size_t huge = (size_t)2 << 20, bytes = (lb * (size_t)total + huge - 1) & ~(huge - 1);
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->k = aligned_alloc(huge, bytes), c->v = aligned_alloc(huge, bytes);
    c->table = malloc((size_t)total * sizeof(int32_t));
    c->views = calloc((size_t)n_layers, sizeof *c->views);
    c->kv_bytes = (double)lb / bs * ctx * n_layers * 2;
    if (!c->k || !c->v || !c->table || !c->views)
        return -1;
#ifdef MADV_HUGEPAGE
    (void)madvise(c->k, bytes, MADV_HUGEPAGE);
    (void)madvise(c->v, bytes, MADV_HUGEPAGE);
#endif
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < total; i++)
        c->table[i] = i;
    for (int i = total - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1)), t = c->table[i];
        c->table[i] = c->table[j], c->table[j] = t;
    }
    size_t unit = kern_kv_unit_bytes(dt);
    float row_k[192], row_v[192];
    for (int l = 0; l < n_layers; l++) {
        kern_kv_view *w = &c->views[l];
        w->block_table = c->table + (size_t)l * nblk;
        w->block_size = bs;
        w->block_stride = lb / unit;
        w->row_stride = (size_t)kd;
        w->dtype = dt;
        w->scale_off = kern_kv_scale_off(dt, kd, bs);
        if (dt == KERN_KV_F16)
            w->k16 = (uint16_t *)(void *)c->k, w->v16 = (uint16_t *)(void *)c->v;
        else if (dt == KERN_KV_F32)
            w->k = (float *)(void *)c->k, w->v = (float *)(void *)c->v;
        else
            w->kq = c->k, w->vq = c->v;
        for (int p = 0; p < ctx; p++) {
            for (int i = 0; i < kd; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                row_k[i] = (float)((int)(x >> 40 & 0xffff) - 32768) / 32768.0f;
                row_v[i] = (float)((int)(x >> 24 & 0xffff) - 32768) / 32768.0f;
            }
            kern_kv_store(w, p, row_k, row_v, kd, hd);
        }
    }
    return 0;
}

/* One token's attention over every layer of c, ms. */
static double kvq_time(kern_pool *pool, const kvq_cache *c, int ctx, int hpt, float *scratch) {
    float q[9 * 64], out[9 * 64];
    for (int i = 0; i < 9 * 64; i++)
        q[i] = (float)(i % 17) / 17.0f - 0.5f;
    double t = now_s();
    for (int l = 0; l < 30; l++) {
        kvq_job j = {c->views, q, out, scratch, l, hpt, ctx};
        kern_pool_run(pool, kvq_task, &j, 9 / hpt);
    }
    return (now_s() - t) * 1e3;
}

/* Random weights for the levels section: n_out rows of base type, quantized
 * from random floats where brisk has a quantizer, else (Q5_0, Q5_1, IQ4_NL,
 * Q6_0S, which brisk only reads) random codes with scales d ~ 1/384 (Q5_1's
 * offset -16 d; Q6_0S's second scale d), as test_kern_matmul makes them. */
static void levels_fill(kern_type base, uint8_t *rows, int n_out, int n_in, uint64_t *r,
                        float *row) {
    const size_t rb = kern_row_bytes(base, n_in), bb = kern_type_block_bytes(base);
    const int coded = base == KERN_TYPE_Q5_0 || base == KERN_TYPE_Q5_1 ||
                      base == KERN_TYPE_IQ4_NL || base == KERN_TYPE_Q6_0S;
    for (int o = 0; o < n_out; o++) {
        if (!coded) {
            for (int i = 0; i < n_in; i++) {
                *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
                row[i] = ((float)(*r >> 40) / 16777216.0f - 0.5f) * 0.1f;
            }
            kern_quantize_row(base, row, rows + rb * (size_t)o, n_in);
            continue;
        }
        for (int k = 0; k < n_in / 32; k++) {
            uint8_t *blk = rows + rb * (size_t)o + bb * (size_t)k;
            for (size_t j = 0; j < bb; j++) {
                *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
                blk[j] = (uint8_t)(*r >> 32);
            }
            float d = (0.5f + (float)(*r >> 40) / 16777216.0f) / 384.0f;
            uint16_t dh = kern_fp32_to_fp16(d), mh = kern_fp32_to_fp16(-16.0f * d);
            memcpy(blk, &dh, 2);
            if (base == KERN_TYPE_Q5_1)
                memcpy(blk + 2, &mh, 2);
            if (base == KERN_TYPE_Q6_0S)
                memcpy(blk + 2, &dh, 2);
        }
    }
}

/* The "levels" section: one matrix (weights replicated to >= 256 MiB on
 * 2 MiB pages and rotated, so every call reads them from DRAM, as a decode
 * step does) timed with each SIMD level's own kernels (KERN_PICK_LEVEL)
 * from avx2 to hi, the levels interleaved round by round so a drift of the
 * machine hits them alike; best of the rounds, microseconds, into us[level]
 * (0 where not timed). The evidence for the kernel table (kern_table.c,
 * docs/KERNELS.md). */
static void bench_levels_one(kern_pool *pool, kern_type wt, int n_out, int n_in, int n_tok,
                             int rounds, kern_level hi, double *us) {
    const kern_type base = kern_x8_base(wt);
    const size_t rb = kern_row_bytes(base, n_in), wbytes = rb * (size_t)n_out;
    const int copies = (int)(((size_t)256 << 20) / wbytes) + 1;
    const size_t huge = (size_t)2 << 20, total = (wbytes * (size_t)copies + huge - 1) & ~(huge - 1);
    uint8_t *w = aligned_alloc(huge, total), *rows = malloc(wbytes);
    float *row = malloc(sizeof(float) * n_in), *x = malloc(sizeof(float) * n_in * n_tok);
    float *y = malloc(sizeof(float) * n_out * n_tok);
    void *ws = aligned_alloc(64, (kern_matmul_ws_bytes(wt, n_in, n_tok) + 127) & ~(size_t)63);
    for (int l = 0; l <= KERN_LEVEL_TOP; l++)
        us[l] = 0.0;
    if (!w || !rows || !row || !x || !y || !ws)
        goto out;
#ifdef MADV_HUGEPAGE
    (void)madvise(w, total, MADV_HUGEPAGE);
#endif
    uint64_t r = 0x2545F4914F6CDD1DULL;
    levels_fill(base, rows, n_out, n_in, &r, row);
    if (wt != base) {
        for (int g = 0; g < n_out / 8; g++) {
            const void *rp[8];
            for (int k = 0; k < 8; k++)
                rp[k] = rows + rb * (size_t)(8 * g + k);
            kern_x8_pack_group(base, rp, 8, n_in, w, g);
        }
    } else {
        memcpy(w, rows, wbytes);
    }
    for (int c = 1; c < copies; c++)
        memcpy(w + (size_t)c * wbytes, w, wbytes);
    for (int i = 0; i < n_in * n_tok; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)(r >> 40) / 16777216.0f - 0.5f;
    }
    const kern_level top = kern_cpu_level();
    kern_cpu_set_pick(KERN_PICK_LEVEL);
    int c = 0;
    for (int round = 0; round < rounds; round++)
        for (int l = KERN_LEVEL_AVX2; l <= (int)hi; l++) {
            kern_cpu_set_max_level((kern_level)l);
            double t = now_s();
            const int calls = 8;
            for (int k = 0; k < calls; k++)
                kern_matmul(pool, wt, w + (size_t)(c++ % copies) * wbytes, n_out, n_in, x, n_tok, y,
                            ws);
            t = (now_s() - t) / calls * 1e6;
            if (us[l] == 0.0 || t < us[l])
                us[l] = t;
        }
    kern_cpu_set_max_level(top);
    kern_cpu_set_pick(-1);
out:
    free(w);
    free(rows);
    free(row);
    free(x);
    free(y);
    free(ws);
}

/* 1: type list names wt ("all" or NULL: every type). */
static int levels_wanted(const char *list, kern_type wt) {
    if (!list || !strcmp(list, "all"))
        return 1;
    const char *name = kern_type_name(wt);
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

/* Every weight type the kernel table distinguishes (each X8 form, f16,
 * bf16, f32) at 1-64 tokens on three shapes: each level's own kernels
 * (bench_levels_one; the float types only at avx2 and avx512, the levels
 * above run the same float kernels), the table's default for this CPU's
 * kind (kern_cpu_uarch; BRISK_CPU_UARCH names another row) and its time as
 * a fraction of the fastest level's: the default runs its level's own
 * kernel, so its time is that level's. Below 0.95 is flagged ("LOW").
 * A "levels-json" line per measurement for bench/kern_table.sh, then the
 * worst fraction per type and batch size. rounds: best of (halved from 16
 * tokens on); types: a comma list of kern_type names, or NULL for all. */
static void bench_levels(kern_pool *pool, int rounds, const char *types_list) {
    const kern_level top = kern_cpu_level();
    if (top < KERN_LEVEL_AVX2) {
        printf("levels: skipped, no AVX2\n");
        return;
    }
    const kern_type types[] = {KERN_TYPE_Q8_0X8,   KERN_TYPE_Q8_0MX8, KERN_TYPE_Q4_0X8,
                               KERN_TYPE_Q4_1X8,   KERN_TYPE_Q5_0X8,  KERN_TYPE_Q5_1X8,
                               KERN_TYPE_IQ4_NLX8, KERN_TYPE_Q6_0SX8, KERN_TYPE_F16,
                               KERN_TYPE_BF16,     KERN_TYPE_F32};
    enum { N_TYPES = sizeof(types) / sizeof(types[0]), N_TOKS = 6 };
    const int toks[N_TOKS] = {1, 2, 4, 8, 16, 64};
    const int shapes[][2] = {{1536, 576}, {576, 1536}, {49152, 576}};
    double worst[N_TYPES][N_TOKS];
    int n_low = 0;
    char desc[256];
    kern_cpu_describe(desc, sizeof desc);
    printf("levels-meta {\"uarch\": \"%s\", \"level\": \"%s\", \"cpu\": \"%s\", "
           "\"rounds\": %d}\n",
           kern_uarch_name(kern_cpu_uarch()), kern_level_name(top), desc, rounds);
    printf("levels: us per call, each level's own kernels, DRAM-fed, best of %d rounds (x: avx2 "
           "time / that level's); default: the table's pick for %s, and the fastest level's time "
           "/ the default's\n",
           rounds, kern_uarch_name(kern_cpu_uarch()));
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const kern_type wt = types[ti];
        const kern_level hi =
            !kern_type_is_x8(wt) && top > KERN_LEVEL_AVX512 ? KERN_LEVEL_AVX512 : top;
        for (int k = 0; k < N_TOKS; k++)
            worst[ti][k] = 0.0;
        if (!levels_wanted(types_list, wt))
            continue;
        for (size_t si = 0; si < 3; si++)
            for (int k = 0; k < N_TOKS; k++) {
                const int n_out = shapes[si][0], n_in = shapes[si][1], n_tok = toks[k];
                if (n_out == 49152 && n_tok > 16)
                    continue;
                double us[KERN_LEVEL_TOP + 1];
                bench_levels_one(pool, wt, n_out, n_in, n_tok,
                                 n_tok >= 16 ? (rounds + 1) / 2 : rounds, hi, us);
                kern_cpu_set_pick(KERN_PICK_TABLE);
                kern_level def = kern_matmul_level(wt, n_tok);
                const char *def_name = kern_matmul_kernel_name(wt, n_tok);
                kern_cpu_set_pick(-1);
                if (def > hi) /* a float type's avx512 kernels at a higher level */
                    def = hi;
                int fast = KERN_LEVEL_AVX2;
                for (int l = KERN_LEVEL_AVX2; l <= (int)hi; l++)
                    if (us[l] > 0.0 && us[l] < us[fast])
                        fast = l;
                const double ratio = us[def] > 0.0 ? us[fast] / us[def] : 0.0;
                if (worst[ti][k] == 0.0 || ratio < worst[ti][k])
                    worst[ti][k] = ratio;
                n_low += ratio < 0.95;
                printf("levels %-9s %5d x %4d x %2d tok: avx2 %9.1f", kern_type_name(wt), n_out,
                       n_in, n_tok, us[KERN_LEVEL_AVX2]);
                for (int l = KERN_LEVEL_AVX512; l <= (int)hi; l++)
                    printf("  %s %9.1f (x%.2f)", kern_level_name((kern_level)l), us[l],
                           us[KERN_LEVEL_AVX2] / us[l]);
                printf("  default %s (%s) x%.2f of fastest %s%s\n", kern_level_name(def), def_name,
                       ratio, kern_level_name((kern_level)fast), ratio < 0.95 ? "  LOW" : "");
                printf("levels-json {\"type\": \"%s\", \"n_out\": %d, \"n_in\": %d, \"n_tok\": %d, "
                       "\"us\": {",
                       kern_type_name(wt), n_out, n_in, n_tok);
                for (int l = KERN_LEVEL_AVX2; l <= (int)hi; l++)
                    printf("%s\"%s\": %.2f", l > KERN_LEVEL_AVX2 ? ", " : "",
                           kern_level_name((kern_level)l), us[l]);
                printf("}, \"fastest\": \"%s\", \"default\": \"%s\", \"default_kernel\": \"%s\", "
                       "\"ratio\": %.4f}\n",
                       kern_level_name((kern_level)fast), kern_level_name(def), def_name, ratio);
                fflush(stdout);
            }
    }
    printf("table %s: the fastest level's time / the default's, worst of the shapes (1, 2, 4, 8, "
           "16, 64 tokens)\n",
           kern_uarch_name(kern_cpu_uarch()));
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        if (!levels_wanted(types_list, types[ti]))
            continue;
        printf("table %-9s", kern_type_name(types[ti]));
        for (int k = 0; k < N_TOKS; k++)
            printf("  %5.2f%s", worst[ti][k], worst[ti][k] < 0.95 ? "*" : " ");
        printf("\n");
    }
    printf("table: %d measurements below 0.95 (*)\n", n_low);
}

/* The "amx" section (issue 41): the AMX int8 tile peak (kern_bench_amx.c),
 * then the X8 GEMMs of SmolLM2-135M's and Gemma 3 270M's layer shapes, in
 * the types their Q8_0, Q4_0 and Q4_K_M files run as, at 64 and 512 tokens
 * with the batch kernels capped at avx512vnni and at amx, the two levels
 * side by side per shape (kern_bench_matmul: weights from DRAM, best of 5):
 * GOP/s and their fraction of the peak. One line per measurement, the same
 * words every time (bench/amx.sh parses them). Without AMX, one line. */
static void bench_amx(kern_pool *pool) {
    const kern_cpu_features *f = kern_cpu_detect();
    if (!f->amx) {
        printf("amx: skipped: %s\n",
               f->amx_refused ? f->amx_refused : "this CPU has no AMX-INT8 (amx_int8)");
        return;
    }
    const kern_level top = kern_cpu_level();
    if (top < KERN_LEVEL_AMX) {
        printf("amx: skipped: the level is capped at %s (BRISK_CPU_LEVEL)\n", kern_level_name(top));
        return;
    }
    /* KB_AMX_SMOKE=1: a few peak iterations and the first case at 64
     * tokens, to run this code against tests/tools/emuamx.h (the emulation
     * takes microseconds per tile product); the figures mean nothing then. */
    const int smoke = getenv("KB_AMX_SMOKE") != NULL;
    double peak = 0.0, per = 0.0;
    for (int r = 0; r < 3; r++) {
        double pt, g = kern_bench_amx_peak(pool, smoke ? 16 : 1L << 22, &pt);
        if (g < 0) {
            printf("amx: peak: FAILED: the tiles differ from the scalar products\n");
            return;
        }
        if (g > peak)
            peak = g, per = pt;
    }
    printf("amx peak: %.1f GOP/s (%.1f per thread, %d threads; 4 TDPBSSD chains on tiles held "
           "in registers, best of 3)\n",
           peak, per, kern_pool_size(pool));
    typedef struct {
        const char *model;
        kern_type wt;
        int n_out, n_in;
    } amx_case;
    const amx_case cases[] = {
        {"smollm2", KERN_TYPE_Q8_0X8, 576, 576},   {"smollm2", KERN_TYPE_Q8_0X8, 1536, 576},
        {"smollm2", KERN_TYPE_Q8_0X8, 576, 1536},  {"smollm2", KERN_TYPE_Q4_0X8, 576, 576},
        {"smollm2", KERN_TYPE_Q4_0X8, 1536, 576},  {"smollm2", KERN_TYPE_Q4_0X8, 576, 1536},
        {"smollm2", KERN_TYPE_Q5_0X8, 1536, 576},  {"smollm2", KERN_TYPE_Q6_0SX8, 576, 1536},
        {"smollm2", KERN_TYPE_Q4_1X8, 576, 1536},  {"gemma3", KERN_TYPE_Q5_0X8, 2048, 640},
        {"gemma3", KERN_TYPE_Q5_0X8, 1024, 640},   {"gemma3", KERN_TYPE_Q4_1X8, 640, 2048},
        {"gemma3", KERN_TYPE_Q6_0SX8, 640, 2048},  {"gemma3", KERN_TYPE_Q8_0X8, 2048, 640},
        {"gemma3", KERN_TYPE_IQ4_NLX8, 2048, 640},
    };
    const int toks[] = {64, 512};
    const size_t n_cases = smoke ? 1 : sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n_cases; i++)
        for (int k = 0; k < (smoke ? 1 : 2); k++) {
            const amx_case *c = &cases[i];
            double gv = 0.0, ga = 0.0;
            kern_cpu_set_max_level(KERN_LEVEL_AVX512VNNI);
            const char *kv = kern_matmul_kernel_name(c->wt, toks[k]);
            kern_bench_matmul(pool, c->wt, c->n_out, c->n_in, toks[k], 5, &gv);
            kern_cpu_set_max_level(KERN_LEVEL_AMX);
            const char *ka = kern_matmul_kernel_name(c->wt, toks[k]);
            kern_bench_matmul(pool, c->wt, c->n_out, c->n_in, toks[k], 5, &ga);
            printf("amx gemm %-8s %-9s %5d x %4d x %3d tok: avx512vnni %7.1f GOP/s (%4.1f%% of "
                   "peak)  amx %7.1f GOP/s (%4.1f%% of peak)  x%.2f  [%s | %s]\n",
                   c->model, kern_type_name(c->wt), c->n_out, c->n_in, toks[k], gv, 100 * gv / peak,
                   ga, 100 * ga / peak, gv > 0 ? ga / gv : 0.0, kv, ka);
        }
    kern_cpu_set_max_level(top);
}

static const char *only; /* the one section to run, or NULL for all */
static int run(const char *section) {
    return !only || !strcmp(only, section);
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 0;
    only = argc > 2 ? argv[2] : NULL;
    kern_pool *pool = kern_pool_create(n_threads);
    char desc[256];
    kern_cpu_describe(desc, sizeof(desc));
    printf("%s, %d threads\n", desc, kern_pool_size(pool));
    double bw = 0.0;
    if (run("gemv")) {
        bw = kern_measure_read_bw(pool, (size_t)512 << 20, 5);
        printf("read bandwidth: %.1f GB/s (512 MiB buffer, best of 5)\n", bw);
        printf("pool dispatch: %.2f us\n", kern_bench_pool_dispatch(pool, 10000));
    }

    /* GEMV: weight bytes streamed per second vs the read roofline. */
    const kern_type types[] = {KERN_TYPE_Q8_0,   KERN_TYPE_Q8_0M,  KERN_TYPE_Q4_0,
                               KERN_TYPE_Q4_1,   KERN_TYPE_Q8_0X8, KERN_TYPE_Q8_0MX8,
                               KERN_TYPE_Q4_0X8, KERN_TYPE_Q4_1X8, KERN_TYPE_F16,
                               KERN_TYPE_BF16,   KERN_TYPE_F32};
    const int n_types = (int)(sizeof(types) / sizeof(types[0])), n_int_types = 8;
    const int gemv[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_types && run("gemv"); ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemv[s][0], n_in = gemv[s][1];
            double gf, t = kern_bench_matmul(pool, types[ti], n_out, n_in, 1, 50, &gf);
            double bytes = (double)kern_row_bytes(types[ti], n_in) * n_out;
            printf("gemv %-7s %5d x %4d: %8.1f us  %5.1f GB/s (%3.0f%% of read bw)  [%s]\n",
                   kern_type_name(types[ti]), n_out, n_in, t * 1e6, bytes / t / 1e9,
                   100 * bytes / t / 1e9 / bw, kern_level_name(kern_matmul_level(types[ti], 1)));
        }
    /* The batch sizes of a decode step: every weight read serves n_tok rows. */
    const int steps[] = {1, 2, 4, 6, 8, 10, 16, 24};
    const int step_shapes[][2] = {{1536, 576}, {576, 1536}, {49152, 576}};
    const kern_type step_types[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0X8};
    for (int s = 0; s < 3 && run("step"); s++)
        for (int k = 0; k < (int)(sizeof(steps) / sizeof(steps[0])); k++)
            for (int ti = 0; ti < 2; ti++) {
                double gf, t = kern_bench_matmul(pool, step_types[ti], step_shapes[s][0],
                                                 step_shapes[s][1], steps[k], 10, &gf);
                printf("step %-6s %5d x %4d x %2d tok: %8.1f us  %5.1f us/token  %6.1f GOP/s\n",
                       kern_type_name(step_types[ti]), step_shapes[s][0], step_shapes[s][1],
                       steps[k], t * 1e6, t * 1e6 / steps[k], gf);
            }
    /* Decode attention, one thread, SmolLM2 shape. */
    for (int c = 0; c < 2 && run("attn"); c++) {
        int ctx = c ? 272 : 144;
        for (int f16 = 1; f16 >= 0; f16--)
            printf("attention decode step, 16 seqs x ctx %d, SmolLM2 shape, %s KV, 1 thread: %.2f "
                   "ms per sequence, "
                   "%.2f ms per KV head; cache-resident (1 seq, x16): %.2f ms\n",
                   ctx, f16 ? "f16" : "f32", bench_attention(16, ctx, 5, 0, f16),
                   bench_attention(16, ctx, 5, 1, f16), 16 * bench_attention(1, ctx, 20, 0, f16));
    }
    /* One sequence's decode attention per KV dtype, as the forward pass
     * splits it; the dtypes interleaved round by round (a drift of a shared
     * machine hits them alike), best of the rounds. */
    const kern_kv_dtype kvq[] = {KERN_KV_F16, KERN_KV_Q8_0, KERN_KV_Q4_0};
    const int kvq_ctx[] = {512, 4000, 6000};
    for (int ci = 0; ci < 3 && run("kvq"); ci++) {
        int ctx = kvq_ctx[ci], nt = kern_pool_size(pool);
        kvq_cache caches[3];
        float *scratch = malloc(sizeof(float) * (size_t)nt * 3 * (size_t)ctx);
        int ok = scratch != NULL;
        for (int d = 0; d < 3; d++)
            ok &= kvq_make(&caches[d], kvq[d], ctx) == 0;
        for (int hpt = 1; ok && hpt <= 3; hpt += 2) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int r = 0; r < 15; r++)
                for (int d = 0; d < 3; d++) {
                    double ms = kvq_time(pool, &caches[d], ctx, hpt, scratch);
                    best[d] = ms < best[d] ? ms : best[d];
                }
            for (int d = 0; d < 3; d++)
                printf("attention decode, 1 seq x ctx %d, SmolLM2 shape, %-4s KV, %d heads a task "
                       "(%d tasks): %7.3f ms/token (%.2fx f16), KV %6.1f MB/token, %5.1f GB/s "
                       "[%s]\n",
                       ctx, kern_kv_dtype_name(kvq[d]), hpt, 9 / hpt, best[d], best[0] / best[d],
                       caches[d].kv_bytes / 1e6, caches[d].kv_bytes / best[d] / 1e6,
                       kern_attention_level_name_kv(64, kvq[d]));
        }
        for (int d = 0; d < 3; d++)
            kvq_free(&caches[d]);
        free(scratch);
    }
    /* Prefill: n_tok = 512. */
    const int gemm[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (int ti = 0; ti < n_int_types && run("gemm"); ti++)
        for (int s = 0; s < 4; s++) {
            int n_out = gemm[s][0], n_in = gemm[s][1];
            double gf,
                t = kern_bench_matmul(pool, types[ti], n_out, n_in, 512, s == 3 ? 2 : 5, &gf);
            printf("gemm %-7s %5d x %4d x 512 tok: %8.2f ms  %6.1f GOP/s  [%s]\n",
                   kern_type_name(types[ti]), n_out, n_in, t * 1e3, gf,
                   kern_level_name(kern_matmul_level(types[ti], 512)));
        }
    /* Prefill on Gemma 3 270M's shapes in the types its Q4_K_M file runs as. */
    const kern_type gtypes[] = {KERN_TYPE_Q5_0X8, KERN_TYPE_Q4_1X8,   KERN_TYPE_Q6_0SX8,
                                KERN_TYPE_Q8_0X8, KERN_TYPE_IQ4_NLX8, KERN_TYPE_Q5_1X8};
    const int ggemm[][2] = {{2048, 640}, {640, 2048}, {1024, 640}};
    for (size_t ti = 0; ti < sizeof(gtypes) / sizeof(gtypes[0]) && run("gemma"); ti++)
        for (int s = 0; s < 3; s++) {
            double gf,
                t = kern_bench_matmul(pool, gtypes[ti], ggemm[s][0], ggemm[s][1], 512, 5, &gf);
            printf("gemm %-9s %5d x %4d x 512 tok: %8.2f ms  %6.1f GOP/s  [%s]\n",
                   kern_type_name(gtypes[ti]), ggemm[s][0], ggemm[s][1], t * 1e3, gf,
                   kern_level_name(kern_matmul_level(gtypes[ti], 512)));
        }
    if (run("amx"))
        bench_amx(pool);
    if (only && !strcmp(only, "levels")) /* not in the default run: minutes */
        bench_levels(pool, argc > 3 && atoi(argv[3]) > 0 ? atoi(argv[3]) : 6,
                     argc > 4 ? argv[4] : NULL);
    kern_pool_free(pool);
    return 0;
}
