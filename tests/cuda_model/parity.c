/* parity.c - the CUDA backend does what the CPU backend does (issue 33):
 *
 *  1. Embeddings: hidden states after the output norm (ops.hidden), pooled
 *     by the serving engine itself (scheduler/engine.c: MEAN over the
 *     prompt's positions, or the LAST one, summed in double), then
 *     L2-normalised here exactly as srv_embed.c does for the default
 *     /v1/embeddings answer (that step is a static function of the server;
 *     it divides each component by the vector's norm). The same prompts run
 *     through an engine on CUDA and one on the CPU with the same f16 weights
 *     and an f16 cache; every normalised component within 1e-3 of the CPU's
 *     and cosine > 0.9999 (the bounds), for MEAN and LAST, on
 *     stories260K and the smollm2-135m dummy shape, prompts of 40 and 100
 *     tokens (100 is prefilled in two chunks, so MEAN spans steps).
 *  2. The window release on the CUDA pool: a model set up through
 *     sched_setup (as the engine does: the pool grouped by window unless
 *     release is off) generates greedily for two sequences decoded in one
 *     batch, well past its window, once with the release on and once with
 *     --no-kv-window-release; the tokens must be the same bits, the cache's
 *     window_released counter must show blocks released (and none with the
 *     release off), and kv_cache_check must hold. Shapes: stories260K with
 *     windows of 24 on four of its five layers (five groups of one layer)
 *     and on all five (one group of five: layer offsets inside a block);
 *     on a GPU also smollm2-135m with windows of 32 on five of every six
 *     layers (six groups of five) and gemma3-1b with its own 512-position
 *     windows (thirteen groups of two) past position 512. A test overrides a
 *     loaded model's windows through its layers (model_weights.layers), as a
 *     file's sliding_window metadata would set them, before the backend is
 *     made.
 *
 * With cpu_only (test_cuda_model --cpu) the same code runs with the CPU
 * backend on both sides (f16 weights and cache against f32 for the
 * embeddings; the CPU pool's release for the windows), so it is exercised
 * without a GPU. */
#include "tests/cuda_model/parity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "../unit/brisk_test.h"
#include "common/brisk_error.h"
#include "kernels/cpu/kern_pool.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "models/model.h"
#include "models/sampler.h"
#include "scheduler/engine.h"
#include "scheduler/sched_setup.h"

#define EMB_BOUND 1e-3    /* per normalised component */
#define EMB_COSINE 0.9999 /* lowest cosine */

/* A prompt of n ids: BOS (1), then ids spread over the vocabulary. */
static void make_prompt(int32_t *out, int n, int n_vocab, unsigned salt) {
    out[0] = 1;
    for (int i = 1; i < n; i++)
        out[i] = (int32_t)((7919u * (unsigned)i + 13u + 101u * salt) % (unsigned)n_vocab);
}

/* ---- embeddings through the engine ------------------------------------------------ */

typedef struct emb_res {
    float *emb; /* the final event's embedding (owned), or NULL */
    int n_emb, done;
    sched_finish finish;
    char err[160];
} emb_res;

static uv_loop_t p_loop;
static uv_async_t p_async;
static sched_engine *p_eng;
static emb_res *p_res;
static int p_n;

/* Drains the engine's events into p_res; stops the loop once every
 * sequence has its final event. */
static void p_on_async(uv_async_t *a) {
    (void)a;
    if (!p_eng)
        return; /* a wake-up left over from an engine already freed */
    for (sched_event *ev = sched_engine_drain(p_eng), *nx; ev; ev = nx) {
        nx = ev->next;
        emb_res *r = ev->user;
        if (ev->embedding) {
            free(r->emb);
            r->emb = ev->embedding;
            r->n_emb = ev->n_embedding;
            ev->embedding = NULL;
        }
        if (ev->finish != SCHED_FINISH_NONE) {
            r->done = 1;
            r->finish = ev->finish;
            snprintf(r->err, sizeof r->err, "%s", ev->err);
        }
        sched_event_free(ev);
    }
    int all = p_n > 0;
    for (int i = 0; i < p_n; i++)
        all &= p_res[i].done;
    if (all)
        uv_stop(&p_loop);
}

/* The embeddings of n prompts (pooling[i]: SCHED_POOL_MEAN or _LAST) from
 * one engine on dev: out[i] gets a malloc'd vector of the model's width
 * (the caller frees it), or NULL where the sequence did not end with one.
 * Returns the width, or -1 when the engine did not start. */
static int embed_all(const char *path, const char *dummy, model_device dev, model_weights_fmt w,
                     int kv_f16, int32_t *const *prompts, const int *lens, const int *pooling,
                     int n, float **out) {
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = path ? path : dummy; /* the engine wants one; a dummy ignores it */
    cfg.dummy = dummy;
    cfg.weights = w;
    cfg.n_threads = 0;
    cfg.max_seqs = 4;
    cfg.max_ctx = 256;
    cfg.max_batch_tokens = 64; /* a 100-token prompt takes two steps */
    cfg.kv_cache_bytes = 64ll << 20;
    cfg.prefix_caching = 0;
    cfg.kv_dtype = kv_f16 ? KERN_KV_F16 : KERN_KV_F32;
    cfg.device = dev;
    char err[256] = "";
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (sched_engine_create(&cfg, &p_async, &p_eng, err, sizeof err) < 0) {
        fprintf(stderr, "parity: engine: %s\n", err);
        return -1;
    }
    while (sched_engine_state(p_eng, NULL, 0) == SCHED_LOADING)
        uv_run(&p_loop, UV_RUN_ONCE);
    if (sched_engine_state(p_eng, err, sizeof err) != SCHED_READY ||
        !sched_engine_can_pool(p_eng)) {
        fprintf(stderr, "parity: engine on %s: %s\n", model_device_name(dev),
                err[0] ? err : "no hidden states");
        sched_engine_free(p_eng);
        p_eng = NULL;
        return -1;
    }
    emb_res *res = calloc((size_t)n, sizeof *res);
    int dim = model_get_config(sched_engine_model(p_eng))->dim, submitted = 0;
    p_res = res;
    p_n = res ? n : 0;
    for (int i = 0; res && i < n; i++) {
        sched_seq_params p;
        memset(&p, 0, sizeof p);
        p.prompt = malloc((size_t)lens[i] * sizeof *p.prompt);
        if (p.prompt)
            memcpy(p.prompt, prompts[i], (size_t)lens[i] * sizeof *p.prompt);
        p.n_prompt = lens[i];
        p.max_tokens = 1;
        p.sampling = model_sampling_default();
        p.logprobs = -1;
        p.pooling = pooling[i];
        p.user = &res[i];
        if (!p.prompt || sched_engine_submit(p_eng, &p) < 0) {
            sched_seq_params_free(&p);
            res[i].done = 1;
            snprintf(res[i].err, sizeof res[i].err, "submit refused");
        } else {
            submitted++;
        }
    }
    if (submitted > 0)
        uv_run(&p_loop, UV_RUN_DEFAULT);
    for (int i = 0; res && i < n; i++) {
        if (res[i].finish == SCHED_FINISH_STOP && res[i].emb && res[i].n_emb == dim) {
            out[i] = res[i].emb;
        } else {
            fprintf(stderr, "parity: sequence %d on %s: finish %s, %d floats: %s\n", i,
                    model_device_name(dev), sched_finish_name(res[i].finish), res[i].n_emb,
                    res[i].err);
            free(res[i].emb);
        }
    }
    sched_engine_free(p_eng);
    p_eng = NULL;
    p_res = NULL;
    p_n = 0;
    free(res);
    return dim;
}

/* One embedding against its reference, normalised as srv_embed.c does. */
static void emb_compare(const char *label, const float *got, const float *ref, int dim) {
    double ng = 0, nr = 0, dot = 0, raw = 0, top = 0;
    for (int d = 0; d < dim; d++) {
        ng += (double)got[d] * got[d];
        nr += (double)ref[d] * ref[d];
        dot += (double)got[d] * ref[d];
        raw = fmax(raw, fabs((double)got[d] - ref[d]));
        top = fmax(top, fabs((double)ref[d]));
    }
    double worst = 0;
    for (int d = 0; ng > 0 && nr > 0 && d < dim; d++) {
        float a = (float)(got[d] / sqrt(ng)), b = (float)(ref[d] / sqrt(nr));
        worst = fmax(worst, fabs((double)a - b));
    }
    double cosine = ng > 0 && nr > 0 ? dot / sqrt(ng * nr) : 0.0;
    int pass = ng > 0 && nr > 0 && worst <= EMB_BOUND && cosine > EMB_COSINE;
    printf("test_cuda_model: parity embeddings %s: max |component diff| %.2e after L2 "
           "normalisation (bound %.0e), cosine %.8f (bound %.4f); raw max |diff| %.2e, max "
           "|component| %.2e: %s\n",
           label, worst, EMB_BOUND, cosine, EMB_COSINE, raw, top, pass ? "PASS" : "FAIL");
    CHECK(pass, "%s: embeddings within %.0e (%.2e), cosine %.8f", label, EMB_BOUND, worst, cosine);
}

/* MEAN and LAST of prompts of 40 and 100 tokens: the test device (CUDA, or
 * the CPU with f16 weights and cache) against the CPU reference. */
static void test_embeddings(const char *name, const char *path, const char *dummy, int cpu_only) {
    model_config c;
    int n_vocab = 512;
    if (dummy && model_dummy_config(dummy, &c) == 0)
        n_vocab = c.n_vocab;
    enum { N = 4 };
    int32_t p40[40], p100[100];
    make_prompt(p40, 40, n_vocab, 1);
    make_prompt(p100, 100, n_vocab, 2);
    int32_t *const prompts[N] = {p40, p40, p100, p100};
    const int lens[N] = {40, 40, 100, 100};
    const int pooling[N] = {SCHED_POOL_MEAN, SCHED_POOL_LAST, SCHED_POOL_MEAN, SCHED_POOL_LAST};
    float *got[N], *ref[N];
    model_device dev = cpu_only ? MODEL_DEVICE_CPU : MODEL_DEVICE_CUDA;
    int dg = embed_all(path, dummy, dev, MODEL_WEIGHTS_F16, 1, prompts, lens, pooling, N, got);
    int dr =
        embed_all(path, dummy, MODEL_DEVICE_CPU, cpu_only ? MODEL_WEIGHTS_F32 : MODEL_WEIGHTS_F16,
                  !cpu_only, prompts, lens, pooling, N, ref);
    CHECK(dg > 0 && dg == dr, "%s: both engines ran (width %d and %d)", name, dg, dr);
    for (int i = 0; i < N; i++) {
        char label[160];
        snprintf(label, sizeof label, "%s %s, %d tokens, %s vs CPU%s", name,
                 pooling[i] == SCHED_POOL_MEAN ? "mean" : "last", lens[i],
                 cpu_only ? "CPU f16" : "CUDA", cpu_only ? " f32" : " (same f16 weights)");
        if (dg > 0 && dg == dr && got[i] && ref[i])
            emb_compare(label, got[i], ref[i], dg);
        else
            CHECK(0, "%s: an embedding is missing", label);
        free(got[i]);
        free(ref[i]);
    }
}

/* ---- the window release ----------------------------------------------------------- */

typedef struct win_case {
    const char *name;
    const char *path, *dummy; /* a GGUF, or a dummy shape */
    int window;  /* > 0: the layers' windows set to it (pattern below); 0: the model's own */
    int pattern; /* with window: every pattern-th layer global; 0: every layer windowed */
    int ctx, mbt;
    int n_prompt[2];
    int n_gen;
} win_case;

/* Two sequences: each prompt prefilled in chunks of mbt, then n_gen greedy
 * tokens each, the two decoded in one batch a step (a graph replay on
 * CUDA). toks: [2][n_gen]. The cache's shape and released-block count come
 * back. Returns 0, or a negative code (with the reason printed). */
static int win_generate(sched_setup *st, const win_case *w, int32_t *toks, kv_cache_shape *sh,
                        long long *released) {
    const int nv = model_get_config(st->m)->n_vocab, np0 = w->n_prompt[0], np1 = w->n_prompt[1];
    int max_np = np0 > np1 ? np0 : np1, rc = 0, n_out = 0;
    int32_t *hist[2], n_hist[2], pos[64], seq[64];
    model_sampler *smp[2];
    model_sampling sp = model_sampling_default();
    sp.temperature = 0.0f;
    if (w->mbt > 64)
        return BRISK_EINVAL;
    for (int s = 0; s < 2; s++) {
        hist[s] = malloc(sizeof(int32_t) * (size_t)(max_np + w->n_gen + 1));
        smp[s] = model_sampler_create(&sp, nv);
        if (!hist[s] || !smp[s])
            rc = BRISK_ENOMEM;
        else
            make_prompt(hist[s], w->n_prompt[s], nv, (unsigned)s + 3);
        n_hist[s] = w->n_prompt[s];
    }
    /* Prefill: chunks of at most mbt positions (the grow the cache's window
     * groups were sized for), the last chunk's last row sampled. */
    for (int s = 0; rc == 0 && s < 2; s++) {
        for (int p0 = 0; rc == 0 && p0 < n_hist[s]; p0 += w->mbt) {
            int k = n_hist[s] - p0 < w->mbt ? n_hist[s] - p0 : w->mbt;
            for (int i = 0; i < k; i++)
                pos[i] = p0 + i, seq[i] = s;
            if ((rc = kv_cache_seq_grow(st->kv, s, k)) < 0)
                break;
            model_batch b = {k, hist[s] + p0, pos, seq, NULL, NULL};
            if ((rc = model_backend_forward(st->be, st->kv, &b, &n_out)) < 0)
                break;
            kv_cache_seq_set_pos(st->kv, s, p0 + k);
        }
        model_sample_job job = {
            .row = n_out - 1, .sampler = smp[s], .hist = hist[s], .n_hist = n_hist[s]};
        int32_t id = 0;
        if (rc == 0 && (rc = model_backend_sample(st->be, &job, 1, &id)) == 0) {
            toks[s * w->n_gen] = id;
            hist[s][n_hist[s]++] = id;
        }
    }
    /* Decode: both sequences in one batch of two rows a step. */
    for (int t = 1; rc == 0 && t < w->n_gen; t++) {
        int32_t tok[2];
        uint8_t want[2] = {1, 1};
        for (int s = 0; rc == 0 && s < 2; s++) {
            tok[s] = hist[s][n_hist[s] - 1];
            pos[s] = n_hist[s] - 1;
            seq[s] = s;
            rc = kv_cache_seq_grow(st->kv, s, 1);
        }
        model_batch b = {2, tok, pos, seq, want, NULL};
        if (rc == 0)
            rc = model_backend_forward(st->be, st->kv, &b, &n_out);
        model_sample_job jobs[2];
        int32_t ids[2];
        for (int s = 0; rc == 0 && s < 2; s++) {
            kv_cache_seq_set_pos(st->kv, s, n_hist[s]);
            jobs[s] = (model_sample_job){
                .row = s, .sampler = smp[s], .hist = hist[s], .n_hist = n_hist[s]};
        }
        if (rc == 0)
            rc = model_backend_sample(st->be, jobs, 2, ids);
        for (int s = 0; rc == 0 && s < 2; s++) {
            toks[s * w->n_gen + t] = ids[s];
            hist[s][n_hist[s]++] = ids[s];
        }
    }
    if (rc < 0)
        fprintf(stderr, "parity: %s: generation failed: %s (%s)\n", w->name, brisk_strerror(rc),
                kern_cuda_last_error());
    kv_cache_get_shape(st->kv, sh);
    kv_cache_stats kst;
    kv_cache_get_stats(st->kv, &kst);
    *released = kst.window_released;
    if (rc == 0 && kv_cache_check(st->kv) != 0)
        rc = BRISK_EINVAL;
    for (int s = 0; s < 2; s++) {
        kv_cache_seq_release(st->kv, s);
        free(hist[s]);
        model_sampler_free(smp[s]);
    }
    return rc;
}

/* Release on, then off, on one loaded model (sched_setup_finish twice):
 * the same tokens, blocks released only with the release on. */
static void test_window(const win_case *w, int cpu_only, kern_pool *pool) {
    model_device dev = cpu_only ? MODEL_DEVICE_CPU : MODEL_DEVICE_CUDA;
    sched_setup_opts so = {.model_path = w->path ? w->path : w->dummy,
                           .dummy = w->dummy,
                           .weights = MODEL_WEIGHTS_F16,
                           .device = dev,
                           .pool = pool,
                           .max_batch_tokens = w->mbt,
                           .max_ctx = w->ctx,
                           .max_seqs = 2,
                           .block_size = 16,
                           .gpu_memory_utilization = 0.5,
                           .cuda_graphs = 1,
                           .kv_dtype = KERN_KV_F16};
    sched_setup st;
    char err[256] = "";
    if (sched_setup_load(&so, &st, err, sizeof err) < 0) {
        CHECK(0, "%s: load: %s", w->name, err);
        return;
    }
    const model_config *c = model_get_config(st.m);
    if (w->window > 0) /* the layers' windows, as a file's metadata would set them */
        for (int l = 0; l < c->n_layers; l++)
            model_get_weights(st.m)->layers[l].window =
                w->pattern > 0 && (l + 1) % w->pattern == 0 ? 0 : w->window;
    /* Room for both contexts whole (the release off): every layer's rows of
     * ctx positions, K and V in f16, twice, and a quarter more. */
    so.kv_cache_bytes =
        (long long)w->ctx * c->n_layers * c->n_kv_heads * c->head_dim * 2 * 2 * 2 * 5 / 4;
    int32_t *toks[2] = {malloc(sizeof(int32_t) * 2 * (size_t)w->n_gen),
                        malloc(sizeof(int32_t) * 2 * (size_t)w->n_gen)};
    kv_cache_shape sh[2];
    long long rel[2] = {-1, -1};
    int rc[2] = {BRISK_ENOMEM, BRISK_ENOMEM};
    for (int off = 0; off < 2 && toks[0] && toks[1]; off++) {
        so.no_window_release = off;
        if (sched_setup_finish(&so, &st, err, sizeof err) < 0) { /* frees the model too */
            CHECK(0, "%s: setup (release %s): %s", w->name, off ? "off" : "on", err);
            break;
        }
        rc[off] = win_generate(&st, w, toks[off], &sh[off], &rel[off]);
        kv_cache_free(st.kv); /* the model stays for the second setup */
        model_backend_free(st.be);
        st.kv = NULL;
        st.be = NULL;
    }
    sched_setup_free(&st); /* the model (nothing, after a failed finish) */
    if (rc[0] == 0 && rc[1] == 0) {
        int same = 0;
        while (same < 2 * w->n_gen && toks[0][same] == toks[1][same])
            same++;
        int pass = same == 2 * w->n_gen && rel[0] > 0 && rel[1] == 0 && sh[0].n_window_groups > 0 &&
                   sh[1].n_groups == 1;
        printf("test_cuda_model: parity window release %s on %s: %d groups (%d windowed) of %d "
               "layers, 2 x %d greedy tokens, %d/%d the same as with the release off; %lld "
               "blocks released (off: %lld): %s\n",
               w->name, cpu_only ? "the CPU" : "CUDA", sh[0].n_groups, sh[0].n_window_groups,
               sh[0].layers_per_group, w->n_gen, same, 2 * w->n_gen, rel[0], rel[1],
               pass ? "PASS" : "FAIL");
        CHECK(pass, "%s: release on == off (%d/%d), released %lld/%lld, %d window groups", w->name,
              same, 2 * w->n_gen, rel[0], rel[1], sh[0].n_window_groups);
    } else {
        printf("test_cuda_model: parity window release %s on %s: runs failed (rc %d, %d): FAIL\n",
               w->name, cpu_only ? "the CPU" : "CUDA", rc[0], rc[1]);
        CHECK(0, "%s: runs (rc %d, %d)", w->name, rc[0], rc[1]);
    }
    free(toks[0]);
    free(toks[1]);
}

/* ---- entry -------------------------------------------------------------------------- */

int test_cuda_parity(const char *stories_gguf, int cpu_only) {
    uv_loop_init(&p_loop);
    uv_async_init(&p_loop, &p_async, p_on_async);
    if (stories_gguf)
        test_embeddings("stories260K", stories_gguf, NULL, cpu_only);
    test_embeddings("smollm2-135m", NULL, "smollm2-135m", cpu_only);
    uv_close((uv_handle_t *)&p_async, NULL);
    uv_run(&p_loop, UV_RUN_DEFAULT);
    uv_loop_close(&p_loop);

    /* Windows of 24 with chunks of 8: a window group holds at most
     * ceil((24 - 1 + 8) / 16) + 1 = 3 blocks of a 16-block context, so the
     * cache groups; 120 tokens after prompts of 20 and 33 pass the window
     * several times over. smollm2-135m: 30 layers, 25 windowed and 5 global,
     * groups of gcd(25, 5) = 5. gemma3-1b: 22 local and 4 global layers,
     * groups of 2; a context of 768 lets its 512-position window (40
     * blocks at most with chunks of 16) release, prompts of 560 and 530. */
    const win_case cases[] = {
        {"stories260K, windows of 24 on 4 of 5 layers",
         stories_gguf,
         NULL,
         24,
         3,
         256,
         8,
         {20, 33},
         120},
        {"stories260K, windows of 24 on every layer",
         stories_gguf,
         NULL,
         24,
         0,
         256,
         8,
         {20, 33},
         120},
        {"smollm2-135m, windows of 32 on 5 of 6 layers",
         NULL,
         "smollm2-135m",
         32,
         6,
         256,
         16,
         {40, 23},
         120},
        {"gemma3-1b, its own windows of 512", NULL, "gemma3-1b", 0, 0, 768, 16, {560, 530}, 64},
    };
    kern_pool *pool = kern_pool_create(0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!cases[i].path && !cases[i].dummy)
            continue; /* stories260K not converted */
        if (cpu_only && cases[i].dummy)
            continue; /* the rehearsal: the small model's cases */
        test_window(&cases[i], cpu_only, pool);
    }
    kern_pool_free(pool);
    printf("test_cuda_model: parity: %d passed, %d failed\n", bt_passed, bt_failed);
    return bt_failed;
}
