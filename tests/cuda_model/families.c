/* families.c - every model family on the CUDA backend against the CPU
 * (cuda_model.h's test_agreement): issue 33's item 2.
 *
 * For each family (a dummy shape of real widths, and the mini model of the
 * same family: mini_model.c) and each weight format, f16 and int8:
 *  1. greedy agreement: CUDA decodes n positions one token a step (its
 *     sampler, graphs on); the CPU, with the same weights and an f16 cache,
 *     evaluates the prompt and those tokens in one pass. Every logit row
 *     within the bound of the CPU's, and no greedy disagreement where the
 *     CPU's margin is clear (cuda_model.h's margin rule);
 *  2. one batch against chunked prefill (chunks of 7) on CUDA;
 *  3. three sequences interleaved token by token in one batch against each
 *     run alone, on CUDA;
 *  4. where the family has windows, that they change the logits by more than
 *     the agreement bound: the same prefill with every window removed must
 *     differ, so a backend that ignored a window would fail check 1;
 *  5. the layer recipe (f16): the CUDA pass runs each layer's steps.
 * The windowed shapes whose windows (4,096) no 256-position run reaches,
 * gemma2-2b and mistral-7b-4l, have every windowed layer's window set to 64
 * after loading (the same on both backends), so that decode, prefill and
 * the interleaved batch pass it; gemma3-1b keeps its own 512 with a
 * 600-token prompt.
 *
 * --cpu (the rehearsal without a GPU): the same code on stories260K and the
 * mini models, the CPU with f16 or int8 weights (f16 cache) against the CPU
 * with f32 weights, over fewer positions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../unit/brisk_test.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "models/model_recipe.h"
#include "models/sampler.h"
#include "tests/cuda_model/cuda_model.h"

/* Logit-error bounds of the whole model (relative L2 of a logit row against
 * the reference's), f16 and int8 weights. They are larger than one op's:
 * 16 to 30 layers of f16 activations, f16 weights and an f16 cache on the
 * GPU against f32 arithmetic on the CPU (int8: the CPU also rounds each
 * activation row to int8 blocks, the GPU keeps it f16). */
#define BOUND_F16 2e-2
#define BOUND_INT8 6e-2

/* CUDA against itself with another batch shape (checks 2 and 3): the same
 * weights, cache and kernels, but cuBLAS and the W8A16 kernels pick their
 * algorithm by the token count, so sums are ordered differently and an f16
 * rounding of an activation may land one ulp apart (1e-3 of a value); over
 * 26 layers that stays well inside 1e-2. On the CPU the two are the same
 * bits (batch invariance). */
#define BOUND_BATCH 1e-2

/* The window every windowed layer gets where the case sets one: 264
 * positions pass it four times over, and interleaved runs of 80 pass it. */
#define TEST_WINDOW 64

typedef struct fam_case {
    const char *family;
    const char *shape;  /* a dummy shape (mini: the shape whose family the mini model copies) */
    int mini;           /* 1: the shape's mini model */
    int window;         /* > 0: every windowed layer's window set to this */
    int n_prompt;       /* prompt ids before the greedy positions */
    int n_prefill;      /* positions of the batch/chunks check */
    const char *reason; /* what the family adds, for the log */
} fam_case;

/* In priority order: a timeout still leaves the first families' answers. */
static const fam_case CASES[] = {
    {"llama", "llama-3.2-1b", 0, 0, 8, 96, "the llama block, GQA 4, heads of 64"},
    {"llama", "smollm2-135m", 0, 0, 8, 96, "GQA 3, 30 layers"},
    {"qwen3", "qwen3-0.6b", 0, 0, 8, 96, "per-head q/k RMSNorm"},
    {"gemma3", "gemma3-1b", 0, 0, 600, 600,
     "embedding scale, GELU-tanh, post-norms, q/k norms, windows of 512 on 5 of 6 layers with "
     "their own RoPE base, heads of 256"},
    {"gemma2", "gemma2-2b", 0, TEST_WINDOW, 8, 160,
     "soft-caps 50/30, windows on every other layer, post-norms, heads of 256"},
    {"phi3", "phi3.5-mini-4l", 0, 0, 8, 96, "LongRoPE past its original context, heads of 96"},
    {"mistral", "mistral-7b-4l", 0, TEST_WINDOW, 8, 160, "a llama with a window on every layer"},
    {"llama", "llama-3.2-1b", 1, 0, 8, 40, "mini"},
    {"qwen3", "qwen3-0.6b", 1, 0, 8, 40, "mini"},
    {"gemma3", "gemma3-1b", 1, 16, 8, 40, "mini, windows of 16"},
    {"gemma2", "gemma2-2b", 1, 16, 8, 40, "mini, windows of 16"},
    {"phi3", "phi3.5-mini-4l", 1, 0, 8, 40, "mini, fused q/k/v and gate/up tensors"},
    {"mistral", "mistral-7b-4l", 1, 16, 8, 40, "mini, windows of 16"},
    {"qwen3moe", "qwen3-30b-a3b-4l", 1, 0, 8, 40, "mini, top 8 of 16 experts"},
    {"olmoe", "olmoe-1b-7b-4l", 1, 0, 8, 40, "mini, top 8 of 16 experts, raw weights"},
    /* Mixtures of experts at their real widths: run by --moe only (their own
     * stage of bench/gpu.sh: billions of random weights to make and a CPU
     * reference over them), the smaller first. */
    {"olmoe", "olmoe-1b-7b-4l", 0, 0, 8, 96,
     "top 8 of 64 experts of 1,024 on the device, weights not renormalised, q/k norms over all "
     "heads"},
    {"qwen3moe", "qwen3-30b-a3b-4l", 0, 0, 8, 96,
     "a mixture of experts: router and top 8 of 128 on the device, renormalised, experts of 768"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* One model of a case: the loaded model and the image a mini model
 * borrows. */
typedef struct fam_model {
    model *m;
    void *image;
} fam_model;

static void fam_model_free(fam_model *fm) {
    model_free(fm->m);
    free(fm->image);
    fm->m = NULL, fm->image = NULL;
}

/* The stories260K file (path set) or the case's model in format f, with
 * the case's window on every windowed layer. A mini model is written with
 * its window; a dummy shape's layers are changed after loading, before any
 * backend copies them. */
static int fam_model_load(fam_model *fm, const fam_case *k, const char *path, model_weights_fmt f) {
    fm->image = NULL;
    if (path)
        fm->m = cm_load(path, f);
    else if (k->mini)
        fm->m = cm_mini_model(k->shape, k->window, f, &fm->image);
    else
        fm->m = cm_load_dummy(k->shape, f);
    if (!fm->m)
        return -1;
    if (!path && !k->mini && k->window > 0) {
        const model_config *c = model_get_config(fm->m);
        for (int l = 0; l < c->n_layers; l++)
            if (model_get_weights(fm->m)->layers[l].window > 0)
                model_get_weights(fm->m)->layers[l].window = k->window;
    }
    return 0;
}

/* The largest window of m's layers (0: none). */
static int max_window(const model *m) {
    int w = 0;
    for (int l = 0; l < model_get_config(m)->n_layers; l++)
        if (model_get_weights(m)->layers[l].window > w)
            w = model_get_weights(m)->layers[l].window;
    return w;
}

/* n ids spread over the vocabulary, from BOS, salted per use. */
static void spread_ids(int32_t *out, int n, int n_vocab, unsigned salt) {
    out[0] = 1; /* BOS */
    for (int i = 1; i < n; i++)
        out[i] = (int32_t)((7919u * (unsigned)i + 13u + 104729u * salt) % (unsigned)n_vocab);
}

/* The reference side of an agreement check: a model and how a backend runs
 * it. */
typedef struct side {
    const model *m;
    model_device dev;
    model_weights_fmt w;
    int kv16;
} side;

/* Check 1. The test side (g's slot 0) decodes greedily one token a step
 * (the decode path, its sampler, graphs on) from prompt for n positions,
 * keeping each step's logits; the reference evaluates the prompt and those tokens in one
 * pass (teacher forcing) and at every position says what greedy would pick.
 * Checks: the test side's sampled token is the argmax of its own logits
 * (exact), every row is within bound of the reference's, and no counted
 * position disagrees. Prints one line. */
static void agree_greedy(const char *label, cm_rig *g, const side *ref, const int32_t *prompt,
                         int n_prompt, int n, double bound) {
    int ctx = (n_prompt + n + 15) / 16 * 16;
    int nv = g->n_vocab;
    float *rows = malloc(sizeof(float) * (size_t)n * nv);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_prompt + n));
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)n_prompt);
    model_sampling sp = model_sampling_default();
    sp.temperature = 0.0f;
    model_sampler *smp = model_sampler_create(&sp, nv);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_prompt), *seq = calloc((size_t)n_prompt, 4);
    for (int i = 0; i < n_prompt; i++)
        pos[i] = i;
    model_batch b = {n_prompt, toks, pos, seq, NULL, NULL};
    int n_out = 0, rc = model_backend_forward(g->be, g->kv, &b, &n_out), made = 0, self = 0;
    while (rc == 0 && made < n) {
        const float *row = NULL;
        if ((rc = model_backend_logits(g->be, n_out - 1, &row)) < 0)
            break;
        memcpy(rows + (size_t)made * nv, row, sizeof(float) * (size_t)nv);
        model_sample_job job = {
            .row = n_out - 1, .sampler = smp, .hist = toks, .n_hist = n_prompt + made};
        int32_t id;
        if ((rc = model_backend_sample(g->be, &job, 1, &id)) < 0)
            break;
        self += id == cm_argmax(rows + (size_t)made * nv, nv);
        toks[n_prompt + made++] = id;
        int32_t p = n_prompt + made - 1, s0 = 0;
        model_batch d = {1, &toks[p], &p, &s0, NULL, NULL};
        if (made < n)
            rc = model_backend_forward(g->be, g->kv, &d, &n_out);
    }
    model_sampler_free(smp);
    free(pos), free(seq);
    CHECK(rc == 0 && made == n, "%s: decode rc %d (%s), %d of %d", label, rc,
          kern_cuda_last_error(), made, n);
    cm_rig r;
    int total = n_prompt + n - 1, n_ref = 0;
    if (made == n && cm_rig_open(&r, ref->m, ref->dev, ref->w, total, ctx, 1, 1, ref->kv16) == 0) {
        /* Only the rows of the generated positions are kept. */
        float *ref_rows = cm_logits(&r, toks, total, total, 0, n_prompt - 1, 1, &n_ref);
        CHECK(ref_rows && n_ref == n, "%s: reference pass (%d rows)", label, n_ref);
        if (ref_rows && n_ref == n) {
            int first_bad = -1, bad = 0, counted = 0;
            double worst = 0, sum = 0;
            for (int i = 0; i < n; i++) {
                const float *c = ref_rows + (size_t)i * nv;
                double rel = cm_rel_err(rows + (size_t)i * nv, c, nv);
                sum += rel;
                if (rel > worst || rel != rel)
                    worst = rel;
                if (cm_clear_margin(c, nv, bound)) {
                    counted++;
                    if (toks[n_prompt + i] != cm_argmax(c, nv) && bad++ == 0)
                        first_bad = i;
                }
            }
            printf("test_cuda_model: %s: %d positions, sampled == own argmax %d/%d; logits vs "
                   "reference: max rel L2 %.2e, mean %.2e (bound %.0e); greedy disagreements %d "
                   "of %d positions with margin > %.0f x bound x rms (first at %d)\n",
                   label, n, self, n, worst, sum / n, bound, bad, counted, CM_MARGIN_K, first_bad);
            CHECK(self == n, "%s: the sampler's greedy token is its own logits' argmax (%d/%d)",
                  label, self, n);
            CHECK(worst <= bound, "%s: logits within %.0e of the reference (%.2e)", label, bound,
                  worst);
            CHECK(bad == 0, "%s: %d greedy disagreements outside near-ties (first at position %d)",
                  label, bad, first_bad);
            CHECK(counted > 0, "%s: no position has a clear margin (the check would be empty)",
                  label);
        }
        free(ref_rows);
    } else if (made == n) {
        CHECK(0, "%s: reference backend", label);
    }
    cm_rig_close(&r);
    free(rows), free(toks);
}

/* Checks 2 and 4, on g's slots 0 and 1: P positions prefilled in one batch
 * and in chunks of 7, rows kept every `stride` positions; with windows,
 * the same batch on a rig built after every window was removed (a backend
 * copies the windows when it is made) must differ somewhere past the window
 * by more than twice the agreement bound. */
static void batch_vs_chunks(const char *label, cm_rig *g, model *m, model_device dev,
                            model_weights_fmt w, int P, double agree_bound) {
    const model_config *c = model_get_config(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)P);
    spread_ids(toks, P, c->n_vocab, 1);
    int stride = P > 200 ? 4 : 1, n1 = 0, n7 = 0;
    float *one = cm_logits(g, toks, P, P, 0, 0, stride, &n1);
    float *seven = cm_logits(g, toks, P, 7, 1, 0, stride, &n7);
    CHECK(one && seven && n1 == n7, "%s: prefill passes", label);
    int win = max_window(m);
    if (one && seven && n1 == n7) {
        double worst;
        int counted,
            bad = cm_compare_rows(one, seven, n1, c->n_vocab, BOUND_BATCH, &worst, &counted);
        printf("test_cuda_model: %s: prefill of %d in one batch vs chunks of 7: %d rows, max rel "
               "L2 %.2e (bound %.0e), top-1 disagreements %d of %d clear\n",
               label, P, n1, worst, BOUND_BATCH, bad, counted);
        CHECK(worst <= BOUND_BATCH && bad == 0, "%s: batch vs chunks: %.2e, %d of %d", label, worst,
              bad, counted);
    }
    if (one && n1 > 0 && win > 0 && win < P) {
        int *saved = malloc(sizeof(int) * (size_t)c->n_layers);
        for (int l = 0; l < c->n_layers; l++) {
            saved[l] = model_get_weights(m)->layers[l].window;
            model_get_weights(m)->layers[l].window = 0;
        }
        int nf = 0;
        float *full = NULL;
        cm_rig f;
        if (cm_rig_open(&f, m, dev, w, P, (P + 15) / 16 * 16, 1, 1, 1) == 0)
            full = cm_logits(&f, toks, P, P, 0, 0, stride, &nf);
        cm_rig_close(&f);
        for (int l = 0; l < c->n_layers; l++)
            model_get_weights(m)->layers[l].window = saved[l];
        free(saved);
        /* The last position drops the most keys (gemma3-1b's 600th, 88 of
         * 600): the largest change past the window says whether the windows
         * matter more than the bound, which is what check 1 relies on. */
        double most = 0;
        int past = 0;
        for (int i = 0; full && nf == n1 && i < n1; i++) {
            int p = i == n1 - 1 ? P - 1 : i * stride;
            if (p < win)
                continue;
            double rel =
                cm_rel_err(full + (size_t)i * c->n_vocab, one + (size_t)i * c->n_vocab, c->n_vocab);
            most = rel > most ? rel : most;
            past++;
        }
        printf("test_cuda_model: %s: windows of %d change the logits past them: up to rel L2 "
               "%.2e over %d rows (must exceed 2 x the agreement bound %.0e)\n",
               label, win, most, past, agree_bound);
        CHECK(full && past > 0 && most > 2 * agree_bound,
              "%s: windows of %d change logits by %.2e only", label, win, most);
        free(full);
    }
    free(one), free(seven), free(toks);
}

/* Check 3, on g's slots 0 to 3: three sequences (the ids from offsets 0, 10
 * and 20) of L tokens interleaved token by token in one batch (row 3t + s is
 * sequence s at position t, in slot s) against each run alone in slot 3. */
static void interleaved(const char *label, cm_rig *g, int L) {
    int nv = g->n_vocab, n = 3 * L;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(L + 20)), *tok = malloc(sizeof(int32_t) * n),
            *pos = malloc(sizeof(int32_t) * n), *seq = malloc(sizeof(int32_t) * n);
    uint8_t *want = malloc((size_t)n);
    float *mixed = malloc(sizeof(float) * (size_t)n * nv);
    spread_ids(ids, L + 20, nv, 2);
    for (int i = 0; i < n; i++)
        tok[i] = ids[i / 3 + 10 * (i % 3)], pos[i] = i / 3, seq[i] = i % 3, want[i] = 1;
    int n_out = 0;
    model_batch b = {n, tok, pos, seq, want, NULL};
    int ok = model_backend_forward(g->be, g->kv, &b, &n_out) == 0 && n_out == n;
    for (int i = 0; ok && i < n; i++) {
        const float *row;
        ok = model_backend_logits(g->be, i, &row) == 0;
        if (ok)
            memcpy(mixed + (size_t)i * nv, row, sizeof(float) * (size_t)nv);
    }
    CHECK(ok, "%s: the interleaved batch (%s)", label, kern_cuda_last_error());
    double worst = 0;
    int bad = 0, counted = 0;
    float *mine = malloc(sizeof(float) * (size_t)L * nv);
    for (int s = 0; ok && s < 3; s++) {
        int n_rows = 0;
        float *alone = cm_logits(g, ids + 10 * s, L, L, 3, 0, 1, &n_rows);
        ok = alone && n_rows == L;
        CHECK(ok, "%s: sequence %d alone", label, s);
        for (int t = 0; ok && t < L; t++)
            memcpy(mine + (size_t)t * nv, mixed + (size_t)(3 * t + s) * nv,
                   sizeof(float) * (size_t)nv);
        double wst;
        int cnt;
        if (ok) {
            bad += cm_compare_rows(alone, mine, L, nv, BOUND_BATCH, &wst, &cnt);
            counted += cnt;
            worst = wst > worst ? wst : worst;
        }
        free(alone);
    }
    if (ok) {
        printf("test_cuda_model: %s: 3 sequences of %d interleaved in one batch vs alone: max rel "
               "L2 %.2e (bound %.0e), top-1 disagreements %d of %d clear\n",
               label, L, worst, BOUND_BATCH, bad, counted);
        CHECK(worst <= BOUND_BATCH && bad == 0, "%s: interleaved vs alone: %.2e, %d of %d", label,
              worst, bad, counted);
    }
    free(mine), free(mixed), free(ids), free(tok), free(pos), free(seq), free(want);
}

/* Check 5, on g's slot 0: the backend's pass runs each layer's recipe
 * (model_recipe.h), step by step, for a prompt and a decode step
 * (test_model_arch checks the CPU pass of every architecture row the same
 * way). */
static void check_recipe(const char *label, cm_rig *g, const model *m) {
    int n_layers = model_get_config(m)->n_layers;
    model_recipe *trace = calloc((size_t)n_layers, sizeof *trace);
    if (!trace) {
        CHECK(0, "%s: recipe trace", label);
        return;
    }
    int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    int ok = 1;
    for (int step = 0; step < 2; step++) {
        memset(trace, 0, (size_t)n_layers * sizeof *trace);
        model_backend_set_trace(g->be, trace);
        model_batch b = {step ? 1 : 2, tok + 2 * step, pos + 2 * step, seq, NULL, NULL};
        int n_out = 0, rc = model_backend_forward(g->be, g->kv, &b, &n_out);
        char err[256] = "";
        int good = rc == 0 && model_recipe_trace_check(m, trace, err, sizeof err) == 0;
        CHECK(good, "%s: the %s pass follows the recipe (step %d, rc %d): %s", label,
              g->be->ops->name, step, rc, err);
        ok &= good;
    }
    printf("test_cuda_model: %s: the %s pass follows the layer recipe: %s\n", label,
           g->be->ops->name, ok ? "yes" : "NO");
    model_backend_set_trace(g->be, NULL);
    free(trace);
}

static int max_int(int a, int b) {
    return a > b ? a : b;
}

/* Every check of one case (stories260K when path is set) in both formats,
 * on one rig of the test device per format (a CUDA backend uploads the
 * weights when it is made: one upload serves checks 1, 2, 3 and 5). */
static void run_case(const fam_case *k, const char *path, int cpu_only, int n) {
    static const model_weights_fmt fmts[2] = {MODEL_WEIGHTS_F16, MODEL_WEIGHTS_INT8};
    model_device dev = cpu_only ? MODEL_DEVICE_CPU : MODEL_DEVICE_CUDA;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char name[96];
    if (path)
        snprintf(name, sizeof name, "stories260K");
    else
        snprintf(name, sizeof name, "%s%s%s", k->mini ? "mini " : "", k->shape,
                 k->window > 0 && !k->mini ? " (windows of 64)" : "");
    printf("test_cuda_model: family %s: %s: %s\n", k->family, name, k->reason);
    int failed_before = bt_failed, validated = -1;
    for (int f = 0; f < 2; f++) {
        fam_model fm, fr = {0};
        if (fam_model_load(&fm, k, path, fmts[f]) < 0) {
            CHECK(0, "load %s", name);
            continue;
        }
        /* The reference: the same weights on the CPU; in the rehearsal the
         * model in f32. */
        if (cpu_only && fam_model_load(&fr, k, path, MODEL_WEIGHTS_F32) < 0) {
            CHECK(0, "load %s in f32", name);
            fam_model_free(&fm);
            continue;
        }
        const model_config *c = model_get_config(fm.m);
        validated = model_config_cuda_validated(c);
        int win = max_window(fm.m);
        /* Interleaved runs pass a short window. */
        int L = win > 0 && win < 256 ? win + 16 : 24;
        int mbt = max_int(max_int(k->n_prompt, k->n_prefill), 3 * L);
        int ctx = (max_int(max_int(k->n_prompt + n, k->n_prefill), L) + 15) / 16 * 16;
        char label[160];
        snprintf(label, sizeof label, "%s %s weights", name, f ? "int8" : "f16");
        cm_rig g;
        if (cm_rig_open(&g, fm.m, dev, fmts[f], mbt, ctx, 4, 1, 1) < 0) {
            CHECK(0, "%s: rig", label);
        } else {
            int32_t *prompt = malloc(sizeof(int32_t) * (size_t)k->n_prompt);
            spread_ids(prompt, k->n_prompt, c->n_vocab, 0);
            char agree_label[256];
            snprintf(agree_label, sizeof agree_label, "%s, %s vs CPU%s", label,
                     cpu_only ? "CPU (f16 cache)" : "CUDA",
                     cpu_only ? " f32" : " (same weights, f16 cache)");
            double bound = f ? BOUND_INT8 : BOUND_F16;
            if (f == 0)
                check_recipe(label, &g, fm.m);
            side r = {cpu_only ? fr.m : fm.m, MODEL_DEVICE_CPU,
                      cpu_only ? MODEL_WEIGHTS_F32 : fmts[f], !cpu_only};
            agree_greedy(agree_label, &g, &r, prompt, k->n_prompt, n, bound);
            batch_vs_chunks(label, &g, fm.m, dev, fmts[f], k->n_prefill, bound);
            interleaved(label, &g, L);
            free(prompt);
        }
        cm_rig_close(&g);
        fam_model_free(&fr);
        fam_model_free(&fm);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* One line per case for bench/gpu_report.py: the verdict, what
     * --device auto does with the family today (model_config_cuda_validated,
     * which a passed GPU run should turn on) and the time. */
    printf("test_cuda_model: family %s: %s: %s (%d checks failed); --device auto: %s; %.1f s\n",
           k->family, name, bt_failed == failed_before ? "PASS" : "FAIL", bt_failed - failed_before,
           validated < 0 ? "unknown"
           : validated   ? "cuda (validated)"
                         : "cpu (not validated)",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
}

/* Whether a case's shape is a mixture of experts. */
static int case_is_moe(const fam_case *k) {
    model_config c;
    return model_dummy_config(k->shape, &c) == 0 && c.n_expert > 0;
}

void test_agreement(const char *stories_gguf, int cpu_only, int moe_only, int n) {
    static const fam_case stories = {
        "llama", "stories260K", 0, 0, 1, 96, "the llama2.c model, heads of 8, an FFN of 172"};
    if (stories_gguf && !moe_only)
        run_case(&stories, stories_gguf, cpu_only, n);
    for (int i = 0; i < N_CASES; i++) {
        const fam_case *k = &CASES[i];
        int moe = case_is_moe(k);
        if (moe_only && !moe)
            continue;
        /* the real MoE shapes only under --moe; no real shape in the rehearsal */
        if (!k->mini && (cpu_only || (moe && !moe_only)))
            continue;
        run_case(k, NULL, cpu_only, n);
    }
}

int cm_families_counts(int *passed) {
    *passed = bt_passed;
    return bt_failed;
}
