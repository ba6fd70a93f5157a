/* ops_attn.c - prefill attention over the paged f16 KV cache, the KV-cache
 * store and the bias add, against their CPU references (test_cuda_ops -o
 * attn_prefill, -o kv_store), and both attention kernels and the store over
 * a grouped pool, the layout of the sliding-window release (-o kv_grouped).
 *
 * attn_prefill  1e-5 normalised error against kern_attention_head_ref over
 *               n_ctx = p + 1 positions of the same f16 view, per (row,
 *               head). The reference has double dots and sums; the GPU f32
 *               ones: a score is q*scale (1 rounding) dotted with K in one
 *               sequential FMA chain of head_dim (<= 256) terms, whose
 *               rounding errors are random-signed: ~sqrt(256) * 2^-24 ~ 1e-6
 *               of a score ~1 (worst case 256 * 2^-24 ~ 1.5e-5, never
 *               approached by random data), and a score error e moves its
 *               weight by a factor (1 + e); expf is within 2 ulp; l is a
 *               sum of <= 16 terms a lane, a <= 3-level tree and one
 *               rescale a key tile; each output is one sequential FMA chain
 *               over up to ~1600 keys plus one rescale by alpha a tile of
 *               64 (a random walk: ~sqrt(1600) * 2^-24 ~ 2.4e-6 of the
 *               terms' scale, which the weights' normalisation keeps near
 *               the output's); then one division. That bounds a few 1e-6;
 *               the same arithmetic run on the CPU (fmaf is exact on both
 *               sides, only expf differs) gave 1.5e-7 .. 6.4e-7 on these
 *               cases. 1e-5 leaves room, while a skipped alpha rescale
 *               gave 1.4e-1, a wrong KV head 0.9, a dropped diagonal key
 *               NaN (position 0 then has no key). Rows and columns no run
 *               covers (gap rows between runs, a run with n <= 0, q_stride
 *               padding) must keep their sentinel bits: any change counts
 *               1 in the error. Positions the runs do not own hold f16 NaN
 *               and table entries past a run's blocks are -1, so a read
 *               outside a run's context fails the case or faults.
 * kv_store      exact: every f16 of both pools, bit for bit, against
 *               kern_quantize_row(KERN_TYPE_F16) at the slots (values near
 *               the overflow threshold 65520, in and below the f16
 *               subnormal range, ties, +-0, +-inf and NaNs with and without
 *               payload), and every other half (slot -1, rows no token
 *               names, a row's padding) unchanged.
 * add_bias      exact: one f32 add an element on both sides; the columns
 *               past n unchanged.
 * Argument checks: exact return codes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cpu/kern_ops.h"
#include "kernels/cpu/kern_types.h"
#include "kernels/cuda/kern_cuda_attn_decode.cuh"
#include "kernels/cuda/kern_cuda_attn_prefill.cuh"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_kv_store.cuh"
#include "tests/cuda/cuda_test.h"

#define SENTINEL 0x7f7f7f7fu /* the bytes kern_cuda_memset(0x7f) leaves: ~3.4e38 */

/* ---- prefill attention ---------------------------------------------------------- */

static uint16_t pf_half(void) {
    float f;
    fill(&f, 1, 1.0f);
    uint16_t h = kern_fp32_to_fp16(f);
    return (h & 0x7fffu) == 0 ? 0x1400u : h; /* an underflow to +-0 -> 2^-10 */
}

/* One run of query rows: n rows at positions pos0 .. pos0 + n - 1. */
typedef struct pf_run {
    int n, pos0;
} pf_run;

typedef struct pf_shape {
    int head_dim, n_kv, group, bs;
    int q_pad;      /* q_stride - n_heads * head_dim */
    int row_pad;    /* extra elements a K/V position row (4: not 8-aligned) */
    int max_blocks; /* 0: enough for every run plus a spare -1; else the
                       table width, which clamps longer runs */
    int run_slack;  /* max_run - the longest n */
    float q_scale;  /* 1, or larger for peaked softmaxes */
    int window;     /* > 0: a sliding window (kern_cuda_attn_prefill_ex) */
    float softcap;  /* > 0: attention-logit soft-capping */
} pf_shape;

/* One call over n_runs runs, each its own sequence with its own table row.
 * Rows: a gap row, then each run's rows followed by a gap row; a run with
 * n <= 0 points at the gap row before it. */
static void prefill_case(const pf_shape *sh, const pf_run *runs, int n_runs) {
    const int hd = sh->head_dim, bs = sh->bs, n_heads = sh->n_kv * sh->group;
    const size_t q_stride = (size_t)n_heads * hd + (size_t)sh->q_pad;
    int n_rows = 1, max_n = 0, max_need = 0;
    int32_t *rv = xmalloc((size_t)n_runs * 3 * sizeof(int32_t));
    for (int r = 0; r < n_runs; r++) {
        const int n = runs[r].n;
        rv[3 * r] = n > 0 ? n_rows : n_rows - 1;
        rv[3 * r + 1] = n;
        rv[3 * r + 2] = runs[r].pos0;
        if (n > 0) {
            n_rows += n + 1;
            const int need = (runs[r].pos0 + n + bs - 1) / bs;
            max_need = need > max_need ? need : max_need;
        }
        max_n = n > max_n ? n : max_n;
    }
    const int max_blocks = sh->max_blocks ? sh->max_blocks : max_need + 1;
    const int max_ctx = max_blocks * bs;
    /* Positions each run's table names: its context, clamped to the table. */
    int used = 0;
    int *stored = xmalloc((size_t)n_runs * sizeof(int));
    for (int r = 0; r < n_runs; r++) {
        const int ctx = runs[r].n > 0 ? runs[r].pos0 + runs[r].n : 0;
        stored[r] = ctx < max_ctx ? ctx : max_ctx;
        used += (stored[r] + bs - 1) / bs;
    }
    const int n_pool = used + 3; /* 3 blocks nobody names */
    const size_t row_stride = (size_t)sh->n_kv * hd + (size_t)sh->row_pad;
    const size_t block_stride = (size_t)bs * row_stride, pool_n = (size_t)n_pool * block_stride;
    uint16_t *k = nan_pool(pool_n), *v = nan_pool(pool_n);
    int32_t *perm = shuffled_ids(n_pool, rng_int);
    int32_t *bt = xmalloc((size_t)n_runs * max_blocks * sizeof(int32_t));
    int next = 0;
    for (int r = 0; r < n_runs; r++) {
        int32_t *row = bt + (size_t)r * max_blocks;
        for (int b = 0; b < max_blocks; b++)
            row[b] = b < (stored[r] + bs - 1) / bs ? perm[next++] : -1;
        for (int p = 0; p < stored[r]; p++) {
            size_t o = (size_t)row[p / bs] * block_stride + (size_t)(p % bs) * row_stride;
            for (size_t e = 0; e < (size_t)sh->n_kv * hd; e++) {
                k[o + e] = pf_half();
                v[o + e] = pf_half();
            }
        }
    }

    const size_t q_n = (size_t)n_rows * q_stride;
    float *q = xmalloc(q_n * sizeof(float)), *ref = xmalloc(q_n * sizeof(float));
    float *got = xmalloc(q_n * sizeof(float));
    unsigned char *covered = calloc(q_n, 1);
    if (!covered) {
        fprintf(stderr, "test_cuda_ops: out of host memory\n");
        exit(1);
    }
    fill(q, q_n, sh->q_scale);
    float *scratch = xmalloc((size_t)(max_ctx + 1) * sizeof(float));
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < n_runs; r++) {
        kern_kv_view view = {.block_table = bt + (size_t)r * max_blocks,
                             .block_size = bs,
                             .block_stride = block_stride,
                             .row_stride = row_stride,
                             .k16 = k,
                             .v16 = v,
                             .window = sh->window,
                             .softcap = sh->softcap};
        for (int i = 0; i < runs[r].n; i++) {
            const int p = runs[r].pos0 + i;
            for (int h = 0; h < n_heads; h++) {
                size_t o = (size_t)(rv[3 * r] + i) * q_stride + (size_t)h * hd;
                memset(covered + o, 1, (size_t)hd);
                if (p >= max_ctx)
                    memset(ref + o, 0, (size_t)hd * sizeof(float));
                else
                    kern_attention_head_ref(ref + o, q + o, &view, h / sh->group, p + 1, hd, scale,
                                            scratch);
            }
        }
    }

    uint16_t *d_k = dev_from(k, pool_n * sizeof(uint16_t));
    uint16_t *d_v = dev_from(v, pool_n * sizeof(uint16_t));
    int32_t *d_bt = dev_from(bt, (size_t)n_runs * max_blocks * sizeof(int32_t));
    int32_t *d_runs = dev_from(rv, (size_t)n_runs * 3 * sizeof(int32_t));
    float *d_q = dev_from(q, q_n * sizeof(float)), *d_out = dev_alloc(q_n * sizeof(float));
    must(kern_cuda_memset(d_out, 0x7f, q_n * sizeof(float), g_stream), "kern_cuda_memset");
    if (sh->window || sh->softcap)
        must(kern_cuda_attn_prefill_ex(d_out, d_q, q_stride, d_k, d_v, d_bt, max_blocks, d_runs,
                                       n_runs, max_n + sh->run_slack, n_heads, sh->n_kv, hd, bs,
                                       block_stride, row_stride, scale, sh->window, sh->softcap,
                                       g_stream),
             "kern_cuda_attn_prefill_ex");
    else
        must(kern_cuda_attn_prefill(d_out, d_q, q_stride, d_k, d_v, d_bt, max_blocks, d_runs,
                                    n_runs, max_n + sh->run_slack, n_heads, sh->n_kv, hd, bs,
                                    block_stride, row_stride, scale, g_stream),
             "kern_cuda_attn_prefill");
    to_host(got, d_out, q_n * sizeof(float));

    /* Covered elements by normalised error, the rest by their bits. */
    size_t n_cov = 0, touched = 0;
    for (size_t i = 0; i < q_n; i++) {
        if (covered[i]) {
            got[n_cov] = got[i];
            ref[n_cov] = ref[i];
            n_cov++;
        } else {
            uint32_t b;
            memcpy(&b, &got[i], sizeof b);
            touched += b != SENTINEL;
        }
    }
    char rs[80];
    int w = 0;
    for (int r = 0; r < n_runs && w < (int)sizeof rs - 12; r++)
        w += snprintf(rs + w, sizeof rs - (size_t)w, "%s%d@%d", r ? "/" : "", runs[r].n,
                      runs[r].pos0);
    report("ATTN_PREFILL", norm_err(got, ref, n_cov) + (double)touched, 1e-5,
           "hd=%d,kv=%d,g=%d,bs=%d,mb=%d,runs=%s%s%s%s,window=%d,softcap=%g", hd, sh->n_kv,
           sh->group, bs, max_blocks, rs, sh->q_pad ? ",q_pad" : "",
           sh->row_pad % 8 ? ",unaligned" : "", sh->q_scale > 1.0f ? ",peaked" : "", sh->window,
           (double)sh->softcap);
    if (touched)
        fprintf(stderr, "    %zu uncovered floats changed\n", touched);

    dev_free(d_k), dev_free(d_v), dev_free(d_bt), dev_free(d_runs), dev_free(d_q);
    dev_free(d_out);
    free(rv), free(stored), free(k), free(v), free(perm), free(bt), free(q), free(ref);
    free(got), free(covered), free(scratch);
}

/* Argument checks: each bad call returns BRISK_EINVAL before any launch, so
 * host addresses stand in for the device pointers. */
static void prefill_invalid(void) {
    float f[8], f2[8];
    uint16_t h[8];
    int32_t i32[8];
    struct {
        const char *what;
        int head_dim, n_heads, n_kv, max_blocks, bs, n_runs, max_run;
        size_t q_stride, row_stride, block_stride;
        int same_out;
        int want;
    } cases[] = {
        {"ok,n_runs=0", 128, 8, 2, 32, 16, 0, 64, 1024, 256, 4096, 0, BRISK_OK},
        {"ok,max_run=0", 128, 8, 2, 32, 16, 3, 0, 1024, 256, 4096, 0, BRISK_OK},
        {"head_dim=60", 60, 8, 2, 32, 16, 1, 64, 480, 120, 1920, 0, BRISK_EINVAL},
        {"head_dim=264", 264, 8, 2, 32, 16, 1, 64, 2112, 528, 8448, 0, BRISK_EINVAL},
        {"head_dim=0", 0, 8, 2, 32, 16, 1, 64, 1024, 256, 4096, 0, BRISK_EINVAL},
        {"n_heads%n_kv", 128, 8, 3, 32, 16, 1, 64, 1024, 384, 6144, 0, BRISK_EINVAL},
        {"q_stride", 128, 8, 2, 32, 16, 1, 64, 1023, 256, 4096, 0, BRISK_EINVAL},
        {"row_stride", 128, 8, 2, 32, 16, 1, 64, 1024, 255, 4096, 0, BRISK_EINVAL},
        {"block_stride", 128, 8, 2, 32, 16, 1, 64, 1024, 256, 4095, 0, BRISK_EINVAL},
        {"max_blocks=0", 128, 8, 2, 0, 16, 1, 64, 1024, 256, 4096, 0, BRISK_EINVAL},
        {"block_size=0", 128, 8, 2, 32, 0, 1, 64, 1024, 256, 4096, 0, BRISK_EINVAL},
        {"n_runs=-1", 128, 8, 2, 32, 16, -1, 64, 1024, 256, 4096, 0, BRISK_EINVAL},
        {"max_run=-1", 128, 8, 2, 32, 16, 1, -1, 1024, 256, 4096, 0, BRISK_EINVAL},
        {"out==q", 128, 8, 2, 32, 16, 1, 64, 1024, 256, 4096, 1, BRISK_EINVAL},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        int rc = kern_cuda_attn_prefill(
            cases[c].same_out ? f2 : f, f2, cases[c].q_stride, h, h, i32, cases[c].max_blocks, i32,
            cases[c].n_runs, cases[c].max_run, cases[c].n_heads, cases[c].n_kv, cases[c].head_dim,
            cases[c].bs, cases[c].block_stride, cases[c].row_stride, 1.0f, g_stream);
        report("ATTN_PREFILL", rc != cases[c].want, 0.0, "args:%s -> %d (want %d)", cases[c].what,
               rc, cases[c].want);
    }
    /* A NULL pool with everything else right. */
    int rc = kern_cuda_attn_prefill(f, f2, 1024, NULL, h, i32, 32, i32, 1, 64, 8, 2, 128, 16, 4096,
                                    256, 1.0f, g_stream);
    report("ATTN_PREFILL", rc != BRISK_EINVAL, 0.0, "args:k16=NULL -> %d (want %d)", rc,
           BRISK_EINVAL);
}

void test_attn_prefill(void) {
    /* Runs of a mixed batch: a decode token continuing a context, a short
     * chunk from the start, a chunk continuing 200 positions, a prompt of
     * 300 (several query tiles and key tiles, partial last ones). */
    const pf_run mixed[] = {{1, 37}, {7, 0}, {64, 200}, {300, 0}};
    const int dims[] = {64, 128}, groups[] = {1, 4, 8};
    for (size_t di = 0; di < CASES_LEN(dims); di++)
        for (size_t gi = 0; gi < CASES_LEN(groups); gi++) {
            pf_shape sh = {
                .head_dim = dims[di], .n_kv = 2, .group = groups[gi], .bs = 16, .q_scale = 1.0f};
            prefill_case(&sh, mixed, (int)ARRAY_LEN(mixed));
        }
    /* Block size 32; a long continued chunk (24 key tiles). */
    const pf_run long_run[] = {{64, 1500}, {33, 5}};
    pf_shape s32 = {.head_dim = 128, .n_kv = 2, .group = 4, .bs = 32, .q_scale = 1.0f};
    prefill_case(&s32, mixed, (int)ARRAY_LEN(mixed));
    prefill_case(&s32, long_run, (int)ARRAY_LEN(long_run));
    /* head_dim 256 (the 16 x 32 tile), 80 (dim groups past head_dim idle),
     * 8 (one chunk a row); a group of 3 (one head a block), of 16 (two head
     * chunks a KV head, MQA). */
    const pf_run some[] = {{1, 100}, {45, 0}, {130, 20}};
    pf_shape s256 = {.head_dim = 256, .n_kv = 2, .group = 4, .bs = 16, .q_scale = 1.0f};
    pf_shape s256b = {.head_dim = 256, .n_kv = 1, .group = 16, .bs = 32, .q_scale = 1.0f};
    pf_shape s80 = {.head_dim = 80, .n_kv = 2, .group = 3, .bs = 16, .q_scale = 1.0f};
    pf_shape s8 = {.head_dim = 8, .n_kv = 2, .group = 2, .bs = 16, .q_scale = 1.0f};
    prefill_case(&s256, mixed, (int)ARRAY_LEN(mixed));
    prefill_case(&s256b, some, (int)ARRAY_LEN(some));
    prefill_case(&s80, some, (int)ARRAY_LEN(some));
    prefill_case(&s8, some, (int)ARRAY_LEN(some));
    /* q_stride past n_heads * head_dim (a fused QKV row: odd padding, so
     * rows are not 16-byte aligned either); K/V rows not 8-element aligned
     * (2-byte loads); peaked softmaxes (q * 4: scores of spread ~4, up to
     * ~+-15, so the running max moves a lot between key tiles). */
    pf_shape sq = {
        .head_dim = 128, .n_kv = 2, .group = 4, .bs = 16, .q_pad = 2 * 256 + 3, .q_scale = 1.0f};
    pf_shape sun = {
        .head_dim = 128, .n_kv = 2, .group = 4, .bs = 16, .row_pad = 4, .q_scale = 1.0f};
    pf_shape speak = {.head_dim = 64, .n_kv = 2, .group = 8, .bs = 16, .q_scale = 4.0f};
    prefill_case(&sq, some, (int)ARRAY_LEN(some));
    prefill_case(&sun, some, (int)ARRAY_LEN(some));
    prefill_case(&speak, mixed, (int)ARRAY_LEN(mixed));
    /* Clamping: a table of 4 blocks (64 positions) - a run from 40 to 99
     * gets zeros from position 64 on, a run wholly past the table only
     * zeros; runs with n = 0 and n < 0 write nothing; max_run above every
     * n (tiles past each run exit). */
    const pf_run clamp[] = {{60, 40}, {0, 3}, {20, 10}, {-5, 0}, {9, 70}, {1, 63}};
    pf_shape sc = {.head_dim = 64,
                   .n_kv = 2,
                   .group = 4,
                   .bs = 16,
                   .max_blocks = 4,
                   .run_slack = 40,
                   .q_scale = 1.0f};
    prefill_case(&sc, clamp, (int)ARRAY_LEN(clamp));
    /* Sliding windows (Gemma, Mistral) and soft-capping (Gemma 2), as the
     * CPU does them: a window of 100 over a chunk continuing 1500 positions
     * (whole key tiles skipped), Gemma 3's 512 at head_dim 256 with MQA, a
     * window of 8 (most rows' first key inside a tile), soft-cap 5 on a
     * peaked softmax (scores large enough to bend) and both together; single
     * rows at 163, 164 and 226 with a window of 100 put a tile's first key
     * (p - 99) exactly on, one past and one before a 64-key tile boundary. */
    pf_shape sw100 = {
        .head_dim = 128, .n_kv = 2, .group = 4, .bs = 32, .q_scale = 1.0f, .window = 100};
    pf_shape sw512 = {
        .head_dim = 256, .n_kv = 1, .group = 4, .bs = 16, .q_scale = 1.0f, .window = 512};
    pf_shape sw8 = {.head_dim = 64, .n_kv = 2, .group = 2, .bs = 16, .q_scale = 1.0f, .window = 8};
    pf_shape scap = {
        .head_dim = 64, .n_kv = 2, .group = 8, .bs = 16, .q_scale = 4.0f, .softcap = 5.0f};
    pf_shape sboth = {.head_dim = 128,
                      .n_kv = 2,
                      .group = 4,
                      .bs = 16,
                      .q_scale = 4.0f,
                      .window = 20,
                      .softcap = 5.0f};
    const pf_run long_gemma[] = {{600, 0}, {64, 900}, {1, 1400}};
    const pf_run edges[] = {{1, 163}, {1, 164}, {1, 226}, {2, 162}};
    pf_shape sw100b = {
        .head_dim = 128, .n_kv = 2, .group = 4, .bs = 16, .q_scale = 1.0f, .window = 100};
    prefill_case(&sw100, long_run, (int)ARRAY_LEN(long_run));
    prefill_case(&sw100b, edges, (int)ARRAY_LEN(edges));
    prefill_case(&sw512, long_gemma, (int)ARRAY_LEN(long_gemma));
    prefill_case(&sw8, mixed, (int)ARRAY_LEN(mixed));
    prefill_case(&scap, mixed, (int)ARRAY_LEN(mixed));
    prefill_case(&sboth, some, (int)ARRAY_LEN(some));
    prefill_invalid();
}

/* ---- KV-cache store and bias add --------------------------------------------------- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Values where an f32 -> f16 conversion can go wrong. */
static float kv_special(int i) {
    static const uint32_t bits[] = {
        0x477fe000u, /* 65504: max half */
        0x477fefffu, /* just below 65520: rounds to 65504 */
        0x477ff000u, /* 65520: ties away to inf (even) */
        0xc77ff000u, /* -65520 */
        0x7149f2cau, /* 1e30 */
        0x33000000u, /* 2^-25: ties to +0 */
        0x33000001u, /* just above 2^-25: the smallest subnormal */
        0x33800000u, /* 2^-24: the smallest subnormal exactly */
        0x33c00000u, /* 1.5 * 2^-24: ties to 2 units */
        0x34200000u, /* 2.5 * 2^-24: ties to 2 units (even) */
        0x387fffffu, /* just below 2^-14: rounds up to the smallest normal */
        0xb87fe000u, /* -1023.5 * 2^-24: a tie up into the smallest normal */
        0x33400000u, /* 0.75 * 2^-24: rounds up to the smallest subnormal */
        0x3f801000u, /* 1 + 2^-11: ties to 1 */
        0x3f803000u, /* 1 + 3 * 2^-11: ties up */
        0x00000001u, /* the smallest f32 subnormal */
        0x80400000u, /* a negative f32 subnormal */
        0x80000000u, /* -0 */
        0x7f800000u, /* inf */
        0xff800000u, /* -inf */
        0x7fc00000u, /* the default quiet NaN */
        0xffc00001u, /* a negative NaN, payload below the kept bits */
        0x7f800001u, /* a signalling NaN whose kept payload bits are 0 */
        0x7fa5a000u, /* a NaN with payload in the kept bits */
        0xffffffffu, /* all ones */
    };
    return bits_f32(bits[(size_t)i % ARRAY_LEN(bits)]);
}

/* Row t of k or v by kind: normal; large (some past 65520); tiny (the f16
 * subnormal range and below); specials among negatives. */
static void kv_fill_row(float *x, int n, int kind) {
    static const float scales[] = {1.0f, 3e4f, 2e-6f, 1.0f};
    fill(x, (size_t)n, scales[kind]);
    if (kind == 3)
        for (int i = 0; i < n; i += 3) {
            x[i] = kv_special(rng_int(1000));
            if (i + 1 < n)
                x[i + 1] = -fabsf(x[i + 1]);
        }
}

/* One store: n_tok tokens of kv_dim into pools of n_blocks blocks of bs
 * positions, row_stride apart (row_pad: padding past kv_dim), ld floats
 * between token rows; every fifth token has slot -1. */
static void kv_store_case(int kv_dim, int n_tok, size_t ld, int row_pad) {
    const int bs = 16, n_blocks = (n_tok + bs - 1) / bs + 2;
    const size_t row_stride = (size_t)kv_dim + (size_t)row_pad;
    const size_t block_stride = (size_t)bs * row_stride, pool_n = (size_t)n_blocks * block_stride;
    uint16_t *k16 = xmalloc(pool_n * sizeof(uint16_t)), *v16 = xmalloc(pool_n * sizeof(uint16_t));
    uint16_t *ref_k = xmalloc(pool_n * sizeof(uint16_t)),
             *ref_v = xmalloc(pool_n * sizeof(uint16_t));
    for (size_t i = 0; i < pool_n; i++) {
        k16[i] = (uint16_t)rng_u64();
        v16[i] = (uint16_t)rng_u64();
    }
    memcpy(ref_k, k16, pool_n * sizeof(uint16_t));
    memcpy(ref_v, v16, pool_n * sizeof(uint16_t));
    /* Distinct positions in random blocks. */
    const int n_pos = n_blocks * bs;
    int *perm = xmalloc((size_t)n_pos * sizeof(int));
    for (int i = 0; i < n_pos; i++)
        perm[i] = i;
    for (int i = n_pos - 1; i > 0; i--) {
        int j = rng_int(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    const size_t x_n = (size_t)n_tok * ld;
    float *k = xmalloc(x_n * sizeof(float)), *v = xmalloc(x_n * sizeof(float));
    fill(k, x_n, 1.0f); /* the padding past kv_dim too: never stored */
    fill(v, x_n, 1.0f);
    int64_t *slots = xmalloc((size_t)n_tok * sizeof(int64_t));
    for (int t = 0; t < n_tok; t++) {
        kv_fill_row(k + (size_t)t * ld, kv_dim, t % 4);
        kv_fill_row(v + (size_t)t * ld, kv_dim, (t + 1) % 4);
        const int p = perm[t];
        slots[t] = t % 5 == 3
                       ? -1
                       : (int64_t)((size_t)(p / bs) * block_stride + (size_t)(p % bs) * row_stride);
        if (slots[t] >= 0) {
            kern_quantize_row(KERN_TYPE_F16, k + (size_t)t * ld, ref_k + slots[t], kv_dim);
            kern_quantize_row(KERN_TYPE_F16, v + (size_t)t * ld, ref_v + slots[t], kv_dim);
        }
    }
    uint16_t *d_k16 = dev_from(k16, pool_n * sizeof(uint16_t));
    uint16_t *d_v16 = dev_from(v16, pool_n * sizeof(uint16_t));
    float *d_k = dev_from(k, x_n * sizeof(float)), *d_v = dev_from(v, x_n * sizeof(float));
    int64_t *d_slots = dev_from(slots, (size_t)n_tok * sizeof(int64_t));
    must(kern_cuda_kv_store(d_k16, d_v16, d_k, d_v, ld, d_slots, n_tok, kv_dim, g_stream),
         "kern_cuda_kv_store");
    to_host(k16, d_k16, pool_n * sizeof(uint16_t));
    to_host(v16, d_v16, pool_n * sizeof(uint16_t));
    size_t bad = 0;
    for (size_t i = 0; i < pool_n; i++) {
        if ((k16[i] != ref_k[i] || v16[i] != ref_v[i]) && bad < 3)
            fprintf(stderr, "    half %zu: gpu %04x/%04x, cpu %04x/%04x\n", i, k16[i], v16[i],
                    ref_k[i], ref_v[i]);
        bad += (k16[i] != ref_k[i]) + (v16[i] != ref_v[i]);
    }
    report("KV_STORE", (double)bad, 0.0, "kv_dim=%d,n_tok=%d,ld=%zu,row_stride=%zu; %zu differ",
           kv_dim, n_tok, ld, row_stride, bad);
    dev_free(d_k16), dev_free(d_v16), dev_free(d_k), dev_free(d_v), dev_free(d_slots);
    free(k16), free(v16), free(ref_k), free(ref_v), free(perm), free(k), free(v), free(slots);
}

static void add_bias_case(int n, int n_tok, size_t ld) {
    const size_t x_n = (size_t)n_tok * ld;
    float *x = xmalloc(x_n * sizeof(float)), *ref = xmalloc(x_n * sizeof(float));
    float *b = xmalloc((size_t)n * sizeof(float));
    fill(x, x_n, 1.0f);
    fill(b, (size_t)n, 0.5f);
    memcpy(ref, x, x_n * sizeof(float));
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < n; i++)
            ref[(size_t)t * ld + i] = x[(size_t)t * ld + i] + b[i];
    float *d_x = dev_from(x, x_n * sizeof(float)), *d_b = dev_from(b, (size_t)n * sizeof(float));
    must(kern_cuda_add_bias(d_x, ld, d_b, n_tok, n, g_stream), "kern_cuda_add_bias");
    to_host(x, d_x, x_n * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < x_n; i++)
        bad += memcmp(&x[i], &ref[i], sizeof(float)) != 0;
    report("ADD_BIAS", (double)bad, 0.0, "n=%d,n_tok=%d,ld=%zu; %zu differ", n, n_tok, ld, bad);
    dev_free(d_x), dev_free(d_b);
    free(x), free(ref), free(b);
}

static void kv_store_invalid(void) {
    /* Host pointers: every case is refused (or has no work) before a launch. */
    float f[8] = {0};
    uint16_t h[8] = {0};
    int64_t s[8] = {0};
    struct {
        const char *what;
        int rc, want;
    } cases[] = {
        {"kv:ok,n_tok=0", kern_cuda_kv_store(h, h, f, f, 8, s, 0, 8, g_stream), BRISK_OK},
        {"kv:n_tok=-1", kern_cuda_kv_store(h, h, f, f, 8, s, -1, 8, g_stream), BRISK_EINVAL},
        {"kv:kv_dim=0", kern_cuda_kv_store(h, h, f, f, 8, s, 1, 0, g_stream), BRISK_EINVAL},
        {"kv:ld<kv_dim", kern_cuda_kv_store(h, h, f, f, 7, s, 1, 8, g_stream), BRISK_EINVAL},
        {"kv:slots=NULL", kern_cuda_kv_store(h, h, f, f, 8, NULL, 1, 8, g_stream), BRISK_EINVAL},
        {"kv:v16=NULL", kern_cuda_kv_store(h, NULL, f, f, 8, s, 1, 8, g_stream), BRISK_EINVAL},
        {"bias:ok,n_tok=0", kern_cuda_add_bias(f, 8, f, 0, 8, g_stream), BRISK_OK},
        {"bias:n_tok=-1", kern_cuda_add_bias(f, 8, f, -1, 8, g_stream), BRISK_EINVAL},
        {"bias:n=0", kern_cuda_add_bias(f, 8, f, 1, 0, g_stream), BRISK_EINVAL},
        {"bias:ld<n", kern_cuda_add_bias(f, 7, f, 1, 8, g_stream), BRISK_EINVAL},
        {"bias:b=NULL", kern_cuda_add_bias(f, 8, NULL, 1, 8, g_stream), BRISK_EINVAL},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++)
        report("KV_STORE", cases[c].rc != cases[c].want, 0.0, "args:%s -> %d (want %d)",
               cases[c].what, cases[c].rc, cases[c].want);
}

void test_kv_store(void) {
    /* llama-3-8b's 8 x 128 and SmolLM2's 3 x 64 (4-wide path), kv_dim 70
     * (one at a time), ld past kv_dim (fused K|V rows), an odd ld (rows not
     * 16-byte aligned: one at a time), position rows with padding of 2 (a
     * slot not a multiple of 4 on the 4-wide path falls back per token). */
    const int toks[] = {1, 7, 64};
    for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
        const int n = toks[ti];
        kv_store_case(1024, n, 1024, 0);
        kv_store_case(192, n, 192 + 2 * 192, 0);
        kv_store_case(70, n, 70, 0);
        kv_store_case(128, n, 131, 0);
        kv_store_case(128, n, 128, 2);
        kv_store_case(128, n, 128, 8);
    }
    add_bias_case(4096, 1, 4096);
    add_bias_case(896, 7, 896 + 2 * 128); /* qwen2-0.5b q in a fused row */
    add_bias_case(333, 64, 333);
    add_bias_case(128, 64, 131);
    kv_store_invalid();
}

/* ---- grouped pools (the sliding-window release) ------------------------------------ */

/* A grouped KV pool as kv_cache.h lays it out when windows release blocks:
 * [n_pool + 1][lpg][bs][row_stride] halves, block n_pool the zero block.
 * A layer is a base offset (its index in the group times bs * row_stride)
 * plus block id * block_stride (lpg layers' rows); released table entries
 * (blocks wholly before the window of a run's first query) name the zero
 * block. The kernels get the layer's pool pointer and the released tables;
 * the reference reads the same layer through the full tables, as with the
 * release off: the two must agree within the kernels' own bounds (1e-5,
 * argued at the top of this file and at test_attn_decode), since the zero
 * block is read with weight exactly zero. Every other layer's rows and every
 * position a run does not own hold f16 NaN, so a wrong layer offset, block
 * stride or a read past a context poisons the result. */
typedef struct grp_shape {
    int head_dim, n_kv, group, bs;
    int lpg, layer; /* layers a block holds; the attended one's index among them */
    int window;
    int decode; /* 1: kern_cuda_attn_decode_ex, every run one query; 0: prefill */
} grp_shape;

static void grouped_attn_case(const grp_shape *sh, const pf_run *runs, int n_runs) {
    const int hd = sh->head_dim, bs = sh->bs, n_heads = sh->n_kv * sh->group;
    const size_t row_stride = (size_t)sh->n_kv * hd, q_stride = (size_t)n_heads * hd;
    const size_t layer_floats = (size_t)bs * row_stride;
    const size_t block_stride = (size_t)sh->lpg * layer_floats;
    const size_t base = (size_t)sh->layer * layer_floats;
    int n_rows = 0, max_n = 0, max_need = 0, used = 0, released = 0;
    for (int r = 0; r < n_runs; r++) {
        const int need = (runs[r].pos0 + runs[r].n + bs - 1) / bs;
        max_need = need > max_need ? need : max_need;
        max_n = runs[r].n > max_n ? runs[r].n : max_n;
        used += need;
        n_rows += runs[r].n;
    }
    const int max_blocks = max_need + 1; /* a spare entry: -1 */
    const int n_pool = used + 2, hole = n_pool;
    const size_t pool_n = (size_t)(n_pool + 1) * block_stride;
    uint16_t *k = nan_pool(pool_n), *v = nan_pool(pool_n);
    memset(k + (size_t)hole * block_stride, 0, block_stride * sizeof(uint16_t));
    memset(v + (size_t)hole * block_stride, 0, block_stride * sizeof(uint16_t));
    int32_t *perm = shuffled_ids(n_pool, rng_int);
    int32_t *full = xmalloc((size_t)n_runs * max_blocks * sizeof(int32_t));
    int32_t *rel = xmalloc((size_t)n_runs * max_blocks * sizeof(int32_t));
    int32_t *rv = xmalloc((size_t)n_runs * 3 * sizeof(int32_t)), *lens = NULL;
    int next = 0, row0 = 0;
    for (int r = 0; r < n_runs; r++) {
        const int ctx = runs[r].pos0 + runs[r].n, nb = (ctx + bs - 1) / bs;
        /* kv_cache's trim before the run's step: what no query at pos0 sees */
        const int lo = sh->window > 0 ? runs[r].pos0 - sh->window + 1 : 0;
        const int first = lo > 0 ? lo / bs : 0;
        int32_t *f = full + (size_t)r * max_blocks, *g = rel + (size_t)r * max_blocks;
        for (int b = 0; b < max_blocks; b++) {
            f[b] = b < nb ? perm[next++] : -1;
            g[b] = b < first ? hole : f[b];
        }
        released += first;
        for (int p = 0; p < ctx; p++) {
            size_t o = base + (size_t)f[p / bs] * block_stride + (size_t)(p % bs) * row_stride;
            for (size_t e = 0; e < row_stride; e++) {
                k[o + e] = pf_half();
                v[o + e] = pf_half();
            }
        }
        rv[3 * r] = row0;
        rv[3 * r + 1] = runs[r].n;
        rv[3 * r + 2] = runs[r].pos0;
        row0 += runs[r].n;
    }
    const size_t q_n = (size_t)n_rows * q_stride;
    float *q = xmalloc(q_n * sizeof(float)), *ref = xmalloc(q_n * sizeof(float));
    float *got = xmalloc(q_n * sizeof(float));
    float *scratch = xmalloc((size_t)(max_need * bs + 1) * sizeof(float));
    fill(q, q_n, 1.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < n_runs; r++) {
        kern_kv_view view = {.block_table = full + (size_t)r * max_blocks,
                             .block_size = bs,
                             .block_stride = block_stride,
                             .row_stride = row_stride,
                             .k16 = k + base,
                             .v16 = v + base,
                             .window = sh->window};
        for (int i = 0; i < runs[r].n; i++)
            for (int h = 0; h < n_heads; h++) {
                size_t o = (size_t)(rv[3 * r] + i) * q_stride + (size_t)h * hd;
                kern_attention_head_ref(ref + o, q + o, &view, h / sh->group, runs[r].pos0 + i + 1,
                                        hd, scale, scratch);
            }
    }

    uint16_t *d_k = dev_from(k, pool_n * sizeof(uint16_t));
    uint16_t *d_v = dev_from(v, pool_n * sizeof(uint16_t));
    int32_t *d_bt = dev_from(rel, (size_t)n_runs * max_blocks * sizeof(int32_t));
    float *d_q = dev_from(q, q_n * sizeof(float)), *d_out = dev_alloc(q_n * sizeof(float));
    int32_t *d_aux = NULL;
    float *d_ws = NULL;
    must(kern_cuda_memset(d_out, 0x7f, q_n * sizeof(float), g_stream), "kern_cuda_memset");
    if (sh->decode) { /* one query a run: the run's last position, ctx pos0 + 1 */
        lens = xmalloc((size_t)n_runs * sizeof(int32_t));
        for (int r = 0; r < n_runs; r++)
            lens[r] = runs[r].pos0 + 1;
        size_t ws = kern_cuda_attn_decode_workspace(n_runs, n_heads, hd, max_blocks, bs);
        d_ws = ws ? dev_alloc(ws) : NULL;
        d_aux = dev_from(lens, (size_t)n_runs * sizeof(int32_t));
        must(kern_cuda_attn_decode_ex(d_out, d_q, d_k + base, d_v + base, d_bt, max_blocks, d_aux,
                                      n_runs, n_heads, sh->n_kv, hd, bs, block_stride, row_stride,
                                      scale, sh->window, 0.0f, d_ws, ws, g_stream),
             "kern_cuda_attn_decode_ex (grouped)");
    } else {
        d_aux = dev_from(rv, (size_t)n_runs * 3 * sizeof(int32_t));
        must(kern_cuda_attn_prefill_ex(d_out, d_q, q_stride, d_k + base, d_v + base, d_bt,
                                       max_blocks, d_aux, n_runs, max_n, n_heads, sh->n_kv, hd, bs,
                                       block_stride, row_stride, scale, sh->window, 0.0f, g_stream),
             "kern_cuda_attn_prefill_ex (grouped)");
    }
    to_host(got, d_out, q_n * sizeof(float));
    char rs[80];
    int w = 0;
    for (int r = 0; r < n_runs && w < (int)sizeof rs - 12; r++)
        w += snprintf(rs + w, sizeof rs - (size_t)w, "%s%d@%d", r ? "/" : "", runs[r].n,
                      runs[r].pos0);
    report(sh->decode ? "ATTN_DECODE_GROUPED" : "ATTN_PREFILL_GROUPED", norm_err(got, ref, q_n),
           1e-5, "hd=%d,kv=%d,g=%d,bs=%d,layer %d of %d,window=%d,runs=%s,released=%d blocks", hd,
           sh->n_kv, sh->group, bs, sh->layer, sh->lpg, sh->window, rs, released);
    dev_free(d_k), dev_free(d_v), dev_free(d_bt), dev_free(d_q), dev_free(d_out);
    dev_free(d_aux), dev_free(d_ws);
    free(k), free(v), free(perm), free(full), free(rel), free(rv), free(lens), free(q), free(ref);
    free(got), free(scratch);
}

/* The KV store into a grouped pool: tokens stored for two layers of two
 * groups (each its own table, as the backend's per-group slots; layer
 * indices 0 and lpg - 1 of a block of lpg layers) land exactly where
 * kern_quantize_row puts them at base + slot, bit for bit, and every other
 * half of the pool (other layers, the zero block, slot -1) is unchanged. */
static void grouped_store_case(int kv_dim, int n_tok, int lpg) {
    const int bs = 16, n_blocks = 2 * ((n_tok + bs - 1) / bs) + 2;
    const size_t row_stride = (size_t)kv_dim, layer_floats = (size_t)bs * row_stride;
    const size_t block_stride = (size_t)lpg * layer_floats;
    const size_t pool_n = (size_t)(n_blocks + 1) * block_stride;
    uint16_t *k16 = xmalloc(pool_n * sizeof(uint16_t)), *v16 = xmalloc(pool_n * sizeof(uint16_t));
    uint16_t *ref_k = xmalloc(pool_n * sizeof(uint16_t)),
             *ref_v = xmalloc(pool_n * sizeof(uint16_t));
    for (size_t i = 0; i < pool_n; i++) {
        k16[i] = (uint16_t)rng_u64();
        v16[i] = (uint16_t)rng_u64();
    }
    memcpy(ref_k, k16, pool_n * sizeof(uint16_t));
    memcpy(ref_v, v16, pool_n * sizeof(uint16_t));
    /* Two groups' tables over disjoint blocks of the one pool. */
    int32_t *perm = shuffled_ids(n_blocks, rng_int);
    const int per = n_blocks / 2;
    const size_t x_n = (size_t)n_tok * kv_dim;
    float *k = xmalloc(x_n * sizeof(float)), *v = xmalloc(x_n * sizeof(float));
    int64_t *slots = xmalloc(2 * (size_t)n_tok * sizeof(int64_t));
    for (int t = 0; t < n_tok; t++) {
        kv_fill_row(k + (size_t)t * kv_dim, kv_dim, t % 4);
        kv_fill_row(v + (size_t)t * kv_dim, kv_dim, (t + 2) % 4);
    }
    uint16_t *d_k16 = dev_from(k16, pool_n * sizeof(uint16_t));
    uint16_t *d_v16 = dev_from(v16, pool_n * sizeof(uint16_t));
    float *d_k = dev_from(k, x_n * sizeof(float)), *d_v = dev_from(v, x_n * sizeof(float));
    for (int g = 0; g < 2; g++) {
        const size_t base = (size_t)(g ? lpg - 1 : 0) * layer_floats;
        for (int t = 0; t < n_tok; t++) {
            const int p = t + 3; /* positions 3 .. n_tok + 2 */
            int64_t *sl = slots + (size_t)g * n_tok + t;
            *sl = t % 5 == 4 ? -1
                             : (int64_t)((size_t)perm[g * per + p / bs] * block_stride +
                                         (size_t)(p % bs) * row_stride);
            if (*sl >= 0) {
                kern_quantize_row(KERN_TYPE_F16, k + (size_t)t * kv_dim, ref_k + base + *sl,
                                  kv_dim);
                kern_quantize_row(KERN_TYPE_F16, v + (size_t)t * kv_dim, ref_v + base + *sl,
                                  kv_dim);
            }
        }
    }
    int64_t *d_slots = dev_from(slots, 2 * (size_t)n_tok * sizeof(int64_t));
    for (int g = 0; g < 2; g++) {
        const size_t base = (size_t)(g ? lpg - 1 : 0) * layer_floats;
        must(kern_cuda_kv_store(d_k16 + base, d_v16 + base, d_k, d_v, (size_t)kv_dim,
                                d_slots + (size_t)g * n_tok, n_tok, kv_dim, g_stream),
             "kern_cuda_kv_store (grouped)");
    }
    to_host(k16, d_k16, pool_n * sizeof(uint16_t));
    to_host(v16, d_v16, pool_n * sizeof(uint16_t));
    size_t bad = 0;
    for (size_t i = 0; i < pool_n; i++) {
        if ((k16[i] != ref_k[i] || v16[i] != ref_v[i]) && bad < 3)
            fprintf(stderr, "    half %zu: gpu %04x/%04x, cpu %04x/%04x\n", i, k16[i], v16[i],
                    ref_k[i], ref_v[i]);
        bad += (k16[i] != ref_k[i]) + (v16[i] != ref_v[i]);
    }
    report("KV_STORE_GROUPED", (double)bad, 0.0,
           "kv_dim=%d,n_tok=%d,layers 0 and %d of %d; %zu differ", kv_dim, n_tok, lpg - 1, lpg,
           bad);
    dev_free(d_k16), dev_free(d_v16), dev_free(d_k), dev_free(d_v), dev_free(d_slots);
    free(k16), free(v16), free(ref_k), free(ref_v), free(perm), free(k), free(v), free(slots);
}

void test_kv_grouped(void) {
    /* Gemma 3 1B's groups (2 layers a block, MQA of head_dim 256, a window
     * of 512): decode at 700 and 1400 (several split-K partitions, the
     * early ones wholly before the window) and at 300 (nothing released);
     * prefill of a continued chunk, a single row and a prompt from 0. */
    const pf_run dec[] = {{1, 699}, {1, 1399}, {1, 299}, {1, 0}};
    const pf_run pre[] = {{64, 900}, {1, 1400}, {200, 0}, {33, 520}};
    grp_shape g3 = {.head_dim = 256,
                    .n_kv = 1,
                    .group = 4,
                    .bs = 16,
                    .lpg = 2,
                    .layer = 1,
                    .window = 512,
                    .decode = 1};
    grouped_attn_case(&g3, dec, (int)CASES_LEN(dec));
    g3.decode = 0;
    grouped_attn_case(&g3, pre, (int)CASES_LEN(pre));
    /* Mistral-style: every layer windowed, one group of 5 layers, the
     * middle one; GQA 4 of 8 KV heads, a window of 40 (most of a context
     * released, a window's first key inside a block). */
    const pf_run dec2[] = {{1, 200}, {1, 41}, {1, 39}, {1, 300}};
    const pf_run pre2[] = {{7, 100}, {50, 60}, {1, 77}};
    grp_shape m = {.head_dim = 128,
                   .n_kv = 8,
                   .group = 4,
                   .bs = 16,
                   .lpg = 5,
                   .layer = 3,
                   .window = 40,
                   .decode = 1};
    grouped_attn_case(&m, dec2, (int)CASES_LEN(dec2));
    m.decode = 0;
    grouped_attn_case(&m, pre2, (int)CASES_LEN(pre2));
    /* Head size 64, block size 32, layer 0 of 3 (base offset 0, stride 3 layers). */
    grp_shape s64 = {.head_dim = 64,
                     .n_kv = 2,
                     .group = 2,
                     .bs = 32,
                     .lpg = 3,
                     .layer = 0,
                     .window = 24,
                     .decode = 1};
    grouped_attn_case(&s64, dec2, (int)CASES_LEN(dec2));
    s64.decode = 0;
    grouped_attn_case(&s64, pre2, (int)CASES_LEN(pre2));
    grouped_store_case(256, 40, 2);
    grouped_store_case(1024, 7, 5);
    grouped_store_case(192, 64, 3);
}

/* ---- perf ------------------------------------------------------------------------- */

typedef struct pf_perf {
    float *out, *q;
    uint16_t *k, *v;
    int32_t *bt, *runs;
    int max_blocks, n_runs, max_run;
    size_t block_stride, row_stride;
} pf_perf;

enum { PF_HEADS = 32, PF_KV = 8, PF_HD = 128, PF_BS = 16 };

static int pf_perf_call(void *ctx) {
    const pf_perf *a = ctx;
    return kern_cuda_attn_prefill(a->out, a->q, (size_t)PF_HEADS * PF_HD, a->k, a->v, a->bt,
                                  a->max_blocks, a->runs, a->n_runs, a->max_run, PF_HEADS, PF_KV,
                                  PF_HD, PF_BS, a->block_stride, a->row_stride, 0.08838835f,
                                  g_stream);
}

/* Prefill attention, llama-3-8b (32 heads, 8 KV heads of 128, block size
 * 16): one prompt of 512 and of 2048 from position 0, and 64 prompts of
 * 128; each run's blocks contiguous, the pools f16 0x3c3c (~1.06). FLOPs:
 * 2 (multiply-add) x 2 (QK and PV) x n_q x average context x head_dim x
 * heads, the causal half. Bytes: every K and V element of the contexts
 * once, q read and out written. */
void perf_attn_prefill(double copy_bw) {
    const struct { int n_runs, n; } cases[] = {{1, 512}, {1, 2048}, {64, 128}};
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        const int n_runs = cases[c].n_runs, n = cases[c].n, n_q = n_runs * n;
        pf_perf a = {.n_runs = n_runs, .max_run = n, .max_blocks = (n + PF_BS - 1) / PF_BS};
        a.row_stride = (size_t)PF_KV * PF_HD;
        a.block_stride = (size_t)PF_BS * a.row_stride;
        const size_t pool = (size_t)n_runs * a.max_blocks * a.block_stride * sizeof(uint16_t);
        const size_t q_n = (size_t)n_q * PF_HEADS * PF_HD;
        a.k = dev_alloc(pool);
        a.v = dev_alloc(pool);
        must(kern_cuda_memset(a.k, 0x3c, pool, g_stream), "kern_cuda_memset");
        must(kern_cuda_memset(a.v, 0x3c, pool, g_stream), "kern_cuda_memset");
        int32_t *bt = xmalloc((size_t)n_runs * a.max_blocks * sizeof(int32_t));
        int32_t *rv = xmalloc((size_t)n_runs * 3 * sizeof(int32_t));
        for (int i = 0; i < n_runs * a.max_blocks; i++)
            bt[i] = i;
        for (int r = 0; r < n_runs; r++) {
            rv[3 * r] = r * n;
            rv[3 * r + 1] = n;
            rv[3 * r + 2] = 0;
        }
        a.bt = dev_from(bt, (size_t)n_runs * a.max_blocks * sizeof(int32_t));
        a.runs = dev_from(rv, (size_t)n_runs * 3 * sizeof(int32_t));
        a.q = dev_random(q_n, 1.0f);
        a.out = dev_alloc(q_n * sizeof(float));
        const double kv_bytes = 2.0 * n_runs * n * PF_KV * PF_HD * sizeof(uint16_t);
        const double flops = 4.0 * n_q * ((n + 1) / 2.0) * PF_HD * PF_HEADS;
        char shape[64];
        snprintf(shape, sizeof shape, "32/8x128,n=%d,runs=%d", n, n_runs);
        const double sec = cuda_test_time(pf_perf_call, &a, "kern_cuda_attn_prefill");
        perf_line_flops("attn_prefill", shape, kv_bytes + 2.0 * (double)q_n * 4, flops, sec,
                        copy_bw, 0.0);
        dev_free(a.k), dev_free(a.v), dev_free(a.bt), dev_free(a.runs), dev_free(a.q);
        dev_free(a.out);
        free(bt), free(rv);
    }
}
