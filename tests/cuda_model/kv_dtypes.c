/* kv_dtypes.c - the KV-cache dtypes against the f16 cache on one device
 * (cuda_model.h's test_kv_dtypes; issue 38's quality rule for the GPU).
 *
 * For each case (a family's dummy shape on CUDA, its mini model in the
 * --cpu rehearsal) and each quantized dtype the device runs (CUDA: int8 and
 * fp8 e4m3, one scale per position and head; CPU: q8_0 and q4_0, one per 32
 * values), two rigs over the same f16 weights, one with the f16 cache and
 * one with the dtype's, evaluate the same ids:
 *  1. prefill in chunks of 64 (the prefill attention): every position's
 *     logits;
 *  2. decode, one token a step (the decode attention; on CUDA through the
 *     decode graphs), the first DECODE_N positions.
 * The rule: where the f16 cache's top-1/top-2 margin is clear
 * (cuda_model.h's margin rule with bound QUALITY_BOUND, q4_0's
 * QUALITY_BOUND_Q4), the dtype's top-1
 * is the same at >= 99% of the positions for the 8-bit dtypes (issue 38's
 * target for q8_0, held to the GPU's int8 and fp8 too), >= 90% for q4_0;
 * the mean relative logit error is printed with the largest. Random
 * weights give few clear margins; the count says how many were judged. One
 * line per case and dtype: "test_cuda_model: kv-dtype D on S: ... PASS|FAIL". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda_model/cuda_model.h"

/* The margin rule's bound: CUDA f16's agreement bound for the 8-bit
 * dtypes, its int8 weights' for q4_0 (kv_quality.c uses the same). */
#define QUALITY_BOUND 2e-2
#define QUALITY_BOUND_Q4 6e-2
#define DECODE_N 96

typedef struct kvd_case {
    const char *shape;
    int mini;     /* 1: the shape's mini model (the rehearsal) */
    int n_prompt; /* positions of the prefill check (past gemma3's window of 512) */
} kvd_case;

static const kvd_case GPU_CASES[] = {
    {"llama-3.2-1b", 0, 512}, /* heads of 64, GQA 4 */
    {"qwen3-0.6b", 0, 512},   /* heads of 128, q/k norms */
    {"gemma3-1b", 0, 640},    /* heads of 256, windows of 512 */
    {"smollm2-135m", 0, 512}, /* GQA 3, 30 layers */
};
static const kvd_case CPU_CASES[] = {
    {"qwen3-0.6b", 1, 96}, /* mini: heads of 32 */
    {"gemma3-1b", 1, 96},  /* mini: heads of 64, windows of 16 */
};

static int kvd_passed, kvd_failed;

/* Rows at clear margins whose top-1 agrees, of counted; the mean and the
 * largest relative error. */
static void kvd_compare(const float *ref, const float *x, int rows, int nv, double bound,
                        int *agree, int *counted, double *mean, double *worst) {
    int bad = cm_compare_rows(ref, x, rows, nv, bound, worst, counted);
    *agree = *counted - bad;
    double sum = 0;
    for (int i = 0; i < rows; i++)
        sum += cm_rel_err(x + (size_t)i * nv, ref + (size_t)i * nv, nv);
    *mean = rows ? sum / rows : 0;
}

static void kvd_run(const kvd_case *k, kern_kv_dtype dt, model_device dev) {
    void *image = NULL;
    model *m = k->mini ? cm_mini_model(k->shape, 16, MODEL_WEIGHTS_F16, &image)
                       : cm_load_dummy(k->shape, MODEL_WEIGHTS_F16);
    if (!m) {
        kvd_failed++;
        printf("test_cuda_model: kv-dtype %s on %s: FAIL (load)\n", kern_kv_dtype_name(dt),
               k->shape);
        return;
    }
    const model_config *c = model_get_config(m);
    char err[160];
    if (kern_kv_check(dt, c->n_kv_heads, c->head_dim, err, sizeof err) < 0) {
        printf("test_cuda_model: kv-dtype %s on %s: skipped (%s)\n", kern_kv_dtype_name(dt),
               k->shape, err);
        model_free(m);
        free(image);
        return;
    }
    int n = k->n_prompt, ctx = (n + 15) / 16 * 16, nv = c->n_vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    ids[0] = 1;
    for (int i = 1; i < n; i++)
        ids[i] = (int32_t)((7919u * (unsigned)i + 29u) % (unsigned)nv);
    cm_rig ref, got;
    int ok = cm_rig_open_kv(&ref, m, dev, MODEL_WEIGHTS_F16, 64, ctx, 2, 1, KERN_KV_F16) == 0 &&
             cm_rig_open_kv(&got, m, dev, MODEL_WEIGHTS_F16, 64, ctx, 2, 1, dt) == 0;
    const double bound = dt == KERN_KV_Q4_0 ? QUALITY_BOUND_Q4 : QUALITY_BOUND;
    int rows_a = 0, rows_b = 0, agree_p = 0, counted_p = 0, agree_d = 0, counted_d = 0;
    double mean_p = 0, worst_p = 0, mean_d = 0, worst_d = 0;
    if (ok) {
        float *a = cm_logits(&ref, ids, n, 64, 0, 0, 1, &rows_a);
        float *b = cm_logits(&got, ids, n, 64, 0, 0, 1, &rows_b);
        ok = a && b && rows_a == rows_b;
        if (ok)
            kvd_compare(a, b, rows_a, nv, bound, &agree_p, &counted_p, &mean_p, &worst_p);
        free(a), free(b);
        int dn = n < DECODE_N ? n : DECODE_N;
        a = cm_logits(&ref, ids, dn, 1, 1, 0, 1, &rows_a);
        b = cm_logits(&got, ids, dn, 1, 1, 0, 1, &rows_b);
        ok = ok && a && b && rows_a == rows_b;
        if (ok)
            kvd_compare(a, b, rows_a, nv, bound, &agree_d, &counted_d, &mean_d, &worst_d);
        free(a), free(b);
    }
    cm_rig_close(&ref);
    cm_rig_close(&got);
    double need = dt == KERN_KV_Q4_0 ? 0.90 : 0.99;
    int pass = ok && agree_p >= need * counted_p && agree_d >= need * counted_d;
    pass ? kvd_passed++ : kvd_failed++;
    printf("test_cuda_model: kv-dtype %s on %s%s (%s, heads of %d) vs the f16 cache: prefill %d "
           "positions: top-1 %d/%d at clear margins, relative logit error mean %.2e max %.2e; "
           "decode %d: top-1 %d/%d, mean %.2e max %.2e; need %.0f%%: %s\n",
           kern_kv_dtype_name(dt), k->mini ? "mini " : "", k->shape, model_device_name(dev),
           c->head_dim, n, agree_p, counted_p, mean_p, worst_p, DECODE_N, agree_d, counted_d,
           mean_d, worst_d, need * 100, pass ? "PASS" : "FAIL");
    free(ids);
    model_free(m);
    free(image);
}

int test_kv_dtypes(int cpu_only, int *passed) {
    model_device dev = cpu_only ? MODEL_DEVICE_CPU : MODEL_DEVICE_CUDA;
    const kvd_case *cases = cpu_only ? CPU_CASES : GPU_CASES;
    int n_cases = cpu_only ? (int)(sizeof CPU_CASES / sizeof CPU_CASES[0])
                           : (int)(sizeof GPU_CASES / sizeof GPU_CASES[0]);
    for (int i = 0; i < n_cases; i++)
        for (int t = 0; t < KERN_KV_N_DTYPES; t++) {
            const kern_kv_traits *tr = kern_kv_traits_of(t);
            if (tr->bits && (cpu_only ? tr->cpu : tr->cuda))
                kvd_run(&cases[i], (kern_kv_dtype)t, dev);
        }
    *passed = kvd_passed;
    return kvd_failed;
}
